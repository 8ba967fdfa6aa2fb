/*
 * shard_int.h: what shard.c (the version cache) and shard_filter.c (the
 * ownership filter) share.  Private to src/shard.
 */
#ifndef SBL_SHARD_INT_H
#define SBL_SHARD_INT_H

#include "shard/shard.h"

/* The filter of ns for shard me from its key pattern and chunks (an
 * iterator over config.chunks documents {min, max, shard, history}),
 * owned now; a new reference, NULL when out of memory. */
sbl_shard_filter_t *shard_filter_build(const char *ns, const bson_t *key, bson_iter_t *chunks,
                                       const char *me);

#endif
