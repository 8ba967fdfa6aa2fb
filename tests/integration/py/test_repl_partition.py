"""
Scripted network faults on a three-member set, each member in its own
network namespace (tests/faults/netfaults.py; needs root, ip and nft, else
skipped).  Regression tests for anomalies the fault runs found
(docs/reliability.md):

- a primary whose peers' packets are dropped (not refused) steps down within
  a few election timeouts, and the other two elect a new primary: the
  heartbeat thread spent its whole time on heartbeats to the unreachable
  peers (each takes its full timeout, longer than the heartbeat interval),
  so neither the step-down nor the election check ever ran (seed 1003).
"""
import os
import shutil
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "faults"))


def _why_not():
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return "%s not found (scripts/deps.sh installs it)" % tool
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10)
    if r.returncode:
        return "ip netns unavailable"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


class Args:
    threads = 1
    election_timeout_ms = 2000
    read_concern = "majority"


@pytest.fixture
def netset(tmp_path):
    import harness
    b = harness.Netns(str(tmp_path))
    with b:
        for m in harness.MEMBERS:
            b.start(m)
        agent = harness.Agent(b, "register", 1, str(tmp_path / "h.jsonl"), Args)
        try:
            agent.call("init")
            yield b, agent
        finally:
            agent.close()


def wait_status(agent, pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = agent.call("status")
        if pred(st):
            return st
        time.sleep(0.3)
    return None


def test_isolated_primary_steps_down_and_the_majority_elects(netset):
    b, agent = netset
    st = wait_status(agent, lambda s: s["primary"] is not None, 20)
    old = st["primary"]
    t0 = time.monotonic()
    b.partition([[old]])          # drops, both ways: connects to and from it hang
    new = wait_status(agent, lambda s: s["primary"] not in (None, old) and
                      s["states"][s["primary"]] == 1, 20)
    assert new is not None, "no new primary within 20 s of isolating %s" % old
    elected = time.monotonic() - t0
    down = wait_status(agent, lambda s: s["states"][old] != 1, 15)
    assert down is not None, "the isolated primary %s did not step down" % old
    stepped = time.monotonic() - t0
    print("isolated %s: new primary %s after %.1f s, old one stepped down after %.1f s"
          % (old, new["primary"], elected, stepped))
    b.heal()
    back = wait_status(agent, lambda s: s["states"][old] == 2, 30)
    assert back is not None, "the old primary did not come back as a secondary"
