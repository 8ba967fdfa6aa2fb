/*
 * YcsbSupport: what YcsbBindingTest's phase classes share, as static
 * members they inherit (a class in the unnamed package cannot be imported
 * statically): the pass/fail bookkeeping and the closing
 * "YcsbBindingTest: N passed, M failed" line, the data YCSB's core workload
 * generates, the binding (the calls site.ycsb.db.MongoDbClient makes), the
 * comparisons of what came back with what was written, and the run's
 * shared state (the single-threaded model, the static records the threaded
 * phases check against).
 */

import com.mongodb.MongoClient;
import com.mongodb.MongoClientURI;
import com.mongodb.MongoException;
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

import org.bson.Document;
import org.bson.types.Binary;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Logger;

abstract class YcsbSupport {

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
    // what the phases share
    // ------------------------------------------------------------------

    /* What the single-threaded CRUD phases wrote (YcsbCrudTest): the model
     * they check against. */
    static final TreeMap<String, Map<String, byte[]>> MODEL = new TreeMap<>();

    /* Static records (never written during the threaded phases) used for exact
     * read and scan checks. */
    static NavigableMap<String, Map<String, byte[]>> STATIC;

    /* Static (hashed-key) records that fall inside a threaded key range. */
    static long staticIn(String lo, String hi) {
        return STATIC.subMap(lo, true, hi, false).size();
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
