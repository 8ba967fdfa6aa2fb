"""
Writes that go to one shard (an update or delete whose statements all name
one shard, an insert whose documents all belong to one) are sent from the
router's event loops, as one-shard finds are (src/router/rt_fastw.c;
docs/sharding.md, "The router's cost"), with authorization on as seed 003
deploys it: a keyFile cluster, clients authenticated at the router.  The
router's serverStatus counts them (network.loopWrites,
network.loopWritesToWorkers).  What must not change: the replies (write
errors, write concern errors), StaleConfig after a migration (the write runs
on a worker, once), a connection lost after the write went out (the client
gets HostUnreachable; nothing is sent again), refusals (13) after a role is
revoked.  A config server and two one-member shards started with
build/sable-cluster start --sharded --keyfile.
"""

import os
import sys

import pymongo
import pytest
from pymongo.errors import BulkWriteError, OperationFailure

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402
from sharded import ROUTER  # noqa: E402

KEY = "bG9vcC13cml0ZXMta2V5LWZvci10ZXN0cw"


@pytest.fixture(scope="module")
def cluster():
    if not os.path.exists(ROUTER):
        pytest.skip("sable-router not built")
    with sharded.keyfile_cluster("sable-loopwrites-", KEY, launcher_args=sharded.set_parameters(
            ["enableTestCommands=1"])) as c:
        yield c


def _client(cluster, user, pw, **kw):
    # retryWrites off: a retryable write (txnNumber) is the worker path's
    return pymongo.MongoClient("mongodb://%s:%s@127.0.0.1:%d/?authSource=admin"
                               % (user, pw, cluster["router"]), retryWrites=False,
                               serverSelectionTimeoutMS=10000, **kw)


def _shard(cluster, i):
    return pymongo.MongoClient("127.0.0.1", cluster["shards"][i], directConnection=True,
                               username="__system", password=KEY, authSource="local",
                               authMechanism="SCRAM-SHA-256", serverSelectionTimeoutMS=10000)


@pytest.fixture(scope="module")
def admin(cluster):
    c = _client(cluster, "admin", "adminpw")
    c.admin.command("createUser", "ycsb", pwd="123456",
                    roles=[{"role": "readWrite", "db": "lw"}])
    c.admin.command("createUser", "reader", pwd="r3ad", roles=[{"role": "read", "db": "lw"}])
    c.admin.command("balancerStop")
    sharded.split_at_zero(c, "lw", ["r"])  # k < 0 on shard0, k >= 0 on shard1
    c.admin.command("shardCollection", "lw.h", key={"_id": "hashed"})
    c.lw.create_collection("plain")  # unsharded, on the database's primary shard
    yield c
    c.close()


@pytest.fixture(scope="module")
def ycsb(cluster, admin):
    c = _client(cluster, "ycsb", "123456")
    yield c
    c.close()


def _net(admin):
    n = admin.admin.command("serverStatus")["network"]
    return n["loopWrites"], n["loopWritesToWorkers"], n["loopReads"]


def test_one_shard_writes_and_reads_take_the_loop(cluster, admin, ycsb):
    h, plain = ycsb.lw.h, ycsb.lw.plain
    for i in range(3):  # the first commands resolve the user's privileges on a worker
        h.find_one({"_id": -1})
    w0, back0, r0 = _net(admin)
    for i in range(100):
        h.insert_one({"_id": i, "v": 0})
        plain.insert_one({"_id": i, "v": 0})
    for i in range(100):
        assert h.update_one({"_id": i}, {"$set": {"v": i + 1}}).modified_count == 1
        assert plain.update_one({"_id": i}, {"$inc": {"v": 2}}).modified_count == 1
    for i in range(100):
        assert h.find_one({"_id": i}) == {"_id": i, "v": i + 1}
    for i in range(0, 100, 10):
        assert h.delete_one({"_id": i}).deleted_count == 1
        assert plain.delete_many({"_id": i}).deleted_count == 1
    assert ycsb.lw.r.insert_many([{"_id": k, "k": k} for k in range(1, 21)]).inserted_ids \
        == list(range(1, 21))  # all on shard1: one batch
    w1, back1, r1 = _net(admin)
    # the pool dials the loops' first connections on the workers (the first
    # write of each loop and shard may go there)
    assert w1 - w0 >= 400, (w0, w1)
    assert back1 == back0
    assert r1 - r0 >= 90, (r0, r1)
    assert h.count_documents({}) == 90 and plain.count_documents({}) == 90
    assert sum(d["v"] for d in plain.find()) == 2 * 90
    with _shard(cluster, 1) as s1:
        assert s1.lw.r.count_documents({"k": {"$gte": 1, "$lte": 20}}) == 20
    # a batch for both shards, and a statement without the shard key: the workers
    w2, _, _ = _net(admin)
    ycsb.lw.r.insert_many([{"_id": k, "k": k} for k in (-5, 25)])
    assert ycsb.lw.r.update_many({}, {"$set": {"m": 1}}).modified_count == 22
    assert _net(admin)[0] == w2
    assert ycsb.lw.r.count_documents({"m": 1}) == 22


def test_write_errors_as_the_worker_path_gives_them(admin, ycsb):
    r = ycsb.lw.r
    r.insert_one({"_id": 100, "k": 100})
    w0, back0, _ = _net(admin)
    with pytest.raises(BulkWriteError) as e:  # ordered: stops at the duplicate
        r.insert_many([{"_id": 101, "k": 101}, {"_id": 100, "k": 100}, {"_id": 102, "k": 102}])
    d = e.value.details
    assert d["nInserted"] == 1
    assert [(x["index"], x["code"]) for x in d["writeErrors"]] == [(1, 11000)]
    with pytest.raises(BulkWriteError) as e:
        r.insert_many([{"_id": 100, "k": 100}, {"_id": 103, "k": 103}, {"_id": 101, "k": 101}],
                      ordered=False)
    d = e.value.details
    assert d["nInserted"] == 1
    assert [(x["index"], x["code"]) for x in d["writeErrors"]] == [(0, 11000), (2, 11000)]
    # an update the shard refuses comes back as the shard said it
    with pytest.raises(OperationFailure) as e:
        r.update_one({"k": 100}, {"$bogus": {"a": 1}})
    assert e.value.code == 9 and "$bogus" in str(e.value)
    # a statement changing the shard key is the worker path's (its rules: 20)
    with pytest.raises(OperationFailure) as e:
        r.update_one({"k": 100}, {"$set": {"k": -100}})
    assert e.value.code == 20
    w1, back1, _ = _net(admin)
    assert w1 - w0 == 3 and back1 == back0
    assert sorted(x["_id"] for x in r.find({"k": {"$gte": 100}})) == [100, 101, 103]


def test_write_concern_errors_pass_through(cluster, admin, ycsb):
    r = ycsb.lw.r
    w0, _, _ = _net(admin)
    # a write concern no set of one member can satisfy: the shard refuses it
    # before writing, and the client gets the shard's answer
    with pytest.raises(OperationFailure) as e:
        r.with_options(write_concern=pymongo.WriteConcern(w=3)).update_one(
            {"k": 5}, {"$set": {"wc": 1}})
    assert e.value.code == 100 and e.value.details["codeName"] == "UnsatisfiableWriteConcern"
    assert "wc" not in r.find_one({"k": 5})
    # a write concern error after the write (the shard's failCommand adds it)
    wce = {"code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting timed out",
           "errInfo": {"wtimeout": True}}
    with _shard(cluster, 1) as s1:
        s1.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                          "data": {"failCommands": ["update"], "writeConcernError": wce}})
        try:
            with pytest.raises(pymongo.errors.WriteConcernError) as e:
                r.with_options(write_concern=pymongo.WriteConcern(w="majority")).update_one(
                    {"k": 5}, {"$set": {"wc": 2}})
        finally:
            s1.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
    got = e.value.details  # the reply's writeConcernError
    assert got["code"] == 64 and got["errInfo"] == {"wtimeout": True}
    assert r.find_one({"k": 5})["wc"] == 2
    assert _net(admin)[0] - w0 == 2


def test_a_stale_router_runs_the_write_on_a_worker_once(cluster, admin, ycsb):
    """Another router moves k >= 0 to shard0: this router still sends k: 7
    to shard1, which answers StaleConfig without running it; the workers
    refresh and run it on shard0, once."""
    r = ycsb.lw.r
    assert r.find_one({"k": 7})["_id"] == 7
    with sharded.extra_router(cluster, args=["--keyFile", cluster["keyfile"]]) as port, \
            _client({"router": port}, "admin", "adminpw") as other:
        other.admin.command("moveChunk", "lw.r", find={"k": 0}, to="shard0")
    w0, back0, _ = _net(admin)
    assert r.update_one({"k": 7}, {"$inc": {"n": 1}}).modified_count == 1
    assert r.insert_one({"_id": 500, "k": 500}).inserted_id == 500  # refreshed: the loop's
    w1, back1, _ = _net(admin)
    assert back1 - back0 == 1 and w1 - w0 == 1
    assert r.find_one({"k": 7})["n"] == 1
    with _shard(cluster, 0) as s0:
        assert s0.lw.r.find_one({"k": 7})["n"] == 1
        assert s0.lw.r.find_one({"k": 500}) is not None
    # moved back, so the next tests find k >= 0 on shard1
    admin.admin.command("moveChunk", "lw.r", find={"k": 0}, to="shard1")


def test_a_connection_lost_after_the_write_is_not_sent_again(cluster, admin, ycsb):
    r = ycsb.lw.r
    r.insert_one({"_id": 600, "k": 600, "n": 0})
    r.update_one({"k": 600}, {"$inc": {"n": 1}})  # the loop holds a connection to shard1
    with _shard(cluster, 1) as s1:
        s1.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                          "data": {"failCommands": ["update"], "closeConnection": True}})
        try:
            w0, back0, _ = _net(admin)
            with pytest.raises(OperationFailure) as e:
                r.update_one({"k": 600}, {"$inc": {"n": 1}})
            assert e.value.code == 6 and "connection lost" in str(e.value)
            w1, back1, _ = _net(admin)
            assert w1 - w0 == 1 and back1 == back0
        finally:
            s1.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
    # sent once: the fail point took it, nothing ran it again
    assert r.find_one({"k": 600})["n"] == 1
    assert r.update_one({"k": 600}, {"$inc": {"n": 1}}).modified_count == 1
    assert r.find_one({"k": 600})["n"] == 2


def test_refusals_and_a_revoked_role(cluster, admin):
    with pymongo.MongoClient("127.0.0.1", cluster["router"], retryWrites=False,
                             serverSelectionTimeoutMS=10000) as anon:
        with pytest.raises(OperationFailure) as e:
            anon.lw.h.update_one({"_id": 1}, {"$set": {"x": 1}})
        assert e.value.code == 13 and "requires authentication" in str(e.value)
    with _client(cluster, "reader", "r3ad") as c:
        h = c.lw.h
        for _ in range(3):
            assert h.find_one({"_id": 1})["_id"] == 1
        w0, back0, r0 = _net(admin)
        with pytest.raises(OperationFailure) as e:
            h.update_one({"_id": 1}, {"$set": {"x": 1}})
        assert e.value.code == 13 and e.value.details["codeName"] == "Unauthorized"
        with pytest.raises(OperationFailure) as e:
            h.insert_one({"_id": -77})
        assert e.value.code == 13
        for _ in range(5):
            assert h.find_one({"_id": 1})["_id"] == 1
        w1, back1, r1 = _net(admin)
        assert w1 == w0 and back1 == back0 and r1 - r0 >= 5
        admin.admin.command("grantRolesToUser", "reader",
                            roles=[{"role": "readWrite", "db": "lw"}])
        for i in range(5):  # the first resolves the privileges again, on a worker
            h.update_one({"_id": 1}, {"$set": {"x": i}})
        assert _net(admin)[0] - w1 >= 4
        admin.admin.command("revokeRolesFromUser", "reader",
                            roles=[{"role": "readWrite", "db": "lw"}])
        with pytest.raises(OperationFailure) as e:
            h.update_one({"_id": 1}, {"$set": {"x": 99}})
        assert e.value.code == 13
        assert h.find_one({"_id": 1})["x"] == 4
