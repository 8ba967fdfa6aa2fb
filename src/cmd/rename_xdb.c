/*
 * rename_xdb.c: renameCollection to another database, as mongod 7.0 does it: a
 * copy, not a catalog move.  The source's documents and indexes go into a new
 * collection <to db>.tmpXXXXX.renameCollection (a new UUID), which is renamed
 * over the target within its database; then the source is dropped.  So the
 * target has a UUID of its own, and the oplog (and what change streams and
 * secondaries see) has mongod's entries: create, createIndexes, the inserts into
 * the temporary collection, renameCollection (temporary -> target, dropTarget as
 * asked) and drop of the source.  A failed copy drops the temporary collection
 * and leaves source and target as they were.  Not atomic, as mongod's is not:
 * writes to the source while the copy runs may be lost with it.
 */
#include "cmd/cmd_int.h"
#include "doc/doc.h"
#include "exec/exec.h"

#include <stdio.h>
#include <string.h>

#define COPY_BATCH_BYTES (8 * 1024 * 1024)
#define COPY_BATCH_DOCS 1000

/* Run {cmd} on db internally; 0 or its error (ok: 0 or its first write error). */
static int run(const char *db, bson_t *cmd, sbl_err_t *err)
{
    bson_t reply;
    int rc = sbl_cmd_run_checked(db, cmd, &reply, err);
    bson_destroy(&reply);
    bson_destroy(cmd);
    return rc;
}

/* createIndexes on db.coll with every index of src but _id's. */
static int copy_indexes(sbl_coll_t *src, const char *db, const char *coll, sbl_err_t *err)
{
    sbl_index_t **ixs = NULL;
    size_t nix = 0;
    char kb[16];
    sbl_index_list(src, false, &ixs, &nix);
    if (nix == 0) {
        sbl_index_list_free(ixs, nix);
        return 0;
    }
    bson_t cmd = BSON_INITIALIZER, arr;
    BSON_APPEND_UTF8(&cmd, "createIndexes", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
    for (size_t i = 0; i < nix; i++)
        bson_append_document(&arr, sbl_array_key((uint32_t)i, kb), -1, sbl_index_spec(ixs[i]));
    bson_append_array_end(&cmd, &arr);
    sbl_index_list_free(ixs, nix);
    return run(db, &cmd, err);
}

/* Insert docs (an array of n) into db.coll, unvalidated (they were valid there). */
static int insert_batch(const char *db, const char *coll, const bson_t *docs, uint32_t n,
                        sbl_err_t *err)
{
    if (n == 0)
        return 0;
    bson_t cmd = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "insert", coll);
    BSON_APPEND_ARRAY(&cmd, "documents", docs);
    BSON_APPEND_BOOL(&cmd, "bypassDocumentValidation", true);
    return run(db, &cmd, err);
}

/* Every document of from (natural order) into db.coll, in batches. */
static int copy_documents(sbl_opctx_t *ctx, const char *from, const char *db, const char *coll,
                          sbl_err_t *err)
{
    sbl_qexec_t *q = NULL;
    sbl_qexec_opts_t qo = {0};
    bson_t batch = BSON_INITIALIZER;
    uint32_t n = 0;
    char kb[16];
    int rc = sbl_qexec_new(from, &qo, &q, err);
    while (rc == 0) {
        bson_t doc;
        bool end = false;
        if ((rc = sbl_qexec_next(q, ctx, &doc, NULL, &end, err)) != 0 || end)
            break;
        if (n > 0 && (n == COPY_BATCH_DOCS || batch.len + doc.len > COPY_BATCH_BYTES)) {
            rc = insert_batch(db, coll, &batch, n, err);
            bson_reinit(&batch);
            n = 0;
        }
        if (rc == 0)
            bson_append_document(&batch, sbl_array_key(n++, kb), -1, &doc);
        bson_destroy(&doc);
    }
    if (rc == 0)
        rc = insert_batch(db, coll, &batch, n, err);
    bson_destroy(&batch);
    sbl_qexec_free(q);
    return rc;
}

int sbl_cmd_rename_across_dbs(sbl_opctx_t *ctx, sbl_coll_t *src, const char *from,
                              const char *to, bool drop_target, sbl_err_t *err)
{
    char tdb[SBL_NS_MAX], fdb[SBL_NS_MAX], tmp[SBL_NS_MAX];
    const char *tcoll = strchr(to, '.') + 1, *fcoll = strchr(from, '.') + 1;
    snprintf(tdb, sizeof(tdb), "%.*s", (int)(tcoll - 1 - to), to);
    snprintf(fdb, sizeof(fdb), "%.*s", (int)(fcoll - 1 - from), from);
    sbl_coll_t *t = NULL;
    if (sbl_coll_open(ctx->ss, to, false, &t, NULL, NULL) == 0) {
        sbl_coll_release(t);
        if (!drop_target)
            return sbl_err_set(err, SBL_E_NamespaceExists, "target namespace exists");
    }
    /* mongod's temporary name: tmp, five random letters or digits, .renameCollection */
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t r = (uint64_t)sbl_now_us() * 0x9E3779B97F4A7C15ull;
    char rnd[6];
    for (int i = 0; i < 5; i++, r /= 62)
        rnd[i] = alnum[r % 62];
    rnd[5] = '\0';
    int n = snprintf(tmp, sizeof(tmp), "%s.tmp%s.renameCollection", tdb, rnd);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Fully qualified namespace is too long");
    const char *tmpcoll = tmp + strlen(tdb) + 1;

    SBL_RET(sbl_coll_create(ctx->ss, tmp, sbl_coll_options(src), err));
    sbl_op_coll_created(ctx, tmp); /* its create entry, with the new UUID */
    int rc = copy_indexes(src, tdb, tmpcoll, err);
    if (rc == 0)
        rc = copy_documents(ctx, from, tdb, tmpcoll, err);
    if (rc == 0) {
        bson_t cmd = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&cmd, "renameCollection", tmp);
        BSON_APPEND_UTF8(&cmd, "to", to);
        BSON_APPEND_BOOL(&cmd, "dropTarget", drop_target);
        rc = run("admin", &cmd, err);
    }
    if (rc != 0) { /* no half-made copy stays behind */
        sbl_err_t ignored = {0};
        bson_t cmd = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&cmd, "drop", tmpcoll);
        run(tdb, &cmd, &ignored);
        return rc;
    }
    bson_t cmd = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "drop", fcoll);
    return run(fdb, &cmd, err);
}
