/*
 * repl_failpoint.c: replication's test fail points (configureFailPoint,
 * only with enableTestCommands=1; src/cmd/failpoint.c routes them here).
 *
 *  - hangBeforeApplyCommit (Sable's): a secondary applying an entry waits
 *    after writing it and before its transaction commits;
 *  - rsSyncApplyStop (mongod's name): the applier waits before applying
 *    the next entry;
 *  - hangBeforePrimaryOplogAppend (Sable's): a primary's write waits after
 *    its primary check and before its oplog entry takes a ts and a term;
 *  - hangBeforePrimaryOplogCommit (Sable's): a primary's write waits after
 *    its entry took its ts (and let go of the oplog's lock), before its
 *    transaction commits: later writes commit meanwhile, and readers of the
 *    oplog must not see them before it (repl_visible.c); a step-down ends
 *    the wait (the write then fails at its commit), as mongod's interrupts
 *    the writes in progress;
 *  - failBeforePrimaryOplogCommit (Sable's): at the same point (after
 *    hangBeforePrimaryOplogCommit let it go), the write fails and its
 *    transaction rolls back, leaving a ts that was reserved and never used.
 *
 * data.ns limits the primary's fail points to writes to that namespace.
 *
 * What must stay true: every wait is bounded (data.maxMS, default 60 s, each
 * time), ends at shutdown, and costs one relaxed load while the fail point
 * is off.
 */
#include "repl/repl_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"

static const char *const names[SBL_REPL_FP_COUNT] = {"hangBeforeApplyCommit",
                                                     "rsSyncApplyStop",
                                                     "hangBeforePrimaryOplogAppend",
                                                     "hangBeforePrimaryOplogCommit",
                                                     "failBeforePrimaryOplogCommit"};
static atomic_bool on[SBL_REPL_FP_COUNT];
static _Atomic int64_t max_ms[SBL_REPL_FP_COUNT];
static char fp_ns[SBL_REPL_FP_COUNT][128]; /* data.ns: only writes to it ("" any); set while off */

bool sbl_repl_fail_point(const char *name, bool enable, int64_t ms, const char *ns)
{
    for (int i = 0; i < SBL_REPL_FP_COUNT; i++)
        if (strcmp(name, names[i]) == 0) {
            atomic_store(&on[i], false);
            snprintf(fp_ns[i], sizeof(fp_ns[i]), "%s", ns != NULL ? ns : "");
            atomic_store(&max_ms[i], ms);
            atomic_store(&on[i], enable);
            return true;
        }
    return false;
}

bool sbl_repl_fp_holds_writes(void)
{
    return atomic_load_explicit(&on[SBL_REPL_FP_BEFORE_APPEND], memory_order_relaxed) ||
           atomic_load_explicit(&on[SBL_REPL_FP_BEFORE_COMMIT], memory_order_relaxed);
}

bool sbl_repl_fp_applies(int fp, const char *ns)
{
    return atomic_load_explicit(&on[fp], memory_order_relaxed) &&
           (fp_ns[fp][0] == '\0' || (ns != NULL && strcmp(fp_ns[fp], ns) == 0));
}

bool sbl_repl_fp_wait(int fp, bool (*go_on)(void *), void *arg)
{
    if (!atomic_load_explicit(&on[fp], memory_order_relaxed))
        return true;
    int64_t until = sbl_now_ms() + atomic_load(&max_ms[fp]);
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "failPoint", names[fp]);
    sbl_log(SBL_LOG_WARNING, "REPL", 7360002, "Fail point enabled: waiting", &attr);
    bson_destroy(&attr);
    while (atomic_load(&on[fp]) && sbl_now_ms() < until && !sbl_rs.stopping) {
        if (go_on != NULL && !go_on(arg))
            return false;
        struct timespec t = {0, 10 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    return true;
}
