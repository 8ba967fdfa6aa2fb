"""
refineCollectionShardKey through sable-router, as mongos 7.0 answers it
(issue 28, docs/sharding.md "Refining a shard key"): one cluster of two
one-member shard sets, the balancer stopped so chunks stay where the tests
put them.

- the errors: an unsharded collection (118), a namespace that does not
  exist (26), a key that does not extend the current one (72), no index
  supporting the new key, or only a sparse or multikey one (72), bad key
  values (2), a missing key (40414), a database other than admin (13), and
  a collection sharded unique whose unique index would lose its guarantee;
- a refine extends every chunk's bounds (MinKey, MaxKey for the global max),
  changes the epoch and timestamp in config.collections, and a router that
  cached the old routing table (never flushed) is refused by the shards and
  routes by the new key; documents missing the new field count as null.
"""
import os
import sys

import pymongo
import pytest
from bson.max_key import MaxKey
from bson.min_key import MinKey
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402


cluster = sharded.cluster_fixture("sable-refine-")
mongos = sharded.mongos_fixture(stop_balancer=True)
shards = sharded.shards_fixture()


def code_of(client, **cmd):
    try:
        client.admin.command(cmd)
    except OperationFailure as e:
        return e.code, str(e)
    return 0, ""


def refine(client, ns, key):
    return code_of(client, refineCollectionShardKey=ns, key=key)


chunks_of = sharded.chunks


def test_refine_errors(mongos):
    db = mongos.rfe
    db.plain.insert_one({"a": 1})
    assert refine(mongos, "rfe.plain", {"a": 1, "b": 1})[0] == 118  # NamespaceNotSharded
    assert refine(mongos, "rfe.nothing", {"a": 1, "b": 1})[0] == 26  # NamespaceNotFound
    mongos.admin.command("enableSharding", "rfe")
    mongos.admin.command("shardCollection", "rfe.c", key={"a": 1})
    db.c.insert_many([{"a": i, "b": i} for i in range(5)])
    assert refine(mongos, "rfe.c", {"b": 1})[0] == 72
    assert refine(mongos, "rfe.c", {"b": 1, "a": 1})[0] == 72
    code, msg = refine(mongos, "rfe.c", {"a": 1, "b": 1})
    assert code == 72 and "create an index" in msg, msg
    db.c.create_index([("a", 1), ("b", 1)], sparse=True)
    code, msg = refine(mongos, "rfe.c", {"a": 1, "b": 1})
    assert code == 72 and "sparse" in msg, msg
    db.c.create_index([("a", 1), ("m", 1)])
    db.c.insert_one({"a": 9, "m": [1, 2]})
    code, msg = refine(mongos, "rfe.c", {"a": 1, "m": 1})
    assert code == 72 and "multikey" in msg, msg
    assert refine(mongos, "rfe.c", {"a": 1, "b": -1})[0] == 2  # BadValue
    assert refine(mongos, "rfe.c", {"a": 1, "b": "hashed", "m": "hashed"})[0] == 2
    assert refine(mongos, "rfe.c", {})[0] == 2
    assert code_of(mongos, refineCollectionShardKey="rfe.c")[0] == 40414
    assert code_of(mongos, refineCollectionShardKey="rfe.c", key="x")[0] == 14
    with pytest.raises(OperationFailure) as e:
        db.command("refineCollectionShardKey", "rfe.c", key={"a": 1, "b": 1})
    assert e.value.code == 13
    # the key it has: ok, nothing changes
    epoch = mongos.config.collections.find_one({"_id": "rfe.c"})["lastmodEpoch"]
    assert refine(mongos, "rfe.c", {"a": 1})[0] == 0
    assert mongos.config.collections.find_one({"_id": "rfe.c"})["lastmodEpoch"] == epoch
    # unique: the unique {a: 1} index would no longer be enforceable
    mongos.admin.command("shardCollection", "rfe.u", key={"a": 1}, unique=True)
    db.u.create_index([("a", 1), ("b", 1)])
    code, msg = refine(mongos, "rfe.u", {"a": 1, "b": 1})
    assert code == 72 and "unique" in msg, msg
    assert mongos.config.collections.find_one({"_id": "rfe.u"})["key"] == {"a": 1}


def test_refine_hashed_key(mongos):
    mongos.admin.command("enableSharding", "rfh")
    mongos.admin.command("shardCollection", "rfh.h", key={"a": "hashed"})
    mongos.rfh.h.insert_many([{"a": i} for i in range(20)] + [{"a": 20, "b": 1}])
    mongos.rfh.h.create_index([("a", "hashed"), ("b", 1)])
    assert refine(mongos, "rfh.h", {"a": "hashed", "b": "hashed"})[0] == 2
    assert refine(mongos, "rfh.h", {"a": 1, "b": 1})[0] == 72  # not the same kind
    assert refine(mongos, "rfh.h", {"a": "hashed", "b": 1}) == (0, "")
    coll = mongos.config.collections.find_one({"_id": "rfh.h"})
    assert list(coll["key"].items()) == [("a", "hashed"), ("b", 1)]
    for ch in chunks_of(mongos, "rfh.h"):
        assert list(ch["min"]) == ["a", "b"] and list(ch["max"]) == ["a", "b"]
    assert mongos.rfh.h.count_documents({}) == 21
    assert mongos.rfh.h.find_one({"a": 20, "b": 1})["a"] == 20
    assert mongos.rfh.h.find_one({"a": 7})["a"] == 7


def test_refine_then_route_by_the_new_key(mongos, shards, cluster):
    sharded.split_at_zero(mongos, "rf", ["c"])  # k < 0 on shard0, k >= 0 on shard1
    c = mongos.rf.c
    c.insert_many([{"_id": i, "k": i % 10 - 5, "s": i} for i in range(40)])
    c.insert_one({"_id": 100, "k": 5})  # no s
    with sharded.extra_router(cluster) as port2:
        stale = pymongo.MongoClient("127.0.0.1", port2, serverSelectionTimeoutMS=10000)
        assert stale.rf.c.count_documents({"k": 5}) == 1  # caches the old routing table
        before = mongos.config.collections.find_one({"_id": "rf.c"})
        c.create_index([("k", 1), ("s", 1)])
        assert refine(mongos, "rf.c", {"k": 1, "s": 1}) == (0, "")
        after = mongos.config.collections.find_one({"_id": "rf.c"})
        assert after["key"] == {"k": 1, "s": 1}
        assert after["lastmodEpoch"] != before["lastmodEpoch"]
        assert after["timestamp"] > before["timestamp"]
        bounds = [(ch["min"], ch["max"], ch["shard"]) for ch in chunks_of(mongos, "rf.c")]
        assert bounds == [({"k": MinKey(), "s": MinKey()}, {"k": 0, "s": MinKey()}, "shard0"),
                          ({"k": 0, "s": MinKey()}, {"k": MaxKey(), "s": MaxKey()}, "shard1")]
        # split inside one value of the old key and move the upper half
        mongos.admin.command("split", "rf.c", middle={"k": 4, "s": 20})
        mongos.admin.command("moveChunk", "rf.c", find={"k": 4, "s": 25}, to="shard0")
        on0 = {d["_id"] for d in shards[0].rf.c.find({"k": 4})}
        on1 = {d["_id"] for d in shards[1].rf.c.find({"k": 4})}
        assert on0 == {29, 39} and on1 == {9, 19}, (on0, on1)
        # the router that never refreshed: refused by the shards, reloads
        s = stale.rf.c
        assert sorted(d["_id"] for d in s.find({"k": 4})) == [9, 19, 29, 39]
        s.insert_one({"_id": 200, "k": 4, "s": 30})
        s.insert_one({"_id": 201, "k": 4})  # s missing: null, below 20
        assert shards[0].rf.c.find_one({"_id": 200}) is not None
        assert shards[1].rf.c.find_one({"_id": 201}) is not None
        assert s.find_one({"k": 4, "s": None})["_id"] == 201
        assert s.find_one({"k": 5, "s": None})["_id"] == 100
        assert s.update_one({"k": 4, "s": 30}, {"$set": {"x": 1}}).modified_count == 1
        assert shards[0].rf.c.find_one({"_id": 200})["x"] == 1
        assert s.count_documents({}) == 43 and c.count_documents({}) == 43
        assert s.delete_one({"k": 4, "s": 30}).deleted_count == 1
        stale.close()
