"""
A filter's $expr that raises an error while it is evaluated (a division by
zero, a $toInt of a string that is no number) fails the operation with the
expression's error, as mongod 7.0's does: find (first batch and getMore),
count, distinct, findAndModify, aggregate's $match, delete and update (a
write error) -- on a collection scan, an _id lookup and an index scan.
A document the expression evaluates without error still matches as before.
"""

import pytest
from pymongo.errors import OperationFailure, WriteError

DIV0 = {"$expr": {"$eq": [{"$divide": [10, "$a"]}, 1]}}  # "can't $divide by zero", code 2
TOINT = {"$expr": {"$eq": [{"$toInt": "$s"}, 1]}}  # ConversionFailure, code 241


@pytest.fixture
def coll(db):
    db.c.insert_many([{"_id": i, "a": i, "s": str(i)} for i in range(1, 6)] +
                     [{"_id": 6, "a": 0, "s": "six"}])
    return db.c


def failure(fn):
    with pytest.raises(OperationFailure) as ei:
        fn()
    return ei.value


def test_find_fails_with_the_expression_error(coll):
    e = failure(lambda: list(coll.find(DIV0)))
    assert e.code == 2 and "divide by zero" in str(e), e.details
    e = failure(lambda: list(coll.find(TOINT)))
    assert e.code == 241 and e.details["codeName"] == "ConversionFailure", e.details


def test_documents_that_evaluate_still_match(coll):
    coll.delete_one({"_id": 6})
    assert [d["_id"] for d in coll.find(DIV0)] == []
    assert [d["_id"] for d in coll.find({"$expr": {"$eq": [{"$divide": [10, "$a"]}, 5]}})] == [2]
    assert [d["_id"] for d in coll.find(TOINT)] == [1]
    # The failing document is not reached when another conjunct already rules it out.
    coll.insert_one({"_id": 6, "a": 0, "s": "six"})
    assert [d["_id"] for d in coll.find({"_id": 2, **DIV0})] == []


def test_id_lookup_and_index_scan_fail_too(coll):
    e = failure(lambda: list(coll.find({"_id": 6, **DIV0})))
    assert e.code == 2
    coll.create_index("a")
    e = failure(lambda: list(coll.find({"a": {"$lte": 0}, **DIV0}).hint("a_1")))
    assert e.code == 2
    e = failure(lambda: list(coll.find({"a": {"$gte": 0}, **DIV0}).sort("a", 1)))
    assert e.code == 2


def test_getmore_fails_when_the_error_comes_later(db):
    db.big.insert_many([{"_id": i, "a": 1} for i in range(1, 301)] + [{"_id": 301, "a": 0}])
    cur = db.big.find({"$expr": {"$gt": [{"$divide": [10, "$a"]}, 0]}}, batch_size=2)
    got = []
    with pytest.raises(OperationFailure) as ei:
        for d in cur:
            got.append(d["_id"])
    assert ei.value.code == 2
    assert len(got) < 301


def test_count_distinct_and_aggregate_fail(coll):
    e = failure(lambda: coll.database.command("count", "c", query=DIV0))
    assert e.code == 2
    e = failure(lambda: coll.count_documents(DIV0))
    assert e.code == 2
    e = failure(lambda: coll.distinct("a", DIV0))
    assert e.code == 2
    e = failure(lambda: list(coll.aggregate([{"$match": TOINT}])))
    assert e.code == 241
    e = failure(lambda: list(coll.aggregate([{"$set": {"z": 1}}, {"$match": DIV0}])))
    assert e.code == 2


def test_writes_fail_with_a_write_error(coll):
    with pytest.raises(WriteError) as ei:
        coll.delete_many(DIV0)
    assert ei.value.code == 2
    with pytest.raises(WriteError) as ei:
        coll.update_many(TOINT, {"$set": {"x": 1}})
    assert ei.value.code == 241
    assert coll.count_documents({}) == 6
    assert coll.count_documents({"x": 1}) == 0
    e = failure(lambda: coll.find_one_and_update(DIV0, {"$set": {"x": 1}}))
    assert e.code == 2
    # Nothing pending leaks into the next command on the connection.
    assert coll.count_documents({"a": {"$gte": 0}}) == 6
