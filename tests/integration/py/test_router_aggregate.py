"""
Aggregation across shards through sable-router (docs/sharding.md, issue 28):
the shards run the pipeline up to its split point, the router the rest.
One 2-shard cluster: ag.t is sharded on {k: 1} with k < 0 on shard0 and
k >= 0 on shard1; ag.u holds the same documents unsharded (on the
database's primary shard, so its pipelines run whole on one sabled).  Each
pipeline's result through the router on t must equal the same pipeline on u.
"""

import os
import sys

import pytest
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(__file__))
import sharded  # noqa: E402

WORDS = ["apple", "banana", "cherry", "apple pie", "banana bread", "cherry apple"]


def doc(i):
    d = {"_id": i + 1000, "k": i, "g": i % 4, "h": "abc"[i % 3], "v": i * 1.5,
         "name": "n%03d" % (i + 60), "tags": [i % 3, i % 5], "o": {"x%d" % (i % 3): i},
         "txt": WORDS[i % len(WORDS)], "loc": [float(i % 10), float(i // 10)]}
    if i % 7 == 0:
        d["v"] = "not a number"  # $sum / $avg / $stdDev skip it
    if i % 11 == 0:
        del d["v"]
    return d


DOCS = [doc(i) for i in range(-60, 60)]
SHARDS = []  # direct clients of shard0 and shard1, once the cluster runs


cluster = sharded.cluster_fixture("sable-agg-")
shards = sharded.shards_fixture()


@pytest.fixture(scope="module")
def cl(cluster, shards):
    with sharded.client(cluster["router"]) as c:
        c.ag.u.insert_one({"_id": "first"})  # creates the database (its primary) unsharded
        c.ag.u.delete_one({"_id": "first"})
        sharded.split_at_zero(c, "ag", ["t", "fs"])
        c.ag.t.insert_many(DOCS)
        c.ag.u.insert_many(DOCS)
        for name in ("t", "u"):
            c.ag[name].create_index([("txt", "text")])
            c.ag[name].create_index([("loc", "2d")])
        # foreign collections: f unsharded, fs sharded, fu its unsharded copy
        fdocs = [{"_id": j, "k": j - 10, "g": j % 4, "label": "L%d" % j, "parent": j // 2}
                 for j in range(20)]
        c.ag.f.insert_many(fdocs)
        c.ag.fs.insert_many(fdocs)
        c.ag.fu.insert_many(fdocs)
        held = [s.ag.t.count_documents({}) for s in shards]
        assert held == [60, 60], held
        SHARDS[:] = shards
        yield c


def norm(v):
    """Floats rounded (sums in another order), sets in order."""
    if isinstance(v, float):
        return round(v, 9)
    if isinstance(v, list):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {k: (sorted(norm(x) for x in v[k]) if k.startswith("set") else norm(v[k]))
                for k in v}
    return v


def same(cl, pipeline, ordered=False, sharded_coll="t", plain="u", **kw):
    got = list(cl.ag[sharded_coll].aggregate(pipeline, **kw))
    want = list(cl.ag[plain].aggregate(pipeline, **kw))
    got, want = norm(got), norm(want)
    if not ordered:
        got, want = sorted(got, key=repr), sorted(want, key=repr)
    assert got == want
    return got


ACCS = {"sum": {"$sum": "$v"}, "n": {"$sum": 1}, "avg": {"$avg": "$v"},
        "min": {"$min": "$v"}, "max": {"$max": "$v"}, "first": {"$first": "$name"},
        "last": {"$last": "$name"}, "push": {"$push": "$k"}, "setH": {"$addToSet": "$h"},
        "cnt": {"$count": {}}, "sdp": {"$stdDevPop": "$v"}, "sds": {"$stdDevSamp": "$v"},
        "mo": {"$mergeObjects": "$o"}, "fN": {"$firstN": {"input": "$k", "n": 3}},
        "lN": {"$lastN": {"input": "$k", "n": 2}}, "maxN": {"$maxN": {"input": "$v", "n": 2}},
        "minN": {"$minN": {"input": "$k", "n": 2}}}


def test_group_every_accumulator(cl):
    r = same(cl, [{"$sort": {"k": 1}}, {"$group": dict({"_id": "$g"}, **ACCS)},
                  {"$sort": {"_id": 1}}], ordered=True)
    assert [d["_id"] for d in r] == [0, 1, 2, 3] and sum(d["n"] for d in r) == 120
    # one group over everything, then more stages after the $group
    same(cl, [{"$match": {"k": {"$gte": -30}}}, {"$sort": {"name": -1}},
              {"$group": dict({"_id": None}, **ACCS)}, {"$project": {"_id": 0}}])
    same(cl, [{"$group": {"_id": {"g": "$g", "h": "$h"}, "s": {"$sum": "$k"}}},
              {"$match": {"s": {"$gt": -50}}}, {"$sort": {"_id.g": 1, "_id.h": 1}}],
         ordered=True)


def test_partial_groups(cl):
    # accumulators that combine: grouped on the shards, the groups grouped again
    partial = {k: ACCS[k] for k in ("sum", "n", "avg", "min", "max", "first", "last", "push",
                                     "setH", "cnt", "mo", "sdp", "sds")}
    r = same(cl, [{"$group": dict({"_id": "$g"}, **partial)}, {"$sort": {"_id": 1}}],
             ordered=True)
    assert [list(d) for d in r] == [["_id"] + list(partial)] * 4  # no hidden count left
    same(cl, [{"$match": {"g": {"$lt": 2}}}, {"$group": {"_id": "$h", "avg": {"$avg": "$v"}}}])
    # a group no document reaches, and one over a field nobody has
    assert same(cl, [{"$match": {"name": "none"}}, {"$group": {"_id": None, "a": {"$avg": "$k"}}}]) == []
    same(cl, [{"$group": {"_id": "$g", "a": {"$avg": "$nope"}, "s": {"$sum": "$nope"},
                          "p": {"$stdDevPop": "$nope"}, "q": {"$stdDevSamp": "$nope"}}}])
    # a deviation where one shard has one number and the other none (samp: null below 2)
    same(cl, [{"$match": {"k": {"$in": [-59, 3, 4]}}},
              {"$group": {"_id": {"$gt": ["$k", 0]}, "p": {"$stdDevPop": "$k"},
                          "q": {"$stdDevSamp": "$k"}}}])
    same(cl, [{"$match": {"g": 2}}, {"$group": {"_id": None, "p": {"$stdDevPop": "$k"},
                                                "q": {"$stdDevSamp": "$k"}}}])


JS_AVG = {"$accumulator": {  # merge joins the shards' states, finalize runs at the merger
    "init": "function() { return {n: 0, s: 0} }",
    "accumulate": "function(st, k) { return {n: st.n + 1, s: st.s + k} }",
    "accumulateArgs": ["$k"],
    "merge": "function(a, b) { return {n: a.n + b.n, s: a.s + b.s} }",
    "finalize": "function(st) { return [st.n, st.s / st.n] }", "lang": "js"}}


def returned():
    """Each shard's documents returned so far (serverStatus metrics.document.returned)."""
    return [s.admin.command("serverStatus")["metrics"]["document"]["returned"] for s in SHARDS]


def test_partial_n_and_js_groups(cl):
    # the N accumulators and $accumulator: each shard groups its documents into partial
    # states ($willBeMerged), the router combines them ($doingMerge): 4 groups a shard
    nacc = {"maxN": ACCS["maxN"], "minN": ACCS["minN"], "js": JS_AVG,
            "minS": {"$minN": {"input": "$name", "n": 5}}, "one": {"$maxN": {"input": "$k", "n": 1}},
            "fAll": {"$firstN": {"input": "$k", "n": 100}},
            "lAll": {"$lastN": {"input": "$name", "n": 100}},
            "top": {"$top": {"output": ["$k", "$v"], "sortBy": {"v": -1, "k": 1}}},
            "bot": {"$bottom": {"output": "$name", "sortBy": {"k": 1}}},
            "tN": {"$topN": {"output": "$k", "sortBy": {"v": 1, "k": -1}, "n": 4}},
            "bN": {"$bottomN": {"output": {"k": "$k", "h": "$h"}, "sortBy": {"h": 1, "k": 1},
                                "n": 3}}}
    p = [{"$group": dict({"_id": "$g"}, **nacc)}, {"$sort": {"_id": 1}}]
    before = returned()
    got = list(cl.ag.t.aggregate(p))
    sent = [a - b for a, b in zip(returned(), before)]
    assert all(4 <= n < 20 for n in sent), sent  # not the shards' 60 documents
    want = list(cl.ag.u.aggregate(p))
    for d in got + want:  # without a $sort first the order of $firstN/$lastN is not defined
        d["fAll"], d["lAll"] = sorted(d["fAll"]), sorted(d["lAll"])
    assert norm(got) == norm(want) and len(got) == 4
    assert [d["js"][0] for d in got] == [30, 30, 30, 30] and len(got[0]["minS"]) == 5
    assert [d["bot"] for d in got] == ["n%03d" % (k + 60) for k in (56, 57, 58, 59)]
    # explain shows the cut: a partial group on the shards, the merging group at the router
    split = cl.ag.command("aggregate", "t", pipeline=p, explain=True)["splitPipeline"]
    shard_group, merge_group = split["shardsPart"][0]["$group"], split["mergerPart"][0]["$group"]
    assert shard_group == dict({"_id": "$g"}, **nacc, **{"$willBeMerged": True})
    assert merge_group == dict({"_id": "$_id"}, **nacc, **{"$doingMerge": True})
    assert split["mergerPart"][1:] == [{"$sort": {"_id": 1}}]
    split = cl.ag.command("explain", {"aggregate": "t", "pipeline": [
        {"$match": {"g": 1}}, {"$group": {"_id": None, "s": {"$sum": "$k"}}}], "cursor": {}})
    assert split["splitPipeline"]["shardsPart"] == [
        {"$match": {"g": 1}}, {"$group": {"_id": None, "s": {"$sum": "$k"}}}]
    # the same pipeline sorted first runs its group at the router: the documents come back
    before = returned()
    same(cl, [{"$sort": {"k": 1}}] + p, ordered=True)
    assert all(n >= 60 for n in (a - b for a, b in zip(returned(), before)))
    # firstN / lastN of fewer than the group holds: n of the group's values
    r = list(cl.ag.t.aggregate([{"$group": {"_id": "$g", "f": {"$firstN": {"input": "$k", "n": 3}},
                                            "l": {"$lastN": {"input": "$k", "n": 2}}}}]))
    assert len(r) == 4 and all(len(d["f"]) == 3 and len(d["l"]) == 2 and
                               all(k % 4 == d["_id"] for k in d["f"] + d["l"]) for d in r)
    # every other accumulator beside one of them combines from the same partial states
    mixed = {k: v for k, v in ACCS.items() if k not in ("first", "last", "push", "mo", "fN", "lN")}
    r = same(cl, [{"$group": dict({"_id": {"g": "$g"}}, js=JS_AVG, **mixed)},
                  {"$sort": {"_id": 1}}], ordered=True)
    assert [list(d) for d in r] == [["_id", "js"] + list(mixed)] * 4
    # n from an expression over the group's key, a group no document reaches, missing inputs
    byk = {"$cond": [{"$eq": ["$gid", 0]}, 1, {"$add": ["$gid", 1]}]}
    r = same(cl, [{"$group": {"_id": {"gid": "$g"}, "m": {"$maxN": {"input": "$v", "n": byk}},
                              "f": {"$minN": {"input": "$k", "n": byk}}}},
                  {"$sort": {"_id": 1}}], ordered=True)
    assert [len(d["f"]) for d in r] == [1, 2, 3, 4]
    assert same(cl, [{"$match": {"name": "none"}}, {"$group": {"_id": None, "m": ACCS["minN"]}}]) == []
    same(cl, [{"$group": {"_id": "$h", "m": {"$minN": {"input": "$nope", "n": 2}},
                          "f": {"$firstN": {"input": "$nope", "n": 2}}, "j": JS_AVG}}])
    # bad n and a failing finalize: the shards' errors, mongod's codes
    for bad in (0, -1, 1.5, "x", {"$add": ["$gid", 0]}):
        for name in ("$minN", "$firstN", "$topN"):
            arg = {"output": "$k", "sortBy": {"k": 1}} if name == "$topN" else {"input": "$k"}
            spec = [{"$group": {"_id": {"gid": "$g"}, "x": {name: dict(arg, n=bad)}}}]
            codes = []
            for coll in ("t", "u"):
                with pytest.raises(OperationFailure) as e:
                    list(cl.ag[coll].aggregate(spec))
                codes.append(e.value.code)
            assert codes[0] == codes[1] and codes[0] in (5787902, 5787903, 5787908), (bad, codes)
    fails = dict(JS_AVG["$accumulator"], finalize="function(s) { return s.nope.x }")
    for coll in ("t", "u"):
        with pytest.raises(OperationFailure) as e:
            list(cl.ag[coll].aggregate([{"$group": {"_id": "$g", "x": {"$accumulator": fails}}}]))
        assert e.value.code == 139


def test_group_shapes(cl):
    same(cl, [{"$bucket": {"groupBy": "$k", "boundaries": [-60, -20, 0, 20, 60],
                           "output": {"n": {"$sum": 1}, "names": {"$push": "$name"}}}}])
    same(cl, [{"$bucketAuto": {"groupBy": "$k", "buckets": 5}}], ordered=True)
    same(cl, [{"$sortByCount": "$h"}], ordered=True)
    same(cl, [{"$unwind": "$tags"}, {"$sortByCount": "$tags"}, {"$sort": {"_id": 1}}],
         ordered=True)
    same(cl, [{"$match": {"g": 1}}, {"$count": "n"}, {"$addFields": {"twice": {
        "$multiply": ["$n", 2]}}}])


def split_of(cl, pipeline, **kw):
    return cl.ag.command("aggregate", "t", pipeline=pipeline, explain=True, **kw)["splitPipeline"]


def test_bucket_and_sort_by_count_split_into_partial_groups(cl):
    # mongos runs them as the $group they stand for: partial groups on the shards, the
    # router groups the groups and sorts; only a shard's groups come back, not its documents
    bucket = {"$bucket": {"groupBy": "$k", "boundaries": [-60, -20, 0, 20, 50],
                          "default": "other",
                          "output": {"n": {"$sum": 1}, "avg": {"$avg": "$v"},
                                     "top": {"$maxN": {"input": "$k", "n": 2}}}}}
    before = returned()
    list(cl.ag.t.aggregate([bucket]))
    sent = [a - b for a, b in zip(returned(), before)]
    assert sent == [2, 3], sent  # shard0's 2 buckets, shard1's 3 (one the default)
    r = same(cl, [bucket], ordered=True)
    assert [d["_id"] for d in r] == [-60, -20, 0, 20, "other"]
    assert [d["n"] for d in r] == [40, 20, 20, 30, 10]
    split = split_of(cl, [bucket])
    sw = split["shardsPart"][0]["$group"]["_id"]["$switch"]
    assert len(sw["branches"]) == 4 and sw["default"] == {"$literal": "other"}
    assert split["mergerPart"][0]["$group"]["_id"] == "$_id"
    assert split["mergerPart"][-1] == {"$sort": {"_id": 1}}
    # without output: a count; strings as boundaries (a "$" string stays a value)
    same(cl, [{"$bucket": {"groupBy": "$name", "boundaries": ["$", "n030", "n090", "n200"]}}],
         ordered=True)
    # a value outside the boundaries and no default: the $switch's error, as the stage's
    codes = []
    for coll in ("t", "u"):
        with pytest.raises(OperationFailure) as e:
            list(cl.ag[coll].aggregate([{"$bucket": {"groupBy": "$k", "boundaries": [0, 10]}}]))
        codes.append(e.value.code)
    assert codes == [40066, 40066]
    # a bad spec is the stage's error at the router, before any shard runs
    with pytest.raises(OperationFailure) as e:
        list(cl.ag.t.aggregate([{"$bucket": {"groupBy": "$k", "boundaries": [5, 1]}}]))
    assert e.value.code == 40194
    # boundaries in a collation's order (strings compared case-insensitively)
    ci = {"locale": "en", "strength": 2}
    p = [{"$bucket": {"groupBy": "$h", "boundaries": ["A", "b", "C", "d"]}}]
    assert same(cl, p, ordered=True, collation=ci) == [
        {"_id": "A", "count": 40}, {"_id": "b", "count": 40}, {"_id": "C", "count": 40}]
    # $sortByCount: {_id: expr, count: {$sum: 1}} then {count: -1}
    p = [{"$match": {"k": {"$gte": -40}}}, {"$sortByCount": {"$mod": ["$k", 7]}},
         {"$sort": {"count": -1, "_id": 1}}]
    before = returned()
    list(cl.ag.t.aggregate(p))
    assert [a - b for a, b in zip(returned(), before)] == [7, 7]  # k % 7 in -6..0, 0..6
    r = same(cl, p, ordered=True)
    assert sum(d["count"] for d in r) == 100
    split = split_of(cl, [{"$sortByCount": "$h"}])
    assert split["shardsPart"] == [{"$group": {"_id": "$h", "count": {"$sum": 1}}}]
    assert split["mergerPart"][-1] == {"$sort": {"count": -1}}
    with pytest.raises(OperationFailure) as e:
        list(cl.ag.t.aggregate([{"$sortByCount": "h"}]))
    assert e.value.code == 40148
    # $bucketAuto needs every document at once: mongos keeps it whole at the merger
    assert split_of(cl, [{"$bucketAuto": {"groupBy": "$k", "buckets": 3}}])["shardsPart"] == []


def test_percentile_and_median_across_shards(cl):
    # each shard keeps its groups' samples (partial states), the router merges them:
    # the answer is the one-shard run's
    pct = {"p": {"$percentile": {"input": "$v", "p": [0, 0.1, 0.5, 0.9, 1],
                                 "method": "approximate"}},
           "m": {"$median": {"input": "$k", "method": "approximate"}},
           "none": {"$median": {"input": "$nope", "method": "approximate"}}}
    p = [{"$group": dict({"_id": "$g"}, **pct)}, {"$sort": {"_id": 1}}]
    before = returned()
    list(cl.ag.t.aggregate(p))
    assert [a - b for a, b in zip(returned(), before)] == [4, 4]  # each shard's 4 groups
    r = same(cl, p, ordered=True)
    assert len(r) == 4 and all(d["none"] is None for d in r)
    ks = [i for i in range(-60, 60) if i % 4 == 0]
    assert r[0]["m"] == float(sorted(ks)[len(ks) // 2 - 1])
    split = split_of(cl, p)
    assert split["shardsPart"][0]["$group"]["$willBeMerged"] is True
    assert split["mergerPart"][0]["$group"]["$doingMerge"] is True
    same(cl, [{"$group": dict({"_id": None}, **pct)}])
    same(cl, [{"$bucket": {"groupBy": "$k", "boundaries": [-60, 0, 60], "output": pct}}],
         ordered=True)
    # the window function and the expression run where they did (merger, shards)
    same(cl, [{"$setWindowFields": {"partitionBy": "$g", "sortBy": {"k": 1}, "output": {
        "m": {"$median": {"input": "$k", "method": "approximate"},
              "window": {"documents": [-2, 2]}}}}}, {"$sort": {"k": 1}}], ordered=True)
    same(cl, [{"$project": {"p": {"$percentile": {"input": "$tags", "p": [0.5, 1],
                                                  "method": "approximate"}}}}])


def test_sort_skip_limit_then_more(cl):
    same(cl, [{"$sort": {"v": -1, "k": 1}}, {"$skip": 5}, {"$limit": 10},
              {"$project": {"k": 1, "v": 1}}], ordered=True)
    same(cl, [{"$match": {"g": {"$ne": 2}}}, {"$skip": 7}, {"$count": "n"}])
    same(cl, [{"$limit": 200}, {"$group": {"_id": "$h", "n": {"$sum": 1}}}])
    same(cl, [{"$sort": {"name": 1}}, {"$limit": 15}, {"$sort": {"k": -1}},
              {"$skip": 3}], ordered=True)


def test_facet_and_windows(cl):
    same(cl, [{"$facet": {
        "byG": [{"$group": {"_id": "$g", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}],
        "top": [{"$sort": {"k": -1}}, {"$limit": 3}, {"$project": {"k": 1}}],
        "count": [{"$count": "n"}]}}])
    same(cl, [{"$setWindowFields": {"partitionBy": "$g", "sortBy": {"k": 1}, "output": {
        "run": {"$sum": "$k", "window": {"documents": ["unbounded", "current"]}},
        "rank": {"$rank": {}}}}}, {"$sort": {"k": 1}}], ordered=True)
    # $sample: the shards draw, the router keeps the smallest draws (no hidden field shown)
    seen, neg = set(), 0
    for _ in range(20):
        r = list(cl.ag.t.aggregate([{"$match": {"g": {"$gte": 0}}}, {"$sample": {"size": 10}},
                                    {"$project": {"k": 1}}]))
        assert len(r) == 10 and len({d["_id"] for d in r}) == 10
        assert all(set(d) == {"_id", "k"} for d in r)
        seen |= {d["_id"] for d in r}
        neg += sum(d["k"] < 0 for d in r)
    assert 60 < neg < 140 and len(seen) > 60  # both shards' documents, about half each
    assert len(list(cl.ag.t.aggregate([{"$sample": {"size": 500}}]))) == 120


def test_lookup_graph_lookup_union_with(cl):
    # the foreign collection unsharded, or sharded (fs) against its unsharded copy (fu)
    for frm_t, frm_u in (("f", "f"), ("fs", "fu")):
        def pair(p_t, p_u, ordered=True):
            got = norm(list(cl.ag.t.aggregate(p_t)))
            want = norm(list(cl.ag.u.aggregate(p_u)))
            assert got == want if ordered else sorted(got, key=repr) == sorted(want, key=repr)

        def lk(frm):
            return [{"$match": {"k": {"$gte": -15, "$lt": 15}}},
                    {"$lookup": {"from": frm, "localField": "k", "foreignField": "k",
                                 "as": "m"}},
                    {"$sort": {"k": 1}}, {"$project": {"k": 1, "m.label": 1}}]
        pair(lk(frm_t), lk(frm_u))
        got = list(cl.ag.t.aggregate(lk(frm_t)))
        assert sum(len(d["m"]) for d in got) == 20  # every foreign document found once

        def lk_pipe(frm):
            return [{"$match": {"g": 3}},
                    {"$lookup": {"from": frm, "let": {"gg": "$g"}, "as": "m", "pipeline": [
                        {"$match": {"$expr": {"$eq": ["$g", "$$gg"]}}},
                        {"$sort": {"_id": 1}}, {"$project": {"_id": 1}}]}},
                    {"$sort": {"k": 1}}]
        pair(lk_pipe(frm_t), lk_pipe(frm_u))

        def gl(frm):
            return [{"$match": {"k": {"$in": [-9, 5]}}},
                    {"$graphLookup": {"from": frm, "startWith": "$k", "connectFromField":
                                      "parent", "connectToField": "k", "as": "chain",
                                      "depthField": "d"}},
                    {"$project": {"k": 1, "chain": {"$sortArray": {
                        "input": "$chain._id", "sortBy": 1}}}}, {"$sort": {"k": 1}}]
        pair(gl(frm_t), gl(frm_u))

        def uw(frm):
            return [{"$project": {"_id": 0, "k": 1}},
                    {"$unionWith": {"coll": frm, "pipeline": [{"$project": {"_id": 0, "k": 1}}]}},
                    {"$group": {"_id": None, "n": {"$sum": 1}, "s": {"$sum": "$k"}}}]
        pair(uw(frm_t), uw(frm_u))
        # the unsharded collection's pipeline reading the sharded one: not from one shard's part
        if frm_t == "fs":
            pair([{"$lookup": {"from": "fs", "localField": "k", "foreignField": "k", "as": "m"}},
                  {"$match": {"m": {"$ne": []}}}, {"$count": "n"}],
                 [{"$lookup": {"from": "fu", "localField": "k", "foreignField": "k", "as": "m"}},
                  {"$match": {"m": {"$ne": []}}}, {"$count": "n"}])
            got = list(cl.ag.u.aggregate([{"$lookup": {"from": "fs", "localField": "k",
                                                       "foreignField": "k", "as": "m"}},
                                          {"$match": {"m": {"$ne": []}}}, {"$count": "n"}]))
            assert got == [{"n": 20}]


def test_out_and_merge(cl):
    p = [{"$match": {"g": {"$in": [0, 1]}}}, {"$group": {"_id": "$h", "n": {"$sum": 1},
                                                         "ks": {"$push": "$k"}}}]
    r = list(cl.ag.t.aggregate(p + [{"$out": "o_t"}]))
    assert r == []
    cl.ag.u.aggregate(p + [{"$out": "o_u"}])
    got = norm(sorted(cl.ag.o_t.find(), key=repr))
    assert got == norm(sorted(cl.ag.o_u.find(), key=repr)) and len(got) == 3
    # $out replaces what was there; into another database too
    cl.ag.t.aggregate([{"$match": {"k": {"$lt": -55}}}, {"$out": "o_t"}])
    assert sorted(d["k"] for d in cl.ag.o_t.find()) == [-60, -59, -58, -57, -56]
    cl.ag.t.aggregate([{"$match": {"g": 2}}, {"$out": {"db": "ag2", "coll": "o"}}])
    assert cl.ag2.o.count_documents({}) == 30
    # $merge: matched documents merged, others inserted, the rest left alone
    for name in ("m_t", "m_u"):
        cl.ag[name].insert_many([{"_id": "a", "n": -1, "keep": True}, {"_id": "zz", "n": 0}])
    mp = [{"$group": {"_id": "$h", "n": {"$sum": 1}}},
          {"$merge": {"into": "m_t", "on": "_id", "whenMatched": "merge",
                      "whenNotMatched": "insert"}}]
    cl.ag.t.aggregate(mp)
    mp[-1]["$merge"]["into"] = "m_u"
    cl.ag.u.aggregate(mp)
    got = sorted(cl.ag.m_t.find(), key=lambda d: d["_id"])
    assert got == sorted(cl.ag.m_u.find(), key=lambda d: d["_id"])
    assert got[0] == {"_id": "a", "n": 40, "keep": True} and len(got) == 4
    # $merge into a sharded collection (ms, split at k = 0) against an unsharded one (mu)
    sharded.split_at_zero(cl, "ag", ["ms"])
    for name in ("ms", "mu"):
        cl.ag[name].insert_many([{"_id": 5, "k": 5, "old": True, "h": "zz"},
                                 {"_id": -7, "k": -7, "old": True}, {"_id": 99, "k": 99}])
    src = [{"$match": {"k": {"$gte": -10, "$lt": 10}}},
           {"$project": {"_id": "$k", "k": 1, "h": 1, "g": 1}}]
    for wm, wnm in (("merge", "discard"), ("replace", "insert"), ("keepExisting", "insert"),
                    ("merge", "insert")):
        for s_, t_ in (("t", "ms"), ("u", "mu")):
            cl.ag[s_].aggregate(src + [{"$addFields": {"mode": wm + wnm}}, {"$merge": {
                "into": t_, "whenMatched": wm, "whenNotMatched": wnm}}])
        assert list(cl.ag.ms.find().sort("_id", 1)) == list(cl.ag.mu.find().sort("_id", 1))
    assert cl.ag.ms.count_documents({}) == 21
    assert cl.ag.ms.find_one({"_id": 5}) == {"_id": 5, "k": 5, "h": "c", "g": 1,
                                             "mode": "mergeinsert"}
    with pytest.raises(OperationFailure) as e:
        cl.ag.t.aggregate(src + [{"$merge": {"into": "ms", "whenMatched": "fail"}}])
    assert e.value.code == 11000
    with pytest.raises(OperationFailure) as e:
        cl.ag.t.aggregate([{"$project": {"_id": 1, "k": 1}},
                           {"$merge": {"into": "ms", "whenNotMatched": "fail"}}])
    assert e.value.code == 13113
    # more than one command's worth (8 MB) of documents: all of them, once, replacing
    big = [{"_id": i, "k": i - 150, "pad": "%05d" % i * 6000} for i in range(300)]
    sharded.split_at_zero(cl, "ag", ["big"])
    cl.ag.big.insert_many(big)
    cl.ag.t.aggregate([{"$match": {"g": 0}}, {"$out": "o_big"}])
    cl.ag.big.aggregate([{"$sort": {"k": 1}}, {"$out": "o_big"}])
    assert sorted(d["_id"] for d in cl.ag.o_big.find({}, {"_id": 1})) == list(range(300))
    assert sum(len(d["pad"]) for d in cl.ag.o_big.find()) == sum(len(d["pad"]) for d in big)
    # $out to a sharded collection is refused, as mongos refuses it
    for src in ("t", "u"):
        with pytest.raises(OperationFailure) as e:
            cl.ag[src].aggregate([{"$match": {"g": 0}}, {"$out": "fs"}])
        assert e.value.code == 28769


def test_merge_with_a_pipeline(cl):
    # whenMatched pipeline into a sharded collection (mp, k < 0 on shard0, k >= 0 on
    # shard1) against the same $merge into an unsharded one (mq): equal results; `on`
    # is the sharded target's default (_id and the shard key)
    sharded.split_at_zero(cl, "ag", ["mp"])
    cl.ag.mq.create_index([("_id", 1), ("k", 1)], unique=True)
    for name in ("mp", "mq"):
        cl.ag[name].insert_many([{"_id": 4, "k": 4, "n": 10}, {"_id": -6, "k": -6, "n": 20},
                                 {"_id": 50, "k": 50, "n": 30}])
    def src(lo, hi):
        return [{"$match": {"k": {"$gte": lo, "$lt": hi}}},
                {"$project": {"_id": "$k", "k": 1, "g": 1}}]
    stages = [
        # $$new is the source document; unmatched ones go in as they are
        {"whenMatched": [{"$set": {"n": {"$add": ["$n", "$$new.g"]}, "from": "$$new.k"}}],
         "whenNotMatched": "insert", "lo": -8, "hi": 8},
        # a custom let (over the source document and the command's let), no $$new with
        # discard; -10, -9, 8 and 9 have no match and are discarded
        {"let": {"twice": {"$multiply": ["$g", 2]}, "c": "$$base"},
         "whenMatched": [{"$set": {"t": {"$add": ["$$twice", "$$c"]}}}],
         "whenNotMatched": "discard", "lo": -10, "hi": 10},
    ]
    for st in stages:
        lo, hi = st.pop("lo"), st.pop("hi")
        for s_, t_ in (("t", "mp"), ("u", "mq")):
            cl.ag[s_].aggregate(src(lo, hi) + [{"$merge": dict(st, into=t_, on=["_id", "k"])}],
                                let={"base": 100})
        assert list(cl.ag.mp.find().sort("_id", 1)) == list(cl.ag.mq.find().sort("_id", 1))
    got = {d["_id"]: d for d in cl.ag.mp.find()}
    assert len(got) == 17  # 16 source documents (-8 .. 7) and 50
    assert got[4] == {"_id": 4, "k": 4, "n": 10, "from": 4, "t": 100}
    assert got[-6] == {"_id": -6, "k": -6, "n": 22, "from": -6, "t": 104}
    assert got[-3] == {"_id": -3, "k": -3, "g": 1, "t": 102}
    assert got[50] == {"_id": 50, "k": 50, "n": 30}
    assert [SHARDS[0].ag.mp.count_documents({}), SHARDS[1].ag.mp.count_documents({})] == [8, 9]
    for t_ in ("mp", "mq"):
        # a pipeline moving a document to the other shard fails as that update would; one
        # changing _id fails as mongod's (66); let without a pipeline: 51199; let's new
        # other than "$$ROOT": 51273; $$new with a let and discard: undefined (17276)
        for st, code in (({"whenMatched": [{"$set": {"k": {"$multiply": ["$k", -1]}}}]}, 20),
                         ({"whenMatched": [{"$set": {"_id": "x"}}]}, 66),
                         ({"let": {"a": 1}, "whenMatched": "merge"}, 51199),
                         ({"let": {"new": 1}, "whenMatched": [{"$set": {"z": 1}}]}, 51273),
                         ({"let": {}, "whenMatched": [{"$set": {"z": "$$new"}}],
                           "whenNotMatched": "discard"}, 17276)):
            if code == 20 and t_ == "mq":
                continue  # an unsharded target has no shard key
            with pytest.raises(OperationFailure) as e:
                cl.ag.t.aggregate(src(-8, 8) + [{"$merge": dict(st, into=t_)}])
            assert e.value.code == code, (t_, st, e.value.details)
    assert list(cl.ag.mp.find().sort("_id", 1)) == list(cl.ag.mq.find().sort("_id", 1))


def test_text_score_sort_and_geo_near(cl):
    p = [{"$match": {"$text": {"$search": "apple cherry"}}},
         {"$sort": {"score": {"$meta": "textScore"}, "k": 1}},
         {"$project": {"k": 1, "txt": 1, "score": {"$meta": "textScore"}}}]
    r = same(cl, p, ordered=True)
    assert len(r) == 80 and r[0]["score"] >= r[-1]["score"]
    assert all("\x7ftextScore" not in d for d in r)
    p = [{"$match": {"$text": {"$search": "banana"}}},
         {"$sort": {"s": {"$meta": "textScore"}, "k": -1}}, {"$limit": 7}]
    r = same(cl, p, ordered=True)
    assert len(r) == 7 and all("score" not in d and "\x7ftextScore" not in d for d in r)
    # a find sorted by the score runs as that pipeline across shards
    def fnd(name):
        return list(cl.ag[name].find({"$text": {"$search": "cherry pie"}},
                                     {"k": 1, "s": {"$meta": "textScore"}})
                    .sort([("s", {"$meta": "textScore"}), ("k", -1)]).skip(2).limit(25))
    r = fnd("t")
    assert r == fnd("u") and len(r) == 25 and r[0]["s"] >= r[-1]["s"]
    p = [{"$geoNear": {"near": [4.5, 0.5], "distanceField": "dist"}},
         {"$limit": 12}, {"$project": {"k": 1, "dist": 1}}]
    r = list(cl.ag.t.aggregate(p))
    want = list(cl.ag.u.aggregate(p))
    assert [round(d["dist"], 9) for d in r] == [round(d["dist"], 9) for d in want]
    assert len(r) == 12


def test_cursor_batches_and_errors(cl):
    # the merged result is served in batches through getMore
    p = [{"$sort": {"k": 1}}, {"$group": {"_id": "$k", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]
    r = list(cl.ag.t.aggregate(p, batchSize=7))
    assert [d["_id"] for d in r] == list(range(-60, 60))
    # explain: true answers as the explain command (mongos's shape, each shard's plan)
    for p in ([{"$group": {"_id": "$g", "a": {"$avg": "$v"}}}], [{"$match": {"g": 1}}]):
        e = cl.ag.command("aggregate", "t", pipeline=p, explain=True)
        assert e["queryPlanner"]["winningPlan"]["stage"] == "SHARD_MERGE"
        assert len(e["queryPlanner"]["winningPlan"]["shards"]) == 2
    # a stage error at the merger answers as sabled's
    with pytest.raises(OperationFailure) as e1:
        list(cl.ag.t.aggregate([{"$group": {"_id": "$g", "x": {"$avg": "$v"}}},
                                {"$project": {"y": {"$divide": [1, 0]}}}]))
    with pytest.raises(OperationFailure) as e2:
        list(cl.ag.u.aggregate([{"$group": {"_id": "$g", "x": {"$avg": "$v"}}},
                                {"$project": {"y": {"$divide": [1, 0]}}}]))
    assert e1.value.code == e2.value.code
    # a stage the router cannot run after the split point: 238, as before
    with pytest.raises(OperationFailure) as e:
        list(cl.ag.t.aggregate([{"$group": {"_id": 1}}, {"$lookup": {
            "from": "f", "as": "m", "pipeline": [{"$collStats": {}}]}}]))
    assert e.value.code == 238


def test_a_failing_shard_leaves_no_cursor_open(cl):
    # ag.big (test_out_and_merge): 150 documents a shard, k = -1 on shard0 only; shard0's
    # part fails, shard1's leaves a cursor open after its first batch: the router kills it
    def open_cursors():
        return SHARDS[1].admin.command("serverStatus")["metrics"]["cursor"]["open"]["total"]
    before = open_cursors()
    with pytest.raises(OperationFailure):
        list(cl.ag.big.aggregate([{"$project": {"x": {"$divide": [1, {"$add": ["$k", 1]}]}}},
                                  {"$group": {"_id": None, "s": {"$stdDevPop": "$x"}}}]))
    assert open_cursors() == before


def test_code_with_nul_through_router(cl):
    # code values holding a NUL byte (test_code_nul.py) come back whole from the router's
    # merges: sorted finds, partial groups, the merger's stages, distinct
    from bson.code import Code
    c, w = Code("a\x00b"), Code("x\x00y", {"s": 1})

    def same(v, want):
        assert v == want and isinstance(v, Code) and v.scope == want.scope, (v, want)

    sharded.split_at_zero(cl, "ag", ["codes"])
    t = cl.ag.codes
    t.insert_many([{"_id": k, "k": k, "c": c, "w": w} for k in (-2, -1, 0, 1)])
    docs = list(t.find({}, {"c": 1, "w": 1, "k": 1}).sort("k", -1))
    assert [d["k"] for d in docs] == [1, 0, -1, -2]
    for d in docs:
        same(d["c"], c)
        same(d["w"], w)
    g = list(t.aggregate([{"$group": {"_id": "$c", "f": {"$first": "$w"}, "all": {"$push": "$c"},
                                      "top": {"$max": "$w"}}},
                          {"$addFields": {"again": "$f"}}]))
    assert len(g) == 1 and len(g[0]["all"]) == 4
    same(g[0]["_id"], c)
    same(g[0]["f"], w)
    same(g[0]["top"], w)
    same(g[0]["again"], w)
    for v in g[0]["all"]:
        same(v, c)
    d = next(t.aggregate([{"$sort": {"k": 1}}, {"$limit": 1},
                          {"$project": {"_id": 0, "p": "$c", "q": ["$w"]}}]))
    same(d["p"], c)
    same(d["q"][0], w)
    vals = t.distinct("w")
    assert len(vals) == 1
    same(vals[0], w)
