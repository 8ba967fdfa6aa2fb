#!/usr/bin/env bash
# Run the Node.js integration tests: install the pinned packages (npm ci)
# when node_modules is missing, then node's built-in test runner.
# SABLED names the server binary (default: <repo>/build/sabled).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/mongodb ]; then
    npm ci --no-audit --no-fund --loglevel=error
fi
exec node --test --test-concurrency=1 test/
