"""
A tailable awaitData exhaust getMore on local.oplog.rs streams for as long
as its cursor lives (mongod's oplogFetcherUsesExhaust, docs/replication.md,
"Secondaries"): the source answers with moreToCome, entries written after
the stream began as they commit and an empty batch after each awaitData
wait; a reader that stops reading holds the source back (it makes no
batches the socket cannot take); a connection that closes ends the stream
and kills its cursor.  A 3-member set replicates under load with the
secondaries' fetchers streaming and with oplogFetcherUsesExhaust false
(one getMore per reply).
"""
import socket
import struct
import threading
import time

from bson.son import SON
import pymongo
from pymongo.write_concern import WriteConcern

import wire
from sabled import one_member_set, set_members
from test_replset3 import last_oplog_ts, primary_of, state, wait_for, direct

EXHAUST_ALLOWED = 1 << 16


def open_tail(s, after):
    """A tailable awaitData find on local.oplog.rs past ts after, over the
    raw socket s: its cursor id."""
    r = wire.command(s, SON([("find", "oplog.rs"), ("filter", {"ts": {"$gt": after}}),
                             ("tailable", True), ("awaitData", True)]), db="local")
    assert r["ok"] == 1.0, r
    assert r["cursor"]["firstBatch"] == []
    return r["cursor"]["id"]


def start_stream(s, cid, max_time_ms=200):
    """Send the exhaust getMore; the request id the first reply answers."""
    msg = wire.op_msg(SON([("getMore", cid), ("collection", "oplog.rs"),
                           ("maxTimeMS", max_time_ms), ("$db", "local")]),
                      flags=EXHAUST_ALLOWED)
    s.sendall(msg)
    return struct.unpack("<i", msg[4:8])[0]


def read_reply(s, answers):
    _, raw = wire.read_message(s)
    rep = wire.Reply(raw)
    assert rep.response_to == answers  # each reply answers the one before
    return rep


def cursor_gone(c, cid):
    r = c.local.command("killCursors", "oplog.rs", cursors=[cid])
    return cid in r["cursorsNotFound"]


def test_exhaust_tail_streams_entries_and_empty_batches_until_closed():
    with one_member_set() as (m, c):
        c.t.c.insert_one({"_id": 0})
        s = wire.connect(m.port)
        closed = False
        try:
            cid = open_tail(s, last_oplog_ts(c))
            rid = start_stream(s, cid)
            # Idle: an empty batch after each 200 ms wait, and the stream goes on.
            t0 = time.time()
            for _ in range(3):
                rep = read_reply(s, rid)
                rid = rep.request_id
                assert rep.flags & wire.MORE_TO_COME, rep.doc
                assert rep.doc["cursor"]["nextBatch"] == []
                assert rep.doc["cursor"]["id"] == cid
            assert time.time() - t0 >= 0.5  # the waits were awaitData's, not a spin
            # Entries written now arrive in the stream, in order.
            c.t.c.insert_many([{"_id": i} for i in range(1, 21)])
            got = []
            end = time.time() + 10
            while len(got) < 20 and time.time() < end:
                rep = read_reply(s, rid)
                rid = rep.request_id
                assert rep.flags & wire.MORE_TO_COME, rep.doc
                got += [e["o"]["_id"] for e in rep.doc["cursor"]["nextBatch"]
                        if e.get("ns") == "t.c"]
            assert got == list(range(1, 21))
            # Idle again: empty batches again.
            rep = read_reply(s, rid)
            assert rep.flags & wire.MORE_TO_COME
            s.close()
            closed = True
            # The closed connection ended the stream and killed its cursor.
            wait_for(lambda: cursor_gone(c, cid), timeout=10)
            assert c.admin.command("ping")["ok"] == 1.0
        finally:
            if not closed:
                s.close()


def test_plain_tailable_exhaust_still_ends_on_an_empty_batch():
    """Only awaitData streams past an empty batch: a tailable cursor without
    it ends the stream there, as before (the client then asks again)."""
    with one_member_set() as (m, c):
        db = c.t
        db.create_collection("capped", capped=True, size=1 << 20)
        db.capped.insert_one({"_id": 0})
        s = wire.connect(m.port)
        try:
            r = wire.command(s, SON([("find", "capped"), ("tailable", True),
                                     ("batchSize", 0)]), db=db.name)
            cid = r["cursor"]["id"]
            msg = wire.op_msg(SON([("getMore", cid), ("collection", "capped"),
                                   ("$db", db.name)]), flags=EXHAUST_ALLOWED)
            rid = struct.unpack("<i", msg[4:8])[0]
            s.sendall(msg)
            rep = read_reply(s, rid)
            assert [d["_id"] for d in rep.doc["cursor"]["nextBatch"]] == [0]
            assert rep.flags & wire.MORE_TO_COME
            rep = read_reply(s, rep.request_id)
            assert rep.doc["cursor"]["nextBatch"] == [] and rep.doc["cursor"]["id"] == cid
            assert not rep.flags & wire.MORE_TO_COME
            assert wire.command(s, {"ping": 1})["ok"] == 1.0
        finally:
            s.close()


def test_a_reader_that_stops_reading_holds_the_stream_back():
    """60 MB written to the oplog behind a stream whose reader reads
    nothing: the source makes only what the socket's buffers take plus one
    batch (up to 16 MB), not the whole 60 MB (and it does not drop the
    connection as a client not reading its replies); then every entry
    arrives, in order."""
    with one_member_set(["--oplogSizeMB", "500"]) as (m, c):
        c.t.c.insert_one({"_id": -1})
        s = wire.connect(m.port, timeout=30)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        try:
            cid = open_tail(s, last_oplog_ts(c))
            rid = start_stream(s, cid)
            out0 = c.admin.command("serverStatus")["network"]["bytesOut"]
            pad = "x" * (100 * 1024)
            n = 600
            for i in range(0, n, 20):
                c.t.c.insert_many([{"_id": j, "pad": pad} for j in range(i, i + 20)])
            time.sleep(1.5)  # the source's chance to run ahead
            sent = c.admin.command("serverStatus")["network"]["bytesOut"] - out0
            assert sent < 36 * 1024 * 1024, sent
            got = []
            end = time.time() + 60
            while len(got) < n and time.time() < end:
                rep = read_reply(s, rid)
                rid = rep.request_id
                assert rep.flags & wire.MORE_TO_COME, rep.doc
                got += [e["o"]["_id"] for e in rep.doc["cursor"]["nextBatch"]
                        if e.get("ns") == "t.c"]
            assert got == list(range(n))
        finally:
            s.close()


def load_and_check(exhaust):
    args = ["--setParameter", "oplogFetcherUsesExhaust=%s" % ("true" if exhaust else "false")]
    with set_members(3, args) as members:
        cfg = {"_id": "rs0", "members": [
            {"_id": i, "host": "127.0.0.1:%d" % m.port} for i, m in enumerate(members)],
            "settings": {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}}
        cfg["members"][1]["priority"] = 0
        cfg["members"][2]["priority"] = 0
        with direct(members[0]) as d:
            d.admin.command("replSetInitiate", cfg)
            assert d.admin.command("getParameter", 1, oplogFetcherUsesExhaust=1)[
                "oplogFetcherUsesExhaust"] is exhaust
        p = primary_of(members)
        assert p is members[0]
        errors = []

        def writer(k):
            try:
                with direct(p) as d:
                    coll = d.t.get_collection("c", write_concern=WriteConcern(w="majority",
                                                                              wtimeout=30000))
                    for i in range(300):
                        coll.insert_one({"_id": "%d-%d" % (k, i)})
                    coll = d.t.get_collection("c", write_concern=WriteConcern(w=1))
                    coll.insert_many([{"_id": "%d-bulk-%d" % (k, i)} for i in range(2000)])
            except Exception as e:  # reported below
                errors.append(e)
        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        with direct(p) as d:
            last = last_oplog_ts(d)
            d.t.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=30000)).insert_one(
                {"_id": "last"})
        for m in members[1:]:
            with direct(m) as d:
                assert d.t.c.count_documents({}) == 4 * 2300 + 1
                assert last_oplog_ts(d) > last
            assert state(m) == 2


def test_secondaries_replicate_under_load_with_exhaust():
    load_and_check(True)


def test_secondaries_replicate_under_load_without_exhaust():
    load_and_check(False)


def test_oplog_fetcher_uses_exhaust_is_a_start_up_parameter():
    with one_member_set() as (m, c):
        assert c.admin.command("getParameter", 1, oplogFetcherUsesExhaust=1)[
            "oplogFetcherUsesExhaust"] is True
        try:
            c.admin.command("setParameter", 1, oplogFetcherUsesExhaust=False)
            raise AssertionError("setParameter at run time succeeded")
        except pymongo.errors.OperationFailure as e:
            assert e.code == 20  # IllegalOperation
