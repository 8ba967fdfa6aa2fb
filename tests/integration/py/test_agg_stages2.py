"""
The aggregation stages added after the first set: $unionWith, $graphLookup,
$setWindowFields, $densify, $fill and $indexStats, against one standalone
server.  Results are compared with what MongoDB's manual shows for its own
examples; bad specifications with mongod 7.0's error codes; memory limits set
small at run time with setParameter.
"""

import datetime

import pymongo
import pytest
from pymongo.errors import OperationFailure

from sabled import Sabled


def agg(coll, pipeline, **kw):
    return list(coll.aggregate(pipeline, **kw))


def code_of(fn):
    with pytest.raises(OperationFailure) as ei:
        fn()
    return ei.value.code


def set_param(db, name, value):
    return db.client.admin.command("setParameter", 1, **{name: value})["was"]


# ---- $unionWith ------------------------------------------------------------------------

@pytest.fixture
def supplies(db):
    db.suppliers.insert_many([
        {"_id": 1, "supplier": "Aardvark and Sons", "state": "Texas"},
        {"_id": 2, "supplier": "Bears Run Amok.", "state": "Colorado"},
        {"_id": 3, "supplier": "Squid Mark Inc. ", "state": "Rhode Island"}])
    db.warehouses.insert_many([
        {"_id": 1, "warehouse": "A", "region": "West", "state": "California"},
        {"_id": 2, "warehouse": "B", "region": "Central", "state": "Colorado"},
        {"_id": 3, "warehouse": "C", "region": "East", "state": "Florida"}])
    return db


def test_union_with_pipeline_manual_example(supplies):
    r = agg(supplies.suppliers, [
        {"$project": {"state": 1, "_id": 0}},
        {"$unionWith": {"coll": "warehouses", "pipeline": [{"$project": {"state": 1, "_id": 0}}]}}])
    assert [d["state"] for d in r] == ["Texas", "Colorado", "Rhode Island", "California",
                                       "Colorado", "Florida"]
    r = agg(supplies.suppliers, [
        {"$project": {"state": 1, "_id": 0}},
        {"$unionWith": {"coll": "warehouses", "pipeline": [{"$project": {"state": 1, "_id": 0}}]}},
        {"$group": {"_id": "$state"}}, {"$sort": {"_id": 1}}])
    assert [d["_id"] for d in r] == ["California", "Colorado", "Florida", "Rhode Island", "Texas"]


def test_union_with_string_missing_collection_and_sales_example(db):
    years = {2017: [("Store A", "Chocolates", 150), ("Store B", "Chocolates", 50),
                    ("Store A", "Cookies", 100), ("Store B", "Pie", 5)],
             2018: [("Store A", "Cheese", 30), ("Store B", "Chocolates", 125),
                    ("Store B", "Pie", 6)],
             2019: [("Store A", "Cheese", 50), ("Store B", "Cheese", 20),
                    ("Store A", "Chocolates", 125), ("Store B", "Cookies", 200)]}
    for y, rows in years.items():
        db["sales_%d" % y].insert_many([{"store": s, "item": i, "quantity": q}
                                        for s, i, q in rows])
    r = agg(db.sales_2017, [{"$unionWith": "sales_2018"}, {"$unionWith": "sales_2019"},
                            {"$unionWith": "sales_2020"},  # does not exist: nothing
                            {"$group": {"_id": "$item", "total": {"$sum": "$quantity"}}},
                            {"$sort": {"total": -1}}])
    assert r == [{"_id": "Chocolates", "total": 450}, {"_id": "Cookies", "total": 300},
                 {"_id": "Cheese", "total": 100}, {"_id": "Pie", "total": 11}]
    assert len(agg(db.sales_2017, [{"$unionWith": "sales_2017"}])) == 8


def test_union_with_view_nested_documents_and_lookup(supplies):
    db = supplies
    db.command("create", "west", viewOn="warehouses", pipeline=[{"$match": {"region": "West"}}])
    r = agg(db.suppliers, [{"$match": {"_id": 1}}, {"$unionWith": "west"}])
    assert [d.get("supplier", d.get("warehouse")) for d in r] == ["Aardvark and Sons", "A"]
    # nested: the inner $unionWith runs inside the outer's sub-pipeline
    r = agg(db.suppliers, [{"$match": {"_id": 1}}, {"$project": {"_id": 1}},
                           {"$unionWith": {"coll": "warehouses", "pipeline": [
                               {"$match": {"_id": 2}}, {"$project": {"_id": 1}},
                               {"$unionWith": {"coll": "west", "pipeline": [
                                   {"$project": {"_id": 0, "w": "$warehouse"}}]}}]}}])
    assert r == [{"_id": 1}, {"_id": 2}, {"w": "A"}]
    # collectionless: a sub-pipeline starting with $documents
    r = agg(db.suppliers, [{"$match": {"_id": 3}}, {"$project": {"_id": 1}},
                           {"$unionWith": {"pipeline": [{"$documents": [{"x": 1}, {"x": 2}]}]}}])
    assert r == [{"_id": 3}, {"x": 1}, {"x": 2}]
    # inside $lookup's pipeline, and $lookup from a view
    r = agg(db.suppliers, [{"$match": {"_id": 2}},
                           {"$lookup": {"from": "warehouses", "let": {"s": "$state"}, "pipeline": [
                               {"$match": {"$expr": {"$eq": ["$state", "$$s"]}}},
                               {"$unionWith": {"coll": "west"}},
                               {"$project": {"_id": 0, "warehouse": 1}}], "as": "w"}},
                           {"$lookup": {"from": "west", "localField": "_id",
                                        "foreignField": "_id", "as": "v"}}])
    assert r[0]["w"] == [{"warehouse": "B"}, {"warehouse": "A"}]
    assert r[0]["v"] == []


@pytest.mark.parametrize("stage,code", [
    (5, 9),
    ({"coll": "x", "foo": 1}, 40415),
    ({"coll": 5}, 14),
    ({"coll": "x", "pipeline": {}}, 14),
    ({"pipeline": [{"$match": {}}]}, 9),
    ({"coll": "x", "pipeline": [{"$out": "y"}]}, 31441),
    ({"coll": "x", "pipeline": [{"$merge": "y"}]}, 31441),
    ({"coll": "x", "pipeline": [{"$bogus": 1}]}, 40324),
])
def test_union_with_errors(db, stage, code):
    db.a.insert_one({})
    assert code_of(lambda: agg(db.a, [{"$unionWith": stage}])) == code


# ---- $graphLookup ------------------------------------------------------------------------

@pytest.fixture
def employees(db):
    db.employees.insert_many([
        {"_id": 1, "name": "Dev"},
        {"_id": 2, "name": "Eliot", "reportsTo": "Dev"},
        {"_id": 3, "name": "Ron", "reportsTo": "Eliot"},
        {"_id": 4, "name": "Andrew", "reportsTo": "Eliot"},
        {"_id": 5, "name": "Asya", "reportsTo": "Ron"},
        {"_id": 6, "name": "Dan", "reportsTo": "Andrew"}])
    return db.employees


def test_graph_lookup_reporting_hierarchy(employees):
    r = agg(employees, [{"$graphLookup": {"from": "employees", "startWith": "$reportsTo",
                                          "connectFromField": "reportsTo",
                                          "connectToField": "name",
                                          "as": "reportingHierarchy"}}])
    names = {d["name"]: sorted(x["name"] for x in d["reportingHierarchy"]) for d in r}
    assert names == {"Dev": [], "Eliot": ["Dev"], "Ron": ["Dev", "Eliot"],
                     "Andrew": ["Dev", "Eliot"], "Asya": ["Dev", "Eliot", "Ron"],
                     "Dan": ["Andrew", "Dev", "Eliot"]}


@pytest.fixture
def airports(db):
    db.airports.insert_many([
        {"_id": 0, "airport": "JFK", "connects": ["BOS", "ORD"]},
        {"_id": 1, "airport": "BOS", "connects": ["JFK", "PWM"]},
        {"_id": 2, "airport": "ORD", "connects": ["JFK"]},
        {"_id": 3, "airport": "PWM", "connects": ["BOS", "LHR"]},
        {"_id": 4, "airport": "LHR", "connects": ["PWM"]}])
    db.travelers.insert_many([
        {"_id": 1, "name": "Dev", "nearestAirport": "JFK"},
        {"_id": 2, "name": "Eliot", "nearestAirport": "JFK"},
        {"_id": 3, "name": "Jeff", "nearestAirport": "BOS"}])
    return db


def test_graph_lookup_max_depth_depth_field_cycles(airports):
    r = agg(airports.travelers, [{"$graphLookup": {
        "from": "airports", "startWith": "$nearestAirport", "connectFromField": "connects",
        "connectToField": "airport", "maxDepth": 2, "depthField": "numConnections",
        "as": "destinations"}}])
    got = {d["name"]: sorted((x["airport"], x["numConnections"]) for x in d["destinations"])
           for d in r}
    assert got["Dev"] == [("BOS", 1), ("JFK", 0), ("ORD", 1), ("PWM", 2)]
    assert got["Jeff"] == [("BOS", 0), ("JFK", 1), ("LHR", 2), ("ORD", 2), ("PWM", 1)]
    assert all(isinstance(x["numConnections"], int) for d in r for x in d["destinations"])
    r = agg(airports.travelers, [{"$match": {"_id": 1}}, {"$graphLookup": {
        "from": "airports", "startWith": "$nearestAirport", "connectFromField": "connects",
        "connectToField": "airport", "maxDepth": 0, "as": "d"}}])
    assert [x["airport"] for x in r[0]["d"]] == ["JFK"]
    # an array startWith is several starting points; cycles end (every airport once)
    r = agg(airports.travelers, [{"$match": {"_id": 1}}, {"$graphLookup": {
        "from": "airports", "startWith": ["LHR", "ORD"], "connectFromField": "connects",
        "connectToField": "airport", "as": "d"}}])
    assert sorted(x["_id"] for x in r[0]["d"]) == [0, 1, 2, 3, 4]


def test_graph_lookup_restrict_search_with_match(db):
    db.people.insert_many([
        {"_id": 1, "name": "Tanya Jordan", "friends": ["Shirley Soto", "Terry Hawkins", "Carole Hale"],
         "hobbies": ["tennis", "unicycling", "golf"]},
        {"_id": 2, "name": "Carole Hale", "friends": ["Joseph Dennis", "Tanya Jordan", "Terry Hawkins"],
         "hobbies": ["archery", "golf", "woodworking"]},
        {"_id": 3, "name": "Terry Hawkins", "friends": ["Tanya Jordan", "Carole Hale", "Angelo Ward"],
         "hobbies": ["knitting", "frisbee"]},
        {"_id": 4, "name": "Joseph Dennis", "friends": ["Angelo Ward", "Carole Hale"],
         "hobbies": ["tennis", "golf", "topiary"]},
        {"_id": 5, "name": "Angelo Ward", "friends": ["Terry Hawkins", "Shirley Soto", "Joseph Dennis"],
         "hobbies": ["travel", "ceramics", "golf"]},
        {"_id": 6, "name": "Shirley Soto", "friends": ["Angelo Ward", "Tanya Jordan", "Carole Hale"],
         "hobbies": ["frisbee", "set theory"]}])
    db.people.create_index("name")
    r = agg(db.people, [{"$match": {"name": "Tanya Jordan"}},
                        {"$graphLookup": {"from": "people", "startWith": "$friends",
                                          "connectFromField": "friends", "connectToField": "name",
                                          "as": "golfers",
                                          "restrictSearchWithMatch": {"hobbies": "golf"}}},
                        {"$project": {"name": 1, "friends": 1,
                                      "connections who play golf": "$golfers.name"}}])
    assert sorted(r[0]["connections who play golf"]) == [
        "Angelo Ward", "Carole Hale", "Joseph Dennis", "Tanya Jordan"]


def test_graph_lookup_nested_fields_null_and_view(db):
    db.g.insert_many([{"_id": 1, "a": {"k": 1}, "to": [{"k": 2}, {"k": 3}]},
                      {"_id": 2, "a": {"k": 2}, "to": []},
                      {"_id": 3, "a": {"k": 3}, "to": [{"k": None}]},
                      {"_id": 4, "x": 1}])
    r = agg(db.g, [{"$match": {"_id": 1}},
                   {"$graphLookup": {"from": "g", "startWith": "$a.k", "connectFromField": "to.k",
                                     "connectToField": "a.k", "as": "out.found"}}])
    # null in the frontier does not match documents missing the field (_id 4)
    assert sorted(x["_id"] for x in r[0]["out"]["found"]) == [1, 2, 3]
    db.command("create", "gv", viewOn="g", pipeline=[{"$match": {"_id": {"$lte": 2}}}])
    r = agg(db.g, [{"$match": {"_id": 1}},
                   {"$graphLookup": {"from": "gv", "startWith": "$a.k", "connectFromField": "to.k",
                                     "connectToField": "a.k", "as": "f"}}])
    assert sorted(x["_id"] for x in r[0]["f"]) == [1, 2]


def test_graph_lookup_memory_limit(db):
    db.big.insert_many([{"_id": i, "n": i, "next": i + 1, "pad": "x" * 1000} for i in range(200)])
    was = set_param(db, "internalDocumentSourceGraphLookupMaxMemoryBytes", 50000)
    try:
        spec = {"from": "big", "startWith": 0, "connectFromField": "next",
                "connectToField": "n", "as": "chain"}
        for disk in (True, False):  # mongod 7.0 never spills it
            assert code_of(lambda: agg(db.big, [{"$limit": 1}, {"$graphLookup": spec}],
                                       allowDiskUse=disk)) == 40099
        spec["maxDepth"] = 10
        assert len(agg(db.big, [{"$limit": 1}, {"$graphLookup": spec}])[0]["chain"]) == 11
    finally:
        set_param(db, "internalDocumentSourceGraphLookupMaxMemoryBytes", was)


GL = {"from": "f", "startWith": "$x", "connectFromField": "a", "connectToField": "b", "as": "o"}


@pytest.mark.parametrize("stage,code", [
    (4, 9),
    (dict(GL, maxDepth="s"), 40100),
    (dict(GL, maxDepth=-1), 40101),
    (dict(GL, maxDepth=1.5), 40102),
    (dict(GL, restrictSearchWithMatch=1), 40185),
    (dict(GL, as_=1), 40104),
    (dict(GL, connectToField=1), 40103),
    ({k: v for k, v in GL.items() if k != "startWith"}, 40105),
    ({k: v for k, v in GL.items() if k != "from"}, 40105),
    (dict(GL, restrictSearchWithMatch={"$where": "true"}), 2),
    (dict(GL, restrictSearchWithMatch={"a": {"$bogus": 1}}), 2),
])
def test_graph_lookup_errors(db, stage, code):
    db.a.insert_one({"x": 1})
    db.f.insert_one({"a": 1, "b": 1})
    assert code_of(lambda: agg(db.a, [{"$graphLookup": stage}])) == code


def test_graph_lookup_foreign_without_id_fails(db):
    db.a.insert_one({"x": 1})
    db.command("create", "fv", viewOn="a", pipeline=[{"$project": {"_id": 0}}])
    assert code_of(lambda: agg(db.a, [{"$graphLookup": dict(GL, **{"from": "fv",
                                                                   "connectToField": "x"})}])) == 40271


# ---- the other collection's read privilege ------------------------------------------------

@pytest.fixture(scope="module")
def auth_server():
    s = Sabled()
    try:
        s.start(["--auth"])
        c = s.client()
        c.admin.command("createUser", "root", pwd="rootpw", roles=["root"])
        c.close()
        yield s
    finally:
        s.cleanup()


def test_foreign_reads_need_find(auth_server):
    url = "mongodb://%s:%s@127.0.0.1:%d/?authSource=%s"
    root = pymongo.MongoClient(url % ("root", "rootpw", auth_server.port, "admin"))
    try:
        d = root.privs
        d.a.insert_one({"_id": 1, "x": 1})
        d.b.insert_one({"_id": 1, "y": 1})
        d.command("createRole", "onlyA", privileges=[
            {"resource": {"db": "privs", "collection": "a"}, "actions": ["find"]}], roles=[])
        d.command("createUser", "u", pwd="upw", roles=["onlyA"])
        u = pymongo.MongoClient(url % ("u", "upw", auth_server.port, "privs"))
        ua = u.privs.a
        assert agg(ua, [{"$unionWith": {"pipeline": [{"$documents": [{"z": 1}]}]}}]) == [
            {"_id": 1, "x": 1}, {"z": 1}]
        for stage in ({"$unionWith": "b"}, {"$unionWith": {"coll": "b", "pipeline": []}},
                      {"$lookup": {"from": "b", "localField": "x", "foreignField": "y",
                                   "as": "o"}},
                      {"$graphLookup": {"from": "b", "startWith": "$x", "connectFromField": "y",
                                        "connectToField": "y", "as": "o"}},
                      {"$facet": {"f": [{"$unionWith": "b"}]}},
                      {"$unionWith": {"coll": "a", "pipeline": [{"$unionWith": "b"}]}}):
            assert code_of(lambda: agg(ua, [stage])) == 13, stage
        d.command("grantPrivilegesToRole", "onlyA", privileges=[
            {"resource": {"db": "privs", "collection": "b"}, "actions": ["find"]}])
        assert len(agg(ua, [{"$unionWith": "b"}])) == 2
        u.close()
    finally:
        root.close()
