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
    const bson_t *diff; /* an update's $v:2 diff (repl_diff.c); NULL: none */
    uint64_t ts;
    int64_t term;
    int64_t wall_ms;
    const sbl_repl_stmt_t *stmt; /* a retryable write's statement (lsid ... prevOpTime), or NULL */
    bool no_stmt_id;             /* a transaction's applyOps entry: no stmtId */
    uint64_t pre_ts;             /* preImageOpTime (0: none) */
    int64_t pre_term;
    bool from_migrate;           /* fromMigrate: true (a chunk migration's write) */
} sbl_oplog_entry_t;
/* Encode e into out (empty) in one buffer; when ix is not NULL, index the
 * entry's fields there (sbl_doc_index_t, NULL data when out could not be
 * grown) for the lookups of its write. */
void sbl_repl_entry_build(const sbl_oplog_entry_t *e, bson_t *out, sbl_doc_index_t *ix);
/* A session's lsid {id: UUID, uid: BinData(0, 32 bytes)} encoded into b (the
 * bytes libbson's appenders give), *lsid a view of it; false when it cannot
 * be viewed (never). */
#define SBL_REPL_LSID_LEN 72
bool sbl_repl_lsid_view(uint8_t b[SBL_REPL_LSID_LEN], const uint8_t id[16],
                        const uint8_t uid[32], bson_t *lsid);
/* A transaction's operation {op, ns, ui (when uuid is not NULL), o, o2, diff
 * (each when not NULL)}, an element of its applyOps array, encoded into buf
 * (cap bytes); returns its length, having written nothing when that is over
 * cap.  Byte for byte what libbson's appenders give. */
size_t sbl_repl_op_encode(char op, const char *ns, const uint8_t *uuid, const bson_t *o,
                          const bson_t *o2, const bson_t *diff, uint8_t *buf, size_t cap);
/* A session's config.transactions record {_id: lsid, txnNum, lastWriteOpTime:
 * {ts, t}, lastWriteDate, state (when not NULL)} encoded into buf (cap
 * bytes); returns its length, having written nothing when that is over cap. */
size_t sbl_repl_record_encode(const bson_t *lsid, int64_t txn, uint64_t ts, int64_t term,
                              int64_t wall_ms, const char *state, uint8_t *buf, size_t cap);
/* The collection entry e may create when applied, written to ns (n bytes), and the
 * UUID its "ui" names it by (*uuidp, into e): a create's or createIndexes' collection
 * (o's first field, in the entry's database), an insert's or update's ns.  False for
 * any other entry, one without a 16-byte UUID "ui", or a name that does not fit. */
bool sbl_repl_entry_created_ns(const bson_t *e, char *ns, size_t n, const uint8_t **uuidp);

/* The difference from old_doc to new_doc in mongod's $v:2 diff form
 * (repl_diff.c), appended to out (initialised by the caller; empty when the
 * two are equal). */
void sbl_repl_diff(const bson_t *old_doc, const bson_t *new_doc, bson_t *out);
/* The same, and whether applying out to old_doc (sbl_repl_diff_apply) gives
 * new_doc byte for byte; false only says it may not (repl_diff.c). */
bool sbl_repl_diff_exact(const bson_t *old_doc, const bson_t *new_doc, bson_t *out);

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
 * transaction, with its ts as the commit timestamp.  s then holds the
 * oplog's insert lock (no other write takes a ts) until sbl_oplog_release or
 * the end of its transaction. */
int sbl_oplog_append(sbl_session_t *s, sbl_oplog_entry_t *e, sbl_err_t *err);
/* Let other writes take their ts while s's transaction, whose entries took
 * theirs, goes on to commit (repl_visible.c keeps readers behind it). */
void sbl_oplog_release(sbl_session_t *s);
/* Append a no-op {msg} in a transaction of its own. */
int sbl_oplog_noop(sbl_session_t *s, const char *msg, sbl_err_t *err);
/* The last timestamp handed out and its wall time (0 before the first). */
uint64_t sbl_oplog_last_ts(void);
int64_t sbl_oplog_last_wall_ms(void);
/* The open oplog collection (NULL before sbl_oplog_open). */
sbl_coll_t *sbl_oplog_coll(void);
/* The storage write observer. */
int sbl_oplog_observe(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind,
                      const bson_t *old_doc, const bson_t *new_doc, sbl_err_t *err);

#define SBL_NS_BUF 300

/* ---- config.transactions (repl_txn.c) ------------------------------------ */

/* Open (creating) config.transactions; called at start-up outside a transaction. */
int sbl_txn_table_open(sbl_session_t *s, sbl_err_t *err);
void sbl_txn_table_close(void);
/* The calling thread's retryable-write statement, or NULL. */
sbl_repl_stmt_t *sbl_repl_cur_stmt(void);
/* Upsert the session's record in s's open transaction: lsid is {id, uid}. */
int sbl_txn_record_write(sbl_session_t *s, const bson_t *lsid, int64_t txn, uint64_t ts,
                         int64_t term, int64_t wall_ms, sbl_err_t *err);
/* After a secondary wrote the primary's entry doc: its record when doc
 * carries lsid and txnNumber (i, u, d and c entries). */
int sbl_txn_record_applied(sbl_session_t *s, const bson_t *doc, sbl_err_t *err);
/* The thread's multi-document transaction ops, or NULL; add one op (diff:
 * an update's $v:2 diff, kept beside o as in a lone entry; pre_image: the
 * document before the op, stored at commit (sbl_repl_txn_commit) for a
 * collection with changeStreamPreAndPostImages; both may be NULL). */
sbl_repl_txn_ops_t *sbl_repl_cur_txn_ops(void);
int sbl_repl_txn_ops_add(sbl_repl_txn_ops_t *ops, char op, const char *ns, const uint8_t *uuid,
                         const bson_t *o, const bson_t *o2, const bson_t *diff,
                         const bson_t *pre_image, sbl_err_t *err);
/* The session's record with a state ("committed"; NULL: none). */
int sbl_txn_record_write_state(sbl_session_t *s, const bson_t *lsid, int64_t txn, uint64_t ts,
                               int64_t term, int64_t wall_ms, const char *state, sbl_err_t *err);
/* As sbl_txn_record_write_state, given known, the session's record as last
 * seen (a hint, or NULL): replaced without a search when still current; known
 * then describes the record written (key_len 0 when not known). */
int sbl_txn_record_write_known(sbl_session_t *s, const bson_t *lsid, int64_t txn, uint64_t ts,
                               int64_t term, int64_t wall_ms, const char *state,
                               sbl_version_t *known, sbl_err_t *err);


/* After a transaction's entry e: the session's record (st's lsid and
 * txnNumber) with state, through st->record when set (the hint, as
 * sbl_txn_record_write_known), and *tsp, st->out_ts/out_term: e's ts and term. */
int sbl_repl_txn_record_outcome(sbl_session_t *s, const sbl_oplog_entry_t *e,
                                sbl_repl_stmt_t *st, const char *state, uint64_t *tsp,
                                sbl_err_t *err);
/* An entry's ts (0: none). */
uint64_t sbl_repl_entry_ts(const bson_t *doc);

/* Prepared transactions (repl_prepare.c): hold the stable timestamp below
 * prepare_ts; the stable timestamp allowed given the pins; apply a
 * prepare, commit or abort entry e (kind: sbl_repl_prepared_kind, o its o). */
void sbl_repl_prepared_pin(uint64_t prepare_ts);
uint64_t sbl_repl_prepared_clamp(uint64_t stable);
/* A rollback to cp_ts: forget the pins of prepare entries after it; those
 * whose commit or abort entry is after it are prepared again. */
void sbl_repl_prepared_rollback(uint64_t cp_ts);
int sbl_repl_apply_prepared(const bson_t *e, int kind, const bson_t *o, sbl_err_t *err);

/* Append a primary's entry doc (with its own ts and t) as it is, inside
 * s's open transaction, with its ts as the commit timestamp (a secondary
 * applying it). */
int sbl_oplog_append_raw(sbl_session_t *s, const bson_t *doc, sbl_err_t *err);
/* The term of the last entry handed out (0 before the first). */
int64_t sbl_oplog_last_term(void);
/* Replication's fail points (repl_failpoint.c). */
enum { SBL_REPL_FP_APPLY_COMMIT, SBL_REPL_FP_APPLY_STOP, SBL_REPL_FP_BEFORE_APPEND,
       SBL_REPL_FP_BEFORE_COMMIT, SBL_REPL_FP_FAIL_COMMIT, SBL_REPL_FP_COUNT };
/* While fail point fp is on (at most its max_ms): wait, polling go_on(arg)
 * (when not NULL) every 10 ms.  False when go_on said to stop. */
bool sbl_repl_fp_wait(int fp, bool (*go_on)(void *), void *arg);
/* Whether fail point fp is on for a write to ns (its data.ns, if any). */
bool sbl_repl_fp_applies(int fp, const char *ns);
/* The storage's end-of-transaction observer (sbl_storage_set_commit_observer). */
void sbl_oplog_on_commit(sbl_session_t *s, uint64_t commit_ts, bool committed);

/* ---- the oplog's visibility point (repl_visible.c) ----------------------- */

/* Forget every reservation: everything up to ts ended, and ts (term) is the
 * newest committed entry; before is_ready, scans are not limited (the oplog
 * is being read at its open). */
void sbl_oplog_vis_reset(bool is_ready, uint64_t ts, int64_t term);
/* ts became the commit timestamp of owner's transaction (a storage session),
 * which writes an entry at it (term: the entry's); under the insert lock.
 * False when out of memory: the entry must not be written. */
bool sbl_oplog_vis_reserve(uint64_t ts, int64_t term, const void *owner);
/* owner's transaction ended: its reservations committed or rolled back. */
void sbl_oplog_vis_end(const void *owner, bool committed);
/* The newest ts natural scans of the oplog may return (UINT64_MAX: any):
 * below every reservation in flight and every one made later. */
uint64_t sbl_oplog_vis_limit(void);
/* The oldest ts reserved whose transaction has not ended (0: none): an
 * entry written at it, or at any later ts, may still be invisible. */
uint64_t sbl_oplog_vis_oldest_in_flight(void);
/* The ts and t of the newest entry the oplog holds, committed (read from the
 * oplog in s, outside any transaction of s; {0, 0} when empty).  Unlike
 * sbl_oplog_last_ts/term, not moved by a write that took a ts and then
 * aborted (a step-down racing it gives that ts the new term). */
int sbl_oplog_last_committed(sbl_session_t *s, uint64_t *tsp, int64_t *termp, sbl_err_t *err);
/* The term new entries carry (the coordinator's current term; -1: none).
 * A change waits for the primary commits the gate let in (below). */
void sbl_oplog_set_term(int64_t term);
/* The storage's commit gate (storage.h) for transactions holding entries
 * this member wrote as primary of term: 0 while it still is, else
 * InterruptedDueToReplStateChange; leave ends a commit let in. */
int sbl_oplog_gate_enter(int64_t term, sbl_err_t *err);
void sbl_oplog_gate_leave(void);

/* Read the newest entry again (after the oplog was truncated). */
int sbl_oplog_reload_last(sbl_session_t *s, sbl_err_t *err);
/* Append doc (a primary's entry) in a transaction of its own. */
int sbl_repl_append_alone_raw(sbl_session_t *s, const bson_t *doc, sbl_err_t *err);

/* While a secondary's applier runs one entry through the command layer,
 * the entry (its thread's), and whether it was written to the oplog. */
extern _Thread_local const bson_t *sbl_repl_applying;
extern _Thread_local bool sbl_repl_applied_written;
/* The entry the fetching thread applies (repl_sync.c) and its ts, t and
 * wall, read once when it was fetched: sbl_oplog_append_raw and the group
 * take them from here when given that entry (doc NULL: none). */
typedef struct {
    const bson_t *doc;
    uint64_t ts;  /* 0: doc has no timestamp ts */
    int64_t t;    /* 0: no number t */
    int64_t wall; /* 0: no date wall */
} sbl_repl_head_t;
extern _Thread_local sbl_repl_head_t sbl_repl_head;
/* While it applies a transaction's operation: the entry that holds it (a
 * large transaction's partial one, or NULL: sbl_repl_applying) and its
 * index there, which key the operation's pre-image. */
extern _Thread_local const bson_t *sbl_repl_image_entry;
extern _Thread_local int64_t sbl_repl_image_index;
/* Store old_doc as the pre-image of the operation at index (applyOpsIndex;
 * 0 outside a transaction) of the entry at ts, in config.system.preimages
 * as mongod: {_id: {nsUUID, ts, applyOpsIndex}, operationTime, preImage}. */
int sbl_repl_write_preimage(sbl_session_t *s, const uint8_t *uuid, uint64_t ts, int64_t index,
                            int64_t wall_ms, const bson_t *old_doc, sbl_err_t *err);
/* Set while the entry is one of our own oplog's, replayed after a restart
 * (repl_recover.c): the change commits at the entry's ts and the entry is
 * not written again. */
extern _Thread_local bool sbl_repl_replaying;
/* True when this member is PRIMARY (repl_coord.c). */
bool sbl_repl_is_primary(void);

/* ---- the pure rules (repl_rules.c): config, votes, commit point ------- */

#define SBL_RS_MAX_MEMBERS 50
#define SBL_RS_MAX_VOTERS 7

/* An optime: the entry's term and ts; ordered by term, then ts. */
typedef struct sbl_optime {
    int64_t t;
    uint64_t ts;
} sbl_optime_t;
int sbl_optime_cmp(sbl_optime_t a, sbl_optime_t b);
/* The ts and t of the newest entry whose transaction committed with no
 * entry still in flight below it (the visibility point, repl_visible.c;
 * {0, 0} before the first): this member's applied and durable position,
 * the one it reports to others.  sbl_oplog_last_ts/term may be newer (an
 * entry written, not yet committed, or aborted). */
sbl_optime_t sbl_oplog_committed(void);

#define SBL_RS_MAX_TAGS 8   /* tags per member, constraints per write concern mode */
#define SBL_RS_MAX_MODES 8  /* settings.getLastErrorModes */
#define SBL_RS_NAME_LEN 64  /* a tag's name or value, a mode's name */
#define SBL_RS_MAX_DELAY_S (3600LL * 24 * 366)

typedef struct sbl_rs_tag {
    char k[SBL_RS_NAME_LEN], v[SBL_RS_NAME_LEN];
} sbl_rs_tag_t;

typedef struct sbl_rs_member {
    int id;
    char host[256];
    double priority;
    int votes;
    bool hidden;
    bool arbiter;    /* arbiterOnly: votes, holds no data */
    bool build_indexes; /* buildIndexes (true): false keeps the _id index only */
    int64_t delay_s; /* secondaryDelaySecs */
    int ntags;
    sbl_rs_tag_t tags[SBL_RS_MAX_TAGS];
} sbl_rs_member_t;

/* A custom write concern (settings.getLastErrorModes): {tag: count ...}, met
 * when the members holding a write carry count distinct values of each tag. */
typedef struct sbl_rs_mode {
    char name[SBL_RS_NAME_LEN];
    int n;
    char tag[SBL_RS_MAX_TAGS][SBL_RS_NAME_LEN];
    int count[SBL_RS_MAX_TAGS];
} sbl_rs_mode_t;

typedef struct sbl_rs_config {
    char set_name[128];
    int64_t version;
    int64_t term;
    int n;
    sbl_rs_member_t m[SBL_RS_MAX_MEMBERS];
    int64_t heartbeat_ms;        /* settings.heartbeatIntervalMillis (2000) */
    int64_t election_timeout_ms; /* settings.electionTimeoutMillis (10000) */
    bool chaining;               /* settings.chainingAllowed (true) */
    int64_t catchup_timeout_ms;  /* settings.catchUpTimeoutMillis (-1: no limit) */
    int64_t catchup_takeover_ms; /* settings.catchUpTakeoverDelayMillis (30000; -1: none) */
    int nmodes;
    sbl_rs_mode_t modes[SBL_RS_MAX_MODES];
} sbl_rs_config_t;

/* Whether this member builds secondary indexes: false when its own config
 * says buildIndexes: false (it applies no createIndexes entry and initial
 * sync clones the _id index only); true before it has a config. */
bool sbl_rs_self_builds_indexes(void);
/* Parse and check a config as mongod's replSetInitiate/heartbeats do
 * (InvalidReplicaSetConfig 93 with mongod's messages), into cfg. */
int sbl_rs_config_parse(const bson_t *doc, sbl_rs_config_t *cfg, sbl_err_t *err);
/* The number of voting members and the majority of them. */
int sbl_rs_voters(const sbl_rs_config_t *cfg);
int sbl_rs_majority(const sbl_rs_config_t *cfg);
/* Member self's place for its periodic checkpoints
 * (sbl_storage_set_checkpoint_phase): the data-bearing members, in config
 * order, take equal shares of the period, each set shifted within a share
 * by a hash of its name (the sets of a cluster on one host); -1 for an
 * arbiter or a member not in cfg. */
double sbl_rs_checkpoint_phase(const sbl_rs_config_t *cfg, int self);
/* The sync source rules (mongod's chooseNewSyncSource, repl_rules.c): the
 * member a secondary should tail, or -1.  c[i].ping_ms is the member's average
 * heartbeat time; a member may serve when it is up, PRIMARY or SECONDARY,
 * holds data, is not behind us (the primary too, as mongod: one in
 * catch-up lacks the entries of the member ahead of it) and does not tail us
 * (sbl_rs_source_cycle: two members level after a step-down took each other
 * and kept each other, with no majority for the new primary); the first pass
 * skips hidden and delayed members, non-voters when we vote and members more
 * than p->max_lag_s behind the primary; the nearest wins, and the primary
 * unless another is more than p->threshold_ms nearer.  Without
 * chainingAllowed: the primary only.  The parameters are mongod's server
 * parameters (getParameter/setParameter, repl_flow.c's table). */
#define SBL_RS_MAX_SYNC_LAG_S 30          /* maxSyncSourceLagSecs (start-up only) */
#define SBL_RS_SYNC_PING_THRESHOLD_MS 5   /* changeSyncSourceThresholdMillis */
#define SBL_RS_SYNC_CHANGES_PER_HOUR 3    /* maxNumSyncSourceChangesPerHour */
typedef struct sbl_rs_sync_params {
    int64_t max_lag_s;    /* maxSyncSourceLagSecs */
    int64_t threshold_ms; /* changeSyncSourceThresholdMillis (0: never for ping) */
    int max_changes;      /* maxNumSyncSourceChangesPerHour */
} sbl_rs_sync_params_t;
/* The parameters in force (repl_flow.c). */
void sbl_rs_sync_params(sbl_rs_sync_params_t *p);
/* oplogBatchDelayMillis (repl_flow.c's table): how long after the applier
 * starts a batch it waits for more entries before it ends the batch (0: it
 * ends one whenever nothing fetched is waiting). */
int64_t sbl_rs_batch_delay_ms(void);
/* oplogFetcherUsesExhaust (mongod's, default true, start-up only): the
 * fetcher's getMore asks the source to stream (exhaust), not one reply each. */
bool sbl_rs_fetcher_uses_exhaust(void);
typedef struct sbl_rs_candidate {
    bool up;
    int state;
    sbl_optime_t applied;
    int64_t ping_ms;
    int64_t term;     /* the term its last heartbeat gave */
    bool has_source;  /* its last heartbeat named a sync source of its own */
    int source;       /* with has_source: that member's index (-1: not in our config) */
} sbl_rs_candidate_t;
int sbl_rs_pick_sync_source(const sbl_rs_config_t *cfg, const sbl_rs_candidate_t *c, int self,
                            int primary, sbl_optime_t mine, const sbl_rs_sync_params_t *p);
/* Whether member i tails self, directly or through others, as their last
 * heartbeats said (following each one's source at most cfg->n times): a
 * source in such a cycle gets nothing new, as none of the cycle tails the
 * primary, and a primary counting on them for its majority waits. */
bool sbl_rs_source_cycle(const sbl_rs_config_t *cfg, const sbl_rs_candidate_t *c, int self,
                         int i);
#define SBL_RS_SOURCE_CYCLE_REASON "the sync source syncs from us, directly or through others"
/* The times (ms) of this member's last changes of sync source, oldest
 * first, as mongod's RecentSyncSourceChanges: every change counts (not only
 * the ones for a nearer member); only the last SBL_RS_CHANGES_KEPT are kept,
 * at least as many as any limit that matters within an hour of changes. */
#define SBL_RS_CHANGES_KEPT 64
typedef struct sbl_rs_source_changes {
    int64_t at[SBL_RS_CHANGES_KEPT];
    int n;
} sbl_rs_source_changes_t;
void sbl_rs_source_changes_add(sbl_rs_source_changes_t *h, int64_t now_ms);
/* Whether max or more of them were within the hour before now_ms. */
bool sbl_rs_source_changes_too_often(const sbl_rs_source_changes_t *h, int max, int64_t now_ms);
/* Why a secondary tailing member cur should stop and choose again, or NULL to
 * stay, as mongod's shouldChangeSyncSource after each fetched batch (the
 * caller has checked what needs no view of the members: still a secondary,
 * replSetSyncFrom, a primary known): chaining is off and cur is not the
 * primary; cur is down or neither PRIMARY nor SECONDARY; cur tails us,
 * directly or through others (sbl_rs_source_cycle); cur is not the
 * primary, tails no one and is not ahead of us (it gets no new entries);
 * cur is more than p->max_lag_s behind a member that may serve and is ahead
 * of it; or cur's ping is over p->threshold_ms and another member that may
 * serve (first pass) and gets something new (a source of its own, or ahead
 * of us) is nearer by more than that, unless we are delayed, the
 * threshold is 0 or changes were too many in the last hour (changes, now_ms:
 * p->max_changes).  A member never leaves cur only because the primary is
 * back within the threshold: that is what made a hidden member flap. */
const char *sbl_rs_source_change_reason(const sbl_rs_config_t *cfg, const sbl_rs_candidate_t *c,
                                        int self, int primary, int cur, sbl_optime_t mine,
                                        const sbl_rs_sync_params_t *p,
                                        const sbl_rs_source_changes_t *changes, int64_t now_ms);
/* Whether a member whose last applied optime is mine is fresh enough to
 * stand for a priority takeover, latest being the newest applied optime it
 * knows of (its own or a member's that is up), as mongod's
 * _amIFreshEnoughForPriorityTakeover: of the same term (a member whose
 * newest entry is of an older term than the primary's has not replicated
 * the primary's writes, and may hold a diverged tail), and within
 * SBL_RS_PRIORITY_TAKEOVER_WINDOW_S seconds of it (in the same second,
 * within 1000 increments). */
#define SBL_RS_PRIORITY_TAKEOVER_WINDOW_S 2
bool sbl_rs_priority_takeover_fresh(sbl_optime_t mine, sbl_optime_t latest);
/* Whether a catch-up takeover applies to member self (mongod's rules, the
 * settings' part and the view of the others; the caller adds not frozen, not
 * in an election of its own, a disk that takes writes): catchUpTakeoverDelayMillis
 * is not -1 nor catchUpTimeoutMillis 0, self is electable, primary (c[primary])
 * is up, of our term and behind us while our newest entry mine is of an
 * earlier term (it has written nothing: it is in catch-up), and no member up
 * is ahead of us. */
bool sbl_rs_catchup_takeover_applies(const sbl_rs_config_t *cfg, const sbl_rs_candidate_t *c,
                                     int self, int primary, int64_t term, sbl_optime_t mine);
/* May member i stand for election: priority > 0, votes, not an arbiter. */
bool sbl_rs_electable(const sbl_rs_config_t *cfg, int i);
/* How many voting members hold data, and how many of them a majority write
 * needs (mongod's writeMajorityCount: the voters' majority, at most them). */
int sbl_rs_data_voters(const sbl_rs_config_t *cfg);
int sbl_rs_write_majority(const sbl_rs_config_t *cfg);
int sbl_rs_arbiters(const sbl_rs_config_t *cfg);
/* mongod's implicit default write concern: {w: 1} when there are arbiters
 * and the data-bearing voters are no more than the voters' majority, else
 * {w: "majority"}. */
bool sbl_rs_implicit_majority(const sbl_rs_config_t *cfg);
/* The index of write concern mode name in cfg, -1 when there is none. */
int sbl_rs_find_mode(const sbl_rs_config_t *cfg, const char *name);
/* Whether the data-bearing members whose applied optime is at least op
 * (term first, as sbl_optime_cmp) meet mode m. */
bool sbl_rs_mode_satisfied(const sbl_rs_config_t *cfg, int m, const sbl_optime_t *applied,
                           sbl_optime_t op);

/* What a voter knows when a replSetRequestVotes arrives, and the request. */
typedef struct sbl_vote_state {
    int64_t term;            /* current term */
    int64_t last_vote_term;  /* lastVote (durable): the term voted in, -1 none */
    int last_vote_candidate; /* and for whom (member index) */
    sbl_optime_t last_applied;
    int64_t cfg_version, cfg_term;
    const char *set_name;
} sbl_vote_state_t;
typedef struct sbl_vote_req {
    const char *set_name;
    bool dry_run;
    int64_t term;
    int candidate; /* index in the config */
    int64_t cfg_version, cfg_term;
    sbl_optime_t last_applied;
} sbl_vote_req_t;
/* pv1's vote rule (TopologyCoordinator::processReplSetRequestVotes): grant
 * when the set and config match, the candidate's term is not below ours,
 * its last applied optime is at least ours and (a real election) we have
 * not voted in that term.  A real vote updates st->last_vote_*; the caller
 * makes it durable before answering.  A real request of a higher term
 * moves st->term (the caller steps down first if primary).  Returns
 * whether the vote is granted; reason says why not. */
bool sbl_rs_vote(sbl_vote_state_t *st, const sbl_vote_req_t *req, char *reason, size_t n);

/* The majority commit point: the newest optime a majority of the voting
 * members hold (applied[i] for member i: the primary passes its own applied
 * optime and the others' journaled ones; one of a later term than
 * term counts as nothing: another branch of history), taken only when it is
 * of the current term (Raft's rule: earlier terms' entries commit through a
 * current-term entry), and never older than current. */
sbl_optime_t sbl_rs_commit_point(const sbl_rs_config_t *cfg, const sbl_optime_t *applied,
                                 int64_t term, sbl_optime_t current);
/* The stable timestamp a member may give WiredTiger: a primary, the
 * commit point; a secondary, the commit point when its own last entry is of
 * that term or a later one (else its tail may have diverged: 0), never
 * past its last entry; neither past all_durable (a commit in flight; 0:
 * unknown).  Callers ignore values not above the last one set. */
uint64_t sbl_rs_stable_for(bool primary, sbl_optime_t commit, sbl_optime_t applied,
                           uint64_t all_durable);
/* Whether the voting data-bearing members other than self (self: -1, none)
 * that hold op durably are a write majority by themselves (durable: each
 * member's journaled optime, self's ignored; one of a later term than ours
 * is on another branch and counts for nothing, as in the commit point).  A
 * w:"majority" write on the primary is then durable on a majority whether
 * or not the primary's own journal flush has ended. */
bool sbl_rs_durable_without(const sbl_rs_config_t *cfg, int self, const sbl_optime_t *durable,
                            sbl_optime_t op, int64_t term);
/* How many data-bearing members have applied the write at op (w: N): those
 * whose applied optime is at least op, term first, as mongod compares
 * OpTimes.  A member whose newest entry is of an older term did not apply
 * op, whatever its ts (a former primary's unreplicated tail). */
int sbl_rs_count_applied(const sbl_rs_config_t *cfg, const sbl_optime_t *applied,
                         sbl_optime_t op);

/* ---- the coordinator's state (repl_coord.c), shared by the heartbeat
 * and election thread (repl_hb.c), the applier (repl_sync.c) and the
 * status replies (repl_status.c).  Everything but state and topology is
 * read and written under sbl_rs.lock. ------------------------------------ */

#include <pthread.h>
#include <stdatomic.h>

/* Member states, with mongod's numbers. */
enum {
    SBL_RS_STANDALONE = -1,
    SBL_RS_STARTUP = 0,
    SBL_RS_PRIMARY = 1,
    SBL_RS_SECONDARY = 2,
    SBL_RS_RECOVERING = 3,
    SBL_RS_STARTUP2 = 5,
    SBL_RS_ARBITER = 7,
    SBL_RS_ROLLBACK = 9,
    SBL_RS_DOWN = 8,
};
const char *sbl_rs_state_str(int state);
/* Wait on sbl_rs.cond (lock held) for a broadcast, at most ms: a change of
 * state or config, or of positions other than a position report's. */
void sbl_rs_wait_locked(int64_t ms);
/* The same on pos_cond: until positions, the commit point, state or config
 * moved, or the time is up. */
void sbl_rs_wait_pos_locked(int64_t ms);
/* Wake both: a change of state, config or our applied position. */
void sbl_rs_broadcast_locked(void);

typedef struct sbl_rs_peer {
    int state;                     /* from its last heartbeat response; DOWN when unreachable */
    int64_t term;                  /* and the term it gave (0: none yet) */
    bool up;                       /* the last heartbeat was answered */
    int64_t last_ok_ms;            /* when a heartbeat was last answered (0: never) */
    int64_t next_hb_ms;            /* when to send the next one */
    int64_t ping_ms;
    int64_t ping_avg_ms;           /* a moving average of ping_ms: sync source choice */
    int64_t up_since_ms;
    sbl_optime_t applied, durable; /* heartbeats and replSetUpdatePosition */
    int64_t applied_wall, durable_wall; /* the wall times of those entries */
    int64_t cfg_version;
    char sync_source[256];
    char msg[160];                 /* lastHeartbeatMessage */
} sbl_rs_peer_t;

typedef struct sbl_rs {
    pthread_mutex_t lock;
    /* state, config, our applied position or the commit point moved (all
     * broadcast on both, sbl_rs_broadcast_locked) */
    pthread_cond_t cond;
    /* the same, and a position report (replSetUpdatePosition, broadcast on
     * this one only): what waits for positions waits here, and the waiter,
     * heartbeat and sync threads sleep through reports */
    pthread_cond_t pos_cond;
    char *set_name;
    char *cluster_key; /* keyFile's key, or NULL: connections to members authenticate */
    int64_t oplog_bytes;
    int port;
    bson_t *config; /* the stored config document; NULL until initiated */
    sbl_rs_config_t cfg;
    int self; /* this member's index in cfg, -1 */
    atomic_int state;
    atomic_int_fast64_t topology;
    int64_t term;
    int64_t last_vote_term;
    int last_vote_candidate;
    int primary;                /* index of the primary we know of, -1 */
    int64_t primary_seen_ms;    /* the election timer's start: primary heard, vote given */
    int64_t election_offset_ms; /* the timer's random part */
    int64_t freeze_until_ms;    /* replSetFreeze, replSetStepDown: no candidacy before */
    bson_oid_t election_id;
    uint64_t election_ts;
    int64_t election_ms;
    sbl_optime_t commit; /* the majority commit point */
    int64_t commit_wall;
    sbl_rs_peer_t peer[SBL_RS_MAX_MEMBERS];
    char config_source[256]; /* a member that has a newer config than ours */
    char sync_source[256];   /* the member our applier tails ("" none) */
    char *dbpath;            /* for dbpath/rollback/ */
    bool sync_halted;        /* stopped syncing (sync_msg says why): resync needed */
    char sync_msg[256];      /* infoMessage / hbmsg: too stale, rollback refused */
    bool stopping;
    int maintenance;       /* open replSetMaintenance requests: RECOVERING while > 0 */
    char sync_from[256];   /* replSetSyncFrom's member ("" none) */
    /* primary catch-up: elected, not yet taking writes (repl_hb.c) */
    bool catching_up;
    bool catchup_abort;    /* replSetAbortPrimaryCatchUp */
    /* electionCandidateMetrics of the last election this member won */
    struct {
        const char *reason;          /* NULL: none since start-up */
        int64_t date_ms, term, timeout_ms, new_term_ms;
        int votes_needed;
        double priority;
        sbl_optime_t commit, seen, target; /* target {0, 0}: nobody was ahead */
        int64_t catchup_ops;
    } won;
} sbl_rs_t;
extern sbl_rs_t sbl_rs;

/* ---- signed $clusterTime (repl_keys.c) -------------------------------- */

/* keyRotationIntervalSecs: 90 days, as mongod. */
#define SBL_RS_KEY_ROTATION_S (90LL * 24 * 3600)
/* True on a member with a keyFile: cluster times are signed and checked. */
bool sbl_rs_keys_on(void);
/* Sign ts: hash and keyId (zeros without a keyFile); false when this member
 * holds no key valid at ts yet (the reply then carries no $clusterTime). */
bool sbl_rs_sign_time(uint64_t ts, uint8_t hash[20], int64_t *key_id);
/* The thread that reads the keys and, on the primary, writes new ones. */
int sbl_rs_keys_start(void);
void sbl_rs_keys_stop(void);

/* Flow control's pure parts (repl_flow_rules.c).  The samples: every
 * period-th entry the primary writes, its ts, the entries since start-up
 * (ops) and the tickets taken since start-up; v[head .. n). */
#define SBL_FLOW_MAX_TICKETS 1000000000
typedef struct sbl_flow_sample {
    uint64_t ts;
    int64_t ops, locks;
} sbl_flow_sample_t;
typedef struct sbl_flow_samples {
    sbl_flow_sample_t *v;
    size_t head, n, cap;
    int64_t ops, last_ops; /* entries counted, and at the last sample */
} sbl_flow_samples_t;
/* Count one entry at ts (locks: tickets taken so far); a sample every
 * period entries, at most max kept (then the newest is overwritten). */
void sbl_flow_samples_add(sbl_flow_samples_t *s, uint64_t ts, int64_t locks, int64_t period,
                          size_t max);
/* The entries from prev to curr as the samples at or after each tell; -1
 * when they cannot (nothing sampled at or after prev). */
int64_t sbl_flow_ops_between(const sbl_flow_samples_t *s, uint64_t prev, uint64_t curr);
/* Tickets per entry between the last two samples; -1 with fewer than two. */
double sbl_flow_locks_per_op(const sbl_flow_samples_t *s);
/* Drop samples older than ts, keeping two. */
void sbl_flow_samples_trim(sbl_flow_samples_t *s, uint64_t ts);
void sbl_flow_samples_free(sbl_flow_samples_t *s);
/* What the refresher saw this second, and the parameters in force. */
typedef struct sbl_flow_in {
    bool enabled, usable;     /* enableFlowControl; a writable primary */
    double locks_per_op;      /* sbl_flow_locks_per_op */
    int64_t locks_last;       /* tickets taken in the last second */
    int64_t last_wall, commit_wall; /* wall times of the last write and the commit point */
    int64_t ops_since_commit; /* sbl_flow_ops_between(commit point, last write) */
    bool comparable;          /* as many members as last second, sustainer not gone back */
    int64_t sustainer_applied; /* sbl_flow_ops_between(its last position, its position) */
    int64_t now_us;
    double target_lag_s, threshold_pct, decay, fudge, adder, multiplier;
    int64_t min_tickets, warn_s;
} sbl_flow_in_t;
/* What the decisions carry from one second to the next (serverStatus's). */
typedef struct sbl_flow_state {
    int32_t tickets;        /* the last count handed out (targetRateLimit) */
    int32_t sustainer_rate; /* sustainerRate */
    bool lagged;            /* isLagged */
    int64_t lagged_count, lagged_us, lagged_since_us, last_move_us;
    bool warn;              /* out: log that the sustainer does not move */
} sbl_flow_state_t;
/* The next second's tickets (also in st->tickets), mongod's rules: 10^9
 * when off, not a writable primary or with fewer than two samples; not
 * lagged: (last + adder) x multiplier; lagged: sustainer_applied x
 * decay^((lag - threshold) / threshold) x fudge x locks_per_op (locks_last / 2
 * when unknown); no conclusion: the last; at least min_tickets. */
int32_t sbl_flow_decide(sbl_flow_state_t *st, const sbl_flow_in_t *in);

/* Flow control (repl_flow.c): the primary's oplog writer counts each entry
 * it writes (ts: the entry's, under the oplog's lock); the refresher thread,
 * started with the others and stopped before the oplog closes. */
void sbl_rs_flow_sample(uint64_t ts);
int sbl_rs_flow_start(void);
void sbl_rs_flow_stop(void);

/* This member's last applied optime. */
sbl_optime_t sbl_rs_my_applied(void);
/* Move to term (higher than ours) and make it durable; a primary steps
 * down.  Lock held. */
void sbl_rs_update_term_locked(int64_t term);
/* Step down to SECONDARY (lock held): topologyVersion moves, waiters wake. */
void sbl_rs_step_down_locked(const char *why);
/* Persist term and lastVote in local.replset.election (lock held). */
int sbl_rs_persist_vote_locked(sbl_err_t *err);
/* Win an election of term: write the "new primary" no-op and say PRIMARY
 * (lock held).  Returns 0 or the error of the no-op's write. */
int sbl_rs_become_primary_locked(int64_t term, sbl_err_t *err);
/* Adopt a newer config received from a member (heartbeat response). */
int sbl_rs_adopt_config(const bson_t *config, sbl_err_t *err);
/* Recompute the commit point from the members' applied optimes (lock
 * held; primary only); wakes waiters (sbl_rs.cond).  The quiet one wakes
 * nobody: its caller broadcasts sbl_rs.cond once it released the lock. */
void sbl_rs_update_commit_locked(void);
void sbl_rs_update_commit_quiet_locked(void);
/* The commit point and its entry's wall time as members send them
 * (lastOpCommitted, lastCommittedWall: heartbeat and position replies),
 * lock held. */
void sbl_rs_append_commit_locked(bson_t *r);
/* Adopt the commit point of a member's reply (the fields above) when it is
 * newer than ours, with its wall time (lock held). */
void sbl_rs_learn_commit_locked(const bson_t *reply);
/* Restart the election timer with a new random offset (lock held). */
void sbl_rs_reset_election_timer_locked(int64_t now);

/* {ts, t} documents (repl_status.c, repl_hb.c). */
void sbl_repl_append_optime(bson_t *r, const char *k, uint64_t ts, int64_t t);
sbl_optime_t sbl_repl_optime_at(const bson_t *d, const char *k);
/* The applier's runner (repl_sync.c). */
extern sbl_repl_run_fn sbl_rs_runner;

/* Apply entry e (repl_sync.c): its change through the runner,
 * idempotently, and the entry itself in our oplog (not when replaying). */
int sbl_rs_apply_entry(const bson_t *e, sbl_err_t *err);
/* The same on a writer ahead of its turn: any failure changes nothing and
 * returns WriteConflict (the writer runs it again at its turn). */
int sbl_rs_apply_entry_ahead(const bson_t *e, sbl_err_t *err);

/* ---- parallel application (repl_apply.c) -------------------------------------
 * The applier hands entries to a pool of writer threads, one document's
 * entries to one writer, commits in ts order; 'c' entries are barriers the
 * caller applies alone after sbl_rs_apply_drain. */
int sbl_rs_default_writer_threads(void);
/* Start the writers (with the applier thread; none for one writer: the
 * applier thread applies every entry itself) / stop them (pending entries
 * are dropped: drain first). */
int sbl_rs_apply_pool_start(void);
void sbl_rs_apply_pool_stop(void);
/* A new stream of entries: a writer checks go_on(go_on_arg) before each
 * entry (false: the entry fails, the stream stops) and calls
 * applied(applied_arg) after each one it committed.  Both until the next
 * call (NULLs after the last drain). */
void sbl_rs_apply_stream(bool (*go_on)(void *), void *go_on_arg, void (*applied)(void *),
                         void *applied_arg);
/* Whether entry e must be applied alone (a command, a transaction, a
 * prepared transaction's entry; every entry when there are no writers). */
bool sbl_rs_apply_is_barrier(const bson_t *e);
/* Hand e (copied) to its writer; waits while too many are in flight.  An
 * error when an entry handed out before failed (the stream must stop). */
int sbl_rs_apply_dispatch(const bson_t *e, sbl_err_t *err);
/* Wait until every entry handed out is applied or dropped; the first failure
 * (then nothing after it committed), else 0. */
int sbl_rs_apply_drain(sbl_err_t *err);
/* Groups (repl_apply.c): with no writers, the fetching thread applies
 * consecutive document entries of ordinary collections in one transaction.
 * sbl_rs_group_takes: whether e may join a group.  sbl_rs_group_apply: apply
 * e in the open group (opening one); it may commit the group when full.
 * sbl_rs_group_commit: commit the open group (none: 0).  A group that fails
 * anywhere rolls back and its entries are applied again one at a time; the
 * error is then the first of those, as the serial applier's. */
bool sbl_rs_group_takes(const bson_t *e);
/* (sbl_rs_group_takes keeps the collection it opened for the
 * sbl_rs_group_apply of the same entry, which releases it.) */
int sbl_rs_group_apply(const bson_t *e, sbl_err_t *err);
int sbl_rs_group_commit(sbl_err_t *err);
bool sbl_rs_group_open(void);
/* Apply grouped document entry e (i, u, d) straight through storage in the
 * open transaction (repl_crud.c); SBL_RS_NOT_DIRECT when e needs the
 * command path, else 0 or the error. */
#define SBL_RS_NOT_DIRECT (-1)
int sbl_rs_apply_direct(const bson_t *e, sbl_err_t *err);
/* As sbl_rs_apply_direct with e's collection c already open (referenced by
 * the caller; NULL: opened here). */
int sbl_rs_apply_direct_in(const bson_t *e, sbl_coll_t *c, sbl_err_t *err);
/* As sbl_rs_apply_direct for operation op of a transaction's applyOps
 * array, in the transaction that applies the whole entry: the entry itself
 * (sbl_repl_applying) is written by the first change's observer or by the
 * caller, not here.  SBL_RS_NOT_DIRECT also when the document cannot be
 * read (the command path then meets what it meets); else 0, or a write's
 * error (the caller's transaction must then fail). */
int sbl_rs_apply_txn_op(const bson_t *op, sbl_err_t *err);
/* A transaction's entry: its applyOps array (false when e is another entry; repl_sync.c). */
bool sbl_rs_apply_ops_of(const bson_t *e, bson_iter_t *ops);
/* From sbl_oplog_append_raw on a writer: wait for the entry's turn before
 * it takes the oplog's lock (0 at once elsewhere); WriteConflict when an
 * earlier entry needs this writer's transaction out of its way, another
 * error when an earlier entry failed. */
int sbl_rs_apply_turn(sbl_err_t *err);
/* The session record of applied entry doc (ts): in s's transaction, or on a
 * writer, in a transaction of its own at ts (see repl_apply.c). */
int sbl_rs_apply_record(sbl_session_t *s, const bson_t *doc, uint64_t ts, sbl_err_t *err);
/* Move WiredTiger's stable timestamp (and oldest, a window behind) to what
 * this member knows is majority committed and has applied (lock held). */
void sbl_rs_publish_stable_locked(void);
/* The stable timestamp last published (lock held; majority reads read
 * there), or past it what it would be but for a prepared transaction that
 * holds it back (its commit or abort lets it move on). */
uint64_t sbl_rs_stable_unclamped_locked(void);

/* In primary catch-up, from the election win until it takes writes (its
 * first heartbeat round, then applying what a member ahead has): the one
 * predicate by which replSetGetStatus, hello and heartbeats name this
 * member PRIMARY meanwhile (repl_status.c, repl_hb.c).  Lock held. */
bool sbl_rs_catching_up_locked(void);

/* serverStatus.electionMetrics (repl_monitor.c), as mongod counts them: a
 * real election run for reason (lastElectionReason's words), then won; how a
 * catch-up ended and the entries it applied; a primary (or one in catch-up)
 * that stepped down on seeing a higher term. */
enum { SBL_CATCHUP_SUCCEEDED, SBL_CATCHUP_ALREADY, SBL_CATCHUP_SKIPPED, SBL_CATCHUP_TIMED_OUT,
       SBL_CATCHUP_ERROR, SBL_CATCHUP_NEW_TERM, SBL_CATCHUP_ABORTED, SBL_CATCHUP_N };
void sbl_rs_count_election(const char *reason, bool won);
void sbl_rs_count_catchup(int outcome, int64_t ops);
void sbl_rs_count_higher_term_step_down(void);

/* ---- recovery and rollback (repl_recover.c) ------------------------------ */

/* After a restart: apply our own oplog's entries after the stable
 * checkpoint's timestamp (all of them when the checkpoint has none). */
int sbl_rs_replay_oplog(sbl_err_t *err);
/* ... the entries after from (a rollback: the recovery's timestamp). */
int sbl_rs_replay_oplog_from(uint64_t from, sbl_err_t *err);
/* End the client transactions open on this member (the command layer's
 * aborter); rollback: the prepared ones too, after waiting for the commands
 * running in them (sbl_repl_abort_txns_fn). */
void sbl_rs_abort_txns(bool rollback);

/* Our history diverged from host's (our last entry is not in its oplog):
 * find the common point, write what we undo to dbpath/rollback/, roll back
 * to it (rollback_to_stable), truncate our oplog after it (repl_recover.c).
 * c is a connection to host.  Returns 0 when done (syncing resumes), or an
 * error after which this member stops syncing (sync_halted). */
struct _mongoc_client_t;
int sbl_rs_rollback(struct _mongoc_client_t *c, const char *host, sbl_err_t *err);

/* ---- a secondary's position reports (repl_report.c) ---------------------- */

/* The reporter of one sync (mongod's Reporter): its thread, with its own
 * connection to the source host, sends replSetUpdatePosition with our
 * journaled position as soon as it moves, and every second.  NULL when it
 * cannot start (positions then go with heartbeats and the last report). */
typedef struct sbl_rs_reporter sbl_rs_reporter_t;
sbl_rs_reporter_t *sbl_rs_reporter_start(const char *host);
/* Our applied optime moved (any thread; r may be NULL): a journal flush is
 * asked for (storage's group commit); its end hands the position to r. */
void sbl_rs_reporter_applied(void *r);
/* The same when the applier has applied everything fetched (it would wait
 * for the source next): the flush runs on the calling thread at once. */
void sbl_rs_reporter_caught_up(void *r);
/* Stop and free r (NULL: nothing). */
void sbl_rs_reporter_stop(sbl_rs_reporter_t *r);
/* Flush the journal and report our applied optime to host now (a sync's
 * end), on a connection of its own. */
void sbl_rs_report_position(const char *host);
/* Our journaled position as the last sync's flushes made it ({0, 0} before
 * its first), what heartbeats say as durableOpTime (lock held). */
sbl_optime_t sbl_rs_my_durable_locked(int64_t *wallp);
/* Change state (lock held): topologyVersion moves, waiters wake. */
void sbl_rs_set_state_locked(int st);
/* Forget the stable timestamp published (a rollback moved it back to ts). */
void sbl_rs_stable_reset(uint64_t ts);

/* ---- initial sync (repl_initsync.c) ------------------------------------- */

/* Set on the thread that clones: its writes are neither logged nor refused. */
extern _Thread_local bool sbl_repl_cloning;
/* Clone every database from host and write the source's newest entry (noted
 * before cloning) as our first oplog entry; the tailer then catches up.
 * Returns 0 or non-zero (logged; the caller tries again). */
int sbl_rs_initial_sync(const char *host);
/* True while an initial sync is unfinished (it survives restarts). */
bool sbl_rs_initial_sync_flagged(void);
/* replSetGetStatus's initialSyncStatus (lock held). */
void sbl_rs_append_initial_sync_status(bson_t *r);

/* ---- an operator's overrides (repl_member.c) ---------------------------- */

/* Take sbl_rs.lock on a member with a config (0), else NoReplicationEnabled
 * or NotYetInitialized without the lock. */
int sbl_rs_lock_initiated(sbl_err_t *err);

/* Whether a member in state st applies the oplog: SECONDARY, STARTUP2, or
 * RECOVERING for maintenance (lock held). */
bool sbl_rs_syncing_state_locked(int st);
/* The member replSetSyncFrom asked for, when it can serve now; else -1. */
int sbl_rs_requested_source_locked(void);

/* The threads (repl_hb.c, repl_sync.c). */
int sbl_rs_hb_start(void);
void sbl_rs_hb_stop(void);
int sbl_rs_sync_start(void);
void sbl_rs_sync_stop(void);
/* The write-concern waiter thread (repl_wait.c). */
int sbl_rs_waiter_start(void);
/* The write-concern waits that are over now, taken off the waiter thread's
 * list (lock held); answered by sbl_rs_waits_answer with the lock released
 * (NULL: none). */
void *sbl_rs_waits_take_locked(void);
void sbl_rs_waits_answer(void *done);
void sbl_rs_waiter_stop(void);
/* The pre-image remover's thread (repl_preimages.c). */
int sbl_rs_preimages_start(void);
void sbl_rs_preimages_stop(void);
/* Wake the heartbeat thread now (config adopted, state changed). */
void sbl_rs_hb_kick(void);

/* The URI of a connection to member host: mongodb://[__system:KEY@]host/?
 * with authSource=local when the set has a keyFile, then opts (URI options
 * joined by '&').  Returns false when it does not fit in n bytes. */
bool sbl_rs_member_uri(char *buf, size_t n, const char *host, const char *opts);
/* A plain connection (net.h's sbl_client_*) to member host, authenticated
 * as __system when the set has a keyFile: SBL_RS_CONNECT_MS for the
 * connect, SBL_RS_SOCKET_MS for each read and write after it (the
 * applier's libmongoc URI says the same); -1 when it cannot be made.  The
 * fetcher and the reporter use these: libmongoc's work per command (a copy
 * of the topology, the source's hello reply parsed again, twice) was a
 * third of a streaming secondary's instructions. */
#define SBL_RS_CONNECT_MS 2000
#define SBL_RS_SOCKET_MS 10000
int sbl_rs_dial(const char *host);

/* The oplog fetcher (repl_fetch.c): a thread that tails the oplog of the
 * member host from from_ts (0: its first entry) on its own connection and
 * queues the entries for the applier.  next hands out the next one
 * (SBL_FETCH_DOC, *docp the caller's to sbl_rs_fetched_free: a view into
 * the source's reply, kept until then), SBL_FETCH_IDLE when
 * the source had nothing more for now (the fetcher goes on waiting), or
 * SBL_FETCH_END once the cursor is done (an error, the source closed it),
 * waiting while nothing is queued; queued says whether next would return at
 * once.  stop ends the thread and frees what is queued.  NULL: not started. */
enum { SBL_FETCH_DOC, SBL_FETCH_IDLE, SBL_FETCH_END };
typedef struct sbl_rs_fetcher sbl_rs_fetcher_t;
sbl_rs_fetcher_t *sbl_rs_fetcher_start(const char *host, uint64_t from_ts);
int sbl_rs_fetcher_next(sbl_rs_fetcher_t *f, const bson_t **docp);
void sbl_rs_fetched_free(const bson_t *doc);
bool sbl_rs_fetcher_queued(sbl_rs_fetcher_t *f);
/* Sleep until until_us (sbl_now_us) while entries may still come: not woken
 * by each one queued (the point is to take many at once), but by a stop,
 * the fetcher's end, or a full queue seen on the way; whether anything is
 * queued then. */
bool sbl_rs_fetcher_wait_more(sbl_rs_fetcher_t *f, int64_t until_us);
void sbl_rs_fetcher_stop(sbl_rs_fetcher_t *f);

/* repl_monitor.c: count an applied entry (opcountersRepl), a batch applied;
 * what the fetcher and the reporter do (mongod's metrics.repl.network): a
 * reply to its find (getmore false) or getMore with docs entries in bytes,
 * taking us; a new find on a sync source's oplog (readersCreated); a
 * replSetUpdatePosition sent; us spent applying a fetched batch
 * (apply.batches.totalMillis). */
void sbl_rs_count_applied_op(const bson_t *e);
void sbl_rs_count_batch(void);
void sbl_rs_count_fetch(bool getmore, int64_t docs, int64_t bytes, int64_t us);
void sbl_rs_count_reader(void);
void sbl_rs_count_update_position(void);
void sbl_rs_count_apply_us(int64_t us);
/* Entries applied by this member's applier since start-up. */
int64_t sbl_rs_applied_ops(void);

#endif
