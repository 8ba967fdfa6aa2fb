/*
 * group_args.c: parsing $group's accumulators whose argument is an object
 * ($firstN $lastN $minN $maxN {input, n}; $top $bottom $topN $bottomN
 * {output, sortBy[, n]}; $percentile {input, p, method} and $median
 * {input, method}), with mongod's errors, and evaluating an N accumulator's
 * n on its group's _id.  group.c runs them.
 */
#include "agg/group_int.h"
#include "doc/doc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* $firstN / $lastN / $minN / $maxN: {input, n}, each parsed as an expression. */
int sbl_group_parse_n(const char *name, acc_spec_t *s, sbl_err_t *err)
{
    bson_value_t input = {.value_type = BSON_TYPE_EOD}, n = {.value_type = BSON_TYPE_EOD};
    bson_iter_t it;
    bson_t spec;

    if (s->expr.value_type != BSON_TYPE_DOCUMENT) {
        char *j = sbl_value_json(&s->expr);
        int rc = sbl_err_set(err, s->kind == A_MINN || s->kind == A_MAXN ? 5787900 : 5787801,
                             "specification must be an object; found %s: %s", name, j);
        bson_free(j);
        return rc;
    }
    bson_init_static(&spec, s->expr.value.v_doc.data, s->expr.value.v_doc.data_len);
    bson_iter_init(&it, &spec);
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "input") == 0)
            sbl_iter_value(&it, &input);
        else if (strcmp(bson_iter_key(&it), "n") == 0)
            sbl_iter_value(&it, &n);
        else
            return sbl_err_set(err, 5787901, "Unknown argument for 'n' operator: %s",
                               bson_iter_key(&it));
    }
    if (n.value_type == BSON_TYPE_EOD)
        return sbl_err_set(err, 5787906, "Missing value for 'n'");
    if (input.value_type == BSON_TYPE_EOD)
        return sbl_err_set(err, 5787907, "Missing value for 'input'");
    SBL_RET(sbl_expr_parse(&n, &s->n_e, err));
    return sbl_expr_parse(&input, &s->e, err);
}

/* $top / $bottom / $topN / $bottomN: {output, sortBy[, n]} (group_top.c). */
int sbl_group_parse_top(const char *name, acc_spec_t *s, sbl_err_t *err)
{
    bson_value_t n;
    bson_t spec;
    if (s->expr.value_type != BSON_TYPE_DOCUMENT) {
        char *j = sbl_value_json(&s->expr);
        int rc = sbl_err_set(err, 5788001, "specification must be an object; found %s: %s",
                             name, j);
        bson_free(j);
        return rc;
    }
    bson_init_static(&spec, s->expr.value.v_doc.data, s->expr.value.v_doc.data_len);
    bool single = s->kind == A_TOP || s->kind == A_BOTTOM;
    SBL_RET(sbl_top_parse(name, &spec, single, &s->top, &n, err));
    return single ? 0 : sbl_expr_parse(&n, &s->n_e, err);
}

/* n of a $firstN-like accumulator for the group whose _id is id: a positive integer. */
int sbl_group_eval_n(const sbl_agg_env_t *env, const acc_spec_t *s, const bson_value_t *id,
                     acc_state_t *a, sbl_err_t *err)
{
    bson_t root = BSON_INITIALIZER;
    bson_value_t v;
    if (id->value_type == BSON_TYPE_DOCUMENT) {
        bson_destroy(&root);
        bson_init_static(&root, id->value.v_doc.data, id->value.v_doc.data_len);
    }
    int rc = sbl_agg_eval(env, s->n_e, &root, &v, err);
    bson_destroy(&root);
    if (rc != 0)
        return rc;
    char *j = NULL;
    if (v.value_type == BSON_TYPE_EOD) {
        rc = sbl_err_set(err, 5787902, "Value for 'n' must be of integral type, but found "
                                       "missing");
    } else if (v.value_type != BSON_TYPE_INT32 && v.value_type != BSON_TYPE_INT64 &&
               v.value_type != BSON_TYPE_DOUBLE && v.value_type != BSON_TYPE_DECIMAL128) {
        j = sbl_value_json(&v);
        rc = sbl_err_set(err, 5787902, "Value for 'n' must be of integral type, but found %s",
                         j);
    } else {
        double d = sbl_number_double(&v);
        if (!(d == floor(d)) || d > 9.2e18 || d < -9.2e18)
            rc = sbl_err_set(err, 5787903, "Value for 'n' must be of integral type, but found "
                                           "%g", d);
        else if (d <= 0)
            rc = sbl_err_set(err, 5787908, "'n' must be greater than 0, found %lld",
                             (long long)d);
        else
            a->nmax = (int64_t)d;
    }
    bson_free(j);
    bson_value_destroy(&v);
    return rc;
}

int sbl_group_parse_pct(const char *name, acc_spec_t *s, sbl_err_t *err)
{
    bson_value_t input;
    bool median = s->kind == A_MEDIAN;
    SBL_RET(sbl_pct_parse(name, &s->expr, median ? 7436100 : 7429703, &s->pct, &input, err));
    return sbl_expr_parse(&input, &s->e, err);
}
