"""
Finds that go to several shards are run from the router's event loops
(src/router/rt_scan.c; docs/sharding.md, "The router's cost"): every
shard's command goes out at once on the loop's connections and, when each
shard exhausted its cursor in its first batch, the merge is done there; a
shard cursor left open (the merge may fetch), a StaleConfig answer or a
connection failure hands the find to the worker pool.  The router's
serverStatus counts them (network.loopScans, network.loopScansToWorkers).
The results must be those of the worker path: sort across shards, limit,
skip, projection, batchSize with getMore.  A config server and two
one-member shards started with build/sable-cluster start --sharded.
"""

import os
import random
import sys

import pymongo
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402


cluster = sharded.cluster_fixture("sable-loopscans-")
mongos = sharded.mongos_fixture(stop_balancer=True, split=("ls", ["r"]))
shards = sharded.shards_fixture()

N = 300


def _open_cursors(shards):
    return [s.admin.command("serverStatus")["metrics"]["cursor"]["open"]["total"]
            for s in shards]


def _counts(client):
    net = client.admin.command("serverStatus")["network"]
    return net["loopScans"], net["loopScansToWorkers"]


@pytest.fixture(scope="module")
def hashed(mongos):
    """ls.h sharded on {_id: "hashed"} over both shards: N documents."""
    mongos.admin.command("shardCollection", "ls.h", key={"_id": "hashed"})
    docs = [{"_id": "user%04d" % i, "i": i, "g": i % 7, "pad": "x" * (i % 50)}
            for i in range(N)]
    mongos.ls.h.insert_many(docs)
    on = {c["shard"] for c in mongos.config.chunks.find({})}
    assert on == {"shard0", "shard1"}, on
    return {d["_id"]: d for d in docs}


def test_scans_are_merged_on_the_loop(mongos, hashed):
    """Workload E's scan: a range of _id, sorted, limited; every shard
    answers, the router merges by _id."""
    keys = sorted(hashed)
    rnd = random.Random(28)
    loop0, back0 = _counts(mongos)
    for _ in range(60):
        start = rnd.randrange(N)
        n = rnd.randint(1, 100)
        got = list(mongos.ls.h.find({"_id": {"$gte": keys[start]}}).sort("_id", 1).limit(n))
        assert got == [hashed[k] for k in keys[start:start + n]]
    loop1, back1 = _counts(mongos)
    # the first scans of a loop go to the workers, which dial the
    # connections the loops then take
    assert loop1 - loop0 >= 50, (loop0, loop1)
    assert back1 - back0 <= 10, (back0, back1)


def test_sort_skip_limit_projection(mongos, hashed):
    want = sorted(hashed.values(), key=lambda d: (-d["g"], d["i"]))
    loop0, _ = _counts(mongos)
    got = list(mongos.ls.h.find({}, {"i": 1, "g": 1, "_id": 0})
               .sort([("g", -1), ("i", 1)]).skip(13).limit(40))
    assert got == [{"i": d["i"], "g": d["g"]} for d in want[13:53]]
    # a negative limit: one batch, no cursor
    cur = mongos.ls.h.find({"g": 3}).sort("i", -1).limit(-5)
    assert [d["i"] for d in cur] == sorted((d["i"] for d in hashed.values()
                                            if d["g"] == 3), reverse=True)[:5]
    assert cur.cursor_id in (0, None)
    # unsorted across shards: each document once
    got = list(mongos.ls.h.find({"i": {"$lt": 90}}, {"i": 1}))
    assert sorted(d["i"] for d in got) == list(range(90))
    # a filter no document matches
    assert list(mongos.ls.h.find({"i": -1}).sort("_id", 1).limit(3)) == []
    loop1, _ = _counts(mongos)
    assert loop1 - loop0 == 4, (loop0, loop1)


def test_a_cursor_larger_than_its_first_batch(mongos, hashed):
    """Every shard cursor exhausted, but the merged result is larger than
    the client's first batch (101): the router's cursor keeps the rest (its
    own copy of the shards' batches) for getMore."""
    loop0, back0 = _counts(mongos)
    cur = mongos.ls.h.find({"i": {"$lt": 150}}).sort("i", 1)
    got = [d["i"] for d in cur]
    assert got == list(range(150))
    loop1, back1 = _counts(mongos)
    assert (loop1 - loop0, back1 - back0) == (1, 0)


def test_batch_size_and_get_more(mongos, hashed, shards):
    """batchSize 7 reaches the shards: their cursors stay open, so the merge
    runs on the workers, which fetch with getMore."""
    keys = sorted(hashed)
    open0 = _open_cursors(shards)
    loop0, back0 = _counts(mongos)
    cur = mongos.ls.h.find({"_id": {"$gte": keys[10]}}).sort("_id", 1).limit(60).batch_size(7)
    assert [d["_id"] for d in cur] == keys[10:70]
    cur = mongos.ls.h.find({}).sort("i", -1).batch_size(20)
    assert [d["i"] for d in cur] == list(range(N - 1, -1, -1))
    loop1, back1 = _counts(mongos)
    assert back1 - back0 == 2, (back0, back1)
    assert loop1 - loop0 == 0
    # no shard cursor is left behind (the router's merge killed or drained them)
    assert sharded.wait_for(lambda: _open_cursors(shards) == open0)


def test_a_shards_error_comes_back(mongos, hashed):
    loop0, _ = _counts(mongos)
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        list(mongos.ls.h.find({"i": {"$bad": 1}}).sort("_id", 1).limit(5))
    assert e.value.code == 2 and e.value.details["codeName"] == "BadValue"
    loop1, _ = _counts(mongos)
    assert loop1 - loop0 == 1
    # a negative skip is the router's own BadValue (the worker path)
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        mongos.ls.command({"find": "h", "skip": -1})
    assert e.value.code == 2 and "non-negative" in str(e.value)


def test_an_error_kills_the_other_shards_cursor(mongos, shards):
    """ls.r: k < 0 on shard0, k >= 0 on shard1.  A hint of an index only
    shard1 has: shard0 refuses the find, shard1 answers a first batch of 3
    and keeps its cursor; shard0's error comes back and shard1's cursor is
    killed."""
    mongos.ls.r.insert_many([{"_id": k, "k": k} for k in range(-20, 30)])
    shards[1].ls.r.create_index([("k", -1)])
    with pytest.raises(pymongo.errors.OperationFailure) as direct:
        list(shards[0].ls.r.find({}).hint([("k", -1)]))
    open0 = _open_cursors(shards)
    loop0, _ = _counts(mongos)
    with pytest.raises(pymongo.errors.OperationFailure) as e:
        list(mongos.ls.r.find({}).hint([("k", -1)]).batch_size(3))
    assert e.value.code == direct.value.code and e.value.code != 13388  # not StaleConfig
    loop1, _ = _counts(mongos)
    assert loop1 - loop0 == 1
    assert sharded.wait_for(lambda: _open_cursors(shards) == open0), \
        (open0, _open_cursors(shards))
    shards[1].ls.r.drop_index([("k", -1)])


def test_a_stale_router_scans_again_on_the_workers(mongos, cluster):
    """ls.r: k < 0 on shard0, k >= 0 on shard1.  Another router moves
    k >= 0 to shard0: this router still asks both shards, which answer
    StaleConfig; the scan runs again on the workers, with a refresh, and
    finds every document on shard0."""
    assert [d["k"] for d in mongos.ls.r.find({}).sort("k", 1).limit(3)] == [-20, -19, -18]
    with sharded.extra_router(cluster) as port, \
            pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=10000) as other:
        other.admin.command("moveChunk", "ls.r", find={"k": 0}, to="shard0",
                            _waitForDelete=True)
    loop0, back0 = _counts(mongos)
    got = list(mongos.ls.r.find({}).sort("k", -1).skip(2).limit(45))
    assert [d["k"] for d in got] == list(range(27, -18, -1))
    loop1, back1 = _counts(mongos)
    assert back1 - back0 == 1, (back0, back1)
    # the refreshed table names one shard: the one-shard loop path from now on
    assert [d["k"] for d in mongos.ls.r.find({}).sort("k", 1)] == list(range(-20, 30))
    assert _counts(mongos) == (loop1, back1)


def test_a_restarted_shard_under_the_loops_connections(mongos, cluster, hashed):
    """shard1 restarts: the loops' connections to it are closed under them;
    scans go on (a failed one runs again on the workers) and come back to
    the loop."""
    keys = sorted(hashed)
    want = [hashed[k] for k in keys[5:25]]
    for _ in range(20):
        assert list(mongos.ls.h.find({"_id": {"$gte": keys[5]}}).sort("_id", 1).limit(20)) == want
    sharded.launcher(cluster, "restart", "1")
    assert sharded.wait_for(lambda: list(mongos.ls.h.find({"_id": {"$gte": keys[5]}})
                                         .sort("_id", 1).limit(20)) == want, 60)
    loop0, _ = _counts(mongos)
    for _ in range(100):
        assert list(mongos.ls.h.find({"_id": {"$gte": keys[5]}}).sort("_id", 1).limit(20)) == want
    loop1, _ = _counts(mongos)
    assert loop1 - loop0 >= 80, (loop0, loop1)
