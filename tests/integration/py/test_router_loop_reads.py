"""
Finds that go to one shard are answered on the router's event loops, on
connections the loop keeps to the shard's primary (src/router/rt_fast.c;
docs/sharding.md, "The router's cost"), and fall back to the worker pool
for everything else: a StaleConfig answer (refresh and retry), a cursor's
getMore, a shard restarted under the loop's idle connections.  The
router's serverStatus counts them (network.loopReads,
network.loopReadsToWorkers).  A config server and two one-member shards
started with build/sable-cluster start --sharded.
"""

import os
import random
import sys
import threading

import pymongo

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402


cluster = sharded.cluster_fixture("sable-loopreads-")
mongos = sharded.mongos_fixture(stop_balancer=True, split=("lr", ["r"]))


def _counts(client):
    st = client.admin.command("serverStatus")
    return (st["network"]["loopReads"], st["network"]["loopReadsToWorkers"],
            st["opcounters"]["query"])


def test_point_reads_from_many_threads(mongos):
    mongos.admin.command("shardCollection", "lr.h", key={"_id": "hashed"})
    mongos.lr.h.insert_many([{"_id": i, "v": i * 2} for i in range(500)])
    loop0, _, q0 = _counts(mongos)
    wrong = []

    def reader(seed):
        rnd = random.Random(seed)
        for _ in range(100):
            i = rnd.randrange(500)
            d = mongos.lr.h.find_one({"_id": i})
            if d != {"_id": i, "v": i * 2}:
                wrong.append((i, d))

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert wrong == []
    assert mongos.lr.h.find_one({"_id": 1000}) is None
    loop1, _, q1 = _counts(mongos)
    assert q1 - q0 >= 2001
    # the first reads of each loop go to the workers, which dial the
    # connections the loops then take
    assert loop1 - loop0 >= 1000, (loop0, loop1)


def _loop_find(mongos, cmd):
    """cmd's reply, once a loop answered it (a loop's first reads go to the
    workers, which dial the connections the loops then take)."""
    for _ in range(100):
        loop0, _, _ = _counts(mongos)
        r = mongos.lr.command(cmd)
        loop1, _, _ = _counts(mongos)
        if loop1 - loop0 == 1:
            return r
    raise AssertionError("no loop answered %r" % (cmd,))


def test_a_loop_reply_is_the_worker_paths(mongos):
    """The loop passes the shard's reply on from its bytes (rt_fast.c,
    pass_on), with the router's $clusterTime and operationTime: the same
    fields, in the same order, as the worker path's reply (a readConcern
    sends the find there)."""
    mongos.admin.command("shardCollection", "lr.ct", key={"_id": "hashed"})
    mongos.lr.ct.insert_many([{"_id": i, "s": "x" * i} for i in range(20)])
    cmd = {"find": "ct", "filter": {"_id": 7}}
    r = _loop_find(mongos, cmd)
    assert list(r) == ["cursor", "ok", "$clusterTime", "operationTime"], r
    assert r["cursor"] == {"firstBatch": [{"_id": 7, "s": "x" * 7}], "id": 0, "ns": "lr.ct"}
    assert r["ok"] == 1.0
    assert r["$clusterTime"]["clusterTime"] == r["operationTime"]
    assert sorted(r["$clusterTime"]["signature"]) == ["hash", "keyId"]
    _, back0, _ = _counts(mongos)
    w = mongos.lr.command(dict(cmd, readConcern={"level": "local"}))
    _, back1, _ = _counts(mongos)
    assert back1 == back0  # not taken by the loop: no fallback counted
    assert list(w) == list(r) and w["cursor"] == r["cursor"]
    # a later write's time reaches the next loop reply (the router's copy
    # of its $clusterTime is built again when the time changes)
    t = mongos.lr.command("insert", "ct", documents=[{"_id": 100}])["operationTime"]
    r2 = _loop_find(mongos, {"find": "ct", "filter": {"_id": 100}})
    assert r2["cursor"]["firstBatch"] == [{"_id": 100}]
    assert r2["operationTime"] >= t and r2["$clusterTime"]["clusterTime"] >= t
    # no match: an empty batch, passed on the same way
    r3 = _loop_find(mongos, {"find": "ct", "filter": {"_id": 1000}})
    assert r3["cursor"] == {"firstBatch": [], "id": 0, "ns": "lr.ct"}
    assert list(r3) == ["cursor", "ok", "$clusterTime", "operationTime"]
    # a one-shard write's reply is passed on the same way (no txnNumber: the loop's)
    for _ in range(100):
        st = mongos.admin.command("serverStatus")["network"]["loopWrites"]
        u = mongos.lr.command("update", "ct", updates=[{"q": {"_id": 7}, "u": {"$inc": {"n": 1}}}])
        if mongos.admin.command("serverStatus")["network"]["loopWrites"] - st == 1:
            break
    else:
        raise AssertionError("no loop answered the update")
    assert (u["n"], u["nModified"]) == (1, 1)
    assert list(u)[-3:] == ["ok", "$clusterTime", "operationTime"], u
    assert u["$clusterTime"]["clusterTime"] == u["operationTime"] >= r2["operationTime"]


def test_a_one_shard_cursor_is_the_routers(mongos):
    mongos.lr.r.insert_many([{"_id": k, "k": k} for k in range(-20, 100)])
    loop0, _, _ = _counts(mongos)
    # (the router's range targeting is inclusive: $gte 0 would name shard0 too)
    cur = mongos.lr.r.find({"k": {"$gte": 1}}).sort("k", 1).batch_size(7)
    assert [d["k"] for d in cur] == list(range(1, 100))
    loop1, _, _ = _counts(mongos)
    assert loop1 - loop0 == 1  # the find; its getMores run on the workers
    # a negative skip is the router's own BadValue, as on the worker path
    try:
        mongos.lr.command({"find": "r", "filter": {"k": 5}, "skip": -1})
        assert False, "no error"
    except pymongo.errors.OperationFailure as e:
        assert e.code == 2 and "non-negative" in str(e)
    # an error the shard answers comes back as it is
    try:
        mongos.lr.r.find_one({"k": 5, "$bad": 1})
        assert False, "no error"
    except pymongo.errors.OperationFailure as e:
        assert e.code == 2 and e.details["codeName"] == "BadValue"


def test_a_stale_router_refreshes_from_the_loop(mongos, cluster):
    """Another router moves k >= 0 to shard0: this router still sends k: 5
    to shard1, which answers StaleConfig; the find is run again on the
    workers, with a refresh, and finds the document on shard0."""
    assert mongos.lr.r.find_one({"k": 5})["_id"] == 5  # the loop's view is cached
    with sharded.extra_router(cluster) as port, \
            pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=10000) as other:
        other.admin.command("moveChunk", "lr.r", find={"k": 0}, to="shard0")
    _, back0, _ = _counts(mongos)
    assert mongos.lr.r.find_one({"k": 5}) == {"_id": 5, "k": 5}
    _, back1, _ = _counts(mongos)
    assert back1 - back0 == 1
    assert mongos.lr.r.count_documents({"k": {"$gte": 0}}) == 100


def test_a_restarted_shard_under_idle_loop_connections(mongos, cluster):
    for i in range(50):
        assert mongos.lr.h.find_one({"_id": i})["v"] == i * 2
    sharded.launcher(cluster, "restart", "1")
    # the loops drop the connections the shard closed; reads go on
    assert sharded.wait_for(lambda: mongos.lr.h.find_one({"_id": 3})["v"] == 6, 60)
    loop0, _, _ = _counts(mongos)
    for i in range(500):
        assert mongos.lr.h.find_one({"_id": i})["v"] == i * 2
    loop1, _, _ = _counts(mongos)
    assert loop1 - loop0 >= 400, (loop0, loop1)


def test_writes_without_authorization_take_the_loop_too(mongos, cluster):
    """rt_fastw.c: one-shard writes outside a retryable write (pymongo's
    retryWrites sends txnNumber: the workers') go from the loop as well;
    test_router_loop_writes.py has the rest, with authorization on."""
    with sharded.client(cluster["router"], retryWrites=False) as c:
        h = c.lr.h
        st = mongos.admin.command("serverStatus")["network"]
        for i in range(100):
            assert h.update_one({"_id": i}, {"$inc": {"v": 1}}).modified_count == 1
        h.insert_one({"_id": 1000, "v": 0})
        assert h.delete_one({"_id": 1000}).deleted_count == 1
        now = mongos.admin.command("serverStatus")["network"]
        assert now["loopWrites"] - st["loopWrites"] >= 90, (st, now)
        assert now["loopWritesToWorkers"] == st["loopWritesToWorkers"]
        assert [d["v"] for d in h.find({"_id": {"$lt": 100}}).sort("_id", 1)] == \
            [i * 2 + 1 for i in range(100)]
