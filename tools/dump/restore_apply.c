/*
 * restore_apply.c: what sable-restore does to the server for one namespace:
 * drop (--drop), create with the dumped options (capped, validator,
 * collation, a view's viewOn and pipeline), insert documents in batches,
 * build the dumped indexes, and write users and roles.
 *
 * What must stay true: an insert that fails document by document (duplicate
 * _id, validation) is counted and reported and the restore goes on, unless
 * --stopOnError; a failure of the connection or the write concern stops the
 * namespace.  Users and roles are written by _id (replace, upsert), so a
 * restore never duplicates one; with --drop, those of the restored scope that
 * are not in the dump are removed.
 */
#include "restore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPORTED 5

int restore_parse_meta(rintent_t *it, const char *json, const char *origin)
{
    bson_error_t e;
    bson_destroy(it->meta);
    it->meta = NULL;
    if (json == NULL || json[0] == '\0') {
        it->meta = bson_new();
        return 0;
    }
    it->meta = bson_new_from_json((const uint8_t *)json, -1, &e);
    if (it->meta == NULL) {
        it->meta = bson_new();
        return tool_err("invalid metadata for %s.%s in %s: %s", it->db, it->coll, origin,
                        e.message);
    }
    return 0;
}

static bool meta_doc(const bson_t *meta, const char *key, bson_t *out)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, meta, key) ||
        !(BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)))
        return false;
    uint32_t len;
    const uint8_t *data;
    if (BSON_ITER_HOLDS_DOCUMENT(&it))
        bson_iter_document(&it, &len, &data);
    else
        bson_iter_array(&it, &len, &data);
    return bson_init_static(out, data, len);
}

static bool is_capped(const rintent_t *it)
{
    bson_t opts;
    bson_iter_t i;
    return meta_doc(it->meta, "options", &opts) && bson_iter_init_find(&i, &opts, "capped") &&
           bson_iter_as_bool(&i);
}

int restore_create(restore_t *r, rintent_t *it)
{
    bson_error_t e;
    bson_t reply;
    if (it->kind == RK_USERS || it->kind == RK_ROLES) {
        it->pending = bson_new();
        it->state = RS_PARTIAL;
        return 0;
    }
    if (r->o.drop) {
        bson_t cmd = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&cmd, "drop", it->tcoll);
        bool ok = mongoc_client_command_simple(r->c, it->tdb, &cmd, NULL, &reply, &e);
        bson_destroy(&cmd);
        bson_destroy(&reply);
        if (!ok && e.code != 26) { /* NamespaceNotFound: nothing to drop */
            it->state = RS_FAILED;
            return tool_err("dropping %s.%s: %s", it->tdb, it->tcoll, e.message);
        }
    }
    bson_t cmd = BSON_INITIALIZER, opts;
    BSON_APPEND_UTF8(&cmd, "create", it->tcoll);
    if (meta_doc(it->meta, "options", &opts)) {
        bson_iter_t i;
        bson_iter_init(&i, &opts);
        while (bson_iter_next(&i)) {
            const char *k = bson_iter_key(&i);
            bool view_key = strcmp(k, "viewOn") == 0 || strcmp(k, "pipeline") == 0;
            if (r->o.no_options && !view_key)
                continue;
            sbl_append_iter(&cmd, k, -1, &i);
        }
    }
    bool ok;
    bson_iter_t u;
    const char *hex = bson_iter_init_find(&u, it->meta, "uuid") && BSON_ITER_HOLDS_UTF8(&u)
                          ? bson_iter_utf8(&u, NULL)
                          : "";
    bool timeseries = bson_iter_init_find(&u, it->meta, "type") && BSON_ITER_HOLDS_UTF8(&u) &&
                      strcmp(bson_iter_utf8(&u, NULL), "timeseries") == 0;
    if (r->o.preserve_uuid && it->kind == RK_COLLECTION && !timeseries) {
        /* mongorestore's way: applyOps with the create and the dumped UUID (a time-series
           collection has none, as on mongod, where it is a view) */
        uint8_t uuid[16];
        bool good = strlen(hex) == 32;
        for (int i = 0; good && i < 16; i++) {
            unsigned v;
            good = sscanf(hex + 2 * i, "%2x", &v) == 1;
            uuid[i] = (uint8_t)v;
        }
        if (!good) {
            bson_destroy(&cmd);
            it->state = RS_FAILED;
            return tool_err("--preserveUUID: the metadata of %s.%s holds no UUID", it->db,
                            it->coll);
        }
        bson_t ao = BSON_INITIALIZER, arr, entry;
        char ns[400];
        snprintf(ns, sizeof(ns), "%s.$cmd", it->tdb);
        BSON_APPEND_ARRAY_BEGIN(&ao, "applyOps", &arr);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &entry);
        BSON_APPEND_UTF8(&entry, "op", "c");
        BSON_APPEND_UTF8(&entry, "ns", ns);
        BSON_APPEND_BINARY(&entry, "ui", BSON_SUBTYPE_UUID, uuid, 16);
        BSON_APPEND_DOCUMENT(&entry, "o", &cmd);
        bson_append_document_end(&arr, &entry);
        bson_append_array_end(&ao, &arr);
        ok = mongoc_client_command_simple(r->c, "admin", &ao, NULL, &reply, &e);
        bson_destroy(&ao);
    } else {
        ok = mongoc_client_command_simple(r->c, it->tdb, &cmd, NULL, &reply, &e);
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
    if (!ok && e.code == 48 && it->kind == RK_COLLECTION) {
        /* NamespaceExists: restore into the existing collection, as mongorestore does */
    } else if (!ok) {
        it->state = RS_FAILED;
        return tool_err("creating %s %s.%s: %s", it->kind == RK_VIEW ? "view" : "collection",
                        it->tdb, it->tcoll, e.message);
    }
    it->state = it->kind == RK_VIEW ? RS_DONE : RS_PARTIAL;
    return 0;
}

static tool_inserter_t *new_bulk(restore_t *r, rintent_t *it)
{
    bool ordered = r->o.keep_order || is_capped(it);
    snprintf(it->msg[0], sizeof(it->msg[0]), "continuing through error inserting into %s.%s",
             it->tdb, it->tcoll);
    snprintf(it->msg[1], sizeof(it->msg[1]),
             "stopping at the first failed insert into %s.%s (--stopOnError)", it->tdb, it->tcoll);
    snprintf(it->msg[2], sizeof(it->msg[2]), "inserting into %s.%s", it->tdb, it->tcoll);
    tool_insert_opts_t io = {
        .workers = ordered ? 1 : (r->o.workers > 0 ? (int)r->o.workers : 2),
        .batch_docs = r->o.batch,
        .ordered = ordered || r->o.stop_on_error,
        .bypass_validation = r->o.bypass_validation,
        .stop_on_error = r->o.stop_on_error,
        .wc = r->wc,
        .max_reported = MAX_REPORTED,
        .error_prefix = it->msg[0],
        .stop_prefix = it->msg[1],
        .fatal_prefix = it->msg[2],
    };
    return tool_inserter_new(&r->conn, it->tdb, it->tcoll, &io);
}

/* Wait for what was sent.  Per-document errors are counted (and, with --stopOnError,
   fatal); anything else fails the namespace. */
static int flush(restore_t *r, rintent_t *it)
{
    (void)r;
    if (it->bulk == NULL)
        return 0;
    int64_t ok = 0, failed = 0;
    int rc = tool_inserter_finish(it->bulk, &ok, &failed);
    it->bulk = NULL;
    it->docs += ok;
    it->failed += failed;
    if (rc != 0)
        it->state = RS_FAILED;
    return rc;
}

int restore_doc(restore_t *r, rintent_t *it, const bson_t *doc)
{
    it->bytes += doc->len;
    if (it->kind == RK_USERS || it->kind == RK_ROLES) {
        char k[16];
        const char *key;
        bson_uint32_to_string(it->n_pending++, &key, k, sizeof(k));
        BSON_APPEND_DOCUMENT(it->pending, key, doc);
        return 0;
    }
    if (it->bulk == NULL && (it->bulk = new_bulk(r, it)) == NULL) {
        it->state = RS_FAILED;
        return -1;
    }
    tool_progress_add(&it->progress, 1, doc->len);
    if (tool_inserter_add(it->bulk, doc) != 0) {
        it->state = RS_FAILED;
        return -1;
    }
    return 0;
}

static int build_indexes(restore_t *r, rintent_t *it)
{
    bson_t indexes, cmd = BSON_INITIALIZER, arr;
    if (!meta_doc(it->meta, "indexes", &indexes))
        return 0;
    BSON_APPEND_UTF8(&cmd, "createIndexes", it->tcoll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
    bson_iter_t i, f;
    uint32_t n = 0;
    bson_iter_init(&i, &indexes);
    while (bson_iter_next(&i)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&i) || !bson_iter_recurse(&i, &f) ||
            (bson_iter_find(&f, "name") && BSON_ITER_HOLDS_UTF8(&f) &&
             strcmp(bson_iter_utf8(&f, NULL), "_id_") == 0))
            continue; /* the server makes the _id index itself */
        bson_t ix;
        char k[16];
        const char *key;
        bson_uint32_to_string(n++, &key, k, sizeof(k));
        bson_append_document_begin(&arr, key, -1, &ix);
        bson_iter_recurse(&i, &f);
        while (bson_iter_next(&f))
            if (strcmp(bson_iter_key(&f), "ns") != 0)
                sbl_append_iter(&ix, bson_iter_key(&f), -1, &f);
        bson_append_document_end(&arr, &ix);
    }
    bson_append_array_end(&cmd, &arr);
    int rc = 0;
    if (n > 0) {
        bson_t reply;
        bson_error_t e;
        if (!mongoc_client_command_simple(r->c, it->tdb, &cmd, NULL, &reply, &e)) {
            it->state = RS_FAILED;
            rc = tool_err("building the indexes of %s.%s: %s", it->tdb, it->tcoll, e.message);
        }
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    return rc;
}

int restore_finish(restore_t *r, rintent_t *it)
{
    if (it->state == RS_FAILED)
        return -1;
    if (it->kind != RK_COLLECTION)
        return 0;
    if (flush(r, it) != 0)
        return -1;
    if (!r->o.no_index && build_indexes(r, it) != 0)
        return -1;
    it->state = RS_DONE;
    return 0;
}

int restore_users(restore_t *r, rintent_t *it)
{
    const char *which = it->kind == RK_USERS ? "system.users" : "system.roles";
    bool scoped = strcmp(it->coll, "system.users") != 0 && strcmp(it->coll, "system.roles") != 0;
    mongoc_collection_t *coll = mongoc_client_get_collection(r->c, "admin", which);
    bson_error_t e;
    bson_iter_t i;
    int rc = 0;
    bson_t ids = BSON_INITIALIZER;
    uint32_t n = 0;
    bson_iter_init(&i, it->pending);
    while (rc == 0 && bson_iter_next(&i)) {
        bson_t doc, sel = BSON_INITIALIZER, opts = BSON_INITIALIZER;
        uint32_t len;
        const uint8_t *data;
        bson_iter_t id;
        bson_iter_document(&i, &len, &data);
        bson_init_static(&doc, data, len);
        if (!bson_iter_init_find(&id, &doc, "_id")) {
            rc = tool_err("a document in %s.%s has no _id", it->db, it->coll);
            break;
        }
        char k[16];
        const char *key;
        bson_uint32_to_string(n++, &key, k, sizeof(k));
        sbl_append_iter(&ids, key, -1, &id);
        sbl_append_iter(&sel, "_id", -1, &id);
        BSON_APPEND_BOOL(&opts, "upsert", true);
        if (!mongoc_collection_replace_one(coll, &sel, &doc, &opts, NULL, &e))
            rc = tool_err("restoring %s %s: %s", it->kind == RK_USERS ? "user" : "role",
                          bson_iter_utf8(&id, NULL) ? bson_iter_utf8(&id, NULL) : "?",
                          e.message);
        bson_destroy(&sel);
        bson_destroy(&opts);
    }
    if (rc == 0 && r->o.drop) { /* remove those of the scope that the dump does not hold */
        bson_t filter = BSON_INITIALIZER, nin;
        if (scoped)
            BSON_APPEND_UTF8(&filter, "db", it->db);
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &nin);
        BSON_APPEND_ARRAY(&nin, "$nin", &ids);
        bson_append_document_end(&filter, &nin);
        if (!mongoc_collection_delete_many(coll, &filter, NULL, NULL, &e))
            rc = tool_err("--drop: removing %s not in the dump: %s", which, e.message);
        bson_destroy(&filter);
    }
    bson_destroy(&ids);
    mongoc_collection_destroy(coll);
    it->docs = rc == 0 ? n : 0;
    it->state = rc == 0 ? RS_DONE : RS_FAILED;
    return rc;
}
