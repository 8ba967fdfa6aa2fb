"""
test_tls.py: TLS through pymongo against sabled --tlsMode ...

A test CA, a server certificate (CN/SAN 127.0.0.1 and localhost) and a
client certificate are made with the openssl CLI in a temporary directory at
test time.  What users rely on: tls=true with tlsCAFile works (CRUD and
SCRAM auth over TLS); requireTLS refuses plaintext; allowTLS and preferTLS
accept both; with tlsCAFile on the server a client certificate is required
unless tlsAllowConnectionsWithoutCertificates; a bad key file stops start-up
with an error; a client speaking garbage after the TLS byte is dropped while
the server keeps serving.
"""

import os
import shutil
import socket
import subprocess
import tempfile

import pymongo
import pytest
from pymongo.errors import OperationFailure, ServerSelectionTimeoutError

import wire
from sabled import Sabled, run_sabled

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI missing")


def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs():
    d = tempfile.mkdtemp(prefix="sable-tls-")
    try:
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                 "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=Sable Test CA", cwd=d)
        with open(os.path.join(d, "san.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        for name, cn in (("server", "127.0.0.1"), ("client", "sable-client")):
            _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key",
                     "-out", name + ".csr", "-subj", "/CN=" + cn, cwd=d)
            extra = ["-extfile", "san.ext"] if name == "server" else []
            _openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                     "-CAcreateserial", "-days", "2", "-out", name + ".crt", *extra, cwd=d)
            with open(os.path.join(d, name + ".pem"), "w") as out:
                for part in (name + ".crt", name + ".key"):
                    with open(os.path.join(d, part)) as f:
                        out.write(f.read())
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def tls_client(server, certs, **kw):
    return pymongo.MongoClient("127.0.0.1", server.port, tls=True,
                               tlsCAFile=os.path.join(certs, "ca.pem"),
                               directConnection=True, serverSelectionTimeoutMS=5000, **kw)


def plain_client(server):
    return pymongo.MongoClient("127.0.0.1", server.port, directConnection=True,
                               serverSelectionTimeoutMS=3000)


def start(certs, mode, extra=()):
    s = Sabled()
    # wait=False: sabled.py's readiness probe speaks plaintext, which requireTLS refuses.
    s.start(["--tlsMode", mode, "--tlsCertificateKeyFile", os.path.join(certs, "server.pem")]
            + list(extra), wait=(mode != "requireTLS"))
    if mode == "requireTLS":
        wait_port(s)
    return s


def wait_port(s, timeout=30):
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if s.proc.poll() is not None:
            raise AssertionError("sabled exited: " + s.output()[-2000:])
        try:
            socket.create_connection(("127.0.0.1", s.port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("sabled did not listen")


def test_require_tls(certs):
    s = start(certs, "requireTLS")
    try:
        c = tls_client(s, certs)
        c.t.c.insert_one({"_id": 1, "x": "over tls"})
        assert c.t.c.find_one({"_id": 1})["x"] == "over tls"
        # large reply (many TLS records)
        c.t.big.insert_many([{"_id": i, "pad": "x" * 1000} for i in range(3000)])
        assert len(list(c.t.big.find())) == 3000
        c.close()
        p = plain_client(s)
        with pytest.raises(ServerSelectionTimeoutError):
            p.admin.command("ping")
        p.close()
        assert "requires TLS" in s.log_text()
        # Garbage after a TLS record byte: that connection is dropped, others are served.
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as raw:
            raw.sendall(b"\x16\x03\x01\x00\x05hello-not-tls" * 4)
            raw.settimeout(5)
            try:
                while raw.recv(4096):
                    pass
            except (ConnectionResetError, socket.timeout):
                pass
        c = tls_client(s, certs)
        assert c.admin.command("ping")["ok"] == 1
        c.close()
    finally:
        s.cleanup()


@pytest.mark.parametrize("mode", ["allowTLS", "preferTLS"])
def test_allow_and_prefer_accept_both(certs, mode):
    s = start(certs, mode)
    try:
        c = tls_client(s, certs)
        c.t.c.insert_one({"_id": 1})
        p = plain_client(s)
        assert p.t.c.find_one() == {"_id": 1}
        with wire.connect(s.port) as raw:
            assert wire.command(raw, {"ping": 1})["ok"] == 1
        c.close()
        p.close()
    finally:
        s.cleanup()


def test_disabled_refuses_tls(certs):
    s = Sabled()
    try:
        s.start(["--tlsMode", "disabled"])
        c = tls_client(s, certs)
        with pytest.raises(ServerSelectionTimeoutError):
            c.admin.command("ping")
        c.close()
        p = plain_client(s)
        assert p.admin.command("ping")["ok"] == 1
        p.close()
    finally:
        s.cleanup()


def test_auth_over_tls(certs):
    s = start(certs, "requireTLS", ["--auth"])
    try:
        c = tls_client(s, certs)
        c.admin.command("createUser", "u", pwd="p", roles=["root"])  # localhost exception
        c.close()
        for mech in ("SCRAM-SHA-1", "SCRAM-SHA-256"):
            url = ("mongodb://u:p@127.0.0.1:%d/ycsb?authSource=admin&tls=true&tlsCAFile=%s"
                   "&authMechanism=%s" % (s.port, os.path.join(certs, "ca.pem"), mech))
            c = pymongo.MongoClient(url, directConnection=True, serverSelectionTimeoutMS=5000)
            c.ycsb.usertable.insert_one({"m": mech})
            c.close()
        url = ("mongodb://u:wrong@127.0.0.1:%d/ycsb?authSource=admin&tls=true&tlsCAFile=%s"
               % (s.port, os.path.join(certs, "ca.pem")))
        c = pymongo.MongoClient(url, directConnection=True, serverSelectionTimeoutMS=5000)
        with pytest.raises(OperationFailure) as ei:
            c.ycsb.usertable.find_one()
        assert ei.value.code == 18
        c.close()
    finally:
        s.cleanup()


def test_client_certificates(certs):
    ca = os.path.join(certs, "ca.pem")
    s = start(certs, "requireTLS", ["--tlsCAFile", ca])
    try:
        c = tls_client(s, certs, tlsCertificateKeyFile=os.path.join(certs, "client.pem"))
        assert c.admin.command("ping")["ok"] == 1
        c.close()
        c = tls_client(s, certs)  # no client certificate
        with pytest.raises(ServerSelectionTimeoutError):
            c.admin.command("ping")
        c.close()
    finally:
        s.cleanup()
    s = start(certs, "requireTLS", ["--tlsCAFile", ca, "--tlsAllowConnectionsWithoutCertificates"])
    try:
        c = tls_client(s, certs)
        assert c.admin.command("ping")["ok"] == 1
        c.close()
    finally:
        s.cleanup()


def test_yaml_tls_options(certs, tmp_path):
    cfg = tmp_path / "sabled.yaml"
    cfg.write_text("net:\n  tls:\n    mode: allowTLS\n    certificateKeyFile: %s\n"
                   % os.path.join(certs, "server.pem"))
    with Sabled() as s:
        s.start(["--config", str(cfg)])
        c = tls_client(s, certs)
        assert c.admin.command("ping")["ok"] == 1
        opts = c.admin.command("getCmdLineOpts")["parsed"]
        assert opts["net"]["tls"]["mode"] == "allowTLS"
        c.close()


def test_bad_tls_options(certs, tmp_path):
    r = run_sabled(["--tlsMode", "requireTLS", "--dbpath", str(tmp_path)])
    assert r.returncode != 0 and "tlsCertificateKeyFile" in r.stderr
    r = run_sabled(["--tlsMode", "sometimes", "--dbpath", str(tmp_path)])
    assert r.returncode != 0 and "tlsMode" in r.stderr
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    r = run_sabled(["--tlsMode", "requireTLS", "--tlsCertificateKeyFile", str(bad),
                    "--dbpath", str(tmp_path), "--port", "0"])
    assert r.returncode != 0 and "certificate" in r.stderr


def test_tls_on_the_unix_socket(certs):
    """The Unix-domain socket's clients follow the TLS mode as TCP's do."""
    import urllib.parse
    s = start(certs, "requireTLS")
    try:
        uri = "mongodb://%s/" % urllib.parse.quote_plus(s.socket_path())
        c = pymongo.MongoClient(uri, tls=True, tlsCAFile=os.path.join(certs, "ca.pem"),
                                tlsAllowInvalidHostnames=True, serverSelectionTimeoutMS=5000)
        assert c.admin.command("ping")["ok"] == 1
        c.close()
        p = pymongo.MongoClient(uri, serverSelectionTimeoutMS=3000)
        with pytest.raises(ServerSelectionTimeoutError):
            p.admin.command("ping")
        p.close()
    finally:
        s.cleanup()
