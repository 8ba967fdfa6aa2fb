/*
 * pipeline.c: running a pipeline, and the per-document stages ($match
 * $project $addFields/$set $unset $replaceRoot/$replaceWith $sort $skip
 * $limit $count $unwind $collStats).  $group lives in group.c, the stages
 * that read or write other collections and the grouping shorthands in
 * stages.c; expressions are src/expr's; the aggregate command itself is
 * src/cmd/aggregate.c.
 *
 * The leading $match (and a $sort / $skip / $limit right after it) is handed
 * to the query engine (src/exec), so it uses indexes and range scans like find; the
 * rest of the pipeline runs over the documents in memory, stage by stage,
 * and the result is served through a cursor over that array.
 * What must stay true: every stage owns the documents it produces and frees
 * the ones it consumes (sbl_docvec_t), also on error; an expression is parsed
 * once per stage, not once per document.
 */
#include "agg/agg.h"
#include "doc/doc.h"
#include "expr/expr.h"

#include <stdlib.h>
#include <string.h>

#define SBL_E_InvalidPipelineOperator 168
#define SBL_E_StageNotOneField 40323
#define SBL_E_NewRootNotObject 40228
#define SBL_E_BadLimit 15958
#define SBL_E_BadSkip 15956
#define SBL_E_BadUnwind 15981
#define SBL_E_FinalStageOnly 40601
#define AGG_MAX_DEPTH 20

/* ---- document vectors ------------------------------------------------------ */

void sbl_docvec_push(sbl_docvec_t *dv, bson_t *doc)
{
    if (dv->n == dv->cap) {
        dv->cap = dv->cap ? dv->cap * 2 : 64;
        dv->v = realloc(dv->v, dv->cap * sizeof(*dv->v));
        if (dv->v == NULL)
            abort();
    }
    dv->v[dv->n++] = doc;
}

void sbl_docvec_clear(sbl_docvec_t *dv)
{
    for (size_t i = 0; i < dv->n; i++)
        bson_destroy(dv->v[i]);
    free(dv->v);
    dv->v = NULL;
    dv->n = dv->cap = 0;
}

/* ---- document editing ------------------------------------------------------------ */

/* Copy in to out (initialised by the caller) with the dotted path set to v,
 * or removed when v is NULL; missing intermediate documents are created. */
void sbl_agg_set_path(const bson_t *in, const char *path, const bson_value_t *v, bson_t *out)
{
    if (v != NULL && v->value_type == BSON_TYPE_EOD)
        v = NULL;
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    bool found = false;
    bson_iter_t it;
    char head[256];

    snprintf(head, sizeof(head), "%.*s", (int)len, path);
    if (in != NULL && bson_iter_init(&it, in)) {
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, head) != 0) {
                sbl_append_iter(out, k, -1, &it);
                continue;
            }
            found = true;
            if (dot == NULL) {
                if (v != NULL)
                    sbl_append_value(out, k, -1, v);
                continue;
            }
            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                uint32_t dlen;
                const uint8_t *data;
                bson_t subin, sub;
                bson_iter_document(&it, &dlen, &data);
                bson_init_static(&subin, data, dlen);
                bson_append_document_begin(out, k, -1, &sub);
                sbl_agg_set_path(&subin, dot + 1, v, &sub);
                bson_append_document_end(out, &sub);
            } else if (v != NULL) {
                bson_t sub;
                bson_append_document_begin(out, k, -1, &sub);
                sbl_agg_set_path(NULL, dot + 1, v, &sub);
                bson_append_document_end(out, &sub);
            } else {
                sbl_append_iter(out, k, -1, &it);
            }
        }
    }
    if (!found && v != NULL) {
        if (dot == NULL) {
            sbl_append_value(out, head, -1, v);
        } else {
            bson_t sub;
            bson_append_document_begin(out, head, -1, &sub);
            sbl_agg_set_path(NULL, dot + 1, v, &sub);
            bson_append_document_end(out, &sub);
        }
    }
}

/* Replace dv->v[i] by a heap copy of *b. */
static void replace_doc(sbl_docvec_t *dv, size_t i, bson_t *b)
{
    bson_destroy(dv->v[i]);
    dv->v[i] = bson_copy(b);
    bson_destroy(b);
}

int sbl_agg_eval(const sbl_agg_env_t *env, const struct sbl_expr *e, const bson_t *doc,
                 bson_value_t *out, sbl_err_t *err)
{
    sbl_expr_env_t xe = {.root = doc, .let = env->let, .now_ms = env->now_ms, .coll = env->coll};
    return sbl_expr_eval(e, &xe, out, err);
}

/* ---- computed fields ------------------------------------------------------------- */

/* Parsed "path: expression" pairs of $addFields / $project. */
typedef struct computed {
    char **paths;
    sbl_expr_t **exprs;
    size_t n;
} computed_t;

static void computed_free(computed_t *c)
{
    for (size_t i = 0; i < c->n; i++) {
        bson_free(c->paths[i]);
        sbl_expr_free(c->exprs[i]);
    }
    bson_free(c->paths);
    bson_free(c->exprs);
    memset(c, 0, sizeof(*c));
}

static int computed_add(computed_t *c, const char *path, const bson_value_t *spec, sbl_err_t *err)
{
    sbl_expr_t *e = NULL;
    if (path[0] == '$')
        return sbl_err_set(err, 16410, "FieldPath field names may not start with '$'. Consider "
                                       "using $getField or $setField.");
    if (path[0] == '\0')
        return sbl_err_set(err, 40352, "FieldPath cannot be constructed with empty string");
    SBL_RET(sbl_expr_parse(spec, &e, err));
    c->paths = bson_realloc(c->paths, (c->n + 1) * sizeof(*c->paths));
    c->exprs = bson_realloc(c->exprs, (c->n + 1) * sizeof(*c->exprs));
    c->paths[c->n] = bson_strdup(path);
    c->exprs[c->n++] = e;
    return 0;
}

/* Evaluate every computed field on orig and set it into *cur (replaced). */
static int computed_apply(const sbl_agg_env_t *env, const computed_t *c, const bson_t *orig,
                          bson_t *cur, sbl_err_t *err)
{
    for (size_t i = 0; i < c->n; i++) {
        bson_value_t v;
        SBL_RET(sbl_agg_eval(env, c->exprs[i], orig, &v, err));
        bson_t next = BSON_INITIALIZER;
        sbl_agg_set_path(cur, c->paths[i], &v, &next);
        bson_value_destroy(&v);
        bson_destroy(cur);
        bson_copy_to(&next, cur);
        bson_destroy(&next);
    }
    return 0;
}

/* ---- stages ----------------------------------------------------------------------- */

static int st_match(const sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec,
                    sbl_err_t *err)
{
    bson_t bound;
    bson_iter_t ti;
    if (bson_iter_init_find(&ti, spec, "$text")) /* the first $match's went to the executor */
        return sbl_err_set(err, 17313,
                           "$match with $text is only allowed as the first pipeline stage");
    SBL_RET(sbl_filter_refuse_where(spec, err)); /* $function is the pipeline's JavaScript */
    sbl_expr_bind_let(spec, env->let, &bound);
    sbl_matcher_t *m = sbl_matcher_new(&bound, err);
    bson_destroy(&bound);
    if (m == NULL)
        return err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "bad $match");
    if (env->coll != NULL)
        sbl_matcher_set_collation(m, env->coll);
    size_t w = 0;
    sbl_expr_take_match_error(NULL);
    for (size_t i = 0; i < dv->n; i++) {
        if (sbl_matcher_match(m, dv->v[i], NULL))
            dv->v[w++] = dv->v[i];
        else
            bson_destroy(dv->v[i]);
    }
    dv->n = w;
    sbl_matcher_free(m);
    return sbl_expr_take_match_error(err); /* an $expr that failed fails the stage */
}

/* Apply a find-style projection to every document. */
static int apply_projection(sbl_docvec_t *dv, const bson_t *spec, sbl_err_t *err)
{
    sbl_projection_t *p = sbl_projection_new(spec, err);
    if (p == NULL)
        return err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "bad projection");
    int rc = 0;
    for (size_t i = 0; i < dv->n && rc == 0; i++) {
        bson_t out = BSON_INITIALIZER;
        if ((rc = sbl_projection_apply(p, dv->v[i], -1, &out, err)) == 0)
            replace_doc(dv, i, &out);
        else
            bson_destroy(&out);
    }
    sbl_projection_free(p);
    return rc;
}

typedef struct proj_parts {
    bson_t inc, exc;
    computed_t computed;
    bool id_excluded, id_included, any_inc, any_exc;
} proj_parts_t;

/* Sort $project's fields into inclusions, exclusions and computed ones; nested
 * documents without operators ({a: {b: 1}}) stand for dotted paths. */
static int project_split(const bson_t *spec, const char *prefix, proj_parts_t *pp, int depth,
                         sbl_err_t *err)
{
    bson_iter_t it;
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        char path[1024];
        const char *k = bson_iter_key(&it);
        snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "", k);
        bson_value_t v;
        sbl_iter_value(&it, &v);
        if (BSON_ITER_HOLDS_NUMBER(&it) || BSON_ITER_HOLDS_BOOL(&it)) {
            bool on = bson_iter_as_bool(&it);
            if (strcmp(path, "_id") == 0) {
                pp->id_excluded = !on;
                pp->id_included = on;
                continue;
            }
            bson_append_int32(on ? &pp->inc : &pp->exc, path, -1, on ? 1 : 0);
            *(on ? &pp->any_inc : &pp->any_exc) = true;
            continue;
        }
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && depth < 50) {
            bson_t sub;
            bson_iter_t f;
            sbl_iter_doc(&it, &sub);
            if (bson_iter_init(&f, &sub) && bson_iter_next(&f) && bson_iter_key(&f)[0] != '$') {
                SBL_RET(project_split(&sub, path, pp, depth + 1, err));
                continue;
            }
            if (bson_empty(&sub))
                return sbl_err_set(err, 51270, "An empty sub-projection is not a valid value. "
                                               "Found empty object at path");
        }
        SBL_RET(computed_add(&pp->computed, path, &v, err));
    }
    return 0;
}

static int st_project(const sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec,
                      sbl_err_t *err)
{
    proj_parts_t pp;
    int rc = 0;
    memset(&pp, 0, sizeof(pp));
    bson_init(&pp.inc);
    bson_init(&pp.exc);
    if (bson_empty(spec)) {
        rc = sbl_err_set(err, 51272, "projection specification must have at least one field");
        goto done;
    }
    if ((rc = project_split(spec, "", &pp, 0, err)) != 0)
        goto done;
    bool any_computed = pp.computed.n > 0;
    if (pp.any_exc && (pp.any_inc || any_computed)) {
        rc = sbl_err_set(err, SBL_E_Location31254,
                         "Invalid $project :: caused by :: Cannot do exclusion on field %s in "
                         "inclusion projection",
                         "");
        goto done;
    }
    if (!pp.any_inc && !any_computed && !(pp.id_included && !pp.any_exc)) { /* exclusion */
        if (pp.id_excluded)
            bson_append_int32(&pp.exc, "_id", 3, 0);
        rc = apply_projection(dv, &pp.exc, err);
        goto done;
    }
    /* inclusion: the included fields, then the computed ones */
    bson_t inc = BSON_INITIALIZER;
    bson_append_int32(&inc, "_id", 3, pp.id_excluded ? 0 : 1);
    bson_concat(&inc, &pp.inc);
    sbl_projection_t *p = sbl_projection_new(&inc, err);
    bson_destroy(&inc);
    if (p == NULL) {
        rc = err->code ? err->code : SBL_E_BadValue;
        goto done;
    }
    for (size_t i = 0; i < dv->n && rc == 0; i++) {
        bson_t *orig = dv->v[i];
        bson_t base = BSON_INITIALIZER;
        if (pp.any_inc || !pp.id_excluded)
            rc = sbl_projection_apply(p, orig, -1, &base, err);
        if (rc == 0 && any_computed)
            rc = computed_apply(env, &pp.computed, orig, &base, err);
        dv->v[i] = bson_copy(&base);
        bson_destroy(&base);
        bson_destroy(orig);
    }
    sbl_projection_free(p);
done:
    bson_destroy(&pp.inc);
    bson_destroy(&pp.exc);
    computed_free(&pp.computed);
    return rc;
}

/* $addFields' fields; a nested object without operators ({a: {b: 1}}) adds to the
 * embedded document a instead of replacing it, as in MongoDB. */
static int add_fields_spec(computed_t *c, const bson_t *spec, const char *prefix, int depth,
                           sbl_err_t *err)
{
    bson_iter_t it;
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        char path[1024];
        bson_value_t v;
        bson_t sub;
        bson_iter_t f;
        snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "", bson_iter_key(&it));
        sbl_iter_value(&it, &v);
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && depth < 50 && sbl_iter_doc(&it, &sub) &&
            bson_iter_init(&f, &sub) && bson_iter_next(&f) && bson_iter_key(&f)[0] != '$') {
            SBL_RET(add_fields_spec(c, &sub, path, depth + 1, err));
            continue;
        }
        SBL_RET(computed_add(c, path, &v, err));
    }
    return 0;
}

static int st_add_fields(const sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec,
                         sbl_err_t *err)
{
    computed_t c = {0};
    int rc = add_fields_spec(&c, spec, "", 0, err);
    for (size_t i = 0; i < dv->n && rc == 0; i++) {
        bson_t cur;
        bson_copy_to(dv->v[i], &cur);
        if ((rc = computed_apply(env, &c, dv->v[i], &cur, err)) == 0)
            replace_doc(dv, i, &cur);
        else
            bson_destroy(&cur);
    }
    computed_free(&c);
    return rc;
}

static int st_unset(sbl_docvec_t *dv, const bson_iter_t *it, sbl_err_t *err)
{
    bson_t exc = BSON_INITIALIZER;
    if (BSON_ITER_HOLDS_UTF8(it)) {
        bson_append_int32(&exc, bson_iter_utf8(it, NULL), -1, 0);
    } else if (BSON_ITER_HOLDS_ARRAY(it)) {
        bson_iter_t sub;
        bson_iter_recurse(it, &sub);
        while (bson_iter_next(&sub)) {
            if (!BSON_ITER_HOLDS_UTF8(&sub)) {
                bson_destroy(&exc);
                return sbl_err_set(err, 31120,
                                   "$unset specification must be a string or an array containing "
                                   "only string values");
            }
            bson_append_int32(&exc, bson_iter_utf8(&sub, NULL), -1, 0);
        }
    } else {
        bson_destroy(&exc);
        return sbl_err_set(err, 31002,
                           "$unset specification must be a string or an array");
    }
    int rc = apply_projection(dv, &exc, err);
    bson_destroy(&exc);
    return rc;
}

static int st_replace_root(const sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_value_t *spec,
                           sbl_err_t *err)
{
    sbl_expr_t *e = NULL;
    int rc = sbl_expr_parse(spec, &e, err);
    for (size_t i = 0; i < dv->n && rc == 0; i++) {
        bson_value_t v;
        if ((rc = sbl_agg_eval(env, e, dv->v[i], &v, err)) != 0)
            break;
        if (v.value_type != BSON_TYPE_DOCUMENT) {
            rc = sbl_err_set(err, SBL_E_NewRootNotObject,
                             "'newRoot' expression must evaluate to an object, but resulting "
                             "value was: %s. Type of resulting value: '%s'.",
                             v.value_type == BSON_TYPE_EOD ? "MISSING" : "a non-object",
                             sbl_type_name(v.value_type));
            bson_value_destroy(&v);
            break;
        }
        bson_t view;
        bson_init_static(&view, v.value.v_doc.data, v.value.v_doc.data_len);
        bson_destroy(dv->v[i]);
        dv->v[i] = bson_copy(&view);
        bson_value_destroy(&v);
    }
    sbl_expr_free(e);
    return rc;
}

typedef struct sort_ent {
    bson_t *doc;
    size_t seq;
} sort_ent_t;

static _Thread_local const sbl_sort_t *tls_sort;

static int cmp_sort_ent(const void *a, const void *b)
{
    const sort_ent_t *x = a, *y = b;
    int r = sbl_sort_compare(tls_sort, x->doc, y->doc);
    return r != 0 ? r : (x->seq < y->seq ? -1 : x->seq > y->seq);
}

static int spill_cmp(const bson_t *a, const bson_t *b, const void *arg)
{
    return sbl_sort_compare(arg, a, b);
}

/* Sort dv through the external sorter: over the sort limit it spills. */
static int sort_external(sbl_docvec_t *dv, const sbl_sort_t *s, sbl_err_t *err)
{
    sbl_sorter_t *so = sbl_sorter_new(spill_cmp, s, sbl_mem_limit(SBL_LIM_SORT), true);
    int rc = 0;
    size_t n = dv->n, i = 0;
    for (; i < n && rc == 0; i++) {
        rc = sbl_sorter_add(so, dv->v[i], 0, err);
        dv->v[i] = NULL;
    }
    for (; i < n; i++) /* after a failed add: the rest are still ours */
        bson_destroy(dv->v[i]);
    dv->n = 0;
    while (rc == 0) {
        bson_t *d = NULL;
        if ((rc = sbl_sorter_next(so, &d, NULL, err)) != 0 || d == NULL)
            break;
        dv->v[dv->n++] = d;
    }
    sbl_sorter_free(so);
    return rc;
}

int sbl_agg_check_mem(const sbl_agg_env_t *env, size_t bytes, const char *stage, sbl_err_t *err)
{
    bool sort = strcmp(stage, "$sort") == 0;
    size_t limit = sbl_mem_limit(sort ? SBL_LIM_SORT : SBL_LIM_GROUP);
    if (bytes <= limit || sbl_mem_disk_ok(env->allow_disk))
        return 0;
    return sbl_mem_error(sort ? SBL_LIM_SORT : SBL_LIM_GROUP, err);
}


int sbl_agg_sort(const sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec, int64_t limit,
                 sbl_err_t *err)
{
    sbl_sort_t *s = sbl_sort_new(spec, err);
    if (s == NULL)
        return err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "bad $sort");
    if (bson_empty(spec)) {
        sbl_sort_free(s);
        return sbl_err_set(err, 15976, "$sort stage must have at least one sort key");
    }
    sbl_sort_set_collation(s, env->coll);
    tls_sort = s;
    int rc = 0;
    if (limit > 0 && (size_t)limit < dv->n) {
        /* bounded insertion into a sorted array of at most `limit` entries */
        size_t k = (size_t)limit, n = 0, bytes = 0;
        sort_ent_t *top = malloc((k + 1) * sizeof(*top));
        for (size_t i = 0; i < dv->n; i++) {
            sort_ent_t e = {dv->v[i], i};
            if (n == k && cmp_sort_ent(&e, &top[n - 1]) >= 0) {
                bson_destroy(dv->v[i]);
                continue;
            }
            size_t lo = 0, hi = n;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (cmp_sort_ent(&top[mid], &e) <= 0)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (n == k) {
                bytes -= top[n - 1].doc->len;
                bson_destroy(top[n - 1].doc);
                n--;
            }
            memmove(top + lo + 1, top + lo, (n - lo) * sizeof(*top));
            top[lo] = e;
            n++;
            bytes += e.doc->len;
        }
        for (size_t i = 0; i < n; i++)
            dv->v[i] = top[i].doc;
        dv->n = n;
        free(top);
        rc = sbl_agg_check_mem(env, bytes, "$sort", err);
    } else {
        size_t bytes = 0;
        for (size_t i = 0; i < dv->n; i++)
            bytes += dv->v[i]->len;
        if (bytes > sbl_mem_limit(SBL_LIM_SORT) && sbl_mem_disk_ok(env->allow_disk)) {
            rc = sort_external(dv, s, err);
        } else if ((rc = sbl_agg_check_mem(env, bytes, "$sort", err)) == 0) {
            sort_ent_t *e = malloc((dv->n + 1) * sizeof(*e));
            for (size_t i = 0; i < dv->n; i++) {
                e[i].doc = dv->v[i];
                e[i].seq = i;
            }
            qsort(e, dv->n, sizeof(*e), cmp_sort_ent);
            for (size_t i = 0; i < dv->n; i++)
                dv->v[i] = e[i].doc;
            free(e);
        }
    }
    sbl_sort_free(s);
    return rc;
}

static void st_skip(sbl_docvec_t *dv, int64_t n)
{
    size_t k = (size_t)n < dv->n ? (size_t)n : dv->n;
    for (size_t i = 0; i < k; i++)
        bson_destroy(dv->v[i]);
    memmove(dv->v, dv->v + k, (dv->n - k) * sizeof(*dv->v));
    dv->n -= k;
}

static void st_limit(sbl_docvec_t *dv, int64_t n)
{
    for (size_t i = (size_t)n; i < dv->n; i++)
        bson_destroy(dv->v[i]);
    if ((size_t)n < dv->n)
        dv->n = (size_t)n;
}

static int st_count(sbl_docvec_t *dv, const bson_iter_t *it, sbl_err_t *err)
{
    if (!BSON_ITER_HOLDS_UTF8(it))
        return sbl_err_set(err, 40156, "the count field must be a non-empty string");
    const char *name = bson_iter_utf8(it, NULL);
    if (name[0] == '\0')
        return sbl_err_set(err, 40157, "the count field must be a non-empty string");
    if (name[0] == '$')
        return sbl_err_set(err, 40158, "the count field cannot be a $-prefixed path");
    if (strchr(name, '.') != NULL)
        return sbl_err_set(err, 40160, "the count field cannot contain '.'");
    size_t n = dv->n;
    sbl_docvec_clear(dv);
    if (n > 0) {
        bson_t *d = bson_new();
        if (n <= INT32_MAX)
            bson_append_int32(d, name, -1, (int32_t)n);
        else
            bson_append_int64(d, name, -1, (int64_t)n);
        sbl_docvec_push(dv, d);
    }
    return 0;
}

static int st_unwind(sbl_docvec_t *dv, const bson_iter_t *it, sbl_err_t *err)
{
    const char *path = NULL, *index_field = NULL;
    bool preserve = false;
    if (BSON_ITER_HOLDS_UTF8(it)) {
        path = bson_iter_utf8(it, NULL);
    } else if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t sub;
        bson_iter_recurse(it, &sub);
        while (bson_iter_next(&sub)) {
            const char *k = bson_iter_key(&sub);
            if (strcmp(k, "path") == 0 && BSON_ITER_HOLDS_UTF8(&sub))
                path = bson_iter_utf8(&sub, NULL);
            else if (strcmp(k, "preserveNullAndEmptyArrays") == 0)
                preserve = bson_iter_as_bool(&sub);
            else if (strcmp(k, "includeArrayIndex") == 0 && BSON_ITER_HOLDS_UTF8(&sub))
                index_field = bson_iter_utf8(&sub, NULL);
            else
                return sbl_err_set(err, 28811, "unrecognized option to $unwind: %s", k);
        }
    } else {
        return sbl_err_set(err, SBL_E_BadUnwind,
                           "expected either a string or an object as specification for $unwind "
                           "stage, got %s",
                           sbl_type_name(bson_iter_type(it)));
    }
    if (path == NULL || path[0] != '$')
        return sbl_err_set(err, 28818,
                           "path option to $unwind stage should be prefixed with a '$'");
    path++;

    sbl_docvec_t out = {0};
    for (size_t i = 0; i < dv->n; i++) {
        bson_t *doc = dv->v[i];
        bson_iter_t at;
        bool found = sbl_path_get(doc, path, &at);
        if (found && BSON_ITER_HOLDS_ARRAY(&at)) {
            bson_iter_t el;
            int64_t idx = 0;
            bool any = false;
            bson_iter_recurse(&at, &el);
            while (bson_iter_next(&el)) {
                bson_value_t v;
                bson_t *d = bson_new();
                sbl_iter_value(&el, &v);
                sbl_agg_set_path(doc, path, &v, d);
                if (index_field != NULL) {
                    bson_value_t iv = {.value_type = BSON_TYPE_INT64};
                    iv.value.v_int64 = idx;
                    bson_t *d2 = bson_new();
                    sbl_agg_set_path(d, index_field, &iv, d2);
                    bson_destroy(d);
                    d = d2;
                }
                sbl_docvec_push(&out, d);
                idx++;
                any = true;
            }
            if (!any && preserve) {
                bson_t *d = bson_new();
                sbl_agg_set_path(doc, path, NULL, d);
                if (index_field != NULL) {
                    bson_t *d2 = bson_new();
                    bson_value_t nv = {.value_type = BSON_TYPE_NULL};
                    sbl_agg_set_path(d, index_field, &nv, d2);
                    bson_destroy(d);
                    d = d2;
                }
                sbl_docvec_push(&out, d);
            }
        } else if ((found && !BSON_ITER_HOLDS_NULL(&at) && !BSON_ITER_HOLDS_UNDEFINED(&at)) ||
                   preserve) {
            bson_t *d = bson_copy(doc);
            if (index_field != NULL) {
                bson_t *d2 = bson_new();
                bson_value_t nv = {.value_type = BSON_TYPE_NULL};
                sbl_agg_set_path(d, index_field, &nv, d2);
                bson_destroy(d);
                d = d2;
            }
            sbl_docvec_push(&out, d);
        }
    }
    sbl_docvec_clear(dv);
    *dv = out;
    return 0;
}

static int st_coll_stats(sbl_opctx_t *ctx, const char *ns, sbl_docvec_t *dv, const bson_t *spec,
                         sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    sbl_coll_stats_t st = {0};
    SBL_RET(sbl_coll_open(ctx->ss, ns, false, &c, NULL, err));
    int rc = sbl_coll_stats(ctx->ss, c, &st, err);
    bson_t capped = BSON_INITIALIZER; /* capped, max, maxSize (capped.c) */
    sbl_coll_append_capped_stats(c, &capped, 1);
    sbl_coll_release(c);
    if (rc != 0) {
        bson_destroy(&capped);
        return rc;
    }
    bson_t *d = bson_new();
    bson_append_utf8(d, "ns", -1, ns, -1);
    bson_append_date_time(d, "localTime", -1, sbl_now_ms());
    if (bson_has_field(spec, "count"))
        bson_append_int64(d, "count", -1, st.count);
    if (bson_has_field(spec, "storageStats")) {
        bson_t ss;
        bson_append_document_begin(d, "storageStats", -1, &ss);
        bson_append_int64(&ss, "size", -1, st.data_size);
        bson_append_int64(&ss, "count", -1, st.count);
        bson_append_int64(&ss, "storageSize", -1, st.storage_size);
        bson_append_int32(&ss, "avgObjSize", -1,
                          st.count ? (int32_t)(st.data_size / st.count) : 0);
        bson_append_int32(&ss, "nindexes", -1, 1);
        bson_concat(&ss, &capped);
        bson_append_document_end(d, &ss);
    }
    bson_destroy(&capped);
    sbl_docvec_clear(dv);
    sbl_docvec_push(dv, d);
    return 0;
}

static int get_num(const bson_iter_t *it, const char *stage, int64_t *out, sbl_err_t *err)
{
    if (!BSON_ITER_HOLDS_NUMBER(it))
        return sbl_err_set(err, stage[1] == 'l' ? SBL_E_BadLimit : SBL_E_BadSkip,
                           "invalid argument to %s stage: Expected a number in: %s: %s", stage,
                           stage, sbl_type_name(bson_iter_type(it)));
    *out = bson_iter_as_int64(it);
    if (stage[1] == 'l' && *out <= 0)
        return sbl_err_set(err, SBL_E_BadLimit, "the limit must be positive");
    if (stage[1] == 's' && *out < 0)
        return sbl_err_set(err, SBL_E_BadSkip, "invalid argument to $skip stage: Expected a "
                                               "non-negative number in: $skip: %lld",
                           (long long)*out);
    return 0;
}

/* ---- running a pipeline ------------------------------------------------------------ */

/* Run one stage over dv; next_limit is the $limit right after a $sort (0: none). */
static int run_stage(sbl_agg_env_t *env, const char *ns, size_t index, bool last,
                     bson_iter_t *st, int64_t next_limit, sbl_docvec_t *dv, sbl_err_t *err)
{
    const char *name = bson_iter_key(st);
    bson_t spec;
    bool is_doc = BSON_ITER_HOLDS_DOCUMENT(st);
    if (is_doc && !sbl_iter_doc(st, &spec))
        return sbl_err_set(err, SBL_E_InvalidBSON, "invalid stage");
#define NEED_DOC(code, msg)                                                                        \
    if (!is_doc)                                                                                   \
    return sbl_err_set(err, code, msg)

    if (strcmp(name, "$match") == 0) {
        NEED_DOC(15959, "the match filter must be an expression in an object");
        return st_match(env, dv, &spec, err);
    }
    if (strcmp(name, "$project") == 0) {
        NEED_DOC(15969, "$project specification must be an object");
        return st_project(env, dv, &spec, err);
    }
    if (strcmp(name, "$addFields") == 0 || strcmp(name, "$set") == 0) {
        NEED_DOC(40272, "$addFields specification stage must be an object");
        return st_add_fields(env, dv, &spec, err);
    }
    if (strcmp(name, "$unset") == 0)
        return st_unset(dv, st, err);
    if (strcmp(name, "$group") == 0) {
        NEED_DOC(15947, "a group's fields must be specified in an object");
        return sbl_agg_group(dv, &spec, env, NULL, err);
    }
    if (strcmp(name, "$sort") == 0) {
        NEED_DOC(15973, "the $sort key specification must be an object");
        return sbl_agg_sort(env, dv, &spec, next_limit, err);
    }
    if (strcmp(name, "$skip") == 0 || strcmp(name, "$limit") == 0) {
        int64_t n = 0;
        SBL_RET(get_num(st, name, &n, err));
        if (name[1] == 's')
            st_skip(dv, n);
        else
            st_limit(dv, n);
        return 0;
    }
    if (strcmp(name, "$count") == 0)
        return st_count(dv, st, err);
    if (strcmp(name, "$unwind") == 0)
        return st_unwind(dv, st, err);
    if (strcmp(name, "$replaceRoot") == 0) {
        bson_iter_t nr;
        NEED_DOC(40229, "expected an object as specification for $replaceRoot stage");
        if (!bson_iter_init_find(&nr, &spec, "newRoot"))
            return sbl_err_set(err, 40231, "no newRoot specified for the $replaceRoot stage");
        bson_value_t e;
        sbl_iter_value(&nr, &e);
        return st_replace_root(env, dv, &e, err);
    }
    if (strcmp(name, "$redact") == 0) {
        bson_value_t e;
        sbl_iter_value(st, &e);
        return sbl_agg_redact(env, dv, &e, err);
    }
    if (strcmp(name, "$replaceWith") == 0) {
        bson_value_t e;
        sbl_iter_value(st, &e);
        return st_replace_root(env, dv, &e, err);
    }
    if (strcmp(name, "$collStats") == 0) {
        NEED_DOC(5447000, "$collStats must take a nested object");
        if (index != 0)
            return sbl_err_set(err, 40602,
                               "$collStats is only valid as the first stage in a pipeline");
        return st_coll_stats(env->ctx, ns, dv, &spec, err);
    }
    if (strcmp(name, "$lookup") == 0) {
        NEED_DOC(40319, "the $lookup specification must be an Object");
        return sbl_agg_lookup(env, dv, &spec, err);
    }
    if (strcmp(name, "$facet") == 0) {
        NEED_DOC(15947, "the $facet specification must be a non-empty object");
        return sbl_agg_facet(env, ns, dv, &spec, err);
    }
    if (strcmp(name, "$bucket") == 0) {
        NEED_DOC(40201, "Argument to $bucket stage must be an object");
        return sbl_agg_bucket(env, dv, &spec, err);
    }
    if (strcmp(name, "$bucketAuto") == 0) {
        NEED_DOC(40240, "The argument to $bucketAuto must be an object");
        return sbl_agg_bucket_auto(env, dv, &spec, err);
    }
    if (strcmp(name, "$sortByCount") == 0) {
        bson_value_t e;
        sbl_iter_value(st, &e);
        return sbl_agg_sort_by_count(env, dv, &e, err);
    }
    if (strcmp(name, "$sample") == 0)
        return sbl_agg_sample(dv, st, err);
    if (strcmp(name, "$documents") == 0) {
        if (index != 0)
            return sbl_err_set(err, 40602, "$documents is only valid as the first stage in a "
                                           "pipeline");
        return sbl_agg_documents(env, dv, st, err);
    }
    if (strcmp(name, "$listLocalSessions") == 0) {
        if (index != 0)
            return sbl_err_set(err, 40602, "$listLocalSessions is only valid as the first stage "
                                           "in a pipeline");
        return sbl_agg_list_local_sessions(env, dv, st, err);
    }
    if (strcmp(name, "$listSessions") == 0) {
        if (index != 0)
            return sbl_err_set(err, 40602, "$listSessions is only valid as the first stage "
                                           "in a pipeline");
        return sbl_agg_list_sessions(env, ns, dv, st, err);
    }
    if (strcmp(name, "$out") == 0 || strcmp(name, "$merge") == 0) {
        if (!last)
            return sbl_err_set(err, SBL_E_FinalStageOnly,
                               "%s can only be the final stage in the pipeline", name);
        if (env->depth > 0)
            return sbl_err_set(err, 51047, "%s is not allowed within a $lookup or $facet", name);
        if (env->remote != NULL)
            return env->remote->write(env->remote->arg, st, dv, err);
        return name[1] == 'o' ? sbl_agg_out(env, dv, st, err) : sbl_agg_merge(env, dv, st, err);
    }
    if (strcmp(name, "$geoNear") == 0) /* a first one went to the executor (geo_near.c) */
        return sbl_err_set(err, 40603, "$geoNear is only valid as the first stage in a pipeline.");
    if (strcmp(name, "$changeStream") == 0) /* as on a standalone mongod */
        return sbl_err_set(err, 40573, "The $changeStream stage is only supported on replica sets");
    if (strcmp(name, "$currentOp") == 0) /* a first one ran in aggregate.c */
        return sbl_err_set(err, 40602, "$currentOp is only valid as the first stage in a "
                                       "pipeline");
    if (strcmp(name, "$unionWith") == 0)
        return sbl_agg_union_with(env, dv, st, err);
    if (strcmp(name, "$graphLookup") == 0)
        return sbl_agg_graph_lookup(env, dv, st, err);
    if (strcmp(name, "$setWindowFields") == 0)
        return sbl_agg_set_window_fields(env, dv, st, err);
    if (strcmp(name, "$densify") == 0)
        return sbl_agg_densify(env, dv, st, err);
    if (strcmp(name, "$fill") == 0)
        return sbl_agg_fill(env, ns, dv, st, err);
    if (strcmp(name, "$indexStats") == 0) {
        if (index != 0)
            return sbl_err_set(err, 40602, "$indexStats is only valid as the first stage in a "
                                           "pipeline");
        return sbl_agg_index_stats(env, ns, dv, st, err);
    }
#undef NEED_DOC
    return sbl_err_set(err, SBL_E_UnrecognizedStage, "Unrecognized pipeline stage name: '%s'",
                       name);
}

int sbl_agg_check_pipeline(const bson_t *pipeline, size_t *np, sbl_err_t *err)
{
    bson_iter_t st, f;
    size_t n = 0;
    if (!bson_iter_init(&st, pipeline))
        return sbl_err_set(err, SBL_E_InvalidBSON, "invalid pipeline");
    while (bson_iter_next(&st)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&st))
            return sbl_err_set(err, SBL_E_TypeMismatch,
                               "Each element of the 'pipeline' array must be an object");
        bson_iter_recurse(&st, &f);
        if (!bson_iter_next(&f) || bson_iter_next(&f))
            return sbl_err_set(err, SBL_E_StageNotOneField,
                               "A pipeline stage specification object must contain exactly one "
                               "field.");
        n++;
    }
    *np = n;
    return 0;
}

int sbl_agg_run(sbl_agg_env_t *env, const char *ns, const bson_t *pipeline, size_t first,
                sbl_docvec_t *dv, sbl_err_t *err)
{
    bson_iter_t st, f, nx;
    size_t n = 0;
    int rc = 0;
    if (env->depth > AGG_MAX_DEPTH)
        return sbl_err_set(err, SBL_E_Overflow, "pipeline nesting exceeds %d levels",
                           AGG_MAX_DEPTH);
    SBL_RET(sbl_agg_check_pipeline(pipeline, &n, err));
    bson_iter_init(&st, pipeline);
    for (size_t i = 0; rc == 0 && bson_iter_next(&st); i++) {
        if (i < first)
            continue;
        int64_t next_limit = 0;
        bson_iter_recurse(&st, &f);
        bson_iter_next(&f);
        nx = st;
        if (strcmp(bson_iter_key(&f), "$sort") == 0 && bson_iter_next(&nx)) {
            bson_iter_t g;
            bson_iter_recurse(&nx, &g);
            if (bson_iter_next(&g) && strcmp(bson_iter_key(&g), "$limit") == 0 &&
                BSON_ITER_HOLDS_NUMBER(&g) && bson_iter_as_int64(&g) > 0)
                next_limit = bson_iter_as_int64(&g);
        }
        rc = run_stage(env, ns, i, i + 1 == n, &f, next_limit, dv, err);
        if (rc == 0)
            rc = sbl_op_check_interrupt(env->ctx, err);
    }
    return rc;
}

/* ---- update pipelines -------------------------------------------------------------- */

static bool update_stage_ok(const char *name)
{
    return strcmp(name, "$addFields") == 0 || strcmp(name, "$set") == 0 ||
           strcmp(name, "$project") == 0 || strcmp(name, "$unset") == 0 ||
           strcmp(name, "$replaceRoot") == 0 || strcmp(name, "$replaceWith") == 0;
}

int sbl_agg_check_update_pipeline(const bson_t *pipeline, sbl_err_t *err)
{
    bson_iter_t st, f;
    size_t n = 0;
    SBL_RET(sbl_agg_check_pipeline(pipeline, &n, err));
    bson_iter_init(&st, pipeline);
    while (bson_iter_next(&st)) {
        bson_iter_recurse(&st, &f);
        bson_iter_next(&f);
        if (!update_stage_ok(bson_iter_key(&f)))
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "%s is not allowed to be used within an update",
                               bson_iter_key(&f));
    }
    return 0;
}

int sbl_agg_update_doc(sbl_opctx_t *ctx, const bson_t *pipeline, const bson_t *let,
                       const bson_t *doc, bson_t *out, sbl_err_t *err)
{
    bson_t empty = BSON_INITIALIZER;
    sbl_agg_env_t env = {.ctx = ctx, .db = ctx->db, .let = let ? let : &empty,
                         .now_ms = sbl_now_ms(), .allow_disk = -1};
    sbl_docvec_t dv = {0};
    SBL_RET(sbl_agg_check_update_pipeline(pipeline, err));
    sbl_docvec_push(&dv, bson_copy(doc));
    int rc = sbl_agg_run(&env, "", pipeline, 0, &dv, err);
    if (rc == 0 && dv.n != 1)
        rc = sbl_err_set(err, SBL_E_InternalError, "update pipeline lost the document");
    if (rc == 0)
        bson_copy_to(dv.v[0], out);
    sbl_docvec_clear(&dv);
    return rc;
}
