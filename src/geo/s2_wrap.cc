/*
 * s2_wrap.cc: the thin C++ layer over Google's S2 library (Debian's
 * libs2): shapes from a parsed geometry, containment and intersection
 * (S2BooleanOperation), distances (S2ClosestEdgeQuery), cell coverings
 * (S2RegionCoverer).  Everything else in the module is C.
 *
 * What must stay true:
 *  - S2's debug validation is off for every loop, polygon and polyline
 *    built here (it aborts on bad input); validity is checked explicitly
 *    and reported instead.
 *  - A shape's index is built before s2w_build returns (ForceBuild), so
 *    concurrent queries only read it.
 */
#include "geo/geo_int.h"

#include <algorithm>
#include <memory>
#include <new>
#include <vector>

#include <s2/mutable_s2shape_index.h>
#include <s2/s2boolean_operation.h>
#include <s2/s2cap.h>
#include <s2/s2cell.h>
#include <s2/s2cell_id.h>
#include <s2/s2cell_union.h>
#include <s2/s2closest_edge_query.h>
#include <s2/s2contains_point_query.h>
#include <s2/s2error.h>
#include <s2/s2latlng.h>
#include <s2/s2loop.h>
#include <s2/s2point_vector_shape.h>
#include <s2/s2polygon.h>
#include <s2/s2polyline.h>
#include <s2/s2region_coverer.h>

struct s2w_shape {
    MutableS2ShapeIndex index;
    std::vector<S2Point> points;
    std::vector<std::unique_ptr<S2Polyline>> lines;
    std::vector<std::unique_ptr<S2Polygon>> polys;
};

static S2Point to_point(const sbl_geo_ll_t &p)
{
    return S2LatLng::FromDegrees(p.y, p.x).Normalized().ToPoint();
}

/* The vertices of ring [b, e) without consecutive duplicates. */
static std::vector<S2Point> ring_points(const sbl_geo_part_t *pt, size_t b, size_t e)
{
    std::vector<S2Point> v;
    for (size_t i = b; i < e; i++) {
        S2Point p = to_point(pt->pts[i]);
        if (v.empty() || v.back() != p)
            v.push_back(p);
    }
    while (v.size() > 1 && v.front() == v.back())
        v.pop_back();
    return v;
}

static bool build_polygon(const sbl_geo_part_t *pt, s2w_shape *s, char *why, size_t whylen)
{
    std::vector<std::unique_ptr<S2Loop>> loops;
    size_t b = 0;
    for (size_t r = 0; r < pt->nrings; r++) {
        std::vector<S2Point> v = ring_points(pt, b, pt->ring_end[r]);
        b = pt->ring_end[r];
        if (v.size() < 3) {
            snprintf(why, whylen, "Loop must have at least 3 different vertices");
            return false;
        }
        auto loop = std::make_unique<S2Loop>(v, S2Debug::DISABLE);
        S2Error e;
        if (loop->FindValidationError(&e)) {
            snprintf(why, whylen, "Loop is not valid: %s", e.text().c_str());
            return false;
        }
        loop->Normalize(); /* as mongod: a ring bounds the smaller of its two sides */
        if (r > 0 && !loops[0]->Contains(loop.get())) {
            snprintf(why, whylen, "Secondary loops not contained by first exterior loop - "
                                  "secondary loops must be holes");
            return false;
        }
        loops.push_back(std::move(loop));
    }
    auto poly = std::make_unique<S2Polygon>();
    poly->set_s2debug_override(S2Debug::DISABLE);
    poly->InitNested(std::move(loops));
    S2Error e;
    if (poly->FindValidationError(&e)) {
        snprintf(why, whylen, "Polygon isn't valid: %s", e.text().c_str());
        return false;
    }
    s->polys.push_back(std::move(poly));
    return true;
}

extern "C" struct s2w_shape *s2w_build(const sbl_geo_t *g, char *why, size_t whylen)
{
    s2w_shape *s = new (std::nothrow) s2w_shape();
    if (s == nullptr) {
        snprintf(why, whylen, "out of memory");
        return nullptr;
    }
    for (size_t i = 0; i < g->nparts; i++) {
        const sbl_geo_part_t *pt = &g->parts[i];
        if (pt->kind == SBL_GEO_PT) {
            s->points.push_back(to_point(pt->pts[0]));
        } else if (pt->kind == SBL_GEO_LINE) {
            std::vector<S2Point> v;
            for (size_t k = 0; k < pt->npts; k++) {
                S2Point p = to_point(pt->pts[k]);
                if (v.empty() || v.back() != p)
                    v.push_back(p);
            }
            if (v.size() < 2) {
                snprintf(why, whylen, "GeoJSON LineString must have at least 2 vertices");
                delete s;
                return nullptr;
            }
            auto line = std::make_unique<S2Polyline>(v, S2Debug::DISABLE);
            S2Error e;
            if (line->FindValidationError(&e)) {
                snprintf(why, whylen, "Invalid LineString: %s", e.text().c_str());
                delete s;
                return nullptr;
            }
            s->lines.push_back(std::move(line));
        } else if (!build_polygon(pt, s, why, whylen)) {
            delete s;
            return nullptr;
        }
    }
    if (!s->points.empty())
        s->index.Add(std::make_unique<S2PointVectorShape>(s->points));
    for (auto &l : s->lines)
        s->index.Add(std::make_unique<S2Polyline::Shape>(l.get()));
    for (auto &p : s->polys)
        s->index.Add(std::make_unique<S2Polygon::Shape>(p.get()));
    s->index.ForceBuild();
    return s;
}

extern "C" void s2w_free(struct s2w_shape *s)
{
    delete s;
}

extern "C" bool sbl_geo_contains(const sbl_geo_t *region, const sbl_geo_t *g)
{
    if (region->s2 == nullptr || g->s2 == nullptr)
        return false;
    return S2BooleanOperation::Contains(region->s2->index, g->s2->index);
}

extern "C" bool sbl_geo_contains_point(const sbl_geo_t *region, double x, double y)
{
    if (region->s2 == nullptr)
        return false;
    sbl_geo_ll_t ll = {x, y};
    S2Point p = to_point(ll);
    for (auto &poly : region->s2->polys)
        if (poly->Contains(p))
            return true;
    for (auto &q : region->s2->points)
        if (q == p)
            return true;
    return false;
}

extern "C" bool sbl_geo_intersects(const sbl_geo_t *a, const sbl_geo_t *b)
{
    if (a->s2 == nullptr || b->s2 == nullptr)
        return false;
    return S2BooleanOperation::Intersects(a->s2->index, b->s2->index);
}

extern "C" double sbl_geo_distance(const sbl_geo_t *g, double x, double y)
{
    if (g->s2 == nullptr)
        return 1e300;
    sbl_geo_ll_t ll = {x, y};
    S2Point p = to_point(ll);
    if (g->s2->lines.empty() && g->s2->polys.empty()) {
        double best = 1e300;
        for (auto &q : g->s2->points)
            best = std::min(best, S1Angle(p, q).radians());
        return best;
    }
    S2ClosestEdgeQuery::Options o;
    o.set_include_interiors(true);
    S2ClosestEdgeQuery q(&g->s2->index, o);
    S2ClosestEdgeQuery::PointTarget t(p);
    return q.GetDistance(&t).ToAngle().radians();
}

extern "C" double sbl_geo_point_distance(double x1, double y1, double x2, double y2)
{
    return S2LatLng::FromDegrees(y1, x1).Normalized().GetDistance(
               S2LatLng::FromDegrees(y2, x2).Normalized()).radians();
}

static size_t out_cells(std::vector<S2CellId> &v, uint64_t **cellsp)
{
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    uint64_t *c = (uint64_t *)bson_malloc((v.size() + 1) * sizeof(uint64_t));
    for (size_t i = 0; i < v.size(); i++)
        c[i] = v[i].id();
    *cellsp = c;
    return v.size();
}

static S2RegionCoverer coverer(int max_cells)
{
    S2RegionCoverer::Options o;
    o.set_min_level(SBL_GEO_COARSEST);
    o.set_max_level(SBL_GEO_FINEST);
    o.set_max_cells(max_cells);
    return S2RegionCoverer(o);
}

/* Points: their finest cell; lines and polygons: a covering of at most max_cells. */
static size_t cover(const sbl_geo_t *g, int max_cells, uint64_t **cellsp)
{
    std::vector<S2CellId> all;
    S2RegionCoverer rc = coverer(max_cells);
    if (g->s2 != nullptr) {
        for (auto &p : g->s2->points)
            all.push_back(S2CellId(p).parent(SBL_GEO_FINEST));
        for (auto &l : g->s2->lines) {
            std::vector<S2CellId> c;
            rc.GetCovering(*l, &c);
            all.insert(all.end(), c.begin(), c.end());
        }
        for (auto &p : g->s2->polys) {
            std::vector<S2CellId> c;
            rc.GetCovering(*p, &c);
            all.insert(all.end(), c.begin(), c.end());
        }
    }
    return out_cells(all, cellsp);
}

extern "C" size_t sbl_geo_index_cells(const sbl_geo_t *g, uint64_t **cellsp)
{
    return cover(g, SBL_GEO_DOC_CELLS, cellsp);
}

extern "C" size_t sbl_geo_cover(const sbl_geo_t *g, int max_cells, uint64_t **cellsp)
{
    return cover(g, max_cells, cellsp);
}

extern "C" size_t sbl_geo_cover_cap(double x, double y, double r, int max_cells, uint64_t **cellsp)
{
    sbl_geo_ll_t ll = {x, y};
    S2Cap cap(to_point(ll), S1Angle::Radians(std::min(r, M_PI)));
    std::vector<S2CellId> c;
    coverer(max_cells).GetCovering(cap, &c);
    return out_cells(c, cellsp);
}

extern "C" uint64_t sbl_geo_point_cell(double x, double y, int level)
{
    sbl_geo_ll_t ll = {x, y};
    return S2CellId(to_point(ll)).parent(level).id();
}

extern "C" void sbl_geo_cell_center(uint64_t id, double *x, double *y)
{
    S2LatLng ll = S2CellId(id).ToLatLng();
    *x = ll.lng().degrees();
    *y = ll.lat().degrees();
}

extern "C" bool sbl_geo_bound(const sbl_geo_t *g, double b[4])
{
    if (g->s2 == nullptr)
        return false;
    S2LatLngRect r = S2LatLngRect::Empty();
    for (auto &p : g->s2->points)
        r = r.Union(S2LatLngRect::FromPoint(S2LatLng(p)));
    for (auto &l : g->s2->lines)
        r = r.Union(l->GetRectBound());
    for (auto &p : g->s2->polys)
        r = r.Union(p->GetRectBound());
    if (r.is_empty() || r.lng().is_inverted() || r.lng().is_full())
        return false;
    b[0] = r.lng_lo().degrees(), b[1] = r.lat_lo().degrees();
    b[2] = r.lng_hi().degrees(), b[3] = r.lat_hi().degrees();
    return true;
}

extern "C" size_t sbl_geo_interior(const sbl_geo_t *g, int max_cells, uint64_t **cellsp)
{
    std::vector<S2CellId> all;
    S2RegionCoverer rc = coverer(max_cells);
    *cellsp = nullptr;
    if (g->s2 == nullptr || !g->s2->lines.empty() || !g->s2->points.empty())
        return 0;
    for (auto &p : g->s2->polys) {
        std::vector<S2CellId> c;
        rc.GetInteriorCovering(*p, &c);
        all.insert(all.end(), c.begin(), c.end());
    }
    return out_cells(all, cellsp);
}
