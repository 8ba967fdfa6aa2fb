/*
 * rt_move.c: a retryable write outside a transaction whose update gives a
 * document a shard key value another shard owns, done as mongos 7.0 does
 * it.  The shard holding the document answers the statement with
 * WouldChangeOwningShard (283) and the document before and after the
 * update (preImage, postImage; shouldUpsert for an upsert's new document);
 * the router then, in an internal transaction of a child session
 * (rt_sess_internal_begin), removes the document from that shard, inserts
 * the new one on the shard owning it and records the statement's result on
 * the first shard (config.sable_key_moves, keyed by the client's lsid,
 * txnNumber and stmtId), and commits the three together (two-phase commit).
 * A retry of the statement finds that record before it runs
 * (rt_move_recorded) and is answered the first result, so a document never
 * moves twice.  Records expire after an hour (a TTL index on `at`).  In a
 * client's transaction the same removal and insert are statements of that
 * transaction (the shard's 283 does not end it, as in mongod).
 *
 * What must stay true: the removal only goes ahead when the document is
 * still the preImage (else WriteConflict: it changed after the shard
 * answered); the record commits with the move or not at all.
 */
#include "router/router_int.h"

#include "common/clock.h"
#include "doc/doc.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOVES "sable_key_moves" /* in each shard's config database */
#define MOVES_TTL_S 3600
#define MOVE_TRIES 200 /* WriteConflict retries of one statement (rt_move_again) */

/* The record's _id for statement stmt of the current retryable write. */
static bool record_key(int32_t stmt, bson_t *key)
{
    uint8_t id[16], uid[32];
    int64_t txn;
    bson_init(key);
    if (!rt_sess_ids(id, uid, &txn))
        return false;
    BSON_APPEND_BINARY(key, "id", BSON_SUBTYPE_UUID, id, 16);
    BSON_APPEND_BINARY(key, "uid", BSON_SUBTYPE_BINARY, uid, 32);
    BSON_APPEND_INT64(key, "txnNumber", txn);
    BSON_APPEND_INT32(key, "stmtId", stmt);
    return true;
}

/* cmd on shard s in db without the client's session fields. */
static int run_plain(int s, const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bool was = rt_sess_suspend(true);
    int rc = rt_run(s, db, cmd, reply, err);
    rt_sess_suspend(!was);
    return rc;
}

/* 0 when reply is ok without writeErrors, else err set from it (its code). */
static int reply_failed(const bson_t *reply, const char *what, sbl_err_t *err)
{
    bson_iter_t it, f;
    if (rt_reply_code(reply) != 0)
        return rt_reply_error(reply, what, err);
    if (!bson_iter_init(&it, reply) || !bson_iter_find_descendant(&it, "writeErrors.0", &f) ||
        !BSON_ITER_HOLDS_DOCUMENT(&f))
        return 0;
    bson_t we;
    bson_iter_t c, m;
    sbl_iter_doc(&f, &we);
    int code = bson_iter_init_find(&c, &we, "code") ? (int)bson_iter_as_int64(&c) : 0;
    return sbl_err_set(err, code ? code : SBL_E_InternalError, "%s :: caused by :: %s", what,
                       bson_iter_init_find(&m, &we, "errmsg") && BSON_ITER_HOLDS_UTF8(&m)
                           ? bson_iter_utf8(&m, NULL)
                           : "write failed");
}

int rt_move_recorded(int s, int32_t stmt, bson_t *result, bool *foundp, sbl_err_t *err)
{
    bson_t key, cmd = BSON_INITIALIZER, filter, r;
    bson_iter_t it, rec;
    bson_init(result);
    *foundp = false;
    if (!record_key(stmt, &key)) {
        bson_destroy(&key);
        return 0;
    }
    BSON_APPEND_UTF8(&cmd, "find", MOVES);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    BSON_APPEND_DOCUMENT(&filter, "_id", &key);
    bson_append_document_end(&cmd, &filter);
    BSON_APPEND_INT32(&cmd, "limit", 1);
    BSON_APPEND_BOOL(&cmd, "singleBatch", true);
    bson_destroy(&key);
    int rc = run_plain(s, "config", &cmd, &r, err);
    bson_destroy(&cmd);
    if (rc != 0)
        return rc;
    if ((rc = reply_failed(&r, "reading the shard key moves", err)) == 0 &&
        bson_iter_init(&it, &r) && bson_iter_find_descendant(&it, "cursor.firstBatch.0.r", &rec) &&
        BSON_ITER_HOLDS_DOCUMENT(&rec)) {
        bson_t d;
        sbl_iter_doc(&rec, &d);
        bson_concat(result, &d);
        *foundp = true;
    }
    bson_destroy(&r);
    return rc;
}

/* The collection of records exists on shard s with its TTL index (a
 * collection created inside a transaction cannot take part in a two-phase
 * commit). */
static int ensure_records(int s, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, arr, ix, k, r;
    BSON_APPEND_UTF8(&cmd, "createIndexes", MOVES);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &ix);
    BSON_APPEND_DOCUMENT_BEGIN(&ix, "key", &k);
    BSON_APPEND_INT32(&k, "at", 1);
    bson_append_document_end(&ix, &k);
    BSON_APPEND_UTF8(&ix, "name", "at_1");
    BSON_APPEND_INT32(&ix, "expireAfterSeconds", MOVES_TTL_S);
    bson_append_document_end(&arr, &ix);
    bson_append_array_end(&cmd, &arr);
    int rc = run_plain(s, "config", &cmd, &r, err);
    bson_destroy(&cmd);
    if (rc == 0) {
        rc = reply_failed(&r, "creating config." MOVES, err);
        bson_destroy(&r);
    }
    return rc;
}

/* Insert doc into db.coll on shard s (with c's shardVersion unless NULL). */
static int insert_one(int s, const char *db, const char *coll, const bson_t *doc,
                      const rt_coll_t *c, const char *what, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, docs, r;
    BSON_APPEND_UTF8(&cmd, "insert", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &docs);
    BSON_APPEND_DOCUMENT(&docs, "0", doc);
    bson_append_array_end(&cmd, &docs);
    if (c != NULL)
        rt_append_version(&cmd, c, s);
    int rc = rt_run(s, db, &cmd, &r, err);
    bson_destroy(&cmd);
    if (rc == 0) {
        rc = reply_failed(&r, what, err);
        bson_destroy(&r);
    }
    return rc;
}

/* The transaction's statements: remove pre (unless upsert) from shard from,
 * insert post on shard to, record rec (unless NULL) on from. */
static int move_statements(const char *db, const char *coll, const rt_coll_t *c, int from, int to,
                           const bson_t *pre, const bson_t *post, bool upsert, const bson_t *rec,
                           sbl_err_t *err)
{
    bson_t cmd, q, r;
    bson_iter_t it;
    int rc;
    if (!upsert) {
        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, "findAndModify", coll);
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "query", &q);
        if (bson_iter_init_find(&it, pre, "_id"))
            sbl_append_iter(&q, "_id", 3, &it);
        bson_append_document_end(&cmd, &q);
        BSON_APPEND_BOOL(&cmd, "remove", true);
        rt_append_version(&cmd, c, from);
        rc = rt_run(from, db, &cmd, &r, err);
        bson_destroy(&cmd);
        if (rc != 0)
            return rc;
        if ((rc = reply_failed(&r, "removing the document from its shard", err)) == 0) {
            bson_t old;
            bool same = bson_iter_init_find(&it, &r, "value") && BSON_ITER_HOLDS_DOCUMENT(&it);
            if (same) {
                sbl_iter_doc(&it, &old);
                same = old.len == pre->len &&
                       memcmp(bson_get_data(&old), bson_get_data(pre), pre->len) == 0;
            }
            if (!same)
                rc = sbl_err_set(err, SBL_E_WriteConflict,
                                 "the document changed while it moved to another shard; "
                                 "retry the update");
        }
        bson_destroy(&r);
        if (rc != 0)
            return rc;
    }
    rc = insert_one(to, db, coll, post, c, "inserting the document on its new shard", err);
    if (rc != 0)
        return rc;
    if (rec == NULL)
        return 0;
    return insert_one(from, "config", MOVES, rec, NULL, "recording the move", err);
}

int rt_move_doc(const char *db, const char *coll, const bson_t *client_cmd, const rt_coll_t *c,
                int from, int32_t stmt, const bson_t *info, int image, bson_t *result,
                sbl_err_t *err)
{
    bson_t pre = BSON_INITIALIZER, post = BSON_INITIALIZER;
    bson_iter_t it;
    bool upsert = bson_iter_init_find(&it, info, "shouldUpsert") && bson_iter_as_bool(&it);
    bson_init(result);
    if (bson_iter_init_find(&it, info, "preImage") && BSON_ITER_HOLDS_DOCUMENT(&it))
        sbl_iter_doc(&it, &pre);
    if (!bson_iter_init_find(&it, info, "postImage") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        (!upsert && bson_empty(&pre)))
        return sbl_err_set(err, SBL_E_WouldChangeOwningShard,
                           "This update would cause the doc to change owning shards (the "
                           "shard's answer has no images)");
    sbl_iter_doc(&it, &post);
    int to = rt_target_doc(c, &post, err);
    if (to < 0)
        return err->code;
    if (to == from) /* the shard's chunks are newer than the router's */
        return sbl_err_set(err, SBL_E_StaleConfig, "routing for %s is older than its shard's",
                           c->ns);
    BSON_APPEND_INT32(result, "n", 1);
    BSON_APPEND_INT32(result, "nModified", upsert ? 0 : 1);
    if (upsert && bson_iter_init_find(&it, &post, "_id"))
        sbl_append_iter(result, "upserted", -1, &it);
    if (image == 1)
        BSON_APPEND_DOCUMENT(result, "value", &post);
    else if (image == 0 && !upsert)
        BSON_APPEND_DOCUMENT(result, "value", &pre);
    else if (image == 0)
        BSON_APPEND_NULL(result, "value");
    if (rt_sess_in_txn()) /* the client's transaction: a retry reruns it whole */
        return move_statements(db, coll, c, from, to, &pre, &post, upsert, NULL, err);
    bson_t rec, key; /* keyed by the client's session: made before the child's begins */
    bson_init(&rec);
    record_key(stmt, &key);
    BSON_APPEND_DOCUMENT(&rec, "_id", &key);
    bson_destroy(&key);
    BSON_APPEND_DATE_TIME(&rec, "at", sbl_now_ms());
    BSON_APPEND_DOCUMENT(&rec, "r", result);
    int rc = ensure_records(from, err);
    if (rc == 0 && (rc = rt_sess_internal_begin(err)) == 0) {
        rc = move_statements(db, coll, c, from, to, &pre, &post, upsert, &rec, err);
        sbl_err_t e2 = {0};
        int end = rt_sess_internal_end(rc == 0, client_cmd, rc == 0 ? err : &e2);
        if (rc == 0)
            rc = end;
    }
    bson_destroy(&rec);
    return rc;
}

bool rt_move_again(int *tries)
{
    if (++*tries > MOVE_TRIES)
        return false;
    /* 1, 2, 4 .. 32 ms, then 32 ms, each up to twice as long at random, so a
     * writer that keeps changing the document does not win every race: at
     * most about 12 s in all (a slow shard, under load or a sanitizer, can
     * lose most tries to a writer that never pauses) */
    int base = 1 << (*tries < 6 ? *tries - 1 : 5);
    long us = (long)base * 1000 + (long)(rand() % (base * 1000));
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
    return true;
}
