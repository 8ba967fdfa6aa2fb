"""
Disk faults: a full disk and a read-only dbpath.  The dbpath is a small
tmpfs mounted by the test (needs root and permission to mount; the tests
skip otherwise).  sabled's free-space guard (--setParameter
minFreeDiskSpaceMB, src/storage/wt_space.c) refuses inserts and updates
with OutOfDiskSpace (14031) once the dbpath's filesystem is below the
minimum: reads and deletes keep working, nothing acknowledged is lost, and
once space is freed writes succeed again without a restart.  With the
guard off, a write that hits ENOSPC gets an error reply and loses nothing
acknowledged (WiredTiger itself then stops: see docs/reliability.md).  A
read-only dbpath makes start-up fail with a clear message.
"""

import os
import subprocess
import tempfile
import time

import pytest
from pymongo.errors import AutoReconnect, OperationFailure, WriteConcernError
from pymongo.write_concern import WriteConcern

from sabled import Sabled, SabledError, run_sabled


def _mount_tmpfs(path, size):
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % size, "tmpfs", path],
                       capture_output=True, text=True)
    return r.returncode == 0, r.stderr


def _umount(path):
    subprocess.run(["umount", "-l", path], capture_output=True)


@pytest.fixture
def tmpfs():
    """A fresh directory with a small tmpfs mounted on it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tempfile.mkdtemp(prefix="sable-diskfault-")
    ok, msg = _mount_tmpfs(mnt, "64m")
    if not ok:
        os.rmdir(mnt)
        pytest.skip("cannot mount a tmpfs here: %s" % msg.strip())
    try:
        yield mnt
    finally:
        _umount(mnt)
        os.rmdir(mnt)


def _server_on(path):
    s = Sabled()
    os.rmdir(s.dbpath)
    s.dbpath = path
    return s


def _free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


# The guard's minimum in these tests, and how full the 64 MB disk is made:
# below the minimum, with room left for what the guard lets through before it
# notices (at most 100 ms or 4 MB of writes).
GUARD_MB = 24
GUARD_FILL_TO = 12 << 20


def _fill(tmpfs, leave):
    """Fill tmpfs with a file until less than leave bytes are free; returns its path."""
    filler = os.path.join(tmpfs, "filler")
    with open(filler, "wb") as f:
        while _free_bytes(tmpfs) > leave:
            f.write(b"\0" * (1 << 20))
            f.flush()
    return filler


def _fill_until_error(s, tmpfs, min_free_mb=0, leave=3 << 20):
    """Start s on tmpfs (guard minimum min_free_mb; 0: off), write 100 j:true
    documents, fill the disk until less than leave bytes are free and insert
    200 KB documents until one fails.  Returns (client, coll, acked {_id: v},
    the error, the filler file's path)."""
    s.start(["--wiredTigerCacheSizeGB", "0.25", "--syncdelay", "2",
             "--setParameter", "minFreeDiskSpaceMB=%d" % min_free_mb])
    client = s.client(retryWrites=False, socketTimeoutMS=60000)
    coll = client.dfdb.c.with_options(write_concern=WriteConcern(w=1, j=True))
    acked = {}
    for i in range(100):
        coll.insert_one({"_id": "base%d" % i, "v": i})
        acked["base%d" % i] = i
    filler = _fill(tmpfs, leave)
    time.sleep(0.3)  # past the guard's refresh interval (not needed for correctness)
    big = "x" * (200 * 1024)
    for i in range(400):
        try:
            coll.insert_one({"_id": "big%d" % i, "pad": big, "v": i})
            acked["big%d" % i] = i
        except OperationFailure as e:
            return client, coll, acked, e, filler
        except AutoReconnect as e:
            pytest.fail("the connection dropped instead of an error reply: %r\n%s"
                        % (e, s.output()[-3000:]))
    pytest.fail("the disk never filled (%d bytes free)" % _free_bytes(tmpfs))


def _check_acked(coll, acked):
    for k, v in acked.items():
        d = coll.find_one({"_id": k}, {"pad": 0})
        assert d is not None and d["v"] == v, k


def test_full_disk_write_fails_with_an_error_reply(tmpfs):
    """Guard off: the write that hits ENOSPC gets an error reply; sabled stays up."""
    dbpath = os.path.join(tmpfs, "db")
    os.mkdir(dbpath)
    s = _server_on(dbpath)
    try:
        client, coll, acked, error, filler = _fill_until_error(s, tmpfs)
        assert s.is_running(), "sabled died when the disk filled:\n" + s.output()[-3000:]
        assert error.code is not None and error.details.get("errmsg"), error.details
        client.close()
    finally:
        s.cleanup()


def test_guard_refuses_writes_with_out_of_disk_space(tmpfs):
    dbpath = os.path.join(tmpfs, "db")
    os.mkdir(dbpath)
    s = _server_on(dbpath)
    try:
        client, coll, acked, error, filler = _fill_until_error(
            s, tmpfs, min_free_mb=GUARD_MB, leave=GUARD_FILL_TO)
        # The first write after the disk went below the minimum is refused.
        assert not any(k.startswith("big") for k in acked), sorted(acked)[-5:]
        assert error.code == 14031, error.details
        assert "out of disk space" in error.details["errmsg"], error.details
        with pytest.raises(OperationFailure) as ei:
            coll.update_one({"_id": "base1"}, {"$set": {"v": 1000}})
        assert ei.value.code == 14031
        with pytest.raises(OperationFailure) as ei:
            coll.create_index("v")
        assert ei.value.code == 14031
        assert s.is_running()
        client.close()
    finally:
        s.cleanup()


# When the journal flush fails (here: ENOSPC), the j:true writes waiting on it
# must not be acknowledged (it was so before d7df4f1: 1 of 242 lost).
def test_full_disk_loses_nothing_acknowledged(tmpfs):
    dbpath = os.path.join(tmpfs, "db")
    os.mkdir(dbpath)
    s = _server_on(dbpath)
    try:
        client, coll, acked, error, filler = _fill_until_error(s, tmpfs)
        client.close()
        # Free the space and restart: every acknowledged write is there.
        os.unlink(filler)
        try:
            s.stop(timeout=60)
        except SabledError:
            pass  # a server whose engine failed may not shut down cleanly; kill9 then
        s.kill9()
        s.start(["--wiredTigerCacheSizeGB", "0.25"], port=s.port)
        client = s.client()
        lost = [k for k in acked if client.dfdb.c.find_one({"_id": k}, {"pad": 0}) is None]
        assert not lost, "%d of %d j:true-acknowledged writes lost: %s" % (len(lost), len(acked),
                                                                            lost[:10])
        _check_acked(client.dfdb.c, acked)
        v = client.dfdb.command("validate", "c")
        assert v["valid"], v
        client.close()
    finally:
        s.cleanup()


# Without the guard (test_full_disk_loses_nothing_acknowledged), WiredTiger
# 3.2.1 panics on a journal write that gets ENOSPC and then fails every
# command until a restart; the guard keeps it away from that state.
def test_full_disk_reads_keep_working_and_writes_recover(tmpfs):
    dbpath = os.path.join(tmpfs, "db")
    os.mkdir(dbpath)
    s = _server_on(dbpath)
    try:
        client, coll, acked, error, filler = _fill_until_error(
            s, tmpfs, min_free_mb=GUARD_MB, leave=GUARD_FILL_TO)
        assert error.code == 14031, error.details
        # Reads, commands and deletes keep working.
        _check_acked(coll, acked)
        assert client.admin.command("ping")["ok"] == 1
        assert coll.count_documents({}) == len(acked)
        assert coll.delete_one({"_id": "base0"}).deleted_count == 1
        del acked["base0"]
        os.unlink(filler)
        deadline = time.monotonic() + 60
        while True:
            try:
                coll.insert_one({"_id": "after", "v": -1})
                break
            except (OperationFailure, WriteConcernError) as e:
                if time.monotonic() > deadline:
                    pytest.fail("writes still fail 60 s after space was freed: %r" % e)
                time.sleep(0.2)
        acked["after"] = -1
        coll.update_one({"_id": "base1"}, {"$set": {"v": 1001}})
        acked["base1"] = 1001
        _check_acked(coll, acked)
        assert client.dfdb.command("validate", "c")["valid"]
        # ... and all of it after a restart.
        client.close()
        assert s.stop() == 0
        s.start(["--wiredTigerCacheSizeGB", "0.25"], port=s.port)
        client = s.client()
        _check_acked(client.dfdb.c, acked)
        assert client.dfdb.c.count_documents({}) == len(acked)
        client.close()
    finally:
        s.cleanup()


def test_default_guard_on_a_small_disk(tmpfs):
    """The default minimum (200 MB) is more than this 64 MB disk: the server
    starts and serves reads, and refuses inserts with a message that names
    the parameter."""
    dbpath = os.path.join(tmpfs, "db")
    os.mkdir(dbpath)
    s = _server_on(dbpath)
    try:
        s.start()
        c = s.client(retryWrites=False)
        assert c.admin.command("ping")["ok"] == 1
        with pytest.raises(OperationFailure) as ei:
            c.d.c.insert_one({"_id": 1})
        assert ei.value.code == 14031
        assert "minFreeDiskSpaceMB" in ei.value.details["errmsg"]
        assert c.d.c.find_one({"_id": 1}) is None
        c.close()
    finally:
        s.cleanup()


def test_bad_min_free_parameter_is_refused(tmp_path):
    r = run_sabled(["--dbpath", str(tmp_path), "--port", "1",
                    "--setParameter", "minFreeDiskSpaceMB=-5"])
    assert r.returncode != 0
    assert "minFreeDiskSpaceMB" in r.stderr + r.stdout


def test_read_only_dbpath_fails_clearly(tmpfs):
    dbpath = os.path.join(tmpfs, "db")
    os.mkdir(dbpath)
    # First with data in it: start, write, stop; then make the mount read-only.
    s = _server_on(dbpath)
    try:
        s.start(["--setParameter", "minFreeDiskSpaceMB=1"])
        c = s.client()
        c.ro.c.insert_one({"_id": 1})
        c.close()
        assert s.stop() == 0
        r = subprocess.run(["mount", "-o", "remount,ro", tmpfs], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip("cannot remount read-only: %s" % r.stderr.strip())
        s.start(wait=False)
        try:
            code = s.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("sabled kept running on a read-only dbpath:\n" + s.output()[-3000:])
        assert code == 100, code  # as mongod when it cannot take its lock file
        assert "Unable to create/open the lock file" in s.output(), s.output()[-3000:]
        text = s.output().lower()
        assert "read-only" in text or "read only" in text or "permission" in text or \
            "erofs" in text, s.output()[-3000:]
    finally:
        s.cleanup()
        subprocess.run(["mount", "-o", "remount,rw", tmpfs], capture_output=True)


def test_start_fails_clearly_when_dbpath_is_full(tmpfs):
    dbpath = os.path.join(tmpfs, "db")
    os.mkdir(dbpath)
    with open(os.path.join(tmpfs, "filler"), "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError:
            pass
    s = _server_on(dbpath)
    try:
        try:
            s.start(timeout=30)
        except SabledError as e:
            # Refusing to start is fine, with a message that says why.
            assert "space" in str(e).lower() or "enospc" in str(e).lower(), str(e)[-3000:]
            return
        # Starting is fine too, as long as it answers and stays up.
        c = s.client()
        assert c.admin.command("ping")["ok"] == 1
        c.close()
    finally:
        s.cleanup()
