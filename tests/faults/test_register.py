"""
Unit tests of the register linearizability checker (check_register.py):
hand-written histories that must fail and must pass, a cross-check against
a brute-force search on random small histories, and generated histories of
thousands of operations (linearizable by construction, then with one stale
read) within a time bound.
"""
import json
import os
import random
import subprocess
import sys
import time

import pytest

import check_register as cr
import simulate
from history import HistoryError, pair

HERE = os.path.dirname(os.path.abspath(__file__))


def ev(p, f, value, call, ret, typ="ok", out=None, key="k"):
    """Events of one op: invoke at call, completion at ret (None: no completion)."""
    e = [{"process": p, "type": "invoke", "f": f, "key": key,
          "value": None if f == "read" else value, "time": call}]
    if ret is not None:
        e.append({"process": p, "type": typ, "f": f, "key": key,
                  "value": out if f == "read" else value, "time": ret})
    return e


def hist(*ops):
    """ops as (process, f, value, call, ret[, type[, out[, key]]]); reads
    give what they read as `out` (or as value for brevity)."""
    events = []
    for o in ops:
        p, f, value, call, ret = o[:5]
        typ = o[5] if len(o) > 5 else "ok"
        out = o[6] if len(o) > 6 else (value if f == "read" else None)
        key = o[7] if len(o) > 7 else "k"
        events += ev(p, f, value, call, ret, typ, out, key)
    events.sort(key=lambda e: (e["time"], e["type"] != "invoke"))
    return pair(events)[0]


def verdict(*ops, init=None):
    return cr.check(hist(*ops), init=init, time_limit=20)["valid"]


# ---------------------------------------------------------------- must fail

def test_stale_read_fails_and_witness_names_it():
    ops = hist((1, "write", 1, 0, 10), (2, "write", 2, 20, 30), (3, "read", 1, 40, 50))
    res = cr.check(ops)
    assert res["valid"] is False
    r = res["keys"]["k"]
    assert r["failing"].f == "read" and r["failing"].out == 1
    # The witness: the write of 2 that completed before the read began, and the read.
    assert [(o.f, o.value if o.f != "read" else o.out) for o in r["witness"]] == \
        [("write", 2), ("read", 1)]
    text = "\n".join(cr.report(res))
    assert "cannot linearize: p3 read -> 1" in text


def test_lost_write_fails():
    assert verdict((1, "write", 1, 0, 10), (2, "read", None, 20, 30)) is False


def test_write_visible_then_gone_fails():
    # A write still running is seen by one read and then not by a later one.
    assert verdict((1, "write", 1, 0, 100), (2, "read", 1, 10, 20),
                   (3, "read", None, 30, 40)) is False


def test_info_write_visible_then_gone_fails():
    assert verdict((1, "write", 1, 0, None, "info"), (2, "read", 1, 10, 20),
                   (3, "read", None, 30, 40)) is False


def test_cas_succeeding_twice_fails():
    assert verdict((1, "write", 1, 0, 10), (2, "cas", [1, 2], 20, 40),
                   (3, "cas", [1, 3], 20, 40)) is False


def test_read_of_value_never_written_fails():
    assert verdict((1, "write", 1, 0, 10, "fail"), (2, "read", 1, 20, 30)) is False


def test_non_monotonic_reads_fail():
    # Sequential reads 2 then 1 after both writes completed.
    assert verdict((1, "write", 1, 0, 10), (2, "write", 2, 0, 10),
                   (3, "read", 2, 20, 30), (3, "read", 1, 40, 50)) is False


def test_failure_in_one_key_only():
    res = cr.check(hist((1, "write", 1, 0, 10, "ok", None, "a"),
                        (2, "read", 1, 20, 30, "ok", 1, "a"),
                        (3, "write", 5, 0, 10, "ok", None, "b"),
                        (4, "read", None, 20, 30, "ok", None, "b")))
    assert res["valid"] is False
    assert res["keys"]["a"]["valid"] is True and res["keys"]["b"]["valid"] is False


# ---------------------------------------------------------------- must pass

def test_concurrent_overlapping_ops_pass():
    # Both writes overlap both reads: order w2, r2, w1, r1.
    assert verdict((1, "write", 1, 0, 100), (2, "write", 2, 0, 100),
                   (3, "read", 2, 10, 20), (4, "read", 1, 30, 40)) is True
    # Reads overlapping a write may see the old or new value, in that order.
    assert verdict((1, "write", 1, 0, 10), (2, "write", 2, 20, 60),
                   (3, "read", 1, 25, 30), (4, "read", 2, 35, 40),
                   (5, "read", 2, 70, 80)) is True


def test_indeterminate_write_taking_effect_passes():
    assert verdict((1, "write", 1, 0, None, "info"), (2, "read", 1, 50, 60)) is True


def test_indeterminate_write_taking_effect_late_passes():
    # No upper bound: it may take effect long after, even after other writes.
    assert verdict((1, "write", 1, 0, None, "info"), (2, "write", 2, 10, 20),
                   (2, "read", 2, 30, 40), (3, "read", 1, 1000, 1010)) is True


def test_indeterminate_write_not_taking_effect_passes():
    assert verdict((1, "write", 1, 0, None, "info"), (2, "read", None, 50, 60)) is True


def test_indeterminate_cas_either_way_passes():
    base = ((1, "write", 1, 0, 10), (2, "cas", [1, 2], 20, None, "info"))
    assert verdict(*base, (3, "read", 2, 30, 40)) is True
    assert verdict(*base, (3, "read", 1, 30, 40)) is True
    # ... but not both ways in sequence.
    assert verdict(*base, (3, "read", 2, 30, 40), (3, "read", 1, 50, 60)) is False


def test_failed_cas_and_info_read_are_ignored():
    assert verdict((1, "write", 1, 0, 10), (2, "cas", [5, 6], 20, 30, "fail"),
                   (3, "read", None, 20, 30, "info"), (4, "read", 1, 40, 50)) is True


def test_initial_value_and_json_types():
    assert verdict((1, "read", 0, 0, 10), init=0) is True
    assert verdict((1, "read", None, 0, 10), init=0) is False
    # true is not 1
    assert verdict((1, "write", True, 0, 10), (2, "read", 1, 20, 30)) is False
    assert verdict((1, "write", {"a": [1]}, 0, 10), (2, "read", {"a": [1]}, 20, 30)) is True


def test_malformed_history_is_refused():
    with pytest.raises(HistoryError):
        pair([{"process": 1, "type": "ok", "f": "read", "time": 1}])
    with pytest.raises(HistoryError):
        pair([{"process": 1, "type": "invoke", "f": "read", "time": 1},
              {"process": 1, "type": "invoke", "f": "read", "time": 2}])


# ------------------------------------------------- brute-force cross-check

def brute(ops, init=None):
    """Linearizable?  Tries every order and every subset of info ops."""
    req = [o for o in ops if o.type == "ok"]
    opt = [o for o in ops if o.type == "info" and o.f != "read"]

    def legal(state, o):
        if state is cr.ANY and o.f != "write":
            return True, cr.freeze(o.out if o.f == "read" else o.value[1])
        if o.f == "read":
            return state == cr.freeze(o.out), state
        if o.f == "write":
            return True, cr.freeze(o.value)
        return state == cr.freeze(o.value[0]), cr.freeze(o.value[1])

    def go(state, left, optional):
        if not left:
            return True
        for o in list(left) + list(optional):
            # o may go next unless a required op left returned before o was called.
            if any(x is not o and x.ret < o.call for x in left):
                continue
            ok, new = legal(state, o)
            if ok and go(new, [x for x in left if x is not o],
                         [x for x in optional if x is not o]):
                return True
        return False

    return go(init if init is cr.ANY else cr.freeze(init), req, opt)


def random_history(rnd, n):
    events = []
    for i in range(n):
        call = rnd.randint(0, 40)
        ret = call + rnd.randint(0, 25)
        f = rnd.choice(["read", "read", "write", "cas"])
        v = rnd.randint(1, 3)
        value = [rnd.randint(0, 3) or None, v] if f == "cas" else v
        typ = rnd.choice(["ok"] * 4 + ["info"] * 2 + ["fail"])
        out = rnd.choice([None, 1, 2, 3]) if f == "read" else None
        events += ev(i, f, value, call, None if typ == "info" else ret, typ, out)
    events.sort(key=lambda e: (e["time"], e["type"] != "invoke"))
    return pair(events)[0]


def test_agrees_with_brute_force_on_random_small_histories():
    rnd = random.Random(25)
    seen = {True: 0, False: 0}
    for _ in range(2000):
        ops = random_history(rnd, rnd.randint(1, 8))
        want = brute(ops)
        got = cr.check(ops, time_limit=5)["valid"]
        assert got is want, "\n".join(o.describe() for o in ops)
        seen[want] += 1
    assert seen[True] > 300 and seen[False] > 300, seen


def test_witness_is_itself_not_linearizable():
    rnd = random.Random(7)
    checked = 0
    for _ in range(300):
        ops = random_history(rnd, 6)
        res = cr.check(ops, time_limit=5)
        if res["valid"] is not False:
            continue
        r = res["keys"]["k"]
        assert r["failing"] in r["witness"]
        # Ops open at the cut are optional to the checker; required here is stricter.
        assert brute(r["witness"], cr.ANY if r["initial"] == "any value" else None) is False
        checked += 1
    assert checked > 30


# ---------------------------------------------------------- generated histories

def timed_check(events, **kw):
    t0 = time.monotonic()
    res = cr.check(pair(events)[0], time_limit=30, **kw)
    return res, time.monotonic() - t0


def test_generated_linearizable_history_passes_quickly():
    ev_ = simulate.register_history(3000, processes=5, keys=1, seed=11)
    res, secs = timed_check(ev_)
    assert res["valid"] is True
    assert res["counts"]["info"] > 10
    assert secs < 15, secs


def test_generated_history_with_a_stale_read_fails_quickly():
    ev_, what = simulate.inject_stale_read(
        simulate.register_history(3000, processes=5, keys=1, seed=11), seed=3)
    res, secs = timed_check(ev_)
    assert res["valid"] is False, what
    r = res["keys"]["k0"]
    assert r["failing"].f == "read"
    assert len(r["witness"]) <= 30, len(r["witness"])
    assert secs < 20, secs


def test_generated_multi_key_history():
    ev_ = simulate.register_history(5000, processes=8, keys=5, seed=5)
    res, secs = timed_check(ev_)
    assert res["valid"] is True and len(res["keys"]) == 5
    assert secs < 20, secs
    bad, _ = simulate.inject_stale_read(ev_, seed=9)
    assert timed_check(bad)[0]["valid"] is False


def test_generated_history_with_few_distinct_values():
    # Repeated values make many equal states: memoisation must still cope.
    ev_ = simulate.register_history(2000, processes=6, keys=1, seed=3, values=3)
    res, secs = timed_check(ev_)
    assert res["valid"] is True
    assert secs < 20, secs


def test_command_line_exit_codes(tmp_path):
    good = tmp_path / "good.jsonl"
    bad = tmp_path / "bad.jsonl"
    ev_ = simulate.register_history(300, seed=2)
    good.write_text("".join(json.dumps(e) + "\n" for e in ev_))
    bad.write_text("".join(json.dumps(e) + "\n" for e in simulate.inject_stale_read(ev_)[0]))
    cli = [sys.executable, os.path.join(HERE, "check.py"), "register"]
    assert subprocess.run(cli + [str(good)], capture_output=True, timeout=60).returncode == 0
    out = subprocess.run(cli + [str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "cannot linearize" in out.stdout


def test_brute_force_itself_is_sane():
    assert brute(hist((1, "write", 1, 0, 10), (2, "read", 1, 20, 30))) is True
    assert brute(hist((1, "write", 1, 0, 10), (2, "read", None, 20, 30))) is False
    assert brute(hist((2, "read", 7, 20, 30)), init=cr.ANY) is True
