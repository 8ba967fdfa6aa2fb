#!/usr/bin/python3
"""changestream-cpu.py: the server's CPU per change event delivered to one stream.
  scripts/changestream-cpu.py [--sabled build/sabled] [--streams 100] [--batch 20]
                              [--events 1200] [--images]
A one-member replica set (a fresh sabled in a temporary directory) with --streams
change streams on one collection.  Each round inserts --batch documents (one
insert command), then every stream reads exactly that many events by getMore, so
the batches are the same whatever the binary and the load: the figure is the
sabled process's user + system CPU (/proc/PID/stat) over all rounds, per event
delivered to one stream and per getMore.  Run it for two binaries in turn to
compare them on a loaded machine.  --images: the collection keeps pre- and
post-images and the streams ask for them (fullDocument whenAvailable,
fullDocumentBeforeChange whenAvailable).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration", "py"))


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sabled", default=os.path.join(HERE, "..", "build", "sabled"))
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--events", type=int, default=1200, help="inserts in all")
    ap.add_argument("--images", action="store_true", help="streams that ask for images")
    a = ap.parse_args()
    os.environ["SABLED"] = os.path.abspath(a.sabled)
    import pymongo
    from sabled import Sabled
    s = Sabled()
    try:
        s.start(["--replSet", "rs0"])
        c = pymongo.MongoClient("127.0.0.1", s.port, directConnection=True)
        c.admin.command("replSetInitiate")
        end = time.time() + 30
        while not c.admin.command("hello").get("isWritablePrimary"):
            if time.time() > end:
                sys.exit("no primary")
            time.sleep(0.05)
        db = c.bench
        spec = {}
        if a.images:
            db.create_collection("cs", changeStreamPreAndPostImages={"enabled": True})
            spec = {"fullDocument": "whenAvailable", "fullDocumentBeforeChange": "whenAvailable"}
        else:
            db.create_collection("cs")
        pid = c.admin.command("serverStatus")["pid"]
        ids = [db.command("aggregate", "cs", pipeline=[{"$changeStream": spec}],
                          cursor={})["cursor"]["id"] for _ in range(a.streams)]
        seq = gets = events = 0
        c0 = cpu_s(pid)
        for _ in range(max(1, a.events // a.batch)):
            db.cs.insert_many([{"_id": seq + i, "v": "x" * 50} for i in range(a.batch)])
            seq += a.batch
            for cid in ids:
                got = 0
                while got < a.batch:
                    g = db.command("getMore", cid, collection="cs", maxTimeMS=1000)
                    gets += 1
                    got += len(g["cursor"]["nextBatch"])
                events += got
        cpu = cpu_s(pid) - c0
        print("%d streams, %d inserts in batches of %d: %d events delivered, %d getMores; "
              "server CPU %.2f s: %.2f us per event per stream, %.1f us per getMore "
              "(load %.1f)" % (a.streams, seq, a.batch, events, gets, cpu, 1e6 * cpu / events,
                               1e6 * cpu / gets, os.getloadavg()[0]))
    finally:
        s.cleanup()


if __name__ == "__main__":
    main()
