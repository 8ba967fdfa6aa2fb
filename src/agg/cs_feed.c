/*
 * cs_feed.c: one shared read of the oplog per change-stream scope.  Streams
 * that watch the same collection, database or deployment with the same
 * showExpandedEvents share a feed: it reads each majority-committed oplog
 * entry once and builds its events once (as a stream with fullDocument
 * default and no stages would; with each change's pre- and post-image once
 * a stream asked for images), keeping them in a bounded ring of immutable,
 * reference-counted events.  A stream's getMore takes references to the
 * events after its resume point; one that adds nothing to them (no images,
 * no lookup, no stages) sends their bytes as they are, the others copy each
 * event and run their own part (their images or updateLookup, their start
 * point, their stages, the size limit).  A stream whose resume point is not
 * in the ring (it fell behind, resumed from before it, or wants images from
 * before the feed kept them) reads the oplog itself (sbl_cs_refill), so a
 * stream sees the same events either way.  The streams that add nothing
 * and are at the same point when woken get the same batch: its events are
 * laid out once as a reply's array (cs_batch_t), which each of them appends
 * with one copy, not event by event.
 *
 * What must stay true:
 *  - The ring holds every event of every entry with ts in (lo, hi] and
 *    nothing else, in stream order; a stream uses it only when its next
 *    entry (next_lo) is after lo (and after images_after when it wants
 *    images).  Trimming drops whole entries from the front and moves lo up.
 *  - hi is the last entry the feed read (scanned; a real entry once the
 *    feed has read one), so a stream's scanned stays a real entry and its
 *    own read can check that entry is still there.
 *  - A stream behind hi whose position the oplog has lost fails with 286,
 *    as its own read would, though the ring still holds its events.
 *  - The feed's lock is held while reading, taking references and laying
 *    out a shared batch, never while a stream copies, runs its stages or
 *    looks documents up.
 */
#include "agg/cs_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "repl/repl.h"

#define RING_EVENTS 4096              /* events a feed keeps */
#define RING_BYTES (32 * 1024 * 1024) /* and their bytes at most */
#define TAKE_EVENTS 1000              /* events a getMore takes from the ring at once */
#define NO_IMAGES UINT64_MAX          /* images_after while no stream wanted images */

struct cs_feed {
    /* the key: streams with the same scope, names, showExpandedEvents and
     * showMigrationEvents */
    cs_scope_t scope;
    char db[SBL_NS_MAX];
    char coll[SBL_NS_MAX];
    bool expanded;
    bool migrations;
    int refs; /* streams attached (under feeds_lock) */
    pthread_mutex_t mu;
    cs_state_t *reader; /* builds the events: raw, fullDocument default */
    bool fresh;         /* nothing read yet: lo/hi start at the next caller's point */
    uint64_t lo, hi;    /* the ring holds the events of the entries in (lo, hi] */
    uint64_t images_after; /* the events of entries after it carry images */
    uint64_t images_gen;   /* sbl_repl_preimage_removals() when they were looked up */
    uint64_t oldest, oldest_hi; /* the oplog's oldest entry, as read when hi was oldest_hi */
    cs_ev_t **ring;     /* RING_EVENTS slots; head is the oldest */
    size_t head, n, bytes;
    struct cs_batch *batch; /* the last batch built for plain streams, or NULL */
    struct cs_feed *next;
};

/* A batch of a feed's events as the array elements of a getMore's reply,
 * {"0": event, "1": event, ...}, built once for the plain streams (no
 * images, lookup, stages or start point ahead) that read the same entries:
 * those from next_lo to end.  Immutable once built; freed with its last
 * reference. */
typedef struct cs_batch {
    int refs;                     /* atomic */
    uint64_t next_lo, upto, hi;   /* built for streams at next_lo woken at upto, f->hi then */
    uint64_t end;                 /* the last entry it covers */
    bool real_end;                /* end is an entry the feed read */
    int64_t n;
    bson_t *doc;
    char *last, *prev;            /* the last event's token and the one before (or NULL) */
} cs_batch_t;

static void batch_release(cs_batch_t *b)
{
    if (b == NULL || __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    bson_destroy(b->doc);
    bson_free(b->last);
    bson_free(b->prev);
    free(b);
}

static pthread_mutex_t feeds_lock = PTHREAD_MUTEX_INITIALIZER;
static cs_feed_t *feeds;
static int streams_open; /* attached streams, all feeds (changed under feeds_lock) */

static cs_ev_t *slot(cs_feed_t *f, size_t i)
{
    return f->ring[(f->head + i) % RING_EVENTS];
}

static size_t ev_bytes(const cs_ev_t *ev)
{
    return ev->doc->len + (ev->pre != NULL ? ev->pre->len : 0) +
           (ev->post != NULL ? ev->post->len : 0);
}

static void drop_front(cs_feed_t *f)
{
    cs_ev_t *ev = slot(f, 0);
    f->bytes -= ev_bytes(ev);
    sbl_cs_ev_release(ev);
    f->ring[f->head] = NULL;
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
    batch_release(f->batch);
    f->batch = NULL;
    f->oldest_hi = UINT64_MAX;
    if (f->reader->images) /* everything read from now on has them */
        __atomic_store_n(&f->images_after, 0, __ATOMIC_RELAXED);
    sbl_cs_queue_clear(f->reader);
}

/* Trim whole entries from the front until one more event fits. */
static void make_room(cs_feed_t *f, size_t len)
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
        cs_ev_t *ev = malloc(sizeof(*ev));
        if (ev == NULL) {
            feed_reset(f);
            return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
        }
        *ev = (cs_ev_t){.refs = 1, .doc = it->doc, .token = it->token, .pos = it->pos,
                        .kind = it->kind, .images = it->images, .pre = it->pre,
                        .post = it->post};
        memset(it, 0, sizeof(*it));
        make_room(f, ev_bytes(ev));
        f->ring[(f->head + f->n) % RING_EVENTS] = ev;
        f->n++;
        f->bytes += ev_bytes(ev);
    }
    r->qi = r->qn = 0;
    if (r->next_lo - 1 > f->hi)
        __atomic_store_n(&f->hi, r->next_lo - 1, __ATOMIC_RELAXED);
    return 0;
}

/* The index of the ring's first event of an entry at or after ts (n: none).
 * Under f->mu. */
static size_t first_from(cs_feed_t *f, uint64_t ts)
{
    size_t i = 0, top = f->n;
    while (i < top) { /* the ring is in ts order */
        size_t mid = i + (top - i) / 2;
        if (slot(f, mid)->pos.ts < ts)
            i = mid + 1;
        else
            top = mid;
    }
    return i;
}

/* References to the ring's events from next_lo on, of entries up to upto
 * (whole entries, about TAKE_EVENTS at most) into *outp / *np (the caller
 * frees the array); *endp: the last entry ts they cover (hi, or upto when it
 * is before hi, when they reach that end).  Under f->mu: a reference each,
 * no copy. */
static void take(cs_feed_t *f, uint64_t next_lo, uint64_t upto, cs_ev_t ***outp, size_t *np,
                 uint64_t *endp)
{
    size_t i = first_from(f, next_lo), k = 0;
    cs_ev_t **out = NULL;
    *endp = upto < f->hi ? upto : f->hi;
    if (f->n - i > 0)
        out = bson_malloc((f->n - i) * sizeof(*out));
    for (; i < f->n; i++) {
        cs_ev_t *ev = slot(f, i);
        if (ev->pos.ts > upto)
            break;
        if (k >= TAKE_EVENTS && ev->pos.ts != out[k - 1]->pos.ts) {
            *endp = out[k - 1]->pos.ts;
            break;
        }
        __atomic_add_fetch(&ev->refs, 1, __ATOMIC_RELAXED);
        out[k++] = ev;
    }
    *outp = out;
    *np = k;
}

/* Whether st asks for images (the feed then looks them up for it). */
static bool wants_images(const cs_state_t *st)
{
    return st->pre != PRE_OFF || st->full_doc == FD_WHEN_AVAILABLE ||
           st->full_doc == FD_REQUIRED;
}

/* The entries after which the ring serves st: lo, or for a stream that wants
 * images the point from which the events carry them. */
static uint64_t ring_from(const cs_feed_t *f, const cs_state_t *st)
{
    uint64_t lo = __atomic_load_n(&f->lo, __ATOMIC_RELAXED);
    uint64_t img = __atomic_load_n(&f->images_after, __ATOMIC_RELAXED);
    return wants_images(st) && img > lo ? img : lo;
}

/* A stream behind the feed's end gets events the oplog may have lost since:
 * as its own read would, it fails with 286 once the oplog's oldest entry is
 * after its position (the oldest entry is read once per feed read).  Under
 * f->mu. */
static int check_position(cs_feed_t *f, const cs_state_t *st, sbl_opctx_t *ctx, sbl_err_t *err)
{
    if (st->next_lo > f->hi) /* the feed's read checks its own point, this one's */
        return 0;
    if (f->oldest_hi != f->hi) {
        SBL_RET(sbl_repl_oplog_oldest_ts(ctx->ss, &f->oldest, err));
        f->oldest_hi = f->hi;
    }
    uint64_t pos = st->scanned != 0 ? st->scanned : st->next_lo;
    return f->oldest > pos ? sbl_cs_history_lost(err) : 0;
}

/* Make f's ring cover st's next entries, up to upto (the wake point, at or
 * after st->next_lo): start the ring at st's point when it is empty or
 * behind st, read the entries after hi when st is at the end, else check
 * st's position is still in the oplog.  With f->mu held; *ringp false when
 * the ring cannot serve st (f->mu then released: st reads the oplog itself);
 * an error (f->mu released) is st's. */
static int ring_prepare(cs_feed_t *f, cs_state_t *st, sbl_opctx_t *ctx, bool *ringp,
                        sbl_err_t *err)
{
    *ringp = false;
    pthread_mutex_lock(&f->mu);
    if (f->fresh || st->next_lo > f->hi + 1) {
        /* start the ring at this stream's point: nothing read yet, or every
         * event in it is behind this stream (the feed fell behind it) */
        feed_reset(f);
        __atomic_store_n(&f->lo, st->next_lo - 1, __ATOMIC_RELAXED);
        __atomic_store_n(&f->hi, st->next_lo - 1, __ATOMIC_RELAXED);
        f->reader->scanned = st->scanned == st->next_lo - 1 ? st->scanned : 0;
        f->fresh = false;
    }
    uint64_t gen = sbl_repl_preimage_removals();
    if (f->reader->images && gen != f->images_gen) {
        /* the remover deleted images since the ring's were looked up: a
         * stream wanting images looks up itself those of the ring's events
         * up to the newest entry whose image went (usually far behind the
         * ring: entries the oplog dropped, or past expireAfterSeconds) */
        f->images_gen = gen;
        uint64_t gone = sbl_repl_preimages_removed_upto();
        uint64_t upto = gone < f->hi ? gone : f->hi;
        if (f->images_after < upto)
            __atomic_store_n(&f->images_after, upto, __ATOMIC_RELAXED);
    }
    if (st->next_lo <= ring_from(f, st)) { /* behind the ring, or from before it */
        pthread_mutex_unlock(&f->mu);
        return 0;
    }
    if (st->next_lo > f->hi) {
        sbl_err_t ferr;
        sbl_err_clear(&ferr);
        if (feed_read(f, ctx, &ferr) != 0) { /* the stream's own read says why */
            pthread_mutex_unlock(&f->mu);
            return 0;
        }
    } else {
        int rc = check_position(f, st, ctx, err);
        if (rc != 0) {
            pthread_mutex_unlock(&f->mu);
            return rc;
        }
    }
    *ringp = true;
    return 0;
}

int sbl_cs_feed_fill(cs_state_t *st, sbl_opctx_t *ctx, sbl_err_t *err)
{
    cs_feed_t *f = st->feed;
    if (f == NULL)
        return sbl_cs_refill(st, ctx, err);
    /* the sample waiting streams wake for, a real entry at or below the
     * commit point: streams read to it, so one wake is one reply each (and
     * a getMore with nothing new takes no lock, not even the set's) */
    uint64_t upto = sbl_cs_wake_point();
    if (upto < st->next_lo)
        return 0;
    if (sbl_repl_majority_ts() < st->next_lo)
        return sbl_cs_refill(st, ctx, err);
    bool ring;
    SBL_RET(ring_prepare(f, st, ctx, &ring, err));
    if (!ring)
        return sbl_cs_refill(st, ctx, err);
    cs_ev_t **evs;
    size_t n;
    uint64_t end;
    bool real_end = f->reader->scanned != 0; /* hi is an entry the feed read */
    take(f, st->next_lo, upto, &evs, &n, &end);
    pthread_mutex_unlock(&f->mu);

    int rc = 0;
    size_t i = 0;
    for (; i < n && rc == 0; i++) {
        cs_ev_t *ev = evs[i];
        if (st->invalidated) /* the invalidate ends its entry and the stream */
            break;
        if (ev->pos.from_invalidate && st->has_skip && sbl_cs_pos_cmp(&ev->pos, &st->skip) <= 0) {
            /* startAfter this invalidate: the stream goes on past it */
            sbl_cs_ev_release(ev);
            continue;
        }
        if (ev->pos.from_invalidate) { /* read no further than its entry */
            st->invalidated = true;
            end = ev->pos.ts;
            real_end = true;
        }
        rc = sbl_cs_emit_shared(st, ctx, ev, err);
    }
    for (size_t j = i; j < n; j++)
        sbl_cs_ev_release(evs[j]);
    bson_free(evs);
    if (rc == 0 && end >= st->next_lo) {
        if (real_end)
            st->scanned = end;
        st->next_lo = end + 1;
    }
    return rc;
}

/* The batch of the ring's events from next_lo on, of entries up to upto
 * (whole entries, about TAKE_EVENTS at most), as sbl_cs_feed_fill would
 * queue them for a plain stream; NULL when there is none, when it holds an
 * invalidate or an event over the size limit (fill's path handles those), or
 * when its events pass max_bytes.  Under f->mu; the feed holds the one
 * reference. */
static cs_batch_t *batch_build(cs_feed_t *f, uint64_t next_lo, uint64_t upto, size_t max_bytes)
{
    size_t i0 = first_from(f, next_lo), i = i0, bytes = 0;
    uint64_t end = upto < f->hi ? upto : f->hi;
    for (; i < f->n; i++) {
        cs_ev_t *ev = slot(f, i);
        if (ev->pos.ts > upto)
            break;
        if (i - i0 >= TAKE_EVENTS && ev->pos.ts != slot(f, i - 1)->pos.ts) {
            end = slot(f, i - 1)->pos.ts;
            break;
        }
        if (ev->pos.from_invalidate || ev->doc->len > SBL_CS_EVENT_MAX + 16 * 1024)
            return NULL;
        bytes += ev->doc->len;
    }
    size_t n = i - i0;
    if (n == 0 || bytes > max_bytes)
        return NULL;
    cs_batch_t *b = calloc(1, sizeof(*b));
    if (b == NULL || (b->doc = bson_sized_new(bytes + n * 16 + 5)) == NULL) {
        free(b);
        return NULL;
    }
    for (size_t k = 0; k < n; k++) {
        char key[24];
        const char *kp;
        bson_uint32_to_string((uint32_t)k, &kp, key, sizeof(key));
        bson_append_document(b->doc, kp, -1, slot(f, i0 + k)->doc);
    }
    b->refs = 1;
    b->next_lo = next_lo;
    b->upto = upto;
    b->hi = f->hi;
    b->end = end;
    b->real_end = f->reader->scanned != 0;
    b->n = (int64_t)n;
    b->last = bson_strdup(slot(f, i0 + n - 1)->token);
    b->prev = n > 1 ? bson_strdup(slot(f, i0 + n - 2)->token) : NULL;
    return b;
}

int sbl_cs_feed_batch(void *state, sbl_opctx_t *ctx, int64_t limit, size_t max_bytes,
                      bson_t *arr, int64_t *countp, sbl_err_t *err)
{
    cs_state_t *st = state;
    cs_feed_t *f = st->feed;
    *countp = 0;
    if (f == NULL || st->qi < st->qn || st->invalidated || st->rest != NULL || st->split ||
        st->full_doc != FD_DEFAULT || st->pre != PRE_OFF ||
        (st->has_skip && st->skip.ts >= st->next_lo))
        return 0;
    uint64_t upto = sbl_cs_wake_point();
    if (upto < st->next_lo || sbl_repl_majority_ts() < st->next_lo)
        return 0;
    bool ring;
    SBL_RET(ring_prepare(f, st, ctx, &ring, err));
    if (!ring)
        return 0;
    cs_batch_t *b = f->batch;
    if (b == NULL || b->next_lo != st->next_lo || b->upto != upto || b->hi != f->hi) {
        if ((b = batch_build(f, st->next_lo, upto, max_bytes)) != NULL) {
            batch_release(f->batch);
            f->batch = b;
        }
    }
    if (b != NULL && (limit < 0 || b->n <= limit))
        __atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
    else
        b = NULL;
    pthread_mutex_unlock(&f->mu);
    if (b == NULL)
        return 0;
    bson_concat(arr, b->doc);
    /* st's tokens and position as after b->n calls of cs_next */
    if (b->prev != NULL) {
        bson_free(st->tok_prev);
        st->tok_prev = bson_strdup(b->prev);
        bson_free(st->tok_last);
    } else {
        bson_free(st->tok_prev);
        st->tok_prev = st->tok_last;
    }
    st->tok_last = bson_strdup(b->last);
    if (b->real_end)
        st->scanned = b->end;
    st->next_lo = b->end + 1;
    *countp = b->n;
    batch_release(b);
    return 0;
}

bool sbl_cs_feed_waits(void *state, uint64_t gen)
{
    const cs_state_t *st = state;
    /* fill's first check: nothing up to the wake point is after next_lo */
    return st->feed != NULL && !st->invalidated && st->qi == st->qn && gen < st->next_lo;
}

/* What sbl_cs_feed_fill would do, when it would queue nothing, without a
 * read or a wait: the ring already covers st's next entries (next_lo up to
 * hi, so no oplog read; after ring_from, so no read of its own; st's
 * position checked against the oldest entry the feed last read, so no 286)
 * and holds no event of them up to upto.  Then st moves on as fill would
 * (to upto, or hi when that is before it); any other case, or the feed
 * busy, is left to fill.  A stream's position only moves under its cursor,
 * so it can be read here: the registry's lock keeps the cursor idle. */
bool sbl_cs_feed_idle(void *state, uint64_t upto)
{
    cs_state_t *st = state;
    cs_feed_t *f = st->feed;
    if (f == NULL || st->invalidated || st->qi < st->qn)
        return false;
    if (upto < st->next_lo) /* fill returns at once */
        return true;
    if (pthread_mutex_trylock(&f->mu) != 0)
        return false;
    uint64_t pos = st->scanned != 0 ? st->scanned : st->next_lo;
    size_t i;
    bool idle = !f->fresh && st->next_lo <= f->hi && st->next_lo > ring_from(f, st) &&
                !(f->reader->images && sbl_repl_preimage_removals() != f->images_gen) &&
                f->oldest_hi == f->hi && f->oldest <= pos &&
                ((i = first_from(f, st->next_lo)) == f->n || slot(f, i)->pos.ts > upto);
    if (idle) {
        uint64_t end = upto < f->hi ? upto : f->hi;
        if (f->reader->scanned != 0)
            st->scanned = end;
        st->next_lo = end + 1;
    }
    pthread_mutex_unlock(&f->mu);
    return idle;
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

int sbl_cs_feed_streams(void)
{
    return __atomic_load_n(&streams_open, __ATOMIC_RELAXED);
}

bool sbl_cs_feed_quick(void *state)
{
    const cs_state_t *st = state;
    return st->feed != NULL && st->full_doc != FD_LOOKUP && !st->invalidated &&
           st->next_lo > ring_from(st->feed, st) && !may_run_js(st->rest);
}

void sbl_cs_feed_attach(cs_state_t *st)
{
    cs_feed_t *f;
    pthread_mutex_lock(&feeds_lock);
    for (f = feeds; f != NULL; f = f->next)
        if (f->scope == st->scope && f->expanded == st->expanded &&
            f->migrations == st->migrations && strcmp(f->db, st->db) == 0 && strcmp(f->coll, st->coll) == 0)
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
            f->migrations = st->migrations;
            sbl_strcpy_n(f->db, sizeof(f->db), st->db);
            sbl_strcpy_n(f->coll, sizeof(f->coll), st->coll);
            f->reader->scope = st->scope;
            f->reader->expanded = st->expanded;
            f->reader->migrations = st->migrations;
            f->reader->raw = true;
            sbl_strcpy_n(f->reader->db, sizeof(f->reader->db), st->db);
            sbl_strcpy_n(f->reader->coll, sizeof(f->reader->coll), st->coll);
            sbl_strcpy_n(f->reader->cursor_ns, sizeof(f->reader->cursor_ns), st->cursor_ns);
            f->fresh = true;
            f->images_after = NO_IMAGES;
            f->oldest_hi = UINT64_MAX;
            pthread_mutex_init(&f->mu, NULL);
            f->next = feeds;
            feeds = f;
        }
    }
    if (f != NULL) {
        f->refs++;
        __atomic_add_fetch(&streams_open, 1, __ATOMIC_RELAXED);
    }
    st->feed = f;
    pthread_mutex_unlock(&feeds_lock);
    if (f != NULL && wants_images(st)) {
        pthread_mutex_lock(&f->mu);
        if (!f->reader->images) { /* from the entries the feed reads next on */
            f->reader->images = true;
            f->images_gen = sbl_repl_preimage_removals();
            __atomic_store_n(&f->images_after, f->fresh ? 0 : f->hi, __ATOMIC_RELAXED);
        }
        pthread_mutex_unlock(&f->mu);
    }
}

void sbl_cs_feed_detach(cs_state_t *st)
{
    cs_feed_t *f = st->feed, **pp;
    if (f == NULL)
        return;
    st->feed = NULL;
    pthread_mutex_lock(&feeds_lock);
    __atomic_sub_fetch(&streams_open, 1, __ATOMIC_RELAXED);
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
