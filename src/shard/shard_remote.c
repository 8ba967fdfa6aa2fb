/*
 * shard_remote.c: commands to other members of the cluster (a donor to its
 * recipient and to the config servers, a recipient to its donor, the config
 * server to a donor).  One libmongoc pool per connection string and socket
 * timeout, kept for the life of the process; a pool finds its set's primary
 * itself.
 */
#include "shard/shard.h"

#include "auth/auth.h"
#include "server/server.h"

#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_POOLS 64
#define DEFAULT_TIMEOUT_MS 600000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char *connstr;
    int timeout_ms;
    mongoc_client_pool_t *pool;
} pools[MAX_POOLS];
static int npools;

static mongoc_client_pool_t *pool_for(const char *connstr, int timeout_ms, sbl_err_t *err)
{
    mongoc_client_pool_t *p = NULL;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < npools && p == NULL; i++)
        if (strcmp(pools[i].connstr, connstr) == 0 && pools[i].timeout_ms == timeout_ms)
            p = pools[i].pool;
    if (p == NULL && npools < MAX_POOLS) {
        const char *slash = strchr(connstr, '/');
        char uri_s[4400], opts[300];
        if (slash != NULL)
            snprintf(opts, sizeof(opts), "replicaSet=%.*s&serverSelectionTimeoutMS=10000&"
                     "socketTimeoutMS=%d", (int)(slash - connstr), connstr, timeout_ms);
        else
            snprintf(opts, sizeof(opts), "serverSelectionTimeoutMS=10000&socketTimeoutMS=%d",
                     timeout_ms);
        /* with a keyFile, as __system (every member requires it) */
        bool fits = sbl_auth_cluster_uri(uri_s, sizeof(uri_s), sbl_server_options()->cluster_key,
                                         slash != NULL ? slash + 1 : connstr, opts);
        bson_error_t e;
        mongoc_init();
        mongoc_uri_t *uri = fits ? mongoc_uri_new_with_error(uri_s, &e) : NULL;
        if (uri != NULL) {
            p = mongoc_client_pool_new(uri);
            mongoc_uri_destroy(uri);
        }
        if (p != NULL) {
            mongoc_client_pool_set_error_api(p, MONGOC_ERROR_API_VERSION_2);
            pools[npools].connstr = strdup(connstr);
            pools[npools].timeout_ms = timeout_ms;
            pools[npools].pool = p;
            npools++;
        }
    }
    pthread_mutex_unlock(&mu);
    if (p == NULL)
        sbl_err_set(err, SBL_E_BadValue, "bad connection string %s", connstr);
    return p;
}

static int remote_run(const char *connstr, const char *db, const bson_t *cmd, int timeout_ms,
                      bson_t *reply, sbl_err_t *err)
{
    mongoc_client_pool_t *p = pool_for(connstr, timeout_ms, err);
    if (p == NULL) {
        bson_init(reply);
        return err->code;
    }
    mongoc_client_t *cl = mongoc_client_pool_pop(p);
    bson_error_t e;
    bool ok = mongoc_client_command_simple(cl, db, cmd, NULL, reply, &e);
    mongoc_client_pool_push(p, cl);
    if (!ok && e.domain != MONGOC_ERROR_SERVER && e.domain != MONGOC_ERROR_WRITE_CONCERN) {
        bson_destroy(reply);
        bson_init(reply);
        return sbl_err_set(err, SBL_E_HostUnreachable, "%s: %s", connstr, e.message);
    }
    return 0;
}

int sbl_shard_remote_run(const char *connstr, const char *db, const bson_t *cmd, bson_t *reply,
                         sbl_err_t *err)
{
    return remote_run(connstr, db, cmd, DEFAULT_TIMEOUT_MS, reply, err);
}

int sbl_shard_remote_check_within(const char *connstr, const char *db, const bson_t *cmd,
                                  int timeout_ms, bson_t *reply, sbl_err_t *err)
{
    int rc = remote_run(connstr, db, cmd, timeout_ms, reply, err);
    if (rc != 0)
        return rc;
    bson_iter_t it;
    if (bson_iter_init_find(&it, reply, "ok") && bson_iter_as_double(&it) == 1.0)
        return 0;
    int code = SBL_E_OperationFailed;
    const char *msg = "error";
    if (bson_iter_init_find(&it, reply, "code"))
        code = (int)bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
        msg = bson_iter_utf8(&it, NULL);
    const char *first = "";
    bson_iter_init(&it, cmd);
    if (bson_iter_next(&it))
        first = bson_iter_key(&it);
    rc = sbl_err_set(err, code, "%s on %s :: caused by :: %s", first, connstr, msg);
    return rc;
}

int sbl_shard_remote_check(const char *connstr, const char *db, const bson_t *cmd,
                           bson_t *reply, sbl_err_t *err)
{
    return sbl_shard_remote_check_within(connstr, db, cmd, DEFAULT_TIMEOUT_MS, reply, err);
}

void sbl_shard_remote_shutdown(void)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < npools; i++) {
        mongoc_client_pool_destroy(pools[i].pool);
        free(pools[i].connstr);
    }
    npools = 0;
    pthread_mutex_unlock(&mu);
}
