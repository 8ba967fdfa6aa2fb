"""
Routed writes and the shards' documents they do not own (docs/sharding.md
"Orphans"): a routed update, delete or findAndModify on a sharded collection
skips the orphans on each shard, as mongod 7.0's update and delete stages do
for a versioned operation, so they neither change them nor count them in n
and nModified; the same write sent to a shard directly (no shardVersion)
changes them.  A config server and two one-member shards; k < 0 lives on
shard0, k >= 0 on shard1 (sharded.split_at_zero).
"""
import os
import sys
import time

import pymongo
from pymongo import ReturnDocument

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402

OWNED = list(range(-5, 5))  # k and _id of the documents inserted through the router
# orphans put on a shard directly, in the other shard's range: (shard, _id, k)
ORPHANS = [(0, 100, 50), (0, 101, 51), (1, 200, -50)]

cluster = sharded.cluster_fixture("sable-orphw-")
mongos = sharded.mongos_fixture(stop_balancer=True, uuidRepresentation="standard")
shards = sharded.shards_fixture()


def setup_coll(mongos, shards, name):
    """db orphw.<name> split at k = 0, OWNED inserted through the router
    (x: 1), and ORPHANS (x: 1 too) inserted on their shards directly."""
    sharded.split_at_zero(mongos, "orphw", [name])
    coll = mongos.orphw[name].with_options(write_concern=pymongo.WriteConcern(w="majority"))
    coll.insert_many([{"_id": i, "k": i, "x": 1} for i in OWNED])
    for shard, _id, k in ORPHANS:
        shards[shard].orphw[name].insert_one({"_id": _id, "k": k, "x": 1})
    assert coll.count_documents({}) == len(OWNED)  # the router's reads do not see them
    return coll


def orphan_docs(shards, name):
    """The orphans as they are on their shards now, by _id."""
    return {_id: shards[shard].orphw[name].find_one({"_id": _id}) for shard, _id, _ in ORPHANS}


def test_routed_update_many_skips_orphans(mongos, shards):
    coll = setup_coll(mongos, shards, "um")
    r = coll.update_many({"x": 1}, {"$set": {"y": 1}})
    assert (r.matched_count, r.modified_count) == (len(OWNED), len(OWNED))
    assert sorted(d["_id"] for d in coll.find({"y": 1})) == OWNED
    for _id, d in orphan_docs(shards, "um").items():
        assert d is not None and "y" not in d, d
    # by _id, without the shard key: the orphans' _ids match nothing owned
    r = coll.update_many({"_id": {"$in": [100, 101, 200]}}, {"$set": {"y": 2}})
    assert (r.matched_count, r.modified_count) == (0, 0)
    r = coll.update_one({"_id": 100}, {"$set": {"y": 3}})
    assert (r.matched_count, r.modified_count) == (0, 0)
    for _id, d in orphan_docs(shards, "um").items():
        assert "y" not in d, d
    # a pipeline update is the same write
    r = coll.update_many({"x": 1}, [{"$set": {"p": {"$add": ["$k", 1]}}}])
    assert r.matched_count == len(OWNED)
    assert all("p" not in d for d in orphan_docs(shards, "um").values())


def test_direct_update_many_changes_orphans(mongos, shards):
    setup_coll(mongos, shards, "direct")
    s0 = shards[0].orphw.direct
    r = s0.update_many({"x": 1}, {"$set": {"z": 1}})  # no shardVersion: every document
    assert (r.matched_count, r.modified_count) == (7, 7)  # k -5..-1 and the two orphans
    assert s0.find_one({"_id": 100})["z"] == 1
    r = s0.delete_many({"k": {"$gte": 0}})
    assert r.deleted_count == 2
    assert s0.count_documents({}) == 5


def test_routed_delete_many_skips_orphans(mongos, shards):
    coll = setup_coll(mongos, shards, "dm")
    assert coll.delete_one({"_id": 101}).deleted_count == 0
    assert coll.delete_many({"_id": {"$in": [100, 200]}}).deleted_count == 0
    r = coll.delete_many({"x": 1})
    assert r.deleted_count == len(OWNED)
    assert coll.count_documents({}) == 0
    for _id, d in orphan_docs(shards, "dm").items():
        assert d is not None and d["x"] == 1, (_id, d)
    assert shards[0].orphw.dm.count_documents({}) == 2
    assert shards[1].orphw.dm.count_documents({}) == 1


def test_routed_find_and_modify_skips_orphans(mongos, shards):
    coll = setup_coll(mongos, shards, "fam")
    # the highest and the lowest k of each shard are orphans there: a shard
    # that picked one would return it
    for direction in (-1, 1):
        d = coll.find_one_and_update({"x": 1}, {"$inc": {"n": 1}}, sort=[("k", direction)],
                                     return_document=ReturnDocument.AFTER)
        assert d is not None and d["k"] in OWNED and d["n"] == 1, d
    assert coll.find_one_and_update({"_id": 100}, {"$set": {"n": 5}}) is None
    assert coll.find_one_and_delete({"_id": 200}) is None
    for _id, d in orphan_docs(shards, "fam").items():
        assert d is not None and "n" not in d, (_id, d)


def test_routed_upsert_beside_an_orphan(mongos, shards):
    coll = setup_coll(mongos, shards, "ups")
    # k 50 is shard1's: the router sends it there and it inserts, while the
    # orphan with the same key on shard0 stays as it was
    r = coll.update_one({"k": 50}, {"$set": {"u": 1}}, upsert=True)
    assert r.matched_count == 0 and r.upserted_id is not None
    assert shards[1].orphw.ups.find_one({"k": 50})["u"] == 1
    assert "u" not in shards[0].orphw.ups.find_one({"_id": 100})


def test_routed_multi_write_in_a_transaction_skips_orphans(mongos, shards):
    coll = setup_coll(mongos, shards, "txn")
    with mongos.start_session() as s:
        with s.start_transaction():
            r = coll.update_many({"x": 1}, {"$set": {"t": 1}}, session=s)
            assert r.matched_count == len(OWNED)
            assert coll.delete_many({"k": {"$gte": 3}}, session=s).deleted_count == 2
    assert sorted(d["_id"] for d in coll.find({"t": 1})) == OWNED[:-2]
    for _id, d in orphan_docs(shards, "txn").items():
        assert d is not None and "t" not in d, (_id, d)


def test_direct_write_to_an_orphan_is_hidden_from_change_streams(mongos, shards):
    """A direct write to an orphan is written fromMigrate, as mongod's: a
    change stream on the shard leaves it out unless showMigrationEvents."""
    setup_coll(mongos, shards, "cs")
    db0 = shards[0].orphw
    s0 = db0.cs
    shown = db0.command("aggregate", "cs", cursor={},
                        pipeline=[{"$changeStream": {"showMigrationEvents": True}}])["cursor"]
    with s0.watch() as stream:
        assert s0.update_many({"x": 1}, {"$set": {"w": 1}}).modified_count == 7
        assert s0.delete_one({"_id": 101}).deleted_count == 1
        assert s0.delete_one({"_id": -1}).deleted_count == 1
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 6:  # the five owned documents' updates, then -1's delete
            assert time.monotonic() < deadline, seen
            ev = stream.try_next()
            if ev is not None:
                seen.append((ev["operationType"], ev["documentKey"]["_id"]))
        assert sorted(seen) == sorted([("update", i) for i in range(-5, 0)] + [("delete", -1)])
        assert stream.try_next() is None
    every = [(ev["operationType"], ev["documentKey"]["_id"]) for ev in shown["firstBatch"]]
    while len(every) < 9:  # with the orphans' three
        assert time.monotonic() < deadline + 30, every
        batch = db0.command("getMore", shown["id"], collection="cs", maxTimeMS=500)["cursor"]
        every += [(ev["operationType"], ev["documentKey"]["_id"]) for ev in batch["nextBatch"]]
    db0.command("killCursors", "cs", cursors=[shown["id"]])
    assert sorted(every) == sorted([("update", i) for i in range(-5, 0)] +
                                   [("update", 100), ("update", 101), ("delete", 101),
                                    ("delete", -1)])
