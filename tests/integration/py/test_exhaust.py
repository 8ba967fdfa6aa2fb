"""
Exhaust cursors (issue 29): OP_MSG getMore with exhaustAllowed streams the
remaining batches with moreToCome, each reply answering the one before; an
OP_QUERY find with the Exhaust flag (how pymongo 3's CursorType.EXHAUST
asks) is run as a find and streamed as OP_REPLYs; errors arrive as errors.
"""

import struct

import pytest
from bson.son import SON
from pymongo import CursorType
from pymongo.errors import OperationFailure

import wire

EXHAUST_ALLOWED = 1 << 16


@pytest.fixture
def coll(db):
    db.c.insert_many([{"_id": i, "a": i % 10} for i in range(1000)])
    return db.c


def test_pymongo_exhaust_cursor_returns_every_document_once(coll):
    docs = list(coll.find(cursor_type=CursorType.EXHAUST, batch_size=7))
    assert sorted(d["_id"] for d in docs) == list(range(1000))
    docs = list(coll.find({"a": 3}, {"a": 0}, cursor_type=CursorType.EXHAUST,
                          batch_size=4).sort("_id", -1))
    assert [d["_id"] for d in docs] == list(range(993, -1, -10))
    assert all("a" not in d for d in docs)
    assert len(list(coll.find(cursor_type=CursorType.EXHAUST))) == 1000


def test_pymongo_exhaust_error_is_an_error(coll):
    with pytest.raises(OperationFailure) as e:
        list(coll.find({"$bad": 1}, cursor_type=CursorType.EXHAUST))
    assert e.value.code == 2


def test_op_msg_get_more_exhaust_streams_with_more_to_come(server, coll):
    s = wire.connect(server.port)
    try:
        r = wire.command(s, SON([("find", "c"), ("batchSize", 7)]), db=coll.database.name)
        cid = r["cursor"]["id"]
        got = [d["_id"] for d in r["cursor"]["firstBatch"]]
        msg = wire.op_msg(SON([("getMore", cid), ("collection", "c"), ("batchSize", 9),
                               ("$db", coll.database.name)]), flags=EXHAUST_ALLOWED)
        request_id = struct.unpack("<i", msg[4:8])[0]
        s.sendall(msg)
        replies = 0
        while True:
            _, raw = wire.read_message(s)
            rep = wire.Reply(raw)
            assert rep.response_to == request_id  # each answers the one before
            request_id = rep.request_id
            replies += 1
            got += [d["_id"] for d in rep.doc["cursor"]["nextBatch"]]
            if not rep.flags & wire.MORE_TO_COME:
                break
        assert rep.doc["cursor"]["id"] == 0
        assert sorted(got) == list(range(1000))
        assert replies == 111  # ceil(993 / 9)
        # The connection is usable again once the stream ended.
        assert wire.command(s, {"ping": 1})["ok"] == 1.0
    finally:
        s.close()


def test_get_more_without_exhaust_allowed_is_one_reply(server, coll):
    s = wire.connect(server.port)
    try:
        r = wire.command(s, SON([("find", "c"), ("batchSize", 7)]), db=coll.database.name)
        r2 = wire.roundtrip(s, wire.op_msg(SON([
            ("getMore", r["cursor"]["id"]), ("collection", "c"), ("batchSize", 9),
            ("$db", coll.database.name)])))
        assert not r2.flags & wire.MORE_TO_COME
        assert len(r2.doc["cursor"]["nextBatch"]) == 9
    finally:
        s.close()


def test_legacy_find_without_exhaust_is_one_op_reply(server, coll):
    s = wire.connect(server.port)
    try:
        ns = coll.database.name + ".c"
        rep = wire.roundtrip(s, wire.op_query(ns, {"$query": {"a": 1}, "$orderby": {"_id": 1}},
                                              number_to_return=5))
        assert rep.opcode == wire.OP_REPLY
        assert [d["_id"] for d in rep.docs] == [1, 11, 21, 31, 41]
        assert rep.cursor_id != 0 and rep.number_returned == 5
        rep = wire.roundtrip(s, wire.op_query(ns, {"_id": {"$lt": 3}}, number_to_return=-10))
        assert [d["_id"] for d in rep.docs] == [0, 1, 2] and rep.cursor_id == 0
        rep = wire.roundtrip(s, wire.op_query(ns, {"$where": {"$bad": 1}}))
        assert rep.response_flags & 2  # QueryFailure
        assert "$err" in rep.doc and rep.doc["code"] != 0
    finally:
        s.close()
