"""
Sync source choice by ping (issue 24), as mongod's: a secondary tails the
nearest eligible member by heartbeat ping (the primary unless another is
clearly nearer), skips hidden members while another will do, tails only the
primary without settings.chainingAllowed, and moves when its source is far
(ping over changeSyncSourceThresholdMillis) while another is nearer by more
than that, at most maxNumSyncSourceChangesPerHour times an hour, or when its
choice stops being valid; replSetGetStatus says which (syncSourceHost,
syncSourceId).  A member is made "far" with Sable's
sableDelayHeartbeatPing fail point, which adds to the pings one member
measures to another.
"""
import time

import pytest
from pymongo.errors import AutoReconnect, OperationFailure
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_replset3 import direct, wait_for
from test_replset_members import host, initiate, primary_and_others


@pytest.fixture
def three():
    """Three members that take a member for far only by the fail point's
    400 ms: a loaded host's pings vary by more than the default 5 ms (by
    over 50 ms: a member left the primary for a secondary with no fail point
    on, load average 19 on 2 cores), and under mongod's rules a member stays
    with whatever source it took first."""
    with set_members(3, ["--setParameter", "changeSyncSourceThresholdMillis=100"]) as members:
        yield members


def source_of(m):
    with direct(m) as c:
        st = c.admin.command("replSetGetStatus")
        return st["syncSourceHost"], st["syncSourceId"]


def make_far(m, far, ms=400):
    with direct(m) as c:
        if far is None:
            c.admin.command("configureFailPoint", "sableDelayHeartbeatPing", mode="off")
        else:
            c.admin.command("configureFailPoint", "sableDelayHeartbeatPing", mode="alwaysOn",
                            data={"host": host(far), "ms": ms})


def reconfig(p, change, members):
    """A new config on p, once every member has it."""
    with direct(p) as c:
        cfg = c.admin.command("replSetGetConfig")["config"]
        cfg["version"] += 1
        change(cfg)
        c.admin.command("replSetReconfig", cfg)

    def everywhere():
        for m in members:
            with direct(m) as c:
                if c.admin.command("replSetGetConfig")["config"]["version"] != cfg["version"]:
                    return False
        return True
    wait_for(everywhere, timeout=30)


def sees_far(m, far, ms=400, beats=4):
    """m has measured far at ms or more in beats heartbeats since its fail
    point went on: the average the rules compare (a quarter of each new ping)
    is then at least 68% of ms.  On a loaded host heartbeats come late, so
    this is waited for, not slept."""
    seen = set()

    def measured():
        with direct(m) as c:
            row = next(r for r in c.admin.command("replSetGetStatus")["members"]
                       if r["name"] == host(far))
        if row["pingMs"] >= ms:
            seen.add(row["lastHeartbeat"])
        return len(seen) >= beats
    wait_for(measured, timeout=60, step=0.1)


def changes_so_far(m):
    """m's changes of sync source so far, as maxNumSyncSourceChangesPerHour
    counts them: each member chosen (for an initial sync or a sync, logged
    21164 or 21799) other than the one chosen before."""
    hosts = [line["attr"]["syncSource"] for line in m.log_lines()
             if line.get("id") in (21164, 21799)]
    return sum(a != b for a, b in zip(hosts, hosts[1:]))


def start(three):
    """Initiate the three (any of them may win the first election: on a
    loaded host another's election timeout may run out first), and return
    p, s1, s2 and before once both secondaries tail the primary and s1 may
    change its source three more times this hour.  Around the election a
    secondary may take the other instead (with no primary known yet a member
    tails one ahead of it, and the other may have heard of the new primary
    first), and then keep it, as mongod's rules keep a source that serves
    well: the other is made far until it moves.  Such changes count (every
    change does), and on a loaded host the election's may use up the hour's
    three: the limit is lifted for the move, then set to three more than the
    before changes s1 made (s2's to 3)."""
    initiate(three, electable=len(three))
    p, (s1, s2) = primary_and_others(three)

    def chosen(m):
        """m's source once it is one chosen in this term: m applied an entry
        of the term (a sync begun before ends at the term's first entry)."""
        with direct(m) as c:
            st = c.admin.command("replSetGetStatus")
        return st["syncSourceHost"] if st["optimes"]["appliedOpTime"]["t"] == st["term"] else ""

    for m, other in ((s1, s2), (s2, s1)):
        wait_for(lambda: chosen(m) in (host(p), host(other)), timeout=30)
        if source_of(m)[0] != host(p):
            set_max_changes(m, 99)
            make_far(m, other)
            wait_for(lambda: source_of(m)[0] == host(p), timeout=30)
            make_far(m, None)
            if m is s2:
                set_max_changes(s2, 3)

    def logged():  # the choice is logged as it is made: wait for the line
        hosts = [line["attr"]["syncSource"] for line in s1.log_lines()
                 if line.get("id") in (21164, 21799)]
        return hosts and hosts[-1] == source_of(s1)[0] == host(p)
    wait_for(logged, timeout=10)
    before = changes_so_far(s1)
    if before:
        set_max_changes(s1, 3 + before)
    return p, s1, s2, before


def set_max_changes(m, n):
    with direct(m) as c:
        return c.admin.command("setParameter", 1, maxNumSyncSourceChangesPerHour=n)["was"]


def stays(m, want, secs=3):
    """m's sync source is want for secs (heartbeats every 500 ms: the
    averages the rules compare settle within that)."""
    end = time.time() + secs
    while time.time() < end:
        assert source_of(m)[0] == want
        time.sleep(0.25)


def test_nearest_member_and_back(three):
    p, s1, s2, _ = start(three)
    make_far(s1, p)
    # the primary is far from s1: it tails s2, and says so
    wait_for(lambda: source_of(s1)[0] == host(s2), timeout=30)
    assert source_of(s1)[1] == three.index(s2)
    with direct(p) as c:  # its writes reach s1 through s2
        c.t.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=30000)) \
            .insert_one({"_id": 1})
    with direct(s2) as c:
        assert c.admin.command("replSetGetStatus")["syncSourceHost"] == host(p)
    # the primary is near again: s2 serves well, s1 stays (mongod leaves a
    # source only when it is far, lags or gets nothing new)
    make_far(s1, None)
    stays(s1, host(s2))
    # s2 is far now: back to the primary
    make_far(s1, s2)
    wait_for(lambda: source_of(s1)[0] == host(p), timeout=30)
    with direct(p) as c:
        c.t.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=30000)) \
            .insert_one({"_id": 2})


def test_hidden_and_chaining_not_allowed(three):
    p, s1, s2, _ = start(three)
    i2 = three.index(s2)

    def hide(on):
        def change(cfg):
            cfg["members"][i2].update(hidden=on, priority=0 if on else 1)
        return change
    make_far(s1, s2)  # start from the primary
    wait_for(lambda: source_of(s1)[0] == host(p), timeout=30)
    reconfig(p, hide(True), three)
    make_far(s1, p)
    stays(s1, host(p))  # a hidden member only when no other will do
    make_far(s1, None)
    reconfig(p, hide(False), three)

    def chaining(on):
        def change(cfg):
            cfg["settings"]["chainingAllowed"] = on
        return change
    reconfig(p, chaining(False), three)
    make_far(s1, p)
    stays(s1, host(p))  # no chaining: the primary however far
    with direct(p) as c:
        assert c.admin.command("replSetGetConfig")["config"]["settings"]["chainingAllowed"] \
            is False
    reconfig(p, chaining(True), three)
    # a nearer member appeared for s1: it moves
    wait_for(lambda: source_of(s1)[0] == host(s2), timeout=30)


def test_changes_per_hour(three):
    """Pings that keep changing move a member at most
    maxNumSyncSourceChangesPerHour (3) times an hour, every change counted
    (to a secondary and back to the primary alike); the parameters are
    mongod's, with its defaults and bounds."""
    p, s1, s2, before = start(three)
    with direct(p) as c:  # the defaults (start may have set the secondaries' limits)
        got = c.admin.command("getParameter", 1, maxNumSyncSourceChangesPerHour=1,
                              changeSyncSourceThresholdMillis=1, maxSyncSourceLagSecs=1)
        assert (got["maxNumSyncSourceChangesPerHour"], got["changeSyncSourceThresholdMillis"],
                got["maxSyncSourceLagSecs"]) == (3, 100, 30)  # 100: --setParameter
        for name, bad in (("maxNumSyncSourceChangesPerHour", 0),
                          ("changeSyncSourceThresholdMillis", -1)):
            with pytest.raises(OperationFailure) as e:
                c.admin.command("setParameter", 1, **{name: bad})
            assert e.value.code == 2  # BadValue
        with pytest.raises(OperationFailure) as e:  # start-up only
            c.admin.command("setParameter", 1, maxSyncSourceLagSecs=10)
        assert e.value.code == 20  # IllegalOperation
    assert source_of(s1)[0] == host(p)  # three changes allowed from here (start)
    for far, want in ((p, s2), (s2, p), (p, s2)):  # three changes
        make_far(s1, far)
        wait_for(lambda: source_of(s1)[0] == host(want), timeout=30)
    make_far(s1, s2)  # a fourth would be one too many this hour
    stays(s1, host(s2), secs=4)
    with direct(s1) as c:
        assert c.admin.command("setParameter", 1, maxNumSyncSourceChangesPerHour=4 + before
                               )["was"] == 3 + before
    wait_for(lambda: source_of(s1)[0] == host(p), timeout=30)
    with direct(s1) as c:  # threshold 0: ping never moves it
        assert c.admin.command("setParameter", 1, maxNumSyncSourceChangesPerHour=99
                               )["was"] == 4 + before
        assert c.admin.command("setParameter", 1, changeSyncSourceThresholdMillis=0)["was"] == 100
    make_far(s1, p)
    stays(s1, host(p))


def test_no_cycle_after_step_down(three):
    """Right after a step-down the old primary p and the secondary s2 that
    tails it are level.  p must not take s2 (nearer by ping than the new
    primary s1, level, with a source of its own) while s2 tails p: the two
    would tail each other, nothing written on s1 would reach either, and
    s1's w:"majority" writes would wait until maxSyncSourceLagSecs (the
    failure of test_stepdown_write.py under load).  p takes s1; s2 chains
    through p; s1's majority writes go through.  On a loaded host heartbeats
    come late: two members may each move to the other, nearer, on views a
    heartbeat old (each saw the other tail s1); such a cycle must not stay
    (each leaves a source that tails it at its next look), and in the end p's
    chain of sources reaches s1."""
    initiate(three, extra={2: {"priority": 0}})  # s1 is the one elected
    p, others = primary_and_others(three)
    s2 = three[2]
    s1 = next(m for m in others if m is not s2)
    make_far(p, s1)   # for p, s2 is by far the nearest
    make_far(s2, s1)  # s2 takes p, the nearest, and keeps it
    wait_for(lambda: source_of(s2)[0] == host(p), timeout=30)
    sees_far(p, s1)   # the ping averages settle
    sees_far(s2, s1)
    with direct(p) as c:
        try:
            c.admin.command("replSetStepDown", 60, secondaryCatchUpPeriodSecs=10)
        except AutoReconnect:
            pass  # the member may close client connections as it steps down
    wait_for(lambda: primary_and_others(three)[0] is s1, timeout=30)
    wait_for(lambda: source_of(p)[0] != "", timeout=30)
    end = time.time() + 6
    since = None  # when the cycle now seen was first seen
    while time.time() < end:  # no two members keep tailing each other
        sources = {m.port: source_of(m)[0] for m in three}
        if sources[p.port] == host(s2) and sources[s2.port] == host(p):
            since = since or time.time()
            assert time.time() - since < 3, sources  # six heartbeats
        else:
            since = None
        time.sleep(0.25)

    def reaches_s1():
        src, via = source_of(p)[0], source_of(s2)[0]
        return src == host(s1) or (src == host(s2) and via == host(s1))
    wait_for(reaches_s1, timeout=10)
    with direct(s1) as c:
        c.t.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=10000)) \
            .insert_one({"_id": "after-step-down"})
    with direct(p) as c:
        wait_for(lambda: c.t.c.find_one({"_id": "after-step-down"}) is not None, timeout=10)
