/*
 * test_net.c: the network layer against plain sockets on 127.0.0.1: OP_MSG
 * and OP_QUERY round trips, replies from other threads, pipelining order,
 * moreToCome, compressed requests, large messages, a bad client closed
 * alone, max_conns, a reply for an already closed connection, address in
 * use, and clean stop/restart.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common/log.h"
#include "net/net.h"

static atomic_int opens, closes;
static atomic_int data_freed;

static int32_t rd32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- server side: an echo service -------------------------------------- */

typedef struct {
    sbl_conn_t *conn;
    sbl_request_t *req;
    int delay_ms;
} async_job_t;

static void make_reply(const sbl_request_t *req, bson_t *out)
{
    bson_init(out);
    BSON_APPEND_DOUBLE(out, "ok", 1.0);
    BSON_APPEND_DOCUMENT(out, "echo", &req->cmd);
    BSON_APPEND_UTF8(out, "db", req->db);
}

static void *async_main(void *arg)
{
    async_job_t *j = arg;
    sleep_ms(j->delay_ms);
    bson_t out;
    make_reply(j->req, &out);
    sbl_conn_reply(j->conn, j->req, &out);
    bson_destroy(&out);
    free(j);
    return NULL;
}

/* {async: ms} replies from another thread after ms; anything else at once. */
static void on_request(sbl_conn_t *conn, sbl_request_t *req)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, &req->cmd, "async")) {
        async_job_t *j = malloc(sizeof(*j));
        j->conn = conn;
        j->req = req;
        j->delay_ms = bson_iter_as_int64(&it) > 0 ? (int)bson_iter_as_int64(&it) : 0;
        pthread_t t;
        pthread_create(&t, NULL, async_main, j);
        pthread_detach(t);
        return;
    }
    bson_t out;
    make_reply(req, &out);
    sbl_conn_reply(conn, req, &out);
    bson_destroy(&out);
}

static void free_data(void *p)
{
    free(p);
    atomic_fetch_add(&data_freed, 1);
}

static char last_remote[64];
static bool last_loopback;

static void on_open(sbl_conn_t *conn)
{
    snprintf(last_remote, sizeof(last_remote), "%s", sbl_conn_remote(conn));
    last_loopback = sbl_conn_is_loopback(conn);
    atomic_fetch_add(&opens, 1);
    sbl_conn_set_data(conn, malloc(16), free_data);
}

static void on_close(sbl_conn_t *conn)
{
    atomic_fetch_add(&closes, 1);
}

/* Start on a free port of 127.0.0.1 (probe with port 0, retry on a race). */
static int start_server(int max_conns, int nloops)
{
    for (int attempt = 0; attempt < 20; attempt++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t al = sizeof(a);
        bind(s, (struct sockaddr *)&a, sizeof(a));
        getsockname(s, (struct sockaddr *)&a, &al);
        int port = ntohs(a.sin_port);
        close(s);
        const char *ips[] = {"127.0.0.1"};
        sbl_net_config_t cfg = {.bind_ips = ips, .nbind = 1, .port = port,
                                .max_conns = max_conns, .nloops = nloops};
        sbl_err_t err;
        if (sbl_net_start(&cfg, on_request, on_open, on_close, &err) == 0)
            return port;
    }
    return -1;
}

/* ---- client side --------------------------------------------------------- */

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {30, 0}; /* a loaded machine (CI beside other work) may take seconds */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Receive one message into *out (malloc'd); returns its length, 0 on EOF/timeout. */
static size_t recv_msg(int fd, uint8_t **out)
{
    uint8_t h[4];
    *out = NULL;
    if (!sbl_client_read(fd, h, 4))
        return 0;
    int32_t len = rd32(h);
    if (len < 16)
        return 0;
    uint8_t *m = malloc((size_t)len);
    memcpy(m, h, 4);
    if (!sbl_client_read(fd, m + 4, (size_t)len - 4)) {
        free(m);
        return 0;
    }
    *out = m;
    return (size_t)len;
}

/* True when the server closed the connection (EOF rather than timeout). */
static bool peer_closed(int fd)
{
    uint8_t b[64];
    for (;;) {
        ssize_t r = recv(fd, b, sizeof(b), 0);
        if (r == 0)
            return true;
        if (r < 0 && errno != EINTR)
            return false;
    }
}

static void build_msg(sbl_buf_t *b, int32_t reqid, uint32_t flags, const bson_t *body)
{
    size_t st = b->len;
    sbl_buf_append_i32le(b, 0);
    sbl_buf_append_i32le(b, reqid);
    sbl_buf_append_i32le(b, 0);
    sbl_buf_append_i32le(b, SBL_OP_MSG);
    sbl_buf_append_i32le(b, (int32_t)flags);
    sbl_buf_append_byte(b, 0);
    sbl_buf_append(b, bson_get_data(body), body->len);
    sbl_buf_put_i32le(b, st, (int32_t)(b->len - st));
}

/* Send {ping: n, $db: "test"} (+ async ms when >= 0) and check the echo. */
static bool roundtrip(int fd, int32_t reqid, int async_ms)
{
    bson_t *body = BCON_NEW("ping", BCON_INT32(reqid), "$db", BCON_UTF8("test"));
    if (async_ms >= 0)
        BSON_APPEND_INT32(body, "async", async_ms);
    sbl_buf_t b;
    sbl_buf_init(&b);
    build_msg(&b, reqid, 0, body);
    bool ok = sbl_client_write(fd, b.data, b.len);
    uint8_t *m = NULL;
    size_t n = ok ? recv_msg(fd, &m) : 0;
    ok = n > 21 && rd32(m + 8) == reqid && rd32(m + 12) == SBL_OP_MSG;
    if (ok) {
        bson_t r;
        bson_iter_t it;
        ok = bson_init_static(&r, m + 21, n - 21) && bson_iter_init_find(&it, &r, "echo") &&
             bson_iter_init(&it, &r) && bson_iter_find_descendant(&it, "echo.ping", &it) &&
             bson_iter_int32(&it) == reqid;
    }
    free(m);
    sbl_buf_destroy(&b);
    bson_destroy(body);
    return ok;
}

static void test_basic(int port)
{
    int fd = connect_to(port);
    CHECK(fd >= 0);
    CHECK(roundtrip(fd, 1, -1));
    CHECK(roundtrip(fd, 2, 0));
    CHECK(roundtrip(fd, 3, 20));
    CHECK(roundtrip(fd, 4, -1));

    /* OP_QUERY isMaster -> OP_REPLY */
    bson_t *q = BCON_NEW("isMaster", BCON_INT32(1));
    sbl_buf_t b;
    sbl_buf_init(&b);
    sbl_buf_append_i32le(&b, 0);
    sbl_buf_append_i32le(&b, 99);
    sbl_buf_append_i32le(&b, 0);
    sbl_buf_append_i32le(&b, SBL_OP_QUERY);
    sbl_buf_append_i32le(&b, 0);
    sbl_buf_append(&b, "admin.$cmd", 11);
    sbl_buf_append_i32le(&b, 0);
    sbl_buf_append_i32le(&b, -1);
    sbl_buf_append(&b, bson_get_data(q), q->len);
    sbl_buf_put_i32le(&b, 0, (int32_t)b.len);
    CHECK(sbl_client_write(fd, b.data, b.len));
    uint8_t *m;
    size_t n = recv_msg(fd, &m);
    CHECK(n > 36 && rd32(m + 8) == 99 && rd32(m + 12) == SBL_OP_REPLY && rd32(m + 32) == 1);
    if (n > 36) {
        bson_t r;
        bson_iter_t it;
        CHECK(bson_init_static(&r, m + 36, n - 36) && bson_iter_init_find(&it, &r, "db") &&
              strcmp(bson_iter_utf8(&it, NULL), "admin") == 0);
    }
    free(m);

    /* moreToCome: no reply for the first, a reply for the second. */
    sbl_buf_reset(&b);
    bson_t *body = BCON_NEW("ping", BCON_INT32(1), "$db", BCON_UTF8("test"));
    build_msg(&b, 500, SBL_MSG_MORE_TO_COME, body);
    build_msg(&b, 501, 0, body);
    CHECK(sbl_client_write(fd, b.data, b.len));
    n = recv_msg(fd, &m);
    CHECK(n > 0 && rd32(m + 8) == 501);
    free(m);

    /* Compressed request -> compressed reply. */
    sbl_buf_reset(&b);
    build_msg(&b, 600, 0, body);
    sbl_buf_t c;
    sbl_buf_init(&c);
    sbl_buf_append_i32le(&c, 0);
    sbl_buf_append_i32le(&c, 600);
    sbl_buf_append_i32le(&c, 0);
    sbl_buf_append_i32le(&c, SBL_OP_COMPRESSED);
    sbl_buf_append_i32le(&c, SBL_OP_MSG);
    sbl_buf_append_i32le(&c, (int32_t)(b.len - 16));
    sbl_buf_append_byte(&c, SBL_COMP_NOOP);
    sbl_buf_append(&c, b.data + 16, b.len - 16);
    sbl_buf_put_i32le(&c, 0, (int32_t)c.len);
    c.data[24] = SBL_COMP_NOOP;
    CHECK(sbl_client_write(fd, c.data, c.len));
    n = recv_msg(fd, &m);
    CHECK(n > 0 && rd32(m + 8) == 600 && rd32(m + 12) == SBL_OP_MSG);
    free(m);
    sbl_buf_destroy(&c);

    /* A large message (about 6 MB) both ways: buffer growth and partial writes. */
    bson_t *big = bson_new();
    BSON_APPEND_INT32(big, "ping", 700);
    BSON_APPEND_UTF8(big, "$db", "test");
    char *blob = malloc(6 * 1024 * 1024 + 1);
    memset(blob, 'x', 6 * 1024 * 1024);
    blob[6 * 1024 * 1024] = '\0';
    BSON_APPEND_UTF8(big, "blob", blob);
    free(blob);
    sbl_buf_reset(&b);
    build_msg(&b, 700, 0, big);
    CHECK(sbl_client_write(fd, b.data, b.len));
    n = recv_msg(fd, &m);
    CHECK(n > 6 * 1024 * 1024 && rd32(m + 8) == 700);
    free(m);
    bson_destroy(big);

    close(fd);
    bson_destroy(q);
    bson_destroy(body);
    sbl_buf_destroy(&b);
}

/* Many requests in one send, some answered from other threads: order kept. */
static void test_pipeline(int port)
{
    int fd = connect_to(port);
    sbl_buf_t b;
    sbl_buf_init(&b);
    const int N = 50;
    for (int i = 0; i < N; i++) {
        bson_t *body = BCON_NEW("ping", BCON_INT32(1000 + i), "$db", BCON_UTF8("test"));
        if (i % 3 == 0)
            BSON_APPEND_INT32(body, "async", (i % 2) * 5);
        build_msg(&b, 1000 + i, 0, body);
        bson_destroy(body);
    }
    CHECK(sbl_client_write(fd, b.data, b.len));
    int in_order = 0;
    for (int i = 0; i < N; i++) {
        uint8_t *m;
        size_t n = recv_msg(fd, &m);
        if (n > 0 && rd32(m + 8) == 1000 + i)
            in_order++;
        free(m);
    }
    CHECK_MSG(in_order == N, "%d of %d in order", in_order, N);
    /* Byte-at-a-time framing works too. */
    sbl_buf_reset(&b);
    bson_t *body = BCON_NEW("ping", BCON_INT32(2000), "$db", BCON_UTF8("test"));
    build_msg(&b, 2000, 0, body);
    for (size_t i = 0; i < b.len; i++)
        sbl_client_write(fd, b.data + i, 1);
    uint8_t *m;
    CHECK(recv_msg(fd, &m) > 0 && rd32(m + 8) == 2000);
    free(m);
    bson_destroy(body);
    sbl_buf_destroy(&b);
    close(fd);
}

/* Garbage closes only its own connection. */
static void test_bad_clients(int port)
{
    int good = connect_to(port);
    CHECK(roundtrip(good, 1, -1));

    uint8_t small[16] = {5, 0, 0, 0};
    int bad = connect_to(port);
    CHECK(sbl_client_write(bad, small, sizeof(small)));
    CHECK(peer_closed(bad));
    close(bad);

    uint8_t huge[4];
    int32_t v = SBL_MAX_MESSAGE_SIZE + 1;
    memcpy(huge, &v, 4);
    bad = connect_to(port);
    CHECK(sbl_client_write(bad, huge, 4));
    CHECK(peer_closed(bad));
    close(bad);

    /* Valid framing, unparseable content (legacy OP_INSERT). */
    uint8_t legacy[20] = {20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xd2, 0x07, 0, 0};
    bad = connect_to(port);
    CHECK(sbl_client_write(bad, legacy, sizeof(legacy)));
    CHECK(peer_closed(bad));
    close(bad);

    /* A garbage message behind a pending async request: that reply still comes, then close. */
    bad = connect_to(port);
    sbl_buf_t b;
    sbl_buf_init(&b);
    bson_t *body = BCON_NEW("ping", BCON_INT32(7), "$db", BCON_UTF8("t"), "async", BCON_INT32(30));
    build_msg(&b, 7, 0, body);
    sbl_buf_append(&b, legacy, sizeof(legacy));
    CHECK(sbl_client_write(bad, b.data, b.len));
    uint8_t *m;
    CHECK(recv_msg(bad, &m) > 0 && rd32(m + 8) == 7);
    free(m);
    CHECK(peer_closed(bad));
    close(bad);

    /* A client that leaves while its request is out: the late reply is dropped safely. */
    bad = connect_to(port);
    sbl_buf_reset(&b);
    bson_destroy(body);
    body = BCON_NEW("ping", BCON_INT32(8), "$db", BCON_UTF8("t"), "async", BCON_INT32(100));
    build_msg(&b, 8, 0, body);
    CHECK(sbl_client_write(bad, b.data, b.len));
    close(bad);
    sleep_ms(200);

    /* A client that sends but never reads (about 40 MB of replies): the
     * others keep being served and closing it frees everything. */
    bad = connect_to(port);
    bson_t *pad = bson_new();
    BSON_APPEND_INT32(pad, "ping", 9);
    BSON_APPEND_UTF8(pad, "$db", "t");
    char *blob = malloc(200 * 1024 + 1);
    memset(blob, 'p', 200 * 1024);
    blob[200 * 1024] = '\0';
    BSON_APPEND_UTF8(pad, "blob", blob);
    free(blob);
    sbl_buf_reset(&b);
    build_msg(&b, 9, 0, pad);
    struct timeval stv = {0, 200000};
    setsockopt(bad, SOL_SOCKET, SO_SNDTIMEO, &stv, sizeof(stv));
    int sent = 0;
    for (int i = 0; i < 200 && sbl_client_write(bad, b.data, b.len); i++)
        sent++;
    CHECK(sent > 0);
    CHECK(roundtrip(good, 4, -1));
    close(bad);
    bson_destroy(pad);

    CHECK(roundtrip(good, 2, -1));
    CHECK(roundtrip(good, 3, 1));
    close(good);
    bson_destroy(body);
    sbl_buf_destroy(&b);
}

static void test_max_conns(void)
{
    int port = start_server(3, 2);
    CHECK(port > 0);
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = connect_to(port);
        CHECK(roundtrip(fds[i], 10 + i, -1));
    }
    int extra = connect_to(port);
    CHECK(extra >= 0 && peer_closed(extra));
    close(extra);
    sbl_net_stats_t st;
    sbl_net_get_stats(&st);
    CHECK(st.current == 3 && st.available == 0);
    close(fds[0]);
    /* The freed slot becomes available once the server has seen the close. */
    bool ok = false;
    for (int tries = 0; tries < 100 && !ok; tries++) {
        sbl_net_get_stats(&st);
        if (st.current == 2) {
            int fd = connect_to(port);
            ok = roundtrip(fd, 20, -1);
            close(fd);
        } else {
            sleep_ms(10);
        }
    }
    CHECK(ok);
    CHECK(roundtrip(fds[1], 30, -1));

    /* Stop with a request outstanding on another thread: stop waits, nothing leaks. */
    sbl_buf_t b;
    sbl_buf_init(&b);
    bson_t *body = BCON_NEW("ping", BCON_INT32(9), "$db", BCON_UTF8("t"), "async", BCON_INT32(150));
    build_msg(&b, 9, 0, body);
    CHECK(sbl_client_write(fds[2], b.data, b.len));
    sleep_ms(30);
    sbl_net_stop();
    CHECK(peer_closed(fds[1]));
    close(fds[1]);
    close(fds[2]);
    bson_destroy(body);
    sbl_buf_destroy(&b);
}

static void test_addr_in_use(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    bind(s, (struct sockaddr *)&a, sizeof(a));
    listen(s, 4);
    getsockname(s, (struct sockaddr *)&a, &al);
    const char *ips[] = {"127.0.0.1"};
    sbl_net_config_t cfg = {.bind_ips = ips, .nbind = 1, .port = ntohs(a.sin_port), .nloops = 1};
    sbl_err_t err;
    sbl_err_clear(&err);
    CHECK(sbl_net_start(&cfg, on_request, NULL, NULL, &err) != 0);
    CHECK_MSG(strstr(err.msg, "Address already in use") != NULL, "%s", err.msg);
    const char *bad[] = {"not an address!"};
    cfg.bind_ips = bad;
    CHECK(sbl_net_start(&cfg, on_request, NULL, NULL, &err) != 0);
    close(s);
    sbl_net_stop(); /* not running: a no-op */
}

/* A port free on both ::1 and 127.0.0.1 (0: no ::1 here).  The kernel
 * picks it for ::1; it must be free on 127.0.0.1 too, or the server's IPv4
 * listener shares it with whatever holds it there. */
static int free_dual_port(void)
{
    for (int tries = 0; tries < 20; tries++) {
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
        socklen_t al = sizeof(a6);
        int s6 = socket(AF_INET6, SOCK_STREAM, 0);
        if (s6 < 0 || bind(s6, (struct sockaddr *)&a6, sizeof(a6)) != 0) {
            if (s6 >= 0)
                close(s6);
            return 0;
        }
        getsockname(s6, (struct sockaddr *)&a6, &al);
        int port = ntohs(a6.sin6_port);
        struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int s4 = socket(AF_INET, SOCK_STREAM, 0);
        bool both = s4 >= 0 && bind(s4, (struct sockaddr *)&a4, sizeof(a4)) == 0;
        if (s4 >= 0)
            close(s4);
        close(s6);
        if (both)
            return port;
    }
    return 0;
}

/* Listening on IPv4 and IPv6 at once, when the host has ::1. */
static void test_ipv6(void)
{
    int port = free_dual_port();
    if (port == 0) {
        printf("test_net: no ::1 here (or no port free on both), IPv6 test skipped\n");
        return;
    }
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    const char *ips[] = {"127.0.0.1", "::1"};
    sbl_net_config_t cfg = {.bind_ips = ips, .nbind = 2, .port = port, .nloops = 1};
    sbl_err_t err;
    if (sbl_net_start(&cfg, on_request, on_open, on_close, &err) != 0) {
        printf("test_net: IPv6 start failed (%s), test skipped\n", err.msg);
        return;
    }
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    a6.sin6_port = htons((uint16_t)port);
    CHECK(connect(fd, (struct sockaddr *)&a6, sizeof(a6)) == 0);
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    CHECK(roundtrip(fd, 1, -1));
    CHECK_MSG(strncmp(last_remote, "[::1]:", 6) == 0, "%s", last_remote);
    CHECK(last_loopback);
    int fd4 = connect_to(port);
    CHECK_MSG(fd4 >= 0, "connect to 127.0.0.1:%d: %s", port, strerror(errno));
    CHECK(roundtrip(fd4, 2, -1));
    CHECK(strncmp(last_remote, "127.0.0.1:", 10) == 0 && last_loopback);
    close(fd);
    close(fd4);
    sbl_net_stop();
}

int main(void)
{
    sbl_log_open("/dev/null");
    int port = start_server(0, 2);
    CHECK(port > 0);
    sbl_err_t err;
    const char *ips[] = {"127.0.0.1"};
    sbl_net_config_t cfg = {.bind_ips = ips, .nbind = 1, .port = port};
    CHECK(sbl_net_start(&cfg, on_request, NULL, NULL, &err) != 0); /* already running */
    test_basic(port);
    test_pipeline(port);
    test_bad_clients(port);
    sbl_net_stats_t st;
    sbl_net_get_stats(&st);
    CHECK(st.num_requests > 60 && st.bytes_in > 6000000 && st.bytes_out > 6000000);
    CHECK(st.total_created >= 7);
    sbl_net_stop();
    sbl_net_get_stats(&st);
    CHECK(st.current == 0);

    test_max_conns();
    test_addr_in_use();
    test_ipv6();
    CHECK(atomic_load(&opens) == atomic_load(&closes));
    CHECK(atomic_load(&data_freed) == atomic_load(&opens));
    sbl_log_close();
    return CHECK_DONE("test_net");
}
