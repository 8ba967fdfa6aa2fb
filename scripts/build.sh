#!/usr/bin/env bash
# Configure and build into ./build (binaries: build/sabled, build/sable-bench, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
cmake --build build -j"$(nproc)"
