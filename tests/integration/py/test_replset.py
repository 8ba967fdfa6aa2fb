"""
A replica set of one member (issue 24, first increment): sabled started with
--replSet, replSetInitiate, then a driver that connects with replicaSet=
finds a PRIMARY; the oplog (local.oplog.rs) holds one entry per change, in
the change's own transaction, in mongod's shape; tools can tail it.

Each test starts its own sabled on a free port with a temporary dbpath.
"""
import threading
import time

import bson
import pymongo
import pytest
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from bson.timestamp import Timestamp
from pymongo.errors import DuplicateKeyError, NotMasterError, OperationFailure

from sabled import Sabled, one_member_set, trim_oplog
from test_replset3 import last_oplog_ts


def start_member(oplog_mb=16):
    s = Sabled()
    s.start(["--replSet", "rs0", "--oplogSizeMB", str(oplog_mb)])
    return s


def initiate(s, client=None):
    c = client or s.client()
    c.admin.command("replSetInitiate",
                    {"_id": "rs0", "members": [{"_id": 0, "host": "127.0.0.1:%d" % s.port}]})
    return c


def rs_client(s):
    return pymongo.MongoClient("127.0.0.1", s.port, replicaSet="rs0",
                               serverSelectionTimeoutMS=10000)


@pytest.fixture
def member():
    s = start_member()
    try:
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def primary(member):
    initiate(member).close()
    c = rs_client(member)
    try:
        yield member, c
    finally:
        c.close()


def oplog(c, ns=None):
    q = {"ns": ns} if ns else {}
    return list(c.local["oplog.rs"].find(q))


def test_hello_before_initiate_and_not_writable(member):
    c = member.client()
    h = c.admin.command("hello")
    assert h["isWritablePrimary"] is False
    assert h["secondary"] is False
    assert h["isreplicaset"] is True
    assert h["info"] == "Does not have a valid replica set config"
    assert "setName" not in h
    legacy = c.admin.command("isMaster")
    assert legacy["ismaster"] is False
    with pytest.raises((NotMasterError, OperationFailure)) as ei:
        c.t.c.insert_one({"a": 1})
    assert ei.value.details["code"] == 10107
    assert ei.value.details["codeName"] == "NotWritablePrimary"
    # local stays writable; status and config are not there yet
    c.local.scratch.insert_one({"x": 1})
    with pytest.raises(OperationFailure) as ei:
        c.admin.command("replSetGetStatus")
    assert ei.value.code == 94
    with pytest.raises(OperationFailure) as ei:
        c.admin.command("replSetGetConfig")
    assert ei.value.code == 94
    assert "local.oplog.rs" not in ["local." + n for n in c.local.list_collection_names()]


def test_initiate_errors(member):
    c = member.client()
    with pytest.raises(OperationFailure) as ei:
        c.admin.command("replSetInitiate", {"_id": "other", "members": [
            {"_id": 0, "host": "127.0.0.1:%d" % member.port}]})
    assert ei.value.code == 93 and "command line reports rs0" in str(ei.value)
    with pytest.raises(OperationFailure) as ei:
        c.admin.command("replSetInitiate", {"_id": "rs0"})
    assert ei.value.code == 93
    with pytest.raises(OperationFailure) as ei:
        c.admin.command("replSetInitiate", {"_id": "rs0", "members": [
            {"_id": 0, "host": "127.0.0.1:1"}]})
    assert ei.value.code == 74  # NodeNotFound
    initiate(member, c)
    with pytest.raises(OperationFailure) as ei:
        initiate(member, c)
    assert ei.value.code == 23  # AlreadyInitialized


def test_standalone_refuses_repl_commands():
    s = Sabled()
    try:
        s.start()
        c = s.client()
        for cmd in ("replSetGetStatus", "replSetGetConfig", "replSetInitiate"):
            with pytest.raises(OperationFailure) as ei:
                c.admin.command(cmd)
            assert ei.value.code == 76, cmd
        h = c.admin.command("hello")
        assert h["isWritablePrimary"] is True and "setName" not in h
        assert "$clusterTime" not in h and "operationTime" not in h
        c.t.c.insert_one({"a": 1})
        assert "oplog.rs" not in c.local.list_collection_names()
    finally:
        s.cleanup()


def test_hello_and_status_after_initiate(primary):
    s, c = primary
    me = "127.0.0.1:%d" % s.port
    h = c.admin.command("hello")
    assert h["isWritablePrimary"] is True and h["secondary"] is False
    assert h["setName"] == "rs0" and h["setVersion"] == 1
    assert h["hosts"] == [me] and h["primary"] == me and h["me"] == me
    assert isinstance(h["electionId"], bson.ObjectId)
    assert h["topologyVersion"]["counter"] >= 1
    lw = h["lastWrite"]
    assert isinstance(lw["opTime"]["ts"], Timestamp) and lw["opTime"]["t"] == 1
    assert lw["majorityOpTime"] == lw["opTime"]
    assert isinstance(h["$clusterTime"]["clusterTime"], Timestamp)
    assert h["$clusterTime"]["signature"]["keyId"] == 0
    assert h["$clusterTime"]["signature"]["hash"] == b"\0" * 20
    assert isinstance(h["operationTime"], Timestamp)

    st = c.admin.command("replSetGetStatus")
    assert st["set"] == "rs0" and st["myState"] == 1 and st["term"] == 1
    [m] = st["members"]
    assert m["name"] == me and m["state"] == 1 and m["stateStr"] == "PRIMARY"
    assert m["self"] is True and m["health"] == 1
    assert st["optimes"]["lastCommittedOpTime"] == st["optimes"]["appliedOpTime"]
    cfg = c.admin.command("replSetGetConfig")["config"]
    assert cfg["_id"] == "rs0" and cfg["version"] == 1
    assert cfg["members"][0]["host"] == me and cfg["members"][0]["priority"] == 1
    # errors carry the cluster time too
    with pytest.raises(OperationFailure) as ei:
        c.t.command("noSuchCommand")
    assert "operationTime" in ei.value.details


def test_crud_and_oplog_shapes(primary):
    s, c = primary
    coll = c.t.c
    coll.insert_one({"_id": 1, "a": 1})
    coll.update_one({"_id": 1}, {"$set": {"a": 2}})
    coll.replace_one({"_id": 1}, {"b": 3})
    coll.delete_one({"_id": 1})
    coll.with_options(write_concern=pymongo.WriteConcern(w="majority")).insert_one({"_id": 2})
    assert coll.find_one({"_id": 2}) == {"_id": 2}
    assert c.t.get_collection(
        "c", read_concern=pymongo.read_concern.ReadConcern("majority")).count_documents({}) == 1
    coll.create_index("a")
    coll.drop_index("a_1")
    c.t.c.rename("d")
    c.t.d.drop()
    c.t.e.insert_one({"x": 1})
    c.drop_database("t")

    uuid = None
    entries = [e for e in oplog(c) if e["op"] != "n"]
    for e in entries:
        assert set(e) >= {"op", "ns", "o", "ts", "t", "v", "wall"}, e
        assert "_id" not in e
        assert e["t"] == 1 and e["v"] == 2
    ops = [(e["op"], e["ns"], e["o"]) for e in entries]
    create = entries[0]
    assert create["op"] == "c" and create["ns"] == "t.$cmd"
    assert create["o"]["create"] == "c"
    assert create["o"]["idIndex"] == {"v": 2, "key": {"_id": 1}, "name": "_id_"}
    uuid = create["ui"]
    assert uuid is not None
    ins = entries[1]
    assert (ins["op"], ins["ns"], ins["o"], ins["o2"]) == ("i", "t.c", {"_id": 1, "a": 1},
                                                           {"_id": 1})
    assert ins["ui"] == uuid
    upd = entries[2]
    assert (upd["op"], upd["o2"]) == ("u", {"_id": 1})
    assert upd["o"] == {"$v": 2, "diff": {"u": {"a": 2}}}  # mongod's form (replication.md)
    rep = entries[3]
    assert (rep["op"], rep["o"], rep["o2"]) == ("u", {"_id": 1, "b": 3}, {"_id": 1})
    dele = entries[4]
    assert (dele["op"], dele["o"]) == ("d", {"_id": 1}) and "o2" not in dele
    assert ("i", "t.c", {"_id": 2}) in ops
    cmds = [e["o"] for e in entries if e["op"] == "c"]
    assert {"createIndexes": "c", "v": 2, "key": {"a": 1}, "name": "a_1"} in cmds
    dropix = [e for e in entries if e["op"] == "c" and "dropIndexes" in e["o"]]
    assert dropix[0]["o"] == {"dropIndexes": "c", "index": "a_1"}
    assert dropix[0]["o2"]["key"] == {"a": 1}
    ren = [e for e in entries if e["op"] == "c" and "renameCollection" in e["o"]][0]
    assert ren["o"]["renameCollection"] == "t.c" and ren["o"]["to"] == "t.d"
    assert ren["ui"] == uuid
    drop = [e for e in entries if e["op"] == "c" and "drop" in e["o"]][0]
    assert drop["o"] == {"drop": "d"} and drop["ui"] == uuid
    assert drop["o2"] == {"numRecords": 1}
    assert entries[-1]["o"] == {"dropDatabase": 1} and entries[-1]["ns"] == "t.$cmd"


def test_ts_strictly_increases_in_natural_order(primary):
    s, c = primary
    c.t.c.insert_many([{"i": i} for i in range(200)])

    def writer(k):
        cl = rs_client(s)
        try:
            for i in range(100):
                cl.t.w.insert_one({"k": k, "i": i})
        finally:
            cl.close()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = list(c.local["oplog.rs"].find().sort("$natural", 1))
    ts = [e["ts"] for e in entries]
    assert len(ts) >= 600
    assert all(a < b for a, b in zip(ts, ts[1:])), "ts not strictly increasing"
    assert len([e for e in entries if e["ns"] == "t.w"]) == 400
    back = [e["ts"] for e in c.local["oplog.rs"].find().sort("$natural", -1)]
    assert back == ts[::-1]
    # hello's lastWrite follows the newest entry
    assert c.admin.command("hello")["lastWrite"]["opTime"]["ts"] == ts[-1]


def test_failed_write_leaves_no_entry(primary):
    s, c = primary
    c.t.c.insert_one({"_id": 1})
    c.t.u.create_index("k", unique=True)
    c.t.u.insert_one({"_id": 1, "k": 1})
    c.t.create_collection("val", validator={"a": {"$exists": True}})
    c.t.u.update_one({"_id": 1}, {"$set": {"k": 1}})  # no change: mongod logs nothing
    before = len(oplog(c))
    with pytest.raises(DuplicateKeyError):
        c.t.c.insert_one({"_id": 1})
    # the document is written first, then its unique index refuses it: all undone
    with pytest.raises(DuplicateKeyError):
        c.t.u.insert_one({"_id": 2, "k": 1})
    c.t.u.insert_one({"_id": 3, "k": 3})
    with pytest.raises(DuplicateKeyError):
        c.t.u.update_one({"_id": 3}, {"$set": {"k": 1}})
    with pytest.raises(OperationFailure):
        c.t.val.insert_one({"b": 1})
    c.t.c.insert_one({"_id": "ok"})
    new = oplog(c)[before:]
    assert [(e["op"], e["ns"], e["o"]) for e in new] == [
        ("i", "t.u", {"_id": 3, "k": 3}), ("i", "t.c", {"_id": "ok"})]
    assert c.t.u.count_documents({}) == 2
    assert c.t.u.find_one({"_id": 3}) == {"_id": 3, "k": 3}


def test_tailable_await_cursor_sees_new_insert(primary):
    s, c = primary
    c.t.c.insert_one({"_id": "first"})
    last = last_oplog_ts(c)
    cur = c.local["oplog.rs"].find({"ts": {"$gt": last}},
                                   cursor_type=pymongo.CursorType.TAILABLE_AWAIT)
    cur.max_await_time_ms(5000)
    seen = []

    def tail():
        # A tailable cursor stops iterating at an empty batch while staying
        # alive; each getMore waits (awaitData) up to maxAwaitTimeMS.
        deadline = time.monotonic() + 10
        while cur.alive and not seen and time.monotonic() < deadline:
            for e in cur:
                seen.append(e)
                break

    t = threading.Thread(target=tail)
    t.start()
    time.sleep(0.5)
    w = rs_client(s)
    w.t.c.insert_one({"_id": "second"})
    w.close()
    t.join(15)
    assert not t.is_alive()
    assert cur.alive
    assert seen and seen[0]["op"] == "i" and seen[0]["o"] == {"_id": "second"}
    assert seen[0]["ts"] > last
    cur.close()


def test_restart_keeps_config_and_primary(member):
    initiate(member).close()
    c = rs_client(member)
    c.t.c.insert_one({"_id": 1})
    ts_before = oplog(c)[-1]["ts"]
    c.close()
    member.restart()
    c = rs_client(member)
    try:
        h = c.admin.command("hello")
        assert h["isWritablePrimary"] is True and h["setName"] == "rs0"
        c.t.c.insert_one({"_id": 2})
        entries = oplog(c)
        ts = [e["ts"] for e in entries]
        assert all(a < b for a, b in zip(ts, ts[1:]))
        assert ts[-1] > ts_before
        assert entries[-1]["o"] == {"_id": 2}
        assert c.admin.command("replSetGetStatus")["myState"] == 1
        with pytest.raises(OperationFailure) as ei:
            initiate(member, c)
        assert ei.value.code == 23
    finally:
        c.close()


def test_initiate_without_config(member):
    c = member.client()
    c.admin.command("replSetInitiate")
    cfg = c.admin.command("replSetGetConfig")["config"]
    assert cfg["_id"] == "rs0"
    assert cfg["members"][0]["host"].endswith(":%d" % member.port)
    assert c.admin.command("hello")["isWritablePrimary"] is True
    msgs = [e["o"].get("msg") for e in c.local["oplog.rs"].find({"op": "n"})]
    assert msgs[:2] == ["initiating set", "new primary"]


def test_oplog_is_capped(primary):
    s, c = primary
    opts = c.local["oplog.rs"].options()
    assert opts["capped"] is True and opts["size"] == 16 * 1024 * 1024


def test_full_oplog_keeps_its_newest_entries(primary):
    """Inserts past the 16 MB oplog evict its oldest entries, one or so an
    insert: the oplog stays within its size and holds exactly the newest
    inserts, in order.  (Before eviction started its search past what it had
    already evicted, each insert of a full oplog stepped over every deleted
    entry still kept: 10,000 inserts took 54 s instead of 0.5 s.)"""
    s, c = primary
    n = 70000   # about 21 MB of entries
    for i in range(0, n, 10000):
        c.t.fill.insert_many([{"_id": j, "pad": "x" * 100} for j in range(i, i + 10000)])
        trim_oplog(c, c.t.other)  # entries after the last checkpoint stay: checkpoint
    st = c.local.command("collStats", "oplog.rs")
    assert st["size"] <= 16 * 1024 * 1024
    ids = [e["o"]["_id"] for e in c.local["oplog.rs"].find({"ns": "t.fill"}, {"o._id": 1})]
    assert ids and ids[0] > 0
    assert ids == list(range(ids[0], n))


MAX_REPLY = 16 * 1024 * 1024 + 16 * 1024   # maxBsonObjectSize + mongod's 16 KiB of room


def tail_batches(c, after, first_batch_size, more_batch_size):
    """A tailable, awaitData find on the oplog after ts `after`, then getMores
    until one comes back empty: each reply's size in bytes and its entries."""
    raw = CodecOptions(document_class=RawBSONDocument)
    r = c.local.command("find", "oplog.rs", filter={"ts": {"$gt": after}}, tailable=True,
                        awaitData=True, batchSize=first_batch_size, codec_options=raw)
    out = [(len(r.raw), list(r["cursor"]["firstBatch"]))]
    cid = r["cursor"]["id"]
    while cid and out[-1][1]:
        r = c.local.command("getMore", cid, collection="oplog.rs", batchSize=more_batch_size,
                            maxTimeMS=200, codec_options=raw)
        out.append((len(r.raw), list(r["cursor"]["nextBatch"])))
        cid = r["cursor"]["id"]
    return out, cid


def test_oplog_tail_batches_stay_under_the_reply_limit():
    """However many entries are ready and whatever batchSize asks, a batch of
    the oplog ends before its reply would pass 16 MiB (mongod counts the
    array as built, each element's key included): many tiny entries (their
    keys add up: 17.2 MB replies before) and 40 entries of 1 MiB committed
    at once after the tail found nothing (the getMore then served on the
    network loop), each entry once and in order."""
    with one_member_set(["--oplogSizeMB", "256"]) as (s, c):
        start = last_oplog_ts(c)
        n = 130000   # about 290 bytes an entry: 58,000 to a batch
        for i in range(0, n, 65000):
            c.t.tiny.insert_many([{"_id": j} for j in range(i, i + 65000)])
        batches, cid = tail_batches(c, start, 10 ** 7, 10 ** 7)
        got = [e["o"]["_id"] for _, b in batches for e in b if e["ns"] == "t.tiny"]
        assert got == list(range(n))
        assert len(batches) >= 3   # more than one full batch
        assert all(size <= MAX_REPLY for size, _ in batches), [s for s, _ in batches]

        # dry now: 40 entries of 1 MiB in one insert, read by the quick getMore
        assert batches[-1][1] == []
        big = "x" * (1024 * 1024 - 64)
        c.t.big.insert_many([{"_id": i, "pad": big} for i in range(40)])
        raw = CodecOptions(document_class=RawBSONDocument)
        seen, sizes = [], []
        while len(seen) < 40:
            r = c.local.command("getMore", cid, collection="oplog.rs", batchSize=1000,
                                maxTimeMS=2000, codec_options=raw)
            b = list(r["cursor"]["nextBatch"])
            assert b, "the entries did not come"
            sizes.append(len(r.raw))
            seen += [e["o"]["_id"] for e in b if e["ns"] == "t.big" and e["op"] == "i"]
        assert seen == list(range(40))
        assert all(size <= MAX_REPLY for size in sizes) and len(sizes) >= 3, sizes
