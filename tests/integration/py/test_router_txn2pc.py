"""
Transactions that write on two shards through sable-router commit with
two-phase commit (issue 28, docs/sharding.md): the router has the first
shard coordinate (coordinateCommitTransaction), which prepares every
participant and commits them all at one commitTimestamp, or aborts them all.

One cluster of two one-member shard sets (enableTestCommands, for the
failCommand fail point) per module; each collection tp.<name> is sharded on
{k: 1} and split at k = 0, k < 0 on shard0 and k >= 0 on shard1.
"""
import os
import random
import sys
import threading
import time

import pymongo
import pytest
from bson.int64 import Int64
from bson.son import SON
from pymongo.errors import OperationFailure, PyMongoError

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from sharded import launcher, wait_for  # noqa: E402
from test_replset3 import last_oplog_ts  # noqa: E402
from test_retryable import Raw, cmd, new_lsid  # noqa: E402

COLLS = ["both", "aborted", "noprep", "bank", "retry", "killed"]

cluster = sharded.cluster_fixture("sable-2pc-",
                                  launcher_args=sharded.set_parameters(["enableTestCommands=1"]))
mongos = sharded.mongos_fixture(split=("tp", COLLS), uuidRepresentation="standard")
shards = sharded.shards_fixture()


def committed(shard):
    return shard.admin.command("serverStatus")["transactions"]["totalCommitted"]


def open_txns(shard):
    return shard.admin.command("serverStatus")["transactions"]["currentOpen"]


def test_transaction_writing_two_shards_commits_on_both(mongos, shards):
    c = mongos.tp.both
    c.insert_many([{"_id": "a", "k": -5, "v": 0}, {"_id": "b", "k": 5, "v": 0}])
    before = [committed(s) for s in shards]
    with mongos.start_session() as s:
        with s.start_transaction():
            c.update_one({"_id": "a", "k": -5}, {"$inc": {"v": 1}}, session=s)
            c.update_one({"_id": "b", "k": 5}, {"$inc": {"v": 1}}, session=s)
            c.insert_one({"_id": "c", "k": 7}, session=s)
            # nothing is visible outside the transaction before the commit
            assert c.find_one({"_id": "c"}) is None
    assert [d["v"] for d in c.find({"_id": {"$in": ["a", "b"]}}).sort("k")] == [1, 1]
    assert c.find_one({"_id": "c"}) is not None
    # each shard committed the transaction itself (prepared, then committed)
    assert [committed(s) for s in shards] == [b + 1 for b in before]
    assert shards[0].tp.both.find_one({"_id": "a"})["v"] == 1
    assert shards[1].tp.both.find_one({"_id": "b"})["v"] == 1
    # each shard logged its prepare (applyOps with prepare: true, at the prepareTimestamp)
    # and then {commitTransaction: 1, commitTimestamp} naming it, as mongod
    ts = []
    for sh, _id in zip(shards, ["a", "b"]):
        prep = sh.local.oplog.rs.find_one({"op": "c", "o.prepare": True,
                                           "o.applyOps.o2._id": _id})
        assert prep is not None and prep["txnNumber"] >= 1
        commit = sh.local.oplog.rs.find_one({"op": "c", "o.commitTransaction": 1,
                                             "txnNumber": prep["txnNumber"],
                                             "prevOpTime.ts": prep["ts"]})
        assert commit["lsid"] == prep["lsid"] and commit["ns"] == "admin.$cmd"
        assert prep["ts"] <= commit["o"]["commitTimestamp"] < commit["ts"]
        ts.append(commit["o"]["commitTimestamp"])
        recs = [r for r in sh.config.transactions.find() if r["_id"] == prep["lsid"]]
        assert [(r["state"], r["txnNum"]) for r in recs] == [("committed", prep["txnNumber"])]
    assert ts[0] == ts[1]  # one commitTimestamp: the larger prepare's
    # the coordinator removed its decision document; nothing stays open
    for sh in shards:
        assert sh.config.transaction_coordinators.count_documents({}) == 0
        assert open_txns(sh) == 0


def test_aborted_two_shard_transaction_leaves_neither_write(mongos, shards):
    c = mongos.tp.aborted
    with mongos.start_session() as s:
        s.start_transaction()
        c.insert_one({"_id": "lo", "k": -1}, session=s)
        c.insert_one({"_id": "hi", "k": 1}, session=s)
        s.abort_transaction()
    assert c.count_documents({}) == 0
    assert [sh.tp.aborted.count_documents({}) for sh in shards] == [0, 0]
    for sh in shards:
        assert open_txns(sh) == 0


def test_participant_that_cannot_prepare_aborts_the_whole_transaction(mongos, shards):
    c = mongos.tp.noprep
    shards[1].admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                             "data": {"failCommands": ["prepareTransaction"],
                                      "errorCode": 112}})
    try:
        with mongos.start_session() as s:
            s.start_transaction()
            c.insert_one({"_id": "lo", "k": -1}, session=s)
            c.insert_one({"_id": "hi", "k": 1}, session=s)
            with pytest.raises(OperationFailure) as e:
                s.commit_transaction()
    finally:
        shards[1].admin.command({"configureFailPoint": "failCommand", "mode": "off"})
    assert e.value.code == 251, e.value.details
    assert "TransientTransactionError" in e.value.details.get("errorLabels", [])
    assert c.count_documents({}) == 0
    assert [sh.tp.noprep.count_documents({}) for sh in shards] == [0, 0]
    # shard0 had prepared: the coordinator's abort reached it (and its oplog says so)
    prep = shards[0].local.oplog.rs.find_one({"o.prepare": True, "o.applyOps.o._id": "lo"})
    aborts = shards[0].local.oplog.rs.find({"o.abortTransaction": 1,
                                            "txnNumber": prep["txnNumber"],
                                            "prevOpTime.ts": prep["ts"]})
    assert prep["lsid"] in [a["lsid"] for a in aborts]
    for sh in shards:
        assert open_txns(sh) == 0
        assert sh.config.transaction_coordinators.count_documents({}) == 0
    # a transaction's write conflict on one shard makes its commit fail as a whole too
    c.insert_many([{"_id": "x", "k": -3, "v": 0}, {"_id": "y", "k": 3, "v": 0}])
    with mongos.start_session() as s:
        s.start_transaction()
        c.update_one({"_id": "x", "k": -3}, {"$inc": {"v": 1}}, session=s)
        c.update_one({"_id": "y", "k": 3}, {"$inc": {"v": 1}}, session=s)
        with mongos.start_session() as s2:
            s2.start_transaction()
            with pytest.raises(OperationFailure) as e:
                c.update_one({"_id": "y", "k": 3}, {"$inc": {"v": 10}}, session=s2)
            assert e.value.code == 112
            s2.abort_transaction()
        s.commit_transaction()
    assert sorted(d["v"] for d in c.find({"_id": {"$in": ["x", "y"]}})) == [1, 1]


def test_snapshot_reads_never_see_half_a_transfer(mongos, shards, cluster):
    """Bank accounts on both shards; transfers between them in two-shard
    transactions from several threads; readers sum all accounts at one
    atClusterTime through the router (theirs, or one the router chooses), and
    the total never changes."""
    c = mongos.tp.bank
    accounts = [{"_id": i, "k": k, "bal": 100} for i, k in enumerate([-4, -3, -2, -1, 1, 2, 3, 4])]
    c.insert_many(accounts)
    loaded = max(last_oplog_ts(sh) for sh in shards)  # both shards have every account from here
    total = 100 * len(accounts)
    stop = time.monotonic() + 8
    done = {"transfers": 0, "reads": 0, "conflicts": 0}
    errors = []

    def transfer(seed):
        rnd = random.Random(seed)
        with pymongo.MongoClient("127.0.0.1", cluster["router"]) as cl:
            coll = cl.tp.bank
            while time.monotonic() < stop:
                src = rnd.choice(accounts[:4])
                dst = rnd.choice(accounts[4:])
                if rnd.random() < 0.5:
                    src, dst = dst, src
                amount = rnd.randint(1, 10)
                try:
                    with cl.start_session() as s:
                        with s.start_transaction():
                            coll.update_one({"_id": src["_id"], "k": src["k"]},
                                            {"$inc": {"bal": -amount}}, session=s)
                            coll.update_one({"_id": dst["_id"], "k": dst["k"]},
                                            {"$inc": {"bal": amount}}, session=s)
                    done["transfers"] += 1
                except OperationFailure as e:
                    if not e.has_error_label("TransientTransactionError"):
                        errors.append("transfer: %r" % e.details)
                        return
                    done["conflicts"] += 1
                except PyMongoError as e:
                    errors.append("transfer: %r" % e)
                    return

    def read():
        with pymongo.MongoClient("127.0.0.1", cluster["router"]) as cl:
            while time.monotonic() < stop:
                # a time both shards have reached
                at = min(last_oplog_ts(sh) for sh in shards)
                if at < loaded:
                    time.sleep(0.01)
                    continue
                # every other read names no time: the router chooses one for both shards
                rc = {"level": "snapshot", "atClusterTime": at}
                if done["reads"] % 2:
                    rc = {"level": "snapshot"}
                try:
                    r = cl.tp.command("find", "bank", filter={}, batchSize=100, readConcern=rc)
                except OperationFailure as e:
                    if e.code in (112, 246):  # a prepared transaction's write: read again
                        done["conflicts"] += 1
                        continue
                    errors.append("read: %r" % e.details)
                    return
                docs = r["cursor"]["firstBatch"]
                got = sum(d["bal"] for d in docs)
                if len(docs) != len(accounts) or got != total:
                    errors.append("at %r: %d accounts, total %d" % (at, len(docs), got))
                    return
                done["reads"] += 1

    threads = [threading.Thread(target=transfer, args=(i,)) for i in range(3)]
    threads += [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:5]
    print("bank:", done)
    assert done["transfers"] > 5 and done["reads"] > 5, done
    assert sum(d["bal"] for d in c.find()) == total
    for sh in shards:
        assert open_txns(sh) == 0


def test_commit_and_coordinate_commit_are_idempotent(mongos, shards, cluster):
    """A driver retries commitTransaction, and the router retries
    coordinateCommitTransaction after a network error: a repeat gets the
    first one's outcome (raw sockets, so the lsid is exactly the same)."""
    lsid = new_lsid()
    router = Raw(cluster["router"])
    try:
        for i, k in enumerate([-1, 1]):
            c = cmd("insert", "retry", lsid, 1, documents=[{"_id": k, "k": k}], autocommit=False)
            if i == 0:
                c["startTransaction"] = True
            router(c, db="tp")
        commit = SON([("commitTransaction", 1), ("lsid", lsid), ("txnNumber", Int64(1)),
                      ("autocommit", False)])
        assert router(commit, db="admin")["ok"] == 1
        assert router(commit, db="admin")["ok"] == 1  # the retry: the same answer
    finally:
        router.close()
    assert mongos.tp.retry.count_documents({}) == 2
    hosts = {d["_id"]: d["host"] for d in mongos.config.shards.find()}
    # the coordinator (shard0: the first shard the transaction wrote) answers a repeat
    sh0 = Raw(cluster["shards"][0])
    try:
        r = sh0(SON([("coordinateCommitTransaction", 1),
                     ("participants", [{"shardId": n, "host": hosts[n]}
                                       for n in ("shard0", "shard1")]),
                     ("lsid", lsid), ("txnNumber", Int64(1)), ("autocommit", False)]),
                db="admin")
        assert r["ok"] == 1
        # bad arguments get errors, not a coordination
        r = sh0(SON([("coordinateCommitTransaction", 1), ("participants", []),
                     ("lsid", lsid), ("txnNumber", Int64(2)), ("autocommit", False)]),
                db="admin", ok=False)
        assert r["ok"] == 0 and r["code"] == 2
    finally:
        sh0.close()
    assert mongos.tp.retry.count_documents({}) == 2
    for sh in shards:
        assert open_txns(sh) == 0


def prepared_conflict(shard):
    """A read of shard's tp.killed meets a prepared transaction's write: it
    waits for the outcome (test_prepare_conflicts.py), here until maxTimeMS."""
    with pytest.raises(OperationFailure) as e:
        shard.tp.killed.find_one({"_id": "hi"}, max_time_ms=300)
    return e.value.code == 50


def test_coordinator_killed_after_its_decision_resumes_it(mongos, shards, cluster):
    """The coordinator (shard0) decides commit and commits its own part, but
    shard1 drops every commitTransaction (failCommand closeConnection); shard0
    is killed (SIGKILL) while it retries.  Restarted, it finds its document in
    config.transaction_coordinators and sends the decision again: shard1,
    still prepared, commits."""
    c = mongos.tp.killed
    shards[1].admin.command({"configureFailPoint": "failCommand", "mode": "alwaysOn",
                             "data": {"failCommands": ["commitTransaction"],
                                      "closeConnection": True}})
    outcome = {}

    def commit():
        try:
            with pymongo.MongoClient("127.0.0.1", cluster["router"]) as cl:
                with cl.start_session() as s:
                    s.start_transaction()
                    cl.tp.killed.insert_one({"_id": "lo", "k": -1}, session=s)
                    cl.tp.killed.insert_one({"_id": "hi", "k": 1}, session=s)
                    s.commit_transaction()
            outcome["ok"] = True
        except PyMongoError as e:
            outcome["error"] = e

    t = threading.Thread(target=commit)
    t.start()
    try:
        # the decision is taken and shard0's own part committed; shard1 stays prepared
        assert wait_for(lambda: shards[0].tp.killed.count_documents({"_id": "lo"}) == 1, 20)
        assert prepared_conflict(shards[1])
        assert open_txns(shards[1]) == 1
        launcher(cluster, "kill", "1")  # members: cfg, shard0, shard1
    finally:
        shards[1].admin.command({"configureFailPoint": "failCommand", "mode": "off"})
    time.sleep(0.5)  # the router's commit fails meanwhile: it must not abort anything
    assert prepared_conflict(shards[1])  # nobody else can commit or abort it
    launcher(cluster, "restart", "1")
    assert wait_for(lambda: shards[1].tp.killed.count_documents({"_id": "hi"}) == 1, 30)
    assert wait_for(lambda: shards[0].config.transaction_coordinators.count_documents({}) == 0)
    assert open_txns(shards[1]) == 0
    assert c.count_documents({}) == 2
    t.join(60)
    # the client's commit either failed with UnknownTransactionCommitResult or,
    # retried after the restart, got the resumed coordination's outcome
    e = outcome.get("error")
    assert outcome.get("ok") or (isinstance(e, OperationFailure) and
                                 e.has_error_label("UnknownTransactionCommitResult")), e


def test_change_streams_see_a_prepared_transaction_at_its_commit(mongos, shards):
    """A shard's change stream shows a two-shard transaction's writes once,
    at its commit entry's time (from the prepare entry's operations), and
    nothing of one that aborted after it prepared."""
    c = mongos.tp.both
    with shards[0].tp.both.watch() as stream:
        with mongos.start_session() as s:
            with s.start_transaction():
                c.insert_one({"_id": "cs-lo", "k": -9}, session=s)
                c.insert_one({"_id": "cs-hi", "k": 9}, session=s)
        shards[1].admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                                 "data": {"failCommands": ["prepareTransaction"],
                                          "errorCode": 112}})
        try:
            with mongos.start_session() as s:
                s.start_transaction()
                c.insert_one({"_id": "cs-no", "k": -8}, session=s)
                c.insert_one({"_id": "cs-no2", "k": 8}, session=s)
                with pytest.raises(OperationFailure):
                    s.commit_transaction()
        finally:
            shards[1].admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        c.insert_one({"_id": "cs-after", "k": -7})
        events = []
        while len(events) < 2:
            ev = stream.try_next()
            if ev is not None:
                events.append(ev)
    assert [e["documentKey"]["_id"] for e in events] == ["cs-lo", "cs-after"]
    commit = shards[0].local.oplog.rs.find_one({"o.commitTransaction": 1},
                                               sort=[("$natural", -1)])
    assert events[0]["operationType"] == "insert" and "lsid" in events[0]
    assert events[0]["clusterTime"] == commit["ts"] != commit["o"]["commitTimestamp"]
