"""
sable-router's monitoring page in headless Chromium (cdp.py): a sharded
cluster (build/sable-cluster start --sharded --shards 2 --members 1, the router
given --metricsPort through --router-arg) under a short pymongo load through
the router.  The page draws the router's own charts (and none for a cache,
journal or audit log, which a router does not have), one section per shard
with its member's state (PRIMARY, from the router's poller) and the router's
requests to it, and its totals match the router's serverStatus within a
second.  The screenshot is saved as router_page.png next to monitor_page.png.
Then one shard's only member is killed: the router's poller shows it DOWN
within seconds while the other shard stays PRIMARY, and PRIMARY again once
it is restarted.

Run alone:  SABLED=$PWD/build/sabled /usr/bin/python3 -m pytest -q tests/integration/browser
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import pymongo
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "py"))
from sabled import free_port  # noqa: E402
import sharded  # noqa: E402

import cdp  # noqa: E402

OPS = ["insert", "query", "update", "delete", "getmore", "command"]
ROUTER_CHARTS = ["cpu", "ops", "latency", "connections"]
NOT_ON_A_ROUTER = ["cache", "journal", "audit"]


@pytest.fixture(scope="module")
def cluster():
    if not os.path.exists(sharded.ROUTER):
        pytest.skip("sable-router not built")
    mport = free_port()
    with sharded.cluster("sable-rpage-", router_args=["--metricsPort=%d" % mport]) as info:
        info["metrics"] = mport
        info["shard_members"] = ["127.0.0.1:%d" % p for p in info["shards"]]
        yield info


def client(port):
    return pymongo.MongoClient("127.0.0.1", port, serverSelectionTimeoutMS=10000)


class Load(threading.Thread):
    """Inserts, point reads and updates through the router until stopped."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.client = client(port)
        self.stop = threading.Event()
        self.done = 0

    def run(self):
        c = self.client.rload.c
        i = 0
        while not self.stop.is_set() and i < 100000:
            i += 1
            c.insert_one({"_id": i, "s": "x" * 100})
            c.find_one({"_id": random.randint(1, i)})
            if i % 2 == 0:
                c.update_one({"_id": i - 1}, {"$set": {"u": i}})
            self.done = i


class Status(threading.Thread):
    """The router's serverStatus every 100 ms: (localTime ms, opcounters, connections)."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.client = client(port)
        self.stop = threading.Event()
        self.samples = []

    def run(self):
        while not self.stop.is_set():
            ss = self.client.admin.command("serverStatus")
            t = ss["localTime"].timestamp() * 1000
            self.samples.append((t, dict(ss["opcounters"]), ss["connections"]["current"]))
            time.sleep(0.1)


def output_dir():
    d = os.environ.get("SABLE_TEST_OUTPUT") or tempfile.gettempdir()
    os.makedirs(d, exist_ok=True)
    return d


def test_router_page_shows_shards_and_matches_server_status(cluster):
    load, status = Load(cluster["router"]), Status(cluster["router"])
    load.start()
    status.start()
    browser = cdp.Browser()
    try:
        time.sleep(2)
        browser.open("http://127.0.0.1:%d/" % cluster["metrics"])
        browser.wait_for("window.sableMonitor && sableMonitor.ready && "
                         "document.querySelectorAll('section.shard .chart canvas').length >= 8")
        first_last = browser.eval("sableMonitor.last")
        browser.wait_for("sableMonitor.last >= %d" % (first_last + 3), timeout=15)
        page = browser.eval("""(() => {
            const charts = {};
            for (const el of document.querySelectorAll('.chart'))
                charts[el.id] = {points: +el.dataset.points,
                                 canvas: el.querySelectorAll('canvas').length,
                                 shard: el.closest('section.shard') ?
                                        el.closest('section.shard').id : null};
            const num = id => document.getElementById('num-' + id).textContent;
            const last = a => a.filter(v => v != null).slice(-1)[0];
            return {charts, role: sableMonitor.role, samples: sableMonitor.t.length,
                    t_ms: +document.getElementById('num-time').dataset.value,
                    numbers: Object.fromEntries(%s.map(k => [k, num(k)])),
                    connections: num('connections'),
                    cache_hidden: document.getElementById('num-cache').parentNode.hidden,
                    members: sableMonitor.members.map(m => ({name: m.name, shard: m.shard,
                                                             state: last(m.state)})),
                    requests: sableMonitor.shards.map(s => ({name: s.name,
                        total: s.requests.reduce((a, v) => a + (v || 0), 0)})),
                    sections: [...document.querySelectorAll('section.shard')].map(s => s.id)};
        })()""" % (OPS,))
        shot = browser.screenshot(os.path.join(output_dir(), "router_page.png"))
        time.sleep(1.2)  # serverStatus samples a second past the page's
    finally:
        load.stop.set()
        status.stop.set()
        load.join(30)
        status.join(30)
        load.client.close()
        status.client.close()
        browser.close()
    prom = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % cluster["metrics"],
                                  timeout=10).read().decode()

    print("screenshot:", shot)
    assert os.path.getsize(shot) > 20000
    assert load.done > 50
    assert page["role"] == "router"
    charts = page["charts"]
    for c in ROUTER_CHARTS:
        assert charts["chart-" + c]["points"] >= page["samples"], (c, charts)
    for c in NOT_ON_A_ROUTER + ["repl_state", "repl_lag"]:
        assert "chart-" + c not in charts, (c, list(charts))
    assert page["cache_hidden"]

    # One section per shard, each with its member PRIMARY and lag, and the
    # router's requests; the load reached at least one shard.
    assert sorted(page["sections"]) == ["shard-shard0", "shard-shard1"], page["sections"]
    for i in range(2):
        for kind in ("state", "lag", "requests"):
            c = charts["chart-shard%d_%s" % (i, kind)]
            assert c["canvas"] >= 1 and c["points"] > 0, (i, kind, c)
            assert c["shard"] in page["sections"]
    assert sorted((m["shard"], m["name"], m["state"]) for m in page["members"]) == \
        [("shard0", cluster["shard_members"][0], 1), ("shard1", cluster["shard_members"][1], 1)]
    assert max(r["total"] for r in page["requests"]) > 0, page["requests"]

    # The totals on the page lie between the router's serverStatus readings
    # taken within a second before and after the sample the page shows.
    t = page["t_ms"]
    near = [s for s in status.samples if abs(s[0] - t) <= 1000]
    before = [s for s in near if s[0] <= t]
    after = [s for s in near if s[0] >= t]
    assert before and after, (t, [s[0] for s in status.samples][-20:])
    for k in OPS:
        shown = int(page["numbers"][k])
        assert before[0][1][k] <= shown <= after[-1][1][k], (k, shown, before[0][1][k],
                                                              after[-1][1][k])
    assert int(page["connections"]) in {s[2] for s in near}

    # The same figures for Prometheus.
    for m in cluster["shard_members"]:
        assert 'sable_shard_member_state{shard="shard%d",member="%s"} 1' % (
            cluster["shard_members"].index(m), m) in prom, prom[-2000:]
    assert 'sable_shard_requests_total{shard="shard0"}' in prom
    assert "sable_opcounters_total" in prom and "sable_wiredtiger_cache_bytes" not in prom


def test_a_killed_shard_member_shows_down(cluster):
    def states():
        j = json.load(urllib.request.urlopen("http://127.0.0.1:%d/api/series?since=0"
                                             % cluster["metrics"], timeout=10))
        last = lambda a: [v for v in a if v is not None][-1]  # noqa: E731
        return {(m["shard"], m["name"]): last(m["state"]) for m in j["members"]}
    a, b = cluster["shard_members"]
    assert states() == {("shard0", a): 1, ("shard1", b): 1}
    r = subprocess.run([sys.executable, cluster["launcher"], "kill", "1", "--dir", cluster["dir"]],
                       env=cluster["env"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    deadline = time.time() + 15
    while time.time() < deadline and states().get(("shard0", a)) != 8:
        time.sleep(0.5)
    assert states() == {("shard0", a): 8, ("shard1", b): 1}
    prom = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % cluster["metrics"],
                                  timeout=10).read().decode()
    assert 'sable_shard_member_state{shard="shard0",member="%s"} 8' % a in prom
    # Back up: PRIMARY again (and the router stops in 2 s, not the 17 s its
    # libmongoc pool takes to give up on a dead shard).
    r = subprocess.run([sys.executable, cluster["launcher"], "restart", "1", "--dir", cluster["dir"]],
                       env=cluster["env"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    deadline = time.time() + 15
    while time.time() < deadline and states().get(("shard0", a)) != 1:
        time.sleep(0.5)
    assert states() == {("shard0", a): 1, ("shard1", b): 1}
