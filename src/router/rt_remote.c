/*
 * rt_remote.c: the router's connections to the shards and the config
 * servers.  Each shard has a libmongoc client pool on its replica set URI
 * (it finds the primary) and, for the hot path, a stack of plain TCP
 * connections to that primary on which the router writes OP_MSG commands
 * and reads the replies itself: libmongoc's per-command client work (it
 * copies and re-parses the server description on every command) was most
 * of the router's own cost per routed read.  The config servers are only
 * reached through libmongoc.
 *
 * Must stay true: a connection carries one request at a time and is
 * dropped, never reused, after any I/O error; after an error or a
 * not-primary answer (NotWritablePrimary, NotPrimaryNoSecondaryOk ...) the
 * shard's primary is looked up again, and a command outside a transaction
 * that a member refused as not primary (so it did not run) is sent once more
 * to the primary found, as mongos retries it.  Pools
 * are created when a shard is first seen and live until shutdown; the shard
 * list only grows (a removed shard keeps its slot), so an index into it
 * stays valid for the process lifetime.  Each shard counts the commands sent
 * to it and the time their replies took (relaxed atomics, for the
 * monitoring page); rt_host_run gives the poller of rt_watch.c one command
 * to one named member on a connection of its own.
 *
 * A shard's cursor lives on the member that opened it (mongos sends its
 * getMore there): each thread notes which member answered its last command
 * to each shard (rt_answered_by), and rt_run_on sends to that member,
 * over the shard's pooled connections while it is still the primary, else
 * over a connection of its own for that one command.
 */
#include "router/router_int.h"
#include "doc/doc.h"

#include "auth/auth.h"
#include "net/net.h"
#include "server/server.h"
#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <mongoc/mongoc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RT_IDLE_MAX 256   /* idle direct connections kept per shard */
#define RT_IO_TIMEOUT_MS 60000
#define RT_CONNECT_MS 5000 /* rt_run_on's own connection (as the pools' connectTimeoutMS) */

typedef struct rt_shard {
    char id[128];
    char host[1024];
    mongoc_client_pool_t *pool;
    pthread_mutex_t lock;     /* primary and idle */
    char primary[256];        /* "host:port", "" until found */
    int idle[RT_IDLE_MAX];
    int nidle;
    int64_t requests, wait_us; /* traffic (relaxed atomics) */
    bool draining, removed;    /* config.shards' state at the last reload (relaxed atomics) */
    uint64_t gen;              /* times the primary was forgotten (loops' connections: rt_fast.c) */
} rt_shard_t;

static pthread_mutex_t shards_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_shard_t shards[RT_MAX_SHARDS];
static int nshards; /* read without the lock after the slot is filled (only grows) */
static mongoc_client_pool_t *config_pool;
static char configdb[1024];

/*
 * The config servers' pool: at most this many clients.  Each new libmongoc
 * client authenticates with a keyFile by SCRAM-SHA-256 and derives its
 * salted password itself (libmongoc 1.23 caches it per client: 15,000
 * rounds, ~20 ms of CPU), and 100 new connections authenticating at once
 * (their users read from the config servers) grew the pool to ~100
 * clients: ~2 s of the router's CPU (bench/router-cpu --auth, "The
 * router's cost").  Commands wait in mongoc_client_pool_pop beyond it.
 */
#define CONFIG_POOL_MAX 32

/* "rs/h1:p1,h2:p2" -> mongodb://h1:p1,h2:p2/?replicaSet=rs; "h:p" -> mongodb://h:p/;
 * with a keyFile as __system@local (sbl_auth_cluster_uri); at most max clients. */
static mongoc_client_pool_t *pool_for(const char *host, int max)
{
    char uri_s[4400], opts[600];
    const char *slash = strchr(host, '/');
    const char *key = sbl_server_options()->cluster_key;
    if (slash != NULL)
        snprintf(opts, sizeof(opts),
                 "replicaSet=%.*s&serverSelectionTimeoutMS=15000"
                 "&connectTimeoutMS=5000&maxPoolSize=%d",
                 (int)(slash - host), host, max);
    else
        snprintf(opts, sizeof(opts), "directConnection=true&serverSelectionTimeoutMS=15000"
                 "&connectTimeoutMS=5000&maxPoolSize=%d", max);
    if (!sbl_auth_cluster_uri(uri_s, sizeof(uri_s), key, slash != NULL ? slash + 1 : host, opts))
        return NULL;
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
    config_pool = pool_for(cfg, CONFIG_POOL_MAX);
    if (config_pool == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "bad --configdb: %s", cfg);
    return 0;
}

/* Closing the pools: libmongoc ends the pooled sessions first, and with a
 * server down its server selection waits serverSelectionTimeoutMS (15 s)
 * per pool.  The closing runs on a thread of its own; shutdown waits for it
 * at most CLOSE_WAIT_MS, then leaves what is left to the process's exit. */
#define CLOSE_WAIT_MS 2000

static pthread_mutex_t close_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t close_cv = PTHREAD_COND_INITIALIZER;
static bool closed;

static void *close_main(void *arg)
{
    (void)arg;
    for (int i = 0; i < nshards; i++)
        if (shards[i].pool != NULL)
            mongoc_client_pool_destroy(shards[i].pool);
    if (config_pool != NULL)
        mongoc_client_pool_destroy(config_pool);
    pthread_mutex_lock(&close_mu);
    closed = true;
    pthread_cond_signal(&close_cv);
    pthread_mutex_unlock(&close_mu);
    return NULL;
}

void rt_remote_shutdown(void)
{
    for (int i = 0; i < nshards; i++)
        for (int k = 0; k < shards[i].nidle; k++)
            sbl_client_close(shards[i].idle[k]);
    pthread_t t;
    bool done = true;
    if (pthread_create(&t, NULL, close_main, NULL) != 0) {
        close_main(NULL);
    } else {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += CLOSE_WAIT_MS / 1000;
        pthread_mutex_lock(&close_mu);
        while (!closed && pthread_cond_timedwait(&close_cv, &close_mu, &until) == 0)
            ;
        done = closed;
        pthread_mutex_unlock(&close_mu);
        if (done)
            pthread_join(t, NULL);
        else
            pthread_detach(t);
    }
    if (!done) {
        sbl_log(SBL_LOG_INFO, "SHARDING", 0, "connections to an unreachable shard or config server "
                "not closed within 2 s: left to the exit", NULL);
        return; /* the thread is still in libmongoc: no cleanup under it */
    }
    nshards = 0;
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
        s->pool = pool_for(host, 200);
        pthread_mutex_init(&s->lock, NULL);
        s->primary[0] = '\0';
        s->nidle = 0;
        if (s->pool != NULL) {
            i = nshards;
            __atomic_store_n(&nshards, nshards + 1, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&shards_lock);
    return i;
}

void rt_shard_set_state(int i, bool draining, bool removed)
{
    __atomic_store_n(&shards[i].draining, draining, __ATOMIC_RELAXED);
    __atomic_store_n(&shards[i].removed, removed, __ATOMIC_RELAXED);
}

bool rt_shard_removed(int i)
{
    return __atomic_load_n(&shards[i].removed, __ATOMIC_RELAXED);
}

bool rt_shard_takes_data(int i)
{
    return !__atomic_load_n(&shards[i].draining, __ATOMIC_RELAXED) && !rt_shard_removed(i);
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

int rt_reply_error(const bson_t *reply, const char *what, sbl_err_t *err)
{
    int code = rt_reply_code(reply);
    if (code == 0)
        return 0;
    const char *m = sbl_doc_utf8(reply, "errmsg");
    return sbl_err_set(err, code, "%s :: caused by :: %s", what, m ? m : "error");
}

/* Through libmongoc (the config servers; a shard's primary lookup). */
static int run_mongoc(mongoc_client_pool_t *pool, const char *who, const char *db,
                      const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    mongoc_client_t *cl = mongoc_client_pool_pop(pool);
    bson_error_t e;
    bool ok = mongoc_client_command_simple(cl, db, cmd, NULL, reply, &e);
    mongoc_client_pool_push(pool, cl);
    if (ok || e.domain == MONGOC_ERROR_SERVER || e.domain == MONGOC_ERROR_WRITE_CONCERN)
        return 0; /* the server answered (maybe ok: 0): its reply says so */
    bson_destroy(reply);
    bson_init(reply);
    return sbl_err_set(err, SBL_E_HostUnreachable, "%s: %s", who, e.message);
}

/* Hellos before a shard is said to have no primary: 15 s, as long as the
 * pools wait for a primary libmongoc knows of none (serverSelectionTimeoutMS).
 * A member that stepped down when it saw a newer term names no primary
 * until that term's election is won, which on a loaded host may take
 * longer than a few seconds. */
#define PRIMARY_ASKS 150
#define PRIMARY_ASK_GAP_MS 100

/* The shard's primary, asked of its replica set through libmongoc. */
static int find_primary(rt_shard_t *s, char *out, size_t n, sbl_err_t *err)
{
    pthread_mutex_lock(&s->lock);
    snprintf(out, n, "%s", s->primary);
    pthread_mutex_unlock(&s->lock);
    if (out[0] != '\0')
        return 0;
    /* The member libmongoc thinks primary may have just stepped down and not
     * yet heard who won (its hello names no primary): ask again for a while
     * rather than take it for the primary; a new primary is known to the set
     * within a heartbeat or two of its election. */
    for (int attempt = 0; out[0] == '\0' && attempt < PRIMARY_ASKS; attempt++) {
        if (attempt > 0)
            usleep(PRIMARY_ASK_GAP_MS * 1000);
        bson_t cmd = BSON_INITIALIZER, reply;
        BSON_APPEND_INT32(&cmd, "hello", 1);
        int rc = run_mongoc(s->pool, s->id, "admin", &cmd, &reply, err);
        bson_destroy(&cmd);
        if (rc != 0)
            return rc;
        bson_iter_t it;
        if (bson_iter_init_find(&it, &reply, "primary") && BSON_ITER_HOLDS_UTF8(&it))
            snprintf(out, n, "%s", bson_iter_utf8(&it, NULL));
        else if (bson_iter_init_find(&it, &reply, "isWritablePrimary") &&
                 bson_iter_as_bool(&it) && bson_iter_init_find(&it, &reply, "me") &&
                 BSON_ITER_HOLDS_UTF8(&it))
            snprintf(out, n, "%s", bson_iter_utf8(&it, NULL));
        bson_destroy(&reply);
    }
    if (out[0] == '\0')
        return sbl_err_set(err, SBL_E_HostUnreachable, "shard %s has no primary", s->id);
    pthread_mutex_lock(&s->lock);
    snprintf(s->primary, sizeof(s->primary), "%s", out);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

static void forget_primary(rt_shard_t *s)
{
    pthread_mutex_lock(&s->lock);
    __atomic_add_fetch(&s->gen, 1, __ATOMIC_ACQ_REL);
    s->primary[0] = '\0';
    while (s->nidle > 0)
        sbl_client_close(s->idle[--s->nidle]);
    pthread_mutex_unlock(&s->lock);
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void count_traffic(rt_shard_t *s, int64_t t0)
{
    __atomic_add_fetch(&s->requests, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->wait_us, now_us() - t0, __ATOMIC_RELAXED);
}

void rt_shard_traffic(int i, int64_t *requests, int64_t *wait_us)
{
    *requests = __atomic_load_n(&shards[i].requests, __ATOMIC_RELAXED);
    *wait_us = __atomic_load_n(&shards[i].wait_us, __ATOMIC_RELAXED);
}

static int dial_auth(const char *hostport, int timeout_ms)
{
    return sbl_client_dial(hostport, timeout_ms, sbl_server_options()->cluster_key);
}

static int dial(const char *hostport)
{
    return dial_auth(hostport, RT_IO_TIMEOUT_MS);
}

/* The member that answered this thread's last command to each shard. */
static _Thread_local char answered[RT_MAX_SHARDS][RT_HOST_MAX];

const char *rt_answered_by(int shard)
{
    return shard >= 0 && shard < RT_MAX_SHARDS ? answered[shard] : "";
}

/* A connection to s's primary (its "host:port" into primary, RT_HOST_MAX
 * bytes): an idle one (*pooled) or a new one; -1 with err. */
static int conn_get(rt_shard_t *s, char *primary, bool *pooled, sbl_err_t *err)
{
    if (find_primary(s, primary, RT_HOST_MAX, err) != 0)
        return -1;
    int fd = -1;
    pthread_mutex_lock(&s->lock);
    /* the idle connections are to s->primary: to the one found only if it
     * was not forgotten (and another found) since */
    if (s->nidle > 0 && strcmp(s->primary, primary) == 0)
        fd = s->idle[--s->nidle];
    pthread_mutex_unlock(&s->lock);
    *pooled = fd >= 0;
    if (fd < 0 && (fd = dial(primary)) < 0) {
        forget_primary(s);
        sbl_err_set(err, SBL_E_HostUnreachable, "shard %s: cannot connect to %s", s->id, primary);
    }
    return fd;
}

/* Whether a connection that got reply may carry more commands (not when
 * its member is no primary now). */
static bool conn_keeps(const bson_t *reply)
{
    int code = rt_reply_code(reply);
    /* a read refused by a member that stepped down says NotPrimaryNoSecondaryOk */
    return code != SBL_E_NotWritablePrimary && code != SBL_E_PrimarySteppedDown &&
           code != SBL_E_InterruptedDueToReplStateChange &&
           code != SBL_E_NotPrimaryNoSecondaryOk && code != SBL_E_NotPrimaryOrSecondary;
}

/* Give fd, a connection to host, back after a reply (or drop it when the
 * member is no primary now).  Only a connection to the member the shard
 * names as primary now joins the idle ones: one to a primary forgotten
 * while it carried its command, kept, would take the next command (a
 * getMore for a cursor on the new primary, say) to the old one under the
 * new one's name. */
static void conn_put(rt_shard_t *s, int fd, const char *host, const bson_t *reply)
{
    bool keep = conn_keeps(reply);
    pthread_mutex_lock(&s->lock);
    if (keep && s->nidle < RT_IDLE_MAX && strcmp(s->primary, host) == 0)
        s->idle[s->nidle++] = fd;
    else
        sbl_client_close(fd);
    pthread_mutex_unlock(&s->lock);
    if (!keep)
        forget_primary(s);
}

/* Send on a connection of s, retrying once on a fresh one when an idle
 * connection turns out closed.  Returns the fd or -1 with err. */
static int conn_send(rt_shard_t *s, const char *db, const bson_t *cmd, const bson_t *extra,
                     int32_t *ridp, char *host, sbl_err_t *err)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        bool pooled;
        int fd = conn_get(s, host, &pooled, err);
        if (fd < 0)
            return -1;
        if (sbl_client_send(fd, db, cmd, extra, ridp))
            return fd;
        sbl_client_close(fd);
        if (!pooled)
            break;
    }
    forget_primary(s);
    sbl_err_set(err, SBL_E_HostUnreachable, "shard %s: cannot send to its primary", s->id);
    return -1;
}

/* Commands that change nothing: safe to send again after a connection
 * died without an answer (a shard restarted under an idle connection). */
static bool idempotent(const bson_t *cmd)
{
    static const char *const reads[] = {"find", "count", "distinct", "listCollections",
                                        "listIndexes", "listDatabases", "hello", "dbStats",
                                        "collStats", "getCmdLineOpts", NULL};
    bson_iter_t it;
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it))
        return false;
    for (int i = 0; reads[i]; i++)
        if (strcmp(bson_iter_key(&it), reads[i]) == 0)
            return true;
    return false;
}

/* The newest cluster time a shard's reply or a client's command showed,
 * with its signature (the router does not sign: as mongos, it passes on what
 * the shards signed); every command to a shard carries it ($clusterTime), so a
 * write routed after another lands at a later oplog time on any shard
 * (mongos's gossip). */
static _Atomic uint64_t cluster_time;
static pthread_mutex_t ct_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t ct_hash[SBL_CTIME_KEY_LEN]; /* cluster_time's signature (ct_lock) */
static int64_t ct_key_id;

/* Note the time of $clusterTime ct (its iterator) when newer.  Its time is
 * read first: a reply rarely shows a newer one, and its signature is then
 * not parsed. */
static void note_cluster_time_at(const bson_iter_t *ct)
{
    bson_iter_t f;
    uint64_t ts;
    uint32_t t, i;
    const uint8_t *hash;
    int64_t key_id;
    if (BSON_ITER_HOLDS_DOCUMENT(ct) && bson_iter_recurse(ct, &f) && bson_iter_next(&f) &&
        BSON_ITER_HOLDS_TIMESTAMP(&f) && strcmp(bson_iter_key(&f), "clusterTime") == 0) {
        bson_iter_timestamp(&f, &t, &i);
        if ((((uint64_t)t << 32) | i) <= atomic_load_explicit(&cluster_time, memory_order_relaxed))
            return;
    }
    if (!sbl_ctime_parse(ct, &ts, &hash, &key_id) ||
        ts <= atomic_load_explicit(&cluster_time, memory_order_relaxed))
        return;
    pthread_mutex_lock(&ct_lock);
    if (ts > atomic_load_explicit(&cluster_time, memory_order_relaxed)) {
        if (hash != NULL)
            memcpy(ct_hash, hash, sizeof(ct_hash));
        else
            memset(ct_hash, 0, sizeof(ct_hash));
        ct_key_id = key_id;
        atomic_store(&cluster_time, ts);
    }
    pthread_mutex_unlock(&ct_lock);
}

static void note_cluster_time(const bson_t *reply)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, reply, "$clusterTime"))
        note_cluster_time_at(&it);
}

/* This thread's {$clusterTime: ...} of time ct_tl_ts, built again only when
 * the cluster time changed (every reply and every command to a shard
 * carries it; a time's signature never changes: a time is only replaced by
 * a later one). */
static _Thread_local uint64_t ct_tl_ts;
static _Thread_local bson_t ct_tl_doc;

static const bson_t *cluster_time_doc(uint64_t *tsp)
{
    uint64_t ts = atomic_load(&cluster_time);
    if (ts == 0)
        return NULL;
    if (ts != ct_tl_ts) {
        uint8_t hash[SBL_CTIME_KEY_LEN];
        pthread_mutex_lock(&ct_lock);
        ts = atomic_load_explicit(&cluster_time, memory_order_relaxed);
        int64_t key_id = ct_key_id;
        memcpy(hash, ct_hash, sizeof(hash));
        pthread_mutex_unlock(&ct_lock);
        if (ct_tl_ts != 0)
            bson_destroy(&ct_tl_doc);
        bson_init(&ct_tl_doc);
        sbl_ctime_append(&ct_tl_doc, ts, hash, key_id);
        ct_tl_ts = ts;
    }
    *tsp = ts;
    return &ct_tl_doc;
}

bool rt_append_cluster_time(bson_t *out, bool op_time)
{
    uint64_t ts;
    const bson_t *d = cluster_time_doc(&ts);
    if (d == NULL)
        return false;
    bson_concat(out, d);
    if (op_time)
        BSON_APPEND_TIMESTAMP(out, "operationTime", (uint32_t)(ts >> 32), (uint32_t)ts);
    return true;
}

const uint8_t *rt_cluster_time_elem(size_t *lenp, uint64_t *tsp)
{
    const bson_t *d = cluster_time_doc(tsp);
    if (d == NULL)
        return NULL;
    *lenp = d->len - 5;
    return bson_get_data(d) + 4;
}

uint64_t rt_cluster_time(void)
{
    return atomic_load(&cluster_time);
}

/* Read admin.system.keys of the config servers and of every shard into the
 * process's key cache: a client may show a time any of them signed. */
static void reload_keys(void)
{
    sbl_ctime_key_t got[256];
    int n = 0;
    bson_t cmd = BSON_INITIALIZER;
    uint64_t now = atomic_load(&cluster_time);
    BSON_APPEND_UTF8(&cmd, "find", "system.keys");
    for (int i = -1; i < rt_shard_count(); i++) {
        bson_t reply;
        bson_iter_t it, b;
        sbl_err_t err;
        sbl_err_clear(&err);
        if (i >= 0 && rt_shard_removed(i))
            continue;
        if (rt_run(i, "admin", &cmd, &reply, &err) == 0 &&
            bson_iter_init(&it, &reply) &&
            bson_iter_find_descendant(&it, "cursor.firstBatch", &b) &&
            BSON_ITER_HOLDS_ARRAY(&b) && bson_iter_recurse(&b, &it))
            while (n < (int)(sizeof(got) / sizeof(got[0])) && bson_iter_next(&it)) {
                bson_t d;
                if (BSON_ITER_HOLDS_DOCUMENT(&it) && sbl_iter_doc(&it, &d) &&
                    sbl_ctime_key_parse(&d, &got[n]) && got[n].expires > now)
                    n++; /* expired keys check nothing: skipped */
            }
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    sbl_ctime_keys_set(got, n);
}

static int check_cluster_time_at(const bson_iter_t *it, bool may_advance, void (*reload)(void),
                                 sbl_err_t *err)
{
    if (!may_advance && sbl_auth_enabled() && sbl_server_options()->cluster_key != NULL)
        SBL_RET(sbl_ctime_check(it, atomic_load(&cluster_time), reload, err));
    /* gossiped in, as mongos's clock takes it: the shards hear of the time
     * with the next command, so one it reads at is not past their clocks */
    note_cluster_time_at(it);
    return 0;
}

int rt_check_cluster_time(const bson_t *cmd, bool may_advance, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, cmd, "$clusterTime"))
        return 0;
    return check_cluster_time_at(&it, may_advance, reload_keys, err);
}

int rt_check_cluster_time_at(const bson_iter_t *ct, bool may_advance, sbl_err_t *err)
{
    return check_cluster_time_at(ct, may_advance, NULL, err);
}

/* The fields the router adds to cmd for shard i into extra (session
 * fields, $clusterTime); false when none. */
static bool extra_for(int shard, const bson_t *cmd, bson_t *extra)
{
    bool any = rt_sess_extra(shard, cmd, extra);
    if (!bson_has_field(cmd, "$clusterTime"))
        any |= rt_append_cluster_time(extra, false);
    return any;
}

/* Whether reply is a member's refusal as not primary, given before the
 * command ran (a step-down's interruption may come after part of it). */
static bool refused_not_primary(const bson_t *reply)
{
    int code = rt_reply_code(reply);
    return code == SBL_E_NotWritablePrimary || code == SBL_E_NotPrimaryNoSecondaryOk ||
           code == SBL_E_NotPrimaryOrSecondary;
}

static int run_direct(rt_shard_t *s, const char *db, const bson_t *cmd, bson_t *reply,
                      sbl_err_t *err)
{
    int64_t t0 = now_us();
    bson_t extra = BSON_INITIALIZER;
    bool has_extra = extra_for((int)(s - shards), cmd, &extra);
    /* a retryable write (txnNumber, no transaction) may be sent again too:
     * the shard knows which of its statements ran */
    bool in_txn = bson_has_field(&extra, "autocommit");
    bool retry = idempotent(cmd) || (bson_has_field(&extra, "txnNumber") && !in_txn);
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t rid;
        char host[RT_HOST_MAX];
        int fd = conn_send(s, db, cmd, has_extra ? &extra : NULL, &rid, host, err);
        if (fd < 0)
            break;
        if (sbl_client_recv(fd, rid, reply)) {
            memcpy(answered[s - shards], host, RT_HOST_MAX);
            count_traffic(s, t0);
            conn_put(s, fd, host, reply); /* a not-primary answer: the primary is looked up again */
            if (attempt == 0 && !in_txn && refused_not_primary(reply)) {
                bson_destroy(reply);
                continue;
            }
            note_cluster_time(reply);
            rt_sess_reply((int)(s - shards), bson_has_field(&extra, "startTransaction"), reply);
            bson_destroy(&extra);
            return 0;
        }
        /* a write may have run: only reads and retryable writes are sent
         * again, once, after the primary is looked up again */
        sbl_client_close(fd);
        forget_primary(s);
        sbl_err_set(err, SBL_E_HostUnreachable, "shard %s: connection lost", s->id);
        if (!retry)
            break;
    }
    rt_sess_reply((int)(s - shards), bson_has_field(&extra, "startTransaction"), NULL);
    bson_destroy(&extra);
    bson_init(reply);
    return err->code ? err->code : SBL_E_HostUnreachable;
}

int rt_run_many(int n, const int *shard, const char *db, const bson_t *const *cmds,
                bson_t *replies, int *rcs, sbl_err_t *errs)
{
    return rt_run_many_on(n, shard, NULL, db, cmds, replies, rcs, errs);
}

int rt_run_many_on(int n, const int *shard, const char *const *on, const char *db,
                   const bson_t *const *cmds, bson_t *replies, int *rcs, sbl_err_t *errs)
{
    int fds[RT_MAX_SHARDS];
    char hosts[RT_MAX_SHARDS][RT_HOST_MAX];
    int32_t rids[RT_MAX_SHARDS];
    bool started[RT_MAX_SHARDS], in_txn[RT_MAX_SHARDS];
    int failed = 0;
    int64_t t0 = now_us();
    for (int i = 0; i < n; i++) {
        fds[i] = -1;
        rcs[i] = 0;
        if (shard[i] < 0 || shard[i] >= rt_shard_count()) {
            rcs[i] = rt_run(shard[i], db, cmds[i], &replies[i], &errs[i]);
            fds[i] = -2; /* answered already */
            continue;
        }
        if (on != NULL && on[i] != NULL && on[i][0] != '\0') {
            rt_shard_t *s = &shards[shard[i]];
            pthread_mutex_lock(&s->lock);
            bool primary = strcmp(s->primary, on[i]) == 0;
            pthread_mutex_unlock(&s->lock);
            if (!primary) { /* a member that stepped down: its own connection */
                rcs[i] = rt_run_on(shard[i], on[i], db, cmds[i], &replies[i], &errs[i]);
                fds[i] = -2;
                continue;
            }
        }
        bson_t extra = BSON_INITIALIZER;
        bool has_extra = extra_for(shard[i], cmds[i], &extra);
        fds[i] = conn_send(&shards[shard[i]], db, cmds[i], has_extra ? &extra : NULL, &rids[i],
                           hosts[i], &errs[i]);
        started[i] = bson_has_field(&extra, "startTransaction");
        in_txn[i] = bson_has_field(&extra, "autocommit");
        bson_destroy(&extra);
        if (fds[i] < 0) {
            bson_init(&replies[i]);
            rcs[i] = errs[i].code ? errs[i].code : SBL_E_HostUnreachable;
            rt_sess_reply(shard[i], started[i], NULL);
        }
    }
    for (int i = 0; i < n; i++) {
        if (fds[i] < 0) {
            failed += fds[i] == -1 || rcs[i] != 0;
            continue;
        }
        rt_shard_t *s = &shards[shard[i]];
        if (sbl_client_recv(fds[i], rids[i], &replies[i])) {
            memcpy(answered[shard[i]], hosts[i], RT_HOST_MAX);
            count_traffic(s, t0);
            conn_put(s, fds[i], hosts[i], &replies[i]);
            if (!in_txn[i] && refused_not_primary(&replies[i])) {
                bson_destroy(&replies[i]); /* once more, on the primary found now */
                if ((rcs[i] = run_direct(s, db, cmds[i], &replies[i], &errs[i])) != 0)
                    failed++;
                continue;
            }
            note_cluster_time(&replies[i]);
            rt_sess_reply(shard[i], started[i], &replies[i]);
        } else {
            rt_sess_reply(shard[i], started[i], NULL);
            sbl_client_close(fds[i]);
            forget_primary(s);
            bson_init(&replies[i]);
            rcs[i] = sbl_err_set(&errs[i], SBL_E_HostUnreachable, "shard %s: connection lost",
                                 s->id);
            failed++;
        }
    }
    return failed;
}

int rt_run(int shard, const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    if (shard < 0)
        return run_mongoc(config_pool, configdb, db, cmd, reply, err);
    if (shard >= rt_shard_count()) {
        bson_init(reply);
        return sbl_err_set(err, SBL_E_ShardNotFound, "no shard %d", shard);
    }
    return run_direct(&shards[shard], db, cmd, reply, err);
}

int rt_run_on(int shard, const char *host, const char *db, const bson_t *cmd, bson_t *reply,
              sbl_err_t *err)
{
    if (host == NULL || host[0] == '\0' || shard < 0 || shard >= rt_shard_count())
        return rt_run(shard, db, cmd, reply, err);
    rt_shard_t *s = &shards[shard];
    char primary[RT_HOST_MAX];
    pthread_mutex_lock(&s->lock);
    snprintf(primary, sizeof(primary), "%s", s->primary);
    pthread_mutex_unlock(&s->lock);
    if (strcmp(primary, host) == 0)
        return run_direct(s, db, cmd, reply, err);
    /* no longer the member the router sends to (it stepped down): one
     * connection for this command, closed after it */
    int64_t t0 = now_us();
    bson_t extra = BSON_INITIALIZER;
    bool has_extra = extra_for(shard, cmd, &extra);
    bool started = bson_has_field(&extra, "startTransaction");
    int32_t rid;
    int fd = dial_auth(host, RT_CONNECT_MS); /* a member gone must not hold the caller long */
    if (fd >= 0) {
        struct timeval tv = {.tv_sec = RT_IO_TIMEOUT_MS / 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    bool ok = fd >= 0 && sbl_client_send(fd, db, cmd, has_extra ? &extra : NULL, &rid) &&
              sbl_client_recv(fd, rid, reply);
    if (fd >= 0)
        sbl_client_close(fd);
    bson_destroy(&extra);
    if (!ok) {
        rt_sess_reply(shard, started, NULL);
        bson_init(reply);
        return sbl_err_set(err, SBL_E_HostUnreachable, "shard %s: no answer from %s", s->id,
                           host);
    }
    snprintf(answered[shard], RT_HOST_MAX, "%s", host);
    count_traffic(s, t0);
    note_cluster_time(reply);
    rt_sess_reply(shard, started, reply);
    return 0;
}

/* ---- a loop thread's read (rt_fast.c) ---- */

int rt_conn_borrow(int shard, char host[RT_HOST_MAX])
{
    /* A loop reads its connections non-blocking with recv(2): a TLS
     * session's records do not split that way, so with TLS to the shards
     * every command takes the worker path (blocking SSL_read). */
    if (sbl_client_tls_on())
        return -1;
    if (shard < 0 || shard >= rt_shard_count() || rt_shard_removed(shard))
        return -1;
    rt_shard_t *s = &shards[shard];
    int fd = -1;
    pthread_mutex_lock(&s->lock);
    if (s->primary[0] != '\0' && s->nidle > 0) {
        fd = s->idle[--s->nidle];
        memcpy(host, s->primary, RT_HOST_MAX);
    }
    pthread_mutex_unlock(&s->lock);
    return fd;
}

size_t rt_conn_msg(int shard, const char *db, const bson_t *cmd, uint8_t *buf, size_t cap,
                   int32_t *ridp)
{
    bson_t extra = BSON_INITIALIZER;
    /* extra_for without its look for cmd's own $clusterTime: rt_copy_cmd
     * built cmd, and left none */
    bool has_extra = rt_sess_extra(shard, cmd, &extra);
    has_extra |= rt_append_cluster_time(&extra, false);
    size_t n = sbl_client_msg_size(db, cmd, has_extra ? &extra : NULL);
    if (n <= cap)
        sbl_client_msg_build(db, cmd, has_extra ? &extra : NULL, buf, ridp);
    bson_destroy(&extra);
    return n <= cap ? n : 0;
}

bool rt_conn_write(int fd, const uint8_t *m, size_t n)
{
    return sbl_client_write(fd, m, n);
}

bool rt_conn_answered(int shard, const char *host, int64_t t0, const bson_t *reply)
{
    rt_shard_t *s = &shards[shard];
    memcpy(answered[shard], host, RT_HOST_MAX);
    count_traffic(s, t0);
    note_cluster_time(reply);
    if (!conn_keeps(reply)) {
        forget_primary(s);
        return false;
    }
    return true;
}

void rt_conn_answered_ok(int shard, const char *host, int64_t t0, const bson_iter_t *ct)
{
    memcpy(answered[shard], host, RT_HOST_MAX);
    count_traffic(&shards[shard], t0);
    if (ct != NULL)
        note_cluster_time_at(ct);
}

void rt_shard_forget(int shard)
{
    forget_primary(&shards[shard]);
}

uint64_t rt_shard_gen(int shard)
{
    return __atomic_load_n(&shards[shard].gen, __ATOMIC_ACQUIRE);
}

bool rt_refused_not_primary(const bson_t *reply)
{
    return refused_not_primary(reply);
}

int rt_host_run(const char *hostport, int *fdp, int timeout_ms, const char *db, const bson_t *cmd,
                bson_t *reply, sbl_err_t *err)
{
    int32_t rid;
    if (*fdp < 0 && (*fdp = dial_auth(hostport, timeout_ms)) < 0) {
        bson_init(reply);
        return sbl_err_set(err, SBL_E_HostUnreachable, "cannot connect to %s", hostport);
    }
    if (sbl_client_send(*fdp, db, cmd, NULL, &rid) && sbl_client_recv(*fdp, rid, reply))
        return 0;
    sbl_client_close(*fdp);
    *fdp = -1;
    bson_init(reply);
    return sbl_err_set(err, SBL_E_HostUnreachable, "%s: no answer", hostport);
}

void rt_copy_cmd(const bson_t *in, bson_t *out, const char *const *skip_extra)
{
    static const char *const skip[] = {"$db", "lsid", "txnNumber", "$clusterTime",
                                       "$readPreference", "autocommit", "startTransaction",
                                       "apiVersion", "apiStrict", "apiDeprecationErrors",
                                       "recoveryToken", "stmtId", "stmtIds", NULL};
    bson_iter_t it;
    if (!bson_iter_init(&it, in))
        return;
    /* the fields kept, byte for byte, gathered into one document appended at once */
    const uint8_t *raw = bson_get_data(in);
    uint8_t stack[2048];
    uint8_t *buf = in->len <= sizeof(stack) ? stack : bson_malloc(in->len);
    uint32_t n = 4;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bool drop = false;
        for (int i = 0; skip[i] && !drop; i++)
            drop = skip[i][0] == k[0] && strcmp(k, skip[i]) == 0;
        for (int i = 0; skip_extra && skip_extra[i] && !drop; i++)
            drop = strcmp(k, skip_extra[i]) == 0;
        if (!drop) {
            memcpy(buf + n, raw + it.off, it.next_off - it.off);
            n += it.next_off - it.off;
        }
    }
    buf[n++] = 0;
    memcpy(buf, &n, 4); /* little-endian, as the hosts sable runs on */
    bson_t kept;
    if (bson_init_static(&kept, buf, n))
        bson_concat(out, &kept);
    if (buf != stack)
        bson_free(buf);
}
