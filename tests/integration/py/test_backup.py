"""
Hot backup: the $backupCursor stage, sable-backup (full and incremental) under
a concurrent write load, and fsync {lock: true} / fsyncUnlock.

The load is YCSB-like: writer threads update their own keys (each value one
more than the last) and insert new ones, every write with j:true; each
acknowledged write is recorded.  A backup taken while they run must start as
a server, pass validate on every collection, and hold every write
acknowledged before sable-backup began (a key's value at least the one
acknowledged; every acknowledged insert).
"""

import os
import shutil
import threading
import time

import pytest
from pymongo import WriteConcern
from pymongo.errors import OperationFailure

from sabled import Sabled
from test_replset3 import last_oplog_ts
from tools_util import ok, run_tool


class Writers:
    """Threads writing with j:true; snapshot() copies what was acknowledged."""

    def __init__(self, server, nthreads=3, keys=200):
        self.server = server
        self.nthreads = nthreads
        self.keys = keys
        self.lock = threading.Lock()
        self.acked = {}      # key -> last acknowledged value
        self.inserted = set()
        self.stop_flag = threading.Event()
        self.errors = []
        self.threads = []

    def run(self, t):
        client = self.server.client()
        coll = client.ycsb.get_collection("usertable", write_concern=WriteConcern(w=1, j=True))
        n = 0
        try:
            while not self.stop_flag.is_set():
                n += 1
                key = "user%d-%d" % (t, n % self.keys)
                coll.update_one({"_id": key}, {"$set": {"v": n, "field0": "x" * 100}}, upsert=True)
                with self.lock:
                    self.acked[key] = n
                ins = "ins%d-%d" % (t, n)
                coll.insert_one({"_id": ins, "field1": "y" * 200})
                with self.lock:
                    self.inserted.add(ins)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(e))
        finally:
            client.close()

    def start(self):
        for t in range(self.nthreads):
            th = threading.Thread(target=self.run, args=(t,), daemon=True)
            th.start()
            self.threads.append(th)

    def snapshot(self):
        with self.lock:
            return dict(self.acked), set(self.inserted)

    def stop(self):
        self.stop_flag.set()
        for th in self.threads:
            th.join(30)
        assert not self.errors, self.errors


def start_copy(backup_dir):
    """A server on a copy of backup_dir (the backup itself stays usable for
    --incremental); returns it started, and how long the start took."""
    s = Sabled()
    shutil.rmtree(s.dbpath)
    shutil.copytree(backup_dir, s.dbpath)
    t0 = time.time()
    s.start()
    return s, time.time() - t0


def check_copy(s, acked, inserted):
    c = s.client()
    for name in c.list_database_names():
        for coll in c[name].list_collection_names():
            v = c[name].command("validate", coll)
            assert v["valid"], (name, coll, v)
    have = {d["_id"]: d.get("v") for d in c.ycsb.usertable.find({}, {"v": 1})}
    missing = [k for k, v in acked.items() if k not in have or have[k] < v]
    assert not missing, "acknowledged updates missing: %r" % missing[:10]
    lost = [i for i in inserted if i not in have]
    assert not lost, "acknowledged inserts missing: %r" % lost[:10]
    return len(have)


def backup(server, out, *extra):
    return ok(run_tool("sable-backup", "--port", server.port, "--out", out, *extra, timeout=300))


def test_hot_backup_and_incremental_under_load(fresh_server, tmp_path):
    src = fresh_server
    src.start(["--syncdelay", "2"])  # checkpoints land during the backups
    w = Writers(src)
    w.start()
    copies = []
    try:
        time.sleep(2)
        out = str(tmp_path / "bk")
        acked1, ins1 = w.snapshot()
        p = backup(src, out)
        assert b"full backup" in p.stderr, p.stderr
        time.sleep(2)
        acked2, ins2 = w.snapshot()
        assert len(ins2) > len(ins1)
        p = backup(src, out, "--incremental")
        assert b"incremental backup" in p.stderr, p.stderr
        # A second incremental on the same chain works too.
        time.sleep(1)
        acked3, ins3 = w.snapshot()
        p = backup(src, out, "--incremental")
    finally:
        w.stop()
    # The restored copy holds the later state (the full backup plus both journals).
    s, secs = start_copy(out)
    copies.append(s)
    try:
        n = check_copy(s, acked3, ins3)
        assert n >= len(ins3)
        assert secs < 20, "the copy took %.1f s to start" % secs
    finally:
        for s in copies:
            s.cleanup()


def test_full_backup_restores_acknowledged_writes(fresh_server, tmp_path):
    src = fresh_server
    src.start()
    w = Writers(src)
    w.start()
    try:
        time.sleep(1.5)
        acked, ins = w.snapshot()
        out = str(tmp_path / "full")
        backup(src, out, "--noIncrementalBase")
    finally:
        w.stop()
    s, secs = start_copy(out)
    try:
        check_copy(s, acked, ins)
        assert secs < 20
    finally:
        s.cleanup()
    # No chain: an incremental has nothing to follow.
    p = run_tool("sable-backup", "--port", src.port, "--out", out, "--incremental")
    assert p.returncode == 1


def test_backup_cursor_stage(fresh_server):
    s = fresh_server
    s.start()
    c = s.client()
    c.t.c.insert_one({"_id": 1})
    r = c.admin.command("aggregate", 1, pipeline=[{"$backupCursor": {}}], cursor={})
    cur = r["cursor"]
    meta = cur["firstBatch"][0]["metadata"]
    assert meta["dbpath"] == s.dbpath and "backupId" in meta
    files = [d["filename"] for d in cur["firstBatch"][1:]]
    assert all(f.startswith(s.dbpath + "/") for f in files)
    assert any(f.endswith("WiredTiger.backup") for f in files)
    assert any("/journal/WiredTigerLog." in f for f in files)
    assert all(isinstance(d["fileSize"], int) for d in cur["firstBatch"][1:])
    assert cur["id"] != 0
    # One backup at a time.
    with pytest.raises(OperationFailure) as e:
        c.admin.command("aggregate", 1, pipeline=[{"$backupCursor": {}}], cursor={})
    assert e.value.code == 50886
    # getMore keeps it alive with an empty batch; killCursors ends the backup.
    g = c.admin.command("getMore", cur["id"], collection="$cmd.aggregate")
    assert g["cursor"]["nextBatch"] == [] and g["cursor"]["id"] == cur["id"]
    k = c.admin.command("killCursors", "$cmd.aggregate", cursors=[cur["id"]])
    assert k["cursorsKilled"] == [cur["id"]]
    r = c.admin.command("aggregate", 1, pipeline=[{"$backupCursor": {}}], cursor={})
    c.admin.command("killCursors", "$cmd.aggregate", cursors=[r["cursor"]["id"]])
    # Only on admin, only as the one stage, only known options.
    with pytest.raises(OperationFailure):
        c.t.command("aggregate", 1, pipeline=[{"$backupCursor": {}}], cursor={})
    with pytest.raises(OperationFailure):
        c.admin.command("aggregate", 1, pipeline=[{"$backupCursor": {}}, {"$limit": 1}],
                        cursor={})
    with pytest.raises(OperationFailure):
        c.admin.command("aggregate", 1, pipeline=[{"$backupCursor": {"nope": 1}}], cursor={})
    # An incremental needs the chain's last name.
    with pytest.raises(OperationFailure) as e:
        c.admin.command("aggregate", 1, pipeline=[{"$backupCursor": {
            "incrementalBackup": True, "thisBackupName": "b", "srcBackupName": "a"}}], cursor={})
    assert e.value.code == 2


def test_fsync_lock_blocks_writes_until_unlock(fresh_server):
    s = fresh_server
    s.start()
    c = s.client()
    c.t.c.insert_one({"_id": 0})
    r = c.admin.command("fsync", lock=True)
    assert r["lockCount"] == 1
    assert c.admin.command("currentOp").get("fsyncLock") is True
    assert c.admin.command("fsync", lock=True)["lockCount"] == 2  # nests
    # A $backupCursor cannot open while locked.
    with pytest.raises(OperationFailure) as e:
        c.admin.command("aggregate", 1, pipeline=[{"$backupCursor": {}}], cursor={})
    assert e.value.code == 50886

    done = threading.Event()
    errors = []

    def writer():
        try:
            s.client().t.c.insert_one({"_id": 1})
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        done.set()

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    assert not done.wait(1.0), "a write went through an fsync lock"
    # Reads continue while locked, on the same collection.
    assert c.t.c.find_one({"_id": 0}) == {"_id": 0}
    assert c.t.c.count_documents({}) == 1
    # A write with maxTimeMS gives up.
    with pytest.raises(OperationFailure) as e:
        c.t.command("insert", "c", documents=[{"_id": 2}], maxTimeMS=300)
    assert e.value.code == 50
    assert c.admin.command("fsyncUnlock")["lockCount"] == 1
    assert not done.wait(0.5), "one unlock of two released the lock"
    assert c.admin.command("fsyncUnlock")["lockCount"] == 0
    assert done.wait(10), "the blocked write did not finish after fsyncUnlock"
    th.join(10)
    assert not errors
    assert c.t.c.find_one({"_id": 1}) == {"_id": 1}
    assert "fsyncLock" not in c.admin.command("currentOp")
    with pytest.raises(OperationFailure) as e:
        c.admin.command("fsyncUnlock")
    assert e.value.code == 20
    assert "not locked" in str(e.value)
    # The backup works again once unlocked.
    r = c.admin.command("aggregate", 1, pipeline=[{"$backupCursor": {}}], cursor={})
    c.admin.command("killCursors", "$cmd.aggregate", cursors=[r["cursor"]["id"]])


def test_fsync_lock_files_copy_starts(fresh_server, tmp_path):
    """The old way: fsync lock, copy the dbpath with cp, unlock; the copy starts."""
    s = fresh_server
    s.start()
    c = s.client()
    c.t.c.insert_many([{"_id": i, "x": "z" * 50} for i in range(2000)])
    c.admin.command("fsync", lock=True)
    out = str(tmp_path / "cp")
    try:
        shutil.copytree(s.dbpath, out, ignore=shutil.ignore_patterns("mongod.lock",
                                                                       "WiredTiger.lock"))
    finally:
        c.admin.command("fsyncUnlock")
    t = Sabled()
    shutil.rmtree(t.dbpath)
    os.rename(out, t.dbpath)
    try:
        t.start()
        assert t.client().t.c.count_documents({}) == 2000
        assert t.client().t.command("validate", "c")["valid"]
    finally:
        t.cleanup()


def test_incremental_refused_after_a_new_collection(fresh_server, tmp_path):
    s = fresh_server
    s.start()
    c = s.client()
    c.t.a.insert_one({"_id": 1})
    out = str(tmp_path / "bk")
    backup(s, out)
    c.t.a.insert_one({"_id": 2})
    backup(s, out, "--incremental")  # same files: fine
    c.t.b.insert_one({"_id": 1})     # a new table the copy does not hold
    p = run_tool("sable-backup", "--port", s.port, "--out", out, "--incremental")
    assert p.returncode == 1
    assert b"take a full backup" in p.stderr, p.stderr
    # The copy so far is good and holds what the first incremental brought.
    t, _ = start_copy(out)
    try:
        assert sorted(d["_id"] for d in t.client().t.a.find()) == [1, 2]
    finally:
        t.cleanup()
    # Ending the chain lets the journal go; a new full backup starts again.
    r = c.admin.command("aggregate", 1, pipeline=[{"$backupCursor": {
        "disableIncrementalBackup": True}}], cursor={})
    c.admin.command("killCursors", "$cmd.aggregate", cursors=[r["cursor"]["id"]])
    assert not os.path.exists(os.path.join(s.dbpath, "sable.backupChain"))


def test_backup_cursor_on_a_replica_set_member(fresh_server, tmp_path):
    s = fresh_server
    s.start(["--replSet", "rs0", "--oplogSizeMB", "16"])
    c = s.client()
    c.admin.command("replSetInitiate",
                    {"_id": "rs0", "members": [{"_id": 0, "host": "127.0.0.1:%d" % s.port}]})
    deadline = time.time() + 20
    while not c.admin.command("hello").get("isWritablePrimary") and time.time() < deadline:
        time.sleep(0.1)
    c.t.c.insert_many([{"_id": i} for i in range(100)])
    r = c.admin.command("aggregate", 1, pipeline=[{"$backupCursor": {}}], cursor={})
    meta = r["cursor"]["firstBatch"][0]["metadata"]
    c.admin.command("killCursors", "$cmd.aggregate", cursors=[r["cursor"]["id"]])
    assert meta["oplogStart"]["ts"] <= meta["oplogEnd"]["ts"]
    assert meta["oplogEnd"]["ts"] <= last_oplog_ts(c)
    # The copy holds the oplog up to oplogEnd.
    out = str(tmp_path / "rs")
    backup(s, out, "--noIncrementalBase")
    t = Sabled()
    shutil.rmtree(t.dbpath)
    shutil.copytree(out, t.dbpath)
    try:
        t.start(["--replSet", "rs0", "--oplogSizeMB", "16"])
        tc = t.client()
        assert tc.local.oplog.rs.find_one({"ts": meta["oplogEnd"]["ts"]}) is not None
        assert tc.t.c.count_documents({}) == 100
    finally:
        t.cleanup()


def test_old_journal_files_go_without_a_chain(fresh_server):
    """WiredTiger's own log archival is off (an incremental chain must keep the journal);
    the checkpointer removes the files no checkpoint needs instead."""
    s = fresh_server
    s.start(["--syncdelay", "1", "--wiredTigerEngineConfigString",
             "log=(enabled=true,archive=false,path=journal,file_max=1MB)"])
    c = s.client()
    journal = os.path.join(s.dbpath, "journal")

    def logs():
        return [f for f in os.listdir(journal) if f.startswith("WiredTigerLog.")]

    for i in range(40):  # about 8 MB of journal: several 1 MB files
        c.t.c.insert_many([{"x": "y" * 1000} for _ in range(200)])
    assert max(int(f.split(".")[1]) for f in logs()) >= 5
    deadline = time.time() + 20
    while len(logs()) > 3 and time.time() < deadline:
        c.t.c.insert_one({"x": 1})
        time.sleep(0.5)
    assert len(logs()) <= 3, logs()


def test_a_chain_keeps_the_journal_until_the_next_backup(fresh_server, tmp_path):
    s = fresh_server
    s.start(["--syncdelay", "1", "--wiredTigerEngineConfigString",
             "log=(enabled=true,archive=false,path=journal,file_max=1MB)"])
    c = s.client()
    journal = os.path.join(s.dbpath, "journal")

    def logs():
        return sorted(int(f.split(".")[1]) for f in os.listdir(journal)
                      if f.startswith("WiredTigerLog."))

    c.t.c.insert_one({"_id": "first"})
    out = str(tmp_path / "bk")
    backup(s, out)
    first = logs()[0]
    for i in range(40):
        c.t.c.insert_many([{"x": "y" * 1000} for _ in range(200)])
    time.sleep(2.5)  # checkpoints happen; the chain keeps the files
    assert logs()[0] == first, logs()
    backup(s, out, "--incremental")
    assert logs()[0] > first, logs()  # the copied files the checkpoint no longer needs went
    t, _ = start_copy(out)
    try:
        assert t.client().t.c.count_documents({}) == 1 + 40 * 200
    finally:
        t.cleanup()
