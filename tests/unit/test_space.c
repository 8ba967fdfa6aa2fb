/*
 * test_space.c: the storage free-space guard (src/storage/wt_space.c) on a
 * real WiredTiger in a temporary dbpath.  A minimum larger than any disk
 * makes inserts, updates and index builds fail with OutOfDiskSpace while
 * reads and deletes go on; lowering it lets writes through again without a
 * restart; 0 turns it off.  (Real low space: tests/integration/py/test_diskfault.py.)
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "storage/storage.h"

static char dbpath[256];

static int insert_id(sbl_coll_t *c, int id, sbl_err_t *err)
{
    bson_t doc = BSON_INITIALIZER;
    BSON_APPEND_INT32(&doc, "_id", id);
    BSON_APPEND_UTF8(&doc, "pad", "some bytes");
    int rc = sbl_write(sbl_session_get(), c, SBL_WRITE_INSERT, NULL, &doc, NULL, err);
    bson_destroy(&doc);
    return rc;
}

static bool exists(sbl_coll_t *c, int id)
{
    bson_value_t v = {.value_type = BSON_TYPE_INT32, .value.v_int32 = id};
    bson_t doc;
    bool found = false;
    sbl_err_t err;
    CHECK_MSG(sbl_coll_get(sbl_session_get(), c, &v, &doc, &found, &err) == 0, "get: %s",
              err.msg);
    if (found)
        bson_destroy(&doc);
    return found;
}

int main(void)
{
    sbl_err_t err;
    sbl_coll_t *c = NULL;
    char cmd[400];
    int rc;

    snprintf(dbpath, sizeof(dbpath), "/tmp/test_space_XXXXXX");
    if (mkdtemp(dbpath) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    sbl_storage_config_t cfg = {.dbpath = dbpath, .cache_size_gb = 0.25};
    rc = sbl_storage_open(&cfg, &err);
    CHECK_MSG(rc == 0, "open: %s", err.msg);
    if (rc != 0)
        return 1;
    CHECK(sbl_storage_min_free_mb() == SBL_SPACE_DEFAULT_MIN_FREE_MB);
    CHECK(sbl_coll_open(sbl_session_get(), "t.c", true, &c, NULL, &err) == 0);
    CHECK_MSG(insert_id(c, 1, &err) == 0, "insert with the default minimum: %s", err.msg);
    CHECK(insert_id(c, 2, &err) == 0);

    /* More than any disk has: writes that add data are refused. */
    sbl_storage_set_min_free_mb(1LL << 40);
    rc = insert_id(c, 3, &err);
    CHECK_MSG(rc == SBL_E_OutOfDiskSpace && err.code == 14031, "rc %d: %s", rc, err.msg);
    CHECK_MSG(strstr(err.msg, "out of disk space") != NULL, "%s", err.msg);
    bson_t spec = BSON_INITIALIZER, key;
    BSON_APPEND_DOCUMENT_BEGIN(&spec, "key", &key);
    BSON_APPEND_INT32(&key, "pad", 1);
    bson_append_document_end(&spec, &key);
    BSON_APPEND_UTF8(&spec, "name", "pad_1");
    rc = sbl_index_create(sbl_session_get(), c, &spec, &err);
    CHECK_MSG(rc == SBL_E_OutOfDiskSpace, "index build: rc %d: %s", rc, err.msg);
    /* An update in a transaction fails inside it; the caller aborts. */
    bson_t upd = BSON_INITIALIZER, old = BSON_INITIALIZER;
    BSON_APPEND_INT32(&old, "_id", 1);
    BSON_APPEND_UTF8(&old, "pad", "some bytes");
    BSON_APPEND_INT32(&upd, "_id", 1);
    BSON_APPEND_UTF8(&upd, "pad", "other");
    CHECK(sbl_txn_begin(sbl_session_get(), &err) == 0);
    rc = sbl_write(sbl_session_get(), c, SBL_WRITE_UPDATE, &old, &upd, NULL, &err);
    CHECK_MSG(rc == SBL_E_OutOfDiskSpace, "update: rc %d", rc);
    sbl_txn_abort(sbl_session_get());
    /* Reads and deletes go on. */
    CHECK(exists(c, 1));
    CHECK(!exists(c, 3));
    bson_t del = BSON_INITIALIZER;
    BSON_APPEND_INT32(&del, "_id", 2);
    BSON_APPEND_UTF8(&del, "pad", "some bytes");
    rc = sbl_write(sbl_session_get(), c, SBL_WRITE_DELETE, &del, NULL, NULL, &err);
    CHECK_MSG(rc == 0, "delete while the guard refuses writes: %s", err.msg);
    CHECK(!exists(c, 2));

    /* Space "returns" (a new minimum applies from the next write). */
    sbl_storage_set_min_free_mb(1);
    CHECK_MSG(insert_id(c, 3, &err) == 0, "insert after recovery: %s", err.msg);
    CHECK(sbl_index_create(sbl_session_get(), c, &spec, &err) == 0);
    CHECK(sbl_write(sbl_session_get(), c, SBL_WRITE_UPDATE, &old, &upd, NULL, &err) == 0);

    /* 0: the guard is off. */
    sbl_storage_set_min_free_mb(0);
    CHECK(sbl_storage_min_free_mb() == 0);
    CHECK(insert_id(c, 4, &err) == 0);
    CHECK(exists(c, 4));

    bson_destroy(&spec);
    bson_destroy(&upd);
    bson_destroy(&old);
    bson_destroy(&del);
    sbl_coll_release(c);
    sbl_storage_close();
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dbpath);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dbpath);
    return CHECK_DONE("test_space");
}
