/*
 * repl_txn.c: the session transaction table (config.transactions) behind
 * retryable writes, and the thread's current retryable-write statement that
 * the oplog writer stamps on entries (repl.h describes the whole scheme).
 *
 * What must stay true:
 *  - A session's record changes in the WiredTiger transaction of the write
 *    whose entry it names, so the record and the entry commit together; on a
 *    secondary, in the transaction that writes the primary's entry.
 *  - Writes to config.transactions are never logged themselves (every
 *    member derives its records from the entries it holds).
 *  - A record only moves forward: an entry of an older txnNumber than the
 *    record's (a replay) leaves it alone.
 */
#include "repl/repl_int.h"

#include <string.h>

#include "common/log.h"

static sbl_coll_t *txn_table;
static _Thread_local sbl_repl_stmt_t *cur_stmt;

void sbl_repl_set_stmt(sbl_repl_stmt_t *st)
{
    cur_stmt = st;
}

sbl_repl_stmt_t *sbl_repl_cur_stmt(void)
{
    return cur_stmt;
}

int sbl_txn_table_open(sbl_session_t *s, sbl_err_t *err)
{
    if (txn_table != NULL)
        return 0;
    return sbl_coll_open(s, SBL_TXN_TABLE_NS, true, &txn_table, NULL, err);
}

void sbl_txn_table_close(void)
{
    sbl_coll_release(txn_table);
    txn_table = NULL;
}

/* The record's _id value as a view into key ({_id: lsid}). */
static void record_id(bson_t *key, const bson_t *lsid, bson_value_t *id)
{
    bson_iter_t it;
    BSON_APPEND_DOCUMENT(key, "_id", lsid);
    bson_iter_init_find(&it, key, "_id");
    *id = *bson_iter_value(&it);
}

int sbl_txn_record_write(sbl_session_t *s, const bson_t *lsid, int64_t txn, uint64_t ts,
                         int64_t term, int64_t wall_ms, sbl_err_t *err)
{
    bson_t key = BSON_INITIALIZER, old, rec = BSON_INITIALIZER, ot;
    bson_value_t id;
    bson_iter_t it;
    bool found = false;
    int rc;

    if (txn_table == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "%s is not open", SBL_TXN_TABLE_NS);
    record_id(&key, lsid, &id);
    if ((rc = sbl_coll_get(s, txn_table, &id, &old, &found, err)) != 0)
        goto done;
    if (found && bson_iter_init_find(&it, &old, "txnNum") && BSON_ITER_HOLDS_NUMBER(&it) &&
        bson_iter_as_int64(&it) > txn)
        goto done; /* a newer txnNumber's record stays */
    BSON_APPEND_DOCUMENT(&rec, "_id", lsid);
    BSON_APPEND_INT64(&rec, "txnNum", txn);
    BSON_APPEND_DOCUMENT_BEGIN(&rec, "lastWriteOpTime", &ot);
    bson_append_timestamp(&ot, "ts", 2, SBL_TS_SECS(ts), SBL_TS_INC(ts));
    BSON_APPEND_INT64(&ot, "t", term);
    bson_append_document_end(&rec, &ot);
    BSON_APPEND_DATE_TIME(&rec, "lastWriteDate", wall_ms);
    rc = sbl_write(s, txn_table, found ? SBL_WRITE_UPDATE : SBL_WRITE_INSERT,
                   found ? &old : NULL, &rec, NULL, err);
done:
    if (found)
        bson_destroy(&old);
    bson_destroy(&rec);
    bson_destroy(&key);
    return rc;
}

int sbl_txn_record_applied(sbl_session_t *s, const bson_t *doc, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t lsid;
    int64_t txn, term = 0, wall = 0;
    uint32_t t = 0, i = 0;
    const char *op;

    if (!bson_iter_init_find(&it, doc, "txnNumber") || !BSON_ITER_HOLDS_NUMBER(&it))
        return 0;
    txn = bson_iter_as_int64(&it);
    if (!bson_iter_init_find(&it, doc, "op") || !BSON_ITER_HOLDS_UTF8(&it))
        return 0;
    op = bson_iter_utf8(&it, NULL);
    if (op[0] == 'n' || !bson_iter_init_find(&it, doc, "lsid") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !sbl_iter_doc(&it, &lsid))
        return 0; /* a pre-image no-op: the write's own entry names the statement */
    if (bson_iter_init_find(&it, doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it))
        bson_iter_timestamp(&it, &t, &i);
    if (bson_iter_init_find(&it, doc, "t") && BSON_ITER_HOLDS_NUMBER(&it))
        term = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, doc, "wall") && BSON_ITER_HOLDS_DATE_TIME(&it))
        wall = bson_iter_date_time(&it);
    return sbl_txn_record_write(s, &lsid, txn, SBL_TS(t, i), term, wall, err);
}

int sbl_repl_txn_record_get(sbl_session_t *s, const uint8_t id[16], const uint8_t uid[32],
                            int64_t *txnp, uint64_t *tsp, int64_t *termp, bool *foundp,
                            sbl_err_t *err)
{
    bson_t lsid = BSON_INITIALIZER, key = BSON_INITIALIZER, rec;
    bson_value_t v;
    bson_iter_t it, ot;
    int rc;

    *foundp = false;
    *txnp = -1;
    *tsp = 0;
    *termp = -1;
    if (txn_table == NULL)
        return 0;
    BSON_APPEND_BINARY(&lsid, "id", BSON_SUBTYPE_UUID, id, 16);
    BSON_APPEND_BINARY(&lsid, "uid", BSON_SUBTYPE_BINARY, uid, 32);
    record_id(&key, &lsid, &v);
    rc = sbl_coll_get(s, txn_table, &v, &rec, foundp, err);
    if (rc == 0 && *foundp) {
        if (bson_iter_init_find(&it, &rec, "txnNum") && BSON_ITER_HOLDS_NUMBER(&it))
            *txnp = bson_iter_as_int64(&it);
        if (bson_iter_init_find(&it, &rec, "lastWriteOpTime") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            bson_iter_recurse(&it, &ot)) {
            while (bson_iter_next(&ot)) {
                if (strcmp(bson_iter_key(&ot), "ts") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&ot)) {
                    uint32_t t, i;
                    bson_iter_timestamp(&ot, &t, &i);
                    *tsp = SBL_TS(t, i);
                } else if (strcmp(bson_iter_key(&ot), "t") == 0 && BSON_ITER_HOLDS_NUMBER(&ot)) {
                    *termp = bson_iter_as_int64(&ot);
                }
            }
        }
        bson_destroy(&rec);
    }
    bson_destroy(&key);
    bson_destroy(&lsid);
    return rc;
}

int sbl_repl_oplog_get(sbl_session_t *s, uint64_t ts, bson_t *out, bool *foundp, sbl_err_t *err)
{
    bson_value_t v;
    sbl_coll_t *c = sbl_oplog_coll();

    *foundp = false;
    if (c == NULL)
        return 0;
    v.value_type = BSON_TYPE_TIMESTAMP;
    v.value.v_timestamp.timestamp = SBL_TS_SECS(ts);
    v.value.v_timestamp.increment = SBL_TS_INC(ts);
    return sbl_coll_get(s, c, &v, out, foundp, err);
}
