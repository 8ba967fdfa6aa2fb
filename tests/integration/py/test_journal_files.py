"""WiredTiger preallocates the journal's files with fallocate, which on ext4
leaves their blocks "unwritten"; --wiredTigerEngineConfigString
"log=(zero_fill=true)" (docs/usage.md) has them zero-filled instead, so no
block is left unwritten and a journal flush is a data write, not also a
commit of the file system's own journal.  The option merges into sabled's
own log settings, and a zero-filled journal recovers after kill -9 like any
other.

filefrag -v (e2fsprogs) shows each extent's flags; on a file system that
does not report extents (tmpfs) or has no unwritten ones the first two
tests skip."""
import glob
import os
import shutil
import subprocess

import pymongo
import pytest
from pymongo import WriteConcern

from sabled import Sabled


def _client(s):
    return pymongo.MongoClient("127.0.0.1", s.port, directConnection=True,
                               serverSelectionTimeoutMS=10000)


def _unwritten_extents(dbpath):
    """{file name: extents flagged unwritten} for the journal's log files,
    or None when filefrag cannot tell."""
    if shutil.which("filefrag") is None:
        return None
    out = {}
    for f in sorted(glob.glob(os.path.join(dbpath, "journal", "WiredTiger*Log.*")) +
                    glob.glob(os.path.join(dbpath, "journal", "WiredTigerPreplog.*"))):
        r = subprocess.run(["filefrag", "-v", f], capture_output=True, text=True, timeout=30)
        if r.returncode != 0 or "ext:" not in r.stdout:
            return None
        out[os.path.basename(f)] = r.stdout.count("unwritten")
    return out


def _write_journaled(s):
    c = _client(s)
    coll = c.t.get_collection("c", write_concern=WriteConcern(j=True))
    coll.insert_many([{"_id": i, "x": "y" * 1000} for i in range(200)])
    for i in range(20):
        coll.update_one({"_id": i}, {"$set": {"x": "z%d" % i}})
    c.close()


def _fallocate_leaves_unwritten_extents(tmp_path):
    """Whether this file system reports fallocate's blocks as unwritten."""
    if shutil.which("fallocate") is None or shutil.which("filefrag") is None:
        return False
    f = tmp_path / "probe"
    if subprocess.run(["fallocate", "-l", "1M", str(f)], capture_output=True).returncode != 0:
        return False
    r = subprocess.run(["filefrag", "-v", str(f)], capture_output=True, text=True)
    return r.returncode == 0 and "unwritten" in r.stdout


ZERO_FILL = ["--wiredTigerEngineConfigString", "log=(zero_fill=true)"]


def test_zero_fill_in_the_config_string_leaves_no_unwritten_extent(tmp_path):
    if not _fallocate_leaves_unwritten_extents(tmp_path):
        pytest.skip("this file system shows no unwritten extents")
    s = Sabled()
    try:
        s.start(ZERO_FILL)
        _write_journaled(s)
        files = _unwritten_extents(s.dbpath)
        assert files, "no journal files found under %s" % s.dbpath
        assert all(n == 0 for n in files.values()), files
        # the rest of the log settings (journal/, enabled) stay sabled's
        with _client(s) as c:
            opts = c.admin.command("getCmdLineOpts")["parsed"]
        assert opts["storage"]["wiredTiger"]["engineConfig"]["configString"] == \
            "log=(zero_fill=true)"
    finally:
        s.stop()


def test_default_journal_files_are_preallocated_by_fallocate(tmp_path):
    if not _fallocate_leaves_unwritten_extents(tmp_path):
        pytest.skip("this file system shows no unwritten extents")
    s = Sabled()
    try:
        s.start()
        _write_journaled(s)
        files = _unwritten_extents(s.dbpath)
        assert files and any(n > 0 for n in files.values()), files
    finally:
        s.stop()


def test_zero_filled_journal_recovers_after_kill9():
    s = Sabled()
    try:
        s.start(ZERO_FILL)
        _write_journaled(s)
        s.kill9()  # no checkpoint since the writes: they come back from the journal
        s.start(ZERO_FILL)
        c = _client(s)
        assert c.t.c.count_documents({}) == 200
        assert [d["x"] for d in c.t.c.find({"_id": {"$lt": 20}}).sort("_id", 1)] == \
            ["z%d" % i for i in range(20)]
        assert c.t.c.find_one({"_id": 150})["x"] == "y" * 1000
        c.close()
    finally:
        s.stop()
