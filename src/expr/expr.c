/*
 * expr.c: the expression tree: the sorted operator table (the parser,
 * expr_parse.c, looks operators up in it by binary search), evaluation of
 * paths, variables, objects and arrays, variable scopes, and the value
 * helpers the operator files share.
 *
 * What must stay true: op_table stays sorted by strcmp of the name (a unit
 * test checks it); a parsed tree is never modified after sbl_expr_parse.
 */
#include "expr/expr_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "doc/doc.h"
#include "query/query.h"

/* ---- values ------------------------------------------------------------------ */

void v_copy(const bson_value_t *src, bson_value_t *dst)
{
    if (src->value_type == BSON_TYPE_EOD)
        v_missing(dst); /* libbson's copy aborts on EOD: missing stays missing */
    else
        bson_value_copy(src, dst);
}

void v_missing(bson_value_t *v)
{
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_EOD;
}

void v_null(bson_value_t *v)
{
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_NULL;
}

void v_bool(bson_value_t *v, bool b)
{
    v->value_type = BSON_TYPE_BOOL;
    v->value.v_bool = b;
}

void v_i32(bson_value_t *v, int32_t x)
{
    v->value_type = BSON_TYPE_INT32;
    v->value.v_int32 = x;
}

void v_i64(bson_value_t *v, int64_t x)
{
    v->value_type = BSON_TYPE_INT64;
    v->value.v_int64 = x;
}

void v_double(bson_value_t *v, double x)
{
    v->value_type = BSON_TYPE_DOUBLE;
    v->value.v_double = x;
}

void v_date(bson_value_t *v, int64_t ms)
{
    v->value_type = BSON_TYPE_DATE_TIME;
    v->value.v_datetime = ms;
}

void v_str(bson_value_t *v, const char *s, size_t len)
{
    v->value_type = BSON_TYPE_UTF8;
    v->value.v_utf8.str = bson_malloc(len + 1);
    memcpy(v->value.v_utf8.str, s, len);
    v->value.v_utf8.str[len] = '\0';
    v->value.v_utf8.len = (uint32_t)len;
}

void v_take_doc(bson_value_t *v, bson_t *b, bool array)
{
    v->value_type = array ? BSON_TYPE_ARRAY : BSON_TYPE_DOCUMENT;
    v->value.v_doc.data_len = b->len;
    v->value.v_doc.data = bson_malloc(b->len);
    memcpy(v->value.v_doc.data, bson_get_data(b), b->len);
    bson_destroy(b);
}

bool v_nullish(const bson_value_t *v)
{
    return v->value_type == BSON_TYPE_EOD || v->value_type == BSON_TYPE_NULL ||
           v->value_type == BSON_TYPE_UNDEFINED;
}

bool v_is_num(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        return true;
    default:
        return false;
    }
}

long double v_to_ldouble(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        return v->value.v_int32;
    case BSON_TYPE_INT64:
        return (long double)v->value.v_int64;
    case BSON_TYPE_DOUBLE:
        return v->value.v_double;
    case BSON_TYPE_DECIMAL128: {
        char s[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&v->value.v_decimal128, s);
        if (strcmp(s, "NaN") == 0)
            return NAN;
        if (strcmp(s, "Infinity") == 0)
            return INFINITY;
        if (strcmp(s, "-Infinity") == 0)
            return -INFINITY;
        return strtold(s, NULL);
    }
    default:
        return 0;
    }
}

double v_to_double(const bson_value_t *v)
{
    return (double)v_to_ldouble(v);
}

void v_decimal(bson_value_t *v, long double x)
{
    char s[64];
    if (isnan(x))
        snprintf(s, sizeof(s), "NaN");
    else if (isinf(x))
        snprintf(s, sizeof(s), x > 0 ? "Infinity" : "-Infinity");
    else if (x == floorl(x) && fabsl(x) < 1e18L)
        snprintf(s, sizeof(s), "%lld", (long long)x);
    else
        snprintf(s, sizeof(s), "%.18Lg", x);
    v->value_type = BSON_TYPE_DECIMAL128;
    bson_decimal128_from_string(s, &v->value.v_decimal128);
}

bool v_to_i64(const bson_value_t *v, int64_t *out)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        *out = v->value.v_int32;
        return true;
    case BSON_TYPE_INT64:
        *out = v->value.v_int64;
        return true;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128: {
        long double d = v_to_ldouble(v);
        if (d != floorl(d) || d < -9223372036854775808.0L || d >= 9223372036854775808.0L)
            return false;
        *out = (int64_t)d;
        return true;
    }
    default:
        return false;
    }
}

bool v_doc(const bson_value_t *v, bson_t *b)
{
    if (v->value_type != BSON_TYPE_DOCUMENT && v->value_type != BSON_TYPE_ARRAY)
        return false;
    return bson_init_static(b, v->value.v_doc.data, v->value.v_doc.data_len);
}

int v_cmp(const bson_value_t *a, const bson_value_t *b)
{
    bool am = a->value_type == BSON_TYPE_EOD, bm = b->value_type == BSON_TYPE_EOD;
    if (am || bm)
        return am && bm ? 0 : am ? -1 : 1;
    return sbl_value_compare(a, b);
}

int v_cmp_env(const ectx_t *c, const bson_value_t *a, const bson_value_t *b)
{
    const sbl_collation_t *coll = c->env != NULL ? c->env->coll : NULL;
    bool am = a->value_type == BSON_TYPE_EOD, bm = b->value_type == BSON_TYPE_EOD;
    if (coll == NULL || am || bm)
        return v_cmp(a, b);
    return sbl_value_compare_coll(a, b, coll);
}

const char *v_key(uint32_t i, char buf[16])
{
    const char *k;
    bson_uint32_to_string(i, &k, buf, 16);
    return k;
}

uint32_t v_array_len(const bson_value_t *v)
{
    bson_t b;
    if (!v_doc(v, &b))
        return 0;
    return bson_count_keys(&b);
}

bool sbl_expr_truthy(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_EOD:
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED:
        return false;
    case BSON_TYPE_BOOL:
        return v->value.v_bool;
    case BSON_TYPE_INT32:
        return v->value.v_int32 != 0;
    case BSON_TYPE_INT64:
        return v->value.v_int64 != 0;
    case BSON_TYPE_DOUBLE:
        return v->value.v_double != 0;
    case BSON_TYPE_DECIMAL128:
        return v_to_ldouble(v) != 0;
    default:
        return true;
    }
}

/* ---- the operator table (sorted by name) ------------------------------------------ */

static const char *const a_cond[] = {"*if", "*then", "*else", NULL};
static const char *const a_map[] = {"*input", "as", "*in", NULL};
static const char *const a_filter[] = {"*input", "as", "*cond", "limit", NULL};
static const char *const a_reduce[] = {"*input", "*initialValue", "*in", NULL};
static const char *const a_trim[] = {"*input", "chars", NULL};
static const char *const a_regex[] = {"*input", "*regex", "options", NULL};
static const char *const a_replace[] = {"*input", "*find", "*replacement", NULL};
static const char *const a_d2s[] = {"*date", "format", "timezone", "onNull", NULL};
static const char *const a_datepart[] = {"*date", "timezone", NULL};
static const char *const a_dfs[] = {"*dateString", "format", "timezone", "onError", "onNull",
                                    NULL};
static const char *const a_convert[] = {"*input", "*to", "onError", "onNull", NULL};
static const char *const a_function[] = {"*body", "*args", "*lang", NULL};
static const char *const a_getfield[] = {"*field", "input", NULL};
static const char *const a_setfield[] = {"*field", "*input", "*value", NULL};
static const char *const a_dateadd[] = {"*startDate", "*unit", "*amount", "timezone", NULL};
static const char *const a_datediff[] = {"*startDate", "*endDate", "*unit", "timezone",
                                         "startOfWeek", NULL};
static const char *const a_zip[] = {"*inputs", "useLongestLength", "defaults", NULL};
static const char *const a_sortarray[] = {"*input", "*sortBy", NULL};
static const char *const a_dfp[] = {"year", "month", "day", "hour", "minute", "second",
                                    "millisecond", "isoWeekYear", "isoWeek", "isoDayOfWeek",
                                    "timezone", NULL};
static const char *const a_d2p[] = {"*date", "timezone", "iso8601", NULL};

#define P(n, lo, hi) {"$" #n, op_##n, lo, hi, NULL, NULL}
#define NM(n, list) {"$" #n, op_##n, 0, 0, list, NULL}
#define DP(n) {"$" #n, op_datepart, 1, 1, a_datepart, NULL}

static const op_def_t op_table[] = {
    P(abs, 1, 1),
    P(add, 0, -1),
    P(allElementsTrue, 1, 1),
    P(and, 0, -1),
    P(anyElementTrue, 1, 1),
    P(arrayElemAt, 2, 2),
    P(arrayToObject, 1, 1),
    P(avg, 1, -1),
    P(ceil, 1, 1),
    P(cmp, 2, 2),
    P(concat, 0, -1),
    P(concatArrays, 0, -1),
    {"$cond", op_cond, 3, 3, a_cond, NULL},
    NM(convert, a_convert),
    NM(dateAdd, a_dateadd),
    NM(dateDiff, a_datediff),
    NM(dateFromParts, a_dfp),
    NM(dateFromString, a_dfs),
    NM(dateSubtract, a_dateadd),
    NM(dateToParts, a_d2p),
    NM(dateToString, a_d2s),
    DP(dayOfMonth),
    DP(dayOfWeek),
    DP(dayOfYear),
    P(divide, 2, 2),
    P(eq, 2, 2),
    P(exp, 1, 1),
    NM(filter, a_filter),
    P(first, 1, 1),
    P(floor, 1, 1),
    NM(function, a_function),
    {"$getField", op_getField, 1, 1, a_getfield, NULL},
    P(gt, 2, 2),
    P(gte, 2, 2),
    DP(hour),
    P(ifNull, 2, -1),
    P(in, 2, 2),
    P(indexOfArray, 2, 4),
    P(indexOfBytes, 2, 4),
    P(indexOfCP, 2, 4),
    P(isArray, 1, 1),
    P(isNumber, 1, 1),
    DP(isoDayOfWeek),
    DP(isoWeek),
    DP(isoWeekYear),
    P(last, 1, 1),
    {"$let", op_let, 0, 0, NULL, parse_let},
    {"$literal", op_literal, 0, 0, NULL, parse_literal},
    P(ln, 1, 1),
    P(log, 2, 2),
    P(log10, 1, 1),
    P(lt, 2, 2),
    P(lte, 2, 2),
    NM(ltrim, a_trim),
    NM(map, a_map),
    P(max, 1, -1),
    {"$median", op_median, 0, 0, NULL, parse_pct},
    P(mergeObjects, 0, -1),
    {"$meta", op_meta, 0, 0, NULL, parse_meta},
    DP(millisecond),
    P(min, 1, -1),
    DP(minute),
    P(mod, 2, 2),
    DP(month),
    P(multiply, 0, -1),
    P(ne, 2, 2),
    P(not, 1, 1),
    P(objectToArray, 1, 1),
    P(or, 0, -1),
    {"$percentile", op_percentile, 0, 0, NULL, parse_pct},
    P(pow, 2, 2),
    P(rand, 0, 0),
    P(range, 2, 3),
    NM(reduce, a_reduce),
    NM(regexFind, a_regex),
    NM(regexFindAll, a_regex),
    NM(regexMatch, a_regex),
    NM(replaceAll, a_replace),
    NM(replaceOne, a_replace),
    P(reverseArray, 1, 1),
    P(round, 1, 2),
    NM(rtrim, a_trim),
    DP(second),
    P(setDifference, 2, 2),
    P(setEquals, 2, -1),
    NM(setField, a_setfield),
    P(setIntersection, 0, -1),
    P(setIsSubset, 2, 2),
    P(setUnion, 0, -1),
    P(size, 1, 1),
    P(slice, 2, 3),
    NM(sortArray, a_sortarray),
    P(split, 2, 2),
    P(sqrt, 1, 1),
    P(strLenBytes, 1, 1),
    P(strLenCP, 1, 1),
    P(strcasecmp, 2, 2),
    {"$substr", op_substrBytes, 3, 3, NULL, NULL},
    P(substrBytes, 3, 3),
    P(substrCP, 3, 3),
    P(subtract, 2, 2),
    P(sum, 1, -1),
    {"$switch", op_switch, 0, 0, NULL, parse_switch},
    P(toBool, 1, 1),
    P(toDate, 1, 1),
    P(toDecimal, 1, 1),
    P(toDouble, 1, 1),
    P(toInt, 1, 1),
    P(toLong, 1, 1),
    P(toLower, 1, 1),
    P(toObjectId, 1, 1),
    P(toString, 1, 1),
    P(toUpper, 1, 1),
    NM(trim, a_trim),
    P(trunc, 1, 2),
    P(tsIncrement, 1, 1),
    P(tsSecond, 1, 1),
    P(type, 1, 1),
    DP(week),
    DP(year),
    NM(zip, a_zip),
};

const op_def_t *ex_find_op(const char *name)
{
    size_t lo = 0, hi = sizeof(op_table) / sizeof(op_table[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(name, op_table[mid].name);
        if (c == 0)
            return &op_table[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* For the unit test: is the table sorted? */
bool sbl_expr_table_sorted(void);
bool sbl_expr_table_sorted(void)
{
    for (size_t i = 1; i < sizeof(op_table) / sizeof(op_table[0]); i++)
        if (strcmp(op_table[i - 1].name, op_table[i].name) >= 0)
            return false;
    return true;
}

/* ---- evaluation ------------------------------------------------------------------- */

void ex_resolve(const bson_value_t *base, const char *path, bson_value_t *out)
{
    v_missing(out);
    if (path == NULL || *path == '\0') {
        v_copy(base, out);
        return;
    }
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    const char *rest = dot ? dot + 1 : NULL;
    bson_t d;
    bson_iter_t it;

    if (base->value_type == BSON_TYPE_DOCUMENT && v_doc(base, &d)) {
        if (!bson_iter_init(&it, &d))
            return;
        while (bson_iter_next(&it)) {
            if (bson_iter_key_len(&it) == len && memcmp(bson_iter_key(&it), path, len) == 0) {
                bson_value_t v;
                sbl_iter_value(&it, &v);
                ex_resolve(&v, rest, out);
                return;
            }
        }
        return;
    }
    if (base->value_type == BSON_TYPE_ARRAY && v_doc(base, &d)) {
        bson_t arr = BSON_INITIALIZER;
        uint32_t n = 0;
        char kb[16];
        bson_iter_init(&it, &d);
        while (bson_iter_next(&it)) {
            bson_value_t v, r;
            sbl_iter_value(&it, &v);
            if (v.value_type != BSON_TYPE_DOCUMENT && v.value_type != BSON_TYPE_ARRAY)
                continue;
            ex_resolve(&v, path, &r);
            if (r.value_type != BSON_TYPE_EOD)
                sbl_append_value(&arr, v_key(n++, kb), -1, &r);
            bson_value_destroy(&r);
        }
        v_take_doc(out, &arr, true);
    }
}

int ex_var(ectx_t *c, const char *name, bson_value_t *out, sbl_err_t *err)
{
    v_missing(out);
    for (const scope_t *s = c->scope; s != NULL; s = s->up) {
        if (strcmp(s->name, name) == 0) {
            v_copy(s->val, out);
            return 0;
        }
    }
    if (strcmp(name, "ROOT") == 0) {
        if (c->root.value_type != BSON_TYPE_EOD)
            v_copy(&c->root, out);
        return 0;
    }
    if (strcmp(name, "CURRENT") == 0) {
        if (c->root.value_type != BSON_TYPE_EOD)
            v_copy(&c->root, out);
        return 0;
    }
    if (strcmp(name, "REMOVE") == 0)
        return 0;
    if (strcmp(name, "NOW") == 0) {
        if (c->now_ms == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            c->now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        }
        v_date(out, c->now_ms);
        return 0;
    }
    if (strcmp(name, "CLUSTER_TIME") == 0) {
        out->value_type = BSON_TYPE_TIMESTAMP;
        out->value.v_timestamp.timestamp = (uint32_t)time(NULL);
        out->value.v_timestamp.increment = 1;
        return 0;
    }
    bson_iter_t it;
    if (c->env->let != NULL && bson_iter_init_find(&it, c->env->let, name)) {
        bson_value_t v;
        sbl_iter_value(&it, &v);
        v_copy(&v, out);
        return 0;
    }
    return sbl_err_set(err, SBL_E_Location17276, "Use of undefined variable: %s", name);
}

int ex_kid(const sbl_expr_t *e, size_t i, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    if (i >= e->n || e->kids[i] == NULL) {
        v_missing(out);
        return 0;
    }
    return ex_eval(e->kids[i], c, out, err);
}

int ex_eval(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    v_missing(out);
    switch (e->kind) {
    case E_CONST:
        v_copy(&e->cval, out);
        return 0;
    case E_FIELD: {
        /* $$CURRENT may have been rebound (by $map's "as": "CURRENT", rare). */
        const bson_value_t *base = &c->root;
        for (const scope_t *s = c->scope; s != NULL; s = s->up)
            if (strcmp(s->name, "CURRENT") == 0) {
                base = s->val;
                break;
            }
        if (base->value_type == BSON_TYPE_EOD)
            return 0;
        ex_resolve(base, e->path, out);
        return 0;
    }
    case E_VAR: {
        bson_value_t v;
        SBL_RET(ex_var(c, e->var, &v, err));
        if (e->path == NULL) {
            *out = v;
            return 0;
        }
        ex_resolve(&v, e->path, out);
        bson_value_destroy(&v);
        return 0;
    }
    case E_OBJECT: {
        bson_t res = BSON_INITIALIZER;
        for (size_t i = 0; i < e->n; i++) {
            bson_value_t v;
            int rc = ex_eval(e->kids[i], c, &v, err);
            if (rc != 0) {
                bson_destroy(&res);
                return rc;
            }
            if (v.value_type != BSON_TYPE_EOD)
                sbl_append_value(&res, e->names[i], -1, &v);
            bson_value_destroy(&v);
        }
        v_take_doc(out, &res, false);
        return 0;
    }
    case E_ARRAY: {
        bson_t res = BSON_INITIALIZER;
        char kb[16];
        for (size_t i = 0; i < e->n; i++) {
            bson_value_t v;
            int rc = ex_eval(e->kids[i], c, &v, err);
            if (rc != 0) {
                bson_destroy(&res);
                return rc;
            }
            if (v.value_type == BSON_TYPE_EOD)
                bson_append_null(&res, v_key((uint32_t)i, kb), -1);
            else
                sbl_append_value(&res, v_key((uint32_t)i, kb), -1, &v);
            bson_value_destroy(&v);
        }
        v_take_doc(out, &res, true);
        return 0;
    }
    case E_OP: {
        if (++c->depth > EXPR_MAX_DEPTH * 4) {
            c->depth--;
            return sbl_err_set(err, SBL_E_Overflow, "expression evaluation too deep");
        }
        int rc = e->op->eval(e, c, out, err);
        c->depth--;
        if (rc != 0) {
            bson_value_destroy(out);
            v_missing(out);
        }
        return rc;
    }
    }
    return 0;
}

int sbl_expr_eval(const sbl_expr_t *e, const sbl_expr_env_t *env, bson_value_t *out,
                  sbl_err_t *err)
{
    ectx_t c = {.env = env, .now_ms = env->now_ms};
    v_missing(&c.root);
    if (env->root != NULL) {
        c.root.value_type = BSON_TYPE_DOCUMENT;
        c.root.value.v_doc.data = (uint8_t *)bson_get_data(env->root);
        c.root.value.v_doc.data_len = env->root->len;
    }
    bson_value_t cur = {.value_type = BSON_TYPE_DOCUMENT};
    scope_t cs = {.name = "CURRENT", .val = &cur};
    if (env->current != NULL) { /* field paths and $$CURRENT read it (E_FIELD, ex_var) */
        cur.value.v_doc.data = (uint8_t *)bson_get_data(env->current);
        cur.value.v_doc.data_len = env->current->len;
        c.scope = &cs;
    }
    return ex_eval(e, &c, out, err);
}

/* ---- operators that live with the core ------------------------------------------- */

int op_literal(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    v_copy(&e->kids[0]->cval, out);
    return 0;
}

/* {$meta: "textScore"}: the score a leading $text match gave the document
 * (the executor's hidden field, src/query's SBL_TEXT_SCORE_FIELD). */
int op_meta(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t v;
    ex_resolve(&c->root, SBL_TEXT_SCORE_FIELD, &v);
    if (v.value_type == BSON_TYPE_EOD)
        return sbl_err_set(err, 40218, "query requires text score metadata, but it is not "
                           "available");
    v_copy(&v, out);
    return 0;
}

int op_let(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    size_t nv = e->n - 1;
    bson_value_t *vals = bson_malloc0((nv + 1) * sizeof(*vals));
    scope_t *sc = bson_malloc0((nv + 1) * sizeof(*sc));
    const scope_t *saved = c->scope;
    int rc = 0;
    size_t done = 0;
    for (; done < nv && rc == 0; done++)
        rc = ex_eval(e->kids[done], c, &vals[done], err);
    if (rc == 0) {
        const scope_t *up = saved;
        for (size_t i = 0; i < nv; i++) {
            sc[i].name = e->names[i];
            sc[i].val = &vals[i];
            sc[i].up = up;
            up = &sc[i];
        }
        c->scope = up;
        rc = ex_eval(e->kids[nv], c, out, err);
        c->scope = saved;
    }
    for (size_t i = 0; i < done; i++)
        bson_value_destroy(&vals[i]);
    bson_free(vals);
    bson_free(sc);
    return rc;
}

int op_switch(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    size_t nb = (e->n - 1) / 2;
    for (size_t i = 0; i < nb; i++) {
        bson_value_t v;
        SBL_RET(ex_eval(e->kids[2 * i], c, &v, err));
        bool t = sbl_expr_truthy(&v);
        bson_value_destroy(&v);
        if (t)
            return ex_eval(e->kids[2 * i + 1], c, out, err);
    }
    if (e->kids[e->n - 1] == NULL)
        return sbl_err_set(err, 40066, "$switch could not find a matching branch for an input, "
                                       "and no default was specified.");
    return ex_eval(e->kids[e->n - 1], c, out, err);
}

/* ---- let variables ---------------------------------------------------------------- */

int sbl_expr_eval_let(const bson_t *let, bson_t *out, sbl_err_t *err)
{
    bson_iter_t it;
    bson_init(out);
    if (let == NULL || !bson_iter_init(&it, let))
        return 0;
    sbl_expr_env_t env = {.root = NULL, .let = out};
    while (bson_iter_next(&it)) {
        bson_value_t spec, v;
        sbl_expr_t *e = NULL;
        int rc = ex_check_var_name(bson_iter_key(&it), true, err);
        if (rc == 0) {
            sbl_iter_value(&it, &spec);
            rc = sbl_expr_parse(&spec, &e, err);
        }
        if (rc == 0)
            rc = sbl_expr_eval(e, &env, &v, err);
        sbl_expr_free(e);
        if (rc != 0) {
            bson_destroy(out);
            bson_init(out);
            return rc;
        }
        if (v.value_type == BSON_TYPE_EOD)
            bson_append_null(out, bson_iter_key(&it), -1); /* keep the name defined */
        else
            sbl_append_value(out, bson_iter_key(&it), -1, &v);
        bson_value_destroy(&v);
    }
    return 0;
}

static void bind_doc(const bson_t *in, const bson_t *vals, bson_t *out, int depth)
{
    bson_iter_t it;
    bson_iter_init(&it, in);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "$expr") == 0) {
            bson_t let, vars, in_wrap, lit;
            bson_iter_t vi;
            bson_append_document_begin(out, k, -1, &let);
            bson_append_document_begin(&let, "$let", -1, &in_wrap);
            bson_append_document_begin(&in_wrap, "vars", -1, &vars);
            bson_iter_init(&vi, vals);
            while (bson_iter_next(&vi)) {
                bson_append_document_begin(&vars, bson_iter_key(&vi), -1, &lit);
                sbl_append_iter(&lit, "$literal", -1, &vi);
                bson_append_document_end(&vars, &lit);
            }
            bson_append_document_end(&in_wrap, &vars);
            sbl_append_iter(&in_wrap, "in", -1, &it);
            bson_append_document_end(&let, &in_wrap);
            bson_append_document_end(out, &let);
        } else if ((strcmp(k, "$and") == 0 || strcmp(k, "$or") == 0 || strcmp(k, "$nor") == 0) &&
                   BSON_ITER_HOLDS_ARRAY(&it) && depth < 100) {
            bson_t arr, sub;
            bson_iter_t ai;
            bson_append_array_begin(out, k, -1, &arr);
            bson_iter_recurse(&it, &ai);
            while (bson_iter_next(&ai)) {
                if (BSON_ITER_HOLDS_DOCUMENT(&ai)) {
                    uint32_t len;
                    const uint8_t *data;
                    bson_t inner;
                    bson_iter_document(&ai, &len, &data);
                    bson_init_static(&inner, data, len);
                    bson_append_document_begin(&arr, bson_iter_key(&ai), -1, &sub);
                    bind_doc(&inner, vals, &sub, depth + 1);
                    bson_append_document_end(&arr, &sub);
                } else {
                    sbl_append_iter(&arr, bson_iter_key(&ai), -1, &ai);
                }
            }
            bson_append_array_end(out, &arr);
        } else {
            sbl_append_iter(out, k, -1, &it);
        }
    }
}

void sbl_expr_bind_let(const bson_t *filter, const bson_t *let_values, bson_t *out)
{
    bson_init(out);
    if (filter == NULL)
        return;
    if (let_values == NULL || bson_empty(let_values)) {
        bson_concat(out, filter);
        return;
    }
    bind_doc(filter, let_values, out, 0);
}
