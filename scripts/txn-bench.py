#!/usr/bin/python3
"""
txn-bench.py: issue 26's throughput comparisons, in one run, with pymongo.

  1. single updates: T threads, each update_one({_id: k}, {$inc}) on a random
     document, no session transaction, retryWrites off;
  2. transactions: T threads, each a transaction of two such updates on two
     different random documents (start_transaction, 2 x update_one,
     commit_transaction; a TransientTransactionError is retried and counted);
  3. retryable writes: the single updates of 1 again with retryWrites on
     (lsid + txnNumber on every update) against the same run with it off.

Each phase runs for --seconds after a short warm-up, --rounds times (1 and 2
alternating, then 3's two halves alternating; the medians are compared); all
use the same write concern (--w, default 1).  Without --uri it starts a one-member replica set of
build/sabled on a free port in a temporary directory and removes it after.
Prints the rates and the ratios (transactions / single updates, retryable /
plain) and, when it started the server, the server's CPU time (/proc utime +
stime) per operation in each phase; asserts nothing.

  /usr/bin/python3 scripts/txn-bench.py [--uri URI] [--threads 8] [--seconds 10]
      [--docs 10000] [--w 1] [--rounds 3]
"""
import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pymongo
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.write_concern import WriteConcern


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_set(sabled):
    d = tempfile.mkdtemp(prefix="txn-bench-")
    port = free_port()
    os.makedirs(os.path.join(d, "db"))
    proc = subprocess.Popen([sabled, "--dbpath", os.path.join(d, "db"), "--port", str(port),
                             "--bind_ip", "127.0.0.1", "--replSet", "rs0", "--oplogSizeMB", "256",
                             "--logpath", os.path.join(d, "sabled.log")])
    c = pymongo.MongoClient("127.0.0.1", port, directConnection=True,
                            serverSelectionTimeoutMS=20000)
    c.admin.command("ping")
    c.admin.command("replSetInitiate", {"_id": "rs0", "members": [
        {"_id": 0, "host": "127.0.0.1:%d" % port}]})
    deadline = time.time() + 30
    while not c.admin.command("hello").get("isWritablePrimary"):
        if time.time() > deadline:
            raise RuntimeError("no primary")
        time.sleep(0.2)
    c.close()
    return proc, d, "mongodb://127.0.0.1:%d/?replicaSet=rs0" % port


def cpu_seconds(pid):
    """utime + stime of process pid (its threads included), in seconds; None without one."""
    if pid is None:
        return None
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_phase(threads, seconds, body, pid=None):
    """Run body(rng) in a loop on each thread; returns (operations, elapsed,
    the server's CPU seconds in that time or None)."""
    stop = threading.Event()
    counts = [0] * threads
    errors = []

    def worker(i):
        rng = random.Random(i * 7919 + int(time.time()))
        while not stop.is_set():
            try:
                counts[i] += body(rng)
            except PyMongoError as e:
                errors.append(repr(e))
                return

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    time.sleep(min(2.0, seconds / 4))  # warm-up
    start_counts, t0, c0 = sum(counts), time.time(), cpu_seconds(pid)
    time.sleep(seconds)
    done, elapsed, c1 = sum(counts) - start_counts, time.time() - t0, cpu_seconds(pid)
    stop.set()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError("errors: %s" % errors[:3])
    return done, elapsed, (c1 - c0 if pid is not None else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uri")
    ap.add_argument("--sabled", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                     "sabled"))
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--docs", type=int, default=10000)
    ap.add_argument("--w", default="1")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    w = int(a.w) if a.w.isdigit() else a.w
    proc = tmp = None
    uri = a.uri
    if uri is None:
        proc, tmp, uri = start_set(os.path.abspath(a.sabled))
    try:
        plain = pymongo.MongoClient(uri, retryWrites=False, maxPoolSize=a.threads * 2)
        retry = pymongo.MongoClient(uri, retryWrites=True, maxPoolSize=a.threads * 2)
        wc = WriteConcern(w=w)
        db = plain.get_database("txnbench", write_concern=wc)
        db.c.drop()
        db.c.insert_many([{"_id": i, "n": 0} for i in range(a.docs)])
        pc = db.c
        rc = retry.get_database("txnbench", write_concern=wc).c
        conflicts = [0]

        def single(rng):
            pc.update_one({"_id": rng.randrange(a.docs)}, {"$inc": {"n": 1}})
            return 1

        def single_retryable(rng):
            rc.update_one({"_id": rng.randrange(a.docs)}, {"$inc": {"n": 1}})
            return 1

        sessions = {}

        def txn(rng):
            tid = threading.get_ident()
            s = sessions.get(tid)
            if s is None:
                s = sessions[tid] = retry.start_session()
            x, y = rng.sample(range(a.docs), 2)
            while True:
                try:
                    s.start_transaction(write_concern=wc)
                    rc.update_one({"_id": x}, {"$inc": {"n": 1}}, session=s)
                    rc.update_one({"_id": y}, {"$inc": {"n": -1}}, session=s)
                    s.commit_transaction()
                    return 1
                except OperationFailure as e:
                    if s.in_transaction:
                        s.abort_transaction()
                    if not e.has_error_label("TransientTransactionError"):
                        raise
                    conflicts[0] += 1

        res, cpu = {}, {}
        pid = proc.pid if proc is not None else None
        # Alternating rounds, medians: this shared machine's speed drifts between phases.
        phases = []
        for _ in range(a.rounds):
            phases += [("single updates", single), ("transactions of 2 updates", txn)]
        for _ in range(a.rounds):
            phases += [("single updates, retryWrites off", single),
                       ("single updates, retryWrites on", single_retryable)]
        for name, body in phases:
            n, el, c = run_phase(a.threads, a.seconds, body, pid)
            res.setdefault(name, []).append(n / el)
            per = ""
            if c is not None and n > 0:
                cpu.setdefault(name, []).append(1e6 * c / n)
                per = ", sabled %.0f us CPU each" % (1e6 * c / n)
            print("%-34s %9.0f /s  (%d in %.1f s, %d threads, w: %s%s)" %
                  (name, n / el, n, el, a.threads, a.w, per), flush=True)
        res = {k: sorted(v)[len(v) // 2] for k, v in res.items()}
        cpu = {k: sorted(v)[len(v) // 2] for k, v in cpu.items()}
        print("medians of %d rounds: %s" % (a.rounds, ", ".join(
            "%s %.0f/s" % (k, v) for k, v in res.items())))
        for s in sessions.values():
            s.end_session()
        print("transient transaction errors retried: %d" % conflicts[0])
        print("transactions / single updates:     %.2f" %
              (res["transactions of 2 updates"] / res["single updates"]))
        print("retryable cost (plain / retryable): %.3f (%+.1f%% time per write)" % (
            res["single updates, retryWrites off"] / res["single updates, retryWrites on"],
            100 * (res["single updates, retryWrites off"] /
                   res["single updates, retryWrites on"] - 1)))
        if cpu:  # the server's own cost, whatever the client and the machine's load do
            print("sabled CPU per operation (medians): %s" % ", ".join(
                "%s %.0f us" % (k, v) for k, v in cpu.items()))
            print("sabled CPU, transaction / single update: %.2f; retryable / plain: %+.1f%%" % (
                cpu["transactions of 2 updates"] / cpu["single updates"],
                100 * (cpu["single updates, retryWrites on"] /
                       cpu["single updates, retryWrites off"] - 1)))
        plain.close()
        retry.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
