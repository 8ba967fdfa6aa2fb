"""
Collations through pymongo: find (filter and sort), count, distinct, update,
delete, findAndModify, bulk writes and aggregate under an explicit collation;
a collection's default collation (create, listCollections, used when an
operation gives none, overridden by {locale: "simple"}); indexes with a
collation (listed, used only by queries with the same collation, unique under
it); and MongoDB's errors for bad collation documents.
"""

import pytest
from pymongo import ASCENDING, DeleteOne, UpdateOne
from pymongo.collation import Collation
from pymongo.errors import DuplicateKeyError, OperationFailure

CI = Collation(locale="en_US", strength=2)  # case-insensitive


def winning(coll, flt, collation=None, sort=None):
    cmd = {"find": coll.name, "filter": flt}
    if collation is not None:
        cmd["collation"] = collation
    if sort is not None:
        cmd["sort"] = sort
    plan = coll.database.command("explain", cmd)["queryPlanner"]["winningPlan"]
    return plan.get("inputStage", plan)


def test_find_filter_and_sort(db):
    c = db.words
    c.insert_many([{"_id": 1, "x": "ping"}, {"_id": 2, "x": "PING"}, {"_id": 3, "x": "pong"},
                   {"_id": 4, "x": "b"}, {"_id": 5, "x": "A"}, {"_id": 6, "x": 7}])
    assert [d["_id"] for d in c.find({"x": "PING"})] == [2]
    assert sorted(d["_id"] for d in c.find({"x": "PING"}, collation=CI)) == [1, 2]
    assert sorted(d["_id"] for d in c.find({"x": {"$in": ["Pong", "a"]}}, collation=CI)) == [3, 5]
    assert sorted(d["_id"] for d in c.find({"x": {"$gt": "B"}}, collation=CI)) == [1, 2, 3]
    # binary puts capitals first; a collation sorts by letter
    assert [d["x"] for d in c.find({"x": {"$in": ["b", "A"]}}).sort("x", 1)] == ["A", "b"]
    srt = [d["x"] for d in c.find({"_id": {"$in": [4, 5]}}, collation=CI).sort("x", -1)]
    assert srt == ["b", "A"]
    # other types are unaffected
    assert [d["_id"] for d in c.find({"x": 7}, collation=CI)] == [6]
    assert c.count_documents({"x": "PING"}, collation=CI) == 2
    assert db.command("count", "words", query={"x": "ping"}, collation=CI.document)["n"] == 2


def test_strings_inside_arrays_and_documents(db):
    c = db.nested
    c.insert_many([{"_id": 1, "a": ["Cat", "dog"]}, {"_id": 2, "d": {"k": "CAT"}}])
    assert [d["_id"] for d in c.find({"a": "cat"}, collation=CI)] == [1]
    assert [d["_id"] for d in c.find({"d": {"k": "cat"}}, collation=CI)] == [2]
    assert list(c.find({"a": "cat"})) == []


def test_numeric_ordering_and_case_first(db):
    c = db.nums
    c.insert_many([{"_id": i, "s": s} for i, s in enumerate(["10", "9", "100", "a", "A"])])
    num = Collation(locale="en", numericOrdering=True)
    got = [d["s"] for d in c.find({"s": {"$in": ["10", "9", "100"]}}, collation=num).sort("s", 1)]
    assert got == ["9", "10", "100"]
    upper = Collation(locale="en", caseFirst="upper")
    got = [d["s"] for d in c.find({"s": {"$in": ["a", "A"]}}, collation=upper).sort("s", 1)]
    assert got == ["A", "a"]


def test_distinct_dedupes_under_collation(db):
    c = db.dist
    c.insert_many([{"_id": 1, "s": "PING"}, {"_id": 2, "s": "ping"}, {"_id": 3, "s": "pong"}])
    assert sorted(c.distinct("s")) == ["PING", "ping", "pong"]
    got = db.command("distinct", "dist", key="s", collation=CI.document)["values"]
    assert len(got) == 2 and got[1] == "pong" and got[0].lower() == "ping"


def test_update_delete_find_and_modify_bulk(db):
    c = db.writes
    c.insert_many([{"_id": i, "x": s} for i, s in enumerate(["ping", "PING", "Ping", "pong"])])
    assert c.update_one({"x": "PING"}, {"$set": {"y": 1}}, collation=CI).modified_count == 1
    assert c.update_many({"x": "PING"}, {"$set": {"z": 1}}, collation=CI).modified_count == 3
    assert c.update_many({"x": "PING"}, {"$set": {"w": 1}}).modified_count == 1
    doc = c.find_one_and_update({"x": "PONG"}, {"$set": {"f": 1}}, collation=CI)
    assert doc["_id"] == 3
    r = c.bulk_write([UpdateOne({"x": "PONG"}, {"$set": {"g": 1}}, collation=CI),
                      DeleteOne({"x": "PONG"}, collation=CI)])
    assert r.modified_count == 1 and r.deleted_count == 1
    assert c.delete_many({"x": "ping"}, collation=CI).deleted_count == 3
    assert c.count_documents({}) == 0


def test_array_filters_and_pull(db):
    c = db.arr
    c.insert_one({"_id": 1, "tags": ["Red", "blue", "RED"], "sub": [{"k": "A", "n": 0}]})
    c.update_one({"_id": 1}, {"$pull": {"sub": {"k": "a"}}}, collation=CI)
    c.update_one({"_id": 1}, {"$set": {"tags.$[t]": "x"}}, array_filters=[{"t": "red"}],
                 collation=CI)
    doc = c.find_one({"_id": 1})
    assert doc["sub"] == [] and doc["tags"] == ["x", "blue", "x"]
    c.update_one({"_id": 1}, {"$addToSet": {"tags": "BLUE"}}, collation=CI)
    c.update_one({"_id": 1}, {"$pull": {"tags": "X"}}, collation=CI)
    assert c.find_one({"_id": 1})["tags"] == ["blue"]
    c.update_one({"_id": 1}, {"$addToSet": {"tags": "BLUE"}})
    c.update_one({"_id": 1}, {"$pullAll": {"tags": ["Blue"]}}, collation=CI)
    assert c.find_one({"_id": 1})["tags"] == []
    c.update_one({"_id": 1}, {"$set": {"tags": ["x", "blue", "x"]}})
    got = c.find_one_and_update({"_id": 1}, {"$set": {"tags.$[t]": "y"}},
                                array_filters=[{"t": "BLUE"}], collation=CI, return_document=True)
    assert got["tags"] == ["x", "y", "x"]


def test_aggregate(db):
    c = db.agg
    c.insert_many([{"_id": 1, "x": "ping"}, {"_id": 2, "x": "PING"}, {"_id": 3, "x": "b"},
                   {"_id": 4, "x": "A"}])
    got = list(c.aggregate([{"$match": {"x": "PING"}}, {"$count": "n"}], collation=CI))
    assert got == [{"n": 2}]
    groups = list(c.aggregate([{"$group": {"_id": "$x", "n": {"$sum": 1}}},
                               {"$sort": {"_id": 1}}], collation=CI))
    assert [g["n"] for g in groups] == [1, 1, 2]
    assert [g["_id"] for g in groups][:2] == ["A", "b"]
    db.agg_other.insert_many([{"_id": 1, "k": "PING"}, {"_id": 2, "k": "b"}])
    got = list(c.aggregate([{"$match": {"_id": 1}},
                            {"$lookup": {"from": "agg_other", "localField": "x",
                                         "foreignField": "k", "as": "o"}}], collation=CI))
    assert [o["_id"] for o in got[0]["o"]] == [1]
    got = list(c.aggregate([{"$match": {"_id": 1}},
                            {"$lookup": {"from": "agg_other", "localField": "x",
                                         "foreignField": "k", "as": "o"}}]))
    assert got[0]["o"] == []
    # expressions and accumulators compare under it too
    got = list(c.aggregate([{"$match": {"$expr": {"$eq": ["$x", "ping"]}}}, {"$count": "n"}],
                           collation=CI))
    assert got == [{"n": 2}]
    got = list(c.aggregate([{"$project": {"e": {"$eq": ["$x", "PING"]},
                                          "i": {"$in": ["$x", ["a"]]}}},
                            {"$group": {"_id": None, "e": {"$sum": {"$cond": ["$e", 1, 0]}},
                                        "i": {"$sum": {"$cond": ["$i", 1, 0]}}}}], collation=CI))
    assert got[0]["e"] == 2 and got[0]["i"] == 1
    db.agg_acc.insert_many([{"x": "a"}, {"x": "B"}, {"x": "A"}])
    acc = [{"$group": {"_id": None, "mx": {"$max": "$x"}, "set": {"$addToSet": "$x"}}}]
    got = list(db.agg_acc.aggregate(acc, collation=CI))
    assert got[0]["mx"] == "B" and len(got[0]["set"]) == 2
    got = list(db.agg_acc.aggregate(acc))
    assert got[0]["mx"] == "a" and len(got[0]["set"]) == 3
    assert list(c.find({"$expr": {"$eq": ["$x", "PING"]}}, collation=CI).sort("_id", 1))[0]["_id"] == 1
    ex = [{"$match": {"_id": 1}},
          {"$project": {"_id": 0,
                        "u": {"$size": {"$setUnion": [["a", "A", "b"], ["B"]]}},
                        "i": {"$indexOfArray": [["x", "PING"], "ping"]},
                        "s": {"$sortArray": {"input": ["b", "A", "c"], "sortBy": 1}},
                        "m": {"$max": [["a", "B"]]}}}]
    assert list(c.aggregate(ex, collation=CI)) == [{"u": 2, "i": 1, "s": ["A", "b", "c"],
                                                    "m": "B"}]
    assert list(c.aggregate(ex)) == [{"u": 4, "i": -1, "s": ["A", "b", "c"], "m": "a"}]
    # $match after another stage also uses it
    got = list(c.aggregate([{"$project": {"x": 1}}, {"$match": {"x": "Ping"}}], collation=CI))
    assert len(got) == 2


def test_collection_default_collation(db):
    db.create_collection("dflt", collation=CI)
    info = next(db.list_collections(filter={"name": "dflt"}))
    spec = info["options"]["collation"]
    assert spec["locale"] == "en_US" and spec["strength"] == 2
    assert spec["caseLevel"] is False and spec["numericOrdering"] is False
    c = db.dflt
    c.insert_many([{"_id": 1, "x": "ping"}, {"_id": 2, "x": "PING"}])
    assert c.count_documents({"x": "PING"}) == 2
    assert sorted(d["_id"] for d in c.find({"x": "ping"})) == [1, 2]
    simple = Collation(locale="simple")
    assert [d["_id"] for d in c.find({"x": "ping"}, collation=simple)] == [1]
    assert c.delete_many({"x": "PiNg"}).deleted_count == 2
    # an index made without a collation takes the collection's
    c.create_index("x")
    ix = [i for i in c.list_indexes() if i["name"] == "x_1"][0]
    assert ix["collation"]["strength"] == 2


def test_string_ids_under_collation(db):
    c = db.ids
    c.insert_many([{"_id": "abc"}, {"_id": "ABD"}])
    assert [d["_id"] for d in c.find({"_id": "ABC"}, collation=CI)] == ["abc"]
    assert list(c.find({"_id": "ABC"})) == []


def test_index_with_collation(db):
    c = db.ixc
    c.insert_many([{"_id": i, "x": s} for i, s in enumerate(["ping", "PING", "pong", "b"])])
    c.create_index([("x", ASCENDING)], name="x_ci", collation=CI)
    ix = [i for i in c.list_indexes() if i["name"] == "x_ci"][0]
    assert ix["collation"]["locale"] == "en_US" and ix["collation"]["strength"] == 2
    # same collation: the index is used and finds both spellings
    assert winning(c, {"x": "PING"}, CI.document)["stage"] == "IXSCAN"
    assert sorted(d["_id"] for d in c.find({"x": "PING"}, collation=CI)) == [0, 1]
    assert sorted(d["_id"] for d in c.find({"x": {"$in": ["PING", "ping"]}}, collation=CI)) == [0, 1]
    got = [d["x"] for d in c.find({"x": {"$gte": "B", "$lt": "PONG"}}, collation=CI).sort("x", 1)]
    assert got[0] == "b" and sorted(got[1:]) == ["PING", "ping"]
    # binary query: never the collated index (it would miss or mis-order)
    assert winning(c, {"x": "PING"})["stage"] != "IXSCAN"
    assert [d["_id"] for d in c.find({"x": "PING"})] == [1]
    # hinted anyway, it is scanned whole and the results are still right
    assert [d["_id"] for d in c.find({"x": "PING"}).hint("x_ci")] == [1]
    e = db.command("explain", {"find": c.name, "filter": {"x": "PING"}, "hint": "x_ci"})
    assert e["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "x_ci"
    # a second index on the same key with another collation is a different index
    c.create_index([("x", ASCENDING)], name="x_bin")
    assert winning(c, {"x": "PING"})["indexName"] == "x_bin"
    assert [d["_id"] for d in c.find({"x": "PING"})] == [1]


def test_unique_index_under_collation(db):
    c = db.uniq
    c.create_index("name", unique=True, collation=CI)
    c.insert_one({"name": "Alice"})
    with pytest.raises(DuplicateKeyError):
        c.insert_one({"name": "ALICE"})
    c.insert_one({"name": "Bob"})


def test_bad_collations(db):
    c = db.bad
    c.insert_one({"x": "a"})
    cases = [({"strength": 2}, 40414), ({"locale": "en", "bogus": 1}, 40415),
             ({"locale": "en", "strength": 9}, 9), ({"locale": "en", "caseFirst": "x"}, 9),
             ({"locale": "en", "numericOrdering": "yes"}, 14), ({"locale": "zz_QQ"}, 2),
             ({"locale": "simple", "strength": 1}, 9)]
    for spec, code in cases:
        with pytest.raises(OperationFailure) as e:
            db.command("find", "bad", filter={}, collation=spec)
        assert e.value.code == code, spec
    with pytest.raises(OperationFailure) as e:
        db.command("find", "bad", filter={}, collation="en")
    assert e.value.code == 14
    with pytest.raises(OperationFailure) as e:
        db.create_collection("bad2", collation={"locale": "en", "strength": 0})
    assert e.value.code == 9
    with pytest.raises(OperationFailure) as e:
        c.create_index("x", collation={"locale": "nope_XX"})
    assert e.value.code == 2


def test_defaults_and_collated_index_survive_restart(fresh_server):
    s = fresh_server
    s.start()
    c = s.client()
    d = c.restart_db
    d.create_collection("dflt", collation=CI)
    d.dflt.insert_many([{"_id": 1, "x": "ping"}, {"_id": 2, "x": "PING"}])
    d.plain.insert_many([{"_id": 1, "x": "ping"}, {"_id": 2, "x": "PING"}])
    d.plain.create_index("x", collation=CI, name="x_ci")
    c.close()
    s.restart()
    c = s.client()
    d = c.restart_db
    assert d.dflt.count_documents({"x": "Ping"}) == 2
    assert d.plain.count_documents({"x": "Ping"}) == 0
    assert winning(d.plain, {"x": "Ping"}, CI.document)["stage"] == "IXSCAN"
    assert d.plain.count_documents({"x": "Ping"}, collation=CI) == 2
    c.close()
