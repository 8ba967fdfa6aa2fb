/*
 * shard.c: the shard's identity and its cache of shard versions.  A
 * version is read from the config servers: config.collections names the
 * collection's epoch, timestamp and uuid; the highest lastmod among
 * config.chunks owned by this shard is its placement version (0|0 when it
 * owns none), and the newest onCurrentShardSince among them when this shard
 * took its latest chunk; the chunks' histories tell when one last left it.
 * A namespace absent from config.collections is unsharded.  The same read
 * of every chunk of the collection gives the ownership filter of routed
 * reads (shard_filter.c), kept beside the version.
 *
 * What must stay true: a router's version is accepted only when it equals
 * (epoch, timestamp, major) this shard's freshly read version, so after a
 * metadata change every router that has not refreshed gets StaleConfig.
 */
#include "shard/shard_int.h"

#include "auth/auth.h"
#include "common/log.h"
#include "doc/doc.h"
#include "repl/repl.h"
#include "server/server.h"

#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sv {
    char ns[256];
    bool sharded;
    bson_oid_t epoch;
    uint32_t ts_t, ts_i, major, minor;
    uint64_t since; /* the newest onCurrentShardSince of its chunks here (0: none) */
    sbl_shard_filter_t *filter; /* the cache's reference (sharded only); copies by
                                 * cached() do not own it */
    uint64_t left;  /* when a chunk last left this shard, by config.chunks' history (0: none) */
} sv_t;

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_mutex_t refresh_lock = PTHREAD_MUTEX_INITIALIZER;
static char shard_name[128];
static char configsvr[1024];
static mongoc_client_pool_t *pool;
static sv_t *cache;
static size_t ncache;
static _Atomic int64_t known_term = -2; /* the primaryship whose metadata is known */

/* Forget every cached version (lock held for writing). */
static void cache_clear(void)
{
    for (size_t i = 0; i < ncache; i++)
        sbl_shard_filter_release(cache[i].filter);
    free(cache);
    cache = NULL;
    ncache = 0;
}

int sbl_shard_set_identity(const char *name, const char *cfg, sbl_err_t *err)
{
    const char *slash = strchr(cfg, '/');
    char uri_s[4400], opts[300];
    if (slash != NULL)
        snprintf(opts, sizeof(opts), "replicaSet=%.*s&serverSelectionTimeoutMS=10000",
                 (int)(slash - cfg), cfg);
    else
        snprintf(opts, sizeof(opts), "serverSelectionTimeoutMS=10000");
    /* with a keyFile, as __system (the config servers require it) */
    if (!sbl_auth_cluster_uri(uri_s, sizeof(uri_s), sbl_server_options()->cluster_key,
                              slash != NULL ? slash + 1 : cfg, opts))
        return sbl_err_set(err, SBL_E_BadValue, "bad configsvrConnectionString %s", cfg);
    bson_error_t e;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(uri_s, &e);
    if (uri == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "bad configsvrConnectionString %s: %s", cfg,
                           e.message);
    mongoc_init();
    mongoc_client_pool_t *p = mongoc_client_pool_new(uri);
    mongoc_uri_destroy(uri);
    if (p == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "bad configsvrConnectionString %s", cfg);
    mongoc_client_pool_set_error_api(p, MONGOC_ERROR_API_VERSION_2);
    pthread_rwlock_wrlock(&lock);
    mongoc_client_pool_t *old = pool;
    pool = p;
    snprintf(shard_name, sizeof(shard_name), "%s", name);
    snprintf(configsvr, sizeof(configsvr), "%s", cfg);
    cache_clear();
    pthread_rwlock_unlock(&lock);
    if (old != NULL)
        mongoc_client_pool_destroy(old);
    return 0;
}

const char *sbl_shard_name(void)
{
    return shard_name[0] ? shard_name : NULL;
}

const char *sbl_shard_configsvr(void)
{
    return configsvr[0] ? configsvr : NULL;
}

void sbl_shard_shutdown(void)
{
    pthread_rwlock_wrlock(&lock);
    if (pool != NULL)
        mongoc_client_pool_destroy(pool);
    pool = NULL;
    cache_clear();
    pthread_rwlock_unlock(&lock);
}

int shard_cfg_find(const char *coll, const bson_t *filter, const bson_t *proj, bson_t *reply,
                   sbl_err_t *err)
{
    if (pool == NULL)
        return sbl_err_set(err, SBL_E_IllegalOperation, "this shard has not been added to a "
                           "cluster (no shardIdentity)");
    bson_t cmd = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_DOCUMENT(&cmd, "filter", filter);
    if (proj)
        BSON_APPEND_DOCUMENT(&cmd, "projection", proj);
    BSON_APPEND_INT32(&cmd, "batchSize", 1000000);
    mongoc_client_t *cl = mongoc_client_pool_pop(pool);
    bson_error_t e;
    bool ok = mongoc_client_command_simple(cl, "config", &cmd, NULL, reply, &e);
    bson_destroy(&cmd);
    bson_iter_t it;
    if (ok && !(bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.id", &it) &&
                bson_iter_as_int64(&it) != 0)) {
        mongoc_client_pool_push(pool, cl);
        return 0; /* the usual case: it all came in the first batch */
    }
    /* more than a batch (16 MB) of documents: gather them all, as
     * {cursor: {firstBatch: [every document], id: 0}} */
    bson_t arr = BSON_INITIALIZER;
    uint32_t n = 0;
    while (ok) {
        int64_t id = sbl_append_cursor_batch(&arr, &n, reply);
        bson_destroy(reply);
        if (id == 0)
            break;
        bson_init(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", id);
        BSON_APPEND_UTF8(&cmd, "collection", coll);
        ok = mongoc_client_command_simple(cl, "config", &cmd, NULL, reply, &e);
        bson_destroy(&cmd);
    }
    mongoc_client_pool_push(pool, cl);
    if (!ok) {
        bson_destroy(reply);
        bson_destroy(&arr);
        return sbl_err_set(err, SBL_E_HostUnreachable, "reading the config servers' config.%s: "
                           "%s", coll, e.message);
    }
    bson_t c;
    bson_init(reply);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &c);
    BSON_APPEND_ARRAY(&c, "firstBatch", &arr);
    BSON_APPEND_INT64(&c, "id", 0);
    bson_append_document_end(reply, &c);
    bson_destroy(&arr);
    return 0;
}

static uint64_t ts_value(const bson_iter_t *it)
{
    uint32_t t = 0, i = 0;
    if (BSON_ITER_HOLDS_TIMESTAMP(it))
        bson_iter_timestamp(it, &t, &i);
    return ((uint64_t)t << 32) | i;
}

/* When the chunk at it (another shard's now) last left this shard: the
 * validAfter of the history entry (newest first) after this shard's newest
 * one; 0 when its history does not name this shard. */
static uint64_t chunk_left(const bson_iter_t *chunk)
{
    bson_iter_t h, e;
    uint64_t next = 0; /* the validAfter of the entry after (newer than) this one */
    if (!bson_iter_recurse(chunk, &h) || !bson_iter_find(&h, "history") ||
        !bson_iter_recurse(&h, &h))
        return 0;
    while (bson_iter_next(&h)) {
        const char *s = NULL;
        uint64_t va = 0;
        if (bson_iter_recurse(&h, &e))
            while (bson_iter_next(&e)) {
                if (strcmp(bson_iter_key(&e), "shard") == 0 && BSON_ITER_HOLDS_UTF8(&e))
                    s = bson_iter_utf8(&e, NULL);
                else if (strcmp(bson_iter_key(&e), "validAfter") == 0)
                    va = ts_value(&e);
            }
        if (s != NULL && strcmp(s, shard_name) == 0)
            return next;
        next = va;
    }
    return 0;
}

static int load(const char *ns, sv_t *out, sbl_err_t *err)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->ns, sizeof(out->ns), "%s", ns);
    bson_t f = BSON_INITIALIZER, r;
    BSON_APPEND_UTF8(&f, "_id", ns);
    int rc = shard_cfg_find("collections", &f, NULL, &r, err);
    bson_destroy(&f);
    if (rc != 0)
        return rc;
    bson_iter_t it, d;
    bson_value_t uuid = {0};
    bson_t key = BSON_INITIALIZER;
    if (bson_iter_init(&it, &r) && bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d) &&
        bson_iter_recurse(&d, &it)) {
        bool dropped = false;
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "lastmodEpoch") == 0 && BSON_ITER_HOLDS_OID(&it))
                bson_oid_copy(bson_iter_oid(&it), &out->epoch);
            else if (strcmp(k, "timestamp") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it))
                bson_iter_timestamp(&it, &out->ts_t, &out->ts_i);
            else if (strcmp(k, "uuid") == 0)
                bson_value_copy(bson_iter_value(&it), &uuid);
            else if (strcmp(k, "dropped") == 0)
                dropped = bson_iter_as_bool(&it);
            else if (strcmp(k, "key") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
                bson_t kd;
                if (sbl_iter_doc(&it, &kd)) {
                    bson_destroy(&key);
                    bson_copy_to(&kd, &key);
                }
            }
        }
        out->sharded = !dropped && uuid.value_type != BSON_TYPE_EOD;
    }
    bson_destroy(&r);
    if (!out->sharded) {
        if (uuid.value_type != BSON_TYPE_EOD)
            bson_value_destroy(&uuid);
        bson_destroy(&key);
        return 0;
    }
    bson_t p = BSON_INITIALIZER;
    bson_init(&f);
    sbl_append_value(&f, "uuid", -1, &uuid);
    static const char *const fields[] = {"min", "max", "shard", "lastmod",
                                         "onCurrentShardSince", "history", NULL};
    for (int i = 0; fields[i] != NULL; i++)
        BSON_APPEND_INT32(&p, fields[i], 1);
    bson_value_destroy(&uuid);
    rc = shard_cfg_find("chunks", &f, &p, &r, err);
    bson_destroy(&f);
    bson_destroy(&p);
    if (rc != 0) {
        bson_destroy(&key);
        return rc;
    }
    if (bson_iter_init(&it, &r) && bson_iter_find_descendant(&it, "cursor.firstBatch", &d) &&
        bson_iter_recurse(&d, &it)) {
        bson_iter_t all = it;
        out->filter = shard_filter_build(ns, &key, &all, shard_name);
    }
    if (bson_iter_init(&it, &r) && bson_iter_find_descendant(&it, "cursor.firstBatch", &d) &&
        bson_iter_recurse(&d, &it))
        while (bson_iter_next(&it)) {
            bson_iter_t c;
            uint32_t ma, mi;
            if (!bson_iter_recurse(&it, &c) || !bson_iter_find(&c, "shard") ||
                !BSON_ITER_HOLDS_UTF8(&c) || strcmp(bson_iter_utf8(&c, NULL), shard_name) != 0) {
                uint64_t left = chunk_left(&it); /* another shard's chunk: did it leave here? */
                if (left > out->left)
                    out->left = left;
                continue;
            }
            if (bson_iter_recurse(&it, &c) && bson_iter_find(&c, "onCurrentShardSince") &&
                BSON_ITER_HOLDS_TIMESTAMP(&c)) {
                bson_iter_timestamp(&c, &ma, &mi);
                if ((((uint64_t)ma << 32) | mi) > out->since)
                    out->since = ((uint64_t)ma << 32) | mi;
            }
            if (bson_iter_recurse(&it, &c) && bson_iter_find(&c, "lastmod") &&
                BSON_ITER_HOLDS_TIMESTAMP(&c)) {
                bson_iter_timestamp(&c, &ma, &mi);
                if (ma > out->major || (ma == out->major && mi > out->minor)) {
                    out->major = ma;
                    out->minor = mi;
                }
            }
        }
    bson_destroy(&r);
    bson_destroy(&key);
    return 0;
}

void sbl_shard_stepped_up(int64_t term)
{
    pthread_mutex_lock(&refresh_lock); /* no refresh under way puts an old version back */
    pthread_rwlock_wrlock(&lock);
    cache_clear();
    pthread_rwlock_unlock(&lock);
    shard_db_forget(NULL); /* database versions too */
    atomic_store(&known_term, term);
    pthread_mutex_unlock(&refresh_lock);
}

bool sbl_shard_metadata_known(void)
{
    if (pool == NULL)
        return true;
    int64_t t = sbl_repl_write_term();
    return t < 0 || t == atomic_load(&known_term);
}

/* ns's cached version into *out; with fp, *fp a new reference to its
 * filter (out's own pointer may be released by a refresh once the lock is
 * let go). */
static bool cached(const char *ns, sv_t *out, sbl_shard_filter_t **fp)
{
    bool found = false;
    pthread_rwlock_rdlock(&lock);
    for (size_t i = 0; i < ncache && !found; i++)
        if (strcmp(cache[i].ns, ns) == 0) {
            *out = cache[i];
            found = true;
            if (fp != NULL)
                *fp = sbl_shard_filter_ref(cache[i].filter);
        }
    pthread_rwlock_unlock(&lock);
    return found;
}

/* Read ns's version from the config servers into the cache and *vp; with
 * fp, *fp a new reference to the filter read with it. */
static int refresh(const char *ns, sv_t *vp, sbl_shard_filter_t **fp, sbl_err_t *err)
{
    if (fp != NULL)
        *fp = NULL;
    if (pool == NULL)
        return sbl_err_set(err, SBL_E_IllegalOperation, "this shard has not been added to a "
                           "cluster (no shardIdentity)");
    sv_t v;
    pthread_mutex_lock(&refresh_lock);
    int rc = load(ns, &v, err);
    if (rc == 0) {
        pthread_rwlock_wrlock(&lock);
        size_t i;
        for (i = 0; i < ncache; i++)
            if (strcmp(cache[i].ns, ns) == 0)
                break;
        if (i == ncache) {
            cache = realloc(cache, (ncache + 1) * sizeof(*cache));
            ncache++;
        } else {
            sbl_shard_filter_release(cache[i].filter);
        }
        cache[i] = v;
        *vp = v;
        if (fp != NULL)
            *fp = sbl_shard_filter_ref(v.filter);
        pthread_rwlock_unlock(&lock);
    }
    pthread_mutex_unlock(&refresh_lock);
    return rc;
}

int sbl_shard_refresh_filter(const char *ns, sbl_shard_filter_t **fp, sbl_err_t *err)
{
    sv_t v;
    return refresh(ns, &v, fp, err);
}

int sbl_shard_refresh(const char *ns, sbl_err_t *err)
{
    return sbl_shard_refresh_filter(ns, NULL, err);
}

static void parse_received(const bson_t *svd, sv_t *r)
{
    bson_iter_t it;
    memset(r, 0, sizeof(*r));
    bson_iter_init(&it, svd);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "e") == 0 && BSON_ITER_HOLDS_OID(&it))
            bson_oid_copy(bson_iter_oid(&it), &r->epoch);
        else if (strcmp(k, "t") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it))
            bson_iter_timestamp(&it, &r->ts_t, &r->ts_i);
        else if (strcmp(k, "v") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it))
            bson_iter_timestamp(&it, &r->major, &r->minor);
    }
    bson_oid_t zero;
    memset(&zero, 0, sizeof(zero));
    r->sharded = !bson_oid_equal(&r->epoch, &zero);
}

static bool compatible(const sv_t *r, const sv_t *w)
{
    if (!r->sharded || !w->sharded)
        return r->sharded == w->sharded;
    return bson_oid_equal(&r->epoch, &w->epoch) && r->ts_t == w->ts_t && r->ts_i == w->ts_i &&
           r->major == w->major;
}

static void append_version(bson_t *d, const char *k, const sv_t *v)
{
    bson_t s;
    bson_oid_t zero;
    memset(&zero, 0, sizeof(zero));
    BSON_APPEND_DOCUMENT_BEGIN(d, k, &s);
    BSON_APPEND_OID(&s, "e", v->sharded ? &v->epoch : &zero);
    BSON_APPEND_TIMESTAMP(&s, "t", v->ts_t, v->ts_i);
    BSON_APPEND_TIMESTAMP(&s, "v", v->major, v->minor);
    bson_append_document_end(d, &s);
}

int sbl_shard_check_version(const char *ns, const bson_t *svd, bson_t *info,
                            sbl_shard_filter_t **fp, sbl_err_t *err)
{
    sbl_shard_filter_t *f = NULL;
    if (fp != NULL)
        *fp = NULL;
    if (pool == NULL)
        return 0; /* not in a cluster yet: nothing to compare with */
    sv_t r, w;
    parse_received(svd, &r);
    bool ok = cached(ns, &w, &f) && compatible(&r, &w);
    if (!ok) {
        sbl_shard_filter_release(f);
        int rc = refresh(ns, &w, &f, err);
        if (rc != 0)
            return rc;
        ok = compatible(&r, &w);
    }
    if (ok) {
        if (fp != NULL)
            *fp = f;
        else
            sbl_shard_filter_release(f);
        return 0;
    }
    sbl_shard_filter_release(f);
    BSON_APPEND_UTF8(info, "ns", ns);
    append_version(info, "vReceived", &r);
    append_version(info, "vWanted", &w);
    BSON_APPEND_UTF8(info, "shardId", shard_name);
    return sbl_err_set(err, SBL_E_StaleConfig, "sharding status of collection %s is not "
                       "currently known and needs to be recovered (version %u|%u received, "
                       "%u|%u wanted)", ns, r.major, r.minor, w.major, w.minor);
}

sbl_shard_filter_t *sbl_shard_filter_get(const char *ns)
{
    sbl_shard_filter_t *f = NULL;
    pthread_rwlock_rdlock(&lock);
    for (size_t i = 0; i < ncache; i++)
        if (strcmp(cache[i].ns, ns) == 0) {
            f = sbl_shard_filter_ref(cache[i].filter);
            break;
        }
    pthread_rwlock_unlock(&lock);
    return f;
}

uint64_t sbl_shard_owned_since(const char *ns)
{
    sv_t v;
    return cached(ns, &v, NULL) ? v.since : 0;
}

uint64_t sbl_shard_left_since(const char *ns)
{
    sv_t v;
    return cached(ns, &v, NULL) ? v.left : 0;
}

void sbl_shard_append_state(bson_t *reply)
{
    bson_t v;
    pthread_rwlock_rdlock(&lock);
    BSON_APPEND_BOOL(reply, "enabled", pool != NULL);
    if (pool != NULL) {
        BSON_APPEND_UTF8(reply, "configServer", configsvr);
        BSON_APPEND_UTF8(reply, "shardName", shard_name);
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "versions", &v);
    for (size_t i = 0; i < ncache; i++)
        if (cache[i].sharded)
            BSON_APPEND_TIMESTAMP(&v, cache[i].ns, cache[i].major, cache[i].minor);
    bson_append_document_end(reply, &v);
    pthread_rwlock_unlock(&lock);
}

void sbl_shard_create_with_uuid_cmd(bson_t *cmd, const char *db, const char *coll,
                                    const uint8_t uuid[16])
{
    char ns[300];
    bson_t ops, op, o;
    snprintf(ns, sizeof(ns), "%s.$cmd", db);
    BSON_APPEND_ARRAY_BEGIN(cmd, "applyOps", &ops);
    BSON_APPEND_DOCUMENT_BEGIN(&ops, "0", &op);
    BSON_APPEND_UTF8(&op, "op", "c");
    BSON_APPEND_UTF8(&op, "ns", ns);
    bson_append_binary(&op, "ui", 2, BSON_SUBTYPE_UUID, uuid, 16);
    BSON_APPEND_DOCUMENT_BEGIN(&op, "o", &o);
    BSON_APPEND_UTF8(&o, "create", coll);
    bson_append_document_end(&op, &o);
    bson_append_document_end(&ops, &op);
    bson_append_array_end(cmd, &ops);
}
