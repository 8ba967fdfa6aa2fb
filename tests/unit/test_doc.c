/*
 * test_doc.c: unit tests for src/doc: MongoDB's cross-type and numeric
 * order, the keystring encoding (a fixed-seed property test: memcmp order of
 * encodings == compare order, decode round trips, descending reverses),
 * dotted paths and validation of malformed or deeply nested documents.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "doc/doc.h"

/* ---- a small deterministic generator (xorshift64*) ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static uint32_t rndn(uint32_t n)
{
    return (uint32_t)(rnd() % n);
}

static int sign(int r)
{
    return (r > 0) - (r < 0);
}

/* memcmp order with the shorter prefix first. */
static int key_cmp(const sbl_buf_t *a, const sbl_buf_t *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int r = memcmp(a->data, b->data, n);
    if (r != 0)
        return sign(r);
    return (a->len > b->len) - (a->len < b->len);
}

/* ---- building single values ---- */

/* Each test value lives in its own document under key "v". */
typedef struct tval {
    bson_t doc;
    bson_value_t v;
} tval_t;

static void tval_finish(tval_t *t)
{
    bson_iter_t it;
    bson_iter_init_find(&it, &t->doc, "v");
    sbl_iter_value(&it, &t->v);
}

static void dec_append(bson_t *d, const char *k, const char *s)
{
    bson_decimal128_t dec;
    if (!bson_decimal128_from_string(s, &dec))
        abort();
    bson_append_decimal128(d, k, -1, &dec);
}

static const double tricky_doubles[] = {
    0.0, -0.0, 1.0, -1.0, 0.5, 0.1, -0.1, 0.2, 0.3, 1e-300, 5e-324, -5e-324, 2.2250738585072014e-308,
    DBL_MAX, -DBL_MAX, 9007199254740992.0, 9007199254740994.0, -9007199254740992.0,
    9223372036854775808.0, -9223372036854775808.0, 18446744073709551616.0, 2147483647.0,
    2147483648.0, -2147483649.0, 1e15, 1e16, 1e300, 3.0, 5.0, 1.5, -1.5, 0.30000000000000004,
};

static const int64_t tricky_ints[] = {
    0, 1, -1, 2, 5, 100, -100, INT32_MAX, INT32_MIN, (int64_t)INT32_MAX + 1,
    (int64_t)INT32_MIN - 1, 9007199254740992LL, 9007199254740993LL, -9007199254740993LL,
    INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, 1LL << 62, 1000000000000000LL,
};

static const char *tricky_decimals[] = {
    "0", "-0", "0E+300", "1", "-1", "5", "5.00", "0.1", "-0.1", "0.10", "0.2", "0.3", "1.5",
    "NaN", "-NaN", "Infinity", "-Infinity", "9007199254740993", "9007199254740992",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1E+6144",
    "-1E+6144", "1E-6176", "-1E-6176", "9.999999999999999999999999999999999E+6144", "1E+4900",
    "9.99E+4898", "1E-4900", "1E-4901", "1E+400", "1E-400", "0.30000000000000004",
    "1.000000000000000000000000000000001", "0.9999999999999999999999999999999999",
    "123456789012345678901234567890.1234", "2147483648", "1E+20", "1E+30", "3.14159",
    "0.1000000000000000055511151231257827", "0.1000000000000000055511151231257828",
    "0.5", "0.25", "0.125", "1E+16", "1.7976931348623157E+308", "1.7976931348623159E+308",
    "4.9406564584124654E-324", "4.9406564584124655E-324",
};

static const char *tricky_strings[] = {
    "", "a", "a\0", "a\0b", "ab", "b", "\0", "\0\0", "\xff", "a\xff", "user1", "user10", "user2",
    "user6284781860667377211", "user6284781860667377212", "A", "Z", "abc\0def",
};
static const size_t tricky_string_lens[] = {
    0, 1, 2, 3, 2, 1, 1, 2, 1, 2, 5, 6, 5, 23, 23, 1, 1, 7,
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static void gen_value(bson_t *d, const char *k, int depth);

static void gen_fields(bson_t *d, bool array, int depth)
{
    uint32_t n = rndn(4);
    for (uint32_t i = 0; i < n; i++) {
        char key[16];
        if (array) {
            snprintf(key, sizeof(key), "%u", i);
        } else {
            static const char *names[] = {"a", "b", "ab", "_id", "x"};
            snprintf(key, sizeof(key), "%s", names[rndn(NELEM(names))]);
        }
        gen_value(d, key, depth + 1);
    }
}

static void gen_number(bson_t *d, const char *k)
{
    switch (rndn(8)) {
    case 0:
        bson_append_double(d, k, -1, tricky_doubles[rndn(NELEM(tricky_doubles))]);
        break;
    case 1:
        bson_append_int64(d, k, -1, tricky_ints[rndn(NELEM(tricky_ints))]);
        break;
    case 2: {
        int64_t v = tricky_ints[rndn(NELEM(tricky_ints))];
        if (v >= INT32_MIN && v <= INT32_MAX)
            bson_append_int32(d, k, -1, (int32_t)v);
        else
            bson_append_int32(d, k, -1, (int32_t)rndn(7) - 3);
        break;
    }
    case 3:
        dec_append(d, k, tricky_decimals[rndn(NELEM(tricky_decimals))]);
        break;
    case 4: { /* random decimal: up to 34 digits, exponent over the whole range */
        char s[64];
        int nd = 1 + (int)rndn(34), n = 0;
        if (rndn(2))
            s[n++] = '-';
        for (int i = 0; i < nd; i++)
            s[n++] = (char)('0' + rndn(10));
        int e = rndn(3) == 0 ? (int)rndn(12000) - 6100 : (int)rndn(60) - 30;
        snprintf(s + n, sizeof(s) - (size_t)n, "E%d", e);
        dec_append(d, k, s);
        break;
    }
    case 5: { /* a double and decimals next to it */
        double x = ldexp((double)(rnd() >> 11), (int)rndn(200) - 100) * (rndn(2) ? 1 : -1);
        char s[64];
        if (rndn(2)) {
            bson_append_double(d, k, -1, x);
        } else {
            snprintf(s, sizeof(s), "%.*e", (int)rndn(20) + 1, x);
            dec_append(d, k, s);
        }
        break;
    }
    case 6: /* random small-ish integers in every type */
    {
        int64_t v = (int64_t)rndn(21) - 10;
        uint32_t t = rndn(4);
        if (t == 0)
            bson_append_int32(d, k, -1, (int32_t)v);
        else if (t == 1)
            bson_append_int64(d, k, -1, v);
        else if (t == 2)
            bson_append_double(d, k, -1, (double)v / (rndn(2) ? 1 : 4));
        else {
            char s[32];
            snprintf(s, sizeof(s), "%lldE%d", (long long)v, (int)rndn(3) - 1);
            dec_append(d, k, s);
        }
        break;
    }
    default: {
        union {
            uint64_t u;
            double d;
        } u = {rnd()};
        bson_append_double(d, k, -1, u.d);
        break;
    }
    }
}

static void gen_value(bson_t *d, const char *k, int depth)
{
    uint32_t pick = rndn(depth >= 3 ? 17 : 20);
    bson_t child;
    bson_oid_t oid;
    switch (pick) {
    case 0:
        bson_append_minkey(d, k, -1);
        break;
    case 1:
        bson_append_maxkey(d, k, -1);
        break;
    case 2:
        bson_append_null(d, k, -1);
        break;
    case 3:
        bson_append_undefined(d, k, -1);
        break;
    case 4:
    case 5:
    case 6:
        gen_number(d, k);
        break;
    case 7: {
        size_t i = rndn(NELEM(tricky_strings));
        if (rndn(4) == 0)
            bson_append_symbol(d, k, -1, tricky_strings[i], (int)tricky_string_lens[i]);
        else
            bson_append_utf8(d, k, -1, tricky_strings[i], (int)tricky_string_lens[i]);
        break;
    }
    case 8: {
        char s[8];
        size_t n = rndn(5);
        for (size_t i = 0; i < n; i++)
            s[i] = "\0ab\xff"[rndn(4)];
        bson_append_utf8(d, k, -1, s, (int)n);
        break;
    }
    case 9: {
        uint8_t bytes[12] = {0};
        for (int i = 0; i < 12; i++)
            bytes[i] = (uint8_t)(rndn(3) == 0 ? rnd() : (uint64_t)i);
        bson_oid_init_from_data(&oid, bytes);
        bson_append_oid(d, k, -1, &oid);
        break;
    }
    case 10:
        bson_append_bool(d, k, -1, rndn(2) == 1);
        break;
    case 11:
        bson_append_date_time(d, k, -1, (int64_t)rnd() >> rndn(64));
        break;
    case 12:
        bson_append_timestamp(d, k, -1, rndn(3) == 0 ? (uint32_t)rnd() : rndn(3), rndn(3));
        break;
    case 13: {
        uint8_t bin[4] = {(uint8_t)rndn(3), 0, 0xff, 1};
        bson_append_binary(d, k, -1, rndn(2) ? BSON_SUBTYPE_BINARY : BSON_SUBTYPE_UUID, bin,
                           rndn(5));
        break;
    }
    case 14: {
        static const char *pats[] = {"", "a", "a.*", "b"};
        static const char *opts[] = {"", "i", "im"};
        bson_append_regex(d, k, -1, pats[rndn(4)], opts[rndn(3)]);
        break;
    }
    case 15: {
        static const char *code[] = {"", "f()", "g()"};
        if (rndn(2)) {
            bson_append_code(d, k, -1, code[rndn(3)]);
        } else {
            bson_t scope = BSON_INITIALIZER;
            if (rndn(2))
                BSON_APPEND_INT32(&scope, "x", (int32_t)rndn(2));
            bson_append_code_with_scope(d, k, -1, code[rndn(3)], &scope);
            bson_destroy(&scope);
        }
        break;
    }
    case 16: {
        uint8_t bytes[12] = {1, 2, 3};
        bytes[11] = (uint8_t)rndn(2);
        bson_oid_init_from_data(&oid, bytes);
        bson_append_dbpointer(d, k, -1, rndn(2) ? "db.a" : "db.bb", &oid);
        break;
    }
    case 17:
    case 18:
        bson_append_document_begin(d, k, -1, &child);
        gen_fields(&child, false, depth);
        bson_append_document_end(d, &child);
        break;
    default:
        bson_append_array_begin(d, k, -1, &child);
        gen_fields(&child, true, depth);
        bson_append_array_end(d, &child);
        break;
    }
}

/* ---- property test ---- */

#define NVALS 3000

static void test_property(void)
{
    static tval_t vals[NVALS];
    static sbl_buf_t asc[NVALS], desc[NVALS];
    for (int i = 0; i < NVALS; i++) {
        bson_init(&vals[i].doc);
        gen_value(&vals[i].doc, "v", 0);
        tval_finish(&vals[i]);
        sbl_buf_init(&asc[i]);
        sbl_buf_init(&desc[i]);
        sbl_key_append(&asc[i], &vals[i].v, false);
        sbl_key_append(&desc[i], &vals[i].v, true);
    }

    /* Round trip: decode(encode(v)) == v, and re-encoding gives the same bytes. */
    int bad_rt = 0;
    for (int i = 0; i < NVALS; i++) {
        bson_t out = BSON_INITIALIZER;
        size_t n = sbl_key_decode(asc[i].data, asc[i].len, &out, "v");
        bson_t outd = BSON_INITIALIZER;
        size_t nd = sbl_key_decode_dir(desc[i].data, desc[i].len, &outd, "v", true);
        bool ok = n == asc[i].len && nd == desc[i].len;
        if (ok) {
            tval_t t, td;
            t.doc = out;
            td.doc = outd;
            tval_finish(&t);
            tval_finish(&td);
            sbl_buf_t re;
            sbl_buf_init(&re);
            sbl_key_append(&re, &t.v, false);
            ok = sbl_value_compare(&t.v, &vals[i].v) == 0 &&
                 sbl_value_compare(&td.v, &vals[i].v) == 0 && key_cmp(&re, &asc[i]) == 0;
            sbl_buf_destroy(&re);
        }
        if (!ok && bad_rt++ < 5) {
            char *js = bson_as_canonical_extended_json(&vals[i].doc, NULL);
            fprintf(stderr, "round trip failed for %s\n", js);
            bson_free(js);
        }
        CHECK(ok);
        bson_destroy(&out);
        bson_destroy(&outd);
    }

    /* Order: all pairs among the first 600, then random pairs. */
    int bad = 0, cross_equal = 0;
    for (int pass = 0; pass < 2; pass++) {
        long npairs = pass == 0 ? 600L * 600L : 300000L;
        for (long p = 0; p < npairs; p++) {
            int i = pass == 0 ? (int)(p / 600) : (int)rndn(NVALS);
            int j = pass == 0 ? (int)(p % 600) : (int)rndn(NVALS);
            int c = sign(sbl_value_compare(&vals[i].v, &vals[j].v));
            int rc = sign(sbl_value_compare(&vals[j].v, &vals[i].v));
            int kc = key_cmp(&asc[i], &asc[j]);
            int dc = key_cmp(&desc[i], &desc[j]);
            bool ok = c == kc && dc == -c && rc == -c && sbl_value_equal(&vals[i].v, &vals[j].v) == (c == 0);
            if (!ok && bad++ < 10) {
                char *ja = bson_as_canonical_extended_json(&vals[i].doc, NULL);
                char *jb = bson_as_canonical_extended_json(&vals[j].doc, NULL);
                fprintf(stderr, "order mismatch: %s vs %s: compare %d/%d key %d desc %d\n", ja,
                        jb, c, rc, kc, dc);
                bson_free(ja);
                bson_free(jb);
            }
            CHECK(ok);
            if (c == 0 && vals[i].v.value_type != vals[j].v.value_type)
                cross_equal++;
        }
    }
    CHECK_MSG(cross_equal > 100, "only %d equal pairs of different types", cross_equal);

    /* Compound keys (a, b) order lexicographically, even with one part descending. */
    for (int p = 0; p < 20000; p++) {
        int a1 = (int)rndn(NVALS), b1 = (int)rndn(NVALS);
        int a2 = rndn(2) ? a1 : (int)rndn(NVALS), b2 = (int)rndn(NVALS);
        sbl_buf_t k1, k2;
        sbl_buf_init(&k1);
        sbl_buf_init(&k2);
        sbl_key_append(&k1, &vals[a1].v, false);
        sbl_key_append(&k1, &vals[b1].v, true);
        sbl_key_append(&k2, &vals[a2].v, false);
        sbl_key_append(&k2, &vals[b2].v, true);
        int c = sign(sbl_value_compare(&vals[a1].v, &vals[a2].v));
        if (c == 0)
            c = -sign(sbl_value_compare(&vals[b1].v, &vals[b2].v));
        CHECK(key_cmp(&k1, &k2) == c);
        sbl_buf_destroy(&k1);
        sbl_buf_destroy(&k2);
    }

    for (int i = 0; i < NVALS; i++) {
        bson_destroy(&vals[i].doc);
        sbl_buf_destroy(&asc[i]);
        sbl_buf_destroy(&desc[i]);
    }
}

/* ---- hand-written order cases ---- */

/* Compare the values of fields "a" and "b" of a JSON document. */
static int cmp_json(const char *json)
{
    bson_error_t e;
    bson_t *d = bson_new_from_json((const uint8_t *)json, -1, &e);
    if (d == NULL) {
        fprintf(stderr, "bad test json %s: %s\n", json, e.message);
        abort();
    }
    bson_iter_t ia, ib;
    bson_iter_init_find(&ia, d, "a");
    bson_iter_init_find(&ib, d, "b");
    bson_value_t a, b;
    sbl_iter_value(&ia, &a);
    sbl_iter_value(&ib, &b);
    int r = sign(sbl_value_compare(&a, &b));
    sbl_buf_t ka, kb;
    sbl_buf_init(&ka);
    sbl_buf_init(&kb);
    sbl_key_append(&ka, &a, false);
    sbl_key_append(&kb, &b, false);
    CHECK_MSG(key_cmp(&ka, &kb) == r, "key order disagrees for %s", json);
    sbl_buf_destroy(&ka);
    sbl_buf_destroy(&kb);
    bson_destroy(d);
    return r;
}

#define LT(json) CHECK_MSG(cmp_json(json) < 0, "expected a < b: %s", json)
#define EQ(json) CHECK_MSG(cmp_json(json) == 0, "expected a == b: %s", json)

static void test_cross_type_order(void)
{
    /* MongoDB's documented order, one step at a time. */
    LT("{\"a\": {\"$minKey\": 1}, \"b\": null}");
    LT("{\"a\": null, \"b\": {\"$numberDouble\": \"NaN\"}}");
    LT("{\"a\": {\"$numberDouble\": \"Infinity\"}, \"b\": \"\"}");
    LT("{\"a\": {\"$symbol\": \"zzz\"}, \"b\": {}}");
    LT("{\"a\": {\"z\": 1}, \"b\": []}");
    LT("{\"a\": [9], \"b\": {\"$binary\": {\"base64\": \"\", \"subType\": \"00\"}}}");
    LT("{\"a\": {\"$binary\": {\"base64\": \"/w==\", \"subType\": \"00\"}}, "
       "\"b\": {\"$oid\": \"000000000000000000000000\"}}");
    LT("{\"a\": {\"$oid\": \"ffffffffffffffffffffffff\"}, \"b\": false}");
    LT("{\"a\": true, \"b\": {\"$date\": {\"$numberLong\": \"-5\"}}}");
    LT("{\"a\": {\"$date\": {\"$numberLong\": \"9000000000000\"}}, "
       "\"b\": {\"$timestamp\": {\"t\": 0, \"i\": 0}}}");
    LT("{\"a\": {\"$timestamp\": {\"t\": 4000000000, \"i\": 5}}, "
       "\"b\": {\"$regularExpression\": {\"pattern\": \"\", \"options\": \"\"}}}");
    LT("{\"a\": {\"$regularExpression\": {\"pattern\": \"z\", \"options\": \"\"}}, "
       "\"b\": {\"$code\": \"\"}}");
    LT("{\"a\": {\"$code\": \"zzz\"}, \"b\": {\"$code\": \"\", \"$scope\": {}}}");
    LT("{\"a\": {\"$code\": \"z\", \"$scope\": {}}, \"b\": {\"$maxKey\": 1}}");
    EQ("{\"a\": null, \"b\": {\"$undefined\": true}}");
    EQ("{\"a\": \"abc\", \"b\": {\"$symbol\": \"abc\"}}");

    /* Within types. */
    LT("{\"a\": \"a\", \"b\": \"a\\u0000\"}");
    LT("{\"a\": \"a\\u0000\", \"b\": \"a\\u0000b\"}");
    LT("{\"a\": \"a\\u0000b\", \"b\": \"ab\"}");
    LT("{\"a\": \"user10\", \"b\": \"user2\"}");
    LT("{\"a\": {\"$binary\": {\"base64\": \"/w==\", \"subType\": \"80\"}}, "
       "\"b\": {\"$binary\": {\"base64\": \"AAA=\", \"subType\": \"00\"}}}");
    LT("{\"a\": {\"$binary\": {\"base64\": \"/w==\", \"subType\": \"00\"}}, "
       "\"b\": {\"$binary\": {\"base64\": \"AA==\", \"subType\": \"01\"}}}");
    LT("{\"a\": false, \"b\": true}");
    LT("{\"a\": {\"$date\": {\"$numberLong\": \"-1\"}}, \"b\": {\"$date\": {\"$numberLong\": \"0\"}}}");
    LT("{\"a\": {\"$timestamp\": {\"t\": 1, \"i\": 9}}, \"b\": {\"$timestamp\": {\"t\": 2, \"i\": 0}}}");
    LT("{\"a\": {\"$regularExpression\": {\"pattern\": \"a\", \"options\": \"m\"}}, "
       "\"b\": {\"$regularExpression\": {\"pattern\": \"ab\", \"options\": \"\"}}}");
    LT("{\"a\": {\"$regularExpression\": {\"pattern\": \"a\", \"options\": \"\"}}, "
       "\"b\": {\"$regularExpression\": {\"pattern\": \"a\", \"options\": \"i\"}}}");

    /* Documents: value type first, then field name, then value; shorter first. */
    LT("{\"a\": {\"z\": 1}, \"b\": {\"a\": \"x\"}}");
    LT("{\"a\": {\"a\": 1}, \"b\": {\"b\": 1}}");
    LT("{\"a\": {\"a\": 1}, \"b\": {\"a\": 2}}");
    LT("{\"a\": {\"a\": 1}, \"b\": {\"a\": 1, \"b\": 0}}");
    LT("{\"a\": {}, \"b\": {\"a\": {\"$minKey\": 1}}}");
    EQ("{\"a\": {\"x\": 1, \"y\": [2.0]}, \"b\": {\"x\": {\"$numberLong\": \"1\"}, "
       "\"y\": [{\"$numberDecimal\": \"2.000\"}]}}");
    LT("{\"a\": [1, 2], \"b\": [1, 2, 0]}");
    LT("{\"a\": [1, 3], \"b\": [2]}");
    LT("{\"a\": [1, 2], \"b\": [1, \"2\"]}");
    LT("{\"a\": [], \"b\": [{\"$minKey\": 1}]}");
}

static void test_numbers(void)
{
    EQ("{\"a\": 5, \"b\": 5.0}");
    EQ("{\"a\": {\"$numberLong\": \"5\"}, \"b\": {\"$numberDecimal\": \"5.000\"}}");
    EQ("{\"a\": -0.0, \"b\": 0}");
    EQ("{\"a\": {\"$numberDecimal\": \"-0\"}, \"b\": {\"$numberDecimal\": \"0E+100\"}}");
    EQ("{\"a\": {\"$numberDouble\": \"NaN\"}, \"b\": {\"$numberDecimal\": \"NaN\"}}");
    EQ("{\"a\": {\"$numberDouble\": \"Infinity\"}, \"b\": {\"$numberDecimal\": \"Infinity\"}}");
    EQ("{\"a\": 0.5, \"b\": {\"$numberDecimal\": \"0.50\"}}");
    LT("{\"a\": {\"$numberDouble\": \"NaN\"}, \"b\": {\"$numberDouble\": \"-Infinity\"}}");
    LT("{\"a\": {\"$numberDecimal\": \"NaN\"}, \"b\": {\"$numberLong\": \"-9223372036854775808\"}}");
    LT("{\"a\": 9007199254740992.0, \"b\": {\"$numberLong\": \"9007199254740993\"}}");
    LT("{\"a\": {\"$numberLong\": \"9007199254740993\"}, \"b\": 9007199254740994.0}");
    LT("{\"a\": {\"$numberLong\": \"9223372036854775807\"}, \"b\": 9223372036854775808.0}");
    EQ("{\"a\": {\"$numberLong\": \"-9223372036854775808\"}, \"b\": -9223372036854775808.0}");
    EQ("{\"a\": {\"$numberLong\": \"9007199254740993\"}, "
       "\"b\": {\"$numberDecimal\": \"9007199254740993\"}}");
    LT("{\"a\": {\"$numberInt\": \"2147483647\"}, \"b\": 2147483647.5}");
    /* Decimal vs double by exact value: double 0.1 is 0.1000000000000000055511151231257827021... */
    LT("{\"a\": {\"$numberDecimal\": \"0.1\"}, \"b\": 0.1}");
    LT("{\"a\": {\"$numberDecimal\": \"0.1000000000000000055511151231257827\"}, \"b\": 0.1}");
    LT("{\"a\": 0.1, \"b\": {\"$numberDecimal\": \"0.1000000000000000055511151231257828\"}}");
    LT("{\"a\": -0.1, \"b\": {\"$numberDecimal\": \"-0.1\"}}");
    LT("{\"a\": {\"$numberDecimal\": \"0.3\"}, \"b\": {\"$numberDecimal\": \"0.30000000000000004\"}}");
    LT("{\"a\": {\"$numberDecimal\": \"0.30000000000000004\"}, \"b\": 0.30000000000000004}");
    LT("{\"a\": 1.7976931348623157e308, \"b\": {\"$numberDecimal\": \"1E+400\"}}");
    LT("{\"a\": {\"$numberDecimal\": \"1E+6144\"}, \"b\": {\"$numberDouble\": \"Infinity\"}}");
    LT("{\"a\": {\"$numberDecimal\": \"1E+4899\"}, \"b\": {\"$numberDecimal\": \"1E+4900\"}}");
    LT("{\"a\": {\"$numberDecimal\": \"-1E+4900\"}, \"b\": {\"$numberDecimal\": \"-9E+4899\"}}");
    LT("{\"a\": 0, \"b\": {\"$numberDecimal\": \"1E-6176\"}}");
    LT("{\"a\": {\"$numberDecimal\": \"1E-6176\"}, \"b\": {\"$numberDecimal\": \"1E-4900\"}}");
    LT("{\"a\": {\"$numberDecimal\": \"1E-400\"}, \"b\": 5e-324}");
    LT("{\"a\": -5e-324, \"b\": {\"$numberDecimal\": \"-1E-400\"}}");
    LT("{\"a\": 1, \"b\": {\"$numberDecimal\": \"1.000000000000000000000000000000001\"}}");
    LT("{\"a\": {\"$numberDecimal\": \"0.9999999999999999999999999999999999\"}, \"b\": 1}");
    LT("{\"a\": {\"$numberDecimal\": \"-1.000000000000000000000000000000001\"}, \"b\": -1}");
    LT("{\"a\": {\"$numberLong\": \"9223372036854775807\"}, "
       "\"b\": {\"$numberDecimal\": \"9223372036854775807.5\"}}");

    /* int64 against double, with an independent oracle (both exact in long double). */
    for (int i = 0; i < 20000; i++) {
        int64_t x = (int64_t)rnd() >> rndn(64);
        double d = rndn(2) ? (double)x : ldexp((double)(rnd() >> 11), (int)rndn(80) - 40);
        if (rndn(4) == 0)
            d = nextafter(d, rndn(2) ? INFINITY : -INFINITY);
        if (rndn(2))
            d = -d;
        bson_value_t a = {.value_type = BSON_TYPE_INT64, .value.v_int64 = x};
        bson_value_t b = {.value_type = BSON_TYPE_DOUBLE, .value.v_double = d};
        long double lx = (long double)x, ld = (long double)d;
        int want = (lx > ld) - (lx < ld);
        CHECK(sign(sbl_value_compare(&a, &b)) == want);
    }

    /* Decimal next to a double: the decimal's own 17-digit rendering of d, then nudged. */
    for (int i = 0; i < 5000; i++) {
        double d = ldexp((double)(rnd() >> 11), (int)rndn(200) - 100);
        char s[64];
        snprintf(s, sizeof(s), "%.25e", d); /* rounded to 26 digits: strictly near d */
        long double exact = (long double)d;
        long double dec = strtold(s, NULL);
        bson_decimal128_t dv;
        bson_decimal128_from_string(s, &dv);
        bson_value_t a = {.value_type = BSON_TYPE_DECIMAL128, .value.v_decimal128 = dv};
        bson_value_t b = {.value_type = BSON_TYPE_DOUBLE, .value.v_double = d};
        int got = sign(sbl_value_compare(&a, &b));
        /* The decimal has 26 digits; it can only equal d if d prints exactly in 26 digits. */
        if (dec != exact)
            CHECK_MSG(got == ((dec > exact) - (dec < exact)), "%s vs %.17g", s, d);
    }
}

static void test_key_format(void)
{
    bson_value_t v;
    sbl_buf_t k;
    sbl_buf_init(&k);
    v.value_type = BSON_TYPE_UTF8;
    v.value.v_utf8.str = (char *)"user6284781860667377211";
    v.value.v_utf8.len = 23;
    sbl_key_append(&k, &v, false);
    CHECK(k.len == 26 && k.data[0] == 0x28 && memcmp(k.data + 1, "user", 4) == 0);
    sbl_buf_reset(&k);
    v.value_type = BSON_TYPE_OID;
    bson_oid_init_from_string(&v.value.v_oid, "65a1b2c3d4e5f60718293a4b");
    sbl_key_append(&k, &v, false);
    CHECK(k.len == 13 && k.data[0] == 0x50 && k.data[1] == 0x65 && k.data[12] == 0x4b);

    /* int32 5, int64 5, 5.0 and decimal 5 encode identically. */
    sbl_buf_t k2;
    sbl_buf_init(&k2);
    sbl_buf_reset(&k);
    v.value_type = BSON_TYPE_INT32;
    v.value.v_int32 = 5;
    sbl_key_append(&k, &v, false);
    v.value_type = BSON_TYPE_DOUBLE;
    v.value.v_double = 5.0;
    sbl_key_append(&k2, &v, false);
    CHECK(key_cmp(&k, &k2) == 0);
    CHECK(k.len == 4);
    sbl_buf_reset(&k2);
    v.value_type = BSON_TYPE_DECIMAL128;
    bson_decimal128_from_string("500E-2", &v.value.v_decimal128);
    sbl_key_append(&k2, &v, false);
    CHECK(key_cmp(&k, &k2) == 0);

    /* Malformed input is rejected, not over-read. */
    bson_t out = BSON_INITIALIZER;
    for (size_t n = 0; n < k2.len; n++)
        CHECK(sbl_key_decode(k2.data, n, &out, "v") == 0);
    const uint8_t junk[] = {0x28, 'a', 0x00, 0x07};
    CHECK(sbl_key_decode(junk, sizeof(junk), &out, "v") == 0);
    const uint8_t bad_tag[] = {0x01};
    CHECK(sbl_key_decode(bad_tag, 1, &out, "v") == 0);
    const uint8_t binlen[] = {0x46, 0xff, 0xff, 0xff, 0xff, 0x00};
    CHECK(sbl_key_decode(binlen, sizeof(binlen), &out, "v") == 0);
    bson_destroy(&out);

    /* Deeply nested key input is bounded. */
    uint8_t deep[1000];
    memset(deep, 0x3C, sizeof(deep));
    bson_t out2 = BSON_INITIALIZER;
    CHECK(sbl_key_decode(deep, sizeof(deep), &out2, "v") == 0);
    bson_destroy(&out2);
    sbl_buf_destroy(&k);
    sbl_buf_destroy(&k2);
}

/* ---- paths ---- */

static void test_paths(void)
{
    bson_error_t e;
    bson_t *d = bson_new_from_json(
        (const uint8_t *)"{\"a\": {\"b\": {\"c\": 7}}, \"x\": [10, {\"y\": 11}, [12, 13]], "
                         "\"a.b\": 1, \"e\": {}, \"n\": null}",
        -1, &e);
    bson_iter_t it;
    CHECK(sbl_path_get(d, "a.b.c", &it) && bson_iter_as_int64(&it) == 7);
    CHECK(sbl_path_get(d, "a.b", &it) && BSON_ITER_HOLDS_DOCUMENT(&it));
    CHECK(sbl_path_get(d, "x.0", &it) && bson_iter_as_int64(&it) == 10);
    CHECK(sbl_path_get(d, "x.1.y", &it) && bson_iter_as_int64(&it) == 11);
    CHECK(sbl_path_get(d, "x.2.1", &it) && bson_iter_as_int64(&it) == 13);
    CHECK(sbl_path_get(d, "x", &it) && BSON_ITER_HOLDS_ARRAY(&it));
    CHECK(sbl_path_get(d, "n", &it) && BSON_ITER_HOLDS_NULL(&it));
    CHECK(!sbl_path_get(d, "x.3", &it));
    CHECK(!sbl_path_get(d, "x.01", &it));
    CHECK(!sbl_path_get(d, "x.-1", &it));
    CHECK(!sbl_path_get(d, "x.y", &it)); /* no array expansion */
    CHECK(!sbl_path_get(d, "a.b.c.d", &it));
    CHECK(!sbl_path_get(d, "a..b", &it));
    CHECK(!sbl_path_get(d, "", &it));
    CHECK(!sbl_path_get(d, "a.", &it));
    CHECK(!sbl_path_get(d, "e.z", &it));
    CHECK(!sbl_path_get(d, "nope", &it));
    CHECK(!sbl_path_get(d, "a.bc", &it));
    bson_destroy(d);
}

/* ---- validation ---- */

static bson_t *nested(int levels)
{
    bson_t *d = bson_new();
    bson_t *stack = calloc((size_t)levels + 1, sizeof(bson_t));
    bson_t *cur = d;
    for (int i = 0; i < levels; i++) {
        bson_append_document_begin(cur, "a", 1, &stack[i]);
        cur = &stack[i];
    }
    BSON_APPEND_INT32(cur, "x", 1);
    for (int i = levels - 1; i >= 0; i--)
        bson_append_document_end(i == 0 ? d : &stack[i - 1], &stack[i]);
    free(stack);
    return d;
}

static void test_validate(void)
{
    sbl_err_t err;
    bson_t *d = bson_new_from_json((const uint8_t *)"{\"a\": 1, \"b\": [1, {\"c\": \"x\"}]}", -1,
                                   NULL);
    const uint8_t *data = bson_get_data(d);
    CHECK(sbl_doc_validate(data, d->len, &err) == 0);

    uint8_t buf[256];
    memcpy(buf, data, d->len);
    CHECK(sbl_doc_validate(buf, d->len - 1, &err) == SBL_E_InvalidBSON);
    CHECK(sbl_doc_validate(buf, 3, &err) == SBL_E_InvalidBSON);
    buf[d->len - 1] = 1;
    CHECK(sbl_doc_validate(buf, d->len, &err) == SBL_E_InvalidBSON);
    memcpy(buf, data, d->len);
    buf[4] = 0x2A; /* unknown element type */
    CHECK(sbl_doc_validate(buf, d->len, &err) == SBL_E_InvalidBSON);
    memcpy(buf, data, d->len);
    buf[d->len - 10] = 0x7F; /* corrupt a nested length or string */
    int rc = sbl_doc_validate(buf, d->len, &err);
    CHECK(rc == 0 || rc == SBL_E_InvalidBSON);
    CHECK(sbl_doc_validate(NULL, 17 * 1024 * 1024, &err) == SBL_E_BSONObjectTooLarge);
    CHECK_MSG(err.code == SBL_E_BSONObjectTooLarge && strstr(err.msg, "limit") != NULL, "%s",
              err.msg);

    /* Flip every byte in turn: never crashes, and accepted documents really are iterable. */
    for (uint32_t i = 4; i < d->len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(buf, data, d->len);
            buf[i] ^= (uint8_t)(1u << bit);
            if (sbl_doc_validate(buf, d->len, &err) == 0) {
                bson_t b;
                CHECK(bson_init_static(&b, buf, d->len) && bson_validate(&b, 0, NULL));
            }
        }
    }
    bson_destroy(d);

    bson_t *ok = nested(180);
    CHECK(sbl_doc_validate(bson_get_data(ok), ok->len, &err) == 0);
    bson_destroy(ok);
    bson_t *deep = nested(181);
    CHECK(sbl_doc_validate(bson_get_data(deep), deep->len, &err) == SBL_E_Overflow);
    bson_destroy(deep);
    bson_t *very = nested(200000);
    CHECK(sbl_doc_validate(bson_get_data(very), very->len, &err) == SBL_E_Overflow);
    CHECK_MSG(strstr(err.msg, "180") != NULL, "%s", err.msg);
    bson_destroy(very);
}

/* The reference sbl_bson_check must agree with: libbson's iterator and
 * bson_validate, framing of nested documents, and the depth bound. */
static bool reference_ok(const uint8_t *buf, size_t len, int max_depth)
{
    bson_t b;
    return bson_init_static(&b, buf, len) && !sbl_doc_too_deep(&b, max_depth) &&
           sbl_doc_framing_ok(&b) && bson_validate(&b, BSON_VALIDATE_NONE, NULL);
}

/* Every BSON type, then every one-byte corruption of it: the one-pass check
 * never accepts what the reference rejects.  It is stricter: when a corrupted
 * length makes an element run into the next ones, libbson 1.23's
 * bson_validate sometimes stops at the element it cannot read without
 * reporting it; sbl_bson_check rejects every element that does not fit. */
/* sbl_doc_find_top and bson_iter_init_find agree on doc's key: both miss, or
 * both land on the same element. */
static bool find_top_agrees(const bson_t *doc, const char *key)
{
    bson_iter_t a, b;
    bool fa = sbl_doc_find_top(doc, key, &a);
    bool fb = bson_iter_init_find(&b, doc, key);
    if (fa != fb)
        return false;
    return !fa || (bson_iter_offset(&a) == bson_iter_offset(&b) &&
                   bson_iter_type(&a) == bson_iter_type(&b) &&
                   strcmp(bson_iter_key(&a), bson_iter_key(&b)) == 0 &&
                   (bson_iter_next(&a), bson_iter_next(&b),
                    bson_iter_offset(&a) == bson_iter_offset(&b)));
}

/* sbl_doc_first reads doc's first field as libbson does: the same key, and
 * the same string when libbson reads one there. */
static bool first_agrees(const bson_t *doc)
{
    bson_iter_t it;
    const char *str, *k = sbl_doc_first(doc, &str);
    if (!bson_iter_init(&it, doc) || !bson_iter_next(&it))
        return k == NULL;
    if (k == NULL || strcmp(k, bson_iter_key(&it)) != 0)
        return false;
    return BSON_ITER_HOLDS_UTF8(&it) ? str == bson_iter_utf8(&it, NULL) : str == NULL;
}

/* sbl_doc_scan_ids agrees with libbson's walk and sbl_doc_too_deep on doc
 * (or declines it): the count of top-level "_id"s, where the first one is,
 * whether it comes first, and the nesting verdict at max_depth. */
static bool scan_ids_agrees(const bson_t *doc, int max_depth)
{
    bson_iter_t it, ref_id;
    int nid, ref_n = 0;
    bool id_first, deep, ref_first = false, first = true;
    if (!sbl_doc_scan_ids(doc, max_depth, &it, &nid, &id_first, &deep))
        return true; /* declined: the caller asks libbson */
    if (!bson_iter_init(&ref_id, doc))
        return false;
    bson_iter_t walk = ref_id;
    while (bson_iter_next(&walk)) {
        if (strcmp(bson_iter_key(&walk), "_id") == 0 && ref_n++ == 0) {
            ref_first = first;
            ref_id = walk;
        }
        first = false;
    }
    if (nid != ref_n || deep != sbl_doc_too_deep(doc, max_depth))
        return false;
    return nid == 0 || (id_first == ref_first && bson_iter_offset(&it) == bson_iter_offset(&ref_id) &&
                        bson_iter_type(&it) == bson_iter_type(&ref_id));
}

/* sbl_doc_top_next yields libbson's top-level keys and offsets, in order
 * (or declines the document), and sbl_doc_top_iter lands where libbson does. */
static bool top_next_agrees(const bson_t *doc)
{
    bson_iter_t ref, it;
    uint32_t off = 4, at;
    const char *k;
    bool bad;
    if (!bson_iter_init(&ref, doc))
        return false;
    while (sbl_doc_top_next(doc, &off, &at, &k, &bad)) {
        if (!bson_iter_next(&ref) || bson_iter_offset(&ref) != at ||
            strcmp(bson_iter_key(&ref), k) != 0 || !sbl_doc_top_iter(doc, at, k, &it) ||
            bson_iter_type(&it) != bson_iter_type(&ref))
            return false;
    }
    return bad || !bson_iter_next(&ref);
}

static void test_scan_ids(void)
{
    bson_t *d = bson_new(), o, a, e, scope, z;
    BSON_APPEND_INT32(d, "a", 1);
    BSON_APPEND_UTF8(d, "_id", "x");
    BSON_APPEND_DOCUMENT_BEGIN(d, "o", &o);
    BSON_APPEND_ARRAY_BEGIN(&o, "p", &a);
    BSON_APPEND_DOCUMENT_BEGIN(&a, "0", &e);
    BSON_APPEND_INT32(&e, "q", 1);
    bson_append_document_end(&a, &e);
    bson_append_array_end(&o, &a);
    bson_append_document_end(d, &o);
    bson_init(&scope);
    BSON_APPEND_DOCUMENT_BEGIN(&scope, "z", &z); /* the deepest part: 4 levels */
    bson_t y, x;
    BSON_APPEND_DOCUMENT_BEGIN(&z, "y", &y);
    BSON_APPEND_DOCUMENT_BEGIN(&y, "x", &x);
    BSON_APPEND_INT32(&x, "v", 1);
    bson_append_document_end(&y, &x);
    bson_append_document_end(&z, &y);
    bson_append_document_end(&scope, &z);
    BSON_APPEND_CODE_WITH_SCOPE(d, "w", "g()", &scope);
    bson_destroy(&scope);
    BSON_APPEND_REGEX(d, "r", "a.c", "i");
    BSON_APPEND_INT32(d, "_id", 2);
    int agree = 0;
    for (int depth = 0; depth <= 6; depth++)
        agree += scan_ids_agrees(d, depth);
    CHECK_MSG(agree == 7, "scan_ids agreed at %d of 7 depths", agree);
    CHECK(top_next_agrees(d));
    sbl_doc_index_t ix; /* and from the index of it when it is this thread's */
    sbl_doc_index_build(&ix, d);
    const sbl_doc_index_t *prev = sbl_doc_index_use(&ix);
    CHECK(ix.data != NULL && top_next_agrees(d));
    sbl_doc_index_use(prev);
    bson_iter_t it;
    int nid;
    bool first, deep;
    CHECK(sbl_doc_scan_ids(d, 3, &it, &nid, &first, &deep) && nid == 2 && !first && deep);
    CHECK(sbl_doc_scan_ids(d, 4, &it, &nid, &first, &deep) && !deep &&
          BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_key(&it), "_id") == 0);
    /* Every one-byte corruption that still passes the one-pass check. */
    const uint8_t *data = bson_get_data(d);
    uint8_t *buf = malloc(d->len);
    int checked = 0, differs = 0;
    for (uint32_t i = 0; i < d->len; i++) {
        for (int k = 0; k < 8; k++) {
            memcpy(buf, data, d->len);
            buf[i] ^= (uint8_t)(1u << k);
            if (sbl_bson_check(buf, d->len, 10, NULL) != SBL_BSON_OK)
                continue;
            bson_t cd;
            CHECK(bson_init_static(&cd, buf, d->len));
            checked++;
            if (!top_next_agrees(&cd) && differs++ < 5)
                CHECK_MSG(false, "byte %u bit %d: top_next differs", i, k);
            for (int depth = 0; depth <= 5; depth++)
                if (!scan_ids_agrees(&cd, depth) && differs++ < 5)
                    CHECK_MSG(false, "byte %u bit %d depth %d: scan_ids differs", i, k, depth);
        }
    }
    CHECK(checked > 0);
    CHECK_MSG(differs == 0, "scan_ids differed from libbson %d times", differs);
    free(buf);
    bson_destroy(d);
}

static void test_bson_check(void)
{
    bson_t *d = bson_new(), sub, scope, arr;
    bson_oid_t oid;
    bson_decimal128_t dec = {.high = 0x3040000000000000ull, .low = 7};
    bson_oid_init_from_string(&oid, "0123456789abcdef01234567");
    BSON_APPEND_DOUBLE(d, "d", 1.5);
    BSON_APPEND_UTF8(d, "s", "str");
    BSON_APPEND_DOCUMENT_BEGIN(d, "o", &sub);
    BSON_APPEND_INT32(&sub, "\xc3\xa9", 1); /* a two-byte UTF-8 key */
    bson_append_document_end(d, &sub);
    BSON_APPEND_ARRAY_BEGIN(d, "a", &arr);
    BSON_APPEND_BOOL(&arr, "0", true);
    bson_append_array_end(d, &arr);
    bson_append_binary(d, "b", -1, BSON_SUBTYPE_BINARY, (const uint8_t *)"xy", 2);
    bson_append_binary(d, "B", -1, BSON_SUBTYPE_BINARY_DEPRECATED, (const uint8_t *)"xy", 2);
    bson_append_undefined(d, "u", -1);
    BSON_APPEND_OID(d, "i", &oid);
    BSON_APPEND_BOOL(d, "t", false);
    BSON_APPEND_DATE_TIME(d, "dt", 5);
    BSON_APPEND_NULL(d, "n");
    BSON_APPEND_REGEX(d, "r", "a.c", "i");
    bson_append_dbpointer(d, "p", -1, "db.c", &oid);
    BSON_APPEND_CODE(d, "c", "f()");
    BSON_APPEND_SYMBOL(d, "y", "sym");
    bson_init(&scope);
    BSON_APPEND_INT32(&scope, "x", 1);
    BSON_APPEND_CODE_WITH_SCOPE(d, "w", "g()", &scope);
    bson_destroy(&scope);
    BSON_APPEND_INT32(d, "i32", 3);
    BSON_APPEND_TIMESTAMP(d, "ts", 1, 2);
    BSON_APPEND_INT64(d, "i64", 4);
    BSON_APPEND_DECIMAL128(d, "dec", &dec);
    BSON_APPEND_MAXKEY(d, "max");
    BSON_APPEND_MINKEY(d, "min");

    const uint8_t *data = bson_get_data(d);
    CHECK(sbl_bson_check(data, d->len, 10, NULL) == SBL_BSON_OK);
    CHECK(reference_ok(data, d->len, 10));
    /* sbl_doc_find_top finds every key where libbson does, and nothing else. */
    static const char *const keys[] = {"d", "s", "o", "a", "b", "B", "u", "i", "t", "dt", "n",
                                       "r", "p", "c", "y", "w", "i32", "ts", "i64", "dec", "max",
                                       "min", "x", "", "dtx", "\xc3\xa9"};
    int found_same = 0;
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
        found_same += find_top_agrees(d, keys[k]);
    CHECK_MSG(found_same == (int)(sizeof(keys) / sizeof(keys[0])), "find_top agreed on %d keys",
              found_same);
    uint8_t *buf = malloc(d->len);
    static const uint8_t repl[] = {0x00, 0x01, 0x02, 0x05, 0x0F, 0x13, 0x7F, 0x80, 0xC3, 0xFF};
    int disagree = 0, rejected = 0, stricter = 0, find_differs = 0;
    for (uint32_t i = 0; i < d->len; i++) {
        for (int k = 0; k < 8 + (int)sizeof(repl); k++) {
            memcpy(buf, data, d->len);
            if (k < 8)
                buf[i] ^= (uint8_t)(1u << k);
            else
                buf[i] = repl[k - 8];
            bool fast = sbl_bson_check(buf, d->len, 10, NULL) == SBL_BSON_OK;
            bool ref = reference_ok(buf, d->len, 10);
            if (fast) { /* a checked document: find_top still agrees with libbson */
                bson_t cd;
                CHECK(bson_init_static(&cd, buf, d->len));
                for (size_t q = 0; q < sizeof(keys) / sizeof(keys[0]); q++)
                    if (!find_top_agrees(&cd, keys[q]) && find_differs++ < 5)
                        CHECK_MSG(false, "byte %u variant %d: find_top differs for '%s'", i, k,
                                  keys[q]);
                if (!first_agrees(&cd) && find_differs++ < 5)
                    CHECK_MSG(false, "byte %u variant %d: sbl_doc_first differs", i, k);
            }
            rejected += !fast;
            stricter += ref && !fast;
            if (fast && !ref && disagree++ < 5)
                CHECK_MSG(false, "byte %u variant %d: one-pass accepts, reference rejects", i, k);
        }
    }
    CHECK_MSG(disagree == 0, "%d inputs accepted by the one-pass check only", disagree);
    CHECK_MSG(find_differs == 0, "find_top differed from libbson %d times", find_differs);
    CHECK(rejected > 0);
    CHECK_MSG(stricter < rejected / 4, "%d of %d rejections are stricter than libbson", stricter,
              rejected);
    /* A truncated buffer never reads past its end (ASan build checks the reads). */
    for (uint32_t n = 0; n < d->len; n++) {
        memcpy(buf, data, n);
        CHECK(sbl_bson_check(buf, n, 10, NULL) == SBL_BSON_MALFORMED);
    }
    free(buf);
    bson_destroy(d);

    /* A decimal128 that is an exact binary value beyond 10^34 as an integer
     * (found by fuzz_bson): its key decodes back to an equal value. */
    bson_value_t v = {.value_type = BSON_TYPE_DECIMAL128};
    CHECK(bson_decimal128_from_string("5.71849066284996100096E+43", &v.value.v_decimal128));
    for (int desc = 0; desc < 2; desc++) {
        sbl_buf_t kb;
        bson_t out = BSON_INITIALIZER;
        bson_iter_t kit;
        sbl_buf_init(&kb);
        sbl_key_append(&kb, &v, desc);
        CHECK(sbl_key_decode_dir(kb.data, kb.len, &out, "k", desc) == kb.len);
        CHECK(bson_iter_init_find(&kit, &out, "k") && BSON_ITER_HOLDS_DECIMAL128(&kit));
        bson_value_t back;
        sbl_iter_value(&kit, &back);
        CHECK(sbl_value_compare(&v, &back) == 0);
        sbl_buf_destroy(&kb);
        bson_destroy(&out);
    }

    /* a command's name and collection, read in place */
    bson_t *cmd = BCON_NEW("update", "coll", "ordered", BCON_BOOL(true));
    const char *str;
    CHECK(strcmp(sbl_doc_first(cmd, &str), "update") == 0 && strcmp(str, "coll") == 0);
    CHECK(first_agrees(cmd));
    bson_destroy(cmd);
    cmd = BCON_NEW("ping", BCON_INT32(1));
    CHECK(strcmp(sbl_doc_first(cmd, &str), "ping") == 0 && str == NULL && first_agrees(cmd));
    bson_destroy(cmd);
    bson_t empty = BSON_INITIALIZER;
    CHECK(sbl_doc_first(&empty, &str) == NULL && str == NULL);

    bson_t *deep = nested(12);
    CHECK(sbl_bson_check(bson_get_data(deep), deep->len, 12, NULL) == SBL_BSON_OK);
    CHECK(sbl_bson_check(bson_get_data(deep), deep->len, 11, NULL) == SBL_BSON_TOO_DEEP);
    bson_destroy(deep);
}

int main(void)
{
    test_bson_check();
    test_scan_ids();
    test_cross_type_order();
    test_numbers();
    test_key_format();
    test_paths();
    test_validate();
    test_property();
    return CHECK_DONE("test_doc");
}
