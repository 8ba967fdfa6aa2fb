/*
 * densify.c: $densify (documents added where a numeric or date field skips
 * values of a step's grid) and $fill (null and missing fields filled, by
 * rewriting into $setWindowFields with $locf / $linearFill and $addFields
 * with $ifNull, as mongod does).
 *
 * $densify: the input is sorted by the partition fields and the field (by the
 * field alone with bounds "full"), then each partition gets the grid values
 * it lacks: from the range's lower bound (exclusive upper bound), from the
 * smallest value of all documents to the largest ("full") or from its own
 * smallest to its largest ("partition"), stepping from the first value (so
 * calendar units step from the previous value, as $dateAdd does).  A document
 * whose field is null or missing passes unchanged.
 *
 * What must stay true: generated documents hold only the partition fields and
 * the field; at most internalQueryMaxAllowedDensifyDocs documents are made
 * (5897900); the partitions' values held are bound by
 * internalDocumentSourceDensifyMaxMemoryBytes unless the disk may be used.
 */
#include "agg/agg.h"
#include "agg/window_int.h"
#include "doc/doc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DENSIFY_DOCS 500000

/* ---- $densify ------------------------------------------------------------------------------ */

typedef enum { DB_EXPLICIT, DB_FULL, DB_PARTITION } dbounds_t;

typedef struct densify {
    const char *field;
    const char **parts; /* partitionByFields */
    size_t nparts;
    bson_value_t step;
    bool has_unit;
    int64_t unit_ms;
    int unit_months;
    dbounds_t bounds;
    bson_value_t lo, hi; /* DB_EXPLICIT */
} densify_t;

static bool is_num(const bson_value_t *v)
{
    return v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64 ||
           v->value_type == BSON_TYPE_DOUBLE || v->value_type == BSON_TYPE_DECIMAL128;
}

static int parse_range(const bson_iter_t *it, densify_t *d, sbl_err_t *err)
{
    bson_iter_t f;
    bool has_step = false, has_bounds = false;
    bson_iter_t bounds;
    const char *unit = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field '$densify.range' is the wrong "
                                                    "type '%s', expected type 'object'",
                           sbl_type_name(bson_iter_type(it)));
    bson_iter_recurse(it, &f);
    while (bson_iter_next(&f)) {
        const char *k = bson_iter_key(&f);
        if (strcmp(k, "step") == 0) {
            sbl_iter_value(&f, &d->step);
            has_step = true;
        } else if (strcmp(k, "unit") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&f))
                return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field '$densify.range.unit' "
                                                            "is the wrong type '%s', expected "
                                                            "type 'string'",
                                   sbl_type_name(bson_iter_type(&f)));
            unit = bson_iter_utf8(&f, NULL);
        } else if (strcmp(k, "bounds") == 0) {
            bounds = f;
            has_bounds = true;
        } else {
            return sbl_err_set(err, 40415, "BSON field '$densify.range.%s' is an unknown field.",
                               k);
        }
    }
    if (!has_step || !has_bounds)
        return sbl_err_set(err, 40414, "BSON field '$densify.range.%s' is missing but a required "
                                       "field",
                           has_step ? "bounds" : "step");
    if (!is_num(&d->step) || !(sbl_number_double(&d->step) > 0))
        return sbl_err_set(err, 5733401, "The step parameter in a range statement must be a "
                                         "strictly positive numeric value");
    if (unit != NULL) {
        double s = sbl_number_double(&d->step);
        if (s != floor(s) || s > 9007199254740992.0)
            return sbl_err_set(err, 6586400, "The step parameter in a range statement must be a "
                                             "whole number when densifying a date range");
        if (sbl_window_unit_ms(unit, &d->unit_ms, &d->unit_months) != 0)
            return sbl_err_set(err, SBL_E_FailedToParse, "unknown time unit value: %s", unit);
        d->has_unit = true;
    }
    if (BSON_ITER_HOLDS_UTF8(&bounds)) {
        const char *s = bson_iter_utf8(&bounds, NULL);
        if (strcmp(s, "full") == 0)
            d->bounds = DB_FULL;
        else if (strcmp(s, "partition") == 0)
            d->bounds = DB_PARTITION;
        else
            return sbl_err_set(err, 5946802, "Bounds string must either be 'full' or "
                                             "'partition'");
        return 0;
    }
    bson_t a;
    bson_iter_t ai;
    if (!BSON_ITER_HOLDS_ARRAY(&bounds))
        return sbl_err_set(err, 5733404, "The bounds in a range statement must be the string "
                                         "'full', 'partition', or an ascending array of two "
                                         "numbers or two dates");
    sbl_iter_array(&bounds, &a);
    if (bson_count_keys(&a) != 2)
        return sbl_err_set(err, 5733403, "A bounding array in a range statement must have "
                                         "exactly two elements");
    bson_iter_init(&ai, &a);
    bson_iter_next(&ai);
    sbl_iter_value(&ai, &d->lo);
    bson_iter_next(&ai);
    sbl_iter_value(&ai, &d->hi);
    d->bounds = DB_EXPLICIT;
    if (sbl_value_compare(&d->lo, &d->hi) > 0)
        return sbl_err_set(err, 5733402, "A bounding array must be an ascending array of either "
                                         "two dates or two numbers");
    if (is_num(&d->lo)) {
        if (d->has_unit)
            return sbl_err_set(err, 5733409, "Numeric bounds may not have unit parameter");
        if (!is_num(&d->hi))
            return sbl_err_set(err, 5733406, "A bounding array must contain either both dates "
                                             "or both numeric types");
        if (d->lo.value_type != d->hi.value_type || d->lo.value_type != d->step.value_type)
            return sbl_err_set(err, 5876900, "Upper bound, lower bound, and step must all have "
                                             "the same type");
        return 0;
    }
    if (d->lo.value_type == BSON_TYPE_DATE_TIME) {
        if (d->hi.value_type != BSON_TYPE_DATE_TIME)
            return sbl_err_set(err, 5733405, "A bounding array must contain either both dates "
                                             "or both numeric types");
        if (!d->has_unit)
            return sbl_err_set(err, 5733410, "A bounding array of dates must specify a unit");
        return 0;
    }
    return sbl_err_set(err, 5946800, "Explicit bounds must be numeric or dates");
}

static int check_path(const char *p, sbl_err_t *err)
{
    if (p[0] == '$')
        return sbl_err_set(err, 16410, "FieldPath field names may not start with '$'. Consider "
                                       "using $getField or $setField.");
    if (p[0] == '\0' || p[0] == '.' || p[strlen(p) - 1] == '.' || strstr(p, "..") != NULL)
        return sbl_err_set(err, 15998, "FieldPath field names may not be empty strings.");
    return 0;
}

static int parse_densify(const bson_t *spec, densify_t *d, sbl_err_t *err)
{
    bson_iter_t it;
    bool has_range = false;
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "field") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field '$densify.field' is the "
                                                            "wrong type '%s', expected type "
                                                            "'string'",
                                   sbl_type_name(bson_iter_type(&it)));
            d->field = bson_iter_utf8(&it, NULL);
            SBL_RET(check_path(d->field, err));
        } else if (strcmp(k, "partitionByFields") == 0) {
            bson_iter_t el;
            if (!BSON_ITER_HOLDS_ARRAY(&it))
                return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field "
                                   "'$densify.partitionByFields' is the wrong type '%s', "
                                   "expected type 'array'",
                                   sbl_type_name(bson_iter_type(&it)));
            bson_iter_recurse(&it, &el);
            while (bson_iter_next(&el)) {
                if (!BSON_ITER_HOLDS_UTF8(&el))
                    return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field "
                                       "'$densify.partitionByFields.%s' is the wrong type '%s', "
                                       "expected type 'string'",
                                       bson_iter_key(&el), sbl_type_name(bson_iter_type(&el)));
                d->parts = realloc(d->parts, (d->nparts + 1) * sizeof(*d->parts));
                d->parts[d->nparts++] = bson_iter_utf8(&el, NULL);
                SBL_RET(check_path(d->parts[d->nparts - 1], err));
            }
        } else if (strcmp(k, "range") == 0) {
            SBL_RET(parse_range(&it, d, err));
            has_range = true;
        } else {
            return sbl_err_set(err, 40415, "BSON field '$densify.%s' is an unknown field.", k);
        }
    }
    if (d->field == NULL || !has_range)
        return sbl_err_set(err, 40414, "BSON field '$densify.%s' is missing but a required field",
                           d->field == NULL ? "field" : "range");
    for (size_t i = 0; i < d->nparts; i++) {
        size_t n = strlen(d->parts[i]);
        if (strcmp(d->parts[i], d->field) == 0 ||
            (strncmp(d->parts[i], d->field, n) == 0 && d->field[n] == '.') ||
            (strncmp(d->parts[i], d->field, strlen(d->field)) == 0 &&
             d->parts[i][strlen(d->field)] == '.'))
            return sbl_err_set(err, 8993000, "$densify field %s may not be a partition field or "
                                             "a prefix of one: %s",
                               d->field, d->parts[i]);
    }
    if (d->bounds == DB_PARTITION && d->nparts == 0)
        return sbl_err_set(err, 5733408, "One cannot specify the bounds as 'partition' without "
                                         "specifying a non-empty array of partitionByFields. You "
                                         "may have meant to specify 'full' bounds.");
    return 0;
}

/* The field's value as a number on the grid's axis; 5733201 for a value that
 * is neither a number nor a date, or the other kind than the range's. */
static int axis(const densify_t *d, const bson_value_t *v, double *out, sbl_err_t *err)
{
    bool date = v->value_type == BSON_TYPE_DATE_TIME;
    if ((!date && !is_num(v)) || date != d->has_unit)
        return sbl_err_set(err, 5733201, "Densify field type must be numeric or a date%s",
                           date ? " (a date needs a range with a unit)"
                                : is_num(v) ? " (a number needs a range without a unit)" : "");
    *out = date ? (double)v->value.v_datetime : sbl_number_double(v);
    return 0;
}

/* The grid value after v (same type rules as $add: int32 grows to long, a double
 * step makes doubles). */
static void step_value(const densify_t *d, const bson_value_t *v, bson_value_t *out)
{
    if (v->value_type == BSON_TYPE_DATE_TIME) {
        int64_t n = (int64_t)sbl_number_double(&d->step), delta; /* |step| < 2^53: parsed so */
        out->value_type = BSON_TYPE_DATE_TIME;
        if (d->unit_months == 0) {
            if (__builtin_mul_overflow(n, d->unit_ms, &delta) ||
                __builtin_add_overflow(v->value.v_datetime, delta, &out->value.v_datetime))
                out->value.v_datetime = INT64_MAX; /* past every bound: the grid ends */
            return;
        }
        out->value.v_datetime = (int64_t)sbl_window_add_months(
            (double)v->value.v_datetime, (double)(n * d->unit_months));
        return;
    }
    bson_type_t a = v->value_type, b = d->step.value_type;
    if (a == BSON_TYPE_DOUBLE || b == BSON_TYPE_DOUBLE || a == BSON_TYPE_DECIMAL128 ||
        b == BSON_TYPE_DECIMAL128) {
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = sbl_number_double(v) + sbl_number_double(&d->step);
        return;
    }
    int64_t x = a == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
    int64_t s = b == BSON_TYPE_INT32 ? d->step.value.v_int32 : d->step.value.v_int64;
    int64_t r;
    if (__builtin_add_overflow(x, s, &r)) { /* past a long: a double, as $add */
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = (double)x + (double)s;
        return;
    }
    if (a == BSON_TYPE_INT32 && b == BSON_TYPE_INT32 && r >= INT32_MIN && r <= INT32_MAX) {
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = (int32_t)r;
    } else {
        out->value_type = BSON_TYPE_INT64;
        out->value.v_int64 = r;
    }
}

/* A partition: its include document (the partition fields) and its documents. */
typedef struct dpart {
    bson_t *key;      /* {partition fields} (missing ones left out); a pointer: a bson_t
                         in a heap array would want 128-byte alignment */
    size_t first, n;  /* its documents: positions in the sorted input */
} dpart_t;

typedef struct dout {
    bson_t *doc;
    double x;    /* axis value (nullish documents: -inf) */
    size_t seq;
    bool made;   /* generated here (else an input document) */
} dout_t;

static int cmp_dout(const void *a, const void *b)
{
    const dout_t *x = a, *y = b;
    if (x->x != y->x)
        return x->x < y->x ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void push_out(dout_t **o, size_t *n, size_t *cap, bson_t *doc, double x, bool made)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *o = realloc(*o, *cap * sizeof(**o));
        if (*o == NULL)
            abort();
    }
    (*o)[*n] = (dout_t){doc, x, *n, made};
    (*n)++;
}

/* Generate the grid values from start while below end (or up to it when
 * inclusive) that are not among xs[0..nx) (the partition's sorted values). */
static int generate(const densify_t *d, const bson_t *key, const bson_value_t *start,
                    double end, bool inclusive, const double *xs, size_t nx, dout_t **o,
                    size_t *no, size_t *cap, size_t *made, sbl_err_t *err)
{
    bson_value_t g = *start, next;
    size_t j = 0;
    for (;;) {
        double x = g.value_type == BSON_TYPE_DATE_TIME ? (double)g.value.v_datetime
                                                       : sbl_number_double(&g);
        if (x > end || (x == end && !inclusive))
            break;
        while (j < nx && xs[j] < x)
            j++;
        if (j >= nx || xs[j] != x) {
            if (++*made > MAX_DENSIFY_DOCS)
                return sbl_err_set(err, 5897900, "Generated %zu documents in $densify, which is "
                                                 "over the limit of %d. Increase the "
                                                 "'internalQueryMaxAllowedDensifyDocs' parameter "
                                                 "to allow more generated documents",
                                   *made, MAX_DENSIFY_DOCS);
            bson_t *doc = bson_new();
            sbl_agg_set_path(key, d->field, &g, doc);
            push_out(o, no, cap, doc, x, true);
        }
        step_value(d, &g, &next);
        double nx2 = next.value_type == BSON_TYPE_DATE_TIME ? (double)next.value.v_datetime
                                                             : sbl_number_double(&next);
        if (!(nx2 > x)) /* a step too small to move the value: the grid ends */
            break;
        g = next;
    }
    return 0;
}

int sbl_agg_densify(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it, sbl_err_t *err)
{
    densify_t d = {0};
    bson_t spec;
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return sbl_err_set(err, SBL_E_FailedToParse, "The $densify stage specification must be "
                                                     "an object, found %s",
                           sbl_type_name(bson_iter_type(it)));
    sbl_iter_doc(it, &spec);
    int rc = parse_densify(&spec, &d, err);
    if (rc == 0) { /* sorted by the partition fields (not for "full") and the field */
        bson_t sort = BSON_INITIALIZER;
        for (size_t i = 0; d.bounds != DB_FULL && i < d.nparts; i++)
            BSON_APPEND_INT32(&sort, d.parts[i], 1);
        BSON_APPEND_INT32(&sort, d.field, 1);
        rc = sbl_agg_sort(env, dv, &sort, 0, err);
        bson_destroy(&sort);
    }
    /* Group the documents by partition (first seen order), noting each value. */
    dpart_t *parts = NULL;
    size_t np = 0, bytes = 0, made = 0;
    double *xs = calloc(dv->n + 1, sizeof(*xs));
    bool *nullish = calloc(dv->n + 1, sizeof(*nullish));
    size_t *pidx = calloc(dv->n + 1, sizeof(*pidx));
    bool any = false;
    double gmin = 0, gmax = 0;
    bson_value_t vmin = {0};
    for (size_t i = 0; rc == 0 && i < dv->n; i++) {
        bson_iter_t at;
        bson_value_t v;
        pidx[i] = SIZE_MAX;
        nullish[i] = !sbl_path_get(dv->v[i], d.field, &at) || BSON_ITER_HOLDS_NULL(&at) ||
                     BSON_ITER_HOLDS_UNDEFINED(&at);
        /* A nullish document passes unchanged: first, or where the sort by the
         * partition fields put it (its partition's run). */
        if (nullish[i] && (d.bounds == DB_FULL || d.nparts == 0))
            continue;
        if (!nullish[i]) {
            sbl_iter_value(&at, &v);
            if ((rc = axis(&d, &v, &xs[i], err)) != 0)
                break;
            if (!any || xs[i] < gmin) {
                gmin = xs[i];
                vmin = v;
            }
            if (!any || xs[i] > gmax)
                gmax = xs[i];
            any = true;
        }
        bson_t key = BSON_INITIALIZER;
        for (size_t k = 0; k < d.nparts; k++) {
            bson_value_t pv;
            if (sbl_path_get(dv->v[i], d.parts[k], &at)) {
                bson_t next = BSON_INITIALIZER;
                sbl_iter_value(&at, &pv);
                sbl_agg_set_path(&key, d.parts[k], &pv, &next);
                bson_destroy(&key);
                key = next;
            }
        }
        size_t p = np;
        for (size_t q = np; q-- > 0;) /* sorted by partition: usually the last one */
            if (parts[q].key->len == key.len &&
                memcmp(bson_get_data(parts[q].key), bson_get_data(&key), key.len) == 0) {
                p = q;
                break;
            }
        if (p == np) {
            parts = realloc(parts, (np + 1) * sizeof(*parts));
            parts[np].key = bson_copy(&key);
            parts[np].n = 0;
            parts[np].first = i;
            np++;
            bytes += key.len + 64;
        }
        parts[p].n++;
        pidx[i] = p;
        bson_destroy(&key);
        bytes += 16;
    }
    if (rc == 0 && np == 0 && d.bounds == DB_EXPLICIT && d.nparts == 0) {
        parts = calloc(1, sizeof(*parts)); /* no document: the range alone, as mongod */
        parts[0].key = bson_new();
        np = 1;
    }
    if (rc == 0 && bytes > sbl_mem_limit(SBL_LIM_DENSIFY) && !sbl_mem_disk_ok(env->allow_disk))
        rc = sbl_err_set(err, 6007200, "$densify exceeded memory limit of %zu bytes",
                         sbl_mem_limit(SBL_LIM_DENSIFY));

    /* Each partition's values in order, then its generated documents merged in. */
    dout_t *out = NULL;
    size_t no = 0, cap = 0;
    for (size_t i = 0; rc == 0 && i < dv->n; i++)
        if (pidx[i] == SIZE_MAX)
            push_out(&out, &no, &cap, dv->v[i], -INFINITY, false);
    double *px = calloc(dv->n + 1, sizeof(*px));
    for (size_t p = 0; rc == 0 && p < np; p++) {
        size_t nx = 0, from = no;
        bson_value_t first = {0};
        size_t seen = 0;
        for (size_t i = parts[p].first; i < dv->n && seen < parts[p].n; i++) {
            if (pidx[i] != p)
                continue;
            seen++;
            if (nullish[i]) {
                push_out(&out, &no, &cap, dv->v[i], -INFINITY, false);
                continue;
            }
            if (nx == 0) {
                bson_iter_t at;
                sbl_path_get(dv->v[i], d.field, &at);
                sbl_iter_value(&at, &first);
            }
            px[nx++] = xs[i];
            push_out(&out, &no, &cap, dv->v[i], xs[i], false);
        }
        if (nx == 0 && !(d.bounds == DB_EXPLICIT && d.nparts == 0)) {
            /* only nullish documents: nothing to densify (mongod's partition table
             * holds the partitions of values) */
        } else if (d.bounds == DB_EXPLICIT) {
            double hi = d.hi.value_type == BSON_TYPE_DATE_TIME ? (double)d.hi.value.v_datetime
                                                               : sbl_number_double(&d.hi);
            rc = generate(&d, parts[p].key, &d.lo, hi, false, px, nx, &out, &no, &cap, &made,
                          err);
        } else if (d.bounds == DB_FULL) {
            rc = generate(&d, parts[p].key, &vmin, gmax, true, px, nx, &out, &no, &cap, &made,
                          err);
        } else {
            rc = generate(&d, parts[p].key, &first, px[nx - 1], true, px, nx, &out, &no, &cap,
                          &made, err);
        }
        if (rc == 0 && d.bounds != DB_FULL) /* this partition's run, in value order */
            qsort(out + from, no - from, sizeof(*out), cmp_dout);
        for (size_t i = from; i < no; i++)
            out[i].seq = i;
    }
    if (rc == 0 && d.bounds == DB_FULL) /* one order by the field across partitions */
        qsort(out, no, sizeof(*out), cmp_dout);
    if (rc == 0) {
        free(dv->v);
        dv->v = malloc((no + 1) * sizeof(*dv->v));
        dv->n = dv->cap = no;
        for (size_t i = 0; i < no; i++)
            dv->v[i] = out[i].doc;
    } else { /* free what was generated; dv keeps the input */
        for (size_t i = 0; i < no; i++)
            if (out[i].made)
                bson_destroy(out[i].doc);
    }
    for (size_t p = 0; p < np; p++)
        bson_destroy(parts[p].key);
    free(parts);
    free(out);
    free(px);
    free(xs);
    free(nullish);
    free(pidx);
    free(d.parts);
    return rc;
}

/* ---- $fill --------------------------------------------------------------------------------- */

int sbl_agg_fill(sbl_agg_env_t *env, const char *ns, sbl_docvec_t *dv, const bson_iter_t *it,
                 sbl_err_t *err)
{
    bson_t spec, swf = BSON_INITIALIZER, out = BSON_INITIALIZER, add = BSON_INITIALIZER;
    bson_iter_t f, o;
    bool has_part = false, has_fields = false, has_output = false, methods = false;
    int rc = 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return sbl_err_set(err, SBL_E_FailedToParse, "The $fill stage specification must be an "
                                                     "object, found %s",
                           sbl_type_name(bson_iter_type(it)));
    sbl_iter_doc(it, &spec);
    bson_iter_init(&f, &spec);
    while (rc == 0 && bson_iter_next(&f)) {
        const char *k = bson_iter_key(&f);
        if (strcmp(k, "partitionBy") == 0) {
            has_part = true;
            sbl_append_iter(&swf, "partitionBy", -1, &f);
        } else if (strcmp(k, "partitionByFields") == 0) {
            bson_iter_t el;
            bson_t p;
            has_fields = true;
            if (!BSON_ITER_HOLDS_ARRAY(&f)) {
                rc = sbl_err_set(err, SBL_E_TypeMismatch, "BSON field '$fill.partitionByFields' "
                                 "is the wrong type '%s', expected type 'array'",
                                 sbl_type_name(bson_iter_type(&f)));
                break;
            }
            BSON_APPEND_DOCUMENT_BEGIN(&swf, "partitionBy", &p);
            bson_iter_recurse(&f, &el);
            while (bson_iter_next(&el)) {
                char path[512];
                if (!BSON_ITER_HOLDS_UTF8(&el)) {
                    rc = sbl_err_set(err, SBL_E_TypeMismatch, "BSON field "
                                     "'$fill.partitionByFields.%s' is the wrong type '%s', "
                                     "expected type 'string'",
                                     bson_iter_key(&el), sbl_type_name(bson_iter_type(&el)));
                    break;
                }
                snprintf(path, sizeof(path), "$%s", bson_iter_utf8(&el, NULL));
                BSON_APPEND_UTF8(&p, bson_iter_utf8(&el, NULL), path);
            }
            bson_append_document_end(&swf, &p);
        } else if (strcmp(k, "sortBy") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&f))
                rc = sbl_err_set(err, SBL_E_TypeMismatch, "BSON field '$fill.sortBy' is the "
                                 "wrong type '%s', expected type 'object'",
                                 sbl_type_name(bson_iter_type(&f)));
            else
                sbl_append_iter(&swf, "sortBy", -1, &f);
        } else if (strcmp(k, "output") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&f)) {
                rc = sbl_err_set(err, SBL_E_TypeMismatch, "BSON field '$fill.output' is the "
                                 "wrong type '%s', expected type 'object'",
                                 sbl_type_name(bson_iter_type(&f)));
                break;
            }
            o = f;
            has_output = true;
        } else {
            rc = sbl_err_set(err, 40415, "BSON field '$fill.%s' is an unknown field.", k);
        }
    }
    if (rc == 0 && !has_output)
        rc = sbl_err_set(err, 40414, "BSON field '$fill.output' is missing but a required field");
    if (rc == 0 && has_part && has_fields)
        rc = sbl_err_set(err, 6050204, "Maximum one of 'partitionBy' and 'partitionByFields can "
                                       "be specified in '$fill'");
    bson_iter_t fo;
    if (rc == 0) {
        bson_iter_recurse(&o, &fo);
        bson_t tmp;
        sbl_iter_doc(&o, &tmp);
        if (bson_empty(&tmp))
            rc = sbl_err_set(err, 6050203, "The output field in '$fill' must contain an object "
                                           "with at least one element");
    }
    while (rc == 0 && bson_iter_next(&fo)) {
        const char *field = bson_iter_key(&fo);
        bson_iter_t m;
        const char *method = NULL;
        bool has_value = false;
        bson_value_t value;
        char path[512];
        if (!BSON_ITER_HOLDS_DOCUMENT(&fo)) {
            rc = sbl_err_set(err, 6050200, "Each fill output specification must be an object "
                                           "with exactly one field");
            break;
        }
        bson_iter_recurse(&fo, &m);
        while (rc == 0 && bson_iter_next(&m)) {
            const char *k = bson_iter_key(&m);
            if (strcmp(k, "method") == 0 && BSON_ITER_HOLDS_UTF8(&m)) {
                method = bson_iter_utf8(&m, NULL);
            } else if (strcmp(k, "method") == 0) {
                rc = sbl_err_set(err, SBL_E_TypeMismatch, "BSON field '$fill.method' is the "
                                 "wrong type '%s', expected type 'string'",
                                 sbl_type_name(bson_iter_type(&m)));
            } else if (strcmp(k, "value") == 0) {
                sbl_iter_value(&m, &value);
                has_value = true;
            } else {
                rc = sbl_err_set(err, 40415, "BSON field '$fill.%s' is an unknown field.", k);
            }
        }
        if (rc != 0)
            break;
        snprintf(path, sizeof(path), "$%s", field);
        if (method != NULL) {
            bson_t fn;
            if (has_value) {
                rc = sbl_err_set(err, 6050201, "Each fill output specification must have exactly "
                                               "one of 'method' or 'value' fields, not both");
                break;
            }
            if (strcmp(method, "locf") != 0 && strcmp(method, "linear") != 0) {
                rc = sbl_err_set(err, 6050202, "Method must be either locf or linear");
                break;
            }
            BSON_APPEND_DOCUMENT_BEGIN(&out, field, &fn);
            BSON_APPEND_UTF8(&fn, method[1] == 'o' ? "$locf" : "$linearFill", path);
            bson_append_document_end(&out, &fn);
            methods = true;
        } else if (has_value) {
            bson_t fn, arr;
            BSON_APPEND_DOCUMENT_BEGIN(&add, field, &fn);
            BSON_APPEND_ARRAY_BEGIN(&fn, "$ifNull", &arr);
            BSON_APPEND_UTF8(&arr, "0", path);
            sbl_append_value(&arr, "1", 1, &value);
            bson_append_array_end(&fn, &arr);
            bson_append_document_end(&add, &fn);
        } else {
            rc = sbl_err_set(err, 6050201, "Each fill output specification must have exactly one "
                                           "of 'method' or 'value' fields");
        }
    }
    if (rc == 0) { /* [$setWindowFields (methods)] [$addFields (values)] */
        bson_t pipe = BSON_INITIALIZER, st;
        uint32_t n = 0;
        char kb[16];
        if (methods) {
            bson_t inner;
            BSON_APPEND_DOCUMENT(&swf, "output", &out);
            bson_append_document_begin(&pipe, sbl_array_key(n++, kb), -1, &st);
            BSON_APPEND_DOCUMENT_BEGIN(&st, "$setWindowFields", &inner);
            bson_concat(&inner, &swf);
            bson_append_document_end(&st, &inner);
            bson_append_document_end(&pipe, &st);
        }
        if (!bson_empty(&add)) {
            bson_append_document_begin(&pipe, sbl_array_key(n++, kb), -1, &st);
            BSON_APPEND_DOCUMENT(&st, "$addFields", &add);
            bson_append_document_end(&pipe, &st);
        }
        sbl_agg_env_t sub = *env;
        rc = sbl_agg_run(&sub, ns, &pipe, 0, dv, err);
        bson_destroy(&pipe);
    }
    bson_destroy(&swf);
    bson_destroy(&out);
    bson_destroy(&add);
    return rc;
}
