"""
Chunk merging and jumbo chunks through sable-router, after mongos/mongod 7.0
(issue 28, docs/sharding.md "Merging chunks"): one cluster of two one-member
shard sets, the balancer stopped except for the AutoMerger's test.

- mergeChunks rewrites config.chunks (one chunk at the collection's next minor
  version) and every document is still found by routed reads and by a
  shard-key-targeted write; mongod's errors for bad bounds, chunks of two
  shards, an unsharded namespace;
- mergeAllChunksOnShard merges each run of contiguous chunks of the shard
  that are not jumbo and have been on it longer than the history window (the
  longest of minSnapshotHistoryWindowInSeconds, transactionLifetimeLimitSeconds
  and 10 s);
- the AutoMerger (autoMergerIntervalSecs 1 s) merges after splits while
  config.settings' automerge document and the collection allow it;
- a jumbo chunk is refused (153), moves with forceJumbo, and clearJumboFlag
  clears the flag.
"""
import os
import sys
import time

import pytest
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from checks import code_of  # noqa: E402

PAD = "x" * 5000  # ~5 KB documents: 1 MiB is about 200 of them


cluster = sharded.cluster_fixture("sable-merge-")
mongos = sharded.mongos_fixture(stop_balancer=True, enable=["mg"])
shards = sharded.shards_fixture(by_name=True)


@pytest.fixture(scope="module")
def config(cluster):
    """The config server, with the history window mergeAllChunksOnShard waits
    out at its least: 10 s (minSnapshotHistoryWindowInSeconds and
    transactionLifetimeLimitSeconds 1 s)."""
    c = sharded.direct(cluster["config"], serverSelectionTimeoutMS=30000)
    c.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=1,
                    transactionLifetimeLimitSeconds=1)
    yield c
    c.close()


HISTORY_S = 12  # a chunk is mergeable this long after it came to its shard (10 s, whole seconds)


chunks_of = sharded.chunks


def layout(client, ns):
    return [(c["min"]["k"], c["max"]["k"], c["shard"]) for c in chunks_of(client, ns)]


def version(c):
    return (c["lastmod"].time, c["lastmod"].inc)


def sharded_coll(mongos, name, splits, ndocs=0):
    ns = "mg." + name
    mongos.admin.command("shardCollection", ns, key={"k": 1})
    if ndocs:
        mongos.mg[name].insert_many([{"_id": i, "k": i} for i in range(ndocs)])
    for s in splits:
        mongos.admin.command("split", ns, middle={"k": s})
    return ns


def primary_and_other(mongos, ns):
    p = chunks_of(mongos, ns)[0]["shard"]
    return p, "shard1" if p == "shard0" else "shard0"


def all_found(mongos, name, n):
    coll = mongos.mg[name]
    assert coll.count_documents({}) == n
    assert sorted(d["k"] for d in coll.find()) == list(range(n))
    for k in range(0, n, 7):
        assert coll.find_one({"k": k})["_id"] == k


def test_merge_chunks(mongos, shards):
    ns = sharded_coll(mongos, "a", [10, 20, 30, 40], ndocs=60)
    p, other = primary_and_other(mongos, ns)
    mongos.admin.command("moveChunk", ns, bounds=[{"k": 30}, {"k": 40}], to=other)
    before = chunks_of(mongos, ns)
    top = max(version(c) for c in before)

    r = mongos.admin.command("mergeChunks", ns, bounds=[{"k": 10}, {"k": 30}])
    assert r["ok"] == 1
    after = chunks_of(mongos, ns)
    assert layout(mongos, ns) == [(MinKey(), 10, p), (10, 30, p), (30, 40, other),
                                  (40, MaxKey(), p)]
    merged = after[1]
    assert merged["_id"] == before[1]["_id"]  # the first chunk of the run stays, the rest go
    assert version(merged) == (top[0], top[1] + 1)  # the collection's next minor version
    log = mongos.config.changelog.find_one({"what": "merge", "ns": ns})
    assert log["details"]["numChunks"] == 2 and log["details"]["owningShard"] == p
    assert log["details"]["min"] == {"k": 10} and log["details"]["max"] == {"k": 30}
    assert log["details"]["mergedVersion"]["v"] == Timestamp(*version(merged))
    assert len(merged["history"]) == 1 and merged["history"][0]["shard"] == p
    assert merged["onCurrentShardSince"] == merged["history"][0]["validAfter"]

    # routed reads and a targeted write find every document, on the right shard
    all_found(mongos, "a", 60)
    r = mongos.mg.a.update_one({"k": 15}, {"$set": {"x": 1}})
    assert r.matched_count == 1 and r.modified_count == 1
    assert shards[p].mg.a.find_one({"k": 15})["x"] == 1
    assert mongos.mg.a.find_one({"k": 25})["_id"] == 25
    # the router reloaded its routing table
    assert mongos.admin.command("getShardVersion", ns)["version"] == Timestamp(*version(merged))

    # the whole shard's side of the range, from MinKey: three chunks into one is fine too
    mongos.admin.command("mergeChunks", ns, bounds=[{"k": MinKey()}, {"k": 30}])
    assert layout(mongos, ns)[0] == (MinKey(), 30, p)
    # a range that already is one chunk: success, nothing changes (mongod 7.0)
    v = version(chunks_of(mongos, ns)[0])
    mongos.admin.command("mergeChunks", ns, bounds=[{"k": MinKey()}, {"k": 30}])
    assert version(chunks_of(mongos, ns)[0]) == v
    all_found(mongos, "a", 60)
    mongos.mg.a.insert_one({"_id": 100, "k": 5})  # a targeted insert into the merged chunk
    assert shards[p].mg.a.find_one({"_id": 100})["k"] == 5
    mongos.mg.a.delete_one({"k": 5, "_id": 100})


def test_merge_hashed_chunks(mongos):
    # bounds of a hashed key are hashed values, as config.chunks holds them
    ns = "mg.hashed"
    mongos.admin.command("shardCollection", ns, key={"k": "hashed"}, numInitialChunks=2)
    mongos.mg.hashed.insert_many([{"_id": i, "k": i} for i in range(40)])
    first = chunks_of(mongos, ns)[0]
    mongos.admin.command("split", ns, bounds=[first["min"], first["max"]])
    assert chunks_of(mongos, ns)[0]["max"] != first["max"]  # split in two
    mongos.admin.command("mergeChunks", ns, bounds=[first["min"], first["max"]])
    merged = chunks_of(mongos, ns)[0]
    assert (merged["min"], merged["max"], merged["shard"]) == (first["min"], first["max"],
                                                               first["shard"])
    assert mongos.mg.hashed.count_documents({}) == 40
    for k in range(0, 40, 3):
        assert mongos.mg.hashed.find_one({"k": k})["_id"] == k


def test_merge_chunks_errors(mongos):
    ns = sharded_coll(mongos, "errs", [10, 20, 30])
    p, other = primary_and_other(mongos, ns)
    mongos.admin.command("moveChunk", ns, bounds=[{"k": 20}, {"k": 30}], to=other)
    before = layout(mongos, ns)
    adm = mongos.admin
    # bounds not on chunk boundaries; chunks of two shards (a run broken by
    # another shard's chunk); the range inside one chunk
    for b in ([{"k": 5}, {"k": 20}], [{"k": 10}, {"k": 25}], [{"k": 10}, {"k": MaxKey()}],
              [{"k": 11}, {"k": 12}]):
        with pytest.raises(OperationFailure) as e:
            adm.command("mergeChunks", ns, bounds=b)
        assert e.value.code == 20 and e.value.details["codeName"] == "IllegalOperation"
        assert "does not contain a sequence of chunks that exactly fills the range" in str(e.value)
    # malformed bounds (mongos answers these with its own messages)
    assert code_of(lambda: adm.command("mergeChunks", ns)) == 2
    assert code_of(lambda: adm.command("mergeChunks", ns, bounds=[])) == 2
    assert code_of(lambda: adm.command("mergeChunks", ns, bounds=[{"k": 1}])) == 2
    assert code_of(lambda: adm.command("mergeChunks", ns,
                                       bounds=[{"k": 1}, {"k": 2}, {"k": 3}])) == 2
    assert code_of(lambda: adm.command("mergeChunks", ns, bounds=[{"j": 10}, {"j": 20}])) == 2
    assert code_of(lambda: adm.command("mergeChunks", ns, bounds=[{}, {"k": 20}])) == 2
    # an unsharded namespace, a database name, not the admin database
    mongos.mg.plain.insert_one({"k": 1})
    assert code_of(lambda: adm.command("mergeChunks", "mg.plain",
                                       bounds=[{"k": 0}, {"k": 10}])) == 118
    assert code_of(lambda: adm.command("mergeChunks", "mg",
                                       bounds=[{"k": 0}, {"k": 10}])) == 73
    assert code_of(lambda: mongos.mg.command("mergeChunks", ns,
                                             bounds=[{"k": 10}, {"k": 20}])) == 13
    # moveChunk and moveRange look the collection up the same way (rt_sharded_coll)
    for cmd, kw in (("moveChunk", {"find": {"k": 1}, "to": other}),
                    ("moveRange", {"min": {"k": 0}, "toShard": other})):
        with pytest.raises(OperationFailure) as e:
            adm.command(cmd, "mg.plain", **kw)
        assert e.value.code == 118 and "Collection mg.plain is not sharded." in str(e.value)
    assert code_of(lambda: adm.command("moveChunk", "mg", find={"k": 1}, to=other)) == 73
    assert layout(mongos, ns) == before  # nothing changed


def test_merge_all_chunks_on_shard(mongos, config):
    # the manual's example: A-D on shard0, E-F on shard1, G-H on shard0, I on shard1
    ns = sharded_coll(mongos, "all", [0, 10, 20, 30, 40, 50, 60, 70, 80, 90])
    p, other = primary_and_other(mongos, ns)
    for lo in (40, 50, 80):
        mongos.admin.command("moveChunk", ns, bounds=[{"k": lo}, {"k": lo + 10}], to=other)
    before = layout(mongos, ns)
    # no chunk has been on its shard for the history window (10 s at least) yet
    mongos.admin.command("mergeAllChunksOnShard", ns, shard=p)
    assert layout(mongos, ns) == before
    time.sleep(HISTORY_S)
    mongos.admin.command("mergeAllChunksOnShard", ns, shard=p, maxNumberOfChunksToMerge=3)
    assert layout(mongos, ns)[:3] == [(MinKey(), 20, p), (20, 30, p), (30, 40, p)]
    mongos.admin.command("mergeAllChunksOnShard", ns, shard=p)
    assert layout(mongos, ns) == [(MinKey(), 40, p), (40, 50, other), (50, 60, other),
                                  (60, 80, p), (80, 90, other), (90, MaxKey(), p)]
    mongos.admin.command("mergeAllChunksOnShard", ns, shard=other)
    assert layout(mongos, ns) == [(MinKey(), 40, p), (40, 60, other), (60, 80, p),
                                  (80, 90, other), (90, MaxKey(), p)]
    # each merged chunk took its own next minor version
    vs = sorted(version(c) for c in chunks_of(mongos, ns))
    assert len(set(vs)) == len(vs)
    assert code_of(lambda: mongos.admin.command("mergeAllChunksOnShard", ns,
                                                shard="nosuch")) == 70
    assert code_of(lambda: mongos.admin.command("mergeAllChunksOnShard", ns)) == 40414
    assert code_of(lambda: mongos.admin.command("mergeAllChunksOnShard", "mg.plain",
                                                shard=p)) == 118


# not sharded.wait_for: a PyMongoError from pred fails the test here, and
# pred is asked once more at the deadline
def wait_for(pred, secs=40):
    deadline = time.time() + secs
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.5)
    return pred()


def test_auto_merger(mongos, config):
    # two contiguous chunks on each shard: balanced, so the balancer moves nothing
    ns = sharded_coll(mongos, "auto", [0, 10, 20], ndocs=30)
    off = sharded_coll(mongos, "noauto", [0, 10])
    nobal = sharded_coll(mongos, "nobal", [0, 10])
    mongos.config.collections.update_one({"_id": nobal}, {"$set": {"noBalance": True}})
    p, other = primary_and_other(mongos, ns)
    for lo, hi in ((10, 20), (20, MaxKey())):
        mongos.admin.command("moveChunk", ns, bounds=[{"k": lo}, {"k": hi}], to=other)
    mongos.admin.command("configureCollectionBalancing", off, enableAutoMerger=False)
    assert mongos.config.collections.find_one({"_id": off})["enableAutoMerge"] is False
    # sh.stopAutoMerger()
    mongos.config.settings.update_one({"_id": "automerge"}, {"$set": {"enabled": False}},
                                      upsert=True)
    old = config.admin.command("getParameter", 1, autoMergerIntervalSecs=1)
    assert old["autoMergerIntervalSecs"] == 3600
    config.admin.command("setParameter", 1, autoMergerIntervalSecs=1)
    mongos.admin.command("balancerStart")
    try:
        time.sleep(HISTORY_S)  # rounds ran and the chunks are mergeable: the AutoMerger is stopped
        assert len(chunks_of(mongos, ns)) == 4
        # sh.startAutoMerger()
        mongos.config.settings.update_one({"_id": "automerge"}, {"$set": {"enabled": True}},
                                          upsert=True)
        assert wait_for(lambda: layout(mongos, ns) == [(MinKey(), 10, p), (10, MaxKey(), other)])
        all_found(mongos, "auto", 30)
        assert mongos.mg.auto.update_one({"k": 25}, {"$set": {"y": 2}}).modified_count == 1
        # a split is merged again at a later round
        mongos.admin.command("split", ns, middle={"k": 15})
        assert len(chunks_of(mongos, ns)) == 3
        assert wait_for(lambda: len(chunks_of(mongos, ns)) == 2)
        # enableAutoMerger: false keeps the other collection's chunks apart, and so does
        # noBalance (the balancing settings come first, as in mongod)
        assert len(chunks_of(mongos, off)) == 3
        assert len(chunks_of(mongos, nobal)) == 3
    finally:
        mongos.admin.command("balancerStop")
        config.admin.command("setParameter", 1, autoMergerIntervalSecs=3600)
    assert code_of(lambda: config.admin.command("setParameter", 1, autoMergerIntervalSecs=0)) == 2


def test_jumbo_force_and_clear(mongos, shards, config):
    ns = sharded_coll(mongos, "jumbo", [])
    mongos.admin.command("configureCollectionBalancing", ns, chunkSize=1)
    mongos.mg.jumbo.insert_many([{"k": 7, "pad": PAD} for _ in range(400)] +
                                [{"k": 1}, {"k": 20}])
    mongos.admin.command("split", ns, middle={"k": 5})
    mongos.admin.command("split", ns, middle={"k": 10})
    p, other = primary_and_other(mongos, ns)
    with pytest.raises(OperationFailure) as e:
        mongos.admin.command("moveChunk", ns, find={"k": 7}, to=other)
    assert e.value.code == 153
    assert chunks_of(mongos, ns)[1]["jumbo"] is True
    # a jumbo chunk is not mergeable: its neighbours are no run either
    time.sleep(HISTORY_S)
    mongos.admin.command("mergeAllChunksOnShard", ns, shard=p)
    assert layout(mongos, ns) == [(MinKey(), 5, p), (5, 10, p), (10, MaxKey(), p)]
    # clearJumboFlag by find: the flag goes, the chunk takes a new major version
    top = max(version(c) for c in chunks_of(mongos, ns))
    mongos.admin.command("clearJumboFlag", ns, find={"k": 7})
    mid = chunks_of(mongos, ns)[1]
    assert "jumbo" not in mid and version(mid) == (top[0] + 1, 0)
    # moved again without forceJumbo: refused and marked again
    assert code_of(lambda: mongos.admin.command("moveChunk", ns, find={"k": 7}, to=other)) == 153
    assert chunks_of(mongos, ns)[1]["jumbo"] is True
    # clearJumboFlag by bounds; a chunk that is not jumbo: nothing to do
    mongos.admin.command("clearJumboFlag", ns, bounds=[{"k": 5}, {"k": 10}])
    assert "jumbo" not in chunks_of(mongos, ns)[1]
    v = version(chunks_of(mongos, ns)[0])
    mongos.admin.command("clearJumboFlag", ns, bounds=[{"k": MinKey()}, {"k": 5}])
    assert version(chunks_of(mongos, ns)[0]) == v
    adm = mongos.admin
    assert code_of(lambda: adm.command("clearJumboFlag", ns, bounds=[{"k": 5}, {"k": 9}])) == 51262
    assert code_of(lambda: adm.command("clearJumboFlag", ns)) == 51261
    assert code_of(lambda: adm.command("clearJumboFlag", ns, find={"k": 7},
                                       bounds=[{"k": 5}, {"k": 10}])) == 51260
    assert code_of(lambda: adm.command("clearJumboFlag", "mg.plain", find={"k": 7})) == 118
    # forceJumbo moves it anyway (marked again by a refused try first)
    assert code_of(lambda: adm.command("moveChunk", ns, find={"k": 7}, to=other)) == 153
    r = adm.command("moveChunk", ns, find={"k": 7}, to=other, forceJumbo=True)
    assert r["ok"] == 1
    moved = chunks_of(mongos, ns)[1]
    assert moved["shard"] == other and "jumbo" not in moved  # as mongod's commit
    assert shards[other].mg.jumbo.count_documents({"k": 7}) == 400
    # the donor's copy goes with its range deletion, after the migration (docs/sharding.md)
    assert wait_for(lambda: shards[p].mg.jumbo.count_documents({"k": 7}) == 0, 60)
    assert mongos.mg.jumbo.count_documents({}) == 402
    # moveRange takes forceJumbo too: back to the first shard
    adm.command("moveRange", ns, min={"k": 5}, max={"k": 10}, toShard=p, forceJumbo=True)
    assert chunks_of(mongos, ns)[1]["shard"] == p
    assert mongos.mg.jumbo.count_documents({"k": 7}) == 400
    # a split clears the flag (as mongod's)
    assert code_of(lambda: adm.command("moveChunk", ns, find={"k": 7}, to=other)) == 153
    assert chunks_of(mongos, ns)[1].get("jumbo") is True
    adm.command("split", ns, middle={"k": 7})
    assert "jumbo" not in chunks_of(mongos, ns)[1]
