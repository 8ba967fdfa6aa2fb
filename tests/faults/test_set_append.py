"""
Unit tests of the set checker (check_set.py) and the list-append checker
(check_append.py): histories that must fail (lost, unexpected, stale,
reordered, visible then gone, divergent members) and that must pass
(concurrent and indeterminate operations either way).
"""
import json
import os
import random
import subprocess
import sys

import check_append as ca
import check_set as cs
from history import pair

HERE = os.path.dirname(os.path.abspath(__file__))


def build(*ops):
    """ops as (process, f, value, call, ret, type, out, node); ret None: no completion;
    a completion's value is out (a read's, or any op's given one), else value."""
    events = []
    for p, f, value, call, ret, typ, out, node in ops:
        events.append({"process": p, "type": "invoke", "f": f, "key": "s",
                       "value": value, "time": call})
        if ret is not None:
            events.append({"process": p, "type": typ, "f": f, "key": "s",
                           "value": out if out is not None or f in ("read", "final-read")
                           else value,
                           "time": ret, "node": node})
    events.sort(key=lambda e: (e["time"], e["type"] != "invoke"))
    return pair(events)[0]


def add(p, v, call, ret, typ="ok"):
    return (p, "add", v, call, ret, typ, None, None)


def app(p, v, call, ret, typ="ok"):
    return (p, "append", v, call, ret, typ, None, None)


def read(p, out, call, ret, f="read", node=None):
    return (p, f, None, call, ret, "ok", out, node)


def final(p, out, t, node):
    return read(p, out, t, t + 5, "final-read", node)


def set_result(*ops, realtime=False):
    res = cs.check(build(*ops), realtime)
    return res["valid"], res["keys"]["s"]


def append_result(*ops, realtime=False):
    res = ca.check(build(*ops), realtime)
    return res["valid"], res["keys"]["s"]


# ------------------------------------------------------------------- set

def test_set_all_present_passes():
    ok, r = set_result(add(1, 1, 0, 10), add(2, 2, 0, 10), add(3, 3, 5, None, "info"),
                       add(4, 4, 5, 8, "fail"),
                       final(9, [1, 2, 3], 100, "n1"), final(9, [1, 2, 3], 110, "n2"))
    assert ok and r["acknowledged"] == 2 and r["indeterminate"] == 1 and r["failed"] == 1


def test_set_indeterminate_absent_passes():
    assert set_result(add(1, 1, 0, 10), add(2, 2, 0, None, "info"),
                      final(9, [1], 100, "n1"))[0]


def test_set_lost_acknowledged_insert_fails():
    ok, r = set_result(add(1, 1, 0, 10), add(2, 2, 0, 10),
                       final(9, [1, 2], 100, "n1"), final(9, [1], 110, "n2"))
    assert not ok
    assert r["lost"] == [{"element": 2, "node": "n2", "acked": 10}]
    assert r["divergent"]


def test_set_unexpected_and_failed_present_fail():
    ok, r = set_result(add(1, 1, 0, 10), add(2, 2, 0, 10, "fail"),
                       final(9, [1, 2, 77], 100, "n1"))
    assert not ok and r["unexpected"] == [77] and r["failed_present"] == [2]


def test_set_stale_read_is_reported_and_fails_only_when_realtime():
    ops = (add(1, 1, 0, 10), add(2, 2, 0, 10), read(3, [1], 20, 30),
           final(9, [1, 2], 100, "n1"))
    ok, r = set_result(*ops)
    assert ok and len(r["stale"]) == 1 and r["stale"][0]["element"] == 2
    assert not set_result(*ops, realtime=True)[0]


def test_set_element_seen_then_gone_fails():
    # Never acknowledged (info), seen by a read, absent at the end: a rolled-back write.
    ok, r = set_result(add(1, 1, 0, 10), add(2, 2, 0, None, "info"), read(3, [1, 2], 20, 30),
                       final(9, [1], 100, "n1"))
    assert not ok and r["vanished"] == [{"element": 2, "node": "n1"}]


def test_set_without_final_read_is_an_error():
    ok, r = set_result(add(1, 1, 0, 10))
    assert not ok and r["errors"]


def shard_final(p, out, t, node, owns):
    """A final read of one shard's member, held to the ranges it owns."""
    return ("final-" + node, "final-read", {"shard": node.split("/")[0], "owns": owns}, t,
            t + 5, "ok", out, node)


def test_set_sharded_owned_parts_and_orphans_pass():
    # shard0 owns [min, 10), shard1 [10, max); 12 is an orphan left on shard0
    ok, r = set_result(add(1, 1, 0, 10), add(2, 12, 0, 10), add(3, 13, 0, None, "info"),
                       final("r0", [1, 12], 100, "router0"),
                       shard_final(9, [1, 12], 100, "shard0/n1", [[None, 10]]),
                       shard_final(9, [1], 100, "shard0/n2", [[None, 10]]),
                       shard_final(9, [12], 100, "shard1/n1", [[10, None]]))
    assert ok, r
    assert r["orphans"] == [{"node": "shard0/n1", "count": 1, "first": [12]}]


def test_set_sharded_lost_on_the_owner_fails():
    # 12 acknowledged, on the router's read only as shard0's orphan, absent on its owner
    ok, r = set_result(add(1, 1, 0, 10), add(2, 12, 0, 10),
                       final("r0", [1, 12], 100, "router0"),
                       shard_final(9, [1, 12], 100, "shard0/n1", [[None, 10]]),
                       shard_final(9, [], 100, "shard1/n1", [[10, None]]))
    assert not ok
    assert r["lost"] == [{"element": 12, "node": "shard1/n1", "acked": 10}]
    assert not r["divergent"]


def test_set_sharded_members_of_one_shard_differ_fails():
    ok, r = set_result(add(1, 12, 0, 10), add(2, 14, 0, None, "info"),
                       final("r0", [12, 14], 100, "router0"),
                       shard_final(9, [12, 14], 100, "shard1/n1", [[10, None]]),
                       shard_final(9, [12], 100, "shard1/n2", [[10, None]]))
    assert not ok and r["divergent"] and r["vanished"] == [{"element": 14, "node": "shard1/n2"}]


def test_set_sharded_duplicate_through_the_router_fails():
    ok, r = set_result(add(1, 12, 0, 10), final("r0", [12, 12], 100, "router0"),
                       shard_final(9, [12], 100, "shard1/n1", [[10, None]]))
    assert not ok and r["errors"]


# ---------------------------------------------------------------- append

def test_append_prefix_compatible_reads_pass():
    ok, r = append_result(app(1, 1, 0, 10), app(2, 2, 5, 20), app(3, 3, 6, None, "info"),
                          read(4, [1], 8, 12), read(5, [1, 2], 15, 25),
                          read(6, [1, 2, 3], 30, 40), final(9, [1, 2, 3], 100, "n1"),
                          realtime=True)
    assert ok, r


def test_append_indeterminate_absent_passes():
    assert append_result(app(1, 1, 0, 10), app(2, 2, 0, None, "info"),
                         read(4, [1], 30, 40), final(9, [1], 100, "n1"), realtime=True)[0]


def test_append_concurrent_appends_in_either_order_pass():
    assert append_result(app(1, 1, 0, 50), app(2, 2, 0, 50), read(3, [2, 1], 60, 70),
                         realtime=True)[0]


def test_append_reordered_fails():
    ok, r = append_result(app(1, 1, 0, 50), app(2, 2, 0, 50), read(3, [1, 2], 60, 70),
                          read(4, [2, 1], 80, 90))
    assert not ok and len(r["reordered"]) == 1


def test_append_lost_acknowledged_append_fails():
    ok, r = append_result(app(1, 1, 0, 10), app(2, 2, 0, 10), read(3, [1, 2], 20, 30),
                          final(9, [1], 100, "n1"))
    assert not ok
    assert r["lost"] == [{"element": 2, "acked": 10}]
    assert r["vanished"] == [2]


def test_append_visible_then_gone_fails():
    # The indeterminate append 3 was read, then the final list lacks it.
    ok, r = append_result(app(1, 1, 0, 10), app(2, 3, 0, None, "info"),
                          read(3, [1, 3], 20, 30), final(9, [1], 100, "n1"))
    assert not ok and r["vanished"] == [3] and not r["lost"]


def test_append_duplicate_unexpected_and_failed_present_fail():
    ok, r = append_result(app(1, 1, 0, 10), app(2, 2, 0, 10, "fail"),
                          read(3, [1, 1], 20, 30), final(9, [1, 2, 9], 100, "n1"))
    assert not ok
    assert r["duplicated"] and r["unexpected"] == [9] and r["failed_present"] == [2]


def test_append_stale_and_realtime_order_only_with_realtime():
    # A read invoked after 2 was acknowledged misses it; and in the list 2
    # precedes 1 although 1 was acknowledged before 2 was invoked.
    ops = (app(1, 1, 0, 10), app(2, 2, 20, 30), read(3, [2], 40, 45),
           final(9, [2, 1], 100, "n1"))
    ok, r = append_result(*ops)
    assert ok and r["stale"] and r["realtime_order"]
    assert not append_result(*ops, realtime=True)[0]


def test_append_read_shorter_than_an_earlier_read_is_stale():
    ops = (app(1, 1, 0, None, "info"), app(2, 2, 0, None, "info"),
           read(3, [1, 2], 20, 30), read(4, [1], 40, 50), final(9, [1, 2], 100, "n1"))
    ok, r = append_result(*ops)
    assert ok and len(r["stale"]) == 1
    assert not append_result(*ops, realtime=True)[0]


def test_append_divergent_final_reads_fail():
    ok, r = append_result(app(1, 1, 0, None, "info"), final(9, [1], 100, "n1"),
                          final(9, [], 110, "n2"))
    assert not ok and r["divergent"]


def test_append_large_history_is_fast():
    # 4 clients append 2,000 elements and read 2,000 times; one server order.
    rnd = random.Random(4)
    lst, ops, t = [], [], 0
    for i in range(4000):
        t += rnd.randint(1, 5)
        if i % 2:
            ops.append(read(100 + i, list(lst), t, t + 3))
        else:
            lst.append(i)
            ops.append(app(100 + i, i, t, t + 3))
    ops.append(final(9, list(lst), t + 100, "n1"))
    ok, r = append_result(*ops, realtime=True)
    assert ok and r["reads"] == 2001


def test_command_line(tmp_path):
    h = tmp_path / "set.jsonl"
    events = [{"process": 1, "type": "invoke", "f": "add", "key": "s", "value": 1, "time": 0},
              {"process": 1, "type": "ok", "f": "add", "key": "s", "value": 1, "time": 5},
              {"process": "nemesis", "type": "info", "f": "partition", "value": [["n1"], ["n2"]],
               "time": 6},
              {"process": 2, "type": "invoke", "f": "final-read", "key": "s", "time": 10},
              {"process": 2, "type": "ok", "f": "final-read", "key": "s", "value": [],
               "time": 12, "node": "n1"}]
    h.write_text("".join(json.dumps(e) + "\n" for e in events))
    out = subprocess.run([sys.executable, os.path.join(HERE, "check.py"), "set", str(h)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stdout
    assert "lost (1)" in out.stdout and "nemesis events: 1" in out.stdout
