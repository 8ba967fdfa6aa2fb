"""
sable-dump and sable-restore against real servers: a database with every
BSON type, several index kinds, a view, a capped collection, users and roles
is dumped (directory, archive, gzip) and restored into a fresh server, and
the two are compared exactly (documents as raw bytes, options, indexes,
users with their credentials); the archive's bytes are checked against
mongo-tools' format specification on a small example; namespace filters and
renames, --drop, --noIndexRestore, --stopOnError; and the errors an operator
meets: a corrupt or truncated archive, a missing directory, a bad connection
string (--oplog: test_tools_oplog.py).
"""

import datetime
import os
import re
import struct
import time
import uuid

import bson
import bson.json_util
import pytest
from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp

from sabled import Sabled
from tools_util import (assert_same_db, ok, raw_docs, roles_of, run_tool, tool_path,
                        users_of)

pytestmark = pytest.mark.skipif(not os.path.exists(tool_path("sable-dump")),
                                reason="sable-dump not built")


def every_type_docs():
    return [
        {"_id": 1, "double": 1.5, "neg": -0.0, "inf": float("inf"), "str": "héllo",
         "doc": {"a": {"b": [1, {"c": None}]}}, "arr": [1, "two", 3.0, [4]],
         "bin": Binary(b"\x00\x01\xff", 0), "func": Binary(b"abc", 1),
         "uuid": Binary(uuid.UUID("12345678-1234-5678-1234-567812345678").bytes, 4),
         "md5": Binary(b"0123456789abcdef", 5), "user": Binary(b"x", 128),
         "oid": ObjectId("5f0c4d3b2a1908f7e6d5c4b3"), "t": True, "f": False,
         "date": datetime.datetime(2021, 3, 4, 5, 6, 7, 890000),
         "old": datetime.datetime(1901, 1, 1), "null": None,
         "re": Regex("^a.*b$", "im"), "code": Code("function() { return 1; }"),
         "scope": Code("function() { return x; }", {"x": 1}),
         "i32": 2147483647, "i64": Int64(-9223372036854775808), "ts": Timestamp(1600000000, 7),
         "dec": Decimal128("-1234.5678E-10"), "min": MinKey(), "max": MaxKey(),
         "empty": {}, "emptyarr": []},
        {"_id": "string id", "x": 1},
        {"_id": ObjectId("5f0c4d3b2a1908f7e6d5c4b4"), "x": 2},
        {"_id": {"compound": 1, "k": "v"}, "x": 3},
        {"_id": 2.5, "x": 4},
    ]


def populate(c, name="src"):
    db = c[name]
    db.all.insert_many(every_type_docs())
    people = []
    for i in range(2500):
        d = {"_id": i, "name": "p%d" % i, "age": i % 90, "tags": ["a", "b"],
             "at": datetime.datetime(2020, 1, 1) + datetime.timedelta(seconds=i)}
        if i % 3:
            d["email"] = "p%d@x" % i
        people.append(d)
    db.people.insert_many(people)
    db.people.create_index([("name", 1)])
    db.people.create_index([("age", -1), ("name", 1)], name="age_name")
    db.people.create_index([("name", "hashed")])
    db.people.create_index([("email", 1)], unique=True, sparse=True)
    db.people.create_index([("age", 1)], name="adults", partialFilterExpression={"age": {"$gte": 18}})
    db.people.create_index([("at", 1)], expireAfterSeconds=3600 * 24 * 365 * 50)
    db.people.create_index([("name", 1), ("tags", 1)], name="fr",
                           collation={"locale": "fr", "strength": 2})
    db.people.create_index([("name", "text"), ("email", "text")], weights={"name": 3},
                           default_language="english", name="search")
    db.places.insert_many([{"_id": i, "loc": {"type": "Point", "coordinates": [i % 90, i % 45]},
                            "xy": [i % 10, i % 7]} for i in range(50)])
    db.places.create_index([("loc", "2dsphere")])
    db.places.create_index([("xy", "2d")], min=-20, max=20, bits=20)
    db.create_collection("log", capped=True, size=65536, max=50)
    for i in range(80):  # past max: the oldest 30 are gone, order is insertion order
        db.log.insert_one({"_id": 1000 - i, "i": i})
    db.create_collection("adults", viewOn="people",
                         pipeline=[{"$match": {"age": {"$gte": 18}}}, {"$project": {"name": 1}}])
    db.create_collection("empty")
    db.empty.create_index([("z", 1)])
    db.command("createRole", "reader2", privileges=[
        {"resource": {"db": name, "collection": "people"}, "actions": ["find"]}], roles=[])
    db.command("createUser", "alice", pwd="secret1", roles=["reader2", "readWrite"])
    db.command("createUser", "bob", pwd="secret2", roles=[{"role": "read", "db": name}],
               customData={"team": "x"})


@pytest.fixture(scope="module")
def src():
    s = Sabled()
    try:
        s.start()
        c = s.client()
        populate(c)
        c.other.things.insert_many([{"_id": i} for i in range(10)])
        c.other.ab.insert_one({"_id": 1})
        c.other.abc.insert_one({"_id": 1})
        c.close()
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def dst():
    s = Sabled()
    try:
        s.start()
        yield s
    finally:
        s.cleanup()


def port(s):
    return ["--port", s.port]


def test_directory_roundtrip_every_type_index_view_capped_users(src, dst, tmp_path):
    out = tmp_path / "dump"
    ok(run_tool("sable-dump", *port(src), "--out", out))
    assert (out / "src" / "all.bson").exists()
    assert (out / "src" / "adults.metadata.json").exists()
    assert not (out / "src" / "adults.bson").exists()  # a view: metadata only
    assert (out / "admin" / "system.users.bson").exists()
    meta = bson.json_util.loads((out / "src" / "log.metadata.json").read_text())
    assert list(meta) == ["options", "indexes", "uuid", "collectionName", "type"]
    assert meta["options"]["capped"] is True and meta["collectionName"] == "log"
    assert meta["type"] == "collection" and re.fullmatch("[0-9a-f]{32}", meta["uuid"])
    view = bson.json_util.loads((out / "src" / "adults.metadata.json").read_text())
    assert view["type"] == "view" and view["options"]["viewOn"] == "people"
    p = ok(run_tool("sable-restore", *port(dst), out))
    assert b"2620 document(s) restored successfully. 0 document(s) failed" in p.stderr
    a, b = src.client(), dst.client()
    assert_same_db(a, b, "src")
    assert_same_db(a, b, "other")
    for name in ("src", "other"):  # the check: dbHash equal after the round trip
        ha, hb = a[name].command("dbHash"), b[name].command("dbHash")
        assert ha["collections"] == hb["collections"] and ha["md5"] == hb["md5"], name
    assert users_of(a, "src") == users_of(b, "src")
    assert roles_of(a, "src") == roles_of(b, "src")
    assert b.src.adults.count_documents({}) == a.src.adults.count_documents({})
    # a restored user authenticates with its old password
    c = dst.client(username="alice", password="secret1", authSource="src")
    assert c.src.command("connectionStatus")["authInfo"]["authenticatedUsers"][0]["user"] == "alice"
    c.close()


def test_archive_gzip_roundtrip(src, dst, tmp_path):
    arch = tmp_path / "all.archive.gz"
    ok(run_tool("sable-dump", *port(src), "--archive=%s" % arch, "--gzip"))
    assert arch.read_bytes()[:2] == b"\x1f\x8b"
    p = run_tool("sable-restore", *port(dst), "--archive=%s" % arch)  # forgot --gzip
    assert p.returncode != 0 and b"add --gzip" in p.stderr
    ok(run_tool("sable-restore", *port(dst), "--archive=%s" % arch, "--gzip"))
    a, b = src.client(), dst.client()
    assert_same_db(a, b, "src")
    assert_same_db(a, b, "other")
    for name in ("src", "other"):  # the check: dbHash equal after the round trip
        ha, hb = a[name].command("dbHash"), b[name].command("dbHash")
        assert ha["collections"] == hb["collections"] and ha["md5"] == hb["md5"], name
    assert users_of(a, "src") == users_of(b, "src")


def test_directory_gzip_and_archive_on_stdout(src, dst, tmp_path):
    out = tmp_path / "gz"
    ok(run_tool("sable-dump", *port(src), "--db", "other", "--gzip", "-o", out))
    assert (out / "other" / "things.bson.gz").exists()
    assert (out / "other" / "things.metadata.json.gz").exists()
    ok(run_tool("sable-restore", *port(dst), "--gzip", out))
    assert_same_db(src.client(), dst.client(), "other")
    p = ok(run_tool("sable-dump", *port(src), "--db", "other", "--archive"))
    assert p.stdout[:4] == b"\x6d\xe2\x99\x81"
    ok(run_tool("sable-restore", *port(dst), "--archive", "--drop",
                "--nsFrom", "other.$c$", "--nsTo", "piped.$c$", input=p.stdout))
    assert_same_db(src.client(), dst.client(), "other", "piped")


# ---- the archive, byte by byte ----------------------------------------------------

def crc64_ecma(data, crc=0):
    """CRC-64 with the ECMA-182 polynomial, reflected, init and final xor ~0 (Go's
    hash/crc64 with crc64.ECMA)."""
    poly = 0xC96C5795D7870F42
    crc ^= 0xFFFFFFFFFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFFFFFFFFFF


def test_crc64_check_value():
    assert crc64_ecma(b"123456789") == 0x995DC9BBDF1939FA  # CRC-64/XZ's check value


def cstr(s):
    return s.encode() + b"\x00"


def e_str(name, v):
    v = v.encode()
    return b"\x02" + cstr(name) + struct.pack("<i", len(v) + 1) + v + b"\x00"


def e_i32(name, v):
    return b"\x10" + cstr(name) + struct.pack("<i", v)


def e_i64(name, v):
    return b"\x12" + cstr(name) + struct.pack("<q", v)


def e_bool(name, v):
    return b"\x08" + cstr(name) + (b"\x01" if v else b"\x00")


def document(*elements):
    body = b"".join(elements)
    return struct.pack("<i", len(body) + 5) + body + b"\x00"


def test_archive_bytes_match_the_spec(fresh_server, tmp_path):
    s = fresh_server.start()
    c = s.client()
    c.tiny.c.insert_many([{"_id": 1, "a": "x"}, {"_id": 2}])
    c.tiny.create_collection("e")
    version = c.admin.command("buildInfo")["version"]
    infos = {i["name"]: i for i in c.tiny.list_collections()}
    size_c = c.tiny.command("collStats", "c")["size"]
    arch = tmp_path / "tiny.archive"
    ok(run_tool("sable-dump", "--port", s.port, "--db", "tiny", "--archive=%s" % arch))
    got = arch.read_bytes()

    def meta(name):
        return ('{"indexes":[{"v":{"$numberInt":"2"},"key":{"_id":{"$numberInt":"1"}},'
                '"name":"_id_"}],"uuid":"%s","collectionName":"%s","type":"collection"}'
                % (infos[name]["info"]["uuid"].hex, name))

    docs = [bson.encode({"_id": 1, "a": "x"}), bson.encode({"_id": 2})]
    term = b"\xff\xff\xff\xff"
    expected = (
        b"\x6d\xe2\x99\x81"  # magic number 0x8199e26d, little-endian
        + document(e_i32("concurrent_collections", 4), e_str("version", "0.1"),
                   e_str("server_version", version), e_str("tool_version", "100.9.4-sable"))
        + document(e_str("db", "tiny"), e_str("collection", "c"), e_str("metadata", meta("c")),
                   e_i32("size", size_c), e_str("type", "collection"))
        + document(e_str("db", "tiny"), e_str("collection", "e"), e_str("metadata", meta("e")),
                   e_i32("size", 0), e_str("type", "collection"))
        + term
        # c: one segment with both documents, then its end with the CRC of the documents
        + document(e_str("db", "tiny"), e_str("collection", "c"), e_bool("EOF", False),
                   e_i64("CRC", 0))
        + docs[0] + docs[1] + term
        + document(e_str("db", "tiny"), e_str("collection", "c"), e_bool("EOF", True),
                   e_i64("CRC", struct.unpack("<q", struct.pack("<Q", crc64_ecma(
                       docs[0] + docs[1])))[0]))
        + term
        # e: empty, so only its end
        + document(e_str("db", "tiny"), e_str("collection", "e"), e_bool("EOF", True),
                   e_i64("CRC", 0))
        + term)
    assert got == expected
    c.close()


# ---- selecting and renaming -------------------------------------------------------

def test_ns_include_exclude_from_to(src, dst, tmp_path):
    out = tmp_path / "d"
    ok(run_tool("sable-dump", *port(src), "-o", out))
    ok(run_tool("sable-restore", *port(dst), "--nsInclude", "other.*", "--nsExclude", "other.ab*",
                "--nsFrom", "other.$name$", "--nsTo", "renamed.$name$_copy", out))
    b = dst.client()
    assert sorted(b.list_database_names()) == ["admin", "renamed"] or \
        sorted(n for n in b.list_database_names() if n not in ("admin", "config", "local")) \
        == ["renamed"]
    assert b.renamed.list_collection_names() == ["things_copy"]
    assert raw_docs(b.renamed.things_copy) == raw_docs(src.client().other.things)


def test_db_collection_query_and_single_file(src, dst, tmp_path):
    out = tmp_path / "q"
    ok(run_tool("sable-dump", *port(src), "--db", "src", "--collection", "people",
                "--query", '{age: {$lt: 10}}', "-o", out))
    assert sorted(os.listdir(out / "src")) == ["people.bson", "people.metadata.json"]
    ok(run_tool("sable-restore", *port(dst), "--db", "x", "--collection", "young",
                out / "src" / "people.bson"))
    b = dst.client()
    assert b.x.young.count_documents({}) == src.client().src.people.count_documents(
        {"age": {"$lt": 10}})
    assert "age_name" in [ix["name"] for ix in b.x.young.list_indexes()]
    # one database's directory with --db
    ok(run_tool("sable-restore", *port(dst), "--db", "y", "--noIndexRestore", out / "src"))
    assert [ix["name"] for ix in b.y.people.list_indexes()] == ["_id_"]


def test_drop_duplicates_and_stop_on_error(src, dst, tmp_path):
    out = tmp_path / "o"
    ok(run_tool("sable-dump", *port(src), "--db", "other", "-o", out))
    ok(run_tool("sable-restore", *port(dst), out))
    again = ok(run_tool("sable-restore", *port(dst), out))  # duplicates: reported, not fatal
    assert b"0 document(s) restored successfully. 12 document(s) failed" in again.stderr
    assert b"duplicate key" in again.stderr
    stop = run_tool("sable-restore", *port(dst), "--stopOnError", out)
    assert stop.returncode != 0 and b"--stopOnError" in stop.stderr
    b = dst.client()
    b.other.things.insert_one({"_id": "extra"})
    ok(run_tool("sable-restore", *port(dst), "--drop", "--writeConcern", "{w: 1, j: true}", out))
    assert b.other.things.count_documents({}) == 10
    # the write concern reaches the server: w: 3 cannot be met by a standalone
    p = run_tool("sable-restore", *port(dst), "--drop", "--writeConcern", "{w: 3}", out)
    assert p.returncode != 0 and b"'w' > 1" in p.stderr
    p = run_tool("sable-restore", *port(dst), "--writeConcern", "{w: ", out)
    assert p.returncode != 0 and b"writeConcern" in p.stderr


def test_db_users_and_roles(src, dst, tmp_path):
    out = tmp_path / "u"
    ok(run_tool("sable-dump", *port(src), "--db", "src", "--dumpDbUsersAndRoles", "-o", out))
    assert (out / "src" / "$admin.system.users.bson").exists()
    assert (out / "src" / "$admin.system.roles.bson").exists()
    ok(run_tool("sable-restore", *port(dst), "--restoreDbUsersAndRoles", "--db", "src",
                out / "src"))
    a, b = src.client(), dst.client()
    assert users_of(a, "src") == users_of(b, "src")
    assert roles_of(a, "src") == roles_of(b, "src")
    # --drop removes the database's users that the dump does not hold
    b.src.command("createUser", "carol", pwd="pw", roles=[])
    ok(run_tool("sable-restore", *port(dst), "--restoreDbUsersAndRoles", "--drop", "--db",
                "src", out / "src"))
    assert [u["user"] for u in users_of(b, "src")] == ["alice", "bob"]


# ---- errors -----------------------------------------------------------------------

def test_truncated_archive_says_what_was_restored(src, dst, tmp_path):
    arch = tmp_path / "t.archive"
    ok(run_tool("sable-dump", *port(src), "--db", "src", "--archive=%s" % arch))
    data = arch.read_bytes()
    # cut inside the documents of "people" (the collections are written in listCollections
    # order; find the people segment's header)
    hdr = data.index(b"people\x00\x08EOF\x00\x00")
    cut = tmp_path / "cut.archive"
    cut.write_bytes(data[:hdr + 30000])
    p = run_tool("sable-restore", *port(dst), "--archive=%s" % cut)
    err = p.stderr.decode()
    assert p.returncode != 0
    assert "corrupt archive: truncated" in err
    assert re.search(r"partly restored +src\.people", err)
    assert re.search(r"not restored +src\.", err) or re.search(r"restored +src\.", err)
    assert "failed to restore" in err


def test_flipped_byte_fails_the_checksum(src, dst, tmp_path):
    arch = tmp_path / "f.archive"
    ok(run_tool("sable-dump", *port(src), "--db", "other", "--collection", "things",
                "--archive=%s" % arch))
    data = bytearray(arch.read_bytes())
    i = data.index(bson.encode({"_id": 5}))
    data[i + len(bson.encode({"_id": 5})) - 2] ^= 0x01  # _id 5 becomes 4 (a valid document)
    bad = tmp_path / "bad.archive"
    bad.write_bytes(bytes(data))
    p = run_tool("sable-restore", *port(dst), "--archive=%s" % bad)
    assert p.returncode != 0
    assert b"checksum of other.things does not match" in p.stderr
    assert re.search(rb"partly restored +other\.things", p.stderr)
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not an archive at all")
    p = run_tool("sable-restore", *port(dst), "--archive=%s" % garbage)
    assert p.returncode != 0 and b"does not look like a mongodump archive" in p.stderr


def test_missing_directory_and_bad_uri(dst, tmp_path):
    p = run_tool("sable-restore", *port(dst), tmp_path / "nope")
    assert p.returncode != 0 and b"No such file or directory" in p.stderr
    p = run_tool("sable-restore", *port(dst), "--archive=%s" % (tmp_path / "nope.archive"))
    assert p.returncode != 0 and b"cannot open" in p.stderr
    p = run_tool("sable-dump", "--uri", "mongodb://host:notaport/", "-o", tmp_path / "x")
    assert p.returncode != 0 and b"connection string" in p.stderr
    p = run_tool("sable-dump", "--uri", "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=500",
                 "-o", tmp_path / "x")
    assert p.returncode != 0 and b"cannot connect" in p.stderr
    p = run_tool("sable-dump", *port(dst), "--bogus")
    assert p.returncode != 0 and b'unknown option "bogus"' in p.stderr


def test_time_series_roundtrip_and_buckets_refused(dst, tmp_path):
    s = Sabled()
    try:
        s.start()
        c = s.client()
        c.ts.create_collection("weather", timeseries={"timeField": "t", "metaField": "m",
                                                       "granularity": "minutes"},
                               expireAfterSeconds=86400 * 365 * 10)
        base = datetime.datetime.utcnow().replace(microsecond=0)
        docs = [{"t": base + datetime.timedelta(minutes=i), "m": {"site": i % 3},
                 "temp": 20.0 + i / 10} for i in range(300)]
        c.ts.weather.insert_many(docs)
        c.ts.weather.create_index([("temp", 1)])
        ok(run_tool("sable-dump", "--port", s.port, "-o", tmp_path / "d"))
        ok(run_tool("sable-dump", "--port", s.port, "--archive=%s" % (tmp_path / "a")))
        meta = bson.json_util.loads((tmp_path / "d" / "ts" / "weather.metadata.json").read_text())
        assert meta["type"] == "timeseries"
        assert meta["options"]["timeseries"]["timeField"] == "t"
        want = sorted((d for d in c.ts.weather.find({}, {"_id": 0})), key=lambda d: d["t"])
        info = c.ts.command("listCollections", filter={"name": "weather"})["cursor"]["firstBatch"]
        want_ix = sorted((ix["name"], dict(ix["key"])) for ix in c.ts.weather.list_indexes())
    finally:
        s.cleanup()
    d = dst.client()
    for args in (["--drop", tmp_path / "d"], ["--drop", "--archive=%s" % (tmp_path / "a")]):
        ok(run_tool("sable-restore", *port(dst), *args))
        got = sorted((x for x in d.ts.weather.find({}, {"_id": 0})), key=lambda x: x["t"])
        assert got == want
        ginfo = d.ts.command("listCollections", filter={"name": "weather"})["cursor"]["firstBatch"]
        assert ginfo[0]["type"] == "timeseries"
        assert ginfo[0]["options"] == info[0]["options"]
        assert sorted((ix["name"], dict(ix["key"])) for ix in d.ts.weather.list_indexes()) == want_ix
    # mongodump's layout for mongod's time-series data (bucket documents) is refused, clearly
    (tmp_path / "m" / "ts").mkdir(parents=True)
    (tmp_path / "m" / "ts" / "system.buckets.w.bson").write_bytes(bson.encode({"_id": 1}))
    p = run_tool("sable-restore", *port(dst), tmp_path / "m")
    assert p.returncode != 0 and b"time-series buckets" in p.stderr


def test_preserve_uuid_and_apply_ops(src, dst, tmp_path):
    out = tmp_path / "o"
    ok(run_tool("sable-dump", *port(src), "--db", "src", "-o", out))
    p = run_tool("sable-restore", *port(dst), "--preserveUUID", out)
    assert p.returncode != 0 and b"needs --drop" in p.stderr

    def uuids(client):
        return {i["name"]: i["info"].get("uuid") for i in client.src.list_collections()
                if i.get("type", "collection") == "collection"}
    ok(run_tool("sable-restore", *port(dst), "--drop", "--preserveUUID", out))
    want = uuids(src.client())
    assert want and all(want.values())
    assert uuids(dst.client()) == want
    assert_same_db(src.client(), dst.client(), "src")
    # without it, new UUIDs
    ok(run_tool("sable-restore", *port(dst), "--drop", out))
    got = uuids(dst.client())
    assert set(got) == set(want) and all(got[k] != want[k] for k in want)
    # applyOps itself: a taken UUID, and the entries it does not take
    d = dst.client()
    def binary(u):  # pymongo 3 would send a uuid.UUID as subtype 3
        return bson.Binary(u.bytes, 4)
    ui = binary(want["people"])
    with pytest.raises(Exception) as ei:
        d.admin.command("applyOps", [{"op": "c", "ns": "x.$cmd", "ui": binary(got["people"]),
                                      "o": {"create": "dup"}}])
    assert "UUID is taken" in str(ei.value)
    with pytest.raises(Exception) as ei:
        d.admin.command("applyOps", [{"op": "i", "ns": "x.y", "o": {"_id": 1}}])
    assert ei.value.code == 115
    assert "y" not in d.x.list_collection_names()
    r = d.admin.command("applyOps", [{"op": "c", "ns": "x.$cmd", "ui": ui,
                                      "o": {"create": "fresh"}}])
    assert r["applied"] == 1 and r["results"] == [True]
    info = next(d.x.list_collections(filter={"name": "fresh"}))
    assert info["info"]["uuid"] == want["people"]


def test_num_parallel_collections(src, dst, tmp_path):
    """-j N: a directory dump reads N collections at once, each on a connection of its
    own (one more for the listing); the files are the same whatever N; a restore with -j
    restores that many collections at once."""
    def settled(c):
        # pymongo's monitor connects beside the first command: wait until it
        # has, or a tool's count would include it
        def created():
            return c.admin.command("serverStatus")["connections"]["totalCreated"]
        prev = created()
        for _ in range(50):
            time.sleep(0.1)
            now = created()
            if now == prev:
                break
            prev = now
        return created

    a = src.client()
    created = settled(a)
    outs = {}
    for j in (1, 3):
        before = created()
        ok(run_tool("sable-dump", *port(src), "--db", "src", "-j", str(j), "-o", tmp_path / str(j)))
        outs[j] = created() - before
    assert outs[3] - outs[1] == 2, outs
    for name in os.listdir(tmp_path / "1" / "src"):
        assert (tmp_path / "1" / "src" / name).read_bytes() == \
            (tmp_path / "3" / "src" / name).read_bytes(), name
    p = run_tool("sable-dump", *port(src), "-j", "0", "-o", tmp_path / "0")
    assert p.returncode != 0 and b"--numParallelCollections must be at least 1" in p.stderr
    b = dst.client()
    b_created = settled(b)
    for j in (1, 4):
        before = b_created()
        p = ok(run_tool("sable-restore", *port(dst), "--drop", "-j", str(j), tmp_path / "3"))
        grew = b_created() - before
        assert_same_db(a, b, "src")
        outs["restore%d" % j] = grew
    # each parallel collection brings its own index-building connection
    assert outs["restore4"] > outs["restore1"], outs


def test_interleaved_archive_restores(dst, tmp_path):
    """mongodump writes several collections at once, so an archive's segments of two
    namespaces alternate; sable-restore takes each document to its own namespace and
    checks each namespace's CRC over its own documents."""
    docs = {c: [bson.encode({"_id": i, "c": c}) for i in range(4)] for c in ("a", "b")}

    def meta(name):
        return ('{"indexes":[{"v":{"$numberInt":"2"},"key":{"_id":{"$numberInt":"1"}},'
                '"name":"_id_"}],"collectionName":"%s","type":"collection"}' % name)

    def header(c, eof, crc):
        return document(e_str("db", "mix"), e_str("collection", c), e_bool("EOF", eof),
                        e_i64("CRC", struct.unpack("<q", struct.pack("<Q", crc))[0]))
    term = b"\xff\xff\xff\xff"
    body = (b"\x6d\xe2\x99\x81"
            + document(e_i32("concurrent_collections", 2), e_str("version", "0.1"),
                       e_str("server_version", "7.0.0"), e_str("tool_version", "100.9.4"))
            + b"".join(document(e_str("db", "mix"), e_str("collection", c),
                                e_str("metadata", meta(c)), e_i32("size", 0),
                                e_str("type", "collection")) for c in ("a", "b"))
            + term)
    for lo, hi in ((0, 2), (2, 4)):  # a[0:2], b[0:2], a[2:4], b[2:4]
        for c in ("a", "b"):
            body += header(c, False, 0) + b"".join(docs[c][lo:hi]) + term
    for c in ("b", "a"):
        body += header(c, True, crc64_ecma(b"".join(docs[c]))) + term
    arch = tmp_path / "mix.archive"
    arch.write_bytes(body)
    p = ok(run_tool("sable-restore", *port(dst), "--drop", "--archive=%s" % arch))
    assert b"8 document(s) restored successfully. 0 document(s) failed" in p.stderr
    d = dst.client()
    for c in ("a", "b"):
        assert raw_docs(d.mix[c]) == docs[c], c
    # the CRC is per namespace: one of b's documents changed fails b's check only
    bad = body.replace(docs["b"][3], bson.encode({"_id": 3, "c": "x"}))
    arch.write_bytes(bad)
    p = run_tool("sable-restore", *port(dst), "--drop", "--archive=%s" % arch)
    assert p.returncode != 0 and b"checksum of mix.b does not match" in p.stderr, p.stderr
    assert b"checksum of mix.a" not in p.stderr
