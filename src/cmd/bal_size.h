/*
 * bal_size.h: the balancer's data-size rule (bal_size.c), private to
 * src/cmd.  Plain decisions over numbers, so balancer code only reads and
 * moves, and the rule is tested without a cluster.
 */
#ifndef SBL_BAL_SIZE_H
#define SBL_BAL_SIZE_H

#include <stdbool.h>
#include <stdint.h>

/* A collection is balanced while its shards' data sizes differ by less than
 * this many chunk sizes (mongod 7.0's migration threshold). */
#define SBL_BAL_SIZE_CHUNKS 3

/*
 * Which shard gives data to which, by mongod 7.0's rule.  sizes[n]: each
 * shard's data size of the collection (bytes); may[n] (NULL: all): the
 * shards that may take part (within a zone: the zone's shards; never a
 * draining one); chunk_bytes: the collection's chunk size.  True when the
 * shard with the most data (*from) holds at least SBL_BAL_SIZE_CHUNKS x
 * chunk_bytes more than the one with the least (*to): a migration from
 * *from to *to is due.  Ties go to the first shard.  False (nothing
 * written) when fewer than two shards may take part or the gap is smaller.
 */
bool sbl_bal_size_pick(const int64_t *sizes, const bool *may, int n, int64_t chunk_bytes,
                       int *from, int *to);

/*
 * Whether moving moved bytes from a shard holding from_size to one holding
 * to_size narrows the gap between them (moved < from_size - to_size): a
 * move that does not would be undone by the next round.  The balancer asks
 * this of a whole chunk it cannot split to about one chunk size.
 */
bool sbl_bal_size_narrows(int64_t from_size, int64_t to_size, int64_t moved);

#endif
