/*
 * failpoint.h: private to src/cmd.  MongoDB's test-only fail points
 * (configureFailPoint; only the failCommand fail point exists in Sable).
 *
 * What must stay true: while no fail point is set, the dispatcher pays one
 * relaxed atomic load per command (sbl_failpoint_armed) and nothing else.
 */
#ifndef SBL_CMD_FAILPOINT_H
#define SBL_CMD_FAILPOINT_H

#include <stdatomic.h>
#include <stdbool.h>

#include "cmd/cmd_int.h"

/* Non-zero while the failCommand fail point is on (failpoint.c). */
extern atomic_int sbl_failpoint_on;

static inline bool sbl_failpoint_armed(void)
{
    return atomic_load_explicit(&sbl_failpoint_on, memory_order_relaxed) != 0;
}

/*
 * The dispatcher's hook, called on the connection's loop thread after the
 * command was looked up and authorized, before it runs.  Returns false when
 * the command runs as usual (a writeConcernError the fail point asks for is
 * then already in ctx->reply).  Returns true when the fail point took the
 * command over; the dispatcher then finishes it as it stands:
 *   - *rcp != 0: reply with that error (errorCode; errorLabels in ctx->reply);
 *   - *rcp == 0 and ctx->deferred: the request is no longer the dispatcher's
 *     (closeConnection closed the connection without a reply, or
 *     blockConnection re-dispatches it from a timer after blockTimeMS).
 */
bool sbl_failpoint_command(sbl_opctx_t *ctx, int *rcp, sbl_err_t *err);

/* onPrimaryTransactionalWrite, checked as a retryable write's statement
 * starts: true when it fires, with whether to close the connection after
 * the command and the error code to fail the statement with (0: none). */
bool sbl_failpoint_txn_write(bool *closep, int *codep);

/* Whether the server was started with --setParameter enableTestCommands=1. */
bool sbl_test_commands_enabled(void);

/* configureFailPoint (admin; 59 CommandNotFound without enableTestCommands). */
int sbl_cmd_configure_fail_point(sbl_opctx_t *ctx, sbl_err_t *err);

#endif
