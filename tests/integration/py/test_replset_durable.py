"""
Durability of a replica set member (issue 24): the majority commit point is
WiredTiger's stable timestamp, checkpoints are taken at it, and a restart
recovers from the stable checkpoint and replays the oplog after it.  The
member's replicated collections are unlogged tables, so a document written
after the last checkpoint survives a kill -9 only through that replay.
"""
import time

import pymongo
import pytest
from bson.timestamp import Timestamp

from pymongo.write_concern import WriteConcern

from sabled import Sabled, trim_oplog
from test_replset3 import last_oplog_ts

J = WriteConcern(w=1, j=True)


def start_one(extra=()):
    s = Sabled()
    s.start(["--replSet", "rs0", "--oplogSizeMB", "16"] + list(extra))
    c = s.client()
    c.admin.command("replSetInitiate",
                    {"_id": "rs0", "members": [{"_id": 0, "host": "127.0.0.1:%d" % s.port}]})
    c.close()
    return s


def rs_client(s):
    return pymongo.MongoClient("127.0.0.1", s.port, replicaSet="rs0",
                               serverSelectionTimeoutMS=10000)


def wait_for(pred, timeout=15, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            v = pred()
        except pymongo.errors.PyMongoError:
            v = None
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def test_kill9_before_any_checkpoint_replays_the_whole_oplog():
    s = start_one()
    try:
        c = rs_client(s)
        c.t.c.insert_many([{"_id": i, "v": i} for i in range(300)])
        c.t.c.update_one({"_id": 7}, {"$set": {"v": "updated"}})
        c.t.c.delete_one({"_id": 8})
        c.t.d.with_options(write_concern=J).insert_one({"_id": "x"})  # journals all before it
        c.close()
        s.kill9()
        s.restart()
        c = rs_client(s)
        assert c.t.c.count_documents({}) == 299
        assert c.t.c.estimated_document_count() == 299  # counts recounted, not doubled
        assert c.t.c.find_one({"_id": 7})["v"] == "updated"
        assert c.t.c.find_one({"_id": 8}) is None
        assert c.t.d.find_one({"_id": "x"}) == {"_id": "x"}
        # each entry is in the oplog once: replay does not write them again
        n = c.local["oplog.rs"].count_documents({"ns": "t.c", "op": "i"})
        assert n == 300
        assert "oplog" in s.log_text() and "replaying" in s.log_text()
        c.close()
    finally:
        s.cleanup()


def test_checkpoint_at_stable_then_replay_after_it():
    s = start_one()
    try:
        c = rs_client(s)
        c.t.c.insert_many([{"_id": i} for i in range(100)])
        last = last_oplog_ts(c)
        # a set of one: stable follows our own writes; fsync checkpoints at it
        def stable_ckpt():
            c.admin.command("fsync")
            st = c.admin.command("replSetGetStatus")
            return st["lastStableRecoveryTimestamp"] >= last and st
        st = wait_for(stable_ckpt, what="a checkpoint at the stable timestamp")
        assert st["lastStableRecoveryTimestamp"] <= st["optimes"]["appliedOpTime"]["ts"]
        c.t.c.insert_many([{"_id": i} for i in range(100, 150)])
        c.t.c.with_options(write_concern=J).delete_many({"_id": {"$lt": 10}})
        c.close()
        s.kill9()
        s.restart()
        c = rs_client(s)
        assert c.t.c.count_documents({}) == 140
        assert c.t.c.estimated_document_count() == 140
        assert sorted(d["_id"] for d in c.t.c.find())[:1] == [10]
        assert "Recovering from stable timestamp" in s.log_text()
        # clean shutdown: the final checkpoint is at stable too, then a few entries replay
        c.t.c.insert_one({"_id": "after"})
        c.close()
        s.restart()
        c = rs_client(s)
        assert c.t.c.count_documents({}) == 141
        assert c.t.c.estimated_document_count() == 141
        c.close()
    finally:
        s.cleanup()


def test_oplog_keeps_what_a_restart_replays():
    # the entries after the last checkpoint stay, past the oplog's size (a
    # 1 MB oplog, 3 MB written since): a kill -9 brings the unlogged
    # collection back from the checkpoint and those entries, every document
    # (mongod's oplog needed for crash recovery; before, the oldest entries
    # went and so did their documents).  A checkpoint lets it shrink again.
    s = Sabled()
    s.start(["--replSet", "rs0", "--oplogSizeMB", "1", "--syncdelay", "3600"])
    try:
        c = s.client()
        c.admin.command("replSetInitiate",
                        {"_id": "rs0", "members": [{"_id": 0, "host": "127.0.0.1:%d" % s.port}]})
        c.close()
        c = rs_client(s)
        c.t.c.insert_one({"_id": "before"})
        trim_oplog(c, c.t.filler)  # a checkpoint at the newest entry
        for i in range(60):
            c.t.c.insert_one({"_id": i, "pad": "x" * 50000})
        c.close()
        s.kill9()
        s.restart()
        c = rs_client(s)
        assert sorted(d["_id"] for d in c.t.c.find({"_id": {"$type": "int"}}, {"_id": 1})) == \
            list(range(60))
        assert c.t.c.count_documents({}) == 61
        oplog = c.local["oplog.rs"]
        assert oplog.count_documents({"ns": "t.c", "op": "i", "o._id": {"$ne": "before"}}) == 60
        assert c.local.command("collStats", "oplog.rs")["size"] > 3 * 1000 * 1000
        trim_oplog(c, c.t.filler)
        assert c.local.command("collStats", "oplog.rs")["size"] <= 1024 * 1024
        assert oplog.count_documents({"ns": "t.c"}) <= 21
        c.close()
    finally:
        s.cleanup()


def test_index_survives_kill9_after_build():
    s = start_one()
    try:
        c = rs_client(s)
        c.t.c.insert_many([{"_id": i, "k": i % 10} for i in range(200)])
        c.t.c.create_index("k")
        c.t.c.with_options(write_concern=J).insert_many(
            [{"_id": i, "k": i % 10} for i in range(200, 250)])
        c.close()
        s.kill9()
        s.restart()
        c = rs_client(s)
        assert c.t.c.count_documents({"k": 3}) == 25
        assert len(list(c.t.c.find({"k": 3}).hint("k_1"))) == 25
        c.close()
    finally:
        s.cleanup()


# ---- rollback: a former primary's w:1 writes that the majority never had ----

import glob
import os
import signal

import bson


def direct(m):
    return pymongo.MongoClient("127.0.0.1", m.port, directConnection=True,
                               serverSelectionTimeoutMS=3000, readPreference="secondaryPreferred")


def my_state(m):
    try:
        with direct(m) as c:
            return c.admin.command("replSetGetStatus")["myState"]
    except Exception:
        return None


# pause_behind_bait needs the secondaries to fetch one getMore at a time: an
# exhaust stream (oplogFetcherUsesExhaust, the default) goes on taking the
# primary's writes into a paused secondary's socket, which it applies once it
# runs again, and then nothing diverged.  These sets fetch the old way.
ONE_GETMORE_AT_A_TIME = ("--setParameter", "oplogFetcherUsesExhaust=false")


def start_set(n=3, args=()):
    members = []
    for _ in range(n):
        s = Sabled()
        s.start(["--replSet", "rs0", "--oplogSizeMB", "16", *ONE_GETMORE_AT_A_TIME, *args])
        members.append(s)
    cfg = {"_id": "rs0", "members": [
        {"_id": i, "host": "127.0.0.1:%d" % m.port} for i, m in enumerate(members)],
        "settings": {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}}
    cfg["members"][0]["priority"] = 2  # the first primary, for a predictable test
    cfg["members"][2].update({"priority": 0, "hidden": True})
    with direct(members[0]) as c:
        c.admin.command("replSetInitiate", cfg)
    wait_for(lambda: my_state(members[0]) == 1, timeout=30, what="a primary")
    wait_for(lambda: all(my_state(m) == 2 for m in members[1:]), timeout=30,
             what="secondaries")
    return members


def checkpoint_phases(name, n):
    """sbl_rs_checkpoint_phase's places of n data-bearing members (64-bit
    FNV-1a, sbl_fnv1a)."""
    h = 1469598103934665603
    for c in name.encode():
        h = ((h ^ c) * 1099511628211) & 0xffffffffffffffff
    return [(i + (h % 1000) / 1000.0) / n for i in range(n)]


def test_members_checkpoint_at_their_own_places_in_the_period():
    """Members that share a host (and its disk) take their periodic
    checkpoints apart: each on the wall clock's grid of syncdelay seconds
    at its place in the set, so member i of 3 checkpoints a third of the
    period after member i-1, whenever each started."""
    period = 3
    members = start_set(args=("--syncdelay", str(period)))
    try:
        clients = [direct(m) for m in members]
        counts = [None] * 3
        seen = [[] for _ in members]
        end = time.time() + 5 * period
        while time.time() < end:
            for i, c in enumerate(clients):
                n = c.admin.command("serverStatus")["wiredTiger"]["transaction"][
                    "transaction checkpoints"]
                if counts[i] is not None and n > counts[i]:
                    seen[i].append(time.time())
                counts[i] = n
            time.sleep(0.02)
        for c in clients:
            c.close()
        for i, (times, phase) in enumerate(zip(seen, checkpoint_phases("rs0", 3))):
            assert len(times) >= 3, "member %d: checkpoints at %s" % (i, times)
            # seen up to a poll round late (a loaded host: allow 0.6 s)
            late = sorted((t - phase * period) % period for t in times)
            assert late[len(late) // 2] < 0.6, "member %d: %s s past its slot" % (i, late)
    finally:
        for m in members:
            m.cleanup()


def pause_behind_bait(coll, secondaries):
    """Pause the secondaries (every thread stopped: Sabled.pause), then write
    a bait through coll, on the primary: the getMore each had sent before it
    stopped is still answered, into its socket, with the next write (or
    empty, after its await time, 500 ms).  A second later no getMore of
    theirs is left, and nothing the primary writes reaches them (the bait is
    left out of the checks).  The primary steps down 2 s (electionTimeoutMillis)
    after the pause: write what they must not get at once."""
    for m in secondaries:
        m.pause()
    coll.with_options(write_concern=J).insert_one({"_id": "bait"})
    time.sleep(1)


def wait_rolled_back(a, members):
    """Wait for a's "Rollback complete"; else fail with a's replication
    lines and every member's last oplog entries."""
    try:
        wait_for(lambda: "Rollback complete" in a.log_text(), timeout=60, what="a rolled back")
    except AssertionError:
        lines = [ln for ln in a.log_text().splitlines()  # "c" is padded to 8
                 if any('"c":"%s' % c in ln for c in ("REPL", "ROLLBACK", "ELECTION"))]
        tails = []
        for m in members:
            try:
                with direct(m) as cm:
                    tails.append("%d: %s" % (m.port, [
                        (e["ts"].time, e["ts"].inc, e.get("t"), e["op"],
                         (e.get("o") or {}).get("_id"))
                        for e in cm.local["oplog.rs"].find().sort("$natural", -1).limit(14)]))
            except Exception as ex:
                tails.append("%d: %r" % (m.port, ex))
        raise AssertionError("a did not roll back; its last replication lines:\n" +
                             "\n".join(lines[-40:]) + "\noplogs:\n" + "\n".join(tails))
    assert my_state(a) in (1, 2)
    assert "Rollback failed" not in a.log_text()


def assert_prepared_again(a, lsid):
    """a's session record says "prepared" and a read of _id 1 waits on it."""
    with direct(a) as c1:
        rec = c1.config.transactions.find_one({"_id.id": lsid["id"]})
        assert rec["state"] == "prepared" and rec["txnNum"] == 1
        with pytest.raises(pymongo.errors.ExecutionTimeout):
            c1.t.c.find_one({"_id": 1}, max_time_ms=300)


def commit_on_the_primary(members, lsid, pts, raws):
    """commitTransaction (at pts + 1) on the primary, whichever it is (a may
    have taken it back: priority 2); then every member has the commit."""
    from bson.int64 import Int64
    from bson.son import SON
    from test_retryable import Raw

    def commit():
        p = next((m for m in members if my_state(m) == 1), None)
        if p is None:
            return False
        r = Raw(p.port)
        raws.append(r)
        return r(SON([("commitTransaction", 1), ("lsid", lsid), ("txnNumber", Int64(1)),
                      ("autocommit", False),
                      ("commitTimestamp", Timestamp(pts.time, pts.inc + 1)),
                      ("writeConcern", {"w": 3, "wtimeout": 20000})]),
                 db="admin", ok=False)["ok"] == 1
    wait_for(commit, timeout=20, what="commitTransaction on the primary")
    for m in members:
        with direct(m) as c1:
            assert c1.t.c.find_one({"_id": 1}, max_time_ms=5000) == {"_id": 1, "v": "committed"}
            assert c1.config.transactions.find_one({"_id.id": lsid["id"]})["state"] == "committed"


def test_rollback_of_a_former_primarys_w1_writes():
    members = start_set()
    a, b, h = members
    try:
        ca = direct(a)
        maj = ca.t.c.with_options(write_concern=WriteConcern(w="majority", wtimeout=20000))
        maj.insert_many([{"_id": i, "v": "common"} for i in range(20)])
        # the secondaries stop; the primary takes w:1 writes nobody else gets
        pause_behind_bait(ca.t.c, (b, h))
        j = ca.t.c.with_options(write_concern=J)
        j.insert_many([{"_id": 100 + i, "v": "lost"} for i in range(5)])
        j.update_one({"_id": 3}, {"$set": {"v": "lost update"}})
        j.delete_one({"_id": 4})
        ca.t.newcoll.with_options(write_concern=J).insert_one({"_id": "only on a"})
        ca.t.command("collMod", "c", validator={"v": {"$type": "string"}},
                     writeConcern={"w": 1, "j": True})  # undone: the options come back
        ca.close()
        a.kill9()
        b.resume()
        h.resume()
        wait_for(lambda: my_state(b) == 1, timeout=40, what="b elected")
        with direct(b) as cb:
            cb.t.c.with_options(write_concern=WriteConcern(w="majority", wtimeout=20000)) \
                .insert_one({"_id": "new", "v": "on b"})
        a.restart()
        wait_for(lambda: my_state(a) == 2 and glob.glob(
            os.path.join(a.dbpath, "rollback", "t.c", "removed.*.bson")), timeout=60,
            what="a rolled back")
        assert "Rollback complete" in a.log_text()

        def converged():
            with direct(a) as c1, direct(b) as c2:
                x = sorted(c1.t.c.find({"_id": {"$ne": "bait"}}), key=lambda d: str(d["_id"]))
                y = sorted(c2.t.c.find({"_id": {"$ne": "bait"}}), key=lambda d: str(d["_id"]))
                return x == y and len(x) == 21 and x
        docs = wait_for(converged, timeout=30, what="a converged with b")
        assert {d["_id"]: d["v"] for d in docs}[3] == "common"
        assert any(d["_id"] == 4 for d in docs)  # the delete was undone too
        with direct(a) as c1:
            assert "newcoll" not in c1.t.list_collection_names()
            info = c1.t.command("listCollections", filter={"name": "c"})
            assert "validator" not in info["cursor"]["firstBatch"][0]["options"]
            assert c1.t.c.estimated_document_count() == c1.t.c.count_documents({})
            assert c1.local["oplog.rs"].count_documents({"o.v": "lost"}) == 0
        # the undone documents are in the rollback files, readable BSON
        saved = []
        for f in glob.glob(os.path.join(a.dbpath, "rollback", "*", "removed.*.bson")):
            with open(f, "rb") as fh:
                saved += bson.decode_all(fh.read())
        got = {d["_id"]: d.get("v") for d in saved if d["_id"] != "bait"}
        assert got == {100: "lost", 101: "lost", 102: "lost", 103: "lost", 104: "lost",
                       3: "lost update", "only on a": None}
        # a (priority 2) caught up takes the primary back (priority takeover)
        wait_for(lambda: my_state(a) == 1 and my_state(b) == 2, timeout=30,
                 what="a priority takeover")
        assert "priority takeover" in a.log_text()
        with direct(a) as c1:
            c1.t.c.with_options(write_concern=WriteConcern(w=3, wtimeout=20000)) \
                .insert_one({"_id": "after"})
        with direct(b) as cb:
            assert cb.t.c.find_one({"_id": "after"}) == {"_id": "after"}
    finally:
        cleanup(members, [])


def diverge_over_a_prepared_transaction(members, raws, lost):
    """a (the primary) prepares a transaction updating _id 1 (its prepare
    entry on every member), then pauses the others and does lost(ca, ra,
    lsid, pts) w:1; b is elected and writes in its term, a comes back and
    rolls back.  Returns (lsid, pts)."""
    from bson.int64 import Int64
    from bson.son import SON
    from test_retryable import Raw, cmd, new_lsid

    a, b, h = members
    with direct(a) as ca:
        ca.t.c.with_options(write_concern=WriteConcern(w=3, wtimeout=20000)) \
            .insert_many([{"_id": i, "v": "common"} for i in range(5)])
    lsid = new_lsid()
    ra = Raw(a.port)
    raws.append(ra)
    ra(cmd("update", "c", lsid, 1, startTransaction=True, autocommit=False,
           updates=[{"q": {"_id": 1}, "u": {"$set": {"v": "committed"}}}]))
    pts = ra(SON([("prepareTransaction", 1), ("lsid", lsid), ("txnNumber", Int64(1)),
                  ("autocommit", False)]), db="admin")["prepareTimestamp"]
    for m in (b, h):
        wait_for(lambda m=m: direct(m).local["oplog.rs"].find_one({"ts": pts}),
                 timeout=20, what="the prepare entry on every member")
    with direct(a) as ca:
        pause_behind_bait(ca.t.c, (b, h))
        lost(ca, ra, lsid, pts)
        last = next(ca.local["oplog.rs"].find().sort("$natural", -1).limit(1))
    # stopped for good before the others run again: a getMore they send
    # meanwhile must not find a still answering (it took the writes above)
    a.pause()
    b.resume()
    h.resume()
    wait_for(lambda: my_state(b) == 1, timeout=30, what="b elected")
    with direct(b) as cb:
        # the premise: b never got a's entries after the bait (else nothing
        # diverged, and a catching up then taking over by priority is right)
        assert cb.local["oplog.rs"].find_one({"ts": last["ts"], "t": last["t"]}) is None, \
            "b got a's w:1 entries: nothing to roll back"
        # b's term's entry: a cannot win back with its w:1 ones
        cb.t.c.with_options(write_concern=WriteConcern(w="majority", wtimeout=20000)) \
            .insert_one({"_id": "new", "v": "on b"})
    a.resume()
    wait_rolled_back(a, members)
    return lsid, pts


def cleanup(members, raws):
    for r in raws:
        r.close()
    for m in members:
        try:
            m.signal(signal.SIGCONT)
        except Exception:
            pass
        m.cleanup()


def test_rollback_over_a_prepared_transaction_prepares_it_again():
    """A former primary holding a prepared transaction (its prepare entry
    majority-committed) and w:1 writes after it rolls back (issue 28): the
    transaction is aborted for the recovery and prepared again by the replay
    up to the common point, so the member stays a secondary, a read of its
    document still waits for it, its session's record says "prepared", and
    the commitTransaction the new primary issues applies there too."""
    def lost(ca, ra, lsid, pts):
        j = ca.t.c.with_options(write_concern=J)
        j.insert_many([{"_id": 100 + i, "v": "lost"} for i in range(3)])
        j.update_one({"_id": 2}, {"$set": {"v": "lost update"}})

    members = start_set(args=("--setParameter", "enableTestCommands=1"))
    raws = []
    try:
        lsid, pts = diverge_over_a_prepared_transaction(members, raws, lost)
        with direct(members[0]) as c1:
            # (by _id: a scan would wait on the prepared transaction's document)
            assert c1.t.c.count_documents({"_id": {"$in": [100, 101, 102]}}) == 0
            assert c1.t.c.find_one({"_id": 2})["v"] == "common"
        assert_prepared_again(members[0], lsid)
        commit_on_the_primary(members, lsid, pts, raws)
    finally:
        cleanup(members, raws)


def test_rollback_over_a_prepared_transactions_commit_prepares_it_again():
    """A former primary that committed a prepared transaction (prepare entry
    on every member, commitTransaction entry w:1 on it alone: issue 26) rolls
    the commit back: the transaction is prepared there again, as it was at
    the common point, and the new primary's commitTransaction applies."""
    from bson.int64 import Int64
    from bson.son import SON

    def lost(ca, ra, lsid, pts):
        ra(SON([("commitTransaction", 1), ("lsid", lsid), ("txnNumber", Int64(1)),
                ("autocommit", False), ("commitTimestamp", Timestamp(pts.time, pts.inc + 1)),
                ("writeConcern", {"w": 1})]), db="admin")
        assert ca.t.c.find_one({"_id": 1})["v"] == "committed"

    members = start_set(args=("--setParameter", "enableTestCommands=1"))
    raws = []
    try:
        lsid, pts = diverge_over_a_prepared_transaction(members, raws, lost)
        with direct(members[0]) as c1:
            assert c1.local["oplog.rs"].find_one({"o.commitTransaction": 1}) is None
        assert_prepared_again(members[0], lsid)
        commit_on_the_primary(members, lsid, pts, raws)
    finally:
        cleanup(members, raws)


def test_statement_waiting_on_a_prepared_transaction_ends_at_step_down_and_rollback():
    """A transaction's update waiting on a's prepared transaction's document
    (the prepare-conflict wait) while a is paused as primary, steps down on
    its resume (a higher term) and rolls back gets a reply:
    InterruptedDueToReplStateChange (11602) at the step-down; a read waiting
    on it there (sent before the pause: a step-down leaves reads) gets 11602
    at the rollback (the transaction is prepared again after it), as mongod
    kills user operations at a step-down and before a rollback; never a hang.
    (A read sent while a is paused races with a's rollback on its resume: one
    that arrives in ROLLBACK is refused with NotPrimaryOrSecondary, 13436, as
    mongod refuses it, so only a read already waiting has one right answer.)"""
    import socket

    from bson.son import SON
    import wire
    from test_retryable import cmd, new_lsid

    waiting = []

    def lost(ca, ra, lsid, pts):
        j = ca.t.c.with_options(write_concern=J)
        j.insert_many([{"_id": 100 + i, "v": "lost"} for i in range(3)])
        s = wire.connect(members[0].port, timeout=5)
        waiting.append(s)
        body = cmd("update", "c", new_lsid(), 1, startTransaction=True, autocommit=False,
                   updates=[{"q": {"_id": 1}, "u": {"$set": {"v": "waiter"}}}])
        s.sendall(wire.op_msg(SON(list(body.items()) + [("$db", "t")])))
        r = wire.connect(members[0].port, timeout=5)
        waiting.append(r)
        r.sendall(wire.op_msg(SON([("find", "c"), ("filter", {"_id": 1}),
                                   ("$readPreference", {"mode": "secondaryPreferred"}),
                                   ("$db", "t")])))
        time.sleep(0.1)  # both are waiting on _id 1 (prepared)

    members = start_set(args=("--setParameter", "enableTestCommands=1"))
    raws = []
    try:
        diverge_over_a_prepared_transaction(members, raws, lost)
        for s, what in zip(waiting, ("update", "find")):
            s.settimeout(10)
            try:
                _, raw = wire.read_message(s)
            except socket.timeout:
                raise AssertionError("the waiting %s got no reply after the rollback" % what)
            r = wire.Reply(raw).doc
            assert r["ok"] == 0 and r["code"] == 11602, (what, r)
    finally:
        for s in waiting:
            s.close()
        cleanup(members, raws)


# ---- initial sync, too stale, resync ----

import shutil

from sabled import free_port


def test_initial_sync_then_too_stale_then_resync():
    a, b, c = Sabled(), Sabled(), Sabled()
    members = [a, b, c]
    try:
        a.start(["--replSet", "rs0", "--oplogSizeMB", "1"])
        b.start(["--replSet", "rs0", "--oplogSizeMB", "1"])
        cport = free_port()
        cfg = {"_id": "rs0", "members": [
            {"_id": 0, "host": "127.0.0.1:%d" % a.port, "priority": 2},
            {"_id": 1, "host": "127.0.0.1:%d" % b.port}],
            "settings": {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}}
        with direct(a) as ca:
            ca.admin.command("replSetInitiate", cfg)
        wait_for(lambda: my_state(a) == 1, timeout=30, what="a primary")
        ca = direct(a)
        # replSetReconfig adds c, as rs.add() does; mongod's checks first
        conf = ca.admin.command("replSetGetConfig")["config"]
        conf["members"].append({"_id": 2, "host": "127.0.0.1:%d" % cport, "priority": 0})
        with pytest.raises(pymongo.errors.OperationFailure) as ei:
            ca.admin.command("replSetReconfig", conf)  # same version
        assert ei.value.code == 103
        two = dict(conf, version=conf["version"] + 1, members=conf["members"] + [
            {"_id": 3, "host": "127.0.0.1:%d" % free_port()}])
        with pytest.raises(pymongo.errors.OperationFailure) as ei:
            ca.admin.command("replSetReconfig", two)  # two voters at once
        assert ei.value.code == 103
        with direct(b) as cb, pytest.raises(pymongo.errors.NotMasterError) as ei:
            cb.admin.command("replSetReconfig", dict(conf, version=conf["version"] + 1))
        assert ei.value.details["code"] == 10107
        conf["version"] += 1
        ca.admin.command("replSetReconfig", conf)
        wait_for(lambda: direct(b).admin.command("replSetGetConfig")["config"]["version"] ==
                 conf["version"], what="b has the new config")
        assert [m["name"] for m in ca.admin.command("replSetGetStatus")["members"]][2] == \
            "127.0.0.1:%d" % cport
        maj = WriteConcern(w="majority", wtimeout=20000)
        ca.t.c.with_options(write_concern=maj).insert_many(
            [{"_id": i, "k": i % 7, "pad": "x" * 100} for i in range(500)])
        ca.t.c.create_index([("k", 1)], name="k_1")
        ca.t.create_collection("capped", capped=True, size=100000)
        ca.t.capped.insert_many([{"_id": i} for i in range(10)])
        ca.t.command("create", "v", viewOn="c", pipeline=[{"$match": {"k": 1}}])
        ca.u.d.with_options(write_concern=maj).insert_one({"_id": "other db"})
        first_ts = ca.local["oplog.rs"].find().sort("$natural", 1).limit(1)[0]["ts"]

        def synced(m):
            with direct(m) as cm:
                return (cm.t.c.count_documents({}) == 500 and
                        cm.u.d.count_documents({}) == 1 and
                        cm.admin.command("replSetGetStatus")["myState"] == 2)

        # c joins empty: it clones, then catches up from the oplog
        c.start(["--replSet", "rs0", "--oplogSizeMB", "1"], port=cport)
        wait_for(lambda: synced(c), timeout=60, what="c initial sync")
        assert "Starting initial sync" in c.log_text()
        with direct(c) as cc:
            oplog_first = cc.local["oplog.rs"].find().sort("$natural", 1).limit(1)[0]["ts"]
            assert oplog_first > first_ts  # cloned, not replayed from the first entry
            names = {i["name"] for i in cc.t.c.list_indexes()}
            assert names == {"_id_", "k_1"}
            assert len(list(cc.t.c.find({"k": 3}).hint("k_1"))) == len(
                [i for i in range(500) if i % 7 == 3])
            assert cc.t.capped.options().get("capped") is True
            assert cc.t.v.count_documents({}) == len([i for i in range(500) if i % 7 == 1])
        # c goes down and a's 1 MB oplog moves past c's last entry
        c.stop()
        big = "y" * 2000
        for r in range(4):
            ca.t.c.with_options(write_concern=maj).insert_many(
                [{"_id": "w%d-%d" % (r, i), "pad": big} for i in range(300)])
        with direct(b) as cb:  # c may sync from b: both oplogs past c's last entry
            trim_oplog(ca, ca.t.filler, others=[cb])
        c.restart()

        def stale():
            with direct(c) as cc:
                st = cc.admin.command("replSetGetStatus")
                me = [m for m in st["members"] if m.get("self")][0]
                return st["myState"] == 3 and "too stale" in me["infoMessage"]
        wait_for(stale, timeout=30, what="c too stale")
        # resync: an empty dbpath
        c.stop()
        shutil.rmtree(c.dbpath)
        os.mkdir(c.dbpath)
        c.start(["--replSet", "rs0", "--oplogSizeMB", "1"], port=cport)

        def resynced():
            with direct(c) as cc:
                return (cc.admin.command("replSetGetStatus")["myState"] == 2 and
                        cc.t.c.count_documents({}) == 1700)
        wait_for(resynced, timeout=60, what="c resynced")
        ca.close()
    finally:
        for m in members:
            m.cleanup()
