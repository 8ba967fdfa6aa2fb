"""
Creating collections and indexes inside a multi-document transaction, as
MongoDB 7.0 allows (issue 26): create, createIndexes on a collection the
transaction creates (or on one that does not exist), implicit creation by
insert; nobody else sees them until the commit, an abort removes them, the
commit logs them before the transaction's applyOps entry (so a secondary
has them), and createIndexes on an existing collection is refused with
OperationNotSupportedInTransaction.
"""
from bson.son import SON

from test_replset import initiate, member, primary, rs_client, start_member  # noqa: F401
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
    raw.close()
