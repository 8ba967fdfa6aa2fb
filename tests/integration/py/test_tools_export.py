"""
sable-export and sable-import against a real server: Extended JSON round
trips (canonical keeps every type byte for byte; relaxed keeps the values),
--jsonArray, CSV with typed columns, TSV with a header line, --query, --sort,
--skip, --limit, the upsert, merge and delete modes with --upsertFields, and
the errors on a missing file and on bad input.
"""

import datetime
import json
import os

import pytest
from bson import Code, Decimal128, Int64, ObjectId

from test_tools_dump import every_type_docs
from tools_util import ok, raw_docs, run_tool, tool_path

pytestmark = pytest.mark.skipif(not os.path.exists(tool_path("sable-export")),
                                reason="sable-export not built")


def p(server):
    return ["--port", server.port]


def test_canonical_json_roundtrip_is_exact(server, db, tmp_path):
    db.src.insert_many(every_type_docs())
    out = tmp_path / "all.json"
    ok(run_tool("sable-export", *p(server), "-d", db.name, "-c", "src", "--jsonFormat",
                "canonical", "-o", out))
    lines = out.read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(line) for line in lines)
    assert '"$numberLong":"-9223372036854775808"' in out.read_text()
    ok(run_tool("sable-import", *p(server), "-d", db.name, "-c", "dst", out))
    assert raw_docs(db.dst) == raw_docs(db.src)


def test_relaxed_json_and_json_array(server, db, tmp_path):
    docs = [{"_id": i, "n": i * 2, "s": "x%d" % i, "f": 0.5 + i, "d": datetime.datetime(2020, 1, 2),
             "o": ObjectId(), "sub": {"a": [1, {"b": None}]}} for i in range(300)]
    db.src.insert_many(docs)
    out = tmp_path / "r.json"
    ok(run_tool("sable-export", *p(server), "-d", db.name, "-c", "src", "-o", out))
    first = json.loads(out.read_text().splitlines()[0])
    assert first["n"] == 0 and first["d"] == {"$date": "2020-01-02T00:00:00Z"}
    ok(run_tool("sable-import", *p(server), "-d", db.name, "-c", "r", "--file", out))
    assert list(db.r.find().sort("_id")) == docs
    arr = tmp_path / "a.json"
    ok(run_tool("sable-export", *p(server), "-d", db.name, "-c", "src", "--jsonArray", "-o", arr))
    assert isinstance(json.loads(arr.read_text()), list)
    ok(run_tool("sable-import", *p(server), "-d", db.name, "-c", "a", "--jsonArray", arr))
    assert list(db.a.find().sort("_id")) == docs
    notarr = run_tool("sable-import", *p(server), "-d", db.name, "-c", "b", arr)
    assert notarr.returncode != 0 and b"--jsonArray" in notarr.stderr


def test_code_with_nul_export(server, db, tmp_path):
    # a code value holding a NUL byte is exported whole (\u0000: sbl_append_iter); reading it
    # back is libbson's JSON parser's, which still cuts it (docs/tools.md)
    db.src.insert_one({"_id": 1, "c": Code("a\x00b"), "w": Code("x\x00y", {"s": 1})})
    for fmt in ("canonical", "relaxed"):
        out = tmp_path / (fmt + ".json")
        ok(run_tool("sable-export", *p(server), "-d", db.name, "-c", "src", "--jsonFormat", fmt,
                    "-o", out))
        text = out.read_text()
        assert '"$code":"a\\u0000b"' in text and '"$code":"x\\u0000y"' in text, text


def test_query_sort_skip_limit(server, db, tmp_path):
    db.src.insert_many([{"_id": i, "k": i % 7} for i in range(100)])
    r = ok(run_tool("sable-export", *p(server), "-d", db.name, "-c", "src", "--query",
                    '{k: {$gte: 3}}', "--sort", '{_id: -1}', "--skip", 2, "--limit", 5))
    ids = [json.loads(line)["_id"] for line in r.stdout.decode().splitlines()]
    want = [d["_id"] for d in db.src.find({"k": {"$gte": 3}}).sort("_id", -1).skip(2).limit(5)]
    assert ids == want and len(ids) == 5


def test_csv_with_types_roundtrip(server, db, tmp_path):
    docs = [{"_id": i, "name": 'n,"%d"' % i, "age": i, "big": Int64(2 ** 40 + i),
             "score": i / 4, "ok": i % 2 == 0, "when": datetime.datetime(2021, 5, 6, 7, 8, 9, i * 1000),
             "price": Decimal128("%d.25" % i), "addr": {"city": "c%d" % i, "zip": 1000 + i}}
            for i in range(50)]
    db.src.insert_many(docs)
    fields = "_id,name,age,big,score,ok,when,price,addr.city,addr.zip"
    out = tmp_path / "x.csv"
    ok(run_tool("sable-export", *p(server), "-d", db.name, "-c", "src", "--type", "csv",
                "--fields", fields, "--noHeaderLine", "-o", out))
    assert out.read_text().splitlines()[1].startswith('1,"n,""1""",1,1099511627777,0.25,false,')
    typed = ("_id.int32(),name.string(),age.int32(),big.int64(),score.double(),ok.boolean(),"
             "when.date_go(2006-01-02T15:04:05.000Z),price.decimal(),addr.city.string(),"
             "addr.zip.int32()")
    ok(run_tool("sable-import", *p(server), "-d", db.name, "-c", "dst", "--type", "csv",
                "--columnsHaveTypes", "--fields", typed, out))
    got = list(db.dst.find().sort("_id"))
    for d in docs:
        d["price"] = Decimal128(str(d["price"].to_decimal()))
    assert got == docs
    # untyped: numbers become numbers, the rest strings
    hdr = tmp_path / "h.csv"
    ok(run_tool("sable-export", *p(server), "-d", db.name, "-c", "src", "--type", "csv",
                "--fields", "_id,name,score", "-o", hdr))
    ok(run_tool("sable-import", *p(server), "-d", db.name, "-c", "auto", "--type", "csv",
                "--headerline", hdr))
    assert db.auto.find_one({"_id": 3}) == {"_id": 3, "name": 'n,"3"', "score": 0.75}


def test_tsv_headerline_and_parse_grace(server, db, tmp_path):
    f = tmp_path / "t.tsv"
    f.write_text("_id.int32()\tv.int32()\tw.string()\n1\t10\ta b\n2\tnot a number\tc\n3\t30\t\n")
    ok(run_tool("sable-import", *p(server), "-d", db.name, "-c", "t", "--type", "tsv",
                "--headerline", "--columnsHaveTypes", "--ignoreBlanks", f))
    assert list(db.t.find().sort("_id")) == [{"_id": 1, "v": 10, "w": "a b"},
                                            {"_id": 2, "v": "not a number", "w": "c"},
                                            {"_id": 3, "v": 30}]
    ok(run_tool("sable-import", *p(server), "-d", db.name, "-c", "t2", "--type", "tsv",
                "--headerline", "--columnsHaveTypes", "--parseGrace", "skipRow", f))
    assert sorted(d["_id"] for d in db.t2.find()) == [1, 3]
    stop = run_tool("sable-import", *p(server), "-d", db.name, "-c", "t3", "--type", "tsv",
                    "--headerline", "--columnsHaveTypes", "--parseGrace", "stop", f)
    assert stop.returncode != 0 and b"'not a number' is not a valid int32" in stop.stderr


def test_modes_upsert_merge_delete(server, db, tmp_path):
    db.c.insert_many([{"_id": 1, "k": "a", "x": 1, "keep": True},
                      {"_id": 2, "k": "b", "x": 2, "keep": True}])
    up = tmp_path / "up.json"
    up.write_text('{"_id": 1, "k": "a", "x": 10}\n{"_id": 3, "k": "c", "x": 30}\n')
    ok(run_tool("sable-import", *p(server), "-d", db.name, "-c", "c", "--mode", "upsert", up))
    assert list(db.c.find().sort("_id")) == [{"_id": 1, "k": "a", "x": 10},
                                            {"_id": 2, "k": "b", "x": 2, "keep": True},
                                            {"_id": 3, "k": "c", "x": 30}]
    merge = tmp_path / "merge.json"
    merge.write_text('{"_id": 99, "k": "b", "y": 5}\n{"_id": 4, "k": "d", "y": 4}\n')
    ok(run_tool("sable-import", *p(server), "-d", db.name, "-c", "c", "--mode", "merge",
                "--upsertFields", "k", merge))
    assert db.c.find_one({"k": "b"}) == {"_id": 2, "k": "b", "x": 2, "keep": True, "y": 5}
    assert db.c.find_one({"k": "d"}) == {"_id": 4, "k": "d", "y": 4}
    dele = tmp_path / "del.json"
    dele.write_text('{"k": "a"}\n{"k": "zzz"}\n')
    ok(run_tool("sable-import", *p(server), "-d", db.name, "-c", "c", "--mode", "delete",
                "--upsertFields", "k", dele))
    assert sorted(d["k"] for d in db.c.find()) == ["b", "c", "d"]
    # insert mode: duplicates are reported, counted, and make the exit status non-zero
    r = run_tool("sable-import", *p(server), "-d", db.name, "-c", "c", up)
    assert r.returncode != 0 and b"duplicate key" in r.stderr
    assert b"1 document(s) imported successfully. 1 document(s) failed" in r.stderr


def test_import_errors(server, db, tmp_path):
    r = run_tool("sable-import", *p(server), "-d", db.name, "-c", "x", tmp_path / "missing.json")
    assert r.returncode != 0 and b"cannot open" in r.stderr and b"No such file" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"_id": 1}\n{"_id": 2, "a": }\n')
    r = run_tool("sable-import", *p(server), "-d", db.name, "-c", "x", bad)
    assert r.returncode != 0 and b"line 2" in r.stderr
    r = run_tool("sable-export", *p(server), "-d", db.name, "-c", "x", "--type", "csv")
    assert r.returncode != 0 and b"--fields" in r.stderr
    r = run_tool("sable-import", "--uri", "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=300",
                 "-d", "a", "-c", "b", bad)
    assert r.returncode != 0 and b"cannot connect" in r.stderr


def test_import_duplicates_stop_on_error_and_write_concern(server, db, tmp_path):
    f = tmp_path / "d.json"
    f.write_text("".join('{"_id": %d}\n' % i for i in (1, 2, 2, 3, 4)))
    r = run_tool("sable-import", *p(server), "-d", db.name, "-c", "dup", f)
    assert r.returncode != 0 and b"4 document(s) imported successfully. 1 document(s) failed" \
        in r.stderr and b"duplicate key" in r.stderr
    assert db.dup.count_documents({}) == 4
    # --stopOnError: inserts in order, nothing after the first failure
    r = run_tool("sable-import", *p(server), "-d", db.name, "-c", "dup2", "--stopOnError", f)
    assert r.returncode != 0 and b"--stopOnError" in r.stderr
    assert sorted(d["_id"] for d in db.dup2.find()) == [1, 2]
    # --writeConcern reaches the server: a standalone cannot give w: 3
    ok(run_tool("sable-import", *p(server), "-d", db.name, "-c", "wc", "--writeConcern",
                "{w: 1, j: true}", tmp_path / "d.json", "--mode", "upsert"))
    assert db.wc.count_documents({}) == 4
    r = run_tool("sable-import", *p(server), "-d", db.name, "-c", "wc3", "--writeConcern", "{w: 3}", f)
    assert r.returncode != 0 and b"'w' > 1" in r.stderr, r.stderr[-500:]
