"""
What ends a client's operation on a replica set member before it is done
(issue 26), as mongod's operations end on their operation context:

- a read's wait for readConcern.afterClusterTime (the member has not applied
  that time: a secondary whose applier is held by the fail point
  rsSyncApplyStop) shows in currentOp and ends at killOp (Interrupted 11601)
  and at maxTimeMS (MaxTimeMSExpired 50); on a primary (waiting for a time
  far ahead, which its no-ops do not reach) it ends at the step-down
  (InterruptedDueToReplStateChange 11602);
- a rollback ends the client operations under way, a long scan outside a
  transaction too (11602), and waits for them to leave before
  rollback_to_stable, which WiredTiger refuses while any transaction is open
  ("rollback_to_stable illegal with active transactions").
"""
import threading
import time

import pymongo
import pytest
from bson.timestamp import Timestamp
from pymongo.errors import PyMongoError
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_repl_catchup import fail_point
from test_replset3 import direct, state, wait_for

SEC = ReadPreference.SECONDARY_PREFERRED


@pytest.fixture(scope="module")
def rs2():
    """A primary and a secondary that cannot be elected (so a step-down
    leaves no primary until replSetFreeze 0 lets the first stand again)."""
    with set_members(2) as members:
        cfg = {"_id": "rs0", "members": [
            {"_id": 0, "host": "127.0.0.1:%d" % members[0].port},
            {"_id": 1, "host": "127.0.0.1:%d" % members[1].port, "priority": 0}],
            "settings": {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}}
        with direct(members[0]) as c:
            c.admin.command("replSetInitiate", cfg)
        wait_for(lambda: state(members[0]) == 1 and state(members[1]) == 2, timeout=40)
        yield members


def in_thread(fn):
    """Run fn() in a thread; returns (thread, out): out["ok"] or out["error"]."""
    out = {}

    def run():
        try:
            out["ok"] = fn()
        except PyMongoError as e:
            out["error"] = e
    th = threading.Thread(target=run)
    th.start()
    return th, out


def waiting_op(m, comment):
    """The currentOp entry of the command sent with this comment, or None."""
    with direct(m) as c:
        for op in c.admin.command("currentOp")["inprog"]:
            if op.get("command", {}).get("comment") == comment:
                return op
    return None


def code_of(out):
    err = out.get("error")
    assert err is not None, "the command succeeded: %r" % (out.get("ok"),)
    return (getattr(err, "details", None) or {}).get("code")


def find_after(m, at, comment, **kw):
    with direct(m) as c:
        return c.t.command("find", "c", readConcern={"afterClusterTime": at}, comment=comment,
                           read_preference=SEC, **kw)


def unapplied_write(p, s):
    """A w:1 write on p that s (its applier held) has not applied: its time."""
    fail_point(s, "rsSyncApplyStop", True)
    with direct(p) as c:
        return c.t.command("insert", "c", documents=[{"x": 1}],
                           writeConcern={"w": 1})["operationTime"]


def test_after_cluster_time_wait_ends_at_kill_op(rs2):
    p, s = rs2
    try:
        at = unapplied_write(p, s)
        th, out = in_thread(lambda: find_after(s, at, "wait-kill"))
        op = wait_for(lambda: waiting_op(s, "wait-kill"), timeout=10, step=0.05)
        time.sleep(0.3)
        assert th.is_alive(), out  # still waiting: the applier is held
        with direct(s) as c:
            c.admin.command("killOp", op=op["opid"])
        th.join(10)
        assert not th.is_alive(), "killOp did not end the afterClusterTime wait"
        assert code_of(out) == 11601
    finally:
        fail_point(s, "rsSyncApplyStop", False)
    # once applied, the same read answers
    assert find_after(s, at, "wait-ok", maxTimeMS=20000)["ok"] == 1


def test_after_cluster_time_wait_ends_at_max_time_ms(rs2):
    p, s = rs2
    try:
        at = unapplied_write(p, s)
        t0 = time.time()
        with pytest.raises(pymongo.errors.ExecutionTimeout) as ei:
            find_after(s, at, "wait-max", maxTimeMS=400)
        assert ei.value.code == 50
        assert 0.35 < time.time() - t0 < 5
    finally:
        fail_point(s, "rsSyncApplyStop", False)


def test_after_cluster_time_wait_on_a_primary_ends_at_its_step_down(rs2):
    p, s = rs2
    with direct(p) as c:
        now = c.admin.command("hello")["operationTime"]
    far = Timestamp(now.time + 3600, 0)  # its no-ops do not reach it
    th, out = in_thread(lambda: find_after(p, far, "wait-stepdown"))
    try:
        wait_for(lambda: waiting_op(p, "wait-stepdown"), timeout=10, step=0.05)
        assert th.is_alive(), out
        with direct(p) as c:
            c.admin.command("replSetStepDown", 60, force=True)
        th.join(10)
        assert not th.is_alive(), "the step-down did not end the afterClusterTime wait"
        assert code_of(out) == 11602
    finally:
        th.join(30)
        if state(p) != 1:
            with direct(p) as c:
                c.admin.command("replSetFreeze", 0)
        wait_for(lambda: state(p) == 1, timeout=30)


def test_rollback_ends_a_long_scan_and_waits_for_it():
    """A former primary rolls back its w:1 writes while a scan it began as
    primary (outside a transaction: a step-down leaves it running) still
    runs: the rollback ends it with 11602 and rolls back once it left, with
    no transaction in WiredTiger's way (before, the scan went on holding its
    snapshot and rollback_to_stable failed until it ended)."""
    from test_replset_durable import (J, cleanup, my_state, pause_behind_bait, start_set,
                                      wait_rolled_back)

    members = start_set(args=("--setParameter", "enableTestCommands=1"))
    a, b, h = members
    th = None
    try:
        with direct(a) as ca:
            ca.t.big.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)) \
                .insert_many([{"_id": i} for i in range(3000)])
            pause_behind_bait(ca.t.c, (b, h))
            ca.t.c.with_options(write_concern=J).insert_many(
                [{"_id": 100 + i, "v": "lost"} for i in range(3)])

            def scan():  # about 9 s of work, nothing returned before its end
                with pymongo.MongoClient("127.0.0.1", a.port, directConnection=True,
                                         socketTimeoutMS=60000) as c:
                    return c.t.command("find", "big", comment="long-scan",
                                       filter={"$where": "sleep(3); return false;"},
                                       read_preference=SEC)
            th, out = in_thread(scan)
            wait_for(lambda: waiting_op(a, "long-scan"), timeout=5, step=0.02)
        a.pause()
        b.resume()
        h.resume()
        wait_for(lambda: my_state(b) == 1, timeout=30)
        with direct(b) as cb:
            cb.t.c.with_options(write_concern=WriteConcern(w="majority", wtimeout=20000)) \
                .insert_one({"_id": "new", "v": "on b"})
        a.resume()
        wait_rolled_back(a, members)
        th.join(30)
        assert not th.is_alive()
        assert code_of(out) == 11602
        log = a.log_text()
        assert "illegal with active transactions" not in log
        with direct(a) as c1:
            assert c1.t.c.count_documents({"v": "lost"}) == 0
    finally:
        if th is not None:
            th.join(30)
        cleanup(members, [])
