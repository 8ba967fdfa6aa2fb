/*
 * rt_remote.c: the router's connections to the shards and the config
 * servers: one libmongoc client pool per shard (a replica set URI, so the
 * pool follows its primary), commands sent with mongoc_client_command_simple.
 * Pools are created when a shard is first seen and live until shutdown; the
 * shard list only grows (a removed shard keeps its slot), so an index into
 * it stays valid for the process lifetime.
 */
#include "router/router_int.h"

#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct rt_shard {
    char id[128];
    char host[1024];
    mongoc_client_pool_t *pool;
} rt_shard_t;

static pthread_mutex_t shards_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_shard_t shards[RT_MAX_SHARDS];
static int nshards; /* read without the lock after the slot is filled (only grows) */
static mongoc_client_pool_t *config_pool;
static char configdb[1024];

/* "rs/h1:p1,h2:p2" -> mongodb://h1:p1,h2:p2/?replicaSet=rs; "h:p" -> mongodb://h:p/ */
static mongoc_client_pool_t *pool_for(const char *host)
{
    char uri_s[1400];
    const char *slash = strchr(host, '/');
    if (slash != NULL)
        snprintf(uri_s, sizeof(uri_s),
                 "mongodb://%s/?replicaSet=%.*s&serverSelectionTimeoutMS=15000"
                 "&connectTimeoutMS=5000&maxPoolSize=200",
                 slash + 1, (int)(slash - host), host);
    else
        snprintf(uri_s, sizeof(uri_s),
                 "mongodb://%s/?directConnection=true&serverSelectionTimeoutMS=15000"
                 "&connectTimeoutMS=5000&maxPoolSize=200",
                 host);
    bson_error_t e;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(uri_s, &e);
    if (uri == NULL)
        return NULL;
    mongoc_client_pool_t *p = mongoc_client_pool_new(uri);
    mongoc_uri_destroy(uri);
    if (p != NULL) {
        mongoc_client_pool_set_error_api(p, MONGOC_ERROR_API_VERSION_2);
        mongoc_client_pool_set_appname(p, "sable-router");
    }
    return p;
}

int rt_remote_init(const char *cfg, sbl_err_t *err)
{
    mongoc_init();
    snprintf(configdb, sizeof(configdb), "%s", cfg);
    config_pool = pool_for(cfg);
    if (config_pool == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "bad --configdb: %s", cfg);
    return 0;
}

void rt_remote_shutdown(void)
{
    for (int i = 0; i < nshards; i++)
        if (shards[i].pool != NULL)
            mongoc_client_pool_destroy(shards[i].pool);
    nshards = 0;
    if (config_pool != NULL)
        mongoc_client_pool_destroy(config_pool);
    config_pool = NULL;
    mongoc_cleanup();
}

const char *rt_configdb(void)
{
    return configdb;
}

int rt_shard_find(const char *id)
{
    int n = __atomic_load_n(&nshards, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (strcmp(shards[i].id, id) == 0)
            return i;
    return -1;
}

int rt_shard_add(const char *id, const char *host)
{
    pthread_mutex_lock(&shards_lock);
    int i = rt_shard_find(id);
    if (i < 0 && nshards < RT_MAX_SHARDS) {
        rt_shard_t *s = &shards[nshards];
        snprintf(s->id, sizeof(s->id), "%s", id);
        snprintf(s->host, sizeof(s->host), "%s", host);
        s->pool = pool_for(host);
        if (s->pool != NULL) {
            i = nshards;
            __atomic_store_n(&nshards, nshards + 1, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&shards_lock);
    return i;
}

int rt_shard_count(void)
{
    return __atomic_load_n(&nshards, __ATOMIC_ACQUIRE);
}

const char *rt_shard_id(int i)
{
    return shards[i].id;
}

const char *rt_shard_host(int i)
{
    return shards[i].host;
}

int rt_reply_code(const bson_t *reply)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, reply, "ok") && bson_iter_as_double(&it) == 1.0)
        return 0;
    if (bson_iter_init_find(&it, reply, "code") && BSON_ITER_HOLDS_NUMBER(&it) &&
        bson_iter_as_int64(&it) != 0)
        return (int)bson_iter_as_int64(&it);
    return SBL_E_CommandFailed;
}

int rt_run(int shard, const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    mongoc_client_pool_t *pool =
        shard < 0 ? config_pool : (shard < rt_shard_count() ? shards[shard].pool : NULL);
    if (pool == NULL) {
        bson_init(reply);
        return sbl_err_set(err, SBL_E_ShardNotFound, "no shard %d", shard);
    }
    mongoc_client_t *cl = mongoc_client_pool_pop(pool);
    bson_error_t e;
    bool ok = mongoc_client_command_simple(cl, db, cmd, NULL, reply, &e);
    mongoc_client_pool_push(pool, cl);
    if (ok || e.domain == MONGOC_ERROR_SERVER || e.domain == MONGOC_ERROR_WRITE_CONCERN)
        return 0; /* the shard answered (maybe ok: 0): its reply says so */
    bson_destroy(reply);
    bson_init(reply);
    return sbl_err_set(err, SBL_E_HostUnreachable, "%s %s: %s",
                       shard < 0 ? "config servers" : "shard",
                       shard < 0 ? configdb : shards[shard].id, e.message);
}

void rt_copy_cmd(const bson_t *in, bson_t *out, const char *const *skip_extra)
{
    static const char *const skip[] = {"$db", "lsid", "txnNumber", "$clusterTime",
                                       "$readPreference", "autocommit", "startTransaction",
                                       "apiVersion", "apiStrict", "apiDeprecationErrors",
                                       NULL};
    bson_iter_t it;
    bson_iter_init(&it, in);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bool drop = false;
        for (int i = 0; skip[i] && !drop; i++)
            drop = strcmp(k, skip[i]) == 0;
        for (int i = 0; skip_extra && skip_extra[i] && !drop; i++)
            drop = strcmp(k, skip_extra[i]) == 0;
        if (!drop)
            bson_append_iter(out, k, -1, &it);
    }
}
