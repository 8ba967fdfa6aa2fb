"""
Sharded clusters through sable-router (docs/sharding.md): one cluster per
module, started the way users start one (build/sable-cluster start --sharded:
a config server set, two one-member shard sets, a router), driven with
pymongo through the router, and checked against what each shard holds when
asked directly.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import pymongo
import pytest
from bson.son import SON
from bson import Int64, ObjectId, Timestamp
from bson.binary import Binary, UUID_SUBTYPE
from bson.max_key import MaxKey
from bson.min_key import MinKey
from pymongo.errors import BulkWriteError, OperationFailure
from pymongo.read_concern import ReadConcern

sys.path.insert(0, os.path.dirname(__file__))
from sabled import Sabled, run_sabled  # noqa: E402

import sharded  # noqa: E402
from sharded import BUILD, ROUTER  # noqa: E402


cluster = sharded.cluster_fixture("sable-shard-")
mongos = sharded.mongos_fixture(uuidRepresentation="standard")
shards = sharded.shards_fixture()


def test_the_launcher_prints_the_router_uri(cluster):
    assert cluster["stdout"].strip() == "mongodb://127.0.0.1:%d/" % cluster["router"]


def test_router_identity_and_shards(mongos, cluster):
    h = mongos.admin.command("hello")
    assert h["msg"] == "isdbgrid" and h["maxWireVersion"] == 21
    assert mongos.admin.command("isdbgrid")["isdbgrid"] == 1
    shards = mongos.admin.command("listShards")["shards"]
    assert [s["_id"] for s in shards] == ["shard0", "shard1"]
    assert shards[0]["host"] == "shard0/127.0.0.1:%d" % cluster["shards"][0]
    assert shards[0]["state"] == 1
    # adding a shard again under its name is accepted (mongod's answer)
    r = mongos.admin.command("addShard", shards[1]["host"])
    assert r["shardAdded"] == "shard1"
    # serverStatus has what sable-stat reads, and sable-stat watches the router
    st = mongos.admin.command("serverStatus")
    assert st["process"] == "mongos" and st["connections"]["current"] >= 1
    assert st["opcounters"]["command"] >= 1 and st["mem"]["resident"] > 0
    r = subprocess.run([os.path.join(BUILD, "sable-stat"), "--port", str(cluster["router"]),
                        "--json", "-n", "2", "--interval", "1"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout.strip().splitlines()[-1])
    assert line["conn"] >= 1 and line["command"] >= 0
    # a server that is no --shardsvr is refused
    with pytest.raises(OperationFailure):
        mongos.admin.command("addShard", "127.0.0.1:%d" % cluster["config"])


def test_hashed_collection_spreads_and_reads_merge(mongos, shards):
    mongos.admin.command("enableSharding", "hs")
    r = mongos.admin.command("shardCollection", "hs.t", key={"_id": "hashed"})
    assert r["collectionsharded"] == "hs.t"
    docs = [{"_id": i, "f": (i * 7919) % 1000, "g": i % 3} for i in range(600)]
    res = mongos.hs.t.insert_many(docs, ordered=False)
    assert len(res.inserted_ids) == 600
    held = [s.hs.t.count_documents({}) for s in shards]
    assert sum(held) == 600 and min(held) > 100, held  # both shards got a share
    # targeted point reads
    for i in (0, 17, 599):
        assert mongos.hs.t.find_one({"_id": i}) == docs[i]
    # scatter-gather with a sort merged across shards, skip/limit after the merge
    want = sorted(docs, key=lambda d: (-d["f"], d["_id"]))
    got = list(mongos.hs.t.find({}, sort=[("f", -1), ("_id", 1)], skip=5, limit=40))
    assert got == want[5:45]
    # small batches: getMore across shards returns everything exactly once
    ids = [d["_id"] for d in mongos.hs.t.find({"g": 1}, batch_size=7)]
    assert sorted(ids) == [i for i in range(600) if i % 3 == 1]
    # a cursor closed early is killed on the router (and its shards' cursors)
    cur = mongos.hs.t.find({}, batch_size=5)
    next(cur)
    cur.close()
    assert mongos.hs.t.count_documents({}) == 600
    assert mongos.hs.t.estimated_document_count() == 600
    assert mongos.hs.t.count_documents({"g": 2}) == 200
    assert sorted(mongos.hs.t.distinct("g")) == [0, 1, 2]
    # explain in mongos's shape: one shard for a point, both for a scatter
    e = mongos.hs.t.find({"_id": 3}).explain()
    assert e["queryPlanner"]["winningPlan"]["stage"] == "SINGLE_SHARD"
    assert len(e["queryPlanner"]["winningPlan"]["shards"]) == 1
    e = mongos.hs.command("explain", {"find": "t", "filter": {"g": 1}}, verbosity="executionStats")
    shards_ = e["queryPlanner"]["winningPlan"]["shards"]
    assert e["queryPlanner"]["winningPlan"]["stage"] == "SHARD_MERGE"
    assert sorted(s["shardName"] for s in shards_) == ["shard0", "shard1"]
    assert sum(s["executionStats"]["nReturned"] for s in shards_) == 200
    groups = {d["_id"]: d["n"] for d in mongos.hs.t.aggregate(
        [{"$match": {"f": {"$gte": 0}}}, {"$group": {"_id": "$g", "n": {"$sum": 1}}}])}
    assert groups == {0: 200, 1: 200, 2: 200}
    # collectionUUID through the router: each shard's copy has a UUID of its own, so
    # a sharded collection's command is not refused by the shard the UUID is not from
    info = mongos.hs.command("listCollections", filter={"name": "t"})["cursor"]["firstBatch"]
    uid = Binary(info[0]["info"]["uuid"].bytes, UUID_SUBTYPE)
    r = mongos.hs.command("find", "t", filter={"g": 1}, collectionUUID=uid, batchSize=1000)
    assert len(r["cursor"]["firstBatch"]) == 200


def test_writes_with_and_without_the_shard_key(mongos, shards):
    mongos.admin.command("shardCollection", "ws.t", key={"k": "hashed"})
    c = mongos.ws.t
    c.insert_many([{"_id": i, "k": i, "v": 0} for i in range(100)])
    assert c.update_one({"k": 5}, {"$set": {"v": 1}}).modified_count == 1
    # without the shard key: exactly one document changes (7.0 allows it)
    assert c.update_one({"v": 0}, {"$set": {"v": 2}}).modified_count == 1
    assert c.count_documents({"v": 2}) == 1
    assert c.update_many({"_id": {"$lt": 50}}, {"$inc": {"w": 1}}).modified_count == 50
    assert c.delete_one({"v": 0}).deleted_count == 1
    assert c.count_documents({}) == 99
    left = c.count_documents({"_id": {"$gte": 90}})
    assert c.delete_many({"_id": {"$gte": 90}}).deleted_count == left
    assert c.count_documents({}) == sum(s.ws.t.count_documents({}) for s in shards)
    # an upsert must name the shard key
    with pytest.raises(pymongo.errors.WriteError) as e:
        c.update_one({"v": 42}, {"$set": {"x": 1}}, upsert=True)
    assert e.value.code == 61
    r = c.update_one({"k": 1000}, {"$set": {"x": 1}}, upsert=True)
    assert r.upserted_id is not None and c.find_one({"k": 1000})["x"] == 1
    # the shard key's value changes only in a retryable write or a transaction
    # (test_router_shardkey_rules.py has the rest)
    with pymongo.MongoClient(mongos.address[0], mongos.address[1], retryWrites=False) as nr:
        with pytest.raises(pymongo.errors.WriteError) as e:
            nr.ws.t.update_one({"k": 5}, {"$set": {"k": 6}})
        assert e.value.code == 20
        with pytest.raises(pymongo.errors.WriteError):
            nr.ws.t.replace_one({"k": 5}, {"k": 77})
    assert c.update_one({"k": 5}, {"$set": {"k": 5, "z": 1}}).modified_count == 1
    assert c.replace_one({"k": 5}, {"k": 5, "v": 9}).modified_count == 1
    assert c.find_one({"k": 5}, {"_id": 0}) == {"k": 5, "v": 9}
    doc = c.find_one_and_update({"k": 7}, {"$set": {"fm": True}},
                                return_document=pymongo.ReturnDocument.AFTER)
    assert doc["fm"] is True
    # ordered batches stop at the first error, with the client's index
    with pytest.raises(pymongo.errors.BulkWriteError) as e:
        c.insert_many([{"_id": 500, "k": 500}, {"_id": 1, "k": 1}, {"_id": 501, "k": 501}])
    det = e.value.details
    assert det["nInserted"] == 1 and det["writeErrors"][0]["index"] == 1
    assert det["writeErrors"][0]["code"] == 11000


def test_unsharded_collections_live_on_the_primary_shard(mongos, shards):
    c = mongos.plain.t
    c.insert_many([{"_id": i} for i in range(10)])
    primary = mongos.config.databases.find_one({"_id": "plain"})["primary"]
    idx = int(primary[-1])
    assert shards[idx].plain.t.count_documents({}) == 10
    assert shards[1 - idx].plain.t.count_documents({}) == 0
    assert "t" in mongos.plain.list_collection_names()
    assert "plain" in mongos.list_database_names()
    assert [d["_id"] for d in c.find({}, batch_size=3).sort("_id", 1)] == list(range(10))
    # an unsharded collection's UUID is checked on its primary shard
    uid = Binary(mongos.plain.command("listCollections", filter={"name": "t"})[
        "cursor"]["firstBatch"][0]["info"]["uuid"].bytes, UUID_SUBTYPE)
    assert mongos.plain.command("count", "t", collectionUUID=uid)["n"] == 10
    with pytest.raises(OperationFailure) as e:
        mongos.plain.command("count", "t", collectionUUID=Binary(bytes(16), UUID_SUBTYPE))
    assert e.value.code == 361
    c.drop()
    assert "t" not in mongos.plain.list_collection_names()


def test_snapshot_reads_at_one_cluster_time_on_every_shard(mongos, shards):
    # Issue 28: readConcern snapshot through the router without atClusterTime
    # reads at one time the router chooses (its newest cluster time) on every
    # shard, and the reply names it, as mongos 5.0+ does
    sharded.split_at_zero(mongos, "snap", ["t"])
    db = mongos.snap
    ins = db.command("insert", "t", documents=[{"_id": k, "k": k} for k in (-3, -2, -1, 1, 2, 3)])
    snap = {"level": "snapshot"}
    r = db.command("find", "t", filter={}, batchSize=2, readConcern=snap)
    at = r["cursor"]["atClusterTime"]
    assert isinstance(at, Timestamp) and at >= ins["operationTime"]  # sees its own writes
    ids = [d["_id"] for d in r["cursor"]["firstBatch"]]
    while r["cursor"]["id"]:
        r = db.command("getMore", r["cursor"]["id"], collection="t", batchSize=2)
        ids += [d["_id"] for d in r["cursor"]["nextBatch"]]
    assert sorted(ids) == [-3, -2, -1, 1, 2, 3]
    # written on both shards after that time: not seen at it, seen by a new snapshot
    db.t.insert_many([{"_id": -10, "k": -10}, {"_id": 10, "k": 10}])
    assert [s.snap.t.count_documents({"k": {"$in": [-10, 10]}}) for s in shards] == [1, 1]
    then = dict(snap, atClusterTime=at)
    r = db.command("find", "t", filter={}, batchSize=100, readConcern=then)
    assert len(r["cursor"]["firstBatch"]) == 6 and r["cursor"]["atClusterTime"] == at
    r = db.command("aggregate", "t", pipeline=[{"$match": {}}], cursor={}, readConcern=then)
    assert len(r["cursor"]["firstBatch"]) == 6 and r["cursor"]["atClusterTime"] == at
    r = db.command("distinct", "t", key="k", readConcern=then)
    assert len(r["values"]) == 6 and r["atClusterTime"] == at
    r = db.command("aggregate", "t", pipeline=[{"$group": {"_id": None, "n": {"$sum": 1}}}],
                   cursor={}, readConcern=snap)
    assert r["cursor"]["firstBatch"][0]["n"] == 8 and r["cursor"]["atClusterTime"] > at
    r = db.command("distinct", "t", key="k", readConcern=snap)
    assert len(r["values"]) == 8 and r["atClusterTime"] > at
    # a time only shard1's oplog has reached: shard0 catches up to it (a no-op), not refused
    for i in range(20):
        w = db.command("insert", "t", documents=[{"_id": 100 + i, "k": 100 + i}])
    r = db.command("find", "t", filter={}, batchSize=100,
                   readConcern=dict(snap, atClusterTime=w["operationTime"]))
    assert len(r["cursor"]["firstBatch"]) == 28
    # count has no snapshot reads outside transactions (mongod refuses it too)
    with pytest.raises(OperationFailure) as e:
        db.command("count", "t", readConcern=snap)
    assert e.value.code == 72  # InvalidOptions


def test_snapshot_transaction_reads_every_shard_at_its_first_statement(mongos):
    # a transaction with readConcern snapshot reads at one time the router chose at its
    # first statement: a shard it reaches later does not see a write made after that
    sharded.split_at_zero(mongos, "snaptx", ["t"])
    c = mongos.snaptx.t
    c.insert_many([{"_id": -1, "k": -1, "v": 0}, {"_id": 1, "k": 1, "v": 0}])
    with mongos.start_session() as s:
        with s.start_transaction(read_concern=ReadConcern("snapshot")):
            assert c.find_one({"k": -1}, session=s)["v"] == 0  # shard0 only
            c.update_one({"k": 1}, {"$set": {"v": 1}})  # outside it, on shard1
            assert c.find_one({"k": 1}, session=s)["v"] == 0  # shard1 reached now
    assert c.find_one({"k": 1})["v"] == 1


def _move(mongos, ns, find, to):
    for attempt in range(100):  # a balancer round's migration may hold a shard
        try:
            return mongos.admin.command("moveChunk", ns, find=find, to=to)
        except OperationFailure as e:
            if e.code != 117 or attempt == 99:
                raise
            time.sleep(0.1)


def test_snapshot_reads_follow_the_chunk_history(mongos, shards):
    # mongos routes a read at atClusterTime T by the placement at T (config.chunks'
    # history): a chunk moved after T is read on the shard that owned it then
    sharded.split_at_zero(mongos, "hist", ["t"])  # k < 0 on shard0, k >= 0 on shard1
    db = mongos.hist
    w = db.command("insert", "t", documents=[{"_id": k, "k": k} for k in (-3, -2, -1, 1, 2, 3)])
    at = w["operationTime"]
    _move(mongos, "hist.t", {"k": 0}, "shard0")  # shard0 owns everything now
    # the range deleter removes shard1's copy in the background after moveChunk
    # answers (a direct read counts it until then): cleanupOrphaned waits for it
    shards[1].admin.command("cleanupOrphaned", "hist.t")
    assert [s.hist.t.count_documents({}) for s in shards] == [6, 0]
    then = {"level": "snapshot", "atClusterTime": at}
    r = db.command("find", "t", filter={}, batchSize=100, readConcern=then)
    assert sorted(d["_id"] for d in r["cursor"]["firstBatch"]) == [-3, -2, -1, 1, 2, 3]
    r = db.command("aggregate", "t", pipeline=[{"$group": {"_id": None, "n": {"$sum": 1}}}],
                   cursor={}, readConcern=then)
    assert r["cursor"]["firstBatch"][0]["n"] == 6
    r = db.command("distinct", "t", key="k", readConcern=then)
    assert sorted(r["values"]) == [-3, -2, -1, 1, 2, 3]
    r = db.command("find", "t", filter={"k": 2}, readConcern=then)  # one shard: shard1 then
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == [2]
    # a snapshot transaction at T (raw commands: pymongo cannot name T; a client of its
    # own, so its session's txnNumber goes with it)
    with pymongo.MongoClient(*mongos.address) as c, c.start_session() as s:
        txn = {"txnNumber": Int64(1), "autocommit": False}
        r = c.hist.command("find", "t", filter={}, batchSize=100, readConcern=then, session=s,
                           startTransaction=True, **txn)
        assert len(r["cursor"]["firstBatch"]) == 6
        # its write to a chunk that moved to shard0 after T goes to shard1, its owner
        # at T, which gave it away since and refuses
        with pytest.raises(OperationFailure) as e:
            c.hist.command("update", "t", updates=[{"q": {"k": 2}, "u": {"$set": {"v": 1}}}],
                           session=s, **txn)
        assert e.value.code == 246
        assert "TransientTransactionError" in e.value.details.get("errorLabels", [])
        c.admin.command("abortTransaction", session=s, **txn)
    # config.chunks: the move prepended {validAfter, shard} to the chunk's history
    uuid = mongos.config.collections.find_one({"_id": "hist.t"})["uuid"]
    low, high = sorted(mongos.config.chunks.find({"uuid": uuid}), key=lambda c: c["max"]["k"]
                       if not isinstance(c["max"]["k"], MaxKey) else 1 << 62)
    hist = high["history"]
    assert hist[0]["shard"] == "shard0" and hist[0]["validAfter"] > at
    assert hist[0]["validAfter"] == high["onCurrentShardSince"]
    assert hist[1]["shard"] == "shard1" and hist[1]["validAfter"] < at
    assert [h["validAfter"] for h in hist] == sorted((h["validAfter"] for h in hist),
                                                      reverse=True)
    assert hist[-1] == low["history"][-1]  # the split copied the history
    # before the history (here: before shardCollection): StaleChunkHistory, as mongos
    old = Timestamp(hist[-1]["validAfter"].time - 1, 0)
    with pytest.raises(OperationFailure) as e:
        db.command("find", "t", filter={}, readConcern={"level": "snapshot",
                                                        "atClusterTime": old})
    assert e.value.code == 250
    # inside the migration's window on both shards (the recipient's move-in entries,
    # the donor's critical section just before the commit's validAfter) each shard
    # answers, filtering by what it owned then, as mongod's shards do: the recipient
    # drops what moved in before the commit, the donor still has what it gave away
    moved = list(shards[0].local.oplog.rs.find({"ns": "hist.t", "op": "i", "o.k": {"$gte": 0}}))
    assert len(moved) == 3
    mid = max(m["ts"] for m in moved)
    valid = hist[0]["validAfter"]
    assert at < mid < valid and valid.inc > 0
    deleted = list(shards[1].local.oplog.rs.find({"ns": "hist.t", "op": "d"}))
    assert len(deleted) == 3 and min(d["ts"] for d in deleted) > valid
    coll = mongos.config.collections.find_one({"_id": "hist.t"})
    sv = {"e": coll["lastmodEpoch"], "t": coll["timestamp"], "v": high["lastmod"]}

    def on_recipient(t):
        r = shards[0].hist.command({"find": "t", "shardVersion": sv,
                                    "readConcern": {"level": "snapshot", "atClusterTime": t}})
        return sorted(d["_id"] for d in r["cursor"]["firstBatch"])

    assert on_recipient(at) == [-3, -2, -1]  # before the window
    assert on_recipient(mid) == [-3, -2, -1]  # inside: its staged copy is not its own yet
    assert on_recipient(valid) == [-3, -2, -1, 1, 2, 3]  # the commit: now it is
    # through the router, at times before, inside and after the window: exactly the
    # documents of that time (a document written after the migration only in the last)
    after = db.command("insert", "t", documents=[{"_id": 4, "k": 4}])["operationTime"]
    just_before = Timestamp(valid.time, valid.inc - 1)
    for t, want in ((at, 6), (mid, 6), (just_before, 6), (valid, 6), (after, 7)):
        snap = {"level": "snapshot", "atClusterTime": t}
        r = db.command("find", "t", filter={}, batchSize=100, readConcern=snap)
        assert sorted(d["_id"] for d in r["cursor"]["firstBatch"]) == \
            [-3, -2, -1, 1, 2, 3, 4][:want], t
        r = db.command("aggregate", "t", pipeline=[{"$count": "n"}], cursor={},
                       readConcern=snap)
        assert r["cursor"]["firstBatch"] == [{"n": want}], t
        # the same in a snapshot transaction at t (no SnapshotUnavailable to retry)
        with pymongo.MongoClient(*mongos.address) as c, c.start_session() as s:
            txn = {"txnNumber": Int64(1), "autocommit": False}
            r = c.hist.command("find", "t", filter={"k": {"$gte": 0}}, batchSize=100,
                               readConcern=snap, session=s, startTransaction=True, **txn)
            assert len(r["cursor"]["firstBatch"]) == want - 3, t
            c.admin.command("abortTransaction", session=s, **txn)
    # a snapshot read right after shardCollection is not before the chunk's history
    mongos.hist.u.insert_one({"_id": 1, "k": 1})
    mongos.admin.command("shardCollection", "hist.u", key={"k": 1})
    r = db.command("find", "u", filter={}, readConcern={"level": "snapshot"})
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == [1]


def test_snapshot_transaction_writes_go_where_the_chunk_was_at_its_time(mongos, shards):
    # mongos routes every statement of a snapshot transaction, its writes too, by the
    # placement at the transaction's time T: a write to a chunk that moved after T goes
    # to the shard that owned it then, which refuses it (it gave the chunk away); the
    # new owner never writes under a snapshot from before it took the chunk, and a
    # retry of the whole transaction, at a new time, writes there
    sharded.split_at_zero(mongos, "txmv", ["t"])  # k < 0 on shard0, k >= 0 on shard1
    c = mongos.txmv.t
    c.insert_many([{"_id": -1, "k": -1, "v": 0}, {"_id": 1, "k": 1, "v": 0}])
    snap = {"read_concern": ReadConcern("snapshot"),
            "write_concern": pymongo.WriteConcern(w="majority")}
    with mongos.start_session() as s:
        s.start_transaction(**snap)
        assert c.find_one({"k": -1}, session=s)["v"] == 0  # T chosen; shard0 only
        _move(mongos, "txmv.t", {"k": 0}, "shard0")
        with pytest.raises(OperationFailure) as e:
            c.update_one({"k": 1}, {"$inc": {"v": 1}}, session=s)
        assert e.value.code == 246, e.value.details
        assert e.value.has_error_label("TransientTransactionError")
        assert "left this shard" in str(e.value)  # shard1's refusal: it gave the chunk away
        s.abort_transaction()
    assert [sh.txmv.t.count_documents({"v": {"$ne": 0}}) for sh in shards] == [0, 0]
    # with_transaction retries the whole transaction on TransientTransactionError: the
    # first attempt's T is before the chunk moves back to shard1 (shard0 refuses it),
    # the second's after (shard1 takes it)
    attempts = []

    def transfer(s):
        attempts.append(c.find_one({"k": -1}, session=s)["v"])
        if len(attempts) == 1:
            _move(mongos, "txmv.t", {"k": 0}, "shard1")
        c.update_one({"k": 1}, {"$inc": {"v": 1}}, session=s)
        c.update_one({"k": -1}, {"$inc": {"v": -1}}, session=s)

    with mongos.start_session() as s:
        s.with_transaction(transfer, **snap)
    assert attempts == [0, 0]
    assert sorted((d["k"], d["v"]) for d in c.find()) == [(-1, -1), (1, 1)]
    assert [sh.txmv.t.count_documents({"k": 1, "v": 1}) for sh in shards] == [0, 1]


def test_snapshot_read_sees_a_write_made_through_another_router(mongos, cluster):
    # the time a router chooses is not older than the client's $clusterTime (mongos's
    # clock takes it): a write the client saw through another router is read
    mongos.admin.command("enableSharding", "snap2")
    mongos.snap2.t.insert_one({"_id": 0})
    with sharded.extra_router(cluster) as port, \
            pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=10000) as other:
        w = other.snap2.command("insert", "t", documents=[{"_id": 1}])
        with mongos.start_session(causal_consistency=False) as s:
            s.advance_cluster_time(w["$clusterTime"])
            r = mongos.snap2.command("find", "t", readConcern={"level": "snapshot"}, session=s)
            assert sorted(d["_id"] for d in r["cursor"]["firstBatch"]) == [0, 1]


def test_snapshot_read_at_the_clients_time_reaches_every_shard(mongos, cluster):
    # the client's $clusterTime, from writes on shard0 through another router, is newer
    # than this router's clock and than shard1's: the router's clock takes it (mongos's
    # gossip) and passes it to every shard, so shard1 does not refuse a snapshot read
    # at it as past its clock (InvalidOptions "must not be greater than the current
    # clusterTime"), it reaches it
    sharded.split_at_zero(mongos, "gossip", ["t"])  # k < 0 on shard0, k >= 0 on shard1
    mongos.gossip.t.insert_many([{"_id": k, "k": k} for k in (-1, 1)])
    with sharded.extra_router(cluster) as port, \
            pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=10000) as other:
        for i in range(2, 22):  # shard0 only
            w = other.gossip.command("insert", "t", documents=[{"_id": -i, "k": -i}])
        with mongos.start_session(causal_consistency=False) as s:
            s.advance_cluster_time(w["$clusterTime"])
            r = mongos.gossip.command("find", "t", filter={}, batchSize=100,
                                      readConcern={"level": "snapshot"}, session=s)
            assert len(r["cursor"]["firstBatch"]) == 22


def test_config_metadata_has_mongod_shapes(mongos):
    mongos.admin.command("shardCollection", "meta.r", key={"a": 1, "b": 1})
    coll = mongos.config.collections.find_one({"_id": "meta.r"})
    for f in ("lastmodEpoch", "lastmod", "timestamp", "uuid", "key", "unique"):
        assert f in coll, f
    assert coll["key"] == {"a": 1, "b": 1}
    chunks = list(mongos.config.chunks.find({"uuid": coll["uuid"]}))
    assert len(chunks) == 1
    ch = chunks[0]
    assert ch["min"] == {"a": MinKey(), "b": MinKey()}
    assert ch["max"] == {"a": MaxKey(), "b": MaxKey()}
    assert set(ch) >= {"_id", "uuid", "min", "max", "shard", "lastmod", "history"}
    assert mongos.config.version.find_one({"_id": 1})["clusterId"] is not None
    # split at a point: two chunks, a higher collection version
    v1 = mongos.admin.command("getShardVersion", "meta.r")["version"]
    mongos.admin.command("split", "meta.r", middle={"a": 10, "b": 0})
    assert mongos.config.chunks.count_documents({"uuid": coll["uuid"]}) == 2
    v2 = mongos.admin.command("getShardVersion", "meta.r")["version"]
    assert (v2.time, v2.inc) > (v1.time, v1.inc)
    mongos.meta.r.insert_many([{"a": i, "b": i} for i in range(20)])
    assert [d["a"] for d in mongos.meta.r.find({"a": {"$gte": 5}}).sort("a", 1).limit(8)] == \
        list(range(5, 13))


def test_stale_router_refreshes_and_routes_right(mongos, shards, cluster):
    with sharded.extra_router(cluster) as port, \
            pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=10000) as other:
        other.st.c.insert_one({"_id": -1, "k": -1})  # caches st.c as unsharded
        assert other.st.c.count_documents({}) == 1
        mongos.st.c.drop()
        mongos.admin.command("shardCollection", "st.c", key={"k": "hashed"})
        # the stale router's writes go where the new chunks say
        other.st.c.insert_many([{"_id": i, "k": i} for i in range(200)])
        held = [s.st.c.count_documents({}) for s in shards]
        assert sum(held) == 200 and min(held) > 0, held
        assert other.st.c.count_documents({}) == 200
        assert mongos.st.c.count_documents({}) == 200
        # a shard refuses an old version outright
        with pytest.raises(OperationFailure) as e:
            shards[0].st.command({"find": "c", "shardVersion": {
                "e": ObjectId("000000000000000000000000"),
                "t": Timestamp(0, 0),
                "v": Timestamp(0, 0)}})
        assert e.value.code == 13388
        st = shards[0].admin.command("shardingState")
        assert st["enabled"] and st["shardName"] == "shard0" and "st.c" in st["versions"]


def test_unordered_insert_over_both_shards_reports_client_indexes(mongos, shards):
    # the router sends each shard its part of an unordered batch at once;
    # a duplicate key in either part is reported at the client's index and
    # every other document of both parts is written
    sharded.split_at_zero(mongos, "pw", ["dup"])
    c = mongos.pw.dup
    c.insert_many([{"_id": -3, "k": -3}, {"_id": 5, "k": 5}])
    neg = [{"_id": i, "k": i} for i in range(-1, -11, -1)]
    pos = [{"_id": i, "k": i} for i in range(10)]
    docs = [d for pair in zip(neg, pos) for d in pair]  # the parts interleaved
    with pytest.raises(BulkWriteError) as e:
        c.insert_many(docs, ordered=False)
    det = e.value.details
    assert det["nInserted"] == 18, det
    got = sorted((w["index"], w["code"]) for w in det["writeErrors"])
    want = sorted((docs.index({"_id": i, "k": i}), 11000) for i in (-3, 5))
    assert got == want, det["writeErrors"]
    for w in det["writeErrors"]:
        assert "_id: %d" % docs[w["index"]]["_id"] in w["errmsg"], w
    assert sorted(d["_id"] for d in shards[0].pw.dup.find()) == list(range(-10, 0))
    assert sorted(d["_id"] for d in shards[1].pw.dup.find()) == list(range(10))
    # the reply lists the errors by the client's index, whichever shard
    # answered first (shard1's part holds index 0 here)
    r = mongos.pw.command("insert", "dup", ordered=False,
                          documents=[{"_id": 9, "k": 9}, {"_id": -9, "k": -9}])
    assert r["n"] == 0 and [w["index"] for w in r["writeErrors"]] == [0, 1], r
    # without errors: n is the sum of both parts
    r = c.insert_many([{"_id": 100 + i, "k": i - 50} for i in range(100)], ordered=False)
    assert len(r.inserted_ids) == 100
    assert shards[0].pw.dup.count_documents({"_id": {"$gte": 100}}) == 50
    assert shards[1].pw.dup.count_documents({"_id": {"$gte": 100}}) == 50
    assert c.count_documents({}) == 120
    # a multi update and delete reach both shards' parts at once; n sums
    r = c.update_many({"_id": {"$gte": 100}}, {"$inc": {"v": 1}})
    assert (r.matched_count, r.modified_count) == (100, 100), r.raw_result
    assert [s.pw.dup.count_documents({"v": 1}) for s in shards] == [50, 50]
    r = c.delete_many({"_id": {"$gte": 100}, "k": {"$gte": -10, "$lt": 10}})
    assert r.deleted_count == 20
    assert [s.pw.dup.count_documents({"v": 1}) for s in shards] == [40, 40]
    # a multi update failing on one shard's documents only: one error for
    # the statement, the other shard's documents updated
    c.insert_many([{"_id": 300, "k": -300, "a": "x"}, {"_id": 301, "k": 300, "a": 1}])
    with pytest.raises(BulkWriteError) as e:
        c.bulk_write([pymongo.UpdateMany({"_id": {"$gte": 300}}, {"$inc": {"a": 1}})],
                     ordered=False)
    det = e.value.details
    assert [(w["index"], w["code"]) for w in det["writeErrors"]] == [(0, 14)], det
    assert shards[1].pw.dup.find_one({"_id": 301})["a"] == 2
    assert shards[0].pw.dup.find_one({"_id": 300})["a"] == "x"
    # in a transaction the parts go one after the other, and commit together
    with mongos.start_session() as s:
        with s.start_transaction():
            c.insert_many([{"_id": 400 + i, "k": i - 5} for i in range(10)], ordered=False,
                          session=s)
            r = c.update_many({"_id": {"$gte": 400}}, {"$set": {"t": 1}}, session=s)
            assert r.modified_count == 10
            assert c.count_documents({"t": 1}) == 0  # outside it: not yet
    assert [x.pw.dup.count_documents({"t": 1}) for x in shards] == [5, 5]


def test_unordered_insert_resends_only_the_stale_part():
    # a router that missed a migration sends an unordered batch's parts at
    # once: shard0's part is applied, shard2's is refused (StaleConfig) and
    # only it goes again, to shard1 that owns its chunk now
    if not os.path.exists(ROUTER):
        pytest.skip("sable-router not built")
    with sharded.cluster("sable-pw-", shards=3) as info, \
            pymongo.MongoClient("127.0.0.1", info["router"], serverSelectionTimeoutMS=10000,
                                uuidRepresentation="standard") as mongos, \
            sharded.extra_router(info) as port, \
            pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=10000) as other:
        direct = [pymongo.MongoClient("127.0.0.1", p, directConnection=True)
                  for p in info["shards"]]
        mongos.admin.command("balancerStop")
        mongos.admin.command("enableSharding", "pw")
        mongos.admin.command("shardCollection", "pw.s", key={"k": 1})
        mongos.admin.command("split", "pw.s", middle={"k": 0})
        mongos.admin.command("split", "pw.s", middle={"k": 100})
        for find, to in (({"k": -1}, "shard0"), ({"k": 0}, "shard1"), ({"k": 100}, "shard2")):
            if _owner(mongos, find) != to:
                _move(mongos, "pw.s", find, to)
        assert [_owner(mongos, f) for f in ({"k": -1}, {"k": 0}, {"k": 100})] == \
            ["shard0", "shard1", "shard2"]
        other.pw.s.insert_one({"_id": "warm", "k": -500})  # other caches this layout
        mongos.pw.s.insert_one({"_id": -7, "k": -7})
        _move(mongos, "pw.s", {"k": 100}, "shard1")  # other is stale now
        low = [{"_id": -i, "k": -i} for i in range(1, 51)]
        high = [{"_id": 100 + i, "k": 100 + i} for i in range(50)]
        docs = [d for pair in zip(low, high) for d in pair]
        with pytest.raises(BulkWriteError) as e:
            other.pw.s.insert_many(docs, ordered=False)
        det = e.value.details
        assert det["nInserted"] == 99, det
        assert [(w["index"], w["code"]) for w in det["writeErrors"]] == \
            [(docs.index({"_id": -7, "k": -7}), 11000)], det["writeErrors"]
        held = [sorted(d["_id"] for d in s.pw.s.find({"_id": {"$type": "int"}}))
                for s in direct]
        assert held == [list(range(-50, 0)), list(range(100, 150)), []], held
        assert other.pw.s.count_documents({}) == 101
        assert mongos.pw.s.count_documents({}) == 101
        # a multi update's parts go out at once too: after another migration
        # shard1 refuses its part, shard0 has applied its own, and only
        # shard1 and shard2 (by the refreshed table) get it again
        _move(mongos, "pw.s", {"k": 100}, "shard2")
        r = other.pw.s.update_many({}, {"$inc": {"v": 1}})
        assert (r.matched_count, r.modified_count) == (101, 101), r.raw_result
        assert sorted(d.get("v") for d in mongos.pw.s.find()) == [1] * 101
        held = [s.pw.s.count_documents({"v": 1}) for s in direct]
        assert held == [51, 0, 50], held
        for s in direct:
            s.close()


def _owner(mongos, find):
    """The shard owning the pw.s chunk holding find (config.chunks)."""
    uuid = mongos.config.collections.find_one({"_id": "pw.s"})["uuid"]
    for ch in mongos.config.chunks.find({"uuid": uuid}):
        lo, hi = ch["min"]["k"], ch["max"]["k"]
        if (isinstance(lo, MinKey) or lo <= find["k"]) and \
                (isinstance(hi, MaxKey) or find["k"] < hi):
            return ch["shard"]
    return None


def test_cluster_role_options():
    # --configsvr / --shardsvr are sharding.clusterRole, on the command line or in YAML
    s = Sabled()
    try:
        s.start(["--configsvr"])
        opts = s.client().admin.command("getCmdLineOpts")["parsed"]
        assert opts["sharding"]["clusterRole"] == "configsvr"
        s.stop()
        cfg = os.path.join(s.root, "sabled.yaml")
        with open(cfg, "w") as f:
            f.write("sharding:\n  clusterRole: shardsvr\n")
        s.start(["--config", cfg])
        c = s.client()
        assert c.admin.command("getCmdLineOpts")["parsed"]["sharding"]["clusterRole"] == "shardsvr"
        assert c.admin.command("shardingState")["enabled"] is False  # not added yet
        with pytest.raises(OperationFailure):  # the router's commands are not sabled's
            c.admin.command("shardCollection", "a.b", key={"_id": 1})
    finally:
        s.cleanup()
    with open(os.path.join(tempfile.gettempdir(), "sable-bad-role.yaml"), "w") as f:
        f.write("sharding:\n  clusterRole: router\n")
    r = run_sabled(["--config", f.name, "--dbpath", tempfile.gettempdir()])
    assert r.returncode != 0 and "clusterRole" in (r.stdout + r.stderr)
    os.unlink(f.name)
    # the router needs its config servers
    r = subprocess.run([ROUTER, "--port", "1"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "configdb" in r.stderr


def test_router_yaml_config(cluster):
    port = sharded.base_port(1)
    cfg = os.path.join(cluster["dir"], "router3.yaml")
    log = os.path.join(cluster["dir"], "router3.log")
    with open(cfg, "w") as f:
        f.write("sharding:\n  configDB: cfgRS/127.0.0.1:%d\nnet:\n  port: %d\n  bindIp: 127.0.0.1\n"
                "systemLog:\n  path: %s\nprocessManagement:\n  fork: true\n  pidFilePath: %s\n"
                % (cluster["config"], port, log, log + ".pid"))
    subprocess.run([ROUTER, "--config", cfg], check=True, capture_output=True, timeout=60)
    try:
        with pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=10000) as c:
            assert c.admin.command("hello")["msg"] == "isdbgrid"
            assert len(c.admin.command("listShards")["shards"]) == 2
            settings = {d["_id"]: d for d in c.config.settings.find()}
            assert settings["balancer"]["stopped"] is False  # the balancer runs by default
            assert c.admin.command("balancerStatus")["mode"] == "full"
    finally:
        with open(log + ".pid") as f:
            os.kill(int(f.read().strip()), 15)


def initiated_alone(s):
    """A client of started Sabled s, made a one-member set rs0's primary (no shard added)."""
    c = s.client()
    c.admin.command("replSetInitiate", {"_id": "rs0", "members": [
        {"_id": 0, "host": "127.0.0.1:%d" % s.port}]})
    for _ in range(100):
        if c.admin.command("hello").get("isWritablePrimary"):
            break
        time.sleep(0.1)
    return c


def test_routed_command_before_the_shard_knows_its_name():
    # A --shardsvr member with no shardIdentity refuses a command that carries
    # a router's versions (ShardingStateNotInitialized, as mongod) instead of
    # serving it unchecked, and takes plain commands as before.
    s = Sabled()
    try:
        s.start(["--shardsvr", "--replSet", "rs0"])
        c = initiated_alone(s)
        version = {"e": ObjectId(), "t": Timestamp(1, 1), "v": Timestamp(1, 0)}
        for cmd in (SON([("insert", "b"), ("documents", [{"_id": 1}]), ("shardVersion", version)]),
                    SON([("find", "b"), ("shardVersion", version)]),
                    SON([("find", "b"), ("databaseVersion",
                                         {"uuid": Binary(b"0" * 16, UUID_SUBTYPE),
                                          "timestamp": Timestamp(1, 1), "lastMod": 1})])):
            with pytest.raises(OperationFailure) as e:
                c.a.command(cmd)
            assert e.value.code == 203 and "shardIdentity" in str(e.value), e.value.details
        assert c.a.b.count_documents({}) == 0
        c.a.b.insert_one({"_id": 1})
        assert c.a.b.count_documents({}) == 1
    finally:
        s.cleanup()


def test_recv_chunk_abort_before_the_shard_knows_its_name():
    # A shard member that has not read its shardIdentity (a primary just
    # elected, or never added) answers a donor's _recvChunkAbort for a range
    # deletion task it holds with NotYetInitialized; it used to crash
    # (strcmp of a NULL shard name; found by scripts/faults.sh --sharded --seed 28)
    s = Sabled()
    try:
        s.start(["--shardsvr", "--replSet", "rs0", "--setParameter", "enableTestCommands=1"])
        c = initiated_alone(s)
        c.config.rangeDeletions.insert_one({
            "_id": 1, "nss": "a.b", "migrationSessionId": "shard0_shard1_x",
            "donorShardId": "shard0", "range": {"min": {"k": 0}, "max": {"k": 10}},
            "keyPattern": {"k": 1}, "pending": True})
        with pytest.raises(OperationFailure) as e:
            c.admin.command("_recvChunkAbort", "a.b", sessionId="shard0_shard1_x")
        assert e.value.code == 94  # NotYetInitialized
        assert c.admin.command("ping")["ok"] == 1
    finally:
        s.cleanup()


def shard_uuid(shard, db, coll):
    info = shard[db].command("listCollections", filter={"name": coll})["cursor"]["firstBatch"]
    return info[0]["info"]["uuid"] if info else None


def test_every_shard_holds_the_collection_under_its_uuid(mongos, shards):
    # As in mongod, a sharded collection has one UUID on every shard, the one
    # config.collections records: a hashed collection's initial chunks, and a
    # migration's recipient, create their copies with it; a recipient holding
    # another incarnation refuses the migration (207 InvalidUUID)
    mongos.admin.command("enableSharding", "uu")
    mongos.admin.command("shardCollection", "uu.h", key={"k": "hashed"})
    want = mongos.config.collections.find_one({"_id": "uu.h"})["uuid"]
    assert [shard_uuid(s, "uu", "h") for s in shards] == [want, want]

    mongos.admin.command("shardCollection", "uu.r", key={"k": 1})
    mongos.uu.r.insert_many([{"_id": i, "k": i} for i in range(20)])
    mongos.admin.command("split", "uu.r", middle={"k": 10})
    want = mongos.config.collections.find_one({"_id": "uu.r"})["uuid"]
    primary = int(mongos.config.databases.find_one({"_id": "uu"})["primary"][-1])
    other = shards[1 - primary]
    assert shard_uuid(other, "uu", "r") is None
    mongos.admin.command("moveChunk", "uu.r", find={"k": 10}, to="shard%d" % (1 - primary))
    assert shard_uuid(other, "uu", "r") == want
    assert other.uu.r.count_documents({}) == 10

    mongos.admin.command("shardCollection", "uu.x", key={"k": 1})
    mongos.uu.x.insert_many([{"_id": i, "k": i} for i in range(20)])
    mongos.admin.command("split", "uu.x", middle={"k": 10})
    other.uu.x.insert_one({"_id": "stray", "k": -1})  # another incarnation, made directly
    with pytest.raises(OperationFailure) as e:
        mongos.admin.command("moveChunk", "uu.x", find={"k": 10}, to="shard%d" % (1 - primary))
    assert e.value.code in (96, 207) and "differs from the donor's UUID" in str(e.value), e.value.details
    assert mongos.uu.x.count_documents({}) == 20
    other.uu.x.drop()
    mongos.admin.command("moveChunk", "uu.x", find={"k": 10}, to="shard%d" % (1 - primary))
    assert shard_uuid(other, "uu", "x") == mongos.config.collections.find_one(
        {"_id": "uu.x"})["uuid"]
    assert mongos.uu.x.count_documents({}) == 20
    # collectionUUID through the router: checked on every shard the command reaches
    # (Database.command encodes with pymongo's default codec: pass subtype 4 as is)
    uuid = Binary(mongos.config.collections.find_one({"_id": "uu.x"})["uuid"].bytes, UUID_SUBTYPE)
    assert mongos.uu.command("count", "x", collectionUUID=uuid)["n"] == 20
    assert len(mongos.uu.command("find", "x", collectionUUID=uuid)["cursor"]["firstBatch"]) == 20
    with pytest.raises(OperationFailure) as e:
        mongos.uu.command("find", "x", collectionUUID=Binary(want.bytes, UUID_SUBTYPE))  # uu.r's
    assert e.value.code == 361, e.value.details


def test_writes_of_more_than_16_mb_reach_the_shards(mongos, shards):
    # a client's write batch up to 48 MB (maxMessageSizeBytes) goes to a
    # shard as one command: its statements travel as an OP_MSG document
    # sequence, since a body holds at most 16 MB (the shards used to close
    # the connection: HostUnreachable)
    pad = "x" * 30000
    n = 600  # 18 MB of documents, of _ids, of replacements
    docs = [{"_id": "%04d%s" % (i, pad), "k": i} for i in range(n)]
    plain = mongos.big16.plain  # unsharded: the whole command to the primary shard
    assert len(plain.insert_many(docs).inserted_ids) == n
    assert plain.count_documents({}) == n
    mongos.admin.command("enableSharding", "big16")
    mongos.admin.command("shardCollection", "big16.s", key={"k": 1})
    s = mongos.big16.s  # one chunk: each batch goes to one shard
    for ordered in (True, False):
        s.delete_many({})
        assert len(s.insert_many(docs, ordered=ordered).inserted_ids) == n
        assert s.count_documents({}) == n
    r = s.bulk_write([pymongo.ReplaceOne({"_id": d["_id"], "k": d["k"]},
                                         {"k": d["k"], "v": 1, "pad": d["_id"]}) for d in docs])
    assert r.matched_count == n and r.modified_count == n
    assert s.count_documents({"v": 1}) == n
    r = s.bulk_write([pymongo.DeleteOne({"_id": d["_id"], "k": d["k"]}) for d in docs])
    assert r.deleted_count == n
    assert s.count_documents({}) == 0
    total = sum(c.big16.plain.count_documents({}) for c in shards)
    assert total == n
