"""
Every member of a replica set gives a collection the same UUID, as mongod's
members do: a secondary creates a collection with the UUID of the primary's
entry ("ui"), an initial sync with the source's (listCollections'
info.uuid), and a member elected later logs its writes with that same "ui".

Collections are created every way that makes one: create, an insert, a
createIndexes, a rename across databases, convertToCapped,
cloneCollectionAsCapped, $out, a transaction (explicitly and by an
insert) and applyOps with a given UUID.  A member killed and restarted
keeps them.  Sets here use electionTimeoutMillis 2000 and heartbeats every
500 ms, as test_replset3.py's.
"""
import uuid

from bson.binary import Binary
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_replset3 import direct, last_oplog_ts, state, wait_for
from test_replset_members import host, initiate, primary_and_others

# every collection made below, in database u; "v" is a view (no UUID)
COLLS = ["a", "b", "c", "cap", "cap2", "o", "p", "r2", "t1", "t2", "z"]
# the UUID applyOps gives "p" (mongorestore --preserveUUID sends such a create)
P_UUID = uuid.UUID("0b5e2f4c-8a61-4d3e-9c7a-5f1e2d3c4b5a")


def catalog(m, db="u"):
    """{name: (info.uuid or None, capped)} of db's listCollections on m."""
    with direct(m) as c:
        return {x["name"]: (x["info"].get("uuid"), x["options"].get("capped", False))
                for x in c[db].list_collections()}


def make_collections(p):
    with direct(p) as c:
        d = c.u
        d.create_collection("a", validator={"x": {"$exists": True}})
        d.a.insert_one({"_id": 1, "x": 1})
        d.b.insert_one({"_id": 1})                       # implicit, by an insert
        d.c.create_index("k")                            # implicit, by createIndexes
        c.u1.r.insert_many([{"_id": i} for i in range(3)])
        c.admin.command("renameCollection", "u1.r", to="u.r2")  # across databases
        d.cap.insert_many([{"_id": i} for i in range(5)])
        d.command("convertToCapped", "cap", size=100000)
        d.command("cloneCollectionAsCapped", "cap", toCollection="cap2", size=100000)
        list(d.a.aggregate([{"$out": "o"}]))
        d.create_collection("v", viewOn="a", pipeline=[])
        c.admin.command("applyOps", [{"op": "c", "ns": "u.$cmd", "ui": Binary.from_uuid(P_UUID),
                                      "o": {"create": "p"}}])
        with c.start_session() as s:
            with s.start_transaction():
                d.create_collection("t1", session=s)
                d.t1.insert_one({"_id": 1}, session=s)
                d.t2.insert_one({"_id": 1}, session=s)  # implicit, in the transaction
        d.get_collection("z", write_concern=WriteConcern(w=3, wtimeout=30000)).insert_one(
            {"_id": 1})


def test_same_uuid_on_every_member():
    with set_members(4) as ms:
        m0, m1, m2, late = ms
        initiate([m0, m1, m2], extra={2: {"priority": 0}})
        p, others = primary_and_others([m0, m1, m2])
        make_collections(p)

        want = catalog(p)
        assert sorted(want) == sorted(COLLS + ["v"])
        assert want["v"][0] is None                      # a view has no UUID
        assert all(want[n][0] is not None for n in COLLS)
        assert want["cap"][1] and want["cap2"][1] and not want["a"][1]
        assert len({want[n][0] for n in COLLS}) == len(COLLS)
        assert want["p"][0] == P_UUID
        for m in others:
            assert catalog(m) == want, m.port
        for m in [p] + others:  # collectionUUID is checked against the same UUID everywhere
            with direct(m) as c:
                ui = Binary.from_uuid(want["a"][0])
                assert c.u.command("count", "a", collectionUUID=ui)["n"] == 1
        with direct(p) as c:
            creates = {e["o"]["create"]: e.get("ui") for e in c.local["oplog.rs"].find(
                {"op": "c", "ns": "u.$cmd", "o.create": {"$exists": True}})}
        assert creates["v"] is None                      # nor its create entry
        for n in ("a", "b", "c", "cap2", "t1", "t2", "z"):
            assert creates[n] == want[n][0], n

        # a member added later: its initial sync keeps the source's UUIDs
        with direct(p) as c:
            cfg = c.admin.command("replSetGetConfig")["config"]
            cfg["version"] += 1
            cfg["members"].append({"_id": 3, "host": host(late), "priority": 0, "votes": 0})
            c.admin.command("replSetReconfig", cfg)
        wait_for(lambda: state(late) == 2, timeout=60)
        assert catalog(late) == want

        # after a failover the new primary logs its writes with the same "ui"
        with direct(p) as c:
            last = last_oplog_ts(c)
            c.admin.command("replSetStepDown", 60, secondaryCatchUpPeriodSecs=20)
        q = wait_for(lambda: next((m for m in (m0, m1) if m is not p and state(m) == 1), None),
                     timeout=60)
        with direct(q) as c:
            for n in COLLS:
                c.u.get_collection(n, write_concern=WriteConcern(w=4, wtimeout=30000)) \
                    .insert_one({"_id": "after", "x": 1})
            logged = {e["ns"]: e["ui"] for e in c.local["oplog.rs"].find(
                {"ts": {"$gt": last}, "op": "i", "ns": {"$regex": "^u[.]"}})}
        assert logged == {"u." + n: want[n][0] for n in COLLS}
        for m in ms:
            assert catalog(m) == want, m.port

        # a member killed and restarted replays its entries (recovery): same UUIDs
        m2.kill9()
        m2.restart()
        wait_for(lambda: state(m2) == 2, timeout=60)
        with direct(q) as c:
            c.u.get_collection("d", write_concern=WriteConcern(w=4, wtimeout=30000)) \
                .insert_one({"_id": 1})
            want["d"] = catalog(q)["d"]
        for m in ms:
            assert catalog(m) == want, m.port
