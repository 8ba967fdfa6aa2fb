"""
Deterministic regression rounds for the bugs fault runs found (issue 25).

Each entry names the fix, the round that found it (seed and workload of
`scripts/faults.sh`, whose random schedule is a function of the seed: see
harness.py) and a scripted fault sequence (harness --faults) that sets up
the same situation on purpose.  A regression passes when its round is valid:
the workload's checker passes (no acknowledged w:majority write lost, no
read of a write that was never made, register histories linearizable) and
the members converge (one primary, equal applied optimes, equal dbHash,
oplogs equal up to the commit point) with a final read from every member;
for the bugs that were failovers that never came (FAILOVER), run alone,
another member is also primary just before each fault on the primary is
undone (held 10-12 s against a 2 s election timeout).
Reads are linearizable, as in ctest's faults/short.

    /usr/bin/python3 tests/faults/regressions.py            # every scripted sequence
    /usr/bin/python3 tests/faults/regressions.py --combined # the steps in one round (ctest)
    /usr/bin/python3 tests/faults/regressions.py --replay   # the original seeded rounds
    ... --only getmore,durable   --out DIR   --list

Exit status 0 when every round is valid, 77 when this machine cannot run
them (no network namespaces: not root).
"""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402

# name, fix, found by (seed, workload), faults (harness --faults), what broke
REGRESSIONS = [
    ("getmore", "3b70dab", (1001, "set"), "kill",
     "final reads of more than one batch on a secondary failed with NotPrimaryNoSecondaryOk "
     "(getMore carries no read preference)"),
    ("peers-dropped", "1222230", (1003, "register"), "isolate-primary",
     "a primary whose peers' packets were dropped never stepped down (heartbeats each took "
     "their timeout and the step-down check never ran); writes stopped until the heal"),
    ("durable", "80bf579", (1000, "register"), "kill-primary+kill",
     "w:majority was acknowledged once a majority had applied, not journaled, the write: "
     "kill -9 of the members that acknowledged it lost it"),
    ("newest-entry", "aaaf9c6", (3008, "append"), "isolate-primary,kill-primary",
     "a member primary for a moment kept its entries of that term: the sync check compared "
     "against the last timestamp handed out, not the newest entry"),
    ("applier-term", "3d047ea", (4008, "append"), "pause-primary,isolate-primary",
     "the applier went on with the new primary's batch after the member's own writes "
     "(equal applied optimes, different dbHash)"),
    ("tail-newer", "1e3196e", (6009, "register"), "isolate-primary+pause,kill-primary",
     "a member whose newest entry was later than everything in a newer-term source's oplog "
     "never rolled back (a member diverged)"),
    ("kill-under-load", "2e72a99", (6013, "set"), "kill-primary,kill-primary",
     "after a primary kill under client load the new primary stepped down every 2 s (one "
     "heartbeat thread reached the dead member first)"),
    ("txn-stepdown", "46b722c", (25007, "bank"), "reconfig-remove-primary,reconfig-remove-primary",
     "a primary stepped down with client transactions open; their uncommitted writes made "
     "every later transaction on those documents fail to apply there (WriteConflict)"),
    ("txn-rollback", "46b722c", (25019, "bank"), "isolate-primary,isolate-primary",
     "a primary cut off after committing transactions could not roll them back on its return "
     "('cannot roll back a applyOps') and stayed RECOVERING"),
]
# the faults.sh options the finding runs had (their seeds pick other faults without them)
FLAGS = {"txn-stepdown": ["--disk-full", "--reconfig"], "txn-rollback": ["--disk-full", "--reconfig"]}

# The scripted steps above in one set round (final reads on every member, lost
# writes), each kind once: what ctest's faults/regressions runs (ctest's
# faults/bank runs the transactions' steps: reconfig-remove-primary,
# isolate-primary).
COMBINED = "kill-primary+kill,isolate-primary+pause,pause-primary,kill-primary"


# Regressions whose bug was a failover that never came: run alone (not in the
# combined round) each fault aimed at the primary is held 10-12 s (the election
# timeout is 2 s), and when the harness notes the members' states just before
# undoing it, another member must be primary and the one aimed at must not.
FAILOVER = {"peers-dropped", "kill-under-load"}


def harness_args(name, seed, workload, faults, out, duration, replay):
    a = ["--rounds", "1", "--seed", str(seed), "--workload", workload,
         "--read-concern", "linearizable", "--out", os.path.join(out, name)] + FLAGS.get(name, [])
    if replay:
        return a + ["--duration", "30"]
    hold = ["2", "3.5"] if name.startswith("combined") else (
        ["10", "12"] if name in FAILOVER else ["3", "5"])
    return a + ["--faults", faults, "--duration", str(duration), "--hold-min", hold[0],
                "--hold-max", hold[1]]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="comma list of names")
    ap.add_argument("--combined", action="store_true",
                    help="the scripted steps in one set round (COMBINED)")
    ap.add_argument("--replay", action="store_true",
                    help="the original seeded rounds (30 s each) instead of the scripts")
    ap.add_argument("--duration", type=float, default=8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    regs = [r for r in REGRESSIONS if a.only is None or r[0] in a.only.split(",")]
    if a.list or not regs:
        for name, fix, (seed, w), faults, what in REGRESSIONS:
            print("%-16s fixed in %s, found by seed %d (%s); --faults %s\n    %s" % (
                name, fix, seed, w, faults, what))
        return 0 if regs else 2
    out = a.out or tempfile.mkdtemp(prefix="sable-regress-")
    runs = []
    if a.combined:
        runs = [("combined", 25, "set", COMBINED)]
    else:
        runs = [(name, seed, w, faults) for name, _, (seed, w), faults, _ in regs]
    failed = []
    for name, seed, w, faults in runs:
        print("regression %s: seed %d, %s, faults %s" % (
            name, seed, w, "as the seed chose" if a.replay else faults), flush=True)
        rc = harness.main(harness_args(name, seed, w, faults, out, a.duration, a.replay))
        if rc == harness.SKIP:
            return rc
        if rc == 0 and name in FAILOVER and not a.replay:
            with open(os.path.join(out, name, "round-0", "report.json")) as f:
                bad = harness.failovers_before_heal(json.load(f))
            for line in bad:
                print("  failover: %s" % line, flush=True)
            rc = 1 if bad else 0
        if rc != 0:
            failed.append(name)
    print("regressions: %d rounds, failed: %s (out %s)" % (len(runs), failed or "none", out),
          flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
