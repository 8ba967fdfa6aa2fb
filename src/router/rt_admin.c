/*
 * rt_admin.c: the sharding commands that change the cluster's metadata:
 * addShard, enableSharding, shardCollection (range and hashed keys, initial
 * chunks), split, and the metadata cleanup after drops.  Each writes the
 * config servers' documents in mongod's shapes (rt_meta.c describes them)
 * and then has every shard refresh (_flushRoutingTableCacheUpdates), so a
 * shard refuses routers that have not seen the change yet.
 */
#include "router/router_int.h"

#include "auth/auth.h"
#include "common/clock.h"
#include "doc/doc.h"
#include "server/server.h"
#include "shard/shard.h"
#include "storage/storage.h"

#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Run cmd on a shard (or the config servers) and fail on transport or ok: 0. */
static int run_checked(int shard, const char *db, const bson_t *cmd, bson_t *reply_out,
                       const char *what, sbl_err_t *err)
{
    bson_t reply;
    int rc = rt_run(shard, db, cmd, &reply, err);
    if (rc == 0)
        rc = rt_reply_error(&reply, what, err);
    if (rc == 0 && reply_out != NULL)
        bson_copy_to(&reply, reply_out);
    bson_destroy(&reply);
    return rc;
}

static int cfg_write1(const char *verb, const char *coll, const char *arr_name, const bson_t *item,
                      sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, a, wc, reply;
    BSON_APPEND_UTF8(&cmd, verb, coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, arr_name, &a);
    BSON_APPEND_DOCUMENT(&a, "0", item);
    bson_append_array_end(&cmd, &a);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&cmd, &wc);
    int rc = rt_run(-1, "config", &cmd, &reply, err);
    bson_destroy(&cmd);
    bson_iter_t it, e, f;
    if (rc == 0)
        rc = rt_reply_error(&reply, "writing config metadata", err);
    if (rc == 0 && bson_iter_init_find(&it, &reply, "writeErrors") && bson_iter_recurse(&it, &e) &&
        bson_iter_next(&e) && bson_iter_recurse(&e, &f) && bson_iter_find(&f, "code"))
        rc = sbl_err_set(err, (int)bson_iter_as_int64(&f), "writing config.%s failed", coll);
    bson_destroy(&reply);
    return rc;
}

static int cfg_insert(const char *coll, const bson_t *doc, sbl_err_t *err)
{
    return cfg_write1("insert", coll, "documents", doc, err);
}

static int cfg_delete_many(const char *coll, const bson_t *q, sbl_err_t *err)
{
    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_DOCUMENT(&d, "q", q);
    BSON_APPEND_INT32(&d, "limit", 0);
    int rc = cfg_write1("delete", coll, "deletes", &d, err);
    bson_destroy(&d);
    return rc;
}

/* Ask every shard to reload ns's (or db's) routing metadata; a shard that
 * is down learns it when it next checks a version. */
void rt_flush_shards(const char *ns)
{
    for (int i = 0; i < rt_shard_count(); i++) {
        if (rt_shard_removed(i))
            continue;
        bson_t cmd = BSON_INITIALIZER, reply;
        sbl_err_t e = {0};
        BSON_APPEND_UTF8(&cmd, "_flushRoutingTableCacheUpdates", ns);
        if (rt_run(i, "admin", &cmd, &reply, &e) == 0)
            bson_destroy(&reply);
        bson_destroy(&cmd);
    }
}

/* ---- addShard ---- */

int rt_cmd_add_shard(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *conn = sbl_doc_utf8(cmd, "addShard");
    const char *name = sbl_doc_utf8(cmd, "name");
    if (conn == NULL || *conn == '\0')
        return sbl_err_set(err, SBL_E_BadValue, "addShard needs a connection string "
                           "(<replSetName>/host:port,...)");
    /* Ask the candidate what it is. */
    const char *slash = strchr(conn, '/');
    char uri_s[4400];
    /* the first host directly (the set's name is checked below); with a
     * keyFile as __system */
    char first[512];
    snprintf(first, sizeof(first), "%s", slash ? slash + 1 : conn);
    char *comma = strchr(first, ',');
    if (comma)
        *comma = '\0';
    if (!sbl_auth_cluster_uri(uri_s, sizeof(uri_s), sbl_server_options()->cluster_key, first,
                              "directConnection=true&serverSelectionTimeoutMS=5000"))
        return sbl_err_set(err, SBL_E_FailedToParse, "bad shard connection string %s", conn);
    mongoc_client_t *cl = mongoc_client_new(uri_s);
    if (cl == NULL)
        return sbl_err_set(err, SBL_E_FailedToParse, "bad shard connection string %s", conn);
    bson_t hello = BSON_INITIALIZER, hr, oc = BSON_INITIALIZER, orr;
    bson_error_t be;
    BSON_APPEND_INT32(&hello, "hello", 1);
    BSON_APPEND_INT32(&oc, "getCmdLineOpts", 1);
    bool ok = mongoc_client_command_simple(cl, "admin", &hello, NULL, &hr, &be) &&
              mongoc_client_command_simple(cl, "admin", &oc, NULL, &orr, &be);
    bson_destroy(&hello);
    bson_destroy(&oc);
    mongoc_client_destroy(cl);
    if (!ok) {
        bson_destroy(&hr);
        return sbl_err_set(err, SBL_E_OperationFailed, "failed to reach the shard %s: %s", conn,
                           be.message);
    }
    char set[128] = "", hosts[1024] = "";
    bson_iter_t it, h;
    if (bson_iter_init_find(&it, &hr, "setName") && BSON_ITER_HOLDS_UTF8(&it))
        snprintf(set, sizeof(set), "%s", bson_iter_utf8(&it, NULL));
    if (bson_iter_init_find(&it, &hr, "hosts") && bson_iter_recurse(&it, &h))
        while (bson_iter_next(&h))
            if (BSON_ITER_HOLDS_UTF8(&h)) {
                size_t l = strlen(hosts);
                snprintf(hosts + l, sizeof(hosts) - l, "%s%s", l ? "," : "",
                         bson_iter_utf8(&h, NULL));
            }
    bool shardsvr = bson_iter_init(&it, &orr) && bson_iter_find_descendant(
                                                     &it, "parsed.sharding.clusterRole", &h) &&
                    BSON_ITER_HOLDS_UTF8(&h) && strcmp(bson_iter_utf8(&h, NULL), "shardsvr") == 0;
    bson_destroy(&hr);
    bson_destroy(&orr);
    if (!shardsvr)
        return sbl_err_set(err, SBL_E_OperationFailed, "Cannot add %s as a shard since it was not "
                           "started with --shardsvr", conn);
    if (set[0] == '\0')
        return sbl_err_set(err, SBL_E_OperationFailed, "Cannot add %s as a shard: shards are "
                           "replica sets (start it with --replSet and initiate it)", conn);
    if (slash != NULL && ((size_t)(slash - conn) != strlen(set) || strncmp(conn, set, strlen(set))))
        return sbl_err_set(err, SBL_E_OperationFailed, "the host %s belongs to the replica set "
                           "%s, not %.*s", conn, set, (int)(slash - conn), conn);
    char host[1200];
    snprintf(host, sizeof(host), "%s/%s", set, hosts[0] ? hosts : (slash ? slash + 1 : conn));
    const char *id = name ? name : set;

    /* Already a member under this name and host: nothing to do (mongod's answer). */
    rt_shards_reload(err);
    int existing = rt_shard_find(id);
    if (existing >= 0 && !rt_shard_removed(existing)) {
        if (strcmp(rt_shard_host(existing), host) != 0)
            return sbl_err_set(err, SBL_E_IllegalOperation, "A shard named %s already exists "
                               "with host %s", id, rt_shard_host(existing));
        BSON_APPEND_UTF8(reply, "shardAdded", id);
        return 0;
    }
    bson_t doc = BSON_INITIALIZER;
    uint32_t t, i;
    sbl_clock_ts_next(&t, &i);
    BSON_APPEND_UTF8(&doc, "_id", id);
    BSON_APPEND_UTF8(&doc, "host", host);
    BSON_APPEND_INT32(&doc, "state", 1);
    BSON_APPEND_TIMESTAMP(&doc, "topologyTime", t, i);
    int rc = cfg_insert("shards", &doc, err);
    bson_destroy(&doc);
    if (rc != 0)
        return rc;
    int idx = rt_shard_add(id, host);
    if (idx < 0)
        return sbl_err_set(err, SBL_E_InternalError, "too many shards");
    rt_shard_set_state(idx, false, false); /* a removed shard added again */
    /* Tell the shard who it is and where the config servers are (mongod's
     * shardIdentity document). */
    bson_t sc = BSON_INITIALIZER, si;
    BSON_APPEND_INT32(&sc, "_addShard", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&sc, "shardIdentity", &si);
    BSON_APPEND_UTF8(&si, "shardName", id);
    BSON_APPEND_UTF8(&si, "configsvrConnectionString", rt_configdb());
    bson_append_document_end(&sc, &si);
    rc = run_checked(idx, "admin", &sc, NULL, "setting the shard's identity", err);
    bson_destroy(&sc);
    if (rc != 0)
        return rc;
    /* Databases already on the shard get it as their primary. */
    bson_t ld = BSON_INITIALIZER, lr = BSON_INITIALIZER;
    BSON_APPEND_INT32(&ld, "listDatabases", 1);
    BSON_APPEND_BOOL(&ld, "nameOnly", true);
    if (run_checked(idx, "admin", &ld, &lr, "listDatabases", err) == 0 &&
        bson_iter_init_find(&it, &lr, "databases") && bson_iter_recurse(&it, &h))
        while (bson_iter_next(&h)) {
            bson_iter_t f;
            if (!bson_iter_recurse(&h, &f) || !bson_iter_find(&f, "name") ||
                !BSON_ITER_HOLDS_UTF8(&f))
                continue;
            const char *db = bson_iter_utf8(&f, NULL);
            if (strcmp(db, "admin") == 0 || strcmp(db, "config") == 0 ||
                strcmp(db, "local") == 0)
                continue;
            bson_t dd = BSON_INITIALIZER, ver;
            sbl_err_t e = {0};
            sbl_clock_ts_next(&t, &i);
            BSON_APPEND_UTF8(&dd, "_id", db);
            BSON_APPEND_UTF8(&dd, "primary", id);
            BSON_APPEND_BOOL(&dd, "partitioned", false);
            BSON_APPEND_DOCUMENT_BEGIN(&dd, "version", &ver);
            BSON_APPEND_TIMESTAMP(&ver, "timestamp", t, i);
            BSON_APPEND_INT32(&ver, "lastMod", 1);
            bson_append_document_end(&dd, &ver);
            cfg_insert("databases", &dd, &e); /* a database another shard owns stays there */
            bson_destroy(&dd);
        }
    bson_destroy(&ld);
    bson_destroy(&lr);
    BSON_APPEND_UTF8(reply, "shardAdded", id);
    return 0;
}

/* ---- enableSharding ---- */

int rt_cmd_enable_sharding(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *db = sbl_doc_utf8(cmd, "enableSharding");
    if (db == NULL)
        db = sbl_doc_utf8(cmd, "enablesharding");
    if (db == NULL || *db == '\0' || strchr(db, '.') != NULL)
        return sbl_err_set(err, SBL_E_InvalidNamespace, "invalid db name specified: %s",
                           db ? db : "");
    if (strcmp(db, "admin") == 0 || strcmp(db, "local") == 0)
        return sbl_err_set(err, SBL_E_InvalidOptions, "can't shard %s database", db);
    if (strcmp(db, "config") == 0)
        return 0;
    const char *want = sbl_doc_utf8(cmd, "primaryShard"); /* 7.0: where a new one goes */
    if (want != NULL) {
        sbl_err_t e = {0};
        rt_shards_reload(&e);
        int s = rt_shard_find(want);
        if (s < 0 || rt_shard_removed(s))
            return sbl_err_set(err, SBL_E_ShardNotFound, "Shard %s not found", want);
        return rt_db_create_on(db, s, err) < 0 ? err->code : 0;
    }
    int p = rt_db_primary(db, true, err);
    return p < 0 ? err->code : 0;
}

/* ---- shardCollection ---- */

static void index_name(const bson_t *key, char *out, size_t n)
{
    bson_iter_t it;
    size_t l = 0;
    out[0] = '\0';
    bson_iter_init(&it, key);
    while (bson_iter_next(&it) && l < n) {
        if (BSON_ITER_HOLDS_UTF8(&it))
            l += snprintf(out + l, n - l, "%s%s_%s", l ? "_" : "", bson_iter_key(&it),
                          bson_iter_utf8(&it, NULL));
        else
            l += snprintf(out + l, n - l, "%s%s_%d", l ? "_" : "", bson_iter_key(&it),
                          (int)bson_iter_as_int64(&it));
    }
}

/* Create the collection (with UUID uuid when given: applyOps' create with ui) and the
 * shard key's index on shard s. */
static int prepare_shard(int s, const char *db, const char *coll, const uint8_t *uuid,
                         const bson_t *key, bool unique, sbl_err_t *err)
{
    bson_t c = BSON_INITIALIZER, reply;
    if (uuid != NULL)
        sbl_shard_create_with_uuid_cmd(&c, db, coll, uuid);
    else
        BSON_APPEND_UTF8(&c, "create", coll);
    int rc = rt_run(s, uuid != NULL ? "admin" : db, &c, &reply, err);
    bson_destroy(&c);
    if (rc != 0)
        return rc;
    int code = rt_reply_code(&reply);
    if (code != 0 && code != SBL_E_NamespaceExists) {
        rc = rt_reply_error(&reply, "creating the collection", err);
        bson_destroy(&reply);
        return rc;
    }
    bson_destroy(&reply);
    bson_t ci = BSON_INITIALIZER, idx, ix;
    char name[256];
    index_name(key, name, sizeof(name));
    BSON_APPEND_UTF8(&ci, "createIndexes", coll);
    BSON_APPEND_ARRAY_BEGIN(&ci, "indexes", &idx);
    BSON_APPEND_DOCUMENT_BEGIN(&idx, "0", &ix);
    BSON_APPEND_DOCUMENT(&ix, "key", key);
    BSON_APPEND_UTF8(&ix, "name", name);
    if (unique)
        BSON_APPEND_BOOL(&ix, "unique", true);
    bson_append_document_end(&idx, &ix);
    bson_append_array_end(&ci, &idx);
    bool id_only = false;
    bson_iter_t it;
    if (bson_iter_init(&it, key) && bson_iter_next(&it) && strcmp(bson_iter_key(&it), "_id") == 0 &&
        !BSON_ITER_HOLDS_UTF8(&it) && !bson_iter_next(&it))
        id_only = true; /* {_id: 1}: the _id index serves */
    rc = id_only ? 0 : run_checked(s, db, &ci, NULL, "creating the shard key index", err);
    bson_destroy(&ci);
    return rc;
}

static void append_chunk_bound(bson_t *d, const char *k, const bson_t *key, int hashed_pos,
                               bool have_point, int64_t point, bool max)
{
    bson_t b;
    bson_iter_t it;
    int pos = 0;
    BSON_APPEND_DOCUMENT_BEGIN(d, k, &b);
    bson_iter_init(&it, key);
    while (bson_iter_next(&it)) {
        if (pos == hashed_pos && have_point)
            BSON_APPEND_INT64(&b, bson_iter_key(&it), point);
        else if (max && !(pos > hashed_pos && have_point))
            BSON_APPEND_MAXKEY(&b, bson_iter_key(&it));
        else
            BSON_APPEND_MINKEY(&b, bson_iter_key(&it));
        pos++;
    }
    bson_append_document_end(d, &b);
}

int rt_cmd_shard_collection(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *ns = sbl_doc_utf8(cmd, "shardCollection");
    if (ns == NULL)
        ns = sbl_doc_utf8(cmd, "shardcollection");
    const char *dot = ns ? strchr(ns, '.') : NULL;
    if (dot == NULL || dot == ns || dot[1] == '\0')
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid namespace %s", ns ? ns : "");
    char db[128], coll[256];
    snprintf(db, sizeof(db), "%.*s", (int)(dot - ns), ns);
    snprintf(coll, sizeof(coll), "%s", dot + 1);
    if (strcmp(db, "admin") == 0 || strcmp(db, "local") == 0 || strcmp(db, "config") == 0)
        return sbl_err_set(err, SBL_E_IllegalOperation, "can't shard collections in the %s "
                           "database", db);
    bson_iter_t it;
    bson_t key;
    if (!bson_iter_init_find(&it, cmd, "key") || !sbl_iter_doc(&it, &key) || bson_empty(&key))
        return sbl_err_set(err, SBL_E_BadValue, "The shard key pattern must be a non-empty "
                           "document");
    int hashed_pos = -1, pos = 0, nfields = 0;
    bson_iter_init(&it, &key);
    while (bson_iter_next(&it)) {
        bool hashed = BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), "hashed") == 0;
        bool one = BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_double(&it) == 1.0;
        if (!hashed && !one)
            return sbl_err_set(err, SBL_E_BadValue, "Shard key fields can only be 1 or "
                               "'hashed': %s", bson_iter_key(&it));
        if (hashed) {
            if (hashed_pos >= 0)
                return sbl_err_set(err, SBL_E_BadValue, "A shard key may have only one hashed "
                                   "field");
            hashed_pos = pos;
        }
        pos++;
        nfields++;
    }
    bool unique = bson_iter_init_find(&it, cmd, "unique") && bson_iter_as_bool(&it);
    if (unique && hashed_pos >= 0)
        return sbl_err_set(err, SBL_E_InvalidOptions, "hashed shard keys cannot be declared "
                           "unique.");
    int64_t nchunks = 0;
    if (bson_iter_init_find(&it, cmd, "numInitialChunks") && BSON_ITER_HOLDS_NUMBER(&it))
        nchunks = bson_iter_as_int64(&it);
    if (nchunks < 0 || nchunks > 8192)
        return sbl_err_set(err, SBL_E_InvalidOptions, "numInitialChunks cannot be more than "
                           "8192");

    int primary = rt_db_primary(db, true, err);
    if (primary < 0)
        return err->code ? err->code : SBL_E_InternalError;
    rt_coll_t *cur = rt_coll_get(ns, true, err);
    if (cur == NULL)
        return err->code;
    if (cur->sharded) {
        bool same = bson_equal(cur->key, &key);
        rt_coll_release(cur);
        if (!same)
            return sbl_err_set(err, SBL_E_AlreadyInitialized, "sharding already enabled for "
                               "collection %s with options {key: ...}", ns);
        BSON_APPEND_UTF8(reply, "collectionsharded", ns);
        return 0;
    }
    rt_coll_release(cur);

    int rc = prepare_shard(primary, db, coll, NULL, &key, unique, err);
    if (rc != 0)
        return rc;
    /* Empty collection with a hashed prefix: spread initial chunks over the shards. */
    bson_t cr = BSON_INITIALIZER, cnt = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cnt, "count", coll);
    rc = run_checked(primary, db, &cnt, &cr, "counting documents", err);
    bson_destroy(&cnt);
    int64_t ndocs = rc == 0 && bson_iter_init_find(&it, &cr, "n") ? bson_iter_as_int64(&it) : 1;
    bson_destroy(&cr);
    if (rc != 0)
        return rc;
    /* zone ranges defined before: their chunks (rt_zones.c); none: as below */
    bson_t zchunks = BSON_INITIALIZER;
    bool presplit = bson_iter_init_find(&it, cmd, "presplitHashedZones") && bson_iter_as_bool(&it);
    rc = rt_zone_first_chunks(ns, &key, hashed_pos, ndocs == 0, presplit, nchunks, &zchunks, err);
    uint32_t nzone = bson_count_keys(&zchunks);
    bson_iter_t zit;
    bson_iter_init(&zit, &zchunks);
    if (rc != 0) {
        bson_destroy(&zchunks);
        return rc;
    }
    int takers[RT_MAX_SHARDS], nshards = 0; /* not draining: initial chunks go there */
    for (int s = 0; s < rt_shard_count(); s++)
        if (rt_shard_takes_data(s))
            takers[nshards++] = s;
    if (nzone > 0)
        nchunks = nzone;
    else if (hashed_pos != 0 || ndocs > 0 || nshards == 0)
        nchunks = 1;
    else if (nchunks == 0)
        nchunks = 2 * (int64_t)nshards;
    /* The collection's UUID on its primary shard. */
    bson_t lc = BSON_INITIALIZER, lr = BSON_INITIALIZER, f;
    BSON_APPEND_INT32(&lc, "listCollections", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&lc, "filter", &f);
    BSON_APPEND_UTF8(&f, "name", coll);
    bson_append_document_end(&lc, &f);
    rc = run_checked(primary, db, &lc, &lr, "listCollections", err);
    bson_destroy(&lc);
    bson_value_t uuid = {0};
    bson_iter_t ud;
    if (rc == 0 && bson_iter_init(&it, &lr) &&
        bson_iter_find_descendant(&it, "cursor.firstBatch.0.info.uuid", &ud))
        bson_value_copy(bson_iter_value(&ud), &uuid);
    bson_destroy(&lr);
    if (rc == 0 && (uuid.value_type != BSON_TYPE_BINARY || uuid.value.v_binary.data_len != 16))
        rc = sbl_err_set(err, SBL_E_NamespaceNotFound, "%s has no UUID on its primary shard", ns);
    if (rc != 0) {
        bson_destroy(&zchunks);
        bson_value_destroy(&uuid);
        return rc;
    }
    /* the other shards' copies take the primary shard's UUID, as mongod's do */
    if (nchunks > 1 || nzone > 0)
        for (int s = 0; s < nshards; s++)
            if (takers[s] != primary &&
                (rc = prepare_shard(takers[s], db, coll, uuid.value.v_binary.data, &key, unique,
                                    err)) != 0) {
                bson_destroy(&zchunks);
                bson_value_destroy(&uuid);
                return rc;
            }


    bson_oid_t epoch;
    bson_oid_init(&epoch, NULL);
    uint32_t t, inc;
    sbl_clock_ts_next(&t, &inc);
    /* the first history entry: a cluster time the shards have shown (so a
     * snapshot read the router times after this is not before it), or,
     * before any, this clock's */
    uint64_t valid = rt_cluster_time();
    if (valid == 0)
        valid = ((uint64_t)t << 32) | inc;
    /* Chunks first, then the collection entry (rt_meta.c's invariant). */
    for (int64_t i = 0; i < nchunks && rc == 0; i++) {
        bson_t ch = BSON_INITIALIZER, hist, h0;
        bson_oid_t cid;
        bson_oid_init(&cid, NULL);
        int owner = nchunks > 1 ? takers[i % nshards] : primary;
        int64_t lo = (int64_t)((__int128)i * ((__int128)1 << 64) / nchunks - ((__int128)1 << 63));
        int64_t hi =
            (int64_t)((__int128)(i + 1) * ((__int128)1 << 64) / nchunks - ((__int128)1 << 63));
        BSON_APPEND_OID(&ch, "_id", &cid);
        sbl_append_value(&ch, "uuid", -1, &uuid);
        bson_t zc, zmin, zmax;
        bson_iter_t zf;
        if (nzone > 0 && bson_iter_next(&zit) && sbl_iter_doc(&zit, &zc) &&
            bson_iter_init_find(&zf, &zc, "min") && sbl_iter_doc(&zf, &zmin) &&
            bson_iter_init_find(&zf, &zc, "max") && sbl_iter_doc(&zf, &zmax) &&
            bson_iter_init_find(&zf, &zc, "shard")) {
            owner = bson_iter_int32(&zf);
            BSON_APPEND_DOCUMENT(&ch, "min", &zmin);
            BSON_APPEND_DOCUMENT(&ch, "max", &zmax);
        } else {
            append_chunk_bound(&ch, "min", &key, hashed_pos, nchunks > 1 && i > 0, lo, false);
            append_chunk_bound(&ch, "max", &key, hashed_pos, nchunks > 1 && i + 1 < nchunks, hi,
                               true);
        }
        BSON_APPEND_UTF8(&ch, "shard", rt_shard_id(owner));
        BSON_APPEND_TIMESTAMP(&ch, "lastmod", 1, (uint32_t)i);
        BSON_APPEND_TIMESTAMP(&ch, "onCurrentShardSince", (uint32_t)(valid >> 32), (uint32_t)valid);
        BSON_APPEND_ARRAY_BEGIN(&ch, "history", &hist);
        BSON_APPEND_DOCUMENT_BEGIN(&hist, "0", &h0);
        BSON_APPEND_TIMESTAMP(&h0, "validAfter", (uint32_t)(valid >> 32), (uint32_t)valid);
        BSON_APPEND_UTF8(&h0, "shard", rt_shard_id(owner));
        bson_append_document_end(&hist, &h0);
        bson_append_array_end(&ch, &hist);
        rc = cfg_insert("chunks", &ch, err);
        bson_destroy(&ch);
    }
    bson_destroy(&zchunks);
    if (rc == 0) {
        bson_t cd = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&cd, "_id", ns);
        BSON_APPEND_OID(&cd, "lastmodEpoch", &epoch);
        BSON_APPEND_DATE_TIME(&cd, "lastmod", (int64_t)time(NULL) * 1000);
        BSON_APPEND_TIMESTAMP(&cd, "timestamp", t, inc);
        sbl_append_value(&cd, "uuid", -1, &uuid);
        BSON_APPEND_DOCUMENT(&cd, "key", &key);
        BSON_APPEND_BOOL(&cd, "unique", unique);
        BSON_APPEND_BOOL(&cd, "noBalance", false);
        rc = cfg_insert("collections", &cd, err);
        bson_destroy(&cd);
    }
    if (rc != 0) {
        bson_t q = BSON_INITIALIZER;
        sbl_err_t e = {0};
        sbl_append_value(&q, "uuid", -1, &uuid);
        cfg_delete_many("chunks", &q, &e);
        bson_destroy(&q);
    }
    bson_value_destroy(&uuid);
    if (rc != 0)
        return rc;
    rt_flush_shards(ns);
    rt_coll_t *c = rt_coll_get(ns, true, err);
    rt_coll_release(c);
    BSON_APPEND_UTF8(reply, "collectionsharded", ns);
    return 0;
}

/* ---- split ---- */

/* A chunk split off ch keeps ch's history (mongod's splits copy it), so a
 * read at a time before the split finds its owner then. */
static void append_split_history(bson_t *doc, const rt_chunk_t *ch)
{
    bson_t hist, h;
    char key[16];
    if (ch->nhist == 0)
        return;
    BSON_APPEND_TIMESTAMP(doc, "onCurrentShardSince", (uint32_t)(ch->hist[0].valid_after >> 32),
                          (uint32_t)ch->hist[0].valid_after);
    BSON_APPEND_ARRAY_BEGIN(doc, "history", &hist);
    for (size_t i = 0; i < ch->nhist; i++) {
        snprintf(key, sizeof(key), "%u", (unsigned)i);
        BSON_APPEND_DOCUMENT_BEGIN(&hist, key, &h);
        BSON_APPEND_TIMESTAMP(&h, "validAfter", (uint32_t)(ch->hist[i].valid_after >> 32),
                              (uint32_t)ch->hist[i].valid_after);
        BSON_APPEND_UTF8(&h, "shard", rt_shard_id(ch->hist[i].shard));
        bson_append_document_end(&hist, &h);
    }
    bson_append_array_end(doc, &hist);
}

int rt_cmd_split(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *ns = sbl_doc_utf8(cmd, "split");
    bson_iter_t it;
    bson_t given, found = BSON_INITIALIZER;
    const bson_t *mid = &given;
    if (ns == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "split needs a namespace");
    bool has_middle = bson_iter_init_find(&it, cmd, "middle") && sbl_iter_doc(&it, &given);
    if (!has_middle && !bson_has_field(cmd, "find") && !bson_has_field(cmd, "bounds"))
        return sbl_err_set(err, SBL_E_BadValue, "split needs middle, find or bounds");
    rt_coll_t *c = rt_coll_get(ns, true, err);
    if (c == NULL)
        return err->code;
    int rc = 0;
    if (!c->sharded) {
        rc = sbl_err_set(err, SBL_E_NamespaceNotSharded, "ns not sharded.");
        goto out;
    }
    if (!has_middle) { /* find / bounds: the chunk's median (rt_migrate.c) */
        if ((rc = rt_split_point(c, cmd, &found, err)) != 0)
            goto out;
        mid = &found;
    }
    if (bson_count_keys(mid) != (uint32_t)c->nkey) {
        rc = sbl_err_set(err, SBL_E_BadValue, "middle must name every shard key field");
        goto out;
    }
    bson_value_t vals[32];
    int n = 0;
    bson_iter_init(&it, mid);
    while (bson_iter_next(&it) && n < 32)
        vals[n++] = *bson_iter_value(&it);
    const rt_chunk_t *ch = rt_chunk_for(c, vals);
    if (sbl_doc_compare(ch->min, mid) == 0) {
        rc = sbl_err_set(err, SBL_E_BadValue, "cannot split on initial or final chunk's key");
        goto out;
    }
    /* The chunk keeps [min, middle) with the next minor version; a new chunk
     * takes [middle, max) with the one after. */
    uint32_t major = c->version.major, minor = c->version.minor;
    bson_value_t uuid = {0};
    {
        bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, set, arr = BSON_INITIALIZER;
        bson_t cmdc = BSON_INITIALIZER, reply2, ups, up;
        BSON_APPEND_UTF8(&cmdc, "find", "collections");
        BSON_APPEND_DOCUMENT_BEGIN(&cmdc, "filter", &q);
        BSON_APPEND_UTF8(&q, "_id", ns);
        bson_append_document_end(&cmdc, &q);
        rc = run_checked(-1, "config", &cmdc, &reply2, "reading config.collections", err);
        bson_destroy(&cmdc);
        bson_iter_t u_it;
        if (rc == 0 && bson_iter_init(&u_it, &reply2) &&
            bson_iter_find_descendant(&u_it, "cursor.firstBatch.0.uuid", &it))
            bson_value_copy(bson_iter_value(&it), &uuid);
        if (rc == 0)
            bson_destroy(&reply2);
        if (rc != 0 || uuid.value_type == BSON_TYPE_EOD) {
            if (rc == 0)
                rc = sbl_err_set(err, SBL_E_NamespaceNotSharded, "ns not sharded.");
            bson_destroy(&arr);
            goto out;
        }
        bson_t ch2 = BSON_INITIALIZER;
        bson_oid_t cid;
        bson_oid_init(&cid, NULL);
        BSON_APPEND_OID(&ch2, "_id", &cid);
        sbl_append_value(&ch2, "uuid", -1, &uuid);
        BSON_APPEND_DOCUMENT(&ch2, "min", mid);
        BSON_APPEND_DOCUMENT(&ch2, "max", ch->max);
        BSON_APPEND_UTF8(&ch2, "shard", rt_shard_id(ch->shard));
        BSON_APPEND_TIMESTAMP(&ch2, "lastmod", major, minor + 2);
        append_split_history(&ch2, ch);
        rc = cfg_insert("chunks", &ch2, err);
        bson_destroy(&ch2);
        bson_init(&cmdc);
        bson_init(&q);
        sbl_append_value(&q, "uuid", -1, &uuid);
        BSON_APPEND_DOCUMENT(&q, "min", ch->min);
        BSON_APPEND_DOCUMENT(&q, "max", ch->max); /* still as this table has it */
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
        BSON_APPEND_DOCUMENT(&set, "max", mid);
        BSON_APPEND_TIMESTAMP(&set, "lastmod", major, minor + 1);
        bson_append_document_end(&u, &set);
        /* as mongod: a split chunk is no longer jumbo */
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$unset", &set);
        BSON_APPEND_UTF8(&set, "jumbo", "");
        bson_append_document_end(&u, &set);
        BSON_APPEND_UTF8(&cmdc, "update", "chunks");
        BSON_APPEND_ARRAY_BEGIN(&cmdc, "updates", &ups);
        BSON_APPEND_DOCUMENT_BEGIN(&ups, "0", &up);
        BSON_APPEND_DOCUMENT(&up, "q", &q);
        BSON_APPEND_DOCUMENT(&up, "u", &u);
        bson_append_document_end(&ups, &up);
        bson_append_array_end(&cmdc, &ups);
        bson_t upd;
        bson_iter_t n_it;
        if (rc == 0 && (rc = rt_cfg_write(&cmdc, &upd, err)) == 0) {
            if (!bson_iter_init_find(&n_it, &upd, "n") || bson_iter_as_int64(&n_it) != 1) {
                /* a merge, migration or split changed the chunk since this
                 * router read it: take the new chunk back out */
                bson_t dq = BSON_INITIALIZER;
                sbl_err_t e = {0};
                BSON_APPEND_OID(&dq, "_id", &cid);
                cfg_delete_many("chunks", &dq, &e);
                bson_destroy(&dq);
                rc = sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "the chunk changed "
                                 "while it was being split (a concurrent merge, migration or "
                                 "split): try again");
            }
            bson_destroy(&upd);
        }
        bson_destroy(&cmdc);
        bson_destroy(&q);
        bson_destroy(&u);
        bson_destroy(&arr);
        bson_value_destroy(&uuid);
    }
    if (rc == 0)
        rt_flush_shards(ns);
out:
    bson_destroy(&found);
    rt_coll_release(c);
    if (rc == 0)
        rt_coll_release(rt_coll_get(ns, true, err));
    return rc;
}

/* ---- drops ---- */

void rt_meta_drop(const char *db, const char *coll)
{
    sbl_err_t e = {0};
    bson_t q = BSON_INITIALIZER, arr = BSON_INITIALIZER, find = BSON_INITIALIZER, reply;
    if (coll != NULL) {
        char ns[400];
        snprintf(ns, sizeof(ns), "%s.%s", db, coll);
        BSON_APPEND_UTF8(&q, "_id", ns);
    } else {
        char re[200];
        snprintf(re, sizeof(re), "^%s\\.", db);
        BSON_APPEND_REGEX(&q, "_id", re, "");
    }
    BSON_APPEND_UTF8(&find, "find", "collections");
    BSON_APPEND_DOCUMENT(&find, "filter", &q);
    bson_iter_t it, b;
    if (rt_run(-1, "config", &find, &reply, &e) == 0) {
        if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch", &b) &&
            bson_iter_recurse(&b, &it))
            while (bson_iter_next(&it)) {
                bson_iter_t f;
                if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "uuid")) {
                    bson_t cq = BSON_INITIALIZER;
                    sbl_append_value(&cq, "uuid", -1, bson_iter_value(&f));
                    cfg_delete_many("chunks", &cq, &e);
                    bson_destroy(&cq);
                }
            }
        bson_destroy(&reply);
    }
    cfg_delete_many("collections", &q, &e);
    if (coll == NULL) {
        bson_t dq = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&dq, "_id", db);
        cfg_delete_many("databases", &dq, &e);
        bson_destroy(&dq);
    }
    bson_destroy(&q);
    bson_destroy(&arr);
    bson_destroy(&find);
    rt_meta_flush();
    if (coll != NULL) {
        char ns[400];
        snprintf(ns, sizeof(ns), "%s.%s", db, coll);
        rt_flush_shards(ns);
    }
}
