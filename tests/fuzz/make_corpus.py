#!/usr/bin/python3
"""
make_corpus.py: write the seed corpora in tests/fuzz/corpus/<target>/.
Each seed is a small file in the layout its target reads (see fuzz_*.c):
wire messages for fuzz_wire, one document for fuzz_bson and fuzz_agg,
documents back to back for fuzz_match and fuzz_update.  Re-running it
rewrites the same files (names are content hashes).
"""

import hashlib
import os
import struct
import zlib

import bson
from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.son import SON
import datetime

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

VALUES = [1, -1, 0, 2 ** 31 - 1, Int64(2 ** 53 + 1), 1.5, float("nan"), float("-inf"), -0.0,
          Decimal128("1.5"), Decimal128("-Infinity"), "", "abc", "caf\u00e9", None, True, False,
          MinKey(), MaxKey(), ObjectId("5f0000000000000000000001"), Binary(b"\x00\x01", 0),
          Binary(b"x" * 16, 4), datetime.datetime(2020, 1, 1), Timestamp(1, 2),
          Regex("^a.*", "i"), Code("function(){}"), [], [1, [2, [3]]], {"a": {"b": 1}},
          SON([("x", 1), ("y", [1, "a"])])]


def enc(d):
    return bson.BSON.encode(d if isinstance(d, (dict, SON)) else {"v": d})


def write(target, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


def op_msg(cmd, flags=0, seq=None, request_id=1):
    body = b"\x00" + enc(cmd)
    if seq is not None:
        name, docs = seq
        payload = name.encode() + b"\x00" + b"".join(enc(x) for x in docs)
        body += b"\x01" + struct.pack("<i", 4 + len(payload)) + payload
    h = struct.pack("<iiii", 16 + 4 + len(body), request_id, 0, 2013)
    return h + struct.pack("<I", flags) + body


def op_query(cmd, coll=b"admin.$cmd"):
    body = struct.pack("<i", 0) + coll + b"\x00" + struct.pack("<ii", 0, -1) + enc(cmd)
    return struct.pack("<iiii", 16 + len(body), 7, 0, 2004) + body


def op_compressed(msg, comp=2):
    inner_op = struct.unpack("<i", msg[12:16])[0]
    raw = msg[16:]
    data = zlib.compress(raw) if comp == 2 else raw
    body = struct.pack("<iiB", inner_op, len(raw), comp) + data
    return struct.pack("<iiii", 16 + len(body), 9, 0, 2012) + body


def wire():
    write("fuzz_wire", op_msg(SON([("hello", 1), ("$db", "admin")])))
    write("fuzz_wire", op_msg(SON([("insert", "c"), ("$db", "t")]),
                              seq=("documents", [{"_id": 1}, {"_id": 2, "a": "x"}])))
    write("fuzz_wire", op_msg(SON([("ping", 1), ("$db", "admin")]), flags=2))
    m = op_msg(SON([("ping", 1), ("$db", "admin")]), flags=1)
    write("fuzz_wire", m + b"\x00\x00\x00\x00")
    write("fuzz_wire", op_query(SON([("isMaster", 1), ("client", {"driver": {"name": "x"}})])))
    write("fuzz_wire", op_query(SON([("$query", {"ping": 1}), ("$readPreference", {"mode": "primary"})])))
    write("fuzz_wire", op_compressed(op_msg(SON([("find", "c"), ("filter", {"a": 1}), ("$db", "t")]))))
    write("fuzz_wire", op_compressed(op_msg(SON([("ping", 1), ("$db", "a")])), comp=0))
    write("fuzz_wire", struct.pack("<iiii", 16, 1, 0, 2013))


def docs():
    for v in VALUES:
        write("fuzz_bson", enc(v))
    write("fuzz_bson", enc(SON([("a%d" % i, v) for i, v in enumerate(VALUES)])))
    write("fuzz_bson", enc({"a": [1, 1.0, Int64(1), Decimal128("1"), "1", None]}))


FILTERS = [{}, {"a": 1}, {"a": {"$gt": 1, "$lt": 5}}, {"a.b": {"$in": [1, "x", None]}},
           {"$or": [{"a": 1}, {"b": {"$exists": False}}]}, {"a": {"$elemMatch": {"b": 1}}},
           {"a": {"$regex": "^x", "$options": "i"}}, {"a": {"$type": "number"}},
           {"$and": [{"a": {"$ne": 1}}, {"a": {"$nin": [2, 3]}}]}, {"a": {"$size": 2}},
           {"a": {"$all": [1, 2]}}, {"a": {"$not": {"$gt": 3}}}, {"a": {"$mod": [3, 1]}},
           {"_id": {"$gte": 2}}, {"$nor": [{"a": None}]}, {"a.0.b": 1},
           {"$expr": {"$gt": ["$a", 1]}}, {"a": {"$bitsAllSet": 3}}]
DOCS = [{"_id": 1, "a": 1}, {"_id": 2, "a": [1, 2, {"b": 1}]}, {"_id": 3, "a": {"b": [1, "x"]}},
        {"_id": 4, "a": None, "b": "xyz"}, {"_id": 5, "a": [[1, 2], {"b": None}]},
        {"_id": "s", "a": "XY", "c": 1.5}]


def match():
    for f in FILTERS:
        write("fuzz_match", enc(f) + b"".join(enc(d) for d in DOCS))


UPDATES = [{"$set": {"a": 1}}, {"$inc": {"n": 2}}, {"$unset": {"a": ""}},
           {"$push": {"t": {"$each": [1, 2], "$slice": -3, "$sort": 1}}},
           {"$pull": {"t": {"$gt": 1}}}, {"$addToSet": {"t": 5}}, {"$pop": {"t": -1}},
           {"$rename": {"a": "z"}}, {"$min": {"a": 0}}, {"$max": {"a": 10}}, {"$mul": {"a": 3}},
           {"$currentDate": {"d": True}}, {"$setOnInsert": {"x": 1}}, {"$bit": {"n": {"and": 5}}},
           {"$set": {"t.$[e]": 0}}, {"$set": {"t.$[]": 1}}, {"$set": {"a.b.c": 1}},
           {"replacement": 1, "other": [1, 2]}]
UDOCS = [{"_id": 1, "a": 1, "n": 5, "t": [1, 2, 3]}, {"_id": 2, "a": {"b": {"c": 0}}, "t": []},
         {"_id": 3, "t": [{"x": 1}, {"x": 2}]}]


def update():
    for u in UPDATES:
        filters = {"0": {"e": {"$gte": 2}}} if "$[e]" in str(u) else {}
        write("fuzz_update", enc(u) + enc(filters) + b"".join(enc(d) for d in UDOCS))


PIPELINES = [
    [{"$match": {"a": {"$gt": 0}}}, {"$sort": {"a": -1}}, {"$limit": 2}],
    [{"$group": {"_id": "$b", "n": {"$sum": 1}, "m": {"$max": "$a"}, "v": {"$push": "$_id"}}}],
    [{"$project": {"a": 1, "x": {"$add": ["$a", 1]}, "_id": 0}}],
    [{"$unwind": "$t"}, {"$count": "n"}],
    [{"$addFields": {"c": {"$concat": ["$b", "-"]}}}, {"$skip": 1}],
    [{"$sortByCount": "$b"}],
    [{"$lookup": {"from": "c", "localField": "a", "foreignField": "a", "as": "j"}}],
    [{"$facet": {"x": [{"$match": {}}], "y": [{"$count": "n"}]}}],
    [{"$bucket": {"groupBy": "$a", "boundaries": [0, 2, 10], "default": "o"}}],
    [{"$replaceRoot": {"newRoot": "$s"}}],
    [{"$set": {"y": {"$cond": [{"$eq": ["$a", 1]}, "one", "other"]}}}, {"$unset": "t"}],
    [{"$unionWith": {"coll": "c", "pipeline": [{"$match": {"a": 1}}]}}, {"$unionWith": "c"}],
    [{"$unionWith": {"pipeline": [{"$documents": [{"a": 1}]}]}}],
    [{"$graphLookup": {"from": "c", "startWith": "$a", "connectFromField": "t",
                       "connectToField": "a", "as": "g", "maxDepth": 2, "depthField": "d",
                       "restrictSearchWithMatch": {"b": "x"}}}],
    [{"$setWindowFields": {"partitionBy": "$b", "sortBy": {"a": 1}, "output": {
        "s": {"$sum": "$a", "window": {"documents": ["unbounded", "current"]}},
        "r": {"$rank": {}}, "e": {"$expMovingAvg": {"input": "$a", "N": 2}},
        "l": {"$linearFill": "$a"}, "f": {"$locf": "$b"},
        "x": {"$shift": {"output": "$a", "by": -1, "default": 0}},
        "w": {"$push": "$_id", "window": {"range": [-1, 1]}},
        "d": {"$derivative": {"input": "$a"}, "window": {"documents": [-1, 0]}},
        "i": {"$integral": {"input": "$a"}}, "c": {"$covarianceSamp": ["$a", "$a"]}}}}],
    [{"$setWindowFields": {"sortBy": {"d": 1}, "output": {"n": {
        "$count": {}, "window": {"range": [-1, "current"], "unit": "month"}}}}}],
    [{"$densify": {"field": "a", "partitionByFields": ["b"],
                   "range": {"step": 1, "bounds": "full"}}}],
    [{"$densify": {"field": "d", "range": {"step": 1, "unit": "day",
                                           "bounds": [datetime.datetime(1970, 1, 1),
                                                      datetime.datetime(1970, 1, 5)]}}}],
    [{"$fill": {"sortBy": {"a": 1}, "partitionByFields": ["b"],
                "output": {"a": {"method": "linear"}, "s": {"value": 0}, "b": {"method": "locf"}}}}],
    [{"$indexStats": {}}, {"$project": {"name": 1, "accesses.ops": 1}}],
]


def agg():
    for p in PIPELINES:
        write("fuzz_agg", enc(SON([(str(i), s) for i, s in enumerate(p)])))


if __name__ == "__main__":
    wire()
    docs()
    match()
    update()
    agg()
    for t in sorted(os.listdir(OUT)):
        print(t, len(os.listdir(os.path.join(OUT, t))))
