#!/usr/bin/env bash
# Build with AddressSanitizer + UndefinedBehaviorSanitizer (-DSABLE_SANITIZE=ON)
# into build-asan/ and run the whole ctest suite there.  Any sanitizer report
# fails the run: UBSan is made fatal, ASan aborts on its first error.
#   scripts/sanitize.sh [--leaks] [--build-only] [ctest args...]
# --leaks also turns LeakSanitizer on (ASAN_OPTIONS=detect_leaks=1): sabled
# then reports leaks when it exits (integration tests stop it with SIGTERM);
# reports are collected from every server's stderr under $SABLE_SAN_LOGDIR
# (default build-asan/san-logs) and summarised at the end.  --build-only
# builds and runs nothing (scripts/test.sh builds ahead while ctest runs).
set -euo pipefail
cd "$(dirname "$0")/.."
leaks=0 run=1
if [[ ${1:-} == --leaks ]]; then leaks=1; shift; fi
if [[ ${1:-} == --build-only ]]; then run=0; shift; fi
BUILD=${SABLE_ASAN_BUILD:-build-asan}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DSABLE_SANITIZE=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
((run)) || exit 0
builddir=$(cd "$BUILD" && pwd)
logdir=${SABLE_SAN_LOGDIR:-$builddir/san-logs}
rm -rf "$logdir" && mkdir -p "$logdir"
# log_path: every sanitized process (unit tests, each sabled) writes its report to
# its own file, so reports from servers the tests start are not lost.
export ASAN_OPTIONS="detect_leaks=$leaks:abort_on_error=1:detect_stack_use_after_return=0:log_path=$logdir/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logdir/ubsan"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
rc=0
(cd "$builddir" && ctest --output-on-failure --timeout 1200 "$@") || rc=$?
reports=$(ls "$logdir" 2>/dev/null | wc -l)
if ((reports > 0)); then
    echo "sanitize.sh: $reports sanitizer report(s) in $logdir:"
    grep -h -E "^(SUMMARY|=+ERROR)|runtime error" "$logdir"/* | sort | uniq -c | sort -rn | head -40
    rc=1
fi
exit $rc
