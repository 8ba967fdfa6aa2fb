/*
 * repl_commit.c: the majority commit point and what follows it.  The
 * primary computes the commit point from its members' positions, a
 * secondary learns it from its sync source's replies; either publishes
 * WiredTiger's stable timestamp from it (clamped by prepared transactions),
 * with the oldest timestamp trailing by the history kept for reads at a
 * timestamp (minSnapshotHistoryWindowInSeconds, see window_ts).
 *
 * Everything here but the window's setters runs under rs.lock.
 */
#include "repl/repl_int.h"

#include <stdatomic.h>
#include <stdint.h>

#include "common/clock.h"
#include "storage/storage.h"

#define rs sbl_rs

void sbl_rs_update_commit_quiet_locked(void)
{
    sbl_optime_t pos[SBL_RS_MAX_MEMBERS];
    if (rs.config == NULL || rs.self < 0)
        return;
    /* The others' durable positions (writeConcernMajorityJournalDefault, as
     * mongod): a secondary's applied optime from a heartbeat may not be in
     * its journal yet.  Our own writes wait for a majority that holds them
     * durably themselves (repl_wait.c). */
    for (int i = 0; i < rs.cfg.n; i++)
        pos[i] = i == rs.self ? sbl_rs_my_applied() : rs.peer[i].durable;
    sbl_optime_t cp = sbl_rs_commit_point(&rs.cfg, pos, rs.term, rs.commit);
    if (sbl_optime_cmp(cp, rs.commit) > 0) {
        /* the wall time of the entry at the commit point: it is some
         * member's position, and members report its wall time with it */
        int64_t wall = 0;
        for (int i = 0; i < rs.cfg.n && wall == 0; i++)
            if (sbl_optime_cmp(pos[i], cp) == 0)
                wall = i == rs.self ? sbl_oplog_last_wall_ms() : rs.peer[i].durable_wall;
        rs.commit = cp;
        rs.commit_wall = wall != 0 ? wall : sbl_now_ms();
    }
}

void sbl_rs_update_commit_locked(void)
{
    sbl_rs_update_commit_quiet_locked();
    sbl_rs_broadcast_locked(); /* positions moved: w:N waiters look again */
}

void sbl_rs_append_commit_locked(bson_t *r)
{
    sbl_repl_append_optime(r, "lastOpCommitted", rs.commit.ts, rs.commit.t);
    BSON_APPEND_DATE_TIME(r, "lastCommittedWall", rs.commit_wall);
}

void sbl_rs_learn_commit_locked(const bson_t *reply)
{
    bson_iter_t it;
    sbl_optime_t cp = sbl_repl_optime_at(reply, "lastOpCommitted");
    if (sbl_optime_cmp(cp, rs.commit) <= 0)
        return;
    rs.commit = cp;
    if (bson_iter_init_find(&it, reply, "lastCommittedWall") && BSON_ITER_HOLDS_DATE_TIME(&it))
        rs.commit_wall = bson_iter_date_time(&it);
}

/* How far the oldest timestamp trails stable: the history kept for reads
 * at a timestamp (snapshot reads with atClusterTime, majority reads at the
 * commit point, cursors that read where they opened),
 * minSnapshotHistoryWindowInSeconds, 300 s as in mongod 7.0.
 * WiredTiger 3.2 keeps that history in its cache and walks every version
 * of a document kept on each further write to it (mongod 7.0's WiredTiger
 * moves them to its durable history on disk), so a hot document written
 * thousands of times within the window makes each write slower.  The
 * whole window is kept only while such reads are under way (for the
 * window's length after the last one began, history_read_ms), else
 * SHORT_WINDOW_S, what mongod 4.2 kept on WiredTiger 3.2; and while the
 * cache is more than PRESSURE_FILL full, SHORT_WINDOW_S too.  The oldest
 * timestamp never moves back (WiredTiger ignores that), so a window that
 * grows again keeps history from that moment on. */
static atomic_llong snapshot_window_s = 300;
static atomic_llong history_read_ms = INT64_MIN / 2;
#define PRESSURE_FILL 0.8
#define SHORT_WINDOW_S 5

void sbl_repl_note_history_read(void)
{
    /* routed commands call this per operation: write the shared line only
     * when the time moved by 100 ms (the window is seconds long) */
    int64_t now = sbl_now_ms();
    if (now - atomic_load_explicit(&history_read_ms, memory_order_relaxed) >= 100)
        atomic_store_explicit(&history_read_ms, now, memory_order_relaxed);
}

static uint64_t window_ts(void)
{
    static int64_t checked_ms;
    static bool pressure;
    int64_t now = sbl_now_ms(), w = atomic_load(&snapshot_window_s);
    if (now - checked_ms >= 1000) { /* the caller holds rs.lock: one caller at a time */
        checked_ms = now;
        pressure = sbl_storage_cache_fill() > PRESSURE_FILL;
    }
    bool idle = now - atomic_load(&history_read_ms) > w * 1000;
    if ((pressure || idle) && w > SHORT_WINDOW_S)
        w = SHORT_WINDOW_S;
    return (uint64_t)w << 32;
}

void sbl_repl_set_snapshot_window_s(int64_t s)
{
    atomic_store(&snapshot_window_s, s);
}

int64_t sbl_repl_snapshot_window_s(void)
{
    return atomic_load(&snapshot_window_s);
}

/* The stable timestamp last given to WiredTiger, and what it would have
 * been without the prepared transactions' clamp. */
static uint64_t published_stable, unclamped_stable;

void sbl_rs_stable_reset(uint64_t ts)
{
    published_stable = unclamped_stable = ts;
}

uint64_t sbl_rs_stable_unclamped_locked(void)
{
    return published_stable > unclamped_stable ? published_stable : unclamped_stable;
}

void sbl_rs_publish_stable_locked(void)
{
    int st = atomic_load(&rs.state);
    if (rs.config == NULL || rs.self < 0)
        return;
    if (st != SBL_RS_PRIMARY && (st == SBL_RS_STARTUP2 || !sbl_rs_syncing_state_locked(st)))
        return;
    if (st == SBL_RS_PRIMARY && sbl_rs_voters(&rs.cfg) == 1)
        sbl_rs_update_commit_locked(); /* a set of one: stable follows our own writes */
    /* The commit point is in a secondary's history only when its last entry
     * is of that term or a later one (a later term's primary holds every
     * committed entry); and never past a commit still in flight (our last
     * ts is taken before its transaction commits). */
    uint64_t stable = sbl_rs_stable_for(st == SBL_RS_PRIMARY, rs.commit, sbl_rs_my_applied(),
                                        sbl_storage_all_durable_ts());
    if (stable > unclamped_stable)
        unclamped_stable = stable;
    stable = sbl_repl_prepared_clamp(stable); /* prepared transactions are replayed */
    if (stable <= published_stable)
        return;
    uint64_t window = window_ts();
    sbl_err_t err;
    sbl_err_clear(&err);
    if (sbl_storage_set_stable(stable, stable > window ? stable - window : 0, &err) == 0)
        published_stable = stable;
}

