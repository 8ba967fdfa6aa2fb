/*
 * doc_prepare.c: a client's document made ready for storage: _id first (an
 * ObjectId generated when missing), a valid _id, at most 16 MiB and 100
 * levels deep.  Inserts and the aggregation stages that write ($out,
 * $merge) both go through it.
 *
 * What must stay true: a document leaving sbl_doc_prepare_insert() has _id as
 * its first field and is at most 16 MiB, so the storage layer can rely on it.
 */
#include <string.h>

#include "doc/doc.h"

/* MongoDB stores documents nested at most 100 levels deep. */
#define SBL_STORED_MAX_DEPTH 100

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

int sbl_doc_prepare_insert(const bson_t *in, bson_t *out, sbl_err_t *err)
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
        sbl_append_iter(out, "_id", 3, &it);
    } else {
        bson_oid_t oid;
        bson_oid_init(&oid, NULL);
        bson_append_oid(out, "_id", 3, &oid);
    }
    bson_iter_init(&it, in);
    while (bson_iter_next(&it))
        if (strcmp(bson_iter_key(&it), "_id") != 0)
            sbl_append_iter(out, bson_iter_key(&it), -1, &it);
    return 0;
}

