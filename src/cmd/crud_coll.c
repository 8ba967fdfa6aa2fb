/*
 * crud_coll.c: which collation a CRUD operation runs under: the `collation` the
 * command (or one update/delete statement) gives, else the default collation of
 * the collection (its create option), else simple (binary, a NULL pointer).
 *
 * What must stay true: a command without a collation on a collection without a
 * default never reaches ICU and allocates nothing here (one catalog lookup).
 */
#include "cmd/crud_int.h"
#include "doc/doc.h"

int sbl_crud_default_collation(sbl_cmd_ctx_t *ctx, const char *ns, const sbl_collation_t **outp,
                               sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    bson_iter_t it;
    int rc = 0;

    *outp = NULL;
    if (sbl_coll_open(ctx->ss, ns, false, &c, NULL, NULL) != 0)
        return 0;
    if (bson_iter_init_find(&it, sbl_coll_options(c), "collation"))
        rc = sbl_collation_from_iter(&it, "collation", outp, err);
    sbl_coll_release(c);
    return rc;
}

int sbl_crud_collation(sbl_cmd_ctx_t *ctx, const char *ns, const bson_iter_t *it,
                       const char *field, const sbl_collation_t **outp, sbl_err_t *err)
{
    *outp = NULL;
    if (it != NULL)
        return sbl_collation_from_iter(it, field, outp, err);
    return sbl_crud_default_collation(ctx, ns, outp, err);
}

int sbl_crud_collation_option(const bson_iter_t *it, bson_t *opts, sbl_err_t *err)
{
    const sbl_collation_t *coll = NULL;
    SBL_RET(sbl_collation_from_iter(it, "collation", &coll, err));
    if (coll != NULL)
        BSON_APPEND_DOCUMENT(opts, "collation", sbl_collation_spec(coll));
    return 0;
}
