/*
 * zone_cmds.c: zones, on the config server primary, after mongod 7.0's
 * sharding catalog manager: _configsvrAddShardToZone,
 * _configsvrRemoveShardFromZone and _configsvrUpdateZoneKeyRange, which the
 * router's addShardToZone, removeShardFromZone and updateZoneKeyRange
 * forward.  A zone is a name in the tags array of config.shards documents;
 * a zone range is a config.tags document {_id: ObjectId, ns, min, max, tag}
 * (mongod 7.0's shape).  The balancer's side is balancer_zones.c.
 *
 * What must stay true: the ranges of one namespace never overlap; a range is
 * only assigned to a zone some shard holds, and the last shard of a zone
 * cannot leave it while a range names the zone (ZoneStillInUse); the ranges
 * of a sharded collection are stored extended to its whole shard key (MinKey
 * for the missing fields), as mongod stores them.  One zone change at a time
 * (zone_mu, mongod's zone lock), so a check and the write it allows are not
 * interleaved with another change.
 */
#include "cmd/cmd_int.h"

#include "doc/doc.h"
#include "repl/repl.h"
#include "server/server.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t zone_mu = PTHREAD_MUTEX_INITIALIZER;

int sbl_cmd_config_find(const char *coll, const bson_t *filter, const bson_t *sort, bson_t *arr,
                        sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_DOCUMENT(&cmd, "filter", filter);
    if (sort)
        BSON_APPEND_DOCUMENT(&cmd, "sort", sort);
    BSON_APPEND_INT32(&cmd, "batchSize", 1000000);
    int rc = sbl_cmd_run_checked("config", &cmd, &reply, err);
    bson_destroy(&cmd);
    bson_init(arr);
    uint32_t n = 0;
    while (rc == 0) {
        int64_t cursor = sbl_append_cursor_batch(arr, &n, &reply);
        bson_destroy(&reply);
        if (cursor == 0)
            return 0;
        bson_init(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", cursor);
        BSON_APPEND_UTF8(&cmd, "collection", coll);
        rc = sbl_cmd_run_checked("config", &cmd, &reply, err);
        bson_destroy(&cmd);
    }
    bson_destroy(&reply);
    return rc;
}

/* How many documents of config.<coll> match filter (-1 on an error). */
static int64_t config_count(const char *coll, const bson_t *filter, sbl_err_t *err)
{
    bson_t arr;
    int64_t n = -1;
    if (sbl_cmd_config_find(coll, filter, NULL, &arr, err) == 0)
        n = (int64_t)bson_count_keys(&arr);
    bson_destroy(&arr);
    return n;
}

int sbl_zone_config_write(const char *verb, const char *coll, const bson_t *op, int64_t *np,
                          sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, arr, wc, reply;
    bson_iter_t it;
    const char *list = strcmp(verb, "insert") == 0   ? "documents"
                       : strcmp(verb, "delete") == 0 ? "deletes"
                                                     : "updates";
    BSON_APPEND_UTF8(&cmd, verb, coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, list, &arr);
    BSON_APPEND_DOCUMENT(&arr, "0", op);
    bson_append_array_end(&cmd, &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&cmd, &wc);
    int rc = sbl_cmd_run_checked("config", &cmd, &reply, err);
    if (rc == 0 && np != NULL)
        *np = bson_iter_init_find(&it, &reply, "n") ? bson_iter_as_int64(&it) : 0;
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return rc;
}

/* On the config server primary only: the command's shard name and zone. */
static int shard_and_zone(const bson_t *cmd, const char **shardp, const char **zonep,
                          sbl_err_t *err)
{
    bson_iter_t it;
    int rc = sbl_cmd_config_primary_check(err);
    if (rc != 0)
        return rc;
    *shardp = bson_iter_init(&it, cmd) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it)
                  ? bson_iter_utf8(&it, NULL)
                  : NULL;
    if (*shardp == NULL)
        return sbl_err_set(err, SBL_E_TypeMismatch, "the shard name must be a string");
    if (!bson_iter_init_find(&it, cmd, "zone"))
        return sbl_err_set(err, SBL_E_NoSuchKey, "Missing expected field \"zone\"");
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "\"zone\" had the wrong type. Expected "
                           "string, found %s", sbl_type_name(bson_iter_type(&it)));
    *zonep = bson_iter_utf8(&it, NULL);
    return 0;
}

/* {$addToSet or $pull: {tags: zone}} on shard's config.shards document. */
static int shard_tags(const char *shard, const char *op_name, const char *zone, int64_t *np,
                      sbl_err_t *err)
{
    bson_t op = BSON_INITIALIZER, q, u, change;
    BSON_APPEND_DOCUMENT_BEGIN(&op, "q", &q);
    BSON_APPEND_UTF8(&q, "_id", shard);
    bson_append_document_end(&op, &q);
    BSON_APPEND_DOCUMENT_BEGIN(&op, "u", &u);
    BSON_APPEND_DOCUMENT_BEGIN(&u, op_name, &change);
    BSON_APPEND_UTF8(&change, "tags", zone);
    bson_append_document_end(&u, &change);
    bson_append_document_end(&op, &u);
    int rc = sbl_zone_config_write("update", "shards", &op, np, err);
    bson_destroy(&op);
    return rc;
}

int sbl_cmd_configsvr_add_shard_to_zone(sbl_opctx_t *ctx, sbl_err_t *err)
{
    const char *shard, *zone;
    int rc = shard_and_zone(ctx->cmd, &shard, &zone, err);
    if (rc != 0)
        return rc;
    int64_t n = 0;
    pthread_mutex_lock(&zone_mu);
    rc = shard_tags(shard, "$addToSet", zone, &n, err);
    pthread_mutex_unlock(&zone_mu);
    if (rc == 0 && n == 0)
        rc = sbl_err_set(err, SBL_E_ShardNotFound, "shard %s does not exist", shard);
    return rc;
}

int sbl_cmd_configsvr_remove_shard_from_zone(sbl_opctx_t *ctx, sbl_err_t *err)
{
    const char *shard, *zone;
    int rc = shard_and_zone(ctx->cmd, &shard, &zone, err);
    if (rc != 0)
        return rc;
    bson_t f = BSON_INITIALIZER, holders = BSON_INITIALIZER;
    pthread_mutex_lock(&zone_mu);
    BSON_APPEND_UTF8(&f, "_id", shard);
    int64_t n = config_count("shards", &f, err);
    if (n == 0)
        rc = sbl_err_set(err, SBL_E_ShardNotFound, "shard %s does not exist", shard);
    else if (n < 0)
        rc = err->code;
    /* the shard is the zone's last one: no range may name the zone */
    if (rc == 0) {
        bson_reinit(&f);
        BSON_APPEND_UTF8(&f, "tags", zone);
        bson_destroy(&holders);
        rc = sbl_cmd_config_find("shards", &f, NULL, &holders, err);
    }
    bson_iter_t it;
    bson_t d;
    if (rc == 0 && bson_count_keys(&holders) == 1 && bson_iter_init(&it, &holders) &&
        bson_iter_next(&it) && sbl_iter_doc(&it, &d) && sbl_doc_utf8(&d, "_id") != NULL &&
        strcmp(sbl_doc_utf8(&d, "_id"), shard) == 0) {
        bson_reinit(&f);
        BSON_APPEND_UTF8(&f, "tag", zone);
        n = config_count("tags", &f, err);
        if (n > 0)
            rc = sbl_err_set(err, SBL_E_ZoneStillInUse, "cannot remove a shard from zone if a "
                             "chunk range is associated with it");
        else if (n < 0)
            rc = err->code;
    }
    if (rc == 0) {
        rc = shard_tags(shard, "$pull", zone, &n, err);
        if (rc == 0 && n == 0)
            rc = sbl_err_set(err, SBL_E_ShardNotFound, "shard %s no longer exist", shard);
    }
    pthread_mutex_unlock(&zone_mu);
    bson_destroy(&f);
    bson_destroy(&holders);
    return rc;
}

/* ---- updateZoneKeyRange ---- */

static char *json_of(const bson_t *d)
{
    return bson_as_relaxed_extended_json(d, NULL);
}

/* ChunkRange::fromBSON's checks: min and max non-empty documents, min < max. */
static int parse_bound(const bson_t *cmd, const char *name, bson_t *out, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, cmd, name))
        return sbl_err_set(err, SBL_E_NoSuchKey, "The field '%s' cannot be parsed :: caused by "
                           ":: Missing expected field \"%s\"", name, name);
    if (!sbl_iter_doc(&it, out))
        return sbl_err_set(err, SBL_E_TypeMismatch, "The field '%s' cannot be parsed :: caused "
                           "by :: \"%s\" had the wrong type. Expected object, found %s", name,
                           name, sbl_type_name(bson_iter_type(&it)));
    if (bson_empty(out))
        return sbl_err_set(err, SBL_E_BadValue, "The field '%s' cannot be empty", name);
    return 0;
}

/* Is every field of bound, in order, the shard key's field at its place? */
static bool prefix_of_key(const bson_t *bound, const bson_t *key)
{
    bson_iter_t b, k;
    bson_iter_init(&b, bound);
    bson_iter_init(&k, key);
    while (bson_iter_next(&b))
        if (!bson_iter_next(&k) || strcmp(bson_iter_key(&b), bson_iter_key(&k)) != 0)
            return false;
    return true;
}

/* bound extended to the whole key: MinKey for the fields it lacks. */
static void extend_bound(const bson_t *bound, const bson_t *key, bson_t *out)
{
    bson_iter_t k;
    uint32_t have = bson_count_keys(bound), i = 0;
    bson_concat(out, bound);
    bson_iter_init(&k, key);
    while (bson_iter_next(&k))
        if (i++ >= have)
            BSON_APPEND_MINKEY(out, bson_iter_key(&k));
}

/* The range's bounds against ns's shard key (from config.collections):
 * extended to the whole key (*keyp: the key) when ns is sharded; as given
 * when it is not (min and max must then name the same fields; *keyp: {f: 1
 * ...} of them).  mongod's includeFullShardKey and extractKeyPattern. */
static int full_range(const char *ns, const bson_t *min, const bson_t *max, bson_t *fmin,
                      bson_t *fmax, bson_t *keyp, sbl_err_t *err)
{
    bson_t f = BSON_INITIALIZER, colls, coll, key;
    bson_iter_t it;
    BSON_APPEND_UTF8(&f, "_id", ns);
    int rc = sbl_cmd_config_find("collections", &f, NULL, &colls, err);
    bson_destroy(&f);
    bool sharded = rc == 0 && bson_iter_init(&it, &colls) && bson_iter_next(&it) &&
                   sbl_iter_doc(&it, &coll) && bson_iter_init_find(&it, &coll, "key") &&
                   sbl_iter_doc(&it, &key);
    if (rc == 0 && sharded) {
        const bson_t *bad = !prefix_of_key(min, &key) ? min : !prefix_of_key(max, &key) ? max : NULL;
        if (bad != NULL) {
            char *bj = json_of(bad), *kj = json_of(&key);
            rc = sbl_err_set(err, SBL_E_ShardKeyNotFound, "%s: %s is not a prefix of the shard "
                             "key %s of ns: %s", bad == min ? "min" : "max", bj, kj, ns);
            bson_free(bj);
            bson_free(kj);
        } else {
            extend_bound(min, &key, fmin);
            extend_bound(max, &key, fmax);
            bson_concat(keyp, &key);
        }
    } else if (rc == 0) {
        bson_iter_t a, b;
        bson_iter_init(&a, min);
        bson_iter_init(&b, max);
        bool na, nb, differ = false;
        for (;;) {
            na = bson_iter_next(&a);
            nb = bson_iter_next(&b);
            if (!na || !nb || (differ = strcmp(bson_iter_key(&a), bson_iter_key(&b)) != 0))
                break;
            BSON_APPEND_INT32(keyp, bson_iter_key(&a), 1);
        }
        if (differ || na != nb) {
            char *mj = json_of(min), *xj = json_of(max);
            rc = sbl_err_set(err, SBL_E_ShardKeyNotFound, "the shard key of min %s doesn't "
                             "match with the shard key of max %s", mj, xj);
            bson_free(mj);
            bson_free(xj);
        } else {
            bson_concat(fmin, min);
            bson_concat(fmax, max);
        }
    }
    bson_destroy(&colls);
    return rc;
}

static bool valid_hashed_value(const bson_iter_t *v)
{
    return BSON_ITER_HOLDS_INT64(v) || bson_iter_type(v) == BSON_TYPE_MINKEY ||
           bson_iter_type(v) == BSON_TYPE_MAXKEY;
}

/* Hashed key fields take NumberLong, MinKey or MaxKey bounds only. */
static int check_hashed(const bson_t *min, const bson_t *max, const bson_t *key, sbl_err_t *err)
{
    bson_iter_t k, a, b;
    bson_iter_init(&k, key);
    bson_iter_init(&a, min);
    bson_iter_init(&b, max);
    while (bson_iter_next(&k) && bson_iter_next(&a) && bson_iter_next(&b)) {
        if (!BSON_ITER_HOLDS_UTF8(&k) || strcmp(bson_iter_utf8(&k, NULL), "hashed") != 0 ||
            (valid_hashed_value(&a) && valid_hashed_value(&b)))
            continue;
        char *mj = json_of(min), *xj = json_of(max), *kj = json_of(key);
        sbl_err_set(err, SBL_E_InvalidOptions, "there exists a field in the range %s -->> %s "
                    "not of type NumberLong, MinKey, or MaxKey which corresponds to a hashed "
                    "field in the shard key pattern %s", mj, xj, kj);
        bson_free(mj);
        bson_free(xj);
        bson_free(kj);
        return err->code;
    }
    return 0;
}

/* "{min} -->> {max}  on  zone", as mongod's ZoneRange prints itself. */
static void range_text(char *out, size_t n, const bson_t *min, const bson_t *max, const char *zone)
{
    char *mj = json_of(min), *xj = json_of(max);
    snprintf(out, n, "%s -->> %s  on  %s", mj, xj, zone);
    bson_free(mj);
    bson_free(xj);
}

/* The new range [min, max) of zone against ns's ranges (each extended to
 * key): RangeOverlapConflict when it overlaps one, unless it is that very
 * range of the same zone.  *samep: it is. */
static int check_overlap(const char *ns, const bson_t *min, const bson_t *max, const char *zone,
                         const bson_t *key, bool *samep, sbl_err_t *err)
{
    bson_t f = BSON_INITIALIZER, tags;
    bson_iter_t it;
    BSON_APPEND_UTF8(&f, "ns", ns);
    int rc = sbl_cmd_config_find("tags", &f, NULL, &tags, err);
    bson_destroy(&f);
    *samep = false;
    bson_iter_init(&it, &tags);
    while (rc == 0 && bson_iter_next(&it)) {
        bson_t t, tmin, tmax, emin = BSON_INITIALIZER, emax = BSON_INITIALIZER;
        bson_iter_t v;
        const char *tz;
        if (!sbl_iter_doc(&it, &t) || (tz = sbl_doc_utf8(&t, "tag")) == NULL ||
            !bson_iter_init_find(&v, &t, "min") || !sbl_iter_doc(&v, &tmin) ||
            !bson_iter_init_find(&v, &t, "max") || !sbl_iter_doc(&v, &tmax))
            continue;
        extend_bound(&tmin, key, &emin);
        extend_bound(&tmax, key, &emax);
        if (sbl_doc_compare(min, &emax) < 0 && sbl_doc_compare(&emin, max) < 0) {
            if (sbl_doc_compare(min, &emin) == 0 && sbl_doc_compare(max, &emax) == 0 &&
                strcmp(tz, zone) == 0) {
                *samep = true;
            } else {
                char a[2048], b[2048];
                range_text(a, sizeof(a), min, max, zone);
                range_text(b, sizeof(b), &emin, &emax, tz);
                rc = sbl_err_set(err, SBL_E_RangeOverlapConflict, "Zone range: %s is overlapping "
                                 "with existing: %s", a, b);
            }
        }
        bson_destroy(&emin);
        bson_destroy(&emax);
    }
    bson_destroy(&tags);
    return rc;
}

/* Assign [min, max) of ns to zone: a new config.tags document, or the one
 * starting at min changed (mongod upserts by {ns, min}). */
static int assign_range(const char *ns, const bson_t *gmin, const bson_t *gmax, const char *zone,
                        sbl_err_t *err)
{
    bson_t f = BSON_INITIALIZER, min = BSON_INITIALIZER, max = BSON_INITIALIZER,
           key = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, "tags", zone);
    int64_t n = config_count("shards", &f, err);
    int rc = n < 0 ? err->code : 0;
    if (n == 0)
        rc = sbl_err_set(err, SBL_E_ZoneNotFound, "zone %s does not exist", zone);
    bool same = false;
    if (rc == 0)
        rc = full_range(ns, gmin, gmax, &min, &max, &key, err);
    if (rc == 0)
        rc = check_hashed(&min, &max, &key, err);
    if (rc == 0)
        rc = check_overlap(ns, &min, &max, zone, &key, &same, err);
    if (rc == 0 && !same) {
        bson_t op = BSON_INITIALIZER, q, u, set, doc = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT_BEGIN(&op, "q", &q);
        BSON_APPEND_UTF8(&q, "ns", ns);
        BSON_APPEND_DOCUMENT(&q, "min", &min);
        bson_append_document_end(&op, &q);
        BSON_APPEND_DOCUMENT_BEGIN(&op, "u", &u);
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
        BSON_APPEND_DOCUMENT(&set, "max", &max);
        BSON_APPEND_UTF8(&set, "tag", zone);
        bson_append_document_end(&u, &set);
        bson_append_document_end(&op, &u);
        rc = sbl_zone_config_write("update", "tags", &op, &n, err);
        if (rc == 0 && n == 0) { /* none there yet: mongod 7.0's document */
            bson_oid_t oid;
            bson_oid_init(&oid, NULL);
            BSON_APPEND_OID(&doc, "_id", &oid);
            BSON_APPEND_UTF8(&doc, "ns", ns);
            BSON_APPEND_DOCUMENT(&doc, "min", &min);
            BSON_APPEND_DOCUMENT(&doc, "max", &max);
            BSON_APPEND_UTF8(&doc, "tag", zone);
            rc = sbl_zone_config_write("insert", "tags", &doc, NULL, err);
        }
        bson_destroy(&op);
        bson_destroy(&doc);
    }
    bson_destroy(&f);
    bson_destroy(&min);
    bson_destroy(&max);
    bson_destroy(&key);
    return rc;
}

/* Remove the range [min, max) of ns (nothing when there is none). */
static int remove_range(const char *ns, const bson_t *gmin, const bson_t *gmax, sbl_err_t *err)
{
    bson_t min = BSON_INITIALIZER, max = BSON_INITIALIZER, key = BSON_INITIALIZER;
    int rc = full_range(ns, gmin, gmax, &min, &max, &key, err);
    if (rc == 0) {
        bson_t op = BSON_INITIALIZER, q;
        BSON_APPEND_DOCUMENT_BEGIN(&op, "q", &q);
        BSON_APPEND_UTF8(&q, "ns", ns);
        BSON_APPEND_DOCUMENT(&q, "min", &min);
        BSON_APPEND_DOCUMENT(&q, "max", &max);
        bson_append_document_end(&op, &q);
        BSON_APPEND_INT32(&op, "limit", 0);
        rc = sbl_zone_config_write("delete", "tags", &op, NULL, err);
        bson_destroy(&op);
    }
    bson_destroy(&min);
    bson_destroy(&max);
    bson_destroy(&key);
    return rc;
}

int sbl_cmd_configsvr_update_zone_key_range(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int rc = sbl_cmd_config_primary_check(err);
    if (rc != 0)
        return rc;
    bson_iter_t it;
    const char *ns = NULL;
    if (bson_iter_init(&it, ctx->cmd) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it))
        ns = bson_iter_utf8(&it, NULL);
    if (ns == NULL)
        return sbl_err_set(err, SBL_E_TypeMismatch, "the namespace must be a string");
    const char *dot = strchr(ns, '.');
    if (dot == NULL || dot == ns || dot[1] == '\0')
        return sbl_err_set(err, SBL_E_InvalidNamespace, "%s is not a valid namespace", ns);
    bson_t min, max;
    if ((rc = parse_bound(ctx->cmd, "min", &min, err)) != 0 ||
        (rc = parse_bound(ctx->cmd, "max", &max, err)) != 0)
        return rc;
    if (sbl_doc_compare(&min, &max) >= 0) {
        char *mj = json_of(&min), *xj = json_of(&max);
        sbl_err_set(err, SBL_E_FailedToParse, "min: %s should be less than max: %s", mj, xj);
        bson_free(mj);
        bson_free(xj);
        return err->code;
    }
    if (!bson_iter_init_find(&it, ctx->cmd, "zone"))
        return sbl_err_set(err, SBL_E_NoSuchKey, "Missing expected field \"zone\"");
    bool remove = BSON_ITER_HOLDS_NULL(&it);
    if (!remove && !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "\"zone\" had the wrong type. Expected "
                           "string or null, found %s", sbl_type_name(bson_iter_type(&it)));
    pthread_mutex_lock(&zone_mu);
    rc = remove ? remove_range(ns, &min, &max, err)
                : assign_range(ns, &min, &max, bson_iter_utf8(&it, NULL), err);
    pthread_mutex_unlock(&zone_mu);
    return rc;
}
