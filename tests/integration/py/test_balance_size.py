"""
The balancer balances by data size, as mongod 7.0 does (issue 28,
docs/sharding.md "Migrations and the balancer"): one cluster of two
one-member shard sets, collections with a 1 MiB chunk size.

- each shard answers _shardsvrGetStatsForBalancing with a collection's data
  size (MiB by default, bytes with scaleFactor: 1, 0 where it is not);
- chunks evenly spread (two per shard) but ~8 MiB on one shard against a
  few KB on the other: balancerCollectionStatus says chunksImbalance, and the
  balancer moves about a chunk size at a time (splitting the donor's chunk)
  until the shards differ by less than 3 chunk sizes, then stops moving;
- chunk counts 5 to 1 but data even: compliant, and the balancer moves
  nothing;
- within a zone only the zone's shards are compared: data in a range whose
  zone one shard holds stays there.
"""
import os
import sys
import time

import pymongo
import pytest
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from bson.min_key import MinKey

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402

STD = CodecOptions(uuid_representation=UuidRepresentation.STANDARD)
MIB = 1024 * 1024
BIG = "x" * (50 * 1024)  # ~50 KiB documents: 20 of them make a chunk size


# each test that starts the balancer stops it in a finally
cluster = sharded.cluster_fixture("sable-balsize-")
mongos = sharded.mongos_fixture(stop_balancer=True, enable=["bs"])
shards = sharded.shards_fixture()


def chunks_of(client, ns):
    return [(c["min"], c["max"], c["shard"]) for c in sharded.chunks(client, ns)]


def sizes(shards, ns):
    """Each shard's data size of ns in bytes, as the balancer reads it."""
    out = []
    for s in shards:
        r = s.admin.command({"_shardsvrGetStatsForBalancing": 1,
                             "collections": [{"ns": ns}], "scaleFactor": 1})
        assert r["stats"][0]["namespace"] == ns
        out.append(r["stats"][0]["collSize"])
    return out


def rounds(mongos):
    return mongos.admin.command("balancerStatus")["numBalancerRounds"]


def wait_rounds(mongos, n, timeout=60):
    """Wait until n more balancer rounds have run."""
    start = rounds(mongos)
    deadline = time.time() + timeout
    while rounds(mongos) < start + n:
        assert time.time() < deadline, "the balancer ran no round"
        time.sleep(0.2)


def primary_and_other(client, db):
    p = client.config.databases.find_one({"_id": db})["primary"]
    return p, "shard1" if p == "shard0" else "shard0"


def test_stats_for_balancing(mongos, shards):
    mongos.admin.command("shardCollection", "bs.st", key={"k": 1})
    mongos.bs.st.insert_many([{"k": i, "pad": BIG} for i in range(60)])  # ~3 MiB
    p, other = primary_and_other(mongos, "bs")
    ip = int(p[-1])
    size = sizes(shards, "bs.st")
    assert size[1 - ip] == 0
    assert 60 * len(BIG) < size[ip] < 60 * (len(BIG) + 100), size
    # the default scale is MiB, as mongod's
    r = shards[ip].admin.command({"_shardsvrGetStatsForBalancing": 1,
                                  "collections": [{"ns": "bs.st"}]})
    assert r["stats"][0]["collSize"] == size[ip] // MIB == 2
    # a collection that is not there, or another UUID than the one asked for: 0
    r = shards[ip].admin.command({"_shardsvrGetStatsForBalancing": 1,
                                  "collections": [{"ns": "bs.none"}], "scaleFactor": 1})
    assert r["stats"][0]["collSize"] == 0
    uuid = mongos.config.get_collection("collections", codec_options=STD).find_one(
        {"_id": "bs.st"})["uuid"]
    import uuid as uuidlib
    r = shards[ip].get_database("admin", codec_options=STD).command(
        {"_shardsvrGetStatsForBalancing": 1, "scaleFactor": 1,
         "collections": [{"ns": "bs.st", "UUID": uuidlib.uuid4()},
                         {"ns": "bs.st", "UUID": uuid}]})
    assert [s["collSize"] for s in r["stats"]] == [0, size[ip]]
    with pytest.raises(pymongo.errors.OperationFailure):
        shards[ip].admin.command({"_shardsvrGetStatsForBalancing": 1, "collections": [{}]})


def test_even_chunk_counts_uneven_data_are_balanced_by_size(mongos, shards):
    ns = "bs.uneven"
    mongos.admin.command("shardCollection", ns, key={"k": 1})
    mongos.admin.command("configureCollectionBalancing", ns, chunkSize=1)
    for m in (100, 200, 300):
        mongos.admin.command("split", ns, middle={"k": m})
    p, other = primary_and_other(mongos, "bs")
    for m in (200, 300):
        mongos.admin.command("moveChunk", ns, find={"k": m}, to=other)
    # ~8 MiB of big documents in p's two chunks, a few KB in other's two
    mongos.bs.uneven.insert_many([{"_id": i, "k": i, "pad": BIG} for i in range(160)])
    mongos.bs.uneven.insert_many([{"_id": i, "k": i} for i in range(200, 400)])
    before = chunks_of(mongos, ns)
    assert [c[2] for c in before] == [p, p, other, other]
    ip, io = int(p[-1]), int(other[-1])
    size = sizes(shards, ns)
    assert size[ip] > 7.5 * MIB and size[io] < MIB // 10, size
    st = mongos.admin.command("balancerCollectionStatus", ns)
    assert st["chunkSize"] == 1 and st["balancerCompliant"] is False
    assert st["firstComplianceViolation"] == "chunksImbalance"

    mongos.admin.command("balancerStart")
    try:
        deadline = time.time() + 120
        while not mongos.admin.command("balancerCollectionStatus", ns)["balancerCompliant"]:
            assert time.time() < deadline, (chunks_of(mongos, ns), sizes(shards, ns))
            time.sleep(0.5)
        size = sizes(shards, ns)
        assert abs(size[ip] - size[io]) < 3 * MIB, size
        # about a chunk size at a time: the donor's chunks were split to move
        # 1 MiB ranges (20 documents), never more than the gap needed
        assert size[io] >= 2 * MIB and size[ip] >= 4 * MIB, size
        moved = [c for c in chunks_of(mongos, ns)
                 if c[2] == other and (c[0]["k"] == MinKey() or c[0]["k"] < 200)]
        assert moved, chunks_of(mongos, ns)
        for lo, hi, _ in moved:
            rng = {"$lt": hi["k"]}
            if lo["k"] != MinKey():
                rng["$gte"] = lo["k"]
            n = shards[io].bs.uneven.count_documents({"k": rng})
            assert 0 < n <= 25, (lo, hi, n)
        # balanced: later rounds move nothing
        after = chunks_of(mongos, ns)
        wait_rounds(mongos, 3)
        assert chunks_of(mongos, ns) == after
        # the donor's size may still fall as its range deleter removes what it gave away
        now = sizes(shards, ns)
        assert now[io] == size[io] and now[ip] <= size[ip], (size, now)
    finally:
        mongos.admin.command("balancerStop")
    assert mongos.bs.uneven.count_documents({}) == 360
    assert sorted(d["_id"] for d in mongos.bs.uneven.find({}, {"_id": 1})) == \
        list(range(160)) + list(range(200, 400))


def test_uneven_chunk_counts_even_data_stay(mongos, shards):
    ns = "bs.even"
    mongos.admin.command("shardCollection", ns, key={"k": 1})
    mongos.admin.command("configureCollectionBalancing", ns, chunkSize=1)
    for m in (100, 200, 300, 400, 500):
        mongos.admin.command("split", ns, middle={"k": m})
    p, other = primary_and_other(mongos, "bs")
    mongos.admin.command("moveChunk", ns, find={"k": 500}, to=other)
    # 2 MiB on p over five chunks, 2 MiB on other in one
    docs = [{"k": k, "pad": BIG} for k in range(0, 500, 12)][:40]
    docs += [{"k": 500 + i, "pad": BIG} for i in range(40)]
    mongos.bs.even.insert_many(docs)
    before = chunks_of(mongos, ns)
    assert sorted(c[2] for c in before).count(p) == 5
    st = mongos.admin.command("balancerCollectionStatus", ns)
    assert st["balancerCompliant"] is True and "firstComplianceViolation" not in st
    mongos.admin.command("balancerStart")
    try:
        wait_rounds(mongos, 3)
    finally:
        mongos.admin.command("balancerStop")
    assert chunks_of(mongos, ns) == before
    # 3.5 MiB more on p's side tips it: more than 3 chunk sizes apart
    mongos.bs.even.insert_many([{"k": -1 - i, "pad": BIG} for i in range(70)])
    st = mongos.admin.command("balancerCollectionStatus", ns)
    assert st["balancerCompliant"] is False
    assert st["firstComplianceViolation"] == "chunksImbalance"


def test_a_zone_keeps_its_data_whatever_the_sizes(mongos, shards):
    """Within a zone only the zone's shards are compared: ~4 MiB in a range
    whose zone only p holds stays on p, though the shards are more than 3
    chunk sizes apart; only chunks outside the zone may even them out."""
    ns = "bs.zoned"
    p, other = primary_and_other(mongos, "bs")
    ip = int(p[-1])
    mongos.bs.even.drop()  # the last test left it out of balance
    mongos.admin.command("addShardToZone", p, zone="Z")
    mongos.admin.command("updateZoneKeyRange", ns, min={"k": 0}, max={"k": 100}, zone="Z")
    try:
        mongos.admin.command("shardCollection", ns, key={"k": 1})
        mongos.admin.command("configureCollectionBalancing", ns, chunkSize=1)
        mongos.bs.zoned.insert_many([{"k": i, "pad": BIG} for i in range(80)])
        zone_chunk = [c for c in chunks_of(mongos, ns) if c[0] == {"k": 0}]
        assert zone_chunk == [({"k": 0}, {"k": 100}, p)]
        size = sizes(shards, ns)
        assert size[ip] > 3.5 * MIB and size[1 - ip] == 0, size
        mongos.admin.command("balancerStart")
        try:
            deadline = time.time() + 60
            while not mongos.admin.command("balancerCollectionStatus", ns)["balancerCompliant"]:
                assert time.time() < deadline, chunks_of(mongos, ns)
                time.sleep(0.5)
            wait_rounds(mongos, 2)
        finally:
            mongos.admin.command("balancerStop")
        assert ({"k": 0}, {"k": 100}, p) in chunks_of(mongos, ns)
        assert shards[ip].bs.zoned.count_documents({}) == 80
        assert sizes(shards, ns) == size
        # the chunks outside the zone (empty) went to the shard with less
        assert all(c[2] == other for c in chunks_of(mongos, ns) if c[0] != {"k": 0})
    finally:
        mongos.admin.command("updateZoneKeyRange", ns, min={"k": 0}, max={"k": 100},
                             zone=None)
        mongos.admin.command("removeShardFromZone", p, zone="Z")
