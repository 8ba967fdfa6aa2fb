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
 * up when the member stops or (linearizable) steps down.
 */
#include "repl/repl_int.h"

#include <time.h>

#include "common/clock.h"

#define rs sbl_rs
#define APPLIED_POLL_MS 5

int sbl_repl_wait_applied(uint64_t ts, int64_t deadline_us, sbl_err_t *err)
{
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_IllegalOperation,
                           "Cannot specify afterClusterTime readConcern without replication enabled");
    while (sbl_oplog_committed().ts < ts) { /* its data visible, not only written */
        if (atomic_load(&rs.state) == SBL_RS_PRIMARY) {
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
