#!/usr/bin/env bash
# Replica-set fault rounds (issue 25): each round starts three sabled members
# (each in its own network namespace when root, ip and nft are there; else on
# loopback with kill and pause faults only), runs a workload under seeded
# faults, heals, and checks the history and the members' convergence.
#   scripts/faults.sh [--rounds N] [--seed S] [--workload register,set,append]
#                     [--duration SECONDS] [--mode auto|netns|loopback] [--out DIR]
#                     [--summary FILE] [--allow-rollback]
# Prints the seed first: `--seed S --rounds 1` replays round 0's faults (round i
# uses seed S+i).  Exit status 0: every round valid; 1: anomalies (listed).
# See tests/faults/harness.py for the details and docs/reliability.md.
#   scripts/faults.sh --sharded [--rounds N] [--seed S] [--workload set,bank] ...
# runs the sharded-cluster rounds instead (issue 28): a config server and two
# three-member shards with two routers on loopback, chunks migrating throughout,
# kill and pause faults on shard primaries, the config server, a migration's
# donor or recipient and a router; tests/faults/harness_sharded.py.
set -euo pipefail
cd "$(dirname "$0")/.."
export SABLED=${SABLED:-$PWD/build/sabled}
[ -x "$SABLED" ] || { echo "faults.sh: $SABLED not found (scripts/build.sh)" >&2; exit 2; }
case ${1:-} in -h|--help) sed -n 2,16p "$0"; exit 0 ;; esac
harness=tests/faults/harness.py
if [ "${1:-}" = --sharded ]; then harness=tests/faults/harness_sharded.py; shift; fi
exec nice /usr/bin/python3 "$harness" "$@"
