"""
A sharded cluster for tests: a config server and one-member shards started
with build/sable-cluster start --sharded on a free range of ports below
Linux's ephemeral ones, stopped (and its directory removed) afterwards,
even when the start failed half-way.  SABLE_KEEP_CLUSTER=1 keeps the
directory and prints it.

The sharded test files take their module-scoped fixtures from here, so a fix
to one reaches all of them: `cluster = cluster_fixture(prefix, ...)`,
`mongos = mongos_fixture(...)`, `shards = shards_fixture()`, and the helpers
client, direct, fail_point, wait_for, launcher and chunks.  pytest is
imported only by the fixture factories (scripts import this module too).
"""
import contextlib
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pymongo
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from pymongo.errors import OperationFailure, PyMongoError

from sabled import sabled_path

# read and send uuids as stored (subtype 4), whatever a client's setting
STD = CodecOptions(uuid_representation=UuidRepresentation.STANDARD)

BUILD = os.path.dirname(sabled_path())
LAUNCHER = os.path.join(BUILD, "sable-cluster")
ROUTER = os.path.join(BUILD, "sable-router")


def base_port(n):
    """The first of n consecutive free ports (below 32768: Linux gives
    outgoing connections ports from there up)."""
    for _ in range(200):
        base = random.randrange(20000, 32000)
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free port range")


@contextlib.contextmanager
def cluster(prefix, shards=2, router_args=(), launcher_args=(), members=1):
    """Yields {dir, router, config, shards: [ports], env, launcher, stdout};
    the caller checks the router is built (ROUTER) first.  launcher_args go
    to sable-cluster start (e.g. --keyfile K --user U --password P).  With
    members > 1 each shard is a set of that many members: shards lists each
    shard's first member; members: every shard's member ports."""
    d = tempfile.mkdtemp(prefix=prefix)
    if not any("orphanCleanupDelaySecs" in a for a in launcher_args):
        # a migrated range is deleted at once, not after mongod's 15 minutes
        # (mongo's ShardingTest sets 1 s the same way)
        launcher_args = set_parameters(["orphanCleanupDelaySecs=0"]) + list(launcher_args)
    base = base_port(shards * members + 3)
    router = base + shards * members + 2
    env = dict(os.environ, SABLED=sabled_path(), SABLE_ROUTER=ROUTER)
    r = subprocess.run([sys.executable, LAUNCHER, "start", "--sharded", "--shards", str(shards),
                        "--members", str(members), "--port", str(base),
                        "--router-port", str(router), "--oplog-mb", "64", "--dir", d]
                       + ["--router-arg=" + a for a in router_args] + list(launcher_args),
                       capture_output=True, text=True, env=env, timeout=180)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        yield {"dir": d, "router": router, "config": base,
               "shards": [base + 1 + i * members for i in range(shards)],
               "members": [[base + 1 + i * members + j for j in range(members)]
                           for i in range(shards)], "env": env,
               "launcher": LAUNCHER, "stdout": r.stdout}
    finally:
        subprocess.run([sys.executable, LAUNCHER, "stop", "--dir", d], env=env, timeout=120,
                       capture_output=True)
        # a start that failed half-way leaves members the launcher does not know
        for root, _, files in os.walk(d):
            for f in files:
                if f.endswith(".pid"):
                    try:
                        with open(os.path.join(root, f)) as fh:
                            os.kill(int(fh.read().strip()), 15)
                    except (OSError, ValueError):
                        pass
        if os.environ.get("SABLE_KEEP_CLUSTER"):
            print("cluster dir", d)
        else:
            shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def keyfile_cluster(prefix, key, shards=2, launcher_args=()):
    """cluster() with members, router and clients authenticating: the key
    file (text key) is written before the cluster starts and removed after
    it; the launcher creates user admin (password adminpw).  Yields
    cluster()'s dict with keyfile (its path) and key."""
    kd = tempfile.mkdtemp(prefix=prefix + "key-")
    path = os.path.join(kd, "key")
    with open(path, "w") as f:
        f.write(key + "\n")
    os.chmod(path, 0o600)
    try:
        with cluster(prefix, shards=shards,
                     launcher_args=["--keyfile", path, "--user", "admin", "--password",
                                    "adminpw"] + list(launcher_args)) as c:
            c["keyfile"], c["key"] = path, key
            yield c
    finally:
        shutil.rmtree(kd, ignore_errors=True)


@contextlib.contextmanager
def extra_router(info, name="router2", args=()):
    """Another sable-router on the cluster's config servers (its log in the
    cluster's directory; args added to its command line, e.g. --keyFile K);
    yields its port and stops it afterwards."""
    port = base_port(1)
    log = os.path.join(info["dir"], name + ".log")
    subprocess.run([ROUTER, "--configdb", "cfgRS/127.0.0.1:%d" % info["config"],
                    "--port", str(port), "--bind_ip", "127.0.0.1", "--logpath", log, "--fork",
                    "--pidfilepath", log + ".pid"] + list(args), check=True, capture_output=True,
                   timeout=60)
    try:
        yield port
    finally:
        with open(log + ".pid") as f:
            os.kill(int(f.read().strip()), 15)
        # the router removes its pid file as it exits: wait for that, or a
        # next router of the same name may write the file before it goes
        for _ in range(100):
            if not os.path.exists(log + ".pid"):
                break
            time.sleep(0.1)


def split_at_zero(client, db, colls):
    """Shard db.<each of colls> on {k: 1}, split at k = 0, with k < 0 on
    shard0 and k >= 0 on shard1 (so a test knows where a document lives).
    The balancer runs meanwhile: with both chunks on the database's primary
    shard it may move either of them first (it takes the donor's lowest), so
    each chunk is moved until config.chunks shows the wanted layout, and a
    moveChunk that meets a balancer round's migration is sent again."""
    client.admin.command("enableSharding", db)
    want = {"shard0": {"k": -1}, "shard1": {"k": 0}}
    for name in colls:
        client.admin.command("shardCollection", db + "." + name, key={"k": 1})
        client.admin.command("split", db + "." + name, middle={"k": 0})
        for attempt in range(200):
            cs = chunks(client, db + "." + name)
            owner = {"shard0": cs[0]["shard"], "shard1": cs[-1]["shard"]}
            wrong = [to for to in ("shard0", "shard1") if owner[to] != to]
            if len(cs) == 2 and not wrong:
                break
            assert attempt < 199, cs
            try:
                client.admin.command("moveChunk", db + "." + name, find=want[wrong[0]],
                                     to=wrong[0])
            except OperationFailure as e:
                if e.code != 117:  # ConflictingOperationInProgress
                    raise
                time.sleep(0.1)


def set_parameters(params):
    """launcher_args for cluster() that start every sabled with
    --setParameter p for each p of params ("enableTestCommands=1", ...)."""
    return [a for p in params for a in ("--sabled-arg=--setParameter", "--sabled-arg=" + p)]


def cluster_fixture(prefix, **cluster_kwargs):
    """A module-scoped pytest fixture named cluster: cluster(prefix,
    **cluster_kwargs)'s info, the module skipped when sable-router is not
    built.  A test file says `cluster = sharded.cluster_fixture("sable-x-")`."""
    import pytest

    @pytest.fixture(scope="module", name="cluster")
    def fixture():
        """The module's cluster (sharded.cluster_fixture)."""
        if not os.path.exists(ROUTER):
            pytest.skip("sable-router not built")
        with cluster(prefix, **cluster_kwargs) as info:
            yield info
    return fixture


def client(port, **kw):
    """A pymongo client of 127.0.0.1:port; server selection gives up after
    10 s unless kw says otherwise.  The caller closes it."""
    kw.setdefault("serverSelectionTimeoutMS", 10000)
    return pymongo.MongoClient("127.0.0.1", port, **kw)


def direct(port, **kw):
    """A direct connection to the member at port (no replica set discovery);
    server selection gives up after 5 s unless kw says otherwise."""
    kw.setdefault("serverSelectionTimeoutMS", 5000)
    return pymongo.MongoClient("127.0.0.1", port, directConnection=True, **kw)


def mongos_fixture(stop_balancer=False, enable=(), split=None, setup=None, **client_kwargs):
    """A module-scoped pytest fixture named mongos: client(router,
    **client_kwargs) on the module's cluster fixture, closed afterwards.
    Before the tests it stops the balancer (stop_balancer), runs
    enableSharding on each database of enable, split_at_zero(c, *split)
    (split = (db, colls)), then setup(c) for what is the module's own."""
    import pytest

    @pytest.fixture(scope="module", name="mongos")
    def fixture(cluster):
        """A client of the module's router (sharded.mongos_fixture)."""
        with client(cluster["router"], **client_kwargs) as c:
            if stop_balancer:
                c.admin.command("balancerStop")
            for db in enable:
                c.admin.command("enableSharding", db)
            if split:
                split_at_zero(c, *split)
            if setup:
                setup(c)
            yield c
    return fixture


def shards_fixture(by_name=False, **client_kwargs):
    """A module-scoped pytest fixture named shards: a direct client of each
    shard's first member, a list in shard order or, with by_name, a dict
    {"shard0": ..., ...}; server selection waits pymongo's 30 s unless
    client_kwargs say otherwise."""
    import pytest

    client_kwargs.setdefault("serverSelectionTimeoutMS", 30000)

    @pytest.fixture(scope="module", name="shards")
    def fixture(cluster):
        """Direct clients of the shards (sharded.shards_fixture)."""
        cs = [direct(p, **client_kwargs) for p in cluster["shards"]]
        yield {"shard%d" % i: c for i, c in enumerate(cs)} if by_name else cs
        for c in cs:
            c.close()
    return fixture


def primary_port(info, shard, not_port=None, secs=60):
    """The port of the member of shard (an index into info["members"]),
    other than not_port, that says it is writable primary; fails the test
    after secs without one."""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        for port in info["members"][shard]:
            if port == not_port:
                continue
            try:
                with direct(port) as c:
                    if c.admin.command("hello").get("isWritablePrimary"):
                        return port
            except PyMongoError:
                pass
        time.sleep(0.2)
    raise AssertionError("shard%d has no primary" % shard)


def fail_point(c, name, on):
    """Turns fail point name on (alwaysOn) or off on the server of client c."""
    c.admin.command("configureFailPoint", name, mode="alwaysOn" if on else "off")


def wait_for(pred, secs=30):
    """True as soon as pred() is, False after secs; a PyMongoError from pred
    (a member restarting) counts as not yet."""
    end = time.monotonic() + secs
    while time.monotonic() < end:
        try:
            if pred():
                return True
        except PyMongoError:
            pass
        time.sleep(0.2)
    return False


def launcher(info, *args):
    """Runs sable-cluster args on the cluster of info (kill N, restart N...),
    raising if it fails."""
    subprocess.run([sys.executable, info["launcher"]] + list(args) + ["--dir", info["dir"]],
                   env=info["env"], check=True, capture_output=True, timeout=120)


def chunks(c, ns):
    """ns's config.chunks documents, by min; uuids read as stored (subtype
    4), whatever c's uuidRepresentation."""
    uuid = c.config.get_collection("collections", codec_options=STD).find_one({"_id": ns})["uuid"]
    return list(c.config.get_collection("chunks", codec_options=STD)
                .find({"uuid": uuid}).sort("min", 1))
