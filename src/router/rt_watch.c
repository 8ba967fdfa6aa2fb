/*
 * rt_watch.c: what sable-router's monitoring page (--metricsPort, src/metrics)
 * knows about the shards.  A poller thread asks every shard once a second
 * for its members' states and optimes (replSetGetStatus, on a connection of
 * its own to one listed member, moving on to the next listed member when
 * that one does not answer) and publishes the answer; the metrics thread's
 * sources only copy what was published, and the router's own traffic to
 * each shard (rt_remote.c's counters).
 *
 * Must stay true: the metrics thread and the client-facing loops never wait
 * on a shard (only the poller does, holding no lock while it waits); a shard
 * none of whose members answers shows every listed member DOWN.
 */
#include "router/router.h"
#include "router/router_int.h"

#include "metrics/metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WATCH_INTERVAL_MS 1000
#define WATCH_TIMEOUT_MS 1000 /* connect, send, receive: per member tried */
#define WATCH_RELOAD_EVERY 10 /* rounds between re-reads of config.shards */
#define STATE_DOWN 8          /* MongoDB's member state */
#define STATE_PRIMARY 1

typedef struct watched {
    int fd;   /* the poller's connection (poller only) */
    int next; /* which listed member to ask first (poller only) */
    sbl_metrics_shard_t seen; /* published under W.lock */
    bool have;
} watched_t;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool running, stopping;
    watched_t sh[SBL_METRICS_MAX_SHARDS];
} W = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

/* The members a shard's host string lists ("rs/h1:p1,h2:p2" or "h:p"), at
 * most cap, each at most 127 bytes. */
static int listed_hosts(const char *host, char out[][128], int cap)
{
    const char *p = strchr(host, '/');
    int n = 0;
    p = p != NULL ? p + 1 : host;
    while (*p != '\0' && n < cap) {
        size_t len = strcspn(p, ",");
        if (len > 0 && len < 128) {
            memcpy(out[n], p, len);
            out[n++][len] = '\0';
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return n;
}

static int64_t date_of(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_DATE_TIME(&it))
        return bson_iter_date_time(&it);
    return 0;
}

/* replSetGetStatus's members into out: state, and lag behind the shard's
 * primary (else its furthest member) by last applied wall time. */
static void parse_status(const bson_t *reply, sbl_metrics_shard_t *out)
{
    bson_iter_t it, arr;
    int64_t wall[SBL_METRICS_MAX_SHARD_MEMBERS], top = 0, primary = 0;
    out->nmembers = 0;
    if (!bson_iter_init_find(&it, reply, "members") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr))
        return;
    while (bson_iter_next(&arr) && out->nmembers < SBL_METRICS_MAX_SHARD_MEMBERS) {
        bson_t m;
        const uint8_t *data;
        uint32_t len;
        bson_iter_t f;
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr))
            continue;
        bson_iter_document(&arr, &len, &data);
        if (!bson_init_static(&m, data, len))
            continue;
        sbl_metrics_member_t *mm = &out->members[out->nmembers];
        if (!bson_iter_init_find(&f, &m, "name") || !BSON_ITER_HOLDS_UTF8(&f))
            continue;
        snprintf(mm->name, sizeof(mm->name), "%s", bson_iter_utf8(&f, NULL));
        mm->state = bson_iter_init_find(&f, &m, "state") && BSON_ITER_HOLDS_NUMBER(&f)
                        ? (int)bson_iter_as_int64(&f)
                        : 6; /* UNKNOWN */
        int64_t w = date_of(&m, "lastAppliedWallTime");
        if (w == 0)
            w = date_of(&m, "optimeDate");
        wall[out->nmembers] = mm->state == STATE_DOWN ? 0 : w;
        if (wall[out->nmembers] > top)
            top = wall[out->nmembers];
        if (mm->state == STATE_PRIMARY)
            primary = w;
        out->nmembers++;
    }
    if (primary > 0)
        top = primary;
    for (size_t i = 0; i < out->nmembers; i++)
        out->members[i].lag_ms = wall[i] == 0 || top == 0 ? -1 : (top > wall[i] ? top - wall[i] : 0);
}

/* Ask shard i's members, one after another, until one answers. */
static void poll_shard(int i, watched_t *w, sbl_metrics_shard_t *out)
{
    char hosts[SBL_METRICS_MAX_SHARD_MEMBERS][128];
    int n = listed_hosts(rt_shard_host(i), hosts, SBL_METRICS_MAX_SHARD_MEMBERS);
    bson_t cmd = BSON_INITIALIZER;
    BSON_APPEND_INT32(&cmd, "replSetGetStatus", 1);
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", rt_shard_id(i));
    bool answered = false;
    int start = n > 0 ? w->next % n : 0;
    for (int k = 0; k < n && !answered; k++) {
        const char *hp = hosts[(start + k) % n];
        bson_t reply;
        sbl_err_t err = {0};
        if (rt_host_run(hp, &w->fd, WATCH_TIMEOUT_MS, "admin", &cmd, &reply, &err) == 0) {
            int code = rt_reply_code(&reply);
            if (code == 0) {
                parse_status(&reply, out);
                answered = out->nmembers > 0;
            } else if (code == SBL_E_NoReplicationEnabled) { /* a standalone shard */
                snprintf(out->members[0].name, sizeof(out->members[0].name), "%.127s", hp);
                out->members[0].state = STATE_PRIMARY;
                out->members[0].lag_ms = 0;
                out->nmembers = 1;
                answered = true;
            }
        }
        bson_destroy(&reply);
        if (answered) {
            w->next = (start + k) % n; /* keep asking this one */
        } else if (w->fd >= 0) {  /* ask the next one, on a new connection */
            sbl_client_close(w->fd);
            w->fd = -1;
        }
    }
    bson_destroy(&cmd);
    if (!answered) {
        for (int k = 0; k < n; k++) {
            snprintf(out->members[k].name, sizeof(out->members[k].name), "%.127s", hosts[k]);
            out->members[k].state = STATE_DOWN;
            out->members[k].lag_ms = -1;
        }
        out->nmembers = (size_t)n;
    }
}

static void *watch_main(void *arg)
{
    sbl_metrics_shard_t got;
    unsigned round = 0;
    pthread_mutex_lock(&W.lock);
    while (!W.stopping) {
        pthread_mutex_unlock(&W.lock);
        if (++round % WATCH_RELOAD_EVERY == 0) {
            sbl_err_t err = {0};
            rt_shards_reload(&err); /* shards another router added */
        }
        int n = rt_shard_count();
        for (int i = 0; i < n && i < SBL_METRICS_MAX_SHARDS; i++) {
            poll_shard(i, &W.sh[i], &got);
            pthread_mutex_lock(&W.lock);
            W.sh[i].seen = got;
            W.sh[i].have = true;
            pthread_mutex_unlock(&W.lock);
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)WATCH_INTERVAL_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_mutex_lock(&W.lock);
        if (!W.stopping)
            pthread_cond_timedwait(&W.wake, &W.lock, &until);
    }
    pthread_mutex_unlock(&W.lock);
    for (int i = 0; i < SBL_METRICS_MAX_SHARDS; i++)
        if (W.sh[i].fd >= 0)
            sbl_client_close(W.sh[i].fd);
    return NULL;
}

int sbl_router_watch_start(sbl_err_t *err)
{
    if (W.running)
        return 0;
    for (int i = 0; i < SBL_METRICS_MAX_SHARDS; i++)
        W.sh[i].fd = -1;
    W.stopping = false;
    if (pthread_create(&W.thread, NULL, watch_main, NULL) != 0)
        return sbl_err_set(err, SBL_E_InternalError, "cannot start the shard poller");
    W.running = true;
    return 0;
}

void rt_watch_stop(void)
{
    if (!W.running)
        return;
    pthread_mutex_lock(&W.lock);
    W.stopping = true;
    pthread_cond_signal(&W.wake);
    pthread_mutex_unlock(&W.lock);
    pthread_join(W.thread, NULL);
    W.running = false;
}

/* ---- the monitoring page's sources ----------------------------------------------- */

static void src_connections(int64_t *current, int64_t *created, int64_t *available)
{
    sbl_net_stats_t ns;
    sbl_net_get_stats(&ns);
    *current = ns.current;
    *created = ns.total_created;
    *available = ns.available;
}

static void src_network(int64_t *in, int64_t *out, int64_t *requests)
{
    sbl_net_stats_t ns;
    sbl_net_get_stats(&ns);
    *in = ns.bytes_in;
    *out = ns.bytes_out;
    *requests = ns.num_requests;
}

static size_t src_shards(sbl_metrics_shard_t *out, size_t cap)
{
    int n = rt_shard_count();
    size_t k = 0;
    for (int i = 0; i < n && i < SBL_METRICS_MAX_SHARDS && k < cap; i++) {
        pthread_mutex_lock(&W.lock);
        if (W.sh[i].have) {
            out[k] = W.sh[i].seen;
        } else { /* not polled yet: the name, no members */
            memset(&out[k], 0, sizeof(out[k]));
            snprintf(out[k].name, sizeof(out[k].name), "%s", rt_shard_id(i));
        }
        pthread_mutex_unlock(&W.lock);
        rt_shard_traffic(i, &out[k].requests, &out[k].latency_us);
        k++;
    }
    return k;
}

const struct sbl_metrics_sources *sbl_router_metrics_sources(void)
{
    static const sbl_metrics_sources_t src = {
        .connections = src_connections,
        .network = src_network,
        .shards = src_shards,
        .authorize = rt_auth_metrics_authorize,
    };
    return &src;
}
