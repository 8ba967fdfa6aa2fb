/*
 * flow_gate.c: the command layer's side of flow control (src/repl/repl_flow.c):
 * a client's write on a replica set member takes a flow control ticket before
 * it starts, as mongod's writes take one before their global IX lock.
 *
 * Which writes take one (mongod's acquisitions, per command and statement):
 * every write command once (the dispatcher), an update's and a delete's every
 * further statement, an insert's every further 64 documents (mongod's insert
 * batches).  None for writes to "local", internal writes (the applier on a
 * secondary, the server's own jobs: ctx->req NULL), a transaction's statements
 * after its first (mongod's transaction keeps its lock) and the commands that
 * end or prepare a transaction (they release what others wait on; mongod
 * exempts prepared transactions' commits too).
 *
 * What must stay true: a command on a network loop never waits here (the
 * dispatcher sends writes to workers while tickets are limited; one that
 * started on a loop before takes its ticket without waiting).
 */
#include "cmd/cmd_int.h"
#include "doc/doc.h"
#include "repl/repl.h"

#include <stdio.h>
#include <string.h>

static _Thread_local bool on_loop;

void sbl_cmd_flow_on_loop(bool on)
{
    on_loop = on;
}

/* The wait's check: killOp, maxTimeMS, a rollback, a step-down. */
static int ticket_check(void *arg, sbl_err_t *err)
{
    const sbl_opctx_t *ctx = arg;
    SBL_RET(sbl_op_check_interrupt(ctx, err));
    return sbl_op_check_step_down(ctx, err);
}

int sbl_cmd_flow_ticket(sbl_opctx_t *ctx, bool first, sbl_err_t *err)
{
    if (ctx->req == NULL || !sbl_repl_enabled() || strcmp(ctx->db, "local") == 0)
        return 0;
    if (ctx->mtxn != NULL && !(first && ctx->start_txn != NULL))
        return 0;
    return sbl_repl_flow_acquire(ticket_check, ctx, !on_loop, err);
}

const char *sbl_cmd_write_db(const sbl_opctx_t *ctx)
{
    static __thread char db[128];
    bson_iter_t it;
    if (ctx->name[0] == 'r' && strcmp(ctx->name, "renameCollection") == 0 &&
        bson_iter_init_find(&it, ctx->cmd, "renameCollection") && BSON_ITER_HOLDS_UTF8(&it)) {
        const char *ns = bson_iter_utf8(&it, NULL), *dot = strchr(ns, '.');
        size_t n = dot != NULL ? (size_t)(dot - ns) : strlen(ns);
        if (n < sizeof(db)) {
            snprintf(db, sizeof(db), "%.*s", (int)n, ns);
            return db;
        }
    }
    return ctx->db;
}

bool sbl_cmd_flow_gated(const sbl_cmd_def_t *def, const sbl_opctx_t *ctx)
{
    sbl_cmd_fn fn = def->fn;
    return (def->flags & SBL_CMD_WRITE) && fn != sbl_cmd_commit_transaction &&
           fn != sbl_cmd_abort_transaction && fn != sbl_cmd_prepare_transaction &&
           fn != sbl_cmd_coordinate_commit && strcmp(sbl_cmd_write_db(ctx), "local") != 0;
}
