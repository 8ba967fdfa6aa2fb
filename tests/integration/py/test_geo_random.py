"""
Geospatial queries through the 2dsphere index against brute force, on random
data: $geoWithin and $geoIntersects (polygons, some with a hole, and
$centerSphere) must return exactly what a collection scan ({$natural: 1}
hint, the same predicates on every document) returns, on points, legacy
pairs, arrays of points, lines and small polygons; the result must also agree
with an independent check in Python for the points clearly inside or outside;
$near must return the k nearest points in distance order (haversine in
Python), with and without $maxDistance and a filter on another field.
"""

import math
import random

from pymongo import GEOSPHERE

EARTH_M = 6378100.0


def sphere_m(x1, y1, x2, y2):
    l1, l2 = math.radians(y1), math.radians(y2)
    dl, dg = l2 - l1, math.radians(x2 - x1)
    a = math.sin(dl / 2) ** 2 + math.cos(l1) * math.cos(l2) * math.sin(dg / 2) ** 2
    return 2 * EARTH_M * math.asin(math.sqrt(min(1.0, a)))


def rect(x0, y0, x1, y1):
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]


def load(c, rng, n):
    docs, pts = [], {}
    for i in range(n):
        x, y = rng.uniform(-2, 2), rng.uniform(44, 46)
        kind = rng.random()
        if kind < 0.75:
            loc = {"type": "Point", "coordinates": [x, y]}
            pts[i] = (x, y)
        elif kind < 0.85:
            loc = [x, y]  # a legacy pair
            pts[i] = (x, y)
        elif kind < 0.9:
            loc = [{"type": "Point", "coordinates": [x, y]},
                   {"type": "Point", "coordinates": [x + rng.uniform(-0.5, 0.5), y]}]
        elif kind < 0.95:
            loc = {"type": "LineString", "coordinates": [[x, y], [x + rng.uniform(0.01, 0.3),
                                                                  y + rng.uniform(-0.2, 0.2)]]}
        else:
            d = rng.uniform(0.001, 0.2)
            loc = {"type": "Polygon", "coordinates": [rect(x, y, x + d, y + d)]}
        docs.append({"_id": i, "loc": loc, "n": i % 7})
    rng.shuffle(docs)  # _id order differs from index order
    c.insert_many(docs)
    return pts


def same(c, q):
    got = sorted(d["_id"] for d in c.find(q))
    want = sorted(d["_id"] for d in c.find(q).hint([("$natural", 1)]))
    assert got == want, (q, set(got) ^ set(want))
    assert c.count_documents(q) == len(want)
    return set(got)


def test_within_and_intersects_match_a_scan(db):
    rng = random.Random(29)
    c = db.pts
    c.create_index([("loc", GEOSPHERE)])
    pts = load(c, rng, 3000)
    for _ in range(12):
        x0, y0 = rng.uniform(-2.5, 1.5), rng.uniform(43.8, 45.5)
        w, h = rng.uniform(0.05, 1.5), rng.uniform(0.05, 1)
        rings = [rect(x0, y0, x0 + w, y0 + h)]
        hole = rng.random() < 0.4
        if hole:
            rings.append(rect(x0 + w / 4, y0 + h / 4, x0 + w / 2, y0 + h / 2))
        poly = {"type": "Polygon", "coordinates": rings}
        got = same(c, {"loc": {"$geoWithin": {"$geometry": poly}}})
        same(c, {"loc": {"$geoWithin": {"$geometry": poly}}, "n": {"$lt": 3}})
        same(c, {"loc": {"$geoIntersects": {"$geometry": poly}}})
        # points well inside (the edges are geodesics: keep off them) or outside
        m = 0.02
        for i, (x, y) in pts.items():
            inside = x0 + m < x < x0 + w - m and y0 + m < y < y0 + h - m
            if hole:
                inside = inside and not (x0 + w / 4 - m < x < x0 + w / 2 + m and
                                         y0 + h / 4 - m < y < y0 + h / 2 + m)
            outside = not (x0 - m < x < x0 + w + m and y0 - m < y < y0 + h + m)
            if inside:
                assert i in got, (poly, i, x, y)
            if outside:
                assert i not in got, (poly, i, x, y)
    for _ in range(6):
        cx, cy, r = rng.uniform(-2, 2), rng.uniform(44, 46), rng.uniform(0.001, 0.01)
        got = same(c, {"loc": {"$geoWithin": {"$centerSphere": [[cx, cy], r]}}})
        for i, (x, y) in pts.items():
            d = sphere_m(cx, cy, x, y) / EARTH_M
            if d < r * 0.999:
                assert i in got
            elif d > r * 1.001:
                assert i not in got


def test_near_is_brute_force_order(db):
    rng = random.Random(7)
    c = db.near
    c.create_index([("loc", GEOSPHERE)])
    pts = {}
    docs = []
    for i in range(3000):
        # clusters and sparse parts: the search must widen and stop right in both
        if i % 3 == 0:
            x, y = rng.gauss(0.5, 0.02), rng.gauss(45, 0.02)
        else:
            x, y = rng.uniform(-3, 3), rng.uniform(42, 48)
        pts[i] = (x, y)
        docs.append({"_id": i, "loc": {"type": "Point", "coordinates": [x, y]}, "n": i % 5})
    rng.shuffle(docs)
    c.insert_many(docs)
    for t in range(15):
        px, py = rng.uniform(-3, 3), rng.uniform(42, 48)
        if t % 3 == 0:
            px, py = 0.5 + rng.gauss(0, 0.01), 45 + rng.gauss(0, 0.01)
        k = rng.choice([1, 10, 100, 400])
        maxd = rng.choice([None, 5000.0, 50000.0])
        filt = rng.choice([None, 2])
        near = {"$geometry": {"type": "Point", "coordinates": [px, py]}}
        if maxd is not None:
            near["$maxDistance"] = maxd
        q = {"loc": {"$near": near}}
        if filt is not None:
            q["n"] = filt
        got = [d["_id"] for d in c.find(q).limit(k)]
        want = sorted((sphere_m(px, py, x, y), i) for i, (x, y) in pts.items()
                      if (filt is None or i % 5 == filt) and (maxd is None or
                                                              sphere_m(px, py, x, y) <= maxd))
        dist = [sphere_m(px, py, *pts[i]) for i in got]
        assert len(got) == min(k, len(want)), (q, k)
        assert all(a <= b + 1e-6 for a, b in zip(dist, dist[1:])), q  # nearest first
        # the same distances as brute force's k nearest (ties may swap ids)
        for a, (b, _) in zip(dist, want):
            assert abs(a - b) < 0.01, (q, a, b)


def test_within_on_cell_and_edge_boundaries_matches_a_scan(db):
    """A sole $geoWithin takes points in the polygon's interior cells without the
    exact test: points exactly on S2 cell boundaries (the equator and the meridian
    0 bound cells of every level around (0, 0); the face edge at longitude 45),
    on polygon edges and vertices (meridian edges are geodesics), in holes, and
    stored in every shape a point can take must come out as a collection scan
    gives them."""
    from pymongo.errors import BulkWriteError
    from bson.int64 import Int64
    c = db.grid
    c.create_index([("loc", GEOSPHERE)])
    docs, i = [], 0
    for cx in (0, 45):
        for a in range(-40, 41):
            for b in range(-40, 41):
                x, y = cx + a / 32, b / 32
                k = i % 8
                if k == 0:
                    loc = [x, y]
                elif k == 1:
                    loc = {"type": "Point", "coordinates": [x, y, 12.5]}  # an altitude
                elif k == 2:
                    loc = {"coordinates": [x, y], "type": "Point"}  # fields reordered
                elif k == 3 and x == int(x) and y == int(y):
                    loc = {"type": "Point", "coordinates": [int(x), Int64(int(y))]}
                elif k == 4:
                    loc = {"x": x, "y": y}  # a legacy document
                elif k == 5:
                    loc = [{"type": "Point", "coordinates": [x, y]},
                           {"type": "Point", "coordinates": [x + 0.6, y]}]
                else:
                    loc = {"type": "Point", "coordinates": [x, y]}
                docs.append({"_id": i, "loc": loc})
                i += 1
    random.Random(3).shuffle(docs)
    try:
        c.insert_many(docs, ordered=False)
    except BulkWriteError:
        pass
    polys = []
    for cx in (0, 45):
        polys += [
            [rect(cx - 1, -1, cx + 1, 1)],
            [rect(cx, -1, cx + 1, 0.5)],  # an edge along the meridian (cell boundaries)
            [rect(cx - 0.75, 0, cx + 0.5, 0.75)],  # an edge along the equator
            [rect(cx - 1, -1, cx + 1, 1), rect(cx, 0, cx + 0.5, 0.5)],  # a hole on boundaries
            [rect(cx - 0.25, -0.25, cx + 0.25, 0.25), rect(cx - 0.125, -0.125, cx, 0)],
            [[[cx - 1, -1], [cx + 1, -0.5], [cx, 1], [cx - 1, -1]]],  # a triangle
        ]
    total = 0
    for rings in polys:
        q = {"loc": {"$geoWithin": {"$geometry": {"type": "Polygon", "coordinates": rings}}}}
        plan = c.find(q).explain()["queryPlanner"]["winningPlan"]
        assert "2dsphere" in str(plan), plan
        total += len(same(c, q))
    mp = {"type": "MultiPolygon", "coordinates": [[rect(-0.5, -0.5, 0, 0)],
                                                  [rect(0, 0, 0.5, 0.5)]]}
    total += len(same(c, {"loc": {"$geoWithin": {"$geometry": mp}}}))
    assert total > 5000
