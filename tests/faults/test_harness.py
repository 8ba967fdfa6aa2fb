"""
Unit tests of the fault harness's own logic (no server): the fault schedule
is a function of the seed alone (replayable), failover durations, the run
summary, and how workload.py classifies driver errors (ok / fail / info).
"""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pymongo.errors import (AutoReconnect, DuplicateKeyError, NotMasterError,  # noqa: E402
                            OperationFailure, ServerSelectionTimeoutError, WriteConcernError)

import harness  # noqa: E402
from history import Op  # noqa: E402
from workload import classify  # noqa: E402


class FakeBackend:
    partitions = True

    def __init__(self):
        self.calls, self.faulty, self.alive = [], False, set(harness.MEMBERS)

    def signal(self, m, sig):
        if m not in self.alive and sig != signal.SIGCONT:
            return False
        if sig == signal.SIGKILL:
            self.alive.discard(m)
        self.calls.append(("signal", m, sig))
        return True

    def start(self, m):
        self.alive.add(m)
        self.calls.append(("start", m))

    def partition(self, groups):
        self.faulty = True
        self.calls.append(("partition", groups))

    def bridge(self, m):
        self.faulty = True
        self.calls.append(("bridge", m))

    def drop(self, a, b):
        self.faulty = True
        self.calls.append(("drop", a, b))

    def heal(self):
        self.faulty = False
        self.calls.append(("heal",))

    def net_faulty(self):
        return self.faulty


class FakeAgent:
    def call(self, cmd):
        assert cmd == "status"
        return {"primary": "n2"}


def schedule(seed, n=30):
    import random
    b = FakeBackend()
    nem = harness.Nemesis(b, FakeAgent(), random.Random(seed), 0.0)
    nem.note = lambda f, v: None
    for _ in range(n):
        nem.inject()
        nem.heal_all()
    return b.calls, nem.faults


def test_schedule_is_a_function_of_the_seed():
    assert schedule(7) == schedule(7)
    assert schedule(7) != schedule(8)
    calls, faults = schedule(7, 200)
    assert {"kill", "kill-primary", "pause", "pause-primary", "partition-halves",
            "isolate-primary", "bridge", "one-way"} <= set(faults)
    # every fault is undone: killed members restarted, paused ones resumed, heal after a partition
    kills = sum(1 for c in calls if c[0] == "signal" and c[2] == signal.SIGKILL)
    stops = sum(1 for c in calls if c[0] == "signal" and c[2] == signal.SIGSTOP)
    assert kills == sum(1 for c in calls if c[0] == "start")
    assert stops == sum(1 for c in calls if c[0] == "signal" and c[2] == signal.SIGCONT)
    # the "-primary" faults hit the member the agent names as primary
    assert ("bridge", "n2") in calls or ("partition", [["n2"]]) in calls


def test_loopback_schedule_has_no_network_faults():
    import random
    b = FakeBackend()
    b.partitions = False
    nem = harness.Nemesis(b, FakeAgent(), random.Random(3), 0.0)
    nem.note = lambda f, v: None
    for _ in range(50):
        nem.inject()
        nem.heal_all()
    assert set(nem.faults) <= {"kill", "kill-primary", "pause", "pause-primary"}


def op(f, typ, call, ret):
    return Op(0, 1, typ, f, "k", 1, None, call, ret)


def test_failovers_measure_time_to_next_acknowledged_write():
    ops = [op("write", "ok", 0, 5), op("read", "ok", 12, 13), op("write", "info", 11, None),
           op("write", "ok", 2_000_000_000, 3_500_000_000)]
    nem = [{"f": "kill-primary", "time": 1_000_000_000}, {"f": "kill", "time": 0}]
    assert harness.failovers(ops, nem) == [{"fault": "kill-primary", "seconds": 2.5}]
    assert harness.failovers(ops[:3], nem) == [{"fault": "kill-primary", "seconds": None}]


def test_summary_counts_rollback_only_rounds_apart():
    reps = [{"seed": 1, "workload": "set", "valid": True, "faults": [{"f": "kill"},
                                                                     {"f": "restart"}],
             "ops": {"ok": 3, "fail": 1, "info": 0}, "failovers": [{"seconds": 2.0}]},
            {"seed": 2, "workload": "set", "valid": False, "only_rollback": True,
             "anomalies": ["rollback"], "faults": [], "ops": {"ok": 1, "fail": 0, "info": 2},
             "failovers": []}]
    s = harness.summarize(reps)
    assert s["invalid"] == 1 and s["invalid_only_rollback"] == 1
    assert s["faults"] == {"kill": 1} and s["ops"] == {"ok": 4, "fail": 1, "info": 2}
    assert s["failover_s"] == [2.0] and s["invalid_seeds"][0][0] == 2


def test_classify_driver_errors():
    assert classify(DuplicateKeyError("dup", 11000), False) == "fail"
    assert classify(ServerSelectionTimeoutError("none"), False) == "fail"
    assert classify(NotMasterError("not primary", {"code": 10107}), False) == "fail"
    assert classify(NotMasterError("stepped down", {"code": 11602}), False) == "info"
    assert classify(WriteConcernError("wtimeout", 64, {}), False) == "info"
    assert classify(AutoReconnect("connection closed"), False) == "info"
    assert classify(OperationFailure("interrupted", 11601), False) == "info"
    assert classify(AutoReconnect("connection closed"), True) == "fail"
