"""
primaryAutogroupNice (src/repl/repl_flow.c, docs/replication.md "Lag under
w: 1"): members of a set on one host share its CPUs; the member that is a
writable primary sets its Linux autogroup's nice value to the parameter, and
back to the value it started with once it is no longer primary, so the
secondaries applying its writes get the CPU first.

- A set from sable-cluster (members lead their own sessions, so each has an
  autogroup of its own) with --primary-nice 7: the primary's autogroup says
  nice 7, the secondaries' 0; after replSetStepDown the new primary's says 7
  and the old one's 0 again; setParameter primaryAutogroupNice=0 at run time
  puts the primary back to 0; getParameter shows the value, 20 is BadValue.
- A member that does not lead its session (started by this test, in the
  test's session) leaves the shared autogroup alone.
"""
import json
import os
import shutil
import tempfile
import time

import pytest
from pymongo.errors import OperationFailure

from sabled import one_member_set
from test_replset_drivers import cluster, port_run
from test_replset3 import wait_for

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"),
                                reason="the kernel has no autogroups (CONFIG_SCHED_AUTOGROUP)")


def nice_of(pid):
    with open("/proc/%d/autogroup" % pid) as f:
        return int(f.read().split("nice")[1])


def primary_index(ports):
    import pymongo
    for i, p in enumerate(ports):
        with pymongo.MongoClient("127.0.0.1", p, directConnection=True,
                                 serverSelectionTimeoutMS=2000) as c:
            try:
                if c.admin.command("hello").get("isWritablePrimary"):
                    return i
            except Exception:
                pass
    return None


def test_the_primary_lowers_its_autogroup_weight_and_gives_it_back():
    import pymongo
    d = tempfile.mkdtemp(prefix="sable-primary-nice-")
    base = port_run(3)
    ports = [base, base + 1, base + 2]
    try:
        cluster("start", "--members", "3", "--dir", d, "--port", str(base),
                "--election-timeout-ms", "2000", "--oplog-mb", "64", "--primary-nice", "7")
        with open(os.path.join(d, "cluster.json")) as f:
            pids = [m["pid"] for m in json.load(f)["members"]]
        assert all(pids), pids
        start_nice = 0
        first = primary_index(ports)
        assert first is not None
        # the refresher applies it within a second of the member becoming primary
        wait_for(lambda: [nice_of(p) for p in pids] ==
                 [7 if i == first else start_nice for i in range(3)], timeout=10)

        with pymongo.MongoClient("127.0.0.1", ports[first], directConnection=True) as c:
            assert c.admin.command("getParameter", 1, primaryAutogroupNice=1)[
                "primaryAutogroupNice"] == 7
            with pytest.raises(OperationFailure) as e:
                c.admin.command("setParameter", 1, primaryAutogroupNice=20)
            assert e.value.code == 2 and "primaryAutogroupNice" in str(e.value)
            try:
                c.admin.command("replSetStepDown", 30, secondaryCatchUpPeriodSecs=10)
            except Exception:
                pass  # the step-down may close the connection
        second = None

        def moved():
            nonlocal second
            second = primary_index(ports)
            return second is not None and second != first
        wait_for(moved, timeout=30)
        wait_for(lambda: [nice_of(p) for p in pids] ==
                 [7 if i == second else start_nice for i in range(3)], timeout=10)

        with pymongo.MongoClient("127.0.0.1", ports[second], directConnection=True) as c:
            r = c.admin.command("setParameter", 1, primaryAutogroupNice=0)
            assert r["was"] == 7
        wait_for(lambda: nice_of(pids[second]) == start_nice, timeout=10)
    finally:
        if os.path.exists(os.path.join(d, "cluster.json")):
            cluster("stop", "--dir", d)
        shutil.rmtree(d, ignore_errors=True)


def test_a_member_in_another_session_leaves_it_alone():
    mine = nice_of(os.getpid())
    with one_member_set(["--setParameter", "primaryAutogroupNice=9"]) as (s, c):
        assert c.admin.command("getParameter", 1, primaryAutogroupNice=1)[
            "primaryAutogroupNice"] == 9
        time.sleep(2.5)  # two refresher rounds as primary
        assert nice_of(s.proc.pid) == mine == nice_of(os.getpid())
