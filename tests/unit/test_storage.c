/*
 * test_storage.c: the storage engine against a real WiredTiger in a fresh
 * temporary dbpath: persistence across close/reopen (clean and unclean),
 * the write path and its errors, ordered scans, the catalog, counts,
 * write conflicts, group commit, the dbpath lock, and drops that race with
 * other threads' cached cursors; a time-series collection's repeated _ids;
 * the versioned session transaction table.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "storage/storage.h"
#include "storage/wt_int.h"

static char dbpath[256];

static void open_engine(void)
{
    sbl_storage_config_t cfg = {.dbpath = dbpath, .cache_size_gb = 0.25,
                                .commit_interval_ms = 50, .syncdelay_s = 60};
    sbl_err_t err;
    int rc = sbl_storage_open(&cfg, &err);
    CHECK_MSG(rc == 0, "open: %s", err.msg);
    if (rc != 0)
        exit(1);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static sbl_coll_t *coll(const char *ns, bool create)
{
    sbl_coll_t *c = NULL;
    sbl_err_t err;
    int rc = sbl_coll_open(sbl_session_get(), ns, create, &c, NULL, &err);
    CHECK_MSG(rc == 0, "coll_open %s: %s", ns, err.msg);
    return c;
}

static int insert_json(sbl_coll_t *c, const char *json, bson_t *err_info, sbl_err_t *err)
{
    bson_error_t berr;
    bson_t *doc = bson_new_from_json((const uint8_t *)json, -1, &berr);
    int rc;
    if (doc == NULL) {
        fprintf(stderr, "bad json %s: %s\n", json, berr.message);
        exit(1);
    }
    rc = sbl_write(sbl_session_get(), c, SBL_WRITE_INSERT, NULL, doc, err_info, err);
    bson_destroy(doc);
    return rc;
}

static void insert_ok(sbl_coll_t *c, const char *json)
{
    sbl_err_t err;
    int rc = insert_json(c, json, NULL, &err);
    CHECK_MSG(rc == 0, "insert %s: %s", json, err.msg);
}

/* Fetch by an int32 _id; returns the document's "v" field or -1 if absent. */
static int get_v(sbl_coll_t *c, int id)
{
    bson_value_t idv = {.value_type = BSON_TYPE_INT32, .value.v_int32 = id};
    bson_t doc;
    bson_iter_t it;
    bool found;
    sbl_err_t err;
    int v = -1;

    CHECK(sbl_coll_get(sbl_session_get(), c, &idv, &doc, &found, &err) == 0);
    if (found) {
        if (bson_iter_init_find(&it, &doc, "v"))
            v = bson_iter_int32(&it);
        bson_destroy(&doc);
    }
    return v;
}

static int64_t count_of(sbl_coll_t *c)
{
    sbl_coll_stats_t st;
    sbl_err_t err;
    CHECK(sbl_coll_stats(sbl_session_get(), c, &st, &err) == 0);
    return st.count;
}

static void test_crud(void)
{
    sbl_session_t *s = sbl_session_get();
    sbl_coll_t *c, *c2;
    sbl_err_t err;
    bson_t info = BSON_INITIALIZER;
    bool created = false;

    CHECK(s != NULL);
    CHECK(sbl_coll_open(s, "test.crud", false, &c, NULL, &err) == SBL_E_NamespaceNotFound);
    CHECK(sbl_coll_open(s, "test.crud", true, &c, &created, &err) == 0 && created);
    CHECK(sbl_coll_open(s, "test.crud", true, &c2, &created, &err) == 0 && !created);
    CHECK(c == c2);
    sbl_coll_release(c2);
    CHECK(strcmp(sbl_coll_ns(c), "test.crud") == 0);

    insert_ok(c, "{\"_id\": 1, \"v\": 10}");
    insert_ok(c, "{\"_id\": 2, \"v\": 20}");
    insert_ok(c, "{\"_id\": \"user1\", \"v\": 30}");
    CHECK(get_v(c, 1) == 10);
    CHECK(get_v(c, 2) == 20);
    CHECK(get_v(c, 3) == -1);
    CHECK(count_of(c) == 3);

    /* Duplicate keys: MongoDB's message and err_info. */
    CHECK(insert_json(c, "{\"_id\": 1, \"v\": 11}", &info, &err) == SBL_E_DuplicateKey);
    CHECK(err.code == 11000);
    CHECK_MSG(strcmp(err.msg, "E11000 duplicate key error collection: test.crud index: _id_ dup "
                              "key: { _id: 1 }") == 0,
              "%s", err.msg);
    bson_iter_t it, sub;
    CHECK(bson_iter_init_find(&it, &info, "keyPattern") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
          bson_iter_recurse(&it, &sub) && bson_iter_find(&sub, "_id") &&
          bson_iter_as_int64(&sub) == 1);
    CHECK(bson_iter_init_find(&it, &info, "keyValue") && bson_iter_recurse(&it, &sub) &&
          bson_iter_find(&sub, "_id") && BSON_ITER_HOLDS_INT32(&sub) &&
          bson_iter_int32(&sub) == 1);
    bson_destroy(&info);
    CHECK(insert_json(c, "{\"_id\": \"user1\"}", NULL, &err) == SBL_E_DuplicateKey);
    CHECK_MSG(strstr(err.msg, "dup key: { _id: \"user1\" }") != NULL, "%s", err.msg);
    CHECK(insert_json(c, "{\"_id\": {\"$oid\": \"0123456789abcdef01234567\"}}", NULL, &err) == 0);
    CHECK(insert_json(c, "{\"_id\": {\"$oid\": \"0123456789abcdef01234567\"}}", NULL, &err) ==
          SBL_E_DuplicateKey);
    CHECK_MSG(strstr(err.msg, "{ _id: ObjectId('0123456789abcdef01234567') }") != NULL, "%s",
              err.msg);
    CHECK(count_of(c) == 4);

    /* Update and delete. */
    bson_t *old = BCON_NEW("_id", BCON_INT32(2), "v", BCON_INT32(20));
    bson_t *upd = BCON_NEW("_id", BCON_INT32(2), "v", BCON_INT32(21), "pad", BCON_UTF8("xxxx"));
    bson_t *other = BCON_NEW("_id", BCON_INT32(3), "v", BCON_INT32(1));
    sbl_coll_stats_t st0, st1;
    CHECK(sbl_coll_stats(s, c, &st0, &err) == 0);
    CHECK(sbl_write(s, c, SBL_WRITE_UPDATE, old, upd, NULL, &err) == 0);
    CHECK(get_v(c, 2) == 21);
    CHECK(sbl_coll_stats(s, c, &st1, &err) == 0);
    CHECK(st1.count == st0.count && st1.data_size == st0.data_size + upd->len - old->len);
    CHECK(sbl_write(s, c, SBL_WRITE_UPDATE, upd, other, NULL, &err) == SBL_E_ImmutableField);
    CHECK(sbl_write(s, c, SBL_WRITE_DELETE, upd, NULL, NULL, &err) == 0);
    CHECK(get_v(c, 2) == -1);
    CHECK(count_of(c) == 3);
    CHECK(sbl_coll_stats(s, c, &st1, &err) == 0);
    CHECK(st1.data_size == st0.data_size - old->len);
    bson_destroy(old);
    bson_destroy(upd);
    bson_destroy(other);

    /* Counts move on commit only. */
    CHECK(sbl_txn_begin(s, &err) == 0);
    insert_ok(c, "{\"_id\": 100, \"v\": 1}");
    insert_ok(c, "{\"_id\": 101, \"v\": 1}");
    CHECK(count_of(c) == 3);
    CHECK(get_v(c, 100) == 1); /* own writes are visible inside the transaction */
    sbl_txn_abort(s);
    CHECK(get_v(c, 100) == -1);
    CHECK(count_of(c) == 3);
    CHECK(sbl_txn_begin(s, &err) == 0);
    CHECK(sbl_txn_begin(s, &err) != 0);
    insert_ok(c, "{\"_id\": 100, \"v\": 1}");
    insert_ok(c, "{\"_id\": 101, \"v\": 1}");
    CHECK(sbl_txn_commit(s, &err) == 0);
    CHECK(count_of(c) == 5);
    CHECK(get_v(c, 101) == 1);
    sbl_coll_release(c);
}

/* Collect the scan's _ids as a compact string: ints as digits, strings as
 * themselves, ObjectIds as "O<last hex digit>", separated by commas. */
static void scan_ids(sbl_coll_t *c, const bson_value_t *lo, bool lo_inc, const bson_value_t *hi,
                     bool hi_inc, bool desc, char *out, size_t outlen)
{
    sbl_scan_bounds_t b = {lo, lo_inc, hi, hi_inc};
    sbl_scan_t *scan;
    sbl_err_t err;
    bson_t doc;
    bool done = false;

    out[0] = '\0';
    CHECK(sbl_scan_open(sbl_session_get(), c, &b, desc, &scan, &err) == 0);
    while (sbl_scan_next(scan, &doc, &done, &err) == 0 && !done) {
        bson_iter_t it;
        char item[32];
        if (!bson_iter_init_find(&it, &doc, "_id"))
            break;
        if (BSON_ITER_HOLDS_INT32(&it))
            snprintf(item, sizeof(item), "%d", bson_iter_int32(&it));
        else if (BSON_ITER_HOLDS_UTF8(&it))
            snprintf(item, sizeof(item), "%s", bson_iter_utf8(&it, NULL));
        else if (BSON_ITER_HOLDS_OID(&it)) {
            char hex[25];
            bson_oid_to_string(bson_iter_oid(&it), hex);
            snprintf(item, sizeof(item), "O%c", hex[23]);
        } else
            snprintf(item, sizeof(item), "?");
        if (out[0] != '\0')
            strncat(out, ",", outlen - strlen(out) - 1);
        strncat(out, item, outlen - strlen(out) - 1);
    }
    CHECK(done);
    sbl_scan_close(scan);
}

/* The "v" fields of a scan of c within [lo, hi] (inclusive as given), as digits. */
static void scan_vs(sbl_coll_t *c, const bson_value_t *lo, bool lo_inc, const bson_value_t *hi,
                    bool hi_inc, bool desc, char *out, size_t outlen)
{
    sbl_scan_bounds_t b = {lo, lo_inc, hi, hi_inc};
    sbl_scan_t *scan;
    sbl_err_t err;
    bson_t doc;
    bool done = false;
    size_t n = 0;

    CHECK(sbl_scan_open(sbl_session_get(), c, &b, desc, &scan, &err) == 0);
    while (sbl_scan_next(scan, &doc, &done, &err) == 0 && !done && n + 1 < outlen) {
        bson_iter_t it;
        out[n++] = bson_iter_init_find(&it, &doc, "v") ? (char)('0' + bson_iter_int32(&it)) : '?';
    }
    out[n] = '\0';
    CHECK(done);
    sbl_scan_close(scan);
}

/* A time-series collection keeps every document inserted with one _id: scans
 * return them in insertion order within the _id, bounds cover all of them,
 * and a delete takes the one with the given bytes. */
static void test_dup_ids(void)
{
    bson_t opts = BSON_INITIALIZER, ts;
    sbl_err_t err;
    char got[64];
    bson_value_t one = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 1};

    BSON_APPEND_DOCUMENT_BEGIN(&opts, "timeseries", &ts);
    BSON_APPEND_UTF8(&ts, "timeField", "t");
    bson_append_document_end(&opts, &ts);
    CHECK(sbl_coll_create(sbl_session_get(), "t.ts", &opts, &err) == 0);
    bson_destroy(&opts);
    sbl_coll_t *c = coll("t.ts", false);
    CHECK(sbl_coll_dup_ids(c));
    insert_ok(c, "{\"_id\": 1, \"v\": 1}");
    insert_ok(c, "{\"_id\": 1, \"v\": 2}");
    insert_ok(c, "{\"_id\": 2, \"v\": 3}");
    insert_ok(c, "{\"_id\": 1.0, \"v\": 4}"); /* the same _id for MongoDB */
    insert_ok(c, "{\"_id\": 0, \"v\": 5}");
    scan_vs(c, NULL, false, NULL, false, false, got, sizeof(got));
    CHECK_MSG(strcmp(got, "51243") == 0, "all: %s", got);
    scan_vs(c, NULL, false, NULL, false, true, got, sizeof(got));
    CHECK_MSG(strcmp(got, "34215") == 0, "descending: %s", got);
    scan_vs(c, &one, true, &one, true, false, got, sizeof(got));
    CHECK_MSG(strcmp(got, "124") == 0, "[1, 1]: %s", got);
    scan_vs(c, &one, false, NULL, false, false, got, sizeof(got));
    CHECK_MSG(strcmp(got, "3") == 0, "(1, ...: %s", got);
    scan_vs(c, NULL, false, &one, false, true, got, sizeof(got));
    CHECK_MSG(strcmp(got, "5") == 0, "... 1) descending: %s", got);
    scan_vs(c, NULL, false, &one, true, true, got, sizeof(got));
    CHECK_MSG(strcmp(got, "4215") == 0, "... 1] descending: %s", got);

    /* the document with these bytes, then a delete of exactly it */
    bson_t *like = BCON_NEW("_id", BCON_INT32(1), "v", BCON_INT32(2)), doc;
    bool found = false;
    CHECK(sbl_coll_get_same(sbl_session_get(), c, like, &doc, &found, &err) == 0 && found);
    if (found)
        bson_destroy(&doc);
    CHECK(sbl_write(sbl_session_get(), c, SBL_WRITE_DELETE, like, NULL, NULL, &err) == 0);
    CHECK(sbl_coll_get_same(sbl_session_get(), c, like, &doc, &found, &err) == 0 && !found);
    bson_destroy(like);
    scan_vs(c, &one, true, &one, true, false, got, sizeof(got));
    CHECK_MSG(strcmp(got, "14") == 0, "after the delete: %s", got);
    sbl_coll_stats_t st;
    CHECK(sbl_coll_stats(sbl_session_get(), c, &st, &err) == 0 && st.count == 4);
    sbl_coll_release(c);
}

/* After a reopen the next insert under _id 1 still goes after the others. */
static void check_dup_ids_persisted(void)
{
    bson_value_t one = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 1};
    char got[64];
    sbl_coll_t *c = coll("t.ts", false);
    CHECK(sbl_coll_dup_ids(c));
    insert_ok(c, "{\"_id\": 1, \"v\": 6}");
    scan_vs(c, &one, true, &one, true, false, got, sizeof(got));
    CHECK_MSG(strcmp(got, "146") == 0, "after reopen: %s", got);
    sbl_coll_release(c);
}

/* config.transactions (SBL_VERSIONED_NS): each update stores a new version
 * under a new record key and removes the old one; reads see one document
 * per _id, inserts under a live _id are DuplicateKey. */
static void test_versioned(void)
{
    bson_value_t one = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 1};
    sbl_session_t *s = sbl_session_get();
    sbl_err_t err;
    char got[64];
    sbl_coll_t *c = coll(SBL_VERSIONED_NS, true);

    CHECK(sbl_coll_dup_ids(c));
    insert_ok(c, "{\"_id\": 1, \"v\": 0}");
    insert_ok(c, "{\"_id\": 2, \"v\": 7}");
    for (int i = 1; i <= 50; i++) {
        bson_t *old = BCON_NEW("_id", BCON_INT32(1), "v", BCON_INT32(i - 1));
        bson_t *new = BCON_NEW("_id", BCON_INT32(1), "v", BCON_INT32(i));
        CHECK(sbl_txn_begin(s, &err) == 0);
        int rc = sbl_write(s, c, SBL_WRITE_UPDATE, old, new, NULL, &err);
        CHECK_MSG(rc == 0, "update %d: %s", i, err.msg);
        if (i % 2 == 0) /* twice in one transaction too */
            CHECK(sbl_write(s, c, SBL_WRITE_UPDATE, new, new, NULL, &err) == 0);
        CHECK(sbl_txn_commit(s, &err) == 0);
        bson_destroy(old);
        bson_destroy(new);
    }
    CHECK(get_v(c, 1) == 50);
    scan_vs(c, &one, true, &one, true, false, got, sizeof(got)); /* scan_vs: '0' + v */
    CHECK_MSG(strcmp(got, "b") == 0, "[1, 1]: %s", got);
    scan_vs(c, NULL, false, NULL, false, false, got, sizeof(got));
    CHECK_MSG(strcmp(got, "b7") == 0, "all: %s", got);
    CHECK(count_of(c) == 2);
    /* the stored layout: _id 1's record key is its encoded _id and a
     * sequence number counting down from UINT64_MAX, one per version */
    WT_CURSOR *cur;
    WT_ITEM k;
    sbl_buf_t idk;
    sbl_buf_init(&idk);
    sbl_key_append(&idk, &one, false);
    CHECK(sbl_session_cursor(s, c->tbl, &cur, &err) == 0);
    CHECK(cur->next(cur) == 0 && cur->get_key(cur, &k) == 0);
    CHECK(k.size == idk.len + SBL_DUP_SEQ_LEN && memcmp(k.data, idk.data, idk.len) == 0);
    uint64_t seq = 0;
    for (size_t i = idk.len; i < k.size; i++)
        seq = (seq << 8) | ((const uint8_t *)k.data)[i];
    CHECK_MSG(seq == UINT64_MAX - 75, "sequence %llu", (unsigned long long)(UINT64_MAX - seq));
    cur->reset(cur);
    sbl_buf_destroy(&idk);
    bson_t info = BSON_INITIALIZER;
    CHECK(insert_json(c, "{\"_id\": 1, \"v\": 9}", &info, &err) == SBL_E_DuplicateKey);
    bson_destroy(&info);
    /* an aborted update leaves the version before it */
    bson_t *old = BCON_NEW("_id", BCON_INT32(1), "v", BCON_INT32(50));
    bson_t *new = BCON_NEW("_id", BCON_INT32(1), "v", BCON_INT32(99));
    CHECK(sbl_txn_begin(s, &err) == 0);
    CHECK(sbl_write(s, c, SBL_WRITE_UPDATE, old, new, NULL, &err) == 0);
    sbl_txn_abort(s);
    CHECK(get_v(c, 1) == 50);
    bson_destroy(new);
    CHECK(sbl_write(s, c, SBL_WRITE_DELETE, old, NULL, NULL, &err) == 0);
    bson_destroy(old);
    CHECK(get_v(c, 1) == -1 && get_v(c, 2) == 7 && count_of(c) == 1);
    insert_ok(c, "{\"_id\": 1, \"v\": 3}");
    CHECK(get_v(c, 1) == 3);
    sbl_coll_release(c);
}

/* After a reopen the versions go on from where they were. */
static void check_versioned_persisted(void)
{
    sbl_err_t err;
    sbl_coll_t *c = coll(SBL_VERSIONED_NS, false);
    CHECK(sbl_coll_dup_ids(c) && get_v(c, 1) == 3 && get_v(c, 2) == 7 && count_of(c) == 2);
    bson_t *old = BCON_NEW("_id", BCON_INT32(2), "v", BCON_INT32(7));
    bson_t *new = BCON_NEW("_id", BCON_INT32(2), "v", BCON_INT32(8));
    CHECK(sbl_write(sbl_session_get(), c, SBL_WRITE_UPDATE, old, new, NULL, &err) == 0);
    CHECK(get_v(c, 2) == 8 && count_of(c) == 2);
    bson_destroy(old);
    bson_destroy(new);
    sbl_coll_release(c);
}

static void test_scans(void)
{
    sbl_coll_t *c = coll("test.scan", true);
    char got[256];
    bson_value_t i2 = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 2};
    bson_value_t i4 = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 4};
    bson_value_t d25 = {.value_type = BSON_TYPE_DOUBLE, .value.v_double = 2.5};
    bson_value_t sb = {.value_type = BSON_TYPE_UTF8};
    sb.value.v_utf8.str = (char *)"b";
    sb.value.v_utf8.len = 1;

    /* Inserted out of order, mixed types. */
    insert_ok(c, "{\"_id\": \"c\"}");
    insert_ok(c, "{\"_id\": {\"$oid\": \"000000000000000000000002\"}}");
    insert_ok(c, "{\"_id\": 5}");
    insert_ok(c, "{\"_id\": \"a\"}");
    insert_ok(c, "{\"_id\": 1}");
    insert_ok(c, "{\"_id\": {\"$oid\": \"000000000000000000000001\"}}");
    insert_ok(c, "{\"_id\": 3}");
    insert_ok(c, "{\"_id\": \"b\"}");
    insert_ok(c, "{\"_id\": 4}");
    insert_ok(c, "{\"_id\": 2}");

    scan_ids(c, NULL, true, NULL, true, false, got, sizeof(got));
    CHECK_MSG(strcmp(got, "1,2,3,4,5,a,b,c,O1,O2") == 0, "%s", got);
    scan_ids(c, NULL, true, NULL, true, true, got, sizeof(got));
    CHECK_MSG(strcmp(got, "O2,O1,c,b,a,5,4,3,2,1") == 0, "%s", got);
    scan_ids(c, &i2, true, &i4, false, false, got, sizeof(got));
    CHECK_MSG(strcmp(got, "2,3") == 0, "%s", got);
    scan_ids(c, &i2, false, &i4, true, false, got, sizeof(got));
    CHECK_MSG(strcmp(got, "3,4") == 0, "%s", got);
    scan_ids(c, &i2, true, &i4, true, true, got, sizeof(got));
    CHECK_MSG(strcmp(got, "4,3,2") == 0, "%s", got);
    scan_ids(c, &i2, false, &i4, false, true, got, sizeof(got));
    CHECK_MSG(strcmp(got, "3") == 0, "%s", got);
    scan_ids(c, &d25, true, &sb, true, false, got, sizeof(got));
    CHECK_MSG(strcmp(got, "3,4,5,a,b") == 0, "%s", got);
    scan_ids(c, &d25, false, &sb, false, true, got, sizeof(got));
    CHECK_MSG(strcmp(got, "a,5,4,3") == 0, "%s", got);
    scan_ids(c, &sb, false, NULL, true, false, got, sizeof(got));
    CHECK_MSG(strcmp(got, "c,O1,O2") == 0, "%s", got);
    scan_ids(c, NULL, true, &d25, true, true, got, sizeof(got));
    CHECK_MSG(strcmp(got, "2,1") == 0, "%s", got);
    scan_ids(c, &i4, true, &i2, true, false, got, sizeof(got)); /* empty range */
    CHECK_MSG(strcmp(got, "") == 0, "%s", got);
    scan_ids(c, &i2, false, &i2, true, false, got, sizeof(got));
    CHECK_MSG(strcmp(got, "") == 0, "%s", got);
    scan_ids(c, &i2, true, &i2, true, true, got, sizeof(got));
    CHECK_MSG(strcmp(got, "2") == 0, "%s", got);
    sbl_coll_release(c);
}

typedef struct {
    char names[16][64];
    int n;
} list_t;

static bool list_visit(const char *ns, const bson_t *options, const uint8_t *uuid, void *arg)
{
    list_t *l = arg;
    if (l->n < 16)
        snprintf(l->names[l->n++], 64, "%s", ns);
    return true;
}

static void test_catalog(void)
{
    sbl_session_t *s = sbl_session_get();
    sbl_err_t err;
    bson_t *opts = BCON_NEW("capped", BCON_BOOL(true), "size", BCON_INT64(4096));
    list_t l = {0};
    sbl_coll_t *c;
    uint8_t uuid[16];

    CHECK(sbl_coll_create(s, "cat.x", opts, &err) == 0);
    CHECK(sbl_coll_create(s, "cat.x", NULL, &err) == SBL_E_NamespaceExists);
    CHECK(sbl_coll_create(s, "nodot", NULL, &err) == SBL_E_InvalidNamespace);
    CHECK(sbl_coll_create(s, "cat.a", NULL, &err) == 0);
    CHECK(sbl_coll_create(s, "catz.q", NULL, &err) == 0);
    c = coll("cat.x", false);
    bson_iter_t it;
    CHECK(bson_iter_init_find(&it, sbl_coll_options(c), "capped") && bson_iter_as_bool(&it));
    memcpy(uuid, sbl_coll_uuid(c), 16);
    insert_ok(c, "{\"_id\": 1, \"v\": 7}");
    sbl_coll_release(c);

    sbl_catalog_list("cat", list_visit, &l);
    CHECK(l.n == 2 && strcmp(l.names[0], "cat.a") == 0 && strcmp(l.names[1], "cat.x") == 0);

    CHECK(sbl_coll_rename(s, "cat.x", "cat.y", false, &err) == 0);
    CHECK(sbl_coll_open(s, "cat.x", false, &c, NULL, &err) == SBL_E_NamespaceNotFound);
    c = coll("cat.y", false);
    CHECK(memcmp(sbl_coll_uuid(c), uuid, 16) == 0);
    CHECK(get_v(c, 1) == 7);
    CHECK(count_of(c) == 1);
    sbl_coll_release(c);
    CHECK(sbl_coll_rename(s, "cat.y", "cat.a", false, &err) == SBL_E_NamespaceExists);
    CHECK(sbl_coll_rename(s, "cat.nope", "cat.b", false, &err) == SBL_E_NamespaceNotFound);
    CHECK(sbl_coll_rename(s, "cat.y", "other.y", false, &err) == 0); /* across databases */
    CHECK(sbl_coll_rename(s, "other.y", "cat.a", true, &err) == 0);  /* drop_target */
    c = coll("cat.a", false);
    CHECK(get_v(c, 1) == 7);
    sbl_coll_release(c);

    CHECK(sbl_coll_drop(s, "cat.a", &err) == 0);
    CHECK(sbl_coll_drop(s, "cat.a", &err) == SBL_E_NamespaceNotFound);
    l.n = 0;
    sbl_catalog_list("cat", list_visit, &l);
    CHECK(l.n == 0);

    CHECK(sbl_coll_create(s, "dropme.one", NULL, &err) == 0);
    CHECK(sbl_coll_create(s, "dropme.two", NULL, &err) == 0);
    CHECK(sbl_coll_create(s, "dropmenot.three", NULL, &err) == 0);
    CHECK(sbl_db_drop(s, "dropme", &err) == 0);
    l.n = 0;
    sbl_catalog_list("dropme", list_visit, &l);
    CHECK(l.n == 0);
    l.n = 0;
    sbl_catalog_list("dropmenot", list_visit, &l);
    CHECK(l.n == 1);
    bson_destroy(opts);
}

/* sbl_coll_adopt_uuid: the named collection takes the UUID, by create or
 * implicitly, once; another name, or after clearing, gets a new one. */
static void test_adopt_uuid(void)
{
    static const uint8_t want[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};
    sbl_session_t *s = sbl_session_get();
    sbl_err_t err;
    sbl_coll_t *c;
    bool created = false;

    sbl_coll_adopt_uuid("adopt.a", want);
    CHECK(sbl_coll_create(s, "adopt.other", NULL, &err) == 0);
    c = coll("adopt.other", false);
    CHECK(memcmp(sbl_coll_uuid(c), want, 16) != 0);
    sbl_coll_release(c);
    CHECK(sbl_coll_open(s, "adopt.a", true, &c, &created, &err) == 0 && created);
    CHECK(memcmp(sbl_coll_uuid(c), want, 16) == 0);
    sbl_coll_release(c);
    /* a second collection of that UUID is refused */
    CHECK(sbl_coll_drop(s, "adopt.other", &err) == 0);
    CHECK(sbl_coll_rename(s, "adopt.a", "adopt.b", false, &err) == 0);
    CHECK(sbl_coll_create(s, "adopt.a", NULL, &err) == SBL_E_InvalidOptions);
    sbl_coll_adopt_uuid(NULL, NULL);
    CHECK(sbl_coll_create(s, "adopt.a", NULL, &err) == 0);
    c = coll("adopt.a", false);
    CHECK(memcmp(sbl_coll_uuid(c), want, 16) != 0);
    sbl_coll_release(c);
    CHECK(sbl_db_drop(s, "adopt", &err) == 0);
}

/* ---- threads ------------------------------------------------------------ */

static sbl_coll_t *race_handles[4];
static bool race_created[4];

static void *race_create(void *arg)
{
    intptr_t i = (intptr_t)arg;
    sbl_err_t err;
    sbl_coll_open(sbl_session_get(), "race.c", true, &race_handles[i], &race_created[i], &err);
    sbl_session_release_thread();
    return NULL;
}

static void test_create_race(void)
{
    pthread_t t[4];
    int ncreated = 0;

    for (intptr_t i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, race_create, (void *)i);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++) {
        CHECK(race_handles[i] != NULL && race_handles[i] == race_handles[0]);
        ncreated += race_created[i];
    }
    CHECK(ncreated == 1);
    for (int i = 0; i < 4; i++)
        sbl_coll_release(race_handles[i]);
}

static int conflict_rc;

static void *conflicting_writer(void *arg)
{
    sbl_session_t *s = sbl_session_get();
    sbl_coll_t *c = arg;
    sbl_err_t err;
    bson_t *old = BCON_NEW("_id", BCON_INT32(1), "v", BCON_INT32(10));
    bson_t *upd = BCON_NEW("_id", BCON_INT32(1), "v", BCON_INT32(13));

    sbl_txn_begin(s, &err);
    conflict_rc = sbl_write(s, c, SBL_WRITE_UPDATE, old, upd, NULL, &err);
    sbl_txn_abort(s);
    bson_destroy(old);
    bson_destroy(upd);
    sbl_session_release_thread();
    return NULL;
}

static void test_write_conflict(void)
{
    sbl_session_t *s = sbl_session_get();
    sbl_coll_t *c = coll("test.crud", false);
    sbl_err_t err;
    pthread_t t;
    bson_t *old = BCON_NEW("_id", BCON_INT32(1), "v", BCON_INT32(10));
    bson_t *upd = BCON_NEW("_id", BCON_INT32(1), "v", BCON_INT32(12));

    CHECK(sbl_txn_begin(s, &err) == 0);
    CHECK(sbl_write(s, c, SBL_WRITE_UPDATE, old, upd, NULL, &err) == 0);
    pthread_create(&t, NULL, conflicting_writer, c);
    pthread_join(t, NULL);
    CHECK_MSG(conflict_rc == SBL_E_WriteConflict, "rc %d", conflict_rc);
    CHECK(sbl_txn_commit(s, &err) == 0);
    CHECK(get_v(c, 1) == 12);
    bson_destroy(old);
    bson_destroy(upd);
    sbl_coll_release(c);
}

/* sbl_txn_last_commit_ts names the newest commit timestamp of a transaction
 * that committed: one that took a timestamp and rolled back does not count
 * (a write acknowledged with w:"majority" waits for that ts: waiting for a
 * rolled-back one never ends). */
static void test_commit_ts(void)
{
    sbl_session_t *s = sbl_session_get();
    sbl_coll_t *c = coll("test.commit_ts", true);
    sbl_err_t err;
    uint64_t base = (uint64_t)time(NULL) << 32;

    CHECK(sbl_txn_begin(s, &err) == 0);
    CHECK(sbl_txn_set_commit_ts(s, base + 1, &err) == 0);
    CHECK(insert_json(c, "{\"_id\": 1}", NULL, &err) == 0);
    CHECK(sbl_txn_commit(s, &err) == 0);
    CHECK(sbl_txn_last_commit_ts() == base + 1);

    CHECK(sbl_txn_begin(s, &err) == 0);
    CHECK(sbl_txn_set_commit_ts(s, base + 2, &err) == 0);
    CHECK(insert_json(c, "{\"_id\": 2}", NULL, &err) == 0);
    sbl_txn_abort(s);
    CHECK_MSG(sbl_txn_last_commit_ts() == base + 1, "a rolled-back ts counted: %llx",
              (unsigned long long)sbl_txn_last_commit_ts());

    CHECK(sbl_txn_begin(s, &err) == 0); /* no timestamp: leaves it alone */
    CHECK(insert_json(c, "{\"_id\": 3}", NULL, &err) == 0);
    CHECK(sbl_txn_commit(s, &err) == 0);
    CHECK(sbl_txn_last_commit_ts() == base + 1);

    CHECK(sbl_txn_begin(s, &err) == 0);
    CHECK(sbl_txn_set_commit_ts(s, base + 3, &err) == 0);
    CHECK(insert_json(c, "{\"_id\": 4}", NULL, &err) == 0);
    CHECK(sbl_txn_set_commit_ts(s, base + 4, &err) == 0);
    CHECK(insert_json(c, "{\"_id\": 5}", NULL, &err) == 0);
    CHECK(sbl_txn_commit(s, &err) == 0);
    CHECK(sbl_txn_last_commit_ts() == base + 4);
    sbl_coll_release(c);
}

static atomic_int durable_calls;

static atomic_int durable_failures;

static void on_durable(void *arg, int rc)
{
    if (rc != 0)
        atomic_fetch_add(&durable_failures, 1);
    atomic_fetch_add(&durable_calls, 1);
}

#define DURABLE_THREADS 4
#define DURABLE_PER_THREAD 250

static sbl_coll_t *durable_coll;

/* Each waiter follows a commit of its own, as a w:1 write would. */
static void *durable_waiter(void *arg)
{
    int base = (int)(intptr_t)arg * 1000 + 10;
    char json[64];

    for (int i = 0; i < DURABLE_PER_THREAD; i++) {
        sbl_err_t err;
        snprintf(json, sizeof(json), "{\"_id\": %d}", base + i);
        if (insert_json(durable_coll, json, NULL, &err) != 0) /* CHECK is not thread-safe */
            atomic_fetch_add(&durable_failures, 1);
        sbl_storage_on_durable(on_durable, NULL);
    }
    sbl_session_release_thread();
    return NULL;
}

static int64_t log_syncs(void)
{
    bson_t stats = BSON_INITIALIZER;
    bson_iter_t it, sub;
    int64_t v = -1;
    sbl_storage_append_stats(&stats);
    if (bson_iter_init_find(&it, &stats, "log") && bson_iter_recurse(&it, &sub) &&
        bson_iter_find(&sub, "log sync operations"))
        v = bson_iter_as_int64(&sub);
    bson_destroy(&stats);
    return v;
}

static bool wait_for(atomic_int *v, int want, int timeout_ms)
{
    for (int i = 0; i < timeout_ms / 5 && atomic_load(v) < want; i++)
        sleep_ms(5);
    return atomic_load(v) == want;
}

static void test_durable(void)
{
    sbl_coll_t *c = coll("test.dur", true);
    pthread_t t[DURABLE_THREADS];
    sbl_err_t err;

    insert_ok(c, "{\"_id\": 1}");
    atomic_store(&durable_calls, 0);
    sbl_storage_on_durable(on_durable, NULL);
    CHECK(wait_for(&durable_calls, 1, 5000));

    atomic_store(&durable_calls, 0);
    int64_t syncs_before = log_syncs();
    durable_coll = c;
    for (intptr_t i = 0; i < DURABLE_THREADS; i++)
        pthread_create(&t[i], NULL, durable_waiter, (void *)i);
    for (int i = 0; i < DURABLE_THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(wait_for(&durable_calls, DURABLE_THREADS * DURABLE_PER_THREAD, 10000));
    CHECK(atomic_load(&durable_failures) == 0);
    /* Group commit: the waiters shared flushes. */
    int64_t syncs = log_syncs() - syncs_before;
    printf("group commit: %d waiters, %lld journal syncs\n", DURABLE_THREADS * DURABLE_PER_THREAD,
           (long long)syncs);
    CHECK(syncs > 0 && syncs < DURABLE_THREADS * DURABLE_PER_THREAD);
    CHECK(count_of(c) == 1 + DURABLE_THREADS * DURABLE_PER_THREAD);
    CHECK(sbl_storage_flush(&err) == 0);
    CHECK(sbl_storage_checkpoint(&err) == 0);
    sbl_coll_stats_t st;
    CHECK(sbl_coll_stats(sbl_session_get(), c, &st, &err) == 0);
    CHECK(st.storage_size > 0 && st.data_size > 0);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "ls '%s'/journal/WiredTigerLog.* >/dev/null 2>&1", dbpath);
    CHECK(system(cmd) == 0); /* the journal lives in dbpath/journal, as with mongod */

    bson_t stats = BSON_INITIALIZER;
    bson_iter_t it, sub;
    sbl_storage_append_stats(&stats);
    CHECK(bson_iter_init_find(&it, &stats, "cache") && bson_iter_recurse(&it, &sub) &&
          bson_iter_find(&sub, "bytes currently in the cache") && bson_iter_as_int64(&sub) > 0);
    CHECK(bson_iter_init_find(&it, &stats, "cache") && bson_iter_recurse(&it, &sub) &&
          bson_iter_find(&sub, "maximum bytes configured") &&
          bson_iter_as_int64(&sub) == 256ll * 1024 * 1024);
    CHECK(bson_iter_init_find(&it, &stats, "log") && bson_iter_recurse(&it, &sub) &&
          bson_iter_find(&sub, "log sync operations") && bson_iter_as_int64(&sub) > 0);
    bson_destroy(&stats);
    sbl_coll_release(c);
}

static atomic_int later_flushed, later_skipped;
static atomic_int later_wanted = 1;

static void on_later(void *arg, int rc)
{
    (void)arg;
    atomic_fetch_add(rc == SBL_FLUSH_SKIPPED ? &later_skipped : &later_flushed, 1);
}

static bool later_wanted_fn(void *arg)
{
    (void)arg;
    return atomic_load(&later_wanted) != 0;
}

/* sbl_storage_on_durable_by: a delayed request flushes when it comes due
 * and is still wanted; unwanted then, it ends with SBL_FLUSH_SKIPPED and no
 * flush; any flush made before it comes due covers it at once. */
static void test_durable_later(void)
{
    sbl_coll_t *c = coll("test.durlater", true);
    /* wanted when due: a flush (the insert's commit is synced) */
    insert_ok(c, "{\"_id\": 1}");
    atomic_store(&later_wanted, 1);
    int64_t t0 = sbl_storage_now_us(), syncs0 = log_syncs();
    sbl_storage_on_durable_by(t0 + 30000, later_wanted_fn, on_later, NULL);
    CHECK(wait_for(&later_flushed, 1, 5000));
    CHECK(log_syncs() > syncs0);

    /* unwanted when due, nothing committed since the last flush: skipped */
    atomic_store(&later_wanted, 0);
    sbl_storage_on_durable_by(sbl_storage_now_us() + 20000, later_wanted_fn, on_later, NULL);
    CHECK(wait_for(&later_skipped, 1, 5000));
    CHECK(atomic_load(&later_flushed) == 1);

    /* a flush for another waiter, made first, covers a delayed one long
     * before it comes due */
    insert_ok(c, "{\"_id\": 2}");
    t0 = sbl_storage_now_us();
    sbl_storage_on_durable_by(t0 + 10 * 1000 * 1000, later_wanted_fn, on_later, NULL);
    atomic_store(&durable_calls, 0);
    sbl_storage_on_durable(on_durable, NULL);
    CHECK(wait_for(&later_flushed, 2, 5000));
    CHECK(sbl_storage_now_us() - t0 < 5 * 1000 * 1000);
    CHECK(atomic_load(&later_skipped) == 1);
    sbl_coll_release(c);
}

/* A thread that caches a cursor on test.drop and then idles until told. */
static atomic_int idle_stage;

static void *idle_reader(void *arg)
{
    sbl_coll_t *c = coll("test.drop", false);
    CHECK(get_v(c, 1) == 1);
    sbl_coll_release(c);
    atomic_store(&idle_stage, 1);
    while (atomic_load(&idle_stage) != 2)
        sleep_ms(2);
    /* Any call reconciles the session and closes the stale cursor. */
    c = coll("test.crud", false);
    get_v(c, 1);
    sbl_coll_release(c);
    atomic_store(&idle_stage, 3);
    while (atomic_load(&idle_stage) != 4)
        sleep_ms(2);
    sbl_session_release_thread();
    return NULL;
}

static bool table_exists(const char *uri)
{
    sbl_session_t *s = sbl_session_get();
    WT_CURSOR *cur;
    bool found;
    if (s->wt->open_cursor(s->wt, "metadata:", NULL, NULL, &cur) != 0)
        return true;
    cur->set_key(cur, uri);
    found = cur->search(cur) == 0;
    cur->close(cur);
    return found;
}

static void test_drop_with_cached_cursor(void)
{
    sbl_session_t *s = sbl_session_get();
    sbl_coll_t *c = coll("test.drop", true);
    sbl_scan_t *scan;
    sbl_err_t err;
    pthread_t t;
    bson_t doc;
    bool done;
    char uri[128];

    insert_ok(c, "{\"_id\": 1, \"v\": 1}");
    insert_ok(c, "{\"_id\": 2, \"v\": 2}");
    snprintf(uri, sizeof(uri), "%s", c->tbl->uri);
    CHECK(get_v(c, 1) == 1); /* our own cached cursor too */
    pthread_create(&t, NULL, idle_reader, NULL);
    while (atomic_load(&idle_stage) != 1)
        sleep_ms(2);
    CHECK(sbl_scan_open(s, c, NULL, false, &scan, &err) == 0);
    CHECK(sbl_scan_next(scan, &doc, &done, &err) == 0 && !done);

    sbl_coll_t *gone_c;
    CHECK(sbl_coll_drop(s, "test.drop", &err) == 0);
    CHECK(sbl_coll_open(s, "test.drop", false, &gone_c, NULL, &err) == SBL_E_NamespaceNotFound);
    CHECK(table_exists(uri)); /* deferred: the idle thread still has a cursor */
    /* An open scan finishes over the dropped collection's data. */
    CHECK(sbl_scan_next(scan, &doc, &done, &err) == 0 && !done);
    CHECK(sbl_scan_next(scan, &doc, &done, &err) == 0 && done);
    sbl_scan_close(scan);
    /* The old handle stays valid, but writes through it are refused. */
    bson_t *d = BCON_NEW("_id", BCON_INT32(9));
    CHECK(sbl_write(s, c, SBL_WRITE_INSERT, NULL, d, NULL, &err) == SBL_E_NamespaceNotFound);
    bson_destroy(d);
    sbl_coll_release(c);

    /* Recreate under the same name: a fresh, empty collection. */
    c = coll("test.drop", true);
    CHECK(get_v(c, 1) == -1);
    insert_ok(c, "{\"_id\": 1, \"v\": 5}");
    CHECK(count_of(c) == 1);
    CHECK(strcmp(c->tbl->uri, uri) != 0);
    sbl_coll_release(c);

    atomic_store(&idle_stage, 2);
    while (atomic_load(&idle_stage) != 3)
        sleep_ms(2);
    bool gone = false;
    for (int i = 0; i < 600 && !gone; i++) {
        gone = !table_exists(uri);
        if (!gone)
            sleep_ms(10);
    }
    CHECK_MSG(gone, "table %s still exists after the background retry", uri);
    atomic_store(&idle_stage, 4);
    pthread_join(t, NULL);
}

static void test_lock(void)
{
    sbl_storage_config_t cfg = {.dbpath = dbpath};
    sbl_err_t err;
    int status = -1;
    pid_t pid;

    /* Another process. */
    fflush(NULL);
    if ((pid = fork()) == 0) {
        int rc = sbl_storage_open(&cfg, &err);
        _exit(rc == SBL_E_InternalError &&
                      strstr(err.msg, "Unable to lock the lock file") != NULL &&
                      strstr(err.msg, "Another sabled instance is probably running") != NULL
                  ? 0
                  : 1);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The same process. */
    CHECK(sbl_storage_open(&cfg, &err) == SBL_E_InternalError);
    CHECK_MSG(strstr(err.msg, "Another sabled instance is probably running on this dbpath") !=
                  NULL,
              "%s", err.msg);
    /* The first is undisturbed. */
    sbl_coll_t *c = coll("test.crud", false);
    CHECK(get_v(c, 1) == 12);
    sbl_coll_release(c);
    char path[300], buf[32] = {0};
    snprintf(path, sizeof(path), "%s/mongod.lock", dbpath);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL && fgets(buf, sizeof(buf), f) != NULL && atol(buf) == (long)getpid());
    if (f != NULL)
        fclose(f);
}

static void check_persisted(void)
{
    sbl_coll_t *c = coll("test.crud", false);
    CHECK(get_v(c, 1) == 12);
    CHECK(get_v(c, 100) == 1);
    CHECK(count_of(c) == 5);
    sbl_coll_release(c);
    c = coll("test.scan", false);
    CHECK(count_of(c) == 10);
    sbl_coll_release(c);
    c = coll("test.drop", false);
    CHECK(get_v(c, 1) == 5);
    sbl_coll_release(c);
    list_t l = {0};
    sbl_catalog_list("dropmenot", list_visit, &l);
    CHECK(l.n == 1);
}

/* A child opens, writes, flushes the journal and dies without closing. */
static void test_unclean(void)
{
    int status = -1;
    pid_t pid;

    fflush(NULL);
    if ((pid = fork()) == 0) {
        open_engine();
        sbl_coll_t *c = coll("crash.c", true);
        sbl_coll_t *d = coll("test.crud", false);
        sbl_err_t err;
        char json[64];
        for (int i = 0; i < 50; i++) {
            snprintf(json, sizeof(json), "{\"_id\": %d, \"v\": %d}", i, i);
            insert_json(c, json, NULL, &err);
        }
        bson_t *old = BCON_NEW("_id", BCON_INT32(100), "v", BCON_INT32(1));
        sbl_write(sbl_session_get(), d, SBL_WRITE_DELETE, old, NULL, NULL, &err);
        sbl_storage_flush(&err);
        _exit(0);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    open_engine();
    sbl_coll_t *c = coll("crash.c", false);
    CHECK_MSG(count_of(c) == 50, "count %lld", (long long)count_of(c));
    CHECK(get_v(c, 49) == 49);
    sbl_coll_release(c);
    c = coll("test.crud", false);
    CHECK(count_of(c) == 4);
    CHECK(get_v(c, 100) == -1);
    sbl_coll_release(c);
}

/* The periodic checkpoints' grid: the first slot at or after a time, at
 * its phase of the period. */
static void test_checkpoint_slot(void)
{
    CHECK(sbl_storage_checkpoint_slot(1000.0, 60, 0.5) == 1050.0);
    CHECK(sbl_storage_checkpoint_slot(1050.0, 60, 0.5) == 1050.0);
    CHECK(sbl_storage_checkpoint_slot(1050.5, 60, 0.5) == 1110.0);
    CHECK(sbl_storage_checkpoint_slot(1019.5, 60, 0.0) == 1020.0);
    CHECK(sbl_storage_checkpoint_slot(1001.0, 2, 0.25) == 1002.5);
    for (double t = 0; t < 200; t += 7.3) { /* the slot is never earlier, at most a period later */
        double slot = sbl_storage_checkpoint_slot(t, 60, 1 / 3.0);
        CHECK(slot >= t && slot < t + 60);
    }
}

int main(void)
{
    char cmd[400];

    test_checkpoint_slot();

    snprintf(dbpath, sizeof(dbpath), "/tmp/test_storage_XXXXXX");
    if (mkdtemp(dbpath) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    open_engine();
    test_crud();
    test_scans();
    test_catalog();
    test_adopt_uuid();
    test_create_race();
    test_write_conflict();
    test_commit_ts();
    test_durable();
    test_durable_later();
    test_drop_with_cached_cursor();
    test_lock();
    test_dup_ids();
    test_versioned();
    sbl_storage_close();
    CHECK(sbl_session_get() == NULL);

    open_engine(); /* clean reopen: counts come from the sizes table */
    check_persisted();
    check_dup_ids_persisted();
    check_versioned_persisted();
    sbl_storage_close();
    open_engine();
    check_persisted();
    sbl_storage_close();

    test_unclean();
    sbl_storage_close();

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dbpath);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dbpath);
    return CHECK_DONE("test_storage");
}
