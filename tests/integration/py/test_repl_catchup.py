"""
Primary catch-up (pv1, docs/replication.md): a member elected while another
member that is up has newer entries applies them before it takes writes, so
that member does not have to roll them back.

The set: a and b (priority 1), c (priority 0, votes), n (no vote, priority 0).
b and c stop applying (fail point rsSyncApplyStop); a takes a write that only
n applies (w: 2); a is killed.  b wins the election with c's vote (n has no
vote to refuse it), learns from n's heartbeat that n is ahead and, with its
applier let go, catches up from n before it becomes primary.
"""
import pymongo
import pytest
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_replset3 import direct, state, wait_for


@pytest.fixture
def rs4():
    with set_members(4) as members:
        cfg = {"_id": "rs0", "members": [
            {"_id": 0, "host": "127.0.0.1:%d" % members[0].port},
            {"_id": 1, "host": "127.0.0.1:%d" % members[1].port},
            {"_id": 2, "host": "127.0.0.1:%d" % members[2].port, "priority": 0},
            {"_id": 3, "host": "127.0.0.1:%d" % members[3].port, "priority": 0, "votes": 0}],
            "settings": {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}}
        with direct(members[0]) as c:
            c.admin.command("replSetInitiate", cfg)
        wait_for(lambda: any(state(m) == 1 for m in members[:2]) and
                 all(state(m) in (1, 2) for m in members), timeout=30)
        yield members


def writable(m):
    with direct(m) as d:
        return d.admin.command("hello")["isWritablePrimary"]


def fail_point(m, name, on):
    with direct(m) as d:
        d.admin.command("configureFailPoint", name, mode="alwaysOn" if on else "off",
                        data={"maxMS": 60000})


def test_new_primary_catches_up_from_a_member_ahead(rs4):
    a = next(m for m in rs4[:2] if state(m) == 1)
    b = next(m for m in rs4[:2] if m is not a)
    c, n = rs4[2], rs4[3]
    # n must pull "ahead" from a itself: with b or c as its source it would get
    # it only once it gave up on them, maxSyncSourceLagSecs (30 s) later
    a_host = "127.0.0.1:%d" % a.port
    with direct(n) as dn:
        dn.admin.command("replSetSyncFrom", a_host)
        wait_for(lambda: dn.admin.command("replSetGetStatus")["syncSourceHost"] == a_host,
                 timeout=20)
    with direct(a) as d:
        d.t.c.with_options(write_concern=WriteConcern(w=4, wtimeout=30000)).insert_one(
            {"_id": "base"})
        fail_point(b, "rsSyncApplyStop", True)
        fail_point(c, "rsSyncApplyStop", True)
        d.t.c.with_options(write_concern=WriteConcern(w=2, wtimeout=30000)).insert_one(
            {"_id": "ahead"})
        w_ts = d.local.oplog.rs.find_one({"o._id": "ahead"})["ts"]
    with direct(n) as dn:
        assert dn.t.c.find_one({"_id": "ahead"}) == {"_id": "ahead"}
    a.kill9()
    # b is elected (c votes for it) and waits for n's entry before taking writes;
    # meanwhile it says PRIMARY but not writable, as mongod
    wait_for(lambda: '"id":21359' in b.log_text(), timeout=40)
    with direct(b) as db:
        assert db.admin.command("replSetGetStatus")["myState"] == 1
        h = db.admin.command("hello")
        assert (h["isWritablePrimary"], h["secondary"], h["primary"]) == (
            False, True, "127.0.0.1:%d" % b.port)
        with pytest.raises(pymongo.errors.PyMongoError):
            db.t.c.with_options(write_concern=WriteConcern(w=1)).insert_one({"_id": "early"})
    fail_point(b, "rsSyncApplyStop", False)
    wait_for(lambda: writable(b), timeout=30)
    with direct(b) as db:
        assert db.t.c.find_one({"_id": "ahead"}) == {"_id": "ahead"}
        m = db.admin.command("replSetGetStatus")["electionCandidateMetrics"]
        assert m["targetCatchupOpTime"]["ts"] == w_ts
        assert m["numCatchUpOps"] >= 1
        assert m["lastElectionReason"] == "electionTimeout"
        db.t.c.with_options(write_concern=WriteConcern(w=2, wtimeout=30000)).insert_one(
            {"_id": "after"})
        with pytest.raises(pymongo.errors.OperationFailure) as e:
            db.admin.command("replSetAbortPrimaryCatchUp")
        assert e.value.code == 20   # IllegalOperation: not catching up
    with direct(n) as dn:   # n kept its entry: nothing to roll back
        wait_for(lambda: dn.t.c.find_one({"_id": "after"}) is not None, timeout=20)
        assert dn.t.c.find_one({"_id": "ahead"}) == {"_id": "ahead"}
    assert '"id":21098' not in n.log_text()
    fail_point(c, "rsSyncApplyStop", False)
