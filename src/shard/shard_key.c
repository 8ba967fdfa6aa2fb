/*
 * shard_key.c: a document's shard key value, read in one place for the
 * router's targeting (rt_target.c, rt_migrate.c), the shards' ownership
 * filter (shard_filter.c) and a migration's range (src/cmd/migrate*.c): the
 * key pattern's fields in its order, each by its dotted path; a missing
 * field is null and a hashed field holds its hash (sbl_index_hash, the value
 * a hashed index stores and chunk bounds hold), as mongos and mongod compute
 * it.
 *
 * What must stay true: the router and the shards get the same value from
 * the same document, so a document routed to a chunk is in that chunk's
 * range on the shard that owns it.
 */
#include "shard/shard.h"

#include "doc/doc.h"
#include "storage/storage.h"

#include <string.h>

int sbl_shard_key_shape(const bson_t *pattern, int *hashed_posp)
{
    bson_iter_t it;
    int n = 0;
    *hashed_posp = -1;
    if (!bson_iter_init(&it, pattern))
        return 0;
    while (bson_iter_next(&it)) {
        if (BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), "hashed") == 0)
            *hashed_posp = n;
        n++;
    }
    return n;
}

/* Does a component of path before its last one hold an array in doc? */
static bool under_array(const bson_t *doc, const char *path)
{
    char prefix[1024];
    bson_iter_t v;
    size_t len = strlen(path);
    if (strchr(path, '.') == NULL || len >= sizeof(prefix))
        return false;
    memcpy(prefix, path, len + 1);
    for (char *dot = strchr(prefix, '.'); dot != NULL; dot = strchr(dot + 1, '.')) {
        *dot = '\0';
        bool array = sbl_path_get(doc, prefix, &v) && BSON_ITER_HOLDS_ARRAY(&v);
        *dot = '.';
        if (array)
            return true;
    }
    return false;
}

int sbl_shard_key_values(const bson_t *pattern, int hashed_pos, const bson_t *doc, int flags,
                         bson_value_t vals[SBL_SHARD_KEY_MAX])
{
    static const bson_value_t null_value = {.value_type = BSON_TYPE_NULL};
    bson_iter_t it, v;
    int i = 0, met = 0;
    if (!bson_iter_init(&it, pattern))
        return SBL_SHARD_KEY_MISSING;
    while (i < SBL_SHARD_KEY_MAX && bson_iter_next(&it)) {
        const char *path = bson_iter_key(&it);
        if (sbl_path_get(doc, path, &v) ||
            ((flags & SBL_SHARD_KEY_WHOLE_NAMES) && bson_iter_init_find(&v, doc, path))) {
            vals[i] = *bson_iter_value(&v);
            if (BSON_ITER_HOLDS_ARRAY(&v))
                met |= SBL_SHARD_KEY_ARRAY;
        } else {
            vals[i] = null_value;
            met |= SBL_SHARD_KEY_MISSING;
        }
        if (under_array(doc, path))
            met |= SBL_SHARD_KEY_ARRAY;
        if (i == hashed_pos) {
            bson_value_t h;
            sbl_index_hash(&vals[i], &h);
            vals[i] = h;
        }
        i++;
    }
    return met;
}
