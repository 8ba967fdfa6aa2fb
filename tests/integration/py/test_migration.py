"""
Chunk migrations and the balancer (docs/sharding.md, "Migrations"): a
cluster of a config server and two one-member shards started with
build/sable-cluster start --sharded.  moveChunk moves a range back and forth
while a writer inserts and updates documents in it through the router; the
balancer evens out a collection whose chunks all start on one shard.
"""

import hashlib
import os
import random
import sys
import threading
import time

import pymongo
import pytest
from bson import json_util
from bson.max_key import MaxKey
from bson.min_key import MinKey
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402


# test commands on: test_one_migration_per_shard holds a migration with
# failCommand; a recipient left in its critical section settles it after 2 s
cluster = sharded.cluster_fixture("sable-mig-", launcher_args=sharded.set_parameters(
    ["enableTestCommands=1", "sableMigrationReleaseWaitMS=2000"]))
mongos = sharded.mongos_fixture(uuidRepresentation="standard")
shards = sharded.shards_fixture()


def _digest(docs):
    h = hashlib.sha256()
    for d in sorted(docs, key=lambda d: d["_id"]):
        h.update(json_util.dumps(d, sort_keys=True).encode())
    return h.hexdigest()


def _owner(mongos, ns, min_doc):
    uuid = mongos.config.collections.find_one({"_id": ns})["uuid"]
    return mongos.config.chunks.find_one({"uuid": uuid, "min": min_doc})["shard"]


def test_move_chunk_under_writes(mongos, shards):
    mongos.admin.command("balancerStop")
    assert mongos.admin.command("balancerStatus")["mode"] == "off"
    mongos.admin.command("enableSharding", "mig")
    mongos.admin.command("shardCollection", "mig.c", key={"k": 1})
    mongos.mig.c.insert_many([{"_id": i, "k": i, "n": 0} for i in range(2000)])
    mongos.admin.command("split", "mig.c", middle={"k": 1000})
    expected = {i: {"_id": i, "k": i, "n": 0} for i in range(2000)}

    stop = threading.Event()
    errors, dups = [], []
    lock = threading.Lock()

    def writer():
        c = pymongo.MongoClient("127.0.0.1", mongos.address[1])
        rnd = random.Random(7)
        next_id = 100000
        try:
            while not stop.is_set():
                try:
                    if rnd.random() < 0.3:  # an insert into the moving range
                        d = {"_id": next_id, "k": 1000 + rnd.randrange(1000), "n": 0}
                        c.mig.c.insert_one(d)
                        with lock:
                            expected[next_id] = d
                        next_id += 1
                    else:  # an update of a document in the moving range
                        i = 1000 + rnd.randrange(1000)
                        r = c.mig.c.update_one({"k": i, "_id": i}, {"$inc": {"n": 1}})
                        assert r.matched_count == 1, i
                        with lock:
                            expected[i]["n"] += 1
                except Exception as e:  # noqa: BLE001 - every failure is a finding
                    errors.append(repr(e))
                    return
        finally:
            c.close()

    def reader():
        c = pymongo.MongoClient("127.0.0.1", mongos.address[1])
        try:
            while not stop.is_set():
                ids = [d["_id"] for d in c.mig.c.find({}, {"_id": 1}, batch_size=100000)]
                if len(ids) != len(set(ids)):
                    dups.append(len(ids) - len(set(ids)))
        except Exception as e:  # noqa: BLE001
            errors.append("reader: " + repr(e))
        finally:
            c.close()

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        names = ["shard0", "shard1"]
        for _ in range(2):  # there and back again
            owner = _owner(mongos, "mig.c", {"k": 1000})
            to = names[1 - names.index(owner)]
            r = mongos.admin.command("moveChunk", "mig.c", find={"k": 1500}, to=to)
            assert r["ok"] == 1
            assert _owner(mongos, "mig.c", {"k": 1000}) == to
            time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors[:3]
    assert not dups, dups

    docs = list(mongos.mig.c.find({}, batch_size=100000))
    assert len(docs) == len({d["_id"] for d in docs})  # nothing seen twice
    assert mongos.mig.c.count_documents({}) == len(expected)
    assert _digest(docs) == _digest(list(expected.values()))
    # orphans are gone: each shard holds exactly what it owns
    owner = _owner(mongos, "mig.c", {"k": 1000})
    other = "shard1" if owner == "shard0" else "shard0"
    held = {n: shards[i].mig.c.count_documents({"k": {"$gte": 1000}})
            for i, n in enumerate(["shard0", "shard1"])}
    assert held[other] == 0, held
    assert held[owner] == len([d for d in expected.values() if d["k"] >= 1000])
    # the metadata says what happened, in mongod's shapes
    assert mongos.config.migrations.count_documents({}) == 0
    whats = [d["what"] for d in mongos.config.changelog.find({"ns": "mig.c"})]
    assert whats.count("moveChunk.commit") == 2 and whats.count("moveChunk.from") == 2
    commit = mongos.config.changelog.find_one({"ns": "mig.c", "what": "moveChunk.from"})
    assert commit["details"]["cloned"] > 0
    # a major version bump per migration
    uuid = mongos.config.collections.find_one({"_id": "mig.c"})["uuid"]
    majors = [c["lastmod"].time for c in mongos.config.chunks.find({"uuid": uuid})]
    assert max(majors) == 3, majors


def test_move_chunk_errors(mongos):
    with pytest.raises(OperationFailure) as e:
        mongos.admin.command("moveChunk", "mig.c", find={"k": 5}, to="nosuchshard")
    assert e.value.code == 70  # ShardNotFound
    with pytest.raises(OperationFailure) as e:
        mongos.admin.command("moveChunk", "mig.nosharded", find={"k": 5}, to="shard0")
    assert e.value.code in (118, 61)
    with pytest.raises(OperationFailure):
        mongos.admin.command("moveChunk", "mig.c", bounds=[{"k": 3}, {"k": 7}], to="shard0")


def test_move_range_splits_and_moves(mongos, shards):
    mongos.admin.command("shardCollection", "mig.r", key={"k": 1})
    mongos.mig.r.insert_many([{"_id": i, "k": i} for i in range(100)])
    uuid = mongos.config.collections.find_one({"_id": "mig.r"})["uuid"]
    src = mongos.config.chunks.find_one({"uuid": uuid})["shard"]
    to = "shard1" if src == "shard0" else "shard0"
    mongos.admin.command("moveRange", "mig.r", min={"k": 40}, max={"k": 60}, toShard=to)
    chunks = sorted(mongos.config.chunks.find({"uuid": uuid}), key=lambda c: str(c["min"]))
    assert len(chunks) == 3
    assert _owner(mongos, "mig.r", {"k": 40}) == to
    i = ["shard0", "shard1"].index(to)
    assert shards[i].mig.r.count_documents({}) == 20
    assert shards[1 - i].mig.r.count_documents({}) == 80
    assert mongos.mig.r.count_documents({}) == 100
    assert sorted(d["k"] for d in mongos.mig.r.find({"k": {"$gte": 30, "$lt": 70}})) == \
        list(range(30, 70))


def test_split_at_the_median(mongos, shards):
    mongos.admin.command("shardCollection", "mig.s", key={"k": 1})
    mongos.mig.s.insert_many([{"_id": i, "k": i} for i in range(100)])
    uuid = mongos.config.collections.find_one({"_id": "mig.s"})["uuid"]
    before = max(c["lastmod"] for c in mongos.config.chunks.find({"uuid": uuid}))
    mongos.admin.command("split", "mig.s", find={"k": 7})
    chunks = sorted(mongos.config.chunks.find({"uuid": uuid}), key=lambda c: c["lastmod"])
    assert [c["max"] for c in chunks if c["max"] == {"k": 50}]  # the median
    after = max(c["lastmod"] for c in chunks)
    assert after.time == before.time and after.inc > before.inc  # a minor version bump
    # bounds names the chunk exactly
    mongos.admin.command("split", "mig.s", bounds=[{"k": 50}, {"k": MaxKey()}])
    assert mongos.config.chunks.count_documents({"uuid": uuid, "min": {"k": 75}}) == 1
    with pytest.raises(OperationFailure):
        mongos.admin.command("split", "mig.s", bounds=[{"k": 51}, {"k": 60}])
    # hashed: the middle of the chunk's hashed range
    mongos.admin.command("shardCollection", "mig.h", key={"_id": "hashed"}, numInitialChunks=2)
    hu = mongos.config.collections.find_one({"_id": "mig.h"})["uuid"]
    n = mongos.config.chunks.count_documents({"uuid": hu})
    mongos.admin.command("split", "mig.h", find={"_id": 12345})
    assert mongos.config.chunks.count_documents({"uuid": hu}) == n + 1
    assert mongos.mig.s.count_documents({}) == 100


def test_split_of_a_chunk_too_small(mongos):
    # one document: no median to split at, MongoDB's 87 CannotSplit
    mongos.admin.command("shardCollection", "mig.one", key={"k": 1})
    mongos.mig.one.insert_one({"_id": 1, "k": 1})
    with pytest.raises(OperationFailure) as e:
        mongos.admin.command("split", "mig.one", find={"k": 1})
    assert e.value.code == 87 and e.value.details["codeName"] == "CannotSplit", e.value.details


def test_balancer_evens_out_data(mongos):
    # mongod 7.0's rule: the shards' data sizes of the collection, within 3
    # chunk sizes (1 MiB here): 10 chunks of ~0.8 MiB on one shard
    mongos.admin.command("balancerStop")
    mongos.admin.command("shardCollection", "mig.b", key={"k": 1})
    mongos.admin.command("configureCollectionBalancing", "mig.b", chunkSize=1)
    pad = "x" * 40000
    mongos.mig.b.insert_many([{"_id": i, "k": i, "pad": pad} for i in range(200)])
    for m in range(20, 200, 20):
        mongos.admin.command("split", "mig.b", middle={"k": m})
    uuid = mongos.config.collections.find_one({"_id": "mig.b"})["uuid"]

    def counts():
        per = {"shard0": 0, "shard1": 0}
        for c in mongos.config.chunks.find({"uuid": uuid}):
            per[c["shard"]] += 20  # documents: 20 a chunk, of 40 KB each
        return per

    assert sorted(counts().values()) == [0, 200]
    mongos.admin.command("balancerStart")
    st = mongos.admin.command("balancerStatus")
    assert st["mode"] == "full" and "inBalancerRound" in st
    deadline = time.time() + 90
    while time.time() < deadline:
        if mongos.admin.command("balancerCollectionStatus", "mig.b")["balancerCompliant"]:
            break
        time.sleep(0.5)
    per = counts()
    # 8 MB: whole chunks (less than a chunk size each) move until the shards
    # differ by less than 3 MiB: 120 documents (4.8 MB) against 80
    assert sorted(per.values()) == [80, 120], per
    assert mongos.mig.b.count_documents({}) == 200
    assert sorted(d["k"] for d in mongos.mig.b.find({}, {"k": 1})) == list(range(200))
    assert mongos.admin.command("balancerStatus")["numBalancerRounds"] > 0
    assert mongos.config.actionlog.count_documents({"what": "balancer.round"}) > 0
    mongos.admin.command("balancerStop")
    settings = mongos.config.settings.find_one({"_id": "balancer"})
    assert settings["stopped"] is True and settings["mode"] == "off"


def test_migrations_under_workload_a(cluster):
    # the short run of tests/stress/migrate_load.py: workload A through the
    # router while chunks of a hashed collection move back and forth
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "stress"))
    import migrate_load
    s = migrate_load.run(cluster["router"], cluster["shards"], seconds=4, threads=3,
                         records=1500, chunks=6)
    assert s["failures"] == [], s
    assert s["errors"] == 0 and s["migrations"] >= 2 and s["operations"] > 0, s


def _three_chunks(mongos, coll, n, splits):
    """coll sharded on {k: 1} with n documents, split at splits; returns the
    owner of the chunk at splits[0] and the other shard."""
    mongos.admin.command("balancerStop")
    mongos.admin.command("shardCollection", "mig." + coll, key={"k": 1})
    mongos.mig[coll].insert_many([{"_id": i, "k": i} for i in range(n)])
    for m in splits:
        mongos.admin.command("split", "mig." + coll, middle={"k": m})
    owner = _owner(mongos, "mig." + coll, {"k": splits[0]})
    return owner, "shard1" if owner == "shard0" else "shard0"


def test_writes_elsewhere_do_not_hold_the_catch_up(mongos):
    # issue 28's hang: updates to the chunk that stays on the donor were
    # shipped to the recipient as catch-up, so under a write load its
    # catch-up never came out empty and the migration never committed
    owner, to = _three_chunks(mongos, "w", 2000, (1000,))
    stop = threading.Event()
    writes, errors = [0], []

    def writer():
        c = pymongo.MongoClient("127.0.0.1", mongos.address[1])
        try:
            while not stop.is_set():
                c.mig.w.update_one({"k": writes[0] % 1000}, {"$inc": {"n": 1}})
                writes[0] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
        finally:
            c.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        while writes[0] < 50 and not errors:
            time.sleep(0.05)
        r = mongos.admin.command("moveChunk", "mig.w", find={"k": 1500}, to=to)
        assert r["ok"] == 1
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors
    assert _owner(mongos, "mig.w", {"k": 1000}) == to
    d = mongos.config.changelog.find_one({"ns": "mig.w", "what": "moveChunk.from"})
    assert d["details"]["note"] == "success" and d["details"]["cloned"] == 1000, d
    assert d["details"]["catchup"] == 0, d  # nothing of the moved range changed
    assert mongos.mig.w.count_documents({}) == 2000
    assert sum(x.get("n", 0) for x in mongos.mig.w.find({}, {"n": 1})) == writes[0]


def test_getmore_across_a_migration_commit(mongos):
    # router cursors opened before a migration and drained after its commit
    # return every document exactly once: the donor's shard cursor still
    # sees the range it deleted, the recipient's does not see it arrive
    owner, to = _three_chunks(mongos, "g", 3000, (1000, 2000))
    mongos.admin.command("moveChunk", "mig.g", find={"k": 2500}, to=to)  # one on each
    for sort in (None, [("k", 1)], [("k", -1)]):
        cur = mongos.mig.g.find({}, batch_size=100, sort=sort)
        seen = [next(cur)["_id"] for _ in range(100)]  # the first batch
        mongos.admin.command("moveChunk", "mig.g", find={"k": 1500}, to=to)
        seen += [d["_id"] for d in cur]
        assert len(seen) == len(set(seen)), (sort, len(seen) - len(set(seen)))
        assert sorted(seen) == list(range(3000)), (sort, len(seen))
        owner, to = to, owner


def test_one_migration_per_shard(mongos, shards):
    # as mongod: a second migration involving a shard that is donating or
    # receiving fails at once with ConflictingOperationInProgress
    src, dst = _three_chunks(mongos, "x", 6000, (5000, 5500))
    donor = shards[["shard0", "shard1"].index(src)]
    # the donor hands out the clone slowly while the fail point is on: the
    # first migration stays in progress until it is turned off
    donor.admin.command("configureFailPoint", "failCommand", mode="alwaysOn",
                        data={"failCommands": ["_migrateClone"], "blockConnection": True,
                              "blockTimeMS": 1000})
    result = {}

    def first():
        try:
            result["ok"] = mongos.admin.command("moveChunk", "mig.x", find={"k": 1}, to=dst)
        except OperationFailure as e:  # noqa: BLE001
            result["error"] = e

    t = threading.Thread(target=first)
    t.start()
    try:
        for _ in range(600):  # the first migration is recorded, then runs
            if mongos.config.migrations.count_documents({"ns": "mig.x"}) == 1:
                break
            time.sleep(0.1)
        for find, to in (({"k": 5200}, dst), ({"k": 5700}, dst)):  # same donor, same recipient
            with pytest.raises(OperationFailure) as e:
                mongos.admin.command("moveChunk", "mig.x", find=find, to=to)
            assert e.value.code == 117, e.value.details
    finally:
        donor.admin.command("configureFailPoint", "failCommand", mode="off")
        t.join(120)
    assert "ok" in result, result
    assert _owner(mongos, "mig.x", {"k": MinKey()}) == dst
    # the shards are free again
    mongos.admin.command("moveChunk", "mig.x", find={"k": 5200}, to=dst)
    assert _owner(mongos, "mig.x", {"k": 5000}) == dst
    assert mongos.mig.x.count_documents({}) == 6000


def test_recipient_settles_a_lost_release(mongos, shards):
    # the donor's _recvChunkReleaseCritSec never arrives (as when the donor
    # dies after the commit): the recipient does not hold its critical
    # section for ever, it asks the config servers who owns the range
    owner, to = _three_chunks(mongos, "l", 2000, (1000,))
    rcv = shards[["shard0", "shard1"].index(to)]
    rcv.admin.command("configureFailPoint", "failCommand", mode={"times": 1},
                      data={"failCommands": ["_recvChunkReleaseCritSec"], "errorCode": 6})
    mongos.admin.command("moveChunk", "mig.l", find={"k": 1500}, to=to)
    assert _owner(mongos, "mig.l", {"k": 1000}) == to
    for _ in range(1200):
        if not rcv.admin.command("_recvChunkStatus")["active"]:
            break
        time.sleep(0.1)
    assert not rcv.admin.command("_recvChunkStatus")["active"]
    assert rcv.mig.l.count_documents({}) == 1000  # it kept the range
    mongos.mig.l.update_one({"k": 1500}, {"$set": {"x": 1}})  # routed writes go on
    assert mongos.mig.l.find_one({"k": 1500})["x"] == 1
    assert mongos.mig.l.count_documents({}) == 2000
