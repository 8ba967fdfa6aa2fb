/*
 * explain.c: the explain command for find, aggregate, count, distinct,
 * update, delete and findAndModify, in MongoDB's shape: queryPlanner
 * (winningPlan, rejectedPlans) and, for executionStats and
 * allPlansExecution, executionStats (nReturned, executionTimeMillis,
 * totalKeysExamined, totalDocsExamined, executionStages).
 *
 * What must stay true: explain never changes data; for update, delete and
 * findAndModify it plans and runs only the read side (the documents the
 * write would touch).  An aggregate is explained by its leading
 * $match/$sort/$skip/$limit, the part the executor plans.  Also the key
 * pattern a plan reports for returnKey.
 */
#include "exec/exec.h"
#include "exec/plan.h"
#include "doc/doc.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct explain_req {
    const char *kind; /* the inner command's name */
    bson_t filter, sort;
    bool has_filter, has_sort, has_hint;
    bson_value_t hint;
    int64_t skip, limit;
    const char *wrap; /* COUNT, UPDATE, DELETE ... or NULL */
} explain_req_t;

/* Read filter/sort/skip/limit/hint from doc's fields named as given. */
static int read_fields(const bson_t *doc, const char *filter_name, explain_req_t *r,
                       sbl_err_t *err)
{
    bson_iter_t it;

    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, filter_name) == 0 && sbl_iter_doc(&it, &r->filter))
            r->has_filter = true;
        else if (strcmp(k, "sort") == 0 && sbl_iter_doc(&it, &r->sort))
            r->has_sort = true;
        else if (strcmp(k, "skip") == 0 && BSON_ITER_HOLDS_NUMBER(&it))
            r->skip = bson_iter_as_int64(&it);
        else if (strcmp(k, "limit") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
            r->limit = bson_iter_as_int64(&it);
            if (r->limit < 0)
                r->limit = -r->limit;
        } else if (strcmp(k, "hint") == 0)
            SBL_RET(sbl_exec_get_hint(&it, &r->hint, &r->has_hint, err));
    }
    return 0;
}

/* The first statement of an update/delete command. */
static bool first_stmt(const bson_t *cmd, const char *field, bson_t *out)
{
    bson_iter_t it, a;
    return bson_iter_init_find(&it, cmd, field) && BSON_ITER_HOLDS_ARRAY(&it) &&
           bson_iter_recurse(&it, &a) && bson_iter_next(&a) && sbl_iter_doc(&a, out);
}

static int parse_inner(const bson_t *inner, explain_req_t *r, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t stmt;

    memset(r, 0, sizeof(*r));
    if (!bson_iter_init(&it, inner) || !bson_iter_next(&it))
        return sbl_err_set(err, SBL_E_BadValue, "explain command requires a nested object");
    r->kind = bson_iter_key(&it);
    if (strcmp(r->kind, "find") == 0)
        return read_fields(inner, "filter", r, err);
    if (strcmp(r->kind, "count") == 0) {
        r->wrap = "COUNT";
        return read_fields(inner, "query", r, err);
    }
    if (strcmp(r->kind, "distinct") == 0)
        return read_fields(inner, "query", r, err);
    if (strcmp(r->kind, "findAndModify") == 0 || strcmp(r->kind, "findandmodify") == 0) {
        bson_iter_t rm;
        r->wrap = bson_iter_init_find(&rm, inner, "remove") && bson_iter_as_bool(&rm) ? "DELETE"
                                                                                     : "UPDATE";
        r->limit = 1;
        return read_fields(inner, "query", r, err);
    }
    if (strcmp(r->kind, "update") == 0 || strcmp(r->kind, "delete") == 0) {
        bool upd = r->kind[0] == 'u';
        r->wrap = upd ? "UPDATE" : "DELETE";
        if (!first_stmt(inner, upd ? "updates" : "deletes", &stmt))
            return sbl_err_set(err, SBL_E_FailedToParse, "explain %s needs one statement",
                               r->kind);
        SBL_RET(read_fields(&stmt, "q", r, err));
        bson_iter_t m;
        if (upd)
            r->limit = bson_iter_init_find(&m, &stmt, "multi") && bson_iter_as_bool(&m) ? 0 : 1;
        else
            r->limit = bson_iter_init_find(&m, &stmt, "limit") && bson_iter_as_int64(&m) == 1;
        return 0;
    }
    if (strcmp(r->kind, "aggregate") == 0) {
        bson_iter_t p, st;
        SBL_RET(read_fields(inner, "", r, err)); /* hint */
        if (!bson_iter_init_find(&p, inner, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&p) ||
            !bson_iter_recurse(&p, &st))
            return sbl_err_set(err, SBL_E_FailedToParse,
                               "BSON field 'aggregate.pipeline' is missing but a required field");
        /* The leading stages the executor plans. */
        while (bson_iter_next(&st)) {
            bson_t stage;
            bson_iter_t s;
            if (!sbl_iter_doc(&st, &stage) || !bson_iter_init(&s, &stage) || !bson_iter_next(&s))
                break;
            const char *name = bson_iter_key(&s);
            if (strcmp(name, "$match") == 0 && !r->has_filter && !r->has_sort && !r->skip &&
                !r->limit && sbl_iter_doc(&s, &r->filter))
                r->has_filter = true;
            else if (strcmp(name, "$sort") == 0 && !r->has_sort && !r->skip && !r->limit &&
                     sbl_iter_doc(&s, &r->sort))
                r->has_sort = true;
            else if (strcmp(name, "$skip") == 0 && BSON_ITER_HOLDS_NUMBER(&s) && !r->limit)
                r->skip += bson_iter_as_int64(&s);
            else if (strcmp(name, "$limit") == 0 && BSON_ITER_HOLDS_NUMBER(&s))
                r->limit = r->limit ? r->limit : bson_iter_as_int64(&s);
            else
                break;
        }
        return 0;
    }
    return sbl_err_set(err, SBL_E_CommandNotFound, "Explain failed due to unknown command: %s",
                       r->kind);
}

/* ---- stage trees ------------------------------------------------------------ */

typedef struct run_stats {
    bool on;
    int64_t nreturned, keys, docs, millis;
} run_stats_t;

static void append_ixscan(bson_t *out, const sbl_ixplan_t *p, const run_stats_t *rs)
{
    bson_t kp;
    const sbl_index_t *ix = p->ix;

    BSON_APPEND_UTF8(out, "stage", "IXSCAN");
    if (rs != NULL && rs->on) {
        BSON_APPEND_INT64(out, "nReturned", rs->keys);
        BSON_APPEND_INT64(out, "executionTimeMillisEstimate", rs->millis);
        BSON_APPEND_INT64(out, "keysExamined", rs->keys);
    }
    BSON_APPEND_DOCUMENT_BEGIN(out, "keyPattern", &kp);
    sbl_ixplan_key_pattern(p, &kp);
    bson_append_document_end(out, &kp);
    BSON_APPEND_UTF8(out, "indexName", sbl_index_name(ix));
    BSON_APPEND_BOOL(out, "isMultiKey", sbl_index_multikey(ix));
    BSON_APPEND_BOOL(out, "isUnique", sbl_index_unique(ix));
    BSON_APPEND_BOOL(out, "isSparse", sbl_index_sparse(ix));
    BSON_APPEND_BOOL(out, "isPartial", sbl_index_partial(ix) != NULL);
    BSON_APPEND_INT32(out, "indexVersion", 2);
    BSON_APPEND_UTF8(out, "direction", p->backward ? "backward" : "forward");
    BSON_APPEND_DOCUMENT(out, "indexBounds", p->bounds);
}

/* The access path: FETCH over IXSCAN, IDHACK, COLLSCAN or EOF. */
static void append_access(bson_t *out, const sbl_qexec_info_t *qi, const sbl_ixplan_t *p,
                          const bson_t *filter, const run_stats_t *rs)
{
    bson_t in;
    bool stats = rs != NULL && rs->on;

    if (qi->text) { /* TEXT_MATCH > TEXT_OR > IXSCAN of the text index, as mongod shows it */
        bson_t or, ix;
        BSON_APPEND_UTF8(out, "stage", "TEXT_MATCH");
        if (stats) {
            BSON_APPEND_INT64(out, "nReturned", rs->nreturned);
            BSON_APPEND_INT64(out, "docsExamined", rs->docs);
        }
        BSON_APPEND_DOCUMENT_BEGIN(out, "inputStage", &or);
        BSON_APPEND_UTF8(&or, "stage", "TEXT_OR");
        BSON_APPEND_DOCUMENT_BEGIN(&or, "inputStage", &ix);
        BSON_APPEND_UTF8(&ix, "stage", "IXSCAN");
        if (stats)
            BSON_APPEND_INT64(&ix, "keysExamined", rs->keys);
        bson_append_document_end(&or, &ix);
        bson_append_document_end(out, &or);
        return;
    }
    if (qi->geo_index != NULL) { /* GEO_NEAR_2DSPHERE, or FETCH > IXSCAN of the 2dsphere index */
        bson_t ix;
        bson_t *at = out;
        if (!qi->geo_near) {
            BSON_APPEND_UTF8(out, "stage", "FETCH");
            if (filter != NULL && !bson_empty(filter))
                BSON_APPEND_DOCUMENT(out, "filter", filter);
            if (stats) {
                BSON_APPEND_INT64(out, "nReturned", rs->nreturned);
                BSON_APPEND_INT64(out, "docsExamined", rs->docs);
            }
            BSON_APPEND_DOCUMENT_BEGIN(out, "inputStage", &ix);
            at = &ix;
            BSON_APPEND_UTF8(at, "stage", "IXSCAN");
        } else {
            BSON_APPEND_UTF8(at, "stage", strstr(qi->summary, "_2D ") != NULL ? "GEO_NEAR_2D"
                                                                               : "GEO_NEAR_2DSPHERE");
            if (stats) {
                BSON_APPEND_INT64(at, "nReturned", rs->nreturned);
                BSON_APPEND_INT64(at, "docsExamined", rs->docs);
            }
        }
        if (stats)
            BSON_APPEND_INT64(at, "keysExamined", rs->keys);
        BSON_APPEND_UTF8(at, "indexName", qi->geo_index);
        BSON_APPEND_UTF8(at, "planSummary", qi->summary);
        if (!qi->geo_near)
            bson_append_document_end(out, &ix);
        return;
    }
    if (p != NULL || qi->id_kind == SBL_ID_RANGE ||
        (qi->id_kind == SBL_ID_POINTS && qi->npoints > 1)) {
        BSON_APPEND_UTF8(out, "stage", "FETCH");
        if (filter != NULL && !bson_empty(filter))
            BSON_APPEND_DOCUMENT(out, "filter", filter);
        if (stats) {
            BSON_APPEND_INT64(out, "nReturned", rs->nreturned);
            BSON_APPEND_INT64(out, "executionTimeMillisEstimate", rs->millis);
            BSON_APPEND_INT64(out, "docsExamined", rs->docs);
        }
        BSON_APPEND_DOCUMENT_BEGIN(out, "inputStage", &in);
        if (p != NULL)
            append_ixscan(&in, p, rs);
        else {
            bson_t kp, b, arr;
            BSON_APPEND_UTF8(&in, "stage", "IXSCAN");
            if (stats) {
                BSON_APPEND_INT64(&in, "nReturned", rs->keys);
                BSON_APPEND_INT64(&in, "keysExamined", rs->keys);
            }
            BSON_APPEND_DOCUMENT_BEGIN(&in, "keyPattern", &kp);
            BSON_APPEND_INT32(&kp, "_id", 1);
            bson_append_document_end(&in, &kp);
            BSON_APPEND_UTF8(&in, "indexName", "_id_");
            BSON_APPEND_BOOL(&in, "isMultiKey", false);
            BSON_APPEND_BOOL(&in, "isUnique", true);
            BSON_APPEND_BOOL(&in, "isSparse", false);
            BSON_APPEND_BOOL(&in, "isPartial", false);
            BSON_APPEND_INT32(&in, "indexVersion", 2);
            BSON_APPEND_UTF8(&in, "direction", qi->desc ? "backward" : "forward");
            BSON_APPEND_DOCUMENT_BEGIN(&in, "indexBounds", &b);
            BSON_APPEND_ARRAY_BEGIN(&b, "_id", &arr);
            bson_append_array_end(&b, &arr);
            bson_append_document_end(&in, &b);
        }
        bson_append_document_end(out, &in);
        return;
    }
    if (qi->id_kind == SBL_ID_POINTS) {
        BSON_APPEND_UTF8(out, "stage", "IDHACK");
        if (stats) {
            BSON_APPEND_INT64(out, "nReturned", rs->nreturned);
            BSON_APPEND_INT64(out, "keysExamined", rs->keys);
            BSON_APPEND_INT64(out, "docsExamined", rs->docs);
        }
        return;
    }
    if (qi->id_kind == SBL_ID_NONE) {
        BSON_APPEND_UTF8(out, "stage", "EOF");
        return;
    }
    BSON_APPEND_UTF8(out, "stage", "COLLSCAN");
    if (filter != NULL && !bson_empty(filter))
        BSON_APPEND_DOCUMENT(out, "filter", filter);
    if (stats) {
        BSON_APPEND_INT64(out, "nReturned", rs->nreturned);
        BSON_APPEND_INT64(out, "executionTimeMillisEstimate", rs->millis);
        BSON_APPEND_INT64(out, "docsExamined", rs->docs);
    }
    BSON_APPEND_UTF8(out, "direction", qi->desc ? "backward" : "forward");
}

/* Wrap stages (outermost first): wrap, LIMIT, SKIP, SORT, then the access path. */
static void append_plan(bson_t *out, const explain_req_t *r, const sbl_qexec_info_t *qi,
                        const sbl_ixplan_t *p, const bson_t *filter, const run_stats_t *rs,
                        int level)
{
    bson_t in;
    bool stats = rs != NULL && rs->on;

#define STATS_LINE()                                                                               \
    do {                                                                                           \
        if (stats) {                                                                               \
            BSON_APPEND_INT64(out, "nReturned", rs->nreturned);                                    \
            BSON_APPEND_INT64(out, "executionTimeMillisEstimate", rs->millis);                     \
        }                                                                                          \
    } while (0)

    bool sort = p != NULL ? (r->has_sort && !p->provides_sort && !bson_empty(&r->sort))
                          : qi->in_memory_sort;
    if (level == 0 && r->wrap != NULL) {
        BSON_APPEND_UTF8(out, "stage", r->wrap);
        STATS_LINE();
        BSON_APPEND_DOCUMENT_BEGIN(out, "inputStage", &in);
        append_plan(&in, r, qi, p, filter, rs, 1);
        bson_append_document_end(out, &in);
        return;
    }
    if (level <= 1 && r->limit > 0 && !sort) {
        BSON_APPEND_UTF8(out, "stage", "LIMIT");
        STATS_LINE();
        BSON_APPEND_INT64(out, "limitAmount", r->limit);
        BSON_APPEND_DOCUMENT_BEGIN(out, "inputStage", &in);
        append_plan(&in, r, qi, p, filter, rs, 2);
        bson_append_document_end(out, &in);
        return;
    }
    if (level <= 2 && r->skip > 0) {
        BSON_APPEND_UTF8(out, "stage", "SKIP");
        STATS_LINE();
        BSON_APPEND_INT64(out, "skipAmount", r->skip);
        BSON_APPEND_DOCUMENT_BEGIN(out, "inputStage", &in);
        append_plan(&in, r, qi, p, filter, rs, 3);
        bson_append_document_end(out, &in);
        return;
    }
    if (level <= 3 && sort) {
        BSON_APPEND_UTF8(out, "stage", "SORT");
        STATS_LINE();
        BSON_APPEND_DOCUMENT(out, "sortPattern", &r->sort);
        BSON_APPEND_INT32(out, "memLimit", 104857600);
        if (r->limit > 0)
            BSON_APPEND_INT64(out, "limitAmount", r->skip + r->limit);
        BSON_APPEND_UTF8(out, "type", "simple");
        BSON_APPEND_DOCUMENT_BEGIN(out, "inputStage", &in);
        append_plan(&in, r, qi, p, filter, rs, 4);
        bson_append_document_end(out, &in);
        return;
    }
#undef STATS_LINE
    append_access(out, qi, p, filter, rs);
}

int sbl_exec_explain(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t inner, qp, es, arr, sub;
    explain_req_t r;
    char ns[SBL_NS_MAX];
    const char *verbosity = "allPlansExecution";
    sbl_qexec_t *q = NULL;
    sbl_qexec_info_t qi;
    run_stats_t rs = {0};
    int rc;

    if (!bson_iter_init_find(&it, ctx->cmd, "explain") || !sbl_iter_doc(&it, &inner))
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "explain command requires a nested object");
    if (bson_iter_init_find(&it, ctx->cmd, "verbosity")) {
        if (!BSON_ITER_HOLDS_UTF8(&it))
            return sbl_type_error(err, "explain.verbosity", &it, "string");
        verbosity = bson_iter_utf8(&it, NULL);
        if (strcmp(verbosity, "queryPlanner") != 0 && strcmp(verbosity, "executionStats") != 0 &&
            strcmp(verbosity, "allPlansExecution") != 0)
            return sbl_err_set(err, SBL_E_BadValue,
                               "Enumeration value '%s' for field 'explain.verbosity' is not a "
                               "valid value.", verbosity);
    }
    SBL_RET(parse_inner(&inner, &r, err));
    sbl_opctx_t inner_ctx = *ctx;
    inner_ctx.cmd = &inner;
    SBL_RET(sbl_op_ns(&inner_ctx, ns, sizeof(ns), err));

    sbl_qexec_opts_t o = {r.has_filter ? &r.filter : NULL, r.has_sort ? &r.sort : NULL, r.skip,
                          r.limit, NULL, false, false};
    SBL_RET(sbl_exec_collation(ctx, ns, bson_iter_init_find(&it, &inner, "collation") ? &it : NULL,
                               "collation", &o.collation, err));
    SBL_RET(sbl_qexec_new_hinted(ns, &o, r.has_hint ? &r.hint : NULL, &q, err));
    rs.on = strcmp(verbosity, "queryPlanner") != 0;
    if (rs.on) {
        int64_t t0 = sbl_now_us();
        for (;;) {
            bson_t doc;
            bool done = false;
            if ((rc = sbl_qexec_next(q, ctx, &doc, NULL, &done, err)) != 0) {
                sbl_qexec_free(q);
                return rc;
            }
            if (done)
                break;
            bson_destroy(&doc);
            rs.nreturned++;
        }
        rs.millis = (sbl_now_us() - t0) / 1000;
    }
    sbl_qexec_info(q, &qi);
    rs.keys = qi.keys_examined;
    rs.docs = qi.docs_examined;
    if (qi.ixp == NULL && qi.id_kind == SBL_ID_POINTS)
        rs.keys = rs.docs;

    bson_t empty = BSON_INITIALIZER;
    const bson_t *filter = r.has_filter ? &r.filter : &empty;
    BSON_APPEND_UTF8(ctx->reply, "explainVersion", "1");
    BSON_APPEND_DOCUMENT_BEGIN(ctx->reply, "queryPlanner", &qp);
    BSON_APPEND_UTF8(&qp, "namespace", ns);
    BSON_APPEND_BOOL(&qp, "indexFilterSet", false);
    BSON_APPEND_DOCUMENT(&qp, "parsedQuery", filter);
    BSON_APPEND_BOOL(&qp, "maxIndexedOrSolutionsReached", false);
    BSON_APPEND_BOOL(&qp, "maxIndexedAndSolutionsReached", false);
    BSON_APPEND_BOOL(&qp, "maxScansToExplodeReached", false);
    BSON_APPEND_DOCUMENT_BEGIN(&qp, "winningPlan", &sub);
    append_plan(&sub, &r, &qi, qi.ixp, filter, NULL, 0);
    bson_append_document_end(&qp, &sub);
    BSON_APPEND_ARRAY_BEGIN(&qp, "rejectedPlans", &arr);
    for (size_t i = 0; i < qi.nrejected; i++) {
        char kb[16];
        const char *k;
        bson_uint32_to_string((uint32_t)i, &k, kb, sizeof(kb));
        bson_append_document_begin(&arr, k, -1, &sub);
        append_plan(&sub, &r, &qi, qi.rejected[i], filter, NULL, 0);
        bson_append_document_end(&arr, &sub);
    }
    bson_append_array_end(&qp, &arr);
    bson_append_document_end(ctx->reply, &qp);
    if (rs.on) {
        BSON_APPEND_DOCUMENT_BEGIN(ctx->reply, "executionStats", &es);
        BSON_APPEND_BOOL(&es, "executionSuccess", true);
        BSON_APPEND_INT64(&es, "nReturned", rs.nreturned);
        BSON_APPEND_INT64(&es, "executionTimeMillis", rs.millis);
        BSON_APPEND_INT64(&es, "totalKeysExamined", rs.keys);
        BSON_APPEND_INT64(&es, "totalDocsExamined", rs.docs);
        BSON_APPEND_DOCUMENT_BEGIN(&es, "executionStages", &sub);
        append_plan(&sub, &r, &qi, qi.ixp, filter, &rs, 0);
        bson_append_document_end(&es, &sub);
        if (strcmp(verbosity, "allPlansExecution") == 0) {
            BSON_APPEND_ARRAY_BEGIN(&es, "allPlansExecution", &arr);
            bson_append_array_end(&es, &arr);
        }
        bson_append_document_end(ctx->reply, &es);
    }
    bson_t cmd_copy = BSON_INITIALIZER;
    bson_concat(&cmd_copy, &inner);
    BSON_APPEND_UTF8(&cmd_copy, "$db", ctx->db);
    BSON_APPEND_DOCUMENT(ctx->reply, "command", &cmd_copy);
    bson_destroy(&cmd_copy);
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    BSON_APPEND_DOCUMENT_BEGIN(ctx->reply, "serverInfo", &sub);
    BSON_APPEND_UTF8(&sub, "host", host);
    BSON_APPEND_UTF8(&sub, "version", "7.0.0");
    bson_append_document_end(ctx->reply, &sub);
    bson_destroy(&empty);
    sbl_qexec_free(q);
    return 0;
}

/* The key pattern returnKey reports for q's plan: the index's, _id's for a
 * plan in _id order (points, a range, or a requested _id sort), else {}. */
bson_t *sbl_qexec_key_pattern(const sbl_qexec_t *q, const bson_t *sort)
{
    sbl_qexec_info_t info;
    bson_iter_t it;
    bson_t key;
    bson_t *out = bson_new();
    sbl_qexec_info(q, &info);
    if (info.ixp != NULL) {
        if (bson_iter_init_find(&it, sbl_index_spec(info.ixp->ix), "key") && sbl_iter_doc(&it, &key))
            bson_concat(out, &key);
    } else if (info.id_kind != SBL_ID_ANY ||
               (sort != NULL && bson_count_keys(sort) == 1 && bson_iter_init_find(&it, sort, "_id"))) {
        BSON_APPEND_INT32(out, "_id", 1);
    }
    return out;
}

