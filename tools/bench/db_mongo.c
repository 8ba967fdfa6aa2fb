/*
 * db_mongo.c: the mongodb binding, behaving as YCSB's MongoDbClient: one
 * shared client pool (YCSB shares one MongoClient), records as
 * {_id: key, field0..: binary subtype 0}, reads by _id with a projection,
 * $set updates, insertOne / replaceOne-upsert / unordered insertMany batches.
 *
 * mongodb.api chooses how the commands go out; the server receives the same
 * find / update / insert / getMore commands YCSB's driver sends (lsid and
 * writeConcern included) on every path:
 * - wire (the default): each thread has its own connection, opened and
 *   authenticated by libmongoc, and writes its OP_MSG commands on it and
 *   reads the replies itself (mongo_wire.c).  libmongoc 1.23 spends 54k
 *   instructions of client CPU per read, 25k of them copying and re-parsing
 *   the server's description for every command; on a 2-core machine shared
 *   with the server that is CPU the server cannot have.  Used when the URL
 *   allows it (plain TCP, reads from the primary); otherwise "command".
 * - command: libmongoc's command API (mongoc_collection_read/
 *   write_command_with_opts) on pooled clients, one explicit session per
 *   thread.
 * - crud: libmongoc's cursor and CRUD helpers (twice the command path's
 *   client CPU), for comparison.
 * Writes with w:0 go without the session (MongoDB refuses sessions on
 * unacknowledged writes) and with moreToCome: fire-and-forget, as the
 * helpers do.  Batched inserts and deletes always take the pooled clients.
 *
 * Must stay true: the old-style properties (mongodb.writeConcern,
 * mongodb.readPreference, mongodb.maxconnections) only add URL options the
 * URL does not already set, as YCSB's OptionsSupport does; a thread keeps one
 * pooled client for its life when the pool can give every thread one, and
 * otherwise borrows a client per operation so it can never deadlock the pool.
 */
#include <mongoc/mongoc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "db.h"
#include "mongo_wire.h"

typedef struct mongo_shared {
    mongoc_client_pool_t *pool;
    mongoc_uri_t *uri;
    char dbname[128];
    int batchsize;
    bool upsert;
    bool hold_client; /* every thread can keep a client */
    bool commands;    /* mongodb.api=command: the command path */
    bool wire;        /* mongodb.api=wire (default) and the URL allows it */
    atomic_int errors_printed;
} mongo_shared_t;

typedef struct mongo_ctx {
    mongo_shared_t *sh;
    mongoc_client_t *client;     /* held client, or NULL */
    mongoc_collection_t *coll;   /* cached collection of the held client */
    char coll_name[128];
    bson_t **batch;
    int nbatch;
    mongoc_client_session_t *ss; /* the thread's session (command path), or NULL */
    bson_t sopts;                /* {sessionId: ...} for the command path */
    bool acked;                  /* the write concern is acknowledged */
    mongo_wire_t *wire;          /* the wire path's connection, or NULL */
    mongoc_write_concern_t *wc;  /* the wire path: the URL's write concern */
    bson_t cmd;                  /* the wire path: the command being built */
} mongo_ctx_t;

static void report_error(mongo_shared_t *sh, const char *what, const bson_error_t *e)
{
    /* Every failure is counted by the caller; the first few are also shown. */
    if (atomic_fetch_add(&sh->errors_printed, 1) < 10)
        fprintf(stderr, "mongodb %s failed: %s\n", what, e ? e->message : "unknown error");
}

/* Append name=value to a mongodb:// URL unless it already has name=. */
static int url_add(char *url, size_t cap, const char *name, const char *value)
{
    char probe[64];
    snprintf(probe, sizeof(probe), "%s=", name);
    if (strstr(url, probe))
        return 0;
    const char *hosts = strstr(url, "://");
    hosts = hosts ? hosts + 3 : url;
    const char *sep;
    if (strchr(url, '?'))
        sep = "&";
    else if (strchr(hosts, '/'))
        sep = "?";
    else
        sep = "/?";
    size_t n = strlen(url);
    int w = snprintf(url + n, cap - n, "%s%s=%s", sep, name, value);
    return (w < 0 || (size_t)w >= cap - n) ? -1 : 0;
}

/* YCSB's OptionsSupport: translate old-style properties into URL options. */
int bench_mongo_build_url(const bench_props_t *p, char *url, size_t cap, char *err, size_t errlen)
{
    snprintf(url, cap, "%s", bench_props_str(p, "mongodb.url", "mongodb://localhost:27017/ycsb?w=1"));
    if (strncmp(url, "mongodb://", 10) != 0 && strncmp(url, "mongodb+srv://", 14) != 0) {
        snprintf(err, errlen, "mongodb.url must start with mongodb:// (got %s)", url);
        return -1;
    }
    const char *mc = bench_props_get(p, "mongodb.maxconnections");
    if (mc && url_add(url, cap, "maxPoolSize", mc) != 0)
        goto toolong;
    const char *wc = bench_props_get(p, "mongodb.writeConcern");
    if (wc && !strstr(url, "w=")) {
        int rc = 0;
        if (strcasecmp(wc, "unacknowledged") == 0)
            rc = url_add(url, cap, "w", "0");
        else if (strcasecmp(wc, "acknowledged") == 0)
            rc = url_add(url, cap, "w", "1");
        else if (strcasecmp(wc, "journaled") == 0)
            rc = url_add(url, cap, "journal", "true");
        else if (strcasecmp(wc, "replica_acknowledged") == 0)
            rc = url_add(url, cap, "w", "2");
        else if (strcasecmp(wc, "majority") == 0)
            rc = url_add(url, cap, "w", "majority");
        else
            fprintf(stderr, "WARNING: Invalid writeConcern: '%s' will be ignored. Must be one of [ unacknowledged "
                            "| acknowledged | journaled | replica_acknowledged | majority ]\n", wc);
        if (rc != 0)
            goto toolong;
    }
    const char *rp = bench_props_get(p, "mongodb.readPreference");
    if (rp && !strstr(url, "readPreference=")) {
        const char *v = NULL;
        if (strcasecmp(rp, "primary") == 0)
            v = "primary";
        else if (strcasecmp(rp, "primary_preferred") == 0)
            v = "primaryPreferred";
        else if (strcasecmp(rp, "secondary") == 0)
            v = "secondary";
        else if (strcasecmp(rp, "secondary_preferred") == 0)
            v = "secondaryPreferred";
        else if (strcasecmp(rp, "nearest") == 0)
            v = "nearest";
        else
            fprintf(stderr, "WARNING: Invalid readPreference: '%s' will be ignored. Must be one of [ primary | "
                            "primary_preferred | secondary | secondary_preferred | nearest ]\n", rp);
        if (v && url_add(url, cap, "readPreference", v) != 0)
            goto toolong;
    }
    return 0;
toolong:
    snprintf(err, errlen, "mongodb.url too long");
    return -1;
}

static int mongo_open(const bench_props_t *p, int nthreads, void **sharedp, char *err, size_t errlen)
{
    *sharedp = NULL;
    char url[4096];
    if (bench_mongo_build_url(p, url, sizeof(url), err, errlen) != 0)
        return -1;
    mongo_shared_t *sh = calloc(1, sizeof(*sh));
    if (sh == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    bson_error_t e;
    sh->uri = mongoc_uri_new_with_error(url, &e);
    if (sh->uri == NULL) {
        snprintf(err, errlen, "bad mongodb.url: %s", e.message);
        free(sh);
        return -1;
    }
    /* YCSB uses the URL's database unless it is empty or admin; then "ycsb". */
    const char *db = mongoc_uri_get_database(sh->uri);
    snprintf(sh->dbname, sizeof(sh->dbname), "%s", (db && *db && strcmp(db, "admin") != 0) ? db : "ycsb");
    bool bad = false;
    sh->batchsize = (int)bench_props_int(p, "batchsize", 1, &bad);
    if (bad || sh->batchsize < 1) {
        snprintf(err, errlen, "batchsize must be a positive number");
        mongoc_uri_destroy(sh->uri);
        free(sh);
        return -1;
    }
    sh->upsert = bench_props_bool(p, "mongodb.upsert", false);
    const char *api = bench_props_str(p, "mongodb.api", "wire");
    if (strcmp(api, "wire") != 0 && strcmp(api, "command") != 0 && strcmp(api, "crud") != 0) {
        snprintf(err, errlen, "mongodb.api must be wire, command or crud (got %s)", api);
        mongoc_uri_destroy(sh->uri);
        free(sh);
        return -1;
    }
    sh->wire = strcmp(api, "wire") == 0 && mongo_wire_usable(sh->uri);
    sh->commands = strcmp(api, "crud") != 0;
    if (strcmp(api, "wire") == 0 && !sh->wire)
        fprintf(stderr, "mongodb.api=wire needs plain TCP and primary reads: using mongodb.api=command\n");
    sh->pool = mongoc_client_pool_new(sh->uri);
    if (sh->pool == NULL) {
        snprintf(err, errlen, "cannot create a client pool for %s", url);
        mongoc_uri_destroy(sh->uri);
        free(sh);
        return -1;
    }
    mongoc_client_pool_set_error_api(sh->pool, MONGOC_ERROR_API_VERSION_2);
    mongoc_client_pool_set_appname(sh->pool, "sable-bench");
    int32_t maxpool = mongoc_uri_get_option_as_int32(sh->uri, MONGOC_URI_MAXPOOLSIZE, 100);
    /* The wire path's threads borrow pooled clients only for batches and deletes. */
    sh->hold_client = nthreads <= maxpool && !sh->wire;
    /* Fail early, as YCSB does when it cannot reach the server. */
    mongoc_client_t *c = mongoc_client_pool_pop(sh->pool);
    bson_t ping = BSON_INITIALIZER;
    BSON_APPEND_INT32(&ping, "ping", 1);
    bool ok = mongoc_client_command_simple(c, "admin", &ping, NULL, NULL, &e);
    bson_destroy(&ping);
    mongoc_client_pool_push(sh->pool, c);
    if (!ok) {
        snprintf(err, errlen, "cannot reach %s: %s", url, e.message);
        mongoc_client_pool_destroy(sh->pool);
        mongoc_uri_destroy(sh->uri);
        free(sh);
        return -1;
    }
    /* Print the URL without its password. */
    char shown[4096];
    snprintf(shown, sizeof(shown), "%s", url);
    char *at = strchr(shown, '@'), *scheme = strstr(shown, "://");
    if (at && scheme) {
        char *colon = memchr(scheme + 3, ':', (size_t)(at - scheme - 3));
        if (colon)
            memmove(colon + 4, at, strlen(at) + 1), memcpy(colon, ":***", 4);
    }
    fprintf(stderr, "mongo client connection created with %s\n", shown);
    *sharedp = sh;
    return 0;
}

/* The wire path: {lsid: ...} every acknowledged command carries, as the command path's explicit session. */
static void wire_session(mongo_ctx_t *c)
{
    bson_error_t e;
    c->ss = mongoc_client_start_session(mongo_wire_client(c->wire), NULL, &e);
    if (c->ss != NULL)
        BSON_APPEND_DOCUMENT(&c->sopts, "lsid", mongoc_client_session_get_lsid(c->ss));
}

static int mongo_thread_init(void *shared, void **ctxp, char *err, size_t errlen)
{
    mongo_shared_t *sh = shared;
    mongo_ctx_t *c = calloc(1, sizeof(*c));
    if (c == NULL || (sh->batchsize > 1 && (c->batch = calloc((size_t)sh->batchsize, sizeof(bson_t *))) == NULL)) {
        free(c);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->sh = sh;
    bson_init(&c->sopts);
    bson_init(&c->cmd);
    if (sh->wire) {
        bson_error_t e;
        c->wc = mongoc_write_concern_copy(mongoc_uri_get_write_concern(sh->uri));
        c->acked = mongoc_write_concern_is_acknowledged(c->wc);
        c->wire = mongo_wire_open(sh->uri, sh->pool, "sable-bench", &e);
        if (c->wire == NULL) {
            snprintf(err, errlen, "cannot connect: %s", e.message);
            mongoc_write_concern_destroy(c->wc);
            bson_destroy(&c->cmd);
            bson_destroy(&c->sopts);
            free(c->batch);
            free(c);
            return -1;
        }
        wire_session(c);
    }
    if (sh->hold_client) {
        c->client = mongoc_client_pool_pop(sh->pool);
        c->acked = mongoc_write_concern_is_acknowledged(mongoc_client_get_write_concern(c->client));
        bson_error_t e;
        if (sh->commands && (c->ss = mongoc_client_start_session(c->client, NULL, &e)) != NULL &&
            !mongoc_client_session_append(c->ss, &c->sopts, &e)) {
            mongoc_client_session_destroy(c->ss);
            c->ss = NULL;
        }
    }
    *ctxp = c;
    return 0;
}

/* The command path's reply check: ok (libmongoc checked it) and no write error. */
static bool write_reply_ok(mongo_ctx_t *c, const char *what, const bson_t *reply)
{
    bson_iter_t it, el, msg;
    if (!bson_iter_init_find(&it, reply, "writeErrors") && !bson_iter_init_find(&it, reply, "writeConcernError"))
        return true;
    bson_error_t e;
    memset(&e, 0, sizeof(e));
    if (BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &el) && bson_iter_next(&el) &&
        bson_iter_recurse(&el, &msg) && bson_iter_find(&msg, "errmsg") && BSON_ITER_HOLDS_UTF8(&msg))
        snprintf(e.message, sizeof(e.message), "%s", bson_iter_utf8(&msg, NULL));
    else if (bson_iter_recurse(&it, &msg) && bson_iter_find(&msg, "errmsg") && BSON_ITER_HOLDS_UTF8(&msg))
        snprintf(e.message, sizeof(e.message), "%s", bson_iter_utf8(&msg, NULL));
    report_error(c->sh, what, &e);
    return false;
}

/* A reply's code that says its server is no longer (or not yet) primary:
 * the wire path then reconnects to the primary, as a driver reselects. */
static bool not_primary(int64_t code)
{
    static const int64_t codes[] = {10107, 13435, 13436, 11600, 11602, 189, 91};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (code == codes[i])
            return true;
    return false;
}

/* The wire path: a broken connection is replaced before the next operation. */
static bool wire_ready(mongo_ctx_t *c)
{
    if (!mongo_wire_broken(c->wire))
        return true;
    bson_error_t e;
    if (c->ss)
        mongoc_client_session_destroy(c->ss);
    c->ss = NULL;
    bson_reinit(&c->sopts);
    mongo_wire_close(c->wire);
    c->wire = mongo_wire_open(c->sh->uri, c->sh->pool, "sable-bench", &e);
    if (c->wire == NULL) {
        report_error(c->sh, "reconnect", &e);
        return false;
    }
    wire_session(c);
    return true;
}

/*
 * The wire path: finish c->cmd ($db, lsid, writeConcern for writes, as
 * libmongoc's command path adds them) and send it.  Unacknowledged writes
 * return at once with *reply empty; otherwise true means ok:1 came back and
 * *reply is the reply (valid until the next command).
 */
static bool wire_call(mongo_ctx_t *c, const char *what, bool write, bson_t *reply)
{
    bool more_to_come = write && !c->acked;
    BSON_APPEND_UTF8(&c->cmd, "$db", c->sh->dbname);
    if (!more_to_come)
        bson_concat(&c->cmd, &c->sopts);
    if (write && !mongoc_write_concern_is_default(c->wc))
        mongoc_write_concern_append(c->wc, &c->cmd);
    bson_error_t e;
    bson_init(reply);
    if (!wire_ready(c))
        return false;
    if (!mongo_wire_command(c->wire, &c->cmd, more_to_come, reply, &e)) {
        report_error(c->sh, what, &e);
        bson_init(reply);
        return false;
    }
    if (more_to_come)
        return true;
    bson_iter_t it, wce;
    if (bson_iter_init_find(&it, reply, "ok") && bson_iter_as_bool(&it)) {
        if (bson_iter_init_find(&it, reply, "writeConcernError") && bson_iter_recurse(&it, &wce) &&
            bson_iter_find(&wce, "code") && not_primary(bson_iter_as_int64(&wce)))
            mongo_wire_drop(c->wire);
        return true;
    }
    if (bson_iter_init_find(&it, reply, "code") && not_primary(bson_iter_as_int64(&it)))
        mongo_wire_drop(c->wire);
    memset(&e, 0, sizeof(e));
    if (bson_iter_init_find(&it, reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
        snprintf(e.message, sizeof(e.message), "%s", bson_iter_utf8(&it, NULL));
    report_error(c->sh, what, &e);
    return false;
}

/*
 * Send one write command ({insert|update: table, documents|updates: [one]})
 * on the wire path or through libmongoc's command API (coll).  *np gets the
 * reply's n when the write is acknowledged.
 */
static bench_status_t write_one(mongo_ctx_t *c, mongoc_collection_t *coll, const char *what,
                                const char *table, const char *arr_key, const bson_t *item, int64_t *np)
{
    bson_t local = BSON_INITIALIZER, *cmd = c->wire ? &c->cmd : &local, arr, reply;
    bson_reinit(cmd);
    BSON_APPEND_UTF8(cmd, what, table);
    BSON_APPEND_ARRAY_BEGIN(cmd, arr_key, &arr);
    BSON_APPEND_DOCUMENT(&arr, "0", item);
    bson_append_array_end(cmd, &arr);
    bson_error_t e;
    bench_status_t st = BENCH_OK;
    if (c->wire) {
        if (!wire_call(c, what, true, &reply))
            st = BENCH_ERROR;
    } else if (!mongoc_collection_write_command_with_opts(coll, cmd, c->acked ? &c->sopts : NULL, &reply, &e)) {
        report_error(c->sh, what, &e);
        st = BENCH_ERROR;
    }
    if (st == BENCH_OK && !write_reply_ok(c, what, &reply)) {
        st = BENCH_ERROR;
    } else if (st == BENCH_OK && np != NULL && c->acked) {
        bson_iter_t it;
        *np = bson_iter_init_find(&it, &reply, "n") ? bson_iter_as_int64(&it) : 0;
    }
    bson_destroy(&reply); /* the wire path's is a view: nothing to free */
    bson_destroy(&local);
    return st;
}

/* The collection for table: cached on a held client, else from a borrowed one. */
static mongoc_collection_t *coll_get(mongo_ctx_t *c, const char *table, mongoc_client_t **borrowed)
{
    *borrowed = NULL;
    if (c->client) {
        if (c->coll == NULL || strcmp(c->coll_name, table) != 0) {
            if (c->coll)
                mongoc_collection_destroy(c->coll);
            c->coll = mongoc_client_get_collection(c->client, c->sh->dbname, table);
            snprintf(c->coll_name, sizeof(c->coll_name), "%s", table);
        }
        return c->coll;
    }
    *borrowed = mongoc_client_pool_pop(c->sh->pool);
    return mongoc_client_get_collection(*borrowed, c->sh->dbname, table);
}

static void coll_put(mongo_ctx_t *c, mongoc_collection_t *coll, mongoc_client_t *borrowed)
{
    if (borrowed) {
        mongoc_collection_destroy(coll);
        mongoc_client_pool_push(c->sh->pool, borrowed);
    }
}

static void append_projection(bson_t *opts, const char *const *fields, int nfields)
{
    if (fields == NULL)
        return;
    bson_t proj;
    BSON_APPEND_DOCUMENT_BEGIN(opts, "projection", &proj);
    for (int i = 0; i < nfields; i++)
        BSON_APPEND_INT32(&proj, fields[i], 1);
    bson_append_document_end(opts, &proj);
}

/* Walk a returned document as YCSB copies it into its result map. */
static size_t consume(const bson_t *doc)
{
    bson_iter_t it;
    size_t bytes = 0;
    if (bson_iter_init(&it, doc))
        while (bson_iter_next(&it))
            if (BSON_ITER_HOLDS_BINARY(&it)) {
                uint32_t len;
                const uint8_t *data;
                bson_iter_binary(&it, NULL, &len, &data);
                bytes += len;
            }
    return bytes;
}

/* Consume every document of a cursor reply's batch (firstBatch or nextBatch): how many, and the cursor id. */
static int consume_batch(const bson_t *reply, int64_t *idp)
{
    bson_iter_t it, cur, docs;
    int n = 0;
    *idp = 0;
    if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &cur))
        return -1;
    while (bson_iter_next(&cur)) {
        const char *k = bson_iter_key(&cur);
        if (strcmp(k, "id") == 0) {
            *idp = bson_iter_as_int64(&cur);
        } else if ((strcmp(k, "firstBatch") == 0 || strcmp(k, "nextBatch") == 0) && BSON_ITER_HOLDS_ARRAY(&cur) &&
                   bson_iter_recurse(&cur, &docs)) {
            while (bson_iter_next(&docs)) {
                const uint8_t *data;
                uint32_t len;
                bson_t d;
                if (!BSON_ITER_HOLDS_DOCUMENT(&docs))
                    return -1;
                bson_iter_document(&docs, &len, &data);
                if (!bson_init_static(&d, data, len))
                    return -1;
                consume(&d);
                n++;
            }
        }
    }
    return n;
}

/* cmd := the find command YCSB's find(...).projection(...).first() sends. */
static void find_one_cmd(bson_t *cmd, const char *table, const char *key, const char *const *fields, int nfields)
{
    bson_t f;
    bson_reinit(cmd);
    BSON_APPEND_UTF8(cmd, "find", table);
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "filter", &f);
    BSON_APPEND_UTF8(&f, "_id", key);
    bson_append_document_end(cmd, &f);
    append_projection(cmd, fields, nfields);
    BSON_APPEND_INT64(cmd, "limit", 1);
    BSON_APPEND_BOOL(cmd, "singleBatch", true);
}

/* The wire path's read. */
static bench_status_t wire_read(mongo_ctx_t *c, const char *table, const char *key, const char *const *fields,
                                int nfields)
{
    bson_t reply;
    find_one_cmd(&c->cmd, table, key, fields, nfields);
    if (!wire_call(c, "read", false, &reply))
        return BENCH_ERROR;
    int64_t id;
    int n = consume_batch(&reply, &id);
    if (n < 0) {
        report_error(c->sh, "read", NULL);
        return BENCH_ERROR;
    }
    return n > 0 ? BENCH_OK : BENCH_NOT_FOUND;
}

/* The wire path's scan: find from startkey in _id order, then getMore until the cursor ends. */
static bench_status_t wire_scan(mongo_ctx_t *c, const char *table, const char *startkey, int count,
                                const char *const *fields, int nfields)
{
    bson_t f, range, sort, reply;
    bson_reinit(&c->cmd);
    BSON_APPEND_UTF8(&c->cmd, "find", table);
    BSON_APPEND_DOCUMENT_BEGIN(&c->cmd, "filter", &f);
    BSON_APPEND_DOCUMENT_BEGIN(&f, "_id", &range);
    BSON_APPEND_UTF8(&range, "$gte", startkey);
    bson_append_document_end(&f, &range);
    bson_append_document_end(&c->cmd, &f);
    BSON_APPEND_DOCUMENT_BEGIN(&c->cmd, "sort", &sort);
    BSON_APPEND_INT32(&sort, "_id", 1);
    bson_append_document_end(&c->cmd, &sort);
    BSON_APPEND_INT64(&c->cmd, "limit", count);
    append_projection(&c->cmd, fields, nfields);
    int total = 0;
    for (;;) {
        if (!wire_call(c, "scan", false, &reply))
            return BENCH_ERROR;
        int64_t id;
        int n = consume_batch(&reply, &id);
        if (n < 0) {
            report_error(c->sh, "scan", NULL);
            return BENCH_ERROR;
        }
        total += n;
        if (id == 0)
            break;
        bson_reinit(&c->cmd);
        BSON_APPEND_INT64(&c->cmd, "getMore", id);
        BSON_APPEND_UTF8(&c->cmd, "collection", table);
    }
    return total > 0 ? BENCH_OK : BENCH_ERROR; /* YCSB: an empty scan is an error */
}

static bench_status_t mongo_read(void *ctx, const char *table, const char *key, const char *const *fields,
                                 int nfields)
{
    mongo_ctx_t *c = ctx;
    if (c->wire)
        return wire_read(c, table, key, fields, nfields);
    mongoc_client_t *b;
    mongoc_collection_t *coll = coll_get(c, table, &b);
    if (c->ss != NULL) {
        bson_t cmd = BSON_INITIALIZER, reply;
        find_one_cmd(&cmd, table, key, fields, nfields);
        bson_error_t e;
        bench_status_t st = BENCH_NOT_FOUND;
        int64_t id;
        if (!mongoc_collection_read_command_with_opts(coll, &cmd, NULL, &c->sopts, &reply, &e)) {
            report_error(c->sh, "read", &e);
            st = BENCH_ERROR;
        } else if (consume_batch(&reply, &id) > 0) {
            st = BENCH_OK;
        }
        bson_destroy(&reply);
        bson_destroy(&cmd);
        coll_put(c, coll, b);
        return st;
    }
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&filter, "_id", key);
    append_projection(&opts, fields, nfields);
    BSON_APPEND_INT64(&opts, "limit", 1);
    BSON_APPEND_BOOL(&opts, "singleBatch", true);
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);
    const bson_t *doc;
    bench_status_t st = BENCH_NOT_FOUND;
    if (mongoc_cursor_next(cur, &doc)) {
        consume(doc);
        st = BENCH_OK;
    }
    bson_error_t e;
    if (mongoc_cursor_error(cur, &e)) {
        report_error(c->sh, "read", &e);
        st = BENCH_ERROR;
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(&filter);
    bson_destroy(&opts);
    coll_put(c, coll, b);
    return st;
}

static bench_status_t mongo_scan(void *ctx, const char *table, const char *startkey, int count,
                                 const char *const *fields, int nfields)
{
    mongo_ctx_t *c = ctx;
    if (c->wire)
        return wire_scan(c, table, startkey, count, fields, nfields);
    mongoc_client_t *b;
    mongoc_collection_t *coll = coll_get(c, table, &b);
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, range, sort;
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &range);
    BSON_APPEND_UTF8(&range, "$gte", startkey);
    bson_append_document_end(&filter, &range);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "_id", 1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", count);
    append_projection(&opts, fields, nfields);
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);
    const bson_t *doc;
    int n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        consume(doc);
        n++;
    }
    bson_error_t e;
    bench_status_t st = n > 0 ? BENCH_OK : BENCH_ERROR; /* YCSB: an empty scan is an error */
    if (mongoc_cursor_error(cur, &e)) {
        report_error(c->sh, "scan", &e);
        st = BENCH_ERROR;
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(&filter);
    bson_destroy(&opts);
    coll_put(c, coll, b);
    return st;
}

static void append_values(bson_t *doc, const bench_field_t *v, int n)
{
    for (int i = 0; i < n; i++)
        bson_append_binary(doc, v[i].name, -1, BSON_SUBTYPE_BINARY, (const uint8_t *)v[i].value,
                           (uint32_t)v[i].len);
}

static bool acknowledged(mongoc_collection_t *coll)
{
    return mongoc_write_concern_is_acknowledged(mongoc_collection_get_write_concern(coll));
}

static bench_status_t mongo_update(void *ctx, const char *table, const char *key, const bench_field_t *values,
                                   int n)
{
    mongo_ctx_t *c = ctx;
    mongoc_client_t *b = NULL;
    mongoc_collection_t *coll = c->wire ? NULL : coll_get(c, table, &b);
    bson_t sel = BSON_INITIALIZER, upd = BSON_INITIALIZER, set, reply;
    BSON_APPEND_UTF8(&sel, "_id", key);
    BSON_APPEND_DOCUMENT_BEGIN(&upd, "$set", &set);
    append_values(&set, values, n);
    bson_append_document_end(&upd, &set);
    bson_error_t e;
    bench_status_t st = BENCH_OK;
    if (c->ss != NULL || c->wire) {
        bson_t u = BSON_INITIALIZER;
        int64_t matched = 1; /* w:0: nothing comes back */
        BSON_APPEND_DOCUMENT(&u, "q", &sel);
        BSON_APPEND_DOCUMENT(&u, "u", &upd);
        st = write_one(c, coll, "update", table, "updates", &u, &matched);
        if (st == BENCH_OK && matched == 0)
            st = BENCH_NOT_FOUND; /* YCSB: "Nothing updated for key" */
        bson_destroy(&u);
        bson_destroy(&sel);
        bson_destroy(&upd);
        coll_put(c, coll, b);
        return st;
    }
    if (!mongoc_collection_update_one(coll, &sel, &upd, NULL, &reply, &e)) {
        report_error(c->sh, "update", &e);
        st = BENCH_ERROR;
    } else if (acknowledged(coll)) {
        bson_iter_t it;
        if (bson_iter_init_find(&it, &reply, "matchedCount") && bson_iter_as_int64(&it) == 0)
            st = BENCH_NOT_FOUND; /* YCSB: "Nothing updated for key" */
    }
    bson_destroy(&reply);
    bson_destroy(&sel);
    bson_destroy(&upd);
    coll_put(c, coll, b);
    return st;
}

/* Send the pending batch: unordered insertMany, or upserting replaces. */
static bench_status_t flush_batch(mongo_ctx_t *c, mongoc_collection_t *coll)
{
    if (c->nbatch == 0)
        return BENCH_OK;
    bson_error_t e;
    bool ok;
    if (c->sh->upsert) {
        bson_t bopts = BSON_INITIALIZER, ropts = BSON_INITIALIZER;
        BSON_APPEND_BOOL(&bopts, "ordered", false);
        BSON_APPEND_BOOL(&ropts, "upsert", true);
        mongoc_bulk_operation_t *bulk = mongoc_collection_create_bulk_operation_with_opts(coll, &bopts);
        for (int i = 0; i < c->nbatch; i++) {
            bson_iter_t it;
            bson_t sel = BSON_INITIALIZER;
            if (bson_iter_init_find(&it, c->batch[i], "_id"))
                bson_append_iter(&sel, "_id", -1, &it);
            mongoc_bulk_operation_replace_one_with_opts(bulk, &sel, c->batch[i], &ropts, NULL);
            bson_destroy(&sel);
        }
        ok = mongoc_bulk_operation_execute(bulk, NULL, &e) != 0;
        mongoc_bulk_operation_destroy(bulk);
        bson_destroy(&bopts);
        bson_destroy(&ropts);
    } else {
        bson_t opts = BSON_INITIALIZER;
        BSON_APPEND_BOOL(&opts, "ordered", false);
        ok = mongoc_collection_insert_many(coll, (const bson_t **)c->batch, (size_t)c->nbatch, &opts, NULL, &e);
        bson_destroy(&opts);
    }
    for (int i = 0; i < c->nbatch; i++)
        bson_destroy(c->batch[i]);
    c->nbatch = 0;
    if (!ok) {
        report_error(c->sh, "batch insert", &e);
        return BENCH_ERROR;
    }
    return BENCH_OK;
}

static bench_status_t mongo_insert(void *ctx, const char *table, const char *key, const bench_field_t *values,
                                   int n)
{
    mongo_ctx_t *c = ctx;
    mongoc_client_t *b = NULL;
    mongoc_collection_t *coll = c->wire && c->sh->batchsize == 1 ? NULL : coll_get(c, table, &b);
    bench_status_t st = BENCH_OK;
    bson_error_t e;
    if (c->sh->batchsize > 1) {
        bson_t *doc = bson_new();
        BSON_APPEND_UTF8(doc, "_id", key);
        append_values(doc, values, n);
        c->batch[c->nbatch++] = doc;
        if (c->client == NULL)
            snprintf(c->coll_name, sizeof(c->coll_name), "%s", table);
        st = c->nbatch == c->sh->batchsize ? flush_batch(c, coll) : BENCH_BATCHED_OK;
    } else {
        bson_t doc = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&doc, "_id", key);
        append_values(&doc, values, n);
        bool ok;
        if (c->ss != NULL || c->wire) {
            if (c->sh->upsert) {
                bson_t u = BSON_INITIALIZER, sel;
                BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &sel);
                BSON_APPEND_UTF8(&sel, "_id", key);
                bson_append_document_end(&u, &sel);
                BSON_APPEND_DOCUMENT(&u, "u", &doc);
                BSON_APPEND_BOOL(&u, "upsert", true);
                st = write_one(c, coll, "update", table, "updates", &u, NULL);
                bson_destroy(&u);
            } else {
                st = write_one(c, coll, "insert", table, "documents", &doc, NULL);
            }
            bson_destroy(&doc);
            coll_put(c, coll, b);
            return st;
        }
        if (c->sh->upsert) {
            /* An insert that tolerates existing records: replaceOne with upsert. */
            bson_t sel = BSON_INITIALIZER, opts = BSON_INITIALIZER;
            BSON_APPEND_UTF8(&sel, "_id", key);
            BSON_APPEND_BOOL(&opts, "upsert", true);
            ok = mongoc_collection_replace_one(coll, &sel, &doc, &opts, NULL, &e);
            bson_destroy(&sel);
            bson_destroy(&opts);
        } else {
            ok = mongoc_collection_insert_one(coll, &doc, NULL, NULL, &e);
        }
        if (!ok) {
            report_error(c->sh, "insert", &e);
            st = BENCH_ERROR;
        }
        bson_destroy(&doc);
    }
    coll_put(c, coll, b);
    return st;
}

static bench_status_t mongo_delete(void *ctx, const char *table, const char *key)
{
    mongo_ctx_t *c = ctx;
    mongoc_client_t *b;
    mongoc_collection_t *coll = coll_get(c, table, &b);
    bson_t sel = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&sel, "_id", key);
    bson_error_t e;
    bench_status_t st = BENCH_OK;
    if (!mongoc_collection_delete_one(coll, &sel, NULL, &reply, &e)) {
        report_error(c->sh, "delete", &e);
        st = BENCH_ERROR;
    } else if (acknowledged(coll)) {
        bson_iter_t it;
        if (bson_iter_init_find(&it, &reply, "deletedCount") && bson_iter_as_int64(&it) == 0)
            st = BENCH_NOT_FOUND;
    }
    bson_destroy(&reply);
    bson_destroy(&sel);
    coll_put(c, coll, b);
    return st;
}

static bench_status_t mongo_thread_cleanup(void *ctx)
{
    mongo_ctx_t *c = ctx;
    bench_status_t st = BENCH_OK;
    if (c->nbatch > 0) {
        /* YCSB drops a partial last batch; sending it keeps every counted insert real. */
        mongoc_client_t *b;
        mongoc_collection_t *coll = coll_get(c, c->coll_name[0] ? c->coll_name : "usertable", &b);
        st = flush_batch(c, coll);
        coll_put(c, coll, b);
    }
    if (c->coll)
        mongoc_collection_destroy(c->coll);
    if (c->ss)
        mongoc_client_session_destroy(c->ss);
    bson_destroy(&c->sopts);
    bson_destroy(&c->cmd);
    mongo_wire_close(c->wire);
    if (c->wc)
        mongoc_write_concern_destroy(c->wc);
    if (c->client)
        mongoc_client_pool_push(c->sh->pool, c->client);
    free(c->batch);
    free(c);
    return st;
}

static void mongo_close(void *shared)
{
    mongo_shared_t *sh = shared;
    if (sh == NULL)
        return;
    mongoc_client_pool_destroy(sh->pool);
    mongoc_uri_destroy(sh->uri);
    free(sh);
}

const bench_db_t bench_db_mongodb = {
    .name = "mongodb",
    .open = mongo_open,
    .thread_init = mongo_thread_init,
    .read = mongo_read,
    .scan = mongo_scan,
    .update = mongo_update,
    .insert = mongo_insert,
    .del = mongo_delete,
    .thread_cleanup = mongo_thread_cleanup,
    .close = mongo_close,
};
