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
 *  - update, delete and findAndModify outside a transaction read their
 *    candidates in place too; each document's change (sbl_crud_modify_one)
 *    waits in its retry loop (sbl_op_backoff), out of its transaction.
 *
 * What must stay true: a waiter holds nothing the prepared transaction's
 * commit or abort takes.  A read holds its own session's checkout, a
 * cursor's in_use and its snapshot, none of which a commit needs; writes
 * (which may hold a reserved oplog timestamp or capped locks) never wait in
 * place; a network loop thread never waits (the dispatcher runs reads and
 * writes on workers while a transaction is prepared).
 */
#include "cmd/crud_int.h"

/* storage's question before each wait: go on until when, or the error that
 * ends it (killOp, maxTimeMS, killSessions, the transaction's lifetime). */
static int wait_check(void *arg, int64_t *deadline_us, sbl_err_t *err)
{
    const sbl_opctx_t *ctx = arg;
    int64_t expiry = sbl_cmd_mtxn_expiry_us(ctx);

    SBL_RET(sbl_op_check_interrupt(ctx, err));
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

void sbl_cmd_prepare_wait_begin(sbl_cmd_prepare_wait_t *w, sbl_opctx_t *ctx,
                                const sbl_cmd_def_t *def)
{
    bool read_only = (def->flags & (SBL_CMD_READ | SBL_CMD_WRITE)) == SBL_CMD_READ;

    w->ctx = ctx;
    w->def = def;
    w->in_place = read_only && (ctx->mtxn != NULL || def->fn == sbl_cursor_get_more);
    w->scope.check = wait_check;
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

    if (*rcp != SBL_E_WriteConflict)
        return false;
    if (w->in_place) { /* a wait in place gave up: its reason is the answer */
        if (w->scope.rc != 0) {
            *rcp = w->scope.rc;
            *err = w->scope.err;
        }
        return false;
    }
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
        (*rcp = sbl_cmd_snapshot_begin(ctx, err)) != 0)
        return false;
    return true;
}

void sbl_cmd_prepare_wait_end(sbl_cmd_prepare_wait_t *w)
{
    if (w->in_place)
        sbl_prepare_scope_leave(&w->scope);
}

int sbl_crud_read_candidate(sbl_opctx_t *ctx, sbl_qexec_t *q, bson_t *doc, bool *donep,
                            sbl_err_t *err)
{
    if (ctx->mtxn != NULL) /* a transaction's write meets WriteConflict at once */
        return sbl_qexec_next(q, ctx, doc, NULL, donep, err);
    sbl_prepare_scope_t sc = {.check = wait_check, .arg = ctx};
    sbl_prepare_scope_enter(&sc);
    int rc = sbl_qexec_next(q, ctx, doc, NULL, donep, err);
    sbl_prepare_scope_leave(&sc);
    if (rc == SBL_E_WriteConflict && sc.rc != 0) {
        *err = sc.err;
        rc = sc.rc;
    }
    return rc;
}
