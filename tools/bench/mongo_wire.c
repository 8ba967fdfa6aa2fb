/*
 * mongo_wire.c: one thread's direct OP_MSG connection for the mongodb binding
 * (mongodb.api=wire, the default).
 *
 * libmongoc still opens the connection: a single-threaded mongoc_client_t
 * made from the same URL does the handshake, authentication (SCRAM) and
 * server selection over a stream our initiator makes (a blocking TCP socket
 * behind libmongoc's stream interface) and remembers.  After that the thread
 * writes OP_MSG commands on that socket and reads the replies itself, and
 * libmongoc never touches the client again until it is destroyed.  The
 * bytes on the wire are the command libmongoc's command path would send
 * (same fields, lsid and writeConcern included); what goes away is
 * libmongoc 1.23's per-command work on the client side (25k of its 54k
 * instructions per read copy and re-parse the server's description) and
 * its non-blocking socket's failed recv and poll while a reply is on its way.
 *
 * Must stay true: one request is outstanding at a time (moreToCome requests
 * have none); after any I/O error the connection is dropped, never reused.
 * Only plain TCP connections qualify (no TLS, no Unix socket), and only when
 * the reads go to the primary: mongo_wire_usable says so.  With
 * mongo_wire_set_unix_dir the connections to those TCP hosts are made
 * through the servers' Unix-domain sockets instead (the URL still names
 * host:port, which the pool's monitors use).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

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

static const char *unix_dir; /* mongo_wire_set_unix_dir's, or NULL: TCP */

void mongo_wire_set_unix_dir(const char *dir)
{
    unix_dir = dir;
}

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

/*
 * The connection is our own stream (libmongoc's stream interface over a
 * blocking TCP socket), so the thread's commands can go out with one
 * sendmsg and come back with one blocking recv: libmongoc's socket stream
 * is non-blocking, and a reply that is not there yet costs it a failed recv
 * and a poll.  libmongoc's own calls (handshake, authentication, the scan of
 * the topology, which expects non-blocking reads and writes when the timeout
 * is 0) go through the functions below, which poll and then use MSG_DONTWAIT.
 */
typedef struct fd_stream {
    mongoc_stream_t vt; /* first: libmongoc holds a mongoc_stream_t * */
    int fd;
    bool timed_out;
    bool retry; /* the last call would have blocked */
} fd_stream_t;

#define FD_STREAM_TYPE 0x5ab1 /* not one of libmongoc's stream types */
#define DEFAULT_TIMEOUT_MS 300000

/* Wait until fd is ready for ev: 1 ready, 0 timed out, -1 error. */
static int wait_fd(fd_stream_t *s, short ev, int32_t timeout_ms)
{
    struct pollfd p = {.fd = s->fd, .events = ev};
    int rc;
    do
        rc = poll(&p, 1, timeout_ms < 0 ? DEFAULT_TIMEOUT_MS : timeout_ms);
    while (rc < 0 && errno == EINTR);
    if (rc == 0) {
        if (timeout_ms != 0)
            s->timed_out = true;
        errno = timeout_ms == 0 ? EAGAIN : ETIMEDOUT;
    }
    return rc;
}

/* Drop the first n bytes sent from m's iovecs (which must be the sender's own copy). */
static void iov_advance(struct msghdr *m, size_t n)
{
    while (m->msg_iovlen > 0 && n >= m->msg_iov->iov_len) {
        n -= m->msg_iov->iov_len;
        m->msg_iov++, m->msg_iovlen--;
    }
    if (m->msg_iovlen > 0 && n > 0) {
        m->msg_iov->iov_base = (char *)m->msg_iov->iov_base + n;
        m->msg_iov->iov_len -= n;
    }
}

static ssize_t fd_writev(mongoc_stream_t *st, mongoc_iovec_t *iov, size_t iovcnt, int32_t timeout_ms)
{
    fd_stream_t *s = (fd_stream_t *)st;
    s->timed_out = s->retry = false;
    mongoc_iovec_t mine[16]; /* a copy to advance: the caller's iovecs stay as they were */
    if (iovcnt > 16) {
        errno = EINVAL;
        return -1;
    }
    memcpy(mine, iov, iovcnt * sizeof(*iov));
    struct msghdr m = {.msg_iov = mine, .msg_iovlen = iovcnt};
    size_t left = 0;
    for (size_t i = 0; i < iovcnt; i++)
        left += iov[i].iov_len;
    ssize_t sent = 0;
    while (left > 0) {
        ssize_t n = sendmsg(s->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(s, POLLOUT, timeout_ms) > 0)
                continue;
            s->retry = timeout_ms == 0;
            return sent > 0 ? sent : -1;
        }
        if (n < 0)
            return -1;
        sent += n;
        left -= (size_t)n;
        iov_advance(&m, (size_t)n);
    }
    return sent;
}

static ssize_t fd_readv(mongoc_stream_t *st, mongoc_iovec_t *iov, size_t iovcnt, size_t min_bytes,
                        int32_t timeout_ms)
{
    fd_stream_t *s = (fd_stream_t *)st;
    s->timed_out = s->retry = false;
    size_t got = 0, cur = 0, off = 0;
    do {
        if (cur >= iovcnt)
            break;
        ssize_t n = recv(s->fd, (char *)iov[cur].iov_base + off, iov[cur].iov_len - off, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(s, POLLIN, timeout_ms) > 0)
                continue;
            s->retry = timeout_ms == 0;
            break;
        }
        if (n <= 0) {
            if (n == 0)
                errno = ECONNRESET;
            return -1;
        }
        got += (size_t)n;
        off += (size_t)n;
        if (off == iov[cur].iov_len)
            cur++, off = 0;
    } while (got < min_bytes || got == 0);
    return got > 0 && got >= min_bytes ? (ssize_t)got : -1;
}

static int fd_close(mongoc_stream_t *st)
{
    fd_stream_t *s = (fd_stream_t *)st;
    int rc = s->fd >= 0 ? close(s->fd) : 0;
    s->fd = -1;
    return rc;
}

static void fd_destroy(mongoc_stream_t *st)
{
    fd_close(st);
    free(st);
}

static int fd_flush(mongoc_stream_t *st)
{
    (void)st;
    return 0;
}

static int fd_setsockopt(mongoc_stream_t *st, int level, int name, void *val, mongoc_socklen_t len)
{
    return setsockopt(((fd_stream_t *)st)->fd, level, name, val, len);
}

static bool fd_check_closed(mongoc_stream_t *st)
{
    fd_stream_t *s = (fd_stream_t *)st;
    struct pollfd p = {.fd = s->fd, .events = POLLIN};
    if (s->fd < 0)
        return true;
    if (poll(&p, 1, 0) <= 0)
        return false;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
        return true;
    char c;
    return recv(s->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static ssize_t fd_poll(mongoc_stream_poll_t *streams, size_t n, int32_t timeout_ms)
{
    struct pollfd p[16];
    if (n > 16) {
        errno = EINVAL;
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (struct pollfd){.fd = ((fd_stream_t *)streams[i].stream)->fd, .events = (short)streams[i].events};
    int rc;
    do
        rc = poll(p, (nfds_t)n, timeout_ms);
    while (rc < 0 && errno == EINTR);
    for (size_t i = 0; rc >= 0 && i < n; i++)
        streams[i].revents = p[i].revents;
    return rc;
}

static void fd_failed(mongoc_stream_t *st)
{
    fd_destroy(st);
}

static bool fd_timed_out(mongoc_stream_t *st)
{
    return ((fd_stream_t *)st)->timed_out;
}

static bool fd_should_retry(mongoc_stream_t *st)
{
    return ((fd_stream_t *)st)->retry;
}

/* Connect to one address within timeout_ms: a blocking socket, or -1. */
static int connect_fd(int family, const struct sockaddr *addr, socklen_t addrlen, int32_t timeout_ms)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, addr, addrlen) != 0) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t el = sizeof(err);
        if (errno != EINPROGRESS || poll(&p, 1, timeout_ms) != 1 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
            close(fd);
            return -1;
        }
    }
    int one = 1;
    if (family != AF_UNIX)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The stream initiator: our stream over a TCP connection, remembered by host. */
static mongoc_stream_t *initiate(const mongoc_uri_t *uri, const mongoc_host_list_t *host, void *arg,
                                 bson_error_t *error)
{
    mongo_wire_t *w = arg;
    int32_t connect_ms = mongoc_uri_get_option_as_int32(uri, MONGOC_URI_CONNECTTIMEOUTMS, 10000);
    int fd = -1;
    if (unix_dir != NULL) {
        /* the server's socket for this port, as mongod names it */
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/mongodb-%u.sock", unix_dir,
                         (unsigned)host->port);
        if (n > 0 && (size_t)n < sizeof(sa.sun_path))
            fd = connect_fd(AF_UNIX, (struct sockaddr *)&sa, sizeof(sa), connect_ms);
    } else {
        char port[16];
        snprintf(port, sizeof(port), "%u", (unsigned)host->port);
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        if (getaddrinfo(host->host, port, &hints, &res) != 0 || res == NULL) {
            bson_set_error(error, MONGOC_ERROR_STREAM, MONGOC_ERROR_STREAM_NAME_RESOLUTION,
                           "cannot resolve %s", host->host_and_port);
            return NULL;
        }
        for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next)
            fd = connect_fd(a->ai_family, a->ai_addr, a->ai_addrlen, connect_ms);
        freeaddrinfo(res);
    }
    fd_stream_t *s = fd >= 0 ? calloc(1, sizeof(*s)) : NULL;
    if (s == NULL) {
        if (fd >= 0)
            close(fd);
        bson_set_error(error, MONGOC_ERROR_STREAM, MONGOC_ERROR_STREAM_CONNECT, "cannot connect to %s",
                       host->host_and_port);
        return NULL;
    }
    s->fd = fd;
    s->vt = (mongoc_stream_t){.type = FD_STREAM_TYPE,
                              .destroy = fd_destroy,
                              .close = fd_close,
                              .flush = fd_flush,
                              .writev = fd_writev,
                              .readv = fd_readv,
                              .setsockopt = fd_setsockopt,
                              .check_closed = fd_check_closed,
                              .poll = fd_poll,
                              .failed = fd_failed,
                              .timed_out = fd_timed_out,
                              .should_retry = fd_should_retry};
    if (w->nmade < MAX_STREAMS) {
        snprintf(w->made[w->nmade].host, sizeof(w->made[0].host), "%s", host->host_and_port);
        w->made[w->nmade++].stream = &s->vt;
    }
    return &s->vt;
}

/*
 * uri's text with its hosts replaced by host and directConnection=true, or
 * NULL when uri names one host already or cannot be rewritten so (SRV, a
 * directConnection of its own).  The caller frees it.
 */
static mongoc_uri_t *direct_uri(const mongoc_uri_t *uri, const char *host)
{
    const char *s = mongoc_uri_get_string(uri);
    const mongoc_host_list_t *hosts = mongoc_uri_get_hosts(uri);
    if (strncmp(s, "mongodb://", 10) != 0 || mongoc_uri_has_option(uri, MONGOC_URI_DIRECTCONNECTION) ||
        (hosts != NULL && hosts->next == NULL && mongoc_uri_get_replica_set(uri) == NULL))
        return NULL;
    const char *start = s + 10, *end = start + strcspn(start, "/?");
    const char *at = NULL;
    for (const char *q = start; q < end; q++)
        if (*q == '@')
            at = q;
    const char *h = at ? at + 1 : start;
    const char *rest = end;
    const char *sep = strchr(rest, '?') ? "&" : *rest == '/' ? "?" : "/?";
    size_t n = strlen(s) + strlen(host) + 40;
    char *text = malloc(n);
    if (text == NULL)
        return NULL;
    snprintf(text, n, "%.*s%s%s%sdirectConnection=true", (int)(h - s), s, host, rest, sep);
    mongoc_uri_t *d = mongoc_uri_new_with_error(text, NULL);
    free(text);
    return d;
}

mongo_wire_t *mongo_wire_open(const mongoc_uri_t *uri, mongoc_client_pool_t *pool, const char *appname,
                              bson_error_t *error)
{
    /*
     * With a pool, the pool's monitors name the primary and the connection
     * is made to it alone (directConnection=true): a single-threaded client
     * that discovers a set's members itself deadlocks in libmongoc 1.23
     * when a member it learns of refuses the connection our initiator makes
     * (CDRIVER-4666, fixed in 1.24: the scan's error callback takes the
     * topology lock the scan holds), as after a failover.
     */
    mongoc_uri_t *direct = NULL;
    if (pool != NULL) {
        mongoc_client_t *pc = mongoc_client_pool_pop(pool);
        mongoc_server_description_t *sd = mongoc_client_select_server(pc, true, NULL, error);
        if (sd == NULL) {
            mongoc_client_pool_push(pool, pc);
            return NULL;
        }
        direct = direct_uri(uri, mongoc_server_description_host(sd)->host_and_port);
        mongoc_server_description_destroy(sd);
        mongoc_client_pool_push(pool, pc);
        if (direct != NULL)
            uri = direct;
    }
    mongo_wire_t *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        bson_set_error(error, MONGOC_ERROR_CLIENT, MONGOC_ERROR_CLIENT_NOT_READY, "out of memory");
        mongoc_uri_destroy(direct);
        return NULL;
    }
    w->timeout_ms = mongoc_uri_get_option_as_int32(uri, MONGOC_URI_SOCKETTIMEOUTMS, 300000);
    w->client = mongoc_client_new_from_uri(uri);
    mongoc_uri_destroy(direct); /* the client keeps a copy */
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
    /* socketTimeoutMS bounds every blocking send and recv of the commands (0: no limit). */
    struct timeval tv = {.tv_sec = w->timeout_ms / 1000, .tv_usec = (w->timeout_ms % 1000) * 1000};
    int fd = ((fd_stream_t *)w->stream)->fd;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
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

void mongo_wire_drop(mongo_wire_t *w)
{
    w->stream = NULL; /* the client still owns it and closes it */
}

static bool fail(mongo_wire_t *w, bson_error_t *error, const char *what)
{
    bson_set_error(error, MONGOC_ERROR_STREAM, MONGOC_ERROR_STREAM_SOCKET, "%s: %s", what,
                   errno ? strerror(errno) : "connection closed");
    mongo_wire_drop(w);
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

/* Write every byte of iov on the blocking socket fd (SO_SNDTIMEO bounds the wait). */
static bool send_all(int fd, struct iovec *iov, int iovcnt)
{
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
    while (m.msg_iovlen > 0) {
        ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return false;
        iov_advance(&m, (size_t)n);
    }
    return true;
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
    struct iovec iov[2] = {{.iov_base = head, .iov_len = sizeof(head)},
                           {.iov_base = (void *)bson_get_data(cmd), .iov_len = cmd->len}};
    int fd = ((fd_stream_t *)w->stream)->fd;
    if (!send_all(fd, iov, 2))
        return fail(w, error, "send");
    if (more_to_come)
        return true;
    /* The reply: one blocking recv usually brings all of it. */
    if (!reserve(w, 64 * 1024))
        return fail(w, error, "out of memory");
    size_t got = 0, len = 0;
    while (got < 16 || got < len) {
        if (len > w->cap && !reserve(w, len))
            return fail(w, error, "out of memory");
        ssize_t n = recv(fd, w->buf + got, (len ? len : w->cap) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            errno = 0; /* the server closed the connection */
        if (n <= 0)
            return fail(w, error, errno == EAGAIN ? "receive (socketTimeoutMS)" : "receive");
        got += (size_t)n;
        if (len == 0 && got >= 16) {
            len = get_le32(w->buf);
            if (len < 21 || len > 48000000 || get_le32(w->buf + 8) != id || get_le32(w->buf + 12) != OP_MSG) {
                errno = EPROTO;
                return fail(w, error, "bad reply");
            }
        }
    }
    if (got > len) {
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
