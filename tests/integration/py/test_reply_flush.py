"""
Replies a loop holds until the end of its iteration leave together: with
io_uring, every connection's held bytes go out in one submission
(src/net/net_conn.c, flush_batch).  With a single loop thread, many clients
are answered in the same iteration; each must get its own replies, once,
whole and in order, also when a client stops reading and its socket takes
only part of what was held.
"""

import socket
import threading
import time

import pytest

import wire
from sabled import Sabled

DB = "flush"


@pytest.fixture(scope="module")
def one_loop():
    s = Sabled()
    try:
        s.start(["--serviceExecutorThreads", "1"])
        c = s.client()
        c[DB].small.insert_many([{"_id": i, "v": "s%05d" % i * 20} for i in range(500)])
        c[DB].big.insert_many([{"_id": i, "v": ("b%05d" % i) * 3000} for i in range(200)])
        c.close()
        yield s
    finally:
        s.cleanup()


def network(port):
    with wire.connect(port) as s:
        return wire.command(s, {"serverStatus": 1})["network"]


def batching_unavailable(server):
    with open(server.logpath) as f:
        return "replies are written one at a time" in f.read()


def find(coll, _id, rid):
    return wire.op_msg({"find": coll, "filter": {"_id": _id}, "$db": DB}, request_id=rid)


def check_reply(raw, rid, coll, _id):
    r = wire.Reply(raw)
    assert r.response_to == rid, "reply to %d arrived where %d was expected" % (r.response_to, rid)
    docs = r.doc["cursor"]["firstBatch"]
    prefix = "s" if coll == "small" else "b"
    width = 20 if coll == "small" else 3000
    assert docs == [{"_id": _id, "v": ("%s%05d" % (prefix, _id)) * width}], r.doc


def pipelined_rounds(port, base, rounds, depth, errors, stop=None):
    """Send depth finds at once, read their replies, rounds times (or until
    stop is set)."""
    try:
        with wire.connect(port) as s:
            for r in range(rounds):
                if stop is not None and stop.is_set():
                    break
                want = []
                msgs = []
                for k in range(depth):
                    rid = base + r * depth + k
                    _id = (rid * 7) % 500
                    want.append((rid, _id))
                    msgs.append(find("small", _id, rid))
                s.sendall(b"".join(msgs))
                for rid, _id in want:
                    _, raw = wire.read_message(s)
                    check_reply(raw, rid, "small", _id)
    except Exception as e:  # reported by the test's thread
        errors.append(repr(e))


def test_many_connections_answered_together(one_loop):
    before = network(one_loop.port)
    errors = []
    threads = [threading.Thread(target=pipelined_rounds,
                                args=(one_loop.port, 1_000_000 * (t + 1), 30, 8, errors))
               for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a client never got all its replies"
    assert errors == []
    after = network(one_loop.port)
    if batching_unavailable(one_loop):
        pytest.skip("io_uring is not available here: each reply was written alone")
    # Replies of several connections did leave in one submission.
    assert after["replyBatches"] > before["replyBatches"]
    assert after["repliesBatched"] - before["repliesBatched"] >= \
        2 * (after["replyBatches"] - before["replyBatches"])


def test_driver_clients_answered_together(one_loop):
    """The same through pymongo: eight clients of their own, each reading
    documents by _id, get the right ones while their replies share
    submissions."""
    before = network(one_loop.port)
    errors = []

    def reads(t):
        c = one_loop.client()
        try:
            coll = c[DB].small
            for k in range(300):
                _id = (t * 37 + k * 11) % 500
                doc = coll.find_one({"_id": _id})
                if doc != {"_id": _id, "v": "s%05d" % _id * 20}:
                    errors.append((_id, doc))
        except Exception as e:  # reported by the test's thread
            errors.append(repr(e))
        finally:
            c.close()

    threads = [threading.Thread(target=reads, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a pymongo client never got its replies"
    assert errors == []
    after = network(one_loop.port)
    if batching_unavailable(one_loop):
        pytest.skip("io_uring is not available here: each reply was written alone")
    assert after["repliesBatched"] > before["repliesBatched"]


def test_a_client_that_stops_reading_gets_everything_in_order(one_loop):
    """A client with a small receive buffer pipelines 600 finds of 15 KB
    documents (9 MB), three at a time, and reads nothing for a while, so
    its socket fills while other connections keep the loop flushing
    batches; what the socket did not take must follow later, in order, and
    nothing twice.  The other connections keep going while it reads
    slowly, so its replies keep meeting a nearly full socket inside a
    batch."""
    before = network(one_loop.port)
    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    slow.settimeout(60)
    slow.connect(("127.0.0.1", one_loop.port))
    errors = []
    stop = threading.Event()
    busy = [threading.Thread(target=pipelined_rounds,
                             args=(one_loop.port, 50_000_000 * (t + 1), 1_000_000, 4, errors, stop))
            for t in range(4)]
    try:
        want = []
        msgs = []
        for k in range(600):
            rid = 900_000_000 + k
            want.append((rid, k % 200))
            msgs.append(find("big", k % 200, rid))

        def send_in_threes():
            # Three replies (45 KB) stay under what a connection may hold,
            # so each group waits for the end-of-iteration batch.
            for k in range(0, len(msgs), 3):
                slow.sendall(b"".join(msgs[k:k + 3]))
                time.sleep(0.001)

        sender = threading.Thread(target=send_in_threes)
        for t in busy:
            t.start()
        sender.start()
        time.sleep(1.0)
        for k, (rid, _id) in enumerate(want):
            _, raw = wire.read_message(slow)
            check_reply(raw, rid, "big", _id)
            if k % 20 == 0:
                time.sleep(0.002)
        sender.join(60)
        stop.set()
        for t in busy:
            t.join(120)
        # Nothing more: a reply sent twice would still be waiting here.
        with wire.connect(one_loop.port):
            pass
        slow.settimeout(0.5)
        with pytest.raises(socket.timeout):
            slow.recv(1)
    finally:
        stop.set()
        slow.close()
    assert errors == []
    after = network(one_loop.port)
    assert after["bytesOut"] - before["bytesOut"] >= 600 * 15000
