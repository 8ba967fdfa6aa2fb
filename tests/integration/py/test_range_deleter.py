"""
The donor's range deletion after a migration (docs/sharding.md,
"Migrations", step 7): the donor leaves its critical section and commits
without deleting its copy of the range; the range deleter deletes it later,
in the background, from its config.rangeDeletions task (after
orphanCleanupDelaySecs; 0 in these tests), with fromMigrate entries, and
resumes after a restart.  Meanwhile the copy is an orphan that no routed
read or write sees, and a migration bringing the range back waits for the
deletion (receiveChunkWaitForRangeDeleterTimeoutMS).  A cluster of a
config server and two one-member shards; the range deleter is held with
mongod's suspendRangeDeletion fail point.
"""

import os
import sys
import threading
import time

import pytest
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.read_concern import ReadConcern

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from sharded import direct, fail_point, launcher, wait_for  # noqa: E402

N = 3000
HALF = N // 2

cluster = sharded.cluster_fixture("sable-rdel-", launcher_args=sharded.set_parameters(
    ["enableTestCommands=1"]))
mongos = sharded.mongos_fixture(stop_balancer=True, enable=("rd",))


def shard(cluster, i):
    return direct(cluster["shards"][i])


def make_coll(mongos, name):
    """rd.<name> sharded on k, N documents, split at HALF; both chunks on the
    primary shard.  Returns (donor, recipient) shard indexes."""
    ns = "rd." + name
    mongos.admin.command("shardCollection", ns, key={"k": 1})
    mongos.rd[name].insert_many([{"_id": i, "k": i, "v": "x" * 50} for i in range(N)])
    mongos.admin.command("split", ns, middle={"k": HALF})
    donor = int(mongos.config.databases.find_one({"_id": "rd"})["primary"][-1])
    return donor, 1 - donor


def move(mongos, name, to, **kw):
    return mongos.admin.command("moveChunk", "rd." + name, find={"k": HALF},
                                to="shard%d" % to, **kw)


def upper_on(cluster, i, name):
    with shard(cluster, i) as c:
        return c.rd[name].count_documents({"k": {"$gte": HALF}})


def tasks(cluster, i):
    with shard(cluster, i) as c:
        return list(c.config.rangeDeletions.find())


def deleter_report(cluster, i, name):
    """For a failed wait: shard i's copy of rd.<name>, its tasks, and what
    its log says of range deletions (the last 20 such lines)."""
    try:
        state = "%d documents at k >= HALF; tasks %s" % (upper_on(cluster, i, name),
                                                        tasks(cluster, i))
    except Exception as e:  # noqa: BLE001 - a report, whatever the shard's state
        state = "shard unreachable: %s" % str(e)[:200]
    log = os.path.join(cluster["dir"], "shard%d" % i, "member0", "sabled.log")
    with open(log, errors="replace") as f:
        lines = [ln.strip()[:400] for ln in f
                 if '"rangedeleter"' in ln or "range deletion" in ln or "sabled starting" in ln]
    return state + "\n" + "\n".join(lines[-20:])


def suspend(cluster, i, on):
    with shard(cluster, i) as c:
        fail_point(c, "suspendRangeDeletion", on)


def test_donor_deletes_after_the_commit_unseen_by_routed_commands(mongos, cluster):
    donor, recip = make_coll(mongos, "bg")
    coll = mongos.rd.bg
    with mongos.rd.watch() as stream:
        suspend(cluster, donor, True)
        try:
            move(mongos, "bg", recip)
            # committed and answered with the donor's copy still in place: the
            # deletion is no part of the migration any more
            assert upper_on(cluster, donor, "bg") == HALF
            assert upper_on(cluster, recip, "bg") == HALF
            (t,) = tasks(cluster, donor)
            assert "pending" not in t and t["whenToClean"] == "delayed"
            assert t["range"]["min"] == {"k": HALF} and t["nss"] == "rd.bg"
            # every routed read and write sees each document once
            ids = [d["_id"] for d in coll.find({}, {"_id": 1})]
            assert sorted(ids) == list(range(N))
            assert coll.count_documents({}) == N
            assert coll.count_documents({"k": {"$gte": HALF}}) == HALF
            assert len(coll.distinct("k")) == N
            assert list(coll.aggregate([{"$group": {"_id": None, "n": {"$sum": 1}}}]))[0]["n"] == N
            majority = coll.with_options(read_concern=ReadConcern("majority"))
            assert majority.count_documents({}) == N
            assert coll.update_many({}, {"$set": {"u": 1}}).modified_count == N
            assert coll.delete_many({"k": {"$gte": N - 10}}).deleted_count == 10
            # count without a query counts the orphans, as mongod's does
            assert mongos.rd.command("count", "bg")["n"] == N - 10 + HALF
            # the balancer's data size of the donor leaves its orphans out
            with shard(cluster, donor) as c:
                size = c.rd.command("collStats", "bg")["size"]
                bal = c.admin.command("_shardsvrGetStatsForBalancing", 1, scaleFactor=1,
                                      collections=[{"ns": "rd.bg"}])["stats"][0]["collSize"]
                assert abs(bal - size / 2) < size * 0.02, (bal, size)  # HALF of N are orphans
        finally:
            suspend(cluster, donor, False)
        # the range deleter runs now (orphanCleanupDelaySecs=0) and removes its task
        assert wait_for(lambda: upper_on(cluster, donor, "bg") == 0 and
                        not tasks(cluster, donor))
        assert mongos.rd.command("count", "bg")["n"] == N - 10
        with shard(cluster, donor) as c:  # its entries say fromMigrate
            assert c.local.oplog.rs.count_documents(
                {"ns": "rd.bg", "op": "d", "fromMigrate": True}) == HALF
        # the change stream shows the client's deletes, none of the migration's
        coll.insert_one({"_id": "end", "k": -1})
        deletes = []
        for ev in stream:
            if ev["operationType"] == "delete":
                deletes.append(ev["documentKey"]["_id"])
            if ev["operationType"] == "insert" and ev["documentKey"]["_id"] == "end":
                break
        assert sorted(deletes) == list(range(N - 10, N))


def test_migration_back_waits_for_the_overlapping_deletion(mongos, cluster):
    donor, recip = make_coll(mongos, "back")
    suspend(cluster, donor, True)
    out = {}

    def back():
        try:
            out["reply"] = move(mongos, "back", donor)
        except OperationFailure as e:
            out["error"] = e

    try:
        move(mongos, "back", recip)
        t = threading.Thread(target=back)
        t.start()
        time.sleep(2)
        # the recipient (the old donor) clones nothing before its deletion ended
        assert t.is_alive()
        assert upper_on(cluster, donor, "back") == HALF
        # its task of the range it gave, and its pending one as the recipient
        assert sorted(t["donorShardId"] for t in tasks(cluster, donor)) == [
            "shard%d" % donor, "shard%d" % recip]
    finally:
        suspend(cluster, donor, False)
    t.join(60)
    assert not t.is_alive() and "error" not in out, out
    # the range is back once: the deletion did not take the returned copy
    assert upper_on(cluster, donor, "back") == HALF
    assert sorted(d["_id"] for d in mongos.rd.back.find({}, {"_id": 1})) == list(range(N))
    # the second donor's copy goes in the background too
    assert wait_for(lambda: not tasks(cluster, 0) and not tasks(cluster, 1))
    assert upper_on(cluster, recip, "back") == 0
    assert upper_on(cluster, donor, "back") == HALF


def test_migration_back_gives_up_after_the_wait(mongos, cluster):
    donor, recip = make_coll(mongos, "late")
    with shard(cluster, donor) as c:
        was = c.admin.command("setParameter", 1, receiveChunkWaitForRangeDeleterTimeoutMS=300)
        assert was["was"] == 10000  # mongod's default
    suspend(cluster, donor, True)
    try:
        move(mongos, "late", recip)
        with pytest.raises(OperationFailure) as e:
            move(mongos, "late", donor)
        assert "overlapping range deletion" in str(e.value)
    finally:
        suspend(cluster, donor, False)
        with shard(cluster, donor) as c:
            c.admin.command("setParameter", 1, receiveChunkWaitForRangeDeleterTimeoutMS=10000)
    assert wait_for(lambda: not tasks(cluster, donor))
    move(mongos, "late", donor)  # once the deletion ended
    assert upper_on(cluster, donor, "late") == HALF
    assert sorted(d["_id"] for d in mongos.rd.late.find({}, {"_id": 1})) == list(range(N))


def test_delay_and_wait_for_delete(mongos, cluster):
    donor, recip = make_coll(mongos, "delay")
    with shard(cluster, donor) as c:
        assert c.admin.command("getParameter", 1, orphanCleanupDelaySecs=1)[
            "orphanCleanupDelaySecs"] == 0  # the tests' setting (mongod's default: 900)
        c.admin.command("setParameter", 1, orphanCleanupDelaySecs=3)
    try:
        t0 = time.monotonic()
        move(mongos, "delay", recip)
        time.sleep(1)
        assert upper_on(cluster, donor, "delay") == HALF  # not yet due
        assert wait_for(lambda: upper_on(cluster, donor, "delay") == 0, 30)
        assert time.monotonic() - t0 >= 2.5
        assert wait_for(lambda: not tasks(cluster, donor))
        # _waitForDelete: the deletion before the answer, without the delay
        move(mongos, "delay", donor)
        move(mongos, "delay", recip, _waitForDelete=True)
        assert upper_on(cluster, donor, "delay") == 0
        assert not tasks(cluster, donor)
    finally:
        with shard(cluster, donor) as c:
            c.admin.command("setParameter", 1, orphanCleanupDelaySecs=0)


def test_restarted_donor_resumes_the_deletion(mongos, cluster):
    donor, recip = make_coll(mongos, "restart")
    suspend(cluster, donor, True)
    move(mongos, "restart", recip)
    assert upper_on(cluster, donor, "restart") == HALF
    launcher(cluster, "kill", str(1 + donor))  # members: cfg 0, shard0 1, shard1 2
    launcher(cluster, "restart", str(1 + donor))  # the fail point is off after a restart
    # the first routed read after the restart sees each document once
    for _ in range(150):
        try:
            ids = sorted(d["_id"] for d in mongos.rd.restart.find({}, {"_id": 1}))
            break
        except Exception:  # noqa: BLE001 - the shard is coming back
            time.sleep(0.2)
    assert ids == list(range(N))
    assert wait_for(lambda: upper_on(cluster, donor, "restart") == 0 and
                    not tasks(cluster, donor), 60), deleter_report(cluster, donor, "restart")
    # and a new migration of another range runs while none is left
    move(mongos, "restart", donor)
    assert sorted(d["_id"] for d in mongos.rd.restart.find({}, {"_id": 1})) == list(range(N))


def test_new_primary_deletes_after_its_migration_recovery(mongos, cluster):
    # A new primary's migration recovery clears the versions cached before and
    # settles what migrations left; its range deleter waits for it.  Before
    # it did, a deletion that read the ownership filter just after recovery
    # cleared the cache found none, took that for "this shard owns it all",
    # and dropped its task with the range undeleted: orphans for good (seen
    # in CI, in test_restarted_donor_resumes_the_deletion).
    donor, recip = make_coll(mongos, "stepup")
    suspend(cluster, donor, True)
    move(mongos, "stepup", recip)
    with shard(cluster, donor) as c:
        fail_point(c, "hangMigrationRecovery", True)
        term = c.admin.command("replSetGetStatus")["term"]
        try:
            c.admin.command("replSetStepDown", 1, secondaryCatchUpPeriodSecs=0, force=True)
        except PyMongoError:
            pass  # the connection may close
    try:
        with shard(cluster, donor) as c:
            # elected again, in a new term; recovery held
            assert wait_for(lambda: c.admin.command("hello")["isWritablePrimary"] and
                            c.admin.command("replSetGetStatus")["term"] > term, 60)
            fail_point(c, "suspendRangeDeletion", False)
            time.sleep(3)  # the deleter looks every second
            assert upper_on(cluster, donor, "stepup") == HALF
            assert len(tasks(cluster, donor)) == 1
    finally:
        with shard(cluster, donor) as c:
            fail_point(c, "hangMigrationRecovery", False)
            fail_point(c, "suspendRangeDeletion", False)
    assert wait_for(lambda: upper_on(cluster, donor, "stepup") == 0 and
                    not tasks(cluster, donor), 60), deleter_report(cluster, donor, "stepup")
    assert sorted(d["_id"] for d in mongos.rd.stepup.find({}, {"_id": 1})) == list(range(N))


def test_deletion_spares_a_recreated_collection(mongos, cluster):
    donor, recip = make_coll(mongos, "again")
    suspend(cluster, donor, True)
    try:
        move(mongos, "again", recip)
        # dropped and sharded again before the deletion ran: the task's range
        # now holds documents the donor owns
        mongos.rd.again.drop()
        mongos.admin.command("shardCollection", "rd.again", key={"k": 1})
        mongos.rd.again.insert_many([{"_id": i, "k": i} for i in range(N)])
        assert len(tasks(cluster, donor)) == 1
    finally:
        suspend(cluster, donor, False)
    assert wait_for(lambda: not tasks(cluster, donor))
    assert upper_on(cluster, donor, "again") == HALF
    assert mongos.rd.again.count_documents({}) == N


def test_cleanup_orphaned_waits_for_the_deletions(mongos, cluster):
    # mongod 7.0's cleanupOrphaned on a shard: answers once config.rangeDeletions holds
    # no task for the namespace
    donor, recip = make_coll(mongos, "co")
    suspend(cluster, donor, True)
    try:
        move(mongos, "co", recip)
        assert len(tasks(cluster, donor)) == 1
        with shard(cluster, donor) as c:
            t0 = time.monotonic()
            with pytest.raises(OperationFailure) as e:
                c.admin.command("cleanupOrphaned", "rd.co", maxTimeMS=1500)
            assert e.value.code == 50  # MaxTimeMSExpired: still waiting
            assert time.monotonic() - t0 >= 1.4
            assert upper_on(cluster, donor, "co") == HALF and len(tasks(cluster, donor)) == 1
            # the recipient has no task: at once; another namespace's task is no wait
            with shard(cluster, recip) as r:
                assert r.admin.command("cleanupOrphaned", "rd.co")["ok"] == 1
            mongos.rd.other.insert_one({"x": 1})
            assert c.admin.command("cleanupOrphaned", "rd.other", maxTimeMS=5000)["ok"] == 1
            assert c.admin.command("cleanupOrphaned", "rd.nope", maxTimeMS=5000)["ok"] == 1
        # a waiting call answers when the deletion has run
        done = {}

        def wait():
            with direct(cluster["shards"][donor], socketTimeoutMS=60000) as c:
                done["reply"] = c.admin.command("cleanupOrphaned", "rd.co",
                                                startingFromKey={"k": 0})
                done["left"] = upper_on(cluster, donor, "co")
                done["tasks"] = len(tasks(cluster, donor))

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(1.5)
        assert t.is_alive() and "reply" not in done
    finally:
        suspend(cluster, donor, False)
    t.join(60)
    assert not t.is_alive()
    assert done["reply"]["ok"] == 1 and done["left"] == 0 and done["tasks"] == 0
    with shard(cluster, donor) as c:
        t0 = time.monotonic()
        assert c.admin.command("cleanupOrphaned", "rd.co")["ok"] == 1
        assert time.monotonic() - t0 < 1


def test_cleanup_orphaned_errors(mongos, cluster):
    mongos.admin.command("shardCollection", "rd.coerr", key={"k": 1})
    mongos.rd.coerr.insert_one({"k": 1})
    mongos.rd.plain.insert_one({"x": 1})
    primary = int(mongos.config.databases.find_one({"_id": "rd"})["primary"][-1])
    with shard(cluster, primary) as c:
        for ns, code in (("rd", 73), ("", 73), (".co", 73), ("r$d.co", 73)):
            with pytest.raises(OperationFailure) as e:
                c.admin.command("cleanupOrphaned", ns)
            assert e.value.code == code, ns
        for cmd, code in (({"cleanupOrphaned": 1}, 14),
                          ({"cleanupOrphaned": "rd.coerr", "startingFromKey": 5}, 14)):
            with pytest.raises(OperationFailure) as e:
                c.admin.command(cmd)
            assert e.value.code == code, cmd
        with pytest.raises(OperationFailure) as e:
            c.rd.command("cleanupOrphaned", "rd.coerr")
        assert e.value.code == 13  # admin only
        # startingFromKey (unused since 4.4) must still be a key of the shard key's fields
        for bad in ({"x": 1}, {"k": 1, "x": 1}, {"k": [1]}):
            with pytest.raises(OperationFailure) as e:
                c.admin.command("cleanupOrphaned", "rd.coerr", startingFromKey=bad)
            assert e.value.code == 265, bad
        assert c.admin.command("cleanupOrphaned", "rd.coerr", startingFromKey={"k": 5})["ok"] == 1
        # an unsharded collection has no shard key to check
        assert c.admin.command("cleanupOrphaned", "rd.plain", startingFromKey={"x": 1})["ok"] == 1
    # the config server is no shard
    with direct(cluster["config"]) as c:
        with pytest.raises(OperationFailure) as e:
            c.admin.command("cleanupOrphaned", "rd.coerr")
        assert e.value.code == 20
        assert "not part of a sharded cluster" in str(e.value)
