"""
Process life: command-line options, YAML config, the dbpath lock, clean
shutdown by SIGTERM, SIGINT and the shutdown command, --maxConns.
"""

import json
import os
import signal
import socket
import threading
import time

import pytest
from pymongo.errors import AutoReconnect, ConnectionFailure, OperationFailure

import wire
from sabled import free_port, run_sabled


def test_version_exits_0_and_names_7_0():
    r = run_sabled(["--version"])
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "db version v7.0." in out, out


def test_help_exits_0_and_lists_options():
    r = run_sabled(["--help"])
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    for opt in ("--port", "--dbpath", "--bind_ip", "--config", "--logpath", "--maxConns"):
        assert opt in out, "--help does not mention %s" % opt


def test_unknown_option_fails_with_message(tmp_path):
    r = run_sabled(["--dbpath", str(tmp_path), "--port", str(free_port()),
                    "--no-such-option"])
    assert r.returncode != 0
    assert "no-such-option" in (r.stdout + r.stderr), r.stdout + r.stderr


@pytest.mark.parametrize("args,words", [
    (["--port", "notanumber"], ["port"]),
    (["--port", "70000"], ["port"]),
    (["--wiredTigerCacheSizeGB", "lots"], ["cacheSizeGB"]),
    (["--maxConns", "-5x"], ["maxConns", "maxIncomingConnections"]),
    (["--journalCommitInterval", "abc"], ["journalCommitInterval", "commitIntervalMs"]),
])
def test_malformed_value_fails_with_message(tmp_path, args, words):
    r = run_sabled(["--dbpath", str(tmp_path), "--bind_ip", "127.0.0.1"] + args)
    assert r.returncode != 0, "sabled accepted %r" % (args,)
    out = (r.stdout + r.stderr).lower()
    # The message names the option (by its command-line or its YAML name).
    assert any(w.lower() in out for w in words), r.stdout + r.stderr


def test_yaml_config_port_dbpath_and_json_log(fresh_server):
    s = fresh_server
    port = free_port()
    logpath = os.path.join(s.root, "from-config.log")
    conf = os.path.join(s.root, "sabled.conf")
    with open(conf, "w") as f:
        f.write("""\
# mongod-style configuration
net:
  port: %d
  bindIp: 127.0.0.1
storage:
  dbPath: "%s"
  journal:
    commitIntervalMs: 50
  wiredTiger:
    engineConfig:
      cacheSizeGB: 0.25
systemLog:
  destination: file
  path: "%s"
""" % (port, s.dbpath, logpath))
    s.port = port
    s.start_raw(["--config", conf])
    s.wait_ready()
    c = s.client()
    try:
        c.cfgdb.t.insert_one({"x": 1})
        assert c.cfgdb.t.find_one({"x": 1}) is not None
        opts = c.admin.command("getCmdLineOpts")
        assert opts["parsed"]["net"]["port"] == port
        assert opts["parsed"]["storage"]["dbPath"] == s.dbpath
    finally:
        c.close()
    # WiredTiger files went to the configured dbPath.
    assert os.path.exists(os.path.join(s.dbpath, "WiredTiger")), os.listdir(s.dbpath)
    assert s.stop() == 0
    with open(logpath) as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    assert lines, "systemLog.path is empty"
    for line in lines:
        entry = json.loads(line)
        for key in ("t", "s", "c", "id", "ctx", "msg"):
            assert key in entry, "log line lacks %r: %s" % (key, line)
        assert "$date" in entry["t"]
        assert entry["s"] in ("F", "E", "W", "I", "D1", "D2", "D3", "D4", "D5", "D"), line
        assert isinstance(entry["id"], int)


def test_second_instance_on_same_dbpath_fails_first_keeps_working(fresh_server):
    s = fresh_server
    s.start()
    c = s.client()
    try:
        c.lockdb.t.insert_one({"_id": 1})
        other_log = os.path.join(s.root, "second.log")
        r = run_sabled(["--port", str(free_port()), "--bind_ip", "127.0.0.1",
                        "--dbpath", s.dbpath, "--logpath", other_log], timeout=30)
        assert r.returncode != 0
        text = r.stdout + r.stderr
        if os.path.exists(other_log):
            text += open(other_log).read()
        low = text.lower()
        assert ("lock" in low or "in use" in low or "already running" in low), text
        assert s.is_running()
        assert c.admin.command("ping")["ok"] == 1
        assert c.lockdb.t.find_one({"_id": 1}) == {"_id": 1}
        c.lockdb.t.insert_one({"_id": 2})
        assert c.lockdb.t.count_documents({}) == 2
    finally:
        c.close()


def _write_some(s, n=50):
    c = s.client()
    try:
        c.persist.t.insert_many([{"_id": i, "v": "x" * 100} for i in range(n)])
        c.persist.t.update_one({"_id": 0}, {"$set": {"updated": True}})
    finally:
        c.close()


def _check_persisted(s, n=50):
    s.restart()
    c = s.client()
    try:
        assert c.persist.t.count_documents({}) == n
        assert c.persist.t.find_one({"_id": 0})["updated"] is True
        assert c.persist.t.find_one({"_id": n - 1})["v"] == "x" * 100
    finally:
        c.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_cleanly_and_data_persists(fresh_server, sig):
    s = fresh_server
    s.start()
    _write_some(s)
    s.signal(sig)
    assert s.wait(timeout=30) == 0, s.output()[-3000:]
    _check_persisted(s)


def test_shutdown_command_stops_cleanly_and_data_persists(fresh_server):
    s = fresh_server
    s.start()
    _write_some(s)
    c = s.client()
    try:
        # shutdown is only allowed on admin.
        with pytest.raises(OperationFailure):
            c.persist.command("shutdown")
        assert c.admin.command("ping")["ok"] == 1
        try:
            c.admin.command("shutdown")
        except (AutoReconnect, ConnectionFailure):
            pass  # the server closes the connection as it goes down
    finally:
        c.close()
    assert s.wait(timeout=30) == 0, s.output()[-3000:]
    _check_persisted(s)


def _hello_works(port):
    try:
        with wire.connect(port, timeout=5) as sock:
            return wire.command(sock, {"hello": 1})["ok"] == 1
    except (OSError, wire.WireError):
        return False


def test_max_conns_enforced(fresh_server):
    s = fresh_server
    s.start(["--maxConns", "5"])
    time.sleep(0.3)  # let the readiness probe's connection close
    socks = []
    try:
        for _ in range(5):
            sock = wire.connect(s.port)
            assert wire.command(sock, {"hello": 1})["ok"] == 1
            socks.append(sock)
        extra = wire.connect(s.port)
        socks.append(extra)
        extra.settimeout(5)
        try:
            extra.sendall(wire.op_msg({"hello": 1, "$db": "admin"}))
            _, raw = wire.read_message(extra)
            pytest.fail("connection 6 of --maxConns 5 was served: %r" % (wire.Reply(raw).doc,))
        except (wire.WireError, ConnectionResetError, BrokenPipeError):
            pass
        except socket.timeout:
            pytest.fail("connection 6 of --maxConns 5 was neither served nor closed")
        # Existing connections still work.
        for sock in socks[:5]:
            assert wire.command(sock, {"ping": 1})["ok"] == 1
        # Free one slot: a new connection is served again.
        socks[0].close()
        deadline = time.monotonic() + 10
        while not _hello_works(s.port):
            assert time.monotonic() < deadline, "no connection accepted after one closed"
            time.sleep(0.1)
    finally:
        for sock in socks:
            sock.close()


def test_threads_carry_their_names(fresh_server):
    """top -H, perf and /proc show which thread is busy: the network loops,
    the listener, the journal flusher and the checkpointer are named (the
    OS thread name, 15 bytes at most)."""
    s = fresh_server
    s.start()
    task = "/proc/%d/task" % s.proc.pid
    names = set()
    for tid in os.listdir(task):
        with open(os.path.join(task, tid, "comm")) as f:
            names.add(f.read().strip())
    assert {"loop0", "listener", "JournalFlusher", "Checkpointer"} <= names, names


def _thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return "never"


def test_documents_live_on_huge_pages(fresh_server):
    """The allocator (jemalloc) asks for transparent huge pages: inserted
    documents land in 2 MiB pages instead of faulting in one 4 KiB page at a
    time (each first touch costs ~18 us on this kind of machine).  Without
    main.c's malloc_conf the process has no anonymous huge pages, as THP
    here is "madvise"."""
    s = fresh_server
    s.start()
    pid = s.proc.pid
    with open("/proc/%d/maps" % pid) as f:
        if "libjemalloc" not in f.read():
            pytest.skip("sabled is not linked with jemalloc (sanitizer build)")
    if _thp_mode() == "never":
        pytest.skip("transparent huge pages are off on this machine")
    c = s.client()
    try:
        coll = c.hp.docs
        blob = "x" * 1000
        for i in range(0, 40000, 1000):
            coll.insert_many([{"_id": i + j, "v": blob} for j in range(1000)])
        with open("/proc/%d/smaps_rollup" % pid) as f:
            rollup = f.read()
    finally:
        c.close()
    huge_kb = int(rollup.split("AnonHugePages:")[1].split()[0])
    assert huge_kb >= 4096, rollup


def _cache_max(client):
    return client.admin.command("serverStatus")["wiredTiger"]["cache"]["maximum bytes configured"]


def test_wiredtiger_engine_config_string_is_appended(fresh_server):
    """--wiredTigerEngineConfigString (mongod's option, and
    storage.wiredTiger.engineConfig.configString in YAML) goes to
    wiredtiger_open after sabled's own settings, so its keys win; one
    WiredTiger rejects stops the start with WiredTiger's message."""
    s = fresh_server
    s.start(["--wiredTigerCacheSizeGB", "0.25",
             "--wiredTigerEngineConfigString", "cache_size=300M"])
    c = s.client()
    try:
        assert _cache_max(c) == 300 << 20
    finally:
        c.close()
    assert s.stop() == 0

    conf = os.path.join(s.root, "wt.conf")
    with open(conf, "w") as f:
        f.write("storage:\n  wiredTiger:\n    engineConfig:\n"
                "      cacheSizeGB: 0.25\n      configString: \"cache_size=320M\"\n")
    s.start(["--config", conf], port=s.port)
    c = s.client()
    try:
        assert _cache_max(c) == 320 << 20
        opts = c.admin.command("getCmdLineOpts")["parsed"]
        assert opts["storage"]["wiredTiger"]["engineConfig"]["configString"] == "cache_size=320M"
    finally:
        c.close()
    assert s.stop() == 0

    r = run_sabled(["--dbpath", s.dbpath, "--port", str(free_port()), "--bind_ip", "127.0.0.1",
                    "--wiredTigerEngineConfigString", "no_such_setting=1"])
    assert r.returncode != 0
    assert "no_such_setting" in r.stdout + r.stderr, r.stdout + r.stderr

    r = run_sabled(["--dbpath", s.dbpath, "--port", str(free_port()), "--bind_ip", "127.0.0.1",
                    "--wiredTigerEngineConfigString", "cache_size=300M," * 600])
    assert r.returncode != 0
    assert "wiredTigerEngineConfigString is too long" in r.stdout + r.stderr, r.stdout + r.stderr


def _storage_size(s, args, coll="big"):
    """storageSize of a collection of 5,000 documents of 1,000 equal bytes,
    checkpointed, on s started with args; stops s."""
    s.start(args, port=s.port)
    c = s.client()
    try:
        c.t[coll].insert_many([{"_id": i, "s": "a" * 1000} for i in range(5000)])
        c.t[coll].create_index("s")
        assert c.t[coll].find_one({"s": "a" * 1000, "_id": 7})["_id"] == 7
        c.admin.command("fsync")
        return c.t.command("collStats", coll)["storageSize"]
    finally:
        c.close()
        assert s.stop() == 0


def test_wiredtiger_collection_and_index_config_strings(fresh_server):
    """--wiredTigerCollectionConfigString and --wiredTigerIndexConfigString
    (mongod's options; storage.wiredTiger.collectionConfig.configString and
    indexConfig.configString in YAML) are added to the create settings of
    new tables, after sabled's own, so their keys win; a table's formats and
    logging stay sabled's; a string WiredTiger rejects stops the start."""
    s = fresh_server
    s.port = free_port()
    compressed = _storage_size(s, [], "snappy")  # sabled's block_compressor
    plain = _storage_size(s, ["--wiredTigerCollectionConfigString",
                              "block_compressor=none,key_format=S,value_format=S,"
                              "log=(enabled=false)"], "plain")
    assert plain > 3 * compressed, (plain, compressed)
    assert plain > 4_000_000, plain  # 5 MB of documents, stored as they are

    conf = os.path.join(s.root, "tables.conf")
    with open(conf, "w") as f:
        f.write("storage:\n  wiredTiger:\n    collectionConfig:\n"
                "      configString: \"block_compressor=none\"\n"
                "    indexConfig:\n      configString: \"memory_page_max=2m\"\n")
    assert _storage_size(s, ["--config", conf], "yaml") > 3 * compressed
    s.start(["--config", conf], port=s.port)
    c = s.client()
    try:
        wt = c.admin.command("getCmdLineOpts")["parsed"]["storage"]["wiredTiger"]
        assert wt["collectionConfig"]["configString"] == "block_compressor=none"
        assert wt["indexConfig"]["configString"] == "memory_page_max=2m"
        # every collection so far still reads (their tables' formats are sabled's)
        for coll in ("snappy", "plain", "yaml"):
            assert c.t[coll].count_documents({}) == 5000
    finally:
        c.close()
    assert s.stop() == 0

    for opt in ("--wiredTigerCollectionConfigString", "--wiredTigerIndexConfigString"):
        r = run_sabled(["--dbpath", s.dbpath, "--port", str(free_port()), "--bind_ip",
                        "127.0.0.1", opt, "no_such_setting=1"])
        assert r.returncode != 0
        out = r.stdout + r.stderr
        assert opt[2:] in out and "no_such_setting=1" in out, out
        r = run_sabled(["--dbpath", s.dbpath, "--port", str(free_port()), "--bind_ip",
                        "127.0.0.1", opt, "split_pct=90," * 100])
        assert r.returncode != 0
        assert opt[2:] + " is too long" in r.stdout + r.stderr, r.stdout + r.stderr


def _checkpoints(client):
    return client.admin.command("serverStatus")["wiredTiger"]["transaction"][
        "transaction checkpoints"]


def _wait_checkpoint(client, after, limit):
    """Seconds until the checkpoint count passes after (None past limit s)."""
    t0 = time.time()
    while time.time() - t0 < limit:
        if _checkpoints(client) > after:
            return time.time() - t0
        time.sleep(0.05)
    return None


def test_periodic_checkpoint_counts_from_an_fsync(fresh_server):
    """--syncdelay is the time between checkpoints, an fsync command's
    included: the periodic one comes syncdelay seconds after the fsync,
    not at once (bench/audit's runs each start with an fsync and were
    otherwise hit by the timer's checkpoint)."""
    s = fresh_server
    s.start(["--syncdelay", "6"])
    c = s.client()
    try:
        c.ck.t.insert_one({"x": 1})
        n = _checkpoints(c)
        assert _wait_checkpoint(c, n, 15) is not None, "no periodic checkpoint in 15 s"
        time.sleep(2)  # the timer's next one is due in 4 s
        c.ck.t.insert_one({"x": 2})
        n = _checkpoints(c)
        c.admin.command("fsync", 1)
        assert _checkpoints(c) == n + 1
        t0 = time.time()
        # Counting from the periodic one it would come within 4 s; from the fsync, at 6.
        waited = _wait_checkpoint(c, n + 1, 5.0)
        # (a poll on a loaded host can return past its limit: a checkpoint
        # seen after 5 s is the fsync-timed one)
        assert waited is None or waited >= 5.0, "a checkpoint %.1f s after the fsync" % waited
        assert _wait_checkpoint(c, n + 1, 5.0) is not None, "none %.0f s after the fsync" % (
            time.time() - t0)
    finally:
        c.close()


def test_checkpoint_currently_running(fresh_server):
    """serverStatus reports a running checkpoint as MongoDB does
    (wiredTiger.transaction."transaction checkpoint currently running"): 1
    while an fsync's checkpoint writes its dirty data, 0 after.  bench/audit
    tags its segments with it.  And the fsync runs on a worker thread: four
    other clients (some on the fsync's network loop) each see the checkpoint
    running, where a loop busy with the checkpoint would answer them only
    after it."""
    s = fresh_server
    s.start(["--syncdelay", "0"])  # no periodic checkpoint: only the fsync's
    c = s.client()
    polls = [s.client() for _ in range(4)]
    key = "transaction checkpoint currently running"

    def running(pc):
        return pc.admin.command("serverStatus")["wiredTiger"]["transaction"][key]
    try:
        assert running(polls[0]) == 0
        blob = b"x" * 2000
        seen = [set() for _ in polls]
        for attempt in range(5):  # a checkpoint lasts ~0.1 s here: a poll can miss it
            for i in range(6):
                c.ck.big.insert_many([{"_id": (attempt * 6 + i) * 10000 + k, "b": blob}
                                      for k in range(10000)])
            box = {}
            t = threading.Thread(target=lambda: box.setdefault("r", c.admin.command("fsync", 1)))
            t.start()
            while t.is_alive():
                for k, pc in enumerate(polls):
                    seen[k].add(running(pc))
            t.join()
            assert box["r"]["ok"] == 1
            if all(1 in x for x in seen):
                break
        assert all(1 in x for x in seen), "clients that saw the checkpoint running: %s" % seen
        assert running(polls[0]) == 0
    finally:
        c.close()
        for pc in polls:
            pc.close()
