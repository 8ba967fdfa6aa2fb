/*
 * repl_prepare.c: prepared transactions (two-phase commit's participants)
 * in the oplog, as mongod writes and applies them:
 *
 *   prepare:  {lsid, txnNumber, op: "c", ns: "admin.$cmd",
 *              o: {applyOps: [...], prepare: true}, ts: prepareTimestamp}
 *   commit:   {..., o: {commitTransaction: 1, commitTimestamp}, prevOpTime: the prepare's}
 *   abort:    {..., o: {abortTransaction: 1}, prevOpTime: the prepare's}
 *
 * with config.transactions' record in state "prepared", "committed" or
 * "aborted" written with each.  A secondary (and a member replaying its
 * oplog after a restart) prepares the transaction itself at the prepare
 * entry's ts, keeps it prepared (the command layer's transaction table
 * holds it, so a member that becomes primary takes commitTransaction or
 * abortTransaction for it) and commits it at commitTimestamp, durable at
 * the commit entry's ts.
 *
 * WiredTiger 3.2 cannot write a prepared transaction into a checkpoint:
 * the stable timestamp is held below the prepare entry of every
 * transaction still prepared, and of every one whose commit or abort entry
 * is not stable yet, so a restart replays the prepare entry and prepares
 * the transaction again.
 *
 * What must stay true: a prepare entry is in the oplog before anyone hears
 * the transaction is prepared; the stable timestamp never reaches a
 * prepare entry whose outcome is not stable.
 */
#include "repl/repl_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

static sbl_repl_prepared_fn prepared_hook;

void sbl_repl_set_prepared_hook(sbl_repl_prepared_fn fn)
{
    prepared_hook = fn;
}

/* ---- the stable timestamp's pins ------------------------------------------ */

typedef struct pin {
    uint64_t prepare_ts;
    uint64_t end_ts; /* its commit or abort entry (0: still prepared) */
} pin_t;

static pthread_mutex_t pin_mu = PTHREAD_MUTEX_INITIALIZER;
static pin_t *pins;
static size_t npins, pincap;

void sbl_repl_prepared_pin(uint64_t prepare_ts)
{
    pthread_mutex_lock(&pin_mu);
    for (size_t i = 0; i < npins; i++)
        if (pins[i].prepare_ts == prepare_ts) {
            pins[i].end_ts = 0;
            pthread_mutex_unlock(&pin_mu);
            return;
        }
    if (npins == pincap) {
        size_t cap = pincap ? 2 * pincap : 16;
        pin_t *l = realloc(pins, cap * sizeof(*l));
        if (l == NULL) {
            pthread_mutex_unlock(&pin_mu);
            sbl_log(SBL_LOG_ERROR, "REPL", 7360300, "Out of memory pinning a prepared "
                    "transaction's timestamp", NULL);
            return;
        }
        pins = l;
        pincap = cap;
    }
    pins[npins++] = (pin_t){.prepare_ts = prepare_ts};
    pthread_mutex_unlock(&pin_mu);
}

void sbl_repl_prepared_unpin(uint64_t prepare_ts, uint64_t end_ts)
{
    pthread_mutex_lock(&pin_mu);
    for (size_t i = 0; i < npins; i++)
        if (pins[i].prepare_ts == prepare_ts) {
            if (end_ts == 0) /* it never was prepared */
                pins[i] = pins[--npins];
            else
                pins[i].end_ts = end_ts;
            break;
        }
    pthread_mutex_unlock(&pin_mu);
}

void sbl_repl_prepared_rollback(uint64_t cp_ts)
{
    pthread_mutex_lock(&pin_mu);
    for (size_t i = 0; i < npins;) {
        if (pins[i].prepare_ts > cp_ts) { /* rolled back with its prepare entry */
            pins[i] = pins[--npins];
            continue;
        }
        if (pins[i].end_ts > cp_ts) /* its outcome is rolled back: prepared again */
            pins[i].end_ts = 0;
        i++;
    }
    pthread_mutex_unlock(&pin_mu);
}

uint64_t sbl_repl_prepared_clamp(uint64_t stable)
{
    pthread_mutex_lock(&pin_mu);
    uint64_t out = stable;
    for (size_t i = 0; i < npins;) {
        if (pins[i].end_ts != 0 && pins[i].end_ts <= stable) { /* its outcome is stable */
            pins[i] = pins[--npins];
            continue;
        }
        if (pins[i].prepare_ts - 1 < out)
            out = pins[i].prepare_ts - 1;
        i++;
    }
    pthread_mutex_unlock(&pin_mu);
    return out;
}

/* ---- the entries ------------------------------------------------------------ */

int sbl_repl_prepared_kind(const bson_t *e, bson_t *o)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, e, "op") || !BSON_ITER_HOLDS_UTF8(&it) ||
        bson_iter_utf8(&it, NULL)[0] != 'c' || !bson_iter_init_find(&it, e, "o") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !sbl_iter_doc(&it, o))
        return SBL_PREP_NONE;
    return sbl_repl_prepared_kind_o(o);
}

int sbl_repl_prepared_kind_o(const bson_t *o)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, o) || !bson_iter_next(&it))
        return SBL_PREP_NONE;
    const char *first = bson_iter_key(&it);
    if (strcmp(first, "commitTransaction") == 0)
        return SBL_PREP_COMMIT;
    if (strcmp(first, "abortTransaction") == 0)
        return SBL_PREP_ABORT;
    if (strcmp(first, "applyOps") == 0 && bson_iter_init_find(&it, o, "prepare") &&
        bson_iter_as_bool(&it))
        return SBL_PREP_PREPARE;
    return SBL_PREP_NONE;
}

int sbl_repl_prepare_entry_of(sbl_session_t *s, const bson_t *e, bson_t *out, bool *foundp,
                              sbl_err_t *err)
{
    bson_iter_t it, p;
    uint32_t t = 0, i = 0;
    *foundp = false;
    if (!bson_iter_init_find(&it, e, "prevOpTime") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &p) || !bson_iter_find(&p, "ts") ||
        !BSON_ITER_HOLDS_TIMESTAMP(&p))
        return 0;
    bson_iter_timestamp(&p, &t, &i);
    if (SBL_TS(t, i) == 0)
        return 0;
    SBL_RET(sbl_repl_oplog_get(s, SBL_TS(t, i), out, foundp, err));
    bson_t o;
    if (*foundp && sbl_repl_prepared_kind(out, &o) != SBL_PREP_PREPARE) {
        bson_destroy(out);
        *foundp = false;
    }
    return 0;
}

int sbl_repl_txn_log_prepare(sbl_session_t *s, const sbl_repl_txn_ops_t *ops,
                             sbl_repl_stmt_t *st, uint64_t *tsp, int64_t *termp, sbl_err_t *err)
{
    bson_t o = BSON_INITIALIZER, empty = BSON_INITIALIZER;
    int rc;

    *tsp = 0;
    const bson_t *arr = sbl_repl_txn_ops_array(ops);
    if (arr == NULL && sbl_repl_txn_ops_count(ops) > 0)
        return sbl_err_set(err, SBL_E_TransactionTooLarge, "a transaction prepared for "
                           "two-phase commit must fit one 16 MB oplog entry");
    BSON_APPEND_ARRAY(&o, "applyOps", arr != NULL ? arr : &empty);
    BSON_APPEND_BOOL(&o, "prepare", true);
    st->prev_ts = 0;
    st->prev_term = -1;
    sbl_oplog_entry_t e = {.op = 'c', .ns = "admin.$cmd", .o = &o, .stmt = st, .no_stmt_id = true};
    if ((rc = sbl_oplog_append(s, &e, err)) == 0) {
        sbl_repl_prepared_pin(e.ts); /* before it commits: stable stays below it */
        rc = sbl_repl_txn_record_outcome(s, &e, st, "prepared", tsp, err);
        if (rc != 0)
            sbl_repl_prepared_unpin(e.ts, 0);
    }
    if (rc == 0)
        *termp = e.term;
    else
        *tsp = 0;
    bson_destroy(&empty);
    bson_destroy(&o);
    return rc;
}

int sbl_repl_txn_log_decision(sbl_session_t *s, sbl_repl_stmt_t *st, bool commit,
                              uint64_t commit_ts, uint64_t *tsp, sbl_err_t *err)
{
    bson_t o = BSON_INITIALIZER;
    int rc;

    *tsp = 0;
    if (commit) {
        BSON_APPEND_INT32(&o, "commitTransaction", 1);
        bson_append_timestamp(&o, "commitTimestamp", -1, SBL_TS_SECS(commit_ts),
                              SBL_TS_INC(commit_ts));
    } else {
        BSON_APPEND_INT32(&o, "abortTransaction", 1);
    }
    sbl_oplog_entry_t e = {.op = 'c', .ns = "admin.$cmd", .o = &o, .stmt = st, .no_stmt_id = true};
    if ((rc = sbl_oplog_append(s, &e, err)) == 0)
        rc = sbl_repl_txn_record_outcome(s, &e, st, commit ? "committed" : "aborted", tsp, err);
    bson_destroy(&o);
    return rc;
}

/* ---- applying them (a secondary, or a restart's replay) ------------------- */

int sbl_repl_apply_prepared(const bson_t *e, int kind, const bson_t *o, sbl_err_t *err)
{
    sbl_session_t *s = sbl_session_get();
    uint64_t ts = sbl_repl_entry_ts(e), prepare_ts = 0;
    int rc;

    if (prepared_hook == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "no prepared-transaction applier");
    if (kind == SBL_PREP_PREPARE) {
        sbl_repl_prepared_pin(ts);
        if ((rc = prepared_hook(e, kind, ts, 0, &prepare_ts, err)) != 0) {
            sbl_repl_prepared_unpin(ts, 0); /* not prepared: the applier tries again */
            return rc;
        }
        if (!sbl_repl_replaying)
            return sbl_repl_append_alone_raw(s, e, err);
        /* the session's record ("prepared"), which the recovery undid */
        SBL_RET(sbl_txn_begin(s, err));
        if ((rc = sbl_txn_set_commit_ts(s, ts, err)) == 0 &&
            (rc = sbl_txn_record_applied(s, e, err)) == 0)
            return sbl_txn_commit(s, err);
        sbl_txn_abort(s);
        return rc;
    }
    uint64_t commit_ts = 0;
    bson_iter_t it;
    if (kind == SBL_PREP_COMMIT) {
        uint32_t t = 0, i = 0;
        if (!bson_iter_init_find(&it, o, "commitTimestamp") || !BSON_ITER_HOLDS_TIMESTAMP(&it))
            return sbl_err_set(err, SBL_E_InvalidBSON, "a commitTransaction entry without "
                               "commitTimestamp");
        bson_iter_timestamp(&it, &t, &i);
        commit_ts = SBL_TS(t, i);
    }
    /* The entry (and the session's record) in a transaction of this
     * thread's session, committed right after the prepared one. */
    SBL_RET(sbl_txn_begin(s, err));
    if (sbl_repl_replaying) {
        if ((rc = sbl_txn_set_commit_ts(s, ts, err)) == 0)
            rc = sbl_txn_record_applied(s, e, err);
    } else {
        rc = sbl_oplog_append_raw(s, e, err);
    }
    if (rc == 0)
        rc = prepared_hook(e, kind, commit_ts, ts, &prepare_ts, err);
    if (rc == 0)
        rc = sbl_txn_commit(s, err);
    else
        sbl_txn_abort(s);
    if (rc == 0 && prepare_ts != 0)
        sbl_repl_prepared_unpin(prepare_ts, ts);
    return rc;
}
