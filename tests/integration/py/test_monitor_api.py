"""
The monitoring page's server side on --metricsPort (src/metrics/http.c,
series.c): GET /api/series and /api/latest against serverStatus, the page's
files embedded in the binary, no replication chart on a standalone, the login
(HTTP basic auth, clusterMonitor) when the port is bound off loopback with
--auth, none on loopback, and HTTPS where TLS is configured.  The page drawn
in a browser is tests/integration/browser/test_monitor_page.py.

All traffic is on 127.0.0.1 (a port bound to 0.0.0.0 is reached through it).
"""
import base64
import json
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pymongo
import pytest

from sabled import Sabled, free_port

SERIES = ["cpu_user", "cpu_system", "ops_insert", "ops_query", "ops_update", "ops_delete",
          "ops_getmore", "ops_command", "read_avg_ms", "read_p99_ms", "write_avg_ms",
          "write_p99_ms", "connections", "cache_fill_pct", "cache_dirty_pct",
          "journal_flushes", "audit_events"]


def get(port, path, auth=None, scheme="http", context=None):
    req = urllib.request.Request("%s://127.0.0.1:%d%s" % (scheme, port, path))
    if auth is not None:
        req.add_header("Authorization",
                       "Basic " + base64.b64encode(("%s:%s" % auth).encode()).decode())
    with urllib.request.urlopen(req, timeout=10, context=context) as r:
        return r.status, r.headers, r.read()


def status_of(port, path, auth=None):
    try:
        return get(port, path, auth)[0]
    except urllib.error.HTTPError as e:
        return e.code


def series(port, since=0):
    return json.loads(get(port, "/api/series?since=%d" % since)[2])


def start(extra=()):
    s = Sabled()
    s.metrics_port = free_port()
    s.start(["--metricsPort", str(s.metrics_port)] + list(extra))
    return s


@pytest.fixture(scope="module")
def mon():
    s = start()
    try:
        yield s
    finally:
        s.cleanup()


def wait_samples(port, n, timeout=15):
    deadline = time.time() + timeout
    while True:
        j = series(port)
        if len(j["t"]) >= n or time.time() > deadline:
            return j
        time.sleep(0.2)


def test_series_shape(mon):
    j = wait_samples(mon.metrics_port, 2)
    assert j["interval_ms"] == 1000 and j["capacity"] == 3600
    assert [s["key"] for s in j["series"]] == SERIES
    assert all(s["unit"] and s["label"] for s in j["series"])
    assert len(j["t"]) >= 2 and j["last"] >= len(j["t"])
    for k in SERIES:
        assert len(j["values"][k]) == len(j["t"]), k
    # one sample a second, in order
    steps = [b - a for a, b in zip(j["t"], j["t"][1:])]
    assert all(0.5 < d < 2.5 for d in steps), steps
    assert j["members"] == []  # a standalone: no replication series
    assert j["values"]["cache_fill_pct"][-1] is not None


def test_totals_match_server_status(mon):
    c = mon.client()
    try:
        c.t.c.insert_many([{"_id": i} for i in range(500)])
        for i in range(300):
            c.t.c.find_one({"_id": i})
        # Let a sample be taken with the load finished, then compare exactly.
        time.sleep(1.5)
        before = c.admin.command("serverStatus")
        latest = json.loads(get(mon.metrics_port, "/api/latest")[2])
        after = c.admin.command("serverStatus")
        time.sleep(1.2)
        j = series(mon.metrics_port)
    finally:
        c.close()
    for k in ("insert", "query", "update", "delete", "getmore"):
        assert before["opcounters"][k] == latest["opcounters"][k] == after["opcounters"][k], k
    assert before["opcounters"]["command"] - 3 <= latest["opcounters"]["command"] <= \
        after["opcounters"]["command"]
    assert latest["reads"]["ops"] == before["opLatencies"]["reads"]["ops"]
    assert latest["writes"]["ops"] == before["opLatencies"]["writes"]["ops"]
    assert latest["cache_max_bytes"] == before["wiredTiger"]["cache"]["maximum bytes configured"]
    # The per-second rates add up to the counters' movement: sum(rate * dt).
    t, ins = j["t"], j["values"]["ops_insert"]
    total = sum(r * (b - a) for a, b, r in zip(t, t[1:], ins[1:]))
    assert abs(total + ins[0] * 1.0 - 500) < 25, (total, ins)
    assert any(v is not None and v > 0 for v in j["values"]["read_avg_ms"])
    assert any(v is not None and v > 0 for v in j["values"]["write_p99_ms"])


def test_since_returns_only_newer(mon):
    j = wait_samples(mon.metrics_port, 2)
    time.sleep(1.2)
    k = series(mon.metrics_port, since=j["last"])
    assert k["last"] > j["last"]
    assert len(k["t"]) == k["last"] - j["last"]
    assert k["t"][0] > j["t"][-1]
    # a sample may land between the two calls: only those after k's last come
    m = series(mon.metrics_port, since=k["last"])
    assert len(m["t"]) == m["last"] - k["last"]
    assert all(t > k["t"][-1] for t in m["t"])


def test_journal_flushes_follow_the_journal(mon):
    """Under j:true writes from several threads every second of the load shows journal
    flushes, and the series adds up to serverStatus' log sync operations over the
    same time (every sync of the journal files but the one of a full file at the
    switch to the next: docs/monitoring.md)."""
    import threading

    def syncs(c):
        return c.admin.command("serverStatus")["wiredTiger"]["log"]["log sync operations"]
    c = mon.client()
    stop = threading.Event()

    def load(k):
        cl = mon.client()
        coll = cl.get_database("jf").get_collection(
            "c%d" % k, write_concern=pymongo.WriteConcern(j=True))
        while not stop.is_set():
            coll.insert_one({"x": "y" * 100})
        cl.close()
    try:
        j0 = wait_samples(mon.metrics_port, 2)
        s0 = syncs(c)
        threads = [threading.Thread(target=load, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        time.sleep(4.5)
        stop.set()
        for t in threads:
            t.join(30)
        time.sleep(2.2)  # two more samples: every sync of the load is in the ring
        s1 = syncs(c)
        j1 = series(mon.metrics_port, since=j0["last"])
    finally:
        stop.set()
        c.close()
    t = [j0["t"][-1]] + j1["t"]
    flushes, ins = j1["values"]["journal_flushes"], j1["values"]["ops_insert"]
    total = sum(r * (b - a) for a, b, r in zip(t, t[1:], flushes))
    assert s1 - s0 > 10
    assert abs(total - (s1 - s0)) <= 2 + 0.02 * (s1 - s0), (total, s1 - s0, flushes)
    # every second with j:true inserts (acknowledged after their flush) shows flushes; a
    # loaded sanitizer build may do a few dozen inserts a second (CI: 16, 346, 32, 13)
    busy = [f for f, n in zip(flushes, ins) if n is not None and n > 5]
    assert len(busy) >= 2 and all(f > 0 for f in busy), (flushes, ins)


def test_sable_bench_chart(mon, tmp_path):
    """sable-bench run ... --chart FILE.png: a PNG with a point per status interval."""
    from sabled import REPO, sabled_path
    bench = os.path.join(os.path.dirname(sabled_path()), "sable-bench")
    if not os.path.exists(bench) or shutil.which("gnuplot") is None:
        pytest.skip("sable-bench or gnuplot missing")
    common = ["mongodb", "-P", os.path.join(REPO, "workloads", "workloada"), "-p",
              "recordcount=200", "-p", "mongodb.url=mongodb://127.0.0.1:%d/chart" % int(mon.port)]
    subprocess.run([bench, "load"] + common, check=True, capture_output=True, timeout=120)
    png = tmp_path / "run.png"
    r = subprocess.run([bench, "run"] + common + ["-p", "operationcount=100000000", "-p",
                       "maxexecutiontime=3", "-p", "status.interval=1", "--chart", str(png)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"chart: %s \((\d+) points, one per 1 s\)" % re.escape(str(png)), r.stderr)
    assert m and int(m.group(1)) >= 2, r.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_page_is_served_from_the_binary(mon):
    st, h, body = get(mon.metrics_port, "/")
    assert st == 200 and h["Content-Type"].startswith("text/html")
    assert b"uPlot.iife.min.js" in body and b"monitor.js" in body
    st, h, js = get(mon.metrics_port, "/uPlot.iife.min.js")
    assert h["Content-Type"].startswith("text/javascript") and b"uPlot" in js and len(js) > 20000
    assert get(mon.metrics_port, "/uPlot.min.css")[0] == 200
    assert b"MIT" in get(mon.metrics_port, "/uPlot.LICENSE")[2]
    assert b"api/series" in get(mon.metrics_port, "/monitor.js")[2]
    assert status_of(mon.metrics_port, "/nope") == 404
    assert get(mon.metrics_port, "/metrics")[0] == 200


MON_USER, MON_PWD = "watcher", "w4tch-Pw"


@pytest.fixture(scope="module")
def auth_wide():
    """--auth with the metrics port on 0.0.0.0 (reached here through 127.0.0.1)."""
    s = start(["--auth", "--metricsBindIp", "0.0.0.0"])
    try:
        c = s.client()
        c.admin.command("createUser", "root", pwd="r00t-Pw", roles=["root"])
        c.close()
        c = s.client(username="root", password="r00t-Pw", authSource="admin")
        c.admin.command("createUser", MON_USER, pwd=MON_PWD, roles=["clusterMonitor"])
        c.admin.command("createUser", "reader", pwd="r34d-Pw", roles=[{"role": "read", "db": "x"}])
        c.close()
        yield s
    finally:
        s.cleanup()


def test_login_asked_off_loopback_with_auth(auth_wide):
    p = auth_wide.metrics_port
    for path in ("/", "/api/series", "/metrics"):
        with pytest.raises(urllib.error.HTTPError) as e:
            get(p, path)
        assert e.value.code == 401
        assert e.value.headers["WWW-Authenticate"].startswith("Basic ")
    assert get(p, "/", auth=(MON_USER, MON_PWD))[0] == 200
    assert get(p, "/api/series", auth=(MON_USER, MON_PWD))[0] == 200
    assert get(p, "/api/series", auth=("root", "r00t-Pw"))[0] == 200  # root includes it
    assert status_of(p, "/api/series", auth=(MON_USER, "wrong")) == 401
    assert status_of(p, "/api/series", auth=("reader", "r34d-Pw")) == 401  # no clusterMonitor
    assert status_of(p, "/api/series", auth=("nobody", "x")) == 401


def test_login_follows_user_changes(auth_wide):
    p = auth_wide.metrics_port
    c = auth_wide.client(username="root", password="r00t-Pw", authSource="admin")
    try:
        c.admin.command("createUser", "brief", pwd="br13f-Pw", roles=["clusterMonitor"])
        assert get(p, "/api/latest", auth=("brief", "br13f-Pw"))[0] == 200
        c.admin.command("dropUser", "brief")
        assert status_of(p, "/api/latest", auth=("brief", "br13f-Pw")) == 401
    finally:
        c.close()


def test_no_login_on_loopback_even_with_auth():
    s = start(["--auth"])
    try:
        assert get(s.metrics_port, "/api/latest")[0] == 200
    finally:
        s.cleanup()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI missing")
def test_https_where_tls_is_configured():
    d = tempfile.mkdtemp(prefix="sable-mtls-")
    try:
        with open(os.path.join(d, "san.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-keyout", "k.pem", "-out", "c.pem", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       cwd=d, check=True, capture_output=True)
        with open(os.path.join(d, "server.pem"), "w") as out:
            out.write(open(os.path.join(d, "c.pem")).read() + open(os.path.join(d, "k.pem")).read())
        s = start(["--tlsMode", "allowTLS", "--tlsCertificateKeyFile",
                   os.path.join(d, "server.pem")])
        try:
            ctx = ssl.create_default_context(cafile=os.path.join(d, "c.pem"))
            st, h, body = get(s.metrics_port, "/", scheme="https", context=ctx)
            assert st == 200 and b"uPlot" in body
            st, h, body = get(s.metrics_port, "/api/series", scheme="https", context=ctx)
            assert json.loads(body)["capacity"] == 3600
            with pytest.raises(Exception):
                get(s.metrics_port, "/api/latest")  # plain HTTP is not spoken there
        finally:
            s.cleanup()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_audit_events_are_counted(tmp_path):
    s = start(["--auditDestination", "file", "--auditFormat", "JSON",
               "--auditPath", str(tmp_path / "audit.json")])
    try:
        c = s.client()
        for i in range(20):
            c["a%d" % i].create_collection("c")  # createCollection is audited
        c.close()
        time.sleep(2.2)
        j = series(s.metrics_port)
        lines = sum(1 for _ in open(tmp_path / "audit.json"))
        assert j["latest"]["audit_events"] >= 20
        assert j["latest"]["audit_events"] <= lines
        assert sum(v for v in j["values"]["audit_events"] if v) > 0
    finally:
        s.cleanup()
