"""
Fault-test rounds against real replica sets (issue 25).

    /usr/bin/python3 tests/faults/harness.py --workload register --rounds 3 \
        [--seed S] [--duration 30] [--mode auto|netns|loopback] [--out DIR]

A round: start three sabled members (fresh dbpaths), initiate a set,
start a workload (workload.py: several pymongo client threads, w:majority),
inject faults for --duration seconds, heal everything, wait for the members
to converge, read the final state from every member, then check:
  - the history with the workload's checker (check_register / check_set /
    check_append);
  - convergence: dbHash equal on every member; oplogs equal up to the
    primary's commit point; exactly one primary and one applied optime.
Output per round: seed, faults and when (seconds from the round's start),
operations by outcome, failovers and how long writes were unavailable,
verdicts, and for a failure the checker's minimal failing history.  Files
(history.jsonl, report.json, member logs) stay in --out/round-N.

Modes: netns (needs root, ip, nft: netfaults.py puts each member in its own
network namespace; faults: partitions of every kind, kill -9, pauses) and
loopback (members on 127.0.0.1; faults: kill -9 and pauses only, said so
in the output).  auto takes netns when it works (nsprobe.py decides).

The fault schedule comes only from the round's seed (round seed = seed +
round number), so a failing round is replayed with --seed S --rounds 1
(timings, and so histories, differ from run to run: the faults and their
order do not).

Must stay true: everything a round starts (processes, namespaces) is gone
when the round ends, also on an exception or Ctrl-C (netfaults.Cluster
teardown; the loopback members are killed by PID in a finally).
"""
import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import check_append  # noqa: E402
import check_bank  # noqa: E402
import check_register  # noqa: E402
import check_set  # noqa: E402
import workload as workload_mod  # noqa: E402
from history import outcome_counts, pair, read_events  # noqa: E402

MEMBERS = ["n1", "n2", "n3"]
PY = "/usr/bin/python3"
WRITES = {"write", "cas", "add", "append", "transfer"}
KINDS = ["kill", "kill-primary", "pause", "pause-primary", "partition-halves", "isolate-primary",
         "bridge", "one-way", "disk-full", "disk-full-primary", "reconfig-remove",
         "reconfig-priorities", "reconfig-remove-primary"]   # the last only in --faults
NET_KINDS = {"partition-halves", "isolate-primary", "bridge", "one-way"}
SKIP = 77   # exit status: this machine cannot run the faults asked for (ctest SKIP_RETURN_CODE)
HEALS = {"heal", "resume", "restart", "disk-freed", "reconfig-restore", "fsync", "before-heal"}   # not faults


def sabled_path():
    p = os.environ.get("SABLED") or os.path.join(HERE, "..", "..", "build", "sabled")
    return os.path.abspath(p)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def netns_available():
    """(True, "") when namespaces, veth and nft work here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "not root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return False, "%s not installed" % tool
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    if r.returncode:
        return False, "ip netns unavailable: %s" % r.stderr.strip()
    return True, ""


# With disk-full faults n3 runs without sabled's free-space guard, so a full
# disk there meets WiredTiger's own ENOSPC (n1 and n2 refuse writes first).
MEMBER_ARGS = {}
DISK_FULL_ARGS = {"n3": ["--setParameter", "minFreeDiskSpaceMB=0"]}


def dbpath(rdir, m):
    """Member m's dbpath: on its own filesystem (disk-full faults) when
    rdir/m/fs is a mount point, else rdir/m/db."""
    fs = os.path.join(rdir, m, "fs")
    return os.path.join(fs, "db") if os.path.ismount(fs) else os.path.join(rdir, m, "db")


def open_stderr(rdir, m):
    """Member m's stderr file (appended across restarts): what a process
    prints as it dies (an assertion, a sanitizer report) is not in its log."""
    return open(os.path.join(rdir, m, "stderr.log"), "ab")


class Disks:
    """A small tmpfs per member under rdir/m/fs for its dbpath (disk-full
    faults; needs root).  fill() takes all but `leave` bytes of a member's
    filesystem with one preallocated file, free() deletes it; unmounted on
    exit, also after an exception."""

    def __init__(self, rdir, mb):
        self.rdir, self.mb, self.mounted = rdir, mb, []

    def __enter__(self):
        try:
            for m in MEMBERS:
                fs = os.path.join(self.rdir, m, "fs")
                os.makedirs(fs, exist_ok=True)
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm,mode=0755" % self.mb,
                                "tmpfs", fs], check=True, capture_output=True, timeout=30)
                self.mounted.append(fs)
        except (OSError, subprocess.SubprocessError):
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for fs in self.mounted:
            subprocess.run(["umount", "-l", fs], capture_output=True, timeout=30)
        self.mounted = []

    def filler(self, m):
        return os.path.join(self.rdir, m, "fs", "filler")

    def fill(self, m, leave):
        """Leave `leave` bytes free on m's filesystem; returns the bytes taken."""
        vfs = os.statvfs(os.path.join(self.rdir, m, "fs"))
        n = max(0, vfs.f_bavail * vfs.f_frsize - leave)
        fd = os.open(self.filler(m), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            if n:
                os.posix_fallocate(fd, 0, n)
        except OSError:
            pass   # took what there was
        finally:
            os.close(fd)
        return n

    def free(self, m):
        try:
            os.unlink(self.filler(m))
        except FileNotFoundError:
            pass


# ------------------------------------------------------------------ backends

class Loopback:
    """Members on 127.0.0.1, each on a free port; kill and pause faults only."""
    partitions = False
    name = "loopback"

    def __init__(self, dirpath):
        self.dir = dirpath
        self.ports = {m: free_port() for m in MEMBERS}
        self.hosts = {m: "127.0.0.1:%d" % self.ports[m] for m in MEMBERS}
        self.procs = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.teardown()

    def start(self, m):
        db = dbpath(self.dir, m)
        os.makedirs(db, exist_ok=True)
        # --nounixsocket (here and in Netns): the members need no Unix-domain
        # socket; a kill -9 would leave /tmp/mongodb-<port>.sock behind, and
        # namespaced members share /tmp and port 27017.
        argv = [sabled_path(), "--dbpath", db, "--port", str(self.ports[m]), "--bind_ip",
                "127.0.0.1", "--replSet", "rs0", "--oplogSizeMB", "64", "--logpath",
                os.path.join(self.dir, m, "sabled.log"), "--logappend",
                "--nounixsocket"] + MEMBER_ARGS.get(m, [])
        with open_stderr(self.dir, m) as err:
            self.procs[m] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)

    def pid(self, m):
        p = self.procs.get(m)
        return p.pid if p is not None and p.poll() is None else None

    def signal(self, m, sig):
        pid = self.pid(m)
        if pid is None:
            return False
        os.kill(pid, sig)
        if sig == signal.SIGKILL:
            self.procs[m].wait(timeout=20)
        return True

    def spawn_client(self, argv, **kw):
        return subprocess.Popen(argv, **kw)

    def partition(self, groups):
        raise NotImplementedError

    def heal(self):
        pass

    def teardown(self):
        for m, p in self.procs.items():
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=20)


class Netns:
    """Each member in its own network namespace (netfaults.Cluster)."""
    partitions = True
    name = "netns"

    def __init__(self, dirpath):
        import netfaults
        self.dir = dirpath
        self.cluster = netfaults.Cluster(MEMBERS)
        self.hosts = {m: "%s:27017" % self.cluster.addr[m] for m in MEMBERS}
        self.procs = {}

    def __enter__(self):
        self.cluster.setup()
        return self

    def __exit__(self, *exc):
        self.teardown()

    def start(self, m):
        db = dbpath(self.dir, m)
        os.makedirs(db, exist_ok=True)
        argv = [sabled_path(), "--dbpath", db, "--port", "27017", "--bind_ip",
                self.cluster.addr[m], "--replSet", "rs0", "--oplogSizeMB", "64", "--logpath",
                os.path.join(self.dir, m, "sabled.log"), "--logappend",
                "--nounixsocket"] + MEMBER_ARGS.get(m, [])
        with open_stderr(self.dir, m) as err:
            self.procs[m] = self.cluster.spawn(m, argv, stdout=subprocess.DEVNULL, stderr=err)

    def pid(self, m):
        p = self.procs.get(m)
        return p.pid if p is not None and p.poll() is None else None

    def signal(self, m, sig):
        if self.pid(m) is None:
            return False
        if sig == signal.SIGSTOP:
            self.cluster.pause(self.procs[m])
        elif sig == signal.SIGCONT:
            self.cluster.resume(self.procs[m])
        else:
            self.cluster.kill(self.procs[m], sig, timeout=20)
        return True

    def spawn_client(self, argv, **kw):
        return self.cluster.spawn_client(argv, **kw)

    def partition(self, groups):
        self.cluster.partition(groups)

    def bridge(self, middle):
        self.cluster.bridge(middle)

    def drop(self, src, dst):
        self.cluster.drop(src, dst)

    def heal(self):
        self.cluster.heal()

    def net_faulty(self):
        return bool(self.cluster.blocked)

    def teardown(self):
        self.cluster.teardown()


# ------------------------------------------------------------------- a round

class Agent:
    """The workload process (workload.py), driven over its stdin/stdout."""

    def __init__(self, backend, workload, seed, history, args):
        hosts = ",".join("%s=%s" % (m, backend.hosts[m]) for m in MEMBERS)
        argv = [PY, os.path.join(HERE, "workload.py"), "--workload", workload, "--hosts", hosts,
                "--seed", str(seed), "--threads", str(args.threads), "--out", history,
                "--election-timeout-ms", str(args.election_timeout_ms),
                "--read-concern", args.read_concern or
                ("linearizable" if workload == "register" else "majority")]
        self.log = open(os.path.join(os.path.dirname(history), "workload.log"), "w")
        self.p = backend.spawn_client(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self.log, text=True, bufsize=1)

    def call(self, cmd, **kw):
        self.p.stdin.write(json.dumps(dict(kw, cmd=cmd)) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("workload process exited (%s)" % self.p.poll())
        out = json.loads(line)
        if "error" in out:
            raise RuntimeError("workload %s: %s" % (cmd, out["error"]))
        return out

    def close(self):
        try:
            self.p.stdin.write('{"cmd": "exit"}\n')
            self.p.stdin.flush()
            self.p.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
        self.log.close()


class Nemesis:
    """Chooses and applies faults from a seeded generator; every fault is
    undone by heal_all().  events: nemesis history events."""

    def __init__(self, backend, agent, rng, t0, disks=None, reconfig=False):
        self.b, self.agent, self.rng, self.t0 = backend, agent, rng, t0
        self.events, self.faults = [], []
        self.paused, self.dead, self.full = set(), set(), set()
        self.disks, self.reconfigured = disks, False
        kinds = ["kill", "kill-primary", "pause", "pause-primary"]
        if backend.partitions:
            kinds += ["partition-halves", "isolate-primary", "bridge", "one-way"] * 2
        # opt-in kinds come last, so the schedules of rounds without them
        # (and of every seed recorded before they existed) stay as they were
        if disks is not None:
            kinds += ["disk-full", "disk-full-primary"]
        if reconfig:
            kinds += ["reconfig-remove", "reconfig-priorities"] * 2
        self.kinds = kinds

    def note(self, f, value):
        t = time.monotonic_ns()
        self.events.append({"process": "nemesis", "type": "info", "f": f, "value": value,
                            "time": t})
        print("  %6.1fs %s %s" % (time.monotonic() - self.t0, f, value), flush=True)

    def primary(self):
        try:
            return self.agent.call("status").get("primary")
        except RuntimeError:
            return None

    def inject(self, kind=None):
        """Apply one fault (kind, else one chosen from the seed); returns its kind."""
        kind = kind or self.rng.choice(self.kinds)
        if kind not in KINDS:
            raise ValueError("unknown fault %r (known: %s)" % (kind, ", ".join(KINDS)))
        others = sorted(set(MEMBERS) - self.dead - self.paused)
        target = self.rng.choice(MEMBERS)
        if kind.endswith("-primary"):
            target = self.primary() or target
        if kind.startswith("kill"):
            if self.b.signal(target, signal.SIGKILL):
                self.dead.add(target)
                self.note(kind, target)
        elif kind.startswith("pause"):
            if target not in self.dead and self.b.signal(target, signal.SIGSTOP):
                self.paused.add(target)
                self.note(kind, target)
        elif kind == "partition-halves":
            ms = MEMBERS[:]
            self.rng.shuffle(ms)
            groups = [ms[:1], ms[1:]]
            self.b.partition(groups)
            self.note(kind, groups)
        elif kind == "isolate-primary":
            self.b.partition([[target]])
            self.note(kind, target)
        elif kind == "bridge":
            self.b.bridge(target)
            self.note(kind, target)
        elif kind == "one-way":
            src = target
            dst = self.rng.choice([m for m in MEMBERS if m != src])
            self.b.drop(src, dst)
            self.note(kind, "%s -> %s" % (src, dst))
        elif kind.startswith("disk-full"):
            # all but 0 bytes (WiredTiger's own writes fail) or 64 MB (below
            # sabled's 200 MB minFreeDiskSpaceMB: its guard refuses writes)
            leave = self.rng.choice([0, 64 << 20])
            if self.disks is not None and target not in self.full:
                self.disks.fill(target, leave)
                self.full.add(target)
                self.note(kind, "%s (%d MB left)" % (target, leave >> 20))
                # a checkpoint now, not up to 60 s later: writes to the data
                # files, not only to the preallocated journal
                try:
                    out = self.agent.call("fsync", member=target)
                except RuntimeError as e:
                    out = {"error": str(e)}
                self.note("fsync", "%s: %s" % (target, out.get("error") or "ok"))
        elif kind.startswith("reconfig"):
            self.reconfig(kind, target)
        del others
        self.faults.append(kind)
        return kind

    def reconfig(self, kind, target):
        """replSetReconfig through whichever member is primary now: remove
        target (one member at most is out at a time) or give every member a
        priority from 0 to 3 (at least one above 0).  Refusals (no primary,
        a member not electable, a reconfig already in progress) are noted."""
        if kind.startswith("reconfig-remove"):
            args = {"remove": target}
        else:
            prio = {m: self.rng.randint(0, 3) for m in MEMBERS}
            if not any(prio.values()):
                prio[target] = 1
            args = {"priorities": prio}
        try:
            out = self.agent.call("reconfig", timeout_s=10, **args)
        except RuntimeError as e:
            out = {"error": str(e)}
        self.reconfigured = True
        self.note(kind, dict(args, result=out.get("error") or "ok v%s" % out.get("version")))

    def heal_all(self):
        """Undo every fault: paused resumed, filled disks emptied and their
        members restarted, dead restarted, network healed, every member back
        in the configuration with priority 1.  First the members' states
        as they stand under the faults are noted ("before-heal")."""
        if self.paused or self.dead or self.full or (self.b.partitions and self.b.net_faulty()):
            try:
                self.note("before-heal", self.agent.call("status").get("states"))
            except RuntimeError as e:
                self.note("before-heal", {"error": str(e)})
        for m in sorted(self.paused):
            self.b.signal(m, signal.SIGCONT)
            self.note("resume", m)
        self.paused = set()
        for m in sorted(self.full):
            self.disks.free(m)
            self.note("disk-freed", m)
            if m not in self.dead:   # a member is restarted after a full disk
                self.b.signal(m, signal.SIGKILL)
                self.dead.add(m)
        self.full = set()
        for m in sorted(self.dead):
            self.b.start(m)
            self.note("restart", m)
        self.dead = set()
        if self.b.partitions and self.b.net_faulty():
            self.b.heal()
            self.note("heal", None)
        if self.reconfigured:
            try:
                out = self.agent.call("reconfig", timeout_s=60, restore=True)
            except RuntimeError as e:
                out = {"error": str(e)}
            self.note("reconfig-restore", out.get("error") or "ok v%s" % out.get("version"))
            self.reconfigured = bool(out.get("error"))


# Faults after which another member must be primary before the heal (--check-failover).
FAILOVER_KINDS = ("kill-primary", "pause-primary", "isolate-primary", "disk-full-primary")


def failovers_before_heal(report):
    """[] when at every "before-heal" note after a fault aimed at the primary
    X a member other than X was primary (and X was not); else what went wrong.
    A full disk counts when X cannot write: any member at 0 MB left, n1 and
    n2 (whose free-space guard refuses writes) at 64 MB; n3 (guard off) with
    64 MB left can still write and may stay primary."""
    faults, bad = report["faults"], []
    for i, f in enumerate(faults):
        if f["f"] not in FAILOVER_KINDS:
            continue
        target = str(f["value"]).split()[0]
        if f["f"] == "disk-full-primary" and target == "n3" and "(0 MB" not in str(f["value"]):
            continue
        note = next((h for h in faults[i:] if h["f"] == "before-heal"), None)
        states = (note or {}).get("value") or {}
        primaries = [m for m, st in states.items() if st == 1]
        if note is None or not primaries or target in primaries:
            bad.append("%s of %s at %.1fs: primary before the heal: %s (states %s)" % (
                f["f"], target, f["at_s"], primaries or None, states))
    return bad


def failovers(ops, nemesis, kinds=FAILOVER_KINDS):
    """For each fault of kinds (those aimed at the primary): seconds from
    the fault to the first acknowledged write invoked after it (the writes'
    unavailability)."""
    out = []
    oks = sorted((op.call, op.ret) for op in ops if op.type == "ok" and op.f in WRITES)
    for e in nemesis:
        if e["f"] not in kinds:
            continue
        nxt = next((ret for call, ret in oks if call >= e["time"]), None)
        out.append({"fault": e["f"], "seconds": None if nxt is None
                    else round((nxt - e["time"]) / 1e9, 2)})
    return out


def check(workload, ops, final_nodes, time_limit):
    """Run the workload's checker over ops (final reads of the converged
    members only: a diverged member is reported by the convergence check)."""
    ops = [op for op in ops if op.f != "final-read" or op.node in final_nodes]
    if workload == "register":
        res = check_register.check(ops, time_limit=time_limit)
        return res, check_register.report(res)
    if workload == "set":
        res = check_set.check(ops)
        return res, check_set.report(res)
    if workload == "bank":
        res = check_bank.check(ops, ["a%d" % i for i in range(workload_mod.BANK_ACCOUNTS)],
                               workload_mod.BANK_ACCOUNTS * workload_mod.BANK_BALANCE)
        return res, check_bank.report(res)
    res = check_append.check(ops)
    return res, check_append.report(res)


def dump_stacks(pid, path):
    """A running member that did not answer the final checks: every
    thread's stack (gdb) and the process's kernel state, kept with the round."""
    with open(path, "w") as f:
        for name in ("status", "stack", "wchan"):
            try:
                with open("/proc/%d/%s" % (pid, name), errors="replace") as src:
                    f.write("== /proc/%d/%s\n%s\n" % (pid, name, src.read()))
            except OSError as e:
                f.write("== /proc/%d/%s: %s\n" % (pid, name, e.strerror))
        f.flush()
        try:
            subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 30"],
                           stdout=f, stderr=subprocess.STDOUT, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            f.write("gdb: %s\n" % e)


def needs_rollback(rdir, m):
    """True when member m's log says its oplog diverged from its sync
    source's (log id 21656: it must roll back)."""
    try:
        with open(os.path.join(rdir, m, "sabled.log"), errors="replace") as f:
            return any('"id":21656' in line for line in f)
    except OSError:
        return False


def run_round(args, workload, seed, rdir):
    os.makedirs(rdir, exist_ok=True)
    rng = random.Random(seed)
    backend_cls = Netns if args.mode == "netns" else Loopback
    history = os.path.join(rdir, "history.jsonl")
    report = {"seed": seed, "workload": workload, "mode": backend_cls.name}
    print("round seed=%s workload=%s mode=%s dir=%s" % (seed, workload, backend_cls.name, rdir),
          flush=True)
    disks = Disks(rdir, args.disk_mb) if args.disk_full else contextlib.nullcontext()
    MEMBER_ARGS.clear()
    MEMBER_ARGS.update(DISK_FULL_ARGS if args.disk_full else {})
    with disks, backend_cls(rdir) as b:
        for m in MEMBERS:
            b.start(m)
        agent = Agent(b, workload, seed, history, args)
        try:
            t_init = time.monotonic()
            try:
                agent.call("init")
            except RuntimeError as e:
                dead = ["%s exited %s" % (m, p.returncode) for m, p in b.procs.items()
                        if p.poll() is not None]
                raise RuntimeError("%s%s" % (e, " (%s; see <member>/stderr.log)" % ", ".join(dead)
                                             if dead else "")) from e
            report["init_s"] = round(time.monotonic() - t_init, 2)
            t0 = time.monotonic()
            nem = Nemesis(b, agent, rng, t0, disks if args.disk_full else None, args.reconfig)
            agent.call("start")
            end = t0 + args.duration
            steps = [step.split("+") for step in args.faults.split(",")] if args.faults else None
            while steps is None or steps:
                quiet = rng.uniform(1.0, 3.0)
                hold = rng.uniform(args.hold_min, args.hold_max)
                if steps is None and time.monotonic() + quiet + hold > end:
                    break
                time.sleep(quiet)
                for kind in (steps.pop(0) if steps else [None]):
                    nem.inject(kind)
                time.sleep(hold)
                # mostly one fault at a time; sometimes they pile up
                if rng.random() < 0.7 or steps is not None:
                    nem.heal_all()
            nem.heal_all()
            time.sleep(max(0.0, end - time.monotonic()))
            report["stop"] = agent.call("stop")
            final = agent.call("final")
            for m, st in final.get("members", {}).items():
                if st.get("state") is None and b.pid(m) is not None:
                    dump_stacks(b.pid(m), os.path.join(rdir, m, "stacks.txt"))
                elif st.get("state") is None and b.procs.get(m) is not None:
                    report.setdefault("exited", {})[m] = b.procs[m].returncode
        finally:
            agent.close()
    events = read_events(history) + (nem.events if "nem" in dir() else [])
    events.sort(key=lambda e: e["time"])
    with open(history, "w", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(e, separators=(",", ":"), default=str) + "\n")
    ops, nemesis = pair(events)
    res, lines = check(workload, ops, final["final_nodes"], args.time_limit)
    t0ns = int(t0 * 1e9)
    report.update({
        "faults": [{"at_s": round((e["time"] - t0ns) / 1e9, 1), "f": e["f"], "value": e["value"]}
                   for e in nemesis],
        "ops": outcome_counts([op for op in ops if op.f != "final-read"]),
        "failovers": failovers(ops, nemesis),
        "convergence": final,
        "checker": {"valid": res["valid"], "report": lines},
    })
    conv_ok = (final["converged"] and not final["diverged"]
               and final.get("oplog", {}).get("agree", False))
    report["valid"] = res["valid"] is True and conv_ok
    report["anomalies"] = []
    if workload != "register":
        read_on = {op.node for op in ops if op.f == "final-read" and op.type == "ok"}
        missing = [m for m in final["final_nodes"] if m not in read_on]
        if missing:
            report["valid"] = False
            report["anomalies"].append("no final read from %s" % missing)
    if res["valid"] is not True:
        report["anomalies"].append("checker: %s" % res["valid"])
    if args.check_failover:
        for line in failovers_before_heal(report):
            report["valid"] = False
            report["anomalies"].append("no failover: %s" % line)
    report["needs_rollback"] = [m for m in MEMBERS if needs_rollback(rdir, m)]
    if not conv_ok:
        if report["needs_rollback"]:
            report["anomalies"].append(
                "rollback: %s must roll back (not built yet: rs-durable)" % report["needs_rollback"])
        report["anomalies"].append(
            "convergence: converged=%s diverged=%s oplogs agree=%s" %
            (final["converged"], final["diverged"], final.get("oplog", {}).get("agree")))
    # the checkers passed and the only convergence failure is a member that
    # must roll back (the oplogs of the others agree)
    report["only_rollback"] = bool(not report["valid"] and res["valid"] is True
                                   and report["needs_rollback"]
                                   and set(final["diverged"]) <= set(report["needs_rollback"]))
    with open(os.path.join(rdir, "report.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    print_round(report)
    if report["valid"] and not args.keep:   # ~1 GB a round: keep only failed rounds' data
        for m in MEMBERS:
            shutil.rmtree(dbpath(rdir, m), ignore_errors=True)
    return report


def print_round(r):
    print("  ops %s; faults %d; failovers %s" % (
        r["ops"], sum(f["f"] not in HEALS for f in r["faults"]),
        [f["seconds"] for f in r["failovers"]]))
    c = r["convergence"]
    print("  convergence: converged=%s in %ss, diverged=%s, dbHash %s, oplogs agree=%s" % (
        c["converged"], c.get("converge_s"), c["diverged"],
        "equal" if len(set(c["dbhash"].values())) == 1 else c["dbhash"],
        c.get("oplog", {}).get("agree")))
    for line in r["checker"]["report"]:
        print("  " + line)
    print("  verdict: %s %s" % ("VALID" if r["valid"] else "INVALID",
                                "; ".join(r["anomalies"])), flush=True)


def add_round_args(ap):
    """The options of a round that every fault-round runner takes
    (harness_sharded.py too)."""
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--hold-min", type=float, default=3.0)
    ap.add_argument("--hold-max", type=float, default=6.0)
    ap.add_argument("--threads", type=int, default=5)
    ap.add_argument("--election-timeout-ms", type=int, default=2000)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="register",
                    help="register, set, append, bank or a comma list (rounds cycle through it)")
    add_round_args(ap)
    ap.add_argument("--read-concern", default=None,
                    help="of the reads during the run (default: register linearizable, "
                    "set and append majority)")
    ap.add_argument("--time-limit", type=float, default=30)
    ap.add_argument("--mode", choices=["auto", "netns", "loopback"], default="auto")
    ap.add_argument("--faults", default=None, metavar="KIND[+KIND],...",
                    help="a fixed fault sequence instead of random faults: steps in order, "
                    "each healed before the next (+ joins faults held together); targets "
                    "and holds still come from the seed; the round lasts at least --duration")
    ap.add_argument("--disk-full", action="store_true",
                    help="each member's dbpath on a tmpfs of --disk-mb (root), and disk-full "
                    "faults: the filesystem filled to 0 or 64 MB free, then freed and the member "
                    "restarted")
    ap.add_argument("--disk-mb", type=int, default=600)
    ap.add_argument("--reconfig", action="store_true",
                    help="membership faults: replSetReconfig removing a member or changing "
                    "priorities, through the primary of the moment; the heal restores the "
                    "three members with priority 1")
    ap.add_argument("--check-failover", action="store_true",
                    help="a round is invalid unless, after each fault aimed at the primary "
                    "(killed, paused, isolated, or its disk full), another member is primary "
                    "when the fault is undone (hold it longer than the election timeout)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--summary", default=None, help="write the run's summary (JSON) here")
    ap.add_argument("--keep", action="store_true",
                    help="keep the members' dbpaths of valid rounds too (about 1 GB a round)")
    ap.add_argument("--allow-rollback", action="store_true",
                    help="rounds whose only anomaly is a member that must roll back (not built "
                    "yet) do not fail the run; they are still counted and printed")
    ap.add_argument("--summarize", metavar="DIR", default=None,
                    help="print the summary of the rounds already in DIR (round-*/report.json)")
    a = ap.parse_args(argv)
    if a.summarize:
        reps = []
        for d in sorted(os.listdir(a.summarize)):
            f = os.path.join(a.summarize, d, "report.json")
            if d.startswith("round-") and os.path.exists(f):
                with open(f) as fh:
                    reps.append(json.load(fh))
        s = summarize(reps)
        s["by_workload"] = {w: sum(1 for r in reps if r["workload"] == w)
                            for w in sorted({r["workload"] for r in reps})}
        print(json.dumps(s, indent=1, default=str))
        return 0
    if a.seed is None:
        a.seed = int.from_bytes(os.urandom(4), "little")
    if a.faults:
        kinds = {k for step in a.faults.split(",") for k in step.split("+")}
        if kinds - set(KINDS):
            ap.error("--faults: unknown %s (known: %s)" % (sorted(kinds - set(KINDS)),
                                                           ", ".join(KINDS)))
        a.disk_full = a.disk_full or any(k.startswith("disk-full") for k in kinds)
    if a.mode == "auto":
        ok, why = netns_available()
        a.mode = "netns" if ok else "loopback"
        if not ok:
            print("network namespaces unavailable (%s): loopback mode, kill and pause faults "
                  "only, no partitions" % why, flush=True)
    elif a.mode == "netns":
        ok, why = netns_available()
        if not ok:
            print("network namespaces unavailable: %s" % why, file=sys.stderr)
            return 2
    if a.disk_full and os.geteuid() != 0:
        print("disk-full faults need root (a tmpfs per member): skipped", flush=True)
        return SKIP
    if a.faults and a.mode == "loopback" and kinds & NET_KINDS:
        print("--faults %s needs network namespaces: skipped" % sorted(kinds & NET_KINDS),
              flush=True)
        return SKIP
    out = a.out or tempfile.mkdtemp(prefix="sable-faults-")
    print("faults: seed %d, %d rounds, workload %s, mode %s, out %s" % (
        a.seed, a.rounds, a.workload, a.mode, out), flush=True)
    workloads = a.workload.split(",")
    reports = []
    for i in range(a.rounds):
        w = workloads[i % len(workloads)]
        rdir = os.path.join(out, "round-%d" % i)
        try:
            reports.append(run_round(a, w, a.seed + i, rdir))
        except RuntimeError as e:
            print("  round error: %s" % e, flush=True)
            reports.append({"seed": a.seed + i, "workload": w, "valid": False,
                            "anomalies": ["harness: %s" % e], "faults": [], "ops": {},
                            "failovers": []})
    summary = summarize(reports)
    summary.update({"seed": a.seed, "mode": a.mode, "out": out})
    print("summary: %s" % json.dumps(summary), flush=True)
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump({"summary": summary, "rounds": reports}, f, indent=1, default=str)
    bad = summary["invalid"] - (summary["invalid_only_rollback"] if a.allow_rollback else 0)
    return 0 if bad == 0 else 1


def summarize(reports):
    s = {"rounds": len(reports), "invalid": 0, "invalid_only_rollback": 0, "faults": {}, "ops": {"ok": 0, "fail": 0,
                                                                        "info": 0},
         "failover_s": [], "invalid_seeds": []}
    for r in reports:
        if not r.get("valid"):
            s["invalid"] += 1
            s["invalid_seeds"].append([r["seed"], r["workload"], r.get("anomalies")])
            if r.get("only_rollback"):
                s["invalid_only_rollback"] += 1
        for f in r.get("faults", []):
            if f["f"] not in HEALS:
                s["faults"][f["f"]] = s["faults"].get(f["f"], 0) + 1
        for k, v in r.get("ops", {}).items():
            s["ops"][k] += v
        s["failover_s"] += [f["seconds"] for f in r.get("failovers", [])]
    done = sorted(x for x in s["failover_s"] if x is not None)
    s["failovers"] = {"count": len(s["failover_s"]), "no_write_after": len(s["failover_s"]) -
                      len(done), "median_s": done[len(done) // 2] if done else None,
                      "max_s": done[-1] if done else None}
    return s


if __name__ == "__main__":
    sys.exit(main())
