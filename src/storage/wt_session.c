/*
 * wt_session.c: per-thread sessions, their cursor caches and transactions.
 *
 * What must stay true:
 *  - A session is used by its own thread only; the engine's list of all
 *    sessions exists so close can free the ones threads never released.
 *  - The hot path (point get, write) uses a cursor cached per table and never
 *    opens one; cached cursors on dropped tables are closed at the session's
 *    next call after the drop (drop_gen), so physical drops are not blocked.
 *  - Count/size deltas reach the tables only when commit succeeds.
 */
#include "storage/wt_int.h"

#include "common/clock.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static __thread sbl_session_t *tls_session;

sbl_session_t *sbl_session_get(void)
{
    sbl_session_t *s = tls_session;

    if (!sbl_eng.open)
        return NULL;
    if (s != NULL && s->epoch == sbl_eng.epoch) {
        sbl_session_reconcile(s);
        return s;
    }
    /* None yet, or one freed by an earlier close of the engine. */
    s = bson_malloc0(sizeof(*s));
    if (sbl_eng.conn->open_session(sbl_eng.conn, NULL, "isolation=snapshot", &s->wt) != 0) {
        bson_free(s);
        tls_session = NULL;
        return NULL;
    }
    s->epoch = sbl_eng.epoch;
    s->drop_gen = atomic_load(&sbl_eng.drop_gen);
    sbl_buf_init(&s->key);
    pthread_mutex_lock(&sbl_eng.sess_lock);
    s->next_all = sbl_eng.sessions;
    sbl_eng.sessions = s;
    pthread_mutex_unlock(&sbl_eng.sess_lock);
    tls_session = s;
    return s;
}

static _Atomic(sbl_commit_observer_fn) commit_observer;

/* s's transaction ended (storage.h, the end-of-transaction observer). */
static void notify_end(sbl_session_t *s, bool committed)
{
    sbl_commit_observer_fn obs = atomic_load_explicit(&commit_observer, memory_order_relaxed);
    if (obs != NULL && s->commit_ts != 0)
        obs(s, s->commit_ts, committed);
}

static _Atomic(sbl_commit_gate_fn) gate_enter;
static void (*_Atomic gate_leave)(void);

void sbl_storage_set_commit_gate(sbl_commit_gate_fn enter, void (*leave)(void))
{
    atomic_store(&gate_leave, leave);
    atomic_store(&gate_enter, enter);
}

void sbl_txn_set_gate(sbl_session_t *s, int64_t tag)
{
    if (s->in_txn)
        s->gate_tag = tag;
}

int sbl_txn_gate_enter(sbl_session_t *s, sbl_err_t *err)
{
    sbl_commit_gate_fn enter = atomic_load_explicit(&gate_enter, memory_order_relaxed);
    int64_t tag = s->gate_tag;
    if (tag == 0 || s->gate_held || enter == NULL)
        return 0;
    SBL_RET(enter(tag, err));
    s->gate_tag = 0;
    s->gate_held = true;
    return 0;
}

/* s's transaction ended: the gate it held is left. */
static void gate_end(sbl_session_t *s)
{
    s->gate_tag = 0;
    if (s->gate_held) {
        s->gate_held = false;
        void (*leave)(void) = atomic_load(&gate_leave);
        if (leave != NULL)
            leave();
    }
}

static void drop_deltas(sbl_session_t *s)
{
    for (size_t i = 0; i < s->ndeltas; i++)
        sbl_table_unref(s->deltas[i].tbl);
    s->ndeltas = 0;
}

/* Free s; the caller has unlinked it. */
static void session_free(sbl_session_t *s)
{
    for (size_t i = 0; i < s->ncursors; i++) {
        s->cursors[i].cursor->close(s->cursors[i].cursor);
        sbl_table_unref(s->cursors[i].tbl);
    }
    drop_deltas(s);
    if (s->wt != NULL)
        s->wt->close(s->wt, NULL); /* rolls back an open transaction */
    gate_end(s);
    if (s->in_txn)
        notify_end(s, false);
    sbl_capped_unlock_all(s);
    sbl_capped_after_txn(s, false);
    bson_free(s->capped_held);
    sbl_buf_destroy(&s->key);
    bson_free(s->cursors);
    bson_free(s->deltas);
    bson_free(s);
}

void sbl_session_release_thread(void)
{
    sbl_session_t *s = tls_session, **pp;

    tls_session = NULL;
    if (s == NULL || !sbl_eng.open || s->epoch != sbl_eng.epoch)
        return;
    pthread_mutex_lock(&sbl_eng.sess_lock);
    for (pp = &sbl_eng.sessions; *pp != NULL; pp = &(*pp)->next_all)
        if (*pp == s) {
            *pp = s->next_all;
            break;
        }
    pthread_mutex_unlock(&sbl_eng.sess_lock);
    session_free(s);
    /* Its cursors may have been the last obstacle to a pending drop. */
    pthread_mutex_lock(&sbl_eng.bg_lock);
    pthread_cond_signal(&sbl_eng.bg_cond);
    pthread_mutex_unlock(&sbl_eng.bg_lock);
}

void sbl_sessions_close_all(void)
{
    pthread_mutex_lock(&sbl_eng.sess_lock);
    while (sbl_eng.sessions != NULL) {
        sbl_session_t *s = sbl_eng.sessions;
        sbl_eng.sessions = s->next_all;
        session_free(s);
    }
    pthread_mutex_unlock(&sbl_eng.sess_lock);
    tls_session = NULL;
}

void sbl_session_reconcile(sbl_session_t *s)
{
    uint64_t gen = atomic_load(&sbl_eng.drop_gen);
    size_t i, j;

    if (gen == s->drop_gen)
        return;
    s->drop_gen = gen;
    for (i = j = 0; i < s->ncursors; i++) {
        if (atomic_load(&s->cursors[i].tbl->dropped)) {
            s->cursors[i].cursor->close(s->cursors[i].cursor);
            sbl_table_unref(s->cursors[i].tbl);
        } else
            s->cursors[j++] = s->cursors[i];
    }
    s->ncursors = j;
}

int sbl_session_cursor(sbl_session_t *s, sbl_wt_table_t *t, WT_CURSOR **cp, sbl_err_t *err)
{
    WT_CURSOR *c;
    size_t i;
    int ret;

    *cp = NULL;
    sbl_session_reconcile(s);
    for (i = 0; i < s->ncursors; i++)
        if (s->cursors[i].tbl == t) {
            *cp = s->cursors[i].cursor;
            return 0;
        }
    if (atomic_load(&t->dropped))
        return sbl_err_set(err, SBL_E_NamespaceNotFound, "collection was dropped");
    if ((ret = s->wt->open_cursor(s->wt, t->uri, NULL, "overwrite=false", &c)) != 0)
        return sbl_wt_err(err, ret, "open cursor");
    if (s->ncursors == s->cursors_cap) {
        s->cursors_cap = s->cursors_cap ? s->cursors_cap * 2 : 8;
        s->cursors = bson_realloc(s->cursors, s->cursors_cap * sizeof(*s->cursors));
    }
    sbl_table_ref(t);
    s->cursors[s->ncursors].tbl = t;
    s->cursors[s->ncursors].cursor = c;
    s->ncursors++;
    *cp = c;
    return 0;
}

void sbl_session_add_delta(sbl_session_t *s, sbl_wt_table_t *t, int64_t dcount, int64_t dsize)
{
    size_t i;

    for (i = 0; i < s->ndeltas; i++)
        if (s->deltas[i].tbl == t) {
            s->deltas[i].count += dcount;
            s->deltas[i].data_size += dsize;
            return;
        }
    if (s->ndeltas == s->deltas_cap) {
        s->deltas_cap = s->deltas_cap ? s->deltas_cap * 2 : 4;
        s->deltas = bson_realloc(s->deltas, s->deltas_cap * sizeof(*s->deltas));
    }
    sbl_table_ref(t);
    s->deltas[s->ndeltas].tbl = t;
    s->deltas[s->ndeltas].count = dcount;
    s->deltas[s->ndeltas].data_size = dsize;
    s->ndeltas++;
}

int sbl_txn_begin(sbl_session_t *s, sbl_err_t *err)
{
    int ret;

    if (s->outer) {
        s->nested_wrote = false;
        if (s->outer_failed)
            return sbl_err_set(err, SBL_E_WriteConflict,
                               "WriteConflict: the transaction was aborted by an earlier error");
        return 0;
    }
    if (s->in_txn)
        return sbl_err_set(err, SBL_E_IllegalOperation, "a transaction is already open");
    sbl_session_reconcile(s);
    if ((ret = s->wt->begin_transaction(s->wt, NULL)) != 0)
        return sbl_wt_err(err, ret, "begin transaction");
    s->in_txn = true;
    atomic_store(&s->txn_gen, atomic_load(&sbl_eng.txn_gen));
    return 0;
}

/* Release the positions of cached cursors so they pin no page or snapshot. */
static void reset_cursors(sbl_session_t *s)
{
    for (size_t i = 0; i < s->ncursors; i++)
        s->cursors[i].cursor->reset(s->cursors[i].cursor);
}

void sbl_storage_set_commit_observer(sbl_commit_observer_fn fn)
{
    atomic_store(&commit_observer, fn);
}


int sbl_txn_commit(sbl_session_t *s, sbl_err_t *err)
{
    int ret;

    if (s->outer)
        return s->outer_failed ? sbl_err_set(err, SBL_E_WriteConflict, "WriteConflict: the "
                                             "transaction was aborted by an earlier error")
                               : 0;
    if (!s->in_txn)
        return sbl_err_set(err, SBL_E_NoSuchTransaction, "no transaction is open");
    if ((ret = sbl_txn_gate_enter(s, err)) != 0) {
        sbl_txn_abort(s);
        return ret;
    }
    reset_cursors(s);
    s->in_txn = false;
    atomic_store(&s->txn_gen, 0);
    /* No sync: durability comes from the journal flusher (wt_durable.c). */
    ret = s->wt->commit_transaction(s->wt, NULL);
    gate_end(s);
    notify_end(s, ret == 0); /* before the capped locks go (storage.h) */
    if (ret == 0) {
        atomic_fetch_add(&sbl_eng.commits, 1);
        sbl_ts_advance(&sbl_eng.last_commit_ts, s->commit_ts);
        for (size_t i = 0; i < s->ndeltas; i++) {
            atomic_fetch_add(&s->deltas[i].tbl->count, s->deltas[i].count);
            atomic_fetch_add(&s->deltas[i].tbl->data_size, s->deltas[i].data_size);
        }
    }
    s->commit_ts = s->set_ts = 0;
    drop_deltas(s);
    sbl_capped_unlock_all(s); /* after the counts: the next capped insert sees them */
    sbl_capped_after_txn(s, ret == 0);
    return ret == 0 ? 0 : sbl_wt_err(err, ret, "commit transaction");
}

uint64_t sbl_txn_last_commit_ts(void)
{
    return atomic_load(&sbl_eng.last_commit_ts);
}

/* "prefix<ts in hex>" into cfg (at least strlen(prefix) + 17 bytes), as
 * snprintf's "%s%" PRIx64 writes it: every write sets its commit timestamp,
 * and snprintf cost ~1k instructions of its ~5k. */
static void ts_config(char *cfg, const char *prefix, uint64_t ts)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = strlen(prefix), digits = 1;
    memcpy(cfg, prefix, n);
    for (uint64_t v = ts >> 4; v != 0; v >>= 4)
        digits++;
    for (size_t i = digits; i-- > 0; ts >>= 4)
        cfg[n + i] = hex[ts & 0xf];
    cfg[n + digits] = '\0';
}

int sbl_txn_set_commit_ts(sbl_session_t *s, uint64_t ts, sbl_err_t *err)
{
    char cfg[64];
    int ret;

    if (!s->in_txn)
        return sbl_err_set(err, SBL_E_BadValue, "commit timestamp without a transaction");
    if (ts == s->set_ts) /* an applier's group sets each entry's before its change */
        return 0;
    ts_config(cfg, "commit_timestamp=", ts);
    if ((ret = s->wt->timestamp_transaction(s->wt, cfg)) != 0)
        return sbl_wt_err(err, ret, "set commit timestamp");
    s->set_ts = ts;
    if (ts > s->commit_ts)
        s->commit_ts = ts;
    return 0;
}

void sbl_txn_abort(sbl_session_t *s)
{
    if (s->outer) {
        if (s->nested_wrote)
            s->outer_failed = true;
        /* a multi-document transaction's read waited in place already
         * (prepare_wait.c): no retry waits here, its WriteConflict goes to
         * the client (TransientTransactionError) */
        sbl_prepare_conflict_take(NULL);
        return;
    }
    if (!s->in_txn)
        return;
    reset_cursors(s);
    s->in_txn = false;
    atomic_store(&s->txn_gen, 0);
    s->wt->rollback_transaction(s->wt, NULL);
    gate_end(s);
    notify_end(s, false);
    if (s->prepared) {
        s->prepared = false;
        sbl_prepare_resolved();
    }
    s->commit_ts = s->set_ts = 0;
    drop_deltas(s);
    sbl_capped_unlock_all(s);
    sbl_capped_after_txn(s, false);
}

/* ---- multi-document transactions ------------------------------------------ */

sbl_session_t *sbl_session_open(void)
{
    sbl_session_t *s;

    if (!sbl_eng.open)
        return NULL;
    s = bson_malloc0(sizeof(*s));
    if (sbl_eng.conn->open_session(sbl_eng.conn, NULL, "isolation=snapshot", &s->wt) != 0) {
        bson_free(s);
        return NULL;
    }
    s->epoch = sbl_eng.epoch;
    s->drop_gen = atomic_load(&sbl_eng.drop_gen);
    s->is_private = true;
    sbl_buf_init(&s->key);
    pthread_mutex_lock(&sbl_eng.sess_lock);
    s->next_all = sbl_eng.sessions;
    sbl_eng.sessions = s;
    pthread_mutex_unlock(&sbl_eng.sess_lock);
    return s;
}

void sbl_session_close(sbl_session_t *s)
{
    sbl_session_t **pp;
    bool found = false;

    if (s == NULL || !sbl_eng.open || s->epoch != sbl_eng.epoch)
        return;
    pthread_mutex_lock(&sbl_eng.sess_lock);
    for (pp = &sbl_eng.sessions; *pp != NULL; pp = &(*pp)->next_all)
        if (*pp == s) {
            *pp = s->next_all;
            found = true;
            break;
        }
    pthread_mutex_unlock(&sbl_eng.sess_lock);
    if (found)
        session_free(s);
}

int sbl_txn_begin_outer(sbl_session_t *s, sbl_err_t *err)
{
    SBL_RET(sbl_txn_begin(s, err));
    s->outer = true;
    s->outer_failed = false;
    s->nested_wrote = false;
    return 0;
}

int sbl_txn_begin_outer_at(sbl_session_t *s, uint64_t read_ts, sbl_err_t *err)
{
    char cfg[64];
    int ret;

    if (read_ts == 0)
        return sbl_txn_begin_outer(s, err);
    if (s->in_txn || s->outer)
        return sbl_err_set(err, SBL_E_IllegalOperation, "a transaction is already open");
    sbl_session_reconcile(s);
    ts_config(cfg, "read_timestamp=", read_ts);
    if ((ret = s->wt->begin_transaction(s->wt, cfg)) != 0)
        return ret == EINVAL ? sbl_err_set(err, SBL_E_SnapshotTooOld, "Read timestamp %u:%u is "
                                           "older than the oldest available timestamp.",
                                           (unsigned)(read_ts >> 32), (unsigned)read_ts)
                             : sbl_wt_err(err, ret, "begin transaction at a read timestamp");
    s->in_txn = true;
    atomic_store(&s->txn_gen, atomic_load(&sbl_eng.txn_gen));
    s->outer = true;
    s->outer_failed = false;
    s->nested_wrote = false;
    return 0;
}

bool sbl_txn_outer_failed(const sbl_session_t *s)
{
    return s->outer && s->outer_failed;
}

void sbl_txn_outer_fail(sbl_session_t *s)
{
    if (s->outer)
        s->outer_failed = true;
}

int sbl_txn_commit_outer(sbl_session_t *s, sbl_err_t *err)
{
    bool failed = s->outer_failed;
    s->outer = false;
    s->outer_failed = false;
    if (failed) {
        sbl_txn_abort(s);
        return sbl_err_set(err, SBL_E_WriteConflict,
                           "WriteConflict: the transaction was aborted by an earlier error");
    }
    int rc = sbl_txn_commit(s, err);
    if (rc != 0)
        sbl_txn_abort(s);
    return rc;
}

int sbl_txn_prepare_outer(sbl_session_t *s, uint64_t prepare_ts, sbl_err_t *err)
{
    char cfg[64];
    int ret;

    if (!s->outer || !s->in_txn)
        return sbl_err_set(err, SBL_E_NoSuchTransaction, "no transaction is open");
    if (s->outer_failed)
        return sbl_err_set(err, SBL_E_WriteConflict,
                           "WriteConflict: the transaction was aborted by an earlier error");
    reset_cursors(s);
    snprintf(cfg, sizeof(cfg), "prepare_timestamp=%" PRIx64, prepare_ts);
    if ((ret = s->wt->prepare_transaction(s->wt, cfg)) != 0)
        return sbl_wt_err(err, ret, "prepare transaction");
    s->prepared = true;
    sbl_prepare_began();
    return 0;
}

int sbl_txn_commit_prepared_outer(sbl_session_t *s, uint64_t commit_ts, uint64_t durable_ts,
                                  sbl_err_t *err)
{
    char cfg[96];
    int ret;

    if (!s->outer || !s->in_txn)
        return sbl_err_set(err, SBL_E_NoSuchTransaction, "no transaction is open");
    s->outer = false;
    s->outer_failed = false;
    s->in_txn = false;
    atomic_store(&s->txn_gen, 0);
    snprintf(cfg, sizeof(cfg), "commit_timestamp=%" PRIx64 ",durable_timestamp=%" PRIx64,
             commit_ts, durable_ts);
    ret = s->wt->commit_transaction(s->wt, cfg);
    notify_end(s, ret == 0);
    if (s->prepared) {
        s->prepared = false;
        sbl_prepare_resolved();
    }
    if (ret == 0) {
        atomic_fetch_add(&sbl_eng.commits, 1);
        sbl_ts_advance(&sbl_eng.last_commit_ts, durable_ts);
        for (size_t i = 0; i < s->ndeltas; i++) {
            atomic_fetch_add(&s->deltas[i].tbl->count, s->deltas[i].count);
            atomic_fetch_add(&s->deltas[i].tbl->data_size, s->deltas[i].data_size);
        }
    }
    s->commit_ts = s->set_ts = 0;
    drop_deltas(s);
    sbl_capped_unlock_all(s);
    sbl_capped_after_txn(s, ret == 0);
    return ret == 0 ? 0 : sbl_wt_err(err, ret, "commit prepared transaction");
}

void sbl_txn_abort_outer(sbl_session_t *s)
{
    s->outer = false;
    s->outer_failed = false;
    sbl_txn_abort(s);
}
