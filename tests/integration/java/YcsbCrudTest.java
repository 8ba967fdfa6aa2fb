/*
 * YcsbCrudTest: YcsbBindingTest's single-threaded phases: the binding's
 * insert (single, insertMany unordered, upsert by replaceOne and bulk
 * ReplaceOneModel), read, update, scan and delete calls, each checked
 * against the in-memory model (MODEL), a duplicate insert, and large
 * documents (1 MB fields, an insertMany the driver must split, scans over
 * several 16 MB batches).
 */

import com.mongodb.MongoBulkWriteException;
import com.mongodb.MongoWriteException;
import com.mongodb.bulk.BulkWriteResult;
import com.mongodb.client.result.DeleteResult;
import com.mongodb.client.result.UpdateResult;

import org.bson.Document;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;

final class YcsbCrudTest extends YcsbSupport {

    // ------------------------------------------------------------------
    // single-threaded CRUD, checked against an in-memory model
    // ------------------------------------------------------------------

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
}
