/*
 * shard_crit.c: the migration critical section.  Routed commands (those
 * carrying shardVersion) count themselves in and out per namespace bucket;
 * a migration that enters ns's critical section stops new ones at the door
 * and waits for the bucket to empty, so when it returns no routed command
 * on ns is running and none starts until sbl_shard_crit_exit.
 *
 * What must stay true: op_enter and op_exit pair up on the same ns (the
 * dispatcher calls both); a waiting command gives up at its deadline and
 * runs on (its version check then refuses it with StaleConfig once the
 * migration has committed).
 */
#include "shard/shard.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define BUCKETS 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int inflight[BUCKETS];
static bool crit;
static char crit_ns[256];
static atomic_bool migrating;

static unsigned bucket(const char *ns)
{
    unsigned h = 5381;
    for (const unsigned char *p = (const unsigned char *)ns; *p; p++)
        h = h * 33 + *p;
    return h % BUCKETS;
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void sbl_shard_op_enter(const char *ns, int64_t deadline_us)
{
    if (deadline_us <= 0)
        deadline_us = mono_us() + 30 * 1000000LL;
    pthread_mutex_lock(&mu);
    while (crit && strcmp(crit_ns, ns) == 0 && mono_us() < deadline_us) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L; /* re-check the deadline every 20 ms */
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&cv, &mu, &ts);
    }
    inflight[bucket(ns)]++;
    pthread_mutex_unlock(&mu);
}

void sbl_shard_op_exit(const char *ns)
{
    pthread_mutex_lock(&mu);
    inflight[bucket(ns)]--;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

void sbl_shard_crit_enter(const char *ns)
{
    unsigned b = bucket(ns);
    pthread_mutex_lock(&mu);
    snprintf(crit_ns, sizeof(crit_ns), "%s", ns);
    crit = true;
    while (inflight[b] > 0)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

void sbl_shard_crit_exit(void)
{
    pthread_mutex_lock(&mu);
    crit = false;
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
