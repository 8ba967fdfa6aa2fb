/*
 * crud_fam.c: findAndModify (and its lowercase alias): find the first
 * document by query and sort, then update or remove it atomically and
 * return it (before or after), or upsert when nothing matches.
 *
 * What must stay true: the change is made by sbl_crud_modify_one, which
 * re-reads the chosen document and re-checks the query in the write
 * transaction; if a concurrent writer made it stop matching, the command
 * plans again rather than modifying a document that no longer matches.
 */
#include "cmd/crud_int.h"
#include "doc/doc.h"
#include "expr/expr.h"
#include "update/update.h"

#include <string.h>

#define REPLAN_TRIES 20

static const char *const fam_fields[] = {
    "findAndModify", "findandmodify", "query", "sort", "remove", "update", "new", "fields",
    "upsert", "arrayFilters", "bypassDocumentValidation", "hint", "collation", "let", "stmtId",
    "collectionUUID",
    NULL};

typedef struct fam_args {
    bson_t query, sort, fields, update, array_filters;
    bool has_query, has_sort, has_fields, has_update, has_af;
    bool update_is_pipeline, remove, return_new, upsert, has_hint;
    bson_value_t hint;
} fam_args_t;

static bool view(const bson_iter_t *it, bson_t *out)
{
    uint32_t len;
    const uint8_t *data;
    if (BSON_ITER_HOLDS_ARRAY(it))
        bson_iter_array(it, &len, &data);
    else
        bson_iter_document(it, &len, &data);
    return bson_init_static(out, data, len);
}

static int parse_args(const bson_t *cmd, fam_args_t *a, sbl_err_t *err)
{
    static const char *req = "FindAndModifyCommandRequest";
    bson_iter_t it;
    char field[96];

    memset(a, 0, sizeof(*a));
    SBL_RET(sbl_check_fields(cmd, req, fam_fields, err));
    bson_iter_init(&it, cmd);
    bson_iter_next(&it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        sbl_join_dot(field, sizeof(field), req, k);
        if (strcmp(k, "query") == 0 || strcmp(k, "sort") == 0 || strcmp(k, "fields") == 0) {
            if (BSON_ITER_HOLDS_NULL(&it))
                continue;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, field, &it, "object");
            bson_t *dst = k[0] == 'q' ? &a->query : k[0] == 's' ? &a->sort : &a->fields;
            bool *has = k[0] == 'q' ? &a->has_query : k[0] == 's' ? &a->has_sort : &a->has_fields;
            *has = view(&it, dst);
        } else if (strcmp(k, "update") == 0) {
            if (BSON_ITER_HOLDS_NULL(&it))
                continue;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) && !BSON_ITER_HOLDS_ARRAY(&it))
                return sbl_type_error(err, field, &it, "[object, array]");
            a->update_is_pipeline = BSON_ITER_HOLDS_ARRAY(&it);
            a->has_update = view(&it, &a->update);
        } else if (strcmp(k, "arrayFilters") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&it))
                return sbl_type_error(err, field, &it, "array");
            a->has_af = view(&it, &a->array_filters);
        } else if (strcmp(k, "remove") == 0 || strcmp(k, "new") == 0 ||
                   strcmp(k, "upsert") == 0 || strcmp(k, "bypassDocumentValidation") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_NUMBER(&it) &&
                !BSON_ITER_HOLDS_NULL(&it))
                return sbl_type_error(err, field, &it, "bool");
            bool v = !BSON_ITER_HOLDS_NULL(&it) && bson_iter_as_bool(&it);
            if (strcmp(k, "remove") == 0)
                a->remove = v;
            else if (strcmp(k, "new") == 0)
                a->return_new = v;
            else if (strcmp(k, "upsert") == 0)
                a->upsert = v;
        } else if (strcmp(k, "hint") == 0) {
            SBL_RET(sbl_exec_get_hint(&it, &a->hint, &a->has_hint, err));
        }
    }
    if (a->remove && a->has_update)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "Cannot specify both an update and remove=true");
    if (!a->remove && !a->has_update)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "Either an update or remove=true must be specified");
    if (a->remove && a->upsert)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "Cannot specify both upsert=true and remove=true ");
    if (a->remove && a->return_new)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "Cannot specify both new=true and remove=true; 'remove' always "
                           "returns the deleted document");
    if (a->update_is_pipeline && a->has_af)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "arrayFilters may not be specified for pipeline-style updates");
    return 0;
}

/* Append value: doc (projected by proj when given) or null. */
static int append_value(bson_t *reply, const bson_t *doc, const sbl_projection_t *proj,
                        sbl_err_t *err)
{
    if (doc == NULL) {
        bson_append_null(reply, "value", -1);
        return 0;
    }
    if (proj == NULL) {
        bson_append_document(reply, "value", -1, doc);
        return 0;
    }
    bson_t out = BSON_INITIALIZER;
    int rc = sbl_projection_apply(proj, doc, -1, &out, err);
    if (rc == 0)
        bson_append_document(reply, "value", -1, &out);
    bson_destroy(&out);
    return rc;
}

/* The reply of a retried findAndModify, rebuilt from its oplog entry (and
 * the pre-image no-op it points at), as the first execution gave it. */
static int retried_reply(sbl_opctx_t *ctx, const fam_args_t *a, const bson_t *entry,
                         const sbl_projection_t *proj, int32_t sid, sbl_err_t *err)
{
    bson_iter_t it, id;
    bson_t o = BSON_INITIALIZER, pre = BSON_INITIALIZER, value_doc = BSON_INITIALIZER, leo;
    bool has_o = false, has_pre = false;
    char op = 'u';
    int rc;

    if (bson_iter_init_find(&it, entry, "op") && BSON_ITER_HOLDS_UTF8(&it))
        op = bson_iter_utf8(&it, NULL)[0];
    if (bson_iter_init_find(&it, entry, "o") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t v;
        sbl_iter_doc(&it, &v);
        bson_destroy(&o);
        bson_copy_to(&v, &o);
        has_o = true;
    }
    bson_destroy(&pre);
    if ((rc = sbl_retry_image(ctx, entry, &pre, &has_pre, err)) != 0) {
        bson_destroy(&o);
        return rc;
    }
    if (!has_pre)
        bson_init(&pre);
    const bson_t *value = NULL;
    if (op == 'i')
        value = a->return_new && has_o ? &o : NULL;
    else if (op == 'u')
        value = a->return_new ? (has_o ? &o : NULL) : (has_pre ? &pre : NULL);
    else
        value = has_pre ? &pre : NULL;
    if ((rc = append_value(&value_doc, value, proj, err)) == 0) {
        bson_append_document_begin(ctx->reply, "lastErrorObject", -1, &leo);
        bson_append_int32(&leo, "n", -1, 1);
        if (!a->remove)
            bson_append_bool(&leo, "updatedExisting", -1, op == 'u');
        if (op == 'i' && has_o && bson_iter_init_find(&id, &o, "_id"))
            sbl_append_iter(&leo, "upserted", -1, &id);
        bson_append_document_end(ctx->reply, &leo);
        bson_concat(ctx->reply, &value_doc);
        bson_append_int32(ctx->reply, "retriedStmtId", -1, sid);
    }
    bson_destroy(&value_doc);
    bson_destroy(&pre);
    bson_destroy(&o);
    return rc;
}

int sbl_cmd_find_and_modify(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[SBL_NS_MAX];
    fam_args_t a;
    sbl_update_t *u = NULL;
    sbl_projection_t *proj = NULL;
    sbl_coll_t *c = NULL;
    bson_t before, after, upserted_doc;
    bool have_before = false, have_after = false, have_upserted = false, matched = false;
    bool changed = false;
    bson_value_t upserted_id;
    bson_t let_vals = BSON_INITIALIZER, qf = BSON_INITIALIZER, info = BSON_INITIALIZER;
    sbl_crud_update_t cu = {NULL, NULL, &let_vals, false};
    bson_iter_t li;
    int rc = 0;

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    SBL_RET(sbl_validate_user_write_ns(ns, err));
    SBL_RET(parse_args(ctx->cmd, &a, err));
    cu.bypass_validation = bson_iter_init_find(&li, ctx->cmd, "bypassDocumentValidation") &&
                           bson_iter_as_bool(&li);
    if (bson_iter_init_find(&li, ctx->cmd, "let")) {
        uint32_t len;
        const uint8_t *data;
        bson_t spec;
        if (!BSON_ITER_HOLDS_DOCUMENT(&li))
            return sbl_type_error(err, "findAndModify.let", &li, "object");
        bson_iter_document(&li, &len, &data);
        bson_init_static(&spec, data, len);
        bson_destroy(&let_vals);
        if ((rc = sbl_expr_eval_let(&spec, &let_vals, err)) != 0) {
            bson_destroy(&let_vals);
            return rc;
        }
    }
    const sbl_collation_t *coll = NULL;
    if ((rc = sbl_exec_collation(ctx, ns,
                                 bson_iter_init_find(&li, ctx->cmd, "collation") ? &li : NULL,
                                 "findAndModify.collation", &coll, err)) != 0)
        goto err;
    if (a.has_query) {
        bson_destroy(&qf);
        sbl_expr_bind_let(&a.query, &let_vals, &qf);
    }
    if (a.has_update && a.update_is_pipeline) {
        if ((rc = sbl_agg_check_update_pipeline(&a.update, err)) != 0)
            goto err;
        cu.pipeline = &a.update;
    } else if (a.has_update) {
        u = sbl_update_new(&a.update, a.has_af ? &a.array_filters : NULL, err);
        if (u == NULL) {
            rc = err->code ? err->code : sbl_err_set(err, SBL_E_FailedToParse, "bad update");
            goto err;
        }
        if (coll != NULL)
            sbl_update_set_collation(u, coll);
        cu.op = u;
    }
    if (a.has_fields && !bson_empty(&a.fields)) {
        proj = sbl_projection_new_let(&a.fields, &let_vals, err);
        if (proj == NULL) {
            rc = err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "bad fields");
            goto err;
        }
    }

    /* A retryable write: an executed statement answers from its entries. */
    int32_t sid = ctx->retry != NULL ? sbl_retry_stmt_id(ctx->retry, 0) : 0;
    if (ctx->retry != NULL) {
        const bson_t *done = NULL;
        if ((rc = sbl_retry_executed(ctx->retry, sid, &done, err)) != 0)
            goto err;
        if (done != NULL) {
            rc = retried_reply(ctx, &a, done, proj, sid, err);
            goto err;
        }
        if ((rc = sbl_retry_stmt_begin(ctx->retry, sid, a.remove || !a.return_new, err)) != 0)
            goto err;
        sbl_retry_stmt_whole_post(ctx->retry); /* retried_reply's post-image */
    }
    /* A lost race between two upserts of the same document shows as DuplicateKey:
     * plan again, and the document now matches. */
    for (int round = 0; round < 3 && !matched && !have_upserted; round++) {
        sbl_err_t e2 = {0};
        rc = sbl_coll_open(ctx->ss, ns, false, &c, NULL, &e2);
        if (rc != 0 && rc != SBL_E_NamespaceNotFound) {
            *err = e2;
            goto err;
        }
        rc = 0;
        for (int attempt = 0; c != NULL && attempt < REPLAN_TRIES && !matched; attempt++) {
            sbl_qexec_t *q = NULL;
            sbl_qexec_opts_t o = {a.has_query ? &qf : NULL, a.has_sort ? &a.sort : NULL, 0, 1,
                                  coll, false, false};
            bson_t cand;
            bool done = false;
            bson_iter_t idit;

            SBL_ERR(sbl_qexec_new_hinted(ns, &o, a.has_hint ? &a.hint : NULL, &q, err));
            rc = sbl_crud_read_candidate(ctx, q, &cand, &done, err);
            if (rc != 0 || done) {
                sbl_qexec_free(q);
                if (rc != 0)
                    goto err;
                break;
            }
            if (bson_iter_init_find(&idit, &cand, "_id")) {
                bson_value_t id;
                sbl_iter_value(&idit, &id);
                rc = sbl_crud_modify_one(ctx, c, &id, &cand, sbl_qexec_matcher(q),
                                         a.remove ? NULL : &cu, &matched, &changed, &before, &after,
                                         &info, err);
            }
            bson_destroy(&cand);
            sbl_qexec_free(q);
            if (rc != 0)
                goto err;
            have_before = have_after = matched;
        }
        if (c != NULL) {
            sbl_coll_release(c);
            c = NULL;
        }
        if (matched || !a.upsert)
            break;
        bson_reinit(&info);
        rc = sbl_crud_upsert(ctx, ns, a.has_query ? &qf : NULL, &cu, &upserted_doc,
                             &upserted_id, &info, err);
        if (rc == 0)
            have_upserted = true;
        else if (rc != SBL_E_DuplicateKey || round == 2)
            goto err;
    }

    if (ctx->retry != NULL)
        sbl_retry_stmt_end(ctx->retry, (matched && changed) || have_upserted);

    /* Build the reply only once nothing can fail but the projection. */
    bson_t value_doc = BSON_INITIALIZER;
    const bson_t *value = NULL;
    if (have_upserted)
        value = a.return_new ? &upserted_doc : NULL;
    else if (matched)
        value = a.return_new ? &after : &before;
    if ((rc = append_value(&value_doc, value, proj, err)) != 0) {
        bson_destroy(&value_doc);
        goto err;
    }
    bson_t leo;
    bson_append_document_begin(ctx->reply, "lastErrorObject", -1, &leo);
    bson_append_int32(&leo, "n", -1, matched || have_upserted ? 1 : 0);
    if (!a.remove)
        bson_append_bool(&leo, "updatedExisting", -1, matched);
    if (have_upserted)
        sbl_append_value(&leo, "upserted", -1, &upserted_id);
    bson_append_document_end(ctx->reply, &leo);
    bson_concat(ctx->reply, &value_doc);
    bson_destroy(&value_doc);

err:
    if (ctx->retry != NULL)
        sbl_retry_stmt_end(ctx->retry, false); /* no-op when ended above */
    if (have_before)
        bson_destroy(&before);
    if (have_after)
        bson_destroy(&after);
    if (have_upserted) {
        bson_destroy(&upserted_doc);
        bson_value_destroy(&upserted_id);
    }
    if (c != NULL)
        sbl_coll_release(c);
    if (rc != 0)
        bson_concat(ctx->reply, &info); /* errInfo / keyPattern for the error reply */
    bson_destroy(&info);
    sbl_projection_free(proj);
    sbl_update_free(u);
    bson_destroy(&let_vals);
    bson_destroy(&qf);
    return rc;
}
