"""
A sharded cluster for tests: a config server and one-member shards started
with build/sable-cluster start --sharded on a free range of ports below
Linux's ephemeral ones, stopped (and its directory removed) afterwards,
even when the start failed half-way.  SABLE_KEEP_CLUSTER=1 keeps the
directory and prints it.
"""
import contextlib
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile

from sabled import sabled_path

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
def extra_router(info, name="router2"):
    """Another sable-router on the cluster's config servers (its log in the
    cluster's directory); yields its port and stops it afterwards."""
    port = base_port(1)
    log = os.path.join(info["dir"], name + ".log")
    subprocess.run([ROUTER, "--configdb", "cfgRS/127.0.0.1:%d" % info["config"],
                    "--port", str(port), "--bind_ip", "127.0.0.1", "--logpath", log, "--fork",
                    "--pidfilepath", log + ".pid"], check=True, capture_output=True, timeout=60)
    try:
        yield port
    finally:
        with open(log + ".pid") as f:
            os.kill(int(f.read().strip()), 15)
        # the router removes its pid file as it exits: wait for that, or a
        # next router of the same name may write the file before it goes
        import time
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
    import time

    from bson.binary import UuidRepresentation
    from bson.codec_options import CodecOptions
    from pymongo.errors import OperationFailure
    client.admin.command("enableSharding", db)
    # read and send uuids as stored (subtype 4), whatever the client's setting
    std = CodecOptions(uuid_representation=UuidRepresentation.STANDARD)
    want = {"shard0": {"k": -1}, "shard1": {"k": 0}}
    for name in colls:
        client.admin.command("shardCollection", db + "." + name, key={"k": 1})
        client.admin.command("split", db + "." + name, middle={"k": 0})
        colls_ = client.config.get_collection("collections", codec_options=std)
        uuid = colls_.find_one({"_id": db + "." + name})["uuid"]
        for attempt in range(200):
            chunks = list(client.config.get_collection("chunks", codec_options=std)
                          .find({"uuid": uuid}).sort("min", 1))
            owner = {"shard0": chunks[0]["shard"], "shard1": chunks[-1]["shard"]}
            wrong = [to for to in ("shard0", "shard1") if owner[to] != to]
            if len(chunks) == 2 and not wrong:
                break
            assert attempt < 199, chunks
            try:
                client.admin.command("moveChunk", db + "." + name, find=want[wrong[0]],
                                     to=wrong[0])
            except OperationFailure as e:
                if e.code != 117:  # ConflictingOperationInProgress
                    raise
                time.sleep(0.1)
