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

A final read of one shard's member (a sharded cluster) carries, as its
invoke value, {"shard": name, "owns": [[min, max], ...]}: the ranges of
elements (min included, max excluded, null unbounded) whose chunks the
config servers give that shard after healing.  Such a read is held only to
those elements: an acknowledged one it owns and lacks is lost, and final
reads are compared (divergent) with the other reads of the same shard.
The elements it holds outside its ranges are orphans, left out of it as
mongod's shard filter leaves them out, and listed under "orphans" (not an
anomaly here: whether the range deleter left any is the harness's check);
they still count as seen for unexpected and failed-present.  A final read
without "owns" (through a router) is held to every element.
"""
from collections import Counter

from history import OK, FAIL, INFO, by_key, outcome_counts, pair, read_events


def _freeze(v):
    return tuple(v) if isinstance(v, list) else v


def _owns(op):
    """The ranges a final read is held to, or None (every element)."""
    return op.value.get("owns") if isinstance(op.value, dict) else None


def _in(owns, v):
    return owns is None or any((lo is None or v >= lo) and (hi is None or v < hi)
                               for lo, hi in owns)


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
           "stale": [], "vanished": [], "divergent": [], "orphans": [], "errors": []}
    if not finals:
        res["errors"].append("no final read")
    seen = set()
    for r in reads + finals:
        content = [_freeze(x) for x in (r.out or [])]
        s = set(content)
        if len(s) != len(content):
            dup = sorted((x for x, n in Counter(content).items() if n > 1), key=repr)
            res["errors"].append("%d duplicate elements (first %s) in p%s %s [%s, %s]%s" % (
                len(dup), dup[:5], r.process, r.f, r.call, r.ret,
                "" if r.node is None else " on %s" % r.node))
        seen |= s
    final_sets = []   # (read, the elements it owns, its ranges)
    for r in finals:
        owns, s = _owns(r), set(_freeze(x) for x in (r.out or []))
        orphans = sorted((v for v in s if not _in(owns, v)), key=repr)
        if orphans:
            res["orphans"].append({"node": r.node, "count": len(orphans),
                                   "first": orphans[:5]})
        final_sets.append((r, s.difference(orphans), owns))

    def in_all_finals(v):
        return all(v in s for _, s, owns in final_sets if _in(owns, v))

    for v in sorted(seen, key=repr):
        if v not in attempted:
            res["unexpected"].append(v)
        elif v in failed:
            res["failed_present"].append(v)
    for r, s, owns in final_sets:
        missing = [v for v in acked if v not in s and _in(owns, v)]
        res["lost"].extend({"element": v, "node": r.node, "acked": acked[v].ret}
                           for v in sorted(missing, key=repr))
        gone = [v for v in seen if v not in s and v not in acked and _in(owns, v)]
        res["vanished"].extend({"element": v, "node": r.node} for v in sorted(gone, key=repr))
    groups = {}
    for r, s, owns in final_sets:
        groups.setdefault(repr(owns), []).append((r, s))
    for group in groups.values():
        if len({frozenset(s) for _, s in group}) > 1:
            res["divergent"] += [{"node": r.node, "size": len(s)} for r, s in group]
    for r in reads:
        s = set(_freeze(x) for x in (r.out or []))
        for v, a in acked.items():
            if final_sets and a.ret < r.call and v not in s and in_all_finals(v):
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
                  "orphans", "errors"):
            if r[k]:
                lines.append("    %s (%d): %s" % (k, len(r[k]), r[k][:20]))
    return lines


def check_file(path, realtime=False):
    """Parse a JSON-lines history file and check it."""
    ops, _ = pair(read_events(path))
    return check(ops, realtime)
