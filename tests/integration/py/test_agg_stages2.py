"""
The aggregation stages added after the first set: $unionWith, $graphLookup,
$setWindowFields, $densify, $fill and $indexStats, against one standalone
server.  Results are compared with what MongoDB's manual shows for its own
examples; bad specifications with mongod 7.0's error codes; memory limits set
small at run time with setParameter.
"""

import datetime

import pymongo
from bson.int64 import Int64
import pytest

from sabled import Sabled
from checks import agg, code_of


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
                      {"$lookup": {"from": {"db": "privs", "coll": "b"}, "localField": "x",
                                   "foreignField": "y", "as": "o"}},
                      {"$unionWith": {"coll": "a", "pipeline": [{"$unionWith": "b"}]}}):
            assert code_of(lambda: agg(ua, [stage])) == 13, stage
        d.command("grantPrivilegesToRole", "onlyA", privileges=[
            {"resource": {"db": "privs", "collection": "b"}, "actions": ["find"]}])
        assert len(agg(ua, [{"$unionWith": "b"}])) == 2
        u.close()
    finally:
        root.close()


# ---- $setWindowFields ----------------------------------------------------------------------

def D(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S")


@pytest.fixture
def cakes(db):
    db.cakeSales.insert_many([
        {"_id": 0, "type": "chocolate", "orderDate": D("2020-05-18T14:10:30"), "state": "CA",
         "price": 13, "quantity": 120},
        {"_id": 1, "type": "chocolate", "orderDate": D("2021-03-20T11:30:05"), "state": "WA",
         "price": 14, "quantity": 140},
        {"_id": 2, "type": "vanilla", "orderDate": D("2021-01-11T06:31:15"), "state": "CA",
         "price": 12, "quantity": 145},
        {"_id": 3, "type": "vanilla", "orderDate": D("2020-02-08T13:13:23"), "state": "WA",
         "price": 13, "quantity": 104},
        {"_id": 4, "type": "strawberry", "orderDate": D("2019-05-18T16:09:01"), "state": "CA",
         "price": 41, "quantity": 162},
        {"_id": 5, "type": "strawberry", "orderDate": D("2019-01-08T06:12:03"), "state": "WA",
         "price": 43, "quantity": 134}])
    return db.cakeSales


def swf(coll, spec, field, **kw):
    return [(d["_id"], d[field]) for d in agg(coll, [{"$setWindowFields": spec}], **kw)]


def test_window_running_sum_and_moving_avg(cakes):
    assert swf(cakes, {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": {
        "q": {"$sum": "$quantity", "window": {"documents": ["unbounded", "current"]}}}}, "q") == [
        (4, 162), (0, 282), (2, 427), (5, 134), (3, 238), (1, 378)]
    assert swf(cakes, {"partitionBy": {"$year": "$orderDate"}, "sortBy": {"orderDate": 1},
                       "output": {"q": {"$sum": "$quantity",
                                        "window": {"documents": ["unbounded", "current"]}}}},
               "q") == [(5, 134), (4, 296), (3, 104), (0, 224), (2, 145), (1, 285)]
    assert swf(cakes, {"partitionBy": {"$year": "$orderDate"}, "sortBy": {"orderDate": 1},
                       "output": {"a": {"$avg": "$quantity", "window": {"documents": [-1, 0]}}}},
               "a") == [(5, 134), (4, 148), (3, 104), (0, 112), (2, 145), (1, 142.5)]
    # no window: the whole partition; no sortBy: input order kept
    r = agg(cakes, [{"$setWindowFields": {"partitionBy": "$state", "output": {
        "t": {"$sum": "$quantity"}, "n": {"$count": {}}, "mx": {"$max": "$price"},
        "mn": {"$min": "$price"}, "f": {"$first": "$type"}, "l": {"$last": "$type"},
        "s": {"$addToSet": "$type"}, "p": {"$push": "$price"}}}}])
    ca = [d for d in r if d["state"] == "CA"]
    assert [d["_id"] for d in ca] == [0, 2, 4]
    assert {(d["t"], d["n"], d["mx"], d["mn"], d["f"], d["l"]) for d in ca} == {
        (427, 3, 41, 12, "chocolate", "strawberry")}
    assert sorted(ca[0]["s"]) == ["chocolate", "strawberry", "vanilla"] and ca[0]["p"] == [13, 12, 41]


def test_window_range_with_units(cakes):
    spec = {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": {
        "recent": {"$push": "$orderDate", "window": {"range": ["unbounded", 10], "unit": "month"}}}}
    r = dict(swf(cakes, spec, "recent"))
    assert r[4] == [D("2019-05-18T16:09:01")]
    assert len(r[0]) == 3 and len(r[2]) == 3 and len(r[1]) == 3
    assert r[3] == [D("2019-01-08T06:12:03"), D("2020-02-08T13:13:23")]
    spec["output"]["recent"]["window"]["range"] = ["unbounded", -10]
    r = dict(swf(cakes, spec, "recent"))
    assert r[4] == [] and r[5] == []
    assert r[0] == [D("2019-05-18T16:09:01")] and r[2] == [D("2019-05-18T16:09:01")]
    assert r[1] == [D("2019-01-08T06:12:03"), D("2020-02-08T13:13:23")]
    # numeric range: prices within 1 of this one
    r = dict(swf(cakes, {"sortBy": {"price": 1}, "output": {"c": {
        "$count": {}, "window": {"range": [-1, 1]}}}}, "c"))
    assert r == {2: 3, 0: 4, 3: 4, 1: 3, 4: 1, 5: 1}
    r = dict(swf(cakes, {"sortBy": {"price": 1}, "output": {"c": {
        "$sum": "$quantity", "window": {"range": ["current", "unbounded"]}}}}, "c"))
    assert r[1] == 140 + 162 + 134 and r[5] == 134


def test_window_rank_shift_document_number(cakes):
    spec = {"partitionBy": "$state", "sortBy": {"quantity": -1}, "output": {
        "rank": {"$rank": {}}, "num": {"$documentNumber": {}},
        "next": {"$shift": {"output": "$quantity", "by": 1, "default": "Not available"}},
        "prev": {"$shift": {"output": "$quantity", "by": -1}}}}
    r = agg(cakes, [{"$setWindowFields": spec}])
    assert [(d["_id"], d["rank"], d["num"], d["next"], d["prev"]) for d in r] == [
        (4, 1, 1, 145, None), (2, 2, 2, 120, 162), (0, 3, 3, "Not available", 145),
        (1, 1, 1, 134, None), (5, 2, 2, 104, 140), (3, 3, 3, "Not available", 134)]
    cakes.insert_many([{"_id": 6, "state": "CA", "quantity": 145},
                       {"_id": 7, "state": "CA", "quantity": 120}])
    r = agg(cakes, [{"$match": {"state": "CA"}}, {"$setWindowFields": {
        "sortBy": {"quantity": -1}, "output": {"r": {"$rank": {}}, "d": {"$denseRank": {}}}}}])
    assert [(d["quantity"], d["r"], d["d"]) for d in r] == [
        (162, 1, 1), (145, 2, 2), (145, 2, 2), (120, 4, 3), (120, 4, 3)]


def test_window_std_dev_and_covariance(cakes):
    r = dict(swf(cakes, {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": {
        "sd": {"$stdDevPop": "$quantity", "window": {"documents": ["unbounded", "current"]}}}},
        "sd"))
    assert r[4] == 0 and r[0] == 21 and r[2] == pytest.approx(17.249798710580816)
    assert r[5] == 0 and r[3] == 15 and r[1] == pytest.approx(15.748015748023622)
    r = dict(swf(cakes, {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": {
        "c": {"$covariancePop": [{"$year": "$orderDate"}, "$quantity"],
              "window": {"documents": ["unbounded", "current"]}},
        "s": {"$stdDevSamp": "$quantity"}}}, "c"))
    assert r[4] == 0 and r[0] == -10.5 and r[2] == pytest.approx(-5.666666666666671)


@pytest.fixture
def stocks(db):
    rows = [("ABC", "2020-05-18T20:00:00", 13), ("ABC", "2020-05-19T20:00:00", 15.4),
            ("ABC", "2020-05-20T20:00:00", 12), ("ABC", "2020-05-21T20:00:00", 11.7),
            ("DEF", "2020-05-18T20:00:00", 82), ("DEF", "2020-05-19T20:00:00", 94),
            ("DEF", "2020-05-20T20:00:00", 112), ("DEF", "2020-05-21T20:00:00", 97.3)]
    db.stockPrices.insert_many([{"_id": i, "stock": s, "date": D(t), "price": p}
                                for i, (s, t, p) in enumerate(rows)])
    return db.stockPrices


def test_window_exp_moving_avg(stocks):
    spec = {"partitionBy": "$stock", "sortBy": {"date": 1}, "output": {
        "e": {"$expMovingAvg": {"input": "$price", "N": 2}}}}
    assert [v for _, v in swf(stocks, spec, "e")] == pytest.approx(
        [13, 14.6, 12.866666666666667, 12.088888888888889,
         82, 90, 104.66666666666667, 99.75555555555556])
    spec["output"]["e"]["$expMovingAvg"] = {"input": "$price", "alpha": 0.75}
    assert [v for _, v in swf(stocks, spec, "e")] == pytest.approx(
        [13, 14.8, 12.7, 11.95, 82, 91, 106.75, 99.6625])


def test_window_derivative_and_integral(db):
    t = ["2020-05-18T14:10:30", "2020-05-18T14:11:00", "2020-05-18T14:11:30", "2020-05-18T14:12:00"]
    miles = {"1": [1295.1, 1295.63, 1296.25, 1296.76], "2": [10234.1, 10234.33, 10234.73, 10235.13]}
    kw = {"1": [2.95, 2.7, 2.6, 2.98], "2": [2.5, 2.25, 2.75, 2.82]}
    db.fleet.insert_many([{"truckID": k, "timeStamp": D(t[i]), "miles": v[i]}
                          for k, v in miles.items() for i in range(4)])
    db.power.insert_many([{"powerMeterID": k, "timeStamp": D(t[i]), "kilowatts": v[i]}
                          for k, v in kw.items() for i in range(4)])
    r = agg(db.fleet, [{"$setWindowFields": {"partitionBy": "$truckID", "sortBy": {"timeStamp": 1},
                                             "output": {"speed": {
                                                 "$derivative": {"input": "$miles", "unit": "hour"},
                                                 "window": {"range": [-30, 0], "unit": "second"}}}}},
                       {"$match": {"speed": {"$gt": 50}}}])
    assert [(d["truckID"], d["speed"]) for d in r] == [
        ("1", pytest.approx(63.6)), ("1", pytest.approx(74.4)), ("1", pytest.approx(61.2))]
    r = agg(db.power, [{"$setWindowFields": {"partitionBy": "$powerMeterID",
                                             "sortBy": {"timeStamp": 1}, "output": {"kwh": {
                                                 "$integral": {"input": "$kilowatts", "unit": "hour"},
                                                 "window": {"range": ["unbounded", "current"],
                                                            "unit": "hour"}}}}}])
    want = []  # the trapezoidal rule, 30 s = 1/120 h between readings
    for k in ("1", "2"):
        acc = 0.0
        for i in range(4):
            if i:
                acc += (kw[k][i - 1] + kw[k][i]) / 2 / 120
            want.append(acc)
    assert [d["kwh"] for d in r] == pytest.approx(want)
    assert want[1] == pytest.approx(0.02354166666666667)


def test_window_locf_and_linear_fill(db):
    prices = [500, None, 515, None, None, 530]
    db.stock.insert_many([{"_id": i, "time": D("2021-03-08T09:%02d:00" % (5 * i)), "price": p}
                          for i, p in enumerate(prices)])
    db.stock.update_one({"_id": 4}, {"$unset": {"price": 1}})
    r = agg(db.stock, [{"$setWindowFields": {"sortBy": {"time": 1}, "output": {
        "lin": {"$linearFill": "$price"}, "locf": {"$locf": "$price"}}}}])
    assert [d["lin"] for d in r] == [500, 507.5, 515, 520, 525, 530]
    assert [d["locf"] for d in r] == [500, 500, 515, 515, 515, 530]


@pytest.mark.parametrize("stage,code", [
    (1, 9),
    ({"output": {}, "foo": 1}, 40415),
    ({"partitionBy": "$a"}, 40414),
    ({"output": {"x": {"$add": [1, 2]}}}, 9),
    ({"output": {"x": 1}}, 9),
    ({"output": {"x": {"$sum": 1, "window": {"documents": [-1, 1]}}}}, 5339901),
    ({"sortBy": {"a": 1}, "output": {"x": {"$sum": 1, "window": {"documents": [1, -1]}}}}, 5339900),
    ({"sortBy": {"a": 1}, "output": {"x": {"$sum": 1, "window": {"documents": ["x", 1]}}}}, 9),
    ({"sortBy": {"a": 1, "b": 1}, "output": {"x": {"$sum": 1, "window": {"range": [-1, 1]}}}},
     5339902),
    ({"sortBy": {"a": 1}, "output": {"x": {"$sum": 1, "window": {"range": [-1, 1],
                                                                  "unit": "fortnight"}}}}, 9),
    ({"sortBy": {"a": -1}, "output": {"x": {"$sum": 1, "window": {"range": [-1, 1]}}}}, 8947401),
    ({"output": {"x": {"$rank": {}}}}, 5371602),
    ({"sortBy": {"a": 1}, "output": {"x": {"$rank": 1}}}, 5371603),
    ({"sortBy": {"a": 1}, "output": {"x": {"$rank": {}, "window": {"documents": [0, 0]}}}},
     5371601),
    ({"output": {"x": {"$shift": {"output": "$a", "by": 1}}}}, 9),
    ({"sortBy": {"a": 1}, "output": {"x": {"$shift": {"output": "$a", "by": 1.5}}}}, 9),
    ({"sortBy": {"a": 1}, "output": {"x": {"$expMovingAvg": {"input": "$a", "alpha": 2}}}}, 9),
    ({"sortBy": {"a": 1}, "output": {"x": {"$derivative": {"input": "$a"}}}}, 9),
    ({"output": {"x": {"$linearFill": "$a"}}}, 605001),
    ({"partitionBy": "$arr", "output": {"x": {"$sum": 1}}}, 5340201),
    ({"sortBy": {"s": 1}, "output": {"x": {"$sum": 1, "window": {"range": [-1, 1]}}}}, 5429513),
])
def test_window_errors(db, stage, code):
    db.a.insert_one({"a": 1, "arr": [1], "s": "str"})
    assert code_of(lambda: agg(db.a, [{"$setWindowFields": stage}])) == code


def test_window_memory_limit(db):
    db.w.insert_many([{"_id": i, "g": i % 2, "pad": "x" * 1000} for i in range(100)])
    was = set_param(db, "internalDocumentSourceSetWindowFieldsMaxMemoryBytes", 20000)
    try:
        pipe = [{"$setWindowFields": {"partitionBy": "$g", "sortBy": {"_id": 1},
                                      "output": {"s": {"$push": "$_id"}}}}]
        assert code_of(lambda: agg(db.w, pipe, allowDiskUse=False)) == 5643011
        r = agg(db.w, pipe, allowDiskUse=True)
        assert len(r) == 100 and r[0]["s"] == list(range(0, 100, 2))
    finally:
        set_param(db, "internalDocumentSourceSetWindowFieldsMaxMemoryBytes", was)


# ---- $densify and $fill -------------------------------------------------------------------

def test_densify_time_series_explicit_bounds(db):
    db.weather.insert_many([
        {"metadata": {"sensorId": 5578, "type": "temperature"}, "timestamp": D(t), "temp": v}
        for t, v in [("2021-05-18T00:00:00", 12), ("2021-05-18T04:00:00", 11),
                     ("2021-05-18T08:00:00", 11), ("2021-05-18T12:00:00", 12)]])
    r = agg(db.weather, [{"$densify": {"field": "timestamp", "range": {
        "step": 1, "unit": "hour", "bounds": [D("2021-05-18T00:00:00"), D("2021-05-18T08:00:00")]}}},
        {"$project": {"_id": 0}}])
    assert [d["timestamp"].hour for d in r] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 12]
    assert r[1] == {"timestamp": D("2021-05-18T01:00:00")}
    assert r[0]["temp"] == 12 and "temp" not in r[5]
    # calendar units step from the previous value; nothing below the range is added
    db.m.insert_many([{"t": D("2021-01-31T00:00:00")}, {"t": D("2021-05-31T00:00:00")}])
    r = agg(db.m, [{"$densify": {"field": "t", "range": {"step": 1, "unit": "month",
                                                           "bounds": "full"}}}])
    assert [d["t"] for d in r] == [D("2021-01-31T00:00:00"), D("2021-02-28T00:00:00"),
                                   D("2021-03-28T00:00:00"), D("2021-04-28T00:00:00"),
                                   D("2021-05-28T00:00:00"), D("2021-05-31T00:00:00")]


@pytest.fixture
def coffee(db):
    db.coffee.insert_many([
        {"altitude": 600, "variety": "Arabica Typica", "score": 68.3},
        {"altitude": 750, "variety": "Arabica Typica", "score": 69.5},
        {"altitude": 950, "variety": "Arabica Typica", "score": 70.5},
        {"altitude": 1250, "variety": "Gesha", "score": 88.15},
        {"altitude": 1700, "variety": "Gesha", "score": 85.5},
        {"altitude": 1600, "variety": "SL28", "score": 87.0},
        {"altitude": 1400, "variety": "SL28", "score": 86.0},
        {"altitude": 1350, "variety": "SL28", "score": 84.0},
        {"variety": "SL28", "score": 1.0}])
    return db.coffee


def by_variety(r):
    out = {}
    for d in r:
        if "altitude" in d:
            out.setdefault(d["variety"], []).append(d["altitude"])
    return {k: sorted(v) for k, v in out.items()}


def test_densify_partitions_full_and_partition(coffee):
    r = agg(coffee, [{"$densify": {"field": "altitude", "partitionByFields": ["variety"],
                                   "range": {"bounds": "full", "step": 200}}}])
    assert by_variety(r) == {
        "Arabica Typica": [600, 750, 800, 950, 1000, 1200, 1400, 1600],
        "Gesha": [600, 800, 1000, 1200, 1250, 1400, 1600, 1700],
        "SL28": [600, 800, 1000, 1200, 1350, 1400, 1600]}
    assert [d["altitude"] for d in r if "altitude" in d] == sorted(
        d["altitude"] for d in r if "altitude" in d)
    assert len([d for d in r if "altitude" not in d]) == 1  # missing: passed through
    gen = [d for d in r if "_id" not in d]
    assert gen[0] == {"variety": gen[0]["variety"], "altitude": gen[0]["altitude"]}
    r = agg(coffee, [{"$densify": {"field": "altitude", "partitionByFields": ["variety"],
                                   "range": {"bounds": "partition", "step": 200}}}])
    assert by_variety(r) == {"Arabica Typica": [600, 750, 800, 950],
                             "Gesha": [1250, 1450, 1650, 1700],
                             "SL28": [1350, 1400, 1550, 1600]}
    # sorted by variety, then altitude: the SL28 without one opens SL28's run
    assert [(d["variety"][0], d.get("altitude")) for d in r][-5:] == [
        ("S", None), ("S", 1350), ("S", 1400), ("S", 1550), ("S", 1600)]
    r = agg(coffee, [{"$densify": {"field": "altitude", "partitionByFields": ["variety"],
                                   "range": {"bounds": [1000, 1500], "step": 100}}}])
    assert by_variety(r)["Gesha"] == [1000, 1100, 1200, 1250, 1300, 1400, 1700]
    assert by_variety(r)["Arabica Typica"] == [600, 750, 950, 1000, 1100, 1200, 1300, 1400]


@pytest.mark.parametrize("spec,code", [
    (1, 9),
    ({"field": "a", "range": {"step": 0, "bounds": "full"}}, 5733401),
    ({"field": "a", "range": {"step": 1, "bounds": "foo"}}, 5946802),
    ({"field": "a", "range": {"step": 1, "bounds": [1]}}, 5733403),
    ({"field": "a", "range": {"step": 1, "bounds": [5, 1]}}, 5733402),
    ({"field": "a", "range": {"step": 1, "unit": "hour", "bounds": [1, 5]}}, 5733409),
    ({"field": "a", "range": {"step": 1, "bounds": [1, 5.5]}}, 5876900),
    ({"field": "a", "range": {"step": 1, "bounds": [D("2021-01-01T00:00:00"),
                                                    D("2021-01-02T00:00:00")]}}, 5733410),
    ({"field": "a", "range": {"step": 1, "bounds": 5}}, 5733404),
    ({"field": "a", "range": {"step": 1, "bounds": "partition"}}, 5733408),
    ({"field": "a", "range": {"step": 1, "bounds": "full"}, "x": 1}, 40415),
    ({"range": {"step": 1, "bounds": "full"}}, 40414),
    ({"field": "s", "range": {"step": 1, "bounds": "full"}}, 5733201),
    ({"field": "a", "range": {"step": 1, "unit": "day", "bounds": "full"}}, 5733201),
])
def test_densify_errors(db, spec, code):
    db.a.insert_one({"a": 1, "s": "x"})
    assert code_of(lambda: agg(db.a, [{"$densify": spec}])) == code


def test_fill_value_linear_locf(db):
    db.dailySales.insert_many([
        {"_id": 1, "date": D("2022-02-02T00:00:00"), "bootsSold": 10, "sandalsSold": 20,
         "sneakersSold": 12},
        {"_id": 2, "date": D("2022-02-03T00:00:00"), "bootsSold": 7, "sneakersSold": 18},
        {"_id": 3, "date": D("2022-02-04T00:00:00"), "sneakersSold": 5}])
    r = agg(db.dailySales, [{"$fill": {"output": {"bootsSold": {"value": 0},
                                                  "sandalsSold": {"value": 0},
                                                  "sneakersSold": {"value": 0}}}}])
    assert [(d["bootsSold"], d["sandalsSold"], d["sneakersSold"]) for d in r] == [
        (10, 20, 12), (7, 0, 18), (0, 0, 5)]
    db.stock.insert_many([{"_id": i, "time": D("2021-03-08T09:%02d:00" % (5 * i)), "price": p}
                          for i, p in enumerate([500, None, 515, None, None, 530])])
    r = agg(db.stock, [{"$fill": {"sortBy": {"time": 1}, "output": {"price": {"method": "linear"}}}}])
    assert [d["price"] for d in r] == [500, 507.5, 515, 520, 525, 530]
    db.reviews.insert_many([
        {"_id": i, "restaurant": rest, "date": D("2021-03-%02dT00:00:00" % (8 + i % 5)), "score": s}
        for i, (rest, s) in enumerate([("Joe's Pizza", 90), ("Joe's Pizza", 92), ("Joe's Pizza", None),
                                       ("Joe's Pizza", None), ("Joe's Pizza", 99),
                                       ("Sally's Deli", None), ("Sally's Deli", 80),
                                       ("Sally's Deli", None)])])
    r = agg(db.reviews, [{"$fill": {"sortBy": {"date": 1}, "partitionByFields": ["restaurant"],
                                    "output": {"score": {"method": "locf"}}}}])
    assert [(d["restaurant"][0], d["score"]) for d in r] == [
        ("J", 90), ("J", 92), ("J", 92), ("J", 92), ("J", 99), ("S", None), ("S", 80), ("S", 80)]


@pytest.mark.parametrize("spec,code", [
    ("x", 9),
    ({"partitionBy": "$a", "partitionByFields": ["a"], "output": {"a": {"value": 1}}}, 6050204),
    ({"output": {}}, 6050203),
    ({"output": {"a": {"method": "cubic"}}}, 6050202),
    ({"output": {"a": {"method": "locf", "value": 1}}}, 6050201),
    ({"output": {"a": 1}}, 6050200),
    ({"output": {"a": {"method": "linear"}}}, 605001),
    ({"output": {"a": {"value": 1}}, "foo": 1}, 40415),
    ({"sortBy": {"a": 1}}, 40414),
])
def test_fill_errors(db, spec, code):
    db.a.insert_one({"a": 1})
    assert code_of(lambda: agg(db.a, [{"$fill": spec}])) == code


# ---- $indexStats ----------------------------------------------------------------------------

def ops_of(coll):
    return {d["name"]: d["accesses"]["ops"] for d in agg(coll, [{"$indexStats": {}}])}


def test_index_stats_counts_planner_use(db):
    db.s.insert_many([{"_id": i, "a": i, "b": i} for i in range(20)])
    db.s.create_index("a", name="a_1")
    r = agg(db.s, [{"$indexStats": {}}])
    assert [d["name"] for d in r] == ["_id_", "a_1"]
    a = r[1]
    assert a["key"] == {"a": 1} and a["spec"]["key"] == {"a": 1} and a["spec"]["name"] == "a_1"
    assert a["accesses"]["ops"] == 0 and isinstance(a["accesses"]["since"], datetime.datetime)
    assert ":" in a["host"] and "building" not in a
    assert r[0]["key"] == {"_id": 1} and r[0]["spec"] == {"v": 2, "key": {"_id": 1}, "name": "_id_"}
    before = ops_of(db.s)
    assert len(list(db.s.find({"a": {"$gte": 5}}))) == 15
    list(db.s.find({"a": 3}))
    list(db.s.find({"b": 3}))  # a collection scan: no index used
    db.s.find_one({"_id": 4})
    agg(db.s, [{"$match": {"a": 7}}, {"$project": {"a": 1}}])
    after = ops_of(db.s)
    assert after["a_1"] - before["a_1"] == 3
    assert after["_id_"] - before["_id_"] >= 1
    # after $match
    assert agg(db.s, [{"$indexStats": {}}, {"$match": {"name": "a_1"}},
                      {"$project": {"_id": 0, "name": 1}}]) == [{"name": "a_1"}]


def test_graph_lookup_uses_connect_to_index(employees):
    employees.create_index("name")
    before = ops_of(employees)["name_1"]
    r = agg(employees, [{"$match": {"name": "Dan"}},
                        {"$graphLookup": {"from": "employees", "startWith": "$reportsTo",
                                          "connectFromField": "reportsTo",
                                          "connectToField": "name", "as": "chain"}}])
    assert sorted(x["name"] for x in r[0]["chain"]) == ["Andrew", "Dev", "Eliot"]
    assert ops_of(employees)["name_1"] - before == 4  # one query per level (3 found + 1 empty)


@pytest.mark.parametrize("pipeline,code", [
    ([{"$indexStats": {"a": 1}}], 28803),
    ([{"$indexStats": 1}], 28803),
    ([{"$match": {}}, {"$indexStats": {}}], 40602),
    ([{"$facet": {"f": [{"$indexStats": {}}]}}], 40600),
])
def test_index_stats_errors(db, pipeline, code):
    db.a.insert_one({})
    assert code_of(lambda: agg(db.a, pipeline)) == code


def test_index_stats_missing_collection(db):
    assert agg(db.nothere, [{"$indexStats": {}}]) == []


def test_edges_do_not_hang_or_overflow(db):
    db.e.insert_many([{"_id": 1, "a": 1.0, "d": D("2021-01-01T00:00:00"), "n": 0},
                      {"_id": 2, "a": 2.0, "d": D("2021-01-03T00:00:00"), "n": 2 ** 62}])
    # a step too small to move the value ends the grid
    r = agg(db.e, [{"$densify": {"field": "a", "range": {"step": 1e-300, "bounds": "full"}}}])
    assert [d["a"] for d in r] == [1.0, 2.0]
    # the limit on generated documents
    assert code_of(lambda: agg(db.e, [{"$densify": {"field": "n", "range": {
        "step": 1, "bounds": "full"}}}])) == 5897900
    # a long grid that would pass the largest long ends there (no overflow)
    top = 2 ** 63 - 1
    agg(db.e, [{"$densify": {"field": "n", "range": {
        "step": Int64(2 ** 62), "bounds": [Int64(0), Int64(top)]}}}])
    # explicit bounds and no document: the whole range, as mongod
    r = agg(db.e, [{"$match": {"_id": 0}}, {"$densify": {"field": "n", "range": {
        "step": 2, "bounds": [0, 5]}}}])
    assert r == [{"n": 0}, {"n": 2}, {"n": 4}]
    r = agg(db.e, [{"$densify": {"field": "d", "range": {"step": 2 ** 52, "unit": "day",
                                                           "bounds": "full"}}}])
    assert len(r) == 2
    assert code_of(lambda: agg(db.e, [{"$setWindowFields": {"sortBy": {"a": 1}, "output": {
        "x": {"$sum": 1, "window": {"documents": [-1e300, 0]}}}}}])) == 9
    r = agg(db.e, [{"$setWindowFields": {"sortBy": {"d": 1}, "output": {
        "x": {"$count": {}, "window": {"range": [-2 ** 31 + 1, 0], "unit": "year"}}}}}])
    assert [d["x"] for d in r] == [1, 2]
