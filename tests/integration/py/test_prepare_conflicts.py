"""
Reads and writes of a prepared transaction's documents wait for it, as in
mongod (issues 26/28, docs/sharding.md): a find, count or single-document
update outside a transaction that meets a prepared transaction's write waits
until it commits or aborts, then runs again and sees the outcome; a read in
another transaction and a getMore wait too, keeping their snapshot and
cursor; maxTimeMS bounds every wait (MaxTimeMSExpired, 50), and a
step-down ends a waiting write or transaction's read (11602).  A write in
another multi-document transaction waits too, then applies to what its
snapshot sees: the old document after an abort, the committed one after a
commit (its snapshot, untimestamped as mongod's for readConcern local, began
after the prepare); one whose snapshot began before the prepare does not
see the commit, and gets WriteConflict (112, TransientTransactionError) at
once.

The first tests use the cluster of test_router_txn2pc.py; the prepared
transaction is a shard's own (prepareTransaction sent to shard1 directly,
then commitTransaction at a commitTimestamp or abortTransaction), on
pc.<name>, which lives on shard1 only.  The later ones use a one-member set.
"""
import contextlib
import os
import signal
import sys
import threading
import time

import pytest
import pymongo
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from test_router_txn2pc import cluster  # noqa: E402,F401
from sabled import set_members  # noqa: E402
from test_replset3 import wait_for  # noqa: E402

shards = sharded.shards_fixture()


class Prepared:
    """A transaction on shard that set {_id: id}'s v to new (or inserted
    insert) and is prepared."""

    def __init__(self, shard, coll, new, id=1, insert=None):
        self.shard = shard
        self.s = shard.start_session()
        self.s.start_transaction()
        if insert is not None:
            shard.pc[coll].insert_one(insert, session=self.s)
        else:
            shard.pc[coll].update_one({"_id": id}, {"$set": {"v": new}}, session=self.s)
        r = shard.admin.command("prepareTransaction", session=self.s)
        self.prepare_ts = r["prepareTimestamp"]

    def commit(self):
        ts = self.prepare_ts
        self.shard.admin.command({"commitTransaction": 1,
                                  "commitTimestamp": Timestamp(ts.time, ts.inc + 1)},
                                 session=self.s)
        self.s.end_session()

    def abort(self):
        self.shard.admin.command("abortTransaction", session=self.s)
        self.s.end_session()


def in_thread(fn):
    """Run fn in a thread; the returned dict gets "value" or "error"."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:  # noqa: BLE001
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    out["thread"] = t
    return out


def in_txn_behind(client, fn, resolve):
    """fn(session) in a transaction of client's, on a thread: still waiting
    0.5 s later, then resolve() (the prepared transaction's commit or
    abort); the transaction then commits.  fn's value and how long fn took."""
    def run():
        with client.start_session() as s:
            s.start_transaction()
            t0 = time.monotonic()
            out = fn(s)
            took = time.monotonic() - t0
            s.commit_transaction()
            return out, took
    r = in_thread(run)
    time.sleep(0.5)
    assert r["thread"].is_alive()  # waiting, not WriteConflict at once
    resolve()
    r["thread"].join(10)
    if "error" in r:
        raise r["error"]
    return r["value"]


@contextlib.contextmanager
def one_member_set(*member_args, **client_kw):
    """A one-member set (prepareTransaction needs a set member), initiated:
    its member and a client made after the initiation (a client from before
    may still see the member uninitiated: no sessions, so no transactions)."""
    with set_members(1, *member_args) as (m,):
        with pymongo.MongoClient("127.0.0.1", m.port, directConnection=True) as c:
            c.admin.command("replSetInitiate", {"_id": "rs0", "members": [
                {"_id": 0, "host": "127.0.0.1:%d" % m.port}]})
            wait_for(lambda: c.admin.command("hello").get("isWritablePrimary"), timeout=30)
        with pymongo.MongoClient("127.0.0.1", m.port, directConnection=True, **client_kw) as c:
            yield m, c


@pytest.fixture
def sh(shards, request):
    """shard1's client with pc.<test name> holding {_id: 1, v: 1}."""
    s = shards[1]
    name = request.node.name[5:30]
    s.pc[name].drop()
    s.pc[name].insert_one({"_id": 1, "v": 1})
    return s, name


def test_find_waits_for_the_commit_and_sees_its_value(sh):
    s, name = sh
    p = Prepared(s, name, 2)
    r = in_thread(lambda: s.pc[name].find_one({"_id": 1}))
    time.sleep(0.5)
    assert r["thread"].is_alive()  # waiting, not WriteConflict
    p.commit()
    r["thread"].join(10)
    assert r.get("value") == {"_id": 1, "v": 2}, r.get("error")
    assert s.pc[name].count_documents({"v": 2}) == 1


def test_find_with_max_time_ms_expires_while_prepared(sh):
    s, name = sh
    p = Prepared(s, name, 2)
    try:
        t0 = time.monotonic()
        with pytest.raises(OperationFailure) as e:
            s.pc[name].find_one({"_id": 1}, max_time_ms=300)
        assert e.value.code == 50
        assert 0.25 < time.monotonic() - t0 < 5
        with pytest.raises(OperationFailure) as e:
            s.pc[name].count_documents({}, maxTimeMS=200)
        assert e.value.code == 50
    finally:
        p.commit()


def test_update_outside_a_transaction_applies_on_the_committed_value(sh):
    s, name = sh
    p = Prepared(s, name, 2)
    r = in_thread(lambda: s.pc[name].update_one({"_id": 1}, {"$inc": {"v": 10}}).modified_count)
    time.sleep(0.5)
    assert r["thread"].is_alive()
    p.commit()
    r["thread"].join(10)
    assert r.get("value") == 1, r.get("error")
    assert s.pc[name].find_one({"_id": 1}) == {"_id": 1, "v": 12}


def test_transaction_write_waits_for_the_commit_and_applies_on_its_value(sh):
    s, name = sh
    p = Prepared(s, name, 2)
    n, took = in_txn_behind(s, lambda ses: s.pc[name].update_one(
        {"_id": 1}, {"$inc": {"v": 10}}, session=ses).modified_count, p.commit)
    assert n == 1 and took >= 0.45
    assert s.pc[name].find_one({"_id": 1}) == {"_id": 1, "v": 12}


def test_abort_after_prepare_releases_waiters_with_the_old_value(sh):
    s, name = sh
    p = Prepared(s, name, 2)
    rf = in_thread(lambda: s.pc[name].find_one({"_id": 1}))
    ru = in_thread(lambda: s.pc[name].update_one({"_id": 1}, {"$inc": {"v": 5}}).modified_count)
    time.sleep(0.5)
    assert rf["thread"].is_alive() and ru["thread"].is_alive()
    p.abort()
    rf["thread"].join(10)
    ru["thread"].join(10)
    assert rf.get("value") in ({"_id": 1, "v": 1}, {"_id": 1, "v": 6}), rf.get("error")
    assert ru.get("value") == 1, ru.get("error")
    assert s.pc[name].find_one({"_id": 1}) == {"_id": 1, "v": 6}


def test_shutdown_ends_a_read_waiting_on_a_prepared_transaction():
    """SIGTERM while a find without maxTimeMS waits on a prepared transaction
    nobody will resolve: the server still exits (the read ends with
    InterruptedAtShutdown or its connection closes), as mongod interrupts its
    operations at shutdown."""
    with one_member_set() as (m, c):
        c.pc.c.insert_one({"_id": 1, "v": 1})
        Prepared(c, "c", 2)  # left prepared
        reader = pymongo.MongoClient("127.0.0.1", m.port, directConnection=True,
                                     retryReads=False, serverSelectionTimeoutMS=2000)
        r = in_thread(lambda: reader.pc.c.find_one({"_id": 1}))
        w = in_thread(lambda: reader.pc.c.update_one({"_id": 1}, {"$inc": {"v": 1}}))
        time.sleep(1.0)
        assert r["thread"].is_alive()  # waiting on the prepared write
        assert w["thread"].is_alive()
        m.signal(signal.SIGTERM)
        m.proc.wait(timeout=30)  # raises TimeoutExpired on the old hang
        r["thread"].join(timeout=30)
        w["thread"].join(timeout=30)
        assert isinstance(r.get("error"), pymongo.errors.PyMongoError), r
        assert isinstance(w.get("error"), pymongo.errors.PyMongoError), w
        reader.close()


@pytest.fixture(scope="module")
def rs1():
    """A one-member set's client."""
    with one_member_set() as (_, c):
        yield c


@pytest.fixture
def rs(rs1, request):
    """rs1 with pc.<test name> holding {_id: 0..9, v: 1}."""
    name = request.node.name[5:30]
    rs1.pc[name].drop()
    rs1.pc[name].insert_many([{"_id": i, "v": 1} for i in range(10)])
    return rs1, name


def test_find_in_a_transaction_waits_for_the_commit(rs):
    c, name = rs
    p = Prepared(c, name, 2)

    def read():
        with c.start_session() as s:
            s.start_transaction()
            doc = c.pc[name].find_one({"_id": 1}, session=s)
            n = c.pc[name].count_documents({"v": 2}, session=s)
            s.commit_transaction()
            return doc, n
    r = in_thread(read)
    time.sleep(0.5)
    assert r["thread"].is_alive()  # waiting, not WriteConflict
    p.commit()
    r["thread"].join(10)
    assert r.get("value") == ({"_id": 1, "v": 2}, 1), r.get("error")


OLDER_SNAPSHOT = {  # the prepared transaction's write, then the later one's of that document
    "update": ({"new": 2}, lambda c, n, s: c.pc[n].update_one(
        {"_id": 1}, {"$inc": {"v": 10}}, session=s), 1, {"_id": 1, "v": 2}),
    "insert": ({"new": 0, "insert": {"_id": 20, "u": 7}}, lambda c, n, s: c.pc[n].insert_one(
        {"_id": 20}, session=s), 20, {"_id": 20, "u": 7}),
    "upsert": ({"new": 0, "insert": {"_id": 20, "u": 7}}, lambda c, n, s: c.pc[n].update_one(
        {"_id": 20}, {"$set": {"w": 1}}, upsert=True, session=s), 20, {"_id": 20, "u": 7}),
    "findAndModify_upsert": ({"new": 0, "insert": {"_id": 20, "u": 7}},
                             lambda c, n, s: c.pc[n].find_one_and_update(
                                 {"_id": 20}, {"$set": {"w": 1}}, upsert=True, session=s),
                             20, {"_id": 20, "u": 7}),
}


@pytest.mark.parametrize("write", sorted(OLDER_SNAPSHOT))
def test_transaction_write_with_an_older_snapshot_gets_transient_write_conflict(rs, write):
    """Its snapshot began before the prepare: the commit is not in it, so
    the write conflicts, at once (WiredTiger reports no prepare conflict to
    a snapshot the prepared transaction was running in).  An insert or
    upsert of the _id the prepared one inserts too: WriteConflict, as
    mongod's insert-insert conflict, not DuplicateKey."""
    c, name = rs
    prepared, fn, key, after = OLDER_SNAPSHOT[write]
    with c.start_session() as s:
        s.start_transaction()
        assert c.pc[name].find_one({"_id": 0}, session=s) == {"_id": 0, "v": 1}
        p = Prepared(c, name, **prepared)
        try:
            t0 = time.monotonic()
            with pytest.raises(OperationFailure) as e:
                fn(c, name, s)
            assert time.monotonic() - t0 < 0.4
            assert e.value.code == 112, e.value.details
            assert e.value.has_error_label("TransientTransactionError")
            s.abort_transaction()
        finally:
            p.commit()
    assert c.pc[name].find_one({"_id": key}) == after


def test_get_more_waits_for_the_commit(rs):
    c, name = rs
    c.pc[name].insert_many([{"_id": i, "v": 1} for i in range(10, 300)])
    # the first batch reads ahead 102 documents; getMores read the rest
    cur = c.pc[name].find({}, batch_size=100).sort("_id", 1)
    first = [next(cur)]
    p = Prepared(c, name, 2, id=250)
    r = in_thread(lambda: list(cur))
    time.sleep(0.5)
    assert r["thread"].is_alive()  # its getMore waits at _id 250
    p.commit()
    r["thread"].join(10)
    docs = first + r.get("value", [])
    assert [d["_id"] for d in docs] == list(range(300)), r.get("error")
    assert [d["v"] for d in docs if d["_id"] == 250] == [2]


WRITES = {  # writes that find their documents with a plan, then change each
    "findAndModify": (lambda c, n: c.pc[n].find_one_and_update(
        {"_id": 1}, {"$inc": {"v": 10}}, return_document=True), {"_id": 1, "v": 12}),
    "update_many": (lambda c, n: c.pc[n].update_many({}, {"$inc": {"v": 10}}).modified_count, 10),
    "delete_by_filter": (lambda c, n: c.pc[n].delete_many({"v": 2}).deleted_count, 1),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_write_with_a_plan_waits_for_the_commit(rs, write):
    c, name = rs
    fn, want = WRITES[write]
    p = Prepared(c, name, 2)
    r = in_thread(lambda: fn(c, name))
    time.sleep(0.5)
    assert r["thread"].is_alive()  # waiting, not WriteConflict
    p.commit()
    r["thread"].join(10)
    assert r.get("value") == want, r.get("error")


def test_update_with_max_time_ms_expires_while_prepared(rs):
    c, name = rs
    p = Prepared(c, name, 2)
    try:
        t0 = time.monotonic()
        with pytest.raises(OperationFailure) as e:
            c.pc.command({"update": name, "updates": [{"q": {"_id": 1}, "u": {"$inc": {"v": 10}}}],
                          "maxTimeMS": 500})
        took = time.monotonic() - t0
        assert e.value.code == 50, e.value.details
        assert 0.45 < took < 3, took
    finally:
        p.commit()
    assert c.pc[name].find_one({"_id": 1}) == {"_id": 1, "v": 2}


def test_session_refresh_behind_a_prepared_transaction_holds_no_loop(rs):
    """refreshLogicalSessionCacheNow's first run builds config.system.sessions'
    TTL index, which waits for older transactions, a prepared one too: it
    waits on a worker, and every network loop still serves its connections."""
    c, name = rs
    p = Prepared(c, name, 2)
    clients = []
    try:
        r = in_thread(lambda: c.admin.command("refreshLogicalSessionCacheNow"))
        time.sleep(0.5)
        for _ in range(6):  # new connections, spread over the loops
            clients.append(pymongo.MongoClient("127.0.0.1", c.address[1], directConnection=True,
                                               serverSelectionTimeoutMS=3000,
                                               socketTimeoutMS=3000))
            assert clients[-1].admin.command("ping")["ok"] == 1
    finally:
        p.commit()
        for cl in clients:
            cl.close()
    r["thread"].join(30)
    assert r.get("value", {}).get("ok") == 1, r.get("error")


def test_shutdown_ends_an_index_build_waiting_on_a_prepared_transaction():
    """The first session refresh's TTL index build waits for older
    transactions; a prepared one nobody resolves must not hold up SIGTERM
    (the build ends with InterruptedAtShutdown)."""
    with one_member_set(serverSelectionTimeoutMS=2000) as (m, c):
        c.pc.c.insert_one({"_id": 1, "v": 1})
        Prepared(c, "c", 2)  # left prepared
        r = in_thread(lambda: c.admin.command("refreshLogicalSessionCacheNow"))
        time.sleep(1.0)
        assert r["thread"].is_alive()  # the index build waits
        m.signal(signal.SIGTERM)
        m.proc.wait(timeout=30)  # raises TimeoutExpired on the old hang
        r["thread"].join(timeout=30)
        assert not r["thread"].is_alive()


def test_reaper_runs_while_the_session_refresh_waits_on_a_prepared_transaction():
    """The session job's TTL index build waits for older transactions (a
    prepared one); transactions past their lifetime are still aborted (the
    reaper has its own thread), else one idle transaction could hold the
    build, and with it the reaper, for good."""
    with one_member_set(("--setParameter", "logicalSessionRefreshMillis=1000")) as (_, c):
        c.pc.c.insert_one({"_id": 1, "v": 1})
        p = Prepared(c, "c", 2)
        c.config.system.sessions.drop()  # the next refresh builds its index again
        time.sleep(1.5)
        c.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=1)
        aborted = c.admin.command("serverStatus")["transactions"]["totalAborted"]
        with c.start_session() as s:
            s.start_transaction()
            c.pc.d.insert_one({"_id": 1}, session=s)  # then idle
            wait_for(lambda: c.admin.command("serverStatus")["transactions"][
                "totalAborted"] > aborted, timeout=10)
        p.commit()


TXN_WRITES = {  # a transaction's writes of {_id: 1}: by _id, and with a plan
    "update_by_id": (lambda c, n, s: c.pc[n].update_one(
        {"_id": 1}, {"$inc": {"v": 10}}, session=s).modified_count, 1, 11),
    "update_many": (lambda c, n, s: c.pc[n].update_many(
        {"_id": {"$lte": 1}}, {"$inc": {"v": 10}}, session=s).modified_count, 2, 11),
    "findAndModify": (lambda c, n, s: c.pc[n].find_one_and_update(
        {"v": 1, "_id": {"$gte": 1}}, {"$inc": {"v": 10}}, sort=[("_id", 1)],
        return_document=True, session=s), {"_id": 1, "v": 11}, 11),
    "delete": (lambda c, n, s: c.pc[n].delete_many(
        {"_id": {"$in": [1, 2]}}, session=s).deleted_count, 2, None),
}


@pytest.mark.parametrize("write", sorted(TXN_WRITES))
def test_transaction_write_waits_for_the_abort_then_applies(rs, write):
    c, name = rs
    fn, want, v = TXN_WRITES[write]
    p = Prepared(c, name, 2)
    out, took = in_txn_behind(c, lambda s: fn(c, name, s), p.abort)
    assert out == want and took >= 0.45
    doc = c.pc[name].find_one({"_id": 1})
    assert (doc and doc["v"]) == v


INSERTS = {  # a transaction's insert behind a prepared one's {_id: 20, u: 7}
    "same_id": {"_id": 20, "u": 1},
    "same_unique_key": {"_id": 21, "u": 7},
}


@pytest.mark.parametrize("doc", sorted(INSERTS))
def test_transaction_insert_waits_for_the_abort_then_inserts(rs, doc):
    c, name = rs
    c.pc[name].create_index("u", unique=True, sparse=True)
    p = Prepared(c, name, 0, insert={"_id": 20, "u": 7})
    _, took = in_txn_behind(c, lambda s: c.pc[name].insert_one(INSERTS[doc], session=s), p.abort)
    assert took >= 0.45
    assert list(c.pc[name].find({"u": {"$exists": True}})) == [INSERTS[doc]]


def test_transaction_insert_behind_a_committed_insert_gets_duplicate_key(rs):
    c, name = rs
    p = Prepared(c, name, 0, insert={"_id": 20, "u": 7})
    with pytest.raises(OperationFailure) as e:
        in_txn_behind(c, lambda s: c.pc[name].insert_one({"_id": 20}, session=s), p.commit)
    assert e.value.code == 11000
    assert c.pc[name].find_one({"_id": 20}) == {"_id": 20, "u": 7}


IN_TXN = {  # a transaction's read and write of {_id: 1}, which a prepared one wrote
    "find": lambda c, n, s, maxTimeMS=None: c.pc[n].find_one({"_id": 1}, session=s,
                                                             max_time_ms=maxTimeMS),
    "update": lambda c, n, s, **kw: c.pc.command(
        {"update": n, "updates": [{"q": {}, "u": {"$inc": {"v": 10}}, "multi": True}], **kw},
        session=s),
}


@pytest.mark.parametrize("op", sorted(IN_TXN))
@pytest.mark.parametrize("limit", ["maxTimeMS", "lifetime"])
def test_in_a_transaction_a_wait_ends_at_its_limit(rs, op, limit):
    """maxTimeMS 500 ends it with 50, transactionLifetimeLimitSeconds 1 with
    290; either fails a write command as a whole (mongod's interruptions)."""
    c, name = rs
    p = Prepared(c, name, 2)
    kw, code, least = ({"maxTimeMS": 500}, 50, 0.45) if limit == "maxTimeMS" else ({}, 290, 0.8)
    if limit == "lifetime":
        c.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=1)
    try:
        with c.start_session() as s:
            s.start_transaction()
            t0 = time.monotonic()
            with pytest.raises(OperationFailure) as e:
                IN_TXN[op](c, name, s, **kw)
            took = time.monotonic() - t0
            assert e.value.code == code, e.value.details
            assert least < took < 3, took
    finally:
        c.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=60)
        p.abort()
    assert c.pc[name].count_documents({"v": 1}) == 10


@pytest.mark.parametrize("op", sorted(IN_TXN))
def test_kill_sessions_ends_a_transaction_op_waiting_on_a_prepared_one(rs, op):
    c, name = rs
    p = Prepared(c, name, 2)
    try:
        with c.start_session() as s:
            s.start_transaction()
            r = in_thread(lambda: IN_TXN[op](c, name, s))
            time.sleep(0.5)
            assert r["thread"].is_alive()
            c.admin.command("killSessions", [s.session_id])
            r["thread"].join(5)
            assert getattr(r.get("error"), "code", None) == 11601, r
    finally:
        p.commit()


STEP_DOWN_WAITERS = {  # writes (and a transaction's read) waiting on {_id: 1}
    "update": lambda c: c.pc.c.update_one({"_id": 1}, {"$inc": {"v": 10}}),
    "findAndModify": lambda c: c.pc.c.find_one_and_update({"_id": 1}, {"$inc": {"v": 10}}),
}


def error_code(e):
    """An error's server code: pymongo raises 11602 as NotPrimaryError,
    whose details hold the reply."""
    code = getattr(e, "code", None)
    return code if code is not None else (getattr(e, "details", None) or {}).get("code")


def test_step_down_ends_writes_waiting_on_a_prepared_transaction():
    """replSetStepDown {force: true} while writes wait on a prepared
    transaction: each ends with InterruptedDueToReplStateChange (11602)
    within a second, as mongod kills the operations that hold its global
    lock in IX mode (writes, and a transaction's reads) at a step-down; a
    read outside a transaction goes on waiting.  The transaction stays
    prepared (the set is stopped with it)."""
    with one_member_set() as (m, c):
        c.pc.c.insert_one({"_id": 1, "v": 1})
        Prepared(c, "c", 2)  # left prepared
        # its close looks for a primary to end its sessions: not for long
        w = pymongo.MongoClient("127.0.0.1", m.port, directConnection=True, retryWrites=False,
                                retryReads=False, serverSelectionTimeoutMS=500)
        ops = {k: in_thread(lambda f=f: f(w)) for k, f in STEP_DOWN_WAITERS.items()}

        def txn_read():  # the session is left open: ending it would abort the
            s = w.start_session()  # transaction, and wait for a primary
            s.start_transaction()
            return w.pc.c.find_one({"_id": 1}, session=s)
        ops["txn find"] = in_thread(txn_read)
        reader = in_thread(lambda: w.pc.c.find_one({"_id": 1}, max_time_ms=3000))
        # all four waiting (a transaction's statement that arrived after the
        # step-down would run on a secondary, which mongod refuses)
        wait_for(lambda: sum(o.get("ns") == "pc.c" for o in
                             c.admin.command("currentOp")["inprog"]) >= 4, timeout=10, step=0.1)
        assert all(r["thread"].is_alive() for r in ops.values())
        t0 = time.monotonic()
        c.admin.command("replSetStepDown", 30, force=True)
        for k, r in ops.items():
            r["thread"].join(5)
            assert error_code(r.get("error")) == 11602, (k, r)
        assert time.monotonic() - t0 < 1.5
        reader["thread"].join(10)
        assert error_code(reader.get("error")) == 50, reader  # waited it out
        w.close()


UPSERTS = {  # a transaction's upsert of {_id: 20}, which a prepared one inserts
    "update": lambda c, n, s: c.pc[n].update_one(
        {"_id": 20}, {"$set": {"w": 1}}, upsert=True, session=s).raw_result,
    "findAndModify": lambda c, n, s: c.pc[n].find_one_and_update(
        {"_id": 20}, {"$set": {"w": 1}}, upsert=True, session=s),
}


@pytest.mark.parametrize("op", sorted(UPSERTS))
def test_transaction_upsert_behind_a_committed_insert_updates_it(rs, op):
    """The upsert's read waits for the prepared insert; after its commit the
    transaction's snapshot (begun after the prepare) sees the document, so
    the upsert finds it and updates it, as mongod's: no DuplicateKey."""
    c, name = rs
    p = Prepared(c, name, 0, insert={"_id": 20, "u": 7})
    _, took = in_txn_behind(c, lambda s: UPSERTS[op](c, name, s), p.commit)
    assert took >= 0.45
    assert c.pc[name].find_one({"_id": 20}) == {"_id": 20, "u": 7, "w": 1}

