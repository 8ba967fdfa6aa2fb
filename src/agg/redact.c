/*
 * redact.c: the $redact stage.  Its expression is evaluated at the top of
 * each document and, where it says $$DESCEND, again for every embedded
 * document (in arrays too) with $$CURRENT set to that document and $$ROOT
 * still the whole one: $$KEEP keeps the level as it is, $$PRUNE removes it
 * (a pruned top level removes the document), $$DESCEND keeps its plain
 * fields and looks into its documents and arrays.
 *
 * What must stay true: anything else the expression returns fails with
 * 17053 as mongod's; the documents that stay keep their field order.
 */
#include "agg/agg.h"

#include <string.h>

#include "expr/expr.h"

#define REDACT_DESCEND "descend"
#define REDACT_PRUNE "prune"
#define REDACT_KEEP "keep"

typedef struct redact {
    const sbl_expr_t *e;
    sbl_expr_env_t xe; /* root, let (with the three variables) */
} redact_t;

static int redact_doc(const redact_t *r, const bson_t *cur, bson_t *out, bool *keptp,
                      sbl_err_t *err);

/* v (an array's element or a field's value) into out under key, redacted;
 * a pruned document is left out. */
static int redact_value(const redact_t *r, const bson_iter_t *it, const char *key, bson_t *out,
                        sbl_err_t *err)
{
    bson_t sub, res;
    bool kept = false;
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        sbl_iter_doc(it, &sub);
        bson_init(&res);
        int rc = redact_doc(r, &sub, &res, &kept, err);
        if (rc == 0 && kept)
            bson_append_document(out, key, -1, &res);
        bson_destroy(&res);
        return rc;
    }
    if (BSON_ITER_HOLDS_ARRAY(it)) {
        bson_iter_t el;
        bson_t arr;
        uint32_t n = 0;
        char kb[16];
        int rc = 0;
        bson_append_array_begin(out, key, -1, &arr);
        bson_iter_recurse(it, &el);
        while (rc == 0 && bson_iter_next(&el)) {
            bson_t one = BSON_INITIALIZER;
            bson_iter_t got;
            rc = redact_value(r, &el, "0", &one, err);
            if (rc == 0 && bson_iter_init_find(&got, &one, "0"))
                sbl_append_iter(&arr, sbl_array_key(n++, kb), -1, &got);
            bson_destroy(&one);
        }
        bson_append_array_end(out, &arr);
        return rc;
    }
    sbl_append_iter(out, key, -1, it);
    return 0;
}

/* The level cur: *keptp false when pruned, else out holds what stays. */
static int redact_doc(const redact_t *r, const bson_t *cur, bson_t *out, bool *keptp,
                      sbl_err_t *err)
{
    sbl_expr_env_t xe = r->xe;
    bson_value_t v;
    *keptp = false;
    xe.current = cur;
    SBL_RET(sbl_expr_eval(r->e, &xe, &v, err));
    const char *s = v.value_type == BSON_TYPE_UTF8 ? v.value.v_utf8.str : "";
    int rc = 0;
    if (strcmp(s, REDACT_KEEP) == 0) {
        bson_concat(out, cur);
        *keptp = true;
    } else if (strcmp(s, REDACT_DESCEND) == 0) {
        bson_iter_t it;
        bson_iter_init(&it, cur);
        while (rc == 0 && bson_iter_next(&it))
            rc = redact_value(r, &it, bson_iter_key(&it), out, err);
        *keptp = true;
    } else if (strcmp(s, REDACT_PRUNE) != 0) {
        bson_t one = BSON_INITIALIZER;
        if (v.value_type != BSON_TYPE_EOD)
            sbl_append_value(&one, "v", 1, &v);
        char *j = bson_as_relaxed_extended_json(&one, NULL);
        rc = sbl_err_set(err, 17053, "$redact's expression should not return anything aside "
                         "from the variables $$KEEP, $$DESCEND, and $$PRUNE, but returned %s",
                         v.value_type == BSON_TYPE_EOD ? "MISSING" : j);
        bson_free(j);
        bson_destroy(&one);
    }
    bson_value_destroy(&v);
    return rc;
}

int sbl_agg_redact(const sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_value_t *spec,
                   sbl_err_t *err)
{
    sbl_expr_t *e = NULL;
    bson_t let = BSON_INITIALIZER;
    if (env->let != NULL)
        bson_concat(&let, env->let);
    BSON_APPEND_UTF8(&let, "DESCEND", REDACT_DESCEND);
    BSON_APPEND_UTF8(&let, "PRUNE", REDACT_PRUNE);
    BSON_APPEND_UTF8(&let, "KEEP", REDACT_KEEP);
    int rc = sbl_expr_parse(spec, &e, err);
    size_t kept = 0;
    for (size_t i = 0; i < dv->n; i++) {
        bson_t *out = NULL;
        bool keep = false;
        if (rc == 0) {
            redact_t r = {.e = e, .xe = {.root = dv->v[i], .let = &let, .now_ms = env->now_ms,
                                         .coll = env->coll}};
            out = bson_new();
            rc = redact_doc(&r, dv->v[i], out, &keep, err);
        }
        bson_destroy(dv->v[i]);
        if (rc == 0 && keep)
            dv->v[kept++] = out;
        else if (out != NULL)
            bson_destroy(out);
    }
    dv->n = kept;
    sbl_expr_free(e);
    bson_destroy(&let);
    return rc;
}
