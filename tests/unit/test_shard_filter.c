/*
 * test_shard_filter.c: the ownership filter of routed reads (src/shard/
 * shard_filter.c) over config.chunks documents, without a cluster: which
 * documents a shard owns for range and compound keys (bounds [min, max),
 * missing fields as null, adjacent chunks merged), a shard that owns every
 * chunk (trivial), none, the ownership at a cluster time from the chunks'
 * history, and a hashed key; and the shard key values those, the router and
 * a migration read from a document (src/shard/shard_key.c): dotted paths,
 * missing fields, arrays, hashed fields, fields named by the whole path.
 */
#include "check.h"
#include "shard/shard_int.h"
#include "storage/storage.h"

#include <bson/bson.h>
#include <string.h>

#define TS(t) (((uint64_t)(t) << 32) | 1)

/* {min: {k: lo}, max: {k: hi}, shard, history: [{validAfter: Timestamp(h1, 1), shard:
 * s1}, ...]}; lo/hi INT64_MIN / INT64_MAX stand for MinKey / MaxKey. */
static void chunk(bson_t *arr, int i, int64_t lo, int64_t hi, const char *shard,
                  uint32_t h1, const char *s1, uint32_t h2, const char *s2)
{
    char key[16];
    bson_t c, b, h, e;
    snprintf(key, sizeof(key), "%d", i);
    BSON_APPEND_DOCUMENT_BEGIN(arr, key, &c);
    BSON_APPEND_DOCUMENT_BEGIN(&c, "min", &b);
    if (lo == INT64_MIN)
        BSON_APPEND_MINKEY(&b, "k");
    else
        BSON_APPEND_INT64(&b, "k", lo);
    bson_append_document_end(&c, &b);
    BSON_APPEND_DOCUMENT_BEGIN(&c, "max", &b);
    if (hi == INT64_MAX)
        BSON_APPEND_MAXKEY(&b, "k");
    else
        BSON_APPEND_INT64(&b, "k", hi);
    bson_append_document_end(&c, &b);
    BSON_APPEND_UTF8(&c, "shard", shard);
    BSON_APPEND_ARRAY_BEGIN(&c, "history", &h);
    if (h1 != 0) {
        BSON_APPEND_DOCUMENT_BEGIN(&h, "0", &e);
        BSON_APPEND_TIMESTAMP(&e, "validAfter", h1, 1);
        BSON_APPEND_UTF8(&e, "shard", s1);
        bson_append_document_end(&h, &e);
    }
    if (h2 != 0) {
        BSON_APPEND_DOCUMENT_BEGIN(&h, "1", &e);
        BSON_APPEND_TIMESTAMP(&e, "validAfter", h2, 1);
        BSON_APPEND_UTF8(&e, "shard", s2);
        bson_append_document_end(&h, &e);
    }
    bson_append_array_end(&c, &h);
    bson_append_document_end(arr, &c);
}

static sbl_shard_filter_t *build(const bson_t *key, const bson_t *arr, const char *me)
{
    bson_t wrap = BSON_INITIALIZER;
    bson_iter_t it, c;
    BSON_APPEND_ARRAY(&wrap, "a", arr);
    bson_iter_init_find(&it, &wrap, "a");
    bson_iter_recurse(&it, &c);
    sbl_shard_filter_t *f = shard_filter_build("db.c", key, &c, me);
    bson_destroy(&wrap);
    return f;
}

static bool owns_k(const sbl_shard_filter_t *f, int64_t k)
{
    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_INT64(&d, "k", k);
    bool r = sbl_shard_filter_owns(f, &d);
    bson_destroy(&d);
    return r;
}

static void range_key(void)
{
    bson_t key = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    BSON_APPEND_INT32(&key, "k", 1);
    /* out of order on purpose: the filter sorts by min.  shard0 owns
     * [MinKey, 0) and [10, 20) + [20, 30) (merged); shard1 [0, 10) and [30, MaxKey).
     * [0, 10) was shard0's until time 100. */
    chunk(&arr, 0, 10, 20, "shard0", 0, NULL, 0, NULL);
    chunk(&arr, 1, 0, 10, "shard1", 100, "shard1", 50, "shard0");
    chunk(&arr, 2, 30, INT64_MAX, "shard1", 0, NULL, 0, NULL);
    chunk(&arr, 3, INT64_MIN, 0, "shard0", 0, NULL, 0, NULL);
    chunk(&arr, 4, 20, 30, "shard0", 0, NULL, 0, NULL);
    sbl_shard_filter_t *f = build(&key, &arr, "shard0");
    CHECK(f != NULL && !sbl_shard_filter_trivial(f));
    CHECK(strcmp(sbl_shard_filter_ns(f), "db.c") == 0);
    CHECK(owns_k(f, -1000) && owns_k(f, -1));
    CHECK(!owns_k(f, 0) && !owns_k(f, 9));
    CHECK(owns_k(f, 10) && owns_k(f, 25) && owns_k(f, 29));
    CHECK(!owns_k(f, 30) && !owns_k(f, 1000));
    bson_t nokey = BSON_INITIALIZER; /* a missing key field is null: below 0 */
    BSON_APPEND_INT32(&nokey, "x", 1);
    CHECK(sbl_shard_filter_owns(f, &nokey));
    bson_destroy(&nokey);

    /* at time 70 shard0 still owned [0, 10); at 100 and after, not */
    sbl_shard_filter_t *g = sbl_shard_filter_at(f, TS(70));
    CHECK(owns_k(g, 5) && owns_k(g, -1) && owns_k(g, 15) && !owns_k(g, 35));
    sbl_shard_filter_t *h = sbl_shard_filter_at(f, TS(100));
    CHECK(!owns_k(h, 5));
    /* before any history entry: the owner now */
    sbl_shard_filter_t *old = sbl_shard_filter_at(f, TS(10));
    CHECK(!owns_k(old, 5));
    sbl_shard_filter_release(old);
    sbl_shard_filter_release(h);
    sbl_shard_filter_release(f); /* g keeps the table */
    CHECK(owns_k(g, 5));
    sbl_shard_filter_release(g);

    sbl_shard_filter_t *one = build(&key, &arr, "shard1");
    CHECK(owns_k(one, 0) && owns_k(one, 9) && owns_k(one, 30) && owns_k(one, 1LL << 60));
    CHECK(!owns_k(one, -1) && !owns_k(one, 10) && !owns_k(one, 29));
    sbl_shard_filter_release(one);

    sbl_shard_filter_t *none = build(&key, &arr, "shard2");
    CHECK(!sbl_shard_filter_trivial(none) && !owns_k(none, 0) && !owns_k(none, -5));
    sbl_shard_filter_release(none);
    bson_destroy(&arr);

    /* every chunk on one shard: trivial, nothing to check */
    bson_init(&arr);
    chunk(&arr, 0, INT64_MIN, 0, "shard0", 0, NULL, 0, NULL);
    chunk(&arr, 1, 0, INT64_MAX, "shard0", 0, NULL, 0, NULL);
    sbl_shard_filter_t *all = build(&key, &arr, "shard0");
    CHECK(sbl_shard_filter_trivial(all) && owns_k(all, 123));
    sbl_shard_filter_release(all);
    CHECK(sbl_shard_filter_trivial(NULL));
    bson_destroy(&arr);
    bson_destroy(&key);
}

static void hashed_key(void)
{
    bson_t key = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&key, "k", "hashed");
    chunk(&arr, 0, INT64_MIN, 0, "shard0", 0, NULL, 0, NULL);
    chunk(&arr, 1, 0, INT64_MAX, "shard1", 0, NULL, 0, NULL);
    sbl_shard_filter_t *f0 = build(&key, &arr, "shard0");
    sbl_shard_filter_t *f1 = build(&key, &arr, "shard1");
    int n0 = 0;
    for (int64_t k = 0; k < 200; k++) {
        bson_value_t v = {.value_type = BSON_TYPE_INT64, .value.v_int64 = k}, h;
        sbl_index_hash(&v, &h);
        bool mine0 = owns_k(f0, k);
        CHECK(mine0 == (h.value.v_int64 < 0));
        CHECK(mine0 != owns_k(f1, k)); /* exactly one owner */
        n0 += mine0;
    }
    CHECK(n0 > 50 && n0 < 150);
    sbl_shard_filter_release(f0);
    sbl_shard_filter_release(f1);
    bson_destroy(&arr);
    bson_destroy(&key);
}

static bool is_int(const bson_value_t *v, int64_t n)
{
    return (v->value_type == BSON_TYPE_INT32 && v->value.v_int32 == n) ||
           (v->value_type == BSON_TYPE_INT64 && v->value.v_int64 == n);
}

static void key_values(void)
{
    bson_value_t vals[SBL_SHARD_KEY_MAX];
    int hpos;
    bson_t *key = BCON_NEW("a.b", BCON_INT32(1), "c", BCON_INT32(1));
    CHECK(sbl_shard_key_shape(key, &hpos) == 2 && hpos == -1);
    /* dotted path through embedded documents, in the pattern's order */
    bson_t *d = BCON_NEW("c", BCON_INT32(7), "a", "{", "b", BCON_INT32(5), "}");
    CHECK(sbl_shard_key_values(key, -1, d, 0, vals) == 0);
    CHECK(is_int(&vals[0], 5) && is_int(&vals[1], 7));
    bson_destroy(d);
    /* missing fields, and a path through a scalar: null */
    d = BCON_NEW("a", BCON_INT32(3));
    CHECK(sbl_shard_key_values(key, -1, d, 0, vals) == SBL_SHARD_KEY_MISSING);
    CHECK(vals[0].value_type == BSON_TYPE_NULL && vals[1].value_type == BSON_TYPE_NULL);
    bson_destroy(d);
    /* a field named by the whole path counts only when asked (bounds, a find) */
    d = BCON_NEW("a.b", BCON_INT32(4), "c", BCON_INT32(1));
    CHECK(sbl_shard_key_values(key, -1, d, 0, vals) == SBL_SHARD_KEY_MISSING);
    CHECK(vals[0].value_type == BSON_TYPE_NULL);
    CHECK(sbl_shard_key_values(key, -1, d, SBL_SHARD_KEY_WHOLE_NAMES, vals) == 0);
    CHECK(is_int(&vals[0], 4) && is_int(&vals[1], 1));
    bson_destroy(d);
    /* arrays are no shard key values: as the value, or on the path to it */
    d = BCON_NEW("a", "{", "b", "[", BCON_INT32(1), BCON_INT32(2), "]", "}", "c", BCON_INT32(1));
    CHECK(sbl_shard_key_values(key, -1, d, 0, vals) == SBL_SHARD_KEY_ARRAY);
    CHECK(vals[0].value_type == BSON_TYPE_ARRAY);
    bson_destroy(d);
    d = BCON_NEW("a", "[", "{", "b", BCON_INT32(1), "}", "]", "c", BCON_INT32(1));
    CHECK(sbl_shard_key_values(key, -1, d, 0, vals) ==
          (SBL_SHARD_KEY_ARRAY | SBL_SHARD_KEY_MISSING));
    bson_destroy(d);
    bson_destroy(key);

    /* a hashed field holds the hash a hashed index stores, a missing one null's */
    key = BCON_NEW("x", BCON_INT32(1), "h", BCON_UTF8("hashed"));
    CHECK(sbl_shard_key_shape(key, &hpos) == 2 && hpos == 1);
    d = BCON_NEW("h", BCON_INT64(42), "x", BCON_UTF8("s"));
    bson_value_t v = {.value_type = BSON_TYPE_INT64, .value.v_int64 = 42}, h, hn;
    sbl_index_hash(&v, &h);
    CHECK(sbl_shard_key_values(key, hpos, d, 0, vals) == 0);
    CHECK(vals[0].value_type == BSON_TYPE_UTF8 && vals[1].value_type == BSON_TYPE_INT64 &&
          vals[1].value.v_int64 == h.value.v_int64);
    CHECK(sbl_shard_key_values(key, -1, d, 0, vals) == 0 && is_int(&vals[1], 42)); /* a bound */
    bson_destroy(d);
    d = BCON_NEW("x", BCON_INT32(1));
    v.value_type = BSON_TYPE_NULL;
    sbl_index_hash(&v, &hn);
    CHECK(sbl_shard_key_values(key, hpos, d, 0, vals) == SBL_SHARD_KEY_MISSING);
    CHECK(vals[1].value_type == BSON_TYPE_INT64 && vals[1].value.v_int64 == hn.value.v_int64);
    bson_destroy(d);
    bson_destroy(key);

    /* an empty pattern is no key; a longer one than SBL_SHARD_KEY_MAX says so */
    key = bson_new();
    CHECK(sbl_shard_key_shape(key, &hpos) == 0 && hpos == -1);
    for (int i = 0; i < SBL_SHARD_KEY_MAX + 1; i++) {
        char f[16];
        snprintf(f, sizeof(f), "f%d", i);
        BSON_APPEND_INT32(key, f, 1);
    }
    CHECK(sbl_shard_key_shape(key, &hpos) == SBL_SHARD_KEY_MAX + 1);
    bson_destroy(key);
}

int main(void)
{
    range_key();
    hashed_key();
    key_values();
    return CHECK_DONE("test_shard_filter");
}
