"""
Disk faults: a full disk and a read-only dbpath.  The dbpath is a small
tmpfs mounted by the test (needs root and permission to mount; the tests
skip otherwise).  When the disk fills, writes fail with an error reply
(never a crash or a hang), reads keep working, nothing acknowledged is
lost, and once space is freed writes succeed again without a restart.  A
read-only dbpath makes start-up fail with a clear message.
"""

import os
import subprocess
import tempfile
import time

import pytest
from pymongo.errors import AutoReconnect, OperationFailure, WriteConcernError
from pymongo.write_concern import WriteConcern

from sabled import Sabled, SabledError


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


def _fill_until_error(s, tmpfs):
    """Start s on tmpfs, write 100 j:true documents, fill the disk to ~3 MB
    free and insert 200 KB documents until one fails.  Returns (client,
    coll, acked {_id: v}, the error, the filler file's path)."""
    s.start(["--wiredTigerCacheSizeGB", "0.25", "--syncdelay", "2"])
    client = s.client(retryWrites=False, socketTimeoutMS=60000)
    coll = client.dfdb.c.with_options(write_concern=WriteConcern(w=1, j=True))
    acked = {}
    for i in range(100):
        coll.insert_one({"_id": "base%d" % i, "v": i})
        acked["base%d" % i] = i
    filler = os.path.join(tmpfs, "filler")
    with open(filler, "wb") as f:
        while _free_bytes(tmpfs) > (3 << 20):
            f.write(b"\0" * (1 << 20))
            f.flush()
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


# Known wrong (reported in docs/reliability.md): WiredTiger 3.2.1 panics on a
# journal write that gets ENOSPC ("fatal log failure ... WT_PANIC"); sabled then
# answers every later command with InternalError "WiredTiger panic" until it is
# restarted, so reads stop working and writes never come back by themselves.
@pytest.mark.xfail(reason="a journal write hitting ENOSPC panics WiredTiger; "
                          "no free-space guard before the engine yet", strict=False)
def test_full_disk_reads_keep_working_and_writes_recover(tmpfs):
    dbpath = os.path.join(tmpfs, "db")
    os.mkdir(dbpath)
    s = _server_on(dbpath)
    try:
        client, coll, acked, error, filler = _fill_until_error(s, tmpfs)
        _check_acked(coll, acked)
        assert client.admin.command("ping")["ok"] == 1
        os.unlink(filler)
        deadline = time.monotonic() + 60
        while True:
            try:
                coll.insert_one({"_id": "after", "v": -1})
                break
            except (OperationFailure, WriteConcernError) as e:
                if time.monotonic() > deadline:
                    pytest.fail("writes still fail 60 s after space was freed: %r" % e)
                time.sleep(0.5)
        acked["after"] = -1
        _check_acked(coll, acked)
        client.close()
    finally:
        s.cleanup()


def test_read_only_dbpath_fails_clearly(tmpfs):
    dbpath = os.path.join(tmpfs, "db")
    os.mkdir(dbpath)
    # First with data in it: start, write, stop; then make the mount read-only.
    s = _server_on(dbpath)
    try:
        s.start()
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
        assert code != 0
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
