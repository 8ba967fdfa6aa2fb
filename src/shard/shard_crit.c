/*
 * shard_crit.c: the migration critical section.  Routed commands (those
 * carrying shardVersion) count themselves in and out per namespace bucket;
 * a migration that enters ns's critical section stops new ones at the door
 * and waits for the bucket to empty, so when it returns no routed command
 * on ns is running and none starts until sbl_shard_crit_exit.
 *
 * What must stay true: op_exit follows every op_enter that returned 0, on
 * the same ns (the dispatcher calls both); a command that waited too long
 * for a critical section does not run at all: it answers StaleConfig, so
 * nothing changes the range between the recipient's last catch-up and the
 * commit.
 */
#include "shard/shard.h"
#include "shard/shard_int.h"

#include "common/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUCKETS 64
/* How long a routed command waits for a critical section: short, because it
 * holds a worker thread meanwhile, and the migration's own commands need
 * workers too.  The router retries StaleConfig (refreshing) a few times. */
#define CRIT_WAIT_US (2 * 1000000LL)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static atomic_int inflight[BUCKETS];
static atomic_bool crit;
static char crit_ns[256]; /* under mu */
static atomic_bool migrating;

static unsigned bucket(const char *ns)
{
    return shard_bucket(ns, BUCKETS);
}

static void wait_ms(int ms)
{
    struct timespec ts = sbl_deadline_in_ms(ms);
    pthread_cond_timedwait(&cv, &mu, &ts);
}

/* The fast path is two atomic operations: count in, see no critical
 * section.  (Sequentially consistent: a critical section that starts after
 * the count sees it; one that started before is seen here.) */
int sbl_shard_op_enter(const char *ns, int64_t deadline_us, sbl_err_t *err)
{
    unsigned b = bucket(ns);
    if (!sbl_shard_metadata_known()) { /* a new primary: recovery goes first */
        int64_t until = sbl_now_us() + CRIT_WAIT_US;
        if (deadline_us > 0 && deadline_us < until)
            until = deadline_us;
        while (!sbl_shard_metadata_known() && sbl_now_us() < until)
            usleep(10 * 1000);
        if (!sbl_shard_metadata_known())
            return sbl_err_set(err, SBL_E_StaleConfig, "sharding status of collection %s is "
                               "not currently known and needs to be recovered (this member "
                               "has just become primary)", ns);
    }
    for (;;) {
        atomic_fetch_add(&inflight[b], 1);
        if (!atomic_load(&crit))
            return 0;
        pthread_mutex_lock(&mu);
        if (!atomic_load(&crit) || strcmp(crit_ns, ns) != 0) {
            pthread_mutex_unlock(&mu);
            return 0;
        }
        /* ours: step back out and wait for the critical section to end */
        atomic_fetch_sub(&inflight[b], 1);
        pthread_cond_broadcast(&cv);
        int64_t until = sbl_now_us() + CRIT_WAIT_US;
        if (deadline_us > 0 && deadline_us < until)
            until = deadline_us;
        while (atomic_load(&crit) && strcmp(crit_ns, ns) == 0 && sbl_now_us() < until)
            wait_ms(20);
        bool timed_out = atomic_load(&crit) && strcmp(crit_ns, ns) == 0;
        pthread_mutex_unlock(&mu);
        if (timed_out) /* not counted in: the command does not run */
            return sbl_err_set(err, SBL_E_StaleConfig, "migration critical section in "
                               "progress for %s", ns);
    }
}

void sbl_shard_op_exit(const char *ns)
{
    unsigned b = bucket(ns);
    if (atomic_fetch_sub(&inflight[b], 1) == 1 && atomic_load(&crit)) {
        pthread_mutex_lock(&mu);
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
}

int sbl_shard_crit_enter(const char *ns, int64_t deadline_us, sbl_err_t *err)
{
    unsigned b = bucket(ns);
    pthread_mutex_lock(&mu);
    snprintf(crit_ns, sizeof(crit_ns), "%s", ns);
    atomic_store(&crit, true);
    while (atomic_load(&inflight[b]) > 0 && sbl_now_us() < deadline_us)
        wait_ms(10); /* op_exit signals without the lock: re-check often */
    bool drained = atomic_load(&inflight[b]) == 0;
    if (!drained) { /* give up: the commands held at the door go on */
        atomic_store(&crit, false);
        crit_ns[0] = '\0';
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
    if (!drained)
        return sbl_err_set(err, SBL_E_ExceededTimeLimit, "the commands running on %s did not "
                           "finish in time for the migration's critical section", ns);
    return 0;
}

void sbl_shard_crit_exit(void)
{
    pthread_mutex_lock(&mu);
    atomic_store(&crit, false);
    crit_ns[0] = '\0';
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

bool sbl_shard_migration_active(void)
{
    return atomic_load_explicit(&migrating, memory_order_relaxed);
}

void sbl_shard_set_migration_active(bool on)
{
    atomic_store(&migrating, on);
}
