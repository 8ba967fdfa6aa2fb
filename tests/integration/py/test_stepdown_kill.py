"""
A primary that steps down ends the writes under way, as mongod 4.2+ kills
every operation holding its global lock in IX mode (docs/replication.md,
step-down): a multi-document write stops at its next document with
InterruptedDueToReplStateChange (11602); the documents it already wrote
stay (each with its oplog entry) and nothing more is written; the
connection stays open and reads outside transactions go on.

One member (a set of one: the step-down is cheap, and replSetFreeze 0 makes
it primary again).  Each write is slowed by a $where that sleeps 1 ms a
document, so it is surely running when replSetStepDown comes from another
connection.
"""
import threading
import time

import bson
import pymongo
import pytest
from pymongo.errors import PyMongoError

from sabled import set_members
from test_replset3 import direct, state, wait_for

SMALL = 3000       # documents of t.small, each visited in about 1 ms
BIG = 100000       # documents of t.big, for inserts and an index build
SLOW = {"$where": "sleep(1); return true;"}


@pytest.fixture(scope="module")
def rs():
    with set_members(1, ("--oplogSizeMB", "200")) as (m,):
        with direct(m) as c:
            c.admin.command("replSetInitiate", {"_id": "rs0", "members": [
                {"_id": 0, "host": "127.0.0.1:%d" % m.port}],
                "settings": {"electionTimeoutMillis": 1000, "heartbeatIntervalMillis": 500}})
        wait_for(lambda: state(m) == 1)
        yield m


def client(m):
    return pymongo.MongoClient("127.0.0.1", m.port, directConnection=True, retryWrites=False,
                               serverSelectionTimeoutMS=5000)


def primary_again(m):
    if state(m) != 1:
        with direct(m) as c:
            c.admin.command("replSetFreeze", 0)
    wait_for(lambda: state(m) == 1, timeout=30)
    with direct(m) as c:   # writable (its catch-up is over)
        wait_for(lambda: c.admin.command("hello")["isWritablePrimary"], timeout=30)


def fill_small(m, v=0):
    with client(m) as c:
        c.t.small.drop()
        c.t.small.insert_many([{"_id": i, "v": v} for i in range(SMALL)])


def fill_big(m):
    with client(m) as c:
        if c.t.big.count_documents({}) != BIG:
            c.t.big.drop()
            c.t.big.insert_many([{"_id": i, "s": "x" * 40} for i in range(BIG)])


def run_across_step_down(m, write, started):
    """Run write(client) in a thread; once started(client) holds, step the
    member down from another connection.  Returns what the write returned
    or raised, and whether it was still running at the step-down."""
    out = {}

    def run():
        with client(m) as c:
            try:
                out["ok"] = write(c)
            except PyMongoError as e:
                out["error"] = e
            out["ended"] = time.time()
    th = threading.Thread(target=run)
    th.start()
    try:
        with direct(m) as c:
            wait_for(lambda: started(c), timeout=30, step=0.01)
            running = th.is_alive()
            out["stepped_down"] = time.time()
            c.admin.command("replSetStepDown", 60, force=True)
        th.join(60)
    finally:
        primary_again(m)
    assert not th.is_alive()
    assert running, "the write ended before the step-down: %r" % (out,)
    return out


def assert_11602(out, label=None):
    err = out.get("error")
    assert err is not None, "the write succeeded across the step-down: %r" % (out.get("ok"),)
    details = getattr(err, "details", None) or {}
    assert details.get("code") == 11602, repr(err)
    if label is not None:
        assert label in details.get("errorLabels", []), details


def entries(m, ns, op):
    with direct(m) as c:
        return c.local.oplog.rs.count_documents({"ns": ns, "op": op})


def settled(m, count):
    """count(client) twice, 0.5 s apart: nothing more is written."""
    with direct(m) as c:
        a = count(c)
        time.sleep(0.5)
        b = count(c)
    assert a == b, "the write went on after its error: %d then %d" % (a, b)
    return a


def test_update_many_stops_at_the_next_document(rs):
    fill_small(rs)
    before = entries(rs, "t.small", "u")
    out = run_across_step_down(
        rs, lambda c: c.t.small.update_many(SLOW, {"$set": {"v": 1}}).raw_result,
        lambda c: c.t.small.count_documents({"v": 1}) > 0)
    assert_11602(out)
    n = settled(rs, lambda c: c.t.small.count_documents({"v": 1}))
    assert 0 < n < SMALL
    assert entries(rs, "t.small", "u") - before == n


def test_update_many_that_changes_nothing_stops_too(rs):
    # no document changes, so no oplog entry refuses it: it ran to the end
    # and answered ok on an old primary before
    fill_small(rs)
    t0 = time.time()
    out = run_across_step_down(
        rs, lambda c: c.t.small.update_many(SLOW, {"$set": {"v": 0}}).raw_result,
        lambda c: time.time() - t0 > 0.5)
    assert_11602(out)


def test_delete_many_stops_at_the_next_document(rs):
    fill_small(rs)
    before = entries(rs, "t.small", "d")
    out = run_across_step_down(
        rs, lambda c: c.t.small.delete_many(SLOW).raw_result,
        lambda c: c.t.small.estimated_document_count() < SMALL)
    assert_11602(out)
    left = settled(rs, lambda c: c.t.small.count_documents({}))
    assert 0 < left < SMALL
    assert entries(rs, "t.small", "d") - before == SMALL - left


def test_ordered_insert_many_stops_and_a_retryable_one_is_labelled(rs):
    with client(rs) as c:
        c.t.big.drop()
    docs = [{"_id": i, "s": "x" * 40} for i in range(BIG)]

    def insert(c):
        # a retryable write's statement (lsid + txnNumber) as drivers send it
        with c.start_session() as session:
            return c.t.command(bson.SON([("insert", "big"), ("documents", docs),
                                         ("ordered", True)]),
                               session=session, txnNumber=bson.Int64(1))
    out = run_across_step_down(rs, insert, lambda c: c.t.big.estimated_document_count() > 0)
    assert_11602(out, label="RetryableWriteError")
    n = settled(rs, lambda c: c.t.big.count_documents({}))
    assert 0 < n < BIG
    assert entries(rs, "t.big", "i") == n
    with client(rs) as c:   # the ids are a prefix: ordered, nothing skipped
        assert c.t.big.count_documents({"_id": {"$lt": n}}) == n


def test_transaction_statement_stops_and_the_transaction_aborts(rs):
    fill_big(rs)
    when = {}

    def txn(c):
        with c.start_session() as s:
            s.start_transaction()
            try:
                c.t.big.update_many({}, {"$set": {"v": 1}}, session=s)
            finally:
                when["statement"] = time.time()
            s.commit_transaction()
    # the statement takes 0.2-0.5 s on an idle host: step down once currentOp
    # shows it running (a fixed 0.3 s let it finish first under CI's load)
    out = run_across_step_down(rs, txn, lambda c: any(
        o.get("ns") == "t.big" and o.get("op") == "update"
        for o in c.admin.command("currentOp")["inprog"]))
    assert_11602(out, label="TransientTransactionError")
    # the statement itself ends, not the commit after it
    assert when["statement"] - out["stepped_down"] < 0.5, out
    with client(rs) as c:
        assert c.t.big.count_documents({"v": 1}) == 0


def test_create_indexes_fails_and_leaves_no_index(rs):
    fill_big(rs)
    before = entries(rs, "t.$cmd", "c")

    def building(c):
        return any(op.get("command", {}).get("createIndexes") == "big"
                   for op in c.admin.command("currentOp")["inprog"])
    out = run_across_step_down(rs, lambda c: c.t.big.create_index("s"), building)
    # before: ok, with an index only the old primary had (its entry refused)
    assert_11602(out)
    with client(rs) as c:
        assert "s_1" not in c.t.big.index_information()
    assert entries(rs, "t.$cmd", "c") == before


def test_reads_outside_transactions_go_on(rs):
    fill_small(rs)
    t0 = time.time()
    out = run_across_step_down(
        rs, lambda c: len(list(c.t.small.find(SLOW, batch_size=SMALL + 1))),
        lambda c: time.time() - t0 > 0.5)
    assert out.get("ok") == SMALL, out


def test_aggregate_out_writes_nothing(rs):
    fill_big(rs)
    with client(rs) as c:
        c.t.dest.drop()

    def writing(c):
        return any(c.t[x].estimated_document_count() > 0
                   for x in c.t.list_collection_names() if "agg_out" in x)
    out = run_across_step_down(
        rs, lambda c: list(c.t.big.aggregate([{"$set": {"v": 1}}, {"$out": "dest"}])), writing)
    assert_11602(out)
    with client(rs) as c:
        names = c.t.list_collection_names()
    assert "dest" not in names and not [x for x in names if "agg_out" in x], names


def test_read_in_a_transaction_stops(rs):
    # mongod's transactions hold the global lock in IX for their reads too
    fill_small(rs)
    t0 = time.time()

    def txn(c):
        with c.start_session() as s:
            s.start_transaction()
            return len(list(c.t.small.find(SLOW, batch_size=SMALL + 1, session=s)))
    out = run_across_step_down(rs, txn, lambda c: time.time() - t0 > 0.5)
    assert_11602(out, label="TransientTransactionError")


def test_aggregate_merge_stops_at_the_next_document(rs):
    fill_big(rs)
    with client(rs) as c:
        c.t.merged.drop()
    out = run_across_step_down(
        rs, lambda c: list(c.t.big.aggregate([{"$merge": {"into": "merged"}}])),
        lambda c: c.t.merged.estimated_document_count() > 0)
    assert_11602(out)
    n = settled(rs, lambda c: c.t.merged.count_documents({}))
    assert 0 < n < BIG
    assert entries(rs, "t.merged", "i") == n
