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
 *   recipient  in its critical section, after the last changes (no routed
 *          write runs on the donor any more): each entry becomes a no-op in
 *          this shard's chain of that session (sbl_repl_session_migrate).
 *
 * What must stay true: the history is taken once the donor's writes to
 * the range have stopped, so no executed statement is missed.  A
 * findAndModify retried after a migration answers without its image (the
 * donor's image entries are not carried).
 */
#include "cmd/migrate_int.h"

#include "doc/doc.h"
#include "repl/repl.h"

#include <stdio.h>
#include <string.h>

#define CHAIN_STEPS 1000              /* entries walked per session */
#define HISTORY_BYTES (8 * 1024 * 1024) /* the reply's entries at most */

/* Append to arr (counting *np, *bytesp) the entries of the chain ending at
 * ts that changed s's range. */
static int walk_chain(sbl_session_t *ss, const mig_spec_t *s, uint64_t ts, bson_t *arr,
                      uint32_t *np, size_t *bytesp, sbl_err_t *err)
{
    for (int steps = 0; ts != 0 && steps < CHAIN_STEPS; steps++) {
        bson_t e, orig, o;
        bool found = false;
        bson_iter_t it, f;
        SBL_RET(sbl_repl_oplog_get(ss, ts, &e, &found, err));
        if (!found)
            return 0; /* the oplog no longer holds the rest */
        const bson_t *src = sbl_repl_session_migrated(&e, &orig) ? &orig : &e;
        const char *op = sbl_doc_utf8(src, "op"), *ns = sbl_doc_utf8(src, "ns");
        bool mine = op != NULL && ns != NULL && strcmp(ns, s->ns) == 0 &&
                    bson_iter_init_find(&it, src, "stmtId") &&
                    (strcmp(op, "d") == 0 ||
                     ((strcmp(op, "i") == 0 || strcmp(op, "u") == 0) && mig_doc_of(src, "o", &o) &&
                      mig_in_range(s, &o)));
        if (mine && *bytesp + src->len < HISTORY_BYTES) {
            char kb[16];
            const char *key = mig_akey(*np, kb);
            BSON_APPEND_DOCUMENT(arr, key, src);
            (*np)++;
            *bytesp += src->len;
        }
        ts = 0;
        if (bson_iter_init_find(&it, &e, "prevOpTime") && bson_iter_recurse(&it, &f) &&
            bson_iter_find(&f, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&f)) {
            uint32_t t, i;
            bson_iter_timestamp(&f, &t, &i);
            ts = ((uint64_t)t << 32) | i;
        }
        bson_destroy(&e);
    }
    return 0;
}

/* One session record's chain (a retryable write's only). */
static int record_history(sbl_session_t *ss, const mig_spec_t *s, const bson_t *rec, bson_t *arr,
                          uint32_t *np, size_t *bytesp, sbl_err_t *err)
{
    bson_iter_t it, f;
    if (bson_iter_init_find(&it, rec, "state") ||
        !bson_iter_init_find(&it, rec, "lastWriteOpTime") || !bson_iter_recurse(&it, &f) ||
        !bson_iter_find(&f, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&f))
        return 0;
    uint32_t t, i;
    bson_iter_timestamp(&f, &t, &i);
    return walk_chain(ss, s, ((uint64_t)t << 32) | i, arr, np, bytesp, err);
}

int sbl_cmd_get_next_session_mods(sbl_opctx_t *ctx, sbl_err_t *err)
{
    mig_spec_t s;
    SBL_RET(mig_donor_spec(ctx->cmd, &s, err));
    bson_t arr;
    uint32_t n = 0;
    size_t bytes = 0;
    int64_t cursor = 0;
    bool first = true;
    int rc = 0;
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "oplog", &arr);
    while (rc == 0 && (first || cursor != 0)) {
        bson_t cmd = BSON_INITIALIZER, reply;
        bson_iter_t it, b;
        if (first) {
            BSON_APPEND_UTF8(&cmd, "find", "transactions");
        } else {
            BSON_APPEND_INT64(&cmd, "getMore", cursor);
            BSON_APPEND_UTF8(&cmd, "collection", "transactions");
        }
        BSON_APPEND_INT32(&cmd, "batchSize", 1000);
        rc = sbl_cmd_run_checked("config", &cmd, &reply, err);
        bson_destroy(&cmd);
        cursor = 0;
        if (rc == 0 && bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.id", &b))
            cursor = bson_iter_as_int64(&b);
        if (rc == 0 && bson_iter_init(&it, &reply) &&
            bson_iter_find_descendant(&it, first ? "cursor.firstBatch" : "cursor.nextBatch", &b) &&
            bson_iter_recurse(&b, &it))
            while (rc == 0 && bson_iter_next(&it)) {
                bson_t rec;
                if (sbl_iter_doc(&it, &rec))
                    rc = record_history(ctx->ss, &s, &rec, &arr, &n, &bytes, err);
            }
        first = false;
        bson_destroy(&reply);
    }
    bson_append_array_end(ctx->reply, &arr);
    if (bytes >= HISTORY_BYTES - 1024 * 1024)
        mig_log("migration of %s: the retryable-write history carried stops at %d MB",
                s.ns, HISTORY_BYTES / (1024 * 1024));
    mig_spec_free(&s);
    return rc;
}

int mig_recip_sessions(sbl_session_t *ss, const char *from, const char *session, sbl_err_t *err)
{
    bson_t reply;
    bson_iter_t it, a;
    int rc = mig_recip_call(from, "_getNextSessionMods", session, &reply, err);
    if (rc == 0 && bson_iter_init_find(&it, &reply, "oplog") && bson_iter_recurse(&it, &a))
        while (rc == 0 && bson_iter_next(&a)) {
            bson_t e;
            if (sbl_iter_doc(&a, &e))
                rc = sbl_repl_session_migrate(ss, &e, err);
        }
    bson_destroy(&reply);
    return rc;
}
