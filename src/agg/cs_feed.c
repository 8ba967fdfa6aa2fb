/*
 * cs_feed.c: one shared read of the oplog per change-stream scope.  Streams
 * that watch the same collection, database or deployment with the same
 * showExpandedEvents share a feed: it reads each majority-committed oplog
 * entry once and builds its events once (as a stream with fullDocument
 * default and no stages would), keeping them in a bounded ring.  A stream's
 * getMore copies the events after its resume point out of the ring and runs
 * only its own part on them (updateLookup, its start point, the stages after
 * $changeStream, the size limit); a stream whose resume point is not in the
 * ring (it fell behind, or resumed from before it) reads the oplog itself
 * (sbl_cs_refill), so a stream sees the same events either way.
 *
 * What must stay true:
 *  - The ring holds every event of every entry with ts in (lo, hi] and
 *    nothing else, in stream order; a stream uses it only when its next
 *    entry (next_lo) is after lo.  Trimming drops whole entries from the
 *    front and moves lo up to them.
 *  - hi is the last entry the feed read (scanned; a real entry once the
 *    feed has read one), so a stream's scanned stays a real entry and its
 *    own read can check that entry is still there.
 *  - The feed's lock is held while reading and copying, never while a
 *    stream runs its stages or looks documents up.
 */
#include "agg/cs_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "repl/repl.h"

#define RING_EVENTS 4096              /* events a feed keeps */
#define RING_BYTES (32 * 1024 * 1024) /* and their bytes at most */
#define TAKE_EVENTS 1000              /* events a getMore takes from the ring at once */

struct cs_feed {
    /* the key: streams with the same scope, names and showExpandedEvents */
    cs_scope_t scope;
    char db[SBL_NS_MAX];
    char coll[SBL_NS_MAX];
    bool expanded;
    int refs; /* streams attached (under feeds_lock) */
    pthread_mutex_t mu;
    cs_state_t *reader; /* builds the events: raw, fullDocument default */
    bool fresh;         /* nothing read yet: lo/hi start at the next caller's point */
    uint64_t lo, hi;    /* the ring holds the events of the entries in (lo, hi] */
    cs_item_t *ring;    /* RING_EVENTS slots; head is the oldest */
    size_t head, n, bytes;
    struct cs_feed *next;
};

static pthread_mutex_t feeds_lock = PTHREAD_MUTEX_INITIALIZER;
static cs_feed_t *feeds;

static cs_item_t *slot(cs_feed_t *f, size_t i)
{
    return &f->ring[(f->head + i) % RING_EVENTS];
}

static void drop_front(cs_feed_t *f)
{
    cs_item_t *it = slot(f, 0);
    f->bytes -= it->doc->len;
    bson_destroy(it->doc);
    bson_free(it->token);
    it->doc = NULL;
    it->token = NULL;
    f->head = (f->head + 1) % RING_EVENTS;
    f->n--;
}

/* Empty the ring; the next caller's resume point starts it again. */
static void feed_reset(cs_feed_t *f)
{
    while (f->n > 0)
        drop_front(f);
    f->head = 0;
    f->fresh = true;
    cs_state_t *r = f->reader;
    for (size_t i = r->qi; i < r->qn; i++) {
        bson_destroy(r->q[i].doc);
        bson_free(r->q[i].token);
    }
    r->qi = r->qn = 0;
}

/* Trim whole entries from the front until one more event fits. */
static void make_room(cs_feed_t *f, uint32_t len)
{
    while (f->n > 0 && (f->n == RING_EVENTS || f->bytes + len > RING_BYTES)) {
        uint64_t ts = slot(f, 0)->pos.ts;
        while (f->n > 0 && slot(f, 0)->pos.ts == ts)
            drop_front(f);
        __atomic_store_n(&f->lo, ts, __ATOMIC_RELAXED); /* sbl_cs_feed_quick reads it */
    }
}

/* Read the entries after hi (up to the commit point) and ring their events.
 * Under f->mu.  An error leaves the feed reset: its callers read themselves. */
static int feed_read(cs_feed_t *f, sbl_opctx_t *ctx, sbl_err_t *err)
{
    cs_state_t *r = f->reader;
    r->next_lo = f->hi + 1;
    int rc = sbl_cs_refill(r, ctx, err);
    if (rc != 0) {
        feed_reset(f);
        return rc;
    }
    for (size_t i = r->qi; i < r->qn; i++) {
        cs_item_t *it = &r->q[i];
        make_room(f, it->doc->len);
        *slot(f, f->n) = *it;
        f->n++;
        f->bytes += it->doc->len;
        it->doc = NULL;
        it->token = NULL;
    }
    r->qi = r->qn = 0;
    if (r->next_lo - 1 > f->hi)
        f->hi = r->next_lo - 1;
    return 0;
}

/* Copies of the ring's events from next_lo on (whole entries, about
 * TAKE_EVENTS at most) into *outp / *np (the caller frees them); *endp: the
 * last entry ts they cover (hi when they reach the ring's end).  Under f->mu. */
static void take(cs_feed_t *f, uint64_t next_lo, cs_item_t **outp, size_t *np, uint64_t *endp)
{
    size_t i = 0, k = 0;
    cs_item_t *out = NULL;
    *endp = f->hi;
    while (i < f->n && slot(f, i)->pos.ts < next_lo)
        i++;
    if (f->n - i > 0)
        out = bson_malloc((f->n - i) * sizeof(*out));
    for (; i < f->n; i++) {
        const cs_item_t *it = slot(f, i);
        if (k >= TAKE_EVENTS && it->pos.ts != out[k - 1].pos.ts) {
            *endp = out[k - 1].pos.ts;
            break;
        }
        out[k].doc = bson_copy(it->doc);
        out[k].token = bson_strdup(it->token);
        out[k++].pos = it->pos;
    }
    *outp = out;
    *np = k;
}

int sbl_cs_feed_fill(cs_state_t *st, sbl_opctx_t *ctx, sbl_err_t *err)
{
    cs_feed_t *f = st->feed;
    if (f == NULL || sbl_repl_majority_ts() < st->next_lo)
        return sbl_cs_refill(st, ctx, err);
    pthread_mutex_lock(&f->mu);
    if (f->fresh || st->next_lo > f->hi + 1) {
        /* start the ring at this stream's point: nothing read yet, or every
         * event in it is behind this stream (the feed fell behind it) */
        feed_reset(f);
        __atomic_store_n(&f->lo, st->next_lo - 1, __ATOMIC_RELAXED);
        f->hi = st->next_lo - 1;
        f->reader->scanned = st->scanned == st->next_lo - 1 ? st->scanned : 0;
        f->fresh = false;
    }
    if (st->next_lo <= f->lo) { /* behind the ring, or from before it */
        pthread_mutex_unlock(&f->mu);
        return sbl_cs_refill(st, ctx, err);
    }
    if (st->next_lo > f->hi) {
        sbl_err_t ferr;
        sbl_err_clear(&ferr);
        if (feed_read(f, ctx, &ferr) != 0) { /* the stream's own read says why */
            pthread_mutex_unlock(&f->mu);
            return sbl_cs_refill(st, ctx, err);
        }
    }
    cs_item_t *items;
    size_t n;
    uint64_t end;
    bool real_end = f->reader->scanned != 0; /* hi is an entry the feed read */
    take(f, st->next_lo, &items, &n, &end);
    pthread_mutex_unlock(&f->mu);

    int rc = 0;
    size_t i = 0;
    for (; i < n && rc == 0; i++) {
        cs_item_t *it = &items[i];
        if (st->invalidated) /* the invalidate ends its entry and the stream */
            break;
        if (it->pos.from_invalidate && st->has_skip && sbl_cs_pos_cmp(&it->pos, &st->skip) <= 0) {
            /* startAfter this invalidate: the stream goes on past it */
            bson_destroy(it->doc);
            bson_free(it->token);
        } else {
            if (it->pos.from_invalidate) { /* read no further than its entry */
                st->invalidated = true;
                end = it->pos.ts;
                real_end = true;
            } else if (st->full_doc == FD_LOOKUP)
                sbl_cs_add_lookup(ctx, it->doc);
            rc = sbl_cs_emit(st, ctx, &it->pos, it->doc, it->token, err);
        }
        it->doc = NULL;
        it->token = NULL;
    }
    for (size_t j = i; j < n; j++) {
        bson_destroy(items[j].doc);
        bson_free(items[j].token);
    }
    bson_free(items);
    if (rc == 0 && end >= st->next_lo) {
        if (real_end)
            st->scanned = end;
        st->next_lo = end + 1;
    }
    return rc;
}

/* Whether the stages after $changeStream may run JavaScript ($where,
 * $function, $accumulator): never on a loop (the names as a string value
 * merely send the getMore to a worker). */
static bool may_run_js(const bson_t *rest)
{
    static const char *const names[] = {"$where", "$function", "$accumulator"};
    for (size_t i = 0; rest != NULL && i < sizeof(names) / sizeof(names[0]); i++)
        if (memmem(bson_get_data(rest), rest->len, names[i], strlen(names[i])) != NULL)
            return true;
    return false;
}

bool sbl_cs_feed_quick(void *state)
{
    const cs_state_t *st = state;
    return st->feed != NULL && st->full_doc == FD_DEFAULT && !st->invalidated &&
           st->next_lo > __atomic_load_n(&st->feed->lo, __ATOMIC_RELAXED) &&
           !may_run_js(st->rest);
}

void sbl_cs_feed_attach(cs_state_t *st)
{
    cs_feed_t *f;
    if (st->full_doc != FD_DEFAULT && st->full_doc != FD_LOOKUP)
        return; /* post-images come from the stream's own read */
    if (st->pre != PRE_OFF)
        return;
    pthread_mutex_lock(&feeds_lock);
    for (f = feeds; f != NULL; f = f->next)
        if (f->scope == st->scope && f->expanded == st->expanded &&
            strcmp(f->db, st->db) == 0 && strcmp(f->coll, st->coll) == 0)
            break;
    if (f == NULL && (f = calloc(1, sizeof(*f))) != NULL) {
        f->ring = calloc(RING_EVENTS, sizeof(*f->ring));
        f->reader = calloc(1, sizeof(*f->reader));
        if (f->ring == NULL || f->reader == NULL) {
            free(f->ring);
            free(f->reader);
            free(f);
            f = NULL;
        } else {
            f->scope = st->scope;
            f->expanded = st->expanded;
            sbl_strcpy_n(f->db, sizeof(f->db), st->db);
            sbl_strcpy_n(f->coll, sizeof(f->coll), st->coll);
            f->reader->scope = st->scope;
            f->reader->expanded = st->expanded;
            f->reader->raw = true;
            sbl_strcpy_n(f->reader->db, sizeof(f->reader->db), st->db);
            sbl_strcpy_n(f->reader->coll, sizeof(f->reader->coll), st->coll);
            sbl_strcpy_n(f->reader->cursor_ns, sizeof(f->reader->cursor_ns), st->cursor_ns);
            f->fresh = true;
            pthread_mutex_init(&f->mu, NULL);
            f->next = feeds;
            feeds = f;
        }
    }
    if (f != NULL)
        f->refs++;
    st->feed = f;
    pthread_mutex_unlock(&feeds_lock);
}

void sbl_cs_feed_detach(cs_state_t *st)
{
    cs_feed_t *f = st->feed, **pp;
    if (f == NULL)
        return;
    st->feed = NULL;
    pthread_mutex_lock(&feeds_lock);
    if (--f->refs > 0) {
        pthread_mutex_unlock(&feeds_lock);
        return;
    }
    for (pp = &feeds; *pp != NULL && *pp != f; pp = &(*pp)->next)
        ;
    if (*pp == f)
        *pp = f->next;
    pthread_mutex_unlock(&feeds_lock);
    feed_reset(f);
    bson_free(f->reader->q);
    free(f->reader);
    free(f->ring);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
