"""
The client side of a fault-test round (issue 25): a process that the
harness (harness.py) starts where the members are reachable (the bridge
namespace, or the root namespace on loopback) and drives by JSON lines on
stdin, one reply line on stdout per command:

    {"cmd": "init"}    wait for every member, replSetInitiate, wait for a primary
    {"cmd": "status"}  {"primary": name or null, "up": [names answering],
                        "states": {name: replSetGetStatus.myState or null}}
    {"cmd": "start"}   start the workload's client threads
    {"cmd": "stop"}    stop them (in-flight operations finish or time out)
    {"cmd": "final"}   wait for convergence, final reads on every member,
                       dbHash and oplog comparison; writes the history file
    {"cmd": "exit"}

Workloads (pymongo, one MongoClient shared by `threads` client threads,
each a history process; retryable writes and reads off, so a write is sent
once):
  register: read (find, readConcern linearizable by default), write (update upsert $set,
            w:majority), cas (findAndModify {_id, v: expected} -> $set v,
            w:majority) on keys that rotate every 10 s;
  set:      unique inserts {_id: element, k: key} w:majority, reads of all
            elements of the key (readConcern majority by default);
  append:   $push of unique elements to {_id: key, l: [...]} (upsert,
            w:majority), reads of the list; keys rotate every 10 s;
  bank:     BANK_ACCOUNTS accounts {_id: "a<i>", b: balance} created with
            BANK_BALANCE each before the first transfer; a transfer moves an
            amount from one account to another in a multi-document
            transaction (readConcern snapshot, w:majority): a conditional
            $inc of -amount ({b: {$gte: amount}}), then $inc of +amount,
            then commit; either $inc that matched or modified nothing
            aborts the transaction (fail, with the reason; the credit's
            account always exists, so its miss is a snapshot without it);
            a transfer's completion value is {"n": [debit, credit],
            "nModified": [debit, credit]} (null for what did not run);
            an error before the commit: fail, the server aborts; an
            error in the commit: info; reads
            of every account alternate between a transaction and a find with
            readConcern snapshot, so every read is one snapshot.
Outcomes as Jepsen's: ok; fail when the operation certainly did not take
effect (duplicate key, a cas that matched nothing, no server selected,
NotWritablePrimary before anything was done; every failed read); info for
everything else (timeouts, network errors, write-concern errors): it may
have taken effect.  After an info, the thread continues as a new process.
"""
import argparse
import hashlib
import json
import random
import sys
import threading
import time

import bson
import pymongo
from pymongo.errors import (AutoReconnect, DuplicateKeyError, OperationFailure, PyMongoError,
                            ServerSelectionTimeoutError, WriteConcernError)
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

DB = "jepsen"
BANK_ACCOUNTS = 5
BANK_BALANCE = 100
# refused before anything was done: NotWritablePrimary, NotPrimaryNoSecondaryOk,
# OutOfDiskSpace (sabled's free-space guard)
NOT_WRITABLE = {10107, 13435, 14031}
# a reconfig worth retrying on the next primary: NotWritablePrimary,
# InterruptedDueToReplStateChange, ConfigurationInProgress, the old config not
# yet committed (CurrentConfigNotCommittedYet)
RECONFIG_RETRY = (10107, 11602, 109, 308)


def now():
    return time.monotonic_ns()


class Recorder:
    """Thread-safe history writer (events kept in memory, written at the end)."""

    def __init__(self):
        self.events, self.lock = [], threading.Lock()

    def add(self, **e):
        e.setdefault("time", now())
        with self.lock:
            self.events.append(e)


def classify(exc, is_read):
    """fail or info for an exception (see the module doc)."""
    if is_read:
        return "fail"
    if isinstance(exc, DuplicateKeyError):
        return "fail"
    if isinstance(exc, ServerSelectionTimeoutError):
        return "fail"
    if isinstance(exc, WriteConcernError):
        return "info"
    details = getattr(exc, "details", None)
    code = getattr(exc, "code", None) or (details.get("code") if isinstance(details, dict)
                                           else None)
    if code in NOT_WRITABLE:
        return "fail"
    return "info"


class Agent:
    def __init__(self, a):
        self.a = a
        self.hosts = dict(h.split("=", 1) for h in a.hosts.split(","))   # name -> host:port
        self.names = list(self.hosts)
        self.rec = Recorder()
        self.stop_ev = threading.Event()
        self.threads = []
        self.rng = random.Random(a.seed)
        self.t0 = time.monotonic()
        self.keys_seen = set()
        self.keys_lock = threading.Lock()
        self.next_pid = a.threads
        self.pid_lock = threading.Lock()
        self.client = None

    # ------------------------------------------------------------- helpers

    def direct(self, name, timeout_ms=1500):
        return pymongo.MongoClient("mongodb://%s/?directConnection=true&readPreference="
                                   "secondaryPreferred" % self.hosts[name],
                                   serverSelectionTimeoutMS=timeout_ms,
                                   connectTimeoutMS=timeout_ms, socketTimeoutMS=timeout_ms * 2,
                                   retryWrites=False, retryReads=False)

    def statuses(self, timeout_ms=1500):
        """{name: replSetGetStatus or None}, members asked in parallel."""
        out = {}

        def ask(n):
            try:
                with self.direct(n, timeout_ms) as c:
                    out[n] = c.admin.command("replSetGetStatus")
            except PyMongoError:
                out[n] = None

        ts = [threading.Thread(target=ask, args=(n,)) for n in self.names]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return out

    def primary(self, st=None):
        st = st or self.statuses()
        ps = [n for n, s in st.items() if s and s.get("myState") == 1]
        if len(ps) == 1:
            return ps[0]
        if len(ps) > 1:   # two believe they lead: the one in the highest term
            return max(ps, key=lambda n: st[n].get("term", 0))
        return None

    # --------------------------------------------------------------- init

    def cmd_init(self, _):
        end = time.monotonic() + 60
        for n in self.names:
            while True:
                try:
                    with self.direct(n) as c:
                        c.admin.command("ping")
                    break
                except PyMongoError:
                    if time.monotonic() > end:
                        return {"error": "member %s does not answer" % n}
                    time.sleep(0.2)
        cfg = {"_id": "rs0", "members": [{"_id": i, "host": self.hosts[n]}
                                         for i, n in enumerate(self.names)],
               "settings": {"electionTimeoutMillis": self.a.election_timeout_ms,
                            "heartbeatIntervalMillis": 500}}
        with self.direct(self.names[0], 10000) as c:
            c.admin.command("replSetInitiate", cfg)
        while time.monotonic() < end:
            st = self.statuses()
            p = self.primary(st)
            if p and all(s and s.get("myState") in (1, 2) for s in st.values()):
                return {"primary": p}
            time.sleep(0.3)
        return {"error": "no primary with all members up within 60 s"}

    def cmd_status(self, _):
        st = self.statuses(1000)
        return {"primary": self.primary(st), "up": [n for n, s in st.items() if s],
                "states": {n: s.get("myState") if s else None for n, s in st.items()}}

    def cmd_reconfig(self, msg):
        """replSetReconfig on the primary of the moment: {"remove": name}
        or {"priorities": {name: p}} (a primary that would be removed or get
        priority 0 is stepped down first), or {"restore": true} (every member, priority
        1; nothing when the config already is so).  Retries until timeout_s
        when there is no primary or the primary refuses; returns {"version"}
        or {"error"}."""
        end = time.monotonic() + msg.get("timeout_s", 5)
        err = "no primary"
        while True:
            p = self.primary(self.statuses(1000))
            if p is not None:
                try:
                    with self.direct(p, 3000) as c:
                        cfg = c.admin.command("replSetGetConfig")["config"]
                        new = self.reconfigured(cfg, msg)
                        if new is None:
                            return {"version": cfg["version"]}
                        if msg.get("remove") == p or msg.get("priorities", {}).get(p, 1) == 0:
                            # a primary cannot remove itself nor make itself unelectable
                            try:
                                c.admin.command("replSetStepDown", 10)
                            except PyMongoError:
                                pass   # it closes connections as it steps down
                            raise AutoReconnect("stepped %s down first" % p)
                        new["version"] = cfg["version"] + 1
                        c.admin.command("replSetReconfig", new)
                        return {"version": new["version"]}
                except PyMongoError as e:
                    err = "%s: %s" % (type(e).__name__, str(e)[:160])
                    if getattr(e, "code", None) not in (None,) + RECONFIG_RETRY:
                        return {"error": err}   # refused: NodeNotElectable, ...
            if time.monotonic() > end:
                return {"error": err}
            time.sleep(0.5)

    def cmd_fsync(self, msg):
        """fsync (a checkpoint) on one member; {"ok"} or {"error"}."""
        try:
            with self.direct(msg["member"], 3000) as c:
                c.admin.command("fsync")
            return {"ok": 1}
        except PyMongoError as e:
            return {"error": "%s: %s" % (type(e).__name__, str(e)[:160])}

    def reconfigured(self, cfg, msg):
        """The config msg asks for, from cfg; None when cfg already is it."""
        by_host = {h: n for n, h in self.hosts.items()}
        ids = {by_host.get(m["host"]): m for m in cfg["members"]}
        if msg.get("remove"):
            if msg["remove"] not in ids or len(ids) < len(self.names):
                return None   # one member out at a time
            members = [m for n, m in ids.items() if n != msg["remove"]]
        elif msg.get("priorities"):
            members = [dict(m, priority=msg["priorities"].get(n, 1)) for n, m in ids.items()]
        else:
            members = [dict(ids.get(n) or {"_id": i, "host": self.hosts[n]}, priority=1)
                       for i, n in enumerate(self.names)]
            if all(n in ids and ids[n].get("priority", 1) == 1 for n in self.names):
                return None
        return dict(cfg, members=members)

    # ----------------------------------------------------------- workload

    def new_pid(self):
        with self.pid_lock:
            self.next_pid += 1
            return self.next_pid - 1

    def key_window(self, rng, n):
        """Keys rotate every 10 s so no key's history grows too long."""
        w = int((time.monotonic() - self.t0) // 10)
        k = "k%d" % (w * n + rng.randrange(n))
        with self.keys_lock:
            self.keys_seen.add(k)
        return k

    def client_uri(self):
        """The workload's connection string (a subclass: through routers)."""
        return "mongodb://%s/?replicaSet=rs0" % ",".join(self.hosts.values())

    def cmd_start(self, _):
        self.client = pymongo.MongoClient(
            self.client_uri(), serverSelectionTimeoutMS=2000,
            connectTimeoutMS=2000, socketTimeoutMS=self.a.op_timeout_ms,
            heartbeatFrequencyMS=500, retryWrites=False, retryReads=False,
            maxPoolSize=self.a.threads * 2)
        if self.a.workload == "bank":
            self.bank_setup()
        for i in range(self.a.threads):
            t = threading.Thread(target=self.worker, args=(i,), daemon=True)
            t.start()
            self.threads.append(t)
        return {"started": self.a.threads}

    def worker(self, i):
        rng = random.Random("%s-%d" % (self.a.seed, i))
        wc = WriteConcern(w="majority", wtimeout=self.a.op_timeout_ms)
        db = self.client.get_database(DB, write_concern=wc,
                                      read_concern=ReadConcern(self.a.read_concern))
        pid, n = i, 0
        while not self.stop_ev.is_set():
            n += 1
            f, key, value, call = self.pick(rng, i, n)
            self.rec.add(process=pid, type="invoke", f=f, key=key, value=value)
            try:
                out = self.run(db, f, key, value)
                if out is FAIL_MARK:
                    self.rec.add(process=pid, type="fail", f=f, key=key, value=value)
                elif isinstance(out, Refused):
                    self.rec.add(process=pid, type="fail", f=f, key=key, value=out.value,
                                 error=out.reason)
                else:
                    self.rec.add(process=pid, type="ok", f=f, key=key,
                                 value=out if f in ("read", "transfer") else value)
            except PyMongoError as e:
                typ = classify(e, f == "read")
                if isinstance(e, BeforeCommit):   # the transaction never committed
                    typ = "fail"
                self.rec.add(process=pid, type=typ, f=f, key=key, value=value,
                             error="%s: %s" % (type(e).__name__, str(e)[:120]))
                if typ == "info":
                    pid = self.new_pid()
                time.sleep(0.1)   # no hot loop while there is no primary
            time.sleep(rng.uniform(0, self.a.think_ms / 1000.0))

    def pick(self, rng, i, n):
        w = self.a.workload
        if w == "register":
            key = self.key_window(rng, 3)
            r = rng.random()
            if r < 0.4:
                return "read", key, None, None
            if r < 0.7:
                return "write", key, rng.randrange(5), None
            return "cas", key, [rng.randrange(5), rng.randrange(5)], None
        if w == "bank":
            if rng.random() < 0.3:
                return "read", "bank", rng.choice(["txn", "snapshot"]), None
            a, b = rng.sample(range(BANK_ACCOUNTS), 2)
            return "transfer", "bank", ["a%d" % a, "a%d" % b, rng.randint(1, 30)], None
        elem = i * 1000000 + n
        if w == "set":
            return ("read", "s", None, None) if rng.random() < 0.1 else ("add", "s", elem, None)
        key = self.key_window(rng, 3)
        return ("read", key, None, None) if rng.random() < 0.3 else ("append", key, elem, None)

    def run(self, db, f, key, value):
        w = self.a.workload
        if w == "bank":
            return self.run_bank(db, f, value)
        if w == "register":
            c = db.register
            if f == "read":
                d = c.find_one({"_id": key})
                return None if d is None else d.get("v")
            if f == "write":
                c.update_one({"_id": key}, {"$set": {"v": value}}, upsert=True)
                return value
            d = c.find_one_and_update({"_id": key, "v": value[0]}, {"$set": {"v": value[1]}})
            return FAIL_MARK if d is None else value
        if w == "set":
            c = db.set
            if f == "read":
                return sorted(d["_id"] for d in c.find({"k": key}, {"_id": 1}))
            c.insert_one({"_id": value, "k": key})
            return value
        c = db.append
        if f == "read":
            d = c.find_one({"_id": key})
            return [] if d is None else d.get("l", [])
        c.update_one({"_id": key}, {"$push": {"l": value}}, upsert=True)
        return value

    def run_bank(self, db, f, value):
        """A transfer or a snapshot read (see the module doc).  A read's
        mode ("txn" or "snapshot") is its invoke value."""
        c = db.bank
        txn = {"read_concern": ReadConcern("snapshot"),
               "write_concern": WriteConcern(w="majority", wtimeout=self.a.op_timeout_ms)}
        if f == "read" and value == "snapshot":
            snap = db.get_collection("bank", read_concern=ReadConcern("snapshot"))
            return {d["_id"]: d["b"] for d in snap.find({})}
        with self.client.start_session() as s:
            s.start_transaction(**txn)
            try:
                if f == "read":
                    out = {d["_id"]: d["b"] for d in c.find({}, session=s)}
                else:
                    out = self.transfer(c, s, value)
                    if isinstance(out, Refused):
                        s.abort_transaction()
                        return out
            except PyMongoError as e:
                if s.in_transaction:
                    try:
                        s.abort_transaction()
                    except PyMongoError:
                        pass
                raise BeforeCommit(e) from e
            s.commit_transaction()
            return out

    @staticmethod
    def transfer(c, s, value):
        """A transfer's two $inc in session s's transaction: their counts
        ({"n": [debit, credit], "nModified": [...]}), or Refused with them
        when one matched or modified nothing (the caller aborts)."""
        src, dst, amount = value
        out = {"n": [None, None], "nModified": [None, None]}
        for i, (q, inc, what) in enumerate((
                ({"_id": src, "b": {"$gte": amount}}, -amount,
                 "debit matched nothing (balance below the amount)"),
                ({"_id": dst}, amount, "credit matched nothing (the account missing)"))):
            r = c.update_one(q, {"$inc": {"b": inc}}, session=s)
            out["n"][i], out["nModified"][i] = r.matched_count, r.modified_count
            if r.matched_count == 0 or r.modified_count == 0:
                return Refused(out, "%s: n %d, nModified %d" % (
                    what, r.matched_count, r.modified_count))
        return out

    def bank_setup(self):
        """Create the accounts (w:majority) before the first transfer,
        retrying through failovers for up to 60 s."""
        c = self.client.get_database(DB, write_concern=WriteConcern(w="majority")).bank
        docs = [{"_id": "a%d" % i, "b": BANK_BALANCE} for i in range(BANK_ACCOUNTS)]
        end = time.monotonic() + 60
        while True:
            try:
                for d in docs:
                    c.replace_one({"_id": d["_id"]}, d, upsert=True)
                return
            except PyMongoError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.5)

    def cmd_stop(self, _):
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=self.a.op_timeout_ms / 1000.0 + 10)
        alive = sum(t.is_alive() for t in self.threads)
        return {"stopped": True, "stuck_threads": alive}

    # -------------------------------------------------------------- final

    def applied(self, s):
        o = (s or {}).get("optimes", {}).get("appliedOpTime") or {}
        ts = o.get("ts")
        return (o.get("t"), ts.time if ts else None, ts.inc if ts else None)

    def cmd_final(self, _):
        res = self.convergence()
        self.final_reads()
        self.write_history()
        return res

    def convergence(self):
        """Wait (up to --converge-s) for one primary and every member on the
        same applied optime; then the members' dbHash and oplogs compared.
        {converged, converge_s, primary, members, dbhash, oplog, diverged,
        final_nodes}."""
        res = {"converged": False, "members": {}, "diverged": []}
        end = time.monotonic() + self.a.converge_s
        t0 = time.monotonic()
        st = {}
        while time.monotonic() < end:
            st = self.statuses(2000)
            p = self.primary(st)
            if p and all(st.values()):
                ops = {n: self.applied(s) for n, s in st.items()}
                states = {n: s.get("myState") for n, s in st.items()}
                if len(set(ops.values())) == 1 and sorted(states.values()) == [1] + [2] * (
                        len(self.names) - 1):
                    res["converged"] = True
                    break
            time.sleep(0.5)
        res["converge_s"] = round(time.monotonic() - t0, 2)
        p = self.primary(st)
        res["primary"] = p
        for n in self.names:
            s = st.get(n)
            res["members"][n] = {"state": s.get("myState") if s else None,
                                 "applied": list(self.applied(s)) if s else None}
        res["dbhash"] = self.dbhashes()
        res["oplog"] = self.oplog_check(p)
        good = [n for n in self.names if res["dbhash"].get(n) is not None]
        if good:
            ref = res["dbhash"].get(p) if p in good else None
            if ref is None:   # most common digest
                vals = [res["dbhash"][n] for n in good]
                ref = max(set(vals), key=vals.count)
            res["diverged"] = [n for n in self.names if res["dbhash"].get(n) != ref]
        res["final_nodes"] = [n for n in self.names if n not in res["diverged"]]
        return res

    def write_history(self):
        self.rec.events.sort(key=lambda e: e["time"])   # stable: completions stay after invokes
        with open(self.a.out, "w", encoding="utf-8") as f:
            for e in self.rec.events:
                f.write(json.dumps(e, separators=(",", ":"), default=str) + "\n")

    def dbhashes(self):
        out = {}
        for n in self.names:
            try:
                with self.direct(n, 5000) as c:
                    out[n] = c[DB].command("dbHash")["md5"]
            except PyMongoError:
                out[n] = None
        return out

    def oplog_check(self, p):
        """Oplogs agree up to the commit point: the entries (ts, t, op, ns, o)
        with ts <= the primary's lastCommittedOpTime, digested per member,
        from the newest of the members' first entries (a member's oplog
        starts where its initial sync began: the source's newest entry then,
        as on mongod)."""
        if p is None:
            return {"error": "no primary"}
        try:
            with self.direct(p, 5000) as c:
                cp = c.admin.command("replSetGetStatus")["optimes"]["lastCommittedOpTime"]["ts"]
        except (PyMongoError, KeyError) as e:
            return {"error": "commit point: %s" % e}
        digests, counts, start = {}, {}, bson.Timestamp(0, 0)
        for n in self.names:
            try:
                with self.direct(n, 5000) as c:
                    first = c.local["oplog.rs"].find_one({}, sort=[("$natural", 1)])
                    if first is not None and first["ts"] > start:
                        start = first["ts"]
            except PyMongoError:
                pass
        for n in self.names:
            try:
                with self.direct(n, 5000) as c:
                    h, k = hashlib.md5(), 0
                    for e in c.local["oplog.rs"].find(
                            {"ts": {"$gte": start, "$lte": cp}}).sort("$natural", 1):
                        h.update(bson.BSON.encode({"ts": e["ts"], "t": e.get("t"),
                                                   "op": e["op"], "ns": e["ns"],
                                                   "o": e.get("o")}))
                        k += 1
                    digests[n], counts[n] = h.hexdigest(), k
            except PyMongoError:
                digests[n] = None
        return {"commit_point": [cp.time, cp.inc], "from": [start.time, start.inc],
                "entries": counts, "digests": digests,
                "agree": len(set(digests.values())) == 1}

    def final_reads(self):
        w = self.a.workload
        if w == "register":
            return
        keys = {"set": ["s"], "bank": ["bank"]}.get(w) or sorted(self.keys_seen)
        for n in self.names:
            for k in keys:
                self.rec.add(process="final-%s" % n, type="invoke", f="final-read", key=k,
                             value=None, node=n)
                try:
                    with self.direct(n, 5000) as c:
                        if w == "set":
                            v = sorted(d["_id"] for d in c[DB].set.find({"k": k}, {"_id": 1}))
                        elif w == "bank":
                            v = {d["_id"]: d["b"] for d in c[DB].bank.find({})}
                        else:
                            d = c[DB].append.find_one({"_id": k})
                            v = [] if d is None else d.get("l", [])
                    self.rec.add(process="final-%s" % n, type="ok", f="final-read", key=k,
                                 value=v, node=n)
                except PyMongoError as e:
                    self.rec.add(process="final-%s" % n, type="fail", f="final-read", key=k,
                                 value=None, node=n, error=str(e)[:120])

    # --------------------------------------------------------------- loop

    def serve(self):
        for line in sys.stdin:
            if not line.strip():
                continue
            msg = json.loads(line)
            cmd = msg.get("cmd")
            if cmd == "exit":
                break
            try:
                out = getattr(self, "cmd_" + cmd)(msg)
            except Exception as e:   # reported, the harness decides
                out = {"error": "%s: %s" % (type(e).__name__, e)}
            sys.stdout.write(json.dumps(out, default=str) + "\n")
            sys.stdout.flush()
        self.stop_ev.set()
        if self.client:
            self.client.close()


FAIL_MARK = object()


class Refused:
    """An operation that certainly did not take effect, for a reason the
    history keeps (its "error"), with a completion value."""

    def __init__(self, value, reason):
        self.value, self.reason = value, reason


class BeforeCommit(PyMongoError):
    """A transaction's error before its commit was sent: it did not commit."""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=["register", "set", "append", "bank"], required=True)
    ap.add_argument("--hosts", required=True, help="name=host:port,...")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--threads", type=int, default=5)
    ap.add_argument("--think-ms", type=int, default=40)
    ap.add_argument("--op-timeout-ms", type=int, default=5000)
    ap.add_argument("--read-concern", default="majority")
    ap.add_argument("--election-timeout-ms", type=int, default=2000)
    ap.add_argument("--converge-s", type=float, default=60)
    ap.add_argument("--out", required=True)
    Agent(ap.parse_args()).serve()


if __name__ == "__main__":
    main()
