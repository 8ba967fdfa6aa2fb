"""
test_cleanup.py: a test run leaves no server and no data directory behind
(sabled.py).  A pytest session ended by SIGTERM stops the servers it started,
those its tests did not clean up too, and removes their directories; the
directories of a session killed outright are removed by the next one, once
nothing uses them, and no other directory is.  Each case runs a small pytest
session in a subprocess with a TMPDIR of its own, so other runs sharing /tmp
are neither counted nor touched.
"""

import os
import signal
import subprocess
import sys
import time

import sabled

HERE = os.path.dirname(os.path.abspath(__file__))

INNER = '''
import os
import time

from sabled import Sabled

LEFT = []


def test_hold(fresh_server):
    fresh_server.start()
    s = Sabled()  # a server its test never cleans up: the exit must
    s.start()
    LEFT.append(s)
    ready = os.environ["INNER_READY"]
    with open(ready + ".tmp", "w") as f:
        f.write("%d %d" % (fresh_server.proc.pid, s.proc.pid))
    os.rename(ready + ".tmp", ready)
    time.sleep(120)
'''


def start_inner(tmp_path):
    """A pytest session (this directory's conftest) holding two servers;
    returns it and their pids once both answer."""
    work = tmp_path / "work"
    private = tmp_path / "tmp"
    work.mkdir()
    private.mkdir()
    (work / "test_inner.py").write_text(INNER)
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=HERE, TMPDIR=str(private), INNER_READY=str(ready))
    p = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "-p", "conftest", "--rootdir", str(work),
                          str(work / "test_inner.py")],
                         cwd=str(work), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            raise AssertionError("inner session did not start its servers:\n%s"
                                 % p.communicate()[0].decode(errors="replace"))
        time.sleep(0.05)
    return p, private, [int(x) for x in ready.read_text().split()]


def dirs(private):
    return sorted(n for n in os.listdir(private) if n.startswith(sabled.PREFIX))


def running(pid):
    return sabled._start_time(pid) is not None


def wait_gone(pids, timeout=30):
    deadline = time.monotonic() + timeout
    while any(running(pid) for pid in pids):
        assert time.monotonic() < deadline, "still running: %s" % pids
        time.sleep(0.05)


def kill_all(pids):
    """SIGKILL pids (started by this test's own subprocess) and wait."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_gone(pids)


def test_sigterm_stops_servers_and_removes_directories(tmp_path):
    p, private, pids = start_inner(tmp_path)
    try:
        assert len(dirs(private)) == 2
        p.send_signal(signal.SIGTERM)  # the session's process only, not its servers
        out = p.communicate(timeout=60)[0].decode(errors="replace")
        assert p.returncode != 0, out
        wait_gone(pids)
        assert dirs(private) == [], out
    finally:
        p.kill()
        kill_all(pids)


def test_killed_session_directories_removed_by_the_next_once_unused(tmp_path):
    p, private, pids = start_inner(tmp_path)
    left = dirs(private)
    assert len(left) == 2
    p.kill()  # runs nothing: its servers run on, in their directories
    p.communicate(timeout=30)
    try:
        assert sabled.sweep_stale(str(private)) == []  # still used
        assert dirs(private) == left
    finally:
        kill_all(pids)
    # beside them: one of a live process (this one) and one made otherwise
    mine = private / (sabled.PREFIX + "live")
    mine.mkdir()
    (mine / sabled.OWNER_FILE).write_text("%d %s" % (os.getpid(), sabled._start_time(os.getpid())))
    (private / (sabled.PREFIX + "unowned")).mkdir()
    removed = sabled.sweep_stale(str(private))
    assert sorted(os.path.basename(r) for r in removed) == left
    assert dirs(private) == [sabled.PREFIX + "live", sabled.PREFIX + "unowned"]
