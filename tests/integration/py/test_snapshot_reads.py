"""
readConcern {level: "snapshot"} outside transactions (issue 26) on a
replica set member: find, aggregate and distinct read at atClusterTime (or
at the majority-committed point, returned as atClusterTime), a getMore
continues at the cursor's time, a time in the future is InvalidOptions, one
older than minSnapshotHistoryWindowInSeconds is SnapshotTooOld, commands that
cannot read at a snapshot refuse it; and a transaction's snapshot is fixed at
its first statement (with atClusterTime, at that time).
"""
import time

from bson.int64 import Int64
from bson.son import SON
from bson.timestamp import Timestamp

from sabled import Sabled
from test_replset import member, primary, rs_client  # noqa: F401 (fixtures)
from test_replset3 import last_oplog_ts, wait_for, wait_majority_of_last
from test_retryable import Raw, new_lsid
from test_transactions import commit, tcmd


def snap(at=None):
    rc = {"level": "snapshot"}
    if at is not None:
        rc["atClusterTime"] = at
    return rc


def test_snapshot_reads_at_cluster_time(primary):
    m, c = primary
    coll = c.t.s
    coll.insert_many([{"_id": i, "v": 0} for i in range(10)])
    raw = Raw(m.port)
    # without atClusterTime: the majority point, which includes our own write
    r = raw(SON([("find", "s"), ("filter", {}), ("batchSize", 3), ("readConcern", snap())]))
    t0 = r["cursor"]["atClusterTime"]
    assert isinstance(t0, Timestamp) and len(r["cursor"]["firstBatch"]) == 3
    cid = r["cursor"]["id"]
    # later writes: the open cursor and reads at t0 do not see them
    coll.update_many({}, {"$set": {"v": 1}})
    coll.insert_one({"_id": 10, "v": 1})
    r = raw(SON([("getMore", Int64(cid)), ("collection", "s")]))
    rest = r["cursor"]["nextBatch"]
    assert [d["_id"] for d in rest] == list(range(3, 10))
    assert all(d["v"] == 0 for d in rest) and r["cursor"]["atClusterTime"] == t0
    r = raw(SON([("find", "s"), ("filter", {}), ("readConcern", snap(t0))]))
    assert len(r["cursor"]["firstBatch"]) == 10
    assert all(d["v"] == 0 for d in r["cursor"]["firstBatch"])
    assert r["cursor"]["atClusterTime"] == t0
    r = raw(SON([("aggregate", "s"), ("pipeline", [{"$group": {"_id": "$v", "n": {"$sum": 1}}}]),
                 ("cursor", {}), ("readConcern", snap(t0))]))
    assert [(d["_id"], d["n"]) for d in r["cursor"]["firstBatch"]] == [(0, 10)]
    assert r["cursor"]["atClusterTime"] == t0
    r = raw(SON([("distinct", "s"), ("key", "v"), ("readConcern", snap(t0))]))
    assert r["values"] == [0] and r["atClusterTime"] == t0
    # the newest majority point sees everything
    r = raw(SON([("distinct", "s"), ("key", "v"), ("readConcern", snap())]))
    assert r["values"] == [1] and r["atClusterTime"] > t0
    # a time after the cluster time: InvalidOptions
    future = Timestamp(t0.time + 3600, 1)
    r = raw(SON([("find", "s"), ("readConcern", snap(future))]), ok=False)
    assert r["code"] == 72 and "clusterTime" in r["errmsg"], r
    # bad forms
    r = raw(SON([("find", "s"), ("readConcern", {"level": "majority", "atClusterTime": t0})]),
            ok=False)
    assert r["code"] == 72, r
    r = raw(SON([("find", "s"), ("readConcern", {"level": "snapshot", "atClusterTime": 5})]),
            ok=False)
    assert r["code"] == 14, r
    for cmd in (SON([("listCollections", 1)]), SON([("count", "s")]),
                SON([("insert", "s"), ("documents", [{}])]),
                SON([("aggregate", "s"), ("pipeline", [{"$out": "o"}]), ("cursor", {})])):
        cmd["readConcern"] = snap()
        r = raw(cmd, ok=False)
        assert r["code"] == 72, (cmd, r)
    assert coll.count_documents({}) == 11
    raw.close()


def test_snapshot_too_old_and_history_window(primary):
    m, c = primary
    assert c.admin.command("getParameter", 1,
                           minSnapshotHistoryWindowInSeconds=1)[
        "minSnapshotHistoryWindowInSeconds"] == 300
    raw = Raw(m.port)
    c.t.h.insert_one({"_id": 1})
    old = raw(SON([("find", "h"), ("readConcern", snap())]))["cursor"]["atClusterTime"]
    # within the window: still readable after later writes
    for i in range(3):
        c.t.h.insert_one({"_id": 2 + i})
    r = raw(SON([("find", "h"), ("readConcern", snap(old))]))
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == [1]
    # no history kept: once stable moves past it, the old time is gone
    r = c.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=0)
    assert r["was"] == 300
    res = c.t.h.insert_one({"_id": 100})
    wait_majority_of_last(c)
    time.sleep(0.2)
    r = raw(SON([("find", "h"), ("readConcern", snap(old))]), ok=False)
    assert r["code"] == 239 and r["codeName"] == "SnapshotTooOld", r
    assert res.inserted_id == 100
    c.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=300)
    raw.close()


def test_transaction_snapshot_fixed_at_first_statement(primary):
    m, c = primary
    coll = c.t.x
    coll.insert_many([{"_id": 1, "v": 0}, {"_id": 2, "v": 0}])
    raw = Raw(m.port)
    lsid = new_lsid()
    r = raw(tcmd("find", "x", lsid, 1, start=True, filter={"_id": 1},
                 readConcern={"level": "snapshot"}))
    assert r["cursor"]["firstBatch"] == [{"_id": 1, "v": 0}]
    # both documents change after the first statement: the transaction
    # sees neither change, also for the document it had not read yet
    coll.update_many({}, {"$set": {"v": 5}})
    r = raw(tcmd("find", "x", lsid, 1, filter={}))
    assert [d["v"] for d in r["cursor"]["firstBatch"]] == [0, 0]
    # writing a document changed since the snapshot is a write conflict
    r = raw(tcmd("update", "x", lsid, 1, updates=[{"q": {"_id": 2}, "u": {"$set": {"w": 1}}}]),
            ok=False)
    assert r.get("code") == 112 or r.get("writeErrors", [{}])[0].get("code") == 112, r
    assert "TransientTransactionError" in r.get("errorLabels", []), r
    # a transaction at atClusterTime reads there
    t_before = raw(SON([("find", "x"), ("readConcern", snap())]))["cursor"]["atClusterTime"]
    coll.update_many({}, {"$set": {"v": 6}})
    lsid2 = new_lsid()
    r = raw(tcmd("find", "x", lsid2, 1, start=True, filter={},
                 readConcern={"level": "snapshot", "atClusterTime": t_before}))
    assert [d["v"] for d in r["cursor"]["firstBatch"]] == [5, 5], r
    assert commit(raw, lsid2, 1)["ok"] == 1
    raw.close()


def test_standalone_refuses_snapshot():
    s = Sabled()
    s.start()
    try:
        raw = Raw(s.port)
        r = raw(SON([("find", "c"), ("readConcern", snap())]), ok=False)
        assert r["code"] == 123, r
        raw.close()
    finally:
        s.cleanup()


def test_history_window_kept_while_reads_at_a_timestamp_run(primary):
    """The whole minSnapshotHistoryWindowInSeconds is kept while reads at a
    timestamp are under way (and for the window's length after the last one
    began); without them 5 s are (WiredTiger 3.2 walks every kept version
    of a document on each write to it: docs/replication.md).  Here with a
    window of 9 s: after 10 s without such reads, a time 6.5 s old is
    SnapshotTooOld; once a snapshot read ran, a time 6.5 s old is read."""
    m, c = primary
    raw = Raw(m.port)
    c.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=9)
    try:
        def write_for(seconds):
            end = time.time() + seconds
            while time.time() < end:
                c.t.hw.insert_one({})
                time.sleep(0.2)

        write_for(10.5)                       # no read at a timestamp for > 9 s
        old = c.t.hw.insert_one({}) and last_oplog_ts(c)
        write_for(6.5)
        r = raw(SON([("find", "hw"), ("readConcern", snap(old))]), ok=False)
        assert r.get("code") == 239, r        # only 5 s were kept
        kept = raw(SON([("find", "hw"), ("readConcern", snap())]))["cursor"]["atClusterTime"]
        write_for(6.5)
        r = raw(SON([("find", "hw"), ("readConcern", snap(kept)), ("batchSize", 0)]))
        assert r["cursor"]["atClusterTime"] == kept, r
    finally:
        c.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=300)
        raw.close()


def test_times_before_a_restart_are_too_old(primary):
    """WiredTiger 3.2 keeps no history across a restart: after one, a read at
    a time before the checkpoint the member recovered from is SnapshotTooOld
    (as mongod 4.2 on it), never the checkpoint's newer values; a time after
    it reads as of that time."""
    m, c = primary
    raw = Raw(m.port)
    c.t.r.insert_one({"_id": 1, "v": 1})
    before = raw(SON([("find", "r"), ("readConcern", snap())]))["cursor"]["atClusterTime"]
    c.t.r.update_one({"_id": 1}, {"$set": {"v": 2}})
    wait_majority_of_last(c)
    r = raw(SON([("find", "r"), ("readConcern", snap(before))]))
    assert r["cursor"]["firstBatch"] == [{"_id": 1, "v": 1}]
    raw.close()
    c.close()
    m.restart()
    c2 = rs_client(m)
    try:
        wait_for(lambda: c2.admin.command("hello")["isWritablePrimary"], timeout=30, step=0.1)
        raw = Raw(m.port)
        r = raw(SON([("find", "r"), ("readConcern", snap(before))]), ok=False)
        assert r["code"] == 239 and r["codeName"] == "SnapshotTooOld", r
        c2.t.r.update_one({"_id": 1}, {"$set": {"v": 3}})
        after = raw(SON([("find", "r"), ("readConcern", snap())]))["cursor"]["atClusterTime"]
        c2.t.r.update_one({"_id": 1}, {"$set": {"v": 4}})
        wait_majority_of_last(c2)
        r = raw(SON([("find", "r"), ("readConcern", snap(after))]))
        assert r["cursor"]["firstBatch"] == [{"_id": 1, "v": 3}]
        raw.close()
    finally:
        c2.close()
