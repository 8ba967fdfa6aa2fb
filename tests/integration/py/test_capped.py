"""
Capped collections and tailable cursors through pymongo: create's options and
errors, insertion order and $natural, eviction of the oldest documents by
size and by count, deletes and updates, collStats/listCollections, tailable
and awaitData cursors (an empty batch keeps the cursor; a later insert is
returned by getMore; awaitData returns as soon as a document arrives; a
limit closes the cursor once reached), collMod's cappedSize/cappedMax, and
the options and order surviving a restart.
"""

import threading

import pytest
from pymongo import CursorType
from pymongo.errors import OperationFailure, WriteError

from pymongo.write_concern import WriteConcern


def options(db, name):
    info = db.command("listCollections", filter={"name": name})["cursor"]["firstBatch"][0]
    return info["options"]


def test_create_options_listed_and_in_stats(db):
    db.create_collection("c", capped=True, size=10000, max=5)
    assert options(db, "c") == {"capped": True, "size": 10000, "max": 5}
    st = db.command("collStats", "c")
    assert st["capped"] is True and st["max"] == 5 and st["maxSize"] == 10000
    db.create_collection("nomax", capped=True, size=4096)
    assert options(db, "nomax") == {"capped": True, "size": 4096}
    assert db.command("collStats", "nomax")["max"] == 0
    agg = list(db.nomax.aggregate([{"$collStats": {"storageStats": {}}}]))
    assert agg[0]["storageStats"]["capped"] is True
    assert agg[0]["storageStats"]["maxSize"] == 4096
    db.create_collection("plain")
    assert db.command("collStats", "plain")["capped"] is False
    assert db.plain.options() == {}
    assert db.c.options()["capped"] is True


@pytest.mark.parametrize("opts,code,msg", [
    ({"capped": True}, 72, "the 'size' field is required when 'capped' is true"),
    ({"capped": True, "max": 3}, 72, "the 'size' field is required when 'capped' is true"),
    ({"size": 1000}, 72, "the 'capped' field needs to be true when either the 'size' or "
                         "'max' fields are present"),
    ({"capped": False, "max": 3}, 72, "the 'capped' field needs to be true"),
    ({"capped": True, "size": 0}, 51024, "BSON field 'size' value must be >= 1, actual value '0'"),
    ({"capped": True, "size": -5}, 51024, "must be >= 1"),
    ({"capped": True, "size": "x"}, 14, "wrong type"),
    ({"capped": True, "size": 1000, "max": 2 ** 31}, 51024, "'max' value must be < 2147483648"),
])
def test_create_errors(db, opts, code, msg):
    with pytest.raises(OperationFailure) as e:
        db.command(dict({"create": "bad"}, **opts))
    assert e.value.code == code
    assert msg in str(e.value.details["errmsg"])
    assert "bad" not in db.list_collection_names()


def test_insertion_order_and_natural(db):
    db.create_collection("c", capped=True, size=100000)
    ids = [5, "b", 1, 3.5, "a", 2]
    for i in ids:
        db.c.insert_one({"_id": i})
    assert [d["_id"] for d in db.c.find()] == ids
    assert [d["_id"] for d in db.c.find().sort("$natural", 1)] == ids
    assert [d["_id"] for d in db.c.find().sort("$natural", -1)] == ids[::-1]
    assert [d["_id"] for d in db.c.find().hint([("$natural", -1)])] == ids[::-1]
    assert [d["_id"] for d in db.c.find({"_id": {"$type": "string"}})] == ["b", "a"]
    # small batches resume in natural order
    assert [d["_id"] for d in db.c.find().batch_size(2)] == ids
    assert [d["_id"] for d in db.c.find().sort("_id", 1)] == [1, 2, 3.5, 5, "a", "b"]


def test_eviction_by_max(db):
    db.create_collection("c", capped=True, size=100000, max=3)
    for i in range(10):
        db.c.insert_one({"_id": 100 - i, "i": i})
    assert [d["i"] for d in db.c.find()] == [7, 8, 9]
    assert db.c.count_documents({}) == 3
    assert db.c.estimated_document_count() == 3
    db.c.insert_many([{"i": i} for i in range(10, 15)])
    assert [d["i"] for d in db.c.find()] == [12, 13, 14]


def test_eviction_by_size_and_indexes(db):
    db.create_collection("c", capped=True, size=5000)
    db.c.create_index("k")
    for i in range(100):
        db.c.insert_one({"_id": i, "k": i, "pad": "x" * 100})
    st = db.command("collStats", "c")
    assert st["size"] <= 5000
    left = [d["_id"] for d in db.c.find()]
    assert left == list(range(100 - len(left), 100)) and 30 <= len(left) < 50
    # the evicted documents left the secondary index too
    assert db.c.count_documents({"k": {"$lt": 100 - len(left)}}) == 0
    assert [d["_id"] for d in db.c.find({"k": {"$gte": 0}}).hint("k_1")] == left


def test_document_larger_than_size_is_refused(db):
    db.create_collection("c", capped=True, size=1000)
    db.c.insert_one({"_id": 1})
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": 2, "pad": "x" * 2000})
    assert e.value.code == 2
    assert "exceeds cappedMaxSize" in str(e.value)
    assert [d["_id"] for d in db.c.find()] == [1]


def test_delete_and_update(db):
    db.create_collection("c", capped=True, size=100000, max=4)
    db.c.insert_many([{"_id": i, "v": "a"} for i in range(4)])
    assert db.c.delete_one({"_id": 1}).deleted_count == 1
    # an update that grows the document keeps its place (allowed since 5.0)
    db.c.update_one({"_id": 2}, {"$set": {"v": "a much longer value"}})
    db.c.insert_one({"_id": 4})
    assert [d["_id"] for d in db.c.find()] == [0, 2, 3, 4]
    db.c.insert_one({"_id": 5})
    assert [d["_id"] for d in db.c.find()] == [2, 3, 4, 5]
    # a deleted _id may come back, at the end
    db.c.delete_one({"_id": 3})
    db.c.insert_one({"_id": 3})
    assert [d["_id"] for d in db.c.find()] == [2, 4, 5, 3]


def test_tailable_cursor_stays_open_and_sees_new_documents(db):
    db.create_collection("c", capped=True, size=100000)
    db.c.insert_many([{"_id": 1}, {"_id": 2}])
    cur = db.c.find(cursor_type=CursorType.TAILABLE)
    assert [d["_id"] for d in cur] == [1, 2]  # runs dry, but stays open
    assert cur.alive
    assert list(cur) == []
    assert cur.alive
    db.c.insert_many([{"_id": 3}, {"_id": 4}])
    assert [d["_id"] for d in cur] == [3, 4]
    cur.close()
    # a filtered tailable cursor only returns what matches
    cur = db.c.find({"_id": {"$gt": 2}}, cursor_type=CursorType.TAILABLE)
    assert [d["_id"] for d in cur] == [3, 4]
    db.c.insert_many([{"_id": 0}, {"_id": 10}])
    assert [d["_id"] for d in cur] == [10]
    cur.close()


def test_tailable_cursor_on_empty_collection(db):
    db.create_collection("c", capped=True, size=100000)
    cur = db.c.find(cursor_type=CursorType.TAILABLE)
    assert list(cur) == [] and cur.alive
    db.c.insert_one({"_id": "first"})
    assert [d["_id"] for d in cur] == ["first"]
    cur.close()


def test_await_data_returns_when_a_document_arrives(db, client):
    db.create_collection("c", capped=True, size=100000)
    db.c.insert_one({"_id": 0})
    cur = db.c.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(20000)
    assert next(cur)["_id"] == 0
    timer = threading.Timer(0.3, lambda: db.c.insert_one({"_id": 1}))
    timer.start()
    try:
        # blocks in getMore until the insert (long before the 20 s wait ends)
        assert next(cur)["_id"] == 1
    finally:
        timer.join()
    # with nothing new, getMore answers an empty batch once maxTimeMS passes
    cur2 = db.c.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(50)
    assert [d["_id"] for d in cur2] == [0, 1]
    assert list(cur2) == [] and cur2.alive
    # the server stays responsive while a getMore waits
    assert client.admin.command("ping")["ok"] == 1
    cur.close()
    cur2.close()


def test_killing_the_cursor_of_a_waiting_get_more_ends_it_at_once(db, client):
    """An awaitData getMore waiting for data ends as soon as its cursor is killed (by
    killCursors or by killSessions of its session), with 237 CursorKilled, as mongod
    interrupts the operation holding a killed cursor; not when its maxTimeMS passes."""
    import time
    db.create_collection("c", capped=True, size=100000)
    db.c.insert_one({"_id": 0})

    def waiting_get_more(cid, kill):
        out = {}

        def run():
            t0 = time.monotonic()
            try:
                db.command("getMore", cid, collection="c", maxTimeMS=20000)
            except OperationFailure as e:
                out["code"] = e.code
            out["s"] = time.monotonic() - t0
        th = threading.Thread(target=run)
        th.start()
        time.sleep(0.5)  # it is parked by now
        kill()
        th.join(30)
        return out

    cid = db.command("find", "c", tailable=True, awaitData=True)["cursor"]["id"]
    out = waiting_get_more(cid, lambda: db.command("killCursors", "c", cursors=[cid]))
    assert out.get("code") == 237 and out["s"] < 10, out
    with pytest.raises(OperationFailure) as e:  # then it is gone
        db.command("getMore", cid, collection="c")
    assert e.value.code == 43

    with client.start_session() as s:
        cid = db.command("find", "c", tailable=True, awaitData=True, session=s)["cursor"]["id"]
        lsid = s.session_id
        out = waiting_get_more(cid, lambda: client.admin.command("killSessions", [lsid]))
    assert out.get("code") == 237 and out["s"] < 10, out


def test_tailable_errors(db):
    db.create_collection("plain")
    db.plain.insert_one({"_id": 1})
    # (pymongo 3.11 turns a tailable cursor's errors into a dead cursor: use the command)
    with pytest.raises(OperationFailure) as e:
        db.command({"find": "plain", "tailable": True})
    assert e.value.code == 2
    assert "tailable cursor requested on non capped collection" in str(e.value)
    db.create_collection("c", capped=True, size=10000)
    with pytest.raises(OperationFailure) as e:
        db.command({"find": "c", "tailable": True, "sort": {"x": 1}})
    assert e.value.code == 2 and "{$natural: 1}" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        db.command({"find": "c", "tailable": True, "singleBatch": True})
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        db.command({"find": "c", "awaitData": True})
    assert e.value.code == 9


def test_tailable_cursor_with_limit_closes_once_the_limit_is_returned(db):
    db.create_collection("c", capped=True, size=100000)
    db.c.insert_many([{"_id": i} for i in range(5)])
    # the whole limit in the first batch: no cursor is left open
    r = db.command({"find": "c", "tailable": True, "limit": 2})["cursor"]
    assert [d["_id"] for d in r["firstBatch"]] == [0, 1] and r["id"] == 0
    # reached over getMores: the getMore that returns the last one closes it
    r = db.command({"find": "c", "tailable": True, "limit": 4, "batchSize": 1})["cursor"]
    assert [d["_id"] for d in r["firstBatch"]] == [0] and r["id"] != 0
    r = db.command({"getMore": r["id"], "collection": "c", "batchSize": 2})["cursor"]
    assert [d["_id"] for d in r["nextBatch"]] == [1, 2] and r["id"] != 0
    r = db.command({"getMore": r["id"], "collection": "c", "batchSize": 5})["cursor"]
    assert [d["_id"] for d in r["nextBatch"]] == [3] and r["id"] == 0
    # not reached yet: the cursor waits for more, and closes when later inserts reach it
    r = db.command({"find": "c", "tailable": True, "limit": 7})["cursor"]
    assert len(r["firstBatch"]) == 5 and r["id"] != 0
    cid = r["id"]
    db.c.insert_one({"_id": 5})
    r = db.command({"getMore": cid, "collection": "c"})["cursor"]
    assert [d["_id"] for d in r["nextBatch"]] == [5] and r["id"] == cid
    db.c.insert_many([{"_id": 6}, {"_id": 7}])
    r = db.command({"getMore": cid, "collection": "c"})["cursor"]
    assert [d["_id"] for d in r["nextBatch"]] == [6] and r["id"] == 0
    # through pymongo: the cursor is dead once the limit is read
    cur = db.c.find(cursor_type=CursorType.TAILABLE, limit=3)
    assert [d["_id"] for d in cur] == [0, 1, 2]
    assert not cur.alive


def test_coll_mod_capped_size_and_max(db):
    db.create_collection("c", capped=True, size=100000, max=10)
    db.c.insert_many([{"_id": i, "pad": "x" * 100} for i in range(10)])
    db.command("collMod", "c", cappedMax=3)
    assert options(db, "c") == {"capped": True, "size": 100000, "max": 3}
    assert db.command("collStats", "c")["max"] == 3
    assert db.c.count_documents({}) == 10  # nothing goes until the next insert
    db.c.insert_one({"_id": 10})
    assert [d["_id"] for d in db.c.find()] == [8, 9, 10]
    # a smaller size: the next insert evicts down to it
    db.command("collMod", "c", cappedMax=0, cappedSize=300)
    assert options(db, "c") == {"capped": True, "size": 300, "max": 2147483647}
    st = db.command("collStats", "c")
    assert st["maxSize"] == 300 and st["max"] == 2147483647
    db.c.insert_many([{"_id": i, "pad": "y" * 100} for i in range(11, 15)])
    ids = [d["_id"] for d in db.c.find()]
    assert ids[-1] == 14 and len(ids) == 2 and db.c.count_documents({}) == 2
    # larger again: nothing is evicted
    db.command("collMod", "c", cappedSize=100000)
    db.c.insert_many([{"_id": i} for i in range(20, 30)])
    assert db.c.count_documents({}) == 12
    # max given where none was: listed after size
    db.create_collection("nomax", capped=True, size=4096)
    db.command("collMod", "nomax", cappedMax=2)
    assert options(db, "nomax") == {"capped": True, "size": 4096, "max": 2}
    db.nomax.insert_many([{"_id": i} for i in range(4)])
    assert [d["_id"] for d in db.nomax.find()] == [2, 3]


def test_coll_mod_capped_errors(db):
    db.create_collection("c", capped=True, size=5000)
    db.create_collection("plain")
    for cmd, code, msg in [
        ({"collMod": "plain", "cappedSize": 5000}, 72, "Collection must be capped."),
        ({"collMod": "plain", "cappedMax": 5}, 72, "Collection must be capped."),
        ({"collMod": "c", "cappedSize": 0}, 51024,
         "BSON field 'cappedSize' value must be >= 1, actual value '0'"),
        ({"collMod": "c", "cappedSize": 2 ** 51}, 51024,
         "BSON field 'cappedSize' value must be <= 1125899906842624, actual value "
         "'2251799813685248'"),
        ({"collMod": "c", "cappedMax": 2 ** 31}, 51024,
         "BSON field 'cappedMax' value must be < 2147483648, actual value '2147483648'"),
        ({"collMod": "c", "cappedSize": "x"}, 14,
         "BSON field 'collMod.cappedSize' is the wrong type 'string', expected types "
         "'[long, int, decimal, double]'"),
        ({"collMod": "plain", "cappedSize": 0}, 51024,  # the range before the capped check
         "BSON field 'cappedSize' value must be >= 1, actual value '0'"),
    ]:
        with pytest.raises(OperationFailure) as e:
            db.command(cmd)
        assert (e.value.code, e.value.details["errmsg"]) == (code, msg), cmd
    assert options(db, "c") == {"capped": True, "size": 5000}
    assert db.plain.options() == {}


def test_tailable_position_lost(db):
    db.create_collection("c", capped=True, size=100000, max=3)
    db.c.insert_many([{"_id": i} for i in range(3)])
    cur = db.c.find(cursor_type=CursorType.TAILABLE)
    assert [d["_id"] for d in cur] == [0, 1, 2]
    db.c.insert_many([{"_id": i} for i in range(3, 10)])  # evicts 2, the cursor's place
    assert list(cur) == [] and not cur.alive  # pymongo hides the error: the cursor is dead
    r = db.command({"find": "c", "tailable": True, "batchSize": 1})
    db.c.insert_many([{"_id": i} for i in range(10, 20)])
    with pytest.raises(OperationFailure) as e:
        db.command({"getMore": r["cursor"]["id"], "collection": "c"})
    assert e.value.code == 136
    assert "CappedPositionLost" == e.value.details["codeName"]


def test_drop_and_recreate(db):
    db.create_collection("c", capped=True, size=10000, max=2)
    db.c.insert_many([{"_id": i} for i in range(5)])
    db.c.drop()
    db.create_collection("c")
    db.c.insert_many([{"_id": i} for i in range(5)])
    assert db.c.count_documents({}) == 5
    assert db.command("collStats", "c")["capped"] is False


@pytest.mark.parametrize("hard", [False, True])
def test_restart_keeps_options_and_order(fresh_server, hard):
    s = fresh_server
    s.start()
    c = s.client()
    db = c.capdb
    db.create_collection("c", capped=True, size=100000, max=4)
    for i in [9, 3, 7, 1, 5]:
        db.c.insert_one({"_id": i}) if not hard else db.c.with_options(
            write_concern=WriteConcern(j=True)).insert_one({"_id": i})
    c.close()
    if hard:
        s.kill9()
    s.restart()
    c = s.client()
    db = c.capdb
    assert options(db, "c") == {"capped": True, "size": 100000, "max": 4}
    assert [d["_id"] for d in db.c.find()] == [3, 7, 1, 5]
    assert db.c.count_documents({}) == 4
    db.c.insert_one({"_id": 0})  # positions continue after the restart
    assert [d["_id"] for d in db.c.find()] == [7, 1, 5, 0]
    c.close()


def test_convert_to_capped_and_clone(db):
    db.c.insert_many([{"_id": i, "k": i, "pad": "x" * 50} for i in range(50)])
    db.c.create_index("k")
    db.command({"cloneCollectionAsCapped": "c", "toCollection": "copy", "size": 100000})
    assert options(db, "copy") == {"capped": True, "size": 100000}
    assert [d["_id"] for d in db.copy.find()] == list(range(50))
    db.command({"cloneCollectionAsCapped": "c", "toCollection": "small", "size": 1000})
    left = [d["_id"] for d in db.small.find()]
    assert 0 < len(left) < 50 and left == list(range(50 - len(left), 50))  # the newest stay
    with pytest.raises(OperationFailure) as e:
        db.command({"cloneCollectionAsCapped": "c", "toCollection": "copy", "size": 1000})
    assert e.value.code == 48
    with pytest.raises(OperationFailure) as e:
        db.command({"cloneCollectionAsCapped": "nothere", "toCollection": "x", "size": 1000})
    assert e.value.code == 26
    db.command({"convertToCapped": "c", "size": 2000})
    assert options(db, "c") == {"capped": True, "size": 2000}
    left = [d["_id"] for d in db.c.find()]
    assert 0 < len(left) < 50 and left == list(range(50 - len(left), 50))
    assert [ix["name"] for ix in db.c.list_indexes()] == ["_id_"]
    db.c.insert_one({"_id": 100, "pad": "x" * 50})
    assert [d["_id"] for d in db.c.find()][-1] == 100
    assert sorted(db.list_collection_names()) == ["c", "copy", "small"]
    with pytest.raises(OperationFailure) as e:
        db.command({"convertToCapped": "c"})
    assert e.value.code == 40414


def test_waiting_get_more_ends_with_its_connection_and_at_shutdown(fresh_server):
    import socket
    import struct
    import time

    import bson

    s = fresh_server
    s.start()
    c = s.client()
    db = c.capdb
    db.create_collection("c", capped=True, size=100000)
    db.c.insert_one({"_id": 1})
    cid = db.command({"find": "c", "tailable": True, "awaitData": True})["cursor"]["id"]
    # a raw getMore that will wait 60 s, from a client that then goes away
    body = struct.pack("<I", 0) + b"\x00" + bson.BSON.encode(
        {"getMore": cid, "collection": "c", "maxTimeMS": 60000, "$db": "capdb"})
    raw = socket.create_connection(("127.0.0.1", s.port))
    raw.sendall(struct.pack("<iiii", 16 + len(body), 7, 0, 2013) + body)
    time.sleep(0.2)
    raw.close()
    assert db.command("ping")["ok"] == 1
    # shutdown while a getMore waits: the server still stops cleanly
    cur = db.c.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(60000)
    assert next(cur)["_id"] == 1  # the next one is a getMore that waits
    stopper = threading.Timer(0.3, lambda: s.signal(15))
    stopper.start()
    try:
        with pytest.raises(Exception):
            list(cur)
    finally:
        stopper.join()
    assert s.wait(timeout=30) == 0
    assert "Gave up waiting for outstanding requests" not in s.log_text()
    c.close()
