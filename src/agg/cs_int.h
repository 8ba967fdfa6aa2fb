/*
 * cs_int.h: private to src/agg: the pieces of change streams
 * (changestream.c: the stream over the oplog and its events; cs_token.c:
 * resume tokens in mongod's KeyString hex form).
 */
#ifndef SBL_CS_INT_H
#define SBL_CS_INT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "agg/agg.h"
#include "common/buf.h"
#include "common/errors.h"

/* A position in the stream of events: an event (or, event false, the
 * high-water mark just before every event of ts); positions order as tokens. */
typedef struct sbl_cs_pos {
    uint64_t ts;          /* clusterTime: seconds << 32 | increment */
    bool event;           /* tokenType 128 (an event) or 0 (a high-water mark) */
    int64_t op_index;     /* txnOpIndex: the event's place in its applyOps entry */
    bool from_invalidate; /* the invalidate that follows a drop/rename/dropDatabase */
} sbl_cs_pos_t;

/* Append {_data: hex} for p to out (initialised by the caller); uuid (16
 * bytes) and event_id may be NULL (high-water marks have neither). */
void sbl_cs_token_make(const sbl_cs_pos_t *p, const uint8_t *uuid, const bson_t *event_id,
                       bson_t *out);
/* Read a token's position; FailedToParse (9) when it is not one of ours. */
int sbl_cs_token_parse(const bson_t *token, sbl_cs_pos_t *p, sbl_err_t *err);
/* <0, 0, >0 as a is before, at, after b. */
int sbl_cs_pos_cmp(const sbl_cs_pos_t *a, const sbl_cs_pos_t *b);

#endif
