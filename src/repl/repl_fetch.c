/*
 * repl_fetch.c: the oplog fetcher, a thread beside the applier (mongod's
 * OplogFetcher and its buffer).  It tails the sync source's oplog on its own
 * connection (find on local.oplog.rs from a ts, tailable, awaitData, then
 * one exhaust getMore whose replies the source streams, as mongod 4.4+
 * with oplogFetcherUsesExhaust; with it false a getMore per reply; run as
 * commands on a plain connection, sbl_rs_dial: libmongoc's
 * work per command was ten times the rest of a getMore's on our side) and
 * queues the entries, each a view into the
 * reply that brought it (kept, counted, until its last entry is freed: no
 * copy per entry), so the source's next batch travels and is
 * read while the applier applies the last one: fetching and applying
 * overlap instead of taking turns (on a loaded 2-core host each took about
 * half of a secondary's time in a load phase when they took turns).
 *
 * What must stay true: entries come out in the order the source sent them;
 * an IDLE mark comes out each time the source had nothing more for now (an
 * empty awaitData wait), an END mark once the cursor is done (an error, the
 * source closed it), and nothing after END; the queue holds at most about
 * FETCH_MAX_BYTES (the fetcher waits, not the source: streaming, it stops
 * reading and TCP holds the source back, which makes no batch its socket
 * cannot take), and without exhaust a getMore goes out only once it is
 * down to FETCH_AHEAD_BYTES; a stream is read to its end or its
 * connection closed, never followed by another command midway; stop joins
 * the thread (at most one awaitData wait: a stream brings an empty batch
 * after each) and frees what is queued.
 */
#include "repl/repl_int.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "net/net.h"

#define FETCH_MAX_BYTES (2 * 1024 * 1024)
/* The next getMore goes out once the queue is down to this: it travels while
 * the applier applies the rest, and it brings all the source wrote meanwhile
 * (a getMore always in flight brought a few entries each, and each costs the
 * source and us CPU). */
#define FETCH_AHEAD_BYTES (256 * 1024)

/* A find or getMore reply, kept while any of its entries is queued or
 * being applied: an entry is a view of its bytes there, not a copy. */
typedef struct reply {
    bson_t b; /* a view into raw: the reply where it was received */
    uint8_t *raw;
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
        free(r->raw);
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
    pthread_cond_t cond; /* an item queued, taken, or stop */
    item_t *head, *tail;
    size_t bytes;        /* of the queued entries */
    bool ended;          /* the thread is done: END once the queue is empty */
    bool stop;
    /* who waits on cond (signalled only then: a wake-up per entry cost both
     * threads more than the entry's copy) */
    bool taker_waits, fetcher_waits;
    char host[256];
    uint64_t from_ts;
};

/* Queue an item: the entry of len bytes at data in reply r (kind DOC, which
 * then holds a reference to r), or IDLE; false when stopped meanwhile.  A
 * DOC waits while the queue is full. */
static bool push(sbl_rs_fetcher_t *f, int kind, reply_t *r, const uint8_t *data, uint32_t len)
{
    item_t *it = aligned_alloc(_Alignof(item_t), sizeof(*it)); /* it embeds a bson_t */
    pthread_mutex_lock(&f->mu);
    while (kind == SBL_FETCH_DOC && !f->stop && f->bytes >= FETCH_MAX_BYTES) {
        f->fetcher_waits = true;
        pthread_cond_wait(&f->cond, &f->mu);
    }
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

/* Wait until at most bytes are queued; false when stopped. */
static bool wait_below(sbl_rs_fetcher_t *f, size_t bytes)
{
    pthread_mutex_lock(&f->mu);
    while (!f->stop && f->bytes > bytes) {
        f->fetcher_waits = true;
        pthread_cond_wait(&f->cond, &f->mu);
    }
    bool go = !f->stop;
    pthread_mutex_unlock(&f->mu);
    return go;
}

/* Send cmd (find or getMore) with extra's fields and OP_MSG flag bits to
 * the source (fd), or, cmd NULL, nothing (a stream's next reply comes
 * unasked), and read the reply answering *ridp (set to the reply's own id;
 * *morep: the source streams more): the reply, referenced once by the
 * caller, with *idp its cursor id and *batch its documents (counted in the
 * metrics); NULL on any error (the source's, the connection's), which ends
 * the fetch. */
static reply_t *run(int fd, const bson_t *cmd, const bson_t *extra, uint32_t flags,
                    int32_t *ridp, bool *morep, int64_t *idp, bson_iter_t *batch)
{
    reply_t *r = aligned_alloc(_Alignof(reply_t), sizeof(*r)); /* it embeds a bson_t */
    bson_iter_t it, cur;
    if (r == NULL)
        return NULL;
    atomic_init(&r->refs, 1);
    int64_t t0 = sbl_now_us();
    if ((cmd != NULL && !sbl_client_send_flags(fd, "local", cmd, extra, flags, ridp)) ||
        !sbl_client_recv_view(fd, ridp, &r->raw, &r->b, morep)) {
        free(r); /* nothing received */
        return NULL;
    }
    bool ok = bson_iter_init_find(&it, &r->b, "ok") && bson_iter_as_double(&it) == 1.0;
    bool found_id = false, found_batch = false, getmore = false;
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
                getmore = k[0] == 'n';
            }
        }
    }
    if (!found_id || !found_batch) {
        reply_unref(r);
        return NULL;
    }
    int64_t docs = 0;
    for (bson_iter_t b = *batch; bson_iter_next(&b);)
        docs++;
    sbl_rs_count_fetch(getmore, docs, r->b.len, sbl_now_us() - t0);
    return r;
}

static void *fetch_main(void *arg)
{
    sbl_thread_name("BackgroundSync");
    sbl_rs_fetcher_t *f = arg;
    int fd = sbl_rs_dial(f->host);
    int64_t id = 0;
    bson_t cmd = BSON_INITIALIZER, filter, extra = BSON_INITIALIZER, lsid, rp;
    if (fd < 0)
        goto end;
    /* One session for the find and its getMores, as a driver's cursor: each
     * getMore keeps it (and so the cursor) from expiring.  No readConcern and
     * no afterClusterTime (not causally consistent, as mongod's fetcher): a
     * primary that just stepped down may have given an operationTime it
     * never reaches as a secondary (an aborted write's ts), and a final
     * killCursors waiting for it held a newly elected member, still naming
     * the old primary as its source, for the 10 s socket timeout. */
    uint8_t uuid[16] = {0};
    if (getrandom(uuid, sizeof(uuid), 0) != (ssize_t)sizeof(uuid))
        memcpy(uuid, &f, sizeof(f)); /* unique enough among our own sessions */
    uuid[6] = (uint8_t)((uuid[6] & 0x0f) | 0x40); /* a version 4 UUID */
    uuid[8] = (uint8_t)((uuid[8] & 0x3f) | 0x80);
    BSON_APPEND_DOCUMENT_BEGIN(&extra, "lsid", &lsid);
    bson_append_binary(&lsid, "id", 2, BSON_SUBTYPE_UUID, uuid, 16);
    bson_append_document_end(&extra, &lsid);
    /* a sync source may be a secondary (chaining) */
    BSON_APPEND_DOCUMENT_BEGIN(&extra, "$readPreference", &rp);
    BSON_APPEND_UTF8(&rp, "mode", "primaryPreferred");
    bson_append_document_end(&extra, &rp);
    BSON_APPEND_UTF8(&cmd, "find", "oplog.rs");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    if (f->from_ts != 0) {
        bson_t gte;
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "ts", &gte);
        bson_append_timestamp(&gte, "$gte", 4, SBL_TS_SECS(f->from_ts), SBL_TS_INC(f->from_ts));
        bson_append_document_end(&filter, &gte);
    }
    bson_append_document_end(&cmd, &filter);
    BSON_APPEND_BOOL(&cmd, "tailable", true);
    BSON_APPEND_BOOL(&cmd, "awaitData", true);
    sbl_rs_count_reader();
    bool exhaust = sbl_rs_fetcher_uses_exhaust(), streaming = false;
    int32_t rid = 0;
    for (bool first = true;; first = false) {
        bson_iter_t batch;
        uint32_t flags = 0;
        if (!first && !streaming) {
            /* Without exhaust, the next getMore asks the source once the
             * queue is low; with it, one getMore starts the stream */
            if (!wait_below(f, exhaust ? FETCH_MAX_BYTES : FETCH_AHEAD_BYTES))
                break;
            bson_reinit(&cmd);
            BSON_APPEND_INT64(&cmd, "getMore", id);
            BSON_APPEND_UTF8(&cmd, "collection", "oplog.rs");
            BSON_APPEND_INT64(&cmd, "maxTimeMS", 500); /* the awaitData wait */
            flags = exhaust ? SBL_CLIENT_EXHAUST_ALLOWED : 0;
        }
        reply_t *r = run(fd, streaming ? NULL : &cmd, &extra, flags, &rid, &streaming, &id,
                         &batch);
        if (r == NULL) { /* the cursor or the connection is gone: no killCursors */
            id = 0;
            streaming = false;
            break;
        }
        bool pushed = true, any = false;
        while (pushed && bson_iter_next(&batch)) {
            const uint8_t *data;
            uint32_t len;
            if (!BSON_ITER_HOLDS_DOCUMENT(&batch))
                continue;
            bson_iter_document(&batch, &len, &data);
            pushed = push(f, SBL_FETCH_DOC, r, data, len);
            any = true;
        }
        reply_unref(r);
        /* an empty batch: the source had nothing more for now */
        if (!pushed || id == 0 || (!any && !push(f, SBL_FETCH_IDLE, NULL, NULL, 0)))
            break;
    }
end:
    pthread_mutex_lock(&f->mu);
    f->ended = true;
    f->taker_waits = false;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    /* The source's cursor goes with us: mid-stream, by closing the
     * connection (the source sends more until then; it kills the cursor
     * of a stream whose connection closed), else by killCursors. */
    if (fd >= 0 && id != 0 && !streaming) {
        bson_t kill = BSON_INITIALIZER, ids, r;
        BSON_APPEND_UTF8(&kill, "killCursors", "oplog.rs");
        BSON_APPEND_ARRAY_BEGIN(&kill, "cursors", &ids);
        BSON_APPEND_INT64(&ids, "0", id);
        bson_append_array_end(&kill, &ids);
        if (sbl_client_run(fd, "local", &kill, &extra, &r)) {
            /* and the session (a driver ends its own when it closes) */
            bson_t end = BSON_INITIALIZER, arr;
            bson_iter_t it;
            BSON_APPEND_ARRAY_BEGIN(&end, "endSessions", &arr);
            if (bson_iter_init_find(&it, &extra, "lsid"))
                sbl_append_iter(&arr, "0", 1, &it);
            bson_append_array_end(&end, &arr);
            bson_destroy(&r);
            sbl_client_run(fd, "admin", &end, NULL, &r);
            bson_destroy(&end);
        }
        bson_destroy(&r);
        bson_destroy(&kill);
    }
    if (fd >= 0)
        sbl_client_close(fd);
    bson_destroy(&extra);
    bson_destroy(&cmd);
    return NULL;
}

sbl_rs_fetcher_t *sbl_rs_fetcher_start(const char *host, uint64_t from_ts)
{
    sbl_rs_fetcher_t *f = calloc(1, sizeof(*f));
    if (f == NULL || strlen(host) >= sizeof(f->host)) {
        free(f);
        return NULL;
    }
    strcpy(f->host, host);
    f->from_ts = from_ts;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    if (pthread_create(&f->thread, NULL, fetch_main, f) != 0) {
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
    if (f->fetcher_waits && f->bytes <= FETCH_AHEAD_BYTES) { /* both of its waits end here */
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

bool sbl_rs_fetcher_wait_more(sbl_rs_fetcher_t *f, int64_t until_us)
{
    pthread_mutex_lock(&f->mu);
    for (;;) {
        int64_t left = until_us - sbl_now_us();
        if (f->stop || f->ended || f->bytes >= FETCH_AHEAD_BYTES || left <= 0)
            break;
        struct timespec ts = sbl_deadline_in_us(left); /* the condition's clock */
        pthread_cond_timedwait(&f->cond, &f->mu, &ts);
    }
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
    for (item_t *it = f->head, *next; it != NULL; it = next) {
        next = it->next;
        item_free(it);
    }
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
