/*
 * cs_int.h: private to src/agg: the pieces of change streams
 * (changestream.c: the stream over the oplog, its options and the stages
 * after it; cs_events.c: oplog entries shaped into mongod 7.0's events;
 * cs_token.c: resume tokens in mongod's KeyString hex form).
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
    int64_t fragment;     /* 1 + fragmentNum of a $changeStreamSplitLargeEvent fragment;
                           * 0: a whole event */
} sbl_cs_pos_t;

/* The largest event a stream returns whole with $changeStreamSplitLargeEvent
 * (BSONObjMaxUserSize); without it mongod's internal limit, 16 KiB more. */
#define SBL_CS_EVENT_MAX (16 * 1024 * 1024)

/* Append {_data: hex} for p to out (initialised by the caller); uuid (16
 * bytes) and event_id may be NULL (high-water marks have neither). */
void sbl_cs_token_make(const sbl_cs_pos_t *p, const uint8_t *uuid, const bson_t *event_id,
                       bson_t *out);
/* The _data of fragment n (from 0) of the event whose _data is data (a
 * copy): the event's KeyString with fragmentNum after it, as mongod's. */
char *sbl_cs_token_fragment(const char *data, int64_t n);
/* Read a token's position; FailedToParse (9) when it is not one of ours. */
int sbl_cs_token_parse(const bson_t *token, sbl_cs_pos_t *p, sbl_err_t *err);
/* <0, 0, >0 as a is before, at, after b. */
int sbl_cs_pos_cmp(const sbl_cs_pos_t *a, const sbl_cs_pos_t *b);

/* The _data string of token tok (a copy; "" when it has none). */
char *sbl_cs_token_str(const bson_t *tok);

/* ---- a stream's state (changestream.c owns it) ---------------------------- */

typedef enum { CS_COLL, CS_DB, CS_CLUSTER } cs_scope_t;
typedef enum { FD_DEFAULT, FD_LOOKUP, FD_WHEN_AVAILABLE, FD_REQUIRED } cs_fd_t;
typedef enum { PRE_OFF, PRE_WHEN_AVAILABLE, PRE_REQUIRED } cs_pre_t;

/* An event a feed built once for all its streams (cs_feed.c): immutable
 * once in the ring, freed with its last reference. */
typedef struct cs_ev {
    int refs;         /* atomic */
    bson_t *doc;      /* as a stream with fullDocument default and no stages gets it */
    char *token;      /* its _data */
    sbl_cs_pos_t pos;
    char kind;        /* 'i' insert, 'u' update (a diff), 'r' replace, 'd' delete, 0 other */
    bool images;      /* pre and post were looked up (a stream wanted images) */
    bson_t *pre;      /* the stored pre-image, or NULL */
    bson_t *post;     /* an update's post-image (there when its pre-image is), or NULL */
} cs_ev_t;

typedef struct cs_item {
    bson_t *doc;
    char *token;      /* the event's _data (PBRT) */
    cs_ev_t *ev;      /* a feed's event, shared (doc and token NULL: the event's) */
    sbl_cs_pos_t pos; /* set for a feed's events (raw) only */
    char kind;        /* a feed's events (raw): as cs_ev_t's, with pre and post */
    bool images;
    bson_t *pre, *post;
} cs_item_t;

typedef struct cs_feed cs_feed_t;

typedef struct cs_state {
    cs_scope_t scope;
    char db[SBL_NS_MAX];
    char coll[SBL_NS_MAX];
    char cursor_ns[SBL_NS_MAX];
    cs_fd_t full_doc;
    cs_pre_t pre;
    bool expanded; /* showExpandedEvents */
    bool migrations; /* showMigrationEvents: a chunk migration's writes too (fromMigrate) */
    bool split;    /* $changeStreamSplitLargeEvent ends the pipeline */
    bson_t *rest;  /* the stages after $changeStream (an array), or NULL */
    sbl_cs_pos_t skip; /* events at or before it are not returned */
    bool has_skip;
    uint64_t scanned;  /* the last oplog ts consumed (0: none yet) */
    uint64_t next_lo;  /* the first ts to read */
    bool invalidated;  /* an invalidate is queued: read no further */
    cs_item_t *q;
    size_t qn, qi, qcap;
    char *tok_last;    /* the last event produced */
    char *tok_prev;    /* the one before it */
    char *tok_hwm;     /* the start point, then the latest high-water mark sent */
    bool raw;          /* a feed's reader: events are queued as built, with their
                        * positions (no start point, stages or size limit), and an
                        * invalidate does not stop the reading */
    bool images;       /* a feed's reader: look up each change's pre- and post-image */
    cs_feed_t *feed;   /* the shared reader of the stream's scope, or NULL */
    cs_ev_t *lent;     /* the shared event whose bytes cs_next handed out last */
} cs_state_t;

/* Every event of one oplog entry (cs_events.c): none, one, an event and an
 * invalidate, or an applyOps entry's operations with their txnOpIndex;
 * each handed to sbl_cs_emit. */
int sbl_cs_entry_events(cs_state_t *st, sbl_opctx_t *ctx, const bson_t *doc, sbl_err_t *err);
/* Queue event ev (taken) at pos with its token's _data (taken) after the
 * stages that follow $changeStream, unless the stream starts after pos. */
int sbl_cs_emit(cs_state_t *st, sbl_opctx_t *ctx, const sbl_cs_pos_t *pos, bson_t *ev,
                char *token, sbl_err_t *err);

/* ChangeStreamHistoryLost (286): the stream's position is no longer in the oplog. */
int sbl_cs_history_lost(sbl_err_t *err);
/* Queue a feed's event ev (a reference taken) for st: shared as it is when
 * st adds nothing to it (fullDocument default, no fullDocumentBeforeChange,
 * no stages), else a copy with st's images or lookup and stages. */
int sbl_cs_emit_shared(cs_state_t *st, sbl_opctx_t *ctx, cs_ev_t *ev, sbl_err_t *err);
/* Drop a reference to ev (the last one frees it). */
void sbl_cs_ev_release(cs_ev_t *ev);
/* Free the queue items from st->qi on. */
void sbl_cs_queue_clear(cs_state_t *st);
/* Read the next oplog entries after st->next_lo, up to the majority commit
 * point, into st's queue (changestream.c): the stream's own read. */
int sbl_cs_refill(cs_state_t *st, sbl_opctx_t *ctx, sbl_err_t *err);

/* ---- the shared reader of one scope (cs_feed.c) ------------------------------ */

/* Attach st (its scope, db, coll, showExpandedEvents and image options set)
 * to the shared reader of streams like it. */
void sbl_cs_feed_attach(cs_state_t *st);
/* Drop st's hold on its feed (the last stream out frees it). */
void sbl_cs_feed_detach(cs_state_t *st);
/* The newest entry a waiting stream wakes for, as sampled at most every few
 * ms (changestream.c): a stream served by its feed reads up to it. */
uint64_t sbl_cs_wake_point(void);
/* The streams attached to any feed now (no lock). */
int sbl_cs_feed_streams(void);
/* Queue st's next events: from its feed's ring when st's resume point is in
 * it, else by reading the oplog itself (sbl_cs_refill); the same events
 * either way. */
int sbl_cs_feed_fill(cs_state_t *st, sbl_opctx_t *ctx, sbl_err_t *err);
/* Whether st's next events come from its feed's ring (no oplog read of its
 * own, no document lookups): its getMore may run on the network loop. */
bool sbl_cs_feed_quick(void *state);
/* A getMore's whole batch at once for a plain stream st (state; no images,
 * lookup, stages, start point ahead or queued events), when its next events
 * are in its feed's ring: the events as the array elements of the reply,
 * appended to arr (empty), built once for every stream that reads the same
 * entries, with st's position and tokens moved as cs_next would have.
 * *countp: the events appended; 0 when st is left to cs_next (another kind
 * of stream, nothing new, an invalidate, more than limit (>= 0) events or
 * more than max_bytes). */
int sbl_cs_feed_batch(void *state, sbl_opctx_t *ctx, int64_t limit, size_t max_bytes,
                      bson_t *arr, int64_t *countp, sbl_err_t *err);
/* Whether st's getMore (state), with the wake point at gen, would find
 * nothing and change nothing (served by its feed, nothing queued, its next
 * entry after gen): it only waits (sbl_cursor_park_early).  No lock: called
 * with the cursor idle. */
bool sbl_cs_feed_waits(void *state, uint64_t gen);
/* A waiting stream's check when the wake point moved to upto (the cursor
 * source's idle, under the cursor registry's lock): true when its getMore
 * would still queue nothing (no event of its scope up to upto in its feed's
 * ring), having moved its position as that getMore would; false whenever
 * the getMore has to run to know (it reads, may fail, or the feed is busy). */
bool sbl_cs_feed_idle(void *state, uint64_t upto);
/* Add what st asks for to doc, a copy of a feed's event ev (cs_events.c), as
 * its own read would have built it: an update's fullDocument (updateLookup:
 * the document now, or null once it is gone; whenAvailable / required: the
 * post-image) and fullDocumentBeforeChange; NoMatchingDocument (47) when a
 * required image is missing. */
int sbl_cs_add_images(const cs_state_t *st, sbl_opctx_t *ctx, const cs_ev_t *ev, bson_t *doc,
                      sbl_err_t *err);

#endif
