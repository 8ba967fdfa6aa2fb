"""
Routed reads and the shards' documents they do not own (issue 28,
docs/sharding.md "Orphans"): a shard filters its orphans out of every routed
find, aggregate, count and distinct, while a direct read on the shard sees
them; and a routed cursor's getMore goes to the member that opened it, so a
step-down of that shard's primary loses no document of the cursor.  One
cluster: two shards of two members each.
"""
import os
import sys
import time

import bson
import pymongo
from pymongo.errors import DuplicateKeyError, OperationFailure, PyMongoError
from pymongo.read_concern import ReadConcern

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from sharded import direct, primary_port  # noqa: E402

MEMBERS = 2


cluster = sharded.cluster_fixture("sable-orphans-", members=MEMBERS)
mongos = sharded.mongos_fixture(stop_balancer=True, serverSelectionTimeoutMS=20000,
                                uuidRepresentation="standard")


def test_orphans_are_filtered_from_routed_reads(cluster, mongos):
    sharded.split_at_zero(mongos, "orph", ["c"])  # k < 0 on shard0, k >= 0 on shard1
    coll = mongos.orph.c.with_options(write_concern=pymongo.WriteConcern(w="majority"))
    coll.insert_many([{"_id": i, "k": i, "x": 1} for i in range(-5, 5)])
    # an orphan on shard0: its key belongs to shard1's chunk
    p0 = primary_port(cluster, 0)
    with direct(p0) as s0:
        s0.orph.c.insert_one({"_id": 100, "k": 50, "x": 1})
        assert s0.orph.c.count_documents({}) == 6
        assert s0.orph.c.find_one({"_id": 100}) is not None
    assert coll.count_documents({}) == 10
    assert coll.count_documents({"x": 1}) == 10
    assert sorted(d["_id"] for d in coll.find({})) == list(range(-5, 5))
    assert list(coll.find({"_id": 100})) == []
    assert list(coll.find({"x": 1}).sort("k", -1).limit(1))[0]["k"] == 4
    assert mongos.orph.command("count", "c", query={"x": 1})["n"] == 10
    assert list(coll.aggregate([{"$match": {"x": 1}}, {"$count": "n"}])) == [{"n": 10}]
    assert list(coll.aggregate([{"$group": {"_id": None, "s": {"$sum": "$k"}}}]))[0]["s"] == -5
    # the shards' partial groups of the N accumulators skip it too (k 50 would top both)
    assert list(coll.aggregate([{"$group": {
        "_id": None, "m": {"$maxN": {"input": "$k", "n": 2}},
        "t": {"$top": {"output": "$_id", "sortBy": {"k": -1}}}}}])) == [
        {"_id": None, "m": [4, 3], "t": 4}]
    assert sorted(coll.distinct("k")) == list(range(-5, 5))
    # a snapshot read filters by the placement at its atClusterTime
    snap = mongos.orph.get_collection("c", read_concern=ReadConcern("snapshot"))
    assert sorted(d["_id"] for d in snap.find({"x": 1})) == list(range(-5, 5))


def step_down_and_move_router(cluster, shard, coll, doc):
    """Step shard's primary down, then send routed inserts of doc until the
    router has moved to the new primary (the old one refuses it first)."""
    old = primary_port(cluster, shard)
    with direct(old) as d:
        try:
            d.admin.command("replSetStepDown", 30, secondaryCatchUpPeriodSecs=10)
        except PyMongoError:
            pass  # the step-down may close this connection
    primary_port(cluster, shard, not_port=old)
    for attempt in range(100):
        try:
            coll.insert_one(doc)
            return
        except DuplicateKeyError:
            return  # an attempt that failed after it wrote
        except OperationFailure as e:
            assert attempt < 99, e
            time.sleep(0.2)


def test_get_more_goes_to_the_member_that_opened_the_cursor(cluster, mongos):
    coll = mongos.orph.g.with_options(write_concern=pymongo.WriteConcern(w="majority"))
    sharded.split_at_zero(mongos, "orph", ["g"])
    n = 40
    coll.insert_many([{"_id": i, "k": i} for i in range(-n // 2, n // 2)])
    cur = coll.find({}, batch_size=2)
    got = [next(cur)["_id"] for _ in range(4)]
    # a routed write to shard0's range meets the old primary, which sends the
    # router to the new one; the cursor stays where it was opened
    step_down_and_move_router(cluster, 0, coll, {"_id": -1000, "k": -1000})
    got += [d["_id"] for d in cur]
    assert sorted(got) == list(range(-n // 2, n // 2))


def test_change_stream_get_more_goes_to_the_member_that_opened_it(cluster, mongos):
    sharded.split_at_zero(mongos, "orph", ["cs"])  # k >= 0 on shard1
    coll = mongos.orph.cs.with_options(write_concern=pymongo.WriteConcern(w="majority"))
    coll.insert_one({"_id": 1, "k": 1})
    cid = mongos.orph.command("aggregate", "cs", pipeline=[{"$changeStream": {}}],
                              cursor={})["cursor"]["id"]

    def more():
        r = mongos.orph.command("getMore", cid, collection="cs", maxTimeMS=500)
        return [e["documentKey"]["_id"] for e in r["cursor"]["nextBatch"]]

    coll.insert_one({"_id": 2, "k": 2})
    got = []
    for _ in range(20):
        got += more()
        if 2 in got:
            break
    assert got == [2]
    # the router moves to shard1's new primary; the stream's getMore still goes
    # to the member that opened it (mongos's rule), which has the event once it
    # replicated there
    step_down_and_move_router(cluster, 1, coll, {"_id": 3, "k": 3})
    for _ in range(40):
        got += more()
        if 3 in got:
            break
    assert got == [2, 3]


def test_orphans_are_filtered_when_the_chunks_take_more_than_a_batch(cluster, mongos):
    """A collection whose config.chunks documents fill more than one 16 MB
    batch: the shard reads them all (getMore) to build its filter; with the
    first batch only it filtered nothing and returned its orphans."""
    mongos.admin.command("enableSharding", "orphbig")
    ns = "orphbig.c"
    mongos.admin.command("shardCollection", ns, key={"k": 1})
    pad = "x" * 100000  # each chunk's min and max: ~200 KB per chunk document
    for i in range(100):
        mongos.admin.command("split", ns, middle={"k": "b%s%03d" % (pad, i)})
    mongos.admin.command("split", ns, middle={"k": "z"})
    cs = sharded.chunks(mongos, ns)
    assert sum(len(bson.encode(c)) for c in cs) > 16 * 1024 * 1024
    home = cs[-1]["shard"]  # every chunk is on the database's primary shard
    other = "shard1" if home == "shard0" else "shard0"
    mongos.admin.command("moveChunk", ns, find={"k": "z"}, to=other)
    coll = mongos.orphbig.c.with_options(write_concern=pymongo.WriteConcern(w="majority"))
    coll.insert_many([{"_id": 1, "k": "a"}, {"_id": 2, "k": "zz"}])
    with direct(primary_port(cluster, int(home[-1]))) as s:
        s.orphbig.c.insert_one({"_id": 3, "k": "zzz"})  # an orphan: k is in other's chunk
    assert sorted(d["_id"] for d in coll.find({})) == [1, 2]
    assert coll.count_documents({}) == 2
