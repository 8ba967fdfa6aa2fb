/*
 * geo_near.c: the $geoNear stage.  It must come first: the command layer
 * turns it into a near query for the executor ({key: {$nearSphere | $near:
 * near, $minDistance, $maxDistance}} and its `query`), whose results carry
 * their distance and location in hidden fields (SBL_GEO_DIST_FIELD,
 * SBL_GEO_LOC_FIELD); sbl_agg_geonear_finish moves them to distanceField
 * (times distanceMultiplier) and includeLocs.
 */
#include "agg/agg.h"
#include "exec/exec.h"
#include "storage/storage.h"

#include <string.h>

/* The field of ns's one geo index (2dsphere first, then 2d), for a $geoNear without key. */
static int default_key(sbl_opctx_t *ctx, const char *ns, char *out, size_t len, sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    sbl_index_t **ixs = NULL;
    size_t nix = 0, n2ds = 0, n2d = 0;
    char f2ds[256] = "", f2d[256] = "";

    if (sbl_coll_open(ctx->ss, ns, false, &c, NULL, NULL) != 0) {
        sbl_strcpy_n(out, len, "_id"); /* no collection: the near query finds nothing */
        return 0;
    }
    sbl_index_list(c, false, &ixs, &nix);
    for (size_t i = 0; i < nix; i++) {
        size_t f;
        int kind = sbl_index_geo(ixs[i], &f);
        if (kind == SBL_INDEX_2DSPHERE && n2ds++ == 0)
            sbl_strcpy_n(f2ds, sizeof(f2ds), sbl_index_field(ixs[i], f));
        if (kind == SBL_INDEX_2D && n2d++ == 0)
            sbl_strcpy_n(f2d, sizeof(f2d), sbl_index_field(ixs[i], f));
    }
    sbl_index_list_free(ixs, nix);
    sbl_coll_release(c);
    if (n2d > 1 || (n2d == 0 && n2ds > 1))
        return sbl_err_set(err, SBL_E_IndexNotFound,
                           "There is more than one %s index on %s; unsure which to use for "
                           "$geoNear", n2d > 1 ? "2d" : "2dsphere", ns);
    if (n2d + n2ds == 0)
        return sbl_err_set(err, SBL_E_IndexNotFound,
                           "$geoNear requires a 2d or 2dsphere index, but none were found");
    sbl_strcpy_n(out, len, n2d == 1 ? f2d : f2ds);
    return 0;
}

int sbl_agg_geonear_prepare(sbl_opctx_t *ctx, const char *ns, const bson_t *spec,
                            sbl_agg_geonear_t *g, sbl_err_t *err)
{
    bson_iter_t it;
    const char *key = NULL, *dist = NULL, *locs = NULL;
    bool spherical = false, has_near = false, has_query = false;
    bson_t query;
    bson_value_t near = {0}, mind = {0}, maxd = {0};
    char kbuf[256];

    memset(g, 0, sizeof(*g));
    g->mult = 1;
    bson_init(&g->filter);
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "near") == 0) {
            near = *bson_iter_value(&it);
            has_near = true;
        } else if (strcmp(k, "distanceField") == 0 || strcmp(k, "includeLocs") == 0 ||
                   strcmp(k, "key") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_err_set(err, SBL_E_TypeMismatch, "$geoNear: %s must be a string", k);
            *(k[0] == 'd' ? &dist : k[0] == 'i' ? &locs : &key) = bson_iter_utf8(&it, NULL);
        } else if (strcmp(k, "spherical") == 0) {
            spherical = bson_iter_as_bool(&it);
        } else if (strcmp(k, "query") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !sbl_iter_doc(&it, &query))
                return sbl_err_set(err, SBL_E_TypeMismatch, "query must be an object");
            has_query = true;
        } else if (strcmp(k, "minDistance") == 0 || strcmp(k, "maxDistance") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_double(&it) < 0)
                return sbl_err_set(err, SBL_E_BadValue, "%s must be a non-negative number", k);
            *(k[1] == 'i' ? &mind : &maxd) = *bson_iter_value(&it);
        } else if (strcmp(k, "distanceMultiplier") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_double(&it) < 0)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "distanceMultiplier must be a non-negative number");
            g->mult = bson_iter_as_double(&it);
        } else if (strcmp(k, "uniqueDocs") == 0 || strcmp(k, "num") == 0 ||
                   strcmp(k, "limit") == 0) {
            continue; /* removed or ignored by mongod 7.0 as well */
        } else {
            return sbl_err_set(err, SBL_E_BadValue, "Unknown argument to $geoNear: %s", k);
        }
    }
    if (!has_near)
        return sbl_err_set(err, SBL_E_BadValue, "$geoNear requires a 'near' option as an Array");
    if (dist == NULL)
        return sbl_err_set(err, SBL_E_BadValue,
                           "$geoNear requires a 'distanceField' option as a String");
    if (key == NULL) {
        SBL_RET(default_key(ctx, ns, kbuf, sizeof(kbuf), err));
        key = kbuf;
    } else if (key[0] == '\0') {
        return sbl_err_set(err, SBL_E_BadValue, "$geoNear parameter 'key' cannot be the empty string");
    }
    bson_t op = BSON_INITIALIZER, cond = BSON_INITIALIZER;
    sbl_append_value(&op, spherical ? "$nearSphere" : "$near", -1, &near);
    if (mind.value_type != BSON_TYPE_EOD)
        sbl_append_value(&op, "$minDistance", -1, &mind);
    if (maxd.value_type != BSON_TYPE_EOD)
        sbl_append_value(&op, "$maxDistance", -1, &maxd);
    BSON_APPEND_DOCUMENT(&cond, key, &op);
    if (has_query) {
        bson_t arr;
        BSON_APPEND_ARRAY_BEGIN(&g->filter, "$and", &arr);
        BSON_APPEND_DOCUMENT(&arr, "0", &query);
        BSON_APPEND_DOCUMENT(&arr, "1", &cond);
        bson_append_array_end(&g->filter, &arr);
    } else {
        bson_concat(&g->filter, &cond);
    }
    bson_destroy(&op);
    bson_destroy(&cond);
    g->dist_field = bson_strdup(dist);
    g->locs_field = locs != NULL ? bson_strdup(locs) : NULL;
    return 0;
}

void sbl_agg_geonear_finish(const sbl_agg_geonear_t *g, bson_t **docp)
{
    bson_t *in = *docp, base = BSON_INITIALIZER;
    bson_iter_t it;
    bson_value_t dist = {0}, loc = {0};

    bson_iter_init(&it, in);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, SBL_GEO_DIST_FIELD) == 0)
            dist = *bson_iter_value(&it);
        else if (strcmp(k, SBL_GEO_LOC_FIELD) == 0)
            loc = *bson_iter_value(&it);
        else
            sbl_append_iter(&base, k, -1, &it);
    }
    if (dist.value_type == BSON_TYPE_DOUBLE)
        dist.value.v_double *= g->mult;
    bson_t *out = bson_new();
    sbl_agg_set_path(&base, g->dist_field, &dist, out);
    if (g->locs_field != NULL && loc.value_type != BSON_TYPE_EOD) {
        bson_t *out2 = bson_new();
        sbl_agg_set_path(out, g->locs_field, &loc, out2);
        bson_destroy(out);
        out = out2;
    }
    bson_destroy(&base);
    bson_destroy(in);
    *docp = out;
}

void sbl_agg_geonear_destroy(sbl_agg_geonear_t *g)
{
    bson_destroy(&g->filter);
    bson_free(g->dist_field);
    bson_free(g->locs_field);
}
