/*
 * bal_size.c: the balancer's data-size rule, after mongod 7.0 (since 6.0.3):
 * each collection is balanced on its own by the data each shard holds of it
 * (the shards' _shardsvrGetStatsForBalancing answers), not by chunk counts.
 * While the shard with the most data holds three chunk sizes or more than
 * the one with the least, about one chunk size moves from the first to the
 * second; within a zone the same holds over the zone's shards.
 *
 * What must stay true: every move it asks for narrows the gap it measured,
 * so the sum of squared shard sizes falls with each one and balancing ends
 * (no data is moved back and forth).
 */
#include "cmd/bal_size.h"

#include <stddef.h>

bool sbl_bal_size_pick(const int64_t *sizes, const bool *may, int n, int64_t chunk_bytes,
                       int *from, int *to)
{
    int hi = -1, lo = -1;
    for (int i = 0; i < n; i++) {
        if (may != NULL && !may[i])
            continue;
        if (hi < 0 || sizes[i] > sizes[hi])
            hi = i;
        if (lo < 0 || sizes[i] < sizes[lo])
            lo = i;
    }
    if (hi < 0 || hi == lo || sizes[hi] - sizes[lo] < SBL_BAL_SIZE_CHUNKS * chunk_bytes)
        return false;
    *from = hi;
    *to = lo;
    return true;
}

bool sbl_bal_size_narrows(int64_t from_size, int64_t to_size, int64_t moved)
{
    return moved > 0 && moved < from_size - to_size;
}
