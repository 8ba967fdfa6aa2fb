/*
 * doc_num.c: exact numeric values across int32, int64, double and
 * decimal128, in one canonical form (sbl_numkey_t, see doc_int.h) that both
 * comparison and the key encoding use.
 *
 * What must stay true: two numbers have equal canonical forms exactly when
 * they are equal in value (so int32 5, int64 5, 5.0 and decimal 5.00 agree),
 * and sbl_numkey_cmp() agrees with memcmp of sbl_numkey_append() output.
 * A decimal128 that is not exactly a binary fraction with a 64-bit mantissa
 * is placed by its truncation toward zero to 64 bits (computed with x87
 * long double strtold under FE_TOWARDZERO), then by its decimal digits.
 */
#include <fenv.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc_int.h"

_Static_assert(LDBL_MANT_DIG == 64, "the number encoding needs the x87 80-bit long double");

typedef unsigned __int128 u128;

/* Decimal128 values with first-digit exponent outside [MIN, MAX] go to TINY/HUGE. */
#define DEC_NORMAL_MIN_EXP (-4900)
#define DEC_NORMAL_MAX_EXP 4899
#define DEC_EXP_BIAS 0x4000
#define BIN_EXP_BIAS 0x8000

bool sbl_is_number(bson_type_t t)
{
    return t == BSON_TYPE_INT32 || t == BSON_TYPE_INT64 || t == BSON_TYPE_DOUBLE ||
           t == BSON_TYPE_DECIMAL128;
}

double sbl_number_double(const bson_value_t *v)
{
    char s[BSON_DECIMAL128_STRING];
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        return v->value.v_int32;
    case BSON_TYPE_INT64:
        return (double)v->value.v_int64;
    case BSON_TYPE_DOUBLE:
        return v->value.v_double;
    case BSON_TYPE_DECIMAL128:
        bson_decimal128_to_string(&v->value.v_decimal128, s);
        return strtod(s, NULL);
    default:
        return NAN;
    }
}

static bool nk_negative(uint8_t cls)
{
    return cls == NK_NEG || cls == NK_NEG_TINY || cls == NK_NEG_HUGE;
}

/* Set a normal class from magnitude m * 2^shift (m != 0). */
static void nk_from_u64(sbl_numkey_t *k, bool neg, uint64_t m, int32_t shift)
{
    int lz = __builtin_clzll(m);
    k->cls = neg ? NK_NEG : NK_POS;
    k->exp = 63 - lz + shift;
    k->frac = (m << lz) << 1;
}

static void nk_from_int64(int64_t v, sbl_numkey_t *k)
{
    if (v == 0) {
        k->cls = NK_ZERO;
        return;
    }
    bool neg = v < 0;
    uint64_t u = neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    nk_from_u64(k, neg, u, 0);
}

static void nk_from_double(double d, sbl_numkey_t *k)
{
    if (isnan(d)) {
        k->cls = NK_NAN;
        return;
    }
    if (isinf(d)) {
        k->cls = d < 0 ? NK_NEG_INF : NK_POS_INF;
        return;
    }
    if (d == 0) {
        k->cls = NK_ZERO;
        return;
    }
    int e;
    double m = frexp(fabs(d), &e); /* [0.5, 1) */
    nk_from_u64(k, d < 0, (uint64_t)ldexp(m, 64), e - 64);
}

/* Truncate the decimal in k->dig/dexp toward zero to a 64-bit binary mantissa. */
static void nk_truncate_decimal(sbl_numkey_t *k, bool neg)
{
    /* Digits as an integer with an exponent: no decimal point, so no locale dependence. */
    char s[64];
    int n = 0;
    for (int i = 0; i < k->ndig; i++)
        s[n++] = (char)('0' + k->dig[i]);
    snprintf(s + n, sizeof(s) - (size_t)n, "e%d", (int)(k->dexp - (k->ndig - 1)));

    int saved = fegetround();
    fesetround(FE_TOWARDZERO);
    long double l = strtold(s, NULL);
    fesetround(saved);

    int e;
    long double m = frexpl(l, &e);
    uint64_t mant = (uint64_t)ldexpl(m, 64);
    nk_from_u64(k, neg, mant, e - 64);
    k->inexact = true;
}

static void nk_from_decimal(bson_decimal128_t d, sbl_numkey_t *k)
{
    uint64_t hi = d.high;
    bool neg = (hi >> 63) != 0;
    unsigned comb = (unsigned)((hi >> 58) & 0x1F);
    if (comb == 0x1F) {
        k->cls = NK_NAN;
        return;
    }
    if (comb == 0x1E) {
        k->cls = neg ? NK_NEG_INF : NK_POS_INF;
        return;
    }
    u128 c = 0;
    int32_t q = 0;
    if (((hi >> 61) & 3) != 3) { /* the other form only holds non-canonical coefficients (zero) */
        q = (int32_t)((hi >> 49) & 0x3FFF) - 6176;
        c = ((u128)(hi & ((1ULL << 49) - 1)) << 64) | d.low;
        u128 limit = (u128)1000000000000000000ULL * 10000000000000000ULL; /* 10^34 */
        if (c >= limit)
            c = 0;
    }
    if (c == 0) {
        k->cls = NK_ZERO;
        return;
    }
    while (c % 10 == 0) {
        c /= 10;
        q++;
    }
    uint8_t rev[40];
    int nd = 0;
    for (u128 t = c; t != 0; t /= 10)
        rev[nd++] = (uint8_t)(t % 10);
    k->ndig = (uint8_t)nd;
    for (int i = 0; i < nd; i++)
        k->dig[i] = rev[nd - 1 - i];
    k->dexp = q + nd - 1;
    if (k->dexp < DEC_NORMAL_MIN_EXP) {
        k->cls = neg ? NK_NEG_TINY : NK_POS_TINY;
        return;
    }
    if (k->dexp > DEC_NORMAL_MAX_EXP) {
        k->cls = neg ? NK_NEG_HUGE : NK_POS_HUGE;
        return;
    }

    /* Exact when c * 10^q is an odd integer below 2^64 times a power of two. */
    u128 t = c;
    int32_t shift = q;
    while ((t & 1) == 0) {
        t >>= 1;
        shift++;
    }
    for (int32_t i = 0; i < (q < 0 ? -q : q); i++) {
        if (q < 0 ? t % 5 != 0 : t > ((u128)UINT64_MAX) / 5) {
            nk_truncate_decimal(k, neg);
            return;
        }
        t = q < 0 ? t / 5 : t * 5;
    }
    if (t > UINT64_MAX) {
        nk_truncate_decimal(k, neg);
        return;
    }
    nk_from_u64(k, neg, (uint64_t)t, shift);
}

void sbl_numkey_make(const bson_value_t *v, sbl_numkey_t *k)
{
    k->cls = NK_ZERO;
    k->inexact = false;
    k->ndig = 0;
    k->exp = 0;
    k->frac = 0;
    k->dexp = 0;
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        nk_from_int64(v->value.v_int32, k);
        break;
    case BSON_TYPE_INT64:
        nk_from_int64(v->value.v_int64, k);
        break;
    case BSON_TYPE_DOUBLE:
        nk_from_double(v->value.v_double, k);
        break;
    case BSON_TYPE_DECIMAL128:
        nk_from_decimal(v->value.v_decimal128, k);
        break;
    default:
        break;
    }
}

static int dec_cmp(const sbl_numkey_t *a, const sbl_numkey_t *b)
{
    if (a->dexp != b->dexp)
        return a->dexp < b->dexp ? -1 : 1;
    int n = a->ndig < b->ndig ? a->ndig : b->ndig;
    int r = memcmp(a->dig, b->dig, (size_t)n);
    if (r != 0)
        return r < 0 ? -1 : 1;
    return (a->ndig > b->ndig) - (a->ndig < b->ndig);
}

int sbl_numkey_cmp(const sbl_numkey_t *a, const sbl_numkey_t *b)
{
    if (a->cls != b->cls)
        return a->cls < b->cls ? -1 : 1;
    int r = 0;
    switch (a->cls) {
    case NK_NEG_TINY:
    case NK_POS_TINY:
    case NK_NEG_HUGE:
    case NK_POS_HUGE:
        r = dec_cmp(a, b);
        break;
    case NK_NEG:
    case NK_POS:
        if (a->exp != b->exp)
            r = a->exp < b->exp ? -1 : 1;
        else if (a->frac != b->frac)
            r = a->frac < b->frac ? -1 : 1;
        else if (a->inexact != b->inexact)
            r = a->inexact ? 1 : -1;
        else if (a->inexact)
            r = dec_cmp(a, b);
        break;
    default:
        return 0;
    }
    return nk_negative(a->cls) ? -r : r;
}

/* Decimal part: first-digit exponent (2 bytes), digit pairs as 1..100, then 0. */
static void dec_append(sbl_buf_t *out, const sbl_numkey_t *k)
{
    uint16_t e = (uint16_t)(k->dexp + DEC_EXP_BIAS);
    sbl_buf_append_byte(out, (uint8_t)(e >> 8));
    sbl_buf_append_byte(out, (uint8_t)e);
    for (int i = 0; i < k->ndig; i += 2) {
        int lo = i + 1 < k->ndig ? k->dig[i + 1] : 0;
        sbl_buf_append_byte(out, (uint8_t)(k->dig[i] * 10 + lo + 1));
    }
    sbl_buf_append_byte(out, 0);
}

void sbl_numkey_append(sbl_buf_t *out, const sbl_numkey_t *k)
{
    sbl_buf_append_byte(out, k->cls);
    size_t start = out->len;
    switch (k->cls) {
    case NK_NEG_TINY:
    case NK_POS_TINY:
    case NK_NEG_HUGE:
    case NK_POS_HUGE:
        dec_append(out, k);
        break;
    case NK_NEG:
    case NK_POS: {
        uint16_t e = (uint16_t)(k->exp + BIN_EXP_BIAS);
        sbl_buf_append_byte(out, (uint8_t)(e >> 8));
        sbl_buf_append_byte(out, (uint8_t)e);
        /* 7 fraction bits per byte, low bit set when another byte follows. */
        uint64_t f = k->frac;
        for (int n = 1;; n++) {
            uint8_t chunk = (uint8_t)(f >> 57);
            f <<= 7;
            bool more = k->inexact || f != 0;
            sbl_buf_append_byte(out, (uint8_t)(chunk << 1 | more));
            if (n == 9)
                break;
            if (!more)
                break;
        }
        if (k->inexact)
            dec_append(out, k);
        break;
    }
    default:
        return;
    }
    if (nk_negative(k->cls)) {
        for (size_t i = start; i < out->len; i++)
            out->data[i] = (uint8_t)~out->data[i];
    }
}

static bool dec_read(sbl_keyrd_t *r, sbl_numkey_t *k)
{
    uint8_t b0, b1, b;
    if (!sbl_keyrd_byte(r, &b0) || !sbl_keyrd_byte(r, &b1))
        return false;
    k->dexp = (int32_t)((uint32_t)b0 << 8 | b1) - DEC_EXP_BIAS;
    k->ndig = 0;
    for (;;) {
        if (!sbl_keyrd_byte(r, &b))
            return false;
        if (b == 0)
            break;
        if (b > 100 || k->ndig >= 34)
            return false;
        b--;
        k->dig[k->ndig++] = (uint8_t)(b / 10);
        if (b % 10 != 0 || k->ndig < 34)
            k->dig[k->ndig++] = (uint8_t)(b % 10);
    }
    while (k->ndig > 0 && k->dig[k->ndig - 1] == 0)
        k->ndig--;
    return k->ndig > 0;
}

/* Append the decimal digits/dexp as a decimal128. */
static bool append_decimal(bson_t *doc, const char *key, bool neg, const uint8_t *dig, int nd,
                           int32_t dexp)
{
    char s[64];
    int n = 0;
    if (neg)
        s[n++] = '-';
    for (int i = 0; i < nd; i++)
        s[n++] = (char)('0' + dig[i]);
    snprintf(s + n, sizeof(s) - (size_t)n, "E%d", (int)(dexp - (nd - 1)));
    bson_decimal128_t d;
    if (!bson_decimal128_from_string(s, &d))
        return false;
    return bson_append_decimal128(doc, key, -1, &d);
}

/*
 * m * 2^s (s >= 0) as c * 10^q with c < 10^34, or false when no decimal128
 * coefficient can hold it.  A decimal128 like 5.7E+43 is an exact binary value
 * far beyond 10^34 as an integer, so the value is built as a big integer (32-bit
 * limbs; decimal128's range ends below 2^20415) and divided by 10 while exact.
 */
static bool pow2_to_decimal(uint64_t m, int32_t s, u128 *cp, int32_t *qp)
{
    const u128 limit = (u128)1000000000000000000ULL * 10000000000000000ULL;
    uint32_t limb[660];
    size_t w = (size_t)s / 32, top;
    if (s < 0 || w + 3 > sizeof(limb) / sizeof(limb[0]))
        return false;
    memset(limb, 0, (w + 3) * sizeof(limb[0]));
    u128 v = (u128)m << (s % 32);
    for (size_t i = 0; i < 3; i++)
        limb[w + i] = (uint32_t)(v >> (32 * i));
    top = w + 3;
    for (int32_t q = 0;; q++) {
        while (top > 0 && limb[top - 1] == 0)
            top--;
        if (top <= 4) {
            u128 c = 0;
            for (size_t i = top; i-- > 0;)
                c = c << 32 | limb[i];
            if (c < limit) {
                for (; c != 0 && c % 10 == 0; q++)
                    c /= 10;
                *cp = c;
                *qp = q;
                return true;
            }
        }
        uint64_t rem = 0;
        for (size_t i = top; i-- > 0;) {
            uint64_t cur = rem << 32 | limb[i];
            limb[i] = (uint32_t)(cur / 10);
            rem = cur % 10;
        }
        if (rem != 0)
            return false;
    }
}

/* Append an exact binary value as int32/int64, else double, else decimal128. */
static bool append_exact(bson_t *doc, const char *key, bool neg, int32_t exp, uint64_t frac)
{
    uint64_t mant = (1ULL << 63) | (frac >> 1);
    if (exp >= 0 && exp <= 63 && (exp == 0 ? frac == 0 : (frac << exp) == 0)) {
        uint64_t u = mant >> (63 - exp);
        if (u <= INT64_MAX || (neg && u == (uint64_t)1 << 63)) {
            int64_t v = neg ? (int64_t)(0 - u) : (int64_t)u;
            if (v >= INT32_MIN && v <= INT32_MAX)
                return bson_append_int32(doc, key, -1, (int32_t)v);
            return bson_append_int64(doc, key, -1, v);
        }
    }
    long double l = ldexpl((long double)mant, exp - 63);
    double d = (double)l;
    if ((long double)d == l)
        return bson_append_double(doc, key, -1, neg ? -d : d);

    /* Only a decimal128 with at most 34 digits can produce this: rebuild it. */
    int tz = __builtin_ctzll(mant);
    uint64_t m = mant >> tz;
    int32_t s = exp - 63 + tz;
    u128 limit = (u128)1000000000000000000ULL * 10000000000000000ULL;
    u128 c = m;
    int32_t q = 0;
    if (s >= 0) {
        if (!pow2_to_decimal(m, s, &c, &q))
            return false;
    } else {
        for (int32_t i = 0; i < -s; i++) {
            c *= 5;
            if (c >= limit)
                return false;
        }
        q = s;
    }
    uint8_t rev[40], dig[40];
    int nd = 0;
    for (u128 t = c; t != 0; t /= 10)
        rev[nd++] = (uint8_t)(t % 10);
    for (int i = 0; i < nd; i++)
        dig[i] = rev[nd - 1 - i];
    return append_decimal(doc, key, neg, dig, nd, q + nd - 1);
}

bool sbl_numkey_decode(sbl_keyrd_t *r, uint8_t tag, bson_t *doc, const char *k)
{
    sbl_numkey_t nk;
    bool neg = nk_negative(tag);
    uint8_t saved = r->mask;
    bool ok = false;
    if (neg)
        r->mask ^= 0xFF;
    switch (tag) {
    case NK_NAN:
        ok = bson_append_double(doc, k, -1, NAN);
        break;
    case NK_NEG_INF:
        ok = bson_append_double(doc, k, -1, -INFINITY);
        break;
    case NK_POS_INF:
        ok = bson_append_double(doc, k, -1, INFINITY);
        break;
    case NK_ZERO:
        ok = bson_append_int32(doc, k, -1, 0);
        break;
    case NK_NEG_TINY:
    case NK_POS_TINY:
    case NK_NEG_HUGE:
    case NK_POS_HUGE:
        ok = dec_read(r, &nk) && append_decimal(doc, k, neg, nk.dig, nk.ndig, nk.dexp);
        break;
    case NK_NEG:
    case NK_POS: {
        uint8_t b0, b1, b = 0;
        if (!sbl_keyrd_byte(r, &b0) || !sbl_keyrd_byte(r, &b1))
            break;
        int32_t exp = (int32_t)((uint32_t)b0 << 8 | b1) - BIN_EXP_BIAS;
        uint64_t frac = 0;
        int n = 0;
        bool more = true;
        while (more && n < 9) {
            if (!sbl_keyrd_byte(r, &b))
                goto out;
            frac |= (uint64_t)(b >> 1) << (57 - 7 * n);
            n++;
            more = (b & 1) != 0;
        }
        if (!more) {
            ok = append_exact(doc, k, neg, exp, frac);
        } else {
            /* Inexact decimal: its digits follow. */
            ok = dec_read(r, &nk) && append_decimal(doc, k, neg, nk.dig, nk.ndig, nk.dexp);
        }
        break;
    }
    default:
        break;
    }
out:
    r->mask = saved;
    return ok;
}

bool sbl_append_int(bson_t *doc, const char *key, int64_t v)
{
    if (v >= INT32_MIN && v <= INT32_MAX)
        return bson_append_int32(doc, key, -1, (int32_t)v);
    return bson_append_int64(doc, key, -1, v);
}
