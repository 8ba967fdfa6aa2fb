/*
 * match.c: evaluating a parsed filter (see query_int.h) against documents.
 *
 * A leaf walks its dotted path: documents are entered by field name; an
 * array met before the last part is crossed element by element (documents
 * only) and, when the part is a number, also indexed.  Every value reached is
 * tested, and at the last part an array's elements are tested before the
 * array itself (unless the operator looks at whole arrays: $size, $elemMatch).
 * A path that reaches nothing is tested once as "missing" (NULL).
 * Comparisons only hold between values of the same canonical type.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"
#include "query/query_int.h"

mnode_t *mnode_new(enum mnode_kind kind)
{
    mnode_t *n = bson_malloc0(sizeof(*n));
    n->kind = kind;
    n->arg.value_type = BSON_TYPE_EOD;
    return n;
}

void mnode_free(mnode_t *n)
{
    if (n == NULL)
        return;
    for (size_t i = 0; i < n->nkids; i++)
        mnode_free(n->kids[i]);
    bson_free(n->kids);
    for (size_t i = 0; i < n->nparts; i++)
        bson_free(n->parts[i]);
    bson_free(n->parts);
    if (n->arg.value_type != BSON_TYPE_EOD)
        bson_value_destroy(&n->arg);
    if (n->re != NULL)
        pcre2_code_free(n->re);
    if (n->ext != NULL)
        n->ext->free(n->plan);
    for (size_t i = 0; i < n->nvals; i++) {
        bson_value_destroy(&n->vals[i]);
        if (n->vres[i] != NULL)
            pcre2_code_free(n->vres[i]);
    }
    bson_free(n->vals);
    bson_free(n->vres);
    sbl_matcher_free(n->sub);
    sbl_geo_region_free(n->geo);
    bson_free(n);
}

void mnode_add_kid(mnode_t *parent, mnode_t *kid)
{
    parent->kids = bson_realloc(parent->kids, (parent->nkids + 1) * sizeof(*parent->kids));
    parent->kids[parent->nkids++] = kid;
}

/* ---- leaf tests ---------------------------------------------------------- */

static bool is_nullish(const bson_value_t *v)
{
    return v == NULL || v->value_type == BSON_TYPE_NULL || v->value_type == BSON_TYPE_UNDEFINED;
}

static bool is_number(const bson_value_t *v)
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

static bool is_nan(const bson_value_t *v)
{
    if (v->value_type == BSON_TYPE_DOUBLE)
        return isnan(v->value.v_double);
    if (v->value_type == BSON_TYPE_DECIMAL128) {
        /* NaN has combination bits 11111 followed by 0 in the high word. */
        return ((v->value.v_decimal128.high >> 58) & 0x1f) == 0x1f;
    }
    return false;
}

/* Equality as {a: x} means it: null also matches missing, same canonical type otherwise. */
static bool value_eq(const bson_value_t *v, const bson_value_t *arg, const sbl_collation_t *coll)
{
    if (arg->value_type == BSON_TYPE_NULL)
        return is_nullish(v);
    if (v == NULL)
        return false;
    if (sbl_type_rank(v->value_type) != sbl_type_rank(arg->value_type))
        return false;
    return sbl_value_compare_coll(v, arg, coll) == 0;
}

bool mtest_eq(const mnode_t *n, const bson_value_t *v, int32_t *idxp)
{
    return value_eq(v, &n->arg, n->coll);
}

bool mtest_cmp(const mnode_t *n, const bson_value_t *v, int32_t *idxp)
{
    const bson_value_t *arg = &n->arg;
    bool inclusive = n->cmp == CMP_LTE || n->cmp == CMP_GTE;
    int c;

    if (arg->value_type == BSON_TYPE_NULL)
        return inclusive && is_nullish(v);
    if (v == NULL)
        return false;
    if (arg->value_type == BSON_TYPE_MINKEY || arg->value_type == BSON_TYPE_MAXKEY) {
        c = sbl_value_compare(v, arg); /* MinKey / MaxKey bound every type */
    } else {
        if (sbl_type_rank(v->value_type) != sbl_type_rank(arg->value_type))
            return false;
        if (is_number(v) && (is_nan(v) || is_nan(arg)))
            return inclusive && is_nan(v) && is_nan(arg);
        c = sbl_value_compare_coll(v, arg, n->coll);
    }
    switch (n->cmp) {
    case CMP_LT:
        return c < 0;
    case CMP_LTE:
        return c <= 0;
    case CMP_GT:
        return c > 0;
    default:
        return c >= 0;
    }
}

static bool regex_match(const pcre2_code *re, const bson_value_t *v)
{
    const char *s;
    size_t len;

    if (v == NULL)
        return false;
    if (v->value_type == BSON_TYPE_UTF8) {
        s = v->value.v_utf8.str;
        len = v->value.v_utf8.len;
    } else if (v->value_type == BSON_TYPE_SYMBOL) {
        s = v->value.v_symbol.symbol;
        len = v->value.v_symbol.len;
    } else {
        return false;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (md == NULL)
        return false;
    int rc = pcre2_match(re, (PCRE2_SPTR)s, len, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

/* A regex operand matches strings by pattern and regex values by equality. */
static bool regex_test(const pcre2_code *re, const bson_value_t *pattern, const bson_value_t *v)
{
    if (v != NULL && v->value_type == BSON_TYPE_REGEX && pattern->value_type == BSON_TYPE_REGEX)
        return strcmp(v->value.v_regex.regex, pattern->value.v_regex.regex) == 0 &&
               strcmp(v->value.v_regex.options, pattern->value.v_regex.options) == 0;
    return regex_match(re, v);
}

bool mtest_regex(const mnode_t *n, const bson_value_t *v, int32_t *idxp)
{
    return regex_test(n->re, &n->arg, v);
}

bool mtest_in(const mnode_t *n, const bson_value_t *v, int32_t *idxp)
{
    for (size_t i = 0; i < n->nvals; i++) {
        if (n->vres[i] != NULL ? regex_test(n->vres[i], &n->vals[i], v)
                               : value_eq(v, &n->vals[i], n->coll))
            return true;
    }
    return false;
}

bool mtest_exists(const mnode_t *n, const bson_value_t *v, int32_t *idxp)
{
    return v != NULL;
}

bool mtest_type(const mnode_t *n, const bson_value_t *v, int32_t *idxp)
{
    if (v == NULL)
        return false;
    for (size_t i = 0; i < n->ntypes; i++) {
        if (n->types[i] == 0 ? is_number(v) : n->types[i] == (int)(int8_t)v->value_type)
            return true;
    }
    return false;
}

bool mtest_size(const mnode_t *n, const bson_value_t *v, int32_t *idxp)
{
    if (v == NULL || v->value_type != BSON_TYPE_ARRAY)
        return false;
    bson_t arr;
    bson_iter_t it;
    int64_t count = 0;
    if (!bson_init_static(&arr, v->value.v_doc.data, v->value.v_doc.data_len) ||
        !bson_iter_init(&it, &arr))
        return false;
    while (bson_iter_next(&it))
        count++;
    return count == n->mod_div; /* the parser keeps the wanted size in mod_div */
}

bool mtest_geo(const mnode_t *n, const bson_value_t *v, int32_t *idxp)
{
    (void)idxp;
    return v != NULL && sbl_geo_region_match(n->geo, v);
}

bool mtest_mod(const mnode_t *n, const bson_value_t *v, int32_t *idxp)
{
    int64_t x;

    if (v == NULL)
        return false;
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        x = v->value.v_int32;
        break;
    case BSON_TYPE_INT64:
        x = v->value.v_int64;
        break;
    case BSON_TYPE_DOUBLE:
        if (!isfinite(v->value.v_double) || v->value.v_double >= 9.2e18 ||
            v->value.v_double <= -9.2e18)
            return false;
        x = (int64_t)v->value.v_double;
        break;
    default:
        return false;
    }
    if (n->mod_div == -1)
        return n->mod_rem == 0; /* avoids INT64_MIN % -1 */
    return x % n->mod_div == n->mod_rem;
}

/* Call fn on each element of an array value with its index; stops at the first true. */
#define FOR_EACH_ELEMENT(arrv, idx, elem, body)                                                    \
    do {                                                                                           \
        bson_t fe_arr_;                                                                            \
        bson_iter_t fe_it_;                                                                        \
        if (bson_init_static(&fe_arr_, (arrv)->value.v_doc.data, (arrv)->value.v_doc.data_len) && \
            bson_iter_init(&fe_it_, &fe_arr_)) {                                                   \
            int32_t idx = -1;                                                                      \
            while (bson_iter_next(&fe_it_)) {                                                      \
                bson_value_t elem;                                                                 \
                idx++;                                                                             \
                sbl_iter_value(&fe_it_, &elem);                                                    \
                body                                                                               \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static bool eval_doc(const mnode_t *n, const uint8_t *data, uint32_t len, int32_t *posp);
static bool eval_value(const mnode_t *n, const bson_value_t *v);

bool mtest_elem_obj(const mnode_t *n, const bson_value_t *v, int32_t *idxp)
{
    bool found = false;

    if (v == NULL || v->value_type != BSON_TYPE_ARRAY)
        return false;
    FOR_EACH_ELEMENT(v, i, e, {
        if ((e.value_type == BSON_TYPE_DOCUMENT || e.value_type == BSON_TYPE_ARRAY) &&
            eval_doc(n->sub->root, e.value.v_doc.data, e.value.v_doc.data_len, NULL)) {
            *idxp = i;
            found = true;
            break;
        }
    });
    return found;
}

bool mtest_elem_val(const mnode_t *n, const bson_value_t *v, int32_t *idxp)
{
    bool found = false;

    if (v == NULL || v->value_type != BSON_TYPE_ARRAY)
        return false;
    FOR_EACH_ELEMENT(v, i, e, {
        bool all = true;
        for (size_t k = 0; k < n->nkids && all; k++)
            all = eval_value(n->kids[k], &e);
        if (all) {
            *idxp = i;
            found = true;
            break;
        }
    });
    return found;
}

/* ---- path walking -------------------------------------------------------- */

bool sbl_path_part_is_index(const char *s, uint32_t *indexp)
{
    uint64_t x = 0;

    if (*s == '\0')
        return false;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        x = x * 10 + (uint64_t)(*p - '0');
        if (x > INT32_MAX)
            return false;
    }
    if (indexp != NULL)
        *indexp = (uint32_t)x;
    return true;
}

static void note_pos(int32_t *posp, int32_t pos)
{
    if (posp != NULL && *posp < 0 && pos >= 0)
        *posp = pos;
}

/* Test the value found at the end of the path; apos is the index in the first array crossed. */
static bool leaf_check(const mnode_t *n, const bson_value_t *v, int32_t apos, int32_t *posp)
{
    int32_t idx = -1;
    bool hit = false;

    if (v != NULL && v->value_type == BSON_TYPE_ARRAY && n->expand) {
        FOR_EACH_ELEMENT(v, i, e, {
            if (n->test(n, &e, &idx)) {
                note_pos(posp, apos >= 0 ? apos : i);
                hit = true;
                break;
            }
        });
        if (hit)
            return true;
    }
    if (n->test(n, v, &idx)) {
        note_pos(posp, apos >= 0 ? apos : idx);
        return true;
    }
    return false;
}

static bool walk_array(const mnode_t *n, const bson_value_t *arr, size_t i, int32_t apos,
                       int32_t *posp);

/* Continue the path at part i with value v (the value of part i - 1). */
static bool walk_value(const mnode_t *n, const bson_value_t *v, size_t i, int32_t apos,
                       int32_t *posp);

/* Look up part i in a document. */
static bool walk_doc(const mnode_t *n, const uint8_t *data, uint32_t len, size_t i, int32_t apos,
                     int32_t *posp)
{
    bson_t d;
    bson_iter_t it;
    bson_value_t v;

    if (!bson_init_static(&d, data, len) || !bson_iter_init_find(&it, &d, n->parts[i]))
        return leaf_check(n, NULL, apos, posp);
    sbl_iter_value(&it, &v);
    return walk_value(n, &v, i + 1, apos, posp);
}

static bool walk_value(const mnode_t *n, const bson_value_t *v, size_t i, int32_t apos,
                       int32_t *posp)
{
    if (i == n->nparts)
        return leaf_check(n, v, apos, posp);
    if (v->value_type == BSON_TYPE_DOCUMENT)
        return walk_doc(n, v->value.v_doc.data, v->value.v_doc.data_len, i, apos, posp);
    if (v->value_type == BSON_TYPE_ARRAY)
        return walk_array(n, v, i, apos, posp);
    return leaf_check(n, NULL, apos, posp);
}

static bool walk_array(const mnode_t *n, const bson_value_t *arr, size_t i, int32_t apos,
                       int32_t *posp)
{
    bool reached = false, hit = false;
    uint32_t want;

    FOR_EACH_ELEMENT(arr, k, e, {
        if (e.value_type == BSON_TYPE_DOCUMENT) {
            reached = true;
            if (walk_doc(n, e.value.v_doc.data, e.value.v_doc.data_len, i,
                         apos >= 0 ? apos : k, posp)) {
                hit = true;
                break;
            }
        }
    });
    if (hit)
        return true;
    if (sbl_path_part_is_index(n->parts[i], &want)) {
        FOR_EACH_ELEMENT(arr, k, e, {
            if ((uint32_t)k == want) {
                reached = true;
                hit = walk_value(n, &e, i + 1, apos, posp);
                break;
            }
        });
        if (hit)
            return true;
    }
    return reached ? false : leaf_check(n, NULL, apos, posp);
}

/* Evaluate node n against the document data/len. */
static bool eval_doc(const mnode_t *n, const uint8_t *data, uint32_t len, int32_t *posp)
{
    switch (n->kind) {
    case N_TRUE:
        return true;
    case N_FALSE:
        return false;
    case N_AND: {
        /* Only a branch that holds may report the positional index. */
        int32_t pos = -1;
        for (size_t i = 0; i < n->nkids; i++)
            if (!eval_doc(n->kids[i], data, len, posp != NULL ? &pos : NULL))
                return false;
        note_pos(posp, pos);
        return true;
    }
    case N_OR:
        for (size_t i = 0; i < n->nkids; i++) {
            int32_t pos = -1;
            if (eval_doc(n->kids[i], data, len, posp != NULL ? &pos : NULL)) {
                note_pos(posp, pos);
                return true;
            }
        }
        return false;
    case N_NOR:
        for (size_t i = 0; i < n->nkids; i++)
            if (eval_doc(n->kids[i], data, len, NULL))
                return false;
        return true;
    case N_NOT:
        return !eval_doc(n->kids[0], data, len, NULL);
    case N_LEAF:
        return walk_doc(n, data, len, 0, -1, posp);
    case N_EXT: {
        bson_t d;
        return bson_init_static(&d, data, len) && n->ext->match(n->plan, &d, n->coll);
    }
    }
    return false;
}

/* Evaluate node n against one value, without a path (value-form $elemMatch). */
static bool eval_value(const mnode_t *n, const bson_value_t *v)
{
    int32_t idx = -1;

    switch (n->kind) {
    case N_TRUE:
        return true;
    case N_FALSE:
        return false;
    case N_AND:
        for (size_t i = 0; i < n->nkids; i++)
            if (!eval_value(n->kids[i], v))
                return false;
        return true;
    case N_OR:
        for (size_t i = 0; i < n->nkids; i++)
            if (eval_value(n->kids[i], v))
                return true;
        return false;
    case N_NOR:
        for (size_t i = 0; i < n->nkids; i++)
            if (eval_value(n->kids[i], v))
                return false;
        return true;
    case N_NOT:
        return !eval_value(n->kids[0], v);
    case N_LEAF:
        return n->test(n, v, &idx);
    case N_EXT:
        return false;
    }
    return false;
}

bool sbl_matcher_match(const sbl_matcher_t *m, const bson_t *doc, int32_t *array_pos)
{
    if (array_pos != NULL)
        *array_pos = -1;
    return eval_doc(m->root, bson_get_data(doc), doc->len, array_pos);
}

static void set_coll(mnode_t *n, const sbl_collation_t *coll)
{
    n->coll = coll;
    for (size_t i = 0; i < n->nkids; i++)
        set_coll(n->kids[i], coll);
    if (n->sub != NULL)
        sbl_matcher_set_collation(n->sub, coll);
}

void sbl_matcher_set_collation(sbl_matcher_t *m, const sbl_collation_t *coll)
{
    set_coll(m->root, coll);
}

bool sbl_matcher_is_empty(const sbl_matcher_t *m)
{
    return m->empty;
}

void sbl_matcher_free(sbl_matcher_t *m)
{
    if (m == NULL)
        return;
    mnode_free(m->root);
    bson_free(m);
}

static bool has_where(const bson_t *filter, int depth)
{
    bson_iter_t it, arr;
    if (depth > 100 || !bson_iter_init(&it, filter))
        return false;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "$where") == 0)
            return true;
        if ((strcmp(k, "$and") == 0 || strcmp(k, "$or") == 0 || strcmp(k, "$nor") == 0) &&
            BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &arr)) {
            while (bson_iter_next(&arr)) {
                bson_t d;
                if (sbl_iter_doc(&arr, &d) && has_where(&d, depth + 1))
                    return true;
            }
        }
    }
    return false;
}

int sbl_filter_refuse_where(const bson_t *filter, sbl_err_t *err)
{
    if (filter != NULL && has_where(filter, 0))
        return sbl_err_set(err, SBL_E_BadValue, "$where is not allowed in this context");
    return 0;
}

/* ---- an extension's evaluation error (query.h) ------------------------------ */

static _Thread_local sbl_err_t match_error;

void sbl_matcher_note_error(const sbl_err_t *err)
{
    if (match_error.code == 0 && err->code != 0)
        match_error = *err;
}

int sbl_matcher_error(sbl_err_t *err)
{
    if (match_error.code != 0 && err != NULL)
        *err = match_error;
    return match_error.code;
}

int sbl_matcher_take_error(sbl_err_t *err)
{
    int rc = sbl_matcher_error(err);
    if (rc != 0)
        sbl_err_clear(&match_error);
    return rc;
}

void sbl_matcher_op_begin(sbl_err_t *saved)
{
    sbl_err_clear(saved);
    sbl_matcher_take_error(saved);
}

int sbl_matcher_op_end(const sbl_err_t *saved, sbl_err_t *err)
{
    int rc = sbl_matcher_take_error(err);
    if (saved->code != 0)
        match_error = *saved;
    else /* as a copy of a cleared error, without its 512 bytes (every command) */
        sbl_err_clear(&match_error);
    return rc;
}
