"""
Read-only views: create with viewOn + pipeline; find, aggregate, count,
estimated count and distinct run the view's pipeline over the source (views
on views too); writes fail with 166; listCollections shows type "view";
drop removes the view and leaves the source.
"""

import pytest
from pymongo.errors import OperationFailure


@pytest.fixture
def view(db):
    db.src.insert_many([{"_id": i, "x": i % 3, "tags": ["a", "b"] if i % 2 else ["c"]}
                        for i in range(1, 11)])
    db.command({"create": "v", "viewOn": "src", "pipeline": [{"$match": {"_id": {"$gt": 4}}},
                                                             {"$project": {"tags": 0}}]})
    return db


def test_find_runs_the_pipeline(view):
    db = view
    assert [d["_id"] for d in db.v.find()] == [5, 6, 7, 8, 9, 10]
    assert list(db.v.find({"x": 0}, sort=[("_id", -1)])) == [{"_id": 9, "x": 0}, {"_id": 6, "x": 0}]
    assert list(db.v.find({}, {"x": 0}).skip(1).limit(2)) == [{"_id": 6}, {"_id": 7}]
    # batches continue through getMore
    assert len(list(db.v.find(batch_size=2))) == 6


def test_aggregate_count_distinct(view):
    db = view
    out = list(db.v.aggregate([{"$group": {"_id": "$x", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]))
    assert out == [{"_id": 0, "n": 2}, {"_id": 1, "n": 2}, {"_id": 2, "n": 2}]
    assert db.v.count_documents({}) == 6
    assert db.v.estimated_document_count() == 6
    assert db.command("count", "v", query={"x": 1})["n"] == 2
    assert sorted(db.v.distinct("x")) == [0, 1, 2]
    assert db.v.distinct("tags") == []  # projected away by the view
    assert sorted(db.src.distinct("tags")) == ["a", "b", "c"]


def test_view_on_view(view):
    db = view
    db.command({"create": "vv", "viewOn": "v", "pipeline": [{"$match": {"x": 2}}]})
    assert [d["_id"] for d in db.vv.find()] == [5, 8]


def test_view_depth_limit(view):
    # views on views past mongod's 20 levels: 165 ViewDepthLimitExceeded (at create or read)
    db = view
    with pytest.raises(OperationFailure) as e:
        on = "v"
        for i in range(25):
            db.command({"create": "d%d" % i, "viewOn": on, "pipeline": []})
            on = "d%d" % i
        list(db[on].find())
    assert e.value.code == 165 and e.value.details["codeName"] == "ViewDepthLimitExceeded"


def test_writes_fail(view):
    db = view
    with pytest.raises(OperationFailure) as e:
        db.command({"insert": "v", "documents": [{"_id": 100}]})
    assert e.value.code == 166
    for cmd in ({"update": "v", "updates": [{"q": {}, "u": {"$set": {"y": 1}}}]},
                {"delete": "v", "deletes": [{"q": {}, "limit": 0}]},
                {"findAndModify": "v", "query": {}, "remove": True}):
        with pytest.raises(OperationFailure) as e:
            db.command(cmd)
        assert e.value.code == 166
    assert db.src.count_documents({}) == 10


def test_list_collections_and_drop(view):
    db = view
    infos = {c["name"]: c for c in db.list_collections()}
    assert infos["v"]["type"] == "view"
    assert infos["v"]["options"]["viewOn"] == "src"
    assert infos["v"]["options"]["pipeline"][0] == {"$match": {"_id": {"$gt": 4}}}
    assert infos["v"]["info"]["readOnly"] is True
    assert infos["src"]["type"] == "collection"
    db.drop_collection("v")
    assert "v" not in db.list_collection_names()
    assert db.src.count_documents({}) == 10
    # the name is free again: an ordinary collection
    db.v.insert_one({"_id": 1})
    assert list(db.v.find()) == [{"_id": 1}]


def test_bad_definitions(db):
    with pytest.raises(OperationFailure) as e:
        db.command({"create": "v", "viewOn": "src", "pipeline": [{"$out": "x"}]})
    assert e.value.code == 167
    with pytest.raises(OperationFailure) as e:
        db.command({"create": "v", "viewOn": 5})
    assert e.value.code == 14
    with pytest.raises(OperationFailure) as e:
        db.command({"create": "v", "pipeline": []})
    assert e.value.code == 2
