"""
Set checker: unique inserts ("add"), reads during the run ("read") and,
after healing, a final read on every member ("final-read", with "node"),
in the format of history.py.

Per key (set), with an element's ack time the completion of its ok add:
- lost:        acknowledged, missing from some final read;
- unexpected:  in a read but never attempted (no add of it);
- failed-present: in a read although its add failed (definitely not done);
- stale:       acknowledged before a read was invoked and missing from that
               read, yet present in every final read (an anomaly only when
               reads must be linearizable: realtime=True);
- vanished:    seen by some read, missing from some final read (a write
               visible then gone), acknowledged or not;
- divergent:   final reads disagree with each other (members did not
               converge);
- no final read at all is an error.
Indeterminate (info) adds may be present or not.
"""
from history import OK, FAIL, INFO, by_key, outcome_counts, pair, read_events


def _freeze(v):
    return tuple(v) if isinstance(v, list) else v


def check_key(ops, realtime=False):
    """Check one set's ops; returns a dict of findings (see the module doc)."""
    adds = [op for op in ops if op.f == "add"]
    reads = [op for op in ops if op.f == "read" and op.type == OK]
    finals = [op for op in ops if op.f == "final-read" and op.type == OK]
    attempted = {}
    for op in adds:
        attempted[_freeze(op.value)] = op
    acked = {v: op for v, op in attempted.items() if op.type == OK}
    failed = {v for v, op in attempted.items() if op.type == FAIL}
    res = {"attempted": len(attempted), "acknowledged": len(acked),
           "failed": len(failed), "indeterminate": sum(1 for op in adds if op.type == INFO),
           "final_reads": len(finals), "lost": [], "unexpected": [], "failed_present": [],
           "stale": [], "vanished": [], "divergent": [], "errors": []}
    if not finals:
        res["errors"].append("no final read")
    seen = set()
    for r in reads + finals:
        content = [_freeze(x) for x in (r.out or [])]
        s = set(content)
        if len(s) != len(content):
            res["errors"].append("duplicate elements in %s" % r.describe())
        seen |= s
    final_sets = [(r, set(_freeze(x) for x in (r.out or []))) for r in finals]
    in_all_finals = set.intersection(*[s for _, s in final_sets]) if final_sets else set()
    for v in sorted(seen, key=repr):
        if v not in attempted:
            res["unexpected"].append(v)
        elif v in failed:
            res["failed_present"].append(v)
    for r, s in final_sets:
        missing = [v for v in acked if v not in s]
        res["lost"].extend({"element": v, "node": r.node, "acked": acked[v].ret}
                           for v in sorted(missing, key=repr))
        gone = [v for v in seen if v not in s and v not in acked]
        res["vanished"].extend({"element": v, "node": r.node} for v in sorted(gone, key=repr))
    if len({frozenset(s) for _, s in final_sets}) > 1:
        res["divergent"] = [{"node": r.node, "size": len(s)} for r, s in final_sets]
    for r in reads:
        s = set(_freeze(x) for x in (r.out or []))
        for v, a in acked.items():
            if a.ret < r.call and v not in s and v in in_all_finals:
                res["stale"].append({"element": v, "read": r.describe()})
    kinds = ["lost", "unexpected", "failed_present", "vanished", "divergent", "errors"]
    if realtime:
        kinds.append("stale")
    res["valid"] = not any(res[k] for k in kinds)
    return res


def check(ops, realtime=False):
    """Check every set in ops (from history.pair); {valid, keys, counts}."""
    keys = {k: check_key(kops, realtime) for k, kops in by_key(ops).items()}
    return {"valid": all(r["valid"] for r in keys.values()), "keys": keys,
            "counts": outcome_counts(ops)}


def report(result):
    """Human-readable lines for a check() result."""
    lines = ["set: %s (%s)" % (result["valid"], result["counts"])]
    for key, r in result["keys"].items():
        lines.append("  key %s: %s; attempted %d, acknowledged %d, failed %d, indeterminate %d, "
                     "final reads %d" % (key, r["valid"], r["attempted"], r["acknowledged"],
                                         r["failed"], r["indeterminate"], r["final_reads"]))
        for k in ("lost", "unexpected", "failed_present", "stale", "vanished", "divergent",
                  "errors"):
            if r[k]:
                lines.append("    %s (%d): %s" % (k, len(r[k]), r[k][:20]))
    return lines


def check_file(path, realtime=False):
    """Parse a JSON-lines history file and check it."""
    ops, _ = pair(read_events(path))
    return check(ops, realtime)
