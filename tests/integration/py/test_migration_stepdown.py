"""
A chunk migration whose donor primary steps down after the commit (issue 28,
docs/sharding.md, "A failover in the middle of a migration"): the member
elected in its place finds the migrationCoordinators document, learns from
the config servers that the chunk moved, and deletes the donor's copy of the
range; the member that stepped down neither deletes nor holds anything.
Two shards of three members each (the recipient's watchdog settles its own
side after 1 s: sableMigrationReleaseWaitMS).
"""
import os
import sys
import time

import pymongo
from pymongo.errors import PyMongoError

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from sharded import direct, primary_port, wait_for  # noqa: E402
from test_migration_failover import LAUNCHER_ARGS, first_read  # noqa: E402

MEMBERS = 3
N = 600


cluster = sharded.cluster_fixture("sable-migsd-", members=MEMBERS, launcher_args=LAUNCHER_ARGS)


def test_donor_stepdown_after_the_commit(cluster):
    mongos = pymongo.MongoClient("127.0.0.1", cluster["router"], serverSelectionTimeoutMS=20000,
                                 uuidRepresentation="standard")
    mongos.admin.command("balancerStop")
    mongos.admin.command("enableSharding", "sd")
    mongos.admin.command("shardCollection", "sd.c", key={"k": 1})
    mongos.sd.c.with_options(write_concern=pymongo.WriteConcern(w="majority")).insert_many(
        [{"_id": i, "k": i} for i in range(N)])
    mongos.admin.command("split", "sd.c", middle={"k": N // 2})
    donor = int(mongos.config.databases.find_one({"_id": "sd"})["primary"][-1])
    recip = 1 - donor
    old = primary_port(cluster, donor)
    with direct(old) as d:
        d.admin.command("configureFailPoint", "moveChunkHangAtStep5", mode="alwaysOn")

    def move():
        try:
            mongos.admin.command("moveChunk", "sd.c", find={"k": N // 2}, to="shard%d" % recip)
        except PyMongoError:
            pass

    import threading
    t = threading.Thread(target=move)
    t.start()

    def owner():
        uuid = mongos.config.collections.find_one({"_id": "sd.c"})["uuid"]
        return mongos.config.chunks.find_one({"uuid": uuid, "min": {"k": N // 2}})["shard"]

    assert wait_for(lambda: owner() == "shard%d" % recip, 60)
    with direct(old) as d:
        try:
            d.admin.command("replSetStepDown", 60, force=True)
        except PyMongoError:
            pass  # the connection may close
    assert wait_for(lambda: primary_port(cluster, donor) != old, 60)
    # the elected member held the collection's critical section as a
    # secondary already: its first routed read comes after its recovery.
    # The old primary, still in its critical section, refuses routed reads as
    # a secondary (NotPrimaryNoSecondaryOk) instead of making them wait and
    # answer StaleConfig, so the router finds the new primary at once (it
    # took ~120 s, until the fail point below was turned off, when the wait
    # came first)
    started = time.monotonic()
    assert first_read(mongos, "c", db="sd") == list(range(N))
    assert time.monotonic() - started < 60
    with direct(old) as d:
        d.admin.command("configureFailPoint", "moveChunkHangAtStep5", mode="off")
    t.join(90)

    def consistent():
        ids = sorted(x["_id"] for x in mongos.sd.c.find({}, {"_id": 1}))
        if ids != list(range(N)):
            return False
        with direct(primary_port(cluster, donor)) as d, \
                direct(primary_port(cluster, recip)) as r:
            return (d.sd.c.count_documents({}) == N // 2 and
                    r.sd.c.count_documents({}) == N - N // 2 and
                    d.config.migrationCoordinators.count_documents({}) == 0 and
                    d.config.rangeDeletions.count_documents({}) == 0 and
                    r.config.rangeDeletions.count_documents({}) == 0)

    assert wait_for(consistent, 60)
    # every member of the donor set ends without the range (the deletes replicate)
    for port in cluster["members"][donor]:
        with direct(port) as m:
            assert wait_for(lambda: m.sd.c.count_documents({}) == N // 2, 30)
    mongos.sd.c.update_one({"k": N - 1}, {"$set": {"after": 1}})
    assert mongos.sd.c.find_one({"k": N - 1})["after"] == 1
    mongos.close()
