/*
 * migrate_del.c: the range deleter, after mongod's (docs/sharding.md,
 * "Migrations and the balancer"): deletes the shard's documents of a range
 * it no longer owns, with fromMigrate oplog entries; the donor runs it
 * after a migration's commit, recovery (migrate_recover.c) for what a
 * migration left.
 *
 * What must stay true: a conflict is waited out, never an error by itself
 * (a transaction holding one of the range's documents, a prepared one
 * included): each pass is made again after a growing pause, for up to
 * MIG_CRIT_MS, as mongod's range deleter retries its task; a pass leaves
 * no cursor open.
 */
#include "cmd/migrate_int.h"

#include "doc/doc.h"
#include "repl/repl.h"
#include "shard/shard.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Delete by _id each {_id} document of arr from db.coll, in at most
 * max_ms (0: no limit). */
static int delete_ids(const char *db, const char *coll, bson_iter_t *arr, int64_t *np,
                      int max_ms, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, dels, reply;
    BSON_APPEND_UTF8(&cmd, "delete", coll);
    if (max_ms > 0)
        BSON_APPEND_INT32(&cmd, "maxTimeMS", max_ms);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "deletes", &dels);
    int n = 0;
    char kb[16];
    while (bson_iter_next(arr)) {
        bson_t d, del, q;
        bson_iter_t id;
        if (!sbl_iter_doc(arr, &d) || !bson_iter_init_find(&id, &d, "_id"))
            continue;
        const char *k251 = mig_akey((uint32_t)n++, kb);
        BSON_APPEND_DOCUMENT_BEGIN(&dels, k251, &del);
        BSON_APPEND_DOCUMENT_BEGIN(&del, "q", &q);
        sbl_append_value(&q, "_id", 3, bson_iter_value(&id));
        bson_append_document_end(&del, &q);
        BSON_APPEND_INT32(&del, "limit", 1);
        bson_append_document_end(&dels, &del);
    }
    bson_append_array_end(&cmd, &dels);
    int rc = 0;
    if (n > 0) {
        rc = sbl_cmd_run_checked(db, &cmd, &reply, err);
        bson_iter_t it;
        if (rc == 0 && np != NULL && bson_iter_init_find(&it, &reply, "n"))
            *np += bson_iter_as_int64(&it);
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    return rc;
}

int mig_delete_ids(const char *db, const char *coll, bson_iter_t *arr, int64_t *np,
                   sbl_err_t *err)
{
    return delete_ids(db, coll, arr, np, 0, err);
}

/* The next batch of s's range in db.coll: a find when first, else a getMore on
 * *cursorp, which is set to the reply's cursor (0: the range is read, or the command
 * failed: it leaves no cursor).  *reply is initialised whatever the outcome (the
 * caller destroys it); on 0, *has says whether *batch iterates its documents. */
static int range_batch(const mig_spec_t *s, const char *db, const char *coll, bool first,
                       int64_t *cursorp, bson_t *reply, bson_iter_t *batch, bool *has,
                       sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER;
    int rc;
    if (first) {
        rc = mig_range_find(s, db, coll, 1000, reply, err);
    } else {
        BSON_APPEND_INT64(&cmd, "getMore", *cursorp);
        BSON_APPEND_UTF8(&cmd, "collection", coll);
        BSON_APPEND_INT32(&cmd, "batchSize", 1000);
        rc = sbl_cmd_run_checked(db, &cmd, reply, err);
    }
    bson_destroy(&cmd);
    *cursorp = 0;
    *has = false;
    if (rc != 0)
        return rc;
    *has = mig_reply_batch(reply, cursorp, batch);
    return 0;
}

/* One pass of the range deleter: *deletedp counts what it deleted; with a
 * filter f, a document f owns is left alone. */
static int delete_range_once(const mig_spec_t *s, const sbl_shard_filter_t *f,
                             int64_t *deletedp, sbl_err_t *err)
{
    char db[256];
    const char *coll;
    mig_split_ns(s->ns, db, sizeof(db), &coll);
    int64_t deleted = 0, cursor = 0;
    bool first = true;
    int rc = 0;
    while (rc == 0 && (first || cursor != 0)) {
        bson_t reply, arr = BSON_INITIALIZER;
        bson_iter_t it;
        bool has;
        rc = range_batch(s, db, coll, first, &cursor, &reply, &it, &has, err);
        uint32_t n = 0;
        char kb[16];
        if (rc == 0 && has)
            while (bson_iter_next(&it)) {
                bson_t d, x;
                bson_iter_t id;
                if (sbl_iter_doc(&it, &d) && mig_in_range(s, &d) &&
                    (f == NULL || !sbl_shard_filter_owns(f, &d)) &&
                    bson_iter_init_find(&id, &d, "_id")) {
                    const char *k519 = mig_akey(n++, kb);
                    BSON_APPEND_DOCUMENT_BEGIN(&arr, k519, &x);
                    sbl_append_value(&x, "_id", 3, bson_iter_value(&id));
                    bson_append_document_end(&arr, &x);
                }
            }
        first = false;
        bson_destroy(&reply);
        if (rc == 0 && n > 0 && bson_iter_init(&it, &arr)) {
            sbl_repl_from_migrate = true;
            rc = delete_ids(db, coll, &it, &deleted, MIG_DELETE_MS, err);
            sbl_repl_from_migrate = false;
        }
        bson_destroy(&arr);
    }
    mig_kill_cursor(db, coll, cursor); /* a pass that failed leaves no cursor behind */
    *deletedp += deleted;
    return rc;
}

int64_t mig_count_range(const mig_spec_t *s)
{
    char db[256];
    const char *coll;
    mig_split_ns(s->ns, db, sizeof(db), &coll);
    int64_t n = 0, cursor = 0;
    bool first = true;
    sbl_err_t e = {0};
    int rc = 0;
    while (rc == 0 && (first || cursor != 0)) {
        bson_t reply;
        bson_iter_t it;
        bool has;
        rc = range_batch(s, db, coll, first, &cursor, &reply, &it, &has, &e);
        if (rc == 0 && has)
            while (bson_iter_next(&it)) {
                bson_t d;
                if (sbl_iter_doc(&it, &d) && mig_in_range(s, &d))
                    n++;
            }
        first = false;
        bson_destroy(&reply);
    }
    return rc == 0 ? n : -1; /* a find that failed leaves no cursor (it is its last batch) */
}

/* Errors the range deleter waits out: a write conflict (a transaction
 * holding a document of the range), a prepared transaction's document
 * (the delete's maxTimeMS ends its wait). */
static bool deletion_retries(int code)
{
    return code == SBL_E_WriteConflict || code == SBL_E_MaxTimeMSExpired;
}

/* Delete this shard's documents in the range (the range deleter, run in
 * the critical section after the commit, or by recovery; its oplog entries
 * say fromMigrate).  A pass that meets a conflict is made again after a
 * pause (10 ms, doubling up to 1 s) for up to MIG_CRIT_MS, as mongod's
 * range deleter retries its task.  Returns how many went, or -1. */
static int64_t delete_range(const mig_spec_t *s, const sbl_shard_filter_t *f, sbl_err_t *err)
{
    int64_t deleted = 0, until = mig_now_ms() + MIG_CRIT_MS;
    int pause_ms = 10;
    for (int pass = 0;; pass++) {
        int rc = delete_range_once(s, f, &deleted, err);
        if (rc == 0)
            return deleted;
        if (!deletion_retries(rc) || mig_now_ms() + pause_ms > until || !sbl_repl_writable())
            return -1;
        if (pass == 0)
            mig_log("deleting the range of %s met a conflict (%s): trying again until it "
                    "goes", s->ns, err->msg);
        usleep((useconds_t)pause_ms * 1000);
        pause_ms = pause_ms < 500 ? pause_ms * 2 : 1000;
        sbl_err_clear(err);
    }
}

int64_t mig_delete_range(const mig_spec_t *s, sbl_err_t *err)
{
    return delete_range(s, NULL, err);
}

int64_t mig_delete_orphans(const mig_spec_t *s, sbl_err_t *err)
{
    sbl_shard_filter_t *f;
    if (sbl_shard_refresh_filter(s->ns, &f, err) != 0)
        return -1;
    int64_t n = 0;
    if (sbl_shard_filter_trivial(f)) /* dropped, unsharded, or all of it ours again */
        mig_log("range deletion of %s: this shard owns the whole collection now: nothing "
                "deleted", s->ns);
    else
        n = delete_range(s, f, err);
    sbl_shard_filter_release(f);
    return n;
}
