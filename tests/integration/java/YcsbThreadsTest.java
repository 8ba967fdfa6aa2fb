/*
 * YcsbThreadsTest: YcsbBindingTest's phases with many threads sharing one
 * MongoClient (as YCSB's threads share the binding's): acknowledged
 * writes, each thread on its own keys, with reads and scans of the static
 * records checked inline and every record verified afterwards; then the
 * same with w=0, where acknowledged reads must finally see every write.
 */

import com.mongodb.client.result.DeleteResult;
import com.mongodb.client.result.UpdateResult;

import org.bson.Document;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

final class YcsbThreadsTest extends YcsbSupport {

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
}
