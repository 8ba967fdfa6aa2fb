/*
 * crud_util.c: helpers shared by the CRUD commands: MongoDB-worded argument
 * errors, the unknown-field check, hint validation, write-conflict backoff
 * and the preparation of client documents before they are stored.
 *
 * What must stay true: a document leaving sbl_crud_prepare_doc() has _id as
 * its first field and is at most 16 MiB, so the storage layer can rely on it.
 */
#include "cmd/crud_int.h"
#include "doc/doc.h"

#include <stdio.h>
#include <string.h>
#include <time.h>


/* Fields any command may carry (sessions, transactions, API version, write/read concern). */
static const char *const generic_fields[] = {
    "lsid", "txnNumber", "autocommit", "startTransaction", "writeConcern", "readConcern",
    "apiVersion", "apiStrict", "apiDeprecationErrors", "comment", "maxTimeMS",
    "maxTimeMSOpOnly", "clientOperationKey", "mayBypassWriteBlocking", "shardVersion",
    "databaseVersion", "help", "readPreference", NULL};

/* Every command checks every argument: compare the first byte before
 * calling strcmp (most names differ there). */
static bool in_list(const char *k, const char *const *list)
{
    for (; *list != NULL; list++)
        if ((*list)[0] == k[0] && strcmp(k, *list) == 0)
            return true;
    return false;
}

/* A standalone has no snapshots to read at: readConcern {level: "snapshot"}
 * fails as on a standalone mongod (NotAReplicaSet 123). */
static int check_read_concern(const bson_iter_t *rc, sbl_err_t *err)
{
    bson_iter_t it;
    if (BSON_ITER_HOLDS_DOCUMENT(rc) && bson_iter_recurse(rc, &it) &&
        bson_iter_find(&it, "level") && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), "snapshot") == 0)
        return sbl_err_set(err, SBL_E_NotAReplicaSet,
                           "node needs to be a replica set member to use readConcern: snapshot");
    return 0;
}

int sbl_crud_check_fields(const bson_t *cmd, const char *req, const char *const *known,
                          sbl_err_t *err)
{
    bson_iter_t it;
    uint32_t off = 4, at;
    const char *k;
    bool bad, first = true;
    /* Keys alone (a request's command passed sbl_bson_check); libbson's walk
     * for a document that cannot be read that way. */
    while (sbl_doc_top_next(cmd, &off, &at, &k, &bad)) {
        if (first || k[0] == '$' || in_list(k, known) || in_list(k, generic_fields)) {
            first = false;
            if (k[0] == 'r' && strcmp(k, "readConcern") == 0 && sbl_doc_top_iter(cmd, at, k, &it))
                SBL_RET(check_read_concern(&it, err));
            continue;
        }
        return sbl_err_set(err, SBL_E_UnknownField, "BSON field '%s.%s' is an unknown field.", req,
                           k);
    }
    if (!bad)
        return 0;
    if (!bson_iter_init(&it, cmd))
        return sbl_err_set(err, SBL_E_InvalidBSON, "invalid command document");
    first = true;
    while (bson_iter_next(&it)) {
        k = bson_iter_key(&it);
        if (first || k[0] == '$' || in_list(k, known) || in_list(k, generic_fields)) {
            first = false;
            if (k[0] == 'r' && strcmp(k, "readConcern") == 0)
                SBL_RET(check_read_concern(&it, err));
            continue;
        }
        return sbl_err_set(err, SBL_E_UnknownField, "BSON field '%s.%s' is an unknown field.", req,
                           k);
    }
    return 0;
}

bool sbl_crud_filter_id_point(const bson_t *filter, bson_value_t *idp)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, filter) || !bson_iter_next(&it) || strcmp(bson_iter_key(&it), "_id") != 0)
        return false;
    switch (bson_iter_type(&it)) {
    case BSON_TYPE_UTF8:
    case BSON_TYPE_OID:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DATE_TIME:
        break;
    default:
        return false;
    }
    sbl_iter_value(&it, idp);
    return !bson_iter_next(&it);
}

int sbl_crud_type_error(sbl_err_t *err, const char *field, const bson_iter_t *it,
                        const char *expected)
{
    return sbl_err_set(err, SBL_E_TypeMismatch,
                       "BSON field '%s' is the wrong type '%s', expected type '%s'", field,
                       sbl_type_name(bson_iter_type(it)), expected);
}

int sbl_crud_get_hint(const bson_iter_t *it, bson_value_t *out, bool *hasp, sbl_err_t *err)
{
    if (!BSON_ITER_HOLDS_UTF8(it) && !BSON_ITER_HOLDS_DOCUMENT(it))
        return sbl_crud_type_error(err, "hint", it, "string or object");
    sbl_iter_value(it, out);
    *hasp = true;
    return 0;
}

int sbl_crud_check_hint(const bson_iter_t *it, sbl_err_t *err)
{
    if (BSON_ITER_HOLDS_UTF8(it)) {
        const char *name = bson_iter_utf8(it, NULL);
        if (strcmp(name, "_id_") == 0)
            return 0;
    } else if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_t spec;
        uint32_t len;
        const uint8_t *data;
        bson_iter_t f;
        bson_iter_document(it, &len, &data);
        if (!bson_init_static(&spec, data, len))
            return sbl_err_set(err, SBL_E_InvalidBSON, "invalid hint");
        if (bson_empty(&spec))
            return 0;
        if (bson_count_keys(&spec) == 1 && bson_iter_init(&f, &spec) && bson_iter_next(&f)) {
            const char *k = bson_iter_key(&f);
            if (strcmp(k, "$natural") == 0)
                return 0;
            if (strcmp(k, "_id") == 0 && (BSON_ITER_HOLDS_NUMBER(&f)))
                return 0;
        }
    } else {
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "hint must be a string or an object");
    }
    return sbl_err_set(err, SBL_E_BadValue,
                       "error processing query: planner returned error :: caused by :: hint "
                       "provided does not correspond to an existing index");
}

void sbl_crud_backoff(int attempt)
{
    if (attempt == 0)
        return;
    long us = attempt < 10 ? 100L * attempt : attempt < 50 ? 1000L : 10000L;
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

const char *sbl_crud_key(uint32_t i, char buf[16])
{
    const char *k;
    bson_uint32_to_string(i, &k, buf, 16);
    return k;
}

/* Check an _id value as MongoDB does before an insert. */
static int check_id(const bson_iter_t *it, sbl_err_t *err)
{
    switch (bson_iter_type(it)) {
    case BSON_TYPE_ARRAY:
        return sbl_err_set(err, SBL_E_InvalidIdField, "The '_id' value cannot be of type array");
    case BSON_TYPE_REGEX:
        return sbl_err_set(err, SBL_E_InvalidIdField, "can't use a regex for _id");
    case BSON_TYPE_UNDEFINED:
        return sbl_err_set(err, SBL_E_InvalidIdField, "can't use a undefined for _id");
    case BSON_TYPE_DOCUMENT: {
        /* {$foo: ...} as _id would be read back as an operator expression. */
        bson_iter_t sub;
        if (bson_iter_recurse(it, &sub) && bson_iter_next(&sub) && bson_iter_key(&sub)[0] == '$')
            return sbl_err_set(err, SBL_E_DollarPrefixedFieldName,
                               "_id fields may not contain '$'-prefixed fields: %s is not valid "
                               "for storage.",
                               bson_iter_key(&sub));
        return 0;
    }
    default:
        return 0;
    }
}

/* MongoDB stores documents nested at most 100 levels deep. */
#define SBL_STORED_MAX_DEPTH 100

int sbl_crud_prepare_doc(const bson_t *in, bson_t *out, sbl_err_t *err)
{
    bson_iter_t it;
    bool has_id = false, id_first = false, first = true, deep;
    int rc, nid;

    /* Other top-level '$' names are stored as data (MongoDB 5.0+). */
    if (sbl_doc_scan_ids(in, SBL_STORED_MAX_DEPTH, &it, &nid, &id_first, &deep)) {
        has_id = nid > 0;
        if (has_id && (rc = check_id(&it, err)) != 0)
            return rc;
        if (nid > 1)
            return sbl_err_set(err, SBL_E_BadValue, "can't have multiple _id fields in one document");
    } else { /* a document that walk cannot read: libbson decides */
        if (!bson_iter_init(&it, in))
            return sbl_err_set(err, SBL_E_InvalidBSON, "invalid document");
        while (bson_iter_next(&it)) {
            if (strcmp(bson_iter_key(&it), "_id") == 0) {
                if (has_id)
                    return sbl_err_set(err, SBL_E_BadValue,
                                       "can't have multiple _id fields in one document");
                has_id = true;
                id_first = first;
                if ((rc = check_id(&it, err)) != 0)
                    return rc;
            }
            first = false;
        }
        deep = sbl_doc_too_deep(in, SBL_STORED_MAX_DEPTH);
    }
    if (deep)
        return sbl_err_set(err, SBL_E_Overflow,
                           "Document exceeds maximum nesting depth of %d", SBL_STORED_MAX_DEPTH);
    size_t size = in->len + (has_id ? 0 : 17);
    if (size > SBL_BSON_MAX_SIZE)
        return sbl_err_set(err, SBL_E_BSONObjectTooLarge,
                           "object to insert too large. size in bytes: %zu, max size: %d", size,
                           SBL_BSON_MAX_SIZE);
    if (has_id && id_first) {
        bson_copy_to(in, out);
        return 0;
    }
    bson_init(out);
    if (has_id) {
        bson_iter_init_find(&it, in, "_id");
        bson_append_iter(out, "_id", 3, &it);
    } else {
        bson_oid_t oid;
        bson_oid_init(&oid, NULL);
        bson_append_oid(out, "_id", 3, &oid);
    }
    bson_iter_init(&it, in);
    while (bson_iter_next(&it))
        if (strcmp(bson_iter_key(&it), "_id") != 0)
            bson_append_iter(out, bson_iter_key(&it), -1, &it);
    return 0;
}

void sbl_crud_add_write_error(bson_t *arr, uint32_t *countp, int64_t index, const sbl_err_t *e,
                              const bson_t *info)
{
    char key[16];
    bson_t we;
    bson_append_document_begin(arr, sbl_crud_key((*countp)++, key), -1, &we);
    bson_append_int32(&we, "index", -1, (int32_t)index);
    bson_append_int32(&we, "code", -1, e->code);
    bson_append_utf8(&we, "errmsg", -1, e->msg, -1);
    if (info != NULL && !bson_empty(info))
        bson_concat(&we, info);
    bson_append_document_end(arr, &we);
}
