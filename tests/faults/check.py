"""
Check a fault-test history file (JSON lines, see history.py) from the
command line; exit status 0 valid, 1 anomalies found, 2 unknown (the
register search ran out of time) or a malformed history.

    /usr/bin/python3 tests/faults/check.py register history.jsonl [--time-limit S]
    /usr/bin/python3 tests/faults/check.py set history.jsonl [--realtime]
    /usr/bin/python3 tests/faults/check.py append history.jsonl [--realtime]
    /usr/bin/python3 tests/faults/check.py bank history.jsonl

--realtime makes stale reads anomalies (for linearizable reads).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import check_append  # noqa: E402
import check_bank  # noqa: E402
import check_register  # noqa: E402
import check_set  # noqa: E402
from history import HistoryError, pair, read_events  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description="Check a fault-test history.")
    ap.add_argument("model", choices=["register", "set", "append", "bank"])
    ap.add_argument("history", help="JSON-lines file, - for stdin")
    ap.add_argument("--time-limit", type=float, default=60.0,
                    help="register: seconds per key for the search (and again for the witness)")
    ap.add_argument("--realtime", action="store_true",
                    help="set/append: stale reads are anomalies")
    a = ap.parse_args(argv)
    try:
        ops, nemesis = pair(read_events(sys.stdin if a.history == "-" else a.history))
    except (HistoryError, OSError) as e:
        print("history: %s" % e, file=sys.stderr)
        return 2
    if a.model == "register":
        res = check_register.check(ops, time_limit=a.time_limit)
        lines = check_register.report(res)
    elif a.model == "set":
        res = check_set.check(ops, a.realtime)
        lines = check_set.report(res)
    elif a.model == "bank":
        from workload import BANK_ACCOUNTS, BANK_BALANCE
        res = check_bank.check(ops, ["a%d" % i for i in range(BANK_ACCOUNTS)],
                               BANK_ACCOUNTS * BANK_BALANCE)
        lines = check_bank.report(res)
    else:
        res = check_append.check(ops, a.realtime)
        lines = check_append.report(res)
    if nemesis:
        lines.append("nemesis events: %d" % len(nemesis))
    print("\n".join(lines))
    return {True: 0, False: 1}.get(res["valid"], 2)


if __name__ == "__main__":
    sys.exit(main())
