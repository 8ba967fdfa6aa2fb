/*
 * validate.c: the validate command ({validate: "<coll>", full: <bool>}).
 * Walks every document of a collection in one snapshot and checks that it
 * is well-formed BSON with _id as its first field, that the documents come
 * back in strictly ascending _id order (the table's key encoding agrees
 * with the documents) and that a point lookup by each _id finds the very
 * same bytes, and that the count and data size agree with sbl_coll_stats.
 * The reply has MongoDB's shape; problems go into errors (valid: false),
 * never into a command failure.  validate only reads: repaired is false.
 * Secondary indexes: every entry must point (by its encoded _id) at a
 * document that exists, a unique index holds no key twice, and an index
 * that is neither sparse, partial nor multikey holds exactly one entry per
 * document.  (Whether each document's own keys are present is not checked:
 * key generation is private to storage.)
 */
#include "cmd/cmd_int.h"
#include "doc/doc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define VALIDATE_MAX_MESSAGES 20

typedef struct vstate {
    bson_t errors, warnings; /* arrays being built */
    uint32_t nerrors, nwarnings;
    int64_t nrecords, ninvalid, data_size;
} vstate_t;

static void add_msg(bson_t *arr, uint32_t *n, const char *msg)
{
    char key[16];
    const char *k;
    /* Keep the reply small when a collection is badly damaged. */
    if (*n == VALIDATE_MAX_MESSAGES) {
        msg = "further problems of this kind were not listed";
    } else if (*n > VALIDATE_MAX_MESSAGES) {
        (*n)++;
        return;
    }
    bson_uint32_to_string(*n, &k, key, sizeof(key));
    bson_append_utf8(arr, k, -1, msg, -1);
    (*n)++;
}

static void add_error(vstate_t *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_error(vstate_t *v, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    add_msg(&v->errors, &v->nerrors, msg);
}

/* Check one document as the scan returned it; prev_id holds the previous
 * document's _id (type 0 when this is the first). */
static int check_doc(sbl_opctx_t *ctx, sbl_coll_t *c, vstate_t *v, const bson_t *doc,
                     bson_value_t *prev_id, sbl_err_t *err)
{
    sbl_err_t verr;
    bson_iter_t it;
    bson_value_t id;
    bool ok = true;

    v->nrecords++;
    v->data_size += doc->len;
    if (sbl_doc_validate(bson_get_data(doc), doc->len, &verr) != 0) {
        add_error(v, "record %lld is not a valid document: %s", (long long)v->nrecords, verr.msg);
        v->ninvalid++;
        return 0;
    }
    if (!bson_iter_init(&it, doc) || !bson_iter_next(&it) ||
        strcmp(bson_iter_key(&it), "_id") != 0) {
        add_error(v, "record %lld does not have _id as its first field", (long long)v->nrecords);
        v->ninvalid++;
        return 0;
    }
    sbl_iter_value(&it, &id);
    /* a time-series collection's measurements may share an _id (sbl_coll_dup_ids) */
    bool dup = sbl_coll_dup_ids(c);
    if (prev_id->value_type != 0 && sbl_value_compare(prev_id, &id) >= (dup ? 1 : 0)) {
        add_error(v, "record %lld is out of _id order: its key does not match its _id",
                  (long long)v->nrecords);
        ok = false;
    }
    {
        /* The stored key must be the encoding of this _id: looking it up finds these bytes. */
        bson_t found;
        bool exists = false;
        if (dup)
            SBL_RET(sbl_coll_get_same(ctx->ss, c, doc, &found, &exists, err));
        else
            SBL_RET(sbl_coll_get(ctx->ss, c, &id, &found, &exists, err));
        if (!exists) {
            add_error(v, "record %lld: no record is found under the key of its _id",
                      (long long)v->nrecords);
            ok = false;
        } else {
            if (found.len != doc->len ||
                memcmp(bson_get_data(&found), bson_get_data(doc), doc->len) != 0) {
                add_error(v, "record %lld differs from the record found under its _id key",
                          (long long)v->nrecords);
                ok = false;
            }
            bson_destroy(&found);
        }
    }
    if (!ok)
        v->ninvalid++;
    if (prev_id->value_type != 0)
        bson_value_destroy(prev_id);
    bson_value_copy(&id, prev_id);
    return 0;
}

/* Check one secondary index against the collection; appends its entry count
 * to keys and its verdict to details. */
static int check_index(sbl_opctx_t *ctx, sbl_coll_t *c, sbl_index_t *ix, vstate_t *v,
                       bson_t *keys, bson_t *details, sbl_err_t *err)
{
    sbl_iscan_t *scan = NULL;
    sbl_buf_t prev;
    int64_t n = 0;
    uint32_t errors_before = v->nerrors;
    const char *name = sbl_index_name(ix);
    bool unique = sbl_index_unique(ix), have_prev = false;
    int rc;

    sbl_buf_init(&prev);
    SBL_ERR(sbl_iscan_open(ctx->ss, ix, NULL, 0, NULL, 0, false, &scan, err));
    for (;;) {
        const uint8_t *key, *idk;
        size_t klen, idlen;
        bool done = false, found = false;
        bson_t doc;
        SBL_ERR(sbl_iscan_next(scan, &key, &klen, &idk, &idlen, &done, err));
        if (done)
            break;
        n++;
        if (unique && have_prev && prev.len == klen && memcmp(prev.data, key, klen) == 0)
            add_error(v, "index %s is unique but holds a key twice", name);
        sbl_buf_reset(&prev);
        sbl_buf_append(&prev, key, klen);
        have_prev = true;
        SBL_ERR(sbl_coll_get_by_key(ctx->ss, c, idk, idlen, &doc, &found, err));
        if (found)
            bson_destroy(&doc);
        else
            add_error(v, "index %s has an entry for a document that does not exist", name);
        if ((n & 1023) == 0)
            SBL_ERR(sbl_op_check_deadline(ctx, err));
    }
    if (!sbl_index_sparse(ix) && sbl_index_partial(ix) == NULL && !sbl_index_multikey(ix) &&
        n != v->nrecords)
        add_error(v, "index %s has %lld entries for %lld documents", name, (long long)n,
                  (long long)v->nrecords);
    BSON_APPEND_INT64(keys, name, n);
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(details, name, &d);
    BSON_APPEND_BOOL(&d, "valid", v->nerrors == errors_before);
    bson_append_document_end(details, &d);
    rc = 0;
err:
    if (scan != NULL)
        sbl_iscan_close(scan);
    sbl_buf_destroy(&prev);
    return rc;
}

static int scan_all(sbl_opctx_t *ctx, sbl_coll_t *c, vstate_t *v, sbl_err_t *err)
{
    sbl_scan_t *scan = NULL;
    bson_value_t prev = {0};
    int rc;

    SBL_ERR(sbl_scan_open(ctx->ss, c, NULL, false, &scan, err));
    for (;;) {
        bson_t doc;
        bool done = false;
        SBL_ERR(sbl_scan_next(scan, &doc, &done, err));
        if (done)
            break;
        SBL_ERR(check_doc(ctx, c, v, &doc, &prev, err));
        if ((v->nrecords & 1023) == 0)
            SBL_ERR(sbl_op_check_deadline(ctx, err));
    }
err:
    if (scan != NULL)
        sbl_scan_close(scan);
    if (prev.value_type != 0)
        bson_value_destroy(&prev);
    return rc;
}

int sbl_cmd_validate(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[256];
    sbl_coll_t *c = NULL;
    sbl_coll_stats_t before, after;
    vstate_t v = {0};
    bson_t keys = BSON_INITIALIZER, details = BSON_INITIALIZER, d;
    sbl_index_t **ix = NULL;
    size_t nix = 0;
    bool in_txn = false;
    int rc;

    /* full: accepted; every check below is already the full one. */
    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    rc = sbl_coll_open(ctx->ss, ns, false, &c, NULL, err);
    if (rc == SBL_E_NamespaceNotFound)
        return sbl_err_set(err, SBL_E_NamespaceNotFound,
                           "Collection '%s' does not exist to validate.", ns);
    SBL_RET(rc);

    bson_init(&v.errors);
    bson_init(&v.warnings);
    SBL_ERR(sbl_coll_stats(ctx->ss, c, &before, err));
    /* One snapshot for the scan and the point lookups. */
    SBL_ERR(sbl_txn_begin(ctx->ss, err));
    in_txn = true;
    SBL_ERR(scan_all(ctx, c, &v, err));
    BSON_APPEND_INT64(&keys, "_id_", v.nrecords);
    BSON_APPEND_DOCUMENT_BEGIN(&details, "_id_", &d);
    BSON_APPEND_BOOL(&d, "valid", v.nerrors == 0);
    bson_append_document_end(&details, &d);
    sbl_index_list(c, false, &ix, &nix);
    for (size_t i = 0; i < nix; i++)
        SBL_ERR(check_index(ctx, c, ix[i], &v, &keys, &details, err));
    sbl_txn_abort(ctx->ss);
    in_txn = false;
    SBL_ERR(sbl_coll_stats(ctx->ss, c, &after, err));

    if (before.count != after.count || before.data_size != after.data_size) {
        add_msg(&v.warnings, &v.nwarnings,
                "the collection changed while it was validated; counts were not compared");
    } else {
        if (after.count != v.nrecords)
            add_error(&v, "collection count %lld does not match the %lld records found",
                      (long long)after.count, (long long)v.nrecords);
        if (after.data_size != v.data_size)
            add_error(&v, "collection data size %lld does not match the %lld bytes found",
                      (long long)after.data_size, (long long)v.data_size);
    }

    bson_t *r = ctx->reply;
    BSON_APPEND_UTF8(r, "ns", ns);
    BSON_APPEND_INT64(r, "nInvalidDocuments", v.ninvalid);
    BSON_APPEND_INT64(r, "nNonCompliantDocuments", 0);
    BSON_APPEND_INT64(r, "nrecords", v.nrecords);
    BSON_APPEND_INT32(r, "nIndexes", (int32_t)(1 + nix));
    BSON_APPEND_DOCUMENT(r, "keysPerIndex", &keys);
    BSON_APPEND_DOCUMENT(r, "indexDetails", &details);
    BSON_APPEND_BOOL(r, "valid", v.nerrors == 0);
    BSON_APPEND_BOOL(r, "repaired", false);
    BSON_APPEND_ARRAY(r, "warnings", &v.warnings);
    BSON_APPEND_ARRAY(r, "errors", &v.errors);
    BSON_APPEND_ARRAY_BEGIN(r, "extraIndexEntries", &d);
    bson_append_array_end(r, &d);
    BSON_APPEND_ARRAY_BEGIN(r, "missingIndexEntries", &d);
    bson_append_array_end(r, &d);
    rc = 0;
err:
    if (in_txn)
        sbl_txn_abort(ctx->ss);
    bson_destroy(&v.errors);
    bson_destroy(&v.warnings);
    bson_destroy(&keys);
    bson_destroy(&details);
    if (ix != NULL)
        sbl_index_list_free(ix, nix);
    sbl_coll_release(c);
    return rc;
}
