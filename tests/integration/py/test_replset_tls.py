"""
TLS between replica set members, as mongod has it: with --tlsMode preferTLS
or requireTLS a member's own connections to the others (heartbeats, initial
sync, the oplog fetcher, position reports) use TLS too, presenting
--tlsClusterFile (else --tlsCertificateKeyFile) and checking the member
dialed against --tlsCAFile and its address; those who connect are checked
against --tlsClusterCAFile (else --tlsCAFile).  With a keyFile members still
authenticate as __system over the TLS connection.

Certificates are made with the openssl CLI at test time: a CA with a server
certificate (SAN 127.0.0.1, localhost), one that names another host, and a
client certificate; a second "cluster" CA with a member certificate; and a
rogue CA nobody trusts.
Without TLS on member connections none of these sets can form: requireTLS
members drop a plaintext peer.
"""
import os
import shutil
import subprocess
import tempfile
import time

import pymongo
import pytest
from pymongo.errors import PyMongoError
from pymongo.write_concern import WriteConcern

from sabled import Sabled
from test_tls import wait_port

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI missing")

SETTINGS = {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}
KEY = "c2FibGUtdGxzLXRlc3Qta2V5LWZvci1tZW1iZXJz"


def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def _ca(d, name):
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout",
             name + ".key", "-out", name + ".pem", "-subj", "/CN=Sable Test " + name, cwd=d)


def _cert(d, name, ca, cn, ext="san.ext", password=None):
    """name.pem: a certificate signed by ca (SAN: ext's, 127.0.0.1 and localhost
    by default) and its key (encrypted with password, if given)."""
    key = ["-passout", "pass:" + password] if password else ["-nodes"]
    _openssl("req", "-newkey", "rsa:2048", *key, "-keyout", name + ".key", "-out",
             name + ".csr", "-subj", "/O=Sable/CN=" + cn, cwd=d)
    _openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
             "-CAcreateserial", "-days", "2", "-out", name + ".crt", "-extfile", ext, cwd=d)
    with open(os.path.join(d, name + ".pem"), "w") as out:
        for part in (name + ".crt", name + ".key"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())


@pytest.fixture(scope="module")
def certs():
    d = tempfile.mkdtemp(prefix="sable-rstls-")
    try:
        with open(os.path.join(d, "san.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        for ca in ("ca", "cluster-ca", "rogue-ca"):
            _ca(d, ca)
        _cert(d, "server", "ca", "127.0.0.1")
        _cert(d, "client", "ca", "sable-client")
        _cert(d, "member", "cluster-ca", "127.0.0.1")
        _cert(d, "member-enc", "ca", "127.0.0.1", password="s3cret")
        _cert(d, "rogue", "rogue-ca", "127.0.0.1")
        with open(os.path.join(d, "elsewhere.ext"), "w") as f:
            f.write("subjectAltName=DNS:elsewhere.example\n")
        _cert(d, "elsewhere", "ca", "elsewhere.example", ext="elsewhere.ext")
        with open(os.path.join(d, "key"), "w") as f:
            f.write(KEY + "\n")
        os.chmod(os.path.join(d, "key"), 0o600)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def member_args(certs, mode="requireTLS", cert="server", cluster=None, cluster_ca=None,
                extra=()):
    args = list(extra) + ["--replSet", "rs0", "--oplogSizeMB", "16", "--keyFile", os.path.join(certs, "key"),
            "--tlsMode", mode, "--tlsCertificateKeyFile", os.path.join(certs, cert + ".pem"),
            "--tlsCAFile", os.path.join(certs, "ca.pem")]
    if cluster is not None:
        args += ["--tlsClusterFile", os.path.join(certs, cluster + ".pem")]
    if cluster_ca is not None:
        args += ["--tlsClusterCAFile", os.path.join(certs, cluster_ca + ".pem")]
    return args


def start(args):
    s = Sabled()
    try:
        # wait=False: the readiness probe speaks plaintext, which requireTLS refuses
        s.start(args, wait=False)
        wait_port(s)
    except BaseException:
        s.cleanup()
        raise
    return s


def client(certs, m, **kw):
    """A TLS client of member m with the root user (the localhost exception
    creates it on the first member)."""
    kw.setdefault("directConnection", True)
    kw.setdefault("serverSelectionTimeoutMS", 10000)
    return pymongo.MongoClient("127.0.0.1", m.port, tls=True,
                               tlsCAFile=os.path.join(certs, "ca.pem"),
                               tlsCertificateKeyFile=os.path.join(certs, "client.pem"), **kw)


def admin_client(certs, m, **kw):
    return client(certs, m, username="admin", password="pw", authSource="admin", **kw)


def wait_for(fn, timeout=60, what="condition"):
    end = time.time() + timeout
    while True:
        try:
            v = fn()
            if v:
                return v
        except PyMongoError:
            pass
        assert time.time() < end, "timed out waiting for " + what
        time.sleep(0.25)


def host(m):
    return "127.0.0.1:%d" % m.port


def initiate(certs, members):
    """Initiate rs0 on members[0], create the root user there; the primary
    (members[0]: the highest priority, so it takes over if another won)."""
    cfg = {"_id": "rs0", "settings": SETTINGS,
           "members": [{"_id": i, "host": host(m), "priority": 2 if i == 0 else 1}
                       for i, m in enumerate(members)]}
    with client(certs, members[0]) as c:
        c.admin.command("replSetInitiate", cfg)
        wait_for(lambda: c.admin.command("hello").get("isWritablePrimary"), what="a primary")
        c.admin.command("createUser", "admin", pwd="pw", roles=["root"])
    return members[0]


def states(certs, m):
    with admin_client(certs, m) as c:
        st = c.admin.command("replSetGetStatus")
    return {x["name"]: x for x in st["members"]}


def healthy_set(certs, members):
    def ok():
        st = states(certs, members[0])
        names = sorted(x["stateStr"] for x in st.values())
        return names == ["PRIMARY", "SECONDARY", "SECONDARY"]
    wait_for(ok, what="PRIMARY, SECONDARY, SECONDARY")


def has_doc(certs, m, doc_id):
    with admin_client(certs, m) as c:
        return c.get_database("t", read_preference=pymongo.ReadPreference.SECONDARY_PREFERRED)\
                .c.find_one({"_id": doc_id}) is not None


@pytest.fixture
def members():
    ms = []
    yield ms
    for m in ms:
        m.cleanup()


def test_require_tls_set_forms_replicates_and_catches_up(certs, members):
    members += [start(member_args(certs)) for _ in range(3)]
    initiate(certs, members)
    healthy_set(certs, members)
    uri = "mongodb://admin:pw@%s/?replicaSet=rs0&authSource=admin" % ",".join(
        host(m) for m in members)
    with pymongo.MongoClient(uri, tls=True, tlsCAFile=os.path.join(certs, "ca.pem"),
                             tlsCertificateKeyFile=os.path.join(certs, "client.pem"),
                             serverSelectionTimeoutMS=20000) as c:
        coll = c.t.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=30000))
        coll.insert_one({"_id": 1})
        for m in members:
            wait_for(lambda: has_doc(certs, m, 1), what="doc 1 on every member")
        # a secondary stopped misses writes, then catches up over TLS
        lagger = members[2]
        lagger.stop()
        c.t.get_collection("c", write_concern=WriteConcern(w=2, wtimeout=30000)).insert_many(
            [{"_id": i} for i in range(2, 102)])
        lagger.start(lagger.extra_args, port=lagger.port, wait=False)
        wait_port(lagger)
        wait_for(lambda: has_doc(certs, lagger, 101), what="the restarted member to catch up")
        # (requireTLS members drop plaintext: all of this went over TLS) and
        # no handshake of the fetchers and reporters failed on the way
        text = "".join(m.log_text() for m in members)
        assert "TLS handshake failed on a connection to another server" not in text


def member_state(certs, primary, m):
    return states(certs, primary).get(host(m), {})


def test_cluster_file_is_what_a_member_presents(certs, members):
    # Those who connect are checked against the cluster CA (tlsClusterCAFile):
    # members 0 and 1 present their cluster-CA certificate (tlsClusterFile) and
    # form a majority; member 2 has none, presents its server certificate
    # (signed by the other CA), and stays out.
    good = dict(cluster="member", cluster_ca="cluster-ca")
    extra = ["--tlsAllowConnectionsWithoutCertificates"]  # the test's client has none
    members += [start(member_args(certs, **good) + extra) for _ in range(2)]
    members.append(start(member_args(certs, cluster_ca="cluster-ca") + extra))
    cfg = {"_id": "rs0", "settings": SETTINGS,
           "members": [{"_id": i, "host": host(m)} for i, m in enumerate(members)]}

    def plain_tls(m, **kw):
        return pymongo.MongoClient("127.0.0.1", m.port, tls=True, directConnection=True,
                                   tlsCAFile=os.path.join(certs, "ca.pem"),
                                   serverSelectionTimeoutMS=10000, **kw)
    with plain_tls(members[0]) as c:
        c.admin.command("replSetInitiate", cfg)
        wait_for(lambda: c.admin.command("hello").get("isWritablePrimary"), what="a primary")
        c.admin.command("createUser", "admin", pwd="pw", roles=["root"])
    with plain_tls(members[0], username="admin", password="pw") as c:
        c.t.get_collection("c", write_concern=WriteConcern(w=2, wtimeout=30000)).insert_one(
            {"_id": 1})
        # member 2 cannot fetch the config; it says so once per member, and
        # the others log the certificate they refused
        wait_for(lambda: members[2].log_text().count("Could not fetch the config") == 2,
                 what="member 2 to log its refused connections")
        assert "certificate verify failed" in members[0].log_text()
        st = {x["name"]: x for x in c.admin.command("replSetGetStatus")["members"]}
        assert st[host(members[1])]["stateStr"] == "SECONDARY"
        assert st[host(members[2])]["stateStr"] != "SECONDARY"
    with plain_tls(members[2]) as c:  # never got the config, nor the data
        hello = c.admin.command("hello")
        assert not hello.get("secondary") and not hello.get("isWritablePrimary")


def test_prefer_tls_set_and_a_rejected_member_is_down(certs, members):
    # member 2's certificate is signed by a CA the others do not trust: they
    # see it down, promptly, while the other two form the set
    members += [Sabled().start(member_args(certs, mode="preferTLS")) for _ in range(2)]
    members.append(Sabled().start(member_args(certs, mode="preferTLS", cert="rogue")))
    p = initiate(certs, members)

    def down():
        m = member_state(certs, p, members[2])
        return m.get("health") == 0 and m.get("stateStr") == "(not reachable/healthy)"
    wait_for(down, what="member 2 seen down")
    wait_for(lambda: member_state(certs, p, members[1]).get("stateStr") == "SECONDARY",
             what="member 1 SECONDARY")
    t0 = time.time()
    with admin_client(certs, p) as c:
        c.t.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=30000))\
            .insert_one({"_id": 1})
        c.admin.command("replSetGetStatus")
    assert time.time() - t0 < 10
    assert has_doc(certs, members[1], 1)
    assert all(m.is_running() for m in members)
    # the primary said once why it sees member 2 down
    lines = [l for l in p.log_text().splitlines()
             if "Member is in new state" in l and host(members[2]) in l]
    assert len(lines) == 1 and "not reachable" in lines[0], lines


def test_cluster_file_with_an_encrypted_key(certs, members):
    # --tlsClusterPassword opens the cluster file's key; without it the
    # member does not start (and asks no terminal for it)
    enc = ["--tlsClusterFile", os.path.join(certs, "member-enc.pem")]
    bad = Sabled()
    members.append(bad)
    bad.start(member_args(certs, mode="preferTLS", extra=enc), wait=False)
    assert bad.proc.wait(timeout=30) != 0
    assert "cannot read the cluster certificate and key" in bad.output()
    members.remove(bad)
    bad.cleanup()
    enc += ["--tlsClusterPassword", "s3cret"]
    members += [Sabled().start(member_args(certs, mode="requireTLS", extra=enc), wait=False)
                for _ in range(3)]
    for m in members:
        wait_port(m)
    initiate(certs, members)
    healthy_set(certs, members)
    with admin_client(certs, members[0]) as c:
        opts = c.admin.command("getCmdLineOpts")["parsed"]["net"]["tls"]
        assert opts["clusterPassword"] == "<password>"


def test_allow_tls_members_connect_in_plaintext(certs, members):
    # mongod's rule: with allowTLS a member's own connections stay plaintext,
    # so a certificate no one trusts does not matter between members
    members += [Sabled().start(member_args(certs, mode="allowTLS")) for _ in range(2)]
    members.append(Sabled().start(member_args(certs, mode="allowTLS", cert="rogue")))
    p = initiate(certs, members)
    wait_for(lambda: member_state(certs, p, members[2]).get("stateStr") == "SECONDARY",
             what="member 2 SECONDARY")


def test_allow_invalid_certificates_lets_a_rogue_member_in(certs, members):
    extra = ["--tlsAllowInvalidCertificates"]
    members += [Sabled().start(member_args(certs, mode="preferTLS", extra=extra))
                for _ in range(2)]
    members.append(Sabled().start(member_args(certs, mode="preferTLS", cert="rogue",
                                              extra=extra)))
    p = initiate(certs, members)
    wait_for(lambda: member_state(certs, p, members[2]).get("stateStr") == "SECONDARY",
             what="member 2 SECONDARY")


@pytest.mark.parametrize("allow", [False, True])
def test_member_certificate_must_name_its_host(certs, members, allow):
    # member 2's certificate is valid but names another host: the others
    # refuse it unless --tlsAllowInvalidHostnames
    extra = ["--tlsAllowInvalidHostnames"] if allow else []
    members += [Sabled().start(member_args(certs, mode="preferTLS", extra=extra))
                for _ in range(2)]
    members.append(Sabled().start(member_args(certs, mode="preferTLS", cert="elsewhere",
                                              extra=extra)))
    p = initiate(certs, members)
    want = "SECONDARY" if allow else "(not reachable/healthy)"
    wait_for(lambda: member_state(certs, p, members[2]).get("stateStr") == want,
             what="member 2 " + want)
    if not allow:
        assert "TLS handshake failed" in member_state(certs, p, members[2])["lastHeartbeatMessage"]


def test_sharded_cluster_over_tls(certs):
    # config server, two shards and the router, all requireTLS with a keyFile
    # (sable-cluster passes the options on and speaks TLS itself): a find
    # through the router reaches both shards, and a chunk migrates
    import sharded
    if not os.path.exists(sharded.ROUTER):
        pytest.skip("sable-router not built")
    tls = ["--tlsMode=requireTLS", "--tlsCertificateKeyFile=" + os.path.join(certs, "server.pem"),
           "--tlsCAFile=" + os.path.join(certs, "ca.pem")]
    with sharded.cluster("sable-shtls-", router_args=tls,
                         launcher_args=["--keyfile", os.path.join(certs, "key"), "--user",
                                        "admin", "--password", "pw"]
                         + ["--sabled-arg=" + a for a in tls]) as cl:
        with pymongo.MongoClient("127.0.0.1", cl["router"], tls=True,
                                 tlsCAFile=os.path.join(certs, "ca.pem"),
                                 tlsCertificateKeyFile=os.path.join(certs, "client.pem"),
                                 username="admin", password="pw",
                                 serverSelectionTimeoutMS=20000) as c:
            c.admin.command("enableSharding", "t")
            c.admin.command("shardCollection", "t.c", key={"_id": "hashed"})
            c.t.c.insert_many([{"_id": i} for i in range(200)])
            assert c.t.c.count_documents({}) == 200
            assert c.t.c.find_one({"_id": 7}) == {"_id": 7}
            assert sorted(d["_id"] for d in c.t.c.find({"_id": {"$lt": 5}})) == list(range(5))
            shards = {d["shard"] for d in c.config.chunks.find()}
            assert len(shards) == 2
            # a migration: the recipient shard copies the range from the donor
            c.admin.command("shardCollection", "t.r", key={"k": 1})
            c.t.r.insert_many([{"_id": i, "k": i} for i in range(100)])
            cfg = c.get_database("config", codec_options=sharded.STD)
            uuid = cfg.collections.find_one({"_id": "t.r"})["uuid"]
            owner = cfg.chunks.find_one({"uuid": uuid})["shard"]
            to = "shard1" if owner == "shard0" else "shard0"
            assert c.admin.command("moveChunk", "t.r", find={"k": 5}, to=to)["ok"] == 1
            assert {d["shard"] for d in cfg.chunks.find({"uuid": uuid})} == {to}
            assert c.t.r.count_documents({}) == 100
            assert c.t.r.find_one({"k": 42})["_id"] == 42
