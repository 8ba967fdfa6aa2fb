"""
Writes on a primary commit in parallel (docs/replication.md, "How the oplog
is written"): each takes its entry's ts under a short lock and commits on its
own, and readers of the oplog stop at the visibility point, below which no
entry is still in flight.  Shown on three members:

- a write held after its entry took a ts (hangBeforePrimaryOplogCommit) does
  not stop later writes from committing on the primary, but no secondary
  (nor a reader of the primary's oplog, nor a change stream) gets them
  before it commits, and then they come in ts order;
- a write that fails there (failBeforePrimaryOplogCommit) leaves a ts that is
  never used, and does not hold the others back once it has rolled back;
- many concurrent writers leave every member with the same data (dbHash) and
  the same oplog.
"""
import threading
import time

import pymongo
import pytest
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_repl_guarantees import initiate
from test_replset3 import direct, state, wait_for

HOLD = "hangBeforePrimaryOplogCommit"
FAIL = "failBeforePrimaryOplogCommit"


@pytest.fixture(scope="module")
def rs():
    with set_members(3) as members:
        initiate(members)
        p = next(m for m in members if state(m) == 1)
        with direct(p) as d:   # every member has the collections before the tests
            for name in ("held", "c", "gone", "conc"):
                d.t.create_collection(name)
            w3 = WriteConcern(w=3, wtimeout=30000)
            d.t.c.with_options(write_concern=w3).insert_one({"_id": "start"})
            d.t.held.with_options(write_concern=w3).insert_one({"_id": "h", "k": 1})
        yield p, [m for m in members if m is not p]


def fail_point(m, name, on, ns="t.held"):
    with direct(m) as d:
        if on:
            d.admin.command("configureFailPoint", name, mode="alwaysOn",
                            data={"ns": ns, "maxMS": 30000})
        else:
            d.admin.command("configureFailPoint", name, mode="off")


def held_write(m, v, out):
    """Update t.held's document to v in a thread held by the fail point, and
    wait until it is held; the filter is not an _id, so the update runs on a
    worker thread, not on a network loop the fail point would stall."""
    before = m.log_text().count('"id":7360002')
    fail_point(m, HOLD, True)

    def run():
        try:
            with direct(m) as d:
                d.t.held.with_options(write_concern=WriteConcern(w=1)).update_one(
                    {"k": 1}, {"$set": {"v": v}})
            out["ok"] = True
        except pymongo.errors.PyMongoError as e:
            out["error"] = e
    th = threading.Thread(target=run)
    th.start()
    wait_for(lambda: m.log_text().count('"id":7360002') > before, timeout=10)
    return th


def ids(m, coll):
    with direct(m) as d:
        return sorted((x["_id"] for x in d.t[coll].find({}, {"_id": 1})), key=str)


def test_later_writes_wait_for_an_earlier_one_in_flight(rs):
    p, secs = rs
    cs_client = direct(p)
    stream = cs_client.t.watch(max_await_time_ms=200)
    out = {}
    th = held_write(p, "held", out)
    try:
        with direct(p) as d:
            w1 = d.t.c.with_options(write_concern=WriteConcern(w=1))
            for i in range(5):   # they commit while the held one has not
                w1.insert_one({"_id": i})
            assert d.t.c.count_documents({"_id": {"$in": list(range(5))}}) == 5
            # a tailing reader of the primary's oplog stops before the hole
            tail = list(d.local.oplog.rs.find({"ns": "t.c", "o._id": {"$ne": "start"}}))
            assert tail == [], tail
            st = d.admin.command("replSetGetStatus")
            mine = next(x for x in st["members"] if x.get("self"))
            held_ts = mine["optime"]["ts"]
            with pytest.raises(pymongo.errors.WTimeoutError):
                d.t.c.with_options(write_concern=WriteConcern(w="majority", wtimeout=1500)) \
                    .insert_one({"_id": "maj"})
        assert stream.try_next() is None   # a change stream waits too
        for s in secs:   # no secondary got the later writes
            assert ids(s, "c") == ["start"]
            with direct(s) as ds:
                assert "v" not in ds.t.held.find_one({"_id": "h"})
        with direct(p) as d:
            st = d.admin.command("replSetGetStatus")
            mine = next(x for x in st["members"] if x.get("self"))
            assert mine["optime"]["ts"] == held_ts   # the applied optime stays too
    finally:
        fail_point(p, HOLD, False)
        th.join(30)
    assert out.get("ok"), out
    for s in secs:
        wait_for(lambda s=s: ids(s, "c") == [0, 1, 2, 3, 4, "maj", "start"], timeout=20)
        with direct(s) as d:   # in ts order: the held entry before the later ones
            assert d.t.held.find_one({"_id": "h"})["v"] == "held"
            held = d.local.oplog.rs.find_one({"ns": "t.held", "op": "u"})["ts"]
            assert held < d.local.oplog.rs.find_one({"ns": "t.c", "o._id": 0})["ts"]
    events = []   # the stream gives them in ts order: the held update first
    wait_for(lambda: events.extend(e for e in iter(stream.try_next, None)) or len(events) >= 7,
             timeout=20)
    assert [e["documentKey"]["_id"] for e in events] == ["h", 0, 1, 2, 3, 4, "maj"]
    stream.close()
    cs_client.close()


def test_aborted_write_does_not_block_visibility(rs):
    p, secs = rs
    fail_point(p, FAIL, True)
    out = {}
    th = held_write(p, "aborted", out)
    try:
        with direct(p) as d:
            w1 = d.t.gone.with_options(write_concern=WriteConcern(w=1))
            for i in range(3):
                w1.insert_one({"_id": i})
        time.sleep(1)
        for s in secs:
            assert ids(s, "gone") == []
        fail_point(p, HOLD, False)   # it goes on, fails and rolls back
        th.join(30)
        assert "error" in out and "failBeforePrimaryOplogCommit" in str(out["error"]), out
    finally:
        fail_point(p, HOLD, False)
        fail_point(p, FAIL, False)
        th.join(30)
    for s in secs:
        wait_for(lambda s=s: ids(s, "gone") == [0, 1, 2], timeout=20)
    for m in [p] + secs:
        with direct(m) as d:
            assert d.t.held.find_one({"_id": "h"})["v"] == "held"
            assert d.local.oplog.rs.find_one({"o.v": "aborted"}) is None
    with direct(p) as d:   # and later writes reach a majority at once
        d.t.gone.with_options(write_concern=WriteConcern(w=3, wtimeout=20000)).insert_one(
            {"_id": "after"})


def test_concurrent_writers_leave_equal_members(rs):
    p, secs = rs
    errors = []

    def writer(k):
        try:
            with direct(p) as d:
                c = d.t.conc.with_options(write_concern=WriteConcern(w=1))
                for i in range(150):
                    c.insert_one({"_id": "%d-%d" % (k, i), "k": k, "n": 0})
                    if i % 3 == 0:
                        c.update_one({"_id": "%d-%d" % (k, i // 2)}, {"$inc": {"n": 1}})
                    if i % 10 == 9:
                        c.delete_one({"_id": "%d-%d" % (k, i - 5)})
        except Exception as e:   # noqa: BLE001 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    with direct(p) as d:
        d.t.conc.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).insert_one(
            {"_id": "last"})
        want = d.t.command("dbHash", collections=["conc"])["collections"]["conc"]
        n = d.t.conc.count_documents({})
        primary_ops = [e["ts"] for e in d.local.oplog.rs.find({"ns": "t.conc"})]
    assert n == 8 * 150 - 8 * 15 + 1
    assert primary_ops == sorted(primary_ops)
    for s in secs:
        with direct(s) as d:
            wait_for(lambda d=d: d.t.command("dbHash", collections=["conc"])
                     ["collections"]["conc"] == want, timeout=30)
            assert [e["ts"] for e in d.local.oplog.rs.find({"ns": "t.conc"})] == primary_ops
