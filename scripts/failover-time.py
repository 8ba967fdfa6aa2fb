#!/usr/bin/python3
"""failover-time.py: kill -9 the primary of a sable-cluster set N times and print,
for each kill, the seconds until the first acknowledged w:"majority" write on
the new primary (the killed member is restarted and rejoins between rounds).

  scripts/failover-time.py --dir DIR [--rounds N]   (a set started with build/sable-cluster)
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import pymongo
from pymongo.write_concern import WriteConcern

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "sable-cluster")

a = argparse.ArgumentParser()
a.add_argument("--dir", required=True)
a.add_argument("--rounds", type=int, default=5)
args = a.parse_args()
st = json.load(open(os.path.join(args.dir, "cluster.json")))
hosts = ",".join("127.0.0.1:%d" % m["port"] for m in st["members"])
c = pymongo.MongoClient("mongodb://%s/?replicaSet=%s" % (hosts, st["replset"]),
                        heartbeatFrequencyMS=500, serverSelectionTimeoutMS=60000)
coll = c.bench.failover.with_options(write_concern=WriteConcern(w="majority", wtimeout=5000))
times = []
for r in range(args.rounds):
    coll.insert_one({"round": r, "before": True})
    h = c.admin.command("hello")
    prim = h["primary"]
    n = next(i for i, m in enumerate(st["members"]) if "127.0.0.1:%d" % m["port"] == prim)
    t0 = time.time()
    subprocess.run([CLUSTER, "kill", str(n), "--dir", args.dir], check=True)
    while time.time() - t0 < 120:
        try:
            coll.insert_one({"round": r})
            break
        except pymongo.errors.PyMongoError:
            time.sleep(0.05)
    dt = time.time() - t0
    times.append(dt)
    print("round %d: %.2f s" % (r, dt), flush=True)
    subprocess.run([CLUSTER, "restart", str(n), "--dir", args.dir], check=True)
    time.sleep(4)  # let it rejoin and catch up
print("kills %d  median %.2f s  min %.2f  max %.2f" % (len(times), statistics.median(times),
                                                      min(times), max(times)))
