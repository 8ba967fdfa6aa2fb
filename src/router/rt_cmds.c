/*
 * rt_cmds.c: the router's command table and dispatcher.  hello and the
 * other quick answers run on the connection's loop, and so do a find
 * and a write that go to one shard (rt_fast.c, rt_fastw.c: they wait for
 * the shard without blocking the loop); everything else that talks to a shard or the config
 * servers runs on libuv's worker pool (those calls block), and the reply
 * is handed back with sbl_conn_reply.
 * Handlers return 0 with their reply fields (ok: 1 is added when they
 * leave it out; a shard's own error reply is passed through with its ok: 0)
 * or an error that becomes {ok: 0, errmsg, code, codeName}.
 */
#include "router/router.h"
#include "router/router_int.h"

#include "auth/auth.h"
#include "expr/expr.h"
#include "metrics/metrics.h"
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

typedef int (*rt_fn)(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);

typedef struct rt_cmd {
    const char *name;
    rt_fn fn;
    bool quick; /* answered on the loop */
} rt_cmd_t;

static int64_t conn_counter;

/* serverStatus's counters (what sable-stat, mongostat and the monitoring
 * page read): opcounters by command kind, and opLatencies for reads, writes
 * and other commands, kept by src/metrics as sabled's are. */
static void count_op(const char *name, int64_t us)
{
    sbl_opc_t k = SBL_OPC_COMMAND;
    sbl_lat_class_t l = SBL_LAT_COMMANDS;
    if (strcmp(name, "insert") == 0)
        k = SBL_OPC_INSERT, l = SBL_LAT_WRITES;
    else if (strcmp(name, "find") == 0)
        k = SBL_OPC_QUERY, l = SBL_LAT_READS;
    else if (strcmp(name, "update") == 0 || strcmp(name, "findAndModify") == 0)
        k = SBL_OPC_UPDATE, l = SBL_LAT_WRITES;
    else if (strcmp(name, "delete") == 0)
        k = SBL_OPC_DELETE, l = SBL_LAT_WRITES;
    else if (strcmp(name, "getMore") == 0)
        k = SBL_OPC_GETMORE, l = SBL_LAT_READS;
    else if (strcmp(name, "count") == 0 || strcmp(name, "distinct") == 0 ||
             strcmp(name, "aggregate") == 0)
        l = SBL_LAT_READS;
    sbl_metrics_count_op(k, 1);
    sbl_metrics_record_latency(l, us);
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cmd_hello(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it;
    bool legacy = bson_iter_init(&it, cmd) && bson_iter_next(&it) &&
                  strcmp(bson_iter_key(&it), "hello") != 0;
    BSON_APPEND_BOOL(reply, legacy ? "ismaster" : "isWritablePrimary", true);
    BSON_APPEND_UTF8(reply, "msg", "isdbgrid");
    BSON_APPEND_INT32(reply, "maxBsonObjectSize", 16 * 1024 * 1024);
    BSON_APPEND_INT32(reply, "maxMessageSizeBytes", 48000000);
    BSON_APPEND_INT32(reply, "maxWriteBatchSize", 100000);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    BSON_APPEND_DATE_TIME(reply, "localTime", (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000);
    BSON_APPEND_INT64(reply, "connectionId", __atomic_add_fetch(&conn_counter, 1, __ATOMIC_RELAXED));
    BSON_APPEND_INT32(reply, "minWireVersion", 0);
    BSON_APPEND_INT32(reply, "maxWireVersion", 21);
    BSON_APPEND_BOOL(reply, "readOnly", false);
    BSON_APPEND_INT32(reply, "logicalSessionTimeoutMinutes", 30);
    return 0;
}

static int cmd_ping(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    return 0;
}

static int cmd_build_info(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_t a;
    BSON_APPEND_UTF8(reply, "version", SBL_VERSION);
    BSON_APPEND_UTF8(reply, "gitVersion", SBL_GIT_VERSION);
    BSON_APPEND_ARRAY_BEGIN(reply, "versionArray", &a);
    int v[] = {SBL_VERSION_ARRAY};
    for (int i = 0; i < 4; i++) {
        char k[4];
        snprintf(k, sizeof(k), "%d", i);
        BSON_APPEND_INT32(&a, k, v[i]);
    }
    bson_append_array_end(reply, &a);
    BSON_APPEND_INT32(reply, "bits", 64);
    BSON_APPEND_INT32(reply, "maxBsonObjectSize", 16 * 1024 * 1024);
    BSON_APPEND_UTF8(reply, "storageEngines", "wiredTiger");
    return 0;
}

static int cmd_isdbgrid(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    BSON_APPEND_INT32(reply, "isdbgrid", 1);
    BSON_APPEND_UTF8(reply, "hostname", sbl_server_host());
    return 0;
}

static int cmd_flush(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    rt_meta_flush();
    sbl_err_t e = {0};
    rt_shards_reload(&e); /* shards another router drained or removed */
    BSON_APPEND_BOOL(reply, "flushed", true);
    return 0;
}

static int cmd_list_shards(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_t f = BSON_INITIALIZER, r;
    BSON_APPEND_UTF8(&f, "find", "shards");
    int rc = rt_run(-1, "config", &f, &r, err);
    bson_destroy(&f);
    if (rc != 0)
        return rc;
    bson_iter_t it, fb;
    if (bson_iter_init(&it, &r) && bson_iter_find_descendant(&it, "cursor.firstBatch", &fb) &&
        BSON_ITER_HOLDS_ARRAY(&fb))
        sbl_append_iter(reply, "shards", -1, &fb);
    rt_shards_reload(err);
    bson_destroy(&r);
    return 0;
}

static int admin_only(const char *db, sbl_err_t *err);

static int cmd_balancer_status(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_balancer("Status", reply, err);
}

static int cmd_balancer_start(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_balancer("Start", reply, err);
}

static int cmd_balancer_stop(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_balancer("Stop", reply, err);
}

static int cmd_move_chunk(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_move_chunk(cmd, reply, err);
}

static int cmd_move_range(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_move_range(cmd, reply, err);
}

static int cmd_remove_shard(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_remove_shard(cmd, reply, err);
}

static int cmd_move_primary(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_move_primary(cmd, reply, err);
}

static int admin_only(const char *db, sbl_err_t *err)
{
    if (strcmp(db, "admin") != 0)
        return sbl_err_set(err, SBL_E_Unauthorized, "this command may only be run against the "
                           "admin database.");
    return 0;
}

static int cmd_add_shard(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_add_shard(cmd, reply, err);
}

static int cmd_enable_sharding(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_enable_sharding(cmd, reply, err);
}

static int cmd_shard_collection(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_shard_collection(cmd, reply, err);
}

static int cmd_split(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_split(cmd, reply, err);
}

static int cmd_merge_chunks(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_merge_chunks(cmd, reply, err);
}

static int cmd_merge_all_chunks(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_merge_all_chunks(cmd, reply, err);
}

static int cmd_clear_jumbo_flag(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_clear_jumbo_flag(cmd, reply, err);
}

static int cmd_configure_balancing(const char *db, const bson_t *cmd, bson_t *reply,
                                   sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_configure_balancing(cmd, reply, err);
}

static int cmd_balancer_coll_status(const char *db, const bson_t *cmd, bson_t *reply,
                                    sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_balancer_coll_status(cmd, reply, err);
}

static int cmd_refine_shard_key(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int rc = admin_only(db, err);
    return rc ? rc : rt_cmd_refine_shard_key(cmd, reply, err);
}

static int cmd_get_shard_version(const char *db, const bson_t *cmd, bson_t *reply,
                                 sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, cmd, "getShardVersion") || !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_BadValue, "getShardVersion needs a namespace");
    rt_coll_t *c = rt_coll_get(bson_iter_utf8(&it, NULL), false, err);
    if (c == NULL)
        return err->code;
    int rc = 0;
    if (!c->sharded) {
        rc = sbl_err_set(err, SBL_E_NamespaceNotSharded, "Collection %s is not sharded.", c->ns);
    } else {
        BSON_APPEND_TIMESTAMP(reply, "version", c->version.major, c->version.minor);
        BSON_APPEND_OID(reply, "versionEpoch", &c->version.epoch);
        BSON_APPEND_TIMESTAMP(reply, "versionTimestamp", c->version.ts_t, c->version.ts_i);
    }
    rt_coll_release(c);
    return rc;
}

int rt_to_db_primary(const char *db, const bson_t *cmd, bool create, bool any_if_unknown,
                     bool unsharded_version, bson_t *reply, sbl_err_t *err)
{
    bson_t r;
    int s, rc;
    for (int attempt = 0;; attempt++) { /* StaleDbVersion: the primary moved */
        sbl_err_t e = {0};
        if ((s = rt_db_primary(db, create, &e)) < -1) {
            if (!any_if_unknown)
                return sbl_err_set(err, e.code, "%s", e.msg);
            s = 0; /* no shard knows the database: any answers */
        }
        bson_t fwd = BSON_INITIALIZER;
        rt_copy_cmd(cmd, &fwd, NULL);
        if (s >= 0 && unsharded_version)
            rt_append_version(&fwd, NULL, s);
        if (s >= 0)
            rt_append_db_version(&fwd, db);
        rc = rt_run(s, db, &fwd, &r, err);
        bson_destroy(&fwd);
        if (rc != 0)
            return rc;
        if (rt_reply_code(&r) != SBL_E_StaleDbVersion || attempt >= RT_RETRIES)
            break;
        bson_destroy(&r);
        rt_db_forget(db);
    }
    if (rt_reply_code(&r) == 0)
        rc = rt_wrap_cursor_reply(s, db, &r, reply, err);
    else
        bson_copy_to_excluding_noinit(&r, reply, "$clusterTime", "operationTime", NULL);
    bson_destroy(&r);
    return rc;
}

/* A command for the database's primary shard (listCollections, create ...),
 * with cursor replies wrapped into router cursors. */
static int to_primary(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bool create = false;
    bson_iter_t it;
    if (bson_iter_init(&it, cmd) && bson_iter_next(&it))
        create = strcmp(bson_iter_key(&it), "create") == 0 ||
                 strcmp(bson_iter_key(&it), "createIndexes") == 0;
    return rt_to_db_primary(db, cmd, create, false, false, reply, err);
}

/* A command every shard runs (index builds and drops on sharded
 * collections, dropDatabase); the first error, or the primary's reply. */
static int to_all(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    int primary = rt_db_primary(db, false, err);
    if (primary < -1)
        return err->code;
    if (primary == -1)
        return to_primary(db, cmd, reply, err);
    bson_t fwd = BSON_INITIALIZER;
    rt_copy_cmd(cmd, &fwd, NULL);
    int rc = 0;
    bool answered = false;
    for (int s = 0; s < rt_shard_count() && rc == 0; s++) {
        bson_t r;
        if (rt_shard_removed(s))
            continue;
        if ((rc = rt_run(s, db, &fwd, &r, err)) != 0)
            break;
        int code = rt_reply_code(&r);
        bool ignorable = code == SBL_E_NamespaceNotFound && s != primary;
        if ((code != 0 && !ignorable && !answered) || (s == primary && !answered && code == 0)) {
            bson_copy_to_excluding_noinit(&r, reply, "$clusterTime", "operationTime", NULL);
            answered = true;
        }
        bson_destroy(&r);
    }
    bson_destroy(&fwd);
    if (rc == 0 && !answered)
        BSON_APPEND_INT32(reply, "ok", 1);
    return rc;
}

static int cmd_create_indexes(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it;
    char ns[400];
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it))
        return to_primary(db, cmd, reply, err);
    snprintf(ns, sizeof(ns), "%s.%s", db, bson_iter_utf8(&it, NULL));
    sbl_err_t e = {0};
    rt_db_primary(db, true, &e);
    rt_coll_t *c = rt_coll_get(ns, false, err);
    if (c == NULL)
        return err->code;
    bool sharded = c->sharded;
    rt_coll_release(c);
    return sharded ? to_all(db, cmd, reply, err) : to_primary(db, cmd, reply, err);
}

static int cmd_drop(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, cmd, "drop") || !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_BadValue, "drop needs a collection name");
    const char *coll = bson_iter_utf8(&it, NULL);
    char ns[400];
    snprintf(ns, sizeof(ns), "%s.%s", db, coll);
    rt_coll_t *c = rt_coll_get(ns, true, err);
    if (c == NULL)
        return err->code;
    bool sharded = c->sharded;
    rt_coll_release(c);
    if (!sharded)
        return to_primary(db, cmd, reply, err);
    rt_meta_drop(db, coll);
    int rc = to_all(db, cmd, reply, err);
    return rc;
}

static int cmd_drop_database(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    if (strcmp(db, "admin") == 0 || strcmp(db, "config") == 0)
        return sbl_err_set(err, SBL_E_IllegalOperation, "Cannot drop the %s database", db);
    /* its primary holds routed commands back until every copy is gone and
     * then forgets its version: a router that cached it gets StaleDbVersion */
    sbl_err_t ce = {0};
    int primary = rt_db_primary(db, false, &ce);
    bool held = primary >= 0 && rt_db_crit(primary, db, RT_CRIT_ENTER, &ce) == 0;
    rt_meta_drop(db, NULL);
    bson_t fwd = BSON_INITIALIZER;
    rt_copy_cmd(cmd, &fwd, NULL);
    int rc = 0;
    for (int s = 0; s < rt_shard_count() && rc == 0; s++) {
        bson_t r;
        if (!rt_shard_removed(s) && (rc = rt_run(s, db, &fwd, &r, err)) == 0)
            bson_destroy(&r);
    }
    bson_destroy(&fwd);
    if (held)
        rt_db_crit(primary, db, RT_CRIT_EXIT, &ce);
    BSON_APPEND_UTF8(reply, "dropped", db);
    return rc;
}

static int cmd_list_databases(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bool name_only = false;
    bson_iter_t it;
    if (bson_iter_init_find(&it, cmd, "nameOnly"))
        name_only = bson_iter_as_bool(&it);
    char names[256][128];
    int64_t sizes[256];
    int n = 0;
    int64_t total = 0;
    for (int s = -1; s < rt_shard_count(); s++) {
        if (s >= 0 && rt_shard_removed(s))
            continue;
        bson_t c = BSON_INITIALIZER, r;
        BSON_APPEND_INT32(&c, "listDatabases", 1);
        int rc = rt_run(s, "admin", &c, &r, err);
        bson_destroy(&c);
        if (rc != 0)
            return rc;
        bson_iter_t a, f;
        if (bson_iter_init_find(&it, &r, "databases") && bson_iter_recurse(&it, &a))
            while (bson_iter_next(&a)) {
                const char *name = NULL;
                int64_t size = 0;
                if (!bson_iter_recurse(&a, &f))
                    continue;
                while (bson_iter_next(&f)) {
                    if (strcmp(bson_iter_key(&f), "name") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                        name = bson_iter_utf8(&f, NULL);
                    else if (strcmp(bson_iter_key(&f), "sizeOnDisk") == 0)
                        size = bson_iter_as_int64(&f);
                }
                if (name == NULL || strcmp(name, "local") == 0 || !rt_auth_db_visible(name))
                    continue;
                bool cfg = strcmp(name, "config") == 0 || strcmp(name, "admin") == 0;
                if ((s == -1) != cfg)
                    continue; /* config and admin come from the config servers */
                int k;
                for (k = 0; k < n; k++)
                    if (strcmp(names[k], name) == 0)
                        break;
                if (k == n && n < 256) {
                    snprintf(names[n], sizeof(names[n]), "%s", name);
                    sizes[n++] = 0;
                }
                if (k < 256)
                    sizes[k] += size;
                total += size;
            }
        bson_destroy(&r);
    }
    bson_t a;
    BSON_APPEND_ARRAY_BEGIN(reply, "databases", &a);
    for (int i = 0; i < n; i++) {
        bson_t d;
        char k[16];
        const char *ks;
        bson_uint32_to_string((uint32_t)i, &ks, k, sizeof(k));
        BSON_APPEND_DOCUMENT_BEGIN(&a, ks, &d);
        BSON_APPEND_UTF8(&d, "name", names[i]);
        if (!name_only) {
            BSON_APPEND_INT64(&d, "sizeOnDisk", sizes[i]);
            BSON_APPEND_BOOL(&d, "empty", sizes[i] == 0);
        }
        bson_append_document_end(&a, &d);
    }
    bson_append_array_end(reply, &a);
    if (!name_only)
        BSON_APPEND_INT64(reply, "totalSize", total);
    return 0;
}

static int cmd_whatsmyuri(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    BSON_APPEND_UTF8(reply, "you", "");
    return 0;
}

static int cmd_get_cmd_line_opts(const char *db, const bson_t *cmd, bson_t *reply,
                                 sbl_err_t *err)
{
    const sbl_options_t *o = sbl_server_options();
    bson_t a;
    BSON_APPEND_ARRAY_BEGIN(reply, "argv", &a);
    for (int i = 0; i < o->argc; i++) {
        char k[16];
        const char *ks;
        bson_uint32_to_string((uint32_t)i, &ks, k, sizeof(k));
        BSON_APPEND_UTF8(&a, ks, o->argv[i]);
    }
    bson_append_array_end(reply, &a);
    BSON_APPEND_DOCUMENT(reply, "parsed", &o->parsed);
    return 0;
}

static int cmd_server_status(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    int64_t now_ms = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
    int64_t up_ms = sbl_server_start_ms() > 0 ? now_ms - sbl_server_start_ms() : 0;
    BSON_APPEND_UTF8(reply, "host", sbl_server_host());
    BSON_APPEND_UTF8(reply, "version", SBL_VERSION);
    BSON_APPEND_UTF8(reply, "process", "mongos");
    BSON_APPEND_INT64(reply, "pid", (int64_t)getpid());
    BSON_APPEND_INT64(reply, "uptime", up_ms / 1000);
    BSON_APPEND_INT64(reply, "uptimeMillis", up_ms);
    BSON_APPEND_DATE_TIME(reply, "localTime", now_ms);
    bson_t d, e;
    sbl_net_stats_t ns;
    sbl_net_get_stats(&ns);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "connections", &d);
    BSON_APPEND_INT32(&d, "current", (int32_t)ns.current);
    BSON_APPEND_INT32(&d, "available", (int32_t)ns.available);
    BSON_APPEND_INT64(&d, "totalCreated", ns.total_created);
    bson_append_document_end(reply, &d);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "network", &d);
    BSON_APPEND_INT64(&d, "bytesIn", ns.bytes_in);
    BSON_APPEND_INT64(&d, "bytesOut", ns.bytes_out);
    BSON_APPEND_INT64(&d, "numRequests", ns.num_requests);
    /* Sable's: finds and writes answered on the loops, and those handed
     * to the workers after all (rt_fast.c) */
    int64_t loop_reads, reads_to_workers, loop_writes, writes_to_workers;
    rt_fast_counts(&loop_reads, &reads_to_workers, &loop_writes, &writes_to_workers);
    BSON_APPEND_INT64(&d, "loopReads", loop_reads);
    BSON_APPEND_INT64(&d, "loopReadsToWorkers", reads_to_workers);
    BSON_APPEND_INT64(&d, "loopWrites", loop_writes);
    BSON_APPEND_INT64(&d, "loopWritesToWorkers", writes_to_workers);
    int64_t loop_scans, scans_to_workers;
    rt_scan_counts(&loop_scans, &scans_to_workers); /* finds across shards (rt_scan.c) */
    BSON_APPEND_INT64(&d, "loopScans", loop_scans);
    BSON_APPEND_INT64(&d, "loopScansToWorkers", scans_to_workers);
    bson_append_document_end(reply, &d);
    sbl_opcounters_t oc;
    sbl_metrics_get_opcounters(&oc);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "opcounters", &d);
    BSON_APPEND_INT64(&d, "insert", oc.insert);
    BSON_APPEND_INT64(&d, "query", oc.query);
    BSON_APPEND_INT64(&d, "update", oc.update);
    BSON_APPEND_INT64(&d, "delete", oc.del);
    BSON_APPEND_INT64(&d, "getmore", oc.getmore);
    BSON_APPEND_INT64(&d, "command", oc.command);
    bson_append_document_end(reply, &d);
    static const char *const latn[] = {"reads", "writes", "commands"};
    static const sbl_lat_class_t latc[] = {SBL_LAT_READS, SBL_LAT_WRITES, SBL_LAT_COMMANDS};
    BSON_APPEND_DOCUMENT_BEGIN(reply, "opLatencies", &d);
    for (int i = 0; i < 3; i++) {
        sbl_latency_t l;
        sbl_metrics_get_latency(latc[i], &l);
        BSON_APPEND_DOCUMENT_BEGIN(&d, latn[i], &e);
        BSON_APPEND_INT64(&e, "latency", l.latency_us);
        BSON_APPEND_INT64(&e, "ops", l.ops);
        bson_append_document_end(&d, &e);
    }
    bson_append_document_end(reply, &d);
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "mem", &d);
    BSON_APPEND_INT32(&d, "bits", 64);
    BSON_APPEND_INT64(&d, "resident", rss * (sysconf(_SC_PAGESIZE) / 1024) / 1024);
    BSON_APPEND_INT64(&d, "virtual", pages * (sysconf(_SC_PAGESIZE) / 1024) / 1024);
    bson_append_document_end(reply, &d);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "extra_info", &d);
        BSON_APPEND_INT64(&d, "user_time_us",
                          (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec);
        BSON_APPEND_INT64(&d, "system_time_us",
                          (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec);
        bson_append_document_end(reply, &d);
    }
    return 0;
}

/* Sorted by name (binary search). */
static const rt_cmd_t table[] = {
    {"abortTransaction", rt_cmd_abort_txn, false},
    {"addShard", cmd_add_shard, false},
    {"addShardToZone", rt_cmd_zone, false},
    {"addshard", cmd_add_shard, false},
    {"addshardtozone", rt_cmd_zone, false},
    {"aggregate", rt_aggregate, false},
    {"balancerCollectionStatus", cmd_balancer_coll_status, false},
    {"balancerStart", cmd_balancer_start, false},
    {"balancerStatus", cmd_balancer_status, false},
    {"balancerStop", cmd_balancer_stop, false},
    {"buildInfo", cmd_build_info, true},
    {"buildinfo", cmd_build_info, true},
    {"clearJumboFlag", cmd_clear_jumbo_flag, false},
    {"collStats", to_primary, false},
    {"commitTransaction", rt_cmd_commit_txn, false},
    {"configureCollectionBalancing", cmd_configure_balancing, false},
    {"count", rt_count, false},
    {"create", to_primary, false},
    {"createIndexes", cmd_create_indexes, false},
    {"dbStats", to_primary, false},
    {"delete", rt_delete, false},
    {"distinct", rt_distinct, false},
    {"drop", cmd_drop, false},
    {"dropDatabase", cmd_drop_database, false},
    {"dropIndexes", cmd_create_indexes, false},
    {"enableSharding", cmd_enable_sharding, false},
    {"enablesharding", cmd_enable_sharding, false},
    {"endSessions", rt_cmd_end_sessions, false},
    {"explain", rt_explain, false},
    {"find", rt_find, false},
    {"findAndModify", rt_find_and_modify, false},
    {"findandmodify", rt_find_and_modify, false},
    {"flushRouterConfig", cmd_flush, true},
    {"getCmdLineOpts", cmd_get_cmd_line_opts, true},
    {"getMore", rt_get_more, false},
    {"getShardVersion", cmd_get_shard_version, false},
    {"hello", cmd_hello, true},
    {"insert", rt_insert, false},
    {"isMaster", cmd_hello, true},
    {"isdbgrid", cmd_isdbgrid, true},
    {"ismaster", cmd_hello, true},
    {"killAllSessions", rt_cmd_kill_all_sessions, false},
    {"killAllSessionsByPattern", rt_cmd_kill_all_sessions, false},
    {"killCursors", rt_kill_cursors, false},
    {"killSessions", rt_cmd_kill_sessions, false},
    {"listCollections", to_primary, false},
    {"listDatabases", cmd_list_databases, false},
    {"listIndexes", to_primary, false},
    {"listShards", cmd_list_shards, false},
    {"listshards", cmd_list_shards, false},
    {"mergeAllChunksOnShard", cmd_merge_all_chunks, false},
    {"mergeChunks", cmd_merge_chunks, false},
    {"moveChunk", cmd_move_chunk, false},
    {"movePrimary", cmd_move_primary, false},
    {"moveRange", cmd_move_range, false},
    {"movechunk", cmd_move_chunk, false},
    {"moveprimary", cmd_move_primary, false},
    {"ping", cmd_ping, true},
    {"refineCollectionShardKey", cmd_refine_shard_key, false},
    {"refreshSessions", rt_cmd_refresh_sessions, false},
    {"removeShard", cmd_remove_shard, false},
    {"removeShardFromZone", rt_cmd_zone, false},
    {"removeshard", cmd_remove_shard, false},
    {"removeshardfromzone", rt_cmd_zone, false},
    {"serverStatus", cmd_server_status, true},
    {"shardCollection", cmd_shard_collection, false},
    {"shardcollection", cmd_shard_collection, false},
    {"split", cmd_split, false},
    {"startSession", rt_cmd_start_session, false},
    {"update", rt_update, false},
    {"updateZoneKeyRange", rt_cmd_zone, false},
    {"updatezonekeyrange", rt_cmd_zone, false},
    {"whatsmyuri", cmd_whatsmyuri, true},
};

static const rt_cmd_t *lookup(const char *name)
{
    size_t lo = 0, hi = sizeof(table) / sizeof(table[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(name, table[mid].name);
        if (c == 0)
            return &table[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

typedef struct job {
    uv_work_t work;
    sbl_conn_t *conn;
    sbl_request_t *req;
    const rt_cmd_t *def;
} job_t;

/* reply's last fields (ok or rc's error, $clusterTime), then sent. */
static void send_reply(sbl_conn_t *conn, sbl_request_t *req, int rc, const sbl_err_t *err,
                       bson_t *reply)
{
    if (rc != 0) {
        bson_reinit(reply);
        BSON_APPEND_DOUBLE(reply, "ok", 0.0);
        BSON_APPEND_UTF8(reply, "errmsg", err->msg);
        BSON_APPEND_INT32(reply, "code", rc);
        BSON_APPEND_UTF8(reply, "codeName", sbl_err_name(rc));
        rt_sess_error_labels(rc, reply);
    } else if (!bson_has_field(reply, "ok")) {
        BSON_APPEND_DOUBLE(reply, "ok", 1.0);
    }
    /* as mongos: the cluster time, which drivers send back and use for
     * causally consistent reads (afterClusterTime) */
    if (!bson_has_field(reply, "$clusterTime"))
        rt_append_cluster_time(reply, !bson_has_field(reply, "operationTime"));
    sbl_conn_reply(conn, req, reply);
}

static void run_and_reply(sbl_conn_t *conn, sbl_request_t *req, const rt_cmd_t *def)
{
    bson_t reply = BSON_INITIALIZER;
    sbl_err_t err = {0};
    const char *db = req->db[0] ? req->db : "admin";
    bson_iter_t it;
    const char *name = bson_iter_init(&it, &req->cmd) && bson_iter_next(&it)
                           ? bson_iter_key(&it)
                           : "";
    int rc;
    bson_t pinned; /* the command with the snapshot time the router chose */
    bool rewrote = false;
    if (def == NULL && !rt_auth_handles(name)) {
        rc = sbl_err_set(&err, SBL_E_CommandNotFound, "no such command: '%s'", name);
    } else if ((rc = rt_auth_check(conn, name, db, &req->cmd, &err)) != 0) {
        /* refused: Unauthorized */
    } else if ((rc = rt_check_cluster_time(&req->cmd, rt_auth_may_advance_cluster_time(conn, name),
                                           &err)) != 0) {
        /* refused: a forged $clusterTime */
    } else if (def == NULL) {
        rc = rt_auth_run(conn, name, db, &req->cmd, &reply, &err);
    } else {
        int64_t t0 = mono_us();
        rt_auth_enter(conn);
        uint64_t at = rt_snapshot_pin(def->name, &req->cmd, &pinned, &rewrote);
        const bson_t *cmd = rewrote ? &pinned : &req->cmd;
        rt_snapshot_set_read_at(at);
        if ((rc = rt_sess_begin(name, cmd, &err)) == 0) {
            rc = def->fn(db, cmd, &reply, &err);
            if (rc == 0 && at != 0)
                rt_snapshot_reply(def->name, at, &reply);
            rt_sess_after(rc, &reply);
        }
        rt_snapshot_set_read_at(0);
        rt_auth_leave();
        count_op(def->name, mono_us() - t0);
        if (rc == 0 && def->fn == cmd_hello)
            rt_auth_hello(conn, &req->cmd, &reply);
    }
    send_reply(conn, req, rc, &err, &reply);
    rt_sess_end();
    if (rewrote)
        bson_destroy(&pinned);
    bson_destroy(&reply);
}

void rt_count_op(const char *name, int64_t t0)
{
    count_op(name, mono_us() - t0);
}

void rt_answer(sbl_conn_t *conn, sbl_request_t *req, const char *name, int64_t t0, int rc,
               const sbl_err_t *err, bson_t *reply)
{
    count_op(name, mono_us() - t0);
    send_reply(conn, req, rc, err, reply);
}

static void work_cb(uv_work_t *w)
{
    job_t *j = w->data;
    run_and_reply(j->conn, j->req, j->def);
}

static void after_cb(uv_work_t *w, int status)
{
    free(w->data);
}

static void queue_work(sbl_conn_t *conn, sbl_request_t *req, const rt_cmd_t *def)
{
    job_t *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        run_and_reply(conn, req, def);
        return;
    }
    j->conn = conn;
    j->req = req;
    j->def = def;
    j->work.data = j;
    if (uv_queue_work(sbl_conn_loop(conn), &j->work, work_cb, after_cb) != 0) {
        free(j);
        run_and_reply(conn, req, def);
    }
}

void sbl_router_dispatch(sbl_conn_t *conn, sbl_request_t *req)
{
    bson_iter_t it;
    const rt_cmd_t *def = NULL;
    const char *name = "";
    if (bson_iter_init(&it, &req->cmd) && bson_iter_next(&it))
        def = lookup(name = bson_iter_key(&it));
    /* with authorization on, checking a client's privileges may read the
     * config servers: everything runs on the worker pool */
    if ((def == NULL && !rt_auth_handles(name)) ||
        (def != NULL && def->quick && !sbl_auth_enabled())) {
        run_and_reply(conn, req, def);
        return;
    }
    if (def != NULL && def->fn == rt_find && rt_fast_find(conn, req))
        return;
    if (def != NULL && (def->fn == rt_insert || def->fn == rt_update || def->fn == rt_delete) &&
        rt_fast_write(conn, req))
        return;
    queue_work(conn, req, def);
}

void rt_dispatch_worker(sbl_conn_t *conn, sbl_request_t *req)
{
    bson_iter_t it;
    const rt_cmd_t *def = NULL;
    if (bson_iter_init(&it, &req->cmd) && bson_iter_next(&it))
        def = lookup(bson_iter_key(&it));
    queue_work(conn, req, def);
}

int sbl_router_init(const char *configdb, sbl_err_t *err)
{
    int rc = rt_remote_init(configdb, err);
    if (rc != 0)
        return rc;
    rt_auth_init();
    sbl_expr_init(); /* $expr, $jsonSchema and $where in the merger's filters (rt_agg.c) */
    /* config.version: the cluster's identity, created by the first router. */
    bson_t f = BSON_INITIALIZER, r;
    BSON_APPEND_UTF8(&f, "find", "version");
    rc = rt_run(-1, "config", &f, &r, err);
    bson_destroy(&f);
    if (rc != 0)
        return rc;
    bson_iter_t it, d;
    bool have = bson_iter_init(&it, &r) &&
                bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d);
    bson_destroy(&r);
    if (!have) {
        bson_t ins = BSON_INITIALIZER, docs, d, wc;
        bson_oid_t cid;
        bson_oid_init(&cid, NULL);
        BSON_APPEND_UTF8(&ins, "insert", "version");
        BSON_APPEND_ARRAY_BEGIN(&ins, "documents", &docs);
        BSON_APPEND_DOCUMENT_BEGIN(&docs, "0", &d);
        BSON_APPEND_INT32(&d, "_id", 1);
        BSON_APPEND_OID(&d, "clusterId", &cid);
        bson_append_document_end(&docs, &d);
        bson_append_array_end(&ins, &docs);
        BSON_APPEND_DOCUMENT_BEGIN(&ins, "writeConcern", &wc);
        BSON_APPEND_UTF8(&wc, "w", "majority");
        bson_append_document_end(&ins, &wc);
        if (rt_run(-1, "config", &ins, &r, err) == 0)
            bson_destroy(&r);
        bson_destroy(&ins);
    }
    /* config.settings: the balancer runs (mongod's default), auto-splitting
     * does not exist yet; the documents say so (sh.status() and
     * sh.getBalancerState() read them).  An existing document is left alone
     * (duplicate key). */
    bson_t ins = BSON_INITIALIZER, docs, sd;
    BSON_APPEND_UTF8(&ins, "insert", "settings");
    BSON_APPEND_BOOL(&ins, "ordered", false);
    BSON_APPEND_ARRAY_BEGIN(&ins, "documents", &docs);
    BSON_APPEND_DOCUMENT_BEGIN(&docs, "0", &sd);
    BSON_APPEND_UTF8(&sd, "_id", "balancer");
    BSON_APPEND_BOOL(&sd, "stopped", false);
    BSON_APPEND_UTF8(&sd, "mode", "full");
    bson_append_document_end(&docs, &sd);
    BSON_APPEND_DOCUMENT_BEGIN(&docs, "1", &sd);
    BSON_APPEND_UTF8(&sd, "_id", "autosplit");
    BSON_APPEND_BOOL(&sd, "enabled", false);
    bson_append_document_end(&docs, &sd);
    bson_append_array_end(&ins, &docs);
    if (rt_run(-1, "config", &ins, &r, err) == 0)
        bson_destroy(&r);
    bson_destroy(&ins);
    return rt_shards_reload(err);
}

void sbl_router_shutdown(void)
{
    rt_watch_stop();
    rt_cursors_shutdown();
    rt_meta_flush();
    rt_remote_shutdown();
}
