"""
readConcern majority through the router across a migration (issue 28,
docs/sharding.md "Migrations and the balancer"): a shard's majority reads
read at its stable timestamp, where the donor's copy of a migrated range is
still there after the commit (its deletion comes later, from the range
deleter, and is majority-committed later still); the donor's ownership
filter, read with its new version before it leaves its critical section,
drops that copy from every routed read, majority ones included.  Once, with
three-member shards, a majority read routed by the new version right after
the commit read the donor's copy beside the recipient's: every document of
the chunk twice (found by scripts/faults.sh --sharded --seed 1).

One cluster: a config server and two three-member shards.  The donor's
secondaries stop applying (rsSyncApplyStop) after the commit, so nothing
the donor writes from then on is majority-committed until they resume.
"""
import os
import sys
import threading
import time

from pymongo.read_concern import ReadConcern

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from sharded import wait_for  # noqa: E402
from test_migration_failover import client, make_coll, migration_cluster, owner  # noqa: E402

N = 1200


def primary_and_secondaries(ports):
    roles = {}
    for p in ports:
        with client(p, directConnection=True) as c:
            roles[p] = c.admin.command("hello").get("isWritablePrimary", False)
    return [p for p in ports if roles[p]][0], [p for p in ports if not roles[p]]


def fail_point(port, name, on):
    with client(port, directConnection=True) as c:
        sharded.fail_point(c, name, on)


def test_majority_read_after_a_commit_sees_the_range_once():
    with migration_cluster("sable-migmaj-", members=3) as cluster:
        mongos = client(cluster["router"])
        mongos.admin.command("balancerStop")
        mongos.admin.command("enableSharding", "mf")
        donor, recip = make_coll(mongos, "maj")
        dp, ds = primary_and_secondaries(cluster["members"][donor])
        fail_point(dp, "moveChunkHangAtStep5", True)  # committed, nothing deleted
        out = {}

        def move():
            with client(cluster["router"]) as c:
                out["r"] = c.admin.command("moveChunk", "mf.maj", find={"k": N // 2},
                                           to="shard%d" % recip)

        mover = threading.Thread(target=move)
        mover.start()
        assert wait_for(lambda: owner(mongos, "maj") == "shard%d" % recip)
        for p in ds:
            fail_point(p, "rsSyncApplyStop", True)
        try:
            fail_point(dp, "moveChunkHangAtStep5", False)  # the donor releases; its copy stays
            time.sleep(1)
            got = {}

            def read():
                with client(cluster["router"]) as c:
                    coll = c.mf.get_collection("maj", read_concern=ReadConcern("majority"))
                    got["ids"] = sorted(d["_id"] for d in coll.find({}, {"_id": 1}))

            reader = threading.Thread(target=read)
            reader.start()
            reader.join(1.5)  # before: answered at once, with the moved chunk twice
        finally:
            for p in ds:
                fail_point(p, "rsSyncApplyStop", False)
        reader.join(60)
        mover.join(60)
        assert got.get("ids") == list(range(N)), (len(got.get("ids") or []), out)
        assert "r" in out
        mongos.close()
