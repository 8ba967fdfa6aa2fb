"""
Concurrent DDL as mongod answers it (issue 29): identical createIndexes from
many clients at once all succeed, whether they race to publish the index or
find it building; conflicting ones still fail; a GridFS bucket written by ten
threads at once keeps every file.
"""

import threading

import gridfs
import pytest
from pymongo.errors import OperationFailure


def run_threads(n, fn):
    out = [None] * n
    barrier = threading.Barrier(n)

    def one(i):
        barrier.wait()
        try:
            out[i] = ("ok", fn(i))
        except Exception as e:  # noqa: BLE001 - the test reports what each thread got
            out[i] = ("error", e)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return out


def test_identical_create_index_on_empty_collection_all_succeed(server, db):
    clients = [server.client() for _ in range(10)]
    try:
        out = run_threads(10, lambda i: clients[i][db.name].command(
            "createIndexes", "c", indexes=[{"key": {"a": 1}, "name": "a_1"}]))
    finally:
        for c in clients:
            c.close()
    assert all(r[0] == "ok" for r in out), out
    names = [ix["name"] for ix in db.c.list_indexes()]
    assert names.count("a_1") == 1


def test_identical_create_index_while_building_waits_for_the_build(server, db):
    db.big.insert_many([{"_id": i, "k": i % 977, "pad": "x" * 200} for i in range(60000)])
    clients = [server.client() for _ in range(8)]
    try:
        def create(i):
            r = clients[i][db.name].command(
                "createIndexes", "big", indexes=[{"key": {"k": 1}, "name": "k_1"}])
            # Whoever answers, the index is usable once the reply is in.
            plan = clients[i][db.name].big.find({"k": 5}).explain()
            return r, str(plan)
        out = run_threads(8, create)
    finally:
        for c in clients:
            c.close()
    assert all(r[0] == "ok" for r in out), out
    for r in out:
        assert r[1][0]["numIndexesAfter"] == 2
        assert "k_1" in r[1][1], "a reply came before the index was ready"


def test_conflicting_create_index_still_fails(server, db):
    db.d.create_index([("a", 1)], name="a_1")
    with pytest.raises(OperationFailure) as e:
        db.d.create_index([("a", 1)], name="a_1", unique=True)
    assert e.value.code == 85  # IndexOptionsConflict: same key and name, other options
    with pytest.raises(OperationFailure) as e:
        db.d.create_index([("b", 1)], name="a_1")
    assert e.value.code == 86


def test_gridfs_written_by_ten_threads_keeps_every_file(server, db):
    clients = [server.client() for _ in range(10)]
    try:
        def put(i):
            fs = gridfs.GridFSBucket(clients[i][db.name])
            data = bytes([i]) * (300 * 1024 + i)  # two chunks and a bit
            return fs.upload_from_stream("file-%d" % i, data)
        out = run_threads(10, put)
    finally:
        for c in clients:
            c.close()
    assert all(r[0] == "ok" for r in out), out
    fs = gridfs.GridFSBucket(db)
    for i in range(10):
        data = fs.open_download_stream_by_name("file-%d" % i).read()
        assert data == bytes([i]) * (300 * 1024 + i)
    names = sorted(ix["name"] for ix in db["fs.chunks"].list_indexes())
    assert names == ["_id_", "files_id_1_n_1"]
