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
 * it carries anything else.  No TLS, no compression.
 */
#include "net/net.h"

#include "auth/auth.h"

#include <errno.h>
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

bool sbl_client_write(int fd, const uint8_t *p, size_t n)
{
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

/* The length of cmd with extra's fields (NULL: none) and $db as one OP_MSG. */
size_t sbl_client_msg_size(const char *db, const bson_t *cmd, const bson_t *extra)
{
    /* header (16) + flags (4) + kind (1) + the body with $db appended
     * (type, "$db", the string's length, the string) */
    uint32_t xlen = extra != NULL ? extra->len - 5 : 0;
    return 16 + 4 + 1 + cmd->len + xlen + 1 + 4 + 4 + (uint32_t)strlen(db) + 1;
}

/* That message into m (msg_size bytes), with a new request id (*ridp). */
void sbl_client_msg_build(const char *db, const bson_t *cmd, const bson_t *extra, uint8_t *m,
                      int32_t *ridp)
{
    size_t dblen = strlen(db);
    uint32_t xlen = extra != NULL ? extra->len - 5 : 0;
    uint32_t total = (uint32_t)sbl_client_msg_size(db, cmd, extra);
    uint32_t body_len = total - 21;
    int32_t rid = next_request_id();
    uint32_t hdr[4] = {total, (uint32_t)rid, 0, 2013};
    memcpy(m, hdr, 16);
    memset(m + 16, 0, 4);
    m[20] = 0;
    uint8_t *b = m + 21;
    memcpy(b, &body_len, 4);
    memcpy(b + 4, bson_get_data(cmd) + 4, cmd->len - 5); /* the fields, without the end */
    uint8_t *q = b + 4 + cmd->len - 5;
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
    *q = 0; /* end of document */
    *ridp = rid;
}

/* Write cmd, then extra's fields (NULL: none), plus $db as one OP_MSG on
 * fd; its request id into *ridp.  false on an I/O error. */
bool sbl_client_send(int fd, const char *db, const bson_t *cmd, const bson_t *extra,
                     int32_t *ridp)
{
    uint32_t total = (uint32_t)sbl_client_msg_size(db, cmd, extra);
    uint8_t stackbuf[4096];
    uint8_t *m = total <= sizeof(stackbuf) ? stackbuf : malloc(total);
    if (m == NULL)
        return false;
    sbl_client_msg_build(db, cmd, extra, m, ridp);
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

bool sbl_client_msg_body(const uint8_t *r, size_t n, bson_t *reply)
{
    bson_t view;
    if (!sbl_client_msg_view(r, n, &view))
        return false;
    bson_copy_to(&view, reply);
    return true;
}

/* Read the reply to request rid into *reply (initialised here on success).
 * false on an I/O or framing error (the connection is then unusable). */
bool sbl_client_recv(int fd, int32_t rid, bson_t *reply)
{
    uint8_t h[16];
    if (!sbl_client_read(fd, h, 16))
        return false;
    int64_t len = sbl_client_msg_len(h, rid);
    if (len < 0)
        return false;
    uint8_t *r = malloc((size_t)len - 16);
    bool ok = r != NULL && sbl_client_read(fd, r, (size_t)len - 16) &&
              sbl_client_msg_body(r, (size_t)len - 16, reply);
    free(r);
    return ok;
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
    if (fd >= 0 && !authenticate(fd, key)) {
        close(fd);
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
