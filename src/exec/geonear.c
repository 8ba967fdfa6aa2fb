/*
 * geonear.c: the GEO_NEAR stage and the 2dsphere index scan of
 * $geoWithin / $geoIntersects (see geonear.h for how they read the index).
 *
 * What must stay true:
 *  - A document is fetched at most once per query (the _ids met are kept
 *    as 64-bit hashes), however many of its cells the scans meet.
 *  - GEO_NEAR hands out a candidate only when its distance is at most the
 *    radius searched so far, so results come nearest first.
 *  - No storage scan stays open between calls.
 */
#include "exec/geonear.h"
#include "exec/exec.h"
#include "doc/doc.h"
#include "geo/geo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NEAR_CELLS 16
#define SCAN_CELLS 20
#define NEAR_R0 (2.0 / SBL_GEO_EARTH_M) /* the first cap: 2 m */

typedef struct cand {
    double d;
    uint64_t seq;
    bson_t *doc;
    bson_value_t loc; /* a near's: the geometry measured (owned) */
} cand_t;

struct sbl_geo_exec {
    char *path;
    bool near;
    sbl_geo_near_t nr;
    sbl_geo_region_t *region; /* a scan's */
    bool has_bound, has_cap;  /* its bounding box or cap (cell_may_match) */
    bool sole;                /* the filter is this one $geoWithin $geometry, nothing else */
    uint64_t *inner;          /* a sole scan's interior cells as merged id ranges (lo, hi) */
    size_t ninner;
    double bound[4], rcap[3];
    double rmin, rmax;        /* near bounds in radians (sphere) or units (flat) */

    /* the plan */
    bool planned, have_coll, scan_all; /* scan_all: read every document, sort */
    int ixkind;
    char ixname[128], keyfield[128];

    /* state */
    double r;          /* radius searched (near) */
    bool searched;     /* everything that can match has been read */
    cand_t *heap; /* a near's candidates; a scan's results (a queue from qhead) */
    size_t n, cap, qhead;
    size_t nout;       /* a near's results handed out */
    uint64_t seq;
    uint64_t *seen;    /* open addressing, 0 = empty */
    size_t nseen, seen_cap;
};

/* ---- parsing ---------------------------------------------------------------- */

static bool is_near_ops(const bson_iter_t *it, bool *spherep, bson_value_t *argp)
{
    bson_t ops;
    bson_iter_t o;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !sbl_iter_doc(it, &ops) || !bson_iter_init(&o, &ops))
        return false;
    while (bson_iter_next(&o)) {
        const char *k = bson_iter_key(&o);
        if (strcmp(k, "$near") == 0 || strcmp(k, "$nearSphere") == 0) {
            *spherep = k[5] == 'S';
            sbl_iter_value(&o, argp);
            return true;
        }
    }
    return false;
}

static sbl_geo_exec_t *exec_new(const char *path)
{
    sbl_geo_exec_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        abort();
    g->path = bson_strdup(path);
    return g;
}

static int near_from(const char *path, const bson_iter_t *it, sbl_geo_exec_t **gp, sbl_err_t *err)
{
    bool sphere = false;
    bson_value_t arg;
    bson_t ops;
    if (*gp != NULL)
        return sbl_err_set(err, SBL_E_BadValue, "Too many geoNear expressions");
    is_near_ops(it, &sphere, &arg);
    sbl_iter_doc(it, &ops);
    sbl_geo_exec_t *g = exec_new(path);
    g->near = true;
    if (sbl_geo_near_parse(sphere, &arg, &ops, &g->nr, err) != 0) {
        sbl_geo_exec_free(g);
        return err->code;
    }
    *gp = g;
    return 0;
}

int sbl_geo_near_extract(const bson_t *filter, bson_t *rest, sbl_geo_exec_t **gp, sbl_err_t *err)
{
    bson_iter_t it;
    bool sphere;
    bson_value_t arg;
    bool found = false;
    sbl_geo_exec_t *g = NULL;

    *gp = NULL;
    /* a cheap look first: most filters have no near */
    bson_iter_init(&it, filter);
    while (bson_iter_next(&it) && !found) {
        if (is_near_ops(&it, &sphere, &arg))
            found = true;
        else if (strcmp(bson_iter_key(&it), "$and") == 0 && BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t a, e;
            bson_iter_recurse(&it, &a);
            while (bson_iter_next(&a) && !found)
                if (BSON_ITER_HOLDS_DOCUMENT(&a) && bson_iter_recurse(&a, &e))
                    while (bson_iter_next(&e) && !found)
                        found = is_near_ops(&e, &sphere, &arg);
        }
    }
    if (!found)
        return 0;
    bson_init(rest);
    bson_iter_init(&it, filter);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (is_near_ops(&it, &sphere, &arg)) {
            if (near_from(k, &it, &g, err) != 0)
                goto fail;
        } else if (strcmp(k, "$and") == 0 && BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t a, e;
            bson_t arr;
            size_t n = 0;
            bson_iter_recurse(&it, &a);
            BSON_APPEND_ARRAY_BEGIN(rest, "$and", &arr);
            while (bson_iter_next(&a)) {
                bson_t el;
                char key[16];
                bool took = false;
                if (BSON_ITER_HOLDS_DOCUMENT(&a) && bson_iter_recurse(&a, &e)) {
                    snprintf(key, sizeof(key), "%zu", n);
                    bson_append_document_begin(&arr, key, -1, &el);
                    while (bson_iter_next(&e)) {
                        if (is_near_ops(&e, &sphere, &arg)) {
                            if (near_from(bson_iter_key(&e), &e, &g, err) != 0) {
                                bson_append_document_end(&arr, &el);
                                bson_append_array_end(rest, &arr);
                                goto fail;
                            }
                        } else
                            sbl_append_iter(&el, bson_iter_key(&e), -1, &e);
                    }
                    bson_append_document_end(&arr, &el);
                    took = true;
                }
                if (!took) {
                    snprintf(key, sizeof(key), "%zu", n);
                    sbl_append_iter(&arr, key, -1, &a);
                }
                n++;
            }
            bson_append_array_end(rest, &arr);
        } else {
            sbl_append_iter(rest, k, -1, &it);
        }
    }
    *gp = g;
    return 0;
fail:
    bson_destroy(rest);
    sbl_geo_exec_free(g);
    return err->code;
}

void sbl_geo_scan_extract(const bson_t *filter, sbl_geo_exec_t **gp)
{
    bson_iter_t it, o;
    bson_t ops;

    *gp = NULL;
    bson_iter_init(&it, filter);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (k[0] == '$' || !BSON_ITER_HOLDS_DOCUMENT(&it) || !sbl_iter_doc(&it, &ops) ||
            !bson_iter_init(&o, &ops))
            continue;
        while (bson_iter_next(&o)) {
            const char *op = bson_iter_key(&o);
            bool inter = strcmp(op, "$geoIntersects") == 0;
            if (!inter && strcmp(op, "$geoWithin") != 0)
                continue;
            sbl_geo_region_t *r = NULL;
            sbl_err_t e = {0};
            uint64_t *cells = NULL;
            bson_value_t v;
            sbl_iter_value(&o, &v);
            if (sbl_geo_region_parse(inter, &v, &r, &e) != 0)
                continue;
            size_t n = sbl_geo_region_cover(r, 1, &cells);
            bson_free(cells);
            if (n == 0) { /* flat: no 2dsphere bounds */
                sbl_geo_region_free(r);
                continue;
            }
            sbl_geo_exec_t *g = exec_new(k);
            g->region = r;
            g->has_bound = sbl_geo_region_bound(r, g->bound);
            g->has_cap = sbl_geo_region_cap(r, &g->rcap[0], &g->rcap[1], &g->rcap[2]);
            g->sole = !inter && bson_count_keys(filter) == 1 && bson_count_keys(&ops) == 1;
            *gp = g;
            return;
        }
    }
}

void sbl_geo_exec_free(sbl_geo_exec_t *g)
{
    if (g == NULL)
        return;
    for (size_t i = g->qhead; i < g->n; i++) {
        bson_destroy(g->heap[i].doc);
        if (g->heap[i].loc.value_type != BSON_TYPE_EOD)
            bson_value_destroy(&g->heap[i].loc);
    }
    free(g->heap);
    free(g->seen);
    free(g->inner);
    sbl_geo_region_free(g->region);
    bson_free(g->path);
    free(g);
}

bool sbl_geo_exec_is_near(const sbl_geo_exec_t *g)
{
    return g->near;
}

const char *sbl_geo_exec_index_name(const sbl_geo_exec_t *g)
{
    return g->ixname[0] != '\0' ? g->ixname : NULL;
}

/* ---- planning ----------------------------------------------------------------- */

int sbl_geo_exec_plan(sbl_geo_exec_t *g, const char *ns, bool *usablep, sbl_err_t *err)
{
    sbl_session_t *ss = sbl_session_get();
    sbl_coll_t *c = NULL;
    sbl_index_t **ixs = NULL;
    size_t nix = 0;
    int best = -1;

    *usablep = false;
    g->planned = true;
    if (ss == NULL || sbl_coll_open(ss, ns, false, &c, NULL, NULL) != 0) {
        *usablep = g->near; /* nothing to read */
        g->searched = true;
        return 0;
    }
    g->have_coll = true;
    sbl_index_list(c, false, &ixs, &nix);
    for (size_t i = 0; i < nix; i++) {
        size_t f;
        int kind = sbl_index_geo(ixs[i], &f);
        bson_iter_t hid;
        if (kind == 0 || strcmp(sbl_index_field(ixs[i], f), g->path) != 0 ||
            (bson_iter_init_find(&hid, sbl_index_spec(ixs[i]), "hidden") && bson_iter_as_bool(&hid)))
            continue;
        if (!g->near && (kind != SBL_INDEX_2DSPHERE || f != 0))
            continue; /* a scan needs the cells first */
        /* prefer a 2dsphere index led by the field */
        int score = (kind == SBL_INDEX_2DSPHERE ? 2 : 0) + (f == 0 ? 1 : 0);
        if (g->near && !g->nr.sphere && kind == SBL_INDEX_2D)
            score = 4; /* a legacy $near is flat on a 2d index */
        if (score > best) {
            best = score;
            g->ixkind = kind;
            g->scan_all = kind != SBL_INDEX_2DSPHERE || f != 0;
            sbl_strcpy_n(g->ixname, sizeof(g->ixname), sbl_index_name(ixs[i]));
        }
    }
    sbl_index_list_free(ixs, nix);
    sbl_coll_release(c);
    if (best < 0) {
        if (g->near)
            return sbl_err_set(err, SBL_E_NoQueryExecutionPlans,
                               "error processing query: planner returned error :: caused by :: "
                               "unable to find index for $geoNear query");
        return 0;
    }
    if (g->near) {
        /* a legacy point's $near is flat over a 2d index; everything else is on the sphere */
        if (g->ixkind == SBL_INDEX_2D && !g->nr.sphere)
            g->nr.sphere = false;
        else
            g->nr.sphere = true;
        double unit = g->nr.geojson ? SBL_GEO_EARTH_M : 1;
        g->rmin = g->nr.sphere ? g->nr.min_dist / unit : g->nr.min_dist;
        g->rmax = g->nr.sphere ? g->nr.max_dist / unit : g->nr.max_dist;
    }
    *usablep = true;
    return 0;
}

void sbl_geo_exec_summary(const sbl_geo_exec_t *g, char *buf, size_t len)
{
    if (g->near)
        snprintf(buf, len, "GEO_NEAR_%s { %s: \"%s\" }", g->ixkind == SBL_INDEX_2D ? "2D" : "2DSPHERE",
                 g->path, g->ixkind == SBL_INDEX_2D ? "2d" : "2dsphere");
    else
        snprintf(buf, len, "IXSCAN { %s: \"2dsphere\" }", g->path);
}

/* ---- the candidates ------------------------------------------------------------- */

static bool cand_less(const cand_t *a, const cand_t *b)
{
    return a->d < b->d || (a->d == b->d && a->seq < b->seq);
}

static void heap_push(sbl_geo_exec_t *g, cand_t c)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 64;
        g->heap = realloc(g->heap, g->cap * sizeof(*g->heap));
        if (g->heap == NULL)
            abort();
    }
    size_t i = g->n++;
    while (i > 0 && cand_less(&c, &g->heap[(i - 1) / 2])) {
        g->heap[i] = g->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    g->heap[i] = c;
}

static cand_t heap_pop(sbl_geo_exec_t *g)
{
    cand_t top = g->heap[0], last = g->heap[--g->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, s = l;
        if (l >= g->n)
            break;
        if (l + 1 < g->n && cand_less(&g->heap[l + 1], &g->heap[l]))
            s = l + 1;
        if (!cand_less(&g->heap[s], &last))
            break;
        g->heap[i] = g->heap[s];
        i = s;
    }
    if (g->n > 0)
        g->heap[i] = last;
    return top;
}

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h ? h : 1;
}

/* Add h to the set; false when it was there. */
static bool seen_add(sbl_geo_exec_t *g, uint64_t h)
{
    if (2 * (g->nseen + 1) > g->seen_cap) {
        size_t ncap = g->seen_cap ? g->seen_cap * 2 : 1024;
        uint64_t *ns = calloc(ncap, sizeof(uint64_t));
        if (ns == NULL)
            abort();
        for (size_t i = 0; i < g->seen_cap; i++)
            if (g->seen[i] != 0) {
                size_t j = g->seen[i] & (ncap - 1);
                while (ns[j] != 0)
                    j = (j + 1) & (ncap - 1);
                ns[j] = g->seen[i];
            }
        free(g->seen);
        g->seen = ns;
        g->seen_cap = ncap;
    }
    size_t j = h & (g->seen_cap - 1);
    while (g->seen[j] != 0) {
        if (g->seen[j] == h)
            return false;
        j = (j + 1) & (g->seen_cap - 1);
    }
    g->seen[j] = h;
    g->nseen++;
    return true;
}

/* The distance from the near point to one geometry value; false when v is none. */
static bool value_distance(const sbl_geo_exec_t *g, const bson_value_t *v, double *dp)
{
    double x, y;
    if (!g->nr.sphere) {
        if (!sbl_geo_legacy_pair(v, &x, &y))
            return false;
        *dp = sbl_geo_flat_distance(g->nr.x, g->nr.y, x, y);
        return true;
    }
    if (sbl_geo_as_point(v, &x, &y)) {
        *dp = sbl_geo_point_distance(g->nr.x, g->nr.y, x, y);
        return true;
    }
    sbl_geo_t *geo = NULL;
    sbl_err_t e = {0};
    if (v->value_type != BSON_TYPE_DOCUMENT || sbl_geo_parse(v, 0, &geo, &e) != 0)
        return false;
    *dp = sbl_geo_distance(geo, g->nr.x, g->nr.y);
    sbl_geo_free(geo);
    return true;
}

/* The smallest distance to the geometries at the near path of doc; *locp
 * views the nearest one. */
static bool doc_distance(const sbl_geo_exec_t *g, const bson_t *doc, double *dp,
                         bson_value_t *locp)
{
    bson_iter_t it, f;
    double x, y;
    if (!bson_iter_init(&it, doc) || !bson_iter_find_descendant(&it, g->path, &f))
        return false;
    bson_value_t v;
    sbl_iter_value(&f, &v);
    if (v.value_type == BSON_TYPE_ARRAY && !sbl_geo_legacy_pair(&v, &x, &y)) {
        bson_iter_t a;
        bool any = false;
        bson_iter_recurse(&f, &a);
        while (bson_iter_next(&a)) {
            bson_value_t e;
            double d;
            sbl_iter_value(&a, &e);
            if (value_distance(g, &e, &d) && (!any || d < *dp)) {
                *dp = d, *locp = e;
                any = true;
            }
        }
        return any;
    }
    *locp = v;
    return value_distance(g, &v, dp);
}

/* Consider a fetched document: bounds, the rest of the filter; keep it. */
static void consider(sbl_geo_exec_t *g, const bson_t *doc, const sbl_matcher_t *m)
{
    double d;
    bson_value_t loc;
    if (!doc_distance(g, doc, &d, &loc) || d < g->rmin || d > g->rmax ||
        !sbl_matcher_match(m, doc, NULL))
        return;
    cand_t c = {d, g->seq++, bson_copy(doc), {0}};
    bson_value_copy(&loc, &c.loc);
    heap_push(g, c);
}

/* ---- reading the index ------------------------------------------------------------ */

typedef struct ival {
    uint64_t lo, hi;
} ival_t;

static int ival_cmp(const void *a, const void *b)
{
    const ival_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The id intervals whose entries may intersect the cells: each cell's
 * descendants and its ancestors, merged. */
static size_t intervals(const uint64_t *cells, size_t n, ival_t **outp)
{
    ival_t *v = malloc((n * 32 + 1) * sizeof(*v));
    size_t k = 0;
    if (v == NULL)
        abort();
    for (size_t i = 0; i < n; i++) {
        v[k].lo = sbl_geo_cell_range_min(cells[i]);
        v[k++].hi = sbl_geo_cell_range_max(cells[i]);
        for (int l = SBL_GEO_COARSEST; l < sbl_geo_cell_level(cells[i]); l++) {
            uint64_t a = sbl_geo_cell_parent(cells[i], l);
            v[k].lo = v[k].hi = a;
            k++;
        }
    }
    qsort(v, k, sizeof(*v), ival_cmp);
    size_t j = 0;
    for (size_t i = 0; i < k; i++) {
        if (j > 0 && v[i].lo <= v[j - 1].hi + 1) {
            if (v[i].hi > v[j - 1].hi)
                v[j - 1].hi = v[i].hi;
            continue;
        }
        v[j++] = v[i];
    }
    *outp = v;
    return j;
}

/* The cell id an entry of a 2dsphere index led by its geo field starts with
 * (sbl_index_geo_cell_append: a date tag, then the id's 8 bytes). */
static uint64_t entry_cell(const uint8_t *k, size_t len)
{
    uint64_t id = 0;
    if (len < 9)
        return 0;
    for (int i = 1; i <= 8; i++)
        id = id << 8 | k[i];
    return id;
}

/* A sole $geoWithin's interior: S2's interior covering of the polygons as
 * merged id ranges.  Every point of such a cell is within the region (S2
 * refuses a cell an edge comes near), so a document whose value is one
 * point in one of them matches without the exact test, and an index entry
 * in one needs no bounding-box test.  64 cells took ~1.5 ms of a 2 x 1
 * degree $geoWithin over 1,000,000 points and hold most of its ~10,000. */
#define INNER_CELLS 64
static void inner_build(sbl_geo_exec_t *g)
{
    uint64_t *cells = NULL;
    size_t n = sbl_geo_region_interior(g->region, INNER_CELLS, &cells), k = 0;
    if (n > 0 && (g->inner = malloc(2 * n * sizeof(uint64_t))) == NULL)
        abort();
    for (size_t i = 0; i < n; i++) { /* sorted by id: ranges in order, merge overlaps */
        uint64_t lo = sbl_geo_cell_range_min(cells[i]), hi = sbl_geo_cell_range_max(cells[i]);
        if (k > 0 && lo <= g->inner[2 * k - 1] + 1) {
            if (hi > g->inner[2 * k - 1])
                g->inner[2 * k - 1] = hi;
            continue;
        }
        g->inner[2 * k] = lo, g->inner[2 * k + 1] = hi;
        k++;
    }
    g->ninner = k;
    bson_free(cells);
}

/* Is cell (any level) inside one of the interior cells? */
static bool in_inner(const sbl_geo_exec_t *g, uint64_t cell)
{
    size_t lo = 0, hi = g->ninner;
    while (lo < hi) { /* the first range ending at or after cell */
        size_t mid = (lo + hi) / 2;
        if (g->inner[2 * mid + 1] < cell)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < g->ninner && g->inner[2 * lo] <= sbl_geo_cell_range_min(cell) &&
           sbl_geo_cell_range_max(cell) <= g->inner[2 * lo + 1];
}

/* Is the document's value at the path one point inside an interior cell? */
static bool doc_inner(const sbl_geo_exec_t *g, const bson_t *doc)
{
    bson_iter_t it, f;
    double x, y;
    return g->ninner > 0 && bson_iter_init(&it, doc) &&
           bson_iter_find_descendant(&it, g->path, &f) &&
           sbl_geo_as_point(bson_iter_value(&f), &x, &y) &&
           in_inner(g, sbl_geo_point_cell(x, y, 30));
}

/* Could the entry's cell hold something the round is after?  A small cell
 * (a point's, at most ~20 m across) whose centre is surely outside the cap
 * (near) or the region's bounding box or cap (scan) is skipped without
 * fetching; a document with another cell inside is met through that one.
 * Larger cells are always fetched. */
#define CELL_MARGIN_RAD 4e-6 /* > half the diagonal of a level-20 cell */
static bool cell_may_match(const sbl_geo_exec_t *g, uint64_t cell, double r)
{
    double x, y;
    if (cell == 0 || sbl_geo_cell_level(cell) < 20 || (!g->near && in_inner(g, cell)))
        return true; /* (no trigonometry for a cell inside the region) */
    sbl_geo_cell_center(cell, &x, &y);
    if (g->near)
        return sbl_geo_point_distance(g->nr.x, g->nr.y, x, y) <= r + CELL_MARGIN_RAD;
    if (g->has_bound) {
        double m = CELL_MARGIN_RAD * 180 / M_PI, mx = m / fmax(cos(y * M_PI / 180), 0.01);
        return x >= g->bound[0] - mx && x <= g->bound[2] + mx && y >= g->bound[1] - m &&
               y <= g->bound[3] + m;
    }
    if (g->has_cap)
        return sbl_geo_point_distance(g->rcap[0], g->rcap[1], x, y) <= g->rcap[2] + CELL_MARGIN_RAD;
    return true;
}

/* A fetched document: bounds, the rest of the filter; keep it (a near's in
 * the heap; a scan's appended, taken from qhead). */
static void keep_doc(sbl_geo_exec_t *g, const bson_t *doc, const sbl_matcher_t *m)
{
    if (g->near) {
        consider(g, doc, m);
        return;
    }
    if (!(g->sole && doc_inner(g, doc)) && !sbl_matcher_match(m, doc, NULL))
        return;
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 64;
        if ((g->heap = realloc(g->heap, g->cap * sizeof(*g->heap))) == NULL)
            abort();
    }
    g->heap[g->n++] = (cand_t){0, g->seq++, bson_copy(doc), {0}};
}

/* The encoded _ids to fetch: a length, then the bytes, each at an offset. */
typedef struct idlist {
    sbl_buf_t b;
    size_t *off, n, cap;
} idlist_t;

static void idlist_add(idlist_t *l, const uint8_t *idk, size_t len)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        if ((l->off = realloc(l->off, l->cap * sizeof(*l->off))) == NULL)
            abort();
    }
    uint32_t n32 = (uint32_t)len;
    l->off[l->n++] = l->b.len;
    sbl_buf_append(&l->b, &n32, sizeof(n32));
    sbl_buf_append(&l->b, idk, len);
}

static const uint8_t *idlist_get(const idlist_t *l, size_t off, uint32_t *lenp)
{
    memcpy(lenp, l->b.data + off, sizeof(*lenp));
    return l->b.data + off + sizeof(*lenp);
}

/* An _id to fetch: its first 8 bytes as a big-endian number (zero-padded:
 * comparing them orders as memcmp does, ties then compare the bytes) and
 * where it is in the list. */
typedef struct idref {
    uint64_t pre;
    size_t off;
} idref_t;

/* qsort's context: the list being sorted (this thread's) */
static _Thread_local const idlist_t *tls_ids;

/* Key order (memcmp, a shorter prefix first): the collection's own order. */
static int idref_cmp(const void *a, const void *b)
{
    const idref_t *x = a, *y = b;
    if (x->pre != y->pre)
        return x->pre < y->pre ? -1 : 1;
    uint32_t la, lb;
    const uint8_t *ka = idlist_get(tls_ids, x->off, &la);
    const uint8_t *kb = idlist_get(tls_ids, y->off, &lb);
    int c = memcmp(ka, kb, la < lb ? la : lb);
    return c != 0 ? c : (la > lb) - (la < lb);
}

/* Sort refs in key order: a radix sort on the prefixes (8 passes of a
 * byte; qsort's comparisons took 5% of a 1% $geoWithin), then runs of
 * equal prefixes by their bytes. */
static void idrefs_sort(const idlist_t *ids, idref_t *refs, size_t n)
{
    idref_t *tmp = malloc(n * sizeof(*tmp));
    if (tmp == NULL)
        abort();
    for (int shift = 0; shift < 64; shift += 8) {
        size_t cnt[257] = {0};
        for (size_t i = 0; i < n; i++)
            cnt[((refs[i].pre >> shift) & 0xff) + 1]++;
        if (cnt[((refs[0].pre >> shift) & 0xff) + 1] == n)
            continue; /* one value of this byte: already in order */
        for (int b = 0; b < 256; b++)
            cnt[b + 1] += cnt[b];
        for (size_t i = 0; i < n; i++)
            tmp[cnt[(refs[i].pre >> shift) & 0xff]++] = refs[i];
        memcpy(refs, tmp, n * sizeof(*refs));
    }
    free(tmp);
    tls_ids = ids;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && refs[j].pre == refs[i].pre)
            j++;
        if (j - i > 1)
            qsort(refs + i, j - i, sizeof(*refs), idref_cmp);
        i = j;
    }
}

typedef struct fetch_ctx {
    sbl_geo_exec_t *g;
    sbl_opctx_t *ctx;
    const sbl_matcher_t *m;
} fetch_ctx_t;

static int fetched(void *arg, const bson_t *doc, sbl_err_t *err)
{
    fetch_ctx_t *f = arg;
    if (++f->ctx->docs_examined % 4096 == 0 && sbl_op_check_interrupt(f->ctx, err) != 0)
        return err->code;
    keep_doc(f->g, doc, f->m);
    return 0;
}

/* Read the entries of cells and collect every document not met before;
 * then fetch them in _id order (neighbouring reads of the collection's
 * B-tree then hit the same pages, mostly the leaf the cursor is on; in
 * index order the _ids are random: a 1% $geoWithin over 1,000,000 points
 * took 25% more CPU) and consider each (a near) or keep it (a scan). */
static int read_cells(sbl_geo_exec_t *g, sbl_opctx_t *ctx, sbl_coll_t *c, sbl_index_t *ix,
                      const uint64_t *cells, size_t ncells, double r, const sbl_matcher_t *m,
                      sbl_err_t *err)
{
    ival_t *iv = NULL;
    size_t niv = intervals(cells, ncells, &iv);
    sbl_buf_t lo, hi;
    idlist_t ids = {0};
    int rc = 0;
    size_t k = 0;

    sbl_buf_init(&lo);
    sbl_buf_init(&hi);
    sbl_buf_init(&ids.b);
    for (size_t i = 0; i < niv && rc == 0; i++) {
        sbl_iscan_t *sc = NULL;
        lo.len = hi.len = 0;
        sbl_index_geo_cell_append(&lo, iv[i].lo);
        sbl_index_geo_cell_append(&hi, iv[i].hi + 1);
        if ((rc = sbl_iscan_open(ctx->ss, ix, lo.data, lo.len, hi.data, hi.len, false, &sc, err)) != 0)
            break;
        for (;;) {
            const uint8_t *ek, *idk;
            size_t eklen, idlen;
            bool done;
            if ((rc = sbl_iscan_next(sc, &ek, &eklen, &idk, &idlen, &done, err)) != 0 || done)
                break;
            ctx->keys_examined++;
            if (++k % 4096 == 0 && (rc = sbl_op_check_interrupt(ctx, err)) != 0)
                break;
            if (cell_may_match(g, entry_cell(ek, eklen), r) && seen_add(g, hash_bytes(idk, idlen)))
                idlist_add(&ids, idk, idlen);
        }
        sbl_iscan_close(sc);
    }
    idref_t *refs = rc == 0 && ids.n > 0 ? malloc(ids.n * sizeof(*refs)) : NULL;
    const uint8_t **keys = refs != NULL ? malloc(ids.n * sizeof(*keys)) : NULL;
    uint32_t *lens = refs != NULL ? malloc(ids.n * sizeof(*lens)) : NULL;
    if (refs != NULL && (keys == NULL || lens == NULL))
        abort();
    if (refs != NULL) {
        for (size_t i = 0; i < ids.n; i++) {
            uint32_t len;
            const uint8_t *p = idlist_get(&ids, ids.off[i], &len);
            uint8_t b[8] = {0};
            memcpy(b, p, len < 8 ? len : 8);
            refs[i].pre = 0;
            for (int j = 0; j < 8; j++)
                refs[i].pre = refs[i].pre << 8 | b[j];
            refs[i].off = ids.off[i];
        }
        idrefs_sort(&ids, refs, ids.n);
        for (size_t i = 0; i < ids.n; i++)
            keys[i] = idlist_get(&ids, refs[i].off, &lens[i]);
        fetch_ctx_t f = {g, ctx, m};
        rc = sbl_coll_get_by_keys(ctx->ss, c, ids.n, keys, lens, fetched, &f, err);
    }
    free(refs);
    free(keys);
    free(lens);
    free(ids.off);
    sbl_buf_destroy(&ids.b);
    free(iv);
    sbl_buf_destroy(&lo);
    sbl_buf_destroy(&hi);
    return rc;
}

/* Every document, for a near without a usable cell index. */
static int read_all(sbl_geo_exec_t *g, sbl_opctx_t *ctx, sbl_coll_t *c, const sbl_matcher_t *m,
                    sbl_err_t *err)
{
    sbl_scan_t *sc = NULL;
    int rc;
    size_t k = 0;
    SBL_RET(sbl_scan_open(ctx->ss, c, NULL, false, &sc, err));
    for (;;) {
        bson_t doc;
        bool done;
        if ((rc = sbl_scan_next(sc, &doc, &done, err)) != 0 || done)
            break;
        ctx->docs_examined++;
        if (++k % 4096 == 0 && (rc = sbl_op_check_interrupt(ctx, err)) != 0)
            break;
        consider(g, &doc, m);
    }
    sbl_scan_close(sc);
    return rc;
}

static sbl_index_t *find_index(sbl_geo_exec_t *g, sbl_coll_t *c)
{
    sbl_index_t **ixs = NULL, *ix = NULL;
    size_t nix = 0;
    sbl_index_list(c, false, &ixs, &nix);
    for (size_t i = 0; i < nix; i++)
        if (ix == NULL && strcmp(sbl_index_name(ixs[i]), g->ixname) == 0) {
            ix = ixs[i];
            ixs[i] = NULL;
        }
    for (size_t i = 0; i < nix; i++)
        sbl_index_release(ixs[i]);
    bson_free(ixs);
    return ix;
}

/* One more round: the cap twice as wide (or everything). */
static int widen(sbl_geo_exec_t *g, sbl_opctx_t *ctx, sbl_coll_t *c, const sbl_matcher_t *m,
                 sbl_err_t *err)
{
    if (g->scan_all) {
        g->searched = true;
        return read_all(g, ctx, c, m, err);
    }
    double limit = fmin(g->rmax, M_PI);
    double r = g->r == 0 ? fmax(NEAR_R0, g->rmin) : g->r * 2;
    /* few found so far (handed out or waiting): the points are sparse here,
     * widen faster; not when those waiting ran low because most went out */
    if (g->r > 0 && g->n + g->nout < 8)
        r = g->r * 4;
    if (r >= limit) {
        r = limit;
        g->searched = true;
    }
    sbl_index_t *ix = find_index(g, c);
    if (ix == NULL)
        return sbl_err_set(err, SBL_E_QueryPlanKilled, "index '%s' dropped", g->ixname);
    uint64_t *cells = NULL;
    size_t n = r >= M_PI ? sbl_geo_cover_cap(g->nr.x, g->nr.y, M_PI, 6, &cells)
                         : sbl_geo_cover_cap(g->nr.x, g->nr.y, r, NEAR_CELLS, &cells);
    int rc = read_cells(g, ctx, c, ix, cells, n, r, m, err);
    bson_free(cells);
    sbl_index_release(ix);
    g->r = r;
    return rc;
}

static bson_t *result(const sbl_geo_exec_t *g, cand_t *cd, bool keep)
{
    bson_t *out = cd->doc;
    if (keep && g->near) {
        out = bson_sized_new(cd->doc->len + 64);
        bson_concat(out, cd->doc);
        bson_destroy(cd->doc);
        BSON_APPEND_DOUBLE(out, SBL_GEO_DIST_FIELD, g->nr.geojson ? cd->d * SBL_GEO_EARTH_M : cd->d);
        sbl_append_value(out, SBL_GEO_LOC_FIELD, -1, &cd->loc);
    }
    if (cd->loc.value_type != BSON_TYPE_EOD)
        bson_value_destroy(&cd->loc);
    return out;
}

int sbl_geo_exec_next(sbl_geo_exec_t *g, sbl_opctx_t *ctx, sbl_coll_t *c, const sbl_matcher_t *m,
                      bool keep, bson_t **docp, sbl_err_t *err)
{
    *docp = NULL;
    if (!g->near) {
        if (!g->searched) {
            sbl_index_t *ix = find_index(g, c);
            uint64_t *cells = NULL;
            g->searched = true;
            if (ix == NULL)
                return sbl_err_set(err, SBL_E_QueryPlanKilled, "index '%s' dropped", g->ixname);
            size_t n = sbl_geo_region_cover(g->region, SCAN_CELLS, &cells);
            if (g->sole)
                inner_build(g);
            int rc = read_cells(g, ctx, c, ix, cells, n, 0, m, err);
            bson_free(cells);
            sbl_index_release(ix);
            SBL_RET(rc);
        }
        if (g->qhead == g->n)
            return 0;
        *docp = g->heap[g->qhead++].doc;
        return 0;
    }
    for (;;) {
        if (g->n > 0 && (g->searched || g->heap[0].d <= g->r)) {
            cand_t cd = heap_pop(g);
            g->nout++;
            *docp = result(g, &cd, keep);
            return 0;
        }
        if (g->searched)
            return 0;
        SBL_RET(widen(g, ctx, c, m, err));
    }
}
