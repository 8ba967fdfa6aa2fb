/*
 * repl_read.c: what read concerns ask of replication.  afterClusterTime
 * waits until this member has applied that time (a causally consistent
 * read on a secondary sees the client's earlier writes); linearizable
 * reads, after they ran on the primary, write a no-op and wait for a
 * majority to have it, so the primary that answered was still the primary
 * when it answered (mongod's way: a read that returns has seen every write
 * acknowledged with w:"majority" before it started).
 *
 * What must stay true: both wait on the calling thread (a worker: the
 * dispatcher sends such reads there), never past their deadline, and give
 * up when the member stops or (linearizable) steps down.  The
 * afterClusterTime wait is a client operation's like any other (mongod's
 * waits on the operation context): killOp, a step-down and a rollback end
 * it too, so a wait for a time a rollback removed does not last until the
 * new primary writes past it.
 */
#include "repl/repl_int.h"

#include <time.h>

#include "common/clock.h"
#include "op/op.h"

#define rs sbl_rs
#define APPLIED_POLL_MS 5

/* What ends ctx's wait besides its deadline: killOp (11601); a step-down
 * (11602: a primary's wait for its own no-ops, which it can write no more)
 * or a rollback (11602) after it began. */
static int applied_wait_check(const sbl_opctx_t *ctx, sbl_err_t *err)
{
    if (ctx == NULL)
        return 0;
    if (sbl_op_is_killed(ctx->op))
        return sbl_err_set(err, SBL_E_Interrupted, "operation was interrupted");
    SBL_RET(sbl_op_check_step_down(ctx, err));
    return sbl_op_check_rollback(ctx, err);
}

/* Whether a primary's next no-op can reach ts: a time its clock was shown
 * (gossip), or one the wall clock has reached (the no-op's seconds, or a
 * few of them within this second, pass it).  A time ahead of both is waited
 * for without writing a no-op every few milliseconds: the wall clock gets
 * there first, or the wait's limit ends it. */
static bool noop_reaches(uint64_t ts)
{
    return ts <= sbl_repl_clock_now() || (int64_t)(ts >> 32) <= sbl_now_ms() / 1000;
}

int sbl_repl_wait_applied(uint64_t ts, const sbl_opctx_t *ctx, int64_t deadline_us,
                          sbl_err_t *err)
{
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_IllegalOperation,
                           "Cannot specify afterClusterTime readConcern without replication enabled");
    while (sbl_oplog_committed().ts < ts) { /* its data visible, not only written */
        SBL_RET(applied_wait_check(ctx, err));
        if (atomic_load(&rs.state) == SBL_RS_PRIMARY && noop_reaches(ts)) {
            /* mongod's primary moves its clock forward with a no-op */
            sbl_err_t e;
            sbl_err_clear(&e);
            if (sbl_oplog_noop(sbl_session_get(), "advancing clusterTime", &e) != 0 ||
                sbl_oplog_committed().ts >= ts)
                continue;
        }
        if (rs.stopping)
            return sbl_err_set(err, SBL_E_InterruptedAtShutdown, "interrupted at shutdown");
        if (deadline_us > 0 && sbl_now_us() >= deadline_us)
            return sbl_err_set(err, SBL_E_MaxTimeMSExpired, "operation exceeded time limit");
        struct timespec t = {0, APPLIED_POLL_MS * 1000000L};
        nanosleep(&t, NULL);
    }
    return 0;
}

typedef struct lin_wait {
    int code;
    const char *msg;
} lin_wait_t;

static void lin_done(void *arg, int code, const char *msg)
{
    lin_wait_t *w = arg;
    w->code = code;
    w->msg = msg;
}

int sbl_repl_linearizable_check(sbl_err_t *err)
{
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NotAReplicaSet,
                           "node needs to be a replica set member to use read concern");
    if (atomic_load(&rs.state) != SBL_RS_PRIMARY)
        return sbl_err_set(err, SBL_E_NotWritablePrimary,
                           "cannot satisfy linearizable read concern on non-primary node");
    return 0;
}

int sbl_repl_linearizable_wait(int64_t deadline_us, sbl_err_t *err)
{
    SBL_RET(sbl_repl_linearizable_check(err));
    SBL_RET(sbl_oplog_noop(sbl_session_get(), "linearizable read", err));
    uint64_t mine = sbl_repl_take_thread_op_ts(), ts = sbl_oplog_committed().ts; /* the no-op's */
    int64_t wtimeout_ms = 0;
    if (deadline_us > 0) {
        wtimeout_ms = (deadline_us - sbl_now_us()) / 1000;
        if (wtimeout_ms <= 0)
            wtimeout_ms = 1;
    }
    lin_wait_t w = {0, NULL};
    sbl_repl_await(mine > ts ? mine : ts, 0, true, wtimeout_ms, lin_done, &w);
    if (w.code == SBL_E_WriteConcernFailed)
        return sbl_err_set(err, SBL_E_MaxTimeMSExpired, "operation exceeded time limit");
    if (w.code != 0)
        return sbl_err_set(err, w.code, "%s", w.msg);
    return 0;
}
