/*
 * test_metrics_series.c: the --metricsPort endpoint driven by fake sources,
 * as sable-router drives it: series without a source are left out of the
 * JSON and of Prometheus, a router's shards come out per shard (members with
 * their shard, requests per second from the difference of two samples), and
 * a process with a cache source (sabled) still lists the cache series.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "metrics/metrics.h"

static int64_t fake_requests;

static void fake_connections(int64_t *cur, int64_t *created, int64_t *avail)
{
    *cur = 3;
    *created = 7;
    *avail = 100;
}

static size_t fake_shards(sbl_metrics_shard_t *out, size_t cap)
{
    static const char *const names[2] = {"sA", "sB"};
    memset(out, 0, 2 * sizeof(*out));
    for (int i = 0; i < 2 && (size_t)i < cap; i++) {
        snprintf(out[i].name, sizeof(out[i].name), "%s", names[i]);
        out[i].nmembers = 2;
        snprintf(out[i].members[0].name, sizeof(out[i].members[0].name), "h%d:1", i);
        out[i].members[0].state = 1;
        out[i].members[0].lag_ms = 0;
        snprintf(out[i].members[1].name, sizeof(out[i].members[1].name), "h%d:2", i);
        out[i].members[1].state = 8;
        out[i].members[1].lag_ms = -1;
        out[i].requests = i == 0 ? (fake_requests += 500) : 0;
        out[i].latency_us = out[i].requests * 200;
    }
    return 2;
}

static void fake_cache(int64_t *used, int64_t *max, int64_t *dirty)
{
    *used = 50;
    *max = 100;
    *dirty = 5;
}

/* GET path from 127.0.0.1:port; the whole response, malloc'd. */
static char *get(int port, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return strdup("");
    }
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return strdup("");
    }
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)r;
        if (cap - len < 4096)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    close(fd);
    return buf;
}

static int start(const sbl_metrics_sources_t *src)
{
    for (int attempt = 0; attempt < 20; attempt++) {
        sbl_err_t err;
        sbl_err_clear(&err);
        int port = 20000 + (int)((getpid() * 7 + attempt * 131) % 12000);
        sbl_metrics_http_config_t cfg = {.bind_ip = "127.0.0.1", .port = port};
        if (sbl_metrics_http_start(&cfg, src, &err) == 0)
            return port;
    }
    return -1;
}

static void test_router_sources(void)
{
    static const sbl_metrics_sources_t src = {.connections = fake_connections,
                                              .shards = fake_shards};
    int port = start(&src);
    CHECK(port > 0);
    usleep(2300 * 1000); /* the first sample is a base; two rows after it */
    char *j = get(port, "/api/series");
    CHECK_MSG(strstr(j, "\"role\":\"router\"") != NULL, "%.300s", j);
    CHECK(strstr(j, "\"key\":\"ops_query\"") != NULL);
    CHECK(strstr(j, "\"key\":\"connections\"") != NULL);
    CHECK(strstr(j, "cache_fill_pct") == NULL); /* no cache source: no series */
    CHECK(strstr(j, "journal_flushes\":[") == NULL);
    CHECK(strstr(j, "\"audit_events\":[") == NULL);
    CHECK(strstr(j, "{\"name\":\"h0:1\",\"shard\":\"sA\",\"state\":[1,") != NULL);
    CHECK(strstr(j, "{\"name\":\"h1:2\",\"shard\":\"sB\",\"state\":[8,") != NULL);
    /* sA: 500 requests a sample, each 200 us; sB: none */
    const char *sa = strstr(j, "{\"name\":\"sA\",\"requests\":[");
    CHECK_MSG(sa != NULL, "%s", j);
    if (sa != NULL) {
        double rate = strtod(sa + strlen("{\"name\":\"sA\",\"requests\":["), NULL);
        CHECK_MSG(rate > 200 && rate < 1000, "%g", rate);
        CHECK(strstr(sa, "\"latency_ms\":[0.2") != NULL);
    }
    CHECK(strstr(j, "{\"name\":\"sB\",\"requests\":[0,") != NULL);
    CHECK(strstr(j, "\"shards\":{\"sA\":{\"requests\":") != NULL); /* latest */
    free(j);
    char *p = get(port, "/metrics");
    CHECK_MSG(strstr(p, "sable_shard_member_state{shard=\"sA\",member=\"h0:1\"} 1\n") != NULL, "%s", p);
    CHECK(strstr(p, "sable_shard_member_state{shard=\"sB\",member=\"h1:2\"} 8\n") != NULL);
    CHECK(strstr(p, "sable_shard_repl_lag_seconds{shard=\"sA\",member=\"h0:1\"} 0.000\n") != NULL);
    CHECK(strstr(p, "member=\"h1:2\"} -") == NULL); /* unknown lag: no line */
    CHECK(strstr(p, "sable_shard_requests_total{shard=\"sB\"} 0\n") != NULL);
    CHECK(strstr(p, "sable_wiredtiger") == NULL);
    CHECK(strstr(p, "sable_connections 3\n") != NULL);
    free(p);
    sbl_metrics_http_stop();
}

static void test_server_sources(void)
{
    static const sbl_metrics_sources_t src = {.connections = fake_connections,
                                              .cache = fake_cache};
    int port = start(&src);
    CHECK(port > 0);
    usleep(1300 * 1000);
    char *j = get(port, "/api/series");
    CHECK_MSG(strstr(j, "\"role\":\"server\"") != NULL, "%.300s", j);
    CHECK(strstr(j, "\"cache_fill_pct\":[50") != NULL);
    CHECK(strstr(j, "\"shards\":[]") != NULL);
    CHECK(strstr(j, "\"members\":[]") != NULL);
    free(j);
    sbl_metrics_http_stop();
}

int main(void)
{
    test_router_sources();
    test_server_sources();
    return CHECK_DONE("test_metrics_series");
}
