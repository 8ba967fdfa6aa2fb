"""
Change streams through sable-router (issue 28, docs/sharding.md): watch()
on a collection sharded over two one-member shard sets opens $changeStream
on both and merges their events in clusterTime order; the router's resume
tokens resume every shard at the right place.  rs.cs is sharded on {k: 1}
and split at k = 0: k < 0 lives on shard0, k >= 0 on shard1.
"""
import os
import sys
import threading

import pymongo

sys.path.insert(0, os.path.dirname(__file__))
from test_router_sessions import cluster, mongos  # noqa: E402,F401  (rs.cs, rs.resume, rs.gone)
import sharded  # noqa: E402

shards = sharded.shards_fixture()


def take(stream, n):
    out = []
    for _ in range(n * 20):
        ev = stream.try_next()
        if ev is not None:
            out.append(ev)
            if len(out) == n:
                break
    return out


def brief(ev):
    return (ev["operationType"], ev["documentKey"]["_id"])


def test_collection_stream_merges_both_shards_in_order(mongos, shards):
    c = mongos.rs.cs
    with c.watch(max_await_time_ms=500) as stream:
        # alternate shards; each write acknowledged before the next
        c.insert_one({"_id": 1, "k": -1})
        c.insert_one({"_id": 2, "k": 1})
        c.update_one({"k": -1}, {"$set": {"v": 1}})
        c.update_one({"k": 1}, {"$set": {"v": 2}})
        c.insert_one({"_id": 3, "k": -3})
        c.delete_one({"k": 1})
        c.replace_one({"k": -3}, {"k": -3, "r": True})
        c.delete_one({"k": -1})
        evs = take(stream, 8)
        assert [brief(e) for e in evs] == [
            ("insert", 1), ("insert", 2), ("update", 1), ("update", 2), ("insert", 3),
            ("delete", 2), ("replace", 3), ("delete", 1)]
        # clusterTime and resume tokens ascend across the shards
        times = [e["clusterTime"] for e in evs]
        assert times == sorted(times) and len(set(times)) == len(times)
        toks = [e["_id"]["_data"] for e in evs]
        assert toks == sorted(toks)
        assert evs[0]["fullDocument"] == {"_id": 1, "k": -1}
        assert evs[2]["updateDescription"]["updatedFields"] == {"v": 1}
        assert evs[0]["ns"] == {"db": "rs", "coll": "cs"}
        # the events came from both shards
        assert shards[0].rs.cs.count_documents({}) == 1
        assert shards[1].rs.cs.count_documents({}) == 0
        assert stream.resume_token["_data"] >= toks[-1]


def test_idle_shard_does_not_hold_back_the_other(mongos):
    c = mongos.rs.cs
    with c.watch(max_await_time_ms=500) as stream:
        for i in range(5):
            c.insert_one({"_id": 100 + i, "k": 100 + i})  # all on shard1
        evs = take(stream, 5)
        assert [e["documentKey"]["_id"] for e in evs] == [100, 101, 102, 103, 104]


def test_resume_after_a_router_token(mongos):
    c = mongos.rs.resume
    with c.watch(max_await_time_ms=500) as stream:
        c.insert_one({"_id": "a", "k": -1})
        c.insert_one({"_id": "b", "k": 1})
        first = take(stream, 2)
        assert [e["documentKey"]["_id"] for e in first] == ["a", "b"]
    c.insert_one({"_id": "c", "k": -2})
    c.insert_one({"_id": "d", "k": 2})
    with c.watch(resume_after=first[0]["_id"], max_await_time_ms=500) as stream:
        evs = take(stream, 3)
        assert [e["documentKey"]["_id"] for e in evs] == ["b", "c", "d"]
    with c.watch(start_after=first[1]["_id"], max_await_time_ms=500) as stream:
        evs = take(stream, 2)
        assert [e["documentKey"]["_id"] for e in evs] == ["c", "d"]


def test_database_stream_and_pipeline_through_the_router(mongos):
    db = mongos.rs
    with db.watch([{"$match": {"operationType": "insert"}}], max_await_time_ms=500) as stream:
        db.cs.insert_one({"_id": 200, "k": -200})
        db.resume.delete_one({"k": -2})
        db.resume.insert_one({"_id": 201, "k": 201})
        evs = take(stream, 2)
        assert [(e["ns"]["coll"], e["documentKey"]["_id"]) for e in evs] == [
            ("cs", 200), ("resume", 201)]


def test_dropping_the_collection_gives_one_drop_and_invalidate(mongos):
    c = mongos.rs.gone
    c.insert_many([{"k": -1}, {"k": 1}])
    with c.watch(max_await_time_ms=500) as stream:
        c.insert_one({"_id": "x", "k": 5})
        c.drop()  # on both shards
        evs = take(stream, 3)
        assert [e["operationType"] for e in evs] == ["insert", "drop", "invalidate"]
        assert stream.try_next() is None and not stream.alive


def test_cluster_time_gossip_orders_writes_across_shards(mongos, shards):
    # many writes on shard0 push its oplog counter up; the next write routed
    # to shard1 carries the router's $clusterTime and lands after them
    c = mongos.rs.cs
    for i in range(30):
        c.insert_one({"_id": "g%d" % i, "k": -1000 - i})
    c.insert_one({"_id": "g-hi", "k": 1000})
    last0 = shards[0].local.oplog.rs.find_one({"ns": "rs.cs", "o._id": "g29"})["ts"]
    hi1 = shards[1].local.oplog.rs.find_one({"ns": "rs.cs", "o._id": "g-hi"})["ts"]
    assert hi1 > last0


def test_concurrent_writers_on_both_shards_arrive_complete_and_in_token_order(cluster, mongos):
    c = mongos.rs.cs
    with c.watch([{"$match": {"operationType": "insert"}}], max_await_time_ms=300) as stream:
        def write(sign):
            with pymongo.MongoClient("127.0.0.1", cluster["router"]) as cl:
                for i in range(40):
                    cl.rs.cs.insert_one({"_id": "w%d" % (sign * (i + 1)), "k": sign * (5000 + i)})
        ts = [threading.Thread(target=write, args=(s,)) for s in (1, -1)]
        for t in ts:
            t.start()
        evs = take(stream, 80)
        for t in ts:
            t.join()
    toks = [e["_id"]["_data"] for e in evs]
    assert len(evs) == 80 and toks == sorted(toks) and len(set(toks)) == 80
    assert {e["documentKey"]["_id"] for e in evs} == {"w%d" % (s * i) for s in (1, -1)
                                                     for i in range(1, 41)}


def test_get_more_without_waiting_still_asks_the_shards(mongos):
    db = mongos.rs
    r = db.command("aggregate", "cs", pipeline=[{"$changeStream": {}}], cursor={})
    cid = r["cursor"]["id"]
    db.cs.insert_one({"_id": "nowait", "k": -77})
    got = []
    for _ in range(100):
        b = db.command("getMore", cid, collection="cs", maxTimeMS=0)["cursor"]
        got += b["nextBatch"]
        if got:
            break
    db.command("killCursors", "cs", cursors=[cid])
    assert [e["documentKey"]["_id"] for e in got] == ["nowait"]
