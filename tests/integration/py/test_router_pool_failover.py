"""
The router's pooled connections to a shard after the shard's primary
changed (issue 28, src/router/rt_remote.c): a connection whose command
outlived its member's time as primary (a slow read the old primary
finished after stepping down) must not go back among the idle connections
the router keeps for the new primary, or a later command through the pool
(a getMore, which goes to the member holding the cursor) reaches the old
one: "cursor id N not found", every time.

One shard of two members; db.c is unsharded, on that shard.
"""
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from sharded import direct, wait_for  # noqa: E402

cluster = sharded.cluster_fixture("sable-rtpool-", shards=1, members=2)
mongos = sharded.mongos_fixture(serverSelectionTimeoutMS=20000)


def test_a_slow_read_that_outlives_its_primary_leaves_the_pool(cluster, mongos):
    coll = mongos.rtpool.c
    coll.insert_many([{"_id": i, "pad": "x" * 100} for i in range(300)])
    old = sharded.primary_port(cluster, 0)

    # A find that sleeps on the primary for 4 s, on the router's worker path
    # (its shared pool): a command over 4 KB does not take the loop's.
    slow = {}

    def run_slow():
        try:
            slow["r"] = list(coll.find({"_id": 0, "$where": "sleep(4000); return true"},
                                       comment="x" * 5000))
        except Exception as e:  # noqa: BLE001 (recorded, asserted below)
            slow["e"] = e
    t = threading.Thread(target=run_slow)
    t.start()
    time.sleep(1.0)

    # Meanwhile the shard elects the other member.
    with direct(old) as c:
        try:
            c.admin.command("replSetStepDown", 30, secondaryCatchUpPeriodSecs=10)
        except Exception:  # noqa: BLE001 (the step-down may close the connection)
            pass
    new = sharded.primary_port(cluster, 0, not_port=old)
    # a write finds the old primary refusing: the router looks up the new one
    coll.insert_one({"_id": "after"})
    # a cursor on the new primary, its first batch only
    cur = coll.find({}, batch_size=10)
    first = [next(cur) for _ in range(10)]

    t.join(30)
    assert not t.is_alive()
    # a read is not interrupted by a step-down: it answered, from the old primary
    assert "e" not in slow and [d["_id"] for d in slow["r"]] == [0], slow

    # The rest of the cursor comes through the pool from the new primary.
    rest = list(cur)
    assert len(first) + len(rest) == 301
    with direct(new) as c:
        assert c.admin.command("hello")["isWritablePrimary"]
