/*
 * test_cs_token.c: change streams' resume tokens (src/agg/cs_token.c): a
 * token made for a position reads back as that position, whatever the
 * documentKey holds (every BSON type the encoder writes, long keys, NUL in
 * strings), with and without a $changeStreamSplitLargeEvent fragment; the
 * hex strings sort in event order; malformed tokens fail with 9.
 */
#include "check.h"
#include "agg/cs_int.h"

#include <string.h>

static void make(const sbl_cs_pos_t *p, const bson_t *key, bson_t *tok)
{
    static const uint8_t uuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    bson_t eid = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&eid, "operationType", "insert");
    if (key != NULL)
        BSON_APPEND_DOCUMENT(&eid, "documentKey", key);
    bson_init(tok);
    sbl_cs_token_make(p, key != NULL ? uuid : NULL, key != NULL ? &eid : NULL, tok);
    bson_destroy(&eid);
}

/* Every kind of value put_value writes, in a documentKey. */
static void rich_key(bson_t *key)
{
    bson_t sub, arr;
    bson_oid_t oid;
    bson_oid_init_from_string(&oid, "0123456789abcdef01234567");
    bson_init(key);
    BSON_APPEND_DOCUMENT_BEGIN(key, "_id", &sub);
    BSON_APPEND_INT32(&sub, "i", -5);
    BSON_APPEND_INT64(&sub, "big", INT64_MAX);
    BSON_APPEND_INT64(&sub, "neg", INT64_MIN + 1);
    BSON_APPEND_DOUBLE(&sub, "d", 2.5);
    BSON_APPEND_DOUBLE(&sub, "nd", -1e300);
    bson_append_utf8(&sub, "s", 1, "a\0b", 3);
    BSON_APPEND_OID(&sub, "o", &oid);
    BSON_APPEND_BOOL(&sub, "t", true);
    BSON_APPEND_DATE_TIME(&sub, "dt", -1000);
    BSON_APPEND_TIMESTAMP(&sub, "ts", 5, 6);
    BSON_APPEND_NULL(&sub, "n");
    BSON_APPEND_MINKEY(&sub, "mn");
    BSON_APPEND_MAXKEY(&sub, "mx");
    char blob[300];
    memset(blob, 0xff, sizeof(blob));
    bson_append_binary(&sub, "bin", -1, BSON_SUBTYPE_BINARY, (const uint8_t *)blob, 300);
    BSON_APPEND_ARRAY_BEGIN(&sub, "arr", &arr);
    BSON_APPEND_INT32(&arr, "0", 0);
    BSON_APPEND_UTF8(&arr, "1", "x");
    bson_append_array_end(&sub, &arr);
    BSON_APPEND_REGEX(&sub, "re", "a", "i"); /* written as null */
    char s[200];
    memset(s, 'k', sizeof(s) - 1);
    s[sizeof(s) - 1] = '\0';
    BSON_APPEND_UTF8(&sub, "long", s);
    bson_append_document_end(key, &sub);
}

static void test_round_trip(void)
{
    bson_t key, tok;
    sbl_cs_pos_t back;
    sbl_err_t err;
    rich_key(&key);
    for (int frag = 0; frag < 3; frag++) {
        sbl_cs_pos_t p = {.ts = (uint64_t)1700000000 << 32 | 7, .event = true, .op_index = 3,
                          .fragment = frag};
        make(&p, &key, &tok);
        sbl_err_clear(&err);
        CHECK(sbl_cs_token_parse(&tok, &back, &err) == 0);
        CHECK(sbl_cs_pos_cmp(&p, &back) == 0);
        CHECK(back.fragment == frag && back.op_index == 3 && back.event);
        bson_destroy(&tok);
    }
    /* a high-water mark: no UUID, no identifier */
    sbl_cs_pos_t h = {.ts = 42};
    make(&h, NULL, &tok);
    CHECK(sbl_cs_token_parse(&tok, &back, &err) == 0 && sbl_cs_pos_cmp(&h, &back) == 0);
    bson_destroy(&tok);
    bson_destroy(&key);
}

static void test_fragments_sort_and_parse(void)
{
    bson_t key = BSON_INITIALIZER, tok;
    sbl_cs_pos_t p = {.ts = 99, .event = true}, back;
    sbl_err_t err;
    BSON_APPEND_INT32(&key, "_id", 1);
    make(&p, &key, &tok);
    char *whole = sbl_cs_token_str(&tok);
    bson_destroy(&tok);
    char *f0 = sbl_cs_token_fragment(whole, 0), *f1 = sbl_cs_token_fragment(whole, 1);
    char *f300 = sbl_cs_token_fragment(whole, 300);
    CHECK(strcmp(whole, f0) < 0 && strcmp(f0, f1) < 0 && strcmp(f1, f300) < 0);
    sbl_cs_pos_t later = {.ts = 100};
    make(&later, NULL, &tok);
    char *next = sbl_cs_token_str(&tok);
    bson_destroy(&tok);
    CHECK(strcmp(f300, next) < 0);
    bson_init(&tok);
    BSON_APPEND_UTF8(&tok, "_data", f1);
    sbl_err_clear(&err);
    CHECK(sbl_cs_token_parse(&tok, &back, &err) == 0 && back.fragment == 2 && back.ts == 99);
    bson_destroy(&tok);
    /* the same as sbl_cs_token_make gives for that fragment */
    p.fragment = 2;
    make(&p, &key, &tok);
    char *made = sbl_cs_token_str(&tok);
    CHECK(strcmp(made, f1) == 0);
    bson_destroy(&tok);
    bson_free(made);
    bson_free(whole);
    bson_free(f0);
    bson_free(f1);
    bson_free(f300);
    bson_free(next);
    bson_destroy(&key);
}

static void test_malformed(void)
{
    static const char *const bad[] = {"", "82", "8200000000000000012B", "ZZ00000000000000012B0204",
                                      "83000000000000000001", NULL};
    sbl_cs_pos_t back;
    sbl_err_t err;
    for (int i = 0; bad[i] != NULL; i++) {
        bson_t tok = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&tok, "_data", bad[i]);
        sbl_err_clear(&err);
        CHECK_MSG(sbl_cs_token_parse(&tok, &back, &err) == SBL_E_FailedToParse, "%s", bad[i]);
        bson_destroy(&tok);
    }
    bson_t tok = BSON_INITIALIZER;
    BSON_APPEND_INT32(&tok, "_data", 1);
    CHECK(sbl_cs_token_parse(&tok, &back, &err) == SBL_E_FailedToParse);
    bson_destroy(&tok);
}

int main(void)
{
    test_round_trip();
    test_fragments_sort_and_parse();
    test_malformed();
    return CHECK_DONE("cs_token");
}
