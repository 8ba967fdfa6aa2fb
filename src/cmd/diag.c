/*
 * diag.c: serverStatus, and the figures the Prometheus endpoint
 * asks the command layer for.  serverStatus reports the sections tools read
 * (host, version, uptime, connections, network, opcounters, opLatencies,
 * mem, extra_info, metrics.document/commands/cursor, wiredTiger) from
 * counters kept in src/metrics and elsewhere; it never takes a lock on the
 * request path.
 */
#include "agg/agg.h"
#include "cmd/cmd_int.h"
#include "exec/exec.h"
#include "repl/repl.h"
#include "server/server.h"
#include "audit/audit.h"
#include "auth/auth.h"
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void append_mem(bson_t *r)
{
    double cpu;
    int64_t resident, virt;
    sbl_metrics_process(&cpu, &resident, &virt);
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(r, "mem", &d);
    BSON_APPEND_INT32(&d, "bits", 64);
    BSON_APPEND_INT32(&d, "resident", (int32_t)(resident / (1024 * 1024)));
    BSON_APPEND_INT32(&d, "virtual", (int32_t)(virt / (1024 * 1024)));
    BSON_APPEND_BOOL(&d, "supported", true);
    bson_append_document_end(r, &d);
}

/* serverStatus {opLatencies: {histograms: true}} adds the buckets. */
static bool want_histograms(const bson_t *cmd)
{
    bson_iter_t it, h;
    return bson_iter_init_find(&it, cmd, "opLatencies") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
           bson_iter_recurse(&it, &h) && bson_iter_find(&h, "histograms") && bson_iter_as_bool(&h);
}

static void append_op_latencies(bson_t *r, bool histograms)
{
    static const char *const names[SBL_LAT_COUNT] = {"reads", "writes", "commands",
                                                     "transactions"};
    bson_t d, c, arr, b;
    BSON_APPEND_DOCUMENT_BEGIN(r, "opLatencies", &d);
    for (int i = 0; i < SBL_LAT_COUNT; i++) {
        sbl_latency_t l;
        sbl_metrics_get_latency((sbl_lat_class_t)i, &l);
        BSON_APPEND_DOCUMENT_BEGIN(&d, names[i], &c);
        if (histograms) {
            char key[16];
            const char *k;
            uint32_t n = 0;
            BSON_APPEND_ARRAY_BEGIN(&c, "histogram", &arr);
            for (int j = 0; j <= SBL_LAT_NBOUNDS; j++) {
                if (l.buckets[j] == 0)
                    continue;
                bson_uint32_to_string(n++, &k, key, sizeof(key));
                bson_append_document_begin(&arr, k, -1, &b);
                /* MongoDB labels a bucket by its lower bound in micros. */
                BSON_APPEND_INT64(&b, "micros", j == 0 ? 0 : sbl_lat_bounds_us[j - 1]);
                BSON_APPEND_INT64(&b, "count", l.buckets[j]);
                bson_append_document_end(&arr, &b);
            }
            bson_append_array_end(&c, &arr);
        }
        BSON_APPEND_INT64(&c, "latency", l.latency_us);
        BSON_APPEND_INT64(&c, "ops", l.ops);
        bson_append_document_end(&d, &c);
    }
    bson_append_document_end(r, &d);
}

/* metrics.commands: {<name>: {failed, total}} for every command of the table. */
static void append_commands(bson_t *m)
{
    size_t n;
    const sbl_cmd_def_t *t = sbl_cmd_table(&n);
    bson_t d, c;
    BSON_APPEND_DOCUMENT_BEGIN(m, "commands", &d);
    for (size_t i = 0; i < n; i++) {
        int64_t total, failed;
        sbl_metrics_get_command(i, &total, &failed);
        bson_append_document_begin(&d, t[i].name, -1, &c);
        BSON_APPEND_INT64(&c, "failed", failed);
        BSON_APPEND_INT64(&c, "total", total);
        bson_append_document_end(&d, &c);
    }
    bson_append_document_end(m, &d);
}

int sbl_cmd_server_status(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_t *r = ctx->reply, d, m, c;
    int64_t now = sbl_now_ms();
    int64_t up_ms = now - sbl_server_start_ms();
    sbl_net_stats_t ns;
    sbl_opcounters_t oc;
    struct rusage ru;

    BSON_APPEND_UTF8(r, "host", sbl_server_host());
    BSON_APPEND_UTF8(r, "version", SBL_VERSION);
    /* Tools tell a mongod from a mongos by this field. */
    BSON_APPEND_UTF8(r, "process", "mongod");
    BSON_APPEND_INT64(r, "pid", (int64_t)getpid());
    BSON_APPEND_DOUBLE(r, "uptime", (double)(up_ms / 1000));
    BSON_APPEND_INT64(r, "uptimeMillis", up_ms);
    BSON_APPEND_INT64(r, "uptimeEstimate", up_ms / 1000);
    BSON_APPEND_DATE_TIME(r, "localTime", now);

    sbl_net_get_stats(&ns);
    BSON_APPEND_DOCUMENT_BEGIN(r, "connections", &d);
    BSON_APPEND_INT32(&d, "current", (int32_t)ns.current);
    BSON_APPEND_INT32(&d, "available", (int32_t)ns.available);
    BSON_APPEND_INT32(&d, "totalCreated", (int32_t)ns.total_created);
    BSON_APPEND_INT32(&d, "active", (int32_t)sbl_ops_active());
    bson_append_document_end(r, &d);

    BSON_APPEND_DOCUMENT_BEGIN(r, "network", &d);
    BSON_APPEND_INT64(&d, "bytesIn", ns.bytes_in);
    BSON_APPEND_INT64(&d, "bytesOut", ns.bytes_out);
    BSON_APPEND_INT64(&d, "numRequests", ns.num_requests);
    /* Sable's: held replies sent with one io_uring submission per loop
     * iteration (src/net/net_conn.c), and how many such submissions. */
    BSON_APPEND_INT64(&d, "replyBatches", ns.reply_batches);
    BSON_APPEND_INT64(&d, "repliesBatched", ns.replies_batched);
    bson_append_document_end(r, &d);

    sbl_metrics_get_opcounters(&oc);
    BSON_APPEND_DOCUMENT_BEGIN(r, "opcounters", &d);
    BSON_APPEND_INT64(&d, "insert", oc.insert);
    BSON_APPEND_INT64(&d, "query", oc.query);
    BSON_APPEND_INT64(&d, "update", oc.update);
    BSON_APPEND_INT64(&d, "delete", oc.del);
    BSON_APPEND_INT64(&d, "getmore", oc.getmore);
    BSON_APPEND_INT64(&d, "command", oc.command);
    bson_append_document_end(r, &d);

    sbl_repl_append_server_status(r); /* repl, opcountersRepl, electionMetrics */
    sbl_repl_flow_append_status(r); /* flowControl (a standalone's never limits) */
    append_op_latencies(r, want_histograms(ctx->cmd));
    sbl_cmd_sessions_append_status(r);
    append_mem(r);

    BSON_APPEND_DOCUMENT_BEGIN(r, "extra_info", &d);
    BSON_APPEND_UTF8(&d, "note", "fields vary by platform");
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        BSON_APPEND_INT64(&d, "user_time_us",
                          (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec);
        BSON_APPEND_INT64(&d, "system_time_us",
                          (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec);
        BSON_APPEND_INT64(&d, "maximum_resident_set_kb", ru.ru_maxrss);
        BSON_APPEND_INT64(&d, "page_faults", ru.ru_majflt);
    }
    bson_append_document_end(r, &d);

    BSON_APPEND_DOCUMENT_BEGIN(r, "metrics", &m);
    append_commands(&m);
    BSON_APPEND_DOCUMENT_BEGIN(&m, "cursor", &d);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "open", &c);
    BSON_APPEND_INT64(&c, "noTimeout", 0);
    BSON_APPEND_INT64(&c, "pinned", 0);
    BSON_APPEND_INT64(&c, "total", sbl_cursors_open_count());
    bson_append_document_end(&d, &c);
    bson_append_document_end(&m, &d);
    BSON_APPEND_DOCUMENT_BEGIN(&m, "document", &d);
    BSON_APPEND_INT64(&d, "deleted", sbl_metrics_get_docs(SBL_DOC_DELETED));
    BSON_APPEND_INT64(&d, "inserted", sbl_metrics_get_docs(SBL_DOC_INSERTED));
    BSON_APPEND_INT64(&d, "returned", sbl_metrics_get_docs(SBL_DOC_RETURNED));
    BSON_APPEND_INT64(&d, "updated", sbl_metrics_get_docs(SBL_DOC_UPDATED));
    bson_append_document_end(&m, &d);
    sbl_spill_append_metrics(&m); /* metrics.query: spills of $group and sorts */
    sbl_agg_change_stream_metrics(&m);
    sbl_repl_append_metrics(&m);
    bson_append_document_end(r, &m);

    BSON_APPEND_DOCUMENT_BEGIN(r, "storageEngine", &d);
    BSON_APPEND_UTF8(&d, "name", "wiredTiger");
    BSON_APPEND_BOOL(&d, "supportsCommittedReads", true);
    BSON_APPEND_BOOL(&d, "persistent", true);
    bson_append_document_end(r, &d);

    BSON_APPEND_DOCUMENT_BEGIN(r, "wiredTiger", &d);
    sbl_storage_append_stats(&d);
    bson_append_document_end(r, &d);
    return 0;
}

/* ---- figures for the Prometheus endpoint -------------------------------------- */

static void src_connections(int64_t *current, int64_t *created, int64_t *available)
{
    sbl_net_stats_t ns;
    sbl_net_get_stats(&ns);
    *current = ns.current;
    *created = ns.total_created;
    *available = ns.available;
}

static void src_network(int64_t *in, int64_t *out, int64_t *requests)
{
    sbl_net_stats_t ns;
    sbl_net_get_stats(&ns);
    *in = ns.bytes_in;
    *out = ns.bytes_out;
    *requests = ns.num_requests;
}

static void src_cache(int64_t *used, int64_t *max, int64_t *dirty)
{
    bson_t st = BSON_INITIALIZER;
    bson_iter_t it, f;
    sbl_storage_append_stats(&st);
    *used = *max = *dirty = 0;
    if (bson_iter_init(&it, &st) && bson_iter_find_descendant(&it, "cache.bytes currently in the cache", &f))
        *used = bson_iter_as_int64(&f);
    if (bson_iter_init(&it, &st) && bson_iter_find_descendant(&it, "cache.maximum bytes configured", &f))
        *max = bson_iter_as_int64(&f);
    if (bson_iter_init(&it, &st) &&
        bson_iter_find_descendant(&it, "cache.tracked dirty bytes in the cache", &f))
        *dirty = bson_iter_as_int64(&f);
    bson_destroy(&st);
}

static int64_t src_journal_flushes(void)
{
    bson_t st = BSON_INITIALIZER;
    bson_iter_t it, f;
    int64_t n = 0;
    sbl_storage_append_stats(&st);
    if (bson_iter_init(&it, &st) && bson_iter_find_descendant(&it, "log.log sync operations", &f))
        n = bson_iter_as_int64(&f);
    bson_destroy(&st);
    return n;
}

static size_t src_repl_members(sbl_metrics_member_t *out, size_t cap)
{
    sbl_repl_member_info_t m[SBL_METRICS_MAX_MEMBERS];
    int n = sbl_repl_members_info(m, cap < SBL_METRICS_MAX_MEMBERS ? (int)cap
                                                                   : SBL_METRICS_MAX_MEMBERS);
    for (int i = 0; i < n; i++) {
        memcpy(out[i].name, m[i].name, sizeof(out[i].name));
        out[i].name[sizeof(out[i].name) - 1] = '\0';
        out[i].state = m[i].state;
        out[i].lag_ms = m[i].lag_ms;
    }
    return (size_t)n;
}

static const char *src_command_name(size_t row)
{
    size_t n;
    const sbl_cmd_def_t *t = sbl_cmd_table(&n);
    return row < n ? t[row].name : NULL;
}

/* HTTP basic auth on the metrics port: a user on admin whose roles allow
 * serverStatus (clusterMonitor, clusterAdmin, root).  The page asks every
 * second, so the last accepted credentials are remembered (as a digest) until
 * a user or role changes. */
static bool src_authorize(const char *user, const char *password)
{
    static uint8_t ok_digest[32];
    static uint64_t ok_gen;
    static bool ok_valid;
    uint8_t d[32];
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool allowed = false;
    if (md == NULL)
        return false;
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    EVP_DigestUpdate(md, user, strlen(user) + 1);
    EVP_DigestUpdate(md, password, strlen(password));
    EVP_DigestFinal_ex(md, d, NULL);
    EVP_MD_CTX_free(md);
    uint64_t gen = sbl_auth_generation();
    if (ok_valid && ok_gen == gen && CRYPTO_memcmp(d, ok_digest, sizeof(d)) == 0)
        return true;
    sbl_session_t *ss = sbl_session_get();
    sbl_authz_t *a = NULL;
    sbl_err_t err;
    bool ok = false;
    if (ss == NULL || sbl_auth_check_password(ss, "admin", user, password, &ok, &err) != 0 || !ok)
        return false;
    if (sbl_authz_resolve(ss, "admin", user, &a, &err) == 0) {
        allowed = sbl_authz_allows(a, sbl_auth_action_id("serverStatus"), NULL, NULL);
        sbl_authz_free(a);
    }
    if (allowed) {
        memcpy(ok_digest, d, sizeof(d));
        ok_gen = gen;
        ok_valid = true;
    }
    return allowed;
}

const struct sbl_metrics_sources *sbl_cmd_metrics_sources(void)
{
    static const sbl_metrics_sources_t src = {
        .connections = src_connections,
        .network = src_network,
        .cache = src_cache,
        .journal_flushes = src_journal_flushes,
        .command_name = src_command_name,
        .audit_events = sbl_audit_events_total,
        .repl_members = src_repl_members,
        .authorize = src_authorize,
        .transactions = sbl_cmd_mtxn_counts,
    };
    return &src;
}
