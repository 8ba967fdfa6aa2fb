/*
 * net_client.c: plain client connections to another server (a shard's
 * primary for the router, a sync source for a secondary's fetcher and
 * reporter), on which the caller writes OP_MSG commands and reads the
 * replies itself.  libmongoc's per-command client work (it copies the
 * topology and re-parses the server's stored hello reply on every command,
 * and again when a reply's $clusterTime moved) was most of the router's own
 * cost per routed read and a third of a streaming secondary's.
 *
 * Must stay true: a connection carries one request at a time and is
 * dropped, never reused, after any I/O or framing error; with a keyFile's
 * key a connection authenticates as __system@local (SCRAM-SHA-256) before
 * it carries anything else.  No compression.
 *
 * TLS (tlsMode preferTLS / requireTLS, sbl_client_tls_start): one client
 * SSL_CTX built at start; a connection's SSL hangs off its descriptor in
 * a table indexed by fd (callers keep passing plain ints), set by
 * sbl_client_dial before the fd is handed out and cleared by
 * sbl_client_close before close(2), so a reused descriptor never finds a
 * stale session.  Reads and writes go through SSL_read/SSL_write on the
 * blocking socket, bounded by its timeouts like the plain ones.
 */
#include "net/net.h"
#include "net/net_int.h"

#include "auth/auth.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <mongoc/mongoc.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static bool reply_ok(const bson_t *reply)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, reply, "ok") && bson_iter_as_double(&it) == 1.0;
}

/* A TCP connection to "host:port" with timeout_ms for the connect and for
 * every read and write afterwards; -1 when it cannot be made. */
static int dial_timeout(const char *hostport, int timeout_ms)
{
    char host[256];
    snprintf(host, sizeof(host), "%s", hostport);
    char *colon = strrchr(host, ':');
    if (colon == NULL)
        return -1;
    *colon = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return -1;
    int fd = -1;
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        /* Linux bounds connect() by the send timeout */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

/* ---- TLS ---- */

static SSL_CTX *tls_ctx; /* NULL: plain connections */
/* What sbl_client_tls_start took from the options (the strings owned). */
static struct {
    char *cert_key_file;     /* net.tls.clusterFile, else certificateKeyFile */
    char *cert_key_password; /* its key's password, or NULL */
    char *ca_file;           /* net.tls.CAFile, or NULL: the system's */
    bool allow_invalid_certs, allow_invalid_hostnames;
} tls_cfg;

/* fd -> SSL: pages of TLS_PAGE slots made on first use, never freed, so a
 * reader needs no lock (an fd is used by one thread at a time, handed over
 * through the callers' own locks). */
#define TLS_PAGE 1024
#define TLS_PAGES 1024 /* fds up to ~1M */
static SSL **tls_pages[TLS_PAGES];

static SSL **tls_slot(int fd, bool make)
{
    if (fd < 0 || fd >= TLS_PAGE * TLS_PAGES)
        return NULL;
    SSL **page = __atomic_load_n(&tls_pages[fd / TLS_PAGE], __ATOMIC_ACQUIRE);
    if (page == NULL && make) {
        SSL **fresh = calloc(TLS_PAGE, sizeof(*fresh));
        if (fresh == NULL)
            return NULL;
        if (__atomic_compare_exchange_n(&tls_pages[fd / TLS_PAGE], &page, fresh, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            page = fresh;
        else
            free(fresh); /* another thread made it: page holds it now */
    }
    return page != NULL ? &page[fd % TLS_PAGE] : NULL;
}

static SSL *tls_of(int fd)
{
    SSL **slot = tls_ctx != NULL ? tls_slot(fd, false) : NULL;
    return slot != NULL ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : NULL;
}

/* Append "&name=value" to buf (at *kp), the value percent-escaped. */
static bool uri_opt(char *buf, size_t n, size_t *kp, const char *name, const char *value)
{
    int w = snprintf(buf + *kp, n - *kp, "%s%s=", *kp > 0 ? "&" : "", name);
    if (w < 0 || (size_t)w >= n - *kp)
        return false;
    *kp += (size_t)w;
    for (const unsigned char *p = (const unsigned char *)value; *p != '\0'; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || strchr("/._-~", *p) != NULL;
        w = plain ? snprintf(buf + *kp, n - *kp, "%c", *p)
                  : snprintf(buf + *kp, n - *kp, "%%%02X", *p);
        if (w < 0 || (size_t)w >= n - *kp)
            return false;
        *kp += (size_t)w;
    }
    return true;
}

/* The libmongoc URI options ("tls=true&tlsCAFile=...", escaped) that make
 * its connections match sbl_client_dial's, into buf; false when they do not
 * fit. */
static bool uri_opts(char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    if (tls_ctx == NULL)
        return true;
    bool ok = uri_opt(buf, n, &k, "tls", "true");
    /* No OCSP look-ups: a member must not wait on a responder out on the
     * network.  libmongoc refuses the option beside
     * tlsAllowInvalidCertificates, which checks nothing anyway. */
    if (ok && !tls_cfg.allow_invalid_certs)
        ok = uri_opt(buf, n, &k, "tlsDisableOCSPEndpointCheck", "true");
    if (ok && tls_cfg.cert_key_file != NULL)
        ok = uri_opt(buf, n, &k, "tlsCertificateKeyFile", tls_cfg.cert_key_file);
    if (ok && tls_cfg.cert_key_password != NULL)
        ok = uri_opt(buf, n, &k, "tlsCertificateKeyFilePassword", tls_cfg.cert_key_password);
    if (ok && tls_cfg.ca_file != NULL)
        ok = uri_opt(buf, n, &k, "tlsCAFile", tls_cfg.ca_file);
    if (ok && tls_cfg.allow_invalid_certs)
        ok = uri_opt(buf, n, &k, "tlsAllowInvalidCertificates", "true");
    if (ok && tls_cfg.allow_invalid_hostnames)
        ok = uri_opt(buf, n, &k, "tlsAllowInvalidHostnames", "true");
    return ok;
}

static int tls_start(sbl_err_t *err)
{
    char why[256];
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "cannot create the cluster TLS context");
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_default_passwd_cb(ctx, net_tls_password_cb);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, tls_cfg.cert_key_password);
    if (tls_cfg.cert_key_file != NULL &&
        (SSL_CTX_use_certificate_chain_file(ctx, tls_cfg.cert_key_file) != 1 ||
         SSL_CTX_use_PrivateKey_file(ctx, tls_cfg.cert_key_file, SSL_FILETYPE_PEM) != 1 ||
         SSL_CTX_check_private_key(ctx) != 1)) {
        net_tls_error(why, sizeof(why));
        SSL_CTX_free(ctx);
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "cannot read the cluster certificate and key from %s: %s",
                           tls_cfg.cert_key_file, why);
    }
    int loaded = tls_cfg.ca_file != NULL
                     ? SSL_CTX_load_verify_locations(ctx, tls_cfg.ca_file, NULL)
                     : SSL_CTX_set_default_verify_paths(ctx);
    if (loaded != 1) {
        net_tls_error(why, sizeof(why));
        SSL_CTX_free(ctx);
        return sbl_err_set(err, SBL_E_InvalidOptions, "cannot read the CA file %s: %s",
                           tls_cfg.ca_file != NULL ? tls_cfg.ca_file : "(system default)", why);
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, tls_cfg.allow_invalid_certs ? net_tls_accept_any_cb : NULL);
    tls_ctx = ctx;
    return 0;
}

int sbl_client_tls_start(const sbl_options_t *o, sbl_err_t *err)
{
    if (o->tls_mode != SBL_TLS_PREFER && o->tls_mode != SBL_TLS_REQUIRE)
        return 0;
    bool cluster = o->tls_cluster_file != NULL;
    tls_cfg.cert_key_file = bson_strdup(cluster ? o->tls_cluster_file : o->tls_cert_key_file);
    tls_cfg.cert_key_password = bson_strdup(cluster ? o->tls_cluster_password
                                                    : o->tls_cert_key_password);
    tls_cfg.ca_file = bson_strdup(o->tls_ca_file); /* clusterCAFile: for who connects here */
    tls_cfg.allow_invalid_certs = o->tls_allow_invalid_certs;
    tls_cfg.allow_invalid_hostnames = o->tls_allow_invalid_hostnames;
    char opts[3 * 4096];
    if (tls_start(err) != 0)
        return -1;
    if (!uri_opts(opts, sizeof(opts)))
        return sbl_err_set(err, SBL_E_BadValue, "the TLS file names are too long");
    /* libmongoc takes them as URI options: one it refused would fail every
     * heartbeat later, silently, so it is checked here */
    char uri_s[sizeof(opts) + 64];
    bson_error_t e;
    snprintf(uri_s, sizeof(uri_s), "mongodb://127.0.0.1/?%s", opts);
    mongoc_uri_t *uri = mongoc_uri_new_with_error(uri_s, &e);
    if (uri == NULL)
        return sbl_err_set(err, SBL_E_InvalidOptions, "TLS options for member connections: %s",
                           e.message);
    mongoc_uri_destroy(uri);
    sbl_server_set_cluster_uri_opts(opts);
    return 0;
}

bool sbl_client_tls_on(void)
{
    return tls_ctx != NULL;
}

/*
 * A failed handshake is logged once per peer and error: a member that
 * rejects our certificate is dialed again at every heartbeat and report.
 */
#define TLS_LOGGED 64
static pthread_mutex_t logged_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char host[256];
    char why[256];
} logged[TLS_LOGGED];

static void log_handshake(const char *host, const char *why)
{
    pthread_mutex_lock(&logged_lock);
    int slot = -1;
    for (int i = 0; i < TLS_LOGGED && slot < 0; i++)
        if (strcmp(logged[i].host, host) == 0)
            slot = i;
    bool fresh = why != NULL && (slot < 0 || strcmp(logged[slot].why, why) != 0);
    for (int i = 0; i < TLS_LOGGED && slot < 0 && why != NULL; i++)
        if (logged[i].host[0] == '\0')
            slot = i; /* a free one */
    if (slot < 0 && why != NULL)
        slot = (int)(strlen(host) % TLS_LOGGED); /* all taken: any */
    if (slot >= 0) { /* a success forgets the host: a later failure is news again */
        snprintf(logged[slot].host, sizeof(logged[slot].host), "%s", why != NULL ? host : "");
        snprintf(logged[slot].why, sizeof(logged[slot].why), "%s", why != NULL ? why : "");
    }
    pthread_mutex_unlock(&logged_lock);
    if (!fresh)
        return;
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "remote", host);
    BSON_APPEND_UTF8(&attr, "error", why);
    sbl_log(SBL_LOG_WARNING, "NETWORK", 23256,
            "TLS handshake failed on a connection to another server", &attr);
    bson_destroy(&attr);
}

/* The TLS handshake on fd (connected to hostport), the peer verified
 * against the cluster CA and the host name or address dialed; the session
 * is fd's from here on.  false (logged) when it fails. */
static bool tls_connect(int fd, const char *hostport)
{
    char host[256], why[256];
    snprintf(host, sizeof(host), "%s", hostport);
    char *colon = strrchr(host, ':');
    if (colon != NULL)
        *colon = '\0';
    SSL **slot = tls_slot(fd, true);
    SSL *ssl = slot != NULL ? SSL_new(tls_ctx) : NULL;
    if (ssl == NULL)
        return false;
    unsigned char ip[16];
    bool is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    if (!is_ip)
        SSL_set_tlsext_host_name(ssl, host); /* SNI */
    if (!tls_cfg.allow_invalid_hostnames && !tls_cfg.allow_invalid_certs) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
        if (is_ip)
            X509_VERIFY_PARAM_set1_ip_asc(vp, host);
        else
            SSL_set1_host(ssl, host);
    }
    int rc;
    SSL_set_fd(ssl, fd);
    do {
        rc = SSL_connect(ssl);
    } while (rc <= 0 && SSL_get_error(ssl, rc) == SSL_ERROR_SYSCALL && errno == EINTR);
    if (rc != 1) {
        long vr = SSL_get_verify_result(ssl);
        if (vr != X509_V_OK)
            snprintf(why, sizeof(why), "certificate verify failed: %s",
                     X509_verify_cert_error_string(vr));
        else if (ERR_peek_error() != 0)
            net_tls_error(why, sizeof(why));
        else
            snprintf(why, sizeof(why), "the peer closed the connection or timed out");
        ERR_clear_error();
        SSL_free(ssl);
        log_handshake(hostport, why);
        return false;
    }
    log_handshake(hostport, NULL);
    __atomic_store_n(slot, ssl, __ATOMIC_RELEASE);
    return true;
}

void sbl_client_close(int fd)
{
    if (fd < 0)
        return;
    SSL *ssl = tls_of(fd);
    if (ssl != NULL) {
        __atomic_store_n(tls_slot(fd, false), NULL, __ATOMIC_RELEASE);
        SSL_free(ssl); /* no close_notify: the peer sees the socket close */
    }
    close(fd);
}

/* One SSL_read or SSL_write: bytes moved, or 0 on EOF, error or timeout. */
static size_t tls_io(SSL *ssl, uint8_t *p, size_t n, bool write)
{
    int chunk = n > (1u << 30) ? 1 << 30 : (int)n;
    for (;;) {
        int r = write ? SSL_write(ssl, p, chunk) : SSL_read(ssl, p, chunk);
        if (r > 0)
            return (size_t)r;
        if (SSL_get_error(ssl, r) == SSL_ERROR_SYSCALL && errno == EINTR)
            continue;
        ERR_clear_error();
        return 0;
    }
}

bool sbl_client_write(int fd, const uint8_t *p, size_t n)
{
    SSL *ssl = tls_of(fd);
    while (ssl != NULL && n > 0) {
        size_t w = tls_io(ssl, (uint8_t *)p, n, true);
        if (w == 0)
            return false;
        p += w;
        n -= w;
    }
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

bool sbl_client_read(int fd, uint8_t *p, size_t n)
{
    SSL *ssl = tls_of(fd);
    while (ssl != NULL && n > 0) {
        size_t r = tls_io(ssl, p, n, false);
        if (r == 0)
            return false;
        p += r;
        n -= r;
    }
    while (n > 0) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static int32_t next_request_id(void)
{
    static int32_t id;
    return __atomic_add_fetch(&id, 1, __ATOMIC_RELAXED);
}

/* BSON's limit on a command's body (mongod's, with its 16 KB of room for
 * the fields a server adds to a forwarded command). */
#define BODY_MAX (16 * 1024 * 1024 + 16 * 1024)

/* A write command too big for one body sends its statements as an OP_MSG
 * document sequence (kind 1), as drivers do, the body holding the rest:
 * *idp is the array's field, *arr iterates it.  false for any other
 * command. */
static bool seq_of(const bson_t *cmd, const char **idp, bson_iter_t *arr)
{
    static const char *const verbs[][2] = {
        {"insert", "documents"}, {"update", "updates"}, {"delete", "deletes"}};
    bson_iter_t it;
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it))
        return false;
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        if (strcmp(bson_iter_key(&it), verbs[i][0]) == 0) {
            *idp = verbs[i][1];
            return bson_iter_init_find(&it, cmd, *idp) && BSON_ITER_HOLDS_ARRAY(&it) &&
                   bson_iter_recurse(&it, arr);
        }
    return false;
}

/* The body's length: cmd (without its field id when id is not NULL), extra's
 * fields and $db. */
static size_t body_size(const char *db, const bson_t *cmd, const bson_t *extra, const char *id)
{
    size_t n = cmd->len + (extra != NULL ? extra->len - 5 : 0) + 1 + 4 + 4 + strlen(db) + 1;
    bson_iter_t it;
    if (id != NULL && bson_iter_init_find(&it, cmd, id)) {
        uint32_t len;
        const uint8_t *data;
        bson_iter_array(&it, &len, &data);
        n -= 1 + strlen(id) + 1 + len;
    }
    return n;
}

/* A document sequence's length: its size field, id and documents. */
static size_t seq_size(const char *id, bson_iter_t arr)
{
    size_t n = 4 + strlen(id) + 1;
    while (bson_iter_next(&arr)) {
        uint32_t len;
        const uint8_t *data;
        bson_iter_document(&arr, &len, &data);
        n += len;
    }
    return n;
}

/* Whether cmd goes with a document sequence (its field *idp, *arr). */
static bool split_msg(const char *db, const bson_t *cmd, const bson_t *extra, const char **idp,
                      bson_iter_t *arr)
{
    return body_size(db, cmd, extra, NULL) > BODY_MAX && seq_of(cmd, idp, arr);
}

/* The length of cmd with extra's fields (NULL: none) and $db as one OP_MSG. */
size_t sbl_client_msg_size(const char *db, const bson_t *cmd, const bson_t *extra)
{
    const char *id;
    bson_iter_t arr;
    if (split_msg(db, cmd, extra, &id, &arr)) /* + kind 1 and the sequence */
        return 16 + 4 + 1 + body_size(db, cmd, extra, id) + 1 + seq_size(id, arr);
    /* header (16) + flags (4) + kind (1) + the body with $db appended
     * (type, "$db", the string's length, the string) */
    return 16 + 4 + 1 + body_size(db, cmd, extra, NULL);
}

/* That message into m (msg_size bytes), with a new request id (*ridp). */
void sbl_client_msg_build(const char *db, const bson_t *cmd, const bson_t *extra, uint8_t *m,
                          int32_t *ridp)
{
    const char *id = NULL;
    bson_iter_t arr;
    bson_t rest;
    bool split = split_msg(db, cmd, extra, &id, &arr);
    if (split) { /* the body without the statements */
        bson_init(&rest);
        bson_copy_to_excluding_noinit(cmd, &rest, id, NULL);
    }
    const bson_t *body = split ? &rest : cmd;
    size_t dblen = strlen(db);
    uint32_t xlen = extra != NULL ? extra->len - 5 : 0;
    uint32_t body_len = (uint32_t)body_size(db, body, extra, NULL);
    uint32_t sq = split ? (uint32_t)seq_size(id, arr) : 0;
    uint32_t total = 21 + body_len + (split ? 1 + sq : 0); /* sbl_client_msg_size's */
    int32_t rid = next_request_id();
    uint32_t hdr[4] = {total, (uint32_t)rid, 0, 2013};
    memcpy(m, hdr, 16);
    memset(m + 16, 0, 4);
    m[20] = 0;
    uint8_t *b = m + 21;
    memcpy(b, &body_len, 4);
    memcpy(b + 4, bson_get_data(body) + 4, body->len - 5); /* the fields, without the end */
    uint8_t *q = b + 4 + body->len - 5;
    if (xlen > 0) {
        memcpy(q, bson_get_data(extra) + 4, xlen);
        q += xlen;
    }
    *q++ = 0x02; /* string */
    memcpy(q, "$db", 4);
    q += 4;
    uint32_t sl = (uint32_t)dblen + 1;
    memcpy(q, &sl, 4);
    q += 4;
    memcpy(q, db, dblen + 1);
    q += dblen + 1;
    *q++ = 0; /* end of document */
    if (split) {
        *q++ = 1; /* a document sequence */
        memcpy(q, &sq, 4);
        q += 4;
        memcpy(q, id, strlen(id) + 1);
        q += strlen(id) + 1;
        while (bson_iter_next(&arr)) {
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&arr, &len, &data);
            memcpy(q, data, len);
            q += len;
        }
        bson_destroy(&rest);
    }
    *ridp = rid;
}

/* Write cmd, then extra's fields (NULL: none), plus $db as one OP_MSG on
 * fd; its request id into *ridp.  false on an I/O error. */
bool sbl_client_send(int fd, const char *db, const bson_t *cmd, const bson_t *extra,
                     int32_t *ridp)
{
    return sbl_client_send_flags(fd, db, cmd, extra, 0, ridp);
}

bool sbl_client_send_flags(int fd, const char *db, const bson_t *cmd, const bson_t *extra,
                           uint32_t flags, int32_t *ridp)
{
    uint32_t total = (uint32_t)sbl_client_msg_size(db, cmd, extra);
    uint8_t stackbuf[4096];
    uint8_t *m = total <= sizeof(stackbuf) ? stackbuf : malloc(total);
    if (m == NULL)
        return false;
    sbl_client_msg_build(db, cmd, extra, m, ridp);
    memcpy(m + 16, &flags, 4); /* OP_MSG's flagBits (little-endian, as the header) */
    bool ok = sbl_client_write(fd, m, total);
    if (m != stackbuf)
        free(m);
    return ok;
}

int64_t sbl_client_msg_len(const uint8_t h[16], int32_t rid)
{
    uint32_t len, opcode;
    int32_t resp_to;
    memcpy(&len, h, 4);
    memcpy(&resp_to, h + 8, 4);
    memcpy(&opcode, h + 12, 4);
    if (len < 16 + 5 + 5 || len > 48000000 || opcode != 2013 || resp_to != rid)
        return -1;
    return len;
}

bool sbl_client_msg_view(const uint8_t *r, size_t n, bson_t *view)
{
    uint32_t flags, dl;
    memcpy(&flags, r, 4);
    memcpy(&dl, r + 5, 4);
    size_t avail = n - 5 - ((flags & 1) ? 4 : 0);
    return r[4] == 0 && dl >= 5 && dl <= avail && bson_init_static(view, r + 5, dl);
}

/* Read the reply to request rid into *reply (initialised here on success).
 * false on an I/O or framing error (the connection is then unusable). */
bool sbl_client_recv(int fd, int32_t rid, bson_t *reply)
{
    bool more; /* a plain command's reply: its flags do not matter */
    return sbl_client_recv_more(fd, &rid, reply, &more);
}

bool sbl_client_recv_view(int fd, int32_t *ridp, uint8_t **bufp, bson_t *view, bool *morep)
{
    uint8_t h[16];
    uint32_t flags = 0;
    int32_t id;
    *morep = false;
    *bufp = NULL;
    if (!sbl_client_read(fd, h, 16))
        return false;
    int64_t len = sbl_client_msg_len(h, *ridp);
    if (len < 0)
        return false;
    memcpy(&id, h + 4, 4);
    uint8_t *r = malloc((size_t)len - 16);
    if (r == NULL || !sbl_client_read(fd, r, (size_t)len - 16) ||
        !sbl_client_msg_view(r, (size_t)len - 16, view)) {
        free(r);
        return false;
    }
    memcpy(&flags, r, 4);
    *morep = (flags & SBL_CLIENT_MORE_TO_COME) != 0;
    *ridp = id; /* a streamed reply answers the one before it */
    *bufp = r;
    return true;
}

bool sbl_client_recv_more(int fd, int32_t *ridp, bson_t *reply, bool *morep)
{
    uint8_t *buf;
    bson_t view;
    if (!sbl_client_recv_view(fd, ridp, &buf, &view, morep))
        return false;
    bson_copy_to(&view, reply);
    free(buf);
    return true;
}

/* One SASL round trip on fd: cmd out, payload of the reply in (*outp). */
static bool sasl_round(int fd, const bson_t *cmd, char **outp, bool *donep)
{
    int32_t rid;
    bson_t reply;
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len = 0;
    bson_subtype_t st;
    if (!sbl_client_send(fd, "local", cmd, NULL, &rid) || !sbl_client_recv(fd, rid, &reply))
        return false;
    bool ok = reply_ok(&reply) && bson_iter_init_find(&it, &reply, "payload") &&
              BSON_ITER_HOLDS_BINARY(&it);
    if (ok) {
        bson_iter_binary(&it, &st, &len, &data);
        *outp = bson_strndup((const char *)data, len);
        *donep = bson_iter_init_find(&it, &reply, "done") && bson_iter_as_bool(&it);
    }
    bson_destroy(&reply);
    return ok;
}

/* With a keyFile, a new connection authenticates as __system@local
 * (SCRAM-SHA-256, the key as the password) before it carries commands. */
static bool authenticate(int fd, const char *key)
{
    if (key == NULL)
        return true;
    sbl_err_t e = {0};
    sbl_scram_client_t *c = NULL;
    char *first = NULL, *sfirst = NULL, *final = NULL, *sfinal = NULL;
    bool done = false, ok = false;
    if (sbl_scram_client_new("__system", key, &c, &first, &e) != 0)
        return false;
    bson_t cmd = BSON_INITIALIZER, opts;
    BSON_APPEND_INT32(&cmd, "saslStart", 1);
    BSON_APPEND_UTF8(&cmd, "mechanism", "SCRAM-SHA-256");
    bson_append_binary(&cmd, "payload", -1, BSON_SUBTYPE_BINARY, (const uint8_t *)first,
                       (uint32_t)strlen(first));
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "options", &opts);
    BSON_APPEND_BOOL(&opts, "skipEmptyExchange", true);
    bson_append_document_end(&cmd, &opts);
    if (sasl_round(fd, &cmd, &sfirst, &done) &&
        sbl_scram_client_step(c, (const uint8_t *)sfirst, strlen(sfirst), &final, &e) == 0) {
        bson_reinit(&cmd);
        BSON_APPEND_INT32(&cmd, "saslContinue", 1);
        BSON_APPEND_INT32(&cmd, "conversationId", 1);
        bson_append_binary(&cmd, "payload", -1, BSON_SUBTYPE_BINARY, (const uint8_t *)final,
                           (uint32_t)strlen(final));
        ok = sasl_round(fd, &cmd, &sfinal, &done) && done &&
             sbl_scram_client_verify(c, (const uint8_t *)sfinal, strlen(sfinal), &e) == 0;
    }
    bson_destroy(&cmd);
    bson_free(first);
    bson_free(sfirst);
    bson_free(final);
    bson_free(sfinal);
    sbl_scram_client_free(c);
    return ok;
}

int sbl_client_dial(const char *hostport, int timeout_ms, const char *key)
{
    int fd = dial_timeout(hostport, timeout_ms);
    if (fd >= 0 && tls_ctx != NULL && !tls_connect(fd, hostport)) {
        close(fd);
        return -1;
    }
    if (fd >= 0 && !authenticate(fd, key)) {
        sbl_client_close(fd);
        fd = -1;
    }
    return fd;
}

bool sbl_client_run(int fd, const char *db, const bson_t *cmd, const bson_t *extra,
                    bson_t *reply)
{
    int32_t rid;
    if (sbl_client_send(fd, db, cmd, extra, &rid) && sbl_client_recv(fd, rid, reply))
        return true;
    bson_init(reply);
    return false;
}
