"""
Retryable writes (issue 26): insert, update, delete and findAndModify with
lsid + txnNumber on a replica set member.  Each statement's oplog entry
carries lsid, txnNumber, stmtId and prevOpTime, the session's record in
config.transactions is written in the same transaction, and a retry of an
executed statement returns the original result without running it again,
also after a restart and on a new primary after kill -9.

Commands go over raw sockets (wire.py) so the tests choose lsid and
txnNumber themselves; pymongo's own retryWrites is exercised too.
"""
import hashlib
import signal
import threading
import time
import uuid

import pymongo
from bson.binary import Binary, UUID_SUBTYPE
from bson.int64 import Int64
from bson.son import SON
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure
from pymongo.write_concern import WriteConcern

import wire
from sabled import Sabled
from test_replset import member, primary, rs_client  # noqa: F401 (fixtures)
from test_replset3 import RETRYABLE, direct, primary_of, rs3, wait_for  # noqa: F401 (rs3)

EMPTY_UID = hashlib.sha256(b"").digest()


def new_lsid():
    return {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}


class Raw:
    def __init__(self, port):
        self.sock = wire.connect(port)

    def __call__(self, cmd, db="t", ok=True):
        reply = wire.command(self.sock, SON(cmd), db=db)
        if ok and reply.get("ok") != 1:
            raise OperationFailure(reply.get("errmsg"), reply.get("code"), reply)
        return reply

    def close(self):
        self.sock.close()


def cmd(name, coll, lsid, txn, **kw):
    c = SON([(name, coll)])
    c.update(kw)
    c["lsid"] = lsid
    c["txnNumber"] = Int64(txn)
    return c


def oplog_for(c, lsid):
    return list(c.local["oplog.rs"].find({"lsid.id": lsid["id"]}).sort("$natural", 1))


def test_standalone_refuses_txn_number():
    s = Sabled()
    s.start()
    try:
        raw = Raw(s.port)
        r = raw(cmd("insert", "c", new_lsid(), 1, documents=[{"_id": 1}]), ok=False)
        assert r["ok"] == 0 and r["code"] == 20 and r["codeName"] == "IllegalOperation"
        assert r["errmsg"] == ("Transaction numbers are only allowed on a replica set member "
                               "or mongos")
        assert s.client().t.c.count_documents({}) == 0
        raw.close()
    finally:
        s.cleanup()


def test_insert_retry_entries_and_record(primary):
    m, c = primary
    raw = Raw(m.port)
    lsid = new_lsid()
    ins = cmd("insert", "c", lsid, 1, documents=[{"_id": 1}, {"_id": 2}])
    r = raw(ins)
    assert r["n"] == 2 and "retriedStmtIds" not in r
    ents = oplog_for(c, lsid)
    assert [e["op"] for e in ents] == ["i", "i"]
    assert [e["stmtId"] for e in ents] == [0, 1]
    assert all(e["txnNumber"] == 1 and e["lsid"]["uid"] == EMPTY_UID for e in ents)
    assert ents[0]["prevOpTime"] == {"ts": Timestamp(0, 0), "t": -1}
    assert ents[1]["prevOpTime"] == {"ts": ents[0]["ts"], "t": ents[0]["t"]}
    rec = c.config.transactions.find_one({"_id.id": lsid["id"]})
    assert rec["txnNum"] == 1 and rec["_id"]["uid"] == EMPTY_UID
    assert rec["lastWriteOpTime"] == {"ts": ents[1]["ts"], "t": ents[1]["t"]}
    # config.transactions itself is not logged
    assert c.local["oplog.rs"].count_documents({"ns": "config.transactions"}) == 0

    r = raw(ins)  # the retry: same result, nothing runs again
    assert r["n"] == 2 and r["retriedStmtIds"] == [0, 1] and "writeErrors" not in r
    assert len(oplog_for(c, lsid)) == 2
    # a retry of a batch where one statement had not run runs only that one
    r = raw(cmd("insert", "c", lsid, 1, documents=[{"_id": 1}, {"_id": 2}, {"_id": 3}]))
    assert r["n"] == 3 and r["retriedStmtIds"] == [0, 1]
    assert sorted(d["_id"] for d in c.t.c.find()) == [1, 2, 3]
    assert [e["stmtId"] for e in oplog_for(c, lsid)] == [0, 1, 2]

    # an older txnNumber is refused once a newer one ran
    raw(cmd("insert", "c", lsid, 5, documents=[{"_id": 5}]))
    r = raw(ins, ok=False)
    assert r["code"] == 225 and r["codeName"] == "TransactionTooOld"
    assert "txnNumber 1" in r["errmsg"] and "txnNumber 5" in r["errmsg"]
    assert c.t.c.count_documents({}) == 4
    raw.close()


def test_a_record_changed_behind_the_session_is_read_again(primary):
    """The server keeps each session's record as it last saw it, to write the
    next version without searching for it, and checks it before use: a change
    another writer made meanwhile (here direct writes to config.transactions,
    one reusing the record's storage key with other contents) is what counts."""
    m, c = primary
    raw = Raw(m.port)
    lsid = new_lsid()

    def inc(txn):
        return cmd("update", "c", lsid, txn, updates=[{"q": {"_id": "rc"}, "u": {"$inc": {"n": 1}},
                                                      "upsert": True}])

    raw(inc(1))
    recs = c.config.transactions
    rid = SON([("id", lsid["id"]), ("uid", Binary(EMPTY_UID, 0))])
    rec = recs.find_one({"_id": rid})
    assert recs.delete_one({"_id": rid}).deleted_count == 1
    rec["_id"] = rid
    rec["txnNum"] = Int64(10)  # the first version's key again, a newer txnNumber
    recs.insert_one(rec)
    r = raw(inc(2), ok=False)
    assert r["code"] == 225 and "txnNumber 10" in r["errmsg"]
    recs.delete_one({"_id": rid})  # nothing says txnNumber 10 ran: it runs
    r = raw(inc(10))
    assert r["nModified"] == 1 and "retriedStmtIds" not in r
    assert raw(inc(10))["retriedStmtIds"] == [0]
    raw(inc(11))
    assert c.t.c.find_one({"_id": "rc"})["n"] == 3
    assert [d["txnNum"] for d in recs.find({"_id.id": lsid["id"]})] == [11]
    raw.close()


def test_a_record_written_many_times_reads_as_of_each_write(primary):
    """A session's record is rewritten under one storage key for up to 16
    writes, then moved to the next key (docs/replication.md): across several
    moves, and a restart in the middle, config.transactions shows one record
    for the session, a snapshot read at each write's time shows that write's
    record, the newest txnNumber retries and older ones are refused."""
    m, c = primary
    raw = Raw(m.port)
    lsid = new_lsid()

    def inc(txn):
        return cmd("update", "c", lsid, txn, updates=[{"q": {"_id": "many"},
                                                      "u": {"$inc": {"n": 1}}, "upsert": True}])

    def records(**kw):
        r = c.config.command("find", "transactions", filter={"_id.id": lsid["id"]}, **kw)
        return [(d["txnNum"], d["lastWriteOpTime"]["ts"]) for d in r["cursor"]["firstBatch"]]

    def snapshot_reads(txns):
        for txn in txns:
            at = times[txn]
            assert records(readConcern={"level": "snapshot", "atClusterTime": at}) == [(txn, at)]

    times = {}
    for txn in range(1, 51):
        if txn == 30:  # the kept versions are gone: the next write takes a new key
            snapshot_reads((1, 2, 15, 16, 17, 18, 28, 29))
            raw.close()
            c.close()
            m.restart()
            c = rs_client(m)
            wait_for(lambda: c.admin.command("hello")["isWritablePrimary"])
            raw = Raw(m.port)
        r = raw(inc(txn))
        assert r["nModified"] + len(r.get("upserted", [])) == 1 and "retriedStmtIds" not in r
        times[txn] = r["operationTime"]
        assert records() == [(txn, times[txn])]
    snapshot_reads((30, 31, 32, 45, 46, 47, 48, 49, 50))
    assert c.config.transactions.count_documents({}) == len(c.config.transactions.distinct("_id"))
    assert raw(inc(50))["retriedStmtIds"] == [0]
    r = raw(inc(49), ok=False)
    assert r["code"] == 225 and "txnNumber 50" in r["errmsg"]
    assert c.t.c.find_one({"_id": "many"})["n"] == 50
    assert c.local["oplog.rs"].count_documents({"lsid.id": lsid["id"]}) == 50
    raw.close()
    c.close()


def test_update_delete_upsert_retries(primary):
    m, c = primary
    c.t.c.insert_many([{"_id": 1, "n": 0}, {"_id": 2}])
    raw = Raw(m.port)
    lsid = new_lsid()
    upd = cmd("update", "c", lsid, 1, updates=[
        {"q": {"_id": 1}, "u": {"$inc": {"n": 1}}},
        {"q": {"_id": 9}, "u": {"$set": {"y": 1}}, "upsert": True}])
    r1 = raw(upd)
    assert r1["n"] == 2 and r1["nModified"] == 1
    assert r1["upserted"] == [{"index": 1, "_id": 9}]
    for _ in range(3):
        r = raw(upd)
        assert (r["n"], r["nModified"], r["upserted"]) == (2, 1, [{"index": 1, "_id": 9}])
        assert r["retriedStmtIds"] == [0, 1]
    assert c.t.c.find_one({"_id": 1})["n"] == 1
    assert c.t.c.count_documents({"_id": 9}) == 1

    dl = cmd("delete", "c", lsid, 2, deletes=[{"q": {"_id": 2}, "limit": 1}])
    assert raw(dl)["n"] == 1
    r = raw(dl)
    assert r["n"] == 1 and r["retriedStmtIds"] == [0]

    # multi statements are not retryable
    r = raw(cmd("update", "c", lsid, 3, updates=[{"q": {}, "u": {"$set": {"z": 1}},
                                                  "multi": True}]))
    assert r["writeErrors"][0]["code"] == 72
    r = raw(cmd("delete", "c", lsid, 4, deletes=[{"q": {}, "limit": 0}]))
    assert r["writeErrors"][0]["code"] == 72
    assert c.t.c.count_documents({}) == 2
    # txnNumber on a command that is not a retryable write, and without lsid
    r = raw(cmd("find", "c", lsid, 5, filter={}), ok=False)
    assert r["code"] == 50768 and r["codeName"] == "NotARetryableWriteCommand"
    r = raw(SON([("insert", "c"), ("documents", [{}]), ("txnNumber", Int64(1))]), ok=False)
    assert r["code"] == 72
    raw.close()


def test_find_and_modify_retries_return_the_original_value(primary):
    m, c = primary
    c.t.c.insert_many([{"_id": 1, "n": 0}, {"_id": 2, "n": 0}, {"_id": 3}])
    raw = Raw(m.port)
    lsid = new_lsid()
    cases = [
        (cmd("findAndModify", "c", lsid, 1, query={"_id": 1}, update={"$inc": {"n": 1}}),
         {"_id": 1, "n": 0}),
        (cmd("findAndModify", "c", lsid, 2, query={"_id": 2}, update={"$inc": {"n": 1}},
             new=True), {"_id": 2, "n": 1}),
        (cmd("findAndModify", "c", lsid, 3, query={"_id": 3}, remove=True), {"_id": 3}),
        (cmd("findAndModify", "c", lsid, 4, query={"_id": 7}, update={"$set": {"u": 1}},
             upsert=True, new=True), {"_id": 7, "u": 1}),
    ]
    for command, value in cases:
        first = raw(command)
        assert first["value"] == value
        again = raw(command)
        assert again["value"] == value
        assert again["lastErrorObject"] == first["lastErrorObject"]
        assert again["retriedStmtId"] == 0
    assert c.t.c.find_one({"_id": 1})["n"] == 1
    assert c.t.c.find_one({"_id": 2})["n"] == 1
    assert c.t.c.count_documents({"_id": 3}) == 0
    # the pre-image of the first is a no-op entry the update points at
    u = c.local["oplog.rs"].find_one({"lsid.id": lsid["id"], "txnNumber": 1, "op": "u"})
    pre = c.local["oplog.rs"].find_one({"ts": u["preImageOpTime"]["ts"]})
    assert pre["op"] == "n" and pre["o"] == {"_id": 1, "n": 0}
    st = c.admin.command("serverStatus")["transactions"]
    assert st["retriedCommandsCount"] >= 4 and st["retriedStatementsCount"] >= 4
    raw.close()


def test_retry_after_restart_and_pymongo_retry_writes(primary):
    m, c = primary
    raw = Raw(m.port)
    lsid = new_lsid()
    upd = cmd("update", "c", lsid, 7, updates=[{"q": {"_id": 1}, "u": {"$inc": {"n": 1}},
                                               "upsert": True}])
    raw(upd)
    raw(cmd("update", "c", lsid, 8, updates=[{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}]))
    raw.close()
    c.close()
    m.restart()
    c2 = rs_client(m)
    try:
        wait_for(lambda: c2.admin.command("hello")["isWritablePrimary"])
        raw = Raw(m.port)
        r = raw(cmd("update", "c", lsid, 8, updates=[{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}]))
        assert r["n"] == 1 and r["nModified"] == 1 and r["retriedStmtIds"] == [0]
        assert raw(upd, ok=False)["code"] == 225
        assert c2.t.c.find_one({"_id": 1})["n"] == 2
        raw.close()
        # a driver with retryWrites (pymongo's default) just works
        rc = pymongo.MongoClient("127.0.0.1", m.port, replicaSet="rs0", retryWrites=True)
        coll = rc.t.p
        coll.insert_one({"_id": 1})
        coll.update_one({"_id": 1}, {"$set": {"a": 1}})
        assert coll.find_one_and_update({"_id": 1}, {"$inc": {"a": 1}})["a"] == 1
        coll.delete_one({"_id": 1})
        assert coll.count_documents({}) == 0
        assert c2.local["oplog.rs"].count_documents({"ns": "t.p", "op": {"$in": ["i", "u", "d"]},
                                                      "txnNumber": {"$gte": 1}}) == 4
        rc.close()
    finally:
        c2.close()


def test_retry_on_new_primary_after_kill9(rs3):
    """A statement acknowledged by the old primary, retried on the new one,
    is answered from the replicated history and not run again."""
    p = primary_of(rs3)
    raw = Raw(p.port)
    lsid = new_lsid()
    wc = {"w": 3, "wtimeout": 20000}  # every member holds it: whichever wins has the history
    raw(cmd("insert", "c", lsid, 1, documents=[{"_id": 1, "n": 0}], writeConcern=wc))
    inc = cmd("update", "c", lsid, 2, updates=[{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}],
              writeConcern=wc)
    assert raw(inc)["nModified"] == 1
    raw.close()
    p.kill9()
    newp = primary_of([m for m in rs3 if m is not p])
    raw = Raw(newp.port)
    inc["writeConcern"] = {"w": "majority", "wtimeout": 5000}  # two members are left
    r = wait_for(lambda: raw(inc))
    assert r["n"] == 1 and r["nModified"] == 1 and r["retriedStmtIds"] == [0]
    with direct(newp) as d:
        assert d.t.c.find_one({"_id": 1})["n"] == 1
        rec = d.config.transactions.find_one({"_id.id": lsid["id"]})
        assert rec["txnNum"] == 2
    # an older txnNumber is refused on the new primary too
    assert raw(cmd("insert", "c", lsid, 1, documents=[{"_id": 3}]), ok=False)["code"] == 225
    raw.close()


def test_primary_again_reads_what_another_primary_wrote(rs3):
    """A member keeps each session's record as its last command left it and
    trusts it while nothing else wrote config.transactions.  After it stepped
    down, another primary ran the session's next txnNumber and it applied
    that: primary again, it must answer a retry of that txnNumber from the
    history (not run it twice) and refuse the older one."""
    p = primary_of(rs3)
    raw = Raw(p.port)
    lsid = new_lsid()
    wc = {"w": 3, "wtimeout": 20000}
    inc = lambda txn: cmd("update", "c", lsid, txn, writeConcern=wc,  # noqa: E731
                          updates=[{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}])
    raw(cmd("insert", "c", lsid, 1, documents=[{"_id": 1, "n": 0}], writeConcern=wc))
    assert raw(inc(2))["nModified"] == 1  # the record now kept as written, trusted
    with direct(p) as d:
        d.admin.command("replSetStepDown", 4, secondaryCatchUpPeriodSecs=2)
    raw.close()
    other = primary_of(rs3)
    assert other is not p
    raw = Raw(other.port)
    wait_for(lambda: raw(inc(3)))
    assert raw(inc(3))["retriedStmtIds"] == [0]
    raw.close()
    time.sleep(4)  # p may stand again
    with direct(other) as d:
        d.admin.command("replSetStepDown", 30, secondaryCatchUpPeriodSecs=5)
    assert primary_of(rs3) is p
    raw = Raw(p.port)
    r = wait_for(lambda: raw(inc(3)))
    assert r["n"] == 1 and r["retriedStmtIds"] == [0]
    assert raw(inc(2), ok=False)["code"] == 225
    with direct(p) as d:
        assert d.t.c.find_one({"_id": 1})["n"] == 2
    assert raw(inc(4))["nModified"] == 1 and "retriedStmtIds" not in raw(inc(5))
    with direct(p) as d:
        assert d.t.c.find_one({"_id": 1})["n"] == 4
    raw.close()


def test_pymongo_retry_writes_exactly_once_through_kill9(rs3):
    """Retryable $inc updates from pymongo while the primary is kill -9'd:
    every acknowledged update counts exactly once."""
    seeds = ",".join("127.0.0.1:%d" % m.port for m in rs3)
    c = pymongo.MongoClient("mongodb://%s/?replicaSet=rs0" % seeds, retryWrites=True,
                            serverSelectionTimeoutMS=30000, heartbeatFrequencyMS=500)
    coll = c.t.get_collection("k", write_concern=WriteConcern(w="majority", wtimeout=20000))
    coll.insert_one({"_id": 1, "n": 0})
    acked = [0]
    stop = threading.Event()
    failures = []

    def writer():
        while not stop.is_set():
            try:
                coll.update_one({"_id": 1}, {"$inc": {"n": 1}})
                acked[0] += 1
            except RETRYABLE + (OperationFailure,) as e:
                failures.append(repr(e))  # the outcome is unknown: stop counting
                return

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(1.0)
    p = primary_of(rs3)
    p.kill9()
    newp = primary_of([m for m in rs3 if m is not p])
    before = acked[0]
    wait_for(lambda: acked[0] > before + 5 or failures, timeout=60)
    stop.set()
    t.join(60)
    try:
        assert not failures, failures
        with direct(newp) as d:
            assert d.t.k.find_one({"_id": 1})["n"] == acked[0]
    finally:
        c.close()


def test_write_in_flight_when_primary_killed_applies_once(rs3):
    """A retryable update the primary applied and replicated but had not yet
    acknowledged when it was kill -9'd (its w:3 wait blocked by a stopped
    member): the client never got a reply, and its retry on the new primary
    returns the original outcome without applying the update a second time."""
    p = primary_of(rs3)
    other = next(m for m in rs3[:2] if m is not p)  # the electable secondary
    hidden = rs3[2]                                   # priority 0: never primary
    raw = Raw(p.port)
    lsid = new_lsid()
    raw(cmd("insert", "c", lsid, 1, documents=[{"_id": 1, "n": 0}],
            writeConcern={"w": 3, "wtimeout": 20000}))
    inc = cmd("update", "c", lsid, 2, updates=[{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}],
              writeConcern={"w": 3, "wtimeout": 60000})
    outcome = {}

    def send():
        try:
            outcome["reply"] = raw(inc, ok=False)
        except Exception as e:  # the primary died under the open request
            outcome["error"] = repr(e)

    raw.sock.settimeout(90)  # the reply may take the whole wtimeout: no reply is the point
    hidden.pause()
    try:
        t = threading.Thread(target=send)
        t.start()
        with direct(other) as d:  # applied and replicated, not acknowledged
            wait_for(lambda: (d.t.c.find_one({"_id": 1}) or {}).get("n") == 1, timeout=30)
        assert t.is_alive() and not outcome, outcome
        p.kill9()
    finally:
        hidden.signal(signal.SIGCONT)
    t.join(30)
    assert "reply" not in outcome, outcome  # the client does not know the outcome
    newp = primary_of([other])
    raw.close()
    raw = Raw(newp.port)
    inc["writeConcern"] = {"w": "majority", "wtimeout": 20000}
    r = wait_for(lambda: raw(inc))
    assert r["n"] == 1 and r["nModified"] == 1 and r["retriedStmtIds"] == [0], r
    again = raw(inc)  # and once more: still answered from the history
    assert again["nModified"] == 1 and again["retriedStmtIds"] == [0], again
    with direct(newp) as d:
        assert d.t.c.find_one({"_id": 1})["n"] == 1
    raw.close()
