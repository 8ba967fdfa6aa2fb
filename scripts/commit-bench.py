#!/usr/bin/python3
"""
commit-bench.py: how fast a replica set primary commits concurrent writes
(issue 24, parallel oplog commits).  Starts a 3-member set with
scripts/sable-cluster (SABLED, or --sabled, picks the binary) in a temporary
directory on ports below 32768, runs T threads of w:1 single-document inserts
(no retryable writes; spread over --procs client processes, each with its own
pymongo client, so the client's interpreter lock is not the limit) against
the primary for --seconds after a warm-up, --rounds times, and prints for each
round the inserts per second and the primary's CPU time (/proc utime + stime)
per insert, then the medians.  Stops the set and removes the directory;
asserts nothing.

  /usr/bin/python3 scripts/commit-bench.py [--sabled build/sabled] [--threads 8]
      [--procs 1] [--seconds 10] [--rounds 3] [--doc-bytes 100]
"""
import argparse
import json
import multiprocessing
import os
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time

import pymongo
from pymongo.write_concern import WriteConcern

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "sable-cluster")


def free_base(n):
    """The first of n consecutive free ports below 32768."""
    for _ in range(200):
        base = random.randrange(20000, 32000)
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                s.close()
            return base
        except OSError:
            continue
    raise SystemExit("no free ports")


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_proc(uri, threads, first, payload, stop):
    """One client process: threads writers until stop is set."""
    c = pymongo.MongoClient(uri, retryWrites=False, maxPoolSize=threads + 2,
                            serverSelectionTimeoutMS=30000)
    coll = c.bench.commits.with_options(write_concern=WriteConcern(w=1))

    def writer(k):
        n = 0
        while not stop.is_set():
            coll.insert_one({"k": k, "n": n, "p": payload})
            n += 1
    ts = [threading.Thread(target=writer, args=(first + k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    c.close()


def run_round(uri, coll, threads, procs, seconds, payload, pid):
    stop = multiprocessing.Event()
    ps = []
    for i in range(procs):
        n = threads // procs + (1 if i < threads % procs else 0)
        if n > 0:
            ps.append(multiprocessing.Process(target=client_proc,
                                              args=(uri, n, 1000 * i, payload, stop)))
    for p in ps:
        p.start()
    time.sleep(2)  # connections and warm-up, not counted
    c0, t0 = cpu_seconds(pid), time.time()
    done0 = coll.estimated_document_count()
    time.sleep(seconds)
    done1 = coll.estimated_document_count()
    c1, t1 = cpu_seconds(pid), time.time()
    stop.set()
    for p in ps:
        p.join()
    ops = done1 - done0
    return ops / (t1 - t0), (c1 - c0) / ops * 1e6 if ops else float("nan")


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--sabled", default=os.environ.get("SABLED"))
    a.add_argument("--threads", type=int, default=8)
    a.add_argument("--procs", type=int, default=1)
    a.add_argument("--seconds", type=float, default=10)
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--doc-bytes", type=int, default=100)
    args = a.parse_args()
    env = dict(os.environ)
    if args.sabled:
        env["SABLED"] = os.path.abspath(args.sabled)
    d = tempfile.mkdtemp(prefix="commit-bench-")
    port = free_base(3)
    try:
        subprocess.run([CLUSTER, "start", "--replset", "rs0", "--members", "3", "--dir", d,
                        "--port", str(port)], check=True, env=env, stdout=subprocess.DEVNULL)
        st = json.load(open(os.path.join(d, "cluster.json")))
        hosts = ",".join("127.0.0.1:%d" % m["port"] for m in st["members"])
        uri = "mongodb://%s/?replicaSet=rs0" % hosts
        c = pymongo.MongoClient(uri, serverSelectionTimeoutMS=30000)
        prim = c.admin.command("hello")["primary"]
        pid = next(m["pid"] for m in st["members"] if "127.0.0.1:%d" % m["port"] == prim)
        coll = c.bench.commits
        payload = "x" * args.doc_bytes
        rates, cpus = [], []
        for r in range(args.rounds):
            rate, cpu = run_round(uri, coll, args.threads, args.procs, args.seconds, payload,
                                  pid)
            rates.append(rate)
            cpus.append(cpu)
            print("round %d: %8.0f inserts/s  %6.1f us primary CPU per insert" % (r, rate, cpu),
                  flush=True)
        print("sabled %s  threads %d (%d processes)  median %.0f inserts/s  %.1f us CPU "
              "per insert" % (env.get("SABLED", "build/sabled"), args.threads, args.procs,
                              statistics.median(rates), statistics.median(cpus)))
        c.close()
    finally:
        subprocess.run([CLUSTER, "stop", "--dir", d], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
