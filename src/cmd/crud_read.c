/*
 * crud_read.c: the read commands find, count and distinct.
 *
 * find plans its query with the query engine (src/exec) and hands
 * the executor, wrapped with the projection, to the cursor layer; the
 * cursor resumes it on getMore.  What must stay true: a find by _id with
 * limit 1 is one point lookup, and a missing collection is an empty result
 * (cursor id 0), never an error.
 */
#include "cmd/capped.h"
#include "cmd/crud_int.h"
#include "agg/agg.h"
#include "expr/expr.h"
#include "doc/doc.h"

#include <stdlib.h>
#include <string.h>

/* ---- find ----------------------------------------------------------------- */

static const char *const find_fields[] = {
    "find", "filter", "projection", "sort", "hint", "skip", "limit", "batchSize", "singleBatch",
    "allowDiskUse", "let", "collation", "returnKey", "showRecordId", "min", "max", "tailable",
    "awaitData", "noCursorTimeout", "allowPartialResults", "oplogReplay", "readOnce", "term",
    "allowSpeculativeMajorityRead", "includeQueryStatsMetrics", "collectionUUID", NULL};

typedef struct find_state {
    sbl_qexec_t *q;
    sbl_projection_t *proj; /* NULL: whole documents */
    bson_t *key_pattern;    /* returnKey: the plan's index key ({} for a collection scan) */
    bool show_record_id;    /* showRecordId: each result ends with $recordId */
    bool tail_oplog;        /* a tailable read of local.oplog.rs (a secondary's fetcher) */
    bool dry;               /* tail_oplog: its last read found nothing more ... */
    uint64_t dry_gen;       /* ... at this sbl_capped_generation() */
} find_state_t;

/* returnKey: the document's values of the index key's fields (null when missing). */
static void key_of(const bson_t *pattern, const bson_t *raw, bson_t *doc)
{
    bson_iter_t p, root, v;
    bson_init(doc);
    bson_iter_init(&p, pattern);
    while (bson_iter_next(&p)) {
        const char *f = bson_iter_key(&p);
        if (bson_iter_init(&root, raw) && bson_iter_find_descendant(&root, f, &v))
            sbl_append_iter(doc, f, -1, &v);
        else
            bson_append_null(doc, f, -1);
    }
}

static int find_next(void *state, sbl_opctx_t *ctx, bson_t *doc, bool *donep, sbl_err_t *err)
{
    find_state_t *st = state;
    bson_t raw;
    int32_t pos = -1;

    SBL_RET(sbl_qexec_next(st->q, ctx, &raw, &pos, donep, err));
    if (st->tail_oplog && (st->dry = *donep))
        st->dry_gen = sbl_capped_generation();
    if (*donep)
        return 0;
    if (st->show_record_id && st->key_pattern == NULL) { /* returnKey shows the key alone */
        int64_t rid = sbl_doc_record_id(&raw);
        int rc = 0;
        if (st->proj == NULL) {
            bson_init(doc);
            bson_concat(doc, &raw);
        } else {
            bson_init(doc);
            if ((rc = sbl_projection_apply(st->proj, &raw, pos, doc, err)) != 0)
                bson_destroy(doc);
        }
        bson_destroy(&raw);
        if (rc == 0 && !bson_has_field(doc, "$recordId"))
            bson_append_int64(doc, "$recordId", -1, rid);
        return rc;
    }
    if (st->key_pattern != NULL) {
        key_of(st->key_pattern, &raw, doc);
        bson_destroy(&raw);
        return 0;
    }
    if (st->proj == NULL) {
        bson_steal(doc, &raw);
        return 0;
    }
    bson_init(doc);
    int rc = sbl_projection_apply(st->proj, &raw, pos, doc, err);
    bson_destroy(&raw);
    if (rc != 0)
        bson_destroy(doc);
    return rc;
}

static void find_free(void *state)
{
    find_state_t *st = state;
    if (st == NULL)
        return;
    sbl_qexec_free(st->q);
    sbl_projection_free(st->proj);
    if (st->key_pattern != NULL)
        bson_destroy(st->key_pattern);
    free(st);
}

/* A tailable find is over once it has returned its limit. */
static bool find_finished(void *state)
{
    return sbl_qexec_limit_reached(((find_state_t *)state)->q);
}

/* An oplog tail that found nothing more last time reads only what the
 * commits since brought (an entry or a few each): its getMore, and the one
 * its awaitData wait's wake-up runs, are served on the network loop
 * (dispatch.c) instead of being handed to a worker and back, two thread
 * hops on the way from a commit to the secondaries.  After more commits
 * than QUICK_COMMITS (a secondary far behind, a bulk insert) it may read a
 * large batch: a worker does. */
#define QUICK_COMMITS 16

static bool find_quick(void *state)
{
    const find_state_t *st = state;
    return st->tail_oplog && st->dry && sbl_capped_generation() - st->dry_gen <= QUICK_COMMITS;
}

static const sbl_cursor_source_t find_source = {
    .next = find_next, .free = find_free, .finished = find_finished, .quick = find_quick};

/* View the document held by the iterator as *out (read-only, no copy). */
/* Read a non-negative integer option ("skip", "batchSize"...) as find does. */
static int get_count_arg(const bson_iter_t *it, const char *req, int64_t *out, bool allow_neg,
                         sbl_err_t *err)
{
    char field[96];
    sbl_join_dot(field, sizeof(field), req, bson_iter_key(it));
    if (!BSON_ITER_HOLDS_NUMBER(it) && !BSON_ITER_HOLDS_DECIMAL128(it))
        return sbl_type_error(err, field, it, "[long, int, decimal, double]");
    SBL_RET(sbl_get_int64(it, out, err));
    if (*out < 0 && !allow_neg)
        return sbl_err_set(err, SBL_E_Location51024,
                           "BSON field '%s' value must be >= 0, actual value '%lld'", field,
                           (long long)*out);
    return 0;
}

/* find's own arguments, told apart by their first byte before any strcmp
 * (a read by _id runs this for each of its fields). */
enum find_arg {
    FA_OTHER, FA_FILTER, FA_PROJECTION, FA_SORT, FA_LET, FA_COLLATION, FA_SKIP, FA_LIMIT,
    FA_BATCH_SIZE, FA_HINT, FA_SINGLE_BATCH, FA_RETURN_KEY, FA_FLAG, FA_PLAN /* min/max */
};

static enum find_arg find_arg(const char *k)
{
    switch (k[0]) {
    case 'f':
        return strcmp(k, "filter") == 0 ? FA_FILTER : FA_OTHER;
    case 'p':
        return strcmp(k, "projection") == 0 ? FA_PROJECTION : FA_OTHER;
    case 's':
        if (strcmp(k, "sort") == 0)
            return FA_SORT;
        if (strcmp(k, "skip") == 0)
            return FA_SKIP;
        if (strcmp(k, "singleBatch") == 0)
            return FA_SINGLE_BATCH;
        return strcmp(k, "showRecordId") == 0 ? FA_FLAG : FA_OTHER;
    case 'l':
        if (strcmp(k, "limit") == 0)
            return FA_LIMIT;
        return strcmp(k, "let") == 0 ? FA_LET : FA_OTHER;
    case 'c':
        return strcmp(k, "collation") == 0 ? FA_COLLATION : FA_OTHER;
    case 'b':
        return strcmp(k, "batchSize") == 0 ? FA_BATCH_SIZE : FA_OTHER;
    case 'h':
        return strcmp(k, "hint") == 0 ? FA_HINT : FA_OTHER;
    case 'r':
        return strcmp(k, "returnKey") == 0 ? FA_RETURN_KEY : FA_OTHER;
    case 'a':
        return strcmp(k, "allowDiskUse") == 0 || strcmp(k, "awaitData") == 0 ||
                       strcmp(k, "allowPartialResults") == 0
                   ? FA_FLAG
                   : FA_OTHER;
    case 't':
        return strcmp(k, "tailable") == 0 ? FA_FLAG : FA_OTHER;
    case 'n':
        return strcmp(k, "noCursorTimeout") == 0 ? FA_FLAG : FA_OTHER;
    case 'm':
        return strcmp(k, "min") == 0 || strcmp(k, "max") == 0 ? FA_PLAN : FA_OTHER;
    default:
        return FA_OTHER;
    }
}

/* find {_id: v} without a plan, an executor or a cursor: one point lookup. */
/* *dupp: ns is a time-series collection, nothing was replied (plan the query). */
static int find_by_id(sbl_opctx_t *ctx, const char *ns, const bson_value_t *id, bool *dupp,
                      sbl_err_t *err)
{
    bson_t doc;
    bool found = false;
    SBL_RET(sbl_qexec_get_id(ctx, ns, id, &doc, &found, dupp, err));
    if (*dupp)
        return 0;
    sbl_cursor_reply_one(ctx, ns, found ? &doc : NULL);
    if (found)
        bson_destroy(&doc);
    return 0;
}

int sbl_cmd_find(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int vrc; /* a view: the command runs as an aggregation over its source */
    if (sbl_views_any() && (vrc = sbl_view_read(ctx, err)) >= 0)
        return vrc;
    static const char *req = "FindCommandRequest";
    char ns[SBL_NS_MAX];
    bson_iter_t it;
    bson_value_t hint;
    bool has_hint = false;
    bson_t filter, projection, sort, let_spec, min_doc, max_doc;
    bool has_filter = false, has_proj = false, has_sort = false, single_batch = false;
    bool has_min = false, has_max = false;
    bool has_let = false, has_coll = false, return_key = false, plain = true;
    bool tailable = false, await_data = false; /* capped collections (capped.c) */
    bool show_record_id = false;
    unsigned cursor_flags = 0;
    bson_iter_t coll_it;
    int64_t skip = 0, limit = 0, batch_size = -1;
    char field[96];

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    SBL_RET(sbl_check_fields(ctx->cmd, req, find_fields, err));
    bson_iter_init(&it, ctx->cmd);
    bson_iter_next(&it); /* the command name */
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        enum find_arg a = find_arg(k);
        if (a == FA_OTHER)
            continue;
        sbl_join_dot(field, sizeof(field), req, k);
        switch (a) {
        case FA_FILTER:
        case FA_PROJECTION:
        case FA_SORT:
        case FA_LET:
        case FA_COLLATION:
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, field, &it, "object");
            if (a == FA_LET) {
                has_let = sbl_iter_doc(&it, &let_spec);
                plain = false;
                break;
            }
            if (a == FA_COLLATION) {
                coll_it = it;
                has_coll = true;
                plain = false;
                break;
            }
            bson_t *dst = a == FA_FILTER ? &filter : a == FA_PROJECTION ? &projection : &sort;
            if (!sbl_iter_doc(&it, dst))
                return sbl_err_set(err, SBL_E_InvalidBSON, "invalid %s", k);
            *(a == FA_FILTER ? &has_filter : a == FA_PROJECTION ? &has_proj : &has_sort) = true;
            if (a != FA_FILTER && !bson_empty(dst))
                plain = false;
            break;
        case FA_SKIP:
            SBL_RET(get_count_arg(&it, req, &skip, false, err));
            break;
        case FA_LIMIT:
            /* Drivers turn a negative limit into limit + singleBatch; the
             * find command itself refuses one, as mongod 7.0 does. */
            SBL_RET(get_count_arg(&it, req, &limit, false, err));
            break;
        case FA_BATCH_SIZE:
            SBL_RET(get_count_arg(&it, req, &batch_size, false, err));
            break;
        case FA_SINGLE_BATCH:
        case FA_RETURN_KEY:
        case FA_FLAG:
            if (!BSON_ITER_HOLDS_BOOL(&it))
                return sbl_type_error(err, field, &it, "bool");
            if (a == FA_SINGLE_BATCH && bson_iter_bool(&it))
                single_batch = true;
            if (a == FA_RETURN_KEY && bson_iter_bool(&it))
                return_key = true;
            if (a == FA_FLAG && bson_iter_bool(&it))
                plain = false; /* tailable, showRecordId ...: the general path */
            if (a == FA_FLAG && k[0] == 's')
                show_record_id = bson_iter_bool(&it);
            if (a == FA_FLAG && k[0] == 't')
                tailable = bson_iter_bool(&it);
            if (a == FA_FLAG && strcmp(k, "awaitData") == 0)
                await_data = bson_iter_bool(&it);
            break;
        case FA_HINT:
            SBL_RET(sbl_exec_get_hint(&it, &hint, &has_hint, err));
            break;
        case FA_PLAN: {
            bson_t *dst = k[1] == 'i' ? &min_doc : &max_doc;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, field, &it, "object");
            if (!sbl_iter_doc(&it, dst))
                return sbl_err_set(err, SBL_E_InvalidBSON, "invalid %s", k);
            *(k[1] == 'i' ? &has_min : &has_max) = !bson_empty(dst);
            plain = false;
            break;
        }
        case FA_OTHER:
            plain = false;
            break;
        }
    }

    bson_value_t id;
    if (plain && has_filter && !has_hint && !return_key && skip == 0 && batch_size != 0 &&
        sbl_exec_filter_id_point(&filter, &id)) {
        const sbl_collation_t *dc = NULL;
        SBL_RET(sbl_exec_default_collation(ctx, ns, &dc, err));
        bool dup = false;
        if (dc == NULL || (id.value_type != BSON_TYPE_UTF8)) {
            SBL_RET(find_by_id(ctx, ns, &id, &dup, err));
            if (!dup)
                return 0;
        }
    }

    if (tailable || await_data) { /* capped collections (capped.c): a natural-order scan */
        SBL_RET(sbl_capped_check_find(ctx, ns, tailable, await_data, has_sort ? &sort : NULL,
                                      single_batch, &cursor_flags, err));
        if (cursor_flags != 0 && !has_hint) {
            static const uint8_t natural[] = {19, 0, 0, 0, 16, '$', 'n', 'a', 't', 'u', 'r',
                                              'a', 'l', 0, 1, 0, 0, 0, 0};
            hint.value_type = BSON_TYPE_DOCUMENT;
            hint.value.v_doc.data = (uint8_t *)natural;
            hint.value.v_doc.data_len = sizeof(natural);
            has_hint = true;
        }
    }
    find_state_t *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    /* `let` variables reach $expr through a $let wrapped around it */
    bson_t let_vals = BSON_INITIALIZER, bound = BSON_INITIALIZER;
    int rc = 0;
    if (has_let) {
        bson_destroy(&let_vals);
        if ((rc = sbl_expr_eval_let(&let_spec, &let_vals, err)) != 0)
            bson_init(&let_vals);
        if (rc == 0 && has_filter) {
            bson_destroy(&bound);
            sbl_expr_bind_let(&filter, &let_vals, &bound);
        }
    }
    const sbl_collation_t *coll = NULL;
    if (rc == 0)
        rc = sbl_exec_collation(ctx, ns, has_coll ? &coll_it : NULL, "FindCommandRequest.collation",
                                &coll, err);
    sbl_qexec_opts_t o = {has_filter ? (has_let ? &bound : &filter) : NULL,
                          has_sort ? &sort : NULL, skip, limit, coll, false, false};
    /* a projection removes a $text query's score field (or shows it, $meta) */
    o.keep_text_score = has_proj && !bson_empty(&projection) && !return_key;
    if (rc == 0)
        rc = sbl_qexec_new_min_max(ns, &o, has_hint ? &hint : NULL, has_min ? &min_doc : NULL,
                                   has_max ? &max_doc : NULL, &st->q, err);
    if (rc == 0 && has_sort) /* a blocking sort may spill: allowDiskUse (src/exec/spill.c) */
        sbl_qexec_set_disk_use(st->q, sbl_spill_disk_use(ctx->cmd));
    bson_destroy(&bound);
    if (rc == 0 && return_key) /* the projection is then ignored, as in mongod */
        st->key_pattern = sbl_qexec_key_pattern(st->q, has_sort ? &sort : NULL);
    else if (rc == 0 && has_proj && !bson_empty(&projection)) {
        st->proj = sbl_projection_new_let(&projection, &let_vals, err);
        if (st->proj == NULL)
            rc = err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "invalid projection");
    }
    bson_destroy(&let_vals);
    if (rc != 0) {
        find_free(st);
        return rc;
    }
    st->show_record_id = show_record_id;
    if (cursor_flags & SBL_CURSOR_TAILABLE) {
        sbl_qexec_set_tailable(st->q);
        st->tail_oplog = strcmp(ns, "local.oplog.rs") == 0;
    }
    return sbl_cursor_first_batch_flags(ctx, ns, &find_source, st, batch_size, single_batch,
                                        cursor_flags, err);
}

/* ---- count ------------------------------------------------------------------ */

static const char *const count_fields[] = {"count", "query", "limit", "skip", "hint",
                                           "collation", "fields", "let", "collectionUUID", NULL};

static void append_number(bson_t *b, const char *k, int64_t n)
{
    if (n >= INT32_MIN && n <= INT32_MAX)
        bson_append_int32(b, k, -1, (int32_t)n);
    else
        bson_append_int64(b, k, -1, n);
}

int sbl_cmd_count(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int vrc; /* a view: the command runs as an aggregation over its source */
    if (sbl_views_any() && (vrc = sbl_view_read(ctx, err)) >= 0)
        return vrc;
    static const char *req = "CountCommandRequest";
    char ns[SBL_NS_MAX];
    bson_iter_t it;
    bson_value_t hint;
    bool has_hint = false;
    bson_t query;
    bool has_query = false;
    int64_t skip = 0, limit = 0;
    const sbl_collation_t *coll = NULL;

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    SBL_RET(sbl_check_fields(ctx->cmd, req, count_fields, err));
    SBL_RET(sbl_exec_collation(ctx, ns, bson_iter_init_find(&it, ctx->cmd, "collation") ? &it : NULL,
                               "CountCommandRequest.collation", &coll, err));
    bson_iter_init(&it, ctx->cmd);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "query") == 0) {
            if (BSON_ITER_HOLDS_NULL(&it))
                continue;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, "CountCommandRequest.query", &it, "object");
            if (!sbl_iter_doc(&it, &query))
                return sbl_err_set(err, SBL_E_InvalidBSON, "invalid query");
            has_query = !bson_empty(&query);
        } else if (strcmp(k, "skip") == 0) {
            SBL_RET(get_count_arg(&it, req, &skip, false, err));
        } else if (strcmp(k, "limit") == 0) {
            SBL_RET(get_count_arg(&it, req, &limit, true, err));
            if (limit < 0)
                limit = -limit;
        } else if (strcmp(k, "hint") == 0) {
            SBL_RET(sbl_exec_get_hint(&it, &hint, &has_hint, err));
        }
    }

    int64_t n = 0;
    if (!has_query && !has_hint) {
        sbl_coll_t *c = NULL;
        sbl_err_t e2 = {0};
        int rc = sbl_coll_open(ctx->ss, ns, false, &c, NULL, &e2);
        if (rc == 0) {
            sbl_coll_stats_t stats;
            rc = sbl_coll_stats(ctx->ss, c, &stats, err);
            sbl_coll_release(c);
            if (rc != 0)
                return rc;
            n = stats.count - skip;
            if (n < 0)
                n = 0;
            if (limit > 0 && n > limit)
                n = limit;
        } else if (rc != SBL_E_NamespaceNotFound) {
            *err = e2;
            return rc;
        }
    } else {
        sbl_qexec_t *q = NULL;
        sbl_qexec_opts_t o = {has_query ? &query : NULL, NULL, skip, limit, coll, false, false};
        SBL_RET(sbl_qexec_new_hinted(ns, &o, has_hint ? &hint : NULL, &q, err));
        for (;;) {
            bson_t doc;
            bool done = false;
            int rc = sbl_qexec_next(q, ctx, &doc, NULL, &done, err);
            if (rc != 0) {
                sbl_qexec_free(q);
                return rc;
            }
            if (done)
                break;
            bson_destroy(&doc);
            n++;
        }
        sbl_qexec_free(q);
    }
    append_number(ctx->reply, "n", n);
    return 0;
}

/* ---- distinct --------------------------------------------------------------- */

static const char *const distinct_fields[] = {"distinct", "key", "query", "collation", "hint",
                                              "let", "collectionUUID", NULL};

typedef struct value_set {
    bson_value_t *v;
    size_t n, cap;
} value_set_t;

static void set_add(value_set_t *s, const bson_value_t *v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        if (s->v == NULL)
            abort();
    }
    bson_value_copy(v, &s->v[s->n++]);
}

/* Collect the values at path parts[0..nparts) below it, expanding arrays the
 * way MongoDB's distinct does (an array at the end adds its elements). */
static void collect_path(value_set_t *s, const bson_iter_t *it, char **parts, size_t nparts)
{
    bson_iter_t sub;
    if (nparts == 0) {
        if (BSON_ITER_HOLDS_ARRAY(it)) {
            bson_iter_recurse(it, &sub);
            while (bson_iter_next(&sub))
                set_add(s, bson_iter_value(&sub));
        } else {
            bson_value_t v;
            sbl_iter_value(it, &v);
            set_add(s, &v);
        }
        return;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        if (bson_iter_recurse(it, &sub) && bson_iter_find(&sub, parts[0]))
            collect_path(s, &sub, parts + 1, nparts - 1);
    } else if (BSON_ITER_HOLDS_ARRAY(it)) {
        bson_iter_recurse(it, &sub);
        while (bson_iter_next(&sub))
            if (BSON_ITER_HOLDS_DOCUMENT(&sub))
                collect_path(s, &sub, parts, nparts);
    }
}

/* Order under the collation arg (NULL: binary); values equal under it order
 * binary, so the value kept for a group of equal ones does not depend on qsort. */
static int cmp_values(const void *a, const void *b, void *arg)
{
    int c = sbl_value_compare_coll(a, b, arg);
    return c != 0 || arg == NULL ? c : sbl_value_compare(a, b);
}

static void set_free(value_set_t *s)
{
    for (size_t k = 0; k < s->n; k++)
        bson_value_destroy(&s->v[k]);
    free(s->v);
}

int sbl_cmd_distinct(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int vrc; /* a view: the command runs as an aggregation over its source */
    if (sbl_views_any() && (vrc = sbl_view_read(ctx, err)) >= 0)
        return vrc;
    static const char *req = "DistinctCommandRequest";
    char ns[SBL_NS_MAX];
    bson_iter_t it;
    bson_value_t hint;
    bool has_hint = false;
    bson_t query;
    bool has_query = false;
    const char *key = NULL;
    const sbl_collation_t *coll = NULL;

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    SBL_RET(sbl_check_fields(ctx->cmd, req, distinct_fields, err));
    SBL_RET(sbl_exec_collation(ctx, ns, bson_iter_init_find(&it, ctx->cmd, "collation") ? &it : NULL,
                               "DistinctCommandRequest.collation", &coll, err));
    bson_iter_init(&it, ctx->cmd);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "key") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_type_error(err, "DistinctCommandRequest.key", &it, "string");
            key = bson_iter_utf8(&it, NULL);
        } else if (strcmp(k, "query") == 0) {
            if (BSON_ITER_HOLDS_NULL(&it))
                continue;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, "DistinctCommandRequest.query", &it, "object");
            if (!sbl_iter_doc(&it, &query))
                return sbl_err_set(err, SBL_E_InvalidBSON, "invalid query");
            has_query = true;
        } else if (strcmp(k, "hint") == 0) {
            SBL_RET(sbl_exec_get_hint(&it, &hint, &has_hint, err));
        }
    }
    if (key == NULL)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "BSON field 'distinct.key' is missing but a required field");

    /* Split the key into path parts once. */
    char *path = bson_strdup(key);
    char *parts[64];
    size_t nparts = 0;
    for (char *save = NULL, *p = strtok_r(path, ".", &save); p != NULL && nparts < 64;
         p = strtok_r(NULL, ".", &save))
        parts[nparts++] = p;

    value_set_t set = {0};
    sbl_qexec_t *q = NULL;
    sbl_qexec_opts_t o = {has_query ? &query : NULL, NULL, 0, 0, coll, false, false};
    void *carg = (void *)coll; /* qsort_r's argument is not const */
    int rc = sbl_qexec_new_hinted(ns, &o, has_hint ? &hint : NULL, &q, err);
    while (rc == 0 && nparts > 0) {
        bson_t doc;
        bool done = false;
        if ((rc = sbl_qexec_next(q, ctx, &doc, NULL, &done, err)) != 0 || done)
            break;
        bson_iter_t top;
        if (bson_iter_init_find(&top, &doc, parts[0]))
            collect_path(&set, &top, parts + 1, nparts - 1);
        bson_destroy(&doc);
        /* Deduplicate as we go so memory follows the distinct values. */
        if (set.n > 4096 && set.n == set.cap) {
            qsort_r(set.v, set.n, sizeof(*set.v), cmp_values, carg);
            size_t w = 1;
            for (size_t r = 1; r < set.n; r++) {
                if (sbl_value_compare_coll(&set.v[w - 1], &set.v[r], coll) == 0)
                    bson_value_destroy(&set.v[r]);
                else
                    set.v[w++] = set.v[r];
            }
            set.n = w;
        }
    }
    sbl_qexec_free(q);
    bson_free(path);
    if (rc != 0) {
        set_free(&set);
        return rc;
    }
    if (set.n > 0)
        qsort_r(set.v, set.n, sizeof(*set.v), cmp_values, carg);
    bson_t values;
    uint32_t nv = 0;
    char kb[16];
    bson_append_array_begin(ctx->reply, "values", -1, &values);
    for (size_t r = 0; r < set.n; r++) {
        if (r > 0 && sbl_value_compare_coll(&set.v[r - 1], &set.v[r], coll) == 0)
            continue;
        sbl_append_value(&values, sbl_array_key(nv++, kb), -1, &set.v[r]);
    }
    bson_append_array_end(ctx->reply, &values);
    set_free(&set);
    return 0;
}
