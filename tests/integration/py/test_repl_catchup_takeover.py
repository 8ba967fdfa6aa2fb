"""
Catch-up takeover (pv1, docs/replication.md): a secondary that has entries a
newly elected primary still lacks, while that primary is in catch-up (it says
PRIMARY in its heartbeats and has written nothing in its term), runs for
election catchUpTakeoverDelayMillis later, so its entries need not be rolled
back; -1 turns it off.

The set: a, b, c (priority 1, voting).  Every member has the w: majority
writes; b and c stop applying (fail point rsSyncApplyStop) and a takes w: 1
writes only it holds; a steps down (force, frozen), and c wins an election
(replSetStepUp) with b's vote.  c cannot catch up (its applier is stopped),
so it stays in catch-up; once a is unfrozen it takes over (or, with -1, does
not, and c catches up once its applier is let go).
"""
import threading
import time

import pymongo
import pytest
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_repl_catchup import fail_point, writable
from test_replset3 import direct, state, wait_for

DELAY_MS = 2000


def start_set(members, takeover_ms):
    cfg = {"_id": "rs0", "members": [
        {"_id": i, "host": "127.0.0.1:%d" % m.port} for i, m in enumerate(members)],
        "settings": {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500,
                     "catchUpTimeoutMillis": 120000,
                     "catchUpTakeoverDelayMillis": takeover_ms}}
    with direct(members[0]) as c:
        c.admin.command("replSetInitiate", cfg)
    return wait_for(lambda: next((m for m in members if state(m) == 1 and writable(m)), None),
                    timeout=30)


def status(m):
    with direct(m) as d:
        return d.admin.command("replSetGetStatus")


def election_metrics(m):
    with direct(m) as d:
        return d.admin.command("serverStatus")["electionMetrics"]


def member_state(view, of):
    """of's state as view's heartbeats see it."""
    host = "127.0.0.1:%d" % of.port
    return next(x["state"] for x in status(view)["members"] if x["name"] == host)


def ids(m):
    with direct(m) as d:
        return {x["_id"] for x in d.t.c.find()}


def c_in_catch_up(c):
    """c elected and catching up: PRIMARY in replSetGetStatus, not writable."""
    return status(c)["myState"] == 1 and not writable(c)


def split_and_elect_c(members, takeover_ms):
    """The common start: returns (a, b, c, acknowledged majority _ids, a's w: 1
    _ids, the stepUp thread) with c in catch-up and a frozen."""
    a = start_set(members, takeover_ms)
    b, c = [m for m in members if m is not a]
    acked = []
    with direct(a) as d:
        coll = d.t.c.with_options(write_concern=WriteConcern(w="majority", wtimeout=30000))
        for i in range(5):
            coll.insert_one({"_id": "maj%d" % i})
            acked.append("maj%d" % i)
        # every member holds them: b and c stop at the same entry
        d.t.c.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).insert_one(
            {"_id": "all"})
        acked.append("all")
        fail_point(b, "rsSyncApplyStop", True)
        fail_point(c, "rsSyncApplyStop", True)
        ahead = ["w1_%d" % i for i in range(3)]
        for x in ahead:
            d.t.c.with_options(write_concern=WriteConcern(w=1)).insert_one({"_id": x})
    assert set(ahead) <= ids(a) and not set(ahead) & ids(c)
    try:   # no secondary is caught up: force; a stays out of elections 60 s
        with direct(a) as d:
            d.admin.command("replSetStepDown", 60, force=True)
    except pymongo.errors.AutoReconnect:
        pass
    wait_for(lambda: state(a) == 2, timeout=10)

    def step_up():   # returns once c's catch-up ends
        try:
            with pymongo.MongoClient("127.0.0.1", c.port, directConnection=True,
                                     socketTimeoutMS=60000) as d:
                d.admin.command("replSetStepUp")
        except pymongo.errors.PyMongoError:
            pass
    t = threading.Thread(target=step_up, daemon=True)
    t.start()
    wait_for(lambda: c_in_catch_up(c), timeout=15)
    # a and b hear c as PRIMARY; a does not take it (behind a) as sync source
    wait_for(lambda: member_state(a, c) == 1 and member_state(b, c) == 1, timeout=10)
    assert status(a)["syncSourceHost"] == ""
    with direct(c) as d:
        with pytest.raises(pymongo.errors.PyMongoError):
            d.t.c.with_options(write_concern=WriteConcern(w=1)).insert_one({"_id": "early"})
    return a, b, c, acked, ahead, t


@pytest.fixture
def rs3():
    with set_members(3) as members:
        yield members


@pytest.mark.parametrize("takeover_ms", [DELAY_MS, -1], ids=["delay2000", "disabled"])
def test_catchup_takeover(rs3, takeover_ms):
    before = {}
    a, b, c, acked, ahead, t = split_and_elect_c(rs3, takeover_ms)
    for m in (a, c):
        before[m.port] = election_metrics(m)
    c_term = status(c)["term"]
    with direct(a) as d:
        d.admin.command("replSetFreeze", 0)
    unfrozen = time.time()
    if takeover_ms < 0:
        # off: nobody takes over; c waits for its applier
        time.sleep(2 * DELAY_MS / 1000)
        assert c_in_catch_up(c) and state(a) == 2 and status(a)["term"] == c_term
        fail_point(c, "rsSyncApplyStop", False)
        wait_for(lambda: writable(c), timeout=20)
        new = c
        assert election_metrics(a)["catchUpTakeover"] == before[a.port]["catchUpTakeover"]
        m = status(c)["electionCandidateMetrics"]
        assert m["lastElectionReason"] == "stepUpRequest"   # a plain replSetStepUp (dry run)
        assert m["numCatchUpOps"] >= len(ahead)
        em = election_metrics(c)
        assert em["numCatchUpsSucceeded"] == before[c.port]["numCatchUpsSucceeded"] + 1
    else:
        wait_for(lambda: writable(a), timeout=20)
        took = time.time() - unfrozen
        assert took >= DELAY_MS / 1000 - 0.3, took
        new = a
        st = status(a)
        assert st["term"] == c_term + 1
        m = st["electionCandidateMetrics"]
        assert (m["lastElectionReason"], m["electionTerm"]) == ("catchupTakeover", c_term + 1)
        em = election_metrics(a)
        assert em["catchUpTakeover"]["called"] == before[a.port]["catchUpTakeover"]["called"] + 1
        assert em["catchUpTakeover"]["successful"] == \
            before[a.port]["catchUpTakeover"]["successful"] + 1
        # c stepped down on the higher term without ever taking a write
        wait_for(lambda: state(c) == 2, timeout=10)
        em = election_metrics(c)
        for k in ("numCatchUpsFailedWithNewTerm", "numStepDownsCausedByHigherTerm"):
            assert em[k] == before[c.port][k] + 1, k
        with direct(a) as d:
            assert d.local.oplog.rs.count_documents({"t": c_term}) == 0
        fail_point(c, "rsSyncApplyStop", False)
    t.join(timeout=30)
    fail_point(b, "rsSyncApplyStop", False)
    with direct(new) as d:
        d.t.c.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).insert_one(
            {"_id": "after"})
    # nothing acknowledged was lost, and a's w: 1 writes stayed: no rollback
    for m in rs3:
        assert set(acked) | set(ahead) | {"after"} == ids(m), m.port
        assert '"id":21098' not in m.log_text()
