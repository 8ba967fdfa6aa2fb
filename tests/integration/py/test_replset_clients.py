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

import bson.timestamp
import pymongo
import pytest
from pymongo.errors import AutoReconnect, ConnectionFailure, NotMasterError, \
    OperationFailure, ServerSelectionTimeoutError

from sabled import Sabled, free_port

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
    """A primary that every member names, the others secondaries (a member
    that knows the primary may still be in STARTUP2, or in ROLLBACK after a
    first election that two members both ran: not settled)."""
    p = primary_of(members)
    if p is None:
        return None
    want = "127.0.0.1:%d" % p.port
    for m in members:
        h = hello(m)
        if h.get("primary") != want or (m is not p and not h.get("secondary")):
            return None
    return p


@pytest.fixture(scope="module")
def rs():
    members = []
    try:
        for _ in range(3):
            s = Sabled()
            s.metrics_port = free_port()
            s.start(["--replSet", "rs0", "--oplogSizeMB", "16", "--metricsPort",
                     str(s.metrics_port)])
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
            assert h["secondary"] and not h["isWritablePrimary"], h
    assert hello(rs[2]).get("hidden") is True
    assert "hidden" not in hello(rs[0]) and "hidden" not in hello(rs[1])


def test_out_and_merge_on_a_secondary_write_through_the_primary(rs):
    """mongod 5.0+ runs an aggregation ending in $out or $merge on a secondary when the
    read preference allows it, its writes going to the primary; a Sable secondary hands
    it to the primary (the hidden member too)."""
    p = wait_for(lambda: settled(rs))
    with pymongo.MongoClient("127.0.0.1", p.port, directConnection=True) as pc:
        db = pc.get_database("aggsec", write_concern=pymongo.WriteConcern(w=3))
        db.src.drop()
        db.src.insert_many([{"_id": i, "x": i % 3} for i in range(10)])
        db.out.drop()
        for sec in (m for m in rs if m is not p):
            with direct(sec) as sc:
                sdb = sc.aggsec
                assert sc.admin.command("hello")["secondary"]
                assert list(sdb.src.aggregate([{"$match": {"x": 1}}, {"$out": "out"}])) == []
                assert sorted(d["_id"] for d in db.out.find()) == [1, 4, 7]
                list(sdb.src.aggregate([{"$match": {"x": 2}}, {"$project": {"_id": 1}},
                                        {"$merge": {"into": {"db": "aggsec2", "coll": "m"}}}]))
                assert sorted(d["_id"] for d in pc.aggsec2.m.find()) == [2, 5, 8]
                # the primary's errors reach the client
                with pytest.raises(OperationFailure) as e:
                    list(sdb.src.aggregate([{"$merge": {"into": "out", "whenMatched": "fail"}}]))
                assert e.value.code == 11000, e.value.details
        pc.drop_database("aggsec")
        pc.drop_database("aggsec2")


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


def test_read_concern_levels(rs):
    p = wait_for(lambda: settled(rs))
    with direct(p) as c:
        db = c.rc
        db.c.replace_one({"_id": 1}, {"_id": 1}, upsert=True)
        for level in ("local", "available", "majority", "linearizable"):
            r = db.command("find", "c", filter={"_id": 1}, readConcern={"level": level})
            assert r["cursor"]["firstBatch"] == [{"_id": 1}], level
        with pytest.raises(OperationFailure) as ei:
            db.command("find", "c", readConcern={"level": "nonsense"})
        assert ei.value.code == 2
        with pytest.raises(OperationFailure) as ei:
            db.command("find", "c", readConcern={"level": 1})
        assert ei.value.code == 14
        # $out/$merge cannot run under linearizable
        with pytest.raises(OperationFailure) as ei:
            db.command("aggregate", "c", pipeline=[{"$out": "o"}], cursor={},
                       readConcern={"level": "linearizable"})
        assert ei.value.code == 72
    # linearizable reads only on the primary
    with direct(rs[2]) as c:
        with pytest.raises((OperationFailure, NotMasterError)) as ei:
            c.rc.command("find", "c", readConcern={"level": "linearizable"},
                         read_preference=pymongo.ReadPreference.SECONDARY_PREFERRED)
        assert ei.value.details["code"] == 10107


def test_linearizable_read_fails_when_primary_cannot_reach_majority(rs):
    """The no-op after the read needs a majority: with both other members
    stopped (SIGSTOP) the read does not return its stale answer."""
    import signal
    p = wait_for(lambda: settled(rs))
    others = [m for m in rs if m is not p]
    with direct(p) as c:
        c.rc.c.find_one({})
        for m in others:
            m.pause()  # every thread stopped: none sends a last ack or vote
        try:
            with pytest.raises((OperationFailure, NotMasterError)) as ei:
                c.rc.command("find", "c", readConcern={"level": "linearizable"}, maxTimeMS=800)
            # time limit; or, on a loaded machine, the primary stepped down first
            assert ei.value.details["code"] in (50, 11602, 10107)
            # a local read still answers
            c.rc.command("find", "c", readConcern={"level": "local"})
        finally:
            for m in others:
                m.signal(signal.SIGCONT)
    wait_for(lambda: settled(rs), timeout=30)


def test_after_cluster_time(rs):
    p = wait_for(lambda: settled(rs))
    with direct(p) as c:
        r = c.rc.command("insert", "act", documents=[{"_id": "x"}])
        t = r["operationTime"]
        # a time just past the primary's newest: the primary moves its clock on
        ahead = bson.timestamp.Timestamp(t.time, t.inc + 5)
        c.rc.command("find", "act", readConcern={"afterClusterTime": ahead})
        # a time an hour ahead: maxTimeMS ends the wait, and the primary does not
        # write a no-op every few milliseconds meanwhile (its clock cannot get there)
        notes = {"op": "n", "o.msg": "advancing clusterTime"}
        before = c.local["oplog.rs"].count_documents(notes)
        with pytest.raises(OperationFailure) as ei:
            c.rc.command("find", "act", maxTimeMS=500, readConcern={
                "afterClusterTime": bson.timestamp.Timestamp(t.time + 3600, 0)})
        assert ei.value.code == 50
        assert c.local["oplog.rs"].count_documents(notes) - before == 0
    with direct(rs[2]) as c:
        # the hidden member waits until it has applied the insert, then sees it
        r = c.rc.command("find", "act", filter={"_id": "x"},
                         readConcern={"level": "local", "afterClusterTime": t},
                         read_preference=pymongo.ReadPreference.SECONDARY_PREFERRED)
        assert r["cursor"]["firstBatch"] == [{"_id": "x"}]
        # a time far ahead that no member has: maxTimeMS ends the wait
        far = bson.timestamp.Timestamp(t.time + 3600, 0)
        t0 = time.time()
        with pytest.raises(OperationFailure) as ei:
            c.rc.command("find", "act", readConcern={"afterClusterTime": far}, maxTimeMS=300,
                         read_preference=pymongo.ReadPreference.SECONDARY_PREFERRED)
        assert ei.value.code == 50
        assert time.time() - t0 < 5


def test_read_concern_on_standalone():
    s = Sabled()
    try:
        s.start()
        with pymongo.MongoClient(s.uri()) as c:
            with pytest.raises(OperationFailure) as ei:
                c.t.command("find", "c", readConcern={"level": "linearizable"})
            assert ei.value.code == 123
            with pytest.raises(OperationFailure) as ei:
                c.t.command("find", "c", readConcern={"afterClusterTime":
                                                      bson.timestamp.Timestamp(1, 1)})
            assert ei.value.code == 20
            c.t.command("find", "c", readConcern={"level": "majority"})
    finally:
        s.cleanup()


def test_monitoring(rs):
    import urllib.request
    p = wait_for(lambda: settled(rs))
    with direct(p) as c:
        coll = c.mon.get_collection("c", write_concern=pymongo.WriteConcern(w=3, wtimeout=10000))
        coll.insert_many([{"_id": i} for i in range(5)])
        coll.update_one({"_id": 1}, {"$set": {"x": 1}})
        coll.delete_one({"_id": 2})
        ss = c.admin.command("serverStatus")
        assert ss["repl"]["isWritablePrimary"] is True and ss["repl"]["setName"] == "rs0"
    with direct(rs[2]) as c:
        ss = c.admin.command("serverStatus")
        assert ss["repl"]["secondary"] is True and ss["repl"]["hidden"] is True
        o = ss["opcountersRepl"]
        assert o["insert"] >= 5 and o["update"] >= 1 and o["delete"] >= 1
        assert ss["metrics"]["repl"]["apply"]["ops"] >= 7

        # serverStatus names the source replSetGetStatus names: the primary or,
        # chaining, the other secondary (nearer by ping, or the old primary it
        # kept after the step-down above; under load it was the secondary)
        def names_its_source():
            want = c.admin.command("replSetGetStatus")["syncSourceHost"]
            got = c.admin.command("serverStatus")["metrics"]["repl"]["syncSource"]["host"]
            return got == want and got in ["127.0.0.1:%d" % m.port for m in rs[:2]]
        wait_for(names_its_source, timeout=15)

    def metrics_text():
        # the states as p sees them by heartbeat (every 500 ms): wait for the
        # one after the election settled, as page_members below
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % p.metrics_port,
                                      timeout=10).read().decode()
        return text if all('sable_repl_member_state{member="127.0.0.1:%d"} %d'
                            % (m.port, 1 if m is p else 2) in text for m in rs) else None
    text = wait_for(metrics_text, timeout=15)
    for m in rs:
        host = "127.0.0.1:%d" % m.port
        want = 1 if m is p else 2
        assert 'sable_repl_member_state{member="%s"} %d' % (host, want) in text
        assert 'sable_repl_lag_seconds{member="%s"} ' % host in text
    # the monitoring page's JSON: every member's state and lag, one value per sample
    import json

    def page_members():
        j = json.loads(urllib.request.urlopen(
            "http://127.0.0.1:%d/api/series" % p.metrics_port, timeout=10).read())
        got = {m["name"]: m for m in j["members"]}
        # a sample is taken once a second: wait for one taken after the
        # election settled (an earlier one may still show the primary as 2)
        want = {"127.0.0.1:%d" % m.port: 1 if m is p else 2 for m in rs}
        return (j, got) if len(got) == 3 and all(
            m["state"] and m["state"][-1] == want.get(m["name"])
            for m in got.values()) else None
    j, got = wait_for(page_members, timeout=15)
    for m in rs:
        row = got["127.0.0.1:%d" % m.port]
        assert len(row["state"]) == len(row["lag_s"]) == len(j["t"])
        assert row["state"][-1] == (1 if m is p else 2), row
        assert row["lag_s"][-1] is not None and 0 <= row["lag_s"][-1] < 30, row
    # sable-stat shows the member's role and the entries it applies
    import os
    import subprocess
    from sabled import sabled_path
    stat = os.path.join(os.path.dirname(sabled_path()), "sable-stat")
    r = subprocess.run([stat, "--port", str(rs[2].port), "-n", "1", "--json", "--interval", "0.5"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout.strip().splitlines()[-1])
    assert line["repl"] == "HID" and line["repl_applied"] >= 0


def test_default_rw_concern(rs):
    import signal
    p = wait_for(lambda: settled(rs))
    with direct(p) as c:
        d = c.admin.command("getDefaultRWConcern")
        assert d["defaultWriteConcernSource"] == "implicit"
        assert d["defaultReadConcern"] == {"level": "local"}
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("setDefaultRWConcern")
        assert ei.value.code == 2
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("setDefaultRWConcern", defaultReadConcern={"level": "snapshot"})
        assert ei.value.code == 2
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("setDefaultRWConcern", defaultWriteConcern={"w": 0})
        assert ei.value.code == 2
        r = c.admin.command("setDefaultRWConcern",
                            defaultWriteConcern={"w": "majority", "wtimeout": 600})
        assert r["defaultWriteConcern"] == {"w": "majority", "wtimeout": 600}
        assert r["defaultWriteConcernSource"] == "global"
        try:
            # the stored default reaches the other members through the oplog
            wait_for(lambda: c.admin.command("getDefaultRWConcern")["defaultWriteConcernSource"]
                     == "global")
            # a write without writeConcern now waits for a majority: with both
            # other members stopped it times out (wtimeout 600) as mongod reports it
            others = [m for m in rs if m is not p]
            for m in others:
                m.pause()
            try:
                r = c.dwc.command("insert", "c", documents=[{"_id": 1}])
                assert r["writeConcernError"]["code"] == 64
                # an explicit writeConcern still wins
                r = c.dwc.command("insert", "c", documents=[{"_id": 2}], writeConcern={"w": 1})
                assert "writeConcernError" not in r
            finally:
                for m in others:
                    m.signal(signal.SIGCONT)
        finally:
            wait_for(lambda: settled(rs), timeout=30)
            q = primary_of(rs)
            with direct(q) as c2:
                wait_for(lambda: c2.admin.command("setDefaultRWConcern",
                                                  defaultWriteConcern={"w": 1}))
