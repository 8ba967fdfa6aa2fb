#!/usr/bin/env bash
# run.sh: the ctest entry point of the conformance runner. Usage: run.sh [path/to/sabled]
# Installs the pinned Node driver (npm ci) when node_modules is missing, then replays the
# unified spec tests of issue 5's target areas against a fresh sabled, then those that need a
# replica set against a fresh 3-member set; exits non-zero when a test that is not on
# skip.txt fails.
#
# The spec test files are not in this repository (CC BY-NC-SA). They are read from
# $CONFORMANCE_ROOT, or else from ../shared/conformance/unified next to the checkout.
# When that directory does not exist, run.sh says how to get the files and exits 77, which
# ctest reports as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt); with
# CONFORMANCE_REQUIRED=1 it exits 1 instead. When the directory exists, every failure counts.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ $# -ge 1 ]; then  # relative to the caller's directory, before the cd below
  case "$1" in /*) export SABLED="$1" ;; *) export SABLED="$PWD/$1" ;; esac
fi
cd "$here"
SKIP=77
PINNED_COMMIT=92b3c0b9287bfba1b0ec4084300858d05c654f8c   # mongodb/specifications; see get-specs.sh
default_root="$(cd "$here/../.." && pwd)/../shared/conformance/unified"
root="${CONFORMANCE_ROOT:-$default_root}"
if [ ! -d "$root" ]; then
  cat >&2 <<EOF
conformance: SKIPPED: the unified spec test files are not at $root
  They come from https://github.com/mongodb/specifications at commit $PINNED_COMMIT
  (licensed CC BY-NC-SA, so they are not in this repository). To get them:
    tests/conformance/get-specs.sh DIR        # fetches that commit, lays the files out in DIR/unified
    CONFORMANCE_ROOT=DIR/unified ctest -R conformance --output-on-failure   # (from build/)
  (get-specs.sh ../shared/conformance makes the default location work without CONFORMANCE_ROOT.)
  Set CONFORMANCE_REQUIRED=1 to make missing files a failure instead of a skip.
EOF
  if [ "${CONFORMANCE_REQUIRED:-0}" = 1 ]; then exit 1; fi
  exit $SKIP
fi
# From here on any failure is a failure: never let an exit status be read as "skipped".
fail() { local rc=$1; if [ "$rc" -eq $SKIP ]; then rc=1; fi; exit "$rc"; }
if [ ! -d node_modules/mongodb ]; then
  npm ci --no-audit --no-fund --loglevel=error || fail $?
fi
node selftest.mjs || fail $?
dirs=(crud collection-management run-command command-logging-and-monitoring/monitoring
      sessions retryable-reads retryable-writes change-streams)
node runner.mjs --root "$root" "${dirs[@]}" || fail $?
# Then a 3-member replica set (started with scripts/sable-cluster on free ports, removed
# afterwards) runs the tests of the same directories that do not run against a standalone
# (runOnRequirements topologies: replicaset), retryable writes (txnNumber),
# transactions and change streams.
rs_dirs=(crud collection-management run-command command-logging-and-monitoring/monitoring
         sessions retryable-reads retryable-writes transactions transactions-convenient-api
         change-streams)
node runner.mjs --replset-only --root "$root" "${rs_dirs[@]}" || fail $?
