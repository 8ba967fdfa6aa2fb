#!/usr/bin/python3
"""
Makes the pictures docs/monitoring.md shows: the monitoring page during a
YCSB workload A run (docs/img/monitoring-page.png, headless Chromium) and
that run's sable-bench --chart (docs/img/bench-chart.png).  Starts its own
sabled on free 127.0.0.1 ports with a temporary dbpath; takes about a minute.
With --router: sable-router's page (docs/img/router-page.png) during the same
workload through a two-shard cluster (build/sable-cluster, one-member shards,
usertable sharded on hashed _id).

    scripts/build.sh && /usr/bin/python3 scripts/monitor-screenshot.py [--seconds 60] [--router]
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "browser"))
import cdp  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def router_page(a):
    """The router's page during workload A through a two-shard cluster."""
    import pymongo
    work = tempfile.mkdtemp(prefix="sable-rshot-")
    base, rport, mport = 21300 + os.getpid() % 500 * 8, free_port(), free_port()
    env = dict(os.environ, SABLED=os.path.join(a.build, "sabled"),
               SABLE_ROUTER=os.path.join(a.build, "sable-router"))
    launcher = [sys.executable, os.path.join(a.build, "sable-cluster")]
    browser = None
    try:
        subprocess.run(launcher + ["start", "--sharded", "--shards", "2", "--members", "1",
                                   "--port", str(base), "--router-port", str(rport),
                                   "--router-arg=--metricsPort=%d" % mport, "--oplog-mb", "64",
                                   "--dir", work], check=True, env=env, stdout=subprocess.DEVNULL)
        with pymongo.MongoClient("127.0.0.1", rport) as c:
            c.admin.command("enableSharding", "ycsb")
            c.admin.command("shardCollection", "ycsb.usertable", key={"_id": "hashed"})
        bench = [os.path.join(a.build, "sable-bench")]
        common = ["mongodb", "-P", os.path.join(ROOT, "workloads", "workloada"),
                  "-p", "recordcount=20000", "-p", "mongodb.url=mongodb://127.0.0.1:%d/ycsb" % rport]
        subprocess.run(bench + ["load"] + common + ["-threads", "4"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        half = a.seconds // 2
        for target, secs in ((1000, half), (0, a.seconds - half)):
            subprocess.run(bench + ["run"] + common + [
                "-threads", "8", "-target", str(target), "-p", "operationcount=10000000",
                "-p", "maxexecutiontime=%d" % secs], check=True,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2)
        browser = cdp.Browser(width=1400, height=1800)
        browser.open("http://127.0.0.1:%d/" % mport)
        browser.wait_for("window.sableMonitor && sableMonitor.ready && "
                         "document.querySelectorAll('section.shard .chart canvas').length >= 8")
        time.sleep(1.5)
        print("wrote", browser.screenshot(os.path.join(a.out, "router-page.png")))
    finally:
        if browser is not None:
            browser.close()
        subprocess.run(launcher + ["stop", "--dir", work], env=env, stdout=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60, help="length of the run shown")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--router", action="store_true",
                    help="sable-router's page (router-page.png) instead of sabled's")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.router:
        router_page(a)
        return
    work = tempfile.mkdtemp(prefix="sable-shot-")
    port, mport = free_port(), free_port()
    srv = subprocess.Popen([os.path.join(a.build, "sabled"), "--port", str(port), "--dbpath", work,
                            "--logpath", os.path.join(work, "sabled.log"),
                            "--metricsPort", str(mport)])
    browser = None
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                time.sleep(0.1)
        bench = [os.path.join(a.build, "sable-bench")]
        common = ["mongodb", "-P", os.path.join(ROOT, "workloads", "workloada"),
                  "-p", "recordcount=20000", "-p", "mongodb.url=mongodb://127.0.0.1:%d/ycsb" % port]
        subprocess.run(bench + ["load"] + common + ["-threads", "2"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # A run held to 1,500 ops/s, then one as fast as it goes, so the charts
        # have a shape to read; the second run's --chart is the bench figure.
        half = a.seconds // 2
        runs = []
        for target, secs, chart in ((1500, half, []),
                                    (0, a.seconds - half, ["--chart", os.path.join(a.out, "bench-chart.png")])):
            r = subprocess.run(bench + ["run"] + common + [
                "-threads", "4", "-target", str(target), "-p", "operationcount=10000000",
                "-p", "maxexecutiontime=%d" % secs, "-p", "status.interval=2"] + chart,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            runs.append(r.stderr.strip().splitlines()[-1])
        time.sleep(2)
        browser = cdp.Browser(width=1400, height=1250)
        browser.open("http://127.0.0.1:%d/" % mport)
        browser.wait_for("window.sableMonitor && sableMonitor.ready && sableMonitor.draws > 7")
        time.sleep(1.5)
        shot = browser.screenshot(os.path.join(a.out, "monitoring-page.png"))
        print("wrote", shot)
        print("wrote", os.path.join(a.out, "bench-chart.png"), "(the second run's)")
    finally:
        if browser is not None:
            browser.close()
        srv.send_signal(signal.SIGTERM)
        srv.wait(60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
