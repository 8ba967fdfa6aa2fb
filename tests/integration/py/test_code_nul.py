"""
Code and code-with-scope values holding a NUL byte (valid BSON: the length
is stored) come back whole from every path that copies a stored value: find
and its projections, aggregation stages and accumulators, findAndModify,
distinct and change stream events.  libbson's bson_append_value and
bson_append_iter cut such a value at the NUL; src/ copies values through
sbl_append_value / sbl_append_iter (src/doc/doc.h) instead.  The router's
copies: test_router_aggregate.py::test_code_with_nul_through_router.
"""

import pytest
from bson.code import Code
from pymongo import ReturnDocument

from sabled import one_member_set

C = Code("a\x00b")
W = Code("x\x00y", {"s": 1})


@pytest.fixture(scope="module")
def rs1():
    with one_member_set(["--oplogSizeMB", "1"]) as (_, c):
        yield c


@pytest.fixture
def coll(rs1, request):
    name = "cn_" + request.node.name[5:40]
    rs1.drop_database(name)
    c = rs1[name].t
    c.insert_one({"_id": 1, "c": C, "w": W, "arr": [C, {"in": W}]})
    return c


def same(v, want):
    # Code compares as str: check the scope too
    assert v == want and isinstance(v, Code) and v.scope == want.scope, (v, want)


def test_find_and_projections(coll):
    d = coll.find_one({"_id": 1})
    same(d["c"], C)
    same(d["w"], W)
    same(d["arr"][0], C)
    same(d["arr"][1]["in"], W)
    d = coll.find_one({}, {"_id": 0, "c": 1, "w": 1})
    assert set(d) == {"c", "w"}
    same(d["c"], C)
    same(d["w"], W)
    d = coll.find_one({}, {"arr": {"$slice": 1}})
    assert len(d["arr"]) == 1
    same(d["arr"][0], C)
    d = coll.find_one({"c": C}, {"arr": {"$elemMatch": {"in": W}}})
    same(d["arr"][0]["in"], W)


def test_aggregation_stages(coll):
    d = next(coll.aggregate([{"$project": {"c": 1, "w": 1}}]))
    same(d["c"], C)
    same(d["w"], W)
    d = next(coll.aggregate([{"$addFields": {"d": "$c", "e": "$w", "f": {"$arrayElemAt":
                                                                          ["$arr", 0]}}}]))
    same(d["d"], C)
    same(d["e"], W)
    same(d["f"], C)
    same(d["c"], C)
    d = next(coll.aggregate([{"$group": {"_id": "$c", "first": {"$first": "$c"},
                                         "all": {"$push": "$w"}, "top": {"$max": "$c"}}}]))
    same(d["_id"], C)
    same(d["first"], C)
    same(d["all"][0], W)
    same(d["top"], C)
    d = next(coll.aggregate([{"$unwind": "$arr"}, {"$replaceWith": {"v": "$arr"}}]))
    same(d["v"], C)
    d = next(coll.aggregate([{"$lookup": {"from": "t", "localField": "c", "foreignField": "c",
                                          "as": "m"}}]))
    same(d["m"][0]["c"], C)
    same(d["m"][0]["w"], W)
    d = next(coll.aggregate([{"$facet": {"x": [{"$project": {"w": 1}}]}}]))
    same(d["x"][0]["w"], W)


def test_find_and_modify_and_distinct(coll):
    d = coll.find_one_and_update({"_id": 1}, {"$set": {"n": 1}},
                                 return_document=ReturnDocument.AFTER)
    same(d["c"], C)
    same(d["w"], W)
    d = coll.find_one_and_update({"_id": 1}, {"$set": {"n": 2}}, projection={"c": 1})
    same(d["c"], C)
    vals = coll.distinct("c")
    assert len(vals) == 1
    same(vals[0], C)


def test_change_stream_events(coll):
    with coll.watch(full_document="updateLookup") as cs:
        coll.insert_one({"_id": 2, "c": C})
        coll.update_one({"_id": 1}, {"$set": {"u": W}})
        ev = cs.next()
        same(ev["fullDocument"]["c"], C)
        ev = cs.next()
        same(ev["updateDescription"]["updatedFields"]["u"], W)
        same(ev["fullDocument"]["c"], C)
