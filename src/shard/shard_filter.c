/*
 * shard_filter.c: the ownership filter of routed reads and writes (mongod's shard
 * filtering, its ShardFilterStage).  A shard may hold documents of a sharded
 * collection that it does not own: inserted on it directly, left by a
 * migration that failed or by a recipient's leftovers, a range not deleted
 * yet.  Those are orphans; a routed read (find, aggregate, count, distinct
 * carrying shardVersion) drops them: the executor (src/exec) asks
 * sbl_shard_filter_owns for each document that matched; a routed update,
 * delete or findAndModify skips them (the executor, and the write of each
 * document: src/cmd/crud_write.c).  Direct reads and writes (no
 * shardVersion) see everything.
 *
 * A table is what the shard read of the collection's chunks with its
 * version: every chunk (sorted by min) with its owner and its history.  A
 * filter is the ranges the table gives this shard at one time (now, or a
 * snapshot read's atClusterTime: each chunk's first history entry valid
 * then, else its owner now), adjacent ones merged; a document's shard key
 * value is looked up by binary search over them.
 *
 * What must stay true: tables and filters are immutable once built and
 * shared by reference count, so a cursor keeps the filter it opened with;
 * a filter that owns the whole key space says so (trivial) and the executor
 * then checks nothing.
 */
#include "shard/shard_int.h"

#include "doc/doc.h"
#include "storage/storage.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A chunk bound's values in key pattern order (views into its document). */
typedef struct bound {
    int n;
    bson_value_t v[]; /* n */
} bound_t;

typedef struct tchunk {
    bson_t *min, *max;
    bound_t *lo, *hi; /* min's and max's values */
    bool mine;          /* owned by this shard now */
    uint64_t *valid;    /* history, newest first: validAfter ... */
    bool *valid_mine;   /* ... and whether the entry names this shard */
    size_t nhist;
} tchunk_t;

typedef struct table {
    atomic_int refs;
    bson_t *key;
    int nkey, hashed_pos;
    tchunk_t *c;
    size_t n;
} table_t;

typedef struct orange {
    const bound_t *min, *max; /* views into the table's chunks */
} orange_t;

struct sbl_shard_filter {
    atomic_int refs;
    char ns[256];
    table_t *t;
    orange_t *r;
    size_t n;
    bool all; /* owns [MinKey, MaxKey): nothing to check */
};

/* Compare a shard key value (vals[n]) with a bound: field by field, as far
 * as both go. */
static int key_cmp(const bson_value_t *vals, int n, const bound_t *b)
{
    for (int i = 0; i < n && i < b->n; i++) {
        int c = sbl_value_compare(&vals[i], &b->v[i]);
        if (c != 0)
            return c;
    }
    return 0;
}

static int bound_cmp(const bound_t *a, const bound_t *b)
{
    int c = key_cmp(a->v, a->n, b);
    return c != 0 ? c : a->n - b->n;
}

static int chunk_cmp(const void *a, const void *b)
{
    return bound_cmp(((const tchunk_t *)a)->lo, ((const tchunk_t *)b)->lo);
}

/* The values of bound document d (which must outlive the result); NULL when
 * out of memory. */
static bound_t *bound_of(const bson_t *d)
{
    uint32_t n = bson_count_keys(d);
    bound_t *b = calloc(1, sizeof(*b) + n * sizeof(bson_value_t));
    bson_iter_t it;
    if (b != NULL && bson_iter_init(&it, d))
        while ((uint32_t)b->n < n && bson_iter_next(&it))
            b->v[b->n++] = *bson_iter_value(&it);
    return b;
}

static void chunk_free(tchunk_t *c)
{
    bson_destroy(c->min);
    bson_destroy(c->max);
    free(c->lo);
    free(c->hi);
    free(c->valid);
    free(c->valid_mine);
}

static void table_release(table_t *t)
{
    if (t == NULL || atomic_fetch_sub(&t->refs, 1) != 1)
        return;
    for (size_t i = 0; i < t->n; i++)
        chunk_free(&t->c[i]);
    free(t->c);
    bson_destroy(t->key);
    free(t);
}

/* A bound (MinKey or MaxKey in every field) that bounds the key space. */
static bool is_extreme(const bound_t *b, bson_type_t type)
{
    for (int i = 0; i < b->n; i++)
        if (b->v[i].value_type != type)
            return false;
    return b->n > 0;
}

/* The filter of t at cluster time at (0: now); takes over one reference to t. */
static sbl_shard_filter_t *filter_of(const char *ns, table_t *t, uint64_t at)
{
    sbl_shard_filter_t *f = calloc(1, sizeof(*f));
    if (f == NULL || (t->n > 0 && (f->r = calloc(t->n, sizeof(*f->r))) == NULL)) {
        free(f);
        table_release(t);
        return NULL;
    }
    atomic_init(&f->refs, 1);
    snprintf(f->ns, sizeof(f->ns), "%s", ns);
    f->t = t;
    for (size_t i = 0; i < t->n; i++) {
        const tchunk_t *c = &t->c[i];
        bool mine = c->mine;
        for (size_t h = 0; at != 0 && h < c->nhist; h++)
            if (c->valid[h] <= at) {
                mine = c->valid_mine[h];
                break;
            }
        if (!mine)
            continue;
        if (f->n > 0 && bound_cmp(f->r[f->n - 1].max, c->lo) == 0)
            f->r[f->n - 1].max = c->hi; /* adjacent: one range */
        else
            f->r[f->n++] = (orange_t){c->lo, c->hi};
    }
    f->all = f->n == 1 && is_extreme(f->r[0].min, BSON_TYPE_MINKEY) &&
             is_extreme(f->r[0].max, BSON_TYPE_MAXKEY);
    return f;
}

/* One chunk document of config.chunks into c; false when it lacks bounds. */
static bool chunk_parse(const bson_t *d, const char *me, tchunk_t *c)
{
    bson_iter_t it, h, e;
    bson_t b;
    memset(c, 0, sizeof(*c));
    if (bson_iter_init_find(&it, d, "min") && BSON_ITER_HOLDS_DOCUMENT(&it) && sbl_iter_doc(&it, &b))
        c->min = bson_copy(&b);
    if (bson_iter_init_find(&it, d, "max") && BSON_ITER_HOLDS_DOCUMENT(&it) && sbl_iter_doc(&it, &b))
        c->max = bson_copy(&b);
    c->mine = bson_iter_init_find(&it, d, "shard") && BSON_ITER_HOLDS_UTF8(&it) &&
              strcmp(bson_iter_utf8(&it, NULL), me) == 0;
    size_t cap = 0;
    if (bson_iter_init_find(&it, d, "history") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &h))
        while (bson_iter_next(&h))
            cap++;
    if (cap > 0 && bson_iter_recurse(&it, &h)) {
        c->valid = calloc(cap, sizeof(*c->valid));
        c->valid_mine = calloc(cap, sizeof(*c->valid_mine));
        while (c->valid != NULL && c->valid_mine != NULL && bson_iter_next(&h)) {
            uint32_t t = 0, i = 0;
            bool mine = false, has_t = false;
            if (!BSON_ITER_HOLDS_DOCUMENT(&h) || !bson_iter_recurse(&h, &e))
                continue;
            while (bson_iter_next(&e)) {
                if (strcmp(bson_iter_key(&e), "validAfter") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&e)) {
                    bson_iter_timestamp(&e, &t, &i);
                    has_t = true;
                } else if (strcmp(bson_iter_key(&e), "shard") == 0 && BSON_ITER_HOLDS_UTF8(&e)) {
                    mine = strcmp(bson_iter_utf8(&e, NULL), me) == 0;
                }
            }
            if (has_t) {
                c->valid[c->nhist] = ((uint64_t)t << 32) | i;
                c->valid_mine[c->nhist++] = mine;
            }
        }
    }
    if (c->min == NULL || c->max == NULL)
        return false;
    c->lo = bound_of(c->min);
    c->hi = bound_of(c->max);
    return c->lo != NULL && c->hi != NULL;
}

sbl_shard_filter_t *shard_filter_build(const char *ns, const bson_t *key, bson_iter_t *chunks,
                                       const char *me)
{
    table_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    atomic_init(&t->refs, 1);
    t->key = bson_copy(key);
    t->nkey = sbl_shard_key_shape(key, &t->hashed_pos);
    if (t->nkey > SBL_SHARD_KEY_MAX)
        t->nkey = SBL_SHARD_KEY_MAX;
    size_t cap = 0;
    bson_iter_t c = *chunks;
    while (bson_iter_next(&c))
        cap++;
    t->c = cap > 0 ? calloc(cap, sizeof(*t->c)) : NULL;
    while (t->c != NULL && bson_iter_next(chunks)) {
        bson_t d;
        if (BSON_ITER_HOLDS_DOCUMENT(chunks) && sbl_iter_doc(chunks, &d) &&
            chunk_parse(&d, me, &t->c[t->n]))
            t->n++;
        else if (t->n < cap)
            chunk_free(&t->c[t->n]); /* a chunk without bounds: skipped */
    }
    qsort(t->c, t->n, sizeof(*t->c), chunk_cmp);
    return filter_of(ns, t, 0);
}

sbl_shard_filter_t *sbl_shard_filter_at(sbl_shard_filter_t *f, uint64_t at)
{
    if (f == NULL)
        return NULL;
    atomic_fetch_add(&f->t->refs, 1);
    sbl_shard_filter_t *g = filter_of(f->ns, f->t, at);
    return g != NULL ? g : sbl_shard_filter_ref(f);
}

sbl_shard_filter_t *sbl_shard_filter_ref(sbl_shard_filter_t *f)
{
    if (f != NULL)
        atomic_fetch_add(&f->refs, 1);
    return f;
}

void sbl_shard_filter_release(sbl_shard_filter_t *f)
{
    if (f == NULL || atomic_fetch_sub(&f->refs, 1) != 1)
        return;
    table_release(f->t);
    free(f->r);
    free(f);
}

const char *sbl_shard_filter_ns(const sbl_shard_filter_t *f)
{
    return f->ns;
}

const bson_t *sbl_shard_filter_key(const sbl_shard_filter_t *f)
{
    return f->t != NULL ? f->t->key : NULL;
}

bool sbl_shard_filter_trivial(const sbl_shard_filter_t *f)
{
    return f == NULL || f->all;
}

bool sbl_shard_filter_key_array(const sbl_shard_filter_t *f, const bson_t *doc)
{
    bson_value_t vals[SBL_SHARD_KEY_MAX];
    return f != NULL &&
           (sbl_shard_key_values(f->t->key, f->t->hashed_pos, doc, 0, vals) & SBL_SHARD_KEY_ARRAY);
}

bool sbl_shard_filter_owns(const sbl_shard_filter_t *f, const bson_t *doc)
{
    if (f == NULL || f->all)
        return true;
    if (f->n == 0)
        return false;
    const table_t *t = f->t;
    bson_value_t vals[SBL_SHARD_KEY_MAX];
    sbl_shard_key_values(t->key, t->hashed_pos, doc, 0, vals);
    size_t lo = 0, hi = f->n; /* the last range whose min <= the value */
    if (key_cmp(vals, t->nkey, f->r[0].min) < 0)
        return false;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (key_cmp(vals, t->nkey, f->r[mid].min) >= 0)
            lo = mid;
        else
            hi = mid;
    }
    return key_cmp(vals, t->nkey, f->r[lo].max) < 0;
}
