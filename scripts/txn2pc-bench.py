#!/usr/bin/python3
"""txn2pc-bench.py: what two-phase commit costs (issue 28, docs/sharding.md).

  scripts/txn2pc-bench.py [--txns 300] [--rounds 3]

Starts a cluster of two one-member shards and a router with
build/sable-cluster (tests/integration/py/sharded.py), then runs, one client
thread, --txns transactions that each update two documents on ONE shard
(plain commitTransaction) and --txns that update one document on EACH shard
(coordinateCommitTransaction, prepare and commit on both), alternating the
two kinds in --rounds rounds.  Printed per kind: latency p50 / p99 of a whole
transaction (the two updates and the commit) in ms, and the CPU time (user +
system, from /proc/PID/stat) the router and both shards used per
transaction.  The machine's load average is printed with them.
"""
import argparse
import os
import sys
import time

import pymongo

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration", "py"))
import sharded  # noqa: E402


def cpu_s(pids):
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def pids_of(d):
    out = []
    for root, _, files in os.walk(d):
        for f in files:
            if f.endswith(".pid"):
                with open(os.path.join(root, f)) as fh:
                    t = fh.read().strip()
                    if t.isdigit():
                        out.append(int(t))
    return out


def run(client, coll, keys, n):
    lat = []
    for i in range(n):
        t0 = time.monotonic()
        with client.start_session() as s:
            with s.start_transaction():
                for k in keys:
                    coll.update_one({"_id": k, "k": k}, {"$inc": {"v": 1}}, session=s)
        lat.append(time.monotonic() - t0)
    return lat


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))] * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--txns", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with sharded.cluster("sable-2pc-bench-") as info:
        c = pymongo.MongoClient("127.0.0.1", info["router"])
        c.admin.command("enableSharding", "b")
        c.admin.command("shardCollection", "b.t", key={"k": 1})
        c.admin.command("split", "b.t", middle={"k": 0})
        low = c.config.databases.find_one({"_id": "b"})["primary"] == "shard0"
        if low:
            c.admin.command("moveChunk", "b.t", find={"k": 0}, to="shard1")
        else:
            c.admin.command("moveChunk", "b.t", find={"k": -1}, to="shard0")
        coll = c.b.t
        coll.insert_many([{"_id": k, "k": k, "v": 0} for k in (-2, -1, 1)])
        pids = pids_of(info["dir"])
        kinds = {"1 shard": [-2, -1], "2 shards": [-1, 1]}
        lat = {k: [] for k in kinds}
        cpu = {k: 0.0 for k in kinds}
        run(c, coll, kinds["2 shards"], 20)  # warm up
        for _ in range(a.rounds):
            for name, keys in kinds.items():
                c0 = cpu_s(pids)
                lat[name] += run(c, coll, keys, a.txns)
                cpu[name] += cpu_s(pids) - c0
        n = a.txns * a.rounds
        print("load average %.1f %.1f %.1f" % os.getloadavg())
        for name in kinds:
            print("%-8s %d txns: p50 %.2f ms, p99 %.2f ms, server CPU %.2f ms per txn"
                  % (name, n, pct(lat[name], 50), pct(lat[name], 99), cpu[name] / n * 1000))
        c.close()


if __name__ == "__main__":
    main()
