"""
Drivers on a replica set with authentication (issue 24, rs-clients): a
3-member set (primary, secondary, hidden) whose members authenticate to
each other with a keyFile, a root user, and clients on seed 002's kind of
command line (replicaSet=rs0, authSource=admin).  pymongo and the Node
driver write with w:"majority" before and after kill -9 of the primary and
carry on against the new primary; libmongoc's does the same through
sable-bench (YCSB's client in C).  Also: the keyFile's rules.

The set is started with build/sable-cluster (the launcher users run) on
free ports in a temporary directory, electionTimeoutMillis 2000, and
stopped in the fixture's finally.
"""
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time

import pymongo
import pytest
from bson.son import SON
from pymongo.errors import DuplicateKeyError, AutoReconnect, ConnectionFailure, NotMasterError, \
    OperationFailure, ServerSelectionTimeoutError, WriteConcernError

import sharded  # noqa: E402
from sabled import REPO, Sabled, run_sabled, sabled_path

RETRYABLE = (AutoReconnect, ConnectionFailure, NotMasterError, ServerSelectionTimeoutError,
             WriteConcernError)
KEY = "c2FibGUtdGVzdC1rZXlmaWxlLXNlY3JldA+/="
LAUNCHER = os.path.join(REPO, "scripts", "sable-cluster")
NODE_MODULES = [os.path.join(REPO, "tests", "integration", "node", "node_modules"),
                os.path.join(REPO, "tests", "conformance", "node_modules")]


def port_run(n):
    """n consecutive free ports below the range of outgoing connections."""
    return sharded.base_port(n)


def cluster(*args):
    r = subprocess.run(["/usr/bin/python3", LAUNCHER] + list(args), capture_output=True,
                       text=True, env=dict(os.environ, SABLED=sabled_path()), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


class Set:
    def __init__(self, d, base):
        self.dir, self.base = d, base
        self.ports = [base, base + 1, base + 2]
        hosts = ",".join("127.0.0.1:%d" % p for p in self.ports[:2])
        self.uri = "mongodb://admin:pw@%s/ycsb?replicaSet=rs0&authSource=admin" % hosts

    def primary(self, wait=15):
        """The index of the member that says it is primary, waiting up to wait s
        (a set may be between primaries for an election's time)."""
        end = time.time() + wait
        while True:
            for i, p in enumerate(self.ports):
                try:
                    with pymongo.MongoClient("127.0.0.1", p, directConnection=True,
                                             serverSelectionTimeoutMS=1000) as c:
                        if c.admin.command("hello").get("isWritablePrimary"):
                            return i
                except RETRYABLE:
                    pass
            if time.time() > end:
                return None
            time.sleep(0.25)

    def diagnose(self, pid):
        """What a hung client waits for: its threads' stacks, each live
        member's view of the set and its running operations, and the
        members' last log lines."""
        out = []
        if shutil.which("gdb"):
            r = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 12"],
                               capture_output=True, text=True, timeout=60)
            # the client threads' stacks, not the driver's monitors'
            stacks = r.stdout.split("\nThread ")
            out.append("\nThread ".join(t for t in stacks if "monitor" not in t)[:12000])
        for p in self.ports:
            try:
                with pymongo.MongoClient("127.0.0.1", p, directConnection=True, username="admin",
                                         password="pw", serverSelectionTimeoutMS=2000) as c:
                    st = c.admin.command("replSetGetStatus")
                    out.append("%d: %s commit %s" % (p, st.get("myState"), st.get("optimes")))
                    for m in st.get("members", []):
                        out.append("  %s %s applied %s sync %s" % (
                            m.get("name"), m.get("stateStr"), m.get("optime"),
                            m.get("syncSourceHost")))
                    ops = c.admin.command(SON([("currentOp", 1), ("active", True)]))
                    for op in ops.get("inprog", []):
                        if op.get("command") and "hello" not in op["command"]:
                            out.append("  op %s" % str(op)[:400])
            except Exception as e:  # noqa: BLE001 - a diagnosis, not a check
                out.append("%d: %r" % (p, e))
        for log in sorted(glob.glob(os.path.join(self.dir, "*", "*.log"))):
            with open(log, errors="replace") as f:
                out.append("== " + log + "\n" + "".join(f.readlines()[-40:]))
        return "\n".join(out)

    def kill_primary(self):
        i = self.primary()
        assert i is not None
        cluster("kill", str(i), "--dir", self.dir)
        return i


@pytest.fixture
def rs_auth():
    d = tempfile.mkdtemp(prefix="sable-rs-drivers-")
    key = os.path.join(d, "key")
    with open(key, "w") as f:
        f.write(KEY + "\n")
    os.chmod(key, 0o600)
    base = port_run(3)
    try:
        cluster("start", "--members", "3", "--hidden", "1", "--dir", os.path.join(d, "c"),
                "--port", str(base), "--election-timeout-ms", "2000", "--oplog-mb", "64",
                "--keyfile", key, "--user", "admin", "--password", "pw")
        yield Set(os.path.join(d, "c"), base)
    finally:
        if os.path.exists(os.path.join(d, "c", "cluster.json")):
            subprocess.run(["/usr/bin/python3", LAUNCHER, "stop", "--dir", os.path.join(d, "c")],
                           capture_output=True, timeout=120)
        if os.environ.get("SABLE_TEST_KEEP") != "1":  # keep the logs to debug
            shutil.rmtree(d, ignore_errors=True)


def carry_on(write, timeout=40):
    """Call write() until it succeeds; seconds it took.  An insert retried here
    after an attempt whose outcome was unknown (a network error or a failover
    after it committed) finds its own document: DuplicateKeyError means an
    earlier attempt took effect, which the callers' counts then check."""
    t0 = time.time()
    while True:
        try:
            write()
            return time.time() - t0
        except DuplicateKeyError:
            return time.time() - t0
        except RETRYABLE + (OperationFailure,):
            if time.time() - t0 > timeout:
                raise
            time.sleep(0.2)


def test_keyfile_members_authenticate(rs_auth):
    # without credentials: nothing but hello
    with pymongo.MongoClient("127.0.0.1", rs_auth.ports[1], directConnection=True) as c:
        assert "setName" in c.admin.command("hello")
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("replSetUpdatePosition", optimes=[])
        assert ei.value.code == 13
        with pytest.raises(OperationFailure) as ei:
            c.local.command("find", "oplog.rs")
        assert ei.value.code == 13
    # replication works between members that authenticate with the key
    with pymongo.MongoClient(rs_auth.uri, serverSelectionTimeoutMS=10000) as c:
        coll = c.ycsb.get_collection("k", write_concern=pymongo.WriteConcern(w=3, wtimeout=15000))
        coll.insert_one({"_id": 1})
        # states travel by heartbeat, a little behind the positions w:3 counted
        end = time.time() + 15
        while True:
            st = c.admin.command("replSetGetStatus")
            states = sorted(m["stateStr"] for m in st["members"])
            if states == ["PRIMARY", "SECONDARY", "SECONDARY"] or time.time() > end:
                break
            time.sleep(0.25)
        assert states == ["PRIMARY", "SECONDARY", "SECONDARY"]
    # a wrong key is refused by the members
    with pymongo.MongoClient("mongodb://__system:wrongkey@127.0.0.1:%d/?authSource=local&"
                             "directConnection=true" % rs_auth.ports[0],
                             serverSelectionTimeoutMS=3000) as c:
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("replSetGetStatus")
        assert ei.value.code == 18


def test_keyfile_rules(tmp_path):
    loose = tmp_path / "loose"
    loose.write_text(KEY)
    os.chmod(loose, 0o644)
    r = run_sabled(["--keyFile", str(loose), "--dbpath", str(tmp_path), "--port", "1"])
    assert r.returncode != 0 and "permissions on" in r.stdout + r.stderr
    short = tmp_path / "short"
    short.write_text("abc")
    os.chmod(short, 0o600)
    r = run_sabled(["--keyFile", str(short), "--dbpath", str(tmp_path), "--port", "1"])
    assert r.returncode != 0 and "must be between 6 and 1024" in r.stdout + r.stderr
    # a keyFile turns authorization on
    good = tmp_path / "good"
    good.write_text(KEY)
    os.chmod(good, 0o600)
    s = Sabled()
    try:
        s.start(["--keyFile", str(good)])
        with pymongo.MongoClient(s.uri()) as c:
            with pytest.raises(OperationFailure) as ei:
                c.t.command("find", "c")
            assert ei.value.code == 13
    finally:
        s.cleanup()


NODE_SCRIPT = r"""
const { MongoClient } = require(process.argv[2]);
const client = new MongoClient(process.argv[3], { serverSelectionTimeoutMS: 30000,
                                                  heartbeatFrequencyMS: 500 });
const lines = require('readline').createInterface({ input: process.stdin });
const next = () => new Promise((r) => lines.once('line', r));
(async () => {
  const coll = client.db('ycsb').collection('node', { writeConcern: { w: 'majority' } });
  for (let i = 0; i < 20; i++) await coll.insertOne({ _id: i });
  console.log('READY');
  await next();
  const t0 = Date.now();
  let done = false, errors = 0;
  while (!done) {
    try { await coll.insertOne({ _id: 'after' }); done = true; }
    catch (e) { errors++;
                // an earlier attempt took effect (its acknowledgement was lost
                // to the failover): the count below checks it is there once
                if (e.code === 11000) { done = true; break; }
                if (Date.now() - t0 > 40000) throw e;
                await new Promise((r) => setTimeout(r, 200)); }
  }
  const n = await coll.countDocuments({});
  console.log(JSON.stringify({ n, secs: (Date.now() - t0) / 1000, errors }));
  await client.close();
})().catch((e) => { console.error(e); process.exit(1); });
"""


def test_drivers_carry_on_after_primary_killed(rs_auth, tmp_path):
    """pymongo, the Node driver and libmongoc (sable-bench: YCSB's core
    workload in C) on one set, all with replicaSet= and authSource=admin:
    each works, the primary is killed (kill -9) while they run, and each
    carries on against the new primary."""
    # libmongoc: load, then a 50:50 run that spans the kill
    bench = os.path.join(os.path.dirname(sabled_path()), "sable-bench")
    assert os.path.exists(bench), "sable-bench is built with sabled"
    wl = os.path.join(REPO, "workloads", "workloada")
    props = ["-p", "mongodb.url=" + rs_auth.uri, "-p", "recordcount=300",
             "-p", "mongodb.writeConcern=majority"]
    r = subprocess.run([bench, "load", "mongodb", "-P", wl, "-threads", "2"] + props,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "[INSERT], Return=OK, 300" in r.stdout, r.stdout + r.stderr
    run = subprocess.Popen([bench, "run", "mongodb", "-P", wl, "-threads", "2"] + props + [
        "-p", "operationcount=100000000", "-p", "maxexecutiontime=12",
        "-p", "readproportion=0.5", "-p", "updateproportion=0.5", "-s",
        "-p", "status.interval=1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Node
    mods = [m for m in NODE_MODULES if os.path.isdir(os.path.join(m, "mongodb"))]
    node = None
    if mods and shutil.which("node"):
        script = tmp_path / "carry_on.cjs"
        script.write_text(NODE_SCRIPT)
        node = subprocess.Popen(["node", str(script), os.path.join(mods[0], "mongodb"),
                                 rs_auth.uri], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        if node is not None:
            assert node.stdout.readline().strip() == "READY", node.stderr.read()
        with pymongo.MongoClient(rs_auth.uri, serverSelectionTimeoutMS=20000,
                                 heartbeatFrequencyMS=500) as c:
            coll = c.ycsb.get_collection("py", write_concern=pymongo.WriteConcern(w="majority"))
            for i in range(20):
                coll.insert_one({"_id": i})
            time.sleep(2)  # sable-bench is running
            old = rs_auth.kill_primary()
            if node is not None:
                node.stdin.write("go\n")
                node.stdin.flush()
            secs = carry_on(lambda: coll.insert_one({"_id": "after-kill"}))
            assert coll.count_documents({}) == 21
            print("pymongo: first w:majority write %.1f s after the kill" % secs)
        new = rs_auth.primary()
        assert new not in (None, old)
        if node is not None:
            out, err = node.communicate(timeout=90)
            assert node.returncode == 0, err
            assert json.loads(out.strip().splitlines()[-1])["n"] == 21
        try:
            out, err = run.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("sable-bench ran past maxexecutiontime=12:\n" + rs_auth.diagnose(run.pid))
        # sable-bench's status lines (-s, every second): operations went on
        # after the kill, against the new primary
        counts = [int(l.split(" operations")[0].split()[-1]) for l in err.splitlines()
                  if " operations;" in l]
        assert len(counts) >= 4 and counts[-1] > counts[len(counts) // 2], err[-2000:]
        with pymongo.MongoClient(rs_auth.uri, serverSelectionTimeoutMS=20000) as c:
            assert c.ycsb.usertable.count_documents({}) == 300
    finally:
        for p in (run, node):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        if node is None:
            pytest.skip("pymongo and libmongoc carried on; no Node driver installed "
                        "(npm ci in tests/integration/node)")
