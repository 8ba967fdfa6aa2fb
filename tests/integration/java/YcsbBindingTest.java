/*
 * YcsbBindingTest: drive a live sabled through the MongoDB Java driver 3.x
 * exactly the way YCSB 0.17's "mongodb" binding (site.ycsb.db.MongoDbClient)
 * uses it: a MongoClientURI built from the mongodb.url property, one shared
 * MongoClient, database "ycsb" with primary read preference and the URL's
 * write concern, collection "usertable", documents {_id: "user<n>",
 * field0..field9: 100-byte binary}, and the binding's insert (single,
 * batched insertMany unordered, upsert via replaceOne / bulk ReplaceOneModel),
 * read (find by _id, optional projection, first()), update (updateOne $set),
 * scan (find _id >= start, sort _id ascending, limit n) and delete
 * (deleteOne by _id) calls, from one thread and from 16 threads, with
 * acknowledged (w=1) and unacknowledged (w=0) write concerns.
 *
 * Written from scratch for Sable (no YCSB code).  Usage:
 *   java -cp <driver jars>:<classes> YcsbBindingTest mongodb://127.0.0.1:PORT [OPTIONS]
 * OPTIONS are URL options added to every mongodb.url the test builds, as a
 * YCSB user adds them (seed 002: a replica set with a user):
 *   YcsbBindingTest mongodb://ycsb:PW@127.0.0.1:P1,127.0.0.1:P2 replicaSet=rs0&authSource=admin
 * The raw-socket handshake phase talks to the first host.
 * Prints "FAIL ..." lines and ends with "YcsbBindingTest: N passed, M failed";
 * the exit status is non-zero when anything failed.
 *
 * The phases are grouped by concern in classes that extend YcsbSupport
 * (bookkeeping, the data, the binding, the shared model):
 * YcsbConnectionTest (the handshake, driver commands, the URL's options),
 * YcsbCrudTest (single-threaded CRUD against a model, large documents) and
 * YcsbThreadsTest (16 threads sharing one MongoClient); this class runs them
 * in order and checks the final state.  run.sh compiles them together.
 */

import com.mongodb.WriteConcern;

import org.bson.Document;

import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;

public class YcsbBindingTest extends YcsbSupport {

    static void phaseFinalState(Binding b) {
        startPhase("final state");
        try {
            long n = b.coll().count();
            check(n == STATIC.size() + THREAD_RECORDS.get(), "final count " + n + " want " + (STATIC.size() + THREAD_RECORDS.get()));
            // every static record still intact
            int bad = 0;
            for (Map.Entry<String, Map<String, byte[]>> e : STATIC.entrySet()) {
                String d = diff(b.read(e.getKey(), null), e.getKey(), e.getValue(), null);
                if (d != null && ++bad <= 3) {
                    check(false, "static record changed: " + d);
                }
            }
            check(bad == 0, bad + " static records changed");
            checkScan("final full scan", b.scan("user", 1000, null), STATIC, "user", 1000, null);
        } catch (Throwable t) {
            threw("final verification", t);
        }
        try {
            // No cursor of the test's left open on the server.  A replica-set
            // primary also holds its members' oplog cursors, so count those of
            // ycsb.* only, through $currentOp's idle cursors.
            Document r = b.client.getDatabase("admin").runCommand(new Document("aggregate", 1)
                    .append("pipeline", java.util.Arrays.asList(
                            new Document("$currentOp", new Document("allUsers", true).append("idleCursors", true)),
                            new Document("$match", new Document("type", "idleCursor")
                                    .append("ns", new org.bson.BsonRegularExpression("^ycsb\\.")))))
                    .append("cursor", new Document()));
            java.util.List<?> idle = (java.util.List<?>) ((Document) r.get("cursor")).get("firstBatch");
            System.out.println("   idle cursors on ycsb.*: " + idle.size());
            check(idle.isEmpty(), "no cursors left open on the server: " + idle);
            if (!REPLSET) {
                Document ss = b.client.getDatabase("admin").runCommand(new Document("serverStatus", 1));
                Object total = ((Document) ((Document) ((Document) ss.get("metrics")).get("cursor")).get("open")).get("total");
                System.out.println("   serverStatus metrics.cursor.open.total = " + total);
                check(total instanceof Number && ((Number) total).longValue() == 0,
                        "no cursors open on the standalone: metrics.cursor.open.total = " + total);
            }
        } catch (Throwable t) {
            threw("open cursors", t);
        }
    }

    static boolean REPLSET;
    static final AtomicLong THREAD_RECORDS = new AtomicLong();

    // ------------------------------------------------------------------

    public static void main(String[] args) {
        DRIVER_LOG.setLevel(Level.WARNING);
        if (args.length < 1) {
            System.err.println("usage: YcsbBindingTest mongodb://[USER:PW@]HOST:PORT[,HOST:PORT...] [URL-OPTIONS]");
            System.exit(2);
        }
        String base = args[0].replaceAll("/+$", "");
        long budget = Long.parseLong(System.getenv().getOrDefault("YCSB_TEST_BUDGET_MS", "50000"));
        Thread watchdog = new Thread(() -> {
            sleep(budget);
            check(false, "watchdog: still running after " + budget + "ms, stuck in phase '" + phase + "'");
            for (Map.Entry<Thread, StackTraceElement[]> e : Thread.getAllStackTraces().entrySet()) {
                if (e.getKey().getName().equals("main")) {
                    System.out.println("   main thread at:");
                    for (int i = 0; i < Math.min(12, e.getValue().length); i++) {
                        System.out.println("     " + e.getValue()[i]);
                    }
                }
            }
            finish();
        }, "watchdog");
        watchdog.setDaemon(true);
        watchdog.start();

        String extra = args.length > 1 && !args[1].isEmpty() ? "&" + args[1] : "";
        String hostPort = base.replaceFirst("^mongodb://", "").replaceFirst("^[^@]*@", "").split(",")[0];
        String host = hostPort.substring(0, hostPort.lastIndexOf(':'));
        int port = Integer.parseInt(hostPort.substring(hostPort.lastIndexOf(':') + 1));

        String urlW1 = base + "/ycsb?w=1" + extra;
        String urlW0 = base + "/ycsb?w=0" + extra;
        String urlPool = base + "/ycsb?maxPoolSize=4&w=1" + extra;
        String urlJournal = base + "/ycsb?w=1&journal=true" + extra;

        java.util.regex.Matcher set = java.util.regex.Pattern.compile("(?:^|&)replicaSet=([^&]+)").matcher(extra);
        REPLSET = set.find();
        YcsbConnectionTest.phaseRawHandshake(host, port, REPLSET ? set.group(1) : null);

        Random rnd = new Random(42);
        Binding b;
        try {
            startPhase("init: MongoClientURI " + urlW1);
            b = new Binding(urlW1);
            check(b.writeConcern.equals(WriteConcern.W1) || Integer.valueOf(1).equals(b.writeConcern.getWObject()),
                    "w=1 parsed: " + b.writeConcern);
            check(b.database.getName().equals("ycsb"), "database from URL is ycsb");
        } catch (Throwable t) {
            threw("init", t);
            finish();
            return;
        }
        YcsbConnectionTest.phaseDriverCommands(b);
        YcsbCrudTest.phaseInsertOne(b, rnd, 300);
        YcsbCrudTest.phaseReads(b, rnd);
        YcsbCrudTest.phaseUpdates(b, rnd);
        YcsbCrudTest.phaseDuplicate(b, rnd);
        YcsbCrudTest.phaseInsertMany(b, rnd, 100000, 1500, 100);
        YcsbCrudTest.phaseInsertMany(b, rnd, 300000, 3000, 1000);
        YcsbCrudTest.phaseUpsert(b, rnd, 200000);
        YcsbCrudTest.phaseScans(b, rnd);
        YcsbCrudTest.phaseDeletes(b, rnd);
        YcsbCrudTest.phaseScans(b, rnd);
        YcsbCrudTest.phaseLargeDocs(b, rnd);

        STATIC = Collections.unmodifiableNavigableMap(new TreeMap<>(MODEL));
        YcsbConnectionTest.phaseUnackedSingle(urlW0, b, rnd);
        YcsbConnectionTest.phaseJournal(urlJournal, rnd);
        YcsbConnectionTest.phaseCompressed(base + "/ycsb?w=1&compressors=zlib" + extra, rnd);

        Map<String, Map<String, byte[]>> owned = YcsbThreadsTest.phaseThreadsAcked(urlW1, "77", 16, 2500);
        Map<String, Map<String, byte[]>> owned2 = YcsbThreadsTest.phaseThreadsAcked(urlPool, "776", 16, 1500);
        // prefix "776" keys are "user776tt..." and also match "user77" ranges: count them once
        Map<String, Map<String, byte[]>> ackOwned = new HashMap<>(owned);
        ackOwned.putAll(owned2);
        YcsbThreadsTest.phaseThreadsUnacked(urlW0, urlW1, ackOwned, "78", 16, 2000);
        // the records of the threaded phases that remain: recount from the server
        try {
            long n = b.coll().count(new Document("_id", new Document("$gte", "user77").append("$lt", "user78z")));
            THREAD_RECORDS.set(n - staticIn("user77", "user78z"));
        } catch (Throwable t) {
            threw("count threaded records", t);
        }
        phaseFinalState(b);
        try {
            b.close();
        } catch (Throwable t) {
            threw("MongoClient.close()", t);
        }
        finish();
    }
}
