/*
 * repl_recover.c: bringing a member's data back in line with its oplog.
 *
 * Start-up recovery (as mongod's replication recovery): a member's
 * replicated collections are unlogged WiredTiger tables, so after a
 * restart they hold what the stable checkpoint held (the majority commit
 * point when it was taken); the oplog, logged, holds every entry.  The
 * entries after the checkpoint's stable timestamp are applied again, each
 * at its own ts, without being written to the oplog a second time.
 *
 * What must stay true: replay is idempotent (inserts and updates are
 * upserting replacements by _id, deletes by _id, catalog changes already
 * made fail harmlessly), and it ends before the member serves anyone.
 */
#include "repl/repl_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

#define rs sbl_rs
#define REPLAY_BATCH 256

/* Copy up to max entries with ts > after from our oplog into docs. */
static int read_after(sbl_session_t *s, uint64_t after, bson_t **docs, int max, int *np,
                      sbl_err_t *err)
{
    sbl_coll_t *oplog = sbl_oplog_coll();
    bson_value_t lo = {.value_type = BSON_TYPE_TIMESTAMP};
    lo.value.v_timestamp.timestamp = SBL_TS_SECS(after);
    lo.value.v_timestamp.increment = SBL_TS_INC(after);
    sbl_scan_bounds_t b = {.lo = after != 0 ? &lo : NULL, .lo_inclusive = false};
    sbl_scan_t *scan;
    int rc = 0;

    *np = 0;
    if (oplog == NULL)
        return 0;
    SBL_RET(sbl_scan_open(s, oplog, &b, false, &scan, err));
    while (*np < max) {
        bson_t doc;
        bool done;
        if ((rc = sbl_scan_next(scan, &doc, &done, err)) != 0 || done)
            break;
        docs[(*np)++] = bson_copy(&doc);
    }
    sbl_scan_close(scan);
    return rc;
}

static uint64_t ts_of(const bson_t *doc)
{
    bson_iter_t it;
    uint32_t t = 0, i = 0;
    if (bson_iter_init_find(&it, doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it))
        bson_iter_timestamp(&it, &t, &i);
    return SBL_TS(t, i);
}

int sbl_rs_replay_oplog(sbl_err_t *err)
{
    sbl_session_t *s = sbl_session_get();
    uint64_t from = sbl_storage_recovery_ts(), pos = from;
    int64_t n = 0, start_ms = sbl_now_ms();
    bson_t *docs[REPLAY_BATCH];
    int nd = 0, rc = 0;

    if (sbl_oplog_coll() == NULL || sbl_oplog_last_ts() <= from)
        return 0;
    bson_t attr = BSON_INITIALIZER;
    bson_append_timestamp(&attr, "stableTimestamp", -1, SBL_TS_SECS(from), SBL_TS_INC(from));
    bson_append_timestamp(&attr, "topOfOplog", -1, SBL_TS_SECS(sbl_oplog_last_ts()),
                          SBL_TS_INC(sbl_oplog_last_ts()));
    sbl_log(SBL_LOG_INFO, "REPL", 21544, from != 0
            ? "Recovering from stable timestamp: replaying the oplog after it"
            : "No stable checkpoint: replaying the whole oplog", &attr);
    bson_destroy(&attr);
    sbl_repl_replaying = true;
    while (rc == 0 && (rc = read_after(s, pos, docs, REPLAY_BATCH, &nd, err)) == 0 && nd > 0) {
        for (int i = 0; i < nd; i++) {
            if (rc == 0)
                rc = sbl_rs_apply_entry(docs[i], err);
            pos = ts_of(docs[i]);
            bson_destroy(docs[i]);
        }
        n += nd;
    }
    sbl_repl_replaying = false;
    bson_init(&attr);
    BSON_APPEND_INT64(&attr, "entries", n);
    BSON_APPEND_INT64(&attr, "durationMillis", sbl_now_ms() - start_ms);
    sbl_log(SBL_LOG_INFO, "REPL", 21536, "Completed oplog application for recovery", &attr);
    bson_destroy(&attr);
    return rc;
}
