/*
 * mapreduce.c: the mapReduce command, on src/js, and the JavaScript engine's
 * start-up settings.
 *
 * The documents the query selects (sorted, limited) are handed to map one by
 * one; each emit(key, value) is kept (key, emit order, value).  The emits are
 * then sorted by key in MongoDB's order, reduce runs on every key that got
 * more than one value, finalize on every key; the results go inline into the
 * reply or into a collection: replace (a temporary collection renamed over
 * the target), merge (each result replaces the document with its _id) or
 * reduce (an existing document's value is reduced with the new one first).
 *
 * What must stay true: emits are held in memory, up to MR_MAX_BYTES
 * (ExceededMemoryLimit past it); writes go through the ordinary commands
 * (sbl_cmd_run), so they take the single write path and the oplog.
 */
#include "agg/agg.h"
#include "cmd/cmd_int.h"
#include "doc/doc.h"
#include "exec/exec.h"
#include "js/js.h"
#include "server/server.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MR_MAX_BYTES ((size_t)256 << 20)
#define MR_BATCH 500

typedef struct emit {
    bson_value_t key, value;
    size_t seq;
} emit_t;

typedef struct emits {
    emit_t *v;
    size_t n, cap, bytes;
} emits_t;

typedef struct mr_out {
    int mode; /* 0 inline, 1 replace, 2 merge, 3 reduce */
    const char *coll;
    const char *db; /* NULL: the command's */
} mr_out_t;

static size_t value_size(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_UTF8:
        return 32 + v->value.v_utf8.len;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        return 32 + v->value.v_doc.data_len;
    case BSON_TYPE_BINARY:
        return 32 + v->value.v_binary.data_len;
    default:
        return 32;
    }
}

static int on_emit(void *arg, const bson_value_t *key, const bson_value_t *value, sbl_err_t *err)
{
    emits_t *e = arg;
    if (e->n == e->cap) {
        e->cap = e->cap ? e->cap * 2 : 256;
        e->v = bson_realloc(e->v, e->cap * sizeof(*e->v));
    }
    emit_t *x = &e->v[e->n];
    bson_value_copy(key, &x->key);
    bson_value_copy(value, &x->value);
    x->seq = e->n++;
    e->bytes += value_size(key) + value_size(value);
    if (e->bytes > MR_MAX_BYTES)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit,
                           "mapReduce's emitted values exceed %zu MB", MR_MAX_BYTES >> 20);
    return 0;
}

static void emits_free(emits_t *e)
{
    for (size_t i = 0; i < e->n; i++) {
        bson_value_destroy(&e->v[i].key);
        bson_value_destroy(&e->v[i].value);
    }
    bson_free(e->v);
}

static int cmp_emit(const void *a, const void *b)
{
    const emit_t *x = a, *y = b;
    int c = sbl_value_compare(&x->key, &y->key);
    if (c != 0)
        return c;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* A string or Code field's source; TypeMismatch otherwise. */
static int get_code(const bson_iter_t *it, const char *field, const char **srcp, size_t *lenp,
                    sbl_err_t *err)
{
    uint32_t n;
    if (BSON_ITER_HOLDS_UTF8(it)) {
        *srcp = bson_iter_utf8(it, &n);
    } else if (BSON_ITER_HOLDS_CODE(it)) {
        *srcp = bson_iter_code(it, &n);
    } else if (BSON_ITER_HOLDS_CODEWSCOPE(it)) {
        const uint8_t *scope;
        uint32_t slen;
        *srcp = bson_iter_codewscope(it, &n, &slen, &scope);
    } else {
        return sbl_type_error(err, field, it, "javascript");
    }
    *lenp = n;
    return 0;
}

static int parse_out(const bson_iter_t *it, mr_out_t *out, sbl_err_t *err)
{
    static const char *const modes[] = {"inline", "replace", "merge", "reduce"};
    bson_iter_t o;

    if (BSON_ITER_HOLDS_UTF8(it)) {
        out->mode = 1;
        out->coll = bson_iter_utf8(it, NULL);
        return 0;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &o))
        return sbl_err_set(err, SBL_E_FailedToParse, "'out' must be either a string or an object");
    out->mode = -1;
    while (bson_iter_next(&o)) {
        const char *k = bson_iter_key(&o);
        int m = -1;
        for (int i = 0; i < 4; i++)
            if (strcmp(k, modes[i]) == 0)
                m = i;
        if (m >= 0) {
            if (out->mode >= 0)
                return sbl_err_set(err, SBL_E_FailedToParse,
                                   "'out' must be either a string or an object with exactly "
                                   "one of inline, replace, merge or reduce");
            out->mode = m;
            if (m > 0) {
                if (!BSON_ITER_HOLDS_UTF8(&o))
                    return sbl_err_set(err, SBL_E_FailedToParse,
                                       "'out.%s' must be a string", k);
                out->coll = bson_iter_utf8(&o, NULL);
            }
        } else if (strcmp(k, "db") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&o))
                return sbl_err_set(err, SBL_E_FailedToParse, "'out.db' must be a string");
            out->db = bson_iter_utf8(&o, NULL);
        } else if (strcmp(k, "sharded") == 0) {
            if (bson_iter_as_bool(&o))
                return sbl_err_set(err, SBL_E_InvalidOptions,
                                   "sharded output is only for sharded clusters");
        } else if (strcmp(k, "nonAtomic") != 0) {
            return sbl_err_set(err, SBL_E_FailedToParse, "unknown 'out' option: %s", k);
        }
    }
    if (out->mode < 0)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "'out' must be either a string or an object with one of inline, "
                           "replace, merge or reduce");
    if (out->mode == 0 && out->db != NULL)
        return sbl_err_set(err, SBL_E_InvalidOptions, "cannot specify 'db' with inline output");
    if (out->mode > 0 && out->coll[0] == '\0')
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid mapReduce output collection");
    return 0;
}

/* Run an internal command; its error (or first write error) becomes ours. */
static int run_checked(const char *db, const bson_t *cmd, sbl_err_t *err)
{
    bson_t reply = BSON_INITIALIZER;
    bson_iter_t it, we;
    int rc = 0;
    sbl_cmd_run(db, cmd, &reply);
    if (!bson_iter_init_find(&it, &reply, "ok") || bson_iter_as_double(&it) != 1.0) {
        int code = bson_iter_init_find(&it, &reply, "code") ? bson_iter_as_int64(&it) : 1;
        const char *msg = bson_iter_init_find(&it, &reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it)
                              ? bson_iter_utf8(&it, NULL) : "mapReduce output failed";
        rc = sbl_err_set(err, code, "%s", msg);
    } else if (bson_iter_init_find(&it, &reply, "writeErrors") &&
               bson_iter_recurse(&it, &we) && bson_iter_next(&we)) {
        bson_iter_t f;
        int code = 1;
        const char *msg = "mapReduce output failed";
        if (bson_iter_recurse(&we, &f) && bson_iter_find(&f, "code"))
            code = bson_iter_as_int64(&f);
        if (bson_iter_recurse(&we, &f) && bson_iter_find(&f, "errmsg") && BSON_ITER_HOLDS_UTF8(&f))
            msg = bson_iter_utf8(&f, NULL);
        rc = sbl_err_set(err, code, "%s", msg);
    }
    bson_destroy(&reply);
    return rc;
}

/* Write results (array of {_id, value}) into out: insert (replace) or upserts. */
static int write_batch(const char *db, const char *coll, bool upsert, const bson_t *docs,
                       uint32_t n, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, arr, one, q;
    bson_iter_t it;
    char kb[16];
    uint32_t i = 0;
    int rc;

    if (n == 0)
        return 0;
    if (!upsert) {
        BSON_APPEND_UTF8(&cmd, "insert", coll);
        BSON_APPEND_ARRAY(&cmd, "documents", docs);
    } else {
        BSON_APPEND_UTF8(&cmd, "update", coll);
        bson_append_array_begin(&cmd, "updates", -1, &arr);
        bson_iter_init(&it, docs);
        while (bson_iter_next(&it)) {
            bson_t d;
            bson_iter_t id;
            sbl_iter_doc(&it, &d);
            bson_append_document_begin(&arr, sbl_array_key(i++, kb), -1, &one);
            bson_append_document_begin(&one, "q", -1, &q);
            if (bson_iter_init_find(&id, &d, "_id"))
                sbl_append_iter(&q, "_id", -1, &id);
            bson_append_document_end(&one, &q);
            BSON_APPEND_DOCUMENT(&one, "u", &d);
            BSON_APPEND_BOOL(&one, "upsert", true);
            bson_append_document_end(&arr, &one);
        }
        bson_append_array_end(&cmd, &arr);
    }
    BSON_APPEND_BOOL(&cmd, "bypassDocumentValidation", true);
    rc = run_checked(db, &cmd, err);
    bson_destroy(&cmd);
    return rc;
}

/* Reduce one key's values (emit order) to one value, owned by *out. */
static int reduce_values(const char *src, size_t len, const bson_value_t *key,
                         const bson_value_t *vals, size_t n, bson_value_t *out, sbl_err_t *err)
{
    bson_t arr = BSON_INITIALIZER;
    char kb[16];
    for (size_t i = 0; i < n; i++)
        sbl_append_value(&arr, sbl_array_key((uint32_t)i, kb), -1, &vals[i]);
    bson_value_t args[2];
    args[0] = *key;
    args[1].value_type = BSON_TYPE_ARRAY;
    args[1].value.v_doc.data = (uint8_t *)bson_get_data(&arr);
    args[1].value.v_doc.data_len = arr.len;
    int rc = sbl_js_call(src, len, NULL, args, 2, out, err);
    bson_destroy(&arr);
    return rc;
}

static const char *const mr_fields[] = {"mapReduce", "mapreduce", "map", "reduce", "out",
                                        "query", "sort", "limit", "finalize", "scope", "jsMode",
                                        "verbose", "bypassDocumentValidation", "collation",
                                        "readConcern", "writeConcern", NULL};

typedef struct mr_args {
    const char *map, *reduce, *finalize;
    size_t map_len, reduce_len, finalize_len;
    bson_t query, sort, scope;
    bool has_query, has_sort, has_scope;
    int64_t limit;
    mr_out_t out;
    const bson_iter_t *collation;
    bson_iter_t coll_it;
} mr_args_t;

static int parse_args(sbl_opctx_t *ctx, mr_args_t *a, sbl_err_t *err)
{
    bson_iter_t it;
    bool has_out = false;

    SBL_RET(sbl_check_fields(ctx->cmd, "MapReduce", mr_fields, err));
    bson_iter_init(&it, ctx->cmd);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "map") == 0) {
            SBL_RET(get_code(&it, "MapReduce.map", &a->map, &a->map_len, err));
        } else if (strcmp(k, "reduce") == 0) {
            SBL_RET(get_code(&it, "MapReduce.reduce", &a->reduce, &a->reduce_len, err));
        } else if (strcmp(k, "finalize") == 0) {
            if (!BSON_ITER_HOLDS_NULL(&it))
                SBL_RET(get_code(&it, "MapReduce.finalize", &a->finalize, &a->finalize_len,
                                 err));
        } else if (strcmp(k, "out") == 0) {
            SBL_RET(parse_out(&it, &a->out, err));
            has_out = true;
        } else if (strcmp(k, "query") == 0 || strcmp(k, "sort") == 0 ||
                   strcmp(k, "scope") == 0) {
            bson_t *d = k[1] == 'u' ? &a->query : k[1] == 'o' ? &a->sort : &a->scope;
            bool *h = k[1] == 'u' ? &a->has_query : k[1] == 'o' ? &a->has_sort : &a->has_scope;
            if (BSON_ITER_HOLDS_NULL(&it))
                continue;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !sbl_iter_doc(&it, d)) {
                char f[32];
                snprintf(f, sizeof(f), "MapReduce.%s", k);
                return sbl_type_error(err, f, &it, "object");
            }
            *h = true;
        } else if (strcmp(k, "limit") == 0) {
            SBL_RET(sbl_get_int64(&it, &a->limit, err));
            if (a->limit < 0)
                return sbl_err_set(err, SBL_E_BadValue, "'limit' must be non-negative");
        } else if (strcmp(k, "collation") == 0) {
            a->coll_it = it;
            a->collation = &a->coll_it;
        }
    }
    if (a->map == NULL || a->reduce == NULL || !has_out)
        return sbl_err_set(err, 40414, "BSON field 'MapReduce.%s' is missing but a required field",
                           a->map == NULL ? "map" : a->reduce == NULL ? "reduce" : "out");
    return 0;
}

/* Build the result documents {_id, value} from the sorted emits. */
static int reduce_all(sbl_opctx_t *ctx, const mr_args_t *a, emits_t *e, bson_t *results,
                      sbl_err_t *err)
{
    char kb[16];
    uint32_t nres = 0;
    int rc = 0;
    bson_value_t *vals = NULL;

    if (e->n > 0)
        qsort(e->v, e->n, sizeof(*e->v), cmp_emit);
    for (size_t i = 0; i < e->n && rc == 0;) {
        size_t j = i + 1;
        while (j < e->n && sbl_value_compare(&e->v[i].key, &e->v[j].key) == 0)
            j++;
        bson_value_t v, fin;
        v.value_type = BSON_TYPE_EOD;
        if (j - i == 1) {
            bson_value_copy(&e->v[i].value, &v);
        } else {
            vals = bson_realloc(vals, (j - i) * sizeof(*vals));
            for (size_t k = i; k < j; k++)
                vals[k - i] = e->v[k].value;
            rc = reduce_values(a->reduce, a->reduce_len, &e->v[i].key, vals, j - i, &v, err);
        }
        if (rc == 0 && a->finalize != NULL) {
            bson_value_t args[2] = {e->v[i].key, v};
            rc = sbl_js_call(a->finalize, a->finalize_len, NULL, args, 2, &fin, err);
            bson_value_destroy(&v);
            v = fin;
        }
        if (rc == 0) {
            bson_t d;
            bson_append_document_begin(results, sbl_array_key(nres++, kb), -1, &d);
            sbl_append_value(&d, "_id", 3, &e->v[i].key);
            sbl_append_value(&d, "value", 5, &v);
            bson_append_document_end(results, &d);
            bson_value_destroy(&v);
        }
        if (rc == 0 && (nres & 63) == 0)
            rc = sbl_op_check_interrupt(ctx, err);
        i = j;
    }
    bson_free(vals);
    return rc;
}

/* out: {reduce}: reduce each result with the document already there. */
static int reduce_with_existing(sbl_opctx_t *ctx, const mr_args_t *a, const char *ns,
                                bson_t *results, sbl_err_t *err)
{
    bson_t out = BSON_INITIALIZER;
    bson_iter_t it;
    char kb[16];
    uint32_t n = 0;
    int rc = 0;

    bson_iter_init(&it, results);
    while (rc == 0 && bson_iter_next(&it)) {
        bson_t d, old;
        bson_iter_t id, val, oval;
        bool found = false, dup = false;
        sbl_iter_doc(&it, &d);
        bson_iter_init_find(&id, &d, "_id");
        bson_iter_init_find(&val, &d, "value");
        if ((rc = sbl_qexec_get_id(ctx, ns, bson_iter_value(&id), &old, &found, &dup, err)) != 0)
            break;
        if (!found || !bson_iter_init_find(&oval, &old, "value")) {
            if (found)
                bson_destroy(&old);
            bson_append_document(&out, sbl_array_key(n++, kb), -1, &d);
            continue;
        }
        bson_value_t vals[2] = {*bson_iter_value(&oval), *bson_iter_value(&val)}, v, fin;
        rc = reduce_values(a->reduce, a->reduce_len, bson_iter_value(&id), vals, 2, &v, err);
        if (rc == 0 && a->finalize != NULL) {
            bson_value_t args[2] = {*bson_iter_value(&id), v};
            rc = sbl_js_call(a->finalize, a->finalize_len, NULL, args, 2, &fin, err);
            bson_value_destroy(&v);
            v = fin;
        }
        if (rc == 0) {
            bson_t nd;
            bson_append_document_begin(&out, sbl_array_key(n++, kb), -1, &nd);
            sbl_append_value(&nd, "_id", 3, bson_iter_value(&id));
            sbl_append_value(&nd, "value", 5, &v);
            bson_append_document_end(&out, &nd);
            bson_value_destroy(&v);
        }
        bson_destroy(&old);
    }
    if (rc == 0) {
        bson_destroy(results);
        bson_copy_to(&out, results);
    }
    bson_destroy(&out);
    return rc;
}

static int write_results(sbl_opctx_t *ctx, const mr_args_t *a, const bson_t *results,
                         sbl_err_t *err)
{
    static atomic_uint tmp_seq;
    const char *db = a->out.db ? a->out.db : ctx->db;
    char tmp[SBL_NS_MAX], from[SBL_NS_MAX * 2], to[SBL_NS_MAX * 2];
    bool replace = a->out.mode == 1;
    const char *target = a->out.coll;
    bson_t cmd, batch = BSON_INITIALIZER;
    bson_iter_t it;
    char kb[16];
    uint32_t n = 0;
    int rc = 0;

    SBL_RET(sbl_validate_db_name(db, err));
    if (replace) {
        snprintf(tmp, sizeof(tmp), "tmp.mr.%s_%u", a->out.coll, atomic_fetch_add(&tmp_seq, 1));
        target = tmp;
        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, "create", tmp);
        rc = run_checked(db, &cmd, err);
        bson_destroy(&cmd);
        SBL_RET(rc);
    }
    bson_iter_init(&it, results);
    while (rc == 0 && bson_iter_next(&it)) {
        bson_t d;
        sbl_iter_doc(&it, &d);
        bson_append_document(&batch, sbl_array_key(n++, kb), -1, &d);
        if (n == MR_BATCH || batch.len > 8 * 1024 * 1024) {
            rc = write_batch(db, target, !replace, &batch, n, err);
            bson_reinit(&batch);
            n = 0;
        }
    }
    if (rc == 0)
        rc = write_batch(db, target, !replace, &batch, n, err);
    bson_destroy(&batch);
    if (replace) {
        snprintf(from, sizeof(from), "%s.%s", db, tmp);
        snprintf(to, sizeof(to), "%s.%s", db, a->out.coll);
        bson_init(&cmd);
        if (rc == 0) {
            BSON_APPEND_UTF8(&cmd, "renameCollection", from);
            BSON_APPEND_UTF8(&cmd, "to", to);
            BSON_APPEND_BOOL(&cmd, "dropTarget", true);
            rc = run_checked("admin", &cmd, err);
        }
        if (rc != 0) {
            sbl_err_t ignored;
            bson_reinit(&cmd);
            BSON_APPEND_UTF8(&cmd, "drop", tmp);
            run_checked(db, &cmd, &ignored);
        }
        bson_destroy(&cmd);
    }
    return rc;
}

int sbl_cmd_map_reduce(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[SBL_NS_MAX], outns[SBL_NS_MAX * 2];
    mr_args_t a;
    emits_t e = {0};
    sbl_qexec_t *q = NULL;
    const sbl_collation_t *coll = NULL;
    bson_t results = BSON_INITIALIZER;
    int rc = 0;

    memset(&a, 0, sizeof(a));
    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    SBL_RET(parse_args(ctx, &a, err));
    if (sbl_views_any() && sbl_view_is(ctx->ss, ns))
        return sbl_err_set(err, SBL_E_CommandNotSupportedOnView,
                           "Namespace %s is a view, not a collection", ns);
    SBL_RET(sbl_js_check_enabled(SBL_E_JSDisabledMapReduce, err));
    SBL_RET(sbl_exec_collation(ctx, ns, a.collation, "MapReduce.collation", &coll, err));
    SBL_RET(sbl_js_check_compiles(a.map, a.map_len, err));
    SBL_RET(sbl_js_check_compiles(a.reduce, a.reduce_len, err));
    if (a.finalize != NULL)
        SBL_RET(sbl_js_check_compiles(a.finalize, a.finalize_len, err));
    if (a.out.mode > 0) {
        /* The output is written by internal commands, which skip authorization:
         * the user must be allowed to write it (replace also removes). */
        const char *odb = a.out.db ? a.out.db : ctx->db;
        SBL_RET(sbl_cmd_auth_require(ctx, "insert", odb, a.out.coll, err));
        SBL_RET(sbl_cmd_auth_require(ctx, a.out.mode == 1 ? "remove" : "update", odb,
                                     a.out.coll, err));
        if (a.out.mode == 3)
            SBL_RET(sbl_cmd_auth_require(ctx, "find", odb, a.out.coll, err));
    }
    if (a.has_scope)
        SBL_RET(sbl_js_set_globals(&a.scope, err));

    sbl_qexec_opts_t o = {.filter = a.has_query ? &a.query : NULL,
                          .sort = a.has_sort ? &a.sort : NULL, .limit = a.limit,
                          .collation = coll};
    SBL_ERR(sbl_qexec_new(ns, &o, &q, err));
    sbl_js_set_emit(on_emit, &e);
    for (;;) {
        bson_t doc;
        bool done = false;
        if ((rc = sbl_qexec_next(q, ctx, &doc, NULL, &done, err)) != 0 || done)
            break;
        rc = sbl_js_call(a.map, a.map_len, &doc, NULL, 0, NULL, err);
        bson_destroy(&doc);
        if (rc != 0)
            break;
    }
    sbl_js_set_emit(NULL, NULL);
    if (rc != 0)
        goto err;
    bson_t arr;
    bson_append_array_begin(&results, "r", 1, &arr);
    rc = reduce_all(ctx, &a, &e, &arr, err);
    bson_append_array_end(&results, &arr);
    SBL_ERR(rc);
    bson_iter_t rit;
    bson_t rarr;
    bson_iter_init_find(&rit, &results, "r");
    sbl_iter_array(&rit, &rarr);
    if (a.out.mode == 0) {
        if (rarr.len > SBL_BSON_MAX_SIZE - 1024)
            SBL_ERR(sbl_err_set(err, SBL_E_BSONObjectTooLarge, "mapReduce's inline results "
                                "exceed the 16 MB limit of a reply; use out: a collection"));
        BSON_APPEND_ARRAY(ctx->reply, "results", &rarr);
        goto err;
    }
    bson_t copy;
    bson_copy_to(&rarr, &copy);
    if (a.out.mode == 3) {
        snprintf(outns, sizeof(outns), "%s.%s", a.out.db ? a.out.db : ctx->db, a.out.coll);
        rc = reduce_with_existing(ctx, &a, outns, &copy, err);
    }
    if (rc == 0)
        rc = write_results(ctx, &a, &copy, err);
    bson_destroy(&copy);
    SBL_ERR(rc);
    if (a.out.db != NULL) {
        bson_t r;
        bson_append_document_begin(ctx->reply, "result", -1, &r);
        BSON_APPEND_UTF8(&r, "db", a.out.db);
        BSON_APPEND_UTF8(&r, "collection", a.out.coll);
        bson_append_document_end(ctx->reply, &r);
    } else {
        BSON_APPEND_UTF8(ctx->reply, "result", a.out.coll);
    }
err:
    sbl_qexec_free(q);
    emits_free(&e);
    bson_destroy(&results);
    return rc;
}

/* Server-side JavaScript's settings: security.javascriptEnabled, and the
 * parameters jsHeapLimitMB (per engine) and sableJsCallTimeLimitMS (a cap
 * on each call, besides maxTimeMS). */
void sbl_cmd_js_init(void)
{
    const sbl_options_t *o = sbl_server_options();
    long long heap_mb = 0, cap_ms = 60 * 1000;
    bson_iter_t it;
    if (o != NULL && bson_iter_init_find(&it, &o->parameters, "jsHeapLimitMB") &&
        BSON_ITER_HOLDS_UTF8(&it))
        heap_mb = atoll(bson_iter_utf8(&it, NULL));
    if (o != NULL && bson_iter_init_find(&it, &o->parameters, "sableJsCallTimeLimitMS") &&
        BSON_ITER_HOLDS_UTF8(&it))
        cap_ms = atoll(bson_iter_utf8(&it, NULL));
    sbl_js_configure(o == NULL || !o->js_disabled, heap_mb > 0 ? (size_t)heap_mb << 20 : 0,
                     cap_ms > 0 ? cap_ms : 0);
}
