/*
 * net.c: listeners, loop threads, start/stop and statistics.
 *
 * Distribution: one listener thread owns every listening socket (polled
 * with uv_poll, accepted with accept4) and hands each connection to the
 * loop with the fewest connections through that loop's inbox + uv_async.
 * Chosen over SO_REUSEPORT per loop because (a) the kernel's hash spreads
 * a handful of long-lived driver connections unevenly, while we balance by
 * live count; (b) one place counts connections, so max_conns is exact and
 * refused connections are logged once; (c) a second server on the same
 * port fails with "Address already in use" instead of silently sharing it.
 * Accepting is cheap next to serving, so one thread does not limit us.
 *
 * Unix-domain sockets (mongod's /tmp/mongodb-<port>.sock, and bindIp
 * entries that are paths) are listeners like the others: the same poll,
 * accept and hand-off; only the handle a loop opens on the connection
 * differs (net_conn_start).  As mongod does, a file already at the
 * socket's path is removed at start (a killed server's), the socket is
 * created with the configured mode and removed again at stop.  TCP
 * addresses are bound first, so a second server on the same port fails
 * before it touches the first one's file.
 *
 * Stop: listener first (no new connections), then each loop closes its
 * connections, waits up to STOP_WAIT_MS for outstanding requests, closes
 * its handles and returns from uv_run; then the threads are joined.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "net/net_int.h"

#define MAX_LISTENERS 64
#define ACCEPT_BATCH 128
#define EMFILE_BACKOFF_MS 100
#define STOP_WAIT_MS 10000
#define DEFAULT_MAX_CONNS 1000000

net_state_t net_g;

static _Thread_local net_loop_t *tl_loop;

static struct {
    uv_loop_t loop;
    uv_thread_t thread;
    uv_async_t wake;
    uv_timer_t backoff;
    uv_poll_t polls[MAX_LISTENERS];
    int fds[MAX_LISTENERS];
    char *paths[MAX_LISTENERS]; /* a Unix-domain socket's file (removed at stop), else NULL */
    int nfds;
    atomic_bool stop;
    bool running;
    bool leaked; /* a loop gave up on outstanding requests: keep loops allocated */
    unsigned rr;
} lst;

net_loop_t *net_current_loop(void)
{
    return tl_loop;
}

/* "host:port" ("[v6]:port") and whether the address is loopback.  A
 * Unix-domain address is its path; a client's, which has none, is named
 * as mongod names it, "anonymous unix socket:<the server's port>". */
static void format_addr(const struct sockaddr_storage *ss, char *out, size_t n, bool *loopback)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    bool lb = false;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        port = ntohs(a->sin_port);
        lb = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
        snprintf(out, n, "%s:%d", host, port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        port = ntohs(a->sin6_port);
        lb = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) ||
             (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) && a->sin6_addr.s6_addr[12] == 127);
        snprintf(out, n, "[%s]:%d", host, port);
    } else if (ss->ss_family == AF_UNIX) {
        const struct sockaddr_un *a = (const struct sockaddr_un *)ss;
        lb = true;
        if (a->sun_path[0] != '\0')
            snprintf(out, n, "%.*s", (int)sizeof(a->sun_path), a->sun_path);
        else
            snprintf(out, n, "anonymous unix socket:%d", net_g.port);
    } else {
        snprintf(out, n, "unknown");
    }
    if (loopback != NULL)
        *loopback = lb;
}

/* ---- loops ----------------------------------------------------------------- */

static void loop_finish(net_loop_t *nl)
{
    if (nl->finished)
        return;
    nl->finished = true;
    pthread_mutex_lock(&nl->mu);
    nl->dead = true;
    sbl_conn_t *in = nl->incoming;
    net_reply_t *r = nl->replies;
    nl->incoming = NULL;
    nl->replies = nl->replies_tail = NULL;
    pthread_mutex_unlock(&nl->mu);
    while (in != NULL) {
        sbl_conn_t *next = in->next;
        net_conn_discard(in);
        in = next;
    }
    while (r != NULL) {
        net_reply_t *next = r->next;
        net_conn_reply_arrived(r);
        r = next;
    }
    if (nl->conns != NULL) {
        lst.leaked = true;
        sbl_log(SBL_LOG_WARNING, "NETWORK", 4784923,
                "Gave up waiting for outstanding requests at shutdown", NULL);
    }
    uv_close((uv_handle_t *)&nl->wake, NULL);
    uv_close((uv_handle_t *)&nl->deadline, NULL);
    uv_close((uv_handle_t *)&nl->flush, NULL);
    uv_close((uv_handle_t *)&nl->flush_idle, NULL);
}

void net_loop_conn_freed(net_loop_t *nl)
{
    if (nl->stopping && nl->conns == NULL)
        loop_finish(nl);
}

static void deadline_cb(uv_timer_t *t)
{
    loop_finish(t->data);
}

static void (*kick_fn)(uv_loop_t *loop);
static pthread_rwlock_t kick_lock = PTHREAD_RWLOCK_INITIALIZER; /* net_g.loops stays while read */

void sbl_net_set_kick(void (*fn)(uv_loop_t *loop))
{
    kick_fn = fn;
}

void sbl_net_kick_loops(void)
{
    pthread_rwlock_rdlock(&kick_lock);
    for (int i = 0; net_g.loops != NULL && i < net_g.nloops; i++) {
        net_loop_t *nl = &net_g.loops[i];
        if (atomic_exchange(&nl->kicked, true))
            continue; /* a run is due already */
        if (nl == tl_loop) {
            /* This loop's own thread (an insert it served): the run comes at
             * the end of this iteration (flush_cb), not through the eventfd,
             * whose write, poll wake-up and read each command paid. */
            if (!nl->stopping && !nl->finished)
                net_flush_soon(nl);
            continue;
        }
        pthread_mutex_lock(&nl->mu);
        if (!nl->dead)
            uv_async_send(&nl->wake);
        pthread_mutex_unlock(&nl->mu);
    }
    pthread_rwlock_unlock(&kick_lock);
}

void net_loop_kick_due(net_loop_t *nl)
{
    /* read first: flush_cb asks every iteration, and a write would take the
     * flag's cache line from the threads that kick */
    if (atomic_load_explicit(&nl->kicked, memory_order_relaxed) &&
        atomic_exchange(&nl->kicked, false) && kick_fn != NULL && !nl->stopping && !nl->finished)
        kick_fn(&nl->loop);
}

static void wake_cb(uv_async_t *a)
{
    net_loop_t *nl = a->data;
    if (nl->finished)
        return;
    net_loop_kick_due(nl);
    pthread_mutex_lock(&nl->mu);
    sbl_conn_t *in = nl->incoming;
    net_reply_t *r = nl->replies;
    bool stop = nl->stop_requested;
    nl->incoming = NULL;
    nl->replies = nl->replies_tail = NULL;
    pthread_mutex_unlock(&nl->mu);

    while (in != NULL) {
        sbl_conn_t *next = in->next;
        in->next = NULL;
        if (nl->stopping || stop)
            net_conn_discard(in);
        else
            net_conn_start(in);
        in = next;
    }
    while (r != NULL) {
        net_reply_t *next = r->next;
        net_conn_reply_arrived(r);
        r = next;
    }
    if (stop && !nl->stopping) {
        nl->stopping = true;
        for (sbl_conn_t *c = nl->conns; c != NULL; c = c->next)
            net_conn_close(c);
        uv_timer_start(&nl->deadline, deadline_cb, STOP_WAIT_MS, 0);
        if (nl->conns == NULL)
            loop_finish(nl);
    }
}

static void loop_main(void *arg)
{
    net_loop_t *nl = arg;
    tl_loop = nl;
    char ctx[32];
    snprintf(ctx, sizeof(ctx), "loop%d", nl->index);
    sbl_thread_name(ctx);
    uv_run(&nl->loop, UV_RUN_DEFAULT);
    tl_loop = NULL;
}

/* ---- listener -------------------------------------------------------------- */

static void accept_cb(uv_poll_t *p, int status, int events);

static void listener_resume(uv_timer_t *t)
{
    for (int i = 0; i < lst.nfds; i++)
        uv_poll_start(&lst.polls[i], UV_READABLE, accept_cb);
}

/* The loop with the fewest connections; ties rotate. */
static net_loop_t *pick_loop(void)
{
    unsigned n = (unsigned)net_g.nloops;
    unsigned start = lst.rr++ % n;
    net_loop_t *best = &net_g.loops[start];
    int64_t best_n = atomic_load(&best->nconns);
    for (unsigned k = 1; k < n; k++) {
        net_loop_t *nl = &net_g.loops[(start + k) % n];
        int64_t c = atomic_load(&nl->nconns);
        if (c < best_n) {
            best = nl;
            best_n = c;
        }
    }
    return best;
}

static void handle_accepted(int fd)
{
    struct sockaddr_storage peer, local;
    socklen_t plen = sizeof(peer), llen = sizeof(local);
    memset(&peer, 0, sizeof(peer));
    memset(&local, 0, sizeof(local));
    getpeername(fd, (struct sockaddr *)&peer, &plen);
    getsockname(fd, (struct sockaddr *)&local, &llen);

    int64_t count = atomic_fetch_add(&net_g.current, 1) + 1;
    if (count > net_g.max_conns) {
        atomic_fetch_sub(&net_g.current, 1);
        char remote[64];
        format_addr(&peer, remote, sizeof(remote), NULL);
        bson_t attr;
        bson_init(&attr);
        BSON_APPEND_UTF8(&attr, "remote", remote);
        BSON_APPEND_INT64(&attr, "connectionCount", count - 1);
        sbl_log(SBL_LOG_INFO, "NETWORK", 22942,
                "Connection refused because there are too many open connections", &attr);
        bson_destroy(&attr);
        close(fd);
        return;
    }
    sbl_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        atomic_fetch_sub(&net_g.current, 1);
        close(fd);
        return;
    }
    int one = 1;
    c->is_unix = local.ss_family == AF_UNIX;
    if (!c->is_unix)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->fd = fd;
    c->id = atomic_fetch_add(&net_g.next_id, 1) + 1;
    format_addr(&peer, c->remote, sizeof(c->remote), &c->loopback);
    format_addr(&local, c->local, sizeof(c->local), NULL);
    atomic_fetch_add(&net_g.total_created, 1);

    bson_t attr;
    bson_init(&attr);
    BSON_APPEND_UTF8(&attr, "remote", c->remote);
    BSON_APPEND_INT64(&attr, "connectionId", (int64_t)c->id);
    BSON_APPEND_INT64(&attr, "connectionCount", count);
    sbl_log(SBL_LOG_INFO, "NETWORK", 22943, "Connection accepted", &attr);
    bson_destroy(&attr);

    net_loop_t *nl = pick_loop();
    c->nl = nl;
    atomic_fetch_add(&nl->nconns, 1);
    pthread_mutex_lock(&nl->mu);
    if (nl->dead) {
        pthread_mutex_unlock(&nl->mu);
        net_conn_discard(c);
        return;
    }
    c->next = nl->incoming;
    nl->incoming = c;
    uv_async_send(&nl->wake);
    pthread_mutex_unlock(&nl->mu);
}

static void accept_cb(uv_poll_t *p, int status, int events)
{
    int lfd = (int)(intptr_t)p->data;
    for (int i = 0; i < ACCEPT_BATCH && !atomic_load(&lst.stop); i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            handle_accepted(fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            /* Level-triggered: back off instead of spinning on the error. */
            bson_t attr;
            bson_init(&attr);
            BSON_APPEND_UTF8(&attr, "error", strerror(errno));
            sbl_log(SBL_LOG_WARNING, "NETWORK", 23023, "Error accepting new connection", &attr);
            bson_destroy(&attr);
            for (int k = 0; k < lst.nfds; k++)
                uv_poll_stop(&lst.polls[k]);
            uv_timer_start(&lst.backoff, listener_resume, EMFILE_BACKOFF_MS, 0);
        }
        break;
    }
}

static void poll_close_cb(uv_handle_t *h)
{
    close((int)(intptr_t)h->data);
}

static void listener_wake_cb(uv_async_t *a)
{
    if (!atomic_load(&lst.stop))
        return;
    for (int i = 0; i < lst.nfds; i++)
        uv_close((uv_handle_t *)&lst.polls[i], poll_close_cb);
    uv_close((uv_handle_t *)&lst.backoff, NULL);
    uv_close((uv_handle_t *)&lst.wake, NULL);
}

static void listener_main(void *arg)
{
    sbl_thread_name("listener");
    uv_run(&lst.loop, UV_RUN_DEFAULT);
}

/* A socket file's unlink or chmod failed (errno e): logged with mongod's id
 * and returned as the error that stops the start. */
static int socket_file_error(int id, const char *op, const char *path, int e, sbl_err_t *err)
{
    char msg[64];
    snprintf(msg, sizeof(msg), "Failed to %s socket file", op);
    bson_t attr;
    bson_init(&attr);
    BSON_APPEND_UTF8(&attr, "path", path);
    BSON_APPEND_UTF8(&attr, "error", strerror(e));
    sbl_log(SBL_LOG_ERROR, "NETWORK", id, msg, &attr);
    bson_destroy(&attr);
    return sbl_err_set(err, SBL_E_InternalError, "%s %s: %s", msg, path, strerror(e));
}

/* Listen on the Unix-domain socket path with file mode perms; the fd goes
 * to lst.fds and the path to lst.paths.  A file already there is removed
 * first, whoever made it, as mongod does: members of a test set in network
 * namespaces of their own share /tmp and one port number. */
static int bind_unix(const char *path, int perms, sbl_err_t *err)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    for (int i = 0; i < lst.nfds; i++)
        if (lst.paths[i] != NULL && strcmp(lst.paths[i], path) == 0)
            return 0; /* listed twice (bindIp and the default): one listener */
    if (strlen(path) >= sizeof(sa.sun_path))
        return sbl_err_set(err, SBL_E_BadValue, "Failed to bind to %s: the path is longer than "
                           "the %zu bytes of a Unix-domain socket address", path,
                           sizeof(sa.sun_path) - 1);
    if (lst.nfds == MAX_LISTENERS)
        return sbl_err_set(err, SBL_E_BadValue, "too many bind addresses");
    memcpy(sa.sun_path, path, strlen(path));

    if (unlink(path) != 0 && errno != ENOENT)
        return socket_file_error(23024, "unlink", path, errno, err);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return sbl_err_set(err, SBL_E_InternalError, "Failed to bind to %s: %s", path,
                           strerror(e));
    }
    lst.paths[lst.nfds] = bson_strdup(path); /* from here on the file is ours to remove */
    lst.fds[lst.nfds++] = fd;
    if (chmod(path, (mode_t)perms) != 0)
        return socket_file_error(23026, "chmod", path, errno, err);
    if (listen(fd, SOMAXCONN) != 0)
        return sbl_err_set(err, SBL_E_InternalError, "Failed to listen on %s: %s", path,
                           strerror(errno));
    return 0;
}

/* Close every listening fd that is not polled yet; remove the socket files. */
static void close_listeners(void)
{
    for (int i = 0; i < lst.nfds; i++) {
        close(lst.fds[i]);
        if (lst.paths[i] != NULL)
            unlink(lst.paths[i]);
        bson_free(lst.paths[i]);
        lst.paths[i] = NULL;
    }
    lst.nfds = 0;
}

/* After the listener closed its fds: remove the socket files (mongod's
 * "removing socket file"). */
static void remove_socket_files(void)
{
    for (int i = 0; i < lst.nfds; i++) {
        if (lst.paths[i] == NULL)
            continue;
        bson_t attr;
        bson_init(&attr);
        BSON_APPEND_UTF8(&attr, "path", lst.paths[i]);
        sbl_log(SBL_LOG_INFO, "NETWORK", 23017, "removing socket file", &attr);
        if (unlink(lst.paths[i]) != 0) {
            BSON_APPEND_UTF8(&attr, "error", strerror(errno));
            sbl_log(SBL_LOG_WARNING, "NETWORK", 23022, "Unable to remove UNIX socket", &attr);
        }
        bson_destroy(&attr);
        bson_free(lst.paths[i]);
        lst.paths[i] = NULL;
    }
}

/* Bind and listen on every address ip resolves to; fds go to lst.fds.  An
 * ip with a '/' is a Unix-domain socket's path. */
static int bind_ip(const char *ip, int port, int unix_perms, sbl_err_t *err)
{
    if (strchr(ip, '/') != NULL)
        return bind_unix(ip, unix_perms, err);
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_NUMERICHOST;
    bool numeric = true;
    int gai = getaddrinfo(ip, portstr, &hints, &res);
    if (gai != 0) {
        numeric = false;
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
        gai = getaddrinfo(ip, portstr, &hints, &res);
    }
    if (gai != 0)
        return sbl_err_set(err, SBL_E_BadValue, "cannot resolve bind address '%s': %s", ip,
                           gai_strerror(gai));
    int bound = 0, rc = 0;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        if (lst.nfds == MAX_LISTENERS) {
            rc = sbl_err_set(err, SBL_E_BadValue, "too many bind addresses");
            break;
        }
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        if (fd >= 0) {
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
            /* "0.0.0.0" and "::" can then both be bound. */
            if (ai->ai_family == AF_INET6)
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        }
        if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            /* A name may resolve to a family this host lacks; numeric addresses must bind. */
            if (!numeric && (e == EADDRNOTAVAIL || e == EAFNOSUPPORT))
                continue;
            rc = sbl_err_set(err, SBL_E_InternalError, "Failed to bind to %s:%d: %s%s", ip, port,
                             strerror(e),
                             e == EADDRINUSE ? " (is another server listening on this port?)" : "");
            break;
        }
        lst.paths[lst.nfds] = NULL;
        lst.fds[lst.nfds++] = fd;
        bound++;
    }
    freeaddrinfo(res);
    if (rc == 0 && bound == 0)
        rc = sbl_err_set(err, SBL_E_InternalError, "Failed to bind to %s:%d", ip, port);
    return rc;
}

/* ---- start / stop ---------------------------------------------------------- */

static void free_loops(int n)
{
    for (int i = 0; i < n; i++) {
        net_loop_t *nl = &net_g.loops[i];
        uv_loop_close(&nl->loop);
        net_flush_free(nl);
        while (nl->nspare > 0)
            free(nl->spare[--nl->nspare]);
        pthread_mutex_destroy(&nl->mu);
    }
    pthread_rwlock_wrlock(&kick_lock);
    free(net_g.loops);
    net_g.loops = NULL;
    net_g.nloops = 0;
    pthread_rwlock_unlock(&kick_lock);
}

/* Run a loop until its (already closed) handles have gone; for failed starts. */
static void drain_loop(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_DEFAULT);
}

sbl_net_config_t sbl_net_config_of(const sbl_options_t *o)
{
    return (sbl_net_config_t){
        .bind_ips = (const char *const *)o->bind_ips,
        .nbind = o->nbind,
        .port = o->port,
        .unix_socket_dir = o->unix_socket ? o->unix_socket_prefix : NULL,
        .unix_perms = o->unix_socket_perms,
        .max_conns = o->max_conns,
        .nloops = o->nloops,
        .tls_mode = o->tls_mode,
        .tls_cert_key_file = o->tls_cert_key_file,
        .tls_cert_key_password = o->tls_cert_key_password,
        /* mongod: clusterCAFile, when set, verifies the certificates of
         * those who connect here (members and clients); CAFile those of
         * the servers this one dials */
        .tls_ca_file = o->tls_cluster_ca_file != NULL ? o->tls_cluster_ca_file : o->tls_ca_file,
        .tls_allow_no_cert = o->tls_allow_no_cert,
        .tls_allow_invalid_certs = o->tls_allow_invalid_certs,
    };
}

int sbl_net_start(const sbl_net_config_t *cfg, sbl_net_request_fn on_request,
                  sbl_net_conn_fn on_open, sbl_net_conn_fn on_close, sbl_err_t *err)
{
    if (lst.running)
        return sbl_err_set(err, SBL_E_IllegalOperation, "the network layer is already running");
    if (on_request == NULL || cfg->nbind == 0)
        return sbl_err_set(err, SBL_E_BadValue, "no request function or no bind address");
    if (cfg->port < 0 || cfg->port > 65535)
        return sbl_err_set(err, SBL_E_BadValue, "port %d out of range", cfg->port);

    /* A peer closing mid-write must be an error return, not a fatal signal. */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    int trc = net_tls_init(cfg, err);
    if (trc != 0)
        return trc;
    memset(&net_g, 0, sizeof(net_g));
    net_g.on_request = on_request;
    net_g.on_open = on_open;
    net_g.on_close = on_close;
    net_g.port = cfg->port;
    net_g.max_conns = cfg->max_conns > 0 ? cfg->max_conns : DEFAULT_MAX_CONNS;
    int nloops = cfg->nloops;
    if (nloops <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nloops = n > 0 ? (int)n : 1;
    }

    int rc = 0;
    lst.nfds = 0;
    atomic_store(&lst.stop, false);
    lst.leaked = false;
    int perms = cfg->unix_perms > 0 ? cfg->unix_perms : 0700;
    for (size_t i = 0; i < cfg->nbind && rc == 0; i++)
        rc = bind_ip(cfg->bind_ips[i], cfg->port, perms, err);
    if (rc == 0 && cfg->unix_socket_dir != NULL) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/mongodb-%d.sock", cfg->unix_socket_dir, cfg->port);
        rc = bind_unix(path, perms, err);
    }
    if (rc != 0) {
        close_listeners();
        net_tls_shutdown();
        return rc;
    }
    for (int i = 0; i < lst.nfds; i++) {
        if (lst.paths[i] == NULL)
            continue;
        bson_t attr;
        bson_init(&attr);
        BSON_APPEND_UTF8(&attr, "address", lst.paths[i]);
        sbl_log(SBL_LOG_INFO, "NETWORK", 23015, "Listening on", &attr);
        bson_destroy(&attr);
    }

    net_g.loops = calloc((size_t)nloops, sizeof(net_loop_t));
    if (net_g.loops == NULL) {
        close_listeners();
        net_tls_shutdown();
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    }
    net_g.nloops = nloops;
    for (int i = 0; i < nloops; i++) {
        net_loop_t *nl = &net_g.loops[i];
        nl->index = i;
        pthread_mutex_init(&nl->mu, NULL);
        uv_loop_init(&nl->loop);
        uv_async_init(&nl->loop, &nl->wake, wake_cb);
        nl->wake.data = nl;
        uv_timer_init(&nl->loop, &nl->deadline);
        nl->deadline.data = nl;
        net_flush_init(nl);
    }

    uv_loop_init(&lst.loop);
    uv_async_init(&lst.loop, &lst.wake, listener_wake_cb);
    uv_timer_init(&lst.loop, &lst.backoff);
    for (int i = 0; i < lst.nfds; i++) {
        uv_poll_init(&lst.loop, &lst.polls[i], lst.fds[i]);
        lst.polls[i].data = (void *)(intptr_t)lst.fds[i];
        uv_poll_start(&lst.polls[i], UV_READABLE, accept_cb);
    }

    int started = 0;
    for (; started < nloops; started++) {
        if ((rc = uv_thread_create(&net_g.loops[started].thread, loop_main,
                                   &net_g.loops[started])) != 0)
            break;
    }
    if (rc == 0)
        rc = uv_thread_create(&lst.thread, listener_main, NULL);
    if (rc != 0) {
        /* Unwind: close the listener's handles on this thread, stop the started loops. */
        atomic_store(&lst.stop, true);
        listener_wake_cb(&lst.wake);
        drain_loop(&lst.loop);
        uv_loop_close(&lst.loop);
        for (int i = 0; i < nloops; i++) {
            net_loop_t *nl = &net_g.loops[i];
            if (i < started) {
                pthread_mutex_lock(&nl->mu);
                nl->stop_requested = true;
                uv_async_send(&nl->wake);
                pthread_mutex_unlock(&nl->mu);
                uv_thread_join(&nl->thread);
            } else {
                uv_close((uv_handle_t *)&nl->wake, NULL);
                uv_close((uv_handle_t *)&nl->deadline, NULL);
                uv_close((uv_handle_t *)&nl->flush, NULL);
                uv_close((uv_handle_t *)&nl->flush_idle, NULL);
                drain_loop(&nl->loop);
            }
        }
        free_loops(nloops);
        remove_socket_files(); /* the listener's close closed the fds */
        lst.nfds = 0;
        return sbl_err_set(err, SBL_E_InternalError, "cannot start network threads: %s",
                           uv_strerror(rc));
    }
    lst.running = true;
    return 0;
}

void sbl_net_stop(void)
{
    if (!lst.running)
        return;
    if (tl_loop != NULL) {
        sbl_log(SBL_LOG_ERROR, "NETWORK", 4784924, "sbl_net_stop called on a loop thread", NULL);
        return;
    }
    atomic_store(&lst.stop, true);
    uv_async_send(&lst.wake);
    uv_thread_join(&lst.thread);
    uv_loop_close(&lst.loop);
    remove_socket_files();
    lst.nfds = 0;

    for (int i = 0; i < net_g.nloops; i++) {
        net_loop_t *nl = &net_g.loops[i];
        pthread_mutex_lock(&nl->mu);
        nl->stop_requested = true;
        if (!nl->dead)
            uv_async_send(&nl->wake);
        pthread_mutex_unlock(&nl->mu);
    }
    for (int i = 0; i < net_g.nloops; i++)
        uv_thread_join(&net_g.loops[i].thread);
    if (!lst.leaked) {
        free_loops(net_g.nloops);
        net_tls_shutdown();
    }
    /* else: abandoned connections still point at their loop; keep it. */
    lst.running = false;
}

void sbl_net_get_stats(sbl_net_stats_t *st)
{
    st->current = atomic_load(&net_g.current);
    st->total_created = atomic_load(&net_g.total_created);
    st->available = (net_g.max_conns > 0 ? net_g.max_conns : DEFAULT_MAX_CONNS) - st->current;
    st->bytes_in = atomic_load(&net_g.bytes_in);
    st->bytes_out = atomic_load(&net_g.bytes_out);
    st->num_requests = atomic_load(&net_g.num_requests);
    st->reply_batches = atomic_load(&net_g.reply_batches);
    st->replies_batched = atomic_load(&net_g.replies_batched);
}
