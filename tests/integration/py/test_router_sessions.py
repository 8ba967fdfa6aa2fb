"""
Sessions, retryable writes and transactions through sable-router (issue 28,
docs/sharding.md): one cluster of two one-member shard sets per module,
started by build/sable-cluster.  Each collection rs.<name> (COLLS) is
sharded on {k: 1} and split at k = 0, with k < 0 on shard0 and k >= 0 on
shard1, so each test knows which shard a document lives on and checks it
there directly.

Retries are sent over raw sockets (wire.py) with the same lsid and
txnNumber, as a driver does after a connection dropped: a retried
statement must not run twice, however the router splits the batch.
"""
import os
import sys
import threading
import uuid

import pymongo
import pytest
from bson.binary import Binary
from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
import test_retryable as retryable  # noqa: E402
from test_retryable import cmd, new_lsid  # noqa: E402
from test_replset3 import last_oplog_ts  # noqa: E402

# this module's collections and test_router_changestreams.py's (cs, resume, gone)
COLLS = ["ins", "upd", "py", "es", "tx", "tx2", "tx3", "tx4", "tx5", "stale", "hot", "cs", "resume", "gone"]


cluster = sharded.cluster_fixture("sable-rsess-")
mongos = sharded.mongos_fixture(split=("rs", COLLS), uuidRepresentation="standard")
shards = sharded.shards_fixture()


class Raw(retryable.Raw):
    """Commands over a raw socket to the router; ok=False returns error replies."""

    def __call__(self, cmd, db="rs", ok=True):
        return super().__call__(cmd, db=db, ok=ok)


@pytest.fixture
def raw(cluster, mongos):
    r = Raw(cluster["router"])
    yield r
    r.close()


def on_shards(shards, coll, flt):
    return [s.rs[coll].count_documents(flt) for s in shards]


def test_router_advertises_logical_sessions(mongos, raw):
    assert mongos.admin.command("hello")["logicalSessionTimeoutMinutes"] == 30
    r = raw({"startSession": 1}, db="admin")
    assert r["timeoutMinutes"] == 30 and isinstance(r["id"]["id"], (uuid.UUID, Binary))


def test_router_gossips_cluster_time_for_causal_reads(mongos, shards):
    r = mongos.admin.command("ping")
    assert r["$clusterTime"]["clusterTime"] == r["operationTime"]
    c = mongos.rs.upd
    with mongos.start_session(causal_consistency=True) as s:
        c.insert_one({"_id": "causal", "k": -900}, session=s)
        assert s.operation_time is not None
        # the next reads carry readConcern {afterClusterTime}, on both shards
        assert c.find_one({"k": -900}, session=s)["_id"] == "causal"
        assert c.count_documents({"_id": "causal"}, session=s) == 1
        c.delete_one({"k": -900}, session=s)
    last0 = last_oplog_ts(shards[0])
    assert r["operationTime"] <= last0 or r["operationTime"] <= \
        last_oplog_ts(shards[1])


def test_retried_insert_split_over_two_shards_is_not_applied_twice(mongos, shards, raw):
    lsid = new_lsid()
    docs = [{"_id": "a%d" % i, "k": k} for i, k in enumerate([-3, 4, -2, 5])]
    first = raw(cmd("insert", "ins", lsid, 1, documents=docs))
    assert first["n"] == 4 and "writeErrors" not in first
    # the same txnNumber again (a driver's retry after a dropped connection)
    again = raw(cmd("insert", "ins", lsid, 1, documents=docs))
    assert again["n"] == 4 and "writeErrors" not in again
    assert on_shards(shards, "ins", {}) == [2, 2]
    # each shard's oplog entries carry the client's statement ids
    for s, want in ((shards[0], {0, 2}), (shards[1], {1, 3})):
        ids = {e["stmtId"] for e in s.local.oplog.rs.find({"ns": "rs.ins", "op": "i"})}
        assert ids == want
    # a new txnNumber runs again (and fails on the duplicate keys)
    r = raw(cmd("insert", "ins", lsid, 2, documents=docs[:1], ordered=False))
    assert r["writeErrors"][0]["code"] == 11000
    # an older one is refused by the shard that saw the newer
    r = raw(cmd("insert", "ins", lsid, 1, documents=docs[:1]), ok=False)
    assert r.get("ok") != 1 or r.get("writeErrors")


def test_retried_updates_and_find_and_modify_are_not_applied_twice(mongos, shards, raw):
    c = mongos.rs.upd
    c.insert_many([{"_id": 1, "k": -5, "v": 0}, {"_id": 2, "k": 5, "v": 0}])
    lsid = new_lsid()
    upd = [{"q": {"k": -5}, "u": {"$inc": {"v": 1}}}, {"q": {"k": 5}, "u": {"$inc": {"v": 1}}}]
    for _ in range(2):
        r = raw(cmd("update", "upd", lsid, 7, updates=upd))
        assert r["n"] == 2 and r["nModified"] == 2
    assert sorted(d["v"] for d in c.find()) == [1, 1]
    # a statement without the shard key (tried shard by shard)
    for _ in range(2):
        r = raw(cmd("update", "upd", lsid, 8, updates=[{"q": {"_id": 2}, "u": {"$inc": {"v": 10}}}]))
        assert r["n"] == 1
    assert c.find_one({"_id": 2})["v"] == 11
    outs = [raw(cmd("findAndModify", "upd", lsid, 9, query={"k": -5}, update={"$inc": {"v": 100}},
                    new=True))["value"]["v"] for _ in range(2)]
    assert outs == [101, 101] and c.find_one({"_id": 1})["v"] == 101
    for _ in range(2):
        r = raw(cmd("delete", "upd", lsid, 10, deletes=[{"q": {"_id": 2}, "limit": 1}]))
        assert r["n"] == 1
    assert on_shards(shards, "upd", {}) == [1, 0]


def test_pymongo_retryable_writes_through_the_router(cluster, shards):
    with pymongo.MongoClient("127.0.0.1", cluster["router"], retryWrites=True) as cl:
        c = cl.rs.py
        c.insert_many([{"k": k} for k in range(-5, 5)])
        assert c.update_one({"k": 3}, {"$set": {"x": 1}}).modified_count == 1
        assert c.find_one_and_update({"k": -3}, {"$set": {"x": 2}})["k"] == -3
        assert c.delete_one({"k": 4}).deleted_count == 1
        assert on_shards(shards, "py", {}) == [5, 4]
        # the shards recorded the sessions' writes
        assert sum(s.config.transactions.count_documents({}) for s in shards) >= 2


def raw_id(i):
    return i.bytes if isinstance(i, uuid.UUID) else bytes(i)


def local_sessions(shard):
    return {raw_id(d["_id"]["id"])
            for d in shard.admin.aggregate([{"$listLocalSessions": {"allUsers": True}}])}


def test_end_and_kill_sessions_reach_the_shards(mongos, shards, raw):
    lsid = new_lsid()
    raw(cmd("insert", "es", lsid, 1, documents=[{"k": -1}, {"k": 1}]))
    assert all(raw_id(lsid["id"]) in local_sessions(s) for s in shards)
    raw({"endSessions": [lsid]}, db="admin")
    assert not any(raw_id(lsid["id"]) in local_sessions(s) for s in shards)
    # killSessions ends a transaction open on a shard
    lsid = new_lsid()
    raw(cmd("insert", "es", lsid, 1, documents=[{"k": 7}], startTransaction=True,
            autocommit=False))
    raw({"killSessions": [lsid]}, db="admin")
    r = raw(cmd("commitTransaction", 1, lsid, 1, autocommit=False), db="admin", ok=False)
    assert r["code"] == 251  # NoSuchTransaction
    assert shards[1].rs.es.count_documents({"k": 7}) == 0
    # killAllSessions reaches the shards too
    lsid = new_lsid()
    raw(cmd("insert", "es", lsid, 1, documents=[{"k": -8}], startTransaction=True,
            autocommit=False))
    assert shards[0].admin.command("serverStatus")["transactions"]["currentOpen"] == 1
    raw({"killAllSessions": []}, db="admin")
    assert shards[0].admin.command("serverStatus")["transactions"]["currentOpen"] == 0
    r = raw(cmd("commitTransaction", 1, lsid, 1, autocommit=False), db="admin", ok=False)
    assert r["code"] == 251


# ---- transactions ----

def test_single_shard_transaction_commits_and_aborts(mongos, shards):
    c = mongos.rs.tx
    c.insert_one({"_id": 0, "k": 10, "v": 0})
    before = shards[1].admin.command("serverStatus")["transactions"]["totalCommitted"]
    with mongos.start_session() as s:
        with s.start_transaction():
            c.insert_one({"_id": 1, "k": 11}, session=s)
            c.update_one({"k": 10}, {"$inc": {"v": 1}}, session=s)
            assert c.count_documents({"k": {"$gte": 10}}, session=s) == 2
            # not visible outside the transaction
            assert c.find_one({"_id": 1}) is None
    assert c.find_one({"_id": 1})["k"] == 11 and c.find_one({"_id": 0})["v"] == 1
    assert shards[1].admin.command("serverStatus")["transactions"]["totalCommitted"] == before + 1
    with mongos.start_session() as s:
        s.start_transaction()
        c.insert_one({"_id": 2, "k": 12}, session=s)
        s.abort_transaction()
    assert c.find_one({"_id": 2}) is None
    # with_transaction, the driver's helper (commit with w: majority)
    with mongos.start_session() as s:
        s.with_transaction(lambda ss: c.insert_one({"_id": 3, "k": 13}, session=ss),
                           write_concern=WriteConcern("majority"))
    assert c.find_one({"_id": 3}) is not None


def test_transaction_reading_two_shards_and_writing_one(mongos, shards):
    c = mongos.rs.tx2
    c.insert_many([{"_id": i, "k": k} for i, k in enumerate([-20, -10, 10, 20])])
    with mongos.start_session() as s:
        with s.start_transaction(read_concern=ReadConcern("snapshot")):
            assert sorted(d["k"] for d in c.find({}, session=s)) == [-20, -10, 10, 20]
            c.insert_one({"_id": 9, "k": 30}, session=s)
            c.delete_one({"k": 20}, session=s)
    assert sorted(d["k"] for d in c.find()) == [-20, -10, 10, 30]
    assert on_shards(shards, "tx2", {}) == [2, 2]


def test_transaction_writing_two_shards_commits_with_two_phase_commit(mongos, shards):
    c = mongos.rs.tx3
    c.insert_one({"k": -1})
    c.insert_one({"k": 1})
    with mongos.start_session() as s:
        s.start_transaction()
        c.insert_one({"_id": "lo", "k": -50}, session=s)
        c.insert_one({"_id": "hi", "k": 50}, session=s)
        s.commit_transaction()
    assert c.count_documents({"_id": {"$in": ["lo", "hi"]}}) == 2
    assert on_shards(shards, "tx3", {}) == [2, 2]


def test_a_failed_statement_aborts_the_transaction_everywhere(mongos, shards):
    c = mongos.rs.tx4
    c.insert_one({"_id": 1, "k": 1})
    with mongos.start_session() as s:
        s.start_transaction()
        c.insert_one({"_id": 2, "k": -2}, session=s)
        with pytest.raises(pymongo.errors.DuplicateKeyError):
            c.insert_one({"_id": 1, "k": 1}, session=s)
        with pytest.raises(OperationFailure) as e:
            s.commit_transaction()
        assert e.value.code == 251
    assert c.find_one({"_id": 2}) is None
    assert shards[0].admin.command("serverStatus")["transactions"]["currentOpen"] == 0


def test_transaction_cursor_over_both_shards_with_get_more(mongos, shards):
    c = mongos.rs.tx5
    c.insert_many([{"_id": k, "k": k} for k in range(-5, 5)])
    with mongos.start_session() as s:
        with s.start_transaction():
            c.insert_one({"_id": 100, "k": 100}, session=s)
            # batches of 2 from two shards: getMores inside the transaction
            ks = sorted(d["k"] for d in c.find({}, session=s, batch_size=2))
            assert ks == list(range(-5, 5)) + [100]
            cur = c.find({"k": {"$lt": 0}}, session=s, batch_size=1)
            assert next(cur)["k"] < 0
            cur.close()  # killCursors inside the transaction
    assert c.count_documents({}) == 11 and on_shards(shards, "tx5", {}) == [5, 6]


def test_stale_router_starts_the_transaction_where_the_chunk_went(mongos, shards, cluster):
    with sharded.extra_router(cluster, "router-stale") as port, \
            pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=10000) as other:
        c = other.rs.stale
        c.insert_one({"_id": "lo", "k": -1})  # caches k < 0 on shard0
        mongos.admin.command("moveChunk", "rs.stale", find={"k": -1}, to="shard1")
        with other.start_session() as s:
            with s.start_transaction():
                # shard0 answers StaleConfig before its transaction begins; the
                # router refreshes and starts the transaction on shard1 instead
                c.insert_one({"_id": "in-txn", "k": -7}, session=s)
                c.insert_one({"_id": "in-txn2", "k": 7}, session=s)
        assert on_shards(shards, "stale", {}) == [0, 3]


def test_concurrent_transactions_and_retryable_writes(cluster, mongos, shards):
    # 4 threads: transactions that move 1 between two documents of one shard
    # (conflicting, retried by with_transaction on TransientTransactionError)
    # and retryable $inc's on the other shard; the totals must add up
    c = mongos.rs.hot
    c.insert_many([{"_id": "a", "k": 1, "v": 100}, {"_id": "b", "k": 2, "v": 100},
                   {"_id": "n", "k": -1, "v": 0}])
    errors = []

    def work():
        try:
            with pymongo.MongoClient("127.0.0.1", cluster["router"]) as cl:
                h = cl.rs.hot
                for _ in range(10):
                    with cl.start_session() as s:
                        def move(ss):
                            h.update_one({"k": 1}, {"$inc": {"v": -1}}, session=ss)
                            h.update_one({"k": 2}, {"$inc": {"v": 1}}, session=ss)
                        s.with_transaction(move)
                    h.update_one({"k": -1}, {"$inc": {"v": 1}})
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    v = {d["_id"]: d["v"] for d in c.find()}
    assert v == {"a": 60, "b": 140, "n": 40}
