/*
 * views.c: read-only views in the catalog.  A view is a catalog entry whose
 * options are {viewOn, pipeline} (its table stays empty).  Here: whether a
 * namespace is a view, its source and pipeline, the check of a view's
 * definition, and the namespaces users may write (never a view: 166
 * CommandNotSupportedOnView).  Reads on a view are run by the command layer
 * (src/cmd/view_read.c) as one aggregation over the source.
 *
 * What must stay true: sbl_views_state is never 0 while a view exists (it
 * goes to 1 at the first view and stays there).
 */
#include "agg/agg.h"

#include <stdio.h>
#include <string.h>

atomic_int sbl_views_state = -1;

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

/* ns's source collection (in srcns) and pipeline (into pipe) when ns is a view. */
bool sbl_view_get(sbl_session_t *ss, const char *ns, char *srcns, size_t len, bson_t *pipe)
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
            if (bson_iter_init_find(&it, sbl_coll_options(c), "pipeline") && sbl_iter_array(&it, &p))
                bson_copy_to_excluding_noinit(&p, pipe, "", NULL);
        }
    }
    sbl_coll_release(c);
    return is_view;
}

bool sbl_view_is(sbl_session_t *ss, const char *ns)
{
    return sbl_view_get(ss, ns, NULL, 0, NULL);
}

int sbl_view_options(const bson_t *cmd, bson_t *opts, sbl_err_t *err)
{
    bson_iter_t it, st;
    if (!bson_iter_init_find(&it, cmd, "viewOn"))
        return sbl_err_set(err, SBL_E_BadValue, "'pipeline' requires 'viewOn' to also be specified");
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_type_error(err, "create.viewOn", &it, "string");
    const char *on = bson_iter_utf8(&it, NULL);
    if (on[0] == '\0')
        return sbl_err_set(err, SBL_E_InvalidNamespace, "invalid namespace name for a view: ''");
    BSON_APPEND_UTF8(opts, "viewOn", on);
    bson_t arr;
    BSON_APPEND_ARRAY_BEGIN(opts, "pipeline", &arr);
    if (bson_iter_init_find(&it, cmd, "pipeline")) {
        if (!BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_append_array_end(opts, &arr);
            return sbl_type_error(err, "create.pipeline", &it, "array");
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
            sbl_append_iter(&arr, bson_iter_key(&st), -1, &st);
        }
    }
    bson_append_array_end(opts, &arr);
    return 0;
}

int sbl_validate_user_write_ns(const char *ns, sbl_err_t *err)
{
    static const char *const allowed[] = {"system.js", "system.views", "system.profile",
                                          "system.users", "system.roles", "system.version"};
    const char *coll = strchr(ns, '.');
    if (sbl_views_any() && sbl_view_is(sbl_session_get(), ns))
        return sbl_err_set(err, SBL_E_CommandNotSupportedOnView,
                           "Namespace %s is a view, not a collection", ns);
    if (coll == NULL || strncmp(coll + 1, "system.", 7) != 0)
        return 0;
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        if (strcmp(coll + 1, allowed[i]) == 0)
            return 0;
    if (strcmp(ns, "config.system.sessions") == 0 || /* the logical session records */
        strcmp(ns, "admin.system.keys") == 0) /* the keys signing $clusterTime */
        return 0;
    return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid system namespace: %s", ns);
}

/* ---- reading a collection or a view from a stage ---------------------------------------- */

int sbl_agg_read_ns(sbl_agg_env_t *env, const char *ns, const bson_t *filter,
                    sbl_docvec_t *out, sbl_err_t *err)
{
    char src[SBL_NS_MAX];
    bson_t pipe;
    if (env->remote != NULL) /* the router's merger: the cluster resolves views */
        return env->remote->read(env->remote->arg, ns, filter, out, err);
    if (sbl_views_any() && sbl_view_get(env->ctx->ss, ns, src, sizeof(src), &pipe)) {
        sbl_agg_env_t sub = *env;
        sub.depth++;
        int rc = sbl_agg_read_ns(&sub, src, NULL, out, err);
        if (rc == 0)
            rc = sbl_agg_run(&sub, src, &pipe, 0, out, err);
        bson_destroy(&pipe);
        if (rc == 0 && filter != NULL && !bson_empty(filter)) {
            bson_t m = BSON_INITIALIZER, st;
            BSON_APPEND_DOCUMENT_BEGIN(&m, "0", &st);
            BSON_APPEND_DOCUMENT(&st, "$match", filter);
            bson_append_document_end(&m, &st);
            rc = sbl_agg_run(&sub, src, &m, 0, out, err);
            bson_destroy(&m);
        }
        return rc;
    }
    sbl_qexec_t *q = NULL;
    sbl_qexec_opts_t o = {.filter = filter, .collation = env->coll};
    SBL_RET(sbl_qexec_new(ns, &o, &q, err));
    int rc = 0;
    for (;;) {
        bson_t doc;
        bool done = false;
        if ((rc = sbl_qexec_next(q, env->ctx, &doc, NULL, &done, err)) != 0 || done)
            break;
        sbl_docvec_push(out, bson_copy(&doc));
        bson_destroy(&doc);
    }
    sbl_qexec_free(q);
    return rc;
}
