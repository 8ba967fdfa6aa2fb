/*
 * rt_scan.c: a find that goes to several shards, run from the client
 * connection's loop thread (workload E's scans: a range of a hashed key,
 * sorted, limited).  rt_fast.c's one-shard find, widened: the command of
 * every targeted shard goes out at once on the loop's own connections
 * (rt_lconn_send), and when the last reply is in, the merge reads the
 * shards' batches where they lie in the connections' buffers (no copy, no
 * worker hop).  That covers the scan whose shards exhausted their cursors
 * in their first batch (limit + skip documents at most one batch): the
 * common case.
 *
 * Anything else leaves the loop:
 *  - a shard cursor left open (more than a batch): the merge runs on the
 *    worker pool, which may fetch (getMore) and keeps the router's cursor;
 *  - a connection that failed, a StaleConfig/StaleDbVersion answer, or a
 *    member that is no primary: the worker path runs the find again from
 *    the start (with its refresh and retries; find changes nothing), and
 *    the cursors the other shards opened are killed on the worker pool;
 *  - a shard's error reply: answered here, as rt_find answers it (the first
 *    in shard order), the other shards' open cursors killed on the workers.
 *
 * What must stay true: req is answered exactly once; every connection sent
 * is released once, after its reply (or failure) came, and only after the
 * merge stopped reading its buffer.  Everything here runs on one loop
 * thread, except the jobs handed to the worker pool, which own what they
 * hold.
 */
#include "router/router_int.h"

#include "auth/auth.h"
#include "net/net.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

typedef struct scan {
    sbl_conn_t *client;
    sbl_request_t *req;
    int64_t t0;
    char db[128], coll[256];
    rt_find_opts_t o;
    int n, pending;
    bool partial;               /* a shard had no connection at hand: the workers run it */
    int shard[RT_MAX_SHARDS];
    rt_lconn_t *lc[RT_MAX_SHARDS];
    bool have[RT_MAX_SHARDS], keep[RT_MAX_SHARDS];
    bson_t reply[RT_MAX_SHARDS]; /* views into lc[i]'s buffer (have[i]); last, not zeroed */
} scan_t;

/* What a worker does with a scan's replies (owned copies). */
typedef struct scan_job {
    uv_work_t work;
    bool merge;                 /* merge and answer; else kill the open cursors */
    sbl_conn_t *client;
    sbl_request_t *req;
    int64_t t0;
    char db[128], coll[256];
    rt_find_opts_t o;
    bson_t sort;                /* o.sort's copy */
    int n;
    int shard[RT_MAX_SHARDS];
    char *host[RT_MAX_SHARDS];
    int64_t id[RT_MAX_SHARDS];  /* kill: the open cursors */
    bson_t reply[RT_MAX_SHARDS]; /* merge: the shards' first replies */
} scan_job_t;

static int64_t n_answered, n_to_workers; /* relaxed atomics */

void rt_scan_counts(int64_t *answered, int64_t *to_workers)
{
    *answered = __atomic_load_n(&n_answered, __ATOMIC_RELAXED);
    *to_workers = __atomic_load_n(&n_to_workers, __ATOMIC_RELAXED);
}

/* The shard cursor reply r left open (0: none). */
static int64_t open_cursor(const bson_t *r)
{
    bson_iter_t it;
    if (bson_iter_init(&it, r) && bson_iter_find_descendant(&it, "cursor.id", &it) &&
        BSON_ITER_HOLDS_NUMBER(&it))
        return bson_iter_as_int64(&it);
    return 0;
}

static void job_work(uv_work_t *w)
{
    scan_job_t *j = w->data;
    if (!j->merge) {
        bool was = rt_sess_suspend(true);
        for (int i = 0; i < j->n; i++)
            rt_kill_shard_cursor(j->shard[i], j->host[i], j->db, j->coll, j->id[i]);
        rt_sess_suspend(!was);
        return;
    }
    bson_t reply = BSON_INITIALIZER;
    sbl_err_t err = {0};
    rt_auth_enter(j->client);
    int rc = rt_sess_begin("find", &j->req->cmd, &err);
    if (rc == 0)
        rc = rt_find_merge(j->db, j->coll, &j->o, j->reply, j->shard,
                           (const char *const *)j->host, j->n, false, &reply, &err);
    else
        for (int i = 0; i < j->n; i++)
            bson_destroy(&j->reply[i]);
    rt_sess_end();
    rt_auth_leave();
    rt_answer(j->client, j->req, "find", j->t0, rc, &err, &reply);
    bson_destroy(&reply);
}

static void job_after(uv_work_t *w, int status)
{
    scan_job_t *j = w->data;
    (void)status;
    for (int i = 0; i < j->n; i++)
        free(j->host[i]);
    bson_destroy(&j->sort);
    free(j);
}

static scan_job_t *job_new(const scan_t *sc, bool merge)
{
    size_t sz = (sizeof(scan_job_t) + 127) & ~(size_t)127; /* it embeds bson_t */
    scan_job_t *j = aligned_alloc(128, sz);
    if (j == NULL)
        return NULL;
    memset(j, 0, sz);
    j->merge = merge;
    j->client = sc->client;
    j->req = sc->req;
    j->t0 = sc->t0;
    memcpy(j->db, sc->db, sizeof(j->db));
    memcpy(j->coll, sc->coll, sizeof(j->coll));
    j->o = sc->o;
    bson_copy_to(&sc->o.sort, &j->sort);
    bson_init_static(&j->o.sort, bson_get_data(&j->sort), j->sort.len);
    j->work.data = j;
    return j;
}

/* Run j on the worker pool (or here when it cannot be queued). */
static void job_queue(scan_job_t *j)
{
    if (uv_queue_work(sbl_conn_loop(j->client), &j->work, job_work, job_after) != 0) {
        job_work(&j->work);
        job_after(&j->work, 0);
    }
}

/* The cursors the shards left open are killed on the worker pool. */
static void kill_open(const scan_t *sc)
{
    scan_job_t *j = NULL;
    for (int i = 0; i < sc->n; i++) {
        int64_t id = sc->have[i] && rt_reply_code(&sc->reply[i]) == 0
                         ? open_cursor(&sc->reply[i])
                         : 0;
        if (id == 0 || (j == NULL && (j = job_new(sc, false)) == NULL))
            continue;
        j->shard[j->n] = sc->shard[i];
        j->host[j->n] = strdup(rt_lconn_host(sc->lc[i]));
        j->id[j->n++] = id;
    }
    if (j != NULL)
        job_queue(j);
}

static void release_all(scan_t *sc)
{
    for (int i = 0; i < sc->n; i++)
        rt_lconn_release(sc->lc[i], sc->have[i] && sc->keep[i]);
    free(sc);
}

/* Every shard answered (or failed): merge, or hand the find on. */
static void scan_finish(scan_t *sc)
{
    bool retry = sc->partial, open = false;
    int error = -1;
    for (int i = 0; i < sc->n; i++) {
        if (!sc->have[i]) {
            retry = true;
            continue;
        }
        int code = rt_reply_code(&sc->reply[i]);
        if (rt_stale_code(code) || rt_refused_not_primary(&sc->reply[i]))
            retry = true; /* refresh and retry, or the primary found again */
        else if (code != 0 && error < 0 && !retry)
            error = i;
        else if (code == 0 && open_cursor(&sc->reply[i]) != 0)
            open = true;
    }
    bson_t reply = BSON_INITIALIZER;
    sbl_err_t err = {0};
    if (retry) {
        kill_open(sc);
        __atomic_add_fetch(&n_to_workers, 1, __ATOMIC_RELAXED);
        rt_dispatch_worker(sc->client, sc->req);
    } else if (error >= 0) {
        kill_open(sc);
        bson_copy_to_excluding_noinit(&sc->reply[error], &reply, "$clusterTime",
                                      "operationTime", NULL);
        __atomic_add_fetch(&n_answered, 1, __ATOMIC_RELAXED);
        rt_answer(sc->client, sc->req, "find", sc->t0, 0, &err, &reply);
    } else if (open) {
        /* more than a batch: the merge may fetch, on the worker pool */
        scan_job_t *j = job_new(sc, true);
        if (j == NULL) {
            kill_open(sc);
            rt_dispatch_worker(sc->client, sc->req);
        } else {
            for (int i = 0; i < sc->n; i++) {
                j->shard[j->n] = sc->shard[i];
                j->host[j->n] = strdup(rt_lconn_host(sc->lc[i]));
                bson_copy_to(&sc->reply[i], &j->reply[j->n++]);
            }
            job_queue(j);
        }
        __atomic_add_fetch(&n_to_workers, 1, __ATOMIC_RELAXED);
    } else {
        /* every shard cursor exhausted: merged here, from the buffers, into
         * a reply sized for all they hold (never grown by copying) */
        const char *hosts[RT_MAX_SHARDS];
        size_t total = 512; /* the cursor's fields, ok, $clusterTime */
        for (int i = 0; i < sc->n; i++) {
            hosts[i] = rt_lconn_host(sc->lc[i]);
            total += sc->reply[i].len;
        }
        bson_t *out = bson_sized_new(total);
        rt_auth_enter(sc->client);
        int rc = rt_sess_begin("find", &sc->req->cmd, &err);
        if (rc == 0)
            rc = rt_find_merge(sc->db, sc->coll, &sc->o, sc->reply, sc->shard, hosts, sc->n,
                               true, out, &err);
        rt_sess_end();
        rt_auth_leave();
        __atomic_add_fetch(&n_answered, 1, __ATOMIC_RELAXED);
        rt_answer(sc->client, sc->req, "find", sc->t0, rc, &err, out);
        bson_destroy(out);
    }
    bson_destroy(&reply);
    release_all(sc);
}

static void on_reply(void *arg, int slot, rt_lconn_t *lc, const bson_t *reply, bool keep)
{
    scan_t *sc = arg;
    (void)lc;
    if (reply != NULL) {
        bson_init_static(&sc->reply[slot], bson_get_data(reply), reply->len);
        sc->have[slot] = true;
        sc->keep[slot] = keep;
    }
    if (--sc->pending == 0)
        scan_finish(sc);
}

bool rt_scan_find(sbl_conn_t *conn, sbl_request_t *req, const char *db, int64_t t0,
                  rt_coll_t *c, const bool targets[RT_MAX_SHARDS])
{
    const bson_t *cmd = &req->cmd;
    sbl_err_t err = {0};
    bson_iter_t it;
    size_t sz = (sizeof(scan_t) + 127) & ~(size_t)127; /* it embeds bson_t */
    scan_t *sc = NULL;
    if (!bson_iter_init_find(&it, cmd, "find") || !BSON_ITER_HOLDS_UTF8(&it) ||
        strlen(bson_iter_utf8(&it, NULL)) >= sizeof(sc->coll) ||
        (sc = aligned_alloc(128, sz)) == NULL) {
        rt_coll_release(c);
        return false;
    }
    memset(sc, 0, offsetof(scan_t, reply));
    snprintf(sc->coll, sizeof(sc->coll), "%s", bson_iter_utf8(&it, NULL));
    snprintf(sc->db, sizeof(sc->db), "%s", db);
    if (rt_find_opts(cmd, &sc->o, &err) != 0 || sc->o.meta_sort) {
        rt_coll_release(c);
        free(sc);
        return false; /* the worker path answers or runs it as a pipeline */
    }
    sc->client = conn;
    sc->req = req;
    sc->t0 = t0;
    /* a connection for every shard before a byte is queued, or the workers run it */
    for (int s = 0; s < RT_MAX_SHARDS; s++) {
        if (!targets[s])
            continue;
        bson_t fwd;
        rt_find_shard_cmd(cmd, &sc->o, c, s, &fwd);
        rt_lconn_t *lc = rt_lconn_send(conn, s, db, &fwd, on_reply, sc, sc->n);
        bson_destroy(&fwd);
        if (lc == NULL)
            break;
        sc->shard[sc->n] = s;
        sc->lc[sc->n++] = lc;
        sc->pending++;
    }
    int nt = 0;
    for (int s = 0; s < RT_MAX_SHARDS; s++)
        nt += targets[s];
    rt_coll_release(c);
    if (sc->n == 0) {
        free(sc);
        return false;
    }
    /* the commands queued go out anyway: once they are answered, the workers run it */
    sc->partial = sc->n < nt;
    return true;
}
