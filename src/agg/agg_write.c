/*
 * agg_write.c: the stages that write another collection, $out and $merge
 * (split from stages.c).
 *
 * What must stay true: $out writes into a temporary collection and renames
 * it over the target only once everything was written, so a failed $out
 * leaves the target as it was; $merge writes each document in its own
 * transaction, and a whenMatched pipeline is applied as mongod's pipeline
 * update ($$new or the stage's let; whenNotMatched insert inserts the source
 * document, as mongod's upsertSupplied).
 */
#include "agg/agg.h"
#include "agg/agg_int.h"
#include "doc/doc.h"
#include "expr/expr.h"
#include "repl/repl.h"
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writing: $out and $merge ------------------------------------------------------------- */

/* Run one write in its own transaction, retrying WriteConflict. */
static int write_one(sbl_opctx_t *ctx, sbl_coll_t *c, sbl_write_kind_t kind, const bson_t *old,
                     const bson_t *doc, sbl_err_t *err)
{
    for (int attempt = 0;; attempt++) {
        SBL_RET(sbl_op_backoff(ctx, &attempt, err));
        SBL_RET(sbl_txn_begin(ctx->ss, err));
        int rc = sbl_write(ctx->ss, c, kind, old, doc, NULL, err);
        if (rc == 0)
            rc = sbl_txn_commit(ctx->ss, err);
        if (rc != 0)
            sbl_txn_abort(ctx->ss);
        if (rc == 0)
            ctx->wrote = true;
        if (rc != SBL_E_WriteConflict || attempt >= SBL_WRITE_RETRIES)
            return rc;
    }
}

int sbl_agg_out(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it, sbl_err_t *err)
{
    char ns[SBL_NS_MAX], tmp[SBL_NS_MAX];
    sbl_coll_t *c = NULL;
    int rc;
    SBL_RET(sbl_agg_target_ns(env, it, "$out", ns, sizeof(ns), err));
    if (strstr(ns, ".system.") != NULL)
        return sbl_err_set(err, 17385, "Can't $out to special collection: %s", strchr(ns, '.') + 1);
    const char *dot = strchr(ns, '.');
    snprintf(tmp, sizeof(tmp), "%.*s.tmp.agg_out.%08lx%08lx", (int)(dot - ns), ns,
             (unsigned long)random(), (unsigned long)random());
    bool created = false;
    SBL_RET(sbl_coll_open(env->ctx->ss, tmp, true, &c, &created, err));
    if (created)
        sbl_op_coll_created(env->ctx, tmp);
    rc = 0;
    for (size_t i = 0; i < dv->n && rc == 0; i++) {
        bson_t doc;
        if ((rc = sbl_doc_prepare_insert(dv->v[i], &doc, err)) != 0)
            break;
        rc = write_one(env->ctx, c, SBL_WRITE_INSERT, NULL, &doc, err);
        bson_destroy(&doc);
    }
    sbl_err_t e2 = {0};
    uint8_t dropped[16];
    bool replaces = rc == 0 && sbl_repl_uuid_of(env->ctx->ss, ns, dropped);
    if (rc == 0 && (rc = sbl_coll_rename(env->ctx->ss, tmp, ns, true, err)) == 0)
        sbl_repl_log_rename(env->ctx->ss, tmp, ns, sbl_coll_uuid(c), replaces ? dropped : NULL);
    if (rc != 0 && sbl_coll_drop(env->ctx->ss, tmp, &e2) == 0)
        sbl_repl_log_drop(env->ctx->ss, tmp, sbl_coll_uuid(c), 0);
    else if (rc == 0)
        env->ctx->wrote = true;
    sbl_coll_release(c);
    sbl_docvec_clear(dv);
    return rc;
}

typedef enum { WM_MERGE, WM_REPLACE, WM_KEEP, WM_FAIL, WM_PIPELINE } when_matched_t;
typedef enum { WNM_INSERT, WNM_DISCARD, WNM_FAIL } when_not_matched_t;

/* Top-level merge of `in` over `base` into out (initialised here). */
static void merge_top(const bson_t *base, const bson_t *in, bson_t *out)
{
    bson_iter_t it;
    bson_init(out);
    bson_iter_init(&it, base);
    while (bson_iter_next(&it)) {
        bson_iter_t f;
        if (bson_iter_init_find(&f, in, bson_iter_key(&it)))
            sbl_append_iter(out, bson_iter_key(&it), -1, &f);
        else
            sbl_append_iter(out, bson_iter_key(&it), -1, &it);
    }
    bson_iter_init(&it, in);
    while (bson_iter_next(&it))
        if (!bson_has_field(base, bson_iter_key(&it)))
            sbl_append_iter(out, bson_iter_key(&it), -1, &it);
}

/* The variables of a $merge whenMatched pipeline for source document src
 * into out (initialised here on success): let_spec's (NULL: {new: src})
 * evaluated over src, with new (src) added for whenNotMatched "insert"
 * (insert; mongod's), over the command's (cmd_let, NULL: none). */
int sbl_agg_merge_vars(const bson_t *cmd_let, const bson_t *let_spec, bool insert,
                       const bson_t *src, const sbl_agg_env_t *env, bson_t *out, sbl_err_t *err)
{
    bson_t vars = BSON_INITIALIZER, none = BSON_INITIALIZER;
    bson_iter_t li;
    int rc = 0;
    sbl_expr_env_t xe = {.root = src, .let = cmd_let, .now_ms = env != NULL ? env->now_ms : 0};
    if (let_spec == NULL || (insert && !bson_has_field(let_spec, "new")))
        bson_append_document(&vars, "new", 3, src);
    if (let_spec != NULL)
        bson_iter_init(&li, let_spec);
    while (let_spec != NULL && rc == 0 && bson_iter_next(&li)) {
        bson_value_t sv, v;
        sbl_expr_t *e = NULL;
        sbl_iter_value(&li, &sv);
        if ((rc = sbl_expr_parse(&sv, &e, err)) == 0 &&
            (rc = sbl_expr_eval(e, &xe, &v, err)) == 0) {
            if (v.value_type != BSON_TYPE_EOD)
                sbl_append_value(&vars, bson_iter_key(&li), -1, &v);
            bson_value_destroy(&v);
        }
        sbl_expr_free(e);
    }
    if (rc == 0)
        sbl_agg_merge_let(cmd_let != NULL ? cmd_let : &none, &vars, out);
    bson_destroy(&vars);
    return rc;
}

int sbl_agg_merge_check_let(const bson_iter_t *it, bool pipeline, const bson_t *let_spec,
                            sbl_err_t *err)
{
    bson_iter_t f;
    const char *mode = "merge";
    if (let_spec == NULL)
        return 0;
    if (!pipeline) {
        if (bson_iter_recurse(it, &f) && bson_iter_find(&f, "whenMatched") &&
            BSON_ITER_HOLDS_UTF8(&f))
            mode = bson_iter_utf8(&f, NULL);
        return sbl_err_set(err, 51199, "Cannot use 'let' variables with 'whenMatched: %s' mode",
                           mode);
    }
    if (bson_iter_init_find(&f, let_spec, "new") &&
        (!BSON_ITER_HOLDS_UTF8(&f) || strcmp(bson_iter_utf8(&f, NULL), "$$ROOT") != 0))
        return sbl_err_set(err, 51273, "'let' may not define a value for the reserved 'new' "
                           "variable other than '$$ROOT'");
    return 0;
}

/* Find the target document matching doc on the `on` fields. */
static int merge_find(sbl_opctx_t *ctx, const char *ns, char **on, size_t non, const bson_t *doc,
                      bson_t *found, bool *foundp, sbl_err_t *err)
{
    bson_t filter = BSON_INITIALIZER;
    *foundp = false;
    for (size_t i = 0; i < non; i++) {
        bson_iter_t f;
        if (!sbl_path_get(doc, on[i], &f) || BSON_ITER_HOLDS_NULL(&f) ||
            BSON_ITER_HOLDS_UNDEFINED(&f) || BSON_ITER_HOLDS_ARRAY(&f)) {
            bson_destroy(&filter);
            return sbl_err_set(err, 51132, "$merge write error: 'on' field '%s' cannot be "
                                           "missing, null, undefined or an array",
                               on[i]);
        }
        bson_t eq;
        bson_append_document_begin(&filter, on[i], -1, &eq);
        sbl_append_iter(&eq, "$eq", 3, &f);
        bson_append_document_end(&filter, &eq);
    }
    sbl_qexec_t *q = NULL;
    sbl_qexec_opts_t o = {0};
    o.filter = &filter;
    o.limit = 1;
    int rc = sbl_qexec_new(ns, &o, &q, err);
    if (rc == 0) {
        bool done = false;
        rc = sbl_qexec_next(q, ctx, found, NULL, &done, err);
        if (rc == 0 && !done)
            *foundp = true;
    }
    sbl_qexec_free(q);
    bson_destroy(&filter);
    return rc;
}

int sbl_agg_merge(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it, sbl_err_t *err)
{
    char ns[SBL_NS_MAX];
    bson_iter_t f, into;
    bool has_into = false;
    char *on[32];
    size_t non = 0;
    when_matched_t wm = WM_MERGE;
    when_not_matched_t wnm = WNM_INSERT;
    bson_t wm_pipeline, let_spec;
    bool has_let = false;
    int rc = 0;

    if (BSON_ITER_HOLDS_UTF8(it)) {
        into = *it;
        has_into = true;
    } else if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
        return sbl_err_set(err, 51182, "$merge only supports a string or object argument");
    } else {
        bson_iter_recurse(it, &f);
        while (bson_iter_next(&f)) {
            const char *k = bson_iter_key(&f);
            if (strcmp(k, "into") == 0) {
                into = f;
                has_into = true;
            } else if (strcmp(k, "on") == 0) {
                if (BSON_ITER_HOLDS_UTF8(&f)) {
                    on[non++] = (char *)bson_iter_utf8(&f, NULL);
                } else if (BSON_ITER_HOLDS_ARRAY(&f)) {
                    bson_iter_t a;
                    bson_iter_recurse(&f, &a);
                    while (bson_iter_next(&a) && non < 32) {
                        if (!BSON_ITER_HOLDS_UTF8(&a))
                            return sbl_err_set(err, 51134, "$merge 'on' array elements must be "
                                                           "strings");
                        on[non++] = (char *)bson_iter_utf8(&a, NULL);
                    }
                    if (non == 0)
                        return sbl_err_set(err, 51187, "If explicitly specifying $merge 'on', "
                                                       "must include at least one field");
                } else {
                    return sbl_err_set(err, 51186, "$merge 'on' field must be either a string "
                                                   "or an array of strings");
                }
            } else if (strcmp(k, "whenMatched") == 0) {
                if (BSON_ITER_HOLDS_ARRAY(&f)) {
                    wm = WM_PIPELINE;
                    sbl_agg_sub_doc(&f, &wm_pipeline);
                    SBL_RET(sbl_agg_check_update_pipeline(&wm_pipeline, err));
                } else if (BSON_ITER_HOLDS_UTF8(&f)) {
                    const char *m = bson_iter_utf8(&f, NULL);
                    if (strcmp(m, "merge") == 0) wm = WM_MERGE;
                    else if (strcmp(m, "replace") == 0) wm = WM_REPLACE;
                    else if (strcmp(m, "keepExisting") == 0) wm = WM_KEEP;
                    else if (strcmp(m, "fail") == 0) wm = WM_FAIL;
                    else
                        return sbl_err_set(err, SBL_E_BadValue, "Enumeration value '%s' for "
                                                                "field 'whenMatched' is not a "
                                                                "valid value.",
                                           m);
                } else {
                    return sbl_type_error(err, "$merge.whenMatched", &f, "string or array");
                }
            } else if (strcmp(k, "whenNotMatched") == 0) {
                const char *m = BSON_ITER_HOLDS_UTF8(&f) ? bson_iter_utf8(&f, NULL) : "";
                if (strcmp(m, "insert") == 0) wnm = WNM_INSERT;
                else if (strcmp(m, "discard") == 0) wnm = WNM_DISCARD;
                else if (strcmp(m, "fail") == 0) wnm = WNM_FAIL;
                else
                    return sbl_err_set(err, SBL_E_BadValue, "Enumeration value '%s' for field "
                                                            "'whenNotMatched' is not a valid "
                                                            "value.",
                                       m);
            } else if (strcmp(k, "let") == 0 && BSON_ITER_HOLDS_NULL(&f)) {
                continue; /* as if absent (mongod's) */
            } else if (strcmp(k, "let") == 0) {
                if (!BSON_ITER_HOLDS_DOCUMENT(&f))
                    return sbl_type_error(err, "$merge.let", &f, "object");
                has_let = sbl_agg_sub_doc(&f, &let_spec);
            } else {
                return sbl_err_set(err, SBL_E_UnknownField,
                                   "BSON field '$merge.%s' is an unknown field.", k);
            }
        }
    }
    if (!has_into)
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field '$merge.into' is missing but a required field");
    SBL_RET(sbl_agg_merge_check_let(it, wm == WM_PIPELINE, has_let ? &let_spec : NULL, err));
    if (non == 0)
        on[non++] = "_id";
    SBL_RET(sbl_agg_target_ns(env, &into, "$merge", ns, sizeof(ns), err));

    sbl_coll_t *c = NULL;
    bool created = false;
    SBL_RET(sbl_coll_open(env->ctx->ss, ns, true, &c, &created, err));
    if (created)
        sbl_op_coll_created(env->ctx, ns);
    for (size_t i = 0; i < dv->n && rc == 0; i++) {
        bson_t src, existing;
        bool found = false;
        if ((rc = sbl_doc_prepare_insert(dv->v[i], &src, err)) != 0)
            break;
        rc = merge_find(env->ctx, ns, on, non, &src, &existing, &found, err);
        if (rc == 0 && found) {
            bson_t next;
            bool write = true;
            bson_iter_t eid;
            bson_init(&next);
            switch (wm) {
            case WM_KEEP:
                write = false;
                break;
            case WM_FAIL: {
                bson_t kp, kv;
                rc = sbl_err_set(err, SBL_E_DuplicateKey,
                                 "$merge failed due to a DuplicateKey error: E11000 duplicate "
                                 "key error collection: %s",
                                 ns);
                /* keyPattern / keyValue reach the error reply (dispatch.c) */
                bson_append_document_begin(env->ctx->reply, "keyPattern", -1, &kp);
                for (size_t k = 0; k < non; k++)
                    bson_append_int32(&kp, on[k], -1, 1);
                bson_append_document_end(env->ctx->reply, &kp);
                bson_append_document_begin(env->ctx->reply, "keyValue", -1, &kv);
                for (size_t k = 0; k < non; k++) {
                    bson_iter_t fv;
                    if (sbl_path_get(&src, on[k], &fv))
                        sbl_append_iter(&kv, on[k], -1, &fv);
                }
                bson_append_document_end(env->ctx->reply, &kv);
                write = false;
                break;
            }
            case WM_REPLACE: {
                bson_iter_t si;
                bson_iter_init_find(&eid, &existing, "_id");
                sbl_append_iter(&next, "_id", 3, &eid);
                bson_iter_init(&si, &src);
                while (bson_iter_next(&si))
                    if (strcmp(bson_iter_key(&si), "_id") != 0)
                        sbl_append_iter(&next, bson_iter_key(&si), -1, &si);
                break;
            }
            case WM_MERGE: {
                bson_t m, wo_id = BSON_INITIALIZER;
                bson_copy_to_excluding_noinit(&src, &wo_id, "_id", NULL);
                merge_top(&existing, &wo_id, &m);
                bson_destroy(&next);
                bson_copy_to(&m, &next);
                bson_destroy(&m);
                bson_destroy(&wo_id);
                break;
            }
            case WM_PIPELINE: {
                bson_t lv, vars;
                bson_destroy(&next);
                bson_init(&next);
                write = false;
                if ((rc = sbl_agg_merge_vars(env->let, has_let ? &let_spec : NULL,
                                             wnm == WNM_INSERT, &src, env, &vars, err)) != 0)
                    break;
                rc = sbl_agg_update_doc(env->ctx, &wm_pipeline, &vars, &existing, &lv, err);
                bson_destroy(&vars);
                if (rc == 0) {
                    bson_concat(&next, &lv);
                    bson_destroy(&lv);
                    write = true;
                }
                break;
            }
            }
            if (rc == 0 && write) {
                bson_t prepared;
                if ((rc = sbl_doc_prepare_insert(&next, &prepared, err)) == 0) {
                    rc = write_one(env->ctx, c, SBL_WRITE_UPDATE, &existing, &prepared, err);
                    bson_destroy(&prepared);
                }
            }
            bson_destroy(&next);
            bson_destroy(&existing);
        } else if (rc == 0) {
            if (wnm == WNM_INSERT) /* with a pipeline too: mongod's upsertSupplied */
                rc = write_one(env->ctx, c, SBL_WRITE_INSERT, NULL, &src, err);
            else if (wnm == WNM_FAIL)
                rc = sbl_err_set(err, 13113, "$merge could not find a matching document in the "
                                             "target collection for at least one document in "
                                             "the source collection");
        }
        bson_destroy(&src);
    }
    sbl_coll_release(c);
    sbl_docvec_clear(dv);
    return rc;
}
