/*
 * geo_parse.c: GeoJSON objects and legacy coordinate pairs into sbl_geo_t,
 * with mongod's validation: coordinates are numbers, longitude in
 * [-180, 180] and latitude in [-90, 90], rings closed with at least four
 * vertices, holes inside the shell (checked by s2_wrap.cc).
 */
#include "geo/geo_int.h"

#include <math.h>
#include <string.h>

#define GEO_MAX_DEPTH 8

static bool num(const bson_value_t *v, double *d)
{
    switch (v->value_type) {
    case BSON_TYPE_DOUBLE: *d = v->value.v_double; return true;
    case BSON_TYPE_INT32: *d = v->value.v_int32; return true;
    case BSON_TYPE_INT64: *d = (double)v->value.v_int64; return true;
    case BSON_TYPE_DECIMAL128: return false;
    default: return false;
    }
}

static bool iter_value(bson_iter_t *it, bson_value_t *v)
{
    const bson_value_t *p = bson_iter_value(it);
    if (p == NULL) {
        memset(v, 0, sizeof(*v));
        return false;
    }
    *v = *p;
    return true;
}

/* First two elements of an array or document as numbers. */
static bool first_two(const bson_value_t *v, double *x, double *y)
{
    bson_t d;
    bson_iter_t it;
    bson_value_t e;
    if ((v->value_type != BSON_TYPE_ARRAY && v->value_type != BSON_TYPE_DOCUMENT) ||
        !bson_init_static(&d, v->value.v_doc.data, v->value.v_doc.data_len) ||
        !bson_iter_init(&it, &d))
        return false;
    if (!bson_iter_next(&it) || !iter_value(&it, &e) || !num(&e, x))
        return false;
    if (!bson_iter_next(&it) || !iter_value(&it, &e) || !num(&e, y))
        return false;
    return true;
}

static bool is_geojson_doc(const bson_value_t *v)
{
    bson_t d;
    bson_iter_t it;
    return v->value_type == BSON_TYPE_DOCUMENT &&
           bson_init_static(&d, v->value.v_doc.data, v->value.v_doc.data_len) &&
           bson_iter_init_find(&it, &d, "type");
}

bool sbl_geo_legacy_pair(const bson_value_t *v, double *x, double *y)
{
    if (is_geojson_doc(v))
        return false;
    return first_two(v, x, y) && !isnan(*x) && !isnan(*y);
}

static bool in_range(double x, double y)
{
    return x >= -180 && x <= 180 && y >= -90 && y <= 90;
}

/* A number element of type t at p (enough bytes checked by the caller). */
static bool raw_num(uint8_t t, const uint8_t *p, double *d)
{
    int32_t i32;
    int64_t i64;
    switch (t) {
    case BSON_TYPE_DOUBLE: memcpy(d, p, 8); *d = BSON_DOUBLE_FROM_LE(*d); return true;
    case BSON_TYPE_INT32: memcpy(&i32, p, 4); *d = (int32_t)BSON_UINT32_FROM_LE((uint32_t)i32); return true;
    case BSON_TYPE_INT64: memcpy(&i64, p, 8); *d = (double)(int64_t)BSON_UINT64_FROM_LE((uint64_t)i64); return true;
    default: return false;
    }
}

/* The usual shape, read from the bytes: exactly {type: "Point", coordinates:
 * [n, n, ...]} (what drivers write); anything else is left to the general
 * reader below.  -1: not this shape; else 0/1 as sbl_geo_as_point. */
static int as_point_raw(const bson_value_t *v, double *x, double *y)
{
    static const uint8_t head[] = {BSON_TYPE_UTF8, 't', 'y', 'p', 'e', 0, 6, 0, 0, 0,
                                   'P', 'o', 'i', 'n', 't', 0, BSON_TYPE_ARRAY,
                                   'c', 'o', 'o', 'r', 'd', 'i', 'n', 'a', 't', 'e', 's', 0};
    const uint8_t *d = v->value.v_doc.data;
    uint32_t len = v->value.v_doc.data_len, alen;
    double c[2];
    if (v->value_type != BSON_TYPE_DOCUMENT || len < 4 + sizeof(head) + 4 + 1 ||
        memcmp(d + 4, head, sizeof(head)) != 0)
        return -1;
    const uint8_t *a = d + 4 + sizeof(head);
    memcpy(&alen, a, 4);
    alen = BSON_UINT32_FROM_LE(alen);
    if (alen < 5 || 4 + sizeof(head) + alen + 1 != len || d[len - 1] != 0)
        return -1;
    const uint8_t *p = a + 4, *end = a + alen - 1;
    for (int i = 0; i < 2; i++) { /* elements "0" and "1" */
        size_t w = p < end && p[0] == BSON_TYPE_INT32 ? 4 : 8;
        if (end - p < (ptrdiff_t)(3 + w) || p[1] != '0' + i || p[2] != 0)
            return -1;
        if (!raw_num(p[0], p + 3, &c[i]))
            return -1;
        p += 3 + w;
    }
    *x = c[0], *y = c[1];
    return in_range(c[0], c[1]);
}

/* One pass over v's elements (the first "type" and "coordinates" decide a
 * GeoJSON point, as sbl_geo_legacy_pair and bson_iter_find would see them;
 * without "type", the first two elements a legacy pair): this runs once per
 * document a geo query examines. */
bool sbl_geo_as_point(const bson_value_t *v, double *x, double *y)
{
    bson_t d;
    bson_iter_t it;
    bool is_doc = v->value_type == BSON_TYPE_DOCUMENT, have_type = false, point = false;
    bool have_coords = false, lead = true;
    bson_value_t coords = {0}, e;
    double lx = 0, ly = 0;
    int i = 0;

    int raw = as_point_raw(v, x, y);
    if (raw >= 0)
        return raw == 1;
    if ((v->value_type != BSON_TYPE_ARRAY && !is_doc) ||
        !bson_init_static(&d, v->value.v_doc.data, v->value.v_doc.data_len) ||
        !bson_iter_init(&it, &d))
        return false;
    while (bson_iter_next(&it)) {
        if (i < 2 && lead)
            lead = iter_value(&it, &e) && num(&e, i == 0 ? &lx : &ly);
        i++;
        if (!is_doc) {
            if (i >= 2)
                break;
            continue;
        }
        const char *k = bson_iter_key(&it);
        if (!have_type && strcmp(k, "type") == 0) {
            have_type = true;
            point = BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), "Point") == 0;
        } else if (!have_coords && strcmp(k, "coordinates") == 0) {
            have_coords = true;
            if (BSON_ITER_HOLDS_ARRAY(&it))
                iter_value(&it, &coords);
        }
    }
    if (!have_type) { /* a legacy pair */
        if (!lead || i < 2 || isnan(lx) || isnan(ly))
            return false;
        *x = lx, *y = ly;
        return in_range(lx, ly);
    }
    return point && coords.value_type == BSON_TYPE_ARRAY && first_two(&coords, x, y) &&
           in_range(*x, *y);
}

/* ---- building parts ------------------------------------------------------- */

static sbl_geo_part_t *part_add(sbl_geo_t *g, enum sbl_geo_part_kind k)
{
    g->parts = bson_realloc(g->parts, (g->nparts + 1) * sizeof(*g->parts));
    sbl_geo_part_t *p = &g->parts[g->nparts++];
    memset(p, 0, sizeof(*p));
    p->kind = k;
    return p;
}

static void pt_add(sbl_geo_part_t *p, double x, double y)
{
    p->pts = bson_realloc(p->pts, (p->npts + 1) * sizeof(*p->pts));
    p->pts[p->npts].x = x;
    p->pts[p->npts].y = y;
    p->npts++;
}

/* A GeoJSON position [lng, lat (, alt)]. */
static int position(const bson_value_t *v, double *x, double *y, sbl_err_t *err)
{
    if (v->value_type != BSON_TYPE_ARRAY || !first_two(v, x, y))
        return sbl_err_set(err, SBL_E_BadValue, "Point must only contain numeric elements");
    if (!in_range(*x, *y))
        return sbl_err_set(err, SBL_E_BadValue, "longitude/latitude is out of bounds, lng: %g lat: %g",
                           *x, *y);
    return 0;
}

static bool arr_iter(const bson_value_t *v, bson_iter_t *it)
{
    bson_t d;
    return v->value_type == BSON_TYPE_ARRAY &&
           bson_init_static(&d, v->value.v_doc.data, v->value.v_doc.data_len) &&
           bson_iter_init(it, &d);
}

static int line_coords(sbl_geo_t *g, const bson_value_t *c, sbl_err_t *err)
{
    bson_iter_t it;
    bson_value_t e;
    double x, y;
    if (!arr_iter(c, &it))
        return sbl_err_set(err, SBL_E_BadValue, "GeoJSON coordinates must be an array");
    sbl_geo_part_t *p = part_add(g, SBL_GEO_LINE);
    while (bson_iter_next(&it)) {
        iter_value(&it, &e);
        SBL_RET(position(&e, &x, &y, err));
        pt_add(p, x, y);
    }
    if (p->npts < 2)
        return sbl_err_set(err, SBL_E_BadValue, "GeoJSON LineString must have at least 2 vertices");
    return 0;
}

static int poly_coords(sbl_geo_t *g, const bson_value_t *c, sbl_err_t *err)
{
    bson_iter_t it, rit;
    bson_value_t ring, e;
    double x, y;
    if (!arr_iter(c, &it))
        return sbl_err_set(err, SBL_E_BadValue, "Polygon coordinates must be an array");
    sbl_geo_part_t *p = part_add(g, SBL_GEO_POLY);
    while (bson_iter_next(&it)) {
        iter_value(&it, &ring);
        if (!arr_iter(&ring, &rit))
            return sbl_err_set(err, SBL_E_BadValue, "Polygon coordinates must be an array");
        size_t start = p->npts;
        while (bson_iter_next(&rit)) {
            iter_value(&rit, &e);
            SBL_RET(position(&e, &x, &y, err));
            pt_add(p, x, y);
        }
        size_t n = p->npts - start;
        if (n < 4)
            return sbl_err_set(err, SBL_E_BadValue, "Loop must have at least 4 vertices");
        if (p->pts[start].x != p->pts[p->npts - 1].x || p->pts[start].y != p->pts[p->npts - 1].y)
            return sbl_err_set(err, SBL_E_BadValue,
                               "Loop is not closed, first vertex does not equal last vertex");
        p->ring_end = bson_realloc(p->ring_end, (p->nrings + 1) * sizeof(size_t));
        p->ring_end[p->nrings++] = p->npts;
    }
    if (p->nrings == 0)
        return sbl_err_set(err, SBL_E_BadValue, "Polygon has no loops.");
    return 0;
}

static int geojson(sbl_geo_t *g, const bson_t *d, int depth, sbl_err_t *err)
{
    bson_iter_t it, cit;
    bson_value_t c, e;
    const char *type;
    double x, y;

    if (depth > GEO_MAX_DEPTH)
        return sbl_err_set(err, SBL_E_BadValue, "GeometryCollection nested too deeply");
    if (!bson_iter_init_find(&it, d, "type") || !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_BadValue, "unknown GeoJSON type");
    type = bson_iter_utf8(&it, NULL);
    if (strcmp(type, "GeometryCollection") == 0) {
        bson_iter_t git;
        if (!bson_iter_init_find(&it, d, "geometries") || !iter_value(&it, &c) || !arr_iter(&c, &git))
            return sbl_err_set(err, SBL_E_BadValue,
                               "GeometryCollection geometries must be an array");
        size_t before = g->nparts;
        while (bson_iter_next(&git)) {
            bson_t sub;
            iter_value(&git, &e);
            if (e.value_type != BSON_TYPE_DOCUMENT ||
                !bson_init_static(&sub, e.value.v_doc.data, e.value.v_doc.data_len))
                return sbl_err_set(err, SBL_E_BadValue,
                                   "Element in geometries is not an object");
            SBL_RET(geojson(g, &sub, depth + 1, err));
        }
        if (g->nparts == before)
            return sbl_err_set(err, SBL_E_BadValue, "GeometryCollection has no geometries");
        return 0;
    }
    if (!bson_iter_init_find(&cit, d, "coordinates") || !iter_value(&cit, &c) ||
        c.value_type != BSON_TYPE_ARRAY)
        return sbl_err_set(err, SBL_E_BadValue, "coordinates must be an array");
    if (strcmp(type, "Point") == 0) {
        SBL_RET(position(&c, &x, &y, err));
        pt_add(part_add(g, SBL_GEO_PT), x, y);
        return 0;
    }
    if (strcmp(type, "LineString") == 0)
        return line_coords(g, &c, err);
    if (strcmp(type, "Polygon") == 0)
        return poly_coords(g, &c, err);
    bool multi_pt = strcmp(type, "MultiPoint") == 0, multi_line = strcmp(type, "MultiLineString") == 0,
         multi_poly = strcmp(type, "MultiPolygon") == 0;
    if (!multi_pt && !multi_line && !multi_poly)
        return sbl_err_set(err, SBL_E_BadValue, "unknown GeoJSON type: %s", type);
    arr_iter(&c, &it);
    size_t before = g->nparts;
    while (bson_iter_next(&it)) {
        iter_value(&it, &e);
        if (multi_pt) {
            SBL_RET(position(&e, &x, &y, err));
            pt_add(part_add(g, SBL_GEO_PT), x, y);
        } else if (multi_line) {
            SBL_RET(line_coords(g, &e, err));
        } else {
            SBL_RET(poly_coords(g, &e, err));
        }
    }
    if (g->nparts == before)
        return sbl_err_set(err, SBL_E_BadValue, "%s coordinates must have at least 1 element",
                           type);
    return 0;
}

int sbl_geo_parse(const bson_value_t *v, int flags, sbl_geo_t **gp, sbl_err_t *err)
{
    sbl_geo_t *g = bson_malloc0(sizeof(*g));
    double x, y;
    int rc = 0;

    *gp = NULL;
    if ((flags & SBL_GEO_ALLOW_LEGACY) && sbl_geo_legacy_pair(v, &x, &y)) {
        if (!in_range(x, y)) {
            rc = sbl_err_set(err, SBL_E_BadValue,
                             "longitude/latitude is out of bounds, lng: %g lat: %g", x, y);
            goto done;
        }
        g->legacy = true;
        pt_add(part_add(g, SBL_GEO_PT), x, y);
    } else if (is_geojson_doc(v)) {
        bson_t d;
        bson_init_static(&d, v->value.v_doc.data, v->value.v_doc.data_len);
        if ((rc = geojson(g, &d, 0, err)) != 0)
            goto done;
    } else {
        rc = sbl_err_set(err, SBL_E_BadValue, "geometry must be a GeoJSON object%s",
                         (flags & SBL_GEO_ALLOW_LEGACY) ? " or a legacy coordinate pair" : "");
        goto done;
    }
    char why[256] = "";
    if ((g->s2 = s2w_build(g, why, sizeof(why))) == NULL)
        rc = sbl_err_set(err, SBL_E_BadValue, "%s", why);
done:
    if (rc != 0) {
        sbl_geo_free(g);
        return rc;
    }
    *gp = g;
    return 0;
}

void sbl_geo_free(sbl_geo_t *g)
{
    if (g == NULL)
        return;
    s2w_free(g->s2);
    for (size_t i = 0; i < g->nparts; i++) {
        bson_free(g->parts[i].pts);
        bson_free(g->parts[i].ring_end);
    }
    bson_free(g->parts);
    bson_free(g);
}
