"""
What a replica set guarantees and what it does not (docs/replication.md,
"Guarantees"), each shown by a scripted fault sequence on three electable
members (electionTimeoutMillis 2000):

- a w:"majority" write that was acknowledged survives the loss of the
  primary: it is on the new primary and on every member after healing;
- a w:1 write (even j:true) on a primary cut off from the others (here:
  they are down) is
  acknowledged, and readConcern "local" reads on that primary see it, but the
  new primary does not have it: it is lost.  The former primary then rolls
  it back and saves it in dbpath/rollback/<db>.<coll>/ (or, in builds
  without rollback, stops syncing and says so in its log, id 21656).
"""
import os
import threading

import bson


import pymongo
import pytest
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_replset3 import direct, state, wait_for


def initiate(members, election_timeout_ms=2000, timeout=30):
    """Initiate members as one set of electable members (electionTimeoutMillis
    election_timeout_ms, heartbeats every 500 ms) and wait up to timeout
    seconds for a primary and secondaries."""
    cfg = {"_id": "rs0", "members": [
        {"_id": i, "host": "127.0.0.1:%d" % m.port} for i, m in enumerate(members)],
        "settings": {"electionTimeoutMillis": election_timeout_ms,
                     "heartbeatIntervalMillis": 500}}
    with direct(members[0]) as c:
        c.admin.command("replSetInitiate", cfg)
    wait_for(lambda: any(state(m) == 1 for m in members) and
             all(state(m) in (1, 2) for m in members), timeout=timeout)


@pytest.fixture
def rs3e():
    with set_members(3) as members:
        initiate(members)
        yield members


def the_primary(members):
    return wait_for(lambda: next((m for m in members if m.is_running() and state(m) == 1),
                                 None), timeout=30)


def test_w1_write_of_a_cut_off_primary_is_lost_majority_writes_are_not(rs3e):
    p = the_primary(rs3e)
    s1, s2 = [m for m in rs3e if m is not p]
    seeds = ",".join("127.0.0.1:%d" % m.port for m in rs3e)
    c = pymongo.MongoClient("mongodb://%s/?replicaSet=rs0" % seeds, retryWrites=False,
                            serverSelectionTimeoutMS=20000, heartbeatFrequencyMS=500)
    try:
        maj = c.t.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=10000))
        maj.insert_one({"_id": "before"})
        # cut the primary off (both secondaries killed; pausing them is not
        # enough: the oplog batch already in their sockets is applied on
        # SIGCONT); within the election timeout it is still primary and
        # takes a w:1, j:true write
        s1.kill9()
        s2.kill9()
        with direct(p) as d:
            w1 = d.t.get_collection("c", write_concern=WriteConcern(w=1, j=True))
            w1.insert_one({"_id": "w1"})
            local = d.t.get_collection("c", read_concern=ReadConcern("local"))
            assert local.find_one({"_id": "w1"}) == {"_id": "w1"}
        p.kill9()
        s1.restart()
        s2.restart()
        newp = the_primary([s1, s2])
        with direct(newp) as d:
            assert d.t.c.find_one({"_id": "before"}) is not None   # acknowledged, majority
            assert d.t.c.find_one({"_id": "w1"}) is None           # acknowledged, w:1: lost
        wait_for(lambda: maj.insert_one({"_id": "after"}) is not None, timeout=30)
        p.restart()

        def settled():
            with direct(p) as d:
                if d.t.c.find_one({"_id": "w1"}) is None and d.t.c.find_one({"_id": "after"}):
                    return "rolled back"
            with open(p.logpath, errors="replace") as f:
                if any('"id":21656' in line for line in f):
                    return "stopped syncing"
            return None
        how = wait_for(settled, timeout=30)
        print("former primary:", how)
        if how == "rolled back":   # the lost write is kept in a rollback file
            d = os.path.join(p.dbpath, "rollback", "t.c")
            saved = [doc for f in os.listdir(d)
                     for doc in bson.decode_all(open(os.path.join(d, f), "rb").read())]
            assert {"_id": "w1"} in saved
        for m in (s1, s2):
            with direct(m) as d:
                wait_for(lambda d=d: d.t.c.find_one({"_id": "after"}) is not None, timeout=20)
                assert d.t.c.find_one({"_id": "w1"}) is None
    finally:
        c.close()



def optime_ts(st, port):
    """The applied optime's ts a replSetGetStatus reply gives member port."""
    m = next(m for m in st["members"] if m["name"].endswith(":%d" % port))
    return m["optime"]["ts"]


def test_commit_point_counts_only_committed_entries(rs3e):
    """A member reports as applied (heartbeats, replSetUpdatePosition) only
    entries whose transaction committed: a secondary held between writing an
    entry and committing it (fail point hangBeforeApplyCommit) does not move
    the primary's commit point past it, so a w:"majority" write that only it
    could acknowledge times out.  It used to report the last ts handed out,
    and the write was acknowledged while the secondary could still lose it."""
    p = the_primary(rs3e)
    s1, s2 = [m for m in rs3e if m is not p]
    with direct(p) as d:
        d.t.c.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).insert_one(
            {"_id": "before"})
    s2.kill9()
    with direct(s1) as d1, direct(p) as d:
        d1.admin.command("configureFailPoint", "hangBeforeApplyCommit", mode="alwaysOn",
                         data={"maxMS": 30000})
        try:
            maj = d.t.c.with_options(write_concern=WriteConcern(w="majority", wtimeout=4000))
            with pytest.raises(pymongo.errors.WTimeoutError):
                maj.insert_one({"_id": "held"})
            held = d.local.oplog.rs.find_one({"o._id": "held"})["ts"]
            # s1 has the entry written (its applier waits to commit it) ...
            wait_for(lambda: '"id":7360002' in s1.log_text(), timeout=10)
            st = d.admin.command("replSetGetStatus")
            assert optime_ts(st, s1.port) < held
            assert st["optimes"]["lastCommittedOpTime"]["ts"] < held
        finally:
            d1.admin.command("configureFailPoint", "hangBeforeApplyCommit", mode="off")
        # ... and once it commits, it counts
        wait_for(lambda: d.admin.command("replSetGetStatus")["optimes"]
                 ["lastCommittedOpTime"]["ts"] >= held, timeout=20)
        assert d1.t.c.find_one({"_id": "held"}) == {"_id": "held"}


def test_write_racing_a_step_down_never_takes_the_new_term(rs3e):
    """A write that passed the primary check and reaches the oplog after the
    member learnt of a newer term and stepped down fails (11602) and leaves
    no entry.  It used to take that newer term for its entry, an entry no
    primary of that term wrote: on its return the member could find a false
    common point (same ts and term as the new primary's entry) and keep a
    diverged history (scripts/faults.sh seed 6009 replayed: dbHash differed)."""
    p = the_primary(rs3e)
    s1 = next(m for m in rs3e if m is not p)
    with direct(p) as d:
        d.t.c.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).insert_one(
            {"_id": "before"})
        term = d.admin.command("replSetGetStatus")["term"]
        d.admin.command("configureFailPoint", "hangBeforePrimaryOplogAppend",
                        mode="alwaysOn", data={"maxMS": 30000, "ns": "t.c"})
    out = {}

    def write():
        try:
            with direct(p) as dw:
                dw.t.c.with_options(write_concern=WriteConcern(w=1)).insert_one(
                    {"_id": "raced"})
            out["ok"] = True
        except pymongo.errors.PyMongoError as e:
            out["error"] = e
    th = threading.Thread(target=write)
    th.start()
    try:
        wait_for(lambda: '"id":7360002' in p.log_text(), timeout=10)   # it waits
        with direct(s1) as d1:   # (lost while it has yet to apply p's newest entry)
            wait_for(lambda: d1.admin.command("replSetStepUp")["ok"], timeout=30)
        wait_for(lambda: state(p) == 2, timeout=30)
        with direct(p) as d:     # p must not lead again before the write goes on
            d.admin.command("replSetFreeze", 120)
        wait_for(lambda: any(state(m) == 1 for m in rs3e if m is not p), timeout=60)
    finally:
        with direct(p) as d:
            d.admin.command("configureFailPoint", "hangBeforePrimaryOplogAppend", mode="off")
        th.join(30)
    assert "error" in out, out
    with direct(p) as d:
        mine = list(d.local.oplog.rs.find({"o._id": "raced"}))
        assert mine == [] or all(e["t"] <= term for e in mine), mine
        assert d.t.c.find_one({"_id": "raced"}) is None


def test_step_down_aborts_open_transactions(rs3e):
    """A transaction left open on a primary that steps down is aborted: its
    uncommitted write no longer blocks the new primary's change to the same
    document (found by scripts/faults.sh, bank seed 25007: the former primary
    failed every entry with WriteConflict and stopped applying; here the
    transaction would otherwise live an hour), and it cannot commit there."""
    p = the_primary(rs3e)
    with direct(p) as d:
        d.bank.acc.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).insert_one(
            {"_id": "a", "b": 100})
        d.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=3600)
        s = d.start_session()
        s.start_transaction(write_concern=WriteConcern(w="majority"))
        d.bank.acc.update_one({"_id": "a"}, {"$inc": {"b": -10}}, session=s)
        try:
            d.admin.command("replSetStepDown", 30)
        except pymongo.errors.AutoReconnect:
            pass
        np = wait_for(lambda: next((m for m in rs3e if m is not p and state(m) == 1), None),
                      timeout=60)
        with direct(np) as c:   # w:3: the former primary must apply it too
            c.bank.acc.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).update_one(
                {"_id": "a"}, {"$inc": {"b": 5}})
        with pytest.raises(pymongo.errors.PyMongoError):
            s.commit_transaction()
        assert d.bank.acc.find_one({"_id": "a"}) == {"_id": "a", "b": 105}
        s.end_session()


def rejoin(p, newp, settled=lambda d: True):
    """Write {_id: "after"} on the new primary newp (w:2), restart the former
    primary p and wait until it is a secondary holding that write and
    settled(a client of it) holds (what it rolled back is gone)."""
    with direct(newp) as d:
        d.t.c.with_options(write_concern=WriteConcern(w=2, wtimeout=30000)).insert_one(
            {"_id": "after"})
    p.restart()

    def done():
        with direct(p) as d:
            return (state(p) == 2 and d.t.c.find_one({"_id": "after"}) is not None and
                    settled(d))
    wait_for(done, timeout=60)


def test_transaction_of_a_cut_off_primary_rolls_back(rs3e):
    """A transaction committed (w:1, j:true) on a primary cut off from the others is
    lost, as a w:1 write is; when the former primary returns it rolls the
    transaction back and follows the new primary.  It used to halt ('cannot
    roll back a applyOps ... resync this member'; scripts/faults.sh, bank seed
    25019: the member stayed RECOVERING)."""
    p = the_primary(rs3e)
    s1, s2 = [m for m in rs3e if m is not p]
    with direct(p) as d:
        d.t.c.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).insert_many(
            [{"_id": "a", "b": 100}, {"_id": "b", "b": 100}])
        s1.kill9()
        s2.kill9()
        with d.start_session() as s:
            s.start_transaction(write_concern=WriteConcern(w=1, j=True))
            d.t.c.update_one({"_id": "a"}, {"$inc": {"b": -10}}, session=s)
            d.t.c.update_one({"_id": "b"}, {"$inc": {"b": 10}}, session=s)
            d.t.c.insert_one({"_id": "t"}, session=s)
            s.commit_transaction()
        assert d.t.c.find_one({"_id": "a"})["b"] == 90
    p.kill9()
    s1.restart()
    s2.restart()
    newp = the_primary([s1, s2])
    rejoin(p, newp, lambda d: d.t.c.find_one({"_id": "t"}) is None and
           d.t.c.find_one({"_id": "a"})["b"] == 100)
    with open(p.logpath, errors="replace") as f:
        failed = [line for line in f if 'Rollback failed' in line]
    assert not failed, failed
    saved = [doc for f in os.listdir(os.path.join(p.dbpath, "rollback", "t.c"))
             for doc in bson.decode_all(open(os.path.join(p.dbpath, "rollback", "t.c", f),
                                             "rb").read())]
    assert {"_id": "t"} in saved


def test_session_record_follows_rollback_restart_and_failover(rs3e):
    """A session whose record in config.transactions was rewritten by many
    retryable writes (one stored version of it each, replaced in the
    write's transaction) shows one record on every member; when its newest
    write (w:1, on a primary cut off from the others) is lost, the former
    primary rolls the record back with the write after its restart, and a
    retry of the newest surviving txnNumber returns the original result on
    every primary after that, older ones being refused (225)."""
    from bson.binary import Binary
    from bson.son import SON
    from test_retryable import EMPTY_UID, Raw, cmd, new_lsid
    p = the_primary(rs3e)
    s1, s2 = [m for m in rs3e if m is not p]
    lsid = new_lsid()
    w3 = {"w": 3, "wtimeout": 30000}

    def inc(txn, by, wc):
        return cmd("update", "c", lsid, txn, writeConcern=wc,
                   updates=[{"q": {"_id": 1}, "u": {"$inc": {"n": by}}, "upsert": True}])

    def records(m):
        with direct(m) as d:
            return list(d.config.transactions.find({"_id.id": lsid["id"]}))

    raw = Raw(p.port)
    for txn in range(1, 31):
        assert raw(inc(txn, 1, w3))["n"] == 1
    with direct(p) as d:
        last = d.local["oplog.rs"].find_one({"lsid.id": lsid["id"], "txnNumber": 30})
    for m in rs3e:
        recs = records(m)
        assert len(recs) == 1 and recs[0]["txnNum"] == 30, (m.port, recs)
        assert recs[0]["lastWriteOpTime"] == {"ts": last["ts"], "t": last["t"]}
        with direct(m) as d:  # the record by its whole _id, as mongod's tools read it
            rid = SON([("id", lsid["id"]), ("uid", Binary(EMPTY_UID))])
            assert d.config.transactions.find_one({"_id": rid}) == recs[0]
    s1.kill9()
    s2.kill9()
    assert raw(inc(31, 100, {"w": 1, "j": True}))["n"] == 1
    assert records(p)[0]["txnNum"] == 31
    raw.close()
    p.kill9()
    s1.restart()
    s2.restart()
    newp = the_primary([s1, s2])
    raw = Raw(newp.port)
    r = wait_for(lambda: raw(inc(30, 1, {"w": 2, "wtimeout": 30000})))
    assert r["n"] == 1 and r["nModified"] == 1 and r["retriedStmtIds"] == [0]
    assert raw(inc(29, 1, {"w": 1}), ok=False)["code"] == 225
    raw.close()
    rejoin(p, newp)
    for m in rs3e:  # the lost write's record went with it: 30 everywhere, once
        recs = records(m)
        assert len(recs) == 1 and recs[0]["txnNum"] == 30, (m.port, recs)
        assert recs[0]["lastWriteOpTime"] == {"ts": last["ts"], "t": last["t"]}
        with direct(m) as d:
            assert d.t.c.find_one({"_id": 1})["n"] == 30
    newp.kill9()  # a failover to either of the others, the rolled-back one included
    again = the_primary([m for m in rs3e if m is not newp])
    raw = Raw(again.port)
    r = wait_for(lambda: raw(inc(30, 1, {"w": 2, "wtimeout": 30000})))
    assert r["n"] == 1 and r["retriedStmtIds"] == [0]
    assert raw(inc(29, 1, {"w": 1}), ok=False)["code"] == 225
    assert raw(inc(31, 1, {"w": 2, "wtimeout": 30000}))["n"] == 1
    assert records(again)[0]["txnNum"] == 31 and len(records(again)) == 1
    raw.close()


def test_majority_writes_survive_all_members_killed_at_once(rs3e):
    """A w:"majority" write is acknowledged once a majority of the voters
    hold it in their journal: the primary's own among them, or both
    secondaries' without it (while both keep up, the primary asks for its
    own flush only when the wait lasts, repl_wait.c).  kill -9 of every
    member right after the acknowledgements loses none of them, whichever
    member wins the election after the restart; with a secondary paused the
    writes are still acknowledged (the primary's journal then counts)."""
    p = the_primary(rs3e)
    s1, s2 = [m for m in rs3e if m is not p]
    seeds = ",".join("127.0.0.1:%d" % m.port for m in rs3e)
    c = pymongo.MongoClient("mongodb://%s/?replicaSet=rs0" % seeds, retryWrites=False,
                            serverSelectionTimeoutMS=20000, heartbeatFrequencyMS=500)
    acked = []
    try:
        maj = c.t.get_collection("d", write_concern=WriteConcern(w="majority", wtimeout=10000))
        errors = []

        def writer(base):
            try:
                for i in range(150):
                    maj.insert_one({"_id": base + i})
                    acked.append(base + i)
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)
        threads = [threading.Thread(target=writer, args=(k * 1000,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        s1.pause()
        try:
            for i in range(30):
                maj.insert_one({"_id": 9000 + i})
                acked.append(9000 + i)
        finally:
            s1.resume()
        with direct(p) as d:
            syncs = d.admin.command("serverStatus")["wiredTiger"]["log"]["log sync operations"]
        print("acknowledged", len(acked), "primary's journal syncs", syncs)
    finally:
        c.close()
    for m in rs3e:
        m.kill9()
    for m in rs3e:
        m.restart()
    newp = the_primary(rs3e)
    with direct(newp) as d:
        have = {doc["_id"] for doc in d.t.d.find({}, {"_id": 1})}
    missing = [i for i in acked if i not in have]
    assert not missing, missing[:20]
    assert len(acked) == 630
