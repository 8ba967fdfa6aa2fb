"""benchlib.py: shared helpers for bench/compare, bench/seeds and the audit benchmarks.

Starts throw-away servers (sabled, Redis 7, PostgreSQL 15) on free loopback
ports in temporary directories, runs sable-bench and parses YCSB's summary.
Every server started here is stopped by its own pid; nothing touches the
system services.  Importing it makes SIGTERM an exit (SystemExit), as Ctrl-C
is, so a benchmark ended by kill or timeout(1) still runs its finally blocks:
the servers and replica sets it started are stopped and their temporary
directories (300 MB a member) removed.
"""
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def _exit_on_sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up short
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, _exit_on_sigterm)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG_BIN = "/usr/lib/postgresql/15/bin"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=30.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def find_binary(name, explicit=None):
    for cand in [explicit, os.path.join(ROOT, "build", name), shutil.which(name)]:
        if cand and os.path.exists(cand):
            return cand
    sys.exit(f"cannot find {name}; build it first (scripts/build.sh) or pass its path")


class Server:
    """A server process in its own temporary directory."""

    def __init__(self, name):
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix=f"bench_{name}_")
        self.port = free_port()
        self.proc = None
        self.stop_cmd = None

    def stop(self):
        if self.stop_cmd:
            subprocess.run(self.stop_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)


def sable_cluster(args, sabled):
    """Run scripts/sable-cluster with args (start, stop, ...) for binary sabled; its output."""
    env = dict(os.environ, SABLED=sabled)
    r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "sable-cluster")] + args,
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("sable-cluster %s: %s%s" % (args[0], r.stdout, r.stderr))
    return r.stdout.strip()


def start_sable(sabled, journal, extra_args=()):
    s = Server("sable")
    os.makedirs(os.path.join(s.tmp, "db"))
    log = open(os.path.join(s.tmp, "sabled.log"), "w")
    s.proc = subprocess.Popen([sabled, "--port", str(s.port), "--dbpath", os.path.join(s.tmp, "db")]
                              + list(extra_args), stdout=log, stderr=subprocess.STDOUT)
    if not wait_port(s.port):
        s.stop()
        raise RuntimeError("sabled did not start")
    # j:true waits for the journal on every write; w:1 acknowledges from memory.
    wc = "journaled" if journal else "acknowledged"
    s.props = [f"mongodb.url=mongodb://127.0.0.1:{s.port}/ycsb", f"mongodb.writeConcern={wc}"]
    s.binding = "mongodb"
    s.durability = "j:true (writeConcern journaled)" if journal else "w:1 (writeConcern acknowledged)"
    return s


def checkpoint_state(status):
    """(checkpoints completed, whether one is running) from a serverStatus reply."""
    t = status.get("wiredTiger", {}).get("transaction", {})
    return t.get("transaction checkpoints", 0), t.get("transaction checkpoint currently running", 0) != 0


def checkpoint_ran(before, after):
    """Whether a checkpoint ran between two checkpoint_state readings: running
    at either one, or one completed between them."""
    return before[1] or after[1] or after[0] != before[0]


def op_count(status):
    """Inserts, queries and updates so far, from a serverStatus reply's opcounters."""
    o = status["opcounters"]
    return o["insert"] + o["query"] + o["update"]


def start_mix_run(bench, client, port, records, mix, max_seconds, threads):
    """For the scripts that switch something during one run (audit-split,
    audit-disk-floor): load records into the sabled on port, warm it with
    300,000 zipfian reads, checkpoint it (fsync through client), then start
    one sable-bench run of mix ("I:R:U" percentages, w:1) that ends after
    max_seconds; returns its Popen."""
    wl = os.path.join(ROOT, "workloads", "workloada")
    base = ["workload=site.ycsb.workloads.CoreWorkload", "requestdistribution=zipfian",
            "mongodb.writeConcern=acknowledged", f"mongodb.url=mongodb://127.0.0.1:{port}/ycsb",
            f"recordcount={records}", f"insertcount={records}"]
    print(f"loading {records} records and warming up ...", file=sys.stderr)
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(bench_cmd(bench, "load", "mongodb", wl, base, 100), **quiet)
    subprocess.run(bench_cmd(bench, "run", "mongodb", wl, base + [
        "operationcount=300000", "readproportion=1", "updateproportion=0", "insertproportion=0"], 100), **quiet)
    client.admin.command("fsync")
    ins, rd, up = [int(x) / 100 for x in mix.split(":")]
    props = base + ["operationcount=1000000000", f"maxexecutiontime={max_seconds}",
                    f"insertproportion={ins}", f"readproportion={rd}", f"updateproportion={up}",
                    "scanproportion=0", "readmodifywriteproportion=0"]
    return subprocess.Popen(bench_cmd(bench, "run", "mongodb", wl, props, threads), **quiet)


# bench/audit's filter: authCheck of the commands report 001 audited.
AUDIT_FILTER = '{"atype": "authCheck", "param.command": {"$in": ["insert", "find", "update"]}}'


def start_sable_audit(sabled, dbpath, tmp, audit, paused=False, extra=()):
    """sabled on a free port over dbpath; audit: JSON file in tmp with
    AUDIT_FILTER (paused: configured, auditAuthorizationSuccess=false until
    set at run time); extra: more sabled options."""
    s = Server("sable_audit")
    args = [sabled, "--port", str(s.port), "--bind_ip", "127.0.0.1", "--dbpath", dbpath,
            "--logpath", os.path.join(s.tmp, "sabled.log")]
    if audit:
        s.audit_path = os.path.join(tmp, "audit.json")
        success = "false" if paused else "true"
        args += ["--auditDestination", "file", "--auditFormat", "JSON", "--auditPath", s.audit_path,
                 "--setParameter", f"auditAuthorizationSuccess={success}", "--auditFilter", AUDIT_FILTER]
    s.proc = subprocess.Popen(args + list(extra), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    if not wait_port(s.port):
        s.stop()
        raise RuntimeError("sabled did not start")
    s.url = f"mongodb.url=mongodb://127.0.0.1:{s.port}/ycsb"
    return s


def start_redis(fsync_always):
    s = Server("redis")
    fsync = "always" if fsync_always else "everysec"
    s.proc = subprocess.Popen(["redis-server", "--port", str(s.port), "--bind", "127.0.0.1", "--dir", s.tmp,
                               "--save", "", "--appendonly", "yes", "--appendfsync", fsync,
                               "--protected-mode", "no", "--logfile", os.path.join(s.tmp, "redis.log")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_port(s.port):
        s.stop()
        raise RuntimeError("redis-server did not start")
    s.props = ["redis.host=127.0.0.1", f"redis.port={s.port}"]
    s.binding = "redis"
    s.durability = f"appendonly yes, appendfsync {fsync}"
    return s


def start_postgres(sync_commit):
    """PostgreSQL refuses to run as root: run it as the postgres user then."""
    s = Server("postgres")
    as_user = []
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(s.tmp, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data = os.path.join(s.tmp, "data")
    subprocess.run(as_user + [f"{PG_BIN}/initdb", "-D", data, "-A", "trust", "-U", "postgres"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sc = "on" if sync_commit else "off"
    opts = f"-p {s.port} -k {s.tmp} -c listen_addresses=127.0.0.1 -c synchronous_commit={sc} " \
           f"-c shared_buffers=256MB -c max_connections=400"
    subprocess.run(as_user + [f"{PG_BIN}/pg_ctl", "-D", data, "-l", os.path.join(s.tmp, "pg.log"), "-o", opts,
                              "-w", "start"], check=True, stdout=subprocess.DEVNULL)
    s.stop_cmd = as_user + [f"{PG_BIN}/pg_ctl", "-D", data, "-m", "fast", "-w", "stop"]
    subprocess.run(as_user + [f"{PG_BIN}/createdb", "-h", "127.0.0.1", "-p", str(s.port), "-U", "postgres", "ycsb"],
                   check=True)
    s.props = [f"postgrenosql.url=jdbc:postgresql://127.0.0.1:{s.port}/ycsb", "postgrenosql.user=postgres"]
    s.binding = "postgres"
    s.durability = f"synchronous_commit={sc}"
    return s


LINE = re.compile(r"^\[([A-Z0-9_\-]+)\], ([^,]+), (.+)$")


def parse_summary(text):
    """YCSB summary text -> {section: {metric: value}}."""
    out = {}
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if not m:
            continue
        try:
            val = float(m.group(3))
        except ValueError:
            continue
        out.setdefault(m.group(1), {})[m.group(2)] = val
    return out


def bench_cmd(bench, phase, binding, workload, props, threads, extra=(), flags=()):
    """sable-bench's command line: flags (e.g. "-s") before the -p properties."""
    cmd = [bench, phase, binding, "-P", workload, "-threads", str(threads)] + list(flags)
    for p in list(props) + list(extra):
        cmd += ["-p", p]
    return cmd


def run_bench(bench, phase, binding, workload, props, threads, extra=(), log=None):
    """Run sable-bench; returns (parsed summary, exit code)."""
    cmd = bench_cmd(bench, phase, binding, workload, props, threads, extra)
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if log:
        log.write("$ " + " ".join(cmd) + "\n" + res.stdout + res.stderr + "\n")
        log.flush()
    return parse_summary(res.stdout), res.returncode


def latency(summary, ops, key):
    """Operation-weighted mean (AverageLatency) or the worst p99 over ops present."""
    present = [summary[o] for o in ops if o in summary and summary[o].get("Operations", 0) > 0]
    if not present:
        return 0.0
    if key == "AverageLatency(us)":
        n = sum(p["Operations"] for p in present)
        return sum(p["Operations"] * p[key] for p in present) / n
    return max(p.get(key, 0.0) for p in present)


READ_OPS = ("READ", "SCAN")
WRITE_OPS = ("UPDATE", "INSERT", "READ-MODIFY-WRITE")


def errors(summary):
    return sum(int(v) for sec in summary.values() for k, v in sec.items()
               if k.startswith("Return=") and k not in ("Return=OK", "Return=BATCHED_OK"))


def pooled_ratio(pairs, draws=2000):
    """(on/off of the summed throughputs, 2.5th and 97.5th percentiles of
    the same over pairs drawn with replacement).  A segment's throughput
    swings by +-10-30% here (checkpoints, the host), so the median of the
    pair ratios moves by a few hundredths between runs; the interval says
    how far the data pin the ratio down.  Fixed seed: the same rows print
    the same interval."""
    import random
    rng = random.Random(7)

    def ratio(ps):
        off = sum(p[1] for p in ps)
        return sum(p[0] for p in ps) / off if off else 0.0
    boot = sorted(ratio([rng.choice(pairs) for _ in pairs]) for _ in range(draws))
    return ratio(pairs), boot[int(0.025 * draws)], boot[int(0.975 * draws) - 1]
