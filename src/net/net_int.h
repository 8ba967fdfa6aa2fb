/*
 * net_int.h: what net.c (listener, loops, start/stop) and net_conn.c
 * (one connection's reading, dispatch and writing) share.  Private to
 * src/net/.
 *
 * Threads: the listener thread accepts and hands each new connection to a
 * loop through that loop's mutex-guarded inbox + uv_async; everything in
 * sbl_conn_t is then touched only by its loop thread, except c->nl, which
 * never changes.  Replies from other threads travel through the same inbox.
 */
#ifndef SBL_NET_INT_H
#define SBL_NET_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include <openssl/ssl.h>

#include "net/net.h"

typedef struct net_loop net_loop_t;

/* A reply built on another thread, waiting for its connection's loop. */
typedef struct net_reply {
    struct net_reply *next;
    sbl_conn_t *conn;
    uint8_t *data; /* malloc'd wire bytes; NULL when nothing is to be sent */
    size_t len;
} net_reply_t;

/* Bytes a connection reads at a time (its read buffer's usual size). */
#define NET_READ_CHUNK (64 * 1024)

struct net_loop {
    uv_loop_t loop;
    uv_thread_t thread;
    uv_async_t wake; /* inbox has something, or stop was requested */
    uv_timer_t deadline; /* bounds the wait for outstanding replies at stop */
    int index;
    atomic_int_fast64_t nconns; /* connections assigned (for balancing) */

    pthread_mutex_t mu; /* guards the inbox and the two flags below */
    sbl_conn_t *incoming; /* accepted, not yet started; linked by next */
    net_reply_t *replies, *replies_tail;
    bool stop_requested;
    bool dead; /* wake is closed: late replies are dropped */
    atomic_bool kicked; /* sbl_net_kick_loops asked for the kick function's run */

    /* loop thread only */
    sbl_conn_t *conns; /* every connection of this loop not yet freed */
    uint8_t *spare[8]; /* read buffers of NET_READ_CHUNK bytes kept for reuse */
    int nspare;
    bool stopping;
    bool finished;
    uv_check_t flush;       /* at the end of each iteration: send the held replies */
    uv_idle_t flush_idle;   /* active while replies are held: the poll does not block */
    sbl_conn_t *flush_list; /* connections holding replies, linked by flush_next */
    struct io_uring *ring;  /* sends a flush's replies in one system call; NULL: write each */
};

/* Start the loop's end-of-iteration flush of held replies (net_conn.c);
 * the handle is closed with the loop's others. */
void net_flush_init(net_loop_t *nl);
/* Free what net_flush_init allocated beside the handles (after the loop closed). */
void net_flush_free(net_loop_t *nl);
/* Loop thread: make this iteration's poll not block, so that its flush
 * (and a kick due, net_loop_kick_due) runs without waiting for an event. */
void net_flush_soon(net_loop_t *nl);
/* Loop thread: run the kick function (sbl_net_set_kick) if a kick is due. */
void net_loop_kick_due(net_loop_t *nl);

struct sbl_conn {
    /* first: the handle's memory is the connection's.  A TCP connection
     * uses tcp, one accepted on a Unix-domain socket pipe; the rest of the
     * connection's code sees only the stream. */
    union {
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    net_loop_t *nl;
    sbl_conn_t *prev, *next;
    int fd; /* the accepted socket, until the loop opens it */
    uint64_t id;
    char logname[24]; /* "conn<id>", formatted on first use */
    char remote[64];
    char local[112]; /* "127.0.0.1:27017", or the socket's path */
    bool loopback;   /* from 127/8, ::1 or a Unix-domain socket */
    bool is_unix;    /* accepted on a Unix-domain socket (h.pipe) */

    /* Read buffer: unconsumed bytes are rbuf[rstart..rend). */
    uint8_t *rbuf;
    size_t rcap, rstart, rend;
    size_t wqueued; /* bytes handed to uv_write and not yet written */
    /* sbl_conn_when_drained's continuation: called from write_cb once wqueued is
     * down to STREAM_PAUSE (or the connection failed); NULL: none waits */
    void (*drained_fn)(sbl_conn_t *conn, void *arg);
    void *drained_arg;

    bool opened;     /* uv handle initialised; on_open called */
    bool reading;    /* uv_read_start is active */
    bool dispatched; /* a request is with the layer above */
    bool processing; /* conn_process is on the stack */
    bool closing;    /* uv_close called */
    /* Replies held until the end of the loop iteration (net_conn.c). */
    bool in_flush;   /* on nl->flush_list */
    sbl_conn_t *flush_next;
    uint8_t *held;   /* malloc'd wire bytes, held_len of held_cap used */
    size_t held_len, held_cap;
    bool closed;     /* close callback ran; freed once !dispatched */

    void *data;
    void (*free_fn)(void *);

    struct net_tls *tls; /* TLS state (net_tls.c) once the connection chose TLS, else NULL */
    uint8_t tls_state;   /* NET_TLS_PLAIN / NET_TLS_UNDECIDED / NET_TLS_ON */
};

enum { NET_TLS_PLAIN, NET_TLS_UNDECIDED, NET_TLS_ON };
typedef struct net_tls net_tls_t;

typedef struct net_state {
    sbl_net_request_fn on_request;
    sbl_net_conn_fn on_open;
    sbl_net_conn_fn on_close;
    int64_t max_conns;
    int port; /* the TCP port (names a Unix-domain socket's clients) */
    net_loop_t *loops;
    int nloops;
    atomic_int_fast64_t current;
    atomic_int_fast64_t total_created;
    atomic_int_fast64_t bytes_in;
    atomic_int_fast64_t bytes_out;
    atomic_int_fast64_t num_requests;
    atomic_int_fast64_t reply_batches, replies_batched;
    atomic_uint_fast64_t next_id;
    atomic_int next_reply_id; /* requestID of replies: 1, 2, 3 ... (wraps) */
} net_state_t;

extern net_state_t net_g;

/* The loop the calling thread runs, or NULL off the loop threads. */
net_loop_t *net_current_loop(void);

/* Loop thread: open c's socket, start reading, call on_open. */
void net_conn_start(sbl_conn_t *c);
/* Loop thread: begin closing c (idempotent). */
void net_conn_close(sbl_conn_t *c);
/* Loop thread: a reply from another thread has arrived; takes r. */
void net_conn_reply_arrived(net_reply_t *r);
/* Any thread: a connection never started (shutdown): close its fd, free it. */
void net_conn_discard(sbl_conn_t *c);
/* Loop thread: called when a connection is freed; may finish a stopping loop. */
void net_loop_conn_freed(net_loop_t *nl);
/* Set this thread's log ctx to "conn<id>". */
void net_conn_log_ctx(sbl_conn_t *c);
/* Loop thread: make room for need more bytes at rbuf + rend; the write position or NULL. */
uint8_t *net_conn_reserve(sbl_conn_t *c, size_t need);
/* Loop thread: send len bytes as they are (no TLS); takes mem (malloc'd or NULL). */
void net_conn_write_raw(sbl_conn_t *c, const uint8_t *data, size_t len, uint8_t *mem);

/* ---- TLS (net_tls.c) ---- */
/* Shared by the server's context and the cluster client's (net_client.c):
 * the key's password from the context's callback userdata (a string or
 * NULL); tlsAllowInvalidCertificates' verify callback (the peer's
 * certificate is read, not judged); OpenSSL's last error as text in out,
 * the error queue cleared. */
int net_tls_password_cb(char *buf, int size, int rwflag, void *u);
int net_tls_accept_any_cb(int ok, X509_STORE_CTX *ctx);
void net_tls_error(char *out, size_t n);
/* Build the server's TLS context from cfg (nothing when the mode is disabled). */
int net_tls_init(const sbl_net_config_t *cfg, sbl_err_t *err);
void net_tls_shutdown(void);
/* A new connection: PLAIN when TLS is disabled, else UNDECIDED until its first byte. */
void net_tls_conn_init(sbl_conn_t *c);
void net_tls_conn_free(sbl_conn_t *c);
/* Where the socket's bytes go for a TLS connection (its ciphertext buffer). */
uv_buf_t net_tls_read_buffer(sbl_conn_t *c);
/* Bytes read on an UNDECIDED or TLS connection (for UNDECIDED they are at rbuf + rend):
 * decide, decrypt into the read buffer, send handshake replies.  0, or -1: close. */
int net_tls_on_read(sbl_conn_t *c, const uint8_t *data, size_t len);
/* Encrypt and send a reply on a TLS connection (closes it on error). */
void net_tls_write(sbl_conn_t *c, const uint8_t *data, size_t len);

#endif
