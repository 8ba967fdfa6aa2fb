"""
Network faults for the replica-set fault tests (issue 25): a namespace per
member joined by a bridge, partitions and one-way drops by nftables inside
the namespaces, and pause / resume / kill of the processes it started.

    with Cluster(["n1", "n2", "n3"]) as c:
        p = c.spawn("n1", ["sabled", "--bind_ip", c.addr["n1"], ...])
        c.partition([["n1"], ["n2", "n3"]]); ...; c.heal()
        c.pause(p); ...; c.resume(p)

Layout: namespaces "<tag>-br" (holds bridge br0) and "<tag>-<member>" (eth0
with 10.250.25.<i>/24, lo up; br0 has 10.250.25.254 for clients), tag = "sblf<pid of this process>"; a veth
pair per member, created inside the namespaces, so nothing is added to the
root namespace and the addresses exist only inside these namespaces.
A fault is a set of blocked (source, destination) member pairs; each
member's table "inet sable_faults" drops input from the sources blocked
towards it, replaced in one nft transaction per change.

Must stay true:
- teardown() removes everything setup() made (processes first, by PID, then
  the namespaces, which takes the veths, the bridge and the rules with
  them); it runs on leaving the with-block, on an exception, on Ctrl-C
  (KeyboardInterrupt), on SIGTERM/SIGHUP (turned into SystemExit) and at
  exit (atexit), and is idempotent;
- only processes started by spawn() are ever signalled, by their PID;
- leftovers of a harness killed with SIGKILL are removed by
  cleanup_stale() (namespaces whose tag names a dead PID), which setup()
  calls first; `netfaults.py --cleanup-stale` does it by hand.
Needs root, iproute2 and nftables (scripts/deps.sh installs them).
"""
import atexit
import os
import signal
import subprocess
import sys
import threading
import time

PREFIX = "sblf"
SUBNET = "10.250.25"
TABLE = "sable_faults"


def _ip(*args, timeout=10):
    """Run `ip args...`; raises CalledProcessError with its stderr on failure."""
    return subprocess.run(["ip"] + list(args), check=True, capture_output=True, text=True,
                          timeout=timeout)


def kernel_state(pid):
    """Why a process outlives SIGKILL: its state and kernel stack (an
    uninterruptible wait in the kernel), for the round's report."""
    out = []
    for name in ("stat", "wchan", "stack"):
        try:
            with open("/proc/%d/%s" % (pid, name), errors="replace") as f:
                text = f.read().strip()
        except OSError as e:
            text = "unreadable: %s" % e.strerror
        if name == "stat":
            text = "state " + text.rsplit(")", 1)[-1].split()[0]
        out.append("%s: %s" % (name, text.replace("\n", " | ")))
    return "; ".join(out)


def list_namespaces():
    """Names of all network namespaces (ip netns list)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                         timeout=10).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def cleanup_stale():
    """Delete namespaces left by harnesses that died without cleaning up
    (named PREFIX<pid>-..., that pid not running).  Returns their names."""
    gone = []
    for ns in list_namespaces():
        tag = ns.split("-", 1)[0]
        if not tag.startswith(PREFIX) or not tag[len(PREFIX):].isdigit():
            continue
        pid = int(tag[len(PREFIX):])
        if pid == os.getpid() or os.path.exists("/proc/%d" % pid):
            continue
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        gone.append(ns)
    return gone


class Cluster:
    """Namespaces, links and faults for a set of members (see module doc).

    members: names (short, [a-z0-9]); addr maps each to its IPv4 address.
    """

    def __init__(self, members=("n1", "n2", "n3"), tag=None):
        if len(members) > 200:
            raise ValueError("at most 200 members")
        self.members = list(members)
        self.tag = tag or "%s%d" % (PREFIX, os.getpid())
        self.ns = {m: "%s-%s" % (self.tag, m) for m in self.members}
        self.bridge_ns = "%s-br" % self.tag
        self.addr = {m: "%s.%d" % (SUBNET, i + 1) for i, m in enumerate(self.members)}
        self.client_addr = "%s.254" % SUBNET   # br0's, for clients run in the bridge namespace
        self.blocked = set()      # (source, destination) member pairs
        self.log = []             # (monotonic time, description) of every fault change
        self._created = []        # namespaces, in creation order
        self._procs = {}          # pid -> Popen, everything spawn() started
        self._old_handlers = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- life

    def __enter__(self):
        self.setup()
        return self

    def __exit__(self, *exc):
        self.teardown()
        return False

    def setup(self):
        """Create the namespaces, bridge, links and empty fault tables."""
        cleanup_stale()
        atexit.register(self.teardown)
        self._install_signal_handlers()
        try:
            self._add_ns(self.bridge_ns)
            _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.bridge_ns, "addr", "add", self.client_addr + "/24", "dev", "br0")
            _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
            for i, m in enumerate(self.members):
                ns, peer = self.ns[m], "v%d" % i
                self._add_ns(ns)
                _ip("-n", self.bridge_ns, "link", "add", peer, "type", "veth",
                    "peer", "name", "eth0", "netns", ns)
                _ip("-n", self.bridge_ns, "link", "set", peer, "master", "br0", "up")
                _ip("-n", ns, "addr", "add", self.addr[m] + "/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
            self._apply()
        except BaseException:
            self.teardown()
            raise

    def _add_ns(self, ns):
        _ip("netns", "add", ns)
        self._created.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def teardown(self):
        """Kill what spawn() started, delete the namespaces.  Idempotent;
        problems are printed, not raised (it runs from handlers).  Ctrl-C
        and SIGTERM wait until it is done."""
        main = threading.current_thread() is threading.main_thread()
        sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs) if main else None
        try:
            self._teardown()
        finally:
            if main:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def _teardown(self):
        with self._lock:
            for pid, p in list(self._procs.items()):
                if p.poll() is None:
                    try:
                        os.kill(pid, signal.SIGCONT)   # a stopped process dies slowly otherwise
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        print("netfaults: pid %d did not die (%s)" % (pid, kernel_state(pid)),
                              file=sys.stderr)
                self._procs.pop(pid, None)
            for ns in reversed(self._created):
                r = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True,
                                   timeout=10)
                if r.returncode and ns in list_namespaces():
                    print("netfaults: cannot delete %s: %s" % (ns, r.stderr.strip()),
                          file=sys.stderr)
            self._created = []
            self._restore_signal_handlers()

    def _install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return

        def stop(signum, frame):
            raise SystemExit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                self._old_handlers[sig] = signal.signal(sig, stop)

    def _restore_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, h in self._old_handlers.items():
            signal.signal(sig, h)
        self._old_handlers = {}

    # ----------------------------------------------------------- processes

    def run(self, member, argv, timeout, **kw):
        """Run argv inside member's namespace to completion (CompletedProcess,
        text output captured unless kw says otherwise)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        return subprocess.run(["ip", "netns", "exec", self.ns[member]] + list(argv),
                              timeout=timeout, **kw)

    def spawn_client(self, argv, **kw):
        """Start argv in the bridge namespace, where client_addr reaches every
        member (faults never block it: clients see both sides, as Jepsen's
        control node does).  Teardown kills it."""
        p = subprocess.Popen(["ip", "netns", "exec", self.bridge_ns] + list(argv), **kw)
        self._procs[p.pid] = p
        return p

    def spawn(self, member, argv, **kw):
        """Start argv inside member's namespace (`ip netns exec` execs it, so
        the Popen's pid is the program's).  Teardown kills it."""
        p = subprocess.Popen(["ip", "netns", "exec", self.ns[member]] + list(argv), **kw)
        self._procs[p.pid] = p
        return p

    def _ours(self, proc):
        pid = proc if isinstance(proc, int) else proc.pid
        p = self._procs.get(pid)
        if p is None:
            raise ValueError("pid %d was not started by this cluster" % pid)
        if p.poll() is not None:
            raise ProcessLookupError("pid %d has exited (%s)" % (pid, p.returncode))
        return pid

    def pause(self, proc):
        """SIGSTOP a process spawn() started (Popen or pid)."""
        os.kill(self._ours(proc), signal.SIGSTOP)
        self._note("pause %s" % proc_pid(proc))

    def resume(self, proc):
        """SIGCONT a process spawn() started."""
        os.kill(self._ours(proc), signal.SIGCONT)
        self._note("resume %s" % proc_pid(proc))

    def kill(self, proc, sig=signal.SIGKILL, timeout=10):
        """Send sig (default SIGKILL) to a process spawn() started and, for
        SIGKILL/SIGTERM, wait for it; returns its exit status or None."""
        pid = self._ours(proc)
        os.kill(pid, sig)
        self._note("signal %d to %d" % (sig, pid))
        if sig in (signal.SIGKILL, signal.SIGTERM):
            return self._procs[pid].wait(timeout=timeout)
        return None

    # -------------------------------------------------------------- faults

    def partition(self, groups):
        """Members talk only within their group; members not named form one
        more group.  Replaces the current faults."""
        groups = [list(g) for g in groups]
        rest = [m for m in self.members if not any(m in g for g in groups)]
        if rest:
            groups.append(rest)
        where = {}
        for gi, g in enumerate(groups):
            for m in g:
                self._check(m)
                where[m] = gi
        self.blocked = {(a, b) for a in self.members for b in self.members
                        if a != b and where[a] != where[b]}
        self._apply("partition %s" % groups)

    def isolate(self, member):
        """Cut one member off from all others (both directions)."""
        self.partition([[member]])

    def bridge(self, middle, side_a=None, side_b=None):
        """middle sees both sides; the sides do not see each other.  Sides
        default to the other members split in two halves."""
        self._check(middle)
        others = [m for m in self.members if m != middle]
        if side_a is None:
            side_a = others[:len(others) // 2]
        if side_b is None:
            side_b = [m for m in others if m not in side_a]
        self.blocked = {(a, b) for a in side_a for b in side_b}
        self.blocked |= {(b, a) for a, b in self.blocked}
        self._apply("bridge via %s: %s | %s" % (middle, side_a, side_b))

    def drop(self, src, dst):
        """One-way: packets from src to dst are dropped (dst to src pass).
        Adds to the current faults.  TCP needs both directions, so a TCP
        connection between them fails either way; datagrams show the
        direction."""
        self._check(src)
        self._check(dst)
        self.blocked.add((src, dst))
        self._apply("drop %s -> %s" % (src, dst))

    def heal(self):
        """Remove every network fault."""
        self.blocked = set()
        self._apply("heal")

    def _check(self, m):
        if m not in self.ns:
            raise ValueError("unknown member %r" % m)

    def _note(self, what):
        self.log.append((time.monotonic(), what))

    def _apply(self, what=None):
        for m in self.members:
            srcs = sorted(self.addr[a] for a, b in self.blocked if b == m)
            rule = "ip saddr { %s } drop" % ", ".join(srcs) if srcs else ""
            script = ("table inet %s\ndelete table inet %s\n"
                      "table inet %s {\n  chain input {\n"
                      "    type filter hook input priority filter; policy accept;\n"
                      "    %s\n  }\n}\n" % (TABLE, TABLE, TABLE, rule))
            subprocess.run(["ip", "netns", "exec", self.ns[m], "nft", "-f", "-"],
                           input=script, text=True, check=True, capture_output=True,
                           timeout=10)
        if what:
            self._note(what)

    def rules(self, member):
        """The nft ruleset inside member's namespace (for reports)."""
        return self.run(member, ["nft", "list", "ruleset"], timeout=10).stdout


def proc_pid(proc):
    return proc if isinstance(proc, int) else proc.pid


if __name__ == "__main__":
    if sys.argv[1:] == ["--cleanup-stale"]:
        for ns in cleanup_stale():
            print("deleted", ns)
    else:
        print("usage: netfaults.py --cleanup-stale", file=sys.stderr)
        sys.exit(2)
