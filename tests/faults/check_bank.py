"""
Bank checker: transfers between accounts in multi-document transactions
("transfer", value [from, to, amount]), snapshot reads of every account
("read", completion value {account: balance}) and, after healing, a final
read on every member ("final-read", with "node"), in the format of
history.py.  The accounts and the total are given (the workload creates
them before the first transfer).

Anomalies:
- wrong-total: a read (or final read) whose balances do not add up to the
  total: it saw part of a transfer, or a transfer was applied twice or
  half-lost;
- negative:    a balance below zero (transfers are conditional on the
  source's balance, so one committed twice or against a stale snapshot);
- missing / unexpected: a read without some account, or with one never
  created; also a transfer whose credit $inc matched nothing (its
  transaction's snapshot lacked an account that always exists; the
  workload aborted it);
- unmatched:   a transfer that committed although its debit or credit
  $inc matched or modified nothing (its completion value's "n" and
  "nModified"): money created or lost by one transfer;
- divergent:   final reads disagree with each other;
- no final read at all is an error.
Beyond their counts, transfers are not checked one by one (amounts
repeat); the conservation of the total in every snapshot is the property.
"""
from history import FAIL, OK, outcome_counts

ANOMALIES = ("wrong_total", "negative", "missing", "unexpected", "unmatched", "divergent",
             "errors")


def check(ops, accounts, total):
    """{valid, reads, final_reads, wrong_total, negative, missing, unexpected,
    divergent, errors, counts} for ops from history.pair."""
    accounts = {str(a) for a in accounts}
    reads = [op for op in ops if op.f == "read" and op.type == OK]
    finals = [op for op in ops if op.f == "final-read" and op.type == OK]
    res = {"reads": len(reads), "final_reads": len(finals), "wrong_total": [], "negative": [],
           "missing": [], "unexpected": [], "unmatched": [], "divergent": [], "errors": [],
           "counts": outcome_counts([op for op in ops if op.f != "final-read"]),
           "transfers_ok": sum(1 for op in ops if op.f == "transfer" and op.type == OK)}
    if not finals:
        res["errors"].append("no final read")
    for r in reads + finals:
        bal = {str(k): v for k, v in (r.out or {}).items()}
        if set(bal) - accounts:
            res["unexpected"].append(r.describe())
        if accounts - set(bal):
            res["missing"].append(r.describe())
        if sum(bal.values()) != total:
            res["wrong_total"].append({"total": sum(bal.values()), "read": r.describe()})
        if any(v < 0 for v in bal.values()):
            res["negative"].append(r.describe())
    for op in ops:
        if op.f != "transfer" or not isinstance(op.out, dict):
            continue
        counts = (op.out.get("n") or []) + (op.out.get("nModified") or [])
        if op.type == OK and any(c == 0 for c in counts):
            res["unmatched"].append("%s %s" % (op.describe(), op.out))
        elif op.type == FAIL and (op.out.get("n") or [None, None])[1] == 0:
            res["missing"].append("%s: the credit matched nothing" % op.describe())
    if len({tuple(sorted((r.out or {}).items())) for r in finals}) > 1:
        res["divergent"] = [{"node": r.node, "balances": r.out} for r in finals]
    res["valid"] = not any(res[k] for k in ANOMALIES)
    return res


def report(result):
    """Human-readable lines for a check() result."""
    lines = ["bank: %s (%s); transfers ok %d, snapshot reads %d, final reads %d" % (
        result["valid"], result["counts"], result["transfers_ok"], result["reads"],
        result["final_reads"])]
    for k in ANOMALIES:
        if result[k]:
            lines.append("  %s (%d): %s" % (k, len(result[k]), result[k][:10]))
    return lines
