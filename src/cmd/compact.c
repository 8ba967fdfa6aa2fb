/*
 * compact.c: the compact command ({compact: "<coll>", force?, freeSpaceTargetMB?,
 * dryRun?, comment?}, run against the collection's database).  It gives the
 * free space inside the collection's files (its table and index tables) back
 * to the filesystem through sbl_coll_compact and answers {bytesFreed}, or with
 * dryRun {estimatedBytesFreed} without moving anything.
 *
 * What must stay true: the table row marks it SLOW, so it runs on a worker
 * thread and never holds up a network loop; it takes no lock that stops
 * other clients' reads and writes of the collection (WiredTiger's compact
 * works on the live files).  Checks come in mongod's order: arguments,
 * namespace, view, existence.
 */
#include "cmd/cmd_int.h"
#include "cmd/crud_int.h"
#include "agg/agg.h"

/* mongod's default freeSpaceTargetMB: a file is compacted only when at least
 * this much of it is reusable. */
#define COMPACT_DEFAULT_TARGET_MB 20

/* force / dryRun: booleans (numbers are taken by truth, as mongod's old
 * parser did). */
static int get_flag(const bson_iter_t *it, const char *field, bool *out, sbl_err_t *err)
{
    if (BSON_ITER_HOLDS_BOOL(it)) {
        *out = bson_iter_bool(it);
        return 0;
    }
    if (BSON_ITER_HOLDS_NUMBER(it)) {
        *out = bson_iter_as_bool(it);
        return 0;
    }
    return sbl_type_error(err, field, it, "bool");
}

/* Between files and slices of WiredTiger's compact: killOp and maxTimeMS. */
static int check_interrupt(void *arg, sbl_err_t *err)
{
    return sbl_op_check_interrupt(arg, err);
}

int sbl_cmd_compact(sbl_opctx_t *ctx, sbl_err_t *err)
{
    static const char *const known[] = {"compact", "force", "freeSpaceTargetMB", "dryRun", NULL};
    char ns[SBL_NS_MAX];
    sbl_coll_t *c = NULL;
    bson_iter_t it;
    bool force = false, dry_run = false;
    int64_t target_mb = COMPACT_DEFAULT_TARGET_MB, freed = 0;
    int rc;

    SBL_RET(sbl_check_fields(ctx->cmd, "compact", known, err));
    if (bson_iter_init_find(&it, ctx->cmd, "force"))
        SBL_RET(get_flag(&it, "compact.force", &force, err));
    (void)force; /* a standalone has no primary to refuse: force changes nothing */
    if (bson_iter_init_find(&it, ctx->cmd, "dryRun"))
        SBL_RET(get_flag(&it, "compact.dryRun", &dry_run, err));
    if (bson_iter_init_find(&it, ctx->cmd, "freeSpaceTargetMB")) {
        if (!BSON_ITER_HOLDS_NUMBER(&it) && !BSON_ITER_HOLDS_DECIMAL128(&it))
            return sbl_type_error(err, "compact.freeSpaceTargetMB", &it,
                                       "[long, int, decimal, double]");
        SBL_RET(sbl_get_int64(&it, &target_mb, err));
        if (target_mb < 1)
            return sbl_err_set(err, SBL_E_Location51024,
                               "BSON field 'freeSpaceTargetMB' value must be >= 1, actual value "
                               "'%lld'",
                               (long long)target_mb);
        if (target_mb > INT64_MAX >> 20)
            target_mb = INT64_MAX >> 20;
    }
    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    if (sbl_views_any() && sbl_view_is(ctx->ss, ns))
        return sbl_err_set(err, SBL_E_CommandNotSupportedOnView, "can't compact a view");
    rc = sbl_coll_open(ctx->ss, ns, false, &c, NULL, err);
    if (rc == SBL_E_NamespaceNotFound)
        return sbl_err_set(err, SBL_E_NamespaceNotFound, "collection does not exist");
    SBL_RET(rc);
    SBL_ERR(sbl_op_check_interrupt(ctx, err));
    SBL_ERR(sbl_coll_compact(ctx->ss, c, target_mb << 20, dry_run, check_interrupt, ctx, &freed,
                             err));
    BSON_APPEND_INT64(ctx->reply, dry_run ? "estimatedBytesFreed" : "bytesFreed", freed);
err:
    sbl_coll_release(c);
    return rc;
}
