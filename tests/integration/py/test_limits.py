"""
Limits a hostile or broken client runs into, over raw sockets.

A client that pipelines requests with large replies and never reads them
cannot pin unbounded memory: sabled stops dispatching while a connection's
unsent output is large and stops reading while its unread input is large
(src/net/net_conn.c), so the client's sends block after a bounded number of
bytes, the server's resident memory stays bounded, and other clients keep
being served.  $rename to a field name that is not UTF-8 (or holds a NUL) is
refused: such a name could be stored but never read back.
"""

import os
import select
import socket
import time

import bson
import pytest
from bson.son import SON

import wire

# Under AddressSanitizer (scripts/sanitize.sh) freed memory sits in ASan's
# quarantine and RSS says little: only the byte counts are checked there.
ASAN = "ASAN_OPTIONS" in os.environ


def _rss_mb(server):
    with open("/proc/%d/status" % server.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return -1


def _raw_command(body):
    return wire.op_msg(None, raw_body=body)


@pytest.fixture
def coll(db):
    c = db.c
    c.insert_one({"_id": 1, "a": 5})
    return c


@pytest.mark.parametrize("bad", [b"\xff\xfe\xfd\xfc", b"x\x00yz", b"\xc3\x28ab"],
                         ids=["invalid-bytes", "embedded-nul", "bad-continuation"])
def test_rename_to_non_utf8_field_is_refused(server, db, coll, bad):
    # Encode with a placeholder of the same length, then swap the bytes in:
    # pymongo refuses to encode such strings itself.
    cmd = SON([("update", "c"), ("updates", [{"q": {"_id": 1}, "u": {"$rename": {"a": "QQQQ"}}}]),
               ("$db", db.name)])
    body = bson.encode(cmd).replace(b"QQQQ\x00", bad + b"\x00")
    with wire.connect(server.port) as s:
        reply = wire.roundtrip(s, _raw_command(body)).doc
    if reply.get("ok") == 1:
        errs = reply.get("writeErrors", [])
        assert len(errs) == 1 and errs[0]["code"] == 2, reply
        assert "UTF-8" in errs[0]["errmsg"], reply
        assert reply["nModified"] == 0
    else:
        assert reply.get("code") in (2, 22), reply  # BadValue, or InvalidBSON on input
    assert coll.find_one({"_id": 1}) == {"_id": 1, "a": 5}
    assert db.command("validate", "c")["valid"]


def test_client_that_never_reads_cannot_pin_memory(server, client, db):
    conns_before = client.admin.command("serverStatus")["connections"]["current"]
    big = "x" * (1 << 20)
    db.big.insert_many([{"_id": i, "pad": big} for i in range(16)])
    rss_before = _rss_mb(server)
    # Each find returns about 16 MB; each request carries a 1 MB comment so
    # that the server's input cap is reached in a few dozen messages.
    find = SON([("find", "big"), ("batchSize", 16), ("comment", "c" * (1 << 20)),
                ("$db", db.name)])
    msg = wire.op_msg(find)
    s = wire.connect(server.port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    s.setblocking(False)
    sent, limit = 0, 600 << 20
    pending = memoryview(b"")
    try:
        while sent < limit:
            if not pending:
                pending = memoryview(msg)
            # Blocked for 5 s: the server stopped reading (the check below
            # only needs "it stopped"; a slow server just stops earlier).
            # Under ASan the server drains 16 MB replies slowly and the
            # client kept finding room for two minutes: 1 s is enough there.
            _, w, _ = select.select([], [s], [], 1 if ASAN else 5)
            if not w:
                break
            try:
                n = s.send(pending)
            except BlockingIOError:
                continue
            sent += n
            pending = pending[n:]
        # READ_PAUSE (64 MB) + one message + kernel socket buffers.
        assert sent < 200 << 20, "the server kept reading: %d MB sent" % (sent >> 20)
        # The server holds at most about 16 MB unsent output and 64 MB
        # unread input for this connection (plus replies being built).
        grown = _rss_mb(server) - rss_before
        print("never-reading client: %d MB sent before the server stopped reading; "
              "server RSS +%d MB" % (sent >> 20, grown))
        assert ASAN or grown < 400, "RSS grew by %d MB for one connection" % grown
        # Other clients are served meanwhile.
        assert client.admin.command("ping")["ok"] == 1
        assert db.big.count_documents({}) == 16
        assert db.big.find_one({"_id": 3}, {"pad": 0}) == {"_id": 3}
    finally:
        s.close()
    # ... and after it went away; the server lets the connection go (its
    # buffered requests are dropped, not run) before the next test starts.
    assert client.admin.command("ping")["ok"] == 1
    assert server.is_running()
    deadline = time.monotonic() + 60
    while client.admin.command("serverStatus")["connections"]["current"] > conns_before:
        assert time.monotonic() < deadline, "the never-reading connection was not closed"
        time.sleep(0.1)


def test_declared_message_larger_than_the_maximum_closes(server, client):
    with wire.connect(server.port) as s:
        s.sendall(wire.header(wire.MAX_MESSAGE_SIZE + 1, 1, 0, wire.OP_MSG))
        # Under ASan with the fuzzers beside it, 10 s was not always enough.
        assert wire.expect_error_or_close(s, timeout=60 if ASAN else 10) == "closed"
    assert client.admin.command("ping")["ok"] == 1


def test_slow_sender_of_a_large_message_is_bounded(server, client):
    """A client declares a 40 MB message and sends it a little at a time:
    the server buffers no more than the message and serves others."""
    rss_before = _rss_mb(server)
    socks = []
    try:
        for _ in range(4):
            s = wire.connect(server.port)
            s.sendall(wire.header(40 << 20, 1, 0, wire.OP_MSG) + os.urandom(64 << 10))
            socks.append(s)
        assert client.admin.command("ping")["ok"] == 1
        grown = _rss_mb(server) - rss_before
        assert ASAN or grown < 4 * 48 + 64, "RSS grew by %d MB for 4 partial messages" % grown
    finally:
        for s in socks:
            s.close()
    assert client.admin.command("ping")["ok"] == 1
