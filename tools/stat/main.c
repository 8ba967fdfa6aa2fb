/*
 * sable-stat: a live view of a Sable (or MongoDB) server, like mongostat and
 * mongotop.  Every interval it runs serverStatus (or top, with --top) and
 * prints one line of rates computed from the difference of two samples:
 * inserts, queries, updates, deletes, getmores and commands per second, mean
 * read and write latency over the interval, CPU %, connections, resident
 * memory and cache use.  --json prints one JSON object per line instead.
 *
 * What must stay true: rates are (counter now - counter before) / seconds
 * between the two samples' localTime, so a slow reply does not skew them.
 */
#include <bson/bson.h>
#include <mongoc/mongoc.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct opts {
    const char *uri;
    double interval_s;
    long count; /* 0: forever */
    bool json;
    bool top;
    bool no_header;
} opts_t;

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    stop = 1;
}

static void usage(FILE *f)
{
    fputs("usage: sable-stat [--uri URI | --host H --port P] [--interval SECS] [-n COUNT]\n"
          "                  [--json] [--top] [--noheaders]\n"
          "  one line per interval: insert query update delete getmore command per second,\n"
          "  mean read/write latency (ms), CPU %, connections, resident MB, cache use.\n"
          "  --top: per-collection read and write time per interval (like mongotop).\n",
          f);
}

static int64_t get_i64(const bson_t *doc, const char *path)
{
    bson_iter_t it, f;
    if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &f) &&
        BSON_ITER_HOLDS_NUMBER(&f))
        return bson_iter_as_int64(&f);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool run_cmd(mongoc_client_t *c, const char *name, bson_t *reply)
{
    bson_t cmd = BSON_INITIALIZER;
    bson_error_t e;
    BSON_APPEND_INT32(&cmd, name, 1);
    bool ok = mongoc_client_command_simple(c, "admin", &cmd, NULL, reply, &e);
    bson_destroy(&cmd);
    if (!ok)
        fprintf(stderr, "sable-stat: %s failed: %s\n", name, e.message);
    return ok;
}

/* Seconds between two serverStatus samples: the server's own clock. */
static double elapsed(const bson_t *a, const bson_t *b, double fallback)
{
    int64_t ua = get_i64(a, "uptimeMillis"), ub = get_i64(b, "uptimeMillis");
    if (ub > ua)
        return (ub - ua) / 1000.0;
    return fallback;
}

static double rate(const bson_t *a, const bson_t *b, const char *path, double secs)
{
    return secs > 0 ? (get_i64(b, path) - get_i64(a, path)) / secs : 0;
}

static double mean_ms(const bson_t *a, const bson_t *b, const char *cls)
{
    char lp[64], op[64];
    snprintf(lp, sizeof(lp), "opLatencies.%s.latency", cls);
    snprintf(op, sizeof(op), "opLatencies.%s.ops", cls);
    int64_t ops = get_i64(b, op) - get_i64(a, op);
    return ops > 0 ? (get_i64(b, lp) - get_i64(a, lp)) / 1000.0 / ops : 0;
}

static double cpu_pct(const bson_t *a, const bson_t *b, double secs)
{
    int64_t ca = get_i64(a, "extra_info.user_time_us") + get_i64(a, "extra_info.system_time_us");
    int64_t cb = get_i64(b, "extra_info.user_time_us") + get_i64(b, "extra_info.system_time_us");
    return secs > 0 ? (cb - ca) / 1e6 / secs * 100.0 : 0;
}

/* A replica set member's role as mongostat's repl column shows it (PRI, SEC,
 * HID for a hidden secondary, STA before it is one), or NULL when standalone. */
static const char *repl_role(const bson_t *ss)
{
    bson_iter_t it, f;
    if (!bson_iter_init_find(&it, ss, "repl") || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return NULL;
    bson_iter_recurse(&it, &f);
    bool pri = false, sec = false, hidden = false;
    while (bson_iter_next(&f)) {
        if (strcmp(bson_iter_key(&f), "isWritablePrimary") == 0)
            pri = bson_iter_as_bool(&f);
        else if (strcmp(bson_iter_key(&f), "secondary") == 0)
            sec = bson_iter_as_bool(&f);
        else if (strcmp(bson_iter_key(&f), "hidden") == 0)
            hidden = bson_iter_as_bool(&f);
    }
    return pri ? "PRI" : sec ? (hidden ? "HID" : "SEC") : "STA";
}

/* Entries applied from the sync source per second (opcountersRepl). */
static double repl_rate(const bson_t *a, const bson_t *b, double secs)
{
    static const char *const keys[] = {"insert", "update", "delete", "command"};
    double r = 0;
    for (int i = 0; i < 4; i++) {
        char p[64];
        snprintf(p, sizeof(p), "opcountersRepl.%s", keys[i]);
        r += rate(a, b, p, secs);
    }
    return r;
}

static void stat_line(const opts_t *o, const bson_t *a, const bson_t *b, double secs, long n)
{
    static const char *const keys[] = {"insert", "query", "update", "delete", "getmore",
                                       "command"};
    double r[6];
    for (int i = 0; i < 6; i++) {
        char p[64];
        snprintf(p, sizeof(p), "opcounters.%s", keys[i]);
        r[i] = rate(a, b, p, secs);
    }
    double rd = mean_ms(a, b, "reads"), wr = mean_ms(a, b, "writes");
    double cpu = cpu_pct(a, b, secs);
    int64_t conn = get_i64(b, "connections.current");
    int64_t res = get_i64(b, "mem.resident");
    int64_t used = get_i64(b, "wiredTiger.cache.bytes currently in the cache");
    int64_t max = get_i64(b, "wiredTiger.cache.maximum bytes configured");
    int64_t dirty = get_i64(b, "wiredTiger.cache.tracked dirty bytes in the cache");
    double used_pct = max > 0 ? 100.0 * used / max : 0, dirty_pct = max > 0 ? 100.0 * dirty / max : 0;
    char tbuf[16];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(tbuf, sizeof(tbuf), "%H:%M:%S", &tm);

    const char *role = repl_role(b);
    double applied = role != NULL ? repl_rate(a, b, secs) : 0;
    if (o->json) {
        if (role != NULL)
            printf("{\"repl\":\"%s\",\"repl_applied\":%.1f,", role, applied);
        printf("%s\"time\":\"%s\",\"insert\":%.1f,\"query\":%.1f,\"update\":%.1f,\"delete\":%.1f,"
               "\"getmore\":%.1f,\"command\":%.1f,\"read_ms\":%.3f,\"write_ms\":%.3f,"
               "\"cpu_pct\":%.1f,\"conn\":%lld,\"res_mb\":%lld,\"cache_used_pct\":%.1f,"
               "\"cache_dirty_pct\":%.1f,\"cache_bytes\":%lld,\"interval_s\":%.3f}\n",
               role != NULL ? "" : "{", tbuf, r[0], r[1], r[2], r[3], r[4], r[5], rd, wr, cpu, (long long)conn,
               (long long)res, used_pct, dirty_pct, (long long)used, secs);
    } else {
        if (!o->no_header && n % 20 == 0)
            printf("  insert   query  update  delete getmore command  read_ms write_ms   cpu%%"
                   "  conn  res_mb cache_mb used%% dirty%%%s     time\n",
                   role != NULL ? " repl applied" : "");
        char rbuf[32] = "";
        if (role != NULL)
            snprintf(rbuf, sizeof(rbuf), " %4s %7.0f", role, applied);
        printf("%8.0f%8.0f%8.0f%8.0f%8.0f%8.0f %8.3f %8.3f %6.1f %5lld %7lld %8.1f %5.1f %6.1f%s %s\n",
               r[0], r[1], r[2], r[3], r[4], r[5], rd, wr, cpu, (long long)conn, (long long)res,
               used / 1048576.0, used_pct, dirty_pct, rbuf, tbuf);
    }
    fflush(stdout);
}

/* totals.<ns> of a top reply (a namespace has dots: no dotted-path lookup). */
static bool ns_doc(const bson_t *top, const char *ns, bson_t *out)
{
    bson_iter_t it, t;
    const uint8_t *data;
    uint32_t len;
    if (!bson_iter_init_find(&it, top, "totals") || !bson_iter_recurse(&it, &t) ||
        !bson_iter_find(&t, ns) || !BSON_ITER_HOLDS_DOCUMENT(&t))
        return false;
    bson_iter_document(&t, &len, &data);
    return bson_init_static(out, data, len);
}

/* --top: per namespace, read and write milliseconds spent during the interval. */
static void top_lines(const opts_t *o, const bson_t *a, const bson_t *b, double secs)
{
    bson_iter_t it, ns;
    char tbuf[16];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(tbuf, sizeof(tbuf), "%H:%M:%S", &tm);
    if (!bson_iter_init_find(&it, b, "totals") || !bson_iter_recurse(&it, &ns))
        return;
    if (!o->json)
        printf("%-40s %10s %10s %10s %10s   %s\n", "ns", "total", "read", "write", "ops", tbuf);
    while (bson_iter_next(&ns)) {
        const char *name = bson_iter_key(&ns);
        if (!BSON_ITER_HOLDS_DOCUMENT(&ns))
            continue;
        int64_t d[4];
        const char *f[4] = {"total.time", "readLock.time", "writeLock.time", "total.count"};
        bson_t now_ns, before_ns = BSON_INITIALIZER;
        if (!ns_doc(b, name, &now_ns))
            continue;
        bool had = ns_doc(a, name, &before_ns);
        for (int i = 0; i < 4; i++)
            d[i] = get_i64(&now_ns, f[i]) - (had ? get_i64(&before_ns, f[i]) : 0);
        if (d[3] == 0)
            continue;
        if (o->json)
            printf("{\"time\":\"%s\",\"ns\":\"%s\",\"total_ms\":%.3f,\"read_ms\":%.3f,"
                   "\"write_ms\":%.3f,\"ops\":%lld,\"interval_s\":%.3f}\n",
                   tbuf, name, d[0] / 1000.0, d[1] / 1000.0, d[2] / 1000.0, (long long)d[3], secs);
        else
            printf("%-40s %8.0fms %8.0fms %8.0fms %10lld\n", name, d[0] / 1000.0, d[1] / 1000.0,
                   d[2] / 1000.0, (long long)d[3]);
    }
    if (!o->json)
        printf("\n");
    fflush(stdout);
}

static int parse_args(int argc, char **argv, opts_t *o, char *uribuf, size_t urilen)
{
    const char *host = "127.0.0.1";
    int port = 27017;
    memset(o, 0, sizeof(*o));
    o->interval_s = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0)
            o->json = true;
        else if (strcmp(a, "--top") == 0)
            o->top = true;
        else if (strcmp(a, "--noheaders") == 0)
            o->no_header = true;
        else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return 1;
        else if (v != NULL && strcmp(a, "--uri") == 0)
            o->uri = argv[++i];
        else if (v != NULL && strcmp(a, "--host") == 0)
            host = argv[++i];
        else if (v != NULL && strcmp(a, "--port") == 0)
            port = atoi(argv[++i]);
        else if (v != NULL && (strcmp(a, "--interval") == 0 || strcmp(a, "-i") == 0))
            o->interval_s = atof(argv[++i]);
        else if (v != NULL && (strcmp(a, "-n") == 0 || strcmp(a, "--rowcount") == 0))
            o->count = atol(argv[++i]);
        else {
            fprintf(stderr, "sable-stat: unknown argument %s\n", a);
            return 2;
        }
    }
    if (o->interval_s <= 0) {
        fprintf(stderr, "sable-stat: --interval must be positive\n");
        return 2;
    }
    if (o->uri == NULL) {
        snprintf(uribuf, urilen, "mongodb://%s:%d/?appname=sable-stat", host, port);
        o->uri = uribuf;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    char uribuf[512];
    int rc = parse_args(argc, argv, &o, uribuf, sizeof(uribuf));
    if (rc != 0) {
        usage(rc == 1 ? stdout : stderr);
        return rc == 1 ? 0 : 2;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    mongoc_init();
    bson_error_t e;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(o.uri, &e);
    if (uri == NULL) {
        fprintf(stderr, "sable-stat: bad URI: %s\n", e.message);
        return 2;
    }
    mongoc_client_t *c = mongoc_client_new_from_uri(uri);
    const char *cmd = o.top ? "top" : "serverStatus";
    bson_t prev, cur;
    if (!run_cmd(c, cmd, &prev)) {
        mongoc_client_destroy(c);
        mongoc_uri_destroy(uri);
        mongoc_cleanup();
        return 1;
    }
    double t0 = now_s();
    rc = 0;
    for (long n = 0; !stop && (o.count == 0 || n < o.count); n++) {
        usleep((useconds_t)(o.interval_s * 1e6));
        if (stop)
            break;
        if (!run_cmd(c, cmd, &cur)) {
            bson_destroy(&cur);
            rc = 1;
            break;
        }
        double t1 = now_s();
        double secs = o.top ? t1 - t0 : elapsed(&prev, &cur, t1 - t0);
        if (o.top)
            top_lines(&o, &prev, &cur, secs);
        else
            stat_line(&o, &prev, &cur, secs, n);
        bson_destroy(&prev);
        bson_steal(&prev, &cur); /* a bson_t must not be copied by assignment */
        t0 = t1;
    }
    bson_destroy(&prev);
    mongoc_client_destroy(c);
    mongoc_uri_destroy(uri);
    mongoc_cleanup();
    return rc;
}
