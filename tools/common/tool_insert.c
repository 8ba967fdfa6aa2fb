/*
 * tool_insert.c: inserts into one collection from worker threads, each on a
 * connection of its own, so reading and parsing the input (the caller's
 * thread) overlaps the server's inserts, and several batches are in the
 * server at once (mongorestore's --numInsertionWorkersPerCollection,
 * mongoimport's --numInsertionWorkers).
 *
 * What must stay true: every document handed to tool_inserter_add is either
 * counted inserted or counted failed by tool_inserter_finish, unless a fatal
 * error (the server cannot be written, or --stopOnError's first failure)
 * stops the workers; then the caller hears it from tool_inserter_add or
 * tool_inserter_finish.  With one worker, batches reach the server in order.
 */
#include "tool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_BYTES (8 << 20)

typedef struct batch {
    bson_t docs; /* {"0": doc, "1": doc, ...} as an array's body */
    uint32_t n;
    struct batch *next;
} batch_t;

struct tool_inserter {
    tool_insert_opts_t o;
    char *db, *coll;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_room;
    batch_t *head, *tail;
    int queued, cap;
    bool closing, fatal;
    int64_t ok, failed, reported;
    int nthreads;
    pthread_t *threads;
    mongoc_client_t **clients;
    batch_t *cur; /* being filled by the caller */
};

/* Send one batch on c; counts under mu.  Returns false on a fatal error. */
static bool send_batch(tool_inserter_t *in, mongoc_client_t *c, batch_t *b)
{
    bson_t cmd = BSON_INITIALIZER, opts = BSON_INITIALIZER, reply;
    bson_error_t e;
    bson_iter_t it, arr, we;
    BSON_APPEND_UTF8(&cmd, "insert", in->coll);
    bson_append_array(&cmd, "documents", -1, &b->docs);
    BSON_APPEND_BOOL(&cmd, "ordered", in->o.ordered);
    if (in->o.bypass_validation)
        BSON_APPEND_BOOL(&cmd, "bypassDocumentValidation", true);
    if (in->o.wc != NULL)
        mongoc_write_concern_append((mongoc_write_concern_t *)in->o.wc, &opts);
    bool ok = mongoc_client_write_command_with_opts(c, in->db, &cmd, &opts, &reply, &e);
    int64_t n = 0, nerr = 0;
    const char *first = NULL;
    bool wc_error = false;
    if (ok && bson_iter_init_find(&it, &reply, "n"))
        n = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, &reply, "writeConcernError"))
        wc_error = true;
    pthread_mutex_lock(&in->mu);
    if (bson_iter_init_find(&it, &reply, "writeErrors") && bson_iter_recurse(&it, &arr)) {
        while (bson_iter_next(&arr)) {
            if (bson_iter_recurse(&arr, &we) && bson_iter_find(&we, "errmsg") &&
                BSON_ITER_HOLDS_UTF8(&we)) {
                if (first == NULL)
                    first = bson_iter_utf8(&we, NULL);
                if (in->reported++ < in->o.max_reported && !in->o.stop_on_error)
                    tool_log("%s: %s", in->o.error_prefix, bson_iter_utf8(&we, NULL));
            }
            nerr++;
        }
    }
    bool fatal = false;
    if ((!ok && nerr == 0) || wc_error) {
        fatal = true;
        tool_err("%s: %s", in->o.fatal_prefix, ok ? "write concern error" : e.message);
        nerr = b->n - n;
    } else if (nerr > 0 && in->o.stop_on_error) {
        fatal = true;
        tool_err("%s: %s", in->o.stop_prefix, first != NULL ? first : e.message);
    }
    in->ok += n;
    in->failed += nerr;
    if (fatal)
        in->fatal = true;
    pthread_mutex_unlock(&in->mu);
    bson_destroy(&reply);
    bson_destroy(&opts);
    bson_destroy(&cmd);
    return !fatal;
}

typedef struct worker_arg {
    tool_inserter_t *in;
    mongoc_client_t *c;
} worker_arg_t;

static void *worker(void *arg)
{
    worker_arg_t *wa = arg;
    tool_inserter_t *in = wa->in;
    for (;;) {
        pthread_mutex_lock(&in->mu);
        while (in->head == NULL && !in->closing && !in->fatal)
            pthread_cond_wait(&in->cv_work, &in->mu);
        batch_t *b = in->fatal ? NULL : in->head;
        if (b != NULL) {
            in->head = b->next;
            if (in->head == NULL)
                in->tail = NULL;
            in->queued--;
            pthread_cond_signal(&in->cv_room);
        }
        pthread_mutex_unlock(&in->mu);
        if (b == NULL)
            break;
        bool ok = send_batch(in, wa->c, b);
        bson_destroy(&b->docs);
        free(b);
        if (!ok) {
            pthread_mutex_lock(&in->mu);
            pthread_cond_broadcast(&in->cv_room);
            pthread_cond_broadcast(&in->cv_work);
            pthread_mutex_unlock(&in->mu);
            break;
        }
    }
    free(wa);
    return NULL;
}

tool_inserter_t *tool_inserter_new(const tool_conn_t *conn, const char *db, const char *coll,
                                   const tool_insert_opts_t *o)
{
    tool_inserter_t *in = calloc(1, sizeof(*in));
    in->o = *o;
    if (in->o.workers < 1)
        in->o.workers = 1;
    if (in->o.batch_docs < 1)
        in->o.batch_docs = 1000;
    in->db = strdup(db);
    in->coll = strdup(coll);
    in->cap = 2 * in->o.workers;
    pthread_mutex_init(&in->mu, NULL);
    pthread_cond_init(&in->cv_work, NULL);
    pthread_cond_init(&in->cv_room, NULL);
    in->threads = calloc((size_t)in->o.workers, sizeof(pthread_t));
    in->clients = calloc((size_t)in->o.workers, sizeof(mongoc_client_t *));
    for (int i = 0; i < in->o.workers; i++) {
        if ((in->clients[i] = tool_connect(conn)) == NULL)
            break;
        worker_arg_t *wa = malloc(sizeof(*wa));
        wa->in = in;
        wa->c = in->clients[i];
        if (pthread_create(&in->threads[i], NULL, worker, wa) != 0) {
            free(wa);
            mongoc_client_destroy(in->clients[i]);
            in->clients[i] = NULL;
            break;
        }
        in->nthreads++;
    }
    if (in->nthreads == 0) {
        int64_t ok, failed;
        tool_inserter_finish(in, &ok, &failed);
        return NULL;
    }
    return in;
}

/* Queue the batch being filled; false once a fatal error stopped the workers. */
static bool hand_over(tool_inserter_t *in)
{
    batch_t *b = in->cur;
    in->cur = NULL;
    if (b == NULL)
        return true;
    pthread_mutex_lock(&in->mu);
    while (in->queued >= in->cap && !in->fatal)
        pthread_cond_wait(&in->cv_room, &in->mu);
    bool fatal = in->fatal;
    if (!fatal) {
        if (in->tail != NULL)
            in->tail->next = b;
        else
            in->head = b;
        in->tail = b;
        in->queued++;
        pthread_cond_signal(&in->cv_work);
    }
    pthread_mutex_unlock(&in->mu);
    if (fatal) {
        bson_destroy(&b->docs);
        free(b);
    }
    return !fatal;
}

int tool_inserter_add(tool_inserter_t *in, const bson_t *doc)
{
    if (in->cur == NULL) {
        /* batch_t embeds a bson_t, which asks for 128-byte alignment (calloc gives 16). */
        size_t size = (sizeof(batch_t) + 127) & ~(size_t)127;
        in->cur = aligned_alloc(128, size);
        if (in->cur == NULL)
            return -1;
        memset(in->cur, 0, sizeof(batch_t));
        bson_init(&in->cur->docs);
    }
    char key[16];
    const char *k;
    bson_uint32_to_string(in->cur->n++, &k, key, sizeof(key));
    bson_append_document(&in->cur->docs, k, -1, doc);
    if (in->cur->n >= (uint32_t)in->o.batch_docs || in->cur->docs.len >= BATCH_BYTES)
        return hand_over(in) ? 0 : -1;
    return 0;
}

int tool_inserter_finish(tool_inserter_t *in, int64_t *okp, int64_t *failedp)
{
    hand_over(in);
    pthread_mutex_lock(&in->mu);
    in->closing = true;
    pthread_cond_broadcast(&in->cv_work);
    pthread_mutex_unlock(&in->mu);
    for (int i = 0; i < in->nthreads; i++)
        pthread_join(in->threads[i], NULL);
    for (int i = 0; i < in->o.workers; i++)
        if (in->clients[i] != NULL)
            mongoc_client_destroy(in->clients[i]);
    while (in->head != NULL) { /* left by a fatal error */
        batch_t *b = in->head;
        in->head = b->next;
        bson_destroy(&b->docs);
        free(b);
    }
    *okp = in->ok;
    *failedp = in->failed;
    int rc = in->fatal ? -1 : 0;
    pthread_mutex_destroy(&in->mu);
    pthread_cond_destroy(&in->cv_work);
    pthread_cond_destroy(&in->cv_room);
    free(in->threads);
    free(in->clients);
    free(in->db);
    free(in->coll);
    free(in);
    return rc;
}
