/*
 * repl_entry.c: the pure pieces of replication: timestamp allocation, the
 * oplog entry's shape and the collection an entry creates, the election id,
 * the default oplog size.  No state, no I/O: tests/unit/test_repl.c drives
 * them alone.
 *
 * What must stay true: sbl_repl_ts_next(prev, now) > prev for every prev
 * and now, and entries carry mongod 7.0's fields in its order.
 */
#include "repl/repl_int.h"

#include <stdio.h>
#include <string.h>

uint64_t sbl_repl_ts_next(uint64_t prev, uint32_t now_s)
{
    if (now_s > SBL_TS_SECS(prev))
        return SBL_TS(now_s, 1);
    if (SBL_TS_INC(prev) == UINT32_MAX)
        return SBL_TS(SBL_TS_SECS(prev) + 1, 1);
    return prev + 1;
}

void sbl_repl_entry_build(const sbl_oplog_entry_t *e, bson_t *out)
{
    char op[2] = {e->op, '\0'};
    const sbl_repl_stmt_t *st = e->stmt;

    if (st != NULL) { /* OperationSessionInfo first, as mongod writes it */
        bson_t l;
        BSON_APPEND_DOCUMENT_BEGIN(out, "lsid", &l);
        BSON_APPEND_BINARY(&l, "id", BSON_SUBTYPE_UUID, st->lsid_id, 16);
        BSON_APPEND_BINARY(&l, "uid", BSON_SUBTYPE_BINARY, st->lsid_uid, 32);
        bson_append_document_end(out, &l);
        BSON_APPEND_INT64(out, "txnNumber", st->txn_number);
    }
    BSON_APPEND_UTF8(out, "op", op);
    BSON_APPEND_UTF8(out, "ns", e->ns);
    if (e->uuid != NULL)
        bson_append_binary(out, "ui", 2, BSON_SUBTYPE_UUID, e->uuid, 16);
    BSON_APPEND_DOCUMENT(out, "o", e->o);
    if (e->o2 != NULL)
        BSON_APPEND_DOCUMENT(out, "o2", e->o2);
    if (st != NULL && !e->no_stmt_id)
        BSON_APPEND_INT32(out, "stmtId", st->stmt_id);
    if (e->diff != NULL) /* Sable's: what an update changed (docs/replication.md) */
        BSON_APPEND_DOCUMENT(out, "diff", e->diff);
    if (e->from_migrate)
        BSON_APPEND_BOOL(out, "fromMigrate", true);
    bson_append_timestamp(out, "ts", 2, SBL_TS_SECS(e->ts), SBL_TS_INC(e->ts));
    BSON_APPEND_INT64(out, "t", e->term);
    BSON_APPEND_INT64(out, "v", 2);
    BSON_APPEND_DATE_TIME(out, "wall", e->wall_ms);
    if (st != NULL) {
        bson_t pt;
        if (e->pre_ts != 0) {
            BSON_APPEND_DOCUMENT_BEGIN(out, "preImageOpTime", &pt);
            bson_append_timestamp(&pt, "ts", 2, SBL_TS_SECS(e->pre_ts), SBL_TS_INC(e->pre_ts));
            BSON_APPEND_INT64(&pt, "t", e->pre_term);
            bson_append_document_end(out, &pt);
        }
        BSON_APPEND_DOCUMENT_BEGIN(out, "prevOpTime", &pt);
        bson_append_timestamp(&pt, "ts", 2, SBL_TS_SECS(st->prev_ts), SBL_TS_INC(st->prev_ts));
        BSON_APPEND_INT64(&pt, "t", st->prev_ts != 0 ? st->prev_term : -1);
        bson_append_document_end(out, &pt);
    }
}

bool sbl_repl_entry_created_ns(const bson_t *e, char *ns, size_t n, const uint8_t **uuidp)
{
    bson_iter_t it, o;
    bson_subtype_t sub;
    uint32_t len = 0;
    const char *op, *ens;
    int w;

    *uuidp = NULL;
    if (!bson_iter_init_find(&it, e, "ui") || !BSON_ITER_HOLDS_BINARY(&it))
        return false;
    bson_iter_binary(&it, &sub, &len, uuidp);
    if (sub != BSON_SUBTYPE_UUID || len != 16 || !bson_iter_init_find(&it, e, "op") ||
        !BSON_ITER_HOLDS_UTF8(&it))
        return false;
    op = bson_iter_utf8(&it, NULL);
    if (!bson_iter_init_find(&it, e, "ns") || !BSON_ITER_HOLDS_UTF8(&it))
        return false;
    ens = bson_iter_utf8(&it, NULL);
    if (strcmp(op, "i") == 0 || strcmp(op, "u") == 0) {
        w = snprintf(ns, n, "%s", ens);
    } else if (strcmp(op, "c") == 0 && bson_iter_init_find(&it, e, "o") &&
               BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &o) && bson_iter_next(&o) &&
               BSON_ITER_HOLDS_UTF8(&o) &&
               (strcmp(bson_iter_key(&o), "create") == 0 ||
                strcmp(bson_iter_key(&o), "createIndexes") == 0)) {
        const char *dot = strchr(ens, '.');
        w = snprintf(ns, n, "%.*s.%s", (int)(dot != NULL ? dot - ens : (long)strlen(ens)), ens,
                     bson_iter_utf8(&o, NULL));
    } else {
        return false;
    }
    return w > 0 && (size_t)w < n;
}

void sbl_repl_election_id(int64_t term, bson_oid_t *oid)
{
    uint8_t b[12] = {0x7f, 0xff, 0xff, 0xff};
    for (int i = 0; i < 8; i++)
        b[4 + i] = (uint8_t)((uint64_t)term >> (56 - 8 * i));
    bson_oid_init_from_data(oid, b);
}

int64_t sbl_repl_default_oplog_bytes(uint64_t free_bytes)
{
    const int64_t lo = 990LL * 1024 * 1024, hi = 50LL * 1024 * 1024 * 1024;
    int64_t n = (int64_t)(free_bytes / 20);
    return n < lo ? lo : n > hi ? hi : n;
}
