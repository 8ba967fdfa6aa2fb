#!/usr/bin/python3
"""initial-sync-rate.py: load N YCSB-like records (10 fields of 100 bytes, _id
"user<n>", as YCSB's load) into a member, add an empty member and print how
long its initial sync took and the rate in MB/s of document data (BSON bytes
copied), from the joining member's "Initial sync done" log line and from the
time until it is SECONDARY.

  scripts/initial-sync-rate.py [--records 1000000] [--sabled build/sabled] [--dir DIR]

Both members run on this machine (loopback); DIR (default: a temporary one) is
removed at the end unless --keep.
"""
import argparse
import json
import os
import random
import shutil
import socket
import string
import subprocess
import tempfile
import time

import pymongo

HERE = os.path.dirname(os.path.abspath(__file__))
a = argparse.ArgumentParser()
a.add_argument("--records", type=int, default=1000000)
a.add_argument("--sabled", default=os.path.join(HERE, "..", "build", "sabled"))
a.add_argument("--dir")
a.add_argument("--keep", action="store_true")
args = a.parse_args()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


root = args.dir or tempfile.mkdtemp(prefix="initsync-")
ports = [free_port(), free_port()]
procs = []


def start(i):
    d = os.path.join(root, "m%d" % i)
    os.makedirs(d, exist_ok=True)
    log = open(os.path.join(root, "m%d.log" % i), "a")
    p = subprocess.Popen([args.sabled, "--dbpath", d, "--port", str(ports[i]), "--bind_ip",
                          "127.0.0.1", "--replSet", "rs0", "--oplogSizeMB", "2048"],
                         stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)
    c = pymongo.MongoClient("127.0.0.1", ports[i], directConnection=True,
                            serverSelectionTimeoutMS=30000)
    c.admin.command("ping")
    return c


try:
    c0 = start(0)
    c0.admin.command("replSetInitiate", {"_id": "rs0", "members": [
        {"_id": 0, "host": "127.0.0.1:%d" % ports[0]},
        {"_id": 1, "host": "127.0.0.1:%d" % ports[1], "priority": 0, "votes": 0}]})
    while not c0.admin.command("hello").get("isWritablePrimary"):
        time.sleep(0.2)
    coll = c0.ycsb.usertable
    rnd = random.Random(1)
    field = "".join(rnd.choice(string.ascii_letters) for _ in range(100))
    t0 = time.time()
    batch = []
    for n in range(args.records):
        doc = {"_id": "user%d" % n}
        for f in range(10):
            doc["field%d" % f] = field
        batch.append(doc)
        if len(batch) == 1000:
            coll.insert_many(batch, ordered=False)
            batch = []
    if batch:
        coll.insert_many(batch, ordered=False)
    load_s = time.time() - t0
    size = c0.ycsb.command("dbStats")["dataSize"]
    print("loaded %d records, %.1f MB of documents, in %.1f s" % (args.records, size / 2**20,
                                                                   load_s))
    t0 = time.time()
    c1 = start(1)
    while True:
        try:
            if c1.admin.command("replSetGetStatus")["myState"] == 2:
                break
        except pymongo.errors.PyMongoError:
            pass
        time.sleep(0.2)
    total_s = time.time() - t0
    done = None
    for line in open(os.path.join(root, "m1.log")):
        if "Initial sync done" in line:
            done = json.loads(line)["attr"]
    assert c1.ycsb.usertable.estimated_document_count() == args.records
    print("initial sync: %d MB copied in %.1f s = %.1f MB/s (clone and indexes, from the log)"
          % (done["bytesCopied"] / 2**20, done["durationMillis"] / 1000.0, done["MBPerSecond"]))
    print("from start of the new member to SECONDARY: %.1f s = %.1f MB/s"
          % (total_s, size / 2**20 / total_s))
finally:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
