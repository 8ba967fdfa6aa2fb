/*
 * test_collation.c: the collation module (src/doc/collation.c): parsing and
 * MongoDB's errors, the strengths, numericOrdering, caseFirst, and that
 * comparison under a collation agrees with memcmp of the key encoding.
 */
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "doc/doc.h"

static const sbl_collation_t *open_json(const char *json, int *codep)
{
    bson_error_t be;
    bson_t *spec = bson_new_from_json((const uint8_t *)json, -1, &be);
    const sbl_collation_t *c = NULL;
    sbl_err_t err = {0};
    *codep = spec == NULL ? -1 : sbl_collation_parse(spec, &c, &err);
    bson_destroy(spec);
    return c;
}

static const sbl_collation_t *must_open(const char *json)
{
    int code;
    const sbl_collation_t *c = open_json(json, &code);
    CHECK_MSG(code == 0 && c != NULL, "%s: code %d", json, code);
    return c;
}

static int cmp(const sbl_collation_t *c, const char *a, const char *b)
{
    return sbl_collation_compare(c, a, strlen(a), b, strlen(b));
}

static bson_value_t str(const char *s)
{
    bson_value_t v = {.value_type = BSON_TYPE_UTF8};
    v.value.v_utf8.str = (char *)s;
    v.value.v_utf8.len = (uint32_t)strlen(s);
    return v;
}

/* The key encodings of a and b order as compare_coll does. */
static int key_order(const sbl_collation_t *c, const bson_value_t *a, const bson_value_t *b)
{
    sbl_buf_t ka, kb;
    sbl_buf_init(&ka);
    sbl_buf_init(&kb);
    sbl_key_append_coll(&ka, a, false, c);
    sbl_key_append_coll(&kb, b, false, c);
    size_t n = ka.len < kb.len ? ka.len : kb.len;
    int r = memcmp(ka.data, kb.data, n);
    if (r == 0)
        r = (ka.len > kb.len) - (ka.len < kb.len);
    sbl_buf_destroy(&ka);
    sbl_buf_destroy(&kb);
    return (r > 0) - (r < 0);
}

static void test_strengths(void)
{
    const sbl_collation_t *s1 = must_open("{\"locale\": \"en_US\", \"strength\": 1}");
    const sbl_collation_t *s2 = must_open("{\"locale\": \"en_US\", \"strength\": 2}");
    const sbl_collation_t *s3 = must_open("{\"locale\": \"en_US\"}");
    if (s1 == NULL || s2 == NULL || s3 == NULL)
        return;
    /* primary: base letters only */
    CHECK(cmp(s1, "cafe", "Café") == 0);
    CHECK(cmp(s1, "a", "b") < 0);
    /* secondary: accents count, case does not */
    CHECK(cmp(s2, "PING", "ping") == 0);
    CHECK(cmp(s2, "cafe", "café") < 0);
    /* tertiary (the default): case counts, lower first */
    CHECK(cmp(s3, "ping", "PING") < 0);
    CHECK(cmp(s3, "ping", "ping") == 0);
    /* binary puts every capital before every small letter; a collation does not */
    CHECK(cmp(s3, "B", "a") > 0);
}

static void test_options(void)
{
    const sbl_collation_t *num = must_open("{\"locale\": \"en\", \"numericOrdering\": true}");
    const sbl_collation_t *plain = must_open("{\"locale\": \"en\"}");
    const sbl_collation_t *upper = must_open("{\"locale\": \"en\", \"caseFirst\": \"upper\"}");
    const sbl_collation_t *shifted =
        must_open("{\"locale\": \"en\", \"alternate\": \"shifted\", \"strength\": 1}");
    if (num == NULL || plain == NULL || upper == NULL || shifted == NULL)
        return;
    CHECK(cmp(num, "10", "9") > 0);
    CHECK(cmp(plain, "10", "9") < 0);
    CHECK(cmp(upper, "A", "a") < 0);
    CHECK(cmp(plain, "A", "a") > 0);
    CHECK(cmp(shifted, "a-b", "ab") == 0);
    /* the cache hands out one entry per distinct document */
    CHECK(plain == must_open("{\"locale\": \"en\"}"));
    CHECK(sbl_collation_equal(plain, plain) && !sbl_collation_equal(plain, num));
    CHECK(!sbl_collation_equal(plain, NULL) && sbl_collation_equal(NULL, NULL));

    /* the full spec as MongoDB reports it */
    const bson_t *spec = sbl_collation_spec(num);
    bson_iter_t it;
    CHECK(bson_iter_init_find(&it, spec, "strength") && bson_iter_int32(&it) == 3);
    CHECK(bson_iter_init_find(&it, spec, "numericOrdering") && bson_iter_bool(&it));
    CHECK(bson_iter_init_find(&it, spec, "caseFirst") &&
          strcmp(bson_iter_utf8(&it, NULL), "off") == 0);
    CHECK(bson_iter_init_find(&it, spec, "locale") && strcmp(bson_iter_utf8(&it, NULL), "en") == 0);
}

static void test_bad_specs(void)
{
    static const struct {
        const char *json;
        int code;
    } bad[] = {
        {"{}", 40414},
        {"{\"strength\": 2}", 40414},
        {"{\"locale\": \"en\", \"bogus\": 1}", 40415},
        {"{\"locale\": 5}", 14},
        {"{\"locale\": \"en\", \"strength\": 0}", 9},
        {"{\"locale\": \"en\", \"strength\": 6}", 9},
        {"{\"locale\": \"en\", \"strength\": 2.5}", 9},
        {"{\"locale\": \"en\", \"strength\": \"2\"}", 14},
        {"{\"locale\": \"en\", \"caseFirst\": \"sideways\"}", 9},
        {"{\"locale\": \"en\", \"alternate\": \"x\"}", 9},
        {"{\"locale\": \"en\", \"maxVariable\": \"x\"}", 9},
        {"{\"locale\": \"en\", \"caseLevel\": 1}", 14},
        {"{\"locale\": \"simple\", \"strength\": 1}", 9},
        {"{\"locale\": \"xx_bogus\"}", 2},
        {"{\"locale\": \"\"}", 2},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int code;
        const sbl_collation_t *c = open_json(bad[i].json, &code);
        CHECK_MSG(code == bad[i].code && c == NULL, "%s: got %d want %d", bad[i].json, code,
                  bad[i].code);
    }
    int code;
    CHECK(open_json("{\"locale\": \"simple\"}", &code) == NULL && code == 0);
    CHECK(open_json("{\"locale\": \"fr_CA\", \"backwards\": true}", &code) != NULL && code == 0);
    CHECK(open_json("{\"locale\": \"de@collation=phonebook\"}", &code) != NULL && code == 0);
}

static void test_values_and_keys(void)
{
    const sbl_collation_t *s2 = must_open("{\"locale\": \"en_US\", \"strength\": 2}");
    if (s2 == NULL)
        return;
    static const char *words[] = {"ping", "PING", "Ping", "pong", "", "a", "B", "café",
                                  "cafe", "zebra", "Zebra", "10", "9", "a\0b"};
    size_t n = sizeof(words) / sizeof(words[0]);
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            bson_value_t a = str(words[i]), b = str(words[j]);
            int c = sbl_value_compare_coll(&a, &b, s2);
            CHECK_MSG(key_order(s2, &a, &b) == c, "%s vs %s", words[i], words[j]);
            CHECK(sbl_value_compare_coll(&a, &b, NULL) == sbl_value_compare(&a, &b));
        }
    }
    /* strings nested in documents and arrays follow the collation too */
    bson_t *d1 = BCON_NEW("x", "[", "PING", "]");
    bson_t *d2 = BCON_NEW("x", "[", "ping", "]");
    bson_value_t v1 = {.value_type = BSON_TYPE_DOCUMENT}, v2 = v1;
    v1.value.v_doc.data = (uint8_t *)bson_get_data(d1);
    v1.value.v_doc.data_len = d1->len;
    v2.value.v_doc.data = (uint8_t *)bson_get_data(d2);
    v2.value.v_doc.data_len = d2->len;
    CHECK(sbl_value_compare_coll(&v1, &v2, s2) == 0);
    CHECK(sbl_value_compare(&v1, &v2) < 0);
    CHECK(key_order(s2, &v1, &v2) == 0);
    /* other types are untouched */
    bson_value_t i1 = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 1};
    bson_value_t s = str("a");
    CHECK(sbl_value_compare_coll(&i1, &s, s2) < 0);
    bson_destroy(d1);
    bson_destroy(d2);
}

static void *thread_main(void *arg)
{
    const sbl_collation_t *c = arg;
    intptr_t bad = 0;
    for (int i = 0; i < 2000; i++)
        bad += cmp(c, "PING", "ping") != 0;
    return (void *)bad;
}

static void test_threads(void)
{
    const sbl_collation_t *s2 = must_open("{\"locale\": \"en_US\", \"strength\": 2}");
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, thread_main, (void *)s2);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        CHECK(r == NULL);
    }
}

int main(void)
{
    test_strengths();
    test_options();
    test_bad_specs();
    test_values_and_keys();
    test_threads();
    return CHECK_DONE("test_collation");
}
