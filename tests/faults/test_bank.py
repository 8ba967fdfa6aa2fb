"""
Unit tests of the bank checker (check_bank.py): histories that must fail
(a read that saw half a transfer, a negative balance, a missing account,
a transfer whose credit matched nothing, one that committed with an $inc
that matched nothing, members whose final balances differ, no final read) and that must pass
(any mix of committed, failed and indeterminate transfers as long as every
snapshot adds up).
"""
import check_bank as cb
from test_set_append import build   # (process, f, value, call, ret, type, out, node) -> ops

ACCOUNTS = ["a0", "a1", "a2"]
TOTAL = 300


def transfer(p, src, dst, amount, call, ret, typ="ok", n=None):
    """n: the workload's counts of the debit and the credit ([n, nModified] each)."""
    out = None if n is None else {"n": [n[0][0], n[1][0]], "nModified": [n[0][1], n[1][1]]}
    return (p, "transfer", [src, dst, amount], call, ret, typ, out, None)


def read(p, bal, call, ret, f="read", node=None):
    return (p, f, "txn", call, ret, "ok", bal, node)


def finals(bal, t=1000):
    return [read("final-%s" % n, bal, t, t + 5, "final-read", n) for n in ("n1", "n2", "n3")]


def check(*ops):
    return cb.check(build(*ops), ACCOUNTS, TOTAL)


def test_conserved_totals_pass():
    res = check(transfer(0, "a0", "a1", 10, 1, 5),
                read(1, {"a0": 90, "a1": 110, "a2": 100}, 6, 8),
                transfer(0, "a1", "a2", 50, 9, None, "info"),
                transfer(2, "a2", "a0", 500, 9, 12, "fail"),
                read(1, {"a0": 90, "a1": 60, "a2": 150}, 13, 14),
                *finals({"a0": 90, "a1": 60, "a2": 150}))
    assert res["valid"] is True, cb.report(res)
    assert res["transfers_ok"] == 1 and res["reads"] == 2 and res["final_reads"] == 3


def test_read_of_half_a_transfer_fails():
    res = check(transfer(0, "a0", "a1", 10, 1, 5),
                read(1, {"a0": 90, "a1": 100, "a2": 100}, 2, 4),
                *finals({"a0": 90, "a1": 110, "a2": 100}))
    assert res["valid"] is False
    assert res["wrong_total"][0]["total"] == 290


def test_final_total_changed_fails():
    res = check(*finals({"a0": 100, "a1": 100, "a2": 130}))
    assert res["valid"] is False and len(res["wrong_total"]) == 3


def test_negative_balance_fails():
    res = check(read(1, {"a0": -10, "a1": 210, "a2": 100}, 2, 4),
                *finals({"a0": 100, "a1": 100, "a2": 100}))
    assert res["valid"] is False and res["negative"]


def test_missing_or_unexpected_account_fails():
    res = check(read(1, {"a0": 200, "a1": 100}, 2, 4),
                read(1, {"a0": 100, "a1": 100, "a2": 50, "zz": 50}, 5, 6),
                *finals({"a0": 100, "a1": 100, "a2": 100}))
    assert res["valid"] is False and res["missing"] and res["unexpected"]


def test_divergent_final_reads_fail():
    ops = finals({"a0": 100, "a1": 100, "a2": 100})
    ops[2] = read("final-n3", {"a0": 50, "a1": 150, "a2": 100}, 1000, 1005, "final-read", "n3")
    res = check(*ops)
    assert res["valid"] is False and res["divergent"]


def test_no_final_read_is_an_error():
    res = check(read(1, {"a0": 100, "a1": 100, "a2": 100}, 2, 4))
    assert res["valid"] is False and res["errors"] == ["no final read"]


def test_transfer_counts():
    """A committed transfer whose credit matched nothing lost its amount
    (unmatched); one the workload aborted because its credit matched nothing
    read a snapshot without an account (missing); a debit that matched
    nothing (balance below the amount) is an ordinary failure."""
    bal = {"a0": 100, "a1": 100, "a2": 100}
    ok = check(transfer(0, "a0", "a1", 10, 1, 5, n=[[1, 1], [1, 1]]),
               transfer(0, "a0", "a1", 10, 6, 7, "ok", [[1, 1], [1, 1]]),
               transfer(1, "a2", "a0", 500, 2, 3, "fail", [[0, 0], [None, None]]),
               *finals({"a0": 80, "a1": 120, "a2": 100}))
    assert ok["valid"] is True, cb.report(ok)
    lost = check(transfer(0, "a0", "a1", 10, 1, 5, n=[[1, 1], [0, 0]]),
                 read(1, {"a0": 90, "a1": 100, "a2": 100}, 6, 8),
                 *finals({"a0": 90, "a1": 100, "a2": 100}))
    assert lost["valid"] is False and len(lost["unmatched"]) == 1
    assert "a0" in lost["unmatched"][0]
    aborted = check(transfer(0, "a0", "a1", 10, 1, 5, "fail", [[1, 1], [0, 0]]),
                    *finals(bal))
    assert aborted["valid"] is False and not aborted["unmatched"]
    assert aborted["missing"] and "credit matched nothing" in aborted["missing"][0]
