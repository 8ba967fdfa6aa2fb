/*
 * net.h: the network layer.  libuv event loops (one per core by default),
 * each with its own listener socket(s) on the same address (SO_REUSEPORT) or
 * a shared accept that distributes connections; connections read, frame and
 * parse messages with the wire module and hand each request to the server's
 * request function.
 *
 * Connection state machine: READING -> (whole message) -> DISPATCHED ->
 * (sbl_conn_reply) -> READING ... ; CLOSING on error, peer close or
 * shutdown.  While a request is DISPATCHED no further request of that
 * connection is dispatched (MongoDB's one-at-a-time rule per connection);
 * bytes keep being buffered up to a bound, then reading pauses
 * (back-pressure).  A connection is freed only in its close callback, and
 * only once no request of it is outstanding.
 */
#ifndef SBL_NET_H
#define SBL_NET_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/errors.h"
#include "server/server.h"
#include "wire/wire.h"

typedef struct sbl_conn sbl_conn_t;

typedef struct sbl_net_config {
    /* addresses to listen on ("127.0.0.1", "::1", "0.0.0.0"); one with a '/'
     * is the path of a Unix-domain socket */
    const char *const *bind_ips;
    size_t nbind;
    int port;
    /* also listen on <unix_socket_dir>/mongodb-<port>.sock (mongod's default
     * socket); NULL: no such socket */
    const char *unix_socket_dir;
    int unix_perms; /* mode of the socket files created; <= 0: 0700 */
    int max_conns; /* connections beyond this are accepted and closed at once (logged) */
    int nloops;    /* event loop threads; <= 0: one per core */
    /* TLS (net_tls.c): mode SBL_NET_TLS_*; the files are read once at start. */
    int tls_mode;
    const char *tls_cert_key_file;     /* PEM with the certificate chain and the key */
    const char *tls_cert_key_password; /* for an encrypted key, or NULL */
    const char *tls_ca_file;           /* verify client certificates against it, or NULL */
    bool tls_allow_no_cert;            /* with tls_ca_file: clients may present none */
    bool tls_allow_invalid_certs;      /* a client certificate that does not verify is let in */
} sbl_net_config_t;

/* TLS modes, in the order of mongod's --tlsMode values (and server.h's). */
enum { SBL_NET_TLS_DISABLED, SBL_NET_TLS_ALLOW, SBL_NET_TLS_PREFER, SBL_NET_TLS_REQUIRE };

/* The listener's settings from the server's options (sabled's and
 * sable-router's alike); the strings stay o's. */
sbl_net_config_t sbl_net_config_of(const sbl_options_t *o);

/*
 * Called on the connection's loop thread for each request, in order.  The
 * callee owns req and must eventually call sbl_conn_reply(conn, req, ...)
 * exactly once (from any thread), even when req->more_to_come.
 */
typedef void (*sbl_net_request_fn)(sbl_conn_t *conn, sbl_request_t *req);
/* Called on the loop thread when a connection opens / closes (may be NULL). */
typedef void (*sbl_net_conn_fn)(sbl_conn_t *conn);

/* Bind and start the loop threads; returns 0 or an error (e.g. address in use). */
int sbl_net_start(const sbl_net_config_t *cfg, sbl_net_request_fn on_request,
                  sbl_net_conn_fn on_open, sbl_net_conn_fn on_close, sbl_err_t *err);
/* Stop accepting, close every connection, join the loop threads. */
void sbl_net_stop(void);

/*
 * Finish req: send reply (unless req->more_to_come or reply is NULL), free
 * req, and let the connection dispatch its next request.  Thread-safe: when
 * called off the connection's loop thread, the reply is handed to the loop.
 * Does not take ownership of reply.
 */
void sbl_conn_reply(sbl_conn_t *conn, sbl_request_t *req, const bson_t *reply);
/* The same for a plain OP_MSG reply (sbl_wire_reply_plain) built in place:
 * mem (malloc'd; taken) holds SBL_WIRE_MSG_HEAD bytes of room, then the
 * reply's body_len bytes of BSON; the header is written there and mem is
 * sent as it is, no copy. */
void sbl_conn_reply_owned(sbl_conn_t *conn, sbl_request_t *req, uint8_t *mem, size_t body_len);
/* While on, replies sent by this thread are handed to the connection's
 * loop even when this is its thread: a reply sent from within another
 * connection's command (a write concern that command's report ended) then
 * never starts that connection's next request inside it. */
void sbl_conn_defer_replies(bool on);

/*
 * Exhaust streaming: send reply with the moreToCome flag and keep req in
 * flight (the client sends nothing more; the server keeps answering).  Each
 * streamed reply answers the previous one (req->request_id is advanced).  Loop
 * thread only.  The stream ends with sbl_conn_reply().
 */
void sbl_conn_reply_more(sbl_conn_t *conn, sbl_request_t *req, const bson_t *reply);
/* Call fn(conn, arg) once the replies conn has not written yet are down to a
 * bound (at once when they are; later from the write's callback): a stream
 * makes its next reply only then, so a reader that stops reading holds the
 * server back instead of making it buffer the stream.  Also called when the
 * connection fails or closes meanwhile (sbl_conn_is_closing then says so):
 * fn must then end the stream (sbl_conn_reply).  One at a time; loop thread
 * only. */
void sbl_conn_when_drained(sbl_conn_t *conn, void (*fn)(sbl_conn_t *conn, void *arg), void *arg);

/* Finish req without a reply and close the connection (the failCommand fail
 * point's closeConnection).  Loop thread only. */
void sbl_conn_close_request(sbl_conn_t *conn, sbl_request_t *req);

uint64_t sbl_conn_id(const sbl_conn_t *conn);        /* 1, 2, 3 ... as connectionId */
/* "127.0.0.1:53422"; on a Unix-domain socket "anonymous unix socket:27017" */
const char *sbl_conn_remote(const sbl_conn_t *conn);
/* "127.0.0.1:27017"; on a Unix-domain socket its path, "/tmp/mongodb-27017.sock" */
const char *sbl_conn_local(const sbl_conn_t *conn);
/* From a loopback address or through a Unix-domain socket (the localhost exception's test). */
bool sbl_conn_is_loopback(const sbl_conn_t *conn);
/* Accepted on a Unix-domain socket. */
bool sbl_conn_is_unix(const sbl_conn_t *conn);
/* True once the connection is closing (the peer left or it was killed): a
 * stream of replies should stop.  Loop thread only. */
bool sbl_conn_is_closing(const sbl_conn_t *conn);
uv_loop_t *sbl_conn_loop(sbl_conn_t *conn);
/* Keep conn's place among the replies its loop sends at the end of this
 * iteration, as if it held a reply now: a reply held later in the iteration
 * (after the audit log's group write) then leaves where its request's turn
 * was, and replies that wait for the audit log are not sent before or after
 * the others because they waited. */
void sbl_conn_hold_place(sbl_conn_t *conn);
/* Per-connection data of the layer above; free_fn runs when the connection is freed. */
void sbl_conn_set_data(sbl_conn_t *conn, void *data, void (*free_fn)(void *));
void *sbl_conn_data(const sbl_conn_t *conn);

/* Have every loop thread run fn(loop) soon: kicks before its run share one
 * run per loop.  Any thread; nothing happens while the loops are not running.
 * The layer above sets fn once, before sbl_net_start (it checks the requests
 * it parked on a loop, such as awaitData getMores, when what they wait on moved). */
void sbl_net_set_kick(void (*fn)(uv_loop_t *loop));
void sbl_net_kick_loops(void);

typedef struct sbl_net_stats {
    int64_t current;
    int64_t total_created;
    int64_t available; /* max_conns - current */
    int64_t bytes_in;
    int64_t bytes_out;
    int64_t num_requests;
    int64_t reply_batches;   /* io_uring submissions of held replies */
    int64_t replies_batched; /* replies sent by those submissions */
} sbl_net_stats_t;
void sbl_net_get_stats(sbl_net_stats_t *st);

/* ---- plain client connections (net_client.c) ----
 * sbl_client_dial: a TCP connection to "host:port", timeout_ms bounding the
 * connect and every read and write after it, authenticated as
 * __system@local with key (a keyFile's; NULL: none); -1 when it cannot be
 * made; with sbl_client_tls_on, over TLS (the handshake within timeout_ms).
 * The caller owns the fd (sbl_client_close it).  sbl_client_msg_size: the
 * length of cmd, then extra's fields (NULL: none), then $db as one OP_MSG;
 * sbl_client_msg_build writes it into m (that many bytes) with a new
 * request id (*ridp); sbl_client_send writes it to fd; sbl_client_write
 * writes n bytes.  sbl_client_msg_len: the length of the message whose
 * header h is, -1 when it is no OP_MSG reply to rid; sbl_client_msg_view:
 * *view reading its body (after the header, n bytes) where it lies;
 * sbl_client_recv: reads the reply to rid into *reply
 * (initialised on success).  sbl_client_run: send and receive; *reply is
 * initialised either way.  false (or -1) on any I/O or framing error: the
 * connection is then unusable. */
int sbl_client_dial(const char *hostport, int timeout_ms, const char *key);
/* Close a connection sbl_client_dial made (its TLS session too): never
 * close(2) one directly, its descriptor's TLS state would outlive it. */
void sbl_client_close(int fd);

/* ---- TLS on this server's own connections to other members (net_client.c) ----
 * sbl_client_tls_start, once at start before any connection to another
 * server is made: with --tlsMode preferTLS or requireTLS (mongod's rule:
 * allowTLS and disabled leave them plain) sbl_client_dial's connections and
 * every libmongoc URI built by auth.h's sbl_auth_cluster_uri use TLS,
 * presenting net.tls.clusterFile (else certificateKeyFile) and verifying
 * the server dialed against net.tls.CAFile (else the system's authorities)
 * and against the host name or address dialed, unless
 * allowInvalidCertificates / allowInvalidHostnames.  The files are read
 * here, once; 0 or an error naming the file at fault. */
int sbl_client_tls_start(const sbl_options_t *o, sbl_err_t *err);
/* Whether this server's connections to other servers use TLS. */
bool sbl_client_tls_on(void);
size_t sbl_client_msg_size(const char *db, const bson_t *cmd, const bson_t *extra);
void sbl_client_msg_build(const char *db, const bson_t *cmd, const bson_t *extra, uint8_t *m,
                          int32_t *ridp);
bool sbl_client_send(int fd, const char *db, const bson_t *cmd, const bson_t *extra,
                     int32_t *ridp);
bool sbl_client_write(int fd, const uint8_t *p, size_t n);
/* Read exactly n bytes (EINTR retried); false on EOF, error or timeout. */
bool sbl_client_read(int fd, uint8_t *p, size_t n);
int64_t sbl_client_msg_len(const uint8_t h[16], int32_t rid);
bool sbl_client_msg_view(const uint8_t *body, size_t n, bson_t *view);
bool sbl_client_recv(int fd, int32_t rid, bson_t *reply);
/* Exhaust streams (an oplog fetcher's getMore): sbl_client_send_flags sends
 * as sbl_client_send with OP_MSG flag bits (SBL_CLIENT_EXHAUST_ALLOWED);
 * sbl_client_recv_more reads the reply answering *ridp into *reply
 * (initialised on success), sets *ridp to that reply's own id, which the
 * next reply of a stream answers, and *morep when it has moreToCome (the
 * server sends more without being asked: read them all, or close fd). */
#define SBL_CLIENT_MORE_TO_COME (1u << 1)
#define SBL_CLIENT_EXHAUST_ALLOWED (1u << 16)
bool sbl_client_send_flags(int fd, const char *db, const bson_t *cmd, const bson_t *extra,
                           uint32_t flags, int32_t *ridp);
bool sbl_client_recv_more(int fd, int32_t *ridp, bson_t *reply, bool *morep);
/* sbl_client_recv_more without the copy: *view (bson_init_static) reads the
 * reply where it was received, in *bufp, the caller's to free(3) after the
 * last use of view (nothing to free on false). */
bool sbl_client_recv_view(int fd, int32_t *ridp, uint8_t **bufp, bson_t *view, bool *morep);
bool sbl_client_run(int fd, const char *db, const bson_t *cmd, const bson_t *extra,
                    bson_t *reply);

#endif
