/*
 * bal_drain.c: the balancer's draining policy.  removeShard marks a shard
 * draining in config.shards; every balancer round (balancer.c, on the
 * config server primary, while the balancer is enabled: mongod 7.0 drains
 * only then too) first moves, in each collection, one chunk off a draining
 * shard to the shard that holds the least of that collection's data (as
 * mongod 7.0 picks it; or the fewest of its chunks, when sizes are not
 * known), before it evens out the rest.  Chunks leave in order of their min;
 * one marked jumbo stays (as mongod's balancer leaves them: removeShard
 * counts them in jumboChunks, and moveChunk with forceJumbo moves them).
 */
#include "cmd/bal_drain.h"

#include "doc/doc.h"

#include <string.h>

static int index_of(char ids[][SBL_BAL_SHARD_ID], int n, const char *id)
{
    for (int i = 0; i < n; i++)
        if (strcmp(ids[i], id) == 0)
            return i;
    return -1;
}

static bool is_jumbo(const bson_t *chunk)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, chunk, "jumbo") && bson_iter_as_bool(&it);
}

static bool bounds_of(const bson_t *chunk, bson_t *min, bson_t *max)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, chunk, "min") && sbl_iter_doc(&it, min) &&
           bson_iter_init_find(&it, chunk, "max") && sbl_iter_doc(&it, max);
}

bool sbl_bal_drain_pick(const bson_t *chunks, char takers[][SBL_BAL_SHARD_ID], int ntakers,
                        char draining[][SBL_BAL_SHARD_ID], int ndraining,
                        const int64_t *sizes, bson_t *min, bson_t *max, int *to)
{
    int count[64] = {0};
    bool found = false;
    bson_iter_t it;
    if (ntakers <= 0 || ntakers > 64 || !bson_iter_init(&it, chunks))
        return false;
    while (bson_iter_next(&it)) {
        bson_t c;
        const char *sh;
        if (!sbl_iter_doc(&it, &c) || (sh = sbl_doc_utf8(&c, "shard")) == NULL)
            continue;
        int t = index_of(takers, ntakers, sh);
        if (t >= 0)
            count[t]++;
        else if (!found && index_of(draining, ndraining, sh) >= 0 && !is_jumbo(&c))
            found = bounds_of(&c, min, max);
    }
    if (!found)
        return false;
    *to = 0;
    for (int t = 1; t < ntakers; t++)
        if (sizes != NULL ? sizes[t] < sizes[*to] : count[t] < count[*to])
            *to = t;
    return true;
}
