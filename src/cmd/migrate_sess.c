/*
 * migrate_sess.c: a chunk migration carries the retryable-write history of
 * its range (mongod's session migration), so a write retried after its
 * chunk moved is not applied twice on the recipient.
 *
 *   donor  _getNextSessionMods: for each session in config.transactions
 *          whose record is a retryable write's (no transaction state), the
 *          entries of its current txnNumber's chain (prevOpTime) that
 *          changed a document of the range: an insert or update whose
 *          document is in it, every delete of the collection (a delete's
 *          entry holds only the _id; a statement the recipient never sees
 *          a retry of costs nothing).
 *          A findAndModify's entry that points at an image (preImageOpTime:
 *          the document it returned from before its change) goes right
 *          after that image's no-op entry (mongod sends its image entries
 *          in the same stream); a delete whose image is outside the range
 *          is left out.  A reply carries about 8 MB of entries, from at
 *          most 1,000 chain entries walked; when more are left it says
 *          where it stopped (next: {_id: the session's record, ts: the
 *          entry not sent}) and the recipient asks again with after: next,
 *          until a reply has no next (mongod's recipient also calls until
 *          the donor has nothing left).  The sessions go in _id order, so a
 *          later call goes on where the last one ended.
 *   recipient  in its critical section, after the last changes (no routed
 *          write runs on the donor any more): each entry becomes a no-op in
 *          this shard's chain of that session (sbl_repl_session_migrate),
 *          after its image's own no-op, which it points at.
 *
 * What must stay true: the history is taken once the donor's writes to
 * the range have stopped, so no executed statement is missed; a retried
 * findAndModify answers on the recipient as it did on the donor (a
 * post-image is the update entry's own o, carried with it).
 */
#include "cmd/migrate_int.h"

#include "doc/doc.h"
#include "repl/repl.h"

#include <stdio.h>
#include <string.h>

#define CHAIN_STEPS 1000                /* chain entries a reply walks: then another call */
#define HISTORY_BYTES (8 * 1024 * 1024) /* a reply's entries: then another call */
#define REPLY_BYTES (15 * 1024 * 1024)  /* a statement's entry and image at most */

/* The ts of e's optime field ({ts, t}); 0 when absent. */
static uint64_t optime_ts(const bson_t *e, const char *field)
{
    bson_iter_t it, f;
    uint32_t t, i;
    if (!bson_iter_init_find(&it, e, field) || !bson_iter_recurse(&it, &f) ||
        !bson_iter_find(&f, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&f))
        return 0;
    bson_iter_timestamp(&f, &t, &i);
    return ((uint64_t)t << 32) | i;
}

/* The ts of entry e; 0 when absent. */
static uint64_t entry_ts(const bson_t *e)
{
    bson_iter_t it;
    uint32_t t, i;
    if (!bson_iter_init_find(&it, e, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&it))
        return 0;
    bson_iter_timestamp(&it, &t, &i);
    return ((uint64_t)t << 32) | i;
}

/* Append d to arr (counting *np, *bytesp). */
static void append_entry(bson_t *arr, const bson_t *d, uint32_t *np, size_t *bytesp)
{
    char kb[16];
    const char *key = mig_akey(*np, kb);
    BSON_APPEND_DOCUMENT(arr, key, d);
    (*np)++;
    *bytesp += d->len;
}

/* Append to arr (counting *np, *bytesp) the entries of the chain ending at
 * ts that changed s's range, each after its image's entry when it has one
 * (preImageOpTime; for a statement that migrated here, the image this
 * shard wrote with it), counting the entries walked in *stepsp.  *fullp:
 * the reply is full (in bytes, or in steps) at the entry at *fullp (its ts,
 * not appended: the next call starts there); 0 when the chain was walked. */
static int walk_chain(sbl_session_t *ss, const mig_spec_t *s, uint64_t ts, bson_t *arr,
                      uint32_t *np, size_t *bytesp, int *stepsp, uint64_t *fullp, sbl_err_t *err)
{
    *fullp = 0;
    for (; ts != 0; (*stepsp)++) {
        if (*stepsp >= CHAIN_STEPS) {
            *fullp = ts;
            break;
        }
        bson_t e, o, img = BSON_INITIALIZER;
        bool found = false, has_img = false;
        bson_iter_t it;
        SBL_RET(sbl_repl_oplog_get(ss, ts, &e, &found, err));
        if (!found) {
            bson_destroy(&img);
            return 0; /* the oplog no longer holds the rest */
        }
        bson_t *src = sbl_repl_stmt_entry(&e);
        const char *op = sbl_doc_utf8(src, "op"), *ns = sbl_doc_utf8(src, "ns");
        bool mine = op != NULL && ns != NULL && strcmp(ns, s->ns) == 0 &&
                    bson_iter_init_find(&it, src, "stmtId") &&
                    (strcmp(op, "d") == 0 || ((strcmp(op, "i") == 0 || strcmp(op, "u") == 0) &&
                                              mig_entry_in_range(ss, s, src)));
        uint64_t img_ts = mine ? optime_ts(src, "preImageOpTime") : 0;
        int rc = 0;
        if (img_ts != 0) {
            bson_destroy(&img);
            rc = sbl_repl_oplog_get(ss, img_ts, &img, &has_img, err);
            if (!has_img) /* gone from the oplog: a retry there answers without it */
                bson_init(&img);
        }
        if (rc == 0 && has_img && strcmp(op, "d") == 0 &&
            !(mig_doc_of(&img, "o", &o) && mig_in_range(s, &o)))
            mine = false; /* a findAndModify's remove of another range */
        size_t pair = src->len + img.len;
        if (rc == 0 && mine && *bytesp > 0 && *bytesp + pair >= HISTORY_BYTES) {
            *fullp = ts; /* the next call's */
            mine = false;
        } else if (rc == 0 && mine && pair >= REPLY_BYTES) {
            mig_log("migration of %s: a statement's history entry (%zu bytes) is too "
                    "large to carry",
                    s->ns, pair);
            mine = false;
        }
        if (rc == 0 && mine) {
            if (has_img)
                append_entry(arr, &img, np, bytesp);
            append_entry(arr, src, np, bytesp);
        }
        ts = *fullp != 0 ? 0 : optime_ts(&e, "prevOpTime");
        bson_destroy(src);
        bson_destroy(&img);
        bson_destroy(&e);
        SBL_RET(rc);
    }
    return 0;
}

/* One session record's chain (a retryable write's only). */
static int record_history(sbl_session_t *ss, const mig_spec_t *s, const bson_t *rec, uint64_t from,
                          bson_t *arr, uint32_t *np, size_t *bytesp, int *stepsp, uint64_t *fullp,
                          sbl_err_t *err)
{
    bson_iter_t it, f;
    *fullp = 0;
    if (bson_iter_init_find(&it, rec, "state") ||
        !bson_iter_init_find(&it, rec, "lastWriteOpTime") || !bson_iter_recurse(&it, &f) ||
        !bson_iter_find(&f, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&f))
        return 0;
    uint32_t t, i;
    bson_iter_timestamp(&f, &t, &i);
    return walk_chain(ss, s, from != 0 ? from : ((uint64_t)t << 32) | i, arr, np, bytesp, stepsp,
                      fullp, err);
}

int sbl_cmd_get_next_session_mods(sbl_opctx_t *ctx, sbl_err_t *err)
{
    mig_spec_t s;
    SBL_RET(mig_donor_spec(ctx->cmd, &s, err));
    /* after: {_id, ts}: where the last call's reply filled up (that
     * session's chain from the entry at ts on; the sessions after it) */
    bson_t after, after_id;
    bson_iter_t at;
    uint64_t after_ts = 0;
    bool cont = mig_doc_of(ctx->cmd, "after", &after) && mig_doc_of(&after, "_id", &after_id) &&
                bson_iter_init_find(&at, &after, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&at);
    if (cont) {
        uint32_t t, i;
        bson_iter_timestamp(&at, &t, &i);
        after_ts = ((uint64_t)t << 32) | i;
    }
    bson_t arr, f, sort;
    uint32_t n = 0;
    size_t bytes = 0;
    int64_t cursor = 0;
    uint64_t full = 0;
    int steps = 0; /* chain entries walked by this call */
    bool first = true;
    int rc = 0;
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "oplog", &arr);
    while (rc == 0 && full == 0 && (first || cursor != 0)) {
        bson_t cmd = BSON_INITIALIZER, reply;
        bson_iter_t it;
        if (first) { /* in _id order, so that a later call goes on from after */
            BSON_APPEND_UTF8(&cmd, "find", "transactions");
            if (cont) {
                BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
                bson_t ge;
                BSON_APPEND_DOCUMENT_BEGIN(&f, "_id", &ge);
                BSON_APPEND_DOCUMENT(&ge, "$gte", &after_id);
                bson_append_document_end(&f, &ge);
                bson_append_document_end(&cmd, &f);
            }
            BSON_APPEND_DOCUMENT_BEGIN(&cmd, "sort", &sort);
            BSON_APPEND_INT32(&sort, "_id", 1);
            bson_append_document_end(&cmd, &sort);
        } else {
            BSON_APPEND_INT64(&cmd, "getMore", cursor);
            BSON_APPEND_UTF8(&cmd, "collection", "transactions");
        }
        BSON_APPEND_INT32(&cmd, "batchSize", 1000);
        rc = sbl_cmd_run_checked("config", &cmd, &reply, err);
        bson_destroy(&cmd);
        cursor = 0;
        if (rc == 0 && mig_reply_batch(&reply, &cursor, &it))
            while (rc == 0 && full == 0 && bson_iter_next(&it)) {
                bson_t rec, id;
                if (!sbl_iter_doc(&it, &rec) || !mig_doc_of(&rec, "_id", &id))
                    continue;
                uint64_t from = cont && sbl_doc_compare(&id, &after_id) == 0 ? after_ts : 0;
                rc = record_history(ctx->ss, &s, &rec, from, &arr, &n, &bytes, &steps, &full, err);
                if (rc == 0 && full != 0) { /* the rest in the next call */
                    bson_t next;
                    bson_append_array_end(ctx->reply, &arr);
                    BSON_APPEND_DOCUMENT_BEGIN(ctx->reply, "next", &next);
                    BSON_APPEND_DOCUMENT(&next, "_id", &id);
                    bson_append_timestamp(&next, "ts", -1, (uint32_t)(full >> 32), (uint32_t)full);
                    bson_append_document_end(ctx->reply, &next);
                }
            }
        first = false;
        bson_destroy(&reply);
    }
    if (full == 0)
        bson_append_array_end(ctx->reply, &arr);
    mig_kill_cursor("config", "transactions", cursor);
    mig_spec_free(&s);
    return rc;
}

/* Each entry of a _getNextSessionMods reply written as a no-op in this
 * shard's chain of its session (after its image's, which it points at). */
static int apply_history(sbl_session_t *ss, const bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it, a;
    bson_iter_t img_it;
    bson_t img, o;
    bool has_img = false;
    int rc = 0;
    if (bson_iter_init_find(&it, reply, "oplog") && bson_iter_recurse(&it, &a))
        while (rc == 0 && bson_iter_next(&a)) {
            bson_t e;
            if (!sbl_iter_doc(&a, &e))
                continue;
            const char *op = sbl_doc_utf8(&e, "op");
            if (op != NULL && strcmp(op, "n") == 0) { /* the next statement's image */
                img_it = a;
                has_img = true;
                continue;
            }
            /* the image is the one this statement names (the donor's ts) */
            uint64_t pre = optime_ts(&e, "preImageOpTime");
            bool mine = has_img && pre != 0 && sbl_iter_doc(&img_it, &img) &&
                        entry_ts(&img) == pre && mig_doc_of(&img, "o", &o);
            rc = sbl_repl_session_migrate(ss, &e, mine ? &o : NULL, err);
            has_img = false;
        }
    return rc;
}

int mig_recip_sessions(sbl_session_t *ss, const char *from, const char *session, sbl_err_t *err)
{
    bson_t next = BSON_INITIALIZER;
    bool more = true;
    int rc = 0;
    while (rc == 0 && more) { /* until the donor has sent all of it */
        bson_t after = BSON_INITIALIZER, reply;
        if (!bson_empty(&next))
            BSON_APPEND_DOCUMENT(&after, "after", &next);
        rc = mig_recip_call(from, "_getNextSessionMods", session, &after, &reply, err);
        bson_destroy(&after);
        if (rc != 0) {
            bson_destroy(&reply);
            break;
        }
        bson_t nx;
        more = mig_doc_of(&reply, "next", &nx);
        bson_reinit(&next);
        if (more)
            bson_concat(&next, &nx);
        rc = apply_history(ss, &reply, err);
        bson_destroy(&reply);
    }
    bson_destroy(&next);
    return rc;
}
