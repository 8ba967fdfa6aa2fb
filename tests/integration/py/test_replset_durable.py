"""
Durability of a replica set member (issue 24): the majority commit point is
WiredTiger's stable timestamp, checkpoints are taken at it, and a restart
recovers from the stable checkpoint and replays the oplog after it.  The
member's replicated collections are unlogged tables, so a document written
after the last checkpoint survives a kill -9 only through that replay.
"""
import time

import pymongo
from bson.timestamp import Timestamp

from pymongo.write_concern import WriteConcern

from sabled import Sabled

J = WriteConcern(w=1, j=True)


def start_one(extra=()):
    s = Sabled()
    s.start(["--replSet", "rs0", "--oplogSizeMB", "16"] + list(extra))
    c = s.client()
    c.admin.command("replSetInitiate",
                    {"_id": "rs0", "members": [{"_id": 0, "host": "127.0.0.1:%d" % s.port}]})
    c.close()
    return s


def rs_client(s):
    return pymongo.MongoClient("127.0.0.1", s.port, replicaSet="rs0",
                               serverSelectionTimeoutMS=10000)


def wait_for(pred, timeout=15, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def test_kill9_before_any_checkpoint_replays_the_whole_oplog():
    s = start_one()
    try:
        c = rs_client(s)
        c.t.c.insert_many([{"_id": i, "v": i} for i in range(300)])
        c.t.c.update_one({"_id": 7}, {"$set": {"v": "updated"}})
        c.t.c.delete_one({"_id": 8})
        c.t.d.with_options(write_concern=J).insert_one({"_id": "x"})  # journals all before it
        c.close()
        s.kill9()
        s.restart()
        c = rs_client(s)
        assert c.t.c.count_documents({}) == 299
        assert c.t.c.estimated_document_count() == 299  # counts recounted, not doubled
        assert c.t.c.find_one({"_id": 7})["v"] == "updated"
        assert c.t.c.find_one({"_id": 8}) is None
        assert c.t.d.find_one({"_id": "x"}) == {"_id": "x"}
        # each entry is in the oplog once: replay does not write them again
        n = c.local["oplog.rs"].count_documents({"ns": "t.c", "op": "i"})
        assert n == 300
        assert "oplog" in s.log_text() and "replaying" in s.log_text()
        c.close()
    finally:
        s.cleanup()


def test_checkpoint_at_stable_then_replay_after_it():
    s = start_one()
    try:
        c = rs_client(s)
        c.t.c.insert_many([{"_id": i} for i in range(100)])
        last = c.local["oplog.rs"].find().sort("$natural", -1).limit(1)[0]["ts"]
        # a set of one: stable follows our own writes; fsync checkpoints at it
        def stable_ckpt():
            c.admin.command("fsync")
            st = c.admin.command("replSetGetStatus")
            return st["lastStableRecoveryTimestamp"] >= last and st
        st = wait_for(stable_ckpt, what="a checkpoint at the stable timestamp")
        assert st["lastStableRecoveryTimestamp"] <= st["optimes"]["appliedOpTime"]["ts"]
        c.t.c.insert_many([{"_id": i} for i in range(100, 150)])
        c.t.c.with_options(write_concern=J).delete_many({"_id": {"$lt": 10}})
        c.close()
        s.kill9()
        s.restart()
        c = rs_client(s)
        assert c.t.c.count_documents({}) == 140
        assert c.t.c.estimated_document_count() == 140
        assert sorted(d["_id"] for d in c.t.c.find())[:1] == [10]
        assert "Recovering from stable timestamp" in s.log_text()
        # clean shutdown: the final checkpoint is at stable too, then a few entries replay
        c.t.c.insert_one({"_id": "after"})
        c.close()
        s.restart()
        c = rs_client(s)
        assert c.t.c.count_documents({}) == 141
        assert c.t.c.estimated_document_count() == 141
        c.close()
    finally:
        s.cleanup()


def test_index_survives_kill9_after_build():
    s = start_one()
    try:
        c = rs_client(s)
        c.t.c.insert_many([{"_id": i, "k": i % 10} for i in range(200)])
        c.t.c.create_index("k")
        c.t.c.with_options(write_concern=J).insert_many(
            [{"_id": i, "k": i % 10} for i in range(200, 250)])
        c.close()
        s.kill9()
        s.restart()
        c = rs_client(s)
        assert c.t.c.count_documents({"k": 3}) == 25
        assert len(list(c.t.c.find({"k": 3}).hint("k_1"))) == 25
        c.close()
    finally:
        s.cleanup()
