#!/usr/bin/env bash
# Run YcsbBindingTest (YCSB 0.17 mongodb-binding calls through the MongoDB
# Java driver 3.x) against a fresh sabled.
#
#   tests/integration/java/run.sh            # uses $SABLED or <repo>/build/sabled
#   SABLED=/path/to/sabled tests/integration/java/run.sh
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

TMP="$(mktemp -d "${TMPDIR:-/tmp}/sable-java-it.XXXXXX")"
PID=""

cleanup() {
    local rc=$?
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
