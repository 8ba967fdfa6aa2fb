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
  ("rollback_to_stable illegal with active transactions"); likewise a transaction
  whose statement was running when the rollback began: it is aborted once its
  statement ended.
"""
import contextlib
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


def waiting_op_in(c, what):
    """The currentOp entry (through client c) of the command sent with this
    comment, or named so, or None."""
    for op in c.admin.command("currentOp")["inprog"]:
        cmd = op.get("command", {})
        if cmd.get("comment") == what or next(iter(cmd), None) == what:
            return op
    return None


def waiting_op(m, what):
    with direct(m) as c:
        return waiting_op_in(c, what)


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


@contextlib.contextmanager
def set_of_three():
    """test_replset_durable's set: a (priority 2), b, and a hidden member."""
    from test_replset_durable import cleanup, start_set
    members = start_set(args=("--setParameter", "enableTestCommands=1"))
    try:
        yield members
    finally:
        cleanup(members, [])


def roll_back_a(members, begin, at_rollback=None):
    """a, the primary, runs begin(ca) (what the rollback meets under way),
    takes w:1 writes that only it will have and is paused; b is elected and
    writes in its term; a resumes, steps down and rolls back (at_rollback()
    runs once a logged the rollback's start).  Then WiredTiger never refused
    rollback_to_stable and the w:1 writes are gone."""
    from test_replset_durable import J, my_state, pause_behind_bait, wait_rolled_back
    a, b, h = members
    with direct(a) as ca:
        ca.t.c.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)) \
            .insert_many([{"_id": i, "v": "common"} for i in range(5)])
        begin(ca)
        pause_behind_bait(ca.t.c, (b, h))
        ca.t.c.with_options(write_concern=J).insert_many(
            [{"_id": 100 + i, "v": "lost"} for i in range(3)])
    a.pause()
    b.resume()
    h.resume()
    wait_for(lambda: my_state(b) == 1, timeout=30)
    with direct(b) as cb:
        cb.t.c.with_options(write_concern=WriteConcern(w="majority", wtimeout=20000)) \
            .insert_one({"_id": "new", "v": "on b"})
    a.resume()
    if at_rollback is not None:
        wait_for(lambda: "Rollback common point found" in a.log_text(), timeout=60, step=0.05)
        at_rollback()
    wait_rolled_back(a, members)
    assert "illegal with active transactions" not in a.log_text()
    with direct(a) as c1:
        assert c1.t.c.count_documents({"v": "lost"}) == 0


def test_rollback_ends_a_long_scan_and_waits_for_it():
    """A former primary rolls back its w:1 writes while a scan it began as
    primary (outside a transaction: a step-down leaves it running) still
    runs: the rollback ends it with 11602 and rolls back once it left, with
    no transaction in WiredTiger's way (before, the scan went on, reading
    across the rollback)."""
    run = []

    def begin(ca):
        ca.t.big.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)) \
            .insert_many([{"_id": i} for i in range(3000)])
        port = ca.address[1]

        def scan():  # about 12 s of work, nothing returned before its end
            with pymongo.MongoClient("127.0.0.1", port, directConnection=True,
                                     socketTimeoutMS=60000) as c:
                return c.t.command("find", "big", comment="long-scan",
                                   filter={"$where": "sleep(4); return false;"},
                                   read_preference=SEC)
        run.extend(in_thread(scan))
        wait_for(lambda: waiting_op_in(ca, "long-scan"), timeout=5, step=0.02)

    with set_of_three() as members:
        try:
            roll_back_a(members, begin)
        finally:
            if run:
                run[0].join(30)
        assert not run[0].is_alive()
        assert code_of(run[1]) == 11602


def test_rollback_waits_for_a_transaction_statement_and_aborts_its_transaction():
    """The seed 5 fault ("rollback_to_stable illegal with active
    transactions"): a transaction's insert held (fail point
    hangBeforePrimaryOplogAppend, past its primary check) while its member,
    the former primary, steps down and starts its rollback, then let go: it
    completes, leaving its transaction open with its snapshot.  The rollback
    waits for it and aborts that transaction, then completes; before, it
    skipped the busy transaction, and rollback_to_stable refused for its 30 s
    of retries ("Rollback failed")."""
    from bson.son import SON

    import wire
    from test_retryable import cmd, new_lsid

    socks = []

    def begin(ca):
        ca.t.create_collection("txn", writeConcern={"w": 3, "wtimeout": 30000})
        ca.admin.command("configureFailPoint", "hangBeforePrimaryOplogAppend",
                         mode="alwaysOn", data={"ns": "t.txn", "maxMS": 120000})
        socks.append(wire.connect(ca.address[1], timeout=90))
        body = cmd("insert", "txn", new_lsid(), 1, startTransaction=True, autocommit=False,
                   documents=[{"_id": 1}])
        socks[0].sendall(wire.op_msg(SON(list(body.items()) + [("$db", "t")])))
        wait_for(lambda: waiting_op_in(ca, "insert"), timeout=10, step=0.05)

    def let_go():  # the statement goes on now, into its transaction
        with direct(a) as ca:
            ca.admin.command("configureFailPoint", "hangBeforePrimaryOplogAppend", mode="off")

    with set_of_three() as members:
        a = members[0]
        try:
            roll_back_a(members, begin, let_go)
            wire.read_message(socks[0])  # it answered
        finally:
            for s in socks:
                s.close()
        log = a.log_text()
        assert "Transactions still running a command" not in log
        with direct(a) as c1:
            assert c1.t.txn.count_documents({}) == 0
