/*
 * expr_js.c: the JavaScript operators: $where in filters (an extension of
 * the matcher, registered by sbl_expr_init) and $function in expressions.
 * Both hand their source to src/js, which compiles it once per thread.
 *
 * What must stay true: a $where that fails cannot fail the match (the
 * matcher answers yes or no), so it leaves its error pending with src/js,
 * which stops the scan and becomes the command's error; the document does
 * not match.
 */
#include "expr/expr_int.h"
#include "js/js.h"
#include "query/query.h"

#include <string.h>

#define SBL_E_WhereBadType 2
#define SBL_E_FunctionBody 31262
#define SBL_E_FunctionArgs 31266
#define SBL_E_FunctionLang 31418

typedef struct where_plan {
    char *src;
    size_t len;
} where_plan_t;

/* The source of a string or Code value (NULL when it is neither). */
static const char *js_source(const bson_value_t *v, size_t *lenp)
{
    switch (v->value_type) {
    case BSON_TYPE_UTF8:
        *lenp = v->value.v_utf8.len;
        return v->value.v_utf8.str;
    case BSON_TYPE_CODE:
        *lenp = v->value.v_code.code_len;
        return v->value.v_code.code;
    case BSON_TYPE_CODEWSCOPE:
        *lenp = v->value.v_codewscope.code_len;
        return v->value.v_codewscope.code;
    default:
        return NULL;
    }
}

static void *where_parse(const bson_value_t *arg, sbl_err_t *err)
{
    size_t len;
    const char *src = js_source(arg, &len);
    if (src == NULL) {
        sbl_err_set(err, SBL_E_WhereBadType, "$where got bad type");
        return NULL;
    }
    if (sbl_js_check_enabled(SBL_E_JSDisabled, err) != 0 ||
        sbl_js_check_compiles(src, len, err) != 0)
        return NULL;
    where_plan_t *p = bson_malloc0(sizeof(*p));
    p->src = bson_malloc(len + 1);
    memcpy(p->src, src, len);
    p->src[len] = '\0';
    p->len = len;
    return p;
}

static bool where_match(const void *plan, const bson_t *doc, const sbl_collation_t *coll)
{
    const where_plan_t *p = plan;
    sbl_err_t err;
    bool m;
    if (sbl_js_pending(&err) != 0)
        return false;
    sbl_err_clear(&err);
    if (sbl_js_where(p->src, p->len, doc, &m, &err) != 0) {
        sbl_js_set_pending(&err);
        return false;
    }
    return m;
}

static void where_free(void *plan)
{
    where_plan_t *p = plan;
    if (p == NULL)
        return;
    bson_free(p->src);
    bson_free(p);
}

static const sbl_match_ext_t where_ext = {where_parse, where_match, where_free};

void sbl_expr_js_init(void)
{
    sbl_matcher_register_ext("$where", &where_ext);
}

/* {$function: {body, args, lang: "js"}}: body called with args, `this` undefined. */
int op_function(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t body, args, lang, *vals = NULL;
    bson_t arr;
    bson_iter_t it;
    size_t n = 0, len = 0;
    const char *src;
    int rc = 0;

    v_missing(out);
    v_missing(&body);
    v_missing(&args);
    v_missing(&lang);
    SBL_RET(sbl_js_check_enabled(SBL_E_JSDisabled, err));
    SBL_ERR(ex_kid(e, 0, c, &body, err));
    SBL_ERR(ex_kid(e, 1, c, &args, err));
    SBL_ERR(ex_kid(e, 2, c, &lang, err));
    if (lang.value_type != BSON_TYPE_UTF8 || strcmp(lang.value.v_utf8.str, "js") != 0)
        SBL_ERR(sbl_err_set(err, SBL_E_FunctionLang,
                            "$function currently only supports language 'js'"));
    if ((src = js_source(&body, &len)) == NULL)
        SBL_ERR(sbl_err_set(err, SBL_E_FunctionBody,
                            "The body function must evaluate to type string or code"));
    if (args.value_type != BSON_TYPE_ARRAY ||
        !bson_init_static(&arr, args.value.v_doc.data, args.value.v_doc.data_len))
        SBL_ERR(sbl_err_set(err, SBL_E_FunctionArgs, "The args field must be of type array"));
    vals = bson_malloc0(sizeof(*vals) * (bson_count_keys(&arr) + 1));
    if (bson_iter_init(&it, &arr))
        while (bson_iter_next(&it))
            vals[n++] = *bson_iter_value(&it);
    rc = sbl_js_call(src, len, NULL, vals, n, out, err);
err:
    bson_free(vals);
    bson_value_destroy(&body);
    bson_value_destroy(&args);
    bson_value_destroy(&lang);
    return rc;
}
