"""
What a replica set guarantees and what it does not (docs/replication.md,
"Guarantees"), each shown by a scripted fault sequence on three electable
members (electionTimeoutMillis 2000):

- a w:"majority" write that was acknowledged survives the loss of the
  primary: it is on the new primary and on every member after healing;
- a w:1 write (even j:true) on a primary cut off from the others (here:
  they are down) is
  acknowledged, and readConcern "local" reads on that primary see it, but the
  new primary does not have it: it is lost.  The former primary then rolls
  it back, or, while rollback is not built, stops syncing and says so
  in its log (id 21656).
"""
import signal


import pymongo
import pytest
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from sabled import Sabled
from test_replset3 import direct, state, wait_for


@pytest.fixture
def rs3e():
    members = []
    try:
        for _ in range(3):
            s = Sabled()
            s.start(["--replSet", "rs0", "--oplogSizeMB", "16"])
            members.append(s)
        cfg = {"_id": "rs0", "members": [
            {"_id": i, "host": "127.0.0.1:%d" % m.port} for i, m in enumerate(members)],
            "settings": {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}}
        with direct(members[0]) as c:
            c.admin.command("replSetInitiate", cfg)
        wait_for(lambda: any(state(m) == 1 for m in members) and
                 all(state(m) in (1, 2) for m in members), timeout=30)
        yield members
    finally:
        for m in members:
            if m.is_running():
                m.signal(signal.SIGCONT)
        for m in members:
            m.cleanup()


def the_primary(members):
    return wait_for(lambda: next((m for m in members if m.is_running() and state(m) == 1),
                                 None), timeout=30)


def test_w1_write_of_a_cut_off_primary_is_lost_majority_writes_are_not(rs3e):
    p = the_primary(rs3e)
    s1, s2 = [m for m in rs3e if m is not p]
    seeds = ",".join("127.0.0.1:%d" % m.port for m in rs3e)
    c = pymongo.MongoClient("mongodb://%s/?replicaSet=rs0" % seeds, retryWrites=False,
                            serverSelectionTimeoutMS=20000, heartbeatFrequencyMS=500)
    try:
        maj = c.t.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=10000))
        maj.insert_one({"_id": "before"})
        # cut the primary off (both secondaries killed; pausing them is not
        # enough: the oplog batch already in their sockets is applied on
        # SIGCONT); within the election timeout it is still primary and
        # takes a w:1, j:true write
        s1.kill9()
        s2.kill9()
        with direct(p) as d:
            w1 = d.t.get_collection("c", write_concern=WriteConcern(w=1, j=True))
            w1.insert_one({"_id": "w1"})
            local = d.t.get_collection("c", read_concern=ReadConcern("local"))
            assert local.find_one({"_id": "w1"}) == {"_id": "w1"}
        p.kill9()
        s1.restart()
        s2.restart()
        newp = the_primary([s1, s2])
        with direct(newp) as d:
            assert d.t.c.find_one({"_id": "before"}) is not None   # acknowledged, majority
            assert d.t.c.find_one({"_id": "w1"}) is None           # acknowledged, w:1: lost
        wait_for(lambda: maj.insert_one({"_id": "after"}) is not None, timeout=30)
        p.restart()

        def settled():
            with direct(p) as d:
                if d.t.c.find_one({"_id": "w1"}) is None and d.t.c.find_one({"_id": "after"}):
                    return "rolled back"
            with open(p.logpath, errors="replace") as f:
                if any('"id":21656' in line for line in f):
                    return "stopped syncing"
            return None
        how = wait_for(settled, timeout=30)
        print("former primary:", how)
        for m in (s1, s2):
            with direct(m) as d:
                wait_for(lambda d=d: d.t.c.find_one({"_id": "after"}) is not None, timeout=20)
                assert d.t.c.find_one({"_id": "w1"}) is None
    finally:
        c.close()

