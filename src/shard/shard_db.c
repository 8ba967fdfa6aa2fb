/*
 * shard_db.c: database versions and movePrimary's critical section on a
 * shard.  config.databases gives each database a version {uuid, timestamp,
 * lastMod}; a router sends the one it routed with (databaseVersion) with
 * every command for an unsharded collection, to the shard it takes for the
 * primary.  This shard accepts it only when the config servers name this
 * shard as the primary with that very version (cached after the first read;
 * a mismatch re-reads once), else StaleDbVersion (249, with db, vReceived and
 * vWanted) sends the router to refresh the database and retry.
 *
 * movePrimary's donor holds the database's critical section from before the
 * copy until after the commit: routed commands carrying its databaseVersion
 * wait at the door (at most DB_WAIT_US each, then StaleDbVersion), and the
 * section is entered only once those already inside have left.  It is a
 * lease: the router renews it as it copies; one not renewed for its length
 * (a router that died) ends by itself, so nothing blocks forever.
 *
 * What must stay true: whenever the section ends (exit, or its lease ran
 * out) the cached version is forgotten, so a command let in afterwards
 * checks against the config servers' entry as it is then (the new primary
 * after a commit: this shard refuses it).  A refresh and a forget are
 * serialised (refresh_mu), so a refresh that read before a commit cannot
 * store its old version after the forget.
 */
#include "shard/shard_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "doc/doc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUCKETS 64
/* How long a routed command waits for a database's critical section (it
 * holds a worker meanwhile); the router retries StaleDbVersion a few times. */
#define DB_WAIT_US (5 * 1000000LL)

typedef struct dbv {
    char db[128];
    bool primary; /* the config servers name this shard; else the version is not ours */
    uint8_t uuid[16];
    uint32_t ts_t, ts_i;
    int64_t lastmod;
} dbv_t;

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_mutex_t refresh_mu = PTHREAD_MUTEX_INITIALIZER;
static dbv_t *cache;
static size_t ncache;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* before refresh_mu, never after */
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static atomic_int inflight[BUCKETS];
static atomic_bool crit;
static atomic_bool announced; /* a section is held or about to be: routed commands go to workers */
static char crit_db[128];     /* under mu */
static int64_t crit_until_us; /* under mu: the lease's end (sbl_now_us) */

static unsigned bucket(const char *db)
{
    return shard_bucket(db, BUCKETS);
}

static void wait_ms(int ms)
{
    struct timespec ts = sbl_deadline_in_ms(ms);
    pthread_cond_timedwait(&cv, &mu, &ts);
}

/* ---- versions ---- */

/* A version document {uuid, timestamp, lastMod} into v (fields absent stay 0). */
static void parse(const bson_t *d, dbv_t *v)
{
    bson_iter_t it;
    if (d == NULL || !bson_iter_init(&it, d))
        return;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "uuid") == 0 && BSON_ITER_HOLDS_BINARY(&it)) {
            bson_subtype_t st;
            uint32_t len;
            const uint8_t *data;
            bson_iter_binary(&it, &st, &len, &data);
            if (len == 16)
                memcpy(v->uuid, data, 16);
        } else if (strcmp(k, "timestamp") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, &v->ts_t, &v->ts_i);
        } else if (strcmp(k, "lastMod") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
            v->lastmod = bson_iter_as_int64(&it);
        }
    }
}

static bool same(const dbv_t *a, const dbv_t *b)
{
    return memcmp(a->uuid, b->uuid, 16) == 0 && a->ts_t == b->ts_t && a->ts_i == b->ts_i &&
           a->lastmod == b->lastmod;
}

static void append(bson_t *d, const char *k, const dbv_t *v)
{
    bson_t s;
    BSON_APPEND_DOCUMENT_BEGIN(d, k, &s);
    bson_append_binary(&s, "uuid", -1, BSON_SUBTYPE_UUID, v->uuid, 16);
    BSON_APPEND_TIMESTAMP(&s, "timestamp", v->ts_t, v->ts_i);
    BSON_APPEND_INT32(&s, "lastMod", (int32_t)v->lastmod);
    bson_append_document_end(d, &s);
}

static bool cached(const char *db, dbv_t *out)
{
    bool found = false;
    pthread_rwlock_rdlock(&lock);
    for (size_t i = 0; i < ncache && !found; i++)
        if (strcmp(cache[i].db, db) == 0) {
            *out = cache[i];
            found = true;
        }
    pthread_rwlock_unlock(&lock);
    return found;
}

void shard_db_forget(const char *db)
{
    pthread_mutex_lock(&refresh_mu);
    pthread_rwlock_wrlock(&lock);
    for (size_t i = 0; i < ncache;)
        if (db == NULL || strcmp(cache[i].db, db) == 0)
            cache[i] = cache[--ncache];
        else
            i++;
    pthread_rwlock_unlock(&lock);
    pthread_mutex_unlock(&refresh_mu);
}

/* Read db's entry from config.databases into the cache. */
static int refresh(const char *db, sbl_err_t *err)
{
    dbv_t v;
    memset(&v, 0, sizeof(v));
    snprintf(v.db, sizeof(v.db), "%s", db);
    bson_t f = BSON_INITIALIZER, r;
    BSON_APPEND_UTF8(&f, "_id", db);
    pthread_mutex_lock(&refresh_mu);
    int rc = shard_cfg_find("databases", &f, NULL, &r, err);
    bson_destroy(&f);
    if (rc == 0) {
        bson_iter_t it;
        bson_t d, ver;
        const char *me = sbl_shard_name(), *primary;
        if (bson_iter_init(&it, &r) && bson_iter_find_descendant(&it, "cursor.firstBatch.0", &it) &&
            sbl_iter_doc(&it, &d) && (primary = sbl_doc_utf8(&d, "primary")) != NULL &&
            me != NULL && strcmp(primary, me) == 0 && bson_iter_init_find(&it, &d, "version") &&
            sbl_iter_doc(&it, &ver)) {
            v.primary = true;
            parse(&ver, &v);
        }
        bson_destroy(&r);
        pthread_rwlock_wrlock(&lock);
        size_t i;
        for (i = 0; i < ncache && strcmp(cache[i].db, db) != 0; i++)
            ;
        if (i == ncache) {
            dbv_t *n = realloc(cache, (ncache + 1) * sizeof(*cache));
            if (n != NULL) {
                cache = n;
                ncache++;
            } else {
                i = SIZE_MAX; /* not cached: the next check reads again */
            }
        }
        if (i != SIZE_MAX)
            cache[i] = v;
        pthread_rwlock_unlock(&lock);
    }
    pthread_mutex_unlock(&refresh_mu);
    return rc;
}

/* Check received (a router's databaseVersion) against this shard's version of db. */
static int check(const char *db, const bson_t *received, bson_t *info, sbl_err_t *err)
{
    dbv_t r, w;
    memset(&r, 0, sizeof(r));
    parse(received, &r);
    if (cached(db, &w) && w.primary && same(&r, &w))
        return 0;
    SBL_RET(refresh(db, err));
    memset(&w, 0, sizeof(w));
    if (cached(db, &w) && w.primary && same(&r, &w))
        return 0;
    BSON_APPEND_UTF8(info, "db", db);
    append(info, "vReceived", &r);
    if (w.primary)
        append(info, "vWanted", &w);
    if (!w.primary)
        return sbl_err_set(err, SBL_E_StaleDbVersion, "database %s is not on this shard (%s): "
                           "its primary moved or it was dropped", db, sbl_shard_name());
    return sbl_err_set(err, SBL_E_StaleDbVersion, "version mismatch for database %s: received "
                       "lastMod %lld, wanted %lld", db, (long long)r.lastmod,
                       (long long)w.lastmod);
}

/* ---- the critical section ---- */

/* End a section whose lease ran out (mu held): as an exit, the version is forgotten. */
static void expire_locked(void)
{
    if (!atomic_load(&crit) || sbl_now_us() < crit_until_us)
        return;
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "db", crit_db);
    sbl_log(SBL_LOG_WARNING, "SHARDING", 0, "movePrimary's critical section was not renewed "
            "in time and ends", &attr);
    bson_destroy(&attr);
    shard_db_forget(crit_db);
    atomic_store(&crit, false);
    atomic_store(&announced, false);
    crit_db[0] = '\0';
    pthread_cond_broadcast(&cv);
}

int sbl_shard_db_enter(const char *db, const bson_t *dbv, bson_t *info, sbl_err_t *err)
{
    unsigned b = bucket(db);
    int64_t until = sbl_now_us() + DB_WAIT_US;
    for (;;) {
        atomic_fetch_add(&inflight[b], 1);
        if (!atomic_load(&crit))
            break;
        pthread_mutex_lock(&mu);
        expire_locked();
        if (!atomic_load(&crit) || strcmp(crit_db, db) != 0) {
            pthread_mutex_unlock(&mu);
            break;
        }
        /* ours: step back out and wait for the section to end */
        atomic_fetch_sub(&inflight[b], 1);
        pthread_cond_broadcast(&cv);
        while (atomic_load(&crit) && strcmp(crit_db, db) == 0 && sbl_now_us() < until) {
            wait_ms(20);
            expire_locked();
        }
        bool held = atomic_load(&crit) && strcmp(crit_db, db) == 0;
        pthread_mutex_unlock(&mu);
        if (held) { /* not counted in: the command does not run */
            dbv_t r;
            memset(&r, 0, sizeof(r));
            parse(dbv, &r);
            BSON_APPEND_UTF8(info, "db", db);
            append(info, "vReceived", &r);
            return sbl_err_set(err, SBL_E_StaleDbVersion, "movePrimary critical section in "
                               "progress for database %s", db);
        }
    }
    if (sbl_shard_configsvr() == NULL)
        return 0; /* not in a cluster yet: nothing to compare with */
    int rc = check(db, dbv, info, err);
    if (rc != 0)
        sbl_shard_db_exit(db);
    return rc;
}

void sbl_shard_db_exit(const char *db)
{
    unsigned b = bucket(db);
    if (atomic_fetch_sub(&inflight[b], 1) == 1 && atomic_load(&crit)) {
        pthread_mutex_lock(&mu);
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
}

int sbl_shard_db_crit_enter(const char *db, int64_t lease_ms, bool renew, sbl_err_t *err)
{
    unsigned b = bucket(db);
    pthread_mutex_lock(&mu);
    expire_locked();
    bool held = atomic_load(&crit);
    if (held && strcmp(crit_db, db) != 0) {
        pthread_mutex_unlock(&mu);
        return sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "movePrimary of database "
                           "%s is in progress on this shard", crit_db);
    }
    if (renew || held) {
        if (held)
            crit_until_us = sbl_now_us() + lease_ms * 1000;
        pthread_mutex_unlock(&mu);
        if (!held)
            return sbl_err_set(err, SBL_E_ExceededTimeLimit, "movePrimary's critical section "
                               "for database %s ended (its lease ran out, or this member "
                               "became primary since)", db);
        return 0;
    }
    /* Commands dispatched from now on run on workers (sbl_shard_db_crit_active);
     * those a loop thread took just before are inside the gate by the time
     * the pause ends, so none waits at the door on a loop thread. */
    atomic_store(&announced, true);
    usleep(20 * 1000);
    snprintf(crit_db, sizeof(crit_db), "%s", db);
    crit_until_us = sbl_now_us() + lease_ms * 1000;
    atomic_store(&crit, true);
    while (atomic_load(&inflight[b]) > 0 && sbl_now_us() < crit_until_us)
        wait_ms(10); /* db_exit signals without the lock: re-check often */
    bool drained = atomic_load(&inflight[b]) == 0;
    if (!drained) { /* give up: the commands held at the door go on */
        atomic_store(&crit, false);
        atomic_store(&announced, false);
        crit_db[0] = '\0';
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
    if (!drained)
        return sbl_err_set(err, SBL_E_ExceededTimeLimit, "the commands running on database %s "
                           "did not finish in time for movePrimary's critical section", db);
    return 0;
}

void sbl_shard_db_crit_exit(const char *db)
{
    pthread_mutex_lock(&mu);
    if (atomic_load(&crit) && strcmp(crit_db, db) == 0) {
        atomic_store(&crit, false);
        atomic_store(&announced, false);
        crit_db[0] = '\0';
        pthread_cond_broadcast(&cv);
    }
    shard_db_forget(db); /* the commit may have moved it: read it again */
    pthread_mutex_unlock(&mu);
}

bool sbl_shard_db_crit_active(void)
{
    return atomic_load_explicit(&announced, memory_order_relaxed);
}
