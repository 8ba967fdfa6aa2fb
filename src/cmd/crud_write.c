/*
 * crud_write.c: the write commands insert, update and delete, and the
 * per-document write helpers findAndModify shares.
 *
 * What must stay true:
 *  - Every document change is its own transaction: read the document by _id,
 *    re-check the filter, write with sbl_write, commit; a WriteConflict
 *    retries that document from the read (bounded, with backoff).
 *  - A multi update or delete visits each document at most once: the
 *    executor resumes strictly after the last _id it produced.
 *  - Per-statement failures become writeErrors (the command still returns
 *    0); ordered batches stop at the first one.  ctx->wrote is set whenever
 *    something committed.
 */
#include "cmd/crud_int.h"
#include "doc/doc.h"
#include "expr/expr.h"
#include "repl/repl.h"
#include "shard/shard.h"
#include "update/update.h"

#include <stdlib.h>
#include <string.h>

#define MAX_BATCH 100000
#define UPSERT_RETRIES 3

/* ---- shared helpers ---------------------------------------------------------- */

/* Commit, or abort on failure; WriteConflict tells the caller to retry. */
static int commit_or_abort(sbl_session_t *ss, sbl_err_t *err)
{
    int rc = sbl_txn_commit(ss, err);
    if (rc != 0)
        sbl_txn_abort(ss);
    return rc;
}

/*
 * Apply u to old into out (initialised here on success): operator/replacement
 * updates through src/update, pipelines through the aggregation stages; a
 * pipeline may not change _id (66) and its result keeps _id first.
 */
static int apply_update(sbl_opctx_t *ctx, const sbl_crud_update_t *u, const bson_t *old,
                        int32_t pos, bool is_insert, bson_t *out, bool *changed, sbl_err_t *err)
{
    if (u->op != NULL) {
        bson_init(out);
        int rc = sbl_update_apply(u->op, old, pos, is_insert, sbl_now_ms(), out, changed, err);
        if (rc != 0)
            bson_destroy(out);
        return rc;
    }
    bson_t res;
    bson_iter_t oi, ni;
    SBL_RET(sbl_agg_update_doc(ctx, u->pipeline, u->let, old, &res, err));
    bool old_has = bson_iter_init_find(&oi, old, "_id");
    bool new_has = bson_iter_init_find(&ni, &res, "_id");
    /* a result without _id keeps the old one; a different _id is refused */
    if (old_has && new_has &&
        (sbl_value_compare(bson_iter_value(&oi), bson_iter_value(&ni)) != 0 ||
         bson_iter_type(&oi) != bson_iter_type(&ni))) {
        bson_destroy(&res);
        return sbl_err_set(err, SBL_E_ImmutableField,
                           "Performing an update on the path '_id' would modify the immutable "
                           "field '_id'");
    }
    bson_init(out);
    if (new_has)
        sbl_append_iter(out, "_id", 3, &ni);
    else if (old_has)
        sbl_append_iter(out, "_id", 3, &oi);
    bson_copy_to_excluding_noinit(&res, out, "_id", NULL);
    bson_destroy(&res);
    *changed = out->len != old->len || memcmp(bson_get_data(out), bson_get_data(old), old->len) != 0;
    return 0;
}

/* A write to a sharded collection may not leave an array in the document's
 * shard key (mongod's storage validation of the key's paths: 54), nor move
 * a document this shard owns (old; NULL for an upsert's insert) out of its
 * ranges: mongod's shards answer WouldChangeOwningShard (283) and leave the
 * move to the router, telling it the document before and after the update
 * (preImage, postImage, shouldUpsert: mongod's fields of that error, into
 * err_info when given), which the router deletes here and inserts on the
 * owning shard.  Client commands only. */
static int check_shard_key(const sbl_opctx_t *ctx, const char *ns, const bson_t *old,
                           const bson_t *doc, bson_t *err_info, sbl_err_t *err)
{
    if (ctx->conn == NULL)
        return 0; /* internal (a migration's recipient applying the donor's documents) */
    /* a routed write: the filter of the version it was checked against (the
     * cache may have been cleared since, by a step-up) */
    sbl_shard_filter_t *f = ctx->shard_filter;
    if (f != NULL && strcmp(sbl_shard_filter_ns(f), ns) == 0)
        f = sbl_shard_filter_ref(f);
    else
        f = sbl_shard_filter_get(ns);
    int rc = 0;
    if (sbl_shard_filter_key_array(f, doc))
        rc = sbl_err_set(err, SBL_E_NotSingleValueField, "After applying the update, a shard key "
                         "field of the document was found to be an array or array descendant.");
    else if (!sbl_shard_filter_trivial(f) && (old == NULL || sbl_shard_filter_owns(f, old)) &&
             !sbl_shard_filter_owns(f, doc)) {
        rc = sbl_err_set(err, SBL_E_WouldChangeOwningShard,
                         "This update would cause the doc to change owning shards");
        if (err_info != NULL) {
            if (old != NULL)
                BSON_APPEND_DOCUMENT(err_info, "preImage", old);
            BSON_APPEND_DOCUMENT(err_info, "postImage", doc);
            BSON_APPEND_BOOL(err_info, "shouldUpsert", old == NULL);
        }
    }
    sbl_shard_filter_release(f);
    return rc;
}

/* May a router's write change doc, the current version of a document of c?
 * Not when it is an orphan: a routed update, delete or findAndModify on a
 * sharded collection (ctx->shard_filter, routed.c) skips the documents this
 * shard does not own, as mongod's update and delete stages do for a
 * versioned operation, so they neither change nor count them.  The executor
 * already drops orphans from what it produces (so a limit or a sort sees
 * owned documents only); this check also covers the writes that read their
 * documents by _id without it ({_id: v}, {_id: {$in: [...]}}), and sees the
 * version the write reads.  A write without shardVersion changes any
 * document, as on mongod. */
static bool write_owns(const sbl_opctx_t *ctx, const sbl_coll_t *c, const bson_t *doc)
{
    const sbl_shard_filter_t *f = ctx->shard_filter;
    return f == NULL || strcmp(sbl_shard_filter_ns(f), sbl_coll_ns(c)) != 0 ||
           sbl_shard_filter_owns(f, doc);
}

/* Is doc, about to be changed by a client's write sent to this shard directly
 * (no shardVersion), one this shard does not own?  mongod writes such an
 * orphan's change marked fromMigrate, so change streams (which leave those
 * out) do not report a change to data the cluster does not see.  Outside a
 * multi-document transaction only: its entries are written at commit. */
static bool direct_orphan(const sbl_opctx_t *ctx, const sbl_coll_t *c, const bson_t *doc)
{
    if (ctx->shard_filter != NULL || ctx->conn == NULL || ctx->mtxn != NULL)
        return false;
    sbl_shard_filter_t *f = sbl_shard_filter_get(sbl_coll_ns(c));
    bool orphan = !sbl_shard_filter_trivial(f) && !sbl_shard_filter_owns(f, doc);
    sbl_shard_filter_release(f);
    return orphan;
}

int sbl_crud_modify_one(sbl_opctx_t *ctx, sbl_coll_t *c, const bson_value_t *id,
                        const bson_t *cand, const sbl_matcher_t *m, const sbl_crud_update_t *u,
                        bool *matchedp, bool *changedp, bson_t *old_out, bson_t *new_out,
                        bson_t *err_info, sbl_err_t *err)
{
    int rc = 0;
    *matchedp = *changedp = false;
    for (int attempt = 0;; attempt++) {
        bson_t old, upd;
        bool found = false, changed = false, have_upd = false;
        int32_t pos = -1;

        SBL_RET(sbl_op_backoff(ctx, &attempt, err));
        SBL_RET(sbl_txn_begin(ctx->ss, err));
        rc = sbl_crud_read_current(ctx, c, id, cand, &old, &found, err);
        if (rc == SBL_E_WriteConflict && ctx->mtxn == NULL && attempt < SBL_WRITE_RETRIES) {
            sbl_txn_abort(ctx->ss); /* a prepared transaction's document: wait, read again */
            continue;
        }
        if (rc != 0 || !found)
            goto abort;
        if ((m != NULL && !sbl_matcher_match(m, &old, &pos)) || !write_owns(ctx, c, &old)) {
            bson_destroy(&old);
            goto abort;
        }
        bool from_migrate = sbl_repl_from_migrate; /* a migration's own write keeps it */
        sbl_repl_from_migrate = from_migrate || direct_orphan(ctx, c, &old);
        if (u != NULL) {
            rc = apply_update(ctx, u, &old, pos, false, &upd, &changed, err);
            have_upd = rc == 0;
            if (rc == 0 && changed && upd.len > SBL_BSON_MAX_SIZE)
                rc = sbl_err_set(err, SBL_E_UpdatedDocTooLarge,
                                 "Resulting document after update is larger than %d",
                                 SBL_BSON_MAX_SIZE);
            if (rc == 0 && changed)
                rc = check_shard_key(ctx, sbl_coll_ns(c), &old, &upd, err_info, err);
            if (rc == 0 && changed)
                rc = sbl_crud_validate(c, &old, &upd, u->bypass_validation, err_info, err);
            if (rc == 0 && changed) { /* a replacement's oplog entry carries no diff */
                sbl_repl_set_replacement(u->op != NULL && sbl_update_is_replacement(u->op));
                rc = sbl_write(ctx->ss, c, SBL_WRITE_UPDATE, &old, &upd, err_info, err);
                sbl_repl_set_replacement(false);
            }
        } else {
            changed = true;
            rc = sbl_write(ctx->ss, c, SBL_WRITE_DELETE, &old, NULL, err_info, err);
        }
        sbl_repl_from_migrate = from_migrate;
        if (rc == 0)
            rc = commit_or_abort(ctx->ss, err);
        else
            sbl_txn_abort(ctx->ss);
        if (rc == SBL_E_WriteConflict && attempt < SBL_WRITE_RETRIES) {
            bson_destroy(&old);
            if (have_upd)
                bson_destroy(&upd);
            if (err_info != NULL)
                bson_reinit(err_info);
            continue;
        }
        if (rc == 0) {
            *matchedp = true;
            *changedp = changed;
            if (changed)
                ctx->wrote = true;
            if (old_out != NULL)
                bson_copy_to(&old, old_out);
            if (new_out != NULL) {
                if (have_upd)
                    bson_copy_to(&upd, new_out);
                else
                    bson_copy_to(&old, new_out);
            }
        }
        bson_destroy(&old);
        if (have_upd)
            bson_destroy(&upd);
        return rc;
    abort:
        sbl_txn_abort(ctx->ss);
        return rc;
    }
}

int sbl_crud_upsert(sbl_opctx_t *ctx, const char *ns, const bson_t *filter,
                    const sbl_crud_update_t *u, bson_t *new_out, bson_value_t *id_out,
                    bson_t *err_info, sbl_err_t *err)
{
    bson_t seed, applied, doc;
    bool changed = false;
    sbl_coll_t *c = NULL;
    int rc;

    bson_t empty = BSON_INITIALIZER;
    bson_init(&seed);
    rc = sbl_upsert_seed(filter != NULL ? filter : &empty, &seed, err);
    if (rc == 0)
        rc = apply_update(ctx, u, &seed, -1, true, &applied, &changed, err);
    bson_destroy(&seed);
    if (rc == 0) {
        rc = sbl_doc_prepare_insert(&applied, &doc, err);
        bson_destroy(&applied);
    }
    /* with its _id, so a router moving it inserts the same document */
    if (rc == 0 && (rc = check_shard_key(ctx, ns, NULL, &doc, err_info, err)) != 0)
        bson_destroy(&doc);
    if (rc != 0)
        return rc;
    bool created = false;
    if ((rc = sbl_coll_open(ctx->ss, ns, true, &c, &created, err)) == 0 && created)
        sbl_op_coll_created(ctx, ns);
    if (rc != 0 ||
        (rc = sbl_crud_validate(c, NULL, &doc, u->bypass_validation, err_info, err)) != 0) {
        if (c != NULL)
            sbl_coll_release(c);
        bson_destroy(&doc);
        return rc;
    }
    for (int attempt = 0;; attempt++) {
        if ((rc = sbl_op_backoff(ctx, &attempt, err)) != 0 ||
            (rc = sbl_txn_begin(ctx->ss, err)) != 0)
            break;
        rc = sbl_write(ctx->ss, c, SBL_WRITE_INSERT, NULL, &doc, err_info, err);
        if (rc == 0)
            rc = commit_or_abort(ctx->ss, err);
        else
            sbl_txn_abort(ctx->ss);
        if (rc != SBL_E_WriteConflict || attempt >= SBL_WRITE_RETRIES)
            break;
        if (err_info != NULL)
            bson_reinit(err_info);
    }
    sbl_coll_release(c);
    if (rc == 0) {
        ctx->wrote = true;
        if (id_out != NULL) {
            bson_iter_t it;
            bson_iter_init_find(&it, &doc, "_id");
            bson_value_copy(bson_iter_value(&it), id_out);
        }
        if (new_out != NULL)
            bson_copy_to(&doc, new_out);
    }
    bson_destroy(&doc);
    return rc;
}

/* View the document held by the iterator as *out (read-only). */
static bool iter_array(const bson_iter_t *it, bson_t *out)
{
    uint32_t len;
    const uint8_t *data;
    bson_iter_array(it, &len, &data);
    return bson_init_static(out, data, len);
}

/*
 * Check the statement array `key` of a write command: present, an array of
 * documents, 1..100000 long.  *arrp views it; *np is its length.
 */
static int get_batch(const bson_t *cmd, const char *cmdname, const char *key, bson_t *arrp,
                     uint32_t *np, sbl_err_t *err)
{
    bson_iter_t it, el;
    char field[64];
    uint32_t n = 0;

    if (!sbl_doc_find_top(cmd, key, &it))
        return sbl_err_set(err, SBL_E_MissingField, "BSON field '%s.%s' is missing but a required field",
                           cmdname, key);
    sbl_join_dot(field, sizeof(field), cmdname, key);
    if (!BSON_ITER_HOLDS_ARRAY(&it))
        return sbl_type_error(err, field, &it, "array");
    if (!iter_array(&it, arrp))
        return sbl_err_set(err, SBL_E_InvalidBSON, "invalid %s", key);
    bson_iter_recurse(&it, &el);
    while (bson_iter_next(&el)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&el)) {
            snprintf(field, sizeof(field), "%s.%s.%u", cmdname, key, n);
            return sbl_type_error(err, field, &el, "object");
        }
        n++;
    }
    if (n == 0 || n > MAX_BATCH)
        return sbl_err_set(err, SBL_E_InvalidLength,
                           "Write batch sizes must be between 1 and %d. Got %u operations.",
                           MAX_BATCH, n);
    *np = n;
    return 0;
}

/* Read `ordered` and check the boolean options common to the write commands. */
/* ordered and bypassDocumentValidation, read in sbl_check_fields' walk. */
typedef struct write_flags {
    const char *req;
    bool ordered, bypass, has_bypass;
} write_flags_t;

static int write_flag(void *arg, const char *k, const bson_iter_t *it, sbl_err_t *err)
{
    write_flags_t *f = arg;
    if (!BSON_ITER_HOLDS_BOOL(it) && !BSON_ITER_HOLDS_NUMBER(it)) {
        char field[64];
        sbl_join_dot(field, sizeof(field), f->req, k);
        return sbl_type_error(err, field, it, "bool");
    }
    if (k[0] == 'o') {
        f->ordered = bson_iter_as_bool(it); /* the last one counts */
    } else if (!f->has_bypass) {
        f->has_bypass = true; /* the first one counts */
        f->bypass = bson_iter_as_bool(it);
    }
    return 0;
}

/* A write command's fields checked (sbl_check_fields), and its ordered (true
 * when absent) and bypassDocumentValidation flags, bool or number. */
static int check_write_fields(const bson_t *cmd, const char *req, const char *const *known,
                              write_flags_t *f, sbl_err_t *err)
{
    static const char *const flags[] = {"ordered", "bypassDocumentValidation", NULL};
    *f = (write_flags_t){.req = req, .ordered = true};
    return sbl_check_fields_visit(cmd, req, known, flags, write_flag, f, err);
}

/* Evaluate the command's `let` into *vals (initialised here; empty when absent). */
static int get_let(const bson_t *cmd, const char *req, bson_t *vals, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t spec;
    if (!sbl_doc_find_top(cmd, "let", &it)) {
        bson_init(vals);
        return 0;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        char field[64];
        snprintf(field, sizeof(field), "%s.let", req);
        bson_init(vals);
        return sbl_type_error(err, field, &it, "object");
    }
    sbl_iter_doc(&it, &spec);
    return sbl_expr_eval_let(&spec, vals, err);
}

static void append_count(bson_t *b, const char *k, int64_t n)
{
    if (n <= INT32_MAX)
        bson_append_int32(b, k, -1, (int32_t)n);
    else
        bson_append_int64(b, k, -1, n);
}

/* ---- insert -------------------------------------------------------------------- */

static const char *const insert_fields[] = {"insert", "documents", "ordered",
                                            "bypassDocumentValidation", "let", "stmtId",
                                            "stmtIds", "collectionUUID", NULL};

/* Insert one prepared document in its own transaction, retrying WriteConflict. */
static int insert_one(sbl_opctx_t *ctx, sbl_coll_t *c, const bson_t *doc, bson_t *err_info,
                      sbl_err_t *err)
{
    int rc;
    for (int attempt = 0;; attempt++) {
        SBL_RET(sbl_op_backoff(ctx, &attempt, err));
        SBL_RET(sbl_txn_begin(ctx->ss, err));
        rc = sbl_write(ctx->ss, c, SBL_WRITE_INSERT, NULL, doc, err_info, err);
        if (rc == 0)
            rc = commit_or_abort(ctx->ss, err);
        else
            sbl_txn_abort(ctx->ss);
        if (rc != SBL_E_WriteConflict || attempt >= SBL_WRITE_RETRIES)
            return rc;
        bson_reinit(err_info);
    }
}

/* Inserts in groups (mongod's batched inserts): on a standalone, outside
 * retryable writes and transactions, up to INSERT_GROUP_DOCS documents or
 * INSERT_GROUP_BYTES go through the one write path in one WiredTiger
 * transaction, which costs one commit instead of one each.  Any error in a
 * group rolls the whole group back, and its documents are then inserted one
 * at a time, so each gets its own result as before.  (On a replica set each
 * document keeps its own transaction: its oplog entry's timestamp is its
 * transaction's.)  ctx->retry is NULL on a standalone. */
#define INSERT_GROUP_DOCS 64
#define INSERT_GROUP_BYTES (256 * 1024)

static bool insert_groups_allowed(const sbl_opctx_t *ctx, const sbl_coll_t *c)
{
    /* (transactions and retryable writes need a replica set) */
    return ctx->retry == NULL && !sbl_repl_enabled() && !sbl_coll_capped(c, NULL, NULL);
}

/* Insert the documents at *it as one group; true when all of them went in
 * (*it then points past them, *np gets their count).  False changes
 * nothing: the caller inserts them one at a time. */
static bool insert_group(sbl_opctx_t *ctx, sbl_coll_t *c, bson_iter_t *it, bool bypass,
                         int64_t *np)
{
    bson_iter_t at = *it;
    bson_t in, doc, info = BSON_INITIALIZER;
    sbl_err_t e = {0};
    int64_t n = 0, bytes = 0;
    bool ok = sbl_txn_begin_outer(ctx->ss, &e) == 0;
    while (ok && n < INSERT_GROUP_DOCS && bytes < INSERT_GROUP_BYTES && bson_iter_next(&at)) {
        if (!sbl_iter_doc(&at, &in) || sbl_doc_prepare_insert(&in, &doc, &e) != 0) {
            ok = false;
            break;
        }
        ok = sbl_crud_validate(c, NULL, &doc, bypass, &info, &e) == 0 &&
             sbl_write(ctx->ss, c, SBL_WRITE_INSERT, NULL, &doc, &info, &e) == 0;
        bytes += doc.len;
        bson_destroy(&doc);
        n++;
    }
    bson_destroy(&info);
    if (ok && n > 1 && sbl_txn_commit_outer(ctx->ss, &e) == 0) {
        *it = at;
        *np = n;
        return true;
    }
    sbl_txn_abort_outer(ctx->ss); /* harmless when nothing is open */
    return false;
}

/* killOp, maxTimeMS, shutdown, a step-down and a transaction's lifetime
 * fail the whole batch, not one statement, as in mongod (its Interruption
 * codes): the command answers that error (statements before it stay
 * applied), so drivers retry a write a step-down cut off. */
static bool interrupted(int rc)
{
    return rc == SBL_E_MaxTimeMSExpired || rc == SBL_E_Interrupted ||
           rc == SBL_E_InterruptedAtShutdown || rc == SBL_E_InterruptedDueToReplStateChange ||
           rc == SBL_E_TransactionExceededLifetimeLimitSeconds;
}

int sbl_cmd_insert(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[SBL_NS_MAX];
    bson_t docs, errors = BSON_INITIALIZER;
    uint32_t ndocs = 0, nerrors = 0;
    int64_t n = 0;
    sbl_coll_t *c = NULL;
    bson_iter_t it;
    sbl_err_t stop = {0}; /* the interruption that ended the batch */

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    SBL_RET(sbl_validate_user_write_ns(ns, err));
    write_flags_t flags;
    SBL_RET(check_write_fields(ctx->cmd, "insert", insert_fields, &flags, err));
    bool ordered = flags.ordered;
    SBL_RET(get_batch(ctx->cmd, "insert", "documents", &docs, &ndocs, err));
    bool bypass = flags.bypass;
    bool created = false;
    SBL_RET(sbl_coll_open(ctx->ss, ns, true, &c, &created, err));
    if (created)
        sbl_op_coll_created(ctx, ns);

    bson_iter_init(&it, &docs);
    bool groups = ndocs > 1 && insert_groups_allowed(ctx, c);
    int64_t singles = 0; /* documents of a failed group still to insert one at a time */
    for (int64_t i = 0;; i++) {
        int64_t k;
        if (groups && singles == 0 && i < (int64_t)ndocs - 1) {
            bson_iter_t before = it;
            if (insert_group(ctx, c, &it, bypass, &k)) {
                n += k;
                ctx->wrote = true;
                i += k - 1;
                if (sbl_op_check_interrupt(ctx, &stop) != 0)
                    break;
                continue;
            }
            it = before;
            singles = INSERT_GROUP_DOCS;
        }
        if (!bson_iter_next(&it))
            break;
        /* flow control: a ticket each further 64 documents, as mongod's insert batches */
        if (i > 0 && (i & 63) == 0 && sbl_cmd_flow_ticket(ctx, false, &stop) != 0)
            break;
        if (singles > 0)
            singles--;
        bson_t in, doc, info = BSON_INITIALIZER;
        sbl_err_t e = {0};
        const bson_t *done = NULL;
        int rc = sbl_iter_doc(&it, &in) ? 0 : sbl_err_set(&e, SBL_E_InvalidBSON, "invalid document");
        int32_t sid = ctx->retry != NULL ? sbl_retry_stmt_id(ctx->retry, (uint32_t)i) : 0;
        if (rc == 0 && ctx->retry != NULL)
            rc = sbl_retry_executed(ctx->retry, sid, &done, &e);
        if (rc == 0 && done == NULL && (rc = sbl_doc_prepare_insert(&in, &doc, &e)) == 0) {
            rc = sbl_crud_validate(c, NULL, &doc, bypass, &info, &e);
            if (rc == 0 && ctx->retry != NULL)
                rc = sbl_retry_stmt_begin(ctx->retry, sid, false, &e);
            if (rc == 0)
                rc = insert_one(ctx, c, &doc, &info, &e);
            if (ctx->retry != NULL)
                sbl_retry_stmt_end(ctx->retry, rc == 0);
            bson_destroy(&doc);
        }
        if (rc == 0) {
            n++;
            if (done == NULL)
                ctx->wrote = true;
        } else if (interrupted(rc)) {
            stop = e;
        } else {
            sbl_crud_add_write_error(&errors, &nerrors, i, &e, &info);
        }
        bson_destroy(&info);
        if (rc != 0 && (ordered || stop.code != 0))
            break;
        if ((i & 63) == 63 && sbl_op_check_interrupt(ctx, &stop) != 0)
            break;
    }
    sbl_coll_release(c);
    if (stop.code != 0) {
        bson_destroy(&errors);
        *err = stop;
        return stop.code;
    }
    append_count(ctx->reply, "n", n);
    ctx->writes = (sbl_write_counts_t){.known = true, .n = n};
    if (nerrors > 0)
        bson_append_array(ctx->reply, "writeErrors", -1, &errors);
    sbl_retry_append_retried(ctx->retry, ctx->reply);
    bson_destroy(&errors);
    return 0;
}

/* ---- update -------------------------------------------------------------------- */

static const char *const update_fields[] = {"update", "updates", "ordered",
                                            "bypassDocumentValidation", "let", "stmtId",
                                            "stmtIds", "collectionUUID", NULL};

typedef struct update_totals {
    int64_t n, nmodified;
    bson_t upserted;
    uint32_t nupserted;
} update_totals_t;

typedef struct update_stmt {
    bson_t q, u, array_filters, c; /* c: a pipeline's constants (mongod's `c`) */
    bool has_q, has_u, has_af, u_is_pipeline, upsert, multi, has_hint, has_coll, has_c;
    bson_value_t hint;
    const sbl_collation_t *coll; /* when has_coll; else the collection's default */
} update_stmt_t;

static int parse_update_stmt(const bson_t *s, update_stmt_t *st, sbl_err_t *err)
{
    bson_iter_t it;
    memset(st, 0, sizeof(*st));
    bson_iter_init(&it, s);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        char field[64];
        sbl_join_dot(field, sizeof(field), "UpdateOpEntry", k);
        if (strcmp(k, "q") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, field, &it, "object");
            st->has_q = sbl_iter_doc(&it, &st->q);
        } else if (strcmp(k, "u") == 0) {
            if (BSON_ITER_HOLDS_ARRAY(&it)) {
                st->u_is_pipeline = true;
                st->has_u = iter_array(&it, &st->u);
            } else if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                st->has_u = sbl_iter_doc(&it, &st->u);
            } else {
                return sbl_type_error(err, field, &it, "object");
            }
        } else if (strcmp(k, "upsert") == 0 || strcmp(k, "multi") == 0 ||
                   strcmp(k, "upsertSupplied") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_NUMBER(&it))
                return sbl_type_error(err, field, &it, "bool");
            if (k[0] == 'm')
                st->multi = bson_iter_as_bool(&it);
            else if (strcmp(k, "upsert") == 0)
                st->upsert = bson_iter_as_bool(&it);
        } else if (strcmp(k, "arrayFilters") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&it))
                return sbl_type_error(err, field, &it, "array");
            st->has_af = iter_array(&it, &st->array_filters);
        } else if (strcmp(k, "hint") == 0) {
            SBL_RET(sbl_exec_get_hint(&it, &st->hint, &st->has_hint, err));
        } else if (strcmp(k, "collation") == 0) {
            SBL_RET(sbl_collation_from_iter(&it, field, &st->coll, err));
            st->has_coll = true;
        } else if (strcmp(k, "c") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, field, &it, "object");
            st->has_c = sbl_iter_doc(&it, &st->c);
        } else if (strcmp(k, "sampleId") == 0) {
            continue;
        } else {
            return sbl_err_set(err, SBL_E_UnknownField,
                               "BSON field 'UpdateOpEntry.%s' is an unknown field.", k);
        }
    }
    if (!st->has_q)
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field 'UpdateOpEntry.q' is missing but a required field");
    if (!st->has_u)
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field 'UpdateOpEntry.u' is missing but a required field");
    if (st->has_c && !st->u_is_pipeline)
        return sbl_err_set(err, 51198, "Constant values may only be specified for pipeline "
                           "updates");
    return 0;
}

/* The _id of a document (a view into doc). */
static bool doc_id(const bson_t *doc, bson_value_t *id)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, "_id"))
        return false;
    sbl_iter_value(&it, id);
    return true;
}

/* Run one update statement; per-statement errors come back as rc + e + info. */
static int run_update(sbl_opctx_t *ctx, const char *ns, const update_stmt_t *st, int64_t index,
                      const bson_t *let, bool bypass, update_totals_t *tot, bson_t *info,
                      sbl_err_t *err)
{
    sbl_update_t *u = NULL;
    sbl_crud_update_t cu = {NULL, NULL, let, bypass};
    bson_t qf; /* the filter with the command's let variables bound */
    bson_t vars = BSON_INITIALIZER; /* the pipeline's: let, then the statement's c */
    sbl_qexec_t *q = NULL;
    sbl_coll_t *c = NULL;
    int64_t matched = 0;
    int rc = 0;

    if (st->u_is_pipeline) {
        if (st->has_af)
            return sbl_err_set(err, SBL_E_FailedToParse,
                               "arrayFilters may not be specified for pipeline-style updates");
        SBL_RET(sbl_agg_check_update_pipeline(&st->u, err));
        cu.pipeline = &st->u;
        if (st->has_c) { /* constants, as given ($merge's $$new and let) */
            bson_iter_t li;
            bson_iter_init(&li, let);
            while (bson_iter_next(&li))
                if (!bson_has_field(&st->c, bson_iter_key(&li)))
                    sbl_append_iter(&vars, bson_iter_key(&li), -1, &li);
            bson_concat(&vars, &st->c);
            cu.let = &vars;
        }
    } else {
        u = sbl_update_new(&st->u, st->has_af ? &st->array_filters : NULL, err);
        if (u == NULL)
            return err->code ? err->code : sbl_err_set(err, SBL_E_FailedToParse, "invalid update");
        cu.op = u;
    }
    sbl_expr_bind_let(&st->q, let, &qf);
    if (u != NULL && st->multi && sbl_update_is_replacement(u)) {
        rc = sbl_err_set(err, SBL_E_FailedToParse,
                         "multi update is not supported for replacement-style update");
        goto done;
    }
    sbl_qexec_opts_t o = {&qf, NULL, 0, 0, st->coll, false, false};
    if (!st->has_coll)
        SBL_ERR(sbl_exec_default_collation(ctx, ns, &o.collation, err));
    if (u != NULL && o.collation != NULL)
        sbl_update_set_collation(u, o.collation);
    /* {_id: v}: the one document under v's key, no plan or matcher */
    bson_value_t idv;
    bool id_point = !st->has_hint && sbl_exec_filter_id_point(&qf, &idv) &&
                    (o.collation == NULL || idv.value_type != BSON_TYPE_UTF8);
    if (!id_point)
        SBL_ERR(sbl_qexec_new_hinted(ns, &o, st->has_hint ? &st->hint : NULL, &q, err));

    sbl_err_t e2 = {0};
    rc = sbl_coll_open(ctx->ss, ns, false, &c, NULL, &e2);
    if (rc == SBL_E_NamespaceNotFound) {
        rc = 0;
    } else if (rc != 0) {
        *err = e2;
        goto err;
    }
    /* time-series: several documents may share the _id, each read by the plan */
    bool dup = c != NULL && sbl_coll_dup_ids(c);
    if (dup && id_point) {
        id_point = false;
        SBL_ERR(sbl_qexec_new_hinted(ns, &o, st->has_hint ? &st->hint : NULL, &q, err));
    }

    size_t np = 1;
    const bson_value_t *points = id_point ? &idv : dup ? NULL : sbl_qexec_points(q, &np);
    const sbl_matcher_t *qm = id_point ? NULL : sbl_qexec_matcher(q);
    for (size_t k = 0; c != NULL; k++) {
        bson_t cand;
        bson_value_t id;
        bool have_cand = false, m = false, changed = false;
        if (points != NULL) {
            if (k >= np)
                break;
            id = points[k];
        } else {
            bool done = false;
            SBL_ERR(sbl_crud_read_candidate(ctx, q, &cand, &done, err));
            if (done)
                break;
            have_cand = true;
            if (!doc_id(&cand, &id)) {
                bson_destroy(&cand);
                continue;
            }
        }
        rc = sbl_crud_modify_one(ctx, c, &id, have_cand ? &cand : NULL, qm, &cu, &m, &changed,
                                 NULL, NULL, info, err);
        if (have_cand)
            bson_destroy(&cand);
        if (rc != 0)
            goto err;
        if (m) {
            matched++;
            tot->n++;
            if (changed)
                tot->nmodified++;
            if (!st->multi)
                break;
        }
    }
    if (matched == 0 && st->upsert) {
        bson_value_t id;
        rc = sbl_crud_upsert(ctx, ns, &qf, &cu, NULL, &id, info, err);
        if (rc == 0) {
            char kb[16];
            bson_t up;
            bson_append_document_begin(&tot->upserted, sbl_array_key(tot->nupserted++, kb), -1,
                                       &up);
            bson_append_int32(&up, "index", -1, (int32_t)index);
            sbl_append_value(&up, "_id", 3, &id);
            bson_append_document_end(&tot->upserted, &up);
            bson_value_destroy(&id);
            tot->n++;
        }
    }
err:
done:
    if (c != NULL)
        sbl_coll_release(c);
    sbl_qexec_free(q);
    sbl_update_free(u);
    bson_destroy(&qf);
    bson_destroy(&vars);
    return rc;
}

/* A retried statement's result from its oplog entry: an insert was an upsert. */
static void retried_update_result(const bson_t *entry, uint32_t index, update_totals_t *tot)
{
    bson_iter_t it, id;
    bson_t o;
    tot->n++;
    if (bson_iter_init_find(&it, entry, "op") && BSON_ITER_HOLDS_UTF8(&it) &&
        bson_iter_utf8(&it, NULL)[0] == 'i' && bson_iter_init_find(&it, entry, "o") &&
        BSON_ITER_HOLDS_DOCUMENT(&it) && sbl_iter_doc(&it, &o) &&
        bson_iter_init_find(&id, &o, "_id")) {
        char kb[16];
        bson_t up;
        bson_append_document_begin(&tot->upserted, sbl_array_key(tot->nupserted++, kb), -1, &up);
        bson_append_int32(&up, "index", -1, (int32_t)index);
        sbl_append_iter(&up, "_id", 3, &id);
        bson_append_document_end(&tot->upserted, &up);
        return;
    }
    tot->nmodified++;
}

int sbl_cmd_update(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[SBL_NS_MAX];
    bson_t stmts, errors = BSON_INITIALIZER;
    sbl_err_t stop = {0}; /* the interruption that ended the batch */
    uint32_t nstmts = 0, nerrors = 0;
    bson_iter_t it;
    update_totals_t tot = {0};

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    SBL_RET(sbl_validate_user_write_ns(ns, err));
    write_flags_t flags;
    SBL_RET(check_write_fields(ctx->cmd, "update", update_fields, &flags, err));
    bool ordered = flags.ordered;
    SBL_RET(get_batch(ctx->cmd, "update", "updates", &stmts, &nstmts, err));
    bool bypass = flags.bypass;
    bson_t let;
    if (get_let(ctx->cmd, "update", &let, err) != 0) {
        bson_destroy(&let);
        return err->code;
    }

    /* Statement syntax is checked up front: a malformed one fails the command. */
    /* bson_t asks for 128-byte alignment, which calloc does not give. */
    update_stmt_t *parsed = aligned_alloc(_Alignof(update_stmt_t), nstmts * sizeof(*parsed));
    if (parsed == NULL) {
        bson_destroy(&let);
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    }
    bson_iter_init(&it, &stmts);
    for (uint32_t i = 0; bson_iter_next(&it); i++) {
        bson_t s;
        int rc = sbl_iter_doc(&it, &s) ? parse_update_stmt(&s, &parsed[i], err)
                                   : sbl_err_set(err, SBL_E_InvalidBSON, "invalid statement");
        if (rc != 0) {
            free(parsed);
            bson_destroy(&let);
            return rc;
        }
    }

    bson_init(&tot.upserted);
    for (uint32_t i = 0; i < nstmts; i++) {
        sbl_err_t e = {0};
        bson_t info = BSON_INITIALIZER;
        int rc = sbl_op_check_interrupt(ctx, &e);
        if (rc == 0 && i > 0) /* flow control: each further statement takes a ticket */
            rc = sbl_cmd_flow_ticket(ctx, false, &e);
        if (rc == 0 && ctx->retry != NULL && parsed[i].multi)
            rc = sbl_err_set(&e, SBL_E_InvalidOptions,
                             "Cannot use (or request) retryable writes with multi=true");
        int32_t sid = ctx->retry != NULL ? sbl_retry_stmt_id(ctx->retry, i) : 0;
        const bson_t *done = NULL;
        if (rc == 0 && ctx->retry != NULL &&
            (rc = sbl_retry_executed(ctx->retry, sid, &done, &e)) == 0 && done != NULL) {
            retried_update_result(done, i, &tot);
            bson_destroy(&info);
            continue;
        }
        int64_t before = tot.nmodified + tot.nupserted;
        if (rc == 0 && ctx->retry != NULL)
            rc = sbl_retry_stmt_begin(ctx->retry, sid, false, &e);
        /* A concurrent upsert of the same document loses with DuplicateKey: retry it,
         * and it now finds the document and updates it. */
        for (int attempt = 0; rc == 0 || (rc == SBL_E_DuplicateKey && parsed[i].upsert &&
                                          attempt < UPSERT_RETRIES);
             attempt++) {
            sbl_err_clear(&e);
            bson_reinit(&info);
            if ((rc = run_update(ctx, ns, &parsed[i], i, &let, bypass, &tot, &info, &e)) !=
                SBL_E_DuplicateKey)
                break;
        }
        if (ctx->retry != NULL)
            sbl_retry_stmt_end(ctx->retry, rc == 0 && tot.nmodified + tot.nupserted > before);
        if (interrupted(rc))
            stop = e;
        else if (rc != 0)
            sbl_crud_add_write_error(&errors, &nerrors, i, &e, &info);
        bson_destroy(&info);
        if (rc != 0 && (ordered || stop.code != 0))
            break;
    }
    free(parsed);
    bson_destroy(&let);
    if (stop.code != 0) {
        bson_destroy(&tot.upserted);
        bson_destroy(&errors);
        *err = stop;
        return stop.code;
    }
    append_count(ctx->reply, "n", tot.n);
    append_count(ctx->reply, "nModified", tot.nmodified);
    ctx->writes = (sbl_write_counts_t){
        .known = true, .n = tot.n, .nmodified = tot.nmodified, .nupserted = tot.nupserted};
    if (tot.nupserted > 0)
        bson_append_array(ctx->reply, "upserted", -1, &tot.upserted);
    if (nerrors > 0)
        bson_append_array(ctx->reply, "writeErrors", -1, &errors);
    sbl_retry_append_retried(ctx->retry, ctx->reply);
    bson_destroy(&tot.upserted);
    bson_destroy(&errors);
    return 0;
}

/* ---- delete -------------------------------------------------------------------- */

static const char *const delete_fields[] = {"delete", "deletes", "ordered", "let", "stmtId",
                                            "stmtIds", "bypassDocumentValidation", "collectionUUID",
                                            NULL};

typedef struct delete_stmt {
    bson_t q;
    bool has_q, has_limit, has_hint, has_coll;
    int64_t limit;
    bson_value_t hint;
    const sbl_collation_t *coll; /* when has_coll; else the collection's default */
} delete_stmt_t;

static int parse_delete_stmt(const bson_t *s, delete_stmt_t *st, sbl_err_t *err)
{
    bson_iter_t it;
    memset(st, 0, sizeof(*st));
    bson_iter_init(&it, s);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        char field[64];
        sbl_join_dot(field, sizeof(field), "DeleteOpEntry", k);
        if (strcmp(k, "q") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, field, &it, "object");
            st->has_q = sbl_iter_doc(&it, &st->q);
        } else if (strcmp(k, "limit") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it))
                return sbl_type_error(err, field, &it, "[long, int, decimal, double]");
            st->limit = bson_iter_as_int64(&it);
            st->has_limit = true;
            if (st->limit != 0 && st->limit != 1)
                return sbl_err_set(err, SBL_E_FailedToParse,
                                   "The limit field in delete objects must be 0 or 1. Got %lld",
                                   (long long)st->limit);
        } else if (strcmp(k, "hint") == 0) {
            SBL_RET(sbl_exec_get_hint(&it, &st->hint, &st->has_hint, err));
        } else if (strcmp(k, "collation") == 0) {
            SBL_RET(sbl_collation_from_iter(&it, field, &st->coll, err));
            st->has_coll = true;
        } else if (strcmp(k, "sampleId") == 0) {
            continue;
        } else {
            return sbl_err_set(err, SBL_E_UnknownField,
                               "BSON field 'DeleteOpEntry.%s' is an unknown field.", k);
        }
    }
    if (!st->has_q)
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field 'DeleteOpEntry.q' is missing but a required field");
    if (!st->has_limit)
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field 'DeleteOpEntry.limit' is missing but a required field");
    return 0;
}

static int run_delete(sbl_opctx_t *ctx, const char *ns, const delete_stmt_t *st,
                      const bson_t *let, int64_t *np, sbl_err_t *err)
{
    sbl_qexec_t *q = NULL;
    sbl_coll_t *c = NULL;
    sbl_err_t e2 = {0};
    int rc;

    rc = sbl_coll_open(ctx->ss, ns, false, &c, NULL, &e2);
    if (rc == SBL_E_NamespaceNotFound)
        return 0;
    if (rc != 0) {
        *err = e2;
        return rc;
    }
    bson_t qf = BSON_INITIALIZER;
    sbl_qexec_opts_t o = {&qf, NULL, 0, 0, st->coll, false, false};
    if (!st->has_coll && (rc = sbl_exec_default_collation(ctx, ns, &o.collation, err)) != 0)
        goto err;
    bson_destroy(&qf);
    sbl_expr_bind_let(&st->q, let, &qf);
    /* {_id: v}: the one document under v's key, no plan or matcher */
    bson_value_t idv;
    /* time-series: several documents may share the _id, each read by the plan */
    bool dup = sbl_coll_dup_ids(c);
    bool id_point = !st->has_hint && !dup && sbl_exec_filter_id_point(&qf, &idv) &&
                    (o.collation == NULL || idv.value_type != BSON_TYPE_UTF8);
    if (!id_point && (rc = sbl_qexec_new_hinted(ns, &o, st->has_hint ? &st->hint : NULL, &q,
                                                err)) != 0) {
        goto err;
    }
    size_t npoints = 1;
    const bson_value_t *points = id_point ? &idv : dup ? NULL : sbl_qexec_points(q, &npoints);
    const sbl_matcher_t *qm = id_point ? NULL : sbl_qexec_matcher(q);
    for (size_t k = 0;; k++) {
        bson_t cand;
        bson_value_t id;
        bool have_cand = false, m = false, changed = false;
        if (points != NULL) {
            if (k >= npoints)
                break;
            id = points[k];
        } else {
            bool done = false;
            SBL_ERR(sbl_crud_read_candidate(ctx, q, &cand, &done, err));
            if (done)
                break;
            have_cand = true;
            if (!doc_id(&cand, &id)) {
                bson_destroy(&cand);
                continue;
            }
        }
        rc = sbl_crud_modify_one(ctx, c, &id, have_cand ? &cand : NULL, qm, NULL, &m, &changed,
                                 NULL, NULL, NULL, err);
        if (have_cand)
            bson_destroy(&cand);
        if (rc != 0)
            goto err;
        if (m) {
            (*np)++;
            if (st->limit == 1)
                break;
        }
    }
err:
    bson_destroy(&qf); /* idv views it */
    sbl_qexec_free(q);
    sbl_coll_release(c);
    return rc;
}

int sbl_cmd_delete(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[SBL_NS_MAX];
    bson_t stmts, errors = BSON_INITIALIZER;
    sbl_err_t stop = {0}; /* the interruption that ended the batch */
    uint32_t nstmts = 0, nerrors = 0;
    bson_iter_t it;
    int64_t n = 0;

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    SBL_RET(sbl_validate_user_write_ns(ns, err));
    write_flags_t flags;
    SBL_RET(check_write_fields(ctx->cmd, "delete", delete_fields, &flags, err));
    bool ordered = flags.ordered;
    SBL_RET(get_batch(ctx->cmd, "delete", "deletes", &stmts, &nstmts, err));
    bson_t let;
    if (get_let(ctx->cmd, "delete", &let, err) != 0) {
        bson_destroy(&let);
        return err->code;
    }

    delete_stmt_t *parsed = aligned_alloc(_Alignof(delete_stmt_t), nstmts * sizeof(*parsed));
    if (parsed == NULL) {
        bson_destroy(&let);
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    }
    bson_iter_init(&it, &stmts);
    for (uint32_t i = 0; bson_iter_next(&it); i++) {
        bson_t s;
        int rc = sbl_iter_doc(&it, &s) ? parse_delete_stmt(&s, &parsed[i], err)
                                   : sbl_err_set(err, SBL_E_InvalidBSON, "invalid statement");
        if (rc != 0) {
            free(parsed);
            bson_destroy(&let);
            return rc;
        }
    }
    for (uint32_t i = 0; i < nstmts; i++) {
        sbl_err_t e = {0};
        int rc = sbl_op_check_interrupt(ctx, &e);
        if (rc == 0 && i > 0) /* flow control: each further statement takes a ticket */
            rc = sbl_cmd_flow_ticket(ctx, false, &e);
        const bson_t *done = NULL;
        int32_t sid = ctx->retry != NULL ? sbl_retry_stmt_id(ctx->retry, i) : 0;
        if (rc == 0 && ctx->retry != NULL && parsed[i].limit != 1)
            rc = sbl_err_set(&e, SBL_E_InvalidOptions,
                             "Cannot use (or request) retryable writes with limit=0");
        if (rc == 0 && ctx->retry != NULL &&
            (rc = sbl_retry_executed(ctx->retry, sid, &done, &e)) == 0 && done != NULL) {
            n++;
            continue;
        }
        int64_t before = n;
        if (rc == 0 && ctx->retry != NULL)
            rc = sbl_retry_stmt_begin(ctx->retry, sid, false, &e);
        if (rc == 0)
            rc = run_delete(ctx, ns, &parsed[i], &let, &n, &e);
        if (ctx->retry != NULL)
            sbl_retry_stmt_end(ctx->retry, rc == 0 && n > before);
        if (interrupted(rc))
            stop = e;
        else if (rc != 0)
            sbl_crud_add_write_error(&errors, &nerrors, i, &e, NULL);
        if (rc != 0 && (ordered || stop.code != 0))
            break;
    }
    free(parsed);
    bson_destroy(&let);
    if (stop.code != 0) {
        bson_destroy(&errors);
        *err = stop;
        return stop.code;
    }
    append_count(ctx->reply, "n", n);
    ctx->writes = (sbl_write_counts_t){.known = true, .n = n};
    if (nerrors > 0)
        bson_append_array(ctx->reply, "writeErrors", -1, &errors);
    sbl_retry_append_retried(ctx->retry, ctx->reply);
    bson_destroy(&errors);
    return 0;
}

/* ---- replies -------------------------------------------------------------- */

void sbl_crud_add_write_error(bson_t *arr, uint32_t *countp, int64_t index, const sbl_err_t *e,
                              const bson_t *info)
{
    char key[16];
    bson_t we;
    bson_append_document_begin(arr, sbl_array_key((*countp)++, key), -1, &we);
    bson_append_int32(&we, "index", -1, (int32_t)index);
    bson_append_int32(&we, "code", -1, e->code);
    bson_append_utf8(&we, "errmsg", -1, e->msg, -1);
    if (info != NULL && !bson_empty(info))
        bson_concat(&we, info);
    bson_append_document_end(arr, &we);
}
