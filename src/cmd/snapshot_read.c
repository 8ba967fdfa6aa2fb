/*
 * snapshot_read.c: readConcern {level: "snapshot"} outside a transaction
 * (mongod 5.0+): find, aggregate and distinct read one WiredTiger snapshot
 * at a timestamp, atClusterTime when the client names one, else the
 * majority-committed point (WiredTiger's stable timestamp), which the reply
 * returns as atClusterTime (in the cursor document; at the top level for
 * distinct).  A cursor keeps that timestamp and each getMore reads there.
 *
 * What must stay true: the read runs inside one transaction on the
 * command's storage session begun with read_timestamp (storage's outer
 * mode), rolled back when the command ends, so nothing it does can write;
 * a time newer than the member's cluster time (its oplog's, or a newer one
 * gossiped to it, which it reaches first) is refused (InvalidOptions), one older
 * than the history kept (minSnapshotHistoryWindowInSeconds) is
 * SnapshotTooOld; a time not yet majority-committed is waited for.
 *
 * readConcern {level: "majority"} (find, aggregate, count, distinct) reads
 * the same way at the member's majority commit point (its stable
 * timestamp), on primaries and secondaries, without naming atClusterTime: a
 * w:1 write is invisible to it until the commit point passes it, and a
 * cursor's getMores read at the point it opened at (as mongod).  With
 * afterClusterTime (or afterOpTime) it first waits for the commit point to
 * reach that time, within maxTimeMS; a member without a commit point yet
 * waits for one (as mongod).  Not at the commit point: a standalone
 * or a member with no config (all it has), an aggregate that writes or
 * opens a change stream (change streams read committed entries anyway),
 * a tailable find, and count without a query (the collection's count, as
 * mongod's fast count).
 *
 * A router's cursor on a shard reads the newest data, as any cursor, until
 * a migration of its collection enters a critical section on this shard
 * after it opened: from then on its getMores read at the time it opened
 * (its open_ts), before the donor deleted the range or the recipient moved
 * it in, so a cursor across a migration returns each document once, as
 * mongod's cursors (which keep their ownership filter) do.  SnapshotTooOld
 * when that time has left the history kept.
 */
#include "cmd/cmd_int.h"
#include "cmd/migrate_int.h"
#include "common/clock.h"
#include "doc/doc.h"
#include "exec/exec.h"
#include "repl/repl.h"
#include "shard/shard.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define POLL_MS 2
/* Without atClusterTime: how long to wait for the member's newest write to be
 * majority-committed, so a client reads its own w:1 writes (mongod's writes
 * default to w:"majority"); a set that cannot commit gets the older point. */
#define OWN_WRITES_WAIT_MS 1000
/* With an atClusterTime gossiped here but past this member's oplog: how long
 * to wait for the oplog to reach it (a primary writes a no-op at once; a
 * secondary waits for its primary) before refusing it. */
#define GOSSIPED_WAIT_MS 5000

static bool is_snapshot_command(const char *n)
{
    return strcmp(n, "find") == 0 || strcmp(n, "aggregate") == 0 || strcmp(n, "distinct") == 0;
}

/* An aggregate whose pipeline writes ($out, $merge). */
static bool pipeline_writes(const bson_t *cmd)
{
    bson_iter_t it, st, stage;
    if (!bson_iter_init_find(&it, cmd, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &st))
        return false;
    while (bson_iter_next(&st))
        if (BSON_ITER_HOLDS_DOCUMENT(&st) && bson_iter_recurse(&st, &stage) &&
            bson_iter_next(&stage) &&
            (strcmp(bson_iter_key(&stage), "$out") == 0 ||
             strcmp(bson_iter_key(&stage), "$merge") == 0))
            return true;
    return false;
}

/* An aggregate that opens a change stream (its first stage). */
static bool pipeline_streams(const bson_t *cmd)
{
    bson_iter_t it, st, stage;
    return bson_iter_init_find(&it, cmd, "pipeline") && BSON_ITER_HOLDS_ARRAY(&it) &&
           bson_iter_recurse(&it, &st) && bson_iter_next(&st) && BSON_ITER_HOLDS_DOCUMENT(&st) &&
           bson_iter_recurse(&st, &stage) && bson_iter_next(&stage) &&
           strcmp(bson_iter_key(&stage), "$changeStream") == 0;
}

/* Wait until the stable timestamp reaches ts or until_us (0: the command's
 * deadline, or for ever); true when it did. */
static int wait_stable(sbl_opctx_t *ctx, uint64_t ts, int64_t until_us, bool *reachedp,
                       sbl_err_t *err)
{
    *reachedp = false;
    for (;;) {
        if (sbl_storage_stable_ts() >= ts) {
            *reachedp = true;
            return 0;
        }
        SBL_RET(sbl_op_check_interrupt(ctx, err));
        if (until_us > 0 && sbl_now_us() >= until_us)
            return 0;
        struct timespec t = {0, POLL_MS * 1000000L};
        nanosleep(&t, NULL);
    }
}

/* Open the snapshot at ts on the command's session. */
static int open_at(sbl_opctx_t *ctx, uint64_t ts, sbl_err_t *err)
{
    sbl_repl_note_history_read();
    uint64_t oldest = sbl_storage_oldest_ts();
    if (oldest != 0 && ts < oldest)
        return sbl_err_set(err, SBL_E_SnapshotTooOld,
                           "Read timestamp Timestamp(%u, %u) is older than the oldest available "
                           "timestamp.", (unsigned)(ts >> 32), (unsigned)ts);
    SBL_RET(sbl_txn_begin_outer_at(ctx->ss, ts, err));
    ctx->read_ts = ts;
    return 0;
}

/* A readConcern's timestamp field (afterClusterTime, or afterOpTime's ts). */
static uint64_t rc_ts(const bson_iter_t *rc)
{
    bson_iter_t ts = *rc;
    uint32_t t = 0, i = 0;
    if (BSON_ITER_HOLDS_DOCUMENT(rc) && (!bson_iter_recurse(rc, &ts) || !bson_iter_find(&ts, "ts")))
        return 0;
    if (BSON_ITER_HOLDS_TIMESTAMP(&ts))
        bson_iter_timestamp(&ts, &t, &i);
    return ((uint64_t)t << 32) | i;
}

/* The readConcern's level (NULL: none) and the time it waits for (*afterp:
 * afterClusterTime or afterOpTime's ts; 0: none). */
static const char *level_and_after(const bson_t *cmd, uint64_t *afterp)
{
    bson_iter_t it, rc;
    const char *level = NULL;
    *afterp = 0;
    if (!sbl_doc_find_top(cmd, "readConcern", &it) || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &rc))
        return NULL;
    while (bson_iter_next(&rc)) {
        const char *k = bson_iter_key(&rc);
        if (strcmp(k, "level") == 0 && BSON_ITER_HOLDS_UTF8(&rc))
            level = bson_iter_utf8(&rc, NULL);
        else if (strcmp(k, "afterClusterTime") == 0 || strcmp(k, "afterOpTime") == 0)
            *afterp = rc_ts(&rc);
    }
    return level;
}

void sbl_cmd_read_concern_of(const bson_t *cmd, bool *linp, uint64_t *afterp)
{
    const char *level = level_and_after(cmd, afterp);
    *linp = level != NULL && strcmp(level, "linearizable") == 0;
}

bool sbl_cmd_read_concern_waits(const bson_t *cmd)
{
    uint64_t after;
    const char *level = level_and_after(cmd, &after);
    if (after != 0 || (level != NULL && (strcmp(level, "linearizable") == 0 ||
                                         strcmp(level, "snapshot") == 0)))
        return true;
    /* majority before this member has a commit point: it waits for one */
    return level != NULL && strcmp(level, "majority") == 0 && sbl_repl_enabled() &&
           sbl_storage_stable_ts() == 0;
}

/* The command's readConcern: level snapshot (*snapp) and atClusterTime (*atp,
 * 0: none), checked as mongod does. */
static int parse_read_concern(const sbl_opctx_t *ctx, bool *snapp, uint64_t *atp, sbl_err_t *err)
{
    bson_iter_t it, rc;
    const char *level = NULL;
    bool has_at = false, has_after = false;

    *snapp = false;
    *atp = 0;
    if (!sbl_doc_find_top(ctx->cmd, "readConcern", &it) || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &rc))
        return 0;
    while (bson_iter_next(&rc)) {
        const char *k = bson_iter_key(&rc);
        if (strcmp(k, "level") == 0 && BSON_ITER_HOLDS_UTF8(&rc)) {
            level = bson_iter_utf8(&rc, NULL);
        } else if (strcmp(k, "afterClusterTime") == 0 || strcmp(k, "afterOpTime") == 0) {
            has_after = true;
        } else if (strcmp(k, "atClusterTime") == 0) {
            if (!BSON_ITER_HOLDS_TIMESTAMP(&rc))
                return sbl_type_error(err, "readConcern.atClusterTime", &rc, "timestamp");
            uint32_t t, i;
            bson_iter_timestamp(&rc, &t, &i);
            *atp = ((uint64_t)t << 32) | i;
            has_at = true;
        }
    }
    *snapp = level != NULL && strcmp(level, "snapshot") == 0;
    if (has_at && !*snapp)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "readConcern.atClusterTime can only be used with readConcern level "
                           "snapshot");
    if (has_at && has_after)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "Can not specify both afterClusterTime and atClusterTime");
    if (has_at && *atp == 0)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "readConcern.atClusterTime cannot be a null timestamp");
    if (*snapp && !sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NotAReplicaSet,
                           "node needs to be a replica set member to use readConcern: snapshot");
    return 0;
}

/* atClusterTime at: refused after the cluster time, waited for until
 * majority-committed (as mongod), refused before the history kept. */
static int check_at(sbl_opctx_t *ctx, uint64_t at, sbl_err_t *err)
{
    uint64_t cluster = sbl_repl_last_op_ts();
    bool reached;
    /* A time a router chose from another shard's clock, gossiped here but
     * past this member's oplog: reached first, a primary with a no-op (as
     * afterClusterTime; mongod's makeNoopWriteIfNeeded). */
    if (at > cluster && at <= sbl_repl_clock_now()) {
        int64_t until = sbl_now_us() + GOSSIPED_WAIT_MS * 1000;
        if (ctx->deadline_us > 0 && ctx->deadline_us < until)
            until = ctx->deadline_us;
        sbl_err_t e;
        sbl_err_clear(&e);
        int wrc = sbl_repl_wait_applied(at, ctx, until, &e);
        if (wrc != 0 && wrc != SBL_E_MaxTimeMSExpired) { /* killOp, a state change */
            *err = e;
            return wrc;
        }
        cluster = sbl_repl_last_op_ts(); /* not reached in time: refused below */
    }
    if (at > cluster)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "readConcern atClusterTime value must not be greater than the "
                           "current clusterTime. Requested clusterTime: Timestamp(%u, %u); "
                           "current clusterTime: Timestamp(%u, %u)",
                           (unsigned)(at >> 32), (unsigned)at, (unsigned)(cluster >> 32),
                           (unsigned)cluster);
    SBL_RET(wait_stable(ctx, at, ctx->deadline_us, &reached, err));
    sbl_repl_note_history_read();
    uint64_t oldest = sbl_storage_oldest_ts();
    if (oldest != 0 && at < oldest)
        return sbl_err_set(err, SBL_E_SnapshotTooOld,
                           "Read timestamp Timestamp(%u, %u) is older than the oldest available "
                           "timestamp.", (unsigned)(at >> 32), (unsigned)at);
    return 0;
}

int sbl_cmd_snapshot_txn_ts(sbl_opctx_t *ctx, uint64_t *tsp, sbl_err_t *err)
{
    bool snapshot;
    *tsp = 0;
    SBL_RET(parse_read_concern(ctx, &snapshot, tsp, err));
    if (*tsp != 0)
        SBL_RET(check_at(ctx, *tsp, err));
    return 0;
}

/* readConcern majority: read at the commit point, once it reached after
 * (afterClusterTime; 0: none).  See the file's comment for what does not. */
static int majority_begin(sbl_opctx_t *ctx, uint64_t after, sbl_err_t *err)
{
    bson_iter_t it;
    bool reached;
    const char *n = ctx->name;
    if (!sbl_repl_enabled() || sbl_repl_last_op_ts() == 0)
        return 0;
    if (strcmp(n, "find") == 0) {
        if (sbl_doc_find_top(ctx->cmd, "tailable", &it) && bson_iter_as_bool(&it))
            return 0;
    } else if (strcmp(n, "aggregate") == 0) {
        if (pipeline_writes(ctx->cmd) || pipeline_streams(ctx->cmd))
            return 0;
    } else if (strcmp(n, "count") != 0 && strcmp(n, "distinct") != 0) {
        return 0;
    }
    /* the commit point reaches after, or exists (on a worker: the dispatcher
     * sent such reads there, sbl_cmd_read_concern_waits) */
    SBL_RET(wait_stable(ctx, after != 0 ? after : 1, ctx->deadline_us, &reached, err));
    SBL_RET(open_at(ctx, sbl_storage_stable_ts(), err));
    ctx->read_majority = true;
    return 0;
}

/* A router's command on a sharded collection (ctx->open_ts set: dispatch.c)
 * at atClusterTime at.  A read filters by the ownership at that time
 * (config.chunks' history), as mongod's shards do: that answers right also
 * inside a migration's window here, where this shard's data need not match
 * what it owned at at (a recipient's moved-in documents were written before
 * the commit's validAfter, so they are not owned before it; a donor's
 * deletion comes after it, so it still holds what it owned until then).  A
 * read without a filter (the chunks did not fit in one reply) is refused
 * inside a window instead, and a transaction's write is refused inside one
 * and also when one, or a change of this shard's placement, came after at
 * (migrate_crit.c). */
static int check_routed_at(sbl_opctx_t *ctx, uint64_t at, sbl_err_t *err)
{
    static const char *const writes[] = {"insert", "update", "delete", "findAndModify",
                                         "findandmodify", NULL};
    bson_iter_t it;
    char ns[400];
    bool write = false;
    if (at == 0 || ctx->open_ts == 0 || !bson_iter_init(&it, ctx->cmd) || !bson_iter_next(&it) ||
        !BSON_ITER_HOLDS_UTF8(&it))
        return 0;
    if (ctx->shard_filter != NULL) {
        sbl_shard_filter_t *f = sbl_shard_filter_at(ctx->shard_filter, at);
        sbl_shard_filter_release(ctx->shard_filter);
        ctx->shard_filter = f;
    }
    for (int i = 0; writes[i] != NULL; i++)
        write = write || strcmp(ctx->name, writes[i]) == 0;
    snprintf(ns, sizeof(ns), "%s.%s", ctx->db, bson_iter_utf8(&it, NULL));
    /* a write also before a chunk came here or left (config.chunks' history:
     * this holds after a restart or a failover, which forget the windows) */
    uint64_t took = write ? sbl_shard_owned_since(ns) : 0;
    uint64_t left = write ? sbl_shard_left_since(ns) : 0;
    uint64_t since = took > left ? took : left;
    if (since > at)
        return sbl_err_set(err, SBL_E_SnapshotUnavailable, "Unable to write %s at "
                           "Timestamp(%u, %u): %s at Timestamp(%u, %u), after it; please "
                           "retry the operation", ns, (unsigned)(at >> 32), (unsigned)at,
                           took > left ? "this shard took one of its chunks"
                                       : "one of its chunks left this shard",
                           (unsigned)(since >> 32), (unsigned)since);
    if (!write && ctx->shard_filter != NULL)
        return 0;
    return mig_crit_check_at(ns, at, write, err);
}

int sbl_cmd_snapshot_begin(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    uint64_t at, after;
    bool snapshot, reached;

    ctx->read_ts = 0;
    ctx->read_majority = false;
    if (ctx->mtxn != NULL || sbl_doc_find_top(ctx->cmd, "autocommit", &it))
        return check_routed_at(ctx, sbl_cmd_txn_read_ts(ctx), err); /* its snapshot: txn.c */
    if (strcmp(ctx->name, "getMore") == 0) {
        if (!sbl_doc_find_top(ctx->cmd, "getMore", &it) || !BSON_ITER_HOLDS_INT64(&it))
            return 0;
        uint64_t ts, open;
        sbl_cursor_times(bson_iter_int64(&it), &ts, &ctx->read_majority, &open);
        if (ts == 0 && open != 0 && open <= mig_crit_ts(ctx->db, ctx->cmd))
            ts = open; /* see the file's comment: a migration since it opened */
        return ts != 0 ? open_at(ctx, ts, err) : 0;
    }
    SBL_RET(parse_read_concern(ctx, &snapshot, &at, err));
    const char *level = level_and_after(ctx->cmd, &after);
    if (level != NULL && strcmp(level, "majority") == 0)
        return majority_begin(ctx, after, err);
    if (!snapshot)
        return 0;
    if (!is_snapshot_command(ctx->name) ||
        (strcmp(ctx->name, "aggregate") == 0 && pipeline_writes(ctx->cmd)))
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "Command %s does not support { readConcern: { level: \"snapshot\" } }"
                           "%s", ctx->name,
                           strcmp(ctx->name, "aggregate") == 0 ? " with $out or $merge" : "");
    uint64_t cluster = sbl_repl_last_op_ts();
    if (cluster == 0)
        return sbl_err_set(err, SBL_E_NotPrimaryOrSecondary,
                           "cannot read at a snapshot before the replica set is initiated");
    if (at != 0) {
        SBL_RET(check_at(ctx, at, err));
        SBL_RET(check_routed_at(ctx, at, err));
        return open_at(ctx, at, err);
    }
    int64_t until = sbl_now_us() + OWN_WRITES_WAIT_MS * 1000;
    if (ctx->deadline_us > 0 && ctx->deadline_us < until)
        until = ctx->deadline_us;
    SBL_RET(wait_stable(ctx, cluster, until, &reached, err));
    uint64_t ts = sbl_storage_stable_ts();
    if (ts == 0)
        return sbl_err_set(err, SBL_E_NotPrimaryOrSecondary,
                           "no majority-committed snapshot is available yet");
    return open_at(ctx, ts, err);
}

void sbl_cmd_snapshot_end(sbl_opctx_t *ctx, int rc)
{
    if (ctx->read_ts == 0)
        return;
    sbl_txn_abort_outer(ctx->ss);
    if (rc == 0 && !ctx->read_majority && strcmp(ctx->name, "distinct") == 0)
        bson_append_timestamp(ctx->reply, "atClusterTime", -1, (uint32_t)(ctx->read_ts >> 32),
                              (uint32_t)ctx->read_ts);
    ctx->read_ts = 0;
    ctx->read_majority = false;
}
