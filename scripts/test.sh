#!/usr/bin/env bash
# The whole test suite (what CI runs, through .ci/run): installs what is
# missing, builds, then runs three steps and fails if any of them failed:
#   1. the ctest cases step 2 leaves out, two at a time: the conformance,
#      Java, replica-set and sharded-cluster pytest (integration/pymongo_sets,
#      integration/pymongo_sharded) and fault-round suites (faults/short,
#      bank, disk_reconfig, regressions, sharded), whose multi-process runs
#      take too long under ASan; every case when step 2 is skipped or when
#      ctest arguments are given.  Integration tests start their own sabled
#      on free ports with temporary data directories; a case ctest reports
#      as skipped is not a failure: `conformance` skips where its spec test
#      files are absent (docs/testing.md, CONFORMANCE_ROOT);
#   2. every other case (unit tests, the standalone pytest suite
#      integration/pymongo, the Node and libmongoc tests, the crash run...)
#      built with ASan + UBSan (scripts/sanitize.sh into build-asan/; any
#      sanitizer report fails it): running them in step 1 as well only
#      repeated them (about 8 minutes of the suite);
#   3. each libFuzzer target for SABLE_TEST_FUZZ_SECONDS (default 20) from
#      the committed corpus with a fixed seed (scripts/fuzz.sh into
#      build-fuzz/; a crash, leak, hang or sanitizer report fails it and
#      leaves the input in build-fuzz/crashes/).  It builds and runs at low
#      priority alongside step 2 (at nice 10, on what its tests leave idle); its
#      output is printed when it ends (and kept in build/fuzz-step.log).
#   Steps 2 and 3's trees are compiled at nice 19 while step 1 runs.
#   scripts/test.sh [ctest args...]      (arguments go to step 1's ctest, which then
#                                        runs what they select, sanitized cases included)
# SABLE_TEST_SANITIZE=0 or SABLE_TEST_FUZZ=0 skips step 2 or 3; SABLE_TEST_JOBS
# (default 2) is how many cases steps 1 and 2 run at once.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
failed=()
step() {
    local name=$1 t0=$SECONDS
    shift
    echo "== test.sh: $name"
    if "$@"; then
        echo "== test.sh: $name passed ($((SECONDS - t0)) s)"
    else
        echo "== test.sh: $name FAILED ($((SECONDS - t0)) s)"
        failed+=("$name")
    fi
}
# Two cases at a time (SABLE_TEST_JOBS): the cases that run replica sets on
# timers hold one lock and run one at a time (tests/CMakeLists.txt).
jobs=${SABLE_TEST_JOBS:-2}
run_ctest() { (cd build && ctest --output-on-failure --timeout 900 -j"$jobs" "$@"); }
# Steps 2 and 3 compile two more trees (ASan+UBSan, clang for libFuzzer):
# that is done now, at the lowest priority, on the CPU step 1 leaves idle
# while its tests wait on elections, timeouts and fsyncs; the steps below
# then find their trees built.
prebuild_pid=
if [[ ${SABLE_TEST_SANITIZE:-1} != 0 || ${SABLE_TEST_FUZZ:-1} != 0 ]]; then
    (
        [[ ${SABLE_TEST_SANITIZE:-1} == 0 ]] || nice -n 19 scripts/sanitize.sh --build-only
        [[ ${SABLE_TEST_FUZZ:-1} == 0 ]] || nice -n 19 scripts/fuzz.sh --build-only
    ) >build/prebuild.log 2>&1 &
    prebuild_pid=$!
fi
# The cases too slow under ASan: step 1 runs them, step 2 the rest.
asan_slow='conformance|integration/java|integration/pymongo_sets|integration/pymongo_sharded|faults/(short|bank|disk_reconfig|regressions|sharded)'
if [[ ${SABLE_TEST_SANITIZE:-1} != 0 && $# == 0 ]]; then
    step ctest run_ctest -R "$asan_slow"
else
    step ctest run_ctest "$@"
fi
if [[ -n $prebuild_pid ]]; then
    # a failed build is built again, and reported, by its step
    wait "$prebuild_pid" || echo "== test.sh: the early build of steps 2-3 failed (build/prebuild.log)"
fi

fuzz_pid= fuzz_t0=$SECONDS
if [[ ${SABLE_TEST_FUZZ:-1} != 0 ]]; then
    # --timeout: an input counts as a hang only after 120 s of wall time, as
    # the fuzzer runs niced next to the sanitizer step.
    nice -n 10 scripts/fuzz.sh --seconds "${SABLE_TEST_FUZZ_SECONDS:-20}" \
        --seed "${SABLE_TEST_FUZZ_SEED:-1}" --timeout 120 >build/fuzz-step.log 2>&1 &
    fuzz_pid=$!
fi
if [[ ${SABLE_TEST_SANITIZE:-1} != 0 ]]; then
    step sanitizers scripts/sanitize.sh -j"$jobs" -E "$asan_slow"
fi
if [[ -n $fuzz_pid ]]; then
    echo "== test.sh: fuzz (started with the sanitizer step)"
    if wait "$fuzz_pid"; then
        cat build/fuzz-step.log
        echo "== test.sh: fuzz passed ($((SECONDS - fuzz_t0)) s)"
    else
        cat build/fuzz-step.log
        echo "== test.sh: fuzz FAILED ($((SECONDS - fuzz_t0)) s)"
        failed+=(fuzz)
    fi
fi
if ((${#failed[@]})); then
    echo "test.sh: FAILED: ${failed[*]} (total $SECONDS s)"
    exit 1
fi
echo "test.sh: all steps passed (total $SECONDS s)"
