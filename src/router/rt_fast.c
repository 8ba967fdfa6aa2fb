/*
 * rt_fast.c: a find that goes to one shard, answered on the client
 * connection's loop thread, and the connections that carry it and the
 * one-shard writes of rt_fastw.c.  Every other routed command runs on
 * libuv's worker pool and blocks there while the shard answers; for 100 clients
 * reading single documents that hand-off (a worker woken per request, a
 * thread blocked in recv per request, the reply handed back to the loop)
 * and the pool's lock were most of the router's cost.  Here the loop sends
 * the command on a connection of its own to the shard's primary, watched by
 * a uv_poll, and replies from the loop once the shard's reply is in.  The
 * finds a loop iteration took are sent together at its end (a uv_check),
 * so a shard's loop woken by the first reads the others too.  A loop
 * takes its connections from the shard's pool (rt_conn_borrow: dialed and
 * authenticated by the workers) and keeps them, non-blocking and in its
 * epoll set, for its next reads (up to LOOP_IDLE per shard).
 *
 * Only the common case is taken: with authorization on, a client whose
 * privileges are resolved and current (rt_auth_check_loop); no transaction
 * or retryable write fields, no readConcern, a cached routing table that
 * names one shard, a connection to its known primary.  Anything else goes
 * to the worker pool before a byte is sent (rt_dispatch_worker), and so
 * does a command whose shard answers StaleConfig/StaleDbVersion or refuses
 * it as not primary (it did not run there): the worker path runs it again
 * from the start with its refresh and retries.  A find whose connection
 * fails goes there too (find changes nothing); a write's does not (it may
 * have run): the client gets HostUnreachable, as from the worker path.
 *
 * What must stay true: a connection carries one request at a time, and is
 * dropped after any I/O error, after an answer that says its member is no
 * primary, or when the shard's primary was forgotten since the loop took
 * it (rt_shard_gen); an idle connection that turns readable (the shard
 * closed it) is dropped; req is answered exactly once.  Everything here
 * runs on one loop thread (its state is thread-local).
 *
 * A find that goes to several shards (rt_scan.c) sends one command per
 * shard on these connections (rt_lconn_send): its connection's reply goes
 * to the scan's callback instead, and the scan gives the connection back.
 */
#include "router/router_int.h"

#include "auth/auth.h"
#include "doc/doc.h"
#include "net/net.h"
#include "wire/wire.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define FAST_CMD_MAX 4096       /* larger commands: the worker path (a send never blocks) */
#define FAST_TIMEOUT_MS 60000   /* as the pooled connections' read timeout (rt_remote.c) */
#define FAST_INLINE 16384       /* the command is built, and a reply up to this size read, here */
#define LOOP_IDLE 256           /* idle connections a loop keeps per shard */

/* A loop's connection to a shard's primary, and the command it carries. */
typedef struct fast_conn {
    uv_poll_t poll;             /* readable, for as long as it is open */
    uv_timer_t timer;           /* the reply's deadline */
    int open_handles;           /* poll and timer not yet closed */
    int shard, fd;
    uint64_t gen;               /* rt_shard_gen before it was borrowed */
    char host[RT_HOST_MAX];
    struct fast_conn *next;     /* the loop's idle list, or its queue */
    bool queued;                /* the command is built in buf, not sent yet */
    size_t out;                 /* its length */
    /* the command (client NULL: idle) */
    sbl_conn_t *client;
    rt_lconn_cb cb;             /* a scan's command: its reply goes there (rt_scan.c) */
    void *cb_arg;
    int cb_slot;
    bool cb_fired;              /* once: later events wait for the scan's release */
    bool broken;                /* not to be kept (closed or failed after cb fired) */
    sbl_request_t *req;
    const char *name;           /* "find", "insert", "update", "delete" (static) */
    rt_fast_kind_t kind;
    int32_t rid;
    int64_t t0;                 /* when the command came (opLatencies) */
    int64_t sent;               /* when it went to the shard (the shard's traffic) */
    char db[128];
    uint8_t *buf;               /* inline, or malloc'd for a larger reply */
    size_t have, need;          /* need: the reply's length once its header is in */
    uint8_t inline_buf[FAST_INLINE];
} fast_conn_t;

/* The loop thread's idle connections per shard, and the finds it sends at
 * the end of this loop iteration. */
typedef struct fast_loop {
    fast_conn_t *idle[RT_MAX_SHARDS];
    int nidle[RT_MAX_SHARDS];
    uv_check_t check;           /* sends the queued finds */
    fast_conn_t *queued;        /* built, not sent yet (fast_conn_t.next) */
    fast_conn_t **queued_tail;
} fast_loop_t;

static __thread fast_loop_t *tl;
/* [0] finds, [1] writes; relaxed atomics */
static int64_t n_answered[2], n_to_workers[2];

void rt_fast_counts(int64_t *reads, int64_t *reads_to_workers, int64_t *writes,
                    int64_t *writes_to_workers)
{
    *reads = __atomic_load_n(&n_answered[0], __ATOMIC_RELAXED);
    *reads_to_workers = __atomic_load_n(&n_to_workers[0], __ATOMIC_RELAXED);
    *writes = __atomic_load_n(&n_answered[1], __ATOMIC_RELAXED);
    *writes_to_workers = __atomic_load_n(&n_to_workers[1], __ATOMIC_RELAXED);
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* What admit read of a command in its one walk. */
typedef struct cmd_scan {
    bson_iter_t find, filter; /* find's (valid when has_find, has_filter) */
    bool has_find, has_filter;
    bool negative;            /* a negative skip or batchSize (rt_find refuses them) */
} cmd_scan_t;

/* Whether the loop may take cmd (no transaction or retryable write fields,
 * no readConcern; the dispatcher's checks, in its order, pass: an error is
 * the worker path's to answer), read in one walk into *sc. */
static bool admit(sbl_conn_t *conn, const char *name, const char *db, const bson_t *cmd,
                  cmd_scan_t *sc)
{
    bson_iter_t it, ct;
    bool has_ct = false, lsid_ok = true;
    uint8_t id[16];
    sbl_err_t err = {0};
    memset(sc, 0, sizeof(*sc));
    if (cmd->len > FAST_CMD_MAX || strlen(db) >= sizeof(((fast_conn_t *)0)->db) ||
        !bson_iter_init(&it, cmd))
        return false;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        switch (k[0]) { /* the names looked for, by their first letter */
        case 't':
        case 'a':
        case 'r':
            if (strcmp(k, "txnNumber") == 0 || strcmp(k, "autocommit") == 0 ||
                strcmp(k, "readConcern") == 0)
                return false;
            break;
        case 'l':
            if (strcmp(k, "lsid") == 0) /* as rt_sess_begin checks it */
                lsid_ok = lsid_ok && rt_sess_lsid(&it, id, &err) == 0;
            break;
        case '$':
            if (strcmp(k, "$clusterTime") == 0 && !has_ct) {
                ct = it;
                has_ct = true;
            }
            break;
        case 'f':
            if (strcmp(k, "find") == 0 && !sc->has_find) {
                sc->find = it;
                sc->has_find = true;
            } else if (strcmp(k, "filter") == 0 && !sc->has_filter) {
                sc->filter = it;
                sc->has_filter = true;
            }
            break;
        case 's':
        case 'b':
            if (strcmp(k, "startTransaction") == 0)
                return false;
            if ((strcmp(k, "skip") == 0 || strcmp(k, "batchSize") == 0) &&
                BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) < 0)
                sc->negative = true;
            break;
        default:
            break;
        }
    }
    return rt_auth_check_loop(conn, name, db, cmd, &err) == 0 &&
           (!has_ct || rt_check_cluster_time_at(&ct, rt_auth_may_advance_cluster_time(conn, name),
                                                &err) == 0) &&
           lsid_ok;
}

bool rt_fast_admit(sbl_conn_t *conn, const char *name, const char *db, const bson_t *cmd)
{
    cmd_scan_t sc;
    return admit(conn, name, db, cmd, &sc);
}

/* The one shard that answers cmd (a find on db, sc its walk), from the
 * cached routing table with its version appended to fwd (initialised
 * here); -1 when the worker path must decide; -2 when several shards answer
 * it, with *cp the collection's table (the caller releases it) and
 * targets[] filled. */
static int target(const char *db, const bson_t *cmd, const cmd_scan_t *sc, bson_t *fwd,
                  rt_coll_t **cp, bool targets[RT_MAX_SHARDS])
{
    if (!sc->has_find || !BSON_ITER_HOLDS_UTF8(&sc->find))
        return -1;
    char ns[400];
    uint32_t clen;
    const char *coll = bson_iter_utf8(&sc->find, &clen);
    size_t dlen = strlen(db);
    if (dlen + 1 + clen >= sizeof(ns))
        return -1;
    memcpy(ns, db, dlen);
    ns[dlen] = '.';
    memcpy(ns + dlen + 1, coll, clen + 1);
    bson_t filter = BSON_INITIALIZER;
    if (sc->has_filter && BSON_ITER_HOLDS_DOCUMENT(&sc->filter))
        sbl_iter_doc(&sc->filter, &filter);
    rt_coll_t *c = rt_coll_cached(ns);
    if (c == NULL)
        return -1;
    sbl_err_t err = {0};
    int s = -1;
    int nt = rt_target_read(c, &filter, targets, &err);
    if (c->primary >= 0 && nt > 1) {
        *cp = c;
        return -2;
    }
    if (c->primary >= 0 && nt == 1) {
        for (int i = 0; i < RT_MAX_SHARDS; i++)
            if (targets[i])
                s = i;
    }
    if (s >= 0) {
        bson_init(fwd);
        rt_copy_cmd(cmd, fwd, NULL);
        rt_append_version(fwd, c, s);
    }
    rt_coll_release(c);
    return s;
}

static void closed_cb(uv_handle_t *h)
{
    fast_conn_t *fc = h->data;
    if (--fc->open_handles > 0)
        return;
    sbl_client_close(fc->fd);
    if (fc->buf != fc->inline_buf)
        free(fc->buf);
    free(fc);
}

/* Close fc (its fd once libuv let go of it). */
static void conn_drop(fast_conn_t *fc)
{
    uv_close((uv_handle_t *)&fc->poll, closed_cb);
    uv_close((uv_handle_t *)&fc->timer, closed_cb);
}

static void readable_cb(uv_poll_t *p, int status, int events);

static void send_queued(uv_check_t *h);

/* A connection of this loop to shard's primary: an idle one still good, or
 * one taken from the shard's pool; NULL when neither. */
static fast_conn_t *conn_take(uv_loop_t *loop, int shard)
{
    if (tl == NULL) {
        if ((tl = calloc(1, sizeof(*tl))) == NULL)
            return NULL;
        tl->queued_tail = &tl->queued;
        uv_check_init(loop, &tl->check);
        uv_check_start(&tl->check, send_queued);
        uv_unref((uv_handle_t *)&tl->check);
    }
    uint64_t gen = rt_shard_gen(shard);
    while (tl->idle[shard] != NULL) {
        fast_conn_t *fc = tl->idle[shard];
        tl->idle[shard] = fc->next;
        tl->nidle[shard]--;
        if (fc->gen == gen)
            return fc;
        conn_drop(fc); /* its member may be no primary now */
    }
    char host[RT_HOST_MAX];
    int fd = rt_conn_borrow(shard, host);
    if (fd < 0)
        return NULL;
    fast_conn_t *fc = malloc(sizeof(*fc));
    if (fc != NULL)
        memset(fc, 0, offsetof(fast_conn_t, inline_buf));
    if (fc == NULL || uv_poll_init(loop, &fc->poll, fd) != 0) {
        sbl_client_close(fd); /* maybe non-blocking now: the pool dials another */
        free(fc);
        return NULL;
    }
    uv_timer_init(loop, &fc->timer);
    fc->poll.data = fc->timer.data = fc;
    fc->open_handles = 2;
    /* idle connections do not keep a stopping loop alive */
    uv_unref((uv_handle_t *)&fc->poll);
    uv_unref((uv_handle_t *)&fc->timer);
    fc->shard = shard;
    fc->fd = fd;
    fc->gen = gen;
    memcpy(fc->host, host, RT_HOST_MAX);
    fc->buf = fc->inline_buf;
    uv_poll_start(&fc->poll, UV_READABLE, readable_cb);
    return fc;
}

/* fc's command is over: keep it for the next (or drop it, keep false). */
static void conn_done(fast_conn_t *fc, bool keep)
{
    uv_timer_stop(&fc->timer);
    fc->client = NULL;
    fc->req = NULL;
    fc->cb = NULL;
    fc->cb_fired = false;
    if (fc->buf != fc->inline_buf) {
        free(fc->buf);
        fc->buf = fc->inline_buf;
    }
    fc->have = fc->need = 0;
    if (!keep || fc->broken || tl->nidle[fc->shard] >= LOOP_IDLE ||
        fc->gen != rt_shard_gen(fc->shard)) {
        conn_drop(fc);
        return;
    }
    fc->next = tl->idle[fc->shard];
    tl->idle[fc->shard] = fc;
    tl->nidle[fc->shard]++;
}

/* A scan's command is over (reply NULL: failed): its callback, once; the
 * connection waits, unwatched, for the scan to release it. */
static void fire(fast_conn_t *fc, const bson_t *reply, bool keep)
{
    uv_timer_stop(&fc->timer);
    uv_poll_stop(&fc->poll);
    fc->cb_fired = true;
    fc->broken = reply == NULL;
    fc->cb(fc->cb_arg, fc->cb_slot, fc, reply, keep);
}

/* Not the common case after all: fc is dropped (lost: the primary is
 * looked up again) and the worker path runs the command again (it did
 * not run on the shard). */
static void to_worker(fast_conn_t *fc, bool lost)
{
    if (fc->cb != NULL) { /* a scan's: it decides (and gives fc back) */
        if (lost)
            rt_shard_forget(fc->shard);
        fire(fc, NULL, false);
        return;
    }
    sbl_conn_t *client = fc->client;
    sbl_request_t *req = fc->req;
    if (lost)
        rt_shard_forget(fc->shard);
    __atomic_add_fetch(&n_to_workers[fc->kind != RT_FAST_FIND], 1, __ATOMIC_RELAXED);
    conn_done(fc, false);
    rt_dispatch_worker(client, req);
}

/* Answer fc's client as the worker path does when its shard's connection
 * is gone (HostUnreachable: nothing is re-sent), forget the shard's
 * primary, and drop the connection. */
static void answer_unreachable(fast_conn_t *fc)
{
    sbl_err_t err = {0};
    bson_t reply = BSON_INITIALIZER;
    rt_shard_forget(fc->shard);
    sbl_err_set(&err, SBL_E_HostUnreachable, "shard %s: connection lost",
                rt_shard_id(fc->shard));
    rt_answer(fc->client, fc->req, fc->name, fc->t0, err.code, &err, &reply);
    bson_destroy(&reply);
    conn_done(fc, false);
}

/* fc's connection failed, or its reply was no reply, after the command
 * went out: a find runs again on a worker; a write may have run, so the
 * client gets the worker path's answer, HostUnreachable (no retry: it has
 * no txnNumber for the shard to know it by). */
static void lost(fast_conn_t *fc)
{
    if (fc->kind == RT_FAST_FIND) {
        to_worker(fc, true);
        return;
    }
    __atomic_add_fetch(&n_answered[1], 1, __ATOMIC_RELAXED);
    answer_unreachable(fc);
}

/* Whether cursor document cur (its iterator) leaves no cursor open, as
 * rt_wrap_cursor_reply reads it (no id, or no ns). */
static bool cursor_closed(const bson_iter_t *cur)
{
    bson_iter_t f;
    int64_t id = 0;
    bool ns = false;
    if (!bson_iter_recurse(cur, &f))
        return true;
    while (bson_iter_next(&f)) {
        if (strcmp(bson_iter_key(&f), "id") == 0)
            id = bson_iter_as_int64(&f);
        else if (strcmp(bson_iter_key(&f), "ns") == 0 && BSON_ITER_HOLDS_UTF8(&f))
            ns = true;
    }
    return id == 0 || !ns;
}

#define PASS_SKIPS 4 /* fields left out of a reply passed on, at most */

/*
 * The common reply of a find or a write passed through (RT_FAST_WRITE),
 * passed on in one walk of the shard's bytes: ok: 1 and no cursor left
 * open, to a client that takes a plain OP_MSG.  The client's reply is the
 * shard's without its $clusterTime and operationTime, the router's
 * appended, as the worker path shapes it (rt_wrap_cursor_reply's copy or
 * on_reply's, then send_reply), built once into the bytes that go out; the
 * session is not looked at again (only a cursor the router keeps needs
 * it).  false: another case, nothing done.
 */
static bool pass_on(fast_conn_t *fc, const bson_t *r)
{
    bson_iter_t it, ct;
    bool ok = false, seen_ok = false, has_ct = false;
    uint32_t skip_off[PASS_SKIPS], skip_end[PASS_SKIPS];
    int nskip = 0;
    size_t skipped = 0;
    if ((fc->kind != RT_FAST_FIND && fc->kind != RT_FAST_WRITE) ||
        !sbl_wire_reply_plain(fc->req) || !bson_iter_init(&it, r))
        return false;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "ok") == 0 && !seen_ok) { /* rt_reply_code reads the first */
            seen_ok = true;
            ok = bson_iter_as_double(&it) == 1.0;
        } else if (strcmp(k, "cursor") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it) &&
                   fc->kind == RT_FAST_FIND) {
            if (!cursor_closed(&it))
                return false;
        } else if (strcmp(k, "$clusterTime") == 0 || strcmp(k, "operationTime") == 0) {
            if (nskip == PASS_SKIPS)
                return false;
            if (k[0] == '$' && !has_ct) {
                ct = it;
                has_ct = true;
            }
            skip_off[nskip] = it.off;
            skip_end[nskip] = it.next_off;
            skipped += it.next_off - it.off;
            nskip++;
        }
    }
    if (!ok)
        return false;
    rt_conn_answered_ok(fc->shard, fc->host, fc->sent, has_ct ? &ct : NULL);
    size_t ctlen = 0;
    uint64_t ts = 0;
    const uint8_t *mine = rt_cluster_time_elem(&ctlen, &ts);
    static const char op_time[] = "\x11operationTime"; /* a timestamp: its key and 8 bytes */
    size_t body = r->len - skipped + (mine != NULL ? ctlen + sizeof(op_time) + 8 : 0);
    uint8_t *mem = malloc(SBL_WIRE_MSG_HEAD + body);
    if (mem == NULL)
        return false;
    const uint8_t *in = bson_get_data(r);
    uint8_t *o = mem + SBL_WIRE_MSG_HEAD + 4;
    uint32_t from = 4;
    for (int i = 0; i < nskip; i++) {
        memcpy(o, in + from, skip_off[i] - from);
        o += skip_off[i] - from;
        from = skip_end[i];
    }
    memcpy(o, in + from, r->len - 1 - from);
    o += r->len - 1 - from;
    if (mine != NULL) {
        memcpy(o, mine, ctlen);
        o += ctlen;
        memcpy(o, op_time, sizeof(op_time)); /* with its NUL */
        o += sizeof(op_time);
        for (int i = 0; i < 8; i++)
            *o++ = (uint8_t)(ts >> (8 * i));
    }
    *o = 0;
    uint32_t len = (uint32_t)body;
    for (int i = 0; i < 4; i++)
        mem[SBL_WIRE_MSG_HEAD + i] = (uint8_t)(len >> (8 * i));
    __atomic_add_fetch(&n_answered[fc->kind != RT_FAST_FIND], 1, __ATOMIC_RELAXED);
    rt_count_op(fc->name, fc->t0);
    sbl_conn_reply_owned(fc->client, fc->req, mem, body);
    conn_done(fc, true);
    return true;
}

/* The shard's whole reply is in fc->buf. */
static void on_reply(fast_conn_t *fc)
{
    bson_t r, reply = BSON_INITIALIZER;
    sbl_err_t err = {0};
    /* the reply read where it lies (fc->buf, until conn_done) */
    if (!sbl_client_msg_view(fc->buf + 16, fc->need - 16, &r)) {
        if (fc->cb != NULL)
            to_worker(fc, true);
        else
            lost(fc);
        return;
    }
    if (fc->cb == NULL && pass_on(fc, &r))
        return;
    if (fc->cb != NULL) {
        bool keep = rt_conn_answered(fc->shard, fc->host, fc->sent, &r);
        fire(fc, &r, keep);
        return;
    }
    bool keep = rt_conn_answered(fc->shard, fc->host, fc->sent, &r);
    int code = rt_reply_code(&r);
    if (rt_stale_code(code) || rt_refused_not_primary(&r)) {
        bson_destroy(&r);
        to_worker(fc, false); /* refresh and retry, or the primary found again */
        return;
    }
    int rc = 0;
    if (fc->kind == RT_FAST_INSERT_SPLIT) {
        rt_insert_one_reply(&fc->req->cmd, &r, &reply);
    } else if (code != 0 || fc->kind == RT_FAST_WRITE) {
        /* passed through, as the worker path passes a one-shard write */
        bson_copy_to_excluding_noinit(&r, &reply, "$clusterTime", "operationTime", NULL);
    } else {
        /* a cursor left open becomes the router's, as on the worker path */
        rt_auth_enter(fc->client);
        if (rt_sess_begin("find", &fc->req->cmd, &err) == 0)
            rc = rt_wrap_cursor_reply(fc->shard, fc->db, &r, &reply, &err);
        rt_sess_end();
        rt_auth_leave();
    }
    bson_destroy(&r);
    __atomic_add_fetch(&n_answered[fc->kind != RT_FAST_FIND], 1, __ATOMIC_RELAXED);
    rt_answer(fc->client, fc->req, fc->name, fc->t0, rc, &err, &reply);
    bson_destroy(&reply);
    conn_done(fc, keep);
}

static void readable_cb(uv_poll_t *p, int status, int events)
{
    fast_conn_t *fc = p->data;
    (void)events;
    if (fc->queued)
        return; /* an error or close is seen once its command is sent */
    for (;;) {
        size_t want = fc->need > 0 ? fc->need - fc->have : FAST_INLINE - fc->have;
        ssize_t n = status < 0 ? -1 : recv(fc->fd, fc->buf + fc->have, want, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR && status >= 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && status >= 0)
            return; /* the rest later */
        if (fc->client == NULL) { /* idle: the shard closed it, or sent what nobody asked */
            tl->nidle[fc->shard]--;
            for (fast_conn_t **pp = &tl->idle[fc->shard]; *pp != NULL; pp = &(*pp)->next)
                if (*pp == fc) {
                    *pp = fc->next;
                    break;
                }
            conn_drop(fc);
            return;
        }
        if (n <= 0) {
            lost(fc);
            return;
        }
        fc->have += (size_t)n;
        if (fc->need == 0 && fc->have >= 16) {
            int64_t len = sbl_client_msg_len(fc->buf, fc->rid);
            if (len < 0 || fc->have > (size_t)len) { /* not the reply, or more than it */
                lost(fc);
                return;
            }
            fc->need = (size_t)len;
            if (fc->need > FAST_INLINE) {
                uint8_t *b = malloc(fc->need);
                if (b == NULL) {
                    lost(fc);
                    return;
                }
                memcpy(b, fc->buf, fc->have);
                fc->buf = b;
            }
        }
        if (fc->need > 0 && fc->have == fc->need) {
            on_reply(fc);
            return;
        }
    }
}

static void timeout_cb(uv_timer_t *t)
{
    fast_conn_t *fc = t->data;
    if (fc->cb != NULL) {
        to_worker(fc, true);
        return;
    }
    answer_unreachable(fc);
}

bool rt_fast_find(sbl_conn_t *conn, sbl_request_t *req)
{
    const bson_t *cmd = &req->cmd;
    const char *db = req->db[0] ? req->db : "admin";
    int64_t t0 = mono_us();
    cmd_scan_t sc;
    if (!admit(conn, "find", db, cmd, &sc) || sc.negative)
        return false;
    bson_t fwd;
    rt_coll_t *c = NULL;
    bool targets[RT_MAX_SHARDS];
    int s = target(db, cmd, &sc, &fwd, &c, targets);
    if (s == -2)
        return rt_scan_find(conn, req, db, t0, c, targets);
    if (s < 0)
        return false;
    bool took = rt_fast_send(conn, req, "find", RT_FAST_FIND, t0, db, s, &fwd);
    bson_destroy(&fwd);
    return took;
}

bool rt_fast_send(sbl_conn_t *conn, sbl_request_t *req, const char *name, rt_fast_kind_t kind,
                  int64_t t0, const char *db, int s, const bson_t *fwd)
{
    fast_conn_t *fc = conn_take(sbl_conn_loop(conn), s);
    if (fc == NULL)
        return false; /* the worker path dials, or looks the primary up */
    fc->client = conn;
    fc->req = req;
    fc->name = name;
    fc->kind = kind;
    fc->t0 = t0;
    size_t dl = strlen(db); /* admit checked its length */
    dl = dl < sizeof(fc->db) ? dl : sizeof(fc->db) - 1;
    memcpy(fc->db, db, dl);
    fc->db[dl] = '\0';
    fc->out = rt_conn_msg(s, db, fwd, fc->buf, FAST_INLINE, &fc->rid);
    if (fc->out == 0) {
        fc->client = NULL;
        fc->req = NULL;
        conn_done(fc, true);
        return false;
    }
    /* sent with the others at the end of the loop iteration: a shard's loop
     * woken once reads many */
    fc->queued = true;
    fc->next = NULL;
    *tl->queued_tail = fc;
    tl->queued_tail = &fc->next;
    return true;
}

/* The end of a loop iteration: every command queued in it goes to its shard
 * (one that cannot be sent did not reach it: the worker path runs it). */
static void send_queued(uv_check_t *h)
{
    (void)h;
    fast_conn_t *fc = tl->queued;
    tl->queued = NULL;
    tl->queued_tail = &tl->queued;
    while (fc != NULL) {
        fast_conn_t *next = fc->next;
        fc->queued = false;
        fc->sent = mono_us();
        if (!rt_conn_write(fc->fd, fc->buf, fc->out))
            to_worker(fc, true);
        else
            uv_timer_start(&fc->timer, timeout_cb, FAST_TIMEOUT_MS, 0);
        fc = next;
    }
}

rt_lconn_t *rt_lconn_send(sbl_conn_t *client, int shard, const char *db, const bson_t *cmd,
                          rt_lconn_cb cb, void *arg, int slot)
{
    fast_conn_t *fc = conn_take(sbl_conn_loop(client), shard);
    if (fc == NULL)
        return NULL;
    fc->out = rt_conn_msg(shard, db, cmd, fc->buf, FAST_INLINE, &fc->rid);
    if (fc->out == 0) {
        conn_done(fc, true);
        return NULL;
    }
    fc->client = client; /* busy */
    fc->cb = cb;
    fc->cb_arg = arg;
    fc->cb_slot = slot;
    fc->queued = true;
    fc->next = NULL;
    *tl->queued_tail = fc;
    tl->queued_tail = &fc->next;
    return fc;
}

void rt_lconn_release(rt_lconn_t *fc, bool keep)
{
    if (!fc->broken && keep) /* watched again while idle: a close is seen */
        uv_poll_start(&fc->poll, UV_READABLE, readable_cb);
    conn_done(fc, keep);
}

const char *rt_lconn_host(const rt_lconn_t *fc)
{
    return fc->host;
}
