/*
 * sable-dump: mongodump for Sable.  Writes each collection's documents as a
 * BSON stream and its options, indexes, UUID, name and type as canonical
 * Extended JSON, either in a directory (<out>/<db>/<coll>.bson and
 * <coll>.metadata.json, .gz with --gzip) or as one mongodump archive
 * (--archive[=FILE], gzip-compressed as a whole with --gzip).
 *
 * What must stay true: the metadata of every namespace is gathered before any
 * data is written (the archive's prelude lists them all); a failure anywhere
 * exits non-zero with the namespace named; a view is dumped as metadata only.
 */
#include "dump.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct dopts {
    const char *db, *coll, *out, *archive, *query, *query_file, *read_pref;
    bool gzip, oplog, users_roles, views_as_colls, force_scan;
    long jobs;
    tool_strs_t exclude_coll, exclude_prefix;
    tool_ns_t ns;
} dopts_t;

/* One namespace to dump. */
typedef struct intent {
    char db[128], coll[256];     /* name in the dump */
    char src_db[128], src[256];  /* where the documents are read */
    char type[16];               /* collection, view */
    bool data;                   /* has documents (views have none) */
    bool users_of_db;            /* $admin.system.users/roles: filter {db: <db>} */
    const bson_t *filter;        /* the oplog's {ts: {$gte, $lte}}; NULL: --query */
    char *metadata;              /* canonical Extended JSON, NULL for none */
    int64_t size, count;         /* collStats: for the archive's prelude and progress */
} intent_t;

typedef struct dump {
    dopts_t o;
    tool_conn_t conn;
    mongoc_client_t *c;
    pthread_mutex_t mu; /* guards the totals and next while collections dump in parallel */
    int next;           /* dump_dir's workers: the next intent to take */
    bool failed;
    bson_t query;
    intent_t *in;
    int n;
    char server_version[64];
    int64_t total_docs, total_bytes;
    uint32_t oplog_start[2];    /* --oplog: the newest entry's ts before any data was read */
    intent_t oplog;             /* --oplog: local.oplog.rs as ("", "oplog") */
    bson_t oplog_filter;
} dump_t;

static const char usage[] =
    "usage: sable-dump [options]\n"
    "  Dumps a server's databases as mongodump does: --out DIR (default ./dump) holds\n"
    "  <db>/<coll>.bson and <coll>.metadata.json; --archive[=FILE] writes one archive\n"
    "  (standard output without FILE).";

static void add_intent(dump_t *d, const char *db, const char *coll, const char *type)
{
    d->in = realloc(d->in, sizeof(intent_t) * (size_t)(d->n + 1));
    intent_t *it = &d->in[d->n++];
    memset(it, 0, sizeof(*it));
    snprintf(it->db, sizeof(it->db), "%s", db);
    snprintf(it->coll, sizeof(it->coll), "%s", coll);
    snprintf(it->src_db, sizeof(it->src_db), "%s", db);
    snprintf(it->src, sizeof(it->src), "%s", coll);
    snprintf(it->type, sizeof(it->type), "%s", type);
    it->data = strcmp(type, "view") != 0;
}

static bool skipped_system(const char *db, const char *coll, bool full)
{
    if (strncmp(coll, "system.", 7) != 0)
        return false;
    if (strcmp(coll, "system.js") == 0)
        return false;
    if (strcmp(db, "admin") == 0 &&
        (strcmp(coll, "system.users") == 0 || strcmp(coll, "system.roles") == 0))
        return !full;
    return true; /* system.views, system.profile, system.buckets.*, system.version ... */
}

static bool coll_wanted(const dump_t *d, const char *db, const char *coll)
{
    if (d->o.coll != NULL && strcmp(coll, d->o.coll) != 0)
        return false;
    for (int i = 0; i < d->o.exclude_coll.n; i++)
        if (strcmp(coll, d->o.exclude_coll.v[i]) == 0)
            return false;
    for (int i = 0; i < d->o.exclude_prefix.n; i++)
        if (strncmp(coll, d->o.exclude_prefix.v[i], strlen(d->o.exclude_prefix.v[i])) == 0)
            return false;
    return tool_ns_selected(&d->o.ns, db, coll);
}

/* Build the metadata document mongodump writes: {options?, indexes, uuid?,
   collectionName, type}. */
static int build_metadata(dump_t *d, intent_t *it, const bson_t *options, const char *uuid)
{
    bson_t m = BSON_INITIALIZER, arr;
    if (options != NULL && !bson_empty(options))
        BSON_APPEND_DOCUMENT(&m, "options", options);
    BSON_APPEND_ARRAY_BEGIN(&m, "indexes", &arr);
    if (strcmp(it->type, "view") != 0) {
        mongoc_collection_t *coll = mongoc_client_get_collection(d->c, it->src_db, it->src);
        mongoc_cursor_t *cur = mongoc_collection_find_indexes_with_opts(coll, NULL);
        const bson_t *ix;
        uint32_t i = 0;
        while (mongoc_cursor_next(cur, &ix)) {
            char k[16];
            const char *key;
            bson_uint32_to_string(i++, &key, k, sizeof(k));
            bson_append_document(&arr, key, -1, ix);
        }
        bson_error_t e;
        bool bad = mongoc_cursor_error(cur, &e);
        mongoc_cursor_destroy(cur);
        mongoc_collection_destroy(coll);
        if (bad) {
            bson_append_array_end(&m, &arr);
            bson_destroy(&m);
            return tool_err("listIndexes on %s.%s: %s", it->src_db, it->src, e.message);
        }
    }
    bson_append_array_end(&m, &arr);
    if (uuid != NULL && uuid[0])
        BSON_APPEND_UTF8(&m, "uuid", uuid);
    BSON_APPEND_UTF8(&m, "collectionName", it->coll);
    BSON_APPEND_UTF8(&m, "type", it->type);
    size_t len;
    it->metadata = tool_to_json(&m, true, &len);
    bson_destroy(&m);
    return 0;
}

/* The data size (for the archive's prelude) and count (for the progress line) of a
   collection, from collStats; 0 when unknown. */
static void coll_stats(dump_t *d, intent_t *in)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_error_t e;
    bson_iter_t it;
    BSON_APPEND_UTF8(&cmd, "collStats", in->src);
    if (mongoc_client_command_simple(d->c, in->src_db, &cmd, NULL, &reply, &e)) {
        if (bson_iter_init_find(&it, &reply, "size") && BSON_ITER_HOLDS_NUMBER(&it))
            in->size = bson_iter_as_int64(&it);
        if (bson_iter_init_find(&it, &reply, "count") && BSON_ITER_HOLDS_NUMBER(&it))
            in->count = bson_iter_as_int64(&it);
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
}

static int list_db(dump_t *d, const char *db, bool full)
{
    mongoc_database_t *mdb = mongoc_client_get_database(d->c, db);
    mongoc_cursor_t *cur = mongoc_database_find_collections_with_opts(mdb, NULL);
    const bson_t *info;
    int rc = 0;
    while (rc == 0 && mongoc_cursor_next(cur, &info)) {
        bson_iter_t it, sub;
        const char *name = NULL, *type = "collection";
        char uuid[40] = "";
        bson_t options = BSON_INITIALIZER;
        if (bson_iter_init_find(&it, info, "name") && BSON_ITER_HOLDS_UTF8(&it))
            name = bson_iter_utf8(&it, NULL);
        if (bson_iter_init_find(&it, info, "type") && BSON_ITER_HOLDS_UTF8(&it))
            type = bson_iter_utf8(&it, NULL);
        if (bson_iter_init_find(&it, info, "options") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&it, &len, &data);
            bson_destroy(&options);
            bson_init_static(&options, data, len);
        }
        if (bson_iter_init_find(&it, info, "info") && bson_iter_recurse(&it, &sub) &&
            bson_iter_find(&sub, "uuid") && BSON_ITER_HOLDS_BINARY(&sub)) {
            uint32_t len;
            const uint8_t *bin;
            bson_iter_binary(&sub, NULL, &len, &bin);
            for (uint32_t i = 0; i < len && i < 16; i++)
                sprintf(uuid + 2 * i, "%02x", bin[i]);
        }
        if (name == NULL || skipped_system(db, name, full) || !coll_wanted(d, db, name))
            continue;
        if (strcmp(type, "view") == 0 && d->o.views_as_colls) {
            add_intent(d, db, name, "collection");
            rc = build_metadata(d, &d->in[d->n - 1], NULL, NULL);
            continue;
        }
        /* A time-series collection: Sable keeps its measurements as documents (no
           system.buckets), so they are dumped as they are read, with type "timeseries" */
        add_intent(d, db, name,
                   strcmp(type, "view") == 0         ? "view"
                   : strcmp(type, "timeseries") == 0 ? "timeseries"
                                                     : "collection");
        rc = build_metadata(d, &d->in[d->n - 1], &options, uuid);
        if (d->in[d->n - 1].data)
            coll_stats(d, &d->in[d->n - 1]);
    }
    bson_error_t e;
    if (rc == 0 && mongoc_cursor_error(cur, &e))
        rc = tool_err("listCollections on %s: %s", db, e.message);
    mongoc_cursor_destroy(cur);
    mongoc_database_destroy(mdb);
    return rc;
}

static int list_intents(dump_t *d)
{
    if (d->o.db != NULL) {
        if (list_db(d, d->o.db, false) != 0)
            return -1;
        if (d->o.users_roles) {
            static const char *const which[2] = {"users", "roles"};
            for (int i = 0; i < 2; i++) {
                char name[64];
                snprintf(name, sizeof(name), "$admin.system.%s", which[i]);
                add_intent(d, d->o.db, name, "");
                intent_t *it = &d->in[d->n - 1];
                snprintf(it->src_db, sizeof(it->src_db), "admin");
                snprintf(it->src, sizeof(it->src), "system.%s", which[i]);
                it->users_of_db = true;
            }
        }
        return 0;
    }
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_INT32(&cmd, "listDatabases", 1);
    BSON_APPEND_BOOL(&cmd, "nameOnly", true);
    int rc = tool_command(d->c, "admin", &cmd, &reply, "listDatabases");
    bson_destroy(&cmd);
    if (rc != 0)
        return -1;
    bson_iter_t it, arr, db;
    if (bson_iter_init_find(&it, &reply, "databases") && bson_iter_recurse(&it, &arr)) {
        while (rc == 0 && bson_iter_next(&arr)) {
            if (bson_iter_recurse(&arr, &db) && bson_iter_find(&db, "name") &&
                BSON_ITER_HOLDS_UTF8(&db)) {
                const char *name = bson_iter_utf8(&db, NULL);
                if (strcmp(name, "local") != 0 && strcmp(name, "config") != 0)
                    rc = list_db(d, name, true);
            }
        }
    }
    bson_destroy(&reply);
    return rc;
}

static int mkdir_p(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return tool_err("cannot create directory %s: %s", tmp, strerror(errno));
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return tool_err("cannot create directory %s: %s", tmp, strerror(errno));
    return 0;
}

/* Stream one namespace's documents to out; in an archive, wrapped in a segment and its
   end (crc).  Returns 0 or -1. */
static int dump_data(dump_t *d, mongoc_client_t *c, intent_t *it, tool_stream_t *out,
                     bool archive)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(c, it->src_db, it->src);
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER;
    bool filter_is_query = it->filter != NULL || it->users_of_db || !bson_empty(&d->query);
    if (it->filter != NULL)
        bson_concat(&filter, it->filter);
    else if (it->users_of_db)
        BSON_APPEND_UTF8(&filter, "db", it->db);
    else if (!bson_empty(&d->query))
        bson_concat(&filter, &d->query);
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);
    const bson_t *doc;
    uint64_t crc = 0;
    int rc = 0;
    char what[400];
    snprintf(what, sizeof(what), "%s.%s", it->db, it->coll);
    tool_progress_t p;
    tool_progress_start(&p, what, filter_is_query ? 0 : it->count);
    while (rc == 0 && mongoc_cursor_next(cur, &doc)) {
        if (archive && p.docs == 0)
            rc = arch_write_ns_header(out, it->db, it->coll, false, 0);
        if (rc == 0)
            rc = tool_stream_write(out, bson_get_data(doc), doc->len);
        if (archive)
            crc = arch_crc64(crc, bson_get_data(doc), doc->len);
        tool_progress_add(&p, 1, doc->len);
    }
    bson_error_t e;
    if (rc == 0 && mongoc_cursor_error(cur, &e))
        rc = tool_err("reading %s.%s: %s", it->src_db, it->src, e.message);
    if (rc == 0 && archive) {
        if (p.docs > 0)
            rc = arch_write_terminator(out);
        if (rc == 0)
            rc = arch_write_ns_header(out, it->db, it->coll, true, (int64_t)crc);
        if (rc == 0)
            rc = arch_write_terminator(out);
    }
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(coll);
    bson_destroy(&filter);
    bson_destroy(&opts);
    if (rc == 0)
        tool_progress_done(&p, "done dumping ");
    pthread_mutex_lock(&d->mu);
    d->total_docs += p.docs;
    d->total_bytes += p.bytes;
    pthread_mutex_unlock(&d->mu);
    return rc;
}

static int write_file(const char *path, bool gzip, const char *text)
{
    tool_stream_t *s = tool_stream_open(path, true, gzip);
    if (s == NULL)
        return -1;
    int rc = tool_stream_write(s, text, strlen(text));
    return tool_stream_close(s) != 0 ? -1 : rc;
}

/* Dump the data of intents taken one by one from d->next until none is left (or one
   failed), on a connection of its own unless it is the only worker. */
static void dump_worker(dump_t *d)
{
    const char *gz = d->o.gzip ? ".gz" : "";
    /* Connected before taking a collection, so -j N means N connections
     * even when one worker could have dumped every collection alone. */
    mongoc_client_t *c = tool_connect(&d->conn);
    if (c == NULL) {
        pthread_mutex_lock(&d->mu);
        d->failed = true;
        pthread_mutex_unlock(&d->mu);
        return;
    }
    for (;;) {
        pthread_mutex_lock(&d->mu);
        while (d->next < d->n && !d->in[d->next].data)
            d->next++;
        int i = d->failed || d->next >= d->n ? -1 : d->next++;
        pthread_mutex_unlock(&d->mu);
        if (i < 0)
            break;
        intent_t *it = &d->in[i];
        char name[600], path[4800];
        dump_escape_name(it->coll, name, sizeof(name));
        snprintf(path, sizeof(path), "%s/%s/%s.bson%s", d->o.out, it->db, name, gz);
        tool_stream_t *s = tool_stream_open(path, true, d->o.gzip);
        int rc = s == NULL ? -1 : dump_data(d, c, it, s, false);
        if ((s != NULL && tool_stream_close(s) != 0) || rc != 0) {
            pthread_mutex_lock(&d->mu);
            d->failed = true;
            pthread_mutex_unlock(&d->mu);
        }
    }
    mongoc_client_destroy(c);
}

static void *dump_worker_main(void *arg)
{
    dump_worker(arg);
    return NULL;
}

/* The newest oplog entry's ts into t/i.  0, or -1 when the server has no oplog. */
static int oplog_newest(dump_t *d, uint32_t *t, uint32_t *i)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it;
    BSON_APPEND_INT32(&cmd, "hello", 1);
    int rc = tool_command(d->c, "admin", &cmd, &reply, "hello");
    bson_destroy(&cmd);
    if (rc != 0)
        return -1;
    bool member = bson_iter_init_find(&it, &reply, "setName");
    bson_destroy(&reply);
    if (!member)
        return tool_err("--oplog needs a replica set member (this server is a standalone or "
                        "a router, which have no oplog); dump without --oplog");
    mongoc_collection_t *coll = mongoc_client_get_collection(d->c, "local", "oplog.rs");
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, sort;
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "$natural", -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", 1);
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);
    const bson_t *doc;
    bson_error_t e;
    rc = -1;
    if (mongoc_cursor_next(cur, &doc)) {
        if (bson_iter_init_find(&it, doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, t, i);
            rc = 0;
        } else {
            tool_err("the newest entry of local.oplog.rs has no timestamp ts");
        }
    } else if (mongoc_cursor_error(cur, &e)) {
        tool_err("reading local.oplog.rs: %s", e.message);
    } else {
        tool_err("local.oplog.rs is empty: is the replica set initiated?");
    }
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(coll);
    bson_destroy(&filter);
    bson_destroy(&opts);
    return rc;
}

/* --oplog: note where the oplog stands before any document is read (mongodump's
   oplog start); the entries from there to the dump's end make it consistent. */
static int oplog_start(dump_t *d)
{
    if (oplog_newest(d, &d->oplog_start[0], &d->oplog_start[1]) != 0)
        return -1;
    intent_t *it = &d->oplog;
    memset(it, 0, sizeof(*it));
    snprintf(it->coll, sizeof(it->coll), "oplog");
    snprintf(it->src_db, sizeof(it->src_db), "local");
    snprintf(it->src, sizeof(it->src), "oplog.rs");
    it->data = true;
    bson_reinit(&d->oplog_filter);
    it->filter = &d->oplog_filter;
    return 0;
}

/* After the collections: the dump's end is the newest entry now; the oplog part of
   the dump is {ts: {$gte: start, $lte: end}}. */
static int set_oplog_end(dump_t *d)
{
    uint32_t t, i;
    if (oplog_newest(d, &t, &i) != 0)
        return -1;
    bson_t ts;
    bson_reinit(&d->oplog_filter);
    BSON_APPEND_DOCUMENT_BEGIN(&d->oplog_filter, "ts", &ts);
    BSON_APPEND_TIMESTAMP(&ts, "$gte", d->oplog_start[0], d->oplog_start[1]);
    BSON_APPEND_TIMESTAMP(&ts, "$lte", t, i);
    bson_append_document_end(&d->oplog_filter, &ts);
    tool_log("oplog: entries from Timestamp(%u, %u) to Timestamp(%u, %u)", d->oplog_start[0],
             d->oplog_start[1], t, i);
    return 0;
}

/* The start entry must still be there after the oplog was read: the oplog is capped and
   drops its oldest entries first, so if it survived, none of the dump's range was lost. */
static int oplog_check_start(dump_t *d)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(d->c, "local", "oplog.rs");
    bson_t filter = BSON_INITIALIZER;
    BSON_APPEND_TIMESTAMP(&filter, "ts", d->oplog_start[0], d->oplog_start[1]);
    bson_error_t e;
    int64_t n = mongoc_collection_count_documents(coll, &filter, NULL, NULL, NULL, &e);
    bson_destroy(&filter);
    mongoc_collection_destroy(coll);
    if (n < 0)
        return tool_err("checking the oplog's start: %s", e.message);
    if (n == 0)
        return tool_err("the oplog rolled over during the dump: its entries from Timestamp(%u, "
                        "%u) on are no longer all there, so the dump is not consistent; dump "
                        "again with a larger oplog (--oplogSizeMB) or a shorter dump",
                        d->oplog_start[0], d->oplog_start[1]);
    return 0;
}

static int dump_dir(dump_t *d)
{
    const char *gz = d->o.gzip ? ".gz" : "";
    if (strcmp(d->o.out, "-") == 0) {
        if (d->n != 1 || !d->in[0].data)
            return tool_err("--out - (standard output) needs --db and --collection naming one "
                            "collection");
        tool_stream_t *s = tool_stream_open("-", true, d->o.gzip);
        if (s == NULL)
            return -1;
        int rc = dump_data(d, d->c, &d->in[0], s, false);
        return tool_stream_close(s) != 0 ? -1 : rc;
    }
    int ndata = 0;
    for (int i = 0; i < d->n; i++) {
        intent_t *it = &d->in[i];
        char dir[4096], name[600], path[4800];
        snprintf(dir, sizeof(dir), "%s/%s", d->o.out, it->db);
        if (mkdir_p(dir) != 0)
            return -1;
        dump_escape_name(it->coll, name, sizeof(name));
        if (it->metadata != NULL) {
            snprintf(path, sizeof(path), "%s/%s.metadata.json%s", dir, name, gz);
            if (write_file(path, d->o.gzip, it->metadata) != 0)
                return -1;
        }
        ndata += it->data;
    }
    /* The documents: --numParallelCollections collections at once (default 4), each
       on a connection of its own. */
    int nw = (int)d->o.jobs;
    if (nw > ndata)
        nw = ndata;
    if (nw <= 1) {
        dump_worker(d);
    } else {
        pthread_t *t = calloc((size_t)nw, sizeof(*t));
        int started = 0;
        for (; started < nw; started++)
            if (pthread_create(&t[started], NULL, dump_worker_main, d) != 0)
                break;
        if (started == 0)
            dump_worker(d);
        for (int i = 0; i < started; i++)
            pthread_join(t[i], NULL);
        free(t);
    }
    if (d->failed)
        return -1;
    if (!d->o.oplog)
        return 0;
    /* The oplog from the start to now, at the dump's root, after every collection. */
    char path[4200];
    snprintf(path, sizeof(path), "%s/oplog.bson%s", d->o.out, gz);
    if (mkdir_p(d->o.out) != 0 || set_oplog_end(d) != 0)
        return -1;
    tool_stream_t *s = tool_stream_open(path, true, d->o.gzip);
    int rc = s == NULL ? -1 : dump_data(d, d->c, &d->oplog, s, false);
    if (s != NULL && tool_stream_close(s) != 0)
        rc = -1;
    return rc == 0 ? oplog_check_start(d) : -1;
}

static int dump_archive(dump_t *d)
{
    arch_meta_t *m = calloc((size_t)d->n + 1, sizeof(*m));
    for (int i = 0; i < d->n; i++)
        m[i] = (arch_meta_t){d->in[i].db, d->in[i].coll, d->in[i].metadata, d->in[i].type,
                             d->in[i].size};
    if (d->o.oplog) /* mongodump lists the oplog in the prelude as "".oplog, no metadata */
        m[d->n] = (arch_meta_t){"", "oplog", NULL, NULL, 0};
    tool_stream_t *s = tool_stream_open(d->o.archive, true, d->o.gzip);
    int rc = s == NULL ? -1 : 0;
    if (rc == 0)
        rc = arch_write_prelude(s, (int)d->o.jobs, d->server_version, m,
                                d->n + (d->o.oplog ? 1 : 0));
    for (int i = 0; i < d->n && rc == 0; i++)
        if (d->in[i].data)
            rc = dump_data(d, d->c, &d->in[i], s, true);
    if (rc == 0 && d->o.oplog) {
        rc = set_oplog_end(d);
        if (rc == 0)
            rc = dump_data(d, d->c, &d->oplog, s, true);
        if (rc == 0)
            rc = oplog_check_start(d);
    }
    if (s != NULL && tool_stream_close(s) != 0)
        rc = -1;
    free(m);
    return rc;
}

static int check_options(dump_t *d)
{
    dopts_t *o = &d->o;
    if (o->oplog && (o->db != NULL || o->coll != NULL || o->query != NULL ||
                     o->query_file != NULL))
        return tool_err("--oplog is only for a dump of the whole server: not with --db, "
                        "--collection or --query");
    if (o->coll != NULL && o->db == NULL)
        return tool_err("cannot dump a collection without a specified database (--db)");
    if ((o->query != NULL || o->query_file != NULL) && o->coll == NULL)
        return tool_err("cannot dump using a query without a specified collection");
    if (o->users_roles && (o->db == NULL || strcmp(o->db, "admin") == 0))
        return tool_err("--dumpDbUsersAndRoles needs --db naming a database other than admin");
    if (o->archive != NULL && o->out != NULL)
        return tool_err("--out and --archive cannot be used together");
    if (o->oplog && o->out != NULL && strcmp(o->out, "-") == 0)
        return tool_err("--oplog cannot write to standard output with --out -; use --archive");
    if (o->out == NULL)
        o->out = "dump";
    if (o->jobs < 1)
        return tool_err("--numParallelCollections must be at least 1");
    bson_init(&d->query);
    if (o->query != NULL) {
        bson_destroy(&d->query);
        if (tool_json_arg("--query", o->query, &d->query) != 0)
            return -1;
    } else if (o->query_file != NULL) {
        FILE *f = fopen(o->query_file, "rb");
        if (f == NULL)
            return tool_err("cannot open --queryFile %s: %s", o->query_file, strerror(errno));
        char buf[65536];
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        bson_destroy(&d->query);
        if (tool_json_arg("--queryFile", buf, &d->query) != 0)
            return -1;
    }
    return tool_ns_check(&o->ns);
}

int main(int argc, char **argv)
{
    dump_t d;
    memset(&d, 0, sizeof(d));
    bson_init(&d.oplog_filter); /* destroyed at the end whether or not --oplog set it */
    tool_conn_t conn = {0};
    dopts_t *o = &d.o;
    o->jobs = 4; /* mongodump's default */
    const tool_opt_t opts[] = {
        {"db", 'd', TO_STR, &o->db, "database to dump"},
        {"collection", 'c', TO_STR, &o->coll, "collection to dump"},
        {"query", 'q', TO_STR, &o->query, "filter (JSON) for --collection's documents"},
        {"queryFile", 0, TO_STR, &o->query_file, "file holding the --query filter"},
        {"out", 'o', TO_STR, &o->out, "output directory (default ./dump; - for stdout)"},
        {"archive", 0, TO_OPTSTR, &o->archive, "write one archive (stdout without =FILE)"},
        {"gzip", 0, TO_FLAG, &o->gzip, "compress files (or the archive) with gzip"},
        {"nsInclude", 0, TO_MULTI, &o->ns.include, "only namespaces matching (* wildcard)"},
        {"nsExclude", 0, TO_MULTI, &o->ns.exclude, "skip namespaces matching (* wildcard)"},
        {"excludeCollection", 0, TO_MULTI, &o->exclude_coll, "skip this collection"},
        {"excludeCollectionsWithPrefix", 0, TO_MULTI, &o->exclude_prefix,
         "skip collections with this prefix"},
        {"dumpDbUsersAndRoles", 0, TO_FLAG, &o->users_roles, "with --db: its users and roles"},
        {"viewsAsCollections", 0, TO_FLAG, &o->views_as_colls, "dump views' documents"},
        {"numParallelCollections", 'j', TO_INT, &o->jobs,
         "collections dumped at once (default 4; an archive: one at a time)"},
        {"oplog", 0, TO_FLAG, &o->oplog,
         "point in time: add the oplog's entries written during the dump (replica sets)"},
        {"readPreference", 0, TO_STR, &o->read_pref, "accepted (a standalone serves all reads)"},
        {"forceTableScan", 0, TO_FLAG, &o->force_scan, NULL},
        {NULL, 0, 0, NULL, NULL},
    };
    int rc = tool_opts_parse("sable-dump", usage, argc, argv, opts, &conn, NULL);
    if (rc != 0)
        return rc > 0 ? 0 : 1;
    if (check_options(&d) != 0)
        return 1;
    d.conn = conn;
    pthread_mutex_init(&d.mu, NULL);
    d.c = tool_connect(&conn);
    if (d.c == NULL)
        return 1;
    tool_server_version(d.c, d.server_version, sizeof(d.server_version));
    double start = tool_now();
    rc = o->oplog ? oplog_start(&d) : 0;
    if (rc == 0)
        rc = list_intents(&d);
    if (rc == 0 && o->db != NULL && o->coll != NULL && d.n == 0)
        tool_log("warning: %s.%s does not exist; nothing to dump", o->db, o->coll);
    if (rc == 0)
        rc = o->archive != NULL ? dump_archive(&d) : dump_dir(&d);
    double secs = tool_now() - start;
    if (rc == 0)
        tool_log("dumped %d namespaces, %lld documents, %.1f MB in %.2fs (%.1f MB/s)", d.n,
                 (long long)d.total_docs, d.total_bytes / 1e6, secs,
                 secs > 0 ? d.total_bytes / 1e6 / secs : 0);
    else
        tool_err("dump failed; what was written is incomplete");
    for (int i = 0; i < d.n; i++)
        bson_free(d.in[i].metadata);
    free(d.in);
    bson_destroy(&d.query);
    bson_destroy(&d.oplog_filter);
    mongoc_client_destroy(d.c);
    return rc == 0 ? 0 : 1;
}
