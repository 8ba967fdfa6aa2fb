/*
 * cluster_params.c: setClusterParameter / getClusterParameter.  As mongod,
 * a cluster parameter is one document {_id: <name>, clusterParameterTime,
 * <its fields>} in config.clusterParameters, written on the primary (so the
 * oplog carries it to every member) and read from there by whoever needs
 * it.  The one parameter is changeStreamOptions: {preAndPostImages:
 * {expireAfterSeconds: <seconds> | "off"}}, which the pre-image remover
 * (src/repl/repl_preimages.c) reads on each member.
 *
 * What must stay true: a value is checked in full before it is stored;
 * without a stored document getClusterParameter reports the default.
 */
#include "cmd/cmd_int.h"
#include "repl/repl.h"

#include <string.h>

#define CS_OPTIONS "changeStreamOptions"

/* Check {preAndPostImages: {expireAfterSeconds: n > 0 | "off"}} and append
 * its stored form (a NumberLong or "off") to out. */
static int check_cs_options(const bson_t *v, bson_t *out, sbl_err_t *err)
{
    bson_iter_t it, f;
    bson_t pp;
    bool has_pp = false;
    bson_iter_init(&it, v);
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "preAndPostImages") != 0)
            return sbl_err_set(err, SBL_E_UnknownField,
                               "BSON field 'changeStreamOptions.%s' is an unknown field.",
                               bson_iter_key(&it));
        if (!BSON_ITER_HOLDS_DOCUMENT(&it))
            return sbl_type_error(err, "changeStreamOptions.preAndPostImages", &it, "object");
        BSON_APPEND_DOCUMENT_BEGIN(out, "preAndPostImages", &pp);
        has_pp = true;
        bson_iter_recurse(&it, &f);
        while (bson_iter_next(&f)) {
            if (strcmp(bson_iter_key(&f), "expireAfterSeconds") != 0) {
                bson_append_document_end(out, &pp);
                return sbl_err_set(err, SBL_E_UnknownField,
                                   "BSON field 'changeStreamOptions.preAndPostImages.%s' is an "
                                   "unknown field.", bson_iter_key(&f));
            }
            if (BSON_ITER_HOLDS_UTF8(&f) && strcmp(bson_iter_utf8(&f, NULL), "off") == 0) {
                BSON_APPEND_UTF8(&pp, "expireAfterSeconds", "off");
            } else if (BSON_ITER_HOLDS_NUMBER(&f) && bson_iter_as_int64(&f) > 0) {
                BSON_APPEND_INT64(&pp, "expireAfterSeconds", bson_iter_as_int64(&f));
            } else {
                bson_append_document_end(out, &pp);
                return sbl_err_set(err, SBL_E_BadValue,
                                   BSON_ITER_HOLDS_NUMBER(&f)
                                       ? "preAndPostImages.expireAfterSeconds must be positive"
                                       : "preAndPostImages.expireAfterSeconds must be a positive "
                                         "number or \"off\"");
            }
        }
        bson_append_document_end(out, &pp);
    }
    if (!has_pp)
        return sbl_err_set(err, SBL_E_BadValue,
                           "changeStreamOptions needs a preAndPostImages field");
    return 0;
}

int sbl_cmd_set_cluster_parameter(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it, p;
    bson_t val;
    if (!bson_iter_init(&it, ctx->cmd) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return sbl_type_error(err, "setClusterParameter.setClusterParameter", &it, "object");
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_IllegalOperation,
                           "setClusterParameter can only run on replica sets and sharded "
                           "clusters");
    bson_iter_recurse(&it, &p);
    if (!bson_iter_next(&p))
        return sbl_err_set(err, SBL_E_BadValue, "setClusterParameter needs a parameter to set");
    if (strcmp(bson_iter_key(&p), CS_OPTIONS) != 0)
        return sbl_err_set(err, SBL_E_NoSuchKey, "Unknown Cluster Parameter %s",
                           bson_iter_key(&p));
    if (!sbl_iter_doc(&p, &val))
        return sbl_type_error(err, "setClusterParameter." CS_OPTIONS, &p, "object");
    if (bson_iter_next(&p))
        return sbl_err_set(err, SBL_E_BadValue, "setClusterParameter sets one parameter at a "
                                                "time");
    SBL_RET(sbl_repl_check_write("config", err));

    /* The stored document replaces the previous one (an upsert by _id). */
    bson_t cmd = BSON_INITIALIZER, ups, u, q, doc, reply = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "update", SBL_CLUSTER_PARAMS_COLL);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &ups);
    BSON_APPEND_DOCUMENT_BEGIN(&ups, "0", &u);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &q);
    BSON_APPEND_UTF8(&q, "_id", CS_OPTIONS);
    bson_append_document_end(&u, &q);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "u", &doc);
    BSON_APPEND_UTF8(&doc, "_id", CS_OPTIONS);
    uint64_t ts = sbl_repl_last_op_ts();
    bson_append_timestamp(&doc, "clusterParameterTime", -1, (uint32_t)(ts >> 32), (uint32_t)ts);
    int rc = check_cs_options(&val, &doc, err);
    bson_append_document_end(&u, &doc);
    BSON_APPEND_BOOL(&u, "upsert", true);
    bson_append_document_end(&ups, &u);
    bson_append_array_end(&cmd, &ups);
    if (rc == 0) {
        sbl_cmd_run("config", &cmd, &reply);
        if (!bson_iter_init_find(&it, &reply, "ok") || bson_iter_as_double(&it) != 1.0 ||
            bson_iter_init_find(&it, &reply, "writeErrors"))
            rc = sbl_err_set(err, SBL_E_InternalError, "could not store the cluster parameter");
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return rc;
}

/* Append name's stored document (or its default) to arr at index i. */
static void append_param(sbl_opctx_t *ctx, const char *name, bson_t *arr, uint32_t i)
{
    char key[16];
    bson_t stored, d, pp;
    bool found = false;
    sbl_coll_t *c = NULL;
    sbl_err_t e;
    bson_value_t id = {.value_type = BSON_TYPE_UTF8};
    id.value.v_utf8.str = (char *)name;
    id.value.v_utf8.len = (uint32_t)strlen(name);
    sbl_err_clear(&e);
    if (sbl_coll_open(ctx->ss, SBL_CLUSTER_PARAMS_NS, false, &c, NULL, &e) == 0) {
        if (sbl_coll_get(ctx->ss, c, &id, &stored, &found, &e) != 0)
            found = false;
        sbl_coll_release(c);
    }
    if (found) {
        bson_append_document(arr, sbl_array_key(i, key), -1, &stored);
        bson_destroy(&stored);
        return;
    }
    bson_append_document_begin(arr, sbl_array_key(i, key), -1, &d);
    BSON_APPEND_UTF8(&d, "_id", name);
    bson_append_timestamp(&d, "clusterParameterTime", -1, 0, 0);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "preAndPostImages", &pp);
    BSON_APPEND_UTF8(&pp, "expireAfterSeconds", "off");
    bson_append_document_end(&d, &pp);
    bson_append_document_end(arr, &d);
}

int sbl_cmd_get_cluster_parameter(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it, a;
    bson_t arr;
    uint32_t n = 0;
    bson_iter_init(&it, ctx->cmd);
    bson_iter_next(&it);
    if (BSON_ITER_HOLDS_ARRAY(&it)) { /* check every name first */
        bson_iter_recurse(&it, &a);
        while (bson_iter_next(&a)) {
            if (!BSON_ITER_HOLDS_UTF8(&a))
                return sbl_type_error(err, "getClusterParameter", &a, "string");
            if (strcmp(bson_iter_utf8(&a, NULL), CS_OPTIONS) != 0)
                return sbl_err_set(err, SBL_E_NoSuchKey, "Unknown Cluster Parameter %s",
                                   bson_iter_utf8(&a, NULL));
            n++;
        }
    } else if (!BSON_ITER_HOLDS_UTF8(&it)) {
        return sbl_type_error(err, "getClusterParameter", &it, "string");
    } else if (strcmp(bson_iter_utf8(&it, NULL), "*") != 0 &&
               strcmp(bson_iter_utf8(&it, NULL), CS_OPTIONS) != 0) {
        return sbl_err_set(err, SBL_E_NoSuchKey, "Unknown Cluster Parameter %s",
                           bson_iter_utf8(&it, NULL));
    } else {
        n = 1;
    }
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "clusterParameters", &arr);
    for (uint32_t i = 0; i < n; i++)
        append_param(ctx, CS_OPTIONS, &arr, i);
    bson_append_array_end(ctx->reply, &arr);
    return 0;
}
