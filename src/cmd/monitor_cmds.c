/*
 * monitor_cmds.c: the commands that show what the server is doing: top,
 * currentOp, killOp and profile.  They read src/metrics (the operation
 * registry, top's table, the profiler settings) and never block a running
 * operation: currentOp copies each operation under its registry shard's lock
 * and filters the copies afterwards; killOp only raises the operation's flag.
 */
#include "cmd/cmd_int.h"
#include "agg/agg.h"
#include "auth/auth.h"
#include "exec/exec.h"
#include "query/query.h"
#include "server/server.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- top ----------------------------------------------------------------- */

static void append_cell(bson_t *d, const char *name, const sbl_top_cell_t *c)
{
    bson_t x;
    bson_append_document_begin(d, name, -1, &x);
    BSON_APPEND_INT64(&x, "time", c->time_us);
    BSON_APPEND_INT64(&x, "count", c->count);
    bson_append_document_end(d, &x);
}

int sbl_cmd_top(sbl_opctx_t *ctx, sbl_err_t *err)
{
    static const char *const kinds[SBL_TOP_KINDS] = {"queries", "getmore", "insert",
                                                    "update", "remove", "commands"};
    size_t n = 0;
    sbl_top_entry_t *v = sbl_metrics_top_snapshot(&n);
    bson_t totals, e;
    BSON_APPEND_DOCUMENT_BEGIN(ctx->reply, "totals", &totals);
    BSON_APPEND_UTF8(&totals, "note", "all times in microseconds");
    for (size_t i = 0; i < n; i++) {
        bson_append_document_begin(&totals, v[i].ns, -1, &e);
        append_cell(&e, "total", &v[i].total);
        append_cell(&e, "readLock", &v[i].read);
        append_cell(&e, "writeLock", &v[i].write);
        for (int k = 0; k < SBL_TOP_KINDS; k++)
            append_cell(&e, kinds[k], &v[i].kind[k]);
        bson_append_document_end(&totals, &e);
    }
    bson_append_document_end(ctx->reply, &totals);
    free(v);
    return 0;
}

/* ---- currentOp --------------------------------------------------------------- */

/* An operation in a multi-document transaction: its session and txnNumber,
 * so that its transaction is added after the registry's locks are dropped. */
typedef struct op_txn {
    sbl_lsid_t lsid;
    int64_t txn_number; /* -1: not in a transaction */
} op_txn_t;

typedef struct op_list {
    bson_t **docs;
    op_txn_t *txn; /* beside docs (NULL for the idle sessions' entries) */
    size_t n, cap;
    int64_t now_us, now_ms;
} op_list_t;

/* Room for one more entry; false when out of memory. */
static bool reserve(op_list_t *l)
{
    if (l->n < l->cap)
        return true;
    size_t cap = l->cap ? l->cap * 2 : 16;
    bson_t **docs = realloc(l->docs, cap * sizeof(*docs));
    if (docs == NULL)
        return false;
    l->docs = docs;
    op_txn_t *txn = realloc(l->txn, cap * sizeof(*txn));
    if (txn == NULL)
        return false;
    l->txn = txn;
    l->cap = cap;
    return true;
}

static void iso_time(int64_t ms, char *buf, size_t len)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    size_t k = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + k, len - k, ".%03dZ", (int)(ms % 1000));
}

/* Runs under a registry shard's lock: copy what currentOp shows, nothing more. */
static void collect_op(const sbl_op_t *op, void *arg)
{
    op_list_t *l = arg;
    char buf[64];
    if (!reserve(l))
        return;
    bson_t *d = bson_new();
    op_txn_t *tx = &l->txn[l->n];
    tx->txn_number = -1;
    int64_t us = l->now_us - op->start_us;
    BSON_APPEND_UTF8(d, "type", "op");
    BSON_APPEND_UTF8(d, "host", sbl_server_host());
    if (op->conn_id != 0) {
        snprintf(buf, sizeof(buf), "conn%llu", (unsigned long long)op->conn_id);
        BSON_APPEND_UTF8(d, "desc", buf);
        BSON_APPEND_INT64(d, "connectionId", (int64_t)op->conn_id);
    }
    if (op->client != NULL)
        BSON_APPEND_UTF8(d, "client", op->client);
    if (op->app_name != NULL)
        BSON_APPEND_UTF8(d, "appName", op->app_name);
    BSON_APPEND_BOOL(d, "active", true);
    iso_time(l->now_ms, buf, sizeof(buf));
    BSON_APPEND_UTF8(d, "currentOpTime", buf);
    BSON_APPEND_INT64(d, "opid", op->opid);
    BSON_APPEND_INT64(d, "secs_running", us / 1000000);
    BSON_APPEND_INT64(d, "microsecs_running", us);
    BSON_APPEND_UTF8(d, "op", op->op_type);
    BSON_APPEND_UTF8(d, "ns", op->ns);
    sbl_metrics_append_cmd(d, "command", op->cmd);
    BSON_APPEND_INT32(d, "numYields", 0);
    BSON_APPEND_BOOL(d, "killPending", sbl_op_is_killed(op));
    BSON_APPEND_BOOL(d, "waitingForLock", false);
    bson_t locks;
    BSON_APPEND_DOCUMENT_BEGIN(d, "locks", &locks);
    bson_append_document_end(d, &locks);
    if (op->lsid_id != NULL) {
        memcpy(tx->lsid.id, op->lsid_id, sizeof(tx->lsid.id));
        memcpy(tx->lsid.uid, op->lsid_uid, sizeof(tx->lsid.uid));
        sbl_lsid_append(d, "lsid", &tx->lsid);
        tx->txn_number = op->txn_number;
    }
    l->docs[l->n++] = d;
}

/* The transactions of the operations running in one (outside the registry's
 * locks: the transactions have a lock of their own). */
static void add_transactions(op_list_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->txn[i].txn_number >= 0)
            sbl_cmd_mtxn_describe(&l->txn[i].lsid, l->txn[i].txn_number, l->docs[i]);
}

/* Open transactions between their commands, as mongod shows them: type
 * "idleSession", not active, with the session and the transaction. */
static void add_idle_sessions(op_list_t *l)
{
    bson_t **idle = NULL;
    size_t n = sbl_cmd_mtxn_idle(&idle);
    char buf[64];
    for (size_t i = 0; i < n; i++) {
        if (!reserve(l)) {
            bson_destroy(idle[i]);
            continue;
        }
        l->txn[l->n].txn_number = -1;
        bson_t *d = bson_new();
        BSON_APPEND_UTF8(d, "type", "idleSession");
        BSON_APPEND_UTF8(d, "host", sbl_server_host());
        BSON_APPEND_BOOL(d, "active", false);
        iso_time(l->now_ms, buf, sizeof(buf));
        BSON_APPEND_UTF8(d, "currentOpTime", buf);
        bson_concat(d, idle[i]);
        BSON_APPEND_BOOL(d, "waitingForLock", false);
        bson_t locks;
        BSON_APPEND_DOCUMENT_BEGIN(d, "locks", &locks);
        bson_append_document_end(d, &locks);
        bson_destroy(idle[i]);
        l->docs[l->n++] = d;
    }
    free(idle);
}

/* Idle cursors ($currentOp's idleCursors), copied under the cursor registry's lock. */
static void collect_cursor(const sbl_cursor_info_t *c, void *arg)
{
    op_list_t *l = arg;
    char buf[64];
    if (!reserve(l))
        return;
    l->txn[l->n].txn_number = -1;
    bson_t *d = bson_new(), cur, lsid;
    BSON_APPEND_UTF8(d, "type", "idleCursor");
    BSON_APPEND_UTF8(d, "host", sbl_server_host());
    BSON_APPEND_BOOL(d, "active", false);
    iso_time(l->now_ms, buf, sizeof(buf));
    BSON_APPEND_UTF8(d, "currentOpTime", buf);
    BSON_APPEND_UTF8(d, "ns", c->ns);
    if (c->has_lsid) {
        BSON_APPEND_DOCUMENT_BEGIN(d, "lsid", &lsid);
        bson_append_binary(&lsid, "id", 2, BSON_SUBTYPE_UUID, c->lsid_id, 16);
        bson_append_document_end(d, &lsid);
    }
    BSON_APPEND_DOCUMENT_BEGIN(d, "cursor", &cur);
    BSON_APPEND_INT64(&cur, "cursorId", c->id);
    BSON_APPEND_DATE_TIME(&cur, "createdDate", c->created_ms);
    BSON_APPEND_DATE_TIME(&cur, "lastAccessDate", c->last_use_ms);
    BSON_APPEND_INT64(&cur, "nDocsReturned", c->n_docs);
    BSON_APPEND_INT64(&cur, "nBatchesReturned", c->n_batches);
    BSON_APPEND_BOOL(&cur, "noCursorTimeout", false);
    BSON_APPEND_BOOL(&cur, "tailable", (c->flags & SBL_CURSOR_TAILABLE) != 0);
    BSON_APPEND_BOOL(&cur, "awaitData", (c->flags & SBL_CURSOR_AWAIT_DATA) != 0);
    bson_append_document_end(d, &cur);
    l->docs[l->n++] = d;
}

/* What currentOp and $currentOp list besides the running operations. */
typedef struct curop_opts {
    bool idle_sessions, idle_cursors;
} curop_opts_t;

/* Every entry, unfiltered, into l (the caller frees l's documents). */
static void collect_all(op_list_t *l, const curop_opts_t *o)
{
    struct timespec mono;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    l->now_us = (int64_t)mono.tv_sec * 1000000 + mono.tv_nsec / 1000;
    l->now_ms = sbl_now_ms();
    sbl_ops_foreach(collect_op, l);
    add_transactions(l);
    if (o->idle_sessions)
        add_idle_sessions(l);
    if (o->idle_cursors)
        sbl_cursors_foreach_idle(collect_cursor, l);
}

static void free_list(op_list_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->docs[i] != NULL)
            bson_destroy(l->docs[i]);
    free(l->docs);
    free(l->txn);
}

/* Fields of a currentOp command that are not part of its filter. */
static bool is_option(const char *k)
{
    return k[0] == '$' || strcmp(k, "currentOp") == 0 || strcmp(k, "comment") == 0 ||
           strcmp(k, "lsid") == 0 || strcmp(k, "apiVersion") == 0 ||
           strcmp(k, "apiStrict") == 0 || strcmp(k, "apiDeprecationErrors") == 0 ||
           strcmp(k, "maxTimeMS") == 0 || strcmp(k, "txnNumber") == 0;
}

int sbl_cmd_current_op(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_t filter = BSON_INITIALIZER, arr;
    bson_iter_t it;
    sbl_matcher_t *m = NULL;
    op_list_t l = {0};
    int rc = 0;

    bson_iter_init(&it, ctx->cmd);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "$all") == 0 || strcmp(k, "$ownOps") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_NUMBER(&it)) {
                rc = sbl_err_set(err, SBL_E_TypeMismatch, "BSON field '%s' is the wrong type '%s', "
                                 "expected type 'bool'", k, "other");
                goto out;
            }
            continue; /* only running operations are registered: $all shows the same */
        }
        if (!is_option(k))
            sbl_append_value(&filter, k, -1, bson_iter_value(&it));
    }
    if (!bson_empty(&filter) && (m = sbl_matcher_new(&filter, err)) == NULL) {
        rc = err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "invalid currentOp filter");
        goto out;
    }

    collect_all(&l, &(curop_opts_t){.idle_sessions = true});
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "inprog", &arr);
    uint32_t n = 0;
    for (size_t i = 0; i < l.n; i++) {
        int32_t pos = -1;
        if (m == NULL || sbl_matcher_match(m, l.docs[i], &pos)) {
            char key[16];
            const char *k;
            bson_uint32_to_string(n++, &k, key, sizeof(key));
            bson_append_document(&arr, k, -1, l.docs[i]);
        }
    }
    bson_append_array_end(ctx->reply, &arr);
    if (sbl_cmd_fsync_locked())
        BSON_APPEND_BOOL(ctx->reply, "fsyncLock", true);
out:
    free_list(&l);
    if (m != NULL)
        sbl_matcher_free(m);
    bson_destroy(&filter);
    return rc;
}

/* Is the entry the caller's own: its session's uid is the caller's? */
static bool own_entry(const sbl_opctx_t *ctx, const bson_t *d)
{
    bson_iter_t it, uid;
    const uint8_t *data;
    uint32_t len;
    bson_subtype_t st;
    if (!bson_iter_init_find(&it, d, "lsid") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &uid) || !bson_iter_find(&uid, "uid") ||
        !BSON_ITER_HOLDS_BINARY(&uid))
        return false;
    bson_iter_binary(&uid, &st, &len, &data);
    return len == 32 && memcmp(data, ctx->user_uid, 32) == 0;
}

/*
 * The $currentOp stage, first of {aggregate: 1} on admin (aggregate.c): its
 * entries become the pipeline's input documents.  Options as in mongod 7.0;
 * idleConnections is accepted but lists nothing (connections between
 * commands are not registered).  With authentication on, allUsers: true needs
 * the inprog action, and allUsers: false shows the entries of the caller's
 * sessions only.
 */
int sbl_cmd_current_op_stage(sbl_opctx_t *ctx, const bson_iter_t *spec, sbl_docvec_t *dv,
                             sbl_err_t *err)
{
    static const char *const bools[] = {"allUsers", "idleConnections", "idleCursors",
                                        "idleSessions", "localOps", "truncateOps", "backtrace",
                                        "targetAllNodes", NULL};
    bool val[8] = {false, false, false, true, false, true, false, false};
    bson_iter_t o;
    if (!BSON_ITER_HOLDS_DOCUMENT(spec))
        return sbl_err_set(err, SBL_E_FailedToParse, "$currentOp options must be specified "
                                                     "in an object, but found: %s",
                           sbl_type_name(bson_iter_type(spec)));
    bson_iter_recurse(spec, &o);
    while (bson_iter_next(&o)) {
        const char *k = bson_iter_key(&o);
        size_t i = 0;
        while (bools[i] != NULL && strcmp(bools[i], k) != 0)
            i++;
        if (bools[i] == NULL)
            return sbl_err_set(err, SBL_E_FailedToParse,
                               "Unrecognized option '%s' in $currentOp stage.", k);
        if (!BSON_ITER_HOLDS_BOOL(&o))
            return sbl_err_set(err, SBL_E_FailedToParse,
                               "The '%s' parameter of the $currentOp stage must be a boolean "
                               "value, but found: %s", k, sbl_type_name(bson_iter_type(&o)));
        val[i] = bson_iter_bool(&o);
    }
    bool all_users = val[0];
    if (all_users)
        SBL_RET(sbl_cmd_auth_require(ctx, "inprog", NULL, NULL, err));
    bool own_only = !all_users && ctx->conn != NULL && sbl_auth_enabled() &&
                    ctx->client->auth_user != NULL;
    op_list_t l = {0};
    collect_all(&l, &(curop_opts_t){.idle_sessions = val[3], .idle_cursors = val[2]});
    sbl_docvec_clear(dv);
    for (size_t i = 0; i < l.n; i++) {
        if (own_only && !own_entry(ctx, l.docs[i]))
            continue;
        sbl_docvec_push(dv, l.docs[i]);
        l.docs[i] = NULL;
    }
    free_list(&l);
    return 0;
}

/* ---- killOp ------------------------------------------------------------------ */

int sbl_cmd_kill_op(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    int64_t opid;
    if (!bson_iter_init_find(&it, ctx->cmd, "op"))
        return sbl_err_set(err, SBL_E_NoSuchKey, "Missing expected field \"op\"");
    if (!BSON_ITER_HOLDS_NUMBER(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "Expected field \"op\" to have numeric type");
    SBL_RET(sbl_get_int64(&it, &opid, err));
    sbl_op_kill(opid); /* as in MongoDB, an unknown opid is not an error */
    BSON_APPEND_UTF8(ctx->reply, "info", "attempting to kill op");
    return 0;
}

/* ---- profile ------------------------------------------------------------------- */

int sbl_cmd_profile(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    int64_t level, slowms = -1;
    double rate = -1;
    bool has_slowms = false, has_rate = false;

    bson_iter_init_find(&it, ctx->cmd, "profile");
    if (!BSON_ITER_HOLDS_NUMBER(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "profile level must be a number");
    SBL_RET(sbl_get_int64(&it, &level, err));
    if (level < -1 || level > 2)
        return sbl_err_set(err, SBL_E_BadValue, "Invalid profiling level: %lld", (long long)level);
    if (bson_iter_init_find(&it, ctx->cmd, "slowms")) {
        if (!BSON_ITER_HOLDS_NUMBER(&it))
            return sbl_err_set(err, SBL_E_TypeMismatch, "'slowms' must be a number");
        SBL_RET(sbl_get_int64(&it, &slowms, err));
        if (slowms < INT32_MIN || slowms > INT32_MAX)
            return sbl_err_set(err, SBL_E_BadValue, "'slowms' is out of range");
        has_slowms = true;
    }
    if (bson_iter_init_find(&it, ctx->cmd, "sampleRate")) {
        if (!BSON_ITER_HOLDS_NUMBER(&it))
            return sbl_err_set(err, SBL_E_TypeMismatch, "'sampleRate' must be a number");
        rate = bson_iter_as_double(&it);
        if (!(rate >= 0.0 && rate <= 1.0))
            return sbl_err_set(err, SBL_E_BadValue,
                               "'sampleRate' must be between 0.0 and 1.0 inclusive");
        has_rate = true;
    }

    /* The reply shows the settings as they were before this command. */
    int was = sbl_profile_level(ctx->db);
    BSON_APPEND_INT32(ctx->reply, "was", was);
    BSON_APPEND_INT32(ctx->reply, "slowms", sbl_profile_slowms());
    BSON_APPEND_DOUBLE(ctx->reply, "sampleRate", sbl_profile_sample_rate());
    if (level >= 0)
        sbl_profile_set_level(ctx->db, (int)level);
    if (has_slowms)
        sbl_profile_set_slowms((int)slowms);
    if (has_rate)
        sbl_profile_set_sample_rate(rate);
    return 0;
}
