"""
How an operator reaches the server and watches a long run, for sable-dump,
sable-restore, sable-export and sable-import: credentials in the connection
string and as -u/-p/--authenticationDatabase against a server started with
--auth (and a clear message for a wrong password), TLS with a CA file against
a requireTLS server, --fieldFile for CSV export, and the progress line
(documents, bytes, share done, rate, time left).
"""

import os
import re
import subprocess

import pytest

from sabled import Sabled
from test_tls import certs, start  # noqa: F401 - certs is a fixture
from tools_util import ok, run_tool, tool_path

pytestmark = pytest.mark.skipif(not os.path.exists(tool_path("sable-dump")),
                                reason="sable-dump not built")


def test_auth_uri_and_flags(tmp_path):
    s = Sabled()
    try:
        s.start(["--auth"])
        c = s.client()
        c.admin.command("createUser", "op", pwd="pw", roles=["root"])  # localhost exception
        c.close()
        c = s.client(username="op", password="pw", authSource="admin")
        c.shop.orders.insert_many([{"_id": i, "x": i} for i in range(50)])
        uri = "mongodb://op:pw@127.0.0.1:%d/?authSource=admin" % s.port
        ok(run_tool("sable-dump", "--uri", uri, "-d", "shop", "-o", tmp_path / "d"))
        ok(run_tool("sable-restore", "--port", s.port, "-u", "op", "-p", "pw",
                    "--authenticationDatabase", "admin", "--nsFrom", "shop.$c$",
                    "--nsTo", "copy.$c$", tmp_path / "d"))
        assert c.copy.orders.count_documents({}) == 50
        ok(run_tool("sable-export", "--uri", uri, "-d", "copy", "-c", "orders",
                    "-o", tmp_path / "o.json"))
        ok(run_tool("sable-import", "--port", s.port, "-u", "op", "-p", "pw",
                    "--authenticationDatabase", "admin", "-d", "copy", "-c", "again",
                    tmp_path / "o.json"))
        assert c.copy.again.count_documents({}) == 50
        p = run_tool("sable-dump", "--uri", "mongodb://op:wrong@127.0.0.1:%d/" % s.port,
                     "-o", tmp_path / "x")
        assert p.returncode != 0 and b"uthentication failed" in p.stderr
        p = run_tool("sable-dump", "--port", s.port, "-o", tmp_path / "y")  # no credentials
        assert p.returncode != 0 and b"requires authentication" in p.stderr
        c.close()
    finally:
        s.cleanup()


def test_tls_connection(certs, tmp_path):  # noqa: F811
    s = start(certs, "requireTLS")
    try:
        ca = os.path.join(certs, "ca.pem")
        tls = ["--host", "127.0.0.1", "--port", s.port, "--tls", "--tlsCAFile", ca]
        ok(run_tool("sable-import", *tls, "-d", "t", "-c", "c", "--type", "csv",
                    "--headerline", input=b"_id,v\n1,a\n2,b\n"))
        p = ok(run_tool("sable-dump", *tls, "--archive"))
        ok(run_tool("sable-restore", *tls, "--archive", "--nsFrom", "t.c", "--nsTo", "t.d",
                    input=p.stdout))
        r = ok(run_tool("sable-export", *tls, "-d", "t", "-c", "d", "--type", "csv",
                        "--fields", "_id,v"))
        assert r.stdout.decode().split() == ["_id,v", "1,a", "2,b"]
        uri = "mongodb://127.0.0.1:%d/?tls=true&tlsCAFile=%s" % (s.port, ca)
        ok(run_tool("sable-dump", "--uri", uri, "-o", tmp_path / "d"))
        # without TLS the server cannot be reached, and the tool says it cannot connect
        p = run_tool("sable-dump", "--uri", "mongodb://127.0.0.1:%d/?serverSelectionTimeoutMS="
                     "1000" % s.port, "-o", tmp_path / "x")
        assert p.returncode != 0 and b"cannot connect" in p.stderr
    finally:
        s.cleanup()


def test_field_file_and_progress_lines(tmp_path):
    s = Sabled()
    try:
        s.start()
        c = s.client()
        c.p.big.insert_many([{"_id": i, "a": i, "b": "x" * 100, "c": {"d": i}}
                             for i in range(20000)])
        env = dict(os.environ, SABLE_TOOLS_PROGRESS_SECS="0.001")

        def run(name, *args):
            return ok(subprocess.run([tool_path(name)] + [str(a) for a in args],
                                     capture_output=True, env=env, timeout=120))
        p = run("sable-dump", "--port", s.port, "-d", "p", "-o", tmp_path / "d")
        assert re.search(rb"\[p\.big\] \d+/20000 documents \(\d+\.\d%\) .* MB/s .* docs/s .*s left",
                         p.stderr), p.stderr[-500:]
        p = run("sable-restore", "--port", s.port, "--nsFrom", "p.big", "--nsTo", "p.copy",
                tmp_path / "d")
        assert re.search(rb"\[p\.copy\] [\d.]+/[\d.]+ MB \(\d+\.\d%\)  \d+ documents .*s left",
                         p.stderr), p.stderr[-500:]
        assert c.p.copy.count_documents({}) == 20000
        ff = tmp_path / "fields.txt"
        ff.write_text("_id\nc.d\n")
        p = run("sable-export", "--port", s.port, "-d", "p", "-c", "big", "--type", "csv",
                "--fieldFile", ff, "-o", tmp_path / "out.csv")
        assert re.search(rb"\[p\.big\] \d+/20000 documents", p.stderr), p.stderr[-500:]
        lines = (tmp_path / "out.csv").read_text().splitlines()
        assert lines[0] == "_id,c.d" and lines[1:3] == ["0,0", "1,1"] and len(lines) == 20001
        # sable-import: the input file's bytes, its share and the time left
        p = run("sable-import", "--port", s.port, "-d", "p", "-c", "imp", "--type", "csv",
                "--headerline", tmp_path / "out.csv")
        assert re.search(rb"\[p\.imp\] [\d.]+/[\d.]+ MB \(\d+\.\d%\)  \d+ documents .* docs/s .*s left",
                         p.stderr), p.stderr[-500:]
        assert c.p.imp.count_documents({}) == 20000
        # sable-import --fieldFile names the columns of a file without a header line
        (tmp_path / "nohead.csv").write_text("7,8\n9,10\n")
        run("sable-import", "--port", s.port, "-d", "p", "-c", "ff", "--type", "csv",
            "--fieldFile", ff, tmp_path / "nohead.csv")
        assert list(c.p.ff.find({}, sort=[("_id", 1)])) == [{"_id": 7, "c": {"d": 8}},
                                                             {"_id": 9, "c": {"d": 10}}]
        # sable-backup: the files' bytes, files copied, rate and time left
        p = run("sable-backup", "--port", s.port, "--out", tmp_path / "bk", "--noFsync")
        assert re.search(rb"\[full backup\] [\d.]+/[\d.]+ MB \(\d+\.\d%\)  \d+ files  "
                         rb"[\d.]+ MB/s  \d+ files/s  \d+s left", p.stderr), p.stderr[-500:]
        p = run_tool("sable-export", "--port", s.port, "-d", "p", "-c", "big", "--type", "csv",
                     "--fieldFile", tmp_path / "missing.txt")
        assert p.returncode != 0 and b"cannot open --fieldFile" in p.stderr
        # a write that does not reach the file fails the run (files are written by a thread)
        for args in (["sable-export", "-d", "p", "-c", "big", "-o", "/dev/full"],
                     ["sable-dump", "-d", "p", "--archive=/dev/full"],
                     ["sable-dump", "-d", "p", "--archive=/dev/full", "--gzip"]):
            p = run_tool(args[0], "--port", s.port, *args[1:])
            assert p.returncode != 0, args
            if "--gzip" in args:  # small once compressed: zlib fails at the close
                assert b"closing /dev/full" in p.stderr, p.stderr
            else:
                assert p.stderr.count(b"writing /dev/full: No space left on device") == 1, p.stderr
    finally:
        s.cleanup()
