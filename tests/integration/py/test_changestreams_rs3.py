"""
Change streams on a three-member set (issue 27): a pymongo watch() reads
every insert exactly once while the primary is killed (kill -9) in the
middle of the writes; the driver's automatic resume continues on the new
primary from its last resume token.  Also: only majority-committed writes
are seen (a stream on the primary shows nothing while both secondaries are
down), and a stream served by a secondary.
"""
import threading
import time

import pymongo
from pymongo.errors import (AutoReconnect, ConnectionFailure, DuplicateKeyError,
                            NotMasterError, OperationFailure, ServerSelectionTimeoutError)
from pymongo.write_concern import WriteConcern

from test_replset3 import rs3, wait_for, direct  # noqa: F401 (fixture)

RETRYABLE = (AutoReconnect, ConnectionFailure, NotMasterError, ServerSelectionTimeoutError)
N = 300


def set_client(members):
    hosts = ",".join("127.0.0.1:%d" % m.port for m in members)
    return pymongo.MongoClient("mongodb://%s/?replicaSet=rs0&heartbeatFrequencyMS=500" % hosts,
                               serverSelectionTimeoutMS=30000, retryWrites=False)


def test_coll_mod_replicates_and_secondaries_see_modify(rs3):  # noqa: F811
    """collMod is an oplog entry: secondaries apply it and their streams
    show the modify event (showExpandedEvents); a secondary stores a
    transaction's pre-images as it applies it, under the primary's UUID."""
    c = set_client(rs3)
    wait_for(lambda: c.primary)
    secondary = [m for m in rs3 if m.port != c.primary[1]][0]
    db = c.get_database("csmod", write_concern=WriteConcern("majority", wtimeout=20000))
    db.create_collection("m")
    db.m.create_index("a")
    with direct(secondary) as sc:
        wait_for(lambda: "m" in sc.csmod.list_collection_names())
        # w: "majority" of three need not include this secondary: the stream
        # must open after it applied createIndexes, or that is its first event
        wait_for(lambda: "a_1" in [i["name"] for i in sc.csmod.m.list_indexes()])
        r = sc.csmod.command("aggregate", "m", cursor={},
                             pipeline=[{"$changeStream": {"showExpandedEvents": True}}])
        cid = r["cursor"]["id"]
        db.command("collMod", "m", validator={"a": {"$type": "int"}},
                   index={"name": "a_1", "hidden": True})
        ev = None
        end = time.time() + 20
        while ev is None and time.time() < end:
            b = sc.csmod.command("getMore", cid, collection="m", maxTimeMS=500)
            ev = (b["cursor"]["nextBatch"] or [None])[0]
        assert ev is not None and ev["operationType"] == "modify"
        assert ev["operationDescription"] == {"validator": {"a": {"$type": "int"}},
                                              "index": {"name": "a_1", "hidden": True}}
        info = sc.csmod.command("listCollections", filter={"name": "m"})
        assert info["cursor"]["firstBatch"][0]["options"]["validator"] == {
            "a": {"$type": "int"}}
        ix = {i["name"]: i for i in sc.csmod.m.list_indexes()}
        assert ix["a_1"].get("hidden") is True
        sc.csmod.command("killCursors", "m", cursors=[cid])
        # a transaction's pre-images, stored by the secondary as it applies it
        db.create_collection("img", changeStreamPreAndPostImages={"enabled": True})
        db.img.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])
        with c.start_session() as s:
            with s.start_transaction():
                db.img.update_one({"_id": 1}, {"$inc": {"v": 10}}, session=s)
                db.img.update_one({"_id": 2}, {"$inc": {"v": 20}}, session=s)
        r = sc.csmod.command("aggregate", "img", cursor={}, pipeline=[
            {"$changeStream": {"fullDocumentBeforeChange": "required",
                               "startAtOperationTime": db.command("ping")["operationTime"]}},
            {"$match": {"operationType": "update"}}])
        got = list(r["cursor"]["firstBatch"])
        end = time.time() + 20
        while len(got) < 2 and time.time() < end:
            b = sc.csmod.command("getMore", r["cursor"]["id"], collection="img", maxTimeMS=500)
            got += b["cursor"]["nextBatch"]
        assert [e["fullDocumentBeforeChange"] for e in got] == [{"_id": 1, "v": 1},
                                                                {"_id": 2, "v": 2}]
    c.drop_database("csmod")
    c.close()


def test_failover_no_event_lost_or_repeated(rs3):  # noqa: F811
    c = set_client(rs3)
    coll = c.test.get_collection("cs", write_concern=WriteConcern("majority", wtimeout=20000))
    coll.insert_one({"_id": -1})
    wait_for(lambda: c.primary)
    seen = []
    stop = threading.Event()

    def reader():
        with coll.watch(max_await_time_ms=500) as st:
            while not stop.is_set() and len([s for s in seen if s >= 0]) < N:
                try:
                    ev = st.try_next()
                except OperationFailure:
                    raise
                if ev is not None and ev["operationType"] == "insert":
                    seen.append(ev["documentKey"]["_id"])

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.5)
    killed = False
    for i in range(N):
        if i == N // 3 and not killed:
            primary = [m for m in rs3 if m.port == c.primary[1]][0]
            primary.kill9()
            killed = True
        for _ in range(200):
            try:
                coll.insert_one({"_id": i})
                break
            except DuplicateKeyError:
                break  # an earlier attempt committed
            except RETRYABLE + (OperationFailure,):
                time.sleep(0.1)
        else:
            raise AssertionError("insert %d never succeeded" % i)
    t.join(timeout=60)
    stop.set()
    assert not t.is_alive()
    ids = [s for s in seen if s >= 0]
    assert sorted(ids) == list(range(N)), "lost or repeated: %s" % (
        sorted(set(range(N)) ^ set(ids)) or [x for x in ids if ids.count(x) > 1][:10])
    c.close()


def test_only_majority_committed_and_secondary_streams(rs3):  # noqa: F811
    c = set_client(rs3)
    wait_for(lambda: c.primary)
    primary = [m for m in rs3 if m.port == c.primary[1]][0]
    others = [m for m in rs3 if m is not primary]
    with direct(others[0]) as sc:
        # a secondary serves a stream too
        sst = sc.test.cs.watch(max_await_time_ms=200)
        c.test.get_collection("cs", write_concern=WriteConcern("majority")).insert_one(
            {"_id": 1})
        ev = None
        end = time.time() + 10
        while ev is None and time.time() < end:
            ev = sst.try_next()
        assert ev is not None and ev["documentKey"] == {"_id": 1}
        with direct(primary) as pc:
            pst = pc.test.cs.watch(max_await_time_ms=200)
            for m in others:
                m.kill9()
            try:
                pc.test.get_collection("cs", write_concern=WriteConcern(w=1)).insert_one(
                    {"_id": "unreplicated"})
            except RETRYABLE:
                pass
            # w:1 acknowledged, but no majority has it: the stream shows nothing
            end = time.time() + 1.2
            while time.time() < end:
                try:
                    ev = pst.try_next()
                except RETRYABLE + (OperationFailure,):
                    break  # stepped down (no majority): no event either
                assert ev is None, ev
            pst.close()
        sst.close()
    c.close()
