"""
Flow control on a primary, as mongod's (docs/replication.md "Flow control",
src/repl/repl_flow.c): when the majority commit point lags the primary's last
write by more than flowControlThresholdLagPercentage x flowControlTargetLagSeconds,
writes take tickets handed out at the rate the secondaries apply.

- A three-member set (flowControlTargetLagSeconds=1): the primary, a voting
  secondary whose applier is paused (rsSyncApplyStop), and a non-voting one, so
  the commit point needs the paused member.  Under a w:1 insert load,
  serverStatus.flowControl says isLagged with a target rate, the writers wait
  for tickets (timeAcquiringMicros) and get fewer writes done per second than
  with enableFlowControl false (set at run time), which hands out no limit;
  with flowControlMinTicketsPerSecond=0 no ticket is handed out at all: a write
  then ends at its maxTimeMS (MaxTimeMSExpired) and a write to local still runs;
  once the secondary applies again, isLagged goes back to false and the time
  spent lagged is counted.
- The parameters: start-up and run-time setParameter with mongod's bounds
  (BadValue), flowControlMaxSamples start-up only (IllegalOperation), getParameter;
  a standalone's serverStatus.flowControl never limits.
"""
import threading
import time

import pytest
from pymongo.errors import OperationFailure
from pymongo.write_concern import WriteConcern

from sabled import Sabled, SabledError, set_members
from test_replset3 import direct, state, wait_for

MAX_TICKETS = 1000000000
WRITERS = 4
ARGS = ["--setParameter", "flowControlTargetLagSeconds=1",
        "--setParameter", "flowControlSamplePeriod=10",
        "--setParameter", "flowControlMinTicketsPerSecond=10"]


@pytest.fixture(scope="module")
def rs():
    with set_members(3, ARGS) as members:
        p, s1, s2 = members
        cfg = {"_id": "rs0", "members": [
            {"_id": 0, "host": "127.0.0.1:%d" % p.port},
            {"_id": 1, "host": "127.0.0.1:%d" % s1.port, "priority": 0},
            {"_id": 2, "host": "127.0.0.1:%d" % s2.port, "priority": 0, "votes": 0}],
            "settings": {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}}
        with direct(p) as c:
            c.admin.command("replSetInitiate", cfg)
        wait_for(lambda: state(p) == 1 and state(s1) == 2 and state(s2) == 2, timeout=60)
        yield p, s1, s2


def flow(m):
    with direct(m) as c:
        return c.admin.command("serverStatus")["flowControl"]


class Writers:
    """WRITERS threads inserting one document at a time, w:1, until stopped;
    done counts the acknowledged inserts."""

    def __init__(self, m):
        self.m = m
        self.done = 0
        self.errors = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(k,)) for k in range(WRITERS)]

    def run(self, k):
        try:
            with direct(self.m) as c:
                coll = c.t.get_collection("w", write_concern=WriteConcern(w=1))
                while not self.stop.is_set():
                    coll.insert_one({"k": k})
                    with self.lock:
                        self.done += 1
        except Exception as e:   # noqa: BLE001 (reported by the test)
            self.errors.append(e)

    def rate(self, secs):
        """Inserts acknowledged per second over the next secs seconds."""
        before, t0 = self.done, time.monotonic()
        time.sleep(secs)
        return (self.done - before) / (time.monotonic() - t0)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(60)


def set_param(m, **kv):
    with direct(m) as c:
        return c.admin.command("setParameter", 1, **kv)


def test_lagged_majority_throttles_writes_until_the_secondary_applies(rs):
    p, s1, s2 = rs
    f = flow(p)
    assert f["enabled"] is True and f["isLagged"] is False
    assert f["targetRateLimit"] == MAX_TICKETS and f["isLaggedCount"] == 0
    with direct(s1) as c:
        c.admin.command("configureFailPoint", "rsSyncApplyStop", mode="alwaysOn",
                        data={"maxMS": 300000})
    try:
        with Writers(p) as w:
            # the commit point stays behind: flow control engages and limits the tickets
            wait_for(lambda: flow(p)["isLagged"] and flow(p)["targetRateLimit"] < 1000,
                     timeout=90)
            throttled = w.rate(4)
            f = flow(p)
            assert f["isLagged"] is True and f["isLaggedCount"] >= 1, f
            assert f["timeAcquiringMicros"] > 0, f          # writers waited for tickets
            assert f["locksPerKiloOp"] > 0, f               # tickets per oplog entry, sampled
            assert isinstance(f["sustainerRate"], int), f
            # no floor: no tickets at all while nothing is applied; a waiting write
            # ends at its maxTimeMS, a write to local never waits
            set_param(p, flowControlMinTicketsPerSecond=0)
            wait_for(lambda: flow(p)["targetRateLimit"] == 0, timeout=30)
            with direct(p) as c:
                with pytest.raises(OperationFailure) as e:
                    c.t.command("insert", "w", documents=[{"held": 1}], maxTimeMS=500,
                                writeConcern={"w": 1})
                assert e.value.code == 50, e.value
                c.local.get_collection("flow", write_concern=WriteConcern(w=1)).insert_one(
                    {"local": 1})
                assert c.local.flow.count_documents({}) == 1
                assert c.t.w.count_documents({"held": 1}) == 0
            set_param(p, flowControlMinTicketsPerSecond=10)
            # run-time off: no limit from the next second, and more writes get done
            assert set_param(p, enableFlowControl=False)["was"] is True
            wait_for(lambda: flow(p)["targetRateLimit"] == MAX_TICKETS, timeout=30)
            assert flow(p)["enabled"] is False
            free = w.rate(4)
            assert throttled < free, (throttled, free)
            assert throttled * 2 < free, (throttled, free)
            set_param(p, enableFlowControl=True)
            wait_for(lambda: flow(p)["targetRateLimit"] < MAX_TICKETS, timeout=30)
            # the secondary applies again: the commit point catches up, the lag ends
            with direct(s1) as c:
                c.admin.command("configureFailPoint", "rsSyncApplyStop", mode="off")
            wait_for(lambda: not flow(p)["isLagged"], timeout=120)
        assert not w.errors, w.errors
        f = flow(p)
        assert f["isLagged"] is False and f["isLaggedTimeMicros"] > 0, f
        # without lag the tickets grow back ((last + 1000) x 1.05 a second)
        before = f["targetRateLimit"]
        wait_for(lambda: flow(p)["targetRateLimit"] > before + 1000, timeout=30)
    finally:
        with direct(s1) as c:
            c.admin.command("configureFailPoint", "rsSyncApplyStop", mode="off")
        set_param(p, enableFlowControl=True)
    # nothing was lost on the way: a majority write after the load commits everywhere
    with direct(p) as c:
        c.t.w.with_options(write_concern=WriteConcern(w=3, wtimeout=120000)).insert_one(
            {"_id": "last"})
        n = c.t.w.count_documents({})
    for m in (s1, s2):
        with direct(m) as c:
            assert c.t.w.count_documents({}) == n


def test_parameters_at_run_time(rs):
    p = rs[0]
    with direct(p) as c:
        r = c.admin.command("getParameter", 1, flowControlTargetLagSeconds=1,
                            flowControlSamplePeriod=1, flowControlMinTicketsPerSecond=1,
                            flowControlThresholdLagPercentage=1, flowControlMaxSamples=1,
                            flowControlWarnThresholdSeconds=1, enableFlowControl=1)
        assert r["flowControlTargetLagSeconds"] == 1          # given at start-up
        assert r["flowControlSamplePeriod"] == 10
        assert r["flowControlMinTicketsPerSecond"] == 10
        assert r["flowControlThresholdLagPercentage"] == 0.5  # mongod's defaults
        assert r["flowControlMaxSamples"] == 1000000
        assert r["flowControlWarnThresholdSeconds"] == 10
        assert r["enableFlowControl"] is True
        allp = c.admin.command("getParameter", "*")
        assert allp["flowControlDecayConstant"] == 0.5
        assert allp["flowControlFudgeFactor"] == 0.95
        assert allp["flowControlTicketAdderConstant"] == 1000
        assert allp["flowControlTicketMultiplierConstant"] == 1.05
        r = c.admin.command("setParameter", 1, flowControlThresholdLagPercentage=0.75)
        assert r["was"] == 0.5
        assert c.admin.command("getParameter", 1, flowControlThresholdLagPercentage=1)[
            "flowControlThresholdLagPercentage"] == 0.75
        c.admin.command("setParameter", 1, flowControlThresholdLagPercentage=0.5)
        for name, bad in (("flowControlTargetLagSeconds", 0),
                          ("flowControlThresholdLagPercentage", 1.5),
                          ("flowControlThresholdLagPercentage", -0.1),
                          ("flowControlMinTicketsPerSecond", -1),
                          ("flowControlSamplePeriod", 0),
                          ("flowControlDecayConstant", 1.0),
                          ("flowControlFudgeFactor", 0),
                          ("flowControlTicketMultiplierConstant", 1.0),
                          ("flowControlWarnThresholdSeconds", -5),
                          ("flowControlTargetLagSeconds", "ten")):
            with pytest.raises(OperationFailure) as e:
                c.admin.command("setParameter", 1, **{name: bad})
            assert e.value.code == 2 and name in str(e.value), (name, bad, e.value)
        assert c.admin.command("getParameter", 1, flowControlTargetLagSeconds=1)[
            "flowControlTargetLagSeconds"] == 1
        with pytest.raises(OperationFailure) as e:   # start-up only, as mongod's
            c.admin.command("setParameter", 1, flowControlMaxSamples=10)
        assert e.value.code == 20 and "at runtime" in str(e.value)


def test_standalone_never_limits():
    with Sabled() as m:
        m.start(["--setParameter", "flowControlMaxSamples=50",
                 "--setParameter", "enableFlowControl=false"])
        with m.client() as c:
            f = c.admin.command("serverStatus")["flowControl"]
            assert f["enabled"] is False and f["targetRateLimit"] == MAX_TICKETS
            assert f["isLagged"] is False
            assert c.admin.command("getParameter", 1, flowControlMaxSamples=1)[
                "flowControlMaxSamples"] == 50
            c.admin.command("setParameter", 1, enableFlowControl=True)
            c.t.w.insert_many([{"i": i} for i in range(200)])
            f = c.admin.command("serverStatus")["flowControl"]
            assert f["enabled"] is True and f["targetRateLimit"] == MAX_TICKETS


def test_bad_start_up_value_stops_the_server():
    m = Sabled()
    try:
        with pytest.raises(SabledError):
            m.start(["--setParameter", "flowControlThresholdLagPercentage=2"], timeout=15)
        assert m.proc.poll() not in (None, 0)
        assert "flowControlThresholdLagPercentage" in m.output()
    finally:
        m.cleanup()
