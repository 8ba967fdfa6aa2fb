/*
 * storage.h: the storage engine interface, implemented on WiredTiger.
 *
 * Layout on disk (WiredTiger home = dbpath):
 *   table:_sbl_catalog     namespace -> catalog entry (BSON: ns, uuid, ident, options, indexes)
 *   table:<ident>          one per collection, clustered on _id: key = sbl_key_append(_id),
 *                          value = the whole BSON document (with _id first); a
 *                          time-series collection's key adds a sequence number
 *                          after the _id, so measurements may share an _id
 *   table:index-<n>-<r>    one per secondary index: key = the key components
 *                          (sbl_key_append, descending ones complemented) followed,
 *                          unless the index is unique, by the encoded _id;
 *                          value = the encoded _id
 *   mongod.lock            held with flock() while a server has the dbpath open
 *
 * What must stay true:
 *  - Every change to a collection's documents goes through sbl_write(), which
 *    makes the document change and its index entries in the caller's one
 *    WiredTiger transaction, then calls the write observer (the oplog entry)
 *    in that same transaction.
 *  - A session belongs to one thread at a time (sbl_session_get() hands out
 *    the calling thread's own).  Handles (sbl_coll_t) are reference counted
 *    and stay valid until released, even if the collection is dropped.
 *  - sbl_storage_on_durable(cb) calls cb only after every transaction that
 *    committed before the call is on disk in the journal; many waiters share
 *    one flush (group commit), and nobody blocks a network thread.
 */
#ifndef SBL_STORAGE_H
#define SBL_STORAGE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/errors.h"
#include "doc/doc.h"

typedef struct sbl_storage_config {
    const char *dbpath;
    double cache_size_gb;   /* <= 0: mongod's default, 50% of (RAM - 1 GB), at least 0.25 */
    const char *journal_compressor; /* "none"/NULL, "snappy" or "zlib": log record compression */
    int commit_interval_ms; /* journal flush interval for w:1 writes; default 100 */
    int syncdelay_s;        /* checkpoint interval; default 60; 0 disables */
    int ttl_monitor_sleep_s; /* TTL pass interval (ttlMonitorSleepSecs); <= 0: 60 */
    const char *wt_config;  /* appended to wiredtiger_open's configuration (later keys win), or NULL */
    /* added to the create configuration of new collections' (and indexes')
     * tables, or NULL: keys like memory_page_max or block_compressor win over
     * sabled's; the formats and the logging of a table stay sabled's */
    const char *wt_coll_config;
    const char *wt_index_config;
} sbl_storage_config_t;

/* Open (creating if needed) the engine at cfg->dbpath: takes mongod.lock (error 
 * "DBPathInUse" message, code InternalError, when another process holds it), opens
 * WiredTiger with the journal on, loads the catalog, starts the journal flusher
 * and checkpoint threads.  Returns 0 or an error code. */
int sbl_storage_open(const sbl_storage_config_t *cfg, sbl_err_t *err);
/* Stop background threads, take a final checkpoint, close WiredTiger, release the lock. */
void sbl_storage_close(void);

/* ---- free-space guard (wt_space.c) ------------------------------------ */

/* Default minimum free space on the dbpath's filesystem: two journal files
 * (WiredTiger's log file_max, 100 MB), at least 64 MB. */
#define SBL_SPACE_DEFAULT_MIN_FREE_MB 200
/* Writes that add data are refused below mb MB free (--setParameter
 * minFreeDiskSpaceMB); 0 turns the guard off.  Any thread, any time. */
void sbl_storage_set_min_free_mb(int64_t mb);
int64_t sbl_storage_min_free_mb(void);
/* Called before a write that adds about bytes bytes (inserts, updates, index
 * builds): OutOfDiskSpace (14031) while the dbpath's filesystem has less than
 * the minimum free, IllegalOperation (20) while it is read-only, else 0.
 * Cheap: statvfs at most every 100 ms or 4 MB written; recovers by itself. */
int sbl_storage_space_check(size_t bytes, sbl_err_t *err);
/* Whether this member could take writes now: false while the guard above
 * refuses them (checked afresh when the cached state is older than 100 ms),
 * for 5 s after WiredTiger's own ENOSPC, and after a WiredTiger panic
 * (until restart).  Replication steps a primary down on false. */
bool sbl_storage_can_write(void);

/* ---- sessions and transactions --------------------------------------- */

typedef struct sbl_session sbl_session_t;

/* The calling thread's session, opened on first use. Never NULL after open. */
sbl_session_t *sbl_session_get(void);
/* Close the calling thread's session (call before a thread exits). */
void sbl_session_release_thread(void);

/* Snapshot-isolation transaction on the session.  commit/abort end it.  A
 * conflicting concurrent write surfaces as WriteConflict (112): the caller
 * aborts and retries the whole operation. */
int sbl_txn_begin(sbl_session_t *s, sbl_err_t *err);
int sbl_txn_commit(sbl_session_t *s, sbl_err_t *err);
void sbl_txn_abort(sbl_session_t *s);

/*
 * Multi-document transactions (and a secondary applying applyOps): one
 * WiredTiger transaction held open across many operations.
 * sbl_txn_begin_outer opens it; until sbl_txn_commit_outer or
 * sbl_txn_abort_outer, sbl_txn_begin/sbl_txn_commit on s are nested no-ops
 * (begin fails with WriteConflict once the transaction failed), and
 * sbl_txn_abort after a nested write marks the whole transaction failed:
 * it can then only roll back (commit_outer rolls back and says
 * WriteConflict).  sbl_session_open gives a session that belongs to no
 * thread (a transaction's, used by one thread at a time, whichever runs the
 * transaction's next command); sbl_session_close rolls back what is open.
 */
sbl_session_t *sbl_session_open(void);
void sbl_session_close(sbl_session_t *s);
int sbl_txn_begin_outer(sbl_session_t *s, sbl_err_t *err);
/* sbl_txn_begin_outer reading as of read_ts (a commit timestamp; 0: the
 * newest data): reads see exactly the commits at or before it.
 * SnapshotTooOld (239) when read_ts is older than the oldest timestamp
 * WiredTiger keeps history for. */
int sbl_txn_begin_outer_at(sbl_session_t *s, uint64_t read_ts, sbl_err_t *err);
int sbl_txn_commit_outer(sbl_session_t *s, sbl_err_t *err);
void sbl_txn_abort_outer(sbl_session_t *s);
bool sbl_txn_outer_failed(const sbl_session_t *s);
/* Two-phase commit's participant side: prepare the outer transaction at
 * prepare_ts (WiredTiger's prepare_transaction; it takes no more writes,
 * and readers or writers of what it wrote get WriteConflict until it ends,
 * which they may wait out: sbl_prepare_wait below),
 * then either sbl_txn_abort_outer or sbl_txn_commit_prepared_outer: its
 * writes become visible at commit_ts (>= prepare_ts) and durable at
 * durable_ts (>= commit_ts, newer than the stable timestamp). */
int sbl_txn_prepare_outer(sbl_session_t *s, uint64_t prepare_ts, sbl_err_t *err);
int sbl_txn_commit_prepared_outer(sbl_session_t *s, uint64_t commit_ts, uint64_t durable_ts,
                                  sbl_err_t *err);
void sbl_txn_outer_fail(sbl_session_t *s);
/*
 * Prepare conflicts (wt_prepare.c): an operation that reads or writes what a
 * prepared transaction wrote gets WriteConflict, and its thread remembers
 * that it met a prepared transaction.  sbl_prepare_conflict_take says
 * whether the last WriteConflict on this thread came from one (and
 * forgets it), giving in *genp (may be NULL) the count of prepared
 * transactions resolved when it did.  sbl_prepare_wait waits until that
 * count moves past gen (a prepared transaction committed or aborted), at
 * most SBL_PREPARE_WAIT_SLICE_MS and never past deadline_us (monotonic
 * microseconds; 0: none); the caller then retries its operation from a new
 * snapshot, and waits again if it meets the prepared transaction again.
 */
#define SBL_PREPARE_WAIT_SLICE_MS 100
/* How many transactions are prepared now (the dispatcher then runs reads
 * and writes on worker threads, which may wait).  sbl_prepare_no_wait(true)
 * on a libuv loop thread: its conflicts are plain WriteConflicts, never
 * waited on (the loop must not stop). */
int64_t sbl_prepare_outstanding(void);
void sbl_prepare_no_wait(bool on);
bool sbl_prepare_conflict_take(uint64_t *genp);
bool sbl_prepare_wait(uint64_t gen, int64_t deadline_us); /* false: shutting down */
/* At shutdown: wake every waiter and wait no more; an operation that met a
 * prepared transaction then ends with InterruptedAtShutdown, so the server's
 * threads finish instead of waiting for a coordinator that may never answer. */
void sbl_prepare_shutdown(void);
/*
 * Waiting in place, as mongod retries a prepare conflict inside its storage
 * layer: an operation that must keep its snapshot (a read or a write's read
 * in a multi-document transaction, a getMore) enters a scope on its thread; a
 * cursor call of its reads that meets a prepared transaction's write then
 * waits (slices as above) and is made again on the same cursor, which sees
 * the outcome.  Before each slice check says whether to go on: 0 and the
 * deadline not to wait past (monotonic us, 0: none), or the operation's
 * error in *err (past maxTimeMS, killed), which the scope keeps in rc and
 * err (11600 at shutdown); the read then fails with WriteConflict and the
 * caller answers rc instead.  The waiter must hold no lock that committing
 * or aborting a prepared transaction takes (the storage layer holds none
 * across a cursor call); a libuv loop thread (sbl_prepare_no_wait) never waits.
 */
typedef struct sbl_prepare_scope {
    int (*check)(void *arg, int64_t *deadline_us, sbl_err_t *err);
    void *arg;
    int rc; /* set when a wait gave up, with err */
    sbl_err_t err;
    struct sbl_prepare_scope *prev; /* the thread's scope before this one */
} sbl_prepare_scope_t;
/* sc outlives the scope; leave(sc) restores the scope enter found. */
void sbl_prepare_scope_enter(sbl_prepare_scope_t *sc);
void sbl_prepare_scope_leave(sbl_prepare_scope_t *sc);

/* ---- catalog ---------------------------------------------------------- */

typedef struct sbl_coll sbl_coll_t;

/* Find ns ("db.coll"); when create is true and it does not exist, create it
 * (with empty options) and set *createdp.  Returns a referenced handle or
 * NamespaceNotFound (26). */
int sbl_coll_open(sbl_session_t *s, const char *ns, bool create, sbl_coll_t **collp,
                  bool *createdp, sbl_err_t *err);
void sbl_coll_release(sbl_coll_t *c);
const char *sbl_coll_ns(const sbl_coll_t *c);
const bson_t *sbl_coll_options(const sbl_coll_t *c);
const uint8_t *sbl_coll_uuid(const sbl_coll_t *c); /* 16 bytes */

/* Collections created inside a multi-document transaction: on a session
 * with hide_creates, a new collection is seen by that session only (others
 * find no such namespace, and creating it fails with WriteConflict;
 * sbl_catalog_list leaves it out) until sbl_coll_publish_created(s) shows
 * every collection s created; dropping it is the way to undo one.
 * sbl_coll_created_by: c is still hidden, created by s. */
void sbl_session_hide_creates(sbl_session_t *s, bool on);
void sbl_coll_publish_created(const sbl_session_t *s);
bool sbl_coll_created_by(const sbl_coll_t *c, const sbl_session_t *s);

/* Create with options ({capped, size, validator, ...} stored as given);
 * NamespaceExists (48) when it exists. */
int sbl_coll_create(sbl_session_t *s, const char *ns, const bson_t *options, sbl_err_t *err);
/* As sbl_coll_create, with the collection's UUID given (16 bytes: applyOps's create
 * with "ui", which mongorestore --preserveUUID sends); InvalidOptions when another
 * collection has that UUID. */
int sbl_coll_create_uuid(sbl_session_t *s, const char *ns, const bson_t *options,
                         const uint8_t *uuid, sbl_err_t *err);
/* A replicated entry applied on this thread (a secondary, recovery, initial sync) names
 * the UUID its collection has on the primary: until cleared (ns NULL), a collection
 * named ns that this thread creates, by create or implicitly, takes uuid instead of a
 * new one, so that every member of a set gives a collection the same UUID (the oplog's
 * "ui" names it).  Both are copied; an ns longer than a namespace is ignored. */
void sbl_coll_adopt_uuid(const char *ns, const uint8_t *uuid);
/* Replace ns's options (collMod) with a copy of options: durable in the
 * catalog before handles opened afterwards see them (handles already open
 * keep the old ones).  NamespaceNotFound (26) when missing. */
int sbl_coll_set_options(sbl_session_t *s, const char *ns, const bson_t *options, sbl_err_t *err);
/* Drop; NamespaceNotFound (26) when missing. */
int sbl_coll_drop(sbl_session_t *s, const char *ns, sbl_err_t *err);
/* Rename within or across databases; NamespaceNotFound / NamespaceExists (48) unless drop_target. */
int sbl_coll_rename(sbl_session_t *s, const char *from, const char *to, bool drop_target,
                    sbl_err_t *err);
/* Drop every collection of db. */
int sbl_db_drop(sbl_session_t *s, const char *db, sbl_err_t *err);

/* Visit every collection (of db, or all when db is NULL), in namespace order;
 * stop when fn returns false. */
typedef bool (*sbl_catalog_visit_fn)(const char *ns, const bson_t *options, const uint8_t *uuid,
                                     void *arg);
void sbl_catalog_list(const char *db, sbl_catalog_visit_fn fn, void *arg);

typedef struct sbl_coll_stats {
    int64_t count;        /* documents */
    int64_t data_size;    /* sum of BSON sizes */
    int64_t storage_size; /* bytes of the table file(s) on disk */
} sbl_coll_stats_t;
/* Exact as of the last commit; cheap (maintained by the write path). */
int sbl_coll_stats(sbl_session_t *s, sbl_coll_t *c, sbl_coll_stats_t *st, sbl_err_t *err);

/* ---- reads ------------------------------------------------------------ */

/* Point lookup by _id.  On success *foundp tells whether it exists and, if
 * so, *doc is initialised with a copy the caller bson_destroy()s.  In a
 * collection where _id is not unique (sbl_coll_dup_ids) this is the first
 * document inserted with that _id: readers that want all of them scan the
 * bounds [id, id]. */
int sbl_coll_get(sbl_session_t *s, sbl_coll_t *c, const bson_value_t *id, bson_t *doc,
                 bool *foundp, sbl_err_t *err);
/* True when c may hold several documents with one _id (a time-series
 * collection): scans then return all of them, in insertion order within one
 * _id, and updates and deletes find the one meant by its bytes. */
bool sbl_coll_dup_ids(const sbl_coll_t *c);
/* As sbl_coll_get for like's _id; when c has dup_ids, the document with
 * like's _id whose bytes are like's (the one a reader saw), or none. */
int sbl_coll_get_same(sbl_session_t *s, sbl_coll_t *c, const bson_t *like, bson_t *doc,
                      bool *foundp, sbl_err_t *err);

/*
 * A document of a versioned collection (config.transactions, whose every
 * write of a document takes a new record key) as it was last read or
 * written: its record key and its bytes.  A caller keeps one between
 * operations (a session's record, in the session catalog) as a hint that
 * saves the search for the document's current record: the functions below
 * check it against the table, so a stale hint costs the slower path, never a
 * wrong answer (a document has one live record, so a record under the same
 * key with the same bytes is its current version).
 */
#define SBL_VERSION_KEY_MAX 120
#define SBL_VERSION_DOC_MAX 256
typedef struct sbl_version {
    uint32_t key_len; /* 0: nothing known */
    uint32_t id_len;  /* the encoded _id's part of key; the rest is the sequence number */
    uint32_t doc_len;
    /* The caller knows no write but its own changed the document since v
     * was read or written (sbl_versioned_epoch did not move): a replace then
     * removes v's record by its key without reading it first (a key no longer
     * there still sends the caller to its slower path).  Cleared by
     * sbl_version_get and whenever a replace finds v stale. */
    bool known_current;
    /* How many more writes may replace the document under this record key
     * (an update of the key) before one moves it to a new key: set by the
     * replace that wrote the key, 0 when unknown (a version read). */
    uint8_t updates_left;
    uint8_t key[SBL_VERSION_KEY_MAX];
    uint8_t doc[SBL_VERSION_DOC_MAX];
} sbl_version_t;
/* A counter that moves whenever a versioned collection's document may have
 * changed other than through sbl_version_replace: every sbl_write to one,
 * and what the layers above report (sbl_versioned_invalidate: a write
 * applied for another member, a rollback, a change of replica-set state).
 * A caller that read or wrote a version and sees the counter unchanged since
 * before it did knows that version is still current. */
uint64_t sbl_versioned_epoch(void);
void sbl_versioned_invalidate(void);
/* The current version of c's document with _id id into *v (key_len 0 when
 * there is none, or it does not fit); 0 or an error. */
int sbl_version_get(sbl_session_t *s, sbl_coll_t *c, const bson_value_t *id, sbl_version_t *v,
                    sbl_err_t *err);
/* *currentp: v is its document's current version, as s sees the table. */
int sbl_version_check(sbl_session_t *s, sbl_coll_t *c, const sbl_version_t *v, bool *currentp,
                      sbl_err_t *err);
/* In s's open transaction, replace v's document by new_doc (the same _id:
 * the caller's word) as an update through sbl_write would, when v is its
 * current version; v then describes new_doc's record: under v's record key
 * while v->updates_left allows (an update of the key, one search), else
 * under the next one (the old record removed, the new one inserted).  *replacedp false,
 * nothing written, when v is not current (or c has secondary indexes): the
 * caller then takes sbl_write's path. */
int sbl_version_replace(sbl_session_t *s, sbl_coll_t *c, sbl_version_t *v, const bson_t *new_doc,
                        bool *replacedp, sbl_err_t *err);
/* Delete c's documents for which pred(doc, arg) holds, scanning by _id a
 * batch at a time and deleting each in its own transaction after pred holds
 * again there (the TTL monitor's way; the pre-image remover's).  Returns
 * how many went; errors end the pass early. */
int64_t sbl_coll_delete_matching(sbl_session_t *s, sbl_coll_t *c,
                                 bool (*pred)(const bson_t *doc, void *arg), void *arg);

typedef struct sbl_scan sbl_scan_t;
typedef struct sbl_scan_bounds {
    const bson_value_t *lo; /* NULL: from the start */
    bool lo_inclusive;
    const bson_value_t *hi; /* NULL: to the end */
    bool hi_inclusive;
} sbl_scan_bounds_t;

/* Open an ordered scan of the collection's documents by _id within bounds
 * (NULL bounds = all), ascending or descending.  A bound applies to every
 * document with that _id (an exclusive one skips them all). */
int sbl_scan_open(sbl_session_t *s, sbl_coll_t *c, const sbl_scan_bounds_t *bounds,
                  bool descending, sbl_scan_t **scanp, sbl_err_t *err);
/* Next document: *doc becomes a read-only view (bson_init_static) valid until
 * the next call or close; *donep is set at the end.  Returns 0 or an error. */
int sbl_scan_next(sbl_scan_t *scan, bson_t *doc, bool *donep, sbl_err_t *err);
void sbl_scan_close(sbl_scan_t *scan);

/* ---- capped collections (wt_capped.c) ------------------------------------ */

/*
 * A capped collection (options {capped: true, size, max}) keeps its
 * documents' insertion order in a second table: positions (1, 2, 3 ...
 * never reused) map to _ids and back, written by sbl_write in the same
 * transaction as the documents.  Inserts into one capped collection are
 * serialized (as in mongod) so positions commit in order, and the oldest
 * documents are deleted by the insert that takes the collection over its
 * size or count; a collection of ordered visibility (the oplog:
 * sbl_capped_set_visibility) lets its inserts commit in any order instead.
 */
/* Where a look for capped c's oldest document may start: the key (for the
 * oplog, a ts) its oldest document had when a caller last found it
 * (sbl_capped_note_oldest), or 0.  The oldest only moves up (eviction), and
 * below it WiredTiger keeps every evicted document's tombstone for the
 * snapshot history window, which a scan from the start steps over one by
 * one.  *epochp gets the epoch to note a new find with: rollback_to_stable,
 * which may bring evicted documents back, forgets every hint and makes the
 * next eviction start at the first position (sbl_capped_rolled_back). */
uint64_t sbl_capped_oldest_hint(const sbl_coll_t *c, uint64_t *epochp);
void sbl_capped_note_oldest(sbl_coll_t *c, uint64_t epoch, uint64_t key);
void sbl_capped_rolled_back(void);
/* True when c is capped; *max_sizep / *max_docsp (may be NULL) get its limits
 * (bytes, and documents with 0 meaning none). */
bool sbl_coll_capped(const sbl_coll_t *c, int64_t *max_sizep, int64_t *max_docsp);
/* collStats' and $collStats' capped fields: capped, and for a capped c its
 * max (0 when none was given) and maxSize divided by scale.  c may be NULL
 * (not capped). */
void sbl_coll_append_capped_stats(const sbl_coll_t *c, bson_t *out, int64_t scale);

/* A scan of a capped collection in natural (insertion) order, forward or
 * backward, resuming strictly past position after (0: from the start / end). */
typedef struct sbl_natural sbl_natural_t;
int sbl_natural_open(sbl_session_t *s, sbl_coll_t *c, uint64_t after, bool descending,
                     sbl_natural_t **scanp, sbl_err_t *err);
/* Next document as a read-only view valid until the next call or close, with
 * its position in *posp; *donep at the end. */
int sbl_natural_next(sbl_natural_t *scan, bson_t *doc, uint64_t *posp, bool *donep,
                     sbl_err_t *err);
/* Before the first sbl_natural_next of a scan opened past a position a
 * tailable cursor read (after, not 0): whether that position still holds a
 * document (*existsp; once the oldest documents are deleted past it, it is
 * lost).  When it does the scan goes on from there: one search both checks
 * and positions it. */
int sbl_natural_seek(sbl_natural_t *scan, bool *existsp, sbl_err_t *err);
/* The encoded key (sbl_key_append of the key field) of the document the last
 * sbl_natural_next returned, in *lenp bytes: a view valid as that document. */
const void *sbl_natural_key(const sbl_natural_t *scan, size_t *lenp);
void sbl_natural_close(sbl_natural_t *scan);
/* The natural position of the entry keyed ts in c, a capped collection
 * keyed by ts (the oplog): *posp, 0 when there is none. */
int sbl_natural_pos_of_ts(sbl_session_t *s, sbl_coll_t *c, uint64_t ts, uint64_t *posp,
                          sbl_err_t *err);
/* A counter that moves after every transaction that inserted into some capped
 * collection ended: tailable cursors waiting for data poll it cheaply. */
uint64_t sbl_capped_generation(void);
/* fn runs after each move of sbl_capped_generation, on the thread that moved
 * it, with no lock held (the command layer wakes the getMores parked on it
 * then).  Set once at start-up. */
void sbl_capped_set_notify(void (*fn)(void));

/* ---- the write path ----------------------------------------------------- */

typedef enum { SBL_WRITE_INSERT, SBL_WRITE_UPDATE, SBL_WRITE_DELETE } sbl_write_kind_t;

/*
 * The one function that changes documents.  Must be called inside a
 * transaction (sbl_txn_begin).  INSERT takes new_doc (with _id first);
 * UPDATE takes old_doc and new_doc (same _id); DELETE takes old_doc.  In a
 * collection with dup_ids an insert never collides, and UPDATE / DELETE
 * change the document with old_doc's bytes (the first with its _id when an
 * UPDATE has no old_doc).  Elsewhere a duplicate _id gives DuplicateKey
 * (11000) with MongoDB's message ("E11000 duplicate key error collection:
 * db.c index: _id_ dup key: { _id: 1 }")
 * and, when err_info is not NULL, appends keyPattern and keyValue to it.
 * Collection counts and sizes change only when the transaction commits.
 */
int sbl_write(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind, const bson_t *old_doc,
              const bson_t *new_doc, bson_t *err_info, sbl_err_t *err);

/*
 * The write observer: a function the layer above installs once at start-up
 * (replication's oplog writer), before any write.  sbl_write calls it after
 * the document, its index entries and its natural-order rows changed, on the
 * same session and inside the same transaction, so whatever it writes
 * commits or aborts with the document.  A non-zero return (err filled) fails
 * the write; the caller then aborts the transaction.  Capped eviction's
 * internal deletes do not call it.  NULL (the default) removes it: sbl_write
 * then costs one load and a branch more than without the hook.
 */
typedef int (*sbl_write_observer_fn)(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind,
                                     const bson_t *old_doc, const bson_t *new_doc,
                                     sbl_err_t *err);
void sbl_storage_set_write_observer(sbl_write_observer_fn fn);

/*
 * The end-of-transaction observer: installed like the write observer
 * (replication's oplog, which tracks the entries still in flight and
 * publishes its visibility point).  Called once for every transaction of s
 * that set a commit timestamp, when it ends: committed (true after
 * WiredTiger committed it, with its largest commit timestamp) or rolled back
 * (aborted, a failed commit, the session closed), before the capped insert
 * locks it still holds go.  It must not fail or block.  NULL (the default)
 * removes it.
 */
typedef void (*sbl_commit_observer_fn)(sbl_session_t *s, uint64_t commit_ts, bool committed);
void sbl_storage_set_commit_observer(sbl_commit_observer_fn fn);

/*
 * The commit gate (replication's: a primary's entry written in term T
 * commits only while the member is still primary in T).  sbl_txn_set_gate
 * tags s's open transaction with a non-zero tag; before WiredTiger commits a
 * tagged transaction, sbl_txn_commit calls enter(tag): non-zero (err
 * filled) refuses it, and the transaction rolls back with that error; once
 * let in, leave() is called when the engine's commit returned.  A caller
 * that must commit another transaction first (a prepared one, beside the
 * entry's) takes the gate earlier with sbl_txn_gate_enter(s); s's commit or
 * abort then leaves it.  enter and leave must not block for long.  Both NULL
 * (the default) remove the gate; tags are then ignored.
 */
typedef int (*sbl_commit_gate_fn)(int64_t tag, sbl_err_t *err);
void sbl_storage_set_commit_gate(sbl_commit_gate_fn enter, void (*leave)(void));
void sbl_txn_set_gate(sbl_session_t *s, int64_t tag);
/* Take the gate now for s's tagged transaction (0 when untagged or let in;
 * else the gate's error, and s's transaction is still open: abort it). */
int sbl_txn_gate_enter(sbl_session_t *s, sbl_err_t *err);

/* ---- timestamps and keyed collections ------------------------------------ */

/* Give the open transaction's changes the WiredTiger commit timestamp ts
 * (WT_SESSION::timestamp_transaction).  Called again in one transaction,
 * each call must pass a larger ts (WiredTiger's rule).  BadValue when no
 * transaction is open. */
int sbl_txn_set_commit_ts(sbl_session_t *s, uint64_t ts, sbl_err_t *err);
/* The largest commit timestamp of a transaction that committed since the
 * engine opened (0: none): a ts handed to sbl_txn_set_commit_ts whose
 * transaction then rolled back is never returned. */
uint64_t sbl_txn_last_commit_ts(void);
/* Take capped collection c's insert lock for the open transaction now (as
 * its first insert would), so what the caller computes next (an oplog
 * entry's timestamp) is ordered as the positions are; held until the
 * transaction ends.  WriteConflict as for an insert; InternalError when c is
 * not capped. */
int sbl_capped_lock(sbl_session_t *s, sbl_coll_t *c, sbl_err_t *err);
/* Release capped collection c's insert lock now, before the open transaction
 * ends (its inserts stay uncommitted): positions may then commit out of
 * order, so only a collection of ordered visibility (below) may do this. */
void sbl_capped_release(sbl_session_t *s, sbl_coll_t *c);
/*
 * Ordered visibility for capped collection c, keyed by a timestamp field
 * (the oplog): visible() returns the newest key below which every insert
 * has committed or rolled back (UINT64_MAX: no limit).  Natural-order scans
 * opened afterwards never return a document keyed above the value visible()
 * gave at their open (forward scans end there, backward scans skip past), so
 * a reader resuming past a position never misses one that commits later.
 * Its oldest documents are then deleted after the inserting transaction
 * commits, in one of their own (sbl_capped_after_txn), so concurrent inserts
 * do not delete the same documents.  Set once, when the collection opens.
 */
typedef uint64_t (*sbl_visible_fn)(void);
void sbl_capped_set_visibility(sbl_coll_t *c, sbl_visible_fn visible);
/* Create ns (as sbl_coll_create) with its documents keyed by the top-level
 * field key_field instead of _id (the oplog is keyed by ts): documents need
 * no _id, and the key field takes _id's place for writes, point reads and
 * natural order.  The key field is kept in the catalog entry, not in the
 * options listCollections shows. */
int sbl_coll_create_keyed(sbl_session_t *s, const char *ns, const bson_t *options,
                          const char *key_field, sbl_err_t *err);
/* The field c's documents are keyed by: "_id" unless created keyed. */
const char *sbl_coll_key_field(const sbl_coll_t *c);

/* ---- secondary indexes (wt_index.c, wt_index_entries.c, wt_ttl.c) ---------- */

typedef struct sbl_index sbl_index_t;

/*
 * Create a secondary index on c from a spec the command layer validated
 * ({v, key, name, unique?, sparse?, partialFilterExpression?,
 * expireAfterSeconds?, ...}: stored and listed as given).  The index is
 * written by every write from the moment it is published; existing
 * documents are added in chunks of short transactions, so other clients
 * keep reading and writing meanwhile; it is used by queries only once
 * ready.  Errors: IndexAlreadyExists (68) when the name is taken,
 * DuplicateKey (11000) when existing documents violate a unique index,
 * 171 / 16766 for documents the key cannot index; the index is then gone.
 * Must not be called inside a transaction.
 */
int sbl_index_create(sbl_session_t *s, sbl_coll_t *c, const bson_t *spec, sbl_err_t *err);
/* Drop index `name` of c; IndexNotFound (27) when it has none by that name. */
int sbl_index_drop(sbl_session_t *s, sbl_coll_t *c, const char *name, sbl_err_t *err);
/* Replace the spec of index `name` (collMod: hidden, expireAfterSeconds,
 * prepareUnique) without rebuilding it; the key, name and uniqueness must
 * stay as they are.  With prepareUnique, writes that would add a key another
 * document has fail with DuplicateKey (11000).  IndexNotFound (27). */
int sbl_index_set_spec(sbl_session_t *s, sbl_coll_t *c, const char *name, const bson_t *spec,
                       sbl_err_t *err);

/* Referenced handles of c's secondary indexes in creation order (ready ones
 * only unless include_building); free the array with sbl_index_list_free. */
void sbl_index_list(sbl_coll_t *c, bool include_building, sbl_index_t ***ixp, size_t *np);
void sbl_index_list_free(sbl_index_t **ix, size_t n);
/* Release one handle (NULL is fine). */
void sbl_index_release(sbl_index_t *ix);
/* Number of secondary indexes (ready or building): a cheap check. */
size_t sbl_index_count(const sbl_coll_t *c);

const char *sbl_index_name(const sbl_index_t *ix);
/* $indexStats' counters: an operation the planner ran through ix (or, for the
 * _id index, through c's _id order) counts one; the count starts when the
 * handle is made (start-up, the index's creation).  The getters return the
 * count and put the start (ms since the epoch) in *sincep. */
void sbl_index_note_access(sbl_index_t *ix);
int64_t sbl_index_accesses(const sbl_index_t *ix, int64_t *sincep);
void sbl_coll_note_id_access(sbl_coll_t *c);
int64_t sbl_coll_id_accesses(const sbl_coll_t *c, int64_t *sincep);
/* True once its build finished (queries may use it). */
bool sbl_index_is_ready(const sbl_index_t *ix);
const bson_t *sbl_index_spec(const sbl_index_t *ix); /* as created (listIndexes) */
size_t sbl_index_nfields(const sbl_index_t *ix);
const char *sbl_index_field(const sbl_index_t *ix, size_t i);
int sbl_index_dir(const sbl_index_t *ix, size_t i); /* 1, -1, or 0 for "hashed" */
/* A text index's parsed spec (NULL for other indexes).  Its entries are the
 * encoded prefix keys (sbl_index_nfields of them), a term (a string), the
 * document's score for it (8 bytes, sbl_index_text_score_put: scores are
 * positive, so the bytes sort as the scores do), then the _id key; the
 * planner never uses it for anything but $text. */
const struct sbl_fts_spec *sbl_index_text(const sbl_index_t *ix);
void sbl_index_text_score_put(double score, uint8_t out[8]);
double sbl_index_text_score_get(const uint8_t in[8]);
/* A geo index ({loc: "2dsphere"} or {loc: "2d"}, possibly compound): its
 * kind, and in *fieldp the geo field's position.  The geo field's key
 * component is a cell id (sbl_index_geo_cell_append); the planner uses the
 * index only for the geo operators (src/exec/geo.c). */
#define SBL_INDEX_2DSPHERE 1
#define SBL_INDEX_2D 2
int sbl_index_geo(const sbl_index_t *ix, size_t *fieldp);
/* Append the key component of S2 cell id `cell` (9 bytes, ordered as the ids are). */
void sbl_index_geo_cell_append(sbl_buf_t *out, uint64_t cell);
bool sbl_index_unique(const sbl_index_t *ix);
bool sbl_index_sparse(const sbl_index_t *ix);
bool sbl_index_multikey(const sbl_index_t *ix); /* some document gave several keys */
/* The spec's `collation` (NULL: simple): its string keys are that collation's sort keys. */
const sbl_collation_t *sbl_index_collation(const sbl_index_t *ix);
/* The partialFilterExpression, or NULL. */
const bson_t *sbl_index_partial(const sbl_index_t *ix);
/* Bytes of the index table on disk. */
int64_t sbl_index_size(sbl_session_t *s, const sbl_index_t *ix);
/* The hashed-index key of v (an int64 value). */
void sbl_index_hash(const bson_value_t *v, bson_value_t *out);

/* An ordered scan of index entries with lo <= key < hi in memcmp order
 * (hi_len 0: to the end), forward or backward.  Holds a reference on the
 * index's table; keeps nothing open across sbl_iscan_close. */
typedef struct sbl_iscan sbl_iscan_t;
int sbl_iscan_open(sbl_session_t *s, sbl_index_t *ix, const uint8_t *lo, size_t lo_len,
                   const uint8_t *hi, size_t hi_len, bool backward, sbl_iscan_t **scanp,
                   sbl_err_t *err);
/* Next entry: *key / *idk view the whole key and the encoded _id until the
 * next call; *donep at the end. */
int sbl_iscan_next(sbl_iscan_t *scan, const uint8_t **key, size_t *klen, const uint8_t **idk,
                   size_t *idlen, bool *donep, sbl_err_t *err);
void sbl_iscan_close(sbl_iscan_t *scan);

/* Point lookup by encoded _id (as an index entry gives it); as sbl_coll_get. */
int sbl_coll_get_by_key(sbl_session_t *s, sbl_coll_t *c, const uint8_t *idk, size_t idlen,
                        bson_t *doc, bool *foundp, sbl_err_t *err);
/* Point lookups of n encoded _ids (keys[i], lens[i]) with one cursor that
 * stays on its leaf page between them, so ids in key order mostly skip the
 * descent from the root.  fn sees each document found as a view valid only
 * during the call (nothing is copied) and may stop the walk by returning
 * nonzero (its error in err). */
typedef int (*sbl_fetch_fn)(void *arg, const bson_t *doc, sbl_err_t *err);
int sbl_coll_get_by_keys(sbl_session_t *s, sbl_coll_t *c, size_t n, const uint8_t *const *keys,
                         const uint32_t *lens, sbl_fetch_fn fn, void *arg, sbl_err_t *err);

/* ---- compaction (wt_compact.c) ------------------------------------------ */

/*
 * Give back to the filesystem the free space inside c's files: its table,
 * its natural-order table when capped, and each secondary index table.
 * Takes a checkpoint first (so pages freed since the last one count as free),
 * then, for every file holding at least free_space_target bytes of reusable
 * space, runs WiredTiger's compact (which moves live blocks toward the start
 * of the file, checkpoints and truncates; other sessions keep reading and
 * writing meanwhile).  *bytes_freedp gets the sum over the files of size
 * before minus size after (a file that grew meanwhile counts 0).  With
 * dry_run nothing is moved: *bytes_freedp gets the reusable bytes of the
 * files that would be compacted, an upper bound of what compact frees.
 * Compactions run one at a time (a second caller waits).  check (may be
 * NULL) is called with arg before each file and between slices of
 * WiredTiger's compact on one (30 s, doubling up to 10 min): a non-zero return (an error code, err filled) stops the
 * compaction there and is returned (what was moved stays moved).  Must not
 * be called inside a transaction (IllegalOperation 20); WiredTiger's EBUSY
 * (eviction stuck) is retried a few times, then returned as an error.  c
 * stays the caller's.
 */
typedef int (*sbl_compact_check_fn)(void *arg, sbl_err_t *err);
int sbl_coll_compact(sbl_session_t *s, sbl_coll_t *c, int64_t free_space_target, bool dry_run,
                     sbl_compact_check_fn check, void *arg, int64_t *bytes_freedp,
                     sbl_err_t *err);

/* ---- durability -------------------------------------------------------- */

/* Call cb(arg, rc) on the journal flusher thread once every transaction
 * committed before this call is durable in the journal (rc 0), or once the
 * flush that should have made it durable failed (rc: the error code; the
 * write must then not be acknowledged as journaled). */
void sbl_storage_on_durable(void (*cb)(void *arg, int rc), void *arg);
/* The same for a flush that need not start before due_us (CLOCK_MONOTONIC,
 * sbl_storage_now_us) and only if still wanted then: when wanted(arg) says
 * no at that moment, cb(arg, SBL_FLUSH_SKIPPED) runs instead and no flush
 * is made for it.  Any flush the flusher makes meanwhile (for another
 * request, or its periodic one) covers it: cb then runs at once with its
 * result.  The flusher looks at these requests at most every millisecond. */
#define SBL_FLUSH_SKIPPED (-1)
void sbl_storage_on_durable_by(int64_t due_us, bool (*wanted)(void *arg),
                               void (*cb)(void *arg, int rc), void *arg);
int64_t sbl_storage_now_us(void);
/* Flush the journal now and wait (for fsync / shutdown paths). */
int sbl_storage_flush(sbl_err_t *err);
/* A function the journal flusher calls after each journal flush and before
 * it calls the durable waiters (the audit log's fdatasync: one group commit
 * for both).  A non-zero return (an errno) fails that flush's waiters.
 * Set it once, before writes start; NULL removes it. */
void sbl_storage_set_flush_hook(int (*fn)(void));
/* Take a checkpoint now (fsync command). */
int sbl_storage_checkpoint(sbl_err_t *err);
/* Where in each syncdelay period this process's periodic checkpoints fall,
 * as a fraction of it in [0, 1) on the wall clock, or < 0 (the default):
 * syncdelay seconds after the last checkpoint ended.  A replica set member
 * takes its place in the set (sbl_rs_checkpoint_phase), so members that
 * share a host and its disk do not checkpoint together. */
void sbl_storage_set_checkpoint_phase(double phase);
/* The first time at or after earliest (seconds on the wall clock) that is
 * phase * period past a multiple of period (period > 0, 0 <= phase < 1). */
double sbl_storage_checkpoint_slot(double earliest, double period, double phase);

/* ---- replication's timestamps (wt_stable.c) ------------------------------
 * A replica set member's collections and indexes outside local.* are
 * created unlogged, so checkpoints hold them as of the stable timestamp
 * and rollback_to_stable can undo later commits; the oplog (logged) holds
 * what came after.  A standalone uses none of these. */
/* Create tables of replicated namespaces unlogged from now on (sbl_repl_start). */
void sbl_storage_set_replicated(bool on);
/* Move WiredTiger's stable timestamp to stable and the oldest to oldest
 * (clamped to stable); values older than the current ones are ignored. */
int sbl_storage_set_stable(uint64_t stable, uint64_t oldest, sbl_err_t *err);
/* The stable timestamp of the checkpoint the engine opened from (0: none,
 * or not a stable checkpoint), the current stable, and the newest
 * timestamp below which every commit is done (0: none yet). */
uint64_t sbl_storage_recovery_ts(void);
uint64_t sbl_storage_stable_ts(void);
/* The stable timestamp of the newest checkpoint (0: none yet). */
uint64_t sbl_storage_last_checkpoint_ts(void);
uint64_t sbl_storage_all_durable_ts(void);
/* How full WiredTiger's cache is, 0..1 (reads its statistics: not for hot paths). */
double sbl_storage_cache_fill(void);
/* The oldest timestamp a read may ask for (history before it is gone; 0: none set). */
uint64_t sbl_storage_oldest_ts(void);
/* Set stable back to ts and undo every timestamped commit after it in the
 * unlogged tables (WT_CONNECTION::rollback_to_stable), then recount the
 * collections.  The caller must have stopped writes; it retries while
 * other transactions or a checkpoint run. */
int sbl_storage_rollback_to_stable(uint64_t ts, sbl_err_t *err);

/* ---- hot backup (wt_backup.c) ------------------------------------------ */

/*
 * A backup pins the files of a checkpoint so they can be copied while writes
 * continue (WiredTiger's backup cursor).  At most one is open at a time.
 * Incremental backups are journal-based: a backup with incremental and
 * this_name (no src_name) is full and starts a chain; one with src_name
 * equal to the chain's last this_name lists only the journal files, to be
 * copied over the earlier copy (the data files stay those of the full
 * backup; the copy replays the journal when it starts).  While a chain is
 * active the journal files since its last backup are kept;
 * disable_incremental ends the chain (and lists the full backup's files).
 */
typedef struct sbl_backup sbl_backup_t;
typedef struct sbl_backup_opts {
    bool incremental;         /* start or continue a chain (needs this_name) */
    const char *this_name;    /* this backup's name in the chain, or NULL */
    const char *src_name;     /* the chain's previous backup: an incremental one */
    bool disable_incremental; /* end the chain */
} sbl_backup_opts_t;

/* Open a backup (a full one takes a checkpoint first).  *bp is the caller's,
 * closed with sbl_backup_close from any thread.  Errors: 50886 when a backup
 * (or an fsync lock) is open, BadValue for a src_name that is not the
 * chain's last backup. */
int sbl_backup_open(const sbl_backup_opts_t *o, sbl_backup_t **bp, sbl_err_t *err);
/* The files to copy: paths relative to the dbpath (journal files under
 * "journal/"), with their sizes when the backup opened (a file may grow
 * while it is copied: copy it to its end).  Valid until the close. */
size_t sbl_backup_nfiles(const sbl_backup_t *b);
const char *sbl_backup_file(const sbl_backup_t *b, size_t i, int64_t *sizep);
/* End the backup (NULL: nothing); an incremental one then lets the journal
 * files it listed go. */
void sbl_backup_close(sbl_backup_t *b);
/* True when an incremental chain keeps the journal files. */
bool sbl_backup_chain_active(void);
/* The engine's dbpath (as given at open). */
const char *sbl_storage_dbpath(void);
/* fsync lock: hold the files still (a backup with no listing) until the
 * matching release; nested holds count.  Error 50886 when a backup is open. */
int sbl_backup_hold(sbl_err_t *err);
void sbl_backup_release(void);

/* Engine statistics for serverStatus.wiredTiger: appends "cache" and "log"
 * sub-documents with WiredTiger's own statistic names. */
void sbl_storage_append_stats(bson_t *out);

#endif
