"""
Geospatial queries: 2dsphere indexes (version 3) on GeoJSON and legacy
points, $geoWithin (a polygon with a hole, $centerSphere, the flat legacy
shapes), $geoIntersects, $near / $nearSphere in distance order with
$minDistance / $maxDistance, the $geoNear stage, 2d indexes, and mongod's
errors (Can't extract geo keys, 16755; $near without a geo index).
"""

import math

import pytest
from pymongo import GEO2D, GEOSPHERE
from pymongo.errors import OperationFailure, WriteError

EARTH_M = 6378100.0


def ids(cursor):
    return sorted(d["_id"] for d in cursor)


def pt(x, y):
    return {"type": "Point", "coordinates": [x, y]}


def sphere_m(x1, y1, x2, y2):
    """Great-circle distance in meters (haversine), computed independently of the server."""
    l1, l2 = math.radians(y1), math.radians(y2)
    dl, dg = l2 - l1, math.radians(x2 - x1)
    a = math.sin(dl / 2) ** 2 + math.cos(l1) * math.cos(l2) * math.sin(dg / 2) ** 2
    return 2 * EARTH_M * math.asin(math.sqrt(a))


# A square 0..10 x 0..10 with a 4..6 x 4..6 hole.
SQUARE_WITH_HOLE = {"type": "Polygon", "coordinates": [
    [[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]],
    [[4, 4], [6, 4], [6, 6], [4, 6], [4, 4]],
]}


@pytest.fixture
def places(db):
    c = db.places
    c.create_index([("loc", GEOSPHERE)])
    c.insert_many([
        {"_id": 1, "loc": pt(1, 1), "kind": "a"},
        {"_id": 2, "loc": pt(5, 5), "kind": "a"},           # in the hole
        {"_id": 3, "loc": pt(9, 9), "kind": "b"},
        {"_id": 4, "loc": pt(20, 20), "kind": "b"},         # outside
        {"_id": 5, "loc": [2, 8], "kind": "a"},              # legacy pair
        {"_id": 6, "loc": {"type": "LineString", "coordinates": [[1, 2], [3, 2]]}},
        {"_id": 7, "loc": {"type": "LineString", "coordinates": [[8, 5], [15, 5]]}},  # crosses out
        {"_id": 8, "loc": {"type": "Polygon", "coordinates": [[[7, 7], [8, 7], [8, 8], [7, 8], [7, 7]]]}},
        {"_id": 9, "loc": {"type": "MultiPoint", "coordinates": [[1, 9], [30, 30]]}},
        {"_id": 10, "kind": "no location"},
    ])
    return c


def test_index_spec(places):
    spec = places.index_information()["loc_2dsphere"]
    assert spec["key"] == [("loc", "2dsphere")]
    assert spec["2dsphereIndexVersion"] == 3


def test_geo_within_polygon_with_hole(places):
    q = {"loc": {"$geoWithin": {"$geometry": SQUARE_WITH_HOLE}}}
    assert ids(places.find(q)) == [1, 3, 5, 6, 8]
    # the same answer without the index (a filter on a collection scan)
    assert ids(places.find(q).hint([("$natural", 1)])) == [1, 3, 5, 6, 8]
    # with another predicate
    assert ids(places.find({"$and": [q, {"kind": "a"}]})) == [1, 5]


def test_geo_within_uses_index(places):
    q = {"loc": {"$geoWithin": {"$geometry": SQUARE_WITH_HOLE}}}
    plan = places.find(q).explain()
    assert "loc_2dsphere" in str(plan["queryPlanner"]["winningPlan"])
    assert "GEO" in str(plan["queryPlanner"]["winningPlan"]) or "IXSCAN" in str(plan["queryPlanner"]["winningPlan"])


def test_geo_intersects(places):
    # a line ending on point 3 and crossing line 7 (a point on a line's interior is not exact)
    line = {"type": "LineString", "coordinates": [[9, 0], [9, 9]]}
    assert ids(places.find({"loc": {"$geoIntersects": {"$geometry": line}}})) == [3, 7]
    poly = {"type": "Polygon", "coordinates": [[[7.5, 7.5], [12, 7.5], [12, 12], [7.5, 12], [7.5, 7.5]]]}
    assert ids(places.find({"loc": {"$geoIntersects": {"$geometry": poly}}})) == [3, 8]


def test_center_sphere_and_flat_shapes(places):
    # 2 degrees of arc around (1, 1): points 1 only among points; line 6 is within too
    r = math.radians(2.5)
    assert ids(places.find({"loc": {"$geoWithin": {"$centerSphere": [[1, 1], r]}}})) == [1, 6]
    assert ids(places.find({"loc": {"$geoWithin": {"$box": [[0, 0], [6, 9]]}}})) == [1, 2, 5]
    assert ids(places.find({"loc": {"$geoWithin": {"$center": [[5, 5], 1]}}})) == [2]
    assert ids(places.find({"loc": {"$geoWithin": {"$polygon": [[0, 0], [10, 0], [0, 10]]}}})) == [1, 2, 5]


def test_near_order_and_bounds(db):
    c = db.near
    c.create_index([("loc", GEOSPHERE)])
    docs = [{"_id": i, "loc": pt((i * 37 % 101) / 10.0 - 5, (i * 53 % 97) / 10.0 - 5)} for i in range(200)]
    c.insert_many(docs)
    center = (0.3, -0.2)
    want = sorted(docs, key=lambda d: sphere_m(center[0], center[1], *d["loc"]["coordinates"]))
    got = list(c.find({"loc": {"$near": {"$geometry": pt(*center)}}}).limit(20))
    assert [d["_id"] for d in got] == [d["_id"] for d in want[:20]]
    # $minDistance / $maxDistance, in meters, bound the result and keep the order
    lo, hi = 100000, 300000
    inside = [d["_id"] for d in want
              if lo <= sphere_m(center[0], center[1], *d["loc"]["coordinates"]) <= hi]
    got = [d["_id"] for d in c.find({"loc": {"$near": {"$geometry": pt(*center),
                                                       "$minDistance": lo, "$maxDistance": hi}}})]
    assert got == inside and len(got) > 5
    # $nearSphere with a legacy point: distances in radians
    got = [d["_id"] for d in c.find({"loc": {"$nearSphere": list(center),
                                             "$maxDistance": hi / EARTH_M}})]
    assert got == [d["_id"] for d in want
                   if sphere_m(center[0], center[1], *d["loc"]["coordinates"]) <= hi]


def test_near_needs_geo_index(db):
    db.plain.insert_one({"loc": pt(0, 0)})
    with pytest.raises(OperationFailure) as e:
        list(db.plain.find({"loc": {"$near": {"$geometry": pt(0, 0)}}}))
    assert e.value.code == 291
    assert "unable to find index for $geoNear query" in str(e.value)
    with pytest.raises(OperationFailure):
        list(db.plain.find({"$or": [{"loc": {"$near": [0, 0]}}, {"a": 1}]}))


def test_geo_near_stage(db):
    c = db.gn
    c.create_index([("loc", GEOSPHERE)])
    c.insert_many([{"_id": i, "loc": pt(i * 0.01, 0), "even": i % 2 == 0} for i in range(30)])
    out = list(c.aggregate([
        {"$geoNear": {"near": pt(0.1, 0), "distanceField": "dist", "spherical": True,
                      "query": {"even": True}, "maxDistance": 6000, "includeLocs": "where"}},
        {"$project": {"dist": 1, "where": 1}},
    ]))
    want = sorted((i for i in range(0, 30, 2) if sphere_m(0.1, 0, i * 0.01, 0) <= 6000),
                  key=lambda i: sphere_m(0.1, 0, i * 0.01, 0))
    assert [d["_id"] for d in out] == want
    for d in out:
        assert abs(d["dist"] - sphere_m(0.1, 0, d["_id"] * 0.01, 0)) < 1.0
        assert d["where"] == pt(d["_id"] * 0.01, 0)
    # distanceMultiplier, and key naming the index's field
    out = list(c.aggregate([{"$geoNear": {"near": pt(0, 0), "distanceField": "km", "key": "loc",
                                          "distanceMultiplier": 0.001}}, {"$limit": 3}]))
    assert [d["_id"] for d in out] == [0, 1, 2]
    assert abs(out[2]["km"] - sphere_m(0, 0, 0.02, 0) / 1000) < 1e-3
    with pytest.raises(OperationFailure):
        list(c.aggregate([{"$match": {}}, {"$geoNear": {"near": pt(0, 0), "distanceField": "d"}}]))


def test_invalid_geometry_refused(db):
    c = db.bad
    c.create_index([("loc", GEOSPHERE)])
    bad = [
        {"type": "Point", "coordinates": [200, 0]},
        {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 0.5]]]},  # not closed
        {"type": "Polygon", "coordinates": [[[0, 0], [2, 2], [2, 0], [0, 2], [0, 0]]]},  # crosses
        {"type": "Nope", "coordinates": [0, 0]},
        "not a geometry",
    ]
    for g in bad:
        with pytest.raises(WriteError) as e:
            c.insert_one({"loc": g})
        assert e.value.code == 16755
        assert "Can't extract geo keys" in str(e.value)
    assert c.count_documents({}) == 0
    # an index build over a bad document fails the same way
    db.bad2.insert_one({"loc": {"type": "Point", "coordinates": ["x", 0]}})
    with pytest.raises(OperationFailure) as e:
        db.bad2.create_index([("loc", GEOSPHERE)])
    assert e.value.code == 16755
    with pytest.raises(OperationFailure):
        list(c.find({"loc": {"$geoWithin": {"$geometry": {"type": "Point", "coordinates": [0, 0]}}}}))


def test_index_follows_updates_and_compound(db):
    c = db.upd
    c.create_index([("loc", GEOSPHERE), ("cat", 1)])
    c.insert_many([{"_id": 1, "loc": pt(0, 0), "cat": "x"}, {"_id": 2, "loc": pt(50, 50), "cat": "y"}])
    c.update_one({"_id": 2}, {"$set": {"loc": pt(0.001, 0.001)}})
    got = [d["_id"] for d in c.find({"loc": {"$near": {"$geometry": pt(0, 0), "$maxDistance": 1000}}})]
    assert got == [1, 2]
    got = [d["_id"] for d in c.find({"loc": {"$near": {"$geometry": pt(0, 0)}}, "cat": "y"})]
    assert got == [2]
    c.delete_one({"_id": 1})
    assert [d["_id"] for d in c.find({"loc": {"$nearSphere": {"$geometry": pt(0, 0)}}})] == [2]


def test_2d_index(db):
    c = db.flat
    c.create_index([("p", GEO2D)])
    c.insert_many([{"_id": i, "p": [i, i % 3]} for i in range(10)])
    got = [d["_id"] for d in c.find({"p": {"$near": [4.2, 1]}}).limit(4)]
    want = sorted(range(10), key=lambda i: (math.hypot(i - 4.2, i % 3 - 1), i))[:4]
    assert got == want
    got = [d["_id"] for d in c.find({"p": {"$near": [0, 0], "$maxDistance": 2.9}})]
    assert sorted(got) == [0, 1, 2] and got[0] == 0
    assert ids(c.find({"p": {"$geoWithin": {"$box": [[2, 0], [5, 1]]}}})) == [3, 4]
    with pytest.raises(WriteError) as e:
        c.insert_one({"p": "nowhere"})
    assert e.value.code == 13026


def test_index_survives_restart(fresh_server):
    fresh_server.start()
    c = fresh_server.client()
    coll = c.db.g
    coll.create_index([("loc", GEOSPHERE)])
    coll.insert_many([{"_id": i, "loc": pt(i, 0)} for i in range(5)])
    c.close()
    fresh_server.restart()
    c = fresh_server.client()
    coll = c.db.g
    assert [d["_id"] for d in coll.find({"loc": {"$near": {"$geometry": pt(2.2, 0)}}})] == [2, 3, 1, 4, 0]
    with pytest.raises(WriteError) as e:
        coll.insert_one({"loc": {"type": "Point", "coordinates": [0, 91]}})
    assert e.value.code == 16755
    # a missing collection: $geoNear and $near find nothing
    assert list(c.db.missing.aggregate([{"$geoNear": {"near": pt(0, 0), "distanceField": "d"}}])) == []
    assert list(c.db.missing.find({"loc": {"$near": {"$geometry": pt(0, 0)}}})) == []
    c.close()


def test_index_scan_agrees_with_collection_scan(db):
    import random
    rng = random.Random(7)
    c = db.agree
    c.create_index([("loc", GEOSPHERE)])
    docs = [{"_id": i, "loc": pt(rng.uniform(-3, 3), rng.uniform(-3, 3))} for i in range(400)]
    for i in range(400, 440):  # short lines, some across the region's edge
        x, y = rng.uniform(-3, 3), rng.uniform(-3, 3)
        docs.append({"_id": i, "loc": {"type": "LineString", "coordinates": [[x, y], [x + 0.3, y + 0.2]]}})
    c.insert_many(docs)
    regions = [
        {"$geometry": {"type": "Polygon", "coordinates": [[[-1, -1], [2, -1], [2, 1.5], [-1, 1.5], [-1, -1]]]}},
        {"$geometry": SQUARE_WITH_HOLE},
        {"$centerSphere": [[0.5, 0.5], math.radians(1.2)]},
    ]
    for r in regions:
        for op in ("$geoWithin", "$geoIntersects"):
            if op == "$geoIntersects" and "$centerSphere" in r:
                continue
            q = {"loc": {op: r}}
            got = ids(c.find(q))
            assert got == ids(c.find(q).hint([("$natural", 1)]))
            assert len(got) > 10
