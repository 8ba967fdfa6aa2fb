/*
 * repl_entry.c: the pure pieces of replication: timestamp allocation, the
 * oplog entry's shape, the election id, the default oplog size.  No state,
 * no I/O: tests/unit/test_repl.c drives them alone.
 *
 * What must stay true: sbl_repl_ts_next(prev, now) > prev for every prev
 * and now, and entries carry mongod 7.0's fields in its order.
 */
#include "repl/repl_int.h"

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

    BSON_APPEND_UTF8(out, "op", op);
    BSON_APPEND_UTF8(out, "ns", e->ns);
    if (e->uuid != NULL)
        bson_append_binary(out, "ui", 2, BSON_SUBTYPE_UUID, e->uuid, 16);
    BSON_APPEND_DOCUMENT(out, "o", e->o);
    if (e->o2 != NULL)
        BSON_APPEND_DOCUMENT(out, "o2", e->o2);
    if (e->diff != NULL) /* Sable's: what an update changed (docs/replication.md) */
        BSON_APPEND_DOCUMENT(out, "diff", e->diff);
    bson_append_timestamp(out, "ts", 2, SBL_TS_SECS(e->ts), SBL_TS_INC(e->ts));
    BSON_APPEND_INT64(out, "t", e->term);
    BSON_APPEND_INT64(out, "v", 2);
    BSON_APPEND_DATE_TIME(out, "wall", e->wall_ms);
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
