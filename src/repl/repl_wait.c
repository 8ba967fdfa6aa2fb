/*
 * repl_wait.c: write concern beyond this member.  A write acknowledged with
 * w: N or w: "majority" waits until enough members have applied it; the
 * wait is a record in a list, not a blocked thread: one waiter thread,
 * woken by every change of state or config and of positions but a
 * report's (sbl_rs.cond), calls back each write whose condition now holds,
 * failed (stepped down) or timed out.
 * A hundred clients writing with w:"majority" hold a hundred records, not
 * a hundred of the server's sixteen worker threads.  The positions a
 * secondary reports (replSetUpdatePosition) answer the waits they end at
 * once, on the thread that took the report (sbl_rs_waits_take_locked):
 * the waiter thread, a wake-up later on two busy cores, is left the waits
 * that end otherwise (heartbeats, state changes, timeouts).
 *
 * w:"majority" is over once the commit point reached the write and the
 * stable timestamp too (published here if the heartbeat thread has not yet),
 * so a readConcern majority read right after the acknowledgement sees it
 * (not while a prepared transaction holds the stable timestamp back).  The
 * commit point counts our applied position, so a majority write also needs
 * a majority that holds it durably (writeConcernMajorityJournalDefault):
 * our own journal flush, asked for as the wait starts
 * (sbl_repl_await_majority_journaled), and the journaled position of one
 * other member of three; or, before that flush ends, enough other members'
 * journaled positions by themselves (sbl_rs_durable_without).  On two
 * cores and one disk our own flush queues behind the flusher's last one
 * and often ended after both secondaries had reported.
 *
 * What must stay true: each callback runs exactly once, never under
 * sbl_rs.lock; at stop every waiting write is answered (interrupted), none
 * is forgotten; a wait registered while the thread is not running blocks
 * its caller instead (start-up, shutdown); a journaled wait's record lives
 * until both its answer and its flush's callback are done (refs).
 */
#include "repl/repl_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "storage/storage.h"

#define rs sbl_rs
#define WAIT_POLL_MS 200

typedef struct waiter {
    uint64_t ts;
    int64_t t; /* the term of the write's entry: the one this member leads */
    int w;
    bool majority;
    char mode[64]; /* a getLastErrorModes name, "" none */
    int64_t deadline_ms; /* INT64_MAX: none */
    sbl_repl_wait_cb cb;
    void *arg;
    int code;
    const char *msg;
    /* A journaled majority wait: its own flush ended (with flush_rc), and
     * whether it is in the list; both under rs.lock. */
    bool journal, flushed, listed;
    int flush_rc;
    atomic_int refs; /* the answer's and, journaled, the flush's */
    struct waiter *next;
} waiter_t;

static waiter_t *waiting;  /* under rs.lock */
static bool waiter_running; /* under rs.lock: the thread takes waits */
static bool waiter_started; /* it was started and is not joined yet */
static pthread_t waiter_thread;

/* The term a write's entry at ts is taken of, for w:N: our newest entry's
 * when it is at or after ts (on a primary, its own term), else the current
 * term.  It is the entry's own term, or later (an entry of an earlier term
 * waited on again): a member counts only with an optime at least that, so
 * never one that lacks the entry.  Lock held. */
static int64_t entry_term_locked(uint64_t ts)
{
    sbl_optime_t mine = sbl_rs_my_applied();
    return mine.ts >= ts ? mine.t : rs.term;
}

/* A journaled wait: a majority holds the write durably, our journal among
 * them once our flush ended, else without us.  Lock held. */
static bool durable_locked(const waiter_t *wt)
{
    if (!wt->journal || wt->flushed)
        return true;
    sbl_optime_t durable[SBL_RS_MAX_MEMBERS];
    for (int i = 0; i < rs.cfg.n; i++)
        durable[i] = rs.peer[i].durable;
    sbl_optime_t op = {.ts = wt->ts, .t = wt->t};
    return sbl_rs_durable_without(&rs.cfg, rs.self, durable, op, rs.term);
}

static bool satisfied_locked(const waiter_t *wt)
{
    if (wt->majority) {
        /* committed, and a majority read (at the stable timestamp) sees it;
         * but a prepared transaction that holds stable back must not hold
         * back the writes that resolve it (its own prepare, the decision) */
        if (rs.commit.ts < wt->ts || !durable_locked(wt))
            return false;
        if (sbl_rs_stable_unclamped_locked() < wt->ts)
            sbl_rs_publish_stable_locked();
        return sbl_rs_stable_unclamped_locked() >= wt->ts;
    }
    sbl_optime_t applied[SBL_RS_MAX_MEMBERS];
    for (int i = 0; i < rs.cfg.n; i++)
        applied[i] = i == rs.self ? sbl_rs_my_applied() : rs.peer[i].applied;
    sbl_optime_t op = {.ts = wt->ts, .t = wt->t};
    if (wt->mode[0] != '\0')
        return sbl_rs_mode_satisfied(&rs.cfg, sbl_rs_find_mode(&rs.cfg, wt->mode), applied, op);
    return sbl_rs_count_applied(&rs.cfg, applied, op) >= wt->w;
}

/* Is the wait over (*codep, *msgp: how it ended)?  Lock held. */
static bool wait_over_locked(const waiter_t *wt, int64_t now, int *codep, const char **msgp)
{
    *codep = 0;
    *msgp = NULL;
    /* our own position moves too (a set of one commits on its own) */
    if (atomic_load(&rs.state) == SBL_RS_PRIMARY && rs.config != NULL &&
        sbl_rs_voters(&rs.cfg) == 1)
        sbl_rs_update_commit_locked();
    if (wt->journal && wt->flushed && wt->flush_rc != 0) {
        /* committed, but not known to be on our disk: never acknowledged
         * as journaled (the client learns the write's fate is unknown) */
        *codep = SBL_E_OperationFailed;
        *msgp = "the write committed but the journal flush failed: it may not survive a crash; "
                "see the server log";
        return true;
    }
    if (rs.config != NULL && wt->mode[0] != '\0' && sbl_rs_find_mode(&rs.cfg, wt->mode) < 0) {
        *codep = SBL_E_UnknownReplWriteConcern;
        *msgp = "No write concern mode with that name found in the replica set configuration "
                "(settings.getLastErrorModes)";
        return true;
    }
    if (rs.config == NULL || satisfied_locked(wt))
        return true;
    if (atomic_load(&rs.state) != SBL_RS_PRIMARY) {
        *codep = SBL_E_InterruptedDueToReplStateChange;
        *msgp = "operation was interrupted because a replica set state change (stepdown) "
                "occurred while waiting for replication";
        return true;
    }
    if (now >= wt->deadline_ms || rs.stopping) {
        *codep = SBL_E_WriteConcernFailed;
        *msgp = "waiting for replication timed out";
        return true;
    }
    return false;
}

/* Take off the list the waits that are over now, in a list of their own
 * (the caller answers them once it released the lock).  Lock held. */
static waiter_t *take_over_locked(int64_t now, int64_t *nextp)
{
    waiter_t *done = NULL, **pp = &waiting;
    while (*pp != NULL) {
        waiter_t *wt = *pp;
        if (wait_over_locked(wt, now, &wt->code, &wt->msg)) {
            *pp = wt->next;
            wt->listed = false;
            wt->next = done;
            done = wt;
        } else {
            if (wt->deadline_ms < *nextp)
                *nextp = wt->deadline_ms;
            pp = &wt->next;
        }
    }
    return done;
}

static void unref(waiter_t *wt)
{
    if (atomic_fetch_sub(&wt->refs, 1) == 1)
        free(wt);
}

static void answer(waiter_t *done)
{
    while (done != NULL) {
        waiter_t *wt = done;
        done = wt->next;
        wt->cb(wt->arg, wt->code, wt->msg);
        unref(wt);
    }
}

void *sbl_rs_waits_take_locked(void)
{
    int64_t next = INT64_MAX;
    return waiting != NULL ? take_over_locked(sbl_now_ms(), &next) : NULL;
}

void sbl_rs_waits_answer(void *done)
{
    answer(done);
}

static void *waiter_main(void *arg)
{
    sbl_thread_name("ReplWaiter");
    (void)arg;
    pthread_mutex_lock(&rs.lock);
    for (;;) {
        int64_t now = sbl_now_ms(), next = now + WAIT_POLL_MS;
        waiter_t *done = take_over_locked(now, &next);
        bool stop = rs.stopping && waiting == NULL;
        if (done != NULL) {
            pthread_mutex_unlock(&rs.lock);
            answer(done);
            pthread_mutex_lock(&rs.lock);
            continue; /* positions may have moved meanwhile */
        }
        if (stop)
            break;
        sbl_rs_wait_locked(next - now);
    }
    waiter_running = false;
    pthread_mutex_unlock(&rs.lock);
    return NULL;
}

int sbl_rs_waiter_start(void)
{
    pthread_mutex_lock(&rs.lock);
    int rc = pthread_create(&waiter_thread, NULL, waiter_main, NULL);
    waiter_running = waiter_started = rc == 0;
    pthread_mutex_unlock(&rs.lock);
    return rc == 0 ? 0 : -1;
}

/* After rs.stopping is set: the thread answers what waits, then ends. */
void sbl_rs_waiter_stop(void)
{
    pthread_mutex_lock(&rs.lock);
    sbl_rs_broadcast_locked();
    pthread_mutex_unlock(&rs.lock);
    if (waiter_started)
        pthread_join(waiter_thread, NULL);
    waiter_started = false;
}

void sbl_repl_await(uint64_t ts, int w, bool majority, int64_t wtimeout_ms, sbl_repl_wait_cb cb,
                    void *arg)
{
    waiter_t wt = {.ts = ts, .w = w, .majority = majority,
                   .deadline_ms = wtimeout_ms > 0 ? sbl_now_ms() + wtimeout_ms : INT64_MAX};
    int code;
    const char *msg;
    pthread_mutex_lock(&rs.lock);
    wt.t = entry_term_locked(ts);
    while (!wait_over_locked(&wt, sbl_now_ms(), &code, &msg)) {
        int64_t left = wt.deadline_ms - sbl_now_ms();
        sbl_rs_wait_pos_locked(left < WAIT_POLL_MS ? left : WAIT_POLL_MS);
    }
    pthread_mutex_unlock(&rs.lock);
    cb(arg, code, msg);
}

/* The journal flusher's callback for a journaled wait: our copy is on disk
 * (rc 0), which may end the wait now; SBL_FLUSH_SKIPPED: the wait was over
 * when its delayed flush came due. */
static void own_flush_done(void *arg, int rc)
{
    waiter_t *wt = arg, *done = NULL;
    if (rc == SBL_FLUSH_SKIPPED) {
        unref(wt);
        return;
    }
    pthread_mutex_lock(&rs.lock);
    wt->flushed = true;
    wt->flush_rc = rc;
    if (wt->listed && wait_over_locked(wt, sbl_now_ms(), &wt->code, &wt->msg)) {
        waiter_t **pp = &waiting;
        while (*pp != wt)
            pp = &(*pp)->next;
        *pp = wt->next;
        wt->listed = false;
        wt->next = NULL;
        done = wt;
    }
    pthread_cond_broadcast(&rs.pos_cond); /* a registration waiting in place */
    pthread_mutex_unlock(&rs.lock);
    answer(done);
    unref(wt);
}

/* A delayed flush, come due: is its wait still on? */
static bool still_waiting(void *arg)
{
    const waiter_t *wt = arg;
    pthread_mutex_lock(&rs.lock);
    bool on = wt->listed;
    pthread_mutex_unlock(&rs.lock);
    return on;
}

/* Whether the other members keep up: enough of them to make a write
 * majority without us sync from us directly and journaled an entry written
 * within KEEP_UP_MS of our newest.  A journaled wait then asks for our own
 * flush only if it is still on LAZY_FLUSH_US later (both secondaries
 * usually report first); otherwise at once, as when a member lags (a
 * checkpoint), is gone, or chains off another secondary (its position
 * comes up with that one's next report, a round later).  Lock held. */
#define KEEP_UP_MS 5
#define LAZY_FLUSH_US 2000

static bool others_keep_up_locked(void)
{
    int ok = 0, maj = sbl_rs_write_majority(&rs.cfg);
    if (rs.config == NULL || rs.self < 0)
        return false;
    int64_t floor = sbl_oplog_last_wall_ms() - KEEP_UP_MS;
    for (int i = 0; i < rs.cfg.n; i++)
        ok += i != rs.self && rs.cfg.m[i].votes > 0 && !rs.cfg.m[i].arbiter && rs.peer[i].up &&
              rs.peer[i].durable.t == rs.term && rs.peer[i].durable_wall >= floor &&
              strcmp(rs.peer[i].sync_source, rs.cfg.m[rs.self].host) == 0;
    return maj >= 1 && ok >= maj;
}

static void await_async(uint64_t ts, int w, bool majority, bool journal, const char *mode,
                        int64_t wtimeout_ms, sbl_repl_wait_cb cb, void *arg)
{
    waiter_t *wt = malloc(sizeof(*wt));
    int code;
    const char *msg;
    if (wt == NULL) {
        cb(arg, SBL_E_ExceededMemoryLimit, "out of memory");
        return;
    }
    *wt = (waiter_t){.ts = ts, .w = w, .majority = majority, .cb = cb, .arg = arg,
                     .deadline_ms = wtimeout_ms > 0 ? sbl_now_ms() + wtimeout_ms : INT64_MAX};
    wt->journal = journal;
    atomic_init(&wt->refs, journal ? 2 : 1);
    if (mode != NULL)
        snprintf(wt->mode, sizeof(wt->mode), "%s", mode);
    pthread_mutex_lock(&rs.lock);
    wt->t = entry_term_locked(ts);
    bool lazy = journal && waiter_running && others_keep_up_locked();
    pthread_mutex_unlock(&rs.lock);
    /* asked for first, outside rs.lock: a closing journal calls back at once */
    if (journal && !lazy)
        sbl_storage_on_durable(own_flush_done, wt);
    pthread_mutex_lock(&rs.lock);
    if (wait_over_locked(wt, sbl_now_ms(), &code, &msg)) {
        pthread_mutex_unlock(&rs.lock);
        cb(arg, code, msg);
        if (lazy)
            unref(wt); /* no flush was asked for */
        unref(wt);
        return;
    }
    if (!waiter_running) { /* start-up or shutdown: wait here */
        while (!wait_over_locked(wt, sbl_now_ms(), &code, &msg))
            sbl_rs_wait_pos_locked(WAIT_POLL_MS);
        pthread_mutex_unlock(&rs.lock);
        cb(arg, code, msg);
        unref(wt);
        return;
    }
    wt->listed = true;
    wt->next = waiting;
    waiting = wt;
    pthread_mutex_unlock(&rs.lock);
    if (lazy) /* wt lives on: the flush's reference */
        sbl_storage_on_durable_by(sbl_storage_now_us() + LAZY_FLUSH_US, still_waiting,
                                  own_flush_done, wt);
}

void sbl_repl_await_async(uint64_t ts, int w, bool majority, const char *mode, int64_t wtimeout_ms,
                          sbl_repl_wait_cb cb, void *arg)
{
    await_async(ts, w, majority, false, mode, wtimeout_ms, cb, arg);
}

void sbl_repl_await_majority_journaled(uint64_t ts, int64_t wtimeout_ms, sbl_repl_wait_cb cb,
                                       void *arg)
{
    await_async(ts, 0, true, true, NULL, wtimeout_ms, cb, arg);
}

bool sbl_repl_implicit_wc_majority(void)
{
    if (!sbl_repl_enabled())
        return false;
    pthread_mutex_lock(&rs.lock);
    bool maj = rs.config != NULL && sbl_rs_implicit_majority(&rs.cfg);
    pthread_mutex_unlock(&rs.lock);
    return maj;
}
