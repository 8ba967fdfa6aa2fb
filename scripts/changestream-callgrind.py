#!/usr/bin/python3
"""changestream-callgrind.py: the server's instructions per change event per stream.

  scripts/changestream-callgrind.py [--sabled build/sabled] [--streams 100]
                                    [--batch 50] [--rounds 10] [--keep FILE]

Starts a one-member replica set (a fresh sabled in a temporary directory)
under valgrind --tool=callgrind with instrumentation off, opens --streams
change streams on one collection, each with a client thread that keeps a
getMore waiting (maxTimeMS 1000, as a driver's maxAwaitTimeMS), as a
watch() loop does.  Each round inserts --batch documents (one insert
command) and waits until every stream has read them; only the measured
rounds are counted (callgrind_control -i on / off, after two warm-up
rounds).  Instructions do not depend on the machine's load, so two binaries
compare on a shared host; the batches a stream gets can (a wake may come
while an insert is half committed), so the getMores are printed too.
Printed: the total, per event delivered to one stream, per getMore, and
(--streams 0) per insert.  --keep FILE: keep the callgrind output for
callgrind_annotate (e.g. --inclusive=yes).  --cpu: no valgrind; the
server's user and system CPU over the rounds instead (give it more rounds;
it depends on the load), --perf FILE: and a perf record (cpu-clock) of them.
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pymongo

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pid):
    """(user, system) clock ticks of process pid so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def totals(path):
    """The instructions in callgrind output path."""
    out = subprocess.run(["callgrind_annotate", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "PROGRAM TOTALS" in line:
            return int(line.split()[0].replace(",", ""))
    sys.exit("no totals in %s" % path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sabled", default=os.path.join(HERE, "..", "build", "sabled"))
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--batch", type=int, default=50, help="documents an insert writes")
    ap.add_argument("--rounds", type=int, default=10, help="measured rounds")
    ap.add_argument("--keep", help="copy the callgrind output here")
    ap.add_argument("--cpu", action="store_true",
                    help="no valgrind: the server's user and system CPU (/proc) instead")
    ap.add_argument("--perf", help="with --cpu: perf record -e cpu-clock into this file")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cscg")
    os.mkdir(os.path.join(tmp, "db"))
    port = free_port()
    out = os.path.join(tmp, "cg.out")
    tool = [] if a.cpu else ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                             "--callgrind-out-file=" + out]
    vg = subprocess.Popen(tool + [os.path.abspath(a.sabled),
                           "--port", str(port), "--bind_ip", "127.0.0.1",
                           "--dbpath", os.path.join(tmp, "db"),
                           "--logpath", os.path.join(tmp, "s.log"), "--replSet", "rs0",
                           "--slowms", "1000000"],  # no slow-op logging under valgrind
                          stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "vg.log"), "w"))
    stop = threading.Event()
    threads = []
    c = None
    try:
        c = pymongo.MongoClient("127.0.0.1", port, directConnection=True,
                                maxPoolSize=a.streams + 10, serverSelectionTimeoutMS=120000,
                                socketTimeoutMS=600000)
        c.admin.command("ping")
        c.admin.command("replSetInitiate")
        end = time.time() + 120
        while not c.admin.command("hello").get("isWritablePrimary"):
            if time.time() > end:
                sys.exit("no primary")
            time.sleep(0.1)
        db = c.bench
        db.create_collection("cs")
        ids = [db.command("aggregate", "cs", pipeline=[{"$changeStream": {}}],
                          cursor={})["cursor"]["id"] for _ in range(a.streams)]
        got = [0] * a.streams
        gets = [0] * a.streams
        cv = threading.Condition()

        def read(i):
            while not stop.is_set():
                try:
                    r = db.command("getMore", ids[i], collection="cs", maxTimeMS=1000)
                except pymongo.errors.PyMongoError:
                    return  # the server stopped
                with cv:
                    gets[i] += 1
                    got[i] += len(r["cursor"]["nextBatch"])
                    cv.notify_all()

        threads = [threading.Thread(target=read, args=(i,)) for i in range(a.streams)]
        for t in threads:
            t.start()
        seq = 0

        def round_():
            nonlocal seq
            db.cs.insert_many([{"_id": seq + i, "v": "x" * 50} for i in range(a.batch)])
            seq += a.batch
            with cv:
                if not cv.wait_for(lambda: all(g >= seq for g in got), timeout=600):
                    sys.exit("the streams did not read round %d" % (seq // a.batch))
            if any(g != seq for g in got):
                sys.exit("a stream read more events than were written")

        def measured_rounds():
            """Run a.rounds rounds; the getMores the streams sent meanwhile."""
            with cv:
                g0 = sum(gets)
            for _ in range(a.rounds):
                round_()
            with cv:
                return sum(gets) - g0

        for _ in range(2):
            round_()
        time.sleep(0.5)
        pid = vg.pid
        if a.cpu:
            perf = None
            if os.environ.get("CS_STRACE"):
                perf = subprocess.Popen(["strace", "-f", "-c", "-o", os.environ["CS_STRACE"],
                                         "-p", str(pid)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
            if a.perf:
                perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-g",
                                         "-o", a.perf, "-p", str(pid)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
            u0 = cpu_ticks(pid)
            ngets = measured_rounds()
            u1 = cpu_ticks(pid)
            if perf is not None:
                perf.send_signal(2)
                perf.wait()
            hz = os.sysconf("SC_CLK_TCK")
            user, system = (u1[0] - u0[0]) / hz, (u1[1] - u0[1]) / hz
            events = a.streams * a.batch * a.rounds
            print("%d streams, %d inserts of %d: server CPU user %.2f s system %.2f s: "
                  "%.2f us per event per stream, %d getMores (%.1f events each): %.1f us per "
                  "getMore (load %.1f)" % (a.streams, a.rounds, a.batch, user, system,
                                           1e6 * (user + system) / max(1, events), ngets,
                                           events / max(1, ngets),
                                           1e6 * (user + system) / max(1, ngets),
                                           os.getloadavg()[0]))
            return
        subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True,
                       stdout=subprocess.DEVNULL)
        ngets = measured_rounds()
        subprocess.run(["callgrind_control", "-d", str(pid)], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True,
                       stdout=subprocess.DEVNULL)
        stop.set()
        files = sorted(f for f in os.listdir(tmp) if f.startswith("cg.out"))
        path = os.path.join(tmp, [f for f in files if f != "cg.out"][0])
        total = totals(path)
        events = a.streams * a.batch * a.rounds
        n = a.batch * a.rounds
        # getMores in the window: those answered in it, give or take the
        # ones waiting at its ends (one per stream)
        line = "%d streams, %d inserts of %d: %d instructions; " % (
            a.streams, a.rounds, a.batch, total)
        if a.streams:
            line += "%d per event per stream, %d getMores (%.1f events each): %d per getMore" % (
                total // events, ngets, events / max(1, ngets), total // max(1, ngets))
        else:
            line += "%d per insert" % (total // n)
        print(line)
        if a.keep:
            shutil.copy(path, a.keep)
    finally:
        stop.set()
        if c is not None:
            c.close()
        vg.terminate()
        try:
            vg.wait(120)
        except subprocess.TimeoutExpired:
            vg.kill()
            vg.wait()
        for t in threads:
            t.join(5)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
