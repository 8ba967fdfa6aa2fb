"""
Chunk size and jumbo chunks through sable-router, after mongod 7.0 (issue 28,
docs/sharding.md "Chunk size and jumbo chunks"): one cluster of two one-member
shard sets, the balancer stopped except where a test starts it.

- configureCollectionBalancing sets config.collections' maxChunkSizeBytes
  (chunkSize 0 removes it) and enableAutoMerge; balancerCollectionStatus
  answers chunkSize (MiB: the collection's, config.settings' chunksize, or
  128) and whether the collection is balanced (by data size, not chunks);
- with a chunk size of 1 MiB, moveRange with only min moves about 1 MiB of
  documents (the chunk is split where that ends);
- a chunk whose documents all share one shard key value and exceed the chunk
  size is refused (153 ChunkTooBig), marked jumbo: true, and the balancer
  (the shards 3 chunk sizes apart) moves the collection's other chunks but
  leaves it where it is.
"""
import os
import sys
import time

import pytest
from bson.min_key import MinKey
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402

PAD = "x" * 5000  # ~5 KB documents: 1 MiB is about 200 of them


cluster = sharded.cluster_fixture("sable-chunksize-")
mongos = sharded.mongos_fixture(stop_balancer=True, enable=["cs"])
shards = sharded.shards_fixture()
chunks_of = sharded.chunks


def primary_and_other(client, db):
    """The database's primary shard and the other one, with their indexes
    into the shards fixture (shard0, shard1)."""
    p = client.config.databases.find_one({"_id": db})["primary"]
    other = "shard1" if p == "shard0" else "shard0"
    return p, other, int(p[-1]), int(other[-1])


def test_configure_collection_balancing_and_status(mongos):
    mongos.admin.command("shardCollection", "cs.conf", key={"k": 1})
    r = mongos.admin.command("configureCollectionBalancing", "cs.conf", chunkSize=2,
                             enableAutoMerger=False)
    assert r["ok"] == 1
    doc = mongos.config.collections.find_one({"_id": "cs.conf"})
    assert doc["maxChunkSizeBytes"] == 2 * 1024 * 1024 and doc["enableAutoMerge"] is False
    st = mongos.admin.command("balancerCollectionStatus", "cs.conf")
    assert st["chunkSize"] == 2 and st["balancerCompliant"] is True
    assert "firstComplianceViolation" not in st
    mongos.admin.command("configureCollectionBalancing", "cs.conf", chunkSize=0)
    assert "maxChunkSizeBytes" not in mongos.config.collections.find_one({"_id": "cs.conf"})
    assert mongos.admin.command("balancerCollectionStatus", "cs.conf")["chunkSize"] == 128
    mongos.config.settings.update_one({"_id": "chunksize"}, {"$set": {"value": 64}},
                                      upsert=True)
    try:
        assert mongos.admin.command("balancerCollectionStatus", "cs.conf")["chunkSize"] == 64
    finally:
        mongos.config.settings.delete_one({"_id": "chunksize"})
    # three empty chunks on one shard of two: balanced (data sizes count,
    # not chunks); 3 chunk sizes of data on it: not balanced
    mongos.admin.command("split", "cs.conf", middle={"k": 10})
    mongos.admin.command("split", "cs.conf", middle={"k": 20})
    st = mongos.admin.command("balancerCollectionStatus", "cs.conf")
    assert st["balancerCompliant"] is True
    mongos.admin.command("configureCollectionBalancing", "cs.conf", chunkSize=1)
    mongos.cs.conf.insert_many([{"k": i, "pad": PAD} for i in range(700)])  # ~3.4 MiB
    st = mongos.admin.command("balancerCollectionStatus", "cs.conf")
    assert st["balancerCompliant"] is False
    assert st["firstComplianceViolation"] == "chunksImbalance"
    mongos.cs.unsharded.insert_one({"a": 1})
    for cmd in ("configureCollectionBalancing", "balancerCollectionStatus"):
        with pytest.raises(OperationFailure) as e:
            mongos.admin.command(cmd, "cs.unsharded")
        assert e.value.code == 118
    with pytest.raises(OperationFailure) as e:
        mongos.admin.command("configureCollectionBalancing", "cs.conf", chunkSize=-1)
    assert e.value.code == 72
    with pytest.raises(OperationFailure) as e:
        mongos.admin.command("configureCollectionBalancing", "cs.conf",
                             defragmentCollection=True)
    assert e.value.code == 238
    mongos.cs.conf.drop()


def test_move_range_with_min_moves_about_one_chunk_size(mongos, shards):
    mongos.admin.command("shardCollection", "cs.big", key={"k": 1})
    mongos.admin.command("configureCollectionBalancing", "cs.big", chunkSize=1)
    mongos.cs.big.insert_many([{"_id": i, "k": i, "pad": PAD} for i in range(400)])
    p, other, _, io = primary_and_other(mongos, "cs")
    mongos.admin.command("moveRange", "cs.big", min={"k": 0}, toShard=other)
    chunks = chunks_of(mongos, "cs.big")
    assert len(chunks) == 3, chunks
    assert [c["shard"] for c in chunks] == [p, other, p]
    assert chunks[0]["min"] == {"k": MinKey()} and chunks[1]["min"] == {"k": 0}
    end = chunks[1]["max"]["k"]
    assert 150 <= end <= 260, end  # about 1 MiB of ~5 KB documents
    assert shards[io].cs.big.count_documents({}) == end
    assert mongos.cs.big.count_documents({}) == 400


def test_one_value_chunk_becomes_jumbo_and_stays(mongos, shards):
    mongos.admin.command("shardCollection", "cs.jumbo", key={"k": 1})
    mongos.admin.command("configureCollectionBalancing", "cs.jumbo", chunkSize=1)
    mongos.cs.jumbo.insert_many([{"k": 7, "pad": PAD} for _ in range(800)] +
                                [{"k": 1}, {"k": 20}])
    mongos.admin.command("split", "cs.jumbo", middle={"k": 5})
    mongos.admin.command("split", "cs.jumbo", middle={"k": 10})
    p, other, ip, _ = primary_and_other(mongos, "cs")
    with pytest.raises(OperationFailure) as e:
        mongos.admin.command("moveChunk", "cs.jumbo", find={"k": 7}, to=other)
    assert e.value.code == 153, e.value  # ChunkTooBig
    mid = chunks_of(mongos, "cs.jumbo")[1]
    assert mid["min"] == {"k": 5} and mid["jumbo"] is True and mid["shard"] == p
    # ~4 MiB on p: the balancer moves the collection's other chunks only
    mongos.admin.command("balancerStart")
    try:
        for _ in range(600):
            if [c["shard"] for c in chunks_of(mongos, "cs.jumbo")] == [other, p, other]:
                break
            time.sleep(0.1)
        time.sleep(3)  # a round or more after the moves
    finally:
        mongos.admin.command("balancerStop")
    chunks = chunks_of(mongos, "cs.jumbo")
    assert [c["shard"] for c in chunks] == [other, p, other], chunks
    assert chunks[1]["jumbo"] is True
    assert shards[ip].cs.jumbo.count_documents({"k": 7}) == 800
    assert mongos.cs.jumbo.count_documents({}) == 802
