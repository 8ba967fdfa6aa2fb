"""
The monitoring page in a real browser (Debian's headless Chromium over the
DevTools protocol, cdp.py): against a sabled under a short pymongo load, the
page draws every chart with data points, shows no replication chart on a
standalone, and the totals it shows match serverStatus within a second.  The
screenshot is saved as monitor_page.png in $SABLE_TEST_OUTPUT (ctest sets it
to build/test-output) or the system's temporary directory.

Run alone:  SABLED=build/sabled /usr/bin/python3 -m pytest -q tests/integration/browser
"""
import os
import random
import sys
import tempfile
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "py"))
from sabled import Sabled, free_port  # noqa: E402

import cdp  # noqa: E402  (chromium and python3-websocket: scripts/deps.sh)

CHARTS = ["cpu", "ops", "latency", "connections", "cache", "journal", "audit"]
OPS = ["insert", "query", "update", "delete", "getmore", "command"]


class Load(threading.Thread):
    """Inserts, point reads, updates and deletes until stopped."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.client = server.client()
        self.stop = threading.Event()
        self.done = 0

    def run(self):
        c = self.client.load.c
        i = 0
        while not self.stop.is_set() and i < 200000:
            i += 1
            c.insert_one({"_id": i, "s": "x" * 100})
            c.find_one({"_id": random.randint(1, i)})
            if i % 2 == 0:
                c.update_one({"_id": i - 1}, {"$set": {"u": i}})
            if i % 10 == 0:
                c.delete_one({"_id": i - 5})
            self.done = i


class Status(threading.Thread):
    """serverStatus every 100 ms: (localTime in ms, opcounters, connections.current)."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.client = server.client()
        self.stop = threading.Event()
        self.samples = []

    def run(self):
        while not self.stop.is_set():
            ss = self.client.admin.command("serverStatus")
            t = ss["localTime"].timestamp() * 1000
            self.samples.append((t, dict(ss["opcounters"]), ss["connections"]["current"]))
            time.sleep(0.1)


@pytest.fixture(scope="module")
def server():
    s = Sabled()
    s.metrics_port = free_port()
    try:
        s.start(["--metricsPort", str(s.metrics_port)])
        yield s
    finally:
        s.cleanup()


def output_dir():
    d = os.environ.get("SABLE_TEST_OUTPUT") or tempfile.gettempdir()
    os.makedirs(d, exist_ok=True)
    return d


def test_page_draws_live_charts_that_match_server_status(server):
    load, status = Load(server), Status(server)
    load.start()
    status.start()
    browser = cdp.Browser()
    try:
        time.sleep(3)  # a few seconds of load in the ring before the page opens
        browser.open("http://127.0.0.1:%d/" % server.metrics_port)
        # Every chart drawn, with points; then a few live refreshes on top.
        browser.wait_for("window.sableMonitor && sableMonitor.ready && "
                         "document.querySelectorAll('.chart canvas').length >= %d" % len(CHARTS))
        first_last = browser.eval("sableMonitor.last")
        browser.wait_for("sableMonitor.last >= %d" % (first_last + 3), timeout=15)
        page = browser.eval("""(() => {
            const charts = {};
            for (const el of document.querySelectorAll('.chart'))
                charts[el.id] = {points: +el.dataset.points,
                                 canvas: el.querySelectorAll('canvas').length};
            const num = id => document.getElementById('num-' + id).textContent;
            return {charts, draws: sableMonitor.draws, t_ms: +document.getElementById('num-time').dataset.value,
                    numbers: Object.fromEntries(%s.map(k => [k, num(k)])),
                    connections: num('connections'),
                    ops: sableMonitor.values.ops_query.slice(-5),
                    samples: sableMonitor.t.length,
                    x: Object.values(sableMonitor.charts).map(c => [c.plot.scales.x.min,
                                                                    c.plot.scales.x.max]),
                    ticks: ['cache', 'ops'].map(id => sableMonitor.charts[id].plot.axes[1].values(
                        sableMonitor.charts[id].plot, [0.0512, 0.0514, 0.0516], 1, 0.0002)),
                    big: sableMonitor.charts.ops.plot.axes[1].values(
                        sableMonitor.charts.ops.plot, [0, 5000, 10000], 1, 5000)};
        })()""" % (OPS,))
        shot = browser.screenshot(os.path.join(output_dir(), "monitor_page.png"))
        time.sleep(1.2)  # serverStatus samples a second past the page's
    finally:
        load.stop.set()
        status.stop.set()
        load.join(30)
        status.join(30)
        load.client.close()
        status.client.close()
        browser.close()

    print("screenshot:", shot)
    assert os.path.getsize(shot) > 20000
    assert load.done > 100
    # Every chart is there, drawn, with data points; nothing for replication.
    for c in CHARTS:
        assert page["charts"]["chart-" + c]["canvas"] >= 1, c
        assert page["charts"]["chart-" + c]["points"] >= page["samples"], (c, page["charts"])
    assert not any(k.startswith("chart-repl") for k in page["charts"])
    assert page["draws"] > len(CHARTS)
    # y tick labels as precise as their spacing: small percentages are not all "0"
    assert page["ticks"] == [["0.0512", "0.0514", "0.0516"]] * 2, page["ticks"]
    assert page["big"] == ["0", "5000", "10000"], page["big"]
    # one time axis: every chart shows the same window
    assert len(page["x"]) >= len(CHARTS) and len({tuple(x) for x in page["x"]}) == 1, page["x"]
    assert any(v > 0 for v in page["ops"] if v is not None), page["ops"]

    # The totals on the page lie between serverStatus readings taken within a
    # second before and after the sample the page shows (counters only grow).
    t = page["t_ms"]
    near = [s for s in status.samples if abs(s[0] - t) <= 1000]
    before = [s for s in near if s[0] <= t]
    after = [s for s in near if s[0] >= t]
    assert before and after, (t, [s[0] for s in status.samples][-20:])
    for k in OPS:
        shown = int(page["numbers"][k])
        assert before[0][1][k] <= shown <= after[-1][1][k], (k, shown, before[0][1][k], after[-1][1][k])
    shown_conn = int(page["connections"])
    assert shown_conn in {s[2] for s in near}, (shown_conn, [s[2] for s in near])


def test_replica_set_member_charts():
    """A replica-set member's page adds the members' state and lag charts, drawn with
    points, the state PRIMARY."""
    s = Sabled()
    s.metrics_port = free_port()
    browser = None
    try:
        s.start(["--replSet", "rs1", "--metricsPort", str(s.metrics_port)])
        c = s.client()
        c.admin.command("replSetInitiate", {"_id": "rs1", "members": [
            {"_id": 0, "host": "127.0.0.1:%d" % int(s.port)}]})
        deadline = time.time() + 30
        while not c.admin.command("hello").get("isWritablePrimary"):
            assert time.time() < deadline, "no primary"
            time.sleep(0.2)
        c.close()
        browser = cdp.Browser()
        browser.open("http://127.0.0.1:%d/" % s.metrics_port)
        browser.wait_for("window.sableMonitor && sableMonitor.ready && "
                         "document.getElementById('chart-repl_state') && "
                         "+document.getElementById('chart-repl_lag').dataset.points >= 2",
                         timeout=20)
        got = browser.eval("""(() => ({
            state: +document.getElementById('chart-repl_state').dataset.points,
            lag: +document.getElementById('chart-repl_lag').dataset.points,
            members: sableMonitor.members.map(m => [m.name, m.state[m.state.length - 1]])}))()""")
        browser.screenshot(os.path.join(output_dir(), "monitor_page_replset.png"))
    finally:
        if browser is not None:
            browser.close()
        s.cleanup()
    assert got["state"] >= 2 and got["lag"] >= 2, got
    assert got["members"] == [["127.0.0.1:%d" % int(s.port), 1]], got
