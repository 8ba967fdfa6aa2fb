"""
Databases and collections: implicit creation, create/drop, listDatabases,
listCollections, renameCollection, collStats/dbStats, listIndexes, and the
InvalidNamespace errors for bad names.
"""

import uuid

import pytest
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from pymongo.errors import OperationFailure

import wire


def test_implicit_creation_on_insert(client, db):
    assert db.name not in client.list_database_names()
    db.auto.insert_one({"a": 1})
    assert db.name in client.list_database_names()
    assert "auto" in db.list_collection_names()


def test_create_and_namespace_exists(db):
    assert db.command("create", "made")["ok"] == 1
    assert "made" in db.list_collection_names()
    with pytest.raises(OperationFailure) as e:
        db.command("create", "made")
    assert e.value.code == 48
    assert e.value.details["codeName"] == "NamespaceExists"


def test_drop_collection_and_database(client, db):
    db.a.insert_one({"x": 1})
    db.b.insert_one({"x": 1})
    r = db.command("drop", "a")
    assert r["ok"] == 1
    assert r["ns"] == db.name + ".a"
    assert db.list_collection_names() == ["b"]
    assert db.a.count_documents({}) == 0
    # MongoDB 7.0: dropping a collection that does not exist succeeds.
    assert db.command("drop", "never_existed")["ok"] == 1
    r = db.command("dropDatabase")
    assert r["ok"] == 1 and r["dropped"] == db.name
    assert db.name not in client.list_database_names()
    assert db.b.count_documents({}) == 0


def test_list_databases(client, db):
    db.x.insert_many([{"pad": "p" * 1000} for _ in range(50)])
    r = client.admin.command("listDatabases")
    entry = [d for d in r["databases"] if d["name"] == db.name]
    assert len(entry) == 1
    assert entry[0]["sizeOnDisk"] > 0
    assert entry[0]["empty"] is False
    assert r["totalSize"] >= entry[0]["sizeOnDisk"]
    names = [d["name"] for d in client.list_databases()]
    assert db.name in names
    r = client.admin.command({"listDatabases": 1, "nameOnly": True})
    for d in r["databases"]:
        assert set(d) == {"name"}
    r = client.admin.command({"listDatabases": 1, "filter": {"name": db.name}})
    assert [d["name"] for d in r["databases"]] == [db.name]
    with pytest.raises(OperationFailure):
        db.command("listDatabases")  # admin only


def test_list_collections(db):
    db.one.insert_one({})
    db.two.insert_one({})
    db.command("create", "three")
    assert sorted(db.list_collection_names()) == ["one", "three", "two"]
    listing = db.command("listCollections", codec_options=CodecOptions(
        uuid_representation=UuidRepresentation.STANDARD))["cursor"]["firstBatch"]
    infos = {c["name"]: c for c in listing}
    c = infos["one"]
    assert c["type"] == "collection"
    assert c["options"] == {}
    assert c["info"]["readOnly"] is False
    assert isinstance(c["info"]["uuid"], uuid.UUID)  # BSON binary subtype 4
    assert c["idIndex"]["key"] == {"_id": 1} and c["idIndex"]["name"] == "_id_"
    assert [c["name"] for c in db.list_collections(filter={"name": "two"})] == ["two"]
    both = db.list_collections(filter={"name": {"$in": ["one", "three"]}})
    assert sorted(c["name"] for c in both) == ["one", "three"]
    r = db.command({"listCollections": 1, "nameOnly": True})
    for c in r["cursor"]["firstBatch"]:
        assert set(c) == {"name", "type"}
    assert r["cursor"]["ns"] == db.name + ".$cmd.listCollections"


def test_rename_collection(client, db):
    db.src.insert_many([{"_id": i} for i in range(5)])
    db.src.rename("dst")
    names = db.list_collection_names()
    assert "dst" in names and "src" not in names
    assert db.dst.count_documents({}) == 5
    db.other.insert_one({"_id": "o"})
    with pytest.raises(OperationFailure) as e:
        db.dst.rename("other")
    assert e.value.code == 48  # NamespaceExists
    db.dst.rename("other", dropTarget=True)
    assert sorted(x["_id"] for x in db.other.find()) == [0, 1, 2, 3, 4]
    with pytest.raises(OperationFailure) as e:
        client.admin.command({"renameCollection": db.name + ".nope", "to": db.name + ".x"})
    assert e.value.code == 26  # NamespaceNotFound


def test_coll_stats_and_db_stats(db):
    db.s.insert_many([{"_id": i, "pad": "p" * 100} for i in range(20)])
    r = db.command("collStats", "s")
    assert r["ok"] == 1
    assert r["ns"] == db.name + ".s"
    assert r["count"] == 20
    assert r["size"] > 20 * 100
    assert r["nindexes"] == 1
    r = db.command("dbStats")
    assert r["ok"] == 1
    assert r["db"] == db.name
    assert r["collections"] == 1
    assert r["objects"] == 20
    assert r["dataSize"] > 20 * 100


def test_list_indexes(db):
    db.i.insert_one({})
    idx = list(db.i.list_indexes())
    assert len(idx) == 1
    assert idx[0]["name"] == "_id_"
    assert idx[0]["key"] == {"_id": 1}
    assert idx[0]["v"] == 2
    with pytest.raises(OperationFailure) as e:
        db.command({"listIndexes": "missing_coll"})
    assert e.value.code == 26  # NamespaceNotFound


def _raw(server, cmd, dbname):
    with wire.connect(server.port) as s:
        return wire.command(s, cmd, dbname)


@pytest.mark.parametrize("cmd,dbname", [
    ({"create": "bad$name"}, "nsdb"),
    ({"insert": "", "documents": [{}]}, "nsdb"),
    ({"insert": "t", "documents": [{}]}, "bad.db"),
    ({"insert": "t", "documents": [{}]}, "bad db"),
    ({"insert": "t", "documents": [{}]}, "bad/db"),
    ({"insert": "t", "documents": [{}]}, "x" * 64),
    ({"create": "system.nope"}, "nsdb"),
], ids=["dollar-coll", "empty-coll", "dot-db", "space-db", "slash-db", "long-db", "system-coll"])
def test_invalid_names_code_73(server, client, cmd, dbname):
    r = _raw(server, cmd, dbname)
    assert r["ok"] == 0, r
    assert r["code"] == 73, r
    assert r["codeName"] == "InvalidNamespace"
    assert client.admin.command("ping")["ok"] == 1
