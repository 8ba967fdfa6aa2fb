"""
Command errors: ok: 0 with MongoDB's code and codeName, and the server
(and the same connection) keeps serving after each.
"""

import pytest
from pymongo.errors import OperationFailure

import wire


def test_unknown_command(server):
    with wire.connect(server.port) as s:
        r = wire.command(s, {"noSuchCommandXyz": 1}, "test")
        assert r["ok"] == 0
        assert r["code"] == 59
        assert r["codeName"] == "CommandNotFound"
        assert "noSuchCommandXyz" in r["errmsg"]
        assert wire.command(s, {"ping": 1})["ok"] == 1


def test_unknown_command_through_pymongo(client):
    with pytest.raises(OperationFailure) as e:
        client.test.command("definitelyNotACommand")
    assert e.value.code == 59
    assert client.admin.command("ping")["ok"] == 1


BAD_ARGS = [
    # (command, expected code, codeName)
    ({"insert": "t", "documents": "notanarray"}, 14, "TypeMismatch"),
    ({"insert": "t", "documents": [{}], "ordered": "yes"}, 14, "TypeMismatch"),
    ({"find": "t", "filter": "notadoc"}, 14, "TypeMismatch"),
    ({"find": "t", "sort": 5}, 14, "TypeMismatch"),
    ({"find": "t", "projection": []}, 14, "TypeMismatch"),
    ({"update": "t", "updates": {"q": {}}}, 14, "TypeMismatch"),
    ({"delete": "t", "deletes": [{"q": "x", "limit": 0}]}, 14, "TypeMismatch"),
    ({"aggregate": "t", "pipeline": {}, "cursor": {}}, 14, "TypeMismatch"),
    ({"getMore": "notalong", "collection": "t"}, 14, "TypeMismatch"),
    ({"find": "t", "noSuchField": 1}, 40415, "Location40415"),
    ({"insert": "t"}, 40414, "Location40414"),
    ({"find": "t", "limit": -1}, 51024, "Location51024"),
    ({"update": "t", "updates": [{"q": {}, "u": {"$bogus": {"a": 1}}}]}, 9, "FailedToParse"),
]


@pytest.mark.parametrize("cmd,code,code_name", BAD_ARGS,
                         ids=[next(iter(c[0])) + "-" + str(i) for i, c in enumerate(BAD_ARGS)])
def test_bad_arguments(server, cmd, code, code_name):
    with wire.connect(server.port) as s:
        r = wire.command(s, cmd, "errdb")
        if "writeErrors" in r:
            # Per-statement errors are reported in writeErrors with ok: 1.
            we = r["writeErrors"][0]
            assert we["index"] == 0
            assert we["code"] == code, r
            assert isinstance(we["errmsg"], str) and we["errmsg"]
        else:
            assert r["ok"] == 0, r
            assert isinstance(r["code"], int) and r["code"] != 0
            assert isinstance(r["codeName"], str) and r["codeName"]
            assert isinstance(r["errmsg"], str) and r["errmsg"]
            assert r["code"] == code, r
            assert r["codeName"] == code_name, r
        assert wire.command(s, {"ping": 1})["ok"] == 1


def test_error_reply_shape_through_pymongo(client):
    with pytest.raises(OperationFailure) as e:
        client.errdb.command({"find": "t", "filter": 1})
    d = e.value.details
    assert d["ok"] == 0 and d["code"] == 14 and d["codeName"] == "TypeMismatch"
    assert client.errdb.t.count_documents({}) == 0


def test_cursor_not_found(client):
    from bson.int64 import Int64
    with pytest.raises(OperationFailure) as e:
        client.errdb.command({"getMore": Int64(987654321), "collection": "t"})
    assert e.value.code == 43
    assert e.value.details["codeName"] == "CursorNotFound"


def test_missing_db_field(server):
    with wire.connect(server.port) as s:
        r = wire.roundtrip(s, wire.op_msg({"ping": 1})).doc  # no $db
        assert r["ok"] == 0
        assert r["code"] == 40571
        assert wire.command(s, {"ping": 1})["ok"] == 1


def test_many_errors_then_normal_work(client):
    for _ in range(200):
        with pytest.raises(OperationFailure):
            client.errdb.command("nope")
    client.errdb.t.insert_one({"_id": 1})
    assert client.errdb.t.find_one() == {"_id": 1}
    client.drop_database("errdb")


def test_push_modifiers_beyond_int64(client):
    """$push's $sort/$slice/$position as Decimal128 Infinity or 1E+30 are not
    integers: a BadValue write error, the document unchanged; INT64_MIN as $position
    counts back past the front (the fuzzer once found Infinity reaching a
    conversion to int64)."""
    from bson.decimal128 import Decimal128
    from bson.int64 import Int64
    c = client.errdb.push
    c.insert_one({"_id": 1, "a": [1, 2]})
    for mod in ({"$sort": Decimal128("Infinity")}, {"$sort": {"x": Decimal128("-Infinity")}},
                {"$slice": Decimal128("Infinity")}, {"$position": Decimal128("1E+30")}):
        with pytest.raises(OperationFailure) as e:
            c.update_one({"_id": 1}, {"$push": {"a": {"$each": [9], **mod}}})
        d = e.value.details  # the write error: {index, code, errmsg}
        assert d["code"] == 2 and "$" in d["errmsg"], (mod, d)
    assert c.find_one() == {"_id": 1, "a": [1, 2]}
    c.update_one({"_id": 1}, {"$push": {"a": {"$each": [9], "$position": Int64(-2**63)}}})
    assert c.find_one() == {"_id": 1, "a": [9, 1, 2]}
    client.drop_database("errdb")
