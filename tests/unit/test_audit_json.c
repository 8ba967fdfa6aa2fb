/*
 * test_audit_json.c: the audit formatter's string escaping (src/audit/
 * audit_json.c) against a plain byte-by-byte reference escaper: the output
 * must be exactly the reference's for every input.  Covers audit_json_str
 * on random strings (every byte value; lengths 0-300 and a few large ones;
 * escapes at and around word boundaries; runs of escapes), strings and keys
 * inside documents (put_str_in and put_key read whole words of the
 * document), a buffer that starts small (reservations while escaping), and
 * binary values' base64 (the SIMD path) against a bit-by-bit encoder, and
 * the lsid JSON remembered per thread (many sessions, some in one set).
 * Includes the module's private header: this is the module's own test.
 */
#include "audit/audit_int.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* The reference: one byte at a time, as JSON wants it. */
static void ref_str(audit_buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    audit_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[7];
        switch (c) {
        case '"': audit_buf_put(b, "\\\"", 2); break;
        case '\\': audit_buf_put(b, "\\\\", 2); break;
        case '\n': audit_buf_put(b, "\\n", 2); break;
        case '\r': audit_buf_put(b, "\\r", 2); break;
        case '\t': audit_buf_put(b, "\\t", 2); break;
        case '\b': audit_buf_put(b, "\\b", 2); break;
        case '\f': audit_buf_put(b, "\\f", 2); break;
        default:
            if (c < 0x20) {
                snprintf(e, sizeof(e), "\\u00%c%c", hex[c >> 4], hex[c & 15]);
                audit_buf_put(b, e, 6);
            } else {
                audit_buf_put(b, &s[i], 1);
            }
        }
    }
    audit_buf_put(b, "\"", 1);
}

/* A random string of n bytes in one of several shapes. */
static void gen(char *s, size_t n, int shape, bool nul_ok)
{
    static const char esc[] = "\"\\\n\r\t\b\f\x01\x1f";
    for (size_t i = 0; i < n; i++) {
        unsigned char c;
        switch (shape) {
        case 0: c = (unsigned char)rnd(); break;                  /* every byte value */
        case 1: c = (unsigned char)(' ' + rnd() % 32); break;     /* YCSB-like: ' '..'?' */
        case 2: c = rnd() % 8 == 0 ? (unsigned char)esc[rnd() % 9] : 'a'; break; /* dense */
        default: c = 'x'; break;                                    /* placed below */
        }
        s[i] = (char)c;
    }
    if (shape == 3 && n > 0) { /* escapes at and around word boundaries */
        static const size_t at[] = {0, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64};
        for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++)
            if (rnd() % 2 == 0 && at[k] < n)
                s[at[k]] = esc[rnd() % 9];
        if (rnd() % 2 == 0)
            s[n - 1] = '"';
    }
    if (!nul_ok)
        for (size_t i = 0; i < n; i++)
            if (s[i] == 0)
                s[i] = '\x02';
}

/* audit_json_str(s) == ref_str(s), from a buffer that already holds a
 * prefix (pre bytes; small or unallocated buffers exercise the growth). */
static bool same_str(const char *s, size_t n, size_t pre)
{
    audit_buf_t got = {0}, want = {0};
    for (size_t i = 0; i < pre; i++) {
        audit_buf_put(&got, "p", 1);
        audit_buf_put(&want, "p", 1);
    }
    audit_json_str(&got, s, n);
    ref_str(&want, s, n);
    bool ok = !got.oom && got.len == want.len && memcmp(got.data, want.data, got.len) == 0;
    if (!ok)
        fprintf(stderr, "mismatch: n=%zu got %zu bytes, want %zu\n", n, got.len, want.len);
    free(got.data);
    free(want.data);
    return ok;
}

static void test_random_strings(void)
{
    char *s = malloc(300);
    int bad = 0;
    for (int round = 0; round < 20000; round++) {
        size_t n = (size_t)(rnd() % 301);
        gen(s, n, round % 4, true);
        /* pre: the buffer's prefix puts the string at every alignment */
        if (!same_str(s, n, (size_t)(round % 37)))
            bad++;
    }
    CHECK_MSG(bad == 0, "%d of 20000 strings differ", bad);
    free(s);
}

static void test_special_strings(void)
{
    char s[600];
    /* Every single byte value, alone and at each position of a 40-byte string. */
    for (int c = 0; c < 256; c++) {
        char one = (char)c;
        CHECK(same_str(&one, 1, 0));
        for (size_t at = 0; at < 40; at++) {
            memset(s, 'a', 40);
            s[at] = (char)c;
            CHECK(same_str(s, 40, at % 3));
        }
    }
    /* Nothing but escapes (the largest output per input byte). */
    memset(s, '\x01', 600);
    CHECK(same_str(s, 600, 0));
    memset(s, '"', 600);
    CHECK(same_str(s, 600, 5));
    CHECK(same_str("", 0, 0));
}

/* A few large strings: 70 KB of YCSB-like bytes, 1 MB of control bytes (6 MB
 * out), 16 MB with an escape every 4 KB. */
static void test_large_strings(void)
{
    size_t sizes[] = {70 * 1024, 1024 * 1024, 16 * 1024 * 1024};
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        char *s = malloc(n);
        if (k == 0) {
            gen(s, n, 1, true);
        } else if (k == 1) {
            for (size_t i = 0; i < n; i++)
                s[i] = (char)(rnd() % 32);
        } else {
            memset(s, 'z', n);
            for (size_t i = 4095; i < n; i += 4096)
                s[i] = '\\';
        }
        CHECK_MSG(same_str(s, n, 3), "large string %d (%zu bytes)", k, n);
        free(s);
    }
}

/* Strings and keys inside documents (the whole-word readers put_str_in and
 * put_key): {"<key>": "<value>", ...} against the reference per member. */
static void test_documents(void)
{
    char key[80], val[300];
    int bad = 0;
    for (int round = 0; round < 3000; round++) {
        bson_t doc = BSON_INITIALIZER;
        audit_buf_t want = {0}, got = {0};
        int members = 1 + (int)(rnd() % 6);
        audit_buf_put(&want, "{", 1);
        for (int m = 0; m < members; m++) {
            size_t kn = 1 + (size_t)(rnd() % 70), vn = (size_t)(rnd() % 300);
            gen(key, kn, (round + m) % 4, false); /* keys hold no NUL */
            key[kn] = '\0';
            gen(val, vn, (round + m + 1) % 4, true);
            bson_append_utf8(&doc, key, (int)kn, val, (int)vn);
            if (m > 0)
                audit_buf_put(&want, ",", 1);
            ref_str(&want, key, kn);
            audit_buf_put(&want, ":", 1);
            ref_str(&want, val, vn);
        }
        audit_buf_put(&want, "}", 1);
        audit_json_doc(&got, &doc, false);
        if (got.len != want.len || memcmp(got.data, want.data, got.len) != 0) {
            if (bad++ == 0)
                fprintf(stderr, "got  %.*s\nwant %.*s\n", (int)got.len, got.data,
                        (int)want.len, want.data);
        }
        free(got.data);
        free(want.data);
        bson_destroy(&doc);
    }
    CHECK_MSG(bad == 0, "%d of 3000 documents differ", bad);
}

/* Binary values: {"b": {"$binary": {"base64": ..., "subType": ...}}} against a
 * bit-by-bit reference, every length 0-300 and a few large ones, at every
 * offset of the document's bytes (the SIMD path reads sixteen bytes). */
static void ref_b64(audit_buf_t *b, const uint8_t *d, size_t n)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t bits = 0;
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc = acc << 8 | d[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            audit_buf_put(b, &al[(acc >> bits) & 63], 1);
        }
    }
    if (bits > 0)
        audit_buf_put(b, &al[(acc << (6 - bits)) & 63], 1);
    for (size_t k = n % 3 == 0 ? 0 : 3 - n % 3; k > 0; k--)
        audit_buf_put(b, "=", 1);
}

static void test_binary(void)
{
    static const char hex[] = "0123456789abcdef";
    size_t max = 70000;
    uint8_t *bin = malloc(max);
    int bad = 0, cases = 0;
    for (size_t i = 0; i < max; i++)
        bin[i] = (uint8_t)rnd();
    for (size_t n = 0; n <= 320; n++) {
        for (int pad = 0; pad < 3; pad++) {
            size_t len = n <= 300 ? n : (n - 300) * 3400 + pad; /* then up to 68 KB */
            bson_t doc = BSON_INITIALIZER;
            audit_buf_t want = {0}, got = {0};
            bson_subtype_t sub = (bson_subtype_t)(n % 2 == 0 ? BSON_SUBTYPE_BINARY : 0x80 + n % 16);
            if (pad > 0)
                bson_append_utf8(&doc, "p", 1, "xyz", pad);
            bson_append_binary(&doc, "b", 1, sub, bin + n % 7, (uint32_t)len);
            audit_buf_put(&want, "{", 1);
            if (pad > 0) {
                audit_buf_puts(&want, "\"p\":");
                ref_str(&want, "xyz", (size_t)pad);
                audit_buf_put(&want, ",", 1);
            }
            audit_buf_puts(&want, "\"b\":{\"$binary\":{\"base64\":\"");
            ref_b64(&want, bin + n % 7, len);
            char tail[] = "\",\"subType\":\"00\"}}}";
            tail[13] = hex[(unsigned)sub >> 4 & 15];
            tail[14] = hex[(unsigned)sub & 15];
            audit_buf_put(&want, tail, strlen(tail));
            audit_json_doc(&got, &doc, false);
            cases++;
            if (got.len != want.len || memcmp(got.data, want.data, got.len) != 0) {
                if (bad++ == 0)
                    fprintf(stderr, "binary of %zu bytes:\ngot  %.*s\nwant %.*s\n", len,
                            (int)got.len, got.data, (int)want.len, want.data);
            }
            free(got.data);
            free(want.data);
            bson_destroy(&doc);
        }
    }
    CHECK_MSG(bad == 0, "base64 path %d: %d of %d binary values differ", audit_json_simd(2), bad,
              cases);
    free(bin);
}

/* Commands with the lsids of many sessions, in an order that revisits them
 * (the per-thread JSON of each lsid, several in one set of the cache):
 * param.args must equal the plain document's JSON every time. */
static void test_lsids(void)
{
    uint8_t ids[40][16];
    int bad = 0;
    for (int s = 0; s < 40; s++) {
        for (int k = 0; k < 16; k++)
            ids[s][k] = (uint8_t)rnd();
        if (s % 4 != 0) { /* three of every four share the set of the one before */
            ids[s][14] = ids[s - 1][14];
            ids[s][15] = ids[s - 1][15];
        }
    }
    for (int round = 0; round < 4000; round++) {
        int s = round < 2000 ? (int)(rnd() % 3) : (int)(rnd() % 40);
        bson_t cmd = BSON_INITIALIZER, lsid;
        BSON_APPEND_UTF8(&cmd, "find", "c");
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "lsid", &lsid);
        BSON_APPEND_BINARY(&lsid, "id", BSON_SUBTYPE_UUID, ids[s], 16);
        bson_append_document_end(&cmd, &lsid);
        BSON_APPEND_UTF8(&cmd, "$db", "d");
        audit_buf_t got = {0}, want = {0};
        audit_json_args(&got, &cmd);
        audit_json_doc(&want, &cmd, false);
        if (got.len != want.len || memcmp(got.data, want.data, got.len) != 0)
            bad++;
        free(got.data);
        free(want.data);
        bson_destroy(&cmd);
    }
    CHECK_MSG(bad == 0, "%d of 4000 commands' lsids differ", bad);
}

/* A buffer over the caller's array (an event is formatted on the stack)
 * moves to the heap when it outgrows it, keeping what it held. */
static void test_borrowed(void)
{
    char small[16];
    audit_buf_t b = {.data = small, .cap = sizeof(small), .borrowed = true};
    audit_buf_puts(&b, "0123456789");
    CHECK(b.borrowed && b.data == small && b.len == 10);
    for (int i = 0; i < 100; i++)
        audit_buf_puts(&b, "abcdefghij");
    CHECK(!b.borrowed && b.data != small && !b.oom && b.len == 1010);
    CHECK(memcmp(b.data, "0123456789abcdefghijabcdefghij", 30) == 0 &&
          memcmp(b.data + 1000, "abcdefghij", 10) == 0);
    free(b.data);
}

int main(void)
{
    test_borrowed();
    test_lsids();
    /* base64: every code path this CPU has, widest first */
    for (int level = audit_json_simd(2);; level = audit_json_simd(level - 1)) {
        test_binary();
        if (level == 0)
            break;
    }
    test_random_strings();
    test_special_strings();
    test_large_strings();
    test_documents();
    return CHECK_DONE("test_audit_json");
}
