"""
Time-series collections (create with `timeseries`, optional
expireAfterSeconds) and clustered collections (create with `clusteredIndex`)
as a MongoDB 7.0 user sees them: create's option checks and error codes,
listCollections (type "timeseries", the stored options with their defaults;
options.clusteredIndex), listIndexes (the default {meta: 1, time: 1} index; the
clustered index instead of _id_), writes that need a date in the timeField,
queries over the measurements, expiry by the TTL monitor, and options that
survive a restart.
"""

import datetime
import itertools
import time

import pytest
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

from sabled import Sabled

NOW = datetime.datetime.utcnow().replace(microsecond=0)


@pytest.fixture(scope="module")
def srv():
    s = Sabled()
    try:
        s.start(["--setParameter", "ttlMonitorSleepSecs=1"])
        yield s
    finally:
        s.cleanup()


_n = itertools.count()


@pytest.fixture
def db(srv):
    c = srv.client()
    d = c["ts_%d" % next(_n)]
    try:
        yield d
    finally:
        c.drop_database(d.name)
        c.close()


def coll_info(db, name):
    infos = list(db.list_collections(filter={"name": name}))
    assert len(infos) == 1
    return infos[0]


def code_of(db, cmd):
    with pytest.raises(OperationFailure) as e:
        db.command(cmd)
    return e.value.code, e.value.details.get("errmsg")


# ---- time-series: create and listCollections ---------------------------------

def test_create_and_list(db):
    db.command({"create": "w", "timeseries": {"timeField": "t", "metaField": "m",
                                              "granularity": "minutes"},
                "expireAfterSeconds": 604800})
    info = coll_info(db, "w")
    assert info["type"] == "timeseries"
    assert info["options"] == {"timeseries": {"timeField": "t", "metaField": "m",
                                              "granularity": "minutes",
                                              "bucketMaxSpanSeconds": 86400},
                               "expireAfterSeconds": 604800}
    assert info["info"] == {"readOnly": False}
    assert "idIndex" not in info
    # nameOnly keeps the type; a filter on it works; no system.buckets collection is listed
    assert {"name": "w", "type": "timeseries"} in list(
        db.list_collections(filter={}, nameOnly=True))
    assert [i["name"] for i in db.list_collections(filter={"type": "timeseries"})] == ["w"]
    assert db.list_collection_names() == ["w"]
    # a second create of the same name fails as for any collection
    assert code_of(db, {"create": "w", "timeseries": {"timeField": "t"}})[0] == 48


@pytest.mark.parametrize("ts, shown", [
    ({"timeField": "t"}, {"timeField": "t", "granularity": "seconds",
                          "bucketMaxSpanSeconds": 3600}),
    ({"timeField": "t", "granularity": "hours"},
     {"timeField": "t", "granularity": "hours", "bucketMaxSpanSeconds": 2592000}),
    ({"timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 3600},
     {"timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 3600}),
    ({"timeField": "t", "bucketMaxSpanSeconds": 600, "bucketRoundingSeconds": 600},
     {"timeField": "t", "bucketRoundingSeconds": 600, "bucketMaxSpanSeconds": 600}),
])
def test_defaults(db, ts, shown):
    db.command({"create": "w", "timeseries": ts})
    assert coll_info(db, "w")["options"] == {"timeseries": shown}


@pytest.mark.parametrize("cmd, code, msg", [
    ({"timeseries": {}}, 40414,
     "BSON field 'create.timeseries.timeField' is missing but a required field"),
    ({"timeseries": {"timeField": 1}}, 14,
     "BSON field 'create.timeseries.timeField' is the wrong type 'int', expected type 'string'"),
    ({"timeseries": "t"}, 14, None),
    ({"timeseries": {"timeField": "t", "x": 1}}, 40415,
     "BSON field 'create.timeseries.x' is an unknown field."),
    ({"timeseries": {"timeField": "t", "granularity": "days"}}, 2,
     "Enumeration value 'days' for field 'create.timeseries.granularity' is not a valid value."),
    ({"timeseries": {"timeField": "a.b"}}, 72, "'timeField' must be a top-level field"),
    ({"timeseries": {"timeField": "t", "metaField": "_id"}}, 72, "'metaField' cannot be \"_id\""),
    ({"timeseries": {"timeField": "t", "metaField": "t"}}, 72,
     "'metaField' cannot be the same as 'timeField'"),
    ({"timeseries": {"timeField": "t", "metaField": "m.x"}}, 72,
     "'metaField' must be a top-level field"),
    ({"timeseries": {"timeField": "t"}, "validator": {"a": 1}}, 72,
     "'timeseries' is not allowed with 'validator'"),
    ({"timeseries": {"timeField": "t"}, "capped": True, "size": 100}, 72,
     "'timeseries' is not allowed with 'capped'"),
    ({"timeseries": {"timeField": "t", "granularity": "minutes",
                     "bucketMaxSpanSeconds": 3600}}, 72,
     "Time-series 'bucketMaxSpanSeconds' cannot be set to a value other than the default of "
     "86400 for the provided granularity"),
    ({"timeseries": {"timeField": "t", "granularity": "minutes",
                     "bucketRoundingSeconds": 60}}, 72,
     "Time-series 'bucketRoundingSeconds' cannot be set alongside the granularity parameter"),
    ({"timeseries": {"timeField": "t", "bucketMaxSpanSeconds": 60}}, 72,
     "Time-series 'bucketRoundingSeconds' must be equal to 'bucketMaxSpanSeconds'"),
    ({"timeseries": {"timeField": "t", "bucketMaxSpanSeconds": 60,
                     "bucketRoundingSeconds": 30}}, 72,
     "Time-series 'bucketRoundingSeconds' must be equal to 'bucketMaxSpanSeconds'"),
    ({"timeseries": {"timeField": "t", "bucketMaxSpanSeconds": 0,
                     "bucketRoundingSeconds": 0}}, 51024,
     "BSON field 'create.timeseries.bucketMaxSpanSeconds' value must be >= 1, actual value '0'"),
    ({"timeseries": {"timeField": "t", "bucketMaxSpanSeconds": "x"}}, 14, None),
    ({"timeseries": {"timeField": "t"}, "expireAfterSeconds": -1}, 72,
     "TTL index 'expireAfterSeconds' option cannot be less than 0"),
    ({"timeseries": {"timeField": "t"}, "expireAfterSeconds": "x"}, 14, None),
    ({"expireAfterSeconds": 10}, 72,
     "'expireAfterSeconds' is only supported on time-series collections or when the "
     "'clusteredIndex' option is specified"),
])
def test_create_errors(db, cmd, code, msg):
    got_code, got_msg = code_of(db, dict({"create": "w"}, **cmd))
    assert got_code == code
    if msg is not None:
        assert msg in got_msg
    assert "w" not in db.list_collection_names()


# ---- time-series: writes and reads ---------------------------------------------

@pytest.fixture
def weather(db):
    db.command({"create": "w", "timeseries": {"timeField": "t", "metaField": "m"}})
    docs = [{"t": NOW - datetime.timedelta(minutes=i), "m": {"sensor": i % 3}, "temp": 10 + i}
            for i in range(12)]
    docs.append({"t": NOW, "temp": 99})  # the metaField is optional
    db.w.insert_many(docs)
    return db


def test_time_field_must_be_a_date(weather):
    db = weather
    msg = "'t' must be present and contain a valid BSON UTC datetime value"
    for bad in ({"temp": 1}, {"t": "2024-01-01", "m": 1}, {"t": 1700000000000}):
        with pytest.raises(WriteError) as e:
            db.w.insert_one(bad)
        assert e.value.code == 2
        assert e.value.details["errmsg"] == msg
    with pytest.raises(BulkWriteError) as e:
        db.w.insert_many([{"t": NOW}, {"t": None}, {"t": NOW}], ordered=False)
    r = e.value.details
    assert r["nInserted"] == 2
    assert [(w["index"], w["code"]) for w in r["writeErrors"]] == [(1, 2)]
    # an update may not take the date away either
    with pytest.raises(WriteError) as e:
        db.w.update_one({"temp": 10}, {"$unset": {"t": 1}})
    assert e.value.code == 2
    assert db.w.count_documents({}) == 15


def test_queries_on_measurements(weather):
    db = weather
    since = NOW - datetime.timedelta(minutes=3)
    got = list(db.w.find({"t": {"$gte": since}}, {"_id": 0, "temp": 1}).sort("t", -1))
    assert [d["temp"] for d in got] == [10, 99, 11, 12, 13] or \
        [d["temp"] for d in got] == [99, 10, 11, 12, 13]
    assert db.w.count_documents({"m.sensor": 0}) == 4
    out = list(db.w.aggregate([{"$match": {"m": {"$exists": True}}},
                               {"$group": {"_id": "$m.sensor", "n": {"$sum": 1},
                                           "max": {"$max": "$temp"}}},
                               {"$sort": {"_id": 1}}]))
    assert out == [{"_id": 0, "n": 4, "max": 19}, {"_id": 1, "n": 4, "max": 20},
                   {"_id": 2, "n": 4, "max": 21}]
    assert db.w.delete_many({"t": {"$lt": NOW - datetime.timedelta(minutes=9)}}).deleted_count == 2
    assert db.w.update_many({"m.sensor": 1}, {"$set": {"checked": True}}).modified_count == 3
    assert db.w.count_documents({"checked": True}) == 3
    assert db.w.estimated_document_count() == 11


# ---- measurements that share an _id -------------------------------------------
# _id is not unique in a time-series collection: MongoDB stores measurements in
# buckets, and every read, update and delete by _id sees all of them.

def test_duplicate_ids_insert_and_find(db):
    db.command({"create": "w", "timeseries": {"timeField": "t", "metaField": "m"}})
    db.w.insert_one({"_id": 1, "t": NOW, "m": "a", "k": 0})
    db.w.insert_one({"_id": 1, "t": NOW, "m": "b", "k": 1})
    r = db.w.insert_many([{"_id": 2, "t": NOW, "m": "a", "k": 2},
                          {"_id": 2, "t": NOW, "m": "a", "k": 3},
                          {"_id": 1, "t": NOW, "m": "c", "k": 4},
                          {"_id": 0, "t": NOW, "m": "c", "k": 5}])
    assert r.inserted_ids == [2, 2, 1, 0]
    assert sorted(d["k"] for d in db.w.find()) == [0, 1, 2, 3, 4, 5]
    # by _id: every measurement with it, in insertion order
    assert [d["k"] for d in db.w.find({"_id": 1})] == [0, 1, 4]
    assert [d["k"] for d in db.w.find({"_id": {"$in": [2, 0]}})] == [5, 2, 3]
    assert [d["k"] for d in db.w.find({"_id": {"$gt": 0, "$lte": 1}})] == [0, 1, 4]
    assert [d["k"] for d in db.w.find({"_id": {"$gt": 1}})] == [2, 3]
    assert [d["k"] for d in db.w.find({"_id": {"$lt": 2}}).sort("_id", -1)] == [4, 1, 0, 5]
    assert db.w.find_one({"_id": 2})["k"] == 2
    assert db.w.count_documents({}) == 6
    assert db.w.count_documents({"_id": 1}) == 3
    assert db.w.estimated_document_count() == 6
    assert db.command({"count": "w", "query": {"_id": 2}})["n"] == 2
    assert db.w.distinct("k", {"_id": 1}) == [0, 1, 4]
    assert list(db.w.aggregate([{"$match": {"_id": 1}}, {"$count": "n"}])) == [{"n": 3}]
    # the metaField/timeField index and a new one both find every duplicate
    assert [d["k"] for d in db.w.find({"m": "a"}).hint("m_1_t_1")] == [0, 2, 3]
    db.w.create_index("k")
    db.w.insert_one({"_id": 2, "t": NOW, "m": "a", "k": 3})
    assert [d["_id"] for d in db.w.find({"k": {"$gte": 3}}).hint("k_1")] == [2, 2, 1, 0]
    assert db.w.count_documents({"k": 3}) == 2
    v = db.command({"validate": "w"})
    assert v["valid"] is True and v["nrecords"] == 7, v


def test_duplicate_ids_update_and_delete(db):
    db.command({"create": "w", "timeseries": {"timeField": "t"}})
    db.w.insert_many([{"_id": 1, "t": NOW, "k": i} for i in range(4)] +
                     [{"_id": 2, "t": NOW, "k": 9}])
    # by _id: all measurements with it (only the later ones match here)
    assert db.w.update_many({"_id": 1, "k": {"$gte": 2}}, {"$set": {"x": 1}}).modified_count == 2
    assert [d.get("x") for d in db.w.find({"_id": 1})] == [None, None, 1, 1]
    r = db.w.update_many({"_id": 1}, {"$inc": {"k": 10}})
    assert (r.matched_count, r.modified_count) == (4, 4)
    assert [d["k"] for d in db.w.find({"_id": 1})] == [10, 11, 12, 13]
    assert db.w.update_one({"_id": 1}, {"$set": {"y": 1}}).modified_count == 1
    assert db.w.count_documents({"y": 1}) == 1
    doc = db.w.find_one_and_update({"_id": 1, "k": 13}, {"$set": {"z": 1}},
                                   return_document=True)
    assert doc["k"] == 13 and doc["z"] == 1
    assert db.w.delete_one({"_id": 1, "k": 12}).deleted_count == 1
    assert [d["k"] for d in db.w.find({"_id": 1})] == [10, 11, 13]
    assert db.w.delete_many({"_id": 1}).deleted_count == 3
    assert [d["k"] for d in db.w.find()] == [9]
    assert db.w.count_documents({}) == 1


def test_duplicate_ids_across_batches(db):
    # runs of equal _ids longer than a read chunk and across getMore batches
    db.command({"create": "w", "timeseries": {"timeField": "t"}})
    db.w.insert_many([{"_id": i // 150, "t": NOW, "k": i} for i in range(600)])
    assert [d["k"] for d in db.w.find().batch_size(7)] == list(range(600))
    assert [d["k"] for d in db.w.find({"_id": {"$gte": 1}})] == list(range(150, 600))
    assert [d["k"] for d in db.w.find().sort("_id", -1)][:2] == [599, 598]
    assert db.w.count_documents({"_id": 2}) == 150
    r = db.w.update_many({}, {"$inc": {"k": 1000}})
    assert (r.matched_count, r.modified_count) == (600, 600)
    assert db.w.count_documents({"k": {"$gte": 1000}}) == 600
    assert db.w.delete_many({"_id": {"$lte": 1}}).deleted_count == 300
    assert db.w.count_documents({}) == 300


def test_duplicate_ids_expire(db):
    db.command({"create": "w", "timeseries": {"timeField": "t"}, "expireAfterSeconds": 3600})
    old = NOW - datetime.timedelta(days=1)
    db.w.insert_many([{"_id": 1, "t": old, "k": 0}, {"_id": 1, "t": NOW, "k": 1},
                      {"_id": 1, "t": old, "k": 2}])
    deadline = time.time() + 20
    while db.w.count_documents({}) > 1 and time.time() < deadline:
        time.sleep(0.2)
    assert [d["k"] for d in db.w.find()] == [1]


def test_duplicate_ids_other_collections_stay_unique(db):
    db.c.insert_one({"_id": 1})
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": 1})
    assert e.value.code == 11000
    db.command({"create": "k", "clusteredIndex": {"key": {"_id": 1}, "unique": True}})
    db.k.insert_one({"_id": 1})
    with pytest.raises(BulkWriteError) as e:
        db.k.insert_many([{"_id": 2}, {"_id": 1}])
    assert [w["code"] for w in e.value.details["writeErrors"]] == [11000]
    assert db.c.count_documents({}) == 1 and db.k.count_documents({}) == 2


def test_duplicate_ids_survive_restart():
    s = Sabled()
    try:
        s.start()
        c = s.client()
        c.t.command({"create": "w", "timeseries": {"timeField": "t", "metaField": "m"}})
        c.t.w.insert_many([{"_id": 7, "t": NOW, "m": 1, "k": 0},
                           {"_id": 7, "t": NOW, "m": 1, "k": 1}])
        c.close()
        s.restart()
        c = s.client()
        assert [d["k"] for d in c.t.w.find({"_id": 7})] == [0, 1]
        c.t.w.insert_one({"_id": 7, "t": NOW, "m": 1, "k": 2})
        assert [d["k"] for d in c.t.w.find({"_id": 7})] == [0, 1, 2]
        assert [d["k"] for d in c.t.w.find({"m": 1}).hint("m_1_t_1")] == [0, 1, 2]
        assert c.t.w.count_documents({}) == 3
        c.close()
        s.restart()
        c = s.client()
        assert c.t.w.count_documents({"_id": 7}) == 3
        assert c.t.command({"validate": "w"})["valid"] is True
        c.close()
    finally:
        s.cleanup()


def test_list_indexes(db):
    db.command({"create": "a", "timeseries": {"timeField": "t", "metaField": "m"}})
    db.command({"create": "b", "timeseries": {"timeField": "t"}})
    assert [(i["name"], dict(i["key"])) for i in db.a.list_indexes()] == \
        [("m_1_t_1", {"m": 1, "t": 1})]
    assert list(db.b.list_indexes()) == []
    db.b.create_index("t")
    assert [i["name"] for i in db.b.list_indexes()] == ["t_1"]


def test_expire_after_seconds(db):
    db.command({"create": "w", "timeseries": {"timeField": "t"}, "expireAfterSeconds": 3600})
    old = NOW - datetime.timedelta(days=1)
    db.w.insert_many([{"t": old, "k": i} for i in range(5)] +
                     [{"t": NOW + datetime.timedelta(minutes=1), "k": 99}])
    deadline = time.time() + 20
    while db.w.count_documents({}) > 1 and time.time() < deadline:
        time.sleep(0.2)
    assert [d["k"] for d in db.w.find()] == [99]


def test_options_survive_restart():
    s = Sabled()
    try:
        s.start()
        c = s.client()
        c.t.command({"create": "w", "timeseries": {"timeField": "t", "metaField": "m"},
                     "expireAfterSeconds": 100000})
        c.t.command({"create": "k", "clusteredIndex": {"key": {"_id": 1}, "unique": True,
                                                       "name": "by id"}})
        c.t.w.insert_one({"t": NOW, "m": 1})
        before = {i["name"]: i for i in c.t.list_collections()}
        c.close()
        s.restart()
        c = s.client()
        after = {i["name"]: i for i in c.t.list_collections()}
        assert after["w"]["type"] == "timeseries"
        assert after["w"]["options"] == before["w"]["options"]
        assert after["k"]["options"] == before["k"]["options"]
        assert [i["name"] for i in c.t.w.list_indexes()] == ["m_1_t_1"]
        assert [i["name"] for i in c.t.k.list_indexes()] == ["by id"]
        with pytest.raises(WriteError) as e:
            c.t.w.insert_one({"m": 1})
        assert e.value.code == 2
        assert c.t.w.count_documents({}) == 1
        c.close()
    finally:
        s.cleanup()


# ---- clustered collections -----------------------------------------------------

def test_clustered_listing(db):
    db.command({"create": "c", "clusteredIndex": {"key": {"_id": 1}, "unique": True}})
    db.command({"create": "n", "clusteredIndex": {"key": {"_id": 1}, "unique": True,
                                                  "name": "test index", "v": 2}})
    c = coll_info(db, "c")
    assert c["type"] == "collection"
    assert c["options"] == {"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_",
                                               "unique": True}}
    assert "idIndex" not in c and "uuid" in c["info"]
    assert coll_info(db, "n")["options"]["clusteredIndex"]["name"] == "test index"
    assert list(db.n.list_indexes()) == [{"v": 2, "key": {"_id": 1}, "name": "test index",
                                          "unique": True, "clustered": True}]
    db.n.insert_many([{"_id": 2}, {"_id": 1}])
    db.n.create_index("x")
    assert [i["name"] for i in db.n.list_indexes()] == ["test index", "x_1"]
    assert [d["_id"] for d in db.n.find()] == [1, 2]
    # an ordinary collection still lists _id_
    db.plain.insert_one({})
    assert [i["name"] for i in db.plain.list_indexes()] == ["_id_"]


@pytest.mark.parametrize("ci, code", [
    ({"key": {"_id": 1}, "unique": False}, 5979700),
    ({"key": {"a": 1}, "unique": True}, 197),
    ({"key": {"_id": -1}, "unique": True}, 197),
    ({"key": {"_id": 1, "b": 1}, "unique": True}, 197),
    ({"key": {"_id": 1}, "unique": True, "v": 1}, 5979704),
    ({"key": {"_id": 1}}, 40414),
    ({"unique": True}, 40414),
    ({"key": {"_id": 1}, "unique": True, "sparse": True}, 40415),
    (True, 72),
    (5, 14),
])
def test_clustered_errors(db, ci, code):
    assert code_of(db, {"create": "c", "clusteredIndex": ci})[0] == code
    assert "c" not in db.list_collection_names()


def test_clustered_expire_after_seconds(db):
    db.command({"create": "c", "clusteredIndex": {"key": {"_id": 1}, "unique": True},
                "expireAfterSeconds": 60})
    assert coll_info(db, "c")["options"]["expireAfterSeconds"] == 60
    db.c.insert_many([{"_id": NOW - datetime.timedelta(hours=1)}, {"_id": 7},
                      {"_id": NOW + datetime.timedelta(hours=1)}])
    deadline = time.time() + 20
    while db.c.count_documents({}) > 2 and time.time() < deadline:
        time.sleep(0.2)
    assert db.c.count_documents({}) == 2
    assert code_of(db, {"create": "d", "clusteredIndex": {"key": {"_id": 1}, "unique": True},
                        "size": 1000})[0] == 6049200


# ---- collMod -------------------------------------------------------------------

def test_coll_mod(db):
    db.command({"create": "w", "timeseries": {"timeField": "t", "metaField": "m"},
                "expireAfterSeconds": 100})
    db.command({"collMod": "w", "expireAfterSeconds": 200, "timeseries": {"granularity": "minutes"}})
    assert coll_info(db, "w")["options"] == {
        "timeseries": {"timeField": "t", "metaField": "m", "granularity": "minutes",
                       "bucketMaxSpanSeconds": 86400},
        "expireAfterSeconds": 200}
    db.command({"collMod": "w", "expireAfterSeconds": "off"})
    assert "expireAfterSeconds" not in coll_info(db, "w")["options"]
    assert code_of(db, {"collMod": "w", "timeseries": {"granularity": "seconds"}}) == (
        72, "Invalid transition for timeseries.granularity. Can only transition from 'seconds' "
            "to 'minutes' or 'minutes' to 'hours'.")
    assert code_of(db, {"collMod": "w", "expireAfterSeconds": "on"})[0] == 72
    assert code_of(db, {"collMod": "w", "validator": {"a": 1}}) == (
        72, "option not supported on a time-series collection: validator")
    db.plain.insert_one({})
    assert code_of(db, {"collMod": "plain", "timeseries": {"granularity": "hours"}}) == (
        72, "option only supported on a time-series collection: timeseries")
    assert code_of(db, {"collMod": "plain", "expireAfterSeconds": 5}) == (
        72, "'expireAfterSeconds' option is only supported on collections clustered by _id")
    db.command({"create": "c", "clusteredIndex": {"key": {"_id": 1}, "unique": True}})
    db.command({"collMod": "c", "expireAfterSeconds": 5})
    assert coll_info(db, "c")["options"]["expireAfterSeconds"] == 5
