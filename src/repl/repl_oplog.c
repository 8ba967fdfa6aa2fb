/*
 * repl_oplog.c: the oplog writer.  local.oplog.rs is a capped collection
 * keyed by ts (storage's keyed collections), so its documents have mongod's
 * shape (no _id) and its natural order is its ts order.
 *
 * What must stay true:
 *  - An entry is appended inside the transaction of the change it describes
 *    (the storage write observer runs in sbl_write's transaction), and its ts
 *    becomes that transaction's WiredTiger commit timestamp.
 *  - ts is taken while the transaction holds the oplog's capped insert lock,
 *    with the entry's natural position, so ts order and natural order are
 *    one order.  A primary's write releases the lock once its entries are
 *    written (sbl_oplog_release) and commits in parallel with later ones;
 *    every ts is reserved in repl_visible.c, whose visibility point keeps
 *    natural scans of the oplog (tailing secondaries, tools) and the
 *    position this member reports below any entry still in flight, so a
 *    reader that saw ts never later finds a smaller one.  An aborted
 *    transaction's ts is simply never used again.  A secondary's applier
 *    and prepared transactions keep the lock to the commit.
 *  - Nothing in local.* and no <db>.system.profile write is logged (mongod
 *    replicates neither); the oplog's own writes are in local.
 *  - An entry this member writes carries the term it is primary of (or, at
 *    initiate, the set's first term), read once under the oplog lock; from
 *    a step-down to the next election won it is -1 and such writes fail
 *    (InterruptedDueToReplStateChange), so a write that passed the primary
 *    check before a step-down never carries the newer term it learnt of.
 *  - Nothing written in term T commits once the member stopped leading T:
 *    a transaction holding entries of T commits through the storage's
 *    commit gate (sbl_oplog_gate_enter), which refuses it (11602) unless
 *    the current term is still T, and the term's change waits for the
 *    commits the gate already let in, so each either committed before the
 *    member left PRIMARY or rolls back.
 *  - last_ts/last_term are the newest entry handed out, which may still abort;
 *    sbl_oplog_committed is the visibility point (reset when the oplog is
 *    read from disk).  Only that is reported to other members as this
 *    member's position.
 */
#include "repl/repl_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"

static sbl_coll_t *oplog;       /* referenced while open; set before active */
static atomic_bool active;      /* entries are written */
static _Atomic uint64_t last_ts; /* the last ts handed out (under the oplog lock) */
static _Atomic uint64_t clock_floor; /* cluster times gossiped to us: the next ts is later */
static _Atomic int64_t last_wall;
static _Atomic int64_t last_term;  /* t of the last entry */
static _Atomic int64_t cur_term = 1; /* t of the entries this member writes; -1: none */

_Thread_local const bson_t *sbl_repl_applying;
_Thread_local sbl_repl_head_t sbl_repl_head;
_Thread_local bool sbl_repl_from_migrate;
_Thread_local bool sbl_repl_applied_written;
_Thread_local const bson_t *sbl_repl_image_entry;
_Thread_local int64_t sbl_repl_image_index;
_Thread_local bool sbl_repl_replaying;

int64_t sbl_repl_write_term(void)
{
    /* cur_term is set before a member says PRIMARY and cleared before it
     * stops (repl_coord.c); a secondary's holds its last term */
    return sbl_repl_writable() ? atomic_load(&cur_term) : -1;
}

int64_t sbl_oplog_last_term(void)
{
    return atomic_load(&last_term);
}

/* Primary commits the gate let in and that have not returned yet. */
static _Atomic int64_t committing;

int sbl_oplog_gate_enter(int64_t term, sbl_err_t *err)
{
    /* seq_cst, as sbl_oplog_set_term's store and load: either this load
     * sees the step-down's -1, or the step-down sees this commit counted
     * and waits for it. */
    atomic_fetch_add(&committing, 1);
    if (atomic_load(&cur_term) == term)
        return 0;
    atomic_fetch_sub(&committing, 1);
    return sbl_err_set(err, SBL_E_InterruptedDueToReplStateChange,
                       "operation was interrupted because a replica set state change "
                       "(stepdown) occurred");
}

void sbl_oplog_gate_leave(void)
{
    atomic_fetch_sub(&committing, 1);
}

void sbl_oplog_set_term(int64_t term)
{
    int64_t before = atomic_exchange(&cur_term, term);
    if (before == term)
        return;
    /* No entry of the term that ends commits from now on: wait for those
     * the gate let in (each is a WiredTiger commit, short).  Bounded, so a
     * commit stuck in the engine cannot hold a step-down for ever. */
    int64_t until = sbl_now_ms() + 10000;
    while (atomic_load(&committing) > 0 && sbl_now_ms() < until) {
        struct timespec t = {0, 200 * 1000};
        nanosleep(&t, NULL);
    }
    if (atomic_load(&committing) > 0)
        sbl_log(SBL_LOG_WARNING, "REPL", 7360003, "Term changed while primary writes of "
                "the term before are still committing", NULL);
}

sbl_coll_t *sbl_oplog_coll(void)
{
    return oplog;
}

bool sbl_oplog_is_open(void)
{
    return oplog != NULL;
}

void sbl_oplog_set_active(bool on)
{
    atomic_store(&active, on && oplog != NULL);
}

static _Thread_local uint64_t thread_op_ts; /* sbl_repl_take_thread_op_ts */

/* The storage's end-of-transaction observer: the entries s's transaction
 * reserved committed or rolled back.  A transaction that reserved none (a
 * recovery replaying an entry already in the oplog) changes nothing. */
void sbl_oplog_on_commit(sbl_session_t *s, uint64_t commit_ts, bool committed)
{
    if (committed && commit_ts > thread_op_ts)
        thread_op_ts = commit_ts;
    sbl_oplog_vis_end(s, committed);
}

uint64_t sbl_repl_take_thread_op_ts(void)
{
    uint64_t ts = thread_op_ts;
    thread_op_ts = 0;
    return ts;
}

void sbl_oplog_release(sbl_session_t *s)
{
    if (oplog != NULL)
        sbl_capped_release(s, oplog);
}

uint64_t sbl_oplog_last_ts(void)
{
    return atomic_load(&last_ts);
}

int64_t sbl_oplog_last_wall_ms(void)
{
    return atomic_load(&last_wall);
}

/* Resume from the newest entry: its ts and wall. */
static int load_last(sbl_session_t *s, sbl_err_t *err)
{
    sbl_natural_t *scan;
    bson_t doc;
    bson_iter_t it;
    uint64_t pos;
    bool done;
    int rc;

    SBL_RET(sbl_natural_open(s, oplog, 0, true, &scan, err));
    if ((rc = sbl_natural_next(scan, &doc, &pos, &done, err)) == 0 && !done) {
        if (bson_iter_init_find(&it, &doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            uint32_t t, i;
            bson_iter_timestamp(&it, &t, &i);
            atomic_store(&last_ts, SBL_TS(t, i));
        }
        if (bson_iter_init_find(&it, &doc, "wall") && BSON_ITER_HOLDS_DATE_TIME(&it))
            atomic_store(&last_wall, bson_iter_date_time(&it));
        if (bson_iter_init_find(&it, &doc, "t") && BSON_ITER_HOLDS_NUMBER(&it))
            atomic_store(&last_term, bson_iter_as_int64(&it));
    }
    sbl_natural_close(scan);
    /* on disk: committed */
    sbl_oplog_vis_reset(rc == 0, atomic_load(&last_ts), atomic_load(&last_term));
    return rc;
}

int sbl_oplog_last_committed(sbl_session_t *s, uint64_t *tsp, int64_t *termp, sbl_err_t *err)
{
    sbl_natural_t *scan;
    bson_t doc;
    bson_iter_t it;
    uint64_t pos;
    bool done;
    int rc;

    *tsp = 0;
    *termp = 0;
    if (oplog == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "the oplog is not open");
    SBL_RET(sbl_natural_open(s, oplog, 0, true, &scan, err));
    if ((rc = sbl_natural_next(scan, &doc, &pos, &done, err)) == 0 && !done) {
        if (bson_iter_init_find(&it, &doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            uint32_t t, i;
            bson_iter_timestamp(&it, &t, &i);
            *tsp = SBL_TS(t, i);
        }
        if (bson_iter_init_find(&it, &doc, "t") && BSON_ITER_HOLDS_NUMBER(&it))
            *termp = bson_iter_as_int64(&it);
    }
    sbl_natural_close(scan);
    return rc;
}

int sbl_oplog_open(sbl_session_t *s, int64_t size_bytes, bool create, sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    int rc;

    if (oplog != NULL)
        return 0;
    rc = sbl_coll_open(s, SBL_OPLOG_NS, false, &c, NULL, err);
    if (rc == SBL_E_NamespaceNotFound && create) {
        bson_t opts = BSON_INITIALIZER;
        BSON_APPEND_BOOL(&opts, "capped", true);
        BSON_APPEND_INT64(&opts, "size", size_bytes);
        sbl_err_clear(err);
        rc = sbl_coll_create_keyed(s, SBL_OPLOG_NS, &opts, "ts", err);
        bson_destroy(&opts);
        if (rc == 0)
            rc = sbl_coll_open(s, SBL_OPLOG_NS, false, &c, NULL, err);
        if (rc == 0) {
            bson_t attr = BSON_INITIALIZER;
            BSON_APPEND_INT64(&attr, "oplogSizeBytes", size_bytes);
            sbl_log(SBL_LOG_INFO, "REPL", 21754, "Creating replication oplog", &attr);
            bson_destroy(&attr);
        }
    }
    SBL_RET(rc);
    if (strcmp(sbl_coll_key_field(c), "ts") != 0 || !sbl_coll_capped(c, NULL, NULL)) {
        sbl_coll_release(c);
        return sbl_err_set(err, SBL_E_InternalError,
                           "%s exists but is not a capped collection keyed by ts", SBL_OPLOG_NS);
    }
    sbl_oplog_vis_reset(false, 0, 0);
    sbl_capped_set_visibility(c, sbl_oplog_vis_limit);
    oplog = c;
    if ((rc = load_last(s, err)) != 0) {
        oplog = NULL;
        sbl_coll_release(c);
    }
    return rc;
}

int sbl_oplog_reload_last(sbl_session_t *s, sbl_err_t *err)
{
    atomic_store(&last_ts, 0);
    atomic_store(&last_wall, 0);
    atomic_store(&last_term, 0);
    sbl_oplog_vis_reset(oplog == NULL, 0, 0);
    return oplog != NULL ? load_last(s, err) : 0;
}


void sbl_oplog_close(void)
{
    atomic_store(&active, false);
    sbl_coll_release(oplog);
    oplog = NULL;
}

int sbl_oplog_append(sbl_session_t *s, sbl_oplog_entry_t *e, sbl_err_t *err)
{
    bson_t doc = BSON_INITIALIZER;
    int rc;

    if (oplog == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "the oplog is not open");
    /* The lock first: from here to the commit, nobody else takes a ts. */
    SBL_RET(sbl_capped_lock(s, oplog, err));
    int64_t term = atomic_load(&cur_term);
    if (term < 0) /* stepped down since the write's check: not a term this member leads */
        return sbl_err_set(err, SBL_E_InterruptedDueToReplStateChange,
                           "operation was interrupted because a replica set state change "
                           "(stepdown) occurred");
    int64_t now = sbl_now_ms();
    uint64_t prev = atomic_load(&last_ts), floor = atomic_load(&clock_floor);
    uint64_t ts = sbl_repl_ts_next(prev > floor ? prev : floor, (uint32_t)(now / 1000));
    atomic_store(&last_ts, ts);
    atomic_store(&last_wall, now);
    e->ts = ts;
    e->wall_ms = now;
    e->term = term;
    atomic_store(&last_term, e->term);
    sbl_rs_flow_sample(ts); /* flow control's count of the primary's entries */
    SBL_RET(sbl_txn_set_commit_ts(s, ts, err));
    if (!sbl_oplog_vis_reserve(ts, term, s))
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory for an oplog entry");
    sbl_txn_set_gate(s, term); /* it commits only while this member leads term */
    sbl_doc_index_t ix; /* the write looks up its key field, ts, twice: ~1k each walked */
    sbl_repl_entry_build(e, &doc, &ix);
    const sbl_doc_index_t *prev_ix = sbl_doc_index_use(ix.data != NULL ? &ix : NULL);
    rc = sbl_write(s, oplog, SBL_WRITE_INSERT, NULL, &doc, NULL, err);
    sbl_doc_index_use(prev_ix);
    bson_destroy(&doc);
    return rc;
}

int sbl_oplog_append_raw(sbl_session_t *s, const bson_t *doc, sbl_err_t *err)
{
    bson_iter_t it;
    uint32_t t = 0, i = 0;
    int64_t term = 0, wall = 0;

    if (oplog == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "the oplog is not open");
    uint64_t ts;
    if (doc == sbl_repl_head.doc && sbl_repl_head.ts != 0) { /* read when it was fetched */
        ts = sbl_repl_head.ts;
        term = sbl_repl_head.t;
        wall = sbl_repl_head.wall;
    } else {
        if (!sbl_doc_find_top(doc, "ts", &it) || !BSON_ITER_HOLDS_TIMESTAMP(&it))
            return sbl_err_set(err, SBL_E_InvalidBSON, "oplog entry without a ts");
        bson_iter_timestamp(&it, &t, &i);
        ts = SBL_TS(t, i);
        if (sbl_doc_find_top(doc, "t", &it) && BSON_ITER_HOLDS_NUMBER(&it))
            term = bson_iter_as_int64(&it);
        if (sbl_doc_find_top(doc, "wall", &it) && BSON_ITER_HOLDS_DATE_TIME(&it))
            wall = bson_iter_date_time(&it);
    }
    SBL_RET(sbl_rs_apply_turn(err)); /* a writer: entries take the lock in ts order */
    SBL_RET(sbl_capped_lock(s, oplog, err));
    SBL_RET(sbl_txn_set_commit_ts(s, ts, err));
    if (!sbl_oplog_vis_reserve(ts, term, s)) /* the lock is kept: the applier commits in order */
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory for an oplog entry");
    SBL_RET(sbl_write(s, oplog, SBL_WRITE_INSERT, NULL, doc, NULL, err));
    SBL_RET(sbl_rs_apply_record(s, doc, ts, err));
    if (ts > atomic_load(&last_ts)) {
        atomic_store(&last_ts, ts);
        atomic_store(&last_wall, wall);
        atomic_store(&last_term, term);
    }
    sbl_repl_applied_written = true;
    sbl_repl_fp_wait(SBL_REPL_FP_APPLY_COMMIT, NULL, NULL); /* tests: held uncommitted */
    return 0;
}

/* Replaying our own entry doc: its change commits at the entry's ts, and
 * the entry, already in the oplog, is not written again. */
static int replay_ts(sbl_session_t *s, const bson_t *doc, sbl_err_t *err)
{
    bson_iter_t it;
    uint32_t t = 0, i = 0;
    if (!bson_iter_init_find(&it, doc, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&it))
        return sbl_err_set(err, SBL_E_InvalidBSON, "oplog entry without a ts");
    bson_iter_timestamp(&it, &t, &i);
    SBL_RET(sbl_txn_set_commit_ts(s, SBL_TS(t, i), err));
    sbl_repl_applied_written = true;
    /* the session's record went back with the data: write it again */
    return sbl_txn_record_applied(s, doc, err);
}

/* True when writes to ns are logged: not local.*, not the profiler's, not
 * config.transactions (each member derives its records from the entries). */
static bool replicated(const char *ns)
{
    size_t n = strlen(ns);
    static const char profile[] = ".system.profile";
    if (strncmp(ns, "local.", 6) == 0 || strcmp(ns, SBL_PREIMAGES_NS) == 0)
        return false; /* pre-images are written by each member for itself, as mongod */
    if (ns[0] == 'c' && strcmp(ns, SBL_TXN_TABLE_NS) == 0)
        return false;
    return !(n >= sizeof(profile) - 1 && strcmp(ns + n - (sizeof(profile) - 1), profile) == 0);
}

static _Thread_local bool replacing;

void sbl_repl_set_replacement(bool on)
{
    replacing = on;
}

/* True when c's options have changeStreamPreAndPostImages: {enabled: true}. */
static bool wants_images(sbl_coll_t *c)
{
    bson_iter_t it, f;
    const bson_t *o = sbl_coll_options(c);
    return o != NULL && bson_iter_init_find(&it, o, "changeStreamPreAndPostImages") &&
           BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &f) &&
           bson_iter_find(&f, "enabled") && bson_iter_as_bool(&f);
}

int sbl_repl_write_preimage(sbl_session_t *s, const uint8_t *uuid, uint64_t ts, int64_t index,
                            int64_t wall_ms, const bson_t *old_doc, sbl_err_t *err)
{
    sbl_coll_t *pc = NULL;
    bson_t doc = BSON_INITIALIZER, id;
    int rc = sbl_coll_open(s, SBL_PREIMAGES_NS, true, &pc, NULL, err);
    if (rc != 0)
        return rc;
    BSON_APPEND_DOCUMENT_BEGIN(&doc, "_id", &id);
    bson_append_binary(&id, "nsUUID", -1, BSON_SUBTYPE_UUID, uuid, 16);
    bson_append_timestamp(&id, "ts", -1, SBL_TS_SECS(ts), SBL_TS_INC(ts));
    BSON_APPEND_INT64(&id, "applyOpsIndex", index);
    bson_append_document_end(&doc, &id);
    BSON_APPEND_DATE_TIME(&doc, "operationTime", wall_ms);
    BSON_APPEND_DOCUMENT(&doc, "preImage", old_doc);
    rc = sbl_write(s, pc, SBL_WRITE_INSERT, NULL, &doc, NULL, err);
    bson_destroy(&doc);
    sbl_coll_release(pc);
    return rc;
}

/* The "ui" of the operation being applied: entry in's own, or (txn) that
 * of its applyOps operation sbl_repl_image_index; NULL when it has none. */
static const uint8_t *applied_uuid(const bson_t *in, bool txn)
{
    bson_iter_t it, op;
    char path[64];
    const uint8_t *data = NULL;
    uint32_t len = 0;
    bson_subtype_t st;
    if (txn)
        snprintf(path, sizeof(path), "o.applyOps.%lld.ui", (long long)sbl_repl_image_index);
    else
        snprintf(path, sizeof(path), "ui");
    if (!bson_iter_init(&it, in) || !bson_iter_find_descendant(&it, path, &op) ||
        !BSON_ITER_HOLDS_BINARY(&op))
        return NULL;
    bson_iter_binary(&op, &st, &len, &data);
    return len == 16 ? data : NULL;
}

static _Thread_local bool unlogged_writes;

/* While the member still leads term *arg (the held write's). */
static bool still_leads(void *arg)
{
    int64_t term = *(const int64_t *)arg;
    return term >= 0 && atomic_load(&cur_term) == term;
}

/* A primary's write whose entries took their ts: the oplog's lock goes, so
 * later writes take theirs and may commit first; then the test fail points
 * may hold it (hangBeforePrimaryOplogCommit) or abort it
 * (failBeforePrimaryOplogCommit) before its transaction commits.  The hold
 * ends when the member stops leading the write's term, as mongod's
 * step-down interrupts the writes in progress: the write goes on to its
 * commit, which fails (11602), and the ts it holds ends at once, not when
 * the fail point goes off (till then, entries committed after it would stay
 * invisible on a member that is a secondary again). */
static int release_entries(sbl_session_t *s, const char *ns, sbl_err_t *err)
{
    int64_t term = atomic_load(&cur_term);
    sbl_capped_release(s, oplog);
    if (sbl_repl_fp_applies(SBL_REPL_FP_BEFORE_COMMIT, ns))
        sbl_repl_fp_wait(SBL_REPL_FP_BEFORE_COMMIT, still_leads, &term);
    if (sbl_repl_fp_applies(SBL_REPL_FP_FAIL_COMMIT, ns))
        return sbl_err_set(err, SBL_E_InternalError, "failBeforePrimaryOplogCommit: the write "
                           "is aborted after its oplog entry took a timestamp");
    return 0;
}

void sbl_repl_set_unlogged_writes(bool on)
{
    unlogged_writes = on;
}

int sbl_oplog_observe(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind,
                      const bson_t *old_doc, const bson_t *new_doc, sbl_err_t *err)
{
    const bson_t *doc = kind == SBL_WRITE_DELETE ? old_doc : new_doc;
    bson_t key = BSON_INITIALIZER, diff = BSON_INITIALIZER;
    bool exact = false; /* the diff gives new_doc back byte for byte (repl_diff.c) */
    bson_iter_t it;
    int rc;

    if (sbl_repl_cloning || unlogged_writes) /* initial sync: the entries come from the
                                                 * source's oplog; a prepare applied: its own */
        return 0;
    if (sbl_repl_applying != NULL && sbl_repl_replaying) /* already in our oplog */
        return replicated(sbl_coll_ns(c)) && !sbl_repl_applied_written
                   ? replay_ts(s, sbl_repl_applying, err)
                   : 0;
    if (sbl_repl_applying != NULL) { /* a secondary applies the primary's entry as it is */
        if (!replicated(sbl_coll_ns(c)))
            return 0;
        if (!sbl_repl_applied_written) /* once, however many writes an applyOps entry makes */
            SBL_RET(sbl_oplog_append_raw(s, sbl_repl_applying, err));
        /* the image under the ts of the entry that holds the operation and
         * the primary's UUID of the collection (the one streams look up) */
        const bson_t *in = sbl_repl_image_entry != NULL ? sbl_repl_image_entry
                                                        : sbl_repl_applying;
        if (kind != SBL_WRITE_INSERT && old_doc != NULL && wants_images(c) &&
            bson_iter_init_find(&it, in, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            /* looked up only here: a path search through the whole entry */
            const uint8_t *uuid = applied_uuid(in, sbl_repl_image_entry != NULL);
            uint32_t t, i;
            bson_iter_timestamp(&it, &t, &i);
            int64_t wall = bson_iter_init_find(&it, in, "wall") && BSON_ITER_HOLDS_DATE_TIME(&it)
                               ? bson_iter_date_time(&it) : 0;
            return sbl_repl_write_preimage(s, uuid != NULL ? uuid : sbl_coll_uuid(c),
                                           SBL_TS(t, i), sbl_repl_image_index, wall, old_doc,
                                           err);
        }
        return 0;
    }
    if (!atomic_load_explicit(&active, memory_order_acquire) || !replicated(sbl_coll_ns(c)))
        return 0;
    /* A write that passed the dispatcher's check while this member was
     * primary and reaches here after a step-down must not commit. */
    if (sbl_repl_enabled() && !sbl_repl_is_primary())
        return sbl_err_set(err, SBL_E_InterruptedDueToReplStateChange,
                           "operation was interrupted because a replica set state change "
                           "(stepdown) occurred");
    if (sbl_repl_fp_applies(SBL_REPL_FP_BEFORE_APPEND, sbl_coll_ns(c)))
        sbl_repl_fp_wait(SBL_REPL_FP_BEFORE_APPEND, NULL, NULL); /* tests: a step-down races */
    if (bson_iter_init_find(&it, doc, "_id"))
        sbl_append_iter(&key, "_id", 3, &it);
    sbl_oplog_entry_t e = {.ns = sbl_coll_ns(c), .uuid = sbl_coll_uuid(c),
                           .from_migrate = sbl_repl_from_migrate};
    switch (kind) {
    case SBL_WRITE_INSERT: /* o2: the document key, as mongod 6.0+ writes it */
        e.op = 'i';
        e.o = new_doc;
        e.o2 = &key;
        break;
    case SBL_WRITE_UPDATE: /* the post-image, or its diff (below) */
        e.op = 'u';
        e.o = new_doc;
        e.o2 = &key;
        if (!replacing && old_doc != NULL) { /* an update: what it changed */
            exact = sbl_repl_diff_exact(old_doc, new_doc, &diff);
            e.diff = &diff;
        }
        break;
    case SBL_WRITE_DELETE:
        e.op = 'd';
        e.o = &key;
        break;
    }
    sbl_repl_txn_ops_t *ops = sbl_repl_cur_txn_ops();
    sbl_repl_stmt_t *st = sbl_repl_cur_stmt();
    /* An update as mongod 7.0 logs one: o: {$v: 2, diff}, when the diff
     * gives back exactly the new document (applied to the old one as every
     * member applies it, repl_diff.c: plain from the diff's making for an
     * update of existing fields' values, else tried here); else, and in a
     * transaction's operations and a retryable findAndModify's entry (whose
     * retry answers with it), the new document whole, the diff beside it. */
    bson_t v2 = BSON_INITIALIZER;
    if (ops == NULL && e.diff != NULL && (st == NULL || !st->whole_post)) {
        bson_t back = BSON_INITIALIZER;
        sbl_err_t derr;
        sbl_err_clear(&derr);
        if (exact || (sbl_repl_diff_apply(old_doc, &diff, &back, &derr) == 0 &&
                      bson_equal(&back, new_doc))) {
            BSON_APPEND_INT32(&v2, "$v", 2);
            BSON_APPEND_DOCUMENT(&v2, "diff", &diff);
            e.o = &v2;
            e.diff = NULL;
        }
        bson_destroy(&back);
    }
    if (ops != NULL) { /* a multi-document transaction: one applyOps entry at commit */
        rc = sbl_repl_txn_ops_add(ops, e.op, e.ns, e.uuid, e.o, e.o2, e.diff,
                                  kind != SBL_WRITE_INSERT && wants_images(c) ? old_doc : NULL,
                                  err);
        bson_destroy(&key);
        bson_destroy(&diff);
        bson_destroy(&v2);
        return rc;
    }
    if (st == NULL) {
        rc = sbl_oplog_append(s, &e, err);
        if (rc == 0)
            rc = release_entries(s, e.ns, err);
        if (rc == 0 && kind != SBL_WRITE_INSERT && old_doc != NULL && wants_images(c))
            rc = sbl_repl_write_preimage(s, sbl_coll_uuid(c), e.ts, 0, e.wall_ms, old_doc, err);
        bson_destroy(&key);
        bson_destroy(&diff);
        bson_destroy(&v2);
        return rc;
    }
    /* A retryable write's statement: the pre-image first when asked, then
     * the entry with the session's fields, then the session's record. */
    e.stmt = st;
    rc = 0;
    if (st->pre_image && kind != SBL_WRITE_INSERT && old_doc != NULL) {
        sbl_oplog_entry_t pre = {.op = 'n', .ns = e.ns, .uuid = e.uuid, .o = old_doc,
                                 .stmt = st};
        if ((rc = sbl_oplog_append(s, &pre, err)) == 0) {
            e.pre_ts = pre.ts;
            e.pre_term = pre.term;
        }
    }
    if (rc == 0)
        rc = sbl_oplog_append(s, &e, err);
    if (rc == 0)
        rc = release_entries(s, e.ns, err);
    if (rc == 0) {
        uint8_t lb[SBL_REPL_LSID_LEN];
        bson_t lsid;
        rc = sbl_repl_lsid_view(lb, st->lsid_id, st->lsid_uid, &lsid)
                 ? sbl_txn_record_write_known(s, &lsid, st->txn_number, e.ts, e.term, e.wall_ms,
                                              NULL, st->record, err)
                 : sbl_err_set(err, SBL_E_InternalError, "a session id that cannot be encoded");
    }
    if (rc == 0) {
        st->out_ts = e.ts;
        st->out_term = e.term;
    }
    if (rc == 0 && kind != SBL_WRITE_INSERT && old_doc != NULL && wants_images(c))
        rc = sbl_repl_write_preimage(s, sbl_coll_uuid(c), e.ts, 0, e.wall_ms, old_doc, err);
    bson_destroy(&key);
    bson_destroy(&diff);
    bson_destroy(&v2);
    return rc;
}

/* Append e in a transaction of its own, or in s's open one when it has one. */
static int append_alone(sbl_session_t *s, sbl_oplog_entry_t *e, sbl_err_t *err)
{
    sbl_err_t e2;
    int rc;

    sbl_err_clear(&e2);
    if (sbl_txn_begin(s, &e2) != 0) /* inside the caller's: it commits */
        return sbl_oplog_append(s, e, err);
    for (int attempt = 0;; attempt++) {
        if ((rc = sbl_oplog_append(s, e, err)) == 0) {
            sbl_oplog_release(s);
            return sbl_txn_commit(s, err);
        }
        sbl_txn_abort(s);
        if (rc != SBL_E_WriteConflict || attempt >= 100)
            return rc;
        sbl_err_clear(err);
        SBL_RET(sbl_txn_begin(s, err));
    }
}

int sbl_repl_append_alone_raw(sbl_session_t *s, const bson_t *doc, sbl_err_t *err)
{
    int rc;
    SBL_RET(sbl_txn_begin(s, err));
    if ((rc = sbl_oplog_append_raw(s, doc, err)) == 0)
        return sbl_txn_commit(s, err);
    sbl_txn_abort(s);
    return rc;
}

void sbl_repl_clock_advance(uint64_t ts)
{
    sbl_ts_advance(&clock_floor, ts);
}

uint64_t sbl_repl_clock_now(void)
{
    uint64_t last = atomic_load(&last_ts), floor = atomic_load(&clock_floor);
    return last > floor ? last : floor;
}

int sbl_oplog_noop(sbl_session_t *s, const char *msg, sbl_err_t *err)
{
    bson_t o = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&o, "msg", msg);
    sbl_oplog_entry_t e = {.op = 'n', .ns = "", .o = &o};
    int rc = append_alone(s, &e, err);
    bson_destroy(&o);
    return rc;
}

/* ---- "c" entries ------------------------------------------------------------ */

/* Write a catalog change's "c" entry; 0 when written or not to be written
 * (a standalone, local.*, a secondary applying, an initial sync), else the
 * failure (logged): 11602 when this member stopped being primary. */
static int log_command(sbl_session_t *s, const char *ns, const uint8_t *uuid, const bson_t *o,
                       const bson_t *o2, sbl_err_t *err)
{
    char cmdns[SBL_NS_BUF];
    const char *dot = strchr(ns, '.');
    size_t dlen = dot != NULL ? (size_t)(dot - ns) : strlen(ns);

    sbl_err_clear(err);
    if (!atomic_load(&active) || (dlen == 5 && strncmp(ns, "local", 5) == 0))
        return 0;
    if ((sbl_repl_applying != NULL && sbl_repl_replaying) || sbl_repl_cloning)
        return 0; /* our own entry, already in the oplog; or an initial sync's clone */
    if (sbl_repl_applying != NULL) {
        /* Applying a primary's "c" entry: write that entry, once; catalog
         * changes made while applying another entry are not logged. */
        bson_iter_t it;
        if (!sbl_repl_applied_written && bson_iter_init_find(&it, sbl_repl_applying, "op") &&
            BSON_ITER_HOLDS_UTF8(&it) && bson_iter_utf8(&it, NULL)[0] == 'c')
            sbl_repl_append_alone_raw(s, sbl_repl_applying, err);
        return 0;
    }
    int rc;
    if (sbl_repl_enabled() && !sbl_repl_is_primary()) {
        rc = sbl_err_set(err, SBL_E_InterruptedDueToReplStateChange,
                         "operation was interrupted because a replica set state change "
                         "(stepdown) occurred");
    } else {
        snprintf(cmdns, sizeof(cmdns), "%.*s.$cmd", (int)dlen, ns);
        sbl_oplog_entry_t e = {.op = 'c', .ns = cmdns, .uuid = uuid, .o = o, .o2 = o2};
        rc = append_alone(s, &e, err);
    }
    if (rc != 0) {
        bson_t attr = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&attr, "ns", ns);
        BSON_APPEND_UTF8(&attr, "error", err->msg);
        sbl_log(SBL_LOG_ERROR, "REPL", 7360001, "Could not write the oplog entry of a catalog "
                "change", &attr);
        bson_destroy(&attr);
    }
    return rc;
}

/* The catalog changes whose callers go on whatever happened to the entry. */
static void log_command_done(sbl_session_t *s, const char *ns, const uint8_t *uuid,
                             const bson_t *o, const bson_t *o2)
{
    sbl_err_t err;
    log_command(s, ns, uuid, o, o2, &err);
}

static const char *coll_part(const char *ns)
{
    const char *dot = strchr(ns, '.');
    return dot != NULL ? dot + 1 : ns;
}

void sbl_repl_log_create(sbl_session_t *s, const char *ns)
{
    sbl_coll_t *c = NULL;
    sbl_err_t err;
    bson_iter_t it;

    if (!atomic_load(&active) || !replicated(ns))
        return;
    sbl_err_clear(&err);
    if (sbl_coll_open(s, ns, false, &c, NULL, &err) != 0)
        return;
    bson_t o = BSON_INITIALIZER, idx;
    BSON_APPEND_UTF8(&o, "create", coll_part(ns));
    if (bson_iter_init(&it, sbl_coll_options(c)))
        while (bson_iter_next(&it))
            sbl_append_iter(&o, bson_iter_key(&it), -1, &it);
    bool view = bson_has_field(sbl_coll_options(c), "viewOn");
    if (!view) {
        BSON_APPEND_DOCUMENT_BEGIN(&o, "idIndex", &idx);
        BSON_APPEND_INT32(&idx, "v", 2);
        bson_t key;
        BSON_APPEND_DOCUMENT_BEGIN(&idx, "key", &key);
        BSON_APPEND_INT32(&key, "_id", 1);
        bson_append_document_end(&idx, &key);
        BSON_APPEND_UTF8(&idx, "name", "_id_");
        bson_append_document_end(&o, &idx);
    }
    log_command_done(s, ns, view ? NULL : sbl_coll_uuid(c), &o, NULL); /* a view has none */
    bson_destroy(&o);
    sbl_coll_release(c);
}

void sbl_repl_log_drop(sbl_session_t *s, const char *ns, const uint8_t *uuid, int64_t nrecords)
{
    if (!atomic_load(&active) || !replicated(ns))
        return;
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&o, "drop", coll_part(ns));
    BSON_APPEND_INT64(&o2, "numRecords", nrecords);
    log_command_done(s, ns, uuid, &o, &o2);
    bson_destroy(&o);
    bson_destroy(&o2);
}

void sbl_repl_log_rename(sbl_session_t *s, const char *from, const char *to,
                         const uint8_t *uuid, const uint8_t *dropped)
{
    if (!atomic_load(&active) || (!replicated(from) && !replicated(to)))
        return;
    bson_t o = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&o, "renameCollection", from);
    BSON_APPEND_UTF8(&o, "to", to);
    BSON_APPEND_BOOL(&o, "stayTemp", false);
    if (dropped != NULL)
        BSON_APPEND_BINARY(&o, "dropTarget", BSON_SUBTYPE_UUID, dropped, 16);
    else
        BSON_APPEND_BOOL(&o, "dropTarget", false);
    log_command_done(s, from, uuid, &o, NULL);
    bson_destroy(&o);
}

bool sbl_repl_uuid_of(sbl_session_t *s, const char *ns, uint8_t out[16])
{
    sbl_coll_t *c = NULL;
    if (sbl_coll_open(s, ns, false, &c, NULL, NULL) != 0 || c == NULL)
        return false;
    memcpy(out, sbl_coll_uuid(c), 16);
    sbl_coll_release(c);
    return true;
}

void sbl_repl_log_drop_database(sbl_session_t *s, const char *db)
{
    char ns[SBL_NS_BUF];
    snprintf(ns, sizeof(ns), "%s.$cmd", db);
    bson_t o = BSON_INITIALIZER;
    BSON_APPEND_INT32(&o, "dropDatabase", 1);
    log_command_done(s, ns, NULL, &o, NULL);
    bson_destroy(&o);
}

int sbl_repl_log_create_index(sbl_session_t *s, const char *ns, const uint8_t *uuid,
                              const bson_t *spec, sbl_err_t *err)
{
    bson_iter_t it;
    if (!atomic_load(&active) || !replicated(ns))
        return 0;
    bson_t o = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&o, "createIndexes", coll_part(ns));
    if (bson_iter_init(&it, spec))
        while (bson_iter_next(&it))
            sbl_append_iter(&o, bson_iter_key(&it), -1, &it);
    int rc = log_command(s, ns, uuid, &o, NULL, err);
    bson_destroy(&o);
    return rc;
}

void sbl_repl_log_drop_index(sbl_session_t *s, const char *ns, const uint8_t *uuid,
                             const char *name, const bson_t *spec)
{
    if (!atomic_load(&active) || !replicated(ns))
        return;
    bson_t o = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&o, "dropIndexes", coll_part(ns));
    BSON_APPEND_UTF8(&o, "index", name);
    log_command_done(s, ns, uuid, &o, spec);
    bson_destroy(&o);
}

void sbl_repl_log_coll_mod(sbl_session_t *s, const char *ns, const uint8_t *uuid,
                           const bson_t *o, const bson_t *o2)
{
    if (!atomic_load(&active) || !replicated(ns))
        return;
    log_command_done(s, ns, uuid, o, o2);
}
