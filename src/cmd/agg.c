/*
 * agg.c: the aggregate command: pipeline parsing, the stages other than
 * $group (agg_group.c), and the small expression language they share
 * ("$path" references, $literal, objects, arrays and constants).
 *
 * The leading $match (and a $sort / $skip / $limit right after it) is handed
 * to the query executor, so it uses _id point lookups and range scans like
 * find; the rest of the pipeline runs over the documents in memory, stage by
 * stage, and the result is served through a cursor over that array.
 * What must stay true: every stage owns the documents it produces and frees
 * the ones it consumes (sbl_docvec_t), also on error.
 */
#include "cmd/crud_int.h"
#include "doc/doc.h"

#include <stdlib.h>
#include <string.h>

#define SBL_E_InvalidPipelineOperator 168
#define SBL_E_StageNotOneField 40323
#define SBL_E_NewRootNotObject 40228
#define SBL_E_BadLimit 15958
#define SBL_E_BadSkip 15956
#define SBL_E_BadUnwind 15981

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

/* ---- expressions -------------------------------------------------------------- */

/* Make *out an owned document value holding b. */
static void doc_value(const bson_t *b, bson_type_t type, bson_value_t *out)
{
    bson_value_t view;
    view.value_type = type;
    view.value.v_doc.data = (uint8_t *)bson_get_data(b);
    view.value.v_doc.data_len = b->len;
    bson_value_copy(&view, out);
}

/* Resolve the dotted path at the value it points to: documents are entered,
 * arrays give the array of what each element yields (as MongoDB does). */
static bool resolve(const bson_iter_t *at, const char *path, bson_value_t *out)
{
    if (*path == '\0') {
        bson_value_t v;
        sbl_iter_value(at, &v);
        bson_value_copy(&v, out);
        return true;
    }
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    const char *rest = dot ? dot + 1 : path + len;
    bson_iter_t sub;

    if (BSON_ITER_HOLDS_DOCUMENT(at)) {
        if (!bson_iter_recurse(at, &sub))
            return false;
        while (bson_iter_next(&sub))
            if (strlen(bson_iter_key(&sub)) == len && memcmp(bson_iter_key(&sub), path, len) == 0)
                return resolve(&sub, rest, out);
        return false;
    }
    if (BSON_ITER_HOLDS_ARRAY(at)) {
        bson_t arr = BSON_INITIALIZER;
        uint32_t n = 0;
        char kb[16];
        bson_iter_recurse(at, &sub);
        while (bson_iter_next(&sub)) {
            bson_value_t v;
            if (!BSON_ITER_HOLDS_DOCUMENT(&sub) && !BSON_ITER_HOLDS_ARRAY(&sub))
                continue;
            if (resolve(&sub, path, &v)) {
                bson_append_value(&arr, sbl_crud_key(n++, kb), -1, &v);
                bson_value_destroy(&v);
            }
        }
        doc_value(&arr, BSON_TYPE_ARRAY, out);
        bson_destroy(&arr);
        return true;
    }
    return false;
}

/* Look up "a.b.c" in doc. */
static bool field_path(const bson_t *doc, const char *path, bson_value_t *out)
{
    bson_iter_t it;
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    if (!bson_iter_init(&it, doc))
        return false;
    while (bson_iter_next(&it))
        if (strlen(bson_iter_key(&it)) == len && memcmp(bson_iter_key(&it), path, len) == 0)
            return resolve(&it, dot ? dot + 1 : path + len, out);
    return false;
}

int sbl_agg_eval(const bson_value_t *expr, const bson_t *doc, bson_value_t *out, bool *missingp,
                 sbl_err_t *err)
{
    *missingp = false;
    out->value_type = BSON_TYPE_NULL;
    switch (expr->value_type) {
    case BSON_TYPE_UTF8: {
        const char *s = expr->value.v_utf8.str;
        if (s[0] != '$')
            break;
        if (s[1] == '$') {
            const char *var = s + 2;
            if (strncmp(var, "ROOT", 4) == 0 || strncmp(var, "CURRENT", 7) == 0) {
                const char *rest = var + (var[0] == 'R' ? 4 : 7);
                if (*rest == '\0') {
                    doc_value(doc, BSON_TYPE_DOCUMENT, out);
                    return 0;
                }
                if (*rest == '.' && field_path(doc, rest + 1, out))
                    return 0;
                *missingp = true;
                out->value_type = BSON_TYPE_NULL;
                return 0;
            }
            if (strcmp(var, "REMOVE") == 0) {
                *missingp = true;
                return 0;
            }
            return sbl_err_set(err, SBL_E_Location17276, "Use of undefined variable: %s", var);
        }
        if (!field_path(doc, s + 1, out)) {
            *missingp = true;
            out->value_type = BSON_TYPE_NULL;
        }
        return 0;
    }
    case BSON_TYPE_DOCUMENT: {
        bson_t spec, res = BSON_INITIALIZER;
        bson_iter_t it;
        if (!bson_init_static(&spec, expr->value.v_doc.data, expr->value.v_doc.data_len))
            return sbl_err_set(err, SBL_E_InvalidBSON, "invalid expression");
        bson_iter_init(&it, &spec);
        if (bson_iter_next(&it) && bson_iter_key(&it)[0] == '$') {
            if (strcmp(bson_iter_key(&it), "$literal") == 0) {
                bson_value_t v;
                sbl_iter_value(&it, &v);
                bson_value_copy(&v, out);
                return 0;
            }
            return sbl_err_set(err, SBL_E_InvalidPipelineOperator,
                               "Unrecognized expression '%s'", bson_iter_key(&it));
        }
        bson_iter_init(&it, &spec);
        while (bson_iter_next(&it)) {
            bson_value_t sub, v;
            bool miss = false;
            sbl_iter_value(&it, &sub);
            int rc = sbl_agg_eval(&sub, doc, &v, &miss, err);
            if (rc != 0) {
                bson_destroy(&res);
                return rc;
            }
            if (!miss)
                bson_append_value(&res, bson_iter_key(&it), -1, &v);
            bson_value_destroy(&v);
        }
        doc_value(&res, BSON_TYPE_DOCUMENT, out);
        bson_destroy(&res);
        return 0;
    }
    case BSON_TYPE_ARRAY: {
        bson_t spec, res = BSON_INITIALIZER;
        bson_iter_t it;
        uint32_t n = 0;
        char kb[16];
        if (!bson_init_static(&spec, expr->value.v_doc.data, expr->value.v_doc.data_len))
            return sbl_err_set(err, SBL_E_InvalidBSON, "invalid expression");
        bson_iter_init(&it, &spec);
        while (bson_iter_next(&it)) {
            bson_value_t sub, v;
            bool miss = false;
            sbl_iter_value(&it, &sub);
            int rc = sbl_agg_eval(&sub, doc, &v, &miss, err);
            if (rc != 0) {
                bson_destroy(&res);
                return rc;
            }
            if (miss)
                bson_append_null(&res, sbl_crud_key(n++, kb), -1);
            else
                bson_append_value(&res, sbl_crud_key(n++, kb), -1, &v);
            bson_value_destroy(&v);
        }
        doc_value(&res, BSON_TYPE_ARRAY, out);
        bson_destroy(&res);
        return 0;
    }
    default:
        break;
    }
    bson_value_copy(expr, out);
    return 0;
}

/* ---- document editing ------------------------------------------------------------ */

/* Copy in to out (initialised by the caller) with the dotted path set to v,
 * or removed when v is NULL; missing intermediate documents are created. */
static void set_path(const bson_t *in, const char *path, const bson_value_t *v, bson_t *out)
{
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
                bson_append_iter(out, k, -1, &it);
                continue;
            }
            found = true;
            if (dot == NULL) {
                if (v != NULL)
                    bson_append_value(out, k, -1, v);
                continue;
            }
            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                uint32_t dlen;
                const uint8_t *data;
                bson_t subin, sub;
                bson_iter_document(&it, &dlen, &data);
                bson_init_static(&subin, data, dlen);
                bson_append_document_begin(out, k, -1, &sub);
                set_path(&subin, dot + 1, v, &sub);
                bson_append_document_end(out, &sub);
            } else if (v != NULL) {
                bson_t sub;
                bson_append_document_begin(out, k, -1, &sub);
                set_path(NULL, dot + 1, v, &sub);
                bson_append_document_end(out, &sub);
            } else {
                bson_append_iter(out, k, -1, &it);
            }
        }
    }
    if (!found && v != NULL) {
        if (dot == NULL) {
            bson_append_value(out, head, -1, v);
        } else {
            bson_t sub;
            bson_append_document_begin(out, head, -1, &sub);
            set_path(NULL, dot + 1, v, &sub);
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

/* ---- stages ----------------------------------------------------------------------- */

static bool stage_doc(const bson_iter_t *it, bson_t *out)
{
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(it, &len, &data);
    return bson_init_static(out, data, len);
}

static int st_match(sbl_docvec_t *dv, const bson_t *spec, sbl_err_t *err)
{
    sbl_matcher_t *m = sbl_matcher_new(spec, err);
    if (m == NULL)
        return err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "bad $match");
    size_t w = 0;
    for (size_t i = 0; i < dv->n; i++) {
        if (sbl_matcher_match(m, dv->v[i], NULL))
            dv->v[w++] = dv->v[i];
        else
            bson_destroy(dv->v[i]);
    }
    dv->n = w;
    sbl_matcher_free(m);
    return 0;
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

/* Set computed fields (name -> expression, evaluated on the input document). */
static int set_computed(sbl_docvec_t *dv, const bson_t *computed, const bson_t *orig, size_t i,
                        sbl_err_t *err)
{
    bson_iter_t it;
    bson_t cur;
    bson_copy_to(dv->v[i], &cur);
    bson_iter_init(&it, computed);
    while (bson_iter_next(&it)) {
        bson_value_t e, v;
        bool miss = false;
        sbl_iter_value(&it, &e);
        int rc = sbl_agg_eval(&e, orig, &v, &miss, err);
        if (rc != 0) {
            bson_destroy(&cur);
            return rc;
        }
        bson_t next = BSON_INITIALIZER;
        set_path(&cur, bson_iter_key(&it), miss ? NULL : &v, &next);
        bson_value_destroy(&v);
        bson_destroy(&cur);
        bson_copy_to(&next, &cur);
        bson_destroy(&next);
    }
    replace_doc(dv, i, &cur);
    return 0;
}

static int st_project(sbl_docvec_t *dv, const bson_t *spec, sbl_err_t *err)
{
    bson_t inc = BSON_INITIALIZER, exc = BSON_INITIALIZER, computed = BSON_INITIALIZER;
    bson_iter_t it;
    bool id_excluded = false, any_inc = false, any_exc = false;
    int rc = 0;

    if (bson_empty(spec))
        return sbl_err_set(err, 51272, "projection specification must have at least one field");
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (BSON_ITER_HOLDS_NUMBER(&it) || BSON_ITER_HOLDS_BOOL(&it)) {
            bool on = bson_iter_as_bool(&it);
            if (strcmp(k, "_id") == 0) {
                id_excluded = !on;
                continue;
            }
            bson_append_int32(on ? &inc : &exc, k, -1, on ? 1 : 0);
            *(on ? &any_inc : &any_exc) = true;
        } else {
            bson_append_iter(&computed, k, -1, &it);
        }
    }
    bool any_computed = !bson_empty(&computed);
    if (any_exc && (any_inc || any_computed)) {
        rc = sbl_err_set(err, SBL_E_Location31254,
                         "Invalid $project :: caused by :: Cannot do exclusion on field in "
                         "inclusion projection");
        goto done;
    }
    if (!any_inc && !any_computed) { /* exclusion */
        if (id_excluded)
            bson_append_int32(&exc, "_id", 3, 0);
        rc = apply_projection(dv, &exc, err);
        goto done;
    }
    /* inclusion: the included fields, then the computed ones */
    if (id_excluded)
        bson_append_int32(&inc, "_id", 3, 0);
    else if (!any_inc)
        bson_append_int32(&inc, "_id", 3, 1);
    for (size_t i = 0; i < dv->n && rc == 0; i++) {
        bson_t *orig = dv->v[i];
        bson_t base = BSON_INITIALIZER;
        if (any_inc || !id_excluded) {
            sbl_projection_t *p = sbl_projection_new(&inc, err);
            if (p == NULL) {
                rc = err->code ? err->code : SBL_E_BadValue;
                bson_destroy(&base);
                break;
            }
            rc = sbl_projection_apply(p, orig, -1, &base, err);
            sbl_projection_free(p);
        }
        dv->v[i] = bson_copy(&base);
        bson_destroy(&base);
        if (rc == 0 && any_computed)
            rc = set_computed(dv, &computed, orig, i, err);
        bson_destroy(orig);
    }
done:
    bson_destroy(&inc);
    bson_destroy(&exc);
    bson_destroy(&computed);
    return rc;
}

static int st_add_fields(sbl_docvec_t *dv, const bson_t *spec, sbl_err_t *err)
{
    for (size_t i = 0; i < dv->n; i++) {
        bson_t *orig = bson_copy(dv->v[i]);
        int rc = set_computed(dv, spec, orig, i, err);
        bson_destroy(orig);
        if (rc != 0)
            return rc;
    }
    return 0;
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

static int st_replace_root(sbl_docvec_t *dv, const bson_value_t *expr, sbl_err_t *err)
{
    for (size_t i = 0; i < dv->n; i++) {
        bson_value_t v;
        bool miss = false;
        SBL_RET(sbl_agg_eval(expr, dv->v[i], &v, &miss, err));
        if (miss || v.value_type != BSON_TYPE_DOCUMENT) {
            bson_value_destroy(&v);
            return sbl_err_set(err, SBL_E_NewRootNotObject,
                               "'newRoot' expression must evaluate to an object, but resulting "
                               "value was: %s",
                               miss ? "MISSING" : sbl_bson_type_name(v.value_type));
        }
        bson_t view;
        bson_init_static(&view, v.value.v_doc.data, v.value.v_doc.data_len);
        bson_destroy(dv->v[i]);
        dv->v[i] = bson_copy(&view);
        bson_value_destroy(&v);
    }
    return 0;
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

static int st_sort(sbl_docvec_t *dv, const bson_t *spec, sbl_err_t *err)
{
    sbl_sort_t *s = sbl_sort_new(spec, err);
    if (s == NULL)
        return err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "bad $sort");
    sort_ent_t *e = malloc((dv->n + 1) * sizeof(*e));
    for (size_t i = 0; i < dv->n; i++) {
        e[i].doc = dv->v[i];
        e[i].seq = i;
    }
    tls_sort = s;
    qsort(e, dv->n, sizeof(*e), cmp_sort_ent);
    for (size_t i = 0; i < dv->n; i++)
        dv->v[i] = e[i].doc;
    free(e);
    sbl_sort_free(s);
    return 0;
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
                           sbl_bson_type_name(bson_iter_type(it)));
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
                set_path(doc, path, &v, d);
                if (index_field != NULL) {
                    bson_value_t iv = {.value_type = BSON_TYPE_INT64};
                    iv.value.v_int64 = idx;
                    bson_t *d2 = bson_new();
                    set_path(d, index_field, &iv, d2);
                    bson_destroy(d);
                    d = d2;
                }
                sbl_docvec_push(&out, d);
                idx++;
                any = true;
            }
            if (!any && preserve) {
                bson_t *d = bson_new();
                set_path(doc, path, NULL, d);
                if (index_field != NULL) {
                    bson_t *d2 = bson_new();
                    bson_value_t nv = {.value_type = BSON_TYPE_NULL};
                    set_path(d, index_field, &nv, d2);
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
                set_path(d, index_field, &nv, d2);
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

static int st_coll_stats(sbl_cmd_ctx_t *ctx, const char *ns, sbl_docvec_t *dv, const bson_t *spec,
                         sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    sbl_coll_stats_t st = {0};
    SBL_RET(sbl_coll_open(ctx->ss, ns, false, &c, NULL, err));
    int rc = sbl_coll_stats(ctx->ss, c, &st, err);
    sbl_coll_release(c);
    if (rc != 0)
        return rc;
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
        bson_append_document_end(d, &ss);
    }
    sbl_docvec_clear(dv);
    sbl_docvec_push(dv, d);
    return 0;
}

/* ---- the command -------------------------------------------------------------------- */

static const char *const agg_fields[] = {"aggregate", "pipeline", "cursor", "explain",
                                         "allowDiskUse", "bypassDocumentValidation", "collation",
                                         "hint", "let", "fromMongos", "needsMerge",
                                         "isMapReduceCommand", NULL};

static int get_num(const bson_iter_t *it, const char *stage, int64_t *out, sbl_err_t *err)
{
    if (!BSON_ITER_HOLDS_NUMBER(it))
        return sbl_err_set(err, stage[1] == 'l' ? SBL_E_BadLimit : SBL_E_BadSkip,
                           "invalid argument to %s stage: Expected a number in: %s: %s", stage,
                           stage, sbl_bson_type_name(bson_iter_type(it)));
    *out = bson_iter_as_int64(it);
    if (stage[1] == 'l' && *out <= 0)
        return sbl_err_set(err, SBL_E_BadLimit, "the limit must be positive");
    if (stage[1] == 's' && *out < 0)
        return sbl_err_set(err, SBL_E_BadSkip, "invalid argument to $skip stage: Expected a "
                                               "non-negative number in: $skip: %lld",
                           (long long)*out);
    return 0;
}

/* Run one stage (not the pushed-down prefix) over dv. */
static int run_stage(sbl_cmd_ctx_t *ctx, const char *ns, size_t index, bson_iter_t *st,
                     sbl_docvec_t *dv, sbl_err_t *err)
{
    const char *name = bson_iter_key(st);
    bson_t spec;
    bool is_doc = BSON_ITER_HOLDS_DOCUMENT(st);
    if (is_doc && !stage_doc(st, &spec))
        return sbl_err_set(err, SBL_E_InvalidBSON, "invalid stage");
#define NEED_DOC(msg)                                                                              \
    if (!is_doc)                                                                                   \
    return sbl_err_set(err, 15959, msg)

    if (strcmp(name, "$match") == 0) {
        NEED_DOC("the match filter must be an expression in an object");
        return st_match(dv, &spec, err);
    }
    if (strcmp(name, "$project") == 0) {
        NEED_DOC("$project specification must be an object");
        return st_project(dv, &spec, err);
    }
    if (strcmp(name, "$addFields") == 0 || strcmp(name, "$set") == 0) {
        NEED_DOC("$addFields specification stage must be an object");
        return st_add_fields(dv, &spec, err);
    }
    if (strcmp(name, "$unset") == 0)
        return st_unset(dv, st, err);
    if (strcmp(name, "$group") == 0) {
        NEED_DOC("a group's fields must be specified in an object");
        return sbl_agg_group(dv, &spec, err);
    }
    if (strcmp(name, "$sort") == 0) {
        NEED_DOC("the $sort key specification must be an object");
        return st_sort(dv, &spec, err);
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
        NEED_DOC("expected an object as specification for $replaceRoot stage");
        if (!bson_iter_init_find(&nr, &spec, "newRoot"))
            return sbl_err_set(err, 40231, "no newRoot specified for the $replaceRoot stage");
        bson_value_t e;
        sbl_iter_value(&nr, &e);
        return st_replace_root(dv, &e, err);
    }
    if (strcmp(name, "$replaceWith") == 0) {
        bson_value_t e;
        sbl_iter_value(st, &e);
        return st_replace_root(dv, &e, err);
    }
    if (strcmp(name, "$collStats") == 0) {
        NEED_DOC("$collStats must take a nested object");
        if (index != 0)
            return sbl_err_set(err, 40602,
                               "$collStats is only valid as the first stage in a pipeline");
        return st_coll_stats(ctx, ns, dv, &spec, err);
    }
    if (strcmp(name, "$out") == 0 || strcmp(name, "$merge") == 0 ||
        strcmp(name, "$lookup") == 0 || strcmp(name, "$facet") == 0 ||
        strcmp(name, "$bucket") == 0 || strcmp(name, "$sample") == 0 ||
        strcmp(name, "$indexStats") == 0 || strcmp(name, "$currentOp") == 0)
        return sbl_err_set(err, SBL_E_NotImplemented, "%s is not supported by this server yet",
                           name);
#undef NEED_DOC
    return sbl_err_set(err, SBL_E_UnrecognizedStage, "Unrecognized pipeline stage name: '%s'",
                       name);
}

/* Check the pipeline's shape: an array of one-field documents. */
static int check_pipeline(const bson_iter_t *pit, size_t *np, sbl_err_t *err)
{
    bson_iter_t st, f;
    size_t n = 0;
    bson_iter_recurse(pit, &st);
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

int sbl_cmd_aggregate(sbl_cmd_ctx_t *ctx, sbl_err_t *err)
{
    char ns[SBL_NS_MAX];
    bson_iter_t it, pit;
    bool has_pipeline = false, has_cursor = false, explain = false;
    int64_t batch_size = -1;
    size_t nstages = 0;

    SBL_RET(sbl_crud_check_fields(ctx->cmd, "aggregate", agg_fields, err));
    if (!bson_iter_init(&it, ctx->cmd) || !bson_iter_next(&it))
        return sbl_err_set(err, SBL_E_BadValue, "empty command");
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_NotImplemented,
                           "collectionless aggregate is not supported by this server yet");
    SBL_RET(sbl_cmd_ns(ctx, ns, sizeof(ns), err));
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "pipeline") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&it))
                return sbl_err_set(err, SBL_E_TypeMismatch,
                                   "'pipeline' option must be specified as an array");
            pit = it;
            has_pipeline = true;
        } else if (strcmp(k, "cursor") == 0) {
            bson_iter_t c;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_crud_type_error(err, "aggregate.cursor", &it, "object");
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
            explain = bson_iter_as_bool(&it);
        } else if (strcmp(k, "hint") == 0) {
            SBL_RET(sbl_crud_check_hint(&it, err));
        }
    }
    if (!has_pipeline)
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field 'aggregate.pipeline' is missing but a required field");
    if (explain)
        return sbl_err_set(err, SBL_E_NotImplemented,
                           "explain is not supported for aggregate by this server yet");
    if (!has_cursor)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "The 'cursor' option is required, except for aggregate with the "
                           "explain argument");
    SBL_RET(check_pipeline(&pit, &nstages, err));

    /* Push the leading $match / $sort / $skip / $limit into the executor. */
    bson_iter_t st, f;
    bson_t filter, sort;
    bool has_filter = false, has_sort = false, source_needed = true;
    int64_t skip = 0, limit = 0;
    size_t first = 0;
    bson_iter_recurse(&pit, &st);
    while (bson_iter_next(&st)) {
        bson_iter_recurse(&st, &f);
        bson_iter_next(&f);
        const char *name = bson_iter_key(&f);
        if (first == 0 && strcmp(name, "$collStats") == 0) {
            source_needed = false;
            break;
        }
        if (strcmp(name, "$match") == 0 && first == 0 && BSON_ITER_HOLDS_DOCUMENT(&f)) {
            has_filter = stage_doc(&f, &filter);
        } else if (strcmp(name, "$sort") == 0 && !has_sort && skip == 0 && limit == 0 &&
                   BSON_ITER_HOLDS_DOCUMENT(&f)) {
            has_sort = stage_doc(&f, &sort);
            if (bson_empty(&sort))
                break; /* let the stage report the error */
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

    sbl_docvec_t dv = {0};
    int rc = 0;
    if (source_needed) {
        sbl_qexec_t *q = NULL;
        sbl_qexec_opts_t o = {has_filter ? &filter : NULL, has_sort ? &sort : NULL, skip, limit};
        SBL_RET(sbl_qexec_new(ns, &o, &q, err));
        for (;;) {
            bson_t doc;
            bool done = false;
            if ((rc = sbl_qexec_next(q, ctx, &doc, NULL, &done, err)) != 0 || done)
                break;
            sbl_docvec_push(&dv, bson_copy(&doc));
            bson_destroy(&doc);
        }
        sbl_qexec_free(q);
    }
    bson_iter_recurse(&pit, &st);
    for (size_t i = 0; rc == 0 && bson_iter_next(&st); i++) {
        if (i < first)
            continue;
        bson_iter_recurse(&st, &f);
        bson_iter_next(&f);
        rc = run_stage(ctx, ns, i, &f, &dv, err);
        if (rc == 0)
            rc = sbl_cmd_check_interrupt(ctx, err);
    }
    if (rc != 0) {
        sbl_docvec_clear(&dv);
        return rc;
    }
    void *state = sbl_cursor_docs_state(dv.v, dv.n);
    return sbl_cursor_first_batch(ctx, ns, &sbl_cursor_docs_source, state, batch_size, false, err);
}
