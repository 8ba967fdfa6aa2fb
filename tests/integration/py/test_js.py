"""
Server-side JavaScript: $where (string, function, Code, in find, count and
$match), $function in aggregation, mapReduce (inline, replace, merge, reduce,
query/sort/limit, finalize, scope, db), BSON values crossing into JavaScript
and back, the time limit (maxTimeMS and the per-call cap), the heap limit,
JavaScript errors, and --noscripting.
"""

import datetime
import re
import threading
import time

import pytest
from bson.son import SON
from bson import Binary, Code, Decimal128, Int64, ObjectId, Regex, Timestamp
from pymongo.errors import ExecutionTimeout, OperationFailure


def ids(cursor):
    return sorted(d["_id"] for d in cursor)


@pytest.fixture
def nums(db):
    db.n.insert_many([{"_id": i, "a": i, "k": "odd" if i % 2 else "even"} for i in range(10)])
    return db.n


def test_where_forms(nums):
    assert ids(nums.find({"$where": "this.a > 6"})) == [7, 8, 9]
    assert ids(nums.find({"$where": "function() { return obj.a < 2 }"})) == [0, 1]
    assert ids(nums.find({"$where": Code("function() { return this.k == 'odd' && this.a > 4 }")})) == [5, 7, 9]
    assert ids(nums.find({"$where": "var x = 3; return this.a == x"})) == [3]
    # Combined with ordinary conditions, in count, update and delete.
    assert ids(nums.find({"a": {"$lt": 5}, "$where": "this.a % 2 == 0"})) == [0, 2, 4]
    n = nums.database.command("count", "n", query={"$or": [{"$where": "this.a >= 5"}, {"a": 0}]})
    assert n["n"] == 6
    assert nums.update_many({"$where": "this.a < 2"}, {"$set": {"low": True}}).modified_count == 2
    assert nums.delete_one({"_id": 1, "$where": "this.low"}).deleted_count == 1
    assert ids(nums.find({"low": True})) == [0]


def test_where_refused_where_mongod_refuses_it(nums, db):
    # An aggregation's $match (first stage or later), a validator, a partial index.
    for pipeline in ([{"$match": {"$where": "true"}}],
                     [{"$project": {"a": 1}}, {"$match": {"$and": [{"$where": "true"}]}}]):
        with pytest.raises(OperationFailure) as e:
            list(nums.aggregate(pipeline))
        assert e.value.code == 2 and "$where is not allowed in this context" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        db.create_collection("validated", validator={"$where": "true"})
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        nums.create_index("a", partialFilterExpression={"$where": "true"})
    assert e.value.code == 2
    # A string that reads "$where" is just a string.
    assert list(nums.aggregate([{"$match": {"k": "$where"}}])) == []


def test_where_errors(nums):
    with pytest.raises(OperationFailure) as e:
        list(nums.find({"$where": "function( {"}))
    assert e.value.code == 139 and "SyntaxError" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        list(nums.find({"$where": "this.a.b.c"}))
    assert e.value.code == 139 and "TypeError" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        list(nums.find({"$where": "throw new Error('boom ' + this._id)"}))
    assert e.value.code == 139 and "boom" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        list(nums.find({"$where": {"a": 1}}))
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        list(nums.find({"arr": {"$elemMatch": {"$where": "true"}}}))
    assert e.value.code == 2 and "top-level document" in str(e.value)
    # The engine is still usable afterwards.
    assert ids(nums.find({"$where": "this.a == 9"})) == [9]


def test_function_values_round_trip(db):
    big = 2 ** 62 + 1
    doc = {"_id": 1, "l": Int64(big), "i": 7, "d": 2.5, "s": "héllo", "o": ObjectId(),
           "t": datetime.datetime(2021, 3, 4, 5, 6, 7, 8000), "dec": Decimal128("1.10"),
           "b": Binary(b"\x00\x01\xfe\xff", 128), "re": Regex("^ab", "i"), "ts": Timestamp(5, 6),
           "n": None, "arr": [1, {"x": [2, 3]}], "sub": {"y": True}}
    db.v.insert_one(doc)
    fields = [k for k in doc if k != "_id"]
    body = "function(%s) { return [%s] }" % (", ".join(fields), ", ".join(fields))
    out = list(db.v.aggregate([{"$project": {"_id": 0, "r": {"$function": {
        "body": body, "args": ["$" + f for f in fields], "lang": "js"}}}}]))[0]["r"]
    got = dict(zip(fields, out))
    assert got["l"] == big and isinstance(got["l"], int)
    assert got["i"] == 7.0 and got["d"] == 2.5 and got["s"] == "héllo"
    assert got["o"] == doc["o"] and got["t"] == doc["t"] and got["dec"] == doc["dec"]
    assert got["b"] == doc["b"] and got["b"].subtype == 128
    assert got["re"].pattern == "^ab" and got["re"].flags & re.IGNORECASE
    assert got["ts"] == doc["ts"] and got["n"] is None
    assert got["arr"] == [1.0, {"x": [2.0, 3.0]}] and got["sub"] == {"y": True}
    # What JavaScript sees: the shell types with their methods.
    r = list(db.v.aggregate([{"$project": {"_id": 0, "r": {"$function": {
        "body": "function(l, o, t, b) { return [typeof l, l.toString(), l + 1 > 4e18, "
                "o.str, o.getTimestamp().getTime() == Math.floor(o.str.substr(0, 8) / 1) || true,"
                " t.getUTCFullYear(), b.base64(), b.subtype()] }",
        "args": ["$l", "$o", "$t", "$b"], "lang": "js"}}}}]))[0]["r"]
    assert r[0] == "object" and r[1] == 'NumberLong("%d")' % big and r[2] is True
    assert r[3] == str(doc["o"]) and r[5] == 2021 and r[6] == "AAH+/w==" and r[7] == 128
    # Values made in JavaScript come back as BSON types.
    r = list(db.v.aggregate([{"$project": {"_id": 0, "r": {"$function": {
        "body": "function() { return {l: NumberLong('-9000000000000000001'.slice(0, 19)),"
                " i: NumberInt(5), o: ObjectId('0123456789abcdef01234567'),"
                " d: new Date(86400000), u: undefined} }",
        "args": [], "lang": "js"}}}}]))[0]["r"]
    assert r == {"l": -900000000000000000, "i": 5, "o": ObjectId("0123456789abcdef01234567"),
                 "d": datetime.datetime(1970, 1, 2), "u": None}


def test_function_errors(nums):
    def run(spec):
        return list(nums.aggregate([{"$project": {"r": {"$function": spec}}}]))
    assert run({"body": "function(a) { return a * 2 }", "args": ["$a"], "lang": "js"})[3]["r"] == 6
    for spec, code in [({"body": "function() {}", "args": 5, "lang": "js"}, 31266),
                       ({"body": "function() {}", "args": [], "lang": "python"}, 31418),
                       ({"body": 5, "args": [], "lang": "js"}, 31262),
                       ({"body": "function() { null.x }", "args": [], "lang": "js"}, 139)]:
        with pytest.raises(OperationFailure) as e:
            run(spec)
        assert e.value.code == code, spec


MAP = Code("function() { emit(this.k, this.a) }")
SUM = Code("function(key, values) { return Array.sum(values) }")


def test_map_reduce_inline(nums, db):
    r = db.command("mapReduce", "n", map=MAP, reduce=SUM, out={"inline": 1})
    assert r["results"] == [{"_id": "even", "value": 20.0}, {"_id": "odd", "value": 25.0}]
    # query, sort, limit, finalize and scope.
    r = db.command("mapReduce", "n", map="function() { emit(this.k, this.a * factor) }",
                   reduce=SUM, query={"a": {"$gte": 2}}, sort={"a": -1}, limit=4,
                   finalize="function(k, v) { return {total: v, key: k} }",
                   scope={"factor": 10}, out={"inline": 1})
    assert r["results"] == [{"_id": "even", "value": {"total": 140.0, "key": "even"}},
                            {"_id": "odd", "value": {"total": 160.0, "key": "odd"}}]
    # A key with one value is not reduced; object keys group by value.
    r = db.command("mapReduce", "n", map="function() { emit({m: this.a % 3}, 1) }",
                   reduce="function(k, v) { return v.length }", query={"a": {"$lt": 4}},
                   out={"inline": 1})
    assert r["results"] == [{"_id": {"m": 0.0}, "value": 2.0}, {"_id": {"m": 1.0}, "value": 1.0},
                            {"_id": {"m": 2.0}, "value": 1.0}]
    # A missing collection gives no results.
    assert db.command("mapReduce", "nothing", map=MAP, reduce=SUM, out={"inline": 1})["results"] == []


def test_map_reduce_out_collections(nums, db):
    db.target.insert_many([{"_id": "even", "value": 100.0}, {"_id": "other", "value": 1.0}])
    r = db.command("mapReduce", "n", map=MAP, reduce=SUM, out={"reduce": "target"})
    assert r["result"] == "target"
    assert list(db.target.find().sort("_id", 1)) == [
        {"_id": "even", "value": 120.0}, {"_id": "odd", "value": 25.0},
        {"_id": "other", "value": 1.0}]
    db.command("mapReduce", "n", map=MAP, reduce=SUM, query={"a": {"$lt": 4}},
               out={"merge": "target"})
    assert list(db.target.find().sort("_id", 1)) == [
        {"_id": "even", "value": 2.0}, {"_id": "odd", "value": 4.0},
        {"_id": "other", "value": 1.0}]
    r = db.command("mapReduce", "n", map=MAP, reduce=SUM, out="target")
    assert r["result"] == "target"
    assert list(db.target.find().sort("_id", 1)) == [
        {"_id": "even", "value": 20.0}, {"_id": "odd", "value": 25.0}]
    r = db.command("mapReduce", "n", map=MAP, reduce=SUM,
                   out={"replace": "elsewhere", "db": db.name + "_mr"})
    assert r["result"] == {"db": db.name + "_mr", "collection": "elsewhere"}
    other = db.client[db.name + "_mr"]
    assert other.elsewhere.count_documents({}) == 2
    db.client.drop_database(other)
    assert not [n for n in db.list_collection_names() if n.startswith("tmp.mr")]


def test_map_reduce_errors(nums, db):
    with pytest.raises(OperationFailure) as e:
        db.command("mapReduce", "n", map=MAP, reduce=SUM)
    assert e.value.code == 40414
    with pytest.raises(OperationFailure) as e:
        db.command("mapReduce", "n", map=MAP, reduce=SUM, out={"inline": 1}, bogus=1)
    assert e.value.code == 40415
    with pytest.raises(OperationFailure) as e:
        db.command("mapReduce", "n", map="function() { emit(this.k, this.a.b.c) }",
                   reduce=SUM, out={"inline": 1})
    assert e.value.code == 139
    with pytest.raises(OperationFailure) as e:
        db.command("mapReduce", "n", map="function( {", reduce=SUM, out={"inline": 1})
    assert e.value.code == 139
    with pytest.raises(OperationFailure) as e:  # 10 x 2 MB of inline results
        db.command("mapReduce", "n", map="function() { var s = 'x'; for (var i = 0; i < 21; i++) s += s; emit(this._id, s) }",
                   reduce=SUM, out={"inline": 1})
    assert e.value.code == 10334
    db.command("create", "nview", viewOn="n", pipeline=[])
    with pytest.raises(OperationFailure) as e:
        db.command("mapReduce", "nview", map=MAP, reduce=SUM, out={"inline": 1})
    assert e.value.code == 166


def test_runaway_loop_stopped_by_max_time(nums):
    t = time.monotonic()
    with pytest.raises(ExecutionTimeout):
        list(nums.find({"$where": "while (true) {}"}).max_time_ms(300))
    assert time.monotonic() - t < 10
    with pytest.raises(OperationFailure) as e:
        list(nums.aggregate([{"$project": {"r": {"$function": {
            "body": "function() { for (;;) {} }", "args": [], "lang": "js"}}}}], maxTimeMS=300))
    assert e.value.code == 50
    assert ids(nums.find({"$where": "this.a == 1"})) == [1]
    # sleep(ms), as drivers' tests use it, returns undefined and keeps to the deadline.
    t = time.monotonic()
    assert ids(nums.find({"_id": {"$lt": 2}, "$where": "sleep(100) || true"})) == [0, 1]
    assert 0.15 < time.monotonic() - t < 10
    with pytest.raises(ExecutionTimeout):
        list(nums.find({"$where": "sleep(100000) || true"}).max_time_ms(200))


def test_kill_op_stops_a_script(nums, client):
    errors = []

    def run():
        try:
            list(nums.find({"$where": "while (true) {}"}))
        except OperationFailure as e:
            errors.append(e.code)

    th = threading.Thread(target=run)
    th.start()
    opid = None
    for _ in range(200):
        # the filter's fields stand beside currentOp: 1 (a document as
        # currentOp's value is ignored, as by mongod, and lists every op)
        ops = client.admin.command(SON([("currentOp", 1), ("command.find", nums.name),
                                        ("command.filter.$where", "while (true) {}")]))
        if ops["inprog"]:
            opid = ops["inprog"][0]["opid"]
            break
        time.sleep(0.05)
    assert opid is not None
    client.admin.command("killOp", op=opid)
    th.join(30)
    assert not th.is_alive() and errors == [11601]


def test_limits_of_an_engine(fresh_server):
    fresh_server.start(["--setParameter", "jsHeapLimitMB=16",
                        "--setParameter", "sableJsCallTimeLimitMS=2500"])
    c = fresh_server.client()
    c.t.c.insert_many([{"_id": i} for i in range(3)])
    # The per-call cap stops a loop without maxTimeMS.
    t = time.monotonic()
    with pytest.raises(OperationFailure) as e:
        list(c.t.c.find({"$where": "while (true) {}"}))
    assert e.value.code == 139 and "timed out" in str(e.value)
    assert time.monotonic() - t < 10
    # A memory hog is stopped at the heap limit.
    with pytest.raises(OperationFailure) as e:
        list(c.t.c.find({"$where": "var a = [], s = 'x'; for (;;) { s = s + s; a.push(s) }"}))
    assert e.value.code == 139 and "Out of memory" in str(e.value)
    assert ids(c.t.c.find({"$where": "this._id > 0"})) == [1, 2]
    c.close()


def test_noscripting(fresh_server):
    fresh_server.start(["--noscripting"])
    c = fresh_server.client()
    c.t.c.insert_one({"_id": 1, "a": 1})
    with pytest.raises(OperationFailure) as e:
        list(c.t.c.find({"$where": "true"}))
    assert e.value.code == 31264
    with pytest.raises(OperationFailure) as e:
        list(c.t.c.aggregate([{"$project": {"r": {"$function": {
            "body": "function() { return 1 }", "args": [], "lang": "js"}}}}]))
    assert e.value.code == 31264
    with pytest.raises(OperationFailure) as e:
        c.t.command("mapReduce", "c", map=MAP, reduce=SUM, out={"inline": 1})
    assert e.value.code == 31246
    opts = c.admin.command("getCmdLineOpts")["parsed"]
    assert opts["security"]["javascriptEnabled"] is False
    assert c.t.c.find_one({"a": 1}) == {"_id": 1, "a": 1}
    c.close()


AVG = {"$accumulator": {
    "init": "function(base) { return {count: 0, sum: base} }",
    "initArgs": [0],
    "accumulate": "function(state, a) { return {count: state.count + 1, sum: state.sum + a} }",
    "accumulateArgs": ["$a"],
    "merge": "function(x, y) { return {count: x.count + y.count, sum: x.sum + y.sum} }",
    "finalize": "function(state) { return state.sum / state.count }",
    "lang": "js"}}


def test_accumulator(nums, db):
    r = list(nums.aggregate([{"$group": {"_id": "$k", "avg": AVG}}, {"$sort": {"_id": 1}}]))
    assert r == [{"_id": "even", "avg": 4.0}, {"_id": "odd", "avg": 5.0}]
    # Without finalize the state is the result; initArgs see the group's document.
    spec = {"init": "function(k) { return [k] }", "initArgs": ["$k"],
            "accumulate": "function(s, a) { s.push(a); return s }", "accumulateArgs": ["$a"],
            "merge": "function(x, y) { return x.concat(y.slice(1)) }", "lang": "js"}
    r = list(nums.aggregate([{"$match": {"a": {"$lt": 4}}},
                             {"$group": {"_id": "$k", "all": {"$accumulator": spec}}},
                             {"$sort": {"_id": 1}}]))
    assert r == [{"_id": "even", "all": ["even", 0.0, 2.0]}, {"_id": "odd", "all": ["odd", 1.0, 3.0]}]
    for bad in [dict(spec, lang="py"), {k: v for k, v in spec.items() if k != "merge"},
                dict(spec, accumulate=5)]:
        with pytest.raises(OperationFailure) as e:
            list(nums.aggregate([{"$group": {"_id": None, "x": {"$accumulator": bad}}}]))
        assert e.value.code == 9
    bad = dict(AVG["$accumulator"], finalize="function(s) { return s.nope.x }")
    with pytest.raises(OperationFailure) as e:
        list(nums.aggregate([{"$group": {"_id": "$k", "x": {"$accumulator": bad}}}]))
    assert e.value.code == 139


def test_accumulator_merges_after_a_spill(fresh_server):
    fresh_server.start(["--setParameter", "internalDocumentSourceGroupMaxMemoryBytes=20000"])
    c = fresh_server.client()
    c.t.c.insert_many([{"_id": i, "g": i % 300, "a": i} for i in range(3000)])
    with pytest.raises(OperationFailure) as e:  # the groups do not fit: they spill
        list(c.t.c.aggregate([{"$group": {"_id": "$g", "avg": AVG}}], allowDiskUse=False))
    assert e.value.code == 292
    r = list(c.t.c.aggregate([{"$group": {"_id": "$g", "avg": AVG}}, {"$sort": {"_id": 1}}],
                             allowDiskUse=True))
    assert len(r) == 300
    assert all(d["avg"] == d["_id"] + 1350 for d in r)
    c.close()
