/*
 * expr_ops.c: arithmetic, comparison, boolean, conditional and string
 * operators of the expression language.
 *
 * What must stay true: integer arithmetic keeps MongoDB's result types
 * (int32 widens to int64 on overflow, int64 to double), null or missing
 * inputs give null where MongoDB gives null, and type errors use MongoDB's
 * codes and wording.
 */
#include "expr/expr_int.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"

/* Evaluate every kid into a fresh array (caller frees with free_vals). */
static int eval_all(const sbl_expr_t *e, ectx_t *c, bson_value_t **valsp, sbl_err_t *err)
{
    bson_value_t *vals = bson_malloc0((e->n + 1) * sizeof(*vals));
    for (size_t i = 0; i < e->n; i++) {
        int rc = ex_kid(e, i, c, &vals[i], err);
        if (rc != 0) {
            for (size_t j = 0; j < i; j++)
                bson_value_destroy(&vals[j]);
            bson_free(vals);
            return rc;
        }
    }
    *valsp = vals;
    return 0;
}

static void free_vals(bson_value_t *vals, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bson_value_destroy(&vals[i]);
    bson_free(vals);
}

/* ---- arithmetic ------------------------------------------------------------------ */

/* Number kinds in widening order. */
enum { NK_INT, NK_LONG, NK_DOUBLE, NK_DEC };

static int num_kind(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32: return NK_INT;
    case BSON_TYPE_INT64: return NK_LONG;
    case BSON_TYPE_DOUBLE: return NK_DOUBLE;
    default: return NK_DEC;
    }
}

/* Store an integer result in the narrowest of the kinds at least `kind`. */
static void set_int_result(bson_value_t *out, int64_t x, int kind)
{
    if (kind == NK_INT && x >= INT32_MIN && x <= INT32_MAX)
        v_i32(out, (int32_t)x);
    else
        v_i64(out, x);
}

static void set_num(bson_value_t *out, long double x, int kind)
{
    if (kind == NK_DEC)
        v_decimal(out, x);
    else
        v_double(out, (double)x);
}

int op_add(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t *vals;
    SBL_RET(eval_all(e, c, &vals, err));
    int kind = NK_INT, rc = 0;
    bool has_date = false, is_null = false, overflow = false;
    int64_t isum = 0;
    long double dsum = 0;
    for (size_t i = 0; i < e->n; i++) {
        const bson_value_t *v = &vals[i];
        if (v_nullish(v)) {
            is_null = true;
            continue;
        }
        if (v->value_type == BSON_TYPE_DATE_TIME) {
            if (has_date) {
                rc = sbl_err_set(err, 16612, "only one date allowed in an $add expression");
                break;
            }
            has_date = true;
            if (__builtin_add_overflow(isum, v->value.v_datetime, &isum))
                overflow = true;
            continue;
        }
        if (!v_is_num(v)) {
            rc = sbl_err_set(err, 16554, "$add only supports numeric or date types, not %s",
                             sbl_type_name(v->value_type));
            break;
        }
        int k = num_kind(v);
        if (k > kind)
            kind = k;
        if (k <= NK_LONG) {
            int64_t x = v->value_type == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
            if (__builtin_add_overflow(isum, x, &isum)) {
                overflow = true;
                dsum += (long double)x;
            }
        } else {
            dsum += v_to_ldouble(v);
        }
    }
    free_vals(vals, e->n);
    if (rc != 0)
        return rc;
    if (is_null) {
        v_null(out);
        return 0;
    }
    if (has_date) {
        long double t = (long double)isum + dsum;
        v_date(out, (int64_t)llroundl(t));
        return 0;
    }
    if (overflow && kind <= NK_LONG)
        kind = NK_DOUBLE;
    if (kind <= NK_LONG)
        set_int_result(out, isum, kind);
    else
        set_num(out, (long double)isum + dsum, kind);
    return 0;
}

int op_multiply(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t *vals;
    SBL_RET(eval_all(e, c, &vals, err));
    int kind = NK_INT, rc = 0;
    bool is_null = false, overflow = false;
    int64_t iprod = 1;
    long double dprod = 1;
    for (size_t i = 0; i < e->n; i++) {
        const bson_value_t *v = &vals[i];
        if (v_nullish(v)) {
            is_null = true;
            continue;
        }
        if (!v_is_num(v)) {
            rc = sbl_err_set(err, 16555, "$multiply only supports numeric types, not %s",
                             sbl_type_name(v->value_type));
            break;
        }
        int k = num_kind(v);
        if (k > kind)
            kind = k;
        if (k <= NK_LONG && !overflow) {
            int64_t x = v->value_type == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
            if (__builtin_mul_overflow(iprod, x, &iprod))
                overflow = true;
        }
        dprod *= v_to_ldouble(v);
    }
    free_vals(vals, e->n);
    if (rc != 0)
        return rc;
    if (is_null)
        v_null(out);
    else if (kind <= NK_LONG && !overflow)
        set_int_result(out, iprod, kind);
    else
        set_num(out, dprod, kind == NK_DEC ? NK_DEC : NK_DOUBLE);
    return 0;
}

int op_subtract(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, b;
    int rc = 0;
    SBL_RET(ex_kid(e, 0, c, &a, err));
    if ((rc = ex_kid(e, 1, c, &b, err)) != 0) {
        bson_value_destroy(&a);
        return rc;
    }
    if (v_nullish(&a) || v_nullish(&b)) {
        v_null(out);
    } else if (a.value_type == BSON_TYPE_DATE_TIME && b.value_type == BSON_TYPE_DATE_TIME) {
        v_i64(out, a.value.v_datetime - b.value.v_datetime);
    } else if (a.value_type == BSON_TYPE_DATE_TIME && v_is_num(&b)) {
        v_date(out, a.value.v_datetime - (int64_t)llroundl(v_to_ldouble(&b)));
    } else if (v_is_num(&a) && v_is_num(&b)) {
        int kind = num_kind(&a) > num_kind(&b) ? num_kind(&a) : num_kind(&b);
        int64_t x, y, r;
        if (kind <= NK_LONG && v_to_i64(&a, &x) && v_to_i64(&b, &y) &&
            !__builtin_sub_overflow(x, y, &r))
            set_int_result(out, r, kind);
        else
            set_num(out, v_to_ldouble(&a) - v_to_ldouble(&b), kind == NK_DEC ? NK_DEC : NK_DOUBLE);
    } else {
        rc = sbl_err_set(err, 16556, "can't $subtract %s from %s",
                         sbl_type_name(b.value_type), sbl_type_name(a.value_type));
    }
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

/* Evaluate two numeric arguments; *nullp when either is nullish. */
static int two_nums(const sbl_expr_t *e, ectx_t *c, bson_value_t *a, bson_value_t *b, bool *nullp,
                    int code, sbl_err_t *err)
{
    SBL_RET(ex_kid(e, 0, c, a, err));
    int rc = ex_kid(e, 1, c, b, err);
    if (rc != 0) {
        bson_value_destroy(a);
        return rc;
    }
    *nullp = v_nullish(a) || v_nullish(b);
    if (!*nullp && (!v_is_num(a) || !v_is_num(b))) {
        rc = sbl_err_set(err, code, "%s only supports numeric types, not %s and %s", e->op->name,
                         sbl_type_name(a->value_type), sbl_type_name(b->value_type));
        bson_value_destroy(a);
        bson_value_destroy(b);
        return rc;
    }
    return 0;
}

int op_divide(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, b;
    bool isnull;
    SBL_RET(two_nums(e, c, &a, &b, &isnull, 16609, err));
    int rc = 0;
    if (isnull) {
        v_null(out);
    } else if (v_to_ldouble(&b) == 0) {
        rc = sbl_err_set(err, SBL_E_BadValue, "can't $divide by zero");
    } else {
        bool dec = a.value_type == BSON_TYPE_DECIMAL128 || b.value_type == BSON_TYPE_DECIMAL128;
        set_num(out, v_to_ldouble(&a) / v_to_ldouble(&b), dec ? NK_DEC : NK_DOUBLE);
    }
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

int op_mod(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, b;
    bool isnull;
    SBL_RET(two_nums(e, c, &a, &b, &isnull, 16611, err));
    int rc = 0;
    int kind = num_kind(&a) > num_kind(&b) ? num_kind(&a) : num_kind(&b);
    int64_t x, y;
    if (isnull) {
        v_null(out);
    } else if (v_to_ldouble(&b) == 0) {
        rc = sbl_err_set(err, 16610, "can't $mod by zero");
    } else if (kind <= NK_LONG && v_to_i64(&a, &x) && v_to_i64(&b, &y)) {
        set_int_result(out, y == -1 ? 0 : x % y, kind);
    } else {
        set_num(out, fmodl(v_to_ldouble(&a), v_to_ldouble(&b)), kind == NK_DEC ? NK_DEC : NK_DOUBLE);
    }
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

int op_pow(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, b;
    bool isnull;
    SBL_RET(two_nums(e, c, &a, &b, &isnull, 28762, err));
    int rc = 0;
    int kind = num_kind(&a) > num_kind(&b) ? num_kind(&a) : num_kind(&b);
    if (isnull) {
        v_null(out);
    } else if (v_to_ldouble(&a) == 0 && v_to_ldouble(&b) < 0) {
        rc = sbl_err_set(err, 28764, "$pow cannot take a base of 0 and a negative exponent");
    } else {
        long double r = powl(v_to_ldouble(&a), v_to_ldouble(&b));
        int64_t ir;
        bson_value_t rv;
        v_double(&rv, (double)r);
        if (kind <= NK_LONG && v_to_ldouble(&b) >= 0 && fabsl(r) < 9.2e18L && v_to_i64(&rv, &ir))
            set_int_result(out, ir, kind);
        else
            set_num(out, r, kind == NK_DEC ? NK_DEC : NK_DOUBLE);
    }
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

int op_log(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, b;
    bool isnull;
    SBL_RET(two_nums(e, c, &a, &b, &isnull, 28756, err));
    int rc = 0;
    if (isnull)
        v_null(out);
    else if (v_to_ldouble(&a) <= 0)
        rc = sbl_err_set(err, 28758, "$log's argument must be a positive number, but is %g",
                         v_to_double(&a));
    else if (v_to_ldouble(&b) <= 0 || v_to_ldouble(&b) == 1)
        rc = sbl_err_set(err, 28759, "$log's base must be a positive number not equal to 1, but "
                                     "is %g",
                         v_to_double(&b));
    else
        set_num(out, logl(v_to_ldouble(&a)) / logl(v_to_ldouble(&b)),
                a.value_type == BSON_TYPE_DECIMAL128 ? NK_DEC : NK_DOUBLE);
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

/* One-argument numeric functions. */
static int unary_num(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, bson_value_t *a,
                     bool *donep, int code, sbl_err_t *err)
{
    *donep = false;
    SBL_RET(ex_kid(e, 0, c, a, err));
    if (v_nullish(a)) {
        bson_value_destroy(a);
        v_null(out);
        *donep = true;
        return 0;
    }
    if (!v_is_num(a)) {
        int rc = sbl_err_set(err, code, "%s only supports numeric types, not %s", e->op->name,
                             sbl_type_name(a->value_type));
        bson_value_destroy(a);
        return rc;
    }
    return 0;
}

int op_abs(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a;
    bool done;
    SBL_RET(unary_num(e, c, out, &a, &done, 28765, err));
    if (done)
        return 0;
    int64_t x;
    if (a.value_type == BSON_TYPE_INT32)
        set_int_result(out, llabs((long long)a.value.v_int32), NK_INT);
    else if (a.value_type == BSON_TYPE_INT64 && v_to_i64(&a, &x)) {
        if (x == INT64_MIN)
            return sbl_err_set(err, 28680, "can't take $abs of long long min");
        v_i64(out, x < 0 ? -x : x);
    } else
        set_num(out, fabsl(v_to_ldouble(&a)), num_kind(&a));
    return 0;
}

static int rounding(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err,
                    long double (*fn)(long double), int code)
{
    bson_value_t a;
    bool done;
    SBL_RET(unary_num(e, c, out, &a, &done, code, err));
    if (done)
        return 0;
    if (a.value_type == BSON_TYPE_INT32 || a.value_type == BSON_TYPE_INT64)
        v_copy(&a, out);
    else
        set_num(out, fn(v_to_ldouble(&a)), num_kind(&a));
    return 0;
}

int op_ceil(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return rounding(e, c, out, err, ceill, 28765);
}

int op_floor(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return rounding(e, c, out, err, floorl, 28765);
}

static long double round_half_even(long double x)
{
    long double r = nearbyintl(x); /* default rounding mode is to-nearest-even */
    return r;
}

/* $round / $trunc with an optional place argument. */
static int round_places(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err,
                        bool trunc)
{
    bson_value_t a, p;
    bool done;
    int64_t places = 0;
    SBL_RET(unary_num(e, c, out, &a, &done, 51081, err));
    if (done)
        return 0;
    if (e->n > 1) {
        SBL_RET(ex_kid(e, 1, c, &p, err));
        if (v_nullish(&p)) {
            bson_value_destroy(&p);
            v_null(out);
            return 0;
        }
        if (!v_to_i64(&p, &places) || places < -20 || places > 100) {
            bson_value_destroy(&p);
            return sbl_err_set(err, 51083, "cannot apply %s with precision value %g value must "
                                           "be in [-20, 100]",
                               e->op->name, v_to_double(&p));
        }
    }
    long double x = v_to_ldouble(&a), scale = powl(10.0L, (long double)places);
    long double r = trunc ? truncl(x * scale) / scale : round_half_even(x * scale) / scale;
    if (a.value_type == BSON_TYPE_INT32 || a.value_type == BSON_TYPE_INT64) {
        if (places >= 0)
            v_copy(&a, out);
        else
            set_int_result(out, (int64_t)r, num_kind(&a));
    } else {
        set_num(out, r, num_kind(&a));
    }
    return 0;
}

int op_round(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return round_places(e, c, out, err, false);
}

int op_trunc(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return round_places(e, c, out, err, true);
}

int op_sqrt(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a;
    bool done;
    SBL_RET(unary_num(e, c, out, &a, &done, 28765, err));
    if (done)
        return 0;
    if (v_to_ldouble(&a) < 0)
        return sbl_err_set(err, 28714, "$sqrt's argument must be greater than or equal to 0");
    set_num(out, sqrtl(v_to_ldouble(&a)), num_kind(&a) == NK_DEC ? NK_DEC : NK_DOUBLE);
    return 0;
}

int op_exp(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a;
    bool done;
    SBL_RET(unary_num(e, c, out, &a, &done, 28765, err));
    if (!done)
        set_num(out, expl(v_to_ldouble(&a)), num_kind(&a) == NK_DEC ? NK_DEC : NK_DOUBLE);
    return 0;
}

static int log_fn(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool ten)
{
    bson_value_t a;
    bool done;
    SBL_RET(unary_num(e, c, out, &a, &done, 28765, err));
    if (done)
        return 0;
    if (v_to_ldouble(&a) <= 0)
        return sbl_err_set(err, ten ? 28761 : 28766, "%s's argument must be a positive number, "
                                                     "but is %g",
                           e->op->name, v_to_double(&a));
    long double x = v_to_ldouble(&a);
    set_num(out, ten ? log10l(x) : logl(x), num_kind(&a) == NK_DEC ? NK_DEC : NK_DOUBLE);
    return 0;
}

int op_ln(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return log_fn(e, c, out, err, false);
}

int op_log10(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return log_fn(e, c, out, err, true);
}

int op_rand(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    v_double(out, (double)random() / ((double)RAND_MAX + 1.0));
    return 0;
}

/* ---- comparison and boolean -------------------------------------------------------- */

static int compare_args(const sbl_expr_t *e, ectx_t *c, int *cmpp, sbl_err_t *err)
{
    bson_value_t a, b;
    SBL_RET(ex_kid(e, 0, c, &a, err));
    int rc = ex_kid(e, 1, c, &b, err);
    if (rc == 0)
        *cmpp = v_cmp_env(c, &a, &b);
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

#define CMP_OP(name, test)                                                                         \
    int op_##name(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)               \
    {                                                                                              \
        int r;                                                                                     \
        SBL_RET(compare_args(e, c, &r, err));                                                      \
        v_bool(out, test);                                                                         \
        return 0;                                                                                  \
    }
CMP_OP(eq, r == 0)
CMP_OP(ne, r != 0)
CMP_OP(gt, r > 0)
CMP_OP(gte, r >= 0)
CMP_OP(lt, r < 0)
CMP_OP(lte, r <= 0)

int op_cmp(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    int r;
    SBL_RET(compare_args(e, c, &r, err));
    v_i32(out, r < 0 ? -1 : r > 0);
    return 0;
}

int op_and(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    for (size_t i = 0; i < e->n; i++) {
        bson_value_t v;
        SBL_RET(ex_kid(e, i, c, &v, err));
        bool t = sbl_expr_truthy(&v);
        bson_value_destroy(&v);
        if (!t) {
            v_bool(out, false);
            return 0;
        }
    }
    v_bool(out, true);
    return 0;
}

int op_or(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    for (size_t i = 0; i < e->n; i++) {
        bson_value_t v;
        SBL_RET(ex_kid(e, i, c, &v, err));
        bool t = sbl_expr_truthy(&v);
        bson_value_destroy(&v);
        if (t) {
            v_bool(out, true);
            return 0;
        }
    }
    v_bool(out, false);
    return 0;
}

int op_not(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t v;
    SBL_RET(ex_kid(e, 0, c, &v, err));
    v_bool(out, !sbl_expr_truthy(&v));
    bson_value_destroy(&v);
    return 0;
}

/* ---- conditionals ------------------------------------------------------------------ */

int op_cond(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t v;
    SBL_RET(ex_kid(e, 0, c, &v, err));
    bool t = sbl_expr_truthy(&v);
    bson_value_destroy(&v);
    return ex_kid(e, t ? 1 : 2, c, out, err);
}

int op_ifNull(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    for (size_t i = 0; i < e->n; i++) {
        SBL_RET(ex_kid(e, i, c, out, err));
        if (!v_nullish(out) || i + 1 == e->n)
            return 0;
        bson_value_destroy(out);
        v_missing(out);
    }
    return 0;
}

/* ---- strings ------------------------------------------------------------------------- */

/* Evaluate kid i as a string; *nullp when nullish (if allowed).  The string is a copy in v. */
static int str_arg(const sbl_expr_t *e, size_t i, ectx_t *c, bson_value_t *v, bool *nullp,
                   int code, const char *what, sbl_err_t *err)
{
    SBL_RET(ex_kid(e, i, c, v, err));
    *nullp = v_nullish(v);
    if (!*nullp && v->value_type != BSON_TYPE_UTF8 && v->value_type != BSON_TYPE_SYMBOL) {
        int rc = sbl_err_set(err, code, "%s %s, not %s", e->op->name, what,
                             sbl_type_name(v->value_type));
        bson_value_destroy(v);
        v_missing(v);
        return rc;
    }
    return 0;
}

int op_concat(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_string_t *s = bson_string_new(NULL);
    bool isnull = false;
    for (size_t i = 0; i < e->n; i++) {
        bson_value_t v;
        bool n;
        int rc = str_arg(e, i, c, &v, &n, 16702, "only supports strings", err);
        if (rc != 0) {
            bson_string_free(s, true);
            return rc;
        }
        if (n)
            isnull = true;
        else
            bson_string_append(s, v.value.v_utf8.str);
        bson_value_destroy(&v);
    }
    if (isnull)
        v_null(out);
    else
        v_str(out, s->str, s->len);
    bson_string_free(s, true);
    return 0;
}

/* Convert a value to its string form for $substr etc. (numbers and dates allowed). */
static int coerce_str(const bson_value_t *v, bson_value_t *out, const char *op, sbl_err_t *err)
{
    if (v_nullish(v)) {
        v_str(out, "", 0);
        return 0;
    }
    if (v->value_type == BSON_TYPE_UTF8) {
        v_copy(v, out);
        return 0;
    }
    if (v_is_num(v) || v->value_type == BSON_TYPE_DATE_TIME || v->value_type == BSON_TYPE_TIMESTAMP)
        return ex_convert(v, BSON_TYPE_UTF8, out, err);
    return sbl_err_set(err, 16007, "can't convert from BSON type %s to String",
                       sbl_type_name(v->value_type));
}

static int utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* $substrBytes / $substr and $substrCP. */
static int substr(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool cp)
{
    bson_value_t s, sv, a, b;
    int64_t start, len;
    int rc = 0;
    SBL_RET(ex_kid(e, 0, c, &s, err));
    rc = coerce_str(&s, &sv, e->op->name, err);
    bson_value_destroy(&s);
    if (rc != 0)
        return rc;
    v_missing(&a);
    v_missing(&b);
    if ((rc = ex_kid(e, 1, c, &a, err)) != 0 || (rc = ex_kid(e, 2, c, &b, err)) != 0)
        goto done;
    if (!v_is_num(&a) || !v_to_i64(&a, &start) || (cp && start < 0)) {
        rc = sbl_err_set(err, cp ? 34450 : 16034,
                         "%s: starting index must be a numeric type (is BSON type %s)",
                         e->op->name, sbl_type_name(a.value_type));
        goto done;
    }
    if (!v_is_num(&b) || !v_to_i64(&b, &len)) {
        rc = sbl_err_set(err, cp ? 34452 : 16035,
                         "%s: length must be a numeric type (is BSON type %s)", e->op->name,
                         sbl_type_name(b.value_type));
        goto done;
    }
    const char *str = sv.value.v_utf8.str;
    size_t n = sv.value.v_utf8.len;
    if (!cp) {
        if (start < 0)
            start = (int64_t)n;
        size_t st = (size_t)start < n ? (size_t)start : n;
        if (st < n && (str[st] & 0xC0) == 0x80) {
            rc = sbl_err_set(err, 28656, "$substrBytes:  Invalid range, starting index is a UTF-8 "
                                         "continuation byte.");
            goto done;
        }
        size_t l = len < 0 || (size_t)len > n - st ? n - st : (size_t)len;
        if (st + l < n && (str[st + l] & 0xC0) == 0x80) {
            rc = sbl_err_set(err, 28657, "$substrBytes:  Invalid range, ending index is in the "
                                         "middle of a UTF-8 character.");
            goto done;
        }
        v_str(out, str + st, l);
    } else {
        size_t i = 0;
        int64_t k = 0;
        while (i < n && k < start) {
            i += (size_t)utf8_len((unsigned char)str[i]);
            k++;
        }
        size_t j = i;
        k = 0;
        while (j < n && (len < 0 || k < len)) {
            j += (size_t)utf8_len((unsigned char)str[j]);
            k++;
        }
        if (j > n)
            j = n;
        v_str(out, str + i, j - i);
    }
done:
    bson_value_destroy(&sv);
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

int op_substrBytes(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return substr(e, c, out, err, false);
}

int op_substrCP(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return substr(e, c, out, err, true);
}

static int change_case(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err,
                       bool upper)
{
    bson_value_t s, sv;
    SBL_RET(ex_kid(e, 0, c, &s, err));
    int rc = coerce_str(&s, &sv, e->op->name, err);
    bson_value_destroy(&s);
    if (rc != 0)
        return rc;
    for (uint32_t i = 0; i < sv.value.v_utf8.len; i++) {
        char ch = sv.value.v_utf8.str[i];
        sv.value.v_utf8.str[i] = (char)(upper ? toupper((unsigned char)ch) : tolower((unsigned char)ch));
        if ((unsigned char)ch >= 0x80)
            sv.value.v_utf8.str[i] = ch;
    }
    *out = sv;
    return 0;
}

int op_toLower(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return change_case(e, c, out, err, false);
}

int op_toUpper(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return change_case(e, c, out, err, true);
}

int op_strcasecmp(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, b, as, bs;
    SBL_RET(ex_kid(e, 0, c, &a, err));
    int rc = ex_kid(e, 1, c, &b, err);
    if (rc == 0 && (rc = coerce_str(&a, &as, "$strcasecmp", err)) == 0) {
        if ((rc = coerce_str(&b, &bs, "$strcasecmp", err)) == 0) {
            int r = strcasecmp(as.value.v_utf8.str, bs.value.v_utf8.str);
            v_i32(out, r < 0 ? -1 : r > 0);
            bson_value_destroy(&bs);
        }
        bson_value_destroy(&as);
    }
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

static bool is_ws_cp(const char *s, size_t n, size_t *lenp)
{
    static const char *const ws[] = {" ", "\t", "\n", "\v", "\f", "\r", "\xc2\xa0", "\0",
                                     "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81",
                                     "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84",
                                     "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87",
                                     "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a",
                                     "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
    for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) {
        size_t l = ws[i][0] == '\0' ? 1 : strlen(ws[i]);
        if (l <= n && memcmp(s, ws[i], l) == 0) {
            *lenp = l;
            return true;
        }
    }
    return false;
}

/* Does the code point at s[0..l) appear in chars? */
static bool in_chars(const char *s, size_t l, const char *chars, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t cl = (size_t)utf8_len((unsigned char)chars[i]);
        if (cl == l && memcmp(chars + i, s, l) == 0)
            return true;
        i += cl;
    }
    return false;
}

static int trim(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool left,
                bool right)
{
    bson_value_t in, ch;
    bool n1, n2 = false;
    SBL_RET(str_arg(e, 0, c, &in, &n1, 50699, "requires its input to be a string, got", err));
    int rc = 0;
    v_missing(&ch);
    if (e->kids[1] != NULL &&
        (rc = str_arg(e, 1, c, &ch, &n2, 50700, "requires 'chars' to be a string, got", err)) != 0) {
        bson_value_destroy(&in);
        return rc;
    }
    if (n1 || n2) {
        v_null(out);
    } else {
        const char *s = in.value.v_utf8.str;
        size_t b = 0, end = in.value.v_utf8.len, l;
        bool custom = ch.value_type == BSON_TYPE_UTF8;
        while (left && b < end) {
            l = (size_t)utf8_len((unsigned char)s[b]);
            if (custom ? in_chars(s + b, l, ch.value.v_utf8.str, ch.value.v_utf8.len)
                       : is_ws_cp(s + b, end - b, &l))
                b += l;
            else
                break;
        }
        while (right && end > b) {
            size_t st = end - 1;
            while (st > b && ((unsigned char)s[st] & 0xC0) == 0x80)
                st--;
            l = end - st;
            size_t wl;
            if (custom ? in_chars(s + st, l, ch.value.v_utf8.str, ch.value.v_utf8.len)
                       : (is_ws_cp(s + st, l, &wl) && wl == l))
                end = st;
            else
                break;
        }
        v_str(out, s + b, end - b);
    }
    bson_value_destroy(&in);
    bson_value_destroy(&ch);
    return 0;
}

int op_trim(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return trim(e, c, out, err, true, true);
}

int op_ltrim(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return trim(e, c, out, err, true, false);
}

int op_rtrim(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return trim(e, c, out, err, false, true);
}

int op_split(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t s, d;
    SBL_RET(ex_kid(e, 0, c, &s, err));
    int rc = ex_kid(e, 1, c, &d, err);
    if (rc == 0 && !v_nullish(&s) && s.value_type != BSON_TYPE_UTF8)
        rc = sbl_err_set(err, 40085, "$split requires an expression that evaluates to a string "
                                     "as a first argument, found: %s",
                         sbl_type_name(s.value_type));
    else if (rc == 0 && !v_nullish(&s) && d.value_type != BSON_TYPE_UTF8)
        rc = sbl_err_set(err, 40086, "$split requires an expression that evaluates to a string "
                                     "as a second argument, found: %s",
                         sbl_type_name(d.value_type));
    else if (rc == 0 && !v_nullish(&s) && d.value.v_utf8.len == 0)
        rc = sbl_err_set(err, 40087, "$split requires a non-empty separator");
    if (rc == 0 && v_nullish(&s)) {
        v_null(out);
    } else if (rc == 0) {
        bson_t arr = BSON_INITIALIZER;
        char kb[16];
        uint32_t k = 0;
        const char *p = s.value.v_utf8.str, *end = p + s.value.v_utf8.len;
        size_t dl = d.value.v_utf8.len;
        for (;;) {
            const char *hit = NULL;
            for (const char *q = p; q + dl <= end; q++)
                if (memcmp(q, d.value.v_utf8.str, dl) == 0) {
                    hit = q;
                    break;
                }
            const char *stop = hit ? hit : end;
            bson_append_utf8(&arr, v_key(k++, kb), -1, p, (int)(stop - p));
            if (hit == NULL)
                break;
            p = hit + dl;
        }
        v_take_doc(out, &arr, true);
    }
    bson_value_destroy(&s);
    bson_value_destroy(&d);
    return rc;
}

static int str_len(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool cp)
{
    bson_value_t s;
    SBL_RET(ex_kid(e, 0, c, &s, err));
    if (s.value_type != BSON_TYPE_UTF8) {
        int rc = sbl_err_set(err, cp ? 34471 : 34473,
                             "%s requires a string argument, found: %s", e->op->name,
                             sbl_type_name(s.value_type));
        bson_value_destroy(&s);
        return rc;
    }
    int64_t n = 0;
    if (!cp) {
        n = s.value.v_utf8.len;
    } else {
        for (uint32_t i = 0; i < s.value.v_utf8.len; i++)
            if (((unsigned char)s.value.v_utf8.str[i] & 0xC0) != 0x80)
                n++;
    }
    v_i32(out, (int32_t)n);
    bson_value_destroy(&s);
    return 0;
}

int op_strLenBytes(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return str_len(e, c, out, err, false);
}

int op_strLenCP(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return str_len(e, c, out, err, true);
}

/* Byte offset of code point k in s (or len). */
static size_t cp_offset(const char *s, size_t len, int64_t k)
{
    size_t i = 0;
    while (i < len && k > 0) {
        i += (size_t)utf8_len((unsigned char)s[i]);
        k--;
    }
    return i < len ? i : len;
}

static int index_of(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool cp)
{
    bson_value_t s, sub, a, b;
    int rc = 0;
    int64_t start = 0, end = -1;
    v_missing(&s);
    v_missing(&sub);
    v_missing(&a);
    v_missing(&b);
    if ((rc = ex_kid(e, 0, c, &s, err)) != 0 || (rc = ex_kid(e, 1, c, &sub, err)) != 0 ||
        (rc = ex_kid(e, 2, c, &a, err)) != 0 || (rc = ex_kid(e, 3, c, &b, err)) != 0)
        goto done;
    if (v_nullish(&s)) {
        v_null(out);
        goto done;
    }
    if (s.value_type != BSON_TYPE_UTF8) {
        rc = sbl_err_set(err, 40091, "%s requires a string as the first argument, found: %s",
                         e->op->name, sbl_type_name(s.value_type));
        goto done;
    }
    if (sub.value_type != BSON_TYPE_UTF8) {
        rc = sbl_err_set(err, 40092, "%s requires a string as the second argument, found: %s",
                         e->op->name, sbl_type_name(sub.value_type));
        goto done;
    }
    if (a.value_type != BSON_TYPE_EOD && (!v_to_i64(&a, &start) || start < 0)) {
        rc = sbl_err_set(err, 40097, "%s requires a nonnegative integral starting index",
                         e->op->name);
        goto done;
    }
    if (b.value_type != BSON_TYPE_EOD && (!v_to_i64(&b, &end) || end < 0)) {
        rc = sbl_err_set(err, 40097, "%s requires a nonnegative integral ending index",
                         e->op->name);
        goto done;
    }
    const char *str = s.value.v_utf8.str;
    size_t n = s.value.v_utf8.len, sl = sub.value.v_utf8.len;
    size_t bs = cp ? cp_offset(str, n, start) : ((size_t)start < n ? (size_t)start : n);
    size_t be = end < 0 ? n : cp ? cp_offset(str, n, end) : ((size_t)end < n ? (size_t)end : n);
    if ((size_t)start > n && !cp) {
        v_i32(out, -1);
        goto done;
    }
    int64_t found = -1;
    for (size_t i = bs; i + sl <= be; i++) {
        if (memcmp(str + i, sub.value.v_utf8.str, sl) == 0) {
            if (!cp) {
                found = (int64_t)i;
            } else {
                found = 0;
                for (size_t j = 0; j < i; j++)
                    if (((unsigned char)str[j] & 0xC0) != 0x80)
                        found++;
            }
            break;
        }
    }
    v_i32(out, (int32_t)found);
done:
    bson_value_destroy(&s);
    bson_value_destroy(&sub);
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

int op_indexOfBytes(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return index_of(e, c, out, err, false);
}

int op_indexOfCP(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return index_of(e, c, out, err, true);
}

static int replace(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool all)
{
    bson_value_t v[3];
    int rc = 0;
    bool isnull = false;
    size_t got = 0;
    for (; got < 3 && rc == 0; got++) {
        rc = ex_kid(e, got, c, &v[got], err);
        if (rc != 0)
            break;
        if (v_nullish(&v[got]))
            isnull = true;
        else if (v[got].value_type != BSON_TYPE_UTF8) {
            static const char *const what[] = {"input", "find", "replacement"};
            rc = sbl_err_set(err, 51746, "%s requires that '%s' be a string, found: %s",
                             e->op->name, what[got], sbl_type_name(v[got].value_type));
            got++;
            break;
        }
    }
    if (rc == 0 && isnull) {
        v_null(out);
    } else if (rc == 0) {
        bson_string_t *s = bson_string_new(NULL);
        const char *p = v[0].value.v_utf8.str, *end = p + v[0].value.v_utf8.len;
        const char *f = v[1].value.v_utf8.str;
        size_t fl = v[1].value.v_utf8.len;
        bool done = false;
        while (p <= end) {
            const char *hit = NULL;
            if (!done)
                for (const char *q = p; q + fl <= end; q++)
                    if (memcmp(q, f, fl) == 0) {
                        hit = q;
                        break;
                    }
            if (hit == NULL) {
                char *tail = bson_strndup(p, (size_t)(end - p));
                bson_string_append(s, tail);
                bson_free(tail);
                break;
            }
            char *head = bson_strndup(p, (size_t)(hit - p));
            bson_string_append(s, head);
            bson_free(head);
            bson_string_append(s, v[2].value.v_utf8.str);
            if (fl == 0) {
                if (hit < end)
                    bson_string_append_c(s, *hit);
                p = hit + 1;
            } else {
                p = hit + fl;
            }
            if (!all)
                done = true;
        }
        v_str(out, s->str, s->len);
        bson_string_free(s, true);
    }
    for (size_t i = 0; i < got && i < 3; i++)
        bson_value_destroy(&v[i]);
    return rc;
}

int op_replaceOne(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return replace(e, c, out, err, false);
}

int op_replaceAll(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return replace(e, c, out, err, true);
}

/* ---- regular expressions ------------------------------------------------------------ */

typedef struct rx {
    pcre2_code *code;
    pcre2_match_data *md;
    bson_value_t input;
} rx_t;

static int rx_setup(const sbl_expr_t *e, ectx_t *c, rx_t *r, bool *nullp, sbl_err_t *err)
{
    bson_value_t re, opt;
    int rc = 0;
    const char *pattern = NULL, *flags = "";
    memset(r, 0, sizeof(*r));
    v_missing(&re);
    v_missing(&opt);
    *nullp = false;
    if ((rc = ex_kid(e, 0, c, &r->input, err)) != 0 || (rc = ex_kid(e, 1, c, &re, err)) != 0 ||
        (rc = ex_kid(e, 2, c, &opt, err)) != 0)
        goto done;
    if (!v_nullish(&r->input) && r->input.value_type != BSON_TYPE_UTF8) {
        rc = sbl_err_set(err, 51104, "%s needs 'input' to be of type string", e->op->name);
        goto done;
    }
    if (re.value_type == BSON_TYPE_REGEX) {
        pattern = re.value.v_regex.regex;
        flags = re.value.v_regex.options;
    } else if (re.value_type == BSON_TYPE_UTF8) {
        pattern = re.value.v_utf8.str;
    } else if (!v_nullish(&re)) {
        rc = sbl_err_set(err, 51105, "%s needs 'regex' to be of type string or regex",
                         e->op->name);
        goto done;
    }
    if (opt.value_type == BSON_TYPE_UTF8) {
        if (re.value_type == BSON_TYPE_REGEX && re.value.v_regex.options[0] != '\0') {
            rc = sbl_err_set(err, 51107, "%s found regex option(s) specified in both 'regex' "
                                         "and 'option' fields",
                             e->op->name);
            goto done;
        }
        flags = opt.value.v_utf8.str;
    } else if (!v_nullish(&opt)) {
        rc = sbl_err_set(err, 51106, "%s needs 'options' to be of type string", e->op->name);
        goto done;
    }
    if (v_nullish(&r->input) || pattern == NULL) {
        *nullp = true;
        goto done;
    }
    uint32_t o = PCRE2_UTF;
    for (const char *f = flags; *f; f++) {
        switch (*f) {
        case 'i': o |= PCRE2_CASELESS; break;
        case 'm': o |= PCRE2_MULTILINE; break;
        case 's': o |= PCRE2_DOTALL; break;
        case 'x': o |= PCRE2_EXTENDED; break;
        default:
            rc = sbl_err_set(err, 51108, "%s invalid flag in regex options: %c", e->op->name, *f);
            goto done;
        }
    }
    int ec;
    PCRE2_SIZE eo;
    r->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, o, &ec, &eo, NULL);
    if (r->code == NULL) {
        rc = sbl_err_set(err, 51111, "Invalid Regex in %s", e->op->name);
        goto done;
    }
    r->md = pcre2_match_data_create_from_pattern(r->code, NULL);
done:
    bson_value_destroy(&re);
    bson_value_destroy(&opt);
    return rc;
}

static void rx_free(rx_t *r)
{
    if (r->md)
        pcre2_match_data_free(r->md);
    if (r->code)
        pcre2_code_free(r->code);
    bson_value_destroy(&r->input);
}

/* Append {match, idx, captures} for the match at ov to out under key. */
static void rx_result(const rx_t *r, int n, bson_t *out, const char *key)
{
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->md);
    const char *s = r->input.value.v_utf8.str;
    bson_t d, caps;
    char kb[16];
    int32_t idx = 0;
    for (size_t i = 0; i < ov[0]; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            idx++;
    bson_append_document_begin(out, key, -1, &d);
    bson_append_utf8(&d, "match", -1, s + ov[0], (int)(ov[1] - ov[0]));
    bson_append_int32(&d, "idx", -1, idx);
    bson_append_array_begin(&d, "captures", -1, &caps);
    uint32_t ncap = 0;
    pcre2_pattern_info(r->code, PCRE2_INFO_CAPTURECOUNT, &ncap);
    for (uint32_t i = 1; i <= ncap; i++) {
        if ((int)i < n && ov[2 * i] != PCRE2_UNSET)
            bson_append_utf8(&caps, v_key(i - 1, kb), -1, s + ov[2 * i],
                             (int)(ov[2 * i + 1] - ov[2 * i]));
        else
            bson_append_null(&caps, v_key(i - 1, kb), -1);
    }
    bson_append_array_end(&d, &caps);
    bson_append_document_end(out, &d);
}

static int regex_op(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, int mode)
{
    rx_t r;
    bool isnull;
    int rc = rx_setup(e, c, &r, &isnull, err);
    if (rc != 0 || isnull) {
        if (rc == 0) {
            if (mode == 0)
                v_bool(out, false);
            else if (mode == 1)
                v_null(out);
            else {
                bson_t arr = BSON_INITIALIZER;
                v_take_doc(out, &arr, true);
            }
        }
        rx_free(&r);
        return rc;
    }
    const char *s = r.input.value.v_utf8.str;
    size_t len = r.input.value.v_utf8.len, at = 0;
    bson_t arr = BSON_INITIALIZER;
    uint32_t k = 0;
    char kb[16];
    bool any = false;
    for (;;) {
        int n = pcre2_match(r.code, (PCRE2_SPTR)s, len, at, 0, r.md, NULL);
        if (n < 0)
            break;
        any = true;
        if (mode == 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r.md);
        if (mode == 1) {
            bson_t wrap = BSON_INITIALIZER;
            bson_iter_t it;
            rx_result(&r, n, &wrap, "r");
            bson_iter_init_find(&it, &wrap, "r");
            bson_value_t v;
            sbl_iter_value(&it, &v);
            v_copy(&v, out);
            bson_destroy(&wrap);
            break;
        }
        rx_result(&r, n, &arr, v_key(k++, kb));
        at = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
        if (at > len)
            break;
    }
    if (mode == 0)
        v_bool(out, any);
    else if (mode == 1 && !any)
        v_null(out);
    if (mode == 2)
        v_take_doc(out, &arr, true);
    else
        bson_destroy(&arr);
    rx_free(&r);
    return 0;
}

int op_regexMatch(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return regex_op(e, c, out, err, 0);
}

int op_regexFind(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return regex_op(e, c, out, err, 1);
}

int op_regexFindAll(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return regex_op(e, c, out, err, 2);
}
