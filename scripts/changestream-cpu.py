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

  scripts/changestream-cpu.py --quiet [--streams 100] [--rate 200] [--seconds 10]
--quiet: the --streams streams watch a collection nobody writes, each with a
getMore always waiting (maxTimeMS 1000, a client thread each), while single
inserts go to another collection at --rate per second for --seconds: the
figure is the server's CPU per insert, so what the streams' wakes cost
(compare with --streams 0).
"""
import threading
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


def quiet(c, db, pid, a):
    """--quiet: streams waiting on bench.quiet while bench.cs is written."""
    db.create_collection("quiet")
    ids = [db.command("aggregate", "quiet", pipeline=[{"$changeStream": {}}],
                      cursor={})["cursor"]["id"] for _ in range(a.streams)]
    stop = threading.Event()
    gets = [0]

    def wait(cid):
        while not stop.is_set():
            db.command("getMore", cid, collection="quiet", maxTimeMS=1000)
            gets[0] += 1

    ts = [threading.Thread(target=wait, args=(cid,)) for cid in ids]
    for t in ts:
        t.start()
    time.sleep(1.5)  # every stream's getMore waiting
    n = int(a.rate * a.seconds)
    g0, w0 = gets[0], db.command("serverStatus")["metrics"]["changeStreams"]
    c0, t0 = cpu_s(pid), time.monotonic()
    for i in range(n):
        db.cs.insert_one({"_id": i, "v": "x" * 50})
        delay = t0 + (i + 1) / a.rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    cpu, wall = cpu_s(pid) - c0, time.monotonic() - t0
    w1 = db.command("serverStatus")["metrics"]["changeStreams"]
    g1 = gets[0]
    stop.set()
    for t in ts:
        t.join()
    print("%d streams waiting on a quiet collection, %d inserts elsewhere at %.0f/s: server "
          "CPU %.2f s (%.1f ms a second), %.1f us per insert; %d getMores answered "
          "(timeouts), %d wakes without a run (load %.1f)"
          % (a.streams, n, n / wall, cpu, 1e3 * cpu / wall, 1e6 * cpu / n, g1 - g0,
                                 w1.get("idleWakes", 0) - w0.get("idleWakes", 0),
                                 os.getloadavg()[0]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sabled", default=os.path.join(HERE, "..", "build", "sabled"))
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--events", type=int, default=1200, help="inserts in all")
    ap.add_argument("--images", action="store_true", help="streams that ask for images")
    ap.add_argument("--quiet", action="store_true",
                    help="streams waiting on a collection nobody writes")
    ap.add_argument("--rate", type=int, default=200, help="--quiet: inserts per second")
    ap.add_argument("--seconds", type=float, default=10, help="--quiet: for how long")
    a = ap.parse_args()
    os.environ["SABLED"] = os.path.abspath(a.sabled)
    import pymongo
    from sabled import Sabled
    s = Sabled()
    try:
        s.start(["--replSet", "rs0"])
        c = pymongo.MongoClient("127.0.0.1", s.port, directConnection=True,
                                maxPoolSize=a.streams + 10)
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
        if a.quiet:
            quiet(c, db, pid, a)
            return
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
