/*
 * geo_region.c: the arguments of $geoWithin, $geoIntersects and
 * $near/$nearSphere, and testing a document's value against a region.
 * $geometry regions are spherical (S2); $centerSphere is a spherical cap
 * (radians); $box, $center and $polygon are flat and match points only.
 */
#include "geo/geo.h"

#include <math.h>
#include <string.h>

enum rkind { R_GEOMETRY, R_CAP, R_BOX, R_CENTER, R_POLYGON };

struct sbl_geo_region {
    enum rkind kind;
    bool intersects;
    sbl_geo_t *g;        /* R_GEOMETRY */
    double cx, cy, r;    /* R_CAP (radians), R_CENTER (units) */
    double box[4];       /* R_BOX; for R_POLYGON / R_CENTER: their bounds */
    sbl_geo_ll_t *poly;  /* R_POLYGON */
    size_t npoly;
};

static bool val_num(const bson_value_t *v, double *d)
{
    switch (v->value_type) {
    case BSON_TYPE_DOUBLE: *d = v->value.v_double; return true;
    case BSON_TYPE_INT32: *d = v->value.v_int32; return true;
    case BSON_TYPE_INT64: *d = (double)v->value.v_int64; return true;
    default: return false;
    }
}

/* The elements of an array value (at most max) into out; returns the count
 * or -1 when v is not an array. */
static int arr_elems(const bson_value_t *v, bson_value_t *out, int max)
{
    bson_t d;
    bson_iter_t it;
    int n = 0;
    if (v->value_type != BSON_TYPE_ARRAY ||
        !bson_init_static(&d, v->value.v_doc.data, v->value.v_doc.data_len) || !bson_iter_init(&it, &d))
        return -1;
    while (bson_iter_next(&it)) {
        if (n < max)
            out[n] = *bson_iter_value(&it);
        n++;
    }
    return n;
}

static bool doc_of(const bson_value_t *v, bson_t *d)
{
    return v->value_type == BSON_TYPE_DOCUMENT &&
           bson_init_static(d, v->value.v_doc.data, v->value.v_doc.data_len);
}

static int bad(sbl_geo_region_t *r, sbl_err_t *err, const char *msg)
{
    sbl_geo_region_free(r);
    return sbl_err_set(err, SBL_E_BadValue, "%s", msg);
}

int sbl_geo_region_parse(bool intersects, const bson_value_t *arg, sbl_geo_region_t **rp,
                         sbl_err_t *err)
{
    bson_t d;
    bson_iter_t it;
    sbl_geo_region_t *r = bson_malloc0(sizeof(*r));
    bson_value_t e[2];

    *rp = NULL;
    r->intersects = intersects;
    if (!doc_of(arg, &d) || !bson_iter_init(&it, &d) || !bson_iter_next(&it))
        return bad(r, err, intersects ? "$geoIntersects not supported with provided geometry"
                                      : "$geoWithin not supported with provided geometry");
    const char *k = bson_iter_key(&it);
    bson_value_t v = *bson_iter_value(&it);
    if (strcmp(k, "$geometry") == 0) {
        r->kind = R_GEOMETRY;
        int rc = sbl_geo_parse(&v, 0, &r->g, err);
        if (rc != 0) {
            sbl_geo_region_free(r);
            return rc;
        }
        if (!intersects)
            for (size_t i = 0; i < r->g->nparts; i++)
                if (r->g->parts[i].kind != SBL_GEO_POLY)
                    return bad(r, err, "$geoWithin not supported with provided geometry: only "
                                       "Polygon and MultiPolygon are");
    } else if (intersects) {
        return bad(r, err, "$geoIntersects not supported with provided geometry");
    } else if (strcmp(k, "$centerSphere") == 0 || strcmp(k, "$center") == 0) {
        bool sphere = k[7] == 'S';
        if (arr_elems(&v, e, 2) != 2 || !sbl_geo_legacy_pair(&e[0], &r->cx, &r->cy) ||
            !val_num(&e[1], &r->r) || !(r->r >= 0))
            return bad(r, err, sphere ? "malformed $centerSphere: expected [[x, y], radius]"
                                      : "malformed $center: expected [[x, y], radius]");
        if (sphere && !(r->cx >= -180 && r->cx <= 180 && r->cy >= -90 && r->cy <= 90))
            return bad(r, err, "longitude/latitude is out of bounds");
        r->kind = sphere ? R_CAP : R_CENTER;
        r->box[0] = r->cx - r->r, r->box[1] = r->cy - r->r;
        r->box[2] = r->cx + r->r, r->box[3] = r->cy + r->r;
    } else if (strcmp(k, "$box") == 0) {
        if (arr_elems(&v, e, 2) != 2 || !sbl_geo_legacy_pair(&e[0], &r->box[0], &r->box[1]) ||
            !sbl_geo_legacy_pair(&e[1], &r->box[2], &r->box[3]))
            return bad(r, err, "malformed $box: expected [[x0, y0], [x1, y1]]");
        r->kind = R_BOX;
    } else if (strcmp(k, "$polygon") == 0) {
        bson_t pd;
        bson_iter_t pit;
        if (v.value_type != BSON_TYPE_ARRAY || !bson_init_static(&pd, v.value.v_doc.data, v.value.v_doc.data_len) ||
            !bson_iter_init(&pit, &pd))
            return bad(r, err, "malformed $polygon: expected an array of points");
        r->box[0] = r->box[1] = HUGE_VAL;
        r->box[2] = r->box[3] = -HUGE_VAL;
        while (bson_iter_next(&pit)) {
            double x, y;
            if (!sbl_geo_legacy_pair(bson_iter_value(&pit), &x, &y))
                return bad(r, err, "malformed $polygon: expected an array of points");
            r->poly = bson_realloc(r->poly, (r->npoly + 1) * sizeof(*r->poly));
            r->poly[r->npoly].x = x;
            r->poly[r->npoly++].y = y;
            r->box[0] = fmin(r->box[0], x), r->box[1] = fmin(r->box[1], y);
            r->box[2] = fmax(r->box[2], x), r->box[3] = fmax(r->box[3], y);
        }
        if (r->npoly < 3)
            return bad(r, err, "Polygon must have at least 3 points");
        r->kind = R_POLYGON;
    } else {
        return bad(r, err, "$geoWithin not supported with provided geometry");
    }
    *rp = r;
    return 0;
}

void sbl_geo_region_free(sbl_geo_region_t *r)
{
    if (r == NULL)
        return;
    sbl_geo_free(r->g);
    bson_free(r->poly);
    bson_free(r);
}

/* Every vertex of g within angle rad of (x, y). */
static bool all_within_cap(const sbl_geo_t *g, double x, double y, double rad)
{
    for (size_t i = 0; i < g->nparts; i++)
        for (size_t k = 0; k < g->parts[i].npts; k++)
            if (sbl_geo_point_distance(x, y, g->parts[i].pts[k].x, g->parts[i].pts[k].y) > rad)
                return false;
    return true;
}

bool sbl_geo_region_match(const sbl_geo_region_t *r, const bson_value_t *v)
{
    double x, y;
    bool is_point = sbl_geo_as_point(v, &x, &y);

    switch (r->kind) {
    case R_BOX:
        return is_point && sbl_geo_flat_in_box(x, y, r->box);
    case R_CENTER:
        return is_point && sbl_geo_flat_distance(x, y, r->cx, r->cy) <= r->r;
    case R_POLYGON:
        return is_point && sbl_geo_flat_in_box(x, y, r->box) &&
               sbl_geo_flat_in_polygon(x, y, r->poly, r->npoly);
    case R_CAP:
        if (is_point)
            return sbl_geo_point_distance(x, y, r->cx, r->cy) <= r->r;
        break;
    case R_GEOMETRY:
        if (is_point && !r->intersects)
            return sbl_geo_contains_point(r->g, x, y);
        break;
    }
    if (v->value_type != BSON_TYPE_DOCUMENT)
        return false; /* a legacy pair out of range, or no geometry */
    sbl_geo_t *g = NULL;
    sbl_err_t e = {0};
    if (sbl_geo_parse(v, 0, &g, &e) != 0)
        return false;
    bool ok = r->kind == R_CAP    ? all_within_cap(g, r->cx, r->cy, r->r)
              : r->intersects     ? sbl_geo_intersects(r->g, g)
                                  : sbl_geo_contains(r->g, g);
    sbl_geo_free(g);
    return ok;
}

size_t sbl_geo_region_cover(const sbl_geo_region_t *r, int max_cells, uint64_t **cellsp)
{
    *cellsp = NULL;
    if (r->kind == R_GEOMETRY)
        return sbl_geo_cover(r->g, max_cells, cellsp);
    if (r->kind == R_CAP)
        return sbl_geo_cover_cap(r->cx, r->cy, r->r, max_cells, cellsp);
    return 0;
}

size_t sbl_geo_region_interior(const sbl_geo_region_t *r, int max_cells, uint64_t **cellsp)
{
    *cellsp = NULL;
    if (r->kind != R_GEOMETRY || r->intersects)
        return 0;
    return sbl_geo_interior(r->g, max_cells, cellsp);
}

bool sbl_geo_region_bound(const sbl_geo_region_t *r, double b[4])
{
    return r->kind == R_GEOMETRY && sbl_geo_bound(r->g, b);
}

bool sbl_geo_region_cap(const sbl_geo_region_t *r, double *x, double *y, double *rad)
{
    if (r->kind != R_CAP)
        return false;
    *x = r->cx, *y = r->cy, *rad = r->r;
    return true;
}

bool sbl_geo_region_flat_box(const sbl_geo_region_t *r, double box[4])
{
    if (r->kind != R_BOX && r->kind != R_CENTER && r->kind != R_POLYGON)
        return false;
    memcpy(box, r->box, sizeof(r->box));
    return true;
}

/* ---- $near ------------------------------------------------------------------ */

static int dist_arg(const bson_value_t *v, const char *name, double *out, sbl_err_t *err)
{
    if (!val_num(v, out))
        return sbl_err_set(err, SBL_E_BadValue, "%s must be a number", name);
    if (!(*out >= 0))
        return sbl_err_set(err, SBL_E_BadValue, "%s must be non-negative", name);
    return 0;
}

int sbl_geo_near_parse(bool sphere, const bson_value_t *arg, const bson_t *ops,
                       sbl_geo_near_t *n, sbl_err_t *err)
{
    bson_t d;
    bson_iter_t it;

    memset(n, 0, sizeof(*n));
    n->max_dist = HUGE_VAL;
    n->sphere = sphere;
    if (doc_of(arg, &d) && bson_iter_init_find(&it, &d, "$geometry")) {
        bson_value_t g = *bson_iter_value(&it);
        bson_t gd;
        bson_iter_t t;
        if (!doc_of(&g, &gd) || !bson_iter_init_find(&t, &gd, "type") || !BSON_ITER_HOLDS_UTF8(&t) ||
            strcmp(bson_iter_utf8(&t, NULL), "Point") != 0)
            return sbl_err_set(err, SBL_E_BadValue, "invalid point in geo near query $geometry "
                                                     "argument: a GeoJSON Point is required");
        if (!sbl_geo_as_point(&g, &n->x, &n->y))
            return sbl_err_set(err, SBL_E_BadValue, "invalid point in geo near query $geometry "
                                                     "argument: longitude/latitude is out of bounds");
        n->geojson = n->sphere = true;
        bson_iter_init(&it, &d);
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "$maxDistance") == 0)
                SBL_RET(dist_arg(bson_iter_value(&it), k, &n->max_dist, err));
            else if (strcmp(k, "$minDistance") == 0)
                SBL_RET(dist_arg(bson_iter_value(&it), k, &n->min_dist, err));
            else if (strcmp(k, "$geometry") != 0)
                return sbl_err_set(err, SBL_E_BadValue, "invalid argument in geo near query: %s", k);
        }
    } else if (doc_of(arg, &d) && bson_iter_init_find(&it, &d, "type")) {
        /* a bare GeoJSON point ($geoNear's near, or {$near: {type: "Point", ...}}) */
        if (!BSON_ITER_HOLDS_UTF8(&it) || strcmp(bson_iter_utf8(&it, NULL), "Point") != 0 ||
            !sbl_geo_as_point(arg, &n->x, &n->y))
            return sbl_err_set(err, SBL_E_BadValue, "invalid point in geo near query: a GeoJSON "
                                                     "Point in range is required");
        n->geojson = n->sphere = true;
    } else if (sbl_geo_legacy_pair(arg, &n->x, &n->y)) {
        if (sphere && !(n->x >= -180 && n->x <= 180 && n->y >= -90 && n->y <= 90))
            return sbl_err_set(err, 17444, "Legacy point is out of bounds for spherical query");
    } else {
        return sbl_err_set(err, SBL_E_BadValue, "near must be first in: { $near: ... }, "
                                                 "a GeoJSON point or a legacy coordinate pair");
    }
    if (ops != NULL && bson_iter_init(&it, ops))
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "$maxDistance") == 0)
                SBL_RET(dist_arg(bson_iter_value(&it), k, &n->max_dist, err));
            else if (strcmp(k, "$minDistance") == 0)
                SBL_RET(dist_arg(bson_iter_value(&it), k, &n->min_dist, err));
        }
    return 0;
}
