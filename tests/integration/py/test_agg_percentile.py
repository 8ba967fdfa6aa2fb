"""
$percentile and $median (MongoDB 7.0) against one standalone server: as
$group accumulators, $setWindowFields functions and expressions.  Expected
values are the discrete percentiles mongod defines (the sample of 0-based
rank ceil(p * n) - 1 among the sorted numbers), which is what 7.0's
"approximate" method answers for inputs this small; the manual's own
examples (testScores) give the values it shows.  Bad specifications get
mongod 7.0's codes.
"""

import math
import random

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from pymongo.errors import OperationFailure

from checks import agg, code_of


def discrete(values, p):
    """mongod's discrete percentile of the numbers in values."""
    s = sorted(v for v in values if not (isinstance(v, float) and math.isnan(v)))
    if not s:
        return None
    rank = len(s) - 1 if p >= 1 else max(0, math.ceil(len(s) * p) - 1)
    return float(s[rank])


@pytest.fixture
def scores(db):
    # The manual's testScores example.
    db.scores.insert_many([
        {"studentId": "2345", "test01": 62, "test02": 81, "test03": 80},
        {"studentId": "2356", "test01": 60, "test02": 83, "test03": 79},
        {"studentId": "2358", "test01": 67, "test02": 82, "test03": 78},
        {"studentId": "2367", "test01": 64, "test02": 72, "test03": 77},
        {"studentId": "2369", "test01": 60, "test02": 53, "test03": 72}])
    return db.scores


def test_group_manual_examples(scores):
    r = agg(scores, [{"$group": {
        "_id": None,
        "test01_percentiles": {"$percentile": {"input": "$test01", "p": [0.95],
                                               "method": "approximate"}},
        "test01_median": {"$median": {"input": "$test01", "method": "approximate"}}}}])
    assert r == [{"_id": None, "test01_percentiles": [67.0], "test01_median": 62.0}]
    r = agg(scores, [{"$group": {
        "_id": None,
        "test01": {"$percentile": {"input": "$test01", "p": [0.5, 0.75, 0.9, 0.95],
                                   "method": "approximate"}},
        "test02": {"$percentile": {"input": "$test02", "p": [0.5, 0.75, 0.9, 0.95],
                                   "method": "approximate"}}}}])
    assert r[0]["test01"] == [62.0, 64.0, 67.0, 67.0]
    assert r[0]["test02"] == [81.0, 82.0, 83.0, 83.0]


def test_group_ignores_non_numbers_and_gives_null_without_numbers(db):
    db.c.insert_many([
        {"g": 1, "v": 10}, {"g": 1, "v": "x"}, {"g": 1, "v": None}, {"g": 1},
        {"g": 1, "v": Int64(30)}, {"g": 1, "v": 20.5}, {"g": 1, "v": Decimal128("5")},
        {"g": 1, "v": [1, 2]}, {"g": 1, "v": float("nan")},
        {"g": 2, "v": "only strings"}, {"g": 2}])
    r = agg(db.c, [
        {"$group": {"_id": "$g",
                    "p": {"$percentile": {"input": "$v", "p": [0, 0.25, 0.5, 1],
                                          "method": "approximate"}},
                    "m": {"$median": {"input": "$v", "method": "approximate"}}}},
        {"$sort": {"_id": 1}}])
    # group 1's numbers: 5, 10, 20.5, 30 (the array, NaN and the rest are not)
    assert r[0] == {"_id": 1, "p": [5.0, 5.0, 10.0, 30.0], "m": 10.0}
    assert all(isinstance(x, float) for x in r[0]["p"])
    assert r[1] == {"_id": 2, "p": [None, None, None, None], "m": None}


def test_group_matches_discrete_definition_on_random_data(db):
    rnd = random.Random(28)
    docs = [{"g": i % 3, "v": rnd.choice([rnd.randint(-50, 50), rnd.random() * 100,
                                          Int64(rnd.randint(0, 9))])}
            for i in range(300)]
    db.c.insert_many(docs)
    ps = [0, 0.01, 0.1, 0.33, 0.5, 0.66, 0.9, 0.999, 1]
    r = agg(db.c, [{"$group": {"_id": "$g",
                               "p": {"$percentile": {"input": "$v", "p": ps,
                                                     "method": "approximate"}},
                               "m": {"$median": {"input": "$v", "method": "approximate"}}}}])
    assert len(r) == 3
    for g in r:
        vals = [d["v"] for d in docs if d["g"] == g["_id"]]
        assert g["p"] == [discrete(vals, p) for p in ps]
        assert g["m"] == discrete(vals, 0.5)


def test_group_spills_and_keeps_the_answer(db):
    db.c.insert_many([{"g": i % 50, "v": (i * 7919) % 1000} for i in range(3000)])
    pipeline = [{"$group": {"_id": "$g",
                            "p": {"$percentile": {"input": "$v", "p": [0.1, 0.9],
                                                  "method": "approximate"}}}},
                {"$sort": {"_id": 1}}]
    in_memory = agg(db.c, pipeline)
    old = db.client.admin.command("setParameter", 1,
                                  internalDocumentSourceGroupMaxMemoryBytes=20000)["was"]
    try:
        with pytest.raises(OperationFailure) as ei:
            agg(db.c, pipeline, allowDiskUse=False)
        assert ei.value.code == 292
        spilled = agg(db.c, pipeline, allowDiskUse=True)
    finally:
        db.client.admin.command("setParameter", 1,
                                internalDocumentSourceGroupMaxMemoryBytes=old)
    assert spilled == in_memory
    for g in in_memory:
        vals = [(i * 7919) % 1000 for i in range(3000) if i % 50 == g["_id"]]
        assert g["p"] == [discrete(vals, 0.1), discrete(vals, 0.9)]


def test_window_functions(db):
    db.c.insert_many([{"_id": i, "part": i % 2, "v": v}
                      for i, v in enumerate([5, 1, 9, 3, "x", 7, 2, 8, 6, 4])])
    r = agg(db.c, [
        {"$setWindowFields": {
            "partitionBy": "$part", "sortBy": {"_id": 1},
            "output": {
                "all": {"$median": {"input": "$v", "method": "approximate"}},
                "run": {"$percentile": {"input": "$v", "p": [0.5, 1], "method": "approximate"},
                        "window": {"documents": ["unbounded", "current"]}},
                "mov": {"$median": {"input": "$v", "method": "approximate"},
                        "window": {"documents": [-1, 1]}}}}},
        {"$sort": {"_id": 1}}])
    by_part = {0: [], 1: []}
    for d in sorted(db.c.find(), key=lambda d: d["_id"]):
        by_part[d["part"]].append(d)
    for part, ds in by_part.items():
        vals = [d["v"] for d in ds if not isinstance(d["v"], str)]
        for i, d in enumerate(ds):
            out = r[d["_id"]]
            assert out["all"] == discrete(vals, 0.5)
            upto = [x["v"] for x in ds[:i + 1] if not isinstance(x["v"], str)]
            assert out["run"] == [discrete(upto, 0.5), discrete(upto, 1)]
            near = [x["v"] for x in ds[max(0, i - 1):i + 2] if not isinstance(x["v"], str)]
            assert out["mov"] == discrete(near, 0.5)


def test_window_without_numbers_is_null(db):
    db.c.insert_many([{"_id": 1, "v": "a"}, {"_id": 2}])
    r = agg(db.c, [{"$setWindowFields": {"sortBy": {"_id": 1}, "output": {
        "p": {"$percentile": {"input": "$v", "p": [0.5, 0.9], "method": "approximate"}},
        "m": {"$median": {"input": "$v", "method": "approximate"}}}}}])
    assert [(d["p"], d["m"]) for d in r] == [([None, None], None)] * 2


def test_expressions(scores):
    r = agg(scores, [
        {"$project": {"_id": 0, "studentId": 1,
                      "p": {"$percentile": {"input": ["$test01", "$test02", "$test03"],
                                            "p": [0.5, 0.95], "method": "approximate"}},
                      "m": {"$median": {"input": ["$test01", "$test02", "$test03"],
                                        "method": "approximate"}}}},
        {"$sort": {"studentId": 1}}])
    assert r[0] == {"studentId": "2345", "p": [80.0, 81.0], "m": 80.0}
    assert r[4] == {"studentId": "2369", "p": [60.0, 72.0], "m": 60.0}
    one = scores.database.one
    one.insert_one({"a": [3, "x", None, 1, 2, 4], "n": 7, "s": "str", "e": []})
    r = agg(one, [{"$project": {
        "_id": 0,
        "arr": {"$percentile": {"input": "$a", "p": [0, 0.5, 1], "method": "approximate"}},
        "num": {"$percentile": {"input": "$n", "p": [0.1, 0.9], "method": "approximate"}},
        "str": {"$median": {"input": "$s", "method": "approximate"}},
        "empty": {"$percentile": {"input": "$e", "p": [0.5], "method": "approximate"}},
        "missing": {"$median": {"input": "$nope", "method": "approximate"}},
        "lit": {"$median": {"input": {"$literal": [10, 20, 30, 40]}, "method": "approximate"}}}}])
    assert r == [{"arr": [1.0, 2.0, 4.0], "num": [7.0, 7.0], "str": None, "empty": [None],
                  "missing": None, "lit": 20.0}]


GROUP = lambda acc: [{"$group": {"_id": None, "x": acc}}]
EXPR = lambda acc: [{"$project": {"x": acc}}]
WINDOW = lambda acc: [{"$setWindowFields": {"output": {"x": acc}}}]


@pytest.mark.parametrize("pipeline,code", [
    (GROUP({"$percentile": 5}), 7429703),
    (GROUP({"$median": "x"}), 7436100),
    (EXPR({"$percentile": [1]}), 7436200),
    (EXPR({"$median": 1}), 7436201),
    (WINDOW({"$percentile": 1}), 7429703),
    (GROUP({"$percentile": {"input": "$v", "p": [0.5], "method": "continuous"}}), 2),
    (GROUP({"$median": {"input": "$v", "method": "discrete"}}), 2),
    (EXPR({"$median": {"input": "$v", "method": 1}}), 14),
    (GROUP({"$percentile": {"input": "$v", "p": [0.5]}}), 40414),
    (GROUP({"$percentile": {"p": [0.5], "method": "approximate"}}), 40414),
    (GROUP({"$percentile": {"input": "$v", "method": "approximate"}}), 40414),
    (GROUP({"$median": {"input": "$v", "p": [0.5], "method": "approximate"}}), 40415),
    (GROUP({"$percentile": {"input": "$v", "p": [0.5], "method": "approximate", "x": 1}}),
     40415),
    (GROUP({"$percentile": {"input": "$v", "p": "$ps", "method": "approximate"}}), 7750300),
    (GROUP({"$percentile": {"input": "$v", "p": 0.5, "method": "approximate"}}), 7750301),
    (GROUP({"$percentile": {"input": "$v", "p": [], "method": "approximate"}}), 7750301),
    (EXPR({"$percentile": {"input": "$v", "p": ["a"], "method": "approximate"}}), 7750302),
    (GROUP({"$percentile": {"input": "$v", "p": [1.5], "method": "approximate"}}), 7750303),
    (WINDOW({"$percentile": {"input": "$v", "p": [-0.1], "method": "approximate"}}), 7750303),
])
def test_errors(db, pipeline, code):
    db.c.insert_one({"v": 1})
    assert code_of(lambda: agg(db.c, pipeline)) == code
