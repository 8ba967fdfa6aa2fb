/*
 * ts_bound.h: a filter's lower bound on ts, {ts: {$gte|$gt: T}}, as an oplog
 * read (a secondary's fetcher) gives it: where a natural scan of the oplog
 * starts, and, when it is the whole filter, a test of each entry on its
 * encoded key instead of the matcher (private to src/exec).
 */
#ifndef SBL_EXEC_TS_BOUND_H
#define SBL_EXEC_TS_BOUND_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sbl_ts_bound {
    uint64_t from;   /* T (0: the filter has no such bound) */
    uint8_t key[16]; /* T's encoded key (sbl_key_append) when the bound is the whole filter */
    size_t key_len;  /* 0: it is not */
    bool inclusive;  /* $gte */
} sbl_ts_bound_t;

/* Read filter's bound into *b: from when ts's first operator is $gte or $gt
 * with a Timestamp, and key when the filter holds nothing else. */
void sbl_ts_bound_parse(const bson_t *filter, sbl_ts_bound_t *b);

/* Whether the document keyed key (len bytes, a collection keyed by ts)
 * passes the whole-filter bound b: *matchp, and true when the key tells it
 * (a timestamp compares as its encoding); false when only the matcher can
 * tell (no whole-filter bound; ts of another type: bracketing, arrays). */
bool sbl_ts_bound_decides(const sbl_ts_bound_t *b, const void *key, size_t len, bool *matchp);

#endif
