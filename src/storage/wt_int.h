/*
 * wt_int.h: private to src/storage: the engine singleton, the structures
 * behind sbl_session_t / sbl_coll_t, and the helpers the wt_*.c files share.
 *
 * What must stay true:
 *  - A table (sbl_wt_table_t) outlives every coll handle, cached cursor and
 *    pending count delta that points at it (each holds a reference).
 *  - `dropped` is set on a table before drop_gen is bumped, so a session that
 *    sees a new drop_gen and closes its cursors on dropped tables never keeps
 *    a cursor that blocks the physical drop past its next storage call.
 *  - The catalog array is sorted by ns and changed only under the write lock.
 */
#ifndef SBL_WT_INT_H
#define SBL_WT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <wiredtiger.h>

#include "common/buf.h"
#include "query/query.h"
#include "storage/storage.h"

/* One WiredTiger table holding a collection; shared by the coll handles of
 * one collection across renames. */
typedef struct sbl_wt_table {
    char *uri;   /* "table:collection-<n>-<random>" */
    char *ident; /* uri without "table:" */
    uint64_t id; /* unique in this process; keys the sessions' cursor caches */
    atomic_int refs;
    atomic_bool dropped;
    atomic_int_fast64_t count;     /* committed documents */
    atomic_int_fast64_t data_size; /* committed sum of BSON sizes */
    /* secondary indexes of a collection table (wt_index.c): the array is
     * changed under idx_lock (write) and read under it; nidx_quick mirrors
     * nidx so writes to collections without indexes take no lock. */
    pthread_rwlock_t idx_lock;
    struct sbl_index **idx;
    size_t nidx;
    atomic_size_t nidx_quick;
    struct sbl_capped *capped; /* capped collections only (wt_capped.c), else NULL */
    char *key_field; /* the top-level field documents are keyed by; NULL: "_id" */
    bool unlogged;   /* created log=(enabled=false) in this run (wt_stable.c) */
} sbl_wt_table_t;

/* The field t's documents are keyed by. */
static inline const char *sbl_table_key_field(const sbl_wt_table_t *t)
{
    return t->key_field != NULL ? t->key_field : "_id";
}

struct sbl_coll {
    char *ns;
    uint8_t uuid[16];
    bson_t *options; /* a pointer: bson_t wants more alignment than malloc gives */
    sbl_wt_table_t *tbl;
    atomic_int refs; /* the catalog holds one while the ns maps to this handle */
    bool dup_ids;    /* time-series: several documents may share an _id (see below) */
    bool versioned;  /* each write of a document takes a fresh record key (see below) */
    /* Created inside a multi-document transaction not yet committed: only
     * that transaction's session sees it (sbl_coll_publish_created). */
    const struct sbl_session *owner;
    _Atomic int64_t id_accesses; /* operations that read by _id ($indexStats' _id_) */
    int64_t id_since_ms;
};

/*
 * A collection with dup_ids (a time-series one) keys each document by
 * sbl_key_append(_id) followed by SBL_DUP_SEQ_LEN bytes of a big-endian
 * sequence number, one past the largest already under that _id, so equal
 * _ids coexist in insertion order and the order by _id is kept.  Records
 * written before this scheme (the bare encoded _id) sort first and still
 * count as that _id's.  The encoded _id is self-delimiting, so the records of
 * one _id are exactly the keys that start with its encoding.
 */
#define SBL_DUP_SEQ_LEN 8
/*
 * A versioned collection (SBL_VERSIONED_NS, the session transaction table)
 * has one document per _id, as any other, but its record keys are dup_ids
 * ones with a descending sequence number (UINT64_MAX first): an update
 * removes the document's record and inserts the new version one below it,
 * in the same transaction.  A document rewritten at every retryable write
 * so leaves one short-lived tombstone per version instead of a WiredTiger
 * update chain as long as the snapshot history window, which WiredTiger
 * 3.2's obsolete-update check walks on every further update of the key.
 * The newest version sorts first under its _id, so reads (dup_ids) reach it
 * without stepping over the tombstones.  sbl_version_replace (a session's
 * record written by its owner) updates the record under its key instead, up
 * to 16 times (wt_write.c's VERSION_UPDATES), so that chain stays short.
 */
#define SBL_VERSIONED_NS "config.transactions"
/* Position cur on the first record of a dup_ids table whose key starts with
 * p[0..n) and, when like is not NULL, whose value is like's bytes: 0, or
 * WT_NOTFOUND when there is none, or a WiredTiger error. */
int sbl_dup_seek(WT_CURSOR *cur, const uint8_t *p, size_t n, const bson_t *like);

typedef struct sbl_cached_cursor {
    sbl_wt_table_t *tbl; /* referenced */
    WT_CURSOR *cursor;   /* opened with overwrite=false */
} sbl_cached_cursor_t;

typedef struct sbl_delta {
    sbl_wt_table_t *tbl; /* referenced */
    int64_t count;
    int64_t data_size;
} sbl_delta_t;

struct sbl_session {
    WT_SESSION *wt;
    uint64_t epoch;    /* engine epoch it belongs to (reopen in one process) */
    uint64_t drop_gen; /* last engine drop_gen this session reconciled */
    bool in_txn;
    /* A multi-document transaction holds the WiredTiger transaction open
     * across operations (sbl_txn_begin_outer): begin/commit inside it are
     * nested no-ops, an abort after a nested write fails the whole one. */
    bool outer;
    bool outer_failed;  /* a nested write aborted: only rollback remains */
    bool prepared;      /* its transaction is prepared (two-phase commit) */
    uint64_t commit_ts; /* the largest commit timestamp of the open transaction; 0: none */
    uint64_t set_ts;    /* the commit timestamp set last in it (0: none) */
    int64_t gate_tag;   /* sbl_txn_set_gate: its commit asks the gate first; 0: none */
    bool gate_held;     /* sbl_txn_gate_enter let it in: its end leaves the gate */
    bool nested_wrote;  /* sbl_write ran since the last nested begin */
    bool is_private;    /* opened by sbl_session_open, not a thread's own */
    bool hide_creates;  /* collections it creates stay its own until published */
    atomic_uint_fast64_t txn_gen; /* engine txn_gen when its transaction began; 0: none */
    sbl_cached_cursor_t *cursors;
    size_t ncursors, cursors_cap;
    sbl_delta_t *deltas; /* count/size changes of the open transaction */
    size_t ndeltas, deltas_cap;
    sbl_buf_t key; /* scratch for encoded keys */
    /* capped tables whose insert lock the open transaction holds (wt_capped.c) */
    struct sbl_wt_table **capped_held;
    size_t ncapped_held, capped_held_cap;
    /* a table whose insert lock the open transaction released early
     * (sbl_capped_release): its tailers are woken when the transaction ends */
    bool capped_released;
    /* a collection of ordered visibility it inserted into (referenced): its
     * oldest documents are deleted in a transaction of their own after the
     * commit (sbl_capped_after_txn) */
    struct sbl_coll *evict_after;
    struct sbl_session *next_all; /* engine's list of every session */
};

/* A physical table drop still to be done (WiredTiger said EBUSY). */
typedef struct sbl_pending_drop {
    char *uri;
    struct sbl_pending_drop *next;
} sbl_pending_drop_t;

typedef struct sbl_waiter {
    void (*cb)(void *arg, int rc);
    void *arg;
    /* sbl_storage_on_durable_by: not before due_us (CLOCK_MONOTONIC), and
     * only while wanted(arg) says so then (NULL: always) */
    int64_t due_us;
    bool (*wanted)(void *arg);
    struct sbl_waiter *next;
} sbl_waiter_t;

typedef struct sbl_engine {
    bool open;
    uint64_t epoch;
    char *dbpath;
    int lock_fd;
    WT_CONNECTION *conn;
    bool have_snappy;
    /* create configurations of new tables: [index?][unlogged?] (wt_stable.c) */
    char table_config[2][2][1024];
    int commit_interval_ms;
    int syncdelay_s;

    /* catalog (wt_catalog.c) */
    pthread_rwlock_t cat_lock;
    sbl_coll_t **colls; /* sorted by ns */
    size_t ncolls, colls_cap;
    WT_SESSION *cat_wt;       /* used only under the catalog write lock */
    uint64_t next_ident;      /* <n> of the next collection-<n>-<random> */
    uint64_t ident_rand;      /* <random>, fixed per open */
    atomic_uint_fast64_t next_table_id;
    atomic_uint_fast64_t drop_gen;

    /* sessions (wt_session.c) */
    pthread_mutex_t sess_lock;
    sbl_session_t *sessions;

    /* background work and checkpoints (wt_durable.c) */
    pthread_mutex_t bg_lock; /* guards the fields below and ckpt_wt */
    pthread_cond_t bg_cond;
    bool bg_stop;
    pthread_t ckpt_thread;
    bool ckpt_started;
    WT_SESSION *ckpt_wt;
    sbl_pending_drop_t *drops;

    pthread_mutex_t fl_lock; /* journal flusher */
    pthread_cond_t fl_cond;
    bool fl_stop;
    pthread_t fl_thread;
    bool fl_started;
    sbl_waiter_t *waiters, **waiters_tail;
    sbl_waiter_t *later; /* sbl_storage_on_durable_by's, not due yet (any order) */
    WT_SESSION *fl_wt;
    atomic_uint_fast64_t commits; /* transactions committed since open */
    _Atomic uint64_t last_commit_ts; /* the largest commit timestamp committed */

    /* index builds wait for transactions older than a generation (wt_index.c) */
    atomic_uint_fast64_t txn_gen;

    /* TTL monitor (wt_ttl.c) */
    int ttl_sleep_s;
    pthread_t ttl_thread;
    bool ttl_started, ttl_stop;
    pthread_mutex_t ttl_lock;
    pthread_cond_t ttl_cond;
} sbl_engine_t;

extern sbl_engine_t sbl_eng;

/* Note a WiredTiger error for sbl_storage_can_write (ENOSPC, WT_PANIC). */
void sbl_space_note_error(int ret);

#define SBL_CATALOG_URI "table:_sbl_catalog"
#define SBL_SIZES_URI "table:_sbl_sizes"
#define SBL_CLEAN_KEY "_sbl_clean_shutdown"

/* Map a WiredTiger return code to a MongoDB error in *err; returns the code.
 * `what` names the operation for the message. */
int sbl_wt_err(sbl_err_t *err, int ret, const char *what);
/* wt_prepare.c: sbl_wt_err met WT_PREPARE_CONFLICT (this thread notes the
 * resolution count); a prepared transaction committed or rolled back (the
 * count moves and waiters wake). */
void sbl_prepare_note_conflict(void);
void sbl_prepare_began(void);
void sbl_prepare_resolved(void);
/* A cursor call answered WT_PREPARE_CONFLICT: true once this thread's scope
 * (sbl_prepare_scope_enter) waited and the same call should be made again;
 * false when there is no scope or it gave up (the caller fails as before). */
bool sbl_prepare_wait_here(void);
/* Before an insert of cur's key (set): when this thread waits in place and
 * a transaction is prepared, a search of the key waits out a prepared
 * transaction's write of it, as mongod's duplicate-key search does
 * (WiredTiger's insert would answer WT_ROLLBACK, which ends the
 * transaction).  0 (cur's key still set, its value not), or the search's
 * error (WT_PREPARE_CONFLICT when the wait gave up). */
int sbl_prepare_wait_key(WT_CURSOR *cur);
/* sbl_prepare_shutdown ran: nothing waits for transactions any more. */
bool sbl_prepare_stopping(void);

/* Table references. */
sbl_wt_table_t *sbl_table_new(const char *uri);
void sbl_table_ref(sbl_wt_table_t *t);
void sbl_table_unref(sbl_wt_table_t *t);

/* The session's cached cursor on t (opened on first use), reset and ready. */
int sbl_session_cursor(sbl_session_t *s, sbl_wt_table_t *t, WT_CURSOR **cp, sbl_err_t *err);
/* Close cached cursors on dropped tables if a drop happened since the last check. */
void sbl_session_reconcile(sbl_session_t *s);
/* Record a committed-on-success count/size change for the open transaction. */
void sbl_session_add_delta(sbl_session_t *s, sbl_wt_table_t *t, int64_t dcount, int64_t dsize);
/* Close every session (engine close; threads must be quiet). */
void sbl_sessions_close_all(void);

/* A walk over the keys of one table between optional bounds, forward or
 * backward (wt_range.c): collection and index scans are both one.  Bounds
 * are set in lo/hi (has_*, *_inclusive) after sbl_range_open. */
typedef struct sbl_range {
    uint64_t epoch; /* the engine open its cursor belongs to */
    sbl_wt_table_t *tbl; /* referenced */
    WT_CURSOR *cursor;
    bool backward, started, done;
    bool has_lo, lo_inclusive, has_hi, hi_inclusive;
    sbl_buf_t lo, hi;
} sbl_range_t;

int sbl_range_open(sbl_session_t *s, sbl_wt_table_t *t, bool backward, sbl_range_t *r,
                   sbl_err_t *err);
/* The next record in range into k and v: 0, WT_NOTFOUND past the end (the
 * cursor is reset then and stays at the end), or a WiredTiger error. */
int sbl_range_next(sbl_range_t *r, WT_ITEM *k, WT_ITEM *v);
void sbl_range_close(sbl_range_t *r);

/* Catalog life (wt_catalog.c). */
int sbl_catalog_load(sbl_err_t *err);
void sbl_catalog_unload(void);
/* Write every live table's count and size to the sizes table; clean sets the
 * clean-shutdown marker too.  Uses wt (not shared). */
int sbl_catalog_save_sizes(WT_SESSION *wt, bool clean, sbl_err_t *err);

/* Try to drop uri now on wt (which the caller owns); queue it for the
 * background retry when WiredTiger says EBUSY (wt_durable.c). */
void sbl_drop_table(WT_SESSION *wt, const char *uri);
/* Try every queued drop once on wt; returns how many remain queued. */
size_t sbl_drop_retry(WT_SESSION *wt);
/* Remove the journal files no checkpoint needs any more, unless a backup is
 * open or an incremental backup chain keeps them (wt_backup.c; WiredTiger's
 * own log archival is off).  wt belongs to the caller. */
void sbl_backup_log_removal(WT_SESSION *wt);
/* Build sbl_eng.table_config from cfg's extra strings (checked with
 * WiredTiger's validation of WT_SESSION.create: BadValue when they do not
 * pass), after have_snappy is known (wt_stable.c). */
int sbl_table_configs_build(const sbl_storage_config_t *cfg, sbl_err_t *err);
/* The create config of a collection's or an index's table, unlogged or
 * not (wt_stable.c); whether ns's tables are created unlogged (a replica
 * set member's replicated namespaces). */
const char *sbl_table_config_for(bool unlogged, bool index);
bool sbl_storage_ns_unlogged(const char *ns);
/* Count every table's documents and bytes again (catalog write lock held,
 * or at open). */
int sbl_catalog_recount(sbl_err_t *err);
/* Serializes checkpoints (wt_durable.c) and rollback_to_stable. */
extern pthread_mutex_t sbl_ckpt_mutex;

/* ---- secondary indexes (wt_index.c: handles, catalog rows, create, build,
 * drop; wt_index_entries.c: keys, entries, scans; wt_ttl.c: TTL monitor) ---- */

/* A secondary index's handle (sbl_index_t): its parsed spec and its table;
 * refs counts the table's index list and every holder. */
struct sbl_index {
    char *name;
    bson_t *spec;
    bson_t *partial_spec; /* NULL: not partial */
    sbl_matcher_t *partial;
    size_t nfields;
    char **fields;
    int8_t *dirs; /* 1, -1, 0 = hashed */
    sbl_fts_spec_t *text; /* a text index: fields are its prefix keys (sbl_index_text_keys) */
    bool unique, sparse, hashed;
    int geo;          /* SBL_INDEX_2DSPHERE / SBL_INDEX_2D, 0 for others */
    size_t geo_field; /* the position of its geo field */
    bool prepare_unique;  /* collMod prepareUnique: refuse new duplicate keys */
    int64_t expire_after; /* -1: not a TTL index */
    const sbl_collation_t *coll; /* NULL: simple; string keys are its sort keys */
    sbl_wt_table_t *tbl;
    atomic_bool ready, multikey;
    atomic_int refs;
    _Atomic int64_t accesses; /* operations the planner ran through it ($indexStats) */
    int64_t since_ms;         /* when the count started: the handle's making */
};

/* The values at an index path in a document (sbl_index_walk). */
typedef struct vals {
    bson_value_t *v;
    size_t n, cap;
    bool from_array; /* an array was expanded on the way */
    bool present;    /* the field exists (for sparse) */
} vals_t;

/* A sorted set of distinct byte strings. */
typedef struct keyset {
    sbl_buf_t arena;
    size_t *off, *len;
    size_t n, cap;
} keyset_t;

/* Collect the values at path in the document data/len into vs, expanding
 * arrays as MongoDB's index key generation does; returns how many were added. */
size_t sbl_index_walk(const uint8_t *data, uint32_t len, const char *path, vals_t *vs);
void sbl_keyset_init(keyset_t *ks);
void sbl_keyset_destroy(keyset_t *ks);
/* The key components (without _id) of doc for ix into ks, sorted and distinct;
 * *multikeyp when an array was expanded.  Errors: 171 parallel arrays, 16766
 * hashed array. */
int sbl_index_keys(const sbl_index_t *ix, const bson_t *doc, keyset_t *ks, bool *multikeyp,
                   sbl_err_t *err);
/* A text index's keys of doc: for each distinct term, the prefix keys, the
 * term and its score (a double).  Errors: 17261/17262 bad language override. */
int sbl_index_text_keys(const sbl_index_t *ix, const bson_t *doc, keyset_t *ks, sbl_err_t *err);
/* A 2dsphere or 2d index's keys of doc: the geo field's cells (one per
 * point, a covering for other shapes) in place of its value, the other
 * fields as in any index.  A document without the geo field has no entry;
 * one whose geo value is no valid geometry fails with 16755 (Can't extract
 * geo keys), or 13026/13027 for a 2d index. */
int sbl_index_geo_keys(const sbl_index_t *ix, const bson_t *doc, keyset_t *ks, bool *multikeyp,
                       sbl_err_t *err);
/* Insert ix's entry for key k of the document whose encoded _id is idk, on s's
 * cursor (its own entry again is no error; another document's key in a unique
 * or prepareUnique index is DuplicateKey, with err_info). */
int sbl_index_entry_insert(sbl_session_t *s, const char *ns, sbl_index_t *ix, const uint8_t *k,
                           size_t klen, const uint8_t *idk, size_t idlen, bson_t *err_info,
                           sbl_err_t *err);

/* Maintain c's secondary index entries for one document change, inside the
 * caller's transaction, after the document itself was written.  idk is the
 * encoded _id.  old_doc is needed for UPDATE and DELETE. */
int sbl_index_on_write(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind,
                       const bson_t *old_doc, const bson_t *new_doc, const uint8_t *idk,
                       size_t idlen, bson_t *err_info, sbl_err_t *err);
/* Append "indexes": [...] (specs plus ident, ready, multikey) for a catalog row. */
void sbl_index_catalog_append(sbl_wt_table_t *t, bson_t *entry);
/* Rebuild t's index list from a catalog row (under the catalog write lock,
 * at load); indexes whose build never finished are dropped. */
int sbl_index_catalog_load(sbl_wt_table_t *t, const bson_t *entry, sbl_err_t *err);
/* Mark every index table of t dropped and drop it on cat_wt (collection drop). */
void sbl_index_drop_tables(sbl_wt_table_t *t);
/* Release t's index list (last table reference). */
void sbl_index_free_all(sbl_wt_table_t *t);
/* The WiredTiger uri of ix's table ("table:index-<n>-<r>"): valid while ix is held. */
const char *sbl_index_uri(const sbl_index_t *ix);
/* True when some loaded collection has an index table named uri. */
bool sbl_index_uri_known(const char *uri);
/* Start / stop the TTL monitor thread (wt_ttl.c). */
int sbl_ttl_start(sbl_err_t *err);
void sbl_ttl_stop(void);

/* Rewrite the catalog row of the collection whose table is t (wt_catalog.c);
 * NamespaceNotFound when it was dropped meanwhile. */
int sbl_catalog_update_table(sbl_wt_table_t *t, sbl_err_t *err);

/* DuplicateKey 11000 in MongoDB's words for index `index` of ns (wt_write.c);
 * pattern and value are {field: ...} documents; err_info gets keyPattern/keyValue. */
int sbl_wt_dup_key(const char *ns, const char *index, const bson_t *pattern, const bson_t *value,
                   bson_t *err_info, sbl_err_t *err);

/* ---- capped collections (wt_capped.c) ---- */

/* When options say capped:true, give t its natural-order table
 * (table:natural-<n>-<r> beside table:collection-<n>-<r>), created on wt
 * when create is set (under the catalog write lock).  0 or an error. */
int sbl_capped_attach(WT_SESSION *wt, sbl_wt_table_t *t, const bson_t *options, bool create,
                      sbl_err_t *err);
/* Take t's size and max from options (collMod changed them); nothing when
 * t is not capped. */
void sbl_capped_set_limits(sbl_wt_table_t *t, const bson_t *options);
/* The natural-order table's uri of t, or NULL when t is not capped. */
const char *sbl_capped_uri(const sbl_wt_table_t *t);
/* Collection drop: mark t's natural-order table dropped and drop it on cat_wt. */
void sbl_capped_drop_table(sbl_wt_table_t *t);
/* Free t's capped state (last table reference). */
void sbl_capped_free(sbl_wt_table_t *t);
/* Keep the natural order of capped c in step with one document change and,
 * after an insert, delete the oldest documents while c is over its size or
 * document count; inside the caller's transaction, after the document write.
 * An insert takes c's insert lock until the transaction ends. */
int sbl_capped_on_write(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind,
                        const bson_t *old_doc, const bson_t *new_doc, sbl_err_t *err);
/* Release the capped insert locks s holds (its transaction ended). */
void sbl_capped_unlock_all(sbl_session_t *s);
/* After s's transaction ended (committed: true when it committed): the
 * deletions of the oldest documents of a collection of ordered visibility it
 * inserted into, in a short transaction of their own on s, by one session at
 * a time (another that finds one running leaves them to it). */
void sbl_capped_after_txn(sbl_session_t *s, bool committed);
/* The document write of sbl_write inside the open transaction (wt_write.c). */
int sbl_wt_write_in_txn(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind,
                        const bson_t *old_doc, const bson_t *new_doc, bson_t *err_info,
                        sbl_err_t *err);

/* Background threads (wt_durable.c). */
int sbl_bg_start(sbl_err_t *err);
void sbl_bg_stop(void);

#endif
