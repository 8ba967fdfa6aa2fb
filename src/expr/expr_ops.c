/*
 * expr_ops.c: arithmetic, comparison, boolean and conditional operators of
 * the expression language (the string and regular-expression operators are
 * in expr_str.c).
 *
 * What must stay true: integer arithmetic keeps MongoDB's result types
 * (int32 widens to int64 on overflow, int64 to double), null or missing
 * inputs give null where MongoDB gives null, and type errors use MongoDB's
 * codes and wording.
 */
#include "expr/expr_int.h"

#include <math.h>
#include <stdlib.h>

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
