"""
Replica set members' settings and an operator's overrides, as mongod 7.0
has them (issue 24): arbiters (arbiterOnly, rs.addArb-style reconfig, the
arbiters list in hello, the implicit default write concern with an
arbiter), member tags and settings.getLastErrorModes (w: "<mode>",
UnknownReplWriteConcern), getDefaultRWConcern's implicit {w: "majority"},
secondaryDelaySecs, replSetSyncFrom and replSetMaintenance.

Sets here use electionTimeoutMillis 2000 and heartbeats every 500 ms, as
test_replset3.py's.  No assertion depends on how fast the machine is: the
delayed member's check is a lower bound, which load only makes larger.
"""
import threading
import time

import pytest
from pymongo.errors import OperationFailure, PyMongoError, WriteConcernError
from pymongo.write_concern import WriteConcern

from sabled import Sabled
from test_replset3 import agree, direct, state, wait_for

SETTINGS = {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}


def host(m):
    return "127.0.0.1:%d" % m.port


def start_members(n):
    members = []
    for _ in range(n):
        s = Sabled()
        s.start(["--replSet", "rs0", "--oplogSizeMB", "16"])
        members.append(s)
    return members


def initiate(members, extra=None, settings=None, electable=2):
    """Initiate with members' _id i; extra[i] updates member i's config."""
    cfg = {"_id": "rs0", "members": [{"_id": i, "host": host(m)} for i, m in enumerate(members)],
           "settings": dict(SETTINGS, **(settings or {}))}
    for i, e in (extra or {}).items():
        cfg["members"][i].update(e)
    with direct(members[0]) as c:
        c.admin.command("replSetInitiate", cfg)
    wait_for(lambda: any(state(m) == 1 for m in members[:electable]), timeout=30)
    wait_for(agree, timeout=30, args=members)


def primary_and_others(members):
    p = wait_for(lambda: next((m for m in members if m.is_running() and state(m) == 1), None))
    return p, [m for m in members if m is not p]


def config_error(members, cfg_members, settings=None):
    """replSetInitiate's error for a config of cfg_members (not applied)."""
    cfg = {"_id": "rs0", "members": cfg_members, "settings": settings or {}}
    with direct(members[0]) as c:
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("replSetInitiate", cfg)
    return ei.value


@pytest.fixture
def three():
    members = start_members(3)
    try:
        yield members
    finally:
        for m in members:
            m.cleanup()


def test_member_config_errors(three):
    a, b, c = (host(m) for m in three)
    e = config_error(three, [{"_id": 0, "host": a}, {"_id": 1, "host": b, "arbiterOnly": True,
                                                       "votes": 0}])
    assert e.code == 93 and "Arbiter must vote (cannot have 0 votes)" in str(e)
    e = config_error(three, [{"_id": 0, "host": a}, {"_id": 1, "host": b, "arbiterOnly": True,
                                                       "tags": {"dc": "x"}}])
    assert e.code == 93 and "Cannot set tags on arbiters." in str(e)
    e = config_error(three, [{"_id": 0, "host": a},
                             {"_id": 1, "host": b, "secondaryDelaySecs": 10, "hidden": True}])
    assert e.code == 93 and "priority must be 0 when secondaryDelaySecs is used" in str(e)
    e = config_error(three, [{"_id": 0, "host": a},
                             {"_id": 1, "host": b, "priority": 0, "secondaryDelaySecs": -1}])
    assert e.code == 93 and "out of range" in str(e)
    e = config_error(three, [{"_id": 0, "host": a, "tags": {"dc": "x"}}],
                     {"getLastErrorModes": {"m": {"rack": 1}}})
    assert e.code == 4  # NoSuchKey: no member has the tag
    e = config_error(three, [{"_id": 0, "host": a, "tags": {"dc": 1}}])
    assert e.code == 93


def test_arbiter_added_by_reconfig(three):
    p0, s1, arb = three
    # two data members see a majority only together: a longer election
    # timeout keeps a loaded machine's late heartbeats from a step-down
    initiate([p0, s1], settings={"electionTimeoutMillis": 5000})
    p, (s,) = primary_and_others([p0, s1])
    with direct(p) as c:
        d = c.admin.command("getDefaultRWConcern")
        assert d["defaultWriteConcern"] == {"w": "majority", "wtimeout": 0}
        assert d["defaultWriteConcernSource"] == "implicit"
        assert d["defaultReadConcern"] == {"level": "local"}
        assert d["defaultReadConcernSource"] == "implicit"
        # rs.addArb(): a member with arbiterOnly: true; it would make the
        # implicit default {w: 1}, so mongod wants a global default first
        cfg = c.admin.command("replSetGetConfig")["config"]
        cfg["version"] += 1
        cfg["members"].append({"_id": 2, "host": host(arb), "arbiterOnly": True})
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("replSetReconfig", cfg)
        assert ei.value.code == 103 and "implicit default write concern" in str(ei.value)
        c.admin.command("setDefaultRWConcern", defaultWriteConcern={"w": "majority"})
        c.admin.command("replSetReconfig", cfg)
        stored = c.admin.command("replSetGetConfig")["config"]["members"][2]
        assert stored["arbiterOnly"] is True and stored["priority"] == 0 and stored["votes"] == 1
    wait_for(lambda: state(arb) == 7)

    def arbiter_seen():
        with direct(p) as c:
            st = c.admin.command("replSetGetStatus")
            return [x["stateStr"] for x in st["members"]][2] == "ARBITER" and st
    st = wait_for(arbiter_seen)
    assert st["members"][2]["optime"]["ts"].time == 0  # holds no data, tails no one
    assert st["members"][2]["syncSourceHost"] == ""
    assert st["votingMembersCount"] == 3
    assert st["writableVotingMembersCount"] == 2 and st["writeMajorityCount"] == 2
    with direct(p) as c:
        hello = c.admin.command("hello")
        assert hello["arbiters"] == [host(arb)]
        assert host(arb) not in hello["hosts"] and host(arb) not in hello.get("passives", [])
        # without the global default (taken away behind the command's back:
        # mongod cannot unset it), 2 data-bearing voters <= the majority of
        # 3 voters give mongod's implicit {w: 1}
        c.config.settings.delete_one({"_id": "ReadWriteConcernDefaults"})
        d = wait_for(lambda: c.admin.command("getDefaultRWConcern")["defaultWriteConcernSource"]
                     == "implicit" and c.admin.command("getDefaultRWConcern"))
        assert d["defaultWriteConcern"] == {"w": 1, "wtimeout": 0}
        coll = c.t.get_collection("c", write_concern=WriteConcern(w=2, wtimeout=20000))
        coll.insert_many([{"_id": i} for i in range(10)])
        with pytest.raises(OperationFailure) as ei:  # w above the data-bearing members
            c.t.get_collection("c", write_concern=WriteConcern(w=3)).insert_one({"_id": 99})
        assert ei.value.code == 100
        # arbiterOnly may not change for a member
        cfg = c.admin.command("replSetGetConfig")["config"]
        cfg["version"] += 1
        cfg["members"][2]["arbiterOnly"] = False
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("replSetReconfig", cfg)
        assert ei.value.code == 103
    with direct(arb) as c:
        hello = c.admin.command("hello")
        assert hello["arbiterOnly"] is True and hello["secondary"] is False
        assert hello["isWritablePrimary"] is False
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("replSetSyncFrom", host(p))
        assert ei.value.code == 95  # NotSecondary
    # the arbiter's vote elects the secondary when the primary dies
    p.kill9()
    wait_for(lambda: state(s) == 1, timeout=60)
    with direct(s) as c:
        c.t.c.insert_one({"_id": "after"})  # implicit {w: 1}: acknowledged alone
        assert c.t.c.count_documents({}) == 11


def test_tags_modes_and_default_majority(three):
    tags = {0: {"tags": {"dc": "east", "node": "a"}},
            1: {"tags": {"dc": "west", "node": "b"}},
            2: {"tags": {"dc": "west", "node": "c"}, "priority": 0, "hidden": True}}
    modes = {"getLastErrorModes": {"twoDCs": {"dc": 2}, "allThree": {"node": 3}}}
    initiate(three, tags, modes)
    p, others = primary_and_others(three)
    with direct(p) as c:
        cfg = c.admin.command("replSetGetConfig")["config"]
        assert cfg["members"][0]["tags"] == {"dc": "east", "node": "a"}
        assert c.admin.command("hello")["tags"] == cfg["members"][three.index(p)]["tags"]
        assert cfg["settings"]["getLastErrorModes"] == {"twoDCs": {"dc": 2},
                                                        "allThree": {"node": 3}}
        c.t.get_collection("c", write_concern=WriteConcern(w="twoDCs")).insert_one({"_id": 1})
        c.t.get_collection("c", write_concern=WriteConcern(w="allThree")).insert_one({"_id": 2})
        r = c.t.command("insert", "c", documents=[{"_id": 3}],
                        writeConcern={"w": "noSuchMode"}, check=False)
        assert r["ok"] == 1 and r["writeConcernError"]["code"] == 79
        assert r["writeConcernError"]["codeName"] == "UnknownReplWriteConcern"
    # a mode the set cannot meet while a member is down times out
    hidden = three[2]
    hidden.kill9()
    with direct(p) as c:
        r = c.t.command("insert", "c", documents=[{"_id": 4}],
                        writeConcern={"w": "allThree", "wtimeout": 1500}, check=False)
        assert r["writeConcernError"]["code"] == 64
        c.t.get_collection("c", write_concern=WriteConcern(w="twoDCs", wtimeout=30000)) \
            .insert_one({"_id": 5})
    # no writeConcern: the implicit {w: "majority"}; with both secondaries
    # down it is never acknowledged (the primary steps down while it waits)
    other = next(m for m in others if m is not hidden)
    other.kill9()
    outcome = {}

    def write():
        try:
            with direct(p) as c:
                c.t.c.insert_one({"_id": 6})
            outcome["ok"] = True
        except PyMongoError as e:
            outcome["error"] = e
    t = threading.Thread(target=write)
    t.start()
    t.join(60)
    assert not t.is_alive()
    assert "ok" not in outcome, outcome
    assert isinstance(outcome["error"], (WriteConcernError, PyMongoError))


def test_secondary_delay(three):
    delay = 6
    initiate(three, {2: {"priority": 0, "hidden": True, "secondaryDelaySecs": delay}})
    p, _ = primary_and_others(three)
    delayed = three[2]
    with direct(delayed) as c:
        cfg = c.admin.command("replSetGetConfig")["config"]
        assert cfg["members"][2]["secondaryDelaySecs"] == delay
        hello = c.admin.command("hello")
        assert hello["secondaryDelaySecs"] == delay and hello["hidden"] is True
    with direct(p) as c:
        t0 = time.time()
        c.t.get_collection("c", write_concern=WriteConcern(w=2)).insert_one({"_id": 1})
    with direct(delayed) as c:
        assert c.t.c.find_one({"_id": 1}) is None  # within its delay

        def seen():
            return c.t.c.find_one({"_id": 1}) is not None
        wait_for(seen, timeout=90, step=0.1)
    assert time.time() - t0 >= delay - 0.5  # a lower bound: load only delays it more


def test_sync_from_and_maintenance(three):
    initiate(three, electable=3)  # all three may win (the first two only, by default)
    p, (s1, s2) = primary_and_others(three)
    with direct(p) as c:
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("replSetSyncFrom", host(s1))
        assert ei.value.code == 95  # NotSecondary
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("replSetMaintenance", True)
        assert ei.value.code == 95  # NotSecondary
        c.t.get_collection("c", write_concern=WriteConcern(w=3)).insert_one({"_id": 0})
    with direct(s2) as c:
        for target, code in ((host(s2), 72), ("127.0.0.1:1", 74)):
            with pytest.raises(OperationFailure) as ei:
                c.admin.command("replSetSyncFrom", target)
            assert ei.value.code == code
        r = c.admin.command("replSetSyncFrom", host(s1))
        assert r["syncFromRequested"] == host(s1)
        # s2 may have chained from s1 already (a nearer s1 when it chose; it
        # then stays, as mongod's rules keep a source that serves)
        assert r.get("prevSyncTarget") in (host(p), host(s1), None)
        wait_for(lambda: c.admin.command("replSetGetStatus")["syncSourceHost"] == host(s1))
        assert c.admin.command("replSetGetStatus")["syncSourceId"] == three.index(s1)
    # s2 tails s1; its position reaches the primary through s1
    with direct(p) as c:
        c.t.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=30000)) \
            .insert_one({"_id": 1})
    with direct(s2) as c:
        c.admin.command("replSetMaintenance", True)
        c.admin.command("replSetMaintenance", True)  # counted
        assert state(s2) == 3
        hello = c.admin.command("hello")
        assert hello["secondary"] is False
        c.admin.command("replSetMaintenance", False)
        assert state(s2) == 3
    with direct(p) as c:  # still applying while RECOVERING
        c.t.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=30000)) \
            .insert_one({"_id": 2})

        def seen_recovering():
            st = c.admin.command("replSetGetStatus")
            return next(x for x in st["members"] if x["name"] == host(s2))["state"] == 3
        wait_for(seen_recovering)
    with direct(s2) as c:
        c.admin.command("replSetMaintenance", False)
        assert state(s2) == 2
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("replSetMaintenance", False)
        assert ei.value.code == 96
