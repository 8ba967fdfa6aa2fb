/*
 * wt_prepare.c: waiting out prepared transactions, as mongod does with its
 * prepare conflicts.  WiredTiger answers WT_PREPARE_CONFLICT to a reader or
 * writer of a prepared transaction's update; sbl_wt_err turns it into
 * WriteConflict and notes on the thread the count of prepared transactions
 * resolved so far.  Every commit or rollback of a prepared transaction moves
 * the count and wakes the waiters, who retry from a new snapshot.  An
 * operation that keeps its snapshot (a transaction's read, a getMore) waits
 * in place instead: inside its scope the cursor call that met the prepared
 * write waits and is made again (sbl_prepare_wait_here); an insert, which
 * WiredTiger answers WT_ROLLBACK rather than a prepare conflict, searches
 * its key first (sbl_prepare_wait_key).
 *
 * What must stay true: a waiter never sleeps longer than one slice, so a
 * resolution it missed (the count moved between WiredTiger's answer and the
 * note) costs at most one slice, never a hang.
 */
#include "storage/wt_int.h"

#include "common/clock.h"

#include <pthread.h>
#include <time.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static _Atomic uint64_t resolved;
static _Atomic int64_t outstanding; /* transactions prepared and not resolved */
static _Atomic bool stopping;         /* sbl_prepare_shutdown: nobody waits any more */

static _Thread_local bool tls_no_wait; /* a libuv loop thread: never wait */

static _Thread_local bool tls_conflicted;
static _Thread_local uint64_t tls_gen;
static _Thread_local sbl_prepare_scope_t *tls_scope; /* waits in place */

void sbl_prepare_note_conflict(void)
{
    if (tls_no_wait)
        return;
    tls_conflicted = true;
    tls_gen = atomic_load(&resolved);
}

void sbl_prepare_began(void)
{
    atomic_fetch_add(&outstanding, 1);
}

void sbl_prepare_resolved(void)
{
    pthread_mutex_lock(&mu);
    atomic_fetch_sub(&outstanding, 1);
    atomic_fetch_add(&resolved, 1);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

void sbl_prepare_shutdown(void)
{
    pthread_mutex_lock(&mu);
    atomic_store(&stopping, true);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

bool sbl_prepare_stopping(void)
{
    return atomic_load(&stopping);
}

int64_t sbl_prepare_outstanding(void)
{
    return atomic_load(&outstanding);
}

void sbl_prepare_no_wait(bool on)
{
    tls_no_wait = on;
    tls_conflicted = false;
}

bool sbl_prepare_conflict_take(uint64_t *genp)
{
    bool was = tls_conflicted;
    tls_conflicted = false;
    if (genp != NULL)
        *genp = tls_gen;
    return was;
}

bool sbl_prepare_wait(uint64_t gen, int64_t deadline_us)
{
    int64_t now = sbl_now_us();
    int64_t until = now + SBL_PREPARE_WAIT_SLICE_MS * 1000;
    if (deadline_us != 0 && deadline_us < until)
        until = deadline_us;
    if (until <= now || atomic_load(&stopping))
        return !atomic_load(&stopping);
    /* the condition variable runs on the wall clock: wait as long from now */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + (until - now) * 1000;
    ts.tv_sec += ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    pthread_mutex_lock(&mu);
    while (atomic_load(&resolved) == gen && !atomic_load(&stopping))
        if (pthread_cond_timedwait(&cv, &mu, &ts) != 0)
            break;
    pthread_mutex_unlock(&mu);
    return !atomic_load(&stopping);
}

void sbl_prepare_scope_enter(sbl_prepare_scope_t *sc)
{
    sc->rc = 0;
    sbl_err_clear(&sc->err);
    sc->prev = tls_scope;
    tls_scope = sc;
}

void sbl_prepare_scope_leave(sbl_prepare_scope_t *sc)
{
    tls_scope = sc->prev;
}

bool sbl_prepare_wait_here(void)
{
    sbl_prepare_scope_t *sc = tls_scope;
    int64_t deadline = 0;

    if (sc == NULL || tls_no_wait || sc->rc != 0)
        return false;
    /* Taken after WiredTiger's answer: a resolution in between costs a slice. */
    uint64_t gen = atomic_load(&resolved);
    if ((sc->rc = sc->check(sc->arg, &deadline, &sc->err)) != 0)
        return false;
    if (!sbl_prepare_wait(gen, deadline)) {
        sc->rc = sbl_err_set(&sc->err, SBL_E_InterruptedAtShutdown, "interrupted at shutdown");
        return false;
    }
    return true;
}

int sbl_prepare_wait_key(WT_CURSOR *cur)
{
    WT_ITEM k;
    int ret;

    if (tls_scope == NULL || tls_no_wait || atomic_load(&outstanding) == 0)
        return 0;
    if ((ret = cur->get_key(cur, &k)) != 0)
        return ret;
    do
        ret = cur->search(cur);
    while (ret == WT_PREPARE_CONFLICT && sbl_prepare_wait_here());
    if (ret != 0 && ret != WT_NOTFOUND)
        return ret;
    /* found: the insert answers WT_DUPLICATE_KEY */
    cur->set_key(cur, &k);
    return 0;
}
