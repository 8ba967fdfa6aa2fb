"""
Secondary indexes through pymongo: every index kind, MongoDB's names and error
codes, hint, explain's shape and the work an indexed query does, unique
indexes under concurrent inserts, TTL expiry, and an index build on a
populated collection while another client keeps reading.
"""

import datetime
import threading
import time

import pytest
from pymongo import ASCENDING, DESCENDING, HASHED
from pymongo.errors import DuplicateKeyError, OperationFailure

from sabled import Sabled


def stats(coll, flt, **kw):
    cmd = {"find": coll.name, "filter": flt}
    cmd.update(kw)
    e = coll.database.command("explain", cmd, verbosity="executionStats")
    return e, e["executionStats"]


def test_names_and_listing(db):
    c = db.c
    assert c.create_index([("a", ASCENDING), ("b", DESCENDING)]) == "a_1_b_-1"
    assert c.create_index([("h", HASHED)]) == "h_hashed"
    names = [i["name"] for i in c.list_indexes()]
    assert names == ["_id_", "a_1_b_-1", "h_hashed"]
    spec = [i for i in c.list_indexes() if i["name"] == "a_1_b_-1"][0]
    assert spec["v"] == 2 and dict(spec["key"]) == {"a": 1, "b": -1}
    r = db.command("createIndexes", "c", indexes=[{"key": {"a": 1, "b": -1}, "name": "a_1_b_-1"}])
    assert r["note"] == "all indexes already exist"
    assert r["numIndexesBefore"] == r["numIndexesAfter"] == 3
    r = db.command("createIndexes", "newcoll", indexes=[{"key": {"x": 1}, "name": "x_1"}])
    assert r["createdCollectionAutomatically"] is True and r["numIndexesAfter"] == 2


def test_errors(db):
    c = db.c
    c.create_index("a")
    with pytest.raises(OperationFailure) as e:
        c.create_index("a", name="other")
    assert e.value.code == 85
    with pytest.raises(OperationFailure) as e:
        c.create_index("b", name="a_1")
    assert e.value.code == 86
    with pytest.raises(OperationFailure) as e:
        db.command("createIndexes", "c", indexes=[{"key": {"z": 1}, "name": "z_1", "bogus": 1}])
    assert e.value.code == 197
    with pytest.raises(OperationFailure) as e:
        db.command("createIndexes", "c", indexes=[{"key": {"z": 0}, "name": "z_0"}])
    assert e.value.code == 67
    # wildcard indexes are refused, on the whole document or under a path (not taken
    # for a field named "$**"); a "$" path component is never a field name
    for key, msg in [({"$**": 1}, "wildcard indexes are not supported"),
                     ({"sub.$**": 1}, "wildcard indexes are not supported"),
                     ({"a.$b": 1}, "field name starts with '$'")]:
        with pytest.raises(OperationFailure) as e:
            db.command("createIndexes", "c", indexes=[{"key": key, "name": "w"}])
        assert e.value.code == 67 and msg in str(e.value), key
    assert "w" not in c.index_information()
    with pytest.raises(OperationFailure) as e:
        c.drop_index("nope")
    assert e.value.code == 27
    with pytest.raises(OperationFailure) as e:
        c.drop_index("_id_")
    assert e.value.code == 72
    with pytest.raises(OperationFailure) as e:
        c.find_one({}, hint="nope")
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:  # collations work; a bad one is refused
        c.create_index("l", collation={"locale": "fr", "strength": 0})
    assert e.value.code == 9


def test_drop_forms(db):
    c = db.c
    c.insert_one({"a": 1})
    for f in ("a", "b", "d", "e"):
        c.create_index(f)
    c.drop_index([("a", 1)])
    db.command("dropIndexes", "c", index=["b_1", "d_1"])
    assert [i["name"] for i in c.list_indexes()] == ["_id_", "e_1"]
    r = db.command("dropIndexes", "c", index="*")
    assert r["nIndexesWas"] == 2
    assert [i["name"] for i in c.list_indexes()] == ["_id_"]


def test_unique(db):
    c = db.c
    c.create_index("a", unique=True)
    c.insert_one({"a": 1})
    with pytest.raises(DuplicateKeyError) as e:
        c.insert_one({"a": 1})
    d = e.value.details
    assert d["errmsg"] == "E11000 duplicate key error collection: %s.c index: a_1 dup key: { a: 1 }" % db.name
    assert d["keyPattern"] == {"a": 1} and d["keyValue"] == {"a": 1}
    c.insert_one({"a": 2})
    with pytest.raises(DuplicateKeyError):
        c.update_one({"a": 2}, {"$set": {"a": 1}})
    c.update_one({"a": 2}, {"$set": {"a": 3}})
    c.delete_one({"a": 1})
    c.insert_one({"a": 1})
    assert c.count_documents({}) == 2
    c.insert_one({"b": 1})
    with pytest.raises(DuplicateKeyError):
        c.insert_one({"b": 2})  # both missing a: null twice
    # building a unique index over duplicates fails and leaves no index
    db.d.insert_many([{"x": 1}, {"x": 1}])
    with pytest.raises(OperationFailure) as e:
        db.d.create_index("x", unique=True)
    assert e.value.code == 11000
    assert [i["name"] for i in db.d.list_indexes()] == ["_id_"]


def test_unique_concurrent(db):
    db.c.create_index("k", unique=True)
    client = db.client
    wins = []

    def worker(n):
        coll = client[db.name].c
        for k in range(50):
            try:
                coll.insert_one({"k": k, "w": n})
                wins.append(k)
            except DuplicateKeyError:
                pass

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(wins) == list(range(50))
    assert db.c.count_documents({}) == 50


def test_multikey_and_parallel_arrays(db):
    c = db.c
    c.create_index([("a", 1), ("b", 1)])
    c.insert_one({"_id": 1, "a": [1, 2, 3], "b": 5})
    with pytest.raises(OperationFailure) as e:
        c.insert_one({"_id": 2, "a": [1], "b": [2]})
    assert e.value.code == 171 and "cannot index parallel arrays" in str(e.value)
    assert [d["_id"] for d in c.find({"a": 2})] == [1]
    # different elements may meet different conjuncts (no $elemMatch)
    assert [d["_id"] for d in c.find({"a": {"$gt": 2, "$lt": 3}})] == [1]
    c.insert_one({"_id": 3, "a": [0, 10]})
    assert sorted(d["_id"] for d in c.find({"a": {"$gt": 5, "$lt": 9}})) == [3]
    assert sorted(d["_id"] for d in c.find({"a": {"$gt": 0, "$lt": 2}})) == [1, 3]
    c.update_one({"_id": 1}, {"$set": {"a": [7]}})
    assert [d["_id"] for d in c.find({"a": 2})] == []
    assert [d["_id"] for d in c.find({"a": 7})] == [1]


def test_sparse_partial_hashed(db):
    c = db.c
    c.insert_many([{"_id": 1, "s": 1, "p": 5}, {"_id": 2}, {"_id": 3, "s": None, "p": 50}])
    c.create_index("s", sparse=True)
    c.create_index("p", partialFilterExpression={"p": {"$gt": 10}})
    c.create_index([("h", HASHED)])
    c.insert_one({"_id": 4, "h": "x"})
    assert [d["_id"] for d in c.find({"s": 1})] == [1]
    assert sorted(d["_id"] for d in c.find({"s": None})) == [2, 3, 4]  # sparse: not for null
    assert [d["_id"] for d in c.find({"p": 5})] == [1]  # partial index cannot serve it
    assert [d["_id"] for d in c.find({"p": {"$gt": 10}})] == [3]
    assert [d["_id"] for d in c.find({"h": "x"})] == [4]
    e, _ = stats(c, {"h": "x"})
    assert e["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "h_hashed"
    with pytest.raises(OperationFailure) as e:
        c.insert_one({"h": [1, 2]})
    assert e.value.code == 16766


def test_planner_and_explain(db):
    c = db.c
    c.insert_many([{"_id": i, "a": i, "b": i % 10, "c": -i} for i in range(20000)])
    c.create_index("a")
    c.create_index([("b", 1), ("c", 1)])
    e, st = stats(c, {"a": 777})
    wp = e["queryPlanner"]["winningPlan"]
    assert wp["stage"] == "FETCH" and wp["inputStage"]["stage"] == "IXSCAN"
    assert wp["inputStage"]["indexName"] == "a_1" and wp["inputStage"]["keyPattern"] == {"a": 1}
    assert wp["inputStage"]["indexBounds"] == {"a": ["[777, 777]"]}
    assert st["nReturned"] == 1 and st["totalKeysExamined"] == 1 and st["totalDocsExamined"] == 1
    assert "executionTimeMillis" in st and "executionStages" in st
    e, st = stats(c, {}, sort={"a": 1}, limit=10)
    assert st["nReturned"] == 10 and st["totalKeysExamined"] == 10 and st["totalDocsExamined"] == 10
    assert [d["_id"] for d in c.find().sort("a", -1).limit(3)] == [19999, 19998, 19997]
    # compound prefix, $in, ranges, the other direction
    assert c.count_documents({"b": 3, "c": {"$lt": -19000}}) == 100
    _, st = stats(c, {"b": 3, "c": {"$lt": -19000}})
    assert st["totalKeysExamined"] == 100
    assert c.count_documents({"a": {"$in": [1, 5, 99999]}}) == 2
    _, st = stats(c, {"a": {"$gte": 100, "$lt": 200}})
    assert st["totalKeysExamined"] == 100 and st["nReturned"] == 100
    # hint by name and by key pattern, and $natural
    e, st = stats(c, {"a": 5, "b": 5}, hint="b_1_c_1")
    assert e["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "b_1_c_1"
    assert list(c.find({"a": 5}).hint([("b", 1), ("c", 1)])) == [{"_id": 5, "a": 5, "b": 5, "c": -5}]
    e, _ = stats(c, {"a": 5}, hint={"$natural": 1})
    assert e["queryPlanner"]["winningPlan"]["stage"] == "COLLSCAN"
    e, _ = stats(c, {"_id": 5})
    assert e["queryPlanner"]["winningPlan"]["stage"] == "IDHACK"
    # the other commands
    for cmd, stage in [({"count": "c", "query": {"a": 5}}, "COUNT"),
                       ({"delete": "c", "deletes": [{"q": {"a": 5}, "limit": 1}]}, "DELETE"),
                       ({"update": "c", "updates": [{"q": {"a": 5}, "u": {"$set": {"x": 1}}}]}, "UPDATE"),
                       ({"findAndModify": "c", "query": {"a": 5}, "remove": True}, "DELETE")]:
        e = db.command("explain", cmd, verbosity="executionStats")
        assert e["queryPlanner"]["winningPlan"]["stage"] == stage
        assert e["executionStats"]["totalKeysExamined"] == 1
    assert c.count_documents({"a": 5}) == 1  # explain changes nothing
    e = db.command("explain", {"distinct": "c", "key": "b", "query": {"a": 5}})
    assert "winningPlan" in e["queryPlanner"]
    e = db.command("explain", {"aggregate": "c", "pipeline": [{"$match": {"a": 5}}], "cursor": {}},
                   verbosity="executionStats")
    assert e["executionStats"]["totalDocsExamined"] == 1
    # writes through an index keep it right
    assert c.update_many({"a": {"$lt": 10}}, {"$inc": {"a": 100000}}).modified_count == 10
    assert c.count_documents({"a": {"$gte": 100000}}) == 10
    assert c.delete_many({"a": {"$gte": 100000}}).deleted_count == 10
    st = db.command("collStats", "c")
    assert st["nindexes"] == 3 and set(st["indexSizes"]) == {"_id_", "a_1", "b_1_c_1"}


def test_build_while_reading(db):
    c = db.c
    c.insert_many([{"_id": i, "a": i} for i in range(30000)])
    errors, reads = [], [0]
    stop = threading.Event()

    def reader():
        coll = db.client[db.name].c
        while not stop.is_set():
            try:
                assert coll.find_one({"_id": reads[0] % 30000})["a"] == reads[0] % 30000
                reads[0] += 1
            except Exception as e:  # noqa: BLE001
                errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    try:
        c.create_index("a")
    finally:
        stop.set()
        t.join()
    assert not errors and reads[0] > 0
    _, st = stats(c, {"a": 12345})
    assert st["totalKeysExamined"] == 1 and st["nReturned"] == 1


def test_restart_keeps_indexes():
    s = Sabled()
    try:
        s.start()
        c = s.client()
        c.t.c.insert_many([{"a": i, "b": [i, i + 1]} for i in range(100)])
        c.t.c.create_index("a", unique=True)
        c.t.c.create_index("b")
        c.close()
        s.restart()
        c = s.client()
        assert [i["name"] for i in c.t.c.list_indexes()] == ["_id_", "a_1", "b_1"]
        with pytest.raises(DuplicateKeyError):
            c.t.c.insert_one({"a": 5})
        # b is multikey: a range on it must not be intersected
        assert c.t.c.count_documents({"b": {"$gt": 50, "$lt": 51}}) == 1  # [50, 51]
        assert c.t.c.count_documents({"b": {"$gte": 50, "$lte": 50}}) == 2
        c.close()
    finally:
        s.cleanup()


def test_ttl():
    s = Sabled()
    try:
        s.start(["--setParameter", "ttlMonitorSleepSecs=1"])
        c = s.client()
        coll = c.t.ttl
        coll.create_index("t", expireAfterSeconds=0)
        now = datetime.datetime.utcnow()
        coll.insert_many([{"t": now - datetime.timedelta(seconds=10)}, {"t": "not a date"},
                          {"t": now + datetime.timedelta(days=1)}])
        deadline = time.time() + 20
        while coll.count_documents({}) > 2 and time.time() < deadline:
            time.sleep(0.3)
        assert coll.count_documents({}) == 2
        c.close()
    finally:
        s.cleanup()


def test_id_sort_over_another_index_plan_is_sorted(db):
    """A sort on _id alone needs no sort stage when the plan scans the _id
    table, but does when the planner picks another index: the _id sort was
    dropped before planning, so {k: {$in: ...}} read through k_1 came back
    in k's order (found through sable-router's shard-key tests)."""
    c = db.idsort
    c.create_index([("k", ASCENDING)])
    c.insert_many([{"_id": i, "k": 100 - i} for i in range(20)])
    flt = {"k": {"$in": [100 - i for i in range(0, 20, 3)]}}
    want = list(range(0, 20, 3))
    assert [d["_id"] for d in c.find(flt).sort("_id", 1)] == want
    assert [d["_id"] for d in c.find(flt).sort("_id", -1)] == want[::-1]
    assert [d["_id"] for d in c.find({"k": {"$gte": 90}}).sort("_id", 1)] == list(range(11))
    assert [d["_id"] for d in c.find(flt).sort("_id", 1).skip(1).limit(2)] == want[1:3]
    assert [d["_id"] for d in c.aggregate([{"$match": flt}, {"$sort": {"_id": 1}}])] == want
    # the _id table's own order still serves it without an index
    assert [d["_id"] for d in c.find({"_id": {"$gte": 15}}).sort("_id", -1)] == [19, 18, 17, 16, 15]
    assert [d["_id"] for d in c.find({}).sort("_id", 1).limit(3)] == [0, 1, 2]
