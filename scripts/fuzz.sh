#!/usr/bin/env bash
# Build the libFuzzer targets (tests/fuzz/fuzz_*.c) with clang, ASan and
# UBSan into build-fuzz/ and run each for a bounded time, starting from the
# committed seed corpus.  New inputs go to build-fuzz/corpus/<target>/ (the
# committed corpus is only read); crashes are written to build-fuzz/crashes/
# and fail the run.
#   scripts/fuzz.sh [--seconds N] [--jobs J] [--seed S] [--timeout T] [--no-build|--build-only] [target ...]
# (default: 60 s each, every target, a random seed; --seed makes the inputs
# tried the same from run to run (CI); --timeout: seconds one input may take
# before it counts as a hang, default 25; --no-build runs what build-fuzz/ holds,
# --build-only builds and runs nothing)
# Installs clang and libclang-rt-14-dev (Debian 12) when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60 jobs=1 build=1 run=1 seed= timeout=25 targets=()
while (($#)); do
    case $1 in
        --seconds) seconds=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --timeout) timeout=$2; shift 2 ;;
        --no-build) build=0; shift ;;
        --build-only) run=0; shift ;;
        -h|--help) sed -n 2,12p "$0"; exit 0 ;;
        *) targets+=("$1"); shift ;;
    esac
done
missing=()
for p in clang libclang-rt-14-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
BUILD=${SABLE_FUZZ_BUILD:-build-fuzz}
mkdir -p "$BUILD"
BUILD=$(cd "$BUILD" && pwd)
if ((${#targets[@]} == 0)); then
    for f in tests/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi
if ((build)); then
    cmake -S . -B "$BUILD" -DCMAKE_C_COMPILER=clang -DSABLE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$BUILD" -j"$(nproc)" --target "${targets[@]}"
fi
((run)) || exit 0
mkdir -p "$BUILD/crashes"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
rc=0
for t in "${targets[@]}"; do
    work="$BUILD/corpus/$t"
    mkdir -p "$work"
    echo "== $t: ${seconds}s"
    log="$BUILD/$t.log"
    # -rss_limit_mb: Sable must not need more than this for one input;
    # -max_len: wire messages and documents bigger than this add little.
    par=()
    # -jobs makes libFuzzer write fuzz-<n>.log files into the current directory.
    ((jobs > 1)) && par=(-jobs="$jobs" -workers="$jobs")
    [[ -n $seed ]] && par+=(-seed="$seed")
    if (cd "$BUILD" && "$PWD/fuzz/$t" "$PWD/corpus/$t" "$OLDPWD/tests/fuzz/corpus/$t" \
        -max_total_time="$seconds" "${par[@]+"${par[@]}"}" -rss_limit_mb=2048 -max_len=65536 \
        -timeout="$timeout" -artifact_prefix="$PWD/crashes/$t-" -print_final_stats=1) >"$log" 2>&1; then
        grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$log" | tr '\n' ' '; echo
    else
        rc=1
        echo "$t FAILED: see $log"; grep -E "ERROR|SUMMARY|assertion|runtime error" "$log" | head -10
    fi
done
exit $rc
