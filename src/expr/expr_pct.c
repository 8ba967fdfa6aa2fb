/*
 * expr_pct.c: $percentile and $median (MongoDB 7.0), shared by the
 * expression (here), $group's accumulators (src/agg/group.c) and
 * $setWindowFields' functions (src/agg/window_fn.c): the argument
 * {input, p, method} parsed as mongod's IDL parses it, and the percentiles
 * of a set of numbers.
 *
 * What must stay true: a percentile is the discrete one mongod defines, the
 * sample of 0-based rank max(0, ceil(p * n) - 1) (n - 1 for p = 1) among the
 * sorted numeric inputs (NaN left out, infinities kept), which is what
 * 7.0's "approximate" t-digest gives while its centroids hold one sample
 * each (inputs up to its delta); Sable keeps every sample, so its answer is
 * that exact one at any size.  Results are doubles; no numeric input gives
 * null (an array of nulls for $percentile).
 */
#include "expr/expr_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E_MISSING_FIELD 40414
#define E_UNKNOWN_FIELD 40415

/* Does e fold to a constant, as mongod's optimize() folds p: no field path,
 * no variable, nothing that differs per call ($rand, $function, $meta)? */
static bool folds(const sbl_expr_t *e)
{
    if (e == NULL)
        return true;
    if (e->kind == E_FIELD || e->kind == E_VAR)
        return false;
    if (e->kind == E_OP && (e->op->eval == op_rand || e->op->eval == op_function ||
                            e->op->eval == op_meta))
        return false;
    for (size_t i = 0; i < e->n; i++)
        if (!folds(e->kids[i]))
            return false;
    return true;
}

/* p: a constant array of numbers in [0, 1] (mongod's 7750300-7750303). */
static int parse_p(const bson_value_t *spec, sbl_pct_t *pct, sbl_err_t *err)
{
    static const char msg[] =
        "The $percentile 'p' field must be an array of numbers from [0.0, 1.0], but found: ";
    sbl_expr_t *e = NULL;
    bson_value_t pv = {.value_type = BSON_TYPE_EOD};
    char *j = NULL;
    bson_t arr;
    bson_iter_t it;
    int rc = sbl_expr_parse(spec, &e, err);
    if (rc != 0)
        return rc;
    if (!folds(e)) {
        j = sbl_value_json(spec);
        rc = sbl_err_set(err, 7750300, "The $percentile 'p' field must be an array of constant "
                                       "values, but found value: %s.", j);
        goto done;
    }
    sbl_expr_env_t env = {0};
    if ((rc = sbl_expr_eval(e, &env, &pv, err)) != 0)
        goto done;
    if (pv.value_type != BSON_TYPE_ARRAY || !v_doc(&pv, &arr) || bson_empty(&arr)) {
        j = sbl_value_json(&pv);
        rc = sbl_err_set(err, 7750301, "%s%s", msg, j);
        goto done;
    }
    pct->ps = bson_malloc0((bson_count_keys(&arr) + 1) * sizeof(*pct->ps));
    bson_iter_init(&it, &arr);
    while (bson_iter_next(&it)) {
        bson_value_t x;
        sbl_iter_value(&it, &x);
        if (!v_is_num(&x)) {
            j = sbl_value_json(&x);
            rc = sbl_err_set(err, 7750302, "%s%s", msg, j);
            goto done;
        }
        double p = v_to_double(&x);
        if (!(p >= 0 && p <= 1)) {
            rc = sbl_err_set(err, 7750303, "%s%g", msg, p);
            goto done;
        }
        pct->ps[pct->nps++] = p;
    }
done:
    bson_free(j);
    bson_value_destroy(&pv);
    sbl_expr_free(e);
    return rc;
}

int sbl_pct_parse(const char *name, const bson_value_t *spec, int not_object, sbl_pct_t *pct,
                  bson_value_t *input, sbl_err_t *err)
{
    bson_t d;
    bson_iter_t it;
    bson_value_t p = {.value_type = BSON_TYPE_EOD};
    bool median = strcmp(name, "$median") == 0, has_method = false;
    int rc = 0;

    memset(pct, 0, sizeof(*pct));
    pct->median = median;
    input->value_type = BSON_TYPE_EOD;
    if (spec->value_type != BSON_TYPE_DOCUMENT || !v_doc(spec, &d)) {
        char *j = sbl_value_json(spec);
        rc = sbl_err_set(err, not_object, "specification must be an object; found %s: %s", name,
                         j);
        bson_free(j);
        return rc;
    }
    bson_iter_init(&it, &d);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "input") == 0) {
            sbl_iter_value(&it, input);
        } else if (!median && strcmp(k, "p") == 0) {
            sbl_iter_value(&it, &p);
        } else if (strcmp(k, "method") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_err_set(err, SBL_E_TypeMismatch,
                                   "BSON field '%s.method' is the wrong type '%s', expected "
                                   "type 'string'",
                                   name, sbl_type_name(bson_iter_type(&it)));
            if (strcmp(bson_iter_utf8(&it, NULL), "approximate") != 0)
                return sbl_err_set(err, SBL_E_BadValue, "Currently only 'approximate' can be "
                                                        "used as percentile 'method'.");
            has_method = true;
        } else {
            return sbl_err_set(err, E_UNKNOWN_FIELD, "BSON field '%s.%s' is an unknown field.",
                               name, k);
        }
    }
    const char *missing = input->value_type == BSON_TYPE_EOD        ? "input"
                          : !median && p.value_type == BSON_TYPE_EOD ? "p"
                          : !has_method                              ? "method"
                                                                     : NULL;
    if (missing != NULL)
        return sbl_err_set(err, E_MISSING_FIELD,
                           "BSON field '%s.%s' is missing but a required field", name, missing);
    if (median) {
        pct->ps = bson_malloc0(sizeof(*pct->ps));
        pct->ps[0] = 0.5;
        pct->nps = 1;
        return 0;
    }
    if ((rc = parse_p(&p, pct, err)) != 0)
        sbl_pct_free(pct);
    return rc;
}

void sbl_pct_free(sbl_pct_t *pct)
{
    bson_free(pct->ps);
    pct->ps = NULL;
    pct->nps = 0;
}

bool sbl_pct_number(const bson_value_t *v, double *x)
{
    if (!v_is_num(v))
        return false;
    *x = v_to_double(v);
    return !isnan(*x);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p-th percentile of sorted[0..n), n > 0. */
static double pct_at(const double *sorted, size_t n, double p)
{
    double r = p >= 1.0 ? (double)n - 1 : ceil((double)n * p) - 1;
    return sorted[r < 0 ? 0 : (size_t)r];
}

void sbl_pct_sort(double *vals, size_t n)
{
    if (n > 1)
        qsort(vals, n, sizeof(*vals), cmp_double);
}

void sbl_pct_result(const sbl_pct_t *pct, const double *vals, size_t n, bson_value_t *out)
{
    if (pct->median) {
        if (n == 0)
            v_null(out);
        else
            v_double(out, pct_at(vals, n, 0.5));
        return;
    }
    bson_t arr = BSON_INITIALIZER;
    char kb[16];
    for (size_t i = 0; i < pct->nps; i++) {
        if (n == 0)
            bson_append_null(&arr, v_key((uint32_t)i, kb), -1);
        else
            bson_append_double(&arr, v_key((uint32_t)i, kb), -1, pct_at(vals, n, pct->ps[i]));
    }
    v_take_doc(out, &arr, true);
}

/* ---- the expressions ---------------------------------------------------------------- */

/* {$percentile: {input, p, method}} / {$median: {input, method}}: kid 0 the
 * input, kid 1 a constant array of the ps. */
int parse_pct(const op_def_t *op, const bson_value_t *arg, sbl_expr_t *e, sbl_err_t *err)
{
    sbl_pct_t pct;
    bson_value_t input;
    bool median = strcmp(op->name, "$median") == 0;
    SBL_RET(sbl_pct_parse(op->name, arg, median ? 7436201 : 7436200, &pct, &input, err));
    sbl_expr_t *in = NULL;
    int rc = sbl_expr_parse(&input, &in, err);
    if (rc != 0) {
        sbl_pct_free(&pct);
        return rc;
    }
    e->kids = bson_malloc0(2 * sizeof(*e->kids));
    e->kids[0] = in;
    e->kids[1] = bson_malloc0(sizeof(sbl_expr_t));
    e->kids[1]->kind = E_CONST;
    bson_t arr = BSON_INITIALIZER;
    char kb[16];
    for (size_t i = 0; i < pct.nps; i++)
        bson_append_double(&arr, v_key((uint32_t)i, kb), -1, pct.ps[i]);
    v_take_doc(&e->kids[1]->cval, &arr, true);
    e->n = 2;
    sbl_pct_free(&pct);
    return 0;
}

/* mongod's expression: a number gives itself for every p, an array its
 * numbers' percentiles, anything else nulls. */
static int eval_pct(const sbl_expr_t *e, bool median, ectx_t *c, bson_value_t *out,
                    sbl_err_t *err)
{
    bson_value_t in;
    bson_t ps, arr;
    bson_iter_t it;
    sbl_pct_t pct = {.median = median};
    double *vals = NULL;
    size_t n = 0;
    SBL_RET(ex_kid(e, 0, c, &in, err));
    v_doc(&e->kids[1]->cval, &ps);
    pct.nps = bson_count_keys(&ps);
    pct.ps = bson_malloc0((pct.nps + 1) * sizeof(*pct.ps));
    bson_iter_init(&it, &ps);
    for (size_t i = 0; bson_iter_next(&it); i++)
        pct.ps[i] = bson_iter_double(&it);
    if (v_is_num(&in)) {
        vals = bson_malloc(sizeof(*vals));
        vals[n++] = v_to_double(&in);
    } else if (in.value_type == BSON_TYPE_ARRAY && v_doc(&in, &arr)) {
        vals = bson_malloc0((bson_count_keys(&arr) + 1) * sizeof(*vals));
        bson_iter_init(&it, &arr);
        while (bson_iter_next(&it)) {
            bson_value_t x;
            sbl_iter_value(&it, &x);
            if (sbl_pct_number(&x, &vals[n]))
                n++;
        }
    }
    sbl_pct_sort(vals, n);
    sbl_pct_result(&pct, vals, n, out);
    bson_free(vals);
    sbl_pct_free(&pct);
    bson_value_destroy(&in);
    return 0;
}

int op_percentile(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return eval_pct(e, false, c, out, err);
}

int op_median(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return eval_pct(e, true, c, out, err);
}
