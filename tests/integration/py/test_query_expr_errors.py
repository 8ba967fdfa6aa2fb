"""
A filter's $expr that raises an error while it is evaluated (a division by
zero, a $toInt of a string that is no number) fails the operation with the
expression's error, as mongod 7.0's does: find (first batch and getMore),
count, distinct, findAndModify, aggregate's $match, delete and update (a
write error) -- on a collection scan, an _id lookup and an index scan.
A document the expression evaluates without error still matches as before.
As mongod reads one document at a time, the error belongs to the batch that
reaches the failing document: a find whose first batch ends before it
answers, and the getMore that reaches it fails.  A collection validator
whose $expr raises an error rejects the document with 121
DocumentValidationFailure, the error in errInfo (mongod 7.0).
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


def errors_after(db, coll_name, n_ok):
    """n_ok documents that evaluate, then one that raises (a: 0), then more."""
    db[coll_name].insert_many([{"_id": i, "k": i, "a": 1} for i in range(1, n_ok + 3)])
    db[coll_name].update_one({"_id": n_ok + 1}, {"$set": {"a": 0}})
    return {"$expr": {"$gt": [{"$divide": [10, "$a"]}, 0]}}


@pytest.mark.parametrize("how", [{}, {"hint": {"_id": 1}}, {"sort": {"_id": 1}},
                                 {"hint": "k_1"}, {"sort": {"k": 1}}])
def test_error_just_past_the_first_batch_comes_from_the_getmore(db, how):
    """On a collection scan, the _id index and a secondary index (a sort an
    index gives is no blocking sort)."""
    f = errors_after(db, "late", 2)
    db.late.create_index("k")
    r = db.command("find", "late", filter=f, batchSize=2, **how)
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == [1, 2]
    assert r["cursor"]["id"] != 0
    with pytest.raises(OperationFailure) as ei:
        db.command("getMore", r["cursor"]["id"], collection="late", batchSize=2)
    assert ei.value.code == 2 and "divide by zero" in str(ei.value)
    # the failed getMore ended the cursor
    with pytest.raises(OperationFailure) as ei:
        db.command("getMore", r["cursor"]["id"], collection="late")
    assert ei.value.code == 43  # CursorNotFound


def test_a_getmore_that_fills_its_batch_before_the_error_answers(db):
    f = errors_after(db, "later", 3)
    r = db.command("find", "later", filter=f, batchSize=1)
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == [1]
    r = db.command("getMore", r["cursor"]["id"], collection="later", batchSize=2)
    assert [d["_id"] for d in r["cursor"]["nextBatch"]] == [2, 3] and r["cursor"]["id"] != 0
    with pytest.raises(OperationFailure) as ei:
        db.command("getMore", r["cursor"]["id"], collection="later")
    assert ei.value.code == 2
    # a driver sees the first batch, then the error from the getMore that reaches
    # the failing document (that getMore's batch, [3], is not answered)
    got = []
    with pytest.raises(OperationFailure) as ei:
        for d in db.later.find(f, batch_size=2):
            got.append(d["_id"])
    assert got == [1, 2] and ei.value.code == 2


def test_error_inside_the_first_batch_or_before_a_blocking_sort_fails_the_find(db):
    f = errors_after(db, "early", 1)
    e = failure(lambda: db.command("find", "early", filter=f, batchSize=2))
    assert e.code == 2
    # a sort on a field no index has reads every match before the first batch
    db.early.insert_many([{"_id": i, "a": 1} for i in range(10, 20)])
    e = failure(lambda: db.command("find", "early", filter=f, sort={"a": -1}, batchSize=1))
    assert e.code == 2


def test_validator_expr_error_is_a_validation_failure(db):
    v = {"$expr": {"$gt": [{"$divide": [10, "$a"]}, 0]}}
    db.create_collection("val", validator=v)
    db.val.insert_one({"_id": 1, "a": 5})
    with pytest.raises(WriteError) as ei:
        db.val.insert_one({"_id": 2, "a": 0})
    assert ei.value.code == 121, ei.value.details
    info = ei.value.details["errInfo"]
    assert info["failingDocumentId"] == 2
    assert info["details"] == {
        "operatorName": "$expr", "specifiedAs": v,
        "reason": "failed to evaluate aggregation expression",
        "details": {"code": 2, "codeName": "BadValue", "errmsg": "can't $divide by zero"}}
    with pytest.raises(WriteError) as ei:
        db.val.update_one({"_id": 1}, {"$set": {"a": 0}})
    assert ei.value.code == 121
    # a document that evaluates to false: the usual reason
    with pytest.raises(WriteError) as ei:
        db.val.insert_one({"_id": 3, "a": -1})
    assert ei.value.details["errInfo"]["details"]["reason"] == "expression did not match"
    # warn: the write goes in
    db.command("collMod", "val", validationAction="warn")
    db.val.insert_one({"_id": 4, "a": 0})
    assert sorted(d["_id"] for d in db.val.find()) == [1, 4]


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
    # as mongod's multi-update (SERVER-8537): a document matched before the one
    # that fails (_id 1, s "1") stays updated
    assert [d["_id"] for d in coll.find({"x": 1})] == [1]
    e = failure(lambda: coll.find_one_and_update(DIV0, {"$set": {"x": 1}}))
    assert e.code == 2
    # Nothing pending leaks into the next command on the connection.
    assert coll.count_documents({"a": {"$gte": 0}}) == 6
