/*
 * changestream.c: the $changeStream stage.  An aggregate whose first stage
 * is $changeStream opens a tailable, awaitData cursor whose source reads
 * local.oplog.rs (keyed by ts) from its resume point, turns each entry of
 * the watched collection, database or deployment into mongod 7.0's change
 * events, runs the pipeline's later stages on each event and hands them to
 * the cursor layer; each batch carries postBatchResumeToken.
 *
 * What must stay true:
 *  - Only entries at or below the majority commit point are read
 *    (sbl_repl_majority_ts), so an event is never one a rollback undoes.
 *  - Events come out in (clusterTime, txnOpIndex, fromInvalidate) order and
 *    each exactly once: the source remembers the last oplog ts it consumed
 *    and resumes strictly after it; a resume token skips every event at or
 *    before its position.
 *  - postBatchResumeToken never passes an event the client has not been
 *    sent (a document held back for the next batch included).
 *  - The oplog the stream needs is still there: a resume point older than
 *    the oldest entry, or a consumed entry that has since been deleted,
 *    fails with ChangeStreamHistoryLost (286).
 */
#include "agg/cs_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "repl/repl.h"

#define REFILL_ENTRIES 1000 /* oplog entries read per refill */

/* oplog entries read by feeds (shared) and by streams alone (own); wakes
 * of a waiting getMore that found it would still have nothing (cs_idle) */
static _Atomic uint64_t entries_shared, entries_own, idle_wakes;

void sbl_agg_change_stream_metrics(bson_t *metrics)
{
    bson_t d, r;
    BSON_APPEND_DOCUMENT_BEGIN(metrics, "changeStreams", &d);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "oplogEntriesRead", &r);
    BSON_APPEND_INT64(&r, "shared", (int64_t)entries_shared);
    BSON_APPEND_INT64(&r, "own", (int64_t)entries_own);
    bson_append_document_end(&d, &r);
    BSON_APPEND_INT64(&d, "idleWakes", (int64_t)idle_wakes);
    bson_append_document_end(metrics, &d);
}

static void set_str(char **dst, char *src)
{
    bson_free(*dst);
    *dst = src;
}

/* The _data of the high-water mark at ts (a copy).  Every stream woken in
 * one pass ends its batch at the same entry: the last one made is kept. */
static pthread_mutex_t hwm_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t hwm_ts;
static char hwm_str[64];

static char *hwm_token(uint64_t ts)
{
    pthread_mutex_lock(&hwm_mu);
    char *s = ts != 0 && ts == hwm_ts ? bson_strdup(hwm_str) : NULL;
    pthread_mutex_unlock(&hwm_mu);
    if (s != NULL)
        return s;
    bson_t t = BSON_INITIALIZER;
    sbl_cs_pos_t p = {.ts = ts};
    sbl_cs_token_make(&p, NULL, NULL, &t);
    s = sbl_cs_token_str(&t);
    bson_destroy(&t);
    if (strlen(s) < sizeof(hwm_str)) {
        pthread_mutex_lock(&hwm_mu);
        hwm_ts = ts;
        strcpy(hwm_str, s);
        pthread_mutex_unlock(&hwm_mu);
    }
    return s;
}

static void cs_free(void *state)
{
    cs_state_t *st = state;
    if (st == NULL)
        return;
    sbl_cs_queue_clear(st);
    bson_free(st->q);
    sbl_cs_ev_release(st->lent);
    if (st->rest != NULL)
        bson_destroy(st->rest);
    bson_free(st->tok_last);
    bson_free(st->tok_prev);
    bson_free(st->tok_hwm);
    sbl_cs_feed_detach(st);
    free(st);
}

void sbl_cs_ev_release(cs_ev_t *ev)
{
    if (ev == NULL || __atomic_sub_fetch(&ev->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    bson_destroy(ev->doc);
    bson_free(ev->token);
    bson_destroy(ev->pre); /* NULL: none */
    bson_destroy(ev->post);
    free(ev);
}

void sbl_cs_queue_clear(cs_state_t *st)
{
    for (size_t i = st->qi; i < st->qn; i++) {
        cs_item_t *it = &st->q[i]; /* bson_destroy(NULL) does nothing */
        bson_destroy(it->doc);
        bson_free(it->token);
        sbl_cs_ev_release(it->ev);
        bson_destroy(it->pre);
        bson_destroy(it->post);
    }
    st->qi = st->qn = 0;
}

static cs_item_t *queue_add(cs_state_t *st)
{
    if (st->qi > 0 && st->qi == st->qn)
        st->qi = st->qn = 0;
    if (st->qn == st->qcap) {
        st->qcap = st->qcap ? 2 * st->qcap : 16;
        st->q = bson_realloc(st->q, st->qcap * sizeof(*st->q));
    }
    cs_item_t *it = &st->q[st->qn++];
    memset(it, 0, sizeof(*it));
    return it;
}

static void queue_push(cs_state_t *st, bson_t *doc, char *token)
{
    cs_item_t *it = queue_add(st);
    it->doc = doc;
    it->token = token;
}

/* Whether st's event at pos (a whole event) is before its start point. */
static bool before_start(const cs_state_t *st, const sbl_cs_pos_t *pos)
{
    sbl_cs_pos_t whole = st->skip;
    whole.fragment = 0;
    int c = sbl_cs_pos_cmp(pos, &whole);
    return st->has_skip && (c < 0 || (c == 0 && st->skip.fragment == 0));
}

/* Queue fragments of doc (over 16 MiB; taken) with their tokens, made from
 * the event's token (taken), from fragment `from` (0-based) on: each holds
 * _id, splitEvent {fragment, of} and as many of the event's next fields as
 * fit in 16 MiB, as mongod's $changeStreamSplitLargeEvent. */
static int split_event(cs_state_t *st, bson_t *doc, char *token, int64_t from, sbl_err_t *err)
{
    bson_t **frag = NULL;
    char **toks = NULL;
    size_t n = 0, cap = 0;
    bson_iter_t it;
    int rc = 0;
    bool more = bson_iter_init(&it, doc) && bson_iter_next(&it);
    while (more && rc == 0) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4;
            frag = bson_realloc(frag, cap * sizeof(*frag));
            toks = bson_realloc(toks, cap * sizeof(*toks));
        }
        bson_t *f = bson_new(), t, se;
        char *tok = sbl_cs_token_fragment(token, (int64_t)n);
        BSON_APPEND_DOCUMENT_BEGIN(f, "_id", &t);
        BSON_APPEND_UTF8(&t, "_data", tok);
        bson_append_document_end(f, &t);
        BSON_APPEND_DOCUMENT_BEGIN(f, "splitEvent", &se);
        BSON_APPEND_INT32(&se, "fragment", (int32_t)n + 1);
        BSON_APPEND_INT32(&se, "of", 0); /* set below, once the count is known */
        bson_append_document_end(f, &se);
        frag[n] = f;
        toks[n++] = tok;
        uint32_t added = 0;
        for (; more; more = bson_iter_next(&it)) {
            if (strcmp(bson_iter_key(&it), "_id") == 0)
                continue;
            if (f->len + (it.next_off - it.off) > SBL_CS_EVENT_MAX) {
                if (added == 0)
                    rc = sbl_err_set(err, SBL_E_BSONObjectTooLarge,
                                     "Could not split a change event into fragments: its field "
                                     "'%s' alone is over 16MB", bson_iter_key(&it));
                break;
            }
            sbl_append_iter(f, bson_iter_key(&it), -1, &it);
            added++;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (rc == 0 && (int64_t)i >= from) {
            bson_iter_t of;
            if (bson_iter_init(&of, frag[i]) && bson_iter_find_descendant(&of, "splitEvent.of", &of))
                bson_iter_overwrite_int32(&of, (int32_t)n);
            queue_push(st, frag[i], toks[i]);
        } else {
            bson_destroy(frag[i]);
            bson_free(toks[i]);
        }
    }
    bson_free(frag);
    bson_free(toks);
    bson_destroy(doc);
    bson_free(token);
    return rc;
}

/* Queue event doc (taken) at pos with its token's _data (taken): whole, or
 * in fragments when it is over 16 MiB and the pipeline ends with
 * $changeStreamSplitLargeEvent; without that stage an event over mongod's
 * internal limit fails with BSONObjectTooLarge as mongod's. */
static int push_event(cs_state_t *st, const sbl_cs_pos_t *pos, bson_t *doc, char *token,
                      sbl_err_t *err)
{
    sbl_cs_pos_t whole = st->skip;
    whole.fragment = 0;
    bool resume_inside = st->has_skip && st->skip.fragment > 0 && sbl_cs_pos_cmp(pos, &whole) == 0;
    int rc = 0;
    if (st->split && doc->len > SBL_CS_EVENT_MAX)
        return split_event(st, doc, token, resume_inside ? st->skip.fragment : 0, err);
    if (resume_inside)
        rc = sbl_err_set(err, SBL_E_ChangeStreamFatalError,
                         "Attempted to resume from a split event fragment, but the event in the "
                         "resumed stream was not large enough to be split");
    else if (doc->len > SBL_CS_EVENT_MAX + 16 * 1024)
        rc = sbl_err_set(err, SBL_E_BSONObjectTooLarge,
                         "BSONObj size: %u (0x%X) is invalid. Size must be between 0 and "
                         "16793600(16MB) First element: _id: { _data: \"%.64s\" }",
                         doc->len, doc->len, token);
    if (rc != 0) {
        bson_destroy(doc);
        bson_free(token);
        return rc;
    }
    queue_push(st, doc, token);
    return 0;
}

int sbl_cs_emit(cs_state_t *st, sbl_opctx_t *ctx, const sbl_cs_pos_t *pos, bson_t *ev,
                char *token, sbl_err_t *err)
{
    /* Events before the start point are not returned; the one a fragment's
     * token points into is, from its next fragment on (push_event). */
    if (st->raw) { /* a feed's reader keeps every event as built */
        queue_push(st, ev, token);
        st->q[st->qn - 1].pos = *pos;
        return 0;
    }
    if (before_start(st, pos)) {
        bson_destroy(ev);
        bson_free(token);
        return 0;
    }
    if (st->rest == NULL)
        return push_event(st, pos, ev, token, err);
    bson_t empty = BSON_INITIALIZER;
    sbl_agg_env_t env = {.ctx = ctx, .db = st->db, .let = &empty, .now_ms = sbl_now_ms(),
                         .allow_disk = -1};
    sbl_docvec_t dv = {0};
    sbl_docvec_push(&dv, ev);
    int rc = sbl_agg_run(&env, st->cursor_ns, st->rest, 0, &dv, err);
    for (size_t i = 0; rc == 0 && i < dv.n; i++) {
        bson_iter_t it;
        bson_t t;
        if (!bson_iter_init_find(&it, dv.v[i], "_id") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
            !sbl_iter_doc(&it, &t) || !bson_iter_init_find(&it, &t, "_data") ||
            !BSON_ITER_HOLDS_UTF8(&it) || strcmp(bson_iter_utf8(&it, NULL), token) != 0) {
            rc = sbl_err_set(err, SBL_E_ChangeStreamFatalError,
                             "Encountered an event whose _id field, which contains the resume "
                             "token, was modified by the pipeline. Modifying the _id field of an "
                             "event makes it impossible to resume the stream from that point. "
                             "Only transformations that retain the unmodified _id field are "
                             "allowed.");
            break;
        }
        rc = push_event(st, pos, dv.v[i], bson_strdup(token), err);
        dv.v[i] = NULL;
    }
    for (size_t i = 0; i < dv.n; i++)
        if (dv.v[i] != NULL)
            bson_destroy(dv.v[i]);
    bson_free(dv.v);
    bson_destroy(&empty);
    bson_free(token);
    return rc;
}

int sbl_cs_emit_shared(cs_state_t *st, sbl_opctx_t *ctx, cs_ev_t *ev, sbl_err_t *err)
{
    if (st->rest != NULL || st->split || st->full_doc != FD_DEFAULT || st->pre != PRE_OFF) {
        /* st adds to it: its own copy */
        bson_t *doc = bson_copy(ev->doc);
        int rc = sbl_cs_add_images(st, ctx, ev, doc, err);
        char *tok = bson_strdup(ev->token);
        sbl_cs_pos_t pos = ev->pos;
        sbl_cs_ev_release(ev);
        if (rc != 0) {
            bson_destroy(doc);
            bson_free(tok);
            return rc;
        }
        return sbl_cs_emit(st, ctx, &pos, doc, tok, err);
    }
    if (before_start(st, &ev->pos)) {
        sbl_cs_ev_release(ev);
        return 0;
    }
    if (ev->doc->len > SBL_CS_EVENT_MAX + 16 * 1024) { /* push_event fails it */
        int rc = sbl_cs_emit(st, ctx, &ev->pos, bson_copy(ev->doc), bson_strdup(ev->token), err);
        sbl_cs_ev_release(ev);
        return rc;
    }
    queue_add(st)->ev = ev;
    return 0;
}

int sbl_cs_history_lost(sbl_err_t *err)
{
    return sbl_err_set(err, SBL_E_ChangeStreamHistoryLost,
                       "Resume of change stream was not possible, as the resume point may no "
                       "longer be in the oplog.");
}

int sbl_cs_refill(cs_state_t *st, sbl_opctx_t *ctx, sbl_err_t *err)
{
    sbl_coll_t *oplog = NULL;
    sbl_scan_t *scan = NULL;
    uint64_t majority = sbl_repl_majority_ts();
    int rc;
    if (majority < st->next_lo)
        return 0;
    SBL_RET(sbl_coll_open(ctx->ss, SBL_OPLOG_NS, false, &oplog, NULL, err));
    if (st->scanned != 0) { /* the last entry consumed must still be there */
        bson_value_t v = {.value_type = BSON_TYPE_TIMESTAMP};
        bson_t d;
        bool found = false;
        v.value.v_timestamp.timestamp = (uint32_t)(st->scanned >> 32);
        v.value.v_timestamp.increment = (uint32_t)st->scanned;
        rc = sbl_coll_get(ctx->ss, oplog, &v, &d, &found, err);
        if (rc == 0 && found)
            bson_destroy(&d);
        if (rc == 0 && !found)
            rc = sbl_cs_history_lost(err);
        if (rc != 0) {
            sbl_coll_release(oplog);
            return rc;
        }
    } else { /* nothing consumed yet: every entry from next_lo on must be there */
        uint64_t oldest = 0;
        rc = sbl_repl_oplog_oldest_ts(ctx->ss, &oldest, err);
        if (rc == 0 && oldest > st->next_lo)
            rc = sbl_cs_history_lost(err);
        if (rc != 0) {
            sbl_coll_release(oplog);
            return rc;
        }
    }
    bson_value_t lo = {.value_type = BSON_TYPE_TIMESTAMP};
    lo.value.v_timestamp.timestamp = (uint32_t)(st->next_lo >> 32);
    lo.value.v_timestamp.increment = (uint32_t)st->next_lo;
    sbl_scan_bounds_t b = {.lo = &lo, .lo_inclusive = true};
    rc = sbl_scan_open(ctx->ss, oplog, &b, false, &scan, err);
    for (int n = 0; rc == 0 && n < REFILL_ENTRIES && !st->invalidated; n++) {
        bson_t doc;
        bool done = false;
        bson_iter_t it;
        if ((rc = sbl_scan_next(scan, &doc, &done, err)) != 0 || done)
            break;
        if (!bson_iter_init_find(&it, &doc, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&it))
            continue;
        uint32_t t, i;
        bson_iter_timestamp(&it, &t, &i);
        uint64_t ts = (uint64_t)t << 32 | i;
        if (ts > majority)
            break;
        rc = sbl_cs_entry_events(st, ctx, &doc, err);
        atomic_fetch_add_explicit(st->raw ? &entries_shared : &entries_own, 1,
                                  memory_order_relaxed);
        st->scanned = ts;
        st->next_lo = ts + 1;
        if (st->qn - st->qi >= REFILL_ENTRIES)
            break;
    }
    if (scan != NULL)
        sbl_scan_close(scan);
    sbl_coll_release(oplog);
    return rc;
}

static int cs_next(void *state, sbl_opctx_t *ctx, bson_t *doc, bool *donep, sbl_err_t *err)
{
    cs_state_t *st = state;
    *donep = false;
    if (st->qi == st->qn && !st->invalidated)
        SBL_RET(sbl_cs_feed_fill(st, ctx, err));
    if (st->qi == st->qn) {
        *donep = true;
        return 0;
    }
    cs_item_t *it = &st->q[st->qi++];
    set_str(&st->tok_prev, st->tok_last);
    sbl_cs_ev_release(st->lent); /* the cursor is done with the last one's bytes */
    st->lent = NULL;
    if (it->ev != NULL) { /* a shared event: a view of its bytes, kept until the next call */
        bson_init_static(doc, bson_get_data(it->ev->doc), it->ev->doc->len);
        st->tok_last = bson_strdup(it->ev->token);
        st->lent = it->ev;
        it->ev = NULL;
        return 0;
    }
    if (!bson_steal(doc, it->doc)) {
        bson_copy_to(it->doc, doc);
        bson_destroy(it->doc);
    }
    st->tok_last = it->token;
    it->doc = NULL;
    it->token = NULL;
    return 0;
}

static bool cs_finished(void *state)
{
    cs_state_t *st = state;
    return st->invalidated && st->qi == st->qn;
}

static void cs_annotate(void *state, bool has_pending, bson_t *cursor_doc)
{
    cs_state_t *st = state;
    const char *tok;
    if (has_pending) /* the last event produced waits for the next batch */
        tok = st->tok_prev;
    else if (st->qi < st->qn)
        tok = st->tok_last;
    else { /* everything read was sent: the latest of the last event, the start
            * point and the high-water mark of the last entry read */
        tok = st->tok_last != NULL && strcmp(st->tok_last, st->tok_hwm) > 0 ? st->tok_last
                                                                            : st->tok_hwm;
        if (st->scanned != 0) {
            char *h = hwm_token(st->scanned);
            if (strcmp(h, tok) > 0) {
                set_str(&st->tok_hwm, h);
                tok = st->tok_hwm;
            } else {
                bson_free(h);
            }
        }
    }
    if (tok == NULL)
        tok = st->tok_hwm;
    bson_t t;
    BSON_APPEND_DOCUMENT_BEGIN(cursor_doc, "postBatchResumeToken", &t);
    BSON_APPEND_UTF8(&t, "_data", tok);
    bson_append_document_end(cursor_doc, &t);
}

/* A waiting getMore waits on the newest entry a stream may read
 * (sbl_repl_readable_ts), as sampled at most every wake_us(), and a stream
 * served by its feed reads no further than that sample (sbl_cs_feed_fill):
 * the sample moves at most once per advance of the commit point, so a write
 * wakes no stream before its events can be read, and at a high write rate
 * each stream gets one reply per interval with the writes of several
 * advances, not one per advance (nor a second right after it, for the
 * writes committed while the first was on its way).  A stream's cost is
 * mostly its getMore's round trip (about 30 us of the server's CPU and 12 us
 * of its client's), not its events, and a moving sample wakes every waiting
 * stream: so the interval grows with the streams open, 10 ms and 0.25 ms
 * more a stream up to 35 ms (100 streams under steady writes: 2,900 getMores
 * a second, not 10,000), for at most that much more delay (issue 27 allows
 * 50 ms at p99: 31-37 ms measured with 100 streams at 1,000 writes/s).  A
 * stale sample only wakes a stream early: the ts it read up to is at or
 * after the sample it waits on. */
#define WAKE_US_MIN 10000
#define WAKE_US_PER_STREAM 250
#define WAKE_US_MAX 35000
static uint64_t wake_us(void)
{
    uint64_t us = WAKE_US_MIN + (uint64_t)sbl_cs_feed_streams() * WAKE_US_PER_STREAM;
    return us < WAKE_US_MAX ? us : WAKE_US_MAX;
}

static _Atomic uint64_t sample, sampled_us;

uint64_t sbl_cs_wake_point(void)
{
    uint64_t now = (uint64_t)sbl_now_us();
    if (now - atomic_load_explicit(&sampled_us, memory_order_relaxed) >= wake_us()) {
        atomic_store_explicit(&sample, sbl_repl_readable_ts(), memory_order_relaxed);
        atomic_store_explicit(&sampled_us, now, memory_order_relaxed);
    }
    return atomic_load_explicit(&sample, memory_order_relaxed);
}

/* When the sample is next taken: a parked getMore checks then (and every
 * one parked on a stream checks in the same loop pass). */
static int64_t cs_wake_due_us(void)
{
    return (int64_t)(atomic_load_explicit(&sampled_us, memory_order_relaxed) + wake_us());
}

/* A waiting getMore's check when the wake point moved (the source's idle). */
static bool cs_idle(void *state, uint64_t gen)
{
    if (!sbl_cs_feed_idle(state, gen))
        return false;
    atomic_fetch_add_explicit(&idle_wakes, 1, memory_order_relaxed);
    return true;
}

static const sbl_cursor_source_t cs_source = {
    .next = cs_next, .free = cs_free, .finished = cs_finished, .annotate = cs_annotate,
    .wake_gen = sbl_cs_wake_point, .wake_due_us = cs_wake_due_us, .quick = sbl_cs_feed_quick,
    .idle = cs_idle, .batch = sbl_cs_feed_batch,
    .waits = sbl_cs_feed_waits};

/* ---- the stage's options ------------------------------------------------------- */

static bool stage_allowed(const char *name)
{
    static const char *const ok[] = {"$match", "$project", "$addFields", "$set", "$unset",
                                     "$replaceRoot", "$replaceWith", "$redact",
                                     "$changeStreamSplitLargeEvent", NULL};
    for (int i = 0; ok[i] != NULL; i++)
        if (strcmp(name, ok[i]) == 0)
            return true;
    return false;
}

/* Stages of 7.0 that a change stream refuses (others are unknown: 40324). */
static bool stage_known(const char *name)
{
    static const char *const known[] = {
        "$group", "$sort", "$limit", "$skip", "$lookup", "$unwind", "$facet", "$bucket",
        "$bucketAuto", "$count", "$out", "$merge", "$sample", "$sortByCount", "$graphLookup",
        "$unionWith", "$geoNear", "$densify", "$fill", "$setWindowFields", "$documents",
        "$collStats", "$indexStats", "$currentOp", "$listSessions", "$listLocalSessions",
        "$planCacheStats", "$search", "$searchMeta", NULL};
    for (int i = 0; known[i] != NULL; i++)
        if (strcmp(name, known[i]) == 0)
            return true;
    return false;
}

/* Check the stages after $changeStream; copy the ones that run into st->rest. */
static int parse_rest(cs_state_t *st, const bson_t *pipeline, sbl_err_t *err)
{
    bson_iter_t s, f;
    uint32_t i = 0, n = 0;
    bson_t *rest = bson_new();
    bson_iter_init(&s, pipeline);
    while (bson_iter_next(&s)) {
        bson_iter_recurse(&s, &f);
        bson_iter_next(&f);
        const char *name = bson_iter_key(&f);
        if (i++ == 0)
            continue;
        if (strcmp(name, "$changeStream") == 0) {
            bson_destroy(rest);
            return sbl_err_set(err, 40602, "$changeStream is only valid as the first stage in a "
                                           "pipeline");
        }
        if (!stage_allowed(name)) {
            bson_destroy(rest);
            if (!stage_known(name))
                return sbl_err_set(err, SBL_E_UnrecognizedStage,
                                   "Unrecognized pipeline stage name: '%s'", name);
            return sbl_err_set(err, SBL_E_IllegalOperation,
                               "%s is not permitted in a $changeStream pipeline", name);
        }
        if (strcmp(name, "$changeStreamSplitLargeEvent") == 0) { /* push_event splits */
            bson_iter_t in, next = s;
            bool empty = BSON_ITER_HOLDS_DOCUMENT(&f) && bson_iter_recurse(&f, &in) &&
                         !bson_iter_next(&in);
            bool last = !bson_iter_next(&next);
            if (!empty || !last) {
                bson_destroy(rest);
                return !empty ? sbl_err_set(err, 7182801, "$changeStreamSplitLargeEvent must "
                                            "be specified as an empty object")
                              : sbl_err_set(err, 40601, "$changeStreamSplitLarge"
                                            "Event can only be the final stage in the pipeline");
            }
            st->split = true;
            continue;
        }
        char key[16];
        const char *k;
        bson_uint32_to_string(n++, &k, key, sizeof(key));
        sbl_append_iter(rest, k, -1, &s);
    }
    if (n == 0) {
        bson_destroy(rest);
        rest = NULL;
    }
    st->rest = rest;
    return 0;
}

static int parse_spec(cs_state_t *st, const bson_iter_t *specit, bool *all_cluster,
                      sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t spec, resume;
    bool has_resume = false, resume_after = false, start_after = false, has_start_at = false;
    uint64_t start_at = 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(specit))
        return sbl_err_set(err, 50808, "$changeStream stage expects a document as argument");
    sbl_iter_doc(specit, &spec);
    bson_iter_init(&it, &spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "fullDocument") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_type_error(err, "$changeStream.fullDocument", &it, "string");
            const char *v = bson_iter_utf8(&it, NULL);
            if (strcmp(v, "default") == 0)
                st->full_doc = FD_DEFAULT;
            else if (strcmp(v, "updateLookup") == 0)
                st->full_doc = FD_LOOKUP;
            else if (strcmp(v, "whenAvailable") == 0)
                st->full_doc = FD_WHEN_AVAILABLE;
            else if (strcmp(v, "required") == 0)
                st->full_doc = FD_REQUIRED;
            else
                return sbl_err_set(err, SBL_E_BadValue,
                                   "'%s' is not a valid value for $changeStream.fullDocument", v);
        } else if (strcmp(k, "fullDocumentBeforeChange") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_type_error(err, "$changeStream.fullDocumentBeforeChange", &it,
                                      "string");
            const char *v = bson_iter_utf8(&it, NULL);
            if (strcmp(v, "off") == 0)
                st->pre = PRE_OFF;
            else if (strcmp(v, "whenAvailable") == 0)
                st->pre = PRE_WHEN_AVAILABLE;
            else if (strcmp(v, "required") == 0)
                st->pre = PRE_REQUIRED;
            else
                return sbl_err_set(err, SBL_E_BadValue,
                                   "'%s' is not a valid value for "
                                   "$changeStream.fullDocumentBeforeChange", v);
        } else if (strcmp(k, "resumeAfter") == 0 || strcmp(k, "startAfter") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, k[0] == 'r' ? "$changeStream.resumeAfter"
                                                       : "$changeStream.startAfter",
                                      &it, "object");
            sbl_iter_doc(&it, &resume);
            if (k[0] == 'r')
                resume_after = true;
            else
                start_after = true;
            has_resume = true;
        } else if (strcmp(k, "startAtOperationTime") == 0) {
            if (!BSON_ITER_HOLDS_TIMESTAMP(&it))
                return sbl_type_error(err, "$changeStream.startAtOperationTime", &it,
                                      "timestamp");
            uint32_t t, i;
            bson_iter_timestamp(&it, &t, &i);
            start_at = (uint64_t)t << 32 | i;
            has_start_at = true;
        } else if (strcmp(k, "allChangesForCluster") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it))
                return sbl_type_error(err, "$changeStream.allChangesForCluster", &it, "bool");
            *all_cluster = bson_iter_bool(&it);
        } else if (strcmp(k, "showExpandedEvents") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it))
                return sbl_type_error(err, "$changeStream.showExpandedEvents", &it, "bool");
            st->expanded = bson_iter_bool(&it);
        } else if (strcmp(k, "showMigrationEvents") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it))
                return sbl_type_error(err, "$changeStream.showMigrationEvents", &it, "bool");
            st->migrations = bson_iter_bool(&it);
        } else if (strcmp(k, "showSystemEvents") == 0 ||
                   strcmp(k, "showRawUpdateDescription") == 0 ||
                   strcmp(k, "allowToRunOnConfigDB") == 0 ||
                   strcmp(k, "allowToRunOnSystemNS") == 0) {
            /* accepted; no events of those kinds exist here */
        } else {
            return sbl_err_set(err, SBL_E_UnknownField,
                               "BSON field '$changeStream.%s' is an unknown field.", k);
        }
    }
    if (resume_after && start_after)
        return sbl_err_set(err, 50865, "Do not specify both 'resumeAfter' and 'startAfter' in a "
                                       "$changeStream stage");
    if (has_resume && has_start_at)
        return sbl_err_set(err, 40674, "Only one type of resume option is allowed, but multiple "
                                       "were found.");
    uint64_t from;
    if (has_resume) {
        SBL_RET(sbl_cs_token_parse(&resume, &st->skip, err));
        if (resume_after && st->skip.from_invalidate)
            return sbl_err_set(err, SBL_E_InvalidResumeToken,
                               "Attempting to resume a change stream using 'resumeAfter' is not "
                               "allowed from an invalidate notification.");
        st->has_skip = true;
        from = st->skip.ts;
        st->tok_hwm = sbl_cs_token_str(&resume);
    } else if (has_start_at) {
        st->skip = (sbl_cs_pos_t){.ts = start_at};
        st->has_skip = true;
        from = start_at;
        st->tok_hwm = hwm_token(start_at);
    } else { /* from the newest entry on: everything after it */
        uint64_t last = sbl_repl_last_op_ts();
        st->skip = (sbl_cs_pos_t){.ts = last + 1};
        st->has_skip = true;
        from = last + 1;
        st->tok_hwm = hwm_token(last + 1);
    }
    st->next_lo = from;
    if (has_resume || has_start_at) {
        uint64_t oldest = 0;
        SBL_RET(sbl_repl_oplog_oldest_ts(ctx->ss, &oldest, err));
        if (oldest == 0 || oldest > from)
            return sbl_cs_history_lost(err);
    }
    return 0;
}

int sbl_agg_change_stream(sbl_opctx_t *ctx, const char *ns, bool collectionless,
                          const bson_t *pipeline, int64_t batch_size, sbl_err_t *err)
{
    bson_iter_t s, f;
    bool all_cluster = false;
    if (!sbl_repl_enabled())
        return sbl_err_set(err, 40573, "The $changeStream stage is only supported on replica "
                                       "sets");
    cs_state_t *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    bson_iter_init(&s, pipeline);
    bson_iter_next(&s);
    bson_iter_recurse(&s, &f);
    bson_iter_next(&f);
    int rc = parse_spec(st, &f, &all_cluster, ctx, err);
    if (rc == 0)
        rc = parse_rest(st, pipeline, err);
    if (rc == 0 && st->has_skip && st->skip.fragment > 0 && !st->split)
        rc = sbl_err_set(err, SBL_E_ChangeStreamFatalError,
                         "To resume from a split event, the $changeStream pipeline must end "
                         "with a $changeStreamSplitLargeEvent stage");
    if (rc == 0) {
        sbl_strcpy_n(st->db, sizeof(st->db), ctx->db);
        sbl_strcpy_n(st->cursor_ns, sizeof(st->cursor_ns), ns);
        if (collectionless) {
            st->scope = all_cluster ? CS_CLUSTER : CS_DB;
            if (all_cluster && strcmp(ctx->db, "admin") != 0)
                rc = sbl_err_set(err, SBL_E_InvalidOptions,
                                 "$changeStream may only be run with "
                                 "{allChangesForCluster: true} on the admin database");
            else if (!all_cluster && (strcmp(ctx->db, "admin") == 0 ||
                                      strcmp(ctx->db, "config") == 0 ||
                                      strcmp(ctx->db, "local") == 0))
                rc = sbl_err_set(err, SBL_E_InvalidNamespace,
                                 "$changeStream may not be opened on the internal %s database",
                                 ctx->db);
        } else {
            const char *coll = ns + strlen(ctx->db) + 1;
            st->scope = CS_COLL;
            sbl_strcpy_n(st->coll, sizeof(st->coll), coll);
            if (all_cluster)
                rc = sbl_err_set(err, SBL_E_InvalidOptions,
                                 "A $changeStream with 'allChangesForCluster:true' may only be "
                                 "opened on the 'admin' database, and with no collection name");
            else if (strcmp(ctx->db, "admin") == 0 || strcmp(ctx->db, "config") == 0 ||
                     strcmp(ctx->db, "local") == 0 || strncmp(coll, "system.", 7) == 0)
                rc = sbl_err_set(err, SBL_E_InvalidNamespace,
                                 "$changeStream may not be opened on the internal %s database",
                                 ctx->db);
        }
    }
    if (rc != 0) {
        cs_free(st);
        return rc;
    }
    sbl_cs_feed_attach(st);
    return sbl_cursor_first_batch_flags(ctx, ns, &cs_source, st, batch_size, false,
                                        SBL_CURSOR_TAILABLE | SBL_CURSOR_AWAIT_DATA, err);
}
