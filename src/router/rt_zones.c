/*
 * rt_zones.c: zones at the router.  addShardToZone, removeShardFromZone and
 * updateZoneKeyRange go to the config server primary as mongos sends them
 * (_configsvrAddShardToZone ...; the rules are src/cmd/zone_cmds.c's), and
 * shardCollection asks here for the first chunks of a collection that has
 * zone ranges already (mongod 7.0's initial split policies):
 *
 *   - an empty collection gets one chunk per range, on the shards of its
 *     zone in turn, and one per gap before, between and after the ranges, on
 *     every shard in turn (by name; draining shards get none);
 *   - with presplitHashedZones: true (a hashed field in the key) each range
 *     is split further over the hashed field's values, so that every shard
 *     of the zone gets chunks of it: numInitialChunks (default: 2 per shard
 *     holding a zone) spread over those shards, each shard's share divided
 *     among the ranges it holds;
 *   - a collection that holds documents gets the default single chunk (the
 *     balancer then splits it at the ranges' bounds and moves the pieces).
 */
#include "router/router_int.h"

#include "doc/doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the commands ---- */

int rt_cmd_zone(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    static const char *const names[][2] = {
        {"addShardToZone", "_configsvrAddShardToZone"},
        {"removeShardFromZone", "_configsvrRemoveShardFromZone"},
        {"updateZoneKeyRange", "_configsvrUpdateZoneKeyRange"},
    };
    bson_iter_t it;
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it))
        return sbl_err_set(err, SBL_E_BadValue, "empty command");
    const char *name = bson_iter_key(&it), *to = NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcasecmp(name, names[i][0]) == 0)
            to = names[i][1];
    if (to == NULL)
        return sbl_err_set(err, SBL_E_CommandNotFound, "no such command: '%s'", name);
    if (strcmp(db, "admin") != 0)
        return sbl_err_set(err, SBL_E_Unauthorized, "%s may only be run against the admin "
                           "database.", name);
    bson_t fwd = BSON_INITIALIZER, wc, r;
    sbl_append_value(&fwd, to, -1, bson_iter_value(&it));
    static const char *const fields[] = {"zone", "min", "max"};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (bson_iter_init_find(&it, cmd, fields[i]))
            sbl_append_value(&fwd, fields[i], -1, bson_iter_value(&it));
    BSON_APPEND_DOCUMENT_BEGIN(&fwd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&fwd, &wc);
    int rc = rt_run(-1, "admin", &fwd, &r, err);
    bson_destroy(&fwd);
    if (rc != 0)
        return rc;
    int code = rt_reply_code(&r);
    if (code != 0) {
        const char *m = sbl_doc_utf8(&r, "errmsg");
        rc = sbl_err_set(err, code, "%s", m ? m : "error");
    }
    bson_destroy(&r);
    (void)reply; /* mongos answers {ok: 1} */
    return rc;
}

/* ---- shardCollection's first chunks ---- */

#define MAXF 32       /* shard key fields */
#define MAX_TAGS 1024 /* ranges of one namespace */

typedef struct tag {
    bson_t min, max; /* views into the config.tags answer */
    const char *zone;
} tag_t;

/* A document's field: its name and a view of its value (no copy). */
typedef struct fld {
    const char *key;
    bson_value_t v;
} fld_t;

static int fields_of(const bson_t *d, fld_t *out, int max)
{
    int n = 0;
    bson_iter_t it;
    bson_iter_init(&it, d);
    while (n < max && bson_iter_next(&it)) {
        out[n].key = bson_iter_key(&it);
        sbl_iter_value(&it, &out[n++].v);
    }
    return n;
}

static bool hashed_ok(const fld_t *f)
{
    bson_type_t t = f->v.value_type;
    return t == BSON_TYPE_INT64 || t == BSON_TYPE_MINKEY || t == BSON_TYPE_MAXKEY;
}

static bool is_hashed(const fld_t *k)
{
    return k->v.value_type == BSON_TYPE_UTF8 && strcmp(k->v.value.v_utf8.str, "hashed") == 0;
}

static int range_error(sbl_err_t *err, int code, const char *fmt, const bson_t *a,
                       const bson_t *b, const bson_t *c)
{
    char *x = bson_as_relaxed_extended_json(a, NULL), *y = bson_as_relaxed_extended_json(b, NULL);
    char *z = c ? bson_as_relaxed_extended_json(c, NULL) : NULL;
    sbl_err_set(err, code, fmt, x, y, z ? z : "");
    bson_free(x);
    bson_free(y);
    bson_free(z);
    return code;
}

/* mongod's validateShardKeyAgainstExistingZones: each range names the
 * proposed key's fields, hashed ones with NumberLong, MinKey or MaxKey. */
static int check_against_key(const tag_t *t, const bson_t *key, sbl_err_t *err)
{
    fld_t a[MAXF], b[MAXF], k[MAXF];
    int na = fields_of(&t->min, a, MAXF), nb = fields_of(&t->max, b, MAXF);
    int nk = fields_of(key, k, MAXF);
    for (int i = 0; i < na && i < nk; i++) {
        if (i >= nb || strcmp(a[i].key, b[i].key) != 0)
            return range_error(err, SBL_E_InvalidOptions, "the min and max of the existing zone "
                               "%s -->> %s have non-matching keys%s", &t->min, &t->max, NULL);
        bool more = i + 1 < na, kmore = i + 1 < nk;
        if (strcmp(a[i].key, k[i].key) != 0 || more != kmore)
            return range_error(err, SBL_E_InvalidOptions, "the proposed shard key %s does not "
                               "match with the shard key of the existing zone %s -->> %s", key,
                               &t->min, &t->max);
        if (is_hashed(&k[i]) && !(hashed_ok(&a[i]) && hashed_ok(&b[i])))
            return range_error(err, SBL_E_InvalidOptions, "cannot do hash sharding with the "
                               "proposed key %s because there exists a zone %s -->> %s whose "
                               "boundaries are not of type NumberLong, MinKey or MaxKey", key,
                               &t->min, &t->max);
    }
    return 0;
}

/* {f: MinKey ...} (max: MaxKey) over key's fields. */
static void global_bound(const bson_t *key, bool max, bson_t *out)
{
    bson_iter_t it;
    bson_iter_init(&it, key);
    while (bson_iter_next(&it))
        if (max)
            BSON_APPEND_MAXKEY(out, bson_iter_key(&it));
        else
            BSON_APPEND_MINKEY(out, bson_iter_key(&it));
}

/* The presplitHashedZones rules (mongod's PresplitHashedZonesSplitPolicy). */
static int check_presplit(const tag_t *tags, int n, const bson_t *key, int hashed_pos, bool empty,
                          sbl_err_t *err)
{
    if (!empty || n == 0 || hashed_pos < 0)
        return sbl_err_set(err, 31387, "'presplitHashedZones' is only supported when the "
                           "collection is empty, zones are set up and shard key pattern has a "
                           "hashed field");
    if (hashed_pos == 0) {
        bson_t gmin = BSON_INITIALIZER, gmax = BSON_INITIALIZER;
        global_bound(key, false, &gmin);
        global_bound(key, true, &gmax);
        bool whole = n == 1 && sbl_doc_compare(&gmin, &tags[0].min) == 0 &&
                     sbl_doc_compare(&gmax, &tags[0].max) == 0;
        bson_destroy(&gmin);
        bson_destroy(&gmax);
        return whole ? 0 : sbl_err_set(err, 31412, "For hashed prefix shard keys, "
                                       "'presplitHashedZones' is only supported when there is a "
                                       "single zone defined which covers entire shard key range");
    }
    for (int t = 0; t < n; t++) {
        fld_t a[MAXF], b[MAXF];
        int na = fields_of(&tags[t].min, a, MAXF);
        fields_of(&tags[t].max, b, MAXF);
        bool differ = false;
        for (int i = 0; i < hashed_pos && i < na; i++) {
            bson_type_t ty = a[i].v.value_type;
            if (ty == BSON_TYPE_MINKEY || ty == BSON_TYPE_MAXKEY)
                return sbl_err_set(err, 31388, "One or more zones are not defined in a manner "
                                   "that supports hashed pre-splitting. Cannot have MinKey or "
                                   "MaxKey in the lower bound for fields preceding the hashed "
                                   "field but found one, for zone %s", tags[t].zone);
            differ = differ || !sbl_value_equal(&a[i].v, &b[i].v);
        }
        if (!differ)
            return sbl_err_set(err, 31390, "One or more zones are not defined in a manner that "
                               "supports hashed pre-splitting. The value preceding hashed field "
                               "of the upper bound should be greater than that of lower bound, "
                               "for zone %s", tags[t].zone);
        if (hashed_pos >= na || a[hashed_pos].v.value_type != BSON_TYPE_MINKEY)
            return sbl_err_set(err, 31389, "One or more zones are not defined in a manner that "
                               "supports hashed pre-splitting. The hashed field value for lower "
                               "bound must be MinKey, for zone %s", tags[t].zone);
        for (int i = hashed_pos + 1; i < na; i++)
            if (a[i].v.value_type != BSON_TYPE_MINKEY)
                return sbl_err_set(err, 31391, "One or more zones are not defined in a manner "
                                   "that supports hashed pre-splitting. The fields after the "
                                   "hashed field must have MinKey value, for zone %s",
                                   tags[t].zone);
    }
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* mongod's calculateHashedSplitPoints: n chunks' n - 1 hashed values,
 * symmetric around 0, ascending, into pts. */
static int hashed_points(int64_t n, int64_t *pts)
{
    int k = 0;
    if (n <= 1)
        return 0;
    int64_t interval = (INT64_MAX / n) * 2, cur = 0;
    if (n % 2 == 0) {
        pts[k++] = 0;
        cur += interval;
    } else {
        cur += interval / 2;
    }
    for (int64_t i = 0; i < (n - 1) / 2; i++) {
        pts[k++] = cur;
        pts[k++] = -cur;
        cur += interval;
    }
    qsort(pts, (size_t)k, sizeof(pts[0]), cmp_i64);
    return k;
}

/* A split point: the range's min up to the hashed field, then h, then MinKey. */
static void split_point(const bson_t *tmin, const bson_t *key, int hashed_pos, int64_t h,
                        bson_t *out)
{
    bson_iter_t k, m;
    int i = 0;
    bson_iter_init(&k, key);
    bson_iter_init(&m, tmin);
    while (bson_iter_next(&k)) {
        bool mv = bson_iter_next(&m);
        if (i < hashed_pos && mv)
            sbl_append_value(out, bson_iter_key(&k), -1, bson_iter_value(&m));
        else if (i == hashed_pos)
            BSON_APPEND_INT64(out, bson_iter_key(&k), h);
        else
            BSON_APPEND_MINKEY(out, bson_iter_key(&k));
        i++;
    }
}

static void add_chunk(bson_t *out, const bson_t *min, const bson_t *max, int shard)
{
    char key[16];
    const char *ks;
    bson_t d;
    bson_uint32_to_string(bson_count_keys(out), &ks, key, sizeof(key));
    BSON_APPEND_DOCUMENT_BEGIN(out, ks, &d);
    BSON_APPEND_DOCUMENT(&d, "min", min);
    BSON_APPEND_DOCUMENT(&d, "max", max);
    BSON_APPEND_INT32(&d, "shard", shard);
    bson_append_document_end(out, &d);
}

static int cmp_shard_name(const void *a, const void *b)
{
    return strcmp(rt_shard_id(*(const int *)a), rt_shard_id(*(const int *)b));
}

/* The shards holding each zone (by name), from config.shards. */
typedef struct zone_shards {
    int shard[RT_MAX_SHARDS];
    int n;
} zone_shards_t;

static int shards_of_zones(const tag_t *tags, int ntags, zone_shards_t *zs, sbl_err_t *err)
{
    bson_t empty = BSON_INITIALIZER, sort = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    BSON_APPEND_INT32(&sort, "_id", 1);
    int rc = rt_cfg_find_all("shards", &empty, &sort, &arr, err);
    for (int t = 0; t < ntags; t++)
        zs[t].n = 0;
    bson_iter_t it, tf, tg;
    bson_iter_init(&it, &arr);
    while (rc == 0 && bson_iter_next(&it)) {
        bson_t s;
        const char *id;
        int idx;
        if (!sbl_iter_doc(&it, &s) || (id = sbl_doc_utf8(&s, "_id")) == NULL ||
            (idx = rt_shard_find(id)) < 0 || !rt_shard_takes_data(idx) ||
            !bson_iter_init_find(&tf, &s, "tags") ||
            !bson_iter_recurse(&tf, &tg))
            continue;
        while (bson_iter_next(&tg))
            for (int t = 0; t < ntags; t++)
                if (BSON_ITER_HOLDS_UTF8(&tg) && zs[t].n < RT_MAX_SHARDS &&
                    strcmp(bson_iter_utf8(&tg, NULL), tags[t].zone) == 0)
                    zs[t].shard[zs[t].n++] = idx;
    }
    bson_destroy(&empty);
    bson_destroy(&sort);
    bson_destroy(&arr);
    return rc;
}

/* The chunks of one range under presplitHashedZones: per_shard chunks for
 * each shard of its zone, divided among the ranges that shard holds. */
static void presplit_range(const tag_t *t, const zone_shards_t *zs, const int *ranges_on,
                           int64_t per_shard, const bson_t *key, int hashed_pos, bson_t *out)
{
    int64_t share[RT_MAX_SHARDS], total = 0;
    for (int i = 0; i < zs->n; i++) {
        int64_t r = ranges_on[zs->shard[i]];
        share[i] = (per_shard + r - 1) / r;
        total += share[i];
    }
    int64_t *pts = calloc((size_t)total + 1, sizeof(int64_t));
    if (pts == NULL)
        return;
    int np = hashed_points(total, pts), p = 0;
    bson_t lo = BSON_INITIALIZER, hi = BSON_INITIALIZER;
    bson_concat(&lo, &t->min);
    for (int i = 0; i < zs->n; i++)
        for (int64_t c = 0; c < share[i]; c++, p++) {
            bson_reinit(&hi);
            if (p < np)
                split_point(&t->min, key, hashed_pos, pts[p], &hi);
            else
                bson_concat(&hi, &t->max);
            add_chunk(out, &lo, &hi, zs->shard[i]);
            bson_reinit(&lo);
            bson_concat(&lo, &hi);
        }
    bson_destroy(&lo);
    bson_destroy(&hi);
    free(pts);
}

int rt_zone_first_chunks(const char *ns, const bson_t *key, int hashed_pos, bool empty,
                         bool presplit, int64_t nchunks, bson_t *out, sbl_err_t *err)
{
    bson_t f = BSON_INITIALIZER, sort = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    /* views into arr (bson_t wants 128-byte alignment), and their zones' shards */
    tag_t *tags = aligned_alloc(128, MAX_TAGS * sizeof(tag_t));
    zone_shards_t *zs = calloc(MAX_TAGS, sizeof(zone_shards_t));
    int *next_in_zone = calloc(MAX_TAGS, sizeof(int));
    int ntags = 0, rc = 0;
    if (tags == NULL || zs == NULL || next_in_zone == NULL) {
        rc = sbl_err_set(err, SBL_E_InternalError, "out of memory");
        goto out;
    }
    BSON_APPEND_UTF8(&f, "ns", ns);
    BSON_APPEND_INT32(&sort, "min", 1);
    rc = rt_cfg_find_all("tags", &f, &sort, &arr, err);
    bson_iter_t it, v;
    bson_iter_init(&it, &arr);
    while (rc == 0 && bson_iter_next(&it) && ntags < MAX_TAGS) {
        bson_t t;
        tag_t *g = &tags[ntags];
        if (sbl_iter_doc(&it, &t) && (g->zone = sbl_doc_utf8(&t, "tag")) != NULL &&
            bson_iter_init_find(&v, &t, "min") && sbl_iter_doc(&v, &g->min) &&
            bson_iter_init_find(&v, &t, "max") && sbl_iter_doc(&v, &g->max))
            rc = check_against_key(&tags[ntags++], key, err);
    }
    if (rc == 0 && nchunks != 0 && (hashed_pos < 0 || !empty))
        rc = sbl_err_set(err, SBL_E_InvalidOptions, "numInitialChunks is only supported when "
                         "the collection is empty and has a hashed field in the shard key "
                         "pattern");
    if (rc == 0 && nchunks != 0 && hashed_pos > 0 && !presplit)
        rc = sbl_err_set(err, SBL_E_InvalidOptions, "When the prefix of the hashed shard key is a "
                         "range field, 'numInitialChunks' can only be used when the "
                         "'presplitHashedZones' is true");
    if (rc == 0 && presplit)
        rc = check_presplit(tags, ntags, key, hashed_pos, empty, err);
    if (rc != 0 || ntags == 0 || !empty)
        goto out;
    if ((rc = shards_of_zones(tags, ntags, zs, err)) != 0)
        goto out;
    for (int t = 0; t < ntags; t++)
        if (zs[t].n == 0) {
            rc = sbl_err_set(err, 50973, "Cannot shard collection %s due to zone %s which is not "
                             "assigned to a shard. Please assign this zone to a shard.", ns,
                             tags[t].zone);
            goto out;
        }
    /* every shard not draining by name, for the gaps; per shard, how many
     * ranges it holds */
    int all[RT_MAX_SHARDS], nall = 0, ranges_on[RT_MAX_SHARDS] = {0}, holders = 0;
    for (int i = 0; i < rt_shard_count(); i++)
        if (rt_shard_takes_data(i))
            all[nall++] = i;
    qsort(all, (size_t)nall, sizeof(all[0]), cmp_shard_name);
    for (int t = 0; t < ntags; t++)
        for (int i = 0; i < zs[t].n; i++)
            if (ranges_on[zs[t].shard[i]]++ == 0)
                holders++;
    int64_t want = nchunks ? nchunks : 2 * (int64_t)holders;
    int64_t per_shard = (want + holders - 1) / holders;
    int next_gap = 0;
    bson_t last = BSON_INITIALIZER, gmax = BSON_INITIALIZER;
    global_bound(key, false, &last);
    global_bound(key, true, &gmax);
    for (int t = 0; t < ntags; t++) {
        if (sbl_doc_compare(&tags[t].min, &last) > 0)
            add_chunk(out, &last, &tags[t].min, all[next_gap++ % nall]);
        if (presplit) {
            presplit_range(&tags[t], &zs[t], ranges_on, per_shard, key, hashed_pos, out);
        } else {
            /* round-robin over the zone's shards, per zone name */
            int first = t;
            for (int u = 0; u < t; u++)
                if (strcmp(tags[u].zone, tags[t].zone) == 0) {
                    first = u;
                    break;
                }
            add_chunk(out, &tags[t].min, &tags[t].max,
                      zs[t].shard[next_in_zone[first]++ % zs[t].n]);
        }
        bson_reinit(&last);
        bson_concat(&last, &tags[t].max);
    }
    if (sbl_doc_compare(&last, &gmax) < 0)
        add_chunk(out, &last, &gmax, all[next_gap % nall]);
    bson_destroy(&last);
    bson_destroy(&gmax);
out:
    bson_destroy(&f);
    bson_destroy(&sort);
    bson_destroy(&arr);
    free(tags);
    free(zs);
    free(next_in_zone);
    return rc;
}
