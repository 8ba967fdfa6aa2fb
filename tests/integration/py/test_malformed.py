"""
Malformed input over a raw socket.  Each bad message gets an error reply or
a closed connection (never a hang or a crash), and the server keeps serving
other clients: a pymongo ping after every case.
"""

import socket
import struct

import bson
import pytest

import wire


@pytest.fixture
def check_alive(server, client):
    def check():
        assert server.is_running(), "sabled died:\n" + server.output()[-3000:]
        assert client.admin.command("ping")["ok"] == 1
        with wire.connect(server.port) as s:
            assert wire.command(s, {"ping": 1})["ok"] == 1
    yield check
    check()


def send_bad(server, data, shut_wr=False):
    s = wire.connect(server.port)
    try:
        try:
            s.sendall(data)
            if shut_wr:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            return "closed"
        return wire.expect_error_or_close(s)
    finally:
        s.close()


def test_truncated_header(server, check_alive):
    s = wire.connect(server.port)
    s.sendall(struct.pack("<ii", 100, 1))  # 8 of the 16 header bytes
    s.close()
    check_alive()
    # half-close after a partial header: the server sees EOF and closes
    assert send_bad(server, struct.pack("<ii", 100, 1), shut_wr=True) == "closed"


def test_truncated_body(server, check_alive):
    msg = wire.op_msg({"ping": 1, "$db": "admin"})
    assert send_bad(server, msg[:-5], shut_wr=True) == "closed"
    check_alive()


def test_truncated_then_silence_does_not_block_others(server, check_alive):
    msg = wire.op_msg({"ping": 1, "$db": "admin"})
    s = wire.connect(server.port)
    try:
        s.sendall(msg[:-5])
        check_alive()  # another client is served while this one dangles
    finally:
        s.close()


@pytest.mark.parametrize("length", [wire.MAX_MESSAGE_SIZE + 1, 0x7FFFFFFF],
                         ids=["48000001", "2^31-1"])
def test_length_too_large(server, check_alive, length):
    hdr = struct.pack("<iiii", length, 1, 0, wire.OP_MSG) + b"\x00" * 64
    s = wire.connect(server.port)
    try:
        s.sendall(hdr)
        # Must not wait for 48 MB to arrive.
        assert wire.expect_error_or_close(s, timeout=5) is not None
    finally:
        s.close()
    check_alive()


@pytest.mark.parametrize("length", [0, 8, 15, -1, -100000])
def test_length_too_small(server, check_alive, length):
    hdr = struct.pack("<iiii", length, 1, 0, wire.OP_MSG) + b"\x00" * 32
    s = wire.connect(server.port)
    try:
        s.sendall(hdr)
        assert wire.expect_error_or_close(s, timeout=5) is not None
    finally:
        s.close()
    check_alive()


@pytest.mark.parametrize("opcode", [0, 1, 2001, 2002, 2005, 2006, 2007, 9999, -1])
def test_bad_or_removed_opcode(server, check_alive, opcode):
    body = struct.pack("<I", 0) + b"\x00" + bson.encode({"ping": 1, "$db": "admin"})
    msg = struct.pack("<iiii", 16 + len(body), 7, 0, opcode) + body
    send_bad(server, msg)
    check_alive()


def test_invalid_bson_length_in_op_msg(server, check_alive):
    good = bson.encode({"ping": 1, "$db": "admin"})
    bad = struct.pack("<i", len(good) + 50) + good[4:]  # claims more than is there
    r = send_bad(server, wire.op_msg(None, raw_body=bad))
    if r != "closed":
        assert r["ok"] == 0
    check_alive()


def test_invalid_bson_element_type(server, check_alive):
    # {"ping": <type 0x7A>} -- an element type that does not exist
    elem = b"\x7aping\x00\x01\x00\x00\x00"
    doc = struct.pack("<i", 4 + len(elem) + 1) + elem + b"\x00"
    r = send_bad(server, wire.op_msg(None, raw_body=doc))
    if r != "closed":
        assert r["ok"] == 0
    check_alive()


def test_invalid_bson_unterminated_string(server, check_alive):
    # string element whose length runs past the document
    elem = b"\x02$db\x00" + struct.pack("<i", 1000) + b"admin\x00"
    doc = struct.pack("<i", 4 + len(elem) + 1) + elem + b"\x00"
    r = send_bad(server, wire.op_msg(None, raw_body=doc))
    if r != "closed":
        assert r["ok"] == 0
    check_alive()


def test_invalid_bson_missing_terminator(server, check_alive):
    good = bson.encode({"ping": 1, "$db": "admin"})
    bad = good[:-1] + b"\x01"
    r = send_bad(server, wire.op_msg(None, raw_body=bad))
    if r != "closed":
        assert r["ok"] == 0
    check_alive()


def test_bad_section_kind(server, check_alive):
    msg = bytearray(wire.op_msg({"ping": 1, "$db": "admin"}))
    msg[20] = 7  # section kind 7 does not exist
    r = send_bad(server, bytes(msg))
    if r != "closed":
        assert r["ok"] == 0
    check_alive()


def test_bad_sequence_size(server, check_alive):
    msg = bytearray(wire.op_msg({"insert": "t", "$db": "maldb"},
                                sequences=[("documents", [{"_id": 1}])]))
    body_len = len(bson.encode({"insert": "t", "$db": "maldb"}))
    seq_at = 16 + 4 + 1 + body_len + 1
    msg[seq_at:seq_at + 4] = struct.pack("<i", 100000)
    r = send_bad(server, bytes(msg))
    if r != "closed":
        assert r["ok"] == 0
    check_alive()


def test_unknown_required_flag_bit(server, check_alive):
    msg = wire.op_msg({"ping": 1, "$db": "admin"}, flags=1 << 5)
    r = send_bad(server, msg)
    if r != "closed":
        assert r["ok"] == 0
    check_alive()


def test_bad_checksum(server, check_alive):
    msg = bytearray(wire.op_msg({"ping": 1, "$db": "admin"}, checksum=True))
    msg[-1] ^= 0xFF
    r = send_bad(server, bytes(msg))
    if r != "closed":
        assert r["ok"] == 0
    check_alive()


def test_checksum_flag_without_room(server, check_alive):
    body = bson.encode({"ping": 1, "$db": "admin"})
    payload = struct.pack("<I", wire.CHECKSUM_PRESENT) + b"\x00" + body
    msg = struct.pack("<iiii", 16 + len(payload), 1, 0, wire.OP_MSG) + payload
    send_bad(server, msg)
    check_alive()


def test_bad_compressed_payloads(server, check_alive):
    inner = wire.op_msg({"ping": 1, "$db": "admin"})
    good = wire.op_compressed(inner, "zlib")
    # garbage instead of zlib data
    bad = good[:25] + b"\xde\xad\xbe\xef" * 8
    bad = struct.pack("<i", len(bad)) + bad[4:]
    send_bad(server, bad)
    check_alive()
    # uncompressedSize lies (claims 1 GB)
    bad = bytearray(good)
    bad[20:24] = struct.pack("<i", 1 << 30)
    send_bad(server, bytes(bad))
    check_alive()
    # unknown compressor id
    bad = bytearray(good)
    bad[24] = 99
    send_bad(server, bytes(bad))
    check_alive()
    # OP_COMPRESSED inside OP_COMPRESSED
    send_bad(server, wire.op_compressed(good, "noop"))
    check_alive()


def test_op_query_truncated_and_non_command(server, check_alive):
    q = wire.op_query("admin.$cmd", {"isMaster": 1})
    send_bad(server, q[:-3] + b"", shut_wr=True)
    check_alive()
    # collection name without terminator: runs to the end of the message
    payload = struct.pack("<i", 0) + b"admin.$cmd"
    send_bad(server, struct.pack("<iiii", 16 + len(payload), 1, 0, wire.OP_QUERY) + payload)
    check_alive()


def _nested(depth):
    doc = {"leaf": 1}
    for _ in range(depth):
        doc = {"a": doc}
    return doc


def _nested_raw(depth):
    # Built by hand: pymongo's encoder would itself refuse deep recursion.
    # Level k (0 = outermost) is <int32 len> 03 'a' 00 <level k+1> 00, and
    # each level is 8 bytes longer than the one inside it.
    leaf = struct.pack("<i", 5) + b"\x00"
    heads = [struct.pack("<i", 5 + 8 * (depth - k)) + b"\x03a\x00" for k in range(depth)]
    return b"".join(heads) + leaf + b"\x00" * depth


@pytest.mark.parametrize("depth", [200, 1000, 100000])
@pytest.mark.parametrize("where", ["document", "filter"])
def test_deeply_nested_document_rejected(fresh_server, depth, where):
    # A server of its own: a crash here must not take the other tests down.
    server = fresh_server
    server.start()
    nested = _nested_raw(depth)
    if where == "document":
        body = bson.encode({"insert": "deep", "$db": "maldb"})
        msg = wire.op_msg(None, raw_body=body, sequences=[("documents", [nested])])
    else:
        # {find: "deep", filter: <nested>, $db: "maldb"} built by hand
        elems = (b"\x02find\x00" + struct.pack("<i", 5) + b"deep\x00"
                 + b"\x03filter\x00" + nested
                 + b"\x02$db\x00" + struct.pack("<i", 6) + b"maldb\x00")
        msg = wire.op_msg(None, raw_body=struct.pack("<i", 4 + len(elems) + 1) + elems + b"\x00")
    r = send_bad(server, msg)
    if r != "closed":
        assert r["ok"] == 0 or r.get("writeErrors"), r
    assert server.is_running(), "sabled died:\n" + server.output()[-3000:]
    with wire.connect(server.port) as s:
        assert wire.command(s, {"ping": 1})["ok"] == 1
        # Nothing of it was stored.
        assert wire.command(s, {"count": "deep"}, "maldb")["n"] == 0


def test_moderately_nested_document_accepted(client):
    client.maldb.nest.insert_one(_nested(90))
    got = client.maldb.nest.find_one({}, {"_id": 0})
    assert got == _nested(90)
    client.drop_database("maldb")


def test_random_garbage(server, check_alive):
    import random
    rnd = random.Random(1234)
    for _ in range(20):
        n = rnd.randint(16, 400)
        data = bytearray(rnd.getrandbits(8) for _ in range(n))
        data[0:4] = struct.pack("<i", n)
        data[12:16] = struct.pack("<i", rnd.choice([wire.OP_MSG, wire.OP_QUERY, wire.OP_COMPRESSED]))
        send_bad(server, bytes(data))
    check_alive()
