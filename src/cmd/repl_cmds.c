/*
 * repl_cmds.c: the replica set commands (replSetInitiate, replSetGetStatus,
 * replSetGetConfig, replSetSyncFrom, replSetMaintenance ...) and the catalog
 * changes the command layer reports to the oplog.  The replication logic is
 * in src/repl; these parse arguments and hand over.
 */
#include "cmd/cmd_int.h"
#include "repl/repl.h"

#include <string.h>

int sbl_cmd_repl_set_initiate(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t config;
    const bson_t *cfg = NULL;

    /* {replSetInitiate: <config>}; a missing, empty or non-document value
     * asks for the default one-member config, as mongod does. */
    if (bson_iter_init_find(&it, ctx->cmd, "replSetInitiate") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        sbl_iter_doc(&it, &config) && !bson_empty(&config))
        cfg = &config;
    SBL_RET(sbl_repl_initiate(ctx->ss, cfg, err));
    ctx->wrote = true;
    return 0;
}

int sbl_cmd_repl_set_reconfig(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t config;

    if (!bson_iter_init_find(&it, ctx->cmd, "replSetReconfig") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !sbl_iter_doc(&it, &config))
        return sbl_err_set(err, SBL_E_TypeMismatch, "replSetReconfig takes a config document");
    bool force = bson_iter_init_find(&it, ctx->cmd, "force") && bson_iter_as_bool(&it);
    SBL_RET(sbl_repl_reconfig(ctx->ss, &config, force, sbl_cmd_global_write_concern_set(), err));
    ctx->wrote = true;
    return 0;
}

int sbl_cmd_repl_set_get_status(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_repl_get_status(ctx->reply, err);
}

int sbl_cmd_repl_set_get_config(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_repl_get_config(ctx->reply, err);
}

int sbl_cmd_repl_set_heartbeat(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_repl_heartbeat(ctx->cmd, ctx->reply, err);
}

int sbl_cmd_repl_set_request_votes(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_repl_request_votes(ctx->cmd, ctx->reply, err);
}

int sbl_cmd_repl_set_update_position(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_repl_update_position(ctx->cmd, ctx->reply, err);
}

static int64_t arg_num(const bson_t *cmd, const char *k, int64_t def)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, cmd, k) && BSON_ITER_HOLDS_NUMBER(&it)
               ? bson_iter_as_int64(&it) : def;
}

int sbl_cmd_repl_set_step_down(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    int64_t secs = arg_num(ctx->cmd, "replSetStepDown", 60);
    int64_t catchup = arg_num(ctx->cmd, "secondaryCatchUpPeriodSecs", 10);
    bool force = bson_iter_init_find(&it, ctx->cmd, "force") && bson_iter_as_bool(&it);
    if (secs <= 0)
        secs = 60;
    if (catchup > secs)
        return sbl_err_set(err, SBL_E_BadValue, "stepdown period must be longer than "
                           "secondaryCatchUpPeriodSecs");
    return sbl_repl_step_down(secs, catchup, force, err);
}

int sbl_cmd_repl_set_step_up(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it; /* skipDryRun: any true value, as mongod's trueValue() */
    bool skip = bson_iter_init_find(&it, ctx->cmd, "skipDryRun") && bson_iter_as_bool(&it);
    return sbl_repl_step_up(skip, err);
}

int sbl_cmd_repl_set_abort_primary_catch_up(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_repl_abort_catchup(err);
}

int sbl_cmd_repl_set_freeze(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_repl_freeze(arg_num(ctx->cmd, "replSetFreeze", 0), ctx->reply, err);
}

int sbl_cmd_repl_set_sync_from(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, ctx->cmd, "replSetSyncFrom") || !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "Expected a string for replSetSyncFrom "
                           "(hostname:port)");
    return sbl_repl_sync_from(bson_iter_utf8(&it, NULL), ctx->reply, err);
}

int sbl_cmd_repl_set_maintenance(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, ctx->cmd, "replSetMaintenance"))
        return sbl_err_set(err, SBL_E_BadValue, "replSetMaintenance takes true or false");
    return sbl_repl_maintenance(bson_iter_as_bool(&it), err);
}

void sbl_cmd_on_coll_created(sbl_opctx_t *ctx, const char *ns)
{
    sbl_cmd_audit_coll_created(ctx, ns);
    /* Inside a transaction the collection stays the transaction's until it
     * commits, which logs the entry (txn.c). */
    if (ctx->mtxn != NULL)
        sbl_cmd_mtxn_note_created(ctx, ns);
    else if (ctx->ss != NULL)
        sbl_repl_log_create(ctx->ss, ns);
}
