/*
 * views.c: read-only views.  A view is a catalog entry whose options are
 * {viewOn, pipeline} (its table stays empty).  find, count, distinct and
 * aggregate on a view become one aggregation over the source: the view's
 * pipeline, then the stages the command stands for; a view on a view
 * resolves through the recursive aggregate.  Writes to a view fail with
 * 166 CommandNotSupportedOnView (sbl_validate_user_write_ns).
 *
 * What must stay true: sbl_views_state is never 0 while a view exists (it
 * goes to 1 at the first view and stays there).
 */
#include "cmd/views.h"
#include "cmd/crud_int.h"
#include "doc/doc.h"

#include <stdio.h>
#include <string.h>

atomic_int sbl_views_state = -1;

#define VIEW_DEPTH_MAX 20

static bool visit(const char *ns, const bson_t *options, const uint8_t *uuid, void *arg)
{
    bson_iter_t it;
    (void)ns;
    (void)uuid;
    if (bson_iter_init_find(&it, options, "viewOn")) {
        *(bool *)arg = true;
        return false;
    }
    return true;
}

bool sbl_views_scan(void)
{
    bool found = false;
    sbl_catalog_list(NULL, visit, &found);
    int expected = -1;
    atomic_compare_exchange_strong(&sbl_views_state, &expected, found ? 1 : 0);
    return atomic_load(&sbl_views_state) != 0;
}

void sbl_views_note_created(void)
{
    atomic_store(&sbl_views_state, 1);
}

/* An array value as a bson_t view (false when it is no array). */
static bool iter_array(const bson_iter_t *it, bson_t *out)
{
    const uint8_t *data;
    uint32_t len;
    if (!BSON_ITER_HOLDS_ARRAY(it))
        return false;
    bson_iter_array(it, &len, &data);
    return bson_init_static(out, data, len);
}

/* ns's source collection (in srcns) and pipeline (into pipe) when ns is a view. */
static bool view_get(sbl_session_t *ss, const char *ns, char *srcns, size_t len, bson_t *pipe)
{
    sbl_coll_t *c = NULL;
    bson_iter_t it;
    bool is_view = false;
    if (ss == NULL || sbl_coll_open(ss, ns, false, &c, NULL, NULL) != 0)
        return false;
    if (bson_iter_init_find(&it, sbl_coll_options(c), "viewOn") && BSON_ITER_HOLDS_UTF8(&it)) {
        is_view = true;
        if (srcns != NULL) {
            const char *dot = strchr(ns, '.');
            snprintf(srcns, len, "%.*s.%s", (int)(dot - ns), ns, bson_iter_utf8(&it, NULL));
        }
        if (pipe != NULL) {
            bson_t p;
            bson_init(pipe);
            if (bson_iter_init_find(&it, sbl_coll_options(c), "pipeline") && iter_array(&it, &p))
                bson_copy_to_excluding_noinit(&p, pipe, "", NULL);
        }
    }
    sbl_coll_release(c);
    return is_view;
}

bool sbl_view_is(sbl_session_t *ss, const char *ns)
{
    return view_get(ss, ns, NULL, 0, NULL);
}

int sbl_view_options(const bson_t *cmd, bson_t *opts, sbl_err_t *err)
{
    bson_iter_t it, st;
    if (!bson_iter_init_find(&it, cmd, "viewOn"))
        return sbl_err_set(err, SBL_E_BadValue, "'pipeline' requires 'viewOn' to also be specified");
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_crud_type_error(err, "create.viewOn", &it, "string");
    const char *on = bson_iter_utf8(&it, NULL);
    if (on[0] == '\0')
        return sbl_err_set(err, SBL_E_InvalidNamespace, "invalid namespace name for a view: ''");
    BSON_APPEND_UTF8(opts, "viewOn", on);
    bson_t arr;
    BSON_APPEND_ARRAY_BEGIN(opts, "pipeline", &arr);
    if (bson_iter_init_find(&it, cmd, "pipeline")) {
        if (!BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_append_array_end(opts, &arr);
            return sbl_crud_type_error(err, "create.pipeline", &it, "array");
        }
        bson_iter_recurse(&it, &st);
        while (bson_iter_next(&st)) {
            bson_t stage;
            if (!sbl_iter_doc(&st, &stage)) {
                bson_append_array_end(opts, &arr);
                return sbl_err_set(err, SBL_E_TypeMismatch, "Each element of the 'pipeline' "
                                   "array must be an object");
            }
            bson_iter_t f;
            if (bson_iter_init(&f, &stage) && bson_iter_next(&f) &&
                (strcmp(bson_iter_key(&f), "$out") == 0 || strcmp(bson_iter_key(&f), "$merge") == 0)) {
                bson_append_array_end(opts, &arr);
                return sbl_err_set(err, SBL_E_OptionNotSupportedOnView,
                                   "%s cannot be used in a view definition", bson_iter_key(&f));
            }
            bson_append_iter(&arr, bson_iter_key(&st), -1, &st);
        }
    }
    bson_append_array_end(opts, &arr);
    return 0;
}

/* ---- reads -------------------------------------------------------------------------- */

static void add_stage(bson_t *arr, uint32_t *np, const char *op, const bson_iter_t *value)
{
    char kbuf[16];
    bson_t st;
    bson_append_document_begin(arr, sbl_crud_key((*np)++, kbuf), -1, &st);
    bson_append_iter(&st, op, -1, value);
    bson_append_document_end(arr, &st);
}

static void copy_fields(const bson_t *cmd, bson_t *out, const char *const *names)
{
    bson_iter_t it;
    for (size_t i = 0; names[i] != NULL; i++)
        if (bson_iter_init_find(&it, cmd, names[i]))
            bson_append_iter(out, names[i], -1, &it);
}

/* Run {aggregate: src, pipeline: view pipeline + stages, ...} into *reply. */
static int run_agg(sbl_cmd_ctx_t *ctx, const char *srccoll, const bson_t *view_pipe,
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
        bson_append_iter(&arr, sbl_crud_key(n++, kbuf), -1, &it);
    bson_iter_init(&it, stages);
    while (bson_iter_next(&it))
        bson_append_iter(&arr, sbl_crud_key(n++, kbuf), -1, &it);
    bson_append_array_end(&cmd, &arr);
    bson_concat(&cmd, extra);
    static _Thread_local int depth; /* views on views; a cycle stops here */
    if (depth >= VIEW_DEPTH_MAX) {
        bson_destroy(&cmd);
        return sbl_err_set(err, SBL_E_ViewDepthLimitExceeded,
                           "View depth too deep or view cycle detected; maximum depth is %d",
                           VIEW_DEPTH_MAX);
    }
    sbl_cmd_ctx_t sub = *ctx;
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

int sbl_view_read(sbl_cmd_ctx_t *ctx, sbl_err_t *err)
{
    char ns[SBL_NS_MAX], src[SBL_NS_MAX];
    bson_t view_pipe, stages = BSON_INITIALIZER, extra = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    bson_iter_t it;
    uint32_t n = 0;
    int rc;

    if (!bson_iter_init(&it, ctx->cmd) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it) ||
        sbl_cmd_ns(ctx, ns, sizeof(ns), NULL) != 0 ||
        !view_get(ctx->ss, ns, src, sizeof(src), &view_pipe)) {
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
        if (bson_iter_init_find(&it, ctx->cmd, "pipeline") && iter_array(&it, &user))
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
                bson_append_value(&tmp, "v", 1, &v);
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
            bson_append_iter(&cur, "batchSize", -1, &it);
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
                bson_append_iter(ctx->reply, "values", -1, &it);
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
