/*
 * wt_ttl.c: the TTL monitor: a thread that every ttl_sleep_s seconds
 * deletes the documents that a TTL index (one non-hashed field with
 * expireAfterSeconds) says have expired, and the expired ones of time-series
 * and clustered collections with expireAfterSeconds, TTL_BATCH at a time,
 * each in its own transaction.
 *
 * What must stay true: a document is deleted only if, read again inside the
 * deleting transaction, it still holds a date below the cutoff (at the
 * indexed path, the timeField or the _id).
 */
#include "storage/wt_int.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "doc/doc.h"

#define TTL_BATCH 1000

/* ---- TTL monitor --------------------------------------------------------------- */

typedef struct ns_list {
    char **ns;
    size_t n, cap;
} ns_list_t;

static bool collect(const char *ns, const bson_t *options, const uint8_t *uuid, void *arg)
{
    ns_list_t *l = arg;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->ns = bson_realloc(l->ns, l->cap * sizeof(char *));
    }
    l->ns[l->n++] = bson_strdup(ns);
    return true;
}

/* Delete the documents of c that ix says expired; returns how many. */
static int64_t ttl_pass_index(sbl_session_t *s, sbl_coll_t *c, sbl_index_t *ix, int64_t now_ms)
{
    int64_t cutoff = now_ms - ix->expire_after * 1000, deleted = 0;
    bson_value_t dmin = {.value_type = BSON_TYPE_DATE_TIME}, dcut = dmin;
    sbl_buf_t lo, hi, ids;
    size_t *offs = NULL, nids = 0;
    sbl_iscan_t *sc = NULL;
    sbl_err_t e;
    bool desc = ix->dirs[0] < 0;

    dmin.value.v_datetime = INT64_MIN;
    dcut.value.v_datetime = cutoff;
    sbl_buf_init(&lo);
    sbl_buf_init(&hi);
    sbl_buf_init(&ids);
    /* Dates below cutoff: [enc(min), enc(cutoff)) ascending; mirrored descending. */
    sbl_key_append(&lo, desc ? &dcut : &dmin, desc);
    sbl_key_append(&hi, desc ? &dmin : &dcut, desc);
    if (desc) {
        /* lo = complemented cutoff excluded: step past its entries; hi covers min's. */
        sbl_buf_append_byte(&lo, 0xff);
        sbl_buf_append_byte(&hi, 0xff);
    }
    sbl_err_clear(&e);
    if (sbl_iscan_open(s, ix, lo.data, lo.len, hi.data, hi.len, false, &sc, &e) == 0) {
        const uint8_t *k, *idk;
        size_t klen, idlen;
        bool done = false;
        while (nids < TTL_BATCH && sbl_iscan_next(sc, &k, &klen, &idk, &idlen, &done, &e) == 0 &&
               !done) {
            offs = bson_realloc(offs, (nids + 2) * sizeof(size_t));
            offs[nids++] = ids.len;
            sbl_buf_append(&ids, idk, idlen);
        }
        sbl_iscan_close(sc);
    }
    for (size_t i = 0; i < nids; i++) {
        size_t end = i + 1 < nids ? offs[i + 1] : ids.len;
        bson_t doc;
        bool found = false;
        if (sbl_txn_begin(s, &e) != 0)
            break;
        if (sbl_coll_get_by_key(s, c, ids.data + offs[i], end - offs[i], &doc, &found, &e) ==
                0 &&
            found) {
            /* Re-check: some date at the path is below the cutoff. */
            vals_t vs;
            bool expired = false;
            memset(&vs, 0, sizeof(vs));
            sbl_index_walk(bson_get_data(&doc), doc.len, ix->fields[0], &vs);
            for (size_t j = 0; j < vs.n; j++)
                if (vs.v[j].value_type == BSON_TYPE_DATE_TIME &&
                    vs.v[j].value.v_datetime < cutoff)
                    expired = true;
            bson_free(vs.v);
            if (expired && sbl_write(s, c, SBL_WRITE_DELETE, &doc, NULL, NULL, &e) == 0 &&
                sbl_txn_commit(s, &e) == 0)
                deleted++;
            bson_destroy(&doc);
        }
        sbl_txn_abort(s); /* no-op after a commit */
    }
    bson_free(offs);
    sbl_buf_destroy(&lo);
    sbl_buf_destroy(&hi);
    sbl_buf_destroy(&ids);
    return deleted;
}

/* True when doc's top-level field holds a date below cutoff. */
static bool date_before(const bson_t *doc, const char *field, int64_t cutoff)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, doc, field) && BSON_ITER_HOLDS_DATE_TIME(&it) &&
           bson_iter_date_time(&it) < cutoff;
}

int64_t sbl_coll_delete_matching(sbl_session_t *s, sbl_coll_t *c,
                                 bool (*pred)(const bson_t *doc, void *arg), void *arg)
{
    /* The matching documents themselves: a time-series collection may hold
     * several under one _id, and a batch ends only past the last of them
     * (the next scan resumes after that _id). */
    size_t cap = TTL_BATCH;
    bson_t **hit = bson_malloc(cap * sizeof(bson_t *));
    bson_value_t last;
    bool have_last = false, done = false;
    int64_t deleted = 0;
    sbl_err_t e;
    while (!done) {
        sbl_scan_bounds_t b = {.lo = have_last ? &last : NULL, .lo_inclusive = false};
        sbl_scan_t *sc = NULL;
        size_t n = 0;
        bson_iter_t it;
        sbl_err_clear(&e);
        if (sbl_scan_open(s, c, &b, false, &sc, &e) != 0)
            break;
        bson_t doc;
        while (n < TTL_BATCH || c->dup_ids) {
            if (sbl_scan_next(sc, &doc, &done, &e) != 0)
                done = true;
            if (done)
                break;
            if (!bson_iter_init_find(&it, &doc, "_id"))
                continue;
            if (n >= TTL_BATCH && !sbl_value_equal(bson_iter_value(&it), &last))
                break;
            if (have_last)
                bson_value_destroy(&last);
            bson_value_copy(bson_iter_value(&it), &last);
            have_last = true;
            if (!pred(&doc, arg))
                continue;
            if (n == cap) {
                cap *= 2;
                hit = bson_realloc(hit, cap * sizeof(bson_t *));
            }
            hit[n++] = bson_copy(&doc);
        }
        sbl_scan_close(sc);
        for (size_t i = 0; i < n; i++) {
            bool found = false;
            if (sbl_txn_begin(s, &e) == 0) {
                if (sbl_coll_get_same(s, c, hit[i], &doc, &found, &e) == 0 && found) {
                    if (pred(&doc, arg) &&
                        sbl_write(s, c, SBL_WRITE_DELETE, &doc, NULL, NULL, &e) == 0 &&
                        sbl_txn_commit(s, &e) == 0)
                        deleted++;
                    bson_destroy(&doc);
                }
                sbl_txn_abort(s); /* no-op after a commit */
            }
            bson_destroy(hit[i]);
        }
    }
    if (have_last)
        bson_value_destroy(&last);
    bson_free(hit);
    return deleted;
}

typedef struct ts_expiry {
    const char *field;
    int64_t cutoff;
} ts_expiry_t;

static bool ts_expired(const bson_t *doc, void *arg)
{
    const ts_expiry_t *x = arg;
    return date_before(doc, x->field, x->cutoff);
}

/* A time-series collection's expireAfterSeconds (stored options {timeseries:
 * {timeField}, expireAfterSeconds}): delete the measurements whose timeField is
 * older than now - expireAfterSeconds; for a clustered collection ({clusteredIndex,
 * expireAfterSeconds}) the documents whose _id is such a date.  Returns how many
 * went. */
static int64_t ttl_pass_timeseries(sbl_session_t *s, sbl_coll_t *c, int64_t now_ms)
{
    const bson_t *o = sbl_coll_options(c);
    bson_iter_t it, f;
    if (o == NULL || !bson_iter_init_find(&it, o, "expireAfterSeconds") ||
        !BSON_ITER_HOLDS_NUMBER(&it))
        return 0;
    ts_expiry_t x = {.field = "_id", /* a clustered collection's TTL reads its cluster key */
                     .cutoff = now_ms - bson_iter_as_int64(&it) * 1000};
    if (bson_iter_init_find(&it, o, "timeseries") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &f) && bson_iter_find(&f, "timeField") &&
        BSON_ITER_HOLDS_UTF8(&f))
        x.field = bson_iter_utf8(&f, NULL);
    else if (!bson_iter_init_find(&it, o, "clusteredIndex"))
        return 0;
    return sbl_coll_delete_matching(s, c, ts_expired, &x);
}

static void ttl_pass(sbl_session_t *s)
{
    ns_list_t l = {0};
    struct timespec ts;
    int64_t now_ms, deleted = 0;

    clock_gettime(CLOCK_REALTIME, &ts);
    now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    sbl_catalog_list(NULL, collect, &l);
    for (size_t i = 0; i < l.n; i++) {
        sbl_coll_t *c = NULL;
        sbl_index_t **ixs;
        size_t n;
        if (sbl_coll_open(s, l.ns[i], false, &c, NULL, NULL) != 0)
            continue;
        sbl_index_list(c, false, &ixs, &n);
        for (size_t j = 0; j < n; j++)
            if (ixs[j]->expire_after >= 0 && ixs[j]->nfields == 1 && ixs[j]->dirs[0] != 0)
                deleted += ttl_pass_index(s, c, ixs[j], now_ms);
        deleted += ttl_pass_timeseries(s, c, now_ms);
        sbl_index_list_free(ixs, n);
        sbl_coll_release(c);
        bson_free(l.ns[i]);
    }
    bson_free(l.ns);
    if (deleted > 0) {
        bson_t attr = BSON_INITIALIZER;
        BSON_APPEND_INT64(&attr, "numDeleted", deleted);
        sbl_log(SBL_LOG_INFO, "INDEX", 5479200, "Deleted expired documents using index", &attr);
        bson_destroy(&attr);
    }
}

static void *ttl_main(void *arg)
{
    sbl_thread_name("TTLMonitor");
    sbl_session_t *s = sbl_session_get();

    pthread_mutex_lock(&sbl_eng.ttl_lock);
    while (!sbl_eng.ttl_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += sbl_eng.ttl_sleep_s;
        pthread_cond_timedwait(&sbl_eng.ttl_cond, &sbl_eng.ttl_lock, &ts);
        if (sbl_eng.ttl_stop || s == NULL)
            break;
        pthread_mutex_unlock(&sbl_eng.ttl_lock);
        ttl_pass(s);
        pthread_mutex_lock(&sbl_eng.ttl_lock);
    }
    pthread_mutex_unlock(&sbl_eng.ttl_lock);
    sbl_session_release_thread();
    return arg;
}

int sbl_ttl_start(sbl_err_t *err)
{
    pthread_mutex_init(&sbl_eng.ttl_lock, NULL);
    pthread_cond_init(&sbl_eng.ttl_cond, NULL);
    sbl_eng.ttl_stop = false;
    if (pthread_create(&sbl_eng.ttl_thread, NULL, ttl_main, NULL) != 0)
        return sbl_err_set(err, SBL_E_InternalError, "cannot start the TTL monitor");
    sbl_eng.ttl_started = true;
    return 0;
}

void sbl_ttl_stop(void)
{
    if (!sbl_eng.ttl_started)
        return;
    pthread_mutex_lock(&sbl_eng.ttl_lock);
    sbl_eng.ttl_stop = true;
    pthread_cond_signal(&sbl_eng.ttl_cond);
    pthread_mutex_unlock(&sbl_eng.ttl_lock);
    pthread_join(sbl_eng.ttl_thread, NULL);
    sbl_eng.ttl_started = false;
    pthread_mutex_destroy(&sbl_eng.ttl_lock);
    pthread_cond_destroy(&sbl_eng.ttl_cond);
}
