/*
 * dispatch.c: the one place every command goes through.  In order: lookup in the command
 * table, admin-database check, generic arguments (maxTimeMS, writeConcern), choice of thread
 * (network loop for quick commands, libuv's worker pool for ones that may scan), the handler,
 * the reply ({ok: 1} or {ok: 0, errmsg, code, codeName}), metrics (counters, latency, top, the
 * operation registry, slow log, profiler), and for j:true writes the wait for the journal
 * (group commit) before replying.
 *
 * What must stay true: every request gets exactly one sbl_conn_reply, and a j:true write is
 * acknowledged only from the journal flusher's callback, i.e. after the commit is on disk.
 */
#include "js/js.h"
#include "audit/audit.h"
#include "cmd/capped.h"
#include "cmd/cmd_int.h"
#include "cmd/failpoint.h"
#include "exec/exec.h"
#include "common/log.h"
#include "expr/expr.h"
#include "query/query.h"
#include "repl/repl.h"
#include "server/server.h"
#include "shard/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

/* ---- the pending command ------------------------------------------------ */

typedef struct pending {
    sbl_opctx_t ctx;
    const sbl_cmd_def_t *def;
    bson_t reply;
    sbl_err_t err;
    int rc;
    uv_work_t work;
    sbl_op_t op;  /* in the registry while the handler runs */
    bool on_coll; /* op.ns names a collection (top counts it) */
    sbl_routed_t routed; /* a router's command on a shard: its versions and gates */
    bool unsatisfiable_wc; /* a transaction's commit/abort asked w > members: it runs, then
                            * gets writeConcernError UnsatisfiableWriteConcern (as mongod) */
    uint64_t op_ts; /* its write concern waits for it too: writes commit in parallel */
    bson_t *out;    /* the reply being built: &reply, or a getMore's in rbuf */
    bson_writer_t *rw; /* a getMore's reply: after room for the wire header in rbuf */
    uint8_t *rbuf;     /* (malloc'd; handed to the connection with the reply) */
    size_t rbuf_len;
    sbl_doc_index_t cmd_ix; /* ctx.cmd's fields, for sbl_doc_find_top while it runs */
} pending_t;

/* ---- counters (serverStatus.opcounters; kept by src/metrics) ------------- */

static bool stmt_is_point(const bson_iter_t *stmt);

/* The elements of cmd's array field; *points (asked by update and delete):
 * there are at most 64, each a statement whose q is a point on _id
 * (needs_worker's question, answered in the same walk). */
static int64_t array_len(const bson_t *cmd, const char *field, bool ask, bool *points)
{
    bson_iter_t it, child;
    int64_t n = 0;
    bool found = sbl_doc_find_top(cmd, field, &it) && BSON_ITER_HOLDS_ARRAY(&it) &&
                 bson_iter_recurse(&it, &child);
    *points = found && ask;
    while (found && bson_iter_next(&child))
        if (++n > 64 || (*points && !stmt_is_point(&child)))
            *points = false;
    return n;
}

/* Counts the command in opcounters; returns how many it counted (an insert's
 * documents); *points: see array_len (false for other commands). */
static int64_t count_op(const sbl_cmd_def_t *def, const bson_t *cmd, bool *points)
{
    const char *n = def->name, *stmts = NULL; /* stmts: counted one by one */
    sbl_opc_t opc = SBL_OPC_COMMAND;
    if (strcmp(n, "insert") == 0) {
        opc = SBL_OPC_INSERT;
        stmts = "documents";
    } else if (strcmp(n, "update") == 0) {
        opc = SBL_OPC_UPDATE;
        stmts = "updates";
    } else if (strcmp(n, "delete") == 0) {
        opc = SBL_OPC_DELETE;
        stmts = "deletes";
    } else if (strcmp(n, "find") == 0) {
        opc = SBL_OPC_QUERY;
    } else if (strcmp(n, "getMore") == 0) {
        opc = SBL_OPC_GETMORE;
    }
    *points = false;
    int64_t k = stmts != NULL ? array_len(cmd, stmts, opc != SBL_OPC_INSERT, points) : 1;
    sbl_metrics_count_op(opc, k);
    return k;
}

/* ---- the operation as monitoring sees it ---------------------------------- */

static const char *op_type(const char *n)
{
    if (strcmp(n, "find") == 0)
        return "query";
    if (strcmp(n, "insert") == 0 || strcmp(n, "update") == 0)
        return n;
    if (strcmp(n, "delete") == 0)
        return "remove";
    if (strcmp(n, "getMore") == 0)
        return "getmore";
    return "command";
}

/* "db.coll" for a command on a collection (true), else "db.$cmd" (false). */
static bool op_ns(const sbl_opctx_t *ctx, char *ns, size_t len)
{
    bson_iter_t it;
    const char *coll = NULL;
    sbl_doc_first(ctx->cmd, &coll); /* its first field, when a string */
    if (coll == NULL && strcmp(ctx->name, "getMore") == 0 &&
        bson_iter_init_find(&it, ctx->cmd, "collection") && BSON_ITER_HOLDS_UTF8(&it))
        coll = bson_iter_utf8(&it, NULL);
    sbl_join_dot(ns, len, ctx->db, coll != NULL && coll[0] != '\0' ? coll : "$cmd");
    return coll != NULL && coll[0] != '\0';
}

static sbl_top_kind_t top_kind(const char *n)
{
    if (strcmp(n, "find") == 0)
        return SBL_TOP_QUERIES;
    if (strcmp(n, "getMore") == 0)
        return SBL_TOP_GETMORE;
    if (strcmp(n, "insert") == 0)
        return SBL_TOP_INSERT;
    if (strcmp(n, "update") == 0 || strcasecmp(n, "findAndModify") == 0)
        return SBL_TOP_UPDATE;
    if (strcmp(n, "delete") == 0)
        return SBL_TOP_REMOVE;
    return SBL_TOP_COMMANDS;
}

static void op_begin(pending_t *p)
{
    sbl_opctx_t *ctx = &p->ctx;
    sbl_op_t *op = &p->op;
    op->conn_id = ctx->client->conn_id;
    op->client = ctx->conn != NULL ? sbl_conn_remote(ctx->conn) : NULL;
    op->app_name = ctx->client->app_name;
    op->db = ctx->db;
    op->cmd = ctx->cmd;
    op->cmd_name = p->def->name;
    op->op_type = op_type(p->def->name);
    p->on_coll = op_ns(ctx, op->ns, sizeof(op->ns));
    op->lsid_id = ctx->has_lsid ? ctx->lsid_id : NULL;
    op->lsid_uid = ctx->has_lsid ? ctx->user_uid : NULL;
    op->txn_number = sbl_cmd_mtxn_number(ctx);
    sbl_op_register(op);
    ctx->op = op;
}

/* Latency, top, per-command counts, the slow log and the profiler. */
static void op_end(pending_t *p)
{
    sbl_opctx_t *ctx = &p->ctx;
    const sbl_cmd_def_t *def = p->def;
    int64_t us = sbl_now_us() - ctx->start_us;
    size_t nrows;

    if ((def->flags & (SBL_CMD_WRITE | SBL_CMD_SLOW)) == (SBL_CMD_WRITE | SBL_CMD_SLOW))
        sbl_metrics_record_latency(SBL_LAT_WRITES, us);
    else if ((def->flags & (SBL_CMD_READ | SBL_CMD_SLOW)) == (SBL_CMD_READ | SBL_CMD_SLOW))
        sbl_metrics_record_latency(SBL_LAT_READS, us);
    else
        sbl_metrics_record_latency(SBL_LAT_COMMANDS, us);
    sbl_metrics_count_command((size_t)(def - sbl_cmd_table(&nrows)), p->rc != 0);
    if (p->on_coll)
        sbl_metrics_top_record(p->op.ns, top_kind(def->name), (def->flags & SBL_CMD_WRITE) != 0, us);

    sbl_op_report_t r = {
        .op = &p->op,
        .duration_us = us,
        .rc = p->rc,
        .errmsg = p->err.msg,
        .reply = p->out,
        .plan_summary = ctx->plan_summary,
        .keys_examined = ctx->keys_examined,
        .docs_examined = ctx->docs_examined,
        .cursor_id = ctx->cursor_reply ? ctx->cursor_id : 0,
        .nreturned = ctx->cursor_reply ? ctx->nreturned : -1,
        .writes = ctx->writes,
    };
    sbl_metrics_op_done(&r);
    sbl_op_unregister(&p->op);
    ctx->op = NULL;
}

/* The client of commands the server runs itself (sbl_cmd_run: the applier, the
 * balancer...): one per thread, as its lazy fields (uid, audit id) are written. */
static _Thread_local sbl_client_t internal_client;

/* Quick commands run on the network loop; ones that may scan go to a worker. */
static bool filter_is_point(const bson_t *filter)
{
    bson_iter_t it;
    if (bson_iter_init(&it, filter) && bson_iter_next(&it) && strcmp(bson_iter_key(&it), "_id") == 0) {
        bson_type_t t = bson_iter_type(&it); /* {_id: scalar}: one point, no range to build */
        if (t != BSON_TYPE_DOCUMENT && t != BSON_TYPE_ARRAY && t != BSON_TYPE_REGEX &&
            !bson_iter_next(&it))
            return true;
    }
    /* A $where runs JavaScript for as long as its time limit allows: never on
     * a loop (the bytes "$where\0" also match a string value: then it merely
     * runs on a worker). */
    if (memmem(bson_get_data(filter), filter->len, "$where", 7) != NULL)
        return false;
    sbl_id_range_t r;
    sbl_id_range_from_filter(filter, &r);
    bool point = r.kind == SBL_ID_POINTS && r.npoints <= 16;
    bool none = r.kind == SBL_ID_NONE;
    sbl_id_range_destroy(&r);
    return point || none;
}

static bool doc_field(const bson_t *d, const char *name, bson_t *out)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;
    if (!sbl_doc_find_top(d, name, &it) || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return false; /* d is (part of) a request: it passed sbl_bson_check */
    bson_iter_document(&it, &len, &data);
    return bson_init_static(out, data, len);
}

/* A statement (of update or delete) whose q is a point on _id. */
static bool stmt_is_point(const bson_iter_t *stmt)
{
    const uint8_t *data;
    uint32_t len;
    bson_t s, q;
    if (!BSON_ITER_HOLDS_DOCUMENT(stmt))
        return false;
    bson_iter_document(stmt, &len, &data);
    return bson_init_static(&s, data, len) && doc_field(&s, "q", &q) && filter_is_point(&q);
}

/* A linearizable read: on a primary of a set, and not an aggregate that writes. */
static int linearizable_allowed(const sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it, st, stage;
    SBL_RET(sbl_repl_linearizable_check(err));
    if (strcmp(ctx->name, "aggregate") != 0 || !sbl_doc_find_top(ctx->cmd, "pipeline", &it) ||
        !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &st))
        return 0;
    while (bson_iter_next(&st))
        if (BSON_ITER_HOLDS_DOCUMENT(&st) && bson_iter_recurse(&st, &stage) &&
            bson_iter_next(&stage) &&
            (strcmp(bson_iter_key(&stage), "$out") == 0 ||
             strcmp(bson_iter_key(&stage), "$merge") == 0))
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "%s cannot be used with a 'linearizable' read concern level",
                               bson_iter_key(&stage));
    return 0;
}

/* counted, points: what count_op returned for the command (an insert's documents). */
static bool needs_worker(const sbl_cmd_def_t *def, const bson_t *cmd, int64_t counted, bool points)
{
    bson_t f;
    /* it waits for replication (repl_read.c) off the loop: a read, or a
     * transaction's first statement, a write too, waiting for its snapshot's
     * time to be majority-committed (on a loop, a few of them waiting left
     * the member answering nothing, heartbeats included) */
    if (sbl_cmd_read_concern_waits(cmd))
        return true;
    if ((def->flags & SBL_CMD_WRITE) && sbl_cmd_fsync_locked())
        return true; /* it waits for fsyncUnlock off the loop */
    if (!(def->flags & SBL_CMD_SLOW))
        return false;
    const char *n = def->name;
    if (strcmp(n, "find") == 0) {
        if (!doc_field(cmd, "filter", &f))
            return true;
        if (filter_is_point(&f))
            return false;
        /* A bounded _id range scan (YCSB's scan) is quick too. */
        bson_iter_t it;
        sbl_id_range_t r;
        int64_t limit = 0;
        if (sbl_doc_find_top(cmd, "limit", &it) && BSON_ITER_HOLDS_NUMBER(&it))
            limit = bson_iter_as_int64(&it);
        sbl_id_range_from_filter(&f, &r);
        bool quick = r.kind == SBL_ID_RANGE && limit > 0 && limit <= 1000 &&
                     bson_iter_init(&it, &f) && bson_iter_next(&it) && !bson_iter_next(&it);
        sbl_id_range_destroy(&r);
        if (quick) {
            bson_t sort;
            if (doc_field(cmd, "sort", &sort)) {
                bson_iter_init(&it, &sort);
                quick = bson_count_keys(&sort) == 0 ||
                        (bson_count_keys(&sort) == 1 && bson_iter_next(&it) &&
                         strcmp(bson_iter_key(&it), "_id") == 0);
            }
        }
        return !quick;
    }
    if (strcmp(n, "update") == 0 || strcmp(n, "delete") == 0)
        return !points;
    if (strcmp(n, "findAndModify") == 0 || strcmp(n, "findandmodify") == 0)
        return !doc_field(cmd, "query", &f) || !filter_is_point(&f);
    if (strcmp(n, "insert") == 0)
        return counted > 64;
    if (strcmp(n, "count") == 0)
        return doc_field(cmd, "query", &f) && !bson_empty(&f);
    if (strcmp(n, "getMore") == 0) /* a change stream's next events from memory, an oplog tail's */
        return !sbl_cursor_get_more_quick(cmd);
    return true;
}

/* Did the client allow reads on a secondary? */
static bool secondary_ok(const sbl_opctx_t *ctx)
{
    bson_iter_t it, m;
    if (ctx->req->opcode == SBL_OP_QUERY && (ctx->req->query_flags & 4))
        return true;
    if (bson_iter_init_find(&it, ctx->cmd, "$readPreference") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &m) && bson_iter_find(&m, "mode") && BSON_ITER_HOLDS_UTF8(&m))
        return strcmp(bson_iter_utf8(&m, NULL), "primary") != 0;
    return false;
}

/* killOp's flag, for JavaScript that runs long (src/js asks it as it runs). */
static bool js_op_killed(const void *op)
{
    return op != NULL && sbl_op_is_killed(op);
}

static void execute_inner(pending_t *p);

/* Run the command on this thread.  p->op_ts: the newest oplog ts its writes took. */
static void execute(pending_t *p)
{
    execute_inner(p);
    sbl_routed_exit(&p->routed);
    p->op_ts = sbl_repl_take_thread_op_ts();
}

/* $clusterTime gossip (mongod's logical clock): a primary's next oplog
 * entry gets a later ts than any cluster time it has been shown, so a
 * write routed after one on another shard sorts after it (change streams
 * merged by a router rely on it).  With a keyFile the signature is checked
 * first (repl_keys.c); a time over a year ahead is ignored, as mongod's
 * maxAcceptableLogicalClockDriftSecs rejects it. */
static int gossip_cluster_time(sbl_opctx_t *ctx, const sbl_cmd_def_t *def, const bson_iter_t *ct,
                               sbl_err_t *err)
{
    bson_iter_t f;
    uint32_t t, i;
    if (!BSON_ITER_HOLDS_DOCUMENT(ct) || !bson_iter_recurse(ct, &f) ||
        !bson_iter_find(&f, "clusterTime") || !BSON_ITER_HOLDS_TIMESTAMP(&f))
        return 0;
    int rc = sbl_repl_check_cluster_time(ct, sbl_cmd_may_advance_cluster_time(ctx), err);
    if (rc != 0 && (def->flags & SBL_CMD_NO_AUTH) && ctx->conn != NULL &&
        ctx->client->auth_user == NULL) {
        sbl_err_clear(err); /* hello, saslStart ... before authentication: ignored, as mongod */
        return 0;
    }
    SBL_RET(rc);
    bson_iter_timestamp(&f, &t, &i);
    if ((int64_t)t <= sbl_now_ms() / 1000 + 365LL * 24 * 3600)
        sbl_repl_clock_advance(((uint64_t)t << 32) | i);
    return 0;
}

/* Check the generic arguments and run the handler on this thread. */
static void execute_inner(pending_t *p)
{
    sbl_opctx_t *ctx = &p->ctx;
    bson_iter_t it, mt, wcit, lsid, txnit, acit, stit;
    bool has_mt = false, has_wc = false, has_lsid = false, has_txn = false, has_ac = false;
    bool has_st = false;

    ctx->ss = sbl_session_get();
    ctx->start_us = sbl_now_us();
    /* One pass over the keys for the generic arguments read here (the
     * command passed sbl_bson_check; first byte before strcmp).  The first
     * occurrence counts, as bson_iter_init_find would. */
    uint32_t off = 4, at;
    const char *k;
    bool bad;
    while (sbl_doc_top_next(ctx->cmd, &off, &at, &k, &bad)) {
        if (!has_mt && k[0] == 'm' && strcmp(k, "maxTimeMS") == 0)
            has_mt = sbl_doc_top_iter(ctx->cmd, at, k, &mt);
        else if (!has_wc && k[0] == 'w' && strcmp(k, "writeConcern") == 0)
            has_wc = sbl_doc_top_iter(ctx->cmd, at, k, &wcit);
        else if (!has_lsid && k[0] == 'l' && strcmp(k, "lsid") == 0)
            has_lsid = sbl_doc_top_iter(ctx->cmd, at, k, &lsid);
        else if (!has_txn && k[0] == 't' && strcmp(k, "txnNumber") == 0)
            has_txn = sbl_doc_top_iter(ctx->cmd, at, k, &txnit);
        else if (!has_ac && k[0] == 'a' && strcmp(k, "autocommit") == 0)
            has_ac = sbl_doc_top_iter(ctx->cmd, at, k, &acit);
        else if (!has_st && k[0] == 's' && strcmp(k, "startTransaction") == 0)
            has_st = sbl_doc_top_iter(ctx->cmd, at, k, &stit);
        else if (k[0] == '$' && strcmp(k, "$clusterTime") == 0 &&
                 sbl_doc_top_iter(ctx->cmd, at, k, &it) &&
                 (p->rc = gossip_cluster_time(ctx, p->def, &it, &p->err)) != 0)
            return;
    }
    if (bad) {
        has_mt = sbl_doc_find_top(ctx->cmd, "maxTimeMS", &mt);
        has_wc = sbl_doc_find_top(ctx->cmd, "writeConcern", &wcit);
        has_lsid = sbl_doc_find_top(ctx->cmd, "lsid", &lsid);
        has_txn = sbl_doc_find_top(ctx->cmd, "txnNumber", &txnit);
        has_ac = sbl_doc_find_top(ctx->cmd, "autocommit", &acit);
        has_st = sbl_doc_find_top(ctx->cmd, "startTransaction", &stit);
    }
    /* A write without writeConcern takes the cluster-wide default (read
     * through the internal runner: before this command's session begins). */
    bson_t dwc;
    bool has_dwc = (p->def->flags & SBL_CMD_WRITE) && !has_wc && ctx->req != NULL &&
                   (!has_ac || strcmp(ctx->name, "commitTransaction") == 0 ||
                    strcmp(ctx->name, "abortTransaction") == 0) &&
                   sbl_cmd_default_write_concern(&dwc);
    if ((p->rc = sbl_cmd_session_begin(ctx, has_lsid ? &lsid : NULL, &p->err)) != 0) {
        if (has_dwc)
            bson_destroy(&dwc);
        return;
    }
    if (has_mt) {
        it = mt;
        int64_t ms = 0;
        if ((p->rc = sbl_get_int64(&it, &ms, &p->err)) == 0 && (ms < 0 || ms > INT32_MAX))
            p->rc = sbl_err_set(&p->err, SBL_E_BadValue, "%lld value for maxTimeMS is out of range",
                                (long long)ms);
        if (p->rc != 0) {
            if (has_dwc)
                bson_destroy(&dwc);
            return;
        }
        /* getMore's maxTimeMS is an awaitData cursor's wait, not a limit on
         * the work (a change stream's batch may take longer to build);
         * sbl_cursor_get_more applies it to other cursors itself. */
        if (ms > 0 && p->def->fn != sbl_cursor_get_more)
            ctx->deadline_us = ctx->start_us + ms * 1000;
    }
    if ((p->def->flags & SBL_CMD_WRITE) && has_wc) {
        if ((p->rc = sbl_cmd_parse_write_concern(&wcit, &ctx->wc, &p->err)) ==
                SBL_E_UnsatisfiableWriteConcern &&
            (strcmp(ctx->name, "commitTransaction") == 0 ||
             strcmp(ctx->name, "abortTransaction") == 0)) {
            p->unsatisfiable_wc = true;
            sbl_err_clear(&p->err);
            p->rc = 0;
            ctx->wc.w = 1;
        }
        if (p->rc != 0)
            return;
    } else if (has_dwc) { /* no writeConcern: the cluster-wide default */
        bson_t wrap = BSON_INITIALIZER;
        bson_iter_t dit;
        BSON_APPEND_DOCUMENT(&wrap, "writeConcern", &dwc);
        if (bson_iter_init_find(&dit, &wrap, "writeConcern"))
            p->rc = sbl_cmd_parse_write_concern(&dit, &ctx->wc, &p->err);
        ctx->wc.given = false;
        bson_destroy(&wrap);
    }
    if (has_dwc)
        bson_destroy(&dwc);
    if (p->rc != 0)
        return;
    if (ctx->req != NULL && ctx->req->more_to_come)
        ctx->wc.w = 0;
    /* Replication state: a member that is not primary takes no writes
     * (NotWritablePrimary), except to "local". */
    if ((p->def->flags & SBL_CMD_WRITE) &&
        (p->rc = sbl_repl_check_write(sbl_cmd_write_db(ctx), &p->err)) != 0)
        return;
    /* A command with a txnNumber (a transaction's statement, its commit or
     * abort, a retryable write) runs on the primary only, as mongod's
     * transaction participant refuses it elsewhere, reads included. */
    if (has_txn && ctx->req != NULL && sbl_repl_enabled() && !sbl_repl_writable()) {
        p->rc = sbl_err_set(&p->err, SBL_E_NotWritablePrimary,
                            "Not primary so we cannot begin or continue a transaction");
        return;
    }
    /* Reads on a secondary need secondaryOk (OP_QUERY's flag, or an OP_MSG
     * read preference other than primary); getMore and killCursors do not
     * (drivers send no read preference with them, as mongod expects). */
    if ((p->def->flags & SBL_CMD_READ) && !(p->def->flags & (SBL_CMD_WRITE | SBL_CMD_ANY_MEMBER)) &&
        ctx->req != NULL &&
        !sbl_repl_writable() &&
        (p->rc = sbl_repl_check_read(ctx->db, secondary_ok(ctx), &p->err)) != 0)
        return;
    /* A router's command on a shard (mongod's order: a member that is not primary refused
     * it above, so the router looks for the new primary instead of retrying here): into its
     * critical-section gates, its routing versions checked (routed.c). */
    if (sbl_routed_any(&p->routed) && (p->rc = sbl_routed_enter(&p->routed, ctx, &p->err)) != 0)
        return;
    /* collectionUUID: the named collection must be the one the client means (on a
     * shard too: a sharded collection has one UUID on every shard, as in mongod). */
    if ((p->rc = sbl_cmd_check_coll_uuid(ctx, p->out, &p->err)) != 0)
        return;
    /* Read concerns that wait: afterClusterTime before the read, a
     * linearizable read's majority-acknowledged no-op after it. */
    bool lin = false;
    uint64_t after = 0;
    /* A transaction's first command, a write too, waits for its afterClusterTime. */
    ctx->start_txn = has_st ? &stit : NULL;
    if (((p->def->flags & SBL_CMD_READ) || (has_ac && has_st)) && ctx->req != NULL) {
        sbl_cmd_read_concern_of(ctx->cmd, &lin, &after);
        if (lin && (p->rc = linearizable_allowed(ctx, &p->err)) != 0)
            return;
    }
    /* In currentOp from here on: killOp reaches the waits below. */
    op_begin(p);
    if (has_txn && p->def->fn == sbl_cmd_coordinate_commit)
        has_txn = false; /* it names the transaction it coordinates; it runs in none */
    /* The afterClusterTime wait; a retryable write's or transaction's
     * txnNumber checked and its session checked out (and in again below,
     * whatever happens); readConcern snapshot outside a transaction: the
     * handler reads one snapshot at a timestamp (snapshot_read.c). */
    if ((after != 0 && (p->rc = sbl_repl_wait_applied(after, ctx, ctx->deadline_us, &p->err))) ||
        (has_txn && (p->rc = sbl_cmd_txn_begin(ctx, &txnit, has_ac ? &acit : NULL, &p->err))) ||
        (p->rc = sbl_cmd_snapshot_begin(ctx, &p->err)) != 0) {
        sbl_cmd_txn_end(ctx);
        sbl_cmd_mtxn_end(ctx, &p->rc, &p->err);
        op_end(p);
        return;
    }
    int64_t txn_number = sbl_cmd_mtxn_number(ctx); /* known once the transaction began */
    if (txn_number != p->op.txn_number)
        sbl_op_set_txn_number(&p->op, txn_number);
    if ((p->def->flags & SBL_CMD_WRITE) && sbl_cmd_fsync_locked())
        p->rc = sbl_cmd_fsync_wait(ctx, &p->err);
    if (p->rc == 0 && sbl_cmd_flow_gated(p->def, ctx)) /* flow control's ticket */
        p->rc = sbl_cmd_flow_ticket(ctx, true, &p->err);
    sbl_capped_kick_unhurried((p->def->flags & SBL_CMD_WRITE) ? &ctx->wc : NULL); /* to op_end */
    if (p->rc == 0) {
        /* Server-side JavaScript stops at this operation's deadline; an error a
         * $where could only leave pending becomes the command's. */
        sbl_js_opstate_t js;
        sbl_js_op_begin(&js, ctx->deadline_us, js_op_killed, ctx->op);
        sbl_err_t outer_match; /* likewise an $expr's evaluation error (query.h) */
        sbl_matcher_op_begin(&outer_match);
        sbl_cmd_prepare_wait_t pw; /* a prepared transaction's write: wait (prepare_wait.c) */
        sbl_cmd_prepare_wait_begin(&pw, ctx, p->def);
        p->rc = p->def->fn(ctx, &p->err);
        while (sbl_cmd_prepare_wait_again(&pw, &p->rc, &p->err, p->out))
            p->rc = p->def->fn(ctx, &p->err);
        sbl_cmd_prepare_wait_end(&pw);
        sbl_err_t jerr, merr;
        int jrc = sbl_js_op_end(&js, &jerr), mrc = sbl_matcher_op_end(&outer_match, &merr);
        if ((jrc != 0 || mrc != 0) && p->rc == 0) {
            p->err = jrc != 0 ? jerr : merr;
            p->rc = p->err.code;
        }
    }
    sbl_cmd_snapshot_end(ctx, p->rc);
    sbl_cmd_txn_end(ctx);
    sbl_cmd_mtxn_end(ctx, &p->rc, &p->err);
    op_end(p);
    sbl_capped_kick_unhurried(NULL);
    if (p->rc == 0 && lin)
        p->rc = sbl_repl_linearizable_wait(ctx->deadline_us, &p->err);
}

/* Whether field k of a failing handler's reply goes into the error reply of
 * code (121's errInfo, 11000's keys, 359's violations, 283's images ...). */
static bool error_detail(const char *k, int code)
{
    char w[48];
    if (snprintf(w, sizeof(w), " %s ", k) >= (int)sizeof(w))
        return false;
    return strstr(" errInfo keyPattern keyValue errorLabels vReceived vWanted shardId violations ",
                  w) != NULL ||
           (code == SBL_E_WouldChangeOwningShard &&
            strstr(" preImage postImage shouldUpsert ", w) != NULL) ||
           (code == SBL_E_StaleDbVersion && strcmp(k, "db") == 0) ||
           (code == SBL_E_CollectionUUIDMismatch &&
            strstr(" db collectionUUID expectedCollection actualCollection ", w) != NULL);
}

/* Wrap the handler's fields into the final reply document. */
static void build_reply(pending_t *p, bson_t *out)
{
    if (p->rc == 0) {
        bson_concat(out, p->out);
        BSON_APPEND_DOUBLE(out, "ok", 1.0);
        return;
    }
    BSON_APPEND_DOUBLE(out, "ok", 0.0);
    BSON_APPEND_UTF8(out, "errmsg", p->err.msg);
    BSON_APPEND_INT32(out, "code", p->err.code ? p->err.code : p->rc);
    BSON_APPEND_UTF8(out, "codeName", sbl_err_name(p->err.code ? p->err.code : p->rc));
    int code = p->err.code ? p->err.code : p->rc;
    if (code == SBL_E_NotWritablePrimary)
        sbl_cmd_append_topology_version(out);
    if (code == SBL_E_ChangeStreamFatalError || code == SBL_E_ChangeStreamHistoryLost) {
        bson_t labels; /* drivers must not resume after these (mongod labels them) */
        BSON_APPEND_ARRAY_BEGIN(out, "errorLabels", &labels);
        BSON_APPEND_UTF8(&labels, "0", "NonResumableChangeStreamError");
        bson_append_array_end(out, &labels);
    }
    sbl_repl_append_cluster_time(out);
    bson_iter_t it;
    if (p->ctx.cmd != NULL && !bson_has_field(p->out, "errorLabels"))
        sbl_cmd_txn_error_labels(&p->ctx, p->err.code ? p->err.code : p->rc, out);
    if (bson_iter_init(&it, p->out))
        while (bson_iter_next(&it))
            if (error_detail(bson_iter_key(&it), code))
                sbl_append_iter(out, bson_iter_key(&it), -1, &it);
}

static void pending_free(pending_t *p)
{
    sbl_routed_free(&p->routed);
    sbl_shard_filter_release(p->ctx.shard_filter);
    if (p->rw != NULL) {
        bson_writer_destroy(p->rw);
        free(p->rbuf);
    }
    bson_destroy(&p->reply);
    free(p);
}

/*
 * Exhaust cursors: a getMore sent with OP_MSG's exhaustAllowed whose cursor
 * stays open and whose batch is not empty (or awaited data: an oplog
 * fetcher's stream) is answered with moreToCome, and the server runs it
 * again once the socket took the reply (exhaust_next); the client sends
 * nothing until a reply without moreToCome (the cursor exhausted, an error,
 * an empty batch of a tailable cursor without awaitData) ends the stream,
 * as mongod streams them.  A closed connection ends it and kills the cursor.
 */
static bool exhaust_continues(pending_t *p, int64_t *cursor_id)
{
    sbl_request_t *req = p->ctx.req;
    bool awaits = false;
    if (p->rc != 0 || p->ctx.conn == NULL || req == NULL || p->def == NULL ||
        sbl_conn_is_closing(p->ctx.conn))
        return false;
    if (req->opcode == SBL_OP_MSG) {
        if (!(req->flags & SBL_MSG_EXHAUST_ALLOWED) || req->more_to_come ||
            strcmp(p->def->name, "getMore") != 0)
            return false;
        awaits = p->ctx.cursor_awaits;
    } else if (!sbl_wire_legacy_exhaust(req)) {
        return false; /* a legacy find streams from its first batch on */
    }
    int32_t n = sbl_wire_batch_count(p->out, cursor_id);
    return (n > 0 || (n == 0 && awaits)) && *cursor_id != 0;
}

static void dispatch_pending(pending_t *p, bool force_worker);
static pending_t *pending_start(sbl_conn_t *conn, sbl_request_t *req);

#define ROOM_WASTE_MAX ((size_t)1024 * 1024) /* reply_with_room */
#define EXHAUST_LOOP_DEPTH 8 /* batches made inside each other's reply; then a worker */
static _Thread_local int exhaust_depth; /* on this loop's stack now */

/* The next batch of req's exhaust stream, once conn wrote what it owed
 * (sbl_conn_when_drained), dispatched as the client's own getMore would be
 * (an oplog tail's on the loop: a worker's hand-over cost a streaming
 * primary 14k instructions per entry); a closed connection ends it. */
static void exhaust_next(sbl_conn_t *conn, void *arg)
{
    sbl_request_t *req = arg;
    pending_t *p;
    if (sbl_conn_is_closing(conn)) { /* sbl_capped_exhaust_end kills the cursor */
        sbl_capped_exhaust_end(conn, req);
        sbl_conn_reply(conn, req, NULL);
        return;
    }
    if ((p = pending_start(conn, req)) == NULL)
        return;
    dispatch_pending(p, ++exhaust_depth > EXHAUST_LOOP_DEPTH);
    exhaust_depth--;
}

static void send_reply(pending_t *p)
{
    sbl_capped_exhaust_end(p->ctx.conn, p->ctx.req); /* when its connection closed */
    if (p->rc == 0) {
        /* Success: the handler's fields plus ok, without copying them. */
        BSON_APPEND_DOUBLE(p->out, "ok", 1.0);
        sbl_repl_append_cluster_time(p->out);
        int64_t cursor_id;
        if (exhaust_continues(p, &cursor_id)) {
            sbl_conn_t *conn = p->ctx.conn;
            sbl_request_t *req = p->ctx.req;
            sbl_conn_reply_more(conn, req, p->out);
            pending_free(p);
            if (req->legacy_find)
                sbl_wire_legacy_next(req, cursor_id);
            sbl_conn_when_drained(conn, exhaust_next, req);
            return;
        }
        if (p->rw != NULL && p->rbuf_len - p->out->len <= ROOM_WASTE_MAX + SBL_WIRE_MSG_HEAD) {
            /* the buffer goes to the connection as it is */
            uint8_t *mem = p->rbuf;
            p->rbuf = NULL;
            sbl_conn_reply_owned(p->ctx.conn, p->ctx.req, mem, p->out->len);
        } else {
            sbl_conn_reply(p->ctx.conn, p->ctx.req, p->out);
        }
        pending_free(p);
        return;
    }
    bson_t out = BSON_INITIALIZER;
    build_reply(p, &out);
    sbl_conn_reply(p->ctx.conn, p->ctx.req, &out);
    bson_destroy(&out);
    pending_free(p);
}

static void durable_cb(void *arg, int rc)
{
    pending_t *p = arg;
    if (rc != 0) {
        /* committed, the flush failed: never acknowledged as journaled */
        p->rc = sbl_err_set(&p->err, SBL_E_OperationFailed,
                            "the write committed but the journal flush failed: it may not "
                            "survive a crash; see the server log");
    }
    send_reply(p);
}

/* A failed authentication's reply waits on a loop timer (slows password guessing
 * without blocking the loop); the connection dispatches nothing meanwhile. */
typedef struct delayed_reply {
    uv_timer_t timer;
    pending_t *p;
} delayed_reply_t;

static void delayed_closed(uv_handle_t *h)
{
    free(h->data);
}

static void delayed_fire(uv_timer_t *t)
{
    delayed_reply_t *d = t->data;
    send_reply(d->p);
    uv_close((uv_handle_t *)&d->timer, delayed_closed);
}

static bool delay_auth_failure(pending_t *p)
{
    delayed_reply_t *d;
    if (p->rc != SBL_E_AuthenticationFailed || p->ctx.conn == NULL ||
        (d = calloc(1, sizeof(*d))) == NULL)
        return false;
    d->p = p;
    d->timer.data = d;
    uv_timer_init(sbl_conn_loop(p->ctx.conn), &d->timer);
    uv_timer_start(&d->timer, delayed_fire, (uint64_t)sbl_cmd_auth_fail_delay_ms(p->ctx.client), 0);
    return true;
}

static void finish(pending_t *p);

/* An audited change is acknowledged only after its audit event is written. */
static void audit_written_cb(void *arg, int rc)
{
    pending_t *p = arg;
    if (rc != 0)
        p->rc = sbl_err_set(&p->err, rc, "audit log write failed: the change was made but its "
                            "audit event is not written yet (it will be once the audit log "
                            "can be written again)");
    finish(p);
}

/* Write concern beyond this member: the reply waits in sbl_repl_await_async's
 * list, holding no thread; whichever thread ends the wait (the waiter, or a
 * replSetUpdatePosition inside another connection's command) hands it to
 * this connection's loop. */
static void repl_wait_done(void *arg, int code, const char *msg)
{
    pending_t *p = arg;
    if (code != 0)
        sbl_cmd_append_wc_error(p->out, code, msg);
    sbl_conn_defer_replies(true);
    send_reply(p);
    sbl_conn_defer_replies(false);
}

/* With j (w: N, a tag set; w:"majority": repl_wait.c) our journal flush,
 * asked for as the write ends, overlaps the others' work; then the wait. */
static void journaled_then_wait(void *arg, int rc)
{
    pending_t *p = arg;
    sbl_write_concern_t *wc = &p->ctx.wc;
    if (rc != 0)
        durable_cb(p, rc); /* not acknowledged as journaled: no wait */
    else
        sbl_repl_await_async(p->op_ts, wc->w, wc->majority, wc->mode, wc->wtimeout_ms,
                             repl_wait_done, p);
}

static bool needs_repl_wait(const pending_t *p)
{
    return p->rc == 0 && p->ctx.conn != NULL && p->def != NULL &&
           (p->def->flags & SBL_CMD_WRITE) && sbl_repl_enabled() &&
           (p->ctx.wc.majority || p->ctx.wc.w > 1 || p->ctx.wc.mode[0] != '\0');
}

static void finish(pending_t *p)
{
    if (p->rc == 0 && p->unsatisfiable_wc) {
        p->unsatisfiable_wc = false; /* the reply is sent below, as for any write */
        sbl_cmd_append_wc_error(p->out, SBL_E_UnsatisfiableWriteConcern,
                                "Not enough data-bearing nodes");
    }
    if (p->ctx.close_instead && p->ctx.conn != NULL) {
        /* onPrimaryTransactionalWrite: the write ran; the client gets no reply. */
        p->ctx.deferred = true;
        p->rc = 0;
        sbl_conn_close_request(p->ctx.conn, p->ctx.req);
    }
    if (delay_auth_failure(p))
        return;
    if (p->rc == 0 && p->ctx.deferred) {
        sbl_capped_await_start(p->ctx.conn, p->ctx.req); /* a parked awaitData getMore */
        pending_free(p); /* the handler owns conn/req now and replies itself */
        return;
    }
    if (p->rc == 0 && p->ctx.wrote && sbl_cmd_audit_wait(&p->ctx, audit_written_cb, p))
        return;
    /* j:true waits for the journal even when the command changed nothing:
     * an update that matched nothing, or a delete of an absent document, may
     * have seen the effect of a w:1 write that is not on disk yet, and its
     * acknowledgement must not report a state a crash could undo (nor, for
     * replication, one the newest entry's loss could).  A write waits for its
     * own entry alone: what it read had committed at a lower ts. */
    if (needs_repl_wait(p)) {
        p->op_ts = p->op_ts != 0 ? p->op_ts : sbl_repl_last_op_ts(); /* none: the newest */
        if (p->ctx.wc.majority && p->ctx.wc.mode[0] == '\0')
            sbl_repl_await_majority_journaled(p->op_ts, p->ctx.wc.wtimeout_ms, repl_wait_done, p);
        else if (p->ctx.wc.j)
            sbl_storage_on_durable(journaled_then_wait, p);
        else
            journaled_then_wait(p, 0);
        return;
    }
    if (p->rc == 0 && p->ctx.wc.j) {
        sbl_storage_on_durable(durable_cb, p);
        return;
    }
    send_reply(p);
}

static void work_cb(uv_work_t *w)
{
    pending_t *p = w->data;
    const sbl_doc_index_t *prev = sbl_doc_index_use(&p->cmd_ix);
    execute(p);
    sbl_doc_index_use(prev);
}

static void after_work_cb(uv_work_t *w, int status)
{
    pending_t *p = w->data;
    if (status == UV_ECANCELED && p->rc == 0)
        p->rc = sbl_err_set(&p->err, SBL_E_InterruptedAtShutdown, "interrupted at shutdown");
    finish(p);
}

/* Look the command up and check what can be checked before running it. */
static int prepare(pending_t *p, sbl_err_t *err)
{
    const char *str, *name = sbl_doc_first(p->ctx.cmd, &str); /* NULL: empty or unreadable */
    if (name == NULL)
        return sbl_err_set(err, SBL_E_FailedToParse, "no command specified");
    if (p->ctx.db[0] == '\0')
        return sbl_err_set(err, 40571, "OP_MSG requests require a $db argument");
    p->def = sbl_cmd_lookup(name);
    if (p->def == NULL)
        return sbl_err_set(err, SBL_E_CommandNotFound, "no such command: '%s'", name);
    p->ctx.name = p->def->name;
    if ((p->def->flags & SBL_CMD_ADMIN_ONLY) && strcmp(p->ctx.db, "admin") != 0)
        return sbl_err_set(err, SBL_E_Unauthorized,
                           "%s may only be run against the admin database.", p->def->name);
    return sbl_cmd_auth_check(&p->ctx, p->def, err);
}

/* pending_t embeds a bson_t, which asks for 128-byte alignment. */
static pending_t *pending_new(void)
{
    size_t size = (sizeof(pending_t) + 127) & ~(size_t)127;
    pending_t *p = aligned_alloc(128, size);
    if (p != NULL)
        memset(p, 0, sizeof(*p));
    return p;
}

/* A pending request for req on conn, or NULL after answering it with an
 * out-of-memory error. */
static pending_t *pending_start(sbl_conn_t *conn, sbl_request_t *req)
{
    pending_t *p = pending_new();
    if (p == NULL) {
        bson_t out = BSON_INITIALIZER;
        BSON_APPEND_DOUBLE(&out, "ok", 0.0);
        BSON_APPEND_UTF8(&out, "errmsg", "out of memory");
        BSON_APPEND_INT32(&out, "code", SBL_E_ExceededMemoryLimit);
        BSON_APPEND_UTF8(&out, "codeName", sbl_err_name(SBL_E_ExceededMemoryLimit));
        sbl_conn_reply(conn, req, &out);
        bson_destroy(&out);
        return NULL;
    }
    bson_init(&p->reply);
    p->out = &p->reply;
    p->ctx.conn = conn;
    p->ctx.req = req;
    p->ctx.client = sbl_conn_data(conn);
    if (p->ctx.client == NULL)
        p->ctx.client = &internal_client;
    sbl_routed_take(&p->routed, &req->cmd);
    p->ctx.cmd = &req->cmd;
    p->ctx.db = req->db;
    p->ctx.reply = p->out;
    p->ctx.wc.w = 1;
    return p;
}

/* Build p's reply after room for its OP_MSG header (a getMore's batch,
 * which may be large): the connection sends that buffer as it is, without
 * a copy of the reply into a message (sbl_conn_reply_owned), unless more
 * than ROOM_WASTE_MAX of it is unused (a find's getMore reserves 16 MiB):
 * the buffer is held until the socket takes it, so such a reply is copied
 * into one of its size as before. */

static void reply_with_room(pending_t *p)
{
    bson_t *b;
    p->rw = bson_writer_new(&p->rbuf, &p->rbuf_len, SBL_WIRE_MSG_HEAD, bson_realloc_ctx, NULL);
    if (p->rw != NULL && bson_writer_begin(p->rw, &b)) {
        p->out = p->ctx.reply = b;
        return;
    }
    if (p->rw != NULL)
        bson_writer_destroy(p->rw);
    free(p->rbuf);
    p->rw = NULL;
    p->rbuf = NULL;
}

/* Run p's checked command on this thread, or queue it for a worker (true:
 * after_work_cb finishes it). */
static bool run_or_queue(pending_t *p, bool force_worker)
{
    if (p->def->fn == sbl_cursor_get_more && sbl_wire_reply_plain(p->ctx.req))
        reply_with_room(p);
    bool points;
    int64_t counted = count_op(p->def, p->ctx.cmd, &points);
    /* During a migration or movePrimary, or on a new primary before its
     * migration recovery, a router's command may wait: never on the loop thread. */
    if (sbl_routed_may_wait(&p->routed))
        force_worker = true;
    /* While a transaction is prepared, reads and writes may wait for it: on
     * a worker; commands that end transactions are never queued behind them. */
    if (sbl_prepare_outstanding() > 0 && (p->def->flags & (SBL_CMD_READ | SBL_CMD_WRITE)) &&
        !(p->def->flags & SBL_CMD_ADMIN_ONLY))
        force_worker = true;
    if ((p->def->flags & SBL_CMD_WRITE) &&
        (sbl_repl_fp_holds_writes() || sbl_repl_flow_throttling()))
        force_worker = true; /* tests hold a write; flow control may make it wait */
    if (force_worker || needs_worker(p->def, p->ctx.cmd, counted, points)) {
        p->work.data = p;
        sbl_audit_seal(); /* this loop's events so far go before the worker's */
        if (uv_queue_work(sbl_conn_loop(p->ctx.conn), &p->work, work_cb, after_work_cb) == 0)
            return true;
    }
    sbl_prepare_no_wait(true);
    sbl_cmd_flow_on_loop(true);
    execute(p);
    sbl_cmd_flow_on_loop(false);
    sbl_prepare_no_wait(false);
    return false;
}

/* The command's fields are indexed for its lookups (sbl_doc_index_t); the
 * thread's index is put back before finish, which may free p. */
static void dispatch_pending(pending_t *p, bool force_worker)
{
    bool queued = false;
    sbl_doc_index_take(&p->cmd_ix, p->ctx.req ? &p->ctx.req->cmd_ix : NULL, p->ctx.cmd);
    const sbl_doc_index_t *prev = sbl_doc_index_use(&p->cmd_ix);
    p->rc = prepare(p, &p->err);
    if ((p->rc = sbl_cmd_audit_check(&p->ctx, p->rc, &p->err)) != 0) {
        sbl_metrics_count_op(SBL_OPC_COMMAND, 1);
    } else if (sbl_failpoint_armed() && sbl_failpoint_command(&p->ctx, &p->rc, &p->err)) {
        /* failCommand: an error reply, a closed connection or a block */
    } else if (p->def->fn == sbl_cursor_get_more && !sbl_failpoint_armed() &&
               !sbl_routed_any(&p->routed) && sbl_cursor_park_early(&p->ctx)) {
        /* a getMore that would only wait parks at once: it runs when it wakes */
    } else {
        queued = run_or_queue(p, force_worker);
    }
    sbl_doc_index_use(prev);
    if (!queued)
        finish(p);
}

void sbl_cmd_dispatch(sbl_conn_t *conn, sbl_request_t *req)
{
    pending_t *p = pending_start(conn, req);
    if (p != NULL)
        dispatch_pending(p, false);
}

typedef struct run_wait {
    int code;
    char msg[256];
} run_wait_t;

static void run_wait_done(void *arg, int code, const char *msg)
{
    run_wait_t *w = arg;
    w->code = code;
    snprintf(w->msg, sizeof(w->msg), "%s", msg ? msg : "");
}

int sbl_cmd_await_replication(uint64_t ts, int w, bool majority, int64_t timeout_ms,
                              char *msg, size_t msg_len)
{
    run_wait_t rw = {0};
    sbl_repl_await(ts, w, majority, timeout_ms, run_wait_done, &rw);
    snprintf(msg, msg_len, "%s", rw.msg);
    return rw.code;
}

/* A server-run write that names a write concern beyond this member (the
 * transaction coordinator's decision, migration and config documents) waits
 * for it here, blocking the calling thread (never a network loop: these run
 * on workers and the server's own threads); a failed wait is the reply's
 * writeConcernError, as a client's would be. */
static void run_await_write_concern(pending_t *p)
{
    sbl_write_concern_t *wc = &p->ctx.wc;
    if (p->rc != 0 || !wc->given || p->def == NULL || !(p->def->flags & SBL_CMD_WRITE) ||
        !sbl_repl_enabled() || (!wc->majority && wc->w <= 1))
        return;
    char msg[256];
    uint64_t ts = sbl_repl_last_op_ts();
    int code = sbl_cmd_await_replication(p->op_ts > ts ? p->op_ts : ts, wc->w, wc->majority,
                                         wc->wtimeout_ms, msg, sizeof(msg));
    if (code == 0)
        return;
    bson_t wce;
    BSON_APPEND_DOCUMENT_BEGIN(p->out, "writeConcernError", &wce);
    BSON_APPEND_INT32(&wce, "code", code);
    BSON_APPEND_UTF8(&wce, "codeName", sbl_err_name(code));
    BSON_APPEND_UTF8(&wce, "errmsg", msg);
    bson_append_document_end(p->out, &wce);
}

void sbl_cmd_run(const char *db, const bson_t *cmd, bson_t *reply)
{
    pending_t p;
    memset(&p, 0, sizeof(p));
    bson_init(&p.reply);
    p.out = &p.reply;
    p.ctx.client = &internal_client;
    p.ctx.cmd = cmd;
    p.ctx.db = db;
    p.ctx.reply = &p.reply;
    p.ctx.wc.w = 1;
    if ((p.rc = prepare(&p, &p.err)) == 0) {
        bool points;
        count_op(p.def, cmd, &points);
        execute(&p);
        run_await_write_concern(&p);
    }
    if (p.rc == 0 && p.ctx.wc.j)
        sbl_storage_flush(NULL);
    build_reply(&p, reply);
    bson_destroy(&p.reply);
}

/* ---- connections and lifecycle --------------------------------------------- */

static void client_free(void *arg)
{
    sbl_client_t *c = arg;
    if (c->metadata != NULL)
        bson_destroy(c->metadata);
    sbl_cmd_auth_client_free(c);
    free(c);
}

void sbl_cmd_conn_open(sbl_conn_t *conn)
{
    sbl_client_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return; /* commands then run with the internal client's defaults */
    c->conn_id = sbl_conn_id(conn);
    sbl_conn_set_data(conn, c, client_free);
}

void sbl_cmd_conn_close(sbl_conn_t *conn)
{
    sbl_client_t *c = sbl_conn_data(conn);
    if (c != NULL)
        sbl_hello_wait_cancel(c);
    sbl_capped_await_cancel(conn); /* a parked awaitData getMore (capped.c) */
}

/* The cursor reaper: once a minute (or every logicalSessionRefreshMillis when
 * shorter), kill cursors idle for 10 minutes and abort transactions past
 * their lifetime; and on a thread of its own, the sessions' job, whose first
 * run builds an index that waits for every older transaction (one the reaper
 * would abort, a prepared one): the reaper must not wait behind it. */
static uv_thread_t reaper_thread, refresh_thread;
static uv_mutex_t reaper_mu;
static uv_cond_t reaper_cv;
static bool reaper_stop;
static bool reaper_running;

/* arg NULL: the reaper; else the sessions' job.  Each period until sbl_cmd_shutdown. */
static void periodic_main(void *arg)
{
    sbl_thread_name(arg == NULL ? "clientcursormon" : "LogicalSessCache");
    uv_mutex_lock(&reaper_mu);
    while (!reaper_stop) {
        uv_cond_timedwait(&reaper_cv, &reaper_mu,
                          (uint64_t)sbl_cmd_sessions_tick_ms() * 1000 * 1000);
        if (reaper_stop)
            break;
        uv_mutex_unlock(&reaper_mu);
        if (arg != NULL) {
            sbl_cmd_sessions_tick(); /* expire idle sessions; write config.system.sessions */
        } else {
            sbl_cursors_reap(10 * 60 * 1000);
            sbl_cmd_mtxn_reap(); /* transactions past transactionLifetimeLimitSeconds */
        }
        uv_mutex_lock(&reaper_mu);
    }
    uv_mutex_unlock(&reaper_mu);
}

/* What parked getMores wait on: a capped insert or the commit point moving. */
static uint64_t wake_generation(void)
{
    return sbl_capped_generation() + sbl_repl_commit_generation();
}

/* Stop the periodic threads (the session cache's too when both run). */
static void stop_periodic(bool both)
{
    uv_mutex_lock(&reaper_mu);
    reaper_stop = true;
    uv_cond_broadcast(&reaper_cv);
    uv_mutex_unlock(&reaper_mu);
    uv_thread_join(&reaper_thread);
    if (both)
        uv_thread_join(&refresh_thread);
    reaper_running = false;
}

int sbl_cmd_init(sbl_err_t *err)
{
    /* libuv's worker pool runs the commands that may scan; size it before first use. */
    setenv("UV_THREADPOOL_SIZE", "16", 0);
    sbl_expr_init(); /* $expr, $jsonSchema and $where in filters */
    sbl_cmd_js_init(); /* javascriptEnabled, the JavaScript engines' limits */
    /* What the modules below hear back: collections created (for the audit
     * log) and awaitData getMores that wait for an insert (capped.c). */
    static const sbl_op_observer_t observer = {.coll_created = sbl_cmd_on_coll_created};
    sbl_op_set_observer(&observer);
    sbl_op_set_park(sbl_capped_await_park);
    sbl_capped_kick_init();
    sbl_op_set_generation(wake_generation);
    SBL_RET(sbl_spill_init(err)); /* memory parameters; empties <dbpath>/_tmp */
    SBL_RET(sbl_cmd_sessions_init(err)); /* session timeout and refresh parameters */
    uv_mutex_init(&reaper_mu);
    uv_cond_init(&reaper_cv);
    reaper_stop = false;
    if (uv_thread_create(&reaper_thread, periodic_main, NULL) != 0)
        return sbl_err_set(err, SBL_E_InternalError, "cannot start the cursor reaper thread");
    reaper_running = true;
    if (uv_thread_create(&refresh_thread, periodic_main, &refresh_thread) != 0) {
        stop_periodic(false);
        return sbl_err_set(err, SBL_E_InternalError, "cannot start the session cache thread");
    }
    sbl_cmd_coord_start(); /* two-phase commit coordinations to resume */
    return 0;
}

void sbl_cmd_shutdown(void)
{
    sbl_cmd_coord_stop();
    sbl_cmd_mig_recovery_stop();
    sbl_cmd_balancer_stop_thread();
    sbl_cmd_migrations_shutdown();
    if (!reaper_running)
        return;
    stop_periodic(true);
    sbl_cursors_reap(-1);
}
