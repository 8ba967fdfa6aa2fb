"""
find's showRecordId and {$meta: "recordId"}: every result carries a $recordId
(an int64, the same for a document on every read, distinct between documents),
through getMore, on the _id fast path, with $natural hints and projections;
and collectionUUID on commands that name a collection (CollectionUUIDMismatch,
361, with mongod's db / collectionUUID / expectedCollection / actualCollection).
"""

import uuid

import pytest
from bson.binary import Binary, UUID_SUBTYPE
from bson.int64 import Int64
from pymongo.errors import OperationFailure


def batch(db, **kw):
    cmd = {"find": "c"}
    cmd.update(kw)
    return db.command(cmd)["cursor"]["firstBatch"]


def test_show_record_id(db):
    db.c.insert_many([{"_id": i, "a": i % 3} for i in range(7)])
    docs = list(db.c.find({}, batch_size=2, show_record_id=True).sort("_id", 1))
    assert [d["_id"] for d in docs] == list(range(7))
    rids = [d["$recordId"] for d in docs]
    assert all(isinstance(r, Int64) and r > 0 for r in rids)
    assert len(set(rids)) == 7
    assert list(docs[0].keys()) == ["_id", "a", "$recordId"]  # at the end, as mongod
    # stable: the _id fast path, a $natural scan and a projection give the same ids
    by_id = {d["_id"]: d["$recordId"] for d in docs}
    assert batch(db, filter={"_id": 3}, showRecordId=True)[0]["$recordId"] == by_id[3]
    nat = batch(db, hint={"$natural": 1}, showRecordId=True)
    assert {d["_id"]: d["$recordId"] for d in nat} == by_id
    proj = batch(db, filter={"a": 1}, projection={"_id": 0, "a": 1}, showRecordId=True)
    assert sorted(d["$recordId"] for d in proj) == sorted(by_id[i] for i in (1, 4))
    assert all(list(d.keys()) == ["a", "$recordId"] for d in proj)
    # {$meta: "recordId"} in a projection, and none without showRecordId
    meta = batch(db, filter={"_id": 5}, projection={"a": 1, "r": {"$meta": "recordId"}})
    assert meta == [{"_id": 5, "a": 2, "r": by_id[5]}]
    assert "$recordId" not in batch(db, filter={"_id": 5}, showRecordId=False)[0]
    # an update keeps the record id; explain still answers
    db.c.update_one({"_id": 5}, {"$set": {"b": 1}})
    assert batch(db, filter={"_id": 5}, showRecordId=True)[0]["$recordId"] == by_id[5]
    exp = db.command("explain", {"find": "c", "filter": {}, "showRecordId": True})
    assert exp["ok"] == 1.0
    with pytest.raises(OperationFailure) as e:
        batch(db, showRecordId=1)
    assert e.value.code == 14


def coll_uuid(db, name):
    for c in db.command("listCollections")["cursor"]["firstBatch"]:
        if c["name"] == name:
            return c["info"]["uuid"]
    return None


def test_collection_uuid(db):
    db.c.insert_one({"_id": 1, "x": 1})
    db.d.insert_one({"_id": 2})
    u, ud = coll_uuid(db, "c"), coll_uuid(db, "d")
    ub = Binary(u.bytes, UUID_SUBTYPE)
    # the right UUID: each command runs
    assert batch(db, collectionUUID=ub) == [{"_id": 1, "x": 1}]
    db.command("insert", "c", documents=[{"_id": 3}], collectionUUID=ub)
    db.command("update", "c", updates=[{"q": {"_id": 3}, "u": {"$set": {"x": 3}}}],
               collectionUUID=ub)
    assert db.command("count", "c", collectionUUID=ub)["n"] == 2
    assert sorted(db.command("distinct", "c", key="x", collectionUUID=ub)["values"]) == [1, 3]
    db.command("aggregate", "c", pipeline=[], cursor={}, collectionUUID=ub)
    db.command("createIndexes", "c", indexes=[{"key": {"x": 1}, "name": "x_1"}],
               collectionUUID=ub)
    db.command("delete", "c", deletes=[{"q": {"_id": 3}, "limit": 1}], collectionUUID=ub)
    # another collection's UUID: 361 with where that UUID really is
    udb = Binary(ud.bytes, UUID_SUBTYPE)
    cmds = [{"find": "c"}, {"insert": "c", "documents": [{"_id": 9}]},
            {"update": "c", "updates": [{"q": {}, "u": {"$set": {"y": 1}}}]},
            {"delete": "c", "deletes": [{"q": {}, "limit": 0}]}, {"count": "c"},
            {"distinct": "c", "key": "x"}, {"aggregate": "c", "pipeline": [], "cursor": {}},
            {"findAndModify": "c", "query": {}, "remove": True},
            {"createIndexes": "c", "indexes": [{"key": {"y": 1}, "name": "y_1"}]},
            {"dropIndexes": "c", "index": "x_1"}, {"drop": "c"}, {"collMod": "c"}]
    for cmd in cmds:
        cmd["collectionUUID"] = udb
        with pytest.raises(OperationFailure) as e:
            db.command(cmd)
        d = e.value.details
        assert (d["code"], d["codeName"]) == (361, "CollectionUUIDMismatch"), cmd
        assert d["db"] == db.name and d["collectionUUID"] == ud
        assert d["expectedCollection"] == "c" and d["actualCollection"] == "d"
    assert db.c.count_documents({}) == 1 and db.c.find_one({"y": 1}) is None
    assert "x_1" in db.c.index_information()
    # a UUID no collection has, and a collection that does not exist
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", collectionUUID=Binary(uuid.uuid4().bytes, UUID_SUBTYPE))
    assert e.value.code == 361 and e.value.details["actualCollection"] is None
    with pytest.raises(OperationFailure) as e:
        db.command("insert", "nosuch", documents=[{}], collectionUUID=ub)
    assert e.value.code == 361 and e.value.details["actualCollection"] == "c"
    assert "nosuch" not in db.list_collection_names()
    with pytest.raises(OperationFailure) as e:
        db.command("find", "c", collectionUUID="not a uuid")
    assert e.value.code == 14
