#!/usr/bin/env bash
# Run YcsbBindingTest (YCSB 0.17 mongodb-binding calls through the MongoDB
# Java driver 3.x) against a fresh sabled.
#
#   tests/integration/java/run.sh            # uses $SABLED or <repo>/build/sabled
#   SABLED=/path/to/sabled tests/integration/java/run.sh
#   tests/integration/java/run.sh --replset  # seed 002's deployment, below
#
# --replset runs the same test against a three-member replica set as seed 002
# deploys it (a primary, a secondary and a hidden priority-0 member, a keyFile
# between members, a root user "ycsb" and mongodb.url options
# replicaSet=rs0&authSource=admin), started with scripts/sable-cluster on
# three free consecutive ports below 32768; afterwards every member must hold
# the same ycsb database (dbHash) and the hidden member must be absent from
# the primary's hosts.
#
# Compiles the test (YcsbBindingTest.java and the phase classes beside it,
# every *.java here) into a temporary directory, starts sabled on a free
# 127.0.0.1 port with a temporary --dbpath, runs the test, stops sabled with
# SIGTERM and removes the temporary directory.  Exit status: the test's, or
# non-zero if sabled could not start, died during the run, or did not exit
# cleanly on SIGTERM.  Extra environment: JAVA_DRIVER_JARS (a classpath that
# replaces the jar search), KEEP_TMP=1 (keep the temporary dir for its log).
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
SABLED="${SABLED:-$REPO/build/sabled}"
REPLSET=0
[ "${1:-}" = --replset ] && REPLSET=1
PY=/usr/bin/python3

TMP="$(mktemp -d "${TMPDIR:-/tmp}/sable-java-it.XXXXXX")"
PID=""

cleanup() {
    local rc=$?
    if [ "$REPLSET" = 1 ] && [ -f "$TMP/cluster/cluster.json" ]; then
        "$PY" "$REPO/scripts/sable-cluster" stop --dir "$TMP/cluster" >/dev/null 2>&1
    fi
    if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
        kill -KILL "$PID" 2>/dev/null
        wait "$PID" 2>/dev/null
    fi
    if [ "${KEEP_TMP:-0}" = 1 ]; then
        echo "run.sh: kept $TMP" >&2
    else
        rm -rf "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() { echo "run.sh: $*" >&2; exit 2; }

# --- the driver jars -------------------------------------------------------
find_jar() {
    local name
    for name in "$@"; do
        if [ -f "/usr/share/java/$name" ]; then
            echo "/usr/share/java/$name"
            return 0
        fi
    done
    find /usr/share/java -maxdepth 2 -name "${1%.jar}*.jar" 2>/dev/null | sort | head -n1
}

if [ -n "${JAVA_DRIVER_JARS:-}" ]; then
    CP="$JAVA_DRIVER_JARS"
else
    UBER="$(find_jar mongo-java-driver.jar)"
    if [ -n "$UBER" ]; then
        CP="$UBER"
    else
        BSON="$(find_jar bson.jar)"
        CORE="$(find_jar mongodb-driver-core.jar)"
        SYNC="$(find_jar mongodb-driver.jar)"
        [ -n "$BSON" ] && [ -n "$CORE" ] && [ -n "$SYNC" ] \
            || die "MongoDB Java driver 3.x jars not found under /usr/share/java (apt-get install libmongodb-java)"
        CP="$BSON:$CORE:$SYNC"
    fi
fi

command -v javac >/dev/null || die "javac not found"
command -v java >/dev/null || die "java not found"
[ -x "$SABLED" ] || die "sabled binary not found at $SABLED (build with scripts/build.sh or set SABLED)"

# --- compile -----------------------------------------------------------------
mkdir -p "$TMP/classes" "$TMP/db"
javac -J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC -nowarn -cp "$CP" -d "$TMP/classes" "$HERE"/*.java || die "javac failed"

# --- --replset: seed 002's three members -----------------------------------
if [ "$REPLSET" = 1 ]; then
    export SABLED
    export YCSB_TEST_BUDGET_MS="${YCSB_TEST_BUDGET_MS:-150000}"   # three servers on two cores
    BASEPORT="$("$PY" - <<'PYEOF'
import random, socket
for _ in range(200):                     # below 32768: outgoing connections take ports above it
    p = random.randrange(20000, 32000)
    try:
        socks = []
        for q in range(p, p + 3):
            s = socket.socket(); s.bind(("127.0.0.1", q)); socks.append(s)
        print(p)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
PYEOF
)"
    head -c 756 /dev/urandom | base64 -w0 > "$TMP/keyfile"
    chmod 600 "$TMP/keyfile"
    "$PY" "$REPO/scripts/sable-cluster" start --replset rs0 --members 3 --hidden 1 \
        --dir "$TMP/cluster" --port "$BASEPORT" --keyfile "$TMP/keyfile" \
        --user ycsb --password ycsb-pw >"$TMP/cluster.out" 2>&1 \
        || { cat "$TMP/cluster.out" >&2; die "sable-cluster start failed"; }
    echo "run.sh: replica set rs0 on 127.0.0.1:$BASEPORT-$((BASEPORT + 2)) (member 2 hidden)"
    java -cp "$CP:$TMP/classes" YcsbBindingTest \
        "mongodb://ycsb:ycsb-pw@127.0.0.1:$BASEPORT,127.0.0.1:$((BASEPORT + 1))" \
        "replicaSet=rs0&authSource=admin"
    RC=$?
    "$PY" - "$BASEPORT" <<'PYEOF' || RC=1
import sys, time
import pymongo
base = int(sys.argv[1])
members = [pymongo.MongoClient("127.0.0.1", base + i, directConnection=True, username="ycsb",
                               password="ycsb-pw", authSource="admin", serverSelectionTimeoutMS=10000)
           for i in range(3)]
hello = members[0].admin.command("hello")
hidden = "127.0.0.1:%d" % (base + 2)
assert hello.get("isWritablePrimary"), "member 0 is not the primary: %r" % hello
assert hidden not in hello["hosts"] + hello.get("passives", []), "hidden member listed: %r" % hello
assert members[2].admin.command("hello").get("hidden") is True, "member 2 does not say hidden"
deadline = time.time() + 60
while True:
    hashes = [m.ycsb.command("dbHash")["md5"] for m in members]
    counts = [m.ycsb.usertable.estimated_document_count() for m in members]
    if len(set(hashes)) == 1:
        print("run.sh: all three members hold the same ycsb (dbHash %s, %d documents)" % (hashes[0], counts[0]))
        break
    if time.time() > deadline:
        sys.exit("run.sh: FAIL members differ after 60 s: dbHash %r, counts %r" % (hashes, counts))
    time.sleep(0.5)
PYEOF
    if ! "$PY" "$REPO/scripts/sable-cluster" status --dir "$TMP/cluster" | grep -q 'DOWN'; then
        :
    else
        echo "run.sh: FAIL a member died during the test:" >&2
        "$PY" "$REPO/scripts/sable-cluster" status --dir "$TMP/cluster" >&2
        tail -n 20 "$TMP"/cluster/member*/sabled.log >&2
        RC=1
    fi
    exit "$RC"
fi

# --- start sabled on a free loopback port ------------------------------------
free_port() {
    if command -v python3 >/dev/null; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
        return
    fi
    local p
    for _ in $(seq 1 50); do
        p=$(( 20000 + RANDOM % 30000 ))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return
        fi
    done
    echo 27999
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_sabled() {
    PORT="$(free_port)"
    "$SABLED" --port "$PORT" --bind_ip 127.0.0.1 --dbpath "$TMP/db" \
        --logpath "$TMP/sabled.log" </dev/null >"$TMP/sabled.out" 2>&1 &
    PID=$!
    local i
    for i in $(seq 1 150); do          # up to 15 s
        if ! kill -0 "$PID" 2>/dev/null; then
            wait "$PID" 2>/dev/null
            PID=""
            return 1
        fi
        if port_open "$PORT"; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

started=0
for attempt in 1 2 3; do           # a port race is the only reason to retry
    if start_sabled; then
        started=1
        break
    fi
    if [ -n "$PID" ]; then
        break                      # still running but not listening: give up
    fi
done
if [ "$started" != 1 ]; then
    echo "run.sh: sabled did not start; its output:" >&2
    tail -n 30 "$TMP/sabled.out" "$TMP/sabled.log" 2>/dev/null >&2
    exit 2
fi
echo "run.sh: sabled pid $PID on 127.0.0.1:$PORT"

# --- run the test --------------------------------------------------------------
java -cp "$CP:$TMP/classes" YcsbBindingTest "mongodb://127.0.0.1:$PORT"
RC=$?

# --- stop sabled ---------------------------------------------------------------
if ! kill -0 "$PID" 2>/dev/null; then
    wait "$PID" 2>/dev/null
    echo "run.sh: FAIL sabled died during the test (exit status $?); last log lines:" >&2
    tail -n 30 "$TMP/sabled.out" "$TMP/sabled.log" 2>/dev/null >&2
    PID=""
    [ "$RC" = 0 ] && RC=1
else
    kill -TERM "$PID"
    for _ in $(seq 1 100); do      # up to 10 s
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$PID" 2>/dev/null; then
        echo "run.sh: FAIL sabled did not exit within 10s of SIGTERM" >&2
        kill -KILL "$PID" 2>/dev/null
        [ "$RC" = 0 ] && RC=1
    fi
    wait "$PID"
    SRC=$?
    PID=""
    if [ "$SRC" != 0 ]; then
        echo "run.sh: FAIL sabled exited with status $SRC after SIGTERM" >&2
        tail -n 10 "$TMP/sabled.out" "$TMP/sabled.log" 2>/dev/null >&2
        [ "$RC" = 0 ] && RC=1
    fi
fi
exit "$RC"
