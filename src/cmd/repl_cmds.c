/*
 * repl_cmds.c: the replica set commands (replSetInitiate, replSetGetStatus,
 * replSetGetConfig) and the catalog changes the command layer reports to
 * the oplog.  The replication logic is in src/repl; these parse arguments
 * and hand over.
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

int sbl_cmd_repl_set_get_status(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_repl_get_status(ctx->reply, err);
}

int sbl_cmd_repl_set_get_config(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_repl_get_config(ctx->reply, err);
}

void sbl_cmd_on_coll_created(sbl_opctx_t *ctx, const char *ns)
{
    sbl_cmd_audit_coll_created(ctx, ns);
    if (ctx->ss != NULL)
        sbl_repl_log_create(ctx->ss, ns);
}
