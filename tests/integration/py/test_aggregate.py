"""
The aggregation pipeline through pymongo: every stage and accumulator, the
expression language, $lookup (both forms), $facet, $out/$merge, $documents,
$sort+$limit, the memory limit of blocking stages (with a small limit set at
start-up), update pipelines, `let`, $expr in find, and collection validators
(121 DocumentValidationFailure with errInfo).
"""

import datetime
import os

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from pymongo import ReturnDocument
from pymongo.errors import OperationFailure, WriteError

from sabled import Sabled

MEM_LIMIT = 2 * 1024 * 1024


@pytest.fixture(scope="module")
def server():
    s = Sabled()
    try:
        s.start(["--setParameter",
                 "internalQueryMaxBlockingSortMemoryUsageBytes=%d" % MEM_LIMIT,
                 "--setParameter", "internalDocumentSourceGroupMaxMemoryBytes=%d" % MEM_LIMIT])
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def sales(db):
    db.sales.insert_many([
        {"_id": 1, "item": "abc", "price": 10, "qty": 2, "tags": ["a", "b"],
         "date": datetime.datetime(2021, 3, 1, 8, 0, 0)},
        {"_id": 2, "item": "jkl", "price": 20, "qty": 1, "tags": ["b"],
         "date": datetime.datetime(2021, 3, 1, 9, 0, 0)},
        {"_id": 3, "item": "xyz", "price": 5, "qty": 10, "tags": [],
         "date": datetime.datetime(2021, 3, 15, 9, 0, 0)},
        {"_id": 4, "item": "abc", "price": 10, "qty": 5, "tags": ["c"],
         "date": datetime.datetime(2021, 4, 4, 11, 21, 39)},
        {"_id": 5, "item": "xyz", "price": 5, "qty": 7,
         "date": datetime.datetime(2021, 4, 4, 21, 23, 13)},
    ])
    return db.sales


def agg(coll, pipeline, **kw):
    return list(coll.aggregate(pipeline, **kw))


# ---- stages ------------------------------------------------------------------------

def test_project_computed_and_nested(sales):
    r = agg(sales, [{"$match": {"_id": 1}},
                    {"$project": {"total": {"$multiply": ["$price", "$qty"]},
                                  "item": 1, "d": {"y": {"$year": "$date"}}}}])
    assert r == [{"_id": 1, "item": "abc", "total": 20, "d": {"y": 2021}}]
    r = agg(sales, [{"$match": {"_id": 1}}, {"$project": {"_id": 0, "tags": 0, "date": 0}}])
    assert r == [{"item": "abc", "price": 10, "qty": 2}]


def test_add_fields_set_unset_replace(sales):
    r = agg(sales, [{"$match": {"_id": 2}},
                    {"$addFields": {"total": {"$multiply": ["$price", "$qty"]}}},
                    {"$set": {"a.b": "$item"}},
                    {"$unset": ["date", "tags"]}])
    assert r == [{"_id": 2, "item": "jkl", "price": 20, "qty": 1, "total": 20,
                  "a": {"b": "jkl"}}]
    r = agg(sales, [{"$match": {"_id": 2}}, {"$project": {"a": {"$literal": {"x": 1, "y": 2}}}},
                    {"$addFields": {"a": {"y": {"$add": ["$_id", 5]}, "z": 3}}}])
    assert r == [{"_id": 2, "a": {"x": 1, "y": 7, "z": 3}}]
    r = agg(sales, [{"$match": {"_id": 2}}, {"$replaceWith": {"x": "$item"}}])
    assert r == [{"x": "jkl"}]
    r = agg(sales, [{"$match": {"_id": 2}}, {"$replaceRoot": {"newRoot": {"y": "$qty"}}}])
    assert r == [{"y": 1}]
    with pytest.raises(OperationFailure) as e:
        agg(sales, [{"$replaceRoot": {"newRoot": "$item"}}])
    assert e.value.code == 40228


def test_remove_variable(sales):
    r = agg(sales, [{"$match": {"_id": {"$in": [1, 3]}}},
                    {"$project": {"item": 1,
                                  "t": {"$cond": [{"$gt": ["$qty", 5]}, "$qty", "$$REMOVE"]}}}])
    assert r == [{"_id": 1, "item": "abc"}, {"_id": 3, "item": "xyz", "t": 10}]


def test_group_accumulators(sales):
    r = agg(sales, [{"$group": {"_id": "$item", "n": {"$sum": 1}, "q": {"$sum": "$qty"},
                                "avg": {"$avg": "$qty"}, "mn": {"$min": "$qty"},
                                "mx": {"$max": "$qty"}, "f": {"$first": "$_id"},
                                "l": {"$last": "$_id"}, "p": {"$push": "$qty"},
                                "s": {"$addToSet": "$price"}, "c": {"$count": {}},
                                "m": {"$mergeObjects": {"k": "$_id"}},
                                "rev": {"$sum": {"$multiply": ["$price", "$qty"]}}}},
                    {"$sort": {"_id": 1}}])
    assert r[0] == {"_id": "abc", "n": 2, "q": 7, "avg": 3.5, "mn": 2, "mx": 5, "f": 1, "l": 4,
                    "p": [2, 5], "s": [10], "c": 2, "m": {"k": 4}, "rev": 70}
    assert [d["_id"] for d in r] == ["abc", "jkl", "xyz"]
    r = agg(sales, [{"$group": {"_id": {"m": {"$month": "$date"}}, "n": {"$sum": 1}}},
                    {"$sort": {"_id.m": 1}}])
    assert r == [{"_id": {"m": 3}, "n": 3}, {"_id": {"m": 4}, "n": 2}]
    r = agg(sales, [{"$group": {"_id": None, "total": {"$sum": "$qty"}}}])
    assert r == [{"_id": None, "total": 25}]


def test_std_dev_accumulators(db):
    db.sd.insert_many([{"g": 1, "v": 2}, {"g": 1, "v": 4.0}, {"g": 1, "v": Int64(4)},
                       {"g": 1, "v": Decimal128("4")}, {"g": 1, "v": 5}, {"g": 1, "v": 5},
                       {"g": 1, "v": 7}, {"g": 1, "v": 9}, {"g": 1, "v": "x"}, {"g": 1},
                       {"g": 2, "v": 3}, {"g": 3, "v": None}])
    r = agg(db.sd, [{"$group": {"_id": "$g", "p": {"$stdDevPop": "$v"},
                                "s": {"$stdDevSamp": "$v"}}}, {"$sort": {"_id": 1}}])
    assert r[0]["p"] == pytest.approx(2.0)  # the numbers 2 4 4 4 5 5 7 9; the rest ignored
    assert r[0]["s"] == pytest.approx((32 / 7) ** 0.5)
    assert r[1:] == [{"_id": 2, "p": 0.0, "s": None}, {"_id": 3, "p": None, "s": None}]


def test_n_accumulators(db):
    db.na.insert_many([{"_id": i, "k": i % 2, "v": [5, None, 3, 9, 1, 7, 2, "a", 8][i]}
                       for i in range(9)] + [{"_id": 9, "k": 1}])
    r = agg(db.na, [{"$sort": {"_id": 1}}, {"$group": {
        "_id": "$k", "f": {"$firstN": {"input": "$v", "n": 3}},
        "l": {"$lastN": {"input": "$v", "n": 2}}, "mn": {"$minN": {"input": "$v", "n": 3}},
        "mx": {"$maxN": {"input": "$v", "n": 2}}, "all": {"$firstN": {"input": "$_id", "n": 10}}}},
        {"$sort": {"_id": 1}}])
    assert r == [{"_id": 0, "f": [5, 3, 1], "l": [2, 8], "mn": [1, 2, 3], "mx": [8, 5],
                  "all": [0, 2, 4, 6, 8]},
                 # firstN/lastN keep null and missing (as null); minN/maxN skip them
                 {"_id": 1, "f": [None, 9, 7], "l": ["a", None], "mn": [7, 9, "a"],
                  "mx": ["a", 9], "all": [1, 3, 5, 7, 9]}]
    # n is evaluated on the group's _id
    r = agg(db.na, [{"$sort": {"_id": 1}}, {"$group": {
        "_id": {"k": "$k"}, "f": {"$firstN": {"input": "$_id", "n": {"$add": ["$k", 1]}}}}},
        {"$sort": {"_id": 1}}])
    assert r == [{"_id": {"k": 0}, "f": [0]}, {"_id": {"k": 1}, "f": [1, 3]}]
    for spec, code in [({"$firstN": 5}, 5787801), ({"$maxN": 5}, 5787900),
                       ({"$minN": {"input": "$v"}}, 5787906), ({"$maxN": {"n": 2}}, 5787907),
                       ({"$lastN": {"input": "$v", "n": 0}}, 5787908),
                       ({"$lastN": {"input": "$v", "n": 1.5}}, 5787903),
                       ({"$lastN": {"input": "$v", "n": "x"}}, 5787902),
                       ({"$lastN": {"input": "$v", "n": 1, "z": 1}}, 5787901)]:
        with pytest.raises(OperationFailure) as e:
            agg(db.na, [{"$group": {"_id": None, "x": spec}}])
        assert e.value.code == code, spec


def test_top_bottom_accumulators(db):
    # the manual's game: PlayerD's score is missing, PlayerE's null (both sort as null)
    db.game.insert_many([{"p": "A", "g": "G1", "score": 1}, {"p": "B", "g": "G1", "score": 2},
                         {"p": "C", "g": "G1", "score": 3}, {"p": "D", "g": "G1"},
                         {"p": "E", "g": "G1", "score": None}, {"p": "F", "g": "G2", "score": 7}])
    out, by = ["$p", "$score"], {"score": -1}
    r = agg(db.game, [{"$group": {
        "_id": "$g", "bn": {"$bottomN": {"output": out, "sortBy": by, "n": 3}},
        "tn": {"$topN": {"output": out, "sortBy": by, "n": 3}},
        "b": {"$bottom": {"output": out, "sortBy": by}}, "t": {"$top": {"output": out, "sortBy": by}},
        "miss": {"$top": {"output": "$nope", "sortBy": {"p": 1}}},
        "two": {"$topN": {"output": "$p", "sortBy": {"score": 1, "p": -1}, "n": 2}}}},
        {"$sort": {"_id": 1}}])
    assert r == [{"_id": "G1", "bn": [["A", 1], ["D", None], ["E", None]],
                  "tn": [["C", 3], ["B", 2], ["A", 1]], "b": ["D", None], "t": ["C", 3],
                  "miss": None, "two": ["E", "D"]},
                 {"_id": "G2", "bn": [["F", 7]], "tn": [["F", 7]], "b": ["F", 7], "t": ["F", 7],
                  "miss": None, "two": ["F"]}]
    # n from the group's key
    r = agg(db.game, [{"$group": {"_id": {"g": "$g"}, "x": {"$bottomN": {
        "output": "$p", "sortBy": {"p": 1}, "n": {"$cond": [{"$eq": ["$g", "G1"]}, 2, 1]}}}}},
        {"$sort": {"_id": 1}}])
    assert r == [{"_id": {"g": "G1"}, "x": ["D", "E"]}, {"_id": {"g": "G2"}, "x": ["F"]}]
    # sortBy a text score: highest first
    db.game.create_index([("p", "text")])
    db.game.insert_many([{"p": "Q Q Q R", "g": "T"}, {"p": "Q", "g": "T"}, {"p": "Q Q", "g": "T"}])
    meta = {"output": "$p", "sortBy": {"sc": {"$meta": "textScore"}}}
    assert agg(db.game, [{"$match": {"$text": {"$search": "Q"}}}, {"$group": {
        "_id": "$g", "t": {"$topN": dict(meta, n=2)}, "b": {"$bottom": meta}}}]) == [
        {"_id": "T", "t": ["Q Q Q R", "Q Q"], "b": "Q"}]
    ok = {"output": "$p", "sortBy": {"p": 1}}
    for spec, code in [({"$topN": 5}, 5788001), ({"$top": meta}, 40218), ({"$top": dict(ok, n=1)}, 5788002),
                       ({"$topN": ok}, 5788003), ({"$bottomN": {"sortBy": {"p": 1}, "n": 1}}, 5788004),
                       ({"$bottom": {"output": "$p"}}, 5788005),
                       ({"$top": {"output": "$p", "sortBy": 1}}, 10065),
                       ({"$top": {"output": "$p", "sortBy": {"p": 2}}}, 15975),
                       ({"$topN": dict(ok, n=0)}, 5787908), ({"$topN": dict(ok, n="x")}, 5787902)]:
        with pytest.raises(OperationFailure) as e:
            agg(db.game, [{"$group": {"_id": None, "x": spec}}])
        assert e.value.code == code, spec


def test_sort_limit_skip_count_unwind(sales):
    r = agg(sales, [{"$group": {"_id": "$item", "q": {"$sum": "$qty"}}},
                    {"$sort": {"q": -1}}, {"$limit": 2}])
    assert r == [{"_id": "xyz", "q": 17}, {"_id": "abc", "q": 7}]
    r = agg(sales, [{"$unwind": "$tags"}, {"$count": "n"}])
    assert r == [{"n": 4}]
    r = agg(sales, [{"$unwind": {"path": "$tags", "preserveNullAndEmptyArrays": True,
                                 "includeArrayIndex": "i"}},
                    {"$skip": 1}, {"$limit": 2}, {"$project": {"tags": 1, "i": 1}}])
    assert r == [{"_id": 1, "tags": "b", "i": 1}, {"_id": 2, "tags": "b", "i": 0}]


def test_sort_by_count_bucket_sample(sales):
    r = agg(sales, [{"$sortByCount": "$item"}])
    assert r[2] == {"_id": "jkl", "count": 1}
    assert sorted(d["_id"] for d in r[:2]) == ["abc", "xyz"]
    r = agg(sales, [{"$bucket": {"groupBy": "$qty", "boundaries": [0, 5, 10],
                                 "default": "other",
                                 "output": {"n": {"$sum": 1}, "ids": {"$push": "$_id"}}}}])
    assert r == [{"_id": 0, "n": 2, "ids": [1, 2]}, {"_id": 5, "n": 2, "ids": [4, 5]},
                 {"_id": "other", "n": 1, "ids": [3]}]
    r = agg(sales, [{"$bucket": {"groupBy": "$price", "boundaries": [0, 100]}}])
    assert r == [{"_id": 0, "count": 5}]
    with pytest.raises(OperationFailure):
        agg(sales, [{"$bucket": {"groupBy": "$qty", "boundaries": [0, 5]}}])
    r = agg(sales, [{"$sample": {"size": 3}}])
    assert len(r) == 3 and len({d["_id"] for d in r}) == 3
    assert len(agg(sales, [{"$sample": {"size": 50}}])) == 5


def bounds(docs):
    return [(d["_id"]["min"], d["_id"]["max"], d["count"]) for d in docs]


def test_bucket_auto_granularity(db):
    db.things.insert_many([{"_id": i} for i in range(100)])

    def auto(g, n=5, coll=db.things):
        return bounds(agg(coll, [{"$bucketAuto": {"groupBy": "$_id", "buckets": n,
                                                  "granularity": g}}]))
    # a bucket ends at its largest value rounded up in the series and takes what
    # lies below that; the next bucket starts there
    assert auto("R20") == [(0, 20, 20), (20, 40, 20), (40, 63, 23), (63, 90, 27),
                           (90, 100, 10)]
    assert auto("1-2-5") == [(0, 20, 20), (20, 50, 30), (50, 100, 50)]
    assert auto("E6") == [(0, 22, 22), (22, 47, 25), (47, 68, 21), (68, 100, 32)]
    assert auto("R5", 3) == [(0, 40, 40), (40, 100, 60)]
    r = agg(db.things, [{"$bucketAuto": {"groupBy": "$_id", "buckets": 5,
                                         "granularity": "POWERSOF2"}}])
    assert bounds(r) == [(0, 32, 32), (32, 64, 32), (64, 128, 36)]
    assert all(type(d["_id"]["max"]) is int for d in r)  # powers of two of integers
    r = agg(db.things, [{"$bucketAuto": {"groupBy": "$_id", "buckets": 2,
                                         "granularity": "E12"}}])
    assert [type(d["_id"]["max"]) for d in r] == [float, float]  # series give doubles
    for g in ("R10", "R40", "R80", "E24", "E48", "E96", "E192"):
        b = auto(g)
        assert sum(n for _, _, n in b) == 100, g
        assert all(b[i][1] == b[i + 1][0] for i in range(len(b) - 1)), g
    # the first min is rounded down; values below 1 scale down a decade at a time
    db.small.insert_many([{"_id": i, "v": v} for i, v in
                          enumerate([0.012, 0.05, 0.3, 0.31, 7, 7.5])])
    r = agg(db.small, [{"$bucketAuto": {"groupBy": "$v", "buckets": 3, "granularity": "E12"},
                        }])
    assert [(d["_id"]["min"], d["_id"]["max"]) for d in r] == [
        (pytest.approx(0.01), pytest.approx(0.056)), (pytest.approx(0.056), pytest.approx(0.33)),
        (pytest.approx(0.33), pytest.approx(8.2))]
    # errors: mongod's codes for the name and for each value that cannot be rounded
    db.mixed.insert_many([{"v": 1}, {"v": "x"}])
    db.neg.insert_many([{"v": 1}, {"v": -1}])
    db.nan.insert_many([{"v": 1}, {"v": float("nan")}])
    for coll, g, code, msg in [
            (db.neg, "R7", 40257, "Unknown rounding granularity 'R7'"),
            (db.neg, 5, 40261, "granularity' field must be a string"),
            (db.mixed, "R5", 40258, "numeric boundaries only, but found a value with type: string"),
            (db.neg, "R5", 40260, "non-negative numbers only"),
            (db.neg, "POWERSOF2", 40260, "non-negative numbers only"),
            (db.nan, "E6", 40259, "but found a NaN")]:
        with pytest.raises(OperationFailure) as e:
            agg(coll, [{"$bucketAuto": {"groupBy": "$v", "buckets": 2, "granularity": g}}])
        assert e.value.code == code and msg in str(e.value), (g, str(e.value))
    with pytest.raises(OperationFailure) as e:  # a missing value is no number either
        agg(db.mixed, [{"$bucketAuto": {"groupBy": "$w", "buckets": 2, "granularity": "R5"}}])
    assert e.value.code == 40258 and "type: missing" in str(e.value)


def test_aggregate_explain_true(db):
    """{aggregate, pipeline, explain: true} (the form older than the explain command)
    answers with the explain document at queryPlanner verbosity, not a cursor."""
    db.ex.insert_many([{"_id": i, "x": i % 3} for i in range(12)])
    db.ex.create_index("x")
    pipeline = [{"$match": {"x": 1}}, {"$sort": {"_id": -1}}, {"$group": {"_id": "$x"}}]
    r = db.command({"aggregate": "ex", "pipeline": pipeline, "explain": True})
    assert "cursor" not in r and "executionStats" not in r
    assert r["queryPlanner"]["namespace"] == db.name + ".ex"
    want = db.command("explain", {"aggregate": "ex", "pipeline": pipeline, "cursor": {}},
                      verbosity="queryPlanner")
    assert r["queryPlanner"] == want["queryPlanner"]
    assert r["command"]["pipeline"] == pipeline and "explain" not in r["command"]
    # a cursor option is accepted with it; nothing runs (no $out target appears)
    r = db.command({"aggregate": "ex", "pipeline": [{"$out": "ex_out"}], "explain": True,
                    "cursor": {}})
    assert "queryPlanner" in r and "ex_out" not in db.list_collection_names()
    r = db.command({"aggregate": "ex", "pipeline": [], "explain": False, "cursor": {}})
    assert len(r["cursor"]["firstBatch"]) == 12
    with pytest.raises(OperationFailure) as e:
        db.command({"aggregate": "ex", "pipeline": [], "explain": "yes"})
    assert e.value.code == 14
    with pytest.raises(OperationFailure) as e:  # without explain, a cursor is required
        db.command({"aggregate": "ex", "pipeline": []})
    assert e.value.code == 9


def test_facet(sales):
    r = agg(sales, [{"$facet": {"cheap": [{"$match": {"price": {"$lt": 10}}}, {"$count": "n"}],
                                "items": [{"$group": {"_id": "$item"}}, {"$sort": {"_id": 1}}]}}])
    assert r == [{"cheap": [{"n": 2}], "items": [{"_id": "abc"}, {"_id": "jkl"}, {"_id": "xyz"}]}]
    with pytest.raises(OperationFailure) as e:
        agg(sales, [{"$facet": {"x": [{"$out": "foo"}]}}])
    assert e.value.code == 40600


def test_lookup_both_forms(db):
    db.orders.insert_many([{"_id": 1, "item": "a", "qty": 2}, {"_id": 2, "item": "b", "qty": 1},
                           {"_id": 3}])
    db.inv.insert_many([{"_id": 10, "sku": "a", "stock": 120}, {"_id": 11, "sku": "b", "stock": 0},
                        {"_id": 12, "sku": ["a", "c"], "stock": 5}, {"_id": 13}])
    r = agg(db.orders, [{"$lookup": {"from": "inv", "localField": "item", "foreignField": "sku",
                                     "as": "docs"}},
                        {"$project": {"ids": "$docs._id"}}])
    assert r == [{"_id": 1, "ids": [10, 12]}, {"_id": 2, "ids": [11]}, {"_id": 3, "ids": [13]}]
    r = agg(db.orders, [{"$match": {"_id": {"$lt": 3}}},
                        {"$lookup": {"from": "inv", "let": {"it": "$item", "q": "$qty"},
                                     "pipeline": [{"$match": {"$expr": {"$and": [
                                         {"$eq": ["$sku", "$$it"]},
                                         {"$gte": ["$stock", "$$q"]}]}}},
                                         {"$project": {"_id": 1}}],
                                     "as": "ok"}}])
    assert r == [{"_id": 1, "item": "a", "qty": 2, "ok": [{"_id": 10}]},
                 {"_id": 2, "item": "b", "qty": 1, "ok": []}]
    with pytest.raises(OperationFailure):
        agg(db.orders, [{"$lookup": {"from": "inv", "localField": "item"}}])


def test_out_and_merge(sales, db):
    r = agg(sales, [{"$group": {"_id": "$item", "q": {"$sum": "$qty"}}}, {"$out": "totals"}])
    assert r == []
    assert sorted((d["_id"], d["q"]) for d in db.totals.find()) == [
        ("abc", 7), ("jkl", 1), ("xyz", 17)]
    # $out replaces the whole target
    agg(sales, [{"$match": {"item": "jkl"}}, {"$project": {"item": 1}}, {"$out": "totals"}])
    assert list(db.totals.find()) == [{"_id": 2, "item": "jkl"}]
    with pytest.raises(OperationFailure) as e:
        agg(sales, [{"$out": "x"}, {"$match": {}}])
    assert e.value.code == 40601

    db.tgt.insert_many([{"_id": "abc", "q": 0, "keep": True}, {"_id": "zzz", "q": 1}])
    agg(sales, [{"$group": {"_id": "$item", "q": {"$sum": "$qty"}}},
                {"$merge": {"into": "tgt", "whenMatched": "merge", "whenNotMatched": "insert"}}])
    got = {d["_id"]: d for d in db.tgt.find()}
    assert got["abc"] == {"_id": "abc", "q": 7, "keep": True}
    assert got["xyz"] == {"_id": "xyz", "q": 17} and got["zzz"]["q"] == 1
    agg(sales, [{"$group": {"_id": "$item", "q": {"$sum": "$qty"}}},
                {"$merge": {"into": "tgt", "whenMatched": "replace",
                            "whenNotMatched": "discard"}}])
    assert db.tgt.find_one({"_id": "abc"}) == {"_id": "abc", "q": 7}
    agg(sales, [{"$group": {"_id": "$item", "q": {"$sum": "$qty"}}},
                {"$merge": {"into": "tgt",
                            "whenMatched": [{"$set": {"q": {"$add": ["$q", "$$new.q"]}}}]}}])
    assert db.tgt.find_one({"_id": "abc"}) == {"_id": "abc", "q": 14}
    with pytest.raises(OperationFailure) as e:
        agg(sales, [{"$group": {"_id": "$item"}}, {"$merge": {"into": "tgt", "whenMatched": "fail"}}])
    assert e.value.code == 11000
    agg(sales, [{"$project": {"item": 1}}, {"$merge": "tgt2"}])
    assert db.tgt2.count_documents({}) == 5


def test_merge_pipeline_as_mongod(client, db):
    db.ms.insert_many([{"_id": 1, "a": 1, "b": 1}, {"_id": 2, "a": 2, "b": 2}])
    db.mt.insert_one({"_id": 1, "c": 1})
    # unmatched: the source document goes in (mongod's upsertSupplied), not the pipeline's
    agg(db.ms, [{"$merge": {"into": "mt", "whenMatched": [{"$set": {"x": {"$add": [
        "$$new.a", "$$new.b"]}}}], "whenNotMatched": "insert"}}])
    assert list(db.mt.find().sort("_id", 1)) == [{"_id": 1, "c": 1, "x": 2},
                                                 {"_id": 2, "a": 2, "b": 2}]
    # a let over the source document; $$new stays for whenNotMatched insert only
    agg(db.ms, [{"$merge": {"into": "mt", "let": {"y": {"$multiply": ["$a", 10]}},
                            "whenMatched": [{"$set": {"y": "$$y", "n": "$$new.a"}}]}}])
    assert db.mt.find_one({"_id": 2}) == {"_id": 2, "a": 2, "b": 2, "y": 20, "n": 2}
    with pytest.raises(OperationFailure) as e:
        agg(db.ms, [{"$merge": {"into": "mt", "let": {}, "whenNotMatched": "discard",
                                "whenMatched": [{"$set": {"z": "$$new"}}]}}])
    assert e.value.code == 17276
    agg(db.ms, [{"$merge": {"into": "mt", "let": None, "whenNotMatched": "discard",
                            "whenMatched": [{"$set": {"z": "$$new.a"}}]}}])
    assert db.mt.find_one({"_id": 1})["z"] == 1
    for spec, code, msg in (
            ({"let": {"a": 1}, "whenMatched": "replace"}, 51199, "'whenMatched: replace'"),
            ({"let": {"new": "$a"}, "whenMatched": [{"$set": {"q": 1}}]}, 51273, "'new'")):
        with pytest.raises(OperationFailure) as e:
            agg(db.ms, [{"$merge": dict(spec, into="mt")}])
        assert e.value.code == code and msg in str(e.value)
    # the update command's c: constants of a pipeline update, taken as given
    db.command("update", "mt", updates=[{"q": {"_id": 1}, "u": [{"$set": {"w": "$$k"}}],
                                         "c": {"k": "$x"}}])
    assert db.mt.find_one({"_id": 1})["w"] == "$x"  # not the field x
    with pytest.raises(OperationFailure) as e:
        db.command("update", "mt", updates=[{"q": {}, "u": {"$set": {"w": 1}}, "c": {"k": 1}}])
    assert e.value.code == 51198


def test_documents_collectionless(client, db):
    r = list(db.aggregate([{"$documents": [{"x": 1}, {"x": 2}, {"x": 3}]},
                           {"$match": {"x": {"$gte": 2}}},
                           {"$set": {"y": {"$multiply": ["$x", 10]}}}]))
    assert r == [{"x": 2, "y": 20}, {"x": 3, "y": 30}]
    with pytest.raises(OperationFailure) as e:
        list(db.aggregate([{"$match": {}}]))
    assert e.value.code == 73
    r = list(db.aggregate([{"$listLocalSessions": {}}, {"$limit": 1}, {"$project": {"_id": 1}}]))
    assert len(r) == 1 and "id" in r[0]["_id"]  # the session the command ran in


def test_expr_in_find_and_match(sales):
    r = [d["_id"] for d in sales.find({"$expr": {"$gt": [{"$multiply": ["$price", "$qty"]}, 30]}})]
    assert r == [3, 4, 5]
    r = [d["_id"] for d in sales.find({"item": "abc", "$expr": {"$lt": ["$qty", "$price"]}})]
    assert r == [1, 4]
    r = agg(sales, [{"$match": {"$expr": {"$eq": ["$item", "jkl"]}}}, {"$project": {"_id": 1}}])
    assert r == [{"_id": 2}]
    with pytest.raises(OperationFailure) as e:
        list(sales.find({"$expr": {"$foo": 1}}))
    assert e.value.code == 168
    # an expression that fails while matching fails the aggregate
    for pipe in ([{"$match": {"$expr": {"$divide": [1, {"$subtract": ["$qty", 1]}]}}}],
                 [{"$set": {"z": 1}}, {"$match": {"$expr": {"$divide": [1, {"$subtract": ["$qty", 1]}]}}}]):
        with pytest.raises(OperationFailure) as e:
            agg(sales, pipe)
        assert e.value.code == 2


def test_let_variables(sales, db):
    r = agg(sales, [{"$match": {"$expr": {"$eq": ["$item", "$$target"]}}},
                    {"$project": {"_id": 1, "lim": "$$lim"}}],
            let={"target": "abc", "lim": {"$add": [1, 2]}})
    assert r == [{"_id": 1, "lim": 3}, {"_id": 4, "lim": 3}]
    r = db.command("find", "sales", filter={"$expr": {"$eq": ["$qty", "$$q"]}}, let={"q": 7})
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == [5]
    res = db.command("update", "sales", updates=[
        {"q": {"$expr": {"$eq": ["$_id", "$$id"]}}, "u": {"$set": {"hit": True}}}],
        let={"id": 3})
    assert res["n"] == 1 and sales.find_one({"_id": 3})["hit"] is True
    res = db.command("delete", "sales", deletes=[
        {"q": {"$expr": {"$eq": ["$_id", "$$id"]}}, "limit": 1}], let={"id": 3})
    assert res["n"] == 1 and sales.count_documents({}) == 4


def test_comment_accepted(sales):
    assert len(agg(sales, [{"$match": {}}], comment="hello")) == 5
    assert len(list(sales.find({}, comment="c"))) == 5


def test_sort_limit_top_k_and_memory_limit(db, server):
    big = "x" * 10000
    db.big.insert_many([{"_id": i, "k": (i * 7919) % 1000, "pad": big} for i in range(400)])
    # 4 MB through a blocking $sort: over the 2 MB test limit
    pipe = [{"$project": {"k": 1, "pad": 1, "n": {"$literal": 1}}}, {"$sort": {"k": -1}}]
    with pytest.raises(OperationFailure) as e:
        agg(db.big, pipe, allowDiskUse=False)
    assert e.value.code == 292
    # with allowDiskUse the sort spills sorted runs under <dbpath>/_tmp and merges them
    want = [d["_id"] for d in sorted(db.big.find({}, {"k": 1}), key=lambda d: -d["k"])]
    assert [d["_id"] for d in agg(db.big, pipe, allowDiskUse=True)] == want
    assert [d["_id"] for d in agg(db.big, pipe)] == want  # 7.0: allowDiskUseByDefault
    assert os.path.isdir(os.path.join(server.dbpath, "_tmp"))
    assert os.listdir(os.path.join(server.dbpath, "_tmp")) == []  # run files are unlinked
    # $sort + $limit keeps only the top k, so it fits
    r = agg(db.big, pipe + [{"$limit": 3}], allowDiskUse=False)
    assert [d["k"] for d in r] == sorted((d["k"] for d in db.big.find()), reverse=True)[:3]
    with pytest.raises(OperationFailure) as e:
        agg(db.big, [{"$group": {"_id": "$_id", "p": {"$push": "$pad"}}}], allowDiskUse=False)
    assert e.value.code == 292


# ---- expressions through the server ------------------------------------------------------

def expr(db, e, doc=None):
    db.e.delete_many({})
    db.e.insert_one(dict(doc or {}, _id=1))
    return agg(db.e, [{"$project": {"_id": 0, "r": e}}])[0].get("r", "MISSING")


def test_expression_operators(db):
    assert expr(db, {"$add": [1, 2, 3]}) == 6
    assert 0 <= expr(db, {"$rand": {}}) < 1
    assert expr(db, {"$subtract": ["$a", 2]}, {"a": 5}) == 3
    assert expr(db, {"$divide": [7, 2]}) == 3.5
    assert expr(db, {"$mod": [7, 3]}) == 1
    assert expr(db, {"$concat": ["a", "b", "$s"]}, {"s": "c"}) == "abc"
    assert expr(db, {"$toUpper": "abc"}) == "ABC"
    assert expr(db, {"$split": ["a,b,c", ","]}) == ["a", "b", "c"]
    assert expr(db, {"$substrCP": ["héllo", 1, 3]}) == "éll"
    assert expr(db, {"$strLenCP": "héllo"}) == 5
    assert expr(db, {"$regexMatch": {"input": "Hello", "regex": "^h", "options": "i"}}) is True
    assert expr(db, {"$replaceAll": {"input": "a-b-c", "find": "-", "replacement": "+"}}) == "a+b+c"
    assert expr(db, {"$cond": {"if": {"$gte": ["$a", 3]}, "then": "big", "else": "small"}},
                {"a": 5}) == "big"
    assert expr(db, {"$ifNull": ["$missing", "dflt"]}) == "dflt"
    assert expr(db, {"$switch": {"branches": [{"case": {"$eq": ["$a", 1]}, "then": "one"}],
                                 "default": "other"}}, {"a": 1}) == "one"
    assert expr(db, {"$map": {"input": [1, 2, 3], "as": "x", "in": {"$multiply": ["$$x", 2]}}}) \
        == [2, 4, 6]
    assert expr(db, {"$filter": {"input": [1, 2, 3, 4], "cond": {"$gt": ["$$this", 2]}}}) == [3, 4]
    assert expr(db, {"$reduce": {"input": [1, 2, 3], "initialValue": 0,
                                 "in": {"$add": ["$$value", "$$this"]}}}) == 6
    assert expr(db, {"$arrayElemAt": [[1, 2, 3], -1]}) == 3
    assert expr(db, {"$size": "$t"}, {"t": [1, 2]}) == 2
    assert expr(db, {"$in": [2, [1, 2]]}) is True
    assert expr(db, {"$slice": [[1, 2, 3, 4], 1, 2]}) == [2, 3]
    assert expr(db, {"$concatArrays": [[1], [2, 3]]}) == [1, 2, 3]
    assert expr(db, {"$dateToString": {"format": "%Y-%m-%d %H:%M:%S.%L %j", "date": "$d"}},
                {"d": datetime.datetime(2021, 3, 4, 5, 6, 7, 8000)}) == "2021-03-04 05:06:07.008 063"
    assert expr(db, {"$year": "$d"}, {"d": datetime.datetime(2020, 2, 29)}) == 2020
    assert expr(db, {"$dayOfWeek": "$d"}, {"d": datetime.datetime(2021, 1, 3)}) == 1
    assert expr(db, {"$toInt": "42"}) == 42
    assert expr(db, {"$toString": 2.5}) == "2.5"
    assert expr(db, {"$type": "$missing"}) == "missing"
    assert expr(db, {"$convert": {"input": "x", "to": "int", "onError": -1}}) == -1
    assert expr(db, {"$toLong": 5}) == Int64(5) and isinstance(expr(db, {"$toLong": 5}), Int64)
    assert expr(db, {"$toDecimal": "1.5"}) == Decimal128("1.5")
    assert expr(db, {"$let": {"vars": {"x": 2}, "in": {"$multiply": ["$$x", "$v"]}}}, {"v": 4}) == 8
    assert expr(db, {"$getField": {"field": "x", "input": {"x": 5}}}) == 5
    assert expr(db, {"$setField": {"field": "y", "input": {"x": 5}, "value": 1}}) == {"x": 5, "y": 1}
    assert expr(db, {"$mergeObjects": [{"a": 1}, {"b": 2}, {"a": 3}]}) == {"a": 3, "b": 2}
    assert expr(db, {"$literal": "$notapath"}) == "$notapath"
    assert expr(db, "$$ROOT", {"z": 1}) == {"_id": 1, "z": 1}
    assert expr(db, {"$objectToArray": {"a": 1}}) == [{"k": "a", "v": 1}]
    assert expr(db, {"$arrayToObject": [[["a", 1]]]}) == {"a": 1}
    with pytest.raises(OperationFailure) as e:
        expr(db, {"$divide": [1, 0]})
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        expr(db, {"$nope": 1})
    assert e.value.code == 168


# ---- update pipelines -------------------------------------------------------------------

def test_update_pipeline(db):
    db.u.insert_many([{"_id": 1, "a": 1, "b": 2}, {"_id": 2, "a": 5, "b": 5}])
    r = db.u.update_many({}, [{"$set": {"sum": {"$add": ["$a", "$b"]}}}, {"$unset": "b"}])
    assert r.matched_count == 2 and r.modified_count == 2
    assert list(db.u.find().sort("_id", 1)) == [{"_id": 1, "a": 1, "sum": 3},
                                                {"_id": 2, "a": 5, "sum": 10}]
    r = db.u.update_one({"_id": 1}, [{"$replaceWith": {"$mergeObjects": ["$$ROOT", {"z": 0}]}}])
    assert db.u.find_one({"_id": 1}) == {"_id": 1, "a": 1, "sum": 3, "z": 0}
    # a new root without _id keeps the document's _id
    db.u.insert_one({"_id": 7, "t": {"v": 1}})
    db.u.update_one({"_id": 7}, [{"$replaceRoot": {"newRoot": "$t"}}, {"$addFields": {"f": 1}}])
    assert db.u.find_one({"_id": 7}) == {"_id": 7, "v": 1, "f": 1}
    # a pipeline that changes nothing does not count as modified
    r = db.u.update_one({"_id": 1}, [{"$set": {"a": 1}}])
    assert r.matched_count == 1 and r.modified_count == 0
    doc = db.u.find_one_and_update({"_id": 2}, [{"$set": {"a": {"$multiply": ["$a", 2]}}}],
                                   return_document=ReturnDocument.AFTER)
    assert doc["a"] == 10
    # upsert: the pipeline runs over the seed from the query
    db.u.update_one({"_id": 9, "k": "v"}, [{"$set": {"n": {"$ifNull": ["$n", 0]}}}], upsert=True)
    assert db.u.find_one({"_id": 9}) == {"_id": 9, "k": "v", "n": 0}
    with pytest.raises(WriteError) as e:
        db.u.update_one({"_id": 1}, [{"$group": {"_id": 1}}])
    assert e.value.code == 72
    with pytest.raises(WriteError):
        db.u.update_one({"_id": 1}, [{"$set": {"_id": 99}}])


# ---- validators ------------------------------------------------------------------------

def test_validator_json_schema(db):
    db.create_collection("v", validator={"$jsonSchema": {
        "bsonType": "object", "required": ["name", "age"],
        "properties": {"name": {"bsonType": "string", "minLength": 2, "pattern": "^[A-Z]"},
                       "age": {"bsonType": "int", "minimum": 0, "maximum": 150},
                       "kind": {"enum": ["a", "b"]},
                       "tags": {"bsonType": "array", "items": {"bsonType": "string"},
                                "maxItems": 2}},
        "additionalProperties": True}})
    db.v.insert_one({"_id": 1, "name": "Ann", "age": 30, "kind": "a", "tags": ["x"]})
    for bad in [{"name": "Ann"}, {"name": "a", "age": 1}, {"name": "Ann", "age": -1},
                {"name": "Ann", "age": 1, "kind": "z"}, {"name": "Ann", "age": 1.5},
                {"name": "Ann", "age": 1, "tags": [1]}, {"name": "Ann", "age": 1,
                                                        "tags": ["a", "b", "c"]}]:
        with pytest.raises(WriteError) as e:
            db.v.insert_one(dict(bad, _id=2))
        assert e.value.code == 121
        info = e.value.details["errInfo"]
        assert info["failingDocumentId"] == 2 and "details" in info
    with pytest.raises(WriteError) as e:
        db.v.update_one({"_id": 1}, {"$set": {"age": "old"}})
    assert e.value.code == 121
    assert db.v.find_one({"_id": 1})["age"] == 30
    with pytest.raises(OperationFailure) as e:
        db.v.find_one_and_update({"_id": 1}, {"$set": {"age": "old"}})
    assert e.value.code == 121 and e.value.details["errInfo"]["failingDocumentId"] == 1
    db.v.insert_one({"_id": 3, "name": "Bob", "age": 1, "x": 1}, bypass_document_validation=True)
    db.v.insert_one({"_id": 4, "name": "b"}, bypass_document_validation=True)
    assert db.v.count_documents({}) == 3


def test_validator_query_operators_levels_actions(db):
    db.create_collection("q", validator={"qty": {"$gte": 0}, "$expr": {"$lt": ["$qty", 100]}})
    db.q.insert_one({"_id": 1, "qty": 5})
    with pytest.raises(WriteError) as e:
        db.q.insert_one({"_id": 2, "qty": 500})
    assert e.value.code == 121
    db.create_collection("w", validator={"qty": {"$gte": 0}}, validationAction="warn")
    db.w.insert_one({"_id": 1, "qty": -1})
    assert db.w.count_documents({}) == 1
    db.create_collection("off", validator={"qty": {"$gte": 0}}, validationLevel="off")
    db.off.insert_one({"_id": 1, "qty": -1})
    # moderate: documents that were already invalid may be updated
    db.create_collection("m", validator={"qty": {"$gte": 0}}, validationLevel="moderate")
    db.m.insert_one({"_id": 1, "qty": -5}, bypass_document_validation=True)
    db.m.update_one({"_id": 1}, {"$set": {"qty": -6}})
    assert db.m.find_one({"_id": 1})["qty"] == -6
    db.m.insert_one({"_id": 2, "qty": 1})
    with pytest.raises(WriteError):
        db.m.update_one({"_id": 2}, {"$set": {"qty": -1}})
    with pytest.raises(OperationFailure):
        db.create_collection("bad", validator={"$jsonSchema": {"bsonType": "nope"}})
    opts = db.q.options()
    assert opts["validator"]["qty"] == {"$gte": 0}
