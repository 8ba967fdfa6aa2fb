"""
A secondary applies the oplog on a pool of writer threads (replWriterThreadCount,
src/repl/repl_apply.c): one document's entries on one writer, in order; commands
alone; commits in ts order.  With no writers (replWriterThreadCount=1) it applies
consecutive document entries in one transaction per group.  Shown, for both,
with a secondary paused while the primary takes a mixed concurrent load, so
that it then applies long batches:

- many concurrent $push updates on a few documents (the arrays' order is the
  order the entries were applied in), inserts, updates and deletes across many
  documents, a unique index whose values move from one document to another,
  an insert_many of one session (its retryable-write record), and collection
  creation and drops in between: afterwards the secondary's documents, dbHash
  and session records are the primary's, and metrics.repl.apply counted each
  entry once, and metrics.repl.apply.batches each batch, also while the
  secondary streams;
- the parameter is a start-up one, 1..256 (BadValue otherwise; setParameter at
  run time: IllegalOperation), as mongod's.
"""
import os
import signal
import tempfile
import threading
import time

import pytest
from pymongo.errors import OperationFailure
from pymongo.write_concern import WriteConcern

from sabled import Sabled, run_sabled, set_members
from test_replset3 import direct, last_oplog_ts, state, wait_for

WRITERS = 8


def two_members(writers):
    with set_members(2, ["--setParameter", "replWriterThreadCount=%d" % writers]) as members:
        p, s = members
        cfg = {"_id": "rs0", "members": [
            {"_id": 0, "host": "127.0.0.1:%d" % p.port},
            {"_id": 1, "host": "127.0.0.1:%d" % s.port, "priority": 0, "votes": 0}],
            "settings": {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}}
        with direct(p) as c:
            c.admin.command("replSetInitiate", cfg)
        wait_for(lambda: state(p) == 1 and state(s) == 2, timeout=60)
        yield p, s


@pytest.fixture(scope="module")
def rs():
    yield from two_members(WRITERS)


@pytest.fixture(scope="module")
def rs1():
    """No writers: the applier groups document entries in transactions."""
    yield from two_members(1)


def apply_metrics(m):
    with direct(m) as d:
        return d.admin.command("serverStatus")["metrics"]["repl"]["apply"]


def oplog_count(m):
    with direct(m) as d:
        return d.local.oplog.rs.count_documents({})


def load(p):
    """The mixed concurrent load, w: 1."""
    errors = []
    w1 = WriteConcern(w=1)

    def pusher(k):
        try:
            with direct(p) as d:
                c = d.t.lists.with_options(write_concern=w1)
                for i in range(150):
                    c.update_one({"_id": i % 4}, {"$push": {"a": "%d-%d" % (k, i)}},
                                 upsert=True)
        except Exception as e:   # noqa: BLE001 (reported below)
            errors.append(e)

    def churner(k):
        try:
            with direct(p) as d:
                c = d.t.docs.with_options(write_concern=w1)
                for i in range(120):
                    c.insert_one({"_id": "%d-%d" % (k, i), "k": k, "n": 0})
                    if i % 2 == 0:
                        c.update_one({"_id": "%d-%d" % (k, i // 2)}, {"$inc": {"n": 1}})
                    if i % 7 == 6:
                        c.delete_one({"_id": "%d-%d" % (k, i - 3)})
        except Exception as e:   # noqa: BLE001
            errors.append(e)

    def mover(k):
        """A unique value moves from document to document: each move deletes
        the holder and inserts a new one with the value (different _ids, so
        different writers on the secondary)."""
        try:
            with direct(p) as d:
                c = d.t.uniq.with_options(write_concern=w1)
                for i in range(60):
                    c.delete_one({"email": "user%d" % k})
                    c.insert_one({"_id": "%d-%d" % (k, i), "email": "user%d" % k})
                    c.update_one({"_id": "%d-%d" % (k, i)}, {"$set": {"email": "moved%d" % k}})
                    c.update_one({"_id": "%d-%d" % (k, i)}, {"$set": {"email": "user%d" % k}})
                    c.delete_one({"email": "moved%d" % k})
        except Exception as e:   # noqa: BLE001
            errors.append(e)

    threads = ([threading.Thread(target=pusher, args=(k,)) for k in range(4)] +
               [threading.Thread(target=churner, args=(k,)) for k in range(3)] +
               [threading.Thread(target=mover, args=(k,)) for k in range(3)])
    for t in threads:
        t.start()
    with direct(p) as d:   # one session's statements, and catalog changes in between
        d.t.many.with_options(write_concern=w1).insert_many(
            [{"_id": i, "v": i} for i in range(2000)])
        d.t.create_collection("made")
        d.t.made.insert_many([{"_id": i} for i in range(50)])
        d.t.drop_collection("made")
        d.t.many.update_many({"v": {"$lt": 500}}, {"$set": {"w": 1}})
    for t in threads:
        t.join(180)
    assert errors == []


def contents(m):
    with direct(m) as d:
        out = {}
        for name in ("lists", "docs", "uniq", "many"):
            out[name] = list(d.t[name].find().sort("_id", 1))
        out["hash"] = d.t.command("dbHash", collections=["lists", "docs", "uniq", "many"])[
            "collections"]
        out["made"] = "made" in d.t.list_collection_names()
        return out


def test_parallel_application_keeps_each_documents_order(rs):
    check_application(*rs, WRITERS)


def test_grouped_application_keeps_each_documents_order(rs1):
    """The same load with replWriterThreadCount=1: consecutive document
    entries are applied in one transaction per group (each at its own ts)."""
    check_application(*rs1, 1)


def check_application(p, s, writers):
    with direct(p) as d:
        w2 = WriteConcern(w=2, wtimeout=30000)
        d.t.create_collection("uniq")
        d.t.uniq.create_index("email", unique=True)
        d.t.docs.with_options(write_concern=w2).insert_one({"_id": "first"})
    with direct(s) as d:
        assert d.admin.command("getParameter", 1, replWriterThreadCount=1)[
            "replWriterThreadCount"] == writers
    before = apply_metrics(s)
    entries_before = oplog_count(s)
    s.signal(signal.SIGSTOP)   # the secondary then applies what piled up in long batches
    try:
        load(p)
    finally:
        s.signal(signal.SIGCONT)
    with direct(p) as d:
        d.t.docs.with_options(write_concern=WriteConcern(w=2, wtimeout=60000)).insert_one(
            {"_id": "last"})
        span = {"ts": {"$gte": d.local.oplog.rs.find_one({"o._id": "first"})["ts"],
                       "$lte": d.local.oplog.rs.find_one({"o._id": "last"})["ts"]}}
        total = [(e["ts"], e["op"], e["ns"]) for e in d.local.oplog.rs.find(span)]
        records = sorted(d.config.transactions.find({}, {"_id": 1, "txnNum": 1,
                                                         "lastWriteOpTime": 1}),
                         key=lambda r: str(r["_id"]))
    want = contents(p)
    got = contents(s)
    for name in ("lists", "docs", "uniq", "many"):
        assert got[name] == want[name], name
    assert got["hash"] == want["hash"]
    assert not got["made"]
    assert len(want["lists"]) == 4 and sum(len(x["a"]) for x in want["lists"]) == 600
    with direct(s) as d:
        assert [(e["ts"], e["op"], e["ns"]) for e in d.local.oplog.rs.find(span)] == total
        assert sorted(d.config.transactions.find({}, {"_id": 1, "txnNum": 1,
                                                      "lastWriteOpTime": 1}),
                      key=lambda r: str(r["_id"])) == records
    # a batch is counted once the sync source has nothing more (an empty getMore)
    wait_for(lambda: apply_metrics(s)["batches"]["num"] > before["batches"]["num"], timeout=10)
    after = apply_metrics(s)
    applied = oplog_count(s) - entries_before
    assert after["ops"] - before["ops"] == applied


def test_batches_are_counted_while_the_secondary_streams(rs1):
    """metrics.repl.apply.batches counts each batch the applier finished
    (mongod's metric), also while writes keep coming and the oplog getMore
    never comes back empty."""
    p, s = rs1
    stop = threading.Event()

    def write():
        with direct(p) as d:
            i = 0
            while not stop.is_set():
                d.t.stream.insert_one({"i": i})
                i += 1

    before = apply_metrics(s)
    t = threading.Thread(target=write)
    t.start()
    try:
        wait_for(lambda: apply_metrics(s)["ops"] - before["ops"] >= 200, timeout=30)
        during = apply_metrics(s)
    finally:
        stop.set()
        t.join()
    batches = during["batches"]["num"] - before["batches"]["num"]
    assert 0 < batches <= during["ops"] - before["ops"], (before, during)


def test_writer_thread_count_is_a_start_up_parameter_of_1_to_256():
    with tempfile.TemporaryDirectory() as tmp:
        for bad in ("0", "257", "-1", "many"):
            r = run_sabled(["--dbpath", tmp, "--port", "0", "--replSet", "rs0",
                            "--setParameter", "replWriterThreadCount=" + bad])
            assert r.returncode == 2, (bad, r.stdout, r.stderr)
            assert "BadValue" in r.stderr and "replWriterThreadCount" in r.stderr, r.stderr
    for good in (1, 256):
        with Sabled() as m:
            m.start(["--replSet", "rs0", "--setParameter", "replWriterThreadCount=%d" % good])
            with m.client() as c:
                assert c.admin.command("getParameter", 1, replWriterThreadCount=1)[
                    "replWriterThreadCount"] == good
                with pytest.raises(OperationFailure) as e:   # IllegalOperation, as mongod
                    c.admin.command("setParameter", 1, replWriterThreadCount=2)
                assert e.value.code == 20 and "at runtime" in str(e.value)
    default = 1 if os.cpu_count() <= 2 else min(16, 2 * os.cpu_count())
    with Sabled() as m:   # the default: min(16, 2 x cores), 1 on one or two cores
        m.start(["--replSet", "rs0"])
        with m.client() as c:
            assert c.admin.command("getParameter", 1, replWriterThreadCount=1)[
                "replWriterThreadCount"] == default
            r = c.admin.command("getParameter", "*")
            assert r["replWriterThreadCount"] == default


def modify_calls(m):
    with direct(m) as d:
        return d.admin.command("serverStatus")["wiredTiger"]["cursor"]["cursor modify calls"]


def test_small_updates_go_in_as_byte_ranges(rs):
    """An update that changes a small part of a large document reaches
    WiredTiger as a modify (the changed bytes; wiredTiger.cursor counts it),
    in the middle, at the start, with a size change; one that rewrites most
    of the document as a whole value.  Either way both members end with the
    documents the updates describe (docs/replication.md, the history kept)."""
    p, s = rs
    w1 = WriteConcern(w=1)
    with direct(p) as d:
        c = d.t.get_collection("ranges", write_concern=w1)
        c.drop()
        base = {"a": 0, **{"f%d" % i: "x" * 100 for i in range(10)}, "z": "end"}
        c.insert_many([dict(base, _id=i) for i in range(4)])
        before = modify_calls(p)
        c.update_one({"_id": 0}, {"$set": {"f5": "y" * 100}})        # same size, middle
        c.update_one({"_id": 1}, {"$inc": {"a": 7}})                  # first field
        c.update_one({"_id": 2}, {"$set": {"f9": "w" * 130}})         # grows
        c.update_one({"_id": 3}, {"$unset": {"z": ""}})               # shrinks, at the end
        small = modify_calls(p) - before
        assert small >= 4, small
        before = modify_calls(p)
        c.update_one({"_id": 0}, {"$set": {"f%d" % i: "q" * 100 for i in range(10)}})
        assert modify_calls(p) - before == 0
        want = {
            0: dict(base, _id=0, **{"f%d" % i: "q" * 100 for i in range(10)}),
            1: dict(base, _id=1, a=7),
            2: dict(base, _id=2, f9="w" * 130),
            3: {k: v for k, v in dict(base, _id=3).items() if k != "z"},
        }
        for i in range(20):                                           # a chain of them
            c.update_one({"_id": 1}, {"$inc": {"a": 1}, "$set": {"f3": "%03d" % i * 33 + "v"}})
        want[1].update(a=27, f3="019" * 33 + "v")
        got = {doc["_id"]: doc for doc in c.find()}
        assert got == want
        assert list(got[2].keys()) == ["_id"] + list(base.keys())   # field order kept
        last = last_oplog_ts(d)
    wait_for(lambda: direct(s).local.oplog.rs.find_one({"ts": last}) is not None, timeout=60)
    with direct(s) as d:
        assert {doc["_id"]: doc for doc in d.t.ranges.find()} == want
        hs = d.t.command("dbHash", collections=["ranges"])["collections"]
    with direct(p) as d:
        assert d.t.command("dbHash", collections=["ranges"])["collections"] == hs


def test_grouped_session_records_are_each_sessions_last_write(rs1):
    """With groups, a retryable write's session record is written once per
    session per group, from the session's last entry in it (as mongod's
    applier, once per batch): 80 sessions (more than the 64 a group notes;
    the others write theirs at once) each interleave 12 retryable writes
    while the secondary is paused, so that groups hold many entries of each.
    Afterwards every session's record on the secondary is the primary's: its
    last txnNumber and the optime of its last write, never an earlier one."""
    p, s = rs1
    w1 = WriteConcern(w=1)
    with direct(p) as d:
        d.t.sess.with_options(write_concern=WriteConcern(w=2, wtimeout=30000)).insert_one(
            {"_id": "start"})
    s.signal(signal.SIGSTOP)
    try:
        with direct(p) as d:
            c = d.t.sess.with_options(write_concern=w1)
            sessions = [d.start_session() for _ in range(80)]
            for i in range(12):
                for k, ses in enumerate(sessions):
                    if i % 3 == 2:
                        c.update_one({"_id": "%d-%d" % (k, i - 1)}, {"$set": {"u": i}},
                                     session=ses)
                    else:
                        c.insert_one({"_id": "%d-%d" % (k, i), "k": k}, session=ses)
            ids = [ses.session_id["id"] for ses in sessions]
            for ses in sessions:
                ses.end_session()
    finally:
        s.signal(signal.SIGCONT)
    with direct(p) as d:
        d.t.sess.with_options(write_concern=WriteConcern(w=2, wtimeout=60000)).insert_one(
            {"_id": "end"})
        want = {str(r["_id"]["id"]): (r["txnNum"], r["lastWriteOpTime"])
                for r in d.config.transactions.find({"_id.id": {"$in": ids}})}
    assert len(want) == 80 and {v[0] for v in want.values()} == {12}
    with direct(s) as d:
        got = {str(r["_id"]["id"]): (r["txnNum"], r["lastWriteOpTime"])
               for r in d.config.transactions.find({"_id.id": {"$in": ids}})}
        assert got == want
        assert d.t.sess.count_documents({}) == 80 * 8 + 2


def test_grouped_insert_of_a_document_already_there_replaces_it(rs1):
    """A grouped insert is tried as an insert and, when its _id is already
    there (an entry applied again: initial sync's documents copied after its
    starting point), applied as mongod's upsert: the secondary's document is
    the entry's, once, and the entry is in its oplog.  The document is put
    there beforehand by running the secondary alone (no --replSet: nothing
    logged), so the next grouped insert of that _id finds it."""
    p, s = rs1
    w2 = WriteConcern(w=2, wtimeout=60000)
    with direct(p) as d:
        d.t.create_collection("again")
        d.t.again.with_options(write_concern=w2).insert_one({"_id": "before"})
    args = list(s.extra_args)
    alone = [a for a in args if a not in ("--replSet", "rs0")]
    s.restart(alone)
    try:
        with direct(s) as d:
            d.t.again.insert_many([{"_id": "dup", "stale": True}, {"_id": "same", "v": 1}])
    finally:
        s.restart(args)
    wait_for(lambda: state(s) == 2, timeout=60)
    with direct(p) as d:
        c = d.t.again.with_options(write_concern=w2)
        c.insert_many([{"_id": "new1"}, {"_id": "dup", "v": 2}, {"_id": "same", "v": 1},
                       {"_id": "new2"}])
        want = list(d.t.again.find().sort("_id", 1))
        entries = [(e["ts"], e["o"]["_id"]) for e in
                   d.local.oplog.rs.find({"ns": "t.again", "op": "i"})]
    with direct(s) as d:
        assert list(d.t.again.find().sort("_id", 1)) == want
        assert d.t.again.count_documents({"_id": "dup"}) == 1
        assert [(e["ts"], e["o"]["_id"]) for e in
                d.local.oplog.rs.find({"ns": "t.again", "op": "i"})] == entries


def test_grouped_transactions_apply_whole_with_their_session_records(rs1):
    """An unprepared transaction's single applyOps entry joins a group like a
    document's entry (its operations at the entry's ts, its session record
    written once per group, at the commit): 6 threads move amounts between
    10 accounts in transactions (an update of each, an insert of a log
    line, now and then a delete) and write retryably in the same sessions,
    with the secondary paused so that groups hold many of them; beside them,
    transactions the group must leave to the serial applier (one creating
    a collection, one on a collection with pre-images).  While the secondary
    catches up, each read of the accounts on it sees the same total (a
    transaction is never half applied); afterwards its documents, dbHash,
    oplog and session records (txnNum, lastWriteOpTime, state) are the
    primary's."""
    p, s = rs1
    w1, w2 = WriteConcern(w=1), WriteConcern(w=2, wtimeout=60000)
    with direct(p) as d:
        d.t.acct.with_options(write_concern=w2).insert_many(
            [{"_id": i, "bal": 1000} for i in range(10)])
        d.t.create_collection("imaged", changeStreamPreAndPostImages={"enabled": True})
        d.t.imaged.with_options(write_concern=w2).insert_one({"_id": 0, "n": 0})
        start = d.local.oplog.rs.find_one(sort=[("$natural", -1)])["ts"]
    errors = []

    def mover(k):
        try:
            with direct(p) as d:
                acct = d.t.acct.with_options(write_concern=w1)
                log = d.t.txlog.with_options(write_concern=w1)
                with d.start_session(causal_consistency=False) as ses:
                    for i in range(60):
                        a, b = (k + i) % 10, (k * 3 + i + 1) % 10
                        if a == b:
                            b = (b + 1) % 10

                        def move(ses, a=a, b=b, i=i):   # again on a write conflict
                            acct.update_one({"_id": a}, {"$inc": {"bal": -7}}, session=ses)
                            acct.update_one({"_id": b}, {"$inc": {"bal": 7}}, session=ses)
                            log.insert_one({"_id": "%d-%d" % (k, i), "a": a, "b": b},
                                           session=ses)
                            if i % 5 == 4:
                                log.delete_one({"_id": "%d-%d" % (k, i - 2)}, session=ses)
                        ses.with_transaction(move, write_concern=w1)
                        if i % 4 == 0:   # a retryable write of the same session
                            log.insert_one({"_id": "r%d-%d" % (k, i)}, session=ses)
        except Exception as e:   # noqa: BLE001 (reported below)
            errors.append(e)

    s.signal(signal.SIGSTOP)
    try:
        threads = [threading.Thread(target=mover, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        with direct(p) as d, d.start_session() as ses:
            with ses.start_transaction(write_concern=w1):   # creates a collection
                d.t.made_in_txn.insert_one({"_id": 1}, session=ses)
            with ses.start_transaction(write_concern=w1):   # writes a pre-image
                d.t.imaged.update_one({"_id": 0}, {"$inc": {"n": 1}}, session=ses)
                d.t.acct.update_one({"_id": 0}, {"$inc": {"bal": 0}}, session=ses)
        for t in threads:
            t.join(180)
    finally:
        s.signal(signal.SIGCONT)
    assert errors == []
    totals = []
    with direct(p) as d:
        d.t.acct.with_options(write_concern=w2).update_one({"_id": 0}, {"$inc": {"bal": 0}})
        last = d.local.oplog.rs.find_one(sort=[("$natural", -1)])["ts"]
    with direct(s) as d:   # reads while it catches up (it may already have)
        for _ in range(50):
            totals.append(sum(x["bal"] for x in d.t.acct.find()))
    assert set(totals) == {10000}
    with direct(p) as d:
        want = {n: list(d.t[n].find().sort("_id", 1)) for n in ("acct", "txlog", "made_in_txn",
                                                                "imaged")}
        hashes = d.t.command("dbHash", collections=list(want))["collections"]
        span = {"ts": {"$gt": start, "$lte": last}}
        entries = [(e["ts"], e["op"], e["ns"]) for e in d.local.oplog.rs.find(span)]
        records = sorted((str(r["_id"]["id"]), r["txnNum"], r["lastWriteOpTime"], r.get("state"))
                         for r in d.config.transactions.find())
    assert sum(1 for e in entries if e[1] == "c") >= 6 * 60
    with direct(s) as d:
        assert {n: list(d.t[n].find().sort("_id", 1)) for n in want} == want
        assert d.t.command("dbHash", collections=list(want))["collections"] == hashes
        assert [(e["ts"], e["op"], e["ns"]) for e in d.local.oplog.rs.find(span)] == entries
        assert sorted((str(r["_id"]["id"]), r["txnNum"], r["lastWriteOpTime"], r.get("state"))
                      for r in d.config.transactions.find()) == records


def test_oplog_batch_delay_makes_fewer_larger_batches(rs1):
    """oplogBatchDelayMillis (mongod's; 0 by default, >= 0, set at start-up or
    run time): a batch the applier began takes entries until that long after
    it began, so entries that come one by one are applied, flushed and
    reported together, and each waits at most that long (1 s at most, the
    cap of mongod's batcher).  A burst of 60 inserts, one every 15 ms:
    without a delay the secondary applies them in many batches; with 1 s,
    in a few."""
    p, s = rs1
    with direct(s) as d:
        assert d.admin.command("getParameter", 1, oplogBatchDelayMillis=1)[
            "oplogBatchDelayMillis"] == 0
        with pytest.raises(OperationFailure) as e:
            d.admin.command("setParameter", 1, oplogBatchDelayMillis=-1)
        assert e.value.code == 2

    def burst(tag):
        with direct(p) as d:
            c = d.t.delayed
            c.with_options(write_concern=WriteConcern(w=2, wtimeout=30000)).insert_one(
                {"_id": tag + "-start"})
            before = apply_metrics(s)["batches"]["num"]
            for i in range(60):
                c.with_options(write_concern=WriteConcern(w=1)).insert_one(
                    {"_id": "%s-%d" % (tag, i)})
                time.sleep(0.015)
            c.with_options(write_concern=WriteConcern(w=2, wtimeout=30000)).insert_one(
                {"_id": tag + "-end"})
        with direct(s) as d:
            assert d.t.delayed.count_documents({"_id": {"$regex": "^%s-" % tag}}) == 62
        return apply_metrics(s)["batches"]["num"] - before

    without = burst("none")
    with direct(s) as d:
        d.admin.command("setParameter", 1, oplogBatchDelayMillis=1000)
    try:
        with_delay = burst("delay")
    finally:
        with direct(s) as d:
            d.admin.command("setParameter", 1, oplogBatchDelayMillis=0)
    assert without >= 20, without
    assert with_delay <= 4, (without, with_delay)


def test_unhurried_writes_reach_the_secondary_in_few_batches(rs1):
    """A write whose write concern waits on no other member (w: 1) does not
    kick the secondaries' oplog streams: they take it at their next poll (5
    ms) with the other writes of that time, one batch for all
    (src/cmd/capped.c).  Four clients inserting one document at a time as
    fast as they can: the secondary applies the inserts in batches bounded by
    the polls, not one batch per insert (as each insert's kick made it on a
    set that keeps up)."""
    p, s = rs1
    with direct(p) as d:
        d.t.fast.with_options(write_concern=WriteConcern(w=2, wtimeout=30000)).insert_one(
            {"_id": "start"})
    before = apply_metrics(s)["batches"]["num"]
    errors = []

    def writer(k):
        try:
            with direct(p) as d:
                c = d.t.fast.with_options(write_concern=WriteConcern(w=1))
                for i in range(150):
                    c.insert_one({"_id": "%d-%d" % (k, i)})
        except Exception as e:  # reported below
            errors.append(e)
    t0 = time.monotonic()
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed_ms = (time.monotonic() - t0) * 1000
    assert errors == []
    with direct(p) as d:
        d.t.fast.with_options(write_concern=WriteConcern(w=2, wtimeout=30000)).insert_one(
            {"_id": "end"})
    batches = apply_metrics(s)["batches"]["num"] - before
    with direct(s) as d:
        assert d.t.fast.count_documents({}) == 602
    # every batch but the last write's came from a poll (one each 5 ms at most)
    assert batches <= elapsed_ms / 5 * 1.5 + 20, (batches, elapsed_ms)
