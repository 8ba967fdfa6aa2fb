"""
Writes through pymongo: inserts (ordered/unordered duplicate handling, _id
generation), every update operator, upserts, replacements, deletes and
findAndModify.
"""

import datetime

import pytest
from bson.codec_options import CodecOptions
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.son import SON
from bson.timestamp import Timestamp
from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError, DuplicateKeyError, WriteError

ORDERED = CodecOptions(document_class=SON)


# -- inserts ----------------------------------------------------------------

def test_insert_one_and_find(db):
    r = db.t.insert_one({"_id": 1, "a": "x"})
    assert r.acknowledged and r.inserted_id == 1
    assert db.t.find_one({"_id": 1}) == {"_id": 1, "a": "x"}


def test_server_generated_id_is_objectid_and_first(db):
    r = db.command({"insert": "t", "documents": [{"a": 1, "b": 2}]})
    assert r["n"] == 1
    doc = db.get_collection("t", codec_options=ORDERED).find_one({"a": 1})
    assert list(doc.keys()) == ["_id", "a", "b"]
    assert isinstance(doc["_id"], ObjectId)


def test_id_moved_first(db):
    db.command({"insert": "t", "documents": [SON([("a", 1), ("_id", 5), ("b", 2)])]})
    doc = db.get_collection("t", codec_options=ORDERED).find_one({"_id": 5})
    assert list(doc.keys()) == ["_id", "a", "b"]


def test_insert_many_ordered_stops_at_duplicate(db):
    with pytest.raises(BulkWriteError) as e:
        db.t.insert_many([{"_id": 1}, {"_id": 2}, {"_id": 1}, {"_id": 3}], ordered=True)
    d = e.value.details
    assert d["nInserted"] == 2
    assert len(d["writeErrors"]) == 1
    we = d["writeErrors"][0]
    assert we["index"] == 2
    assert we["code"] == 11000
    assert we["keyPattern"] == {"_id": 1}
    assert we["keyValue"] == {"_id": 1}
    assert "E11000 duplicate key error" in we["errmsg"]
    assert sorted(x["_id"] for x in db.t.find()) == [1, 2]


def test_insert_many_unordered_continues_after_duplicate(db):
    with pytest.raises(BulkWriteError) as e:
        db.t.insert_many([{"_id": 1}, {"_id": 2}, {"_id": 1}, {"_id": 3}], ordered=False)
    d = e.value.details
    assert d["nInserted"] == 3
    assert [(w["index"], w["code"]) for w in d["writeErrors"]] == [(2, 11000)]
    assert d["writeErrors"][0]["keyValue"] == {"_id": 1}
    assert sorted(x["_id"] for x in db.t.find()) == [1, 2, 3]


def test_insert_one_duplicate_raises_duplicate_key(db):
    db.t.insert_one({"_id": "k"})
    with pytest.raises(DuplicateKeyError) as e:
        db.t.insert_one({"_id": "k"})
    assert e.value.code == 11000
    assert e.value.details["keyValue"] == {"_id": "k"}


def test_insert_many_generates_distinct_ids(db):
    r = db.t.insert_many([{"i": i} for i in range(100)])
    assert len(set(r.inserted_ids)) == 100
    assert db.t.count_documents({}) == 100


def test_raw_insert_reply_shape(db):
    r = db.command({"insert": "t", "documents": [{"_id": 1}, {"_id": 1}], "ordered": False})
    assert r["ok"] == 1
    assert r["n"] == 1
    assert r["writeErrors"][0]["index"] == 1
    assert r["writeErrors"][0]["code"] == 11000


# -- updates ------------------------------------------------------------------

def _upd(db, doc, update, **kw):
    db.t.delete_many({})
    db.t.insert_one(doc)
    r = db.t.update_one({"_id": doc["_id"]}, update, **kw)
    assert r.matched_count == 1
    return db.t.find_one({"_id": doc["_id"]})


def test_update_one_and_many_counts(db):
    db.t.insert_many([{"_id": i, "g": i % 2} for i in range(10)])
    r = db.t.update_one({"g": 0}, {"$set": {"x": 1}})
    assert (r.matched_count, r.modified_count) == (1, 1)
    r = db.t.update_many({"g": 1}, {"$set": {"x": 1}})
    assert (r.matched_count, r.modified_count) == (5, 5)
    r = db.t.update_many({"g": 1}, {"$set": {"x": 1}})
    assert (r.matched_count, r.modified_count) == (5, 0)
    r = db.t.update_one({"g": 7}, {"$set": {"x": 1}})
    assert (r.matched_count, r.modified_count, r.upserted_id) == (0, 0, None)


def test_update_upsert_returns_upserted_id(db):
    r = db.t.update_one({"_id": "new"}, {"$set": {"a": 1}}, upsert=True)
    assert r.upserted_id == "new" and r.matched_count == 0
    assert db.t.find_one({"_id": "new"}) == {"_id": "new", "a": 1}
    r = db.t.update_one({"k": 5}, {"$set": {"a": 2}}, upsert=True)
    assert isinstance(r.upserted_id, ObjectId)
    # Equality fields of the query are part of the inserted document.
    assert db.t.find_one({"_id": r.upserted_id}) == {"_id": r.upserted_id, "k": 5, "a": 2}
    r = db.t.update_many({"m": {"$gt": 5}}, {"$set": {"a": 3}}, upsert=True)
    assert r.upserted_id is not None
    assert db.t.find_one({"_id": r.upserted_id}) == {"_id": r.upserted_id, "a": 3}


def test_replace_one_and_upsert(db):
    db.t.insert_one({"_id": 1, "a": 1, "b": 2})
    r = db.t.replace_one({"_id": 1}, {"c": 3})
    assert r.modified_count == 1
    assert db.t.find_one({"_id": 1}) == {"_id": 1, "c": 3}
    r = db.t.replace_one({"_id": 2}, {"d": 4}, upsert=True)
    assert r.upserted_id == 2
    assert db.t.find_one({"_id": 2}) == {"_id": 2, "d": 4}


def test_set_unset_nested(db):
    d = _upd(db, {"_id": 1, "a": 1, "x": {"y": 1}},
             {"$set": {"b.c.d": 5, "x.z": 2}, "$unset": {"a": ""}})
    assert d == {"_id": 1, "x": {"y": 1, "z": 2}, "b": {"c": {"d": 5}}}


def test_inc_mul(db):
    d = _upd(db, {"_id": 1, "i": 1, "f": 1.5, "l": Int64(10)},
             {"$inc": {"i": 2, "new": 3, "l": 1}, "$mul": {"f": 2, "missing": 5}})
    assert d["i"] == 3 and type(d["i"]) is int
    assert d["new"] == 3
    assert d["l"] == 11 and isinstance(d["l"], Int64)
    assert d["f"] == 3.0
    assert d["missing"] == 0


def test_min_max(db):
    d = _upd(db, {"_id": 1, "lo": 5, "hi": 5},
             {"$min": {"lo": 3, "new1": 7}, "$max": {"hi": 9, "new2": 1}})
    assert (d["lo"], d["hi"], d["new1"], d["new2"]) == (3, 9, 7, 1)
    d = _upd(db, {"_id": 1, "lo": 5, "hi": 5}, {"$min": {"lo": 8}, "$max": {"hi": 2}})
    assert (d["lo"], d["hi"]) == (5, 5)


def test_rename(db):
    d = _upd(db, {"_id": 1, "a": 1, "n": {"x": 2}}, {"$rename": {"a": "b", "n.x": "m"}})
    assert d == {"_id": 1, "n": {}, "b": 1, "m": 2}


def test_set_on_insert(db):
    db.t.update_one({"_id": 1}, {"$set": {"a": 1}, "$setOnInsert": {"created": True}},
                    upsert=True)
    assert db.t.find_one({"_id": 1}) == {"_id": 1, "a": 1, "created": True}
    db.t.update_one({"_id": 1}, {"$set": {"a": 2}, "$setOnInsert": {"other": True}},
                    upsert=True)
    assert db.t.find_one({"_id": 1}) == {"_id": 1, "a": 2, "created": True}


def test_current_date(db):
    before = datetime.datetime.utcnow() - datetime.timedelta(seconds=5)
    d = _upd(db, {"_id": 1}, {"$currentDate": {"d": True, "ts": {"$type": "timestamp"},
                                                "d2": {"$type": "date"}}})
    assert isinstance(d["d"], datetime.datetime) and d["d"] >= before
    assert isinstance(d["d2"], datetime.datetime)
    assert isinstance(d["ts"], Timestamp) and d["ts"].time >= int(before.timestamp()) - 3600 * 24


def test_push_modifiers(db):
    d = _upd(db, {"_id": 1, "a": [1, 2]}, {"$push": {"a": 3}})
    assert d["a"] == [1, 2, 3]
    d = _upd(db, {"_id": 1, "a": [1, 2]}, {"$push": {"a": {"$each": [8, 9], "$position": 0}}})
    assert d["a"] == [8, 9, 1, 2]
    d = _upd(db, {"_id": 1, "a": [1, 2, 3]}, {"$push": {"a": {"$each": [4, 5], "$slice": -3}}})
    assert d["a"] == [3, 4, 5]
    d = _upd(db, {"_id": 1, "a": [5, 1]}, {"$push": {"a": {"$each": [3], "$sort": 1}}})
    assert d["a"] == [1, 3, 5]
    d = _upd(db, {"_id": 1, "s": [{"v": 2}, {"v": 7}]},
             {"$push": {"s": {"$each": [{"v": 5}, {"v": 1}], "$sort": {"v": -1}, "$slice": 3}}})
    assert d["s"] == [{"v": 7}, {"v": 5}, {"v": 2}]
    d = _upd(db, {"_id": 1}, {"$push": {"new": "x"}})
    assert d["new"] == ["x"]


def test_add_to_set(db):
    d = _upd(db, {"_id": 1, "a": [1, 2]}, {"$addToSet": {"a": 2}})
    assert d["a"] == [1, 2]
    d = _upd(db, {"_id": 1, "a": [1, 2]}, {"$addToSet": {"a": {"$each": [2, 3, 3, 4]}}})
    assert d["a"] == [1, 2, 3, 4]


def test_pop_pull_pullall(db):
    d = _upd(db, {"_id": 1, "a": [1, 2, 3]}, {"$pop": {"a": 1}})
    assert d["a"] == [1, 2]
    d = _upd(db, {"_id": 1, "a": [1, 2, 3]}, {"$pop": {"a": -1}})
    assert d["a"] == [2, 3]
    d = _upd(db, {"_id": 1, "a": [1, 5, 6, 7, 2]}, {"$pull": {"a": {"$gte": 6}}})
    assert d["a"] == [1, 5, 2]
    d = _upd(db, {"_id": 1, "a": [{"x": 1, "y": 1}, {"x": 2}]}, {"$pull": {"a": {"x": 1}}})
    assert d["a"] == [{"x": 2}]
    d = _upd(db, {"_id": 1, "a": [1, 2, 3, 1, 4]}, {"$pullAll": {"a": [1, 4]}})
    assert d["a"] == [2, 3]


def test_positional_operators(db):
    db.t.insert_one({"_id": 1, "grades": [80, 85, 90], "items": [{"q": 1}, {"q": 5}]})
    db.t.update_one({"_id": 1, "grades": 85}, {"$set": {"grades.$": 86}})
    assert db.t.find_one()["grades"] == [80, 86, 90]
    db.t.update_one({"_id": 1, "items.q": 5}, {"$inc": {"items.$.q": 1}})
    assert db.t.find_one()["items"] == [{"q": 1}, {"q": 6}]
    db.t.update_one({"_id": 1}, {"$inc": {"grades.$[]": 10}})
    assert db.t.find_one()["grades"] == [90, 96, 100]
    db.t.update_one({"_id": 1}, {"$set": {"grades.$[g]": 0}}, array_filters=[{"g": {"$gte": 96}}])
    assert db.t.find_one()["grades"] == [90, 0, 0]
    db.t.update_one({"_id": 1}, {"$set": {"items.$[it].flag": True}},
                    array_filters=[{"it.q": {"$gt": 2}}])
    assert db.t.find_one()["items"] == [{"q": 1}, {"q": 6, "flag": True}]


def test_update_errors(db):
    db.t.insert_one({"_id": 1, "s": "str", "a": 1})
    with pytest.raises(WriteError) as e:
        db.t.update_one({"_id": 1}, {"$inc": {"s": 1}})
    assert e.value.code == 14  # TypeMismatch
    with pytest.raises(WriteError) as e:
        db.t.update_one({"_id": 1}, {"$set": {"_id": 2}})
    assert e.value.code == 66  # ImmutableField
    with pytest.raises(WriteError) as e:
        db.t.update_one({"_id": 1}, {"$set": {"a": 1}, "$inc": {"a": 1}})
    assert e.value.code == 40  # ConflictingUpdateOperators
    assert db.t.find_one({"_id": 1}) == {"_id": 1, "s": "str", "a": 1}


def test_write_flags_checked_after_unknown_fields(db):
    """ordered and bypassDocumentValidation: bool or number; a wrong type is
    reported only when no field is unknown (read in one walk with them)."""
    from pymongo.errors import OperationFailure
    for cmd, stmts in (("insert", ("documents", [{"_id": 1}])),
                       ("update", ("updates", [{"q": {"_id": 1}, "u": {"$set": {"a": 1}}}])),
                       ("delete", ("deletes", [{"q": {"_id": 1}, "limit": 1}]))):
        for field in ("ordered", "bypassDocumentValidation"):
            with pytest.raises(OperationFailure) as e:
                db.command(SON([(cmd, "t"), stmts, (field, "x")]))
            assert e.value.code == 14
            assert "BSON field '%s.%s' is the wrong type 'string'" % (cmd, field) in str(e.value)
            with pytest.raises(OperationFailure) as e:
                db.command(SON([(cmd, "t"), stmts, (field, "x"), ("bogus", 1)]))
            assert e.value.code == 40415
    r = db.command(SON([("insert", "t"), ("documents", [{"_id": 1}, {"_id": 1}, {"_id": 2}]),
                        ("ordered", 0)]), check=False)
    assert r["n"] == 2  # ordered: 0 is false: the batch goes on after the duplicate


# -- deletes ------------------------------------------------------------------

def test_delete_one_and_many(db):
    db.t.insert_many([{"_id": i, "g": i % 3} for i in range(9)])
    assert db.t.delete_one({"g": 0}).deleted_count == 1
    assert db.t.delete_many({"g": 1}).deleted_count == 3
    assert db.t.delete_many({"g": 9}).deleted_count == 0
    assert db.t.count_documents({}) == 5
    assert db.t.delete_many({}).deleted_count == 5
    assert db.t.count_documents({}) == 0


# -- findAndModify ----------------------------------------------------------------

def test_find_one_and_update(db):
    db.t.insert_many([{"_id": 1, "v": 10, "x": "a"}, {"_id": 2, "v": 20, "x": "b"}])
    before = db.t.find_one_and_update({"v": {"$gt": 0}}, {"$inc": {"v": 1}},
                                      sort=[("v", -1)])
    assert before == {"_id": 2, "v": 20, "x": "b"}
    after = db.t.find_one_and_update({"_id": 1}, {"$inc": {"v": 1}},
                                     return_document=ReturnDocument.AFTER,
                                     projection={"v": 1, "_id": 0})
    assert after == {"v": 11}
    assert db.t.find_one_and_update({"_id": 9}, {"$set": {"v": 1}}) is None
    up = db.t.find_one_and_update({"_id": 9}, {"$set": {"v": 1}}, upsert=True,
                                  return_document=ReturnDocument.AFTER)
    assert up == {"_id": 9, "v": 1}


def test_find_one_and_replace(db):
    db.t.insert_one({"_id": 1, "a": 1})
    old = db.t.find_one_and_replace({"_id": 1}, {"b": 2})
    assert old == {"_id": 1, "a": 1}
    new = db.t.find_one_and_replace({"_id": 1}, {"c": 3}, return_document=ReturnDocument.AFTER)
    assert new == {"_id": 1, "c": 3}
    up = db.t.find_one_and_replace({"_id": 2}, {"d": 4}, upsert=True,
                                   return_document=ReturnDocument.AFTER)
    assert up == {"_id": 2, "d": 4}


def test_find_one_and_delete(db):
    db.t.insert_many([{"_id": i, "v": i} for i in range(3)])
    gone = db.t.find_one_and_delete({}, sort=[("v", -1)], projection={"_id": 1})
    assert gone == {"_id": 2}
    assert db.t.count_documents({}) == 2
    assert db.t.find_one_and_delete({"_id": 99}) is None


def test_find_and_modify_raw_reply(db):
    db.t.insert_one({"_id": 1, "a": 1})
    r = db.command(SON([("findAndModify", "t"), ("query", {"_id": 1}),
                        ("update", {"$set": {"a": 2}}), ("new", True)]))
    assert r["ok"] == 1
    assert r["value"] == {"_id": 1, "a": 2}
    assert r["lastErrorObject"]["n"] == 1
    assert r["lastErrorObject"]["updatedExisting"] is True
    r = db.command(SON([("findAndModify", "t"), ("query", {"_id": 5}),
                        ("update", {"$set": {"a": 2}}), ("upsert", True)]))
    assert r["value"] is None
    assert r["lastErrorObject"]["updatedExisting"] is False
    assert r["lastErrorObject"]["upserted"] == 5


def test_grouped_inserts_report_each_error(db):
    """A standalone inserts a batch in groups of documents per storage
    transaction; a failing document rolls its group back and the group is
    redone one at a time, so every result is what one-at-a-time gives:
    the errors at their indexes, the rest inserted, ordered batches stopped
    at the first error."""
    c = db.grouped
    c.insert_many([{"_id": 70}, {"_id": 150}])
    with pytest.raises(BulkWriteError) as ei:
        c.insert_many([{"_id": i, "v": i} for i in range(200)], ordered=False)
    r = ei.value.details
    assert r["nInserted"] == 198
    assert [(e["index"], e["code"]) for e in r["writeErrors"]] == [(70, 11000), (150, 11000)]
    assert c.count_documents({}) == 200
    assert c.find_one({"_id": 71}) == {"_id": 71, "v": 71}

    o = db.grouped_ordered
    o.insert_one({"_id": 70})
    with pytest.raises(BulkWriteError) as ei:
        o.insert_many([{"_id": i} for i in range(200)], ordered=True)
    assert ei.value.details["nInserted"] == 70
    assert [e["index"] for e in ei.value.details["writeErrors"]] == [70]
    assert o.count_documents({}) == 71 and o.find_one({"_id": 71}) is None

    db.create_collection("grouped_valid", validator={"x": {"$gte": 0}})
    v = db.grouped_valid
    with pytest.raises(BulkWriteError) as ei:
        v.insert_many([{"_id": i, "x": -1 if i == 30 else i} for i in range(100)],
                      ordered=False)
    assert ei.value.details["nInserted"] == 99
    assert [(e["index"], e["code"]) for e in ei.value.details["writeErrors"]] == [(30, 121)]
    assert v.count_documents({}) == 99
