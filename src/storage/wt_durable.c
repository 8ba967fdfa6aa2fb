/*
 * wt_durable.c: the background threads: the journal flusher (group commit)
 * and the checkpointer, which also retries table drops WiredTiger refused.
 *
 * What must stay true:
 *  - A waiter is called only after a log_flush("sync=on") that started after
 *    the waiter was queued, so every commit before sbl_storage_on_durable()
 *    is on disk; all waiters queued before a flush share it.
 *  - Neither thread spins: both sleep on a condition variable with a timeout
 *    (commit_interval_ms; syncdelay or 1 s while drops are pending).
 *  - At stop the flusher serves every queued waiter after a final flush.
 */
#include "storage/wt_int.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"

static void deadline_in_ms(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- table drops ---------------------------------------------------- */

void sbl_drop_table(WT_SESSION *wt, const char *uri)
{
    int ret = wt->drop(wt, uri, "force=true");

    if (ret == 0)
        return;
    /* EBUSY: some session still has a cursor open on it (a scan, or a cached
     * cursor of an idle thread).  Retry in the background. */
    sbl_pending_drop_t *d = bson_malloc0(sizeof(*d));
    d->uri = bson_strdup(uri);
    pthread_mutex_lock(&sbl_eng.bg_lock);
    d->next = sbl_eng.drops;
    sbl_eng.drops = d;
    pthread_cond_signal(&sbl_eng.bg_cond);
    pthread_mutex_unlock(&sbl_eng.bg_lock);
}

size_t sbl_drop_retry(WT_SESSION *wt)
{
    sbl_pending_drop_t *list, *d, *keep = NULL;
    size_t left = 0;

    pthread_mutex_lock(&sbl_eng.bg_lock);
    list = sbl_eng.drops;
    sbl_eng.drops = NULL;
    pthread_mutex_unlock(&sbl_eng.bg_lock);
    while ((d = list) != NULL) {
        list = d->next;
        if (wt->drop(wt, d->uri, "force=true") == 0) {
            bson_free(d->uri);
            bson_free(d);
        } else {
            d->next = keep;
            keep = d;
            left++;
        }
    }
    pthread_mutex_lock(&sbl_eng.bg_lock);
    while ((d = keep) != NULL) {
        keep = d->next;
        d->next = sbl_eng.drops;
        sbl_eng.drops = d;
    }
    pthread_mutex_unlock(&sbl_eng.bg_lock);
    return left;
}

/* ---- checkpoints ------------------------------------------------------ */

/* Serializes checkpoints, so two savers of the sizes rows never conflict.
 * (rollback_to_stable takes it too: WiredTiger refuses it during a
 * checkpoint.)  Lock order: sbl_ckpt_mutex, then the catalog lock. */
pthread_mutex_t sbl_ckpt_mutex = PTHREAD_MUTEX_INITIALIZER;
/* When the last checkpoint ended (now_s()): the periodic one comes
 * syncdelay seconds after any checkpoint, an fsync command's included, so
 * a checkpoint just taken by hand is not followed by another at once (a
 * member's: the first slot of its phase half a syncdelay after it,
 * checkpoint_due). */
static _Atomic double ckpt_done_s;
/* sbl_storage_set_checkpoint_phase's; < 0: none. */
static _Atomic double ckpt_phase = -1.0;

void sbl_storage_set_checkpoint_phase(double phase)
{
    atomic_store(&ckpt_phase, phase >= 0 && phase < 1 ? phase : -1.0);
}

double sbl_storage_checkpoint_slot(double earliest, double period, double phase)
{
    double offset = phase * period;
    double slot = floor((earliest - offset) / period) * period + offset;
    return slot < earliest ? slot + period : slot;
}

/* When the periodic checkpoint after one that ended at last is due
 * (now_s()'s clock): syncdelay later, or with a phase the first slot of
 * the wall clock's grid at least half a syncdelay later (members' clocks
 * on one host agree, so their slots stay apart however their start times
 * and checkpoints' lengths differ; a checkpoint taken by hand still puts
 * the next half a period off at least). */
static double checkpoint_due(double last)
{
    double period = sbl_eng.syncdelay_s, phase = atomic_load(&ckpt_phase);
    if (phase < 0)
        return last + period;
    double now = now_s(), wall = (double)sbl_now_ms() / 1000.0;
    double slot = sbl_storage_checkpoint_slot(wall + (last + period / 2 - now), period, phase);
    return now + (slot - wall);
}

/* Save the counts, then checkpoint.  wt belongs to the caller. */
static int checkpoint_on(WT_SESSION *wt, sbl_err_t *err)
{
    int ret, rc;

    pthread_mutex_lock(&sbl_ckpt_mutex);
    pthread_rwlock_rdlock(&sbl_eng.cat_lock);
    rc = sbl_catalog_save_sizes(wt, false, err);
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    if (rc == 0 && (ret = wt->checkpoint(wt, NULL)) != 0)
        rc = sbl_wt_err(err, ret, "checkpoint");
    if (rc == 0)
        atomic_store(&ckpt_done_s, now_s());
    pthread_mutex_unlock(&sbl_ckpt_mutex);
    return rc;
}

int sbl_storage_checkpoint(sbl_err_t *err)
{
    sbl_session_t *s = sbl_session_get();

    if (s == NULL)
        return sbl_err_set(err, SBL_E_ShutdownInProgress, "storage engine is not open");
    if (s->in_txn)
        return sbl_err_set(err, SBL_E_IllegalOperation,
                           "cannot checkpoint inside a transaction");
    return checkpoint_on(s->wt, err);
}

static void *checkpoint_main(void *arg)
{
    sbl_thread_name("Checkpointer");
    WT_SESSION *wt = sbl_eng.ckpt_wt;
    double last = now_s();
    struct timespec ts;
    sbl_err_t err;

    pthread_mutex_lock(&sbl_eng.bg_lock);
    while (!sbl_eng.bg_stop) {
        long wait_ms = sbl_eng.drops != NULL ? 1000 : 3600 * 1000L;
        if (sbl_eng.syncdelay_s > 0) {
            long until = (long)((checkpoint_due(last) - now_s()) * 1000.0) + 1;
            if (until < wait_ms)
                wait_ms = until > 0 ? until : 0;
        }
        deadline_in_ms(&ts, wait_ms);
        pthread_cond_timedwait(&sbl_eng.bg_cond, &sbl_eng.bg_lock, &ts);
        if (sbl_eng.bg_stop)
            break;
        bool drops = sbl_eng.drops != NULL;
        pthread_mutex_unlock(&sbl_eng.bg_lock);
        if (drops)
            sbl_drop_retry(wt);
        /* An fsync's checkpoint during the wait moves the next one on (the
         * wait above may then have ended early: the loop waits again). */
        double done = atomic_load(&ckpt_done_s);
        if (done > last)
            last = done;
        if (sbl_eng.syncdelay_s > 0 && now_s() >= checkpoint_due(last)) {
            if (checkpoint_on(wt, &err) != 0)
                sbl_log(SBL_LOG_WARNING, "STORAGE", 22430, err.msg, NULL);
            else
                sbl_backup_log_removal(wt);
            last = now_s();
        }
        pthread_mutex_lock(&sbl_eng.bg_lock);
    }
    pthread_mutex_unlock(&sbl_eng.bg_lock);
    return NULL;
}

/* ---- the journal flusher (group commit) ----------------------------- */

static _Atomic(int (*)(void)) flush_hook;

void sbl_storage_set_flush_hook(int (*fn)(void))
{
    atomic_store(&flush_hook, fn);
}

int64_t sbl_storage_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void deadline_at_us(struct timespec *ts, int64_t us)
{
    ts->tv_sec = us / 1000000;
    ts->tv_nsec = (us % 1000000) * 1000;
}

/* A delayed request's flusher wakes at most this often: most are answered
 * before they come due (repl_wait.c), and a wake-up for each would cost
 * about what the flushes they save do. */
#define LATER_GRAIN_US 1000

static void on_durable(int64_t due_us, bool (*wanted)(void *), void (*cb)(void *arg, int rc),
                       void *arg)
{
    sbl_waiter_t *w;

    pthread_mutex_lock(&sbl_eng.fl_lock);
    if (!sbl_eng.fl_started || sbl_eng.fl_stop) {
        /* Closing or closed: the final flush has covered every commit. */
        pthread_mutex_unlock(&sbl_eng.fl_lock);
        cb(arg, 0);
        return;
    }
    w = bson_malloc(sizeof(*w));
    w->cb = cb;
    w->arg = arg;
    w->due_us = due_us;
    w->wanted = wanted;
    w->next = NULL;
    if (due_us > 0) { /* the flusher sees it at its next wake-up: no signal */
        w->next = sbl_eng.later;
        sbl_eng.later = w;
    } else {
        *sbl_eng.waiters_tail = w;
        sbl_eng.waiters_tail = &w->next;
        pthread_cond_signal(&sbl_eng.fl_cond);
    }
    pthread_mutex_unlock(&sbl_eng.fl_lock);
}

void sbl_storage_on_durable(void (*cb)(void *arg, int rc), void *arg)
{
    on_durable(0, NULL, cb, arg);
}

void sbl_storage_on_durable_by(int64_t due_us, bool (*wanted)(void *arg),
                               void (*cb)(void *arg, int rc), void *arg)
{
    on_durable(due_us > 0 ? due_us : 1, wanted, cb, arg);
}

/* Under fl_lock: move the delayed requests due by now (all: every one) to
 * *due; the earliest left's due time into *nextp (INT64_MAX: none). */
static void take_later(int64_t now, bool every, sbl_waiter_t **due, int64_t *nextp)
{
    sbl_waiter_t **pp = &sbl_eng.later;
    *nextp = INT64_MAX;
    while (*pp != NULL) {
        sbl_waiter_t *w = *pp;
        if (every || w->due_us <= now) {
            *pp = w->next;
            w->next = *due;
            *due = w;
        } else {
            if (w->due_us < *nextp)
                *nextp = w->due_us;
            pp = &w->next;
        }
    }
}

static void call_back(sbl_waiter_t *list, int rc)
{
    while (list != NULL) {
        sbl_waiter_t *w = list;
        list = w->next;
        w->cb(w->arg, rc);
        bson_free(w);
    }
}

static void *flusher_main(void *arg)
{
    sbl_thread_name("JournalFlusher");
    WT_SESSION *wt = sbl_eng.fl_wt;
    uint64_t flushed_commits = 0;
    int64_t flushed_us = sbl_storage_now_us();
    struct timespec ts;
    bool stop = false;

    pthread_mutex_lock(&sbl_eng.fl_lock);
    while (!stop) {
        sbl_waiter_t *due = NULL;
        int64_t now = sbl_storage_now_us(), next;
        take_later(now, false, &due, &next);
        if (sbl_eng.waiters == NULL && due == NULL && !sbl_eng.fl_stop) {
            int64_t interval = (int64_t)sbl_eng.commit_interval_ms * 1000;
            int64_t until = flushed_us + interval > now ? flushed_us + interval : now + interval;
            if (next != INT64_MAX) {
                int64_t at = next > now + LATER_GRAIN_US ? next : now + LATER_GRAIN_US;
                if (at < until)
                    until = at;
            }
            deadline_at_us(&ts, until);
            pthread_cond_timedwait(&sbl_eng.fl_cond, &sbl_eng.fl_lock, &ts);
            take_later(sbl_storage_now_us(), false, &due, &next);
        }
        stop = sbl_eng.fl_stop;
        sbl_waiter_t *batch = sbl_eng.waiters;
        sbl_eng.waiters = NULL;
        sbl_eng.waiters_tail = &sbl_eng.waiters;
        pthread_mutex_unlock(&sbl_eng.fl_lock);

        /* Delayed requests that came due: those still wanted make a flush;
         * the others end unflushed, unless a flush is made anyway. */
        sbl_waiter_t *skipped = NULL;
        for (sbl_waiter_t *w = due, *nx; w != NULL; w = nx) {
            nx = w->next;
            if (w->wanted == NULL || w->wanted(w->arg)) {
                w->next = batch;
                batch = w;
            } else {
                w->next = skipped;
                skipped = w;
            }
        }

        /* Read the commit count before flushing: everything counted is in
         * the log buffer already, so this flush makes it durable.  Commits
         * nobody asked about are flushed every commit interval (a wake-up
         * for delayed requests that were not wanted is not one). */
        uint64_t commits = atomic_load(&sbl_eng.commits);
        int64_t now_us = sbl_storage_now_us();
        bool periodic = now_us - flushed_us >= (int64_t)sbl_eng.commit_interval_ms * 1000;
        bool flush = batch != NULL || (periodic && commits != flushed_commits) || stop;
        if (flush) { /* it covers every request made so far, delayed ones too */
            pthread_mutex_lock(&sbl_eng.fl_lock);
            take_later(0, true, &batch, &next);
            pthread_mutex_unlock(&sbl_eng.fl_lock);
            for (sbl_waiter_t *w = skipped, *nx; w != NULL; w = nx) {
                nx = w->next;
                w->next = batch;
                batch = w;
            }
            skipped = NULL;
        }
        int rc = 0;
        if (flush) {
            flushed_us = now_us;
            int ret = wt->log_flush(wt, "sync=on");
            if (ret != 0) {
                sbl_err_t err;
                rc = sbl_wt_err(&err, ret, "journal flush");
                sbl_log(SBL_LOG_ERROR, "STORAGE", 22431, err.msg, NULL);
            } else
                flushed_commits = commits;
        }
        int (*hook)(void) = atomic_load(&flush_hook);
        if (hook != NULL && rc == 0) {
            int e = hook();
            if (e != 0) {
                sbl_err_t err;
                rc = sbl_err_set(&err, SBL_E_InternalError, "audit log sync failed: %s",
                                 strerror(e));
                sbl_log(SBL_LOG_ERROR, "STORAGE", 22431, err.msg, NULL);
            }
        }
        /* A failed flush is reported to its waiters: their writes are not
         * known to be on disk and must not be acknowledged as journaled. */
        call_back(batch, rc);
        call_back(skipped, SBL_FLUSH_SKIPPED);
        pthread_mutex_lock(&sbl_eng.fl_lock);
    }
    pthread_mutex_unlock(&sbl_eng.fl_lock);
    return NULL;
}

int sbl_storage_flush(sbl_err_t *err)
{
    sbl_session_t *s = sbl_session_get();
    int ret;

    if (s == NULL)
        return sbl_err_set(err, SBL_E_ShutdownInProgress, "storage engine is not open");
    if ((ret = s->wt->log_flush(s->wt, "sync=on")) != 0)
        return sbl_wt_err(err, ret, "journal flush");
    return 0;
}

int sbl_bg_start(sbl_err_t *err)
{
    WT_CONNECTION *conn = sbl_eng.conn;
    int ret;

    if ((ret = conn->open_session(conn, NULL, NULL, &sbl_eng.fl_wt)) != 0 ||
        (ret = conn->open_session(conn, NULL, NULL, &sbl_eng.ckpt_wt)) != 0)
        return sbl_wt_err(err, ret, "open background session");
    pthread_mutex_lock(&sbl_eng.fl_lock);
    if ((ret = pthread_create(&sbl_eng.fl_thread, NULL, flusher_main, NULL)) == 0)
        sbl_eng.fl_started = true;
    pthread_mutex_unlock(&sbl_eng.fl_lock);
    if (ret != 0)
        return sbl_err_set(err, SBL_E_InternalError, "cannot start the journal flusher: %s",
                           strerror(ret));
    if ((ret = pthread_create(&sbl_eng.ckpt_thread, NULL, checkpoint_main, NULL)) != 0)
        return sbl_err_set(err, SBL_E_InternalError, "cannot start the checkpointer: %s",
                           strerror(ret));
    sbl_eng.ckpt_started = true;
    return 0;
}

void sbl_bg_stop(void)
{
    if (sbl_eng.ckpt_started) {
        pthread_mutex_lock(&sbl_eng.bg_lock);
        sbl_eng.bg_stop = true;
        pthread_cond_signal(&sbl_eng.bg_cond);
        pthread_mutex_unlock(&sbl_eng.bg_lock);
        pthread_join(sbl_eng.ckpt_thread, NULL);
        sbl_eng.ckpt_started = false;
    }
    if (sbl_eng.fl_started) {
        pthread_mutex_lock(&sbl_eng.fl_lock);
        sbl_eng.fl_stop = true;
        pthread_cond_signal(&sbl_eng.fl_cond);
        pthread_mutex_unlock(&sbl_eng.fl_lock);
        pthread_join(sbl_eng.fl_thread, NULL);
        pthread_mutex_lock(&sbl_eng.fl_lock);
        sbl_eng.fl_started = false;
        pthread_mutex_unlock(&sbl_eng.fl_lock);
    }
    if (sbl_eng.fl_wt != NULL)
        sbl_eng.fl_wt->close(sbl_eng.fl_wt, NULL);
    if (sbl_eng.ckpt_wt != NULL)
        sbl_eng.ckpt_wt->close(sbl_eng.ckpt_wt, NULL);
    sbl_eng.fl_wt = sbl_eng.ckpt_wt = NULL;
}
