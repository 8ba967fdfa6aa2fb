/*
 * idrange.c: what a filter's top-level conjunction says about _id, so the
 * caller can do point lookups or a bounded scan instead of a full scan.
 *
 * What must stay true: the result may be looser than the filter (the matcher
 * re-checks every document) but never tighter.  Range bounds are widened to
 * the edges of the operand's type bracket (numbers, strings, ObjectIds,
 * dates), since $gt/$lt only match values of the operand's canonical type;
 * for other types the far side is left unbounded.
 */
#include <math.h>
#include <string.h>

#include "doc/doc.h"
#include "query/query.h"

static void range_any(sbl_id_range_t *r)
{
    memset(r, 0, sizeof(*r));
    r->kind = SBL_ID_ANY;
}

void sbl_id_range_destroy(sbl_id_range_t *r)
{
    for (size_t i = 0; i < r->npoints; i++)
        bson_value_destroy(&r->points[i]);
    bson_free(r->points);
    if (r->has_lo)
        bson_value_destroy(&r->lo);
    if (r->has_hi)
        bson_value_destroy(&r->hi);
    range_any(r);
}

static int value_cmp_qsort(const void *a, const void *b)
{
    return sbl_value_compare(a, b);
}

/* Sort and deduplicate r->points; an empty set means nothing can match. */
static void points_normalise(sbl_id_range_t *r)
{
    size_t out = 0;

    if (r->npoints > 1)
        qsort(r->points, r->npoints, sizeof(*r->points), value_cmp_qsort);
    for (size_t i = 0; i < r->npoints; i++) {
        if (out > 0 && sbl_value_equal(&r->points[out - 1], &r->points[i]))
            bson_value_destroy(&r->points[i]);
        else
            r->points[out++] = r->points[i];
    }
    r->npoints = out;
    if (out == 0)
        r->kind = SBL_ID_NONE;
}

/* Values that may not be used as points or bounds: arrays, regexes, undefined. */
static bool usable(const bson_value_t *v)
{
    return v->value_type != BSON_TYPE_ARRAY && v->value_type != BSON_TYPE_REGEX &&
           v->value_type != BSON_TYPE_UNDEFINED && v->value_type != BSON_TYPE_EOD;
}

static bool in_range(const sbl_id_range_t *r, const bson_value_t *v)
{
    if (r->has_lo) {
        int c = sbl_value_compare(v, &r->lo);
        if (c < 0 || (c == 0 && !r->lo_inclusive))
            return false;
    }
    if (r->has_hi) {
        int c = sbl_value_compare(v, &r->hi);
        if (c > 0 || (c == 0 && !r->hi_inclusive))
            return false;
    }
    return true;
}

/* For a multikey index field two conjuncts may be met by different array
 * elements: only one of them may bound the scan (set per analysis). */
static _Thread_local bool tls_first_only;

/* r &= s; s is consumed. */
static void intersect(sbl_id_range_t *r, sbl_id_range_t *s)
{
    if (tls_first_only && r->kind != SBL_ID_ANY) {
        sbl_id_range_destroy(s);
        return;
    }
    if (r->kind == SBL_ID_NONE || s->kind == SBL_ID_ANY) {
        sbl_id_range_destroy(s);
        return;
    }
    if (s->kind == SBL_ID_NONE || r->kind == SBL_ID_ANY) {
        sbl_id_range_destroy(r);
        *r = *s;
        range_any(s);
        return;
    }
    if (r->kind == SBL_ID_RANGE && s->kind == SBL_ID_POINTS) {
        sbl_id_range_t t = *r;
        *r = *s;
        *s = t;
    }
    if (r->kind == SBL_ID_POINTS) {
        /* keep r's points that s also allows */
        size_t out = 0;
        for (size_t i = 0; i < r->npoints; i++) {
            bool keep;
            if (s->kind == SBL_ID_RANGE) {
                keep = in_range(s, &r->points[i]);
            } else {
                keep = false;
                for (size_t k = 0; k < s->npoints && !keep; k++)
                    keep = sbl_value_equal(&r->points[i], &s->points[k]);
            }
            if (keep)
                r->points[out++] = r->points[i];
            else
                bson_value_destroy(&r->points[i]);
        }
        r->npoints = out;
        if (out == 0)
            r->kind = SBL_ID_NONE;
        sbl_id_range_destroy(s);
        return;
    }
    /* both ranges: the larger low bound and the smaller high bound */
    if (s->has_lo) {
        int c = r->has_lo ? sbl_value_compare(&s->lo, &r->lo) : 1;
        if (c > 0 || (c == 0 && !s->lo_inclusive)) {
            if (r->has_lo)
                bson_value_destroy(&r->lo);
            r->lo = s->lo;
            r->has_lo = true;
            r->lo_inclusive = s->lo_inclusive;
            s->has_lo = false;
        }
    }
    if (s->has_hi) {
        int c = r->has_hi ? sbl_value_compare(&s->hi, &r->hi) : -1;
        if (c < 0 || (c == 0 && !s->hi_inclusive)) {
            if (r->has_hi)
                bson_value_destroy(&r->hi);
            r->hi = s->hi;
            r->has_hi = true;
            r->hi_inclusive = s->hi_inclusive;
            s->has_hi = false;
        }
    }
    sbl_id_range_destroy(s);
    if (r->has_lo && r->has_hi) {
        int c = sbl_value_compare(&r->lo, &r->hi);
        if (c > 0 || (c == 0 && !(r->lo_inclusive && r->hi_inclusive))) {
            sbl_id_range_destroy(r);
            r->kind = SBL_ID_NONE;
        }
    }
}

static void add_point(sbl_id_range_t *r, const bson_value_t *v)
{
    r->points = bson_realloc(r->points, (r->npoints + 1) * sizeof(*r->points));
    bson_value_copy(v, &r->points[r->npoints++]);
}

/* The lowest (low == true) or highest value of v's type bracket; false if not known. */
static bool bracket_edge(const bson_value_t *v, bool low, bson_value_t *out)
{
    memset(out, 0, sizeof(*out));
    switch (v->value_type) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        /* NaN sorts below every number, +Infinity above */
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = low ? NAN : INFINITY;
        return true;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL:
        if (!low)
            return false; /* no largest string */
        out->value_type = BSON_TYPE_UTF8;
        out->value.v_utf8.str = bson_strdup("");
        out->value.v_utf8.len = 0;
        return true;
    case BSON_TYPE_OID:
        out->value_type = BSON_TYPE_OID;
        memset(out->value.v_oid.bytes, low ? 0x00 : 0xff, 12);
        return true;
    case BSON_TYPE_DATE_TIME:
        out->value_type = BSON_TYPE_DATE_TIME;
        out->value.v_datetime = low ? INT64_MIN : INT64_MAX;
        return true;
    default:
        return false;
    }
}

/* The range for one comparison operator on _id. */
static void range_from_cmp(const char *op, const bson_value_t *v, sbl_id_range_t *r)
{
    bool is_lo = op[1] == 'g';
    bool inclusive = strlen(op) == 4;
    bson_value_t edge;

    range_any(r);
    if (!usable(v) || v->value_type == BSON_TYPE_NULL || v->value_type == BSON_TYPE_MINKEY ||
        v->value_type == BSON_TYPE_MAXKEY)
        return;
    r->kind = SBL_ID_RANGE;
    if (is_lo) {
        r->has_lo = true;
        r->lo_inclusive = inclusive;
        bson_value_copy(v, &r->lo);
        if (bracket_edge(v, false, &edge)) {
            r->has_hi = true;
            r->hi_inclusive = true;
            r->hi = edge;
        }
    } else {
        r->has_hi = true;
        r->hi_inclusive = inclusive;
        bson_value_copy(v, &r->hi);
        if (bracket_edge(v, true, &edge)) {
            r->has_lo = true;
            r->lo_inclusive = true;
            r->lo = edge;
        }
    }
    if (r->has_lo && r->has_hi) {
        int c = sbl_value_compare(&r->lo, &r->hi);
        if (c > 0 || (c == 0 && !(r->lo_inclusive && r->hi_inclusive))) {
            sbl_id_range_destroy(r);
            r->kind = SBL_ID_NONE; /* e.g. $gt: Infinity */
        }
    }
}

static void range_from_in(const bson_value_t *arrv, sbl_id_range_t *r)
{
    bson_t arr;
    bson_iter_t it;

    range_any(r);
    if (arrv->value_type != BSON_TYPE_ARRAY ||
        !bson_init_static(&arr, arrv->value.v_doc.data, arrv->value.v_doc.data_len) ||
        !bson_iter_init(&it, &arr))
        return;
    r->kind = SBL_ID_POINTS;
    while (bson_iter_next(&it)) {
        bson_value_t e;
        sbl_iter_value(&it, &e);
        if (!usable(&e)) {
            sbl_id_range_destroy(r);
            return;
        }
        add_point(r, &e);
    }
    points_normalise(r);
}

static bool is_operator_doc(const bson_value_t *v, bson_t *d)
{
    bson_iter_t it;
    if (v->value_type != BSON_TYPE_DOCUMENT ||
        !bson_init_static(d, v->value.v_doc.data, v->value.v_doc.data_len) ||
        !bson_iter_init(&it, d) || !bson_iter_next(&it))
        return false;
    const char *k = bson_iter_key(&it);
    return k[0] == '$' && strcmp(k, "$ref") != 0 && strcmp(k, "$id") != 0 &&
           strcmp(k, "$db") != 0;
}

/* The constraint of {_id: v} into r. */
static void range_from_id_value(const bson_value_t *v, sbl_id_range_t *r)
{
    bson_t ops;
    bson_iter_t it;

    range_any(r);
    if (!is_operator_doc(v, &ops)) {
        if (usable(v)) {
            r->kind = SBL_ID_POINTS;
            add_point(r, v);
        }
        return;
    }
    if (!bson_iter_init(&it, &ops))
        return;
    while (bson_iter_next(&it)) {
        const char *op = bson_iter_key(&it);
        bson_value_t arg;
        sbl_id_range_t s;

        sbl_iter_value(&it, &arg);
        range_any(&s);
        if (strcmp(op, "$eq") == 0) {
            if (usable(&arg)) {
                s.kind = SBL_ID_POINTS;
                add_point(&s, &arg);
            }
        } else if (strcmp(op, "$in") == 0) {
            range_from_in(&arg, &s);
        } else if (strcmp(op, "$gt") == 0 || strcmp(op, "$gte") == 0 ||
                   strcmp(op, "$lt") == 0 || strcmp(op, "$lte") == 0) {
            range_from_cmp(op, &arg, &s);
        }
        /* any other operator is one more conjunct: ignoring it only loosens */
        intersect(r, &s);
    }
}

static void range_from_doc(const bson_t *filter, const char *field, sbl_id_range_t *r,
                           int depth)
{
    bson_iter_t it;

    if (depth > 20 || !bson_iter_init(&it, filter))
        return;
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        bson_value_t v;
        sbl_id_range_t s;

        sbl_iter_value(&it, &v);
        range_any(&s);
        if (strcmp(key, field) == 0) {
            range_from_id_value(&v, &s);
        } else if (strcmp(key, "$and") == 0 && v.value_type == BSON_TYPE_ARRAY) {
            bson_t arr, sub;
            bson_iter_t ai;
            if (bson_init_static(&arr, v.value.v_doc.data, v.value.v_doc.data_len) &&
                bson_iter_init(&ai, &arr)) {
                while (bson_iter_next(&ai)) {
                    bson_value_t e;
                    sbl_iter_value(&ai, &e);
                    if (e.value_type == BSON_TYPE_DOCUMENT &&
                        bson_init_static(&sub, e.value.v_doc.data, e.value.v_doc.data_len))
                        range_from_doc(&sub, field, &s, depth + 1);
                }
            }
        }
        intersect(r, &s);
    }
}

void sbl_id_range_from_filter(const bson_t *filter, sbl_id_range_t *r)
{
    sbl_field_range_from_filter(filter, "_id", false, r);
}

void sbl_field_range_from_filter(const bson_t *filter, const char *field, bool first_only,
                                 sbl_id_range_t *r)
{
    range_any(r);
    tls_first_only = first_only;
    if (filter != NULL)
        range_from_doc(filter, field, r, 0);
    tls_first_only = false;
}
