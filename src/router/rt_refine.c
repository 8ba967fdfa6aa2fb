/*
 * rt_refine.c: refineCollectionShardKey, as mongos 7.0 answers it.
 *
 *   {refineCollectionShardKey: "db.coll", key: {<current key>, <suffix>: 1|"hashed", ...}}
 *
 * The new key must start with the current key (same fields, same order,
 * same kinds), and an index supporting it must exist on the shard that owns
 * the chunk at MinKey (mongod's check): its key starts with the new key, it
 * is neither sparse nor partial nor multikey and has the simple collation;
 * for a collection sharded with unique: true it is exactly the new key and
 * unique (or starts with _id).  Every unique index must stay compatible
 * with the new key.  Then, on the config servers: each chunk's bounds (and
 * each zone range's in config.tags) get the new fields, MinKey, or MaxKey
 * for the global max; config.collections gets the new key, a new
 * lastmodEpoch and a new timestamp; every shard re-reads its version.
 *
 * What must stay true: no document changes owner.  An extended bound sorts
 * exactly where the bound it extends did, so between the chunk writes and
 * the collection write a reader with either key, or a mix of old and
 * extended bounds, routes every document where it lived.  The new epoch
 * makes each shard refuse routers that still hold the old key (StaleConfig),
 * and they reload.  Documents missing a new field count as null for it
 * (sbl_shard_key_values).
 */
#include "router/router_int.h"

#include "common/clock.h"
#include "doc/doc.h"
#include "shard/shard.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define REFINE_BATCH 500 /* chunk updates per config server write */

/* A key pattern field's kind: 1 ascending, 2 hashed, 0 anything else. */
static int field_kind(const bson_iter_t *it)
{
    if (BSON_ITER_HOLDS_UTF8(it))
        return strcmp(bson_iter_utf8(it, NULL), "hashed") == 0 ? 2 : 0;
    if (BSON_ITER_HOLDS_NUMBER(it))
        return bson_iter_as_double(it) == 1.0 ? 1 : 0;
    return 0;
}

/* Is pattern p a prefix of pattern of (field names and kinds; with names_only
 * the names alone)? */
static bool pattern_prefix(const bson_t *p, const bson_t *of, bool names_only)
{
    bson_iter_t a, b;
    if (!bson_iter_init(&a, p) || !bson_iter_init(&b, of))
        return false;
    while (bson_iter_next(&a)) {
        if (!bson_iter_next(&b) || strcmp(bson_iter_key(&a), bson_iter_key(&b)) != 0)
            return false;
        if (!names_only && field_kind(&a) != field_kind(&b))
            return false;
    }
    return true;
}

static bool pattern_equal(const bson_t *a, const bson_t *b)
{
    return bson_count_keys(a) == bson_count_keys(b) && pattern_prefix(a, b, false);
}

/* Does a reply (any depth) say isMultiKey: true? */
static bool says_multikey(bson_iter_t *it)
{
    while (bson_iter_next(it)) {
        bson_iter_t sub;
        if (strcmp(bson_iter_key(it), "isMultiKey") == 0 && bson_iter_as_bool(it))
            return true;
        if ((BSON_ITER_HOLDS_DOCUMENT(it) || BSON_ITER_HOLDS_ARRAY(it)) &&
            bson_iter_recurse(it, &sub) && says_multikey(&sub))
            return true;
    }
    return false;
}

/* Is index name of coll multikey on shard s (explain of a scan hinted to it)? */
static bool index_multikey(int s, const char *db, const char *coll, const char *name)
{
    bson_t cmd = BSON_INITIALIZER, f, q, reply;
    sbl_err_t e = {0};
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "explain", &f);
    BSON_APPEND_UTF8(&f, "find", coll);
    BSON_APPEND_DOCUMENT_BEGIN(&f, "filter", &q);
    bson_append_document_end(&f, &q);
    BSON_APPEND_UTF8(&f, "hint", name);
    bson_append_document_end(&cmd, &f);
    BSON_APPEND_UTF8(&cmd, "verbosity", "queryPlanner");
    bool mk = false;
    bson_iter_t it;
    if (rt_run(s, db, &cmd, &reply, &e) == 0) {
        mk = bson_iter_init(&it, &reply) && says_multikey(&it);
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    return mk;
}

/* Why index spec ix cannot support a shard key ("" when it can), into why. */
static void index_unfit(int s, const char *db, const char *coll, const bson_t *ix, char *why,
                        size_t n)
{
    bson_iter_t it;
    size_t l = 0;
    why[0] = '\0';
    if (bson_iter_init_find(&it, ix, "sparse") && bson_iter_as_bool(&it))
        l += snprintf(why + l, n - l, " Index key is sparse.");
    if (bson_iter_init_find(&it, ix, "partialFilterExpression"))
        l += snprintf(why + l, n - l, " Index key is partial.");
    bson_iter_t loc;
    if (bson_iter_init(&it, ix) && bson_iter_find_descendant(&it, "collation.locale", &loc) &&
        (!BSON_ITER_HOLDS_UTF8(&loc) || strcmp(bson_iter_utf8(&loc, NULL), "simple") != 0))
        l += snprintf(why + l, n - l, " Index has a non-simple collation.");
    const char *name = sbl_doc_utf8(ix, "name");
    if (l == 0 && name != NULL && index_multikey(s, db, coll, name))
        snprintf(why + l, n - l, " Index key is multikey.");
}

/* mongod's index rules for a refined key (shard_key_util's), checked on
 * shard s's indexes of db.coll: 0 or InvalidOptions. */
static int check_indexes(int s, const char *db, const char *coll, const bson_t *key,
                         bool unique, sbl_err_t *err)
{
    bson_t lc = BSON_INITIALIZER, reply, arr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&lc, "listIndexes", coll);
    int rc = rt_run(s, db, &lc, &reply, err);
    bson_destroy(&lc);
    if (rc == 0) {
        /* no collection there: no index (mongod's answer: create one) */
        if (rt_reply_code(&reply) != SBL_E_NamespaceNotFound &&
            (rc = rt_reply_error(&reply, "listing the collection's indexes", err)) == 0)
            rc = rt_drain_cursor(&reply, db, coll, s, &arr, err);
        bson_destroy(&reply);
    }
    char reasons[1024] = "";
    size_t rl = 0;
    bool useful = false, exact = false, exact_unique = false;
    bson_iter_t it, k;
    if (rc == 0 && bson_iter_init(&it, &arr))
        while (rc == 0 && bson_iter_next(&it)) {
            bson_t ix, ikey;
            if (!sbl_iter_doc(&it, &ix) || !bson_iter_init_find(&k, &ix, "key") ||
                !sbl_iter_doc(&k, &ikey))
                continue;
            bool ix_unique = bson_iter_init_find(&k, &ix, "unique") && bson_iter_as_bool(&k);
            bool id_first = bson_iter_init(&k, &ikey) && bson_iter_next(&k) &&
                            strcmp(bson_iter_key(&k), "_id") == 0;
            if (ix_unique && !id_first && !pattern_prefix(key, &ikey, true)) {
                char *kj = bson_as_relaxed_extended_json(&ikey, NULL);
                rc = sbl_err_set(err, SBL_E_InvalidOptions, "can't refine the shard key of "
                                 "the collection with the unique index on %s: uniqueness can't "
                                 "be maintained unless the shard key is a prefix",
                                 kj ? kj : "?");
                bson_free(kj);
                break;
            }
            if (!pattern_prefix(key, &ikey, false))
                continue;
            char why[200];
            index_unfit(s, db, coll, &ix, why, sizeof(why));
            if (why[0] != '\0') {
                const char *name = sbl_doc_utf8(&ix, "name");
                rl += snprintf(reasons + rl, sizeof(reasons) - rl, "%sindex %s:%s",
                               rl ? "; " : " :: caused by :: ", name ? name : "?", why);
                if (rl >= sizeof(reasons))
                    rl = sizeof(reasons) - 1;
                continue;
            }
            useful = true;
            if (pattern_equal(key, &ikey)) {
                exact = true;
                exact_unique = exact_unique || ix_unique || id_first;
            }
        }
    bson_destroy(&arr);
    if (rc != 0)
        return rc;
    if (useful && unique && exact && !exact_unique)
        return sbl_err_set(err, SBL_E_InvalidOptions, "can't refine the shard key of the "
                           "collection: the index on the new shard key is not unique, and the "
                           "collection was sharded with unique: true");
    if (!useful || (unique && !exact))
        return sbl_err_set(err, SBL_E_InvalidOptions, "Please create an index that starts "
                           "with the proposed shard key before refining the shard key of the "
                           "collection%s", reasons);
    return 0;
}

/* bound extended by the fields of key after its first nold: MinKey, or
 * MaxKey when bound is the old global max (every field MaxKey). */
static void extend_bound(bson_t *out, const char *name, const bson_t *bound, const bson_t *key,
                         int nold)
{
    bson_iter_t it;
    bool global_max = true;
    bson_iter_init(&it, bound);
    while (bson_iter_next(&it))
        if (!BSON_ITER_HOLDS_MAXKEY(&it))
            global_max = false;
    bson_t b;
    BSON_APPEND_DOCUMENT_BEGIN(out, name, &b);
    bson_concat(&b, bound);
    int i = 0;
    bson_iter_init(&it, key);
    while (bson_iter_next(&it))
        if (i++ >= nold) {
            if (global_max)
                BSON_APPEND_MAXKEY(&b, bson_iter_key(&it));
            else
                BSON_APPEND_MINKEY(&b, bson_iter_key(&it));
        }
    bson_append_document_end(out, &b);
}

/* Send the batch of updates cmd (its updates array ups still open). */
static int flush_batch(bson_t *cmd, bson_t *ups, sbl_err_t *err)
{
    bson_append_array_end(cmd, ups);
    int rc = rt_cfg_write(cmd, NULL, err);
    bson_destroy(cmd);
    return rc;
}

/* Extend the min and max of every document of config.<coll> matching
 * filter (chunks, or zone ranges), by _id, in batches. */
static int extend_ranges(const char *coll, const bson_t *filter, const bson_t *key, int nold,
                         sbl_err_t *err)
{
    bson_t arr = BSON_INITIALIZER, cmd, ups;
    int rc = rt_cfg_find_all(coll, filter, NULL, &arr, err);
    bson_iter_t it;
    int n = 0;
    if (rc == 0 && bson_iter_init(&it, &arr))
        while (rc == 0 && bson_iter_next(&it)) {
            bson_t d, min, max, u, q, up, set;
            bson_iter_t f, id;
            if (!sbl_iter_doc(&it, &d) || !bson_iter_init_find(&id, &d, "_id") ||
                !bson_iter_init_find(&f, &d, "min") || !sbl_iter_doc(&f, &min) ||
                !bson_iter_init_find(&f, &d, "max") || !sbl_iter_doc(&f, &max))
                continue;
            if (n == 0) {
                bson_init(&cmd);
                BSON_APPEND_UTF8(&cmd, "update", coll);
                BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &ups);
            }
            char ks[16];
            snprintf(ks, sizeof(ks), "%d", n);
            BSON_APPEND_DOCUMENT_BEGIN(&ups, ks, &u);
            BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &q);
            sbl_append_value(&q, "_id", 3, bson_iter_value(&id));
            bson_append_document_end(&u, &q);
            BSON_APPEND_DOCUMENT_BEGIN(&u, "u", &up);
            BSON_APPEND_DOCUMENT_BEGIN(&up, "$set", &set);
            extend_bound(&set, "min", &min, key, nold);
            extend_bound(&set, "max", &max, key, nold);
            bson_append_document_end(&up, &set);
            bson_append_document_end(&u, &up);
            bson_append_document_end(&ups, &u);
            if (++n == REFINE_BATCH) {
                rc = flush_batch(&cmd, &ups, err);
                n = 0;
            }
        }
    if (n > 0)
        rc = flush_batch(&cmd, &ups, err);
    bson_destroy(&arr);
    return rc;
}

/* The new key document of the command, checked as mongod's parser and
 * ShardKeyPattern do; 0 or the error. */
static int parse(const bson_t *cmd, const char **nsp, bson_t *key, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, cmd, "refineCollectionShardKey") || !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field 'refineCollectionShardKey' is "
                           "the wrong type, expected type 'string'");
    *nsp = bson_iter_utf8(&it, NULL);
    const char *dot = strchr(*nsp, '.');
    if (dot == NULL || dot == *nsp || dot[1] == '\0')
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid namespace specified '%s'",
                           *nsp);
    if (!bson_iter_init_find(&it, cmd, "key"))
        return sbl_err_set(err, 40414, "BSON field 'refineCollectionShardKey.key' is missing "
                           "but a required field");
    if (!sbl_iter_doc(&it, key))
        return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field 'refineCollectionShardKey.key' "
                           "is the wrong type, expected type 'object'");
    if (bson_empty(key))
        return sbl_err_set(err, SBL_E_BadValue, "Shard key cannot be empty");
    int hashed = 0;
    bson_iter_init(&it, key);
    while (bson_iter_next(&it)) {
        int kind = field_kind(&it);
        if (kind == 0)
            return sbl_err_set(err, SBL_E_BadValue, "Shard key %s is not valid: key values "
                               "must be 1 or 'hashed'", bson_iter_key(&it));
        if (kind == 2 && ++hashed > 1)
            return sbl_err_set(err, SBL_E_BadValue, "Shard key is not valid: a shard key may "
                               "have at most one hashed field");
    }
    if (bson_count_keys(key) > SBL_SHARD_KEY_MAX)
        return sbl_err_set(err, SBL_E_BadValue, "Shard key has more than %d fields",
                           SBL_SHARD_KEY_MAX);
    return 0;
}

/* Unsharded: NamespaceNotFound when the collection does not exist on its
 * primary shard, else NamespaceNotSharded. */
static int not_sharded(const rt_coll_t *c, const char *db, const char *coll, sbl_err_t *err)
{
    bson_t lc = BSON_INITIALIZER, f, reply;
    bson_iter_t it, first;
    bool exists = false;
    if (c->primary >= 0 && !c->transient) {
        BSON_APPEND_INT32(&lc, "listCollections", 1);
        BSON_APPEND_DOCUMENT_BEGIN(&lc, "filter", &f);
        BSON_APPEND_UTF8(&f, "name", coll);
        bson_append_document_end(&lc, &f);
        sbl_err_t e = {0};
        if (rt_run(c->primary, db, &lc, &reply, &e) == 0) {
            exists = bson_iter_init(&it, &reply) &&
                     bson_iter_find_descendant(&it, "cursor.firstBatch.0", &first);
            bson_destroy(&reply);
        }
    }
    bson_destroy(&lc);
    if (!exists)
        return sbl_err_set(err, SBL_E_NamespaceNotFound, "namespace %s.%s not found", db, coll);
    return sbl_err_set(err, SBL_E_NamespaceNotSharded, "refineCollectionShardKey: namespace "
                       "%s.%s is not sharded", db, coll);
}

int rt_cmd_refine_shard_key(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *ns = NULL;
    bson_t key;
    int rc = parse(cmd, &ns, &key, err);
    if (rc != 0)
        return rc;
    char db[128], coll[256];
    const char *dot = strchr(ns, '.');
    snprintf(db, sizeof(db), "%.*s", (int)(dot - ns), ns);
    snprintf(coll, sizeof(coll), "%s", dot + 1);
    if (strcmp(db, "config") == 0 || strcmp(db, "admin") == 0 || strcmp(db, "local") == 0)
        return sbl_err_set(err, SBL_E_NamespaceNotSharded, "refineCollectionShardKey: "
                           "namespace %s is not sharded", ns);
    rt_coll_t *c = rt_coll_get(ns, true, err);
    if (c == NULL)
        return err->code ? err->code
                         : sbl_err_set(err, SBL_E_NamespaceNotFound, "namespace %s not found", ns);
    if (!c->sharded) {
        rc = not_sharded(c, db, coll, err);
        goto out;
    }
    if (pattern_equal(c->key, &key))
        goto out; /* the key it has: nothing to do (mongod answers ok) */
    if (!pattern_prefix(c->key, &key, false)) {
        char *oj = bson_as_relaxed_extended_json(c->key, NULL);
        char *nj = bson_as_relaxed_extended_json(&key, NULL);
        rc = sbl_err_set(err, SBL_E_InvalidOptions, "refineCollectionShardKey: the proposed "
                         "shard key %s does not extend the current shard key %s",
                         nj ? nj : "?", oj ? oj : "?");
        bson_free(oj);
        bson_free(nj);
        goto out;
    }
    /* the chunks are sorted by min: the first one holds MinKey */
    if ((rc = check_indexes(c->chunks[0].shard, db, coll, &key, c->unique, err)) != 0)
        goto out;

    /* the bounds first, then the collection entry (rt_meta.c's order) */
    bson_t f = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, "_id", ns);
    rc = rt_cfg_find_all("collections", &f, NULL, &arr, err);
    bson_destroy(&f);
    bson_iter_t it, uuid;
    bson_init(&f);
    if (rc == 0 && !(bson_iter_init(&it, &arr) &&
                     bson_iter_find_descendant(&it, "0.uuid", &uuid)))
        rc = sbl_err_set(err, SBL_E_NamespaceNotSharded, "refineCollectionShardKey: namespace "
                         "%s is not sharded", ns);
    if (rc == 0)
        sbl_append_value(&f, "uuid", 4, bson_iter_value(&uuid));
    bson_destroy(&arr);
    int nold = c->nkey;
    if (rc == 0)
        rc = extend_ranges("chunks", &f, &key, nold, err);
    bson_destroy(&f);
    if (rc == 0) {
        bson_init(&f);
        BSON_APPEND_UTF8(&f, "ns", ns);
        rc = extend_ranges("tags", &f, &key, nold, err);
        bson_destroy(&f);
    }
    if (rc == 0) {
        bson_t u = BSON_INITIALIZER, set;
        bson_oid_t epoch;
        uint32_t t, i;
        bson_oid_init(&epoch, NULL);
        sbl_clock_ts_next(&t, &i);
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
        BSON_APPEND_DOCUMENT(&set, "key", &key);
        BSON_APPEND_OID(&set, "lastmodEpoch", &epoch);
        BSON_APPEND_TIMESTAMP(&set, "timestamp", t, i);
        BSON_APPEND_DATE_TIME(&set, "lastmod", (int64_t)time(NULL) * 1000);
        bson_append_document_end(&u, &set);
        rc = rt_cfg_update_id("collections", ns, &u, err);
        bson_destroy(&u);
    }
    if (rc == 0) {
        rt_flush_shards(ns);
        rt_coll_release(rt_coll_get(ns, true, err));
    }
out:
    rt_coll_release(c);
    (void)reply;
    return rc;
}
