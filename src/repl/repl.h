/*
 * repl.h: replication (issue 24): the oplog (local.oplog.rs), pv1 elections
 * and heartbeats, secondaries that pull, the commit point as WiredTiger's
 * stable timestamp, recovery and rollback to a timestamp, initial sync,
 * replSetReconfig (docs/replication.md).
 *
 * How it hangs together:
 *  - sabled calls sbl_repl_start() after the storage engine is open and
 *    before the network starts; with a set name it installs the storage
 *    write observer, so every sbl_write on a replicated collection appends
 *    its oplog entry in the write's own transaction with the entry's ts as
 *    the WiredTiger commit timestamp.  Without a set name nothing is
 *    installed and the write path is the standalone one.
 *  - The command layer asks whether a write or read may run here
 *    (sbl_repl_check_write), adds the member's fields
 *    to hello, $clusterTime and operationTime to replies, runs the
 *    replSet* commands, and logs catalog changes as "c" entries
 *    (sbl_repl_log_*), which storage cannot see as document writes.
 *
 * What must stay true: timestamps (ts) strictly increase in the oplog's
 * natural order, across restarts; nothing in local.* is logged; an entry
 * commits or aborts with the change it describes (document writes) or is
 * written right after the catalog change succeeded ("c" entries: catalog
 * changes are not transactional in WiredTiger).
 */
#ifndef SBL_REPL_H
#define SBL_REPL_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/errors.h"
#include "storage/storage.h"

#define SBL_OPLOG_NS "local.oplog.rs"
#define SBL_REPLSET_NS "local.system.replset"
#define SBL_PREIMAGES_NS "config.system.preimages"
/* Cluster parameters, one document each (src/cmd/cluster_params.c); the
 * pre-image remover reads changeStreamOptions.preAndPostImages from it. */
#define SBL_CLUSTER_PARAMS_COLL "clusterParameters"
#define SBL_CLUSTER_PARAMS_NS "config.clusterParameters"

typedef struct sbl_repl_config {
    const char *set_name;  /* --replSet / replication.replSetName; NULL or "": standalone */
    int64_t oplog_size_mb; /* --oplogSizeMB; <= 0: 5% of the dbpath's free disk, 990 MB..50 GB */
    const char *dbpath;    /* for the default oplog size */
    int port;              /* this member's port (which config member is "me") */
    const char *cluster_key; /* security.keyFile's key: members authenticate as __system */
} sbl_repl_config_t;

/* Set by a chunk migration's thread around its writes (the recipient's
 * copy moving in, a range deletion): their oplog entries carry fromMigrate:
 * true, which change streams hide unless showMigrationEvents. */
extern _Thread_local bool sbl_repl_from_migrate;

/* replWriterThreadCount (a start-up parameter, 1..256): the threads a
 * secondary applies the oplog with; min(16, 2 x cores) unless set. */
#define SBL_REPL_MAX_WRITER_THREADS 256
void sbl_repl_set_writer_threads(int n);
int sbl_repl_writer_threads(void);

/* Start replication after sbl_storage_open: with a set name, install the
 * write observer and, when local.system.replset holds a config for the set,
 * open the oplog, resume its timestamps and become PRIMARY again.  Returns
 * 0 or an error (a corrupt config or oplog). */
int sbl_repl_start(const sbl_repl_config_t *cfg, sbl_err_t *err);
/* Before sbl_storage_close: remove the observer, release the oplog. */
void sbl_repl_stop(void);

/* True when started with a set name (a replica set member, initiated or not). */
bool sbl_repl_enabled(void);
/* True when this member may take writes (a standalone always may). */
bool sbl_repl_writable(void);
/* The term this member writes in as primary (a standalone's: 1), or -1 while
 * it is not primary: a new value means a new primaryship (src/shard's
 * filtering metadata is unknown until the shard recovered in it). */
int64_t sbl_repl_write_term(void);

/* NotWritablePrimary (10107, "not primary") when a write to database db may
 * not run here: a member that is not primary takes writes to "local" only. */
int sbl_repl_check_write(const char *db, sbl_err_t *err);

/* hello / isMaster: whether to say isWritablePrimary (ismaster), the
 * topologyVersion counter (moves when the member's state changes), and the
 * replica set fields (setName, hosts, primary, me, electionId, lastWrite
 * ... or, before initiate, isreplicaset and info).  No-ops when standalone. */
int64_t sbl_repl_topology_counter(void);
void sbl_repl_append_hello(bson_t *r);
/* operationTime and $clusterTime on a member with a clock (initiated);
 * nothing otherwise.  The signature: HMAC-SHA1 with a key of
 * admin.system.keys with a keyFile (no $clusterTime before a key exists),
 * else 20 zero bytes and keyId 0. */
void sbl_repl_append_cluster_time(bson_t *r);
/* A cluster time a command carried ($clusterTime): the next oplog entry
 * this member writes as primary gets a later ts.  The oplog's own last ts
 * is not changed (it still names a real entry). */
void sbl_repl_clock_advance(uint64_t ts);
/* This member's cluster time: the newest of its oplog's last ts and the
 * cluster times commands carried to it (mongod's logical clock). */
uint64_t sbl_repl_clock_now(void);
/* Check a client's $clusterTime (ct) as mongod does with a keyFile: one
 * later than any this member signed needs a key it holds (KeyNotFound 211)
 * and a matching hash (TimeProofMismatch 204); 0 without a keyFile or when
 * the client may advanceClusterTime (may_advance). */
int sbl_repl_check_cluster_time(const bson_iter_t *ct, bool may_advance, sbl_err_t *err);
/* keyRotationIntervalSecs (tests shorten it). */
void sbl_repl_set_key_rotation_s(int64_t s);
/* The sableDelayHeartbeatPing fail point: ms added to every ping measured to
 * member host (NULL: off), so the sync source rules see it as far. */
void sbl_repl_set_ping_delay(const char *host, int64_t ms);

/* replSetInitiate with config (NULL: the default one-member config with
 * this host): validates as mongod does for one member, creates the oplog,
 * stores the config in local.system.replset, writes the "initiating set"
 * no-op and becomes PRIMARY.  Must not be called inside a transaction. */
int sbl_repl_initiate(sbl_session_t *s, const bson_t *config, sbl_err_t *err);
/* replSetReconfig: a new version of the config (the primary only, unless
 * force: any member, the version then raised well above ours), validated as
 * mongod does (same set name, a higher version, at most one voter added or
 * removed without force, this member electable; a config that changes the
 * implicit default write concern only when a global default is set:
 * global_wc); stored, used at once and spread to the members by heartbeats.  Must not be called inside a
 * transaction. */
int sbl_repl_reconfig(sbl_session_t *s, const bson_t *config, bool force, bool global_wc,
                      sbl_err_t *err);
/* replSetGetStatus / replSetGetConfig: append the reply's fields to r. */
int sbl_repl_get_status(bson_t *r, sbl_err_t *err);
int sbl_repl_get_config(bson_t *r, sbl_err_t *err);

/* ---- a set of several members (issue 24, second increment) -------------- */

/* How the applier runs an entry's change: the command layer's internal
 * runner (sbl_cmd_run), installed before sbl_repl_start_threads. */
typedef void (*sbl_repl_run_fn)(const char *db, const bson_t *cmd, bson_t *reply);
void sbl_repl_set_runner(sbl_repl_run_fn fn);
/* How the applier ends the multi-document transactions clients left open on
 * this member (the command layer's sbl_cmd_mtxn_abort_all): called, with no
 * lock held, each time a secondary starts tailing a source and after an entry
 * failed to apply.  mongod aborts them at step-down; left open, their
 * uncommitted writes conflict with the new primary's entries on the same
 * documents, and the member stops applying until transactionLifetimeLimitSeconds.
 * rollback: the prepared ones too (replaying the oplog prepares again those
 * whose prepare entry it keeps), and it waits for the commands running in
 * transactions to end (bounded), aborting those transactions too. */
typedef void (*sbl_repl_abort_txns_fn)(bool rollback);
void sbl_repl_set_txn_aborter(sbl_repl_abort_txns_fn fn);
/* Start the heartbeat/election thread and the applier (after the command
 * layer is up); sbl_repl_stop joins them.  No-op when standalone. */
int sbl_repl_start_threads(sbl_err_t *err);

/* NotPrimaryNoSecondaryOk (13435) for a read of db on a member that is not
 * primary when the client did not allow secondaries (secondaryOk, a read
 * preference other than primary); NotPrimaryOrSecondary (13436) before the
 * member is a secondary.  Reads of "local" always run. */
int sbl_repl_check_read(const char *db, bool secondary_ok, sbl_err_t *err);

/* The internal commands between members and the operator's ones; each
 * appends its reply's fields to r. */
int sbl_repl_heartbeat(const bson_t *cmd, bson_t *r, sbl_err_t *err);
int sbl_repl_request_votes(const bson_t *cmd, bson_t *r, sbl_err_t *err);
int sbl_repl_update_position(const bson_t *cmd, bson_t *r, sbl_err_t *err);
/* replSetStepDown: wait up to secondary_catchup_s for an electable
 * secondary to catch up (unless force), step down and stay ineligible for
 * step_down_s.  Blocks the calling thread. */
int sbl_repl_step_down(int64_t step_down_s, int64_t secondary_catchup_s, bool force,
                       sbl_err_t *err);
int sbl_repl_freeze(int64_t secs, bson_t *r, sbl_err_t *err);
/* replSetAbortPrimaryCatchUp: a member elected and still catching up stops
 * and becomes primary now; IllegalOperation when it is not catching up. */
int sbl_repl_abort_catchup(sbl_err_t *err);
/* replSetSyncFrom: tail host from now on (syncFromRequested, prevSyncTarget
 * and maybe a warning appended to r), with mongod's checks and codes.
 * replSetMaintenance: a secondary enters (on) or leaves one request of
 * maintenance mode; RECOVERING while any is open (repl_member.c). */
int sbl_repl_sync_from(const char *host, bson_t *r, sbl_err_t *err);
int sbl_repl_maintenance(bool on, sbl_err_t *err);
/* replSetStepUp: run for election now, after a dry run unless skip_dry_run
 * (its skipDryRun field; an election hand-off sends it); CommandFailed when
 * frozen or the election (or its dry run) is lost. */
int sbl_repl_step_up(bool skip_dry_run, sbl_err_t *err);

/* Write concern beyond this member: wait until w members (w_majority: a
 * majority of the voting members, through the commit point) have applied
 * ts, for at most wtimeout_ms (0: forever), blocking the calling thread.
 * cb runs once, before this returns, with 0, WriteConcernFailed (64, timed
 * out) or InterruptedDueToReplStateChange (stepped down while waiting). */
typedef void (*sbl_repl_wait_cb)(void *arg, int code, const char *msg);
void sbl_repl_await(uint64_t ts, int w, bool w_majority, int64_t wtimeout_ms,
                    sbl_repl_wait_cb cb, void *arg);
/* The same without blocking: cb runs before this returns when the wait is
 * already over, else later on the replication waiter thread (repl_wait.c);
 * the caller's thread goes on meanwhile.  mode (NULL or "": none) names a
 * custom write concern of the config's settings.getLastErrorModes, waited
 * for instead of w; one the config does not have ends the wait with
 * UnknownReplWriteConcern (79). */
void sbl_repl_await_async(uint64_t ts, int w, bool w_majority, const char *mode,
                          int64_t wtimeout_ms, sbl_repl_wait_cb cb, void *arg);
/* A w:"majority" wait for a write of ours (j implied, as mongod's
 * writeConcernMajorityJournalDefault): asks for our own journal flush and
 * ends once a majority holds the write durably, our journal among them or
 * not (repl_wait.c); a failed flush ends it with OperationFailed. */
void sbl_repl_await_majority_journaled(uint64_t ts, int64_t wtimeout_ms, sbl_repl_wait_cb cb,
                                       void *arg);
/* mongod's implicit default write concern on this member: true for
 * {w: "majority"}, false for {w: 1} (a set with arbiters whose data-bearing
 * voters are no more than the voters' majority; a standalone; no config). */
bool sbl_repl_implicit_wc_majority(void);
/* Read concerns (repl_read.c); each blocks the calling thread (a worker).
 * sbl_repl_wait_applied: afterClusterTime, wait until this member applied
 * ts (a primary writes a no-op to reach it); IllegalOperation (20) when not
 * a replica set member, MaxTimeMSExpired (50) at deadline_us (0: none),
 * InterruptedAtShutdown (11600); for the operation ctx (NULL: none; its
 * registry entry, start time and client are read, never kept) also
 * Interrupted (11601) once killOp asked it to stop and
 * InterruptedDueToReplStateChange (11602) after a step-down or a rollback
 * later than its start (src/op's checks).
 * sbl_repl_linearizable_check: NotAReplicaSet (123) on a standalone,
 * NotWritablePrimary (10107) on a member that is not primary.
 * sbl_repl_linearizable_wait: after a linearizable read, write a no-op and
 * wait until a majority has it; the check's errors, 11602 when this member
 * stepped down meanwhile, MaxTimeMSExpired at deadline_us. */
struct sbl_opctx;
int sbl_repl_wait_applied(uint64_t ts, const struct sbl_opctx *ctx, int64_t deadline_us,
                          sbl_err_t *err);
int sbl_repl_linearizable_check(sbl_err_t *err);
int sbl_repl_linearizable_wait(int64_t deadline_us, sbl_err_t *err);
/* Monitoring (repl_monitor.c); no-ops / 0 on a standalone.
 * sbl_repl_append_server_status: serverStatus's repl, opcountersRepl and
 * electionMetrics.
 * sbl_repl_append_metrics: serverStatus.metrics.repl (into metrics).
 * sbl_repl_members_info: each member's host, state (MongoDB's numbers) and
 * lag behind the newest optime this member knows, in ms (-1 unknown), at
 * most cap; returns how many. */
typedef struct sbl_repl_member_info {
    char name[128];
    int state;
    int64_t lag_ms;
} sbl_repl_member_info_t;
void sbl_repl_append_server_status(bson_t *r);
void sbl_repl_append_metrics(bson_t *metrics);
int sbl_repl_members_info(sbl_repl_member_info_t *out, int cap);
/* The newest committed oplog timestamp with none in flight below it (the
 * oplog's visibility point). */
uint64_t sbl_repl_last_op_ts(void);
/* The newest oplog timestamp a transaction committed at on the calling
 * thread since the last call (0: none), and forget it: a write's own, which
 * its write concern waits for (writes commit in parallel:
 * sbl_repl_last_op_ts may still be below it). */
uint64_t sbl_repl_take_thread_op_ts(void);
/* The number of members (w: N above it is refused as mongod does). */
int sbl_repl_member_count(void);
/* Replication's test fail points (configureFailPoint, test commands only;
 * repl_failpoint.c): turn fail point name on or off, each wait at most
 * max_ms, for writes to ns only when ns is not NULL (the fail point's
 * data.ns).  False when name is not one of them. */
bool sbl_repl_fail_point(const char *name, bool on, int64_t max_ms, const char *ns);
/* Is a fail point on that holds a primary's write (hangBeforePrimaryOplogAppend
 * or ...Commit)?  The dispatcher then runs writes on workers, so a held
 * write never holds a network loop and the connections it serves. */
bool sbl_repl_fp_holds_writes(void);

/* ---- flow control (repl_flow.c; docs/replication.md "Flow control") -------
 * A primary whose majority commit point lags hands out write tickets at the
 * rate its secondaries apply, as mongod's flow control.
 * sbl_repl_flow_set_parameter: set one of its parameters (enableFlowControl,
 * flowControl*; also the sync source rules' maxSyncSourceLagSecs, start-up
 * only, changeSyncSourceThresholdMillis, maxNumSyncSourceChangesPerHour)
 * from it (a start-up string or a BSON value) with mongod's bounds (BadValue),
 * "was" appended to reply (NULL: none); startup: from --setParameter, else
 * IllegalOperation for a start-up-only one.  -1 when name is not one of them.
 * sbl_repl_flow_append_parameter: its value under name (false: not one);
 * ..._all_parameters: every one not in r yet (getParameter "*").
 * sbl_repl_flow_acquire: a client's write takes a ticket before it starts;
 * when this second's are gone it waits for the next second (only when
 * may_wait: never on a network loop), calling check(arg, err) ten times a
 * second and returning its error (an interruption) when not 0.
 * sbl_repl_flow_throttling: tickets are limited now (writes may wait).
 * sbl_repl_flow_append_status: serverStatus.flowControl, mongod's fields. */
int sbl_repl_flow_set_parameter(const char *name, const bson_iter_t *it, bool startup,
                                bson_t *reply, sbl_err_t *err);
bool sbl_repl_flow_append_parameter(bson_t *r, const char *name);
void sbl_repl_flow_append_all_parameters(bson_t *r);
int sbl_repl_flow_acquire(int (*check)(void *arg, sbl_err_t *err), void *arg, bool may_wait,
                          sbl_err_t *err);
bool sbl_repl_flow_throttling(void);
void sbl_repl_flow_append_status(bson_t *r);

/* ---- for change streams (src/agg/changestream.c) ---------------------------- */

/* pre with the $v:2 diff applied, appended to out (initialised by the
 * caller), as mongod's oplog application applies one: fields deleted (d),
 * set in place (u; appended when pre lacks them), appended at the end (i,
 * moved there when pre has them), sub-diffs (s<field>) applied to a field
 * of their kind (a document, or an array for an {a: true, l, u<n>, s<n>}
 * diff) and ignored on any other.  FailedToParse when diff is no diff (out
 * then holds part of the result). */
int sbl_repl_diff_apply(const bson_t *pre, const bson_t *diff, bson_t *out, sbl_err_t *err);
/* Whether update entry o is an update logged as its diff, {$v: 2, diff}
 * (mongod's form); the diff into *diff (a view into o). */
bool sbl_repl_entry_diff(const bson_t *o, bson_t *diff);

/* The next update on this thread is a replacement (on) or an operator
 * update (off, the default): an update's entry then carries its diff.  The
 * command layer sets it around the write. */
void sbl_repl_set_replacement(bool on);
/* The newest timestamp a majority of the set has (the commit point; on a
 * set of one voter, every committed entry), 0 before initiate. */
uint64_t sbl_repl_majority_ts(void);
/* minSnapshotHistoryWindowInSeconds: how long before the stable timestamp
 * WiredTiger keeps history (reads at an older time get SnapshotTooOld). */
void sbl_repl_set_snapshot_window_s(int64_t s);
int64_t sbl_repl_snapshot_window_s(void);
/* A read at a timestamp (a snapshot or majority read, a cursor that reads
 * where it opened, a transaction's atClusterTime) is under way: the whole
 * window is kept from now until it has been idle for the window's length;
 * without such reads only a few seconds are (repl_sync.c's window_ts). */
void sbl_repl_note_history_read(void);
/* A counter that moves whenever the commit point moves. */
uint64_t sbl_repl_commit_generation(void);
/* The newest oplog ts a majority read may see now, without taking a lock:
 * the commit point, or the last entry when it is further back (a secondary
 * still applying) or the set has one voter.  Change streams' waiting
 * getMores poll it. */
uint64_t sbl_repl_readable_ts(void);

/* ---- "c" entries: catalog changes (called after the change succeeded) ------
 * Each writes its entry in a transaction of its own on s (which must have
 * none open) and logs, but does not return, a failure: the change is done
 * (createIndexes' returns it).
 * No-ops on a standalone, before initiate, and for local.* namespaces.
 * A create's entry carries the collection's UUID as "ui" (a view's none):
 * secondaries create the collection with it. */
void sbl_repl_log_create(sbl_session_t *s, const char *ns);
void sbl_repl_log_drop(sbl_session_t *s, const char *ns, const uint8_t *uuid, int64_t nrecords);
/* dropped: the UUID of the collection the rename replaced at to (NULL: none);
 * the entry's dropTarget names it, as mongod's. */
void sbl_repl_log_rename(sbl_session_t *s, const char *from, const char *to,
                         const uint8_t *uuid, const uint8_t *dropped);
/* The UUID of the collection at ns into out; false when there is none. */
bool sbl_repl_uuid_of(sbl_session_t *s, const char *ns, uint8_t out[16]);
void sbl_repl_log_drop_database(sbl_session_t *s, const char *db);
/* createIndexes' entry returns its failure, 11602 after a step-down too: the
 * caller drops the index no other member would get. */
int sbl_repl_log_create_index(sbl_session_t *s, const char *ns, const uint8_t *uuid,
                              const bson_t *spec, sbl_err_t *err);
void sbl_repl_log_drop_index(sbl_session_t *s, const char *ns, const uint8_t *uuid,
                             const char *name, const bson_t *spec);
/* collMod: o is {collMod: <coll>, <the changes>} (an index change as
 * {name, <its new options>}), o2 {collectionOptions_old, indexOptions_old?}
 * as mongod logs it (change streams' modify events read both). */
void sbl_repl_log_coll_mod(sbl_session_t *s, const char *ns, const uint8_t *uuid,
                           const bson_t *o, const bson_t *o2);

/* ---- retryable writes: oplog fields and config.transactions (repl_txn.c) ----
 *
 * A write command that carries lsid and txnNumber on a primary runs each of
 * its statements with a statement set on its thread (sbl_repl_set_stmt):
 * the oplog entry of the statement's document write then carries lsid,
 * txnNumber, stmtId and prevOpTime (the session's previous entry in this
 * txnNumber, or {ts: Timestamp(0, 0), t: -1}), and the session's record in
 * config.transactions ({_id: lsid, txnNum, lastWriteOpTime, lastWriteDate})
 * is written in the same WiredTiger transaction.  A findAndModify that must
 * return the document as it was first logs that pre-image in a no-op entry
 * and points at it with preImageOpTime (mongod 4.4's form).  Secondaries
 * write the same record when they apply an entry with lsid and txnNumber,
 * so whichever member becomes primary can rebuild what each statement did
 * by walking the prevOpTime chain from lastWriteOpTime.
 */
#define SBL_TXN_TABLE_NS "config.transactions"

typedef struct sbl_repl_stmt {
    uint8_t lsid_id[16];  /* the session */
    uint8_t lsid_uid[32];
    int64_t txn_number;
    int32_t stmt_id;
    bool pre_image;       /* log the old document first (findAndModify) */
    bool whole_post;      /* log an update's new document whole, not its diff
                           * (findAndModify: a retry answers with it) */
    uint64_t prev_ts;     /* the session's previous entry in this txnNumber; 0: none */
    int64_t prev_term;
    /* Set by the observer when it wrote the statement's entry (the last
     * attempt's: valid when the caller knows the statement's write committed). */
    uint64_t out_ts;
    int64_t out_term;
    /* The session's config.transactions record as last seen (a hint the
     * record's write checks, sbl_version_t), or NULL. */
    sbl_version_t *record;
} sbl_repl_stmt_t;

/* Set (or clear, NULL) the statement the calling thread's writes belong to. */
void sbl_repl_set_stmt(sbl_repl_stmt_t *st);

/* The session's record in config.transactions: *foundp, and when found its
 * txnNum and lastWriteOpTime. */
int sbl_repl_txn_record_get(sbl_session_t *s, const uint8_t id[16], const uint8_t uid[32],
                            int64_t *txnp, uint64_t *tsp, int64_t *termp, bool *foundp,
                            sbl_err_t *err);
/* As sbl_repl_txn_record_get through known, the record as the caller last
 * saw it: used when it is still the current version (one point read by its
 * record key), read again into it otherwise. */
int sbl_repl_txn_record_known(sbl_session_t *s, const uint8_t id[16], const uint8_t uid[32],
                              sbl_version_t *known, int64_t *txnp, uint64_t *tsp,
                              int64_t *termp, bool *foundp, sbl_err_t *err);
/*
 * Multi-document transactions: while a thread runs a transaction's
 * operation, its document writes are collected in the transaction's ops
 * (sbl_repl_set_txn_ops) instead of each appending an entry; at commit,
 * sbl_repl_txn_commit appends one entry in mongod 7.0's form ({lsid,
 * txnNumber, op: "c", ns: "admin.$cmd", o: {applyOps: [{op, ns, ui, o,
 * o2}...]}, prevOpTime ...}) and the session's record ({..., state:
 * "committed"}) in s's transaction, which the caller then commits.  A
 * secondary applies the entry's operations in one WiredTiger transaction.
 */
typedef struct sbl_repl_txn_ops sbl_repl_txn_ops_t;
sbl_repl_txn_ops_t *sbl_repl_txn_ops_new(void);
void sbl_repl_txn_ops_free(sbl_repl_txn_ops_t *ops);
size_t sbl_repl_txn_ops_count(const sbl_repl_txn_ops_t *ops);
void sbl_repl_set_txn_ops(sbl_repl_txn_ops_t *ops);
/* Has one of ops' operations written ns? */
bool sbl_repl_txn_ops_touch(const sbl_repl_txn_ops_t *ops, const char *ns);
/* st: lsid, txnNumber, prevOpTime (stmt_id unused); *tsp: the entry's ts
 * (0 when there were no operations: nothing is written). */
int sbl_repl_txn_commit(sbl_session_t *s, sbl_repl_txn_ops_t *ops, sbl_repl_stmt_t *st,
                        uint64_t *tsp, sbl_err_t *err);


/* The operations' applyOps array when they fit one entry (NULL: none, or
 * more than one entry's worth). */
const bson_t *sbl_repl_txn_ops_array(const sbl_repl_txn_ops_t *ops);

/*
 * Prepared transactions (two-phase commit's participants; repl_prepare.c
 * says how they reach the oplog and the secondaries).  In s's open
 * transaction, which the caller commits:
 *  - the prepare entry {o: {applyOps, prepare: true}} (lsid, txnNumber of
 *    st) and the session's record "prepared"; *tsp: its ts, which the
 *    caller prepares the transaction at before committing s (the stable
 *    timestamp stays below it until the outcome is stable);
 *  - the decision entry {commitTransaction: 1, commitTimestamp} or
 *    {abortTransaction: 1}, st->prev_ts/prev_term naming the prepare entry;
 *    *tsp: its ts (the commit's durable timestamp).
 * TransactionTooLarge when the operations need more than one entry.
 */
int sbl_repl_txn_log_prepare(sbl_session_t *s, const sbl_repl_txn_ops_t *ops,
                             sbl_repl_stmt_t *st, uint64_t *tsp, int64_t *termp, sbl_err_t *err);
int sbl_repl_txn_log_decision(sbl_session_t *s, sbl_repl_stmt_t *st, bool commit,
                              uint64_t commit_ts, uint64_t *tsp, sbl_err_t *err);
/* The outcome of the transaction prepared at prepare_ts is in the entry at
 * end_ts (0: it was never prepared): the stable timestamp may pass
 * prepare_ts once it reaches end_ts. */
void sbl_repl_prepared_unpin(uint64_t prepare_ts, uint64_t end_ts);
/* What an oplog entry is (o: a view of its o): */
enum { SBL_PREP_NONE, SBL_PREP_PREPARE, SBL_PREP_COMMIT, SBL_PREP_ABORT };
int sbl_repl_prepared_kind(const bson_t *e, bson_t *o);
/* The same from a command entry's ('c') o alone. */
int sbl_repl_prepared_kind_o(const bson_t *o);
/* The prepare entry a commit or abort entry e names (prevOpTime), read from
 * the oplog in s: *out initialised when *foundp. */
int sbl_repl_prepare_entry_of(sbl_session_t *s, const bson_t *e, bson_t *out, bool *foundp,
                              sbl_err_t *err);
/* The command layer's side of applying them (a secondary, a restart's
 * replay), called on the applier's thread:
 *  - SBL_PREP_PREPARE: prepare e's transaction at ts (in a storage session
 *    of its own; a repeat of one already prepared does nothing);
 *  - SBL_PREP_COMMIT: commit it at ts (commitTimestamp), durable at
 *    durable_ts (e's ts); SBL_PREP_ABORT: roll it back.  *prepare_tsp: the
 *    transaction's prepare timestamp (0: it was not prepared here).
 * e's writes must not be logged: the applier writes e itself. */
typedef int (*sbl_repl_prepared_fn)(const bson_t *e, int kind, uint64_t ts, uint64_t durable_ts,
                                    uint64_t *prepare_tsp, sbl_err_t *err);
void sbl_repl_set_prepared_hook(sbl_repl_prepared_fn fn);
/* While set on the calling thread, writes are not logged (a prepare being
 * applied: its entry is written by the applier). */
void sbl_repl_set_unlogged_writes(bool on);

/* The oplog entry at ts (a copy in *out, initialised when *foundp). */
int sbl_repl_oplog_get(sbl_session_t *s, uint64_t ts, bson_t *out, bool *foundp, sbl_err_t *err);

/* A chunk migration's copy of a retryable write's history (mongod's session
 * migration): entry is the donor's entry of one executed statement (lsid,
 * txnNumber, stmtId); this member appends {op: "n", o: {$sessionMigrateInfo:
 * 1}, o2: entry, fromMigrate: true} to the session's chain with the same
 * lsid, txnNumber and stmtId, and updates the session's record, so a retry
 * here finds the statement executed.  image (NULL: none) is the document a
 * findAndModify returned from before its change: it is written first as a
 * no-op ({op: "n", o: image}, the session's fields) and the statement's
 * no-op points at it with preImageOpTime, as the donor's entry did.
 * Nothing when this member's record of the session is at a newer
 * txnNumber.  sbl_repl_session_migrated: true when e is such a no-op, with
 * *original the donor's entry (a view into e). */
int sbl_repl_session_migrate(sbl_session_t *s, const bson_t *entry, const bson_t *image,
                             sbl_err_t *err);
bool sbl_repl_session_migrated(const bson_t *e, bson_t *original);
/* The statement entry e stands for, as a new bson_t (bson_destroy it): e
 * itself, or for a migrated statement's no-op the donor's entry pointing
 * (preImageOpTime) at the image this member wrote for it. */
bson_t *sbl_repl_stmt_entry(const bson_t *e);
/* The ts of the oldest entry in the oplog (0: none). */
int sbl_repl_oplog_oldest_ts(sbl_session_t *s, uint64_t *tsp, sbl_err_t *err);
/* How many passes of the pre-image remover have deleted images so far (a
 * change-stream reader that keeps images looks them up again after one). */
uint64_t sbl_repl_preimage_removals(void);
/* The newest oplog entry whose image a pass has deleted (0: none): images of
 * later entries are all still there.  Set before the pass is counted. */
uint64_t sbl_repl_preimages_removed_upto(void);
/* How often the pre-image remover runs (--setParameter
 * expiredChangeStreamPreImageRemovalJobSleepSecs; <= 0: 10 s).  Before
 * sbl_repl_start_threads. */
void sbl_repl_set_preimage_remover_sleep_s(int secs);

#endif
