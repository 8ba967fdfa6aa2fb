"""
Exactly the traffic of YCSB 0.17's mongodb binding (MongoDbClient.java on the
Java driver 3.x), sent as OP_MSG the way that driver frames it: writes with
their documents in kind-1 sequences, unacknowledged writes as moreToCome
with writeConcern {w: 0}, reads as find commands.

  insert  -> insertOne({_id: "user…", field0..field9: <100-byte binary>})
             or insertMany(batch, ordered: false) when batchsize > 1
             or replaceOne({_id}, doc, upsert: true) when mongodb.upsert=true
  read    -> find({_id: key}).projection({fieldN: 1, ...}).first()  (limit 1, singleBatch)
  update  -> updateOne({_id: key}, {$set: {fieldN: <binary>}})
  scan    -> find({_id: {$gte: key}}).sort({_id: 1}).limit(n)
  delete  -> deleteOne({_id: key})
"""

import os
import time
import uuid

import pytest
from bson.binary import Binary, UUID_SUBTYPE
from bson.son import SON

import wire

DB = "ycsb"
COLL = "usertable"


def record(key):
    doc = SON([("_id", key)])
    for i in range(10):
        doc["field%d" % i] = os.urandom(100)  # bytes: BSON binary subtype 0
    return doc


class YcsbConnection:
    def __init__(self, port, acknowledged):
        self.sock = wire.connect(port)
        self.ack = acknowledged
        self.lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
        hello = wire.roundtrip(self.sock, wire.op_query(
            "admin.$cmd", {"isMaster": 1, "client": {"driver": {"name": "mongo-java-driver",
                                                                 "version": "3.8.2"}}})).doc
        assert hello["ismaster"] is True and hello["maxWireVersion"] == 21

    def close(self):
        self.sock.close()

    def _write(self, body, seq_name, docs):
        body = SON(list(body.items()))
        if self.ack:
            body["writeConcern"] = {"w": 1}
            body["lsid"] = self.lsid
        else:
            body["writeConcern"] = {"w": 0}
        body["$db"] = DB
        if self.ack:
            return wire.roundtrip(self.sock, wire.op_msg(body, sequences=[(seq_name, docs)])).doc
        self.sock.sendall(wire.op_msg(body, flags=wire.MORE_TO_COME,
                                      sequences=[(seq_name, docs)]))
        return None

    def _read(self, body):
        body = SON(list(body.items()))
        body["lsid"] = self.lsid
        body["$db"] = DB
        return wire.roundtrip(self.sock, wire.op_msg(body)).doc

    def insert(self, doc):
        return self._write(SON([("insert", COLL), ("ordered", True)]), "documents", [doc])

    def insert_batch(self, docs):
        return self._write(SON([("insert", COLL), ("ordered", False)]), "documents", docs)

    def upsert(self, doc):
        return self._write(SON([("update", COLL), ("ordered", True)]), "updates",
                           [SON([("q", {"_id": doc["_id"]}), ("u", doc), ("upsert", True)])])

    def update(self, key, fields):
        return self._write(SON([("update", COLL), ("ordered", True)]), "updates",
                           [SON([("q", {"_id": key}), ("u", {"$set": fields})])])

    def delete(self, key):
        return self._write(SON([("delete", COLL), ("ordered", True)]), "deletes",
                           [SON([("q", {"_id": key}), ("limit", 1)])])

    def read(self, key, fields=None):
        body = SON([("find", COLL), ("filter", {"_id": key})])
        if fields:
            body["projection"] = SON((f, 1) for f in fields)
        body["limit"] = 1
        body["singleBatch"] = True
        r = self._read(body)
        assert r["ok"] == 1, r
        assert r["cursor"]["id"] == 0
        batch = r["cursor"]["firstBatch"]
        return batch[0] if batch else None

    def scan(self, start, n, fields=None):
        body = SON([("find", COLL), ("filter", {"_id": {"$gte": start}}), ("sort", {"_id": 1})])
        if fields:
            body["projection"] = SON((f, 1) for f in fields)
        body["limit"] = n
        r = self._read(body)
        assert r["ok"] == 1, r
        docs = list(r["cursor"]["firstBatch"])
        cid = r["cursor"]["id"]
        while cid:
            r = self._read(SON([("getMore", cid), ("collection", COLL)]))
            docs += r["cursor"]["nextBatch"]
            cid = r["cursor"]["id"]
        return docs


def keys(n, first=1000):
    return ["user%d" % (first + i) for i in range(n)]


@pytest.fixture
def ycsb_clean(client):
    client.drop_database(DB)
    yield client[DB][COLL]
    client.drop_database(DB)


def _wait_count(coll, n, timeout=10):
    deadline = time.monotonic() + timeout
    while coll.count_documents({}) != n and time.monotonic() < deadline:
        time.sleep(0.05)
    return coll.count_documents({})


@pytest.mark.parametrize("acknowledged", [True, False], ids=["acknowledged", "unacknowledged"])
def test_ycsb_workload(server, ycsb_clean, acknowledged):
    coll = ycsb_clean
    y = YcsbConnection(server.port, acknowledged)
    try:
        ks = keys(100)
        docs = {k: record(k) for k in ks}
        # load phase: 40 single inserts, 50 in one unordered batch, 10 upserts
        for k in ks[:40]:
            r = y.insert(docs[k])
            if acknowledged:
                assert r["ok"] == 1 and r["n"] == 1, r
        r = y.insert_batch([docs[k] for k in ks[40:90]])
        if acknowledged:
            assert r["ok"] == 1 and r["n"] == 50, r
        for k in ks[90:]:
            r = y.upsert(docs[k])
            if acknowledged:
                assert r["ok"] == 1 and r["n"] == 1 and r["upserted"][0]["_id"] == k, r
        assert _wait_count(coll, 100) == 100

        # read: all fields, and a projection
        got = y.read(ks[5])
        assert got == docs[ks[5]]
        got = y.read(ks[6], fields=["field1", "field7"])
        assert got == {"_id": ks[6], "field1": docs[ks[6]]["field1"],
                       "field7": docs[ks[6]]["field7"]}
        assert y.read("user999999") is None

        # update
        new = os.urandom(100)
        r = y.update(ks[7], {"field3": new})
        if acknowledged:
            assert r["n"] == 1 and r["nModified"] == 1
        deadline = time.monotonic() + 5
        while y.read(ks[7])["field3"] != new and time.monotonic() < deadline:
            time.sleep(0.05)
        assert y.read(ks[7])["field3"] == new
        assert y.read(ks[7])["field4"] == docs[ks[7]]["field4"]

        # upsert over an existing record replaces it
        repl = record(ks[8])
        r = y.upsert(repl)
        if acknowledged:
            assert r["n"] == 1 and r["nModified"] == 1 and "upserted" not in r
        deadline = time.monotonic() + 5
        while y.read(ks[8]) != repl and time.monotonic() < deadline:
            time.sleep(0.05)
        assert y.read(ks[8]) == repl

        # scan: ordered _ids from the start key, limited
        got = y.scan(ks[10], 20)
        assert [d["_id"] for d in got] == sorted(ks)[sorted(ks).index(ks[10]):][:20]
        got = y.scan("user1095", 20, fields=["field0"])
        assert [d["_id"] for d in got] == ["user1095", "user1096", "user1097", "user1098",
                                          "user1099"]
        assert set(got[0]) == {"_id", "field0"}
        got = y.scan("user", 1000)
        assert [d["_id"] for d in got] == sorted(ks)

        # delete
        r = y.delete(ks[0])
        if acknowledged:
            assert r["n"] == 1
        assert _wait_count(coll, 99) == 99
        assert y.read(ks[0]) is None
    finally:
        y.close()


def test_ycsb_duplicate_in_unordered_batch(server, ycsb_clean):
    y = YcsbConnection(server.port, True)
    try:
        ks = keys(5)
        y.insert(record(ks[2]))
        r = y.insert_batch([record(k) for k in ks])
        assert r["ok"] == 1 and r["n"] == 4
        assert [(e["index"], e["code"]) for e in r["writeErrors"]] == [(2, 11000)]
        assert ycsb_clean.count_documents({}) == 5
    finally:
        y.close()


def test_ycsb_pymongo_equivalent(client, ycsb_clean):
    """The same operations through a driver, to be sure nothing depends on framing."""
    coll = ycsb_clean
    ks = keys(30)
    docs = [record(k) for k in ks]
    coll.insert_many(docs[:20], ordered=False)
    for d in docs[20:]:
        coll.replace_one({"_id": d["_id"]}, d, upsert=True)
    assert coll.find_one({"_id": ks[3]}, {"field2": 1}) == {"_id": ks[3], "field2": docs[3]["field2"]}
    coll.update_one({"_id": ks[3]}, {"$set": {"field2": b"z" * 100}})
    assert coll.find_one({"_id": ks[3]})["field2"] == b"z" * 100
    assert [d["_id"] for d in coll.find({"_id": {"$gte": ks[25]}}).sort("_id", 1).limit(3)] \
        == ks[25:28]
    assert coll.delete_one({"_id": ks[0]}).deleted_count == 1
    assert coll.count_documents({}) == 29
