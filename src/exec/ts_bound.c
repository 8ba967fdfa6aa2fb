/*
 * ts_bound.c: {ts: {$gte|$gt: T}} read once from a filter (ts_bound.h).
 *
 * What must stay true: sbl_ts_bound_decides answers only when the matcher
 * would answer the same: the filter is that bound alone and the key encodes
 * a timestamp (doc_key.c: the tag byte is the type, then seconds and
 * increment big-endian, so memcmp order is the timestamps' order).
 */
#include "exec/ts_bound.h"

#include <string.h>

#include "doc/doc.h"

void sbl_ts_bound_parse(const bson_t *filter, sbl_ts_bound_t *b)
{
    bson_iter_t ts_it, op, rest, top;
    memset(b, 0, sizeof(*b));
    if (filter == NULL || !bson_iter_init_find(&ts_it, filter, "ts") ||
        !BSON_ITER_HOLDS_DOCUMENT(&ts_it) || !bson_iter_recurse(&ts_it, &op) ||
        !bson_iter_next(&op) ||
        (strcmp(bson_iter_key(&op), "$gte") != 0 && strcmp(bson_iter_key(&op), "$gt") != 0) ||
        !BSON_ITER_HOLDS_TIMESTAMP(&op))
        return;
    uint32_t t, i;
    bson_iter_timestamp(&op, &t, &i);
    b->from = (uint64_t)t << 32 | i;
    rest = op;
    if (bson_iter_next(&rest) || !bson_iter_init(&top, filter) || !bson_iter_next(&top) ||
        bson_iter_next(&top))
        return; /* another operator on ts, or another field */
    sbl_buf_t k;
    sbl_buf_init(&k);
    sbl_key_append(&k, bson_iter_value(&op), false);
    if (k.len <= sizeof(b->key)) {
        memcpy(b->key, k.data, k.len);
        b->key_len = k.len;
        b->inclusive = strcmp(bson_iter_key(&op), "$gte") == 0;
    }
    sbl_buf_destroy(&k);
}

bool sbl_ts_bound_decides(const sbl_ts_bound_t *b, const void *key, size_t len, bool *matchp)
{
    const uint8_t *k = key;
    if (b->key_len == 0 || len != b->key_len || k[0] != b->key[0])
        return false; /* not a timestamp (the tag byte is the type) */
    int c = memcmp(k, b->key, len);
    *matchp = c > 0 || (c == 0 && b->inclusive);
    return true;
}
