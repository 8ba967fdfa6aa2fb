/*
 * txn_labels.c: the error labels a failed command of a transaction or a
 * retryable write carries (TransientTransactionError,
 * UnknownTransactionCommitResult, RetryableWriteError), by mongod's rules:
 * drivers retry a transaction, its commit or a write on them alone.
 */
#include "cmd/cmd_int.h"

#include <string.h>

/* The label a transaction's command failing with code gets (NULL: none). */
static const char *transaction_label(int code, bool commit, bool end, bool not_primary)
{
    const char *label = NULL;
    if (code == SBL_E_WriteConflict || code == 24 /* LockTimeout */ ||
        code == 246 /* SnapshotUnavailable */ || code == 267 /* PreparedTransactionInProgress */ ||
        (code == SBL_E_NoSuchTransaction) || (!end && not_primary))
        label = "TransientTransactionError";
    else if (commit && (not_primary || code == SBL_E_MaxTimeMSExpired ||
                        code == SBL_E_WriteConcernFailed))
        label = "UnknownTransactionCommitResult";
    return label;
}

void sbl_cmd_txn_error_labels(const sbl_opctx_t *ctx, int code, bson_t *out)
{
    bson_iter_t it;
    if (ctx->name == NULL)
        return;
    bool not_primary = code == SBL_E_NotWritablePrimary || code == SBL_E_NotPrimaryNoSecondaryOk ||
                       code == SBL_E_NotPrimaryOrSecondary || code == SBL_E_PrimarySteppedDown ||
                       code == SBL_E_InterruptedDueToReplStateChange ||
                       code == SBL_E_ShutdownInProgress || code == SBL_E_InterruptedAtShutdown ||
                       code == 91 || code == 6 || code == 7 || code == 89 || code == 9001;
    const char *label = NULL;
    if (!bson_iter_init_find(&it, ctx->cmd, "autocommit")) {
        /* A retryable write (txnNumber outside a transaction) that failed
         * on a state change: mongod labels it, and 4.4+ drivers retry only
         * labelled errors (a write cut off by a step-down, repl_oplog.c). */
        if (not_primary && bson_iter_init_find(&it, ctx->cmd, "txnNumber"))
            label = "RetryableWriteError";
    } else {
        bool commit = strcmp(ctx->name, "commitTransaction") == 0;
        bool end = commit || strcmp(ctx->name, "abortTransaction") == 0;
        label = transaction_label(code, commit, end, not_primary);
    }
    if (label == NULL)
        return;
    bson_t arr;
    BSON_APPEND_ARRAY_BEGIN(out, "errorLabels", &arr);
    BSON_APPEND_UTF8(&arr, "0", label);
    bson_append_array_end(out, &arr);
}
