"""
find, update and delete by {_id: v} take a point-lookup path that skips
planning and matching (crud_read.c, crud_write.c).  These tests pin down
that it answers exactly what the general path answers: numeric _ids equal
across types, no match across types, the collection's default collation for
string _ids, the options that must leave the fast path, and explain's counts.
"""

import datetime

from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId


def _fill(coll):
    oid = ObjectId()
    coll.insert_many([
        {"_id": 5.0, "k": "double"},
        {"_id": Decimal128("7"), "k": "decimal"},
        {"_id": Int64(9), "k": "long"},
        {"_id": "a", "k": "string"},
        {"_id": datetime.datetime(2020, 1, 1), "k": "date"},
        {"_id": oid, "k": "oid"},
        {"_id": True, "k": "bool"},
    ])
    return oid


def test_point_find_matches_as_the_query_language_does(db):
    t = db.t
    oid = _fill(t)
    # Numbers compare by value whatever their type.
    assert t.find_one({"_id": 5})["k"] == "double"
    assert t.find_one({"_id": Int64(5)})["k"] == "double"
    assert t.find_one({"_id": 7})["k"] == "decimal"
    assert t.find_one({"_id": 9})["k"] == "long"
    # Other types match only themselves.
    assert t.find_one({"_id": "A"}) is None
    assert t.find_one({"_id": "5"}) is None
    assert t.find_one({"_id": 1}) is None  # not the boolean true
    assert t.find_one({"_id": oid})["k"] == "oid"
    assert t.find_one({"_id": datetime.datetime(2020, 1, 1)})["k"] == "date"
    assert t.find_one({"_id": "missing"}) is None
    assert db.nope.find_one({"_id": "a"}) is None  # no such collection


def test_point_find_reply_shape_and_options(db):
    t = db.t
    _fill(t)
    r = db.command({"find": "t", "filter": {"_id": "a"}})
    assert r["cursor"]["id"] == 0 and r["cursor"]["ns"] == db.name + ".t"
    assert r["cursor"]["firstBatch"] == [{"_id": "a", "k": "string"}]
    assert list(r) == ["cursor", "ok"] and list(r["cursor"]) == ["firstBatch", "id", "ns"]
    r = db.command({"find": "t", "filter": {"_id": "zz"}, "limit": 1, "singleBatch": True})
    assert r["cursor"]["firstBatch"] == [] and r["cursor"]["id"] == 0
    assert list(r) == ["cursor", "ok"] and list(r["cursor"]) == ["firstBatch", "id", "ns"]
    # Documents around the sizes where the reply's buffer grows.
    for n in (1900, 1990, 2000, 2010, 4000, 70000):
        t.replace_one({"_id": "big"}, {"_id": "big", "v": "x" * n}, upsert=True)
        r = db.command({"find": "t", "filter": {"_id": "big"}})
        assert r["ok"] == 1 and r["cursor"]["firstBatch"] == [{"_id": "big", "v": "x" * n}]
    t.delete_one({"_id": "big"})
    # Options that change the answer leave the fast path and still work.
    assert t.find_one({"_id": "a"}, {"k": 0}) == {"_id": "a"}
    assert list(t.find({"_id": "a"}).skip(1)) == []
    r = db.command({"find": "t", "filter": {"_id": "a"}, "batchSize": 0})
    assert r["cursor"]["firstBatch"] == []
    r = db.command({"find": "t", "filter": {"_id": "a"}, "returnKey": True})
    assert r["cursor"]["firstBatch"] == [{"_id": "a"}]
    assert list(t.find({"_id": "a"}).hint("_id_")) == [{"_id": "a", "k": "string"}]
    # Bad arguments are still refused.
    r = db.command({"find": "t", "filter": {"_id": "a"}, "limit": "x"}, check=False)
    assert r["ok"] == 0 and r["code"] == 14
    r = db.command({"find": "t", "filter": {"_id": "a"}, "bogus": 1}, check=False)
    assert r["ok"] == 0 and r["code"] == 40415


def test_point_paths_follow_the_default_collation(db):
    db.create_collection("ci", collation={"locale": "en", "strength": 2})
    ci = db.ci
    ci.insert_one({"_id": "abc", "v": 1})
    # A string _id under a case-insensitive default collation matches case-blind.
    assert ci.find_one({"_id": "ABC"}) == {"_id": "abc", "v": 1}
    assert ci.update_one({"_id": "ABC"}, {"$set": {"v": 2}}).modified_count == 1
    assert ci.find_one({"_id": "abc"})["v"] == 2
    assert ci.delete_one({"_id": "aBc"}).deleted_count == 1
    assert ci.count_documents({}) == 0


def test_point_update_and_delete(db):
    t = db.t
    _fill(t)
    assert t.update_one({"_id": 7}, {"$set": {"u": 1}}).modified_count == 1
    assert t.find_one({"_id": Decimal128("7")})["u"] == 1
    assert t.update_one({"_id": "zz"}, {"$set": {"u": 1}}).matched_count == 0
    r = t.update_one({"_id": "new"}, {"$set": {"u": 1}}, upsert=True)
    assert r.upserted_id == "new"
    assert t.delete_one({"_id": 5}).deleted_count == 1
    assert t.find_one({"_id": 5.0}) is None
    assert t.delete_one({"_id": "zz"}).deleted_count == 0
    # $set of existing top-level fields rewrites in place; new ones are appended.
    t.insert_one({"_id": "order", "a": 1, "b": 2, "c": 3})
    t.update_one({"_id": "order"}, {"$set": {"c": "x", "a": "y"}})
    assert list(t.find_one({"_id": "order"}).items()) == [("_id", "order"), ("a", "y"), ("b", 2),
                                                          ("c", "x")]
    t.update_one({"_id": "order"}, {"$set": {"b": 5, "z": 0, "d": 1}})
    assert list(t.find_one({"_id": "order"}).keys()) == ["_id", "a", "b", "c", "d", "z"]
    r = t.update_one({"_id": "order"}, {"$set": {"b": 5}})
    assert r.matched_count == 1 and r.modified_count == 0


def test_point_find_explain_counts(db):
    t = db.t
    _fill(t)
    e = db.command("explain", {"find": "t", "filter": {"_id": "a"}}, verbosity="executionStats")
    st = e["executionStats"]
    assert (st["nReturned"], st["totalKeysExamined"], st["totalDocsExamined"]) == (1, 1, 1)
