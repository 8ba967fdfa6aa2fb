/*
 * sable-cs-readers: N change streams on one collection of a server, each on
 * its own connection and each reading every event, all driven by one thread
 * (epoll over the connections, OP_MSG aggregate and getMore as a driver's
 * watch() sends them, maxTimeMS as its maxAwaitTimeMS), until its standard
 * input closes.  For scripts/changestream-bench.py: 100 open streams then
 * cost the client one thread, not 100, on a machine the server shares, so
 * the benchmark measures the server.  No authentication, no TLS.
 *
 *   sable-cs-readers HOST:PORT DB COLL NSTREAMS [MAX_AWAIT_MS]
 *
 * Prints "ready" once every stream is open, and at the end one line:
 *   events <total> min <per stream> max <per stream> cpu <s> getmores <n>
 * (cpu: this process's user + system time).
 */
#include <arpa/inet.h>
#include <bson/bson.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct stream {
    int fd;
    int64_t cursor;
    int64_t events;
    uint8_t *buf; /* the reply being read */
    size_t len, cap;
} stream_t;

static const char *db_name, *coll_name;
static int64_t await_ms = 200;
static int32_t next_id = 1;

static void die(const char *what)
{
    fprintf(stderr, "sable-cs-readers: %s: %s\n", what, errno ? strerror(errno) : "failed");
    exit(1);
}

/* Send cmd as an OP_MSG (blocking: the command is small). */
static void send_msg(int fd, const bson_t *cmd)
{
    uint8_t hdr[21];
    int32_t total = 21 + (int32_t)cmd->len, id = next_id++, zero = 0, op = 2013;
    memcpy(hdr, &total, 4);
    memcpy(hdr + 4, &id, 4);
    memcpy(hdr + 8, &zero, 4);
    memcpy(hdr + 12, &op, 4);
    memcpy(hdr + 16, &zero, 4);
    hdr[20] = 0; /* section kind 0: the body */
    struct iovec v[2] = {{hdr, sizeof(hdr)}, {(void *)bson_get_data(cmd), cmd->len}};
    struct msghdr m = {.msg_iov = v, .msg_iovlen = 2};
    if (sendmsg(fd, &m, MSG_NOSIGNAL) != total)
        die("send");
}

static void send_get_more(stream_t *s)
{
    bson_t cmd = BSON_INITIALIZER;
    BSON_APPEND_INT64(&cmd, "getMore", s->cursor);
    BSON_APPEND_UTF8(&cmd, "collection", coll_name);
    BSON_APPEND_INT64(&cmd, "maxTimeMS", await_ms);
    BSON_APPEND_UTF8(&cmd, "$db", db_name);
    send_msg(s->fd, &cmd);
    bson_destroy(&cmd);
}

/* A whole reply in s->buf: count its batch's events, note the cursor id. */
static void on_reply(stream_t *s)
{
    bson_t body;
    bson_iter_t it, c, b;
    if (s->len < 21 || s->buf[20] != 0 ||
        !bson_init_static(&body, s->buf + 21, s->len - 21))
        die("reply");
    if (!bson_iter_init_find(&it, &body, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        char *j = bson_as_relaxed_extended_json(&body, NULL);
        fprintf(stderr, "sable-cs-readers: %s\n", j);
        exit(1);
    }
    bson_iter_recurse(&it, &c);
    while (bson_iter_next(&c)) {
        const char *k = bson_iter_key(&c);
        if (strcmp(k, "id") == 0)
            s->cursor = bson_iter_as_int64(&c);
        else if ((strcmp(k, "nextBatch") == 0 || strcmp(k, "firstBatch") == 0) &&
                 bson_iter_recurse(&c, &b))
            while (bson_iter_next(&b))
                s->events += BSON_ITER_HOLDS_DOCUMENT(&b);
    }
    if (s->cursor == 0)
        die("the stream closed");
    s->len = 0;
}

/* Read what s's socket has; returns whether a whole reply came. */
static bool read_some(stream_t *s)
{
    for (;;) {
        size_t want = 4;
        if (s->len >= 4) {
            int32_t n;
            memcpy(&n, s->buf, 4);
            want = (size_t)n;
            if (s->len == want)
                return true;
        }
        if (want > s->cap) {
            s->cap = want * 2;
            s->buf = realloc(s->buf, s->cap);
        }
        ssize_t r = recv(s->fd, s->buf + s->len, want - s->len, MSG_DONTWAIT);
        if (r == 0)
            die("connection closed");
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return false;
            die("recv");
        }
        s->len += (size_t)r;
    }
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s HOST:PORT DB COLL NSTREAMS [MAX_AWAIT_MS]\n", argv[0]);
        return 2;
    }
    char host[256];
    snprintf(host, sizeof(host), "%s", argv[1]);
    char *colon = strrchr(host, ':');
    int n = atoi(argv[4]);
    if (colon == NULL || n < 1 || n > 10000) {
        fprintf(stderr, "HOST:PORT, and NSTREAMS 1..10000\n");
        return 2;
    }
    *colon = '\0';
    db_name = argv[2];
    coll_name = argv[3];
    if (argc > 5)
        await_ms = atoll(argv[5]);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, strcmp(host, "localhost") == 0 ? "127.0.0.1" : host,
                  &sa.sin_addr) != 1)
        die("HOST must be an IPv4 address");
    int ep = epoll_create1(0);
    stream_t *ss = calloc((size_t)n, sizeof(*ss));
    bson_t agg = BSON_INITIALIZER, pipe, stage, spec, cur;
    BSON_APPEND_UTF8(&agg, "aggregate", coll_name);
    BSON_APPEND_ARRAY_BEGIN(&agg, "pipeline", &pipe);
    BSON_APPEND_DOCUMENT_BEGIN(&pipe, "0", &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&stage, "$changeStream", &spec);
    bson_append_document_end(&stage, &spec);
    bson_append_document_end(&pipe, &stage);
    bson_append_array_end(&agg, &pipe);
    BSON_APPEND_DOCUMENT_BEGIN(&agg, "cursor", &cur);
    bson_append_document_end(&agg, &cur);
    BSON_APPEND_UTF8(&agg, "$db", db_name);
    for (int i = 0; i < n; i++) { /* open each stream: its aggregate, then its first getMore */
        stream_t *s = &ss[i];
        int one = 1;
        if ((s->fd = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
            connect(s->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
            die("connect");
        setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        send_msg(s->fd, &agg);
        while (!read_some(s))
            usleep(1000);
        on_reply(s);
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = s};
        epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &e);
    }
    bson_destroy(&agg);
    int64_t opened_events = 0;
    for (int i = 0; i < n; i++) {
        opened_events += ss[i].events;
        send_get_more(&ss[i]);
    }
    struct epoll_event in = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, 0, &in);
    printf("ready\n");
    fflush(stdout);
    int64_t get_mores = n;
    bool stop = false;
    while (!stop) {
        struct epoll_event evs[64];
        int k = epoll_wait(ep, evs, 64, -1);
        if (k < 0 && errno != EINTR)
            die("epoll_wait");
        for (int i = 0; i < k; i++) {
            stream_t *s = evs[i].data.ptr;
            if (s == NULL) { /* stdin: EOF (or anything) ends the run */
                char b[256];
                if (read(0, b, sizeof(b)) <= 0)
                    stop = true;
                continue;
            }
            if (read_some(s)) {
                on_reply(s);
                send_get_more(s);
                get_mores++;
            }
        }
    }
    int64_t total = -opened_events, lo = INT64_MAX, hi = 0;
    for (int i = 0; i < n; i++) {
        total += ss[i].events;
        lo = ss[i].events < lo ? ss[i].events : lo;
        hi = ss[i].events > hi ? ss[i].events : hi;
        close(ss[i].fd);
        free(ss[i].buf);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("events %lld min %lld max %lld cpu %.3f getmores %lld\n", (long long)total,
           (long long)lo, (long long)hi,
           ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
               ru.ru_stime.tv_usec / 1e6,
           (long long)get_mores);
    free(ss);
    return 0;
}
