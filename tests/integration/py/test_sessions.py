"""
Logical sessions: the server's session catalog, as mongod keeps it.

What is checked: a session used by a command appears in $listLocalSessions
with its uid (SHA-256 of "user@db", of "" without auth) and lastUse;
startSession registers one; endSessions removes it and kills its cursors;
killSessions, killAllSessions and killAllSessionsByPattern kill the cursors
of the sessions they name and no others; malformed lsids fail with mongod's
codes; refreshLogicalSessionCacheNow writes config.system.sessions (records,
TTL index) and removes ended sessions' records; $listSessions reads them;
sessions unused for localLogicalSessionTimeoutMinutes expire and take their
cursors with them; serverStatus reports logicalSessionRecordCache.
"""
import hashlib
import time
import uuid

import pytest
from bson import Binary
from bson.binary import UUID_SUBTYPE
from pymongo import MongoClient
from pymongo.errors import OperationFailure

import wire

EMPTY_UID = hashlib.sha256(b"").digest()


class Raw:
    """Commands over a plain socket: pymongo puts its own lsid on every
    command, and these tests choose the lsid themselves."""

    def __init__(self, port):
        self.sock = wire.connect(port)

    def __call__(self, cmd, db="t"):
        reply = wire.command(self.sock, cmd, db=db)
        if reply.get("ok") != 1:
            raise OperationFailure(reply.get("errmsg"), reply.get("code"), reply)
        return reply

    def close(self):
        self.sock.close()


@pytest.fixture
def raw(server):
    r = Raw(server.port)
    try:
        yield r
    finally:
        r.close()


def lsid(u=None):
    return {"id": Binary((u or uuid.uuid4()).bytes, UUID_SUBTYPE)}


def local_sessions(run, **opts):
    """The catalog as $listLocalSessions shows it (run: a Raw, or a pymongo client)."""
    if isinstance(run, Raw):
        return run({"aggregate": 1, "pipeline": [{"$listLocalSessions": opts}],
                    "cursor": {"batchSize": 100000}}, db="admin")["cursor"]["firstBatch"]
    return list(run.admin.aggregate([{"$listLocalSessions": opts}]))


def raw_bytes(v):
    """A binData as bytes, however the decoder gave it (UUID or Binary)."""
    return v.bytes if isinstance(v, uuid.UUID) else bytes(v)


def ids_of(docs):
    return {raw_bytes(d["_id"]["id"]) for d in docs}


def open_cursor(run, sid, db="t"):
    """A cursor with more to read, opened in session sid; returns its id."""
    reply = run({"find": "c", "batchSize": 2, "lsid": sid}, db=db)
    assert reply["cursor"]["id"] != 0
    return reply["cursor"]["id"]


def get_more(run, cursor_id, sid, db="t"):
    return run({"getMore": cursor_id, "collection": "c", "batchSize": 2, "lsid": sid}, db=db)


@pytest.fixture
def filled(client, raw):
    client.t.c.drop()
    client.t.c.insert_many([{"_id": i} for i in range(20)])
    return raw


@pytest.fixture(scope="module")
def test_server():
    from sabled import Sabled
    s = Sabled()
    try:
        s.start(["--setParameter", "enableTestCommands=1"])
        yield s
    finally:
        s.cleanup()


def test_a_command_in_a_session_registers_it(raw):
    sid = lsid()
    raw({"ping": 1, "lsid": sid})
    mine = [d for d in local_sessions(raw) if raw_bytes(d["_id"]["id"]) == bytes(sid["id"])]
    assert len(mine) == 1, local_sessions(raw)
    doc = mine[0]
    assert bytes(doc["_id"]["uid"]) == EMPTY_UID
    assert doc["lastUse"].year >= 2026
    assert "user" not in doc


def test_start_session_registers_and_end_sessions_removes(raw):
    reply = raw({"startSession": 1}, db="admin")
    assert reply["timeoutMinutes"] == 30
    sid = reply["id"]
    sid = {"id": Binary(raw_bytes(sid["id"]), UUID_SUBTYPE)}
    assert len(bytes(sid["id"])) == 16
    assert bytes(sid["id"]) in ids_of(local_sessions(raw))
    raw({"endSessions": [sid]}, db="admin")
    assert bytes(sid["id"]) not in ids_of(local_sessions(raw))


def test_end_sessions_kills_the_sessions_cursors(filled):
    a, b = lsid(), lsid()
    ca, cb = open_cursor(filled, a), open_cursor(filled, b)
    filled({"endSessions": [a]}, db="admin")
    with pytest.raises(OperationFailure) as e:
        get_more(filled, ca, a)
    assert e.value.code == 43  # CursorNotFound
    assert len(get_more(filled, cb, b)["cursor"]["nextBatch"]) == 2  # the other lives


def test_kill_sessions_kills_cursors_but_keeps_the_session(filled):
    a, b = lsid(), lsid()
    ca, cb = open_cursor(filled, a), open_cursor(filled, b)
    filled({"killSessions": [a]}, db="admin")
    with pytest.raises(OperationFailure) as e:
        get_more(filled, ca, a)
    assert e.value.code == 43
    assert len(get_more(filled, cb, b)["cursor"]["nextBatch"]) == 2
    assert bytes(a["id"]) in ids_of(local_sessions(filled))


def test_kill_all_sessions_by_pattern(filled):
    a, b = lsid(), lsid()
    ca, cb = open_cursor(filled, a), open_cursor(filled, b)
    pattern = {"lsid": {"id": a["id"], "uid": Binary(EMPTY_UID)}}
    filled({"killAllSessionsByPattern": [pattern]}, db="admin")
    with pytest.raises(OperationFailure):
        get_more(filled, ca, a)
    assert len(get_more(filled, cb, b)["cursor"]["nextBatch"]) == 2
    # a pattern naming another user's uid kills nothing of ours
    filled({"killAllSessionsByPattern": [{"uid": Binary(b"\0" * 32)}]}, db="admin")
    assert len(get_more(filled, cb, b)["cursor"]["nextBatch"]) == 2
    # [] kills every session's cursors
    filled({"killAllSessionsByPattern": []}, db="admin")
    with pytest.raises(OperationFailure):
        get_more(filled, cb, b)


def test_kill_all_sessions_of_no_user_and_of_everyone(filled):
    a = lsid()
    ca = open_cursor(filled, a)
    # a user who has no sessions: nothing dies
    filled({"killAllSessions": [{"user": "nobody", "db": "admin"}]}, db="admin")
    assert len(get_more(filled, ca, a)["cursor"]["nextBatch"]) == 2
    filled({"killAllSessions": []}, db="admin")
    with pytest.raises(OperationFailure) as e:
        get_more(filled, ca, a)
    assert e.value.code == 43


def test_cursors_outside_sessions_survive_session_kills(filled):
    reply = filled({"find": "c", "batchSize": 2})  # no lsid
    cid = reply["cursor"]["id"]
    filled({"killSessions": [lsid()]}, db="admin")
    filled({"killAllSessions": []}, db="admin")
    more = filled({"getMore": cid, "collection": "c", "batchSize": 2})
    assert len(more["cursor"]["nextBatch"]) == 2


@pytest.mark.parametrize("bad,code", [
    ("x", 14),                                        # not an object
    ({}, 40414),                                      # id missing
    ({"id": 5}, 14),                                  # id not binData
    ({"id": Binary(b"1234", 0)}, 2),                  # not a UUID
    ({"id": Binary(b"0123456789abcdef", 0)}, 2),      # 16 bytes, not a UUID subtype
    ({"id": Binary(b"0123456789abcdef", 3)}, 2),      # the legacy UUID subtype
    ({"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE), "x": 1}, 40415),
    ({"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE), "uid": Binary(b"\1" * 32)}, 13),
])
def test_malformed_lsid_fails_the_command(raw, bad, code):
    with pytest.raises(OperationFailure) as e:
        raw({"ping": 1, "lsid": bad})
    assert e.value.code == code


def test_session_commands_want_arrays(client):
    for name in ("endSessions", "refreshSessions", "killSessions", "killAllSessions",
                 "killAllSessionsByPattern"):
        with pytest.raises(OperationFailure) as e:
            client.admin.command({name: 1})
        assert e.value.code == 14, name


def test_list_local_sessions_options(raw):
    sid = lsid()
    raw({"ping": 1, "lsid": sid})
    assert bytes(sid["id"]) in ids_of(local_sessions(raw, allUsers=True))
    assert bytes(sid["id"]) not in ids_of(
        local_sessions(raw, users=[{"user": "someone", "db": "admin"}]))
    with pytest.raises(OperationFailure) as e:
        local_sessions(raw, bogus=1)
    assert e.value.code == 40415
    with pytest.raises(OperationFailure):
        local_sessions(raw, allUsers=True, users=[])


def test_refresh_writes_config_system_sessions(test_server):
    c = test_server.client()
    r = Raw(test_server.port)
    try:
        a, b = lsid(), lsid()
        r({"ping": 1, "lsid": a})
        r({"ping": 1, "lsid": b})
        c.admin.command("refreshLogicalSessionCacheNow")
        coll = c.config["system.sessions"]
        recs = {raw_bytes(d["_id"]["id"]): d for d in coll.find()}
        assert bytes(a["id"]) in recs and bytes(b["id"]) in recs
        assert bytes(recs[bytes(a["id"])]["_id"]["uid"]) == EMPTY_UID
        ttl = [ix for ix in coll.list_indexes() if ix["name"] == "lsidTTLIndex"]
        assert ttl and ttl[0]["key"] == {"lastUse": 1} and ttl[0]["expireAfterSeconds"] == 1800
        listed = ids_of(c.config["system.sessions"].aggregate([{"$listSessions": {}}]))
        assert {bytes(a["id"]), bytes(b["id"])} <= listed
        r({"endSessions": [a]}, db="admin")
        c.admin.command("refreshLogicalSessionCacheNow")
        left = {raw_bytes(d["_id"]["id"]) for d in coll.find()}
        assert bytes(a["id"]) not in left and bytes(b["id"]) in left
        st = c.admin.command("serverStatus")["logicalSessionRecordCache"]
        assert st["sessionsCollectionJobCount"] >= 2
        assert st["lastSessionsCollectionJobEntriesEnded"] == 1
        assert st["activeSessionsCount"] >= 1
        with pytest.raises(OperationFailure):
            c.test.aggregate([{"$listSessions": {}}])  # only on config.system.sessions
    finally:
        r.close()
        c.close()


def test_refresh_now_is_a_test_command(client):
    with pytest.raises(OperationFailure) as e:
        client.admin.command("refreshLogicalSessionCacheNow")
    assert e.value.code == 59


def test_idle_sessions_expire_with_their_cursors(fresh_server):
    # a 1-minute timeout; the job runs every second
    fresh_server.start(["--setParameter", "localLogicalSessionTimeoutMinutes=1",
                        "--setParameter", "logicalSessionRefreshMillis=1000"])
    c = MongoClient(fresh_server.uri())
    r = Raw(fresh_server.port)
    try:
        c.t.c.insert_many([{"_id": i} for i in range(10)])
        assert c.admin.command("startSession")["timeoutMinutes"] == 1
        sid = lsid()
        cid = open_cursor(r, sid)
        deadline = time.time() + 100
        while time.time() < deadline and bytes(sid["id"]) in ids_of(local_sessions(r, allUsers=True)):
            time.sleep(2)
        assert bytes(sid["id"]) not in ids_of(local_sessions(r, allUsers=True))
        with pytest.raises(OperationFailure) as e:
            get_more(r, cid, lsid())  # another session: the expired one is not touched again
        assert e.value.code == 43
    finally:
        r.close()
        c.close()
