/*
 * balancer_zones.c: the balancer's zone policy, after mongod 7.0's.
 * balancer.c hands each collection here first (with each shard's data size
 * of it); a collection with zone ranges (config.tags, zone_cmds.c) is
 * balanced here, one action a round:
 *
 *   1. a chunk that straddles a zone range's boundary is split at it
 *      (written to config.chunks under the commit lock, so it does not
 *      interleave with a migration's commit, which then fails on the
 *      changed bounds or version instead);
 *   2. a chunk inside a zone's range on a shard outside that zone moves to
 *      the zone's shard holding the least data of the collection, and a
 *      chunk on a draining shard to the shard with the least it may be on;
 *   3. within each zone, and among the chunks in no zone over every shard,
 *      data sizes are evened out as balancer.c evens out a collection
 *      (mongod compares each shard's whole data of the collection, over the
 *      zone's shards, and moves about a chunk size of the zone's chunks).
 *
 * With bc->dry nothing is split or moved: bc->why says what would be
 * (balancerCollectionStatus).
 *
 * A chunk is in a zone when a range holds it whole; after step 1 every
 * chunk is in one zone or none.  A zone that no shard (not draining) holds
 * leaves its chunks where they are.
 */
#include "cmd/bal_size.h"
#include "cmd/cmd_int.h"
#include "cmd/migrate_int.h"

#include "common/log.h"
#include "doc/doc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANGES 128
#define MAX_ZONES 64
#define MAX_SHARDS 64
#define BUSY 3 /* a shard was busy: nothing more this round (reported as 0) */

typedef struct zrange {
    bson_t min, max; /* views into the config.tags answer */
    int zone;        /* index into zones_t.names */
} zrange_t;

typedef struct zones {
    zrange_t r[MAX_RANGES];
    int nr;
    char names[MAX_ZONES][128];
    int nz;
    bool has[MAX_SHARDS][MAX_ZONES]; /* ids[s] holds zone z */
} zones_t;

#define zlog(...) sbl_cmd_shard_log(SBL_LOG_INFO, 21001, __VA_ARGS__)

static int zone_index(zones_t *z, const char *name, bool add)
{
    for (int i = 0; i < z->nz; i++)
        if (strcmp(z->names[i], name) == 0)
            return i;
    if (!add || z->nz == MAX_ZONES)
        return -1;
    snprintf(z->names[z->nz], sizeof(z->names[0]), "%s", name);
    return z->nz++;
}

/* ns's ranges (tags, kept alive by the caller) and which of ids holds which
 * zone; false when ns has no range. */
static bool load_zones(const char *ns, bson_t *tags, char ids[][128], int nshards, zones_t *z)
{
    bson_t f = BSON_INITIALIZER, sort = BSON_INITIALIZER, empty = BSON_INITIALIZER, shards;
    bson_iter_t it, v;
    sbl_err_t e = {0};
    z->nr = z->nz = 0;
    memset(z->has, 0, sizeof(z->has));
    BSON_APPEND_UTF8(&f, "ns", ns);
    BSON_APPEND_INT32(&sort, "min", 1);
    sbl_cmd_config_find("tags", &f, &sort, tags, &e);
    bson_iter_init(&it, tags);
    while (bson_iter_next(&it) && z->nr < MAX_RANGES) {
        bson_t t;
        zrange_t *r = &z->r[z->nr];
        const char *name;
        if (!sbl_iter_doc(&it, &t) || (name = sbl_doc_utf8(&t, "tag")) == NULL ||
            !bson_iter_init_find(&v, &t, "min") || !sbl_iter_doc(&v, &r->min) ||
            !bson_iter_init_find(&v, &t, "max") || !sbl_iter_doc(&v, &r->max) ||
            (r->zone = zone_index(z, name, true)) < 0)
            continue;
        z->nr++;
    }
    if (z->nr > 0 && sbl_cmd_config_find("shards", &empty, NULL, &shards, &e) == 0) {
        bson_iter_init(&it, &shards);
        while (bson_iter_next(&it)) {
            bson_t s;
            bson_iter_t tg;
            const char *id;
            int si = -1;
            if (!sbl_iter_doc(&it, &s) || (id = sbl_doc_utf8(&s, "_id")) == NULL ||
                !bson_iter_init_find(&tg, &s, "tags") || !bson_iter_recurse(&tg, &v))
                continue;
            for (int i = 0; i < nshards && i < MAX_SHARDS; i++)
                if (strcmp(ids[i], id) == 0)
                    si = i;
            while (si >= 0 && bson_iter_next(&v)) {
                int zi = BSON_ITER_HOLDS_UTF8(&v) ? zone_index(z, bson_iter_utf8(&v, NULL), false)
                                                  : -1;
                if (zi >= 0)
                    z->has[si][zi] = true;
            }
        }
        bson_destroy(&shards);
    }
    bson_destroy(&f);
    bson_destroy(&sort);
    bson_destroy(&empty);
    return z->nr > 0;
}

/* The zone of [min, max): a range holding it whole (-1: none).  *split
 * (initialised by the caller, left alone when there is none): a range
 * boundary strictly inside it, the lowest. */
static int chunk_zone(const zones_t *z, const bson_t *min, const bson_t *max, const bson_t **split)
{
    int zone = -1;
    for (int i = 0; i < z->nr; i++) {
        const zrange_t *r = &z->r[i];
        const bson_t *b = NULL;
        if (sbl_doc_compare(min, &r->min) < 0 && sbl_doc_compare(&r->min, max) < 0)
            b = &r->min;
        else if (sbl_doc_compare(min, &r->max) < 0 && sbl_doc_compare(&r->max, max) < 0)
            b = &r->max;
        if (b != NULL && (*split == NULL || sbl_doc_compare(b, *split) < 0))
            *split = b;
        if (sbl_doc_compare(&r->min, min) <= 0 && sbl_doc_compare(max, &r->max) <= 0)
            zone = r->zone;
    }
    return zone;
}

static bool bound_of(const bson_t *d, const char *k, bson_t *out)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, d, k) && sbl_iter_doc(&it, out);
}

/* The next chunk of the array under it (c: the document; its shard and
 * bounds); false past the last one. */
static bool next_chunk(bson_iter_t *it, bson_t *c, const char **shp, bson_t *min, bson_t *max)
{
    while (bson_iter_next(it))
        if (sbl_iter_doc(it, c) && (*shp = sbl_doc_utf8(c, "shard")) != NULL &&
            bound_of(c, "min", min) && bound_of(c, "max", max))
            return true;
    return false;
}

/*
 * Split ns's chunk (as the balancer read it) at at: it keeps [min, at) with
 * the collection's next minor version, a new chunk takes [at, max) with the
 * one after, its owner and history (as a router's split does).  Nothing when
 * the chunk changed since it was read.  (Also balancer_size.c's split before
 * it moves about one chunk size.)
 */
int sbl_bal_split_chunk(const char *ns, const bson_t *chunk, const bson_t *at, sbl_err_t *err)
{
    bson_iter_t uuid, id, it;
    bson_t f = BSON_INITIALIZER, now, cur, cmax;
    bson_iter_t cur_it;
    const char *shard = sbl_doc_utf8(chunk, "shard");
    if (!bson_iter_init_find(&uuid, chunk, "uuid") || !bson_iter_init_find(&id, chunk, "_id") ||
        shard == NULL || !bound_of(chunk, "max", &cmax))
        return 0;
    sbl_cmd_chunks_lock(true);
    sbl_append_value(&f, "uuid", 4, bson_iter_value(&uuid));
    int rc = sbl_cmd_config_find("chunks", &f, NULL, &now, err);
    uint32_t major = 0, minor = 0;
    bool same = false;
    bson_iter_init(&it, &now);
    while (rc == 0 && bson_iter_next(&it)) {
        bson_t c, m;
        bson_iter_t v;
        uint32_t ma = 0, mi = 0;
        if (!sbl_iter_doc(&it, &c))
            continue;
        if (bson_iter_init_find(&v, &c, "lastmod") && BSON_ITER_HOLDS_TIMESTAMP(&v))
            bson_iter_timestamp(&v, &ma, &mi);
        if (ma > major || (ma == major && mi > minor)) {
            major = ma;
            minor = mi;
        }
        if (bson_iter_init_find(&v, &c, "_id") &&
            sbl_value_equal(bson_iter_value(&v), bson_iter_value(&id)) &&
            sbl_doc_utf8(&c, "shard") != NULL && strcmp(sbl_doc_utf8(&c, "shard"), shard) == 0 &&
            bound_of(&c, "max", &m) && sbl_doc_compare(&m, &cmax) == 0) {
            same = true;
            cur_it = it;
        }
    }
    if (rc == 0 && same && sbl_iter_doc(&cur_it, &cur)) {
        bson_t doc = BSON_INITIALIZER, op = BSON_INITIALIZER, q, u, set;
        bson_oid_t oid;
        bson_iter_t v;
        bson_oid_init(&oid, NULL);
        BSON_APPEND_OID(&doc, "_id", &oid);
        sbl_append_value(&doc, "uuid", 4, bson_iter_value(&uuid));
        BSON_APPEND_DOCUMENT(&doc, "min", at);
        BSON_APPEND_DOCUMENT(&doc, "max", &cmax);
        BSON_APPEND_UTF8(&doc, "shard", shard);
        BSON_APPEND_TIMESTAMP(&doc, "lastmod", major, minor + 2);
        if (bson_iter_init_find(&v, &cur, "onCurrentShardSince"))
            sbl_append_value(&doc, "onCurrentShardSince", -1, bson_iter_value(&v));
        if (bson_iter_init_find(&v, &cur, "history"))
            sbl_append_value(&doc, "history", -1, bson_iter_value(&v));
        rc = sbl_zone_config_write("insert", "chunks", &doc, NULL, err);
        BSON_APPEND_DOCUMENT_BEGIN(&op, "q", &q);
        sbl_append_value(&q, "_id", 3, bson_iter_value(&id));
        bson_append_document_end(&op, &q);
        BSON_APPEND_DOCUMENT_BEGIN(&op, "u", &u);
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
        BSON_APPEND_DOCUMENT(&set, "max", at);
        BSON_APPEND_TIMESTAMP(&set, "lastmod", major, minor + 1);
        bson_append_document_end(&u, &set);
        bson_append_document_end(&op, &u);
        if (rc == 0)
            rc = sbl_zone_config_write("update", "chunks", &op, NULL, err);
        bson_destroy(&doc);
        bson_destroy(&op);
        if (rc == 0) {
            char *aj = bson_as_relaxed_extended_json(at, NULL);
            zlog("split a chunk of %s on %s at the zone boundary %s", ns, shard, aj);
            bson_free(aj);
        }
    }
    sbl_cmd_chunks_lock(false);
    bson_destroy(&f);
    bson_destroy(&now);
    return rc;
}

int sbl_zones_balance(sbl_bal_coll_t *bc, const bson_t *chunks, char ids[][128], int nshards)
{
    const char *ns = bc->ns;
    zones_t *z = malloc(sizeof(*z)); /* large: not on the stack */
    bson_t tags = BSON_INITIALIZER;
    int result = SBL_ZONES_NONE;
    if (nshards > MAX_SHARDS)
        nshards = MAX_SHARDS;
    if (z == NULL || !load_zones(ns, &tags, ids, nshards, z))
        goto out;
    result = 0;
    bson_iter_t it;
    /* 1. splits at range boundaries */
    bson_t c, min, max;
    const char *sh;
    bson_iter_init(&it, chunks);
    while (result == 0 && next_chunk(&it, &c, &sh, &min, &max)) {
        const bson_t *at = NULL;
        chunk_zone(z, &min, &max, &at);
        if (at != NULL && bc->dry) {
            bc->why = "zoneViolation";
            result = 1;
        } else if (at != NULL) {
            sbl_err_t e = {0};
            result = sbl_bal_split_chunk(ns, &c, at, &e) == 0 ? 1 : -1;
        }
    }
    /* 2. a chunk on a shard outside its zone goes to the zone's shard with
     * the least data; one on a draining shard (not in ids), to the shard
     * with the least data it may be on */
    bson_iter_init(&it, chunks);
    while (result == 0 && next_chunk(&it, &c, &sh, &min, &max)) {
        const bson_t *at = NULL;
        int zi = chunk_zone(z, &min, &max, &at), to = -1;
        bool ok = false, draining = true;
        for (int s = 0; s < nshards && !ok; s++) {
            if (strcmp(ids[s], sh) == 0)
                draining = false;
            if (zi >= 0 && !z->has[s][zi])
                continue;
            ok = strcmp(ids[s], sh) == 0;
            if (to < 0 || bc->sizes[s] < bc->sizes[to])
                to = s;
        }
        if (ok || to < 0)
            continue;
        if (!bc->dry)
            zlog("moving a chunk of %s from %s to %s (zone %s)", ns, sh, ids[to],
                 zi >= 0 ? z->names[zi] : "none");
        result = sbl_bal_move_chunk(bc, &min, &max, ids, to,
                                    draining ? "draining" : "zoneViolation");
        if (result == 0)
            result = BUSY; /* a shard was busy: nothing else this round */
    }
    /* 3. within each zone, data sizes over its shards (zone -1: no zone,
     * every shard), as mongod compares them: each shard's whole data of the
     * collection */
    for (int zi = -1; zi < z->nz && result == 0; zi++) {
        bool may[MAX_SHARDS];
        int from, to, n = 0;
        for (int s = 0; s < nshards; s++)
            may[s] = zi < 0 || z->has[s][zi];
        if (!sbl_bal_size_pick(bc->sizes, may, nshards, bc->chunk_bytes, &from, &to))
            continue;
        bson_iter_t first; /* a bson_t view cannot be copied: its iterator is */
        bool found = false;
        bson_iter_init(&it, chunks); /* from's first chunk of the zone */
        while (next_chunk(&it, &c, &sh, &min, &max)) {
            const bson_t *at = NULL;
            if (strcmp(sh, ids[from]) != 0 || chunk_zone(z, &min, &max, &at) != zi)
                continue;
            n++;
            if (!found && !sbl_chunk_is_jumbo(&c)) {
                first = it;
                found = true;
            }
        }
        if (found && sbl_iter_doc(&first, &c)) {
            result = sbl_bal_move_data(bc, &c, ids, from, to, n);
            if (result == 0)
                result = BUSY;
        }
    }
out:
    bson_destroy(&tags);
    free(z);
    return result == BUSY ? 0 : result;
}
