/*
 * handshake.c: the commands drivers send when they connect and while they
 * monitor a server: hello/isMaster, buildInfo, ping, getParameter,
 * getCmdLineOpts, hostInfo, whatsmyuri, listCommands, connectionStatus,
 * getLastError, getLog, the session commands and shutdown.
 *
 * What must stay true: hello's limits and wire versions are the ones the
 * wire module enforces, and the reply to the first hello of a connection
 * fixes its compression (what the client asked for that we support, in the
 * client's order).
 */
#include "audit/audit.h"
#include "cmd/cmd_int.h"
#include "exec/exec.h"
#include "common/log.h"
#include "repl/repl.h"
#include "server/server.h"
#include "wire/wire.h"

#include <openssl/opensslv.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <uv.h>

#define SESSION_TIMEOUT_MINUTES 30

static bson_oid_t process_id;
static pthread_once_t process_id_once = PTHREAD_ONCE_INIT;

static void process_id_init(void)
{
    bson_oid_init(&process_id, NULL);
}

static void append_compression(sbl_opctx_t *ctx, const bson_iter_t *it)
{
    bson_iter_t list;
    sbl_client_t *c = ctx->client;
    if (!BSON_ITER_HOLDS_ARRAY(it) || !bson_iter_recurse(it, &list))
        return;
    c->ncompressors = 0;
    while (bson_iter_next(&list) && c->ncompressors < 4) {
        if (!BSON_ITER_HOLDS_UTF8(&list))
            continue;
        int id = sbl_compressor_id(bson_iter_utf8(&list, NULL));
        if (id > 0)
            c->compressors[c->ncompressors++] = id;
    }
    bson_t arr;
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "compression", &arr);
    for (int i = 0; i < c->ncompressors; i++) {
        char key[16];
        const char *k;
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        bson_append_utf8(&arr, k, -1, sbl_compressor_name(c->compressors[i]), -1);
    }
    bson_append_array_end(ctx->reply, &arr);
}

static void log_client_metadata(sbl_opctx_t *ctx, const bson_iter_t *it)
{
    const uint8_t *data;
    uint32_t len;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || ctx->client->metadata != NULL)
        return;
    bson_iter_document(it, &len, &data);
    ctx->client->metadata = bson_new_from_data(data, len);
    if (ctx->client->metadata == NULL)
        return;
    bson_iter_t mit, name;
    if (bson_iter_init(&mit, ctx->client->metadata) &&
        bson_iter_find_descendant(&mit, "application.name", &name) && BSON_ITER_HOLDS_UTF8(&name))
        ctx->client->app_name = bson_iter_utf8(&name, NULL);
    bson_t attr = BSON_INITIALIZER;
    if (ctx->conn != NULL)
        BSON_APPEND_UTF8(&attr, "remote", sbl_conn_remote(ctx->conn));
    BSON_APPEND_UTF8(&attr, "client", "conn");
    BSON_APPEND_DOCUMENT(&attr, "doc", ctx->client->metadata);
    sbl_log(SBL_LOG_INFO, "NETWORK", 51800, "client metadata", &attr);
    bson_destroy(&attr);
    sbl_cmd_audit_client_metadata(ctx, ctx->client->metadata);
}

void sbl_cmd_append_topology_version(bson_t *r)
{
    bson_t tv;
    pthread_once(&process_id_once, process_id_init);
    BSON_APPEND_DOCUMENT_BEGIN(r, "topologyVersion", &tv);
    BSON_APPEND_OID(&tv, "processId", &process_id);
    BSON_APPEND_INT64(&tv, "counter", sbl_repl_topology_counter());
    bson_append_document_end(r, &tv);
}

/* The fields every hello/isMaster reply carries. */
static void append_hello_fields(bson_t *r, const sbl_client_t *client, bool is_hello,
                                bool hello_ok)
{
    pthread_once(&process_id_once, process_id_init);
    if (hello_ok)
        BSON_APPEND_BOOL(r, "helloOk", true);
    /* hello answers isWritablePrimary; the legacy isMaster/ismaster answer ismaster.
     * A replica set member says so only as PRIMARY, and adds its set's fields. */
    bool writable = sbl_repl_writable();
    if (is_hello)
        BSON_APPEND_BOOL(r, "isWritablePrimary", writable);
    else
        BSON_APPEND_BOOL(r, "ismaster", writable);
    sbl_cmd_append_topology_version(r);
    sbl_repl_append_hello(r);
    BSON_APPEND_INT32(r, "maxBsonObjectSize", SBL_MAX_BSON_SIZE);
    BSON_APPEND_INT32(r, "maxMessageSizeBytes", SBL_MAX_MESSAGE_SIZE);
    BSON_APPEND_INT32(r, "maxWriteBatchSize", SBL_MAX_WRITE_BATCH);
    BSON_APPEND_DATE_TIME(r, "localTime", sbl_now_ms());
    BSON_APPEND_INT32(r, "logicalSessionTimeoutMinutes", SESSION_TIMEOUT_MINUTES);
    BSON_APPEND_INT64(r, "connectionId", (int64_t)client->conn_id);
    BSON_APPEND_INT32(r, "minWireVersion", 0);
    BSON_APPEND_INT32(r, "maxWireVersion", 21);
    BSON_APPEND_BOOL(r, "readOnly", false);
}

/*
 * Awaitable hello (server monitoring).  A hello that carries our current
 * topologyVersion and maxAwaitTimeMS is answered as soon as the topology
 * changes (the replica set state's counter moves: a new primary, a
 * step-down, a config) or when maxAwaitTimeMS passes, so a driver learns of
 * a new primary at once.  A loop timer looks at the counter every
 * HELLO_POLL_MS (the awaitData getMore waits the same way).  With
 * exhaustAllowed the answers keep coming with moreToCome set, each one
 * starting a new wait, until the connection closes.  State machine:
 * WAITING (timer armed) -> counter moved or deadline -> reply (exhaust:
 * reply_more and wait again; else reply and free); a closing connection ->
 * cancel: close the timer, then release the request.
 */
#define HELLO_POLL_MS 10

typedef struct hello_wait {
    uv_timer_t timer;
    sbl_conn_t *conn;
    sbl_request_t *req;
    sbl_client_t *client;
    bool is_hello, hello_ok, exhaust;
    uint64_t await_ms;
    int64_t counter;     /* the topologyVersion.counter the client holds */
    int64_t deadline_ms; /* when maxAwaitTimeMS runs out */
} hello_wait_t;

static void hello_wait_closed(uv_handle_t *h)
{
    hello_wait_t *w = h->data;
    sbl_conn_reply(w->conn, w->req, NULL);
    free(w);
}

static void hello_wait_tick(uv_timer_t *t)
{
    hello_wait_t *w = t->data;
    int64_t counter = sbl_repl_topology_counter();
    if (counter == w->counter && sbl_now_ms() < w->deadline_ms)
        return;
    bson_t reply = BSON_INITIALIZER;
    append_hello_fields(&reply, w->client, w->is_hello, w->hello_ok);
    BSON_APPEND_DOUBLE(&reply, "ok", 1.0);
    if (w->exhaust) {
        sbl_conn_reply_more(w->conn, w->req, &reply);
        w->counter = counter; /* the client now holds this one */
        w->deadline_ms = sbl_now_ms() + (int64_t)w->await_ms;
    } else {
        w->client->hello_wait = NULL;
        sbl_conn_reply(w->conn, w->req, &reply);
        w->req = NULL;
        w->conn = NULL;
        uv_timer_stop(&w->timer);
        uv_close((uv_handle_t *)&w->timer, (uv_close_cb)free);
    }
    bson_destroy(&reply);
}

void sbl_hello_wait_cancel(sbl_client_t *client)
{
    hello_wait_t *w = client->hello_wait;
    if (w == NULL)
        return;
    client->hello_wait = NULL;
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, hello_wait_closed);
}

/* True when the hello asks to wait: our topologyVersion and maxAwaitTimeMS. */
static bool hello_is_awaitable(const bson_t *cmd, uint64_t *await_ms, int64_t *counterp)
{
    bson_iter_t it, tv;
    const uint8_t *data;
    uint32_t len;
    if (!bson_iter_init_find(&it, cmd, "maxAwaitTimeMS") || !BSON_ITER_HOLDS_NUMBER(&it) ||
        bson_iter_as_int64(&it) < 0)
        return false;
    *await_ms = (uint64_t)bson_iter_as_int64(&it);
    if (!bson_iter_init_find(&it, cmd, "topologyVersion") || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return false;
    bson_iter_document(&it, &len, &data);
    pthread_once(&process_id_once, process_id_init);
    if (!bson_iter_init_from_data(&tv, data, len) || !bson_iter_find(&tv, "processId") ||
        !BSON_ITER_HOLDS_OID(&tv) || !bson_oid_equal(bson_iter_oid(&tv), &process_id))
        return false; /* another process (a restart): answer at once */
    /* A counter behind ours: the member's state changed since; answer at once. */
    if (!bson_iter_init_from_data(&tv, data, len) || !bson_iter_find(&tv, "counter") ||
        !BSON_ITER_HOLDS_NUMBER(&tv))
        return false;
    *counterp = bson_iter_as_int64(&tv);
    if (*counterp != sbl_repl_topology_counter())
        return false;
    return true;
}

int sbl_cmd_hello(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t *r = ctx->reply;
    bool first = !ctx->client->hello_seen;
    bool is_hello = strcmp(ctx->name, "hello") == 0;
    bool hello_ok = bson_iter_init_find(&it, ctx->cmd, "helloOk") && bson_iter_as_bool(&it);
    uint64_t await_ms;
    int64_t counter;

    if (ctx->conn != NULL && ctx->req != NULL && ctx->client->hello_wait == NULL &&
        hello_is_awaitable(ctx->cmd, &await_ms, &counter)) {
        hello_wait_t *w = calloc(1, sizeof(*w));
        if (w != NULL) {
            w->conn = ctx->conn;
            w->req = ctx->req;
            w->client = ctx->client;
            w->is_hello = is_hello;
            w->hello_ok = hello_ok;
            w->exhaust = (ctx->req->flags & SBL_MSG_EXHAUST_ALLOWED) != 0;
            w->await_ms = await_ms;
            w->counter = counter;
            w->deadline_ms = sbl_now_ms() + (int64_t)await_ms;
            uv_timer_init(sbl_conn_loop(ctx->conn), &w->timer);
            w->timer.data = w;
            uv_timer_start(&w->timer, hello_wait_tick, await_ms < HELLO_POLL_MS ? await_ms : HELLO_POLL_MS,
                           HELLO_POLL_MS);
            ctx->client->hello_wait = w;
            ctx->deferred = true;
            return 0;
        }
    }

    append_hello_fields(r, ctx->client, is_hello, hello_ok);
    if (bson_iter_init_find(&it, ctx->cmd, "compression"))
        append_compression(ctx, &it);
    if (bson_iter_init_find(&it, ctx->cmd, "saslSupportedMechs") && BSON_ITER_HOLDS_UTF8(&it))
        sbl_cmd_auth_hello_mechs(ctx, bson_iter_utf8(&it, NULL));
    if (bson_iter_init_find(&it, ctx->cmd, "speculativeAuthenticate"))
        sbl_cmd_auth_hello_speculative(ctx, &it);
    if (first && bson_iter_init_find(&it, ctx->cmd, "client"))
        log_client_metadata(ctx, &it);
    ctx->client->hello_seen = true;
    return 0;
}

int sbl_cmd_build_info(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_t *r = ctx->reply, arr, doc;
    const int32_t va[] = {SBL_VERSION_ARRAY};

    BSON_APPEND_UTF8(r, "version", SBL_VERSION);
    BSON_APPEND_UTF8(r, "gitVersion", SBL_GIT_VERSION);
    BSON_APPEND_ARRAY_BEGIN(r, "modules", &arr);
    bson_append_array_end(r, &arr);
    BSON_APPEND_UTF8(r, "allocator", "system");
    BSON_APPEND_UTF8(r, "javascriptEngine", "none");
    BSON_APPEND_UTF8(r, "sysInfo", "deprecated");
    BSON_APPEND_ARRAY_BEGIN(r, "versionArray", &arr);
    for (int i = 0; i < 4; i++) {
        char key[4];
        snprintf(key, sizeof(key), "%d", i);
        BSON_APPEND_INT32(&arr, key, va[i]);
    }
    bson_append_array_end(r, &arr);
    BSON_APPEND_DOCUMENT_BEGIN(r, "openssl", &doc);
    BSON_APPEND_UTF8(&doc, "running", OpenSSL_version(OPENSSL_VERSION));
    BSON_APPEND_UTF8(&doc, "compiled", OPENSSL_VERSION_TEXT);
    bson_append_document_end(r, &doc);
    BSON_APPEND_DOCUMENT_BEGIN(r, "buildEnvironment", &doc);
    BSON_APPEND_UTF8(&doc, "distmod", "debian12");
    BSON_APPEND_UTF8(&doc, "distarch", "x86_64");
    BSON_APPEND_UTF8(&doc, "cc", "cc " __VERSION__);
    BSON_APPEND_UTF8(&doc, "target_arch", "x86_64");
    BSON_APPEND_UTF8(&doc, "target_os", "linux");
    bson_append_document_end(r, &doc);
    BSON_APPEND_INT32(r, "bits", 64);
    BSON_APPEND_BOOL(r, "debug", false);
    BSON_APPEND_INT32(r, "maxBsonObjectSize", SBL_MAX_BSON_SIZE);
    BSON_APPEND_ARRAY_BEGIN(r, "storageEngines", &arr);
    BSON_APPEND_UTF8(&arr, "0", "wiredTiger");
    bson_append_array_end(r, &arr);
    return 0;
}

int sbl_cmd_ping(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return 0;
}

/* ---- getParameter ----------------------------------------------------------- */

/* Append one parameter's value; false when the name is unknown. */
static bool append_parameter(bson_t *r, const char *name)
{
    const sbl_options_t *o = sbl_server_options();
    bson_iter_t it;
    if (strcmp(name, "auditAuthorizationSuccess") == 0) { /* changeable at run time */
        BSON_APPEND_BOOL(r, name, sbl_audit_auth_success());
        return true;
    }
    if (sbl_spill_append_parameter(r, name)) /* memory limits, changeable at run time */
        return true;
    if (strcmp(name, "autoMergerIntervalSecs") == 0) { /* changeable at run time */
        sbl_cmd_automerge_append_parameter(r); /* chunk_merge.c */
        return true;
    }
    if (sbl_repl_flow_append_parameter(r, name)) /* flow control's, most changeable */
        return true;
    if (sbl_cmd_rangedel_append_parameter(r, name)) /* changeable at run time */
        return true;
    if (strcmp(name, "replWriterThreadCount") == 0) { /* start-up only */
        BSON_APPEND_INT32(r, name, sbl_repl_writer_threads());
        return true;
    }
    if (strcmp(name, "featureCompatibilityVersion") == 0) {
        bson_t d;
        BSON_APPEND_DOCUMENT_BEGIN(r, name, &d);
        BSON_APPEND_UTF8(&d, "version", "7.0");
        bson_append_document_end(r, &d);
    } else if (strcmp(name, "authenticationMechanisms") == 0) {
        bson_t a;
        BSON_APPEND_ARRAY_BEGIN(r, name, &a);
        BSON_APPEND_UTF8(&a, "0", "SCRAM-SHA-1");
        BSON_APPEND_UTF8(&a, "1", "SCRAM-SHA-256");
        bson_append_array_end(r, &a);
    } else if (strcmp(name, "enableTestCommands") == 0) {
        BSON_APPEND_BOOL(r, name, false);
    } else if (strcmp(name, "logLevel") == 0) {
        BSON_APPEND_INT32(r, name, sbl_log_verbosity());
    } else if (strcmp(name, "quiet") == 0) {
        BSON_APPEND_BOOL(r, name, o->quiet);
    } else if (strcmp(name, "cursorTimeoutMillis") == 0) {
        BSON_APPEND_INT64(r, name, 600000);
    } else if (strcmp(name, "maxBSONDepth") == 0) {
        BSON_APPEND_INT32(r, name, 200);
    } else if (strcmp(name, "transactionLifetimeLimitSeconds") == 0 ||
               strcmp(name, "maxTransactionLockRequestTimeoutMillis") == 0 ||
               strcmp(name, "minSnapshotHistoryWindowInSeconds") == 0 ||
               strcmp(name, "keyRotationIntervalSecs") == 0) {
        sbl_cmd_mtxn_append_parameter(name, r); /* changeable at run time (txn.c) */
    } else if (strcmp(name, "journalCommitInterval") == 0) {
        BSON_APPEND_INT32(r, name, o->commit_interval_ms);
    } else if (strcmp(name, "syncdelay") == 0) {
        BSON_APPEND_DOUBLE(r, name, o->syncdelay_s);
    } else if (strcmp(name, "wiredTigerConcurrentReadTransactions") == 0 ||
               strcmp(name, "wiredTigerConcurrentWriteTransactions") == 0) {
        BSON_APPEND_INT32(r, name, 128);
    } else if (bson_iter_init_find(&it, &o->parameters, name)) {
        /* any other --setParameter as given at start-up; the names above
         * answer the value in force, also after a setParameter */
        sbl_append_value(r, name, -1, bson_iter_value(&it));
    } else {
        return false;
    }
    return true;
}

static const char *const known_parameters[] = {
    "auditAuthorizationSuccess", "authenticationMechanisms", "autoMergerIntervalSecs",
    "cursorTimeoutMillis", "enableTestCommands",
    "featureCompatibilityVersion", "internalQueryMaxBlockingSortMemoryUsageBytes",
    "internalDocumentSourceGroupMaxMemoryBytes", "allowDiskUseByDefault",
    "journalCommitInterval", "keyRotationIntervalSecs", "logLevel", "maxBSONDepth",
    "minSnapshotHistoryWindowInSeconds", "orphanCleanupDelaySecs",
    "receiveChunkWaitForRangeDeleterTimeoutMS",
    "quiet", "replWriterThreadCount", "syncdelay",
    "transactionLifetimeLimitSeconds", "wiredTigerConcurrentReadTransactions",
    "wiredTigerConcurrentWriteTransactions",
};

int sbl_cmd_get_parameter(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    bool all = false;
    size_t found = 0;

    bson_iter_init(&it, ctx->cmd);
    bson_iter_next(&it);
    if (BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), "*") == 0)
        all = true;
    else if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_t d;
        bson_iter_recurse(&it, &d);
        while (bson_iter_next(&d))
            if (strcmp(bson_iter_key(&d), "allParameters") == 0 && bson_iter_as_bool(&d))
                all = true;
    }
    if (all) {
        for (size_t i = 0; i < sizeof(known_parameters) / sizeof(known_parameters[0]); i++)
            append_parameter(ctx->reply, known_parameters[i]);
        sbl_repl_flow_append_all_parameters(ctx->reply);
        const sbl_options_t *o = sbl_server_options();
        bson_iter_init(&it, &o->parameters);
        while (bson_iter_next(&it)) {
            bson_iter_t dup;
            if (!bson_iter_init_find(&dup, ctx->reply, bson_iter_key(&it)))
                sbl_append_value(ctx->reply, bson_iter_key(&it), -1, bson_iter_value(&it));
        }
        return 0;
    }
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (k[0] == '$' || strcmp(k, "lsid") == 0 || strcmp(k, "comment") == 0)
            continue;
        bson_iter_t dup;
        if (bson_iter_init_find(&dup, ctx->reply, k))
            continue;
        if (append_parameter(ctx->reply, k))
            found++;
    }
    if (found == 0)
        return sbl_err_set(err, SBL_E_InvalidOptions, "no option found to get");
    return 0;
}

int sbl_cmd_get_cmd_line_opts(sbl_opctx_t *ctx, sbl_err_t *err)
{
    const sbl_options_t *o = sbl_server_options();
    bson_t arr;
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "argv", &arr);
    for (int i = 0; i < o->argc; i++) {
        char key[16];
        const char *k;
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        bson_append_utf8(&arr, k, -1, o->argv[i], -1);
    }
    bson_append_array_end(ctx->reply, &arr);
    BSON_APPEND_DOCUMENT(ctx->reply, "parsed", &o->parsed);
    return 0;
}

int sbl_cmd_host_info(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_t *r = ctx->reply, d;
    struct utsname u;
    char hn[256] = "localhost";
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    struct rlimit rl;

    uname(&u);
    gethostname(hn, sizeof(hn) - 1);
    BSON_APPEND_DOCUMENT_BEGIN(r, "system", &d);
    BSON_APPEND_DATE_TIME(&d, "currentTime", sbl_now_ms());
    BSON_APPEND_UTF8(&d, "hostname", hn);
    BSON_APPEND_INT32(&d, "cpuAddrSize", 64);
    BSON_APPEND_INT64(&d, "memSizeMB", (int64_t)pages * psize / (1024 * 1024));
    BSON_APPEND_INT64(&d, "memLimitMB", (int64_t)pages * psize / (1024 * 1024));
    BSON_APPEND_INT32(&d, "numCores", (int32_t)ncpu);
    BSON_APPEND_INT32(&d, "numPhysicalCores", (int32_t)ncpu);
    BSON_APPEND_UTF8(&d, "cpuArch", u.machine);
    BSON_APPEND_BOOL(&d, "numaEnabled", false);
    bson_append_document_end(r, &d);
    BSON_APPEND_DOCUMENT_BEGIN(r, "os", &d);
    BSON_APPEND_UTF8(&d, "type", "Linux");
    BSON_APPEND_UTF8(&d, "name", u.sysname);
    BSON_APPEND_UTF8(&d, "version", u.release);
    bson_append_document_end(r, &d);
    BSON_APPEND_DOCUMENT_BEGIN(r, "extra", &d);
    BSON_APPEND_UTF8(&d, "versionString", u.version);
    BSON_APPEND_UTF8(&d, "kernelVersion", u.release);
    BSON_APPEND_INT64(&d, "pageSize", psize);
    BSON_APPEND_INT64(&d, "numPages", pages);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        BSON_APPEND_INT64(&d, "maxOpenFiles", (int64_t)rl.rlim_cur);
    bson_append_document_end(r, &d);
    return 0;
}

int sbl_cmd_whatsmyuri(sbl_opctx_t *ctx, sbl_err_t *err)
{
    BSON_APPEND_UTF8(ctx->reply, "you", ctx->conn ? sbl_conn_remote(ctx->conn) : "0.0.0.0:0");
    return 0;
}

int sbl_cmd_list_commands(sbl_opctx_t *ctx, sbl_err_t *err)
{
    size_t n;
    const sbl_cmd_def_t *t = sbl_cmd_table(&n);
    bson_t cmds, c;
    BSON_APPEND_DOCUMENT_BEGIN(ctx->reply, "commands", &cmds);
    for (size_t i = 0; i < n; i++) {
        bson_append_document_begin(&cmds, t[i].name, -1, &c);
        BSON_APPEND_UTF8(&c, "help", t[i].help);
        BSON_APPEND_BOOL(&c, "adminOnly", (t[i].flags & SBL_CMD_ADMIN_ONLY) != 0);
        BSON_APPEND_BOOL(&c, "secondaryOk", true);
        BSON_APPEND_BOOL(&c, "requiresAuth", (t[i].flags & SBL_CMD_NO_AUTH) == 0);
        bson_append_document_end(&cmds, &c);
    }
    bson_append_document_end(ctx->reply, &cmds);
    return 0;
}

int sbl_cmd_connection_status(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_t info;
    bson_iter_t it;
    BSON_APPEND_DOCUMENT_BEGIN(ctx->reply, "authInfo", &info);
    sbl_cmd_auth_append_status(ctx, bson_iter_init_find(&it, ctx->cmd, "showPrivileges") &&
                                        bson_iter_as_bool(&it),
                               &info);
    bson_append_document_end(ctx->reply, &info);
    return 0;
}

int sbl_cmd_get_last_error(sbl_opctx_t *ctx, sbl_err_t *err)
{
    BSON_APPEND_INT64(ctx->reply, "connectionId", (int64_t)ctx->client->conn_id);
    BSON_APPEND_INT32(ctx->reply, "n", 0);
    BSON_APPEND_INT32(ctx->reply, "syncMillis", 0);
    BSON_APPEND_NULL(ctx->reply, "writtenTo");
    BSON_APPEND_NULL(ctx->reply, "err");
    return 0;
}

int sbl_cmd_get_log(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t arr;
    bson_iter_init(&it, ctx->cmd);
    bson_iter_next(&it);
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "Argument to getLog must be of type String; found %d",
                           (int)bson_iter_type(&it));
    const char *name = bson_iter_utf8(&it, NULL);
    if (strcmp(name, "*") == 0) {
        BSON_APPEND_ARRAY_BEGIN(ctx->reply, "names", &arr);
        BSON_APPEND_UTF8(&arr, "0", "global");
        BSON_APPEND_UTF8(&arr, "1", "startupWarnings");
        bson_append_array_end(ctx->reply, &arr);
        return 0;
    }
    if (strcmp(name, "startupWarnings") == 0) {
        BSON_APPEND_INT32(ctx->reply, "totalLinesWritten", 0);
        BSON_APPEND_ARRAY_BEGIN(ctx->reply, "log", &arr);
        bson_append_array_end(ctx->reply, &arr);
        return 0;
    }
    if (strcmp(name, "global") != 0)
        return sbl_err_set(err, SBL_E_OperationFailed, "No log named '%s'", name);
    size_t n;
    char **lines = sbl_log_recent(&n);
    BSON_APPEND_INT64(ctx->reply, "totalLinesWritten", (int64_t)n);
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "log", &arr);
    for (size_t i = 0; i < n; i++) {
        char key[16];
        const char *k;
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        bson_append_utf8(&arr, k, -1, lines[i], -1);
        bson_free(lines[i]);
    }
    bson_append_array_end(ctx->reply, &arr);
    bson_free(lines);
    return 0;
}

/* ---- shutdown --------------------------------------------------------------- */

int sbl_cmd_shutdown_cmd(sbl_opctx_t *ctx, sbl_err_t *err)
{
    sbl_log(SBL_LOG_INFO, "COMMAND", 4695400, "Terminating via shutdown command", NULL);
    sbl_server_request_shutdown();
    return 0;
}
