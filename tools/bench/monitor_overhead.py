#!/usr/bin/python3
"""
What the monitoring page costs the server: YCSB workload A (50% reads, 50%
updates) with sable-bench against one data set, in alternating rounds, under
four set-ups:

  off        sabled without --metricsPort (no sampling thread at all)
  unwatched  --metricsPort on, nobody looking (the ring is sampled every second)
  poller     --metricsPort on, a client fetching api/series?since= every second,
             as the open page does (the server's side of a watcher, no browser)
  page       --metricsPort on, the page open in headless Chromium on this machine,
             refreshing every second (the server's side plus the browser's CPU,
             which shares this machine's cores with the server and the client)

It prints the throughput of every run and each set-up's median against "off".
A benchmark, not a test: it asserts nothing.

    /usr/bin/python3 tools/bench/monitor_overhead.py [--rounds 3] [--ops 40000]
        [--records 20000] [--threads 4] [--build build]
"""
import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "browser"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("sabled did not listen on %d" % port)


class Server:
    def __init__(self, build, dbpath, metrics):
        self.port = free_port()
        self.metrics_port = free_port() if metrics else None
        args = [os.path.join(build, "sabled"), "--port", str(self.port), "--dbpath", dbpath,
                "--logpath", os.path.join(dbpath, "sabled.log")]
        if metrics:
            args += ["--metricsPort", str(self.metrics_port)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def bench(build, port, phase, a):
    out = subprocess.run([os.path.join(build, "sable-bench"), phase, "mongodb",
                          "-P", os.path.join(ROOT, "workloads", "workloada"),
                          "-p", "recordcount=%d" % a.records, "-p", "operationcount=%d" % a.ops,
                          "-p", "mongodb.url=mongodb://127.0.0.1:%d/ycsb" % port,
                          "-threads", str(a.threads)],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"\[OVERALL\], Throughput\(ops/sec\), ([\d.]+)", out).group(1))


class Poller(threading.Thread):
    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stop, self.last = port, threading.Event(), 0

    def run(self):
        import json
        while not self.stop.is_set():
            url = "http://127.0.0.1:%d/api/series?since=%d" % (self.port, self.last)
            self.last = json.load(urllib.request.urlopen(url, timeout=10))["last"]
            self.stop.wait(1.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ops", type=int, default=40000)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sable-monitor-bench-")
    base = os.path.join(work, "base")
    os.makedirs(base)
    setups = ["off", "unwatched", "poller", "page"]
    results = {s: [] for s in setups}
    try:
        s = Server(a.build, base, False)
        bench(a.build, s.port, "load", a)
        s.stop()
        print("workload A, %d records, %d operations, %d threads, %d rounds; ops/s per run"
              % (a.records, a.ops, a.threads, a.rounds))
        for r in range(a.rounds):
            order = setups if r % 2 == 0 else list(reversed(setups))
            for setup in order:
                db = os.path.join(work, "run")
                shutil.rmtree(db, ignore_errors=True)
                shutil.copytree(base, db)
                os.remove(os.path.join(db, "sabled.log"))
                srv = Server(a.build, db, setup != "off")
                watcher = None
                try:
                    if setup == "poller":
                        watcher = Poller(srv.metrics_port)
                        watcher.start()
                    elif setup == "page":
                        import cdp
                        watcher = cdp.Browser()
                        watcher.open("http://127.0.0.1:%d/" % srv.metrics_port)
                        watcher.wait_for("window.sableMonitor && sableMonitor.ready")
                    ops = bench(a.build, srv.port, "run", a)
                    if setup == "page":
                        assert watcher.eval("sableMonitor.last") > 2  # it kept refreshing
                finally:
                    if isinstance(watcher, Poller):
                        watcher.stop.set()
                        watcher.join()
                    elif watcher is not None:
                        watcher.close()
                    srv.stop()
                results[setup].append(ops)
                print("  round %d  %-10s %9.0f" % (r + 1, setup, ops), flush=True)
        off = statistics.median(results["off"])
        print("median ops/s (change against off):")
        for setup in setups:
            m = statistics.median(results[setup])
            print("  %-10s %9.0f  %+6.1f%%" % (setup, m, 100.0 * (m - off) / off))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
