#!/usr/bin/env bash
# Set up a fresh Debian 12 machine: install packages, build, and start sabled
# on 127.0.0.1:27017 with ./data (log in ./data/sabled.log).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
mkdir -p data
if build/sabled --port 27017 --dbpath data --logpath data/sabled.log --fork >/dev/null; then
    echo "sabled is running on 127.0.0.1:27017 (dbpath ./data, log ./data/sabled.log)"
else
    echo "sabled did not start; see data/sabled.log" >&2
    exit 1
fi
