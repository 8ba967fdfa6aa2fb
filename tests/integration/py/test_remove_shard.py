"""
removeShard with draining, and movePrimary (docs/sharding.md, "Removing a
shard"): a config server and three one-member shards started with
build/sable-cluster start --sharded.  A shard holding chunks of a sharded
collection and the primary of an unsharded database is drained through
started / ongoing / completed; the documents stay readable through the
router throughout, their count unchanged.
"""

import os
import sys
import time

import pymongo
import pytest
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402


cluster = sharded.cluster_fixture("sable-drain-", shards=3)
mongos = sharded.mongos_fixture(uuidRepresentation="standard")
# shard2 is shut down by a test: closing its client must not wait long for it
shards = sharded.shards_fixture(serverSelectionTimeoutMS=2000)


def _primary(mongos, db):
    return mongos.config.databases.find_one({"_id": db})["primary"]


def _code(fn):
    with pytest.raises(OperationFailure) as e:
        fn()
    return e.value.code


def test_errors(mongos):
    admin = mongos.admin
    assert _code(lambda: admin.command("removeShard", "nope")) == 70  # ShardNotFound
    assert _code(lambda: mongos.test.command("removeShard", "shard0")) == 13  # admin only
    mongos.mpe.c.insert_one({"x": 1})
    assert _code(lambda: admin.command("movePrimary", "mpe", to="nope")) == 70
    assert _code(lambda: admin.command("movePrimary", "admin", to="shard0")) == 72
    assert _code(lambda: admin.command("movePrimary", "config", to="shard0")) == 72
    assert _code(lambda: admin.command("movePrimary", "mpe")) == 72  # no "to"
    assert _code(lambda: admin.command("movePrimary", "nosuchdb", to="shard0")) == 26
    # to the shard that already is the primary: nothing to do
    assert admin.command("movePrimary", "mpe", to=_primary(mongos, "mpe"))["ok"] == 1


def test_move_primary(mongos, shards):
    db = mongos.mp
    db.a.insert_many([{"_id": i, "v": i % 7, "s": "x" * 50} for i in range(2500)])
    db.a.create_index([("v", 1)], name="v_1")
    db.b.insert_one({"_id": "only"})
    db.command("create", "va", viewOn="a", pipeline=[{"$match": {"v": 3}}])
    src = _primary(mongos, "mp")
    dst = "shard1" if src != "shard1" else "shard2"
    mongos.admin.command("movePrimary", "mp", to=dst)
    assert _primary(mongos, "mp") == dst
    assert db.a.count_documents({}) == 2500
    assert sorted(d["_id"] for d in db.a.find({}, {"_id": 1})) == list(range(2500))
    assert db.b.find_one() == {"_id": "only"}
    assert db.va.count_documents({}) == len([i for i in range(2500) if i % 7 == 3])
    assert "v_1" in [i["name"] for i in db.a.list_indexes()]
    # the data lives on the new primary only
    old, new = shards[int(src[-1])], shards[int(dst[-1])]
    assert "a" not in old.mp.list_collection_names()
    assert new.mp.a.count_documents({}) == 2500
    assert "v_1" in new.mp.a.index_information()
    # writes go to the new primary
    db.a.insert_one({"_id": 2500})
    assert new.mp.a.count_documents({}) == 2501
    # a collection already on the recipient is refused, and nothing changes
    old.mp.a.insert_one({"_id": "orphan"})
    assert _code(lambda: mongos.admin.command("movePrimary", "mp", to=src)) == 48
    assert _primary(mongos, "mp") == dst
    assert db.a.count_documents({}) == 2501 and new.mp.a.count_documents({}) == 2501
    old.mp.a.drop()


def _remove(mongos, name):
    return mongos.admin.command("removeShard", name)


def test_drain_and_remove(mongos, shards):
    admin = mongos.admin
    # a sharded collection with chunks on every shard (2 each)
    admin.command("enableSharding", "dr")
    admin.command("shardCollection", "dr.c", key={"_id": "hashed"})
    mongos.dr.c.insert_many([{"_id": i, "v": i} for i in range(600)])
    # an unsharded database whose primary is the shard to remove
    mongos.plain.u.insert_many([{"_id": i} for i in range(300)])
    if _primary(mongos, "plain") != "shard2":
        admin.command("movePrimary", "plain", to="shard2")
    uuid = mongos.config.collections.find_one({"_id": "dr.c"})["uuid"]
    assert mongos.config.chunks.count_documents({"uuid": uuid, "shard": "shard2"}) > 0

    # with the balancer stopped the draining starts but nothing moves (mongod's rule)
    admin.command("balancerStop")
    r = _remove(mongos, "shard2")
    assert r["msg"] == "draining started successfully"
    assert r["state"] == "started" and r["shard"] == "shard2"
    assert r["note"] == "you need to drop or movePrimary these databases"
    assert "plain" in r["dbsToMove"]
    listed = {s["_id"]: s for s in admin.command("listShards")["shards"]}
    assert listed["shard2"].get("draining") is True
    assert "draining" not in listed["shard0"]
    time.sleep(3)
    r = _remove(mongos, "shard2")
    assert r["state"] == "ongoing" and r["msg"] == "draining ongoing"
    assert r["remaining"]["chunks"] > 0 and r["remaining"]["dbs"] >= 1
    assert r["remaining"]["jumboChunks"] == 0
    assert "plain" in r["dbsToMove"]
    # a new database does not get the draining shard as its primary
    for i in range(4):
        mongos["newdb%d" % i].c.insert_one({"_id": 1})
        assert _primary(mongos, "newdb%d" % i) != "shard2"

    admin.command("balancerStart")
    deadline = time.time() + 90
    while True:
        r = _remove(mongos, "shard2")
        assert r["state"] == "ongoing"
        if r["remaining"]["chunks"] == 0:
            break
        assert time.time() < deadline, r
        assert mongos.dr.c.count_documents({}) == 600
        time.sleep(0.5)
    assert r["remaining"]["dbs"] >= 1
    for db in r["dbsToMove"]:
        admin.command("movePrimary", db, to="shard0")
    r = _remove(mongos, "shard2")
    assert r["msg"] == "removeshard completed successfully"
    assert r["state"] == "completed" and r["shard"] == "shard2" and "remaining" not in r
    assert "shard2" not in [s["_id"] for s in admin.command("listShards")["shards"]]
    assert _code(lambda: _remove(mongos, "shard2")) == 70

    # every document is still there, once
    assert mongos.dr.c.count_documents({}) == 600
    assert sorted(d["_id"] for d in mongos.dr.c.find()) == list(range(600))
    assert mongos.plain.u.count_documents({}) == 300
    assert sorted(d["_id"] for d in mongos.plain.u.find()) == list(range(300))
    assert shards[2].dr.c.count_documents({}) == 0
    assert "u" not in shards[2].plain.list_collection_names()
    # commands that go to every shard leave the removed one alone, even stopped
    try:
        shards[2].admin.command("shutdown", force=True)
    except pymongo.errors.ConnectionFailure:
        pass
    t0 = time.time()
    mongos.dr.c.create_index([("v", 1)])
    assert "dr" in mongos.list_database_names()
    mongos.drop_database("newdb0")
    with mongos.plain.u.watch(max_await_time_ms=1000) as stream:
        mongos.plain.u.insert_one({"_id": 300})
        assert stream.next()["documentKey"] == {"_id": 300}
    assert time.time() - t0 < 15


def test_last_shard_is_kept(mongos):
    r = _remove(mongos, "shard1")
    assert r["state"] == "started"
    # shard0 is the only one left that is not draining
    assert _code(lambda: _remove(mongos, "shard0")) == 20  # IllegalOperation
    # no migration left running when the cluster stops
    mongos.admin.command("balancerStop")
