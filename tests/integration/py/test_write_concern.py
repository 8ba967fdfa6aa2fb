"""
Write concern and durability: unacknowledged (w:0) writes are applied,
j:true writes are acknowledged and survive kill -9, everything survives a
clean restart.
"""

import time

from pymongo import WriteConcern



def _poll(fn, expect, timeout=5):
    deadline = time.monotonic() + timeout
    got = fn()
    while got != expect and time.monotonic() < deadline:
        time.sleep(0.05)
        got = fn()
    return got


def test_unacknowledged_writes_happen(server, db):
    w0 = db.get_collection("t", write_concern=WriteConcern(w=0))
    r = w0.insert_one({"_id": 1, "a": 1})
    assert r.acknowledged is False
    w0.insert_many([{"_id": i} for i in range(2, 12)])
    w0.update_one({"_id": 1}, {"$set": {"a": 2}})
    w0.update_many({"_id": {"$gte": 2}}, {"$set": {"u": True}})
    w0.delete_one({"_id": 11})
    w0.replace_one({"_id": 2}, {"r": 1})
    other = server.client()
    try:
        coll = other[db.name].t
        assert _poll(lambda: coll.count_documents({}), 10) == 10
        assert _poll(lambda: (coll.find_one({"_id": 1}) or {}).get("a"), 2) == 2
        assert _poll(lambda: coll.count_documents({"u": True}), 8) == 8
        assert _poll(lambda: coll.find_one({"_id": 2}), {"_id": 2, "r": 1}) == {"_id": 2, "r": 1}
    finally:
        other.close()


def test_journaled_and_majority_writes_acknowledged(db):
    j = db.get_collection("t", write_concern=WriteConcern(w=1, j=True))
    r = j.insert_one({"_id": 1})
    assert r.acknowledged
    assert j.update_one({"_id": 1}, {"$set": {"a": 1}}).modified_count == 1
    maj = db.get_collection("t", write_concern=WriteConcern(w="majority", wtimeout=5000))
    assert maj.insert_one({"_id": 2}).acknowledged
    r = db.command({"insert": "t", "documents": [{"_id": 3}], "writeConcern": {"w": 1, "j": True}})
    assert r["ok"] == 1 and r["n"] == 1
    assert "writeConcernError" not in r
    assert db.t.count_documents({}) == 3


def test_clean_restart_keeps_everything(fresh_server):
    s = fresh_server
    s.start()
    c = s.client()
    try:
        for i in range(3):
            c["dur%d" % i].t.insert_many([{"_id": k, "v": k * i} for k in range(100)])
        c.dur0.t.update_many({}, {"$set": {"flag": 1}})
        c.dur1.t.delete_many({"_id": {"$lt": 50}})
        c.dur2.command("create", "empty")
    finally:
        c.close()
    assert s.stop() == 0
    s.restart()
    c = s.client()
    try:
        assert c.dur0.t.count_documents({"flag": 1}) == 100
        assert c.dur1.t.count_documents({}) == 50
        assert c.dur2.t.find_one({"_id": 7}) == {"_id": 7, "v": 14}
        assert "empty" in c.dur2.list_collection_names()
        assert {"dur0", "dur1", "dur2"} <= set(c.list_database_names())
        # The _id index survives too: duplicates are still rejected.
        r = c.dur2.command({"insert": "t", "documents": [{"_id": 7}]})
        assert r["writeErrors"][0]["code"] == 11000
    finally:
        c.close()


def test_kill9_after_journaled_writes_loses_nothing(fresh_server):
    s = fresh_server
    s.start()
    c = s.client()
    acked = []
    try:
        coll = c.crash.get_collection("t", write_concern=WriteConcern(w=1, j=True))
        for i in range(200):
            coll.insert_one({"_id": i, "payload": "x" * 200})
            acked.append(i)
        coll.insert_many([{"_id": i} for i in range(200, 400)])
        acked.extend(range(200, 400))
        coll.update_one({"_id": 0}, {"$set": {"updated": True}})
        coll.delete_one({"_id": 1})
        acked.remove(1)
    finally:
        c.close()
    s.kill9()
    s.restart()
    c = s.client()
    try:
        got = sorted(d["_id"] for d in c.crash.t.find({}, {"_id": 1}))
        assert got == sorted(acked)
        assert c.crash.t.find_one({"_id": 0})["updated"] is True
        # And the server is fully usable after recovery.
        c.crash.t.insert_one({"_id": "after"})
        assert c.crash.t.count_documents({}) == len(acked) + 1
    finally:
        c.close()


def test_kill9_after_journaled_noop_keeps_what_it_saw(fresh_server):
    """A j:true write that changes nothing still waits for the journal: it
    may have observed a w:1 write that is not on disk yet (found by
    tests/stress/crash: a j:true delete of a document a w:1 delete had just
    removed was acknowledged, and the document came back after kill -9)."""
    s = fresh_server
    s.start(["--journalCommitInterval", "500", "--syncdelay", "0"])
    c = s.client()
    try:
        base = c.noop.t
        j = base.with_options(write_concern=WriteConcern(w=1, j=True))
        w1 = base.with_options(write_concern=WriteConcern(w=1))
        j.insert_many([{"_id": i, "v": 0} for i in range(6)])
        # Each pair: a w:1 change, then a j:true command that changes nothing.
        w1.delete_one({"_id": 0})
        assert j.delete_one({"_id": 0}).deleted_count == 0
        w1.delete_one({"_id": 1})
        assert j.update_one({"_id": 1}, {"$set": {"v": 9}}).matched_count == 0
        w1.delete_one({"_id": 2})
        assert j.replace_one({"_id": 2}, {"v": 9}).matched_count == 0
        w1.update_one({"_id": 3}, {"$set": {"v": 3}})
        assert j.update_one({"_id": 3}, {"$set": {"v": 3}}).modified_count == 0
        w1.delete_one({"_id": 4})
        assert j.find_one_and_delete({"_id": 4}) is None
        w1.insert_one({"_id": 6, "v": 6})
        r = c.noop.command({"insert": "t", "documents": [{"_id": 6}],
                            "writeConcern": {"w": 1, "j": True}})
        assert r["writeErrors"][0]["code"] == 11000
    finally:
        c.close()
    s.kill9()
    s.restart()
    c = s.client()
    try:
        got = {d["_id"]: d["v"] for d in c.noop.t.find({})}
        assert got == {3: 3, 5: 0, 6: 6}
    finally:
        c.close()
