/*
 * repl_keys.c: the keys that sign $clusterTime on a set with a keyFile, as
 * mongod's: HMAC-SHA1 keys in admin.system.keys ({_id: NumberLong, purpose:
 * "HMAC", key: BinData 20 bytes, expiresAt: Timestamp}), written by the
 * primary (w: "majority") and replicated like any document, so every member
 * holds the same ones.  This file keeps the process's key cache
 * (auth_ctime.c, which signs and checks) filled from the collection, signs
 * replies and checks clients' cluster times against the newest time it
 * signed (mongod's last seen valid time).
 *
 * What must stay true: a member signs only with keys read back from its
 * collection (the primary's after the majority acknowledged them); before it
 * holds one, replies carry no $clusterTime (mongod's "has seen keys").
 */
#include "repl/repl_int.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

#include "auth/auth.h"
#include "common/clock.h"
#include "common/log.h"
#include "storage/storage.h"

#define rs sbl_rs

#define MAX_KEYS 64

static _Atomic uint64_t last_signed; /* the newest time this member signed */
static atomic_llong rotation_s = SBL_RS_KEY_ROTATION_S;

static pthread_t keys_thread;
static bool keys_running;
static pthread_mutex_t thr_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t thr_cond = PTHREAD_COND_INITIALIZER;
static bool thr_stop;

bool sbl_rs_keys_on(void)
{
    return rs.cluster_key != NULL && sbl_repl_enabled();
}

void sbl_repl_set_key_rotation_s(int64_t s)
{
    atomic_store(&rotation_s, s > 0 ? s : SBL_RS_KEY_ROTATION_S);
}

/* Read admin.system.keys into the process's cache (auth_ctime.c). */
static void keys_reload(void)
{
    sbl_session_t *s = sbl_session_get();
    sbl_coll_t *c = NULL;
    sbl_scan_t *scan = NULL;
    sbl_err_t err;
    sbl_err_clear(&err);
    if (s == NULL || sbl_coll_open(s, SBL_CTIME_KEYS_NS, false, &c, NULL, &err) != 0)
        return;
    sbl_ctime_key_t got[MAX_KEYS];
    int n = 0;
    bool done = false;
    if (sbl_scan_open(s, c, NULL, false, &scan, &err) == 0) {
        bson_t doc;
        uint64_t now = sbl_oplog_last_ts(); /* expired keys check nothing: skipped */
        while (n < MAX_KEYS && sbl_scan_next(scan, &doc, &done, &err) == 0 && !done)
            if (sbl_ctime_key_parse(&doc, &got[n]) && got[n].expires > now)
                n++;
        sbl_scan_close(scan);
    }
    sbl_coll_release(c);
    if (done || n == MAX_KEYS) /* else an error: keep what we had */
        sbl_ctime_keys_set(got, n);
    OPENSSL_cleanse(got, sizeof(got));
}

bool sbl_rs_sign_time(uint64_t ts, uint8_t hash[SBL_CTIME_KEY_LEN], int64_t *key_id)
{
    if (!sbl_rs_keys_on()) {
        memset(hash, 0, SBL_CTIME_KEY_LEN);
        *key_id = 0;
        return true;
    }
    if (!sbl_ctime_sign(ts, hash, key_id))
        return false;
    sbl_ts_advance(&last_signed, ts);
    return true;
}

int sbl_repl_check_cluster_time(const bson_iter_t *ct, bool may_advance, sbl_err_t *err)
{
    if (may_advance || !sbl_rs_keys_on())
        return 0;
    /* no later than a time this member signed: mongod's last seen valid time */
    uint64_t valid = atomic_load(&last_signed), mine = sbl_oplog_last_ts();
    return sbl_ctime_check(ct, valid > mine ? valid : mine, keys_reload, err);
}

/* ---- the primary writes new keys ------------------------------------------------ */

static void append_key(bson_t *arr, const char *idx, int64_t id, uint64_t expires)
{
    uint8_t key[SBL_CTIME_KEY_LEN];
    bson_t d;
    if (RAND_bytes(key, sizeof(key)) != 1)
        return;
    BSON_APPEND_DOCUMENT_BEGIN(arr, idx, &d);
    BSON_APPEND_INT64(&d, "_id", id);
    BSON_APPEND_UTF8(&d, "purpose", "HMAC");
    BSON_APPEND_BINARY(&d, "key", BSON_SUBTYPE_BINARY, key, sizeof(key));
    bson_append_timestamp(&d, "expiresAt", -1, SBL_TS_SECS(expires), SBL_TS_INC(expires));
    bson_append_document_end(arr, &d);
    OPENSSL_cleanse(key, sizeof(key));
}

/* As mongod's key generator: a key valid now (expiring one rotation
 * interval from now) and the next one (one interval after it), so members
 * always hold the key that comes next. */
static void keys_generate(void)
{
    uint64_t now = sbl_oplog_last_ts();
    if (now == 0)
        return;
    uint64_t interval = (uint64_t)atomic_load(&rotation_s) << 32, newest;
    int valid = sbl_ctime_keys_valid(now, &newest);
    if (valid >= 2)
        return;
    bson_t cmd = BSON_INITIALIZER, arr, wc, reply = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "insert", "system.keys");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &arr);
    if (valid == 0) {
        newest = SBL_TS(SBL_TS_SECS(now + interval), 0);
        append_key(&arr, "0", (int64_t)now, newest);
    }
    append_key(&arr, valid == 0 ? "1" : "0", (int64_t)now + 1,
               SBL_TS(SBL_TS_SECS(newest + interval), 0));
    bson_append_array_end(&cmd, &arr);
    /* every data-bearing member that is up (not delayed) should hold the
     * keys before clients see times signed with them (a client may show such
     * a time to any member); a majority at least, as mongod */
    int w = 0;
    pthread_mutex_lock(&rs.lock);
    for (int i = 0; rs.config != NULL && i < rs.cfg.n; i++)
        w += !rs.cfg.m[i].arbiter && rs.cfg.m[i].delay_s == 0 &&
             (i == rs.self || rs.peer[i].up);
    int majority = rs.config != NULL ? sbl_rs_voters(&rs.cfg) / 2 + 1 : 1;
    pthread_mutex_unlock(&rs.lock);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_INT32(&wc, "w", w > majority ? w : majority);
    BSON_APPEND_INT32(&wc, "wtimeout", 5000);
    bson_append_document_end(&cmd, &wc);
    if (sbl_rs_runner != NULL)
        sbl_rs_runner("admin", &cmd, &reply);
    bson_iter_t it;
    /* a write concern that timed out still wrote them: they are used from now */
    bool ok = bson_iter_init_find(&it, &reply, "ok") && bson_iter_as_double(&it) == 1.0 &&
              !bson_has_field(&reply, "writeErrors");
    if (ok) {
        bson_t attr = BSON_INITIALIZER;
        BSON_APPEND_INT32(&attr, "keys", valid == 0 ? 2 : 1);
        sbl_log(SBL_LOG_INFO, "REPL", 7360301, "Generated new keys for signing cluster times",
                &attr);
        bson_destroy(&attr);
    } else {
        bson_t attr = BSON_INITIALIZER; /* not the command: it holds the keys */
        BSON_APPEND_DOCUMENT(&attr, "reply", &reply);
        sbl_log(SBL_LOG_WARNING, "REPL", 7360302, "Could not write new keys (retried)", &attr);
        bson_destroy(&attr);
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
    keys_reload();
}

static void *keys_main(void *arg)
{
    sbl_thread_name("monitoring-keys-for-HMAC");
    (void)arg;
    pthread_mutex_lock(&thr_lock);
    while (!thr_stop) {
        pthread_mutex_unlock(&thr_lock);
        int st = atomic_load(&rs.state);
        if (st == SBL_RS_PRIMARY || st == SBL_RS_SECONDARY || st == SBL_RS_RECOVERING) {
            keys_reload();
            if (st == SBL_RS_PRIMARY)
                keys_generate();
        }
        pthread_mutex_lock(&thr_lock);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        if (!thr_stop)
            pthread_cond_timedwait(&thr_cond, &thr_lock, &ts);
    }
    pthread_mutex_unlock(&thr_lock);
    return NULL;
}

int sbl_rs_keys_start(void)
{
    if (rs.cluster_key == NULL)
        return 0;
    thr_stop = false;
    if (pthread_create(&keys_thread, NULL, keys_main, NULL) != 0)
        return -1;
    keys_running = true;
    return 0;
}

void sbl_rs_keys_stop(void)
{
    if (!keys_running)
        return;
    pthread_mutex_lock(&thr_lock);
    thr_stop = true;
    pthread_cond_signal(&thr_cond);
    pthread_mutex_unlock(&thr_lock);
    pthread_join(keys_thread, NULL);
    keys_running = false;
}
