/*
 * upd_ops.c: the update operators.  Each row of the sorted table has a parse
 * function (validates the operand once, when the update is parsed) and an
 * apply function (edits one target of one document).
 *
 * What must stay true: the table stays sorted by name (it is binary
 * searched); apply functions only touch their target; arithmetic follows
 * MongoDB's promotion (int32 -> int64 on overflow, anything with a double
 * is a double, anything with a decimal is a decimal; int64 overflow fails).
 */
#include "update/upd_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"
#include "update/upd_num.h"

static bool is_number(bson_type_t t)
{
    return t == BSON_TYPE_INT32 || t == BSON_TYPE_INT64 || t == BSON_TYPE_DOUBLE ||
           t == BSON_TYPE_DECIMAL128;
}

/* "a: 1" as MongoDB prints an element. */
static char *render_elem(const char *key, const bson_value_t *v)
{
    bson_string_t *s = bson_string_new(key);
    bson_string_append(s, ": ");
    upd_render_value(s, v);
    return bson_string_free(s, false);
}

/* Fill err with prefix followed by the element "key: value". */
static int err_with_elem(sbl_err_t *err, int code, const char *prefix, const char *key,
                         const bson_value_t *v)
{
    char *e = render_elem(key, v);
    sbl_err_set(err, code, "%s%s", prefix, e);
    bson_free(e);
    return code;
}

/* The collation an update's values compare under (NULL: binary). */
static const sbl_collation_t *coll_of(const upd_ctx_t *cx)
{
    return cx != NULL && cx->u != NULL ? cx->u->coll : NULL;
}

/* Does any existing element equal v (MongoDB comparison under coll)? */
static bool array_contains(const upd_node_t *arr, const bson_value_t *v,
                           const sbl_collation_t *coll)
{
    bool found = false;
    for (size_t i = 0; !found && i < arr->nkids; i++) {
        bson_t scratch;
        bson_value_t ev;
        upd_node_view(arr->kids[i], &scratch, &ev);
        found = sbl_value_compare_coll(&ev, v, coll) == 0;
        bson_destroy(&scratch);
    }
    return found;
}

/* Copy the elements of an array operand into a->each. */
static void take_each(upd_action_t *a, const bson_value_t *arr)
{
    bson_t b;
    bson_iter_t it;
    uint32_t n = 0;

    if (!bson_init_static(&b, arr->value.v_doc.data, arr->value.v_doc.data_len))
        return;
    n = bson_count_keys(&b);
    a->each = bson_malloc0((n + 1) * sizeof(*a->each));
    bson_iter_init(&it, &b);
    while (bson_iter_next(&it))
        bson_value_copy(bson_iter_value(&it), &a->each[a->neach++]);
}

/* ---- $set $setOnInsert $unset ------------------------------------------- */

static int parse_none(upd_action_t *a, bson_iter_t *arg, sbl_err_t *err)
{
    return 0;
}

static int apply_set(const upd_action_t *a, upd_target_t *t, const upd_ctx_t *cx, sbl_err_t *err)
{
    upd_target_put(t, upd_node_from_value(NULL, &a->arg));
    return 0;
}

static int apply_unset(const upd_action_t *a, upd_target_t *t, const upd_ctx_t *cx,
                       sbl_err_t *err)
{
    upd_target_remove(t);
    return 0;
}

/* ---- $inc $mul ---------------------------------------------------------- */

static int parse_inc(upd_action_t *a, bson_iter_t *arg, sbl_err_t *err)
{
    if (is_number(a->arg.value_type))
        return 0;
    bson_string_t *s = bson_string_new("{");
    char *e = render_elem(a->path, &a->arg);
    bson_string_append(s, e);
    bson_free(e);
    sbl_err_set(err, SBL_E_TypeMismatch, "Cannot %s with non-numeric argument: %s}",
                strcmp(a->op->name, "$inc") == 0 ? "increment" : "multiply", s->str);
    bson_string_free(s, true);
    return SBL_E_TypeMismatch;
}

static int apply_arith(const upd_action_t *a, upd_target_t *t, const upd_ctx_t *cx,
                       sbl_err_t *err)
{
    bool mul = strcmp(a->op->name, "$mul") == 0;
    bson_value_t res;

    if (t->node == NULL) {
        if (mul)
            upd_num_zero(a->arg.value_type, &res);
        else
            res = a->arg;
        upd_target_put(t, upd_node_from_value(NULL, &res));
        return 0;
    }
    if (!is_number(t->node->type)) {
        bson_string_t *s = bson_string_new(NULL);
        upd_render_id(s, cx);
        sbl_err_set(err, SBL_E_TypeMismatch,
                    "Cannot apply %s to a value of non-numeric type. %s has the field '%s' of "
                    "non-numeric type %s",
                    a->op->name, s->str, t->key, sbl_type_name(t->node->type));
        bson_string_free(s, true);
        return SBL_E_TypeMismatch;
    }
    if (!upd_num_arith(mul, &t->node->val, &a->arg, &res)) {
        bson_string_t *s = bson_string_new(NULL), *id = bson_string_new(NULL);
        upd_render_value(s, &t->node->val);
        upd_render_id(id, cx);
        sbl_err_set(err, SBL_E_BadValue,
                    "Failed to apply %s operations to current value (%s: %s) for document %s",
                    a->op->name, t->key, s->str, id->str);
        bson_string_free(s, true);
        bson_string_free(id, true);
        return SBL_E_BadValue;
    }
    upd_target_put(t, upd_node_from_value(NULL, &res));
    return 0;
}

/* ---- $min $max ---------------------------------------------------------- */

static int apply_minmax(const upd_action_t *a, upd_target_t *t, const upd_ctx_t *cx,
                        sbl_err_t *err)
{
    bool want_min = strcmp(a->op->name, "$min") == 0;
    bson_t scratch;
    bson_value_t cur;
    int c;

    if (t->node == NULL) {
        upd_target_put(t, upd_node_from_value(NULL, &a->arg));
        return 0;
    }
    upd_node_view(t->node, &scratch, &cur);
    c = sbl_value_compare_coll(&a->arg, &cur, coll_of(cx));
    bson_destroy(&scratch);
    if ((want_min && c < 0) || (!want_min && c > 0))
        upd_target_put(t, upd_node_from_value(NULL, &a->arg));
    return 0;
}

/* ---- $currentDate ------------------------------------------------------- */

static int parse_current_date(upd_action_t *a, bson_iter_t *arg, sbl_err_t *err)
{
    bson_iter_t it;
    bool ok = false;

    if (a->arg.value_type == BSON_TYPE_BOOL)
        return 0;
    if (a->arg.value_type == BSON_TYPE_DOCUMENT && bson_iter_recurse(arg, &it)) {
        bool found = false;
        while (bson_iter_next(&it)) {
            if (strcmp(bson_iter_key(&it), "$type") != 0) {
                return sbl_err_set(err, SBL_E_BadValue,
                                   "Unrecognized $currentDate option: %s", bson_iter_key(&it));
            }
            const char *ty = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
            found = strcmp(ty, "date") == 0 || strcmp(ty, "timestamp") == 0;
            a->timestamp = strcmp(ty, "timestamp") == 0;
        }
        if (!found)
            return sbl_err_set(err, SBL_E_BadValue,
                               "The '$type' string field is required to be 'date' or "
                               "'timestamp': {$currentDate: {field : {$type: 'date'}}}");
        ok = true;
    }
    if (!ok) {
        bson_string_t *s = bson_string_new(NULL);
        upd_render_value(s, &a->arg);
        sbl_err_set(err, SBL_E_BadValue,
                    "%s is not valid type for $currentDate. Please use a boolean ('true') or a "
                    "$type expression ({$type: 'timestamp/date'}).",
                    s->str);
        bson_string_free(s, true);
        return SBL_E_BadValue;
    }
    return 0;
}

static int apply_current_date(const upd_action_t *a, upd_target_t *t, const upd_ctx_t *cx,
                              sbl_err_t *err)
{
    static atomic_uint ts_inc;
    bson_value_t v;

    if (a->timestamp) {
        v.value_type = BSON_TYPE_TIMESTAMP;
        v.value.v_timestamp.timestamp = (uint32_t)(cx->now_ms / 1000);
        v.value.v_timestamp.increment = atomic_fetch_add(&ts_inc, 1) + 1;
    } else {
        v.value_type = BSON_TYPE_DATE_TIME;
        v.value.v_datetime = cx->now_ms;
    }
    upd_target_put(t, upd_node_from_value(NULL, &v));
    return 0;
}

/* ---- $push -------------------------------------------------------------- */

/* A whole number within +-9e15 (so exact in int64; Infinity, its own floor, is not). */
static bool double_integral(double d, int64_t *outp)
{
    if (d != floor(d) || fabs(d) > 9e15)
        return false;
    *outp = (int64_t)d;
    return true;
}

static bool integral(const bson_value_t *v, int64_t *outp)
{
    bson_value_t d;
    switch (v->value_type) {
    case BSON_TYPE_INT32: *outp = v->value.v_int32; return true;
    case BSON_TYPE_INT64: *outp = v->value.v_int64; return true;
    case BSON_TYPE_DOUBLE: return double_integral(v->value.v_double, outp);
    case BSON_TYPE_DECIMAL128:
        return upd_num_to_double(v, &d) && double_integral(d.value.v_double, outp);
    default: return false;
    }
}

static int parse_push_sort(upd_action_t *a, bson_iter_t *it, sbl_err_t *err)
{
    const char *bad = "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} "
                      "to sort embedded fields";
    int64_t dir;

    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t f;
        bson_t spec;
        const uint8_t *data;
        uint32_t len;
        bson_iter_recurse(it, &f);
        if (!bson_iter_next(&f))
            return sbl_err_set(err, SBL_E_BadValue, "%s", bad);
        do {
            const char *k = bson_iter_key(&f);
            if (!integral(bson_iter_value(&f), &dir) || (dir != 1 && dir != -1) || k[0] == '\0' ||
                k[0] == '$' || k[strlen(k) - 1] == '.' || strstr(k, ".."))
                return sbl_err_set(err, SBL_E_BadValue, "%s", bad);
        } while (bson_iter_next(&f));
        bson_iter_document(it, &len, &data);
        bson_init_static(&spec, data, len);
        a->sort = sbl_sort_new(&spec, err);
        if (a->sort == NULL)
            return err && err->code ? err->code : SBL_E_BadValue;
        a->sort_kind = UPD_SORT_SPEC;
        return 0;
    }
    if (!integral(bson_iter_value(it), &dir) || (dir != 1 && dir != -1))
        return sbl_err_set(err, SBL_E_BadValue, "%s", bad);
    a->sort_kind = dir == 1 ? UPD_SORT_ASC : UPD_SORT_DESC;
    return 0;
}

static int parse_push(upd_action_t *a, bson_iter_t *arg, sbl_err_t *err)
{
    bson_iter_t it;

    if (a->arg.value_type != BSON_TYPE_DOCUMENT || !bson_iter_recurse(arg, &it) ||
        !bson_iter_find(&it, "$each")) {
        a->each = bson_malloc0(sizeof(*a->each));
        bson_value_copy(&a->arg, &a->each[0]);
        a->neach = 1;
        return 0;
    }
    bson_iter_recurse(arg, &it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        const bson_value_t *v = bson_iter_value(&it);
        if (strcmp(k, "$each") == 0) {
            if (v->value_type != BSON_TYPE_ARRAY)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "The argument to $each in $push must be an array but it was "
                                   "of type: %s",
                                   sbl_type_name(v->value_type));
            if (a->each)
                return sbl_err_set(err, SBL_E_BadValue, "Only one $each clause is supported.");
            take_each(a, v);
        } else if (strcmp(k, "$slice") == 0) {
            if (!integral(v, &a->slice))
                return sbl_err_set(err, SBL_E_BadValue,
                                   "The value for $slice must be an integer value but was given "
                                   "type: %s",
                                   sbl_type_name(v->value_type));
            a->has_slice = true;
        } else if (strcmp(k, "$position") == 0) {
            if (!integral(v, &a->position))
                return sbl_err_set(err, SBL_E_BadValue,
                                   "The value for $position must be an integer value, not of "
                                   "type: %s",
                                   sbl_type_name(v->value_type));
            a->has_position = true;
        } else if (strcmp(k, "$sort") == 0) {
            SBL_RET(parse_push_sort(a, &it, err));
        } else {
            return sbl_err_set(err, SBL_E_BadValue, "Unrecognized clause in $push: %s", k);
        }
    }
    if (a->each == NULL)
        a->each = bson_malloc0(sizeof(*a->each));
    return 0;
}

/* Element compare for $push's $sort. */
static int push_elem_cmp(const upd_action_t *a, const upd_node_t *x, const upd_node_t *y)
{
    bson_t sx, sy;
    bson_value_t vx, vy;
    int c;

    if (a->sort_kind == UPD_SORT_SPEC) {
        /* Non-documents sort as documents without the fields. */
        bson_t dx = BSON_INITIALIZER, dy = BSON_INITIALIZER;
        if (x->type == BSON_TYPE_DOCUMENT)
            upd_node_write(x, &dx, false);
        if (y->type == BSON_TYPE_DOCUMENT)
            upd_node_write(y, &dy, false);
        c = sbl_sort_compare(a->sort, &dx, &dy);
        bson_destroy(&dx);
        bson_destroy(&dy);
        return c;
    }
    upd_node_view(x, &sx, &vx);
    upd_node_view(y, &sy, &vy);
    c = sbl_value_compare(&vx, &vy);
    bson_destroy(&sx);
    bson_destroy(&sy);
    return a->sort_kind == UPD_SORT_DESC ? -c : c;
}

/* Stable merge sort of an array node's elements. */
static void push_sort(const upd_action_t *a, upd_node_t **v, upd_node_t **tmp, size_t n)
{
    size_t mid = n / 2, i = 0, j = mid, k = 0;

    if (n < 2)
        return;
    push_sort(a, v, tmp, mid);
    push_sort(a, v + mid, tmp, n - mid);
    while (i < mid && j < n)
        tmp[k++] = push_elem_cmp(a, v[j], v[i]) < 0 ? v[j++] : v[i++];
    while (i < mid)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof(*v));
}

static int apply_push(const upd_action_t *a, upd_target_t *t, const upd_ctx_t *cx,
                      sbl_err_t *err)
{
    upd_node_t *arr = t->node;
    size_t at;

    if (arr == NULL) {
        upd_target_put(t, upd_node_new(NULL, BSON_TYPE_ARRAY));
        arr = t->node;
    } else if (arr->type != BSON_TYPE_ARRAY) {
        bson_string_t *s = bson_string_new(NULL);
        upd_render_id(s, cx);
        sbl_err_set(err, SBL_E_BadValue,
                    "The field '%s' must be an array but is of type %s in document %s", t->key,
                    sbl_type_name(arr->type), s->str);
        bson_string_free(s, true);
        return SBL_E_BadValue;
    }
    at = arr->nkids;
    if (a->has_position) {
        if (a->position < 0) {
            uint64_t back = 0 - (uint64_t)a->position; /* INT64_MIN has no int64 negation */
            at = back >= arr->nkids ? 0 : arr->nkids - (size_t)back;
        } else if ((uint64_t)a->position < arr->nkids) {
            at = (size_t)a->position;
        }
    }
    for (size_t i = 0; i < a->neach; i++)
        upd_node_insert(arr, at + i, upd_node_from_value(NULL, &a->each[i]));
    if (a->sort_kind != UPD_SORT_NONE && arr->nkids > 1) {
        upd_node_t **tmp = bson_malloc(arr->nkids * sizeof(*tmp));
        push_sort(a, arr->kids, tmp, arr->nkids);
        bson_free(tmp);
    }
    if (a->has_slice) {
        uint64_t keep = a->slice < 0 ? (uint64_t)(-(a->slice + 1)) + 1 : (uint64_t)a->slice;
        while (arr->nkids > keep) {
            size_t victim = a->slice < 0 ? 0 : arr->nkids - 1;
            upd_node_free(upd_node_detach(arr, victim));
        }
    }
    return 0;
}

/* ---- $addToSet ---------------------------------------------------------- */

static int parse_add_to_set(upd_action_t *a, bson_iter_t *arg, sbl_err_t *err)
{
    bson_iter_t it;
    size_t n = 0;

    if (a->arg.value_type == BSON_TYPE_DOCUMENT && bson_iter_recurse(arg, &it) &&
        bson_iter_next(&it) && strcmp(bson_iter_key(&it), "$each") == 0) {
        if (!BSON_ITER_HOLDS_ARRAY(&it))
            return sbl_err_set(err, SBL_E_TypeMismatch,
                               "The argument to $each in $addToSet must be an array but it was "
                               "of type %s",
                               sbl_type_name(bson_iter_type(&it)));
        take_each(a, bson_iter_value(&it));
        if (bson_iter_next(&it))
            return err_with_elem(err, SBL_E_BadValue,
                                 "Found unexpected fields after $each in $addToSet: ", a->path,
                                 &a->arg);
    } else {
        a->each = bson_malloc0(sizeof(*a->each));
        bson_value_copy(&a->arg, &a->each[0]);
        a->neach = 1;
    }
    /* Drop duplicates among the values to add, keeping the first of each. */
    for (size_t i = 0; i < a->neach; i++) {
        bool dup = false;
        for (size_t j = 0; !dup && j < n; j++)
            dup = sbl_value_compare(&a->each[i], &a->each[j]) == 0;
        if (dup)
            bson_value_destroy(&a->each[i]);
        else
            a->each[n++] = a->each[i];
    }
    a->neach = n;
    return 0;
}

static int apply_add_to_set(const upd_action_t *a, upd_target_t *t, const upd_ctx_t *cx,
                            sbl_err_t *err)
{
    upd_node_t *arr = t->node;

    if (arr == NULL) {
        upd_target_put(t, upd_node_new(NULL, BSON_TYPE_ARRAY));
        arr = t->node;
    } else if (arr->type != BSON_TYPE_ARRAY) {
        return sbl_err_set(err, SBL_E_BadValue,
                           "Cannot apply $addToSet to non-array field. Field named '%s' has "
                           "non-array type %s",
                           t->key, sbl_type_name(arr->type));
    }
    for (size_t i = 0; i < a->neach; i++)
        if (!array_contains(arr, &a->each[i], coll_of(cx)))
            upd_node_insert(arr, arr->nkids, upd_node_from_value(NULL, &a->each[i]));
    return 0;
}

/* ---- $pop $pull $pullAll ------------------------------------------------ */

static int parse_pop(upd_action_t *a, bson_iter_t *arg, sbl_err_t *err)
{
    int64_t v;

    if (!integral(&a->arg, &v)) {
        if (is_number(a->arg.value_type)) {
            bson_string_t *s = bson_string_new(NULL);
            upd_render_value(s, &a->arg);
            sbl_err_set(err, SBL_E_FailedToParse, "$pop expects 1 or -1, found: %s", s->str);
            bson_string_free(s, true);
            return SBL_E_FailedToParse;
        }
        return err_with_elem(err, SBL_E_FailedToParse, "Expected a number in: ", a->path,
                             &a->arg);
    }
    if (v != 1 && v != -1)
        return sbl_err_set(err, SBL_E_FailedToParse, "$pop expects 1 or -1, found: %lld",
                           (long long)v);
    a->pop = (int)v;
    return 0;
}

static int apply_pop(const upd_action_t *a, upd_target_t *t, const upd_ctx_t *cx,
                     sbl_err_t *err)
{
    if (t->node == NULL)
        return 0;
    if (t->node->type != BSON_TYPE_ARRAY)
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "Path '%s' contains an element of non-array type '%s'", t->path,
                           sbl_type_name(t->node->type));
    if (t->node->nkids > 0)
        upd_node_free(upd_node_detach(t->node, a->pop > 0 ? t->node->nkids - 1 : 0));
    return 0;
}

/* A document whose first key is a query operator is a condition on the element itself. */
static bool is_value_condition(const bson_t *doc)
{
    bson_iter_t it;
    const char *k;
    static const char *const logical[] = {"$and", "$comment", "$expr", "$nor",
                                          "$or",  "$text",    "$where"};

    if (!bson_iter_init(&it, doc) || !bson_iter_next(&it))
        return false;
    k = bson_iter_key(&it);
    if (k[0] != '$')
        return false;
    for (size_t i = 0; i < sizeof(logical) / sizeof(logical[0]); i++)
        if (strcmp(k, logical[i]) == 0)
            return false;
    return true;
}

static int parse_pull(upd_action_t *a, bson_iter_t *arg, sbl_err_t *err)
{
    bson_t cond, wrapped = BSON_INITIALIZER;

    if (a->arg.value_type == BSON_TYPE_DOCUMENT) {
        bson_init_static(&cond, a->arg.value.v_doc.data, a->arg.value.v_doc.data_len);
        if (!is_value_condition(&cond)) {
            a->pull_kind = UPD_PULL_QUERY;
            a->matcher = sbl_matcher_new(&cond, err);
            bson_destroy(&wrapped);
            return a->matcher ? 0 : (err && err->code ? err->code : SBL_E_BadValue);
        }
    } else if (a->arg.value_type != BSON_TYPE_REGEX) {
        a->pull_kind = UPD_PULL_EQ;
        bson_destroy(&wrapped);
        return 0;
    }
    a->pull_kind = UPD_PULL_WRAPPED;
    sbl_append_value(&wrapped, "v", 1, &a->arg);
    a->matcher = sbl_matcher_new(&wrapped, err);
    bson_destroy(&wrapped);
    return a->matcher ? 0 : (err && err->code ? err->code : SBL_E_BadValue);
}

static bool pull_matches(const upd_action_t *a, const upd_node_t *e, const sbl_collation_t *coll)
{
    bson_t doc = BSON_INITIALIZER;
    bool m = false;

    if (a->pull_kind == UPD_PULL_EQ) {
        bson_t scratch;
        bson_value_t v;
        upd_node_view(e, &scratch, &v);
        m = sbl_value_compare_coll(&v, &a->arg, coll) == 0;
        bson_destroy(&scratch);
    } else if (a->pull_kind == UPD_PULL_WRAPPED) {
        upd_node_append(&doc, "v", e);
        m = sbl_matcher_match(a->matcher, &doc, NULL);
    } else if (e->type == BSON_TYPE_DOCUMENT) {
        upd_node_write(e, &doc, false);
        m = sbl_matcher_match(a->matcher, &doc, NULL);
    }
    bson_destroy(&doc);
    return m;
}

static int parse_pull_all(upd_action_t *a, bson_iter_t *arg, sbl_err_t *err)
{
    if (a->arg.value_type != BSON_TYPE_ARRAY)
        return sbl_err_set(err, SBL_E_BadValue,
                           "$pullAll requires an array argument but was given a %s",
                           sbl_type_name(a->arg.value_type));
    take_each(a, &a->arg);
    return 0;
}

static int apply_pull(const upd_action_t *a, upd_target_t *t, const upd_ctx_t *cx,
                      sbl_err_t *err)
{
    upd_node_t *arr = t->node;
    bool all = strcmp(a->op->name, "$pullAll") == 0;

    if (arr == NULL)
        return 0;
    if (arr->type != BSON_TYPE_ARRAY)
        return sbl_err_set(err, SBL_E_BadValue, "Cannot apply $pull to a non-array value");
    for (size_t i = arr->nkids; i-- > 0;) {
        bool drop;
        if (all) {
            bson_t scratch;
            bson_value_t v;
            upd_node_view(arr->kids[i], &scratch, &v);
            drop = false;
            for (size_t j = 0; !drop && j < a->neach; j++)
                drop = sbl_value_compare_coll(&v, &a->each[j], coll_of(cx)) == 0;
            bson_destroy(&scratch);
        } else {
            drop = pull_matches(a, arr->kids[i], coll_of(cx));
        }
        if (drop)
            upd_node_free(upd_node_detach(arr, i));
    }
    return 0;
}

/* ---- $bit --------------------------------------------------------------- */

static int parse_bit(upd_action_t *a, bson_iter_t *arg, sbl_err_t *err)
{
    const char *fmt = "{$bit: {field: {and/or/xor: #}}";
    bson_iter_t it;

    if (a->arg.value_type != BSON_TYPE_DOCUMENT)
        return sbl_err_set(err, SBL_E_BadValue,
                           "The $bit modifier is not compatible with a %s. You must pass in an "
                           "embedded document: %s",
                           sbl_type_name(a->arg.value_type), fmt);
    bson_iter_recurse(arg, &it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        const bson_value_t *v = bson_iter_value(&it);
        int op;
        if (strcmp(k, "and") == 0) {
            op = UPD_BIT_AND;
        } else if (strcmp(k, "or") == 0) {
            op = UPD_BIT_OR;
        } else if (strcmp(k, "xor") == 0) {
            op = UPD_BIT_XOR;
        } else {
            char *e = render_elem(k, v);
            sbl_err_set(err, SBL_E_BadValue,
                        "The $bit modifier only supports 'and', 'or', and 'xor', not '%s' which "
                        "is an unknown operator: {%s}",
                        k, e);
            bson_free(e);
            return SBL_E_BadValue;
        }
        if (v->value_type != BSON_TYPE_INT32 && v->value_type != BSON_TYPE_INT64) {
            char *e = render_elem(k, v);
            sbl_err_set(err, SBL_E_BadValue,
                        "The $bit modifier field must be an Integer(32/64 bit); a '%s' is not "
                        "supported here: {%s}",
                        sbl_type_name(v->value_type), e);
            bson_free(e);
            return SBL_E_BadValue;
        }
        a->bits = bson_realloc(a->bits, (a->nbits + 1) * sizeof(*a->bits));
        a->bits[a->nbits].op = op;
        a->bits[a->nbits++].v = *v;
    }
    if (a->nbits == 0)
        return sbl_err_set(err, SBL_E_BadValue,
                           "You must pass in at least one bitwise operation. The format is: %s",
                           fmt);
    return 0;
}

static int apply_bit(const upd_action_t *a, upd_target_t *t, const upd_ctx_t *cx,
                     sbl_err_t *err)
{
    bson_value_t cur = {.value_type = BSON_TYPE_INT32};

    if (t->node != NULL) {
        if (t->node->type != BSON_TYPE_INT32 && t->node->type != BSON_TYPE_INT64) {
            bson_string_t *s = bson_string_new(NULL);
            upd_render_id(s, cx);
            sbl_err_set(err, SBL_E_BadValue,
                        "Cannot apply $bit to a value of non-integral type.%s has the field %s "
                        "of non-integer type %s",
                        s->str, t->key, sbl_type_name(t->node->type));
            bson_string_free(s, true);
            return SBL_E_BadValue;
        }
        cur = t->node->val;
    }
    for (size_t i = 0; i < a->nbits; i++) {
        const bson_value_t *v = &a->bits[i].v;
        bool wide = cur.value_type == BSON_TYPE_INT64 || v->value_type == BSON_TYPE_INT64;
        int64_t x = cur.value_type == BSON_TYPE_INT64 ? cur.value.v_int64 : cur.value.v_int32;
        int64_t y = v->value_type == BSON_TYPE_INT64 ? v->value.v_int64 : v->value.v_int32;
        int64_t r = a->bits[i].op == UPD_BIT_AND ? (x & y)
                    : a->bits[i].op == UPD_BIT_OR ? (x | y)
                                                  : (x ^ y);
        if (wide) {
            cur.value_type = BSON_TYPE_INT64;
            cur.value.v_int64 = r;
        } else {
            cur.value_type = BSON_TYPE_INT32;
            cur.value.v_int32 = (int32_t)r;
        }
    }
    upd_target_put(t, upd_node_from_value(NULL, &cur));
    return 0;
}

/* ---- $rename (parsed here, applied in upd_apply.c) ------------------------ */

static int parse_rename(upd_action_t *a, bson_iter_t *arg, sbl_err_t *err)
{
    int pos;
    size_t n;

    if (a->arg.value_type != BSON_TYPE_UTF8)
        return err_with_elem(err, SBL_E_BadValue,
                             "The 'to' field for $rename must be a string: ", a->path, &a->arg);
    /* It becomes a field name: one that is not UTF-8 (or holds a NUL) could
     * be stored but never read back. */
    if (!bson_utf8_validate(a->arg.value.v_utf8.str, a->arg.value.v_utf8.len, false))
        return sbl_err_set(err, SBL_E_BadValue,
                           "The 'to' field for $rename must be a valid UTF-8 field name: %s",
                           a->path);
    a->to = bson_strdup(a->arg.value.v_utf8.str);
    SBL_RET(upd_split_path(a->to, &a->to_comps, &a->to_ncomps, err));
    for (size_t i = 0; i < a->ncomps; i++)
        if (a->comps[i][0] == '$')
            return sbl_err_set(err, SBL_E_BadValue,
                               "The source field for $rename may not be dynamic: %s", a->path);
    for (size_t i = 0; i < a->to_ncomps; i++)
        if (a->to_comps[i][0] == '$')
            return sbl_err_set(err, SBL_E_BadValue,
                               "The destination field for $rename may not be dynamic: %s", a->to);
    if (strcmp(a->path, a->to) == 0)
        return err_with_elem(err, SBL_E_BadValue,
                             "The source and target field for $rename must differ: ", a->path,
                             &a->arg);
    n = a->ncomps < a->to_ncomps ? a->ncomps : a->to_ncomps;
    for (pos = 0; (size_t)pos < n && strcmp(a->comps[pos], a->to_comps[pos]) == 0; pos++)
        ;
    if ((size_t)pos == n)
        return err_with_elem(err, SBL_E_BadValue,
                             "The source and target field for $rename must not be on the same "
                             "path: ",
                             a->path, &a->arg);
    return 0;
}

/* ---- the table ---------------------------------------------------------- */

static const upd_op_t ops[] = {
    {"$addToSet", parse_add_to_set, apply_add_to_set, true},
    {"$bit", parse_bit, apply_bit, true},
    {"$currentDate", parse_current_date, apply_current_date, true},
    {"$inc", parse_inc, apply_arith, true},
    {"$max", parse_none, apply_minmax, true},
    {"$min", parse_none, apply_minmax, true},
    {"$mul", parse_inc, apply_arith, true},
    {"$pop", parse_pop, apply_pop, false},
    {"$pull", parse_pull, apply_pull, false},
    {"$pullAll", parse_pull_all, apply_pull, false},
    {"$push", parse_push, apply_push, true},
    {"$rename", parse_rename, NULL, false},
    {"$set", parse_none, apply_set, true},
    {"$setOnInsert", parse_none, apply_set, true},
    {"$unset", parse_none, apply_unset, false},
};

static int op_cmp(const void *key, const void *row)
{
    return strcmp(key, ((const upd_op_t *)row)->name);
}

const upd_op_t *upd_op_find(const char *name)
{
    return bsearch(name, ops, sizeof(ops) / sizeof(ops[0]), sizeof(ops[0]), op_cmp);
}
