"""
collMod: validator / validationLevel / validationAction and
changeStreamPreAndPostImages on an existing collection (durable across a
restart), and one index's hidden, expireAfterSeconds, prepareUnique and
unique (conversion refused with 359 and the conflicting _ids).
"""

import pytest
from pymongo.errors import DuplicateKeyError, OperationFailure, WriteError



def test_validator_added_later_applies_to_writes(db):
    db.c.insert_many([{"_id": 1, "x": "a"}, {"_id": 2, "x": 5}])
    r = db.command({"collMod": "c", "validator": {"x": {"$type": "string"}}})
    assert r["ok"] == 1
    db.c.insert_one({"_id": 3, "x": "ok"})
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": 4, "x": 1})
    assert e.value.code == 121
    # findAndModify reports the failing document in errInfo.
    with pytest.raises(OperationFailure) as e:
        db.c.find_one_and_update({"_id": 1}, {"$set": {"x": 1}})
    assert e.value.code == 121
    assert e.value.details["errInfo"]["failingDocumentId"] == 1
    assert isinstance(e.value.details["errInfo"]["details"], dict)
    opts = db.command("listCollections", filter={"name": "c"})["cursor"]["firstBatch"][0]["options"]
    assert opts["validator"] == {"x": {"$type": "string"}}


def test_validation_level_and_action(db):
    db.create_collection("c", validator={"n": {"$gte": 0}})
    db.c.insert_one({"_id": 1, "n": 1})
    db.command({"collMod": "c", "validationAction": "warn"})
    db.c.insert_one({"_id": 2, "n": -1})  # warn: written
    db.command({"collMod": "c", "validationAction": "error", "validationLevel": "moderate"})
    # moderate: an already invalid document may be updated
    db.c.update_one({"_id": 2}, {"$set": {"n": -2}})
    with pytest.raises(WriteError):
        db.c.update_one({"_id": 1}, {"$set": {"n": -1}})
    opts = db.command("listCollections", filter={"name": "c"})["cursor"]["firstBatch"][0]["options"]
    assert opts["validationLevel"] == "moderate" and opts["validationAction"] == "error"
    assert opts["validator"] == {"n": {"$gte": 0}}


def test_bad_arguments_change_nothing(db):
    db.create_collection("c", validator={"n": 1})
    for cmd, code in [({"collMod": "c", "validationLevel": "sometimes"}, 2),
                      ({"collMod": "c", "validator": 1}, 14),
                      ({"collMod": "c", "noSuchOption": 1}, 40415),
                      ({"collMod": "missing", "validator": {}}, 26),
                      ({"collMod": "c", "index": {"name": "nope", "hidden": True}}, 27)]:
        with pytest.raises(OperationFailure) as e:
            db.command(cmd)
        assert e.value.code == code, cmd
    opts = db.command("listCollections", filter={"name": "c"})["cursor"]["firstBatch"][0]["options"]
    assert opts["validator"] == {"n": 1} and "validationLevel" not in opts


def test_hidden_index_is_not_used(db):
    db.c.insert_many([{"_id": i, "x": i} for i in range(20)])
    db.c.create_index("x")
    r = db.command({"collMod": "c", "index": {"keyPattern": {"x": 1}, "hidden": True}})
    assert r["hidden_old"] is False and r["hidden_new"] is True
    plan = db.c.find({"x": 3}).explain()["queryPlanner"]["winningPlan"]
    assert "IXSCAN" not in str(plan)
    spec = [i for i in db.c.list_indexes() if i["name"] == "x_1"][0]
    assert spec["hidden"] is True
    db.c.insert_one({"_id": 100, "x": 3})  # still maintained
    db.command({"collMod": "c", "index": {"name": "x_1", "hidden": False}})
    plan = db.c.find({"x": 3}).explain()["queryPlanner"]["winningPlan"]
    assert "IXSCAN" in str(plan)
    assert sorted(d["_id"] for d in db.c.find({"x": 3})) == [3, 100]


def test_expire_after_seconds(db):
    db.c.create_index("t", expireAfterSeconds=3600)
    r = db.command({"collMod": "c", "index": {"keyPattern": {"t": 1}, "expireAfterSeconds": 60}})
    assert r["expireAfterSeconds_old"] == 3600 and r["expireAfterSeconds_new"] == 60
    spec = [i for i in db.c.list_indexes() if i["name"] == "t_1"][0]
    assert spec["expireAfterSeconds"] == 60
    db.c.create_index("u")
    with pytest.raises(OperationFailure) as e:
        db.command({"collMod": "c", "index": {"name": "u_1", "expireAfterSeconds": 5}})
    assert e.value.code == 72


def test_prepare_unique_then_unique(db):
    db.c.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 1}, {"_id": 3, "x": 2}])
    db.c.create_index("x")
    with pytest.raises(OperationFailure) as e:  # prepareUnique first
        db.command({"collMod": "c", "index": {"keyPattern": {"x": 1}, "unique": True}})
    assert e.value.code == 72
    db.command({"collMod": "c", "index": {"keyPattern": {"x": 1}, "prepareUnique": True}})
    with pytest.raises(DuplicateKeyError):
        db.c.insert_one({"_id": 4, "x": 2})
    with pytest.raises(DuplicateKeyError):
        db.c.update_one({"_id": 3}, {"$set": {"x": 1}})
    db.c.insert_one({"_id": 5, "x": 3})
    db.c.update_one({"_id": 3}, {"$set": {"y": 1}})  # its own key: fine
    with pytest.raises(OperationFailure) as e:
        db.command({"collMod": "c", "index": {"keyPattern": {"x": 1}, "unique": True}})
    assert e.value.code == 359
    assert e.value.details["violations"] == [{"ids": [1, 2]}]
    db.c.delete_one({"_id": 2})
    r = db.command({"collMod": "c", "index": {"keyPattern": {"x": 1}, "unique": True}})
    assert r["unique_new"] is True
    spec = [i for i in db.c.list_indexes() if i["name"] == "x_1"][0]
    assert spec["unique"] is True
    with pytest.raises(DuplicateKeyError):
        db.c.insert_one({"_id": 6, "x": 3})
    assert sorted(d["_id"] for d in db.c.find({"x": {"$gte": 1}})) == [1, 3, 5]


def test_options_survive_restart(fresh_server):
    fresh_server.start()
    c = fresh_server.client()
    d = c.t
    d.c.insert_one({"_id": 1, "x": 1})
    d.c.create_index("x")
    d.command({"collMod": "c", "validator": {"x": {"$type": "int"}},
               "index": {"keyPattern": {"x": 1}, "prepareUnique": True}})
    c.close()
    fresh_server.restart()
    c = fresh_server.client()
    d = c.t
    with pytest.raises(WriteError) as e:
        d.c.insert_one({"_id": 2, "x": "s"})
    assert e.value.code == 121
    with pytest.raises(DuplicateKeyError):
        d.c.insert_one({"_id": 3, "x": 1})
    c.close()
