/*
 * migrate_int.h: what migrate.c (the donor's half of a chunk migration and
 * the helpers) and migrate_recv.c (the recipient's half) share.  Private to
 * src/cmd.
 */
#ifndef SBL_MIGRATE_INT_H
#define SBL_MIGRATE_INT_H

#include "cmd/cmd_int.h"

#include <stdatomic.h>

/* Every wait of a migration is bounded (a migration that cannot finish
 * aborts with an error that says why, and the writers go on):
 *   MIG_STALL_MS    the recipient's clone or catch-up made no progress
 *   MIG_CATCHUP_MS  the recipient did not catch up with the writes to the
 *                   range (reach "steady") after its clone
 *   MIG_CRIT_MS     the critical section up to the commit: the routed
 *                   commands inside drain, the recipient takes the last
 *                   changes and moves the range in
 *   MIG_CALL_MS     one command between the donor and the recipient
 *   MIG_RELEASE_MS  a recipient in its critical section after its commit
 *                   waits that long for the donor's release or abort, then
 *                   settles it itself (migrate_recv.c)
 *   MIG_TXN_WAIT_MS the donor, in its critical section, waits that long for
 *                   the collection's prepared transactions to end
 *   MIG_DELETE_MS   one delete of the range deleter (a prepared document
 *                   ends its wait; the deleter tries again)
 * A catch-up round that changed fewer than MIG_STEADY_DOCS documents, with
 * nothing left to read, is close enough for the critical section (mongod
 * enters it with a small backlog too); the rest moves inside it. */
#define MIG_STALL_MS 60000
#define MIG_CATCHUP_MS 120000
#define MIG_CRIT_MS 30000
#define MIG_CALL_MS (2 * MIG_CRIT_MS + 10000)
#define MIG_STEADY_DOCS 64
#define MIG_RELEASE_MS (3 * MIG_CALL_MS)
#define MIG_TXN_WAIT_MS 5000
#define MIG_DELETE_MS 5000

/* The range being moved and how to tell whether a document is in it. */
typedef struct mig_spec {
    char ns[256];
    bson_t *key, *min, *max; /* heap copies: a bson_t must not be copied by value */
    int nkey;
    int hashed_pos;
} mig_spec_t;

/* chunk_jumbo.c: ns's chunk size in bytes (config.collections'
 * maxChunkSizeBytes, else config.settings' chunksize, else 128 MiB); whether
 * a config.chunks document is marked jumbo; and the check before moving
 * chunk (a config.chunks document) of ns (key: its shard key pattern) off
 * the donor (its connection string): ChunkTooBig, with the chunk marked
 * jumbo, when it holds more documents than mongod moves and all of them
 * share one shard key value; 0 otherwise. */
/* balancer.c: $set fields on config.chunks' document _id id (w: majority). */
int mig_chunk_set(const bson_value_t *id, const bson_t *set, sbl_err_t *err);
int64_t sbl_chunk_size_bytes(const char *ns);
bool sbl_chunk_is_jumbo(const bson_t *chunk);
int sbl_chunk_check_movable(const char *ns, const bson_t *key, const bson_t *chunk,
                            const char *donor_host, sbl_err_t *err);
bool mig_doc_of(const bson_t *d, const char *k, bson_t *out);
/* Run the find cmd on config (batchSize max and singleBatch added here) and copy up
 * to max of its documents into docs[] (each initialised); how many.  The caller
 * still destroys cmd, and the documents with mig_free_docs. */
int mig_config_docs(bson_t *cmd, int max, bson_t *docs);
void mig_free_docs(bson_t *docs, int n);
/* A find's or getMore's reply: its cursor's id into *cursorp (0: exhausted,
 * or no cursor) and batch on its firstBatch or nextBatch; false without one. */
bool mig_reply_batch(const bson_t *reply, int64_t *cursorp, bson_iter_t *batch);
/* killCursors of the cursor id (0: none) on db.coll here, its answer ignored:
 * a pass that stops early leaves no cursor behind. */
void mig_kill_cursor(const char *db, const char *coll, int64_t id);
/* ns (the command's first field), min, max and shardKeyPattern from cmd. */
int mig_spec_parse(const bson_t *cmd, mig_spec_t *s, sbl_err_t *err);
void mig_spec_free(mig_spec_t *s);
/* Is doc's shard key value in [min, max)? */
bool mig_in_range(const mig_spec_t *s, const bson_t *doc);
/* Whether insert or update entry e (op i or u) may leave its document in
 * s's range: the document it holds, or for an update logged as its diff
 * (o: {$v: 2, diff}) the _id in o2 when _id is the shard key, and else the
 * document as ss reads it now (none: false). */
bool mig_entry_in_range(sbl_session_t *ss, const mig_spec_t *s, const bson_t *e);
void mig_split_ns(const char *ns, char *db, size_t dbn, const char **coll);
/* Replace (upsert) by _id each document of arr into db.coll (*countp += n). */
int mig_upsert_docs(const char *db, const char *coll, bson_iter_t *arr, int64_t *countp,
                    sbl_err_t *err);
/* Delete by _id each {_id} document of arr from db.coll (*np += how many
 * were there, when np is not NULL). */
int mig_delete_ids(const char *db, const char *coll, bson_iter_t *arr, int64_t *np,
                   sbl_err_t *err);
const char *mig_akey(uint32_t i, char kb[16]);
/* {name: session, sessionId: session} and extra's fields (NULL: none) on
 * host's primary (an answer within MIG_CALL_MS), ok: 0 an error; *reply is
 * initialised either way. */
int mig_recip_call(const char *host, const char *name, const char *session, const bson_t *extra,
                   bson_t *reply, sbl_err_t *err);
/* cmd's sessionId must be have (ConflictingOperationInProgress otherwise). */
int mig_check_session(const bson_t *cmd, const char *have, sbl_err_t *err);
/* Tell the dispatcher whether a migration runs here (either half). */
void mig_update_active_flag(void);
void mig_log(const char *fmt, ...);
int64_t mig_now_ms(void);
bool mig_donor_active(void);
/* Which shard config.chunks (on the config servers cfg) says owns ns's
 * chunk starting at min, into out ("" when they cannot say), to decide a
 * migration to shard to.  When that says abort (the owner is not to), the
 * config servers first give the chunk a new major version
 * (_configsvrEnsureChunkVersionIsGreaterThan, mongod's): a commit of the
 * migration still on its way names the old one and is refused, so the
 * answer cannot change afterwards ("" when the bump failed).  to NULL: the
 * owner as it is (the decision was taken before). */
void mig_chunk_owner(const char *cfg, const char *ns, const bson_t *min, const char *to,
                     char *out, size_t n);
/* Note that a migration of ns enters its critical section here now (before
 * it changes the range); mig_crit_ts: when the last one did, for the
 * collection a getMore (db, cmd) reads (0: never). */
void mig_crit_note(const char *ns);
uint64_t mig_crit_ts(const char *db, const bson_t *getmore);
/* The critical section of ns noted last ends now (its window closes at this
 * member's cluster time; call after the range's last change here and after
 * the clock has seen the commit's validAfter).  NULL: every open one. */
void mig_crit_done(const char *ns);
/* A routed snapshot command on ns at atClusterTime at: SnapshotUnavailable
 * when at falls in a migration's window here (mig_crit_note ..
 * mig_crit_done), where this shard's data need not match the chunks it
 * owned at that time (a recipient that holds a range before the commit, a
 * donor after it), so only a read that filters by the ownership at at may
 * run there (snapshot_read.c skips this for those); writes (a snapshot
 * transaction's): also when a window began after at. */
int mig_crit_check_at(const char *ns, uint64_t at, bool writes, sbl_err_t *err);
bool mig_recip_active(void);
/* Wait (at most timeout_ms) until a majority of this set has everything
 * this member wrote so far; else the error, prefixed with what. */
int mig_await_majority(int64_t timeout_ms, const char *what, sbl_err_t *err);
/* A copy of the donated range when cmd's sessionId names the migration this
 * shard donates now (ConflictingOperationInProgress otherwise). */
int mig_donor_spec(const bson_t *cmd, mig_spec_t *out, sbl_err_t *err);
/* The recipient, in its critical section: the donor's retryable-write
 * history of the range into this shard's sessions (migrate_sess.c). */
int mig_recip_sessions(sbl_session_t *ss, const char *from, const char *session, sbl_err_t *err);

/* ---- what survives a restart (migrate_recover.c) --------------------------
 * The donor writes its config.migrationCoordinators document ({_id:
 * migrationId, migrationSessionId, nss, donorShardId, recipientShardId,
 * recipientHost, range: {min, max}, keyPattern}, later decision:
 * "committed" | "aborted") and its config.rangeDeletions task for the range
 * ({_id: migrationId, nss, migrationSessionId, donorShardId, range,
 * keyPattern, whenToClean, pending: true}), w: majority, before the
 * recipient hears of the migration; the recipient writes its own task
 * (with donorHost) before it starts cloning.  A task loses pending (ready)
 * when the decision says its shard's copy of the range is an orphan, and
 * goes once the range is deleted (or the copy kept); the coordinator
 * document goes once the recipient has heard the decision.  Every write is
 * w: majority. */
int mig_persist_start(const mig_spec_t *s, const char *session, const char *to,
                      const char *to_host, bool wait_delete, uint8_t id[16], sbl_err_t *err);
int mig_persist_decision(const char *session, bool committed, sbl_err_t *err);
int mig_coord_delete(const char *session, sbl_err_t *err);
int mig_task_insert(const mig_spec_t *s, const char *session, const uint8_t *id,
                    const char *donor, const char *donor_host, const char *when,
                    sbl_err_t *err);
int mig_task_ready(const char *session, sbl_err_t *err);
int mig_task_delete(const char *session, sbl_err_t *err);
/* Does this shard hold a coordinator document or a range deletion task
 * other than a background one (an unfinished migration: no new one starts
 * until recovery ends it)? */
bool mig_leftovers(void);
/* The range a rangeDeletions or migrationCoordinators document names
 * (freed by the caller with mig_spec_free). */
int mig_task_spec(const bson_t *d, mig_spec_t *s, sbl_err_t *err);

/* ---- the range deleter's service (migrate_rangedel.c) ---------------------
 * A background task: this shard's task of a range it donated, ready (no
 * pending: the migration committed).  The service deletes its range
 * orphanCleanupDelaySecs after this primary first saw it (whenToClean
 * "delayed"; "now": at once), then removes it; recovery leaves such tasks
 * alone and they block no migration, except that a recipient waits
 * (mig_rangedel_await_overlap) for those overlapping the range it is
 * about to clone. */
bool mig_task_background(const bson_t *d);
void mig_rangedel_start(void);
void mig_rangedel_stop(void);
/* A task may have become due (a commit marked it ready, a parameter changed). */
void mig_rangedel_kick(void);
/* Run session's background task now (moveChunk's _waitForDelete); how
 * many documents went (0: no such task), -1 on an error (err). */
int64_t mig_rangedel_run_now(const char *session, sbl_err_t *err);
/* 0 once no background task overlaps s's range, or *stop; ExceededTimeLimit
 * after receiveChunkWaitForRangeDeleterTimeoutMS. */
int mig_rangedel_await_overlap(const mig_spec_t *s, const atomic_bool *stop, sbl_err_t *err);
/* Delete this shard's documents in s's range (fromMigrate; migrate_del.c),
 * waiting out conflicts for up to MIG_CRIT_MS; how many went, -1 on an
 * error (err). */
int64_t mig_delete_range(const mig_spec_t *s, sbl_err_t *err);
/* The range deleter's service's deletion: the same, after re-reading ns's
 * version, of the documents in s's range that this shard does not own
 * (none when it owns the whole collection, or it is dropped or unsharded). */
int64_t mig_delete_orphans(const mig_spec_t *s, sbl_err_t *err);
/* How many of this shard's documents are in s's range (-1: the read failed). */
int64_t mig_count_range(const mig_spec_t *s);
/* A find over s's range in db.coll, batch documents a batch (reply
 * initialised either way; its cursor is the caller's). */
int mig_range_find(const mig_spec_t *s, const char *db, const char *coll, int batch,
                   bson_t *reply, sbl_err_t *err);
/* The recipient's settling of a task whose receive no longer runs here
 * (this member restarted): commit keeps the range, abort deletes it; then
 * the staging collection and the task go.  0 when there was none;
 * NotYetInitialized on a member that does not know its shard's name yet. */
int mig_recip_settle_task(const char *session, bool commit, sbl_err_t *err);
/* The live migration gives its critical section on ns to recovery (the
 * outcome is unknown: recovery settles it from the config servers). */
void mig_recovery_take_crit(const char *ns);
/* True while recovery holds a critical section or has work left;
 * mig_recovery_kick: a live migration left documents for it. */
bool mig_recovery_pending(void);
void mig_recovery_kick(void);
/* The session of the migration this process runs as donor or recipient
 * into out ("" when none). */
void mig_donor_session(char *out, size_t n);
void mig_recip_session(char *out, size_t n);

/* Tests' fail points (enableTestCommands), mongod's names: the donor holds
 * at moveChunkHangAtStep1..6 (1: its documents written, before the
 * recipient starts; 2: the recipient started; 3: the recipient steady,
 * before the critical section; 4: in the critical section, the recipient
 * moved the range in, before the commit; 5: after the commit, before the
 * range deletion; 6: after it, before the recipient's release), the
 * recipient at migrateThreadHangAtStep1 (before the clone) and
 * migrateThreadHangAtStep2 (after the first cloned batch), the config
 * server at hangBeforeCommitChunkMigration (Sable's: a commit that arrived,
 * before it is looked at), while on (at most 120 s each time);
 * suspendRangeDeletion (mongod's) holds the range deleter's service while on. */
enum { MIG_FP_STEP1, MIG_FP_STEP2, MIG_FP_STEP3, MIG_FP_STEP4, MIG_FP_STEP5, MIG_FP_STEP6,
       MIG_FP_RECV1, MIG_FP_RECV2, MIG_FP_CFG_COMMIT, MIG_FP_RECOVERY,
       MIG_FP_SUSPEND_RANGEDEL, MIG_FP_N };
void mig_fp_hold(int fp);
bool mig_fp_on(int fp);

#endif
