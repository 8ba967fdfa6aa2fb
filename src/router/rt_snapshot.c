/*
 * rt_snapshot.c: readConcern {level: "snapshot"} outside a transaction
 * through the router (mongos 5.0+).  find, aggregate and distinct read at one
 * atClusterTime on every shard they target: the client's, or else the
 * router's newest cluster time, which the command then carries to each
 * shard; the reply names it (cursor.atClusterTime, distinct's top-level
 * atClusterTime) so the driver reads there again.  A transaction with
 * readConcern snapshot gets its time the same way at its first statement,
 * so every shard it reaches later reads at that time too.
 *
 * What must stay true: the time chosen is never older than a time the router
 * showed a client (its newest) nor the client's own $clusterTime, so a
 * snapshot read sees the writes the client made through any router; every
 * shard gets the same time, and the $clusterTime sent with it lets a shard
 * whose oplog is behind
 * reach it (snapshot_read.c's check_at).  The shards are targeted by the
 * placement at that time (rt_target_read: config.chunks' history), so a
 * chunk that moved after it is read on the shard that owned it then.
 */
#include "router/router_int.h"

#include "doc/doc.h"

#include <stdio.h>
#include <string.h>

static __thread uint64_t read_at; /* this thread's client command's (0: none) */

void rt_snapshot_set_read_at(uint64_t at)
{
    read_at = at;
}

uint64_t rt_read_at(void)
{
    return read_at != 0 ? read_at : rt_sess_read_at();
}

static bool is_snapshot_read(const char *name)
{
    return strcmp(name, "find") == 0 || strcmp(name, "aggregate") == 0 ||
           strcmp(name, "distinct") == 0;
}

/* cmd's readConcern.<key> into *it; false when it has none. */
static bool rc_field(const bson_t *cmd, const char *key, bson_iter_t *it)
{
    bson_iter_t top;
    char path[40];
    snprintf(path, sizeof(path), "readConcern.%s", key);
    return bson_iter_init(&top, cmd) && bson_iter_find_descendant(&top, path, it);
}

static uint64_t ts_of(const bson_iter_t *it)
{
    uint32_t t = 0, i = 0;
    if (BSON_ITER_HOLDS_TIMESTAMP(it))
        bson_iter_timestamp(it, &t, &i);
    return ((uint64_t)t << 32) | i;
}

uint64_t rt_snapshot_pin(const char *name, const bson_t *cmd, bson_t *pinned, bool *rewrotep)
{
    bson_iter_t it, rc;
    uint64_t at, after = 0;

    *rewrotep = false;
    /* a transaction's first statement pins the transaction's time (mongos
     * too); its later statements carry no readConcern */
    bool txn = sbl_doc_find_top(cmd, "startTransaction", &it) && bson_iter_as_bool(&it);
    if ((!txn && (!is_snapshot_read(name) || sbl_doc_find_top(cmd, "autocommit", &it))) ||
        !rc_field(cmd, "level", &it) || !BSON_ITER_HOLDS_UTF8(&it) ||
        strcmp(bson_iter_utf8(&it, NULL), "snapshot") != 0)
        return 0;
    if (rc_field(cmd, "atClusterTime", &it))
        return txn ? 0 : ts_of(&it); /* the client's, passed on (a bad one: shards refuse it) */
    if (rc_field(cmd, "afterClusterTime", &it))
        after = ts_of(&it);
    at = rt_cluster_time();
    /* the client's $clusterTime (checked by the dispatcher), as mongos's
     * clock takes it: a write it saw through another router is seen */
    bson_iter_t ct;
    if (bson_iter_init(&ct, cmd) && bson_iter_find_descendant(&ct, "$clusterTime.clusterTime", &ct) &&
        ts_of(&ct) > at)
        at = ts_of(&ct);
    if (after > at)
        at = after;
    if (at == 0)
        return 0; /* no shard answered yet: nothing to choose from */
    bson_t rcd;
    bson_init(pinned);
    bson_copy_to_excluding_noinit(cmd, pinned, "readConcern", NULL);
    BSON_APPEND_DOCUMENT_BEGIN(pinned, "readConcern", &rcd);
    sbl_doc_find_top(cmd, "readConcern", &it);
    bson_iter_recurse(&it, &rc);
    while (bson_iter_next(&rc))
        if (strcmp(bson_iter_key(&rc), "afterClusterTime") != 0)
            sbl_append_iter(&rcd, NULL, 0, &rc);
    bson_append_timestamp(&rcd, "atClusterTime", -1, (uint32_t)(at >> 32), (uint32_t)at);
    bson_append_document_end(pinned, &rcd);
    *rewrotep = true;
    return txn ? 0 : at;
}

void rt_snapshot_reply(const char *name, uint64_t at, bson_t *reply)
{
    bson_iter_t it, cur;
    if (bson_iter_init_find(&it, reply, "ok") && bson_iter_as_double(&it) != 1.0)
        return; /* a shard's error passed on */
    if (strcmp(name, "distinct") == 0) {
        if (!bson_has_field(reply, "atClusterTime"))
            bson_append_timestamp(reply, "atClusterTime", -1, (uint32_t)(at >> 32), (uint32_t)at);
        return;
    }
    if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &cur) || bson_iter_find(&cur, "atClusterTime"))
        return;
    /* the cursor document again, with the time */
    bson_t out = BSON_INITIALIZER, cd, old;
    bson_iter_init(&it, reply);
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "cursor") != 0 || !sbl_iter_doc(&it, &old)) {
            sbl_append_iter(&out, NULL, 0, &it);
            continue;
        }
        BSON_APPEND_DOCUMENT_BEGIN(&out, "cursor", &cd);
        bson_concat(&cd, &old);
        bson_append_timestamp(&cd, "atClusterTime", -1, (uint32_t)(at >> 32), (uint32_t)at);
        bson_append_document_end(&out, &cd);
    }
    bson_reinit(reply);
    bson_concat(reply, &out);
    bson_destroy(&out);
}
