/*
 * bucket_auto.c: the $bucketAuto stage, with or without a granularity.
 *
 * The documents are sorted by their groupBy value (missing: null) through the
 * external sorter, so the sort spills past its limit, and cut in order into
 * buckets of round(n / buckets) documents, the last bucket taking the rest.
 * Without a granularity a bucket also takes every further document equal to
 * its last value, and its _id.max is the next bucket's min (the last one's:
 * its largest value).  With one (a preferred-number series or POWERSOF2, as
 * mongod 7.0 names and tabulates them) every value must be a non-negative
 * number; a bucket's max is its largest value rounded up in the series, it
 * takes every further document below that max, the next bucket starts at
 * that max, and the first bucket's min is its smallest value rounded down.
 * The accumulators then run as $group's over each bucket.
 *
 * What must stay true: every input document lands in exactly one bucket, and
 * the buckets come out in ascending order of their values.
 */
#include "agg/agg.h"
#include "doc/doc.h"
#include "expr/expr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- granularity: mongod's rounding series ------------------------------------------- */

/* One decade of each series, scaled to integers as mongod keeps them (its
 * R40 has no 335 and its R80 is the 40 values between R40's, as in mongod). */
static const double r5[] = {10, 16, 25, 40, 63};
static const double r10[] = {100, 125, 160, 200, 250, 315, 400, 500, 630, 800};
static const double r20[] = {100, 112, 125, 140, 160, 180, 200, 224, 250, 280,
                             315, 355, 400, 450, 500, 560, 630, 710, 800, 900};
static const double r40[] = {100, 106, 112, 118, 125, 132, 140, 150, 160, 170, 180, 190, 200,
                             212, 224, 236, 250, 265, 280, 300, 315, 355, 375, 400, 425, 450,
                             475, 500, 530, 560, 600, 630, 670, 710, 750, 800, 850, 900, 950};
static const double r80[] = {103, 109, 115, 122, 128, 136, 145, 155, 165, 175, 185, 195, 206, 218,
                             230, 243, 258, 272, 290, 307, 325, 345, 365, 387, 412, 437, 462, 487,
                             515, 545, 575, 615, 650, 690, 730, 775, 825, 875, 925, 975};
static const double s125[] = {10, 20, 50};
static const double e6[] = {10, 15, 22, 33, 47, 68};
static const double e12[] = {10, 12, 15, 18, 22, 27, 33, 39, 47, 56, 68, 82};
static const double e24[] = {10, 11, 12, 13, 15, 16, 18, 20, 22, 24, 27, 30,
                             33, 36, 39, 43, 47, 51, 56, 62, 68, 75, 82, 91};
static const double e48[] = {100, 105, 110, 115, 121, 127, 133, 140, 147, 154, 162, 169,
                             178, 187, 196, 205, 215, 226, 237, 249, 261, 274, 287, 301,
                             316, 332, 348, 365, 383, 402, 422, 442, 464, 487, 511, 536,
                             562, 590, 619, 649, 681, 715, 750, 787, 825, 866, 909, 953};
static const double e96[] = {100, 102, 105, 107, 110, 113, 115, 118, 121, 124, 127, 130,
                             133, 137, 140, 143, 147, 150, 154, 158, 162, 165, 169, 174,
                             178, 182, 187, 191, 196, 200, 205, 210, 215, 221, 226, 232,
                             237, 243, 249, 255, 261, 267, 274, 280, 287, 294, 301, 309,
                             316, 324, 332, 340, 348, 357, 365, 374, 383, 392, 402, 412,
                             422, 432, 442, 453, 464, 475, 487, 499, 511, 523, 536, 549,
                             562, 576, 590, 604, 619, 634, 649, 665, 681, 698, 715, 732,
                             750, 768, 787, 806, 825, 845, 866, 887, 909, 931, 953, 976};
static const double e192[] = {
    100, 101, 102, 104, 105, 106, 107, 109, 110, 111, 113, 114, 115, 117, 118, 120, 121, 123,
    124, 126, 127, 129, 130, 132, 133, 135, 137, 138, 140, 142, 143, 145, 147, 149, 150, 152,
    154, 156, 158, 160, 162, 164, 165, 167, 169, 172, 174, 176, 178, 180, 182, 184, 187, 189,
    191, 193, 196, 198, 200, 203, 205, 208, 210, 213, 215, 218, 221, 223, 226, 229, 232, 234,
    237, 240, 243, 246, 249, 252, 255, 258, 261, 264, 267, 271, 274, 277, 280, 284, 287, 291,
    294, 298, 301, 305, 309, 312, 316, 320, 324, 328, 332, 336, 340, 344, 348, 352, 357, 361,
    365, 370, 374, 379, 383, 388, 392, 397, 402, 407, 412, 417, 422, 427, 432, 437, 442, 448,
    453, 459, 464, 470, 475, 481, 487, 493, 499, 505, 511, 517, 523, 530, 536, 542, 549, 556,
    562, 569, 576, 583, 590, 597, 604, 612, 619, 626, 634, 642, 649, 657, 665, 673, 681, 690,
    698, 706, 715, 723, 732, 741, 750, 759, 768, 777, 787, 796, 806, 816, 825, 835, 845, 856,
    866, 876, 887, 898, 909, 920, 931, 942, 953, 965, 976, 988};

typedef struct rounder {
    const char *name;
    const double *series; /* NULL: powers of two */
    size_t n;
} rounder_t;

#define SERIES(name, s) {name, s, sizeof(s) / sizeof((s)[0])}
static const rounder_t rounders[] = {
    SERIES("1-2-5", s125), SERIES("E12", e12), SERIES("E192", e192), SERIES("E24", e24),
    SERIES("E48", e48),    SERIES("E6", e6),   SERIES("E96", e96),   {"POWERSOF2", NULL, 0},
    SERIES("R10", r10),    SERIES("R20", r20), SERIES("R40", r40),   SERIES("R5", r5),
    SERIES("R80", r80)};
#undef SERIES

static const rounder_t *find_rounder(const char *name)
{
    for (size_t i = 0; i < sizeof(rounders) / sizeof(rounders[0]); i++)
        if (strcmp(rounders[i].name, name) == 0)
            return &rounders[i];
    return NULL;
}

/* The smallest series value strictly above x (x > 0, finite), scanning the
 * decades the way mongod does so the doubles come out the same. */
static double series_up(const rounder_t *r, double x)
{
    const double lo = r->series[0], hi = r->series[r->n - 1];
    double m = 1.0;
    while (x >= hi * m)
        m *= 10.0;
    while (x < lo * m) {
        double above = lo * m;
        m /= 10.0;
        if (x >= hi * m) /* between one decade's top and the next one's bottom */
            return above;
    }
    for (size_t i = 0; i < r->n; i++)
        if (x < r->series[i] * m)
            return r->series[i] * m;
    return hi * m;
}

/* The largest series value strictly below x (x > 0, finite). */
static double series_down(const rounder_t *r, double x)
{
    const double lo = r->series[0], hi = r->series[r->n - 1];
    double m = 1.0;
    while (x <= lo * m && m > 0)
        m /= 10.0;
    if (m == 0)
        return 0;
    while (x > hi * m) {
        double below = hi * m;
        m *= 10.0;
        if (x <= lo * m)
            return below;
    }
    size_t i = 1;
    while (i < r->n && r->series[i] * m < x)
        i++;
    return r->series[i - 1] * m;
}

/* 2^e as mongod's $pow of two integers gives it: int, long, else double. */
static void pow2_value(int e, bson_value_t *out)
{
    if (e >= 0 && e < 31) {
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = (int32_t)1 << e;
    } else if (e >= 31 && e < 63) {
        out->value_type = BSON_TYPE_INT64;
        out->value.v_int64 = (int64_t)1 << e;
    } else {
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = ldexp(1.0, e);
    }
}

static int bit_length(uint64_t v)
{
    int n = 0;
    for (; v != 0; v >>= 1)
        n++;
    return n;
}

static bool is_number(bson_type_t t)
{
    return t == BSON_TYPE_INT32 || t == BSON_TYPE_INT64 || t == BSON_TYPE_DOUBLE ||
           t == BSON_TYPE_DECIMAL128;
}

/* Round v (a non-negative number, checked by the caller) up or down in r:
 * strictly above or below it; 0 and infinity stay as they are.  Series give
 * doubles (decimals for a decimal); POWERSOF2 gives what $pow(2, n) gives. */
static void round_value(const rounder_t *r, const bson_value_t *v, bool up, bson_value_t *out)
{
    double x = sbl_number_double(v);
    *out = *v;
    if (x == 0 || isinf(x))
        return;
    bool dec = v->value_type == BSON_TYPE_DECIMAL128;
    if (r->series != NULL) {
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = up ? series_up(r, x) : series_down(r, x);
    } else if (v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64) {
        uint64_t n = v->value_type == BSON_TYPE_INT32 ? (uint64_t)v->value.v_int32
                                                      : (uint64_t)v->value.v_int64;
        int bits = bit_length(n);
        bool pow2 = (n & (n - 1)) == 0;
        pow2_value(up ? bits : pow2 ? bits - 2 : bits - 1, out);
    } else {
        double l = log2(x);
        pow2_value(up ? (int)(floor(l) + 1.0) : (int)(ceil(l) - 1.0), out);
        if (dec && out->value_type != BSON_TYPE_DOUBLE) {
            double d = out->value_type == BSON_TYPE_INT32 ? out->value.v_int32
                                                          : (double)out->value.v_int64;
            out->value_type = BSON_TYPE_DOUBLE;
            out->value.v_double = d;
        }
    }
    if (dec) { /* a decimal stays a decimal */
        char s[64];
        snprintf(s, sizeof(s), "%.15g", out->value.v_double);
        out->value_type = BSON_TYPE_DECIMAL128;
        bson_decimal128_from_string(s, &out->value.v_decimal128);
    }
}

/* mongod's checks of each groupBy value when a granularity is given. */
static int check_granular(const bson_value_t *v, sbl_err_t *err)
{
    if (!is_number(v->value_type))
        return sbl_err_set(err, 40258, "$bucketAuto can specify a 'granularity' with numeric "
                                       "boundaries only, but found a value with type: %s",
                           v->value_type == BSON_TYPE_EOD ? "missing"
                                                          : sbl_type_name(v->value_type));
    double x = sbl_number_double(v);
    if (isnan(x))
        return sbl_err_set(err, 40259, "$bucketAuto can specify a 'granularity' with numeric "
                                       "boundaries only, but found a NaN");
    if (x < 0)
        return sbl_err_set(err, 40260, "$bucketAuto can specify a 'granularity' with "
                                       "non-negative numbers only, but found a negative number");
    return 0;
}

/* ---- the stage ------------------------------------------------------------------------- */

/* Sort records {v: groupBy value, d: document} by v under the collation in arg. */
static int cmp_auto(const bson_t *a, const bson_t *b, const void *arg)
{
    bson_iter_t x, y;
    bson_value_t va, vb;
    bson_iter_init_find(&x, a, "v");
    bson_iter_init_find(&y, b, "v");
    sbl_iter_value(&x, &va);
    sbl_iter_value(&y, &vb);
    return sbl_value_compare_coll(&va, &vb, arg);
}

typedef struct auto_spec {
    bson_value_t group_by;
    int32_t nb;
    bson_t output;
    bool has_output;
    const rounder_t *rounder; /* NULL: no granularity */
} auto_spec_t;

static int parse_bucket_auto(const bson_t *spec, auto_spec_t *s, sbl_err_t *err)
{
    bson_iter_t it;
    bool has_buckets = false;

    memset(s, 0, sizeof(*s));
    s->group_by.value_type = BSON_TYPE_EOD;
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "groupBy") == 0) {
            if (!(BSON_ITER_HOLDS_UTF8(&it) && bson_iter_utf8(&it, NULL)[0] == '$') &&
                !BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_err_set(err, 40239, "The $bucketAuto 'groupBy' field must be defined "
                                               "as a $-prefixed path or an expression object, "
                                               "but found: %s",
                                   sbl_type_name(bson_iter_type(&it)));
            sbl_iter_value(&it, &s->group_by);
        } else if (strcmp(k, "buckets") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it) && !BSON_ITER_HOLDS_DECIMAL128(&it))
                return sbl_err_set(err, 40241, "The $bucketAuto 'buckets' field must be a "
                                               "numeric value, but found type: %s",
                                   sbl_type_name(bson_iter_type(&it)));
            double d = BSON_ITER_HOLDS_NUMBER(&it) ? bson_iter_as_double(&it) : 0.5;
            if (d != (double)(int32_t)d || d > INT32_MAX || d < INT32_MIN)
                return sbl_err_set(err, 40242, "The $bucketAuto 'buckets' field must be "
                                               "representable as a 32-bit integer");
            if (d <= 0)
                return sbl_err_set(err, 40243, "The $bucketAuto 'buckets' field must be greater "
                                               "than 0, but found: %d",
                                   (int)d);
            s->nb = (int32_t)d;
            has_buckets = true;
        } else if (strcmp(k, "output") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_err_set(err, 40244, "The $bucketAuto 'output' field must be an "
                                               "object, but found type: %s",
                                   sbl_type_name(bson_iter_type(&it)));
            s->has_output = sbl_iter_doc(&it, &s->output);
        } else if (strcmp(k, "granularity") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_err_set(err, 40261, "The $bucketAuto 'granularity' field must be a "
                                               "string, but found type: %s",
                                   sbl_type_name(bson_iter_type(&it)));
            const char *g = bson_iter_utf8(&it, NULL);
            if ((s->rounder = find_rounder(g)) == NULL)
                return sbl_err_set(err, 40257, "Unknown rounding granularity '%s'", g);
        } else {
            return sbl_err_set(err, 40245, "Unrecognized option to $bucketAuto: %s.", k);
        }
    }
    if (s->group_by.value_type == BSON_TYPE_EOD || !has_buckets)
        return sbl_err_set(err, 40246,
                           "$bucketAuto requires 'groupBy' and 'buckets' to be specified");
    return 0;
}

/* Step 1: the {v, d} records of dv's documents sorted by v into *recsp
 * (stable: equal values keep input order). */
static int sort_records(sbl_agg_env_t *env, const sbl_docvec_t *dv, const auto_spec_t *s,
                        bson_t ***recsp, size_t *nrecp, sbl_err_t *err)
{
    sbl_expr_t *e = NULL;
    size_t bytes = 0, nrec = 0;
    bson_t **recs;

    *recsp = NULL;
    *nrecp = 0;
    SBL_RET(sbl_expr_parse(&s->group_by, &e, err));
    sbl_sorter_t *so = sbl_sorter_new(cmp_auto, env->coll, sbl_mem_limit(SBL_LIM_SORT), true);
    bool disk = sbl_mem_disk_ok(env->allow_disk);
    int rc = 0;
    for (size_t i = 0; i < dv->n && rc == 0; i++) {
        bson_value_t v;
        if ((rc = sbl_agg_eval(env, e, dv->v[i], &v, err)) != 0)
            break;
        if (s->rounder != NULL && (rc = check_granular(&v, err)) != 0) {
            bson_value_destroy(&v);
            break;
        }
        bson_t *r = bson_new();
        if (v.value_type == BSON_TYPE_EOD)
            bson_append_null(r, "v", 1);
        else
            sbl_append_value(r, "v", 1, &v);
        bson_append_document(r, "d", 1, dv->v[i]);
        bson_value_destroy(&v);
        bytes += r->len;
        if (bytes > sbl_mem_limit(SBL_LIM_SORT) && !disk) {
            bson_destroy(r);
            rc = sbl_mem_error(SBL_LIM_SORT, err);
            break;
        }
        rc = sbl_sorter_add(so, r, 0, err);
    }
    sbl_expr_free(e);
    recs = calloc(dv->n + 1, sizeof(*recs));
    while (rc == 0) {
        bson_t *r = NULL;
        if ((rc = sbl_sorter_next(so, &r, NULL, err)) != 0 || r == NULL)
            break;
        recs[nrec++] = r;
    }
    sbl_sorter_free(so);
    *recsp = recs;
    *nrecp = nrec;
    return rc;
}

static void rec_value(const bson_t *rec, bson_value_t *v)
{
    bson_iter_t it;
    bson_iter_init_find(&it, rec, "v");
    sbl_iter_value(&it, v);
}

static int cmp_values(const sbl_agg_env_t *env, const bson_value_t *a, const bson_value_t *b)
{
    return sbl_value_compare_coll(a, b, env->coll);
}

int sbl_agg_bucket_auto(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec, sbl_err_t *err)
{
    auto_spec_t s;
    bson_t **recs = NULL;
    size_t nrec = 0;

    SBL_RET(parse_bucket_auto(spec, &s, err));
    int rc = sort_records(env, dv, &s, &recs, &nrec, err);

    /* Step 2: cut the records into buckets, each document's _id {min, max}. */
    bson_value_t *ids = calloc(nrec + 1, sizeof(*ids));
    sbl_docvec_t sorted = {0};
    double approx = nrec > 0 ? (double)nrec / (double)s.nb : 0;
    size_t size = approx < 1 ? 1 : (size_t)(approx + 0.5);
    bson_value_t prev_max = {.value_type = BSON_TYPE_EOD};
    size_t i = 0;
    for (int32_t b = 0; rc == 0 && i < nrec; b++) {
        bson_value_t first, cur, next, min, max;
        size_t start = i;
        bool last = b + 1 == s.nb;
        rec_value(recs[i++], &first);
        cur = first;
        for (size_t k = 1; i < nrec && (k < size || last); k++)
            rec_value(recs[i++], &cur);
        if (s.rounder != NULL) {
            round_value(s.rounder, &cur, true, &max);
            while (i < nrec && (rec_value(recs[i], &next), cmp_values(env, &max, &next) > 0))
                i++;
            /* a bucket of zeros ends where the next value rounds down to */
            if (sbl_number_double(&max) == 0 && i < nrec) {
                rec_value(recs[i], &next);
                round_value(s.rounder, &next, false, &max);
            }
            if (prev_max.value_type != BSON_TYPE_EOD)
                min = prev_max;
            else
                round_value(s.rounder, &first, false, &min);
            prev_max = max;
        } else {
            while (i < nrec && (rec_value(recs[i], &next), cmp_values(env, &cur, &next) == 0))
                i++;
            min = first;
            max = cur;
            if (i < nrec)
                rec_value(recs[i], &max);
        }
        bson_t id = BSON_INITIALIZER;
        sbl_append_value(&id, "min", 3, &min);
        sbl_append_value(&id, "max", 3, &max);
        bson_value_t iv = {.value_type = BSON_TYPE_DOCUMENT};
        iv.value.v_doc.data = (uint8_t *)bson_get_data(&id);
        iv.value.v_doc.data_len = id.len;
        for (size_t j = start; j < i; j++) {
            bson_iter_t d;
            bson_t view;
            bson_value_copy(&iv, &ids[j]);
            bson_iter_init_find(&d, recs[j], "d");
            sbl_iter_doc(&d, &view);
            sbl_docvec_push(&sorted, bson_copy(&view));
        }
        bson_destroy(&id);
    }

    /* Step 3: $group over the buckets in order, by those _ids. */
    if (rc == 0) {
        sbl_docvec_clear(dv);
        *dv = sorted;
        bson_t count_spec = BSON_INITIALIZER;
        if (!s.has_output)
            BCON_APPEND(&count_spec, "count", "{", "$sum", BCON_INT32(1), "}");
        rc = sbl_agg_group(dv, s.has_output ? &s.output : &count_spec, env, ids, err);
        bson_destroy(&count_spec);
    } else {
        sbl_docvec_clear(&sorted);
    }
    for (size_t j = 0; j < nrec; j++) {
        if (ids[j].value_type != BSON_TYPE_EOD)
            bson_value_destroy(&ids[j]);
        bson_destroy(recs[j]);
    }
    free(ids);
    free(recs);
    return rc;
}
