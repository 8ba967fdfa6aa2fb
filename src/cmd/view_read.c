/*
 * view_read.c: find, count, distinct and aggregate on a view become one
 * aggregation over the view's source: the view's pipeline, then the stages
 * the command stands for; a view on a view resolves through the recursive
 * aggregate (at most 20 deep).
 */
#include "agg/agg.h"
#include "cmd/crud_int.h"

#include <stdio.h>
#include <string.h>

#define VIEW_DEPTH_MAX 20

/* ---- reads -------------------------------------------------------------------------- */

static void add_stage(bson_t *arr, uint32_t *np, const char *op, const bson_iter_t *value)
{
    char kbuf[16];
    bson_t st;
    bson_append_document_begin(arr, sbl_array_key((*np)++, kbuf), -1, &st);
    sbl_append_iter(&st, op, -1, value);
    bson_append_document_end(arr, &st);
}

static void copy_fields(const bson_t *cmd, bson_t *out, const char *const *names)
{
    bson_iter_t it;
    for (size_t i = 0; names[i] != NULL; i++)
        if (bson_iter_init_find(&it, cmd, names[i]))
            sbl_append_iter(out, names[i], -1, &it);
}

/* Run {aggregate: src, pipeline: view pipeline + stages, ...} into *reply. */
static int run_agg(sbl_opctx_t *ctx, const char *srccoll, const bson_t *view_pipe,
                   const bson_t *stages, const bson_t *extra, bson_t *reply, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, arr;
    bson_iter_t it;
    uint32_t n = 0;
    char kbuf[16];

    BSON_APPEND_UTF8(&cmd, "aggregate", srccoll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "pipeline", &arr);
    bson_iter_init(&it, view_pipe);
    while (bson_iter_next(&it))
        sbl_append_iter(&arr, sbl_array_key(n++, kbuf), -1, &it);
    bson_iter_init(&it, stages);
    while (bson_iter_next(&it))
        sbl_append_iter(&arr, sbl_array_key(n++, kbuf), -1, &it);
    bson_append_array_end(&cmd, &arr);
    bson_concat(&cmd, extra);
    static _Thread_local int depth; /* views on views; a cycle stops here */
    if (depth >= VIEW_DEPTH_MAX) {
        bson_destroy(&cmd);
        return sbl_err_set(err, SBL_E_ViewDepthLimitExceeded,
                           "View depth too deep or view cycle detected; maximum depth is %d",
                           VIEW_DEPTH_MAX);
    }
    sbl_opctx_t sub = *ctx;
    sub.cmd = &cmd;
    sub.name = "aggregate";
    sub.reply = reply;
    depth++;
    int rc = sbl_cmd_aggregate(&sub, err);
    depth--;
    ctx->docs_examined = sub.docs_examined;
    ctx->keys_examined = sub.keys_examined;
    ctx->plan_summary = sub.plan_summary;
    bson_destroy(&cmd);
    return rc;
}

/* firstBatch[0] of an aggregate reply, or false. */
static bool first_result(const bson_t *reply, bson_t *doc)
{
    bson_iter_t it, b;
    if (!bson_iter_init(&it, reply) || !bson_iter_find_descendant(&it, "cursor.firstBatch", &b) ||
        !BSON_ITER_HOLDS_ARRAY(&b) || !bson_iter_recurse(&b, &it) || !bson_iter_next(&it))
        return false;
    return sbl_iter_doc(&it, doc);
}

static const char *const pass_through[] = {"maxTimeMS", "collation", "let", "comment",
                                           "readConcern", "hint", "allowDiskUse", "$db",
                                           "lsid", "$readPreference", NULL};

int sbl_view_read(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[SBL_NS_MAX], src[SBL_NS_MAX];
    bson_t view_pipe, stages = BSON_INITIALIZER, extra = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    bson_iter_t it;
    uint32_t n = 0;
    int rc;

    if (!bson_iter_init(&it, ctx->cmd) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it) ||
        sbl_op_ns(ctx, ns, sizeof(ns), NULL) != 0 ||
        !sbl_view_get(ctx->ss, ns, src, sizeof(src), &view_pipe)) {
        bson_destroy(&stages);
        bson_destroy(&extra);
        bson_destroy(&reply);
        return -1;
    }
    const char *srccoll = strchr(src, '.') + 1;
    const char *name = ctx->name;
    copy_fields(ctx->cmd, &extra, pass_through);
    if (strcmp(name, "aggregate") == 0) {
        bson_t user;
        if (bson_iter_init_find(&it, ctx->cmd, "pipeline") && sbl_iter_array(&it, &user))
            bson_copy_to_excluding_noinit(&user, &stages, "", NULL);
        static const char *const more[] = {"cursor", "explain", "bypassDocumentValidation",
                                           NULL};
        copy_fields(ctx->cmd, &extra, more);
        rc = run_agg(ctx, srccoll, &view_pipe, &stages, &extra, ctx->reply, err);
    } else if (strcmp(name, "find") == 0) {
        static const char *const order[][2] = {{"filter", "$match"}, {"sort", "$sort"},
                                               {"skip", "$skip"}, {"limit", "$limit"},
                                               {"projection", "$project"}};
        for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
            if (!bson_iter_init_find(&it, ctx->cmd, order[i][0]))
                continue;
            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                bson_t d;
                if (sbl_iter_doc(&it, &d) && bson_empty(&d))
                    continue;
            } else if (BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) == 0) {
                continue;
            }
            if (strcmp(order[i][0], "limit") == 0 && bson_iter_as_int64(&it) < 0) {
                bson_value_t v = {.value_type = BSON_TYPE_INT64};
                v.value.v_int64 = -bson_iter_as_int64(&it);
                bson_t tmp = BSON_INITIALIZER;
                sbl_append_value(&tmp, "v", 1, &v);
                bson_iter_init_find(&it, &tmp, "v");
                add_stage(&stages, &n, "$limit", &it);
                bson_destroy(&tmp);
                continue;
            }
            add_stage(&stages, &n, order[i][1], &it);
        }
        bson_t cur;
        BSON_APPEND_DOCUMENT_BEGIN(&extra, "cursor", &cur);
        if (bson_iter_init_find(&it, ctx->cmd, "batchSize"))
            sbl_append_iter(&cur, "batchSize", -1, &it);
        bson_append_document_end(&extra, &cur);
        rc = run_agg(ctx, srccoll, &view_pipe, &stages, &extra, ctx->reply, err);
    } else if (strcmp(name, "count") == 0) {
        static const char *const order[][2] = {{"query", "$match"}, {"skip", "$skip"},
                                               {"limit", "$limit"}};
        for (size_t i = 0; i < 3; i++)
            if (bson_iter_init_find(&it, ctx->cmd, order[i][0]) &&
                !(BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) <= 0) &&
                !BSON_ITER_HOLDS_NULL(&it))
                add_stage(&stages, &n, order[i][1], &it);
        bson_t tmp = BSON_INITIALIZER, cur;
        BSON_APPEND_UTF8(&tmp, "c", "n");
        bson_iter_init_find(&it, &tmp, "c");
        add_stage(&stages, &n, "$count", &it);
        bson_destroy(&tmp);
        BSON_APPEND_DOCUMENT_BEGIN(&extra, "cursor", &cur);
        bson_append_document_end(&extra, &cur);
        rc = run_agg(ctx, srccoll, &view_pipe, &stages, &extra, &reply, err);
        if (rc == 0) {
            bson_t d;
            int64_t cnt = 0;
            if (first_result(&reply, &d) && bson_iter_init_find(&it, &d, "n"))
                cnt = bson_iter_as_int64(&it);
            if (cnt <= INT32_MAX)
                BSON_APPEND_INT32(ctx->reply, "n", (int32_t)cnt);
            else
                BSON_APPEND_INT64(ctx->reply, "n", cnt);
        }
    } else { /* distinct */
        const char *key = NULL;
        if (bson_iter_init_find(&it, ctx->cmd, "key") && BSON_ITER_HOLDS_UTF8(&it))
            key = bson_iter_utf8(&it, NULL);
        if (key == NULL || key[0] == '\0' || key[0] == '$') {
            rc = sbl_err_set(err, SBL_E_TypeMismatch, "BSON field 'DistinctCommandRequest.key' is "
                             "missing or is not of type 'string'");
            goto out;
        }
        if (bson_iter_init_find(&it, ctx->cmd, "query") && BSON_ITER_HOLDS_DOCUMENT(&it))
            add_stage(&stages, &n, "$match", &it);
        char path[SBL_NS_MAX + 2];
        snprintf(path, sizeof(path), "$%s", key);
        bson_t tmp = BSON_INITIALIZER, d, acc, cur;
        BSON_APPEND_DOCUMENT_BEGIN(&tmp, "u", &d);
        BSON_APPEND_UTF8(&d, "path", path);
        BSON_APPEND_BOOL(&d, "preserveNullAndEmptyArrays", true);
        bson_append_document_end(&tmp, &d);
        BSON_APPEND_DOCUMENT_BEGIN(&tmp, "g", &d);
        BSON_APPEND_NULL(&d, "_id");
        BSON_APPEND_DOCUMENT_BEGIN(&d, "values", &acc);
        BSON_APPEND_UTF8(&acc, "$addToSet", path);
        bson_append_document_end(&d, &acc);
        bson_append_document_end(&tmp, &d);
        bson_iter_init_find(&it, &tmp, "u");
        add_stage(&stages, &n, "$unwind", &it);
        bson_iter_init_find(&it, &tmp, "g");
        add_stage(&stages, &n, "$group", &it);
        BSON_APPEND_DOCUMENT_BEGIN(&extra, "cursor", &cur);
        bson_append_document_end(&extra, &cur);
        rc = run_agg(ctx, srccoll, &view_pipe, &stages, &extra, &reply, err);
        bson_destroy(&tmp);
        if (rc == 0) {
            bson_t r, vals;
            if (first_result(&reply, &r) && bson_iter_init_find(&it, &r, "values"))
                sbl_append_iter(ctx->reply, "values", -1, &it);
            else {
                BSON_APPEND_ARRAY_BEGIN(ctx->reply, "values", &vals);
                bson_append_array_end(ctx->reply, &vals);
            }
        }
    }
out:
    bson_destroy(&view_pipe);
    bson_destroy(&stages);
    bson_destroy(&extra);
    bson_destroy(&reply);
    return rc;
}
