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
  created;
- divergent:   final reads disagree with each other;
- no final read at all is an error.
Transfers themselves are not checked one by one (amounts repeat); the
conservation of the total in every snapshot is the property.
"""
from history import OK, outcome_counts


def check(ops, accounts, total):
    """{valid, reads, final_reads, wrong_total, negative, missing, unexpected,
    divergent, errors, counts} for ops from history.pair."""
    accounts = {str(a) for a in accounts}
    reads = [op for op in ops if op.f == "read" and op.type == OK]
    finals = [op for op in ops if op.f == "final-read" and op.type == OK]
    res = {"reads": len(reads), "final_reads": len(finals), "wrong_total": [], "negative": [],
           "missing": [], "unexpected": [], "divergent": [], "errors": [],
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
    if len({tuple(sorted((r.out or {}).items())) for r in finals}) > 1:
        res["divergent"] = [{"node": r.node, "balances": r.out} for r in finals]
    res["valid"] = not any(res[k] for k in ("wrong_total", "negative", "missing", "unexpected",
                                            "divergent", "errors"))
    return res


def report(result):
    """Human-readable lines for a check() result."""
    lines = ["bank: %s (%s); transfers ok %d, snapshot reads %d, final reads %d" % (
        result["valid"], result["counts"], result["transfers_ok"], result["reads"],
        result["final_reads"])]
    for k in ("wrong_total", "negative", "missing", "unexpected", "divergent", "errors"):
        if result[k]:
            lines.append("  %s (%d): %s" % (k, len(result[k]), result[k][:10]))
    return lines
