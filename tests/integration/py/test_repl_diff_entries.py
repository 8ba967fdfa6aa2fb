"""
Update entries in mongod 7.0's form (src/repl/repl_oplog.c, repl_diff.c): an
operator update is logged as o: {$v: 2, diff} with o2: {_id} when the diff
applied to the old document gives the new one byte for byte; a replacement,
a transaction's operation and a retryable findAndModify's update keep the new
document whole (the last two with the diff beside it).  A secondary applies
the diffs (straight through storage, and through the command path for a
capped collection) and ends with the primary's documents byte for byte; a
diff of a document it lacks changes nothing.
"""
import pytest
from bson.raw_bson import RawBSONDocument
from pymongo import ReturnDocument
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_replset3 import direct, state, wait_for


@pytest.fixture(scope="module")
def rs():
    with set_members(2) as members:
        p, s = members
        cfg = {"_id": "rs0", "members": [
            {"_id": 0, "host": "127.0.0.1:%d" % p.port},
            {"_id": 1, "host": "127.0.0.1:%d" % s.port, "priority": 0}],
            "settings": {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}}
        with direct(p) as c:
            c.admin.command("replSetInitiate", cfg)
        wait_for(lambda: state(p) == 1 and state(s) == 2, timeout=60)
        yield p, s


def entries(c, ns, op="u"):
    return list(c.local["oplog.rs"].find({"ns": ns, "op": op}).sort("$natural", 1))


def raw_docs(member, db, coll):
    with direct(member) as c:
        return [bytes(d.raw) for d in c[db].get_collection(
            coll, codec_options=c[db].codec_options.with_options(
                document_class=RawBSONDocument)).find().sort("_id", 1)]


def test_operator_updates_are_logged_as_diffs_and_applied(rs):
    p, s = rs
    with direct(p) as c:
        co = c.dd.c.with_options(write_concern=WriteConcern(w=2))
        co.drop()
        co.insert_one({"_id": 1, "a": 1, "arr": [1, 2, {"x": 1}], "s": {"p": 1, "q": [1]}})
        updates = [
            {"$set": {"a": 2, "arr.2.x": 5, "s.n": 3}},
            {"$inc": {"a": 1}, "$push": {"arr": {"$each": [7, 8]}}},
            {"$pop": {"arr": 1}},
            {"$pull": {"arr": {"$in": [1, 2]}}},
            {"$unset": {"s.p": 1}, "$rename": {"a": "z"}},
            [{"$set": {"w": {"$concat": ["x", "y"]}}}],
        ]
        for u in updates:
            co.update_one({"_id": 1}, u)
        co.replace_one({"_id": 1}, {"_id": 1, "whole": True, "arr": [1]})
        co.update_one({"_id": 1}, {"$set": {"after": 1}})
        es = entries(c, "dd.c")
        assert len(es) == len(updates) + 2
        for e in es[:len(updates)] + es[-1:]:
            assert set(e["o"]) == {"$v", "diff"} and e["o"]["$v"] == 2, e
            assert e["o2"] == {"_id": 1} and "diff" not in e, e
        assert es[len(updates)]["o"] == {"_id": 1, "whole": True, "arr": [1]}
        assert "$v" not in es[len(updates)]["o"]
        # an array cut ($pop) is a resize of the array's diff
        assert es[2]["o"]["diff"]["sarr"] == {"a": True, "l": 4}, es[2]
    assert raw_docs(p, "dd", "c") == raw_docs(s, "dd", "c")
    with direct(s) as c:
        assert [e["o"] for e in entries(c, "dd.c")] == [e["o"] for e in es]


def test_many_documents_converge(rs):
    p, s = rs
    with direct(p) as c:
        co = c.dd.many.with_options(write_concern=WriteConcern(w=1))
        co.drop()
        co.insert_many([{"_id": i, "n": 0, "l": [], "d": {"k": i}} for i in range(200)])
        for r in range(5):
            for i in range(200):
                co.update_one({"_id": i}, {"$inc": {"n": 1}, "$push": {"l": r},
                                           "$set": {"d.r%d" % (i % 3): r}})
            co.update_many({"_id": {"$lt": 50}}, {"$pop": {"l": -1}})
        co.with_options(write_concern=WriteConcern(w=2)).insert_one({"_id": "end"})
    assert raw_docs(p, "dd", "many") == raw_docs(s, "dd", "many")


def test_capped_collection_takes_the_command_path(rs):
    # a capped collection's entries are applied through the command layer
    # (repl_crud.c sends them there): the diff is applied to the member's
    # document and the result replaces it
    p, s = rs
    with direct(p) as c:
        c.dd.drop_collection("cap")
        c.dd.create_collection("cap", capped=True, size=1 << 20)
        co = c.dd.cap.with_options(write_concern=WriteConcern(w=2))
        co.insert_many([{"_id": i, "v": "aaaa", "n": 1} for i in range(5)])
        co.update_one({"_id": 2}, {"$set": {"v": "bbbb"}})
        co.update_many({}, {"$inc": {"n": 1}})
        assert all(e["o"].get("$v") == 2 for e in entries(c, "dd.cap"))
    assert raw_docs(p, "dd", "cap") == raw_docs(s, "dd", "cap")


def test_retryable_find_and_modify_keeps_the_whole_document(rs):
    p, s = rs
    with direct(p) as c:
        co = c.dd.fam.with_options(write_concern=WriteConcern(w=2))
        co.drop()
        co.insert_one({"_id": 1, "n": 1, "pad": "x" * 100})
        with c.start_session() as sess:
            got = co.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}}, session=sess,
                                         return_document=ReturnDocument.AFTER)
        assert got["n"] == 2
        (e,) = entries(c, "dd.fam")
        assert "txnNumber" in e and e["o"] == got and e["diff"] == {"u": {"n": 2}}, e
        # in a transaction: the operation keeps the document whole too
        with c.start_session() as sess:
            with sess.start_transaction():
                co.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=sess)
        (t,) = list(c.local["oplog.rs"].find({"o.applyOps.ns": "dd.fam"}))
        (op,) = t["o"]["applyOps"]
        assert op["o"]["n"] == 3 and op["diff"] == {"u": {"n": 3}}, op
    assert raw_docs(p, "dd", "fam") == raw_docs(s, "dd", "fam")
