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
 *   java -cp <driver jars>:<classes> YcsbBindingTest mongodb://127.0.0.1:PORT
 * Prints "FAIL ..." lines and ends with "YcsbBindingTest: N passed, M failed";
 * the exit status is non-zero when anything failed.
 */

import com.mongodb.MongoBulkWriteException;
import com.mongodb.MongoClient;
import com.mongodb.MongoClientURI;
import com.mongodb.MongoException;
import com.mongodb.MongoWriteException;
import com.mongodb.ReadPreference;
import com.mongodb.WriteConcern;
import com.mongodb.bulk.BulkWriteResult;
import com.mongodb.client.FindIterable;
import com.mongodb.client.MongoCollection;
import com.mongodb.client.MongoCursor;
import com.mongodb.client.MongoDatabase;
import com.mongodb.client.model.BulkWriteOptions;
import com.mongodb.client.model.InsertManyOptions;
import com.mongodb.client.model.ReplaceOneModel;
import com.mongodb.client.model.UpdateOptions;
import com.mongodb.client.model.WriteModel;
import com.mongodb.client.result.DeleteResult;
import com.mongodb.client.result.UpdateResult;

import org.bson.BsonArray;
import org.bson.BsonDocument;
import org.bson.BsonValue;
import org.bson.Document;
import org.bson.RawBsonDocument;
import org.bson.codecs.DocumentCodec;
import org.bson.types.Binary;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;

public class YcsbBindingTest {

    // ------------------------------------------------------------------
    // bookkeeping
    // ------------------------------------------------------------------

    static final AtomicInteger PASSED = new AtomicInteger();
    static final AtomicInteger FAILED = new AtomicInteger();
    static final AtomicInteger PRINTED = new AtomicInteger();
    static final int MAX_PRINTED = 80;
    static volatile String phase = "start";
    static final long T0 = System.currentTimeMillis();
    /* Keep a strong reference so the level is not lost to GC. */
    static final Logger DRIVER_LOG = Logger.getLogger("org.mongodb.driver");

    static boolean check(boolean ok, String what) {
        if (ok) {
            PASSED.incrementAndGet();
        } else {
            FAILED.incrementAndGet();
            if (PRINTED.getAndIncrement() < MAX_PRINTED) {
                System.out.println("FAIL [" + phase + "] " + what);
            }
        }
        return ok;
    }

    static void threw(String what, Throwable e) {
        check(false, what + " threw " + describe(e));
    }

    static String describe(Throwable e) {
        String s = e.getClass().getSimpleName() + ": " + e.getMessage();
        if (e instanceof MongoException) {
            s += " (code " + ((MongoException) e).getCode() + ")";
        }
        if (e.getCause() != null && e.getCause() != e) {
            s += " [cause " + e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage() + "]";
        }
        return s;
    }

    static void startPhase(String name) {
        phase = name;
        System.out.printf("-- %-44s (t=%.1fs)%n", name, (System.currentTimeMillis() - T0) / 1000.0);
    }

    static void finish() {
        int p = PASSED.get();
        int f = FAILED.get();
        System.out.println("YcsbBindingTest: " + p + " passed, " + f + " failed");
        System.out.flush();
        Runtime.getRuntime().halt(f == 0 ? 0 : 1);
    }

    // ------------------------------------------------------------------
    // the data YCSB's core workload generates
    // ------------------------------------------------------------------

    static final int FIELD_COUNT = 10;
    static final int FIELD_LENGTH = 100;
    static final String TABLE = "usertable";

    /* 64-bit FNV-1a of the record number, made non-negative: keys look like
     * YCSB's hashed (non-ordered) keys, "user" followed by up to 19 digits. */
    static String hashedKey(long n) {
        long h = 0xcbf29ce484222325L;
        for (int i = 0; i < 8; i++) {
            h ^= (n >>> (8 * i)) & 0xff;
            h *= 0x100000001b3L;
        }
        return "user" + Math.abs(h == Long.MIN_VALUE ? 0 : h);
    }

    static Map<String, byte[]> values(Random rnd) {
        Map<String, byte[]> m = new LinkedHashMap<>();
        for (int i = 0; i < FIELD_COUNT; i++) {
            m.put("field" + i, bytes(rnd));
        }
        return m;
    }

    /* Some fields (an update of a few fields). */
    static Map<String, byte[]> someValues(Random rnd) {
        Map<String, byte[]> m = new LinkedHashMap<>();
        int n = 1 + rnd.nextInt(3);
        for (int i = 0; i < n; i++) {
            m.put("field" + rnd.nextInt(FIELD_COUNT), bytes(rnd));
        }
        return m;
    }

    /* Mostly printable like YCSB's RandomByteIterator, sometimes any byte
     * (zeros included), so the binary path is exercised for real. */
    static byte[] bytes(Random rnd) {
        byte[] b = new byte[FIELD_LENGTH];
        if (rnd.nextInt(4) == 0) {
            rnd.nextBytes(b);
        } else {
            for (int i = 0; i < b.length; i++) {
                b[i] = (byte) (' ' + rnd.nextInt(95));
            }
        }
        return b;
    }

    static Set<String> randomFieldSet(Random rnd) {
        Set<String> s = new LinkedHashSet2();
        int n = 1 + rnd.nextInt(4);
        for (int i = 0; i < n; i++) {
            s.add("field" + rnd.nextInt(FIELD_COUNT));
        }
        return s;
    }

    static final class LinkedHashSet2 extends java.util.LinkedHashSet<String> {
        private static final long serialVersionUID = 1L;
    }

    // ------------------------------------------------------------------
    // the binding: the calls MongoDbClient makes, one method per operation
    // ------------------------------------------------------------------

    static final Integer INCLUDE = 1;

    static final class Binding {
        final MongoClient client;
        final MongoDatabase database;
        final WriteConcern writeConcern;
        final String url;

        Binding(String url) {
            this.url = url;
            MongoClientURI uri = new MongoClientURI(url);
            String dbName = uri.getDatabase() == null ? "ycsb" : uri.getDatabase();
            writeConcern = uri.getOptions().getWriteConcern();
            client = new MongoClient(uri);
            database = client.getDatabase(dbName)
                    .withReadPreference(ReadPreference.primary())
                    .withWriteConcern(writeConcern);
        }

        MongoCollection<Document> coll() {
            return database.getCollection(TABLE);
        }

        static Document toDocument(String key, Map<String, byte[]> values) {
            Document d = new Document("_id", key);
            for (Map.Entry<String, byte[]> e : values.entrySet()) {
                d.put(e.getKey(), e.getValue());
            }
            return d;
        }

        void insertOne(String key, Map<String, byte[]> values) {
            coll().insertOne(toDocument(key, values));
        }

        UpdateResult upsert(String key, Map<String, byte[]> values) {
            return coll().replaceOne(new Document("_id", key), toDocument(key, values),
                    new UpdateOptions().upsert(true));
        }

        void insertMany(List<Document> batch) {
            coll().insertMany(batch, new InsertManyOptions().ordered(false));
        }

        BulkWriteResult upsertMany(List<Document> batch) {
            List<WriteModel<Document>> updates = new ArrayList<>(batch.size());
            for (Document d : batch) {
                updates.add(new ReplaceOneModel<>(new Document("_id", d.get("_id")), d,
                        new UpdateOptions().upsert(true)));
            }
            return coll().bulkWrite(updates, new BulkWriteOptions().ordered(false));
        }

        Document read(String key, Set<String> fields) {
            FindIterable<Document> it = coll().find(new Document("_id", key));
            if (fields != null) {
                Document projection = new Document();
                for (String f : fields) {
                    projection.put(f, INCLUDE);
                }
                it.projection(projection);
            }
            return it.first();
        }

        UpdateResult update(String key, Map<String, byte[]> values) {
            Document set = new Document();
            for (Map.Entry<String, byte[]> e : values.entrySet()) {
                set.put(e.getKey(), e.getValue());
            }
            return coll().updateOne(new Document("_id", key), new Document("$set", set));
        }

        List<Document> scan(String startKey, int recordCount, Set<String> fields) {
            Document query = new Document("_id", new Document("$gte", startKey));
            FindIterable<Document> it = coll().find(query).sort(new Document("_id", INCLUDE)).limit(recordCount);
            if (fields != null) {
                Document projection = new Document();
                for (String f : fields) {
                    projection.put(f, INCLUDE);
                }
                it.projection(projection);
            }
            List<Document> out = new ArrayList<>();
            MongoCursor<Document> cursor = it.iterator();
            try {
                while (cursor.hasNext()) {
                    out.add(cursor.next());
                }
            } finally {
                cursor.close();
            }
            return out;
        }

        DeleteResult delete(String key) {
            return coll().withWriteConcern(writeConcern).deleteOne(new Document("_id", key));
        }

        void close() {
            client.close();
        }
    }

    // ------------------------------------------------------------------
    // comparing what came back with what was written
    // ------------------------------------------------------------------

    /* null when doc matches key + expected (restricted to fields when non-null);
     * otherwise a description of the first difference. */
    static String diff(Document doc, String key, Map<String, byte[]> expected, Set<String> fields) {
        if (doc == null) {
            return "document " + key + " not found";
        }
        if (!key.equals(doc.get("_id"))) {
            return "_id " + doc.get("_id") + " != " + key;
        }
        Set<String> want = new HashSet<>();
        want.add("_id");
        for (String f : expected.keySet()) {
            if (fields == null || fields.contains(f)) {
                want.add(f);
            }
        }
        if (!want.equals(doc.keySet())) {
            return key + ": fields " + new TreeMap<>(toMap(doc.keySet())).keySet() + " != expected "
                    + new TreeMap<>(toMap(want)).keySet();
        }
        for (String f : want) {
            if (f.equals("_id")) {
                continue;
            }
            Object v = doc.get(f);
            if (!(v instanceof Binary)) {
                return key + "." + f + " is " + (v == null ? "null" : v.getClass().getSimpleName()) + ", not Binary";
            }
            Binary b = (Binary) v;
            if (b.getType() != 0) {
                return key + "." + f + " has binary subtype " + b.getType();
            }
            if (!Arrays.equals(b.getData(), expected.get(f))) {
                return key + "." + f + " bytes differ (len " + b.getData().length + ")";
            }
        }
        return null;
    }

    static Map<String, Boolean> toMap(Set<String> s) {
        Map<String, Boolean> m = new HashMap<>();
        for (String k : s) {
            m.put(k, true);
        }
        return m;
    }

    static Map<String, byte[]> merged(Map<String, byte[]> base, Map<String, byte[]> set) {
        Map<String, byte[]> m = new LinkedHashMap<>(base);
        m.putAll(set);
        return m;
    }

    /* Scan result vs. a model: ids exactly the first n keys >= start, values equal. */
    static void checkScan(String what, List<Document> got, NavigableMap<String, Map<String, byte[]>> model,
                          String start, int n, Set<String> fields) {
        List<String> want = new ArrayList<>();
        for (String k : model.tailMap(start, true).keySet()) {
            if (want.size() == n) {
                break;
            }
            want.add(k);
        }
        List<String> ids = new ArrayList<>();
        for (Document d : got) {
            ids.add(String.valueOf(d.get("_id")));
        }
        if (!check(ids.equals(want), what + ": scan(" + start + ", " + n + ") returned " + ids.size()
                + " ids " + abbreviate(ids) + ", expected " + want.size() + " " + abbreviate(want))) {
            return;
        }
        for (Document d : got) {
            String k = (String) d.get("_id");
            String e = diff(d, k, model.get(k), fields);
            if (!check(e == null, what + ": scan value: " + e)) {
                return;
            }
        }
    }

    static String abbreviate(List<String> l) {
        if (l.size() <= 4) {
            return l.toString();
        }
        return "[" + l.get(0) + ", " + l.get(1) + ", ..., " + l.get(l.size() - 1) + "]";
    }

    // ------------------------------------------------------------------
    // raw legacy OP_QUERY: the driver's connection handshake
    // ------------------------------------------------------------------

    static final DocumentCodec CODEC = new DocumentCodec();

    static final class Reply {
        int opCode;
        int responseTo;
        int flags;
        long cursorId;
        int numberReturned;
        BsonDocument doc;
    }

    static Reply opQuery(Socket s, int requestId, String ns, Document cmd) throws IOException {
        RawBsonDocument raw = new RawBsonDocument(cmd, CODEC);
        ByteBuffer body = raw.getByteBuffer().asNIO();
        byte[] docBytes = new byte[body.remaining()];
        body.get(docBytes);
        byte[] nsBytes = ns.getBytes(StandardCharsets.UTF_8);
        int len = 16 + 4 + nsBytes.length + 1 + 4 + 4 + docBytes.length;
        ByteBuffer b = ByteBuffer.allocate(len).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(len).putInt(requestId).putInt(0).putInt(2004);
        b.putInt(0); // flags
        b.put(nsBytes).put((byte) 0);
        b.putInt(0); // numberToSkip
        b.putInt(-1); // numberToReturn
        b.put(docBytes);
        OutputStream out = s.getOutputStream();
        out.write(b.array());
        out.flush();

        DataInputStream in = new DataInputStream(s.getInputStream());
        byte[] hdr = new byte[16];
        in.readFully(hdr);
        ByteBuffer h = ByteBuffer.wrap(hdr).order(ByteOrder.LITTLE_ENDIAN);
        int rlen = h.getInt();
        h.getInt();
        Reply r = new Reply();
        r.responseTo = h.getInt();
        r.opCode = h.getInt();
        if (rlen < 16 || rlen > 48 * 1024 * 1024) {
            throw new IOException("bad reply length " + rlen);
        }
        byte[] rest = new byte[rlen - 16];
        in.readFully(rest);
        ByteBuffer rb = ByteBuffer.wrap(rest).order(ByteOrder.LITTLE_ENDIAN);
        if (r.opCode == 1) {
            r.flags = rb.getInt();
            r.cursorId = rb.getLong();
            rb.getInt(); // startingFrom
            r.numberReturned = rb.getInt();
            if (r.numberReturned >= 1) {
                byte[] d = new byte[rb.remaining()];
                rb.get(d);
                r.doc = new RawBsonDocument(d);
            }
        }
        return r;
    }

    static double okValue(BsonDocument d) {
        BsonValue v = d == null ? null : d.get("ok");
        return v != null && v.isNumber() ? v.asNumber().doubleValue() : -1;
    }

    static void phaseRawHandshake(String host, int port) {
        startPhase("handshake over legacy OP_QUERY");
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), 5000);
            s.setSoTimeout(10000);

            // 1. ismaster with client metadata, as InternalStreamConnectionInitializer sends it.
            Document client = new Document("driver",
                    new Document("name", "mongo-java-driver").append("version", "3.6.3"))
                    .append("os", new Document("type", "Linux").append("name", System.getProperty("os.name"))
                            .append("architecture", System.getProperty("os.arch"))
                            .append("version", System.getProperty("os.version")))
                    .append("platform", "Java/" + System.getProperty("java.vendor") + "/"
                            + System.getProperty("java.runtime.version"));
            Reply r = opQuery(s, 1, "admin.$cmd", new Document("ismaster", 1).append("client", client));
            check(r.opCode == 1, "ismaster reply opCode " + r.opCode + " (want OP_REPLY 1)");
            check(r.responseTo == 1, "ismaster reply responseTo " + r.responseTo);
            check(r.numberReturned == 1 && r.doc != null, "ismaster numberReturned " + r.numberReturned);
            BsonDocument d = r.doc;
            if (d != null) {
                check(okValue(d) == 1.0, "ismaster ok: " + d.toJson());
                check(d.containsKey("ismaster") && d.get("ismaster").isBoolean()
                        && d.getBoolean("ismaster").getValue(), "ismaster:true missing: " + d.toJson());
                BsonValue maxW = d.get("maxWireVersion");
                BsonValue minW = d.get("minWireVersion");
                check(maxW != null && maxW.isNumber() && maxW.asNumber().intValue() >= 6,
                        "maxWireVersion >= 6 (OP_MSG for driver 3.6): " + maxW);
                check(minW != null && minW.isNumber() && minW.asNumber().intValue() <= 6,
                        "minWireVersion <= 6 (driver 3.6 supports up to 6): " + minW);
                for (String f : new String[] {"maxBsonObjectSize", "maxMessageSizeBytes", "maxWriteBatchSize"}) {
                    check(d.containsKey(f) && d.get(f).isNumber() && d.get(f).asNumber().intValue() > 0,
                            "ismaster." + f + " = " + d.get(f));
                }
                check(!d.containsKey("setName") && !d.containsKey("msg"),
                        "standalone: no setName/msg (else not a standalone to the driver): " + d.toJson());
                check(!d.containsKey("connectionId") || d.get("connectionId").isNumber(),
                        "connectionId numeric: " + d.get("connectionId"));
                System.out.println("   ismaster: connectionId=" + d.get("connectionId") + " wire=" + minW + ".." + maxW);
            }

            // 2. buildinfo: the driver takes its ServerVersion from versionArray.
            r = opQuery(s, 2, "admin.$cmd", new Document("buildinfo", 1));
            check(r.opCode == 1 && r.responseTo == 2 && r.doc != null, "buildinfo OP_REPLY");
            d = r.doc;
            if (d != null) {
                check(okValue(d) == 1.0, "buildinfo ok: " + d.toJson());
                check(d.containsKey("version") && d.get("version").isString(), "buildinfo.version: " + d.get("version"));
                BsonValue va = d.get("versionArray");
                boolean good = va != null && va.isArray() && va.asArray().size() >= 3;
                if (good) {
                    for (int i = 0; i < 3; i++) {
                        good &= va.asArray().get(i).isInt32();
                    }
                }
                check(good, "buildinfo.versionArray: >= 3 int32 (driver reads it): " + va);
                System.out.println("   buildinfo: version=" + d.get("version") + " versionArray=" + va);
            }

            // 3. getlasterror: the driver sends it when ismaster lacks connectionId.
            r = opQuery(s, 3, "admin.$cmd", new Document("getlasterror", 1));
            check(r.opCode == 1 && r.responseTo == 3 && r.doc != null, "getlasterror OP_REPLY");
            d = r.doc;
            if (d != null) {
                check(okValue(d) == 1.0, "getlasterror ok: " + d.toJson());
                check(d.containsKey("connectionId") && d.get("connectionId").isNumber(),
                        "getlasterror.connectionId numeric: " + d.toJson());
                check(d.containsKey("err") && d.get("err").isNull(), "getlasterror err:null: " + d.toJson());
            }

            // 4. the server monitor's periodic ismaster (no metadata), on the same socket.
            r = opQuery(s, 4, "admin.$cmd", new Document("ismaster", 1));
            check(r.opCode == 1 && r.responseTo == 4 && okValue(r.doc) == 1.0, "repeat ismaster ok");
        } catch (Throwable e) {
            threw("raw OP_QUERY handshake", e);
        }
        // compressors=zlib in the URL: the driver offers compression in its ismaster
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), 5000);
            s.setSoTimeout(10000);
            Reply r = opQuery(s, 7, "admin.$cmd", new Document("ismaster", 1)
                    .append("client", new Document("driver", new Document("name", "mongo-java-driver")
                            .append("version", "3.6.3")))
                    .append("compression", Arrays.asList("zlib")));
            BsonValue c = r.doc == null ? null : r.doc.get("compression");
            check(okValue(r.doc) == 1.0 && c != null && c.isArray()
                    && c.asArray().contains(new org.bson.BsonString("zlib")),
                    "ismaster with compression:[zlib] answers compression:[zlib]: " + (r.doc == null ? null : r.doc.toJson()));
        } catch (Throwable e) {
            threw("raw OP_QUERY ismaster with compression", e);
        }
    }

    // ------------------------------------------------------------------
    // commands through the driver
    // ------------------------------------------------------------------

    static void phaseDriverCommands(Binding b) {
        startPhase("driver runCommand isMaster/buildinfo/...");
        try {
            Document d = b.database.runCommand(new Document("isMaster", 1));
            check(Boolean.TRUE.equals(d.get("ismaster")), "runCommand isMaster: " + d.toJson());
            check(d.get("maxWireVersion") instanceof Number, "isMaster maxWireVersion: " + d.toJson());
        } catch (Throwable e) {
            threw("runCommand(isMaster)", e);
        }
        try {
            Document d = b.database.runCommand(new Document("buildinfo", 1));
            check(d.get("version") instanceof String, "buildinfo.version: " + d.toJson());
            check(d.get("versionArray") instanceof List, "buildinfo.versionArray: " + d.toJson());
        } catch (Throwable e) {
            threw("runCommand(buildinfo)", e);
        }
        try {
            Document d = b.database.runCommand(new Document("getlasterror", 1));
            check(d.containsKey("err") && d.get("err") == null, "getlasterror err:null: " + d.toJson());
        } catch (Throwable e) {
            threw("runCommand(getlasterror)", e);
        }
        try {
            Document d = b.client.getDatabase("admin").runCommand(new Document("ping", 1));
            check(d.get("ok") instanceof Number && ((Number) d.get("ok")).doubleValue() == 1.0, "ping: " + d.toJson());
        } catch (Throwable e) {
            threw("runCommand(ping)", e);
        }
    }

    // ------------------------------------------------------------------
    // single-threaded CRUD, checked against an in-memory model
    // ------------------------------------------------------------------

    static final TreeMap<String, Map<String, byte[]>> MODEL = new TreeMap<>();

    static void phaseInsertOne(Binding b, Random rnd, int n) {
        startPhase("insertOne x" + n + " + read back");
        int fails = 0;
        for (int i = 0; i < n && fails < 3; i++) {
            String key = hashedKey(i);
            Map<String, byte[]> v = values(rnd);
            try {
                b.insertOne(key, v);
                MODEL.put(key, v);
            } catch (Throwable e) {
                threw("insertOne(" + key + ")", e);
                fails++;
            }
        }
        // read every record: all fields, then a projection
        int bad = 0;
        for (Map.Entry<String, Map<String, byte[]>> e : MODEL.entrySet()) {
            try {
                String d = diff(b.read(e.getKey(), null), e.getKey(), e.getValue(), null);
                if (!check(d == null, "read all fields: " + d) && ++bad > 3) {
                    break;
                }
            } catch (Throwable t) {
                threw("read(" + e.getKey() + ")", t);
                if (++bad > 3) {
                    break;
                }
            }
        }
        try {
            check(b.coll().count() == MODEL.size(), "count() after inserts = " + b.coll().count() + ", want " + MODEL.size());
        } catch (Throwable t) {
            threw("count()", t);
        }
    }

    static void phaseReads(Binding b, Random rnd) {
        startPhase("read with projections");
        List<String> keys = new ArrayList<>(MODEL.keySet());
        for (int i = 0; i < 200; i++) {
            String key = keys.get(rnd.nextInt(keys.size()));
            Set<String> fields = i % 4 == 0 ? null : randomFieldSet(rnd);
            try {
                Document doc = b.read(key, fields);
                String d = diff(doc, key, MODEL.get(key), fields);
                if (!check(d == null, "read(" + key + ", " + fields + "): " + d)) {
                    break;
                }
            } catch (Throwable t) {
                threw("read(" + key + ", " + fields + ")", t);
                break;
            }
        }
        try {
            Set<String> all = new LinkedHashSet2();
            for (int i = 0; i < FIELD_COUNT; i++) {
                all.add("field" + i);
            }
            String key = keys.get(0);
            check(diff(b.read(key, all), key, MODEL.get(key), all) == null, "read with all 10 fields projected");
            check(b.read("user-does-not-exist", null) == null, "read of a missing key returns null");
            check(b.read("user-does-not-exist", all) == null, "read (projected) of a missing key returns null");
            Set<String> missingField = new LinkedHashSet2();
            missingField.add("field99");
            Document d = b.read(key, missingField);
            check(d != null && d.keySet().equals(Collections.singleton("_id")),
                    "projection of an absent field returns only _id: " + (d == null ? null : d.toJson()));
        } catch (Throwable t) {
            threw("read edge cases", t);
        }
    }

    static void phaseUpdates(Binding b, Random rnd) {
        startPhase("updateOne $set");
        List<String> keys = new ArrayList<>(MODEL.keySet());
        for (int i = 0; i < 150; i++) {
            String key = keys.get(rnd.nextInt(keys.size()));
            Map<String, byte[]> set = i % 5 == 0 ? values(rnd) : someValues(rnd);
            try {
                UpdateResult r = b.update(key, set);
                check(r.wasAcknowledged(), "updateOne acknowledged with w=1");
                if (!check(r.getMatchedCount() == 1, "updateOne(" + key + ") matchedCount " + r.getMatchedCount())) {
                    break;
                }
                check(!r.isModifiedCountAvailable() || r.getModifiedCount() == 1,
                        "updateOne(" + key + ") modifiedCount " + r.getModifiedCount());
                MODEL.put(key, merged(MODEL.get(key), set));
                String d = diff(b.read(key, null), key, MODEL.get(key), null);
                if (!check(d == null, "read after update: " + d)) {
                    break;
                }
            } catch (Throwable t) {
                threw("updateOne(" + key + ")", t);
                break;
            }
        }
        try {
            UpdateResult r = b.update("user-missing-1", someValues(rnd));
            check(r.getMatchedCount() == 0, "updateOne of missing key matchedCount " + r.getMatchedCount());
            check(r.getUpsertedId() == null, "updateOne of missing key did not upsert");
            check(b.read("user-missing-1", null) == null, "updateOne of missing key created nothing");
            // same values again: matched 1, modified 0
            String key = keys.get(0);
            Map<String, byte[]> same = new LinkedHashMap<>();
            same.put("field0", MODEL.get(key).get("field0"));
            r = b.update(key, same);
            check(r.getMatchedCount() == 1, "no-op $set matchedCount " + r.getMatchedCount());
            check(!r.isModifiedCountAvailable() || r.getModifiedCount() == 0,
                    "no-op $set modifiedCount " + r.getModifiedCount() + " (want 0)");
        } catch (Throwable t) {
            threw("updateOne edge cases", t);
        }
    }

    static void phaseScans(Binding b, Random rnd) {
        startPhase("scan (find $gte, sort _id, limit)");
        List<String> keys = new ArrayList<>(MODEL.keySet());
        int[] lengths = {1, 2, 10, 50, 100, 101, 150, 500, 1000};
        for (int i = 0; i < 40; i++) {
            int n = i < lengths.length ? lengths[i] : 1 + rnd.nextInt(i % 3 == 0 ? 1000 : 100);
            String start;
            if (i % 5 == 4) {
                // a start key that is not a record: "user<digits>" between records
                start = keys.get(rnd.nextInt(keys.size())) + "5";
            } else {
                start = keys.get(rnd.nextInt(keys.size()));
            }
            Set<String> fields = i % 3 == 1 ? randomFieldSet(rnd) : null;
            try {
                checkScan("scan", b.scan(start, n, fields), MODEL, start, n, fields);
            } catch (Throwable t) {
                threw("scan(" + start + ", " + n + ")", t);
                break;
            }
        }
        try {
            // from the very first, from before the first, near the end, past the end
            checkScan("scan from first", b.scan(MODEL.firstKey(), 1000, null), MODEL, MODEL.firstKey(), 1000, null);
            checkScan("scan from \"user\"", b.scan("user", 20, null), MODEL, "user", 20, null);
            String nearEnd = keys.get(keys.size() - 7);
            checkScan("scan near end", b.scan(nearEnd, 100, null), MODEL, nearEnd, 100, null);
            check(b.scan("user:", 10, null).isEmpty(), "scan past the last key is empty");
            checkScan("scan near end, projected", b.scan(nearEnd, 100, Collections.singleton("field9")), MODEL,
                    nearEnd, 100, Collections.singleton("field9"));
        } catch (Throwable t) {
            threw("scan edge cases", t);
        }
    }

    static void phaseDeletes(Binding b, Random rnd) {
        startPhase("deleteOne");
        List<String> keys = new ArrayList<>(MODEL.keySet());
        Collections.shuffle(keys, rnd);
        for (int i = 0; i < 40; i++) {
            String key = keys.get(i);
            try {
                DeleteResult r = b.delete(key);
                check(r.wasAcknowledged(), "deleteOne acknowledged with w=1");
                if (!check(r.getDeletedCount() == 1, "deleteOne(" + key + ") deletedCount " + r.getDeletedCount())) {
                    break;
                }
                MODEL.remove(key);
                check(b.read(key, null) == null, "read after deleteOne(" + key + ") is null");
                r = b.delete(key);
                check(r.getDeletedCount() == 0, "second deleteOne(" + key + ") deletedCount " + r.getDeletedCount());
            } catch (Throwable t) {
                threw("deleteOne(" + key + ")", t);
                break;
            }
        }
        try {
            check(b.coll().count() == MODEL.size(), "count() after deletes = " + b.coll().count() + ", want " + MODEL.size());
            // re-insert one deleted key (YCSB's insert after delete)
            String key = keys.get(0);
            Map<String, byte[]> v = values(rnd);
            b.insertOne(key, v);
            MODEL.put(key, v);
            check(diff(b.read(key, null), key, v, null) == null, "insertOne after deleteOne reads back");
        } catch (Throwable t) {
            threw("delete edge cases", t);
        }
    }

    static void phaseDuplicate(Binding b, Random rnd) {
        startPhase("insertOne duplicate _id");
        String key = MODEL.firstKey();
        try {
            b.insertOne(key, values(rnd));
            check(false, "insertOne of an existing _id did not fail");
        } catch (MongoWriteException e) {
            check(e.getError().getCode() == 11000, "duplicate key error code " + e.getError().getCode()
                    + ": " + e.getError().getMessage());
        } catch (Throwable t) {
            threw("insertOne duplicate (expected MongoWriteException 11000)", t);
        }
        try {
            check(diff(b.read(key, null), key, MODEL.get(key), null) == null, "record unchanged after duplicate insert");
        } catch (Throwable t) {
            threw("read after duplicate", t);
        }
    }

    static void phaseInsertMany(Binding b, Random rnd, long firstNum, int n, int batchSize) {
        startPhase("insertMany unordered, batchsize " + batchSize);
        List<Document> batch = new ArrayList<>();
        Map<String, Map<String, byte[]>> pending = new HashMap<>();
        int fails = 0;
        for (long i = firstNum; i < firstNum + n && fails < 3; i++) {
            String key = hashedKey(i);
            Map<String, byte[]> v = values(rnd);
            batch.add(Binding.toDocument(key, v));
            pending.put(key, v);
            if (batch.size() == batchSize) {
                try {
                    b.insertMany(batch);
                    MODEL.putAll(pending);
                } catch (Throwable t) {
                    threw("insertMany(" + batch.size() + " docs)", t);
                    fails++;
                }
                batch = new ArrayList<>();
                pending.clear();
            }
        }
        if (!batch.isEmpty()) {
            try {
                b.insertMany(batch);
                MODEL.putAll(pending);
            } catch (Throwable t) {
                threw("insertMany(last " + batch.size() + " docs)", t);
            }
        }
        try {
            check(b.coll().count() == MODEL.size(), "count() after insertMany = " + b.coll().count() + ", want " + MODEL.size());
            int bad = 0;
            for (long i = firstNum; i < firstNum + n; i += 7) {
                String key = hashedKey(i);
                String d = diff(b.read(key, null), key, MODEL.get(key), null);
                if (!check(d == null, "read after insertMany: " + d) && ++bad > 3) {
                    break;
                }
            }
        } catch (Throwable t) {
            threw("verify insertMany", t);
        }

        // an unordered batch with one duplicate: the others are still inserted
        List<Document> dupBatch = new ArrayList<>();
        Map<String, Map<String, byte[]>> fresh = new HashMap<>();
        for (long i = firstNum + n; i < firstNum + n + 10; i++) {
            Map<String, byte[]> v = values(rnd);
            dupBatch.add(Binding.toDocument(hashedKey(i), v));
            fresh.put(hashedKey(i), v);
        }
        String dupKey = MODEL.lastKey();
        dupBatch.add(4, Binding.toDocument(dupKey, values(rnd)));
        try {
            b.insertMany(dupBatch);
            check(false, "insertMany with a duplicate _id did not fail");
        } catch (MongoBulkWriteException e) {
            check(e.getWriteErrors().size() == 1, "one write error, got " + e.getWriteErrors());
            check(e.getWriteErrors().size() == 1 && e.getWriteErrors().get(0).getIndex() == 4
                    && e.getWriteErrors().get(0).getCode() == 11000,
                    "write error index 4 code 11000: " + e.getWriteErrors());
            check(e.getWriteResult().getInsertedCount() == 10,
                    "unordered insertMany insertedCount " + e.getWriteResult().getInsertedCount() + " (want 10)");
        } catch (Throwable t) {
            threw("insertMany with duplicate (expected MongoBulkWriteException)", t);
        }
        MODEL.putAll(fresh);
        try {
            for (Map.Entry<String, Map<String, byte[]>> e : fresh.entrySet()) {
                String d = diff(b.read(e.getKey(), null), e.getKey(), e.getValue(), null);
                if (!check(d == null, "unordered batch member after duplicate: " + d)) {
                    break;
                }
            }
            check(b.coll().count() == MODEL.size(), "count() after duplicate batch = " + b.coll().count()
                    + ", want " + MODEL.size());
        } catch (Throwable t) {
            threw("verify duplicate batch", t);
        }
    }

    static void phaseUpsert(Binding b, Random rnd, long firstNum) {
        startPhase("upsert mode: replaceOne / bulk ReplaceOneModel");
        // new keys: upserted
        for (long i = firstNum; i < firstNum + 50; i++) {
            String key = hashedKey(i);
            Map<String, byte[]> v = values(rnd);
            try {
                UpdateResult r = b.upsert(key, v);
                check(r.getMatchedCount() == 0, "upsert(new " + key + ") matchedCount " + r.getMatchedCount());
                if (!check(r.getUpsertedId() != null && key.equals(r.getUpsertedId().isString()
                        ? r.getUpsertedId().asString().getValue() : null),
                        "upsert(new " + key + ") upsertedId " + r.getUpsertedId())) {
                    break;
                }
                MODEL.put(key, v);
            } catch (Throwable t) {
                threw("replaceOne upsert(new " + key + ")", t);
                break;
            }
        }
        // existing keys: replaced as a whole
        List<String> keys = new ArrayList<>(MODEL.keySet());
        for (int i = 0; i < 50; i++) {
            String key = keys.get(rnd.nextInt(keys.size()));
            Map<String, byte[]> v = values(rnd);
            if (i % 3 == 0) {
                v.remove("field" + rnd.nextInt(FIELD_COUNT)); // a replacement with fewer fields
            }
            try {
                UpdateResult r = b.upsert(key, v);
                check(r.getMatchedCount() == 1, "upsert(existing " + key + ") matchedCount " + r.getMatchedCount());
                if (!check(r.getUpsertedId() == null, "upsert(existing) upsertedId " + r.getUpsertedId())) {
                    break;
                }
                MODEL.put(key, v);
                String d = diff(b.read(key, null), key, v, null);
                if (!check(d == null, "read after replace: " + d)) {
                    break;
                }
            } catch (Throwable t) {
                threw("replaceOne upsert(existing " + key + ")", t);
                break;
            }
        }
        // the batched upsert path: bulkWrite of ReplaceOneModel, unordered
        List<Document> batch = new ArrayList<>();
        Map<String, Map<String, byte[]>> pending = new HashMap<>();
        int existing = 0;
        for (int i = 0; i < 100; i++) {
            String key;
            if (i % 4 == 0) {
                key = keys.get(rnd.nextInt(keys.size()));
                if (pending.containsKey(key)) {
                    continue;
                }
                existing++;
            } else {
                key = hashedKey(firstNum + 1000 + i);
            }
            Map<String, byte[]> v = values(rnd);
            batch.add(Binding.toDocument(key, v));
            pending.put(key, v);
        }
        try {
            BulkWriteResult r = b.upsertMany(batch);
            check(r.getMatchedCount() == existing, "bulk upsert matchedCount " + r.getMatchedCount() + " want " + existing);
            check(r.getUpserts().size() == batch.size() - existing,
                    "bulk upsert upserts " + r.getUpserts().size() + " want " + (batch.size() - existing));
            MODEL.putAll(pending);
            int bad = 0;
            for (Map.Entry<String, Map<String, byte[]>> e : pending.entrySet()) {
                String d = diff(b.read(e.getKey(), null), e.getKey(), e.getValue(), null);
                if (!check(d == null, "read after bulk upsert: " + d) && ++bad > 3) {
                    break;
                }
            }
            check(b.coll().count() == MODEL.size(), "count() after upserts = " + b.coll().count() + ", want " + MODEL.size());
        } catch (Throwable t) {
            threw("bulkWrite(ReplaceOneModel upsert x" + batch.size() + ")", t);
        }
    }

    // ------------------------------------------------------------------
    // many threads sharing one MongoClient
    // ------------------------------------------------------------------

    static final class Errors {
        final ConcurrentLinkedQueue<String> list = new ConcurrentLinkedQueue<>();
        final AtomicInteger count = new AtomicInteger();

        void add(String s) {
            if (count.incrementAndGet() <= 5) {
                list.add(s);
            }
        }

        void report(String what, long ops) {
            check(count.get() == 0, what + ": " + count.get() + " errors in " + ops + " ops, first: " + list);
        }
    }

    /* Static records (never written during the threaded phases) used for exact
     * read and scan checks. */
    static NavigableMap<String, Map<String, byte[]>> STATIC;

    static void checkStaticRead(Binding b, Random rnd, List<String> staticKeys, Errors errs) {
        String key = staticKeys.get(rnd.nextInt(staticKeys.size()));
        Set<String> fields = rnd.nextBoolean() ? null : randomFieldSet(rnd);
        String d = diff(b.read(key, fields), key, STATIC.get(key), fields);
        if (d != null) {
            errs.add("read: " + d);
        }
    }

    /* Concurrent scan: ascending, all >= start, no more than n, and every static
     * key in [start, last returned] present with exact values. */
    static void checkConcurrentScan(Binding b, Random rnd, List<String> staticKeys, Errors errs) {
        String start = staticKeys.get(rnd.nextInt(staticKeys.size()));
        int n = 1 + rnd.nextInt(rnd.nextInt(10) == 0 ? 1000 : 100);
        Set<String> fields = rnd.nextBoolean() ? null : randomFieldSet(rnd);
        List<Document> got = b.scan(start, n, fields);
        if (got.isEmpty()) {
            errs.add("scan(" + start + "," + n + ") empty");
            return;
        }
        if (got.size() > n) {
            errs.add("scan(" + start + "," + n + ") returned " + got.size());
            return;
        }
        String prev = null;
        Set<String> seen = new HashSet<>();
        for (Document d : got) {
            Object id = d.get("_id");
            if (!(id instanceof String)) {
                errs.add("scan: non-string _id " + id);
                return;
            }
            String k = (String) id;
            if (k.compareTo(start) < 0 || (prev != null && k.compareTo(prev) <= 0)) {
                errs.add("scan(" + start + "," + n + ") order: " + prev + " then " + k);
                return;
            }
            prev = k;
            seen.add(k);
            if (STATIC.containsKey(k)) {
                String e = diff(d, k, STATIC.get(k), fields);
                if (e != null) {
                    errs.add("scan value: " + e);
                    return;
                }
            }
        }
        for (String k : STATIC.subMap(start, true, prev, true).keySet()) {
            if (!seen.contains(k)) {
                errs.add("scan(" + start + "," + n + ") skipped static key " + k);
                return;
            }
        }
        if (got.size() < n && STATIC.higherKey(prev) != null) {
            errs.add("scan(" + start + "," + n + ") stopped early at " + prev + " with " + got.size());
        }
    }

    /* 16 threads, acknowledged writes, each owns keys "user<prefix><tt><nnnnnn>". */
    static Map<String, Map<String, byte[]>> phaseThreadsAcked(String url, String prefix, int threads, long millis) {
        startPhase(threads + " threads, " + url.substring(url.lastIndexOf('/')) + ", " + millis + "ms");
        final Map<String, Map<String, byte[]>> owned = new ConcurrentHashMap<>();
        final Errors errs = new Errors();
        final AtomicLong ops = new AtomicLong();
        final List<String> staticKeys = new ArrayList<>(STATIC.keySet());
        final Binding b;
        try {
            b = new Binding(url);
        } catch (Throwable t) {
            threw("new MongoClient(" + url + ")", t);
            return owned;
        }
        final long end = System.currentTimeMillis() + millis;
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int tid = t;
            Thread th = new Thread(() -> {
                Random rnd = new Random(1000 + tid);
                TreeMap<String, Map<String, byte[]>> mine = new TreeMap<>();
                int next = 0;
                while (System.currentTimeMillis() < end && errs.count.get() < 20) {
                    int op = rnd.nextInt(100);
                    String what = "?";
                    try {
                        if (op < 40) {
                            what = "read";
                            checkStaticRead(b, rnd, staticKeys, errs);
                        } else if (op < 55 || mine.isEmpty()) {
                            String key = String.format("user%s%02d%06d", prefix, tid, next++);
                            what = "insertOne " + key;
                            Map<String, byte[]> v = values(rnd);
                            b.insertOne(key, v);
                            mine.put(key, v);
                        } else if (op < 70) {
                            String key = mine.ceilingKey(String.format("user%s%02d%06d", prefix, tid, rnd.nextInt(next)));
                            if (key == null) {
                                key = mine.firstKey();
                            }
                            what = "updateOne " + key;
                            Map<String, byte[]> set = someValues(rnd);
                            UpdateResult r = b.update(key, set);
                            if (r.getMatchedCount() != 1) {
                                errs.add(what + " matchedCount " + r.getMatchedCount());
                            }
                            mine.put(key, merged(mine.get(key), set));
                        } else if (op < 75) {
                            String key = mine.firstKey();
                            what = "deleteOne " + key;
                            DeleteResult r = b.delete(key);
                            if (r.getDeletedCount() != 1) {
                                errs.add(what + " deletedCount " + r.getDeletedCount());
                            }
                            mine.remove(key);
                        } else if (op < 80) {
                            boolean fresh = rnd.nextBoolean();
                            String key = fresh ? String.format("user%s%02d%06d", prefix, tid, next++) : mine.lastKey();
                            what = "replaceOne upsert " + key;
                            Map<String, byte[]> v = values(rnd);
                            UpdateResult r = b.upsert(key, v);
                            if (r.getMatchedCount() != (fresh ? 0 : 1)) {
                                errs.add(what + " matchedCount " + r.getMatchedCount());
                            }
                            mine.put(key, v);
                        } else if (op < 85) {
                            what = "insertMany";
                            List<Document> batch = new ArrayList<>();
                            Map<String, Map<String, byte[]>> pend = new HashMap<>();
                            for (int i = 0; i < 20; i++) {
                                String key = String.format("user%s%02d%06d", prefix, tid, next++);
                                Map<String, byte[]> v = values(rnd);
                                batch.add(Binding.toDocument(key, v));
                                pend.put(key, v);
                            }
                            b.insertMany(batch);
                            mine.putAll(pend);
                        } else if (op < 95) {
                            what = "scan";
                            checkConcurrentScan(b, rnd, staticKeys, errs);
                        } else {
                            String key = mine.lastKey();
                            what = "read own " + key;
                            String d = diff(b.read(key, null), key, mine.get(key), null);
                            if (d != null) {
                                errs.add("read own: " + d);
                            }
                        }
                        ops.incrementAndGet();
                    } catch (Throwable e) {
                        errs.add(what + " threw " + describe(e));
                    }
                }
                owned.putAll(mine);
            });
            ts.add(th);
            th.start();
        }
        join(ts);
        errs.report("concurrent ops", ops.get());
        System.out.println("   " + ops.get() + " ops, " + owned.size() + " owned records");
        // verify every owned record, then that nothing else of this prefix exists
        verifyOwned(b, owned, prefix, "after acknowledged threads");
        try {
            b.close();
        } catch (Throwable t) {
            threw("MongoClient.close()", t);
        }
        return owned;
    }

    static void verifyOwned(Binding b, Map<String, Map<String, byte[]>> owned, String prefix, String what) {
        try {
            int bad = 0;
            for (Map.Entry<String, Map<String, byte[]>> e : owned.entrySet()) {
                String d = diff(b.read(e.getKey(), null), e.getKey(), e.getValue(), null);
                if (d != null && ++bad <= 3) {
                    check(false, what + ": " + d);
                }
            }
            check(bad == 0, what + ": " + bad + " of " + owned.size() + " records wrong");
            long n = b.coll().count(new Document("_id", new Document("$gte", "user" + prefix)
                    .append("$lt", "user" + prefix + "z")));
            long want = owned.size() + staticIn("user" + prefix, "user" + prefix + "z");
            check(n == want, what + ": count of prefix " + prefix + " = " + n + ", want " + want);
        } catch (Throwable t) {
            threw(what + ": verify", t);
        }
    }

    static void join(List<Thread> ts) {
        for (Thread t : ts) {
            try {
                t.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /* 16 threads with w=0: reads and scans verified inline; every key written
     * at most once (unacknowledged writes may travel on different pooled
     * connections, so two writes to one key could be applied in either order).
     * Afterwards, acknowledged reads must see every write. */
    static void phaseThreadsUnacked(String url, String ackUrl, Map<String, Map<String, byte[]>> ackOwned,
                                    String prefix, int threads, long millis) {
        startPhase(threads + " threads, unacknowledged " + url.substring(url.lastIndexOf('/')) + ", " + millis + "ms");
        final Errors errs = new Errors();
        final AtomicLong ops = new AtomicLong();
        final List<String> staticKeys = new ArrayList<>(STATIC.keySet());
        // previously acknowledged records, split among the threads, each used once
        final List<String> oldKeys = new ArrayList<>(ackOwned.keySet());
        Collections.sort(oldKeys);
        final Map<String, Map<String, byte[]>> expect = new ConcurrentHashMap<>(ackOwned);
        final Set<String> deleted = ConcurrentHashMap.newKeySet();
        final Map<String, Map<String, byte[]>> inserted = new ConcurrentHashMap<>();
        final Binding b;
        try {
            b = new Binding(url);
            check(!b.writeConcern.isAcknowledged(), "w=0 URL gives an unacknowledged write concern: " + b.writeConcern);
        } catch (Throwable t) {
            threw("new MongoClient(" + url + ")", t);
            return;
        }
        final long end = System.currentTimeMillis() + millis;
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int tid = t;
            Thread th = new Thread(() -> {
                Random rnd = new Random(5000 + tid);
                List<String> myOld = new ArrayList<>();
                for (int i = tid; i < oldKeys.size(); i += threads) {
                    myOld.add(oldKeys.get(i));
                }
                int next = 0;
                while (System.currentTimeMillis() < end && errs.count.get() < 20) {
                    int op = rnd.nextInt(100);
                    String what = "?";
                    try {
                        if (op < 35) {
                            what = "read";
                            checkStaticRead(b, rnd, staticKeys, errs);
                        } else if (op < 50) {
                            String key = String.format("user%s%02d%06d", prefix, tid, next++);
                            what = "insertOne " + key;
                            Map<String, byte[]> v = values(rnd);
                            b.insertOne(key, v);
                            inserted.put(key, v);
                        } else if (op < 60) {
                            what = "insertMany";
                            List<Document> batch = new ArrayList<>();
                            Map<String, Map<String, byte[]>> pend = new HashMap<>();
                            for (int i = 0; i < 10; i++) {
                                String key = String.format("user%s%02d%06d", prefix, tid, next++);
                                Map<String, byte[]> v = values(rnd);
                                batch.add(Binding.toDocument(key, v));
                                pend.put(key, v);
                            }
                            b.insertMany(batch);
                            inserted.putAll(pend);
                        } else if (op < 65) {
                            String key = String.format("user%s%02d%06d", prefix, tid, next++);
                            what = "replaceOne upsert " + key;
                            Map<String, byte[]> v = values(rnd);
                            UpdateResult r = b.upsert(key, v);
                            if (r.wasAcknowledged()) {
                                errs.add(what + ": wasAcknowledged() with w=0");
                            }
                            inserted.put(key, v);
                        } else if (op < 75 && !myOld.isEmpty()) {
                            String key = myOld.remove(myOld.size() - 1);
                            what = "updateOne " + key;
                            Map<String, byte[]> set = someValues(rnd);
                            UpdateResult r = b.update(key, set);
                            if (r.wasAcknowledged()) {
                                errs.add(what + ": wasAcknowledged() with w=0");
                            }
                            expect.put(key, merged(expect.get(key), set));
                        } else if (op < 80 && !myOld.isEmpty()) {
                            String key = myOld.remove(myOld.size() - 1);
                            what = "deleteOne " + key;
                            DeleteResult r = b.delete(key);
                            if (r.wasAcknowledged()) {
                                errs.add(what + ": wasAcknowledged() with w=0");
                            }
                            expect.remove(key);
                            deleted.add(key);
                        } else {
                            what = "scan";
                            checkConcurrentScan(b, rnd, staticKeys, errs);
                        }
                        ops.incrementAndGet();
                    } catch (Throwable e) {
                        errs.add(what + " threw " + describe(e));
                    }
                }
            });
            ts.add(th);
            th.start();
        }
        join(ts);
        errs.report("unacknowledged concurrent ops", ops.get());
        System.out.println("   " + ops.get() + " ops, " + inserted.size() + " inserted, " + deleted.size() + " deleted");
        // one more read on the w=0 client: replies must still match requests
        try {
            String key = staticKeys.get(0);
            check(diff(b.read(key, null), key, STATIC.get(key), null) == null, "w=0 client still reads correctly");
        } catch (Throwable t) {
            threw("read on w=0 client after unacknowledged writes", t);
        }
        try {
            b.close();
        } catch (Throwable t) {
            threw("MongoClient.close() (w=0)", t);
        }

        // verify with an acknowledged client; unacknowledged writes may still be
        // in flight, so poll for a while
        Binding ack;
        try {
            ack = new Binding(ackUrl);
        } catch (Throwable t) {
            threw("new MongoClient(" + ackUrl + ")", t);
            return;
        }
        Map<String, Map<String, byte[]>> all = new HashMap<>(expect);
        all.putAll(inserted);
        long deadline = System.currentTimeMillis() + 10000;
        String firstProblem = null;
        int problems = 0;
        long expectedCount = all.size() + staticIn("user77", "user78z");
        while (true) {
            problems = 0;
            firstProblem = null;
            try {
                for (Map.Entry<String, Map<String, byte[]>> e : all.entrySet()) {
                    String d = diff(ack.read(e.getKey(), null), e.getKey(), e.getValue(), null);
                    if (d != null) {
                        problems++;
                        if (firstProblem == null) {
                            firstProblem = d;
                        }
                    }
                }
                for (String k : deleted) {
                    if (ack.read(k, null) != null) {
                        problems++;
                        if (firstProblem == null) {
                            firstProblem = "deleted " + k + " still present";
                        }
                    }
                }
                long n = ack.coll().count(new Document("_id", new Document("$gte", "user77")
                        .append("$lt", "user78z")));
                if (n != expectedCount) {
                    problems++;
                    if (firstProblem == null) {
                        firstProblem = "count of threaded records " + n + ", want " + expectedCount;
                    }
                }
            } catch (Throwable t) {
                problems++;
                firstProblem = "verification threw " + describe(t);
            }
            if (problems == 0 || System.currentTimeMillis() > deadline) {
                break;
            }
            sleep(250);
        }
        check(problems == 0, "after unacknowledged writes: " + problems + " problems, first: " + firstProblem);
        try {
            ack.close();
        } catch (Throwable t) {
            threw("MongoClient.close()", t);
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /* Single-threaded w=0 smoke: each call returns, and the effects appear. */
    static void phaseUnackedSingle(String url, Binding ack, Random rnd) {
        startPhase("unacknowledged single ops (" + url.substring(url.lastIndexOf('/')) + ")");
        Binding b;
        try {
            b = new Binding(url);
            check(b.writeConcern.equals(WriteConcern.UNACKNOWLEDGED),
                    "URL w=0 is WriteConcern.UNACKNOWLEDGED: " + b.writeConcern);
        } catch (Throwable t) {
            threw("new MongoClient(" + url + ")", t);
            return;
        }
        String k1 = "user7900000001";
        String k2 = "user7900000002";
        Map<String, byte[]> v1 = values(rnd);
        Map<String, byte[]> v2 = values(rnd);
        Map<String, byte[]> set = someValues(rnd);
        try {
            b.insertOne(k1, v1);
            // the same connection is not guaranteed, so wait for the insert
            waitFor(ack, k1, v1, "unacknowledged insertOne");
            UpdateResult r = b.update(k1, set);
            check(!r.wasAcknowledged(), "w=0 updateOne: wasAcknowledged() false");
            v1 = merged(v1, set);
            waitFor(ack, k1, v1, "unacknowledged updateOne");
            r = b.upsert(k2, v2);
            check(!r.wasAcknowledged(), "w=0 replaceOne upsert: wasAcknowledged() false");
            waitFor(ack, k2, v2, "unacknowledged replaceOne upsert");
            DeleteResult dr = b.delete(k1);
            check(!dr.wasAcknowledged(), "w=0 deleteOne: wasAcknowledged() false");
            waitFor(ack, k1, null, "unacknowledged deleteOne");
            dr = b.delete(k2);
            waitFor(ack, k2, null, "unacknowledged deleteOne");
            // a duplicate insert with w=0 is silently dropped; the client must stay usable
            String s = STATIC.firstKey();
            b.insertOne(s, values(rnd));
            check(diff(b.read(s, null), s, STATIC.get(s), null) == null, "w=0 client reads after a failing w=0 insert");
            // a read through the w=0 client, and a getlasterror through it
            Document gle = b.database.runCommand(new Document("getlasterror", 1));
            check(gle.get("ok") instanceof Number, "getlasterror through w=0 client: " + gle.toJson());
        } catch (Throwable t) {
            threw("w=0 single ops", t);
        }
        try {
            b.close();
        } catch (Throwable t) {
            threw("MongoClient.close() (w=0)", t);
        }
    }

    static void waitFor(Binding ack, String key, Map<String, byte[]> v, String what) {
        long deadline = System.currentTimeMillis() + 5000;
        String d;
        while (true) {
            Document doc = ack.read(key, null);
            d = v == null ? (doc == null ? null : key + " still present") : diff(doc, key, v, null);
            if (d == null || System.currentTimeMillis() > deadline) {
                break;
            }
            sleep(20);
        }
        check(d == null, what + ": " + d);
    }

    /* YCSB with a large fieldlength: 1 MB fields (a 10 MB document), and an
     * unordered insertMany bigger than maxMessageSizeBytes (the driver splits
     * it), then a scan whose result needs several 16 MB batches. */
    static void phaseLargeDocs(Binding b, Random rnd) {
        startPhase("large documents (fieldlength 1MB / 100KB)");
        String big = "user7950000000";
        Map<String, byte[]> v = new LinkedHashMap<>();
        for (int i = 0; i < FIELD_COUNT; i++) {
            byte[] x = new byte[1 << 20];
            rnd.nextBytes(x);
            v.put("field" + i, x);
        }
        try {
            b.insertOne(big, v);
            check(diff(b.read(big, null), big, v, null) == null, "10 MB document reads back");
            Map<String, byte[]> set = new LinkedHashMap<>();
            byte[] x = new byte[1 << 20];
            rnd.nextBytes(x);
            set.put("field3", x);
            check(b.update(big, set).getMatchedCount() == 1, "updateOne of a 10 MB document matched 1");
            v = merged(v, set);
            Set<String> f3 = Collections.singleton("field3");
            check(diff(b.read(big, f3), big, v, f3) == null, "10 MB document: projected read after update");
            check(b.delete(big).getDeletedCount() == 1, "deleteOne of a 10 MB document");
        } catch (Throwable t) {
            threw("10 MB document", t);
        }
        TreeMap<String, Map<String, byte[]>> combined = new TreeMap<>(MODEL);
        List<Document> batch = new ArrayList<>();
        List<String> keys = new ArrayList<>();
        for (int i = 0; i < 50; i++) {
            String key = String.format("user79510000%02d", i);
            Map<String, byte[]> m = new LinkedHashMap<>();
            for (int j = 0; j < FIELD_COUNT; j++) {
                byte[] x = new byte[100 * 1024];
                rnd.nextBytes(x);
                m.put("field" + j, x);
            }
            batch.add(Binding.toDocument(key, m));
            combined.put(key, m);
            keys.add(key);
        }
        try {
            b.insertMany(batch);
            batch.clear();
            long n = b.coll().count(new Document("_id", new Document("$gte", "user7951").append("$lt", "user7952")));
            check(n == 50, "50 x 1 MB insertMany (> 48 MB, split by the driver): count " + n);
            checkScan("scan over 1 MB documents", b.scan(keys.get(0), 80, null), combined, keys.get(0), 80, null);
            checkScan("scan over 1 MB documents, projected", b.scan(keys.get(0), 50, Collections.singleton("field0")),
                    combined, keys.get(0), 50, Collections.singleton("field0"));
        } catch (Throwable t) {
            threw("insertMany of 50 x 1 MB documents", t);
        }
        try {
            for (String k : keys) {
                b.delete(k);
            }
            check(b.coll().count() == MODEL.size(), "count after removing large documents " + b.coll().count());
        } catch (Throwable t) {
            threw("delete large documents", t);
        }
    }

    /* A YCSB user may add compressors=zlib to mongodb.url. */
    static void phaseCompressed(String url, Random rnd) {
        startPhase("compressors=zlib");
        try {
            Binding b = new Binding(url);
            String key = "user7900000020";
            Map<String, byte[]> v = values(rnd);
            b.insertOne(key, v);
            Map<String, byte[]> set = someValues(rnd);
            check(b.update(key, set).getMatchedCount() == 1, "zlib updateOne matched 1");
            v = merged(v, set);
            check(diff(b.read(key, null), key, v, null) == null, "zlib read back");
            String start = STATIC.firstKey();
            checkScan("zlib scan", b.scan(start, 300, null), STATIC, start, 300, null);
            check(b.delete(key).getDeletedCount() == 1, "zlib deleteOne deleted 1");
            b.close();
        } catch (Throwable t) {
            threw("compressors=zlib ops", t);
        }
    }

    static void phaseJournal(String url, Random rnd) {
        startPhase("w=1&journal=true");
        try {
            Binding b = new Binding(url);
            check(Boolean.TRUE.equals(b.writeConcern.getJournal()), "journal=true parsed: " + b.writeConcern);
            String key = "user7900000010";
            Map<String, byte[]> v = values(rnd);
            b.insertOne(key, v);
            Map<String, byte[]> set = someValues(rnd);
            check(b.update(key, set).getMatchedCount() == 1, "j:true updateOne matched 1");
            check(diff(b.read(key, null), key, merged(v, set), null) == null, "j:true read back");
            check(b.delete(key).getDeletedCount() == 1, "j:true deleteOne deleted 1");
            b.close();
        } catch (Throwable t) {
            threw("journal=true ops", t);
        }
    }

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
            Document ss = b.client.getDatabase("admin").runCommand(new Document("serverStatus", 1));
            Object metrics = ss.get("metrics");
            if (metrics instanceof Document) {
                Object cursor = ((Document) metrics).get("cursor");
                if (cursor instanceof Document && ((Document) cursor).get("open") instanceof Document) {
                    Object total = ((Document) ((Document) cursor).get("open")).get("total");
                    System.out.println("   serverStatus metrics.cursor.open.total = " + total);
                    check(total instanceof Number && ((Number) total).longValue() == 0,
                            "no cursors left open on the server: metrics.cursor.open.total = " + total);
                }
            }
        } catch (Throwable t) {
            System.out.println("   (serverStatus not checked: " + describe(t) + ")");
        }
    }

    static final AtomicLong THREAD_RECORDS = new AtomicLong();

    /* Static (hashed-key) records that fall inside a threaded key range. */
    static long staticIn(String lo, String hi) {
        return STATIC.subMap(lo, true, hi, false).size();
    }

    // ------------------------------------------------------------------

    public static void main(String[] args) {
        DRIVER_LOG.setLevel(Level.WARNING);
        if (args.length < 1) {
            System.err.println("usage: YcsbBindingTest mongodb://HOST:PORT");
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

        String hostPort = base.replaceFirst("^mongodb://", "");
        String host = hostPort.substring(0, hostPort.lastIndexOf(':'));
        int port = Integer.parseInt(hostPort.substring(hostPort.lastIndexOf(':') + 1));

        String urlW1 = base + "/ycsb?w=1";
        String urlW0 = base + "/ycsb?w=0";
        String urlPool = base + "/ycsb?maxPoolSize=4&w=1";
        String urlJournal = base + "/ycsb?w=1&journal=true";

        phaseRawHandshake(host, port);

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
        phaseDriverCommands(b);
        phaseInsertOne(b, rnd, 300);
        phaseReads(b, rnd);
        phaseUpdates(b, rnd);
        phaseDuplicate(b, rnd);
        phaseInsertMany(b, rnd, 100000, 1500, 100);
        phaseInsertMany(b, rnd, 300000, 3000, 1000);
        phaseUpsert(b, rnd, 200000);
        phaseScans(b, rnd);
        phaseDeletes(b, rnd);
        phaseScans(b, rnd);
        phaseLargeDocs(b, rnd);

        STATIC = Collections.unmodifiableNavigableMap(new TreeMap<>(MODEL));
        phaseUnackedSingle(urlW0, b, rnd);
        phaseJournal(urlJournal, rnd);
        phaseCompressed(base + "/ycsb?w=1&compressors=zlib", rnd);

        Map<String, Map<String, byte[]>> owned = phaseThreadsAcked(urlW1, "77", 16, 2500);
        Map<String, Map<String, byte[]>> owned2 = phaseThreadsAcked(urlPool, "776", 16, 1500);
        // prefix "776" keys are "user776tt..." and also match "user77" ranges: count them once
        Map<String, Map<String, byte[]>> ackOwned = new HashMap<>(owned);
        ackOwned.putAll(owned2);
        phaseThreadsUnacked(urlW0, urlW1, ackOwned, "78", 16, 2000);
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
