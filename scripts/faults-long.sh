#!/usr/bin/env bash
# The long fault run (issue 25): 100 rounds each of register, set, append and
# bank (interleaved), 30 s each with partitions, kills, pauses, disk-full and
# replSetReconfig faults mixed (--disk-full --reconfig: needs root for the
# tmpfs dbpaths), then every deterministic regression (tests/faults/
# regressions.py): its scripted fault sequence and its original seeded round.
# About 5 hours on a 2-core machine.  Arguments are passed on to faults.sh
# (--rounds N, --seed S, --duration ...); --no-regressions skips the last part.
#   scripts/faults-long.sh [--rounds 400] [--seed S] [--out DIR] [--no-regressions]
# The summary (JSON) goes to DIR/summary.json (DIR default faults-long-<date>).
set -euo pipefail
cd "$(dirname "$0")/.."
export SABLED=${SABLED:-$PWD/build/sabled}
out=faults-long-$(date +%Y%m%d-%H%M%S)
regress=1
args=()
while (($#)); do
    case $1 in
        --out) out=$2; shift 2 ;;
        --no-regressions) regress=0; shift ;;
        -h|--help) sed -n 2,10p "$0"; exit 0 ;;
        *) args+=("$1"); shift ;;
    esac
done
mkdir -p "$out"
rc=0
scripts/faults.sh --rounds 400 --workload register,set,append,bank --duration 30 \
    --disk-full --reconfig --out "$out" --summary "$out/summary.json" "${args[@]}" || rc=1
if ((regress)); then
    nice /usr/bin/python3 tests/faults/regressions.py --out "$out/regressions" || rc=1
    nice /usr/bin/python3 tests/faults/regressions.py --replay --out "$out/replays" || rc=1
fi
exit $rc
