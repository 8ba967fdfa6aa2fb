"""
Point-in-time dumps on a replica set (issue 30): sable-dump --oplog under a
concurrent write load (inserts, updates, deletes, transactions, a collection
created mid-dump), then sable-restore --oplogReplay into a fresh server must
give exactly the source's state at the dump's end, and --oplogLimit with the
source's later oplog (--oplogFile) exactly the state at a chosen later time.

The expected states come from a model, not from the tools: one writer thread
applies a seeded sequence of operations to a dict per collection and to the
server; every operation writes exactly one oplog entry, so the number of the
writer's entries at or before a timestamp in the source's own oplog says how
many operations a state at that timestamp holds.
"""

import os
import random
import re
import threading
import time

import pytest
from bson import BSON, decode_file_iter
from bson.code import Code
from bson.timestamp import Timestamp

from sabled import Sabled
from test_replset import initiate, rs_client
from test_replset3 import last_oplog_ts
from tools_util import ok, run_tool, tool_path

pytestmark = pytest.mark.skipif(not os.path.exists(tool_path("sable-dump")),
                                reason="sable-dump not built")

DB = "pit"


def make_ops(seed, n, first_id):
    """A deterministic list of operations on ids the model knows exist."""
    rnd = random.Random(seed)
    live = list(range(first_id))  # ids that exist; removal swaps with the last

    def take():
        j = rnd.randrange(len(live))
        live[j], live[-1] = live[-1], live[j]
        return live.pop()
    next_id = first_id
    ops = []
    for k in range(n):
        r = rnd.random()
        if k == 150:
            ops.append(("create", "late"))
        elif k > 150 and r < 0.15:
            ops.append(("insert", "late", {"_id": next_id, "k": k}))
            next_id += 1
        elif r < 0.45 or len(live) < 10:
            ops.append(("insert", "acct", {"_id": next_id, "v": k, "pad": "p" * 50}))
            live.append(next_id)
            next_id += 1
        elif r < 0.75:
            i = live[rnd.randrange(len(live))]
            ops.append(("update", "acct", i, {"v": -k, "w%d" % (k % 3): k}))
        elif r < 0.92:
            ops.append(("delete", "acct", take()))
        else:  # a transaction: one applyOps entry
            ops.append(("txn", "acct", take(), {"_id": next_id, "v": k, "t": True}))
            live.append(next_id)
            next_id += 1
    return ops


def apply_model(model, op):
    kind, coll = op[0], op[1]
    if kind == "create":
        model.setdefault(coll, {})
    elif kind == "insert":
        model[coll][op[2]["_id"]] = dict(op[2])
    elif kind == "update":
        model[coll][op[2]].update(op[3])
    elif kind == "delete":
        del model[coll][op[2]]
    elif kind == "txn":
        del model[coll][op[2]]
        model[coll][op[3]["_id"]] = dict(op[3])


def apply_server(client, op):
    db = client[DB]
    kind, coll = op[0], op[1]
    if kind == "create":
        db.create_collection(coll)
    elif kind == "insert":
        db[coll].insert_one(dict(op[2]))
    elif kind == "update":
        assert db[coll].update_one({"_id": op[2]}, {"$set": op[3]}).modified_count == 1
    elif kind == "delete":
        assert db[coll].delete_one({"_id": op[2]}).deleted_count == 1
    elif kind == "txn":
        with client.start_session() as s:
            with s.start_transaction():
                db[coll].delete_one({"_id": op[2]}, session=s)
                db[coll].insert_one(dict(op[3]), session=s)


def writer_entries(client, after):
    """The timestamps of the writer's oplog entries after `after`, in order."""
    out = []
    for e in client.local["oplog.rs"].find({"ts": {"$gt": after}}):
        if e["ns"].startswith(DB + ".") or (e["op"] == "c" and "applyOps" in e["o"]):
            out.append(e["ts"])
    return out


def state_after(initial, ops, m):
    model = {"acct": {d["_id"]: dict(d) for d in initial}}
    for op in ops[:m]:
        apply_model(model, op)
    return model


def server_state(client):
    return {name: {d["_id"]: d for d in client[DB][name].find()}
            for name in client[DB].list_collection_names()}


def count_before(ts_list, limit, inclusive):
    return sum(1 for t in ts_list if (t <= limit if inclusive else t < limit))


@pytest.fixture
def rs():
    s = Sabled()
    s.start(["--replSet", "rs0", "--oplogSizeMB", "64"])
    try:
        initiate(s).close()
        c = rs_client(s)
        c.admin.command("ping")
        yield s, c
        c.close()
    finally:
        s.cleanup()


@pytest.fixture
def fresh():
    servers = []

    def make():
        s = Sabled()
        s.start()
        servers.append(s)
        return s
    yield make
    for s in servers:
        s.cleanup()


def test_oplog_dump_replay_and_limit(rs, fresh, tmp_path):
    src, c = rs
    n0 = 20000
    initial = [{"_id": i, "v": i, "pad": "x" * 200} for i in range(n0)]
    c[DB].acct.insert_many(initial)
    c[DB].acct.create_index("v")
    # wait until the set is writable with a primary known to the tools
    load_end = last_oplog_ts(c)
    ops = make_ops(7, 30000, n0)  # more than a run needs: the writer stops when told
    done = [0]
    stop = threading.Event()
    errors = []

    def writer():
        wc = rs_client(src)
        try:
            for op in ops:
                if stop.is_set():
                    break
                apply_server(wc, op)
                done[0] += 1
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
        finally:
            wc.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        while done[0] < 50 and t.is_alive():
            time.sleep(0.01)
        uri = "mongodb://127.0.0.1:%d/?replicaSet=rs0" % src.port
        ok(run_tool("sable-dump", "--uri", uri, "--oplog", "-o", tmp_path / "d",
                    "--numParallelCollections", "2"))
        pa = ok(run_tool("sable-dump", "--uri", uri, "--oplog",
                         "--archive=%s" % (tmp_path / "a"), "--gzip"))
        pg = ok(run_tool("sable-dump", "--uri", uri, "--oplog", "--gzip", "-o", tmp_path / "g"))
        after_dumps = done[0]  # writes after both dumps: the --oplogLimit part needs some
        while done[0] < after_dumps + 400 and t.is_alive():
            time.sleep(0.01)
        stop.set()
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert os.path.exists(tmp_path / "d" / "oplog.bson")
    ts_list = writer_entries(c, load_end)
    assert len(ts_list) == done[0]
    final = server_state(c)
    assert final == {k: v for k, v in state_after(initial, ops, done[0]).items()}

    # 1. the directory dump: its oplog covers writes made while collections were read
    entries = list(decode_file_iter(open(tmp_path / "d" / "oplog.bson", "rb")))
    end_ts = entries[-1]["ts"]
    during = count_before(ts_list, end_ts, True) - count_before(ts_list, entries[0]["ts"], True)
    assert during > 0, "no write happened during the dump: the test proves nothing"
    dst = fresh()
    ok(run_tool("sable-restore", "--port", dst.port, "--oplogReplay", tmp_path / "d"))
    dc = dst.client()
    want = state_after(initial, ops, count_before(ts_list, end_ts, True))
    assert server_state(dc) == want
    assert "v_1" in dc[DB].acct.index_information()

    # 2. the archive (gzip): the oplog travels inside it
    dst2 = fresh()
    p = ok(run_tool("sable-restore", "--port", dst2.port, "--oplogReplay", "--gzip",
                    "--archive=%s" % (tmp_path / "a")))
    assert b"oplog:" in p.stderr
    # its end, as the dump said: "oplog: entries from Timestamp(s, i) to Timestamp(e, j)"
    mt = re.search(rb"oplog: entries from Timestamp\((\d+), (\d+)\) to "
                   rb"Timestamp\((\d+), (\d+)\)", pa.stderr)
    arch_end = Timestamp(int(mt.group(3)), int(mt.group(4)))
    assert arch_end > end_ts
    want = state_after(initial, ops, count_before(ts_list, arch_end, True))
    assert server_state(dst2.client()) == want

    # 2b. a gzip directory: oplog.bson.gz
    assert os.path.exists(tmp_path / "g" / "oplog.bson.gz")
    mt = re.search(rb"to Timestamp\((\d+), (\d+)\)", pg.stderr)
    gz_end = Timestamp(int(mt.group(1)), int(mt.group(2)))
    dst4 = fresh()
    ok(run_tool("sable-restore", "--port", dst4.port, "--oplogReplay", "--gzip", tmp_path / "g"))
    assert server_state(dst4.client()) == state_after(initial, ops,
                                                      count_before(ts_list, gz_end, True))

    # 3. --oplogLimit: the directory dump plus the source's oplog, to a chosen later time
    ok(run_tool("sable-dump", "--port", src.port, "-d", "local", "-c", "oplog.rs",
                "-o", tmp_path / "o"))
    later = [x for x in ts_list if x > end_ts]
    assert len(later) > 20
    limit = later[len(later) // 2]
    dst3 = fresh()
    p = ok(run_tool("sable-restore", "--port", dst3.port, "--oplogReplay",
                    "--oplogFile", tmp_path / "o" / "local" / "oplog.rs.bson",
                    "--oplogLimit", "%d:%d" % (limit.time, limit.inc), tmp_path / "d"))
    assert b"stopped at --oplogLimit" in p.stderr
    want = state_after(initial, ops, count_before(ts_list, limit, False))
    assert server_state(dst3.client()) == want


def test_oplog_errors(fresh, tmp_path):
    standalone = fresh()
    p = run_tool("sable-dump", "--port", standalone.port, "--oplog", "-o", tmp_path / "x")
    assert p.returncode != 0 and b"replica set" in p.stderr
    p = run_tool("sable-dump", "--port", standalone.port, "--oplog", "-d", "x", "-o", tmp_path)
    assert p.returncode != 0 and b"whole server" in p.stderr
    p = run_tool("sable-dump", "--port", standalone.port, "--oplog", "--out", "-")
    assert p.returncode != 0 and b"use --archive" in p.stderr
    (tmp_path / "dump" / "db").mkdir(parents=True)
    (tmp_path / "dump" / "db" / "c.bson").write_bytes(BSON.encode({"_id": 1}))
    p = run_tool("sable-restore", "--port", standalone.port, "--oplogReplay", tmp_path / "dump")
    assert p.returncode != 0 and b"no oplog.bson" in p.stderr
    p = run_tool("sable-restore", "--port", standalone.port, "--oplogLimit", "5",
                 tmp_path / "dump")
    assert p.returncode != 0 and b"need --oplogReplay" in p.stderr
    p = run_tool("sable-restore", "--port", standalone.port, "--oplogReplay", "--oplogLimit",
                 "abc", tmp_path / "dump")
    assert p.returncode != 0 and b"seconds[:ordinal]" in p.stderr
    # an entry the replay cannot apply stops it, saying where, and exits non-zero
    bad = {"ts": Timestamp(10, 1), "t": 1, "op": "c", "ns": "db.$cmd", "o": {"frobnicate": 1}}
    (tmp_path / "dump" / "oplog.bson").write_bytes(BSON.encode(bad))
    p = run_tool("sable-restore", "--port", standalone.port, "--oplogReplay", tmp_path / "dump")
    assert p.returncode != 0 and b"cannot replay: frobnicate" in p.stderr
    assert b"Timestamp(10, 1)" in p.stderr


def test_oplog_replay_keeps_code_values_whole(fresh, tmp_path):
    # an update's diff becomes $set paths (restore_oplog.c): a code value holding a NUL byte
    # goes into them whole (sbl_append_iter)
    (tmp_path / "dump" / "db").mkdir(parents=True)
    (tmp_path / "dump" / "db" / "c.bson").write_bytes(BSON.encode({"_id": 1, "k": 1}))
    c, w = Code("a\x00b"), Code("x\x00y", {"s": 1})
    up = {"ts": Timestamp(10, 1), "t": 1, "op": "u", "ns": "db.c", "o2": {"_id": 1},
          "o": {"$v": 2, "diff": {"i": {"c": c}, "u": {"k": w}}}}
    (tmp_path / "dump" / "oplog.bson").write_bytes(BSON.encode(up))
    dst = fresh()
    ok(run_tool("sable-restore", "--port", dst.port, "--oplogReplay", tmp_path / "dump"))
    d = dst.client().db.c.find_one({"_id": 1})
    assert str(d["c"]) == "a\x00b" and str(d["k"]) == "x\x00y" and d["k"].scope == {"s": 1}, d


def test_oplog_replay_applies_array_resizes(fresh, tmp_path):
    # a $v:2 diff that cuts an array (l) says what no update operator can: the replay
    # applies it to the document itself (restore_oplog.c, repl_diff.c), in its turn
    # between the entries around it; on a missing document it does nothing
    (tmp_path / "dump" / "db").mkdir(parents=True)
    docs = [{"_id": 1, "a": [1, 2, {"x": 1}], "k": 1}, {"_id": 3, "a": [5, 6]}]
    (tmp_path / "dump" / "db" / "c.bson").write_bytes(b"".join(BSON.encode(d) for d in docs))
    entries = [
        {"ts": Timestamp(10, 1), "t": 1, "op": "u", "ns": "db.c", "o2": {"_id": 1},
         "o": {"$v": 2, "diff": {"sa": {"a": True, "s2": {"u": {"x": 2}}}}}},
        {"ts": Timestamp(10, 2), "t": 1, "op": "u", "ns": "db.c", "o2": {"_id": 1},
         "o": {"$v": 2, "diff": {"u": {"k": 2}, "sa": {"a": True, "l": 1, "u0": 7}}}},
        {"ts": Timestamp(10, 3), "t": 1, "op": "u", "ns": "db.c", "o2": {"_id": 1},
         "o": {"$v": 2, "diff": {"i": {"z": 1}}}},
        {"ts": Timestamp(10, 4), "t": 1, "op": "u", "ns": "db.c", "o2": {"_id": 2},
         "o": {"$v": 2, "diff": {"sa": {"a": True, "l": 0}}}},
        {"ts": Timestamp(10, 5), "t": 1, "op": "u", "ns": "db.c", "o2": {"_id": 3},
         "o": {"$v": 2, "diff": {"sa": {"a": True, "l": 1}}}},
    ]
    (tmp_path / "dump" / "oplog.bson").write_bytes(b"".join(BSON.encode(e) for e in entries))
    dst = fresh()
    ok(run_tool("sable-restore", "--port", dst.port, "--oplogReplay", tmp_path / "dump"))
    got = list(dst.client().db.c.find().sort("_id", 1))
    assert got == [{"_id": 1, "a": [7], "k": 2, "z": 1}, {"_id": 3, "a": [5]}], got
