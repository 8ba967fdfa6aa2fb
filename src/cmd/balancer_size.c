/*
 * balancer_size.c: what the balancer (balancer.c, balancer_zones.c) needs to
 * balance by data size, after mongod 7.0, on the config server primary:
 *
 *   sbl_bal_sizes      each shard's data size of a collection, from its
 *                      _shardsvrGetStatsForBalancing answer (shard_cmds.c),
 *                      asked every round;
 *   sbl_bal_move_data  about one chunk size of data off the shard with the
 *                      most: the donor's first chunk is split where that
 *                      much data ends (its average document size times the
 *                      count, skipped to in key order, never inside one key
 *                      value), and the part from its min moves;
 *   _configsvrBalancerCollectionStatus  the balancer's decision for one
 *                      collection, run dry (nothing split or moved), as
 *                      balancerCollectionStatus reports it.
 *
 * What must stay true: a move narrows the gap bal_size.c measured (about a
 * chunk size against a gap of three or more; a whole chunk that cannot be
 * split moves only when bal_size.c says it narrows the gap), so balancing
 * ends instead of moving data back and forth.  One-field range keys are
 * split; for compound and hashed keys the chunk moves whole.
 */
#include "cmd/bal_size.h"
#include "cmd/cmd_int.h"
#include "cmd/migrate_int.h"

#include "common/log.h"
#include "doc/doc.h"
#include "shard/shard.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define STATS_TIMEOUT_MS 10000
#define MIB (1024 * 1024)

int sbl_bal_sizes(sbl_bal_coll_t *bc, char ids[][128], int n, sbl_err_t *err)
{
    bson_t empty = BSON_INITIALIZER, shards;
    bson_iter_t it;
    int rc = sbl_cmd_config_find("shards", &empty, NULL, &shards, err);
    bson_destroy(&empty);
    for (int i = 0; i < n && i < SBL_BAL_MAX_SHARDS; i++) {
        bc->hosts[i][0] = '\0';
        bc->sizes[i] = 0;
    }
    if (rc == 0 && bson_iter_init(&it, &shards))
        while (bson_iter_next(&it)) {
            bson_t s;
            const char *id, *host;
            if (!sbl_iter_doc(&it, &s) || (id = sbl_doc_utf8(&s, "_id")) == NULL ||
                (host = sbl_doc_utf8(&s, "host")) == NULL)
                continue;
            for (int i = 0; i < n && i < SBL_BAL_MAX_SHARDS; i++)
                if (strcmp(ids[i], id) == 0)
                    snprintf(bc->hosts[i], sizeof(bc->hosts[i]), "%s", host);
        }
    bson_destroy(&shards);
    bc->chunk_bytes = sbl_chunk_size_bytes(bc->ns);
    for (int i = 0; rc == 0 && i < n && i < SBL_BAL_MAX_SHARDS; i++) {
        if (bc->hosts[i][0] == '\0')
            return sbl_err_set(err, SBL_E_ShardNotFound, "Shard %s not found", ids[i]);
        bson_t cmd = BSON_INITIALIZER, arr, one, reply;
        BSON_APPEND_INT32(&cmd, "_shardsvrGetStatsForBalancing", 1);
        BSON_APPEND_ARRAY_BEGIN(&cmd, "collections", &arr);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &one);
        BSON_APPEND_UTF8(&one, "ns", bc->ns);
        bson_append_document_end(&arr, &one);
        bson_append_array_end(&cmd, &arr);
        BSON_APPEND_INT32(&cmd, "scaleFactor", 1);
        rc = sbl_shard_remote_check_within(bc->hosts[i], "admin", &cmd, STATS_TIMEOUT_MS,
                                           &reply, err);
        bson_destroy(&cmd);
        if (rc != 0)
            break;
        bson_iter_t v;
        if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "stats.0.collSize", &v) &&
            BSON_ITER_HOLDS_NUMBER(&v))
            bc->sizes[i] = bson_iter_as_int64(&v);
        else
            rc = sbl_err_set(err, SBL_E_InternalError, "shard %s's "
                             "_shardsvrGetStatsForBalancing answer has no stats.0.collSize",
                             ids[i]);
        bson_destroy(&reply);
    }
    return rc;
}

int sbl_bal_move_chunk(sbl_bal_coll_t *bc, const bson_t *min, const bson_t *max,
                       char ids[][128], int to, const char *why)
{
    if (bc->dry) {
        bc->why = why;
        return 1;
    }
    sbl_err_t e = {0};
    int rc = sbl_bal_move_range(bc->ns, min, max, ids[to], NULL, &e);
    return rc == 0 ? 1 : rc == SBL_E_ConflictingOperationInProgress ? 0 : -1;
}

/* One shard key value of a find on host (the first document's field; EOD
 * when none) into out. */
static int key_at(const char *host, const char *db, const bson_t *find, const char *field,
                  bson_value_t *out, sbl_err_t *err)
{
    bson_t reply;
    bson_iter_t it, d;
    out->value_type = BSON_TYPE_EOD;
    int rc = sbl_shard_remote_check(host, db, find, &reply, err);
    if (rc != 0)
        return rc;
    if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d) &&
        bson_iter_recurse(&d, &it)) {
        if (bson_iter_find(&it, field))
            bson_value_copy(bson_iter_value(&it), out);
        else
            out->value_type = BSON_TYPE_NULL; /* a missing key is null */
    }
    bson_destroy(&reply);
    return 0;
}

/* {find: coll, filter: {field: {op: from, $lt: hi}}, sort: {field: 1},
 * projection: {field: 1}, skip, limit: 1}: the key skip documents on. */
static int key_after(const char *host, const char *db, const char *coll, const char *field,
                     const char *op, const bson_value_t *from, const bson_value_t *hi,
                     int64_t skip, bson_value_t *out, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, f, r, s, p;
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
    BSON_APPEND_DOCUMENT_BEGIN(&f, field, &r);
    sbl_append_value(&r, op, -1, from);
    sbl_append_value(&r, "$lt", 3, hi);
    bson_append_document_end(&f, &r);
    bson_append_document_end(&cmd, &f);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "sort", &s);
    BSON_APPEND_INT32(&s, field, 1);
    bson_append_document_end(&cmd, &s);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "projection", &p);
    BSON_APPEND_INT32(&p, field, 1);
    bson_append_document_end(&cmd, &p);
    BSON_APPEND_INT64(&cmd, "skip", skip);
    BSON_APPEND_INT32(&cmd, "limit", 1);
    BSON_APPEND_BOOL(&cmd, "singleBatch", true);
    int rc = key_at(host, db, &cmd, field, out, err);
    bson_destroy(&cmd);
    return rc;
}

/* The donor's average document size of ns (0: none, or no answer). */
static int64_t avg_obj_size(const char *host, const char *db, const char *coll)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it;
    sbl_err_t e = {0};
    int64_t avg = 0;
    BSON_APPEND_UTF8(&cmd, "collStats", coll);
    if (sbl_shard_remote_check(host, db, &cmd, &reply, &e) == 0) {
        if (bson_iter_init_find(&it, &reply, "avgObjSize") && BSON_ITER_HOLDS_NUMBER(&it))
            avg = bson_iter_as_int64(&it);
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    return avg;
}

/*
 * Where about bytes of data from chunk's min end on the donor (host): the
 * shard key value (one-field range keys) into *at, copied (EOD when the
 * chunk is not split: *small then says whether that is because it holds no
 * more than that; otherwise its key is compound or hashed, or the rest of
 * it is one key value).
 */
static int split_point(const sbl_bal_coll_t *bc, const char *host, const bson_t *chunk,
                       int64_t bytes, bson_value_t *at, bool *small, sbl_err_t *err)
{
    bson_iter_t k, lo, hi;
    bson_t key, min, max;
    at->value_type = BSON_TYPE_EOD;
    *small = false;
    if (!bson_iter_init_find(&k, bc->coll, "key") || !sbl_iter_doc(&k, &key) ||
        !bson_iter_init(&k, &key) || !bson_iter_next(&k) || BSON_ITER_HOLDS_UTF8(&k) ||
        bson_iter_next(&k) || !bson_iter_init_find(&lo, chunk, "min") ||
        !sbl_iter_doc(&lo, &min) || !bson_iter_init_find(&hi, chunk, "max") ||
        !sbl_iter_doc(&hi, &max) || !bson_iter_init(&lo, &min) || !bson_iter_next(&lo) ||
        !bson_iter_init(&hi, &max) || !bson_iter_next(&hi))
        return 0; /* compound or hashed */
    char db[128];
    const char *coll, *field = bson_iter_key(&lo);
    mig_split_ns(bc->ns, db, sizeof(db), &coll);
    int64_t avg = avg_obj_size(host, db, coll);
    if (avg <= 0)
        return 0;
    int64_t ndocs = bytes / avg > 0 ? bytes / avg : 1;
    int rc = key_after(host, db, coll, field, "$gte", bson_iter_value(&lo),
                       bson_iter_value(&hi), ndocs, at, err);
    if (rc == 0 && at->value_type == BSON_TYPE_EOD) {
        *small = true; /* no more than ndocs documents */
        return 0;
    }
    if (rc == 0 && sbl_value_compare(at, bson_iter_value(&lo)) == 0) {
        /* the range never ends inside one value: the next one after min's */
        bson_value_t next;
        rc = key_after(host, db, coll, field, "$gt", at, bson_iter_value(&hi), 0, &next, err);
        bson_value_destroy(at);
        *at = next;
    }
    return rc;
}

int sbl_bal_move_data(sbl_bal_coll_t *bc, const bson_t *chunk, char ids[][128], int from,
                      int to, int nchunks)
{
    if (bc->dry) {
        bc->why = "chunksImbalance";
        return 1;
    }
    bson_t min, max;
    bson_iter_t it;
    if (!bson_iter_init_find(&it, chunk, "min") || !sbl_iter_doc(&it, &min) ||
        !bson_iter_init_find(&it, chunk, "max") || !sbl_iter_doc(&it, &max))
        return 0;
    sbl_err_t e = {0};
    bson_value_t at;
    bool small;
    if (split_point(bc, bc->hosts[from], chunk, bc->chunk_bytes, &at, &small, &e) != 0) {
        sbl_log(SBL_LOG_WARNING, "SHARDING", 21002, e.msg, NULL);
        return -1;
    }
    if (at.value_type != BSON_TYPE_EOD) {
        bson_t split = BSON_INITIALIZER;
        bson_iter_init(&it, &min);
        bson_iter_next(&it);
        sbl_append_value(&split, bson_iter_key(&it), -1, &at);
        bson_value_destroy(&at);
        int rc = sbl_bal_split_chunk(bc->ns, chunk, &split, &e);
        if (rc == 0) {
            rc = sbl_bal_move_range(bc->ns, &min, &split, ids[to], NULL, &e);
            rc = rc == 0 ? 1 : rc == SBL_E_ConflictingOperationInProgress ? 0 : -1;
        } else {
            rc = -1;
        }
        bson_destroy(&split);
        return rc;
    }
    /* the whole chunk: no more than a chunk size, or one that cannot be
     * split so (its share of the donor's data, estimated) when that helps */
    int64_t moved = small ? bc->chunk_bytes : bc->sizes[from] / (nchunks > 0 ? nchunks : 1);
    if (!sbl_bal_size_narrows(bc->sizes[from], bc->sizes[to], moved))
        return 0;
    return sbl_bal_move_chunk(bc, &min, &max, ids, to, "chunksImbalance");
}

int sbl_cmd_configsvr_balancer_coll_status(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int rc = sbl_cmd_config_primary_check(err);
    if (rc != 0)
        return rc;
    const char *ns = sbl_doc_utf8(ctx->cmd, "_configsvrBalancerCollectionStatus");
    if (ns == NULL)
        return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field "
                           "'_configsvrBalancerCollectionStatus' is the wrong type, expected "
                           "type 'string'");
    bson_t f = BSON_INITIALIZER, arr, coll;
    bson_iter_t it;
    BSON_APPEND_UTF8(&f, "_id", ns);
    rc = sbl_cmd_config_find("collections", &f, NULL, &arr, err);
    bson_destroy(&f);
    if (rc == 0 && (!bson_iter_init(&it, &arr) || !bson_iter_next(&it) ||
                    !sbl_iter_doc(&it, &coll) ||
                    (bson_iter_init_find(&it, &coll, "dropped") && bson_iter_as_bool(&it))))
        rc = sbl_err_set(err, SBL_E_NamespaceNotSharded, "Collection %s is not sharded.", ns);
    static char ids[SBL_BAL_MAX_SHARDS][128], drain[SBL_BAL_MAX_SHARDS][128];
    static sbl_bal_coll_t bc; /* large: not on the stack; one caller at a time */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    if (rc == 0) {
        int nshards, ndrain;
        pthread_mutex_lock(&mu);
        memset(&bc, 0, sizeof(bc));
        bc.ns = ns;
        bc.coll = &coll;
        bc.dry = true;
        sbl_bal_shards(ids, &nshards, drain, &ndrain);
        int r = sbl_bal_collection(&bc, ids, nshards, drain, ndrain);
        const char *why = r > 0 ? bc.why : NULL;
        pthread_mutex_unlock(&mu);
        if (r < 0)
            rc = sbl_err_set(err, SBL_E_HostUnreachable, "could not read every shard's data "
                             "size of %s; try again", ns);
        else {
            BSON_APPEND_INT64(ctx->reply, "chunkSize", sbl_chunk_size_bytes(ns) / MIB);
            BSON_APPEND_BOOL(ctx->reply, "balancerCompliant", why == NULL);
            if (why != NULL)
                BSON_APPEND_UTF8(ctx->reply, "firstComplianceViolation", why);
        }
    }
    bson_destroy(&arr);
    return rc;
}
