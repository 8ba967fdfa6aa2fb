"""
Fault rounds against a sharded cluster (issue 28), with the replica-set
harness's workloads, checkers and output (harness.py, issue 25).

    /usr/bin/python3 tests/faults/harness_sharded.py --workload set --rounds 3 \
        [--seed S] [--duration 30] [--out DIR]

A round: sable-cluster starts a config server replica set cfgRS (one
member: the machine has two cores) and two shards shard0 and shard1 of
three members each, with router0; router1 is started beside it; all on
127.0.0.1.  jepsen.set (and jepsen.bank) are sharded on {_id: 1}, split
into chunks spread over both shards, the balancer stopped.  Then at once:
- the workload (workload.py's set or bank, several pymongo client threads
  through both routers, w:majority, retryable writes off);
- a migrator thread moving a random chunk to the other shard (moveChunk
  through a router) again and again;
- faults chosen from the round's seed (round seed = seed + round number):
  kill -9 or SIGSTOP of a shard's primary (or any member), of the config
  server, of the donor's or the recipient's primary while a migration is
  in flight, kill -9 of a router; each undone by the heal (resume,
  restart), mostly before the next fault.
After --duration everything is healed and the migrator stopped; the round
waits until each shard's members agree (workload.Agent.convergence: one
primary, equal applied optimes, dbHash, oplogs up to the commit point) and
until no shard holds a migration coordinator or range-deletion document,
then reads the set through each router and on each shard member (held to
the chunks config.chunks gives its shard: check_set's "owns"), or the bank
through each router, and checks the history (check_set / check_bank).
A round is invalid on any checker anomaly, a shard whose members did not
converge, or documents left on a shard outside its chunks (orphans) once
no range deletion is pending.

Loopback only (no network partitions: netfaults' namespaces do not host the
routers).  Output as harness.py's; files in --out/round-N (history.jsonl,
migrations.jsonl, report.json, the cluster's logs).

Must stay true: every process a round starts is gone when it ends, also on
an exception or Ctrl-C (Cluster.teardown kills them by PID).
"""
import argparse
import importlib.machinery
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(ROOT, "tests", "integration", "py"))

import pymongo  # noqa: E402
from bson.max_key import MaxKey  # noqa: E402
from bson.min_key import MinKey  # noqa: E402
from pymongo.errors import AutoReconnect, OperationFailure, PyMongoError  # noqa: E402

import harness  # noqa: E402
import workload as workload_mod  # noqa: E402
from history import outcome_counts, pair, read_events  # noqa: E402

SHARDS = ["shard0", "shard1"]
MEMBERS = ["n1", "n2", "n3"]
ROUTERS = ["router0", "router1"]
KINDS = ["kill-shard-primary", "pause-shard-primary", "kill-shard-member", "kill-config",
         "pause-config", "kill-donor", "kill-recipient", "pause-donor", "kill-router"]
# faults after which a shard or the config server must elect or come back
FAILOVER_KINDS = ("kill-shard-primary", "pause-shard-primary", "kill-config", "pause-config",
                  "kill-donor", "kill-recipient", "pause-donor")
SPLITS = {"set": [1000000 * i for i in range(1, 5)], "bank": ["a2"]}   # set: a chunk per thread


def load_launcher():
    """scripts/sable-cluster as a module (its spawn, spawn_router, load, save)."""
    path = os.path.join(ROOT, "scripts", "sable-cluster")
    loader = importlib.machinery.SourceFileLoader("sable_cluster", path)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(mod)
    return mod


class Cluster:
    """The round's processes, named cfg, shard0/n1 .. shard1/n3, router0,
    router1: started by sable-cluster (router1 by its spawn_router), each
    killed, paused, resumed and restarted by PID."""

    def __init__(self, d, args):
        import sharded   # tests/integration/py: ports below the ephemeral range
        self.d, self.args = d, args
        self.launcher = load_launcher()
        self.base = sharded.base_port(1 + len(SHARDS) * len(MEMBERS) + 2)
        self.st = None
        self.router1 = None

    def start(self):
        env = dict(os.environ, SABLE_ROUTER=os.path.join(os.path.dirname(
            harness.sabled_path()), "sable-router"))
        os.environ.update(env)   # the launcher module reads them too
        r = subprocess.run(
            [sys.executable, os.path.join(ROOT, "scripts", "sable-cluster"), "start",
             "--sharded", "--shards", str(len(SHARDS)), "--members", str(len(MEMBERS)),
             "--port", str(self.base), "--router-port", str(self.base + 7), "--oplog-mb", "64",
             "--election-timeout-ms", str(self.args.election_timeout_ms), "--dir", self.d,
             # migrated ranges deleted at once (mongod's 900 s delay would
             # outlast the round: settle() waits for config.rangeDeletions)
             "--sabled-arg=--setParameter", "--sabled-arg=orphanCleanupDelaySecs=0"],
            capture_output=True, text=True, env=env, timeout=240)
        self.st = self.launcher.load(self.d) if os.path.exists(
            os.path.join(self.d, "cluster.json")) else None
        if r.returncode != 0:
            raise RuntimeError("sable-cluster start: %s" % (r.stdout + r.stderr)[-600:])
        self.router1 = dict(self.st["router"], port=self.base + 8, pid=None,
                            log=os.path.join(self.d, "router1.log"))
        self.launcher.spawn_router({"router": self.router1})

    def hosts(self, name):
        """{member: host:port} of a shard, or of the config server (cfg)."""
        s = self.st["sets"][0 if name == "cfg" else 1 + SHARDS.index(name)]
        names = ["cfg"] if name == "cfg" else MEMBERS
        return {n: "127.0.0.1:%d" % m["port"] for n, m in zip(names, s["members"])}

    def router_hosts(self):
        return {"router0": "127.0.0.1:%d" % self.st["router"]["port"],
                "router1": "127.0.0.1:%d" % self.router1["port"]}

    def _proc(self, name):
        """(the launcher's dict of the process, its set's state or None)."""
        if name == "router0":
            return self.st["router"], None
        if name == "router1":
            return self.router1, None
        if name == "cfg":
            return self.st["sets"][0]["members"][0], self.st["sets"][0]
        shard, m = name.split("/")
        s = self.st["sets"][1 + SHARDS.index(shard)]
        return s["members"][MEMBERS.index(m)], s

    def signal(self, name, sig):
        """Send sig; SIGKILL waits until the process is gone.  False when it
        is not running."""
        p, _ = self._proc(name)
        pid = p.get("pid")
        if not pid or not self.launcher.alive(pid):
            return False
        os.kill(pid, sig)
        if sig == signal.SIGKILL:
            end = time.monotonic() + 20
            while self.launcher.alive(pid) and time.monotonic() < end:
                time.sleep(0.05)
            p["pid"] = None
        return True

    def restart(self, name):
        p, s = self._proc(name)
        try:
            if s is None:
                self.launcher.spawn_router({"router": p})
            else:
                self.launcher.spawn(s, s["members"].index(p))
        except SystemExit as e:   # the launcher's way to say it failed
            raise RuntimeError(str(e)) from None
        self.launcher.save(self.d, self.st)

    def teardown(self):
        if self.st is None:
            return
        procs = [self.st.get("router"), self.router1] + [
            m for s in self.st["sets"] for m in s["members"]]
        for p in procs:
            pid = (p or {}).get("pid")
            if pid and self.launcher.alive(pid):
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in procs:
            pid = (p or {}).get("pid")
            end = time.monotonic() + 20
            while pid and self.launcher.alive(pid) and time.monotonic() < end:
                time.sleep(0.05)


def set_agent(hosts, args):
    """A workload.Agent for one replica set: its statuses, primary and
    convergence checks (no workload threads)."""
    ns = argparse.Namespace(hosts=",".join("%s=%s" % kv for kv in hosts.items()), threads=0,
                            seed=0, workload="set", converge_s=args.converge_s, out=None,
                            op_timeout_ms=5000, read_concern="majority", think_ms=40,
                            election_timeout_ms=args.election_timeout_ms)
    return workload_mod.Agent(ns)


class RoutedAgent(workload_mod.Agent):
    """workload.py's client threads, through the routers (a mongos seed list)."""

    def client_uri(self):
        return "mongodb://%s/" % ",".join(self.hosts.values())


def router_client(hosts, timeout_ms=5000):
    return pymongo.MongoClient("mongodb://%s/" % ",".join(hosts), uuidRepresentation="standard",
                               serverSelectionTimeoutMS=timeout_ms, connectTimeoutMS=timeout_ms,
                               socketTimeoutMS=150000, retryWrites=False)


def chunks(client, ns):
    """config.chunks of ns: [(min _id, max _id, shard)], MinKey/MaxKey as None."""
    coll = client.config.collections.find_one({"_id": ns})
    out = []
    for c in client.config.chunks.find({"uuid": coll["uuid"]}).sort("min", 1):
        lo, hi = c["min"]["_id"], c["max"]["_id"]
        out.append((None if isinstance(lo, MinKey) else lo,
                    None if isinstance(hi, MaxKey) else hi, c["shard"]))
    return out


def bound(v, lo):
    return {"_id": v if v is not None else (MinKey() if lo else MaxKey())}


# moveChunk answers that say "not now", not "no": another migration holds
# the range (117 ConflictingOperationInProgress), or a shard's primary changed
# under it (11602 InterruptedDueToReplStateChange, 10107 NotWritablePrimary,
# 13435/13436 NotPrimary..., 189 PrimarySteppedDown, 91 ShutdownInProgress).
# Elections happen on a loaded host before any fault (electionTimeoutMillis
# 2000 against heartbeats every 2 s), and the setup's moves must ride them out.
MOVE_AGAIN = {117, 11602, 10107, 13435, 13436, 189, 91}


def move(client, ns, lo, hi, to, tries=100):
    """moveChunk of [lo, hi) to shard `to`, sent again while the answer is
    one of MOVE_AGAIN or the router cannot reach a primary for a moment."""
    for attempt in range(tries):
        try:
            return client.admin.command("moveChunk", ns, bounds=[bound(lo, True), bound(hi, False)],
                                        to=to)
        except (OperationFailure, AutoReconnect) as e:
            transient = isinstance(e, AutoReconnect) or e.code in MOVE_AGAIN
            if not transient or attempt == tries - 1:
                raise
            time.sleep(0.2)
            try:  # the answer was lost but the move done: nothing to send again
                if (lo, hi, to) in chunks(client, ns):
                    return {"ok": 1}
            except PyMongoError:
                pass


def shard_collections(client, workload):
    """Shard jepsen.<workload> on {_id: 1}, split at SPLITS, every other
    chunk on the other shard; the balancer stopped (the migrator moves)."""
    client.admin.command("balancerStop")
    client.admin.command("enableSharding", workload_mod.DB)
    ns = "%s.%s" % (workload_mod.DB, workload)
    client.admin.command("shardCollection", ns, key={"_id": 1})
    for at in SPLITS[workload]:
        client.admin.command("split", ns, middle={"_id": at})
    for i, (lo, hi, shard) in enumerate(chunks(client, ns)):
        if i % 2:
            move(client, ns, lo, hi, SHARDS[1 - SHARDS.index(shard)])
    return ns


class Migrator(threading.Thread):
    """Moves a random chunk of ns to the other shard, again and again, until
    stop; current is (donor, recipient) while a moveChunk is in flight;
    log: one entry per migration (at_s, range, from, to, s, result)."""

    def __init__(self, hosts, ns, seed, t0):
        super().__init__(daemon=True)
        self.hosts, self.ns, self.rng, self.t0 = hosts, ns, random.Random(seed), t0
        self.current, self.log, self.stop_ev = None, [], threading.Event()

    def run(self):
        with router_client(self.hosts) as c:
            while not self.stop_ev.is_set():
                t = time.monotonic()
                entry = {"at_s": round(t - self.t0, 1)}
                try:
                    lo, hi, shard = self.rng.choice(chunks(c, self.ns))
                    to = SHARDS[1 - SHARDS.index(shard)]
                    entry.update({"range": [lo, hi], "from": shard, "to": to})
                    self.current = (shard, to)
                    c.admin.command("moveChunk", self.ns,
                                    bounds=[bound(lo, True), bound(hi, False)], to=to)
                    entry["result"] = "ok"
                except PyMongoError as e:
                    entry["result"] = "%s %s" % (getattr(e, "code", None) or type(e).__name__,
                                                 str(e)[:100])
                finally:
                    self.current = None
                entry["s"] = round(time.monotonic() - t, 2)
                self.log.append(entry)
                self.stop_ev.wait(self.rng.uniform(0.1, 0.8))

    def counts(self):
        out = {}
        for e in self.log:
            k = "ok" if e["result"] == "ok" else str(e["result"]).split()[0]
            out[k] = out.get(k, 0) + 1
        return out


class Nemesis:
    """Faults from the round's seed on the cluster's processes; heal_all()
    undoes them.  events: nemesis history events (harness.py's format)."""

    def __init__(self, cluster, sets, migrator, rng, t0):
        self.c, self.sets, self.mig, self.rng, self.t0 = cluster, sets, migrator, rng, t0
        self.events, self.paused, self.dead = [], set(), set()

    def note(self, f, value):
        self.events.append({"process": "nemesis", "type": "info", "f": f, "value": value,
                            "time": time.monotonic_ns()})
        print("  %6.1fs %s %s" % (time.monotonic() - self.t0, f, value), flush=True)

    def primary(self, shard):
        """shard's primary (shard/nX), else a member the seed picks."""
        m = self.rng.choice(MEMBERS)
        return "%s/%s" % (shard, self.sets[shard].primary(self.sets[shard].statuses(1000)) or m)

    def in_migration(self):
        """(donor, recipient) of a migration in flight, waiting up to 3 s
        for one, then a random instant up to 0.3 s into it; None if none."""
        delay = self.rng.uniform(0, 0.3)   # drawn always: the seed's schedule stays
        end = time.monotonic() + 3
        while time.monotonic() < end:
            cur = self.mig.current
            if cur:
                time.sleep(delay)
                return cur
            time.sleep(0.02)
        return None

    def inject(self):
        kind = self.rng.choice(KINDS)
        shard = self.rng.choice(SHARDS)
        what = ""
        if kind in ("kill-donor", "kill-recipient", "pause-donor"):
            cur = self.in_migration()
            if cur is None:
                what = " (no migration in flight)"
            else:
                shard = cur[1] if kind == "kill-recipient" else cur[0]
                what = " (migration %s -> %s)" % cur
        if kind == "kill-shard-member":
            target = "%s/%s" % (shard, self.rng.choice(MEMBERS))
        elif kind.endswith("config"):
            target = "cfg"
        elif kind == "kill-router":
            target = self.rng.choice(ROUTERS)
        else:
            target = self.primary(shard)
        if target in self.dead or target in self.paused:
            self.note(kind, "%s: already down, nothing done" % target)
        elif kind.startswith("kill"):
            if self.c.signal(target, signal.SIGKILL):
                self.dead.add(target)
            self.note(kind, target + what)
        elif self.c.signal(target, signal.SIGSTOP):
            self.paused.add(target)
            self.note(kind, target + what)
        return kind

    def states(self):
        out = {}
        for name, agent in self.sets.items():
            st = agent.statuses(1000)
            out[name] = {m: s.get("myState") if s else None for m, s in st.items()}
        return out

    def heal_all(self):
        if self.paused or self.dead:
            self.note("before-heal", self.states())
        for p in sorted(self.paused):
            self.c.signal(p, signal.SIGCONT)
            self.note("resume", p)
        for p in sorted(self.dead):
            self.c.restart(p)
            self.note("restart", p)
        self.paused, self.dead = set(), set()


def settle(hosts_by_shard, timeout_s):
    """Seconds until no shard primary holds a migrationCoordinators or
    rangeDeletions document (None: still some after timeout_s)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        left = 0
        try:
            for hosts in hosts_by_shard.values():
                uri = "mongodb://%s/?replicaSet=%s" % (",".join(hosts["hosts"].values()),
                                                       hosts["name"])
                with pymongo.MongoClient(uri, serverSelectionTimeoutMS=3000) as c:
                    left += c.config.migrationCoordinators.count_documents({})
                    left += c.config.rangeDeletions.count_documents({})
        except PyMongoError:
            left = -1
        if left == 0:
            return round(time.monotonic() - t0, 1)
        time.sleep(0.5)
    return None


FINAL_READ_TRIES = 4
FINAL_READ_GAP_S = 2.0


def final_read(host, workload, key):
    """One final read on host (a router, or a shard member directly)."""
    with pymongo.MongoClient("mongodb://%s/?directConnection=true&readPreference="
                             "secondaryPreferred" % host, serverSelectionTimeoutMS=5000,
                             retryReads=False) as c:
        coll = c[workload_mod.DB][workload]
        if workload == "set":
            return sorted(d["_id"] for d in coll.find({"k": key}, {"_id": 1}))
        return {d["_id"]: d["b"] for d in coll.find({})}


def final_reads(agent, cluster, workload, ns):
    """The final reads (history events in agent's recorder): the whole set
    or bank through each router, and for set on each shard member with the
    ranges its shard owns; returns the set's orphans {node: count}."""
    rec, orphans = agent.rec, {}
    with router_client(cluster.router_hosts().values()) as c:
        owned = {}
        for lo, hi, shard in chunks(c, ns):
            owned.setdefault(shard, []).append([lo, hi])
    nodes = [(r, h, None) for r, h in cluster.router_hosts().items()]
    if workload == "set":
        nodes += [("%s/%s" % (s, m), h, s) for s in SHARDS for m, h in cluster.hosts(s).items()]
    for node, host, shard in nodes:
        key = "s" if workload == "set" else "bank"
        value = None if shard is None else {"shard": shard, "owns": owned.get(shard, [])}
        proc = "final-%s" % node
        # A read refused in the moments after the last heal (a shard still
        # electing, a router still finding its primary) is asked again, a few
        # times: the check needs the final state, and each refusal stays in
        # the history with its error (the report's "no final read" names it
        # when every attempt failed).
        for attempt in range(FINAL_READ_TRIES):
            if attempt:
                time.sleep(FINAL_READ_GAP_S)
            rec.add(process=proc, type="invoke", f="final-read", key=key, value=value, node=node)
            try:
                v = final_read(host, workload, key)
            except PyMongoError as e:
                rec.add(process=proc, type="fail", f="final-read", key=key, value=None,
                        node=node, error=str(e)[:120])
                continue
            rec.add(process=proc, type="ok", f="final-read", key=key, value=v, node=node)
            if shard is not None:
                own = owned.get(shard, [])
                n = sum(1 for x in v if not any((lo is None or x >= lo) and (hi is None or x < hi)
                                                for lo, hi in own))
                if n:
                    orphans[node] = n
            break
    return orphans


def run_round(args, workload, seed, rdir):
    os.makedirs(rdir, exist_ok=True)
    rng = random.Random(seed)
    history = os.path.join(rdir, "history.jsonl")
    report = {"seed": seed, "workload": workload, "mode": "loopback-sharded"}
    print("round seed=%s workload=%s mode=loopback-sharded dir=%s" % (seed, workload, rdir),
          flush=True)
    cluster = Cluster(os.path.join(rdir, "cluster"), args)
    nem = mig = agent = None
    try:
        t_init = time.monotonic()
        cluster.start()
        with router_client(cluster.router_hosts().values(), 20000) as c:
            ns = shard_collections(c, workload)
        report["init_s"] = round(time.monotonic() - t_init, 2)
        sets = {s: set_agent(cluster.hosts(s), args) for s in SHARDS}
        agent = RoutedAgent(argparse.Namespace(
            hosts=",".join("%s=%s" % kv for kv in cluster.router_hosts().items()),
            workload=workload, seed=str(seed), threads=args.threads, think_ms=40,
            op_timeout_ms=5000, read_concern="majority", out=history,
            election_timeout_ms=args.election_timeout_ms, converge_s=args.converge_s))
        t0 = time.monotonic()
        agent.cmd_start({})
        mig = Migrator(cluster.router_hosts().values(), ns, seed * 7 + 1, t0)
        mig.start()
        nem = Nemesis(cluster, sets, mig, rng, t0)
        end = t0 + args.duration
        while True:
            quiet = rng.uniform(1.0, 3.0)
            hold = rng.uniform(args.hold_min, args.hold_max)
            if time.monotonic() + quiet + hold > end:
                break
            time.sleep(quiet)
            nem.inject()
            time.sleep(hold)
            if rng.random() < 0.7:   # mostly one fault at a time; sometimes they pile up
                nem.heal_all()
        nem.heal_all()
        time.sleep(max(0.0, end - time.monotonic()))
        mig.stop_ev.set()
        report["stop"] = agent.cmd_stop({})
        mig.join(timeout=180)
        conv = {s: sets[s].convergence() for s in SHARDS}
        report["settle_s"] = settle({s: {"name": s, "hosts": cluster.hosts(s)} for s in SHARDS},
                                    args.converge_s)
        orphans = final_reads(agent, cluster, workload, ns)
        agent.write_history()
    finally:
        if nem is not None:
            for p in sorted(nem.paused):
                cluster.signal(p, signal.SIGCONT)
        if mig is not None:
            mig.stop_ev.set()
        if agent is not None:
            agent.stop_ev.set()
            if agent.client:
                agent.client.close()
        cluster.teardown()
    events = read_events(history) + nem.events
    events.sort(key=lambda e: e["time"])
    with open(history, "w", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(e, separators=(",", ":"), default=str) + "\n")
    with open(os.path.join(rdir, "migrations.jsonl"), "w") as f:
        for e in mig.log:
            f.write(json.dumps(e, default=str) + "\n")
    ops, nemesis = pair(events)
    readers = set(ROUTERS) | ({"%s/%s" % (s, m) for s in SHARDS for m in MEMBERS}
                              if workload == "set" else set())
    res, lines = harness.check(workload, ops, readers, args.time_limit)
    t0ns = int(t0 * 1e9)
    report.update({
        "faults": [{"at_s": round((e["time"] - t0ns) / 1e9, 1), "f": e["f"], "value": e["value"]}
                   for e in nemesis],
        "ops": outcome_counts([op for op in ops if op.f != "final-read"]),
        "failovers": harness.failovers(ops, nemesis, FAILOVER_KINDS),
        "migrations": mig.counts(), "convergence": conv, "orphans": orphans,
        "checker": {"valid": res["valid"], "report": lines}, "anomalies": [],
    })
    if res["valid"] is not True:
        report["anomalies"].append("checker: %s" % res["valid"])
    for s, c in conv.items():
        if not (c["converged"] and not c["diverged"] and c.get("oplog", {}).get("agree")):
            report["anomalies"].append("convergence of %s: converged=%s diverged=%s oplogs "
                                       "agree=%s" % (s, c["converged"], c["diverged"],
                                                     c.get("oplog", {}).get("agree")))
    if report["settle_s"] is None:
        report["anomalies"].append("migration documents left after %ss" % args.converge_s)
    elif orphans:
        report["anomalies"].append("orphans with no range deletion pending: %s" % orphans)
    read_on = {op.node for op in ops if op.f == "final-read" and op.type == "ok"}
    report["final_read_refusals"] = ["%s: %s" % (e["node"], e.get("error")) for e in events
                                     if e.get("f") == "final-read" and e["type"] == "fail"]
    if readers - read_on:
        report["anomalies"].append("no final read from %s (%s)" % (
            sorted(readers - read_on), "; ".join(report["final_read_refusals"])))
    report["valid"] = not report["anomalies"]
    with open(os.path.join(rdir, "report.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    print_round(report)
    if report["valid"] and not args.keep:
        shutil.rmtree(os.path.join(rdir, "cluster"), ignore_errors=True)
    return report


def print_round(r):
    print("  ops %s; faults %d; migrations %s; failovers %s" % (
        r["ops"], sum(f["f"] not in harness.HEALS for f in r["faults"]), r["migrations"],
        [f["seconds"] for f in r["failovers"]]))
    for line in r.get("final_read_refusals", []):
        print("  final read refused (asked again): %s" % line)
    for s, c in r["convergence"].items():
        print("  convergence of %s: converged=%s in %ss, diverged=%s, dbHash %s, oplogs agree=%s"
              % (s, c["converged"], c.get("converge_s"), c["diverged"],
                 "equal" if len(set(c["dbhash"].values())) == 1 else c["dbhash"],
                 c.get("oplog", {}).get("agree")))
    print("  migrations settled in %ss; orphans %s" % (r["settle_s"], r["orphans"] or "none"))
    for line in r["checker"]["report"]:
        print("  " + line)
    print("  verdict: %s %s" % ("VALID" if r["valid"] else "INVALID", "; ".join(r["anomalies"])),
          flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="set", help="set, bank or a comma list (rounds cycle)")
    harness.add_round_args(ap)
    ap.add_argument("--converge-s", type=float, default=90)
    ap.add_argument("--time-limit", type=float, default=30)
    ap.add_argument("--out", default=None)
    ap.add_argument("--summary", default=None, help="write the run's summary (JSON) here")
    ap.add_argument("--keep", action="store_true", help="keep the valid rounds' cluster files")
    a = ap.parse_args(argv)
    workloads = a.workload.split(",")
    if set(workloads) - set(SPLITS):
        ap.error("--workload: set or bank")
    router = os.path.join(os.path.dirname(harness.sabled_path()), "sable-router")
    if not os.path.exists(router):
        print("sable-router not built (%s)" % router, file=sys.stderr)
        return 2
    if a.seed is None:
        a.seed = int.from_bytes(os.urandom(4), "little")
    out = a.out or tempfile.mkdtemp(prefix="sable-faults-sharded-")
    print("faults (sharded): seed %d, %d rounds, workload %s, mode loopback (kill and pause "
          "faults, no partitions), out %s" % (a.seed, a.rounds, a.workload, out), flush=True)
    reports = []
    for i in range(a.rounds):
        w = workloads[i % len(workloads)]
        try:
            reports.append(run_round(a, w, a.seed + i, os.path.join(out, "round-%d" % i)))
        except (RuntimeError, PyMongoError) as e:
            print("  round error: %s" % e, flush=True)
            reports.append({"seed": a.seed + i, "workload": w, "valid": False,
                            "anomalies": ["harness: %s" % e], "faults": [], "ops": {},
                            "failovers": []})
    summary = harness.summarize(reports)
    summary["migrations"] = {}
    for r in reports:
        for k, v in r.get("migrations", {}).items():
            summary["migrations"][k] = summary["migrations"].get(k, 0) + v
    summary.update({"seed": a.seed, "mode": "loopback-sharded", "out": out})
    print("summary: %s" % json.dumps(summary), flush=True)
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump({"summary": summary, "rounds": reports}, f, indent=1, default=str)
    return 0 if summary["invalid"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
