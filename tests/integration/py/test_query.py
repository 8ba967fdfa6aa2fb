"""
Reads through pymongo: find with filter, projection, sort, skip, limit,
batches and getMore, comment, maxTimeMS, killCursors; count, distinct,
aggregate; every query operator; dotted paths through arrays; null and
missing; numeric comparison across types; MongoDB's sort order across types.
"""

import datetime
import re

import pytest
from bson.binary import Binary
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp
from pymongo import ASCENDING, DESCENDING
from pymongo.errors import OperationFailure


@pytest.fixture
def people(db):
    db.p.insert_many([
        {"_id": 1, "name": "ann", "age": 31, "tags": ["a", "b"], "addr": {"city": "Oslo"},
         "scores": [{"s": 5, "k": "x"}, {"s": 9, "k": "y"}]},
        {"_id": 2, "name": "bob", "age": 25, "tags": ["b"], "addr": {"city": "Rome"},
         "scores": [{"s": 1, "k": "x"}]},
        {"_id": 3, "name": "cid", "age": 40, "tags": [], "addr": {"city": "Oslo"}, "opt": None},
        {"_id": 4, "name": "dee", "age": 25, "tags": ["a", "b", "c"]},
        {"_id": 5, "name": "Eve", "age": 52.5, "tags": ["c"], "opt": 7},
    ])
    return db.p


def ids(cursor):
    return [d["_id"] for d in cursor]


def q(coll, flt):
    return sorted(ids(coll.find(flt)))


# -- find options -------------------------------------------------------------

def test_find_filter_sort_skip_limit(people):
    assert ids(people.find({"age": 25}).sort("_id", DESCENDING)) == [4, 2]
    assert ids(people.find().sort([("age", ASCENDING), ("_id", DESCENDING)])) == [4, 2, 1, 3, 5]
    assert ids(people.find().sort("_id", 1).skip(1).limit(2)) == [2, 3]
    assert ids(people.find().sort("_id", 1).skip(10)) == []
    assert ids(people.find().sort("name", 1)) == [5, 1, 2, 3, 4]  # binary string order


def test_projection_inclusion_exclusion(people):
    assert people.find_one({"_id": 1}, {"name": 1}) == {"_id": 1, "name": "ann"}
    assert people.find_one({"_id": 1}, {"name": 1, "_id": 0}) == {"name": "ann"}
    assert people.find_one({"_id": 1}, {"addr.city": 1}) == {"_id": 1, "addr": {"city": "Oslo"}}
    d = people.find_one({"_id": 1}, {"tags": 0, "scores": 0, "addr": 0})
    assert d == {"_id": 1, "name": "ann", "age": 31}
    assert people.find_one({"_id": 1}, {"scores.s": 1, "_id": 0}) == {"scores": [{"s": 5}, {"s": 9}]}
    with pytest.raises(OperationFailure) as e:
        people.find_one({"_id": 1}, {"name": 1, "age": 0})
    assert e.value.code == 31254  # cannot mix inclusion and exclusion


def test_projection_expressions(people, db):
    """mongod 4.4+ takes aggregation expressions in a find projection: computed fields,
    evaluated over the whole document, after the included fields, missing ones left out."""
    assert people.find_one({"_id": 1}, {"n": "$name"}) == {"_id": 1, "n": "ann"}
    assert people.find_one({"_id": 1}, {"age": 1, "next": {"$add": ["$age", 1]}}) == \
        {"_id": 1, "age": 31, "next": 32}
    assert people.find_one({"_id": 4}, {"city": "$addr.city"}) == {"_id": 4}  # missing: left out
    assert people.find_one({"_id": 1}, {"_id": 0, "where": {"c": "$addr.city", "up": {
        "$toUpper": "$name"}}}) == {"where": {"c": "Oslo", "up": "ANN"}}
    assert people.find_one({"_id": 2}, {"addr.n": "$name"}) == {"_id": 2, "addr": {"n": "bob"}}
    assert people.find_one({"_id": 1}, {"scores.name": "$name"}) == \
        {"_id": 1, "scores": [{"name": "ann"}, {"name": "ann"}]}
    assert people.find_one({"_id": 3}, {"r": "$$ROOT.addr"}) == {"_id": 3, "r": {"city": "Oslo"}}
    # the command's let variables, in find and findAndModify
    r = db.command("find", "p", filter={"_id": 2}, projection={"v": "$$x", "age": 1},
                   let={"x": {"$add": [1, 2]}})
    assert r["cursor"]["firstBatch"] == [{"_id": 2, "age": 25, "v": 3}]
    r = db.command("findAndModify", "p", query={"_id": 5}, update={"$inc": {"opt": 1}},
                   new=True, fields={"o": {"$multiply": ["$opt", "$$k"]}}, let={"k": 10})
    assert r["value"] == {"_id": 5, "o": 80}
    # mongod's errors
    for spec, code in [({"age": 0, "n": "$name"}, 31310), ({"age": 0, "n": "x"}, 31310),
                       ({"age": 0, "n": {"$add": [1]}}, 31252), ({"n": {"$nope": 1}}, 31325),
                       ({"tags.$": "$name"}, 31308), ({"tags.$": {"$add": [1]}}, 31271),
                       ({"n": "$name", "age": 0}, 31254), ({"n": "$$undefinedVar"}, 17276)]:
        with pytest.raises(OperationFailure) as e:
            people.find_one({"tags": "a"}, spec)
        assert e.value.code == code, (spec, e.value.details)


def test_projection_slice_and_elem_match(people):
    d = people.find_one({"_id": 4}, {"tags": {"$slice": 2}})
    assert d["tags"] == ["a", "b"] and d["name"] == "dee"  # $slice alone keeps other fields
    assert people.find_one({"_id": 4}, {"tags": {"$slice": -1}})["tags"] == ["c"]
    assert people.find_one({"_id": 4}, {"tags": {"$slice": [1, 1]}})["tags"] == ["b"]
    d = people.find_one({"_id": 1}, {"scores": {"$elemMatch": {"s": {"$gt": 6}}}})
    assert d == {"_id": 1, "scores": [{"s": 9, "k": "y"}]}
    d = people.find_one({"_id": 2}, {"scores": {"$elemMatch": {"s": {"$gt": 6}}}})
    assert d == {"_id": 2}
    d = people.find_one({"scores.s": 9}, {"scores.$": 1})
    assert d == {"_id": 1, "scores": [{"s": 9, "k": "y"}]}


def test_batches_and_get_more(db):
    db.many.insert_many([{"_id": i, "pad": "p" * 50} for i in range(1000)])
    ss = db.client.admin.command("serverStatus")["opcounters"]["getmore"]
    cur = db.many.find({}, batch_size=100).sort("_id", 1)
    got = ids(cur)
    assert got == list(range(1000))
    after = db.client.admin.command("serverStatus")["opcounters"]["getmore"]
    assert after - ss >= 9
    # Raw: firstBatch, cursor id, getMore nextBatch, id 0 at the end.
    r = db.command({"find": "many", "filter": {}, "sort": {"_id": 1}, "batchSize": 600})
    assert len(r["cursor"]["firstBatch"]) == 600
    cid = r["cursor"]["id"]
    assert cid != 0 and isinstance(cid, Int64)
    assert r["cursor"]["ns"] == db.name + ".many"
    r = db.command({"getMore": cid, "collection": "many", "batchSize": 1000})
    assert [d["_id"] for d in r["cursor"]["nextBatch"]] == list(range(600, 1000))
    assert r["cursor"]["id"] == 0


def test_default_first_batch_is_101(db):
    db.many.insert_many([{"_id": i} for i in range(150)])
    r = db.command({"find": "many", "filter": {}})
    assert len(r["cursor"]["firstBatch"]) == 101
    assert r["cursor"]["id"] != 0


def test_limit_closes_cursor(db):
    db.many.insert_many([{"_id": i} for i in range(50)])
    r = db.command({"find": "many", "filter": {}, "limit": 10})
    assert len(r["cursor"]["firstBatch"]) == 10 and r["cursor"]["id"] == 0
    r = db.command({"find": "many", "filter": {}, "limit": 10, "batchSize": 4})
    n = len(r["cursor"]["firstBatch"])
    cid = r["cursor"]["id"]
    while cid:
        r = db.command({"getMore": cid, "collection": "many"})
        n += len(r["cursor"]["nextBatch"])
        cid = r["cursor"]["id"]
    assert n == 10
    r = db.command({"find": "many", "filter": {}, "singleBatch": True, "batchSize": 5})
    assert len(r["cursor"]["firstBatch"]) == 5 and r["cursor"]["id"] == 0


def test_comment_and_max_time_ms(people):
    assert ids(people.find({"age": 25}).comment("hello from test").sort("_id", 1)) == [2, 4]
    assert ids(people.find({"age": 25}).max_time_ms(5000).sort("_id", 1)) == [2, 4]
    r = people.database.command({"find": "p", "filter": {"_id": 1}, "comment": {"any": "bson"},
                                 "maxTimeMS": 60000})
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == [1]


def test_kill_cursors(db):
    db.many.insert_many([{"_id": i} for i in range(20)])
    r = db.command({"find": "many", "filter": {}, "batchSize": 2})
    cid = r["cursor"]["id"]
    assert cid != 0
    r = db.command({"killCursors": "many", "cursors": [cid]})
    assert r["cursorsKilled"] == [cid]
    with pytest.raises(OperationFailure) as e:
        db.command({"getMore": cid, "collection": "many"})
    assert e.value.code == 43  # CursorNotFound
    r = db.command({"killCursors": "many", "cursors": [Int64(123456789)]})
    assert r["cursorsNotFound"] == [123456789]
    # Driver-level close sends killCursors; the collection stays usable.
    cur = db.many.find({}, batch_size=2)
    next(cur)
    cur.close()
    assert db.many.count_documents({}) == 20


def test_cursor_usable_from_another_connection(server, db):
    db.many.insert_many([{"_id": i} for i in range(10)])
    r = db.command({"find": "many", "filter": {}, "batchSize": 3, "sort": {"_id": 1}})
    other = server.client()
    try:
        r2 = other[db.name].command({"getMore": r["cursor"]["id"], "collection": "many"})
        assert [d["_id"] for d in r2["cursor"]["nextBatch"]] == list(range(3, 10))
    finally:
        other.close()


def test_count_estimated_distinct(people):
    assert people.count_documents({}) == 5
    assert people.count_documents({"age": 25}) == 2
    assert people.count_documents({}, skip=1, limit=2) == 2
    assert people.estimated_document_count() == 5
    assert people.database.command({"count": "p", "query": {"age": {"$gt": 30}}})["n"] == 3
    assert sorted(people.distinct("age")) == [25, 31, 40, 52.5]
    assert sorted(people.distinct("tags")) == ["a", "b", "c"]  # arrays are unwound
    assert sorted(people.distinct("addr.city")) == ["Oslo", "Rome"]
    assert sorted(people.distinct("name", {"age": 25})) == ["bob", "dee"]


def test_aggregate_pipeline(people):
    out = list(people.aggregate([
        {"$match": {"age": {"$lt": 50}}},
        {"$group": {"_id": "$age", "n": {"$sum": 1}, "total": {"$sum": "$age"}}},
        {"$sort": {"_id": -1}},
    ]))
    assert out == [{"_id": 40, "n": 1, "total": 40}, {"_id": 31, "n": 1, "total": 31},
                   {"_id": 25, "n": 2, "total": 50}]
    out = list(people.aggregate([
        {"$sort": {"_id": 1}}, {"$skip": 1}, {"$limit": 2},
        {"$project": {"name": 1, "_id": 0}},
    ]))
    assert out == [{"name": "bob"}, {"name": "cid"}]
    out = list(people.aggregate([{"$match": {"tags": "b"}}, {"$count": "nb"}]))
    assert out == [{"nb": 3}]
    out = list(people.aggregate([{"$group": {"_id": None, "sum": {"$sum": "$age"}}}]))
    assert out == [{"_id": None, "sum": 173.5}]


def test_aggregate_cursor_batches(db):
    db.many.insert_many([{"_id": i} for i in range(500)])
    out = list(db.many.aggregate([{"$sort": {"_id": 1}}], batchSize=50))
    assert [d["_id"] for d in out] == list(range(500))
    r = db.command({"aggregate": "many", "pipeline": [], "cursor": {"batchSize": 0}})
    assert r["cursor"]["firstBatch"] == [] and r["cursor"]["id"] != 0


# -- query operators ----------------------------------------------------------

def test_comparison_operators(people):
    assert q(people, {"age": {"$eq": 25}}) == [2, 4]
    assert q(people, {"age": {"$ne": 25}}) == [1, 3, 5]
    assert q(people, {"age": {"$gt": 31}}) == [3, 5]
    assert q(people, {"age": {"$gte": 31}}) == [1, 3, 5]
    assert q(people, {"age": {"$lt": 31}}) == [2, 4]
    assert q(people, {"age": {"$lte": 31}}) == [1, 2, 4]
    assert q(people, {"age": {"$gt": 24, "$lt": 32}}) == [1, 2, 4]
    assert q(people, {"age": {"$in": [25, 40]}}) == [2, 3, 4]
    assert q(people, {"age": {"$nin": [25, 40]}}) == [1, 5]
    assert q(people, {"name": {"$gt": "b"}}) == [2, 3, 4]  # strings only compare with strings


def test_exists_type(people):
    assert q(people, {"opt": {"$exists": True}}) == [3, 5]
    assert q(people, {"opt": {"$exists": False}}) == [1, 2, 4]
    assert q(people, {"age": {"$type": "double"}}) == [5]
    assert q(people, {"age": {"$type": "int"}}) == [1, 2, 3, 4]
    assert q(people, {"age": {"$type": "number"}}) == [1, 2, 3, 4, 5]
    assert q(people, {"opt": {"$type": "null"}}) == [3]
    assert q(people, {"opt": {"$type": 10}}) == [3]
    assert q(people, {"addr": {"$type": "object"}}) == [1, 2, 3]
    assert q(people, {"tags": {"$type": "array"}}) == [1, 2, 3, 4, 5]


def test_logical_operators(people):
    assert q(people, {"$and": [{"age": 25}, {"tags": "c"}]}) == [4]
    assert q(people, {"$or": [{"age": 40}, {"name": "bob"}]}) == [2, 3]
    assert q(people, {"$nor": [{"age": 25}, {"age": 40}]}) == [1, 5]
    assert q(people, {"age": {"$not": {"$gt": 30}}}) == [2, 4]
    assert q(people, {"opt": {"$not": {"$gt": 5}}}) == [1, 2, 3, 4]  # includes missing


def test_regex(people):
    assert q(people, {"name": {"$regex": "^[a-c]"}}) == [1, 2, 3]
    assert q(people, {"name": {"$regex": "^e", "$options": "i"}}) == [5]
    assert q(people, {"name": re.compile("E")}) == [5]
    assert q(people, {"name": Regex("^A", "i")}) == [1]
    assert q(people, {"tags": {"$regex": "^c$"}}) == [4, 5]
    assert q(people, {"name": {"$not": re.compile("^[a-c]")}}) == [4, 5]


def test_array_operators(people):
    assert q(people, {"tags": "b"}) == [1, 2, 4]
    assert q(people, {"tags": ["b"]}) == [2]  # whole-array equality
    assert q(people, {"tags": {"$size": 2}}) == [1]
    assert q(people, {"tags": {"$size": 0}}) == [3]
    assert q(people, {"tags": {"$all": ["a", "b"]}}) == [1, 4]
    assert q(people, {"scores": {"$elemMatch": {"s": {"$gt": 4}, "k": "x"}}}) == [1]
    # without $elemMatch, conditions may be met by different elements
    assert q(people, {"scores.s": {"$gt": 8}, "scores.k": "x"}) == [1]
    assert q(people, {"scores": {"$elemMatch": {"s": 9, "k": "x"}}}) == []


def test_mod(people):
    assert q(people, {"age": {"$mod": [5, 0]}}) == [2, 3, 4]
    assert q(people, {"age": {"$mod": [2, 1]}}) == [1, 2, 4]


def test_dotted_paths_through_arrays(db):
    db.t.insert_many([
        {"_id": 1, "a": [{"b": 1}, {"b": 2}]},
        {"_id": 2, "a": {"b": 2}},
        {"_id": 3, "a": [{"b": [3, 4]}]},
        {"_id": 4, "a": [[{"b": 1}]]},
        {"_id": 5, "a": [10, 20]},
    ])
    assert q(db.t, {"a.b": 2}) == [1, 2]
    assert q(db.t, {"a.b": 4}) == [3]
    assert q(db.t, {"a.b": 1}) == [1]  # nested arrays are not traversed twice
    assert q(db.t, {"a.1": 20}) == [5]  # numeric path component indexes arrays
    assert q(db.t, {"a.1.b": 2}) == [1]
    assert q(db.t, {"a.b": {"$gt": 3}}) == [3]


def test_null_matches_missing(db):
    db.t.insert_many([{"_id": 1, "x": None}, {"_id": 2}, {"_id": 3, "x": 0},
                      {"_id": 4, "x": [None, 1]}, {"_id": 5, "x": [1]}])
    assert q(db.t, {"x": None}) == [1, 2, 4]
    assert q(db.t, {"x": {"$ne": None}}) == [3, 5]
    assert q(db.t, {"x": {"$exists": False}}) == [2]
    assert q(db.t, {"x": {"$in": [None, 0]}}) == [1, 2, 3, 4]


def test_numeric_comparison_across_types(db):
    db.t.insert_many([
        {"_id": "int", "v": 1}, {"_id": "long", "v": Int64(1)}, {"_id": "double", "v": 1.0},
        {"_id": "dec", "v": Decimal128("1")}, {"_id": "dec2", "v": Decimal128("1.5")},
        {"_id": "two", "v": 2}, {"_id": "str", "v": "1"},
    ])
    ones = ["dec", "double", "int", "long"]
    assert q(db.t, {"v": 1}) == ones
    assert q(db.t, {"v": Int64(1)}) == ones
    assert q(db.t, {"v": 1.0}) == ones
    assert q(db.t, {"v": Decimal128("1.0")}) == ones
    assert q(db.t, {"v": {"$gt": 1}}) == ["dec2", "two"]
    assert q(db.t, {"v": {"$gt": 1.2, "$lt": Decimal128("1.6")}}) == ["dec2"]
    assert q(db.t, {"v": {"$lt": Int64(2)}}) == ["dec", "dec2", "double", "int", "long"]
    assert sorted(db.t.distinct("v", {"_id": {"$in": ["int", "two"]}})) == [1, 2]


def test_sort_order_across_types(db):
    oid = ObjectId()
    now = datetime.datetime(2024, 1, 2, 3, 4, 5)
    values = [
        ("minkey", MinKey()),
        ("null", None),
        ("int", 1),
        ("double", 2.5),
        ("long", Int64(3)),
        ("decimal", Decimal128("4")),
        ("string_a", "a"),
        ("string_b", "b"),
        ("object", {"x": 1}),
        ("binary", Binary(b"\x01\x02")),
        ("objectid", oid),
        ("false", False),
        ("true", True),
        ("date", now),
        ("timestamp", Timestamp(1, 1)),
        ("regex", Regex("^a")),
        ("maxkey", MaxKey()),
    ]
    # Insert in a scrambled order so that insertion order cannot pass for sort order.
    scrambled = values[::2] + values[1::2]
    db.t.insert_many([{"_id": name, "v": v} for name, v in scrambled])
    expected = [name for name, _ in values]
    assert ids(db.t.find().sort("v", 1)) == expected
    assert ids(db.t.find().sort("v", -1)) == expected[::-1]
    # Missing sorts like null, before numbers.
    db.t.insert_one({"_id": "missing"})
    got = ids(db.t.find({"_id": {"$in": ["missing", "int", "string_a"]}}).sort("v", 1))
    assert got == ["missing", "int", "string_a"]


def test_sort_by_array_field_uses_min_or_max(db):
    db.t.insert_many([{"_id": 1, "a": [5, 1]}, {"_id": 2, "a": [3]}, {"_id": 3, "a": [4, 9]}])
    assert ids(db.t.find().sort("a", 1)) == [1, 2, 3]   # by smallest element: 1, 3, 4
    assert ids(db.t.find().sort("a", -1)) == [3, 1, 2]  # by largest element: 9, 5, 3


def test_bad_query_operator(db):
    db.t.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as e:
        list(db.t.find({"a": {"$foo": 1}}))
    assert e.value.code == 2  # BadValue: unknown operator
    with pytest.raises(OperationFailure) as e:
        list(db.t.find({"$foo": [{"a": 1}]}))
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        list(db.t.find({"a": {"$regex": "("}}))
    assert e.value.code == 51091  # invalid regular expression
    assert db.t.find_one({"_id": 1}) == {"_id": 1}
