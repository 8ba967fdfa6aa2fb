"""
A chunk migration that meets a transaction on its donor (issue 28,
docs/sharding.md "Migrations and the balancer"; docs/reliability.md,
sharded finding (4)): a two-shard transaction prepared on the donor and
holding a document of the moving range must end before the migration
commits, as mongod's critical section waits for the collection's prepared
transactions.  Before, the migration committed while the transaction was
prepared; the donor's range deletion then met the prepared document, and
the transaction's write to it, committed on the donor after the commit,
was deleted with the range: the update was lost (found by
scripts/faults.sh --sharded --seed 5 --workload bank, where the deletion
failed and recovery held the collection's critical section about 80 s).
The range deleter also retries a write conflict instead of failing.

One cluster: a config server and two one-member shards.  mf.<name> is
sharded on {k: 1}: [MinKey, 50) on the recipient, [50, 100) and
[100, MaxKey) on the donor; a transfer between k = 10 (on the recipient,
written first, so the recipient coordinates) and k = 150 (on the donor, in
the chunk moved) is held prepared by the coordinator's
hangBeforeWritingDecision.
"""
import os
import sys
import threading
import time

from pymongo.errors import OperationFailure, PyMongoError

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from sharded import wait_for  # noqa: E402
from test_migration_failover import (LAUNCHER_ARGS, client, direct, fail_point,  # noqa: E402,F401
                                     leftovers, mongos, recv_status)

N = 200
TOTAL = 100 * N


cluster = sharded.cluster_fixture("sable-migprep-", launcher_args=LAUNCHER_ARGS)


def make_coll(mongos, name):
    """mf.<name>: k = 0..N-1, 100 each; returns (donor, recipient)."""
    ns = "mf." + name
    mongos.admin.command("shardCollection", ns, key={"k": 1})
    mongos.mf[name].insert_many([{"_id": i, "k": i, "bal": 100} for i in range(N)])
    mongos.admin.command("split", ns, middle={"k": 50})
    mongos.admin.command("split", ns, middle={"k": 100})
    donor = int(mongos.config.databases.find_one({"_id": "mf"})["primary"][-1])
    mongos.admin.command("moveChunk", ns, find={"k": 0}, to="shard%d" % (1 - donor))
    return donor, 1 - donor


def on_thread(fn):
    """fn() on a thread; its result ("ok") or error, and the seconds it
    took, land in the dict returned."""
    out = {}

    def run():
        t0 = time.time()
        try:
            out["ok"] = fn()
        except PyMongoError as e:  # noqa: BLE001
            out["error"] = e
        out["secs"] = time.time() - t0

    out["thread"] = threading.Thread(target=run)
    out["thread"].start()
    return out


def move(cluster, name, k, to):
    """moveChunk of k's chunk to shard `to`, on a thread."""
    def run():
        with client(cluster["router"]) as c:
            return c.admin.command("moveChunk", "mf." + name, find={"k": k}, to="shard%d" % to)
    return on_thread(run)


def transfer(cluster, name, amount):
    """k = 10 gives amount to k = 150 in one transaction, on a thread."""
    def run():
        with client(cluster["router"]) as cl:
            c = cl.mf[name]
            with cl.start_session() as s:
                s.start_transaction()
                c.update_one({"k": 10}, {"$inc": {"bal": -amount}}, session=s)
                c.update_one({"k": 150}, {"$inc": {"bal": amount}}, session=s)
                s.commit_transaction()
        return True
    return on_thread(run)


def prepared_on(cluster, i, ns, _id):
    """Shard i logged the prepare of a transaction that updated _id in ns
    (every test's transfer updates the same _ids: an earlier test's prepare
    must not count, or the migration is let go before this one prepared)."""
    with direct(cluster, i) as c:
        return c.local.oplog.rs.find_one({"op": "c", "o.prepare": True, "o.applyOps": {
            "$elemMatch": {"ns": ns, "o2._id": _id}}}) is not None


def hold_steady(cluster, name, donor, recip):
    """Start moving [100, MaxKey) to the recipient and hold the donor once
    the recipient is steady, before the critical section."""
    fail_point(cluster, donor, "moveChunkHangAtStep3", True)
    out = move(cluster, name, 150, recip)
    assert wait_for(lambda: recv_status(cluster, recip).get("state") == "steady")
    return out


def prepare_transfer(cluster, name, donor, recip, amount):
    """The transfer, held prepared on both shards by its coordinator (the
    recipient)."""
    fail_point(cluster, recip, "hangBeforeWritingDecision", True)
    tx = transfer(cluster, name, amount)
    ns = "mf." + name
    assert wait_for(lambda: prepared_on(cluster, donor, ns, 150) and
                    prepared_on(cluster, recip, ns, 10))
    return tx


def balances(mongos, name):
    docs = list(mongos.mf[name].find({}, {"k": 1, "bal": 1}))
    return sorted(d["k"] for d in docs), sum(d["bal"] for d in docs), {
        d["k"]: d["bal"] for d in docs if d["k"] in (10, 150)}


def test_migration_waits_for_a_prepared_transaction_on_its_range(mongos, cluster):
    donor, recip = make_coll(mongos, "wait")
    mig = hold_steady(cluster, "wait", donor, recip)
    tx = prepare_transfer(cluster, "wait", donor, recip, 7)
    fail_point(cluster, donor, "moveChunkHangAtStep3", False)  # the critical section
    time.sleep(2)
    fail_point(cluster, recip, "hangBeforeWritingDecision", False)  # the transfer commits
    tx["thread"].join(60)
    mig["thread"].join(90)
    assert tx.get("ok"), tx
    assert "ok" in mig, mig
    # the transfer's write to k = 150 moved with the range: nothing lost
    ks, total, bal = balances(mongos, "wait")
    assert ks == list(range(N)) and total == TOTAL and bal == {10: 93, 150: 107}, (total, bal)
    with direct(cluster, donor) as d:
        assert d.mf.wait.count_documents({"k": {"$gte": 100}}) == 0
    assert wait_for(lambda: leftovers(cluster) == 0, 10)
    # the next migration of the collection is not refused
    back = move(cluster, "wait", 150, donor)
    back["thread"].join(60)
    assert "ok" in back and back["secs"] < 15, back


def test_transaction_prepared_too_long_aborts_the_migration_only(mongos, cluster):
    donor, recip = make_coll(mongos, "long")
    mig = hold_steady(cluster, "long", donor, recip)
    tx = prepare_transfer(cluster, "long", donor, recip, 3)
    fail_point(cluster, donor, "moveChunkHangAtStep3", False)
    try:
        mig["thread"].join(60)
        # refused after a bounded wait, the range still the donor's
        assert isinstance(mig.get("error"), OperationFailure), mig
        assert mig["secs"] < 20, mig
        assert mongos.config.chunks.find_one(
            {"uuid": mongos.config.collections.find_one({"_id": "mf.long"})["uuid"],
             "min": {"k": 100}})["shard"] == "shard%d" % donor
    finally:
        fail_point(cluster, recip, "hangBeforeWritingDecision", False)
    tx["thread"].join(60)
    assert tx.get("ok"), tx
    ks, total, bal = balances(mongos, "long")
    assert ks == list(range(N)) and total == TOTAL and bal == {10: 97, 150: 103}
    assert wait_for(lambda: leftovers(cluster) == 0, 10)
    again = move(cluster, "long", 150, recip)
    again["thread"].join(60)
    assert "ok" in again and again["secs"] < 15, again
    assert balances(mongos, "long")[1:] == (TOTAL, {10: 97, 150: 103})


def test_range_deletion_retries_a_write_conflict(mongos, cluster):
    """A write to the range on the donor (not routed) that the deletion
    meets after the commit: the deletion waits it out, the migration ends
    and the collection's critical section with it, nothing is left."""
    donor, recip = make_coll(mongos, "conflict")
    fail_point(cluster, donor, "moveChunkHangAtStep5", True)  # committed, nothing deleted
    mig = move(cluster, "conflict", 150, recip)
    uuid = mongos.config.collections.find_one({"_id": "mf.conflict"})["uuid"]
    assert wait_for(lambda: mongos.config.chunks.find_one(
        {"uuid": uuid, "min": {"k": 100}})["shard"] == "shard%d" % recip)
    with direct(cluster, donor) as d:
        with d.start_session() as s:
            s.start_transaction()
            d.mf.conflict.update_one({"k": 150}, {"$set": {"held": 1}}, session=s)
            fail_point(cluster, donor, "moveChunkHangAtStep5", False)  # the deletion starts
            time.sleep(7)  # longer than a delete command's own retries
            s.abort_transaction()
    mig["thread"].join(60)
    assert "ok" in mig, mig
    with direct(cluster, donor) as d:
        # the range deleter removes the donor's copy after the migration
        assert wait_for(lambda: d.mf.conflict.count_documents({"k": {"$gte": 100}}) == 0, 60)
        log = d.admin.command("getLog", "global")["log"]
        assert [l for l in log if "met a conflict" in l], log[-5:]  # it waited
        assert not [l for l in log if "range failed" in l], log[-5:]
    assert leftovers(cluster) == 0
    back = move(cluster, "conflict", 150, donor)
    back["thread"].join(60)
    assert "ok" in back and back["secs"] < 15, back
