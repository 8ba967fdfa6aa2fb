/*
 * rt_balance.c: the router's chunk size commands, after mongos 7.0:
 *
 *   configureCollectionBalancing {configureCollectionBalancing: ns,
 *              chunkSize: <MiB>, enableAutoMerger, defragmentCollection}:
 *              config.collections' maxChunkSizeBytes (chunkSize 0 removes
 *              it: the cluster's chunk size applies) and enableAutoMerge
 *   balancerCollectionStatus {balancerCollectionStatus: ns}: chunkSize
 *              (MiB), balancerCompliant and firstComplianceViolation, as
 *              the config server primary's balancer decides them
 *              (_configsvrBalancerCollectionStatus, balancer_size.c)
 *
 * and the range moveRange moves when it names only min: about one chunk
 * size of documents from min, as mongod 7.0's donor picks it (its average
 * document size times the count, split where that count ends, never inside
 * one shard key value).  The chunk size is the collection's, else
 * config.settings' {_id: "chunksize", value: <MiB>}, else 128 MiB.
 */
#include "router/router_int.h"

#include "doc/doc.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define DEFAULT_CHUNK_MB 128
#define MIB (1024 * 1024)

/* config.collections' document of ns into out (initialised either way);
 * NamespaceNotSharded when there is none. */
static int coll_doc(const char *ns, bson_t *out, sbl_err_t *err)
{
    bson_t f = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    bson_iter_t it;
    bson_init(out);
    BSON_APPEND_UTF8(&f, "_id", ns);
    int rc = rt_cfg_find_all("collections", &f, NULL, &arr, err);
    bson_destroy(&f);
    bson_t d;
    if (rc == 0 && bson_iter_init(&it, &arr) && bson_iter_next(&it) && sbl_iter_doc(&it, &d) &&
        !(bson_iter_init_find(&it, &d, "dropped") && bson_iter_as_bool(&it)))
        bson_concat(out, &d);
    else if (rc == 0)
        rc = sbl_err_set(err, SBL_E_NamespaceNotSharded, "Collection %s is not sharded.", ns);
    bson_destroy(&arr);
    return rc;
}

/* The chunk size of the collection whose config.collections document is coll. */
static int64_t chunk_size(const bson_t *coll)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, coll, "maxChunkSizeBytes") && BSON_ITER_HOLDS_NUMBER(&it) &&
        bson_iter_as_int64(&it) > 0)
        return bson_iter_as_int64(&it);
    bson_t f = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    sbl_err_t e = {0};
    int64_t bytes = (int64_t)DEFAULT_CHUNK_MB * MIB;
    BSON_APPEND_UTF8(&f, "_id", "chunksize");
    bson_iter_t d;
    if (rt_cfg_find_all("settings", &f, NULL, &arr, &e) == 0 && bson_iter_init(&it, &arr) &&
        bson_iter_next(&it) && bson_iter_recurse(&it, &d) && bson_iter_find(&d, "value") &&
        BSON_ITER_HOLDS_NUMBER(&d) && bson_iter_as_double(&d) > 0)
        bytes = (int64_t)(bson_iter_as_double(&d) * MIB);
    bson_destroy(&f);
    bson_destroy(&arr);
    return bytes;
}

int rt_cmd_configure_balancing(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *ns = sbl_doc_utf8(cmd, "configureCollectionBalancing");
    if (ns == NULL)
        return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field "
                           "'configureCollectionBalancing' is the wrong type, expected type "
                           "'string'");
    bson_iter_t it;
    bool has_size = bson_iter_init_find(&it, cmd, "chunkSize");
    int64_t mb = 0;
    if (has_size) {
        if (!BSON_ITER_HOLDS_NUMBER(&it))
            return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field "
                               "'configureCollectionBalancing.chunkSize' is the wrong type, "
                               "expected type 'int'");
        mb = bson_iter_as_int64(&it);
        if (mb < 0 || mb > 1024)
            return sbl_err_set(err, SBL_E_InvalidOptions, "Chunk size must be between 1 and "
                               "1024 MB (0 to go back to the cluster's chunk size)");
    }
    int merger = -1;
    if (bson_iter_init_find(&it, cmd, "enableAutoMerger"))
        merger = bson_iter_as_bool(&it) ? 1 : 0;
    if (bson_iter_init_find(&it, cmd, "defragmentCollection") && bson_iter_as_bool(&it))
        return sbl_err_set(err, SBL_E_NotImplemented, "defragmentCollection is not supported "
                           "by sable-router (mergeAllChunksOnShard and the AutoMerger merge "
                           "chunks; nothing moves them together)");
    bson_t coll;
    int rc = coll_doc(ns, &coll, err);
    bson_destroy(&coll);
    if (rc != 0)
        return rc;
    bson_t u = BSON_INITIALIZER, set, unset;
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    if (has_size && mb > 0)
        BSON_APPEND_INT64(&set, "maxChunkSizeBytes", mb * MIB);
    if (merger >= 0)
        BSON_APPEND_BOOL(&set, "enableAutoMerge", merger == 1);
    BSON_APPEND_DATE_TIME(&set, "lastmod", (int64_t)time(NULL) * 1000);
    bson_append_document_end(&u, &set);
    if (has_size && mb == 0) {
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$unset", &unset);
        BSON_APPEND_INT32(&unset, "maxChunkSizeBytes", 1);
        bson_append_document_end(&u, &unset);
    }
    rc = rt_cfg_update_id("collections", ns, &u, err);
    bson_destroy(&u);
    (void)reply;
    return rc;
}

int rt_cmd_balancer_coll_status(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *ns = sbl_doc_utf8(cmd, "balancerCollectionStatus");
    if (ns == NULL)
        return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field 'balancerCollectionStatus' is "
                           "the wrong type, expected type 'string'");
    /* the config server primary decides, as its balancer would (mongos
     * sends _configsvrBalancerCollectionStatus too) */
    bson_t c = BSON_INITIALIZER, r;
    BSON_APPEND_UTF8(&c, "_configsvrBalancerCollectionStatus", ns);
    int rc = rt_run(-1, "admin", &c, &r, err);
    bson_destroy(&c);
    if (rc != 0)
        return rc;
    rc = rt_reply_error(&r, "balancerCollectionStatus", err);
    bson_iter_t it;
    if (rc == 0 && bson_iter_init(&it, &r))
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "chunkSize") == 0 || strcmp(k, "balancerCompliant") == 0 ||
                strcmp(k, "firstComplianceViolation") == 0 || strcmp(k, "details") == 0)
                sbl_append_value(reply, k, -1, bson_iter_value(&it));
        }
    bson_destroy(&r);
    return rc;
}

/* One document's field value of a find on shard s into out (copied; EOD
 * when the find returned none). */
static int find_one_value(int s, const char *db, const bson_t *find, const char *field,
                          bson_value_t *out, sbl_err_t *err)
{
    bson_t reply;
    bson_iter_t it, d, v;
    out->value_type = BSON_TYPE_EOD;
    int rc = rt_run(s, db, find, &reply, err);
    if (rc != 0)
        return rc;
    rc = rt_reply_error(&reply, "reading the range", err);
    if (rc == 0 && bson_iter_init(&it, &reply) &&
        bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d) && bson_iter_recurse(&d, &v)) {
        if (bson_iter_find(&v, field))
            bson_value_copy(bson_iter_value(&v), out);
        else
            out->value_type = BSON_TYPE_NULL;
    }
    bson_destroy(&reply);
    return rc;
}

/* {find: coll, filter: {field: {op: from, $lt: hi}}, sort: {field: 1},
 * skip, limit: 1} into cmd. */
static void range_find(bson_t *cmd, const char *coll, const char *field, const char *op,
                       const bson_value_t *from, const bson_value_t *hi, int64_t skip)
{
    bson_t f, r, s, p;
    BSON_APPEND_UTF8(cmd, "find", coll);
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "filter", &f);
    BSON_APPEND_DOCUMENT_BEGIN(&f, field, &r);
    sbl_append_value(&r, op, -1, from);
    sbl_append_value(&r, "$lt", 3, hi);
    bson_append_document_end(&f, &r);
    bson_append_document_end(cmd, &f);
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "sort", &s);
    BSON_APPEND_INT32(&s, field, 1);
    bson_append_document_end(cmd, &s);
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "projection", &p);
    BSON_APPEND_INT32(&p, field, 1);
    bson_append_document_end(cmd, &p);
    BSON_APPEND_INT64(cmd, "skip", skip);
    BSON_APPEND_INT32(cmd, "limit", 1);
    BSON_APPEND_BOOL(cmd, "singleBatch", true);
}

int rt_range_end_by_size(const rt_coll_t *c, const rt_chunk_t *ch, bson_t *end, sbl_err_t *err)
{
    if (c->nkey != 1 || c->hashed)
        return 0; /* the whole chunk */
    bson_t coll;
    int rc = coll_doc(c->ns, &coll, err);
    int64_t size = rc == 0 ? chunk_size(&coll) : 0;
    bson_destroy(&coll);
    if (rc != 0)
        return rc;
    char db[128];
    const char *dot = strchr(c->ns, '.');
    snprintf(db, sizeof(db), "%.*s", (int)(dot - c->ns), c->ns);
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it, lo, hi;
    int64_t avg = 0;
    BSON_APPEND_UTF8(&cmd, "collStats", dot + 1);
    rc = rt_run(ch->shard, db, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc != 0)
        return rc;
    if (rt_reply_code(&reply) == 0 && bson_iter_init_find(&it, &reply, "avgObjSize"))
        avg = bson_iter_as_int64(&it);
    bson_destroy(&reply);
    if (avg <= 0)
        return 0; /* empty: the whole chunk */
    int64_t ndocs = size / avg > 0 ? size / avg : 1;
    bson_iter_init(&lo, ch->min);
    bson_iter_next(&lo);
    bson_iter_init(&hi, ch->max);
    bson_iter_next(&hi);
    const char *field = bson_iter_key(&lo);
    /* the document ndocs from min; then the first value after its own, when
     * it is min's (a range never ends inside one value) */
    bson_value_t at, next = {.value_type = BSON_TYPE_EOD};
    bson_init(&cmd);
    range_find(&cmd, dot + 1, field, "$gte", bson_iter_value(&lo), bson_iter_value(&hi), ndocs);
    rc = find_one_value(ch->shard, db, &cmd, field, &at, err);
    bson_destroy(&cmd);
    if (rc == 0 && at.value_type != BSON_TYPE_EOD &&
        sbl_value_compare(&at, bson_iter_value(&lo)) == 0) {
        bson_init(&cmd);
        range_find(&cmd, dot + 1, field, "$gt", &at, bson_iter_value(&hi), 0);
        rc = find_one_value(ch->shard, db, &cmd, field, &next, err);
        bson_destroy(&cmd);
        bson_value_destroy(&at);
        at = next;
    }
    if (rc == 0 && at.value_type != BSON_TYPE_EOD)
        sbl_append_value(end, field, -1, &at);
    bson_value_destroy(&at);
    return rc;
}
