/*
 * repl_preimages.c: the pre-image remover, as mongod's.  Every member
 * stores the pre-images of changes to collections with
 * changeStreamPreAndPostImages in config.system.preimages (repl_oplog.c);
 * a thread on every member wakes every
 * expiredChangeStreamPreImageRemovalJobSleepSecs (10 s unless set) and
 * deletes the images no change stream can use any more:
 *  - those whose oplog entry is gone (ts before the oldest entry of
 *    local.oplog.rs: a stream that far back fails with
 *    ChangeStreamHistoryLost anyway);
 *  - when the cluster parameter changeStreamOptions sets
 *    preAndPostImages.expireAfterSeconds (config.clusterParameters), those
 *    whose operationTime (the write's wall clock) is older than that.
 * The deletes are not logged: each member removes its own images.
 *
 * What must stay true: an image is deleted only when one of those rules
 * holds for it, checked again inside the deleting transaction.
 */
#include "repl/repl_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_t thread;
static bool started;
static atomic_bool stop;
static int sleep_s = 10;
static _Atomic uint64_t removals;     /* passes that deleted images */
static _Atomic uint64_t removed_upto; /* the newest entry whose image was deleted */

uint64_t sbl_repl_preimage_removals(void)
{
    return atomic_load_explicit(&removals, memory_order_acquire);
}

uint64_t sbl_repl_preimages_removed_upto(void)
{
    return atomic_load_explicit(&removed_upto, memory_order_acquire);
}

int sbl_repl_oplog_oldest_ts(sbl_session_t *s, uint64_t *tsp, sbl_err_t *err)
{
    sbl_coll_t *oplog = NULL;
    sbl_scan_t *scan = NULL;
    bson_t doc;
    bool done = false;
    bson_iter_t it;
    *tsp = 0;
    SBL_RET(sbl_coll_open(s, SBL_OPLOG_NS, false, &oplog, NULL, err));
    /* from where the oldest was last found: not over every entry evicted since */
    uint64_t epoch, hint = sbl_capped_oldest_hint(oplog, &epoch);
    bson_value_t lo = {.value_type = BSON_TYPE_TIMESTAMP};
    lo.value.v_timestamp.timestamp = SBL_TS_SECS(hint);
    lo.value.v_timestamp.increment = SBL_TS_INC(hint);
    sbl_scan_bounds_t from = {.lo = &lo, .lo_inclusive = true};
    int rc = sbl_scan_open(s, oplog, hint != 0 ? &from : NULL, false, &scan, err);
    if (rc == 0 && (rc = sbl_scan_next(scan, &doc, &done, err)) == 0 && !done &&
        bson_iter_init_find(&it, &doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        uint32_t t, i;
        bson_iter_timestamp(&it, &t, &i);
        *tsp = SBL_TS(t, i);
        sbl_capped_note_oldest(oplog, epoch, *tsp);
    }
    if (scan != NULL)
        sbl_scan_close(scan);
    sbl_coll_release(oplog);
    return rc;
}

/* changeStreamOptions.preAndPostImages.expireAfterSeconds (0: "off" or unset). */
static int64_t expire_after_s(sbl_session_t *s)
{
    sbl_coll_t *c = NULL;
    sbl_err_t e;
    bson_t doc;
    bool found = false;
    bson_iter_t it;
    int64_t secs = 0;
    bson_value_t id = {.value_type = BSON_TYPE_UTF8};
    id.value.v_utf8.str = (char *)"changeStreamOptions";
    id.value.v_utf8.len = (uint32_t)strlen(id.value.v_utf8.str);
    sbl_err_clear(&e);
    if (sbl_coll_open(s, SBL_CLUSTER_PARAMS_NS, false, &c, NULL, &e) != 0)
        return 0;
    if (sbl_coll_get(s, c, &id, &doc, &found, &e) == 0 && found) {
        if (bson_iter_init(&it, &doc) &&
            bson_iter_find_descendant(&it, "preAndPostImages.expireAfterSeconds", &it) &&
            BSON_ITER_HOLDS_NUMBER(&it))
            secs = bson_iter_as_int64(&it);
        bson_destroy(&doc);
    }
    sbl_coll_release(c);
    return secs > 0 ? secs : 0;
}

typedef struct limits {
    uint64_t oldest_ts; /* the oplog's first entry */
    int64_t cutoff_ms;  /* now - expireAfterSeconds; 0: off */
    uint64_t max_ts;    /* the newest entry of an image found expired */
} limits_t;

/* Whether image doc is past either limit: its entry before the oplog's
 * first, or its operationTime before the cutoff. */
static bool expired(const bson_t *doc, void *arg)
{
    limits_t *l = arg;
    bson_iter_t it;
    uint64_t ts = UINT64_MAX; /* unknown: as new as any */
    if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, "_id.ts", &it) &&
        BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        uint32_t t, i;
        bson_iter_timestamp(&it, &t, &i);
        ts = SBL_TS(t, i);
    }
    bool gone = ts < l->oldest_ts ||
                (l->cutoff_ms > 0 && bson_iter_init_find(&it, doc, "operationTime") &&
                 BSON_ITER_HOLDS_DATE_TIME(&it) && bson_iter_date_time(&it) < l->cutoff_ms);
    if (gone && ts > l->max_ts)
        l->max_ts = ts;
    return gone;
}

/* One pass; returns how many images went.  Without the images' collection
 * (made by the first image kept) nothing is read: finding the oplog's first
 * entry steps over the truncated ones still in the history window, ~1% of
 * a busy primary's CPU on a set that keeps no images. */
static int64_t remove_pass(sbl_session_t *s)
{
    sbl_coll_t *c = NULL;
    sbl_err_t e;
    sbl_err_clear(&e);
    if (!sbl_oplog_is_open() || sbl_coll_open(s, SBL_PREIMAGES_NS, false, &c, NULL, &e) != 0)
        return 0;
    int64_t secs = expire_after_s(s);
    limits_t l = {.cutoff_ms = secs > 0 ? sbl_now_ms() - secs * 1000 : 0};
    if (sbl_repl_oplog_oldest_ts(s, &l.oldest_ts, &e) != 0 || l.oldest_ts == 0) {
        sbl_coll_release(c);
        return 0;
    }
    int64_t n = sbl_coll_delete_matching(s, c, expired, &l);
    sbl_coll_release(c);
    if (n > 0) { /* the watermark first: a reader that sees the pass sees it */
        uint64_t cur = atomic_load_explicit(&removed_upto, memory_order_relaxed);
        while (l.max_ts > cur &&
               !atomic_compare_exchange_weak_explicit(&removed_upto, &cur, l.max_ts,
                                                      memory_order_release, memory_order_relaxed))
            ;
        atomic_fetch_add_explicit(&removals, 1, memory_order_release);
    }
    return n;
}

static void *remover_main(void *arg)
{
    sbl_thread_name("PreImagesRmvr");
    sbl_session_t *s = sbl_session_get();
    pthread_mutex_lock(&lock);
    while (!stop && s != NULL) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += sleep_s;
        pthread_cond_timedwait(&cond, &lock, &ts);
        if (stop)
            break;
        pthread_mutex_unlock(&lock);
        int64_t n = remove_pass(s);
        if (n > 0) {
            bson_t attr = BSON_INITIALIZER;
            BSON_APPEND_INT64(&attr, "numberOfDocsDeleted", n);
            sbl_log(SBL_LOG_DEBUG, "QUERY", 5869104, "Periodic expired pre-images removal job "
                    "finished executing", &attr);
            bson_destroy(&attr);
        }
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    sbl_session_release_thread();
    return arg;
}

void sbl_repl_set_preimage_remover_sleep_s(int secs)
{
    sleep_s = secs > 0 ? secs : 10;
}

int sbl_rs_preimages_start(void)
{
    pthread_mutex_lock(&lock);
    stop = false;
    started = pthread_create(&thread, NULL, remover_main, NULL) == 0;
    pthread_mutex_unlock(&lock);
    return started ? 0 : -1;
}

void sbl_rs_preimages_stop(void)
{
    pthread_mutex_lock(&lock);
    stop = true;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    if (started)
        pthread_join(thread, NULL);
    started = false;
}
