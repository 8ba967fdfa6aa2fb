/*
 * db_redis.c: the redis binding, behaving as YCSB's RedisClient: one hash
 * per record (HMSET / HGETALL / HMGET), and a sorted set "_indices" scored by
 * Java's String.hashCode of the key so scans can walk keys in score order.
 *
 * Must stay true: commands go one at a time, as the Jedis binding sends
 * them (insert = HMSET then ZADD), so round trips match YCSB's; values are
 * sent binary-safe with argument vectors.  One connection per thread.
 */
#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"

#define INDEX_KEY "_indices"

typedef struct redis_shared {
    char host[256];
    int port;
    char password[256];
    int timeout_ms;
    atomic_int errors_printed;
} redis_shared_t;

typedef struct redis_ctx {
    redis_shared_t *sh;
    redisContext *rc;
    const char **argv;
    size_t *argl;
    int argcap;
} redis_ctx_t;

int32_t bench_java_string_hash(const char *s)
{
    uint32_t h = 0;
    for (; *s; s++)
        h = 31 * h + (unsigned char)*s;
    return (int32_t)h;
}

static void report_error(redis_ctx_t *c, const char *what, const char *msg)
{
    if (atomic_fetch_add(&c->sh->errors_printed, 1) < 10)
        fprintf(stderr, "redis %s failed: %s\n", what, msg);
}

static redisContext *redis_connect(redis_shared_t *sh, char *err, size_t errlen)
{
    struct timeval tv = {.tv_sec = sh->timeout_ms / 1000, .tv_usec = (sh->timeout_ms % 1000) * 1000};
    redisContext *rc = redisConnectWithTimeout(sh->host, sh->port, tv);
    if (rc == NULL || rc->err) {
        snprintf(err, errlen, "cannot connect to %s:%d: %s", sh->host, sh->port, rc ? rc->errstr : "out of memory");
        if (rc)
            redisFree(rc);
        return NULL;
    }
    if (sh->password[0]) {
        redisReply *r = redisCommand(rc, "AUTH %s", sh->password);
        bool ok = r && r->type != REDIS_REPLY_ERROR;
        if (!ok)
            snprintf(err, errlen, "AUTH failed: %s", r ? r->str : rc->errstr);
        if (r)
            freeReplyObject(r);
        if (!ok) {
            redisFree(rc);
            return NULL;
        }
    }
    return rc;
}

static int redis_open(const bench_props_t *p, int nthreads, void **sharedp, char *err, size_t errlen)
{
    redis_shared_t *sh = calloc(1, sizeof(*sh));
    if (sh == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    bool bad = false;
    snprintf(sh->host, sizeof(sh->host), "%s", bench_props_str(p, "redis.host", "127.0.0.1"));
    sh->port = (int)bench_props_int(p, "redis.port", 6379, &bad);
    snprintf(sh->password, sizeof(sh->password), "%s", bench_props_str(p, "redis.password", ""));
    sh->timeout_ms = (int)bench_props_int(p, "redis.timeout", 2000, &bad);
    if (bad) {
        snprintf(err, errlen, "redis.port and redis.timeout must be numbers");
        free(sh);
        return -1;
    }
    redisContext *rc = redis_connect(sh, err, errlen); /* fail early when unreachable */
    if (rc == NULL) {
        free(sh);
        return -1;
    }
    redisFree(rc);
    *sharedp = sh;
    return 0;
}

static int redis_thread_init(void *shared, void **ctxp, char *err, size_t errlen)
{
    redis_ctx_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->sh = shared;
    c->rc = redis_connect(c->sh, err, errlen);
    if (c->rc == NULL) {
        free(c);
        return -1;
    }
    *ctxp = c;
    return 0;
}

static int ensure_args(redis_ctx_t *c, int n)
{
    if (n <= c->argcap)
        return 0;
    const char **a = realloc(c->argv, (size_t)n * sizeof(*a));
    if (a == NULL)
        return -1;
    c->argv = a;
    size_t *l = realloc(c->argl, (size_t)n * sizeof(*l));
    if (l == NULL)
        return -1;
    c->argl = l;
    c->argcap = n;
    return 0;
}

static redisReply *run(redis_ctx_t *c, int argc, const char *what)
{
    redisReply *r = redisCommandArgv(c->rc, argc, c->argv, c->argl);
    if (r == NULL) {
        report_error(c, what, c->rc->errstr);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        report_error(c, what, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static void setarg(redis_ctx_t *c, int i, const char *s, size_t len)
{
    c->argv[i] = s;
    c->argl[i] = len;
}

static bench_status_t hmset(redis_ctx_t *c, const char *key, const bench_field_t *v, int n, const char *what)
{
    if (ensure_args(c, 2 + 2 * n) != 0)
        return BENCH_ERROR;
    setarg(c, 0, "HMSET", 5);
    setarg(c, 1, key, strlen(key));
    for (int i = 0; i < n; i++) {
        setarg(c, 2 + 2 * i, v[i].name, strlen(v[i].name));
        setarg(c, 3 + 2 * i, v[i].value, v[i].len);
    }
    redisReply *r = run(c, 2 + 2 * n, what);
    bench_status_t st = (r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0) ? BENCH_OK : BENCH_ERROR;
    if (r)
        freeReplyObject(r);
    return st;
}

static bench_status_t redis_read(void *ctx, const char *table, const char *key, const char *const *fields,
                                 int nfields)
{
    redis_ctx_t *c = ctx;
    int argc;
    if (fields == NULL) {
        if (ensure_args(c, 2) != 0)
            return BENCH_ERROR;
        setarg(c, 0, "HGETALL", 7);
        setarg(c, 1, key, strlen(key));
        argc = 2;
    } else {
        if (ensure_args(c, 2 + nfields) != 0)
            return BENCH_ERROR;
        setarg(c, 0, "HMGET", 5);
        setarg(c, 1, key, strlen(key));
        for (int i = 0; i < nfields; i++)
            setarg(c, 2 + i, fields[i], strlen(fields[i]));
        argc = 2 + nfields;
    }
    redisReply *r = run(c, argc, "read");
    if (r == NULL)
        return BENCH_ERROR;
    /* YCSB: an empty result is an error (HMGET always yields one entry per field). */
    bench_status_t st = r->type == REDIS_REPLY_ARRAY && r->elements > 0 ? BENCH_OK : BENCH_ERROR;
    freeReplyObject(r);
    return st;
}

static bench_status_t redis_insert(void *ctx, const char *table, const char *key, const bench_field_t *values,
                                   int n)
{
    redis_ctx_t *c = ctx;
    if (hmset(c, key, values, n, "insert") != BENCH_OK)
        return BENCH_ERROR;
    char score[32];
    snprintf(score, sizeof(score), "%d", bench_java_string_hash(key));
    setarg(c, 0, "ZADD", 4);
    setarg(c, 1, INDEX_KEY, strlen(INDEX_KEY));
    setarg(c, 2, score, strlen(score));
    setarg(c, 3, key, strlen(key));
    redisReply *r = run(c, 4, "insert index");
    if (r == NULL)
        return BENCH_ERROR;
    freeReplyObject(r);
    return BENCH_OK;
}

static bench_status_t redis_update(void *ctx, const char *table, const char *key, const bench_field_t *values,
                                   int n)
{
    return hmset(ctx, key, values, n, "update");
}

static bench_status_t redis_delete(void *ctx, const char *table, const char *key)
{
    redis_ctx_t *c = ctx;
    if (ensure_args(c, 3) != 0)
        return BENCH_ERROR;
    setarg(c, 0, "DEL", 3);
    setarg(c, 1, key, strlen(key));
    redisReply *r = run(c, 2, "delete");
    if (r == NULL)
        return BENCH_ERROR;
    long long deleted = r->integer;
    freeReplyObject(r);
    setarg(c, 0, "ZREM", 4);
    setarg(c, 1, INDEX_KEY, strlen(INDEX_KEY));
    setarg(c, 2, key, strlen(key));
    r = run(c, 3, "delete index");
    if (r == NULL)
        return BENCH_ERROR;
    long long removed = r->integer;
    freeReplyObject(r);
    return deleted == 0 && removed == 0 ? BENCH_ERROR : BENCH_OK;
}

static bench_status_t redis_scan(void *ctx, const char *table, const char *startkey, int count,
                                 const char *const *fields, int nfields)
{
    redis_ctx_t *c = ctx;
    if (ensure_args(c, 7) != 0)
        return BENCH_ERROR;
    char score[32], cnt[32];
    snprintf(score, sizeof(score), "%d", bench_java_string_hash(startkey));
    snprintf(cnt, sizeof(cnt), "%d", count);
    setarg(c, 0, "ZRANGEBYSCORE", 13);
    setarg(c, 1, INDEX_KEY, strlen(INDEX_KEY));
    setarg(c, 2, score, strlen(score));
    setarg(c, 3, "+inf", 4);
    setarg(c, 4, "LIMIT", 5);
    setarg(c, 5, "0", 1);
    setarg(c, 6, cnt, strlen(cnt));
    redisReply *r = run(c, 7, "scan");
    if (r == NULL)
        return BENCH_ERROR;
    bench_status_t st = BENCH_OK;
    for (size_t i = 0; i < r->elements && st == BENCH_OK; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING)
            st = redis_read(ctx, table, r->element[i]->str, fields, nfields) == BENCH_OK ? BENCH_OK : BENCH_ERROR;
    freeReplyObject(r);
    return st;
}

static bench_status_t redis_thread_cleanup(void *ctx)
{
    redis_ctx_t *c = ctx;
    redisFree(c->rc);
    free(c->argv);
    free(c->argl);
    free(c);
    return BENCH_OK;
}

static void redis_close(void *shared) { free(shared); }

const bench_db_t bench_db_redis = {
    .name = "redis",
    .open = redis_open,
    .thread_init = redis_thread_init,
    .read = redis_read,
    .scan = redis_scan,
    .update = redis_update,
    .insert = redis_insert,
    .del = redis_delete,
    .thread_cleanup = redis_thread_cleanup,
    .close = redis_close,
};
