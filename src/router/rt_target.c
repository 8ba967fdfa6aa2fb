/*
 * rt_target.c: from documents and filters to shards.  A shard key value is
 * the key pattern's fields read from a document (sbl_shard_key_values: a
 * missing field is null; a hashed field is replaced by its hash, the same
 * 64-bit value a hashed index stores); the owning chunk is the last one whose min is <= the
 * value, by binary search over the chunks sorted by min.
 *
 * A command with a cluster time (a snapshot read's atClusterTime, or any
 * statement of a snapshot transaction, its writes included, as mongos routes
 * them) is targeted by the placement at that time: each chunk's owner is the
 * first entry of its history (config.chunks' history, newest first) valid at
 * or before it.  A shard that owned a chunk then and has given it away since
 * refuses the transaction's write there (SnapshotUnavailable, a
 * TransientTransactionError: snapshot_read.c's check_routed_at).
 *
 * What must stay true: a filter's targets are a superset of the shards that
 * hold a matching document (at the time read); only an exact equality on
 * every key field narrows to one shard.
 */
#include "router/router_int.h"

#include "doc/doc.h"
#include "shard/shard.h"
#include "storage/storage.h"

#include <string.h>

/* Compare shard key values against a bound document (same field order). */
static int key_cmp(const bson_value_t *vals, int n, const bson_t *bound)
{
    bson_iter_t it;
    int i = 0;
    bson_iter_init(&it, bound);
    while (i < n && bson_iter_next(&it)) {
        int c = sbl_value_compare(&vals[i], bson_iter_value(&it));
        if (c != 0)
            return c;
        i++;
    }
    return 0;
}

const rt_chunk_t *rt_chunk_for(const rt_coll_t *c, const bson_value_t *vals)
{
    size_t lo = 0, hi = c->nchunks; /* find the last chunk with min <= vals */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (key_cmp(vals, c->nkey, c->chunks[mid].min) >= 0)
            lo = mid;
        else
            hi = mid;
    }
    return &c->chunks[lo];
}

static int stale_history(const rt_coll_t *c, uint64_t at, sbl_err_t *err)
{
    sbl_err_set(err, SBL_E_StaleChunkHistory, "Cannot find shardId the chunk belonged to at "
                "cluster time Timestamp(%u, %u) in %s: the chunk's history does not reach back "
                "that far", (unsigned)(at >> 32), (unsigned)at, c->ns);
    return -1;
}

int rt_target_doc(const rt_coll_t *c, const bson_t *doc, sbl_err_t *err)
{
    return rt_target_key(c, doc, 0, err);
}

int rt_target_key(const rt_coll_t *c, const bson_t *doc, int flags, sbl_err_t *err)
{
    if (!c->sharded)
        return c->primary;
    bson_value_t vals[SBL_SHARD_KEY_MAX];
    sbl_shard_key_values(c->key, c->hashed_pos, doc, flags, vals);
    uint64_t at = rt_read_at();
    int owner = rt_chunk_owner_at(rt_chunk_for(c, vals), at);
    return owner >= 0 ? owner : stale_history(c, at, err);
}

/* The equality value a filter gives field f, if it gives one we can target by. */
static bool filter_eq(const bson_t *filter, const char *f, bson_value_t *out)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, filter, f)) {
        /* {a: {b: 1}} does not name a.b by equality of a.b alone; only
         * top-level keys are used for targeting. */
        return false;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_t d;
        if (!bson_iter_recurse(&it, &d) || !bson_iter_next(&d))
            return false;
        const char *k = bson_iter_key(&d);
        if (k[0] != '$') /* an exact embedded document */
            goto plain;
        if (strcmp(k, "$eq") != 0)
            return false;
        bson_iter_t e = d;
        if (bson_iter_next(&d)) /* {$eq: x, $lt: y}: not a plain equality */
            return false;
        if (BSON_ITER_HOLDS_ARRAY(&e) || BSON_ITER_HOLDS_REGEX(&e))
            return false;
        *out = *bson_iter_value(&e);
        return true;
    }
    if (BSON_ITER_HOLDS_ARRAY(&it) || BSON_ITER_HOLDS_REGEX(&it))
        return false;
plain:
    *out = *bson_iter_value(&it);
    return true;
}

bool rt_filter_has_full_key(const rt_coll_t *c, const bson_t *filter)
{
    if (!c->sharded)
        return true;
    bson_iter_t it;
    bson_value_t v;
    bson_iter_init(&it, c->key);
    while (bson_iter_next(&it))
        if (!filter_eq(filter, bson_iter_key(&it), &v))
            return false;
    return true;
}

/* The bounds a filter puts on field f (a range key's first field). */
typedef struct {
    bool has_lo, lo_incl, has_hi, hi_incl;
    bson_value_t lo, hi; /* not owned: the filter's values */
} key_range_t;

/* Tighten r's lower (lower) or upper bound to v (incl: $gte/$lte, else $gt/$lt). */
static void range_bound(key_range_t *r, bool lower, const bson_value_t *v, bool incl)
{
    bool *has = lower ? &r->has_lo : &r->has_hi, *in = lower ? &r->lo_incl : &r->hi_incl;
    bson_value_t *b = lower ? &r->lo : &r->hi;
    int c = *has ? sbl_value_compare(v, b) : 0;
    if (!*has || (lower ? c > 0 : c < 0)) {
        *b = *v;
        *in = incl;
    } else if (c == 0 && !incl) {
        *in = false;
    }
    *has = true;
}

/* The bounds a filter puts on field f in r.  False when the field is absent
 * or holds something other than an equality or comparisons. */
static bool filter_range(const bson_t *filter, const char *f, key_range_t *r)
{
    bson_iter_t it, d;
    bson_value_t v;
    memset(r, 0, sizeof(*r));
    if (filter_eq(filter, f, &v)) {
        range_bound(r, true, &v, true);
        range_bound(r, false, &v, true);
        return true;
    }
    if (!bson_iter_init_find(&it, filter, f) || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &d))
        return false;
    while (bson_iter_next(&d)) {
        const char *k = bson_iter_key(&d);
        if (BSON_ITER_HOLDS_ARRAY(&d) || BSON_ITER_HOLDS_REGEX(&d))
            return false;
        if (strcmp(k, "$gt") == 0 || strcmp(k, "$gte") == 0) {
            range_bound(r, true, bson_iter_value(&d), k[3] == 'e');
        } else if (strcmp(k, "$lt") == 0 || strcmp(k, "$lte") == 0) {
            range_bound(r, false, bson_iter_value(&d), k[3] == 'e');
        } else if (strcmp(k, "$eq") == 0) {
            range_bound(r, true, bson_iter_value(&d), true);
            range_bound(r, false, bson_iter_value(&d), true);
        } else {
            return false;
        }
    }
    return r->has_lo || r->has_hi;
}

/*
 * Whether chunk [min, max) can hold a key whose first field is in r (as
 * mongos's targeting by index bounds).  max is exclusive: with x its first
 * field, the chunk holds first fields < x, or also = x when max's other
 * fields are not all MinKey ({k: x, j: 5} holds {k: x, j: 4}).  min is
 * inclusive: the chunk holds first fields >= min's.  A comparison holds only
 * within its value's type bracket ({$gte: 5} is [5, Infinity]): a chunk whose
 * min is of a later bracket than lo, or whose max of an earlier one than hi,
 * holds none (MinKey and MaxKey bounds span every bracket).
 */
static bool chunk_in_range(const rt_chunk_t *ch, const key_range_t *r)
{
    bson_iter_t a, b;
    bson_iter_init(&a, ch->min);
    bson_iter_init(&b, ch->max);
    if (!bson_iter_next(&a) || !bson_iter_next(&b))
        return true;
    if (r->has_lo && r->lo.value_type != BSON_TYPE_MINKEY &&
        sbl_type_rank(bson_iter_type(&a)) > sbl_type_rank(r->lo.value_type))
        return false;
    if (r->has_hi && r->hi.value_type != BSON_TYPE_MAXKEY &&
        sbl_type_rank(bson_iter_type(&b)) < sbl_type_rank(r->hi.value_type))
        return false;
    if (r->has_hi) {
        int c = sbl_value_compare(bson_iter_value(&a), &r->hi);
        if (c > 0 || (c == 0 && !r->hi_incl))
            return false;
    }
    if (r->has_lo) {
        int c = sbl_value_compare(bson_iter_value(&b), &r->lo);
        if (c < 0)
            return false;
        if (c == 0) {
            if (!r->lo_incl)
                return false; /* every first field in the chunk is <= lo */
            bool holds_lo = false; /* some key with first field lo is below max */
            while (bson_iter_next(&b))
                if (bson_iter_type(&b) != BSON_TYPE_MINKEY)
                    holds_lo = true;
            if (!holds_lo)
                return false;
        }
    }
    return true;
}

int rt_chunk_owner_at(const rt_chunk_t *ch, uint64_t at)
{
    if (at == 0 || ch->nhist == 0)
        return ch->shard; /* now, or a chunk written without history */
    for (size_t i = 0; i < ch->nhist; i++)
        if (ch->hist[i].valid_after <= at)
            return ch->hist[i].shard;
    return -1;
}

/* The shards a filter can match at cluster time at (0: now); -1 with err
 * when at is older than a candidate chunk's history. */
static int target_at(const rt_coll_t *c, const bson_t *filter, uint64_t at,
                     bool shards[RT_MAX_SHARDS], sbl_err_t *err)
{
    memset(shards, 0, sizeof(bool) * RT_MAX_SHARDS);
    if (!c->sharded) {
        if (c->primary >= 0) /* -1: config and admin, on the config servers */
            shards[c->primary] = true;
        return 1;
    }
    bson_value_t vals[32], hashed;
    bson_iter_t it;
    int i = 0;
    bool full = true;
    bson_iter_init(&it, c->key);
    while (bson_iter_next(&it) && i < 32 && full) {
        full = filter_eq(filter, bson_iter_key(&it), &vals[i]);
        if (full && i == c->hashed_pos) {
            sbl_index_hash(&vals[i], &hashed);
            vals[i] = hashed;
        }
        i++;
    }
    if (full) {
        int owner = rt_chunk_owner_at(rt_chunk_for(c, vals), at);
        if (owner < 0)
            return stale_history(c, at, err);
        shards[owner] = true;
        return 1;
    }
    /* A range (or an equality) on the first field of a range key: the chunks
     * it overlaps, by the first field only (a superset). */
    key_range_t r;
    bson_iter_init(&it, c->key);
    bool ranged = c->hashed_pos != 0 && bson_iter_next(&it) &&
                  filter_range(filter, bson_iter_key(&it), &r);
    int n = 0;
    for (size_t k = 0; k < c->nchunks; k++) {
        const rt_chunk_t *ch = &c->chunks[k];
        if (ranged && !chunk_in_range(ch, &r))
            continue;
        int owner = rt_chunk_owner_at(ch, at);
        if (owner < 0)
            return stale_history(c, at, err);
        if (!shards[owner]) {
            shards[owner] = true;
            n++;
        }
    }
    return n;
}

int rt_target_read(const rt_coll_t *c, const bson_t *filter, bool shards[RT_MAX_SHARDS],
                   sbl_err_t *err)
{
    return target_at(c, filter, rt_read_at(), shards, err);
}
