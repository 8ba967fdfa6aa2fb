/*
 * repl_fetch.c: the oplog fetcher, a thread beside the applier (mongod's
 * OplogFetcher and its buffer).  It tails the sync source's oplog on its own
 * connection (find on local.oplog.rs from a ts, tailable, awaitData) and
 * queues copies of the entries, so the source's next batch travels and is
 * read while the applier applies the last one: fetching and applying
 * overlap instead of taking turns (measured in docs/replication.md: on a
 * loaded 2-core host each took about half of a secondary's time in a load
 * phase).
 *
 * What must stay true: entries come out in the order the source sent them;
 * an IDLE mark comes out each time the source had nothing more for now (an
 * empty awaitData wait), an END mark once the cursor is done (an error, the
 * source closed it), and nothing after END; the queue holds at most about
 * FETCH_MAX_BYTES (the fetcher waits, not the source), and a getMore goes
 * out only once it is down to FETCH_AHEAD_BYTES; stop joins the thread
 * (at most one getMore's wait) and frees what is queued.
 */
#include "repl/repl_int.h"

#include <mongoc/mongoc.h>
#include <stdlib.h>
#include <string.h>

#define FETCH_MAX_BYTES (2 * 1024 * 1024)
/* The next getMore goes out once the queue is down to this: it travels while
 * the applier applies the rest, and it brings all the source wrote meanwhile
 * (a getMore always in flight brought a few entries each, and each costs the
 * source and us CPU). */
#define FETCH_AHEAD_BYTES (256 * 1024)

typedef struct item {
    struct item *next;
    int kind;   /* SBL_FETCH_DOC or _IDLE */
    bson_t *doc; /* DOC: owned here until handed out */
} item_t;

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
    char uri[4096];
    uint64_t from_ts;
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

/* Queue an item; false when stopped meanwhile (doc is then freed).  A DOC
 * waits while the queue is full. */
static bool push(sbl_rs_fetcher_t *f, int kind, bson_t *doc)
{
    item_t *it = malloc(sizeof(*it));
    pthread_mutex_lock(&f->mu);
    while (kind == SBL_FETCH_DOC && !f->stop && f->bytes >= FETCH_MAX_BYTES) {
        f->fetcher_waits = true;
        pthread_cond_wait(&f->cond, &f->mu);
    }
    if (f->stop || it == NULL) {
        pthread_mutex_unlock(&f->mu);
        free(it);
        if (doc != NULL)
            bson_destroy(doc);
        return false;
    }
    *it = (item_t){.kind = kind, .doc = doc};
    if (f->tail != NULL)
        f->tail->next = it;
    else
        f->head = it;
    f->tail = it;
    f->bytes += doc != NULL ? doc->len : 0;
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

static void *fetch_main(void *arg)
{
    sbl_rs_fetcher_t *f = arg;
    mongoc_client_t *c = mongoc_client_new(f->uri);
    mongoc_apm_callbacks_t *apm = mongoc_apm_callbacks_new();
    mongoc_collection_t *oplog = NULL;
    mongoc_cursor_t *cur = NULL;
    int64_t left = 0; /* entries of the last reply libmongoc still holds */
    bson_t filter = BSON_INITIALIZER, gte, opts = BSON_INITIALIZER;
    if (c == NULL)
        goto end;
    mongoc_apm_set_command_succeeded_cb(apm, count_reply);
    mongoc_client_set_apm_callbacks(c, apm, &left);
    oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    if (f->from_ts != 0) {
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "ts", &gte);
        bson_append_timestamp(&gte, "$gte", 4, SBL_TS_SECS(f->from_ts), SBL_TS_INC(f->from_ts));
        bson_append_document_end(&filter, &gte);
    }
    BSON_APPEND_BOOL(&opts, "tailable", true);
    BSON_APPEND_BOOL(&opts, "awaitData", true);
    BSON_APPEND_INT64(&opts, "maxAwaitTimeMS", 500);
    cur = mongoc_collection_find_with_opts(oplog, &filter, &opts, NULL);
    sbl_rs_count_reader();
    for (;;) {
        const bson_t *doc;
        bson_error_t error;
        if (left <= 0 && !wait_below(f, FETCH_AHEAD_BYTES)) /* the next read asks the source */
            break;
        if (mongoc_cursor_next(cur, &doc)) {
            left--;
            if (!push(f, SBL_FETCH_DOC, bson_copy(doc)))
                break;
            continue;
        }
        if (mongoc_cursor_error(cur, &error) || !mongoc_cursor_more(cur) ||
            !push(f, SBL_FETCH_IDLE, NULL))
            break;
    }
end:
    pthread_mutex_lock(&f->mu);
    f->ended = true;
    f->taker_waits = false;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    if (cur != NULL)
        mongoc_cursor_destroy(cur);
    if (oplog != NULL)
        mongoc_collection_destroy(oplog);
    if (c != NULL)
        mongoc_client_destroy(c);
    mongoc_apm_callbacks_destroy(apm);
    bson_destroy(&filter);
    bson_destroy(&opts);
    return NULL;
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
    if (pthread_create(&f->thread, NULL, fetch_main, f) != 0) {
        pthread_cond_destroy(&f->cond);
        pthread_mutex_destroy(&f->mu);
        free(f);
        return NULL;
    }
    return f;
}

int sbl_rs_fetcher_next(sbl_rs_fetcher_t *f, bson_t **docp)
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
    if (it->doc != NULL)
        f->bytes -= it->doc->len;
    if (f->fetcher_waits && f->bytes <= FETCH_AHEAD_BYTES) { /* both of its waits end here */
        f->fetcher_waits = false;
        pthread_cond_broadcast(&f->cond);
    }
    pthread_mutex_unlock(&f->mu);
    *docp = it->doc;
    free(it);
    return kind;
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
    for (item_t *it = f->head, *next; it != NULL; it = next) {
        next = it->next;
        if (it->doc != NULL)
            bson_destroy(it->doc);
        free(it);
    }
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
