/*
 * shard_int.h: what shard.c (the version cache), shard_db.c (database
 * versions) and shard_filter.c (the ownership filter) share.  Private to src/shard.
 */
#ifndef SBL_SHARD_INT_H
#define SBL_SHARD_INT_H

#include "shard/shard.h"

/* The filter of ns for shard me from its key pattern and chunks (an
 * iterator over config.chunks documents {min, max, shard, history}),
 * owned now; a new reference, NULL when out of memory. */
sbl_shard_filter_t *shard_filter_build(const char *ns, const bson_t *key, bson_iter_t *chunks,
                                       const char *me);

/* find on the config servers' config.<coll>: *reply is {cursor: {firstBatch:
 * [every matching document], id: 0}} however many batches it took;
 * initialised only when 0 is returned. */
int shard_cfg_find(const char *coll, const bson_t *filter, const bson_t *proj, bson_t *reply,
                   sbl_err_t *err);
/* Forget db's cached database version (NULL: every database's): the next
 * routed command on it reads it again from the config servers. */
void shard_db_forget(const char *db);

/* The bucket of name (a namespace or a database) among nbuckets: the
 * critical sections' in-flight counters (shard_crit.c, shard_db.c). */
static inline unsigned shard_bucket(const char *name, unsigned nbuckets)
{
    unsigned h = 5381;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = h * 33 + *p;
    return h % nbuckets;
}

#endif
