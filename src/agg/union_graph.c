/*
 * union_graph.c: the stages that read another collection (or view) beside
 * the pipeline's own: $unionWith (the input, then what a sub-pipeline over
 * the other collection gives) and $graphLookup (a breadth-first search over
 * the other collection, one query per level, through its indexes).
 *
 * What must stay true: the other collection is read through
 * sbl_agg_read_ns, so views resolve and the executor plans the read;
 * $graphLookup holds at most internalDocumentSourceGraphLookupMaxMemoryBytes
 * of found documents and frontier values per input document, and fails with
 * 40099 beyond it whatever allowDiskUse says (mongod 7.0 does not spill it).
 */
#include "agg/agg_int.h"
#include "common/buf.h"
#include "doc/doc.h"
#include "expr/expr.h"

#include <stdlib.h>
#include <string.h>

/* ---- $unionWith ------------------------------------------------------------------------- */

/* 31441 for a stage a $unionWith sub-pipeline may not hold (top level only:
 * nested sub-pipelines check their own when they run). */
static int check_union_pipeline(const bson_t *pipeline, sbl_err_t *err)
{
    bson_iter_t st, f;
    size_t n;
    SBL_RET(sbl_agg_check_pipeline(pipeline, &n, err));
    bson_iter_init(&st, pipeline);
    while (bson_iter_next(&st)) {
        bson_iter_recurse(&st, &f);
        bson_iter_next(&f);
        const char *k = bson_iter_key(&f);
        if (strcmp(k, "$out") == 0 || strcmp(k, "$merge") == 0 ||
            strcmp(k, "$changeStream") == 0)
            return sbl_err_set(err, 31441, "%s is not allowed within a $unionWith's sub-pipeline",
                               k);
    }
    return 0;
}

/* Whether pipeline's first stage is $documents (a collectionless sub-pipeline). */
static bool starts_with_documents(const bson_t *pipeline)
{
    bson_iter_t st, f;
    return bson_iter_init(&st, pipeline) && bson_iter_next(&st) &&
           BSON_ITER_HOLDS_DOCUMENT(&st) && bson_iter_recurse(&st, &f) && bson_iter_next(&f) &&
           strcmp(bson_iter_key(&f), "$documents") == 0;
}

int sbl_agg_union_with(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it,
                       sbl_err_t *err)
{
    const char *coll = NULL;
    bson_t pipeline = BSON_INITIALIZER;
    bool has_pipeline = false;
    char ns[SBL_NS_MAX];

    if (BSON_ITER_HOLDS_UTF8(it)) {
        coll = bson_iter_utf8(it, NULL);
    } else if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t f;
        bson_iter_recurse(it, &f);
        while (bson_iter_next(&f)) {
            const char *k = bson_iter_key(&f);
            if (strcmp(k, "coll") == 0) {
                if (!BSON_ITER_HOLDS_UTF8(&f))
                    return sbl_err_set(err, SBL_E_TypeMismatch,
                                       "BSON field '$unionWith.coll' is the wrong type '%s', "
                                       "expected type 'string'",
                                       sbl_type_name(bson_iter_type(&f)));
                coll = bson_iter_utf8(&f, NULL);
            } else if (strcmp(k, "pipeline") == 0) {
                if (!BSON_ITER_HOLDS_ARRAY(&f))
                    return sbl_err_set(err, SBL_E_TypeMismatch,
                                       "BSON field '$unionWith.pipeline' is the wrong type '%s', "
                                       "expected type 'array'",
                                       sbl_type_name(bson_iter_type(&f)));
                sbl_iter_array(&f, &pipeline);
                has_pipeline = true;
            } else {
                return sbl_err_set(err, 40415, "BSON field '$unionWith.%s' is an unknown field.",
                                   k);
            }
        }
        if (coll == NULL && (!has_pipeline || !starts_with_documents(&pipeline)))
            return sbl_err_set(err, SBL_E_FailedToParse,
                               "$unionWith stage without explicit collection must have a "
                               "pipeline with $documents as first stage");
    } else {
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "the $unionWith stage specification must be an object or string, but "
                           "found %s",
                           sbl_type_name(bson_iter_type(it)));
    }
    if (has_pipeline)
        SBL_RET(check_union_pipeline(&pipeline, err));
    if (coll != NULL) {
        snprintf(ns, sizeof(ns), "%s.%s", env->db, coll);
        SBL_RET(sbl_validate_ns(ns, err));
    } else {
        snprintf(ns, sizeof(ns), "%s.$cmd.aggregate", env->db);
    }

    sbl_agg_env_t sub = *env;
    sub.depth++;
    sbl_docvec_t other = {0};
    int rc = 0;
    if (coll != NULL)
        rc = sbl_agg_read_ns(&sub, ns, NULL, &other, err);
    if (rc == 0 && has_pipeline)
        rc = sbl_agg_run(&sub, ns, &pipeline, 0, &other, err);
    if (rc == 0) {
        for (size_t i = 0; i < other.n; i++)
            sbl_docvec_push(dv, other.v[i]);
        free(other.v); /* the documents moved to dv */
    } else {
        sbl_docvec_clear(&other);
    }
    return rc;
}

/* ---- value sets (agg_int.h) ------------------------------------------------------------ */

static bool keyset_add_raw(sbl_keyset_t *s, const uint8_t *k, size_t len);

void sbl_keyset_free(sbl_keyset_t *s)
{
    for (size_t i = 0; i < s->cap; i++)
        sbl_buf_destroy(&s->keys[i]);
    free(s->keys);
    memset(s, 0, sizeof(*s));
}

static void keyset_grow(sbl_keyset_t *s)
{
    sbl_keyset_t bigger = {.cap = s->cap ? s->cap * 2 : 64};
    bigger.keys = calloc(bigger.cap, sizeof(*bigger.keys));
    if (bigger.keys == NULL)
        abort();
    for (size_t i = 0; i < bigger.cap; i++)
        sbl_buf_init(&bigger.keys[i]);
    for (size_t i = 0; i < s->cap; i++)
        if (s->keys[i].len > 0)
            keyset_add_raw(&bigger, s->keys[i].data, s->keys[i].len);
    sbl_keyset_free(s);
    *s = bigger;
}

/* Add k; false when it was there already. */
static bool keyset_add_raw(sbl_keyset_t *s, const uint8_t *k, size_t len)
{
    if ((s->n + 1) * 2 > s->cap)
        keyset_grow(s);
    size_t i = sbl_fnv1a(k, len) & (s->cap - 1);
    while (s->keys[i].len > 0) {
        if (s->keys[i].len == len && memcmp(s->keys[i].data, k, len) == 0)
            return false;
        i = (i + 1) & (s->cap - 1);
    }
    sbl_buf_append(&s->keys[i], k, len);
    s->n++;
    return true;
}

bool sbl_keyset_add(sbl_keyset_t *s, const bson_value_t *v, const sbl_collation_t *coll)
{
    sbl_buf_t b;
    sbl_buf_init(&b);
    sbl_key_append_coll(&b, v, false, coll);
    bool added = keyset_add_raw(s, b.data, b.len);
    sbl_buf_destroy(&b);
    return added;
}

/* ---- $graphLookup ----------------------------------------------------------------------- */

typedef struct graph {
    const char *from_ns, *from_field, *to_field, *as, *depth_field;
    int64_t max_depth; /* -1: none */
    bson_t restrict_match;
    bool has_restrict;
    sbl_expr_t *start;
} graph_t;

/* Call fn on every value a dotted path reaches in doc, through arrays (an
 * array at the end gives each element), as mongod's visitAllValuesAtPath. */
typedef void (*visit_fn)(const bson_value_t *v, void *arg);

static void visit_path(const bson_iter_t *at, const char *path, visit_fn fn, void *arg)
{
    if (*path == '\0') {
        bson_value_t v;
        if (BSON_ITER_HOLDS_ARRAY(at)) {
            bson_iter_t el;
            bson_iter_recurse(at, &el);
            while (bson_iter_next(&el)) {
                sbl_iter_value(&el, &v);
                fn(&v, arg);
            }
        } else {
            sbl_iter_value(at, &v);
            fn(&v, arg);
        }
        return;
    }
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    const char *rest = dot ? dot + 1 : path + len;
    bson_iter_t sub;
    if (BSON_ITER_HOLDS_DOCUMENT(at)) {
        bson_iter_recurse(at, &sub);
        while (bson_iter_next(&sub))
            if (bson_iter_key_len(&sub) == len && memcmp(bson_iter_key(&sub), path, len) == 0) {
                visit_path(&sub, rest, fn, arg);
                break;
            }
    } else if (BSON_ITER_HOLDS_ARRAY(at)) {
        bson_iter_recurse(at, &sub);
        while (bson_iter_next(&sub))
            if (BSON_ITER_HOLDS_DOCUMENT(&sub))
                visit_path(&sub, path, fn, arg);
    }
}

static void visit_doc(const bson_t *doc, const char *path, visit_fn fn, void *arg)
{
    bson_t wrap = BSON_INITIALIZER;
    bson_iter_t it;
    bson_append_document(&wrap, "r", 1, doc);
    bson_iter_init_find(&it, &wrap, "r");
    visit_path(&it, path, fn, arg);
    bson_destroy(&wrap);
}

/* The values still to query: an $in array, deduplicated (seen). */
typedef struct frontier {
    bson_t in;
    uint32_t n;
    sbl_keyset_t seen; /* every value queried for this input document */
    size_t bytes;
    bool has_null;
    const sbl_collation_t *coll;
} frontier_t;

static void frontier_add(const bson_value_t *v, void *arg)
{
    frontier_t *f = arg;
    char kb[16];
    if (v->value_type == BSON_TYPE_EOD || !sbl_keyset_add(&f->seen, v, f->coll))
        return;
    if (v->value_type == BSON_TYPE_NULL || v->value_type == BSON_TYPE_UNDEFINED)
        f->has_null = true;
    sbl_append_value(&f->in, sbl_array_key(f->n++, kb), -1, v);
    f->bytes += 16 + (v->value_type == BSON_TYPE_UTF8 ? v->value.v_utf8.len : 0) +
                (v->value_type == BSON_TYPE_DOCUMENT || v->value_type == BSON_TYPE_ARRAY
                     ? v->value.v_doc.data_len
                     : 0);
}

/* The level's query: restrictSearchWithMatch's conditions and {to: {$in: [...]}}
 * (with $exists when null is sought: null must not match a missing field, as mongod). */
static void level_filter(const graph_t *g, frontier_t *f, bson_t *out)
{
    bson_t cond, to = BSON_INITIALIZER;
    bson_iter_t it;
    bool flat = true;
    BSON_APPEND_DOCUMENT_BEGIN(&to, g->to_field, &cond);
    BSON_APPEND_ARRAY(&cond, "$in", &f->in);
    if (f->has_null)
        BSON_APPEND_BOOL(&cond, "$exists", true);
    bson_append_document_end(&to, &cond);
    bson_init(out);
    if (g->has_restrict) {
        bson_iter_init(&it, &g->restrict_match);
        while (bson_iter_next(&it))
            if (bson_iter_key(&it)[0] == '$' || strcmp(bson_iter_key(&it), g->to_field) == 0)
                flat = false;
    }
    if (!flat) { /* the planner reads top-level fields: keep them top-level when it can */
        bson_t arr;
        BSON_APPEND_ARRAY_BEGIN(out, "$and", &arr);
        BSON_APPEND_DOCUMENT(&arr, "0", &g->restrict_match);
        BSON_APPEND_DOCUMENT(&arr, "1", &to);
        bson_append_array_end(out, &arr);
    } else {
        if (g->has_restrict)
            bson_concat(out, &g->restrict_match);
        bson_concat(out, &to);
    }
    bson_destroy(&to);
}

static int graph_memory(size_t bytes, sbl_err_t *err)
{
    if (bytes < sbl_mem_limit(SBL_LIM_GRAPH))
        return 0;
    return sbl_err_set(err, 40099, "$graphLookup reached maximum memory consumption");
}

/* The search from one input document: the found documents into *arr. */
static int graph_search(sbl_agg_env_t *env, const graph_t *g, const bson_t *doc, bson_t *arr,
                        sbl_err_t *err)
{
    frontier_t f = {.coll = env->coll};
    sbl_keyset_t visited = {0};
    size_t visited_bytes = 0;
    uint32_t nout = 0;
    bson_value_t start;
    bson_init(&f.in);
    int rc = sbl_agg_eval(env, g->start, doc, &start, err);
    if (rc != 0) {
        bson_destroy(&f.in);
        return rc;
    }
    if (start.value_type == BSON_TYPE_ARRAY) {
        bson_t a;
        bson_iter_t el;
        bson_init_static(&a, start.value.v_doc.data, start.value.v_doc.data_len);
        bson_iter_init(&el, &a);
        while (bson_iter_next(&el)) {
            bson_value_t v;
            sbl_iter_value(&el, &v);
            frontier_add(&v, &f);
        }
    } else {
        frontier_add(&start, &f);
    }
    bson_value_destroy(&start);
    for (int64_t depth = 0; rc == 0 && f.n > 0 && (g->max_depth < 0 || depth <= g->max_depth);
         depth++) {
        bson_t filter;
        sbl_docvec_t found = {0};
        level_filter(g, &f, &filter);
        bson_reinit(&f.in);
        f.n = 0;
        f.bytes = 0;
        f.has_null = false;
        rc = sbl_agg_read_ns(env, g->from_ns, &filter, &found, err);
        bson_destroy(&filter);
        for (size_t i = 0; rc == 0 && i < found.n; i++) {
            bson_iter_t id;
            bson_value_t idv;
            if (!bson_iter_init_find(&id, found.v[i], "_id")) {
                rc = sbl_err_set(err, 40271, "Documents in the '%s' namespace must contain an "
                                             "_id for de-duplication in $graphLookup",
                                 g->from_ns);
                break;
            }
            sbl_iter_value(&id, &idv);
            if (!sbl_keyset_add(&visited, &idv, NULL))
                continue;
            bson_t *d = found.v[i];
            if (g->depth_field != NULL) {
                bson_value_t dv = {.value_type = BSON_TYPE_INT64};
                dv.value.v_int64 = depth;
                d = bson_new();
                sbl_agg_set_path(found.v[i], g->depth_field, &dv, d);
            }
            visit_doc(d, g->from_field, frontier_add, &f);
            char kb[16];
            bson_append_document(arr, sbl_array_key(nout++, kb), -1, d);
            visited_bytes += d->len + 16;
            if (d != found.v[i])
                bson_destroy(d);
            rc = graph_memory(visited_bytes + f.bytes, err);
        }
        sbl_docvec_clear(&found);
        if (rc == 0)
            rc = sbl_op_check_interrupt(env->ctx, err);
    }
    bson_destroy(&f.in);
    sbl_keyset_free(&f.seen);
    sbl_keyset_free(&visited);
    return rc;
}

static int graph_parse(sbl_agg_env_t *env, const bson_t *spec, graph_t *g, char *ns,
                       size_t nslen, sbl_err_t *err)
{
    bson_iter_t it;
    const char *from = NULL;
    bson_value_t start = {.value_type = BSON_TYPE_EOD};
    g->max_depth = -1;
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "startWith") == 0) {
            sbl_iter_value(&it, &start);
        } else if (strcmp(k, "maxDepth") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it))
                return sbl_err_set(err, 40100, "maxDepth must be numeric, found type: %s",
                                   sbl_type_name(bson_iter_type(&it)));
            double d = BSON_ITER_HOLDS_DOUBLE(&it) ? bson_iter_double(&it)
                                                   : (double)bson_iter_as_int64(&it);
            g->max_depth = bson_iter_as_int64(&it);
            if (g->max_depth < 0)
                return sbl_err_set(err, 40101, "maxDepth requires a nonnegative argument, "
                                               "found: %lld",
                                   (long long)g->max_depth);
            if ((double)g->max_depth != d)
                return sbl_err_set(err, 40102, "maxDepth could not be represented as a long "
                                               "long: %lld",
                                   (long long)g->max_depth);
        } else if (strcmp(k, "restrictSearchWithMatch") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_err_set(err, 40185, "restrictSearchWithMatch must be an object, found "
                                               "%s",
                                   sbl_type_name(bson_iter_type(&it)));
            bson_t m;
            sbl_iter_doc(&it, &m);
            if (bson_has_field(&m, "$text") ||
                bson_has_field(&m, "$where") || bson_has_field(&m, "$near") ||
                bson_has_field(&m, "$nearSphere"))
                return sbl_err_set(err, SBL_E_BadValue, "Failed to parse "
                                   "'restrictSearchWithMatch' option to $graphLookup :: caused "
                                   "by :: this operator is not allowed here");
            sbl_matcher_t *mt = sbl_matcher_new(&m, err);
            if (mt == NULL)
                return err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "bad match");
            sbl_matcher_free(mt);
            bson_copy_to(&m, &g->restrict_match);
            g->has_restrict = true;
        } else if (strcmp(k, "from") == 0 || strcmp(k, "as") == 0 ||
                   strcmp(k, "connectFromField") == 0 || strcmp(k, "connectToField") == 0 ||
                   strcmp(k, "depthField") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                if (strcmp(k, "from") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it))
                    return sbl_err_set(err, SBL_E_FailedToParse,
                                       "$graphLookup with syntax {from: {db:<>, coll:<>},..} is "
                                       "not supported");
                return sbl_err_set(err, 40103, "expected string as argument for %s, found: %s",
                                   k, sbl_type_name(bson_iter_type(&it)));
            }
            const char *v = bson_iter_utf8(&it, NULL);
            if (k[0] == 'f')
                from = v;
            else if (k[0] == 'a')
                g->as = v;
            else if (strcmp(k, "connectFromField") == 0)
                g->from_field = v;
            else if (strcmp(k, "connectToField") == 0)
                g->to_field = v;
            else
                g->depth_field = v;
        } else {
            return sbl_err_set(err, 40104, "Unknown argument to $graphLookup: %s", k);
        }
    }
    if (from == NULL || from[0] == '\0' || g->as == NULL || g->as[0] == '\0' ||
        start.value_type == BSON_TYPE_EOD || g->from_field == NULL || g->from_field[0] == '\0' ||
        g->to_field == NULL || g->to_field[0] == '\0')
        return sbl_err_set(err, 40105, "$graphLookup requires 'from', 'as', 'startWith', "
                                       "'connectFromField', and 'connectToField' to be "
                                       "specified.");
    const char *paths[] = {g->as, g->from_field, g->to_field, g->depth_field};
    for (size_t i = 0; i < 4; i++) {
        if (paths[i] == NULL)
            continue;
        if (paths[i][0] == '$')
            return sbl_err_set(err, 16410, "FieldPath field names may not start with '$'. "
                                           "Consider using $getField or $setField.");
        size_t n = strlen(paths[i]);
        if (paths[i][n - 1] == '.' || strstr(paths[i], "..") != NULL || paths[i][0] == '.')
            return sbl_err_set(err, 15998, "FieldPath field names may not be empty strings.");
    }
    snprintf(ns, nslen, "%s.%s", env->db, from);
    if (sbl_validate_ns(ns, err) != 0)
        return sbl_err_set(err, SBL_E_InvalidNamespace, "invalid $graphLookup namespace: %s", ns);
    g->from_ns = ns;
    return sbl_expr_parse(&start, &g->start, err);
}

int sbl_agg_graph_lookup(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it,
                         sbl_err_t *err)
{
    graph_t g = {0};
    char ns[SBL_NS_MAX];
    bson_t spec;
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "the $graphLookup stage specification must be an object, but found %s",
                           sbl_type_name(bson_iter_type(it)));
    sbl_iter_doc(it, &spec);
    bson_init(&g.restrict_match);
    int rc = graph_parse(env, &spec, &g, ns, sizeof(ns), err);
    sbl_agg_env_t sub = *env;
    sub.depth++;
    for (size_t d = 0; rc == 0 && d < dv->n; d++) {
        bson_t arr = BSON_INITIALIZER, *out = bson_new();
        rc = graph_search(&sub, &g, dv->v[d], &arr, err);
        if (rc == 0) {
            bson_value_t av = {.value_type = BSON_TYPE_ARRAY};
            av.value.v_doc.data = (uint8_t *)bson_get_data(&arr);
            av.value.v_doc.data_len = arr.len;
            sbl_agg_set_path(dv->v[d], g.as, &av, out);
            if (out->len > SBL_BSON_MAX_SIZE) {
                rc = sbl_err_set(err, SBL_E_BSONObjectTooLarge,
                                 "$graphLookup output document is %u bytes, over the limit of "
                                 "16777216 bytes",
                                 out->len);
            } else {
                bson_destroy(dv->v[d]);
                dv->v[d] = out;
                out = NULL;
            }
        }
        if (out != NULL)
            bson_destroy(out);
        bson_destroy(&arr);
    }
    sbl_expr_free(g.start);
    bson_destroy(&g.restrict_match);
    return rc;
}
