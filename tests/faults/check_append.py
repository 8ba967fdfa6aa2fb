"""
List-append checker: "append" of unique elements to an array in one
document per key, "read" of the whole array during the run and
"final-read" after healing, in the format of history.py.

Per key, where an element's ack time is the completion of its ok append
and "the final list" is the longest final read (or, with no final read,
the longest read):
- reordered:   two reads whose lists are not prefix-compatible (neither is a
               prefix of the other): the order of appends changed;
- duplicated:  an element twice in one read;
- unexpected:  an element never appended; failed-present: an element whose
               append failed;
- lost:        acknowledged, missing from the final list;
- vanished:    seen by a read, missing from the final list (a write visible
               then gone), acknowledged or not;
- realtime-order: in the final list b comes before a although a's append was
               acknowledged before b's was invoked;
- divergent:   final reads (one per member) disagree;
- stale:       a read misses an element acknowledged before the read was
               invoked, or misses one that a read completed before it had
               seen (anomalies only with realtime=True: linearizable reads).
Indeterminate (info) appends may appear or not.
"""
import bisect

from history import OK, FAIL, INFO, by_key, outcome_counts, pair, read_events


def _freeze(v):
    return tuple(v) if isinstance(v, list) else v


def _lst(op):
    return [_freeze(x) for x in (op.out or [])]


def _is_prefix(a, b):
    return len(a) <= len(b) and b[:len(a)] == a


def check_key(ops, realtime=False):
    """Check one document's ops; returns a dict of findings."""
    appends = {}
    for op in ops:
        if op.f == "append":
            appends[_freeze(op.value)] = op
    reads = [op for op in ops if op.f in ("read", "final-read") and op.type == OK]
    finals = [op for op in reads if op.f == "final-read"]
    res = {"appends": len(appends),
           "acknowledged": sum(1 for a in appends.values() if a.type == OK),
           "indeterminate": sum(1 for a in appends.values() if a.type == INFO),
           "reads": len(reads), "reordered": [], "duplicated": [], "unexpected": [],
           "failed_present": [], "lost": [], "vanished": [], "realtime_order": [],
           "stale": [], "divergent": [], "errors": []}
    if not reads:
        res["errors"].append("no read")
        res["valid"] = False
        return res
    lists = [(r, _lst(r)) for r in reads]
    longest_r, longest = max(lists, key=lambda rl: len(rl[1]))
    for r, lst in lists:
        if len(set(lst)) != len(lst):
            res["duplicated"].append(r.describe())
        if not _is_prefix(lst, longest):
            res["reordered"].append({"read": r.describe(), "other": longest_r.describe()})
    final = max((_lst(r) for r in finals), key=len) if finals else longest
    final_set = set(final)
    seen = set()
    for _, lst in lists:
        seen.update(lst)
    for v in sorted(seen, key=repr):
        a = appends.get(v)
        if a is None:
            res["unexpected"].append(v)
        elif a.type == FAIL:
            res["failed_present"].append(v)
        if v not in final_set:
            res["vanished"].append(v)
    for v, a in appends.items():
        if a.type == OK and v not in final_set:
            res["lost"].append({"element": v, "acked": a.ret})
    # b before a in the final list while a was acknowledged before b was invoked:
    # scan from the right keeping the earliest ack among later elements.
    earliest, who = None, None
    for v in reversed(final):
        a = appends.get(v)
        if a is None:
            continue
        if earliest is not None and earliest < a.call:
            res["realtime_order"].append({"before": v, "after": who})
        if a.type == OK and (earliest is None or a.ret < earliest):
            earliest, who = a.ret, v
    # Stale reads, in O(n log n): with every read a prefix of the final list, a
    # read of length L misses an element iff the element sits at position >= L.
    pos = {v: i for i, v in enumerate(final)}
    acks = sorted((a.ret, pos[v], v) for v, a in appends.items()
                  if a.type == OK and v in pos)
    ack_times, ack_max = [], []
    for t, p, v in acks:
        ack_times.append(t)
        ack_max.append(max(ack_max[-1], (p, v)) if ack_max else (p, v))
    by_ret = sorted(lists, key=lambda rl: rl[0].ret)
    ret_times, ret_max = [], []
    for r2, lst2 in by_ret:
        ret_times.append(r2.ret)
        ret_max.append(max(ret_max[-1], (len(lst2), r2.index)) if ret_max else
                       (len(lst2), r2.index))
    for r, lst in lists:
        if not _is_prefix(lst, final):
            continue
        j = bisect.bisect_left(ack_times, r.call)
        if j and ack_max[j - 1][0] >= len(lst):
            res["stale"].append({"read": r.describe(), "misses_acknowledged": ack_max[j - 1][1]})
            continue
        j = bisect.bisect_left(ret_times, r.call)
        if j and ret_max[j - 1][0] > len(lst):
            res["stale"].append({"read": r.describe(),
                                 "shorter_than_earlier_read_of": ret_max[j - 1][0]})
    if len({tuple(_lst(r)) for r in finals}) > 1:
        res["divergent"] = [{"node": r.node, "length": len(_lst(r))} for r in finals]
    kinds = ["reordered", "duplicated", "unexpected", "failed_present", "lost", "vanished",
             "divergent", "errors"]
    if realtime:
        kinds += ["stale", "realtime_order"]
    res["valid"] = not any(res[k] for k in kinds)
    return res


def check(ops, realtime=False):
    """Check every document in ops (from history.pair); {valid, keys, counts}."""
    keys = {k: check_key(kops, realtime) for k, kops in by_key(ops).items()}
    return {"valid": all(r["valid"] for r in keys.values()), "keys": keys,
            "counts": outcome_counts(ops)}


def report(result):
    """Human-readable lines for a check() result."""
    lines = ["append: %s (%s)" % (result["valid"], result["counts"])]
    for key, r in result["keys"].items():
        lines.append("  key %s: %s; appends %d (acknowledged %d, indeterminate %d), reads %d"
                     % (key, r["valid"], r["appends"], r["acknowledged"], r["indeterminate"],
                        r["reads"]))
        for k in ("reordered", "duplicated", "unexpected", "failed_present", "lost",
                  "vanished", "realtime_order", "stale", "divergent", "errors"):
            if r[k]:
                lines.append("    %s (%d): %s" % (k, len(r[k]), r[k][:10]))
    return lines


def check_file(path, realtime=False):
    """Parse a JSON-lines history file and check it."""
    ops, _ = pair(read_events(path))
    return check(ops, realtime)
