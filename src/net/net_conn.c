/*
 * net_conn.c: one connection's life on its loop thread: read and frame
 * messages, dispatch them one at a time, write replies, close.
 *
 * What must stay true:
 *  1. At most one request per connection is with the layer above
 *     (dispatched); later messages wait in rbuf, in order.
 *  2. The connection is freed only after its close callback ran AND no
 *     request is outstanding (the reply path frees it otherwise), so a late
 *     sbl_conn_reply never touches freed memory.
 *  3. Memory is bounded: reading pauses while more than READ_PAUSE bytes are
 *     buffered, dispatch pauses while more than WRITE_PAUSE bytes wait to be
 *     written, an exhaust stream's next reply waits while more than
 *     STREAM_PAUSE do (sbl_conn_when_drained), and a peer whose unwritten
 *     bytes pass WRITE_MAX is closed.
 *  4. Idle connections hold no read buffer: it is allocated in alloc_cb and
 *     given back as soon as every byte in it has been consumed (to the
 *     loop's few spare buffers, so a request costs no 64 KiB malloc/free).
 *  5. Replies leave in order.  A reply is held until the end of the loop
 *     iteration (a uv_check handle), so the loop serves every connection
 *     that is ready before it wakes their clients (fewer context switches
 *     on a machine the clients share: docs/BENCHMARKS.md); at most HOLD_MAX
 *     bytes per connection are held, and a close sends what is held first.
 *     With io_uring, one submission sends what every connection holds
 *     (flush_batch); a connection with bytes queued in libuv, or on TLS,
 *     is written the usual way so that nothing overtakes them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef SABLE_URING
#include <liburing.h>
#endif

#include "common/log.h"
#include "net/net_int.h"

#define READ_CHUNK NET_READ_CHUNK
#define READ_PAUSE ((size_t)64 * 1024 * 1024)
#define WRITE_PAUSE ((size_t)16 * 1024 * 1024)
#define WRITE_MAX ((size_t)128 * 1024 * 1024)
#define HOLD_MAX ((size_t)64 * 1024)
/* An exhaust stream's next reply waits while more than this is unwritten
 * (sbl_conn_when_drained): the socket's buffers, not ours, hold a stream. */
#define STREAM_PAUSE ((size_t)256 * 1024)

/* A uv_write in flight; mem (malloc'd) holds the bytes. */
typedef struct net_write {
    uv_write_t req;
    sbl_conn_t *conn;
    uint8_t *mem;
    size_t len;
} net_write_t;

static void conn_process(sbl_conn_t *c);
static void conn_write(sbl_conn_t *c, const uint8_t *data, size_t len, uint8_t *mem);

static int32_t next_reply_id(void)
{
    return (atomic_fetch_add_explicit(&net_g.next_reply_id, 1, memory_order_relaxed) + 1) &
           INT32_MAX;
}

/* Called for every request: the name is formatted once per connection. */
void net_conn_log_ctx(sbl_conn_t *c)
{
    if (c->logname[0] == '\0')
        snprintf(c->logname, sizeof(c->logname), "conn%llu", (unsigned long long)c->id);
    sbl_log_set_ctx(c->logname);
}

static void log_conn(char sev, int id, const char *msg, const sbl_conn_t *c, const char *error)
{
    bson_t attr;
    bson_init(&attr);
    if (error != NULL)
        BSON_APPEND_UTF8(&attr, "error", error);
    BSON_APPEND_UTF8(&attr, "remote", c->remote);
    BSON_APPEND_INT64(&attr, "connectionId", (int64_t)c->id);
    sbl_log(sev, "NETWORK", id, msg, &attr);
    bson_destroy(&attr);
}

static void conn_free(sbl_conn_t *c)
{
    net_loop_t *nl = c->nl;
    if (c->in_flush) {
        sbl_conn_t **pp = &nl->flush_list;
        while (*pp != NULL && *pp != c)
            pp = &(*pp)->flush_next;
        if (*pp == c)
            *pp = c->flush_next;
    }
    free(c->held);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        nl->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    if (c->free_fn != NULL)
        c->free_fn(c->data);
    net_tls_conn_free(c);
    free(c->rbuf);
    free(c);
    atomic_fetch_sub(&nl->nconns, 1);
    net_loop_conn_freed(nl);
}

static void close_cb(uv_handle_t *h)
{
    sbl_conn_t *c = h->data;
    c->closed = true;
    int64_t count = atomic_fetch_sub(&net_g.current, 1) - 1;
    net_conn_log_ctx(c);
    bson_t attr;
    bson_init(&attr);
    BSON_APPEND_UTF8(&attr, "remote", c->remote);
    BSON_APPEND_INT64(&attr, "connectionId", (int64_t)c->id);
    BSON_APPEND_INT64(&attr, "connectionCount", count);
    sbl_log(SBL_LOG_INFO, "NETWORK", 22944, "Connection ended", &attr);
    bson_destroy(&attr);
    if (c->opened && net_g.on_close != NULL)
        net_g.on_close(c);
    if (!c->dispatched)
        conn_free(c);
}

static void send_held(sbl_conn_t *c);

void net_conn_close(sbl_conn_t *c)
{
    if (c->closing)
        return;
    send_held(c); /* what was answered before the close still goes out */
    if (c->closing)
        return; /* that write failed and closed it already: a second uv_close aborts */
    c->closing = true;
    c->reading = false;
    uv_close((uv_handle_t *)&c->h.stream, close_cb);
}

void net_conn_discard(sbl_conn_t *c)
{
    close(c->fd);
    int64_t count = atomic_fetch_sub(&net_g.current, 1) - 1;
    bson_t attr;
    bson_init(&attr);
    BSON_APPEND_UTF8(&attr, "remote", c->remote);
    BSON_APPEND_INT64(&attr, "connectionId", (int64_t)c->id);
    BSON_APPEND_INT64(&attr, "connectionCount", count);
    sbl_log(SBL_LOG_INFO, "NETWORK", 22944, "Connection ended", &attr);
    bson_destroy(&attr);
    atomic_fetch_sub(&c->nl->nconns, 1);
    free(c);
}

/* Free the read buffer once everything in it was consumed (invariant 4). */
static void conn_shrink(sbl_conn_t *c)
{
    if (c->rstart != c->rend)
        return;
    c->rstart = c->rend = 0;
    net_loop_t *nl = c->nl;
    if (c->rcap == READ_CHUNK && nl->nspare < (int)(sizeof(nl->spare) / sizeof(nl->spare[0])))
        nl->spare[nl->nspare++] = c->rbuf;
    else
        free(c->rbuf);
    c->rbuf = NULL;
    c->rcap = 0;
}

uint8_t *net_conn_reserve(sbl_conn_t *c, size_t need)
{
    size_t pending = c->rend - c->rstart;
    int32_t mlen = 0;
    if (pending >= 4 && sbl_wire_message_length(c->rbuf + c->rstart, pending, &mlen) == 0 &&
        (size_t)mlen > pending && (size_t)mlen - pending > need)
        need = (size_t)mlen - pending; /* room for the rest of a large message */
    if (c->rbuf == NULL && need <= READ_CHUNK && c->nl->nspare > 0) {
        c->rbuf = c->nl->spare[--c->nl->nspare];
        c->rcap = READ_CHUNK;
    }
    if (c->rcap - c->rend < need && c->rstart > 0) {
        memmove(c->rbuf, c->rbuf + c->rstart, pending);
        c->rstart = 0;
        c->rend = pending;
    }
    if (c->rcap - c->rend < need) {
        uint8_t *p = realloc(c->rbuf, c->rend + need);
        if (p == NULL)
            return NULL;
        c->rbuf = p;
        c->rcap = c->rend + need;
    }
    return c->rbuf + c->rend;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    sbl_conn_t *c = h->data;
    if (c->tls_state == NET_TLS_ON) {
        *buf = net_tls_read_buffer(c);
        return;
    }
    uint8_t *p = net_conn_reserve(c, READ_CHUNK);
    if (p == NULL) {
        *buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
        return;
    }
    *buf = uv_buf_init((char *)p, (unsigned int)(c->rcap - c->rend));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    sbl_conn_t *c = s->data;
    if (nread > 0) {
        atomic_fetch_add_explicit(&net_g.bytes_in, nread, memory_order_relaxed);
        if (c->tls_state == NET_TLS_PLAIN) {
            c->rend += (size_t)nread;
        } else if (net_tls_on_read(c, (const uint8_t *)buf->base, (size_t)nread) != 0) {
            net_conn_close(c);
            conn_shrink(c);
            return;
        }
        conn_process(c);
    } else if (nread < 0) {
        if (nread != UV_EOF && nread != UV_ECONNRESET)
            log_conn(SBL_LOG_INFO, 22988, "Error receiving request from client. Ending connection",
                     c, uv_strerror((int)nread));
        net_conn_close(c);
    }
    conn_shrink(c);
}

/* Read while the buffered backlog is under the bound (invariant 3). */
static void conn_update_reading(sbl_conn_t *c)
{
    if (c->closing)
        return;
    bool want = c->rend - c->rstart < READ_PAUSE;
    if (want && !c->reading) {
        if (uv_read_start(&c->h.stream, alloc_cb, read_cb) == 0)
            c->reading = true;
        else
            net_conn_close(c);
    } else if (!want && c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = false;
    }
}

/* Dispatch buffered messages until one is outstanding or none is complete. */
static void conn_process(sbl_conn_t *c)
{
    if (c->processing)
        return; /* the caller up the stack keeps going (batching) */
    c->processing = true;
    while (!c->closing) {
        size_t pending = c->rend - c->rstart;
        int32_t mlen = 0;
        const uint8_t *head = c->rbuf != NULL ? c->rbuf + c->rstart : NULL;
        if (sbl_wire_message_length(head, pending, &mlen) != 0) {
            char why[96];
            int32_t raw = (int32_t)((uint32_t)head[0] | (uint32_t)head[1] << 8 |
                                    (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24);
            snprintf(why, sizeof(why), "message length %d is outside [16, %d]", raw,
                     SBL_MAX_MESSAGE_SIZE);
            log_conn(SBL_LOG_WARNING, 22988, "Error receiving request from client. Ending connection",
                     c, why);
            net_conn_close(c);
            break;
        }
        if (c->dispatched || c->wqueued > WRITE_PAUSE || mlen == 0 || (size_t)mlen > pending)
            break;
        sbl_request_t *req = malloc(sizeof(*req));
        if (req == NULL) {
            net_conn_close(c);
            break;
        }
        sbl_err_t err;
        sbl_err_clear(&err);
        int rc = sbl_wire_parse(c->rbuf + c->rstart, (size_t)mlen, req, &err);
        c->rstart += (size_t)mlen;
        if (rc != 0) {
            sbl_request_destroy(req);
            free(req);
            log_conn(SBL_LOG_WARNING, 22988, "Error receiving request from client. Ending connection",
                     c, err.msg);
            net_conn_close(c);
            break;
        }
        atomic_fetch_add_explicit(&net_g.num_requests, 1, memory_order_relaxed);
        c->dispatched = true;
        net_conn_log_ctx(c);
        net_g.on_request(c, req);
    }
    c->processing = false;
    conn_update_reading(c);
}

static void write_cb(uv_write_t *req, int status)
{
    net_write_t *w = (net_write_t *)req;
    sbl_conn_t *c = w->conn;
    c->wqueued -= w->len;
    free(w->mem);
    free(w);
    if (status < 0)
        net_conn_close(c);
    if (c->drained_fn != NULL && (c->closing || c->wqueued <= STREAM_PAUSE)) {
        void (*fn)(sbl_conn_t *, void *) = c->drained_fn;
        c->drained_fn = NULL;
        fn(c, c->drained_arg); /* before close_cb: the request is still outstanding */
    }
    if (status < 0)
        return;
    if (!c->closing && !c->dispatched)
        conn_process(c); /* dispatch may have paused on WRITE_PAUSE */
}

/* Send len bytes at data (encrypted first on a TLS connection).  Takes
 * ownership of mem (malloc'd, may be NULL when data is not to be freed). */
static void conn_write(sbl_conn_t *c, const uint8_t *data, size_t len, uint8_t *mem)
{
    if (c->tls_state == NET_TLS_ON) {
        net_tls_write(c, data, len);
        free(mem);
        return;
    }
    net_conn_write_raw(c, data, len, mem);
}

/* Send len bytes at data: try_write first, uv_write for the rest. */
void net_conn_write_raw(sbl_conn_t *c, const uint8_t *data, size_t len, uint8_t *mem)
{
    atomic_fetch_add_explicit(&net_g.bytes_out, (int64_t)len, memory_order_relaxed);
    uv_buf_t b = uv_buf_init((char *)data, (unsigned int)len);
    int n = uv_try_write(&c->h.stream, &b, 1);
    if (n >= 0 && (size_t)n == len) {
        free(mem);
        return;
    }
    if (n < 0 && n != UV_EAGAIN) {
        free(mem);
        net_conn_close(c);
        return;
    }
    size_t done = n > 0 ? (size_t)n : 0;
    size_t rest = len - done;
    net_write_t *w = malloc(sizeof(*w));
    if (w != NULL && mem == NULL) {
        mem = malloc(rest);
        if (mem != NULL)
            memcpy(mem, data + done, rest);
        data = mem;
        done = 0;
    }
    if (w == NULL || mem == NULL) {
        free(w);
        free(mem);
        net_conn_close(c);
        return;
    }
    w->conn = c;
    w->mem = mem;
    w->len = rest;
    b = uv_buf_init((char *)data + done, (unsigned int)rest);
    if (uv_write(&w->req, &c->h.stream, &b, 1, write_cb) != 0) {
        free(mem);
        free(w);
        net_conn_close(c);
        return;
    }
    c->wqueued += rest;
    if (c->wqueued > WRITE_MAX) {
        log_conn(SBL_LOG_WARNING, 22989, "Client is not reading its replies. Ending connection", c,
                 NULL);
        net_conn_close(c);
    }
}

/* The outstanding request is finished: free the connection if it closed
 * meanwhile, else dispatch what is buffered. */
static void conn_request_done(sbl_conn_t *c)
{
    c->dispatched = false;
    if (c->closed) {
        conn_free(c);
        return;
    }
    conn_process(c);
    conn_shrink(c);
}

/* Write what c holds now (the loop's flush, a close, a large reply). */
static void send_held(sbl_conn_t *c)
{
    uint8_t *d = c->held;
    size_t n = c->held_len;
    c->held = NULL;
    c->held_len = c->held_cap = 0;
    if (d != NULL && n > 0 && !c->closing)
        conn_write(c, d, n, d);
    else
        free(d);
}

#ifdef SABLE_URING
#define FLUSH_BATCH 256 /* the ring's size: replies sent per submission */

/* The ring is of no use any more (a short or failed submission): later
 * flushes write each reply. */
static void flush_ring_drop(net_loop_t *nl)
{
    sbl_log(SBL_LOG_WARNING, "NETWORK", 4784930,
            "io_uring submission failed; replies are written one at a time", NULL);
    io_uring_queue_exit(nl->ring);
    free(nl->ring);
    nl->ring = NULL;
}

/*
 * Send the held replies of connections c (linked by flush_next) with one
 * io_uring submission instead of a write each.  Each reply wakes its
 * client, and on a machine the clients share, the woken client preempts
 * the loop when the system call returns: once per flush this way, rather
 * than after every write (docs/BENCHMARKS.md, "Design choices measured").
 *
 * The sends carry MSG_DONTWAIT, so io_uring does them while submitting and
 * never parks one to retry later: every completion is there when the
 * submission returns, and every buffer's fate is settled here.  What a
 * socket did not take (a full send buffer) goes the usual way, through
 * net_conn_write_raw, which keeps it in order ahead of anything later.
 */
static void flush_batch(net_loop_t *nl, sbl_conn_t *c)
{
    struct {
        sbl_conn_t *conn;
        uint8_t *data;
        size_t len;
    } out[FLUSH_BATCH];
    unsigned n = 0;

    while (c != NULL) {
        sbl_conn_t *next = c->flush_next;
        c->in_flush = false;
        c->flush_next = NULL;
        struct io_uring_sqe *sqe;
        uv_os_fd_t fd;
        /* A TLS connection encrypts first; bytes already queued in libuv
         * must leave before these. */
        if (n == FLUSH_BATCH || c->closing || c->tls_state == NET_TLS_ON || c->wqueued > 0 ||
            c->held_len == 0 || uv_fileno((uv_handle_t *)&c->h.stream, &fd) != 0 ||
            (sqe = io_uring_get_sqe(nl->ring)) == NULL) {
            send_held(c);
            c = next;
            continue;
        }
        out[n].conn = c;
        out[n].data = c->held;
        out[n].len = c->held_len;
        c->held = NULL;
        c->held_len = c->held_cap = 0;
        io_uring_prep_send(sqe, fd, out[n].data, out[n].len, MSG_DONTWAIT | MSG_NOSIGNAL);
        io_uring_sqe_set_data64(sqe, n);
        n++;
        c = next;
    }
    if (n == 0)
        return;

    int submitted = io_uring_submit(nl->ring);
    if (submitted > 0) {
        atomic_fetch_add_explicit(&net_g.reply_batches, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&net_g.replies_batched, submitted, memory_order_relaxed);
    }
    unsigned done = 0;
    bool seen[FLUSH_BATCH] = {false};
    while (submitted > 0 && done < (unsigned)submitted) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(nl->ring, &cqe);
        if (rc == -EINTR)
            continue;
        if (rc < 0)
            break;
        unsigned i = (unsigned)io_uring_cqe_get_data64(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(nl->ring, cqe);
        done++;
        if (i >= n || seen[i])
            continue;
        seen[i] = true;
        sbl_conn_t *oc = out[i].conn;
        if (res >= 0 && (size_t)res == out[i].len) {
            atomic_fetch_add_explicit(&net_g.bytes_out, (int64_t)res, memory_order_relaxed);
            free(out[i].data);
        } else if (res >= 0 || res == -EAGAIN) {
            size_t sent = res > 0 ? (size_t)res : 0;
            atomic_fetch_add_explicit(&net_g.bytes_out, (int64_t)sent, memory_order_relaxed);
            net_conn_write_raw(oc, out[i].data + sent, out[i].len - sent, out[i].data);
        } else {
            free(out[i].data);
            net_conn_close(oc);
        }
    }
    if (submitted < 0 || done < n) {
        /* Sends the kernel never took are written now; one it took but
         * whose completion is missing cannot be told apart from them, so
         * that connection is closed rather than risk its bytes twice. */
        for (unsigned i = 0; i < n; i++) {
            if (seen[i])
                continue;
            sbl_conn_t *oc = out[i].conn;
            if (submitted >= 0 && i < (unsigned)submitted) {
                free(out[i].data);
                net_conn_close(oc);
            } else {
                net_conn_write_raw(oc, out[i].data, out[i].len, out[i].data);
            }
        }
        flush_ring_drop(nl);
    }
}
#endif

static void flush_cb(uv_check_t *h)
{
    net_loop_t *nl = h->data;
    /* A kick this loop gave itself first: the requests it resumes may
     * answer at once, and their replies then leave in this flush. */
    net_loop_kick_due(nl);
    sbl_conn_t *c = nl->flush_list;
    nl->flush_list = NULL;
    uv_idle_stop(&nl->flush_idle);
    if (atomic_load(&nl->kicked))
        net_flush_soon(nl); /* kicked again by that run: the next iteration's check */
#ifdef SABLE_URING
    if (nl->ring != NULL && c != NULL && c->flush_next != NULL) {
        flush_batch(nl, c);
        return;
    }
#endif
    while (c != NULL) {
        sbl_conn_t *next = c->flush_next;
        c->in_flush = false;
        c->flush_next = NULL;
        send_held(c);
        c = next;
    }
}

static void flush_idle_cb(uv_idle_t *h)
{
    (void)h; /* only there so that the iteration's poll does not block */
}

void net_flush_soon(net_loop_t *nl)
{
    uv_idle_start(&nl->flush_idle, flush_idle_cb);
}

/* Put c on its loop's flush list (at the front: the list goes out in the
 * reverse of the order connections joined it, the same for every reply). */
static void flush_enqueue(sbl_conn_t *c)
{
    if (c->in_flush)
        return;
    c->in_flush = true;
    c->flush_next = c->nl->flush_list;
    c->nl->flush_list = c;
    /* Held from a timer or a callback after the poll: the check runs only
     * after a poll, which must then not wait for new events. */
    net_flush_soon(c->nl);
}

void net_flush_init(net_loop_t *nl)
{
    uv_check_init(&nl->loop, &nl->flush);
    nl->flush.data = nl;
    uv_check_start(&nl->flush, flush_cb);
    uv_unref((uv_handle_t *)&nl->flush); /* it never keeps the loop alive */
    uv_idle_init(&nl->loop, &nl->flush_idle);
    nl->flush_idle.data = nl;
    nl->ring = NULL;
#ifdef SABLE_URING
    /* Where io_uring is missing or forbidden (an old kernel, a seccomp
     * profile, kernel.io_uring_disabled) each reply is written alone. */
    struct io_uring *ring = malloc(sizeof(*ring));
    int rc = ring != NULL ? io_uring_queue_init(FLUSH_BATCH, ring, 0) : -ENOMEM;
    if (rc == 0) {
        nl->ring = ring;
        return;
    }
    free(ring);
    if (nl->index == 0) {
        bson_t attr;
        bson_init(&attr);
        BSON_APPEND_UTF8(&attr, "error", strerror(-rc));
        sbl_log(SBL_LOG_INFO, "NETWORK", 4784931,
                "io_uring is not available; replies are written one at a time", &attr);
        bson_destroy(&attr);
    }
#endif
}

void net_flush_free(net_loop_t *nl)
{
#ifdef SABLE_URING
    if (nl->ring != NULL) {
        io_uring_queue_exit(nl->ring);
        free(nl->ring);
        nl->ring = NULL;
    }
#else
    (void)nl;
#endif
}

/* Queue a reply's wire bytes (mem: malloc'd and owned, or NULL to copy
 * data) behind what c holds; a large one goes out at once, after them.  When
 * c holds nothing and data is mem, mem itself is held (a reply is usually
 * alone in its iteration: one copy of its bytes less). */
static void hold_reply(sbl_conn_t *c, const uint8_t *data, size_t len, uint8_t *mem)
{
    if (c->closing) {
        free(mem);
        return;
    }
    if (c->held_len + len > HOLD_MAX) {
        send_held(c);
        conn_write(c, data, len, mem); /* copies only what the socket does not take */
        return;
    }
    if (c->held == NULL && mem == data) { /* the first reply held: kept, not copied */
        c->held = mem;
        c->held_len = c->held_cap = len;
        flush_enqueue(c);
        return;
    }
    if (c->held_len + len > c->held_cap) {
        size_t cap = c->held_cap ? c->held_cap * 2 : 4096;
        while (cap < c->held_len + len)
            cap *= 2;
        uint8_t *p = realloc(c->held, cap);
        if (p == NULL) {
            free(mem);
            net_conn_close(c);
            return;
        }
        c->held = p;
        c->held_cap = cap;
    }
    memcpy(c->held + c->held_len, data, len);
    c->held_len += len;
    free(mem);
    flush_enqueue(c);
}

void sbl_conn_hold_place(sbl_conn_t *c)
{
    if (!c->closing)
        flush_enqueue(c);
}

void net_conn_reply_arrived(net_reply_t *r)
{
    sbl_conn_t *c = r->conn;
    if (r->data != NULL && !c->closing)
        hold_reply(c, r->data, r->len, r->data);
    else
        free(r->data);
    free(r);
    conn_request_done(c);
}

/* sbl_conn_defer_replies: this thread's replies go through the loop's
 * queue even on the loop's own thread. */
static _Thread_local bool defer_replies;

void sbl_conn_defer_replies(bool on)
{
    defer_replies = on;
}

/* Send a reply's wire bytes (mem, malloc'd, taken; NULL: no reply) and
 * release req, from any thread. */
static void reply_bytes(sbl_conn_t *conn, sbl_request_t *req, uint8_t *mem, size_t len)
{
    net_loop_t *nl = conn->nl;
    if (net_current_loop() == nl && !defer_replies) {
        /* handed over, not copied again: what the socket does not take at once
           waits in this buffer (a 16 MB batch was copied twice on the loop) */
        if (mem != NULL && !conn->closing)
            hold_reply(conn, mem, len, mem);
        else
            free(mem);
        sbl_request_destroy(req);
        free(req);
        conn_request_done(conn);
        return;
    }
    /* Another thread: hand the bytes to the loop. */
    net_reply_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        abort(); /* the connection would otherwise hang forever */
    r->conn = conn;
    r->data = mem;
    r->len = len;
    sbl_request_destroy(req);
    free(req);
    pthread_mutex_lock(&nl->mu);
    if (nl->dead) {
        /* The loop gave up waiting at shutdown; the connection is abandoned. */
        pthread_mutex_unlock(&nl->mu);
        free(r->data);
        free(r);
        return;
    }
    if (nl->replies_tail != NULL)
        nl->replies_tail->next = r;
    else
        nl->replies = r;
    nl->replies_tail = r;
    uv_async_send(&nl->wake); /* under mu: wake is closed only after dead is set */
    pthread_mutex_unlock(&nl->mu);
}

void sbl_conn_reply(sbl_conn_t *conn, sbl_request_t *req, const bson_t *reply)
{
    uint8_t *mem = NULL;
    size_t len = 0;
    if (reply != NULL && !req->more_to_come) {
        sbl_buf_t out;
        sbl_buf_init(&out);
        sbl_wire_build_reply(req, next_reply_id(), reply, &out);
        mem = sbl_buf_steal(&out, &len);
    }
    reply_bytes(conn, req, mem, len);
}

void sbl_conn_reply_owned(sbl_conn_t *conn, sbl_request_t *req, uint8_t *mem, size_t body_len)
{
    sbl_wire_msg_head(req, next_reply_id(), (uint32_t)body_len, mem);
    reply_bytes(conn, req, mem, SBL_WIRE_MSG_HEAD + body_len);
}

void sbl_conn_close_request(sbl_conn_t *conn, sbl_request_t *req)
{
    net_conn_close(conn);
    sbl_conn_reply(conn, req, NULL);
}

void sbl_conn_reply_more(sbl_conn_t *conn, sbl_request_t *req, const bson_t *reply)
{
    if (conn->closing || (req->opcode != SBL_OP_MSG && !req->legacy_find))
        return;
    sbl_buf_t out;
    int32_t id = next_reply_id();
    int64_t cursor_id;
    sbl_buf_init(&out);
    req->reply_flags |= SBL_MSG_MORE_TO_COME;
    sbl_wire_build_reply(req, id, reply, &out);
    req->reply_flags &= ~SBL_MSG_MORE_TO_COME; /* the stream's last reply goes without */
    if (req->legacy_find) {
        int32_t n = sbl_wire_batch_count(reply, &cursor_id);
        req->legacy_from += n > 0 ? n : 0;
    }
    hold_reply(conn, out.data, out.len, NULL);
    sbl_buf_destroy(&out);
    req->request_id = id;
}

void sbl_conn_when_drained(sbl_conn_t *conn, void (*fn)(sbl_conn_t *conn, void *arg), void *arg)
{
    if (conn->closing || conn->wqueued <= STREAM_PAUSE) {
        fn(conn, arg);
        return;
    }
    conn->drained_fn = fn; /* a write is in flight: its callback comes, even at a close */
    conn->drained_arg = arg;
}

void net_conn_start(sbl_conn_t *c)
{
    net_loop_t *nl = c->nl;
    c->next = nl->conns;
    if (nl->conns != NULL)
        nl->conns->prev = c;
    nl->conns = c;
    int rc;
    if (c->is_unix) {
        uv_pipe_init(&nl->loop, &c->h.pipe, 0);
        rc = uv_pipe_open(&c->h.pipe, c->fd);
    } else {
        uv_tcp_init(&nl->loop, &c->h.tcp);
        rc = uv_tcp_open(&c->h.tcp, c->fd);
    }
    c->h.stream.data = c;
    if (rc != 0) {
        close(c->fd);
        log_conn(SBL_LOG_WARNING, 22988, "Could not open accepted connection", c, uv_strerror(rc));
        net_conn_close(c);
        return;
    }
    c->opened = true;
    net_tls_conn_init(c);
    net_conn_log_ctx(c);
    if (net_g.on_open != NULL)
        net_g.on_open(c);
    conn_update_reading(c);
}

uint64_t sbl_conn_id(const sbl_conn_t *conn)
{
    return conn->id;
}

const char *sbl_conn_remote(const sbl_conn_t *conn)
{
    return conn->remote;
}

const char *sbl_conn_local(const sbl_conn_t *conn)
{
    return conn->local;
}

bool sbl_conn_is_loopback(const sbl_conn_t *conn)
{
    return conn->loopback;
}

bool sbl_conn_is_unix(const sbl_conn_t *conn)
{
    return conn->is_unix;
}

bool sbl_conn_is_closing(const sbl_conn_t *conn)
{
    return conn->closing;
}

uv_loop_t *sbl_conn_loop(sbl_conn_t *conn)
{
    return &conn->nl->loop;
}

void sbl_conn_set_data(sbl_conn_t *conn, void *data, void (*free_fn)(void *))
{
    conn->data = data;
    conn->free_fn = free_fn;
}

void *sbl_conn_data(const sbl_conn_t *conn)
{
    return conn->data;
}
