#!/usr/bin/python3
"""router-write-bench.py: an unordered insert and a multi update through two
sable-router builds side by side (issue 28, docs/sharding.md).

  scripts/router-write-bench.py --old PATH/sable-router [--new build/sable-router]
                                [--docs 20000] [--rounds 3]

Starts a cluster of two one-member shards with build/sable-cluster
(tests/integration/py/sharded.py), stops its balancer, and starts the two
router binaries on its config servers.  Each round, for old then new: drop
bench.c, shard it hashed on _id, have the router under test read the new
routing (a count), then time insert_many of --docs small documents
(ordered=False) and update_many({}, {$inc}) of them.  Prints every run's
seconds, the medians and the load average.
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration", "py"))
os.environ.setdefault("SABLED", os.path.join(HERE, "..", "build", "sabled"))
import pymongo  # noqa: E402

import sharded  # noqa: E402


def start_router(info, path, name):
    port = sharded.base_port(1)
    log = os.path.join(info["dir"], name + ".log")
    subprocess.run([path, "--configdb", "cfgRS/127.0.0.1:%d" % info["config"], "--port",
                    str(port), "--bind_ip", "127.0.0.1", "--logpath", log, "--fork",
                    "--pidfilepath", log + ".pid"], check=True, capture_output=True, timeout=60)
    return port, log + ".pid"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", default=sharded.ROUTER)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with sharded.cluster("sable-wbench-") as info:
        main_router = pymongo.MongoClient("127.0.0.1", info["router"])
        main_router.admin.command("balancerStop")
        main_router.admin.command("enableSharding", "bench")
        routers, pids = {}, []
        try:
            for label in ("old", "new"):
                port, pid = start_router(info, getattr(a, label), "r_" + label)
                pids.append(pid)
                routers[label] = pymongo.MongoClient("127.0.0.1", port)
            res = {(k, l): [] for k in ("insert", "update") for l in ("old", "new")}
            for rnd in range(a.rounds):
                for label in ("old", "new"):
                    main_router.bench.c.drop()
                    main_router.admin.command("shardCollection", "bench.c",
                                              key={"_id": "hashed"})
                    c = routers[label].bench.c
                    c.count_documents({})
                    docs = [{"_id": i, "x": i, "s": "abcdefgh"} for i in range(a.docs)]
                    t0 = time.perf_counter()
                    r = c.insert_many(docs, ordered=False)
                    t1 = time.perf_counter()
                    u = c.update_many({}, {"$inc": {"x": 1}})
                    t2 = time.perf_counter()
                    assert len(r.inserted_ids) == a.docs and u.modified_count == a.docs
                    res[("insert", label)].append(t1 - t0)
                    res[("update", label)].append(t2 - t1)
                    print("round %d %s: insert %.3f s, update %.3f s, load %.2f %.2f %.2f"
                          % ((rnd + 1, label, t1 - t0, t2 - t1) + os.getloadavg()), flush=True)
            for (kind, label), v in res.items():
                print("%s %s: %s median %.3f s" % (kind, label, " ".join("%.3f" % x for x in v),
                                                  sorted(v)[len(v) // 2]))
        finally:
            for pid in pids:
                with open(pid) as f:
                    os.kill(int(f.read().strip()), 15)


if __name__ == "__main__":
    main()
