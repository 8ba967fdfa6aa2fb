/*
 * http.c: the --metricsPort endpoint.  A minimal HTTP/1.0-style server on
 * its own libuv loop and thread: read the request head (at most 8 KiB),
 * answer GET /metrics with the Prometheus text exposition format (0.0.4),
 * anything else with 404/405, and close the connection.
 *
 * What must stay true: the endpoint never touches a network loop of the
 * server; it only reads counters (atomics, sharded tables) and the sources
 * the server handed in.  A connection is freed only in its close callback.
 */
#include "metrics/metrics.h"
#include "common/log.h"
#include "storage/storage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define HEAD_MAX 8192

typedef struct http_conn {
    uv_tcp_t tcp;
    char head[HEAD_MAX];
    size_t len;
    bool answered;
    uv_write_t wr;
    char *out;
} http_conn_t;

static struct {
    uv_loop_t loop;
    uv_tcp_t server;
    uv_async_t stop;
    uv_thread_t thread;
    bool running;
    sbl_metrics_sources_t src;
} H;

/* ---- the exposition ------------------------------------------------------- */

static const char *const opc_names[SBL_OPC_COUNT] = {"insert", "query", "update",
                                                     "delete", "getmore", "command"};
static const char *const lat_names[SBL_LAT_COUNT] = {"reads", "writes", "commands",
                                                     "transactions"};
static const char *const doc_names[SBL_DOC_COUNT] = {"returned", "inserted", "updated",
                                                     "deleted"};

static void head(bson_string_t *o, const char *name, const char *type, const char *help)
{
    bson_string_append_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void sbl_metrics_render_prometheus(bson_string_t *o, const sbl_metrics_sources_t *src)
{
    sbl_opcounters_t oc;
    sbl_metrics_get_opcounters(&oc);
    int64_t opv[SBL_OPC_COUNT] = {oc.insert, oc.query, oc.update, oc.del, oc.getmore, oc.command};
    head(o, "sable_opcounters_total", "counter", "Operations received, by type (serverStatus.opcounters).");
    for (int i = 0; i < SBL_OPC_COUNT; i++)
        bson_string_append_printf(o, "sable_opcounters_total{type=\"%s\"} %lld\n", opc_names[i],
                                  (long long)opv[i]);

    head(o, "sable_op_latency_seconds", "histogram",
         "Time to execute operations, by class (serverStatus.opLatencies).");
    for (int c = 0; c < SBL_LAT_COUNT; c++) {
        sbl_latency_t l;
        int64_t cum = 0;
        sbl_metrics_get_latency((sbl_lat_class_t)c, &l);
        for (int b = 0; b < SBL_LAT_NBOUNDS; b++) {
            cum += l.buckets[b];
            bson_string_append_printf(o, "sable_op_latency_seconds_bucket{type=\"%s\",le=\"%g\"} %lld\n",
                                      lat_names[c], sbl_lat_bounds_us[b] / 1e6, (long long)cum);
        }
        cum += l.buckets[SBL_LAT_NBOUNDS];
        bson_string_append_printf(o, "sable_op_latency_seconds_bucket{type=\"%s\",le=\"+Inf\"} %lld\n",
                                  lat_names[c], (long long)cum);
        bson_string_append_printf(o, "sable_op_latency_seconds_sum{type=\"%s\"} %.6f\n", lat_names[c],
                                  l.latency_us / 1e6);
        bson_string_append_printf(o, "sable_op_latency_seconds_count{type=\"%s\"} %lld\n",
                                  lat_names[c], (long long)l.ops);
    }

    head(o, "sable_documents_total", "counter", "Documents returned, inserted, updated, deleted.");
    for (int i = 0; i < SBL_DOC_COUNT; i++)
        bson_string_append_printf(o, "sable_documents_total{state=\"%s\"} %lld\n", doc_names[i],
                                  (long long)sbl_metrics_get_docs((sbl_doc_kind_t)i));

    if (src != NULL && src->command_name != NULL) {
        head(o, "sable_commands_total", "counter", "Commands run, by name.");
        for (size_t r = 0; r < SBL_METRICS_MAX_COMMANDS && src->command_name(r) != NULL; r++) {
            int64_t t, f;
            sbl_metrics_get_command(r, &t, &f);
            if (t > 0)
                bson_string_append_printf(o, "sable_commands_total{command=\"%s\"} %lld\n",
                                          src->command_name(r), (long long)t);
        }
        head(o, "sable_commands_failed_total", "counter", "Commands that failed, by name.");
        for (size_t r = 0; r < SBL_METRICS_MAX_COMMANDS && src->command_name(r) != NULL; r++) {
            int64_t t, f;
            sbl_metrics_get_command(r, &t, &f);
            if (f > 0)
                bson_string_append_printf(o, "sable_commands_failed_total{command=\"%s\"} %lld\n",
                                          src->command_name(r), (long long)f);
        }
    }

    head(o, "sable_active_operations", "gauge", "Operations running now.");
    bson_string_append_printf(o, "sable_active_operations %lld\n", (long long)sbl_ops_active());

    if (src != NULL && src->connections != NULL) {
        int64_t cur = 0, created = 0, avail = 0;
        src->connections(&cur, &created, &avail);
        head(o, "sable_connections", "gauge", "Open client connections.");
        bson_string_append_printf(o, "sable_connections %lld\n", (long long)cur);
        head(o, "sable_connections_available", "gauge", "Connections still accepted.");
        bson_string_append_printf(o, "sable_connections_available %lld\n", (long long)avail);
        head(o, "sable_connections_created_total", "counter", "Connections accepted since start.");
        bson_string_append_printf(o, "sable_connections_created_total %lld\n", (long long)created);
    }
    if (src != NULL && src->network != NULL) {
        int64_t in = 0, out = 0, req = 0;
        src->network(&in, &out, &req);
        head(o, "sable_network_bytes_in_total", "counter", "Bytes received from clients.");
        bson_string_append_printf(o, "sable_network_bytes_in_total %lld\n", (long long)in);
        head(o, "sable_network_bytes_out_total", "counter", "Bytes sent to clients.");
        bson_string_append_printf(o, "sable_network_bytes_out_total %lld\n", (long long)out);
        head(o, "sable_network_requests_total", "counter", "Requests received.");
        bson_string_append_printf(o, "sable_network_requests_total %lld\n", (long long)req);
    }
    if (src != NULL && src->cache != NULL) {
        int64_t used = 0, max = 0, dirty = 0;
        src->cache(&used, &max, &dirty);
        head(o, "sable_wiredtiger_cache_bytes", "gauge", "Bytes currently in the WiredTiger cache.");
        bson_string_append_printf(o, "sable_wiredtiger_cache_bytes %lld\n", (long long)used);
        head(o, "sable_wiredtiger_cache_max_bytes", "gauge", "Configured WiredTiger cache size.");
        bson_string_append_printf(o, "sable_wiredtiger_cache_max_bytes %lld\n", (long long)max);
        head(o, "sable_wiredtiger_cache_dirty_bytes", "gauge", "Dirty bytes in the WiredTiger cache.");
        bson_string_append_printf(o, "sable_wiredtiger_cache_dirty_bytes %lld\n", (long long)dirty);
    }

    double cpu;
    int64_t rss, vsz;
    sbl_metrics_process(&cpu, &rss, &vsz);
    head(o, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
    bson_string_append_printf(o, "process_cpu_seconds_total %.3f\n", cpu);
    head(o, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    bson_string_append_printf(o, "process_resident_memory_bytes %lld\n", (long long)rss);
    head(o, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
    bson_string_append_printf(o, "process_virtual_memory_bytes %lld\n", (long long)vsz);
}

/* ---- the HTTP side ----------------------------------------------------------- */

static void close_cb(uv_handle_t *h)
{
    http_conn_t *c = h->data;
    free(c->out);
    free(c);
}

static void write_cb(uv_write_t *w, int status)
{
    http_conn_t *c = w->data;
    uv_close((uv_handle_t *)&c->tcp, close_cb);
}

static void respond(http_conn_t *c, const char *status, const char *ctype, const char *body)
{
    bson_string_t *s = bson_string_new(NULL);
    size_t blen = strlen(body);
    bson_string_append_printf(s, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                              "Connection: close\r\n\r\n", status, ctype, blen);
    bson_string_append(s, body);
    c->answered = true;
    uv_read_stop((uv_stream_t *)&c->tcp);
    size_t len = s->len;
    c->out = bson_string_free(s, false);
    uv_buf_t buf = uv_buf_init(c->out, (unsigned)len);
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &buf, 1, write_cb) != 0)
        uv_close((uv_handle_t *)&c->tcp, close_cb);
}

static void answer(http_conn_t *c)
{
    char method[16] = "", path[256] = "";
    if (sscanf(c->head, "%15s %255s", method, path) != 2) {
        respond(c, "400 Bad Request", "text/plain", "bad request\n");
        return;
    }
    char *q = strchr(path, '?');
    if (q != NULL)
        *q = '\0';
    if (strcmp(path, "/metrics") != 0) {
        respond(c, "404 Not Found", "text/plain", "not found; try /metrics\n");
        return;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        respond(c, "405 Method Not Allowed", "text/plain", "method not allowed\n");
        return;
    }
    bson_string_t *s = bson_string_new(NULL);
    sbl_metrics_render_prometheus(s, &H.src);
    respond(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", s->str);
    bson_string_free(s, true);
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    http_conn_t *c = h->data;
    size_t room = HEAD_MAX - 1 - c->len;
    *buf = uv_buf_init(c->head + c->len, (unsigned)room);
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    http_conn_t *c = s->data;
    if (c->answered)
        return;
    if (n < 0) {
        uv_close((uv_handle_t *)&c->tcp, close_cb);
        return;
    }
    c->len += (size_t)n;
    c->head[c->len] = '\0';
    if (strstr(c->head, "\r\n\r\n") != NULL || strstr(c->head, "\n\n") != NULL)
        answer(c);
    else if (c->len >= HEAD_MAX - 1)
        respond(c, "431 Request Header Fields Too Large", "text/plain", "too large\n");
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status != 0)
        return;
    http_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    uv_tcp_init(&H.loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) != 0)
        uv_close((uv_handle_t *)&c->tcp, close_cb);
}

static void close_any(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h))
        uv_close(h, h->data != NULL ? close_cb : NULL); /* only connections carry data */
}

static void stop_cb(uv_async_t *a)
{
    uv_walk(&H.loop, close_any, NULL);
}

static void loop_main(void *arg)
{
    sbl_thread_name("metrics");
    uv_run(&H.loop, UV_RUN_DEFAULT);
    sbl_session_release_thread();
}

int sbl_metrics_http_start(const sbl_metrics_http_config_t *cfg, const sbl_metrics_sources_t *src,
                           sbl_err_t *err)
{
    struct sockaddr_storage addr;
    const char *ip = cfg->bind_ip != NULL ? cfg->bind_ip : "127.0.0.1";
    int rc;

    if (cfg->port <= 0)
        return 0;
    if (src != NULL)
        H.src = *src;
    if (uv_ip4_addr(ip, cfg->port, (struct sockaddr_in *)&addr) != 0 &&
        uv_ip6_addr(ip, cfg->port, (struct sockaddr_in6 *)&addr) != 0)
        return sbl_err_set(err, SBL_E_BadValue, "metricsBindIp: not an IP address: %s", ip);
    uv_loop_init(&H.loop);
    uv_tcp_init(&H.loop, &H.server);
    uv_async_init(&H.loop, &H.stop, stop_cb);
    if ((rc = uv_tcp_bind(&H.server, (const struct sockaddr *)&addr, 0)) != 0 ||
        (rc = uv_listen((uv_stream_t *)&H.server, 64, on_connection)) != 0) {
        uv_close((uv_handle_t *)&H.server, NULL);
        uv_close((uv_handle_t *)&H.stop, NULL);
        uv_run(&H.loop, UV_RUN_DEFAULT);
        uv_loop_close(&H.loop);
        return sbl_err_set(err, SBL_E_InternalError, "metrics endpoint: cannot listen on %s:%d: %s",
                           ip, cfg->port, uv_strerror(rc));
    }
    if (uv_thread_create(&H.thread, loop_main, NULL) != 0) {
        uv_close((uv_handle_t *)&H.server, NULL);
        uv_close((uv_handle_t *)&H.stop, NULL);
        uv_run(&H.loop, UV_RUN_DEFAULT);
        uv_loop_close(&H.loop);
        return sbl_err_set(err, SBL_E_InternalError, "cannot start the metrics thread");
    }
    H.running = true;
    bson_t a = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&a, "address", ip);
    BSON_APPEND_INT32(&a, "port", cfg->port);
    sbl_log(SBL_LOG_INFO, "NETWORK", 23016, "Serving Prometheus metrics on /metrics", &a);
    bson_destroy(&a);
    return 0;
}

void sbl_metrics_http_stop(void)
{
    if (!H.running)
        return;
    uv_async_send(&H.stop);
    uv_thread_join(&H.thread);
    uv_loop_close(&H.loop);
    H.running = false;
}
