/*
 * index_stats.c: the $indexStats stage.  One document per index of the
 * collection (the _id index first, then the others in creation order):
 * {name, key, host, accesses: {ops, since}, spec, building (while it builds)}.
 * The counts are storage's (sbl_index_accesses): the executor counts one per
 * operation whose plan used the index.
 */
#include "agg/agg.h"
#include "doc/doc.h"
#include "server/server.h"

#include <string.h>

static void append_stats(bson_t *d, const char *name, const bson_t *key, const bson_t *spec,
                         int64_t ops, int64_t since, bool building)
{
    bson_t acc;
    BSON_APPEND_UTF8(d, "name", name);
    BSON_APPEND_DOCUMENT(d, "key", key);
    BSON_APPEND_UTF8(d, "host", sbl_server_host());
    BSON_APPEND_DOCUMENT_BEGIN(d, "accesses", &acc);
    BSON_APPEND_INT64(&acc, "ops", ops);
    BSON_APPEND_DATE_TIME(&acc, "since", since);
    bson_append_document_end(d, &acc);
    BSON_APPEND_DOCUMENT(d, "spec", spec);
    if (building)
        BSON_APPEND_BOOL(d, "building", true);
}

int sbl_agg_index_stats(sbl_agg_env_t *env, const char *ns, sbl_docvec_t *dv,
                        const bson_iter_t *it, sbl_err_t *err)
{
    bson_t spec;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !sbl_iter_doc(it, &spec) || !bson_empty(&spec))
        return sbl_err_set(err, 28803, "The $indexStats stage specification must be an empty "
                                       "object");
    sbl_docvec_clear(dv);
    sbl_coll_t *c = NULL;
    sbl_err_t e2 = {0};
    int rc = sbl_coll_open(env->ctx->ss, ns, false, &c, NULL, &e2);
    if (rc == SBL_E_NamespaceNotFound)
        return 0; /* nothing to list, as mongod */
    if (rc != 0) {
        *err = e2;
        return rc;
    }
    int64_t since, ops;
    if (!sbl_coll_dup_ids(c)) { /* a time-series bucket has no _id index */
        bson_t key = BSON_INITIALIZER, idspec = BSON_INITIALIZER, *d = bson_new();
        BSON_APPEND_INT32(&key, "_id", 1);
        BSON_APPEND_INT32(&idspec, "v", 2);
        BSON_APPEND_DOCUMENT(&idspec, "key", &key);
        BSON_APPEND_UTF8(&idspec, "name", "_id_");
        ops = sbl_coll_id_accesses(c, &since);
        append_stats(d, "_id_", &key, &idspec, ops, since, false);
        sbl_docvec_push(dv, d);
        bson_destroy(&key);
        bson_destroy(&idspec);
    }
    sbl_index_t **ix = NULL;
    size_t n = 0;
    sbl_index_list(c, true, &ix, &n);
    for (size_t i = 0; i < n; i++) {
        bson_t key = BSON_INITIALIZER, *d = bson_new();
        bson_iter_t k;
        const bson_t *ispec = sbl_index_spec(ix[i]);
        if (bson_iter_init_find(&k, ispec, "key"))
            sbl_iter_doc(&k, &key);
        ops = sbl_index_accesses(ix[i], &since);
        append_stats(d, sbl_index_name(ix[i]), &key, ispec, ops, since,
                     !sbl_index_is_ready(ix[i]));
        sbl_docvec_push(dv, d);
    }
    sbl_index_list_free(ix, n);
    sbl_coll_release(c);
    return 0;
}
