"""
Creating collections and indexes inside a multi-document transaction, as
MongoDB 7.0 allows (issue 26): create, createIndexes on a collection the
transaction creates (or on one that does not exist), implicit creation by
insert; nobody else sees them until the commit, an abort removes them, the
commit logs them before the transaction's applyOps entry (so a secondary
has them), and createIndexes on an existing collection is refused with
OperationNotSupportedInTransaction.  Also (issue 26's other gaps): a
transaction past 16 MB written as several chained applyOps entries, and
open transactions in currentOp and on the Prometheus endpoint.
"""
import time

import pytest
from bson.son import SON

from sabled import Sabled

from test_replset import initiate, member, primary, rs_client  # noqa: F401 (fixtures)
from test_replset3 import direct, last_oplog_ts, primary_of, start_set, state, wait_for
from test_retryable import Raw, new_lsid
from test_transactions import commit, tcmd


def names(c, db="t"):
    return sorted(c[db].list_collection_names())


def test_create_in_transaction_visible_at_commit(primary):
    m, c = primary
    raw = Raw(m.port)
    lsid = new_lsid()
    raw(tcmd("create", "made", lsid, 1, start=True))
    raw(tcmd("createIndexes", "made", lsid, 1, indexes=[{"key": {"x": 1}, "name": "x_1"}]))
    raw(tcmd("insert", "made", lsid, 1, documents=[{"_id": 1, "x": 5}]))
    raw(tcmd("insert", "implicit", lsid, 1, documents=[{"_id": 2}]))
    # the transaction sees them, nobody else does
    r = raw(tcmd("find", "made", lsid, 1, filter={"x": 5}))
    assert r["cursor"]["firstBatch"] == [{"_id": 1, "x": 5}]
    assert "made" not in names(c) and "implicit" not in names(c)
    assert c.t.made.find_one() is None
    r = raw(SON([("insert", "made"), ("documents", [{"_id": 9}])]), ok=False)
    assert r.get("code") == 112 or r["writeErrors"][0]["code"] == 112, r
    assert commit(raw, lsid, 1)["ok"] == 1
    assert {"made", "implicit"} <= set(names(c))
    assert c.t.made.find_one({"x": 5}) == {"_id": 1, "x": 5}
    assert "x_1" in c.t.made.index_information()
    assert c.t.implicit.find_one() == {"_id": 2}
    # the oplog: the create and the index before the transaction's entry
    ops = list(c.local["oplog.rs"].find({"$or": [{"o.create": "made"},
                                                 {"o.createIndexes": "made"},
                                                 {"lsid.id": lsid["id"]}]}).sort("$natural", 1))
    kinds = [("create" if "create" in o["o"] else "index" if "createIndexes" in o["o"]
              else "applyOps") for o in ops]
    assert kinds == ["create", "index", "applyOps"], ops
    raw.close()


def test_abort_drops_and_existing_collection_refuses_index(primary):
    m, c = primary
    raw = Raw(m.port)
    lsid = new_lsid()
    raw(tcmd("create", "gone", lsid, 1, start=True))
    raw(tcmd("insert", "gone", lsid, 1, documents=[{"_id": 1}]))
    r = raw(tcmd("abortTransaction", 1, lsid, 1), db="admin")
    assert r["ok"] == 1
    assert "gone" not in names(c)
    # createIndexes on an existing collection: refused, and the transaction aborted
    c.t.old.insert_one({"_id": 1})
    r = raw(tcmd("createIndexes", "old", lsid, 2, start=True,
                 indexes=[{"key": {"y": 1}, "name": "y_1"}]), ok=False)
    assert r["code"] == 263 and r["codeName"] == "OperationNotSupportedInTransaction", r
    # create of an existing collection: NamespaceExists
    r = raw(tcmd("create", "old", new_lsid(), 1, start=True), ok=False)
    assert r["code"] == 48, r
    assert "y_1" not in c.t.old.index_information()
    # a capped collection or a view: not in a transaction
    for i, extra in enumerate(({"capped": True, "size": 4096},
                               {"viewOn": "old", "pipeline": []})):
        r = raw(tcmd("create", "nope%d" % i, new_lsid(), 1, start=True, **extra), ok=False)
        assert r["code"] == 263, r
    assert not any(n.startswith("nope") for n in names(c))
    raw.close()


@pytest.fixture
def rs3_big_oplog():
    """Three members whose oplogs hold a 20 MB transaction (rs3's 16 MB do not)."""
    members = []
    try:
        start_set(members, {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500},
                  oplog_mb=100)
        wait_for(lambda: any(state(m) == 1 for m in members[:2]), timeout=30)
        yield members
    finally:
        for m in members:
            m.cleanup()


def test_large_transaction_split_across_entries(rs3_big_oplog):
    """A transaction of ~20 MB: several applyOps entries chained by
    prevOpTime (all but the last partialTxn, the last with count), applied
    by the secondaries at the last one."""
    import pymongo
    from pymongo.write_concern import WriteConcern
    rs3 = rs3_big_oplog
    p = primary_of(rs3)
    seeds = ",".join("127.0.0.1:%d" % m.port for m in rs3)
    c = pymongo.MongoClient("mongodb://%s/?replicaSet=rs0" % seeds,
                            serverSelectionTimeoutMS=20000)
    try:
        # on every member before the transaction: a secondary then counts 1 or 21
        c.t.get_collection("big", write_concern=WriteConcern(w=3)).insert_one({"_id": "first"})
        blob = "x" * (1024 * 1024)
        with c.start_session() as s:
            s.with_transaction(
                lambda s: [c.t.big.insert_one({"_id": i, "b": blob}, session=s)
                           for i in range(20)],
                write_concern=WriteConcern(w=1))
        with direct(p) as d:
            ents = list(d.local["oplog.rs"].find(
                {"o.applyOps": {"$exists": True}}).sort("$natural", 1))
            assert len(ents) == 2, [e["o"].keys() for e in ents]
            first, last = ents
            assert first["o"]["partialTxn"] is True and "count" not in first["o"]
            assert last["o"]["count"] == 20 and "partialTxn" not in last["o"]
            assert first["prevOpTime"]["t"] == -1
            assert last["prevOpTime"]["ts"] == first["ts"]
            assert first["lsid"] == last["lsid"] and first["txnNumber"] == last["txnNumber"]
            assert len(first["o"]["applyOps"]) + len(last["o"]["applyOps"]) == 20
        for m in rs3:
            if m is p:
                continue
            with direct(m) as d:
                # applied at once: a reader never sees a part of the transaction
                seen = set()
                end = time.time() + 120
                while time.time() < end and 21 not in seen:
                    seen.add(d.t.big.count_documents({}))
                    time.sleep(0.05)
                assert seen <= {1, 21} and 21 in seen, seen
                assert d.local["oplog.rs"].count_documents(
                    {"o.applyOps": {"$exists": True}}) == 2
    finally:
        c.close()


def test_open_transaction_in_current_op_and_prometheus():
    """An open transaction between its commands: a currentOp idleSession
    entry with its transaction, and the Prometheus counters."""
    import urllib.request
    from sabled import free_port
    s = Sabled()
    s.metrics_port = free_port()
    s.start(["--replSet", "rs0", "--oplogSizeMB", "16", "--metricsPort", str(s.metrics_port)])
    try:
        initiate(s).close()
        c = rs_client(s)
        c.t.m.insert_one({"_id": 0})
        raw = Raw(s.port)
        lsid = new_lsid()
        raw(tcmd("insert", "m", lsid, 7, start=True, documents=[{"_id": 1}]))
        time.sleep(0.05)
        ops = c.admin.command(SON([("currentOp", 1), ("type", "idleSession")]))["inprog"]
        mine = [o for o in ops if o["transaction"]["parameters"]["txnNumber"] == 7]
        assert len(mine) == 1, ops
        tx = mine[0]["transaction"]
        assert mine[0]["active"] is False
        assert tx["parameters"]["txnNumber"] == 7 and tx["parameters"]["autocommit"] is False
        # started without a readConcern: mongod's implicit default, in order
        assert list(tx["parameters"]["readConcern"].items()) == [
            ("level", "local"), ("provenance", "implicitDefault")], tx
        assert tx["timeOpenMicros"] >= 50000 and tx["timeOpenMicros"] >= tx["timeActiveMicros"]
        assert tx["timeInactiveMicros"] > 0
        assert tx["expiryTime"] > tx["startWallClockTime"]

        def metric(text, line):
            return [ln for ln in text.splitlines() if ln.startswith(line)]
        url = "http://127.0.0.1:%d/metrics" % s.metrics_port
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert metric(text, "sable_transactions_open 1"), text
        assert metric(text, 'sable_transactions_total{state="started"} 1')
        assert commit(raw, lsid, 7)["ok"] == 1
        assert not [o for o in c.admin.command("currentOp")["inprog"]
                    if o.get("type") == "idleSession"]
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert metric(text, "sable_transactions_open 0")
        assert metric(text, 'sable_transactions_total{state="committed"} 1')
        raw.close()
        c.close()
    finally:
        s.cleanup()


def test_running_command_in_transaction_in_current_op(primary):
    """A command running inside a transaction: its currentOp entry has the
    session and the transaction (mongod's fields), seen from another client."""
    import threading
    m, c = primary
    c.t.run.insert_one({"_id": 0})
    raw = Raw(m.port)
    lsid = new_lsid()
    raw(tcmd("insert", "run", lsid, 5, start=True, documents=[{"_id": 1}],
             readConcern={"level": "snapshot"}))
    raw.sock.settimeout(120)
    replies = []
    # $where sleeps long; killOp ends it once currentOp has been looked at
    blocked = threading.Thread(target=lambda: replies.append(raw(
        tcmd("find", "run", lsid, 5, filter={"$where": "sleep(600000) || true"},
             maxTimeMS=300000), ok=False)))
    blocked.start()
    try:
        flt = SON([("currentOp", 1), ("active", True), ("transaction.parameters.txnNumber", 5)])
        ops = wait_for(lambda: c.admin.command(flt)["inprog"], timeout=60)
        assert len(ops) == 1, ops
        op = ops[0]
        assert op["command"]["find"] == "run" and op["lsid"]["id"].bytes == bytes(lsid["id"])
        assert len(op["lsid"]["uid"]) == 32
        tx = op["transaction"]
        assert tx["parameters"]["autocommit"] is False
        assert tx["parameters"]["readConcern"] == {"level": "snapshot",
                                                   "provenance": "clientSupplied"}
        for k in ("readTimestamp", "startWallClockTime", "timeOpenMicros",
                  "timeActiveMicros", "timeInactiveMicros", "expiryTime"):
            assert k in tx, (k, tx)
        assert tx["timeOpenMicros"] >= tx["timeActiveMicros"] > 0
        assert tx["expiryTime"] > tx["startWallClockTime"]
        # not an idle session while it runs
        idle = c.admin.command(SON([("currentOp", 1), ("type", "idleSession")]))["inprog"]
        assert not [o for o in idle if o["lsid"]["id"].bytes == bytes(lsid["id"])], idle
        c.admin.command("killOp", op=op["opid"])
    finally:
        blocked.join(120)
    assert replies and replies[0]["ok"] == 0 and replies[0]["code"] == 11601, replies
    raw.close()


def test_commit_with_unsatisfiable_write_concern_commits(primary):
    """As mongod: the commit is made, then writeConcernError 100 (no label)."""
    m, c = primary
    raw = Raw(m.port)
    lsid = new_lsid()
    raw(tcmd("insert", "wc", lsid, 1, start=True, documents=[{"_id": 1}]))
    r = commit(raw, lsid, 1, writeConcern={"w": 10})
    assert r["ok"] == 1 and r["writeConcernError"]["code"] == 100, r
    assert r["writeConcernError"]["codeName"] == "UnsatisfiableWriteConcern"
    assert "errorLabels" not in r
    assert c.t.wc.find_one() == {"_id": 1}
    # an ordinary write with w > members is still refused before it runs
    r = raw(SON([("insert", "wc"), ("documents", [{"_id": 2}]), ("writeConcern", {"w": 10})]),
            ok=False)
    assert r.get("code") == 100 or r.get("writeConcernError", {}).get("code") == 100, r
    raw.close()


def test_transaction_first_write_waits_for_after_cluster_time(primary):
    """afterClusterTime on a transaction's first command (a write): the
    primary moves its clock to that time before the write, as mongod."""
    m, c = primary
    raw = Raw(m.port)
    last = last_oplog_ts(c)
    from bson.timestamp import Timestamp
    ahead = Timestamp(last.time + 2, 1)
    lsid = new_lsid()
    raw(tcmd("insert", "after", lsid, 1, start=True, documents=[{"_id": 1}],
             readConcern={"afterClusterTime": ahead}))
    r = commit(raw, lsid, 1)
    assert r["ok"] == 1 and r["operationTime"] > ahead, r
    raw.close()
