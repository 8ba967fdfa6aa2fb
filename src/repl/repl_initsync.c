/*
 * repl_initsync.c: initial sync, as mongod's: a member with no oplog (new,
 * or its dbpath emptied to resync it) clones every database from its sync
 * source and then catches up from the source's oplog before it is SECONDARY.
 *
 * Steps: mark the sync in progress (local.replset.initialSyncFlag exists
 * until it ends; a restart that finds it starts over), drop whatever
 * replicated data is here, note the source's newest oplog entry (the point
 * from which entries are applied), clone each collection (with the
 * source's UUID: options, documents in large unlogged, untimestamped
 * transactions, then indexes: none but _id on a member whose config says
 * buildIndexes: false), checkpoint, write the noted entry as our first
 * oplog entry, clear the mark.  The ordinary tailer (repl_sync.c) then
 * applies the source's entries after that point, idempotently (documents
 * copied after it was noted may already show later changes), and says
 * SECONDARY once caught up.
 *
 * What must stay true: nothing written while cloning is logged to our
 * oplog; the oplog's first entry is written only after the cloned data is
 * durable.
 */
#include "repl/repl_int.h"

#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

#define rs sbl_rs
#define FLAG_NS "local.replset.initialSyncFlag"
#define CLONE_TXN_BYTES (8 * 1024 * 1024)

_Thread_local bool sbl_repl_cloning;

/* What replSetGetStatus shows while it runs (under rs.lock). */
static struct {
    bool running;
    int64_t start_ms, end_ms;
    int64_t attempts_failed;
    int64_t total_bytes, copied_bytes;
    int dbs_to_clone, dbs_cloned;
    uint64_t oplog_start;
    char db[128];
} st;

bool sbl_rs_initial_sync_flagged(void)
{
    sbl_coll_t *c = NULL;
    sbl_err_t err;
    sbl_err_clear(&err);
    if (sbl_coll_open(sbl_session_get(), FLAG_NS, false, &c, NULL, &err) != 0)
        return false;
    sbl_coll_release(c);
    return true;
}

void sbl_rs_append_initial_sync_status(bson_t *r)
{
    bson_t d, dbs;
    if (st.start_ms == 0)
        return;
    int64_t now = sbl_now_ms();
    BSON_APPEND_DOCUMENT_BEGIN(r, "initialSyncStatus", &d);
    BSON_APPEND_INT64(&d, "failedInitialSyncAttempts", st.attempts_failed);
    BSON_APPEND_INT32(&d, "maxFailedInitialSyncAttempts", 10);
    BSON_APPEND_DATE_TIME(&d, "initialSyncStart", st.start_ms);
    if (!st.running)
        BSON_APPEND_DATE_TIME(&d, "initialSyncEnd", st.end_ms);
    BSON_APPEND_INT64(&d, "totalInitialSyncElapsedMillis",
                      (st.running ? now : st.end_ms) - st.start_ms);
    BSON_APPEND_INT64(&d, "approxTotalDataSize", st.total_bytes);
    BSON_APPEND_INT64(&d, "approxTotalBytesCopied", st.copied_bytes);
    bson_append_timestamp(&d, "initialSyncOplogStart", -1, SBL_TS_SECS(st.oplog_start),
                          SBL_TS_INC(st.oplog_start));
    BSON_APPEND_DOCUMENT_BEGIN(&d, "databases", &dbs);
    BSON_APPEND_INT32(&dbs, "databasesToClone", st.dbs_to_clone - st.dbs_cloned);
    BSON_APPEND_INT32(&dbs, "databasesCloned", st.dbs_cloned);
    bson_append_document_end(&d, &dbs);
    bson_append_document_end(r, &d);
}

static const char *bson_first_key(const bson_t *d)
{
    bson_iter_t it;
    return bson_iter_init(&it, d) && bson_iter_next(&it) ? bson_iter_key(&it) : "";
}

static int cmd_on(mongoc_client_t *c, const char *db, const bson_t *cmd, bson_t *reply,
                  sbl_err_t *err)
{
    bson_error_t e;
    if (!mongoc_client_command_simple(c, db, cmd, NULL, reply, &e))
        return sbl_err_set(err, SBL_E_HostUnreachable, "initial sync: %s on the sync source: %s",
                           bson_first_key(cmd), e.message);
    return 0;
}

/* Run cmd here through the command layer; its ok:0 becomes err. */
static int run_here(const char *db, const bson_t *cmd, sbl_err_t *err, bool ignore_exists)
{
    bson_t reply = BSON_INITIALIZER;
    bson_iter_t it;
    int rc = 0;
    sbl_rs_runner(db, cmd, &reply);
    if (bson_iter_init_find(&it, &reply, "ok") && bson_iter_as_double(&it) != 1.0) {
        int code = bson_iter_init_find(&it, &reply, "code") ? (int)bson_iter_as_int64(&it) : 1;
        const char *msg = bson_iter_init_find(&it, &reply, "errmsg") &&
                                  BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
        if (!(ignore_exists && (code == SBL_E_NamespaceExists || code == 85 || code == 86)))
            rc = sbl_err_set(err, code ? code : 1, "initial sync: %s", msg);
    }
    bson_destroy(&reply);
    return rc;
}

/* Drop every replicated database here (a restarted or repeated sync). */
static bool collect_db(const char *ns, const bson_t *options, const uint8_t *uuid, void *arg)
{
    (void)options;
    (void)uuid;
    bson_t *names = arg;
    const char *dot = strchr(ns, '.');
    char db[128];
    snprintf(db, sizeof(db), "%.*s", (int)(dot != NULL ? dot - ns : (long)strlen(ns)), ns);
    if (strcmp(db, "local") != 0 && strcmp(db, "config") != 0 && !bson_has_field(names, db))
        BSON_APPEND_BOOL(names, db, true);
    return true;
}

static int drop_user_data(sbl_session_t *s, sbl_err_t *err)
{
    bson_t names = BSON_INITIALIZER;
    bson_iter_t it;
    int rc = 0;
    sbl_catalog_list(NULL, collect_db, &names);
    if (bson_iter_init(&it, &names))
        while (rc == 0 && bson_iter_next(&it))
            rc = sbl_db_drop(s, bson_iter_key(&it), err);
    bson_destroy(&names);
    return rc;
}

/* The documents travel from a fetcher thread (the source's find and
 * getMores) to the writer (this thread) in batches of about
 * CLONE_TXN_BYTES, at most CLONE_QUEUE of them queued: the source produces
 * the next batch while this member writes the last one. */
#define CLONE_QUEUE 3

typedef struct clone_batch {
    bson_t **docs;
    size_t n, cap, bytes;
    struct clone_batch *next;
} clone_batch_t;

typedef struct clone_pipe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    clone_batch_t *head, *tail;
    int queued;
    bool done, stop;
    char error[512];
    mongoc_cursor_t *cur;
} clone_pipe_t;

static void batch_free(clone_batch_t *b)
{
    for (size_t i = 0; b != NULL && i < b->n; i++)
        bson_destroy(b->docs[i]);
    if (b != NULL)
        bson_free(b->docs);
    bson_free(b);
}

static void *fetch_main(void *arg)
{
    sbl_thread_name("InitialSyncer");
    clone_pipe_t *p = arg;
    const bson_t *doc;
    bson_error_t e;
    clone_batch_t *b = NULL;
    bool more = true;

    while (more) {
        more = mongoc_cursor_next(p->cur, &doc);
        if (more) {
            if (b == NULL)
                b = bson_malloc0(sizeof(*b));
            if (b->n == b->cap) {
                b->cap = b->cap ? b->cap * 2 : 1024;
                b->docs = bson_realloc(b->docs, b->cap * sizeof(*b->docs));
            }
            b->docs[b->n++] = bson_copy(doc);
            b->bytes += doc->len;
        }
        if (b != NULL && (!more || b->bytes >= CLONE_TXN_BYTES)) {
            pthread_mutex_lock(&p->mu);
            while (p->queued >= CLONE_QUEUE && !p->stop)
                pthread_cond_wait(&p->cv, &p->mu);
            bool stop = p->stop;
            if (!stop) {
                if (p->tail != NULL)
                    p->tail->next = b;
                else
                    p->head = b;
                p->tail = b;
                p->queued++;
                b = NULL;
                pthread_cond_broadcast(&p->cv);
            }
            pthread_mutex_unlock(&p->mu);
            if (stop)
                break;
        }
    }
    batch_free(b);
    pthread_mutex_lock(&p->mu);
    if (mongoc_cursor_error(p->cur, &e))
        snprintf(p->error, sizeof(p->error), "%s", e.message);
    p->done = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Copy the documents of db.coll from the source into ns here. */
static int clone_docs(mongoc_client_t *c, const char *db, const char *coll, sbl_err_t *err)
{
    sbl_session_t *s = sbl_session_get();
    char ns[SBL_NS_BUF];
    sbl_coll_t *h = NULL;
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER;
    clone_pipe_t p = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    pthread_t fetcher;
    int rc = 0;

    snprintf(ns, sizeof(ns), "%s.%s", db, coll);
    SBL_RET(sbl_coll_open(s, ns, false, &h, NULL, err));
    BSON_APPEND_INT32(&opts, "batchSize", 10000);
    mongoc_collection_t *mc = mongoc_client_get_collection(c, db, coll);
    p.cur = mongoc_collection_find_with_opts(mc, &filter, &opts, NULL);
    if (pthread_create(&fetcher, NULL, fetch_main, &p) != 0) {
        rc = sbl_err_set(err, SBL_E_InternalError, "initial sync: cannot start a fetcher");
        goto out;
    }
    for (;;) {
        pthread_mutex_lock(&p.mu);
        while (p.head == NULL && !p.done)
            pthread_cond_wait(&p.cv, &p.mu);
        clone_batch_t *b = p.head;
        if (b != NULL) {
            p.head = b->next;
            if (p.head == NULL)
                p.tail = NULL;
            p.queued--;
            pthread_cond_broadcast(&p.cv);
        }
        pthread_mutex_unlock(&p.mu);
        if (b == NULL)
            break;
        if ((rc = sbl_txn_begin(s, err)) == 0) {
            for (size_t i = 0; rc == 0 && i < b->n; i++)
                rc = sbl_write(s, h, SBL_WRITE_INSERT, NULL, b->docs[i], NULL, err);
            if (rc == 0)
                rc = sbl_txn_commit(s, err);
            else
                sbl_txn_abort(s);
        }
        pthread_mutex_lock(&rs.lock);
        st.copied_bytes += (int64_t)b->bytes;
        pthread_mutex_unlock(&rs.lock);
        batch_free(b);
        if (rc != 0)
            break;
    }
    pthread_mutex_lock(&p.mu);
    p.stop = true;
    pthread_cond_broadcast(&p.cv);
    pthread_mutex_unlock(&p.mu);
    pthread_join(fetcher, NULL);
    for (clone_batch_t *b = p.head, *n; b != NULL; b = n) {
        n = b->next;
        batch_free(b);
    }
    if (rc == 0 && p.error[0] != '\0')
        rc = sbl_err_set(err, SBL_E_HostUnreachable, "initial sync: reading %s: %s", ns,
                         p.error);
out:
    mongoc_cursor_destroy(p.cur);
    mongoc_collection_destroy(mc);
    bson_destroy(&filter);
    bson_destroy(&opts);
    sbl_coll_release(h);
    return rc;
}

/* Create the collection or view described by a listCollections entry (with
 * the source's UUID), copy its documents and build its indexes. */
static int clone_collection(mongoc_client_t *c, const char *db, const bson_t *info,
                            sbl_err_t *err)
{
    bson_iter_t it, f;
    bson_t options, create = BSON_INITIALIZER;
    const char *name = NULL, *type = "collection";
    int rc = 0;

    if (bson_iter_init_find(&it, info, "name") && BSON_ITER_HOLDS_UTF8(&it))
        name = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, info, "type") && BSON_ITER_HOLDS_UTF8(&it))
        type = bson_iter_utf8(&it, NULL);
    if (name == NULL || strcmp(name, "system.profile") == 0 ||
        strncmp(name, "system.buckets.", 15) == 0)
        return 0;
    BSON_APPEND_UTF8(&create, "create", name);
    if (bson_iter_init_find(&it, info, "options") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        sbl_iter_doc(&it, &options) && bson_iter_init(&it, &options))
        while (bson_iter_next(&it))
            sbl_append_iter(&create, bson_iter_key(&it), -1, &it);
    /* the source's UUID (info.uuid; none for a view) */
    bson_subtype_t sub = BSON_SUBTYPE_BINARY;
    uint32_t ulen = 0;
    const uint8_t *uuid = NULL;
    char ns[SBL_NS_BUF];
    if (bson_iter_init(&it, info) && bson_iter_find_descendant(&it, "info.uuid", &f) &&
        BSON_ITER_HOLDS_BINARY(&f))
        bson_iter_binary(&f, &sub, &ulen, &uuid);
    snprintf(ns, sizeof(ns), "%s.%s", db, name);
    if (sub == BSON_SUBTYPE_UUID && ulen == 16)
        sbl_coll_adopt_uuid(ns, uuid);
    rc = run_here(db, &create, err, true);
    sbl_coll_adopt_uuid(NULL, NULL);
    bson_destroy(&create);
    if (rc != 0 || strcmp(type, "view") == 0)
        return rc;
    SBL_RET(clone_docs(c, db, name, err));
    if (!sbl_rs_self_builds_indexes()) /* buildIndexes: false: the _id index only */
        return 0;
    /* indexes after the documents: one pass over them each */
    bson_t cmd = BSON_INITIALIZER, reply, ci = BSON_INITIALIZER, arr;
    BSON_APPEND_UTF8(&cmd, "listIndexes", name);
    rc = cmd_on(c, db, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc != 0) {
        bson_destroy(&reply);
        return rc;
    }
    BSON_APPEND_UTF8(&ci, "createIndexes", name);
    BSON_APPEND_ARRAY_BEGIN(&ci, "indexes", &arr);
    int n = 0;
    bson_iter_t b;
    if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch", &b) &&
        BSON_ITER_HOLDS_ARRAY(&b) && bson_iter_recurse(&b, &it))
        while (bson_iter_next(&it)) {
            bson_t spec;
            bson_iter_t f;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !sbl_iter_doc(&it, &spec) ||
                (bson_iter_init_find(&f, &spec, "name") && BSON_ITER_HOLDS_UTF8(&f) &&
                 strcmp(bson_iter_utf8(&f, NULL), "_id_") == 0))
                continue;
            char k[16];
            snprintf(k, sizeof(k), "%d", n++);
            BSON_APPEND_DOCUMENT(&arr, k, &spec);
        }
    bson_append_array_end(&ci, &arr);
    if (n > 0)
        rc = run_here(db, &ci, err, true);
    bson_destroy(&ci);
    bson_destroy(&reply);
    return rc;
}

static int clone_database(mongoc_client_t *c, const char *db, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it, b;
    int rc;

    BSON_APPEND_INT32(&cmd, "listCollections", 1);
    rc = cmd_on(c, db, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc == 0 && bson_iter_init(&it, &reply) &&
        bson_iter_find_descendant(&it, "cursor.firstBatch", &b) && BSON_ITER_HOLDS_ARRAY(&b) &&
        bson_iter_recurse(&b, &it)) {
        /* views last: their source collections first */
        for (int pass = 0; rc == 0 && pass < 2; pass++) {
            bson_iter_t i2 = it;
            while (rc == 0 && bson_iter_next(&i2)) {
                bson_t info;
                bson_iter_t t;
                if (!BSON_ITER_HOLDS_DOCUMENT(&i2) || !sbl_iter_doc(&i2, &info))
                    continue;
                bool view = bson_iter_init_find(&t, &info, "type") && BSON_ITER_HOLDS_UTF8(&t) &&
                            strcmp(bson_iter_utf8(&t, NULL), "view") == 0;
                if (view == (pass == 1))
                    rc = clone_collection(c, db, &info, err);
            }
        }
    }
    bson_destroy(&reply);
    return rc;
}

static int last_entry(mongoc_client_t *c, bson_t *out, sbl_err_t *err)
{
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, sort;
    const bson_t *doc;
    bson_error_t e;
    int rc = 0;
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "$natural", -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", 1);
    mongoc_collection_t *ol = mongoc_client_get_collection(c, "local", "oplog.rs");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(ol, &filter, &opts, NULL);
    if (mongoc_cursor_next(cur, &doc))
        bson_copy_to(doc, out);
    else if (mongoc_cursor_error(cur, &e))
        rc = sbl_err_set(err, SBL_E_HostUnreachable, "initial sync: reading the source's "
                         "oplog: %s", e.message);
    else
        rc = sbl_err_set(err, SBL_E_OplogStartMissing, "initial sync: the source's oplog is "
                         "empty");
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(ol);
    bson_destroy(&filter);
    bson_destroy(&opts);
    return rc;
}

static int64_t data_size_of(mongoc_client_t *c, const char *db)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it;
    sbl_err_t err;
    int64_t n = 0;
    BSON_APPEND_INT32(&cmd, "dbStats", 1);
    if (cmd_on(c, db, &cmd, &reply, &err) == 0 && bson_iter_init_find(&it, &reply, "dataSize") &&
        BSON_ITER_HOLDS_NUMBER(&it))
        n = bson_iter_as_int64(&it);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return n;
}

static int initial_sync_once(mongoc_client_t *c, sbl_err_t *err)
{
    sbl_session_t *s = sbl_session_get();
    bson_t cmd = BSON_INITIALIZER, reply, start = BSON_INITIALIZER, names = BSON_INITIALIZER;
    bson_iter_t it, dbs;
    int rc;

    /* What an interrupted or failed attempt copied goes first (a new
     * member has nothing to drop; handles others hold stay valid). */
    bool again = sbl_rs_initial_sync_flagged() || st.attempts_failed > 0;
    if (!sbl_rs_initial_sync_flagged()) {
        sbl_err_t e2;
        sbl_err_clear(&e2);
        bson_t none = BSON_INITIALIZER;
        sbl_coll_create(s, FLAG_NS, &none, &e2);
        bson_destroy(&none);
    }
    if ((again && (rc = drop_user_data(s, err)) != 0) || (rc = last_entry(c, &start, err)) != 0)
        goto out;
    pthread_mutex_lock(&rs.lock);
    st.oplog_start = 0;
    bson_iter_t ts;
    if (bson_iter_init_find(&ts, &start, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&ts)) {
        uint32_t t, i;
        bson_iter_timestamp(&ts, &t, &i);
        st.oplog_start = SBL_TS(t, i);
    }
    pthread_mutex_unlock(&rs.lock);
    BSON_APPEND_INT32(&cmd, "listDatabases", 1);
    BSON_APPEND_BOOL(&cmd, "nameOnly", true);
    if ((rc = cmd_on(c, "admin", &cmd, &reply, err)) != 0)
        goto out_reply;
    if (bson_iter_init_find(&it, &reply, "databases") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &dbs))
        while (bson_iter_next(&dbs)) {
            bson_t d;
            bson_iter_t n;
            if (BSON_ITER_HOLDS_DOCUMENT(&dbs) && sbl_iter_doc(&dbs, &d) &&
                bson_iter_init_find(&n, &d, "name") && BSON_ITER_HOLDS_UTF8(&n) &&
                strcmp(bson_iter_utf8(&n, NULL), "local") != 0 &&
                strcmp(bson_iter_utf8(&n, NULL), "config") != 0) /* sessions' own state */
                BSON_APPEND_BOOL(&names, bson_iter_utf8(&n, NULL), true);
        }
    int64_t total = 0;
    int ndb = 0;
    if (bson_iter_init(&it, &names))
        while (bson_iter_next(&it)) {
            total += data_size_of(c, bson_iter_key(&it));
            ndb++;
        }
    pthread_mutex_lock(&rs.lock);
    st.total_bytes = total;
    st.dbs_to_clone = ndb;
    pthread_mutex_unlock(&rs.lock);
    if (bson_iter_init(&it, &names))
        while (rc == 0 && bson_iter_next(&it)) {
            rc = clone_database(c, bson_iter_key(&it), err);
            pthread_mutex_lock(&rs.lock);
            st.dbs_cloned++;
            pthread_mutex_unlock(&rs.lock);
        }
    /* The clone is unlogged and untimestamped: durable from this checkpoint. */
    if (rc == 0 && (rc = sbl_storage_checkpoint(err)) == 0 &&
        (rc = sbl_repl_append_alone_raw(s, &start, err)) == 0) {
        sbl_err_t e2;
        sbl_err_clear(&e2);
        sbl_coll_drop(s, FLAG_NS, &e2);
    }
out_reply:
    bson_destroy(&reply);
out:
    bson_destroy(&cmd);
    bson_destroy(&start);
    bson_destroy(&names);
    return rc;
}

int sbl_rs_initial_sync(const char *host)
{
    char uri[4096];
    sbl_err_t err;
    int rc;

    /* With a keyFile the clone authenticates as every member connection does. */
    if (!sbl_rs_member_uri(uri, sizeof(uri), host, "directConnection=true&connectTimeoutMS=2000"
                           "&socketTimeoutMS=60000&serverSelectionTimeoutMS=5000"
                           "&appname=sable-initsync"))
        return -1;
    mongoc_client_t *c = mongoc_client_new(uri);
    if (c == NULL)
        return -1;
    pthread_mutex_lock(&rs.lock);
    int64_t failed = st.attempts_failed;
    memset(&st, 0, sizeof(st));
    st.attempts_failed = failed;
    st.running = true;
    st.start_ms = sbl_now_ms();
    pthread_mutex_unlock(&rs.lock);
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "syncSource", host);
    sbl_log(SBL_LOG_INFO, "INITSYNC", 21164, "Starting initial sync", &attr);
    bson_destroy(&attr);
    sbl_err_clear(&err);
    sbl_repl_cloning = true;
    rc = initial_sync_once(c, &err);
    sbl_repl_cloning = false;
    mongoc_client_destroy(c);
    pthread_mutex_lock(&rs.lock);
    st.running = false;
    st.end_ms = sbl_now_ms();
    if (rc != 0)
        st.attempts_failed++;
    int64_t ms = st.end_ms - st.start_ms, bytes = st.copied_bytes;
    pthread_mutex_unlock(&rs.lock);
    bson_init(&attr);
    BSON_APPEND_UTF8(&attr, "syncSource", host);
    BSON_APPEND_INT64(&attr, "durationMillis", ms);
    BSON_APPEND_INT64(&attr, "bytesCopied", bytes);
    BSON_APPEND_DOUBLE(&attr, "MBPerSecond", ms > 0 ? bytes / 1048576.0 / (ms / 1000.0) : 0);
    if (rc != 0)
        BSON_APPEND_UTF8(&attr, "error", err.msg);
    sbl_log(rc == 0 ? SBL_LOG_INFO : SBL_LOG_ERROR, "INITSYNC", rc == 0 ? 21192 : 21200,
            rc == 0 ? "Initial sync done: cloned; applying the oplog from its start"
                    : "Initial sync attempt failed", &attr);
    bson_destroy(&attr);
    return rc;
}
