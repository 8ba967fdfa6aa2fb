"""
test_compact.py: the compact command through pymongo.

What users rely on: after heavy deletes, compact gives the collection's free
file space back (bytesFreed > 0, a smaller storageSize) while every remaining
document and index entry still answers; dryRun estimates without moving
anything; freeSpaceTargetMB (default 20) skips files with less free space;
mongod's errors for a missing collection, a view and bad arguments; other
clients' inserts during a compact all land; the data survives a restart; with
--auth, dbAdmin and hostManager may compact and read may not.
"""

import os
import random
import threading

import pymongo
import pytest
from pymongo.errors import OperationFailure

DOC_BYTES = 1000


def fragment(coll, n, keep_every=10, seed=1):
    """Fill coll with n documents of ~1 KB (incompressible) and an index on k,
    checkpoint, delete all but every keep_every-th, checkpoint again: the
    files then hold ~90% free space.  Returns {_id: k} of the survivors."""
    rnd = random.Random(seed)
    coll.create_index("k")
    docs = [{"_id": i, "k": rnd.getrandbits(40), "pad": os.urandom(DOC_BYTES)} for i in range(n)]
    for i in range(0, n, 2000):
        coll.insert_many(docs[i:i + 2000])
    admin = coll.database.client.admin
    admin.command("fsync")
    coll.delete_many({"_id": {"$not": {"$mod": [keep_every, 0]}}})
    admin.command("fsync")
    return {d["_id"]: d["k"] for d in docs if d["_id"] % keep_every == 0}


def storage_size(db, name):
    s = db.command("collStats", name)
    return s["storageSize"] + sum(s.get("indexSizes", {}).values())


def check_intact(db, name, kept):
    coll = db[name]
    assert coll.count_documents({}) == len(kept)
    assert coll.estimated_document_count() == len(kept)
    for i in list(kept)[:: max(1, len(kept) // 50)]:
        d = coll.find_one({"_id": i})
        assert d is not None and d["k"] == kept[i] and len(d["pad"]) == DOC_BYTES
        by_k = list(coll.find({"k": kept[i]}, {"_id": 1}).hint("k_1"))
        assert {"_id": i} in by_k
    assert coll.find_one({"_id": 1}) is None
    assert sorted(d["_id"] for d in coll.find({}, {"_id": 1})) == sorted(kept)
    assert sorted(d["_id"] for d in coll.find({"k": {"$gte": 0}}, {"_id": 1}).hint("k_1")) == \
        sorted(kept)
    v = db.command("validate", name)
    assert v["valid"], v
    assert v["keysPerIndex"]["k_1"] == len(kept)


def test_compact_frees_space_and_keeps_data(db):
    kept = fragment(db.c, 20000)
    before = storage_size(db, "c")

    est = db.command("compact", "c", dryRun=True, freeSpaceTargetMB=1)
    assert est["ok"] == 1 and est["estimatedBytesFreed"] > 10 * 1024 * 1024
    assert "bytesFreed" not in est
    assert storage_size(db, "c") >= before - 64 * 1024  # a dry run moves nothing

    r = db.command("compact", "c", freeSpaceTargetMB=1, comment="after the purge")
    assert r["ok"] == 1
    assert r["bytesFreed"] > 10 * 1024 * 1024
    after = storage_size(db, "c")
    assert after < before - 10 * 1024 * 1024
    check_intact(db, "c", kept)

    # Nothing left to give back: a second compact frees (almost) nothing.
    again = db.command("compact", "c", freeSpaceTargetMB=1)
    assert again["bytesFreed"] < 1024 * 1024
    # The collection still takes writes afterwards.
    db.c.insert_one({"_id": -1, "k": 5, "pad": b"x"})
    assert db.c.find_one({"k": 5})["_id"] == -1


def test_free_space_target_skips_small_files(db):
    db.small.insert_many([{"_id": i, "pad": os.urandom(100)} for i in range(200)])
    db.small.delete_many({"_id": {"$lt": 150}})
    db.client.admin.command("fsync")
    r = db.command("compact", "small")  # default 20 MB: nothing here is that big
    assert r == {"bytesFreed": 0, "ok": 1.0}
    r = db.command("compact", "small", freeSpaceTargetMB=1, force=True)
    assert r["bytesFreed"] == 0
    assert db.small.count_documents({}) == 50
    est = db.command("compact", "small", dryRun=True)
    assert est == {"estimatedBytesFreed": 0, "ok": 1.0}


def code_of(db, cmd):
    with pytest.raises(OperationFailure) as e:
        db.command(cmd)
    return e.value.code, str(e.value)


def test_compact_errors(db):
    from bson.son import SON
    db.create_collection("real")
    db.command("create", "v", viewOn="real", pipeline=[])
    assert code_of(db, SON([("compact", "nope")]))[0] == 26
    assert code_of(db, SON([("compact", "v")]))[0] == 166
    assert code_of(db, SON([("compact", "real"), ("force", "yes")]))[0] == 14
    assert code_of(db, SON([("compact", "real"), ("dryRun", [1])]))[0] == 14
    assert code_of(db, SON([("compact", "real"), ("freeSpaceTargetMB", "10")]))[0] == 14
    code, msg = code_of(db, SON([("compact", "real"), ("freeSpaceTargetMB", 0)]))
    assert code == 51024 and "must be >= 1" in msg
    assert code_of(db, SON([("compact", "real"), ("freeSpaceTargetMB", -5)]))[0] == 51024
    code, msg = code_of(db, SON([("compact", "real"), ("paddingFactor", 1.1)]))
    assert code == 40415 and "compact.paddingFactor" in msg
    assert code_of(db, SON([("compact", 1)]))[0] == 73
    assert code_of(db, SON([("compact", "")]))[0] == 73
    # compact is listed with its help line
    assert "compact" in db.command("listCommands")["commands"]


def test_compact_while_another_client_inserts(server, db):
    kept = fragment(db.w, 10000, seed=2)
    inserted, errors = [], []
    stop, started = threading.Event(), threading.Event()

    def writer():
        c = server.client()
        try:
            coll = c[db.name].w
            i = 100000
            while not stop.is_set() or len(inserted) < 200:
                coll.insert_many([{"_id": i + j, "k": i + j, "pad": b"y" * 200} for j in range(10)])
                inserted.extend(range(i, i + 10))
                i += 10
                started.set()
        except Exception as e:  # reported below
            errors.append(e)
        finally:
            started.set()
            c.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert started.wait(30)  # the writer is under way before compact starts
        r = db.command("compact", "w", freeSpaceTargetMB=1)
        # a reader on another connection is answered during the compact too
        assert db.w.find_one({"_id": 0})["k"] == kept[0]
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors
    assert r["ok"] == 1 and r["bytesFreed"] > 0
    assert db.w.count_documents({}) == len(kept) + len(inserted)
    assert db.w.count_documents({"_id": {"$gte": 100000}}) == len(inserted)
    for i in inserted[:: max(1, len(inserted) // 20)]:
        assert db.w.find_one({"k": i}, {"_id": 1}) == {"_id": i}
    assert db.command("validate", "w")["valid"]


def test_compact_then_restart_keeps_data(fresh_server):
    fresh_server.start()
    c = fresh_server.client()
    kept = fragment(c.r.c, 6000, seed=3)
    r = c.r.command("compact", "c", freeSpaceTargetMB=1)
    assert r["bytesFreed"] > 0
    c.r.c.insert_one({"_id": -7, "k": 7, "pad": os.urandom(DOC_BYTES)})
    kept[-7] = 7
    c.close()
    fresh_server.restart()
    c = fresh_server.client()
    try:
        check_intact(c.r, "c", kept)
    finally:
        c.close()


def test_compact_privileges(fresh_server):
    fresh_server.start(["--auth"])
    c = fresh_server.client()
    c.admin.command("createUser", "root", pwd="pw-root", roles=["root"])
    c.close()

    def connect(user, pwd):
        return pymongo.MongoClient(
            "mongodb://%s:%s@127.0.0.1:%d/?authSource=admin" % (user, pwd, fresh_server.port),
            directConnection=True, serverSelectionTimeoutMS=10000)

    root = connect("root", "pw-root")
    try:
        root.t.c.insert_one({"_id": 1})
        root.admin.command("createUser", "dba", pwd="pw-dba",
                           roles=[{"role": "dbAdmin", "db": "t"}])
        root.admin.command("createUser", "host", pwd="pw-host", roles=["hostManager"])
        root.admin.command("createUser", "reader", pwd="pw-reader",
                           roles=[{"role": "readWrite", "db": "t"}])
        for user, pwd, ok in (("dba", "pw-dba", True), ("host", "pw-host", True),
                              ("reader", "pw-reader", False)):
            u = connect(user, pwd)
            try:
                if ok:
                    assert u.t.command("compact", "c")["ok"] == 1
                else:
                    with pytest.raises(OperationFailure) as e:
                        u.t.command("compact", "c")
                    assert e.value.code == 13
            finally:
                u.close()
        # dbAdmin on t does not reach another database
        root.u.c.insert_one({"_id": 1})
        u = connect("dba", "pw-dba")
        try:
            with pytest.raises(OperationFailure) as e:
                u.u.command("compact", "c")
            assert e.value.code == 13
        finally:
            u.close()
    finally:
        root.close()
