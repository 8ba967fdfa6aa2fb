"""
dbHash (issue 25): MongoDB's reply shape, an MD5 per collection over its
documents' BSON bytes in _id order, one MD5 over those digests; equal on
every member of a replica set once the members have converged.
"""
import hashlib
import uuid

import pytest
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo.errors import OperationFailure
from pymongo.write_concern import WriteConcern

import test_replset as rs1

EMPTY_MD5 = hashlib.md5(b"").hexdigest()


def expected_md5(coll):
    raw = coll.with_options(codec_options=CodecOptions(document_class=RawBSONDocument))
    return hashlib.md5(b"".join(d.raw for d in raw.find().sort("_id", 1))).hexdigest()


def test_reply_shape_and_digests(db):
    db.a.insert_many([{"_id": i, "x": "v%d" % i} for i in (5, 1, 3, 2, 4)])
    db.create_collection("empty")
    db.create_collection("cap", capped=True, size=4096)
    db.cap.insert_one({"_id": 1})
    r = db.command("dbHash")
    assert r["ok"] == 1
    assert set(r["collections"]) == {"a", "empty", "cap"}
    assert r["collections"]["a"] == expected_md5(db.a)
    assert r["collections"]["empty"] == EMPTY_MD5
    assert r["capped"] == ["cap"]
    assert set(r["uuids"]) == {"a", "empty", "cap"}
    assert all(isinstance(u, uuid.UUID) for u in r["uuids"].values())
    names = sorted(r["collections"])
    assert r["md5"] == hashlib.md5("".join(r["collections"][n] for n in names)
                                   .encode()).hexdigest()
    assert ":" in r["host"] and isinstance(r["timeMillis"], int)


def test_same_documents_same_hash_whatever_the_order(client, db):
    other = client[db.name + "_b"]
    try:
        db.c.insert_many([{"_id": i, "v": i * 2} for i in range(50)])
        for i in reversed(range(50)):
            other.c.insert_one({"_id": i, "v": -1})
            other.c.update_one({"_id": i}, {"$set": {"v": i * 2}})
        h1, h2 = db.command("dbHash"), other.command("dbHash")
        assert h1["collections"]["c"] == h2["collections"]["c"]
        assert h1["md5"] == h2["md5"]
        other.c.update_one({"_id": 7}, {"$set": {"v": 0}})
        assert other.command("dbHash")["md5"] != h1["md5"]
        other.c.update_one({"_id": 7}, {"$set": {"v": 14}})
        assert other.command("dbHash")["md5"] == h1["md5"]
        other.c.delete_one({"_id": 9})
        assert other.command("dbHash")["collections"]["c"] != h1["collections"]["c"]
    finally:
        client.drop_database(other.name)


def test_collections_filter_and_errors(db):
    db.x.insert_one({"_id": 1})
    db.y.insert_one({"_id": 1})
    r = db.command("dbHash", collections=["y", "nope"])
    assert list(r["collections"]) == ["y"]
    with pytest.raises(OperationFailure) as ei:
        db.command("dbHash", collections="y")
    assert ei.value.code == 14


def test_local_leaves_out_replication_state(rs1_primary):
    s, c = rs1_primary
    r = c.local.command("dbHash")
    assert "oplog.rs" not in r["collections"]
    assert not any(n.startswith("replset.") for n in r["collections"])


def test_equal_on_members_after_majority_writes_and_getmore_on_secondaries():
    import test_replset3 as rs3mod
    gen = rs3mod.rs3.__wrapped__()
    members = next(gen)
    try:
        c = rs3mod.rs_client(members)
        coll = c.t.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=20000))
        for i in range(30):
            coll.insert_one({"_id": i, "x": i})
        coll.update_many({}, {"$inc": {"x": 1}})
        coll.delete_one({"_id": 3})
        hashes = []
        for m in members:
            with rs3mod.direct(m) as d:
                hashes.append(d.t.command("dbHash"))
                # final reads on a secondary take several batches: getMore
                # carries no read preference and must still run there
                assert len(list(d.t.c.find().batch_size(5))) == 29
        assert len({h["md5"] for h in hashes}) == 1
        assert hashes[0]["collections"]["c"] == expected_md5(c.t.c)
        c.close()
    finally:
        gen.close()


@pytest.fixture
def rs1_primary():
    s = rs1.start_member()
    try:
        c = rs1.initiate(s)
        c.close()
        c = rs1.rs_client(s)
        c.t.x.insert_one({"_id": 1})
        yield s, c
        c.close()
    finally:
        s.cleanup()
