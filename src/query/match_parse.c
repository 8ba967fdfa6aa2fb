/*
 * match_parse.c: turning a filter document into the tree of query_int.h.
 *
 * Operators are looked up by binary search in two sorted tables, one for
 * top-level operators ($and, $or ...) and one for field operators ($eq,
 * $gt ...); each entry's parse function appends nodes to the AND node it is
 * given.  Both tables must stay sorted by strcmp: lookup is a binary search
 * and an out-of-order row silently becomes "unknown operator".  Errors use
 * MongoDB's codes and messages so drivers and tests see what they expect.
 */
#include <math.h>
#include <string.h>

#include "doc/doc.h"
#include "query/query_int.h"

#define MATCH_MAX_DEPTH 100

/* MongoDB's codes for regex errors (not in the shared table). */
#define E_REGEX_INVALID 51091
#define E_REGEX_FLAG 51108
#define E_REGEX_NUL 51109

static int parse_doc(const bson_t *filter, mnode_t *out, int depth, sbl_err_t *err);
static int parse_field_ops(const char *path, const bson_t *ops, mnode_t *out, int depth,
                           sbl_err_t *err);

/* ---- helpers ------------------------------------------------------------- */

/* A leaf on path (NULL: no path, test the value handed in). */
static mnode_t *leaf_new(const char *path, leaf_test_fn test, bool expand)
{
    mnode_t *n = mnode_new(N_LEAF);
    n->test = test;
    n->expand = expand;
    if (path != NULL) {
        const char *p = path;
        for (;;) {
            const char *dot = strchr(p, '.');
            size_t len = dot != NULL ? (size_t)(dot - p) : strlen(p);
            n->parts = bson_realloc(n->parts, (n->nparts + 1) * sizeof(*n->parts));
            n->parts[n->nparts++] = bson_strndup(p, len);
            if (dot == NULL)
                break;
            p = dot + 1;
        }
    }
    return n;
}

static mnode_t *not_new(mnode_t *kid)
{
    mnode_t *n = mnode_new(N_NOT);
    mnode_add_kid(n, kid);
    return n;
}

static bool doc_from_value(const bson_value_t *v, bson_t *out)
{
    return bson_init_static(out, v->value.v_doc.data, v->value.v_doc.data_len);
}

/* True when a document value is an operator document ({$gt: 1}), not a DBRef or literal. */
static bool is_operator_doc(const bson_value_t *v)
{
    bson_t d;
    bson_iter_t it;

    if (v->value_type != BSON_TYPE_DOCUMENT || !doc_from_value(v, &d) ||
        !bson_iter_init(&it, &d) || !bson_iter_next(&it))
        return false;
    const char *k = bson_iter_key(&it);
    return k[0] == '$' && strcmp(k, "$ref") != 0 && strcmp(k, "$id") != 0 &&
           strcmp(k, "$db") != 0;
}

static bool value_truthy(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_BOOL:
        return v->value.v_bool;
    case BSON_TYPE_INT32:
        return v->value.v_int32 != 0;
    case BSON_TYPE_INT64:
        return v->value.v_int64 != 0;
    case BSON_TYPE_DOUBLE:
        return v->value.v_double != 0.0;
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED:
        return false;
    default:
        return true;
    }
}

/* The value as a double, for numeric operands; false when not a number. */
static bool value_as_double(const bson_value_t *v, double *out)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        *out = v->value.v_int32;
        return true;
    case BSON_TYPE_INT64:
        *out = (double)v->value.v_int64;
        return true;
    case BSON_TYPE_DOUBLE:
        *out = v->value.v_double;
        return true;
    case BSON_TYPE_DECIMAL128: {
        char s[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&v->value.v_decimal128, s);
        *out = strtod(s, NULL);
        return true;
    }
    default:
        return false;
    }
}

pcre2_code *sbl_regex_compile(const char *pattern, const char *options, sbl_err_t *err)
{
    uint32_t flags = PCRE2_UTF;
    int ecode;
    PCRE2_SIZE eoff;

    for (const char *o = options != NULL ? options : ""; *o; o++) {
        switch (*o) {
        case 'i':
            flags |= PCRE2_CASELESS;
            break;
        case 'm':
            flags |= PCRE2_MULTILINE;
            break;
        case 'x':
            flags |= PCRE2_EXTENDED;
            break;
        case 's':
            flags |= PCRE2_DOTALL;
            break;
        case 'u':
            break;
        default:
            sbl_err_set(err, E_REGEX_FLAG, "invalid flag in regex options: %c", *o);
            return NULL;
        }
    }
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, flags, &ecode,
                                   &eoff, NULL);
    if (re == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ecode, msg, sizeof(msg));
        sbl_err_set(err, E_REGEX_INVALID, "Regular expression is invalid: %s", (char *)msg);
    }
    return re;
}

/* A regex leaf from a pattern and options; the pattern is kept as a regex value. */
static int regex_leaf(const char *path, const char *pattern, const char *options, mnode_t **outp,
                      sbl_err_t *err)
{
    *outp = NULL;
    pcre2_code *re = sbl_regex_compile(pattern, options, err);
    if (re == NULL)
        return err != NULL ? err->code : E_REGEX_INVALID;
    mnode_t *n = leaf_new(path, mtest_regex, true);
    n->re = re;
    n->arg.value_type = BSON_TYPE_REGEX;
    n->arg.value.v_regex.regex = bson_strdup(pattern);
    n->arg.value.v_regex.options = bson_strdup(options != NULL ? options : "");
    *outp = n;
    return 0;
}

/* ---- field operators ----------------------------------------------------- */

/* Context handed to a field operator's parse function. */
typedef struct fctx {
    const char *path;   /* NULL inside a value-form $elemMatch */
    const char *name;   /* the operator, e.g. "$gt" */
    const bson_value_t *v;
    const bson_t *ops;  /* the whole operator document (for $regex + $options) */
    mnode_t *out;       /* AND node receiving the parsed nodes */
    int depth;
} fctx_t;

typedef int (*field_parse_fn)(fctx_t *c, sbl_err_t *err);

static mnode_t *leaf_with_arg(fctx_t *c, leaf_test_fn test)
{
    mnode_t *n = leaf_new(c->path, test, true);
    bson_value_copy(c->v, &n->arg);
    return n;
}

static int p_eq(fctx_t *c, sbl_err_t *err)
{
    mnode_add_kid(c->out, leaf_with_arg(c, mtest_eq));
    return 0;
}

static int p_ne(fctx_t *c, sbl_err_t *err)
{
    if (c->v->value_type == BSON_TYPE_REGEX)
        return sbl_err_set(err, SBL_E_BadValue, "Can't have regex as arg to $ne.");
    mnode_add_kid(c->out, not_new(leaf_with_arg(c, mtest_eq)));
    return 0;
}

static int p_cmp(fctx_t *c, sbl_err_t *err)
{
    mnode_t *n = leaf_with_arg(c, mtest_cmp);
    if (strcmp(c->name, "$lt") == 0)
        n->cmp = CMP_LT;
    else if (strcmp(c->name, "$lte") == 0)
        n->cmp = CMP_LTE;
    else if (strcmp(c->name, "$gt") == 0)
        n->cmp = CMP_GT;
    else
        n->cmp = CMP_GTE;
    mnode_add_kid(c->out, n);
    return 0;
}

/* Build an $in leaf from an array operand. */
static int in_leaf(fctx_t *c, mnode_t **outp, sbl_err_t *err)
{
    bson_t arr;
    bson_iter_t it;
    int rc = 0;

    *outp = NULL;
    if (c->v->value_type != BSON_TYPE_ARRAY)
        return sbl_err_set(err, SBL_E_BadValue, "%s needs an array", c->name);
    mnode_t *n = leaf_new(c->path, mtest_in, true);
    if (!doc_from_value(c->v, &arr) || !bson_iter_init(&it, &arr))
        SBL_ERR(sbl_err_set(err, SBL_E_BadValue, "%s needs an array", c->name));
    while (bson_iter_next(&it)) {
        bson_value_t e;
        sbl_iter_value(&it, &e);
        if (is_operator_doc(&e))
            SBL_ERR(sbl_err_set(err, SBL_E_BadValue, "cannot nest $ under %s", c->name));
        n->vals = bson_realloc(n->vals, (n->nvals + 1) * sizeof(*n->vals));
        n->vres = bson_realloc(n->vres, (n->nvals + 1) * sizeof(*n->vres));
        n->vres[n->nvals] = NULL;
        bson_value_copy(&e, &n->vals[n->nvals]);
        n->nvals++;
        if (e.value_type == BSON_TYPE_REGEX) {
            n->vres[n->nvals - 1] =
                sbl_regex_compile(e.value.v_regex.regex, e.value.v_regex.options, err);
            if (n->vres[n->nvals - 1] == NULL)
                SBL_ERR(err != NULL ? err->code : E_REGEX_INVALID);
        }
    }
    *outp = n;
    return 0;
err:
    mnode_free(n);
    return rc;
}

static int p_in(fctx_t *c, sbl_err_t *err)
{
    mnode_t *n;
    SBL_RET(in_leaf(c, &n, err));
    mnode_add_kid(c->out, n);
    return 0;
}

static int p_nin(fctx_t *c, sbl_err_t *err)
{
    mnode_t *n;
    SBL_RET(in_leaf(c, &n, err));
    mnode_add_kid(c->out, not_new(n));
    return 0;
}

static int p_exists(fctx_t *c, sbl_err_t *err)
{
    mnode_t *n = leaf_new(c->path, mtest_exists, false);
    mnode_add_kid(c->out, value_truthy(c->v) ? n : not_new(n));
    return 0;
}

/* $type aliases, sorted by name; code 0 stands for "number". */
static const struct {
    const char *name;
    int code;
} type_aliases[] = {
    {"array", 4},     {"binData", 5},  {"bool", 8},     {"date", 9},
    {"dbPointer", 12}, {"decimal", 19}, {"double", 1},  {"int", 16},
    {"javascript", 13}, {"javascriptWithScope", 15}, {"long", 18}, {"maxKey", 127},
    {"minKey", -1},   {"null", 10},    {"number", 0},   {"object", 3},
    {"objectId", 7},  {"regex", 11},   {"string", 2},   {"symbol", 14},
    {"timestamp", 17}, {"undefined", 6},
};

static int type_code(const bson_value_t *v, int *codep, sbl_err_t *err)
{
    double d;

    if (v->value_type == BSON_TYPE_UTF8) {
        size_t lo = 0, hi = sizeof(type_aliases) / sizeof(type_aliases[0]);
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            int c = strcmp(v->value.v_utf8.str, type_aliases[mid].name);
            if (c == 0) {
                *codep = type_aliases[mid].code;
                return 0;
            }
            if (c < 0)
                hi = mid;
            else
                lo = mid + 1;
        }
        return sbl_err_set(err, SBL_E_BadValue, "Unknown type name alias: %s",
                           v->value.v_utf8.str);
    }
    if (!value_as_double(v, &d))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "type must be represented as a number or a string");
    if (d != floor(d) || !((d >= -1 && d <= 19) || d == 127) || d == 0)
        return sbl_err_set(err, SBL_E_BadValue, "Invalid numerical type code: %g", d);
    *codep = (int)d;
    return 0;
}

static int p_type(fctx_t *c, sbl_err_t *err)
{
    int rc = 0, code;
    mnode_t *n = leaf_new(c->path, mtest_type, true);

    if (c->v->value_type == BSON_TYPE_ARRAY) {
        bson_t arr;
        bson_iter_t it;
        if (doc_from_value(c->v, &arr) && bson_iter_init(&it, &arr)) {
            while (bson_iter_next(&it)) {
                bson_value_t e;
                sbl_iter_value(&it, &e);
                SBL_ERR(type_code(&e, &code, err));
                if (n->ntypes == sizeof(n->types) / sizeof(n->types[0]))
                    SBL_ERR(sbl_err_set(err, SBL_E_BadValue, "too many types in $type"));
                n->types[n->ntypes++] = code;
            }
        }
    } else {
        SBL_ERR(type_code(c->v, &code, err));
        n->types[n->ntypes++] = code;
    }
    mnode_add_kid(c->out, n);
    return 0;
err:
    mnode_free(n);
    return rc;
}

static int p_regex(fctx_t *c, sbl_err_t *err)
{
    const char *pattern, *options = NULL;
    bson_iter_t it;
    mnode_t *n;

    if (bson_iter_init_find(&it, c->ops, "$options")) {
        if (!BSON_ITER_HOLDS_UTF8(&it))
            return sbl_err_set(err, SBL_E_BadValue, "$options has to be a string");
        options = bson_iter_utf8(&it, NULL);
    }
    if (c->v->value_type == BSON_TYPE_UTF8) {
        pattern = c->v->value.v_utf8.str;
        if (strlen(pattern) != c->v->value.v_utf8.len)
            return sbl_err_set(err, E_REGEX_NUL,
                               "Regular expression cannot contain an embedded null byte");
    } else if (c->v->value_type == BSON_TYPE_REGEX) {
        pattern = c->v->value.v_regex.regex;
        if (options != NULL && c->v->value.v_regex.options[0] != '\0')
            return sbl_err_set(err, SBL_E_BadValue, "options set in both $regex and $options");
        if (options == NULL)
            options = c->v->value.v_regex.options;
    } else {
        return sbl_err_set(err, SBL_E_BadValue, "$regex has to be a string");
    }
    SBL_RET(regex_leaf(c->path, pattern, options, &n, err));
    mnode_add_kid(c->out, n);
    return 0;
}

static int p_options(fctx_t *c, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, c->ops, "$regex"))
        return sbl_err_set(err, SBL_E_BadValue, "$options needs a $regex");
    return 0; /* consumed by p_regex */
}

static int p_not(fctx_t *c, sbl_err_t *err)
{
    int rc = 0;
    mnode_t *inner;
    bson_t d;

    if (c->v->value_type == BSON_TYPE_REGEX) {
        SBL_RET(regex_leaf(c->path, c->v->value.v_regex.regex, c->v->value.v_regex.options,
                           &inner, err));
        mnode_add_kid(c->out, not_new(inner));
        return 0;
    }
    if (c->v->value_type != BSON_TYPE_DOCUMENT)
        return sbl_err_set(err, SBL_E_BadValue, "$not needs a regex or a document");
    if (!doc_from_value(c->v, &d) || bson_empty(&d))
        return sbl_err_set(err, SBL_E_BadValue, "$not cannot be empty");
    inner = mnode_new(N_AND);
    SBL_ERR(parse_field_ops(c->path, &d, inner, c->depth + 1, err));
    mnode_add_kid(c->out, not_new(inner));
    return 0;
err:
    mnode_free(inner);
    return rc;
}

/* Top-level operators that make an $elemMatch document an object (query) form. */
static bool elem_is_query_form(const bson_t *d)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, d) || !bson_iter_next(&it))
        return true;
    const char *k = bson_iter_key(&it);
    return k[0] != '$' || strcmp(k, "$and") == 0 || strcmp(k, "$or") == 0 ||
           strcmp(k, "$nor") == 0 || strcmp(k, "$expr") == 0 || strcmp(k, "$where") == 0 ||
           strcmp(k, "$text") == 0 || strcmp(k, "$comment") == 0 ||
           strcmp(k, "$jsonSchema") == 0 || strcmp(k, "$alwaysTrue") == 0 ||
           strcmp(k, "$alwaysFalse") == 0;
}

/* An $elemMatch leaf on path from the operand v (a document). */
static int elem_leaf(const char *path, const bson_value_t *v, int depth, mnode_t **outp,
                     sbl_err_t *err)
{
    int rc = 0;
    bson_t d;
    mnode_t *n = NULL;

    *outp = NULL;
    if (v->value_type != BSON_TYPE_DOCUMENT || !doc_from_value(v, &d))
        return sbl_err_set(err, SBL_E_BadValue, "$elemMatch needs an Object");
    if (elem_is_query_form(&d)) {
        n = leaf_new(path, mtest_elem_obj, false);
        n->sub = bson_malloc0(sizeof(*n->sub));
        n->sub->root = mnode_new(N_AND);
        SBL_ERR(parse_doc(&d, n->sub->root, depth + 1, err));
    } else {
        n = leaf_new(path, mtest_elem_val, false);
        SBL_ERR(parse_field_ops(NULL, &d, n, depth + 1, err));
    }
    *outp = n;
    return 0;
err:
    mnode_free(n);
    return rc;
}

static int p_elem_match(fctx_t *c, sbl_err_t *err)
{
    mnode_t *n;
    SBL_RET(elem_leaf(c->path, c->v, c->depth, &n, err));
    mnode_add_kid(c->out, n);
    return 0;
}

static int p_size(fctx_t *c, sbl_err_t *err)
{
    double d;
    if (!value_as_double(c->v, &d))
        return sbl_err_set(err, SBL_E_BadValue, "$size needs a number");
    if (d != floor(d) || isnan(d))
        return sbl_err_set(err, SBL_E_BadValue, "$size must be a whole number");
    if (d < 0)
        return sbl_err_set(err, SBL_E_BadValue, "$size may not be negative");
    mnode_t *n = leaf_new(c->path, mtest_size, false);
    n->mod_div = d > (double)INT32_MAX ? -1 : (int64_t)d; /* -1 never equals a count */
    mnode_add_kid(c->out, n);
    return 0;
}

static int p_all(fctx_t *c, sbl_err_t *err)
{
    int rc = 0;
    bson_t arr;
    bson_iter_t it;
    bool elem_form = false, first = true;
    mnode_t *all;

    if (c->v->value_type != BSON_TYPE_ARRAY)
        return sbl_err_set(err, SBL_E_BadValue, "$all needs an array");
    all = mnode_new(N_AND);
    if (!doc_from_value(c->v, &arr) || !bson_iter_init(&it, &arr))
        SBL_ERR(sbl_err_set(err, SBL_E_BadValue, "$all needs an array"));
    while (bson_iter_next(&it)) {
        bson_value_t e;
        bson_t ed;
        bson_iter_t eit;
        mnode_t *n = NULL;
        bool is_elem = false;

        sbl_iter_value(&it, &e);
        if (e.value_type == BSON_TYPE_DOCUMENT && doc_from_value(&e, &ed) &&
            bson_iter_init(&eit, &ed) && bson_iter_next(&eit) &&
            strcmp(bson_iter_key(&eit), "$elemMatch") == 0)
            is_elem = true;
        if (first)
            elem_form = is_elem;
        first = false;
        if (is_elem != elem_form)
            SBL_ERR(sbl_err_set(err, SBL_E_BadValue, "$all/$elemMatch has to be consistent"));
        if (is_elem) {
            bson_value_t inner;
            sbl_iter_value(&eit, &inner);
            SBL_ERR(elem_leaf(c->path, &inner, c->depth, &n, err));
        } else if (e.value_type == BSON_TYPE_REGEX) {
            SBL_ERR(regex_leaf(c->path, e.value.v_regex.regex, e.value.v_regex.options, &n, err));
        } else if (is_operator_doc(&e)) {
            SBL_ERR(sbl_err_set(err, SBL_E_BadValue, "no $ expressions in $all"));
        } else {
            n = leaf_new(c->path, mtest_eq, true);
            bson_value_copy(&e, &n->arg);
        }
        mnode_add_kid(all, n);
    }
    if (all->nkids == 0)
        all->kind = N_FALSE; /* {$all: []} matches nothing */
    mnode_add_kid(c->out, all);
    return 0;
err:
    mnode_free(all);
    return rc;
}

static int p_mod(fctx_t *c, sbl_err_t *err)
{
    bson_t arr;
    bson_iter_t it;
    bson_value_t args[2];
    double d, r;
    int count = 0;

    if (c->v->value_type != BSON_TYPE_ARRAY || !doc_from_value(c->v, &arr) ||
        !bson_iter_init(&it, &arr))
        return sbl_err_set(err, SBL_E_BadValue, "malformed mod, needs to be an array");
    while (bson_iter_next(&it)) {
        if (count == 2)
            return sbl_err_set(err, SBL_E_BadValue, "malformed mod, too many elements");
        sbl_iter_value(&it, &args[count++]);
    }
    if (count < 2)
        return sbl_err_set(err, SBL_E_BadValue, "malformed mod, not enough elements");
    if (!value_as_double(&args[0], &d))
        return sbl_err_set(err, SBL_E_BadValue, "malformed mod, divisor not a number");
    if (!value_as_double(&args[1], &r))
        return sbl_err_set(err, SBL_E_BadValue, "malformed mod, remainder not a number");
    if (!isfinite(d) || !isfinite(r) || fabs(d) >= 9.2e18 || fabs(r) >= 9.2e18)
        return sbl_err_set(err, SBL_E_BadValue, "malformed mod, divisor value is invalid");
    mnode_t *n = leaf_new(c->path, mtest_mod, true);
    n->mod_div = args[0].value_type == BSON_TYPE_INT64 ? args[0].value.v_int64 : (int64_t)d;
    n->mod_rem = args[1].value_type == BSON_TYPE_INT64 ? args[1].value.v_int64 : (int64_t)r;
    if (n->mod_div == 0) {
        mnode_free(n);
        return sbl_err_set(err, SBL_E_BadValue, "divisor cannot be 0");
    }
    mnode_add_kid(c->out, n);
    return 0;
}

static int p_geo(fctx_t *c, sbl_err_t *err)
{
    sbl_geo_region_t *r = NULL;
    if (c->path == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "%s is not allowed inside $elemMatch's value "
                                                 "form", c->name);
    SBL_RET(sbl_geo_region_parse(strcmp(c->name, "$geoIntersects") == 0, c->v, &r, err));
    mnode_t *n = leaf_new(c->path, mtest_geo, true);
    n->geo = r;
    mnode_add_kid(c->out, n);
    return 0;
}

/* $near and $nearSphere order results: the executor takes them out of a
 * filter's top level (exec/geo.c); anywhere else they are refused. */
static int p_near(fctx_t *c, sbl_err_t *err)
{
    return sbl_err_set(err, SBL_E_BadValue, "$geoNear, $near, and $nearSphere are not allowed "
                                             "in this context");
}

/* Siblings of a legacy $near, read by the executor with it. */
static int p_near_arg(fctx_t *c, sbl_err_t *err)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, c->ops, "$near") || bson_iter_init_find(&it, c->ops, "$nearSphere"))
        return p_near(c, err);
    return sbl_err_set(err, SBL_E_BadValue, "%s must be used with $near or $nearSphere", c->name);
}

static int p_unsupported(fctx_t *c, sbl_err_t *err)
{
    return sbl_err_set(err, SBL_E_BadValue, "%s is not supported", c->name);
}

/* Field operators, sorted by name (strcmp). */
static const struct {
    const char *name;
    field_parse_fn parse;
} field_ops[] = {
    {"$all", p_all},
    {"$bitsAllClear", p_unsupported},
    {"$bitsAllSet", p_unsupported},
    {"$bitsAnyClear", p_unsupported},
    {"$bitsAnySet", p_unsupported},
    {"$elemMatch", p_elem_match},
    {"$eq", p_eq},
    {"$exists", p_exists},
    {"$geoIntersects", p_geo},
    {"$geoWithin", p_geo},
    {"$gt", p_cmp},
    {"$gte", p_cmp},
    {"$in", p_in},
    {"$lt", p_cmp},
    {"$lte", p_cmp},
    {"$maxDistance", p_near_arg},
    {"$minDistance", p_near_arg},
    {"$mod", p_mod},
    {"$ne", p_ne},
    {"$near", p_near},
    {"$nearSphere", p_near},
    {"$nin", p_nin},
    {"$not", p_not},
    {"$options", p_options},
    {"$regex", p_regex},
    {"$size", p_size},
    {"$type", p_type},
};

static field_parse_fn field_op_find(const char *name)
{
    size_t lo = 0, hi = sizeof(field_ops) / sizeof(field_ops[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(name, field_ops[mid].name);
        if (c == 0)
            return field_ops[mid].parse;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* Parse {$op: v, ...} for path into nodes appended to out. */
static int parse_field_ops(const char *path, const bson_t *ops, mnode_t *out, int depth,
                           sbl_err_t *err)
{
    bson_iter_t it;

    if (depth > MATCH_MAX_DEPTH)
        return sbl_err_set(err, SBL_E_BadValue, "exceeded depth limit of %d when parsing",
                           MATCH_MAX_DEPTH);
    if (!bson_iter_init(&it, ops))
        return sbl_err_set(err, SBL_E_BadValue, "malformed operator document");
    while (bson_iter_next(&it)) {
        const char *name = bson_iter_key(&it);
        field_parse_fn parse = name[0] == '$' ? field_op_find(name) : NULL;
        bson_value_t v;
        if (parse == NULL)
            return sbl_err_set(err, SBL_E_BadValue, "unknown operator: %s", name);
        sbl_iter_value(&it, &v);
        fctx_t c = {.path = path, .name = name, .v = &v, .ops = ops, .out = out, .depth = depth};
        SBL_RET(parse(&c, err));
    }
    return 0;
}

/* ---- top-level operators ------------------------------------------------- */

typedef int (*top_parse_fn)(const char *name, const bson_value_t *v, mnode_t *out, int depth,
                            sbl_err_t *err);

static int t_logical(const char *name, const bson_value_t *v, mnode_t *out, int depth,
                     sbl_err_t *err)
{
    int rc = 0;
    bson_t arr;
    bson_iter_t it;
    mnode_t *n;

    if (v->value_type != BSON_TYPE_ARRAY)
        return sbl_err_set(err, SBL_E_BadValue, "%s must be an array", name);
    n = mnode_new(strcmp(name, "$and") == 0 ? N_AND : strcmp(name, "$or") == 0 ? N_OR : N_NOR);
    if (!doc_from_value(v, &arr) || !bson_iter_init(&it, &arr))
        SBL_ERR(sbl_err_set(err, SBL_E_BadValue, "%s must be an array", name));
    while (bson_iter_next(&it)) {
        bson_t d;
        bson_value_t e;
        sbl_iter_value(&it, &e);
        if (e.value_type != BSON_TYPE_DOCUMENT || !doc_from_value(&e, &d))
            SBL_ERR(sbl_err_set(err, SBL_E_BadValue,
                                "$or/$and/$nor entries need to be full objects"));
        mnode_t *kid = mnode_new(N_AND);
        mnode_add_kid(n, kid);
        SBL_ERR(parse_doc(&d, kid, depth + 1, err));
    }
    if (n->nkids == 0)
        SBL_ERR(sbl_err_set(err, SBL_E_BadValue, "$and/$or/$nor must be a nonempty array"));
    mnode_add_kid(out, n);
    return 0;
err:
    mnode_free(n);
    return rc;
}

static int t_comment(const char *name, const bson_value_t *v, mnode_t *out, int depth,
                     sbl_err_t *err)
{
    return 0;
}

static int t_always(const char *name, const bson_value_t *v, mnode_t *out, int depth,
                    sbl_err_t *err)
{
    double d;
    if (!value_as_double(v, &d) || d != 1)
        return sbl_err_set(err, SBL_E_FailedToParse, "%s must be an integer value of 1", name);
    mnode_add_kid(out, mnode_new(strcmp(name, "$alwaysTrue") == 0 ? N_TRUE : N_FALSE));
    return 0;
}

static const sbl_match_ext_t *ext_expr, *ext_schema;

void sbl_matcher_register_ext(const char *op, const sbl_match_ext_t *ext)
{
    if (strcmp(op, "$expr") == 0)
        ext_expr = ext;
    else if (strcmp(op, "$jsonSchema") == 0)
        ext_schema = ext;
}

/* $expr and $jsonSchema: handed to the registered extension. */
static int t_ext(const char *name, const bson_value_t *v, mnode_t *out, int depth,
                 sbl_err_t *err)
{
    const sbl_match_ext_t *ext = name[1] == 'e' ? ext_expr : ext_schema;
    if (ext == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "%s is not supported", name);
    if (name[1] == 'j' && v->value_type != BSON_TYPE_DOCUMENT)
        return sbl_err_set(err, SBL_E_TypeMismatch, "$jsonSchema must be an object");
    void *plan = ext->parse(v, err);
    if (plan == NULL)
        return err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "invalid %s", name);
    mnode_t *n = mnode_new(N_EXT);
    n->ext = ext;
    n->plan = plan;
    mnode_add_kid(out, n);
    return 0;
}

static int t_unsupported(const char *name, const bson_value_t *v, mnode_t *out, int depth,
                         sbl_err_t *err)
{
    return sbl_err_set(err, SBL_E_BadValue, "%s is not supported", name);
}

/* Top-level operators, sorted by name (strcmp). */
static const struct {
    const char *name;
    top_parse_fn parse;
} top_ops[] = {
    {"$alwaysFalse", t_always},
    {"$alwaysTrue", t_always},
    {"$and", t_logical},
    {"$comment", t_comment},
    {"$expr", t_ext},
    {"$jsonSchema", t_ext},
    {"$nor", t_logical},
    {"$or", t_logical},
    {"$sampleRate", t_unsupported},
    {"$text", t_unsupported},
    {"$where", t_unsupported},
};

static top_parse_fn top_op_find(const char *name)
{
    size_t lo = 0, hi = sizeof(top_ops) / sizeof(top_ops[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(name, top_ops[mid].name);
        if (c == 0)
            return top_ops[mid].parse;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* Parse path: value (a field of a filter document) into nodes appended to out. */
static int parse_field(const char *path, const bson_value_t *v, mnode_t *out, int depth,
                       sbl_err_t *err)
{
    bson_t d;
    mnode_t *n;

    if (is_operator_doc(v)) {
        doc_from_value(v, &d);
        return parse_field_ops(path, &d, out, depth, err);
    }
    if (v->value_type == BSON_TYPE_REGEX) {
        SBL_RET(regex_leaf(path, v->value.v_regex.regex, v->value.v_regex.options, &n, err));
    } else {
        n = leaf_new(path, mtest_eq, true);
        bson_value_copy(v, &n->arg);
    }
    mnode_add_kid(out, n);
    return 0;
}

static int parse_doc(const bson_t *filter, mnode_t *out, int depth, sbl_err_t *err)
{
    bson_iter_t it;

    if (depth > MATCH_MAX_DEPTH)
        return sbl_err_set(err, SBL_E_BadValue, "exceeded depth limit of %d when parsing",
                           MATCH_MAX_DEPTH);
    if (!bson_iter_init(&it, filter))
        return sbl_err_set(err, SBL_E_BadValue, "malformed filter document");
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        bson_value_t v;
        sbl_iter_value(&it, &v);
        if (key[0] == '$') {
            top_parse_fn parse = top_op_find(key);
            if (parse == NULL)
                return sbl_err_set(err, SBL_E_BadValue, "unknown top level operator: %s", key);
            SBL_RET(parse(key, &v, out, depth, err));
        } else {
            SBL_RET(parse_field(key, &v, out, depth, err));
        }
    }
    return 0;
}

sbl_matcher_t *sbl_matcher_new(const bson_t *filter, sbl_err_t *err)
{
    sbl_matcher_t *m = bson_malloc0(sizeof(*m));
    m->root = mnode_new(N_AND);
    m->empty = filter == NULL || bson_empty(filter);
    if (filter != NULL && parse_doc(filter, m->root, 0, err) != 0) {
        sbl_matcher_free(m);
        return NULL;
    }
    return m;
}
