/*
 * aggregate.c: the aggregate command.  It checks the command's fields, runs
 * a view's reads through view_read.c, answers explain: true, hands the
 * pipeline to the aggregation framework (src/agg) and serves the result
 * through a cursor.
 */
#include "cmd/crud_int.h"
#include "expr/expr.h"
#include "repl/repl.h"
#include "shard/shard.h"

#include <stdlib.h>
#include <string.h>

/* ---- the command -------------------------------------------------------------------- */

static const char *const agg_fields[] = {"aggregate", "pipeline", "cursor", "explain",
                                         "allowDiskUse", "bypassDocumentValidation", "collation",
                                         "hint", "let", "fromMongos", "needsMerge",
                                         "isMapReduceCommand", "readConcern", "writeConcern",
                                         "collectionUUID",
                                         NULL};

/* aggregate with explain: true (the form before the explain command): the
 * explain command's answer for the same aggregate at queryPlanner verbosity,
 * in place of a cursor. */
static int agg_explain(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_t inner = BSON_INITIALIZER, cmd = BSON_INITIALIZER;
    bson_iter_t it;

    bson_iter_init(&it, ctx->cmd);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "explain") != 0 && strcmp(k, "cursor") != 0 && k[0] != '$' &&
            strcmp(k, "lsid") != 0 && strcmp(k, "txnNumber") != 0)
            sbl_append_iter(&inner, k, -1, &it); /* the command as explain echoes it */
    }
    BSON_APPEND_DOCUMENT(&cmd, "explain", &inner);
    BSON_APPEND_UTF8(&cmd, "verbosity", "queryPlanner");
    sbl_opctx_t ectx = *ctx;
    ectx.cmd = &cmd;
    int rc = sbl_exec_explain(&ectx, err);
    bson_destroy(&cmd);
    bson_destroy(&inner);
    return rc;
}

/* The pipeline's last stage writes ($out, $merge). */
static bool ends_in_write(const bson_t *pipeline)
{
    bson_iter_t st, f;
    const char *last = NULL;
    if (!bson_iter_init(&st, pipeline))
        return false;
    while (bson_iter_next(&st))
        last = BSON_ITER_HOLDS_DOCUMENT(&st) && bson_iter_recurse(&st, &f) && bson_iter_next(&f)
                   ? bson_iter_key(&f)
                   : NULL;
    return last != NULL && (strcmp(last, "$out") == 0 || strcmp(last, "$merge") == 0);
}

/*
 * mongod 5.0+ runs an aggregation ending in $out or $merge on a secondary when
 * the read preference allows it, sending its writes to the primary.  A Sable
 * secondary hands the whole command to the set's primary (as __system, once the
 * user's privileges passed here: the reads and the target's writes), which reads
 * and writes there; the client gets the primary's answer.  -1: not such a case.
 */
static int agg_on_primary(sbl_opctx_t *ctx, const bson_t *pipeline, sbl_err_t *err)
{
    static const char *const dropped[] = {"$db", "lsid", "txnNumber", "autocommit",
                                          "startTransaction", "$clusterTime",
                                          "$readPreference", NULL};
    if (ctx->conn == NULL || ctx->mtxn != NULL || !sbl_repl_enabled() || sbl_repl_writable() ||
        !ends_in_write(pipeline))
        return -1;
    /* the set's members, for a pool that finds the primary itself */
    bson_t hello = BSON_INITIALIZER;
    bson_iter_t it, h;
    char connstr[4096];
    size_t n = 0;
    sbl_repl_append_hello(&hello);
    const char *set = bson_iter_init_find(&it, &hello, "setName") && BSON_ITER_HOLDS_UTF8(&it)
                          ? bson_iter_utf8(&it, NULL)
                          : NULL;
    if (set != NULL)
        n = (size_t)snprintf(connstr, sizeof(connstr), "%s/", set);
    bool first = true;
    if (set != NULL && bson_iter_init(&it, &hello))
        while (bson_iter_next(&it))
            if ((strcmp(bson_iter_key(&it), "hosts") == 0 ||
                 strcmp(bson_iter_key(&it), "passives") == 0) &&
                BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &h))
                while (bson_iter_next(&h))
                    if (BSON_ITER_HOLDS_UTF8(&h) && n < sizeof(connstr)) {
                        n += (size_t)snprintf(connstr + n, sizeof(connstr) - n, "%s%s",
                                              first ? "" : ",", bson_iter_utf8(&h, NULL));
                        first = false;
                    }
    bson_destroy(&hello);
    if (set == NULL || first || n >= sizeof(connstr))
        return sbl_err_set(err, SBL_E_NotWritablePrimary,
                           "not primary, and no primary known to send the writes of $out or "
                           "$merge to");
    bson_t fwd = BSON_INITIALIZER, reply;
    bson_iter_init(&it, ctx->cmd);
    while (bson_iter_next(&it)) {
        bool drop = false;
        for (int i = 0; dropped[i] != NULL && !drop; i++)
            drop = strcmp(bson_iter_key(&it), dropped[i]) == 0;
        if (!drop)
            sbl_append_iter(&fwd, bson_iter_key(&it), -1, &it);
    }
    int rc = sbl_shard_remote_run(connstr, ctx->db, &fwd, &reply, err);
    bson_destroy(&fwd);
    if (rc != 0)
        return rc;
    if (!bson_iter_init_find(&it, &reply, "ok") || bson_iter_as_double(&it) != 1.0) {
        int code = bson_iter_init_find(&it, &reply, "code") ? (int)bson_iter_as_int64(&it)
                                                            : SBL_E_InternalError;
        const char *msg = bson_iter_init_find(&it, &reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it)
                              ? bson_iter_utf8(&it, NULL)
                              : "the primary refused the aggregation";
        rc = sbl_err_set(err, code, "%s", msg);
    } else {
        bson_iter_init(&it, &reply);
        while (bson_iter_next(&it))
            if (strcmp(bson_iter_key(&it), "cursor") == 0 ||
                strcmp(bson_iter_key(&it), "writeConcernError") == 0)
                sbl_append_iter(ctx->reply, bson_iter_key(&it), -1, &it);
    }
    bson_destroy(&reply);
    return rc;
}

int sbl_cmd_aggregate(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int vrc; /* a view: the command runs as an aggregation over its source */
    if (sbl_views_any() && (vrc = sbl_view_read(ctx, err)) >= 0)
        return vrc;
    char ns[SBL_NS_MAX];
    bson_iter_t it;
    bson_t pipeline, let_spec;
    bool has_pipeline = false, has_cursor = false, explain = false, has_let = false;
    bool collectionless = false;
    bool needs_merge = false; /* a router merges the result: keep the text score (rt_agg.c) */
    int64_t batch_size = -1;
    int allow_disk = -1;
    size_t nstages = 0;

    SBL_RET(sbl_check_fields(ctx->cmd, "aggregate", agg_fields, err));
    if (!bson_iter_init(&it, ctx->cmd) || !bson_iter_next(&it))
        return sbl_err_set(err, SBL_E_BadValue, "empty command");
    if (BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) == 1) {
        collectionless = true;
        SBL_RET(sbl_validate_db_name(ctx->db, err));
        snprintf(ns, sizeof(ns), "%s.$cmd.aggregate", ctx->db);
    } else if (!BSON_ITER_HOLDS_UTF8(&it)) {
        return sbl_err_set(err, SBL_E_InvalidNamespace,
                           "Invalid input namespace, collection name must be a string or 1");
    } else {
        SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    }
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "pipeline") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&it))
                return sbl_err_set(err, SBL_E_TypeMismatch,
                                   "'pipeline' option must be specified as an array");
            uint32_t len;
            const uint8_t *data;
            bson_iter_array(&it, &len, &data);
            bson_init_static(&pipeline, data, len);
            has_pipeline = true;
        } else if (strcmp(k, "cursor") == 0) {
            bson_iter_t c;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, "aggregate.cursor", &it, "object");
            has_cursor = true;
            bson_iter_recurse(&it, &c);
            if (bson_iter_find(&c, "batchSize")) {
                SBL_RET(sbl_get_int64(&c, &batch_size, err));
                if (batch_size < 0)
                    return sbl_err_set(err, SBL_E_Location51024,
                                       "BSON field 'batchSize' value must be >= 0, actual value "
                                       "'%lld'",
                                       (long long)batch_size);
            }
        } else if (strcmp(k, "explain") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it))
                return sbl_type_error(err, "aggregate.explain", &it, "bool");
            explain = bson_iter_bool(&it);
        } else if (strcmp(k, "hint") == 0) {
            SBL_RET(sbl_exec_check_hint(&it, err));
        } else if (strcmp(k, "allowDiskUse") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it))
                return sbl_type_error(err, "aggregate.allowDiskUse", &it, "bool");
            allow_disk = bson_iter_bool(&it);
        } else if (strcmp(k, "needsMerge") == 0) {
            needs_merge = bson_iter_as_bool(&it);
        } else if (strcmp(k, "let") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, "aggregate.let", &it, "object");
            sbl_iter_doc(&it, &let_spec);
            has_let = true;
        }
    }
    if (!has_pipeline)
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field 'aggregate.pipeline' is missing but a required field");
    if (explain) {
        SBL_RET(sbl_agg_check_pipeline(&pipeline, &nstages, err));
        return agg_explain(ctx, err);
    }
    if (!has_cursor)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "The 'cursor' option is required, except for aggregate with the "
                           "explain argument");
    int frc = agg_on_primary(ctx, &pipeline, err);
    if (frc >= 0)
        return frc;
    bson_iter_t st, f;
    if (bson_iter_init(&st, &pipeline) && bson_iter_next(&st) &&
        BSON_ITER_HOLDS_DOCUMENT(&st) && bson_iter_recurse(&st, &f) && bson_iter_next(&f) &&
        strcmp(bson_iter_key(&f), "$backupCursor") == 0) {
        bson_t spec;
        if (!collectionless || bson_count_keys(&pipeline) != 1 || !BSON_ITER_HOLDS_DOCUMENT(&f))
            return sbl_err_set(err, 40602,
                               "$backupCursor is only valid as the first and only stage of "
                               "{aggregate: 1} on admin, with a document argument");
        sbl_iter_doc(&f, &spec);
        return sbl_cmd_backup_cursor(ctx, &spec, batch_size, err);
    }
    SBL_RET(sbl_agg_check_pipeline(&pipeline, &nstages, err));
    if (nstages > 0 && bson_iter_init(&st, &pipeline) && bson_iter_next(&st) &&
        bson_iter_recurse(&st, &f) && bson_iter_next(&f) &&
        strcmp(bson_iter_key(&f), "$changeStream") == 0)
        return sbl_agg_change_stream(ctx, ns, collectionless, &pipeline, batch_size, err);

    bson_t filter, sort, let_vals;
    bool has_filter = false, has_sort = false, source_needed = !collectionless;
    sbl_agg_geonear_t geonear;
    bool has_geonear = false;
    int64_t skip = 0, limit = 0;
    size_t first = 0;
    SBL_RET(sbl_expr_eval_let(has_let ? &let_spec : NULL, &let_vals, err));
    bson_iter_t cop; /* $currentOp: first, of {aggregate: 1}, on admin */
    bool current_op = bson_iter_init(&st, &pipeline) && bson_iter_next(&st) &&
                      bson_iter_recurse(&st, &cop) && bson_iter_next(&cop) &&
                      strcmp(bson_iter_key(&cop), "$currentOp") == 0;
    if (current_op && (!collectionless || strcmp(ctx->db, "admin") != 0)) {
        bson_destroy(&let_vals);
        return sbl_err_set(err, SBL_E_InvalidNamespace, "$currentOp must be run against the "
                                                        "'admin' database with {aggregate: 1}");
    }
    if (collectionless && !current_op) {
        bson_iter_init(&st, &pipeline);
        if (!bson_iter_next(&st) || (bson_iter_recurse(&st, &f) && bson_iter_next(&f) &&
                                     strcmp(bson_iter_key(&f), "$documents") != 0 &&
                                     strcmp(bson_iter_key(&f), "$listLocalSessions") != 0)) {
            bson_destroy(&let_vals);
            return sbl_err_set(err, SBL_E_InvalidNamespace,
                               "{aggregate: 1} is not valid for '%s'; a collection is required.",
                               nstages ? bson_iter_key(&f) : "an empty pipeline");
        }
    }
    /* Push the leading $match / $sort / $skip / $limit into the executor. */
    bson_iter_init(&st, &pipeline);
    while (source_needed && bson_iter_next(&st)) {
        bson_iter_recurse(&st, &f);
        bson_iter_next(&f);
        const char *name = bson_iter_key(&f);
        if (first == 0 && (strcmp(name, "$collStats") == 0 || strcmp(name, "$documents") == 0 ||
                           strcmp(name, "$indexStats") == 0)) {
            source_needed = false;
            break;
        }
        if (strcmp(name, "$geoNear") == 0 && first == 0 && BSON_ITER_HOLDS_DOCUMENT(&f)) {
            bson_t spec;
            sbl_iter_doc(&f, &spec);
            if (sbl_agg_geonear_prepare(ctx, ns, &spec, &geonear, err) != 0) {
                bson_destroy(&geonear.filter);
                bson_destroy(&let_vals);
                return err->code;
            }
            has_geonear = true;
            sbl_expr_bind_let(&geonear.filter, &let_vals, &filter);
            has_filter = true;
        } else if (strcmp(name, "$match") == 0 && first == 0 && BSON_ITER_HOLDS_DOCUMENT(&f)) {
            bson_t m;
            sbl_iter_doc(&f, &m);
            if (sbl_filter_refuse_where(&m, err) != 0) {
                bson_destroy(&let_vals);
                return err->code;
            }
            sbl_expr_bind_let(&m, &let_vals, &filter);
            has_filter = true;
        } else if (strcmp(name, "$sort") == 0 && !has_sort && skip == 0 && limit == 0 &&
                   BSON_ITER_HOLDS_DOCUMENT(&f)) {
            has_sort = sbl_iter_doc(&f, &sort);
            if (bson_empty(&sort)) {
                has_sort = false;
                break; /* let the stage report the error */
            }
        } else if (strcmp(name, "$skip") == 0 && limit == 0 && BSON_ITER_HOLDS_NUMBER(&f) &&
                   bson_iter_as_int64(&f) >= 0) {
            skip += bson_iter_as_int64(&f);
        } else if (strcmp(name, "$limit") == 0 && BSON_ITER_HOLDS_NUMBER(&f) &&
                   bson_iter_as_int64(&f) > 0) {
            int64_t l = bson_iter_as_int64(&f);
            limit = limit == 0 || l < limit ? l : limit;
        } else {
            break;
        }
        first++;
    }

    sbl_agg_env_t env = {.ctx = ctx, .db = ctx->db, .let = &let_vals, .now_ms = sbl_now_ms(),
                         .allow_disk = allow_disk};
    sbl_docvec_t dv = {0};
    bson_iter_t ci;
    int rc = sbl_exec_collation(ctx, ns, bson_iter_init_find(&ci, ctx->cmd, "collation") ? &ci : NULL,
                                "aggregate.collation", &env.coll, err);
    if (rc == 0 && current_op) {
        rc = sbl_cmd_current_op_stage(ctx, &cop, &dv, err);
        first = 1;
    }
    if (rc == 0 && source_needed) {
        sbl_qexec_t *q = NULL;
        sbl_qexec_opts_t o = {0};
        o.filter = has_filter ? &filter : NULL;
        o.sort = has_sort ? &sort : NULL;
        o.skip = skip;
        o.limit = limit;
        o.collation = env.coll;
        o.keep_text_score = true; /* {$meta: "textScore"} in later stages reads it */
        o.keep_geo_distance = has_geonear;
        rc = sbl_qexec_new(ns, &o, &q, err);
        if (rc == 0) /* a leading $sort is held to the sort limit too */
            sbl_qexec_set_disk_use(q, (int8_t)(allow_disk < 0 ? 0 : allow_disk ? 1 : -1));
        sbl_expr_take_match_error(NULL);
        for (; rc == 0;) {
            bson_t doc;
            bool done = false;
            if ((rc = sbl_qexec_next(q, ctx, &doc, NULL, &done, err)) != 0 || done)
                break;
            bson_t *copy = bson_copy(&doc);
            if (has_geonear)
                sbl_agg_geonear_finish(&geonear, &copy);
            sbl_docvec_push(&dv, copy);
            bson_destroy(&doc);
        }
        sbl_qexec_free(q);
        if (rc == 0)
            rc = sbl_expr_take_match_error(err);
    }
    bson_iter_t ti;
    bool text = has_filter && !needs_merge && bson_iter_init_find(&ti, &filter, "$text");
    if (has_filter)
        bson_destroy(&filter);
    if (has_geonear)
        sbl_agg_geonear_destroy(&geonear);
    if (rc == 0)
        rc = sbl_agg_run(&env, ns, &pipeline, first, &dv, err);
    for (size_t i = 0; rc == 0 && text && i < dv.n; i++) {
        bson_t *stripped = bson_new(); /* the score field never leaves the server */
        sbl_projection_strip_meta(dv.v[i], stripped);
        bson_destroy(dv.v[i]);
        dv.v[i] = stripped;
    }
    bson_destroy(&let_vals);
    if (rc != 0) {
        sbl_docvec_clear(&dv);
        return rc;
    }
    void *state = sbl_cursor_docs_state(dv.v, dv.n);
    return sbl_cursor_first_batch(ctx, ns, &sbl_cursor_docs_source, state, batch_size, false, err);
}
