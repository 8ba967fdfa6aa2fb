"""
Handshake and diagnostic commands, as MongoDB 7.0 answers them: hello and
the legacy isMaster (also over OP_QUERY), buildInfo, getParameter,
getCmdLineOpts, hostInfo, whatsmyuri, listCommands, connectionStatus,
serverStatus (opcounters move exactly with operations), sessions, getLog and
the Java 3.x driver's handshake sequence.
"""

import datetime
import json
import uuid

import pytest
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo.errors import OperationFailure

import wire

STANDARD_UUID = CodecOptions(uuid_representation=UuidRepresentation.STANDARD)


def check_hello_common(r):
    assert r["ok"] == 1
    assert r["maxBsonObjectSize"] == 16777216
    assert r["maxMessageSizeBytes"] == 48000000
    assert r["maxWriteBatchSize"] == 100000
    assert r["maxWireVersion"] == 21
    assert r["minWireVersion"] == 0
    assert isinstance(r["localTime"], datetime.datetime)
    assert r["logicalSessionTimeoutMinutes"] == 30
    assert isinstance(r["connectionId"], int) and r["connectionId"] > 0
    assert r["readOnly"] is False
    tv = r["topologyVersion"]
    assert isinstance(tv["processId"], ObjectId)
    assert isinstance(tv["counter"], Int64)


def test_hello(client):
    r = client.admin.command("hello")
    check_hello_common(r)
    assert r["isWritablePrimary"] is True
    assert "ismaster" not in r


@pytest.mark.parametrize("name", ["isMaster", "ismaster"])
def test_ismaster_legacy_names(client, name):
    r = client.admin.command(name)
    check_hello_common(r)
    assert r["ismaster"] is True
    assert "isWritablePrimary" not in r
    r = client.admin.command({name: 1, "helloOk": True})
    assert r["helloOk"] is True


def test_hello_from_any_database(client):
    assert client.some_db.command("hello")["isWritablePrimary"] is True


def test_connection_ids_differ(server):
    with wire.connect(server.port) as a, wire.connect(server.port) as b:
        ida = wire.command(a, {"hello": 1})["connectionId"]
        idb = wire.command(b, {"hello": 1})["connectionId"]
        assert ida != idb


def test_topology_version_stable_within_process(server):
    with wire.connect(server.port) as a:
        t1 = wire.command(a, {"hello": 1})["topologyVersion"]
        t2 = wire.command(a, {"hello": 1})["topologyVersion"]
    assert t1["processId"] == t2["processId"]


@pytest.mark.parametrize("name", ["isMaster", "ismaster", "hello"])
def test_legacy_op_query_handshake(server, name):
    with wire.connect(server.port) as s:
        q = {name: 1, "helloOk": True,
             "client": {"driver": {"name": "raw-test", "version": "1"},
                        "os": {"type": "Linux"}},
             "compression": []}
        msg = wire.op_query("admin.$cmd", q, number_to_return=-1, request_id=4242)
        reply = wire.roundtrip(s, msg)
        assert reply.opcode == wire.OP_REPLY
        assert reply.response_to == 4242
        assert reply.number_returned == 1
        assert reply.cursor_id == 0
        doc = reply.doc
        check_hello_common(doc)
        if name == "hello":
            assert doc["isWritablePrimary"] is True
        else:
            assert doc["ismaster"] is True
        assert doc["helloOk"] is True
        # The same connection then speaks OP_MSG.
        assert wire.command(s, {"ping": 1})["ok"] == 1


def test_java3_driver_sequence(server):
    """Java driver 3.x: OP_QUERY isMaster, then buildinfo, then getlasterror
    (to learn its connectionId), each on admin.$cmd; every one is answered."""
    with wire.connect(server.port) as s:
        r = wire.roundtrip(s, wire.op_query("admin.$cmd", {"ismaster": 1}))
        assert r.opcode == wire.OP_REPLY and r.doc["ismaster"] is True
        r = wire.roundtrip(s, wire.op_query("admin.$cmd", {"buildinfo": 1}))
        assert r.opcode == wire.OP_REPLY
        assert r.doc["ok"] == 1, r.doc
        assert r.doc["version"].startswith("7.0.")
        r = wire.roundtrip(s, wire.op_query("admin.$cmd", {"getlasterror": 1}))
        assert r.opcode == wire.OP_REPLY
        assert r.number_returned == 1
        assert "ok" in r.doc, r.doc
        # And the connection keeps serving.
        assert wire.command(s, {"ping": 1})["ok"] == 1


def test_build_info(client):
    r = client.admin.command("buildInfo")
    assert r["ok"] == 1
    assert r["version"].startswith("7.0.")
    va = r["versionArray"]
    assert len(va) == 4
    assert all(type(x) is int for x in va), "versionArray must hold int32: %r" % (va,)
    assert va[:2] == [7, 0]
    assert "%d.%d.%d" % tuple(va[:3]) == r["version"].split("-")[0]
    assert isinstance(r["gitVersion"], str)
    assert r["bits"] == 64
    assert r["maxBsonObjectSize"] == 16777216
    # Lower-case spelling as old drivers send it.
    assert client.admin.command("buildinfo")["version"] == r["version"]


def test_ping(client):
    assert client.admin.command("ping")["ok"] == 1
    assert client.anydb.command("ping")["ok"] == 1


def test_get_parameter_star(client):
    r = client.admin.command({"getParameter": "*"})
    assert r["ok"] == 1
    assert "enableTestCommands" in r
    assert "logLevel" in r


def test_get_parameter_specific(client):
    r = client.admin.command({"getParameter": 1, "featureCompatibilityVersion": 1})
    assert r["featureCompatibilityVersion"]["version"] == "7.0"
    r = client.admin.command({"getParameter": 1, "logLevel": 1})
    assert r["logLevel"] == 0
    assert set(r) == {"logLevel", "ok"}
    with pytest.raises(OperationFailure) as e:
        client.admin.command({"getParameter": 1, "noSuchParameterAtAll": 1})
    assert e.value.code == 72  # InvalidOptions
    # getParameter must run on admin.
    with pytest.raises(OperationFailure):
        client.otherdb.command({"getParameter": 1, "logLevel": 1})


def test_set_parameter_log_level(client):
    """logLevel changes at run time (setParameter answers the old value);
    out of 0-5 or not an integer: BadValue, the level unchanged."""
    try:
        assert client.admin.command("setParameter", 1, logLevel=2)["was"] == 0
        assert client.admin.command({"getParameter": 1, "logLevel": 1})["logLevel"] == 2
        for bad in (6, -1, 1.5, "1"):
            with pytest.raises(OperationFailure) as e:
                client.admin.command("setParameter", 1, logLevel=bad)
            assert e.value.code == 2, bad  # BadValue
        assert client.admin.command({"getParameter": 1, "logLevel": 1})["logLevel"] == 2
    finally:
        client.admin.command("setParameter", 1, logLevel=0)


def test_get_cmd_line_opts(server, client):
    r = client.admin.command("getCmdLineOpts")
    assert r["ok"] == 1
    argv = r["argv"]
    assert isinstance(argv, list) and "--port" in argv and str(server.port) in argv
    assert r["parsed"]["net"]["port"] == server.port
    assert r["parsed"]["net"]["bindIp"] == "127.0.0.1"
    assert r["parsed"]["storage"]["dbPath"] == server.dbpath


def test_host_info(client):
    r = client.admin.command("hostInfo")
    assert r["ok"] == 1
    assert isinstance(r["system"]["hostname"], str) and r["system"]["hostname"]
    assert isinstance(r["system"]["currentTime"], datetime.datetime)
    assert r["system"]["numCores"] >= 1
    assert r["system"]["memSizeMB"] > 0
    assert r["os"]["type"] == "Linux"
    assert "extra" in r


def test_whatsmyuri(server):
    with wire.connect(server.port) as s:
        r = wire.command(s, {"whatsmyuri": 1})
        host, port = s.getsockname()[:2]
    assert r["ok"] == 1
    assert r["you"] == "%s:%d" % (host, port)


def test_list_commands(client):
    r = client.admin.command("listCommands")
    cmds = r["commands"]
    for name in ("find", "insert", "update", "delete", "getMore", "killCursors", "aggregate",
                 "count", "distinct", "findAndModify", "hello", "isMaster", "ping", "buildInfo",
                 "serverStatus", "listDatabases", "listCollections", "listIndexes", "create",
                 "drop", "dropDatabase", "createIndexes", "endSessions", "getLog"):
        assert name in cmds, "listCommands lacks %s" % name
    assert "help" in cmds["find"]


def test_connection_status(client):
    r = client.admin.command("connectionStatus")
    assert r["ok"] == 1
    assert r["authInfo"]["authenticatedUsers"] == []
    assert r["authInfo"]["authenticatedUserRoles"] == []


def test_server_status_fields(client):
    r = client.admin.command("serverStatus")
    assert r["ok"] == 1
    assert isinstance(r["host"], str) and r["host"]
    assert r["version"].startswith("7.0.")
    assert r["process"] == "mongod"
    assert isinstance(r["pid"], int) and r["pid"] > 0
    assert r["uptime"] >= 0
    assert r["uptimeMillis"] >= 0
    assert isinstance(r["localTime"], datetime.datetime)
    conns = r["connections"]
    assert conns["current"] >= 1
    assert conns["available"] >= 0
    assert conns["totalCreated"] >= conns["current"]
    for k in ("insert", "query", "update", "delete", "getmore", "command"):
        assert k in r["opcounters"], k


def test_server_status_opcounters_move_exactly(server):
    c = server.client()
    try:
        coll = c.opc.t
        coll.insert_one({"_id": "warm"})  # create the collection first

        def counters():
            return dict(c.admin.command("serverStatus")["opcounters"])

        before = counters()
        coll.insert_one({"_id": 1})
        coll.insert_many([{"_id": i} for i in range(2, 7)])       # 5 documents
        list(coll.find({}))
        coll.find_one({"_id": 1})
        coll.update_one({"_id": 1}, {"$set": {"a": 1}})
        coll.update_many({}, {"$set": {"b": 1}})
        coll.delete_one({"_id": 2})
        cur = coll.find({}, batch_size=2)
        docs = list(cur)  # 6 documents in batches of 2: at least 2 getMores
        after = counters()
    finally:
        c.close()
    assert len(docs) == 6
    assert after["insert"] - before["insert"] == 6
    assert after["query"] - before["query"] == 3
    assert after["update"] - before["update"] == 2
    assert after["delete"] - before["delete"] == 1
    assert after["getmore"] - before["getmore"] in (2, 3)
    assert after["command"] - before["command"] >= 1  # serverStatus itself


def test_server_status_connections_count(server, client):
    before = client.admin.command("serverStatus")["connections"]
    socks = [wire.connect(server.port) for _ in range(5)]
    try:
        for s in socks:
            wire.command(s, {"ping": 1})
        during = client.admin.command("serverStatus")["connections"]
        # (before may still count connections of earlier tests being closed)
        assert during["current"] >= 5 + 1
        assert during["totalCreated"] >= before["totalCreated"] + 5
    finally:
        for s in socks:
            s.close()


def test_sessions_commands(client):
    r = client.admin.command("startSession", codec_options=STANDARD_UUID)
    assert r["ok"] == 1
    lsid = r["id"]
    assert isinstance(lsid["id"], uuid.UUID)  # BSON binary subtype 4
    assert r["timeoutMinutes"] == 30
    assert client.admin.command({"refreshSessions": [lsid]}, codec_options=STANDARD_UUID)["ok"] == 1
    assert client.admin.command({"endSessions": [lsid]}, codec_options=STANDARD_UUID)["ok"] == 1
    assert client.admin.command({"killSessions": []})["ok"] == 1
    r2 = client.admin.command("startSession", codec_options=STANDARD_UUID)
    assert client.admin.command({"killSessions": [r2["id"]]},
                                codec_options=STANDARD_UUID)["ok"] == 1


def test_explicit_session_on_every_command(client):
    coll = client.sessdb.t
    with client.start_session() as s:
        coll.insert_one({"_id": 1, "a": 1}, session=s)
        coll.insert_many([{"_id": 2}, {"_id": 3}], session=s)
        assert coll.find_one({"_id": 1}, session=s)["a"] == 1
        coll.update_one({"_id": 1}, {"$inc": {"a": 1}}, session=s)
        assert coll.count_documents({}, session=s) == 3
        assert coll.estimated_document_count() == 3
        assert sorted(coll.distinct("_id", session=s)) == [1, 2, 3]
        assert len(list(coll.aggregate([{"$match": {}}], session=s))) == 3
        assert len(list(coll.find({}, batch_size=1, session=s))) == 3
        coll.find_one_and_update({"_id": 2}, {"$set": {"b": 1}}, session=s)
        coll.delete_one({"_id": 3}, session=s)
        assert "t" in client.sessdb.list_collection_names(session=s)
        assert "sessdb" in client.list_database_names(session=s)
        list(coll.list_indexes(session=s))
        for cmd in ("ping", "buildInfo", "hello", "serverStatus", "dbStats"):
            assert client.sessdb.command(cmd, session=s)["ok"] == 1
    client.drop_database("sessdb")


def test_lsid_in_raw_op_msg(server):
    import uuid
    from bson.binary import Binary, UUID_SUBTYPE
    lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
    with wire.connect(server.port) as s:
        for cmd, db in (({"ping": 1}, "admin"), ({"hello": 1}, "admin"),
                        ({"insert": "t", "documents": [{"_id": 1}]}, "rawlsid"),
                        ({"find": "t", "filter": {}}, "rawlsid"),
                        ({"listCollections": 1}, "rawlsid"),
                        ({"dropDatabase": 1}, "rawlsid")):
            body = dict(cmd)
            body["lsid"] = lsid
            r = wire.command(s, body, db)
            assert r["ok"] == 1, (cmd, r)


def test_get_log(client):
    r = client.admin.command({"getLog": "*"})
    assert "global" in r["names"] and "startupWarnings" in r["names"]
    g = client.admin.command({"getLog": "global"})
    assert isinstance(g["totalLinesWritten"], int) and g["totalLinesWritten"] > 0
    assert isinstance(g["log"], list) and g["log"]
    for line in g["log"]:
        entry = json.loads(line)
        assert "t" in entry and "msg" in entry
    w = client.admin.command({"getLog": "startupWarnings"})
    assert isinstance(w["log"], list)
    assert isinstance(w["totalLinesWritten"], int)
    with pytest.raises(OperationFailure):
        client.admin.command({"getLog": "noSuchLog"})


def test_get_parameter_answers_the_value_in_force_after_a_start_up_one():
    """A parameter given with --setParameter and changed at run time:
    getParameter answers the new value (it answered the start-up string)."""
    from sabled import Sabled
    s = Sabled()
    try:
        s.start(["--setParameter", "transactionLifetimeLimitSeconds=30",
                 "--setParameter", "logLevel=1"])
        import pymongo
        with pymongo.MongoClient(s.uri()) as c:
            get = lambda n: c.admin.command({"getParameter": 1, n: 1})[n]  # noqa: E731
            assert get("transactionLifetimeLimitSeconds") == 30
            c.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=45)
            c.admin.command("setParameter", 1, logLevel=2)
            assert get("transactionLifetimeLimitSeconds") == 45
            assert get("logLevel") == 2
            star = c.admin.command({"getParameter": "*"})
            assert star["transactionLifetimeLimitSeconds"] == 45 and star["logLevel"] == 2
    finally:
        s.cleanup()
