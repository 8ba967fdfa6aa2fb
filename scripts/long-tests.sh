#!/usr/bin/env bash
# The pytest cases left out of the default suite for time (the list is
# SABLE_IT_LONG_TESTS in tests/integration/CMakeLists.txt; each has a short
# version in the suite).  Run after scripts/build.sh:  scripts/long-tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tests=$(sed -n '/^set(SABLE_IT_LONG_TESTS/,/)/p' tests/integration/CMakeLists.txt |
        grep -o 'test_[a-z0-9_]*\.py::[A-Za-z0-9_]*' | sed 's|^|tests/integration/py/|')
SABLED="${SABLED:-$PWD/build/sabled}" PYTHONDONTWRITEBYTECODE=1 \
    exec /usr/bin/python3 -m pytest -q -p no:cacheprovider $tests "$@"
