/*
 * agg_int.h: private to src/agg.  A set of values by their order-preserving
 * encoding (equal under a collation when one is given), for the stages that
 * deduplicate values: $graphLookup's visited documents and frontier,
 * $setWindowFields' $addToSet; and stages.c's helpers that agg_write.c uses.
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

/* A view of the document or array at it into out (no copy); false when invalid. */
bool sbl_agg_sub_doc(const bson_iter_t *it, bson_t *out);
/* The namespace a stage (named stage, for the error) targets, "coll" or {db, coll}
 * at it, into ns (env->db when it names no db). */
int sbl_agg_target_ns(const sbl_agg_env_t *env, const bson_iter_t *it, const char *stage,
                      char *ns, size_t nslen, sbl_err_t *err);
/* Two let documents merged (inner's win) into out (initialised here). */
void sbl_agg_merge_let(const bson_t *outer, const bson_t *inner, bson_t *out);

#endif
