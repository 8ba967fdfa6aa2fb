"""
Authentication through sable-router (docs/sharding.md, "Running with
authentication"): a sharded cluster started with a keyFile by
build/sable-cluster (the members and the router authenticate to each other as
__system; the first user is created through the router's localhost
exception and stored on the config servers), then clients that must
authenticate at the router as they must at mongos.
"""

import hashlib
import os
import subprocess
import sys

import pymongo
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from bson.max_key import MaxKey
from bson.min_key import MinKey
import pytest
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from sharded import BUILD, ROUTER  # noqa: E402

BENCH = os.path.join(BUILD, "sable-bench")
KEY = "c2FibGUtcm91dGVyLWF1dGgta2V5"


@pytest.fixture(scope="module")
def cluster():
    if not os.path.exists(ROUTER):
        pytest.skip("sable-router not built")
    with sharded.keyfile_cluster("sable-rauth-", KEY) as c:
        yield {"router": c["router"], "config": c["config"], "shard": c["shards"][0],
               "key": KEY}


def url(cluster, user, pw, db="ycsb"):
    return "mongodb://%s:%s@127.0.0.1:%d/%s?authSource=admin" % (user, pw, cluster["router"], db)


@pytest.fixture(scope="module")
def admin(cluster):
    c = pymongo.MongoClient(url(cluster, "admin", "adminpw", "admin"),
                            serverSelectionTimeoutMS=10000)
    c.admin.command("createUser", "ycsb", pwd="123456",
                    roles=[{"role": "readWrite", "db": "ycsb"}])
    c.admin.command("createUser", "reader", pwd="r3ad", roles=[{"role": "read", "db": "ycsb"}])
    c.admin.command("enableSharding", "ycsb")
    c.admin.command("shardCollection", "ycsb.usertable", key={"_id": "hashed"})
    yield c
    c.close()


def test_unauthenticated_refused(cluster, admin):
    c = pymongo.MongoClient("127.0.0.1", cluster["router"], serverSelectionTimeoutMS=10000)
    assert c.admin.command("ping")["ok"] == 1  # the handshake needs no user
    with pytest.raises(OperationFailure) as e:
        c.ycsb.usertable.find_one()
    assert e.value.code == 13
    assert e.value.details["codeName"] == "Unauthorized"
    assert "requires authentication" in e.value.details["errmsg"]
    with pytest.raises(OperationFailure) as e:
        c.admin.command("createUser", "late", pwd="x", roles=[])  # users exist: no exception
    assert e.value.code == 13
    st = c.admin.command("connectionStatus")
    assert st["authInfo"]["authenticatedUsers"] == []


def test_users_live_on_config_servers(cluster, admin):
    users = {u["user"] for u in admin.admin.command("usersInfo")["users"]}
    assert {"admin", "ycsb", "reader"} <= users
    info = admin.admin.command("usersInfo", "ycsb")["users"][0]
    assert info["roles"] == [{"role": "readWrite", "db": "ycsb"}]
    # the config server holds them; a shard does not (it has no users at all)
    def stored(port):
        with pymongo.MongoClient("127.0.0.1", port, directConnection=True, username="__system",
                                 password=cluster["key"], authSource="local",
                                 authMechanism="SCRAM-SHA-256",
                                 serverSelectionTimeoutMS=5000) as m:
            return {d["_id"] for d in m.admin.system.users.find()}
    assert {"admin.admin", "admin.ycsb", "admin.reader"} <= stored(cluster["config"])
    assert stored(cluster["shard"]) == set()


def test_ycsb_url_crud(cluster, admin):
    for mech in (None, "SCRAM-SHA-1", "SCRAM-SHA-256"):
        kw = {"authMechanism": mech} if mech else {}
        with pymongo.MongoClient(url(cluster, "ycsb", "123456"), serverSelectionTimeoutMS=10000,
                                 **kw) as c:
            coll = c.ycsb.usertable
            tag = mech or "default"
            coll.insert_many([{"_id": "%s%d" % (tag, i), "n": i} for i in range(50)])
            assert coll.count_documents({"_id": {"$regex": "^" + tag}}) == 50
            coll.update_one({"_id": tag + "3"}, {"$set": {"n": -3}})
            assert coll.find_one({"_id": tag + "3"})["n"] == -3
            coll.delete_one({"_id": tag + "4"})
            assert coll.count_documents({"_id": {"$regex": "^" + tag}}) == 49
            st = c.admin.command("connectionStatus")["authInfo"]
            assert st["authenticatedUsers"] == [{"user": "ycsb", "db": "admin"}]
            # readWrite on ycsb only
            with pytest.raises(OperationFailure) as e:
                c.other.coll.insert_one({})
            assert e.value.code == 13
            with pytest.raises(OperationFailure) as e:
                list(coll.aggregate([{"$merge": {"into": {"db": "other", "coll": "x"}}}]))
            assert e.value.code == 13


def test_seed_url_user_in_its_database(cluster, admin):
    # seed 003's URL has no authSource: the user lives in ycsb itself
    admin.ycsb.command("createUser", "ycsb", pwd="123456", roles=["readWrite"])
    with pymongo.MongoClient("mongodb://ycsb:123456@127.0.0.1:%d/ycsb" % cluster["router"],
                             serverSelectionTimeoutMS=10000) as c:
        c.ycsb.seedurl.insert_one({"_id": 1})
        assert c.ycsb.seedurl.find_one() == {"_id": 1}
        st = c.admin.command("connectionStatus")["authInfo"]
        assert st["authenticatedUsers"] == [{"user": "ycsb", "db": "ycsb"}]
    admin.ycsb.command("dropUser", "ycsb")
    with pymongo.MongoClient("mongodb://ycsb:123456@127.0.0.1:%d/ycsb" % cluster["router"],
                             serverSelectionTimeoutMS=5000) as c:
        with pytest.raises(OperationFailure) as e:
            c.ycsb.command("ping")
        assert e.value.code == 18


def test_read_only_user_cannot_write(cluster, admin):
    with pymongo.MongoClient(url(cluster, "reader", "r3ad"), serverSelectionTimeoutMS=10000) as c:
        admin.ycsb.usertable.insert_one({"_id": "ro-probe"})
        admin.other.coll.insert_one({})
        assert c.ycsb.usertable.find_one({"_id": "ro-probe"}) is not None
        # listDatabases shows what the user may read (authorizedDatabases)
        assert c.list_database_names() == ["ycsb"]
        assert {"admin", "config", "ycsb", "other"} <= set(admin.list_database_names())
        with pytest.raises(OperationFailure) as e:
            c.ycsb.usertable.insert_one({"_id": "ro-write"})
        assert e.value.code == 13
        # nor through an aggregation's output stage (the shard would run it)
        for stage in ({"$out": "copied"}, {"$merge": {"into": "copied"}}):
            with pytest.raises(OperationFailure) as e:
                list(c.ycsb.usertable.aggregate([{"$match": {}}, stage]))
            assert e.value.code == 13
        # a role granted through the router takes effect on the next command
        admin.admin.command("grantRolesToUser", "reader", roles=[{"role": "readWrite",
                                                                  "db": "ycsb"}])
        c.ycsb.usertable.insert_one({"_id": "ro-write"})
        admin.admin.command("revokeRolesFromUser", "reader", roles=[{"role": "readWrite",
                                                                     "db": "ycsb"}])
        with pytest.raises(OperationFailure) as e:
            c.ycsb.usertable.delete_one({"_id": "ro-write"})
        assert e.value.code == 13
        c.admin.command("logout")


def test_cursor_belongs_to_its_user(cluster, admin):
    from bson.int64 import Int64
    admin.ycsb.usertable.insert_many([{"_id": "cur%d" % i} for i in range(10)])
    with pymongo.MongoClient(url(cluster, "ycsb", "123456"), serverSelectionTimeoutMS=10000) as y, \
            pymongo.MongoClient(url(cluster, "reader", "r3ad"),
                                serverSelectionTimeoutMS=10000) as r:
        res = y.ycsb.command("find", "usertable", filter={"_id": {"$regex": "^cur"}}, batchSize=2)
        cid = res["cursor"]["id"]
        assert cid != 0
        with pytest.raises(OperationFailure) as e:
            r.ycsb.command("getMore", Int64(cid), collection="usertable")
        assert e.value.code == 13
        with pytest.raises(OperationFailure) as e:
            r.ycsb.command("killCursors", "usertable", cursors=[Int64(cid)])
        assert e.value.code == 13
        got = len(res["cursor"]["firstBatch"])
        while cid != 0:  # its owner continues it to the end
            more = y.ycsb.command("getMore", Int64(cid), collection="usertable")
            got += len(more["cursor"]["nextBatch"])
            cid = more["cursor"]["id"]
        assert got == 10


def test_wrong_password(cluster, admin):
    with pymongo.MongoClient(url(cluster, "ycsb", "wrong"), serverSelectionTimeoutMS=5000) as c:
        with pytest.raises(OperationFailure) as e:
            c.ycsb.command("ping")
        assert e.value.code == 18
    with pymongo.MongoClient(url(cluster, "nobody", "x"), serverSelectionTimeoutMS=5000) as c:
        with pytest.raises(OperationFailure) as e:
            c.ycsb.command("ping")
        assert e.value.code == 18


def test_zone_commands_need_cluster_manager(cluster, admin):
    # as mongod: clusterManager may (update on config.shards / config.tags), readWrite not
    admin.admin.command("createUser", "zoner", pwd="z0ne",
                        roles=[{"role": "clusterManager", "db": "admin"}])
    zone_cmds = [("addShardToZone", "shard0", {"zone": "AZ"}),
                 ("updateZoneKeyRange", "ycsb.zoned", {"min": {"k": 1}, "max": {"k": 9},
                                                       "zone": "AZ"}),
                 ("updateZoneKeyRange", "ycsb.zoned", {"min": {"k": 1}, "max": {"k": 9},
                                                       "zone": None}),
                 ("removeShardFromZone", "shard0", {"zone": "AZ"})]
    with pymongo.MongoClient(url(cluster, "ycsb", "123456"), serverSelectionTimeoutMS=10000) as c:
        for name, arg, kw in zone_cmds:
            with pytest.raises(OperationFailure) as e:
                c.admin.command(name, arg, **kw)
            assert e.value.code == 13, name
    with pymongo.MongoClient(url(cluster, "zoner", "z0ne"), serverSelectionTimeoutMS=10000) as c:
        for name, arg, kw in zone_cmds:
            assert c.admin.command(name, arg, **kw)["ok"] == 1, name
    assert admin.config.shards.find_one({"_id": "shard0"}).get("tags", []) == []


def test_merge_commands_need_cluster_manager(cluster, admin):
    # as mongod: mergeChunks and mergeAllChunksOnShard need splitChunk, clearJumboFlag its
    # own action, both in clusterManager; readWrite has neither
    admin.admin.command("createUser", "merger", pwd="m3rge",
                        roles=[{"role": "clusterManager", "db": "admin"}])
    admin.admin.command("enableSharding", "ycsb")
    admin.admin.command("shardCollection", "ycsb.merged", key={"k": 1})
    admin.admin.command("split", "ycsb.merged", middle={"k": 10})
    cmds = [("mergeChunks", "ycsb.merged", {"bounds": [{"k": MinKey()}, {"k": MaxKey()}]}),
            ("mergeAllChunksOnShard", "ycsb.merged", {"shard": "shard0"}),
            ("clearJumboFlag", "ycsb.merged", {"find": {"k": 1}})]
    with pymongo.MongoClient(url(cluster, "ycsb", "123456"), serverSelectionTimeoutMS=10000) as c:
        for name, arg, kw in cmds:
            with pytest.raises(OperationFailure) as e:
                c.admin.command(name, arg, **kw)
            assert e.value.code == 13, name
    with pymongo.MongoClient(url(cluster, "merger", "m3rge"), serverSelectionTimeoutMS=10000) as c:
        for name, arg, kw in cmds:
            assert c.admin.command(name, arg, **kw)["ok"] == 1, name
    std = CodecOptions(uuid_representation=UuidRepresentation.STANDARD)
    uuid = admin.config.get_collection("collections", codec_options=std).find_one(
        {"_id": "ycsb.merged"})["uuid"]
    assert admin.config.get_collection("chunks", codec_options=std).count_documents(
        {"uuid": uuid}) == 1


def test_shards_require_auth(cluster, admin):
    # the members run with the keyFile too: a client going around the router
    # is refused once it asks for data
    with pymongo.MongoClient("127.0.0.1", cluster["config"], directConnection=True,
                             serverSelectionTimeoutMS=5000) as c:
        with pytest.raises(OperationFailure) as e:
            c.admin.system.users.find_one()
        assert e.value.code == 13


def test_sessions_and_transactions_of_a_user(cluster, admin):
    # the router forwards lsids with the user's uid; the shards (which see
    # __system) keep the session as that user's
    with pymongo.MongoClient(url(cluster, "ycsb", "123456"), retryWrites=True) as c:
        coll = c.ycsb.usertable
        for i in range(8):
            coll.insert_one({"_id": "rw%d" % i, "f": i})
        with c.start_session() as s:
            with s.start_transaction():
                coll.insert_one({"_id": "txn-user", "f": 1}, session=s)
                coll.update_one({"_id": "rw0"}, {"$set": {"t": 1}}, session=s)
        assert coll.find_one({"_id": "txn-user"})["f"] == 1
        assert coll.find_one({"_id": "rw0"})["t"] == 1
    with pymongo.MongoClient("127.0.0.1", cluster["shard"], directConnection=True,
                             username="__system", password=KEY, authSource="local",
                             authMechanism="SCRAM-SHA-256") as sh:
        uids = {bytes(d["_id"]["uid"]) for d in sh.config.transactions.find()}
    assert hashlib.sha256(b"ycsb@admin").digest() in uids


def test_ycsb_bench_through_router(cluster, admin):
    if not os.path.exists(BENCH):
        pytest.skip("sable-bench not built")
    u = url(cluster, "ycsb", "123456")
    props = ["-p", "mongodb.url=" + u, "-p", "table=benchtable", "-p", "recordcount=300",
             "-p", "operationcount=600", "-p", "readproportion=0.5",
             "-p", "updateproportion=0.5"]
    for phase in ("load", "run"):
        r = subprocess.run([BENCH, phase, "mongodb"] + props, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert "Return=ERROR" not in r.stdout, r.stdout
        ok = "[INSERT], Return=OK, 300" if phase == "load" else "[READ], Return=OK"
        assert ok in r.stdout, r.stdout
    assert admin.ycsb.benchtable.count_documents({}) == 300


def test_cluster_time_signed_through_router(cluster, admin):
    """As mongos: the router passes on the $clusterTime the shards signed
    with their keys (admin.system.keys) and checks a client's: a later time
    with a wrong hash fails with TimeProofMismatch (204), one of an unknown
    key with KeyNotFound (211); root's (advanceClusterTime) is taken."""
    import hmac
    import struct
    import time
    from bson.binary import Binary
    from bson.int64 import Int64
    from bson.timestamp import Timestamp

    def keys(port):
        with pymongo.MongoClient("mongodb://__system:%s@127.0.0.1:%d/?authSource=local&"
                                 "directConnection=true" % (cluster["key"], port)) as c:
            return {k["_id"]: k for k in c.admin.system.keys.find()}

    def with_time(c, ct):
        with c.start_session() as s:
            s.advance_cluster_time(ct)
            return c.ycsb.command("find", "ct", session=s)

    def forged(ts, key_id, h=b"\x01" * 20):
        return {"clusterTime": ts, "signature": {"hash": Binary(h), "keyId": Int64(key_id)}}

    end = time.time() + 30
    while True:  # each shard's primary writes its keys once elected
        admin.ycsb.ct.insert_one({})
        ct = admin.admin.command("ping").get("$clusterTime")
        if ct and ct["signature"]["keyId"] != 0:
            break
        assert time.time() < end, ct
        time.sleep(0.3)
    # Each set writes its own keys, with ids from its own clock: two sets that
    # wrote theirs in the same second hold different keys under one id.
    known = []
    for port in [cluster["config"], cluster["shard"], cluster["shard"] + 1]:
        known += [k for k in keys(port).values() if k["_id"] == ct["signature"]["keyId"]]
    t = ct["clusterTime"]
    mine = [hmac.new(bytes(k["key"]), struct.pack("<Q", (t.time << 32 | t.inc) | 0xFFFF),
                     hashlib.sha1).digest() for k in known]
    assert ct["signature"]["hash"] in mine, (ct, known)
    later = Timestamp(t.time + 100, 1)
    with pymongo.MongoClient(url(cluster, "ycsb", "123456")) as app:
        with pytest.raises(OperationFailure) as ei:
            with_time(app, forged(later, ct["signature"]["keyId"]))
        assert ei.value.code == 204, ei.value.details
        with pytest.raises(OperationFailure) as ei:
            with_time(app, forged(later, 12345))
        assert ei.value.code == 211, ei.value.details
        assert with_time(app, forged(t, 12345))["ok"] == 1  # not later: not checked
    assert with_time(admin, forged(later, 12345))["ok"] == 1


def test_failed_authentication_is_delayed_as_by_sabled(cluster, admin):
    """Each failed SASL attempt on a connection waits longer before its
    reply (250 ms, 500 ms, 750 ms ... as sabled), so guessing is slow."""
    import base64
    import time

    from bson.binary import Binary
    from bson.son import SON

    import wire

    sock = wire.connect(cluster["router"])
    try:
        t0 = time.monotonic()
        for _ in range(3):
            r = wire.command(sock, SON([("saslStart", 1), ("mechanism", "SCRAM-SHA-256"),
                                        ("payload", Binary(b"n,,n=ycsb,r=0123456789abcdef")),
                                        ("autoAuthorize", 1)]), db="admin")
            nonce = dict(kv.split(b"=", 1) for kv in bytes(r["payload"]).split(b","))[b"r"]
            proof = base64.b64encode(b"\0" * 32)  # not the password's
            r = wire.command(sock, SON([("saslContinue", 1), ("conversationId", 1),
                                        ("payload", Binary(b"c=biws,r=" + nonce + b",p=" +
                                                           proof))]), db="admin")
            assert r["ok"] == 0 and r["code"] == 18, r
        assert time.monotonic() - t0 >= 1.45  # 0.25 + 0.5 + 0.75 s
    finally:
        sock.close()


def test_merge_needs_only_the_actions_of_its_modes(cluster, admin):
    """The router asks what mongos asks of a $merge's target (the same
    function as sabled's): insert for whenNotMatched insert, update unless
    whenMatched is fail; $out insert and remove.  A role with find + insert
    on the target may $merge with whenMatched fail, but not $merge's
    default (merge: update) nor $out (remove)."""
    admin.admin.command("createRole", "mergeInsertOnly", privileges=[
        {"resource": {"db": "ycsb", "collection": "usertable"}, "actions": ["find"]},
        {"resource": {"db": "ycsb", "collection": "mergedins"}, "actions": ["insert"]}], roles=[])
    admin.admin.command("createUser", "stagewriter", pwd="m3rge",
                        roles=[{"role": "mergeInsertOnly", "db": "admin"}])
    admin.ycsb.usertable.insert_one({"_id": "merge-probe"})
    with pymongo.MongoClient(url(cluster, "stagewriter", "m3rge"), serverSelectionTimeoutMS=10000) as c:
        coll = c.ycsb.usertable
        list(coll.aggregate([{"$match": {"_id": "merge-probe"}},
                             {"$merge": {"into": "mergedins", "whenMatched": "fail"}}]))
        assert admin.ycsb.mergedins.find_one({"_id": "merge-probe"}) is not None
        for stage in ({"$merge": {"into": "mergedins"}}, {"$out": "mergedins"}):
            with pytest.raises(OperationFailure) as e:
                list(coll.aggregate([{"$match": {"_id": "merge-probe"}}, stage]))
            assert e.value.code == 13, stage
