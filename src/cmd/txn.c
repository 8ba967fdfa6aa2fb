/*
 * txn.c: multi-document transactions on a replica set member (issue 26).
 * A transaction is the commands of one session with one txnNumber and
 * autocommit: false; the first carries startTransaction: true, the last is
 * commitTransaction or abortTransaction.  Its state lives here, keyed by
 * the session: a storage session of its own (sbl_session_open) holding one
 * WiredTiger snapshot transaction open across the commands, which may
 * arrive on different connections and run on any thread (the session is
 * checked out for each, so one runs at a time), and the operations its
 * writes collected for the oplog (src/repl: one applyOps entry at commit).
 *
 * States: none -> in progress (startTransaction) -> committed
 * (commitTransaction) or aborted (abortTransaction, an error in one of its
 * commands, a newer txnNumber, the lifetime limit, a killed session).  A
 * retried commitTransaction of a committed transaction succeeds again; any
 * command of an aborted one gets NoSuchTransaction.  A transaction of a
 * sharded cluster's two-phase commit (txn_coord.c) goes in progress ->
 * prepared (prepareTransaction: its prepare entry, and WiredTiger's prepare
 * at that entry's ts) -> committed (commitTransaction with the coordinator's
 * commitTimestamp) or aborted (abortTransaction); nothing else ends a
 * prepared transaction (not the lifetime limit, a newer txnNumber, a killed
 * session or a step-down).  Secondaries and a restart's replay hold the
 * same prepared transactions, made from the prepare entries
 * (sbl_cmd_mtxn_apply_prepared), so the member elected next can end them.
 *
 * What must stay true: a transaction's writes become visible together or
 * not at all (one WiredTiger commit, its applyOps entry inside it); every
 * failure inside a transaction aborts it (but WouldChangeOwningShard, which
 * wrote nothing: a router moves the document within the transaction); a
 * WriteConflict is answered with the TransientTransactionError label.
 */
#include "cmd/cmd_int.h"
#include "common/log.h"
#include "exec/exec.h"
#include "repl/repl.h"
#include "sessions/sessions.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum { TXN_IN_PROGRESS = 1, TXN_PREPARED, TXN_COMMITTED, TXN_ABORTED };

typedef struct sbl_mtxn {
    sbl_lsid_t lsid;
    int64_t txn_number;
    int state;
    bool busy;                /* a command runs in it (the reaper leaves it alone) */
    atomic_bool kill_asked;   /* killSessions while busy: a wait of that command ends */
    sbl_session_t *ss;        /* holds the WiredTiger transaction while in progress */
    sbl_repl_txn_ops_t *ops;  /* its writes, for the applyOps entry */
    char **created;           /* collections it created (hidden from others until commit) */
    size_t ncreated;
    bool published;           /* ... shown to all and logged: undoing one logs its drop */
    char **ix_ns;             /* indexes it created on them, logged at commit */
    bson_t **ix_specs;
    size_t nix;
    int64_t start_ms;
    uint64_t read_ts;         /* its atClusterTime (0: none) */
    bson_t *read_concern;     /* as currentOp shows it (parameters.readConcern), NULL: the
                               * implicit default {level: "local"} (built when shown) */
    int64_t active_us;        /* time its commands ran, in total */
    int64_t active_since_us;  /* when the running one began (busy) */
    sbl_session_kept_t rec;   /* the session's config.transactions record as last seen
                               * and whether it is current (cmd_int.h: the session catalog
                               * keeps it between commands, shared with retryable writes) */
    int64_t seen;             /* the session's newest txnNumber when this command began */
    uint64_t prepare_ts;      /* prepared: its prepareTimestamp (its prepare entry's ts) */
    int64_t prepare_term;     /* ... and that entry's term */
    bool wt_prepared;         /* ... and WiredTiger's transaction is prepared (it wrote) */
    struct sbl_mtxn *next;
} sbl_mtxn_t;

/* How long a rollback waits for the commands running in transactions to end. */
#define ROLLBACK_TXN_WAIT_MS 10000

static pthread_mutex_t txn_mu = PTHREAD_MUTEX_INITIALIZER;
static sbl_mtxn_t *txns; /* one per session that ever ran a transaction (until it ends) */
static atomic_llong n_started, n_committed, n_aborted, n_open;
static atomic_llong lifetime_limit_s = 60;

static bool same_lsid(const sbl_lsid_t *a, const sbl_lsid_t *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

static sbl_mtxn_t *find_locked(const sbl_lsid_t *l)
{
    for (sbl_mtxn_t *t = txns; t != NULL; t = t->next)
        if (same_lsid(&t->lsid, l))
            return t;
    return NULL;
}

/* Forget the collections and indexes t created; drop the collections
 * first when drop is set (the transaction did not commit). */
static void forget_created(sbl_mtxn_t *t, bool drop)
{
    for (size_t i = 0; i < t->ncreated; i++) {
        if (drop && t->ss != NULL) {
            sbl_err_t e;
            sbl_err_clear(&e);
            if (t->published) {
                sbl_coll_t *c = NULL;
                if (sbl_coll_open(t->ss, t->created[i], false, &c, NULL, &e) == 0) {
                    sbl_repl_log_drop(sbl_session_get(), t->created[i], sbl_coll_uuid(c), 0);
                    sbl_coll_release(c);
                }
            }
            sbl_coll_drop(t->ss, t->created[i], &e);
        }
        free(t->created[i]);
    }
    for (size_t i = 0; i < t->nix; i++) {
        free(t->ix_ns[i]);
        bson_destroy(t->ix_specs[i]);
    }
    free(t->created);
    free(t->ix_ns);
    free(t->ix_specs);
    t->created = t->ix_ns = NULL;
    t->ix_specs = NULL;
    t->ncreated = t->nix = 0;
    t->published = false;
}

/* Roll back and release the storage session (t checked out or locked);
 * a prepared transaction too (only its abortTransaction does that). */
static void rollback_txn(sbl_mtxn_t *t)
{
    sbl_cursors_kill_txn(t->lsid.id);
    if (t->ss != NULL)
        sbl_txn_abort_outer(t->ss); /* the storage session stays for the next transaction */
    forget_created(t, true);
    sbl_repl_txn_ops_free(t->ops);
    t->ops = NULL;
    t->state = TXN_ABORTED;
    t->wt_prepared = false;
    n_aborted++;
    n_open--;
}

/* Close the storage sessions ended transactions no command runs in keep for
 * their session's next, of those started age_ms ago or more (txn_mu held); how
 * many.  Else ~2000 sessions in the entries' 30 minutes hold all of session_max. */
static int release_kept_locked(int64_t now, int64_t age_ms)
{
    int n = 0;
    for (sbl_mtxn_t *t = txns; t != NULL; t = t->next)
        if (!t->busy && t->ss != NULL && (t->state == TXN_COMMITTED || t->state == TXN_ABORTED) &&
            now - t->start_ms >= age_ms) {
            sbl_session_close(t->ss);
            t->ss = NULL;
            n++;
        }
    return n;
}

/* A storage session for a transaction (txn_mu held); the kept go when none is left. */
static sbl_session_t *txn_session_open_locked(void)
{
    sbl_session_t *ss = sbl_session_open();
    return ss != NULL || release_kept_locked(0, INT64_MIN) == 0 ? ss : sbl_session_open();
}

/* Abort t when it is in progress (never a prepared one). */
static void abort_txn(sbl_mtxn_t *t)
{
    if (t->state == TXN_IN_PROGRESS)
        rollback_txn(t);
}

/* Commands a transaction may run (mongod 7.0's list, as far as Sable has them). */
static bool allowed_in_txn(const char *n)
{
    static const char *const ok[] = {"find", "getMore", "aggregate", "distinct", "insert",
                                     "update", "delete", "findAndModify", "findandmodify",
                                     "commitTransaction", "abortTransaction", "killCursors",
                                     "create", "createIndexes", "prepareTransaction", NULL};
    for (int i = 0; ok[i] != NULL; i++)
        if (ok[i][0] == n[0] && strcmp(ok[i], n) == 0) /* the first byte differs, as a rule */
            return true;
    return false;
}

static void add_label(sbl_opctx_t *ctx, const char *label)
{
    bson_t arr;
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "errorLabels", &arr);
    BSON_APPEND_UTF8(&arr, "0", label);
    bson_append_array_end(ctx->reply, &arr);
}

static int no_such_txn(sbl_opctx_t *ctx, sbl_err_t *err, int64_t txn, const char *why)
{
    add_label(ctx, "TransientTransactionError");
    return sbl_err_set(err, SBL_E_NoSuchTransaction, "Transaction with { txnNumber: %lld } %s",
                       (long long)txn, why);
}

/* The readConcern a transaction runs under, as mongod reports it: the
 * client's with provenance "clientSupplied", else the implicit default
 * {level: "local"}.  NULL when out of memory. */
static bson_t *txn_read_concern(const bson_t *cmd)
{
    bson_iter_t it;
    bson_t given;
    if (!sbl_doc_find_top(cmd, "readConcern", &it) || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !sbl_iter_doc(&it, &given))
        return NULL; /* the default: no copy made for every transaction */
    bson_t *rc = bson_new();
    bson_concat(rc, &given);
    if (!bson_has_field(rc, "provenance"))
        BSON_APPEND_UTF8(rc, "provenance", "clientSupplied");
    return rc;
}

int sbl_cmd_mtxn_begin(sbl_opctx_t *ctx, int64_t txn, sbl_err_t *err)
{
    const bson_iter_t *it_st = ctx->start_txn; /* found by the dispatcher; NULL: absent */
    bool start = false;
    sbl_lsid_t l;

    if (!allowed_in_txn(ctx->name))
        return sbl_err_set(err, SBL_E_OperationNotSupportedInTransaction,
                           "Cannot run '%s' in a multi-document transaction.", ctx->name);
    if (it_st != NULL) {
        if (!BSON_ITER_HOLDS_BOOL(it_st))
            return sbl_type_error(err, "OperationSessionInfo.startTransaction", it_st, "bool");
        if (!bson_iter_as_bool(it_st))
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "Specifying startTransaction=false is not allowed.");
        start = true;
    }
    /* Capped collections take no writes in a transaction (mongod's rule; here
     * their insert lock would be held from one command to the next). */
    if (strcmp(ctx->name, "insert") == 0 || strcmp(ctx->name, "update") == 0 ||
        strcmp(ctx->name, "delete") == 0 || strcasecmp(ctx->name, "findAndModify") == 0) {
        char ns[SBL_NS_MAX];
        sbl_coll_t *c = NULL;
        sbl_err_t e2 = {0};
        if (sbl_op_ns(ctx, ns, sizeof(ns), &e2) == 0 &&
            sbl_coll_open(ctx->ss, ns, false, &c, NULL, &e2) == 0) {
            bool capped = sbl_coll_capped(c, NULL, NULL);
            sbl_coll_release(c);
            if (capped)
                return sbl_err_set(err, SBL_E_OperationNotSupportedInTransaction,
                                   "Collection '%s' is a capped collection. Writes in "
                                   "transactions are not allowed on capped collections.", ns);
        }
    }
    memcpy(l.id, ctx->lsid_id, 16);
    memcpy(l.uid, ctx->user_uid, 32);
    sbl_lsess_state_t kept;
    int64_t seen = sbl_lsess_checkout_state(&l, ctx->client->uid_for, sbl_now_ms(), &kept);
    ctx->mtxn_checked_out = true;

    pthread_mutex_lock(&txn_mu);
    sbl_mtxn_t *t = find_locked(&l);
    if (t == NULL && (t = calloc(1, sizeof(*t))) != NULL) {
        t->lsid = l;
        t->txn_number = -1;
        t->next = txns;
        txns = t;
    }
    if (t == NULL) {
        pthread_mutex_unlock(&txn_mu);
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    }
    t->busy = true;
    t->seen = seen;
    atomic_store(&t->kill_asked, false);
    t->active_since_us = sbl_now_us();
    ctx->mtxn = t;
    /* past its lifetime: aborted now, whoever asks */
    if (t->state == TXN_IN_PROGRESS &&
        sbl_now_ms() - t->start_ms > atomic_load(&lifetime_limit_s) * 1000)
        abort_txn(t);
    pthread_mutex_unlock(&txn_mu);
    /* The session's record as its last command left it (checked out: t is
     * this thread's): trusted when the versioned epoch did not move since,
     * else checked, then read by its key alone while it still holds those
     * bytes; replaced so at the commit (as retryable.c). */
    uint64_t epoch = sbl_versioned_epoch(); /* before the record is read or trusted */
    bool trusted = sbl_session_kept_current(&kept, epoch) != NULL;
    if (kept.len == sizeof(t->rec))
        memcpy(&t->rec, kept.data, sizeof(t->rec));
    else
        t->rec.record.key_len = 0;
    t->rec.record.known_current = false;
    t->rec.epoch = epoch;
    t->rec.current = trusted;

    if (start) {
        bool found = trusted;
        if (!trusted) {
            SBL_RET(sbl_repl_txn_record_known(ctx->ss, l.id, l.uid, &t->rec.record,
                                              &t->rec.rec_txn, &t->rec.rec_ts, &t->rec.rec_term,
                                              &found, err));
            t->rec.current = found && t->rec.record.key_len > 0;
        }
        int64_t rec_txn = found ? t->rec.rec_txn : -1;
        int64_t newest = seen > rec_txn ? seen : rec_txn;
        if (t->txn_number > newest)
            newest = t->txn_number;
        if (t->state == TXN_PREPARED)
            return sbl_err_set(err, SBL_E_PreparedTransactionInProgress,
                               "Cannot start transaction %lld on session: transaction %lld is "
                               "prepared and waits for its coordinator's decision",
                               (long long)txn, (long long)t->txn_number);
        if (txn < newest)
            return sbl_err_set(err, SBL_E_TransactionTooOld,
                               "Cannot start transaction %lld on session because a newer "
                               "transaction %lld has already started", (long long)txn,
                               (long long)newest);
        if (txn == t->txn_number || (txn == newest && found && rec_txn == txn))
            return sbl_err_set(err, SBL_E_ConflictingOperationInProgress,
                               "Cannot start a transaction with txnNumber %lld: it was already "
                               "used on this session", (long long)txn);
        uint64_t at;
        SBL_RET(sbl_cmd_snapshot_txn_ts(ctx, &at, err)); /* readConcern's atClusterTime */
        abort_txn(t); /* an older one still open */
        if (t->ss == NULL) { /* kept from the session's last transaction when it had one */
            pthread_mutex_lock(&txn_mu);
            t->ss = txn_session_open_locked();
            pthread_mutex_unlock(&txn_mu);
            if (t->ss != NULL) /* what it creates stays its own until the commit */
                sbl_session_hide_creates(t->ss, true);
        }
        t->ops = sbl_repl_txn_ops_new();
        if (t->ss == NULL || t->ops == NULL || sbl_txn_begin_outer_at(t->ss, at, err) != 0) {
            sbl_session_close(t->ss);
            sbl_repl_txn_ops_free(t->ops);
            t->ss = NULL;
            t->ops = NULL;
            return err->code ? err->code
                             : sbl_err_set(err, SBL_E_InternalError, "cannot open a session");
        }
        bson_t *rc = txn_read_concern(ctx->cmd);
        pthread_mutex_lock(&txn_mu); /* currentOp reads these */
        t->txn_number = txn;
        t->state = TXN_IN_PROGRESS;
        t->start_ms = sbl_now_ms();
        t->read_ts = at;
        t->active_us = 0;
        if (t->read_concern != NULL)
            bson_destroy(t->read_concern);
        t->read_concern = rc;
        pthread_mutex_unlock(&txn_mu);
        n_started++;
        n_open++;
    } else if (txn < seen) { /* a newer retryable write ran on the session (which aborted it) */
        return sbl_err_set(err, SBL_E_TransactionTooOld, "Cannot continue transaction %lld on "
                           "session because a newer txnNumber %lld has already started",
                           (long long)txn, (long long)seen);
    } else if (txn != t->txn_number) {
        return no_such_txn(ctx, err, txn, "does not match any in-progress transactions");
    } else if (t->state == TXN_ABORTED) {
        return no_such_txn(ctx, err, txn, "has been aborted.");
    } else if (t->state == TXN_PREPARED && strcmp(ctx->name, "commitTransaction") != 0 &&
               strcmp(ctx->name, "abortTransaction") != 0 &&
               strcmp(ctx->name, "prepareTransaction") != 0) {
        return sbl_err_set(err, SBL_E_PreparedTransactionInProgress,
                           "Cannot call %s on a prepared transaction", ctx->name);
    } else if (t->state == TXN_COMMITTED) {
        if (strcmp(ctx->name, "commitTransaction") == 0)
            return 0; /* a retried commit: the same outcome */
        return sbl_err_set(err, SBL_E_TransactionCommitted,
                           "Transaction with { txnNumber: %lld } has been committed.",
                           (long long)txn);
    }
    /* Run the command inside the transaction. */
    ctx->ss = t->ss;
    sbl_repl_set_txn_ops(t->ops);
    return 0;
}

uint64_t sbl_cmd_txn_read_ts(const sbl_opctx_t *ctx)
{
    return ctx->mtxn != NULL ? ctx->mtxn->read_ts : 0;
}

void sbl_cmd_mtxn_end(sbl_opctx_t *ctx, int *rcp, sbl_err_t *err)
{
    sbl_mtxn_t *t = ctx->mtxn;
    sbl_lsid_t l;
    if (!ctx->mtxn_checked_out)
        return;
    sbl_repl_set_txn_ops(NULL);
    memcpy(l.id, ctx->lsid_id, 16);
    memcpy(l.uid, ctx->user_uid, 32);
    if (t != NULL) {
        pthread_mutex_lock(&txn_mu);
        if (t->state == TXN_IN_PROGRESS && t->ss != NULL && ctx->ss == t->ss &&
            strcmp(ctx->name, "commitTransaction") != 0 &&
            strcmp(ctx->name, "abortTransaction") != 0) {
            /* Any failure aborts the transaction; a write conflict (also one a
             * write reported as a writeError) is the whole command's error. */
            bson_iter_t it, we, f;
            bool failed = sbl_txn_outer_failed(t->ss);
            bool conflict = *rcp == SBL_E_WriteConflict;
            bool werr = false, wcos = *rcp == SBL_E_WouldChangeOwningShard;
            if (*rcp == 0 && sbl_doc_find_top(ctx->reply, "writeErrors", &it) &&
                bson_iter_recurse(&it, &we))
                while (bson_iter_next(&we) && bson_iter_recurse(&we, &f)) {
                    int64_t code = bson_iter_find(&f, "code") ? bson_iter_as_int64(&f) : 0;
                    conflict |= code == SBL_E_WriteConflict;
                    wcos |= code == SBL_E_WouldChangeOwningShard;
                    werr |= code != SBL_E_WouldChangeOwningShard;
                }
            if (failed && *rcp == 0 && !werr && !wcos)
                conflict = true; /* a failed write that reported nothing else */
            /* WouldChangeOwningShard keeps the transaction, as mongod's: the
             * router moves the document in it (nothing was written) */
            if ((*rcp != 0 && !(wcos && !failed)) || werr || conflict || failed)
                abort_txn(t);
            if (conflict) {
                if (*rcp == 0)
                    *rcp = sbl_err_set(err, SBL_E_WriteConflict,
                                       "Write conflict during plan execution and yielding is "
                                       "disabled. :: Please retry your operation or "
                                       "multi-document transaction.");
                add_label(ctx, "TransientTransactionError");
            }
        }
        t->busy = false;
        t->active_us += sbl_now_us() - t->active_since_us;
        pthread_mutex_unlock(&txn_mu);
    }
    sbl_lsess_state_t kept = {.len = 0};
    if (t != NULL && t->rec.record.key_len > 0) { /* trusted next while still current */
        kept.len = sizeof(t->rec);
        memcpy(kept.data, &t->rec, sizeof(t->rec));
        ((sbl_session_kept_t *)kept.data)->current =
            t->rec.current && sbl_versioned_epoch() == t->rec.epoch;
    }
    sbl_lsess_checkin_state(&l, t != NULL ? t->txn_number : -1, &kept);
    ctx->mtxn = NULL;
    ctx->mtxn_checked_out = false;
}

/* t committed (txn_mu held): its cursors and operations go. */
static void mark_committed(sbl_mtxn_t *t)
{
    sbl_cursors_kill_txn(t->lsid.id);
    sbl_repl_txn_ops_free(t->ops);
    t->ops = NULL;
    t->state = TXN_COMMITTED;
    t->wt_prepared = false;
    n_committed++;
    n_open--;
}

/*
 * Commit prepared transaction t at commit_ts (the coordinator's decision,
 * at least its prepareTimestamp): its commit entry ({commitTransaction: 1,
 * commitTimestamp}) and session record are written in a transaction of
 * this thread's session, which takes the next oplog ts (durable_ts) and
 * holds the oplog's lock while t's storage transaction commits (visible at
 * commit_ts, durable at durable_ts); then the entry's transaction commits.
 * A secondary commits its own prepared copy the same way (repl_prepare.c).
 */
static int commit_prepared(sbl_opctx_t *ctx, sbl_mtxn_t *t, uint64_t commit_ts, sbl_err_t *err)
{
    t->rec.current = false; /* its decision writes the record, not through t->rec */
    sbl_session_t *side = sbl_session_get();
    uint64_t durable_ts = 0;
    int rc;

    if (commit_ts < t->prepare_ts)
        return sbl_err_set(err, SBL_E_InvalidOptions, "commitTimestamp %u:%u is before the "
                           "transaction's prepareTimestamp %u:%u",
                           (unsigned)(commit_ts >> 32), (unsigned)commit_ts,
                           (unsigned)(t->prepare_ts >> 32), (unsigned)t->prepare_ts);
    sbl_repl_set_txn_ops(NULL);
    sbl_repl_clock_advance(commit_ts); /* the entry's ts comes after it */
    sbl_repl_stmt_t st = {.txn_number = t->txn_number, .prev_ts = t->prepare_ts,
                          .prev_term = t->prepare_term};
    memcpy(st.lsid_id, t->lsid.id, 16);
    memcpy(st.lsid_uid, t->lsid.uid, 32);
    pthread_mutex_lock(&txn_mu);
    if ((rc = sbl_txn_begin(side, err)) == 0) {
        rc = sbl_repl_txn_log_decision(side, &st, true, commit_ts, &durable_ts, err);
        if (rc == 0) /* the entry's term still led here, or neither commits */
            rc = sbl_txn_gate_enter(side, err);
        if (rc == 0 && t->wt_prepared)
            rc = sbl_txn_commit_prepared_outer(t->ss, commit_ts,
                                               durable_ts > commit_ts ? durable_ts : commit_ts,
                                               err);
        else if (rc == 0)
            rc = sbl_txn_commit_outer(t->ss, err);
        if (rc == 0)
            rc = sbl_txn_commit(side, err);
        else
            sbl_txn_abort(side);
    }
    if (rc != 0) { /* the decision was commit: the coordinator sends it again */
        pthread_mutex_unlock(&txn_mu);
        return rc;
    }
    sbl_repl_prepared_unpin(t->prepare_ts, durable_ts);
    mark_committed(t);
    pthread_mutex_unlock(&txn_mu);
    ctx->ss = side;
    ctx->wrote = true;
    return 0;
}

int sbl_cmd_commit_transaction(sbl_opctx_t *ctx, sbl_err_t *err)
{
    sbl_mtxn_t *t = ctx->mtxn;
    uint64_t ts = 0;
    int rc;

    if (t == NULL)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "commitTransaction must be run within a transaction");
    if (t->state == TXN_COMMITTED)
        return 0;
    bson_iter_t it;
    bool has_cts = sbl_doc_find_top(ctx->cmd, "commitTimestamp", &it);
    if (has_cts && !BSON_ITER_HOLDS_TIMESTAMP(&it))
        return sbl_type_error(err, "CommitTransaction.commitTimestamp", &it, "timestamp");
    if (t->state == TXN_PREPARED) {
        uint32_t secs = 0, inc = 0;
        if (!has_cts)
            return sbl_err_set(err, SBL_E_InvalidOptions, "commitTimestamp must be provided "
                               "when committing a prepared transaction");
        bson_iter_timestamp(&it, &secs, &inc);
        return commit_prepared(ctx, t, ((uint64_t)secs << 32) | inc, err);
    }
    if (has_cts)
        return sbl_err_set(err, SBL_E_InvalidOptions, "commitTimestamp cannot be provided for "
                           "an unprepared transaction");
    sbl_repl_set_txn_ops(NULL);
    sbl_repl_stmt_t st = {.txn_number = t->txn_number, .record = &t->rec.record};
    memcpy(st.lsid_id, t->lsid.id, 16);
    memcpy(st.lsid_uid, t->lsid.uid, 32);
    /* t is checked out (busy): no other thread changes it, so the commit
     * itself runs without txn_mu (one lock for every session's
     * transactions); only the state changes currentOp reads take it. */
    if (sbl_txn_outer_failed(t->ss)) {
        pthread_mutex_lock(&txn_mu);
        rc = sbl_err_set(err, SBL_E_WriteConflict, "WriteConflict: the transaction was aborted");
        add_label(ctx, "TransientTransactionError");
        abort_txn(t);
        pthread_mutex_unlock(&txn_mu);
        return rc;
    }
    /* Collections and indexes it created: shown to all and logged before
     * the applyOps entry that writes into them (a secondary creates them
     * first); a commit that fails then drops them again. */
    if (t->ncreated > 0) {
        sbl_coll_publish_created(t->ss);
        t->published = true;
        for (size_t i = 0; i < t->ncreated; i++)
            sbl_repl_log_create(sbl_session_get(), t->created[i]);
        for (size_t i = 0; i < t->nix; i++) {
            sbl_coll_t *c = NULL;
            sbl_err_t e;
            sbl_err_clear(&e);
            if (sbl_coll_open(t->ss, t->ix_ns[i], false, &c, NULL, &e) == 0) {
                /* a failure (a step-down) fails the applyOps entry too */
                sbl_repl_log_create_index(sbl_session_get(), t->ix_ns[i], sbl_coll_uuid(c),
                                          t->ix_specs[i], &e);
                sbl_coll_release(c);
            }
        }
    }
    /* Nothing but the sessions' own commands wrote config.transactions since
     * the record was read at the start (the epoch did not move), and no newer
     * txnNumber ran on this session since: the version read then is current,
     * replaced by its key without a search (as retryable.c's). */
    bool was_current = t->rec.current;
    t->rec.record.known_current = t->rec.current && t->seen <= t->txn_number &&
                                  sbl_versioned_epoch() == t->rec.epoch;
    t->rec.current = false; /* until the commit says what the record holds */
    sbl_session_hide_creates(t->ss, false); /* config.transactions is everyone's */
    rc = sbl_repl_txn_commit(t->ss, t->ops, &st, &ts, err);
    if (rc == 0)
        rc = sbl_txn_commit_outer(t->ss, err);
    else
        sbl_txn_outer_fail(t->ss);
    sbl_session_hide_creates(t->ss, true);
    if (rc == 0)
        forget_created(t, false);
    if (rc != 0) {
        if (rc == SBL_E_WriteConflict)
            add_label(ctx, "TransientTransactionError");
        pthread_mutex_lock(&txn_mu);
        abort_txn(t);
        pthread_mutex_unlock(&txn_mu);
        return rc;
    }
    pthread_mutex_lock(&txn_mu);
    mark_committed(t);
    pthread_mutex_unlock(&txn_mu);
    t->rec.current = st.out_ts != 0 ? t->rec.record.key_len > 0 : was_current;
    if (st.out_ts != 0) { /* the record it wrote, committed with it */
        t->rec.rec_txn = t->txn_number;
        t->rec.rec_ts = st.out_ts;
        t->rec.rec_term = st.out_term;
    }
    ctx->ss = sbl_session_get();
    if (ts != 0)
        ctx->wrote = true;
    return 0;
}

int sbl_cmd_abort_transaction(sbl_opctx_t *ctx, sbl_err_t *err)
{
    sbl_mtxn_t *t = ctx->mtxn;
    if (t == NULL)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "abortTransaction must be run within a transaction");
    t->rec.current = false; /* a prepared one's decision writes the record */
    int rc = 0;
    pthread_mutex_lock(&txn_mu);
    if (t->state == TXN_PREPARED) { /* the oplog says it ended, then it ends */
        sbl_session_t *side = sbl_session_get();
        sbl_repl_stmt_t st = {.txn_number = t->txn_number, .prev_ts = t->prepare_ts,
                              .prev_term = t->prepare_term};
        uint64_t end_ts = 0;
        memcpy(st.lsid_id, t->lsid.id, 16);
        memcpy(st.lsid_uid, t->lsid.uid, 32);
        if ((rc = sbl_txn_begin(side, err)) == 0) {
            if ((rc = sbl_repl_txn_log_decision(side, &st, false, 0, &end_ts, err)) == 0)
                rc = sbl_txn_commit(side, err);
            else
                sbl_txn_abort(side);
        }
        if (rc == 0) {
            sbl_repl_prepared_unpin(t->prepare_ts, end_ts);
            ctx->wrote = true;
        }
    }
    if (rc == 0 && (t->state == TXN_IN_PROGRESS || t->state == TXN_PREPARED))
        rollback_txn(t);
    pthread_mutex_unlock(&txn_mu);
    ctx->ss = sbl_session_get();
    return rc;
}

int sbl_cmd_prepare_transaction(sbl_opctx_t *ctx, sbl_err_t *err)
{
    sbl_mtxn_t *t = ctx->mtxn;
    sbl_session_t *side = sbl_session_get();
    uint64_t ts = 0;
    int rc = 0;

    if (t == NULL)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "prepareTransaction must be run within a transaction");
    t->rec.current = false; /* its entry writes the record, not through t->rec */
    sbl_repl_set_txn_ops(NULL);
    pthread_mutex_lock(&txn_mu);
    if (t->state == TXN_PREPARED) { /* a retried prepare: the same answer */
        ts = t->prepare_ts;
    } else if (t->ncreated > 0) {
        rc = sbl_err_set(err, SBL_E_OperationNotSupportedInTransaction,
                         "Cannot create new collections inside distributed transactions");
    } else if (sbl_txn_outer_failed(t->ss)) {
        rc = sbl_err_set(err, SBL_E_WriteConflict, "WriteConflict: the transaction was aborted");
        add_label(ctx, "TransientTransactionError");
    } else if ((rc = sbl_txn_begin(side, err)) == 0) {
        /* The prepare entry takes the oplog's next ts, which is the
         * prepareTimestamp: the transaction is prepared at it before the
         * entry commits (a transaction that only read has nothing to
         * prepare in storage, but its entry says it is prepared). */
        bool wrote = sbl_repl_txn_ops_count(t->ops) > 0;
        sbl_repl_stmt_t st = {.txn_number = t->txn_number};
        int64_t term = 0;
        memcpy(st.lsid_id, t->lsid.id, 16);
        memcpy(st.lsid_uid, t->lsid.uid, 32);
        rc = sbl_repl_txn_log_prepare(side, t->ops, &st, &ts, &term, err);
        if (rc == 0) /* not prepared in storage unless the entry commits too */
            rc = sbl_txn_gate_enter(side, err);
        if (rc == 0 && wrote)
            rc = sbl_txn_prepare_outer(t->ss, ts, err);
        if (rc == 0)
            rc = sbl_txn_commit(side, err);
        else
            sbl_txn_abort(side);
        if (rc != 0 && ts != 0)
            sbl_repl_prepared_unpin(ts, 0);
        if (rc == 0) {
            t->state = TXN_PREPARED;
            t->prepare_ts = ts;
            t->prepare_term = term;
            t->wt_prepared = wrote;
            ctx->wrote = true;
        }
    }
    if (rc != 0)
        abort_txn(t);
    pthread_mutex_unlock(&txn_mu);
    if (rc == 0)
        bson_append_timestamp(ctx->reply, "prepareTimestamp", -1, (uint32_t)(ts >> 32),
                              (uint32_t)ts);
    ctx->ss = sbl_session_get();
    return rc;
}

/* ---- prepared transactions applied from the oplog ----------------------- */

/* The session and txnNumber an entry names: false when it lacks them. */
static bool entry_session(const bson_t *e, sbl_lsid_t *l, int64_t *txnp)
{
    bson_iter_t it, f;
    bool id = false;
    memset(l, 0, sizeof(*l));
    if (!bson_iter_init_find(&it, e, "txnNumber") || !BSON_ITER_HOLDS_NUMBER(&it))
        return false;
    *txnp = bson_iter_as_int64(&it);
    if (!bson_iter_init_find(&it, e, "lsid") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &f))
        return false;
    while (bson_iter_next(&f)) {
        const uint8_t *d;
        uint32_t len;
        bson_subtype_t st;
        if (!BSON_ITER_HOLDS_BINARY(&f))
            continue;
        bson_iter_binary(&f, &st, &len, &d);
        if (strcmp(bson_iter_key(&f), "id") == 0 && len == 16) {
            memcpy(l->id, d, 16);
            id = true;
        } else if (strcmp(bson_iter_key(&f), "uid") == 0 && len == 32) {
            memcpy(l->uid, d, 32);
        }
    }
    return id;
}

/* One operation of a prepare entry's applyOps, in ss's open transaction:
 * an insert or update ('u' carries the whole post-image) as an upserting
 * replacement by _id, a delete by _id. */
static int apply_prepared_op(sbl_session_t *ss, const bson_t *op, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t o, old;
    const char *kind = sbl_doc_utf8(op, "op"), *ns = sbl_doc_utf8(op, "ns");
    if (kind == NULL || ns == NULL || !bson_iter_init_find(&it, op, "o") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !sbl_iter_doc(&it, &o) ||
        !bson_iter_init_find(&it, &o, "_id"))
        return sbl_err_set(err, SBL_E_InvalidBSON, "a prepared transaction's operation "
                           "without op, ns or o._id");
    if (kind[0] != 'i' && kind[0] != 'u' && kind[0] != 'd')
        return sbl_err_set(err, SBL_E_InvalidBSON, "a prepared transaction's operation "
                           "'%s' is not an insert, update or delete", kind);
    sbl_coll_t *c = NULL;
    bool found = false;
    SBL_RET(sbl_coll_open(ss, ns, false, &c, NULL, err));
    int rc = sbl_coll_get(ss, c, bson_iter_value(&it), &old, &found, err);
    if (rc == 0 && kind[0] == 'd')
        rc = found ? sbl_write(ss, c, SBL_WRITE_DELETE, &old, NULL, NULL, err) : 0;
    else if (rc == 0)
        rc = sbl_write(ss, c, found ? SBL_WRITE_UPDATE : SBL_WRITE_INSERT, found ? &old : NULL,
                       &o, NULL, err);
    if (found)
        bson_destroy(&old);
    sbl_coll_release(c);
    return rc;
}

/* Prepare entry e's transaction at prepare_ts (txn_mu held). */
static int apply_prepare_locked(const bson_t *e, uint64_t prepare_ts, sbl_err_t *err)
{
    sbl_lsid_t l;
    int64_t txn;
    bson_iter_t it, ops;
    bson_t op;
    if (!entry_session(e, &l, &txn) || !bson_iter_init(&it, e) ||
        !bson_iter_find_descendant(&it, "o.applyOps", &ops) || !BSON_ITER_HOLDS_ARRAY(&ops) ||
        !bson_iter_recurse(&ops, &ops))
        return sbl_err_set(err, SBL_E_InvalidBSON, "a prepare entry without lsid, txnNumber "
                           "or applyOps");
    sbl_mtxn_t *t = find_locked(&l);
    if (t != NULL && t->state == TXN_PREPARED && t->txn_number == txn)
        return 0; /* prepared already (a replay of an entry applied before) */
    if (t == NULL && (t = calloc(1, sizeof(*t))) != NULL) {
        t->lsid = l;
        t->next = txns;
        txns = t;
    }
    if (t == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    if (t->busy) /* a command of the session still runs (this member was primary) */
        return sbl_err_set(err, SBL_E_WriteConflict, "the session's transaction is busy");
    abort_txn(t);
    if (t->ss == NULL && (t->ss = txn_session_open_locked()) == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "cannot open a session");
    SBL_RET(sbl_txn_begin_outer(t->ss, err));
    int rc = 0;
    size_t n = 0;
    sbl_repl_set_unlogged_writes(true);
    while (rc == 0 && bson_iter_next(&ops))
        if (BSON_ITER_HOLDS_DOCUMENT(&ops) && sbl_iter_doc(&ops, &op) && ++n)
            rc = apply_prepared_op(t->ss, &op, err);
    sbl_repl_set_unlogged_writes(false);
    if (rc == 0 && n > 0)
        rc = sbl_txn_prepare_outer(t->ss, prepare_ts, err);
    if (rc != 0) {
        sbl_txn_abort_outer(t->ss);
        return rc;
    }
    t->txn_number = txn;
    t->state = TXN_PREPARED;
    t->prepare_ts = prepare_ts;
    t->prepare_term = bson_iter_init_find(&it, e, "t") ? bson_iter_as_int64(&it) : 0;
    t->wt_prepared = n > 0;
    t->start_ms = sbl_now_ms();
    t->read_ts = 0;
    n_open++;
    return 0;
}

/* The prepared transaction commit or abort entry e ends (txn_mu held):
 * prepared again from its prepare entry when this member does not hold it
 * (its prepare was applied before a restart and is not replayed). */
static sbl_mtxn_t *prepared_of_locked(const bson_t *e, sbl_err_t *err)
{
    sbl_lsid_t l;
    int64_t txn;
    if (!entry_session(e, &l, &txn)) {
        sbl_err_set(err, SBL_E_InvalidBSON, "a commit or abort entry without lsid or txnNumber");
        return NULL;
    }
    sbl_mtxn_t *t = find_locked(&l);
    if (t != NULL && t->state == TXN_PREPARED && t->txn_number == txn)
        return t;
    bson_t prep;
    bool found = false;
    if (sbl_repl_prepare_entry_of(sbl_session_get(), e, &prep, &found, err) != 0)
        return NULL;
    if (!found) {
        sbl_err_set(err, SBL_E_NoSuchTransaction, "the prepare entry of transaction %lld is "
                    "not in the oplog", (long long)txn);
        return NULL;
    }
    bson_iter_t it;
    uint32_t ts = 0, inc = 0;
    if (bson_iter_init_find(&it, &prep, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it))
        bson_iter_timestamp(&it, &ts, &inc);
    int rc = apply_prepare_locked(&prep, ((uint64_t)ts << 32) | inc, err);
    bson_destroy(&prep);
    return rc == 0 ? find_locked(&l) : NULL;
}

int sbl_cmd_mtxn_apply_prepared(const bson_t *e, int kind, uint64_t ts, uint64_t durable_ts,
                                uint64_t *prepare_tsp, sbl_err_t *err)
{
    int rc = 0;
    *prepare_tsp = 0;
    pthread_mutex_lock(&txn_mu);
    if (kind == SBL_PREP_PREPARE) {
        rc = apply_prepare_locked(e, ts, err);
        *prepare_tsp = ts;
    } else {
        sbl_mtxn_t *t = prepared_of_locked(e, err);
        if (t == NULL) {
            rc = err->code ? err->code : SBL_E_NoSuchTransaction;
        } else if (t->busy) { /* a command of this member's own (it was primary) */
            rc = sbl_err_set(err, SBL_E_WriteConflict, "the prepared transaction is busy");
        } else if (kind == SBL_PREP_ABORT) {
            *prepare_tsp = t->prepare_ts;
            rollback_txn(t);
        } else if (ts < t->prepare_ts) {
            rc = sbl_err_set(err, SBL_E_InvalidOptions, "commitTimestamp is before the "
                             "transaction's prepareTimestamp");
        } else {
            *prepare_tsp = t->prepare_ts;
            rc = t->wt_prepared
                     ? sbl_txn_commit_prepared_outer(t->ss, ts, durable_ts > ts ? durable_ts : ts,
                                                     err)
                     : sbl_txn_commit_outer(t->ss, err);
            if (rc == 0)
                mark_committed(t);
        }
    }
    pthread_mutex_unlock(&txn_mu);
    return rc;
}

static char **push_ns(char ***listp, size_t n, const char *ns)
{
    char **l = realloc(*listp, (n + 1) * sizeof(*l));
    if (l == NULL)
        return NULL;
    *listp = l;
    return (l[n] = strdup(ns)) != NULL ? l : NULL;
}

void sbl_cmd_mtxn_note_created(sbl_opctx_t *ctx, const char *ns)
{
    sbl_mtxn_t *t = ctx->mtxn;
    if (t != NULL && push_ns(&t->created, t->ncreated, ns) != NULL)
        t->ncreated++;
}

void sbl_cmd_mtxn_note_index(sbl_opctx_t *ctx, const char *ns, const bson_t *spec)
{
    sbl_mtxn_t *t = ctx->mtxn;
    bson_t **l;
    if (t == NULL || (l = realloc(t->ix_specs, (t->nix + 1) * sizeof(*l))) == NULL)
        return;
    t->ix_specs = l;
    if (push_ns(&t->ix_ns, t->nix, ns) == NULL)
        return;
    t->ix_specs[t->nix++] = bson_copy(spec);
}

/* Append t's transaction as currentOp shows it (txn_mu held). */
static void append_txn_locked(const sbl_mtxn_t *t, bson_t *d, int64_t now_ms)
{
    bson_t tx, par;
    BSON_APPEND_DOCUMENT_BEGIN(d, "transaction", &tx);
    BSON_APPEND_DOCUMENT_BEGIN(&tx, "parameters", &par);
    BSON_APPEND_INT64(&par, "txnNumber", t->txn_number);
    BSON_APPEND_BOOL(&par, "autocommit", false);
    if (t->read_concern != NULL) {
        BSON_APPEND_DOCUMENT(&par, "readConcern", t->read_concern);
    } else {
        bson_t rc;
        BSON_APPEND_DOCUMENT_BEGIN(&par, "readConcern", &rc);
        BSON_APPEND_UTF8(&rc, "level", "local");
        BSON_APPEND_UTF8(&rc, "provenance", "implicitDefault");
        bson_append_document_end(&par, &rc);
    }
    bson_append_document_end(&tx, &par);
    bson_append_timestamp(&tx, "readTimestamp", -1, (uint32_t)(t->read_ts >> 32),
                          (uint32_t)t->read_ts);
    BSON_APPEND_DATE_TIME(&tx, "startWallClockTime", t->start_ms);
    int64_t open_us = (now_ms - t->start_ms) * 1000;
    int64_t active_us = t->active_us + (t->busy ? sbl_now_us() - t->active_since_us : 0);
    if (open_us < active_us) /* open is counted in ms, active in us: never less */
        open_us = active_us;
    BSON_APPEND_INT64(&tx, "timeOpenMicros", open_us);
    BSON_APPEND_INT64(&tx, "timeActiveMicros", active_us);
    BSON_APPEND_INT64(&tx, "timeInactiveMicros", open_us > active_us ? open_us - active_us : 0);
    BSON_APPEND_DATE_TIME(&tx, "expiryTime",
                          t->start_ms + atomic_load(&lifetime_limit_s) * 1000);
    bson_append_document_end(d, &tx);
}

size_t sbl_cmd_mtxn_idle(bson_t ***docsp)
{
    bson_t **docs = NULL;
    size_t n = 0, cap = 0;
    int64_t now_ms = sbl_now_ms();
    pthread_mutex_lock(&txn_mu);
    for (sbl_mtxn_t *t = txns; t != NULL; t = t->next) {
        if (t->state != TXN_IN_PROGRESS || t->busy)
            continue;
        if (n == cap) {
            bson_t **l = realloc(docs, (cap = cap ? 2 * cap : 8) * sizeof(*l));
            if (l == NULL)
                break;
            docs = l;
        }
        bson_t *d = bson_new();
        sbl_lsid_append(d, "lsid", &t->lsid);
        append_txn_locked(t, d, now_ms);
        docs[n++] = d;
    }
    pthread_mutex_unlock(&txn_mu);
    *docsp = docs;
    return n;
}

int64_t sbl_cmd_mtxn_number(const sbl_opctx_t *ctx)
{
    /* no lock: only the command that has the session checked out (ctx's,
     * on this thread) changes txn_number */
    return ctx->mtxn != NULL ? ctx->mtxn->txn_number : -1;
}

bool sbl_cmd_mtxn_kill_asked(const sbl_opctx_t *ctx)
{
    return ctx->mtxn != NULL && atomic_load(&ctx->mtxn->kill_asked);
}

int64_t sbl_cmd_mtxn_expiry_us(const sbl_opctx_t *ctx)
{
    if (ctx->mtxn == NULL)
        return 0;
    /* start_ms changes only under the checkout ctx holds */
    int64_t left_ms = ctx->mtxn->start_ms + atomic_load(&lifetime_limit_s) * 1000 - sbl_now_ms();
    return sbl_now_us() + left_ms * 1000;
}

bool sbl_cmd_mtxn_describe(const sbl_lsid_t *l, int64_t txn_number, bson_t *d)
{
    bool found = false;
    pthread_mutex_lock(&txn_mu);
    const sbl_mtxn_t *t = find_locked(l);
    if (t != NULL && t->state == TXN_IN_PROGRESS && t->txn_number == txn_number) {
        append_txn_locked(t, d, sbl_now_ms());
        found = true;
    }
    pthread_mutex_unlock(&txn_mu);
    return found;
}

void sbl_cmd_mtxn_counts(int64_t *started, int64_t *committed, int64_t *aborted, int64_t *open)
{
    *started = atomic_load(&n_started);
    *committed = atomic_load(&n_committed);
    *aborted = atomic_load(&n_aborted);
    *open = atomic_load(&n_open);
}

int sbl_cmd_mtxn_newer_number(const sbl_lsid_t *l, int64_t txn, sbl_err_t *err)
{
    int rc = 0;
    if (atomic_load(&n_open) == 0) /* no transaction open anywhere: the common case */
        return 0;
    pthread_mutex_lock(&txn_mu);
    sbl_mtxn_t *t = find_locked(l);
    if (t != NULL && t->txn_number < txn && t->state == TXN_PREPARED)
        rc = sbl_err_set(err, SBL_E_PreparedTransactionInProgress, "Cannot start a new "
                         "txnNumber %lld on session: transaction %lld is prepared",
                         (long long)txn, (long long)t->txn_number);
    else if (t != NULL && t->txn_number < txn)
        abort_txn(t);
    pthread_mutex_unlock(&txn_mu);
    return rc;
}

void sbl_cmd_mtxn_kill_session(const uint8_t id[16])
{
    pthread_mutex_lock(&txn_mu);
    for (sbl_mtxn_t *t = txns; t != NULL; t = t->next)
        if (memcmp(t->lsid.id, id, 16) == 0) {
            if (!t->busy)
                abort_txn(t);
            else /* its command stops waiting on a prepared transaction; its error aborts it */
                atomic_store(&t->kill_asked, true);
        }
    pthread_mutex_unlock(&txn_mu);
}

/* Abort the transactions no command runs in (a rollback: the prepared ones
 * too); returns how many a command still runs in, each asked to stop its
 * waits (rollback). */
static int abort_idle(bool rollback)
{
    int busy = 0;
    pthread_mutex_lock(&txn_mu);
    for (sbl_mtxn_t *t = txns; t != NULL; t = t->next) {
        if (t->busy) {
            if (rollback)
                atomic_store(&t->kill_asked, true);
            busy++;
        } else if (rollback && t->state == TXN_PREPARED) {
            rollback_txn(t);
        } else {
            abort_txn(t); /* a prepared one stays: its outcome will come through the oplog */
        }
    }
    pthread_mutex_unlock(&txn_mu);
    return busy;
}

void sbl_cmd_mtxn_abort_all(bool rollback)
{
    int64_t until_us = sbl_now_us() + ROLLBACK_TXN_WAIT_MS * 1000;
    int busy;
    while ((busy = abort_idle(rollback)) > 0 && rollback && sbl_now_us() < until_us) {
        struct timespec t = {0, 5 * 1000000L};
        nanosleep(&t, NULL);
    }
    if (busy > 0 && rollback) {
        bson_t attr = BSON_INITIALIZER;
        BSON_APPEND_INT32(&attr, "transactions", busy);
        sbl_log(SBL_LOG_WARNING, "ROLLBACK", 7360401, "Transactions still running a command "
                "at the rollback; rolling back anyway", &attr);
        bson_destroy(&attr);
    }
}

int sbl_cmd_mtxn_end_writers(const char *ns)
{
    int left = 0;
    pthread_mutex_lock(&txn_mu);
    for (sbl_mtxn_t *t = txns; t != NULL; t = t->next) {
        if (t->state != TXN_IN_PROGRESS && t->state != TXN_PREPARED)
            continue;
        if (t->busy) { /* its writes are being made: wait for the command */
            left++;
            continue;
        }
        /* a prepared transaction replayed from the oplog keeps no ops */
        bool wrote = t->ops != NULL ? sbl_repl_txn_ops_touch(t->ops, ns) : t->wt_prepared;
        if (!wrote)
            continue;
        if (t->state == TXN_PREPARED)
            left++;
        else
            abort_txn(t);
    }
    pthread_mutex_unlock(&txn_mu);
    return left;
}

void sbl_cmd_mtxn_reap(void)
{
    int64_t now = sbl_now_ms();
    pthread_mutex_lock(&txn_mu);
    release_kept_locked(now, 60 * 1000); /* a session idle 60 s opens another */
    for (sbl_mtxn_t **pp = &txns; *pp != NULL;) {
        sbl_mtxn_t *t = *pp;
        if (!t->busy && t->state == TXN_IN_PROGRESS &&
            now - t->start_ms > atomic_load(&lifetime_limit_s) * 1000)
            abort_txn(t);
        if (!t->busy && t->state != TXN_IN_PROGRESS && t->state != TXN_PREPARED &&
            now - t->start_ms > 30 * 60 * 1000) {
            *pp = t->next; /* forget finished transactions of idle sessions */
            sbl_session_close(t->ss);
            if (t->read_concern != NULL)
                bson_destroy(t->read_concern);
            free(t);
            continue;
        }
        pp = &t->next;
    }
    pthread_mutex_unlock(&txn_mu);
}

static atomic_llong lock_timeout_ms = 5;
static atomic_llong snapshot_window_s = 300;
static atomic_llong key_rotation_s = 90LL * 24 * 3600;

int sbl_cmd_mtxn_set_parameter(const char *k, const bson_iter_t *it, bson_t *reply,
                               sbl_err_t *err)
{
    atomic_llong *v;
    long long min;
    if (strcmp(k, "transactionLifetimeLimitSeconds") == 0) {
        v = &lifetime_limit_s;
        min = 1;
    } else if (strcmp(k, "maxTransactionLockRequestTimeoutMillis") == 0) {
        v = &lock_timeout_ms; /* accepted and reported: conflicts never wait for locks */
        min = INT32_MIN;
    } else if (strcmp(k, "minSnapshotHistoryWindowInSeconds") == 0) {
        v = &snapshot_window_s; /* kept by repl (the oldest timestamp trails stable by it) */
        min = 0;
    } else if (strcmp(k, "keyRotationIntervalSecs") == 0) {
        v = &key_rotation_s; /* kept by repl: the life of new $clusterTime keys */
        min = 1;
    } else {
        return -1;
    }
    const char *s = BSON_ITER_HOLDS_UTF8(it) ? bson_iter_utf8(it, NULL) : NULL;
    char *end = NULL;
    long long n = s != NULL ? strtoll(s, &end, 10) : bson_iter_as_int64(it);
    if ((s != NULL && (end == s || *end != '\0')) || (s == NULL && !BSON_ITER_HOLDS_NUMBER(it)) ||
        n < min)
        return sbl_err_set(err, SBL_E_BadValue, "Invalid value for %s", k);
    if (reply != NULL)
        BSON_APPEND_INT64(reply, "was", atomic_load(v));
    atomic_store(v, n);
    if (v == &snapshot_window_s)
        sbl_repl_set_snapshot_window_s(n);
    if (v == &key_rotation_s)
        sbl_repl_set_key_rotation_s(n);
    return 0;
}

int64_t sbl_cmd_mtxn_lifetime_s(void)
{
    return atomic_load(&lifetime_limit_s);
}

void sbl_cmd_mtxn_append_parameter(const char *k, bson_t *reply)
{
    if (strcmp(k, "transactionLifetimeLimitSeconds") == 0)
        BSON_APPEND_INT32(reply, k, (int32_t)atomic_load(&lifetime_limit_s));
    else if (strcmp(k, "maxTransactionLockRequestTimeoutMillis") == 0)
        BSON_APPEND_INT32(reply, k, (int32_t)atomic_load(&lock_timeout_ms));
    else if (strcmp(k, "minSnapshotHistoryWindowInSeconds") == 0)
        BSON_APPEND_INT32(reply, k, (int32_t)sbl_repl_snapshot_window_s());
    else if (strcmp(k, "keyRotationIntervalSecs") == 0)
        BSON_APPEND_INT64(reply, k, atomic_load(&key_rotation_s));
}

void sbl_cmd_mtxn_append_status(bson_t *d)
{
    BSON_APPEND_INT64(d, "currentActive", 0);
    BSON_APPEND_INT64(d, "currentInactive", atomic_load(&n_open));
    BSON_APPEND_INT64(d, "currentOpen", atomic_load(&n_open));
    BSON_APPEND_INT64(d, "totalAborted", atomic_load(&n_aborted));
    BSON_APPEND_INT64(d, "totalCommitted", atomic_load(&n_committed));
    BSON_APPEND_INT64(d, "totalStarted", atomic_load(&n_started));
}
