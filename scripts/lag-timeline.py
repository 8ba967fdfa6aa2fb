#!/usr/bin/python3
"""
A replica set's replication lag as a timeline: every --interval seconds (0.1)
it reads each member's hello (lastWrite.opTime: the applied optime) and
serverStatus (metrics.repl, wiredTiger, flowControl) and prints one row per
sample: for each member that is not the primary, entries fetched and applied
since the last sample, its lag (how long ago the primary first showed an
optime this member has not applied yet; 0 when level), whether a
WiredTiger checkpoint is running, dirty cache MB, pages evicted and written
since the last sample, and its sync source; for every member its CPU use
(from /proc, when it runs on this host); for the primary, flow control's
isLagged and its ticket rate, and "niced" while primaryAutogroupNice is in
force.  At the end (Ctrl-C, --seconds, or every member
gone) it lists the stalls: runs of samples where a member's lag passed
--stall seconds, with what was happening meanwhile.

  scripts/lag-timeline.py --ports 27017,27018,27019 [--interval 0.1]
                          [--seconds N] [--stall 0.5] [--out FILE]

Run it beside bench/replset --port P (ports P, P+1, P+2).
"""
import argparse
import os
import signal
import sys
import time

import pymongo


def ts_key(ts):
    return (ts.time, ts.inc)


def cpu_s(pid):
    """The process's CPU seconds (user + system) when it runs on this host, else 0."""
    try:
        with open("/proc/%d/stat" % int(pid)) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, TypeError, ValueError):
        return 0.0


class Member:
    def __init__(self, port):
        self.port = port
        self.c = pymongo.MongoClient("127.0.0.1", port, directConnection=True,
                                     serverSelectionTimeoutMS=500, socketTimeoutMS=2000)
        self.prev = None

    def sample(self):
        h = self.c.admin.command("hello")
        s = self.c.admin.command("serverStatus")
        ts = h.get("lastWrite", {}).get("opTime", {}).get("ts")
        repl = s.get("metrics", {}).get("repl", {})
        wt = s.get("wiredTiger", {})
        cache = wt.get("cache", {})
        fc = s.get("flowControl", {})
        cur = {
            "primary": bool(h.get("isWritablePrimary")),
            "ts": ts_key(ts) if ts is not None else (0, 0),
            "fetched": repl.get("network", {}).get("ops", 0),
            "applied": repl.get("apply", {}).get("ops", 0),
            "ckpt": wt.get("transaction", {}).get("transaction checkpoint currently running", 0),
            "ckpts": wt.get("transaction", {}).get("transaction checkpoints", 0),
            "dirty": cache.get("tracked dirty bytes in the cache", 0),
            "evicted": cache.get("modified pages evicted", 0),
            "app_evicted": cache.get("pages evicted by application threads", 0),
            "written": cache.get("pages written from cache", 0),
            "source": repl.get("syncSource", {}).get("host", ""),
            "fc_lagged": fc.get("isLagged", False),
            "fc_rate": fc.get("targetRateLimit", 0),
            "niced": fc.get("primaryNiced", False),
        }
        cur["cpu"] = cpu_s(s.get("pid"))
        cur["at"] = time.time()
        prev, self.prev = self.prev, cur
        if prev is None:
            prev = cur
        d = dict(cur)
        for k in ("fetched", "applied", "evicted", "app_evicted", "written", "ckpts"):
            d["d_" + k] = cur[k] - prev[k]
        span = cur["at"] - prev["at"]
        d["cpu_pct"] = 100.0 * (cur["cpu"] - prev["cpu"]) / span if span > 0 else 0.0
        return d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ports", required=True)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--stall", type=float, default=0.5)
    ap.add_argument("--out")
    a = ap.parse_args()
    out = open(a.out, "w") if a.out else sys.stdout
    members = [Member(int(p)) for p in a.ports.split(",")]
    first_seen = []  # (time, ts) the primary had, in order
    rows = []
    start = time.time()
    misses = 0
    # Ctrl-C (or bench/replset's SIGINT) ends the sampling at the next row: a
    # KeyboardInterrupt raised inside a driver call could be taken for a
    # failed sample and the loop would run on until every member is gone.
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop and (not a.seconds or time.time() - start < a.seconds):
        now = time.time()
        got = {}
        for m in members:
            try:
                got[m.port] = m.sample()
            except pymongo.errors.PyMongoError:
                pass
        if not got:
            misses += 1
            if misses > 20:
                break
            time.sleep(a.interval)
            continue
        misses = 0
        prim = next((d for d in got.values() if d["primary"]), None)
        if prim is not None and (not first_seen or prim["ts"] > first_seen[-1][1]):
            first_seen.append((now, prim["ts"]))
        row = {"t": now - start}
        cols = ["%7.1f" % (now - start)]
        for m in members:
            d = got.get(m.port)
            if d is None:
                cols.append(":%d -" % m.port)
                continue
            if d["primary"]:
                cols.append(":%d P cpu %3.0f%% fc %s rate %d%s ckpt %d dirty %dM" % (
                    m.port, d["cpu_pct"], "LAG" if d["fc_lagged"] else "ok",
                    min(d["fc_rate"], 10**9), " niced" if d["niced"] else "",
                    d["ckpt"], d["dirty"] >> 20))
                continue
            lag = 0.0
            for t, ts in first_seen:
                if ts > d["ts"]:
                    lag = now - t
                    break
            row[m.port] = (lag, d)
            cols.append(":%d cpu %3.0f%% f %5d a %5d lag %5.2f ckpt %d dirty %5dM ev %d/%d wr %d src %s" % (
                m.port, d["cpu_pct"], d["d_fetched"], d["d_applied"], lag, d["ckpt"], d["dirty"] >> 20,
                d["d_evicted"], d["d_app_evicted"], d["d_written"], d["source"].split(":")[-1]))
        # entries every member has applied are of no more use
        applied = [v[1]["ts"] for k, v in row.items() if k != "t"]
        if applied:
            low = min(applied)
            while len(first_seen) > 1 and first_seen[1][1] <= low:
                first_seen.pop(0)
        rows.append(row)
        print("  ".join(cols), file=out, flush=True)
        time.sleep(max(0.0, a.interval - (time.time() - now)))
    # the stalls
    print("\nstalls (lag over %.2f s):" % a.stall, file=out)
    for m in members:
        run = []
        for r in rows + [{"t": None}]:
            v = r.get(m.port)
            if v is not None and v[0] > a.stall:
                run.append((r["t"], v))
                continue
            if run:
                t0, t1 = run[0][0], run[-1][0]
                peak = max(x[1][0] for x in run)
                ck = any(x[1][1]["ckpt"] for x in run)
                app = sum(x[1][1]["d_applied"] for x in run)
                fet = sum(x[1][1]["d_fetched"] for x in run)
                srcs = sorted({x[1][1]["source"] for x in run})
                print("  :%d %.1f-%.1f s peak %.2f s, fetched %d applied %d, checkpoint %s, source %s"
                      % (m.port, t0, t1, peak, fet, app, "yes" if ck else "no", ",".join(srcs)), file=out)
                run = []
    return 0


if __name__ == "__main__":
    sys.exit(main())
