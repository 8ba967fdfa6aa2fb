"""
replSetStepDown's election hand-off, as mongod 7.0's (SERVER-35623): once
stepped down, the old primary sends replSetStepUp (skipDryRun) to the
caught-up electable secondary of the highest priority, the lowest config
index on a tie; it cannot know whether that member is frozen, and a frozen
member (replSetFreeze) refuses replSetStepUp (CommandFailed 125, "Election
failed."), so another member is elected when its election timeout passes.
Three electable members, priority 1, electionTimeoutMillis 5000 (so that on a
loaded host the hand-off, not a timeout, is what elects in the first test).
"""
import time

import pytest
from pymongo.errors import OperationFailure
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_repl_catchup import fail_point
from test_repl_guarantees import initiate, the_primary
from test_replset3 import direct, state, wait_for


@pytest.fixture
def rs():
    with set_members(3) as members:
        initiate(members, election_timeout_ms=5000, timeout=60)
        yield members


def caught_up_secondaries(members):
    """The primary and its secondaries in config order, after a w:3 write."""
    p = the_primary(members)
    with direct(p) as d:
        d.t.c.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).insert_one({"x": 1})
    return p, [m for m in members if m is not p]


def step_down(p):
    with direct(p) as d:
        d.admin.command("replSetStepDown", 60, secondaryCatchUpPeriodSecs=10)


def test_hand_off_goes_to_the_first_caught_up_secondary(rs):
    p, secs = caught_up_secondaries(rs)
    step_down(p)
    new = the_primary(rs)
    assert new is secs[0], [m.port for m in rs]
    with direct(new) as d:
        reason = d.admin.command("replSetGetStatus")["electionCandidateMetrics"]
    assert reason["lastElectionReason"] == "stepUpRequestSkipDryRun"


def test_a_frozen_member_refuses_step_up_and_another_is_elected(rs):
    p, secs = caught_up_secondaries(rs)
    frozen, other = secs
    with direct(frozen) as d:
        d.admin.command("replSetFreeze", 120)
        with pytest.raises(OperationFailure) as ei:
            d.admin.command("replSetStepUp")
        assert ei.value.code == 125 and ei.value.details["codeName"] == "CommandFailed"
    assert state(frozen) == 2
    # the hand-off goes to frozen (it cannot know), which refuses: other wins at its timeout
    step_down(p)
    assert the_primary(rs) is other
    assert state(frozen) == 2
    with direct(frozen) as d:
        d.admin.command("replSetFreeze", 0)  # unfrozen, it may stand again
        wait_for(lambda: d.admin.command("replSetStepUp")["ok"], timeout=30)
    wait_for(lambda: state(frozen) == 1, timeout=30)


def status(m):
    with direct(m) as d:
        return d.admin.command("replSetGetStatus")


def test_plain_step_up_runs_a_dry_run_first(rs):
    """replSetStepUp without skipDryRun runs a dry run first, as mongod's: a
    member too far behind to win loses it without moving the term, so the
    primary stays (with no dry run its lost election still raised the term
    and deposed the primary: a member retrying replSetStepUp while it caught
    up kept knocking the set's primary down, and the frozen-member test above
    could run out of time on a loaded host).  With skipDryRun it runs at once
    and the higher term still deposes the primary; once caught up, a plain
    replSetStepUp wins with lastElectionReason stepUpRequest."""
    p, secs = caught_up_secondaries(rs)
    behind, other = secs
    host = "127.0.0.1:%d" % p.port   # other tails p, not behind (which stops applying)
    with direct(other) as d:
        d.admin.command("replSetSyncFrom", host)
    wait_for(lambda: status(other)["syncSourceHost"] == host, timeout=30)
    fail_point(behind, "rsSyncApplyStop", True)
    try:
        with direct(p) as d:   # entries behind does not apply: it is staler than both
            d.t.c.with_options(write_concern=WriteConcern(w=2, wtimeout=30000)).insert_many(
                [{"n": i} for i in range(3)])
        term = status(p)["term"]
        for _ in range(3):
            with direct(behind) as d:
                with pytest.raises(OperationFailure) as ei:
                    d.admin.command("replSetStepUp")
            assert ei.value.code == 125, ei.value.details
        assert state(p) == 1 and status(p)["term"] == term
        assert status(behind)["term"] == term
        with direct(behind) as d:   # no dry run: the election is lost, the term moves on
            with pytest.raises(OperationFailure) as ei:
                d.admin.command("replSetStepUp", skipDryRun=True)
        assert ei.value.code == 125
        wait_for(lambda: status(p)["term"] > term, timeout=30)
    finally:
        fail_point(behind, "rsSyncApplyStop", False)
    with direct(behind) as d:
        wait_for(lambda: d.admin.command("replSetStepUp")["ok"], timeout=60)
    assert the_primary(rs) is behind
    assert status(behind)["electionCandidateMetrics"]["lastElectionReason"] == "stepUpRequest"


def test_an_election_does_not_wait_for_a_voter_it_cannot_reach(rs):
    """A candidate asks the voters its heartbeats reach first, and one they do
    not only while no majority said yes (mongod's VoteRequester asks all at
    once and ends at a majority): a paused member (it accepts the connection
    and never answers) first in the config held each phase (dry run,
    election) for the request's 2 s timeout, so a failover across a
    partition took 4 s more than its election timeout."""
    paused = rs[0]
    if state(paused) == 1:
        with direct(rs[1]) as d:
            wait_for(lambda: d.admin.command("replSetStepUp")["ok"], timeout=30)
    p = the_primary(rs)
    assert p is not paused
    candidate = next(m for m in rs[1:] if m is not p)
    with direct(p) as d:
        d.t.c.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).insert_one({"y": 1})
    paused.pause()
    try:
        host = "127.0.0.1:%d" % paused.port
        wait_for(lambda: next(x["health"] for x in status(candidate)["members"]
                              if x["name"] == host) == 0, timeout=30)
        t0 = time.monotonic()
        with direct(candidate) as d:
            d.admin.command("replSetStepUp")
        took = time.monotonic() - t0
        assert state(candidate) == 1
        # two phases behind the paused member took at least 2 x 2 s
        assert took < 3.5, took
    finally:
        paused.resume()
