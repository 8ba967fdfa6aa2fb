/*
 * group_js.c: $group's $accumulator, its functions run by src/js
 * (group_int.h says what each is called with).
 *
 * What must stay true: the sources are views into the stage's spec, which
 * outlives the stage's run; the state is always an owned value once seen.
 */
#include "agg/group_int.h"
#include "doc/doc.h"
#include "js/js.h"

#include <stdlib.h>
#include <string.h>

enum { JS_INIT, JS_ACC, JS_MERGE, JS_FIN };

struct sbl_js_acc {
    const char *src[4]; /* init, accumulate, merge, finalize (NULL: none) */
    size_t len[4];
    sbl_expr_t *init_args; /* NULL: init takes no arguments */
};

void sbl_js_acc_free(sbl_js_acc_t *j)
{
    if (j == NULL)
        return;
    sbl_expr_free(j->init_args);
    free(j);
}

int sbl_js_acc_parse(const bson_value_t *spec, sbl_js_acc_t **accp, sbl_expr_t **argsp,
                     sbl_err_t *err)
{
    static const char *const names[] = {"init", "accumulate", "merge", "finalize"};
    bson_t d;
    bson_iter_t it;
    bool lang = false;

    if (spec->value_type != BSON_TYPE_DOCUMENT ||
        !bson_init_static(&d, spec->value.v_doc.data, spec->value.v_doc.data_len))
        return sbl_err_set(err, SBL_E_FailedToParse, "$accumulator expects an object");
    SBL_RET(sbl_js_check_enabled(SBL_E_JSDisabled, err));
    sbl_js_acc_t *j = calloc(1, sizeof(*j));
    *accp = j;
    bson_iter_init(&it, &d);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bson_value_t v;
        int f = -1;
        sbl_iter_value(&it, &v);
        for (int i = 0; i < 4; i++)
            if (strcmp(k, names[i]) == 0)
                f = i;
        if (f >= 0) {
            uint32_t n;
            if (BSON_ITER_HOLDS_UTF8(&it))
                j->src[f] = bson_iter_utf8(&it, &n);
            else if (BSON_ITER_HOLDS_CODE(&it))
                j->src[f] = bson_iter_code(&it, &n);
            else
                return sbl_err_set(err, SBL_E_FailedToParse,
                                   "$accumulator '%s' must be a string or code", k);
            j->len[f] = n;
            SBL_RET(sbl_js_check_compiles(j->src[f], n, err));
        } else if (strcmp(k, "initArgs") == 0) {
            SBL_RET(sbl_expr_parse(&v, &j->init_args, err));
        } else if (strcmp(k, "accumulateArgs") == 0) {
            SBL_RET(sbl_expr_parse(&v, argsp, err));
        } else if (strcmp(k, "lang") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it) || strcmp(bson_iter_utf8(&it, NULL), "js") != 0)
                return sbl_err_set(err, SBL_E_FailedToParse,
                                   "$accumulator only supports language 'js'");
            lang = true;
        } else {
            return sbl_err_set(err, SBL_E_FailedToParse, "$accumulator got an unknown field: %s",
                               k);
        }
    }
    const char *missing = j->src[JS_INIT] == NULL    ? "init"
                          : j->src[JS_ACC] == NULL   ? "accumulate"
                          : *argsp == NULL           ? "accumulateArgs"
                          : j->src[JS_MERGE] == NULL ? "merge"
                          : !lang                    ? "lang"
                                                     : NULL;
    if (missing != NULL)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "$accumulator missing required argument '%s'", missing);
    return 0;
}

/* Call function f with first (if not NULL) then the elements of the array
 * expression e evaluated on doc (NULL: none); *out owned by the caller. */
static int call(const sbl_agg_env_t *env, const sbl_js_acc_t *j, int f, const bson_value_t *first,
                const sbl_expr_t *e, const bson_t *doc, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t arr = {.value_type = BSON_TYPE_EOD}, *vals;
    bson_t a;
    bson_iter_t it;
    size_t n = 0;
    int rc;

    if (e != NULL) {
        SBL_RET(sbl_agg_eval(env, e, doc, &arr, err));
        if (arr.value_type != BSON_TYPE_ARRAY) {
            if (arr.value_type != BSON_TYPE_EOD)
                bson_value_destroy(&arr);
            return sbl_err_set(err, SBL_E_TypeMismatch, "$accumulator %s must evaluate to an "
                               "array", f == JS_INIT ? "initArgs" : "accumulateArgs");
        }
    }
    bool has = arr.value_type == BSON_TYPE_ARRAY &&
               bson_init_static(&a, arr.value.v_doc.data, arr.value.v_doc.data_len);
    vals = calloc((has ? bson_count_keys(&a) : 0) + 1, sizeof(*vals));
    if (first != NULL)
        vals[n++] = *first;
    if (has && bson_iter_init(&it, &a))
        while (bson_iter_next(&it))
            vals[n++] = *bson_iter_value(&it);
    rc = sbl_js_call(j->src[f], j->len[f], NULL, vals, n, out, err);
    free(vals);
    if (arr.value_type != BSON_TYPE_EOD)
        bson_value_destroy(&arr);
    return rc;
}

int sbl_js_acc_step(const sbl_agg_env_t *env, const sbl_js_acc_t *j, const sbl_expr_t *args,
                    bson_value_t *state, bool *seenp, const bson_t *doc, sbl_err_t *err)
{
    bson_value_t nv;
    if (!*seenp) {
        SBL_RET(call(env, j, JS_INIT, NULL, j->init_args, doc, state, err));
        *seenp = true;
    }
    SBL_RET(call(env, j, JS_ACC, state, args, doc, &nv, err));
    bson_value_destroy(state);
    *state = nv;
    return 0;
}

int sbl_js_acc_merge(const sbl_js_acc_t *j, bson_value_t *state, bool *seenp,
                     const bson_value_t *later, sbl_err_t *err)
{
    if (!*seenp) {
        bson_value_copy(later, state);
        *seenp = true;
        return 0;
    }
    bson_value_t two[2] = {*state, *later}, nv;
    SBL_RET(sbl_js_call(j->src[JS_MERGE], j->len[JS_MERGE], NULL, two, 2, &nv, err));
    bson_value_destroy(state);
    *state = nv;
    return 0;
}

void sbl_js_acc_result(bson_t *out, const char *field, const sbl_js_acc_t *j,
                       const bson_value_t *state, bool seen)
{
    bson_value_t nv;
    sbl_err_t e;
    if (!seen) {
        bson_append_null(out, field, -1);
    } else if (j->src[JS_FIN] == NULL) {
        sbl_append_value(out, field, -1, state);
    } else if (sbl_js_call(j->src[JS_FIN], j->len[JS_FIN], NULL, state, 1, &nv, &e) != 0) {
        sbl_js_set_pending(&e);
        bson_append_null(out, field, -1);
    } else {
        sbl_append_value(out, field, -1, &nv);
        bson_value_destroy(&nv);
    }
}
