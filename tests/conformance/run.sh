#!/usr/bin/env bash
# run.sh: the ctest entry point of the conformance runner. Usage: run.sh [path/to/sabled]
# Installs the pinned Node driver (npm ci) when node_modules is missing, then replays the
# unified spec tests of issue 5's target areas against a fresh sabled; exits non-zero when
# a test that is not on skip.txt fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
if [ $# -ge 1 ]; then export SABLED="$1"; fi
root="${CONFORMANCE_ROOT:-$here/../../../shared/conformance/unified}"
if [ ! -d "$root" ]; then
  echo "conformance: test files not found at $root (set CONFORMANCE_ROOT)" >&2
  exit 1
fi
if [ ! -d node_modules/mongodb ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
node selftest.mjs
exec node runner.mjs --root "$root" \
  crud collection-management run-command command-logging-and-monitoring/monitoring \
  sessions retryable-reads retryable-writes
