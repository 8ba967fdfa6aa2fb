"""
Two-phase commit through sable-router survives failovers and restarts of
its participants and of its coordinator (issue 28, docs/sharding.md): a
shard's prepared transaction is in its oplog (applyOps with prepare: true),
so the member that becomes primary, or the member that restarts, holds it
prepared and commits it when the coordinator says so; secondaries make it
visible at commitTimestamp.

One cluster of two three-member shard sets (enableTestCommands, for the
coordinator's fail points); tf.<name> is sharded on {k: 1} and split at
k = 0, k < 0 on shard0 and k >= 0 on shard1.  Each transaction writes on
shard1 first, so shard1 coordinates.
"""
import os
import sys
import threading
import time
import uuid

import pymongo
import pytest
from bson.binary import Binary
from bson.int64 import Int64
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure, PyMongoError

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from sharded import direct, launcher, wait_for  # noqa: E402

MEMBERS = 3
COLLS = ["failover", "restart", "coord", "visible"]

cluster = sharded.cluster_fixture("sable-2pcf-", members=MEMBERS,
                                  launcher_args=sharded.set_parameters(["enableTestCommands=1"]))
mongos = sharded.mongos_fixture(split=("tf", COLLS), serverSelectionTimeoutMS=20000)


def member_no(shard, j):
    """The launcher's number of shard's member j (0 is the config server)."""
    return 1 + shard * MEMBERS + j


def primary_of(cluster, shard):
    """The index of shard's primary (waits for one)."""
    return cluster["members"][shard].index(sharded.primary_port(cluster, shard, secs=90))


def primary(cluster, shard):
    return direct(cluster["members"][shard][primary_of(cluster, shard)])


def prepared_on(cluster, shard, ns, _id):
    """shard's primary logged the prepare of a transaction that wrote _id in
    ns (each test's accounts have the same _ids: an earlier test's prepare
    must not count)."""
    with primary(cluster, shard) as c:
        return c.local.oplog.rs.find_one({"op": "c", "o.prepare": True, "o.applyOps": {
            "$elemMatch": {"ns": ns, "o._id": _id}}}) is not None


def fail_point(cluster, shard, name, on):
    with primary(cluster, shard) as c:
        sharded.fail_point(c, name, on)


def start_transfer(cluster, coll, src, dst, amount):
    """A thread moving amount from src (on shard1, written first) to dst
    (on shard0) in one transaction; its outcome lands in the dict returned."""
    out = {}

    def run():
        try:
            with pymongo.MongoClient("127.0.0.1", cluster["router"],
                                     serverSelectionTimeoutMS=30000) as cl:
                c = cl.tf[coll]
                with cl.start_session() as s:
                    s.start_transaction()
                    c.update_one({"_id": src["_id"], "k": src["k"]},
                                 {"$inc": {"bal": -amount}}, session=s)
                    c.update_one({"_id": dst["_id"], "k": dst["k"]},
                                 {"$inc": {"bal": amount}}, session=s)
                    s.commit_transaction()
            out["ok"] = True
        except PyMongoError as e:
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    out["thread"] = t
    return out


def outcome_ok(out):
    """The client's commit succeeded, or failed without knowing the outcome."""
    out["thread"].join(120)
    e = out.get("error")
    return out.get("ok") or (isinstance(e, OperationFailure) and
                             e.has_error_label("UnknownTransactionCommitResult")), e


def balances(cluster, coll):
    with primary(cluster, 0) as a, primary(cluster, 1) as b:
        return (a.tf[coll].find_one({"_id": "a"})["bal"],
                b.tf[coll].find_one({"_id": "b"})["bal"])


def setup_accounts(mongos, coll):
    accounts = [{"_id": "a", "k": -1, "bal": 100}, {"_id": "b", "k": 1, "bal": 100}]
    mongos.tf[coll].with_options(
        write_concern=pymongo.WriteConcern(w="majority")).insert_many(accounts)
    return accounts


def held_transfer(mongos, cluster, coll, amount):
    """Accounts a (shard0) and b (shard1) of 100 each, and a transfer of amount
    from b to a that both shards prepared, its coordinator (shard1) held at
    hangBeforeWritingDecision (which the caller turned on)."""
    a, b = setup_accounts(mongos, coll)
    out = start_transfer(cluster, coll, b, a, amount)
    ns = "tf." + coll
    assert wait_for(lambda: prepared_on(cluster, 0, ns, "a") and prepared_on(cluster, 1, ns, "b"),
                    60)
    time.sleep(1)  # the coordinator has both votes and waits at the fail point
    return out


def no_coordination_left(cluster):
    with primary(cluster, 1) as c:
        return c.config.transaction_coordinators.count_documents({}) == 0


def test_participant_failover_keeps_the_prepared_transaction(mongos, cluster):
    """shard0 prepared; its primary is killed (SIGKILL) while the coordinator
    is held before its decision; the member elected instead holds the
    prepared transaction and commits it when the coordinator goes on."""
    fail_point(cluster, 1, "hangBeforeWritingDecision", True)
    try:
        out = held_transfer(mongos, cluster, "failover", 10)
        old = primary_of(cluster, 0)
        launcher(cluster, "kill", str(member_no(0, old)))
        new = primary_of(cluster, 0)
        assert new != old
        # the new primary holds the transaction prepared: its write is not readable yet
        with direct(cluster["members"][0][new]) as c:
            with pytest.raises(OperationFailure) as e:
                c.tf.failover.find_one({"_id": "a"}, max_time_ms=300)
            assert e.value.code == 50  # a read waits for a prepared transaction
    finally:
        fail_point(cluster, 1, "hangBeforeWritingDecision", False)
    ok, err = outcome_ok(out)
    assert ok, err
    assert wait_for(lambda: balances(cluster, "failover") == (110, 90), 60), \
        balances(cluster, "failover")
    assert wait_for(lambda: no_coordination_left(cluster), 60)
    # the killed member comes back: it prepares the transaction again from its
    # oplog and commits it from the new primary's commit entry
    launcher(cluster, "restart", str(member_no(0, old)))
    with direct(cluster["members"][0][old]) as c:
        assert wait_for(lambda: c.tf.failover.find_one({"_id": "a"})["bal"] == 110, 90)
    assert sum(d["bal"] for d in mongos.tf.failover.find()) == 200


def test_participant_restarted_while_prepared_recovers_it(mongos, cluster):
    """Every member of shard0 is killed while it is prepared, then restarted:
    replaying the oplog past the stable checkpoint prepares the transaction
    again, and the coordinator's decision commits it."""
    fail_point(cluster, 1, "hangBeforeWritingDecision", True)
    try:
        out = held_transfer(mongos, cluster, "restart", 25)
        for j in range(MEMBERS):
            launcher(cluster, "kill", str(member_no(0, j)))
        for j in range(MEMBERS):
            launcher(cluster, "restart", str(member_no(0, j)))
        p = primary_of(cluster, 0)
        with direct(cluster["members"][0][p]) as c:
            with pytest.raises(OperationFailure) as e:
                c.tf.restart.find_one({"_id": "a"}, max_time_ms=300)
            assert e.value.code == 50  # prepared again, not lost: the read waits
    finally:
        fail_point(cluster, 1, "hangBeforeWritingDecision", False)
    ok, err = outcome_ok(out)
    assert ok, err
    assert wait_for(lambda: balances(cluster, "restart") == (125, 75), 60), \
        balances(cluster, "restart")
    assert wait_for(lambda: no_coordination_left(cluster), 60)
    assert sum(d["bal"] for d in mongos.tf.restart.find()) == 200


def test_coordinator_killed_after_its_decision_commits_its_own_part(mongos, cluster):
    """The coordinator's shard (shard1) writes its commit decision and every
    member is killed before any participant hears it; restarted, it resumes
    the coordination and commits both shards' parts, its own included."""
    a, b = setup_accounts(mongos, "coord")
    fail_point(cluster, 1, "hangBeforeWaitingForDecisionWriteConcern", True)
    try:
        out = start_transfer(cluster, "coord", b, a, 7)

        def decided():
            with primary(cluster, 1) as c:
                d = c.config.transaction_coordinators.find_one({"decision": {"$exists": True}})
                return d is not None and d["decision"]["decision"] == "commit"

        assert wait_for(decided, 60)
        for j in range(MEMBERS):
            launcher(cluster, "kill", str(member_no(1, j)))
    finally:
        try:
            fail_point(cluster, 1, "hangBeforeWaitingForDecisionWriteConcern", False)
        except (PyMongoError, AssertionError):
            pass  # killed: the fail point went with the processes
    for j in range(MEMBERS):
        launcher(cluster, "restart", str(member_no(1, j)))
    assert wait_for(lambda: balances(cluster, "coord") == (107, 93), 90), \
        balances(cluster, "coord")
    assert wait_for(lambda: no_coordination_left(cluster), 60)
    ok, err = outcome_ok(out)
    assert ok, err
    assert sum(d["bal"] for d in mongos.tf.coord.find()) == 200


def before(ts):
    return Timestamp(ts.time, ts.inc - 1) if ts.inc > 1 else Timestamp(ts.time - 1, 0xFFFFFFFF)


def test_secondaries_show_the_commit_at_commit_timestamp(mongos, cluster):
    """A secondary makes a two-phase commit visible at commitTimestamp, as
    the primary does, not at its commit entry's later ts: a snapshot read
    at commitTimestamp sees the writes, one just before sees none."""
    c = mongos.tf.visible
    with mongos.start_session() as s:
        with s.start_transaction():
            c.insert_one({"_id": "x", "k": 5}, session=s)
            c.insert_one({"_id": "y", "k": -5}, session=s)
    with primary(cluster, 0) as p:
        entry = p.local.oplog.rs.find_one({"op": "c", "o.prepare": True,
                                           "o.applyOps.o._id": "y"})
        commit = p.local.oplog.rs.find_one({"o.commitTransaction": 1,
                                            "prevOpTime.ts": entry["ts"]})
        pj = primary_of(cluster, 0)
    cts = commit["o"]["commitTimestamp"]
    assert cts < commit["ts"]
    for j, port in enumerate(cluster["members"][0]):
        with direct(port) as m:
            assert wait_for(lambda: m.local.oplog.rs.find_one({"ts": commit["ts"]}) is not None, 60)
            for at, want in ((cts, 1), (before(cts), 0)):
                r = m.tf.command("find", "visible", filter={"_id": "y"},
                                 readConcern={"level": "snapshot", "atClusterTime": at})
                got = len(r["cursor"]["firstBatch"])
                assert got == want, ("primary" if j == pj else "secondary", at, got)


def test_new_primary_resumes_more_coordinations_than_a_batch(mongos, cluster):
    """Every coordination document a primary left is resumed by the next
    primary, not only its recovery's first batch (100): here 150 undecided
    ones, written directly, each aborted on its participant and removed."""
    host = [s["host"] for s in mongos.admin.command("listShards")["shards"]
            if s["_id"] == "shard0"][0]
    docs = [{"_id": {"lsid": {"id": Binary(uuid.uuid4().bytes, 4), "uid": Binary(bytes(32))},
                     "txnNumber": Int64(1)},
             "participants": [{"shardId": "shard0", "host": host}]} for _ in range(150)]
    old = primary_of(cluster, 1)
    with primary(cluster, 1) as c:
        c.config.get_collection("transaction_coordinators", write_concern=pymongo.WriteConcern(
            w="majority")).insert_many(docs)
        try:
            c.admin.command("replSetStepDown", 60, secondaryCatchUpPeriodSecs=10)
        except PyMongoError:
            pass  # the step-down may close this connection
    assert wait_for(lambda: primary_of(cluster, 1) != old, 90)

    def left():
        with primary(cluster, 1) as c:
            return c.config.transaction_coordinators.count_documents({})
    assert wait_for(lambda: left() == 0, 90), left()
    with direct(cluster["members"][1][old]) as c:  # let the old primary run again
        c.admin.command("replSetFreeze", 0)
