/*
 * test_compact.c: sbl_coll_compact against a real WiredTiger in a fresh
 * temporary dbpath: after most documents of a collection with an index are
 * deleted, a dry run estimates without shrinking anything, a check that
 * refuses stops the compaction with its error, a target above the free space
 * skips every file, and a real compaction shrinks the files while every
 * remaining document and index entry is still there, also after a reopen;
 * an index dropped during a compaction is skipped.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "storage/storage.h"

#define NDOCS 6000
#define PAD 1000
#define KEEP_EVERY 10

static char dbpath[256];

static void open_engine(void)
{
    sbl_storage_config_t cfg = {.dbpath = dbpath, .cache_size_gb = 0.25,
                                .commit_interval_ms = 50, .syncdelay_s = 0};
    sbl_err_t err;
    int rc = sbl_storage_open(&cfg, &err);
    CHECK_MSG(rc == 0, "open: %s", err.msg);
    if (rc != 0)
        exit(1);
}

/* Document i: {_id: i, k: i * 7, pad: <PAD pseudo-random bytes>} (incompressible). */
static void make_doc(int i, bson_t *doc)
{
    uint8_t pad[PAD];
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    for (size_t j = 0; j < sizeof(pad); j++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        pad[j] = (uint8_t)x;
    }
    bson_init(doc);
    BSON_APPEND_INT32(doc, "_id", i);
    BSON_APPEND_INT32(doc, "k", i * 7);
    BSON_APPEND_BINARY(doc, "pad", BSON_SUBTYPE_BINARY, pad, sizeof(pad));
}

static int64_t files_size(sbl_coll_t *c)
{
    sbl_coll_stats_t st;
    sbl_err_t err;
    sbl_index_t **ix;
    size_t n;
    int64_t total;

    CHECK(sbl_coll_stats(sbl_session_get(), c, &st, &err) == 0);
    total = st.storage_size;
    sbl_index_list(c, false, &ix, &n);
    for (size_t i = 0; i < n; i++)
        total += sbl_index_size(sbl_session_get(), ix[i]);
    sbl_index_list_free(ix, n);
    return total;
}

/* Every kept document by _id with its bytes, none of the deleted ones, and
 * exactly the kept ones in the k index. */
static void check_data(sbl_coll_t *c)
{
    sbl_session_t *s = sbl_session_get();
    sbl_coll_stats_t st;
    sbl_err_t err;
    int bad = 0;

    CHECK(sbl_coll_stats(s, c, &st, &err) == 0);
    CHECK_MSG(st.count == NDOCS / KEEP_EVERY, "count %lld", (long long)st.count);
    for (int i = 0; i < NDOCS; i++) {
        bson_value_t id = {.value_type = BSON_TYPE_INT32, .value.v_int32 = i};
        bson_t got, want;
        bool found = false;
        if (sbl_coll_get(s, c, &id, &got, &found, &err) != 0) {
            bad++;
            continue;
        }
        if (found != (i % KEEP_EVERY == 0))
            bad++;
        if (found) {
            make_doc(i, &want);
            if (got.len != want.len || memcmp(bson_get_data(&got), bson_get_data(&want), got.len))
                bad++;
            bson_destroy(&want);
            bson_destroy(&got);
        }
    }
    CHECK_MSG(bad == 0, "%d documents wrong", bad);

    sbl_index_t **ix;
    size_t n;
    int64_t entries = 0;
    sbl_index_list(c, false, &ix, &n);
    CHECK(n == 1);
    if (n == 1) {
        sbl_iscan_t *scan;
        CHECK(sbl_iscan_open(s, ix[0], NULL, 0, NULL, 0, false, &scan, &err) == 0);
        for (;;) {
            const uint8_t *key, *idk;
            size_t klen, idlen;
            bool done = false, found = false;
            bson_t doc;
            if (sbl_iscan_next(scan, &key, &klen, &idk, &idlen, &done, &err) != 0 || done)
                break;
            entries++;
            CHECK(sbl_coll_get_by_key(s, c, idk, idlen, &doc, &found, &err) == 0);
            if (found)
                bson_destroy(&doc);
            else
                bad++;
        }
        sbl_iscan_close(scan);
    }
    sbl_index_list_free(ix, n);
    CHECK_MSG(entries == NDOCS / KEEP_EVERY && bad == 0, "index: %lld entries, %d dangling",
              (long long)entries, bad);
}

static int refuse(void *arg, sbl_err_t *err)
{
    (*(int *)arg)++;
    return sbl_err_set(err, SBL_E_Interrupted, "operation was interrupted");
}

static int count_calls(void *arg, sbl_err_t *err)
{
    (void)err;
    (*(int *)arg)++;
    return 0;
}

/* Drops index k_1 of the collection arg on its first call (before the first file). */
static int drop_index_once(void *arg, sbl_err_t *err)
{
    static bool dropped;
    if (!dropped) {
        dropped = true;
        return sbl_index_drop(sbl_session_get(), arg, "k_1", err);
    }
    return 0;
}

int main(void)
{
    sbl_session_t *s;
    sbl_coll_t *c = NULL;
    sbl_err_t err;
    int64_t freed = -1, size0, size1;
    int calls = 0;
    char cmd[400];

    snprintf(dbpath, sizeof(dbpath), "/tmp/test_compact_XXXXXX");
    if (mkdtemp(dbpath) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    open_engine();
    s = sbl_session_get();
    CHECK(sbl_coll_open(s, "t.c", true, &c, NULL, &err) == 0);
    bson_t spec = BSON_INITIALIZER, key;
    BSON_APPEND_DOCUMENT_BEGIN(&spec, "key", &key);
    BSON_APPEND_INT32(&key, "k", 1);
    bson_append_document_end(&spec, &key);
    BSON_APPEND_UTF8(&spec, "name", "k_1");
    CHECK(sbl_index_create(s, c, &spec, &err) == 0);
    bson_destroy(&spec);
    for (int i = 0; i < NDOCS; i++) {
        bson_t doc;
        make_doc(i, &doc);
        CHECK(sbl_write(s, c, SBL_WRITE_INSERT, NULL, &doc, NULL, &err) == 0);
        bson_destroy(&doc);
    }
    CHECK(sbl_storage_checkpoint(&err) == 0);
    for (int i = 0; i < NDOCS; i++) {
        bson_t doc;
        if (i % KEEP_EVERY == 0)
            continue;
        make_doc(i, &doc);
        CHECK(sbl_write(s, c, SBL_WRITE_DELETE, &doc, NULL, NULL, &err) == 0);
        bson_destroy(&doc);
    }
    CHECK(sbl_storage_checkpoint(&err) == 0);
    size0 = files_size(c);
    CHECK_MSG(size0 > 5 * 1000 * 1000, "files hold %lld bytes", (long long)size0);

    /* Inside a transaction: refused. */
    CHECK(sbl_txn_begin(s, &err) == 0);
    CHECK(sbl_coll_compact(s, c, 1 << 20, false, NULL, NULL, &freed, &err) ==
          SBL_E_IllegalOperation);
    sbl_txn_abort(s);

    /* A dry run estimates most of the file and moves nothing. */
    CHECK(sbl_coll_compact(s, c, 1 << 20, true, count_calls, &calls, &freed, &err) == 0);
    CHECK_MSG(freed > size0 / 2, "estimate %lld of %lld", (long long)freed, (long long)size0);
    CHECK(files_size(c) >= size0 - 65536);
    CHECK(calls >= 1);

    /* A target above the free space: nothing is compacted. */
    CHECK(sbl_coll_compact(s, c, 1LL << 40, false, NULL, NULL, &freed, &err) == 0);
    CHECK(freed == 0);
    CHECK(files_size(c) >= size0 - 65536);

    /* A check that refuses stops it with its error, before any file moved. */
    calls = 0;
    CHECK(sbl_coll_compact(s, c, 1 << 20, false, refuse, &calls, &freed, &err) ==
          SBL_E_Interrupted);
    CHECK(calls == 1 && strcmp(err.msg, "operation was interrupted") == 0);
    CHECK(files_size(c) >= size0 - 65536);
    check_data(c);

    /* The real thing. */
    calls = 0;
    CHECK_MSG(sbl_coll_compact(s, c, 1 << 20, false, count_calls, &calls, &freed, &err) == 0,
              "compact: %s", err.msg);
    size1 = files_size(c);
    CHECK_MSG(freed > size0 / 2 && size1 < size0 / 2, "freed %lld: %lld -> %lld",
              (long long)freed, (long long)size0, (long long)size1);
    CHECK(calls >= 2); /* once per file at least: the table and the index */
    check_data(c);
    sbl_coll_release(c);
    sbl_storage_close();

    open_engine();
    CHECK(sbl_coll_open(sbl_session_get(), "t.c", false, &c, NULL, &err) == 0);
    check_data(c);
    CHECK(files_size(c) == size1);

    /* An index dropped while compact runs: skipped, the command succeeds. */
    CHECK_MSG(sbl_coll_compact(sbl_session_get(), c, 1, false, drop_index_once, c, &freed,
                               &err) == 0,
              "compact with a dropped index: %s", err.msg);
    CHECK(sbl_index_count(c) == 0);
    sbl_coll_release(c);
    sbl_storage_close();

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dbpath);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dbpath);
    return CHECK_DONE("test_compact");
}
