#!/usr/bin/env bash
# The long fault run (issue 25): 100 rounds each of register, set and append
# (interleaved), 30 s each with partitions, kills and pauses mixed; about 4
# hours on a 2-core machine.  Arguments are passed on (--seed, --out ...).
#   scripts/faults-long.sh [--rounds 300] [--seed S] [--out DIR]
# The summary (JSON) goes to DIR/summary.json (DIR default faults-long-<date>).
set -euo pipefail
cd "$(dirname "$0")/.."
out=faults-long-$(date +%Y%m%d-%H%M%S)
args=()
while (($#)); do
    case $1 in
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n 2,6p "$0"; exit 0 ;;
        *) args+=("$1"); shift ;;
    esac
done
mkdir -p "$out"
exec scripts/faults.sh --rounds 300 --workload register,set,append --duration 30 \
    --out "$out" --summary "$out/summary.json" "${args[@]}"
