/*
 * admin.c: databases and collections: create, drop, dropDatabase,
 * listDatabases, listCollections, renameCollection, collStats, dbStats
 * (the index commands are in index_cmds.c).
 */
#include "cmd/capped.h"
#include "cmd/cmd_int.h"
#include "cmd/crud_int.h"
#include "cmd/timeseries.h"
#include "agg/agg.h"
#include "query/query.h"
#include "repl/repl.h"
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

/* Generic command fields that are not collection options. */
static bool is_generic_field(const char *k)
{
    static const char *const generic[] = {"writeConcern", "lsid", "txnNumber", "comment",
                                          "maxTimeMS", "readConcern", "apiVersion", "apiStrict",
                                          "apiDeprecationErrors", "autocommit",
                                          "startTransaction"};
    if (k[0] == '$')
        return true;
    for (size_t i = 0; i < sizeof(generic) / sizeof(generic[0]); i++)
        if (strcmp(k, generic[i]) == 0)
            return true;
    return false;
}

static void append_id_index(bson_t *out, const char *key)
{
    bson_t idx, k;
    bson_append_document_begin(out, key, -1, &idx);
    BSON_APPEND_INT32(&idx, "v", 2);
    BSON_APPEND_DOCUMENT_BEGIN(&idx, "key", &k);
    BSON_APPEND_INT32(&k, "_id", 1);
    bson_append_document_end(&idx, &k);
    BSON_APPEND_UTF8(&idx, "name", "_id_");
    bson_append_document_end(out, &idx);
}

/* applyOps's create with "ui" (apply_ops.c): the UUID the next create on this thread
   takes instead of a new one. */
static _Thread_local const uint8_t *create_uuid;

int sbl_cmd_create_with_uuid(sbl_opctx_t *ctx, const uint8_t *uuid, sbl_err_t *err)
{
    create_uuid = uuid;
    int rc = sbl_cmd_create(ctx, err);
    create_uuid = NULL;
    return rc;
}

int sbl_cmd_create(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[256];
    bson_iter_t it;
    bson_t opts = BSON_INITIALIZER;
    bool is_view = false;
    int rc = 0;

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    SBL_RET(sbl_validate_user_write_ns(ns, err));
    /* timeseries, clusteredIndex, expireAfterSeconds: first, as MongoDB checks them
     * (a clustered collection refuses size/max with its own codes) */
    SBL_ERR(sbl_ts_create_options(ctx->cmd, ns, &opts, err));
    SBL_ERR(sbl_capped_create_options(ctx->cmd, &opts, err));
    bson_iter_init(&it, ctx->cmd);
    bson_iter_next(&it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (is_generic_field(k))
            continue;
        if (strcmp(k, "viewOn") == 0 || strcmp(k, "pipeline") == 0) {
            is_view = true; /* sbl_view_options reads both */
            continue;
        }
        if (sbl_ts_is_create_field(k))
            continue; /* sbl_ts_create_options parses them */
        if (sbl_capped_is_create_field(k))
            continue; /* sbl_capped_create_options parses them */
        if (strcmp(k, "collation") == 0) {
            SBL_ERR(sbl_exec_collation_option(&it, &opts, err)); /* the collection default */
            continue;
        }
        sbl_append_iter(&opts, k, -1, &it);
    }
    /* validator, validationLevel, validationAction: checked here, enforced on writes */
    SBL_ERR(sbl_crud_check_validator(&opts, err));
    if (is_view) {
        SBL_ERR(sbl_view_options(ctx->cmd, &opts, err));
        sbl_views_note_created(); /* before the view exists: readers then look */
    }
    /* In a transaction: a plain collection only (capped ones take no
     * transactional writes; views and time-series are not transactional). */
    if (ctx->mtxn != NULL && (is_view || bson_has_field(&opts, "capped") ||
                              bson_has_field(&opts, "timeseries"))) {
        rc = sbl_err_set(err, SBL_E_OperationNotSupportedInTransaction,
                         "Cannot create a %s in a multi-document transaction.",
                         is_view ? "view" : bson_has_field(&opts, "capped")
                                                ? "capped collection"
                                                : "time-series collection");
        goto err;
    }
    if (create_uuid != NULL && !is_view)
        SBL_ERR(sbl_coll_create_uuid(ctx->ss, ns, &opts, create_uuid, err));
    else
        SBL_ERR(sbl_coll_create(ctx->ss, ns, &opts, err));
    ctx->wrote = true;
    sbl_op_coll_created(ctx, ns);
    SBL_ERR(sbl_ts_after_create(ctx->ss, ns, &opts, err));
err:
    bson_destroy(&opts);
    return rc;
}

int sbl_cmd_drop(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[256];
    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    sbl_coll_t *dc = NULL;
    int32_t nindexes = 1;
    uint8_t uuid[16] = {0};
    sbl_coll_stats_t st = {0};
    if (sbl_coll_open(ctx->ss, ns, false, &dc, NULL, NULL) == 0) {
        nindexes += (int32_t)sbl_index_count(dc);
        memcpy(uuid, sbl_coll_uuid(dc), 16);
        sbl_coll_stats(ctx->ss, dc, &st, NULL);
        sbl_coll_release(dc);
    }
    int rc = sbl_coll_drop(ctx->ss, ns, err);
    if (rc == SBL_E_NamespaceNotFound) {
        /* MongoDB 7.0: dropping a collection that does not exist succeeds. */
        sbl_err_clear(err);
        return 0;
    }
    SBL_RET(rc);
    BSON_APPEND_INT32(ctx->reply, "nIndexesWas", nindexes);
    BSON_APPEND_UTF8(ctx->reply, "ns", ns);
    ctx->wrote = true;
    sbl_repl_log_drop(ctx->ss, ns, uuid, st.count);
    sbl_cmd_audit_ns(ctx, "dropCollection", ns);
    return 0;
}

int sbl_cmd_drop_database(sbl_opctx_t *ctx, sbl_err_t *err)
{
    SBL_RET(sbl_validate_db_name(ctx->db, err));
    SBL_RET(sbl_db_drop(ctx->ss, ctx->db, err));
    BSON_APPEND_UTF8(ctx->reply, "dropped", ctx->db);
    ctx->wrote = true;
    sbl_repl_log_drop_database(ctx->ss, ctx->db);
    sbl_cmd_audit_ns(ctx, "dropDatabase", ctx->db);
    return 0;
}

/* ---- listing ---------------------------------------------------------------- */

typedef struct name_list {
    char **names;
    bson_t **opts;
    uint8_t (*uuids)[16];
    size_t n, cap;
} name_list_t;

static bool collect_ns(const char *ns, const bson_t *options, const uint8_t *uuid, void *arg)
{
    name_list_t *l = arg;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->names = realloc(l->names, l->cap * sizeof(char *));
        l->opts = realloc(l->opts, l->cap * sizeof(bson_t *));
        l->uuids = realloc(l->uuids, l->cap * 16);
        if (l->names == NULL || l->opts == NULL || l->uuids == NULL)
            abort();
    }
    l->names[l->n] = bson_strdup(ns);
    l->opts[l->n] = options ? bson_copy(options) : bson_new();
    memcpy(l->uuids[l->n], uuid, 16);
    l->n++;
    return true;
}

static void name_list_free(name_list_t *l)
{
    for (size_t i = 0; i < l->n; i++) {
        bson_free(l->names[i]);
        bson_destroy(l->opts[i]);
    }
    free(l->names);
    free(l->opts);
    free(l->uuids);
}

static int get_filter(const bson_t *cmd, sbl_matcher_t **mp, sbl_err_t *err)
{
    bson_iter_t it;
    *mp = NULL;
    if (!bson_iter_init_find(&it, cmd, "filter") || BSON_ITER_HOLDS_NULL(&it))
        return 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field 'filter' is the wrong type, expected type 'object'");
    uint32_t len;
    const uint8_t *data;
    bson_t f;
    bson_iter_document(&it, &len, &data);
    bson_init_static(&f, data, len);
    *mp = sbl_matcher_new(&f, err);
    return *mp == NULL ? err->code : 0;
}

static int64_t ns_storage_size(sbl_session_t *ss, const char *ns, int64_t *datap, int64_t *countp)
{
    sbl_coll_t *c;
    sbl_coll_stats_t st = {0};
    if (sbl_coll_open(ss, ns, false, &c, NULL, NULL) == 0) {
        sbl_coll_stats(ss, c, &st, NULL);
        sbl_coll_release(c);
    }
    if (datap)
        *datap += st.data_size;
    if (countp)
        *countp += st.count;
    return st.storage_size;
}

int sbl_cmd_list_databases(sbl_opctx_t *ctx, sbl_err_t *err)
{
    name_list_t l = {0};
    sbl_matcher_t *m = NULL;
    bson_iter_t it;
    bool name_only = bson_iter_init_find(&it, ctx->cmd, "nameOnly") && bson_iter_as_bool(&it);
    int64_t total = 0;
    int rc = 0;
    bson_t arr;

    SBL_RET(get_filter(ctx->cmd, &m, err));
    sbl_catalog_list(NULL, collect_ns, &l);
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "databases", &arr);
    uint32_t idx = 0;
    for (size_t i = 0; i < l.n;) {
        const char *dot = strchr(l.names[i], '.');
        size_t dlen = (size_t)(dot - l.names[i]);
        char db[128];
        snprintf(db, sizeof(db), "%.*s", (int)dlen, l.names[i]);
        int64_t size = 0;
        for (; i < l.n && strncmp(l.names[i], db, dlen) == 0 && l.names[i][dlen] == '.'; i++)
            size += ns_storage_size(ctx->ss, l.names[i], NULL, NULL);
        bson_t d = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&d, "name", db);
        if (!name_only) {
            BSON_APPEND_INT64(&d, "sizeOnDisk", size);
            BSON_APPEND_BOOL(&d, "empty", false);
        }
        if (m == NULL || sbl_matcher_match(m, &d, NULL)) {
            char key[16];
            const char *k;
            bson_uint32_to_string(idx++, &k, key, sizeof(key));
            bson_append_document(&arr, k, -1, &d);
            total += size;
        }
        bson_destroy(&d);
    }
    bson_append_array_end(ctx->reply, &arr);
    if (!name_only) {
        BSON_APPEND_INT64(ctx->reply, "totalSize", total);
        BSON_APPEND_INT64(ctx->reply, "totalSizeMb", total / (1024 * 1024));
    }
    sbl_matcher_free(m);
    name_list_free(&l);
    return rc;
}

static int64_t cursor_batch_size(const bson_t *cmd)
{
    bson_iter_t it, c;
    if (bson_iter_init_find(&it, cmd, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &c) && bson_iter_find(&c, "batchSize") &&
        BSON_ITER_HOLDS_NUMBER(&c))
        return bson_iter_as_int64(&c);
    return -1;
}

int sbl_cmd_list_collections(sbl_opctx_t *ctx, sbl_err_t *err)
{
    name_list_t l = {0};
    sbl_matcher_t *m = NULL;
    bson_iter_t it;
    bool name_only = bson_iter_init_find(&it, ctx->cmd, "nameOnly") && bson_iter_as_bool(&it);
    char cns[256];

    SBL_RET(sbl_validate_db_name(ctx->db, err));
    SBL_RET(get_filter(ctx->cmd, &m, err));
    sbl_catalog_list(ctx->db, collect_ns, &l);
    bson_t **docs = calloc(l.n ? l.n : 1, sizeof(bson_t *));
    size_t nd = 0;
    for (size_t i = 0; i < l.n; i++) {
        const char *coll = l.names[i] + strlen(ctx->db) + 1;
        bson_t *d = bson_new(), sub;
        bool view = bson_has_field(l.opts[i], "viewOn");
        bool ts = sbl_ts_is_timeseries(l.opts[i]); /* MongoDB's is a view on its buckets */
        BSON_APPEND_UTF8(d, "name", coll);
        BSON_APPEND_UTF8(d, "type", view ? "view" : ts ? "timeseries" : "collection");
        if (!name_only) {
            BSON_APPEND_DOCUMENT(d, "options", l.opts[i]);
            BSON_APPEND_DOCUMENT_BEGIN(d, "info", &sub);
            BSON_APPEND_BOOL(&sub, "readOnly", view);
            if (!view && !ts)
                BSON_APPEND_BINARY(&sub, "uuid", BSON_SUBTYPE_UUID, l.uuids[i], 16);
            bson_append_document_end(d, &sub);
            if (!view && !ts && !bson_has_field(l.opts[i], "clusteredIndex"))
                append_id_index(d, "idIndex");
        }
        if (m == NULL || sbl_matcher_match(m, d, NULL))
            docs[nd++] = d;
        else
            bson_destroy(d);
    }
    sbl_matcher_free(m);
    name_list_free(&l);
    snprintf(cns, sizeof(cns), "%s.$cmd.listCollections", ctx->db);
    return sbl_cursor_first_batch(ctx, cns, &sbl_cursor_docs_source,
                                  sbl_cursor_docs_state(docs, nd), cursor_batch_size(ctx->cmd),
                                  false, err);
}

int sbl_cmd_rename_collection(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    const char *from, *to;
    bool drop_target = false;

    bson_iter_init(&it, ctx->cmd);
    bson_iter_next(&it);
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field 'renameCollection' is the wrong type, expected type "
                           "'string'");
    from = bson_iter_utf8(&it, NULL);
    if (!bson_iter_init_find(&it, ctx->cmd, "to") || !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field 'to' is missing or is not of type 'string'");
    to = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, ctx->cmd, "dropTarget"))
        drop_target = bson_iter_as_bool(&it);
    SBL_RET(sbl_validate_ns(from, err));
    SBL_RET(sbl_validate_ns(to, err));
    if (strcmp(from, to) == 0)
        return sbl_err_set(err, SBL_E_IllegalOperation, "Can't rename a collection to itself");
    uint8_t uuid[16] = {0};
    sbl_coll_t *src = NULL;
    if (sbl_coll_open(ctx->ss, from, false, &src, NULL, NULL) == 0) {
        memcpy(uuid, sbl_coll_uuid(src), 16);
        size_t fdb = (size_t)(strchr(from, '.') - from);
        int rc = 0;
        bool across = strncmp(from, to, fdb + 1) != 0; /* another database */
        if (across)
            rc = sbl_cmd_rename_across_dbs(ctx, src, from, to, drop_target, err);
        sbl_coll_release(src);
        if (across) {
            SBL_RET(rc);
            ctx->wrote = true;
            sbl_cmd_audit_rename(ctx, from, to);
            return 0;
        }
    }
    uint8_t dropped[16];
    bool replaces = drop_target && sbl_repl_uuid_of(ctx->ss, to, dropped);
    SBL_RET(sbl_coll_rename(ctx->ss, from, to, drop_target, err));
    sbl_repl_log_rename(ctx->ss, from, to, uuid, replaces ? dropped : NULL);
    ctx->wrote = true;
    sbl_cmd_audit_rename(ctx, from, to);
    return 0;
}

static int64_t get_scale(const bson_t *cmd, sbl_err_t *err)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, cmd, "scale") && BSON_ITER_HOLDS_NUMBER(&it)) {
        int64_t s = bson_iter_as_int64(&it);
        if (s < 1) {
            sbl_err_set(err, SBL_E_BadValue, "Scale factor must be greater than zero");
            return -1;
        }
        return s;
    }
    return 1;
}

int sbl_cmd_coll_stats(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[256];
    sbl_coll_t *c;
    sbl_coll_stats_t st;
    int64_t scale = get_scale(ctx->cmd, err);
    if (scale < 0)
        return err->code;

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    int rc = sbl_coll_open(ctx->ss, ns, false, &c, NULL, err);
    if (rc == SBL_E_NamespaceNotFound)
        return sbl_err_set(err, SBL_E_NamespaceNotFound, "Collection [%s] not found.", ns);
    SBL_RET(rc);
    rc = sbl_coll_stats(ctx->ss, c, &st, err);
    sbl_index_t **ixs = NULL;
    size_t nix = 0;
    sbl_index_list(c, false, &ixs, &nix);
    int64_t *ixsizes = calloc(nix + 1, sizeof(int64_t)), ixtotal = 0;
    for (size_t i = 0; i < nix; i++)
        ixtotal += (ixsizes[i] = sbl_index_size(ctx->ss, ixs[i]));
    bson_t capped = BSON_INITIALIZER; /* capped, max, maxSize */
    sbl_coll_append_capped_stats(c, &capped, scale);
    sbl_coll_release(c);
    if (rc != 0) {
        sbl_index_list_free(ixs, nix);
        free(ixsizes);
        bson_destroy(&capped);
        return rc;
    }
    bson_t sizes;
    BSON_APPEND_UTF8(ctx->reply, "ns", ns);
    BSON_APPEND_INT64(ctx->reply, "size", st.data_size / scale);
    BSON_APPEND_INT64(ctx->reply, "count", st.count);
    if (st.count > 0)
        BSON_APPEND_INT64(ctx->reply, "avgObjSize", st.data_size / st.count);
    BSON_APPEND_INT64(ctx->reply, "storageSize", st.storage_size / scale);
    BSON_APPEND_INT64(ctx->reply, "freeStorageSize", 0);
    bson_concat(ctx->reply, &capped);
    bson_destroy(&capped);
    BSON_APPEND_INT32(ctx->reply, "nindexes", (int32_t)(1 + nix));
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "indexBuilds", &sizes);
    bson_append_array_end(ctx->reply, &sizes);
    BSON_APPEND_INT64(ctx->reply, "totalIndexSize", ixtotal / scale);
    BSON_APPEND_INT64(ctx->reply, "totalSize", (st.storage_size + ixtotal) / scale);
    BSON_APPEND_DOCUMENT_BEGIN(ctx->reply, "indexSizes", &sizes);
    BSON_APPEND_INT64(&sizes, "_id_", 0); /* the _id index is the collection's own table */
    for (size_t i = 0; i < nix; i++)
        BSON_APPEND_INT64(&sizes, sbl_index_name(ixs[i]), ixsizes[i] / scale);
    bson_append_document_end(ctx->reply, &sizes);
    sbl_index_list_free(ixs, nix);
    free(ixsizes);
    BSON_APPEND_INT32(ctx->reply, "scaleFactor", (int32_t)scale);
    return 0;
}

int sbl_cmd_db_stats(sbl_opctx_t *ctx, sbl_err_t *err)
{
    name_list_t l = {0};
    int64_t data = 0, count = 0, storage = 0;
    int64_t scale = get_scale(ctx->cmd, err);
    if (scale < 0)
        return err->code;

    SBL_RET(sbl_validate_db_name(ctx->db, err));
    sbl_catalog_list(ctx->db, collect_ns, &l);
    for (size_t i = 0; i < l.n; i++)
        storage += ns_storage_size(ctx->ss, l.names[i], &data, &count);
    BSON_APPEND_UTF8(ctx->reply, "db", ctx->db);
    BSON_APPEND_INT64(ctx->reply, "collections", (int64_t)l.n);
    BSON_APPEND_INT64(ctx->reply, "views", 0);
    BSON_APPEND_INT64(ctx->reply, "objects", count);
    BSON_APPEND_DOUBLE(ctx->reply, "avgObjSize", count ? (double)data / (double)count : 0.0);
    BSON_APPEND_DOUBLE(ctx->reply, "dataSize", (double)data / (double)scale);
    BSON_APPEND_DOUBLE(ctx->reply, "storageSize", (double)storage / (double)scale);
    BSON_APPEND_INT64(ctx->reply, "indexes", (int64_t)l.n);
    BSON_APPEND_DOUBLE(ctx->reply, "indexSize", 0.0);
    BSON_APPEND_DOUBLE(ctx->reply, "totalSize", (double)storage / (double)scale);
    BSON_APPEND_INT64(ctx->reply, "scaleFactor", scale);
    struct statvfs vfs;
    const char *dbpath = sbl_server_options()->dbpath;
    if (statvfs(dbpath ? dbpath : ".", &vfs) == 0) {
        BSON_APPEND_DOUBLE(ctx->reply, "fsUsedSize",
                           (double)(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize / (double)scale);
        BSON_APPEND_DOUBLE(ctx->reply, "fsTotalSize",
                           (double)vfs.f_blocks * vfs.f_frsize / (double)scale);
    }
    name_list_free(&l);
    return 0;
}

/* The index commands (createIndexes, dropIndexes, listIndexes) are in index_cmds.c. */
