#!/usr/bin/python3
"""
How fast a secondary applies the oplog: a 2-member set (the second member
priority 0, votes 0, so the primary stays primary while it is paused) on free
ports; the secondary is paused (SIGSTOP), the primary takes --docs inserts
(w: 1, batches of 1,000 small documents), the secondary is resumed and timed
until its last applied entry is the primary's last one.  Prints, per round,
entries applied per second and the secondary's CPU seconds per 1,000 entries
(utime + stime from /proc), with the load average.  Several --sabled binaries
are alternated round by round (old/new builds on a loaded machine).

  scripts/apply-rate.py [--sabled build/sabled ...] [--docs 20000] [--rounds 3]
                        [--sabled-arg=ARG ...]
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

import pymongo

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait(fn, timeout=60):
    end = time.time() + timeout
    while True:
        try:
            v = fn()
            if v:
                return v
        except pymongo.errors.PyMongoError:
            pass
        if time.time() > end:
            raise RuntimeError("timed out")
        time.sleep(0.1)


def last_ts(c):
    d = c.local["oplog.rs"].find_one(sort=[("$natural", -1)])
    return d["ts"]


def one_round(sabled, docs, extra):
    d = tempfile.mkdtemp(prefix="sable-apply-rate-")
    procs = []
    try:
        ports = [free_port(), free_port()]
        for i, p in enumerate(ports):
            db = os.path.join(d, "m%d" % i)
            os.makedirs(db)
            procs.append(subprocess.Popen(
                [sabled, "--replSet", "rs0", "--port", str(p), "--bind_ip", "127.0.0.1",
                 "--dbpath", db, "--oplogSizeMB", "512", "--logpath",
                 os.path.join(d, "m%d.log" % i)] + extra,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        cl = [pymongo.MongoClient("127.0.0.1", p, directConnection=True,
                                  serverSelectionTimeoutMS=20000) for p in ports]
        wait(lambda: cl[0].admin.command("ping"))
        wait(lambda: cl[1].admin.command("ping"))
        cl[0].admin.command("replSetInitiate", {"_id": "rs0", "members": [
            {"_id": 0, "host": "127.0.0.1:%d" % ports[0]},
            {"_id": 1, "host": "127.0.0.1:%d" % ports[1], "priority": 0, "votes": 0}]})
        wait(lambda: cl[0].admin.command("hello").get("isWritablePrimary"))
        wait(lambda: cl[1].admin.command("hello").get("secondary"))
        coll = cl[0].bench.get_collection("t", write_concern=pymongo.WriteConcern(w=1))
        coll.insert_one({"_id": -1})
        wait(lambda: last_ts(cl[1]) == last_ts(cl[0]))
        pid = procs[1].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            for b in range(0, docs, 1000):
                coll.insert_many([{"_id": i, "f": "x" * 100, "n": i}
                                  for i in range(b, min(docs, b + 1000))])
        finally:
            os.kill(pid, signal.SIGCONT)
        target = last_ts(cl[0])
        c0, t0 = cpu_s(pid), time.time()
        wait(lambda: last_ts(cl[1]) >= target, timeout=600)
        t1, c1 = time.time(), cpu_s(pid)
        return docs / (t1 - t0), (c1 - c0) * 1000 / docs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sabled", action="append")
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sabled-arg", action="append", default=[])
    a = ap.parse_args()
    bins = a.sabled or [os.path.join(REPO, "build", "sabled")]
    for r in range(a.rounds):
        for b in bins:
            rate, cpu = one_round(b, a.docs, a.sabled_arg)
            print("round %d %s: %.0f entries/s applied, %.3f CPU s per 1,000 entries "
                  "(load %.1f)" % (r, b, rate, cpu, os.getloadavg()[0]))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
