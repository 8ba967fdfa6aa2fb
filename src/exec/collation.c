/*
 * collation.c: which collation a query or write runs under: the `collation` the
 * command (or one update/delete statement) gives, else the default collation of
 * the collection (its create option), else simple (binary, a NULL pointer).
 *
 * What must stay true: a command without a collation never reaches ICU and
 * allocates nothing here; while no collection has a default collation it costs
 * one atomic load.  defaults_state only ever moves towards DEFAULTS_SOME (a
 * collation option seen, or found in the catalog), so a stale NONE is never read
 * after the create that stored a default has set SOME.
 */
#include <stdatomic.h>

#include "exec/exec.h"
#include "doc/doc.h"

enum { DEFAULTS_UNKNOWN, DEFAULTS_NONE, DEFAULTS_SOME };
static atomic_int defaults_state = DEFAULTS_UNKNOWN;

static bool has_default(const char *ns, const bson_t *options, const uint8_t *uuid, void *arg)
{
    bool *found = arg;
    *found = bson_has_field(options, "collation");
    return !*found;
}

/* Could any collection have a default collation? (The catalog is scanned once.) */
static bool defaults_possible(void)
{
    int s = atomic_load_explicit(&defaults_state, memory_order_acquire);
    if (s == DEFAULTS_UNKNOWN) {
        bool found = false;
        sbl_catalog_list(NULL, has_default, &found);
        int want = found ? DEFAULTS_SOME : DEFAULTS_NONE;
        /* a create that raced with the scan may have set SOME already: keep it */
        atomic_compare_exchange_strong(&defaults_state, &s, want);
        s = atomic_load_explicit(&defaults_state, memory_order_acquire);
    }
    return s == DEFAULTS_SOME;
}

int sbl_exec_default_collation(sbl_opctx_t *ctx, const char *ns, const sbl_collation_t **outp,
                               sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    bson_iter_t it;
    int rc = 0;

    *outp = NULL;
    if (!defaults_possible() || sbl_coll_open(ctx->ss, ns, false, &c, NULL, NULL) != 0)
        return 0;
    if (bson_iter_init_find(&it, sbl_coll_options(c), "collation"))
        rc = sbl_collation_from_iter(&it, "collation", outp, err);
    sbl_coll_release(c);
    return rc;
}

int sbl_exec_collation(sbl_opctx_t *ctx, const char *ns, const bson_iter_t *it,
                       const char *field, const sbl_collation_t **outp, sbl_err_t *err)
{
    *outp = NULL;
    if (it != NULL)
        return sbl_collation_from_iter(it, field, outp, err);
    return sbl_exec_default_collation(ctx, ns, outp, err);
}

int sbl_exec_collation_option(const bson_iter_t *it, bson_t *opts, sbl_err_t *err)
{
    const sbl_collation_t *coll = NULL;
    SBL_RET(sbl_collation_from_iter(it, "collation", &coll, err));
    if (coll != NULL) {
        atomic_store_explicit(&defaults_state, DEFAULTS_SOME, memory_order_release);
        BSON_APPEND_DOCUMENT(opts, "collation", sbl_collation_spec(coll));
    }
    return 0;
}
