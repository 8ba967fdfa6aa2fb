/*
 * rt_merge.c: the router's chunk merging and jumbo commands, after mongos
 * 7.0.  The router checks the command against its routing table and hands
 * the change of config.chunks to the config server primary (chunk_merge.c),
 * which has the shard concerned re-read its version; the router then
 * reloads the collection's routing table.
 *
 *   mergeChunks {mergeChunks: ns, bounds: [min, max]}: the chunks of one
 *              shard that exactly fill [min, max) become one chunk
 *              (_configsvrCommitChunksMerge, to the shard owning min)
 *   mergeAllChunksOnShard {mergeAllChunksOnShard: ns, shard,
 *              maxNumberOfChunksToMerge?}: every run of mergeable contiguous
 *              chunks of ns on shard (_configsvrCommitMergeAllChunksOnShard)
 *   clearJumboFlag {clearJumboFlag: ns, bounds: [min, max] | find: {key}}:
 *              the chunk loses its jumbo flag (_configsvrClearJumboFlag)
 */
#include "router/router_int.h"

#include "doc/doc.h"
#include "shard/shard.h"

#include <stdio.h>
#include <string.h>

/* Whether doc names exactly the shard key's fields (by their whole names). */
static bool is_shard_key(const rt_coll_t *c, const bson_t *doc)
{
    bson_value_t vals[SBL_SHARD_KEY_MAX];
    return c->nkey <= SBL_SHARD_KEY_MAX && bson_count_keys(doc) == (uint32_t)c->nkey &&
           !(sbl_shard_key_values(c->key, -1, doc, SBL_SHARD_KEY_WHOLE_NAMES, vals) &
             SBL_SHARD_KEY_MISSING);
}

/* The chunk holding doc's key (its values as a chunk bound holds them:
 * hashed fields not hashed again unless hash). */
static const rt_chunk_t *chunk_of(const rt_coll_t *c, const bson_t *doc, bool hash)
{
    bson_value_t vals[SBL_SHARD_KEY_MAX];
    sbl_shard_key_values(c->key, hash ? c->hashed_pos : -1, doc, SBL_SHARD_KEY_WHOLE_NAMES,
                         vals);
    return rt_chunk_for(c, vals);
}

/* cmd's bounds: [min, max], both non-empty documents (mongos's messages). */
static int parse_bounds(const bson_t *cmd, bson_t *min, bson_t *max, sbl_err_t *err)
{
    bson_iter_t it, b;
    if (!bson_iter_init_find(&it, cmd, "bounds"))
        return sbl_err_set(err, SBL_E_BadValue, "no bounds were specified");
    if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &b))
        return sbl_err_set(err, SBL_E_TypeMismatch, "bounds must be an array of two shard key "
                           "documents");
    int n = 0;
    while (bson_iter_next(&b)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&b))
            return sbl_err_set(err, SBL_E_TypeMismatch, "bounds must be an array of two shard "
                               "key documents");
        if (n < 2)
            sbl_iter_doc(&b, n == 0 ? min : max);
        n++;
    }
    if (n == 0)
        return sbl_err_set(err, SBL_E_BadValue, "no bounds were specified");
    if (n != 2)
        return sbl_err_set(err, SBL_E_BadValue, "only a min and max bound may be specified");
    if (bson_empty(min))
        return sbl_err_set(err, SBL_E_BadValue, "no min key specified");
    if (bson_empty(max))
        return sbl_err_set(err, SBL_E_BadValue, "no max key specified");
    return 0;
}

/* Run cmd on the config server primary (its error passed on as it is, as
 * mongos passes on the shard's); then reload ns's routing table. */
static int run_on_config(const char *ns, const bson_t *cmd, sbl_err_t *err)
{
    bson_t reply;
    int rc = rt_run(-1, "admin", cmd, &reply, err);
    if (rc == 0) {
        if ((rc = rt_reply_code(&reply)) != 0) {
            const char *m = sbl_doc_utf8(&reply, "errmsg");
            sbl_err_set(err, rc, "%s", m ? m : "error");
        }
        bson_destroy(&reply);
    }
    sbl_err_t e = {0};
    rt_coll_t *c = rt_coll_get(ns, true, &e);
    if (c != NULL)
        rt_coll_release(c);
    return rc;
}

static void append_bound(bson_t *out, const char *k, const bson_t *min, const bson_t *max)
{
    bson_t r;
    BSON_APPEND_DOCUMENT_BEGIN(out, k, &r);
    BSON_APPEND_DOCUMENT(&r, "min", min);
    BSON_APPEND_DOCUMENT(&r, "max", max);
    bson_append_document_end(out, &r);
}

int rt_cmd_merge_chunks(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *ns = sbl_doc_utf8(cmd, "mergeChunks");
    bson_t min, max;
    int rc = parse_bounds(cmd, &min, &max, err);
    if (rc != 0)
        return rc;
    rt_coll_t *c = rt_sharded_coll(ns, err);
    if (c == NULL)
        return err->code;
    if (!is_shard_key(c, &min) || !is_shard_key(c, &max)) {
        char *lj = bson_as_relaxed_extended_json(&min, NULL);
        char *hj = bson_as_relaxed_extended_json(&max, NULL);
        char *kj = bson_as_relaxed_extended_json(c->key, NULL);
        rc = sbl_err_set(err, SBL_E_BadValue, "shard key bounds [%s,%s) are not valid for shard "
                         "key pattern %s", lj ? lj : "", hj ? hj : "", kj ? kj : "");
        bson_free(lj);
        bson_free(hj);
        bson_free(kj);
        rt_coll_release(c);
        return rc;
    }
    /* as mongos: the shard owning min is the one whose chunks must fill the range */
    const char *shard = rt_shard_id(chunk_of(c, &min, false)->shard);
    bson_t m = BSON_INITIALIZER, wc;
    BSON_APPEND_UTF8(&m, "_configsvrCommitChunksMerge", ns);
    BSON_APPEND_UTF8(&m, "shard", shard);
    append_bound(&m, "chunkRange", &min, &max);
    BSON_APPEND_DOCUMENT_BEGIN(&m, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&m, &wc);
    rt_coll_release(c);
    rc = run_on_config(ns, &m, err);
    bson_destroy(&m);
    (void)reply;
    return rc;
}

int rt_cmd_merge_all_chunks(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *ns = sbl_doc_utf8(cmd, "mergeAllChunksOnShard");
    bson_iter_t it;
    if (!bson_iter_init_find(&it, cmd, "shard"))
        return sbl_err_set(err, 40414, "BSON field 'mergeAllChunksOnShard.shard' is missing but "
                           "a required field");
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field 'mergeAllChunksOnShard.shard' "
                           "is the wrong type, expected type 'string'");
    const char *shard = bson_iter_utf8(&it, NULL);
    int64_t max_chunks = 0;
    if (bson_iter_init_find(&it, cmd, "maxNumberOfChunksToMerge")) {
        if (!BSON_ITER_HOLDS_NUMBER(&it))
            return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field "
                               "'mergeAllChunksOnShard.maxNumberOfChunksToMerge' is the wrong "
                               "type, expected type 'int'");
        max_chunks = bson_iter_as_int64(&it);
        if (max_chunks < 2)
            return sbl_err_set(err, SBL_E_BadValue, "maxNumberOfChunksToMerge must be at least "
                               "2");
    }
    if (rt_shard_find(shard) < 0) {
        sbl_err_t e = {0};
        rt_shards_reload(&e);
        if (rt_shard_find(shard) < 0)
            return sbl_err_set(err, SBL_E_ShardNotFound, "Shard %s not found", shard);
    }
    rt_coll_t *c = rt_sharded_coll(ns, err);
    if (c == NULL)
        return err->code;
    rt_coll_release(c);
    bson_t m = BSON_INITIALIZER, wc;
    BSON_APPEND_UTF8(&m, "_configsvrCommitMergeAllChunksOnShard", ns);
    BSON_APPEND_UTF8(&m, "shard", shard);
    if (max_chunks > 0)
        BSON_APPEND_INT64(&m, "maxNumberOfChunksToMerge", max_chunks);
    BSON_APPEND_DOCUMENT_BEGIN(&m, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&m, &wc);
    int rc = run_on_config(ns, &m, err);
    bson_destroy(&m);
    (void)reply;
    return rc;
}

int rt_cmd_clear_jumbo_flag(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *ns = sbl_doc_utf8(cmd, "clearJumboFlag");
    bool has_find = bson_has_field(cmd, "find"), has_bounds = bson_has_field(cmd, "bounds");
    if (has_find && has_bounds)
        return sbl_err_set(err, 51260, "Cannot specify bounds and find at the same time");
    if (!has_find && !has_bounds)
        return sbl_err_set(err, 51261, "Need to specify either bounds or find");
    bson_t min, max, find;
    bson_iter_t it;
    int rc = 0;
    if (has_bounds && (rc = parse_bounds(cmd, &min, &max, err)) != 0)
        return rc;
    if (has_find && (!bson_iter_init_find(&it, cmd, "find") || !sbl_iter_doc(&it, &find)))
        return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field 'clearJumboFlag.find' is the "
                           "wrong type, expected type 'object'");
    rt_coll_t *c = rt_sharded_coll(ns, err);
    if (c == NULL)
        return err->code;
    const bson_t *doc = has_bounds ? &min : &find;
    if (has_find && c->hashed)
        rc = sbl_err_set(err, SBL_E_InvalidOptions, "find is not supported for collections with "
                         "hashed shard keys; use bounds");
    else if (!is_shard_key(c, doc) || (has_bounds && !is_shard_key(c, &max)))
        rc = sbl_err_set(err, SBL_E_InvalidOptions, "%s must name every shard key field",
                         has_bounds ? "bounds" : "find");
    bson_t m = BSON_INITIALIZER;
    if (rc == 0) {
        const rt_chunk_t *ch = chunk_of(c, doc, false);
        BSON_APPEND_UTF8(&m, "_configsvrClearJumboFlag", ns);
        BSON_APPEND_DOCUMENT(&m, "minKey", has_bounds ? &min : ch->min);
        BSON_APPEND_DOCUMENT(&m, "maxKey", has_bounds ? &max : ch->max);
    }
    rt_coll_release(c);
    if (rc == 0) {
        bson_t wc;
        BSON_APPEND_DOCUMENT_BEGIN(&m, "writeConcern", &wc);
        BSON_APPEND_UTF8(&wc, "w", "majority");
        bson_append_document_end(&m, &wc);
        rc = run_on_config(ns, &m, err);
    }
    bson_destroy(&m);
    (void)reply;
    return rc;
}
