#!/usr/bin/env bash
# Install the Debian 12 packages Sable builds and tests with.  Idempotent:
# does nothing when everything is already installed.
set -euo pipefail
PKGS=(build-essential cmake pkg-config git libs2-dev
      libbson-dev libmongoc-dev wiredtiger libwiredtiger-dev libuv1-dev libssl-dev
      libyaml-dev libpcre2-dev libsnappy-dev libzstd-dev zlib1g-dev libicu-dev libjemalloc-dev libstemmer-dev
      duktape-dev                  # server-side JavaScript (src/js builds its duktape.c)
      liburing-dev
      python3 python3-pymongo python3-pytest python3-prometheus-client nodejs npm
      python3-pytest-xdist         # the standalone pytest suite runs its files on two workers
      libhiredis-dev libpq-dev redis-server postgresql gnuplot-nox
      openjdk-17-jdk-headless libmongodb-java
      clang libclang-rt-14-dev     # libFuzzer targets (scripts/fuzz.sh, run by scripts/test.sh)
      iproute2 nftables            # network namespaces and faults (tests/faults/netfaults.py)
      chromium python3-websocket)  # the monitoring page's browser test (tests/integration/browser)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# node/npm may come from elsewhere than Debian; only ask apt for them when absent.
if command -v node >/dev/null && command -v npm >/dev/null; then
    tmp=(); for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || tmp+=("$p"); done
    missing=("${tmp[@]+"${tmp[@]}"}")
fi
if ((${#missing[@]})); then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    echo "installing: ${missing[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
