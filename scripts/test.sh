#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test
# (unit tests and integration tests that start their own sabled on free
# ports with temporary data directories).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 900 "$@"
