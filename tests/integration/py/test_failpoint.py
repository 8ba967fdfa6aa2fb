"""
configureFailPoint and the failCommand fail point, as driver test suites use
them: only with --setParameter enableTestCommands=1; modes off / alwaysOn /
{times: n} / {skip: n}; errorCode (+ errorLabels), closeConnection,
writeConcernError, blockConnection, appName.
"""

import threading
import time

import pytest
from pymongo.errors import AutoReconnect, OperationFailure
from pymongo import WriteConcern

import wire
from sabled import Sabled, set_members


@pytest.fixture(scope="module")
def server():
    s = Sabled()
    try:
        s.start(["--setParameter", "enableTestCommands=1"])
        yield s
    finally:
        s.cleanup()


def fail(client, mode, **data):
    return client.admin.command({"configureFailPoint": "failCommand", "mode": mode, "data": data})


@pytest.fixture(autouse=True)
def off(client):
    yield
    client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})


def test_absent_without_enable_test_commands(fresh_server):
    fresh_server.start()
    c = fresh_server.client()
    with pytest.raises(OperationFailure) as e:
        c.admin.command({"configureFailPoint": "failCommand", "mode": "alwaysOn"})
    assert e.value.code == 59
    c.close()


def test_bad_arguments(client):
    with pytest.raises(OperationFailure) as e:
        client.admin.command({"configureFailPoint": "noSuchFailPoint", "mode": "alwaysOn"})
    assert e.value.code == 266
    with pytest.raises(OperationFailure) as e:
        client.admin.command({"configureFailPoint": "failCommand", "mode": "sometimes"})
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        client.test.command({"configureFailPoint": "failCommand", "mode": "off"})
    assert e.value.code == 13  # admin only


def test_times_fails_the_next_n_named_commands(client, db):
    db.c.insert_one({"_id": 1})
    fail(client, {"times": 2}, failCommands=["find"], errorCode=8,
         errorLabels=["SomeLabel"])
    assert db.c.count_documents({}) == 1  # aggregate: not named, not failed
    for _ in range(2):
        with pytest.raises(OperationFailure) as e:
            list(db.c.find())
        assert e.value.code == 8
        assert e.value.details["errmsg"] == "Failing command via 'failCommand' failpoint"
        assert e.value.details["codeName"] == "UnknownError"
        assert e.value.details["errorLabels"] == ["SomeLabel"]
    assert list(db.c.find()) == [{"_id": 1}]  # the fail point turned itself off


def test_always_on_skip_and_count(client, db):
    r = fail(client, "alwaysOn", failCommands=["ping"], errorCode=8)
    entered = r["count"]
    for _ in range(3):
        with pytest.raises(OperationFailure):
            client.admin.command("ping")
    # configureFailPoint itself is never failed, even when named.
    r = fail(client, {"skip": 1}, failCommands=["ping", "configureFailPoint"], errorCode=8)
    assert r["count"] == entered + 3
    client.admin.command("ping")  # skipped
    with pytest.raises(OperationFailure):
        client.admin.command("ping")
    client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
    client.admin.command("ping")


def test_close_connection_without_reply(server, client):
    fail(client, {"times": 1}, failCommands=["find"], closeConnection=True)
    with wire.connect(server.port) as s:
        s.sendall(wire.op_msg({"find": "c", "$db": "test"}))
        assert wire.expect_error_or_close(s) == "closed"
    # The fail point is spent; the server answers on new connections.
    with wire.connect(server.port) as s:
        assert wire.command(s, {"find": "c"}, "test")["ok"] == 1


def test_close_connection_seen_by_pymongo(client, db):
    fail(client, {"times": 1}, failCommands=["insert"], closeConnection=True)
    with pytest.raises(AutoReconnect):
        db.c.insert_one({"_id": 1})
    assert db.c.find_one({"_id": 1}) is None  # the command never ran


def test_write_concern_error_after_the_write(client, db):
    wce = {"code": 100, "codeName": "UnsatisfiableWriteConcern", "errmsg": "Not enough data-bearing nodes"}
    fail(client, {"times": 1}, failCommands=["insert"], writeConcernError=wce)
    r = db.command({"insert": "c", "documents": [{"_id": 7}]})
    assert r["ok"] == 1 and r["n"] == 1
    assert r["writeConcernError"] == wce
    assert db.c.find_one({"_id": 7}) == {"_id": 7}


def test_app_name_limits_the_fail_point(server, client, db):
    other = server.client(appname="victim")
    try:
        fail(client, "alwaysOn", failCommands=["count"], errorCode=2, appName="victim")
        assert db.command("count", "c")["ok"] == 1
        with pytest.raises(OperationFailure) as e:
            other[db.name].command("count", "c")
        assert e.value.code == 2
    finally:
        other.close()


def test_block_connection_delays_then_runs(server, client, db):
    db.c.insert_one({"_id": 1})
    fail(client, {"times": 1}, failCommands=["find"], blockConnection=True, blockTimeMS=300)
    out = {}

    def blocked():
        out["docs"] = list(db.c.find())

    t = threading.Thread(target=blocked)
    t.start()
    # Other connections are served meanwhile (the block is a timer, not a sleep).
    with wire.connect(server.port) as s:
        assert wire.command(s, {"ping": 1})["ok"] == 1
    t.join(30)
    assert out["docs"] == [{"_id": 1}]


def test_block_then_error(client, db):
    fail(client, {"times": 1}, failCommands=["distinct"], blockConnection=True, blockTimeMS=50,
         errorCode=2)  # not a retryable code: pymongo would retry 262 and succeed
    with pytest.raises(OperationFailure) as e:
        db.c.distinct("x")
    assert e.value.code == 2
    assert db.c.distinct("x") == []


def test_block_without_time_is_invalid(client, db):
    fail(client, {"times": 1}, failCommands=["find"], blockConnection=True)
    with pytest.raises(OperationFailure) as e:
        list(db.c.find())
    assert e.value.code == 72


def test_writes_with_unacknowledged_write_concern(client, db):
    fail(client, {"times": 1}, failCommands=["insert"], errorCode=8)
    db.get_collection("c", write_concern=WriteConcern(w=0)).insert_one({"_id": 1})
    assert db.c.find_one({"_id": 1}) is None  # failed, silently (w: 0)
    db.c.insert_one({"_id": 2})
    assert db.c.find_one({"_id": 2}) == {"_id": 2}


def test_other_members_connections_are_left_alone():
    """failCommand fails clients' commands, not another member's (mongod
    spares its internal clients): the next getMore on the primary is to fail,
    the secondary's fetcher sends one (a write it tails), and a client's
    getMore after it is the one that fails.  The secondary's fetcher says so in its
    handshake (application name sable-repl), on its own connection as it did
    through libmongoc."""
    from pymongo.errors import OperationFailure as OF
    from test_replset3 import direct, initiate_pair
    with set_members(2) as (p, s):
        initiate_pair(p, s)
        with direct(p) as d:
            w2 = WriteConcern(w=2, wtimeout=30000)
            d.t.c.with_options(write_concern=w2).insert_many([{"i": i} for i in range(3)])
            fail(d, {"times": 1}, failCommands=["getMore"], errorCode=2)
            try:
                # the secondary's getMore waiting now returns this entry, and
                # it sends the next at once: that one must not take the failure
                d.t.c.with_options(write_concern=w2).insert_one({"i": 3})
                time.sleep(0.5)
                with pytest.raises(OF) as ei:
                    list(d.t.c.find(batch_size=1))
                assert ei.value.code == 2
            finally:
                d.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
