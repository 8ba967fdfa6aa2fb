/*
 * http.c: the --metricsPort endpoint.  A minimal HTTP/1.1 server (one
 * request per connection) on its own libuv loop and thread: read the request
 * head (at most 8 KiB), answer, and close the connection.
 *
 *   GET /metrics      the Prometheus text exposition format (0.0.4)
 *   GET /             the monitoring page (page/, embedded at build time)
 *   GET /api/series   the page's one-hour series as JSON (series.c)
 *   GET /api/latest   the newest sample's totals as JSON
 *
 * With --auth on and the port bound to an address that is not loopback,
 * every request needs HTTP basic auth of a user sources.authorize accepts
 * (clusterMonitor); with TLS configured the port speaks HTTPS only
 * (OpenSSL over memory BIOs, so libuv still does all the I/O).
 *
 * What must stay true: the endpoint never touches a network loop of the
 * server; it only reads counters (atomics, sharded tables) and the sources
 * the server handed in.  A connection is freed only in its close callback.
 */
#include "metrics/metrics_int.h"
#include "common/log.h"
#include "storage/storage.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

#define HEAD_MAX 8192
#define RAW_MAX 16384

typedef struct http_conn {
    uv_tcp_t tcp;
    char head[HEAD_MAX];
    size_t len;
    bool answered, head_only;
    char raw[RAW_MAX]; /* what the socket gave, before TLS */
    SSL *ssl;          /* NULL: plain HTTP */
    uv_write_t wr;
    char *out;
} http_conn_t;

/* A write that does not end the connection (TLS handshake records). */
typedef struct tls_write {
    uv_write_t req;
    char data[];
} tls_write_t;

static struct {
    uv_loop_t loop;
    uv_tcp_t server;
    uv_async_t stop;
    uv_thread_t thread;
    bool running;
    bool need_auth;
    SSL_CTX *tls;
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

    if (src != NULL && src->transactions != NULL) {
        int64_t st, co, ab, op;
        src->transactions(&st, &co, &ab, &op);
        head(o, "sable_transactions_total", "counter",
             "Multi-document transactions started, committed, aborted "
             "(serverStatus.transactions).");
        bson_string_append_printf(o, "sable_transactions_total{state=\"started\"} %lld\n",
                                  (long long)st);
        bson_string_append_printf(o, "sable_transactions_total{state=\"committed\"} %lld\n",
                                  (long long)co);
        bson_string_append_printf(o, "sable_transactions_total{state=\"aborted\"} %lld\n",
                                  (long long)ab);
        head(o, "sable_transactions_open", "gauge", "Multi-document transactions open now.");
        bson_string_append_printf(o, "sable_transactions_open %lld\n", (long long)op);
    }

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

    sbl_metrics_member_t mem[SBL_METRICS_MAX_MEMBERS];
    size_t nm = src != NULL && src->repl_members != NULL
                    ? src->repl_members(mem, SBL_METRICS_MAX_MEMBERS) : 0;
    if (nm > 0) {
        head(o, "sable_repl_member_state", "gauge",
             "Replica set members' states as this member sees them (1 PRIMARY, 2 SECONDARY, "
             "8 DOWN ...; replSetGetStatus).");
        for (size_t i = 0; i < nm; i++)
            bson_string_append_printf(o, "sable_repl_member_state{member=\"%s\"} %d\n",
                                      mem[i].name, mem[i].state);
        head(o, "sable_repl_lag_seconds", "gauge",
             "How far each member's applied optime is behind the newest one this member knows.");
        for (size_t i = 0; i < nm; i++)
            if (mem[i].lag_ms >= 0)
                bson_string_append_printf(o, "sable_repl_lag_seconds{member=\"%s\"} %.3f\n",
                                          mem[i].name, mem[i].lag_ms / 1000.0);
    }

    sbl_metrics_shard_t *sh = NULL;
    size_t ns = 0;
    if (src != NULL && src->shards != NULL &&
        (sh = calloc(SBL_METRICS_MAX_SHARDS, sizeof(*sh))) != NULL)
        ns = src->shards(sh, SBL_METRICS_MAX_SHARDS);
    if (ns > 0) {
        head(o, "sable_shard_member_state", "gauge",
             "Shard members' states as the router's poller last saw them (1 PRIMARY, "
             "2 SECONDARY, 8 DOWN ...; the shard's replSetGetStatus).");
        for (size_t i = 0; i < ns; i++)
            for (size_t k = 0; k < sh[i].nmembers && k < SBL_METRICS_MAX_SHARD_MEMBERS; k++)
                bson_string_append_printf(o, "sable_shard_member_state{shard=\"%s\",member=\"%s\"} %d\n",
                                          sh[i].name, sh[i].members[k].name, sh[i].members[k].state);
        head(o, "sable_shard_repl_lag_seconds", "gauge",
             "How far each shard member's applied optime is behind its shard's newest one.");
        for (size_t i = 0; i < ns; i++)
            for (size_t k = 0; k < sh[i].nmembers && k < SBL_METRICS_MAX_SHARD_MEMBERS; k++)
                if (sh[i].members[k].lag_ms >= 0)
                    bson_string_append_printf(o, "sable_shard_repl_lag_seconds{shard=\"%s\",member=\"%s\"} %.3f\n",
                                              sh[i].name, sh[i].members[k].name,
                                              sh[i].members[k].lag_ms / 1000.0);
        head(o, "sable_shard_requests_total", "counter", "Commands the router sent to each shard.");
        for (size_t i = 0; i < ns; i++)
            bson_string_append_printf(o, "sable_shard_requests_total{shard=\"%s\"} %lld\n", sh[i].name,
                                      (long long)sh[i].requests);
        head(o, "sable_shard_request_seconds_total", "counter",
             "Time the router waited for each shard's replies.");
        for (size_t i = 0; i < ns; i++)
            bson_string_append_printf(o, "sable_shard_request_seconds_total{shard=\"%s\"} %.6f\n",
                                      sh[i].name, sh[i].latency_us / 1e6);
    }
    free(sh);

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
    if (c->ssl != NULL)
        SSL_free(c->ssl);
    free(c->out);
    free(c);
}

static void close_conn(http_conn_t *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, close_cb);
}

static void write_cb(uv_write_t *w, int status)
{
    close_conn(w->data);
}

static void tls_write_cb(uv_write_t *w, int status)
{
    free(w->data);
}

/* Send what OpenSSL has queued for the peer.  last: this is the response's
 * end, close once it is written. */
static void tls_flush(http_conn_t *c, bool last)
{
    BIO *wb = SSL_get_wbio(c->ssl);
    size_t n = (size_t)BIO_ctrl_pending(wb);
    if (last) {
        free(c->out);
        c->out = malloc(n > 0 ? n : 1);
        int got = c->out != NULL && n > 0 ? BIO_read(wb, c->out, (int)n) : 0;
        uv_buf_t buf = uv_buf_init(c->out, got > 0 ? (unsigned)got : 0);
        c->wr.data = c;
        if (c->out == NULL || uv_write(&c->wr, (uv_stream_t *)&c->tcp, &buf, 1, write_cb) != 0)
            close_conn(c);
        return;
    }
    if (n == 0)
        return;
    tls_write_t *w = malloc(sizeof(*w) + n);
    if (w == NULL) {
        close_conn(c);
        return;
    }
    int got = BIO_read(wb, w->data, (int)n);
    uv_buf_t buf = uv_buf_init(w->data, got > 0 ? (unsigned)got : 0);
    w->req.data = w;
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, tls_write_cb) != 0) {
        free(w);
        close_conn(c);
    }
}

/* Send data (c->out or a part of it) and close once written. */
static void http_send(http_conn_t *c, const char *data, size_t len)
{
    if (c->ssl != NULL) {
        size_t done = 0;
        while (done < len) {
            int n = SSL_write(c->ssl, data + done, (int)(len - done > 1 << 20 ? 1 << 20 : len - done));
            if (n <= 0) {
                close_conn(c);
                return;
            }
            done += (size_t)n;
        }
        tls_flush(c, true);
        return;
    }
    uv_buf_t buf = uv_buf_init((char *)data, (unsigned)len);
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &buf, 1, write_cb) != 0)
        close_conn(c);
}

/* Send status, headers and body (len bytes; not sent for HEAD) and close. */
static void respond_n(http_conn_t *c, const char *status, const char *ctype, const char *extra,
                      const void *body, size_t blen)
{
    bson_string_t *s = bson_string_new(NULL);
    bson_string_append_printf(s, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                              "Cache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n"
                              "%sConnection: close\r\n\r\n", status, ctype, blen,
                              extra != NULL ? extra : "");
    size_t hlen = s->len;
    c->answered = true;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->out = bson_string_free(s, false);
    if (!c->head_only && blen > 0) {
        c->out = bson_realloc(c->out, hlen + blen);
        memcpy(c->out + hlen, body, blen);
        hlen += blen;
    }
    http_send(c, c->out, hlen);
}

static void respond(http_conn_t *c, const char *status, const char *ctype, const char *body)
{
    respond_n(c, status, ctype, NULL, body, strlen(body));
}

static bool is_loopback(const char *ip)
{
    return strncmp(ip, "127.", 4) == 0 || strcmp(ip, "::1") == 0 || strcmp(ip, "localhost") == 0;
}

/* The value of header name in the request head, copied into out; false when absent. */
static bool header_value(const char *head, const char *name, char *out, size_t cap)
{
    size_t nlen = strlen(name);
    for (const char *l = strchr(head, '\n'); l != NULL; l = strchr(l, '\n')) {
        l++;
        if (strncasecmp(l, name, nlen) != 0 || l[nlen] != ':')
            continue;
        const char *v = l + nlen + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t n = strcspn(v, "\r\n");
        if (n >= cap)
            return false;
        memcpy(out, v, n);
        out[n] = '\0';
        return true;
    }
    return false;
}

/* Whether the request may read: always when no login is asked for, else
 * when it carries HTTP basic credentials of a user sources.authorize accepts. */
static bool authorized(http_conn_t *c)
{
    char value[1024];
    unsigned char dec[800];
    if (!H.need_auth)
        return true;
    if (H.src.authorize == NULL || !header_value(c->head, "Authorization", value, sizeof(value)) ||
        strncasecmp(value, "Basic ", 6) != 0)
        return false;
    const char *b64 = value + 6;
    size_t n = strlen(b64);
    if (n == 0 || n % 4 != 0 || n / 4 * 3 >= sizeof(dec))
        return false;
    int len = EVP_DecodeBlock(dec, (const unsigned char *)b64, (int)n);
    if (len < 0)
        return false;
    len -= (b64[n - 1] == '=') + (n > 1 && b64[n - 2] == '=');
    dec[len] = '\0';
    char *colon = strchr((char *)dec, ':');
    if (colon == NULL || memchr(dec, '\0', (size_t)len) != NULL)
        return false;
    *colon = '\0';
    bool ok = H.src.authorize((const char *)dec, colon + 1);
    OPENSSL_cleanse(dec, sizeof(dec));
    return ok;
}

static void answer(http_conn_t *c)
{
    char method[16] = "", path[256] = "";
    if (sscanf(c->head, "%15s %255s", method, path) != 2) {
        respond(c, "400 Bad Request", "text/plain", "bad request\n");
        return;
    }
    c->head_only = strcmp(method, "HEAD") == 0;
    if (strcmp(method, "GET") != 0 && !c->head_only) {
        respond(c, "405 Method Not Allowed", "text/plain", "method not allowed\n");
        return;
    }
    if (!authorized(c)) {
        static const char msg[] = "a user with the clusterMonitor role is needed\n";
        respond_n(c, "401 Unauthorized", "text/plain",
                  "WWW-Authenticate: Basic realm=\"sable monitoring\", charset=\"UTF-8\"\r\n",
                  msg, sizeof(msg) - 1);
        return;
    }
    char *q = strchr(path, '?');
    if (q != NULL)
        *q++ = '\0';
    bson_string_t *s = NULL;
    const char *ctype = "application/json";
    if (strcmp(path, "/metrics") == 0) {
        s = bson_string_new(NULL);
        sbl_metrics_render_prometheus(s, &H.src);
        ctype = "text/plain; version=0.0.4; charset=utf-8";
    } else if (strcmp(path, "/api/series") == 0) {
        unsigned long long since = 0;
        const char *p = q != NULL ? strstr(q, "since=") : NULL;
        if (p != NULL)
            since = strtoull(p + 6, NULL, 10);
        s = bson_string_new(NULL);
        sbl_series_render_json(s, since);
    } else if (strcmp(path, "/api/latest") == 0) {
        s = bson_string_new(NULL);
        sbl_series_render_latest(s);
    } else {
        const sbl_page_asset_t *a = sbl_page_asset(strcmp(path, "/index.html") == 0 ? "/" : path);
        if (a == NULL)
            respond(c, "404 Not Found", "text/plain", "not found; try / or /metrics\n");
        else
            respond_n(c, "200 OK", a->ctype, NULL, a->data, a->len);
        return;
    }
    respond_n(c, "200 OK", ctype, NULL, s->str, s->len);
    bson_string_free(s, true);
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    http_conn_t *c = h->data;
    *buf = uv_buf_init(c->raw, sizeof(c->raw));
}

static void take(http_conn_t *c, const char *p, size_t n)
{
    size_t room = HEAD_MAX - 1 - c->len;
    if (n > room)
        n = room;
    memcpy(c->head + c->len, p, n);
    c->len += n;
    c->head[c->len] = '\0';
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    http_conn_t *c = s->data;
    if (c->answered)
        return;
    if (n < 0) {
        close_conn(c);
        return;
    }
    if (c->ssl == NULL) {
        take(c, buf->base, (size_t)n);
    } else {
        BIO_write(SSL_get_rbio(c->ssl), buf->base, (int)n);
        char plain[4096];
        int got;
        while ((got = SSL_read(c->ssl, plain, sizeof(plain))) > 0)
            take(c, plain, (size_t)got);
        int e = SSL_get_error(c->ssl, got);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
            ERR_clear_error();
            close_conn(c); /* a failed handshake, or the peer closed */
            return;
        }
        tls_flush(c, false); /* handshake records */
    }
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
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        close_conn(c);
        return;
    }
    if (H.tls != NULL) {
        BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
        c->ssl = SSL_new(H.tls);
        if (c->ssl == NULL || rb == NULL || wb == NULL) {
            BIO_free(rb);
            BIO_free(wb);
            close_conn(c);
            return;
        }
        SSL_set_bio(c->ssl, rb, wb);
        SSL_set_accept_state(c->ssl);
    }
    if (uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) != 0)
        close_conn(c);
}

static void close_any(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h))
        uv_close(h, h->data != NULL ? close_cb : NULL); /* only connections carry data */
}

static void stop_cb(uv_async_t *a)
{
    sbl_series_stop();
    uv_walk(&H.loop, close_any, NULL);
}

static void loop_main(void *arg)
{
    sbl_thread_name("metrics");
    uv_run(&H.loop, UV_RUN_DEFAULT);
    sbl_session_release_thread();
}

static int pem_password(char *buf, int size, int rwflag, void *u)
{
    const char *pw = u;
    if (pw == NULL)
        return 0;
    snprintf(buf, (size_t)size, "%s", pw);
    return (int)strlen(buf);
}

static int tls_setup(const sbl_metrics_http_config_t *cfg, sbl_err_t *err)
{
    H.tls = SSL_CTX_new(TLS_server_method());
    if (H.tls == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "metrics endpoint: cannot create a TLS context");
    SSL_CTX_set_min_proto_version(H.tls, TLS1_2_VERSION);
    SSL_CTX_set_default_passwd_cb(H.tls, pem_password);
    SSL_CTX_set_default_passwd_cb_userdata(H.tls, (void *)cfg->tls_cert_key_password);
    if (SSL_CTX_use_certificate_chain_file(H.tls, cfg->tls_cert_key_file) != 1 ||
        SSL_CTX_use_PrivateKey_file(H.tls, cfg->tls_cert_key_file, SSL_FILETYPE_PEM) != 1) {
        ERR_clear_error();
        SSL_CTX_free(H.tls);
        H.tls = NULL;
        return sbl_err_set(err, SBL_E_BadValue,
                           "metrics endpoint: cannot read the certificate and key in %s",
                           cfg->tls_cert_key_file);
    }
    return 0;
}

/* Undo a start that failed after the loop was set up. */
static void unwind(void)
{
    sbl_series_stop();
    uv_walk(&H.loop, close_any, NULL);
    uv_run(&H.loop, UV_RUN_DEFAULT);
    uv_loop_close(&H.loop);
    if (H.tls != NULL)
        SSL_CTX_free(H.tls);
    H.tls = NULL;
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
    H.need_auth = cfg->auth && !is_loopback(ip);
    if (uv_ip4_addr(ip, cfg->port, (struct sockaddr_in *)&addr) != 0 &&
        uv_ip6_addr(ip, cfg->port, (struct sockaddr_in6 *)&addr) != 0)
        return sbl_err_set(err, SBL_E_BadValue, "metricsBindIp: not an IP address: %s", ip);
    if (cfg->tls_cert_key_file != NULL && cfg->tls_cert_key_file[0] != '\0')
        SBL_RET(tls_setup(cfg, err));
    uv_loop_init(&H.loop);
    uv_tcp_init(&H.loop, &H.server);
    uv_async_init(&H.loop, &H.stop, stop_cb);
    if ((rc = uv_tcp_bind(&H.server, (const struct sockaddr *)&addr, 0)) != 0 ||
        (rc = uv_listen((uv_stream_t *)&H.server, 64, on_connection)) != 0) {
        unwind();
        return sbl_err_set(err, SBL_E_InternalError, "metrics endpoint: cannot listen on %s:%d: %s",
                           ip, cfg->port, uv_strerror(rc));
    }
    if (sbl_series_start(&H.loop, &H.src) != 0) {
        unwind();
        return sbl_err_set(err, SBL_E_InternalError, "metrics endpoint: out of memory for the series");
    }
    if (uv_thread_create(&H.thread, loop_main, NULL) != 0) {
        unwind();
        return sbl_err_set(err, SBL_E_InternalError, "cannot start the metrics thread");
    }
    H.running = true;
    bson_t a = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&a, "address", ip);
    BSON_APPEND_INT32(&a, "port", cfg->port);
    BSON_APPEND_BOOL(&a, "tls", H.tls != NULL);
    BSON_APPEND_BOOL(&a, "login", H.need_auth);
    sbl_log(SBL_LOG_INFO, "NETWORK", 23016,
            "Serving Prometheus metrics on /metrics and the monitoring page on /", &a);
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
    if (H.tls != NULL)
        SSL_CTX_free(H.tls);
    H.tls = NULL;
    H.running = false;
}
