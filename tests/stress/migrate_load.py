#!/usr/bin/python3
"""
Migrations under load: YCSB's workload A (50% reads, 50% updates of one
field, uniform keys) through the router on ycsb.usertable sharded on
{_id: "hashed"}, while chunks move back and forth between two shards with
moveChunk.  Afterwards every document must equal what the load's
acknowledged updates made it, the count must be the records loaded, a full
scan must see every _id once, and the shards together must hold each
document once (the donors' copies deleted).

  tests/stress/migrate_load.py --seconds 60 --threads 8 --records 20000
      starts its own cluster (build/sable-cluster start --sharded --shards 2
      --members 1) in a temporary directory and stops it afterwards
  tests/stress/migrate_load.py --router 30000 --shards 30101,30102 ...
      uses a running cluster (the collection ycsb.usertable is dropped)
  --balancer: the load moves chunks onto shard0 and the balancer (started,
      the collection's chunk size 1 MiB) moves them back while the shards'
      data differs by 3 MiB or more, so both move chunks under the load

Prints one JSON line: operations, errors, migrations and their times.  Exits
1 when a check fails.  tests/integration/py/test_migration.py runs a short
version (run()) in the default suite.
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time

import pymongo
from bson import json_util


def _digest(docs):
    h = hashlib.sha256()
    for d in sorted(docs, key=lambda d: d["_id"]):
        h.update(json_util.dumps(d, sort_keys=True).encode())
    return h.hexdigest()


def _value(rnd, n=100):
    return "".join(rnd.choice(string.ascii_letters) for _ in range(n))


def run(router_port, shard_ports, seconds=5.0, threads=4, records=2000, chunks=8, seed=1,
        balancer=False):
    """Load, run workload A with migrations for `seconds`, check.  Returns a
    summary dict; summary["failures"] lists what did not hold.  balancer:
    the load piles chunks onto shard0 with moveChunk while the balancer
    (on) moves them back, instead of moving random chunks itself."""
    rnd = random.Random(seed)
    mongos = pymongo.MongoClient("127.0.0.1", router_port, uuidRepresentation="standard")
    shards = [pymongo.MongoClient("127.0.0.1", p, directConnection=True) for p in shard_ports]
    try:
        mongos.admin.command("balancerStop")
        mongos.ycsb.usertable.drop()
        mongos.admin.command("enableSharding", "ycsb")
        mongos.admin.command("shardCollection", "ycsb.usertable", key={"_id": "hashed"},
                             numInitialChunks=chunks)
        if balancer:
            # the balancer compares data sizes (3 chunk sizes apart is out
            # of balance): a 1 MiB chunk size makes a few MB of records count
            mongos.admin.command("configureCollectionBalancing", "ycsb.usertable",
                                 chunkSize=1)
        expected = {}
        batch = []
        for i in range(records):
            d = {"_id": "user%d" % i}
            for f in range(10):
                d["field%d" % f] = _value(rnd)
            expected[d["_id"]] = d
            batch.append(d)
            if len(batch) == 500:
                mongos.ycsb.usertable.insert_many(batch)
                batch = []
        if batch:
            mongos.ycsb.usertable.insert_many(batch)

        stop = threading.Event()
        errors, ops = [], [0] * threads
        locks = [threading.Lock() for _ in range(16)]
        keys = list(expected)

        def client(n):
            c = pymongo.MongoClient("127.0.0.1", router_port)
            r = random.Random(seed * 1000 + n)
            coll = c.ycsb.usertable
            try:
                while not stop.is_set():
                    k = r.choice(keys)
                    if r.random() < 0.5:
                        d = coll.find_one({"_id": k})
                        if d is None:
                            errors.append("read: %s not found" % k)
                    else:
                        f = "field%d" % r.randrange(10)
                        v = _value(r)
                        lk = locks[hash(k) % 16]
                        with lk:  # one writer per key at a time: the last ack wins
                            res = coll.update_one({"_id": k}, {"$set": {f: v}})
                            if res.matched_count != 1:
                                errors.append("update: %s matched %d" % (k, res.matched_count))
                            expected[k][f] = v
                    ops[n] += 1
            except Exception as e:  # noqa: BLE001 - any failure is a finding
                errors.append(repr(e))
            finally:
                c.close()

        workers = [threading.Thread(target=client, args=(n,)) for n in range(threads)]
        t0 = time.time()
        for w in workers:
            w.start()
        moves, move_ms = 0, []
        uuid = mongos.config.collections.find_one({"_id": "ycsb.usertable"})["uuid"]
        before = mongos.config.changelog.count_documents({"what": "moveChunk.from",
                                                         "details.note": "success"})
        if balancer:
            mongos.admin.command("balancerStart")
        try:
            while time.time() - t0 < seconds and not errors:
                if balancer:
                    on1 = list(mongos.config.chunks.find({"uuid": uuid, "shard": "shard1"}))
                    if not on1:
                        time.sleep(0.2)
                        continue
                    ch, to = rnd.choice(on1), "shard0"
                else:
                    ch = rnd.choice(list(mongos.config.chunks.find({"uuid": uuid})))
                    to = "shard1" if ch["shard"] == "shard0" else "shard0"
                m0 = time.time()
                try:
                    mongos.admin.command("moveChunk", "ycsb.usertable",
                                         bounds=[ch["min"], ch["max"]], to=to)
                except pymongo.errors.OperationFailure as e:
                    if not balancer or e.code != 117:
                        raise
                    time.sleep(0.1)  # the balancer's migration holds the shards
                    continue
                move_ms.append(round((time.time() - m0) * 1000))
                moves += 1
        finally:
            stop.set()
            for w in workers:
                w.join(120)
            if balancer:
                mongos.admin.command("balancerStop")
        elapsed = time.time() - t0
        all_moves = mongos.config.changelog.count_documents(
            {"what": "moveChunk.from", "details.note": "success"}) - before

        failures = list(errors[:5])
        docs = list(mongos.ycsb.usertable.find({}, batch_size=1000000))
        ids = [d["_id"] for d in docs]
        if len(ids) != len(set(ids)):
            failures.append("a scan saw %d documents twice" % (len(ids) - len(set(ids))))
        n = mongos.ycsb.usertable.count_documents({})
        if n != records:
            failures.append("count %d, loaded %d" % (n, records))
        if _digest(docs) != _digest(list(expected.values())):
            failures.append("the documents differ from what the acknowledged writes made")
        # the donors' copies go in the background (the range deleter): wait
        # until no deletion task is left before counting what the shards hold
        deadline = time.time() + 120
        while time.time() < deadline and sum(
                s.config.rangeDeletions.count_documents({}) for s in shards):
            time.sleep(0.5)
        held = sum(s.ycsb.usertable.count_documents({}) for s in shards)
        if held != records:
            failures.append("the shards hold %d documents, not %d (orphans?)" % (held, records))
        return {"seconds": round(elapsed, 1), "threads": threads, "records": records,
                "operations": sum(ops), "ops_per_sec": round(sum(ops) / elapsed),
                "errors": len(errors), "migrations": moves,
                "balancer_migrations": all_moves - moves,
                "migration_ms_median": sorted(move_ms)[len(move_ms) // 2] if move_ms else None,
                "migration_ms_max": max(move_ms) if move_ms else None, "failures": failures}
    finally:
        mongos.close()
        for s in shards:
            s.close()


def _free_base(n):
    for _ in range(200):
        base = random.randrange(20000, 60000)
        try:
            for p in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    raise RuntimeError("no free ports")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--router", type=int, help="a running cluster's router port")
    ap.add_argument("--shards", help="its two shard ports, comma-separated")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--balancer", action="store_true",
                    help="pile chunks onto shard0 and let the balancer move them back")
    a = ap.parse_args()
    d = None
    if a.router is None:
        here = os.path.dirname(os.path.abspath(__file__))
        build = os.path.join(here, "..", "..", "build")
        env = dict(os.environ, SABLED=os.path.join(build, "sabled"),
                   SABLE_ROUTER=os.path.join(build, "sable-router"))
        d = tempfile.mkdtemp(prefix="sable-migload-")
        base = _free_base(5)
        subprocess.run([sys.executable, os.path.join(build, "sable-cluster"), "start",
                        "--sharded", "--shards", "2", "--members", "1", "--port", str(base),
                        "--router-port", str(base + 4), "--oplog-mb", "256", "--dir", d,
                        # a migrated range deleted at once (mongod waits 900 s, and a
                        # range moved back within that would wait for its deletion)
                        "--sabled-arg=--setParameter",
                        "--sabled-arg=orphanCleanupDelaySecs=0"],
                       check=True, env=env, capture_output=True, timeout=300)
        router, shard_ports = base + 4, [base + 1, base + 2]
    else:
        router, shard_ports = a.router, [int(p) for p in a.shards.split(",")]
    try:
        s = run(router, shard_ports, a.seconds, a.threads, a.records, a.chunks,
                balancer=a.balancer)
    finally:
        if d is not None:
            subprocess.run([sys.executable, os.path.join(build, "sable-cluster"), "stop",
                            "--dir", d], env=env, capture_output=True, timeout=300)
            shutil.rmtree(d, ignore_errors=True)
    print(json.dumps(s))
    sys.exit(1 if s["failures"] else 0)


if __name__ == "__main__":
    main()
