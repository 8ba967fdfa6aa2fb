"""
Generated histories for testing the checkers: a simulated linearizable
register with concurrent clients, and an injected stale read.

Each process runs operations back to back; an operation's effect happens
at a random instant between its invocation and its completion (its
linearization point), effects are applied in that order, so the history is
linearizable by construction.  Written values are unique, so a read of a
value overwritten by a write that completed before the read began is
certainly stale.

    /usr/bin/python3 simulate.py --ops 5000 --keys 1 --seed 7 > h.jsonl
    /usr/bin/python3 check.py register h.jsonl
"""
import argparse
import json
import random
import sys


def register_history(n_ops, processes=5, keys=1, seed=1, info_rate=0.02, cas_rate=0.2,
                     values=None):
    """Events of a linearizable register history with n_ops operations.

    Reads, writes (unique values) and compare-and-set ops on `keys` keys;
    info_rate of writes/cas end indeterminate (half took effect, half not;
    their process is then replaced by a new one, Jepsen style).  values
    caps distinct written values (None: all unique; small values make
    many identical states, which the search must cope with).
    """
    rnd = random.Random(seed)
    ops = []        # [call, lin, ret, pid, f, key, value]
    t = [0] * processes
    pid = list(range(processes))
    next_pid = processes
    for n in range(n_ops):
        p = n % processes
        call = t[p] + rnd.randint(1, 30)
        lin = call + rnd.randint(0, 60)
        ret = lin + rnd.randint(0, 60)
        t[p] = ret
        key = "k%d" % rnd.randrange(keys)
        x = rnd.random()
        if x < cas_rate:
            f = "cas"
        elif x < 0.5 + cas_rate / 2:
            f = "read"
        else:
            f = "write"
        ops.append([call, lin, ret, pid[p], f, key, None])
        if f != "read" and rnd.random() < info_rate:
            ops[-1].append("info")
            pid[p] = next_pid
            next_pid += 1
        else:
            ops[-1].append(None)
    state = {}
    written = 0
    events = []
    for call, lin, ret, proc, f, key, _, info in sorted(ops, key=lambda o: o[1]):
        cur = state.get(key)
        took_effect = info is None or rnd.random() < 0.5
        if f == "read":
            inv, out, typ = None, cur, "ok"
        elif f == "write":
            written += 1
            v = written if values is None else written % values
            inv, out, typ = v, v, "ok"
            if took_effect:
                state[key] = v
        else:
            written += 1
            v = written if values is None else written % values
            expect = cur if rnd.random() < 0.6 else (written - 1 if values is None
                                                     else rnd.randrange(values))
            inv = out = [expect, v]
            typ = "ok" if expect == cur else "fail"
            if typ == "ok" and took_effect:
                state[key] = v
        events.append({"process": proc, "type": "invoke", "f": f, "key": key,
                       "value": inv, "time": call})
        if info:
            typ = "info"
        events.append({"process": proc, "type": typ, "f": f, "key": key, "value": out,
                       "time": ret})
    # By time, invocations first at equal times: each process's completion
    # still follows its invocation, and its next invocation comes later.
    events.sort(key=lambda e: (e["time"], e["type"] != "invoke"))
    return events


def inject_stale_read(events, seed=1):
    """Copy of events with one ok read changed to return a value that was
    overwritten before the read began: a value whose only writer completed
    before an ok write that completed before the read was invoked.
    Returns (events, description).  Needs unique written values."""
    rnd = random.Random(seed)
    # Pair completions to invocations per process.
    open_, ops = {}, []
    for i, e in enumerate(events):
        if e["type"] == "invoke":
            open_[e["process"]] = i
        else:
            ops.append((open_.pop(e["process"]), i))
    writes = {}
    for inv, done in ops:
        e, d = events[inv], events[done]
        if d["type"] == "ok" and e["f"] in ("write", "cas"):
            v = e["value"] if e["f"] == "write" else e["value"][1]
            writes.setdefault(e["key"], []).append((e["time"], d["time"], v))
    reads = [(inv, done) for inv, done in ops
             if events[inv]["f"] == "read" and events[done]["type"] == "ok"]
    rnd.shuffle(reads)
    for inv, done in reads:
        key, call = events[inv]["key"], events[inv]["time"]
        ws = sorted(w for w in writes.get(key, []) if w[1] < call)
        # A write w completed before the read; an older write w0 completed before w began.
        for k in range(len(ws) - 1, 0, -1):
            w = ws[k]
            olds = [w0 for w0 in ws[:k] if w0[1] < w[0]]
            if olds:
                stale = olds[-1][2]
                if stale == events[done]["value"]:
                    continue
                out = [dict(e) for e in events]
                was = out[done]["value"]
                out[done]["value"] = stale
                return out, ("read by process %s at %s returned %s instead of %s"
                             % (events[inv]["process"], call, stale, was))
    raise ValueError("no read to make stale")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--keys", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--info-rate", type=float, default=0.02)
    ap.add_argument("--stale", action="store_true", help="inject one stale read")
    a = ap.parse_args()
    ev = register_history(a.ops, a.processes, a.keys, a.seed, a.info_rate)
    if a.stale:
        ev, what = inject_stale_read(ev, a.seed)
        print("injected: " + what, file=sys.stderr)
    for e in ev:
        print(json.dumps(e, separators=(",", ":")))


if __name__ == "__main__":
    main()
