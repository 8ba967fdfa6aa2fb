/*
 * bal_drain.h: the balancer's draining policy (bal_drain.c), private to
 * src/cmd.  A plain decision over config.chunks documents, so balancer.c
 * only reads and moves.
 */
#ifndef SBL_BAL_DRAIN_H
#define SBL_BAL_DRAIN_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#define SBL_BAL_SHARD_ID 128 /* a shard id's buffer, as balancer.c keeps them */

/*
 * Which chunk of one collection leaves a draining shard, and for where.
 * chunks: the collection's config.chunks documents (an array, sorted by
 * min); takers[ntakers]: the shards that take chunks (not draining);
 * draining[ndraining]: the shards being drained.  True when a chunk of the
 * collection is on a draining shard: *min and *max then point into chunks
 * (valid while it is), and *to is the index in takers of the shard with the
 * least data of the collection (sizes[ntakers], bytes; NULL: the fewest
 * chunks of it), the first such.  False when none is, or nothing can take
 * it.
 */
bool sbl_bal_drain_pick(const bson_t *chunks, char takers[][SBL_BAL_SHARD_ID], int ntakers,
                        char draining[][SBL_BAL_SHARD_ID], int ndraining,
                        const int64_t *sizes, bson_t *min, bson_t *max, int *to);

#endif
