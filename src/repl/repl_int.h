/*
 * repl_int.h: private to src/repl: the pure pieces (timestamps, the oplog
 * entry's shape, the election id) that unit tests drive alone, and what the
 * oplog writer (repl_oplog.c) and the coordinator (repl_coord.c) share.
 *
 * A timestamp is kept as one uint64_t, seconds in the high 32 bits and the
 * increment in the low 32: the order of BSON Timestamps, and the value
 * handed to WiredTiger as the commit timestamp.
 */
#ifndef SBL_REPL_INT_H
#define SBL_REPL_INT_H

#include "repl/repl.h"

#define SBL_TS(secs, inc) (((uint64_t)(uint32_t)(secs) << 32) | (uint32_t)(inc))
#define SBL_TS_SECS(ts) ((uint32_t)((ts) >> 32))
#define SBL_TS_INC(ts) ((uint32_t)(ts))

/* The timestamp after prev at wall-clock second now_s: (now_s, 1) when the
 * clock moved past prev's second, else prev's second with the increment
 * plus one (so a clock that steps back never makes ts go back); past an
 * increment of 2^32-1, the next second. */
uint64_t sbl_repl_ts_next(uint64_t prev, uint32_t now_s);

/* An oplog entry in mongod 7.0's field order: op, ns, ui (UUID, binary
 * subtype 4; NULL: none), o, o2 (NULL: none), ts, t, v (2), wall.  Appends
 * to out (initialised by the caller). */
typedef struct sbl_oplog_entry {
    char op; /* 'i', 'u', 'd', 'c', 'n' */
    const char *ns;
    const uint8_t *uuid;
    const bson_t *o;
    const bson_t *o2;
    uint64_t ts;
    int64_t term;
    int64_t wall_ms;
} sbl_oplog_entry_t;
void sbl_repl_entry_build(const sbl_oplog_entry_t *e, bson_t *out);

/* pv1's electionId: 0x7fffffff then the term as 8 big-endian bytes. */
void sbl_repl_election_id(int64_t term, bson_oid_t *oid);

/* The oplog's default size: 5% of free_bytes, clamped to 990 MB..50 GB. */
int64_t sbl_repl_default_oplog_bytes(uint64_t free_bytes);

/* ---- the oplog writer (repl_oplog.c) ---------------------------------- */

/* Create local.oplog.rs (capped, keyed by ts) of size_bytes unless it
 * exists; open it and resume timestamps from its last entry. */
int sbl_oplog_open(sbl_session_t *s, int64_t size_bytes, bool create, sbl_err_t *err);
void sbl_oplog_close(void);
bool sbl_oplog_is_open(void);
/* Start / stop writing entries for document writes and catalog changes. */
void sbl_oplog_set_active(bool on);
/* Append an entry (e->ts and e->wall_ms are filled here) inside s's open
 * transaction, with its ts as the commit timestamp. */
int sbl_oplog_append(sbl_session_t *s, sbl_oplog_entry_t *e, sbl_err_t *err);
/* Append a no-op {msg} in a transaction of its own. */
int sbl_oplog_noop(sbl_session_t *s, const char *msg, sbl_err_t *err);
/* The last timestamp handed out and its wall time (0 before the first). */
uint64_t sbl_oplog_last_ts(void);
int64_t sbl_oplog_last_wall_ms(void);
/* The storage write observer. */
int sbl_oplog_observe(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind,
                      const bson_t *old_doc, const bson_t *new_doc, sbl_err_t *err);

#define SBL_NS_BUF 300

/* The member's term (1 in this increment). */
#define SBL_REPL_TERM 1

#endif
