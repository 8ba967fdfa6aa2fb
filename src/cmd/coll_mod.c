/*
 * coll_mod.c: collMod.  Changes a collection's validator, validationLevel,
 * validationAction and changeStreamPreAndPostImages (stored in its catalog
 * options), and one index's hidden, expireAfterSeconds, prepareUnique and
 * unique (the last a conversion: refused with 359 and the conflicting _ids
 * while duplicates exist); a time-series or clustered collection's
 * expireAfterSeconds and a time-series one's granularity (timeseries.c),
 * and a capped collection's cappedSize and cappedMax (capped.c).
 *
 * What must stay true: every change is checked before any is made, so a
 * refused collMod leaves the collection as it was; the new options are
 * durable (catalog transaction) before the reply.
 */
#include "cmd/capped.h"
#include "cmd/cmd_int.h"
#include "cmd/crud_int.h"
#include "cmd/timeseries.h"
#include "doc/doc.h"
#include "repl/repl.h"

#include <stdio.h>
#include <string.h>

static const char *const coll_mod_fields[] = {
    "collMod", "validator", "validationLevel", "validationAction", "index",
    "changeStreamPreAndPostImages", "viewOn", "pipeline", "dryRun", "expireAfterSeconds",
    "timeseries", "cappedSize", "cappedMax", "collectionUUID", NULL};

/* The index the `index` argument names (by name or key pattern), referenced. */
static int find_index(sbl_coll_t *c, const bson_t *arg, const char *ns, sbl_index_t **ixp,
                      sbl_err_t *err)
{
    bson_iter_t it;
    bson_t pattern;
    const char *name = NULL;
    bool by_key = false;
    sbl_index_t **ix;
    size_t n;

    *ixp = NULL;
    if (bson_iter_init_find(&it, arg, "name")) {
        if (!BSON_ITER_HOLDS_UTF8(&it))
            return sbl_type_error(err, "collMod.index.name", &it, "string");
        name = bson_iter_utf8(&it, NULL);
    }
    if (bson_iter_init_find(&it, arg, "keyPattern")) {
        if (!sbl_iter_doc(&it, &pattern))
            return sbl_type_error(err, "collMod.index.keyPattern", &it, "object");
        by_key = true;
    }
    if ((name == NULL) == !by_key)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "Must specify either index name or key pattern.");
    if ((name != NULL && strcmp(name, "_id_") == 0) ||
        (by_key && bson_count_keys(&pattern) == 1 && bson_iter_init_find(&it, &pattern, "_id")))
        return sbl_err_set(err, SBL_E_InvalidOptions, "cannot modify the _id index");
    sbl_index_list(c, false, &ix, &n);
    for (size_t i = 0; i < n && *ixp == NULL; i++) {
        bson_t key;
        if (name != NULL ? strcmp(sbl_index_name(ix[i]), name) == 0
                         : bson_iter_init_find(&it, sbl_index_spec(ix[i]), "key") &&
                               sbl_iter_doc(&it, &key) && sbl_doc_compare(&key, &pattern) == 0) {
            *ixp = ix[i];
            ix[i] = NULL;
        }
    }
    sbl_index_list_free(ix, n);
    if (*ixp != NULL)
        return 0;
    if (name != NULL)
        return sbl_err_set(err, SBL_E_IndexNotFound, "cannot find index %s for ns %s", name, ns);
    char *pj = bson_as_relaxed_extended_json(&pattern, NULL);
    sbl_err_set(err, SBL_E_IndexNotFound, "cannot find index %s for ns %s", pj, ns);
    bson_free(pj);
    return SBL_E_IndexNotFound;
}

/* Append the _id of the document whose _id key is idk to ids (an array). */
static void append_id(sbl_opctx_t *ctx, sbl_coll_t *c, const uint8_t *idk, size_t idlen,
                      bson_t *ids, uint32_t *np)
{
    bson_t doc;
    bool found = false;
    bson_iter_t it;
    char kbuf[16];
    sbl_err_t ignore;
    ctx->docs_examined++;
    if (sbl_coll_get_by_key(ctx->ss, c, idk, idlen, &doc, &found, &ignore) != 0 || !found)
        return;
    if (bson_iter_init_find(&it, &doc, "_id"))
        sbl_append_iter(ids, sbl_array_key((*np)++, kbuf), -1, &it);
    bson_destroy(&doc);
}

/* Append violations: [{ids: [...]}, ...] (documents sharing a key of ix) to
 * out.  Returns the number of groups, or -1 with err set. */
static int64_t find_violations(sbl_opctx_t *ctx, sbl_coll_t *c, sbl_index_t *ix, bson_t *out,
                               sbl_err_t *err)
{
    sbl_iscan_t *scan;
    sbl_buf_t prev, prev_id;
    bson_t arr, ids;
    bool done = false;
    int64_t groups = 0;
    uint32_t nids = 0;
    char kbuf[16];

    if (sbl_iscan_open(ctx->ss, ix, NULL, 0, NULL, 0, false, &scan, err) != 0)
        return -1;
    sbl_buf_init(&prev);
    sbl_buf_init(&prev_id);
    bson_init(&ids);
    bson_append_array_begin(out, "violations", -1, &arr);
    for (;;) {
        const uint8_t *key = NULL, *idk = NULL;
        size_t klen = 0, idlen = 0;
        if (sbl_iscan_next(scan, &key, &klen, &idk, &idlen, &done, err) != 0) {
            groups = -1;
            break;
        }
        size_t plen = done || idlen > klen ? 0 : klen - idlen; /* an entry is key + _id key */
        bool same = !done && nids + prev.len > 0 && prev.len == plen &&
                    memcmp(prev.data, key, plen) == 0;
        if (same) {
            if (nids == 0)
                append_id(ctx, c, prev_id.data, prev_id.len, &ids, &nids);
            append_id(ctx, c, idk, idlen, &ids, &nids);
            continue;
        }
        if (nids > 0) {
            bson_t g;
            bson_append_document_begin(&arr, sbl_array_key((uint32_t)groups++, kbuf), -1, &g);
            bson_append_array(&g, "ids", -1, &ids);
            bson_append_document_end(&arr, &g);
            bson_reinit(&ids);
            nids = 0;
        }
        if (done)
            break;
        sbl_buf_reset(&prev);
        sbl_buf_append(&prev, key, plen);
        sbl_buf_reset(&prev_id);
        sbl_buf_append(&prev_id, idk, idlen);
    }
    sbl_iscan_close(scan);
    sbl_buf_destroy(&prev);
    sbl_buf_destroy(&prev_id);
    bson_destroy(&ids);
    bson_append_array_end(out, &arr);
    return groups;
}

/* Copy spec without the fields named in drop (NULL-terminated). */
static void copy_without(const bson_t *spec, const char *const *drop, bson_t *out)
{
    bson_iter_t it;
    bson_init(out);
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        bool skip = false;
        for (size_t i = 0; drop[i] != NULL && !skip; i++)
            skip = strcmp(bson_iter_key(&it), drop[i]) == 0;
        if (!skip)
            sbl_append_iter(out, bson_iter_key(&it), -1, &it);
    }
}

static bool spec_bool(const bson_t *spec, const char *name)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, spec, name) && bson_iter_as_bool(&it);
}

/* What the oplog says of an index change (mongod's form): logged gets
 * {name, expireAfterSeconds?, hidden?, unique?, prepareUnique?} (the new
 * values), old the previous expireAfterSeconds, hidden and prepareUnique of
 * those given (both initialised by the caller). */
static void log_index_change(const bson_t *arg, const bson_t *old_spec, const char *name,
                             bson_t *logged, bson_t *old)
{
    static const char *const order[] = {"expireAfterSeconds", "hidden", "unique",
                                        "prepareUnique", NULL};
    bson_iter_t it, o;
    BSON_APPEND_UTF8(logged, "name", name);
    for (size_t i = 0; order[i] != NULL; i++) {
        if (!bson_iter_init_find(&it, arg, order[i]))
            continue;
        if (i == 0) {
            BSON_APPEND_INT64(logged, order[i], bson_iter_as_int64(&it));
            if (bson_iter_init_find(&o, old_spec, order[i]))
                BSON_APPEND_INT64(old, order[i], bson_iter_as_int64(&o));
        } else {
            BSON_APPEND_BOOL(logged, order[i], bson_iter_as_bool(&it));
            if (i != 2)
                BSON_APPEND_BOOL(old, order[i], spec_bool(old_spec, order[i]));
        }
    }
}

/* collMod's index: {keyPattern | name, hidden?, expireAfterSeconds?, prepareUnique?, unique?};
 * logged and old as log_index_change fills them. */
static int modify_index(sbl_opctx_t *ctx, sbl_coll_t *c, const char *ns, const bson_t *arg,
                        bson_t *logged, bson_t *old_opts, sbl_err_t *err)
{
    static const char *const changed[] = {"hidden", "expireAfterSeconds", "prepareUnique",
                                          "unique", NULL};
    sbl_index_t *ix = NULL;
    bson_iter_t it;
    bson_t spec;
    int rc;

    bson_iter_init(&it, arg);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "keyPattern") != 0 && strcmp(k, "name") != 0 &&
            strcmp(k, "hidden") != 0 && strcmp(k, "expireAfterSeconds") != 0 &&
            strcmp(k, "prepareUnique") != 0 && strcmp(k, "unique") != 0)
            return sbl_err_set(err, 40415, "BSON field 'collMod.index.%s' is an unknown field.", k);
        if ((strcmp(k, "hidden") == 0 || strcmp(k, "prepareUnique") == 0 ||
             strcmp(k, "unique") == 0) && !BSON_ITER_HOLDS_BOOL(&it)) {
            char field[64];
            snprintf(field, sizeof(field), "collMod.index.%s", k);
            return sbl_type_error(err, field, &it, "bool");
        }
        if (strcmp(k, "expireAfterSeconds") == 0 &&
            (!BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_int64(&it) < 0))
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "TTL index 'expireAfterSeconds' option must be a non-negative "
                               "number");
        if (strcmp(k, "unique") == 0 && !bson_iter_as_bool(&it))
            return sbl_err_set(err, SBL_E_BadValue, "The field 'unique' can only be true.");
    }
    bool has_change = false;
    for (size_t i = 0; changed[i] != NULL; i++)
        has_change |= bson_iter_init_find(&it, arg, changed[i]);
    if (!has_change)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "no expireAfterSeconds, hidden, prepareUnique or unique field");
    SBL_RET(find_index(c, arg, ns, &ix, err));
    const bson_t *old = sbl_index_spec(ix);
    const char *name = sbl_index_name(ix);
    log_index_change(arg, old, name, logged, old_opts);
    bool want_unique = bson_iter_init_find(&it, arg, "unique");
    if (bson_iter_init_find(&it, arg, "expireAfterSeconds") &&
        !bson_iter_init_find(&it, old, "expireAfterSeconds")) {
        rc = sbl_err_set(err, SBL_E_InvalidOptions, "no expireAfterSeconds field to update");
        goto out;
    }
    if (want_unique && !sbl_index_unique(ix) && !spec_bool(old, "prepareUnique") &&
        !(bson_iter_init_find(&it, arg, "prepareUnique") && bson_iter_as_bool(&it))) {
        rc = sbl_err_set(err, SBL_E_InvalidOptions, "Cannot make index unique with 'prepareUnique' "
                         "not set. Run collMod with prepareUnique: true first.");
        goto out;
    }

    /* The new spec: the old one with the given fields replaced. */
    copy_without(old, changed, &spec);
    bson_iter_init(&it, old);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bson_iter_t given;
        if (strcmp(k, "unique") == 0 || strcmp(k, "hidden") == 0 ||
            strcmp(k, "prepareUnique") == 0 || strcmp(k, "expireAfterSeconds") == 0)
            if (!bson_iter_init_find(&given, arg, k))
                sbl_append_iter(&spec, k, -1, &it);
    }
    if (bson_iter_init_find(&it, arg, "expireAfterSeconds")) {
        bson_iter_t o;
        bson_iter_init_find(&o, old, "expireAfterSeconds");
        BSON_APPEND_INT64(ctx->reply, "expireAfterSeconds_old", bson_iter_as_int64(&o));
        BSON_APPEND_INT64(ctx->reply, "expireAfterSeconds_new", bson_iter_as_int64(&it));
        BSON_APPEND_INT32(&spec, "expireAfterSeconds", (int32_t)bson_iter_as_int64(&it));
    }
    if (bson_iter_init_find(&it, arg, "hidden")) {
        bool h = bson_iter_as_bool(&it);
        BSON_APPEND_BOOL(ctx->reply, "hidden_old", spec_bool(old, "hidden"));
        BSON_APPEND_BOOL(ctx->reply, "hidden_new", h);
        if (h)
            BSON_APPEND_BOOL(&spec, "hidden", true);
    }
    if (bson_iter_init_find(&it, arg, "prepareUnique")) {
        bool p = bson_iter_as_bool(&it);
        BSON_APPEND_BOOL(ctx->reply, "prepareUnique_old", spec_bool(old, "prepareUnique"));
        BSON_APPEND_BOOL(ctx->reply, "prepareUnique_new", p);
        if (p && !want_unique && !sbl_index_unique(ix))
            BSON_APPEND_BOOL(&spec, "prepareUnique", true);
    }
    if (!want_unique || sbl_index_unique(ix)) {
        if (sbl_index_unique(ix))
            BSON_APPEND_BOOL(&spec, "unique", true);
        rc = sbl_index_set_spec(ctx->ss, c, name, &spec, err);
        bson_destroy(&spec);
        goto out;
    }

    /* Conversion to unique: refused while documents share a key; else the
     * index is rebuilt in the unique format under the same name. */
    bson_t viol = BSON_INITIALIZER;
    int64_t groups = find_violations(ctx, c, ix, &viol, err);
    if (groups != 0) {
        if (groups > 0) {
            bson_concat(ctx->reply, &viol);
            rc = sbl_err_set(err, SBL_E_CannotConvertIndexToUnique,
                             "Cannot convert the index to unique. Please resolve conflicting "
                             "documents before running collMod again.");
        } else
            rc = err->code;
        bson_destroy(&viol);
        bson_destroy(&spec);
        goto out;
    }
    bson_destroy(&viol);
    BSON_APPEND_BOOL(&spec, "unique", true);
    char name_copy[256];
    snprintf(name_copy, sizeof(name_copy), "%s", name);
    sbl_index_release(ix);
    ix = NULL;
    rc = sbl_index_drop(ctx->ss, c, name_copy, err);
    if (rc == 0)
        rc = sbl_index_create(ctx->ss, c, &spec, err);
    if (rc == 0)
        BSON_APPEND_BOOL(ctx->reply, "unique_new", true);
    bson_destroy(&spec);
out:
    sbl_index_release(ix);
    return rc;
}

/* The oplog entry of a collMod that succeeded: o is the command's own fields
 * (the index one as logged_index), o2 the collection's options before it
 * (with its uuid first) and, for an index change, the index's. */
static void log_coll_mod(sbl_opctx_t *ctx, sbl_coll_t *c, const char *ns, const bson_t *old_opts,
                         const bson_t *logged_index, const bson_t *old_index)
{
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER, prev;
    bson_iter_t it;
    bool first = true;
    bson_iter_init(&it, ctx->cmd);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (first) {
            BSON_APPEND_UTF8(&o, "collMod", strchr(ns, '.') + 1);
            first = false;
        } else if (strcmp(k, "index") == 0 && logged_index != NULL) {
            BSON_APPEND_DOCUMENT(&o, k, logged_index);
        } else if (strcmp(k, "collectionUUID") != 0 && strcmp(k, "dryRun") != 0) {
            for (size_t i = 1; coll_mod_fields[i] != NULL; i++)
                if (strcmp(k, coll_mod_fields[i]) == 0)
                    sbl_append_iter(&o, k, -1, &it);
        }
    }
    BSON_APPEND_DOCUMENT_BEGIN(&o2, "collectionOptions_old", &prev);
    bson_append_binary(&prev, "uuid", -1, BSON_SUBTYPE_UUID, sbl_coll_uuid(c), 16);
    bson_concat(&prev, old_opts);
    bson_append_document_end(&o2, &prev);
    if (logged_index != NULL)
        BSON_APPEND_DOCUMENT(&o2, "indexOptions_old", old_index);
    sbl_repl_log_coll_mod(ctx->ss, ns, sbl_coll_uuid(c), &o, &o2);
    bson_destroy(&o);
    bson_destroy(&o2);
}

int sbl_cmd_coll_mod(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[256];
    bson_iter_t it;
    bson_t opts, index_arg;
    sbl_coll_t *c = NULL;
    bool has_index = false, options_changed = false;
    int rc = 0;
    bson_t logged_index = BSON_INITIALIZER, old_index = BSON_INITIALIZER, *old_opts = NULL;

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    SBL_RET(sbl_validate_user_write_ns(ns, err));
    SBL_RET(sbl_check_fields(ctx->cmd, "collMod", coll_mod_fields, err));
    bson_iter_init(&it, ctx->cmd);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "validator") == 0 && !BSON_ITER_HOLDS_DOCUMENT(&it))
            return sbl_type_error(err, "collMod.validator", &it, "object");
        if ((strcmp(k, "validationLevel") == 0 || strcmp(k, "validationAction") == 0) &&
            !BSON_ITER_HOLDS_UTF8(&it)) {
            char field[64];
            snprintf(field, sizeof(field), "collMod.%s", k);
            return sbl_type_error(err, field, &it, "string");
        }
        if (strcmp(k, "changeStreamPreAndPostImages") == 0 && !BSON_ITER_HOLDS_DOCUMENT(&it))
            return sbl_type_error(err, "collMod.changeStreamPreAndPostImages", &it,
                                       "object");
        if (strcmp(k, "index") == 0) {
            if (!sbl_iter_doc(&it, &index_arg))
                return sbl_type_error(err, "collMod.index", &it, "object");
            has_index = true;
        }
        if (strcmp(k, "viewOn") == 0 || strcmp(k, "pipeline") == 0)
            return sbl_err_set(err, SBL_E_InvalidOptions, "ns %s is a collection, not a view",
                               ns);
    }
    SBL_RET(sbl_coll_open(ctx->ss, ns, false, &c, NULL, err));
    old_opts = bson_copy(sbl_coll_options(c));

    /* The new options: the old ones with the given fields replaced. */
    static const char *const opt_fields[] = {"validator", "validationLevel", "validationAction",
                                             "changeStreamPreAndPostImages", NULL};
    bson_t given = BSON_INITIALIZER;
    for (size_t i = 0; opt_fields[i] != NULL; i++)
        if (bson_iter_init_find(&it, ctx->cmd, opt_fields[i])) {
            sbl_append_iter(&given, opt_fields[i], -1, &it);
            options_changed = true;
        }
    copy_without(sbl_coll_options(c), opt_fields, &opts);
    bson_iter_init(&it, sbl_coll_options(c));
    while (bson_iter_next(&it)) {
        bson_iter_t g;
        for (size_t i = 0; opt_fields[i] != NULL; i++)
            if (strcmp(bson_iter_key(&it), opt_fields[i]) == 0 &&
                !bson_iter_init_find(&g, &given, opt_fields[i]))
                sbl_append_iter(&opts, opt_fields[i], -1, &it);
    }
    bson_concat(&opts, &given);
    bson_destroy(&given);
    /* time-series and clustered collections: expireAfterSeconds, timeseries (timeseries.c) */
    SBL_ERR(sbl_ts_coll_mod(ctx->cmd, &opts, &options_changed, err));
    /* capped collections: cappedSize, cappedMax (capped.c) */
    SBL_ERR(sbl_capped_coll_mod(ctx->cmd, c, &opts, &options_changed, err));
    if (options_changed)
        SBL_ERR(sbl_crud_check_validator(&opts, err));
    if (has_index)
        SBL_ERR(modify_index(ctx, c, ns, &index_arg, &logged_index, &old_index, err));
    if (options_changed)
        SBL_ERR(sbl_coll_set_options(ctx->ss, ns, &opts, err));
    ctx->wrote = true;
    log_coll_mod(ctx, c, ns, old_opts, has_index ? &logged_index : NULL, &old_index);
err:
    bson_destroy(&opts);
    bson_destroy(&logged_index);
    bson_destroy(&old_index);
    if (old_opts != NULL)
        bson_destroy(old_opts);
    sbl_coll_release(c);
    return rc;
}
