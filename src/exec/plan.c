/*
 * plan.c: index bounds from a filter and the choice among candidate
 * plans.
 *
 * For each secondary index: the leading index fields the filter pins to
 * points ($eq, $in) are crossed into key prefixes, the next field may add a
 * range ($gt/$gte/$lt/$lte, widened to the operand's type bracket), and the
 * prefixes become intervals of encoded keys.  A multikey index bounds only
 * its first field, with one conjunct (different array elements may satisfy
 * different conjuncts).  Candidates are costed by the keys in their bounds,
 * counted up to a cap; the collection scan by its document count.
 *
 * What must stay true: bounds are never tighter than the filter; a sparse or
 * partial index is used only when it holds every document the filter can
 * match (or when hinted); a hashed field bounds only equalities.
 */
#include "exec/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"
#include "query/query.h"

#define PROBE_CAP 1000
#define MAX_PREFIXES 4096

void sbl_ixplan_free(sbl_ixplan_t *p)
{
    if (p == NULL)
        return;
    sbl_index_release(p->ix);
    if (p->arena != NULL) {
        sbl_buf_destroy(p->arena);
        bson_free(p->arena);
    }
    bson_free(p->ivals);
    if (p->bounds != NULL)
        bson_destroy(p->bounds);
    bson_free(p);
}

void sbl_ixplan_key_pattern(const sbl_ixplan_t *p, bson_t *out)
{
    for (size_t i = 0; i < sbl_index_nfields(p->ix); i++) {
        int d = sbl_index_dir(p->ix, i);
        if (d == 0)
            BSON_APPEND_UTF8(out, sbl_index_field(p->ix, i), "hashed");
        else
            BSON_APPEND_INT32(out, sbl_index_field(p->ix, i), d);
    }
}

void sbl_ixplan_summary(const sbl_ixplan_t *p, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "IXSCAN {");
    for (size_t i = 0; i < sbl_index_nfields(p->ix) && n < len; i++) {
        int d = sbl_index_dir(p->ix, i);
        n += (size_t)snprintf(buf + n, len - n, "%s %s: ", i ? "," : "", sbl_index_field(p->ix, i));
        if (n < len)
            n += (size_t)(d == 0 ? snprintf(buf + n, len - n, "\"hashed\"")
                                 : snprintf(buf + n, len - n, "%d", d));
    }
    if (n < len)
        snprintf(buf + n, len - n, " }");
}

/* ---- bounds ------------------------------------------------------------------- */

/* The smallest string above every string that starts with b[0..len): false
 * when there is none (all 0xff). */
static bool successor(sbl_buf_t *b, size_t start)
{
    while (b->len > start && b->data[b->len - 1] == 0xff)
        b->len--;
    if (b->len == start)
        return false;
    b->data[b->len - 1]++;
    return true;
}

/* Encode v as index keys are (under the index's collation, coll). */
static void enc(sbl_buf_t *b, const bson_value_t *v, int dir, const sbl_collation_t *coll)
{
    if (dir == 0) {
        bson_value_t h;
        sbl_index_hash(v, &h);
        sbl_key_append(b, &h, false);
    } else
        sbl_key_append_coll(b, v, dir < 0, coll);
}

/* Appends a value the way explain prints bounds. */
static void fmt_value(bson_string_t *s, const bson_value_t *v)
{
    if (v->value_type == BSON_TYPE_DOUBLE && isinf(v->value.v_double)) {
        bson_string_append(s, v->value.v_double > 0 ? "inf.0" : "-inf.0");
        return;
    }
    if (v->value_type == BSON_TYPE_DOUBLE && isnan(v->value.v_double)) {
        bson_string_append(s, "nan.0");
        return;
    }
    bson_t tmp = BSON_INITIALIZER;
    sbl_append_value(&tmp, "v", 1, v);
    char *j = bson_as_relaxed_extended_json(&tmp, NULL);
    char *p = j != NULL ? strstr(j, ": ") : NULL;
    if (p != NULL) {
        size_t n = strlen(p + 2);
        if (n >= 2)
            p[2 + n - 2] = '\0';
        bson_string_append(s, p + 2);
    }
    bson_free(j);
    bson_destroy(&tmp);
}

static void add_bound_str(bson_t *arr, uint32_t *n, const char *str)
{
    char kb[16];
    const char *k;
    bson_uint32_to_string((*n)++, &k, kb, sizeof(kb));
    bson_append_utf8(arr, k, -1, str, -1);
}

/* The explain strings of one field's constraint. */
static void field_bounds(bson_t *bounds, const char *field, const sbl_id_range_t *r, int dir)
{
    bson_t arr;
    uint32_t n = 0;
    bson_string_t *s;

    bson_append_array_begin(bounds, field, -1, &arr);
    if (r == NULL || r->kind == SBL_ID_ANY) {
        add_bound_str(&arr, &n, "[MinKey, MaxKey]");
    } else if (r->kind == SBL_ID_POINTS) {
        for (size_t i = 0; i < r->npoints; i++) {
            s = bson_string_new("[");
            if (dir == 0) {
                bson_value_t h;
                sbl_index_hash(&r->points[i], &h);
                bson_string_append_printf(s, "%lld, %lld]", (long long)h.value.v_int64,
                                          (long long)h.value.v_int64);
            } else {
                fmt_value(s, &r->points[i]);
                bson_string_append(s, ", ");
                fmt_value(s, &r->points[i]);
                bson_string_append(s, "]");
            }
            add_bound_str(&arr, &n, s->str);
            bson_string_free(s, true);
        }
    } else if (r->kind == SBL_ID_RANGE) {
        bool desc = dir < 0;
        s = bson_string_new(NULL);
        bool first_incl = desc ? (!r->has_hi || r->hi_inclusive) : (!r->has_lo || r->lo_inclusive);
        bool last_incl = desc ? (!r->has_lo || r->lo_inclusive) : (!r->has_hi || r->hi_inclusive);
        bson_string_append(s, first_incl ? "[" : "(");
        if (desc ? r->has_hi : r->has_lo)
            fmt_value(s, desc ? &r->hi : &r->lo);
        else
            bson_string_append(s, desc ? "MaxKey" : "MinKey");
        bson_string_append(s, ", ");
        if (desc ? r->has_lo : r->has_hi)
            fmt_value(s, desc ? &r->lo : &r->hi);
        else
            bson_string_append(s, desc ? "MinKey" : "MaxKey");
        bson_string_append(s, last_incl ? "]" : ")");
        add_bound_str(&arr, &n, s->str);
        bson_string_free(s, true);
    }
    bson_append_array_end(bounds, &arr);
}

typedef struct span {
    size_t off, len;
} span_t;

static void add_ival(sbl_ixplan_t *p, size_t lo_off, size_t lo_len, size_t hi_off, size_t hi_len)
{
    p->ivals = bson_realloc(p->ivals, (p->nivals + 1) * sizeof(*p->ivals));
    p->ivals[p->nivals].lo_off = lo_off;
    p->ivals[p->nivals].lo_len = lo_len;
    p->ivals[p->nivals].hi_off = hi_off;
    p->ivals[p->nivals].hi_len = hi_len;
    p->nivals++;
}

/* Append prefix bytes + v's encoding (+ successor) to the arena; returns the span,
 * or len 0 with *nonep when there is no successor. */
static span_t put_bound(sbl_buf_t *a, const sbl_buf_t *pre, span_t px, const bson_value_t *v,
                        int dir, const sbl_collation_t *coll, bool succ, bool *nonep)
{
    span_t s = {a->len, 0};
    sbl_buf_append(a, pre->data + px.off, px.len);
    if (v != NULL)
        enc(a, v, dir, coll);
    *nonep = false;
    if (succ && !successor(a, s.off)) {
        a->len = s.off;
        *nonep = true;
    }
    s.len = a->len - s.off;
    return s;
}

static _Thread_local const uint8_t *tls_arena;

static int ival_cmp(const void *x, const void *y)
{
    const sbl_ival_t *a = x, *b = y;
    size_t n = a->lo_len < b->lo_len ? a->lo_len : b->lo_len;
    int c = memcmp(tls_arena + a->lo_off, tls_arena + b->lo_off, n);
    return c != 0 ? c : a->lo_len < b->lo_len ? -1 : a->lo_len > b->lo_len;
}

/* Remove intervals equal to the one before (sorted by low bound). */
static void drop_same_ivals(sbl_ixplan_t *p)
{
    const uint8_t *a = p->arena->data;
    size_t w = 0;
    for (size_t r = 0; r < p->nivals; r++) {
        const sbl_ival_t *x = &p->ivals[r], *y = w > 0 ? &p->ivals[w - 1] : NULL;
        if (y != NULL && x->lo_len == y->lo_len && x->hi_len == y->hi_len &&
            memcmp(a + x->lo_off, a + y->lo_off, x->lo_len) == 0 &&
            (x->hi_len == 0 || memcmp(a + x->hi_off, a + y->hi_off, x->hi_len) == 0))
            continue;
        p->ivals[w++] = *x;
    }
    p->nivals = w;
}

/* Compute p's intervals for filter; *has_nullp when a bound admits null. */
static void build_bounds(sbl_ixplan_t *p, const bson_t *filter, bool *has_nullp)
{
    size_t nf = sbl_index_nfields(p->ix), i;
    bool mk = sbl_index_multikey(p->ix);
    const sbl_collation_t *coll = sbl_index_collation(p->ix);
    sbl_buf_t pre;
    span_t *px = bson_malloc(sizeof(span_t));
    size_t npx = 1;
    sbl_id_range_t range;
    bool have_range = false, empty = false;
    int range_dir = 1;

    *has_nullp = false;
    sbl_buf_init(&pre);
    px[0].off = px[0].len = 0;
    p->arena = bson_malloc(sizeof(sbl_buf_t));
    sbl_buf_init(p->arena);
    p->bounds = bson_new();
    memset(&range, 0, sizeof(range));
    for (i = 0; i < nf; i++) {
        const char *f = sbl_index_field(p->ix, i);
        int dir = sbl_index_dir(p->ix, i);
        sbl_id_range_t r;
        if (mk && i > 0) {
            field_bounds(p->bounds, f, NULL, dir);
            continue;
        }
        /* Under a collation the analysis (binary order) must not intersect string
         * constraints: the first one alone is a looser, safe bound. */
        sbl_field_range_from_filter(filter, f, mk || coll != NULL, &r);
        if (r.kind == SBL_ID_NONE) {
            empty = true;
            field_bounds(p->bounds, f, &r, dir);
            sbl_id_range_destroy(&r);
            p->nbounded = i + 1;
            break;
        }
        if (r.kind == SBL_ID_POINTS && npx * r.npoints <= MAX_PREFIXES && !have_range) {
            span_t *next = bson_malloc(npx * r.npoints * sizeof(span_t));
            size_t nn = 0;
            for (size_t a = 0; a < npx; a++)
                for (size_t b = 0; b < r.npoints; b++) {
                    next[nn].off = pre.len;
                    sbl_buf_append(&pre, pre.data + px[a].off, px[a].len);
                    enc(&pre, &r.points[b], dir, coll);
                    next[nn].len = pre.len - next[nn].off;
                    nn++;
                }
            for (size_t b = 0; b < r.npoints; b++)
                if (r.points[b].value_type == BSON_TYPE_NULL)
                    *has_nullp = true;
            bson_free(px);
            px = next;
            npx = nn;
            p->nbounded = i + 1;
            field_bounds(p->bounds, f, &r, dir);
            sbl_id_range_destroy(&r);
            continue;
        }
        if (r.kind == SBL_ID_RANGE && dir != 0 && !have_range) {
            range = r;
            have_range = true;
            range_dir = dir;
            p->nbounded = i + 1;
            if ((r.has_lo && (r.lo.value_type == BSON_TYPE_NULL ||
                              r.lo.value_type == BSON_TYPE_MINKEY)) ||
                !r.has_lo)
                *has_nullp = true; /* a loose low end may reach null */
            field_bounds(p->bounds, f, &r, dir);
            continue; /* later fields: unbounded */
        }
        sbl_id_range_destroy(&r);
        field_bounds(p->bounds, f, NULL, dir);
        /* No bounds from here on: the remaining fields are unbounded. */
        for (size_t j = i + 1; j < nf; j++)
            field_bounds(p->bounds, sbl_index_field(p->ix, j), NULL, sbl_index_dir(p->ix, j));
        break;
    }
    if (p->nbounded == 0)
        *has_nullp = true;
    if (!empty) {
        for (size_t a = 0; a < npx; a++) {
            span_t lo, hi;
            bool none_lo = false, none_hi = false;
            if (have_range) {
                bool desc = range_dir < 0;
                const bson_value_t *first = desc ? (range.has_hi ? &range.hi : NULL)
                                                 : (range.has_lo ? &range.lo : NULL);
                bool first_incl = desc ? range.hi_inclusive : range.lo_inclusive;
                const bson_value_t *last = desc ? (range.has_lo ? &range.lo : NULL)
                                                : (range.has_hi ? &range.hi : NULL);
                bool last_incl = desc ? range.lo_inclusive : range.hi_inclusive;
                lo = put_bound(p->arena, &pre, px[a], first, range_dir, coll,
                               first != NULL && !first_incl, &none_lo);
                hi = put_bound(p->arena, &pre, px[a], last, range_dir, coll,
                               last == NULL || last_incl, &none_hi);
            } else {
                lo = put_bound(p->arena, &pre, px[a], NULL, 1, coll, false, &none_lo);
                hi = put_bound(p->arena, &pre, px[a], NULL, 1, coll, true, &none_hi);
            }
            if (none_lo)
                continue; /* nothing above the low bound */
            add_ival(p, lo.off, lo.len, hi.off, none_hi ? 0 : hi.len);
        }
        tls_arena = p->arena->data;
        if (p->nivals > 1)
            qsort(p->ivals, p->nivals, sizeof(*p->ivals), ival_cmp);
        if (coll != NULL)
            drop_same_ivals(p); /* "a" and "A" may be one key under a collation */
    }
    p->multi_points = p->nivals > 1;
    if (have_range)
        sbl_id_range_destroy(&range);
    bson_free(px);
    sbl_buf_destroy(&pre);
}

/* ---- sort ------------------------------------------------------------------------- */

/* Does scanning p give sort's order?  Sets p->backward. */
static bool gives_sort(sbl_ixplan_t *p, const bson_t *filter, const bson_t *sort)
{
    size_t nf = sbl_index_nfields(p->ix), i = 0;
    bson_iter_t it;
    int rel = 0;

    if (sort == NULL || sbl_index_multikey(p->ix))
        return false;
    /* Skip leading fields pinned to one value. */
    while (i < nf && i < p->nbounded) {
        sbl_id_range_t r;
        bool one;
        bson_iter_t sit;
        sbl_field_range_from_filter(filter, sbl_index_field(p->ix, i), false, &r);
        one = r.kind == SBL_ID_POINTS && r.npoints == 1;
        sbl_id_range_destroy(&r);
        /* a pinned field that is also the sort's first field is fine either way */
        if (!one || (bson_iter_init(&sit, sort) && bson_iter_next(&sit) &&
                     strcmp(bson_iter_key(&sit), sbl_index_field(p->ix, i)) == 0))
            break;
        i++;
    }
    if (!bson_iter_init(&it, sort))
        return false;
    while (bson_iter_next(&it)) {
        int sd = bson_iter_as_int64(&it) < 0 ? -1 : 1;
        if (i >= nf || strcmp(bson_iter_key(&it), sbl_index_field(p->ix, i)) != 0 ||
            sbl_index_dir(p->ix, i) == 0)
            return false;
        int r = sd == sbl_index_dir(p->ix, i) ? 1 : -1;
        if (rel != 0 && r != rel)
            return false;
        rel = r;
        i++;
    }
    p->backward = rel < 0;
    return rel != 0;
}

/* ---- choice ----------------------------------------------------------------------- */

/* Every top-level condition of the partial filter appears verbatim in filter. */
static bool implies_partial(const bson_t *filter, const bson_t *pfe)
{
    bson_iter_t it, f;

    if (!bson_iter_init(&it, pfe))
        return false;
    while (bson_iter_next(&it)) {
        bool found = false;
        if (!bson_iter_init(&f, filter))
            return false;
        while (bson_iter_next(&f) && !found) {
            bson_value_t a, b;
            sbl_iter_value(&it, &a);
            sbl_iter_value(&f, &b);
            found = strcmp(bson_iter_key(&it), bson_iter_key(&f)) == 0 &&
                    a.value_type == b.value_type && sbl_value_equal(&a, &b);
        }
        if (!found)
            return false;
    }
    return true;
}

static int64_t probe(sbl_session_t *ss, sbl_ixplan_t *p)
{
    int64_t n = 0;

    for (size_t i = 0; i < p->nivals && n <= PROBE_CAP; i++) {
        sbl_iscan_t *sc = NULL;
        sbl_err_t e;
        const sbl_ival_t *v = &p->ivals[i];
        sbl_err_clear(&e);
        if (sbl_iscan_open(ss, p->ix, p->arena->data + v->lo_off, v->lo_len,
                           p->arena->data + v->hi_off, v->hi_len, false, &sc, &e) != 0)
            return PROBE_CAP + 1;
        for (;;) {
            const uint8_t *k, *idk;
            size_t kl, il;
            bool done = false;
            if (sbl_iscan_next(sc, &k, &kl, &idk, &il, &done, &e) != 0 || done)
                break;
            if (++n > PROBE_CAP)
                break;
        }
        sbl_iscan_close(sc);
    }
    return n;
}

static bool key_equals(const sbl_index_t *ix, const bson_t *key)
{
    bson_t kp = BSON_INITIALIZER;
    bson_iter_t it;
    bool r;
    if (!bson_iter_init_find(&it, sbl_index_spec(ix), "key") || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_destroy(&kp);
        return false;
    }
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(&it, &len, &data);
    bson_t k;
    r = bson_init_static(&k, data, len) && sbl_doc_compare(&k, key) == 0;
    bson_destroy(&kp);
    return r;
}

static int hint_error(const char *ns, sbl_err_t *err)
{
    return sbl_err_set(err, SBL_E_BadValue,
                       "error processing query: ns=%s planner returned error :: caused by :: "
                       "hint provided does not correspond to an existing index", ns);
}

int sbl_plan_choose(const sbl_plan_input_t *in, sbl_hint_kind_t *hintp, sbl_ixplan_t **bestp,
                    sbl_ixplan_t ***rejp, size_t *nrejp, sbl_err_t *err)
{
    sbl_session_t *ss = sbl_session_get();
    sbl_coll_t *c = NULL;
    sbl_index_t **ixs = NULL;
    size_t nix = 0, ncand = 0, i;
    sbl_ixplan_t **cand = NULL;
    const char *hint_name = NULL;
    bson_t hint_key;
    bool hint_by_key = false;
    int rc = 0;

    *bestp = NULL;
    *hintp = SBL_HINT_NONE;
    if (rejp != NULL) {
        *rejp = NULL;
        *nrejp = 0;
    }
    if (in->hint != NULL) {
        const bson_value_t *h = in->hint;
        if (h->value_type == BSON_TYPE_UTF8) {
            hint_name = h->value.v_utf8.str;
            if (strcmp(hint_name, "_id_") == 0)
                *hintp = SBL_HINT_ID;
            else
                *hintp = SBL_HINT_INDEX;
        } else if (h->value_type == BSON_TYPE_DOCUMENT &&
                   bson_init_static(&hint_key, h->value.v_doc.data, h->value.v_doc.data_len) &&
                   !bson_empty(&hint_key)) {
            bson_iter_t it;
            bson_iter_init(&it, &hint_key);
            bson_iter_next(&it);
            if (strcmp(bson_iter_key(&it), "$natural") == 0)
                *hintp = SBL_HINT_NATURAL;
            else if (strcmp(bson_iter_key(&it), "_id") == 0 && bson_count_keys(&hint_key) == 1)
                *hintp = SBL_HINT_ID;
            else {
                *hintp = SBL_HINT_INDEX;
                hint_by_key = true;
            }
        }
    }
    if (in->id_points && in->hint == NULL)
        return 0; /* _id point lookups win outright: no planning on the hot path */
    if (ss == NULL || sbl_coll_open(ss, in->ns, false, &c, NULL, NULL) != 0)
        return 0; /* no collection: nothing to plan (and a hint is moot) */
    if (*hintp == SBL_HINT_ID || *hintp == SBL_HINT_NATURAL || sbl_index_count(c) == 0) {
        if (*hintp == SBL_HINT_INDEX)
            rc = hint_error(in->ns, err);
        sbl_coll_release(c);
        return rc;
    }
    sbl_index_list(c, false, &ixs, &nix);
    sbl_coll_stats_t st = {0};
    sbl_coll_stats(ss, c, &st, NULL);
    cand = bson_malloc0((nix + 1) * sizeof(*cand));
    for (i = 0; i < nix; i++) {
        bool hinted = false, has_null = false;
        bson_iter_t hid; /* collMod hidden: maintained, never planned (nor hinted) */
        if (bson_iter_init_find(&hid, sbl_index_spec(ixs[i]), "hidden") && bson_iter_as_bool(&hid))
            continue;
        if (sbl_index_text(ixs[i]) != NULL || sbl_index_geo(ixs[i], NULL) != 0)
            continue; /* only $text reads a text index (text.c), geo operators a geo one (geo.c) */
        if (*hintp == SBL_HINT_INDEX) {
            hinted = hint_by_key ? key_equals(ixs[i], &hint_key)
                                 : strcmp(sbl_index_name(ixs[i]), hint_name) == 0;
            if (!hinted)
                continue;
        }
        /* An index orders strings by its collation: bounds and order serve only a
         * query with the same one (and, hashing binary values, a hashed index none
         * under a collation).  Hinted anyway, it is scanned whole. */
        bool coll_ok = sbl_collation_equal(sbl_index_collation(ixs[i]), in->collation);
        for (size_t f = 0; coll_ok && in->collation != NULL && f < sbl_index_nfields(ixs[i]); f++)
            coll_ok = sbl_index_dir(ixs[i], f) != 0;
        if (!coll_ok && !hinted)
            continue;
        sbl_ixplan_t *p = bson_malloc0(sizeof(*p));
        bson_t no_filter = BSON_INITIALIZER;
        p->ix = ixs[i];
        ixs[i] = NULL; /* the plan holds the reference now */
        build_bounds(p, coll_ok ? in->filter : &no_filter, &has_null);
        p->provides_sort = coll_ok && gives_sort(p, in->filter, in->sort);
        bool hashed = false;
        for (size_t f = 0; f < sbl_index_nfields(p->ix); f++)
            hashed |= sbl_index_dir(p->ix, f) == 0;
        bool usable = hinted || ((p->nbounded > 0 || p->provides_sort) &&
                                 !(sbl_index_sparse(p->ix) && has_null) &&
                                 !(hashed && p->nbounded == 0) &&
                                 (sbl_index_partial(p->ix) == NULL ||
                                  implies_partial(in->filter, sbl_index_partial(p->ix))));
        if (!usable || (in->id_points && !hinted)) {
            sbl_ixplan_free(p);
            continue;
        }
        p->probe = probe(ss, p);
        double keys = p->probe > PROBE_CAP ? (double)(st.count > PROBE_CAP ? st.count : PROBE_CAP)
                                           : (double)p->probe;
        if (p->provides_sort && in->limit > 0 && keys > (double)(in->skip + in->limit))
            keys = (double)(in->skip + in->limit);
        p->cost = keys * 1.2 + (in->sort != NULL && !p->provides_sort ? keys * 0.2 : 0);
        cand[ncand++] = p;
    }
    for (i = 0; i < nix; i++)
        sbl_index_release(ixs[i]);
    bson_free(ixs);
    if (*hintp == SBL_HINT_INDEX && ncand == 0) {
        rc = hint_error(in->ns, err);
        goto done;
    }
    /* The collection's own plans: _id range or full scan. */
    double base = in->id_range ? (double)st.count / 3.0 + 1 : (double)st.count + 1;
    if (in->sort != NULL)
        base += (double)st.count * 0.2;
    size_t best = SIZE_MAX;
    for (i = 0; i < ncand; i++) {
        if (best == SIZE_MAX || cand[i]->cost < cand[best]->cost ||
            (cand[i]->cost == cand[best]->cost && cand[i]->provides_sort &&
             !cand[best]->provides_sort) ||
            (cand[i]->cost == cand[best]->cost && cand[i]->nbounded > cand[best]->nbounded))
            best = i;
    }
    if (best != SIZE_MAX && (*hintp == SBL_HINT_INDEX || cand[best]->cost < base)) {
        *bestp = cand[best];
        cand[best] = NULL;
    }
done:
    for (i = 0; i < ncand; i++) {
        if (cand[i] == NULL)
            continue;
        if (rejp != NULL) {
            *rejp = bson_realloc(*rejp, (*nrejp + 1) * sizeof(**rejp));
            (*rejp)[(*nrejp)++] = cand[i];
        } else
            sbl_ixplan_free(cand[i]);
    }
    bson_free(cand);
    sbl_coll_release(c);
    return rc;
}

/* ---- min / max ------------------------------------------------------------ */

/* Encode bound's values as p's index keys are: false when its field names are
 * not the key pattern's, in order. */
static bool enc_min_max(const sbl_ixplan_t *p, const bson_t *bound, const sbl_collation_t *coll,
                        sbl_buf_t *out)
{
    bson_iter_t it;
    size_t f = 0, n = sbl_index_nfields(p->ix);

    if (!bson_iter_init(&it, bound))
        return false;
    while (bson_iter_next(&it)) {
        if (f == n || strcmp(bson_iter_key(&it), sbl_index_field(p->ix, f)) != 0)
            return false;
        enc(out, bson_iter_value(&it), sbl_index_dir(p->ix, f), coll);
        f++;
    }
    return f == n;
}

static bool same_field_names(const bson_t *a, const bson_t *b)
{
    bson_iter_t x, y;
    bool mx, my;

    if (!bson_iter_init(&x, a) || !bson_iter_init(&y, b))
        return false;
    for (;;) {
        mx = bson_iter_next(&x);
        my = bson_iter_next(&y);
        if (!mx || !my)
            return mx == my;
        if (strcmp(bson_iter_key(&x), bson_iter_key(&y)) != 0)
            return false;
    }
}

int sbl_ixplan_set_min_max(sbl_ixplan_t *p, const bson_t *min, const bson_t *max,
                           const sbl_collation_t *coll, sbl_err_t *err)
{
    sbl_buf_t lo, hi;
    int rc = 0;

    if (min != NULL && max != NULL && !same_field_names(min, max))
        return sbl_err_set(err, 51176, "min() and max() must have the same field names");
    sbl_buf_init(&lo);
    sbl_buf_init(&hi);
    if ((min != NULL && !enc_min_max(p, min, coll, &lo)) ||
        (max != NULL && !enc_min_max(p, max, coll, &hi))) {
        rc = sbl_err_set(err, 51174, "The index chosen is not consistent with min/max");
        goto out;
    }
    if (min != NULL && max != NULL) {
        size_t n = lo.len < hi.len ? lo.len : hi.len;
        int c = memcmp(lo.data, hi.data, n);
        if (c > 0 || (c == 0 && lo.len >= hi.len)) {
            rc = sbl_err_set(err, 51175, "max() must be greater than min()");
            goto out;
        }
    }
    p->nivals = 0;
    size_t lo_off = p->arena->len;
    sbl_buf_append(p->arena, lo.data, lo.len);
    size_t hi_off = p->arena->len;
    sbl_buf_append(p->arena, hi.data, hi.len);
    add_ival(p, lo_off, lo.len, hi_off, hi.len);
    p->multi_points = false;
    p->nbounded = sbl_index_nfields(p->ix);
out:
    sbl_buf_destroy(&lo);
    sbl_buf_destroy(&hi);
    return rc;
}
