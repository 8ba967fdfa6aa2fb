/*
 * repl_fetch.c: the oplog fetcher, a thread beside the applier (mongod's
 * OplogFetcher and its buffer).  It tails the sync source's oplog on its own
 * connection (find on local.oplog.rs from a ts, tailable, awaitData, then
 * getMores, run as commands) and queues the entries, each a view into the
 * reply that brought it (kept, counted, until its last entry is freed: no
 * copy per entry), so the source's next batch travels and is
 * read while the applier applies the last one: fetching and applying
 * overlap instead of taking turns (measured in docs/replication.md: on a
 * loaded 2-core host each took about half of a secondary's time in a load
 * phase).  The thread reads ahead only while the applier has a backlog
 * (FETCH_PREFETCH_BYTES or more queued): an applier that runs dry runs the
 * getMore itself, so a trickle of entries (w:"majority" writes, each one
 * waiting for us) wakes the thread that applies them, not a thread that
 * hands them over: a wake-up less on the way of each write.
 *
 * What must stay true: one read at a time on the cursor (the token,
 * "fetching": its client, session and id belong to the holder), and its
 * entries are queued before the token goes, so entries come out in the
 * order the source sent them; an IDLE mark comes out each time the source
 * had nothing more for now (an empty awaitData wait), an END mark once the
 * cursor is done (an error, the source closed it), and nothing after END;
 * the fetcher thread's reads keep the queue at about FETCH_MAX_BYTES (it
 * waits, not the source; the applier's own read finds it empty), and the
 * thread's getMore goes out only once the queue is down to
 * FETCH_AHEAD_BYTES; stop (by the applier, never inside its own read)
 * joins the thread (at most one getMore's wait) and frees what is queued.
 */
#include "repl/repl_int.h"

#include <mongoc/mongoc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define FETCH_MAX_BYTES (2 * 1024 * 1024)
/* The next getMore goes out once the queue is down to this: it travels while
 * the applier applies the rest, and it brings all the source wrote meanwhile
 * (a getMore always in flight brought a few entries each, and each costs the
 * source and us CPU). */
#define FETCH_AHEAD_BYTES (256 * 1024)
/* ... and once it holds at least this: less is read by the applier itself
 * when it runs dry (read_ahead_locked). */
#define FETCH_PREFETCH_BYTES (32 * 1024)

/* A find or getMore reply, kept while any of its entries is queued or
 * being applied: an entry is a view of its bytes there, not a copy. */
typedef struct reply {
    bson_t b;
    atomic_int refs;
} reply_t;

typedef struct item {
    struct item *next;
    int kind;    /* SBL_FETCH_DOC or _IDLE */
    bson_t doc;  /* DOC: a view into r's bytes */
    reply_t *r;
} item_t;

static void reply_unref(reply_t *r)
{
    if (r != NULL && atomic_fetch_sub(&r->refs, 1) == 1) {
        bson_destroy(&r->b);
        free(r);
    }
}

static void item_free(item_t *it)
{
    reply_unref(it->r);
    free(it);
}

struct sbl_rs_fetcher {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* an item queued, taken, the cursor free, or stop */
    item_t *head, *tail;
    size_t bytes;        /* of the queued entries */
    bool ended;          /* the cursor is done: END once the queue is empty */
    bool stop;
    bool fetching;       /* a thread runs the cursor's find or getMore (the token) */
    /* who waits on cond (signalled only then: a wake-up per entry cost both
     * threads more than the entry's copy): the taker for an item, the
     * fetcher thread for room in the queue or for a read to do */
    bool taker_waits, fetcher_waits;
    bool fetcher_full;   /* it waits for room (not for a read to do) */
    char uri[4096];
    uint64_t from_ts;
    /* The cursor, used by the thread holding the token only. */
    mongoc_client_t *c;
    mongoc_apm_callbacks_t *apm;
    mongoc_read_prefs_t *rp;
    mongoc_client_session_t *cs;
    bson_t opts;
    int64_t counted; /* count_reply's tally (unused here) */
    int64_t id;
    bool first;      /* the find is still to run */
};

/* The fetcher's find and getMore replies: what they brought (metrics). */
static void count_reply(const mongoc_apm_command_succeeded_t *ev)
{
    const char *name = mongoc_apm_command_succeeded_get_command_name(ev);
    const bson_t *reply = mongoc_apm_command_succeeded_get_reply(ev);
    bson_iter_t it, arr;
    const char *path = strcmp(name, "getMore") == 0 ? "cursor.nextBatch"
                     : strcmp(name, "find") == 0 ? "cursor.firstBatch" : NULL;
    if (path == NULL || !bson_iter_init(&it, reply) ||
        !bson_iter_find_descendant(&it, path, &arr) || !BSON_ITER_HOLDS_ARRAY(&arr) ||
        !bson_iter_recurse(&arr, &it))
        return;
    int64_t docs = 0, *left = mongoc_apm_command_succeeded_get_context(ev);
    while (bson_iter_next(&it))
        docs++;
    *left += docs;
    sbl_rs_count_fetch(path[7] == 'n', docs, reply->len,
                       mongoc_apm_command_succeeded_get_duration(ev));
}

/* Queue an item: the entry of len bytes at data in reply r (kind DOC, which
 * then holds a reference to r), or IDLE; false when stopped meanwhile.  A
 * DOC the fetcher thread reads waits while the queue is full (the taker's
 * own read never waits: it would wait for itself). */
static bool push(sbl_rs_fetcher_t *f, bool taker, int kind, reply_t *r, const uint8_t *data,
                 uint32_t len)
{
    item_t *it = malloc(sizeof(*it));
    pthread_mutex_lock(&f->mu);
    while (!taker && kind == SBL_FETCH_DOC && !f->stop && f->bytes >= FETCH_MAX_BYTES) {
        f->fetcher_waits = f->fetcher_full = true;
        pthread_cond_wait(&f->cond, &f->mu);
    }
    f->fetcher_full = false;
    if (f->stop || it == NULL ||
        (kind == SBL_FETCH_DOC && !bson_init_static(&it->doc, data, len))) {
        pthread_mutex_unlock(&f->mu);
        free(it);
        return false;
    }
    it->next = NULL;
    it->kind = kind;
    it->r = kind == SBL_FETCH_DOC ? r : NULL;
    if (it->r != NULL)
        atomic_fetch_add(&r->refs, 1);
    if (f->tail != NULL)
        f->tail->next = it;
    else
        f->head = it;
    f->tail = it;
    f->bytes += kind == SBL_FETCH_DOC ? len : 0;
    if (f->taker_waits) {
        f->taker_waits = false;
        pthread_cond_broadcast(&f->cond);
    }
    pthread_mutex_unlock(&f->mu);
    return true;
}

/* Run cmd (find or getMore) on the source: its reply, referenced once by
 * the caller, with *idp its cursor id and *batch its documents; NULL on
 * any error (the source's, the connection's), which ends the fetch. */
static reply_t *run(mongoc_client_t *c, const mongoc_read_prefs_t *rp, const bson_t *opts,
                    const bson_t *cmd, int64_t *idp, bson_iter_t *batch)
{
    reply_t *r = malloc(sizeof(*r));
    bson_error_t error;
    bson_iter_t it, cur;
    if (r == NULL)
        return NULL;
    atomic_init(&r->refs, 1);
    bool ok = mongoc_client_read_command_with_opts(c, "local", cmd, rp, opts, &r->b, &error);
    bool found_id = false, found_batch = false;
    if (ok && bson_iter_init_find(&it, &r->b, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &cur)) {
        while (bson_iter_next(&cur)) {
            const char *k = bson_iter_key(&cur);
            if (strcmp(k, "id") == 0 && BSON_ITER_HOLDS_INT(&cur)) {
                *idp = bson_iter_as_int64(&cur);
                found_id = true;
            } else if ((strcmp(k, "firstBatch") == 0 || strcmp(k, "nextBatch") == 0) &&
                       BSON_ITER_HOLDS_ARRAY(&cur) && bson_iter_recurse(&cur, batch)) {
                found_batch = true;
            }
        }
    }
    if (!found_id || !found_batch) {
        reply_unref(r);
        return NULL;
    }
    return r;
}

/* Run the cursor's next read (the find, then getMores) and queue what it
 * brought: its entries, or IDLE when it brought none.  The caller holds the
 * token (f->fetching); taker: the caller is the taker itself.  False once
 * the cursor is done (an error, the source closed it, stop). */
static bool fetch_once(sbl_rs_fetcher_t *f, bool taker)
{
    bson_t cmd = BSON_INITIALIZER, filter;
    bson_iter_t batch;
    if (f->c == NULL)
        return false;
    if (f->first) {
        BSON_APPEND_UTF8(&cmd, "find", "oplog.rs");
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
        if (f->from_ts != 0) {
            bson_t gte;
            BSON_APPEND_DOCUMENT_BEGIN(&filter, "ts", &gte);
            bson_append_timestamp(&gte, "$gte", 4, SBL_TS_SECS(f->from_ts),
                                  SBL_TS_INC(f->from_ts));
            bson_append_document_end(&filter, &gte);
        }
        bson_append_document_end(&cmd, &filter);
        BSON_APPEND_BOOL(&cmd, "tailable", true);
        BSON_APPEND_BOOL(&cmd, "awaitData", true);
        sbl_rs_count_reader();
        f->first = false;
    } else {
        BSON_APPEND_INT64(&cmd, "getMore", f->id);
        BSON_APPEND_UTF8(&cmd, "collection", "oplog.rs");
        BSON_APPEND_INT64(&cmd, "maxTimeMS", 500); /* the awaitData wait */
    }
    reply_t *r = run(f->c, f->rp, &f->opts, &cmd, &f->id, &batch);
    bson_destroy(&cmd);
    if (r == NULL) { /* the cursor or the connection is gone: no killCursors */
        f->id = 0;
        return false;
    }
    bool pushed = true, any = false;
    while (pushed && bson_iter_next(&batch)) {
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&batch))
            continue;
        bson_iter_document(&batch, &len, &data);
        pushed = push(f, taker, SBL_FETCH_DOC, r, data, len);
        any = true;
    }
    reply_unref(r);
    /* an empty batch: the source had nothing more for now */
    return pushed && f->id != 0 && (any || push(f, taker, SBL_FETCH_IDLE, NULL, NULL, 0));
}

/* Whether the fetcher thread reads ahead now (lock held): the find, or a
 * getMore while the taker has at least FETCH_PREFETCH_BYTES and at most
 * FETCH_AHEAD_BYTES to apply.  A shorter queue is the taker's to read
 * when it runs dry: the read's reply then wakes the thread that applies
 * it, not a thread that hands it over (a wake-up more on the way of every
 * w:"majority" write, docs/replication.md). */
static bool read_ahead_locked(const sbl_rs_fetcher_t *f)
{
    return !f->fetching && !f->ended &&
           (f->first || (f->bytes >= FETCH_PREFETCH_BYTES && f->bytes <= FETCH_AHEAD_BYTES));
}

/* The read with the token taken (lock held; released meanwhile): a cursor
 * that is done ends the queue. */
static void read_locked(sbl_rs_fetcher_t *f, bool taker)
{
    f->fetching = true;
    pthread_mutex_unlock(&f->mu);
    bool more = fetch_once(f, taker);
    pthread_mutex_lock(&f->mu);
    f->fetching = false;
    if (!more)
        f->ended = true;
    /* the taker may wait for the token, or for END; the fetcher thread for a
     * read ahead to do, or for its end */
    bool wake_fetcher = f->fetcher_waits && (read_ahead_locked(f) || f->ended);
    if (f->taker_waits || wake_fetcher) {
        f->taker_waits = false;
        f->fetcher_waits = f->fetcher_waits && !wake_fetcher;
        pthread_cond_broadcast(&f->cond);
    }
}

static void *fetch_main(void *arg)
{
    sbl_rs_fetcher_t *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->stop && !f->ended && !read_ahead_locked(f)) {
            f->fetcher_waits = true;
            pthread_cond_wait(&f->cond, &f->mu);
        }
        if (f->stop || f->ended)
            break;
        read_locked(f, false);
    }
    while (f->fetching) { /* the taker's read ends before the cursor goes */
        f->fetcher_waits = true;
        pthread_cond_wait(&f->cond, &f->mu);
    }
    f->ended = true;
    f->taker_waits = false;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    if (f->c != NULL && f->id != 0) { /* the source's cursor goes with us */
        bson_t kill = BSON_INITIALIZER, ids, r;
        BSON_APPEND_UTF8(&kill, "killCursors", "oplog.rs");
        BSON_APPEND_ARRAY_BEGIN(&kill, "cursors", &ids);
        BSON_APPEND_INT64(&ids, "0", f->id);
        bson_append_array_end(&kill, &ids);
        mongoc_client_read_command_with_opts(f->c, "local", &kill, f->rp, &f->opts, &r, NULL);
        bson_destroy(&r);
        bson_destroy(&kill);
    }
    return NULL;
}

/* The cursor's client and session (used by one thread at a time). */
static void cursor_open(sbl_rs_fetcher_t *f)
{
    bson_init(&f->opts);
    f->first = true;
    f->apm = mongoc_apm_callbacks_new();
    /* a sync source may be a secondary (chaining) */
    f->rp = mongoc_read_prefs_new(MONGOC_READ_PRIMARY_PREFERRED);
    if ((f->c = mongoc_client_new(f->uri)) == NULL)
        return;
    mongoc_apm_set_command_succeeded_cb(f->apm, count_reply);
    mongoc_client_set_apm_callbacks(f->c, f->apm, &f->counted);
    /* One session for the find and its getMores, as a driver's cursor: each
     * getMore keeps it (and so the cursor) from expiring. */
    if ((f->cs = mongoc_client_start_session(f->c, NULL, NULL)) != NULL &&
        !mongoc_client_session_append(f->cs, &f->opts, NULL))
        bson_reinit(&f->opts);
}

static void cursor_close(sbl_rs_fetcher_t *f)
{
    if (f->cs != NULL)
        mongoc_client_session_destroy(f->cs);
    bson_destroy(&f->opts);
    if (f->c != NULL)
        mongoc_client_destroy(f->c);
    mongoc_apm_callbacks_destroy(f->apm);
    mongoc_read_prefs_destroy(f->rp);
}

sbl_rs_fetcher_t *sbl_rs_fetcher_start(const char *uri, uint64_t from_ts)
{
    sbl_rs_fetcher_t *f = calloc(1, sizeof(*f));
    if (f == NULL || strlen(uri) >= sizeof(f->uri)) {
        free(f);
        return NULL;
    }
    strcpy(f->uri, uri);
    f->from_ts = from_ts;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    cursor_open(f);
    if (pthread_create(&f->thread, NULL, fetch_main, f) != 0) {
        cursor_close(f);
        pthread_cond_destroy(&f->cond);
        pthread_mutex_destroy(&f->mu);
        free(f);
        return NULL;
    }
    return f;
}

int sbl_rs_fetcher_next(sbl_rs_fetcher_t *f, const bson_t **docp)
{
    *docp = NULL;
    pthread_mutex_lock(&f->mu);
    while (f->head == NULL && !f->ended) {
        if (!f->fetching && !f->first && !f->stop) { /* run dry: read ourselves */
            read_locked(f, true);
            continue;
        }
        f->taker_waits = true;
        pthread_cond_wait(&f->cond, &f->mu);
    }
    item_t *it = f->head;
    if (it == NULL) {
        pthread_mutex_unlock(&f->mu);
        return SBL_FETCH_END;
    }
    int kind = it->kind;
    f->head = it->next;
    if (f->head == NULL)
        f->tail = NULL;
    if (kind == SBL_FETCH_DOC)
        f->bytes -= it->doc.len;
    /* the fetcher thread waits for room (a full queue) or for a read ahead */
    if (f->fetcher_waits &&
        ((f->fetcher_full && f->bytes <= FETCH_AHEAD_BYTES) || read_ahead_locked(f))) {
        f->fetcher_waits = false;
        pthread_cond_broadcast(&f->cond);
    }
    pthread_mutex_unlock(&f->mu);
    if (kind == SBL_FETCH_DOC)
        *docp = &it->doc; /* the item goes with sbl_rs_fetched_free */
    else
        item_free(it);
    return kind;
}

void sbl_rs_fetched_free(const bson_t *doc)
{
    if (doc != NULL)
        item_free((item_t *)((const char *)doc - offsetof(item_t, doc)));
}

bool sbl_rs_fetcher_queued(sbl_rs_fetcher_t *f)
{
    pthread_mutex_lock(&f->mu);
    bool queued = f->head != NULL;
    pthread_mutex_unlock(&f->mu);
    return queued;
}

void sbl_rs_fetcher_stop(sbl_rs_fetcher_t *f)
{
    if (f == NULL)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    cursor_close(f);
    for (item_t *it = f->head, *next; it != NULL; it = next) {
        next = it->next;
        item_free(it);
    }
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
