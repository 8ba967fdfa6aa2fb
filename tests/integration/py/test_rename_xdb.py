"""
renameCollection to another database, as mongod 7.0 does it (a copy, not a
catalog move): the target gets a new UUID (listCollections' info.uuid), the
source's documents, indexes and options; the oplog holds mongod's entries
(create of <to db>.tmpXXXXX.renameCollection with the new UUID, its
createIndexes, the inserts into it, renameCollection of it over the target,
drop of the source with the old UUID), so a change stream on the source sees
drop then invalidate, and one on the target database the rename of the
temporary collection to the target.  Errors as before: 48 when the target
exists without dropTarget (the source untouched), 26 without a source.
A one-member replica set (change streams need one).
"""
import re

import pytest
from pymongo.errors import OperationFailure

from sabled import one_member_set
from test_replset3 import last_oplog_ts


@pytest.fixture(scope="module")
def rs1():
    with one_member_set(uuidRepresentation="standard") as (_, c):
        yield c


def info(db, name):
    return next(x for x in db.list_collections() if x["name"] == name)


def test_target_gets_a_new_uuid_and_the_copy(rs1):
    c = rs1
    src = c.xa.src
    c.xa.create_collection("src", validator={"n": {"$type": "int"}})
    src.insert_many([{"_id": i, "n": i, "k": i % 3} for i in range(2500)])
    src.create_index([("k", 1), ("n", -1)], name="k_n", unique=True)
    old = info(c.xa, "src")["info"]["uuid"]
    c.admin.command("renameCollection", "xa.src", to="xb.dst")
    assert "src" not in c.xa.list_collection_names()
    new = info(c.xb, "dst")
    assert new["info"]["uuid"] != old
    assert new["options"]["validator"] == {"n": {"$type": "int"}}
    assert sorted(d["_id"] for d in c.xb.dst.find()) == list(range(2500))
    ix = {i["name"]: i for i in c.xb.dst.list_indexes()}
    assert sorted(ix) == ["_id_", "k_n"] and ix["k_n"]["unique"] is True
    assert dict(ix["k_n"]["key"]) == {"k": 1, "n": -1}
    assert not [n for n in c.xb.list_collection_names() if n.startswith("tmp")]


def test_errors_and_drop_target(rs1):
    c = rs1
    c.ya.s.insert_many([{"_id": i} for i in range(3)])
    c.yb.t.insert_one({"_id": "old"})
    with pytest.raises(OperationFailure) as e:
        c.admin.command("renameCollection", "ya.s", to="yb.t")
    assert e.value.code == 48
    assert c.ya.s.count_documents({}) == 3 and c.yb.t.count_documents({}) == 1
    assert not [n for n in c.yb.list_collection_names() if n.startswith("tmp")]
    with pytest.raises(OperationFailure) as e:
        c.admin.command("renameCollection", "ya.nope", to="yb.x")
    assert e.value.code == 26
    target_uuid = info(c.yb, "t")["info"]["uuid"]
    c.admin.command("renameCollection", "ya.s", to="yb.t", dropTarget=True)
    assert sorted(d["_id"] for d in c.yb.t.find()) == [0, 1, 2]
    assert info(c.yb, "t")["info"]["uuid"] != target_uuid
    assert "s" not in c.ya.list_collection_names()
    # the rename entry names the collection it replaced by its UUID (mongod's
    # dropTarget), false when it replaced none; in one database too
    renames = lambda to: [e["o"] for e in c.local.oplog.rs.find(  # noqa: E731
        {"op": "c", "o.renameCollection": {"$exists": True}, "o.to": to})]
    assert [o["dropTarget"] for o in renames("yb.t")] == [target_uuid]
    c.yb.u.insert_one({"_id": 1})
    c.yb.v.insert_one({"_id": 2})
    v_uuid = info(c.yb, "v")["info"]["uuid"]
    c.admin.command("renameCollection", "yb.u", to="yb.v", dropTarget=True)
    c.admin.command("renameCollection", "yb.v", to="yb.w", dropTarget=True)
    assert [o["dropTarget"] for o in renames("yb.v")] == [v_uuid]
    assert [o["dropTarget"] for o in renames("yb.w")] == [False]
    assert list(c.yb.w.find()) == [{"_id": 1}]


def test_oplog_and_change_streams(rs1):
    c = rs1
    c.za.s.insert_many([{"_id": i} for i in range(3)])
    c.za.s.create_index("x")
    old = info(c.za, "s")["info"]["uuid"]
    start = last_oplog_ts(c)
    with c.za.s.watch() as src_stream, c.zb.watch() as db_stream:
        c.admin.command("renameCollection", "za.s", to="zb.t")
        new = info(c.zb, "t")["info"]["uuid"]
        ops = list(c.local.oplog.rs.find({"ts": {"$gt": start}}).sort("$natural", 1))
        shape = [(e["op"], e["ns"], next(iter(e["o"])) if e["op"] == "c" else None)
                 for e in ops]
        tmp = shape[0][2] and ops[0]["o"]["create"]
        assert re.fullmatch(r"tmp[A-Za-z0-9]{5}\.renameCollection", tmp), shape
        assert shape == ([("c", "zb.$cmd", "create"), ("c", "zb.$cmd", "createIndexes")] +
                         [("i", "zb." + tmp, None)] * 3 +
                         [("c", "zb.$cmd", "renameCollection"), ("c", "za.$cmd", "drop")])
        assert [e["ui"] for e in ops[:-1]] == [new] * 6 and ops[-1]["ui"] == old
        assert ops[5]["o"]["renameCollection"] == "zb." + tmp and ops[5]["o"]["to"] == "zb.t"
        assert ops[5]["o"]["dropTarget"] is False
        got = [src_stream.next()["operationType"] for _ in range(2)]
        assert got == ["drop", "invalidate"]
        evs = [db_stream.next() for _ in range(4)]
        assert [e["operationType"] for e in evs] == ["insert"] * 3 + ["rename"]
        assert evs[3]["ns"] == {"db": "zb", "coll": tmp}
        assert evs[3]["to"] == {"db": "zb", "coll": "t"}
