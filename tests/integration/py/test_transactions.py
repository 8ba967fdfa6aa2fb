"""
Multi-document transactions (issue 26) on a replica set member: snapshot
isolation across commands, commit as one applyOps oplog entry with the
session's record, abort, write conflicts labelled TransientTransactionError,
retried commits, NoSuchTransaction, the lifetime limit, pymongo's
with_transaction, and a secondary applying the transaction at once.

Raw-socket commands (wire.py) choose lsid and txnNumber; pymongo drives the
convenient API.
"""
import time

import pymongo
from bson.binary import Binary
from bson.int64 import Int64
from bson.son import SON

from sabled import Sabled
from test_replset import member, primary  # noqa: F401 (fixtures)
from test_replset3 import direct, primary_of, rs3  # noqa: F401 (rs3)
from test_retryable import EMPTY_UID, Raw, cmd, new_lsid


def tcmd(name, value, lsid, txn, start=False, **kw):
    c = SON([(name, value)])
    c.update(kw)
    c["lsid"] = lsid
    c["txnNumber"] = Int64(txn)
    if start:
        c["startTransaction"] = True
    c["autocommit"] = False
    return c


def commit(raw, lsid, txn, **kw):
    return raw(tcmd("commitTransaction", 1, lsid, txn, **kw), db="admin", ok=False)


def test_standalone_refuses_transactions():
    s = Sabled()
    s.start()
    try:
        raw = Raw(s.port)
        r = raw(tcmd("insert", "c", new_lsid(), 1, start=True, documents=[{}]), ok=False)
        assert r["code"] == 20 and "replica set member" in r["errmsg"]
        raw.close()
    finally:
        s.cleanup()


def test_commit_isolation_and_oplog_entry(primary):
    m, c = primary
    c.t.c.insert_one({"_id": 0, "n": 0})
    raw = Raw(m.port)
    lsid = new_lsid()
    raw(tcmd("insert", "c", lsid, 1, start=True, documents=[{"_id": 1}]))
    raw(tcmd("update", "c", lsid, 1, updates=[{"q": {"_id": 0}, "u": {"$inc": {"n": 1}}}]))
    # the transaction reads its own writes; nobody else sees them yet
    r = raw(tcmd("find", "c", lsid, 1, filter={}))
    assert sorted(d["_id"] for d in r["cursor"]["firstBatch"]) == [0, 1]
    assert c.t.c.count_documents({}) == 1 and c.t.c.find_one({"_id": 0})["n"] == 0
    # a write from outside after the transaction's snapshot stays invisible to it
    c.t.c.insert_one({"_id": 9})
    r = raw(tcmd("find", "c", lsid, 1, filter={"_id": 9}))
    assert r["cursor"]["firstBatch"] == []
    before = c.local["oplog.rs"].count_documents({})
    r = commit(raw, lsid, 1)
    assert r["ok"] == 1, r
    assert sorted(d["_id"] for d in c.t.c.find()) == [0, 1, 9]
    assert c.t.c.find_one({"_id": 0})["n"] == 1
    ents = list(c.local["oplog.rs"].find({"lsid.id": lsid["id"]}))
    assert len(ents) == 1 and c.local["oplog.rs"].count_documents({}) == before + 1
    e = ents[0]
    assert e["op"] == "c" and e["ns"] == "admin.$cmd" and e["txnNumber"] == 1
    assert [(o["op"], o["ns"], o["o"]) for o in e["o"]["applyOps"]] == [
        ("i", "t.c", {"_id": 1}), ("u", "t.c", {"_id": 0, "n": 1})]
    assert "stmtId" not in e and e["prevOpTime"]["t"] == -1
    rec = c.config.transactions.find_one({"_id.id": lsid["id"]})
    assert rec["txnNum"] == 1 and rec["state"] == "committed"
    assert rec["lastWriteOpTime"]["ts"] == e["ts"]
    # a retried commit gives the same outcome; abort after commit is refused
    assert commit(raw, lsid, 1)["ok"] == 1
    r = raw(tcmd("abortTransaction", 1, lsid, 1), db="admin", ok=False)
    assert r["code"] == 256
    st = c.admin.command("serverStatus")["transactions"]
    assert st["totalStarted"] >= 1 and st["totalCommitted"] >= 1 and st["currentOpen"] == 0
    raw.close()


def test_session_record_kept_between_transactions_and_retryable_writes(primary):
    """A transaction's start reads the session's record through the version
    the session catalogue keeps (the one its last transaction or retryable
    write left), and its commit replaces that version by its key: a record
    changed behind the session (here direct writes to config.transactions,
    one reusing the record's storage key with other contents) is read again,
    and transactions and retryable writes on one session go on from each
    other's records."""
    m, c = primary
    raw = Raw(m.port)
    lsid = new_lsid()

    def txn(n, ok=True):
        r = raw(tcmd("update", "c", lsid, n, start=True,
                     updates=[{"q": {"_id": "k"}, "u": {"$inc": {"n": 1}}, "upsert": True}]),
                ok=ok)
        if r.get("ok") != 1:
            return r
        return commit(raw, lsid, n)

    recs = c.config.transactions
    rid = SON([("id", lsid["id"]), ("uid", Binary(EMPTY_UID, 0))])
    assert txn(1)["ok"] == 1
    rec = recs.find_one({"_id": rid})
    assert rec["txnNum"] == 1 and rec["state"] == "committed"
    assert recs.delete_one({"_id": rid}).deleted_count == 1
    rec["_id"] = rid
    rec["txnNum"] = Int64(10)  # the first version's key again, a newer txnNumber
    recs.insert_one(rec)
    r = txn(2, ok=False)
    assert r["code"] == 225 and "10" in r["errmsg"]
    recs.delete_one({"_id": rid})  # nothing says txnNumber 10 ran: it runs
    assert txn(10)["ok"] == 1
    assert commit(raw, lsid, 10)["ok"] == 1  # a retried commit
    # a retryable write goes on from the transaction's record, and back
    up = cmd("update", "c", lsid, 11, updates=[{"q": {"_id": "k"}, "u": {"$inc": {"n": 1}}}])
    assert raw(up)["nModified"] == 1
    assert raw(up)["retriedStmtIds"] == [0]
    r = txn(11, ok=False)
    assert r["code"] == 117  # ConflictingOperationInProgress: the retryable write used it
    assert txn(12)["ok"] == 1
    r = raw(cmd("update", "c", lsid, 11, updates=[{"q": {"_id": "k"}, "u": {"$inc": {"n": 1}}}]),
            ok=False)
    assert r["code"] == 225
    assert c.t.c.find_one({"_id": "k"})["n"] == 4
    assert [(d["txnNum"], d.get("state")) for d in recs.find({"_id.id": lsid["id"]})] == \
        [(12, "committed")]
    # transactions and retryable writes in turn, past the record's moves to
    # a new storage key (every 16 writes): one record, always the newest
    for n in range(13, 53):
        if n % 3:
            assert txn(n)["ok"] == 1
        else:
            raw(cmd("update", "c", lsid, n, updates=[{"q": {"_id": "k"}, "u": {"$inc": {"n": 1}}}]))
        assert [(d["txnNum"], d.get("state")) for d in recs.find({"_id.id": lsid["id"]})] == \
            [(n, "committed" if n % 3 else None)]
    assert c.t.c.find_one({"_id": "k"})["n"] == 44
    # a retryable write of a newer txnNumber between a transaction's start and
    # its commit aborts the transaction (as mongod's): its statements and its
    # commit are TransactionTooOld, and the newer record stays
    raw(tcmd("insert", "c", lsid, 60, start=True, documents=[{"_id": "t60"}]))
    open_before = c.admin.command("serverStatus")["transactions"]["currentOpen"]
    raw(cmd("insert", "c", lsid, 61, documents=[{"_id": "r61"}]))
    assert c.admin.command("serverStatus")["transactions"]["currentOpen"] == open_before - 1
    r = raw(tcmd("insert", "c", lsid, 60, documents=[{"_id": "t60b"}]), ok=False)
    assert r["code"] == 225 and r["codeName"] == "TransactionTooOld", r
    r = commit(raw, lsid, 60)
    assert r["ok"] == 0 and r["code"] == 225, r
    assert [d["txnNum"] for d in recs.find({"_id.id": lsid["id"]})] == [61]
    assert c.t.c.count_documents({"_id": "t60"}) == 0
    assert raw(cmd("insert", "c", lsid, 61, documents=[{"_id": "r61"}]))["retriedStmtIds"] == [0]
    raw.close()


def test_session_record_after_prepared_transactions(primary):
    """A prepared transaction's prepare entry and decision write the session's
    record other than through the version the session keeps: the session's
    next transaction or retryable write reads it again and goes on from it."""
    m, c = primary
    raw = Raw(m.port)
    lsid = new_lsid()
    recs = c.config.transactions
    c.t.create_collection("c")  # a prepared transaction creates none

    def record():
        return [(d["txnNum"], d.get("state")) for d in recs.find({"_id.id": lsid["id"]})]

    def prepared(n, decide):
        raw(tcmd("insert", "c", lsid, n, start=True, documents=[{"_id": "p%d" % n}]))
        ts = raw(tcmd("prepareTransaction", 1, lsid, n), db="admin")["prepareTimestamp"]
        assert record() == [(n, "prepared")]
        if decide == "commit":
            assert commit(raw, lsid, n, commitTimestamp=ts)["ok"] == 1
        else:
            raw(tcmd("abortTransaction", 1, lsid, n), db="admin")

    prepared(1, "commit")
    assert record() == [(1, "committed")]
    raw(tcmd("insert", "c", lsid, 2, start=True, documents=[{"_id": "p2"}]))
    assert commit(raw, lsid, 2)["ok"] == 1
    assert record() == [(2, "committed")]
    prepared(3, "abort")
    assert record() == [(3, "aborted")]
    up = cmd("insert", "c", lsid, 4, documents=[{"_id": "r4"}])
    assert raw(up)["n"] == 1 and record() == [(4, None)]
    assert raw(up)["retriedStmtIds"] == [0]
    prepared(5, "commit")
    r = raw(tcmd("insert", "c", lsid, 3, start=True, documents=[{"_id": "x"}]), ok=False)
    assert r["code"] == 225
    raw(tcmd("insert", "c", lsid, 6, start=True, documents=[{"_id": "p6"}]))
    assert commit(raw, lsid, 6)["ok"] == 1
    assert record() == [(6, "committed")]
    assert sorted(d["_id"] for d in c.t.c.find()) == ["p1", "p2", "p5", "p6", "r4"]
    raw.close()


def test_more_sessions_with_transactions_than_storage_sessions(primary):
    """Each session that ran a transaction keeps a storage session for its
    next one; 2,100 sessions (WiredTiger's session_max is 2,000) each
    commit one, the last ones as the first (mongod has no such limit)."""
    m, c = primary
    raw = Raw(m.port)
    for i in range(2100):
        lsid = new_lsid()
        raw(tcmd("insert", "many", lsid, 1, start=True, documents=[{"_id": i}]))
        r = commit(raw, lsid, 1)
        assert r["ok"] == 1, (i, r)
    assert c.t.many.count_documents({}) == 2100
    raw.close()


def test_abort_conflict_and_no_such_transaction(primary):
    m, c = primary
    c.t.c.insert_one({"_id": 1, "n": 0})
    a, b = Raw(m.port), Raw(m.port)
    la, lb = new_lsid(), new_lsid()
    a(tcmd("update", "c", la, 1, start=True, updates=[{"q": {"_id": 1},
                                                        "u": {"$inc": {"n": 1}}}]))
    r = b(tcmd("update", "c", lb, 1, start=True, updates=[{"q": {"_id": 1},
                                                            "u": {"$inc": {"n": 10}}}]), ok=False)
    assert r["ok"] == 0 and r["code"] == 112 and r["codeName"] == "WriteConflict"
    assert r["errorLabels"] == ["TransientTransactionError"]
    # the conflicting transaction is aborted
    r = commit(b, lb, 1)
    assert r["code"] == 251 and r["codeName"] == "NoSuchTransaction"
    assert commit(a, la, 1)["ok"] == 1
    assert c.t.c.find_one({"_id": 1})["n"] == 1
    # abort: nothing of it remains
    a(tcmd("insert", "c", la, 2, start=True, documents=[{"_id": 2}]))
    assert a(tcmd("abortTransaction", 1, la, 2), db="admin")["ok"] == 1
    assert c.t.c.count_documents({"_id": 2}) == 0
    r = a(tcmd("insert", "c", la, 2, documents=[{"_id": 3}]), ok=False)
    assert r["code"] == 251 and r["errorLabels"] == ["TransientTransactionError"]
    # unknown txnNumber, an older one, a command not allowed
    assert a(tcmd("find", "c", la, 7, filter={}), ok=False)["code"] == 251
    assert a(tcmd("find", "c", la, 1, start=True, filter={}), ok=False)["code"] == 225
    r = a(tcmd("count", "c", la, 8, start=True), ok=False)
    assert r["code"] == 263
    c.t.create_collection("capped", capped=True, size=4096)
    r = a(tcmd("insert", "capped", la, 8, start=True, documents=[{}]), ok=False)
    assert r["code"] == 263 and "capped" in r["errmsg"]
    # a duplicate key inside a transaction aborts it
    a(tcmd("insert", "c", la, 9, start=True, documents=[{"_id": 5}]))
    r = a(tcmd("insert", "c", la, 9, documents=[{"_id": 1}]))
    assert r["writeErrors"][0]["code"] == 11000
    assert commit(a, la, 9)["code"] == 251
    assert c.t.c.count_documents({"_id": 5}) == 0
    a.close()
    b.close()


def test_lifetime_limit_and_end_sessions(primary):
    m, c = primary
    c.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=1)
    assert c.admin.command("getParameter", 1, transactionLifetimeLimitSeconds=1)[
        "transactionLifetimeLimitSeconds"] == 1
    raw = Raw(m.port)
    lsid = new_lsid()
    raw(tcmd("insert", "c", lsid, 1, start=True, documents=[{"_id": 1}]))
    time.sleep(1.5)
    assert commit(raw, lsid, 1)["code"] == 251
    assert c.t.c.count_documents({}) == 0
    c.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=60)
    raw(tcmd("insert", "c", lsid, 2, start=True, documents=[{"_id": 2}]))
    raw({"endSessions": [lsid]}, db="admin")
    assert commit(raw, lsid, 2)["code"] == 251
    assert c.t.c.count_documents({}) == 0
    raw.close()


def test_kill_all_sessions_aborts_open_transactions(primary):
    # The unified test runner sends killAllSessions before each test; an open
    # transaction left by an earlier one must end then, or it holds up index
    # builds (which wait for older transactions) and commits later.
    m, c = primary
    raw = Raw(m.port)
    lsid = new_lsid()
    raw(tcmd("insert", "k", lsid, 1, start=True, documents=[{"_id": 1}]))
    c.admin.command("killAllSessions", [])
    t0 = time.time()
    c.t.k.create_index("x")
    assert time.time() - t0 < 5
    assert commit(raw, lsid, 1)["code"] == 251
    assert c.t.k.count_documents({}) == 0
    raw.close()


def test_pymongo_with_transaction(primary):
    m, c = primary
    coll = c.t.acct
    coll.insert_many([{"_id": "a", "bal": 100}, {"_id": "b", "bal": 0}])

    def transfer(s):
        coll.update_one({"_id": "a"}, {"$inc": {"bal": -30}}, session=s)
        coll.update_one({"_id": "b"}, {"$inc": {"bal": 30}}, session=s)
        assert coll.find_one({"_id": "b"}, session=s)["bal"] == 30

    with c.start_session() as s:
        s.with_transaction(transfer)
    assert {d["_id"]: d["bal"] for d in coll.find()} == {"a": 70, "b": 30}
    # a collection created inside a transaction
    with c.start_session() as s:
        s.with_transaction(lambda s: c.t.fresh.insert_one({"_id": 1}, session=s))
    assert c.t.fresh.count_documents({}) == 1


def test_secondary_applies_transaction(rs3):
    p = primary_of(rs3)
    seeds = ",".join("127.0.0.1:%d" % m.port for m in rs3)
    c = pymongo.MongoClient("mongodb://%s/?replicaSet=rs0" % seeds,
                            serverSelectionTimeoutMS=20000)
    try:
        c.t.c.insert_one({"_id": 0})
        from pymongo.write_concern import WriteConcern
        with c.start_session() as s:
            s.with_transaction(
                lambda s: [c.t.c.insert_one({"_id": i}, session=s) for i in range(1, 4)],
                write_concern=WriteConcern(w=3, wtimeout=15000))
        for m in rs3:
            if m is p:
                continue
            with direct(m) as d:
                assert sorted(x["_id"] for x in d.t.c.find()) == [0, 1, 2, 3]
                e = d.local["oplog.rs"].find_one({"o.applyOps": {"$exists": True}})
                assert len(e["o"]["applyOps"]) == 3
                assert d.config.transactions.find_one({"txnNum": e["txnNumber"]})["state"] == \
                    "committed"
    finally:
        c.close()


def test_secondary_refuses_transactions_and_txn_numbers(rs3):
    """mongod's transactions_on_secondaries_not_allowed: a transaction's first
    statement (a read too, with secondaryOk), commitTransaction,
    abortTransaction, a retryable write and a read carrying a txnNumber all
    get NotWritablePrimary (10107) on a secondary."""
    p = primary_of(rs3)
    s = next(m for m in rs3 if m is not p)
    raw = Raw(s.port)
    try:
        lsid = new_lsid()
        rp = {"$readPreference": {"mode": "secondaryPreferred"}}
        for c, db in ((tcmd("find", "c", lsid, 1, start=True, **rp), "t"),
                      (tcmd("commitTransaction", 1, lsid, 1), "admin"),
                      (tcmd("abortTransaction", 1, lsid, 1), "admin"),
                      (SON([("insert", "c"), ("documents", [{"_id": "sec"}]),
                            ("lsid", lsid), ("txnNumber", Int64(2))]), "t"),
                      (SON([("find", "c"), ("lsid", lsid), ("txnNumber", Int64(3)),
                            ("$readPreference", {"mode": "secondaryPreferred"})]), "t")):
            r = raw(c, db=db, ok=False)
            assert r["ok"] == 0 and r["code"] == 10107, (list(c)[0], r)
        # a plain read with secondaryOk still works there
        r = raw(SON([("find", "c"), ("$readPreference", {"mode": "secondaryPreferred"})]),
                db="t", ok=False)
        assert r["ok"] == 1, r
    finally:
        raw.close()


def test_write_meeting_a_document_committed_after_the_snapshot_conflicts(primary):
    """A transaction's insert or upsert of an _id another client committed
    after the transaction's snapshot: WriteConflict (112) with
    TransientTransactionError, as mongod (its jstest
    transactions_write_conflicts, insert-insert "T2StartsSecondAndWins"),
    not DuplicateKey; the transaction is aborted.  A key committed before
    the snapshot stays a DuplicateKey writeError."""
    m, c = primary
    c.t.late.drop()
    c.t.late.insert_one({"_id": 0})
    a = Raw(m.port)
    cases = [("insert", dict(documents=[{"_id": 5, "by": "txn"}])),
             ("update", dict(updates=[{"q": {"_id": 6}, "u": {"$set": {"by": "txn"}},
                                       "upsert": True}])),
             ("findAndModify", dict(query={"_id": 7}, update={"$set": {"by": "txn"}},
                                    upsert=True))]
    for n, (name, kw) in enumerate(cases, start=1):
        la = new_lsid()
        a(tcmd("find", "late", la, 1, start=True, filter={}))   # the snapshot
        key = 4 + n
        c.t.late.insert_one({"_id": key, "by": "other"})       # committed after it
        r = a(tcmd(name, "late", la, 1, **kw), ok=False)
        assert r["ok"] == 0 and r["code"] == 112, (name, r)
        assert r["errorLabels"] == ["TransientTransactionError"], (name, r)
        assert commit(a, la, 1)["code"] == 251
        assert c.t.late.find_one({"_id": key}) == {"_id": key, "by": "other"}
    # committed before the snapshot: the upsert finds it and updates it
    la = new_lsid()
    a(tcmd("find", "late", la, 1, start=True, filter={}))
    r = a(tcmd("update", "late", la, 1, updates=[{"q": {"_id": 0}, "u": {"$set": {"by": "txn"}},
                                                  "upsert": True}]))
    assert r["n"] == 1 and r["nModified"] == 1
    assert commit(a, la, 1)["ok"] == 1
    a.close()


def test_first_statements_waiting_for_their_snapshot_leave_the_member_answering(rs3):
    """A transaction's first statement with readConcern {level: snapshot,
    atClusterTime: T} waits until T is majority-committed (as mongod).  A
    write waited on the event loop that received it: with the commit point
    held back (both secondaries paused), a few such statements blocked every
    loop and the member answered nothing more, heartbeats included (the
    sharded bank fault rounds: members silent for minutes, dueling
    elections).  They wait off the loops now: the primary still answers."""
    import threading

    p = primary_of(rs3)
    secondaries = [m for m in rs3 if m is not p]
    with direct(p) as c:
        c.t.c.with_options(write_concern=pymongo.WriteConcern(w=3)).insert_one({"_id": 0, "v": 0})
    raws, replies, threads = [Raw(p.port) for _ in range(6)], [], []
    try:
        for m in secondaries:
            m.pause()
        with direct(p) as c:  # newer than the commit point, which stays behind
            at = c.t.command("insert", "c", documents=[{"_id": 1}],
                             writeConcern={"w": 1})["operationTime"]
        for raw in raws:
            stmt = tcmd("update", "c", new_lsid(), 1, start=True,
                        updates=[{"q": {"_id": 0}, "u": {"$inc": {"v": 1}}}],
                        readConcern={"level": "snapshot", "atClusterTime": at})
            t = threading.Thread(target=lambda r=raw, s=stmt: replies.append(r(s, ok=False)),
                                 daemon=True)
            t.start()
            threads.append(t)
        time.sleep(0.3)  # they wait (the primary steps down 2 s after the pause)
        assert all(t.is_alive() for t in threads), replies
        with pymongo.MongoClient("127.0.0.1", p.port, directConnection=True,
                                 serverSelectionTimeoutMS=1000, connectTimeoutMS=1000,
                                 socketTimeoutMS=1000) as c:
            assert c.admin.command("hello")["isWritablePrimary"] is True
    finally:
        for m in secondaries:
            m.resume()
    for t in threads:
        t.join(30)
    assert len(replies) == 6, replies  # each answered once the others came back
    for raw in raws:
        raw.close()


def test_cursor_ends_with_its_transaction_and_commit_labels():
    """A cursor a transaction opened ends with it: a getMore outside it is
    43 CursorNotFound, one with its txnNumber 256 TransactionCommitted.  A
    commit that committed and then timed out waiting for its write concern
    answers ok: 1 with a writeConcernError (64) and no errorLabels (drivers
    add UnknownTransactionCommitResult themselves, by the transactions
    specification)."""
    from sabled import set_members
    from test_replset3 import initiate_pair
    with set_members(2) as (p, s):
        initiate_pair(p, s)
        with direct(p) as d:
            d.t.c.with_options(write_concern=pymongo.WriteConcern(w=2, wtimeout=30000)) \
                .insert_many([{"_id": i, "n": 0} for i in range(3)])
        raw = Raw(p.port)
        lsid = new_lsid()
        r = raw(tcmd("find", "c", lsid, 1, start=True, filter={}, batchSize=1))
        cid = r["cursor"]["id"]
        assert cid != 0
        assert commit(raw, lsid, 1)["ok"] == 1
        r = raw(SON([("getMore", cid), ("collection", "c"), ("lsid", lsid)]), ok=False)
        assert r["code"] == 43, r
        r = raw(tcmd("getMore", cid, lsid, 1, collection="c"), ok=False)
        assert r["code"] == 256, r
        # the secondary stops applying: w: 2 cannot be met
        with direct(s) as ds:
            ds.admin.command("configureFailPoint", "rsSyncApplyStop", mode="alwaysOn")
        try:
            raw(tcmd("update", "c", lsid, 2, start=True,
                     updates=[{"q": {"_id": 0}, "u": {"$inc": {"n": 1}}}]))
            r = commit(raw, lsid, 2, writeConcern={"w": 2, "wtimeout": 300})
            assert r["ok"] == 1 and r["writeConcernError"]["code"] == 64, r
            assert "errorLabels" not in r, r
            with direct(p) as d:
                assert d.t.c.find_one({"_id": 0})["n"] == 1
        finally:
            with direct(s) as ds:
                ds.admin.command("configureFailPoint", "rsSyncApplyStop", mode="off")
        raw.close()
