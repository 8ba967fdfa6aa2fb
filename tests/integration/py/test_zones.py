"""
Zones (docs/sharding.md, "Zones"): addShardToZone, removeShardFromZone and
updateZoneKeyRange through sable-router, their config.shards tags and
config.tags documents in mongod 7.0's shapes and mongod's errors; the
balancer splitting a chunk at a zone range's bounds and moving the range's
chunk to the zone's shard; shardCollection's first chunks for a collection
with zone ranges (one chunk per range, and presplitHashedZones).  A config
server and three one-member shards (build/sable-cluster start --sharded).
"""

import os
import sys
import time

import pymongo
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from checks import code_of  # noqa: E402


cluster = sharded.cluster_fixture("sable-zones-", shards=3)
mongos = sharded.mongos_fixture(uuidRepresentation="standard")
shards = sharded.shards_fixture(by_name=True)


def chunks_of(mongos, ns):
    return [(c["min"], c["max"], c["shard"]) for c in sharded.chunks(mongos, ns)]


def tags_of(mongos, shard):
    return mongos.config.shards.find_one({"_id": shard}).get("tags", [])


def test_zone_commands_and_their_config_documents(mongos):
    adm = mongos.admin
    assert adm.command("addShardToZone", "shard0", zone="ZA")["ok"] == 1
    assert adm.command("addShardToZone", "shard0", zone="ZA")["ok"] == 1  # $addToSet
    assert tags_of(mongos, "shard0") == ["ZA"]
    listed = {s["_id"]: s for s in adm.command("listShards")["shards"]}
    assert listed["shard0"]["tags"] == ["ZA"] and "tags" not in listed["shard1"]
    assert code_of(lambda: adm.command("addShardToZone", "nosuch", zone="ZA")) == 70
    assert code_of(lambda: mongos.test.command("addShardToZone", "shard0", zone="ZA")) == 13

    # a namespace that is not sharded (not even there): stored as given
    adm.command("updateZoneKeyRange", "zc.pre", min={"k": 0}, max={"k": 10}, zone="ZA")
    t = mongos.config.tags.find_one({"ns": "zc.pre"})
    assert list(t) == ["_id", "ns", "min", "max", "tag"] and isinstance(t["_id"], ObjectId)
    assert (t["min"], t["max"], t["tag"]) == ({"k": 0}, {"k": 10}, "ZA")

    # a sharded collection: the bounds are extended to the whole shard key
    adm.command("enableSharding", "zc")
    adm.command("shardCollection", "zc.c", key={"a": 1, "b": 1})
    adm.command("updateZoneKeyRange", "zc.c", min={"a": 100}, max={"a": 200}, zone="ZA")
    adm.command("updateZoneKeyRange", "zc.c", min={"a": 100}, max={"a": 200}, zone="ZA")  # again
    ts = list(mongos.config.tags.find({"ns": "zc.c"}))
    assert [(t["min"], t["max"], t["tag"]) for t in ts] == [
        ({"a": 100, "b": MinKey()}, {"a": 200, "b": MinKey()}, "ZA")]

    def upd(mn, mx, zone, ns="zc.c"):
        return lambda: adm.command("updateZoneKeyRange", ns, min=mn, max=mx, zone=zone)

    adm.command("addShardToZone", "shard1", zone="ZB")
    assert code_of(upd({"a": 150}, {"a": 300}, "ZA")) == 178  # RangeOverlapConflict
    assert code_of(upd({"a": 100}, {"a": 200}, "ZB")) == 178  # the same range, another zone
    assert code_of(upd({"a": 50}, {"a": 250}, "ZB")) == 178  # holds it
    assert code_of(upd({"a": 300}, {"a": 400}, "nozone")) == 177  # ZoneNotFound
    assert code_of(upd({"x": 1}, {"x": 2}, "ZA")) == 61  # not a shard key prefix
    assert code_of(upd({"b": 1}, {"b": 2}, "ZA")) == 61
    assert code_of(upd({"a": 5}, {"a": 5}, "ZA")) == 9  # FailedToParse: min not below max
    assert code_of(upd({"a": 5}, {"a": 6}, 7)) == 14
    assert code_of(upd({"k": 1}, {"k": 2, "j": 1}, "ZA", ns="zc.other")) == 61  # differ
    adm.command("shardCollection", "zc.h", key={"h": "hashed"})
    assert code_of(upd({"h": 1}, {"h": 5}, "ZA", ns="zc.h")) == 72  # not NumberLong
    adm.command("updateZoneKeyRange", "zc.h", min={"h": Int64(1)}, max={"h": MaxKey()},
                zone="ZA")

    # the zone's last shard cannot leave it while a range names it
    assert code_of(lambda: adm.command("removeShardFromZone", "shard0", zone="ZA")) == 163
    assert code_of(lambda: adm.command("removeShardFromZone", "nosuch", zone="ZA")) == 70
    adm.command("addShardToZone", "shard1", zone="ZA")  # ... unless another shard has it
    adm.command("removeShardFromZone", "shard1", zone="ZA")
    adm.command("removeShardFromZone", "shard1", zone="ZB")
    adm.command("removeShardFromZone", "shard1", zone="never")  # not in it: nothing to do
    assert tags_of(mongos, "shard1") == []
    # zone: null removes a range (the same bounds as given, extended as stored)
    for ns, mn, mx in (("zc.c", {"a": 100}, {"a": 200}), ("zc.pre", {"k": 0}, {"k": 10}),
                       ("zc.h", {"h": Int64(1)}, {"h": MaxKey()})):
        adm.command("updateZoneKeyRange", ns, min=mn, max=mx, zone=None)
        assert mongos.config.tags.count_documents({"ns": ns}) == 0
    adm.command("updateZoneKeyRange", "zc.c", min={"a": 1}, max={"a": 2}, zone=None)  # none
    adm.command("removeShardFromZone", "shard0", zone="ZA")
    assert tags_of(mongos, "shard0") == []


# not sharded.wait_for: returns what fn returned and fails with `what`
def wait_for(what, fn, seconds=60):
    deadline = time.time() + seconds
    while True:
        got = fn()
        if got:
            return got
        assert time.time() < deadline, what
        time.sleep(0.2)


def test_balancer_splits_at_zone_bounds_and_moves_the_zone_chunks(mongos, shards):
    adm = mongos.admin
    adm.command("balancerStart")
    adm.command("enableSharding", "zb")
    adm.command("shardCollection", "zb.c", key={"k": 1})
    mongos.zb.c.insert_many([{"_id": i, "k": i} for i in range(100)])
    (_, _, primary), = chunks_of(mongos, "zb.c")
    other = "shard1" if primary == "shard0" else "shard0"
    adm.command("addShardToZone", other, zone="MID")
    adm.command("addShardToZone", primary, zone="TOP")
    adm.command("updateZoneKeyRange", "zb.c", min={"k": 20}, max={"k": 40}, zone="MID")
    adm.command("updateZoneKeyRange", "zb.c", min={"k": 90}, max={"k": MaxKey()}, zone="TOP")

    def placed():
        cs = chunks_of(mongos, "zb.c")
        bounds = {c[0]["k"] for c in cs if not isinstance(c[0]["k"], MinKey)}
        inside = [c for c in cs if c[0]["k"] != MinKey() and 20 <= c[0]["k"] < 40]
        top = [c for c in cs if c[0]["k"] != MinKey() and c[0]["k"] >= 90]
        ok = ({20, 40, 90} <= bounds and all(c[2] == other for c in inside) and
              all(c[2] == primary for c in top))
        return cs if ok else None

    cs = wait_for("the zone's chunk on its shard", placed)
    assert ({"k": 20}, {"k": 40}, other) in cs
    # the documents moved with it; the router still finds each once
    wait_for("the range's documents on the zone's shard",
             lambda: shards[other].zb.c.count_documents({"k": {"$gte": 20, "$lt": 40}}) == 20)
    assert shards[primary].zb.c.count_documents({"k": {"$gte": 90}}) == 10
    assert mongos.zb.c.count_documents({}) == 100
    assert sorted(d["_id"] for d in mongos.zb.c.find({"k": {"$gte": 15, "$lt": 45}})) == \
        list(range(15, 45))
    # a zone moved to the other shard takes its chunks along
    adm.command("addShardToZone", primary, zone="MID")
    adm.command("removeShardFromZone", other, zone="MID")
    wait_for("the zone's chunk back on its new shard",
             lambda: ({"k": 20}, {"k": 40}, primary) in chunks_of(mongos, "zb.c"))
    assert mongos.zb.c.count_documents({}) == 100


def test_shard_collection_with_zone_ranges(mongos):
    """An empty collection with zone ranges: a chunk per range on its zone's
    shard, a chunk per gap on every shard in turn (mongod's
    SingleChunkPerTagSplitPolicy)."""
    adm = mongos.admin
    adm.command("enableSharding", "zs")
    adm.command("addShardToZone", "shard0", zone="LOW")
    adm.command("addShardToZone", "shard1", zone="HIGH")
    adm.command("updateZoneKeyRange", "zs.r", min={"k": 10}, max={"k": 20}, zone="LOW")
    adm.command("updateZoneKeyRange", "zs.r", min={"k": 30}, max={"k": 40}, zone="HIGH")
    adm.command("shardCollection", "zs.r", key={"k": 1})
    assert chunks_of(mongos, "zs.r") == [
        ({"k": MinKey()}, {"k": 10}, "shard0"), ({"k": 10}, {"k": 20}, "shard0"),
        ({"k": 20}, {"k": 30}, "shard1"), ({"k": 30}, {"k": 40}, "shard1"),
        ({"k": 40}, {"k": MaxKey()}, "shard2")]
    # ranges that do not fit the proposed key
    adm.command("updateZoneKeyRange", "zs.bad", min={"x": 1}, max={"x": 2}, zone="LOW")
    assert code_of(lambda: adm.command("shardCollection", "zs.bad", key={"k": 1})) == 72
    assert code_of(lambda: adm.command("shardCollection", "zs.bad", key={"x": 1, "y": 1})) == 72
    # numInitialChunks needs a hashed field and an empty collection
    assert code_of(lambda: adm.command("shardCollection", "zs.n", key={"k": 1},
                                       numInitialChunks=4)) == 72


def test_presplit_hashed_zones(mongos, shards):
    adm = mongos.admin
    adm.command("enableSharding", "zh")
    adm.command("addShardToZone", "shard0", zone="EU")
    adm.command("addShardToZone", "shard1", zone="US")
    key = {"country": 1, "uid": "hashed"}

    def rng(ns, lo, hi, zone):
        adm.command("updateZoneKeyRange", ns, min=lo, max=hi, zone=zone)

    def c(country, uid=MinKey()):
        return {"country": country, "uid": uid}

    rng("zh.users", c("DE"), c("DF"), "EU")
    rng("zh.users", c("US"), c("UT"), "US")
    adm.command("shardCollection", "zh.users", key=key, presplitHashedZones=True)
    # each range over its zone's shard: 2 per shard holding a zone (4) over the 2
    # shards, so 2 chunks a range split at hash 0; the gaps on every shard in turn
    assert chunks_of(mongos, "zh.users") == [
        (c(MinKey()), c("DE"), "shard0"),
        (c("DE"), c("DE", Int64(0)), "shard0"), (c("DE", Int64(0)), c("DF"), "shard0"),
        (c("DF"), c("US"), "shard1"),
        (c("US"), c("US", Int64(0)), "shard1"), (c("US", Int64(0)), c("UT"), "shard1"),
        (c("UT"), c(MaxKey(), MaxKey()), "shard2")]
    mongos.zh.users.insert_many([{"country": cc, "uid": i} for cc in ("DE", "US")
                                 for i in range(50)])
    assert shards["shard0"].zh.users.count_documents({"country": "DE"}) == 50
    assert shards["shard1"].zh.users.count_documents({"country": "US"}) == 50
    assert mongos.zh.users.count_documents({"country": "US"}) == 50

    # numInitialChunks: at least that many over the zones' shards
    rng("zh.n", c("DE"), c("DF"), "EU")
    adm.command("shardCollection", "zh.n", key=key, presplitHashedZones=True, numInitialChunks=6)
    assert len([x for x in chunks_of(mongos, "zh.n") if x[0]["country"] == "DE"]) == 6

    # a hashed prefix: one range over the whole key, split over its zone's shard
    rng("zh.p", {"uid": MinKey()}, {"uid": MaxKey()}, "EU")
    adm.command("shardCollection", "zh.p", key={"uid": "hashed"}, presplitHashedZones=True)
    assert chunks_of(mongos, "zh.p") == [({"uid": MinKey()}, {"uid": Int64(0)}, "shard0"),
                                        ({"uid": Int64(0)}, {"uid": MaxKey()}, "shard0")]

    # mongod's rules
    def refused(ns, k=key, **kw):
        return code_of(lambda: adm.command("shardCollection", ns, key=k, presplitHashedZones=True,
                                           **kw))

    assert refused("zh.none") == 31387  # no zone range
    assert refused("zh.none", k={"country": 1}) == 31387  # no hashed field
    mongos.zh.full.insert_one({"country": "DE", "uid": 1})
    rng("zh.full", c("DE"), c("DF"), "EU")
    assert refused("zh.full") == 31387  # not empty
    rng("zh.part", {"uid": Int64(0)}, {"uid": MaxKey()}, "EU")
    assert refused("zh.part", k={"uid": "hashed"}) == 31412
    rng("zh.minkey", c(MinKey()), c("US"), "EU")
    assert refused("zh.minkey") == 31388
    rng("zh.same", c("US"), c("US", MaxKey()), "US")
    assert refused("zh.same") == 31390
    rng("zh.hash", c("US", Int64(5)), c("UT"), "US")
    assert refused("zh.hash") == 31389
    rng("zh.suffix", {"country": "US", "uid": MinKey(), "s": 1},
        {"country": "UT", "uid": MinKey(), "s": MinKey()}, "US")
    assert refused("zh.suffix", k={"country": 1, "uid": "hashed", "s": 1}) == 31391


def test_a_draining_shard_gives_a_zoned_collection_its_chunks(mongos, cluster):
    """The zone policy moves a zoned collection's chunks off a draining shard
    (config.shards draining: true, as removeShard sets it) to the shards they
    may be on: the zone's shards for a zone's range, any shard otherwise."""
    adm = mongos.admin
    adm.command("balancerStart")
    adm.command("addShardToZone", "shard1", zone="BOTH")
    adm.command("addShardToZone", "shard2", zone="BOTH")
    adm.command("enableSharding", "zd")
    adm.command("updateZoneKeyRange", "zd.c", min={"k": 0}, max={"k": 50}, zone="BOTH")
    adm.command("shardCollection", "zd.c", key={"k": 1})  # empty: chunks in the range's bounds
    assert [c[2] for c in chunks_of(mongos, "zd.c")] == ["shard0", "shard1", "shard1"]
    mongos.zd.c.insert_many([{"k": i} for i in range(-20, 80)])
    cfg = pymongo.MongoClient("127.0.0.1", cluster["config"], directConnection=True)
    try:
        cfg.config.shards.update_one({"_id": "shard1"}, {"$set": {"draining": True}})
        cs = wait_for("every chunk off the draining shard",
                      lambda: all(c[2] != "shard1" for c in chunks_of(mongos, "zd.c")) and
                      chunks_of(mongos, "zd.c"))
        assert ({"k": 0}, {"k": 50}, "shard2") in cs  # the zone's other shard
    finally:
        cfg.config.shards.update_one({"_id": "shard1"}, {"$unset": {"draining": 1}})
        cfg.close()
    assert mongos.zd.c.count_documents({}) == 100
