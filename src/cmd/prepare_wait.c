/*
 * prepare_wait.c: what a command does when it meets a prepared
 * transaction's write (two-phase commit's participant side, txn.c): it waits
 * for the outcome, as mongod's operations wait out prepare conflicts.
 *
 *  - A read outside a transaction (find, count, distinct, aggregate) gives
 *    up its snapshot: its handler fails with WriteConflict, waits, and runs
 *    again from a new snapshot.
 *  - A read inside a multi-document transaction cannot: its snapshot is the
 *    transaction's.  Nor can a getMore: the batch it has read is gone once
 *    it fails.  Both wait in place (storage's scope): the cursor call that
 *    met the prepared write waits and is made again, and sees the outcome.
 *  - update, delete and findAndModify read their candidates in place too;
 *    outside a transaction each document's change (sbl_crud_modify_one)
 *    waits in its retry loop (sbl_op_backoff), out of its transaction.
 *  - Inside a multi-document transaction the change's read of the document
 *    waits in place as well (sbl_crud_read_current), and so do an insert's
 *    _id and unique keys (storage's sbl_prepare_wait_key, in the command's
 *    scope), as mongod's write waits out the prepare conflict.  The write
 *    then changes what the transaction's snapshot sees: the old document
 *    after an abort; after a commit the committed one, which a snapshot
 *    without a read timestamp taken after the prepare sees (WiredTiger took
 *    the prepared transaction out of the running ones at its prepare; such a
 *    snapshot is mongod's for readConcern local too).  A change the snapshot
 *    does not see gets WriteConflict from the write, which the transaction
 *    answers with TransientTransactionError (txn.c).
 *
 * What must stay true: a waiter holds nothing the prepared transaction's
 * commit or abort takes.  A read holds its own session's checkout, a
 * cursor's in_use and its snapshot, none of which a commit needs; a
 * transaction's write holds that and its own uncommitted changes, which the
 * prepared transaction does not touch (it would have met them first), and
 * no oplog timestamp (the applyOps entry takes one at commit) nor capped
 * lock (no capped writes in transactions); other writes (which may hold a
 * reserved oplog timestamp or capped locks) never wait in place; a network
 * loop thread never waits (the dispatcher runs reads and writes on workers
 * while a transaction is prepared).
 */
#include "cmd/crud_int.h"

/* storage's question before each wait: go on until when, or the error that
 * ends it (killOp, maxTimeMS, killSessions, the transaction's lifetime, a
 * rollback; a step-down, write_wait_check). */
static int wait_check(void *arg, int64_t *deadline_us, sbl_err_t *err)
{
    const sbl_opctx_t *ctx = arg;
    int64_t expiry = sbl_cmd_mtxn_expiry_us(ctx);

    SBL_RET(sbl_op_check_interrupt(ctx, err));
    SBL_RET(sbl_op_check_rollback(ctx, err));
    if (sbl_cmd_mtxn_kill_asked(ctx))
        return sbl_err_set(err, SBL_E_Interrupted, "operation was interrupted");
    if (expiry != 0 && sbl_now_us() >= expiry)
        return sbl_err_set(err, SBL_E_TransactionExceededLifetimeLimitSeconds,
                           "operation was interrupted because the transaction exceeded the "
                           "configured 'transactionLifetimeLimitSeconds'");
    *deadline_us = ctx->deadline_us;
    if (expiry != 0 && (*deadline_us == 0 || expiry < *deadline_us))
        *deadline_us = expiry;
    return 0;
}

/* A write's, or any operation's in a transaction: a step-down ends it
 * (11602), as mongod kills what holds its global lock in IX mode, which its
 * transactions take for their reads too; other reads go on waiting. */
static int write_wait_check(void *arg, int64_t *deadline_us, sbl_err_t *err)
{
    SBL_RET(sbl_op_check_step_down(arg, err));
    return wait_check(arg, deadline_us, err);
}

void sbl_cmd_prepare_wait_begin(sbl_cmd_prepare_wait_t *w, sbl_opctx_t *ctx,
                                const sbl_cmd_def_t *def)
{
    bool read_only = (def->flags & (SBL_CMD_READ | SBL_CMD_WRITE)) == SBL_CMD_READ;

    w->ctx = ctx;
    w->def = def;
    /* a transaction's write too: its storage writes (an insert's) wait here */
    w->in_place = ctx->mtxn != NULL ? (def->flags & (SBL_CMD_READ | SBL_CMD_WRITE)) != 0
                                    : read_only && def->fn == sbl_cursor_get_more;
    w->scope.check = ctx->mtxn != NULL || (def->flags & SBL_CMD_WRITE) ? write_wait_check
                                                                        : wait_check;
    w->scope.arg = ctx;
    sbl_prepare_conflict_take(NULL); /* only this command's conflicts count */
    if (w->in_place)
        sbl_prepare_scope_enter(&w->scope);
}

bool sbl_cmd_prepare_wait_again(sbl_cmd_prepare_wait_t *w, int *rcp, sbl_err_t *err,
                                bson_t *reply)
{
    sbl_opctx_t *ctx = w->ctx;
    uint64_t gen;

    if (w->in_place && w->scope.rc != 0) {
        /* a wait in place gave up: its reason is the answer (a write's too,
         * which may have reported the WriteConflict it left as a writeError) */
        *rcp = w->scope.rc;
        *err = w->scope.err;
        return false;
    }
    if (*rcp != SBL_E_WriteConflict || w->in_place)
        return false;
    if (!sbl_prepare_conflict_take(&gen) || ctx->mtxn != NULL ||
        (w->def->flags & (SBL_CMD_READ | SBL_CMD_WRITE)) != SBL_CMD_READ)
        return false;
    if (!sbl_prepare_wait(gen, ctx->deadline_us)) {
        *rcp = sbl_err_set(err, SBL_E_InterruptedAtShutdown, "interrupted at shutdown");
        return false;
    }
    sbl_cmd_snapshot_end(ctx, *rcp);
    sbl_err_clear(err);
    bson_reinit(reply);
    if ((*rcp = sbl_op_check_interrupt(ctx, err)) != 0 ||
        (*rcp = sbl_op_check_rollback(ctx, err)) != 0 ||
        (*rcp = sbl_cmd_snapshot_begin(ctx, err)) != 0)
        return false;
    return true;
}

void sbl_cmd_prepare_wait_end(sbl_cmd_prepare_wait_t *w)
{
    if (w->in_place)
        sbl_prepare_scope_leave(&w->scope);
}

/* A write's read that waits in place in a scope of its own; _leave gives
 * the read's outcome, the reason a wait gave up (maxTimeMS, killOp, ...)
 * instead of the WriteConflict it left. */
static void write_scope_enter(sbl_prepare_scope_t *sc, sbl_opctx_t *ctx)
{
    sc->check = write_wait_check;
    sc->arg = ctx;
    sbl_prepare_scope_enter(sc);
}

static int write_scope_leave(sbl_prepare_scope_t *sc, int rc, sbl_err_t *err)
{
    sbl_prepare_scope_leave(sc);
    if (rc == SBL_E_WriteConflict && sc->rc != 0) {
        *err = sc->err;
        rc = sc->rc;
    }
    return rc;
}

int sbl_crud_read_candidate(sbl_opctx_t *ctx, sbl_qexec_t *q, bson_t *doc, bool *donep,
                            sbl_err_t *err)
{
    sbl_prepare_scope_t sc;
    write_scope_enter(&sc, ctx);
    int rc = sbl_qexec_next(q, ctx, doc, NULL, donep, err);
    return write_scope_leave(&sc, rc, err);
}

int sbl_crud_read_current(sbl_opctx_t *ctx, sbl_coll_t *c, const bson_value_t *id,
                          const bson_t *cand, bson_t *doc, bool *foundp, sbl_err_t *err)
{
    sbl_prepare_scope_t sc;
    bool in_place = ctx->mtxn != NULL;
    int rc;

    if (in_place)
        write_scope_enter(&sc, ctx);
    if (cand != NULL && sbl_coll_dup_ids(c))
        rc = sbl_coll_get_same(ctx->ss, c, cand, doc, foundp, err);
    else
        rc = sbl_coll_get(ctx->ss, c, id, doc, foundp, err);
    return in_place ? write_scope_leave(&sc, rc, err) : rc;
}
