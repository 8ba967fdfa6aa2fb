#!/usr/bin/env bash
# test_bench_e2e.sh: sable-bench against a live sabled: load and run
# workloada with 1000 records, then check YCSB's summary lines and a zero
# exit.  Needs a working server.  Usage:
#   test_bench_e2e.sh [path/to/sabled] [path/to/sable-bench] [workloads dir]
# The server gets a free loopback port and a temporary dbpath, and is
# stopped (by its own pid) whatever happens.
set -u
here="$(cd "$(dirname "$0")/../.." && pwd)"
SABLED="${1:-$here/build/sabled}"
BENCH="${2:-$here/build/sable-bench}"
WORKLOADS="${3:-$here/workloads}"
fail=0 pass=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

tmp="$(mktemp -d /tmp/bench_e2e.XXXXXX)"
pid=""
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
    rm -rf "$tmp"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
mkdir -p "$tmp/db"
"$SABLED" --port "$port" --dbpath "$tmp/db" >"$tmp/sabled.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
    if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null; then break; fi
    sleep 0.1
done

url="mongodb://127.0.0.1:$port/ycsb"
check_summary() { # file, op
    grep -q '^\[OVERALL\], RunTime(ms), [0-9]*$' "$1" && ok || bad "$1: RunTime line"
    grep -q '^\[OVERALL\], Throughput(ops/sec), [0-9.E]*$' "$1" && ok || bad "$1: Throughput line"
    grep -q '^\[CLIENT\], CPUTimePerOp(us), ' "$1" && ok || bad "$1: CPU line"
    for op in "${@:2}"; do
        for l in Operations 'AverageLatency(us)' 'MinLatency(us)' 'MaxLatency(us)' '95thPercentileLatency(us)' \
                 '99thPercentileLatency(us)'; do
            grep -qF "[$op], $l, " "$1" && ok || bad "$1: [$op], $l"
        done
        grep -q "^\[$op\], Return=OK, [0-9]*$" "$1" && ok || bad "$1: [$op] Return=OK"
    done
    grep -q 'Return=ERROR\|Return=NOT_FOUND' "$1" && bad "$1: errors reported" || ok
    grep -q '^\[CLEANUP\], Operations, ' "$1" && ok || bad "$1: CLEANUP"
}

"$BENCH" load mongodb -s -P "$WORKLOADS/workloada" -p recordcount=1000 -p "mongodb.url=$url" \
    -p mongodb.writeConcern=acknowledged -threads 4 >"$tmp/load.txt" 2>"$tmp/load.err"
rc=$?
[ $rc -eq 0 ] && ok || bad "load exit $rc: $(tail -5 "$tmp/load.err")"
check_summary "$tmp/load.txt" INSERT
grep -q '^\[INSERT\], Operations, 1000$' "$tmp/load.txt" && ok || bad "1000 inserts"
grep -q ' sec: 1000 operations; ' "$tmp/load.err" && ok || bad "status line on stderr"

"$BENCH" run mongodb -s -P "$WORKLOADS/workloada" -p recordcount=1000 -p operationcount=1000 \
    -p "mongodb.url=$url" -threads 4 >"$tmp/run.txt" 2>"$tmp/run.err"
rc=$?
[ $rc -eq 0 ] && ok || bad "run exit $rc: $(tail -5 "$tmp/run.err")"
check_summary "$tmp/run.txt" READ UPDATE
reads=$(sed -n 's/^\[READ\], Operations, //p' "$tmp/run.txt")
updates=$(sed -n 's/^\[UPDATE\], Operations, //p' "$tmp/run.txt")
[ $((reads + updates)) -eq 1000 ] && ok || bad "reads+updates = $reads+$updates"

# The report's style: percentages, upsert, unacknowledged, batched load, scans.
"$BENCH" run mongodb -P "$WORKLOADS/workloada" -p recordcount=1000 -p operationcount=500 \
    -p readproportion=50 -p updateproportion=50 -p mongodb.upsert=true \
    -p "mongodb.url=$url" -p mongodb.writeConcern=unacknowledged -threads 8 >"$tmp/run2.txt" 2>"$tmp/run2.err"
rc=$?
[ $rc -eq 0 ] && ok || bad "unacknowledged run exit $rc"
"$BENCH" run mongodb -P "$WORKLOADS/workloade" -p recordcount=1000 -p operationcount=200 \
    -p "mongodb.url=$url" -p batchsize=10 >"$tmp/run3.txt" 2>"$tmp/run3.err"
rc=$?
[ $rc -eq 0 ] && ok || bad "workloade exit $rc: $(tail -3 "$tmp/run3.err")"
grep -q '^\[SCAN\], Return=OK, ' "$tmp/run3.txt" && ok || bad "scans"

# Scans longer than the first batch (101 documents) go on with getMore (most of the
# 50: a scan that starts near the last key returns fewer).
getmores() {
    /usr/bin/python3 -c "import pymongo; print(pymongo.MongoClient('$url').admin.command('serverStatus')['opcounters']['getmore'])" 2>/dev/null
}
g0=$(getmores)
"$BENCH" run mongodb -P "$WORKLOADS/workloade" -p recordcount=1000 -p operationcount=50 -p scanproportion=1 \
    -p insertproportion=0 -p minscanlength=150 -p maxscanlength=300 -p "mongodb.url=$url" >"$tmp/run7.txt" 2>"$tmp/run7.err"
rc=$?
[ $rc -eq 0 ] && grep -q '^\[SCAN\], Return=OK, 50$' "$tmp/run7.txt" && ok || bad "long scans: exit $rc, $(grep Return "$tmp/run7.txt")"
g1=$(getmores)
if [ -n "$g0" ] && [ -n "$g1" ]; then [ "$g1" -ge $((g0 + 25)) ] && ok || bad "long scans used getMore ($g0 -> $g1)"; fi

# A run against a missing collection's keys reports errors and exits non-zero.
"$BENCH" run mongodb -P "$WORKLOADS/workloada" -p recordcount=1000 -p operationcount=100 -p table=nosuchtable \
    -p "mongodb.url=$url" >"$tmp/run4.txt" 2>"$tmp/run4.err"
rc=$?
[ $rc -ne 0 ] && ok || bad "errors must give a non-zero exit"
grep -q 'Return=NOT_FOUND' "$tmp/run4.txt" && ok || bad "NOT_FOUND counted"

# libmongoc's command path and its CRUD helpers (mongodb.api=command|crud) give the
# same results as the default wire path.
for api in command crud; do
    "$BENCH" run mongodb -P "$WORKLOADS/workloada" -p recordcount=1000 -p operationcount=500 \
        -p "mongodb.url=$url" -p mongodb.api=$api -threads 4 >"$tmp/run5-$api.txt" 2>"$tmp/run5-$api.err"
    rc=$?
    [ $rc -eq 0 ] && ok || bad "mongodb.api=$api exit $rc: $(tail -3 "$tmp/run5-$api.err")"
    check_summary "$tmp/run5-$api.txt" READ UPDATE
done
"$BENCH" run mongodb -P "$WORKLOADS/workloada" -p "mongodb.url=$url" -p mongodb.api=bogus \
    >"$tmp/run6.txt" 2>"$tmp/run6.err"
[ $? -ne 0 ] && grep -q 'mongodb.api must be' "$tmp/run6.err" && ok || bad "bad mongodb.api refused"

# Inserting existing keys (no upsert) fails on every path: write errors are errors
# (a load thread stops at its first failed insert, as YCSB's does).
for api in wire command crud; do
    "$BENCH" load mongodb -P "$WORKLOADS/workloada" -p recordcount=20 -p "mongodb.url=$url" \
        -p mongodb.api=$api >"$tmp/dup-$api.txt" 2>"$tmp/dup-$api.err"
    rc=$?
    [ $rc -ne 0 ] && grep -q '^\[INSERT\], Return=ERROR, [1-9]' "$tmp/dup-$api.txt" && ok ||
        bad "duplicate inserts ($api) must be errors: exit $rc, $(grep Return "$tmp/dup-$api.txt")"
done

echo "test_bench_e2e: $pass passed, $fail failed"
[ $fail -eq 0 ]
