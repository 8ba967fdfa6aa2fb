/*
 * retryable.c: retryable writes at the command level (issue 26).  A write
 * command that carries lsid and txnNumber runs with its session checked out
 * (one such operation per session at a time, as mongod).  Before the handler
 * runs, the dispatcher calls sbl_cmd_txn_begin: txnNumber is checked against
 * the newest one the session used (in memory and in config.transactions, so
 * a new primary knows what the old one did), and when it is the same
 * txnNumber again (a retry) the statements already executed are found by
 * walking the session's oplog chain (prevOpTime) from its record's
 * lastWriteOpTime.  The handlers then skip executed statements and rebuild
 * their results from those entries, and run the others with the statement
 * set on the thread, so the oplog writer stamps lsid, txnNumber, stmtId and
 * prevOpTime on their entries and writes the session's record in the same
 * WiredTiger transaction (src/repl/repl_txn.c).  The session catalogue keeps
 * the record's version as this session last saw it (sbl_version_t) between
 * commands: the record is read by that key alone, and written by it, while it
 * still holds those bytes (storage.h says why a stale one does no harm).
 *
 * What must stay true: a statement whose entry is in the chain never runs
 * again; a txnNumber lower than one the session used is refused
 * (TransactionTooOld); the session is checked in on every path
 * (sbl_cmd_txn_end).
 */
#include "cmd/cmd_int.h"
#include "cmd/failpoint.h"
#include "common/log.h"
#include "repl/repl.h"
#include "sessions/sessions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAIN_MAX 100000 /* entries walked at most */

typedef struct done_stmt {
    int32_t stmt;
    bson_t *entry;
} done_stmt_t;

struct sbl_retry {
    sbl_lsid_t lsid;
    int64_t txn;
    int32_t first_stmt;      /* stmtId (0 when absent) */
    int32_t *stmt_ids;       /* stmtIds, or NULL */
    uint32_t nstmt_ids;
    done_stmt_t *done;       /* statements this txnNumber already executed */
    size_t ndone;
    bool incomplete;         /* the chain ended before its start (oplog truncated) */
    sbl_repl_stmt_t st;      /* the running statement; prev_ts chains them */
    bool close_after;        /* onPrimaryTransactionalWrite: close instead of replying */
    int32_t *retried;        /* executed statements the command skipped */
    size_t nretried, cap_retried;
    sbl_version_t record;    /* the session's record as last seen (st.record), a hint */
    uint64_t epoch;          /* sbl_versioned_epoch before the record was read or trusted */
    bool record_ok;          /* record is what committed: no statement left it in doubt */
    bool in_stmt;            /* between sbl_retry_stmt_begin and _end */
    uint32_t key_len_before; /* record's key and updates_left when the statement began: */
    uint8_t updates_left_before; /* every write of the record changes one of them */
    uint8_t key_before[SBL_VERSION_KEY_MAX];
    int64_t rec_txn;         /* the record's txnNum and lastWriteOpTime, as record holds */
    uint64_t rec_ts;
    int64_t rec_term;
};

static _Atomic int64_t retried_commands, retried_statements, record_writes;

int64_t sbl_retry_record_writes(void)
{
    return record_writes;
}

int64_t sbl_retry_retried_commands(void)
{
    return retried_commands;
}

int64_t sbl_retry_retried_statements(void)
{
    return retried_statements;
}

static bool is_retryable_command(const char *n)
{
    return strcmp(n, "insert") == 0 || strcmp(n, "update") == 0 || strcmp(n, "delete") == 0 ||
           strcmp(n, "findAndModify") == 0 || strcmp(n, "findandmodify") == 0;
}

static void retry_free(sbl_retry_t *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->ndone; i++)
        bson_destroy(r->done[i].entry);
    free(r->done);
    free(r->stmt_ids);
    free(r->retried);
    free(r);
}

/* stmtId / stmtIds of the command (the first of each; sbl_doc_find_top
 * answers from the command's field index the dispatcher built). */
static int parse_stmt_ids(sbl_opctx_t *ctx, sbl_retry_t *r, sbl_err_t *err)
{
    bson_iter_t it, el;
    if (sbl_doc_find_top(ctx->cmd, "stmtId", &it)) {
        if (!BSON_ITER_HOLDS_INT32(&it) && !BSON_ITER_HOLDS_INT64(&it))
            return sbl_type_error(err, "stmtId", &it, "int");
        r->first_stmt = (int32_t)bson_iter_as_int64(&it);
    }
    if (!sbl_doc_find_top(ctx->cmd, "stmtIds", &it))
        return 0;
    if (!BSON_ITER_HOLDS_ARRAY(&it))
        return sbl_type_error(err, "stmtIds", &it, "array");
    uint32_t n = 0;
    bson_iter_recurse(&it, &el);
    while (bson_iter_next(&el))
        n++;
    r->stmt_ids = calloc(n ? n : 1, sizeof(int32_t));
    if (r->stmt_ids == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    bson_iter_recurse(&it, &el);
    for (uint32_t i = 0; bson_iter_next(&el); i++) {
        if (!BSON_ITER_HOLDS_INT32(&el) && !BSON_ITER_HOLDS_INT64(&el))
            return sbl_type_error(err, "stmtIds", &el, "int");
        r->stmt_ids[i] = (int32_t)bson_iter_as_int64(&el);
    }
    r->nstmt_ids = n;
    return 0;
}

/* A {ts, t} optime field of an entry (ts 0 when absent). */
static void entry_optime(const bson_t *e, const char *field, uint64_t *tsp, int64_t *termp)
{
    bson_iter_t it, f;
    *tsp = 0;
    *termp = -1;
    if (!bson_iter_init_find(&it, e, field) || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &f))
        return;
    while (bson_iter_next(&f)) {
        if (strcmp(bson_iter_key(&f), "ts") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&f)) {
            uint32_t t, i;
            bson_iter_timestamp(&f, &t, &i);
            *tsp = ((uint64_t)t << 32) | i;
        } else if (strcmp(bson_iter_key(&f), "t") == 0 && BSON_ITER_HOLDS_NUMBER(&f)) {
            *termp = bson_iter_as_int64(&f);
        }
    }
}

/* Walk the session's chain of this txnNumber, newest first. */
static int load_history(sbl_opctx_t *ctx, sbl_retry_t *r, uint64_t ts, int64_t term,
                        sbl_err_t *err)
{
    r->st.prev_ts = ts;
    r->st.prev_term = term;
    for (int steps = 0; ts != 0 && steps < CHAIN_MAX; steps++) {
        bson_t e;
        bool found = false;
        bson_iter_t it;
        SBL_RET(sbl_repl_oplog_get(ctx->ss, ts, &e, &found, err));
        if (!found) {
            r->incomplete = true;
            return 0;
        }
        if (bson_iter_init_find(&it, &e, "stmtId") && BSON_ITER_HOLDS_NUMBER(&it)) {
            done_stmt_t *nd = realloc(r->done, (r->ndone + 1) * sizeof(*nd));
            if (nd == NULL) {
                bson_destroy(&e);
                return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
            }
            r->done = nd;
            r->done[r->ndone].stmt = (int32_t)bson_iter_as_int64(&it);
            /* a statement whose chunk migrated here: its donor's entry */
            r->done[r->ndone].entry = sbl_repl_stmt_entry(&e);
            r->ndone++;
        }
        entry_optime(&e, "prevOpTime", &ts, &term);
        bson_destroy(&e);
    }
    return 0;
}

int sbl_cmd_txn_begin(sbl_opctx_t *ctx, const bson_iter_t *txnit, const bson_iter_t *autocommit,
                      sbl_err_t *err)
{
    bson_iter_t it = *txnit;
    int64_t txn;
    char hex[33];

    if (!ctx->has_lsid)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "Transaction number requires a session ID to also be specified");
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_IllegalOperation,
                           "Transaction numbers are only allowed on a replica set member or "
                           "mongos");
    if (!BSON_ITER_HOLDS_INT64(&it) && !BSON_ITER_HOLDS_INT32(&it))
        return sbl_type_error(err, "OperationSessionInfo.txnNumber", &it, "long");
    txn = bson_iter_as_int64(&it);
    if (txn < 0)
        return sbl_err_set(err, SBL_E_BadValue, "TxnNumber cannot be negative");
    if (autocommit != NULL) {
        it = *autocommit;
        if (!BSON_ITER_HOLDS_BOOL(&it))
            return sbl_type_error(err, "OperationSessionInfo.autocommit", &it, "bool");
        if (bson_iter_as_bool(&it))
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "Specifying autocommit=true is not allowed.");
        return sbl_cmd_mtxn_begin(ctx, txn, err);
    }
    if (!is_retryable_command(ctx->name))
        return sbl_err_set(err, SBL_E_NotARetryableWriteCommand,
                           "txnNumber may only be provided for multi-document transactions and "
                           "retryable write commands. autocommit:false was not provided, and %s "
                           "is not a retryable write command.", ctx->name);

    sbl_retry_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    memcpy(r->lsid.id, ctx->lsid_id, 16);
    memcpy(r->lsid.uid, ctx->user_uid, 32);
    r->txn = txn;
    memcpy(r->st.lsid_id, r->lsid.id, 16);
    memcpy(r->st.lsid_uid, r->lsid.uid, 32);
    r->st.txn_number = txn;
    r->st.record = &r->record;
    int rc = parse_stmt_ids(ctx, r, err);
    if (rc != 0) {
        retry_free(r);
        return rc;
    }

    sbl_lsess_state_t kept;
    int64_t seen = sbl_lsess_checkout_state(&r->lsid, ctx->client->uid_for, sbl_now_ms(), &kept);
    ctx->retry = r; /* checked out: sbl_cmd_txn_end checks it in */
    r->epoch = sbl_versioned_epoch(); /* before the record is read or trusted */
    const sbl_session_kept_t *k = sbl_session_kept_current(&kept, r->epoch);
    int64_t rec_txn;
    uint64_t rec_ts;
    int64_t rec_term;
    bool found;
    if (k != NULL) {
        /* nothing wrote config.transactions since this session's last command */
        memcpy(&r->record, &k->record, sizeof(r->record));
        r->record.known_current = true;
        found = true;
        rec_txn = k->rec_txn;
        rec_ts = k->rec_ts;
        rec_term = k->rec_term;
    } else {
        if (kept.len >= sizeof(r->record)) /* a hint, checked */
            memcpy(&r->record, kept.data, sizeof(r->record));
        r->record.known_current = false;
        SBL_RET(sbl_repl_txn_record_known(ctx->ss, r->lsid.id, r->lsid.uid, &r->record,
                                          &rec_txn, &rec_ts, &rec_term, &found, err));
    }
    r->record_ok = found && r->record.key_len > 0;
    r->rec_txn = rec_txn;
    r->rec_ts = rec_ts;
    r->rec_term = rec_term;
    int64_t newest = seen > rec_txn ? seen : rec_txn;
    if (txn < newest) {
        for (int i = 0; i < 16; i++)
            snprintf(hex + 2 * i, 3, "%02x", r->lsid.id[i]);
        return sbl_err_set(err, SBL_E_TransactionTooOld,
                           "Retryable write with txnNumber %lld is prohibited on session %.8s-"
                           "%.4s-%.4s-%.4s-%.12s because a newer retryable write with txnNumber "
                           "%lld has already started on this session.", (long long)txn, hex,
                           hex + 8, hex + 12, hex + 16, hex + 20, (long long)newest);
    }
    SBL_RET(sbl_cmd_mtxn_newer_number(&r->lsid, txn, err));
    if (found && rec_txn == txn)
        SBL_RET(load_history(ctx, r, rec_ts, rec_term, err));
    return 0;
}

void sbl_cmd_txn_end(sbl_opctx_t *ctx)
{
    sbl_retry_t *r = ctx->retry;
    if (r == NULL)
        return;
    sbl_repl_set_stmt(NULL);
    sbl_lsess_state_t kept = {.len = 0};
    if (r->record.key_len > 0) { /* checked before its next use, unless known current */
        sbl_session_kept_t *k = (sbl_session_kept_t *)kept.data;
        kept.len = sizeof(*k);
        memcpy(&k->record, &r->record, sizeof(r->record));
        k->record.known_current = false; /* set again only by sbl_cmd_txn_begin */
        k->epoch = r->epoch;
        k->current = r->record_ok && !r->in_stmt && sbl_versioned_epoch() == r->epoch;
        k->rec_txn = r->rec_txn;
        k->rec_ts = r->rec_ts;
        k->rec_term = r->rec_term;
    }
    sbl_lsess_checkin_state(&r->lsid, r->txn, &kept);
    if (r->close_after)
        ctx->close_instead = true;
    if (r->nretried > 0) {
        retried_commands++;
        retried_statements += (int64_t)r->nretried;
    }
    retry_free(r);
    ctx->retry = NULL;
}

int32_t sbl_retry_stmt_id(const sbl_retry_t *r, uint32_t i)
{
    if (r->stmt_ids != NULL && i < r->nstmt_ids)
        return r->stmt_ids[i];
    return r->first_stmt + (int32_t)i;
}

int sbl_retry_executed(sbl_retry_t *r, int32_t stmt, const bson_t **entryp, sbl_err_t *err)
{
    *entryp = NULL;
    for (size_t i = 0; i < r->ndone; i++)
        if (r->done[i].stmt == stmt) {
            *entryp = r->done[i].entry;
            if (r->nretried == r->cap_retried) {
                size_t ncap = r->cap_retried ? 2 * r->cap_retried : 8;
                int32_t *nv = realloc(r->retried, ncap * sizeof(*nv));
                if (nv == NULL)
                    return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
                r->retried = nv;
                r->cap_retried = ncap;
            }
            r->retried[r->nretried++] = stmt;
            return 0;
        }
    if (r->incomplete)
        return sbl_err_set(err, SBL_E_IncompleteTransactionHistory,
                           "Incomplete history detected for transaction %lld on session: the "
                           "oplog no longer holds its entries", (long long)r->txn);
    return 0;
}

int sbl_retry_stmt_begin(sbl_retry_t *r, int32_t stmt, bool pre_image, sbl_err_t *err)
{
    bool close;
    int code;
    if (sbl_failpoint_txn_write(&close, &code)) {
        r->close_after |= close;
        if (code != 0)
            return sbl_err_set(err, code, "Failing write for test because failpoint is on");
    }
    r->st.stmt_id = stmt;
    r->st.pre_image = pre_image;
    r->st.whole_post = false;
    r->st.out_ts = 0;
    r->in_stmt = true;
    memcpy(r->key_before, r->record.key, sizeof(r->key_before));
    r->key_len_before = r->record.key_len;
    r->updates_left_before = r->record.updates_left;
    sbl_repl_set_stmt(&r->st);
    return 0;
}

void sbl_retry_stmt_whole_post(sbl_retry_t *r)
{
    r->st.whole_post = true;
}

void sbl_retry_stmt_end(sbl_retry_t *r, bool wrote)
{
    sbl_repl_set_stmt(NULL);
    if (!r->in_stmt)
        return; /* ended already */
    r->in_stmt = false;
    if (wrote && r->st.out_ts != 0) { /* committed with its entry */
        record_writes++;
        r->st.prev_ts = r->st.out_ts;
        r->st.prev_term = r->st.out_term;
        r->record_ok = r->record.key_len > 0;
        r->rec_txn = r->txn;
        r->rec_ts = r->st.out_ts;
        r->rec_term = r->st.out_term;
    } else if (r->st.out_ts != 0 || r->record.key_len != r->key_len_before ||
               r->record.updates_left != r->updates_left_before ||
               memcmp(r->record.key, r->key_before, r->key_len_before) != 0) {
        r->record_ok = false; /* a record written in a transaction that may not have committed */
    }
}

void sbl_retry_append_retried(const sbl_retry_t *r, bson_t *reply)
{
    bson_t arr;
    char kb[16];
    if (r == NULL || r->nretried == 0)
        return;
    BSON_APPEND_ARRAY_BEGIN(reply, "retriedStmtIds", &arr);
    for (size_t i = 0; i < r->nretried; i++)
        bson_append_int32(&arr, sbl_array_key((uint32_t)i, kb), -1, r->retried[i]);
    bson_append_array_end(reply, &arr);
}

int sbl_retry_image(sbl_opctx_t *ctx, const bson_t *entry, bson_t *out, bool *foundp,
                    sbl_err_t *err)
{
    uint64_t ts;
    int64_t term;
    bson_t e;
    bson_iter_t it;
    *foundp = false;
    entry_optime(entry, "preImageOpTime", &ts, &term);
    if (ts == 0)
        return 0;
    bool found = false;
    SBL_RET(sbl_repl_oplog_get(ctx->ss, ts, &e, &found, err));
    if (!found)
        return sbl_err_set(err, SBL_E_IncompleteTransactionHistory,
                           "Incomplete history detected: the pre-image of the retried "
                           "findAndModify is no longer in the oplog");
    if (bson_iter_init_find(&it, &e, "o") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t o;
        sbl_iter_doc(&it, &o);
        bson_copy_to(&o, out);
        *foundp = true;
    }
    bson_destroy(&e);
    return 0;
}
