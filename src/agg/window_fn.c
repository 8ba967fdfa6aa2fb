/*
 * window_fn.c: $setWindowFields' functions over one partition (window.c
 * parses the stage and orders the documents).  For each document the window
 * is resolved to positions [lo, hi) of the partition, then accumulated:
 * afresh, or by adding the documents past the previous upper end when the
 * lower end did not move.
 *
 * What must stay true: results have mongod's types ($sum of ints stays an
 * int or a long, $avg / $stdDev* / $covariance* / $derivative / $integral /
 * $expMovingAvg give doubles, ranks ints); an empty window gives null (0 for
 * $sum and $count, [] for $push and $addToSet).
 */
#include "agg/agg_int.h"
#include "agg/window_int.h"
#include "doc/doc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- accumulating a window --------------------------------------------------------------- */

typedef struct wacc {
    int64_t isum;
    double dsum;
    bool has_double, has_long, overflow;
    int64_t count;             /* numbers added ($sum/$avg/$stdDev*), pairs (covariance) */
    int64_t ndocs;             /* documents in the window */
    double mean, m2;           /* Welford */
    double mx, my, cxy;        /* covariance */
    bson_value_t val;          /* $min/$max */
    bool seen;
    bson_t arr;                /* $push/$addToSet */
    uint32_t narr;
    sbl_keyset_t set;          /* $addToSet */
    double *samples;           /* $percentile / $median: the window's numbers, */
    size_t nsamples, capsamples, nsorted; /* the first nsorted in order */
    size_t bytes;
} wacc_t;

static void acc_reset(wacc_t *a)
{
    if (a->seen)
        bson_value_destroy(&a->val);
    bson_destroy(&a->arr);
    sbl_keyset_free(&a->set);
    free(a->samples);
    memset(a, 0, sizeof(*a));
    bson_init(&a->arr);
}

static bool is_num(const bson_value_t *v)
{
    return v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64 ||
           v->value_type == BSON_TYPE_DOUBLE || v->value_type == BSON_TYPE_DECIMAL128;
}

static void acc_add(const wout_t *o, wacc_t *a, const bson_value_t *v, const bson_value_t *y,
                    const sbl_collation_t *coll)
{
    char kb[16];
    a->ndocs++;
    switch (o->fn) {
    case W_SUM:
    case W_AVG:
        if (v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64) {
            int64_t x = v->value_type == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
            a->has_long |= v->value_type == BSON_TYPE_INT64;
            if (__builtin_add_overflow(a->isum, x, &a->isum)) {
                a->overflow = true;
                a->isum -= x; /* keep the int part; the rest goes to the double sum */
                a->dsum += (double)x;
            }
            a->count++;
        } else if (is_num(v)) {
            a->has_double = true;
            a->dsum += sbl_number_double(v);
            a->count++;
        }
        break;
    case W_STDPOP:
    case W_STDSAMP:
        if (is_num(v)) {
            double x = sbl_number_double(v), d = x - a->mean;
            a->count++;
            a->mean += d / (double)a->count;
            a->m2 += d * (x - a->mean);
        }
        break;
    case W_COVPOP:
    case W_COVSAMP:
        if (is_num(v) && y != NULL && is_num(y)) {
            double x = sbl_number_double(v), yy = sbl_number_double(y);
            a->count++;
            double dx = x - a->mx;
            a->mx += dx / (double)a->count;
            a->my += (yy - a->my) / (double)a->count;
            a->cxy += dx * (yy - a->my);
        }
        break;
    case W_MIN:
    case W_MAX:
        if (v->value_type == BSON_TYPE_EOD || v->value_type == BSON_TYPE_NULL ||
            v->value_type == BSON_TYPE_UNDEFINED)
            break;
        if (!a->seen || (o->fn == W_MIN ? sbl_value_compare_coll(v, &a->val, coll) < 0
                                        : sbl_value_compare_coll(v, &a->val, coll) > 0)) {
            if (a->seen)
                bson_value_destroy(&a->val);
            bson_value_copy(v, &a->val);
            a->seen = true;
        }
        break;
    case W_PUSH:
    case W_ADDTOSET:
        if (v->value_type == BSON_TYPE_EOD)
            break;
        if (o->fn == W_ADDTOSET && !sbl_keyset_add(&a->set, v, coll))
            break;
        sbl_append_value(&a->arr, sbl_array_key(a->narr++, kb), -1, v);
        break;
    case W_PERCENTILE:
    case W_MEDIAN: {
        double x;
        if (!sbl_pct_number(v, &x))
            break;
        if (a->nsamples == a->capsamples) {
            a->capsamples = a->capsamples ? a->capsamples * 2 : 16;
            a->samples = realloc(a->samples, a->capsamples * sizeof(*a->samples));
            if (a->samples == NULL)
                abort();
        }
        a->samples[a->nsamples++] = x;
        break;
    }
    default:
        break;
    }
}

/* The result of the window accumulated in a (whose samples it sorts). */
static void acc_result(const wout_t *o, wacc_t *a, bson_value_t *out)
{
    out->value_type = BSON_TYPE_NULL;
    switch (o->fn) {
    case W_SUM:
        if (a->has_double || a->overflow) {
            out->value_type = BSON_TYPE_DOUBLE;
            out->value.v_double = a->dsum + (double)a->isum;
        } else if (a->has_long || a->isum > INT32_MAX || a->isum < INT32_MIN) {
            out->value_type = BSON_TYPE_INT64;
            out->value.v_int64 = a->isum;
        } else {
            out->value_type = BSON_TYPE_INT32;
            out->value.v_int32 = (int32_t)a->isum;
        }
        break;
    case W_AVG:
        if (a->count > 0) {
            out->value_type = BSON_TYPE_DOUBLE;
            out->value.v_double = (a->dsum + (double)a->isum) / (double)a->count;
        }
        break;
    case W_COUNT:
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = (int32_t)a->ndocs;
        break;
    case W_STDPOP:
    case W_STDSAMP: {
        int64_t d = o->fn == W_STDPOP ? a->count : a->count - 1;
        if (a->count > 0 && d > 0) {
            out->value_type = BSON_TYPE_DOUBLE;
            out->value.v_double = sqrt(a->m2 / (double)d);
        }
        break;
    }
    case W_COVPOP:
    case W_COVSAMP: {
        int64_t d = o->fn == W_COVPOP ? a->count : a->count - 1;
        if (a->count > 0 && d > 0) {
            out->value_type = BSON_TYPE_DOUBLE;
            out->value.v_double = a->cxy / (double)d;
        }
        break;
    }
    case W_MIN:
    case W_MAX:
        if (a->seen)
            bson_value_copy(&a->val, out);
        break;
    case W_PUSH:
    case W_ADDTOSET: {
        bson_value_t av = {.value_type = BSON_TYPE_ARRAY};
        av.value.v_doc.data = (uint8_t *)bson_get_data(&a->arr);
        av.value.v_doc.data_len = a->arr.len;
        bson_value_copy(&av, out);
        break;
    }
    case W_PERCENTILE:
    case W_MEDIAN:
        if (a->nsorted != a->nsamples) /* sorted again only when the window grew */
            sbl_pct_sort(a->samples, a->nsamples);
        a->nsorted = a->nsamples;
        sbl_pct_result(&o->pct, a->samples, a->nsamples, out);
        break;
    default:
        break;
    }
}

/* ---- resolving windows ------------------------------------------------------------------ */

/* A sortBy value as a number on the window's axis: ms for a date (with a
 * unit), the number itself otherwise; false when it is neither. */
static bool axis_value(const bson_value_t *v, bool dates, double *out)
{
    if (dates) {
        if (v->value_type != BSON_TYPE_DATE_TIME)
            return false;
        *out = (double)v->value.v_datetime;
        return true;
    }
    if (!is_num(v))
        return false;
    *out = sbl_number_double(v);
    return true;
}

double sbl_window_add_months(double ms, double n)
{
    if (!(fabs(n) < 12.0 * 1000000) || !(fabs(ms) < 1e17)) /* past any date: no calendar */
        return ms + n * 2629746000.0;
    int64_t t = (int64_t)floor(ms / 1000.0);
    double frac = ms - (double)t * 1000.0;
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    int64_t months = (int64_t)tm.tm_year * 12 + tm.tm_mon + (int64_t)n;
    int year = (int)(months >= 0 ? months / 12 : (months - 11) / 12);
    int mon = (int)(months - (int64_t)year * 12);
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int y = year + 1900;
    int last = mdays[mon] + (mon == 1 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0));
    tm.tm_year = year;
    tm.tm_mon = mon;
    if (tm.tm_mday > last)
        tm.tm_mday = last;
    return (double)timegm(&tm) * 1000.0 + frac;
}

static double range_edge(const wout_t *o, double x, const wbound_t *b)
{
    double n = b->kind == WB_NUMBER ? b->num : 0;
    if (o->unit_months != 0)
        return sbl_window_add_months(x, n * o->unit_months);
    return x + n * (double)(o->has_unit ? o->unit_ms : 1);
}

/* The positions [*lop, *hip) of document i's window. */
static void window_of(const wout_t *o, const double *ax, size_t n, size_t i, size_t *lop,
                      size_t *hip)
{
    if (!o->has_window) {
        *lop = 0;
        *hip = n;
        return;
    }
    if (!o->range) {
        int64_t lo = o->lo.kind == WB_UNBOUNDED ? 0
                     : (int64_t)i + (o->lo.kind == WB_CURRENT ? 0 : (int64_t)o->lo.num);
        int64_t hi = o->hi.kind == WB_UNBOUNDED ? (int64_t)n
                     : (int64_t)i + 1 + (o->hi.kind == WB_CURRENT ? 0 : (int64_t)o->hi.num);
        lo = lo < 0 ? 0 : lo > (int64_t)n ? (int64_t)n : lo;
        hi = hi < lo ? lo : hi > (int64_t)n ? (int64_t)n : hi;
        *lop = (size_t)lo;
        *hip = (size_t)hi;
        return;
    }
    size_t lo = 0, hi = n;
    if (o->lo.kind != WB_UNBOUNDED) { /* the first position at or past the lower edge */
        double edge = range_edge(o, ax[i], &o->lo);
        size_t a = 0, b = n;
        while (a < b) {
            size_t m = (a + b) / 2;
            if (ax[m] < edge)
                a = m + 1;
            else
                b = m;
        }
        lo = a;
    }
    if (o->hi.kind != WB_UNBOUNDED) { /* the first position past the upper edge */
        double edge = range_edge(o, ax[i], &o->hi);
        size_t a = 0, b = n;
        while (a < b) {
            size_t m = (a + b) / 2;
            if (ax[m] <= edge)
                a = m + 1;
            else
                b = m;
        }
        hi = a;
    }
    *lop = lo;
    *hip = hi < lo ? lo : hi;
}

/* ---- the partition-ordered functions ------------------------------------------------------ */

static void set_int(bson_value_t *v, int64_t x)
{
    if (x <= INT32_MAX) {
        v->value_type = BSON_TYPE_INT32;
        v->value.v_int32 = (int32_t)x;
    } else {
        v->value_type = BSON_TYPE_INT64;
        v->value.v_int64 = x;
    }
}

static void set_double(bson_value_t *v, double x)
{
    v->value_type = BSON_TYPE_DOUBLE;
    v->value.v_double = x;
}

/* $linearFill: a null or missing value between two numbers gets the point on
 * the line through them (the sortBy values as x). */
static int linear_fill(const wout_t *o, const wpart_t *p, const bson_value_t *in,
                       const double *ax, bson_value_t *out, sbl_err_t *err)
{
    size_t prev = SIZE_MAX;
    for (size_t i = 0; i < p->n; i++) {
        if (i > 0 && ax[i] == ax[i - 1])
            return sbl_err_set(err, 6050106, "There can be no repeated values in the sort "
                                             "field");
        bool hole = in[i].value_type == BSON_TYPE_EOD || in[i].value_type == BSON_TYPE_NULL;
        if (!hole && !is_num(&in[i]))
            return sbl_err_set(err, 6050103, "Values to be filled must be numeric or null");
        if (!hole) {
            bson_value_copy(&in[i], &out[i]);
            if (prev != SIZE_MAX && prev + 1 < i) {
                double y0 = sbl_number_double(&in[prev]), y1 = sbl_number_double(&in[i]);
                for (size_t j = prev + 1; j < i; j++)
                    set_double(&out[j], y0 + (ax[j] - ax[prev]) * (y1 - y0) /
                                                 (ax[i] - ax[prev]));
            }
            prev = i;
        }
    }
    for (size_t i = 0; i < p->n; i++) /* no value on one side: null */
        if (out[i].value_type == BSON_TYPE_EOD)
            out[i].value_type = BSON_TYPE_NULL;
    (void)o;
    return 0;
}

/* The documents' sortBy values on the window axis; 5429513 when one is not a
 * number (a date with a unit). */
static int axis_of(const wout_t *o, const wpart_t *p, bool dates, double *ax, sbl_err_t *err)
{
    for (size_t i = 0; i < p->n; i++)
        if (!axis_value(&p->sv[i], dates, &ax[i]))
            return sbl_err_set(err, 5429513, "Invalid range: Expected the sortBy field to be a "
                                             "%s, but it was %s",
                               dates ? "date, since 'unit' was specified" : "number",
                               sbl_type_name(p->sv[i].value_type));
    (void)o;
    return 0;
}

static void derivative(const wout_t *o, const double *ax, const bson_value_t *in, size_t lo,
                       size_t hi, bson_value_t *out)
{
    out->value_type = BSON_TYPE_NULL;
    if (hi - lo < 2 || !is_num(&in[lo]) || !is_num(&in[hi - 1]))
        return;
    double dx = ax[hi - 1] - ax[lo];
    if (dx == 0)
        return;
    if (o->fn_unit_ms > 0)
        dx /= (double)o->fn_unit_ms;
    set_double(out, (sbl_number_double(&in[hi - 1]) - sbl_number_double(&in[lo])) / dx);
}

static void integral(const wout_t *o, const double *ax, const bson_value_t *in, size_t lo,
                     size_t hi, bson_value_t *out)
{
    double sum = 0;
    size_t prev = SIZE_MAX, n = 0;
    for (size_t j = lo; j < hi; j++) {
        if (!is_num(&in[j]))
            continue;
        if (prev != SIZE_MAX) {
            double dx = ax[j] - ax[prev];
            if (o->fn_unit_ms > 0)
                dx /= (double)o->fn_unit_ms;
            sum += dx * (sbl_number_double(&in[prev]) + sbl_number_double(&in[j])) / 2.0;
        }
        prev = j;
        n++;
    }
    if (n == 0)
        out->value_type = BSON_TYPE_NULL;
    else
        set_double(out, sum);
}

int sbl_window_compute(const sbl_agg_env_t *env, const wout_t *o, const wpart_t *p,
                       bson_value_t *out, size_t *bytesp, sbl_err_t *err)
{
    size_t n = p->n;
    int rc = 0;
    bson_value_t *in = calloc(n + 1, sizeof(*in)), *in2 = NULL;
    double *ax = NULL;
    for (size_t i = 0; rc == 0 && o->e != NULL && i < n; i++)
        rc = sbl_agg_eval(env, o->e, p->docs[i], &in[i], err);
    if (o->e2 != NULL) {
        in2 = calloc(n + 1, sizeof(*in2));
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = sbl_agg_eval(env, o->e2, p->docs[i], &in2[i], err);
    }
    for (size_t i = 0; i < n; i++)
        *bytesp += in[i].value_type == BSON_TYPE_EOD ? 8 : 32 +
                   (in[i].value_type == BSON_TYPE_UTF8 ? in[i].value.v_utf8.len : 0);
    bool needs_axis = o->range || o->fn == W_DERIV || o->fn == W_INTEGRAL ||
                      o->fn == W_LINFILL;
    if (rc == 0 && needs_axis) {
        ax = calloc(n + 1, sizeof(*ax));
        bool dates = o->has_unit ||
                     ((o->fn == W_DERIV || o->fn == W_INTEGRAL) && o->fn_unit_ms > 0);
        if (o->fn == W_LINFILL)
            dates = n > 0 && p->sv[0].value_type == BSON_TYPE_DATE_TIME;
        rc = axis_of(o, p, dates, ax, err);
        if (rc != 0 && (o->fn == W_DERIV || o->fn == W_INTEGRAL) && !o->range)
            rc = sbl_err_set(err, dates ? 5624900 : 5624901,
                        dates ? "%s with 'unit' expects the sortBy field to be a Date"
                              : "%s where the sortBy is a Date requires an 'unit'",
                        o->fn == W_DERIV ? "$derivative" : "$integral");
    }
    switch (rc != 0 ? -1 : (int)o->fn) {
    case -1:
        break;
    case W_RANK:
    case W_DENSE:
    case W_DOCNUM: {
        int64_t rank = 0, dense = 0;
        for (size_t i = 0; i < n; i++) {
            if (i == 0 || !p->tie[i]) {
                rank = (int64_t)i + 1;
                dense++;
            }
            set_int(&out[i], o->fn == W_RANK ? rank : o->fn == W_DENSE ? dense : (int64_t)i + 1);
        }
        break;
    }
    case W_SHIFT:
        for (size_t i = 0; i < n; i++) {
            int64_t j = (int64_t)i + o->shift_by;
            if (j < 0 || j >= (int64_t)n)
                bson_value_copy(&o->dflt, &out[i]);
            else if (in[j].value_type == BSON_TYPE_EOD)
                out[i].value_type = BSON_TYPE_NULL;
            else
                bson_value_copy(&in[j], &out[i]);
        }
        break;
    case W_EMA: {
        bool init = false;
        double cur = 0;
        for (size_t i = 0; i < n; i++) {
            if (!is_num(&in[i])) {
                out[i].value_type = BSON_TYPE_NULL;
                continue;
            }
            double x = sbl_number_double(&in[i]);
            cur = init ? x * o->alpha + cur * (1 - o->alpha) : x;
            init = true;
            set_double(&out[i], cur);
        }
        break;
    }
    case W_LOCF: {
        size_t last = SIZE_MAX;
        for (size_t i = 0; i < n; i++) {
            if (in[i].value_type != BSON_TYPE_EOD && in[i].value_type != BSON_TYPE_NULL)
                last = i;
            if (last != SIZE_MAX)
                bson_value_copy(&in[last], &out[i]);
            else
                out[i].value_type = BSON_TYPE_NULL;
        }
        break;
    }
    case W_LINFILL:
        rc = linear_fill(o, p, in, ax, out, err);
        break;
    default: {
        wacc_t a;
        memset(&a, 0, sizeof(a));
        bson_init(&a.arr);
        size_t plo = SIZE_MAX, phi = 0;
        for (size_t i = 0; i < n; i++) {
            size_t lo, hi;
            window_of(o, ax, n, i, &lo, &hi);
            if (o->fn == W_FIRST || o->fn == W_LAST) {
                size_t at = o->fn == W_FIRST ? lo : hi - 1;
                if (lo >= hi || in[at].value_type == BSON_TYPE_EOD)
                    out[i].value_type = BSON_TYPE_NULL;
                else
                    bson_value_copy(&in[at], &out[i]);
                continue;
            }
            if (o->fn == W_DERIV) {
                derivative(o, ax, in, lo, hi, &out[i]);
                continue;
            }
            if (o->fn == W_INTEGRAL) {
                integral(o, ax, in, lo, hi, &out[i]);
                continue;
            }
            if (lo != plo || hi < phi) { /* not an extension of the last window */
                acc_reset(&a);
                phi = lo;
            }
            for (size_t j = phi; j < hi; j++)
                acc_add(o, &a, &in[j], in2 != NULL ? &in2[j] : NULL, env->coll);
            plo = lo;
            phi = hi > phi ? hi : phi;
            acc_result(o, &a, &out[i]);
            if (out[i].value_type == BSON_TYPE_ARRAY) {
                *bytesp += out[i].value.v_doc.data_len;
                size_t limit = sbl_mem_limit(SBL_LIM_WINDOW);
                if (*bytesp > limit && !sbl_mem_disk_ok(env->allow_disk)) {
                    rc = sbl_err_set(err, 5643011, "Exceeded max memory. Set 'allowDiskUse: "
                                                   "true' to spill to disk");
                    break;
                }
            }
        }
        acc_reset(&a);
        bson_destroy(&a.arr);
        break;
    }
    }
    for (size_t i = 0; i < n; i++) {
        bson_value_destroy(&in[i]);
        if (in2 != NULL)
            bson_value_destroy(&in2[i]);
    }
    free(in);
    free(in2);
    free(ax);
    return rc;
}
