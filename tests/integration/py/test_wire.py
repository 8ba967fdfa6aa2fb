"""
Wire protocol features drivers negotiate: compression (OP_COMPRESSED with
zlib, snappy, zstd; pymongo's compressors option) and OP_MSG checksums,
document sequences and moreToCome.
"""

import importlib
import shutil
import time

import pytest

import wire


def test_hello_negotiates_compression(server):
    with wire.connect(server.port) as s:
        r = wire.command(s, {"hello": 1, "compression": ["zstd", "zlib", "snappy"]})
        # The server answers with the client's compressors it supports, in
        # the client's order; Sable supports all three.
        assert r["compression"] == ["zstd", "zlib", "snappy"]
        r = wire.command(s, {"hello": 1, "compression": ["lz4", "zlib"]})
        assert r["compression"] == ["zlib"]


@pytest.mark.parametrize("compressor", ["zlib", "snappy", "zstd", "noop"])
def test_raw_op_compressed(server, compressor):
    if compressor == "zstd" and not shutil.which("zstd"):
        pytest.skip("zstd command-line tool not installed (needed to decode replies)")
    with wire.connect(server.port) as s:
        wire.command(s, {"hello": 1, "compression": [compressor]})
        msg = wire.op_compressed(
            wire.op_msg({"insert": "t", "documents": [{"_id": 1, "pad": "z" * 5000}],
                         "$db": "rawcomp_" + compressor}), compressor)
        s.sendall(msg)
        _, raw = wire.read_message(s)
        reply = wire.Reply(raw)
        assert reply.doc["ok"] == 1 and reply.doc["n"] == 1, reply.doc
        if compressor != "noop":
            # MongoDB answers a compressed request with a reply compressed the same way.
            assert reply.compressor == compressor
        msg = wire.op_compressed(wire.op_msg({"find": "t", "filter": {},
                                              "$db": "rawcomp_" + compressor}), compressor)
        reply = wire.roundtrip(s, msg)
        docs = reply.doc["cursor"]["firstBatch"]
        assert docs == [{"_id": 1, "pad": "z" * 5000}]
        assert wire.command(s, {"dropDatabase": 1}, "rawcomp_" + compressor)["ok"] == 1


def test_op_compressed_wrapping_op_query_hello(server):
    with wire.connect(server.port) as s:
        q = wire.op_compressed(wire.op_query("admin.$cmd", {"isMaster": 1}), "zlib")
        reply = wire.roundtrip(s, q)
        assert reply.opcode == wire.OP_REPLY
        assert reply.doc["ismaster"] is True


def _client_compression_roundtrip(server, compressor):
    c = server.client(compressors=compressor)
    try:
        coll = c["pycomp_" + compressor].t
        docs = [{"_id": i, "text": "compressible " * 50} for i in range(200)]
        coll.insert_many(docs)
        assert list(coll.find({}, batch_size=50).sort("_id", 1)) == docs
        coll.update_many({}, {"$set": {"u": 1}})
        assert coll.count_documents({"u": 1}) == 200
        c.drop_database("pycomp_" + compressor)
    finally:
        c.close()


def test_pymongo_zlib(server):
    _client_compression_roundtrip(server, "zlib")


def test_pymongo_snappy(server):
    try:
        importlib.import_module("snappy")
    except ImportError:
        pytest.skip("python3-snappy is not installed: pymongo cannot use snappy")
    _client_compression_roundtrip(server, "snappy")


def test_pymongo_zstd(server):
    try:
        importlib.import_module("zstandard")
    except ImportError:
        pytest.skip("python3-zstandard is not installed: pymongo cannot use zstd")
    _client_compression_roundtrip(server, "zstd")


def test_op_msg_with_checksum(server):
    with wire.connect(server.port) as s:
        msg = wire.op_msg({"ping": 1, "$db": "admin"}, checksum=True)
        reply = wire.roundtrip(s, msg)
        assert reply.doc["ok"] == 1
        if reply.flags & wire.CHECKSUM_PRESENT:
            assert reply.checksum_ok(), "reply checksum does not match its bytes"
        msg = wire.op_msg({"insert": "t", "$db": "cksum"}, checksum=True,
                          sequences=[("documents", [{"_id": 1}, {"_id": 2}])])
        reply = wire.roundtrip(s, msg)
        assert reply.doc["ok"] == 1 and reply.doc["n"] == 2
        assert wire.command(s, {"dropDatabase": 1}, "cksum")["ok"] == 1


def test_op_msg_document_sequences(server):
    with wire.connect(server.port) as s:
        msg = wire.op_msg({"insert": "t", "$db": "seqdb", "ordered": True},
                          sequences=[("documents", [{"_id": i} for i in range(10)])])
        r = wire.roundtrip(s, msg).doc
        assert r["ok"] == 1 and r["n"] == 10
        msg = wire.op_msg({"update": "t", "$db": "seqdb"},
                          sequences=[("updates", [{"q": {"_id": 1}, "u": {"$set": {"a": 1}}},
                                                  {"q": {"_id": 2}, "u": {"$set": {"a": 2}}}])])
        r = wire.roundtrip(s, msg).doc
        assert r["ok"] == 1 and r["n"] == 2 and r["nModified"] == 2
        msg = wire.op_msg({"delete": "t", "$db": "seqdb"},
                          sequences=[("deletes", [{"q": {"_id": {"$gte": 5}}, "limit": 0}])])
        r = wire.roundtrip(s, msg).doc
        assert r["ok"] == 1 and r["n"] == 5
        r = wire.command(s, {"count": "t"}, "seqdb")
        assert r["n"] == 5
        wire.command(s, {"dropDatabase": 1}, "seqdb")


def test_op_msg_more_to_come_gets_no_reply_but_is_applied(server):
    with wire.connect(server.port) as s:
        s.sendall(wire.op_msg({"insert": "t", "documents": [{"_id": 7}], "$db": "mtc",
                               "writeConcern": {"w": 0}}, flags=wire.MORE_TO_COME))
        # The next reply on this connection belongs to the next request.
        r = wire.roundtrip(s, wire.op_msg({"find": "t", "filter": {}, "$db": "mtc"},
                                          request_id=999))
        assert r.response_to == 999
        deadline = time.monotonic() + 5
        docs = r.doc["cursor"]["firstBatch"]
        while docs != [{"_id": 7}] and time.monotonic() < deadline:
            time.sleep(0.05)
            docs = wire.command(s, {"find": "t", "filter": {}}, "mtc")["cursor"]["firstBatch"]
        assert docs == [{"_id": 7}]
        wire.command(s, {"dropDatabase": 1}, "mtc")


def test_reply_response_to_matches_request_id(server):
    with wire.connect(server.port) as s:
        r = wire.roundtrip(s, wire.op_msg({"ping": 1, "$db": "admin"}, request_id=123456))
        assert r.response_to == 123456
        assert r.opcode == wire.OP_MSG


EXHAUST_ALLOWED = 1 << 16


def test_awaitable_hello_waits_max_await_time(server):
    """Drivers' streaming monitor: hello with the current topologyVersion and
    maxAwaitTimeMS is answered when the topology changes or the wait ends."""
    with wire.connect(server.port) as s:
        tv = wire.command(s, {"hello": 1})["topologyVersion"]
        t0 = time.monotonic()
        r = wire.command(s, {"hello": 1, "topologyVersion": tv, "maxAwaitTimeMS": 500})
        waited = time.monotonic() - t0
        assert r["ok"] == 1 and r["isWritablePrimary"] is True
        assert 0.4 <= waited < 5, "answered after %.3fs" % waited


def test_exhaust_hello_streams_replies_with_more_to_come(server):
    """hello with exhaustAllowed: each reply carries moreToCome, and the
    server keeps sending one per maxAwaitTimeMS without further requests
    (what the Node driver and mongosh rely on for monitoring)."""
    with wire.connect(server.port) as s:
        tv = wire.command(s, {"hello": 1})["topologyVersion"]
        s.sendall(wire.op_msg({"hello": 1, "topologyVersion": tv, "maxAwaitTimeMS": 300,
                               "$db": "admin"}, flags=EXHAUST_ALLOWED, request_id=77))
        s.settimeout(5)
        first = wire.Reply(wire.read_message(s)[1])
        assert first.doc["ok"] == 1
        assert first.response_to == 77
        assert first.flags & wire.MORE_TO_COME, "exhaust reply without moreToCome"
        second = wire.Reply(wire.read_message(s)[1])  # no request sent in between
        assert second.doc["ok"] == 1
        assert second.response_to == first.request_id
        assert second.flags & wire.MORE_TO_COME


def test_client_resetting_with_replies_pending_does_not_abort_the_server(server):
    # Pipelined requests, then a reset (SO_LINGER 0): the server reads the
    # requests and the reset together, and closing the connection first
    # writes the replies it holds; that write fails and closed the
    # connection a second time, and libuv aborted the process
    # (uv_close: !uv__is_closing(handle)).  Any client could do it.
    import socket
    import struct
    msgs = b"".join(wire.op_msg({"ping": 1, "$db": "admin"}) for _ in range(20))
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(msgs)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    with wire.connect(server.port) as s:
        assert wire.command(s, {"ping": 1})["ok"] == 1
