"""
Database versions and movePrimary's critical section (docs/sharding.md,
"Removing a shard" and "Database versions"): a config server, two one-member
shards and two routers.  A router that cached a database's primary learns of
a movePrimary or a dropDatabase made through the other router from the old
primary's StaleDbVersion, and a movePrimary loses no acknowledged write made
while it runs.
"""

import os
import sys
import threading
import time

import bson
import pymongo
import pytest
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402

cluster = sharded.cluster_fixture("sable-dbv-", shards=2)


def _client(port, **kw):
    return sharded.client(port, uuidRepresentation="standard", **kw)


@pytest.fixture(scope="module")
def routers(cluster):
    with sharded.extra_router(cluster) as port2:
        a, b = _client(cluster["router"]), _client(port2)
        yield a, b
        a.close()
        b.close()


# not sharded.shards_fixture: keyed by the name each shard gives itself
@pytest.fixture(scope="module")
def shards(cluster):
    cs = [pymongo.MongoClient("127.0.0.1", p, directConnection=True,
                              serverSelectionTimeoutMS=5000, uuidRepresentation="standard")
          for p in cluster["shards"]]
    yield {c.admin.command("shardingState")["shardName"]: c for c in cs}
    for c in cs:
        c.close()


def _primary(client, db):
    return client.config.databases.find_one({"_id": db})["primary"]


def _other(name):
    return "shard1" if name == "shard0" else "shard0"


def test_other_router_follows_move_primary(routers, shards):
    a, b = routers
    a.admin.command("enableSharding", "dbvmove", primaryShard="shard0")
    a.dbvmove.c.insert_many([{"_id": i} for i in range(100)])
    # router B caches shard0 as the primary
    assert b.dbvmove.c.count_documents({}) == 100
    a.admin.command("movePrimary", "dbvmove", to="shard1")
    assert _primary(a, "dbvmove") == "shard1"
    # B has not flushed: the old primary's StaleDbVersion sends it to shard1
    assert b.dbvmove.c.count_documents({}) == 100
    assert sorted(d["_id"] for d in b.dbvmove.c.find()) == list(range(100))
    b.dbvmove.c.insert_one({"_id": "afterB"})
    assert shards["shard1"].dbvmove.c.find_one({"_id": "afterB"}) is not None
    assert "c" not in shards["shard0"].dbvmove.list_collection_names()
    assert a.dbvmove.c.count_documents({}) == 101
    # a collection created through B after the move lives on the new primary
    b.dbvmove.create_collection("made_by_b")
    assert "made_by_b" in shards["shard1"].dbvmove.list_collection_names()


def test_no_acknowledged_write_lost(routers, shards):
    a, b = routers
    a.admin.command("enableSharding", "dbvload", primaryShard="shard0")
    a.dbvload.c.insert_many([{"_id": "pre%d" % i, "pad": "x" * 200} for i in range(3000)])
    acked, errors, stop = [], [], threading.Event()

    def writer(client, tag):
        i = 0
        while not stop.is_set():
            doc = {"_id": "%s%d" % (tag, i)}
            try:
                client.dbvload.c.insert_one(doc)
                acked.append(doc["_id"])
            except Exception as e:  # an error is allowed; a lost acknowledged write is not
                errors.append(repr(e))
            i += 1

    threads = [threading.Thread(target=writer, args=(a, "a")),
               threading.Thread(target=writer, args=(b, "b"))]
    for t in threads:
        t.start()
    time.sleep(0.5)
    try:
        a.admin.command("movePrimary", "dbvload", to="shard1")
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert _primary(a, "dbvload") == "shard1"
    assert len(acked) > 20, errors[:5]
    on_new = shards["shard1"].dbvload.c
    ids = [d["_id"] for d in on_new.find({}, {"_id": 1})]
    assert len(ids) == len(set(ids))
    have = set(ids)
    missing = [x for x in acked if x not in have]
    assert missing == [], (len(missing), missing[:5], errors[:5])
    assert all("pre%d" % i in have for i in range(3000))
    # writes both sides of the move were acknowledged
    assert any(x.startswith("a") for x in acked) and any(x.startswith("b") for x in acked)
    assert "c" not in shards["shard0"].dbvload.list_collection_names()


def test_drop_and_recreate_elsewhere(routers, shards):
    a, b = routers
    a.admin.command("enableSharding", "dbvdrop", primaryShard="shard0")
    a.dbvdrop.c.insert_many([{"_id": i} for i in range(10)])
    assert b.dbvdrop.c.count_documents({}) == 10  # B caches shard0
    a.drop_database("dbvdrop")
    a.admin.command("enableSharding", "dbvdrop", primaryShard="shard1")
    a.dbvdrop.c.insert_one({"_id": "new"})
    assert _primary(a, "dbvdrop") == "shard1"
    # B reads the new database, not the old primary's leftovers
    assert [d["_id"] for d in b.dbvdrop.c.find()] == ["new"]
    b.dbvdrop.c.insert_one({"_id": "fromB"})
    assert shards["shard1"].dbvdrop.c.count_documents({}) == 2
    assert "c" not in shards["shard0"].dbvdrop.list_collection_names()


def test_stale_db_version_shape(routers, shards):
    a, _ = routers
    a.admin.command("enableSharding", "dbvshape", primaryShard="shard0")
    a.dbvshape.c.insert_one({"_id": 1})
    entry = a.config.databases.find_one({"_id": "dbvshape"})
    v = entry["version"]
    unsharded = {"e": bson.ObjectId("000000000000000000000000"),
                 "t": bson.Timestamp(0, 0), "v": bson.Timestamp(0, 0)}
    s0 = shards["shard0"].dbvshape
    # the right version: the command runs
    ok = s0.command("find", "c", shardVersion=unsharded,
                    databaseVersion={"uuid": v["uuid"], "timestamp": v["timestamp"],
                                     "lastMod": v["lastMod"]})
    assert ok["cursor"]["firstBatch"] == [{"_id": 1}]
    wrong = {"uuid": v["uuid"], "timestamp": v["timestamp"], "lastMod": v["lastMod"] + 5}
    with pytest.raises(OperationFailure) as e:
        s0.command("find", "c", shardVersion=unsharded, databaseVersion=wrong)
    d = e.value.details
    assert d["code"] == 249 and d["codeName"] == "StaleDbVersion", d
    assert d["db"] == "dbvshape"
    assert d["vReceived"]["lastMod"] == v["lastMod"] + 5
    assert d["vReceived"]["uuid"] == v["uuid"]
    assert d["vWanted"] == {"uuid": v["uuid"], "timestamp": v["timestamp"],
                            "lastMod": v["lastMod"]}
    # a write too, and to a shard that is not the primary (no vWanted there)
    with pytest.raises(OperationFailure) as e:
        s0.command("insert", "c", documents=[{"_id": 2}], shardVersion=unsharded,
                   databaseVersion=wrong)
    assert e.value.code == 249
    assert s0.c.count_documents({}) == 1
    with pytest.raises(OperationFailure) as e:
        shards["shard1"].dbvshape.command("find", "c", shardVersion=unsharded,
                                          databaseVersion=dict(v))
    assert e.value.code == 249 and "vWanted" not in e.value.details


def test_critical_section_holds_writes_and_ends_by_itself(routers, shards):
    # a router that took the section and died: its lease runs out, the held write goes on
    a, b = routers
    a.admin.command("enableSharding", "dbvlease", primaryShard="shard0")
    a.dbvlease.c.insert_one({"_id": 0})
    assert b.dbvlease.c.count_documents({}) == 1
    shards["shard0"].admin.command("_shardsvrMovePrimaryEnterCriticalSection", "dbvlease",
                                   leaseMillis=1500)
    t0 = time.monotonic()
    b.dbvlease.c.insert_one({"_id": 1})
    waited = time.monotonic() - t0
    assert waited >= 1.0, waited
    assert shards["shard0"].dbvlease.c.count_documents({}) == 2
    # renewing a section that ended is refused (movePrimary then aborts)
    with pytest.raises(OperationFailure) as e:
        shards["shard0"].admin.command("_shardsvrMovePrimaryEnterCriticalSection", "dbvlease",
                                       leaseMillis=1000, renew=True)
    assert e.value.code == 262  # ExceededTimeLimit
    # exit ends it at once; another database's section meanwhile is refused
    shards["shard0"].admin.command("_shardsvrMovePrimaryEnterCriticalSection", "dbvlease",
                                   leaseMillis=60000)
    with pytest.raises(OperationFailure) as e:
        shards["shard0"].admin.command("_shardsvrMovePrimaryEnterCriticalSection", "other",
                                       leaseMillis=1000)
    assert e.value.code == 117  # ConflictingOperationInProgress
    shards["shard0"].admin.command("_shardsvrMovePrimaryExitCriticalSection", "dbvlease")
    t0 = time.monotonic()
    b.dbvlease.c.insert_one({"_id": 2})
    assert time.monotonic() - t0 < 1.0
    assert a.dbvlease.c.count_documents({}) == 3


def test_open_transaction_does_not_commit_onto_the_old_copy(routers, shards):
    a, b = routers
    a.admin.command("enableSharding", "dbvtxn", primaryShard="shard0")
    a.dbvtxn.c.insert_one({"_id": "base"})
    s = b.start_session()
    s.start_transaction()
    b.dbvtxn.c.insert_one({"_id": "intxn"}, session=s)
    a.admin.command("movePrimary", "dbvtxn", to="shard1")
    committed = True
    try:
        s.commit_transaction()
    except OperationFailure:
        committed = False
    finally:
        s.end_session()
    ids = {d["_id"] for d in shards["shard1"].dbvtxn.c.find()}
    assert "base" in ids
    # an acknowledged commit is on the new primary; an idle transaction is aborted
    assert ("intxn" in ids) == committed
    assert not committed


def test_write_after_drop_through_other_router_registers_the_database(routers, shards):
    a, b = routers
    a.admin.command("enableSharding", "dbvgone", primaryShard="shard1")
    a.dbvgone.c.insert_one({"_id": "old"})
    assert b.dbvgone.c.count_documents({}) == 1  # B caches shard1
    a.drop_database("dbvgone")
    assert a.config.databases.find_one({"_id": "dbvgone"}) is None
    # B's write meets StaleDbVersion on shard1, finds the database gone and creates it
    b.dbvgone.c.insert_one({"_id": "new"})
    entry = a.config.databases.find_one({"_id": "dbvgone"})
    assert entry is not None
    assert [d["_id"] for d in shards[entry["primary"]].dbvgone.c.find()] == ["new"]
    assert [d["_id"] for d in a.dbvgone.c.find()] == ["new"]


def test_out_from_sharded_source_follows_move_primary(routers, shards):
    # the router merges a sharded collection's documents and writes $out's target itself
    a, b = routers
    a.admin.command("enableSharding", "dbvout", primaryShard="shard0")
    a.dbvout.t.insert_one({"_id": "before"})
    assert b.dbvout.t.count_documents({}) == 1  # B caches shard0
    sharded.split_at_zero(a, "dbvsrc", ["s"])
    a.dbvsrc.s.insert_many([{"_id": k, "k": k} for k in range(-5, 6)])
    a.admin.command("movePrimary", "dbvout", to="shard1")
    list(b.dbvsrc.s.aggregate([{"$out": {"db": "dbvout", "coll": "t"}}]))
    assert shards["shard1"].dbvout.t.count_documents({}) == 11
    assert "t" not in shards["shard0"].dbvout.list_collection_names()
    assert a.dbvout.t.count_documents({}) == 11


def test_database_aggregate_follows_move_primary(routers, shards):
    # {aggregate: 1} runs whole on the database's primary with its databaseVersion: a router
    # that cached the old primary learns of the move from its StaleDbVersion and runs the
    # pipeline (whose $lookup reads the moved collection) on the new one
    a, b = routers
    a.admin.command("enableSharding", "dbvagg", primaryShard="shard0")
    a.dbvagg.c.insert_many([{"_id": i, "v": i * 10} for i in range(3)])
    pl = [{"$documents": [{"k": 0}, {"k": 2}]},
          {"$lookup": {"from": "c", "localField": "k", "foreignField": "_id", "as": "m"}},
          {"$project": {"_id": 0, "k": 1, "m": 1}}]
    want = [{"k": 0, "m": [{"_id": 0, "v": 0}]}, {"k": 2, "m": [{"_id": 2, "v": 20}]}]
    assert list(b.dbvagg.aggregate(pl)) == want  # B caches shard0
    a.admin.command("movePrimary", "dbvagg", to="shard1")
    assert "c" not in shards["shard0"].dbvagg.list_collection_names()
    assert list(b.dbvagg.aggregate(pl)) == want
    # the version check itself: the old primary refuses a database-level aggregate
    v = a.config.databases.find_one({"_id": "dbvagg"})["version"]
    with pytest.raises(OperationFailure) as e:
        shards["shard0"].dbvagg.command("aggregate", 1, pipeline=[{"$documents": [{}]}],
                                        cursor={}, databaseVersion=dict(v))
    assert e.value.code == 249
