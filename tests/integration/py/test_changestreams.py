"""
Change streams (issue 27) with pymongo 3.11's watch() on a one-member
replica set: the events' shapes, resume tokens (mongod's KeyString hex, in
event order), postBatchResumeToken, resumeAfter / startAfter /
startAtOperationTime, ChangeStreamHistoryLost, fullDocument and
fullDocumentBeforeChange, showExpandedEvents, the stages allowed after
$changeStream, and a waiting getMore woken by a write.  The failover test
(a three-member set, primary killed, every event seen exactly once) is in
test_changestreams_rs3.py.
"""
import threading
import time

import pymongo
import pytest
from bson.binary import Binary
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure

from sabled import Sabled, one_member_set, trim_oplog


@pytest.fixture(scope="module")
def rs1():
    with one_member_set(["--oplogSizeMB", "1", "--setParameter",
                         "expiredChangeStreamPreImageRemovalJobSleepSecs=1"]) as s_c:
        yield s_c


def images_of(db, name):
    """The filter of db.name's rows in config.system.preimages: their
    _id.nsUUID is the collection's UUID (listCollections' info.uuid)."""
    uuid = db.command("listCollections", filter={"name": name})["cursor"]["firstBatch"][0][
        "info"]["uuid"]
    return {"_id.nsUUID": Binary(uuid.bytes, 4)}


@pytest.fixture
def db(rs1, request):
    _, c = rs1
    name = "cs_" + request.node.name[5:40]
    c.drop_database(name)
    return c[name]


class RawStream:
    """A change stream through aggregate/getMore commands, for the options
    pymongo 3.11's watch() does not know (fullDocumentBeforeChange,
    showExpandedEvents)."""

    def __init__(self, db, coll, spec, pipeline=()):
        self.db, self.coll = db, coll
        r = db.command("aggregate", coll if coll else 1,
                       pipeline=[{"$changeStream": spec}] + list(pipeline), cursor={})
        self.id, self.buf = r["cursor"]["id"], list(r["cursor"]["firstBatch"])

    def next(self):
        end = time.time() + 10
        while not self.buf and time.time() < end:
            g = self.db.command("getMore", self.id,
                                collection=self.coll or "$cmd.aggregate", maxTimeMS=500)
            self.buf = list(g["cursor"]["nextBatch"])
        return self.buf.pop(0)


def test_standalone_refuses():
    with Sabled() as s:
        s.start()
        c = s.client()
        with pytest.raises(OperationFailure) as e:
            c.test.c.watch().try_next()
        assert e.value.code == 40573
        with pytest.raises(OperationFailure) as e:
            c.admin.command("setClusterParameter",
                            {"changeStreamOptions": {"preAndPostImages": {"expireAfterSeconds": 9}}})
        assert e.value.code == 20


def test_crud_events_and_shapes(db):
    db.create_collection("c")
    with db.c.watch() as st:
        db.c.insert_one({"_id": 1, "a": 1, "arr": [1, 2, 3], "sub": {"x": 1}})
        db.c.update_one({"_id": 1}, {"$set": {"a": 2, "sub.y": 2}, "$unset": {"sub.x": ""}})
        db.c.update_one({"_id": 1}, {"$pop": {"arr": 1}})
        db.c.replace_one({"_id": 1}, {"b": 1})
        db.c.delete_one({"_id": 1})
        evs = [st.next() for _ in range(5)]
    assert [e["operationType"] for e in evs] == ["insert", "update", "update", "replace",
                                                 "delete"]
    ins, upd, pop, rep, dele = evs
    assert list(ins) == ["_id", "operationType", "clusterTime", "wallTime", "fullDocument",
                         "ns", "documentKey"]
    assert ins["fullDocument"] == {"_id": 1, "a": 1, "arr": [1, 2, 3], "sub": {"x": 1}}
    assert ins["ns"] == {"db": db.name, "coll": "c"} and ins["documentKey"] == {"_id": 1}
    assert isinstance(ins["clusterTime"], Timestamp)
    assert upd["updateDescription"] == {"updatedFields": {"a": 2, "sub.y": 2},
                                        "removedFields": ["sub.x"], "truncatedArrays": []}
    assert "fullDocument" not in upd
    assert pop["updateDescription"]["truncatedArrays"] == [{"field": "arr", "newSize": 2}]
    assert rep["fullDocument"] == {"_id": 1, "b": 1}
    assert dele["documentKey"] == {"_id": 1} and "fullDocument" not in dele
    # tokens: mongod's KeyString hex, in event order
    toks = [e["_id"]["_data"] for e in evs]
    assert all(t.startswith("82") for t in toks)
    assert toks == sorted(toks) and len(set(toks)) == 5


def test_drop_rename_invalidate_and_db_cluster_streams(rs1, db):
    _, c = rs1
    db.a.insert_one({"_id": 0})
    dbst, cst = db.watch(), c.watch()
    with db.a.watch() as st:
        db.a.insert_one({"_id": 1})
        db.a.rename("b")
        ins, ren, inv = st.next(), st.next(), st.next()
        assert ins["operationType"] == "insert"
        assert ren["operationType"] == "rename" and ren["to"] == {"db": db.name, "coll": "b"}
        assert inv["operationType"] == "invalidate" and set(inv) == {
            "_id", "operationType", "clusterTime", "wallTime"}
        assert not st.alive
    db.b.drop()
    db.x.insert_one({"_id": 2})
    got = [dbst.next()["operationType"] for _ in range(4)]
    assert got == ["insert", "rename", "drop", "insert"]
    evs = [cst.next() for _ in range(4)]
    assert [e["operationType"] for e in evs] == got
    c.drop_database(db.name)
    assert dbst.next()["operationType"] == "dropDatabase"
    assert dbst.next()["operationType"] == "invalidate"
    assert cst.next()["operationType"] == "dropDatabase"
    assert cst.alive  # the deployment's stream goes on
    dbst.close()
    cst.close()


def test_resume_after_start_after_and_operation_time(db):
    db.c.insert_one({"_id": 0})
    st = db.c.watch()
    for i in range(1, 6):
        db.c.insert_one({"_id": i})
    evs = [st.next() for _ in range(5)]
    st.close()
    with db.c.watch(resume_after=evs[1]["_id"]) as r:
        assert [r.next()["documentKey"]["_id"] for _ in range(3)] == [3, 4, 5]
    with db.c.watch(start_after=evs[3]["_id"]) as r:
        assert r.next()["documentKey"]["_id"] == 5
    with db.c.watch(start_at_operation_time=evs[2]["clusterTime"]) as r:
        assert [r.next()["documentKey"]["_id"] for _ in range(3)] == [3, 4, 5]
    # after an invalidate only startAfter may resume
    with db.c.watch() as st:
        db.c.drop()
        st.next()
        inv = st.next()
    with pytest.raises(OperationFailure) as e:
        db.c.watch(resume_after=inv["_id"]).try_next()
    assert e.value.code == 260
    with db.c.watch(start_after=inv["_id"]) as r:
        db.c.insert_one({"_id": "new"})
        assert r.next()["documentKey"] == {"_id": "new"}


def test_post_batch_resume_token(db):
    db.create_collection("c")
    r = db.command("aggregate", "c", pipeline=[{"$changeStream": {}}], cursor={})
    pbrt0 = r["cursor"]["postBatchResumeToken"]["_data"]
    db.c.insert_many([{"_id": i} for i in range(3)])
    db.other.insert_one({"_id": 1})  # not ours: the token still moves past it
    g = db.command("getMore", r["cursor"]["id"], collection="c", batchSize=2)
    b = g["cursor"]["nextBatch"]
    assert len(b) == 2
    # a batch cut short: the token is the last event sent, not the one held back
    assert g["cursor"]["postBatchResumeToken"] == b[-1]["_id"]
    g = db.command("getMore", r["cursor"]["id"], collection="c", maxTimeMS=50)
    assert len(g["cursor"]["nextBatch"]) == 1
    last = g["cursor"]["nextBatch"][0]["_id"]["_data"]
    pbrt = g["cursor"]["postBatchResumeToken"]["_data"]
    assert pbrt0 < last <= pbrt
    assert pbrt > last  # the other collection's insert moved the high-water mark
    db.command("killCursors", "c", cursors=[r["cursor"]["id"]])


def test_history_lost(db):
    # a 1 MB oplog: far older than its oldest entry
    with pytest.raises(OperationFailure) as e:
        db.c.watch(start_at_operation_time=Timestamp(1, 1)).try_next()
    assert e.value.code == 286
    st = db.c.watch()
    db.c.insert_one({"_id": "first"})
    tok = st.next()["_id"]
    st.close()
    for i in range(25):  # wrap the oplog past the token
        db.filler.insert_one({"pad": "x" * 60000, "i": i})
    trim_oplog(db.client, db.filler)
    with pytest.raises(OperationFailure) as e:
        db.c.watch(resume_after=tok).try_next()
    assert e.value.code == 286


def test_history_starts_at_the_oldest_entry_as_the_oplog_wraps(db, rs1):
    # The oldest entry is looked for from where it was last found (the
    # entries evicted below it stay in WiredTiger as tombstones): each wrap
    # moves it, a stream starting exactly there opens, one before it fails.
    _, c = rs1
    oplog = c.local["oplog.rs"]
    seen = []
    for rnd in range(4):
        for i in range(8):
            db.filler.insert_one({"pad": "x" * 60000, "r": rnd, "i": i})
        trim_oplog(c, db.filler)
        oldest = next(oplog.find({}, {"ts": 1}).sort("$natural", 1).limit(1))["ts"]
        seen.append(oldest)
        db.c.watch(start_at_operation_time=oldest).close()
        before = Timestamp(oldest.time, oldest.inc - 1) if oldest.inc > 1 else \
            Timestamp(oldest.time - 1, 4294967295)
        with pytest.raises(OperationFailure) as e:
            db.c.watch(start_at_operation_time=before).try_next()
        assert e.value.code == 286, (rnd, oldest)
    assert seen == sorted(seen) and len(set(seen)) == len(seen), seen


def test_full_document_modes_and_pre_images(db):
    db.create_collection("c", changeStreamPreAndPostImages={"enabled": True})
    db.create_collection("plain")
    db.c.insert_one({"_id": 1, "v": 0})
    db.plain.insert_one({"_id": 1, "v": 0})
    look = db.c.watch(full_document="updateLookup")
    avail = RawStream(db, "c", {"fullDocument": "whenAvailable",
                                "fullDocumentBeforeChange": "required"})
    plain = RawStream(db, "plain", {"fullDocument": "whenAvailable",
                                    "fullDocumentBeforeChange": "whenAvailable"})
    req = db.plain.watch(full_document="required")
    db.c.update_one({"_id": 1}, {"$inc": {"v": 1}})
    db.c.update_one({"_id": 1}, {"$inc": {"v": 1}})
    e1, e2 = look.next(), look.next()
    # updateLookup reads the document as it is when the event is read
    assert e1["fullDocument"] == {"_id": 1, "v": 2} == e2["fullDocument"]
    db.c.delete_one({"_id": 1})
    db.plain.update_one({"_id": 1}, {"$inc": {"v": 1}})
    a1, a2, a3 = avail.next(), avail.next(), avail.next()
    assert a1["fullDocument"] == {"_id": 1, "v": 1} and a2["fullDocument"] == {"_id": 1, "v": 2}
    assert a1["fullDocumentBeforeChange"] == {"_id": 1, "v": 0}
    assert a2["fullDocumentBeforeChange"] == {"_id": 1, "v": 1}
    assert a3["operationType"] == "delete"
    assert a3["fullDocumentBeforeChange"] == {"_id": 1, "v": 2}
    p = plain.next()
    assert p["fullDocument"] is None and p["fullDocumentBeforeChange"] is None
    with pytest.raises(OperationFailure) as e:
        req.next()
    assert e.value.code == 47
    look.close()


def test_expanded_events_and_pipeline(db):
    st = RawStream(db, None, {"showExpandedEvents": True})
    db.create_collection("c")
    db.c.create_index("a")
    db.c.insert_one({"_id": 1, "a": 1})
    db.c.drop_index("a_1")
    evs = [st.next() for _ in range(4)]
    assert [e["operationType"] for e in evs] == ["create", "createIndexes", "insert",
                                                 "dropIndexes"]
    assert all("collectionUUID" in e for e in evs)
    assert evs[1]["operationDescription"]["indexes"][0]["key"] == {"a": 1}
    # a view has no UUID: its create event has no collectionUUID (mongod 7.0's manual)
    db.create_collection("v", viewOn="c", pipeline=[])
    e = st.next()
    assert e["operationType"] == "create" and e["ns"]["coll"] == "v"
    assert e["operationDescription"] == {"viewOn": "c", "pipeline": []}
    assert "collectionUUID" not in e
    db.c.insert_one({"_id": 2, "a": {"1": 0}, "arr": [{"1": 0}], "b": 0})
    db.c.update_one({"_id": 2}, {"$set": {"a.1": 1, "arr.0.1": 1, "b": 1}})
    st.next()
    ud = st.next()["updateDescription"]
    # only paths with a numeric field name (or a dot) are spelled out; indices as ints
    assert ud["disambiguatedPaths"] == {"a.1": ["a", "1"], "arr.0.1": ["arr", 0, "1"]}
    pipe = [{"$match": {"operationType": "insert", "fullDocument.k": {"$gt": 1}}},
            {"$project": {"fullDocument.k": 1, "operationType": 1}},
            {"$addFields": {"extra": True}}]
    with db.c.watch(pipe) as st:
        db.c.insert_many([{"_id": 10, "k": 1}, {"_id": 11, "k": 5, "z": 1}])
        e = st.next()
        assert e["fullDocument"] == {"k": 5} and e["extra"] is True and "_id" in e
    with pytest.raises(OperationFailure) as e:
        db.c.watch([{"$group": {"_id": 1}}]).try_next()
    assert e.value.code == 20
    with pytest.raises(OperationFailure) as e:
        db.c.watch([{"$unsupported": 1}]).try_next()
    assert e.value.code == 40324
    with db.c.watch([{"$project": {"_id": 0}}]) as st:
        db.c.insert_one({"_id": 12})
        with pytest.raises(OperationFailure) as e:
            st.next()
        assert e.value.code == 280


def test_waiting_getmore_is_woken_by_a_write(db):
    db.create_collection("c")
    with db.c.watch(max_await_time_ms=5000) as st:
        t = threading.Timer(0.3, lambda: db.c.insert_one({"_id": 1}))
        t0 = time.time()
        t.start()
        ev = st.next()
        waited = time.time() - t0
        t.join()
    assert ev["documentKey"] == {"_id": 1}
    # woken by the write (0.3 s), not at the end of the 5 s wait
    assert 0.25 < waited < 2.0


def test_waiting_streams_wait_on_through_writes_elsewhere(rs1, db):
    """Streams waiting on a collection nobody writes while another one is
    written: the wakes their scope has nothing for leave them waiting
    without running their getMore (metrics.changeStreams.idleWakes); the
    first write of theirs still wakes each at once, and a wait that ends
    empty still reports the high-water mark past the other writes."""
    _, c = rs1
    db.create_collection("q")
    db.create_collection("c")
    streams = [RawStream(db, "q", {}) for _ in range(8)]

    def idle_wakes():
        return c.admin.command("serverStatus")["metrics"]["changeStreams"]["idleWakes"]

    results, errors = {}, []

    def wait(st):
        try:
            t0 = time.time()
            g = db.command("getMore", st.id, collection="q", maxTimeMS=5000)
            results[st.id] = (g["cursor"]["nextBatch"], time.time() - t0)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    idle0 = idle_wakes()
    ts = [threading.Thread(target=wait, args=(st,)) for st in streams]
    for t in ts:
        t.start()
    time.sleep(0.2)
    for i in range(20):  # each write moves the wake point past the last one
        db.c.insert_one({"_id": i})
        time.sleep(0.04)
    assert not results  # nothing for q: all still waiting
    db.q.insert_one({"_id": "mine"})
    t0 = time.time()
    for t in ts:
        t.join(10)
    assert not errors
    assert len(results) == len(streams)
    for batch, waited in results.values():
        assert [e["documentKey"] for e in batch] == [{"_id": "mine"}]
    assert time.time() - t0 < 2.5  # woken by the write, not at the end of the 5 s wait
    # 8 streams, about 20 wake point moves with nothing for them: most skipped
    assert idle_wakes() - idle0 >= 40
    # an empty wait's token moves past the writes elsewhere, as a run's would
    st = streams[0]
    token = results[st.id][0][0]["_id"]["_data"]
    t = threading.Timer(0.1, lambda: db.c.insert_one({"_id": "after"}))
    t.start()
    g = db.command("getMore", st.id, collection="q", maxTimeMS=600)
    t.join()
    assert g["cursor"]["nextBatch"] == []
    assert g["cursor"]["postBatchResumeToken"]["_data"] > token
    for s in streams:
        db.command("killCursors", "q", cursors=[s.id])


def test_expanded_event_shapes_and_modify(db):
    """create, createIndexes, dropIndexes and modify as 7.0 gives them:
    collectionUUID after clusterTime, operationDescription, and for modify
    (collMod) stateBeforeChange with the options before the change."""
    st = RawStream(db, None, {"showExpandedEvents": True})
    db.create_collection("c")
    uuid = db.command("listCollections", filter={"name": "c"})["cursor"]["firstBatch"][0][
        "info"]["uuid"]
    db.c.create_index("a")
    db.command("collMod", "c", index={"keyPattern": {"a": 1}, "hidden": True})
    db.command("collMod", "c", validator={"a": {"$exists": True}}, validationLevel="moderate")
    db.command("collMod", "c")
    db.c.drop_index("a_1")
    cre, cix, hid, val, empty, dix = [st.next() for _ in range(6)]
    head = ["_id", "operationType", "clusterTime", "collectionUUID", "wallTime", "ns",
            "operationDescription"]
    assert list(cre) == head and cre["collectionUUID"] == uuid
    assert cre["operationDescription"] == {"idIndex": {"v": 2, "key": {"_id": 1},
                                                       "name": "_id_"}}
    assert list(cix) == head and list(dix) == head
    spec = {"v": 2, "key": {"a": 1}, "name": "a_1"}
    assert cix["operationDescription"] == {"indexes": [spec]}
    assert dix["operationDescription"] == {"indexes": [dict(spec, hidden=True)]}
    assert [e["operationType"] for e in (hid, val, empty)] == ["modify"] * 3
    assert list(hid) == head + ["stateBeforeChange"]
    assert hid["ns"] == {"db": db.name, "coll": "c"} and hid["collectionUUID"] == uuid
    # the index named as mongod logs it, whatever the command named it by
    assert hid["operationDescription"] == {"index": {"name": "a_1", "hidden": True}}
    assert hid["stateBeforeChange"] == {"collectionOptions": {"uuid": uuid},
                                        "indexOptions": {"hidden": False}}
    assert val["operationDescription"] == {"validator": {"a": {"$exists": True}},
                                           "validationLevel": "moderate"}
    assert val["stateBeforeChange"] == {"collectionOptions": {"uuid": uuid}}
    assert empty["operationDescription"] == {}
    before = empty["stateBeforeChange"]["collectionOptions"]
    assert before["uuid"] == uuid and before["validator"] == {"a": {"$exists": True}}
    assert before["validationLevel"] == "moderate"
    # without showExpandedEvents there are no modify events
    with db.c.watch() as plain:
        db.command("collMod", "c", validationLevel="strict")
        db.c.insert_one({"_id": 1, "a": 1})
        assert plain.next()["operationType"] == "insert"
    # a refused collMod logs nothing
    with pytest.raises(OperationFailure):
        db.command("collMod", "c", index={"name": "nope", "hidden": True})
    db.c.insert_one({"_id": 2, "a": 1})
    evs = [st.next() for _ in range(3)]
    assert [e["operationType"] for e in evs] == ["modify", "insert", "insert"]


def wait_until(pred, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.2)
    raise AssertionError("timed out")


def first_event_or_error(db, coll, spec):
    """The first update event of a stream opened with spec, or the OperationFailure."""
    try:
        return RawStream(db, coll, spec, [{"$match": {"operationType": "update"}}]).next()
    except OperationFailure as e:
        return e


def test_cluster_parameter_and_pre_image_expiry(rs1, db):
    _, c = rs1
    admin = c.admin
    default = {"_id": "changeStreamOptions", "clusterParameterTime": Timestamp(0, 0),
               "preAndPostImages": {"expireAfterSeconds": "off"}}
    for arg in ("changeStreamOptions", "*", ["changeStreamOptions"]):
        assert admin.command("getClusterParameter", arg)["clusterParameters"] == [default]
    bad = [({"changeStreamOptions": {"preAndPostImages": {"expireAfterSeconds": 0}}}, 2),
           ({"changeStreamOptions": {"preAndPostImages": {"expireAfterSeconds": "on"}}}, 2),
           ({"changeStreamOptions": {"preAndPostImages": {"other": 1}}}, 40415),
           ({"changeStreamOptions": {"other": {}}}, 40415),
           ({"noSuchParameter": {}}, 4)]
    for arg, code in bad:
        with pytest.raises(OperationFailure) as e:
            admin.command("setClusterParameter", arg)
        assert e.value.code == code, arg
    with pytest.raises(OperationFailure) as e:
        admin.command("getClusterParameter", "noSuchParameter")
    assert e.value.code == 4
    preimages = c.config["system.preimages"]
    db.create_collection("c", changeStreamPreAndPostImages={"enabled": True})
    db.c.insert_one({"_id": 1, "v": 0})
    before = preimages.count_documents({})
    t0 = db.command("ping")["operationTime"]
    db.c.update_one({"_id": 1}, {"$set": {"v": 1}})
    spec = {"startAtOperationTime": t0, "fullDocument": "whenAvailable",
            "fullDocumentBeforeChange": "required"}
    ev = first_event_or_error(db, "c", spec)
    assert ev["fullDocumentBeforeChange"] == {"_id": 1, "v": 0}
    assert ev["fullDocument"] == {"_id": 1, "v": 1}
    assert preimages.count_documents({}) == before + 1
    try:
        admin.command("setClusterParameter",
                      {"changeStreamOptions": {"preAndPostImages": {"expireAfterSeconds": 1}}})
        got = admin.command("getClusterParameter", "changeStreamOptions")["clusterParameters"]
        assert got[0]["preAndPostImages"] == {"expireAfterSeconds": 1}
        assert isinstance(got[0]["preAndPostImages"]["expireAfterSeconds"], int)
        assert got[0]["clusterParameterTime"] > Timestamp(0, 0)
        # the remover (every second here) deletes the images older than a second
        wait_until(lambda: preimages.count_documents({}) == 0)
    finally:
        admin.command("setClusterParameter",
                      {"changeStreamOptions": {"preAndPostImages": {"expireAfterSeconds": "off"}}})
    # "required" now fails as mongod's, "whenAvailable" gives null for both images
    for req in ({"fullDocumentBeforeChange": "required"}, {"fullDocument": "required"}):
        err = first_event_or_error(db, "c", dict(req, startAtOperationTime=t0))
        assert isinstance(err, OperationFailure) and err.code == 47, err
    ev = first_event_or_error(db, "c", {"startAtOperationTime": t0,
                                        "fullDocument": "whenAvailable",
                                        "fullDocumentBeforeChange": "whenAvailable"})
    assert ev["fullDocument"] is None and ev["fullDocumentBeforeChange"] is None
    # "off": images stay
    db.c.update_one({"_id": 1}, {"$set": {"v": 2}})
    assert preimages.count_documents({}) == 1
    got = admin.command("getClusterParameter", "changeStreamOptions")["clusterParameters"]
    assert got[0]["preAndPostImages"] == {"expireAfterSeconds": "off"}


def test_pre_images_go_with_their_oplog_entries(rs1, db):
    _, c = rs1
    preimages = c.config["system.preimages"]
    db.create_collection("c", changeStreamPreAndPostImages={"enabled": True})
    db.c.insert_one({"_id": 1, "v": 0})
    db.c.update_one({"_id": 1}, {"$set": {"v": 1}})
    mine = images_of(db, "c")
    assert preimages.count_documents(mine) == 1
    for i in range(25):  # wrap the 1 MB oplog past the update's entry
        db.filler.insert_one({"pad": "x" * 60000, "i": i})
    trim_oplog(c, db.filler)
    wait_until(lambda: preimages.count_documents(mine) == 0)
    db.c.update_one({"_id": 1}, {"$set": {"v": 2}})  # a new one stays
    time.sleep(2.5)
    assert preimages.count_documents(mine) == 1


def test_redact_stage_and_in_a_stream(db):
    db.r.insert_many([
        {"_id": 1, "level": 1, "sub": {"level": 2, "x": 1},
         "arr": [{"level": 1, "y": 1}, {"level": 3, "y": 2}, 5, [{"level": 9}]]},
        {"_id": 2, "level": 5, "sub": {"level": 1}}])
    descend = {"$cond": {"if": {"$lte": ["$level", 2]}, "then": "$$DESCEND",
                         "else": "$$PRUNE"}}
    got = list(db.r.aggregate([{"$redact": descend}]))
    assert got == [{"_id": 1, "level": 1, "sub": {"level": 2, "x": 1},
                    "arr": [{"level": 1, "y": 1}, 5, []]}]
    keep = {"$cond": [{"$eq": ["$level", 5]}, "$$KEEP", "$$PRUNE"]}
    assert [d["_id"] for d in db.r.aggregate([{"$redact": keep}])] == [2]
    # $$ROOT stays the whole document below the top
    root = {"$cond": [{"$eq": ["$$ROOT._id", 1]}, "$$DESCEND", "$$PRUNE"]}
    assert [d["_id"] for d in db.r.aggregate([{"$redact": root}])] == [1]
    with pytest.raises(OperationFailure) as e:
        list(db.r.aggregate([{"$redact": "keep?"}]))
    assert e.value.code == 17053
    # in a change stream: a pruned event is not returned, a pruned part is left out
    secret = {"$cond": [{"$eq": ["$secret", True]}, "$$PRUNE", "$$DESCEND"]}
    with db.c.watch([{"$redact": secret}]) as st:
        db.c.insert_one({"_id": 1, "secret": True})
        db.c.insert_one({"_id": 2, "inner": {"secret": True, "z": 1}, "k": 1})
        e1, e2 = st.next(), st.next()
    assert "fullDocument" not in e1 and e1["documentKey"] == {"_id": 1}
    assert e2["fullDocument"] == {"_id": 2, "k": 1}
    with db.c.watch([{"$redact": {"$cond": [{"$eq": ["$operationType", "delete"]},
                                            "$$KEEP", "$$PRUNE"]}}]) as st:
        db.c.insert_one({"_id": 3})
        db.c.delete_one({"_id": 3})
        assert st.next()["operationType"] == "delete"


def test_split_large_event(db):
    """Events over 16 MB: BSONObjectTooLarge (10334) without
    $changeStreamSplitLargeEvent; with it, fragments of at most 16 MB with
    splitEvent {fragment, of} and tokens that resume inside the event."""
    db.create_collection("c")
    # a 500 kB document (the oplog here is 1 MB), copied 36 times into the event by
    # $addFields: about 18 MB
    grow = {"$addFields": {"big%d" % i: "$fullDocument.a" for i in range(36)}}
    split = {"$changeStreamSplitLargeEvent": {}}
    whole = RawStream(db, "c", {}, [grow])
    parts = RawStream(db, "c", {}, [grow, split])
    db.c.insert_one({"_id": 1, "a": "x" * 500000})
    db.c.insert_one({"_id": 2})
    f1, f2 = parts.next(), parts.next()
    assert list(f1)[:2] == ["_id", "splitEvent"] and list(f2)[:2] == ["_id", "splitEvent"]
    assert f1["splitEvent"] == {"fragment": 1, "of": 2}
    assert f2["splitEvent"] == {"fragment": 2, "of": 2}
    assert f1["operationType"] == "insert" and f1["fullDocument"]["_id"] == 1
    rest = set(f1) | set(f2)
    assert {"big0", "big35", "ns", "documentKey", "clusterTime"} <= rest
    assert not (set(f1) & set(f2)) - {"_id", "splitEvent"}
    t1, t2 = f1["_id"]["_data"], f2["_id"]["_data"]
    assert t1 < t2
    small = parts.next()
    assert "splitEvent" not in small and small["documentKey"] == {"_id": 2}
    assert t2 < small["_id"]["_data"]
    with pytest.raises(OperationFailure) as e:
        whole.next()
    assert e.value.code == 10334
    # resuming from the first fragment gives the second, then what follows
    r = RawStream(db, "c", {"resumeAfter": f1["_id"]}, [grow, split])
    again = r.next()
    assert again["_id"] == f2["_id"] and again["splitEvent"] == {"fragment": 2, "of": 2}
    assert r.next()["documentKey"] == {"_id": 2}
    with pytest.raises(OperationFailure) as e:
        RawStream(db, "c", {"resumeAfter": f1["_id"]}, [grow])
    assert e.value.code == 280
    for pipe, code in (([split, {"$match": {}}], 40601),
                       ([{"$changeStreamSplitLargeEvent": {"x": 1}}], 7182801)):
        with pytest.raises(OperationFailure) as e:
            RawStream(db, "c", {}, pipe)
        assert e.value.code == code


def test_transaction_events(rs1, db):
    """A transaction's operations: one event each in order, with lsid and
    txnNumber; an update inside it is an update (updateDescription), as
    outside."""
    _, c = rs1
    db.create_collection("c")
    db.c.insert_one({"_id": 1, "v": 0, "w": 1})
    with db.c.watch() as st:
        with c.start_session() as s:
            with s.start_transaction():
                db.c.insert_one({"_id": 2}, session=s)
                db.c.update_one({"_id": 1}, {"$set": {"v": 1}, "$unset": {"w": ""}},
                                session=s)
                db.c.replace_one({"_id": 2}, {"r": 1}, session=s)
                db.c.delete_one({"_id": 2}, session=s)
        evs = [st.next() for _ in range(4)]
    assert [e["operationType"] for e in evs] == ["insert", "update", "replace", "delete"]
    assert evs[1]["updateDescription"] == {"updatedFields": {"v": 1}, "removedFields": ["w"],
                                           "truncatedArrays": []}
    assert all("lsid" in e and e["txnNumber"] == evs[0]["txnNumber"] for e in evs)
    assert len({e["clusterTime"] for e in evs}) == 1
    toks = [e["_id"]["_data"] for e in evs]
    assert toks == sorted(toks) and len(set(toks)) == 4
    # pre- and post-images of a transaction's operations, each its own
    db.create_collection("img", changeStreamPreAndPostImages={"enabled": True})
    db.img.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])
    st = RawStream(db, "img", {"fullDocument": "required",
                               "fullDocumentBeforeChange": "required"})
    with c.start_session() as s:
        with s.start_transaction():
            db.img.update_one({"_id": 1}, {"$inc": {"v": 10}}, session=s)
            db.img.update_one({"_id": 2}, {"$inc": {"v": 20}}, session=s)
            db.img.delete_one({"_id": 1}, session=s)
    u1, u2, d1 = st.next(), st.next(), st.next()
    assert (u1["fullDocumentBeforeChange"], u1["fullDocument"]) == ({"_id": 1, "v": 1},
                                                                     {"_id": 1, "v": 11})
    assert (u2["fullDocumentBeforeChange"], u2["fullDocument"]) == ({"_id": 2, "v": 2},
                                                                     {"_id": 2, "v": 22})
    assert d1["operationType"] == "delete"
    assert d1["fullDocumentBeforeChange"] == {"_id": 1, "v": 11}


def test_many_streams_share_a_scope(rs1, db):
    """55 streams on one collection (they share one read of the oplog) and
    streams of other scopes and options, all reading while writes run: each
    sees exactly its events, in order, each once, with the same resume
    tokens as a stream that reads the oplog itself (fullDocument
    whenAvailable does); a stream resuming from before the shared read
    began, and one resuming from the middle, see the rest exactly."""
    _, c = rs1
    db2 = c[db.name + "_2"]
    c.drop_database(db2.name)
    for coll in (db.c, db.other, db2.c):
        coll.insert_one({"_id": "seed"})
    with c.start_session() as s:
        db.c.update_one({"_id": "seed"}, {"$set": {"s": 1}}, session=s)
        seed_time = s.operation_time
    # what the writer does, in order: (namespace, operationType, _id)
    ops = []
    for i in range(120):
        ops.append(("c", "insert", i))
        if i % 3 == 0:
            ops.append(("other", "insert", i))
        if i % 10 == 5:
            ops.append(("c", "update", i - 5))
        if i % 25 == 24:
            ops.append(("c", "delete", i - 20))
        if i % 7 == 0:
            ops.append(("db2", "insert", i))
    colls = {"c": db.c, "other": db.other, "db2": db2.c}

    def want(pred):
        return [(op, k) for ns, op, k in ops if pred(ns, op, k)]

    streams = []  # (name, opener, expected [(operationType, _id)])
    on_c = want(lambda ns, op, k: ns == "c")
    for i in range(55):
        streams.append(("c%d" % i, lambda: db.c.watch(max_await_time_ms=100), on_c))
    streams += [
        ("other", lambda: db.other.watch(max_await_time_ms=100),
         want(lambda ns, op, k: ns == "other")),
        ("other2", lambda: db.other.watch(max_await_time_ms=100),
         want(lambda ns, op, k: ns == "other")),
        ("db", lambda: db.watch(max_await_time_ms=100),
         want(lambda ns, op, k: ns in ("c", "other"))),
        ("cluster", lambda: c.watch(max_await_time_ms=100), list(want(lambda *a: True))),
        ("even", lambda: db.c.watch([{"$match": {"operationType": "insert",
                                                  "documentKey._id": {"$mod": [2, 0]}}}],
                                    max_await_time_ms=100),
         want(lambda ns, op, k: ns == "c" and op == "insert" and k % 2 == 0)),
        ("lookup", lambda: db.c.watch(full_document="updateLookup", max_await_time_ms=100),
         on_c),
        ("own", lambda: db.c.watch(full_document="whenAvailable", max_await_time_ms=100),
         on_c),
        # from before the shared read began: the seed's update first
        ("early", lambda: db.c.watch(start_at_operation_time=seed_time,
                                     max_await_time_ms=100),
         [("update", "seed")] + on_c),
    ]
    seen = {name: [] for name, _, _ in streams}
    errors = []
    opened = threading.Barrier(len(streams) + 1)
    done = threading.Event()

    def reader(name, opener, expected):
        try:
            with opener() as st:
                opened.wait(30)
                end = time.time() + 90
                while len(seen[name]) < len(expected) and time.time() < end:
                    ev = st.try_next()
                    if ev is not None:
                        seen[name].append(ev)
                done.wait(90)
                ev = st.try_next()  # nothing more comes
                if ev is not None:
                    seen[name].append(ev)
        except Exception as e:  # reported below
            errors.append((name, e))
            opened.abort()

    ts = [threading.Thread(target=reader, args=s) for s in streams]
    for t in ts:
        t.start()
    opened.wait(60)
    for ns, op, k in ops:
        if op == "insert":
            colls[ns].insert_one({"_id": k, "x": k})
        elif op == "update":
            colls[ns].update_one({"_id": k}, {"$set": {"y": 1}})
        else:
            colls[ns].delete_one({"_id": k})
    time.sleep(0.5)
    done.set()
    for t in ts:
        t.join(120)
    assert not errors, errors
    key = lambda e: (e["operationType"], e["documentKey"]["_id"])
    for name, _, expected in streams:
        assert [key(e) for e in seen[name]] == expected, name
        toks = [e["_id"]["_data"] for e in seen[name]]
        assert toks == sorted(toks) and len(set(toks)) == len(toks), name
    own = [e["_id"] for e in seen["own"]]
    for name in ["c%d" % i for i in range(55)] + ["lookup", "even"]:
        mine = {e["_id"]["_data"] for e in seen[name]}
        assert mine <= {t["_data"] for t in own}, name
        if name != "even":
            assert [e["_id"] for e in seen[name]] == own, name
    assert [e["_id"] for e in seen["early"][1:]] == own
    # the shared events are the stream's own: updateLookup added the document
    for e in seen["lookup"]:
        if e["operationType"] == "update" and e["fullDocument"] is not None:
            assert e["fullDocument"]["_id"] == e["documentKey"]["_id"]
            assert e["fullDocument"]["y"] == 1
    assert all("fullDocument" not in e for e in seen["c0"] if e["operationType"] == "update")
    # resuming in the middle: exactly the events after the token
    mid = seen["c0"][len(on_c) // 2]
    with db.c.watch(resume_after=mid["_id"], max_await_time_ms=100) as st:
        rest = []
        end = time.time() + 30
        while len(rest) < len(on_c) // 2 - 1 + len(on_c) % 2 and time.time() < end:
            ev = st.try_next()
            if ev is not None:
                rest.append(ev)
    assert [e["_id"] for e in rest] == own[len(on_c) // 2 + 1:]
    c.drop_database(db2.name)


def test_stream_behind_the_shared_ring(rs1, db):
    """A stream that falls more than the shared ring's 4,096 events behind
    the streams of its scope reads the oplog itself and still sees every
    event once, in order, with the tokens the others got (and a stream
    whose entries the oplog has lost since fails with 286 as before)."""
    db.create_collection("c")

    def read(st, n):
        got = []
        end = time.time() + 60
        while len(got) < n and time.time() < end:
            got += st.buf
            st.buf = []
            if len(got) < n:
                g = db.command("getMore", st.id, collection="c", maxTimeMS=200)
                st.buf = list(g["cursor"]["nextBatch"])
        st.buf = got[n:] + st.buf
        return got[:n]

    ahead, behind = RawStream(db, "c", {}), RawStream(db, "c", {})
    db.c.insert_many([{"_id": i} for i in range(100)])
    first = read(ahead, 100)
    assert read(behind, 10) == first[:10]  # both begin on the ring
    # the ring moves past behind's point; without retryable writes' lsid the
    # entries are small enough for the 1 MB oplog to keep behind's
    plain = pymongo.MongoClient("127.0.0.1", rs1[0].port, directConnection=True,
                                retryWrites=False)
    for b in range(4):
        plain[db.name].c.insert_many([{"_id": 100 + b * 1050 + i} for i in range(1050)])
        first += read(ahead, 1050)
    plain.close()
    rest = read(behind, 4290)
    assert [e["_id"] for e in rest] == [e["_id"] for e in first[10:]]
    assert [e["documentKey"]["_id"] for e in first] == list(range(4300))


def test_ring_served_stream_that_fell_off_the_oplog(rs1, db):
    """Streams served from the shared ring whose position the 1 MB oplog has
    since overwritten fail with 286 as a stream reading the oplog itself
    does, though the ring still holds their events: one that read an event
    and stopped, and one that never read any; the stream that kept up goes
    on."""
    db.create_collection("c")

    def drain(st, n):
        got = list(st.buf)
        st.buf = []
        end = time.time() + 30
        while len(got) < n and time.time() < end:
            g = db.command("getMore", st.id, collection="c", maxTimeMS=200)
            got += g["cursor"]["nextBatch"]
        return got

    reader, stopped, idle = (RawStream(db, "c", {}) for _ in range(3))
    db.c.insert_one({"_id": "first"})
    assert [e["documentKey"]["_id"] for e in drain(reader, 1)] == ["first"]
    assert [e["documentKey"]["_id"] for e in drain(stopped, 1)] == ["first"]
    for i in range(25):  # 1.5 MB of events: the oplog wraps, the ring keeps them
        db.c.insert_one({"_id": i, "pad": "x" * 60000})
        assert len(drain(reader, 1)) == 1
    trim_oplog(db.client, db.filler)
    for st in (stopped, idle):
        with pytest.raises(OperationFailure) as e:
            db.command("getMore", st.id, collection="c", maxTimeMS=200)
        assert e.value.code == 286, st
    db.c.insert_one({"_id": "last"})
    assert [e["documentKey"]["_id"] for e in drain(reader, 1)] == ["last"]


def test_image_streams_use_the_shared_read(rs1, db):
    """Streams with fullDocument whenAvailable / required and
    fullDocumentBeforeChange are served from their scope's shared read (the
    oplog entries read alone do not move) and get the same events as a stream
    with those options that reads the oplog itself (it starts before the
    shared read began)."""
    _, c = rs1
    db.create_collection("c", changeStreamPreAndPostImages={"enabled": True})
    db.c.insert_one({"_id": 0, "v": 0})
    with c.start_session() as s:
        db.c.update_one({"_id": 0}, {"$set": {"v": 1}}, session=s)
        start = s.operation_time

    def read(st, n):
        got = []
        end = time.time() + 30
        while len(got) < n and time.time() < end:
            got.append(st.next())
        return got

    def own():
        return c.admin.command("serverStatus")["metrics"]["changeStreams"][
            "oplogEntriesRead"]["own"]

    specs = [{}, {"fullDocument": "whenAvailable", "fullDocumentBeforeChange": "whenAvailable"},
             {"fullDocument": "required", "fullDocumentBeforeChange": "required"},
             {"fullDocument": "updateLookup", "fullDocumentBeforeChange": "required"},
             {"fullDocumentBeforeChange": "whenAvailable"}]
    streams = [RawStream(db, "c", spec) for spec in specs]
    before = own()
    db.c.insert_one({"_id": 1, "v": 0})
    db.c.update_one({"_id": 1}, {"$inc": {"v": 1}})
    db.c.replace_one({"_id": 1}, {"w": 5})
    db.c.update_one({"_id": 0}, {"$unset": {"v": 1}})
    db.c.delete_one({"_id": 1})
    got = [read(st, 5) for st in streams]
    assert own() == before  # no stream read the oplog alone
    dflt, avail, req, look, pre = got
    assert [e["operationType"] for e in avail] == ["insert", "update", "replace", "update",
                                                   "delete"]
    assert avail == req
    assert avail[1]["fullDocument"] == {"_id": 1, "v": 1}
    assert avail[1]["fullDocumentBeforeChange"] == {"_id": 1, "v": 0}
    assert avail[2]["fullDocumentBeforeChange"] == {"_id": 1, "v": 1}
    assert avail[3]["fullDocument"] == {"_id": 0}
    assert avail[3]["fullDocumentBeforeChange"] == {"_id": 0, "v": 1}
    assert avail[4]["fullDocumentBeforeChange"] == {"_id": 1, "w": 5}
    assert "fullDocumentBeforeChange" not in avail[0]
    assert look[1]["fullDocument"] is None and look[3]["fullDocument"] == {"_id": 0}
    assert [list(e) for e in look] == [list(e) for e in avail]
    assert all("fullDocument" not in e for e in (dflt[1], dflt[3], pre[1]))
    assert [e["fullDocumentBeforeChange"] for e in pre[1:]] == \
        [e["fullDocumentBeforeChange"] for e in avail[1:]]
    # a stream that reads the oplog itself, from before the shared read began
    alone = RawStream(db, "c", dict(specs[2], startAtOperationTime=start))
    first = read(alone, 6)
    assert own() > before
    assert first[0]["fullDocumentBeforeChange"] == {"_id": 0, "v": 0}
    assert first[1:] == req


def test_older_images_going_leave_the_shared_read_serving(rs1, db):
    """The remover deleting images of entries older than a feed's ring (here:
    an entry the 1 MB oplog dropped) does not make the streams that want
    images read the oplog alone: only the ring's events up to the newest entry
    whose image went are looked up again (CI failed on this in session 29 when
    another collection's old images went mid-test)."""
    _, c = rs1
    preimages = c.config["system.preimages"]
    db.create_collection("old", changeStreamPreAndPostImages={"enabled": True})
    db.old.insert_one({"_id": 1, "v": 0})
    db.old.update_one({"_id": 1}, {"$set": {"v": 1}})
    old_image = images_of(db, "old")
    assert preimages.count_documents(old_image) == 1
    for i in range(6):
        db.filler.insert_one({"pad": "x" * 60000, "i": i})
    db.create_collection("c", changeStreamPreAndPostImages={"enabled": True})
    db.c.insert_one({"_id": 0, "v": 0})

    def own():
        return c.admin.command("serverStatus")["metrics"]["changeStreams"][
            "oplogEntriesRead"]["own"]

    plain = RawStream(db, "c", {})
    images = RawStream(db, "c", {"fullDocumentBeforeChange": "required"})
    before = own()
    db.c.update_one({"_id": 0}, {"$set": {"v": 1}})
    db.c.update_one({"_id": 0}, {"$set": {"v": 2}})
    assert [e["operationType"] for e in (plain.next(), plain.next())] == ["update"] * 2
    for i in range(6, 18):  # wrap the oplog past the old update's entry
        db.filler.insert_one({"pad": "x" * 60000, "i": i})
    trim_oplog(c, db.filler)
    wait_until(lambda: preimages.count_documents(old_image) == 0)
    got = [images.next(), images.next()]
    assert [e["fullDocumentBeforeChange"] for e in got] == [{"_id": 0, "v": 0},
                                                            {"_id": 0, "v": 1}]
    assert own() == before  # served from the ring, its images still good


def test_streams_at_one_point_share_a_batch(rs1, db):
    """Plain streams woken at the same point get one batch built for them
    all (issue 27's cost): each still gets exactly its events, with the
    tokens and postBatchResumeToken of a stream that copies each event
    (fullDocument whenAvailable); a stream left behind, one cut by its
    batchSize and one resuming in the middle get theirs, not another's."""
    db.create_collection("c")
    plain = [RawStream(db, "c", {}) for _ in range(6)]
    ref = RawStream(db, "c", {"fullDocument": "whenAvailable"})  # inserts only: same events

    def read(st, n, **kw):
        got, pbrts = st.buf, []  # a resumed stream's first batch has events
        st.buf = []
        end = time.time() + 20
        while len(got) < n and time.time() < end:
            g = db.command("getMore", st.id, collection="c", maxTimeMS=500, **kw)["cursor"]
            got += g["nextBatch"]
            if g["nextBatch"]:
                pbrts.append((g["postBatchResumeToken"], g["nextBatch"][-1]["_id"]))
        return got, pbrts

    def ids(evs):
        return [e["documentKey"]["_id"] for e in evs]

    db.c.insert_many([{"_id": i, "v": "x" * 20} for i in range(30)])
    want, _ = read(ref, 30)
    assert ids(want) == list(range(30))
    for st in plain:
        got, pbrts = read(st, 30)
        assert got == want
        assert all(p == last for p, last in pbrts)  # the last event sent, each batch
    # streams at different points: five read the next round, one is left behind
    db.c.insert_many([{"_id": i} for i in range(30, 50)])
    want2, _ = read(ref, 20)
    for st in plain[:5]:
        assert read(st, 20)[0] == want2
    db.c.insert_many([{"_id": i} for i in range(50, 60)])
    want3, _ = read(ref, 10)
    for st in plain[:4]:
        assert read(st, 10)[0] == want3
    behind, _ = read(plain[5], 30)
    assert behind == want2 + want3
    # a batchSize under the batch: its own, cut where it says
    cut, pbrts = read(plain[4], 10, batchSize=3)
    assert cut == want3 and [len(b) for b in (cut[:3], cut[3:6], cut[6:9])] == [3, 3, 3]
    assert all(p == last for p, last in pbrts)
    # a stream resuming in the middle of a round reads exactly what follows
    mid = RawStream(db, "c", {"resumeAfter": want2[9]["_id"]})
    assert read(mid, 20)[0] == want2[10:] + want3
    for st in plain + [ref, mid]:
        db.command("killCursors", "c", cursors=[st.id])


def test_getmore_refused_at_once_not_after_waiting(db):
    """A change stream's getMore with nothing to read parks before it runs
    (issue 27's cost); one the getMore refuses still fails at once, and a
    plain one still waits for a write."""
    db.create_collection("c")
    st = RawStream(db, "c", {})
    db.command("getMore", st.id, collection="c", maxTimeMS=50)  # up to now: it would wait
    t0 = time.time()
    for kw, code in [(dict(collection="other", maxTimeMS=3000), 13),
                     (dict(collection="c", maxTimeMS=-1), 2),
                     (dict(collection="c", maxTimeMS=3000, batchSize=-1), 2),
                     (dict(collection="c", maxTimeMS=3000, comment="x", foo=1), 40415)]:
        with pytest.raises(OperationFailure) as e:
            db.command("getMore", st.id, **kw)
        assert e.value.code == code, kw
    assert time.time() - t0 < 2.0
    t = threading.Timer(0.3, lambda: db.c.insert_one({"_id": 1}))
    t0 = time.time()
    t.start()
    g = db.command("getMore", st.id, collection="c", maxTimeMS=5000)
    t.join()
    assert [e["documentKey"] for e in g["cursor"]["nextBatch"]] == [{"_id": 1}]
    assert 0.25 < time.time() - t0 < 2.0
    t0 = time.time()
    g = db.command("getMore", st.id, collection="c", maxTimeMS=300)  # nothing: the wait ends
    assert g["cursor"]["nextBatch"] == [] and 0.25 < time.time() - t0 < 2.0
    db.command("killCursors", "c", cursors=[st.id])
