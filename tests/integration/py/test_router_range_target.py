"""
The router's targeting of a range on a range shard key's first field, as
mongos's: a chunk [min, max) holds keys below max (exclusive) and from min
(inclusive), so {k: {$gte: x}} leaves out the chunk [.., x) and {k: {$lt: x}}
the chunk [x, ..); $gt and $lte keep both.  With a compound key the chunk
[.., {k: x, j: 5}) still holds k = x.  What is asserted: the shards explain
lists (mongos's queryPlanner.winningPlan.shards) and the documents found.
A config server and two one-member shards (build/sable-cluster start --sharded).
"""

import os
import sys

from bson.max_key import MaxKey
from bson.min_key import MinKey
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402


cluster = sharded.cluster_fixture("sable-rtarget-")
mongos = sharded.mongos_fixture(stop_balancer=True, split=("rt", ["one"]))


def targeted(coll, flt):
    e = coll.database.command("explain", {"find": coll.name, "filter": flt})
    plan = e["queryPlanner"]["winningPlan"]
    return sorted(s["shardName"] for s in plan["shards"])


def found(coll, flt):
    return sorted(d["k"] for d in coll.find(flt))


def test_single_field_key_bounds(mongos):
    c = mongos.rt.one  # k < 0 on shard0, k >= 0 on shard1
    c.insert_many([{"k": k} for k in (-2, -1, 0, 1, 2)])
    cases = [
        ({"$gte": 0}, ["shard1"], [0, 1, 2]),
        ({"$gt": 0}, ["shard1"], [1, 2]),
        ({"$gt": -1}, ["shard0", "shard1"], [0, 1, 2]),
        ({"$gt": -0.5}, ["shard0", "shard1"], [0, 1, 2]),
        ({"$lt": 0}, ["shard0"], [-2, -1]),
        ({"$lte": 0}, ["shard0", "shard1"], [-2, -1, 0]),
        ({"$lte": -1}, ["shard0"], [-2, -1]),
        ({"$gte": 0, "$lt": 2}, ["shard1"], [0, 1]),
        ({"$gt": -5, "$gte": 0}, ["shard1"], [0, 1, 2]),
        ({"$gte": 0, "$gt": 0}, ["shard1"], [1, 2]),
        ({"$gte": -2, "$lt": 0}, ["shard0"], [-2, -1]),
        ({"$eq": 0}, ["shard1"], [0]),
    ]
    for cond, shards_, ks in cases:
        assert targeted(c, {"k": cond}) == shards_, cond
        assert found(c, {"k": cond}) == ks, cond


def test_compound_key_bound_inside_a_value(mongos):
    adm = mongos.admin
    adm.command("shardCollection", "rt.two", key={"k": 1, "j": 1})
    adm.command("split", "rt.two", middle={"k": 0, "j": 5})
    adm.command("shardCollection", "rt.three", key={"k": 1, "j": 1})
    adm.command("split", "rt.three", middle={"k": 0, "j": MinKey()})
    for name in ("two", "three"):
        for find, to in (({"k": -1, "j": 0}, "shard0"), ({"k": 1, "j": 0}, "shard1")):
            try:
                adm.command("moveChunk", "rt." + name, find=find, to=to)
            except OperationFailure as e:
                assert "already" in str(e) or e.code == 117, e
        cs = sharded.chunks(mongos, "rt." + name)
        assert [c["shard"] for c in cs] == ["shard0", "shard1"], cs
    two, three = mongos.rt.two, mongos.rt.three
    two.insert_many([{"k": 0, "j": 1}, {"k": 0, "j": 9}, {"k": 1, "j": 0}])
    three.insert_many([{"k": -1, "j": 1}, {"k": 0, "j": 1}, {"k": 1, "j": 0}])
    # [MinKey, {k: 0, j: 5}) holds {k: 0, j: 1}: $gte 0 needs both shards
    assert targeted(two, {"k": {"$gte": 0}}) == ["shard0", "shard1"]
    assert found(two, {"k": {"$gte": 0}}) == [0, 0, 1]
    assert targeted(two, {"k": {"$gt": 0}}) == ["shard1"]
    assert targeted(two, {"k": {"$lt": 0}}) == ["shard0"]
    # [MinKey, {k: 0, j: MinKey}) holds no k = 0
    assert targeted(three, {"k": {"$gte": 0}}) == ["shard1"]
    assert found(three, {"k": {"$gte": 0}}) == [0, 1]
    assert targeted(three, {"k": 0, "j": {"$gt": 0}}) == ["shard1"]
    assert targeted(three, {"k": {"$lte": 0}}) == ["shard0", "shard1"]


def test_a_bound_alone_stays_in_its_type_bracket(mongos):
    adm = mongos.admin
    adm.command("shardCollection", "rt.four", key={"k": 1})
    adm.command("split", "rt.four", middle={"k": "m"})
    for find, to in (({"k": 0}, "shard0"), ({"k": "z"}, "shard1")):
        try:
            adm.command("moveChunk", "rt.four", find=find, to=to)
        except OperationFailure as e:
            assert "already" in str(e) or e.code == 117, e
    assert [c["shard"] for c in sharded.chunks(mongos, "rt.four")] == ["shard0", "shard1"]
    four = mongos.rt.four  # [MinKey, "m"): numbers and strings < "m"; ["m", MaxKey): strings
    four.insert_many([{"k": k} for k in (1, 5, 9, "a", "n", "q")])
    # {$gte: 5} holds numbers only: the chunk of strings from "m" is left out (mongos's
    # bounds [5, Infinity])
    assert targeted(four, {"k": {"$gte": 5}}) == ["shard0"]
    assert found(four, {"k": {"$gte": 5}}) == [5, 9]
    assert targeted(four, {"k": {"$lt": "z"}}) == ["shard0", "shard1"]
    assert targeted(four, {"k": {"$gt": "n"}}) == ["shard1"]
    assert targeted(four, {"k": {"$gte": MinKey()}}) == ["shard0", "shard1"]
    assert targeted(four, {"k": {"$lte": MaxKey()}}) == ["shard0", "shard1"]
    assert sorted(map(str, (d["k"] for d in four.find({"k": {"$lt": "o"}})))) == ["a", "n"]
