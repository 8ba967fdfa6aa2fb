/*
 * index_geo.c: createIndexes checks for geo indexes.  A 2dsphere index is
 * stored with 2dsphereIndexVersion 3 (the only version Sable builds); a 2d
 * index keeps its bits/min/max as given (Sable's 2d keys are S2 cells of
 * points in [-180, 180), whatever the bits).
 */
#include "cmd/cmd_int.h"

#include <math.h>
#include <string.h>

int sbl_cmd_geo_check(const bson_t *spec, bool sphere, sbl_err_t *err)
{
    bson_iter_t it;
    if (sphere) {
        if (bson_iter_init_find(&it, spec, "2dsphereIndexVersion") &&
            (!BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_int64(&it) != 3))
            return sbl_err_set(err, SBL_E_CannotCreateIndex,
                               "unsupported geo index version { 2dsphereIndexVersion : %lld }, "
                               "Sable supports version 3",
                               BSON_ITER_HOLDS_NUMBER(&it) ? (long long)bson_iter_as_int64(&it)
                                                           : -1LL);
        return 0;
    }
    double lo = -180, hi = 180;
    if (bson_iter_init_find(&it, spec, "bits")) {
        double b = BSON_ITER_HOLDS_NUMBER(&it) ? bson_iter_as_double(&it) : 0;
        if (!(b > 0 && b <= 32))
            return sbl_err_set(err, SBL_E_CannotCreateIndex,
                               "bits for hash must be > 0 and <= 32, but %g bits were specified",
                               b);
    }
    if (bson_iter_init_find(&it, spec, "min") && BSON_ITER_HOLDS_NUMBER(&it))
        lo = bson_iter_as_double(&it);
    if (bson_iter_init_find(&it, spec, "max") && BSON_ITER_HOLDS_NUMBER(&it))
        hi = bson_iter_as_double(&it);
    if (!(lo < hi))
        return sbl_err_set(err, SBL_E_CannotCreateIndex,
                           "region for hash must be valid and have positive area, but [%g, %g] "
                           "was specified", lo, hi);
    return 0;
}
