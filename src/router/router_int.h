/*
 * router_int.h: what the router's files share.  rt_remote.c: connection
 * pools and command round trips; rt_meta.c: the metadata cache and the
 * sharding commands that change it; rt_target.c: shard keys and chunk
 * lookup; rt_cursor.c: reads (find, getMore, count, distinct, aggregate);
 * rt_agg.c: pipelines split between the shards and the router's merger;
 * rt_write.c: writes; rt_move.c: a document moving to another shard when
 * its shard key changes; rt_migrate.c: moveChunk, moveRange and the balancer
 * commands (run by the config server); rt_session.c: sessions, retryable
 * writes and transactions; rt_stream.c: change streams; rt_merge.c:
 * mergeChunks, mergeAllChunksOnShard, clearJumboFlag; rt_cmds.c: the
 * command table; rt_fast.c: a one-shard find answered on the client's
 * network loop; rt_fastw.c: one-shard writes the same way.
 *
 * A routing table (rt_coll_t) is immutable once built and reference
 * counted: a refresh builds a new one and swaps it in, so a request keeps a
 * consistent view for as long as it holds its reference.
 */
#ifndef SBL_ROUTER_INT_H
#define SBL_ROUTER_INT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/errors.h"

#define RT_MAX_SHARDS 64
#define RT_HOST_MAX 256 /* a member's "host:port" */
#define RT_RETRIES 5 /* StaleConfig (StaleDbVersion) refresh-and-retry rounds */

/* A shard's answer that the router routed with old metadata: StaleConfig
 * (a collection's) or StaleDbVersion (a database's, for an unsharded
 * collection); the router refreshes the routing table with force (which
 * re-reads the database too) and retries. */
static inline bool rt_stale_code(int code)
{
    return code == SBL_E_StaleConfig || code == SBL_E_StaleDbVersion;
}

/* A chunk or shard version: epoch and timestamp name the collection's
 * incarnation, major.minor order the changes within it. */
typedef struct rt_version {
    bson_oid_t epoch;
    uint32_t ts_t, ts_i;
    uint32_t major, minor;
} rt_version_t;

/* One entry of a chunk's history (config.chunks' history: newest first):
 * from valid_after on, shard owned it. */
typedef struct rt_hist {
    uint64_t valid_after;
    int shard;
} rt_hist_t;

typedef struct rt_chunk {
    bson_t *min, *max; /* shard key documents; [min, max) */
    int shard;         /* index into the shard list */
    uint32_t major, minor;
    rt_hist_t *hist;   /* its owners over time, newest first (nhist 0: none recorded) */
    size_t nhist;
} rt_chunk_t;

/* A database's version (config.databases' version: {uuid, timestamp,
 * lastMod}), sent as databaseVersion with commands for its unsharded
 * collections; known false: none (config and admin, or a database nobody
 * created yet). */
typedef struct rt_dbv {
    bool known;
    uint8_t uuid[16];
    uint32_t ts_t, ts_i;
    int32_t lastmod;
} rt_dbv_t;

/* One namespace's routing table. */
typedef struct rt_coll {
    int refs;
    char ns[256];
    bool sharded;
    int primary;          /* the database's primary shard (unsharded: where it lives) */
    rt_dbv_t dbv;         /* the database's version read with primary */
    bson_t *key;          /* shard key pattern */
    int nkey;
    bool hashed;          /* the first (or only hashed) field is "hashed" */
    int hashed_pos;       /* its position in the key, -1 none */
    bool unique;
    bool transient;       /* not cached: its database does not exist yet */
    rt_version_t version; /* collection version: the highest chunk version */
    rt_chunk_t *chunks;   /* sorted by min */
    size_t nchunks;
    rt_version_t placement[RT_MAX_SHARDS]; /* per shard: its highest chunk version (0.0: none) */
} rt_coll_t;

/* ---- rt_remote.c ---- */
int rt_remote_init(const char *configdb, sbl_err_t *err);
void rt_remote_shutdown(void);
/* Add a shard's pool (host "rs/h:p,..." or "h:p"); returns its index or -1. */
int rt_shard_add(const char *id, const char *host);
int rt_shard_find(const char *id);
int rt_shard_count(void);
/* config.shards' state of shard i, as rt_shards_reload last read it: a
 * removed shard (removeShard completed) keeps its index (routing tables
 * hold indexes) but no command goes to it; a draining one takes no new
 * chunk or database. */
void rt_shard_set_state(int i, bool draining, bool removed);
bool rt_shard_removed(int i);
/* Neither draining nor removed: new databases and chunks may go there. */
bool rt_shard_takes_data(int i);
const char *rt_shard_id(int i);
const char *rt_shard_host(int i);
/* Run cmd on shard i (i == -1: the config servers) in database db.  Returns
 * 0 when a reply came back (it may say ok: 0; *reply holds it, initialised
 * by the callee), or an error (HostUnreachable ...) with *reply empty. */
int rt_run(int shard, const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
/* As rt_run, on the member host of shard ("host:port", as rt_answered_by
 * gave it; "" or NULL: its primary): a cursor's getMore and killCursors go
 * to the member that opened it, which answers them after a step-down. */
int rt_run_on(int shard, const char *host, const char *db, const bson_t *cmd, bson_t *reply,
              sbl_err_t *err);
/* The member ("host:port") that answered this thread's last command to
 * shard through rt_run, rt_run_on or rt_run_many ("" none yet). */
const char *rt_answered_by(int shard);
/* Send cmds[i] to shard[i] for every i first, then read every reply: the
 * shards work in parallel.  replies[i] is always initialised; rcs[i] is 0
 * or the transport error (errs[i]).  Returns how many failed. */
int rt_run_many(int n, const int *shard, const char *db, const bson_t *const *cmds,
                bson_t *replies, int *rcs, sbl_err_t *errs);
/* The same, cmds[i] to member on[i] of shard[i] (rt_run_on's rule; on or
 * on[i] NULL or "": the primary). */
int rt_run_many_on(int n, const int *shard, const char *const *on, const char *db,
                   const bson_t *const *cmds, bson_t *replies, int *rcs, sbl_err_t *errs);
/* The reply's ok and code (0 when ok). */
int rt_reply_code(const bson_t *reply);
/* 0 for an ok reply, else err set to "what :: caused by :: errmsg" with its code. */
int rt_reply_error(const bson_t *reply, const char *what, sbl_err_t *err);
/* Copy a command without the fields a router must not forward ($db, lsid,
 * $clusterTime, $readPreference, txnNumber ...), keeping the others. */
void rt_copy_cmd(const bson_t *in, bson_t *out, const char *const *skip_extra);
/* $clusterTime (and with op_time operationTime): the newest cluster time
 * the shards' replies showed, appended to out; false (nothing appended)
 * before any. */
bool rt_append_cluster_time(bson_t *out, bool op_time);
/* The same $clusterTime as one BSON element's bytes (*lenp of them; the
 * calling thread's copy, valid until its next call), its time in *tsp;
 * NULL before any. */
const uint8_t *rt_cluster_time_elem(size_t *lenp, uint64_t *tsp);
/* The newest cluster time the shards' replies or the clients showed (0:
 * none yet). */
uint64_t rt_cluster_time(void);
/* A client's $clusterTime checked as mongos does with a keyFile (against
 * the keys of the config servers and shards; sbl_ctime_check), unless the
 * client may advanceClusterTime; once accepted, it advances the router's
 * cluster time (rt_cluster_time) with its signature. */
int rt_check_cluster_time(const bson_t *cmd, bool may_advance, sbl_err_t *err);
/* The same for $clusterTime ct (its iterator) on a loop thread: a signing
 * key not cached is not read again (KeyNotFound, for the worker path to
 * check again with the keys read). */
int rt_check_cluster_time_at(const bson_iter_t *ct, bool may_advance, sbl_err_t *err);
/* The configdb set name and hosts. */
const char *rt_configdb(void);
/* Commands sent to shard i since start and the total time their replies took. */
void rt_shard_traffic(int i, int64_t *requests, int64_t *wait_us);
/* Run cmd on one member ("host:port") over the caller's own connection *fdp:
 * dialed when *fdp is -1 (connect and each read or write bounded by
 * timeout_ms), closed and set to -1 after an I/O error.  Returns 0 with the
 * reply (which may say ok: 0) or an error with *reply empty; *reply is
 * initialised either way. */
int rt_host_run(const char *hostport, int *fdp, int timeout_ms, const char *db, const bson_t *cmd,
                bson_t *reply, sbl_err_t *err);

/* A loop thread's read (rt_fast.c), on a connection of the shard's pool
 * that the loop then keeps.  rt_conn_borrow: an idle connection to shard's
 * primary (its "host:port" into host), or -1 when none is idle or the
 * primary is not known (then the worker path dials or looks it up).
 * rt_conn_msg: cmd (built by rt_copy_cmd: no $clusterTime of its own) with
 * the router's fields ($clusterTime; no session fields: rt_fast.c takes no
 * transaction or retryable write) as one OP_MSG
 * into buf, its request id into *ridp; its length, 0 when it is longer
 * than cap.  rt_conn_write: n bytes to fd; false on an I/O error (a reply
 * is framed with net.h's sbl_client_msg_len and _view).  rt_conn_answered: the reply came (the member
 * noted for rt_answered_by, the traffic counted, the cluster time noted);
 * false when the connection must be dropped (its member is no primary now:
 * forgotten, as after rt_run).  rt_shard_forget: the shard's primary is
 * looked up again (a connection failed).  rt_shard_gen: how many times the
 * primary was forgotten; a loop drops a connection borrowed before. */
int rt_conn_borrow(int shard, char host[RT_HOST_MAX]);
size_t rt_conn_msg(int shard, const char *db, const bson_t *cmd, uint8_t *buf, size_t cap,
                   int32_t *ridp);
bool rt_conn_write(int fd, const uint8_t *m, size_t n);
bool rt_conn_answered(int shard, const char *host, int64_t t0, const bson_t *reply);
/* As rt_conn_answered for a reply that says ok: 1 (the connection is
 * kept), its $clusterTime at ct (NULL: none). */
void rt_conn_answered_ok(int shard, const char *host, int64_t t0, const bson_iter_t *ct);
void rt_shard_forget(int shard);
uint64_t rt_shard_gen(int shard);
/* Whether reply refuses a command as not primary before it ran. */
bool rt_refused_not_primary(const bson_t *reply);

/* ---- rt_meta.c ---- */
/* Every document of config.<coll> matching filter (sorted by sort, may be
 * NULL) appended to arr (initialised by the caller) as "0", "1", ...
 * Returns 0 or an error. */
int rt_cfg_find_all(const char *coll, const bson_t *filter, const bson_t *sort, bson_t *arr,
                    sbl_err_t *err);
/* A write command on the config servers, w: majority; 0 or the error (a
 * write error's code too).  reply_out (may be NULL) receives the reply
 * (initialised only when 0 is returned). */
int rt_cfg_write(const bson_t *cmd_in, bson_t *reply_out, sbl_err_t *err);
/* The routing table of ns (refreshing from the config servers when absent
 * or when force).  Returns a reference (rt_coll_release) or NULL with err. */
rt_coll_t *rt_coll_get(const char *ns, bool force, sbl_err_t *err);
void rt_coll_release(rt_coll_t *c);
/* ns's routing table when it is cached (a reference), else NULL: never
 * reads the config servers. */
rt_coll_t *rt_coll_cached(const char *ns);
/* ns's routing table read afresh, for a command that needs a sharded
 * collection (moveChunk, moveRange, mergeChunks ...: mongos's "sharded
 * routing info with refresh"): a reference, or NULL with err 73
 * InvalidNamespace (ns NULL or not "<db>.<coll>"), 61 NamespaceNotSharded
 * or rt_coll_get's error. */
rt_coll_t *rt_sharded_coll(const char *ns, sbl_err_t *err);
/* Forget every cached table and database (flushRouterConfig). */
void rt_meta_flush(void);
/* The primary shard of db; create_db: register the database (choosing a
 * primary) when the config servers do not know it.  -1 with err. */
int rt_db_primary(const char *db, bool create_db, sbl_err_t *err);
/* Run cmd on db's primary shard (create: register db when new; any_if_unknown: a
 * database no shard knows goes to the first shard instead of failing) with the
 * database's version (and, unsharded_version, the unsharded shardVersion), again after
 * forgetting the cached primary while it answers StaleDbVersion; a cursor reply is
 * wrapped into a router cursor (rt_cmds.c). */
int rt_to_db_primary(const char *db, const bson_t *cmd, bool create, bool any_if_unknown,
                     bool unsharded_version, bson_t *reply, sbl_err_t *err);
/* The primary shard of a database nobody created yet, chosen by the client
 * (enableSharding's primaryShard): db registered there; -2 with err
 * (NamespaceExists when it exists on another shard). */
int rt_db_create_on(const char *db, int shard, sbl_err_t *err);
/* Forget db's cached primary and version (a shard said StaleDbVersion). */
void rt_db_forget(const char *db);
/* databaseVersion of db as cached appended to cmd (nothing when not cached). */
void rt_append_db_version(bson_t *cmd, const char *db);
/* Reload config.shards: add the new shards, note each one's draining, mark
 * those no longer there removed. */
int rt_shards_reload(sbl_err_t *err);
/* Update config.<coll>'s document {_id: id} with u (operators), w: "majority". */
int rt_cfg_update_id(const char *coll, const char *id, const bson_t *u, sbl_err_t *err);
/* Ask every shard to re-read ns's version now (_flushRoutingTableCacheUpdates);
 * a shard that does not answer re-reads it at its next version check. */
void rt_flush_shards(const char *ns);
/* The sharding commands (reply receives the fields besides ok). */
int rt_cmd_add_shard(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_enable_sharding(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_shard_collection(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_split(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
/* rt_refine.c: refineCollectionShardKey. */
int rt_cmd_refine_shard_key(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
/* ---- rt_migrate.c ---- */
/* moveChunk, moveRange (through the config server's _configsvrMoveRange). */
int rt_cmd_move_chunk(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_move_range(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
/* split's find / bounds: the median key value of the chunk they name into
 * middle (one-field keys; hashed: the middle of the hashed range). */
int rt_split_point(const rt_coll_t *c, const bson_t *cmd, bson_t *middle, sbl_err_t *err);
/* rt_balance.c: configureCollectionBalancing, balancerCollectionStatus;
 * and where a moveRange without max ends: end receives the shard key value
 * about one chunk size of documents after ch's min (one-field range keys;
 * nothing appended: the whole chunk). */
int rt_cmd_configure_balancing(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_balancer_coll_status(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_range_end_by_size(const rt_coll_t *c, const rt_chunk_t *ch, bson_t *end, sbl_err_t *err);
/* which: "Start", "Stop" or "Status": the config server's answer's fields. */
int rt_cmd_balancer(const char *which, bson_t *reply, sbl_err_t *err);
/* ---- rt_merge.c ---- */
/* mergeChunks, mergeAllChunksOnShard and clearJumboFlag (through the config
 * server primary's _configsvr* commands). */
int rt_cmd_merge_chunks(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_merge_all_chunks(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_clear_jumbo_flag(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
/* ---- rt_drain.c ---- */
/* removeShard (draining: started, ongoing, completed) and movePrimary. */
int rt_cmd_remove_shard(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_move_primary(const bson_t *cmd, bson_t *reply, sbl_err_t *err);
/* db's critical section on its primary shard s (movePrimary's donor,
 * dropDatabase): enter it (returns once the routed commands inside have
 * left; a lease the shard ends by itself unless renewed), renew it (an
 * error when it is no longer held), or exit it (the shard forgets db's
 * version).  0 or the shard's error. */
typedef enum { RT_CRIT_ENTER, RT_CRIT_RENEW, RT_CRIT_EXIT } rt_crit_t;
int rt_db_crit(int s, const char *db, rt_crit_t what, sbl_err_t *err);
/* ---- rt_zones.c ---- */
/* addShardToZone, removeShardFromZone, updateZoneKeyRange (and their
 * lower-case names): on the admin database only, carried out by the config
 * server primary (its _configsvr* command), its error passed on. */
int rt_cmd_zone(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
/* shardCollection's first chunks of ns when zone ranges are defined for it
 * (mongod's initial split policies): key, its hashed field's position
 * (hashed_pos, -1: none), whether the collection is empty, the command's
 * presplitHashedZones and numInitialChunks (0: not given).  Appends to out
 * (an array, initialised by the caller) one {min, max, shard: <index>} per
 * chunk in key order; nothing when the default policy applies (no range, or
 * documents already there).  mongod's errors otherwise (InvalidOptions, the
 * presplitHashedZones rules 31387-31391 and 31412, 50973 for a zone no
 * shard holds). */
int rt_zone_first_chunks(const char *ns, const bson_t *key, int hashed_pos, bool empty,
                         bool presplit, int64_t nchunks, bson_t *out, sbl_err_t *err);

/* Remove ns's (or db's, when coll is NULL) sharding metadata after a drop. */
void rt_meta_drop(const char *db, const char *coll);
/* Append shardVersion for shard i to cmd (UNSHARDED for an unsharded table,
 * with the database's databaseVersion when it has one). */
void rt_append_version(bson_t *cmd, const rt_coll_t *c, int shard);

/* ---- rt_target.c ---- */
/* The chunk owning shard key values vals[nkey] (hashed field already hashed). */
const rt_chunk_t *rt_chunk_for(const rt_coll_t *c, const bson_value_t *vals);
/* The shard owning doc (missing key fields count as null) at the time the
 * current command reads at (rt_read_at; 0: now); -1 with err
 * StaleChunkHistory when that time is older than its chunk's history. */
int rt_target_doc(const rt_coll_t *c, const bson_t *doc, sbl_err_t *err);
/* The same with sbl_shard_key_values's flags (SBL_SHARD_KEY_WHOLE_NAMES). */
int rt_target_key(const rt_coll_t *c, const bson_t *doc, int flags, sbl_err_t *err);
/* Whether the filter names every shard key field by equality. */
bool rt_filter_has_full_key(const rt_coll_t *c, const bson_t *filter);
/* The shard that owned ch at cluster time at (0: now): its history's first
 * entry with valid_after <= at; -1 when at is older than the history kept. */
int rt_chunk_owner_at(const rt_chunk_t *ch, uint64_t at);
/* Shards a filter can match (a read's, or a write statement's) at the time
 * the current command reads at (rt_read_at; 0: now): fills shards[] (a set
 * flag per shard index) and returns how many; a filter with the full shard
 * key's equality gives one; a range on the first field of a range key gives
 * the overlapping chunks' shards; anything else gives every shard with a
 * chunk.  -1 with err StaleChunkHistory when that time is older than a
 * chunk's history. */
int rt_target_read(const rt_coll_t *c, const bson_t *filter, bool shards[RT_MAX_SHARDS],
                   sbl_err_t *err);
/* The cluster time the current client command reads at: a snapshot read's
 * atClusterTime (rt_snapshot.c) or its snapshot transaction's; 0: none. */
uint64_t rt_read_at(void);
/* rt_cmds.c: the snapshot read's time for this thread's command (0: none). */
void rt_snapshot_set_read_at(uint64_t at);

/* ---- rt_cursor.c ---- */
int rt_find(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_get_more(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_kill_cursors(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_count(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_distinct(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_aggregate(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
/* rt_snapshot.c: a find, aggregate or distinct with readConcern
 * {level: "snapshot"} outside a transaction.  Returns the time it reads at
 * (0: not such a read): the client's atClusterTime, or the router's newest
 * cluster time, then with *rewrotep set and *pinned (initialized here, the
 * caller destroys it) the command carrying it as atClusterTime.  A
 * transaction's first statement with readConcern snapshot and no
 * atClusterTime is rewritten the same way, and 0 returned (replies in a
 * transaction name no time).
 * rt_snapshot_reply: that time into command name's ok reply, where mongos
 * puts it (cursor.atClusterTime; distinct: atClusterTime). */
uint64_t rt_snapshot_pin(const char *name, const bson_t *cmd, bson_t *pinned, bool *rewrotep);
void rt_snapshot_reply(const char *name, uint64_t at, bson_t *reply);
int rt_explain(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
/* A shard's cursor reply turned into a router cursor on that shard (for
 * commands passed through to one shard: listCollections, listIndexes ...). */
int rt_wrap_cursor_reply(int shard, const char *db, bson_t *shard_reply, bson_t *reply,
                         sbl_err_t *err);
void rt_cursors_shutdown(void);
/* A merging cursor over the shards' cursor replies (stolen) replies[i] from
 * shard_of[i], sorted by sort (NULL: unsorted), with limit (-1: none) and
 * skip applied after the merge; its first batch into reply. */
int rt_merge_cursors(const char *db, const char *coll, bson_t *replies, const int *shard_of,
                     int n, const bson_t *sort, int64_t limit, int64_t skip, bson_t *reply,
                     sbl_err_t *err);
/* killCursors of a shard's cursor id (0: nothing) on member host of shard
 * (rt_run_on's rule); its answer is not waited for beyond the round trip. */
void rt_kill_shard_cursor(int shard, const char *host, const char *db, const char *coll,
                          int64_t id);
/* A router cursor over docs (a BSON array the router made: an aggregation
 * merged here), served in batches: the first of batch documents into reply. */
int rt_docs_cursor(const char *db, const char *coll, const bson_t *docs, int64_t batch,
                   bson_t *reply, sbl_err_t *err);
/* Every document of a shard's cursor reply (getMore until exhausted) into arr. */
int rt_drain_cursor(bson_t *shard_reply, const char *db, const char *coll, int shard,
                    bson_t *arr, sbl_err_t *err);

/* A change stream's merge across shards (rt_stream.c), owned by the
 * router cursor it is registered with. */
typedef struct rt_stream rt_stream_t;
/* Register stream s as a router cursor (which then owns it); its id. */
int64_t rt_stream_register(rt_stream_t *s, const char *db, const char *coll);

/* ---- rt_agg.c ---- */
/* aggregate over the shards targets[] of c (ns db.coll) when rt_read.c's
 * merges do not cover the pipeline: the shards run the stages before the
 * split point, the router the rest (src/agg).  Returns 0 with reply filled
 * (a cursor, or a shard's error reply), 0 with *stalep set when a shard
 * answered StaleConfig (reply untouched: retry with a fresh table), or an
 * error (238 NotImplemented for a stage the router cannot run). */
int rt_agg_split(const char *db, const char *coll, const bson_t *cmd, const rt_coll_t *c,
                 const bool targets[RT_MAX_SHARDS], bson_t *reply, bool *stalep, sbl_err_t *err);
/* Append to reply explain's splitPipeline {shardsPart, mergerPart} of cmd's
 * pipeline as rt_agg_split cuts it; nothing when it cannot be cut (238). */
void rt_agg_explain_split(const bson_t *cmd, bson_t *reply);
/* rt_read.c: a find across shards sorted by {$meta: "textScore"}, run as the aggregate
 * it stands for ($match, $sort, $skip, $limit, $project); -1 (nothing done)
 * when it has an option or a projection no pipeline has. */
int rt_agg_find_by_meta(const char *db, const char *coll, const bson_t *cmd, bson_t *reply,
                        sbl_err_t *err);
/* Whether cmd's pipeline reads ($lookup, $graphLookup, $unionWith) or
 * writes ($out, $merge) a collection at any depth that shard cannot serve
 * alone (sharded, or unsharded elsewhere): then it cannot go whole to shard. */
bool rt_agg_elsewhere(const char *db, const bson_t *cmd, int shard);

/* ---- rt_stream.c ---- */
/* aggregate whose pipeline starts with $changeStream (coll NULL: a
 * database's or the deployment's stream): opened on every shard, merged. */
int rt_change_stream(const char *db, const char *coll, const bson_t *cmd, bson_t *reply,
                     sbl_err_t *err);
/* getMore on a stream's router cursor id: the next events (waiting up to
 * the command's maxTimeMS, 1 s by default); *donep when the cursor is
 * over (every shard's closed).  A shard's error reply goes into reply. */
int rt_stream_more(rt_stream_t *s, int64_t id, const bson_t *cmd, bson_t *reply, bool *donep,
                   sbl_err_t *err);
/* Kill the shards' cursors and free s. */
void rt_stream_free(rt_stream_t *s);

/* ---- rt_auth.c ---- */
struct sbl_conn;
/* With authorization on: read users and roles from the config servers. */
void rt_auth_init(void);
/* 0 when the connection's client may run the command, else Unauthorized. */
int rt_auth_check(struct sbl_conn *conn, const char *name, const char *db, const bson_t *cmd,
                  sbl_err_t *err);
/* The same on a loop thread, which must not wait for the config servers:
 * -1 when it cannot tell without them (no user authenticated, or privileges
 * not resolved since the last user or role change or for 30 s); the worker
 * path then checks (and answers) the command. */
int rt_auth_check_loop(struct sbl_conn *conn, const char *name, const char *db,
                       const bson_t *cmd, sbl_err_t *err);
/* saslStart, saslContinue, logout, connectionStatus and the user and role
 * commands (passed to the config servers) are answered by rt_auth_run. */
bool rt_auth_handles(const char *name);
/* Whether conn's client may send any $clusterTime with command name
 * (advanceClusterTime; without authorization; name needs no authentication
 * and the client has none: the router ignores the time then). */
bool rt_auth_may_advance_cluster_time(struct sbl_conn *conn, const char *name);
int rt_auth_run(struct sbl_conn *conn, const char *name, const char *db, const bson_t *cmd,
                bson_t *reply, sbl_err_t *err);
/* The command a worker runs belongs to conn's client (enter ... leave);
 * rt_auth_owner names its user ("db.user", "" when none or without
 * authorization) so cursors can be tied to the user who opened them. */
void rt_auth_enter(struct sbl_conn *conn);
void rt_auth_leave(void);
void rt_auth_owner(char *buf, size_t n);
/* The uid of the current client's user (SHA-256 of "user@db", of "" when
 * none), as lsids carry it to the shards. */
void rt_auth_uid(uint8_t uid[32]);
/* listDatabases: whether the current client sees db (mongod's
 * authorizedDatabases: all with the listDatabases privilege, else those it
 * holds a privilege on). */
bool rt_auth_db_visible(const char *db);
/* The monitoring port's HTTP basic auth: an admin-database user whose
 * password matches and who may run serverStatus (as sabled's page asks). */
bool rt_auth_metrics_authorize(const char *user, const char *password);
/* hello's speculativeAuthenticate: the saslStart reply appended to reply. */
void rt_auth_hello(struct sbl_conn *conn, const bson_t *cmd, bson_t *reply);

/* ---- rt_watch.c ---- */
/* Stop the shard poller (sbl_router_watch_start) before the pools go. */
void rt_watch_stop(void);

/* ---- rt_session.c ---- */
/* Note the client command's lsid, txnNumber, autocommit and
 * startTransaction on this thread (a transaction's first statement starts
 * it on the router); 0 or the error to answer.  rt_sess_end forgets them. */
int rt_sess_begin(const char *name, const bson_t *cmd, sbl_err_t *err);
/* The check rt_sess_begin makes of a command's lsid (it: the field): its id
 * into id, or TypeMismatch, BadValue or FailedToParse. */
int rt_sess_lsid(const bson_iter_t *it, uint8_t id[16], sbl_err_t *err);
/* The snapshot transaction's atClusterTime the current statement runs in
 * (0: not in one). */
uint64_t rt_sess_read_at(void);
void rt_sess_end(void);
/* After the handler: a failed command in a transaction aborts it on every
 * participant. */
void rt_sess_after(int rc, const bson_t *reply);
/* The errorLabels drivers act on (TransientTransactionError,
 * RetryableWriteError) for an error the router itself answers. */
void rt_sess_error_labels(int code, bson_t *reply);
/* The fields a command to shard carries for the current client command
 * (lsid, txnNumber, autocommit, startTransaction, readConcern) appended to
 * extra; false when there are none. */
bool rt_sess_extra(int shard, const bson_t *cmd, bson_t *extra);
/* What shard answered (NULL: no answer) to a command; started: it carried
 * startTransaction (rt_sess_extra). */
void rt_sess_reply(int shard, bool started, const bson_t *reply);
/* Whether the current command is a retryable write or in a transaction
 * (its writes carry stmtIds). */
bool rt_sess_retryable(void);
/* Whether the current command is a statement of a multi-document transaction. */
bool rt_sess_in_txn(void);
/* off: commands sent from now on carry no session fields (cleanup such as
 * killing an expired cursor); returns the previous state, which
 * rt_sess_suspend(!previous) restores. */
bool rt_sess_suspend(bool off);
/* The current command's lsid (id, uid) and txnNumber; false when it has none. */
bool rt_sess_ids(uint8_t id[16], uint8_t uid[32], int64_t *txnp);
/* An internal transaction on behalf of the current retryable write (mongos's
 * for a document changing shards): from begin on, commands to the shards
 * carry a new session of the client's user, txnNumber 0 and autocommit:
 * false; end commits it (commit: with client_cmd's writeConcern; two-phase
 * when two shards wrote) or aborts it, and returns to the client's session.
 * begin 0 or the error; end 0 or the commit's error. */
int rt_sess_internal_begin(sbl_err_t *err);
int rt_sess_internal_end(bool commit, const bson_t *client_cmd, sbl_err_t *err);
int rt_cmd_commit_txn(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_abort_txn(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_start_session(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_end_sessions(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_kill_sessions(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_refresh_sessions(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_cmd_kill_all_sessions(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);

/* ---- rt_move.c ---- */
/* Statement stmt of the current retryable write moved a document from
 * shard s (rt_move_doc): *foundp, and its result into *result (initialised
 * here; the caller destroys it).  0 or a transport error. */
int rt_move_recorded(int s, int32_t stmt, bson_t *result, bool *foundp, sbl_err_t *err);
/* Shard from answered statement stmt of the current retryable write or
 * transaction (an update or findAndModify of db.coll in client_cmd) with 283
 * WouldChangeOwningShard and info (that error's preImage, postImage,
 * shouldUpsert): move the document to the shard owning postImage, in the
 * client's transaction, or else in an internal transaction that also
 * records the result for a retry.  Returns
 * 0 with *result (initialised here) = {n, nModified, upserted?, value?}
 * (value: image 0 the document before, 1 after, -1 none), or the error
 * (StaleConfig: refresh the routing table and run the statement again). */
int rt_move_doc(const char *db, const char *coll, const bson_t *client_cmd, const rt_coll_t *c,
                int from, int32_t stmt, const bson_t *info, int image, bson_t *result,
                sbl_err_t *err);
/* A move met WriteConflict (the document changed after its shard answered):
 * true, after a short jittered pause, while another try of the statement is
 * allowed (*tries counts them), as mongos's internal transactions retry a
 * transient error; false when the client should get the conflict. */
bool rt_move_again(int *tries);

/* ---- rt_write.c ---- */
int rt_insert(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_update(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
int rt_delete(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);
/* The shard that every statement of update or delete cmd targets by c
 * (c's primary for an unsharded collection: -1, the config servers, for
 * config's), when none may change a document's shard key: then the command
 * goes to it whole; -2 or -3 when it goes statement by statement. */
int rt_write_one_shard(const rt_coll_t *c, const bson_t *cmd, bool is_update);
/* The client's reply to insert cmd on a sharded collection whose documents
 * all went to one shard in one batch, from that shard's reply r (neither
 * stale nor a not-primary refusal), as rt_insert builds it: n, writeErrors,
 * writeConcernError; a batch refused as a whole is each document's error
 * (ordered: the first's).  reply is the caller's (initialised). */
void rt_insert_one_reply(const bson_t *cmd, const bson_t *r, bson_t *reply);
/* The helpers rt_fam.c shares with update.  "db.<cmd[verb]>" into ns (NULL
 * when cmd[verb] is not a string). */
const char *rt_write_ns(const char *db, const bson_t *cmd, const char *verb, char *ns, size_t n);
/* ns's routing table read again after a StaleConfig/StaleDbVersion; create:
 * the write creates its database when it is gone.  NULL: err set. */
rt_coll_t *rt_write_refresh(const char *db, const char *ns, bool create, sbl_err_t *err);
/* Whether an update pipeline may change a shard key field. */
bool rt_pipeline_may_change_key(const rt_coll_t *c, const bson_t *pl);
/* Whether update ud would change a shard key field of a document q matches. */
bool rt_changes_shard_key(const rt_coll_t *c, const bson_t *ud, const bson_t *q);
/* mongod's rules for a statement changing a document's shard key (31025,
 * 72, 20), and with the new value's (54) for rt_key_change; 0 when it may,
 * else the code with *msgp its message (static). */
int rt_key_rules(const rt_coll_t *c, const bson_t *q, bool multi, const char **msgp);
int rt_key_change(const rt_coll_t *c, const bson_t *ud, const bson_t *q, bool multi,
                  const char **msgp);

/* ---- rt_cmds.c and rt_fast.c ---- */
struct sbl_request;
/* Run req on the worker pool, as every routed command (rt_cmds.c). */
void rt_dispatch_worker(struct sbl_conn *conn, struct sbl_request *req);
/* Finish a routed command: reply gets ok (or rc's error: errmsg, code,
 * codeName, errorLabels) and $clusterTime, is sent, and counts as an op of
 * name that started at t0 (CLOCK_MONOTONIC microseconds).  reply stays the
 * caller's. */
/* The opcounters and latencies of a command answered after t0 (rt_answer
 * counts them; a reply sent otherwise calls this). */
void rt_count_op(const char *name, int64_t t0);
void rt_answer(struct sbl_conn *conn, struct sbl_request *req, const char *name, int64_t t0,
               int rc, const sbl_err_t *err, bson_t *reply);
/* A find on the connection's loop thread (rt_fast.c): true when it took req
 * (it answers it, or hands it to the worker pool when anything but the
 * common case comes up), false when the worker pool should run it. */
bool rt_fast_find(struct sbl_conn *conn, struct sbl_request *req);
/* The same for an insert, update or delete whose documents or statements
 * all go to one shard (rt_fastw.c). */
bool rt_fast_write(struct sbl_conn *conn, struct sbl_request *req);
/* Whether command name (cmd, on db) may be run from the loop: small, no
 * transaction, retryable write or readConcern fields, and the dispatcher's
 * checks passed without waiting (authorization with the privileges as
 * resolved, $clusterTime with the keys as cached, the lsid); false: the
 * worker path runs it (and answers any error). */
bool rt_fast_admit(struct sbl_conn *conn, const char *name, const char *db, const bson_t *cmd);
/* How the shard's reply becomes the client's: a find's cursor (RT_FAST_FIND),
 * passed through (RT_FAST_WRITE: update, delete, an unsharded insert), or
 * rt_insert_one_reply (RT_FAST_INSERT_SPLIT: a sharded collection's). */
typedef enum { RT_FAST_FIND, RT_FAST_WRITE, RT_FAST_INSERT_SPLIT } rt_fast_kind_t;
/* Send fwd (the command for shard s, with its version; the caller's) from
 * conn's loop and answer req when the reply is in: true when it took req
 * (name, static, names it for the counters; t0 when it came), false when no
 * connection of the loop or the shard's pool is ready (nothing sent). */
bool rt_fast_send(struct sbl_conn *conn, struct sbl_request *req, const char *name,
                  rt_fast_kind_t kind, int64_t t0, const char *db, int s, const bson_t *fwd);
/* Finds and writes answered on the loops since start, and those sent from a
 * loop but handed to the worker pool after all (serverStatus's network
 * section). */
void rt_fast_counts(int64_t *reads, int64_t *reads_to_workers, int64_t *writes,
                    int64_t *writes_to_workers);

/* A loop's connections, for a command of a find across shards (rt_scan.c).
 * rt_lconn_send: cmd goes to shard's primary at the end of this loop
 * iteration on a connection of the loop; cb(arg, slot, lc, reply, keep)
 * runs on the loop once with the reply (a view into lc's buffer, valid
 * until lc is released; keep: the connection may be kept) or with reply
 * NULL (the connection failed or timed out; the shard's primary is looked
 * up again).  NULL when no connection is at hand or cmd is too large (cb
 * never runs).  rt_lconn_release: lc goes back to the loop's idle list
 * (keep) or is closed; every lc that was sent is released once, after its
 * cb.  rt_lconn_host: the member it talks to ("host:port"). */
typedef struct fast_conn rt_lconn_t;
typedef void (*rt_lconn_cb)(void *arg, int slot, rt_lconn_t *lc, const bson_t *reply, bool keep);
rt_lconn_t *rt_lconn_send(struct sbl_conn *client, int shard, const char *db, const bson_t *cmd,
                          rt_lconn_cb cb, void *arg, int slot);
void rt_lconn_release(rt_lconn_t *lc, bool keep);
const char *rt_lconn_host(const rt_lconn_t *lc);

/* ---- rt_scan.c ---- */
/* A find that the cached routing table sends to several shards (targets),
 * run from the client's loop: true when it took req (answered or handed to
 * the worker pool), false when the worker pool should run it.  Releases c.
 * t0: when the command came (CLOCK_MONOTONIC microseconds). */
bool rt_scan_find(struct sbl_conn *conn, struct sbl_request *req, const char *db, int64_t t0,
                  rt_coll_t *c, const bool targets[RT_MAX_SHARDS]);
/* Multi-shard finds answered from the loops, and those handed to the
 * worker pool after their commands were sent (serverStatus). */
void rt_scan_counts(int64_t *answered, int64_t *to_workers);

/* ---- rt_cursor.c: a find's options and its merge ---- */
typedef struct rt_find_opts {
    bson_t sort;          /* a view into the command; empty: none */
    bool has_sort, meta_sort, single, has_batch;
    int64_t limit, skip, batch;
} rt_find_opts_t;
/* cmd's sort, limit, skip, batchSize and singleBatch; an error (BadValue)
 * for a negative skip or batchSize. */
int rt_find_opts(const bson_t *cmd, rt_find_opts_t *o, sbl_err_t *err);
/* The command a targeted shard s of c runs for the find cmd across shards
 * (limit + skip documents, none skipped), into fwd (initialised here). */
void rt_find_shard_cmd(const bson_t *cmd, const rt_find_opts_t *o, const rt_coll_t *c, int s,
                       bson_t *fwd);
/* The router's cursor over the shards' first replies (n of them, shard[i]
 * answered replies[i], from member hosts[i], or NULL: rt_answered_by), its
 * first batch into reply; registered when more may come.  borrowed: the
 * replies stay the caller's and are read only here (every shard cursor
 * must be exhausted: nothing is fetched); else they are stolen. */
int rt_find_merge(const char *db, const char *coll, const rt_find_opts_t *o, bson_t *replies,
                  const int *shard, const char *const *hosts, int n, bool borrowed,
                  bson_t *reply, sbl_err_t *err);

/* ---- rt_fam.c ---- */
int rt_find_and_modify(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err);

#endif
