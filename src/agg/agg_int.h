/*
 * agg_int.h: private to src/agg.  A set of values by their order-preserving
 * encoding (equal under a collation when one is given), for the stages that
 * deduplicate values: $graphLookup's visited documents and frontier,
 * $setWindowFields' $addToSet.
 */
#ifndef SBL_AGG_INT_H
#define SBL_AGG_INT_H

#include "agg/agg.h"
#include "common/buf.h"

typedef struct sbl_keyset {
    sbl_buf_t *keys; /* one per slot; len 0: empty (an encoding is never empty) */
    size_t cap, n;
} sbl_keyset_t;

/* Add v (compared under coll, NULL: binary); false when an equal value was there. */
bool sbl_keyset_add(sbl_keyset_t *s, const bson_value_t *v, const sbl_collation_t *coll);
/* Free what the set holds and empty it (a zeroed set is empty). */
void sbl_keyset_free(sbl_keyset_t *s);

#endif
