/*
 * cmd_int.h: private to src/cmd.  The per-connection state (sbl_client),
 * the handler signature and the command table's row, and the declarations
 * of the handlers that table.c lists.  The context every handler gets,
 * sbl_opctx_t, is src/op's: the modules below the command layer take it too.
 *
 * The rules of a handler: it reads ctx->cmd, does its work, appends its
 * result fields to ctx->reply and returns 0; or it returns an error code
 * with err filled in and leaves the reply alone: only the dispatcher writes
 * ok, errmsg, code and codeName.  A write command that reports per-document
 * failures (writeErrors) still returns 0.
 */
#ifndef SBL_CMD_INT_H
#define SBL_CMD_INT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cmd/cmd.h"
#include "common/errors.h"
#include "metrics/metrics.h"
#include "op/op.h"
#include "sessions/sessions.h"
#include "storage/storage.h"

/* Per-connection state kept by the command layer. */
struct sbl_client {
    uint64_t conn_id;
    int compressors[4]; /* negotiated compressor ids, in client preference order */
    int ncompressors;
    bson_t *metadata; /* client metadata from the first hello, or NULL */
    const char *app_name; /* metadata's application.name (points into it), or NULL */
    bool hello_seen;
    struct hello_wait *hello_wait; /* an awaitable hello in progress (handshake.c), or NULL */
    /* authentication (auth_cmds.c) */
    char *auth_user;         /* the authenticated user, or NULL */
    char *auth_db;           /* its database */
    struct sbl_authz *authz; /* its resolved privileges */
    uint64_t authz_gen;      /* the users/roles generation authz was resolved at */
    struct sbl_scram *scram; /* a SCRAM conversation in progress, or NULL */
    bool scram_skip_empty;   /* that conversation asked for skipEmptyExchange */
    int auth_failures;       /* failed attempts on this connection (each reply is delayed) */
    uint8_t audit_uuid[16];  /* the connection's UUID in audit events (audit_cmds.c) */
    bool audit_uuid_set;
    /* audit_cmds.c: this connection's part of a JSON audit event (uuid, local,
     * remote, users, roles), made for user/db at authz generation audit_who_gen */
    uint16_t audit_who_len; /* 0: not made */
    uint64_t audit_who_gen;
    char audit_who_key[128]; /* "user\ndb", or "" */
    char audit_who[512];
    /* sessions_cmds.c: the uid of the user above (SHA-256 of "user@db"), made
     * for the user named in uid_for ("" unauthenticated) */
    bool uid_set;
    char uid_for[160];
    uint8_t uid[32];
};

typedef int (*sbl_cmd_fn)(sbl_opctx_t *ctx, sbl_err_t *err);

/* Command flags */
#define SBL_CMD_WRITE 0x01     /* changes data: write concern applies */
#define SBL_CMD_READ 0x02      /* reads user data */
#define SBL_CMD_NO_AUTH 0x04   /* allowed before authentication (hello, saslStart ...) */
#define SBL_CMD_ADMIN_ONLY 0x08 /* must be run against the admin database */
#define SBL_CMD_SLOW 0x10      /* may run long: executed on a worker thread, not a network loop */
#define SBL_CMD_ANY_MEMBER 0x20 /* runs on a secondary without secondaryOk: getMore and
                                  killCursors, whose cursor's own command was checked */

typedef struct sbl_cmd_def {
    const char *name;
    sbl_cmd_fn fn;
    unsigned flags;
    const char *help;
    /* The MongoDB action the command needs when authorization is on ("find",
     * "insert", "serverStatus" ...; see src/auth/auth_priv.c), checked on the
     * command's collection, database or the cluster; "" means being
     * authenticated is enough; NULL (a row that names none) means root only.
     * Ignored for SBL_CMD_NO_AUTH rows. */
    const char *action;
} sbl_cmd_def_t;

/* The command table (table.c), sorted by name for binary search; lookup is
 * case-sensitive except for the legacy lowercase aliases listed in it. */
const sbl_cmd_def_t *sbl_cmd_lookup(const char *name);
const sbl_cmd_def_t *sbl_cmd_table(size_t *countp);

/* ---- handlers ----------------------------------------------------------- */

/* crud_write.c, crud_read.c, crud_fam.c, aggregate.c */
int sbl_cmd_insert(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_update(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_delete(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_find_and_modify(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_find(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_count(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_distinct(sbl_opctx_t *ctx, sbl_err_t *err);
/* mapreduce.c: the mapReduce command; the JavaScript engine's settings (start-up). */
int sbl_cmd_map_reduce(sbl_opctx_t *ctx, sbl_err_t *err);
void sbl_cmd_js_init(void);
int sbl_cmd_aggregate(sbl_opctx_t *ctx, sbl_err_t *err);

/*
 * view_read.c: find, count, distinct and aggregate call this first: when the
 * command's namespace is a view, it runs the command as an aggregation over
 * the view's source (the view's pipeline first) and returns 0 or an error
 * code, having filled ctx->reply as the command would; returns -1 when it is
 * no view.
 */
int sbl_view_read(sbl_opctx_t *ctx, sbl_err_t *err);

/* handshake.c: end an awaitable hello of a closing connection (sbl_cmd_conn_close). */
void sbl_hello_wait_cancel(sbl_client_t *client);

/* routed.c: a router's command on a shard (the dispatcher's steps).
 * sbl_routed_take moves the command's shardVersion and databaseVersion
 * into r (on a shard only; r zeroed by the caller); sbl_routed_any: it had
 * either; sbl_routed_sharded: its shardVersion names a sharded collection;
 * sbl_routed_may_wait: a critical section it may wait for is held (run it on
 * a worker).  sbl_routed_enter counts it into its gates and checks its
 * versions (0, or StaleConfig / StaleDbVersion with their fields in
 * ctx->reply); sbl_routed_exit, after the handler (whatever enter
 * returned), leaves the gates entered; sbl_routed_free frees the versions. */
typedef struct sbl_routed {
    bson_t *shard_version;
    bson_t *db_version;
    char gate_ns[400]; /* inside this namespace's gate, else "" */
    char gate_db[128]; /* inside this database's gate, else "" */
} sbl_routed_t;
void sbl_routed_take(sbl_routed_t *r, bson_t *cmd);
bool sbl_routed_any(const sbl_routed_t *r);
bool sbl_routed_sharded(const sbl_routed_t *r);
bool sbl_routed_may_wait(const sbl_routed_t *r);
int sbl_routed_enter(sbl_routed_t *r, sbl_opctx_t *ctx, sbl_err_t *err);
void sbl_routed_exit(sbl_routed_t *r);
void sbl_routed_free(sbl_routed_t *r);

/* shard_cmds.c: a shard's side of a sharded cluster */
int sbl_cmd_add_shard_identity(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_flush_routing_table(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_sharding_state(sbl_opctx_t *ctx, sbl_err_t *err);
/* _shardsvrGetStatsForBalancing {collections: [{ns, UUID?}], scaleFactor}:
 * {stats: [{namespace, collSize}]}, each collection's data size on this
 * shard divided by scaleFactor (default 1 MiB; 0 for one not here). */
int sbl_cmd_shardsvr_stats_for_balancing(sbl_opctx_t *ctx, sbl_err_t *err);
/* _shardsvrMovePrimaryEnterCriticalSection {db, leaseMillis, renew} and
 * _shardsvrMovePrimaryExitCriticalSection {db}: the router's movePrimary
 * and dropDatabase on the database's primary shard (src/shard/shard_db.c). */
int sbl_cmd_move_primary_crit_enter(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_move_primary_crit_exit(sbl_opctx_t *ctx, sbl_err_t *err);
/* migrate.c: a migration's donor and recipient halves (shards) */
int sbl_cmd_shardsvr_move_range(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_migrate_clone(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_transfer_mods(sbl_opctx_t *ctx, sbl_err_t *err);
/* The donor's retryable-write history of the migrating range (migrate_sess.c). */
int sbl_cmd_get_next_session_mods(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_recv_chunk_start(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_recv_chunk_status(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_recv_chunk_commit(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_recv_chunk_release(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_recv_chunk_abort(sbl_opctx_t *ctx, sbl_err_t *err);
/* balancer.c: the config server's side of migrations and the balancer */
int sbl_cmd_configsvr_move_range(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_configsvr_commit_migration(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_configsvr_ensure_chunk_version(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_configsvr_balancer_start(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_configsvr_balancer_stop(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_configsvr_balancer_status(sbl_opctx_t *ctx, sbl_err_t *err);
/* The balancer thread (config servers only; start is a no-op elsewhere). */
void sbl_cmd_balancer_start_thread(void);
/* A printf-style SHARDING log line of the config server's balancing work
 * (the balancer 21000; zones and chunk merges 21001). */
void sbl_cmd_shard_log(char sev, int id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void sbl_cmd_balancer_stop_thread(void);
/* Hold (true) or release the lock a migration's commit and a chunk version
 * bump take in balancer.c, around another change of config.chunks. */
void sbl_cmd_chunks_lock(bool hold);
/* An entry of config.changelog {_id, server, shard: "config", clientAddr, time,
 * what, ns, details} in mongod's shape (a failed write is logged). */
void sbl_cmd_changelog(const char *what, const char *ns, const bson_t *details);
/* Whether shard id is a donor or recipient of a migration now. */
bool sbl_cmd_shard_migrating(const char *id);
/* chunk_merge.c: mergeChunks, mergeAllChunksOnShard and clearJumboFlag on
 * the config servers (the router's commands carried out there). */
int sbl_cmd_configsvr_commit_chunks_merge(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_configsvr_merge_all_chunks(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_configsvr_clear_jumbo_flag(sbl_opctx_t *ctx, sbl_err_t *err);
/* The AutoMerger, from each balancer round (ids: the shards taking chunks):
 * merges every collection's mergeable chunks when autoMergerIntervalSecs
 * have passed since it last did and config.settings' automerge document
 * does not say enabled: false. */
void sbl_cmd_automerge_tick(char ids[][128], int nshards);
/* setParameter autoMergerIntervalSecs (-1: k is another parameter; reply
 * gets "was"), and getParameter's value. */
int sbl_cmd_automerge_set_parameter(const char *k, const bson_iter_t *it, bson_t *reply,
                                    sbl_err_t *err);
void sbl_cmd_automerge_append_parameter(bson_t *reply);
/* setParameter orphanCleanupDelaySecs and
 * receiveChunkWaitForRangeDeleterTimeoutMS (-1: k is another parameter;
 * reply gets "was"), and getParameter's value (false: not one of them);
 * migrate_rangedel.c. */
int sbl_cmd_rangedel_set_parameter(const char *k, const bson_iter_t *it, bson_t *reply,
                                   sbl_err_t *err);
bool sbl_cmd_rangedel_append_parameter(bson_t *reply, const char *name);
/* How many documents of ns this shard holds as orphans awaiting the range
 * deleter (its ready tasks' ranges, each counted once), which
 * _shardsvrGetStatsForBalancing leaves out of the shard's data size as
 * mongod 7.0 does (its tasks' numOrphanDocs). */
int64_t sbl_cmd_rangedel_orphans(const char *ns);
/* cleanupOrphaned {cleanupOrphaned: "<db>.<coll>", startingFromKey} on a
 * shard's primary: answers once config.rangeDeletions holds no task for the
 * namespace (at once for a collection not here or unsharded); 73 for an
 * invalid namespace, IllegalOperation off a shard, 265 for a startingFromKey
 * that is no shard key, the deadline's 50. */
int sbl_cmd_cleanup_orphaned(sbl_opctx_t *ctx, sbl_err_t *err);
/* 0 on the config server primary; IllegalOperation off a config server,
 * NotWritablePrimary on its secondaries. */
int sbl_cmd_config_primary_check(sbl_err_t *err);
/* zone_cmds.c: zones on the config servers (addShardToZone ... forwarded by
 * the router) */
int sbl_cmd_configsvr_add_shard_to_zone(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_configsvr_remove_shard_from_zone(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_configsvr_update_zone_key_range(sbl_opctx_t *ctx, sbl_err_t *err);
/* Every document of this member's config.<coll> matching filter, sorted by
 * sort (NULL: natural order), copied into *arr (an array, initialised either
 * way), however many batches that takes (a collection's chunks can fill
 * more than one). */
int sbl_cmd_config_find(const char *coll, const bson_t *filter, const bson_t *sort, bson_t *arr,
                        sbl_err_t *err);
/* One write on this member's config.<coll>, w: majority: verb "update"
 * (op: {q, u ...}), "delete" (op: {q, limit}) or "insert" (op: the
 * document); *np (may be NULL): the reply's n.  A write error is the error. */
int sbl_zone_config_write(const char *verb, const char *coll, const bson_t *op, int64_t *np,
                          sbl_err_t *err);
/* The balancer's view of one collection in one round (balancer.c fills it,
 * balancer_zones.c and balancer_size.c act on it). */
#define SBL_BAL_MAX_SHARDS 64
typedef struct sbl_bal_coll {
    const char *ns;
    const bson_t *coll;                        /* its config.collections document */
    int64_t sizes[SBL_BAL_MAX_SHARDS];         /* ids[i]'s data of it, bytes */
    char hosts[SBL_BAL_MAX_SHARDS][256];       /* ids[i]'s connection string */
    int64_t chunk_bytes;                       /* its chunk size */
    bool dry;        /* decide only: nothing is split or moved */
    const char *why; /* dry: what the first action would fix ("draining",
                      * "zoneViolation", "chunksImbalance"); NULL: none */
} sbl_bal_coll_t;
/* balancer.c's migration of ns's chunk that starts at min (max, when given,
 * must be its max) to shard to; ConflictingOperationInProgress when either
 * shard is in another migration. */
int sbl_bal_move_range(const char *ns, const bson_t *min, const bson_t *max, const char *to,
                       bson_t *details, sbl_err_t *err);
/* balancer_size.c: each of ids[n]'s data size of bc->ns (its
 * _shardsvrGetStatsForBalancing answer) into bc->sizes, its host into
 * bc->hosts, and the collection's chunk size into bc->chunk_bytes; an error
 * when a shard did not answer (the collection then waits a round). */
int sbl_bal_sizes(sbl_bal_coll_t *bc, char ids[][128], int n, sbl_err_t *err);
/* Move the chunk [min, max) to ids[to] whole (dry: note why instead):
 * 1 moved, 0 a shard was busy (the next round decides again), -1 failed. */
int sbl_bal_move_chunk(sbl_bal_coll_t *bc, const bson_t *min, const bson_t *max,
                       char ids[][128], int to, const char *why);
/* Move about one chunk size of data, from chunk's min, from ids[from] (its
 * owner) to ids[to], as mongod 7.0's balancer does (the chunk split first
 * where that much data ends; a whole chunk that cannot be split so only
 * when moving it narrows the gap); dry: note "chunksImbalance" instead.
 * nchunks: how many chunks ids[from] has in the set being balanced.
 * 1 moved, 0 nothing moved (busy, or it would not help), -1 failed. */
int sbl_bal_move_data(sbl_bal_coll_t *bc, const bson_t *chunk, char ids[][128], int from,
                      int to, int nchunks);
/* One collection's balancing action this round, in mongod's order: a chunk
 * off a draining shard, then its zones, then its data sizes (balancer.c).
 * ids: the shards that take chunks, drain: those being drained.  1 when it
 * split or moved something (dry: would have, bc->why says why), 0 when the
 * collection is balanced (or a shard was busy), -1 when that failed. */
int sbl_bal_collection(sbl_bal_coll_t *bc, char ids[][128], int nshards, char drain[][128],
                       int ndrain);
/* config.shards into ids (taking chunks) and drain (draining); at most 64. */
void sbl_bal_shards(char ids[][128], int *nshards, char drain[][128], int *ndrain);
/* _configsvrBalancerCollectionStatus {ns}: chunkSize (MiB), balancerCompliant
 * and firstComplianceViolation by the balancer's own decision (dry run). */
int sbl_cmd_configsvr_balancer_coll_status(sbl_opctx_t *ctx, sbl_err_t *err);
/* balancer_zones.c: the balancer's policy for a collection (chunks: its
 * config.chunks, sorted by min) that has zone ranges; ids: the shards that
 * are not draining.  1 when it split or moved a chunk (dry: would have), 0
 * when there was nothing to do (or a shard was busy), -1 when that failed;
 * SBL_ZONES_NONE when the collection has no zone range (balancer.c's own
 * policy applies). */
#define SBL_ZONES_NONE 2
int sbl_zones_balance(sbl_bal_coll_t *bc, const bson_t *chunks, char ids[][128], int nshards);
/* Split ns's chunk (as the balancer read it) at at under the commit lock:
 * nothing when the chunk changed since. */
int sbl_bal_split_chunk(const char *ns, const bson_t *chunk, const bson_t *at, sbl_err_t *err);
/* At shutdown: stop a receiving migration's thread (migrate_recv.c). */
void sbl_cmd_migrations_shutdown(void);

/* handshake.c, admin.c, diag.c */
int sbl_cmd_hello(sbl_opctx_t *ctx, sbl_err_t *err);
/* hello's topologyVersion {processId, counter}, also in state-change errors
 * (NotWritablePrimary) so drivers can tell a stale error (handshake.c). */
void sbl_cmd_append_topology_version(bson_t *r);
int sbl_cmd_build_info(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_ping(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_get_parameter(sbl_opctx_t *ctx, sbl_err_t *err);
/* cluster_params.c: config.clusterParameters (changeStreamOptions) */
int sbl_cmd_set_cluster_parameter(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_get_cluster_parameter(sbl_opctx_t *ctx, sbl_err_t *err);
/* rwconcern.c: the cluster-wide default read/write concerns, and parsing one. */
int sbl_cmd_get_default_rw_concern(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_set_default_rw_concern(sbl_opctx_t *ctx, sbl_err_t *err);
/* The default a write without writeConcern takes, into out (a copy the
 * caller destroys): the stored defaultWriteConcern, else mongod's implicit
 * {w: "majority"}; false when that is {w: 1} or this is not a set member. */
bool sbl_cmd_default_write_concern(bson_t *out);
/* dispatch.c: wait, blocking this thread, until w members (majority: the
 * commit point and the stable timestamp) have ts; 0, or the code that ended
 * the wait with its message in msg (sbl_repl_await's codes). */
int sbl_cmd_await_replication(uint64_t ts, int w, bool majority, int64_t timeout_ms,
                              char *msg, size_t msg_len);
/* Parse a command's writeConcern field, at *wcit (NULL: none given: w 1). */
int sbl_cmd_parse_write_concern(const bson_iter_t *wcit, sbl_write_concern_t *wc, sbl_err_t *err);
/* Append writeConcernError {code, codeName, errmsg} to out, with errInfo
 * {wtimeout: true} for WriteConcernFailed (a wtimeout), as mongod. */
void sbl_cmd_append_wc_error(bson_t *out, int code, const char *msg);
/* Whether setDefaultRWConcern stored a defaultWriteConcern (replSetReconfig
 * may then change the implicit default, as mongod). */
bool sbl_cmd_global_write_concern_set(void);
int sbl_cmd_get_cmd_line_opts(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_host_info(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_whatsmyuri(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_list_commands(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_connection_status(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_server_status(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_get_last_error(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_get_log(sbl_opctx_t *ctx, sbl_err_t *err);
/* retryable.c: retryable writes (lsid + txnNumber).  sbl_cmd_txn_begin
 * checks txnNumber (IllegalOperation on a standalone, TransactionTooOld,
 * NotARetryableWriteCommand 50768 for a command that is not a retryable
 * write), checks the session out and, for a retry, loads what the
 * txnNumber already executed;
 * sbl_cmd_txn_end (always called after it) checks the session in.  The
 * write handlers, when ctx->retry is set: sbl_retry_stmt_id gives statement
 * i's id, sbl_retry_executed the oplog entry of an executed statement
 * (*entryp NULL: run it, between sbl_retry_stmt_begin and _end, wrote=true
 * when its write committed), and sbl_retry_append_retried adds
 * retriedStmtIds to the reply.  sbl_retry_image: the pre-image a retried
 * findAndModify's entry points at (preImageOpTime). */
int sbl_cmd_txn_begin(sbl_opctx_t *ctx, const bson_iter_t *txnit, const bson_iter_t *autocommit,
                      sbl_err_t *err);
void sbl_cmd_txn_end(sbl_opctx_t *ctx);
int32_t sbl_retry_stmt_id(const sbl_retry_t *r, uint32_t i);
int sbl_retry_executed(sbl_retry_t *r, int32_t stmt, const bson_t **entryp, sbl_err_t *err);
int sbl_retry_stmt_begin(sbl_retry_t *r, int32_t stmt, bool pre_image, sbl_err_t *err);
/* The statement begun logs an update's new document whole (findAndModify). */
void sbl_retry_stmt_whole_post(sbl_retry_t *r);
void sbl_retry_stmt_end(sbl_retry_t *r, bool wrote);
void sbl_retry_append_retried(const sbl_retry_t *r, bson_t *reply);
int sbl_retry_image(sbl_opctx_t *ctx, const bson_t *entry, bson_t *out, bool *foundp,
                    sbl_err_t *err);
/*
 * What a session keeps between its commands (the session catalog's state,
 * written by retryable.c and txn.c alike): its record's version, and whether
 * that version was known current when the last command ended, with the
 * versioned epoch it was known at and the record's txnNum and
 * lastWriteOpTime.  A command that finds the epoch unchanged trusts it
 * without reading the record (no other write touched config.transactions:
 * only this session's checked out commands write its record otherwise), and
 * replaces it by its key without a search.
 */
typedef struct sbl_session_kept {
    sbl_version_t record;
    uint64_t epoch;
    int64_t rec_txn;
    uint64_t rec_ts;
    int64_t rec_term;
    bool current; /* record was known current at epoch */
} sbl_session_kept_t;
_Static_assert(sizeof(sbl_session_kept_t) <= SBL_LSESS_STATE_MAX,
               "the session catalog keeps a record's version");
/* k, kept by the session's last command, when it can be trusted now:
 * known current at the epoch that is still the current one. */
static inline const sbl_session_kept_t *sbl_session_kept_current(const sbl_lsess_state_t *kept,
                                                                uint64_t epoch)
{
    const sbl_session_kept_t *k = (const sbl_session_kept_t *)kept->data;
    return kept->len == sizeof(*k) && k->current && k->epoch == epoch && k->record.key_len > 0
               ? k
               : NULL;
}
/* txn.c: multi-document transactions (autocommit: false).  sbl_cmd_mtxn_begin
 * checks the session out and puts the command inside its transaction
 * (ctx->ss becomes the transaction's storage session); sbl_cmd_mtxn_end
 * (always called after it) aborts the transaction when the command failed,
 * labels write conflicts TransientTransactionError and checks the session
 * in.  kill_session aborts a killed or ended session's transaction, reap
 * those past transactionLifetimeLimitSeconds. */
int sbl_cmd_mtxn_begin(sbl_opctx_t *ctx, int64_t txn, sbl_err_t *err);
void sbl_cmd_mtxn_end(sbl_opctx_t *ctx, int *rcp, sbl_err_t *err);
/* The atClusterTime the multi-document transaction ctx runs in reads at
 * (readConcern snapshot; 0: none, or not in a transaction). */
uint64_t sbl_cmd_txn_read_ts(const sbl_opctx_t *ctx);
int sbl_cmd_commit_transaction(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_abort_transaction(sbl_opctx_t *ctx, sbl_err_t *err);
/* prepareTransaction (a participant of two-phase commit: txn.c) and
 * coordinateCommitTransaction (its coordinator: txn_coord.c). */
int sbl_cmd_prepare_transaction(sbl_opctx_t *ctx, sbl_err_t *err);
/* The coordinator's fail points (txn_coord.c): -1 when name is not one. */
int sbl_cmd_coord_fail_point(const char *name, bool on);
int sbl_cmd_coordinate_commit(sbl_opctx_t *ctx, sbl_err_t *err);
/* Flow control's ticket for a client's write (flow_gate.c): first, the
 * command's own (the dispatcher's), else a further statement's; 0 at once
 * when the write takes none, else what sbl_repl_flow_acquire returns (an
 * interruption while it waited).  sbl_cmd_flow_on_loop: the calling thread
 * runs a command on a network loop (on) or not (off): it never waits there. */
int sbl_cmd_flow_ticket(sbl_opctx_t *ctx, bool first, sbl_err_t *err);
void sbl_cmd_flow_on_loop(bool on);
/* The database a write command changes (flow_gate.c): renameCollection runs
 * on admin and names its source namespace; the others change their own. */
const char *sbl_cmd_write_db(const sbl_opctx_t *ctx);
/* A write that takes a flow control ticket before it runs: not one to
 * "local", nor one that ends or prepares a transaction. */
bool sbl_cmd_flow_gated(const sbl_cmd_def_t *def, const sbl_opctx_t *ctx);
/* The coordinator's recovery thread (txn_coord.c): started with the
 * command layer, stopped before storage closes. */
void sbl_cmd_coord_start(void);
void sbl_cmd_coord_stop(void);
/* Chunk migrations' fail points (migrate_recover.c): -1 when name is not
 * one.  Migration recovery (sbl_cmd_mig_recovery_start, cmd.h) stops
 * before storage closes. */
int sbl_cmd_mig_fail_point(const char *name, bool on);
void sbl_cmd_mig_recovery_stop(void);
/* A collection (an index) the transaction ctx runs in created: hidden from
 * others until its commit, then logged before its applyOps entry; dropped
 * when it aborts. */
void sbl_cmd_mtxn_note_created(sbl_opctx_t *ctx, const char *ns);
void sbl_cmd_mtxn_note_index(sbl_opctx_t *ctx, const char *ns, const bson_t *spec);
/* currentOp: each open transaction no command is running in, as
 * {lsid, transaction: {parameters: {txnNumber, autocommit}, readTimestamp,
 * startWallClockTime, timeOpenMicros, timeActiveMicros, timeInactiveMicros,
 * expiryTime}} (*docsp: the caller frees each and the array). */
size_t sbl_cmd_mtxn_idle(bson_t ***docsp);
/* The txnNumber of the transaction ctx runs in, or -1. */
int64_t sbl_cmd_mtxn_number(const sbl_opctx_t *ctx);
/* When the transaction ctx runs in passes transactionLifetimeLimitSeconds
 * (monotonic us; 0: ctx runs in none). */
int64_t sbl_cmd_mtxn_expiry_us(const sbl_opctx_t *ctx);
/* killSessions (killAllSessions...) named the session of the transaction ctx
 * runs in while ctx ran: a wait of ctx ends (Interrupted). */
bool sbl_cmd_mtxn_kill_asked(const sbl_opctx_t *ctx);
/*
 * prepare_wait.c: a command that meets a prepared transaction's write waits
 * for its outcome (storage.h, "Prepare conflicts").  A read outside a
 * transaction runs again from a new snapshot; a read inside one and a
 * getMore keep their snapshot and wait in place (storage's scope), bounded by
 * maxTimeMS (50), killOp (11601), the transaction's lifetime (290) and
 * shutdown (11600).  _begin before the handler; _again after each run: true
 * to run the handler again (its reply and error emptied), else *rcp and err
 * hold the command's outcome; _end (always) after the last.
 */
typedef struct sbl_cmd_prepare_wait {
    sbl_prepare_scope_t scope;
    sbl_opctx_t *ctx;
    const sbl_cmd_def_t *def;
    bool in_place;
} sbl_cmd_prepare_wait_t;
void sbl_cmd_prepare_wait_begin(sbl_cmd_prepare_wait_t *w, sbl_opctx_t *ctx,
                                const sbl_cmd_def_t *def);
bool sbl_cmd_prepare_wait_again(sbl_cmd_prepare_wait_t *w, int *rcp, sbl_err_t *err,
                                bson_t *reply);
void sbl_cmd_prepare_wait_end(sbl_cmd_prepare_wait_t *w);
/* currentOp of a command running in a transaction: append the session's
 * transaction {parameters: {txnNumber, autocommit, readConcern}, ...} as
 * above to d when its transaction txn_number is in progress; false when not. */
bool sbl_cmd_mtxn_describe(const sbl_lsid_t *l, int64_t txn_number, bson_t *d);
/* serverStatus.transactions' counters, for the Prometheus endpoint. */
void sbl_cmd_mtxn_counts(int64_t *started, int64_t *committed, int64_t *aborted, int64_t *open);
/* A retryable write with txnNumber txn aborts the session's older open
 * transaction, as mongod's; a prepared one refuses it (267). */
int sbl_cmd_mtxn_newer_number(const sbl_lsid_t *l, int64_t txn, sbl_err_t *err);
void sbl_cmd_mtxn_kill_session(const uint8_t id[16]);
void sbl_cmd_mtxn_reap(void);
/* The transactions of this member that may have written ns and have not
 * ended, for a migration's donor in its critical section (migrate.c): each
 * idle one in progress is aborted (its next statement would meet the
 * critical section, then StaleConfig); returns how many are left: prepared
 * ones, which only their coordinator ends, and ones running a command. */
int sbl_cmd_mtxn_end_writers(const char *ns);
/* snapshot_read.c: the command's readConcern level is linearizable (*linp),
 * and the time it waits for (*afterp: afterClusterTime or afterOpTime's ts,
 * 0: none), for the dispatcher's waits (repl_read.c). */
void sbl_cmd_read_concern_of(const bson_t *cmd, bool *linp, uint64_t *afterp);
/* The command's readConcern may make it wait (linearizable, afterClusterTime,
 * snapshot, majority before this member has a commit point): it runs on a
 * worker, not on a network loop. */
bool sbl_cmd_read_concern_waits(const bson_t *cmd);
/* snapshot_read.c: readConcern snapshot outside a transaction.  _begin,
 * before the handler, checks the read concern and opens the snapshot on
 * ctx->ss (setting ctx->read_ts; a getMore of a snapshot cursor reads at its
 * time); it may wait for the time to be majority-committed, so such reads
 * run on a worker.  _end (always called after _begin) closes it and adds
 * distinct's atClusterTime. */
int sbl_cmd_snapshot_begin(sbl_opctx_t *ctx, sbl_err_t *err);
/* A transaction's first command: its readConcern's atClusterTime (*tsp, 0:
 * none), checked and waited for as for a snapshot read. */
int sbl_cmd_snapshot_txn_ts(sbl_opctx_t *ctx, uint64_t *tsp, sbl_err_t *err);
void sbl_cmd_snapshot_end(sbl_opctx_t *ctx, int rc);
/* transactionLifetimeLimitSeconds, maxTransactionLockRequestTimeoutMillis,
 * minSnapshotHistoryWindowInSeconds:
 * set (-1: not one of them; reply gets "was"), or append the value. */
int sbl_cmd_mtxn_set_parameter(const char *k, const bson_iter_t *it, bson_t *reply,
                               sbl_err_t *err);
void sbl_cmd_mtxn_append_parameter(const char *k, bson_t *reply);
/* transactionLifetimeLimitSeconds now. */
int64_t sbl_cmd_mtxn_lifetime_s(void);
void sbl_cmd_mtxn_append_status(bson_t *d);
/* A transaction's failed command: mongod's label for code (TransientTransactionError,
 * UnknownTransactionCommitResult for a commit whose outcome is unknown), appended to out. */
void sbl_cmd_txn_error_labels(const sbl_opctx_t *ctx, int code, bson_t *out);
/* serverStatus.transactions: retried commands and statements so far. */
int64_t sbl_retry_retried_commands(void);
int64_t sbl_retry_retried_statements(void);
int64_t sbl_retry_record_writes(void); /* statements that wrote their session's record */

/* sessions_cmds.c: logical sessions.  sbl_cmd_session_begin: the dispatcher's
 * call before every handler (lsid: the command's lsid, or NULL): sets
 * ctx->user_uid and, with an lsid, records the session's use and tags ctx
 * with it; a malformed lsid fails the command.  The tick runs on the cursor
 * reaper's thread at least every sbl_cmd_sessions_tick_ms(). */
int sbl_cmd_session_begin(sbl_opctx_t *ctx, const bson_iter_t *lsid, sbl_err_t *err);
int sbl_cmd_sessions_init(sbl_err_t *err);
void sbl_cmd_sessions_tick(void);
int64_t sbl_cmd_sessions_tick_ms(void);
void sbl_cmd_sessions_append_status(bson_t *r);
int sbl_cmd_start_session(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_refresh_sessions(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_end_sessions(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_kill_sessions(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_kill_all_sessions(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_kill_all_sessions_by_pattern(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_refresh_logical_session_cache_now(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_shutdown_cmd(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_create(sbl_opctx_t *ctx, sbl_err_t *err);
/* create (ctx->cmd on ctx->db) with the collection's UUID given (16 bytes). */
int sbl_cmd_create_with_uuid(sbl_opctx_t *ctx, const uint8_t *uuid, sbl_err_t *err);
int sbl_cmd_apply_ops(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop_database(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_list_databases(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_list_collections(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_rename_collection(sbl_opctx_t *ctx, sbl_err_t *err);
/* rename_xdb.c: renameCollection from `from` (src: its handle, the caller's) to
 * `to` in another database, as mongod: a copy under a new UUID renamed over the
 * target, then the source dropped.  0 or the error (the source unchanged). */
int sbl_cmd_rename_across_dbs(sbl_opctx_t *ctx, sbl_coll_t *src, const char *from,
                              const char *to, bool drop_target, sbl_err_t *err);
/* replica set (repl_cmds.c) */
int sbl_cmd_repl_set_initiate(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_repl_set_reconfig(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_repl_set_get_status(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_repl_set_get_config(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_repl_set_heartbeat(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_repl_set_request_votes(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_repl_set_update_position(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_repl_set_step_down(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_repl_set_step_up(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_repl_set_abort_primary_catch_up(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_repl_set_freeze(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_repl_set_sync_from(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_repl_set_maintenance(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_coll_stats(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_db_stats(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_db_hash(sbl_opctx_t *ctx, sbl_err_t *err); /* dbhash.c */
int sbl_cmd_list_indexes(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_create_indexes(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop_indexes(sbl_opctx_t *ctx, sbl_err_t *err);
/* coll_mod.c */
int sbl_cmd_coll_mod(sbl_opctx_t *ctx, sbl_err_t *err);
/* diag.c */
/* backup_cmds.c: fsync (with lock: true, a lock count), fsyncUnlock, and the
 * $backupCursor stage (aggregate.c calls it for a pipeline that starts with it). */
int sbl_cmd_fsync(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_fsync_unlock(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_backup_cursor(sbl_opctx_t *ctx, const bson_t *spec, int64_t batch_size,
                          sbl_err_t *err);
/* True while an fsync lock is held: the dispatcher sends writes to a worker,
 * where sbl_cmd_fsync_wait blocks them until fsyncUnlock (or killOp,
 * maxTimeMS: the error). */
bool sbl_cmd_fsync_locked(void);
int sbl_cmd_fsync_wait(sbl_opctx_t *ctx, sbl_err_t *err);

/* monitor_cmds.c */
int sbl_cmd_top(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_current_op(sbl_opctx_t *ctx, sbl_err_t *err);
struct sbl_docvec;
/* The $currentOp stage's documents into dv (monitor_cmds.c). */
int sbl_cmd_current_op_stage(sbl_opctx_t *ctx, const bson_iter_t *spec, struct sbl_docvec *dv,
                             sbl_err_t *err);
int sbl_cmd_kill_op(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_profile(sbl_opctx_t *ctx, sbl_err_t *err);
/* validate.c */
int sbl_cmd_validate(sbl_opctx_t *ctx, sbl_err_t *err);
/* compact.c */
int sbl_cmd_compact(sbl_opctx_t *ctx, sbl_err_t *err);

/* auth_cmds.c: authentication commands and the dispatcher's authorization check */
int sbl_cmd_sasl_start(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_sasl_continue(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_authenticate(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_logout(sbl_opctx_t *ctx, sbl_err_t *err);
/* The dispatcher's check, after lookup and before the handler: 0 when the
 * connection may run def (always when authorization is off or ctx->conn is
 * NULL); Unauthorized (13) otherwise. */
int sbl_cmd_auth_check(sbl_opctx_t *ctx, const sbl_cmd_def_t *def, sbl_err_t *err);
/* Whether the connection has passed authorization checks as someone, and the
 * check for one more action inside a handler (e.g. updateUser's roles). */
int sbl_cmd_auth_require(sbl_opctx_t *ctx, const char *action, const char *db,
                         const char *coll, sbl_err_t *err);
/* Whether the client may send any $clusterTime (advanceClusterTime: root,
 * members; everyone without auth). */
bool sbl_cmd_may_advance_cluster_time(sbl_opctx_t *ctx);
/* Milliseconds to hold back the reply to a failed authentication (grows with
 * the connection's failures). */
int sbl_cmd_auth_fail_delay_ms(const sbl_client_t *c);
/* Free the client's authentication state (connection close). */
void sbl_cmd_auth_client_free(sbl_client_t *c);
/* hello: append saslSupportedMechs for "db.user" (nothing when the user does
 * not exist) and run speculativeAuthenticate (the reply field is omitted when
 * it fails). */
void sbl_cmd_auth_hello_mechs(sbl_opctx_t *ctx, const char *db_user);
void sbl_cmd_auth_hello_speculative(sbl_opctx_t *ctx, const bson_iter_t *it);
/* connectionStatus's authInfo */
void sbl_cmd_auth_append_status(sbl_opctx_t *ctx, bool show_privileges, bson_t *info);

/* audit_cmds.c: audit events (src/audit) and the audit commands.
 * sbl_cmd_audit_check: the dispatcher's call after prepare (rc is prepare's
 * result): emits authCheck for failed authorization, and for every command
 * when auditAuthorizationSuccess is on; returns rc, or the audit log's error
 * when the event cannot be recorded (the command is refused).
 * sbl_cmd_audit_wait: true when the command's last event is not yet written;
 * cb(arg, rc) then runs on the audit writer thread once it is. */
int sbl_cmd_audit_check(sbl_opctx_t *ctx, int rc, sbl_err_t *err);
bool sbl_cmd_audit_wait(sbl_opctx_t *ctx, void (*cb)(void *arg, int rc), void *arg);
/* Record an event about this connection (recorded even while the audit log
 * fails: it is written once it works again; the reply waits for it). */
void sbl_cmd_audit(sbl_opctx_t *ctx, const char *atype, const bson_t *param, int result);
void sbl_cmd_audit_ns(sbl_opctx_t *ctx, const char *atype, const char *ns);
/* createCollection, preceded by createDatabase when ns is its database's first. */
void sbl_cmd_audit_coll_created(sbl_opctx_t *ctx, const char *ns);
/* The op observer's coll_created: the audit event and the oplog's "c" entry (repl_cmds.c). */
void sbl_cmd_on_coll_created(sbl_opctx_t *ctx, const char *ns);
void sbl_cmd_audit_index(sbl_opctx_t *ctx, const char *atype, const char *ns, const char *name,
                         const bson_t *spec);
void sbl_cmd_audit_rename(sbl_opctx_t *ctx, const char *from, const char *to);
/* A user or role command's event (atype = its name) when rc is 0; returns rc. */
int sbl_cmd_audit_user_result(sbl_opctx_t *ctx, int rc);
void sbl_cmd_audit_authenticate(sbl_opctx_t *ctx, const char *mech, const char *user,
                                const char *db, int result);
void sbl_cmd_audit_logout(sbl_opctx_t *ctx);
void sbl_cmd_audit_client_metadata(sbl_opctx_t *ctx, const bson_t *metadata);
int sbl_cmd_log_application_message(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_get_audit_config(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_set_audit_config(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_set_parameter(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_log_rotate(sbl_opctx_t *ctx, sbl_err_t *err);

/* user_cmds.c: users and roles */
int sbl_cmd_create_user(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_update_user(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop_user(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop_all_users(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_users_info(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_grant_roles_to_user(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_revoke_roles_from_user(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_create_role(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_update_role(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop_role(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop_all_roles(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_roles_info(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_grant_privileges_to_role(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_revoke_privileges_from_role(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_grant_roles_to_role(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cmd_revoke_roles_from_role(sbl_opctx_t *ctx, sbl_err_t *err);

/* ---- text indexes (index_text.c) ---- */
/* A spec option only text indexes take (weights, default_language, ...). */
bool sbl_cmd_text_option(const char *k);
/* index_geo.c: a 2dsphere (sphere) or 2d index spec's own options, as mongod
 * checks them: CannotCreateIndex (67). */
int sbl_cmd_geo_check(const bson_t *spec, bool sphere, sbl_err_t *err);
/* True when key names a field with "text" (or is stored as {_fts: "text", ...}). */
bool sbl_cmd_key_is_text(const bson_t *key);
/* Append the stored key, weights, default_language, language_override and
 * textIndexVersion of a text index spec to out; CannotCreateIndex (67). */
int sbl_cmd_text_spec(const bson_t *spec, const bson_t *key, bson_t *out, sbl_err_t *err);
/* For two specs: 0 unless both are text indexes; 1 when they are the same
 * index; else IndexOptionsConflict (85): one text index per collection. */
int sbl_cmd_text_conflict(const bson_t *req, const bson_t *have, sbl_err_t *err);

/* coll_uuid.c: a command's collectionUUID argument, checked before its handler runs:
 * CollectionUUIDMismatch (361) with db, collectionUUID, expectedCollection and
 * actualCollection appended to reply; TypeMismatch (14) when not a UUID. */
int sbl_cmd_check_coll_uuid(sbl_opctx_t *ctx, bson_t *reply, sbl_err_t *err);
/* Run cmd here (sbl_cmd_run; reply initialised by it): an ok: 0 reply, or
 * its first write error, becomes the error; a writeConcernError does not. */
int sbl_cmd_run_checked(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);

#endif
