"""
primaryAutogroupNice (src/repl/repl_flow.c, docs/replication.md "Lag under
w: 1"): members of a set on one host share its CPUs; a writable primary whose
data-bearing members fall 250 ms behind its last write sets its Linux
autogroup's nice value to the parameter, so they get the CPU first, and puts
back the value it started with once they have kept within 50 ms for a second,
or once it is no longer primary.

- A set from sable-cluster (members lead their own sessions, so each has an
  autogroup of its own) with --primary-nice 7: caught up (for a second),
  every member's autogroup says nice 0; with one secondary's applier paused
  (rsSyncApplyStop) and writes going on, the primary's says 7 and
  serverStatus.flowControl
  says primaryNiced; after replSetStepDown the old primary's is 0 again and
  the new primary's 7 (the paused member still lags); setParameter
  primaryAutogroupNice=0 at run time puts it back to 0; with the applier
  running again and the members caught up, a primary stays at 0.
  getParameter shows the value, 20 is BadValue.
- A member that does not lead its session (started by this test, in the
  test's session) leaves the shared autogroup alone even as the primary of a
  two-member set whose secondary's applier is paused; the primary of a
  one-member set does too (nobody to give way to).  A process of the init
  session's group (CI's runner) has no autogroup value to compare.
"""
import json
import os
import shutil
import tempfile
import time

import pytest
from pymongo.errors import OperationFailure
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_replset_drivers import Set, cluster, port_run
from test_replset3 import initiate_pair, wait_for

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"),
                                reason="the kernel has no autogroups (CONFIG_SCHED_AUTOGROUP)")


def nice_of(pid):
    """The autogroup's nice value, or None for a process of the init
    session's group (the root task group prints nothing: CI's runner)."""
    with open("/proc/%d/autogroup" % pid) as f:
        text = f.read()
    return int(text.split("nice")[1]) if "nice" in text else None


def niced(port):
    import pymongo
    with pymongo.MongoClient("127.0.0.1", port, directConnection=True) as c:
        return c.admin.command("serverStatus")["flowControl"]


def test_the_primary_lowers_its_autogroup_weight_while_members_lag():
    import pymongo
    d = tempfile.mkdtemp(prefix="sable-primary-nice-")
    base = port_run(3)
    ports = [base, base + 1, base + 2]
    try:
        cluster("start", "--members", "3", "--dir", d, "--port", str(base),
                "--election-timeout-ms", "2000", "--oplog-mb", "64", "--primary-nice", "7",
                "--sabled-arg=--setParameter", "--sabled-arg=enableTestCommands=1")
        with open(os.path.join(d, "cluster.json")) as f:
            pids = [m["pid"] for m in json.load(f)["members"]]
        assert all(pids), pids
        first = Set(d, base).primary()
        assert first is not None
        paused = (first + 1) % 3
        cl = pymongo.MongoClient("127.0.0.1", ports[first], directConnection=True)
        cl.t.get_collection("c", write_concern=WriteConcern(w=3)).insert_one({"caught": "up"})
        # (members that were starting up lagged: once caught up for a second, 0)
        wait_for(lambda: [nice_of(p) for p in pids] == [0, 0, 0], timeout=10)
        assert niced(ports[first])["primaryNiced"] is False
        assert cl.admin.command("getParameter", 1, primaryAutogroupNice=1)[
            "primaryAutogroupNice"] == 7
        with pytest.raises(OperationFailure) as e:
            cl.admin.command("setParameter", 1, primaryAutogroupNice=20)
        assert e.value.code == 2 and "primaryAutogroupNice" in str(e.value)

        with pymongo.MongoClient("127.0.0.1", ports[paused], directConnection=True) as c:
            # (each wait ends after data.maxMS, 60 s by default: under CI's load the
            # test can pass that before the election, and a caught-up member may win)
            c.admin.command("configureFailPoint", "rsSyncApplyStop", mode="alwaysOn",
                            data={"maxMS": 600000})

        def lagging():
            cl.t.c.insert_one({"at": time.time()})  # w:1: the paused member falls behind
            return nice_of(pids[first]) == 7
        wait_for(lagging, timeout=15, step=0.1)
        f = niced(ports[first])
        assert f["primaryNiced"] is True and f["primaryNicedCount"] >= 1
        assert nice_of(pids[paused]) == 0
        cl.close()

        try:
            with pymongo.MongoClient("127.0.0.1", ports[first], directConnection=True) as c:
                c.admin.command("replSetStepDown", 30, secondaryCatchUpPeriodSecs=10)
        except Exception:
            pass  # the step-down may close the connection
        wait_for(lambda: Set(d, base).primary(wait=0) not in (None, first), timeout=30)
        second = Set(d, base).primary()
        assert second not in (None, first, paused)
        # the old primary gives its weight back; the new one's member still lags
        wait_for(lambda: nice_of(pids[first]) == 0 and nice_of(pids[second]) == 7, timeout=10)

        with pymongo.MongoClient("127.0.0.1", ports[second], directConnection=True) as c:
            r = c.admin.command("setParameter", 1, primaryAutogroupNice=0)
            assert r["was"] == 7
            wait_for(lambda: nice_of(pids[second]) == 0, timeout=10)
            assert niced(ports[second])["primaryNiced"] is False
            c.admin.command("setParameter", 1, primaryAutogroupNice=7)
        with pymongo.MongoClient("127.0.0.1", ports[paused], directConnection=True) as c:
            c.admin.command("configureFailPoint", "rsSyncApplyStop", mode="off")
        with pymongo.MongoClient("127.0.0.1", ports[second], directConnection=True) as c:
            c.t.get_collection("c", write_concern=WriteConcern(w=3)).insert_one({"caught": 2})
        wait_for(lambda: [nice_of(p) for p in pids] == [0, 0, 0], timeout=10)
    finally:
        if os.path.exists(os.path.join(d, "cluster.json")):
            cluster("stop", "--dir", d)
        shutil.rmtree(d, ignore_errors=True)


def test_a_member_in_another_session_leaves_it_alone():
    import pymongo
    mine = nice_of(os.getpid())
    with set_members(2, ["--setParameter", "primaryAutogroupNice=9"]) as ms:
        initiate_pair(ms[0], ms[1], {"electionTimeoutMillis": 2000})
        c = pymongo.MongoClient("127.0.0.1", ms[0].port, directConnection=True)
        try:
            c.t.get_collection("c", write_concern=WriteConcern(w=2)).insert_one({"caught": "up"})
            with pymongo.MongoClient("127.0.0.1", ms[1].port, directConnection=True) as c1:
                c1.admin.command("configureFailPoint", "rsSyncApplyStop", mode="alwaysOn")
            # the secondary falls seconds behind: a session leader would nice itself
            w1 = c.t.get_collection("c", write_concern=WriteConcern(w=1))
            end = time.time() + 2.5
            while time.time() < end:
                w1.insert_one({"at": time.time()})
                time.sleep(0.01)
            f = niced(ms[0].port)
            assert f["primaryNiced"] is False and f["primaryNicedCount"] == 0
            assert nice_of(ms[0].proc.pid) == mine == nice_of(os.getpid())
        finally:
            c.close()


def test_a_one_member_set_has_nobody_to_give_way_to():
    d = tempfile.mkdtemp(prefix="sable-primary-nice1-")
    base = port_run(1)
    try:
        cluster("start", "--members", "1", "--dir", d, "--port", str(base), "--oplog-mb", "64",
                "--primary-nice", "7")
        with open(os.path.join(d, "cluster.json")) as f:
            pid = json.load(f)["members"][0]["pid"]
        assert Set(d, base).primary() == 0
        time.sleep(2.5)  # two refresher rounds as primary
        assert nice_of(pid) == 0
    finally:
        if os.path.exists(os.path.join(d, "cluster.json")):
            cluster("stop", "--dir", d)
        shutil.rmtree(d, ignore_errors=True)
