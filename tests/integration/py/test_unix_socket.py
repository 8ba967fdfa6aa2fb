"""
test_unix_socket.py: the Unix-domain socket sabled listens on besides TCP,
as mongod does by default: <net.unixDomainSocket.pathPrefix>/mongodb-<port>.sock
(/tmp unless --unixSocketPrefix), mode net.unixDomainSocket.filePermissions
(0700), off with --nounixsocket or net.unixDomainSocket.enabled: false; bindIp
entries that are paths are sockets too.  Drivers reach it with
mongodb://%2Ftmp%2Fmongodb-27017.sock.

The fixture (sabled.py) puts each test server's socket in its own directory;
the tests that need /tmp say so.
"""

import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import urllib.parse

import pymongo
import pytest
from pymongo.errors import OperationFailure

import sharded
from sabled import REPO, Sabled, free_port, run_sabled, sabled_path


def sock_uri(path, userinfo="", query=""):
    return "mongodb://%s%s/%s" % (userinfo, urllib.parse.quote_plus(path),
                                 ("?" + query) if query else "")


def sock_client(path, **kw):
    kw.setdefault("serverSelectionTimeoutMS", 10000)
    return pymongo.MongoClient(sock_uri(path), **kw)


def is_socket(path):
    return os.path.exists(path) and stat.S_ISSOCK(os.stat(path).st_mode)


@pytest.fixture
def fresh():
    s = Sabled()
    try:
        yield s
    finally:
        s.cleanup()


def test_crud_through_the_socket(fresh):
    fresh.start()
    path = fresh.socket_path()
    assert is_socket(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    with sock_client(path) as c:
        c.test.pets.insert_one({"_id": 1, "name": "Rex"})
        c.test.pets.update_one({"_id": 1}, {"$set": {"kind": "dog"}})
        assert c.test.pets.find_one({"_id": 1}) == {"_id": 1, "name": "Rex", "kind": "dog"}
        assert c.test.pets.delete_one({"_id": 1}).deleted_count == 1
        # the client address as mongod names a socket's client, in currentOp and the log
        ops = c.admin.command("currentOp", {"$all": True})["inprog"]
        mine = [op for op in ops if op.get("command", {}).get("currentOp")]
        assert mine and mine[0]["client"] == "anonymous unix socket:%d" % fresh.port
        parsed = c.admin.command("getCmdLineOpts")["parsed"]
        assert parsed["net"]["unixDomainSocket"] == {"pathPrefix": fresh.root}
    # TCP still serves beside it
    with fresh.client() as c:
        assert c.test.pets.count_documents({}) == 0
    log = fresh.output()
    assert '"remote" : "anonymous unix socket:%d"' % fresh.port in log, log[-2000:]
    assert '"Listening on"' in log and path in log


def test_default_path_in_tmp_removed_at_clean_stop(fresh):
    port = free_port()
    path = "/tmp/mongodb-%d.sock" % port
    if os.path.exists(path):
        pytest.skip("%s exists already" % path)
    fresh.port = port
    fresh.start_raw(["--port", str(port), "--bind_ip", "127.0.0.1", "--dbpath", fresh.dbpath,
                     "--logpath", fresh.logpath])
    try:
        fresh.wait_ready()
        assert is_socket(path)
        with sock_client(path) as c:
            assert c.admin.command("ping")["ok"] == 1
    finally:
        assert fresh.stop() == 0
    assert not os.path.exists(path)
    assert '"removing socket file"' in fresh.output()


def test_nounixsocket_and_enabled_false(fresh, tmp_path):
    fresh.start(["--nounixsocket"])
    assert not os.path.exists(fresh.socket_path())
    with fresh.client() as c:
        parsed = c.admin.command("getCmdLineOpts")["parsed"]
        assert parsed["net"]["unixDomainSocket"]["enabled"] is False
    fresh.stop()
    conf = tmp_path / "sabled.yaml"
    conf.write_text("net:\n  unixDomainSocket:\n    enabled: false\n")
    fresh.start(["--config", str(conf)])
    assert not os.path.exists(fresh.socket_path())


def test_file_permissions(fresh, tmp_path):
    fresh.start(["--filePermissions", "0777"])
    assert stat.S_IMODE(os.stat(fresh.socket_path()).st_mode) == 0o777
    with fresh.client() as c:
        # mongod's int: 0777 is octal
        assert c.admin.command("getCmdLineOpts")["parsed"]["net"]["unixDomainSocket"][
            "filePermissions"] == 0o777
    fresh.stop()
    conf = tmp_path / "sabled.yaml"
    conf.write_text("net:\n  unixDomainSocket:\n    filePermissions: 0660\n")
    fresh.start(["--config", str(conf)])
    assert stat.S_IMODE(os.stat(fresh.socket_path()).st_mode) == 0o660
    fresh.stop()
    for bad in ("rwx", "0999", "-1"):
        r = run_sabled(["--dbpath", str(tmp_path), "--port", str(free_port()),
                        "--filePermissions", bad])
        assert r.returncode != 0 and "filePermissions" in r.stdout + r.stderr, bad


def test_stale_socket_replaced_and_killed_server_restarts(fresh):
    port = free_port()
    path = fresh.socket_path(port)
    # a socket file nobody listens on, as a killed server leaves it
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()
    assert is_socket(path)
    fresh.start(port=port)
    with sock_client(path) as c:
        assert c.admin.command("ping")["ok"] == 1
    fresh.kill9()
    assert is_socket(path)  # kill -9 leaves it
    fresh.restart()
    with sock_client(path) as c:
        assert c.admin.command("ping")["ok"] == 1
    assert fresh.stop() == 0
    assert not os.path.exists(path)


def test_bind_ip_path_and_a_taken_file_replaced(fresh):
    fresh.start()
    other = Sabled()
    try:
        # a bindIp entry with a '/' is a socket of its own, beside the default one
        custom = os.path.join(other.root, "custom.sock")
        other.start(["--bind_ip", "127.0.0.1," + custom])
        assert is_socket(custom) and is_socket(other.socket_path())
        with sock_client(custom) as c:
            assert c.admin.command("ping")["ok"] == 1
        assert other.stop() == 0
        assert not os.path.exists(custom) and not os.path.exists(other.socket_path())
        # as mongod does, a server naming a path another one listens on
        # replaces that file: the path reaches the newcomer
        other.start(["--bind_ip", "127.0.0.1," + fresh.socket_path()])
        with sock_client(fresh.socket_path(), directConnection=True) as c:
            assert c.admin.command("getCmdLineOpts")["parsed"]["net"]["port"] == other.port
        with fresh.client() as c:  # the first one still serves TCP
            assert c.admin.command("ping")["ok"] == 1
    finally:
        other.cleanup()


def test_auth_localhost_exception_and_login_through_the_socket(fresh):
    fresh.start(["--auth"])
    path = fresh.socket_path()
    with sock_client(path) as c:
        # no user yet: the localhost exception holds on the socket, as on loopback
        c.admin.command("createUser", "root", pwd="pw-root", roles=["root"])
    uri = sock_uri(path, "root:pw-root@", "authSource=admin")
    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000) as c:
        c.ycsb.t.insert_one({"_id": 1})
        assert c.ycsb.t.find_one() == {"_id": 1}
        st = c.admin.command("connectionStatus")["authInfo"]
        assert st["authenticatedUsers"] == [{"user": "root", "db": "admin"}]
    with sock_client(path) as c:
        with pytest.raises(OperationFailure) as ei:
            c.ycsb.t.find_one()
        assert ei.value.code == 13


def test_audit_names_the_socket(fresh):
    audit = os.path.join(fresh.root, "audit.json")
    fresh.start(["--auditDestination", "file", "--auditFormat", "JSON", "--auditPath", audit,
                 "--auth"])
    path = fresh.socket_path()
    with sock_client(path) as c:
        c.admin.command("createUser", "u", pwd="pw-u", roles=["root"])
    deadline = time.time() + 10
    events = []
    while time.time() < deadline:
        with open(audit) as f:
            events = [json.loads(line) for line in f if line.strip()]
        if any(e["atype"] == "createUser" for e in events):
            break
        time.sleep(0.05)
    ev = [e for e in events if e["atype"] == "createUser"]
    assert ev, events
    assert ev[0]["local"] == {"unix": path}
    assert ev[0]["remote"] == {"unix": path}


def mongosh_path():
    for p in (os.path.join(REPO, "tests", "integration", "node", "node_modules", ".bin",
                           "mongosh"), shutil.which("mongosh")):
        if p and os.path.exists(p):
            return p
    return None


def test_mongosh_through_the_socket(fresh, tmp_path):
    sh = mongosh_path()
    if sh is None:
        pytest.skip("mongosh not installed (npm ci in tests/integration/node)")
    fresh.start()
    env = dict(os.environ, HOME=str(tmp_path), MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING="1")
    script = ('db.pets.insertOne({name: "Rex"}); '
              'print(JSON.stringify(db.pets.findOne({}, {_id: 0})))')
    r = subprocess.run([sh, sock_uri(fresh.socket_path()) + "test", "--quiet", "--norc",
                        "--eval", script], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert '{"name":"Rex"}' in r.stdout, r.stdout


def test_replica_set_members_talk_tcp(tmp_path):
    """Each member has its socket; the set's config and the members'
    replication use TCP host:port, and a client on a member's socket sees
    the same set."""
    launcher = os.path.join(REPO, "scripts", "sable-cluster")
    base = sharded.base_port(2)
    d = str(tmp_path / "c")
    prefix = tempfile.mkdtemp(prefix="uds-rs-")
    env = dict(os.environ, SABLED=sabled_path())

    def cluster(*args):
        r = subprocess.run(["/usr/bin/python3", launcher] + list(args), capture_output=True,
                           text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr

    try:
        cluster("start", "--replset", "rs0", "--members", "2", "--dir", d, "--port", str(base),
                "--sabled-arg=--unixSocketPrefix", "--sabled-arg=" + prefix)
        paths = [os.path.join(prefix, "mongodb-%d.sock" % (base + i)) for i in range(2)]
        assert all(is_socket(p) for p in paths)
        with sock_client(paths[0], directConnection=True) as c:
            hello = c.admin.command("hello")
            assert sorted(hello["hosts"]) == ["127.0.0.1:%d" % (base + i) for i in range(2)]
        uri = "mongodb://127.0.0.1:%d,127.0.0.1:%d/?replicaSet=rs0" % (base, base + 1)
        with pymongo.MongoClient(uri, serverSelectionTimeoutMS=20000) as c:
            c.test.t.with_options(write_concern=pymongo.WriteConcern(w=2, wtimeout=20000)) \
                .insert_one({"_id": 1})
        # both members have it: read each one through its own socket
        for p in paths:
            with sock_client(p, directConnection=True,
                             readPreference="secondaryPreferred") as c:
                assert c.test.t.find_one({"_id": 1}) == {"_id": 1}
        cluster("kill", "1", "--dir", d)
        assert is_socket(paths[1])  # kill -9 leaves it; stop removes it
        cluster("stop", "--dir", d)
        assert not any(os.path.exists(p) for p in paths)
    finally:
        subprocess.run(["/usr/bin/python3", launcher, "stop", "--dir", d], capture_output=True,
                       env=env, timeout=120)
        shutil.rmtree(prefix, ignore_errors=True)
