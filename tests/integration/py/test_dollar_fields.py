"""
Top-level '$'-prefixed field names: stored as data on insert (MongoDB 5.0+),
still refused where MongoDB refuses them (an _id that is a '$' document, an
update's replacement document, update operators' field paths).
pymongo 3.11 refuses such keys client-side in insert_one, so the commands are
sent as written.
"""

import pytest
from pymongo.errors import OperationFailure


def test_insert_stores_top_level_dollar_fields(db):
    r = db.command({"insert": "c", "documents": [{"_id": 1, "$a": 1, "b": {"$c": 2}},
                                                 {"$x": "first", "_id": 2}]})
    assert r["n"] == 2 and "writeErrors" not in r
    docs = db.command({"find": "c", "sort": {"_id": 1}})["cursor"]["firstBatch"]
    assert docs == [{"_id": 1, "$a": 1, "b": {"$c": 2}}, {"_id": 2, "$x": "first"}]
    # The field can be read back through $getField.
    out = list(db.c.aggregate([{"$match": {"_id": 1}},
                               {"$project": {"_id": 0, "v": {"$getField": {"$literal": "$a"}}}}]))
    assert out == [{"v": 1}]


def test_dollar_document_as_id_is_refused(db):
    r = db.command({"insert": "c", "documents": [{"_id": {"$a": 1}}]})
    assert r["n"] == 0
    assert r["writeErrors"][0]["code"] == 52


def test_replacement_document_still_refuses_them(db):
    db.c.insert_one({"_id": 1})
    r = db.command({"update": "c", "updates": [{"q": {"_id": 1}, "u": {"x": 1, "$b": 1}}]})
    assert r["writeErrors"][0]["code"] == 52
    assert db.c.find_one({"_id": 1}) == {"_id": 1}


def test_update_operator_document_is_not_a_replacement(db):
    db.c.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as e:
        db.command({"findAndModify": "c", "query": {"_id": 1}, "update": {"$a": 1}})
    assert e.value.code == 9  # unknown operator $a
