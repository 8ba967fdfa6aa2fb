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

#define REMOVE_BATCH 1000 /* images collected per scan */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_t thread;
static bool started;
static atomic_bool stop;
static int sleep_s = 10;

int sbl_repl_oplog_oldest_ts(sbl_session_t *s, uint64_t *tsp, sbl_err_t *err)
{
    sbl_coll_t *oplog = NULL;
    sbl_scan_t *scan = NULL;
    bson_t doc;
    bool done = false;
    bson_iter_t it;
    *tsp = 0;
    SBL_RET(sbl_coll_open(s, SBL_OPLOG_NS, false, &oplog, NULL, err));
    int rc = sbl_scan_open(s, oplog, NULL, false, &scan, err);
    if (rc == 0 && (rc = sbl_scan_next(scan, &doc, &done, err)) == 0 && !done &&
        bson_iter_init_find(&it, &doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        uint32_t t, i;
        bson_iter_timestamp(&it, &t, &i);
        *tsp = SBL_TS(t, i);
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

/* Whether image doc is past both rules' limits: its entry before oldest_ts,
 * or (cutoff_ms > 0) its operationTime before cutoff_ms. */
static bool expired(const bson_t *doc, uint64_t oldest_ts, int64_t cutoff_ms)
{
    bson_iter_t it;
    if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, "_id.ts", &it) &&
        BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        uint32_t t, i;
        bson_iter_timestamp(&it, &t, &i);
        if (SBL_TS(t, i) < oldest_ts)
            return true;
    }
    return cutoff_ms > 0 && bson_iter_init_find(&it, doc, "operationTime") &&
           BSON_ITER_HOLDS_DATE_TIME(&it) && bson_iter_date_time(&it) < cutoff_ms;
}

/* One pass; returns how many images went. */
static int64_t remove_pass(sbl_session_t *s)
{
    sbl_coll_t *c = NULL;
    sbl_err_t e;
    uint64_t oldest = 0;
    int64_t deleted = 0, secs = expire_after_s(s);
    int64_t cutoff = secs > 0 ? sbl_now_ms() - secs * 1000 : 0;
    sbl_err_clear(&e);
    if (!sbl_oplog_is_open() || sbl_repl_oplog_oldest_ts(s, &oldest, &e) != 0 || oldest == 0 ||
        sbl_coll_open(s, SBL_PREIMAGES_NS, false, &c, NULL, &e) != 0)
        return 0;
    bson_t **batch = bson_malloc(REMOVE_BATCH * sizeof(bson_t *));
    bson_value_t last;
    bool have_last = false, done = false;
    while (!done && !stop) {
        sbl_scan_bounds_t b = {.lo = have_last ? &last : NULL, .lo_inclusive = false};
        sbl_scan_t *sc = NULL;
        size_t n = 0;
        bson_t doc;
        bson_iter_t it;
        if (sbl_scan_open(s, c, &b, false, &sc, &e) != 0)
            break;
        while (n < REMOVE_BATCH) {
            if (sbl_scan_next(sc, &doc, &done, &e) != 0)
                done = true;
            if (done)
                break;
            if (!bson_iter_init_find(&it, &doc, "_id"))
                continue;
            if (have_last)
                bson_value_destroy(&last);
            bson_value_copy(bson_iter_value(&it), &last);
            have_last = true;
            if (expired(&doc, oldest, cutoff))
                batch[n++] = bson_copy(&doc);
        }
        sbl_scan_close(sc);
        for (size_t i = 0; i < n; i++) {
            bool found = false;
            if (sbl_txn_begin(s, &e) == 0) {
                if (sbl_coll_get_same(s, c, batch[i], &doc, &found, &e) == 0 && found) {
                    if (expired(&doc, oldest, cutoff) &&
                        sbl_write(s, c, SBL_WRITE_DELETE, &doc, NULL, NULL, &e) == 0 &&
                        sbl_txn_commit(s, &e) == 0)
                        deleted++;
                    bson_destroy(&doc);
                }
                sbl_txn_abort(s); /* no-op after a commit */
            }
            bson_destroy(batch[i]);
        }
    }
    if (have_last)
        bson_value_destroy(&last);
    bson_free(batch);
    sbl_coll_release(c);
    return deleted;
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
