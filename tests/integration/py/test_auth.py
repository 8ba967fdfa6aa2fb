"""
test_auth.py: authentication and authorization through pymongo and raw
OP_MSG against a sabled started with --auth.

What users rely on: SCRAM-SHA-1 and SCRAM-SHA-256 logins with the reports'
URL (authSource=admin); the localhost exception creating the first user and
then closing; 13 Unauthorized before login or without the privilege; the
same 18 "Authentication failed." for a wrong password and an unknown user;
every built-in role allowing what it should and refusing the rest;
user-defined roles with inheritance; credentials stored salted and never
shown without showCredentials; malformed or replayed SCRAM messages refused
while the server keeps serving; sable-bench running with authSource=admin.
"""

import base64
import hashlib
import hmac
import os
import subprocess
import uuid

import pymongo
import pytest
from bson.binary import Binary
from pymongo.errors import OperationFailure

import wire
from sabled import REPO, Sabled
from checks import code_of

ROOT_USER, ROOT_PWD = "admin", "s3cret-Pw"


@pytest.fixture(scope="module")
def auth_server():
    s = Sabled()
    try:
        s.start(["--auth"])
        # The localhost exception: no user yet, an unauthenticated loopback
        # connection may create the first one.
        c = s.client()
        c.admin.command("createUser", ROOT_USER, pwd=ROOT_PWD, roles=["root"])
        c.close()
        yield s
    finally:
        s.cleanup()


def url(server, user, pwd, db="ycsb", **opts):
    q = "&".join(["authSource=admin"] + ["%s=%s" % kv for kv in opts.items()])
    return "mongodb://%s:%s@127.0.0.1:%d/%s?%s" % (user, pwd, server.port, db, q)


def connect(server, user, pwd, **opts):
    return pymongo.MongoClient(url(server, user, pwd, **opts), directConnection=True,
                               serverSelectionTimeoutMS=10000)


@pytest.fixture(scope="module")
def root(auth_server):
    c = connect(auth_server, ROOT_USER, ROOT_PWD)
    try:
        yield c
    finally:
        c.close()


def make_user(root, name, roles, db="admin", pwd="pw-" + "x" * 8):
    try:
        root[db].command("dropUser", name)
    except OperationFailure:
        pass
    root[db].command("createUser", name, pwd=pwd, roles=roles)
    return pwd


# ---- authentication ------------------------------------------------------------------------


def test_unauthenticated_commands_refused(auth_server):
    c = auth_server.client()
    try:
        assert c.admin.command("ping")["ok"] == 1
        assert c.admin.command("hello")["ok"] == 1
        assert c.admin.command("buildInfo")["ok"] == 1
        with pytest.raises(OperationFailure) as ei:
            c.ycsb.usertable.find_one()
        assert ei.value.code == 13
        assert "requires authentication" in str(ei.value)
        assert code_of(lambda: c.ycsb.usertable.insert_one({"a": 1})) == 13
        assert code_of(lambda: c.admin.command("listDatabases")) == 13
        # The localhost exception closed with the first user.
        assert code_of(lambda: c.admin.command("createUser", "late", pwd="x", roles=[])) == 13
    finally:
        c.close()


@pytest.mark.parametrize("mech", ["SCRAM-SHA-1", "SCRAM-SHA-256", None])
def test_scram_login_with_reports_url(auth_server, mech):
    opts = {"authMechanism": mech} if mech else {}
    c = connect(auth_server, ROOT_USER, ROOT_PWD, **opts)
    try:
        c.ycsb.usertable.insert_one({"_id": "user%s" % mech, "field0": "v"})
        assert c.ycsb.usertable.find_one({"_id": "user%s" % mech})["field0"] == "v"
        st = c.ycsb.command("connectionStatus")["authInfo"]
        assert st["authenticatedUsers"] == [{"user": ROOT_USER, "db": "admin"}]
        assert {"role": "root", "db": "admin"} in st["authenticatedUserRoles"]
    finally:
        c.close()


def test_sasl_prep_password(auth_server, root):
    # U+00A0 (no-break space) maps to a plain space; U+00AD (soft hyphen) maps to nothing.
    make_user(root, "prep", ["readWrite"], db="ycsb", pwd="a\u00a0b\u00adc")
    c = pymongo.MongoClient("127.0.0.1", auth_server.port, username="prep", password="a b" + "c",
                            authSource="ycsb", authMechanism="SCRAM-SHA-256",
                            directConnection=True, serverSelectionTimeoutMS=10000)
    try:
        c.ycsb.prep.insert_one({"x": 1})
    finally:
        c.close()
    # A prohibited character (U+0007) is refused at createUser.
    assert code_of(lambda: root.ycsb.command("createUser", "bell", pwd="a\u0007b",
                                             roles=[])) == 2


def test_wrong_password_and_unknown_user_look_alike(auth_server):
    errors = []
    for user, pwd in [(ROOT_USER, "wrong"), ("nobody", "wrong")]:
        for mech in ["SCRAM-SHA-1", "SCRAM-SHA-256"]:
            c = connect(auth_server, user, pwd, authMechanism=mech)
            try:
                with pytest.raises(OperationFailure) as ei:
                    c.ycsb.usertable.find_one()
                errors.append((ei.value.code, ei.value.details.get("errmsg")))
            finally:
                c.close()
    assert set(errors) == {(18, "Authentication failed.")}
    # The failures are logged with the client's address (ACCESS component).
    lines = [l for l in auth_server.log_lines() if l.get("id") == 20249]
    assert lines and all(l["attr"]["remote"].startswith("127.0.0.1:") for l in lines)
    assert {l["attr"]["principalName"] for l in lines} >= {ROOT_USER, "nobody"}
    # ... and the server keeps serving.
    c = connect(auth_server, ROOT_USER, ROOT_PWD)
    assert c.admin.command("ping")["ok"] == 1
    c.close()


def test_logout(auth_server):
    with wire.connect(auth_server.port) as s:
        scram_login(s, ROOT_USER, ROOT_PWD, "SCRAM-SHA-256")
        assert wire.command(s, {"find": "usertable"}, "ycsb")["ok"] == 1
        assert wire.command(s, {"logout": 1}, "admin")["ok"] == 1
        r = wire.command(s, {"find": "usertable"}, "ycsb")
        assert r["ok"] == 0 and r["code"] == 13
        st = wire.command(s, {"connectionStatus": 1}, "admin")
        assert st["authInfo"]["authenticatedUsers"] == []


# ---- raw SCRAM: speculative auth, malformed and replayed messages ------------------------


def _hi(mech, password, salt, iterations):
    h = "sha1" if mech == "SCRAM-SHA-1" else "sha256"
    return hashlib.pbkdf2_hmac(h, password.encode(), salt, iterations), h


def client_first(user):
    nonce = base64.b64encode(os.urandom(18)).decode()
    bare = "n=%s,r=%s" % (user, nonce)
    return "n,," + bare, bare, nonce


def client_final(mech, user, pwd, bare, server_first):
    fields = dict(kv.split("=", 1) for kv in server_first.split(","))
    if mech == "SCRAM-SHA-1":
        pwd = hashlib.md5(("%s:mongo:%s" % (user, pwd)).encode()).hexdigest()
    salted, h = _hi(mech, pwd, base64.b64decode(fields["s"]), int(fields["i"]))
    ckey = hmac.new(salted, b"Client Key", h).digest()
    stored = hashlib.new(h, ckey).digest()
    without_proof = "c=biws,r=%s" % fields["r"]
    auth_msg = ",".join([bare, server_first, without_proof]).encode()
    sig = hmac.new(stored, auth_msg, h).digest()
    proof = bytes(a ^ b for a, b in zip(ckey, sig))
    skey = hmac.new(salted, b"Server Key", h).digest()
    server_sig = base64.b64encode(hmac.new(skey, auth_msg, h).digest()).decode()
    return without_proof + ",p=" + base64.b64encode(proof).decode(), server_sig


def scram_login(sock, user, pwd, mech, skip_empty=False):
    first, bare, _ = client_first(user)
    cmd = {"saslStart": 1, "mechanism": mech, "payload": Binary(first.encode()),
           "autoAuthorize": 1}
    if skip_empty:
        cmd["options"] = {"skipEmptyExchange": True}
    r = wire.command(sock, cmd, "admin")
    assert r["ok"] == 1, r
    final, server_sig = client_final(mech, user, pwd, bare, bytes(r["payload"]).decode())
    r2 = wire.command(sock, {"saslContinue": 1, "conversationId": r["conversationId"],
                             "payload": Binary(final.encode())}, "admin")
    assert r2["ok"] == 1, r2
    assert bytes(r2["payload"]).decode() == "v=" + server_sig
    if skip_empty:
        assert r2["done"] is True
        return final
    assert r2["done"] is False
    r3 = wire.command(sock, {"saslContinue": 1, "conversationId": r["conversationId"],
                             "payload": Binary(b"")}, "admin")
    assert r3["ok"] == 1 and r3["done"] is True
    return final


@pytest.mark.parametrize("mech", ["SCRAM-SHA-1", "SCRAM-SHA-256"])
def test_raw_scram_and_skip_empty_exchange(auth_server, mech):
    for skip in (False, True):
        with wire.connect(auth_server.port) as s:
            scram_login(s, ROOT_USER, ROOT_PWD, mech, skip_empty=skip)
            assert wire.command(s, {"listDatabases": 1}, "admin")["ok"] == 1


def test_speculative_authenticate_in_hello(auth_server):
    with wire.connect(auth_server.port) as s:
        first, bare, _ = client_first(ROOT_USER)
        r = wire.command(s, {"hello": 1, "speculativeAuthenticate": {
            "saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": Binary(first.encode()),
            "db": "admin", "options": {"skipEmptyExchange": True}}}, "admin")
        spec = r["speculativeAuthenticate"]
        assert spec["done"] is False
        final, sig = client_final("SCRAM-SHA-256", ROOT_USER, ROOT_PWD, bare,
                                  bytes(spec["payload"]).decode())
        r2 = wire.command(s, {"saslContinue": 1, "conversationId": spec["conversationId"],
                              "payload": Binary(final.encode())}, "admin")
        assert r2["ok"] == 1 and r2["done"] is True
        assert bytes(r2["payload"]).decode() == "v=" + sig
        assert wire.command(s, {"find": "usertable"}, "ycsb")["ok"] == 1


def test_sasl_supported_mechs(auth_server, root):
    make_user(root, "only1", ["read"], db="ycsb")
    root.ycsb.command("updateUser", "only1", pwd="pw2", mechanisms=["SCRAM-SHA-1"])
    with wire.connect(auth_server.port) as s:
        r = wire.command(s, {"hello": 1, "saslSupportedMechs": "admin." + ROOT_USER}, "admin")
        assert sorted(r["saslSupportedMechs"]) == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
        r = wire.command(s, {"hello": 1, "saslSupportedMechs": "ycsb.only1"}, "admin")
        assert r["saslSupportedMechs"] == ["SCRAM-SHA-1"]
        r = wire.command(s, {"hello": 1, "saslSupportedMechs": "admin.nobody"}, "admin")
        assert "saslSupportedMechs" not in r


def test_malformed_and_replayed_scram(auth_server):
    with wire.connect(auth_server.port) as s:
        bad = [b"", b"garbage", b"p=tls-unique,,n=a,r=x", b"n,,r=abc", b"n,,n=admin",
               b"n,,n=adm=ZZin,r=abc"]
        for payload in bad:
            r = wire.command(s, {"saslStart": 1, "mechanism": "SCRAM-SHA-256",
                                 "payload": Binary(payload)}, "admin")
            assert r["ok"] == 0 and r["code"] == 2, (payload, r)
        r = wire.command(s, {"saslStart": 1, "mechanism": "PLAIN", "payload": Binary(b"x")},
                         "admin")
        assert r["ok"] == 0 and r["code"] == 334
        # saslContinue without a conversation
        r = wire.command(s, {"saslContinue": 1, "conversationId": 1, "payload": Binary(b"x")},
                         "admin")
        assert r["ok"] == 0 and r["code"] == 17
        # a malformed client-final
        first, bare, _ = client_first(ROOT_USER)
        r = wire.command(s, {"saslStart": 1, "mechanism": "SCRAM-SHA-256",
                             "payload": Binary(first.encode())}, "admin")
        r2 = wire.command(s, {"saslContinue": 1, "conversationId": 1,
                              "payload": Binary(b"c=biws,p=AAAA")}, "admin")
        assert r2["ok"] == 0 and r2["code"] == 2
    # Replay: a client-final captured from a successful login, sent in a new conversation.
    with wire.connect(auth_server.port) as s:
        final = scram_login(s, ROOT_USER, ROOT_PWD, "SCRAM-SHA-256", skip_empty=True)
    with wire.connect(auth_server.port) as s:
        first, bare, _ = client_first(ROOT_USER)
        wire.command(s, {"saslStart": 1, "mechanism": "SCRAM-SHA-256",
                         "payload": Binary(first.encode())}, "admin")
        r = wire.command(s, {"saslContinue": 1, "conversationId": 1,
                             "payload": Binary(final.encode())}, "admin")
        assert r["ok"] == 0 and r["code"] == 18
        # The conversation is over: another step is a protocol error, and nothing was granted.
        r = wire.command(s, {"find": "usertable"}, "ycsb")
        assert r["ok"] == 0 and r["code"] == 13
    with wire.connect(auth_server.port) as s:
        assert wire.command(s, {"ping": 1}, "admin")["ok"] == 1


# ---- users ------------------------------------------------------------------------------


def test_credentials_stored_as_mongodb_does(root):
    pwd = make_user(root, "shape", ["read"], db="ycsb")
    doc = root.admin["system.users"].find_one({"_id": "ycsb.shape"})
    assert doc["user"] == "shape" and doc["db"] == "ycsb"
    assert isinstance(doc["userId"], uuid.UUID)
    assert doc["roles"] == [{"role": "read", "db": "ycsb"}]
    c1, c256 = doc["credentials"]["SCRAM-SHA-1"], doc["credentials"]["SCRAM-SHA-256"]
    assert c1["iterationCount"] == 10000 and c256["iterationCount"] == 15000
    assert len(base64.b64decode(c1["salt"])) == 16 and len(base64.b64decode(c256["salt"])) == 28
    assert len(base64.b64decode(c1["storedKey"])) == 20
    assert len(base64.b64decode(c256["serverKey"])) == 32
    # The password itself is never stored.  (Checking for "pw" alone failed at
    # random: base64 salts and keys contain "pw" about one run in twenty.)
    assert pwd not in str(doc)


def test_users_info_hides_credentials(root):
    make_user(root, "info", ["read", {"role": "readWrite", "db": "other"}], db="ycsb")
    u = root.ycsb.command("usersInfo", "info")["users"]
    assert len(u) == 1 and "credentials" not in u[0]
    assert u[0]["_id"] == "ycsb.info" and sorted(u[0]["mechanisms"]) == ["SCRAM-SHA-1",
                                                                        "SCRAM-SHA-256"]
    u = root.ycsb.command("usersInfo", "info", showCredentials=True)["users"]
    assert "SCRAM-SHA-256" in u[0]["credentials"]
    allu = root.ycsb.command("usersInfo", 1)["users"]
    assert all("credentials" not in x for x in allu)
    assert "info" in [x["user"] for x in allu]
    assert root.ycsb.command("usersInfo", "nobody")["users"] == []
    assert code_of(lambda: root.ycsb.command("dropUser", "nobody")) == 11
    assert code_of(lambda: root.ycsb.command("createUser", "info", pwd="x", roles=[])) == 51003
    assert code_of(lambda: root.ycsb.command("createUser", "r1", pwd="x",
                                             roles=["noSuchRole"])) == 31


def test_update_grant_revoke_drop_user(auth_server, root):
    make_user(root, "ed", ["read"], db="ycsb")
    c = pymongo.MongoClient("127.0.0.1", auth_server.port, username="ed", password="pw-xxxxxxxx",
                            authSource="ycsb", directConnection=True,
                            serverSelectionTimeoutMS=10000)
    try:
        c.ycsb.t.find_one()
        assert code_of(lambda: c.ycsb.t.insert_one({})) == 13
        root.ycsb.command("grantRolesToUser", "ed", roles=["readWrite"])
        c.ycsb.t.insert_one({})  # takes effect on the next command
        root.ycsb.command("revokeRolesFromUser", "ed", roles=["readWrite"])
        assert code_of(lambda: c.ycsb.t.insert_one({})) == 13
        root.ycsb.command("updateUser", "ed", pwd="newpass")
    finally:
        c.close()
    c = pymongo.MongoClient("127.0.0.1", auth_server.port, username="ed", password="newpass",
                            authSource="ycsb", directConnection=True,
                            serverSelectionTimeoutMS=10000)
    try:
        c.ycsb.t.find_one()
        root.ycsb.command("dropUser", "ed")
        assert code_of(lambda: c.ycsb.t.find_one()) == 13
    finally:
        c.close()
    make_user(root, "d1", [], db="dropall")
    make_user(root, "d2", [], db="dropall")
    assert root.dropall.command("dropAllUsersFromDatabase")["n"] == 2
    assert root.dropall.command("usersInfo", 1)["users"] == []


# ---- built-in roles -----------------------------------------------------------------------


def as_user(server, root, name, roles):
    pwd = make_user(root, name, roles)
    return connect(server, name, pwd)


def test_read_role(auth_server, root):
    root.rdb.c.insert_one({"_id": 1})
    c = as_user(auth_server, root, "reader", [{"role": "read", "db": "rdb"}])
    try:
        assert c.rdb.c.find_one({"_id": 1}) == {"_id": 1}
        assert c.rdb.c.count_documents({}) == 1
        assert "c" in c.rdb.list_collection_names()
        assert code_of(lambda: c.rdb.c.insert_one({"_id": 2})) == 13
        assert code_of(lambda: c.rdb.c.update_one({"_id": 1}, {"$set": {"a": 1}})) == 13
        assert code_of(lambda: c.rdb.c.delete_one({"_id": 1})) == 13
        assert code_of(lambda: c.rdb.c.drop()) == 13
        assert code_of(lambda: c.otherdb.c.find_one()) == 13
        assert code_of(lambda: c.admin.command("serverStatus")) == 13
        # mapReduce reads with find; writing its output needs the write actions.
        mr = dict(map="function() { emit(this._id, 1) }", reduce="function(k, v) { return 1 }")
        assert c.rdb.command("mapReduce", "c", out={"inline": 1}, **mr)["results"] == [
            {"_id": 1, "value": 1.0}]
        assert code_of(lambda: c.rdb.command("mapReduce", "c", out="o", **mr)) == 13
        assert code_of(lambda: c.rdb.command("mapReduce", "c", out={"merge": "o"}, **mr)) == 13
        with pytest.raises(OperationFailure) as ei:
            c.rdb.c.insert_one({"_id": 3})
        assert "not authorized on rdb to execute command" in str(ei.value)
    finally:
        c.close()


def test_out_and_merge_need_the_write_actions_on_their_target(auth_server, root):
    """$out and $merge write where they name, with mongod's actions: $out insert and
    remove; $merge insert when whenNotMatched is insert, update unless whenMatched is
    fail. A read-only user could replace any collection of any database before."""
    root.agw.src.drop()
    root.agw.src.insert_many([{"_id": i} for i in range(3)])
    for d in ("agw", "agw2"):
        root[d].victim.drop()
        root[d].victim.insert_one({"_id": "keep"})
    c = as_user(auth_server, root, "aggreader", [{"role": "read", "db": "agw"}])
    try:
        for p in ([{"$out": "victim"}], [{"$out": {"db": "agw2", "coll": "victim"}}],
                  [{"$merge": {"into": "victim"}}], [{"$merge": "victim"}],
                  [{"$merge": {"into": {"db": "agw2", "coll": "victim"}}}]):
            assert code_of(lambda: list(c.agw.src.aggregate(p))) == 13, p
        assert code_of(lambda: c.agw.command("aggregate", 1, pipeline=[
            {"$documents": [{"_id": 9}]}, {"$out": "victim"}], cursor={})) == 13
        assert list(c.agw.src.aggregate([{"$match": {"_id": 1}}])) == [{"_id": 1}]
    finally:
        c.close()
    assert [d["_id"] for d in root.agw.victim.find()] == ["keep"]
    assert [d["_id"] for d in root.agw2.victim.find()] == ["keep"]

    # per mode, with roles granting single actions on agw2.t
    db = root.agw2
    for name, acts in (("ins", ["insert"]), ("upd", ["update"]), ("insupd", ["insert", "update"]),
                       ("insrem", ["insert", "remove"])):
        try:
            db.command("dropRole", name)
        except OperationFailure:
            pass
        db.command("createRole", name, roles=[], privileges=[
            {"resource": {"db": "agw2", "collection": "t"}, "actions": acts}])
    cases = [  # (role, stage, allowed)
        ("ins", {"$merge": {"into": {"db": "agw2", "coll": "t"}, "whenMatched": "fail"}}, True),
        ("ins", {"$merge": {"into": {"db": "agw2", "coll": "t"}}}, False),
        ("upd", {"$merge": {"into": {"db": "agw2", "coll": "t"}, "whenNotMatched": "discard"}},
         True),
        ("upd", {"$merge": {"into": {"db": "agw2", "coll": "t"}, "whenMatched": "keepExisting"}},
         False),
        ("insupd", {"$merge": {"into": {"db": "agw2", "coll": "t"}}}, True),
        ("insupd", {"$out": {"db": "agw2", "coll": "t"}}, False),
        ("insrem", {"$out": {"db": "agw2", "coll": "t"}}, True),
    ]
    for role, stage, ok in cases:
        c = as_user(auth_server, root, "agw_" + role, [{"role": "read", "db": "agw"},
                                                       {"role": role, "db": "agw2"}])
        try:
            try:
                list(c.agw.src.aggregate([stage]))
                code = None
            except OperationFailure as e:
                code = e.code
            assert code == (None if ok else 13), (role, stage, code)
        finally:
            c.close()


def test_read_write_role(auth_server, root):
    c = as_user(auth_server, root, "writer", [{"role": "readWrite", "db": "wdb"}])
    try:
        c.wdb.c.insert_one({"_id": 1})
        c.wdb.c.update_one({"_id": 1}, {"$set": {"a": 1}})
        c.wdb.c.update_one({"_id": 2}, {"$set": {"a": 1}}, upsert=True)
        assert c.wdb.c.find_one_and_update({"_id": 1}, {"$set": {"b": 1}})["a"] == 1
        c.wdb.c.create_index("a")
        c.wdb.c.delete_one({"_id": 1})
        c.wdb.c.drop()
        assert code_of(lambda: c.wdb.command("dropDatabase")) == 13
        assert code_of(lambda: c.wdb.command("createUser", "x", pwd="x", roles=[])) == 13
        assert code_of(lambda: c.other.c.insert_one({})) == 13
        assert code_of(lambda: c.admin["system.users"].find_one()) == 13
    finally:
        c.close()


def test_db_admin_role(auth_server, root):
    root.dadb.c.insert_one({"_id": 1})
    c = as_user(auth_server, root, "dbadm", [{"role": "dbAdmin", "db": "dadb"}])
    try:
        c.dadb.c.create_index("x")
        assert "c" in c.dadb.list_collection_names()
        c.dadb.command("dbStats")
        c.dadb.command("collStats", "c")
        assert code_of(lambda: c.dadb.c.find_one()) == 13
        assert code_of(lambda: c.dadb.c.insert_one({})) == 13
        c.dadb.c.drop()
    finally:
        c.close()


def test_user_admin_role(auth_server, root):
    c = as_user(auth_server, root, "uadm", [{"role": "userAdmin", "db": "uadb"}])
    try:
        c.uadb.command("createUser", "made", pwd="p", roles=["read"])
        assert [u["user"] for u in c.uadb.command("usersInfo", 1)["users"]] == ["made"]
        c.uadb.command("createRole", "rr", privileges=[], roles=["read"])
        assert code_of(lambda: c.uadb.c.find_one()) == 13
        assert code_of(lambda: c.other.command("createUser", "m2", pwd="p", roles=[])) == 13
    finally:
        c.close()


def test_db_owner_role(auth_server, root):
    c = as_user(auth_server, root, "owner", [{"role": "dbOwner", "db": "odb"}])
    try:
        c.odb.c.insert_one({"_id": 1})
        c.odb.c.find_one()
        c.odb.command("createUser", "ou", pwd="p", roles=["read"])
        c.odb.command("dropDatabase")
        assert code_of(lambda: c.other.c.find_one()) == 13
    finally:
        c.close()


def test_cluster_monitor_and_admin_roles(auth_server, root):
    c = as_user(auth_server, root, "mon", ["clusterMonitor"])
    try:
        c.admin.command("serverStatus")
        c.admin.command("listDatabases")
        c.admin.command("getCmdLineOpts")
        assert code_of(lambda: c.ycsb.usertable.find_one()) == 13
        assert code_of(lambda: c.admin.command("fsync")) == 13
    finally:
        c.close()
    c = as_user(auth_server, root, "cadm", ["clusterAdmin"])
    try:
        c.admin.command("serverStatus")
        c.admin.command("fsync")
        assert code_of(lambda: c.ycsb.usertable.find_one()) == 13
    finally:
        c.close()


def test_any_database_roles(auth_server, root):
    root.anya.c.insert_one({"_id": 1})
    c = as_user(auth_server, root, "ranydb", ["readAnyDatabase"])
    try:
        assert c.anya.c.find_one() == {"_id": 1}
        c.admin.command("listDatabases")
        assert code_of(lambda: c.anya.c.insert_one({})) == 13
        assert code_of(lambda: c.admin["system.users"].find_one()) == 13
    finally:
        c.close()
    c = as_user(auth_server, root, "rwanydb", ["readWriteAnyDatabase"])
    try:
        c.anyb.c.insert_one({"_id": 1})
        assert code_of(lambda: c.anyb.command("createUser", "x", pwd="x", roles=[])) == 13
    finally:
        c.close()
    c = as_user(auth_server, root, "uanydb", ["userAdminAnyDatabase"])
    try:
        c.anyc.command("createUser", "x", pwd="x", roles=["read"])
        assert code_of(lambda: c.anyc.c.find_one()) == 13
    finally:
        c.close()
    c = as_user(auth_server, root, "danydb", ["dbAdminAnyDatabase"])
    try:
        c.anyd.c.create_index("a")
        assert code_of(lambda: c.anyd.c.find_one()) == 13
    finally:
        c.close()


def test_backup_restore_root(auth_server, root):
    root.bk.c.insert_one({"_id": 1})
    c = as_user(auth_server, root, "bkup", ["backup"])
    try:
        assert c.bk.c.find_one() == {"_id": 1}
        assert code_of(lambda: c.bk.c.insert_one({})) == 13
    finally:
        c.close()
    c = as_user(auth_server, root, "rstr", ["restore"])
    try:
        c.bk.c2.insert_one({"_id": 1})
        assert code_of(lambda: c.bk.c.find_one()) == 13
    finally:
        c.close()
    c = as_user(auth_server, root, "root2", ["root"])
    try:
        c.bk.c.find_one()
        c.admin.command("serverStatus")
        c.admin["system.users"].find_one()
    finally:
        c.close()


def test_admin_only_roles_do_not_exist_elsewhere(root):
    assert code_of(lambda: root.ycsb.command("createUser", "x1", pwd="x",
                                             roles=[{"role": "root", "db": "ycsb"}])) == 31


# ---- user-defined roles ---------------------------------------------------------------------


def test_user_defined_roles_with_inheritance(auth_server, root):
    db = root.udr
    db.c1.insert_one({"_id": 1})
    db.c3.insert_one({"_id": 1})
    for r in ("child", "parent"):
        try:
            db.command("dropRole", r)
        except OperationFailure:
            pass
    db.command("createRole", "parent",
               privileges=[{"resource": {"db": "udr", "collection": "c1"}, "actions": ["find"]}],
               roles=[])
    db.command("createRole", "child",
               privileges=[{"resource": {"db": "udr", "collection": "c2"},
                            "actions": ["insert", "find"]}],
               roles=["parent"])
    info = db.command("rolesInfo", "child", showPrivileges=True)["roles"][0]
    assert info["roles"] == [{"role": "parent", "db": "udr"}]
    assert {"role": "parent", "db": "udr"} in info["inheritedRoles"]
    assert info["isBuiltin"] is False and len(info["privileges"]) == 1
    builtin = db.command("rolesInfo", "read", showPrivileges=True)["roles"][0]
    assert builtin["isBuiltin"] is True and builtin["privileges"]

    c = as_user(auth_server, root, "udruser", [{"role": "child", "db": "udr"}])
    try:
        assert c.udr.c1.find_one() == {"_id": 1}   # inherited from parent
        c.udr.c2.insert_one({"_id": 5})            # child's own privilege
        assert code_of(lambda: c.udr.c1.insert_one({})) == 13
        assert code_of(lambda: c.udr.c3.find_one()) == 13
        db.command("grantPrivilegesToRole", "parent",
                   privileges=[{"resource": {"db": "udr", "collection": "c3"},
                                "actions": ["find"]}])
        assert c.udr.c3.find_one() == {"_id": 1}
        db.command("revokePrivilegesFromRole", "parent",
                   privileges=[{"resource": {"db": "udr", "collection": "c3"},
                                "actions": ["find"]}])
        assert code_of(lambda: c.udr.c3.find_one()) == 13
        db.command("revokeRolesFromRole", "child", roles=["parent"])
        assert code_of(lambda: c.udr.c1.find_one()) == 13
        db.command("grantRolesToRole", "child", roles=["parent"])
        c.udr.c1.find_one()
        # A cycle is refused.
        assert code_of(lambda: db.command("grantRolesToRole", "parent", roles=["child"])) == 5
        db.command("updateRole", "child", privileges=[], roles=[])
        assert code_of(lambda: c.udr.c2.find_one()) == 13
        db.command("dropRole", "parent")
        assert db.command("rolesInfo", "parent")["roles"] == []
    finally:
        c.close()
    assert code_of(lambda: db.command("createRole", "child", privileges=[], roles=[])) == 51002
    assert code_of(lambda: db.command("createRole", "read", privileges=[], roles=[])) == 2
    assert code_of(lambda: db.command("createRole", "badact", roles=[], privileges=[
        {"resource": {"db": "udr", "collection": ""}, "actions": ["fly"]}])) == 2
    assert code_of(lambda: db.command("createRole", "otherdb", roles=[], privileges=[
        {"resource": {"db": "elsewhere", "collection": ""}, "actions": ["find"]}])) == 2


# ---- configuration and tools ----------------------------------------------------------------


def test_yaml_security_authorization(tmp_path):
    cfg = tmp_path / "sabled.yaml"
    cfg.write_text("security:\n  authorization: enabled\n")
    with Sabled() as s:
        s.start(["--config", str(cfg)])
        c = s.client()
        try:
            assert code_of(lambda: c.x.y.find_one()) == 13
        finally:
            c.close()


def test_without_auth_nothing_changes(server, client):
    client.noauth.c.insert_one({"_id": 1})
    assert client.noauth.c.find_one() == {"_id": 1}
    r = client.admin.command("connectionStatus")["authInfo"]
    assert r["authenticatedUsers"] == []


def test_sable_bench_with_auth_source(auth_server, root):
    bench = os.environ.get("SABLE_BENCH") or os.path.join(REPO, "build", "sable-bench")
    if not os.path.exists(bench):
        pytest.skip("sable-bench not built")
    make_user(root, "ycsb", [{"role": "readWrite", "db": "ycsb"}], pwd="ycsbpw")
    u = "mongodb://ycsb:ycsbpw@127.0.0.1:%d/ycsb?authSource=admin" % auth_server.port
    for phase in ("load", "run"):
        r = subprocess.run([bench, phase, "mongodb", "-P",
                            os.path.join(REPO, "workloads", "workloada"), "-p", "recordcount=100",
                            "-p", "operationcount=200", "-p", "mongodb.url=" + u],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert root.ycsb.usertable.count_documents({}) >= 100
    # A wrong password stops the run before any operation, on every mongodb.api.
    bad = "mongodb://ycsb:wrong@127.0.0.1:%d/ycsb?authSource=admin" % auth_server.port
    for api in ("wire", "command"):
        r = subprocess.run([bench, "run", "mongodb", "-P", os.path.join(REPO, "workloads", "workloada"),
                            "-p", "recordcount=100", "-p", "operationcount=50", "-p", "mongodb.api=" + api,
                            "-p", "mongodb.url=" + bad], capture_output=True, text=True, timeout=120)
        assert r.returncode != 0, (api, r.stdout[-2000:])
        assert "Return=OK" not in r.stdout, (api, r.stdout[-2000:])
        assert "uthentication failed" in r.stderr, (api, r.stderr[-2000:])


def test_cursors_belong_to_their_user(auth_server, root):
    """A cursor is its user's: another user's getMore fails with 13 (and the
    cursor lives on), killCursors of it fails whole with 13, unless the user
    has killAnyCursor (hostManager, so root); the owner continues and kills
    it.  Before, any user who could guess the id could read on or kill it."""
    root.curdb.c.insert_many([{"_id": i} for i in range(10)])
    roles = [{"role": "readWrite", "db": "curdb"}]
    a = as_user(auth_server, root, "cur_a", roles)
    b = as_user(auth_server, root, "cur_b", roles)
    try:
        first = a.curdb.command("find", "c", batchSize=2)["cursor"]
        cid = first["id"]
        assert cid != 0 and len(first["firstBatch"]) == 2
        with pytest.raises(OperationFailure) as e:
            b.curdb.command("getMore", cid, collection="c", batchSize=2)
        assert e.value.code == 13, e.value.details
        assert "not created by the authenticated user" in e.value.details["errmsg"]
        with pytest.raises(OperationFailure) as e:
            b.curdb.command("killCursors", "c", cursors=[cid])
        assert e.value.code == 13, e.value.details
        more = a.curdb.command("getMore", cid, collection="c", batchSize=2)["cursor"]
        assert [d["_id"] for d in more["nextBatch"]] == [2, 3]
        r = a.curdb.command("killCursors", "c", cursors=[cid])
        assert r["cursorsKilled"] == [cid]
        # root (hostManager's killAnyCursor) may kill another user's cursor
        cid = a.curdb.command("find", "c", batchSize=2)["cursor"]["id"]
        r = root.curdb.command("killCursors", "c", cursors=[cid])
        assert r["cursorsKilled"] == [cid]
    finally:
        a.close()
        b.close()


def test_cleanup_orphaned_needs_its_cluster_action(auth_server, root):
    # clusterManager holds cleanupOrphaned on the cluster (so clusterAdmin and root);
    # readWriteAnyDatabase does not.  Past the check, a standalone is no shard (20).
    cm = as_user(auth_server, root, "cmgr", [{"role": "clusterManager", "db": "admin"}])
    rw = as_user(auth_server, root, "rwany", [{"role": "readWriteAnyDatabase", "db": "admin"}])
    try:
        assert code_of(lambda: rw.admin.command("cleanupOrphaned", "db.c")) == 13
        assert code_of(lambda: cm.admin.command("cleanupOrphaned", "db.c")) == 20
        assert code_of(lambda: root.admin.command("cleanupOrphaned", "db.c")) == 20
    finally:
        cm.close()
        rw.close()
