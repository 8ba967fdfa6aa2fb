/*
 * mongo_wire.c: one thread's direct OP_MSG connection for the mongodb binding
 * (mongodb.api=wire, the default).
 *
 * libmongoc still opens the connection: a single-threaded mongoc_client_t
 * made from the same URL does the handshake, authentication (SCRAM) and
 * server selection on a socket stream that our initiator makes and
 * remembers.  After that the thread writes OP_MSG commands on that socket and
 * reads the replies itself, and libmongoc never touches the client again
 * until it is destroyed.  The bytes on the wire are the command libmongoc's
 * command path would send (same fields, lsid and writeConcern included);
 * what goes away is libmongoc 1.23's per-command work on the client side
 * (25k of its 54k instructions per read copy and re-parse the server's
 * description).
 *
 * Must stay true: one request is outstanding at a time (moreToCome requests
 * have none); after any I/O error the connection is dropped, never reused.
 * Only plain TCP connections qualify (no TLS, no Unix socket), and only when
 * the reads go to the primary: mongo_wire_usable says so.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "mongo_wire.h"

#define OP_MSG 2013
#define MORE_TO_COME 2u
#define MAX_STREAMS 16

struct mongo_wire {
    mongoc_client_t *client;
    struct {
        char host[BSON_HOST_NAME_MAX + 8];
        mongoc_stream_t *stream;
    } made[MAX_STREAMS];
    int nmade;
    mongoc_stream_t *stream; /* the selected server's, or NULL once broken */
    int32_t timeout_ms;
    int32_t request_id;
    uint8_t *buf; /* the last reply */
    size_t cap;
};

bool mongo_wire_usable(const mongoc_uri_t *uri)
{
    if (mongoc_uri_get_tls(uri))
        return false;
    for (const mongoc_host_list_t *h = mongoc_uri_get_hosts(uri); h; h = h->next)
        if (h->family == AF_UNIX)
            return false;
    const mongoc_read_prefs_t *rp = mongoc_uri_get_read_prefs_t(uri);
    return rp == NULL || mongoc_read_prefs_get_mode(rp) == MONGOC_READ_PRIMARY;
}

/* The stream initiator: a plain TCP socket stream, remembered by host. */
static mongoc_stream_t *initiate(const mongoc_uri_t *uri, const mongoc_host_list_t *host, void *arg,
                                 bson_error_t *error)
{
    mongo_wire_t *w = arg;
    char port[16];
    snprintf(port, sizeof(port), "%u", (unsigned)host->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host->host, port, &hints, &res) != 0 || res == NULL) {
        bson_set_error(error, MONGOC_ERROR_STREAM, MONGOC_ERROR_STREAM_NAME_RESOLUTION,
                       "cannot resolve %s", host->host_and_port);
        return NULL;
    }
    int32_t connect_ms = mongoc_uri_get_option_as_int32(uri, MONGOC_URI_CONNECTTIMEOUTMS, 10000);
    mongoc_socket_t *sock = NULL;
    for (struct addrinfo *a = res; a && sock == NULL; a = a->ai_next) {
        sock = mongoc_socket_new(a->ai_family, SOCK_STREAM, 0);
        if (sock == NULL)
            continue;
        if (mongoc_socket_connect(sock, a->ai_addr, (mongoc_socklen_t)a->ai_addrlen,
                                  bson_get_monotonic_time() + (int64_t)connect_ms * 1000) != 0) {
            mongoc_socket_destroy(sock);
            sock = NULL;
        }
    }
    freeaddrinfo(res);
    if (sock == NULL) {
        bson_set_error(error, MONGOC_ERROR_STREAM, MONGOC_ERROR_STREAM_CONNECT, "cannot connect to %s",
                       host->host_and_port);
        return NULL;
    }
    int one = 1;
    mongoc_socket_setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    mongoc_stream_t *s = mongoc_stream_socket_new(sock);
    if (s != NULL && w->nmade < MAX_STREAMS) {
        snprintf(w->made[w->nmade].host, sizeof(w->made[0].host), "%s", host->host_and_port);
        w->made[w->nmade++].stream = s;
    }
    return s;
}

mongo_wire_t *mongo_wire_open(const mongoc_uri_t *uri, const char *appname, bson_error_t *error)
{
    mongo_wire_t *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        bson_set_error(error, MONGOC_ERROR_CLIENT, MONGOC_ERROR_CLIENT_NOT_READY, "out of memory");
        return NULL;
    }
    w->timeout_ms = mongoc_uri_get_option_as_int32(uri, MONGOC_URI_SOCKETTIMEOUTMS, 300000);
    w->client = mongoc_client_new_from_uri(uri);
    if (w->client == NULL) {
        bson_set_error(error, MONGOC_ERROR_CLIENT, MONGOC_ERROR_CLIENT_NOT_READY, "cannot make a client");
        free(w);
        return NULL;
    }
    mongoc_client_set_error_api(w->client, MONGOC_ERROR_API_VERSION_2);
    if (appname)
        mongoc_client_set_appname(w->client, appname);
    mongoc_client_set_stream_initiator(w->client, initiate, w);
    /* A ping on the primary connects, says hello and authenticates. */
    bson_t ping = BSON_INITIALIZER;
    BSON_APPEND_INT32(&ping, "ping", 1);
    mongoc_read_prefs_t *primary = mongoc_read_prefs_new(MONGOC_READ_PRIMARY);
    bool ok = mongoc_client_command_simple(w->client, "admin", &ping, primary, NULL, error);
    mongoc_read_prefs_destroy(primary);
    bson_destroy(&ping);
    mongoc_server_description_t *sd = ok ? mongoc_client_select_server(w->client, true, NULL, error) : NULL;
    if (sd != NULL) {
        const char *hp = mongoc_server_description_host(sd)->host_and_port;
        for (int i = w->nmade - 1; i >= 0 && w->stream == NULL; i--)
            if (strcmp(w->made[i].host, hp) == 0)
                w->stream = w->made[i].stream;
        mongoc_server_description_destroy(sd);
        if (w->stream == NULL)
            bson_set_error(error, MONGOC_ERROR_STREAM, MONGOC_ERROR_STREAM_NOT_ESTABLISHED,
                           "no connection to the selected server");
    }
    if (w->stream == NULL) {
        mongo_wire_close(w);
        return NULL;
    }
    return w;
}

mongoc_client_t *mongo_wire_client(mongo_wire_t *w)
{
    return w->client;
}

bool mongo_wire_broken(const mongo_wire_t *w)
{
    return w->stream == NULL;
}

static bool fail(mongo_wire_t *w, bson_error_t *error, const char *what)
{
    bson_set_error(error, MONGOC_ERROR_STREAM, MONGOC_ERROR_STREAM_SOCKET, "%s: %s", what,
                   errno ? strerror(errno) : "connection closed");
    w->stream = NULL; /* the client still owns it and closes it */
    return false;
}

static bool reserve(mongo_wire_t *w, size_t n)
{
    if (n <= w->cap)
        return true;
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < n)
        cap *= 2;
    uint8_t *b = realloc(w->buf, cap);
    if (b == NULL)
        return false;
    w->buf = b;
    w->cap = cap;
    return true;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

bool mongo_wire_command(mongo_wire_t *w, const bson_t *cmd, bool more_to_come, bson_t *reply, bson_error_t *error)
{
    if (w->stream == NULL) {
        bson_set_error(error, MONGOC_ERROR_STREAM, MONGOC_ERROR_STREAM_NOT_ESTABLISHED, "connection lost");
        return false;
    }
    /* Header, flagBits, section kind 0, then the command document. */
    uint8_t head[21];
    uint32_t id = (uint32_t)++w->request_id;
    put_le32(head, (uint32_t)(sizeof(head) + cmd->len));
    put_le32(head + 4, id);
    put_le32(head + 8, 0);
    put_le32(head + 12, OP_MSG);
    put_le32(head + 16, more_to_come ? MORE_TO_COME : 0);
    head[20] = 0;
    mongoc_iovec_t iov[2] = {{.iov_base = head, .iov_len = sizeof(head)},
                             {.iov_base = (void *)bson_get_data(cmd), .iov_len = cmd->len}};
    size_t total = sizeof(head) + cmd->len;
    errno = 0;
    if (mongoc_stream_writev(w->stream, iov, 2, w->timeout_ms) != (ssize_t)total)
        return fail(w, error, "send");
    if (more_to_come)
        return true;
    /* The reply: usually one read brings all of it. */
    if (!reserve(w, 64 * 1024))
        return fail(w, error, "out of memory");
    ssize_t got = mongoc_stream_read(w->stream, w->buf, w->cap, 16, w->timeout_ms);
    if (got < 16)
        return fail(w, error, "receive");
    uint32_t len = get_le32(w->buf);
    if (len < 21 || len > 48000000 || get_le32(w->buf + 8) != id || get_le32(w->buf + 12) != OP_MSG) {
        errno = EPROTO;
        return fail(w, error, "bad reply");
    }
    if ((size_t)got < len) {
        if (!reserve(w, len))
            return fail(w, error, "out of memory");
        ssize_t more = mongoc_stream_read(w->stream, w->buf + got, len - (size_t)got, len - (size_t)got,
                                          w->timeout_ms);
        if (more != (ssize_t)(len - (size_t)got))
            return fail(w, error, "receive");
    } else if ((size_t)got > len) {
        errno = EPROTO;
        return fail(w, error, "bytes after the reply");
    }
    /* flagBits (checksumPresent adds 4 bytes at the end), one kind-0 section. */
    uint32_t flags = get_le32(w->buf + 16);
    size_t end = len - ((flags & 1u) ? 4 : 0);
    if (w->buf[20] != 0 || end < 26 || get_le32(w->buf + 21) != end - 21 ||
        !bson_init_static(reply, w->buf + 21, end - 21)) {
        errno = EPROTO;
        return fail(w, error, "bad reply");
    }
    return true;
}

void mongo_wire_close(mongo_wire_t *w)
{
    if (w == NULL)
        return;
    mongoc_client_destroy(w->client); /* closes every stream it made */
    free(w->buf);
    free(w);
}
