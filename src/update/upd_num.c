/*
 * upd_num.c: $inc/$mul arithmetic.  Decimal128 values are worked on as a
 * sign, a 128-bit coefficient (at most 34 digits) and a base-10 exponent;
 * results that need more than 34 digits are rounded half-to-even, as IEEE
 * decimal does.  NaN and infinities fall back to double arithmetic.
 *
 * What must stay true: see upd_num.h; no signed overflow is ever executed.
 */
#include "update/upd_num.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned __int128 u128;

typedef struct dec {
    bool neg;
    u128 coef;
    int exp;
} dec_t;

static u128 dec_max(void)
{
    u128 m = 1;
    for (int i = 0; i < 34; i++)
        m *= 10;
    return m - 1;
}

/* Parse "-12.5E+3"-style text; false for NaN, Infinity or junk. */
static bool dec_parse(const char *s, dec_t *d)
{
    int frac = 0, digits = 0;
    bool dot = false;

    memset(d, 0, sizeof(*d));
    if (*s == '-' || *s == '+')
        d->neg = *s++ == '-';
    for (; *s; s++) {
        if (*s == '.' && !dot) {
            dot = true;
        } else if (*s >= '0' && *s <= '9') {
            if (digits > 0 || *s != '0')
                digits++;
            if (digits > 34)
                return false;
            d->coef = d->coef * 10 + (u128)(*s - '0');
            frac += dot;
        } else {
            break;
        }
    }
    if (*s == 'e' || *s == 'E') {
        char *end;
        long e = strtol(s + 1, &end, 10);
        if (*end != '\0' || e > 100000 || e < -100000)
            return false;
        d->exp = (int)e;
    } else if (*s != '\0') {
        return false;
    }
    d->exp -= frac;
    return true;
}

static bool to_dec(const bson_value_t *v, dec_t *d)
{
    char buf[BSON_DECIMAL128_STRING + 8];

    memset(d, 0, sizeof(*d));
    switch (v->value_type) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64: {
        int64_t x = v->value_type == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
        d->neg = x < 0;
        d->coef = x < 0 ? (u128)(-(x + 1)) + 1 : (u128)x;
        return true;
    }
    case BSON_TYPE_DOUBLE:
        if (!isfinite(v->value.v_double))
            return false;
        /* MongoDB converts a double to decimal with 15 significant digits. */
        snprintf(buf, sizeof(buf), "%.14e", v->value.v_double);
        return dec_parse(buf, d);
    case BSON_TYPE_DECIMAL128:
        bson_decimal128_to_string(&v->value.v_decimal128, buf);
        return dec_parse(buf, d);
    default:
        return false;
    }
}

static void dec_shift_right(dec_t *d)
{
    u128 q = d->coef / 10, r = d->coef % 10;
    if (r > 5 || (r == 5 && (q & 1)))
        q++;
    d->coef = q;
    d->exp++;
}

static bool dec_to_value(dec_t *d, bson_value_t *out)
{
    char digits[48], buf[64];
    size_t n = 0;
    u128 c = d->coef;

    do {
        digits[n++] = (char)('0' + (int)(c % 10));
        c /= 10;
    } while (c > 0);
    size_t k = 0;
    if (d->neg && d->coef != 0)
        buf[k++] = '-';
    while (n > 0)
        buf[k++] = digits[--n];
    snprintf(buf + k, sizeof(buf) - k, "E%d", d->exp);
    out->value_type = BSON_TYPE_DECIMAL128;
    return bson_decimal128_from_string(buf, &out->value.v_decimal128);
}

static bool dec_add(dec_t a, dec_t b, bson_value_t *out)
{
    u128 max = dec_max();
    dec_t r;

    if (a.exp < b.exp) {
        dec_t t = a;
        a = b;
        b = t;
    }
    while (a.exp > b.exp && a.coef <= max / 10) {
        a.coef *= 10;
        a.exp--;
    }
    while (a.exp > b.exp)
        dec_shift_right(&b);
    r.exp = a.exp;
    if (a.neg == b.neg) {
        r.coef = a.coef + b.coef;
        r.neg = a.neg;
    } else if (a.coef >= b.coef) {
        r.coef = a.coef - b.coef;
        r.neg = a.neg;
    } else {
        r.coef = b.coef - a.coef;
        r.neg = b.neg;
    }
    if (r.coef == 0)
        r.neg = false;
    while (r.coef > max)
        dec_shift_right(&r);
    return dec_to_value(&r, out);
}

static bool dec_mul(dec_t a, dec_t b, bson_value_t *out)
{
    u128 max = dec_max(), p;
    dec_t r;

    while (__builtin_mul_overflow(a.coef, b.coef, &p) || p > max) {
        if (a.coef > b.coef)
            dec_shift_right(&a);
        else
            dec_shift_right(&b);
    }
    r.coef = p;
    r.exp = a.exp + b.exp;
    r.neg = (a.neg != b.neg) && p != 0;
    return dec_to_value(&r, out);
}

bool upd_num_to_double(const bson_value_t *v, bson_value_t *out)
{
    char buf[BSON_DECIMAL128_STRING];

    out->value_type = BSON_TYPE_DOUBLE;
    out->value.v_double = 0.0; /* not a number: the caller gets false and a defined value */
    switch (v->value_type) {
    case BSON_TYPE_INT32: out->value.v_double = v->value.v_int32; return true;
    case BSON_TYPE_INT64: out->value.v_double = (double)v->value.v_int64; return true;
    case BSON_TYPE_DOUBLE: out->value.v_double = v->value.v_double; return true;
    case BSON_TYPE_DECIMAL128:
        bson_decimal128_to_string(&v->value.v_decimal128, buf);
        out->value.v_double = strtod(buf, NULL);
        return true;
    default: return false;
    }
}

void upd_num_zero(bson_type_t like, bson_value_t *out)
{
    memset(out, 0, sizeof(*out));
    out->value_type = like;
    if (like == BSON_TYPE_DECIMAL128)
        bson_decimal128_from_string("0", &out->value.v_decimal128);
}

static bool arith_decimal(bool mul, const bson_value_t *x, const bson_value_t *y,
                          bson_value_t *out)
{
    dec_t a, b;
    bson_value_t dx, dy;
    double r;

    if (to_dec(x, &a) && to_dec(y, &b))
        return mul ? dec_mul(a, b, out) : dec_add(a, b, out);
    /* NaN or an infinity is involved: the double result has the same meaning. */
    upd_num_to_double(x, &dx);
    upd_num_to_double(y, &dy);
    r = mul ? dx.value.v_double * dy.value.v_double : dx.value.v_double + dy.value.v_double;
    out->value_type = BSON_TYPE_DECIMAL128;
    return bson_decimal128_from_string(isnan(r) ? "NaN" : r > 0 ? "Infinity" : "-Infinity",
                                       &out->value.v_decimal128);
}

bool upd_num_arith(bool mul, const bson_value_t *x, const bson_value_t *y, bson_value_t *out)
{
    bson_type_t tx = x->value_type, ty = y->value_type;

    memset(out, 0, sizeof(*out));
    if (tx == BSON_TYPE_DECIMAL128 || ty == BSON_TYPE_DECIMAL128)
        return arith_decimal(mul, x, y, out);
    if (tx == BSON_TYPE_DOUBLE || ty == BSON_TYPE_DOUBLE) {
        bson_value_t dx, dy;
        upd_num_to_double(x, &dx);
        upd_num_to_double(y, &dy);
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double =
            mul ? dx.value.v_double * dy.value.v_double : dx.value.v_double + dy.value.v_double;
        return true;
    }
    int64_t a = tx == BSON_TYPE_INT32 ? x->value.v_int32 : x->value.v_int64;
    int64_t b = ty == BSON_TYPE_INT32 ? y->value.v_int32 : y->value.v_int64;
    int64_t r;
    if (mul ? __builtin_mul_overflow(a, b, &r) : __builtin_add_overflow(a, b, &r))
        return false;
    if (tx == BSON_TYPE_INT32 && ty == BSON_TYPE_INT32 && r >= INT32_MIN && r <= INT32_MAX) {
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = (int32_t)r;
    } else {
        out->value_type = BSON_TYPE_INT64;
        out->value.v_int64 = r;
    }
    return true;
}
