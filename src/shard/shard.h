/*
 * shard.h: what a shard (sabled --shardsvr) knows about the cluster: its
 * identity (the shardIdentity document addShard gives it: its name and the
 * config servers' connection string) and, per collection, its shard
 * version, read from the config servers' config.collections and
 * config.chunks.  Every command a router sends carries the version the
 * router routed with (shardVersion: {e: epoch, t: timestamp, v: major.minor});
 * a shard whose own version differs refuses it with StaleConfig (13388)
 * after refreshing once, so a router with an old routing table never reads
 * or writes through it (docs/sharding.md).
 *
 * Thread safety: every function may be called from any thread; a refresh
 * talks to the config servers and blocks the caller.
 */
#ifndef SBL_SHARD_H
#define SBL_SHARD_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/errors.h"

/* Set (or replace) the shard's identity; starts the config server pool. */
int sbl_shard_set_identity(const char *name, const char *configsvr, sbl_err_t *err);
/* The shard's name, or NULL before addShard. */
const char *sbl_shard_name(void);
const char *sbl_shard_configsvr(void);

/*
 * Check the version a router sent (sv: the shardVersion document) for ns.
 * Returns 0 when it matches this shard's (same epoch and timestamp, same
 * major version), with *fp (when fp is not NULL) a new reference to the
 * ownership filter of that version, else StaleConfig with info receiving
 * ns, vReceived, vWanted and shardId.
 */
typedef struct sbl_shard_filter sbl_shard_filter_t;
int sbl_shard_check_version(const char *ns, const bson_t *sv, bson_t *info, sbl_shard_filter_t **fp,
                            sbl_err_t *err);
/* When this shard took the newest of the chunks of ns it owns (their
 * newest onCurrentShardSince, as last read with its version; 0: unknown). */
uint64_t sbl_shard_owned_since(const char *ns);
/* When a chunk of ns last left this shard (config.chunks' history, as last
 * read with its version; 0: unknown or never). */
uint64_t sbl_shard_left_since(const char *ns);
/*
 * The ownership filter of routed reads and writes (shard_filter.c): a
 * routed find, aggregate, count or distinct drops the documents of ns whose
 * shard key value falls outside the chunks this shard owns (orphans), and a
 * routed update, delete or findAndModify skips them, as mongod's shards do.
 * sbl_shard_filter_get: ns's filter as read with its cached version (a
 * reference; NULL when ns is not sharded or not cached);
 * sbl_shard_filter_at: the same collection's ownership at cluster time at
 * (a snapshot read's atClusterTime; each chunk's history entry valid then,
 * else its owner now), a new reference.  A trivial filter (this shard owns
 * every chunk) keeps every document.  sbl_shard_filter_owns: is doc's
 * shard key value in a range the filter owns?  Immutable: any thread.
 */
sbl_shard_filter_t *sbl_shard_filter_get(const char *ns);
sbl_shard_filter_t *sbl_shard_filter_at(sbl_shard_filter_t *f, uint64_t at);
sbl_shard_filter_t *sbl_shard_filter_ref(sbl_shard_filter_t *f);
void sbl_shard_filter_release(sbl_shard_filter_t *f); /* NULL: nothing */
const char *sbl_shard_filter_ns(const sbl_shard_filter_t *f);
/* The collection's shard key pattern (valid while f is held). */
const bson_t *sbl_shard_filter_key(const sbl_shard_filter_t *f);
bool sbl_shard_filter_trivial(const sbl_shard_filter_t *f); /* NULL is */
bool sbl_shard_filter_owns(const sbl_shard_filter_t *f, const bson_t *doc);
/* Does doc's shard key under f's collection hold an array or lie under one? */
bool sbl_shard_filter_key_array(const sbl_shard_filter_t *f, const bson_t *doc);
/*
 * Shard key values (shard_key.c), the one reading of a document's shard key
 * value that the router's targeting, the ownership filter and a migration's
 * range share.  sbl_shard_key_shape: how many fields pattern has (it may
 * exceed SBL_SHARD_KEY_MAX: not a key), *hashed_posp the position of its
 * "hashed" field (-1: none).  sbl_shard_key_values: doc's value under
 * pattern into vals, its first SBL_SHARD_KEY_MAX fields in pattern order,
 * each read by its dotted path (a missing one is null; at hashed_pos, -1 for
 * none, its hash, as a hashed index and chunk bounds hold it).  With
 * SBL_SHARD_KEY_WHOLE_NAMES a field named by the whole path ({"a.b": 1},
 * as chunk bounds and moveChunk's find name them) counts too.  Returns what
 * it met, OR'ed: SBL_SHARD_KEY_MISSING (a field was missing),
 * SBL_SHARD_KEY_ARRAY (a field's value is an array or lies under one: not a
 * shard key value, mongod refuses such a document); 0 for a plain value.
 * vals are views into doc (a hash is held in vals itself): valid while doc
 * is.  Pure: any thread.
 */
#define SBL_SHARD_KEY_MAX 32
enum { SBL_SHARD_KEY_MISSING = 1, SBL_SHARD_KEY_ARRAY = 2 };
enum { SBL_SHARD_KEY_WHOLE_NAMES = 1 };
int sbl_shard_key_shape(const bson_t *pattern, int *hashed_posp);
int sbl_shard_key_values(const bson_t *pattern, int hashed_pos, const bson_t *doc, int flags,
                         bson_value_t vals[SBL_SHARD_KEY_MAX]);
/* Forget ns's cached version and read it again from the config servers.
 * sbl_shard_refresh_filter also gives (*fp, a new reference) the ownership
 * filter read with that version: a caller that refreshed and then asked
 * sbl_shard_filter_get could find the cache cleared in between by a
 * step-up, and NULL, a trivial filter ("all of it is ours"), instead. */
int sbl_shard_refresh(const char *ns, sbl_err_t *err);
int sbl_shard_refresh_filter(const char *ns, sbl_shard_filter_t **fp, sbl_err_t *err);
/*
 * Filtering metadata after a step-up (mongod: UNKNOWN until recovered).  A
 * member that becomes primary may hold versions cached in an earlier
 * primaryship, and a migration it donated may have committed since, so it
 * serves no routed command until its migration recovery (migrate_recover.c)
 * has taken the critical section of any collection an unfinished migration
 * left and called sbl_shard_stepped_up(term): that forgets every cached
 * version (the next routed command on each namespace refreshes from the
 * config servers) and opens the door for the primaryship of term
 * (sbl_repl_write_term).  sbl_shard_metadata_known: true once that
 * happened for the current primaryship (and on a member that is not primary
 * or not in a cluster, which has nothing to wait for).
 */
void sbl_shard_stepped_up(int64_t term);
bool sbl_shard_metadata_known(void);
/* shardingState's fields: enabled, configServer, shardName, versions. */
void sbl_shard_append_state(bson_t *reply);
void sbl_shard_shutdown(void);

/* ---- the migration critical section (shard_crit.c) ---------------------------
 * A router's command on ns (one carrying shardVersion) runs between
 * sbl_shard_op_enter and sbl_shard_op_exit.  While a migration holds ns's
 * critical section, op_enter waits for it to end, at most 2 s (or until
 * deadline_us, monotonic, when sooner; 0: none), so writes to the moving
 * range neither reach the donor after the recipient's last catch-up nor read
 * a half-moved range; the command then checks the new shard version
 * (StaleConfig).  Returns 0 (counted in: call op_exit), or StaleConfig when
 * the wait timed out (not counted in; the command must not run).  Before
 * that it waits the same way for sbl_shard_metadata_known (StaleConfig:
 * "sharding status ... needs to be recovered"; the router retries).
 * sbl_shard_crit_enter takes ns's critical section and returns 0 once every
 * command already inside has left; when some are still inside at
 * deadline_us (sbl_now_us's clock) it leaves the critical section
 * again and returns ExceededTimeLimit.  One critical section at a time. */
int sbl_shard_op_enter(const char *ns, int64_t deadline_us, sbl_err_t *err);
void sbl_shard_op_exit(const char *ns);
int sbl_shard_crit_enter(const char *ns, int64_t deadline_us, sbl_err_t *err);
void sbl_shard_crit_exit(void);
/* True while a migration runs on this shard (donor or recipient): routed
 * commands then run on a worker thread, where waiting is allowed. */
bool sbl_shard_migration_active(void);
void sbl_shard_set_migration_active(bool on);

/* ---- database versions and movePrimary's critical section (shard_db.c) -----
 * A router's command for an unsharded collection carries databaseVersion
 * ({uuid, timestamp, lastMod}, config.databases' version of its database);
 * it runs between sbl_shard_db_enter and sbl_shard_db_exit.  db_enter waits
 * (at most 5 s) while movePrimary holds db's critical section here, then
 * checks the version: 0 when the config servers name this shard db's
 * primary with that version (counted in: call db_exit), else StaleDbVersion
 * (249; info receives db, vReceived and, when this shard is the primary,
 * vWanted), not counted in.
 * sbl_shard_db_crit_enter takes db's critical section for lease_ms (renew:
 * only extend one already held, ExceededTimeLimit when it is not) and returns
 * once the commands inside have left (ExceededTimeLimit, not taken, when they
 * do not within the lease); ConflictingOperationInProgress while another
 * database's is held.  A section not renewed in time ends by itself.
 * sbl_shard_db_crit_exit ends it and forgets db's version, so the commands
 * waiting, and any later, check the config servers' entry as it is now.
 * sbl_shard_db_crit_active: a section is held (routed commands then run on
 * a worker thread, where waiting is allowed). */
int sbl_shard_db_enter(const char *db, const bson_t *dbv, bson_t *info, sbl_err_t *err);
void sbl_shard_db_exit(const char *db);
int sbl_shard_db_crit_enter(const char *db, int64_t lease_ms, bool renew, sbl_err_t *err);
void sbl_shard_db_crit_exit(const char *db);
bool sbl_shard_db_crit_active(void);

/* ---- talking to other members of the cluster (shard_remote.c) ---------------
 * Run cmd in db on the primary of connstr ("set/host:port,..." or
 * "host:port"), over a pool kept per connection string.  Returns 0 with
 * *reply initialised (it may say ok: 0), or HostUnreachable with *reply
 * empty.  sbl_shard_remote_check also turns ok: 0 into its error. */
int sbl_shard_remote_run(const char *connstr, const char *db, const bson_t *cmd, bson_t *reply,
                         sbl_err_t *err);
int sbl_shard_remote_check(const char *connstr, const char *db, const bson_t *cmd,
                           bson_t *reply, sbl_err_t *err);
/* As sbl_shard_remote_check, giving up on an answer after timeout_ms (the
 * plain calls wait 10 minutes): for calls the callee bounds itself. */
int sbl_shard_remote_check_within(const char *connstr, const char *db, const bson_t *cmd,
                                  int timeout_ms, bson_t *reply, sbl_err_t *err);
void sbl_shard_remote_shutdown(void);

/* Append to cmd (run on "admin") the applyOps that creates db.coll with UUID uuid
 * ({op: "c", ns: "<db>.$cmd", ui, o: {create}}, the form src/cmd/apply_ops.c takes):
 * how every shard's copy of a sharded collection gets the collection's one UUID
 * (the router's shardCollection, a migration's recipient), as mongod's do. */
void sbl_shard_create_with_uuid_cmd(bson_t *cmd, const char *db, const char *coll,
                                    const uint8_t uuid[16]);

#endif
