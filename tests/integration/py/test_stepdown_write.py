"""
A primary's w:1 write in flight when the member stops being primary
(docs/replication.md, "Heartbeats and elections").  mongod's rule:
stepping down waits for writes in progress or interrupts them, so nothing
written in term T commits after the member left PRIMARY in term T; such a
write fails with InterruptedDueToReplStateChange (11602) and its entry is
nowhere.

The write is held by hangBeforePrimaryOplogCommit after its entry took its
ts and term, before its transaction commits; then the member stops being
primary (a forced replSetStepDown; or it is paused, the others elect a new
primary and take new writes, and it comes back and learns of the new term),
and the write is let go.  Checked on three members: what the client got
(the whole command fails with 11602, as mongod's interruptions do);
every member ends with the new primary's data (dbHash) and oplog; nothing
the client was told succeeded vanishes without a rollback file.  The same
for a retryable write: the driver retries it on the new primary (the error
carries RetryableWriteError) and it is applied once.
"""
import os
import signal
import threading

import bson
import pymongo
import pytest
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_oplog_visibility import HOLD, fail_point
from test_repl_guarantees import initiate, the_primary
from test_replset3 import direct, state, wait_for


@pytest.fixture(scope="module")
def rs():
    with set_members(3) as members:
        initiate(members)
        p = the_primary(members)
        with direct(p) as d:
            for name in ("held", "c"):
                d.t.create_collection(name)
            d.t.held.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).insert_many(
                [{"_id": x, "k": x} for x in ("force", "pause")])
        yield members


def hold(m, on):
    fail_point(m, HOLD, on)   # on writes to t.held


def held_update(m, key, out):
    """Set t.held's document key's v on m with w:1 in a thread held by the
    fail point (a filter on k, not _id: a worker thread, not a network loop,
    waits), and return once it is held.  No retry: the client sees what
    the server answered."""
    before = m.log_text().count('"id":7360002')
    hold(m, True)

    def run():
        with pymongo.MongoClient("127.0.0.1", m.port, directConnection=True,
                                 retryWrites=False, serverSelectionTimeoutMS=3000) as c:
            try:
                c.t.held.with_options(write_concern=WriteConcern(w=1)).update_one(
                    {"k": key}, {"$set": {"v": "held"}})
                out["ok"] = True
            except pymongo.errors.PyMongoError as e:
                out["error"] = e
    th = threading.Thread(target=run)
    th.start()
    wait_for(lambda: m.log_text().count('"id":7360002') > before, timeout=10)
    return th


def oplog(m):
    with direct(m) as d:
        return [(e["ts"], e["t"], e["op"], e["ns"]) for e in
                d.local.oplog.rs.find({}, {"ts": 1, "t": 1, "op": 1, "ns": 1})]


def saved(m, ns):
    d = os.path.join(m.dbpath, "rollback", ns)
    if not os.path.isdir(d):
        return []
    return [doc for f in sorted(os.listdir(d))
            for doc in bson.decode_all(open(os.path.join(d, f), "rb").read())]


def write_majority(m, _id):
    with direct(m) as d:
        d.t.c.with_options(write_concern=WriteConcern(w="majority", wtimeout=20000)).insert_one(
            {"_id": _id})


def term_of(m):
    with direct(m) as d:
        return d.admin.command("replSetGetStatus")["term"]


def converge(newp, members, marker):
    """A w:3 marker on newp; then every member must reach newp's data
    (dbHash of t) and hold no oplog entry newp lacks.  The problems found."""
    with direct(newp) as d:
        d.t.c.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).insert_one(
            {"_id": marker})
        want = d.t.command("dbHash")["md5"]
    problems = []
    for m in members:
        try:
            with direct(m) as d:
                wait_for(lambda d=d: d.t.command("dbHash")["md5"] == want, timeout=20)
        except AssertionError:
            with direct(m) as d:
                problems.append("port %d: dbHash differs from the new primary's: %r"
                                % (m.port, list(d.t.held.find())))
    want_log = oplog(newp)
    for m in members:
        extra = [e for e in oplog(m) if e not in want_log]
        if extra:
            problems.append("port %d: oplog entries the new primary lacks: %r" % (m.port, extra))
    return problems


def settle_and_check(old, newp, members, key, out, old_term):
    """Every member converges on newp; the held write failed with 11602 and
    left no trace anywhere (not even a rollback file: it never committed).
    Were it acknowledged, it must at least be on newp or in old's rollback
    files.  Returns the problems found."""
    problems = converge(newp, members, "settled-" + key)
    with direct(newp) as d:
        doc = d.t.held.find_one({"_id": key})
    files = [x for x in saved(old, "t.held") if x.get("_id") == key]
    late = [e for e in oplog(old) if e[1] == old_term and e[3] == "t.held" and e[2] == "u"]
    if "ok" in out:
        if doc.get("v") != "held" and not any(x.get("v") == "held" for x in files):
            problems.append("the held write was acknowledged (ok) and then lost without a "
                            "rollback file")
        problems.append("the held write committed after the member left PRIMARY (mongod: "
                        "11602); entries of term %d for t.held: %r" % (old_term, late))
    else:
        err = out.get("error")   # the whole command fails (NotMasterError), as mongod
        code = (getattr(err, "details", None) or {}).get("code")
        if code != 11602 or not isinstance(err, pymongo.errors.AutoReconnect):
            problems.append("the held write failed with %r, not 11602" % (out.get("error"),))
        if doc.get("v") == "held" or files:
            problems.append("the failed write committed somewhere: %r, rollback files %r"
                            % (doc, files))
    return problems


def test_write_held_across_forced_step_down(rs):
    p = the_primary(rs)
    others = [m for m in rs if m is not p]
    old_term = term_of(p)
    out = {}
    th = held_update(p, "force", out)
    try:
        with direct(p) as d:
            try:
                d.admin.command("replSetStepDown", 30, force=True)
            except pymongo.errors.AutoReconnect:
                pass   # the member may close client connections as it steps down
        newp = the_primary(others)
        write_majority(newp, "after-force")   # the new primary takes writes
        assert state(p) == 2
    finally:
        hold(p, False)
        th.join(30)
    problems = settle_and_check(p, newp, rs, "force", out, old_term)
    assert problems == [], "\n".join(problems)


def noops_behind(m):
    """While the held write's ts is in flight on primary m, a causally
    consistent read waiting for that time (maxTimeMS 300) makes m write
    no-ops, which commit behind the hole: invisible, so no other member has
    them.  Once the held write fails they show in m's oplog, of a term the
    new primary does not continue: m must roll them back."""
    with direct(m) as d:
        now = d.admin.command("ping")["$clusterTime"]
        with d.start_session(causal_consistency=True) as s:
            s.advance_cluster_time(now)
            s.advance_operation_time(now["clusterTime"])
            with pytest.raises(pymongo.errors.ExecutionTimeout):
                d.t.c.find_one({}, session=s, max_time_ms=300)


def test_write_held_while_paused_and_replaced(rs):
    p = the_primary(rs)
    others = [m for m in rs if m is not p]
    old_term = term_of(p)
    out = {}
    th = held_update(p, "pause", out)
    try:
        noops_behind(p)
        p.pause()   # the others elect a primary and take writes
        try:
            newp = the_primary(others)
            write_majority(newp, "after-pause")
        finally:
            p.signal(signal.SIGCONT)
        wait_for(lambda: state(p) == 2, timeout=20)   # it learnt of the new term
    finally:
        hold(p, False)
        th.join(30)
    problems = settle_and_check(p, newp, rs, "pause", out, old_term)
    assert problems == [], "\n".join(problems)



def test_retryable_write_held_across_step_down_runs_once(rs):
    """The same hole on a retryable write's path (its entry and the
    session's record): the held attempt fails with 11602, the driver
    retries it on the new primary, and every member ends with it applied
    once and the same oplog."""
    p = the_primary(rs)
    others = [m for m in rs if m is not p]
    hold(p, True)
    before = p.log_text().count('"id":7360002')
    seeds = ",".join("127.0.0.1:%d" % m.port for m in rs)
    out = {}

    def run():
        with pymongo.MongoClient("mongodb://%s/?replicaSet=rs0" % seeds, retryWrites=True,
                                 serverSelectionTimeoutMS=20000,
                                 heartbeatFrequencyMS=500) as c:
            try:
                c.t.held.with_options(write_concern=WriteConcern(w="majority")).update_one(
                    {"k": "retry"}, {"$inc": {"n": 1}}, upsert=True)
                out["ok"] = True
            except pymongo.errors.PyMongoError as e:
                out["error"] = e
    th = threading.Thread(target=run)
    th.start()
    try:
        wait_for(lambda: p.log_text().count('"id":7360002') > before, timeout=20)
        with direct(p) as d:
            try:
                d.admin.command("replSetStepDown", 30, force=True)
            except pymongo.errors.AutoReconnect:
                pass
        newp = the_primary(others)
    finally:
        hold(p, False)
        th.join(40)
    assert out.get("ok"), out   # the retry on the new primary succeeded
    problems = converge(newp, rs, "settled-retry")
    for m in rs:
        with direct(m) as d:
            got = d.t.held.find_one({"k": "retry"})
            if got is None or got.get("n") != 1:
                problems.append("port %d: the retried write: %r" % (m.port, got))
    assert problems == [], "\n".join(problems)
