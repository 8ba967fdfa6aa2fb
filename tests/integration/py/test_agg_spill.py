"""
Memory limits of blocking stages and spilling to disk (issue 5).

Each test sets small limits with setParameter (as MongoDB's own tests do) so
that a few hundred kilobytes of data spill; results with spilling must equal
the in-memory results (computed under the default 100 MB limits); without
allowDiskUse the stage fails with 292; spill files leave nothing in
<dbpath>/_tmp.
"""

import os

import pytest
from bson.son import SON
from pymongo.errors import OperationFailure


SMALL = 16 * 1024
DEFAULT = 100 * 1024 * 1024
PARAMS = ["internalQueryMaxBlockingSortMemoryUsageBytes",
          "internalDocumentSourceGroupMaxMemoryBytes"]


def agg(coll, pipeline, **kw):
    return list(coll.aggregate(pipeline, **kw))


def set_limits(client, n, disk_default=True):
    for p in PARAMS:
        client.admin.command(SON([("setParameter", 1), (p, n)]))
    client.admin.command(SON([("setParameter", 1), ("allowDiskUseByDefault", disk_default)]))


@pytest.fixture
def limits(client):
    """Run the test's in-memory reference first, then call small() to shrink the limits."""
    class L:
        def small(self, disk_default=True):
            set_limits(client, SMALL, disk_default)

        def default(self):
            set_limits(client, DEFAULT)
    lim = L()
    lim.default()
    try:
        yield lim
    finally:
        lim.default()


@pytest.fixture
def data(db):
    docs = []
    for i in range(3000):
        d = {"_id": i, "k": (i * 7919) % 211, "s": "v%d" % (i % 13), "n": i, "h": i * 0.5,
             "o": {"a": i % 5, "f%d" % (i % 7): i}, "pad": "x" * (i % 40)}
        if i % 11 == 0:
            del d["n"]  # missing values for $first/$last/$push
        if i % 17 == 0:
            d["n"] = None
        docs.append(d)
    db.c.insert_many(docs)
    return db.c


def status(client):
    return client.admin.command("serverStatus")["metrics"]["query"]


def tmp_empty(server):
    tmp = os.path.join(server.dbpath, "_tmp")
    return not os.path.exists(tmp) or os.listdir(tmp) == []


GROUP = {"$group": {
    "_id": "$k",
    "sum": {"$sum": "$n"}, "sumh": {"$sum": "$h"}, "avg": {"$avg": "$n"},
    "min": {"$min": "$s"}, "max": {"$max": "$n"},
    "first": {"$first": "$n"}, "last": {"$last": "$n"},
    "push": {"$push": "$n"}, "set": {"$addToSet": "$s"},
    "merged": {"$mergeObjects": "$o"}, "count": {"$count": {}},
}}


def by_id(docs):
    return sorted(docs, key=lambda d: repr(d["_id"]))


def test_parameters(client):
    r = client.admin.command(SON([("getParameter", 1)] + [(p, 1) for p in PARAMS] +
                                 [("allowDiskUseByDefault", 1)]))
    for p in PARAMS:
        assert r[p] == DEFAULT
    assert r["allowDiskUseByDefault"] is True
    r = client.admin.command(SON([("setParameter", 1), (PARAMS[1], 5000)]))
    assert r["was"] == DEFAULT
    assert client.admin.command(SON([("getParameter", 1), (PARAMS[1], 1)]))[PARAMS[1]] == 5000
    with pytest.raises(OperationFailure) as e:
        client.admin.command(SON([("setParameter", 1), (PARAMS[1], "lots")]))
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        client.admin.command(SON([("setParameter", 1), (PARAMS[0], -1)]))
    assert e.value.code == 2
    set_limits(client, DEFAULT)


def test_group_spills_with_equal_results(data, client, server, limits):
    pipe = [{"$sort": {"_id": 1}}, GROUP]  # input order defines $first/$last/$push
    want = agg(data, pipe)
    assert len(want) == 211
    before = status(client)["group"]["spills"]
    limits.small()
    got = agg(data, pipe, allowDiskUse=True)
    assert status(client)["group"]["spills"] > before
    assert by_id(got) == by_id(want)
    assert by_id(agg(data, pipe)) == by_id(want)  # allowDiskUseByDefault: true
    assert tmp_empty(server)


def test_std_dev_spills_with_equal_results(data, client, limits):
    """$stdDevPop/$stdDevSamp: partial (count, mean, squares) states merge after a spill."""
    import statistics
    pipe = [{"$group": {"_id": "$k", "p": {"$stdDevPop": "$h"}, "s": {"$stdDevSamp": "$n"},
                        "hs": {"$push": "$h"}, "ns": {"$push": "$n"}}}]
    want = {d["_id"]: d for d in agg(data, pipe)}
    for d in want.values():
        assert d["p"] == pytest.approx(statistics.pstdev(d["hs"]))
        ns = [n for n in d["ns"] if n is not None]  # non-numbers are ignored
        assert d["s"] == (pytest.approx(statistics.stdev(ns)) if len(ns) > 1 else None)
    before = status(client)["group"]["spills"]
    limits.small()
    got = {d["_id"]: d for d in agg(data, pipe, allowDiskUse=True)}
    assert status(client)["group"]["spills"] > before
    assert got.keys() == want.keys()
    for k, d in got.items():
        assert d["p"] == pytest.approx(want[k]["p"]) and d["hs"] == want[k]["hs"]
        assert d["s"] == (None if want[k]["s"] is None else pytest.approx(want[k]["s"]))


def test_n_accumulators_spill_with_equal_results(data, client, limits):
    """$firstN/$lastN keep input order and $minN/$maxN/$topN/$bottom their order across
    spilled runs."""
    pipe = [{"$sort": {"_id": 1}}, {"$group": {
        "_id": "$k", "f": {"$firstN": {"input": "$n", "n": 4}},
        "l": {"$lastN": {"input": "$n", "n": 3}}, "mn": {"$minN": {"input": "$h", "n": 3}},
        "mx": {"$maxN": {"input": "$s", "n": 2}},
        "tn": {"$topN": {"output": ["$_id", "$h"], "sortBy": {"h": -1}, "n": 3}},
        "b": {"$bottom": {"output": "$_id", "sortBy": {"s": 1, "n": 1}}}}}]
    want = by_id(agg(data, pipe))
    assert len(want) == 211 and all(len(d["f"]) == 4 and len(d["mn"]) == 3 for d in want)
    before = status(client)["group"]["spills"]
    limits.small()
    assert by_id(agg(data, pipe, allowDiskUse=True)) == want
    assert status(client)["group"]["spills"] > before


def test_group_without_disk_fails_292(data, limits):
    limits.small()
    with pytest.raises(OperationFailure) as e:
        agg(data, [GROUP], allowDiskUse=False)
    assert e.value.code == 292
    assert "Exceeded memory limit for $group" in str(e.value)
    # allowDiskUseByDefault false: not giving allowDiskUse means no disk
    limits.small(disk_default=False)
    with pytest.raises(OperationFailure) as e:
        agg(data, [GROUP])
    assert e.value.code == 292
    assert len(agg(data, [GROUP], allowDiskUse=True)) == 211


def test_group_few_groups_fits(data, limits):
    """Small state (a count per group) stays in memory without allowDiskUse."""
    limits.small()
    r = agg(data, [{"$group": {"_id": "$s", "c": {"$sum": 1}}}], allowDiskUse=False)
    assert sum(d["c"] for d in r) == 3000


def test_group_by_whole_key_spills(data, client, limits):
    """Every document its own group: many runs, each key once."""
    pipe = [{"$group": {"_id": {"k": "$k", "i": "$_id"}, "p": {"$push": "$pad"}}}]
    want = agg(data, pipe)
    limits.small()
    got = agg(data, pipe)
    assert len(got) == 3000 and by_id(got) == by_id(want)


def test_sort_spills_with_equal_results(data, client, server, limits):
    pipe = [{"$project": {"k": 1, "pad": 1, "s": 1}}, {"$sort": {"k": -1, "s": 1}}]
    want = agg(data, pipe)
    before = status(client)["sort"]["spillToDisk"]
    limits.small()
    assert agg(data, pipe, allowDiskUse=True) == want  # stable: ties keep input order
    assert status(client)["sort"]["spillToDisk"] > before
    with pytest.raises(OperationFailure) as e:
        agg(data, pipe, allowDiskUse=False)
    assert e.value.code == 292
    assert "Sort exceeded memory limit of %d bytes" % SMALL in str(e.value)
    # a leading $sort (run by the query executor) is held to the same limit
    lead = [{"$sort": {"pad": -1, "_id": 1}}, {"$project": {"pad": 1}}]
    with pytest.raises(OperationFailure) as e:
        agg(data, lead, allowDiskUse=False)
    assert e.value.code == 292
    limits.default()
    want = agg(data, lead)
    limits.small()
    assert agg(data, lead, allowDiskUse=True) == want
    assert tmp_empty(server)


def test_bucket_and_sort_by_count_spill(data, limits):
    bucket = [{"$bucket": {"groupBy": "$n", "boundaries": [0, 500, 1000, 2000, 2500],
                           "default": "other",
                           "output": {"c": {"$sum": 1}, "ids": {"$push": "$_id"},
                                      "m": {"$max": "$pad"}}}}]
    sbc = [{"$sortByCount": {"$mod": ["$_id", 400]}}]
    want_b, want_s = agg(data, bucket), agg(data, sbc)
    assert [d["_id"] for d in want_b] == [0, 500, 1000, 2000, "other"]
    limits.small()
    # $push of every _id makes a bucket's state larger than the limit
    assert agg(data, bucket) == want_b
    assert agg(data, sbc) == want_s
    for pipe in (bucket, sbc):
        with pytest.raises(OperationFailure) as e:
            agg(data, pipe, allowDiskUse=False)
        assert e.value.code == 292


def test_bucket_auto(db, data, limits):
    """$bucketAuto: round(n / buckets) documents a bucket, equal values kept together,
    max = the next bucket's min; its sort and its grouping spill like $sort and $group."""
    db.ba.insert_many([{"_id": i} for i in range(1, 101)])
    r = agg(db.ba, [{"$bucketAuto": {"groupBy": "$_id", "buckets": 5}}])
    assert r == [{"_id": {"min": 1 + 20 * b, "max": 21 + 20 * b if b < 4 else 100}, "count": 20}
                 for b in range(5)]
    db.bb.insert_many([{"x": v} for v in [1, 1, 1, 1, 2, 2, 3, 4, 5, 5, 5, 5, 5, None]] + [{}])
    r = agg(db.bb, [{"$bucketAuto": {"groupBy": "$x", "buckets": 3,
                                     "output": {"xs": {"$push": "$x"}}}}])
    assert r == [{"_id": {"min": None, "max": 2}, "xs": [None, 1, 1, 1, 1]},
                 {"_id": {"min": 2, "max": 5}, "xs": [2, 2, 3, 4, 5, 5, 5, 5, 5]}]
    with pytest.raises(OperationFailure) as e:
        agg(db.bb, [{"$bucketAuto": {"groupBy": "$x"}}])
    assert e.value.code == 40246
    pipe = [{"$bucketAuto": {"groupBy": "$k", "buckets": 7,
                             "output": {"ids": {"$push": "$_id"}, "c": {"$sum": 1}}}}]
    want = agg(data, pipe)
    assert sum(d["c"] for d in want) == 3000
    limits.small()
    assert agg(data, pipe) == want
    with pytest.raises(OperationFailure) as e:
        agg(data, pipe, allowDiskUse=False)
    assert e.value.code == 292


def test_facet_subpipelines_spill(data, limits):
    pipe = [{"$facet": {
        "g": [{"$group": {"_id": "$k", "p": {"$push": "$_id"}}}, {"$sort": {"_id": 1}}],
        "s": [{"$sort": {"pad": -1, "_id": 1}}, {"$project": {"_id": 1}}],
    }}]
    want = agg(data, pipe)
    limits.small()
    assert agg(data, pipe) == want
    with pytest.raises(OperationFailure) as e:
        agg(data, pipe, allowDiskUse=False)
    assert e.value.code == 292


def test_push_and_add_to_set_limits(data, client):
    try:
        client.admin.command(SON([("setParameter", 1), ("internalQueryMaxPushBytes", 2000)]))
        with pytest.raises(OperationFailure) as e:
            agg(data, [{"$group": {"_id": None, "p": {"$push": "$pad"}}}])
        assert e.value.code == 146
        assert "$push used too much memory" in str(e.value)
        client.admin.command(SON([("setParameter", 1), ("internalQueryMaxAddToSetBytes", 2000)]))
        with pytest.raises(OperationFailure) as e:
            agg(data, [{"$group": {"_id": None, "p": {"$addToSet": "$_id"}}}])
        assert e.value.code == 146
    finally:
        for p in ("internalQueryMaxPushBytes", "internalQueryMaxAddToSetBytes"):
            client.admin.command(SON([("setParameter", 1), (p, DEFAULT)]))


def test_find_sort_spills_or_fails(data, client, server, limits):
    want = list(data.find({}, {"pad": 1, "k": 1}).sort([("pad", -1), ("k", 1)]))
    before = status(client)["sort"]["spillToDisk"]
    limits.small()
    got = list(data.find({}, {"pad": 1, "k": 1}).sort([("pad", -1), ("k", 1)]))
    assert got == want
    assert status(client)["sort"]["spillToDisk"] > before
    got = list(data.find({}, {"pad": 1, "k": 1}, allow_disk_use=True)
               .sort([("pad", -1), ("k", 1)]).batch_size(50))
    assert got == want
    with pytest.raises(OperationFailure) as e:
        list(data.find({}, allow_disk_use=False).sort("pad", -1))
    assert e.value.code == 292
    # a limited sort keeps only skip+limit documents: it fits
    assert len(list(data.find({}, allow_disk_use=False).sort("pad", -1).limit(5))) == 5
    assert tmp_empty(server)


def test_bucket_boundaries_follow_collation(db):
    """$bucket compares boundaries and values in the collation's order (MongoDB's
    collation_bucket test): numericOrdering puts "10" after "2"."""
    db.nums.insert_many([{"num": n} for n in
                         ["1", "2", "5", "10", "20", "50", "100", "200", "500"]])
    num = {"locale": "en_US", "numericOrdering": True}
    r = agg(db.nums, [{"$bucket": {"groupBy": "$num", "boundaries": ["1", "10", "100", "1000"]}}],
            collation=num)
    assert r == [{"_id": "1", "count": 3}, {"_id": "10", "count": 3}, {"_id": "100", "count": 3}]
    with pytest.raises(OperationFailure):  # "2" fits no bucket in binary order
        agg(db.nums, [{"$bucket": {"groupBy": "$num", "boundaries": ["1", "10", "100", "1000"]}}])
    with pytest.raises(OperationFailure) as e:  # not ascending under the collation
        agg(db.nums, [{"$bucket": {"groupBy": "$num", "boundaries": ["100", "20", "4"]}}],
            collation=num)
    assert e.value.code == 40194
    # the default bucket sorts among the others by _id: "2" < "100" numerically
    r = agg(db.nums, [{"$bucket": {"groupBy": "$num", "boundaries": ["100", "999"],
                                   "default": "2"}}], collation=num)
    assert r == [{"_id": "2", "count": 6}, {"_id": "100", "count": 3}]


def test_startup_empties_tmp(fresh_server):
    tmp = os.path.join(fresh_server.dbpath, "_tmp")
    os.makedirs(tmp)
    with open(os.path.join(tmp, "spill-sort-left"), "w") as f:
        f.write("left by a crashed process")
    fresh_server.start(["--setParameter", "internalDocumentSourceGroupMaxMemoryBytes=4096"])
    assert os.listdir(tmp) == []
    c = fresh_server.client()
    try:
        assert c.admin.command(SON([("getParameter", 1), (PARAMS[1], 1)]))[PARAMS[1]] == 4096
    finally:
        c.close()
