/*
 * rt_migrate.c: the router's migration and balancer commands.  As mongos
 * 7.0 does, the router only resolves the chunk a command names and hands
 * the work to the config server primary (_configsvrMoveRange, which has the
 * donor shard run the migration; _configsvrBalancerStart/Stop/Status); the
 * router then reloads the collection's routing table.
 *
 *   moveChunk  {moveChunk: ns, find: {key...} | bounds: [min, max], to}
 *   moveRange  {moveRange: ns, min, max?, toShard}: a min or max inside a
 *              chunk splits it there first; without max the range is about
 *              one chunk size from min (rt_balance.c), as mongod 7.0's
 */
#include "router/router_int.h"

#include "doc/doc.h"
#include "shard/shard.h"
#include "storage/storage.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* The shard key values of a document naming every key field, by its path or
 * its whole name (hashed field hashed when hash: a find, not a chunk bound);
 * false when a field is missing. */
static bool key_values(const rt_coll_t *c, const bson_t *doc, bson_value_t *vals, bool hash)
{
    return c->nkey <= SBL_SHARD_KEY_MAX &&
           !(sbl_shard_key_values(c->key, hash ? c->hashed_pos : -1, doc,
                                  SBL_SHARD_KEY_WHOLE_NAMES, vals) & SBL_SHARD_KEY_MISSING);
}

static int split_at(const char *ns, const bson_t *middle, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "split", ns);
    BSON_APPEND_DOCUMENT(&cmd, "middle", middle);
    int rc = rt_cmd_split(&cmd, &reply, err);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return rc;
}

/* Ask the config server to move [min, max) of ns to shard to (force: the
 * command's forceJumbo, a chunk too big or marked jumbo moves anyway). */
static int move(const char *ns, const bson_t *min, const bson_t *max, const char *to, bool force,
                bool wait_delete, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, wc, reply;
    BSON_APPEND_UTF8(&cmd, "_configsvrMoveRange", ns);
    BSON_APPEND_DOCUMENT(&cmd, "min", min);
    BSON_APPEND_DOCUMENT(&cmd, "max", max);
    BSON_APPEND_UTF8(&cmd, "toShard", to);
    if (force)
        BSON_APPEND_BOOL(&cmd, "forceJumbo", true);
    if (wait_delete) /* the donor's deletion before the answer (docs/sharding.md) */
        BSON_APPEND_BOOL(&cmd, "waitForDelete", true);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&cmd, &wc);
    int rc = rt_run(-1, "admin", &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc == 0) {
        rc = rt_reply_error(&reply, "moving the range", err);
        bson_destroy(&reply);
    }
    sbl_err_t e = {0};
    rt_coll_t *c = rt_coll_get(ns, true, &e);
    if (c != NULL)
        rt_coll_release(c);
    return rc;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool force_jumbo(const bson_t *cmd)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, cmd, "forceJumbo") && bson_iter_as_bool(&it);
}

/* moveChunk's and moveRange's _waitForDelete (mongod's test option). */
static bool wait_for_delete(const bson_t *cmd)
{
    bson_iter_t it;
    return (bson_iter_init_find(&it, cmd, "_waitForDelete") ||
            bson_iter_init_find(&it, cmd, "waitForDelete")) && bson_iter_as_bool(&it);
}

/* Common to both commands: the collection, sharded, and the target shard known. */
static rt_coll_t *resolve(const char *ns, const char *to, sbl_err_t *err)
{
    if (ns == NULL || to == NULL) {
        sbl_err_set(err, SBL_E_BadValue, "the command needs a namespace and a destination "
                    "shard");
        return NULL;
    }
    if (rt_shard_find(to) < 0) {
        sbl_err_t e = {0};
        rt_shards_reload(&e);
        if (rt_shard_find(to) < 0) {
            sbl_err_set(err, SBL_E_ShardNotFound, "Could not find shard %s", to);
            return NULL;
        }
    }
    return rt_sharded_coll(ns, err);
}

int rt_cmd_move_chunk(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *ns = sbl_doc_utf8(cmd, "moveChunk"), *to = sbl_doc_utf8(cmd, "to");
    int64_t t0 = now_ms();
    rt_coll_t *c = resolve(ns, to, err);
    if (c == NULL)
        return err->code;
    bson_iter_t it, b;
    bson_t find, min, max;
    const rt_chunk_t *ch = NULL;
    int rc = 0;
    bson_value_t vals[32];
    if (bson_iter_init_find(&it, cmd, "find") && sbl_iter_doc(&it, &find)) {
        if (!key_values(c, &find, vals, true))
            rc = sbl_err_set(err, SBL_E_BadValue, "find must name every shard key field");
        else
            ch = rt_chunk_for(c, vals);
    } else if (bson_iter_init_find(&it, cmd, "bounds") && BSON_ITER_HOLDS_ARRAY(&it) &&
               bson_iter_recurse(&it, &b) && bson_iter_next(&b) && sbl_iter_doc(&b, &min) &&
               bson_iter_next(&b) && sbl_iter_doc(&b, &max)) {
        if (!key_values(c, &min, vals, false))
            rc = sbl_err_set(err, SBL_E_BadValue, "bounds must name every shard key field");
        else {
            ch = rt_chunk_for(c, vals);
            if (sbl_doc_compare(ch->min, &min) != 0 || sbl_doc_compare(ch->max, &max) != 0)
                rc = sbl_err_set(err, SBL_E_BadValue, "bounds do not match a chunk's bounds "
                                 "(split it first)");
        }
    } else {
        rc = sbl_err_set(err, SBL_E_BadValue, "moveChunk needs find or bounds");
    }
    if (rc == 0) {
        bson_t *cmin = bson_copy(ch->min), *cmax = bson_copy(ch->max);
        rc = move(ns, cmin, cmax, to, force_jumbo(cmd), wait_for_delete(cmd), err);
        bson_destroy(cmin);
        bson_destroy(cmax);
    }
    rt_coll_release(c);
    if (rc == 0)
        BSON_APPEND_INT64(reply, "millis", now_ms() - t0);
    return rc;
}

int rt_cmd_move_range(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *ns = sbl_doc_utf8(cmd, "moveRange"), *to = sbl_doc_utf8(cmd, "toShard");
    rt_coll_t *c = resolve(ns, to, err);
    if (c == NULL)
        return err->code;
    bson_iter_t it;
    bson_t min, max;
    bool has_min = bson_iter_init_find(&it, cmd, "min") && sbl_iter_doc(&it, &min);
    bool has_max = bson_iter_init_find(&it, cmd, "max") && sbl_iter_doc(&it, &max);
    bson_value_t vals[32];
    int rc = 0;
    if (!has_min)
        rc = sbl_err_set(err, SBL_E_BadValue, "moveRange needs min (max alone is not "
                         "supported)");
    else if (!key_values(c, &min, vals, false) || (has_max && !key_values(c, &max, vals, false)))
        rc = sbl_err_set(err, SBL_E_BadValue, "min and max must name every shard key field");
    if (rc == 0) {
        key_values(c, &min, vals, false);
        const rt_chunk_t *ch = rt_chunk_for(c, vals);
        if (sbl_doc_compare(ch->min, &min) != 0)
            rc = split_at(ns, &min, err);
    }
    if (rc == 0 && !has_max) { /* mongod 7.0: about one chunk size from min */
        rt_coll_release(c);
        if ((c = rt_coll_get(ns, true, err)) == NULL)
            return err->code;
        key_values(c, &min, vals, false);
        const rt_chunk_t *ch = rt_chunk_for(c, vals);
        bson_t end = BSON_INITIALIZER;
        rc = rt_range_end_by_size(c, ch, &end, err);
        if (rc == 0 && !bson_empty(&end) && sbl_doc_compare(&end, ch->min) > 0 &&
            sbl_doc_compare(&end, ch->max) < 0)
            rc = split_at(ns, &end, err);
        bson_destroy(&end);
    }
    if (rc == 0 && has_max) {
        rt_coll_release(c);
        if ((c = rt_coll_get(ns, true, err)) == NULL)
            return err->code;
        key_values(c, &min, vals, false);
        const rt_chunk_t *ch = rt_chunk_for(c, vals);
        if (sbl_doc_compare(ch->max, &max) != 0)
            rc = split_at(ns, &max, err);
    }
    if (rc == 0) {
        rt_coll_release(c);
        if ((c = rt_coll_get(ns, true, err)) == NULL)
            return err->code;
        key_values(c, &min, vals, false);
        const rt_chunk_t *ch = rt_chunk_for(c, vals);
        bson_t *cmin = bson_copy(ch->min), *cmax = bson_copy(ch->max);
        rc = move(ns, cmin, cmax, to, force_jumbo(cmd), wait_for_delete(cmd), err);
        bson_destroy(cmin);
        bson_destroy(cmax);
    }
    rt_coll_release(c);
    (void)reply;
    return rc;
}

/* balancerStart / balancerStop / balancerStatus: the config server's. */
int rt_cmd_balancer(const char *which, bson_t *reply, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, r;
    char name[64];
    snprintf(name, sizeof(name), "_configsvrBalancer%s", which);
    BSON_APPEND_INT32(&cmd, name, 1);
    int rc = rt_run(-1, "admin", &cmd, &r, err);
    bson_destroy(&cmd);
    if (rc != 0)
        return rc;
    rc = rt_reply_error(&r, name, err);
    if (rc == 0) {
        bson_iter_t it;
        bson_iter_init(&it, &r);
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "mode") == 0 || strcmp(k, "inBalancerRound") == 0 ||
                strcmp(k, "numBalancerRounds") == 0)
                sbl_append_value(reply, k, -1, bson_iter_value(&it));
        }
    }
    bson_destroy(&r);
    return rc;
}

/* The median shard key value of the chunk a split's find or bounds names,
 * as mongod's splitVector finds it: counted and skipped to on the owning
 * shard (single-field range keys), or the middle of the hashed range. */
int rt_split_point(const rt_coll_t *c, const bson_t *cmd, bson_t *middle, sbl_err_t *err)
{
    bson_iter_t it, b;
    bson_t find, min, max;
    bson_value_t vals[32];
    const rt_chunk_t *ch = NULL;
    if (bson_iter_init_find(&it, cmd, "find") && sbl_iter_doc(&it, &find)) {
        if (!key_values(c, &find, vals, true))
            return sbl_err_set(err, SBL_E_BadValue, "find must name every shard key field");
        ch = rt_chunk_for(c, vals);
    } else if (bson_iter_init_find(&it, cmd, "bounds") && BSON_ITER_HOLDS_ARRAY(&it) &&
               bson_iter_recurse(&it, &b) && bson_iter_next(&b) && sbl_iter_doc(&b, &min) &&
               bson_iter_next(&b) && sbl_iter_doc(&b, &max)) {
        if (!key_values(c, &min, vals, false))
            return sbl_err_set(err, SBL_E_BadValue, "bounds must name every shard key field");
        ch = rt_chunk_for(c, vals);
        if (sbl_doc_compare(ch->min, &min) != 0 || sbl_doc_compare(ch->max, &max) != 0)
            return sbl_err_set(err, SBL_E_BadValue, "bounds do not match a chunk's bounds");
    } else {
        return sbl_err_set(err, SBL_E_BadValue, "split needs middle, find or bounds");
    }
    if (c->nkey != 1)
        return sbl_err_set(err, SBL_E_BadValue, "split with find or bounds needs a one-field "
                           "shard key here; give middle");
    bson_iter_t k, lo, hi;
    bson_iter_init(&k, c->key);
    bson_iter_next(&k);
    const char *field = bson_iter_key(&k);
    bson_iter_init(&lo, ch->min);
    bson_iter_next(&lo);
    bson_iter_init(&hi, ch->max);
    bson_iter_next(&hi);
    if (c->hashed) {
        int64_t l = BSON_ITER_HOLDS_INT64(&lo) ? bson_iter_int64(&lo) : INT64_MIN;
        int64_t h = BSON_ITER_HOLDS_INT64(&hi) ? bson_iter_int64(&hi) : INT64_MAX;
        int64_t m = (int64_t)(((__int128)l + (__int128)h) / 2);
        if (m == l)
            return sbl_err_set(err, SBL_E_CannotSplit, "the chunk's hashed range cannot be split");
        BSON_APPEND_INT64(middle, field, m);
        return 0;
    }
    /* count the chunk's documents on its shard, then read the middle one */
    char db[256];
    const char *dot = strchr(c->ns, '.');
    snprintf(db, sizeof(db), "%.*s", (int)(dot - c->ns), c->ns);
    bson_t cmdc = BSON_INITIALIZER, q, r, reply;
    BSON_APPEND_UTF8(&cmdc, "count", dot + 1);
    BSON_APPEND_DOCUMENT_BEGIN(&cmdc, "query", &q);
    BSON_APPEND_DOCUMENT_BEGIN(&q, field, &r);
    sbl_append_value(&r, "$gte", 4, bson_iter_value(&lo));
    sbl_append_value(&r, "$lt", 3, bson_iter_value(&hi));
    bson_append_document_end(&q, &r);
    bson_append_document_end(&cmdc, &q);
    int rc = rt_run(ch->shard, db, &cmdc, &reply, err);
    int64_t n = 0;
    if (rc == 0) {
        rc = rt_reply_error(&reply, "counting the chunk", err);
        if (rc == 0 && bson_iter_init_find(&it, &reply, "n"))
            n = bson_iter_as_int64(&it);
        bson_destroy(&reply);
    }
    if (rc == 0 && n < 2)
        rc = sbl_err_set(err, SBL_E_CannotSplit, "the chunk has too few documents to split");
    if (rc == 0) {
        bson_t f = BSON_INITIALIZER, s, p;
        BSON_APPEND_UTF8(&f, "find", dot + 1);
        BSON_APPEND_DOCUMENT(&f, "filter", &q);
        BSON_APPEND_DOCUMENT_BEGIN(&f, "sort", &s);
        BSON_APPEND_INT32(&s, field, 1);
        bson_append_document_end(&f, &s);
        BSON_APPEND_DOCUMENT_BEGIN(&f, "projection", &p);
        BSON_APPEND_INT32(&p, field, 1);
        bson_append_document_end(&f, &p);
        BSON_APPEND_INT64(&f, "skip", n / 2);
        BSON_APPEND_INT32(&f, "limit", 1);
        BSON_APPEND_BOOL(&f, "singleBatch", true);
        rc = rt_run(ch->shard, db, &f, &reply, err);
        if (rc == 0) {
            rc = rt_reply_error(&reply, "reading the chunk's median", err);
            bson_iter_t v;
            if (rc == 0 && bson_iter_init(&v, &reply) &&
                bson_iter_find_descendant(&v, "cursor.firstBatch.0", &v) &&
                bson_iter_recurse(&v, &it) && bson_iter_find(&it, field))
                sbl_append_value(middle, field, -1, bson_iter_value(&it));
            else if (rc == 0)
                rc = sbl_err_set(err, SBL_E_CannotSplit, "no median found in the chunk");
            bson_destroy(&reply);
        }
        bson_destroy(&f);
    }
    bson_destroy(&cmdc);
    if (rc == 0 && sbl_doc_compare(middle, ch->min) == 0)
        rc = sbl_err_set(err, SBL_E_CannotSplit, "the chunk's median is its min: cannot split");
    return rc;
}
