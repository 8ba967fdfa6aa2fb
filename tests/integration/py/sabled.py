"""
sabled.py: start and stop a real sabled for integration tests.

Each Sabled owns a temporary directory (tempfile.mkdtemp, sabled-it-*)
holding the data directory (dbpath), the server log (sabled.log) and the
captured stdout/stderr.  It listens on 127.0.0.1 only, on a free port chosen
at start.  The binary is $SABLED, or build/sabled relative to the repo root.

What must stay true: whatever a test does, no process keeps running and no
directory stays behind (a dbpath is about 300 MB: WiredTiger's journal file
and its two preallocated successors, 100 MB each).  The fixtures call
cleanup() in a finally; what a test did not clean up is cleaned up when the
process exits (atexit: a normal end, a failure, Ctrl-C, and SIGTERM once
exit_cleanly_on_sigterm() made it a KeyboardInterrupt, as conftest.py does).
A process killed outright (SIGKILL: kill -9, a ctest TIMEOUT) runs nothing,
so each directory names its creator (OWNER_FILE) and the first Sabled a
later process creates removes the directories whose creator is gone and that
no process still uses (sweep_stale).  Nothing else is removed: several test
runs may share /tmp.
"""

import atexit
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import wire

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "faults"))
import netfaults  # noqa: E402  (kernel_state)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def sabled_path():
    """The sabled binary under test: $SABLED or <repo>/build/sabled."""
    return os.environ.get("SABLED") or os.path.join(REPO, "build", "sabled")


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _raise_nofile():
    """Child pre-exec: allow as many descriptors as the hard limit permits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass


def run_sabled(args, timeout=20):
    """Run sabled with args to completion (for --version, bad options ...).
    Returns the CompletedProcess (stdout/stderr as text)."""
    return subprocess.run([sabled_path()] + list(args), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


class SabledError(RuntimeError):
    pass


# -- what this process created, and what dead processes left -------------------

PREFIX = "sabled-it-"
OWNER_FILE = ".sabled-it-owner"  # in each directory: "PID STARTTIME" of its creator

_live = {}  # id(Sabled) -> Sabled, from its creation until cleanup()
_swept = [False]


def _start_time(pid):
    """pid's start time (clock ticks after boot, /proc/PID/stat), None when
    no such process runs (none, or a zombie nobody reaped yet)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def _creator_alive(root):
    """False only when root's owner file names a process that is gone (a pid
    reused since has another start time); True without a readable one (a
    directory being created, or not made here: not ours to judge)."""
    try:
        with open(os.path.join(root, OWNER_FILE)) as f:
            pid, start = f.read().split()
        return _start_time(int(pid)) == start
    except (OSError, ValueError):
        return True


def _in_use(root, cwds):
    """Some process works in root (sabled runs there) or holds its dbpath's lock."""
    if any(c == root or c.startswith(root + os.sep) for c in cwds):
        return True
    try:
        with open(os.path.join(root, "db", "mongod.lock")) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return False
    return pid > 0 and _start_time(pid) is not None


def _working_dirs():
    out = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                out.add(os.readlink("/proc/%s/cwd" % pid))
            except OSError:
                pass
    return out


def sweep_stale(tmp=None):
    """Remove the sabled-it-* directories in tmp (default: tempfile's) left by
    processes that are gone and that no process uses; returns their paths."""
    tmp = os.path.realpath(tmp or tempfile.gettempdir())
    try:
        names = sorted(n for n in os.listdir(tmp) if n.startswith(PREFIX))
    except OSError:
        return []
    removed, cwds = [], None
    for n in names:
        root = os.path.join(tmp, n)
        if _creator_alive(root):
            continue
        if cwds is None:
            cwds = _working_dirs()
        if not _in_use(root, cwds):
            shutil.rmtree(root, ignore_errors=True)
            removed.append(root)
    return removed


def cleanup_all():
    """cleanup() every Sabled this process created and did not clean up."""
    for s in list(_live.values()):
        s.cleanup()


def _at_exit(pid=os.getpid()):
    if os.getpid() == pid:  # not in a forked child that exits normally
        cleanup_all()


atexit.register(_at_exit)


def exit_cleanly_on_sigterm():
    """Make SIGTERM (kill PID, timeout(1), a runner giving up) end this process
    as Ctrl-C does, a KeyboardInterrupt in the main thread: finally blocks,
    pytest's fixture teardowns and atexit then remove what it started.  Any
    further SIGTERM is ignored, so it cannot cut that short (timeout(1) sends
    one to the process and one to its group); SIGKILL still ends it at once."""
    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt("SIGTERM")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_term)


class Sabled:
    """One sabled process with its own temporary dbpath and log.

    start(extra_args) launches it and waits until it answers a hello;
    stop() sends SIGTERM and returns the exit code; kill9() kills it hard;
    restart() starts it again on the same dbpath and port.
    """

    def __init__(self, use_logpath=True):
        if not _swept[0]:
            _swept[0] = True
            sweep_stale()
        self.root = tempfile.mkdtemp(prefix=PREFIX)
        with open(os.path.join(self.root, OWNER_FILE), "w") as f:
            f.write("%d %s\n" % (os.getpid(), _start_time(os.getpid())))
        _live[id(self)] = self
        self.dbpath = os.path.join(self.root, "db")
        os.mkdir(self.dbpath)
        self.logpath = os.path.join(self.root, "sabled.log") if use_logpath else None
        self.port = None
        self.proc = None
        self.extra_args = []
        self._out = None
        self._err = None

    # -- life cycle --------------------------------------------------------

    def command_line(self):
        args = [sabled_path(), "--port", str(self.port), "--bind_ip", "127.0.0.1",
                "--dbpath", self.dbpath]
        # The Unix-domain socket (on by default, as mongod's) goes in the
        # server's own directory rather than /tmp: a kill -9 leaves no
        # /tmp/mongodb-<port>.sock behind, cleanup() removes it with the rest.
        # (A socket path holds at most 107 bytes; TMPDIR could be longer.)
        if len(self.socket_path(self.port)) < 100:
            args += ["--unixSocketPrefix", self.root]
        if self.logpath:
            args += ["--logpath", self.logpath]
        return args + list(self.extra_args)

    def start(self, extra_args=(), port=None, wait=True, timeout=30):
        """Launch sabled (extra_args appended to the standard options) and,
        when wait, block until it answers hello.  Raises SabledError with the
        tail of its output when it exits or does not answer in time."""
        if self.proc is not None and self.proc.poll() is None:
            raise SabledError("already running")
        self.extra_args = list(extra_args)
        attempts = 3 if port is None else 1
        for attempt in range(attempts):
            self.port = port or free_port()
            self._spawn(self.command_line())
            if not wait:
                return self
            try:
                self.wait_ready(timeout)
                return self
            except SabledError:
                # A port race (someone took the port in between) is the only
                # reason to retry; anything else is reported at once.
                text = self.output()
                if attempt + 1 < attempts and "in use" in text.lower() and self.proc.poll() is not None:
                    continue
                self._kill_quietly()
                raise
        return self

    def start_raw(self, args):
        """Launch sabled with exactly args (no standard options); no waiting."""
        self._spawn([sabled_path()] + list(args))
        return self.proc

    def _spawn(self, argv):
        self._out = open(os.path.join(self.root, "stdout.txt"), "ab")
        self._err = open(os.path.join(self.root, "stderr.txt"), "ab")
        if not os.path.exists(argv[0]):
            raise SabledError("sabled binary not found at %s (build it with scripts/build.sh "
                              "or set SABLED)" % argv[0])
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=self._err,
                                     stdin=subprocess.DEVNULL, preexec_fn=_raise_nofile,
                                     cwd=self.root)

    def wait_ready(self, timeout=30, port=None):
        """Poll until a raw hello on the port gets ok:1."""
        port = port or self.port
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise SabledError("sabled exited with %s before answering:\n%s"
                                  % (self.proc.returncode, self.output()[-4000:]))
            try:
                with wire.connect(port, timeout=2) as s:
                    reply = wire.command(s, {"hello": 1}, "admin")
                    if reply.get("ok") == 1:
                        return
                    last = reply
            except OSError as e:
                last = e
            except wire.WireError as e:
                last = e
            time.sleep(0.05)
        raise SabledError("sabled did not answer hello on port %s within %ss (last: %r)\n%s"
                          % (port, timeout, last, self.output()[-4000:]))

    def is_running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def pause(self, timeout=10):
        """SIGSTOP, then wait until every thread of the process has stopped.
        kill() returns before the stop takes effect: one thread takes the
        signal and stops the others, and on a loaded machine the others run
        on meanwhile (a secondary sent SIGSTOP still took its primary's next
        batch and asked for more).  resume() is SIGCONT."""
        self.proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while not self._all_threads_stopped():
            if time.monotonic() > deadline:
                raise SabledError("sabled (pid %d) did not stop within %ss of SIGSTOP"
                                  % (self.proc.pid, timeout))
            time.sleep(0.01)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def _all_threads_stopped(self):
        task = "/proc/%d/task" % self.proc.pid
        try:
            for tid in os.listdir(task):
                with open(os.path.join(task, tid, "stat")) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]  # after "(comm)"
                if state not in ("T", "t", "Z", "X"):
                    return False
        except FileNotFoundError:  # a thread ended while we looked: look again
            return False
        return True

    def wait(self, timeout=30):
        """Wait for the process to exit; returns its exit code (raises on timeout)."""
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout=30):
        """SIGTERM and wait; returns the exit code (None if it was not running).
        Kills it with SIGKILL if it does not exit in time and raises."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill_quietly()
                raise SabledError("sabled did not exit within %ss of SIGTERM" % timeout)
        self._close_files()
        return self.proc.returncode

    def kill9(self):
        """SIGKILL and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self._reap_killed()
        self._close_files()

    def _reap_killed(self):
        """Wait for a process sent SIGKILL.  It runs no more code of its own,
        but it ends only when each of its threads leaves the kernel, and one
        in an uninterruptible wait (an fsync behind a busy disk, say) stays:
        in CI one outlived the 30 s this wait used to give.  Past 10 s its
        state, wchan and kernel stack go to stderr; it gives up after 180 s."""
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sys.stderr.write("sabled %d outlives SIGKILL: %s\n" % (
                self.proc.pid, netfaults.kernel_state(self.proc.pid)))
            self.proc.wait(timeout=170)

    def restart(self, extra_args=None, timeout=30):
        """Stop (if running) and start again on the same dbpath and port."""
        if self.is_running():
            self.stop()
        args = self.extra_args if extra_args is None else extra_args
        return self.start(args, port=self.port, timeout=timeout)

    def _kill_quietly(self):
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self._reap_killed()
        except Exception:
            pass
        self._close_files()

    def _close_files(self):
        for f in (self._out, self._err):
            if f is not None:
                f.close()
        self._out = self._err = None

    def cleanup(self):
        """Kill whatever is still running and remove the temporary directory."""
        self._kill_quietly()
        shutil.rmtree(self.root, ignore_errors=True)
        _live.pop(id(self), None)

    # -- inspection -------------------------------------------------------

    def socket_path(self, port=None):
        """The Unix-domain socket command_line() makes the server listen on."""
        return os.path.join(self.root, "mongodb-%d.sock" % (port or self.port))

    def uri(self, **opts):
        q = "&".join("%s=%s" % kv for kv in opts.items())
        return "mongodb://127.0.0.1:%d/%s" % (self.port, ("?" + q) if q else "")

    def client(self, **kwargs):
        """A pymongo MongoClient connected directly to this server."""
        import pymongo
        kwargs.setdefault("serverSelectionTimeoutMS", 10000)
        kwargs.setdefault("directConnection", True)
        return pymongo.MongoClient("127.0.0.1", self.port, **kwargs)

    def output(self):
        """stdout + stderr + log file, as text (for error messages)."""
        parts = []
        for name in ("stdout.txt", "stderr.txt", "sabled.log"):
            p = os.path.join(self.root, name)
            if os.path.exists(p):
                with open(p, "rb") as f:
                    parts.append(f.read().decode("utf-8", "replace"))
        return "\n".join(parts)

    def log_text(self):
        path = self.logpath or os.path.join(self.root, "stdout.txt")
        if not os.path.exists(path):
            return ""
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def log_lines(self):
        """The server log as a list of parsed JSON objects (non-JSON lines skipped)."""
        out = []
        for line in self.log_text().splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()


@contextlib.contextmanager
def set_members(n, args=()):
    """n sableds started with --replSet rs0 and test commands, not yet
    initiated; afterwards each is continued (if a test paused it) and
    cleaned up."""
    members = []
    try:
        for _ in range(n):
            s = Sabled()
            members.append(s)  # cleaned up below even when its start fails
            s.start(["--replSet", "rs0", "--oplogSizeMB", "16",
                     "--setParameter", "enableTestCommands=1", *args])
        yield members
    finally:
        for m in members:
            if m.is_running():
                m.signal(signal.SIGCONT)
        for m in members:
            m.cleanup()


def trim_oplog(c, filler, others=(), timeout=30):
    """Make a replica set's oplogs drop their oldest entries down to their
    size.  A member keeps every entry after its last stable checkpoint (a
    restart replays them; mongod keeps the oplog needed for crash recovery
    too, past its size if need be): checkpoint (fsync) every member until
    its checkpoint is at the newest entry, then write into the collection
    filler until every oplog is within its size (an eviction deletes at most
    1,000 entries; a secondary evicts as it applies the writes).  c: a
    direct client of the primary; others: direct clients of the members
    that must be trimmed too (a member a third may sync from)."""
    members = [c, *others]
    newest = c.local["oplog.rs"].find({}, {"ts": 1}).sort("$natural", -1).limit(1)[0]["ts"]
    end = time.time() + timeout
    for m in members:
        while True:
            m.admin.command("fsync")
            if m.admin.command("replSetGetStatus")["lastStableRecoveryTimestamp"] >= newest:
                break
            assert time.time() < end, "no checkpoint reached the newest oplog entry"
            time.sleep(0.1)
    for _ in range(1000):
        filler.insert_one({"trim_oplog": 1})
        sts = [m.local.command("collStats", "oplog.rs") for m in members]
        if all(st["size"] <= st["maxSize"] for st in sts):
            return
        time.sleep(0.01)
    raise AssertionError("an oplog stays past its size: %r" % sts)


@contextlib.contextmanager
def one_member_set(args=(), **client_kwargs):
    """A one-member replica set rs0 (what change streams and the oplog need):
    a sabled started with --replSet rs0 and args, initiated with the default
    config; yields (sabled, client) once the member is a writable primary
    (within 20 s), then closes the client and cleans up.  client_kwargs go to
    the pymongo.MongoClient (a direct connection)."""
    import pymongo
    s = Sabled()
    try:
        s.start(["--replSet", "rs0", *args])
        c = pymongo.MongoClient("127.0.0.1", s.port, directConnection=True, **client_kwargs)
        try:
            c.admin.command("replSetInitiate")
            end = time.time() + 20
            while not c.admin.command("hello").get("isWritablePrimary"):
                assert time.time() < end, "no primary"
                time.sleep(0.05)
            yield s, c
        finally:
            c.close()
    finally:
        s.cleanup()
