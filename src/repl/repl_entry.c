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

/*
 * The session's pieces of entries and records (a retryable write's, a
 * transaction's) are encoded here and appended whole: libbson's nested
 * appends (begin, fields, end) cost several times more than these few
 * bytes, on every retryable write.  Byte for byte what the appenders give
 * (tests/unit/test_repl.c compares them).
 */
static inline void put_le(uint8_t *p, uint64_t v, int n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &v, (size_t)n); /* n is a constant at every call: one store */
#else
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
#endif
}

#define LSID_LEN 72   /* {id: UUID, uid: BinData(0, 32 bytes)} */
#define OPTIME_LEN 28 /* {ts: Timestamp, t: NumberLong} */

_Static_assert(LSID_LEN == SBL_REPL_LSID_LEN, "the lsid's encoded length");

static void encode_lsid(uint8_t b[LSID_LEN], const uint8_t id[16], const uint8_t uid[32])
{
    put_le(b, LSID_LEN, 4);
    memcpy(b + 4, "\x05" "id", 4);
    put_le(b + 8, 16, 4);
    b[12] = BSON_SUBTYPE_UUID;
    memcpy(b + 13, id, 16);
    memcpy(b + 29, "\x05" "uid", 5);
    put_le(b + 34, 32, 4);
    b[38] = BSON_SUBTYPE_BINARY;
    memcpy(b + 39, uid, 32);
    b[71] = 0;
}

bool sbl_repl_lsid_view(uint8_t b[SBL_REPL_LSID_LEN], const uint8_t id[16],
                        const uint8_t uid[32], bson_t *lsid)
{
    encode_lsid(b, id, uid);
    return bson_init_static(lsid, b, LSID_LEN);
}

static void encode_optime(uint8_t b[OPTIME_LEN], uint64_t ts, int64_t t)
{
    put_le(b, OPTIME_LEN, 4);
    memcpy(b + 4, "\x11" "ts", 4); /* a timestamp: increment, then seconds */
    put_le(b + 8, ts, 8);
    memcpy(b + 16, "\x12" "t", 3);
    put_le(b + 19, (uint64_t)t, 8);
    b[27] = 0;
}

/* A field whose value is a document: type, key, the document's bytes. */
static uint8_t *put_doc(uint8_t *p, const char *key, size_t klen, const bson_t *d)
{
    *p = BSON_TYPE_DOCUMENT;
    memcpy(p + 1, key, klen + 1);
    memcpy(p + 2 + klen, bson_get_data(d), d->len);
    return p + 2 + klen + d->len;
}

/* A field of a fixed-size value: type, key (klen bytes and its NUL), the
 * value's n little-endian bytes. */
static uint8_t *put_num(uint8_t *p, uint8_t type, const char *key, size_t klen, uint64_t v, int n)
{
    *p = type;
    memcpy(p + 1, key, klen + 1);
    put_le(p + 2 + klen, v, n);
    return p + 2 + klen + n;
}

/*
 * The entry is encoded into out's buffer in one piece (its size first): an
 * entry goes through here for every write on the primary, and libbson's
 * appenders (a dozen, each checking and growing the buffer) cost ~2k
 * instructions more for a plain update's entry and ~4k for a retryable
 * write's.  Byte for byte what they give (tests/unit/test_repl.c).
 */
/* Index the field about to be written at p (see sbl_repl_entry_build). */
static void mark(sbl_doc_index_t *ix, const uint8_t *start, const uint8_t *p, size_t klen)
{
    if (ix != NULL) {
        ix->at[ix->n] = (uint32_t)(p - start);
        ix->klen[ix->n++] = (uint8_t)klen;
    }
}

void sbl_repl_entry_build(const sbl_oplog_entry_t *e, bson_t *out, sbl_doc_index_t *ix)
{
    const sbl_repl_stmt_t *st = e->stmt;
    size_t nslen = strlen(e->ns);
    size_t n = 4 + (st != NULL ? (6 + LSID_LEN) + 19 : 0) + 10 + (9 + nslen) +
               (e->uuid != NULL ? 25 : 0) + (3 + e->o->len) + (e->o2 != NULL ? 4 + e->o2->len : 0) +
               (st != NULL && !e->no_stmt_id ? 12 : 0) + (e->diff != NULL ? 6 + e->diff->len : 0) +
               (e->from_migrate ? 14 : 0) + 12 + 11 + 11 + 14 +
               (st != NULL ? (e->pre_ts != 0 ? 16 + OPTIME_LEN : 0) + 12 + OPTIME_LEN : 0) + 1;
    uint8_t *p, *start;

    if (ix != NULL)
        ix->data = NULL;
    if (n > INT32_MAX || (p = bson_reserve_buffer(out, (uint32_t)n)) == NULL)
        return;
    start = p;
    if (ix != NULL)
        ix->n = 0;
    put_le(p, n, 4);
    p += 4;
    if (st != NULL) { /* OperationSessionInfo first, as mongod writes it */
        mark(ix, start, p, 4);
        memcpy(p, "\x03" "lsid", 6);
        encode_lsid(p + 6, st->lsid_id, st->lsid_uid);
        mark(ix, start, p + 6 + LSID_LEN, 9);
        p = put_num(p + 6 + LSID_LEN, BSON_TYPE_INT64, "txnNumber", 9, (uint64_t)st->txn_number,
                    8);
    }
    mark(ix, start, p, 2);
    memcpy(p, "\x02" "op\0\x02\0\0\0", 8);
    p[8] = (uint8_t)e->op;
    p[9] = 0;
    p += 10;
    mark(ix, start, p, 2);
    memcpy(p, "\x02" "ns", 4);
    put_le(p + 4, nslen + 1, 4);
    memcpy(p + 8, e->ns, nslen + 1);
    p += 9 + nslen;
    if (e->uuid != NULL) {
        mark(ix, start, p, 2);
        memcpy(p, "\x05" "ui\0\x10\0\0\0\x04", 9);
        memcpy(p + 9, e->uuid, 16);
        p += 25;
    }
    mark(ix, start, p, 1);
    p = put_doc(p, "o", 1, e->o);
    if (e->o2 != NULL) {
        mark(ix, start, p, 2);
        p = put_doc(p, "o2", 2, e->o2);
    }
    if (st != NULL && !e->no_stmt_id) {
        mark(ix, start, p, 6);
        p = put_num(p, BSON_TYPE_INT32, "stmtId", 6, (uint32_t)st->stmt_id, 4);
    }
    if (e->diff != NULL) { /* Sable's: what an update changed (docs/replication.md) */
        mark(ix, start, p, 4);
        p = put_doc(p, "diff", 4, e->diff);
    }
    if (e->from_migrate) {
        mark(ix, start, p, 11);
        p = put_num(p, BSON_TYPE_BOOL, "fromMigrate", 11, 1, 1);
    }
    mark(ix, start, p, 2);
    p = put_num(p, BSON_TYPE_TIMESTAMP, "ts", 2, e->ts, 8); /* increment, then seconds */
    mark(ix, start, p, 1);
    p = put_num(p, BSON_TYPE_INT64, "t", 1, (uint64_t)e->term, 8);
    mark(ix, start, p, 1);
    p = put_num(p, BSON_TYPE_INT64, "v", 1, 2, 8);
    mark(ix, start, p, 4);
    p = put_num(p, BSON_TYPE_DATE_TIME, "wall", 4, (uint64_t)e->wall_ms, 8);
    if (st != NULL) {
        if (e->pre_ts != 0) {
            mark(ix, start, p, 14);
            memcpy(p, "\x03" "preImageOpTime", 16);
            encode_optime(p + 16, e->pre_ts, e->pre_term);
            p += 16 + OPTIME_LEN;
        }
        mark(ix, start, p, 10);
        memcpy(p, "\x03" "prevOpTime", 12);
        encode_optime(p + 12, st->prev_ts, st->prev_ts != 0 ? st->prev_term : -1);
        p += 12 + OPTIME_LEN;
    }
    *p = 0;
    if (ix != NULL) {
        ix->data = start;
        ix->len = (uint32_t)n;
    }
}

size_t sbl_repl_record_encode(const bson_t *lsid, int64_t txn, uint64_t ts, int64_t term,
                              int64_t wall_ms, const char *state, uint8_t *buf, size_t cap)
{
    size_t slen = state != NULL ? strlen(state) : 0;
    size_t n = 4 + (5 + lsid->len) + 16 + (17 + OPTIME_LEN) + 23 +
               (state != NULL ? 11 + slen + 1 : 0) + 1;
    uint8_t *p = buf;
    if (n > cap || n > INT32_MAX)
        return n;
    put_le(p, n, 4);
    memcpy(p + 4, "\x03" "_id", 5);
    memcpy(p + 9, bson_get_data(lsid), lsid->len);
    p += 9 + lsid->len;
    memcpy(p, "\x12" "txnNum", 8);
    put_le(p + 8, (uint64_t)txn, 8);
    p += 16;
    memcpy(p, "\x03" "lastWriteOpTime", 17);
    encode_optime(p + 17, ts, term);
    p += 17 + OPTIME_LEN;
    memcpy(p, "\x09" "lastWriteDate", 15);
    put_le(p + 15, (uint64_t)wall_ms, 8);
    p += 23;
    if (state != NULL) {
        memcpy(p, "\x02" "state", 7);
        put_le(p + 7, slen + 1, 4);
        memcpy(p + 11, state, slen + 1);
        p += 11 + slen + 1;
    }
    *p = 0;
    return n;
}

size_t sbl_repl_op_encode(char op, const char *ns, const uint8_t *uuid, const bson_t *o,
                          const bson_t *o2, const bson_t *diff, uint8_t *buf, size_t cap)
{
    size_t nslen = strlen(ns);
    size_t n = 4 + 10 + (9 + nslen) + (uuid != NULL ? 25 : 0) + (3 + o->len) +
               (o2 != NULL ? 4 + o2->len : 0) + (diff != NULL ? 6 + diff->len : 0) + 1;
    uint8_t *p = buf;
    if (n > cap || n > INT32_MAX)
        return n;
    put_le(p, n, 4);
    memcpy(p + 4, "\x02" "op\0\x02\0\0\0", 8);
    p[12] = (uint8_t)op;
    p[13] = 0;
    p += 14;
    memcpy(p, "\x02" "ns", 4);
    put_le(p + 4, nslen + 1, 4);
    memcpy(p + 8, ns, nslen + 1);
    p += 9 + nslen;
    if (uuid != NULL) {
        memcpy(p, "\x05" "ui\0\x10\0\0\0\x04", 9);
        memcpy(p + 9, uuid, 16);
        p += 25;
    }
    p = put_doc(p, "o", 1, o);
    if (o2 != NULL)
        p = put_doc(p, "o2", 2, o2);
    if (diff != NULL)
        p = put_doc(p, "diff", 4, diff);
    *p = 0;
    return n;
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
