"""
What clients of a replica set see (issue 24, rs-clients): the awaitable
hello answered as soon as the member's topology changes, hello's set
fields, read concern levels.

One set of three members (the third hidden, priority 0) serves the whole
module: electionTimeoutMillis 2000, heartbeats every 500 ms.  Tests that
step the primary down wait for a primary again before they return.
"""
import threading
import time

import pymongo
import pytest
from pymongo.errors import AutoReconnect, ConnectionFailure, NotMasterError, \
    OperationFailure, ServerSelectionTimeoutError

from sabled import Sabled

RETRYABLE = (AutoReconnect, ConnectionFailure, NotMasterError, ServerSelectionTimeoutError)


def direct(m, **kw):
    return pymongo.MongoClient("127.0.0.1", m.port, directConnection=True,
                               serverSelectionTimeoutMS=3000,
                               readPreference="secondaryPreferred", **kw)


def wait_for(pred, timeout=30, step=0.2):
    end = time.time() + timeout
    while time.time() < end:
        try:
            v = pred()
            if v:
                return v
        except RETRYABLE + (OperationFailure,):
            pass
        time.sleep(step)
    raise AssertionError("timed out waiting")


def hello(m):
    with direct(m) as c:
        return c.admin.command("hello")


def primary_of(members):
    for m in members:
        try:
            if hello(m).get("isWritablePrimary"):
                return m
        except RETRYABLE:
            pass
    return None


def settled(members):
    """A primary that every member names."""
    p = primary_of(members)
    if p is None:
        return None
    want = "127.0.0.1:%d" % p.port
    return p if all(hello(m).get("primary") == want for m in members) else None


@pytest.fixture(scope="module")
def rs():
    members = []
    try:
        for _ in range(3):
            s = Sabled()
            s.start(["--replSet", "rs0", "--oplogSizeMB", "16"])
            members.append(s)
        cfg = {"_id": "rs0", "members": [
            {"_id": i, "host": "127.0.0.1:%d" % m.port} for i, m in enumerate(members)],
            "settings": {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}}
        cfg["members"][2].update({"priority": 0, "hidden": True})
        with direct(members[0]) as c:
            c.admin.command("replSetInitiate", cfg)
        wait_for(lambda: settled(members), timeout=40)
        yield members
    finally:
        for m in members:
            m.cleanup()


def test_hello_fields(rs):
    p = wait_for(lambda: settled(rs))
    hosts = ["127.0.0.1:%d" % m.port for m in rs]
    for m in rs:
        h = hello(m)
        assert h["setName"] == "rs0"
        assert h["setVersion"] >= 1
        # the hidden member is in no list; the two electable ones are hosts
        assert sorted(h["hosts"]) == sorted(hosts[:2])
        assert "passives" not in h and h.get("arbiters", []) == []
        assert h["me"] == "127.0.0.1:%d" % m.port
        assert h["primary"] == "127.0.0.1:%d" % p.port
        assert h["topologyVersion"]["counter"] >= 0
        lw = h["lastWrite"]
        assert set(lw) >= {"opTime", "lastWriteDate", "majorityOpTime", "majorityWriteDate"}
        if m is p:
            assert h["isWritablePrimary"] and not h["secondary"] and "electionId" in h
        else:
            assert h["secondary"] and not h["isWritablePrimary"]
    assert hello(rs[2]).get("hidden") is True
    assert "hidden" not in hello(rs[0]) and "hidden" not in hello(rs[1])


def awaitable_hello(m, out, await_ms=20000):
    """Send an awaitable hello with m's current topologyVersion; put the
    reply and how long it took into out."""
    with direct(m, socketTimeoutMS=await_ms + 10000) as c:
        tv = c.admin.command("hello")["topologyVersion"]
        t0 = time.time()
        out["ready"].set()
        r = c.admin.command("hello", topologyVersion=tv, maxAwaitTimeMS=await_ms)
        out["secs"] = time.time() - t0
        out["reply"] = r
        out["sent"] = tv


def test_awaitable_hello_answers_at_state_change(rs):
    """A driver's monitor waiting in hello on the primary and on the hidden
    member hears of the step-down and of the new primary at once, not after
    maxAwaitTimeMS (20 s here)."""
    p = wait_for(lambda: settled(rs))
    waits = {}
    threads = []
    for m in (p, rs[2]):
        out = {"ready": threading.Event()}
        waits[m.port] = out
        t = threading.Thread(target=awaitable_hello, args=(m, out), daemon=True)
        t.start()
        threads.append(t)
        assert out["ready"].wait(10)
    time.sleep(0.5)  # both hellos are waiting on the servers now
    for out in waits.values():
        assert "reply" not in out, "an awaitable hello was answered before any change"
    with direct(p) as c:
        try:
            c.admin.command("replSetStepDown", 10, secondaryCatchUpPeriodSecs=5)
        except RETRYABLE:
            pass
    for t in threads:
        t.join(15)
    for port, out in waits.items():
        assert "reply" in out, "member %d: no answer" % port
        assert out["secs"] < 8, "member %d answered after %.1f s" % (port, out["secs"])
        assert out["reply"]["topologyVersion"]["counter"] != out["sent"]["counter"]
    # the old primary's answer says it is no longer writable
    assert waits[p.port]["reply"]["isWritablePrimary"] is False
    wait_for(lambda: settled(rs), timeout=30)


def test_awaitable_hello_waits_without_change(rs):
    wait_for(lambda: settled(rs))
    out = {"ready": threading.Event()}
    awaitable_hello(rs[2], out, await_ms=700)
    assert 0.5 <= out["secs"] < 5
    assert out["reply"]["topologyVersion"] == out["sent"]
