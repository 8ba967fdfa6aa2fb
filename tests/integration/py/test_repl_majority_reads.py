"""
readConcern "majority" reads at the member's majority commit point (its
WiredTiger stable timestamp), as mongod's do (docs/replication.md, "Read
concerns"), on three members (one set for the module):

- a w:1 write that a majority has not applied (the secondaries' appliers held
  by the fail point rsSyncApplyStop) is invisible to majority find, count,
  distinct, aggregate and $lookup's inner reads on the primary, and a
  majority read with afterClusterTime at that write waits for the commit
  point until maxTimeMS (MaxTimeMSExpired); once the secondaries apply it,
  it appears;
- a w:"majority" write is acknowledged only once a majority read on the
  primary sees it;
- a majority cursor keeps its snapshot across getMores, on the primary and
  on a secondary, and a causally consistent session reads its own
  w:"majority" write there (afterClusterTime waits for the commit point).
"""
import pymongo
import pytest
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_repl_catchup import fail_point
from test_replset3 import direct, state, wait_for

MAJ = ReadConcern("majority")
WMAJ = WriteConcern(w="majority", wtimeout=20000)


@pytest.fixture(scope="module")
def rs3():
    with set_members(3) as members:
        cfg = {"_id": "rs0", "members": [
            {"_id": i, "host": "127.0.0.1:%d" % m.port, "priority": 2 if i == 0 else 1}
            for i, m in enumerate(members)],
            "settings": {"electionTimeoutMillis": 10000, "heartbeatIntervalMillis": 500}}
        with direct(members[0]) as c:
            c.admin.command("replSetInitiate", cfg)
        wait_for(lambda: state(members[0]) == 1 and
                 all(state(m) == 2 for m in members[1:]), timeout=40)
        yield members


def test_w1_write_is_invisible_to_majority_reads_until_committed(rs3):
    p, s1, s2 = rs3
    with direct(p) as c:
        d = c.t
        d.c.with_options(write_concern=WriteConcern(w=3, wtimeout=20000)).insert_many(
            [{"_id": i, "k": 1} for i in range(5)])
        d.a.with_options(write_concern=WriteConcern(w=3, wtimeout=20000)).insert_one({"_id": 1})
        lookup = [{"$lookup": {"from": "b", "localField": "_id", "foreignField": "a",
                               "as": "bs"}}]
        maj_c = d.get_collection("c", read_concern=MAJ)
        maj_a = d.get_collection("a", read_concern=MAJ)
        fail_point(s1, "rsSyncApplyStop", True)
        fail_point(s2, "rsSyncApplyStop", True)
        try:
            r = d.command("insert", "c", documents=[{"_id": "new", "k": 1}],
                          writeConcern={"w": 1})
            at = r["operationTime"]
            d.command("insert", "b", documents=[{"_id": "x", "a": 1}], writeConcern={"w": 1})
            # local sees both writes; majority reads do not
            assert d.c.find_one({"_id": "new"}) == {"_id": "new", "k": 1}
            assert list(d.a.aggregate(lookup))[0]["bs"] == [{"_id": "x", "a": 1}]
            assert maj_c.find_one({"_id": "new"}) is None
            assert maj_c.count_documents({"k": 1}) == 5                  # aggregate
            assert d.command("count", "c", query={"k": 1},
                             readConcern={"level": "majority"})["n"] == 5
            assert "new" not in maj_c.distinct("_id")
            assert list(maj_a.aggregate(lookup)) == [{"_id": 1, "bs": []}]
            # afterClusterTime at the write: waits for the commit point
            with pytest.raises(pymongo.errors.ExecutionTimeout) as e:
                d.command("find", "c", filter={"_id": "new"},
                          readConcern={"level": "majority", "afterClusterTime": at},
                          maxTimeMS=1000)
            assert e.value.code == 50
        finally:
            fail_point(s1, "rsSyncApplyStop", False)
            fail_point(s2, "rsSyncApplyStop", False)
        wait_for(lambda: maj_c.find_one({"_id": "new"}) is not None, timeout=20)
        # the $lookup's inner read sees the second write once it is committed too
        wait_for(lambda: list(maj_a.aggregate(lookup))[0]["bs"] != [], timeout=20)
        got = d.command("find", "c", filter={"_id": "new"},
                        readConcern={"level": "majority", "afterClusterTime": at},
                        maxTimeMS=20000)["cursor"]["firstBatch"]
        assert got == [{"_id": "new", "k": 1}]
        assert list(maj_a.aggregate(lookup))[0]["bs"] == [{"_id": "x", "a": 1}]
        # w:"majority" is acknowledged once a majority read sees the write
        wc = d.get_collection("ack", write_concern=WMAJ)
        rc = d.get_collection("ack", read_concern=MAJ)
        for i in range(30):
            wc.insert_one({"_id": i})
            assert rc.find_one({"_id": i}) == {"_id": i}


def test_majority_cursor_keeps_its_snapshot_and_sees_own_writes(rs3):
    seeds = ",".join("127.0.0.1:%d" % m.port for m in rs3)
    with pymongo.MongoClient("mongodb://%s/?replicaSet=rs0" % seeds,
                             serverSelectionTimeoutMS=20000) as c:
        for n, pref in enumerate((ReadPreference.PRIMARY, ReadPreference.SECONDARY)):
            w = c.t.get_collection("cur%d" % n, write_concern=WMAJ)
            w.insert_many([{"_id": i} for i in range(300)])
            with c.start_session(causal_consistency=True) as s:
                w.insert_one({"_id": 1000}, session=s)
                r = w.with_options(read_concern=MAJ, read_preference=pref)
                cur = r.find({}, session=s, batch_size=2)
                first = [next(cur)["_id"], next(cur)["_id"]]
                # later majority-committed changes are not in the cursor's snapshot
                # (past the 102 documents the executor read ahead for the first batch)
                w.insert_many([{"_id": 2000 + i} for i in range(5)])
                w.delete_one({"_id": 299})
                rest = [doc["_id"] for doc in cur]
                assert first + rest == list(range(300)) + [1000], pref
