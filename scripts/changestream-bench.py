#!/usr/bin/python3
"""changestream-bench.py: change streams' delay and cost on a replica set (issue 27).

  scripts/changestream-bench.py [--uri URI | --sabled build/sabled] [--rate 1000]
                                [--seconds 10] [--streams 100] [--writers 8]
                                [--port 28517] [--no-delay] [--reader c|python]

1. Delay: writer threads insert {seq} with w:"majority" at --rate per second
   in total; one watch() in another process records when each event
   arrives (CLOCK_MONOTONIC, shared by the processes).  Printed: the p50 /
   p99 / max of arrival minus the insert's acknowledgement (negative: the
   event came before the ack reached the writer), with that stream alone
   and again with --streams more open (sable-cs-readers; not with
   --reader python).
2. Cost: the writers insert as fast as they can (w:"majority") for
   --seconds with no stream open, then with --streams streams open, each
   reading every event: by default build/sable-cs-readers (one thread
   driving a connection per stream with aggregate/getMore, as watch() sends
   them: the client takes little CPU and no scheduler share from the
   server), with --reader python threads of another Python process.  Printed: both
   throughputs and the drop in percent, the primary's CPU time (user +
   system from /proc/PID/stat, over the writes and the second after them)
   per 1,000 writes (printed when the primary runs on this host), the
   readers' CPU and the load average.  The throughput drop swings by tens
   of percent when other work shares the machine; part 1 also prints the
   CPU per 1,000 writes of the three members, the writers and the readers
   together at --rate, with one stream and with --streams more: the drop
   in writes it implies where these processes alone saturate the cores.
   --no-delay runs this part only.

Without --uri it starts a three-member set with build/sable-cluster in a
temporary directory (ports 28517..28519) and stops it at the end.
"""
import argparse
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pymongo
from pymongo.write_concern import WriteConcern

HERE = os.path.dirname(os.path.abspath(__file__))


def client(uri):
    return pymongo.MongoClient(uri, serverSelectionTimeoutMS=30000)


def reader_proc(uri, nstreams, ready, stop, out):
    """nstreams watch() threads; the first records (seq, arrival) pairs."""
    c = client(uri)
    coll = c.bench.cs
    arrivals = []
    counts = [0] * nstreams
    opened = [0]
    lock = threading.Lock()

    def run(i):
        with coll.watch(max_await_time_ms=200) as st:
            with lock:
                opened[0] += 1
                if opened[0] == nstreams:
                    ready.set()
            while not stop.is_set():
                ev = st.try_next()
                if ev is None:
                    continue
                counts[i] += 1
                if i == 0:
                    arrivals.append((ev["fullDocument"]["seq"], time.monotonic()))

    ts = [threading.Thread(target=run, args=(i,)) for i in range(nstreams)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((arrivals, counts))


def write_load(uri, nwriters, seconds, rate, start_seq):
    """Insert for seconds with nwriters threads (rate 0: as fast as they can).
    Returns {seq: ack time} and the number written."""
    c = client(uri)
    coll = c.bench.get_collection("cs", write_concern=WriteConcern("majority", wtimeout=30000))
    acks, errors = {}, []
    end = time.monotonic() + seconds
    nxt = [start_seq]
    lock = threading.Lock()
    t0 = time.monotonic()

    def run():
        while True:
            with lock:
                seq = nxt[0]
                nxt[0] += 1
            if rate:  # paced: seq n is due at t0 + n/rate
                due = t0 + (seq - start_seq) / rate
                now = time.monotonic()
                if due > now:
                    time.sleep(due - now)
            if time.monotonic() >= end:
                return
            try:
                coll.insert_one({"seq": seq})
            except pymongo.errors.PyMongoError as e:
                errors.append(e)
                continue
            acks[seq] = time.monotonic()

    ts = [threading.Thread(target=run) for _ in range(nwriters)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    c.close()
    if errors:
        print("%d writes failed, e.g. %s" % (len(errors), errors[0]))
    return acks, len(acks)


def proc_cpu_s(pid):
    """User + system CPU seconds of process pid so far (None: not on this host)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def member_pids(c):
    """The set's members' pids, the primary's first (None where unknown)."""
    hello = c.admin.command("hello")
    pids = []
    for h in [hello["primary"]] + [h for h in hello["hosts"] if h != hello["primary"]]:
        host, port = h.rsplit(":", 1)
        with pymongo.MongoClient(host, int(port), directConnection=True) as m:
            pids.append(m.admin.command("serverStatus").get("pid"))
    return pids


def own_cpu_s():
    t = os.times()
    return t.user + t.system


def cpu_now(pids):
    """CPU seconds so far of the members and this process (the writers)
    together; None when a member is not on this host."""
    c = [proc_cpu_s(p) for p in pids]
    return None if None in c else sum(c) + own_cpu_s()


def measured(pids, fn):
    """Run fn() (it returns (acks, n)), then wait a second (the last events
    reach the streams); returns n and the primary's CPU seconds meanwhile."""
    c0 = proc_cpu_s(pids[0])
    _, n = fn()
    time.sleep(1.0)
    c1 = proc_cpu_s(pids[0])
    return n, (c1 - c0 if c0 is not None and c1 is not None else None)


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))] if v else float("nan")


def readers_binary():
    for d in (HERE, os.path.join(HERE, "..", "build")):
        p = os.path.join(d, "sable-cs-readers")
        if os.path.exists(p):
            return p
    sys.exit("sable-cs-readers not built (cmake --build build --target sable-cs-readers)")


def with_c_streams(uri, nstreams, fn):
    """fn() while sable-cs-readers keeps nstreams streams open on the primary;
    returns fn's result, each stream's event count (min, max), the readers'
    CPU s and their getMores."""
    primary = client(uri).admin.command("hello")["primary"]
    p = subprocess.Popen([readers_binary(), primary, "bench", "cs", str(nstreams), "200"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if p.stdout.readline().strip() != "ready":
        sys.exit("streams did not open")
    time.sleep(0.5)
    r = fn()
    time.sleep(1.0)  # the last events arrive
    out, _ = p.communicate(timeout=120)  # closing stdin stops the readers
    f = out.split()
    if p.returncode != 0 or len(f) < 10:
        sys.exit("sable-cs-readers failed: %r" % out)
    return r, (int(f[3]), int(f[5])), float(f[7]), int(f[9])


def with_streams(uri, nstreams, fn):
    ready, stop, out = mp.Event(), mp.Event(), mp.Queue()
    p = mp.Process(target=reader_proc, args=(uri, nstreams, ready, stop, out))
    p.start()
    if not ready.wait(60):
        sys.exit("streams did not open")
    time.sleep(0.5)
    r = fn()
    time.sleep(1.0)  # the last events arrive
    stop.set()
    arrivals, counts = out.get(timeout=120)
    p.join(30)
    return r, arrivals, counts


def print_delay(r, seconds, how):
    ((acks, n), _), arrivals, _ = r
    d = [(t - acks[s]) * 1000 for s, t in arrivals if s in acks]
    print("delay (%s): %d writes in %.0f s (%.0f/s w:majority), %d events; ack -> event ms: "
          "p50 %.2f p99 %.2f max %.2f" % (how, n, seconds, n / seconds, len(d), pct(d, .5),
                                          pct(d, .99), max(d) if d else float("nan")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uri")
    ap.add_argument("--sabled", help="the sabled the set runs (without --uri)")
    ap.add_argument("--port", type=int, default=28517, help="the set's first port")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--no-delay", action="store_true", help="measure the cost only")
    ap.add_argument("--reader", choices=("c", "python"), default="c",
                    help="the 100 streams' client: sable-cs-readers or Python threads")
    a = ap.parse_args()
    if a.sabled:
        os.environ["SABLED"] = os.path.abspath(a.sabled)
    tmp = None
    uri = a.uri
    if uri is None:
        tmp = tempfile.mkdtemp(prefix="csbench")
        launcher = os.path.join(HERE, "sable-cluster")
        if not os.path.exists(launcher):
            launcher = os.path.join(HERE, "..", "build", "sable-cluster")
        subprocess.run([launcher, "start", "--replset", "rs0", "--members", "3", "--dir", tmp,
                        "--port", str(a.port), "--oplog-mb", "256"], check=True,
                       stdout=subprocess.DEVNULL)
        uri = "mongodb://%s/?replicaSet=rs0" % ",".join(
            "127.0.0.1:%d" % (a.port + i) for i in range(3))
    try:
        c = client(uri)
        c.bench.cs.drop()
        c.bench.create_collection("cs")
        pids = member_pids(c)
        if not a.no_delay:  # 1. delay at --rate, alone and with the streams open
            def paced(s0):
                def run():  # (acks, n) and the members' and writers' CPU s meanwhile
                    c0 = cpu_now(pids)
                    r = write_load(uri, a.writers, a.seconds, a.rate, s0)
                    c1 = cpu_now(pids)
                    return r, (c1 - c0 if c0 is not None and c1 is not None else None)
                return lambda: with_streams(uri, 1, run)
            r0 = paced(0)()
            print_delay(r0, a.seconds, "alone")
            if a.reader == "c":
                r1, _, ccpu, _ = with_c_streams(uri, a.streams, paced(3 * 10 ** 7))
                print_delay(r1, a.seconds, "with %d streams open" % a.streams)
                (_, n0), cpu0 = r0[0]
                (_, n1), cpu1 = r1[0]
                if cpu0 is not None and cpu1 is not None:
                    w0, w1 = 1000 * cpu0 / max(1, n0), 1000 * (cpu1 + ccpu) / max(1, n1)
                    print("CPU per 1,000 writes at %d/s, the 3 members + the writers (+ the "
                          "readers): %.3f s with one stream, %.3f s with %d more: where these "
                          "processes saturate the cores, %.1f%% fewer writes" % (
                              a.rate, w0, w1, a.streams, 100.0 * (1 - w0 / w1)))
        # 2. throughput without and with streams
        n0, cpu0 = measured(pids, lambda: write_load(uri, a.writers, a.seconds, 0, 10 ** 7))
        load = os.getloadavg()[0]
        writes = lambda: measured(pids, lambda: write_load(uri, a.writers, a.seconds, 0,
                                                           2 * 10 ** 7))
        if a.reader == "c":
            (n1, cpu1), (lo, hi), ccpu, gets = with_c_streams(uri, a.streams, writes)
        else:
            (n1, cpu1), _, counts = with_streams(uri, a.streams, writes)
            lo, hi, ccpu = min(counts), max(counts), None
        print("cost: %.0f writes/s with no stream, %.0f with %d streams open (each read %d..%d "
              "events of %d written): %.1f%% fewer (load %.1f, %.1f)" % (
                  n0 / a.seconds, n1 / a.seconds, a.streams, lo, hi, n1,
                  100.0 * (n0 - n1) / n0, load, os.getloadavg()[0]))
        if cpu0 is not None and cpu1 is not None:
            print("primary CPU per 1,000 writes: %.3f s with no stream, %.3f s with %d streams"
                  % (1000 * cpu0 / max(1, n0), 1000 * cpu1 / max(1, n1), a.streams))
        if ccpu is not None:
            print("readers (one thread): CPU %.2f s, %.1f us per event delivered; %.1f events "
                  "per getMore" % (ccpu, 1e6 * ccpu / max(1, a.streams * n1),
                                   a.streams * n1 / max(1, gets)))
    finally:
        if tmp is not None:
            launcher = os.path.join(HERE, "sable-cluster")
            if not os.path.exists(launcher):
                launcher = os.path.join(HERE, "..", "build", "sable-cluster")
            subprocess.run([launcher, "stop", "--dir", tmp], stdout=subprocess.DEVNULL)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
