/*
 * stages.c: the aggregation stages that read or write other collections
 * ($lookup, $out, $merge), run sub-pipelines ($facet), group by shorthand
 * ($bucket, $sortByCount), sample ($sample) or produce documents from
 * nothing ($documents).  Memory limits and spilling are src/exec's (spill.c);
 * $bucketAuto is bucket_auto.c's, $out and $merge agg_write.c's.
 *
 * What must stay true: a stage reading another collection reads it through
 * the query executor (never holding a storage scan across stages).
 */
#include "agg/agg.h"
#include "agg/agg_int.h"
#include "sessions/sessions.h"
#include "common/buf.h"
#include "doc/doc.h"
#include "expr/expr.h"
#include "server/server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- shared helpers --------------------------------------------------------------------- */

bool sbl_agg_sub_doc(const bson_iter_t *it, bson_t *out)
{
    uint32_t len;
    const uint8_t *data;
    if (BSON_ITER_HOLDS_ARRAY(it))
        bson_iter_array(it, &len, &data);
    else
        bson_iter_document(it, &len, &data);
    return bson_init_static(out, data, len);
}

/* Resolve a target collection given as "coll" or {db, coll} into ns. */
int sbl_agg_target_ns(const sbl_agg_env_t *env, const bson_iter_t *it, const char *stage,
                     char *ns, size_t nslen, sbl_err_t *err)
{
    const char *db = env->db, *coll = NULL;
    if (BSON_ITER_HOLDS_UTF8(it)) {
        coll = bson_iter_utf8(it, NULL);
    } else if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t f;
        bson_iter_recurse(it, &f);
        while (bson_iter_next(&f)) {
            if (strcmp(bson_iter_key(&f), "db") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                db = bson_iter_utf8(&f, NULL);
            else if (strcmp(bson_iter_key(&f), "coll") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                coll = bson_iter_utf8(&f, NULL);
        }
    }
    if (coll == NULL || coll[0] == '\0')
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "%s requires a collection name as a string or {db, coll}", stage);
    snprintf(ns, nslen, "%s.%s", db, coll);
    return sbl_validate_ns(ns, err);
}

static void copy_docs(const sbl_docvec_t *in, sbl_docvec_t *out)
{
    for (size_t i = 0; i < in->n; i++)
        sbl_docvec_push(out, bson_copy(in->v[i]));
}

/* ---- $lookup --------------------------------------------------------------------------- */

typedef struct fkey {
    uint8_t *key;
    size_t len;
    size_t idx;
} fkey_t;

static int cmp_fkey(const void *a, const void *b)
{
    const fkey_t *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->key, y->key, n);
    if (r != 0)
        return r;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Append the encoding of v under coll (NULL: binary) to the key list (an owned heap copy). */
static void push_key(fkey_t **outp, size_t *np, const bson_value_t *v, size_t idx,
                     const sbl_collation_t *coll)
{
    sbl_buf_t b;
    sbl_buf_init(&b);
    sbl_key_append_coll(&b, v, false, coll);
    uint8_t *copy = malloc(b.len ? b.len : 1);
    memcpy(copy, b.data, b.len);
    *outp = realloc(*outp, (*np + 1) * sizeof(**outp));
    (*outp)[*np] = (fkey_t){copy, b.len, idx};
    (*np)++;
    sbl_buf_destroy(&b);
}

/* Append to *outp the encoded keys of every value a dotted path reaches in doc
 * (through arrays, and each element of an array found at the end), tagged with
 * idx; a path reaching nothing gives null, as equality matching treats it. */
static void values_at(const bson_t *doc, const char *path, fkey_t **outp, size_t *np, size_t idx,
                      const sbl_collation_t *coll)
{
    bson_t wrap = BSON_INITIALIZER;
    bson_iter_t it;
    bson_append_document(&wrap, "r", 1, doc);
    bson_iter_init_find(&it, &wrap, "r");
    typedef struct stackent {
        bson_iter_t at;
        const char *path;
    } stackent_t;
    stackent_t stack[256];
    size_t sp = 0, found = 0;
    stack[sp++] = (stackent_t){it, path};
    while (sp > 0) {
        stackent_t e = stack[--sp];
        if (*e.path == '\0') {
            bson_value_t v;
            sbl_iter_value(&e.at, &v);
            if (BSON_ITER_HOLDS_ARRAY(&e.at)) {
                bson_iter_t el;
                bson_iter_recurse(&e.at, &el);
                while (bson_iter_next(&el)) {
                    bson_value_t ev;
                    sbl_iter_value(&el, &ev);
                    push_key(outp, np, &ev, idx, coll);
                    found++;
                }
            }
            push_key(outp, np, &v, idx, coll);
            found++;
            continue;
        }
        const char *dot = strchr(e.path, '.');
        size_t len = dot ? (size_t)(dot - e.path) : strlen(e.path);
        const char *rest = dot ? dot + 1 : e.path + len;
        bson_iter_t sub;
        if (BSON_ITER_HOLDS_DOCUMENT(&e.at)) {
            bson_iter_recurse(&e.at, &sub);
            while (bson_iter_next(&sub))
                if (bson_iter_key_len(&sub) == len &&
                    memcmp(bson_iter_key(&sub), e.path, len) == 0 && sp < 256) {
                    stack[sp++] = (stackent_t){sub, rest};
                    break;
                }
        } else if (BSON_ITER_HOLDS_ARRAY(&e.at)) {
            bson_iter_recurse(&e.at, &sub);
            while (bson_iter_next(&sub))
                if (BSON_ITER_HOLDS_DOCUMENT(&sub) && sp < 256)
                    stack[sp++] = (stackent_t){sub, e.path};
        }
    }
    if (found == 0) {
        bson_value_t nv = {.value_type = BSON_TYPE_NULL};
        push_key(outp, np, &nv, idx, coll);
    }
    bson_destroy(&wrap);
}

static void free_fkeys(fkey_t *k, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(k[i].key);
    free(k);
}

/* Merge two let documents (later wins) into out (initialised here). */
void sbl_agg_merge_let(const bson_t *outer, const bson_t *inner, bson_t *out)
{
    bson_iter_t it;
    bson_init(out);
    bson_iter_init(&it, outer);
    while (bson_iter_next(&it))
        if (!bson_has_field(inner, bson_iter_key(&it)))
            sbl_append_iter(out, bson_iter_key(&it), -1, &it);
    bson_concat(out, inner);
}

int sbl_agg_lookup(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec, sbl_err_t *err)
{
    bson_iter_t it, from_it;
    const char *local = NULL, *foreign = NULL, *as = NULL;
    bson_t pipeline, let_spec;
    bool has_from = false, has_pipeline = false, has_let = false;
    char fns[SBL_NS_MAX];
    int rc = 0;

    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "from") == 0) {
            from_it = it;
            has_from = true;
        } else if (strcmp(k, "localField") == 0 || strcmp(k, "foreignField") == 0 ||
                   strcmp(k, "as") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_err_set(err, SBL_E_FailedToParse,
                                   "$lookup argument '%s' must be a string, is type %s", k,
                                   sbl_type_name(bson_iter_type(&it)));
            const char *v = bson_iter_utf8(&it, NULL);
            if (k[0] == 'l')
                local = v;
            else if (k[0] == 'f')
                foreign = v;
            else
                as = v;
        } else if (strcmp(k, "pipeline") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&it))
                return sbl_err_set(err, SBL_E_FailedToParse,
                                   "$lookup argument 'pipeline' must be an array");
            has_pipeline = sbl_agg_sub_doc(&it, &pipeline);
        } else if (strcmp(k, "let") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_err_set(err, SBL_E_FailedToParse,
                                   "$lookup argument 'let' must be an object");
            has_let = sbl_agg_sub_doc(&it, &let_spec);
        } else {
            return sbl_err_set(err, SBL_E_FailedToParse, "unknown argument to $lookup: %s", k);
        }
    }
    if (as == NULL)
        return sbl_err_set(err, SBL_E_FailedToParse, "must specify 'as' field for a $lookup");
    if ((local == NULL) != (foreign == NULL))
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "$lookup requires both or neither of 'localField' and 'foreignField' "
                           "to be specified");
    if (local == NULL && !has_pipeline)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "$lookup requires either 'pipeline' or both 'localField' and "
                           "'foreignField' to be specified");
    if (has_let && !has_pipeline)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "$lookup with 'let' requires 'pipeline' to be specified");
    if (!has_from)
        return sbl_err_set(err, SBL_E_FailedToParse, "must specify 'from' field for a $lookup");
    SBL_RET(sbl_agg_target_ns(env, &from_it, "$lookup", fns, sizeof(fns), err));
    if (has_pipeline) {
        size_t n;
        SBL_RET(sbl_agg_check_pipeline(&pipeline, &n, err));
    }

    /* Parse the let expressions once. */
    size_t nlet = has_let ? bson_count_keys(&let_spec) : 0;
    sbl_expr_t **let_e = calloc(nlet + 1, sizeof(*let_e));
    const char **let_n = calloc(nlet + 1, sizeof(*let_n));
    if (has_let) {
        size_t i = 0;
        bson_iter_init(&it, &let_spec);
        while (rc == 0 && bson_iter_next(&it)) {
            bson_value_t v;
            sbl_iter_value(&it, &v);
            let_n[i] = bson_iter_key(&it);
            rc = sbl_expr_parse(&v, &let_e[i++], err);
        }
    }

    sbl_docvec_t foreign_docs = {0};
    fkey_t *fkeys = NULL;
    size_t nfk = 0;
    if (rc == 0)
        rc = sbl_agg_read_ns(env, fns, NULL, &foreign_docs, err);
    if (rc == 0 && foreign != NULL) {
        for (size_t i = 0; i < foreign_docs.n; i++)
            values_at(foreign_docs.v[i], foreign, &fkeys, &nfk, i, env->coll);
        if (nfk > 1) /* fkeys is NULL when empty; qsort's pointer must not be */
            qsort(fkeys, nfk, sizeof(*fkeys), cmp_fkey);
    }
    uint8_t *mark = calloc(foreign_docs.n + 1, 1);
    for (size_t d = 0; d < dv->n && rc == 0; d++) {
        sbl_docvec_t matched = {0};
        if (foreign != NULL) {
            fkey_t *lk = NULL;
            size_t nlk = 0;
            memset(mark, 0, foreign_docs.n + 1);
            values_at(dv->v[d], local, &lk, &nlk, 0, env->coll);
            for (size_t i = 0; i < nlk; i++) {
                size_t lo = 0, hi = nfk;
                fkey_t probe = {lk[i].key, lk[i].len, 0};
                while (lo < hi) {
                    size_t mid = (lo + hi) / 2;
                    if (cmp_fkey(&fkeys[mid], &probe) < 0)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                for (; lo < nfk && fkeys[lo].len == probe.len &&
                       memcmp(fkeys[lo].key, probe.key, probe.len) == 0;
                     lo++)
                    mark[fkeys[lo].idx] = 1;
            }
            free_fkeys(lk, nlk);
            for (size_t i = 0; i < foreign_docs.n; i++)
                if (mark[i])
                    sbl_docvec_push(&matched, bson_copy(foreign_docs.v[i]));
        } else {
            copy_docs(&foreign_docs, &matched);
        }
        if (has_pipeline) {
            bson_t vars = BSON_INITIALIZER, merged;
            for (size_t i = 0; i < nlet && rc == 0; i++) {
                bson_value_t v;
                if ((rc = sbl_agg_eval(env, let_e[i], dv->v[d], &v, err)) != 0)
                    break;
                if (v.value_type == BSON_TYPE_EOD)
                    bson_append_null(&vars, let_n[i], -1);
                else
                    sbl_append_value(&vars, let_n[i], -1, &v);
                bson_value_destroy(&v);
            }
            sbl_agg_merge_let(env->let, &vars, &merged);
            sbl_agg_env_t sub = *env;
            sub.let = &merged;
            sub.depth++;
            if (rc == 0)
                rc = sbl_agg_run(&sub, fns, &pipeline, 0, &matched, err);
            bson_destroy(&vars);
            bson_destroy(&merged);
        }
        if (rc == 0) {
            bson_t arr = BSON_INITIALIZER, *out = bson_new();
            char kb[16];
            for (size_t i = 0; i < matched.n; i++)
                bson_append_document(&arr, sbl_array_key((uint32_t)i, kb), -1, matched.v[i]);
            bson_value_t av;
            av.value_type = BSON_TYPE_ARRAY;
            av.value.v_doc.data = (uint8_t *)bson_get_data(&arr);
            av.value.v_doc.data_len = arr.len;
            sbl_agg_set_path(dv->v[d], as, &av, out);
            bson_destroy(&arr);
            if (out->len > SBL_BSON_MAX_SIZE) {
                rc = sbl_err_set(err, SBL_E_BSONObjectTooLarge,
                                 "Total size of documents in %s matching pipeline's $lookup "
                                 "stage exceeds 16793600 bytes",
                                 fns);
                bson_destroy(out);
            } else {
                bson_destroy(dv->v[d]);
                dv->v[d] = out;
            }
        }
        sbl_docvec_clear(&matched);
        if (rc == 0 && (d & 255) == 255)
            rc = sbl_op_check_interrupt(env->ctx, err);
    }
    free(mark);
    free_fkeys(fkeys, nfk);
    sbl_docvec_clear(&foreign_docs);
    for (size_t i = 0; i < nlet; i++)
        sbl_expr_free(let_e[i]);
    free(let_e);
    free(let_n);
    return rc;
}

/* ---- $facet ----------------------------------------------------------------------------- */

int sbl_agg_facet(sbl_agg_env_t *env, const char *ns, sbl_docvec_t *dv, const bson_t *spec,
                  sbl_err_t *err)
{
    bson_iter_t it, st, f;
    bson_t *out = bson_new();
    int rc = 0;
    size_t bytes = 0;
    if (bson_empty(spec))
        rc = sbl_err_set(err, 40169, "the $facet specification must be a non-empty object");
    bson_iter_init(&it, spec);
    while (rc == 0 && bson_iter_next(&it)) {
        const char *name = bson_iter_key(&it);
        bson_t pipeline;
        size_t n;
        if (!BSON_ITER_HOLDS_ARRAY(&it)) {
            rc = sbl_err_set(err, 40170, "arguments to $facet must be arrays, %s is type %s",
                             name, sbl_type_name(bson_iter_type(&it)));
            break;
        }
        sbl_agg_sub_doc(&it, &pipeline);
        if ((rc = sbl_agg_check_pipeline(&pipeline, &n, err)) != 0)
            break;
        bson_iter_init(&st, &pipeline);
        while (rc == 0 && bson_iter_next(&st)) {
            bson_iter_recurse(&st, &f);
            bson_iter_next(&f);
            const char *sn = bson_iter_key(&f);
            if (strcmp(sn, "$out") == 0 || strcmp(sn, "$merge") == 0 ||
                strcmp(sn, "$facet") == 0 || strcmp(sn, "$collStats") == 0 ||
                strcmp(sn, "$documents") == 0 || strcmp(sn, "$indexStats") == 0)
                rc = sbl_err_set(err, 40600, "%s is not allowed to be used within a $facet stage",
                                 sn);
        }
        if (rc != 0)
            break;
        sbl_docvec_t sub = {0};
        sbl_agg_env_t senv = *env;
        senv.depth++;
        copy_docs(dv, &sub);
        rc = sbl_agg_run(&senv, ns, &pipeline, 0, &sub, err);
        if (rc == 0) {
            bson_t arr;
            char kb[16];
            bson_append_array_begin(out, name, -1, &arr);
            for (size_t i = 0; i < sub.n; i++) {
                bson_append_document(&arr, sbl_array_key((uint32_t)i, kb), -1, sub.v[i]);
                bytes += sub.v[i]->len;
            }
            bson_append_array_end(out, &arr);
        }
        sbl_docvec_clear(&sub);
        if (rc == 0 && out->len > SBL_BSON_MAX_SIZE)
            rc = sbl_err_set(err, SBL_E_BSONObjectTooLarge,
                             "document constructed by $facet is %u bytes, which exceeds the "
                             "limit of 16777216 bytes",
                             out->len);
    }
    if (rc == 0 && bytes > sbl_mem_limit(SBL_LIM_FACET)) /* $facet cannot spill (as MongoDB) */
        rc = sbl_err_set(err, 4031700, "document constructed by $facet is %zu bytes, which "
                                       "exceeds the limit of %zu bytes",
                         bytes, sbl_mem_limit(SBL_LIM_FACET));
    if (rc != 0) {
        bson_destroy(out);
        return rc;
    }
    sbl_docvec_clear(dv);
    sbl_docvec_push(dv, out);
    return 0;
}

/* ---- $bucket ------------------------------------------------------------------------------ */

typedef struct bucket_spec {
    bson_value_t group_by, dflt; /* views into the spec; dflt EOD when none */
    bson_value_t *bounds;        /* views, owned array */
    size_t nb;
    bson_t output;
    bool has_output;
} bucket_spec_t;

/* Parse and check a $bucket spec as mongod does (boundaries compared under
 * coll).  On success the caller frees b->bounds. */
static int bucket_parse(const bson_t *spec, const sbl_collation_t *coll, bucket_spec_t *b,
                        sbl_err_t *err)
{
    bson_iter_t it;
    bson_value_t *bounds = NULL;
    size_t nb = 0;
    int rc = 0;

    memset(b, 0, sizeof(*b));
    b->group_by.value_type = BSON_TYPE_EOD;
    b->dflt.value_type = BSON_TYPE_EOD;
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "groupBy") == 0) {
            sbl_iter_value(&it, &b->group_by);
            if (!(BSON_ITER_HOLDS_UTF8(&it) && bson_iter_utf8(&it, NULL)[0] == '$') &&
                !BSON_ITER_HOLDS_DOCUMENT(&it)) {
                free(bounds);
                return sbl_err_set(err, 40202,
                                   "The $bucket 'groupBy' field must be defined as a $-prefixed "
                                   "path or an expression, but found: %s",
                                   sbl_type_name(bson_iter_type(&it)));
            }
        } else if (strcmp(k, "boundaries") == 0) {
            bson_iter_t bi;
            if (!BSON_ITER_HOLDS_ARRAY(&it)) {
                free(bounds);
                return sbl_err_set(err, 40200, "The $bucket 'boundaries' field must be an array, "
                                               "but found type: %s",
                                   sbl_type_name(bson_iter_type(&it)));
            }
            nb = 0;
            bson_iter_recurse(&it, &bi);
            while (bson_iter_next(&bi))
                nb++;
            free(bounds); /* a repeated 'boundaries': the last one counts */
            bounds = calloc(nb + 1, sizeof(*bounds));
            nb = 0;
            bson_iter_recurse(&it, &bi);
            while (bson_iter_next(&bi))
                sbl_iter_value(&bi, &bounds[nb++]);
        } else if (strcmp(k, "default") == 0) {
            sbl_iter_value(&it, &b->dflt);
        } else if (strcmp(k, "output") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
                free(bounds);
                return sbl_err_set(err, 40196, "The $bucket 'output' field must be an object, "
                                               "but found type: %s",
                                   sbl_type_name(bson_iter_type(&it)));
            }
            b->has_output = sbl_agg_sub_doc(&it, &b->output);
        } else {
            free(bounds);
            return sbl_err_set(err, 40197, "Unrecognized option to $bucket: %s.", k);
        }
    }
    if (b->group_by.value_type == BSON_TYPE_EOD || bounds == NULL) {
        free(bounds);
        return sbl_err_set(err, 40198,
                           "$bucket requires 'groupBy' and 'boundaries' to be specified.");
    }
    if (nb < 2)
        rc = sbl_err_set(err, 40192, "The $bucket 'boundaries' field must have at least 2 "
                                     "values, but found %zu value(s).",
                         nb);
    for (size_t i = 1; rc == 0 && i < nb; i++) {
        if (sbl_type_rank(bounds[i].value_type) != sbl_type_rank(bounds[0].value_type))
            rc = sbl_err_set(err, 40193, "All values in the the 'boundaries' option to $bucket "
                                         "must have the same type.");
        else if (sbl_value_compare_coll(&bounds[i - 1], &bounds[i], coll) >= 0)
            rc = sbl_err_set(err, 40194, "The 'boundaries' option to $bucket must be sorted in "
                                         "ascending order");
    }
    const bson_value_t *dflt = &b->dflt;
    if (rc == 0 && dflt->value_type != BSON_TYPE_EOD &&
        sbl_type_rank(dflt->value_type) == sbl_type_rank(bounds[0].value_type) &&
        sbl_value_compare_coll(dflt, &bounds[0], coll) >= 0 &&
        sbl_value_compare_coll(dflt, &bounds[nb - 1], coll) < 0)
        rc = sbl_err_set(err, 40199, "The $bucket 'default' field must be less than the lowest "
                                     "boundary or greater than or equal to the highest "
                                     "boundary.");
    if (rc != 0) {
        free(bounds);
        return rc;
    }
    b->bounds = bounds;
    b->nb = nb;
    return 0;
}

/* {$literal: v} as key of d. */
static void append_literal(bson_t *d, const char *key, const bson_value_t *v)
{
    bson_t lit;
    BSON_APPEND_DOCUMENT_BEGIN(d, key, &lit);
    sbl_append_value(&lit, "$literal", -1, v);
    bson_append_document_end(d, &lit);
}

int sbl_agg_bucket_group(const bson_t *spec, const sbl_collation_t *coll, bson_t *group,
                         sbl_err_t *err)
{
    bucket_spec_t b;
    bson_t id, sw, branches, br, cond, and, cmp, args;
    char kb[16];
    bson_init(group);
    SBL_RET(bucket_parse(spec, coll, &b, err));
    BSON_APPEND_DOCUMENT_BEGIN(group, "_id", &id);
    BSON_APPEND_DOCUMENT_BEGIN(&id, "$switch", &sw);
    BSON_APPEND_ARRAY_BEGIN(&sw, "branches", &branches);
    for (size_t i = 0; i + 1 < b.nb; i++) { /* [bounds[i], bounds[i+1]) gives bounds[i] */
        BSON_APPEND_DOCUMENT_BEGIN(&branches, sbl_array_key((uint32_t)i, kb), &br);
        BSON_APPEND_DOCUMENT_BEGIN(&br, "case", &cond);
        BSON_APPEND_ARRAY_BEGIN(&cond, "$and", &and);
        for (int side = 0; side < 2; side++) {
            BSON_APPEND_DOCUMENT_BEGIN(&and, side == 0 ? "0" : "1", &cmp);
            BSON_APPEND_ARRAY_BEGIN(&cmp, side == 0 ? "$gte" : "$lt", &args);
            sbl_append_value(&args, "0", 1, &b.group_by);
            append_literal(&args, "1", &b.bounds[i + side]);
            bson_append_array_end(&cmp, &args);
            bson_append_document_end(&and, &cmp);
        }
        bson_append_array_end(&cond, &and);
        bson_append_document_end(&br, &cond);
        append_literal(&br, "then", &b.bounds[i]);
        bson_append_document_end(&branches, &br);
    }
    bson_append_array_end(&sw, &branches);
    if (b.dflt.value_type != BSON_TYPE_EOD) /* none: $switch's 40066, as the stage's */
        append_literal(&sw, "default", &b.dflt);
    bson_append_document_end(&id, &sw);
    bson_append_document_end(group, &id);
    if (b.has_output)
        bson_concat(group, &b.output);
    else
        BCON_APPEND(group, "count", "{", "$sum", BCON_INT32(1), "}");
    free(b.bounds);
    return 0;
}

int sbl_agg_bucket(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec, sbl_err_t *err)
{
    bucket_spec_t b;
    int rc = 0;
    SBL_RET(bucket_parse(spec, env->coll, &b, err));
    bson_value_t *bounds = b.bounds, dflt = b.dflt, group_by = b.group_by;
    size_t nb = b.nb;
    bson_t output = b.output;
    bool has_output = b.has_output;
    sbl_expr_t *e = NULL;
    if (rc == 0)
        rc = sbl_expr_parse(&group_by, &e, err);
    bson_value_t *ids = calloc(dv->n + 1, sizeof(*ids));
    size_t nids = 0;
    for (size_t d = 0; d < dv->n && rc == 0; d++) {
        bson_value_t v;
        if ((rc = sbl_agg_eval(env, e, dv->v[d], &v, err)) != 0)
            break;
        if (v.value_type == BSON_TYPE_EOD)
            v.value_type = BSON_TYPE_NULL;
        size_t i = nb;
        if (sbl_type_rank(v.value_type) == sbl_type_rank(bounds[0].value_type))
            for (i = 0; i + 1 < nb; i++)
                if (sbl_value_compare_coll(&bounds[i], &v, env->coll) <= 0 &&
                    sbl_value_compare_coll(&v, &bounds[i + 1], env->coll) < 0)
                    break;
        if (i + 1 >= nb) {
            if (dflt.value_type == BSON_TYPE_EOD) {
                bson_value_destroy(&v);
                rc = sbl_err_set(err, 40066, "$switch could not find a matching branch for an "
                                             "input, and no default was specified.");
                break;
            }
            bson_value_copy(&dflt, &ids[nids++]);
        } else {
            bson_value_copy(&bounds[i], &ids[nids++]);
        }
        bson_value_destroy(&v);
    }
    if (rc == 0) {
        bson_t count_spec = BSON_INITIALIZER;
        if (!has_output)
            BCON_APPEND(&count_spec, "count", "{", "$sum", BCON_INT32(1), "}");
        rc = sbl_agg_group(dv, has_output ? &output : &count_spec, env, ids, err);
        bson_destroy(&count_spec);
    }
    if (rc == 0) { /* MongoDB's $bucket is a $group then a $sort on _id (under the collation) */
        bson_t by_id = BSON_INITIALIZER;
        BSON_APPEND_INT32(&by_id, "_id", 1);
        rc = sbl_agg_sort(env, dv, &by_id, 0, err);
        bson_destroy(&by_id);
    }
    for (size_t i = 0; i < nids; i++)
        bson_value_destroy(&ids[i]);
    free(ids);
    free(bounds);
    sbl_expr_free(e);
    return rc;
}

/* ---- $sortByCount -------------------------------------------------------------------------- */

int sbl_agg_sort_by_count_group(const bson_value_t *expr, bson_t *group, sbl_err_t *err)
{
    bson_init(group);
    if (!(expr->value_type == BSON_TYPE_UTF8 && expr->value.v_utf8.str[0] == '$') &&
        expr->value_type != BSON_TYPE_DOCUMENT)
        return sbl_err_set(err, 40148, "the sortByCount field must be defined as a $-prefixed "
                                       "path or an expression");
    sbl_append_value(group, "_id", 3, expr);
    BCON_APPEND(group, "count", "{", "$sum", BCON_INT32(1), "}");
    return 0;
}

int sbl_agg_sort_by_count(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_value_t *expr,
                          sbl_err_t *err)
{
    bson_t spec;
    if (sbl_agg_sort_by_count_group(expr, &spec, err) != 0) {
        bson_destroy(&spec);
        return err->code;
    }
    int rc = sbl_agg_group(dv, &spec, env, NULL, err);
    bson_destroy(&spec);
    if (rc != 0)
        return rc;
    /* a $group then a stable $sort {count: -1}: equal counts keep first-seen order */
    bson_t by_count = BSON_INITIALIZER;
    BSON_APPEND_INT32(&by_count, "count", -1);
    rc = sbl_agg_sort(env, dv, &by_count, 0, err);
    bson_destroy(&by_count);
    return rc;
}

/* ---- $sample ------------------------------------------------------------------------------ */

int sbl_agg_sample(sbl_docvec_t *dv, const bson_iter_t *it, sbl_err_t *err)
{
    bson_iter_t f;
    int64_t size = -1;
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return sbl_err_set(err, 28745, "the $sample stage specification must be an object");
    bson_iter_recurse(it, &f);
    while (bson_iter_next(&f)) {
        if (strcmp(bson_iter_key(&f), "size") != 0)
            return sbl_err_set(err, 28748, "unrecognized option to $sample: %s",
                               bson_iter_key(&f));
        if (!BSON_ITER_HOLDS_NUMBER(&f))
            return sbl_err_set(err, 28746, "size argument to $sample must be a number");
        size = bson_iter_as_int64(&f);
        if (size < 0)
            return sbl_err_set(err, 28747, "size argument to $sample must not be negative");
    }
    if (size < 0)
        return sbl_err_set(err, 28749, "$sample stage must specify a size");
    /* partial Fisher-Yates: the first `size` slots get a uniform sample */
    size_t k = (size_t)size < dv->n ? (size_t)size : dv->n;
    for (size_t i = 0; i < k; i++) {
        size_t j = i + (size_t)(random() % (long)(dv->n - i));
        bson_t *t = dv->v[i];
        dv->v[i] = dv->v[j];
        dv->v[j] = t;
    }
    for (size_t i = k; i < dv->n; i++)
        bson_destroy(dv->v[i]);
    dv->n = k;
    return 0;
}

/* ---- $documents ---------------------------------------------------------------------------- */

int sbl_agg_documents(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it,
                      sbl_err_t *err)
{
    bson_value_t spec, v;
    sbl_expr_t *e = NULL;
    sbl_iter_value(it, &spec);
    SBL_RET(sbl_expr_parse(&spec, &e, err));
    int rc = sbl_agg_eval(env, e, NULL, &v, err);
    sbl_expr_free(e);
    SBL_RET(rc);
    if (v.value_type != BSON_TYPE_ARRAY) {
        bson_value_destroy(&v);
        return sbl_err_set(err, 5858203, "error during $documents evaluation: value must be an "
                                         "array of objects");
    }
    bson_t arr;
    bson_iter_t el;
    bson_init_static(&arr, v.value.v_doc.data, v.value.v_doc.data_len);
    bson_iter_init(&el, &arr);
    sbl_docvec_clear(dv);
    while (rc == 0 && bson_iter_next(&el)) {
        bson_t d;
        if (!BSON_ITER_HOLDS_DOCUMENT(&el)) {
            rc = sbl_err_set(err, 5858203, "error during $documents evaluation: value must be an "
                                           "array of objects");
            break;
        }
        sbl_agg_sub_doc(&el, &d);
        sbl_docvec_push(dv, bson_copy(&d));
    }
    bson_value_destroy(&v);
    return rc;
}

/* ---- $listLocalSessions and $listSessions ------------------------------------------------ */

/* The uids whose sessions a listing shows: {allUsers: true} every user's
 * (*allp), {users: [{user, db}...]} theirs, {} the caller's own. */
typedef struct session_filter {
    bool all;
    uint8_t (*uids)[32];
    size_t n;
} session_filter_t;

static int session_filter(const sbl_agg_env_t *env, const char *stage, const bson_iter_t *it,
                          session_filter_t *f, sbl_err_t *err)
{
    bson_iter_t o, u, p;
    memset(f, 0, sizeof(*f));
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "%s options must be specified in an object",
                           stage);
    bool has_users = false;
    bson_iter_recurse(it, &o);
    while (bson_iter_next(&o)) {
        const char *k = bson_iter_key(&o);
        if (strcmp(k, "allUsers") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&o))
                return sbl_type_error(err, "allUsers", &o, "bool");
            f->all = bson_iter_bool(&o);
        } else if (strcmp(k, "users") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&o))
                return sbl_type_error(err, "users", &o, "array");
            has_users = true;
            bson_iter_recurse(&o, &u);
            while (bson_iter_next(&u)) {
                const char *user = NULL, *db = NULL;
                if (!BSON_ITER_HOLDS_DOCUMENT(&u))
                    return sbl_type_error(err, "users", &u, "object");
                bson_iter_recurse(&u, &p);
                while (bson_iter_next(&p)) {
                    if (strcmp(bson_iter_key(&p), "user") == 0 && BSON_ITER_HOLDS_UTF8(&p))
                        user = bson_iter_utf8(&p, NULL);
                    else if (strcmp(bson_iter_key(&p), "db") == 0 && BSON_ITER_HOLDS_UTF8(&p))
                        db = bson_iter_utf8(&p, NULL);
                }
                if (user == NULL || db == NULL)
                    return sbl_err_set(err, SBL_E_MissingField,
                                       "BSON field 'ListSessionsUser.%s' is missing but a "
                                       "required field", user == NULL ? "user" : "db");
                uint8_t (*nu)[32] = realloc(f->uids, (f->n + 1) * sizeof(*nu));
                if (nu == NULL)
                    return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
                f->uids = nu;
                sbl_lsid_uid(user, db, f->uids[f->n++]);
            }
        } else {
            return sbl_err_set(err, SBL_E_UnknownField, "BSON field '%s.%s' is an unknown field.",
                               stage + 1, k);
        }
    }
    if (f->all && has_users) {
        free(f->uids);
        f->uids = NULL;
        return sbl_err_set(err, SBL_E_BadValue, "The allUsers and users fields of %s may not "
                           "be given together", stage);
    }
    if (!f->all && !has_users) { /* the caller's own sessions */
        f->uids = malloc(sizeof(*f->uids));
        if (f->uids == NULL)
            return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
        memcpy(f->uids[0], env->ctx->user_uid, 32);
        f->n = 1;
    }
    return 0;
}

static bool filter_keeps(const session_filter_t *f, const uint8_t uid[32])
{
    if (f->all)
        return true;
    for (size_t i = 0; i < f->n; i++)
        if (memcmp(f->uids[i], uid, 32) == 0)
            return true;
    return false;
}

typedef struct local_walk {
    const session_filter_t *f;
    sbl_docvec_t *dv;
} local_walk_t;

static bool list_local_visit(const sbl_lsess_info_t *s, void *arg)
{
    local_walk_t *w = arg;
    if (!filter_keeps(w->f, s->lsid.uid))
        return true;
    bson_t *d = bson_new(), user;
    sbl_lsid_append(d, "_id", &s->lsid);
    BSON_APPEND_DATE_TIME(d, "lastUse", s->last_use_ms);
    if (s->user[0] != '\0') {
        BSON_APPEND_DOCUMENT_BEGIN(d, "user", &user);
        BSON_APPEND_UTF8(&user, "name", s->user);
        bson_append_document_end(d, &user);
    }
    sbl_docvec_push(w->dv, d);
    return true;
}

int sbl_agg_list_local_sessions(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it,
                                sbl_err_t *err)
{
    session_filter_t f;
    SBL_RET(session_filter(env, "$listLocalSessions", it, &f, err));
    sbl_docvec_clear(dv);
    local_walk_t w = {&f, dv};
    sbl_lsess_foreach(list_local_visit, &w);
    free(f.uids);
    return 0;
}

int sbl_agg_list_sessions(sbl_agg_env_t *env, const char *ns, sbl_docvec_t *dv,
                          const bson_iter_t *it, sbl_err_t *err)
{
    session_filter_t f;
    if (strcmp(ns, "config.system.sessions") != 0)
        return sbl_err_set(err, SBL_E_InvalidNamespace,
                           "$listSessions may only be run against config.system.sessions");
    SBL_RET(session_filter(env, "$listSessions", it, &f, err));
    size_t kept = 0;
    for (size_t i = 0; i < dv->n; i++) { /* the records of config.system.sessions */
        bson_iter_t u;
        bson_subtype_t st;
        uint32_t len = 0;
        const uint8_t *data = NULL;
        if (bson_iter_init_find(&u, dv->v[i], "_id") && BSON_ITER_HOLDS_DOCUMENT(&u) &&
            bson_iter_recurse(&u, &u) && bson_iter_find(&u, "uid") && BSON_ITER_HOLDS_BINARY(&u))
            bson_iter_binary(&u, &st, &len, &data);
        if (len == 32 && filter_keeps(&f, data))
            dv->v[kept++] = dv->v[i];
        else
            bson_destroy(dv->v[i]);
    }
    dv->n = kept;
    free(f.uids);
    return 0;
}
