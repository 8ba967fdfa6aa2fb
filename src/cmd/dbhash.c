/*
 * dbhash.c: the dbHash command ({dbHash: 1, collections: [names]}), as
 * mongod answers it: an MD5 per collection over its documents' BSON bytes
 * in _id order, and one MD5 over those per-collection hex digests in name
 * order.  Replica-set tests compare it across members after healing.
 *
 * Must stay true: every collection is hashed in one WiredTiger snapshot (one
 * read transaction, aborted at the end), so a member that is applying
 * writes still gives a hash of one consistent state; two members with the
 * same documents give the same digests whatever order they were written in.
 * Skipped as mongod skips them: system.profile, and in `local` the oplog and
 * the replication state collections (they differ per member by design).
 */
#include "cmd/cmd_int.h"
#include "doc/doc.h"
#include "server/server.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct hash_list {
    char **names;          /* full namespaces, in catalog (name) order */
    uint8_t (*uuids)[16];
    size_t n, cap;
    const char *db;
} hash_list_t;

/* Collections dbHash leaves out: they differ between members by design. */
static bool skipped(const char *db, const char *coll)
{
    if (strcmp(coll, "system.profile") == 0)
        return true;
    return strcmp(db, "local") == 0 &&
           (strcmp(coll, "oplog.rs") == 0 || strncmp(coll, "replset.", 8) == 0 ||
            strncmp(coll, "system.", 7) == 0 || strcmp(coll, "startup_log") == 0);
}

static bool collect(const char *ns, const bson_t *options, const uint8_t *uuid, void *arg)
{
    hash_list_t *l = arg;
    const char *coll = strchr(ns, '.');
    (void)options;
    if (coll == NULL || skipped(l->db, coll + 1))
        return true;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **names = realloc(l->names, cap * sizeof(char *));
        if (names == NULL)
            return false;
        l->names = names;
        uint8_t(*uuids)[16] = realloc(l->uuids, cap * 16);
        if (uuids == NULL)
            return false;
        l->uuids = uuids;
        l->cap = cap;
    }
    l->names[l->n] = bson_strdup(ns);
    memcpy(l->uuids[l->n], uuid, 16);
    l->n++;
    return true;
}

static void hex(const uint8_t *d, unsigned len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < len; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[2 * len] = '\0';
}

/* True when the command's collections array names coll (or there is none). */
static bool wanted(const bson_t *cmd, const char *coll)
{
    bson_iter_t it, a;
    if (!bson_iter_init_find(&it, cmd, "collections") || !BSON_ITER_HOLDS_ARRAY(&it))
        return true;
    bson_iter_recurse(&it, &a);
    while (bson_iter_next(&a))
        if (BSON_ITER_HOLDS_UTF8(&a) && strcmp(bson_iter_utf8(&a, NULL), coll) == 0)
            return true;
    return false;
}

/* MD5 of c's documents in _id order, as 32 hex digits in out. */
static int hash_coll(sbl_opctx_t *ctx, sbl_coll_t *c, char out[33], sbl_err_t *err)
{
    sbl_scan_t *scan = NULL;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    uint8_t d[EVP_MAX_MD_SIZE];
    unsigned dlen = 0;
    int rc = 0;

    if (md == NULL || !EVP_DigestInit_ex(md, EVP_md5(), NULL)) {
        rc = sbl_err_set(err, SBL_E_InternalError, "dbHash: cannot start an MD5 digest");
        goto err;
    }
    SBL_ERR(sbl_scan_open(ctx->ss, c, NULL, false, &scan, err));
    for (;;) {
        bson_t doc;
        bool done = false;
        SBL_ERR(sbl_op_check_interrupt(ctx, err));
        SBL_ERR(sbl_scan_next(scan, &doc, &done, err));
        if (done)
            break;
        EVP_DigestUpdate(md, bson_get_data(&doc), doc.len);
        bson_destroy(&doc);
    }
    EVP_DigestFinal_ex(md, d, &dlen);
    hex(d, dlen, out);
err:
    if (scan != NULL)
        sbl_scan_close(scan);
    EVP_MD_CTX_free(md);
    return rc;
}

int sbl_cmd_db_hash(sbl_opctx_t *ctx, sbl_err_t *err)
{
    hash_list_t l = {0};
    bson_t colls = BSON_INITIALIZER, capped = BSON_INITIALIZER, uuids = BSON_INITIALIZER;
    EVP_MD_CTX *all = NULL;
    struct timespec t0, t1;
    bool in_txn = false;
    uint32_t ncapped = 0;
    int rc = 0;
    bson_iter_t it;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    SBL_RET(sbl_validate_db_name(ctx->db, err));
    if (bson_iter_init_find(&it, ctx->cmd, "collections") && !BSON_ITER_HOLDS_ARRAY(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field 'dbHash.collections' is the wrong type '%s', expected "
                           "type 'array'", sbl_type_name(bson_iter_type(&it)));
    l.db = ctx->db;
    sbl_catalog_list(ctx->db, collect, &l);
    all = EVP_MD_CTX_new();
    if (all == NULL || !EVP_DigestInit_ex(all, EVP_md5(), NULL)) {
        rc = sbl_err_set(err, SBL_E_InternalError, "dbHash: cannot start an MD5 digest");
        goto err;
    }
    SBL_ERR(sbl_txn_begin(ctx->ss, err));
    in_txn = true;
    for (size_t i = 0; i < l.n; i++) {
        const char *coll = strchr(l.names[i], '.') + 1;
        sbl_coll_t *c = NULL;
        char digest[33];
        if (!wanted(ctx->cmd, coll))
            continue;
        rc = sbl_coll_open(ctx->ss, l.names[i], false, &c, NULL, err);
        if (rc == SBL_E_NamespaceNotFound) { /* dropped since it was listed */
            rc = 0;
            continue;
        }
        SBL_ERR(rc);
        rc = hash_coll(ctx, c, digest, err);
        if (rc == 0 && sbl_coll_capped(c, NULL, NULL)) {
            char key[16];
            const char *k;
            bson_uint32_to_string(ncapped++, &k, key, sizeof(key));
            bson_append_utf8(&capped, k, -1, coll, -1);
        }
        sbl_coll_release(c);
        SBL_ERR(rc);
        BSON_APPEND_UTF8(&colls, coll, digest);
        BSON_APPEND_BINARY(&uuids, coll, BSON_SUBTYPE_UUID, l.uuids[i], 16);
        EVP_DigestUpdate(all, digest, 32);
    }
    sbl_txn_abort(ctx->ss);
    in_txn = false;

    uint8_t d[EVP_MAX_MD_SIZE];
    unsigned dlen = 0;
    char md5[2 * EVP_MAX_MD_SIZE + 1];
    EVP_DigestFinal_ex(all, d, &dlen);
    hex(d, dlen, md5);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    BSON_APPEND_UTF8(ctx->reply, "host", sbl_server_host());
    BSON_APPEND_DOCUMENT(ctx->reply, "collections", &colls);
    BSON_APPEND_ARRAY(ctx->reply, "capped", &capped);
    BSON_APPEND_DOCUMENT(ctx->reply, "uuids", &uuids);
    BSON_APPEND_UTF8(ctx->reply, "md5", md5);
    BSON_APPEND_INT64(ctx->reply, "timeMillis",
                      (int64_t)(t1.tv_sec - t0.tv_sec) * 1000 +
                          (t1.tv_nsec - t0.tv_nsec) / 1000000);
err:
    if (in_txn)
        sbl_txn_abort(ctx->ss);
    EVP_MD_CTX_free(all);
    for (size_t i = 0; i < l.n; i++)
        bson_free(l.names[i]);
    free(l.names);
    free(l.uuids);
    bson_destroy(&colls);
    bson_destroy(&capped);
    bson_destroy(&uuids);
    return rc;
}
