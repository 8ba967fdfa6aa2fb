#!/usr/bin/python3
"""
What a WiredTiger checkpoint does to replication lag: a 3-member set (one
hidden) on free ports, --records YCSB-like documents loaded (batches of
1,000, w:1), then a steady --rate of inserts/s while a sampler reads each
member's applied optime every 50 ms; a member's lag at a sample is how long
ago the primary first showed an optime it has not applied.  Checkpoints:
  --mode each      an fsync (a checkpoint) on the secondary, the hidden member
                   and the primary in turn, 3 s apart (members run --syncdelay=0)
  --mode together  an fsync on the three at the same moment (--syncdelay=0)
  --mode periodic  none by hand: members run --syncdelay=15 for --steady s
Prints how long the checkpoints took and the lag p50 / p99 / max of the
secondary and the hidden member, during the checkpoints and outside them.

  scripts/checkpoint-lag.py [--sabled build/sabled] [--records 200000]
                            [--rate 2000] [--mode each|together|periodic]
                            [--steady 45] [--sabled-arg=ARG ...]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pymongo

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cluster(env, *args):
    r = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "scripts", "sable-cluster")] + list(args),
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("sable-cluster %s: %s%s" % (args[0], r.stdout, r.stderr))
    return r.stdout.strip()


def doc(i):
    return {"_id": "user%019d" % (hash(("k", i)) & (10**19 - 1)),
            **{"field%d" % f: os.urandom(50).hex() for f in range(10)}}


def applied(m):
    return m.admin.command("hello")["lastWrite"]["opTime"]["ts"]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sabled", default=os.path.join(REPO, "build", "sabled"))
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--mode", choices=["each", "together", "periodic"], default="each")
    ap.add_argument("--steady", type=float, default=45)
    ap.add_argument("--sabled-arg", action="append", default=[])
    a = ap.parse_args()
    env = dict(os.environ, SABLED=os.path.abspath(a.sabled))
    d = tempfile.mkdtemp(prefix="sable-ckpt-lag-")
    syncdelay = "15" if a.mode == "periodic" else "0"
    try:
        uri = cluster(env, "start", "--members", "3", "--hidden", "1", "--dir", d,
                      "--sabled-arg=--syncdelay=" + syncdelay, *["--sabled-arg=" + x for x in a.sabled_arg])
        port = int(uri.split("//")[1].split(":")[1].split(",")[0])
        col = pymongo.MongoClient(uri).ycsb.usertable
        t0 = time.time()
        for s in range(0, a.records, 1000):
            col.insert_many([doc(i) for i in range(s, min(s + 1000, a.records))], ordered=False)
        mem = [pymongo.MongoClient("127.0.0.1", port + i, directConnection=True) for i in range(3)]
        while applied(mem[1]) < applied(mem[0]) or applied(mem[2]) < applied(mem[0]):
            time.sleep(0.2)
        print("loaded %d records in %.1f s; load average %s" % (
            a.records, time.time() - t0, open("/proc/loadavg").read().split()[0]), flush=True)
        stop = threading.Event()
        rows = []

        def writer():
            i, n = a.records, max(1, a.rate // 50)
            while not stop.is_set():
                t = time.time()
                col.insert_many([doc(j) for j in range(i, i + n)], ordered=False)
                i += n
                time.sleep(max(0.0, 0.02 - (time.time() - t)))

        def sampler():
            seen = []  # (time, ts) the primary showed
            while not stop.is_set():
                now = time.time()
                try:
                    p, s1, s2 = applied(mem[0]), applied(mem[1]), applied(mem[2])
                except pymongo.errors.PyMongoError:
                    continue
                seen.append((now, p))

                def lag(x):
                    return next((now - t for t, ts in seen if ts > x), 0.0)
                rows.append((now, lag(s1), lag(s2)))
                while len(seen) > 1 and seen[1][1] <= min(s1, s2):
                    seen.pop(0)
                time.sleep(0.05)

        threads = [threading.Thread(target=writer), threading.Thread(target=sampler)]
        for t in threads:
            t.start()
        spans = []  # (member, start, end) of each checkpoint by hand

        def fsync(i):
            s = time.time()
            mem[i].admin.command("fsync")
            spans.append((i, s, time.time()))

        ck = [m.admin.command("serverStatus")["wiredTiger"]["transaction"]["transaction checkpoints"]
              for m in mem]
        if a.mode == "each":
            time.sleep(4)
            for i in (1, 2, 0):
                fsync(i)
                time.sleep(3)
        elif a.mode == "together":
            time.sleep(5)
            ts = [threading.Thread(target=fsync, args=(i,)) for i in range(3)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            time.sleep(5)
        else:
            time.sleep(a.steady)
        stop.set()
        for t in threads:
            t.join()
        st = [m.admin.command("serverStatus")["wiredTiger"]["transaction"] for m in mem]
        print("checkpoints per member (primary, secondary, hidden): %s, the last took %s ms" % (
            [s["transaction checkpoints"] - c for s, c in zip(st, ck)],
            [s["transaction checkpoint most recent time (msecs)"] for s in st]))
        for i, s, e in sorted(spans):
            print("  fsync on member %d: %.1f s (from %.1f s)" % (i, e - s, s - t0))
        lo = min((s for _, s, _ in spans), default=None)
        hi = max((e for _, _, e in spans), default=None)
        parts = [("all", rows)] if lo is None else [
            ("during", [r for r in rows if lo <= r[0] <= hi]),
            ("outside", [r for r in rows if r[0] < lo or r[0] > hi])]
        for name, rs in parts:
            for col_i, who in ((1, "secondary"), (2, "hidden")):
                xs = [r[col_i] for r in rs]
                print("%-8s %-9s lag p50 %.3f s, p99 %.3f s, max %.3f s (%d samples)" % (
                    name, who, pct(xs, 0.5), pct(xs, 0.99), max(xs, default=float("nan")), len(xs)))
    finally:
        try:
            cluster(env, "stop", "--dir", d)
        except RuntimeError as e:
            print(e, file=sys.stderr)
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
