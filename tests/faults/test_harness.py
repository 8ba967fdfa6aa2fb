"""
Unit tests of the fault harness's own logic (no server): the fault schedule
is a function of the seed alone (replayable), failover durations, the run
summary, how workload.py classifies driver errors (ok / fail / info), the opt-in
disk-full and reconfig faults (each undone by the heal), scripted --faults, and
the reconfig documents the agent builds.
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


def test_recorded_seeds_replay_the_same_faults():
    """Opt-in kinds (disk-full, reconfig) come after the old ones, so a seed
    recorded before they existed (4008 found 3d047ea) still picks the same
    faults: this list is what the harness before them chose."""
    assert schedule(4008, 12)[1] == [
        "partition-halves", "isolate-primary", "kill", "one-way", "bridge", "kill-primary",
        "pause", "one-way", "bridge", "bridge", "pause-primary", "bridge"]


class FakeDisks:
    def __init__(self):
        self.calls = []

    def fill(self, m, leave):
        self.calls.append(("fill", m, leave))

    def free(self, m):
        self.calls.append(("free", m))


class RecordingAgent(FakeAgent):
    def __init__(self):
        self.calls = []

    def call(self, cmd, **kw):
        self.calls.append((cmd, kw))
        return {"primary": "n2"} if cmd == "status" else {"version": 2}


def test_disk_full_and_reconfig_faults_are_undone():
    import random
    b, disks, agent = FakeBackend(), FakeDisks(), RecordingAgent()
    nem = harness.Nemesis(b, agent, random.Random(5), 0.0, disks, reconfig=True)
    nem.note = lambda f, v: None
    for _ in range(200):
        nem.inject()
        nem.heal_all()
    assert {"disk-full", "disk-full-primary", "reconfig-remove",
            "reconfig-priorities"} <= set(nem.faults)
    fills = [c for c in disks.calls if c[0] == "fill"]
    assert len(fills) == sum(1 for c in disks.calls if c[0] == "free")
    assert {c[2] for c in fills} == {0, 64 << 20}
    # a filled member is checkpointed at once, and restarted after its disk is freed
    assert sum(1 for c, kw in agent.calls if c == "fsync") == len(fills)
    assert b.alive == set(harness.MEMBERS) and not nem.full and not nem.reconfigured
    removes = [kw for c, kw in agent.calls if c == "reconfig" and "remove" in kw]
    prios = [kw["priorities"] for c, kw in agent.calls if c == "reconfig" and "priorities" in kw]
    restores = [kw for c, kw in agent.calls if c == "reconfig" and kw.get("restore")]
    assert removes and prios and len(restores) == len(removes) + len(prios)
    assert all(any(p.values()) for p in prios)


def test_scripted_faults_and_unknown_kinds():
    import random
    b = FakeBackend()
    nem = harness.Nemesis(b, FakeAgent(), random.Random(1), 0.0)
    nem.note = lambda f, v: None
    nem.inject("kill-primary")
    assert b.calls == [("signal", "n2", signal.SIGKILL)]
    try:
        nem.inject("flood")
    except ValueError as e:
        assert "flood" in str(e)
    else:
        raise AssertionError("unknown fault accepted")
    try:
        harness.main(["--faults", "kill,pause+flood"])
    except SystemExit as e:   # argparse's error: before anything starts
        assert e.code == 2
    else:
        raise AssertionError("--faults with an unknown kind accepted")


def test_reconfigured_configs():
    import workload
    a = type("A", (), {"hosts": "n1=h1:1,n2=h2:1,n3=h3:1", "seed": 1, "threads": 1})
    ag = workload.Agent(a)
    cfg = {"_id": "rs0", "version": 4, "members": [
        {"_id": 0, "host": "h1:1"}, {"_id": 1, "host": "h2:1"}, {"_id": 2, "host": "h3:1"}]}
    out = ag.reconfigured(cfg, {"remove": "n2"})
    assert [m["host"] for m in out["members"]] == ["h1:1", "h3:1"]
    assert ag.reconfigured(dict(cfg, members=out["members"]), {"remove": "n1"}) is None
    back = ag.reconfigured(dict(cfg, members=out["members"]), {"restore": True})
    assert [(m["_id"], m["host"], m["priority"]) for m in back["members"]] == [
        (0, "h1:1", 1), (1, "h2:1", 1), (2, "h3:1", 1)]
    assert ag.reconfigured(cfg, {"restore": True}) is None
    p = ag.reconfigured(cfg, {"priorities": {"n1": 0, "n2": 3, "n3": 1}})
    assert [m["priority"] for m in p["members"]] == [0, 3, 1]


def test_failover_before_heal():
    rep = {"faults": [{"at_s": 2.0, "f": "isolate-primary", "value": "n1"},
                      {"at_s": 13.0, "f": "before-heal", "value": {"n1": 2, "n2": 1, "n3": 2}},
                      {"at_s": 13.1, "f": "heal", "value": None},
                      {"at_s": 15.0, "f": "kill-primary", "value": "n2"},
                      {"at_s": 26.0, "f": "before-heal", "value": {"n1": 2, "n2": None,
                                                                    "n3": 2}},
                      {"at_s": 26.1, "f": "restart", "value": "n2"}]}
    bad = harness.failovers_before_heal(rep)
    assert len(bad) == 1 and bad[0].startswith("kill-primary of n2 at 15.0s")
    rep["faults"][4]["value"]["n3"] = 1
    assert harness.failovers_before_heal(rep) == []
    rep["faults"][1]["value"] = {"n1": 1, "n2": 1, "n3": 2}   # the isolated one still leads
    assert len(harness.failovers_before_heal(rep)) == 1


def test_failover_before_heal_full_disk():
    def rep(value, states):
        return {"faults": [{"at_s": 2.0, "f": "disk-full-primary", "value": value},
                           {"at_s": 5.0, "f": "before-heal", "value": states}]}
    stuck, moved = {"n1": 1, "n2": 2, "n3": 2}, {"n1": 2, "n2": 1, "n3": 2}
    assert len(harness.failovers_before_heal(rep("n1 (64 MB left)", stuck))) == 1
    assert harness.failovers_before_heal(rep("n1 (64 MB left)", moved)) == []
    # n3 runs without the free-space guard: with 64 MB left it can still write
    n3 = {"n1": 2, "n2": 2, "n3": 1}
    assert harness.failovers_before_heal(rep("n3 (64 MB left)", n3)) == []
    assert len(harness.failovers_before_heal(rep("n3 (0 MB left)", n3))) == 1
