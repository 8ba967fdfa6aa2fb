/*
 * expr_arr.c: array, set and object operators, the iterating operators that
 * bind variables ($map, $filter, $reduce), and the accumulator-style
 * expressions over arrays ($sum, $avg, $min, $max).
 *
 * What must stay true: a variable bound by $map/$filter/$reduce is visible
 * only while its "in"/"cond" expression runs (the scope is restored on every
 * path), and array indexes follow MongoDB (negative counts from the end).
 */
#include "expr/expr_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"

/* A small growable array of owned values. */
typedef struct vlist {
    bson_value_t *v;
    size_t n, cap;
} vlist_t;

static void vl_push_copy(vlist_t *l, const bson_value_t *v)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->v = bson_realloc(l->v, l->cap * sizeof(*l->v));
    }
    v_copy(v, &l->v[l->n++]);
}

static void vl_free(vlist_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        bson_value_destroy(&l->v[i]);
    bson_free(l->v);
    memset(l, 0, sizeof(*l));
}

/* Elements of an array value (copies). */
static void vl_from_array(vlist_t *l, const bson_value_t *arr)
{
    bson_t d;
    bson_iter_t it;
    memset(l, 0, sizeof(*l));
    if (!v_doc(arr, &d) || !bson_iter_init(&it, &d))
        return;
    while (bson_iter_next(&it)) {
        bson_value_t v;
        sbl_iter_value(&it, &v);
        vl_push_copy(l, &v);
    }
}

static void vl_to_array(const vlist_t *l, bson_value_t *out)
{
    bson_t arr = BSON_INITIALIZER;
    char kb[16];
    for (size_t i = 0; i < l->n; i++)
        sbl_append_value(&arr, v_key((uint32_t)i, kb), -1, &l->v[i]);
    v_take_doc(out, &arr, true);
}

/* Evaluate kid i, requiring an array (or nullish when allow_null). */
static int arr_arg(const sbl_expr_t *e, size_t i, ectx_t *c, bson_value_t *v, bool *nullp,
                   int code, const char *fmt, sbl_err_t *err)
{
    SBL_RET(ex_kid(e, i, c, v, err));
    *nullp = v_nullish(v);
    if (!*nullp && v->value_type != BSON_TYPE_ARRAY) {
        int rc = sbl_err_set(err, code, fmt, e->op->name, sbl_type_name(v->value_type));
        bson_value_destroy(v);
        v_missing(v);
        return rc;
    }
    return 0;
}

int op_size(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a;
    SBL_RET(ex_kid(e, 0, c, &a, err));
    if (a.value_type != BSON_TYPE_ARRAY) {
        int rc = sbl_err_set(err, 17124, "The argument to $size must be an array. Type of "
                                         "argument is %s",
                             sbl_type_name(a.value_type));
        bson_value_destroy(&a);
        return rc;
    }
    v_i32(out, (int32_t)v_array_len(&a));
    bson_value_destroy(&a);
    return 0;
}

int op_isArray(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a;
    SBL_RET(ex_kid(e, 0, c, &a, err));
    v_bool(out, a.value_type == BSON_TYPE_ARRAY);
    bson_value_destroy(&a);
    return 0;
}

int op_arrayElemAt(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, i;
    bool n;
    SBL_RET(arr_arg(e, 0, c, &a, &n, 28689,
                    "%s's first argument must be an array, but is %s", err));
    int rc = ex_kid(e, 1, c, &i, err);
    int64_t idx = 0;
    if (rc == 0 && (n || v_nullish(&i))) {
        v_null(out);
    } else if (rc == 0 && (!v_is_num(&i) || !v_to_i64(&i, &idx))) {
        rc = sbl_err_set(err, v_is_num(&i) ? 28691 : 28690,
                         "%s's second argument must be a numeric value%s, but is %s",
                         e->op->name, v_is_num(&i) ? " representable as a 32-bit integral" : "",
                         sbl_type_name(i.value_type));
    } else if (rc == 0) {
        vlist_t l;
        vl_from_array(&l, &a);
        if (idx < 0)
            idx += (int64_t)l.n;
        if (idx >= 0 && (size_t)idx < l.n)
            v_copy(&l.v[idx], out);
        vl_free(&l);
    }
    bson_value_destroy(&a);
    bson_value_destroy(&i);
    return rc;
}

static int first_last(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool last)
{
    bson_value_t a;
    bool n;
    SBL_RET(arr_arg(e, 0, c, &a, &n, last ? 28689 : 28689,
                    "%s's argument must be an array, but is %s", err));
    if (n) {
        v_null(out);
    } else {
        vlist_t l;
        vl_from_array(&l, &a);
        if (l.n > 0)
            v_copy(&l.v[last ? l.n - 1 : 0], out);
        vl_free(&l);
    }
    bson_value_destroy(&a);
    return 0;
}

int op_first(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return first_last(e, c, out, err, false);
}

int op_last(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return first_last(e, c, out, err, true);
}

int op_concatArrays(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    vlist_t all = {0};
    bool isnull = false;
    for (size_t i = 0; i < e->n; i++) {
        bson_value_t a;
        bool n;
        int rc = arr_arg(e, i, c, &a, &n, 28664,
                         "%s only supports arrays, not %s", err);
        if (rc != 0) {
            vl_free(&all);
            return rc;
        }
        if (n) {
            isnull = true;
        } else {
            vlist_t l;
            vl_from_array(&l, &a);
            for (size_t k = 0; k < l.n; k++)
                vl_push_copy(&all, &l.v[k]);
            vl_free(&l);
        }
        bson_value_destroy(&a);
    }
    if (isnull)
        v_null(out);
    else
        vl_to_array(&all, out);
    vl_free(&all);
    return 0;
}

int op_in(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t x, a;
    SBL_RET(ex_kid(e, 0, c, &x, err));
    int rc = ex_kid(e, 1, c, &a, err);
    if (rc == 0 && a.value_type != BSON_TYPE_ARRAY) {
        rc = sbl_err_set(err, 40081, "$in requires an array as a second argument, found: %s",
                         sbl_type_name(a.value_type));
    } else if (rc == 0) {
        vlist_t l;
        bool found = false;
        vl_from_array(&l, &a);
        for (size_t i = 0; i < l.n && !found; i++)
            found = v_cmp_env(c, &l.v[i], &x) == 0;
        vl_free(&l);
        v_bool(out, found);
    }
    bson_value_destroy(&x);
    bson_value_destroy(&a);
    return rc;
}

int op_indexOfArray(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, x, s, en;
    bool n;
    int64_t start = 0, end = -1;
    SBL_RET(arr_arg(e, 0, c, &a, &n, 40090,
                    "%s requires an array as a first argument, found: %s", err));
    v_missing(&x);
    v_missing(&s);
    v_missing(&en);
    int rc = ex_kid(e, 1, c, &x, err);
    if (rc == 0)
        rc = ex_kid(e, 2, c, &s, err);
    if (rc == 0)
        rc = ex_kid(e, 3, c, &en, err);
    if (rc == 0 && s.value_type != BSON_TYPE_EOD && (!v_to_i64(&s, &start) || start < 0))
        rc = sbl_err_set(err, 40097, "$indexOfArray requires a nonnegative integral starting "
                                     "index");
    if (rc == 0 && en.value_type != BSON_TYPE_EOD && (!v_to_i64(&en, &end) || end < 0))
        rc = sbl_err_set(err, 40097, "$indexOfArray requires a nonnegative integral ending "
                                     "index");
    if (rc == 0 && n) {
        v_null(out);
    } else if (rc == 0) {
        vlist_t l;
        int64_t found = -1;
        vl_from_array(&l, &a);
        size_t stop = end < 0 || (size_t)end > l.n ? l.n : (size_t)end;
        for (size_t i = (size_t)start; i < stop; i++)
            if (v_cmp_env(c, &l.v[i], &x) == 0) {
                found = (int64_t)i;
                break;
            }
        vl_free(&l);
        v_i32(out, (int32_t)found);
    }
    bson_value_destroy(&a);
    bson_value_destroy(&x);
    bson_value_destroy(&s);
    bson_value_destroy(&en);
    return rc;
}

int op_slice(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, p, q;
    bool n;
    int64_t pos = 0, cnt = 0;
    SBL_RET(arr_arg(e, 0, c, &a, &n, 28724,
                    "First argument to %s must be an array, but is of type: %s", err));
    v_missing(&p);
    v_missing(&q);
    int rc = ex_kid(e, 1, c, &p, err);
    if (rc == 0 && e->n > 2)
        rc = ex_kid(e, 2, c, &q, err);
    if (rc == 0 && (n || v_nullish(&p) || (e->n > 2 && v_nullish(&q)))) {
        v_null(out);
        goto done;
    }
    if (rc != 0)
        goto done;
    if (!v_to_i64(&p, &pos)) {
        rc = sbl_err_set(err, 28725, "Second argument to $slice must be a numeric value, but is "
                                     "of type: %s",
                         sbl_type_name(p.value_type));
        goto done;
    }
    vlist_t l;
    vl_from_array(&l, &a);
    int64_t len = (int64_t)l.n, from, count;
    if (e->n == 2) {
        if (pos >= 0) {
            from = 0;
            count = pos;
        } else {
            from = len + pos < 0 ? 0 : len + pos;
            count = len;
        }
    } else {
        if (!v_to_i64(&q, &cnt)) {
            vl_free(&l);
            rc = sbl_err_set(err, 28727, "Third argument to $slice must be numeric, but is of "
                                         "type: %s",
                             sbl_type_name(q.value_type));
            goto done;
        }
        if (cnt <= 0) {
            vl_free(&l);
            rc = sbl_err_set(err, 28729, "Third argument to $slice must be positive: %lld",
                             (long long)cnt);
            goto done;
        }
        from = pos >= 0 ? pos : (len + pos < 0 ? 0 : len + pos);
        count = cnt;
    }
    vlist_t r = {0};
    for (int64_t i = from; i < len && i - from < count; i++)
        vl_push_copy(&r, &l.v[i]);
    vl_to_array(&r, out);
    vl_free(&r);
    vl_free(&l);
done:
    bson_value_destroy(&a);
    bson_value_destroy(&p);
    bson_value_destroy(&q);
    return rc;
}

int op_reverseArray(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a;
    bool n;
    SBL_RET(arr_arg(e, 0, c, &a, &n, 34435,
                    "The argument to %s must be an array, but was of type: %s", err));
    if (n) {
        v_null(out);
    } else {
        vlist_t l, r = {0};
        vl_from_array(&l, &a);
        for (size_t i = l.n; i > 0; i--)
            vl_push_copy(&r, &l.v[i - 1]);
        vl_to_array(&r, out);
        vl_free(&l);
        vl_free(&r);
    }
    bson_value_destroy(&a);
    return 0;
}

int op_range(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t v[3];
    int64_t x[3] = {0, 0, 1};
    int rc = 0;
    size_t got = 0;
    static const int codes[] = {34443, 34444, 34446};
    static const char *const what[] = {"starting value", "ending value", "step value"};
    for (; got < e->n && rc == 0; got++) {
        if ((rc = ex_kid(e, got, c, &v[got], err)) != 0)
            break;
        if (!v_is_num(&v[got]) || !v_to_i64(&v[got], &x[got]) || x[got] < INT32_MIN ||
            x[got] > INT32_MAX)
            rc = sbl_err_set(err, codes[got] + (v_is_num(&v[got]) ? 1 : 0),
                             "$range requires a %s that can be represented as a 32-bit "
                             "integer, found value: %s",
                             what[got], sbl_type_name(v[got].value_type));
    }
    if (rc == 0 && x[2] == 0)
        rc = sbl_err_set(err, 34449, "$range requires a non-zero step value");
    if (rc == 0) {
        bson_t arr = BSON_INITIALIZER;
        char kb[16];
        uint32_t k = 0;
        for (int64_t i = x[0]; x[2] > 0 ? i < x[1] : i > x[1]; i += x[2]) {
            if (k >= 10000000) {
                bson_destroy(&arr);
                rc = sbl_err_set(err, 146, "$range would use too much memory");
                break;
            }
            bson_append_int32(&arr, v_key(k++, kb), -1, (int32_t)i);
        }
        if (rc == 0)
            v_take_doc(out, &arr, true);
    }
    for (size_t i = 0; i < got && i < 3; i++)
        bson_value_destroy(&v[i]);
    return rc;
}

/* ---- $map, $filter, $reduce ---------------------------------------------------------- */

/* The variable name given in "as" (kid i), or dflt. */
static int as_name(const sbl_expr_t *e, size_t i, const char *dflt, const char **namep,
                   sbl_err_t *err)
{
    *namep = dflt;
    if (i < e->n && e->kids[i] != NULL) {
        if (e->kids[i]->kind != E_CONST || e->kids[i]->cval.value_type != BSON_TYPE_UTF8)
            return sbl_err_set(err, 16866, "empty variable names are not allowed");
        *namep = e->kids[i]->cval.value.v_utf8.str;
    }
    return 0;
}

static int map_filter(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err,
                      bool filter)
{
    bson_value_t a, lim;
    bool n;
    const char *name;
    int64_t limit = -1;
    SBL_RET(as_name(e, 1, "this", &name, err));
    SBL_RET(arr_arg(e, 0, c, &a, &n, filter ? 28651 : 16883,
                    "input to %s must be an array not %s", err));
    v_missing(&lim);
    int rc = 0;
    if (filter && e->kids[3] != NULL) {
        if ((rc = ex_kid(e, 3, c, &lim, err)) != 0) {
            bson_value_destroy(&a);
            return rc;
        }
        if (!v_nullish(&lim) && (!v_to_i64(&lim, &limit) || limit < 1)) {
            bson_value_destroy(&a);
            bson_value_destroy(&lim);
            return sbl_err_set(err, 327, "$filter: limit must be greater than 0");
        }
    }
    bson_value_destroy(&lim);
    if (n) {
        bson_value_destroy(&a);
        v_null(out);
        return 0;
    }
    vlist_t l, r = {0};
    vl_from_array(&l, &a);
    bson_value_destroy(&a);
    const scope_t *saved = c->scope;
    for (size_t i = 0; i < l.n && rc == 0; i++) {
        scope_t sc = {name, &l.v[i], saved};
        bson_value_t v;
        c->scope = &sc;
        rc = ex_kid(e, 2, c, &v, err);
        c->scope = saved;
        if (rc != 0)
            break;
        if (!filter) {
            if (v.value_type == BSON_TYPE_EOD)
                v_null(&v);
            vl_push_copy(&r, &v);
        } else if (sbl_expr_truthy(&v)) {
            vl_push_copy(&r, &l.v[i]);
            if (limit > 0 && (int64_t)r.n >= limit) {
                bson_value_destroy(&v);
                break;
            }
        }
        bson_value_destroy(&v);
    }
    if (rc == 0)
        vl_to_array(&r, out);
    vl_free(&l);
    vl_free(&r);
    return rc;
}

int op_map(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return map_filter(e, c, out, err, false);
}

int op_filter(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return map_filter(e, c, out, err, true);
}

int op_reduce(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, acc;
    bool n;
    SBL_RET(arr_arg(e, 0, c, &a, &n, 40080,
                    "%s requires that 'input' be an array, found: %s", err));
    if (n) {
        bson_value_destroy(&a);
        v_null(out);
        return 0;
    }
    int rc = ex_kid(e, 1, c, &acc, err);
    vlist_t l;
    vl_from_array(&l, &a);
    bson_value_destroy(&a);
    const scope_t *saved = c->scope;
    for (size_t i = 0; i < l.n && rc == 0; i++) {
        scope_t s1 = {"this", &l.v[i], saved};
        scope_t s2 = {"value", &acc, &s1};
        bson_value_t next;
        c->scope = &s2;
        rc = ex_kid(e, 2, c, &next, err);
        c->scope = saved;
        bson_value_destroy(&acc);
        acc = next;
    }
    vl_free(&l);
    if (rc == 0)
        *out = acc;
    else
        bson_value_destroy(&acc);
    return rc;
}

/* ---- sets ------------------------------------------------------------------------------ */

static bool vl_has(const ectx_t *c, const vlist_t *l, const bson_value_t *v)
{
    for (size_t i = 0; i < l->n; i++)
        if (v_cmp_env(c, &l->v[i], v) == 0)
            return true;
    return false;
}

static void vl_dedup(const ectx_t *c, const vlist_t *in, vlist_t *out)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < in->n; i++)
        if (!vl_has(c, out, &in->v[i]))
            vl_push_copy(out, &in->v[i]);
}

/* Evaluate every argument as a set; *nullp when any is nullish. */
static int set_args(const sbl_expr_t *e, ectx_t *c, vlist_t **setsp, bool *nullp, int code,
                    sbl_err_t *err)
{
    vlist_t *sets = bson_malloc0((e->n + 1) * sizeof(*sets));
    *nullp = false;
    for (size_t i = 0; i < e->n; i++) {
        bson_value_t a;
        bool n;
        int rc = arr_arg(e, i, c, &a, &n, code,
                         "All operands of %s must be arrays. One argument is of type: %s", err);
        if (rc != 0) {
            for (size_t j = 0; j < i; j++)
                vl_free(&sets[j]);
            bson_free(sets);
            return rc;
        }
        if (n) {
            *nullp = true;
        } else {
            vlist_t l;
            vl_from_array(&l, &a);
            vl_dedup(c, &l, &sets[i]);
            vl_free(&l);
        }
        bson_value_destroy(&a);
    }
    *setsp = sets;
    return 0;
}

static void free_sets(vlist_t *sets, size_t n)
{
    for (size_t i = 0; i < n; i++)
        vl_free(&sets[i]);
    bson_free(sets);
}

int op_setUnion(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    vlist_t *s, r = {0};
    bool n;
    SBL_RET(set_args(e, c, &s, &n, 17043, err));
    for (size_t i = 0; i < e->n; i++)
        for (size_t k = 0; k < s[i].n; k++)
            if (!vl_has(c, &r, &s[i].v[k]))
                vl_push_copy(&r, &s[i].v[k]);
    if (n)
        v_null(out);
    else
        vl_to_array(&r, out);
    vl_free(&r);
    free_sets(s, e->n);
    return 0;
}

int op_setIntersection(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    vlist_t *s, r = {0};
    bool n;
    SBL_RET(set_args(e, c, &s, &n, 17047, err));
    if (e->n > 0)
        for (size_t k = 0; k < s[0].n; k++) {
            bool all = true;
            for (size_t i = 1; i < e->n && all; i++)
                all = vl_has(c, &s[i], &s[0].v[k]);
            if (all)
                vl_push_copy(&r, &s[0].v[k]);
        }
    if (n)
        v_null(out);
    else
        vl_to_array(&r, out);
    vl_free(&r);
    free_sets(s, e->n);
    return 0;
}

int op_setDifference(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    vlist_t *s, r = {0};
    bool n;
    SBL_RET(set_args(e, c, &s, &n, 17048, err));
    for (size_t k = 0; k < s[0].n; k++)
        if (!vl_has(c, &s[1], &s[0].v[k]))
            vl_push_copy(&r, &s[0].v[k]);
    if (n)
        v_null(out);
    else
        vl_to_array(&r, out);
    vl_free(&r);
    free_sets(s, e->n);
    return 0;
}

int op_setEquals(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    vlist_t *s;
    bool n;
    SBL_RET(set_args(e, c, &s, &n, 17044, err));
    if (n) {
        free_sets(s, e->n);
        return sbl_err_set(err, 17044, "All operands of $setEquals must be arrays.");
    }
    bool eq = true;
    for (size_t i = 1; i < e->n && eq; i++) {
        eq = s[i].n == s[0].n;
        for (size_t k = 0; k < s[i].n && eq; k++)
            eq = vl_has(c, &s[0], &s[i].v[k]);
    }
    v_bool(out, eq);
    free_sets(s, e->n);
    return 0;
}

int op_setIsSubset(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    vlist_t *s;
    bool n;
    SBL_RET(set_args(e, c, &s, &n, 17046, err));
    if (n) {
        free_sets(s, e->n);
        return sbl_err_set(err, 17046, "both operands of $setIsSubset must be arrays.");
    }
    bool sub = true;
    for (size_t k = 0; k < s[0].n && sub; k++)
        sub = vl_has(c, &s[1], &s[0].v[k]);
    v_bool(out, sub);
    free_sets(s, e->n);
    return 0;
}

static int all_any(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool all)
{
    bson_value_t a;
    SBL_RET(ex_kid(e, 0, c, &a, err));
    if (a.value_type != BSON_TYPE_ARRAY) {
        int rc = sbl_err_set(err, all ? 17040 : 17041,
                             "%s's argument must be an array, but is %s", e->op->name,
                             sbl_type_name(a.value_type));
        bson_value_destroy(&a);
        return rc;
    }
    vlist_t l;
    vl_from_array(&l, &a);
    bool r = all;
    for (size_t i = 0; i < l.n; i++)
        if (sbl_expr_truthy(&l.v[i]) != all) {
            r = !all;
            break;
        }
    v_bool(out, r);
    vl_free(&l);
    bson_value_destroy(&a);
    return 0;
}

int op_allElementsTrue(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return all_any(e, c, out, err, true);
}

int op_anyElementTrue(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return all_any(e, c, out, err, false);
}

/* ---- $sum $avg $min $max as expressions -------------------------------------------- */

/* The values to fold: the elements of a single array argument, else every argument. */
static int fold_inputs(const sbl_expr_t *e, ectx_t *c, vlist_t *l, sbl_err_t *err)
{
    memset(l, 0, sizeof(*l));
    for (size_t i = 0; i < e->n; i++) {
        bson_value_t v;
        SBL_RET(ex_kid(e, i, c, &v, err));
        if (e->n == 1 && v.value_type == BSON_TYPE_ARRAY)
            vl_from_array(l, &v);
        else
            vl_push_copy(l, &v);
        bson_value_destroy(&v);
    }
    return 0;
}

static int sum_avg(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool avg)
{
    vlist_t l;
    SBL_RET(fold_inputs(e, c, &l, err));
    int64_t isum = 0, count = 0;
    long double dsum = 0;
    bool has_long = false, has_double = false, has_dec = false, overflow = false;
    for (size_t i = 0; i < l.n; i++) {
        const bson_value_t *v = &l.v[i];
        if (!v_is_num(v))
            continue;
        count++;
        if (v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64) {
            int64_t x = v->value_type == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
            has_long |= v->value_type == BSON_TYPE_INT64;
            if (__builtin_add_overflow(isum, x, &isum)) {
                overflow = true;
                dsum += (long double)x;
            }
        } else {
            has_double |= v->value_type == BSON_TYPE_DOUBLE;
            has_dec |= v->value_type == BSON_TYPE_DECIMAL128;
            dsum += v_to_ldouble(v);
        }
    }
    vl_free(&l);
    long double total = (long double)isum + dsum;
    if (avg) {
        if (count == 0)
            v_null(out);
        else if (has_dec)
            v_decimal(out, total / (long double)count);
        else
            v_double(out, (double)(total / (long double)count));
    } else if (has_dec) {
        v_decimal(out, total);
    } else if (has_double || overflow) {
        v_double(out, (double)total);
    } else if (has_long || isum > INT32_MAX || isum < INT32_MIN) {
        v_i64(out, isum);
    } else {
        v_i32(out, (int32_t)isum);
    }
    return 0;
}

int op_sum(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return sum_avg(e, c, out, err, false);
}

int op_avg(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return sum_avg(e, c, out, err, true);
}

static int min_max(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool max)
{
    vlist_t l;
    SBL_RET(fold_inputs(e, c, &l, err));
    const bson_value_t *best = NULL;
    for (size_t i = 0; i < l.n; i++) {
        if (v_nullish(&l.v[i]))
            continue;
        int r = best ? v_cmp_env(c, &l.v[i], best) : 0;
        if (best == NULL || (max ? r > 0 : r < 0))
            best = &l.v[i];
    }
    if (best)
        v_copy(best, out);
    else
        v_null(out);
    vl_free(&l);
    return 0;
}

int op_min(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return min_max(e, c, out, err, false);
}

int op_max(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return min_max(e, c, out, err, true);
}

/* ---- objects ------------------------------------------------------------------------- */

int op_mergeObjects(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_t res = BSON_INITIALIZER;
    for (size_t i = 0; i < e->n; i++) {
        bson_value_t v;
        bson_t d;
        bson_iter_t it;
        int rc = ex_kid(e, i, c, &v, err);
        if (rc == 0 && !v_nullish(&v) && v.value_type != BSON_TYPE_DOCUMENT)
            rc = sbl_err_set(err, 40400, "$mergeObjects requires object inputs, but input %s "
                                         "is of type %s",
                             "value", sbl_type_name(v.value_type));
        if (rc != 0) {
            bson_value_destroy(&v);
            bson_destroy(&res);
            return rc;
        }
        if (v.value_type == BSON_TYPE_DOCUMENT && v_doc(&v, &d) && bson_iter_init(&it, &d)) {
            bson_t next = BSON_INITIALIZER;
            bson_iter_t ri;
            /* keep res's order; overwrite in place, append new fields */
            bson_iter_init(&ri, &res);
            while (bson_iter_next(&ri)) {
                bson_iter_t f;
                if (bson_iter_init_find(&f, &d, bson_iter_key(&ri)))
                    sbl_append_iter(&next, bson_iter_key(&ri), -1, &f);
                else
                    sbl_append_iter(&next, bson_iter_key(&ri), -1, &ri);
            }
            while (bson_iter_next(&it))
                if (!bson_has_field(&res, bson_iter_key(&it)))
                    sbl_append_iter(&next, bson_iter_key(&it), -1, &it);
            bson_destroy(&res);
            bson_copy_to(&next, &res);
            bson_destroy(&next);
        }
        bson_value_destroy(&v);
    }
    v_take_doc(out, &res, false);
    return 0;
}

int op_objectToArray(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t v;
    SBL_RET(ex_kid(e, 0, c, &v, err));
    int rc = 0;
    if (v_nullish(&v)) {
        v_null(out);
    } else if (v.value_type != BSON_TYPE_DOCUMENT) {
        rc = sbl_err_set(err, 40390, "$objectToArray requires a document input, found: %s",
                         sbl_type_name(v.value_type));
    } else {
        bson_t d, arr = BSON_INITIALIZER, kv;
        bson_iter_t it;
        char kb[16];
        uint32_t k = 0;
        v_doc(&v, &d);
        bson_iter_init(&it, &d);
        while (bson_iter_next(&it)) {
            bson_append_document_begin(&arr, v_key(k++, kb), -1, &kv);
            bson_append_utf8(&kv, "k", 1, bson_iter_key(&it), -1);
            sbl_append_iter(&kv, "v", 1, &it);
            bson_append_document_end(&arr, &kv);
        }
        v_take_doc(out, &arr, true);
    }
    bson_value_destroy(&v);
    return rc;
}

int op_arrayToObject(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a;
    bool n;
    SBL_RET(arr_arg(e, 0, c, &a, &n, 40386,
                    "%s requires an array input, found: %s", err));
    if (n) {
        v_null(out);
        bson_value_destroy(&a);
        return 0;
    }
    vlist_t l;
    bson_t res = BSON_INITIALIZER;
    int rc = 0;
    vl_from_array(&l, &a);
    for (size_t i = 0; i < l.n && rc == 0; i++) {
        bson_t d;
        bson_iter_t it;
        const char *key = NULL;
        bson_value_t val;
        bool has_val = false;
        const bson_value_t *el = &l.v[i];
        if (el->value_type == BSON_TYPE_ARRAY && v_doc(el, &d) && bson_count_keys(&d) == 2) {
            bson_iter_init(&it, &d);
            bson_iter_next(&it);
            if (BSON_ITER_HOLDS_UTF8(&it))
                key = bson_iter_utf8(&it, NULL);
            bson_iter_next(&it);
            sbl_iter_value(&it, &val);
            has_val = true;
        } else if (el->value_type == BSON_TYPE_DOCUMENT && v_doc(el, &d) &&
                   bson_count_keys(&d) == 2) {
            if (bson_iter_init_find(&it, &d, "k") && BSON_ITER_HOLDS_UTF8(&it))
                key = bson_iter_utf8(&it, NULL);
            if (bson_iter_init_find(&it, &d, "v")) {
                sbl_iter_value(&it, &val);
                has_val = true;
            }
        }
        if (key == NULL || !has_val) {
            rc = sbl_err_set(err, 40398, "$arrayToObject requires an array of key-value pairs "
                                         "or an array of {k, v} documents");
            break;
        }
        if (bson_has_field(&res, key)) {
            bson_t next = BSON_INITIALIZER;
            bson_iter_t ri;
            bson_iter_init(&ri, &res);
            while (bson_iter_next(&ri))
                if (strcmp(bson_iter_key(&ri), key) == 0)
                    sbl_append_value(&next, key, -1, &val);
                else
                    sbl_append_iter(&next, bson_iter_key(&ri), -1, &ri);
            bson_destroy(&res);
            bson_copy_to(&next, &res);
            bson_destroy(&next);
        } else {
            sbl_append_value(&res, key, -1, &val);
        }
    }
    vl_free(&l);
    bson_value_destroy(&a);
    if (rc == 0)
        v_take_doc(out, &res, false);
    else
        bson_destroy(&res);
    return rc;
}

int op_getField(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t f, in;
    SBL_RET(ex_kid(e, 0, c, &f, err));
    if (f.value_type != BSON_TYPE_UTF8) {
        bson_value_destroy(&f);
        return sbl_err_set(err, 5648, "$getField requires 'field' to evaluate to type String, "
                                      "but got %s",
                           sbl_type_name(f.value_type));
    }
    int rc;
    if (e->n > 1 && e->kids[1] != NULL)
        rc = ex_kid(e, 1, c, &in, err);
    else
        rc = ex_var(c, "CURRENT", &in, err);
    if (rc == 0 && v_nullish(&in)) {
        if (in.value_type != BSON_TYPE_EOD)
            v_null(out);
    } else if (rc == 0 && in.value_type != BSON_TYPE_DOCUMENT) {
        rc = sbl_err_set(err, 3041705, "$getField requires 'input' to evaluate to type Object");
    } else if (rc == 0) {
        bson_t d;
        bson_iter_t it;
        v_doc(&in, &d);
        if (bson_iter_init_find(&it, &d, f.value.v_utf8.str)) {
            bson_value_t v;
            sbl_iter_value(&it, &v);
            v_copy(&v, out);
        }
    }
    bson_value_destroy(&f);
    bson_value_destroy(&in);
    return rc;
}

int op_setField(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t f, in, val;
    SBL_RET(ex_kid(e, 0, c, &f, err));
    if (f.value_type != BSON_TYPE_UTF8) {
        bson_value_destroy(&f);
        return sbl_err_set(err, 4161106, "$setField requires 'field' to evaluate to type String");
    }
    v_missing(&val);
    int rc = ex_kid(e, 1, c, &in, err);
    if (rc == 0)
        rc = ex_kid(e, 2, c, &val, err);
    if (rc == 0 && v_nullish(&in)) {
        v_null(out);
    } else if (rc == 0 && in.value_type != BSON_TYPE_DOCUMENT) {
        rc = sbl_err_set(err, 4161105, "$setField requires 'input' to evaluate to type Object");
    } else if (rc == 0) {
        bson_t d, res = BSON_INITIALIZER;
        bson_iter_t it;
        bool done = false;
        v_doc(&in, &d);
        bson_iter_init(&it, &d);
        while (bson_iter_next(&it)) {
            if (strcmp(bson_iter_key(&it), f.value.v_utf8.str) == 0) {
                done = true;
                if (val.value_type != BSON_TYPE_EOD)
                    sbl_append_value(&res, bson_iter_key(&it), -1, &val);
            } else {
                sbl_append_iter(&res, bson_iter_key(&it), -1, &it);
            }
        }
        if (!done && val.value_type != BSON_TYPE_EOD)
            sbl_append_value(&res, f.value.v_utf8.str, -1, &val);
        v_take_doc(out, &res, false);
    }
    bson_value_destroy(&f);
    bson_value_destroy(&in);
    bson_value_destroy(&val);
    return rc;
}

int op_zip(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t ins, lon, defs;
    int rc;
    SBL_RET(ex_kid(e, 0, c, &ins, err));
    v_missing(&lon);
    v_missing(&defs);
    if ((rc = ex_kid(e, 1, c, &lon, err)) == 0)
        rc = ex_kid(e, 2, c, &defs, err);
    if (rc == 0 && v_nullish(&ins)) {
        v_null(out);
        goto done;
    }
    if (rc == 0 && ins.value_type != BSON_TYPE_ARRAY)
        rc = sbl_err_set(err, 34461, "inputs must be an array of expressions, found %s",
                         sbl_type_name(ins.value_type));
    if (rc != 0)
        goto done;
    vlist_t arrays, dl = {0};
    vl_from_array(&arrays, &ins);
    if (defs.value_type == BSON_TYPE_ARRAY)
        vl_from_array(&dl, &defs);
    bool longest = sbl_expr_truthy(&lon);
    size_t maxn = 0, minn = SIZE_MAX;
    vlist_t *cols = bson_malloc0((arrays.n + 1) * sizeof(*cols));
    bool isnull = false;
    for (size_t i = 0; i < arrays.n && rc == 0; i++) {
        if (v_nullish(&arrays.v[i])) {
            isnull = true;
            continue;
        }
        if (arrays.v[i].value_type != BSON_TYPE_ARRAY) {
            rc = sbl_err_set(err, 34468, "$zip found a non-array expression in input: %s",
                             sbl_type_name(arrays.v[i].value_type));
            break;
        }
        vl_from_array(&cols[i], &arrays.v[i]);
        maxn = cols[i].n > maxn ? cols[i].n : maxn;
        minn = cols[i].n < minn ? cols[i].n : minn;
    }
    if (rc == 0 && isnull) {
        v_null(out);
    } else if (rc == 0) {
        size_t rows = arrays.n == 0 ? 0 : longest ? maxn : minn;
        vlist_t res = {0};
        for (size_t r = 0; r < rows; r++) {
            vlist_t row = {0};
            bson_value_t rv, nullv;
            v_null(&nullv);
            for (size_t i = 0; i < arrays.n; i++)
                vl_push_copy(&row, r < cols[i].n ? &cols[i].v[r] : i < dl.n ? &dl.v[i] : &nullv);
            vl_to_array(&row, &rv);
            vl_push_copy(&res, &rv);
            bson_value_destroy(&rv);
            vl_free(&row);
        }
        vl_to_array(&res, out);
        vl_free(&res);
    }
    for (size_t i = 0; i < arrays.n; i++)
        vl_free(&cols[i]);
    bson_free(cols);
    vl_free(&arrays);
    vl_free(&dl);
done:
    bson_value_destroy(&ins);
    bson_value_destroy(&lon);
    bson_value_destroy(&defs);
    return rc;
}

static _Thread_local const bson_value_t *tls_sort_by;
static _Thread_local const ectx_t *tls_sort_ctx; /* for its collation */

static int cmp_sortarray(const void *a, const void *b)
{
    const bson_value_t *x = a, *y = b, *by = tls_sort_by;
    if (by->value_type != BSON_TYPE_DOCUMENT) {
        int r = v_cmp_env(tls_sort_ctx, x, y);
        return v_to_double(by) < 0 ? -r : r;
    }
    bson_t d;
    bson_iter_t it;
    v_doc(by, &d);
    bson_iter_init(&it, &d);
    while (bson_iter_next(&it)) {
        bson_value_t xv, yv;
        ex_resolve(x, bson_iter_key(&it), &xv);
        ex_resolve(y, bson_iter_key(&it), &yv);
        if (xv.value_type == BSON_TYPE_EOD)
            v_null(&xv);
        if (yv.value_type == BSON_TYPE_EOD)
            v_null(&yv);
        int r = v_cmp_env(tls_sort_ctx, &xv, &yv);
        bson_value_destroy(&xv);
        bson_value_destroy(&yv);
        if (r != 0)
            return bson_iter_as_int64(&it) < 0 ? -r : r;
    }
    return 0;
}

int op_sortArray(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, by;
    bool n;
    SBL_RET(arr_arg(e, 0, c, &a, &n, 2942504,
                    "%s requires an array as input, found: %s", err));
    int rc = ex_kid(e, 1, c, &by, err);
    if (rc == 0 && n) {
        v_null(out);
    } else if (rc == 0) {
        vlist_t l;
        vl_from_array(&l, &a);
        tls_sort_by = &by;
        tls_sort_ctx = c;
        if (l.n > 1) /* l.v is NULL when empty */
            qsort(l.v, l.n, sizeof(*l.v), cmp_sortarray); /* not stable, unlike MongoDB */
        vl_to_array(&l, out);
        vl_free(&l);
    }
    bson_value_destroy(&a);
    bson_value_destroy(&by);
    return rc;
}
