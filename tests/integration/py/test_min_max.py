"""
find's min()/max() (issue 29), as mongod 7.0 answers them: index keys of the
hinted index from min (inclusive) to max (exclusive), in index order, and
mongod's errors when there is no hint (51173), the bounds do not match the
index (51174) or each other (51176), max is not above min (51175), or the
hint is $natural (291).
"""

import warnings

import pytest
from pymongo.errors import OperationFailure

warnings.filterwarnings("ignore", category=DeprecationWarning)

ROWS = [{"a": 1, "b": 1}, {"a": 1, "b": 2}, {"a": 2, "b": 1}, {"a": 2, "b": 2}]


def n(cur):
    return len(list(cur))


def code_of(f):
    with pytest.raises(OperationFailure) as e:
        list(f())
    return e.value.code


def test_compound_ascending(db):
    db.c.create_index([("a", 1), ("b", 1)])
    db.c.insert_many([dict(r) for r in ROWS])
    h = [("a", 1), ("b", 1)]
    assert n(db.c.find().hint(h).min([("a", 1), ("b", 2)]).max([("a", 2), ("b", 1)])) == 1
    assert n(db.c.find().hint(h).min([("a", 1), ("b", 2)]).max([("a", 2), ("b", 1.5)])) == 2
    assert n(db.c.find().hint(h).min([("a", 1), ("b", 2)]).max([("a", 2), ("b", 2)])) == 2
    assert n(db.c.find().hint(h).min([("a", 1), ("b", 2)])) == 3
    assert n(db.c.find().hint(h).max([("a", 2), ("b", 1.5)])) == 3


def test_compound_mixed_directions(db):
    db.c.create_index([("a", 1), ("b", -1)])
    db.c.insert_many([dict(r) for r in ROWS])
    h = [("a", 1), ("b", -1)]
    assert n(db.c.find().hint(h).min([("a", 1), ("b", 2)])) == 4
    assert n(db.c.find().hint(h).max([("a", 2), ("b", 0.5)])) == 4
    assert n(db.c.find().hint(h).min([("a", 2), ("b", 1)])) == 1
    assert n(db.c.find().hint(h).max([("a", 1), ("b", 1.5)])) == 1


def test_errors(db):
    db.c.create_index([("a", 1), ("b", -1)])
    db.c.insert_many([dict(r) for r in ROWS])
    h = [("a", 1), ("b", -1)]
    assert code_of(lambda: db.c.find().min([("a", 1), ("b", 2)]).max([("a", 2), ("b", 1)])) \
        == 51173
    assert code_of(lambda: db.c.find().min([("a", 1)]).hint(h)) == 51174
    assert code_of(lambda: db.c.find().min([("a", 1), ("b", 1)]).max([("a", 1)]).hint(h)) \
        == 51176
    assert code_of(lambda: db.c.find().min([("b", 1)]).max([("a", 1), ("b", 2)]).hint(h)) \
        == 51176
    assert code_of(lambda: db.c.find().min([("a", 1)]).hint([("$natural", 1)])) == 291


def test_single_field_order_and_empty_ranges(db):
    db.c.create_index("a")
    db.c.insert_many([{"_id": i, "a": i} for i in range(10)])
    assert code_of(lambda: db.c.find().hint([("a", 1)]).min([("a", 6)]).max([("a", 3)])
                   .sort("a", -1)) == 51175
    assert code_of(lambda: db.c.find().hint([("a", 1)]).min([("a", 2)]).max([("a", 2)])) \
        == 51175
    got = [d["a"] for d in db.c.find().hint([("a", 1)]).min([("a", 3)]).max([("a", 6)])
           .sort("a", -1)]
    assert got == [5, 4, 3]
    # The filter still applies inside the range.
    got = [d["a"] for d in db.c.find({"a": {"$ne": 4}}).hint([("a", 1)]).min([("a", 3)])
           .max([("a", 6)])]
    assert got == [3, 5]


def test_descending_index_runs_in_index_order(db):
    db.c.create_index([("a", -1)])
    db.c.insert_many([{"a": 3}, {"a": 4}, {"a": 5}])
    assert [d["a"] for d in db.c.find().hint([("a", -1)]).min([("a", 4)])] == [4, 3]
    assert [d["a"] for d in db.c.find().hint([("a", -1)]).max([("a", 4)])] == [5]


def test_id_index(db):
    db.c.insert_many([{"_id": i, "a": i} for i in range(10)])
    assert [d["_id"] for d in db.c.find().hint([("_id", 1)]).min([("_id", 3)])
            .max([("_id", 6)])] == [3, 4, 5]
    assert [d["_id"] for d in db.c.find({"a": {"$gt": 4}}).hint([("_id", 1)])
            .min([("_id", 3)]).max([("_id", 7)])] == [5, 6]
    assert code_of(lambda: db.c.find().hint([("_id", 1)]).min([("a", 3)])) == 51174
