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
    bson_iter_t it;
    if (ctx->req == NULL || !sbl_repl_enabled() || strcmp(ctx->db, "local") == 0)
        return 0;
    if (ctx->mtxn != NULL && !(first && sbl_doc_find_top(ctx->cmd, "startTransaction", &it)))
        return 0;
    return sbl_repl_flow_acquire(ticket_check, ctx, !on_loop, err);
}
