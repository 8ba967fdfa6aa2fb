/*
 * rt_migrate.c: the router's migration and balancer commands.  As mongos
 * 7.0 does, the router only resolves the chunk a command names and hands
 * the work to the config server primary (_configsvrMoveRange, which has the
 * donor shard run the migration; _configsvrBalancerStart/Stop/Status); the
 * router then reloads the collection's routing table.
 *
 *   moveChunk  {moveChunk: ns, find: {key...} | bounds: [min, max], to}
 *   moveRange  {moveRange: ns, min, max?, toShard}: a min or max inside a
 *              chunk splits it there first (as mongod 7.0 does)
 */
#include "router/router_int.h"

#include "doc/doc.h"
#include "storage/storage.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *utf8_field(const bson_t *d, const char *k)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, d, k) && BSON_ITER_HOLDS_UTF8(&it))
        return bson_iter_utf8(&it, NULL);
    return NULL;
}

static int reply_error(const bson_t *reply, const char *what, sbl_err_t *err)
{
    int code = rt_reply_code(reply);
    if (code == 0)
        return 0;
    const char *m = utf8_field(reply, "errmsg");
    return sbl_err_set(err, code, "%s :: caused by :: %s", what, m ? m : "error");
}

/* The shard key values of a document naming every key field (hashed field
 * hashed); false when a field is missing. */
static bool key_values(const rt_coll_t *c, const bson_t *doc, bson_value_t *vals, bool hash)
{
    bson_iter_t it, v;
    int i = 0;
    bson_iter_init(&it, c->key);
    while (bson_iter_next(&it) && i < 32) {
        if (!sbl_path_get(doc, bson_iter_key(&it), &v) && !bson_iter_init_find(&v, doc,
                                                                                 bson_iter_key(&it)))
            return false;
        vals[i] = *bson_iter_value(&v);
        if (hash && i == c->hashed_pos) {
            bson_value_t h;
            sbl_index_hash(&vals[i], &h);
            vals[i] = h;
        }
        i++;
    }
    return i == c->nkey;
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

/* Ask the config server to move [min, max) of ns to shard to. */
static int move(const char *ns, const bson_t *min, const bson_t *max, const char *to,
                sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, wc, reply;
    BSON_APPEND_UTF8(&cmd, "_configsvrMoveRange", ns);
    BSON_APPEND_DOCUMENT(&cmd, "min", min);
    BSON_APPEND_DOCUMENT(&cmd, "max", max);
    BSON_APPEND_UTF8(&cmd, "toShard", to);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&cmd, &wc);
    int rc = rt_run(-1, "admin", &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc == 0) {
        rc = reply_error(&reply, "moving the range", err);
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
    rt_coll_t *c = rt_coll_get(ns, true, err);
    if (c != NULL && !c->sharded) {
        rt_coll_release(c);
        sbl_err_set(err, SBL_E_NamespaceNotSharded, "ns %s not sharded.", ns);
        return NULL;
    }
    return c;
}

int rt_cmd_move_chunk(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *ns = utf8_field(cmd, "moveChunk"), *to = utf8_field(cmd, "to");
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
        rc = move(ns, cmin, cmax, to, err);
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
    const char *ns = utf8_field(cmd, "moveRange"), *to = utf8_field(cmd, "toShard");
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
        rc = move(ns, cmin, cmax, to, err);
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
    rc = reply_error(&r, name, err);
    if (rc == 0) {
        bson_iter_t it;
        bson_iter_init(&it, &r);
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "mode") == 0 || strcmp(k, "inBalancerRound") == 0 ||
                strcmp(k, "numBalancerRounds") == 0)
                bson_append_value(reply, k, -1, bson_iter_value(&it));
        }
    }
    bson_destroy(&r);
    return rc;
}
