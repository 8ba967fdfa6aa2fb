/*
 * rt_meta.c: the router's metadata cache and the commands that change the
 * metadata.  The config servers' `config` database holds the truth, in
 * mongod's shapes: config.shards {_id, host, state, topologyTime},
 * config.databases {_id, primary, partitioned, version}, config.collections
 * {_id: ns, lastmodEpoch, lastmod, timestamp, uuid, key, unique, noBalance},
 * config.chunks {_id, uuid, min, max, shard, lastmod, onCurrentShardSince,
 * history}, config.version {_id: 1, clusterId}.  The router writes them with
 * w: "majority" and reads them back into routing tables.
 *
 * Invariant: a collection's chunks are written before its config.collections
 * document, so a reader that sees the collection sharded finds its chunks.
 */
#include "router/router_int.h"

#include "common/clock.h"
#include "doc/doc.h"
#include "shard/shard.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RT_MAX_COLLS 4096

typedef struct coll_slot {
    char ns[256];
    rt_coll_t *c;
} coll_slot_t;

typedef struct db_slot {
    char name[128];
    int primary;
    rt_dbv_t dbv;
} db_slot_t;

static pthread_rwlock_t meta_lock = PTHREAD_RWLOCK_INITIALIZER;
static coll_slot_t *colls;
static size_t ncolls;
static db_slot_t *dbs;
static size_t ndbs;
static pthread_mutex_t refresh_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- config server reads and writes ---- */

int rt_cfg_find_all(const char *coll, const bson_t *filter, const bson_t *sort, bson_t *arr,
                    sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_DOCUMENT(&cmd, "filter", filter);
    if (sort != NULL)
        BSON_APPEND_DOCUMENT(&cmd, "sort", sort);
    BSON_APPEND_INT32(&cmd, "batchSize", 100000);
    int rc = rt_run(-1, "config", &cmd, &reply, err);
    bson_destroy(&cmd);
    uint32_t n = 0;
    while (rc == 0) {
        int code = rt_reply_code(&reply);
        if (code != 0) {
            bson_iter_t m;
            rc = sbl_err_set(err, code, "reading config.%s: %s", coll,
                             bson_iter_init_find(&m, &reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&m)
                                 ? bson_iter_utf8(&m, NULL)
                                 : "error");
            break;
        }
        int64_t id = sbl_append_cursor_batch(arr, &n, &reply);
        bson_destroy(&reply);
        if (id == 0)
            return 0;
        bson_init(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", id);
        BSON_APPEND_UTF8(&cmd, "collection", coll);
        rc = rt_run(-1, "config", &cmd, &reply, err);
        bson_destroy(&cmd);
    }
    bson_destroy(&reply);
    return rc;
}

int rt_cfg_write(const bson_t *cmd_in, bson_t *reply_out, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, reply, wc;
    bson_concat(&cmd, cmd_in);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&cmd, &wc);
    int rc = rt_run(-1, "config", &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc == 0) {
        bson_iter_t it, e, f;
        int code = rt_reply_code(&reply);
        if (code == 0 && bson_iter_init_find(&it, &reply, "writeErrors") &&
            bson_iter_recurse(&it, &e) && bson_iter_next(&e) && bson_iter_recurse(&e, &f) &&
            bson_iter_find(&f, "code"))
            code = (int)bson_iter_as_int64(&f);
        if (code != 0)
            rc = sbl_err_set(err, code, "writing the config servers' metadata failed (code %d)",
                             code);
    }
    if (reply_out != NULL && rc == 0)
        bson_copy_to(&reply, reply_out);
    bson_destroy(&reply);
    return rc;
}

int rt_cfg_update_id(const char *coll, const char *id, const bson_t *u, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, ups, up, q;
    BSON_APPEND_UTF8(&cmd, "update", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &ups);
    BSON_APPEND_DOCUMENT_BEGIN(&ups, "0", &up);
    BSON_APPEND_DOCUMENT_BEGIN(&up, "q", &q);
    BSON_APPEND_UTF8(&q, "_id", id);
    bson_append_document_end(&up, &q);
    BSON_APPEND_DOCUMENT(&up, "u", u);
    bson_append_document_end(&ups, &up);
    bson_append_array_end(&cmd, &ups);
    int rc = rt_cfg_write(&cmd, NULL, err);
    bson_destroy(&cmd);
    return rc;
}

static int cfg_insert(const char *coll, const bson_t *doc, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, docs;
    BSON_APPEND_UTF8(&cmd, "insert", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &docs);
    BSON_APPEND_DOCUMENT(&docs, "0", doc);
    bson_append_array_end(&cmd, &docs);
    int rc = rt_cfg_write(&cmd, NULL, err);
    bson_destroy(&cmd);
    return rc;
}

/* ---- shards and databases ---- */

int rt_shards_reload(sbl_err_t *err)
{
    bson_t arr = BSON_INITIALIZER, empty = BSON_INITIALIZER;
    int known = rt_shard_count(); /* one added during the read is not marked removed */
    int rc = rt_cfg_find_all("shards", &empty, NULL, &arr, err);
    bool seen[RT_MAX_SHARDS] = {false};
    bson_iter_t it, f;
    if (rc == 0 && bson_iter_init(&it, &arr))
        while (bson_iter_next(&it)) {
            const char *id = NULL, *host = NULL;
            bool draining = false;
            if (!bson_iter_recurse(&it, &f))
                continue;
            while (bson_iter_next(&f)) {
                if (strcmp(bson_iter_key(&f), "_id") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                    id = bson_iter_utf8(&f, NULL);
                else if (strcmp(bson_iter_key(&f), "host") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                    host = bson_iter_utf8(&f, NULL);
                else if (strcmp(bson_iter_key(&f), "draining") == 0)
                    draining = bson_iter_as_bool(&f);
            }
            int i = id != NULL && host != NULL ? rt_shard_add(id, host) : -1;
            if (i >= 0) {
                seen[i] = true;
                rt_shard_set_state(i, draining, false);
            }
        }
    for (int i = 0; rc == 0 && i < known; i++)
        if (!seen[i])
            rt_shard_set_state(i, false, true);
    bson_destroy(&arr);
    return rc;
}

static int shard_by_id_reload(const char *id)
{
    int i = rt_shard_find(id);
    if (i < 0) {
        sbl_err_t e = {0};
        rt_shards_reload(&e);
        i = rt_shard_find(id);
    }
    return i;
}

/* db's cached primary (-2: not cached) and, with dbv, its version. */
static int db_cached(const char *db, rt_dbv_t *dbv)
{
    int p = -2;
    pthread_rwlock_rdlock(&meta_lock);
    for (size_t i = 0; i < ndbs; i++)
        if (strcmp(dbs[i].name, db) == 0) {
            p = dbs[i].primary;
            if (dbv != NULL)
                *dbv = dbs[i].dbv;
        }
    pthread_rwlock_unlock(&meta_lock);
    return p;
}

void rt_db_forget(const char *db)
{
    pthread_rwlock_wrlock(&meta_lock);
    for (size_t i = 0; i < ndbs; i++)
        if (strcmp(dbs[i].name, db) == 0) {
            dbs[i] = dbs[--ndbs];
            break;
        }
    pthread_rwlock_unlock(&meta_lock);
}

void rt_append_db_version(bson_t *cmd, const char *db)
{
    rt_dbv_t v = {0};
    if (db_cached(db, &v) < 0 || !v.known)
        return;
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "databaseVersion", &d);
    bson_append_binary(&d, "uuid", -1, BSON_SUBTYPE_UUID, v.uuid, 16);
    BSON_APPEND_TIMESTAMP(&d, "timestamp", v.ts_t, v.ts_i);
    BSON_APPEND_INT32(&d, "lastMod", v.lastmod);
    bson_append_document_end(cmd, &d);
}

static void db_cache_put(const char *db, int primary, const rt_dbv_t *dbv)
{
    pthread_rwlock_wrlock(&meta_lock);
    size_t i;
    for (i = 0; i < ndbs; i++)
        if (strcmp(dbs[i].name, db) == 0)
            break;
    if (i == ndbs) {
        dbs = realloc(dbs, (ndbs + 1) * sizeof(*dbs));
        snprintf(dbs[ndbs].name, sizeof(dbs[ndbs].name), "%s", db);
        ndbs++;
    }
    dbs[i].primary = primary;
    dbs[i].dbv = *dbv;
    pthread_rwlock_unlock(&meta_lock);
}

static void append_uuid(bson_t *d, const char *k)
{
    uint8_t u[16];
    for (int i = 0; i < 16; i++)
        u[i] = (uint8_t)(rand() & 0xff);
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    bson_append_binary(d, k, -1, BSON_SUBTYPE_UUID, u, 16);
}

/* config.databases' version document at it into v. */
static void dbv_parse(bson_iter_t *it, rt_dbv_t *v)
{
    bson_iter_t f;
    memset(v, 0, sizeof(*v));
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &f))
        return;
    while (bson_iter_next(&f)) {
        const char *k = bson_iter_key(&f);
        if (strcmp(k, "uuid") == 0 && BSON_ITER_HOLDS_BINARY(&f)) {
            bson_subtype_t st;
            uint32_t len;
            const uint8_t *data;
            bson_iter_binary(&f, &st, &len, &data);
            if (len == 16) {
                memcpy(v->uuid, data, 16);
                v->known = true;
            }
        } else if (strcmp(k, "timestamp") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&f)) {
            bson_iter_timestamp(&f, &v->ts_t, &v->ts_i);
        } else if (strcmp(k, "lastMod") == 0 && BSON_ITER_HOLDS_NUMBER(&f)) {
            v->lastmod = (int32_t)bson_iter_as_int64(&f);
        }
    }
}

/* Read config.databases' entry for db: its primary's index (its version
 * into *dbv), -2 absent, -3 when the config servers did not answer. */
static int db_load(const char *db, rt_dbv_t *dbv, sbl_err_t *err)
{
    bson_t arr = BSON_INITIALIZER, filter = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&filter, "_id", db);
    int rc = rt_cfg_find_all("databases", &filter, NULL, &arr, err);
    bson_destroy(&filter);
    int p = -2;
    bson_iter_t it, f;
    memset(dbv, 0, sizeof(*dbv));
    if (rc == 0 && bson_iter_init(&it, &arr) && bson_iter_next(&it) &&
        bson_iter_recurse(&it, &f) && bson_iter_find(&f, "primary") && BSON_ITER_HOLDS_UTF8(&f)) {
        p = shard_by_id_reload(bson_iter_utf8(&f, NULL));
        if (p < 0)
            p = -2;
        if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "version"))
            dbv_parse(&f, dbv);
    }
    bson_destroy(&arr);
    if (rc != 0)
        return -3;
    return p;
}

/* Register db in config.databases with primary shard best and a first
 * version; the primary it has then (another router may have won the
 * insert), -2 with err. */
static int db_insert(const char *db, int best, sbl_err_t *err)
{
    bson_t doc = BSON_INITIALIZER, ver;
    uint32_t t, inc;
    sbl_clock_ts_next(&t, &inc);
    BSON_APPEND_UTF8(&doc, "_id", db);
    BSON_APPEND_UTF8(&doc, "primary", rt_shard_id(best));
    BSON_APPEND_BOOL(&doc, "partitioned", false);
    BSON_APPEND_DOCUMENT_BEGIN(&doc, "version", &ver);
    append_uuid(&ver, "uuid");
    BSON_APPEND_TIMESTAMP(&ver, "timestamp", t, inc);
    BSON_APPEND_INT32(&ver, "lastMod", 1);
    bson_append_document_end(&doc, &ver);
    sbl_err_t e = {0};
    int rc = cfg_insert("databases", &doc, &e);
    bson_destroy(&doc);
    if (rc != 0 && rc != SBL_E_DuplicateKey) {
        *err = e;
        return -2;
    }
    rt_dbv_t dbv;
    int p = db_load(db, &dbv, err); /* another router may have won the insert */
    if (p < 0) {
        if (p == -2)
            sbl_err_set(err, SBL_E_NamespaceNotFound, "database %s vanished", db);
        return -2;
    }
    db_cache_put(db, p, &dbv);
    return p;
}

int rt_db_primary(const char *db, bool create_db, sbl_err_t *err)
{
    if (strcmp(db, "config") == 0 || strcmp(db, "admin") == 0)
        return -1;
    int p = db_cached(db, NULL);
    if (p >= 0)
        return p;
    rt_dbv_t dbv;
    p = db_load(db, &dbv, err);
    if (p == -3)
        return -2;
    if (p >= 0) {
        db_cache_put(db, p, &dbv);
        return p;
    }
    int n = rt_shard_count();
    if (n == 0 || create_db) { /* a draining or removed shard gets no new database */
        sbl_err_t e = {0};
        rt_shards_reload(&e);
        n = rt_shard_count();
    }
    if (n == 0) {
        sbl_err_set(err, SBL_E_ShardNotFound, "Database %s could not be created :: caused by :: "
                    "No shards found", db);
        return -2;
    }
    if (!create_db) { /* nothing is stored anywhere for it: any shard answers "empty" */
        for (int i = 0; i < n; i++)
            if (!rt_shard_removed(i))
                return i;
        return 0;
    }
    /* The shard with the fewest databases becomes the primary. */
    int counts[RT_MAX_SHARDS] = {0};
    bson_t arr = BSON_INITIALIZER, empty = BSON_INITIALIZER;
    bson_iter_t it, f;
    if (rt_cfg_find_all("databases", &empty, NULL, &arr, err) == 0 && bson_iter_init(&it, &arr))
        while (bson_iter_next(&it))
            if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "primary") &&
                BSON_ITER_HOLDS_UTF8(&f)) {
                int s = rt_shard_find(bson_iter_utf8(&f, NULL));
                if (s >= 0)
                    counts[s]++;
            }
    bson_destroy(&arr);
    int best = -1;
    for (int i = 0; i < n; i++)
        if (rt_shard_takes_data(i) && (best < 0 || counts[i] < counts[best]))
            best = i;
    if (best < 0) {
        sbl_err_set(err, SBL_E_ShardNotFound, "Database %s could not be created :: caused by :: "
                    "No shards found", db);
        return -2;
    }
    return db_insert(db, best, err);
}

int rt_db_create_on(const char *db, int shard, sbl_err_t *err)
{
    int p = db_cached(db, NULL);
    rt_dbv_t dbv;
    if (p < 0 && (p = db_load(db, &dbv, err)) == -3)
        return -2;
    if (p < 0)
        p = db_insert(db, shard, err);
    if (p >= 0 && p != shard) {
        sbl_err_set(err, SBL_E_NamespaceExists, "database %s already exists on a primary "
                    "shard other than %s", db, rt_shard_id(shard));
        return -2;
    }
    return p;
}

/* ---- routing tables ---- */

void rt_coll_release(rt_coll_t *c)
{
    if (c == NULL || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (size_t i = 0; i < c->nchunks; i++) {
        bson_destroy(c->chunks[i].min);
        bson_destroy(c->chunks[i].max);
        free(c->chunks[i].hist);
    }
    free(c->chunks);
    if (c->key != NULL)
        bson_destroy(c->key);
    free(c);
}

static int chunk_cmp(const void *a, const void *b)
{
    return sbl_doc_compare(((const rt_chunk_t *)a)->min, ((const rt_chunk_t *)b)->min);
}

static bool version_less(const rt_version_t *a, uint32_t major, uint32_t minor)
{
    return a->major < major || (a->major == major && a->minor < minor);
}

/* A chunk document's history array (it) into ch->hist; entries naming a
 * shard this router does not know are left out. */
static void hist_load(rt_chunk_t *ch, const bson_iter_t *it)
{
    bson_iter_t a, e;
    size_t cap = 0;
    if (!BSON_ITER_HOLDS_ARRAY(it) || !bson_iter_recurse(it, &a))
        return;
    while (bson_iter_next(&a)) {
        rt_hist_t h = {0, -1};
        if (!BSON_ITER_HOLDS_DOCUMENT(&a) || !bson_iter_recurse(&a, &e))
            continue;
        while (bson_iter_next(&e)) {
            if (strcmp(bson_iter_key(&e), "validAfter") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&e)) {
                uint32_t t, i;
                bson_iter_timestamp(&e, &t, &i);
                h.valid_after = ((uint64_t)t << 32) | i;
            } else if (strcmp(bson_iter_key(&e), "shard") == 0 && BSON_ITER_HOLDS_UTF8(&e)) {
                h.shard = shard_by_id_reload(bson_iter_utf8(&e, NULL));
            }
        }
        if (h.shard < 0)
            continue;
        if (ch->nhist == cap) {
            cap = cap ? cap * 2 : 4;
            rt_hist_t *n = realloc(ch->hist, cap * sizeof(*n));
            if (n == NULL)
                return;
            ch->hist = n;
        }
        ch->hist[ch->nhist++] = h;
    }
}

/* Build ns's routing table from the config servers. */
static rt_coll_t *coll_load(const char *ns, sbl_err_t *err)
{
    char db[128];
    const char *dot = strchr(ns, '.');
    snprintf(db, sizeof(db), "%.*s", dot ? (int)(dot - ns) : (int)strlen(ns), ns);
    int primary = rt_db_primary(db, false, err);
    if (primary == -2)
        return NULL;
    rt_coll_t *c = calloc(1, sizeof(*c));
    c->refs = 1;
    snprintf(c->ns, sizeof(c->ns), "%s", ns);
    c->primary = primary;
    /* a database nobody created yet: answer from any shard, but do not
     * remember it (its first write chooses the real primary) */
    c->transient = primary >= 0 && db_cached(db, &c->dbv) < 0;
    c->hashed_pos = -1;
    if (primary == -1)
        return c; /* config and admin live on the config servers */

    bson_t arr = BSON_INITIALIZER, filter = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&filter, "_id", ns);
    int rc = rt_cfg_find_all("collections", &filter, NULL, &arr, err);
    bson_destroy(&filter);
    bson_iter_t it, f;
    bson_value_t uuid = {0};
    if (rc == 0 && bson_iter_init(&it, &arr) && bson_iter_next(&it) &&
        bson_iter_recurse(&it, &f)) {
        bool dropped = false;
        while (bson_iter_next(&f)) {
            const char *k = bson_iter_key(&f);
            if (strcmp(k, "key") == 0 && BSON_ITER_HOLDS_DOCUMENT(&f)) {
                bson_t kd;
                sbl_iter_doc(&f, &kd);
                c->key = bson_copy(&kd);
            } else if (strcmp(k, "unique") == 0) {
                c->unique = bson_iter_as_bool(&f);
            } else if (strcmp(k, "lastmodEpoch") == 0 && BSON_ITER_HOLDS_OID(&f)) {
                bson_oid_copy(bson_iter_oid(&f), &c->version.epoch);
            } else if (strcmp(k, "timestamp") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&f)) {
                bson_iter_timestamp(&f, &c->version.ts_t, &c->version.ts_i);
            } else if (strcmp(k, "uuid") == 0) {
                bson_value_copy(bson_iter_value(&f), &uuid);
            } else if (strcmp(k, "dropped") == 0) {
                dropped = bson_iter_as_bool(&f);
            }
        }
        c->sharded = !dropped && c->key != NULL && uuid.value_type != BSON_TYPE_EOD;
    }
    bson_destroy(&arr);
    if (rc != 0 || !c->sharded) {
        if (uuid.value_type != BSON_TYPE_EOD)
            bson_value_destroy(&uuid);
        if (rc != 0) {
            rt_coll_release(c);
            return NULL;
        }
        c->sharded = false;
        return c;
    }
    c->nkey = sbl_shard_key_shape(c->key, &c->hashed_pos);
    c->hashed = c->hashed_pos >= 0;

    bson_t chunks = BSON_INITIALIZER, cf = BSON_INITIALIZER;
    sbl_append_value(&cf, "uuid", -1, &uuid);
    bson_value_destroy(&uuid);
    rc = rt_cfg_find_all("chunks", &cf, NULL, &chunks, err);
    bson_destroy(&cf);
    size_t cap = 0;
    if (rc == 0 && bson_iter_init(&it, &chunks))
        while (bson_iter_next(&it)) {
            if (!bson_iter_recurse(&it, &f))
                continue;
            rt_chunk_t ch = {0};
            ch.shard = -1;
            while (bson_iter_next(&f)) {
                const char *k = bson_iter_key(&f);
                bson_t d;
                if (strcmp(k, "min") == 0 && sbl_iter_doc(&f, &d))
                    ch.min = bson_copy(&d);
                else if (strcmp(k, "max") == 0 && sbl_iter_doc(&f, &d))
                    ch.max = bson_copy(&d);
                else if (strcmp(k, "shard") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                    ch.shard = shard_by_id_reload(bson_iter_utf8(&f, NULL));
                else if (strcmp(k, "lastmod") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&f))
                    bson_iter_timestamp(&f, &ch.major, &ch.minor);
                else if (strcmp(k, "history") == 0)
                    hist_load(&ch, &f);
            }
            if (ch.min == NULL || ch.max == NULL || ch.shard < 0) {
                if (ch.min)
                    bson_destroy(ch.min);
                if (ch.max)
                    bson_destroy(ch.max);
                free(ch.hist);
                rc = sbl_err_set(err, SBL_E_InternalError, "bad chunk document for %s", ns);
                break;
            }
            if (c->nchunks == cap) {
                cap = cap ? cap * 2 : 8;
                c->chunks = realloc(c->chunks, cap * sizeof(*c->chunks));
            }
            c->chunks[c->nchunks++] = ch;
            if (version_less(&c->version, ch.major, ch.minor)) {
                c->version.major = ch.major;
                c->version.minor = ch.minor;
            }
            rt_version_t *pv = &c->placement[ch.shard];
            if (version_less(pv, ch.major, ch.minor)) {
                pv->major = ch.major;
                pv->minor = ch.minor;
            }
        }
    bson_destroy(&chunks);
    if (rc == 0 && c->nchunks == 0)
        rc = sbl_err_set(err, SBL_E_InternalError, "%s is sharded but has no chunks", ns);
    if (rc != 0) {
        rt_coll_release(c);
        return NULL;
    }
    qsort(c->chunks, c->nchunks, sizeof(*c->chunks), chunk_cmp);
    for (int i = 0; i < RT_MAX_SHARDS; i++) {
        c->placement[i].epoch = c->version.epoch;
        c->placement[i].ts_t = c->version.ts_t;
        c->placement[i].ts_i = c->version.ts_i;
    }
    return c;
}

rt_coll_t *rt_coll_cached(const char *ns)
{
    rt_coll_t *c = NULL;
    pthread_rwlock_rdlock(&meta_lock);
    for (size_t i = 0; i < ncolls; i++)
        if (strcmp(colls[i].ns, ns) == 0) {
            c = colls[i].c;
            __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
            break;
        }
    pthread_rwlock_unlock(&meta_lock);
    return c;
}

rt_coll_t *rt_coll_get(const char *ns, bool force, sbl_err_t *err)
{
    rt_coll_t *c = NULL;
    if (!force && (c = rt_coll_cached(ns)) != NULL)
        return c;
    pthread_mutex_lock(&refresh_lock); /* one refresh at a time: no stampede */
    if (force) { /* its database too: StaleDbVersion comes here as StaleConfig does */
        char db[128];
        const char *dot = strchr(ns, '.');
        snprintf(db, sizeof(db), "%.*s", dot ? (int)(dot - ns) : (int)strlen(ns), ns);
        rt_db_forget(db);
    }
    c = coll_load(ns, err);
    if (c != NULL && !c->transient) {
        __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL); /* the cache's reference */
        rt_coll_t *old = NULL;
        pthread_rwlock_wrlock(&meta_lock);
        size_t i;
        for (i = 0; i < ncolls; i++)
            if (strcmp(colls[i].ns, ns) == 0)
                break;
        if (i == ncolls && ncolls < RT_MAX_COLLS) {
            colls = realloc(colls, (ncolls + 1) * sizeof(*colls));
            snprintf(colls[ncolls].ns, sizeof(colls[ncolls].ns), "%s", ns);
            colls[ncolls].c = NULL;
            ncolls++;
        }
        if (i < ncolls) {
            old = colls[i].c;
            colls[i].c = c;
        } else {
            rt_coll_release(c); /* cache full: this request's reference only */
        }
        pthread_rwlock_unlock(&meta_lock);
        rt_coll_release(old);
    }
    pthread_mutex_unlock(&refresh_lock);
    return c;
}

rt_coll_t *rt_sharded_coll(const char *ns, sbl_err_t *err)
{
    if (ns == NULL || strchr(ns, '.') == NULL) {
        sbl_err_set(err, SBL_E_InvalidNamespace, "the command needs a collection's full "
                    "namespace (\"<database>.<collection>\")");
        return NULL;
    }
    rt_coll_t *c = rt_coll_get(ns, true, err);
    if (c != NULL && !c->sharded) {
        rt_coll_release(c);
        sbl_err_set(err, SBL_E_NamespaceNotSharded, "Collection %s is not sharded.", ns);
        return NULL;
    }
    return c;
}

void rt_meta_flush(void)
{
    pthread_rwlock_wrlock(&meta_lock);
    for (size_t i = 0; i < ncolls; i++)
        rt_coll_release(colls[i].c);
    free(colls);
    colls = NULL;
    ncolls = 0;
    free(dbs);
    dbs = NULL;
    ndbs = 0;
    pthread_rwlock_unlock(&meta_lock);
}

/* Element writers for rt_append_version's two small documents, built as
 * bytes (little-endian, as BSON is): each command a router sends a shard
 * carries them, and five bson_append_* calls per document cost more than
 * the rest of a loop find's forwarding (~3,900 instructions of ~46,000). */
static uint8_t *el_head(uint8_t *p, uint8_t type, const char *key)
{
    size_t n = strlen(key) + 1;
    *p++ = type;
    memcpy(p, key, n);
    return p + n;
}

static uint8_t *el_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

/* a Timestamp(t, i): the increment in the low four bytes, then the time */
static uint8_t *el_ts(uint8_t *p, const char *key, uint32_t t, uint32_t i)
{
    return el_u32(el_u32(el_head(p, BSON_TYPE_TIMESTAMP, key), i), t);
}

/* Closes the document begun at doc (its length, the terminating 0) and
 * appends it to cmd as field. */
static void el_done(bson_t *cmd, const char *field, uint8_t *doc, uint8_t *end)
{
    *end++ = 0;
    el_u32(doc, (uint32_t)(end - doc));
    bson_t d;
    if (bson_init_static(&d, doc, (size_t)(end - doc)))
        bson_append_document(cmd, field, -1, &d);
}

void rt_append_version(bson_t *cmd, const rt_coll_t *c, int shard)
{
    uint8_t doc[96], *p = doc + 4;
    static const rt_version_t unsharded; /* epoch 0, Timestamp(0, 0), 0|0 */
    const rt_version_t *v = c != NULL && c->sharded ? &c->placement[shard] : &unsharded;
    p = el_head(p, BSON_TYPE_OID, "e");
    memcpy(p, v->epoch.bytes, 12);
    p = el_ts(p + 12, "t", v->ts_t, v->ts_i);
    p = el_ts(p, "v", v->major, v->minor);
    el_done(cmd, "shardVersion", doc, p);
    if (c != NULL && !c->sharded && c->dbv.known) {
        p = el_u32(el_head(doc + 4, BSON_TYPE_BINARY, "uuid"), 16);
        *p++ = BSON_SUBTYPE_UUID;
        memcpy(p, c->dbv.uuid, 16);
        p = el_ts(p + 16, "timestamp", c->dbv.ts_t, c->dbv.ts_i);
        p = el_u32(el_head(p, BSON_TYPE_INT32, "lastMod"), (uint32_t)c->dbv.lastmod);
        el_done(cmd, "databaseVersion", doc, p);
    }
}
