"""
Shard key rules as mongod 7.0 enforces them through a router (issue 28,
docs/sharding.md "Shard key values"): one cluster of two one-member shard
sets, rk.<name> sharded on {k: 1} and split at k = 0 (k < 0 on shard0,
k >= 0 on shard1), rk.dot on {"a.b": 1}.

- an array in the shard key (or on its path) is refused on insert (61
  ShardKeyNotFound) and by an update that would leave one (54
  NotSingleValueField); a missing key is null; a regex value is a value;
- changing a document's shard key: 31025 without the full key in the
  filter, 72 with multi, 20 outside a retryable write or transaction;
  allowed when the document stays on its shard;
- moving a document to another shard that way, with any update form: in a
  retryable write (the router deletes and inserts it in an internal
  transaction; a retry is answered the first result) or in a transaction.
"""
import os
import sys

import pymongo
import pytest
from bson.int64 import Int64
from bson.regex import Regex
from bson.son import SON
from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402

COLLS = ["arr", "upd", "mv", "ret", "rty", "txm"]


cluster = sharded.cluster_fixture("sable-skey-")
mongos = sharded.mongos_fixture(
    split=("rk", COLLS), retryWrites=False,
    setup=lambda c: c.admin.command("shardCollection", "rk.dot", key={"a.b": 1}))
shards = sharded.shards_fixture()


@pytest.fixture(scope="module")
def retrying(cluster, mongos):
    with sharded.client(cluster["router"], retryWrites=True) as c:
        yield c


def code_of(fn):
    try:
        fn()
    except WriteError as e:
        return e.code
    except BulkWriteError as e:
        return e.details["writeErrors"][0]["code"]
    except OperationFailure as e:
        return e.code
    return 0


def test_insert_with_an_array_in_the_shard_key_is_refused(mongos):
    c, dot = mongos.rk.arr, mongos.rk.dot
    assert code_of(lambda: c.insert_one({"_id": 1, "k": [1, 2]})) == 61
    assert code_of(lambda: dot.insert_one({"_id": 1, "a": [{"b": 1}]})) == 61
    assert code_of(lambda: dot.insert_one({"_id": 2, "a": {"b": [1]}})) == 61
    assert c.count_documents({}) == 0 and dot.count_documents({}) == 0
    # ordered: the documents before it go in, not those after
    with pytest.raises(BulkWriteError) as e:
        c.insert_many([{"_id": 2, "k": -1}, {"_id": 3, "k": [5]}, {"_id": 4, "k": 6}])
    errs = e.value.details["writeErrors"]
    assert [(w["index"], w["code"]) for w in errs] == [(1, 61)]
    assert "array" in errs[0]["errmsg"] and e.value.details["nInserted"] == 1
    # unordered: every other document goes in
    with pytest.raises(BulkWriteError) as e:
        c.insert_many([{"_id": 5, "k": [-2]}, {"_id": 6, "k": 7}, {"_id": 7, "k": -7}],
                      ordered=False)
    assert [w["index"] for w in e.value.details["writeErrors"]] == [0]
    assert sorted(d["_id"] for d in c.find()) == [2, 6, 7]
    # an array elsewhere in the document is fine
    dot.insert_one({"_id": 3, "a": {"b": 1, "c": [1, 2]}, "x": [1]})


def test_missing_key_is_null_and_a_regex_is_a_value(mongos, shards):
    c = mongos.rk.arr
    c.insert_one({"_id": "nokey"})  # allowed since 4.4: null, below 0: shard0
    assert shards[0].rk.arr.find_one({"_id": "nokey"}) is not None
    assert c.find_one({"k": None, "_id": "nokey"}) is not None
    c.insert_one({"_id": "re", "k": Regex("^a")})  # regex sorts above numbers: shard1
    assert shards[1].rk.arr.find_one({"_id": "re"}) is not None


def test_update_leaving_an_array_in_the_key_is_refused(mongos, retrying, shards):
    c, rc = mongos.rk.upd, retrying.rk.upd
    c.insert_many([{"_id": 1, "k": 5}, {"_id": 2, "k": -5}])
    assert code_of(lambda: rc.update_one({"k": 5}, {"$set": {"k": [5]}})) == 54
    assert code_of(lambda: rc.replace_one({"k": 5}, {"k": [6]})) == 54
    assert code_of(lambda: rc.update_one({"k": 8}, {"$set": {"k": [8]}}, upsert=True)) == 54
    assert code_of(lambda: rc.find_one_and_update({"k": -5}, {"$set": {"k": [1]}})) == 54
    # a key path through an array: the shard refuses it (the router cannot read it)
    dot = retrying.rk.dot
    dot.insert_one({"_id": 10, "a": {"b": 100}})
    assert code_of(lambda: dot.replace_one({"a.b": 100}, {"a": [{"b": 100}]})) == 54
    assert code_of(lambda: dot.update_one({"a.b": 100}, {"$set": {"a": [{"b": 100}]}})) == 54
    assert dot.find_one({"_id": 10})["a"] == {"b": 100}
    assert sorted((d["_id"], d["k"]) for d in c.find()) == [(1, 5), (2, -5)]


def test_shard_key_change_rules(mongos, retrying, shards):
    c, rc = mongos.rk.mv, retrying.rk.mv
    c.insert_many([{"_id": 1, "k": 5}, {"_id": 2, "k": -5}, {"_id": 3, "k": 7}])
    # outside a retryable write or transaction: 20 IllegalOperation
    assert code_of(lambda: c.update_one({"k": 5}, {"$set": {"k": 6}})) == 20
    assert code_of(lambda: c.find_one_and_update({"k": 5}, {"$set": {"k": 6}})) == 20
    # without the full shard key's equality: 31025; multi: 72
    assert code_of(lambda: rc.update_one({"_id": 1}, {"$set": {"k": 6}})) == 31025
    assert code_of(lambda: rc.update_many({"k": 5}, {"$set": {"k": 6}})) == 72
    # setting it to the value it has is no change
    assert rc.update_one({"k": 5}, {"$set": {"k": 5, "y": 1}}).modified_count == 1
    # a retryable write moving it within its shard: done
    r = rc.update_one({"k": 5}, {"$set": {"k": 6}})
    assert r.matched_count == 1 and r.modified_count == 1
    assert rc.replace_one({"k": 7}, {"k": 8, "z": 1}).modified_count == 1
    doc = rc.find_one_and_update({"k": 6}, {"$set": {"k": 9}},
                                 return_document=pymongo.ReturnDocument.AFTER)
    assert doc["k"] == 9
    with retrying.start_session() as s:
        with s.start_transaction():
            rc.update_one({"k": 9}, {"$set": {"k": 10}}, session=s)
    assert sorted((d["_id"], d["k"]) for d in shards[1].rk.mv.find()) == [(1, 10), (3, 8)]
    assert shards[1].rk.mv.find_one({"_id": 3})["z"] == 1
    # an operator the router cannot evaluate goes to the shard, which checks the result
    assert rc.update_one({"k": 8}, {"$inc": {"k": 1}}).modified_count == 1
    assert sorted((d["_id"], d["k"]) for d in shards[1].rk.mv.find()) == [(1, 10), (3, 9)]
    # in a transaction the router moves it: removed from shard1, inserted on shard0
    with retrying.start_session() as s:
        with s.start_transaction():
            r = rc.update_one({"k": 10}, {"$set": {"k": -10}, "$inc": {"n": 1}}, session=s)
            assert r.matched_count == 1 and r.modified_count == 1
            assert rc.find_one({"_id": 1}, session=s)["k"] == -10
            assert rc.replace_one({"k": 9}, {"k": -9, "r": 1}, session=s).modified_count == 1
    assert shards[0].rk.mv.find_one({"_id": 1}) == {"_id": 1, "k": -10, "y": 1, "n": 1}
    assert shards[0].rk.mv.find_one({"_id": 3}) == {"_id": 3, "k": -9, "r": 1}
    assert shards[1].rk.mv.count_documents({}) == 0
    assert sorted((d["_id"], d["k"]) for d in c.find()) == [(1, -10), (2, -5), (3, -9)]
    with retrying.start_session() as s:
        with s.start_transaction():
            before = rc.find_one_and_update({"k": -10}, {"$set": {"k": 20}}, session=s)
            after = rc.find_one_and_replace({"k": -9}, {"k": 21}, session=s,
                                            return_document=pymongo.ReturnDocument.AFTER)
    assert before == {"_id": 1, "k": -10, "y": 1, "n": 1} and after == {"_id": 3, "k": 21}
    assert sorted((d["_id"], d["k"]) for d in shards[1].rk.mv.find()) == [(1, 20), (3, 21)]
    assert shards[0].rk.mv.count_documents({}) == 1


def where(shards, coll, _id):
    return [i for i in (0, 1) if shards[i].rk[coll].find_one({"_id": _id}) is not None]


def test_retryable_write_moves_the_document(mongos, retrying, shards):
    c, rc = mongos.rk.ret, retrying.rk.ret
    c.insert_many([{"_id": i, "k": i} for i in range(1, 9)])  # all on shard1
    # not a retryable write: still mongod's 20
    assert code_of(lambda: c.update_one({"k": 1}, {"$set": {"k": -1}})) == 20
    assert code_of(lambda: c.find_one_and_update({"k": 1}, {"$inc": {"k": -5}})) == 20
    assert code_of(lambda: c.update_one({"k": 1}, [{"$set": {"k": -1}}])) == 20
    # a pipeline is checked once the shard finds it moves the document
    assert code_of(lambda: rc.update_one({"_id": 1}, [{"$set": {"k": -1}}])) == 31025
    assert code_of(lambda: rc.update_many({"k": 1}, [{"$set": {"k": -1}}])) == 72
    assert where(shards, "ret", 1) == [1]
    # $set, $inc, $unset (null sorts below 0), a replacement, a pipeline: each moves it
    r = rc.update_one({"k": 1}, {"$set": {"k": -1}})
    assert (r.matched_count, r.modified_count) == (1, 1)
    assert rc.update_one({"k": 2}, {"$inc": {"k": -10}}).modified_count == 1
    assert rc.update_one({"k": 3}, {"$unset": {"k": ""}}).modified_count == 1
    assert rc.replace_one({"k": 4}, {"k": -4, "r": 1}).modified_count == 1
    assert rc.update_one({"k": 5}, [{"$set": {"k": {"$multiply": ["$k", -1]}}}]).modified_count \
        == 1
    assert sorted((d["_id"], d.get("k")) for d in shards[0].rk.ret.find()) == \
        [(1, -1), (2, -8), (3, None), (4, -4), (5, -5)]
    assert shards[0].rk.ret.find_one({"_id": 4}) == {"_id": 4, "k": -4, "r": 1}
    assert sorted(d["_id"] for d in shards[1].rk.ret.find()) == [6, 7, 8]
    # findAndModify: new returns the moved document, else the one before
    after = rc.find_one_and_update({"k": 6}, {"$inc": {"k": -20, "n": 1}},
                                   return_document=ReturnDocument.AFTER)
    assert after == {"_id": 6, "k": -14, "n": 1}
    assert rc.find_one_and_replace({"k": 7}, {"k": -7}) == {"_id": 7, "k": 7}
    assert shards[0].rk.ret.find_one({"_id": 7}) == {"_id": 7, "k": -7}
    assert rc.update_one({"k": -1}, {"$set": {"k": 1}}).modified_count == 1  # and back
    assert where(shards, "ret", 1) == [1]
    # an upsert whose new document another shard owns is inserted there
    r = rc.update_one({"k": 30}, {"$set": {"k": -30}}, upsert=True)
    assert r.upserted_id is not None and r.matched_count == 0
    assert shards[0].rk.ret.find_one({"_id": r.upserted_id})["k"] == -30
    doc = rc.find_one_and_update({"k": 31}, {"$set": {"k": -31}}, upsert=True,
                                 return_document=ReturnDocument.AFTER)
    assert doc["k"] == -31 and where(shards, "ret", doc["_id"]) == [0]
    # in a batch of more than one statement: mongos's 72, the others applied
    with pytest.raises(BulkWriteError) as e:
        rc.bulk_write([UpdateOne({"k": 8}, {"$set": {"k": -8}}),
                       UpdateOne({"k": -7}, {"$set": {"x": 1}})], ordered=False)
    errs = e.value.details["writeErrors"]
    assert [(w["index"], w["code"]) for w in errs] == [(0, 72)]
    assert "batch of size 1" in errs[0]["errmsg"] and e.value.details["nModified"] == 1
    assert where(shards, "ret", 8) == [1]
    # findAndModify's projection applies to the moved document
    assert rc.find_one_and_update({"k": 8}, {"$set": {"k": -8}}, projection={"_id": 0},
                                  return_document=ReturnDocument.AFTER) == {"k": -8}
    assert where(shards, "ret", 8) == [0]
    assert c.count_documents({}) == 10


def test_a_retried_move_answers_its_first_result(cluster, mongos, shards):
    # a client of its own: a pooled session of another could have used these txnNumbers
    client = pymongo.MongoClient("127.0.0.1", cluster["router"], serverSelectionTimeoutMS=10000)
    db = client.rk
    db.rty.insert_many([{"_id": 1, "k": 1}, {"_id": 2, "k": 2}, {"_id": 3, "k": 3}])
    with client.start_session() as s:
        def twice(*fields):
            cmd = SON(list(fields))
            return db.command(cmd, session=s), db.command(cmd, session=s)

        first, again = twice(("update", "rty"), ("txnNumber", Int64(7)),
                             ("updates", [{"q": {"k": 1}, "u": {"$inc": {"k": -100}}}]))
        assert (first["n"], first["nModified"]) == (again["n"], again["nModified"]) == (1, 1)
        first, again = twice(("findAndModify", "rty"), ("query", {"k": 2}),
                             ("update", {"$inc": {"k": -100}}), ("new", True),
                             ("txnNumber", Int64(8)))
        assert first["value"] == again["value"] == {"_id": 2, "k": -98}
        first, again = twice(("findAndModify", "rty"), ("query", {"k": 3}),
                             ("update", [{"$set": {"k": -3}}]), ("txnNumber", Int64(9)))
        assert first["value"] == again["value"] == {"_id": 3, "k": 3}
        first, again = twice(("update", "rty"), ("txnNumber", Int64(10)),
                             ("updates", [{"q": {"k": 40}, "u": {"$set": {"k": -40}},
                                           "upsert": True}]))
        assert first["upserted"] == again["upserted"] and first["n"] == 1
    client.close()
    # each moved once
    assert sorted((d["_id"], d["k"]) for d in shards[0].rk.rty.find({"_id": {"$lt": 4}})) == \
        [(1, -99), (2, -98), (3, -3)]
    assert shards[0].rk.rty.count_documents({}) == 4
    assert shards[1].rk.rty.count_documents({}) == 0


def test_transaction_moves_with_any_update_form(mongos, retrying, shards):
    c, rc = mongos.rk.txm, retrying.rk.txm
    c.insert_many([{"_id": i, "k": i} for i in range(1, 5)])  # all on shard1
    with retrying.start_session() as s:
        with s.start_transaction():
            assert rc.update_one({"k": 1}, {"$inc": {"k": -10}}, session=s).modified_count == 1
            assert rc.update_one({"k": 2}, [{"$set": {"k": -2}}], session=s).modified_count == 1
            r = rc.update_one({"k": 20}, {"$set": {"k": -20}}, upsert=True, session=s)
            assert r.upserted_id is not None
            doc = rc.find_one_and_update({"k": 3}, {"$inc": {"k": -10}}, session=s,
                                         return_document=ReturnDocument.AFTER)
            assert doc == {"_id": 3, "k": -7}
            assert rc.find_one({"_id": 1}, session=s)["k"] == -9
    assert sorted((d["_id"], d["k"]) for d in shards[0].rk.txm.find({"_id": {"$lt": 5}})) == \
        [(1, -9), (2, -2), (3, -7)]
    assert shards[0].rk.txm.count_documents({"k": -20}) == 1
    assert [d["_id"] for d in shards[1].rk.txm.find()] == [4]
    # a batch of more than one in a transaction: the command fails, the transaction ends
    with retrying.start_session() as s:
        with pytest.raises(OperationFailure) as e:
            with s.start_transaction():
                rc.bulk_write([UpdateOne({"k": 4}, {"$set": {"k": -4}}),
                               UpdateOne({"k": -9}, {"$set": {"x": 1}})], session=s)
        assert e.value.code == 72
    assert where(shards, "txm", 4) == [1] and "x" not in shards[0].rk.txm.find_one({"_id": 1})


def test_a_hashed_key_moves_too(mongos, retrying, shards):
    mongos.admin.command("shardCollection", "rk.hsh", key={"k": "hashed"})
    rc = retrying.rk.hsh
    rc.insert_many([{"_id": i, "k": i} for i in range(20)])
    on = {i: where(shards, "hsh", i) for i in range(20)}
    a = next(i for i in on if on[i] == [0])
    b = next(i for i in on if on[i] == [1])
    assert rc.update_one({"k": a}, {"$set": {"k": b, "moved": True}}).modified_count == 1
    assert where(shards, "hsh", a) == [1] and rc.count_documents({"k": b}) == 2


def test_a_move_loses_no_concurrent_update(mongos, retrying, shards):
    import threading
    c, rc = mongos.rk.ret, retrying.rk.ret
    c.insert_one({"_id": 50, "k": 50, "x": 0})
    done, counted = threading.Event(), [0]

    def bump():  # a write meeting the move's open transaction may give up: 112, not counted
        while not done.is_set():
            try:
                counted[0] += c.update_one({"_id": 50, "k": {"$in": [50, -50]}},
                                           {"$inc": {"x": 1}}).modified_count
            except WriteError as e:
                assert e.code == 112

    t = threading.Thread(target=bump)
    t.start()
    try:
        for k in (-50, 50, -50):  # while x changes under it
            assert rc.update_one({"k": -k}, {"$set": {"k": k}}).modified_count == 1
    finally:
        done.set()
        t.join()
    assert where(shards, "ret", 50) == [0]
    assert shards[0].rk.ret.find_one({"_id": 50})["x"] == counted[0] > 0
