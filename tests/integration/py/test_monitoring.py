"""
Monitoring through real drivers: serverStatus counters move exactly with the
operations performed, opLatencies agree with the client's own timing, top,
currentOp/killOp on a running scan (11601), maxTimeMS (50), the slow-query
log line, the profiler at levels 0/1/2, the Prometheus endpoint (parsed with
prometheus_client's own parser) and sable-stat's rates against a known load.

The module runs its own sabled with --metricsPort.  Nothing here asserts on
wall-clock speed: the slow operations are made slow by data volume, and the
tests only need them to outlast a currentOp round trip.
"""

import json
import os
import subprocess
import threading
import time
import urllib.request

import pymongo
import pytest
from pymongo.errors import ExecutionTimeout, OperationFailure

from sabled import Sabled, free_port, sabled_path

BIG_DOCS = 150000


@pytest.fixture(scope="module")
def mon():
    s = Sabled()
    s.metrics_port = free_port()
    try:
        s.start(["--metricsPort", str(s.metrics_port)])
        yield s
    finally:
        s.cleanup()


@pytest.fixture(scope="module")
def mc(mon):
    c = mon.client()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def big(mc):
    """A collection large enough that an unindexed scan takes a while."""
    coll = mc.monbig.c
    coll.drop()
    pad = "x" * 200
    batch = []
    for i in range(BIG_DOCS):
        batch.append({"_id": i, "k": i % 1000, "s": pad})
        if len(batch) == 5000:
            coll.insert_many(batch, ordered=False)
            batch = []
    if batch:
        coll.insert_many(batch)
    return coll


def status(c):
    return c.admin.command("serverStatus")


def delta(a, b, path):
    for k in path.split("."):
        a, b = a[k], b[k]
    return b - a


# ---- counters -------------------------------------------------------------------


def test_opcounters_exact(mc):
    coll = mc.cnt.c
    coll.drop()
    s0 = status(mc)
    coll.insert_many([{"_id": i, "v": i} for i in range(25)])
    for i in range(7):
        coll.insert_one({"_id": 100 + i})
    for i in range(9):
        coll.find_one({"_id": i})
    coll.update_one({"_id": 1}, {"$set": {"w": 1}})
    coll.update_many({"v": {"$gte": 0}}, {"$inc": {"v": 1}})
    coll.bulk_write([pymongo.UpdateOne({"_id": 2}, {"$set": {"w": 2}}),
                     pymongo.UpdateOne({"_id": 3}, {"$set": {"w": 3}})])
    coll.delete_one({"_id": 4})
    coll.delete_many({"_id": {"$in": [5, 6]}})
    cur = coll.find({}, batch_size=5)
    n = len(list(cur))
    assert n == 32 - 3
    s1 = status(mc)
    assert delta(s0, s1, "opcounters.insert") == 32
    assert delta(s0, s1, "opcounters.query") == 9 + 1
    assert delta(s0, s1, "opcounters.update") == 4
    assert delta(s0, s1, "opcounters.delete") == 2
    # 29 documents in batches of 5: first batch + 5 getMores
    assert delta(s0, s1, "opcounters.getmore") == 5
    # per-command counts are exact; opcounters.command also sees driver heartbeats
    assert delta(s0, s1, "metrics.commands.insert.total") == 8
    assert delta(s0, s1, "metrics.commands.find.total") == 10
    assert delta(s0, s1, "metrics.commands.update.total") == 3
    assert delta(s0, s1, "metrics.commands.delete.total") == 2
    assert delta(s0, s1, "metrics.commands.getMore.total") == 5
    assert delta(s0, s1, "metrics.commands.serverStatus.total") == 1


def test_command_counters_and_failures(mc):
    s0 = status(mc)
    for _ in range(6):
        mc.admin.command("ping")
    for _ in range(3):
        with pytest.raises(OperationFailure):
            mc.cnt.command("count", "c", query={"$bogus": 1})
    s1 = status(mc)
    assert delta(s0, s1, "metrics.commands.ping.total") == 6
    assert delta(s0, s1, "metrics.commands.ping.failed") == 0
    assert delta(s0, s1, "metrics.commands.count.total") == 3
    assert delta(s0, s1, "metrics.commands.count.failed") == 3
    assert delta(s0, s1, "opcounters.command") >= 6 + 3 + 1


def test_document_metrics_exact(mc):
    coll = mc.docm.c
    coll.drop()
    s0 = status(mc)
    coll.insert_many([{"_id": i, "g": i % 2} for i in range(40)])
    r = coll.update_many({"g": 0}, {"$set": {"u": 1}})
    assert r.modified_count == 20
    coll.update_one({"_id": 1000}, {"$set": {"u": 2}}, upsert=True)
    assert len(list(coll.find({"g": 1}))) == 20
    assert coll.delete_many({"g": 1}).deleted_count == 20
    s1 = status(mc)
    assert delta(s0, s1, "metrics.document.inserted") == 41
    assert delta(s0, s1, "metrics.document.updated") == 20
    assert delta(s0, s1, "metrics.document.returned") == 20
    assert delta(s0, s1, "metrics.document.deleted") == 20


def test_server_status_shape(mc):
    s = mc.admin.command("serverStatus", opLatencies={"histograms": True})
    for k in ("host", "version", "process", "pid", "uptime", "localTime", "connections",
              "network", "opcounters", "opLatencies", "mem", "extra_info", "metrics",
              "wiredTiger"):
        assert k in s, k
    for k in ("current", "available", "totalCreated", "active"):
        assert k in s["connections"]
    assert s["connections"]["active"] >= 1
    for k in ("bytesIn", "bytesOut", "numRequests"):
        assert s["network"][k] > 0
    for cls in ("reads", "writes", "commands", "transactions"):
        assert set(("latency", "ops")) <= set(s["opLatencies"][cls])
    hist = s["opLatencies"]["commands"]["histogram"]
    assert sum(b["count"] for b in hist) == s["opLatencies"]["commands"]["ops"]
    assert s["mem"]["resident"] > 0 and s["mem"]["virtual"] >= s["mem"]["resident"]
    cache = s["wiredTiger"]["cache"]
    for k in ("bytes currently in the cache", "maximum bytes configured",
              "tracked dirty bytes in the cache", "pages read into cache",
              "pages written from cache", "forced eviction - pages selected count",
              "in-memory page splits", "cache overflow table insert calls",
              "bytes written from cache"):
        assert k in cache
    assert cache["bytes written from cache"] >= 0
    assert "application thread time waiting for cache (usecs)" in s["wiredTiger"]["thread-yield"]
    assert "log bytes written" in s["wiredTiger"]["log"]
    assert "total" in s["metrics"]["cursor"]["open"]


def test_op_latencies_agree_with_client(mc):
    coll = mc.lat.c
    coll.drop()
    coll.insert_many([{"_id": i, "k": i} for i in range(2000)])
    s0 = status(mc)
    client_us = 0.0
    n = 40
    for i in range(n):
        t = time.perf_counter()
        list(coll.find({"k": {"$gte": i}}).limit(50))
        client_us += (time.perf_counter() - t) * 1e6
    s1 = status(mc)
    ops = delta(s0, s1, "opLatencies.reads.ops")
    server_us = delta(s0, s1, "opLatencies.reads.latency")
    assert ops == n
    # The server's part of each round trip can only be shorter than the whole.
    assert 0 < server_us <= client_us


def test_top(mc):
    coll = mc.topdb.c
    coll.drop()
    t0 = mc.admin.command("top")["totals"].get("topdb.c")
    coll.insert_many([{"_id": i} for i in range(10)])
    for i in range(4):
        coll.find_one({"_id": i})
    coll.update_one({"_id": 1}, {"$set": {"a": 1}})
    coll.delete_one({"_id": 2})
    t1 = mc.admin.command("top")["totals"]["topdb.c"]
    base = t0 or {k: {"time": 0, "count": 0} for k in t1}
    assert t1["queries"]["count"] - base["queries"]["count"] == 4
    assert t1["insert"]["count"] - base["insert"]["count"] == 1
    assert t1["update"]["count"] - base["update"]["count"] == 1
    assert t1["remove"]["count"] - base["remove"]["count"] == 1
    assert t1["readLock"]["count"] - base["readLock"]["count"] == 4
    assert t1["writeLock"]["count"] - base["writeLock"]["count"] >= 3
    assert t1["total"]["time"] >= t1["readLock"]["time"]
    with pytest.raises(OperationFailure):
        mc.topdb.command("top")  # admin only


# ---- currentOp, killOp, maxTimeMS -------------------------------------------------


def _run_in_thread(fn):
    box = {}

    def body():
        try:
            box["result"] = fn()
        except Exception as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e
    t = threading.Thread(target=body)
    t.start()
    return t, box


def _find_op(mc, comment, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        ops = mc.admin.command({"currentOp": 1, "command.comment": comment})["inprog"]
        if ops:
            return ops[0]
        time.sleep(0.005)
    return None


@pytest.mark.parametrize("kind", ["find", "aggregate"])
def test_current_op_and_kill_op(mon, big, kind):
    other = mon.client()
    coll = other.monbig.c
    comment = "slow-%s" % kind
    # Repeat the scan until killed: a single pass may end before currentOp sees it.

    def slow():
        for _ in range(200):
            if kind == "find":
                list(coll.find({"s": {"$regex": "q$"}}, comment=comment))
            else:
                list(coll.aggregate([{"$match": {"s": {"$regex": "q$"}}},
                                     {"$group": {"_id": "$k", "n": {"$sum": 1}}}],
                                    comment=comment))
        return "finished"
    t, box = _run_in_thread(slow)
    try:
        admin = mon.client()
        op = _find_op(admin, comment)
        assert op is not None, "the scan never showed up in currentOp"
        assert op["ns"] == "monbig.c"
        assert op["op"] == ("query" if kind == "find" else "command")
        assert op["command"]["comment"] == comment
        assert op["client"].startswith("127.0.0.1:")
        assert op["active"] is True and op["microsecs_running"] >= 0
        assert isinstance(op["opid"], int)
        # $all and a filter that matches nothing
        assert admin.admin.command({"currentOp": 1, "$all": True,
                                    "command.comment": comment})["inprog"]
        assert admin.admin.command({"currentOp": 1, "command.comment": "nope"})["inprog"] == []
        r = admin.admin.command("killOp", op=op["opid"])
        assert r["info"] == "attempting to kill op"
        t.join(60)
        assert not t.is_alive()
        err = box.get("error")
        assert isinstance(err, OperationFailure), box
        assert err.code == 11601
        admin.close()
    finally:
        t.join(120)
        other.close()


def test_current_op_stage(mon, big):
    """The $currentOp aggregation stage (what mongosh's db.currentOp() sends):
    a running operation, idle cursors with idleCursors: true, later stages on
    its output, and mongod's errors."""
    other = mon.client()
    comment = "stage-slow"

    def slow():
        for _ in range(200):
            list(other.monbig.c.find({"s": {"$regex": "q$"}}, comment=comment))
        return "finished"
    t, box = _run_in_thread(slow)
    admin = mon.client()
    try:
        op = None
        deadline = time.time() + 30
        while op is None and time.time() < deadline:
            got = list(admin.admin.aggregate([
                {"$currentOp": {"allUsers": True, "idleConnections": False,
                                "truncateOps": False}},
                {"$match": {"command.comment": comment}}]))
            op = got[0] if got else None
        assert op is not None, "the scan never showed up in $currentOp"
        assert op["type"] == "op" and op["active"] is True
        assert op["ns"] == "monbig.c" and op["op"] == "query"
        admin.admin.command("killOp", op=op["opid"])
        t.join(60)
        assert isinstance(box.get("error"), OperationFailure), box
    finally:
        t.join(120)

    # An idle cursor: shown with idleCursors: true, with its counts; not without.
    cur = other.monbig.c.find({}, batch_size=3, comment="idle-cursor")
    next(cur)
    idle = list(admin.admin.aggregate([{"$currentOp": {"allUsers": True, "idleCursors": True}},
                                       {"$match": {"type": "idleCursor", "ns": "monbig.c"}}]))
    assert len(idle) == 1, idle
    c = idle[0]["cursor"]
    assert c["cursorId"] == cur.cursor_id
    assert c["nDocsReturned"] == 3 and c["nBatchesReturned"] == 1
    assert c["tailable"] is False and c["awaitData"] is False
    assert c["lastAccessDate"] >= c["createdDate"]
    assert idle[0]["active"] is False
    assert not [d for d in admin.admin.aggregate([{"$currentOp": {"allUsers": True}}])
                if d["type"] == "idleCursor"]
    cur.close()
    # Later stages run on its output ($currentOp itself shows up as running).
    n = list(admin.admin.aggregate([{"$currentOp": {}}, {"$match": {"type": "op"}},
                                    {"$count": "n"}]))
    assert n and n[0]["n"] >= 1

    # mongod's errors
    with pytest.raises(OperationFailure) as ei:
        list(admin.monbig.aggregate([{"$currentOp": {}}]))
    assert ei.value.code == 73
    with pytest.raises(OperationFailure) as ei:
        list(other.monbig.c.aggregate([{"$currentOp": {}}]))
    assert ei.value.code == 73
    with pytest.raises(OperationFailure) as ei:
        list(admin.admin.aggregate([{"$currentOp": {"bogus": True}}]))
    assert ei.value.code == 9
    with pytest.raises(OperationFailure) as ei:
        list(admin.admin.aggregate([{"$currentOp": {"idleCursors": 1}}]))
    assert ei.value.code == 9
    with pytest.raises(OperationFailure) as ei:
        list(admin.admin.aggregate([{"$currentOp": 5}]))
    assert ei.value.code == 9
    with pytest.raises(OperationFailure) as ei:
        list(admin.admin.aggregate([{"$documents": [{"a": 1}]}, {"$currentOp": {}}]))
    assert ei.value.code == 40602
    admin.close()
    other.close()


def test_max_time_ms(big):
    with pytest.raises(ExecutionTimeout) as ei:
        list(big.find({"s": {"$regex": "q$"}}).max_time_ms(1))
    assert ei.value.code == 50
    with pytest.raises(ExecutionTimeout) as ei:
        list(big.aggregate([{"$group": {"_id": "$s", "n": {"$sum": 1}}}], maxTimeMS=1))
    assert ei.value.code == 50


def test_kill_op_needs_op(mc):
    with pytest.raises(OperationFailure):
        mc.admin.command("killOp")
    assert mc.admin.command("killOp", op=123456789)["ok"] == 1.0


# ---- slow log and profiler ------------------------------------------------------


def test_slow_query_log(mon, mc, big):
    prev = mc.monbig.command("profile", -1, slowms=0)
    try:
        list(big.find({"k": 7, "s": {"$regex": "x$"}}, comment="slowlog").batch_size(1000))
    finally:
        mc.monbig.command("profile", -1, slowms=prev["slowms"])
    deadline = time.time() + 10
    line = None
    while time.time() < deadline and line is None:
        for entry in mon.log_lines():
            attr = entry.get("attr", {})
            if entry.get("id") == 51803 and attr.get("command", {}).get("comment") == "slowlog":
                line = entry
        time.sleep(0.05)
    assert line is not None
    assert line["msg"] == "Slow query" and line["c"].strip() == "COMMAND"
    a = line["attr"]
    assert a["ns"] == "monbig.c"
    assert a["planSummary"] == "COLLSCAN"
    assert a["docsExamined"] == BIG_DOCS
    assert a["keysExamined"] == 0
    assert a["nreturned"] == BIG_DOCS // 1000
    assert a["durationMillis"] >= 0
    assert a["command"]["find"] == "c"


def _profile_entries(db, **flt):
    return list(db.system.profile.find(flt))


def test_profiler_levels(mc):
    db = mc.profdb
    db.c.drop()
    db.system.profile.drop()
    db.c.insert_many([{"_id": i} for i in range(5)])
    assert db.command("profile", -1)["was"] == 0

    # level 0: nothing is recorded
    db.c.find_one({"_id": 1})
    assert _profile_entries(db) == []

    # level 2: everything
    r = db.command("profile", 2)
    assert r["was"] == 0 and r["ok"] == 1.0
    db.c.find_one({"_id": 2}, comment="p2")
    db.c.insert_one({"_id": 99}, bypass_document_validation=False)
    db.c.update_one({"_id": 3}, {"$set": {"a": 1}})
    e = _profile_entries(db, **{"command.comment": "p2"})
    assert len(e) == 1
    assert e[0]["op"] == "query" and e[0]["ns"] == "profdb.c"
    assert e[0]["nreturned"] == 1 and e[0]["planSummary"] == "IDHACK"
    assert "millis" in e[0] and "ts" in e[0] and "client" in e[0]
    assert _profile_entries(db, op="insert")[0]["ninserted"] == 1
    upd = _profile_entries(db, op="update")[0]
    assert upd["nModified"] == 1

    # level 1 with a high slowms: fast operations are not recorded
    r = db.command("profile", 1, slowms=100000)
    assert r["was"] == 2
    before = db.system.profile.count_documents({})
    db.c.find_one({"_id": 4}, comment="p1-fast")
    assert _profile_entries(db, **{"command.comment": "p1-fast"}) == []
    # ... and with slowms below every duration, they are
    db.command("profile", 1, slowms=-1)
    db.c.find_one({"_id": 4}, comment="p1-slow")
    assert len(_profile_entries(db, **{"command.comment": "p1-slow"})) == 1
    assert db.system.profile.count_documents({}) > before

    r = db.command("profile", 0, slowms=100, sampleRate=1.0)
    assert r["was"] == 1
    with pytest.raises(OperationFailure):
        db.command("profile", 5)
    with pytest.raises(OperationFailure):
        db.command("profile", 0, sampleRate=2)


def test_profile_is_bounded(mc):
    db = mc.profbound
    db.system.profile.drop()
    db.command("profile", 2)
    try:
        for i in range(1100):
            db.command("ping")
    finally:
        db.command("profile", 0)
    n = db.system.profile.count_documents({})
    assert 990 <= n <= 1000


# ---- Prometheus and sable-stat ------------------------------------------------


def test_prometheus_endpoint_parses(mon, mc):
    parser = pytest.importorskip("prometheus_client.parser",
                                 reason="python3-prometheus-client is not installed")
    mc.prom.c.insert_one({"a": 1})
    mc.prom.c.find_one()
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mon.metrics_port,
                                  timeout=10).read().decode()
    fams = {f.name: f for f in parser.text_string_to_metric_families(text)}
    s = status(mc)
    ops = {smp.labels["type"]: smp.value for smp in fams["sable_opcounters"].samples}
    assert ops["insert"] <= s["opcounters"]["insert"] and ops["insert"] >= 1
    hist = fams["sable_op_latency_seconds"]
    assert hist.type == "histogram"
    reads = [x for x in hist.samples if x.labels.get("type") == "reads"]
    buckets = [x for x in reads if x.name.endswith("_bucket")]
    assert buckets[-1].labels["le"] == "+Inf"
    count = [x for x in reads if x.name.endswith("_count")][0].value
    assert buckets[-1].value == count >= 1
    assert all(a.value <= b.value for a, b in zip(buckets, buckets[1:]))
    assert fams["process_cpu_seconds"].samples[0].value > 0
    assert fams["process_resident_memory_bytes"].samples[0].value > 0
    assert fams["sable_connections"].samples[0].value >= 1
    assert "sable_wiredtiger_cache_bytes" in fams
    assert "sable_documents" in fams and "sable_commands" in fams
    with pytest.raises(urllib.error.HTTPError) as ei:
        urllib.request.urlopen("http://127.0.0.1:%d/nope" % mon.metrics_port, timeout=10)
    assert ei.value.code == 404


def sable_stat_path():
    return os.environ.get("SABLE_STAT") or os.path.join(os.path.dirname(sabled_path()),
                                                        "sable-stat")


def test_sable_stat_rates(mon, mc):
    exe = sable_stat_path()
    if not os.path.exists(exe):
        pytest.skip("sable-stat not built at %s" % exe)
    coll = mc.statdb.c
    coll.drop()
    coll.insert_one({"_id": -1})
    p = subprocess.Popen([exe, "--port", str(mon.port), "--interval", "4", "-n", "1", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # sable-stat has taken its first sample
        s0 = status(mc)
        for i in range(300):
            coll.insert_one({"_id": i})
        for i in range(120):
            coll.find_one({"_id": i})
        s1 = status(mc)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    row = json.loads(out.strip().splitlines()[-1])
    secs = row["interval_s"]
    # The load ran inside sable-stat's interval (its own serverStatus calls excluded).
    assert delta(s0, s1, "opcounters.insert") == 300
    assert round(row["insert"] * secs) == 300
    assert round(row["query"] * secs) == 120
    assert row["update"] == 0 and row["delete"] == 0
    assert row["conn"] >= 1 and row["res_mb"] > 0
    assert row["write_ms"] > 0 and row["read_ms"] > 0


def test_sable_stat_top(mon, mc):
    exe = sable_stat_path()
    if not os.path.exists(exe):
        pytest.skip("sable-stat not built at %s" % exe)
    coll = mc.stattop.c
    coll.drop()
    coll.insert_one({"_id": -1})
    p = subprocess.Popen([exe, "--port", str(mon.port), "--interval", "3", "-n", "1", "--top",
                          "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        for i in range(50):
            coll.insert_one({"_id": i})
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    rows = [json.loads(x) for x in out.strip().splitlines() if x.strip()]
    mine = [r for r in rows if r["ns"] == "stattop.c"]
    assert mine and mine[0]["ops"] == 50 and mine[0]["write_ms"] > 0
