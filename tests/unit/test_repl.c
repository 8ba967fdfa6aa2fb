/*
 * test_repl.c: replication's pure pieces (src/repl/repl_entry.c: timestamp
 * allocation, the entry's shape and the collection it creates, the election
 * id, the default oplog size)
 * and the oplog writer on a real WiredTiger in a temporary dbpath: an entry
 * is written by the storage write observer in the write's transaction, so
 * an aborted transaction leaves neither document nor entry; local.* is not
 * logged; timestamps resume from the oplog after a reopen.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "repl/repl_int.h"

static char dbpath[256];

static void test_ts_next(void)
{
    CHECK(sbl_repl_ts_next(0, 100) == SBL_TS(100, 1));
    CHECK(sbl_repl_ts_next(SBL_TS(100, 1), 100) == SBL_TS(100, 2));
    CHECK(sbl_repl_ts_next(SBL_TS(100, 7), 101) == SBL_TS(101, 1));
    /* the clock steps back: the increment goes on */
    CHECK(sbl_repl_ts_next(SBL_TS(100, 7), 50) == SBL_TS(100, 8));
    /* the increment is full: the next second */
    CHECK(sbl_repl_ts_next(SBL_TS(100, UINT32_MAX), 100) == SBL_TS(101, 1));
    uint64_t prev = 0;
    bool increasing = true;
    for (uint32_t i = 0; i < 100000; i++) {
        uint64_t next = sbl_repl_ts_next(prev, 1000 + (i % 7 == 0 ? i / 1000 : 3));
        increasing = increasing && next > prev;
        prev = next;
    }
    CHECK(increasing);
}

static void test_entry_shape(void)
{
    static const uint8_t uuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER, out = BSON_INITIALIZER;
    BSON_APPEND_INT32(&o, "_id", 7);
    BSON_APPEND_INT32(&o, "a", 1);
    BSON_APPEND_INT32(&o2, "_id", 7);
    sbl_oplog_entry_t e = {.op = 'u', .ns = "db.c", .uuid = uuid, .o = &o, .o2 = &o2,
                           .ts = SBL_TS(1700000000, 3), .term = 1, .wall_ms = 1700000000123};
    sbl_repl_entry_build(&e, &out, NULL);
    static const char *const keys[] = {"op", "ns", "ui", "o", "o2", "ts", "t", "v", "wall"};
    bson_iter_t it;
    size_t i = 0;
    bool order = bson_iter_init(&it, &out);
    while (order && bson_iter_next(&it))
        order = i < 9 && strcmp(bson_iter_key(&it), keys[i++]) == 0;
    CHECK(order && i == 9);
    CHECK(bson_iter_init_find(&it, &out, "op") && strcmp(bson_iter_utf8(&it, NULL), "u") == 0);
    bson_subtype_t sub;
    uint32_t len;
    const uint8_t *data;
    CHECK(bson_iter_init_find(&it, &out, "ui") && BSON_ITER_HOLDS_BINARY(&it));
    bson_iter_binary(&it, &sub, &len, &data);
    CHECK(sub == BSON_SUBTYPE_UUID && len == 16 && memcmp(data, uuid, 16) == 0);
    uint32_t t, inc;
    CHECK(bson_iter_init_find(&it, &out, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it));
    bson_iter_timestamp(&it, &t, &inc);
    CHECK(t == 1700000000 && inc == 3);
    CHECK(bson_iter_init_find(&it, &out, "t") && BSON_ITER_HOLDS_INT64(&it) &&
          bson_iter_int64(&it) == 1);
    CHECK(bson_iter_init_find(&it, &out, "v") && bson_iter_as_int64(&it) == 2);
    CHECK(bson_iter_init_find(&it, &out, "wall") && BSON_ITER_HOLDS_DATE_TIME(&it) &&
          bson_iter_date_time(&it) == 1700000000123);
    bson_destroy(&out);

    /* a no-op: no ui, no o2 */
    bson_init(&out);
    sbl_oplog_entry_t n = {.op = 'n', .ns = "", .o = &o, .ts = 1, .term = 1};
    sbl_repl_entry_build(&n, &out, NULL);
    CHECK(!bson_has_field(&out, "ui") && !bson_has_field(&out, "o2"));
    bson_destroy(&out);
    bson_destroy(&o);
    bson_destroy(&o2);
}

/* An entry's session fields and a session's record, byte for byte as
 * libbson's appenders build them (repl_entry.c encodes them itself). */
static void append_optime_ref(bson_t *d, const char *key, uint64_t ts, int64_t t)
{
    bson_t pt;
    BSON_APPEND_DOCUMENT_BEGIN(d, key, &pt);
    bson_append_timestamp(&pt, "ts", 2, SBL_TS_SECS(ts), SBL_TS_INC(ts));
    BSON_APPEND_INT64(&pt, "t", t);
    bson_append_document_end(d, &pt);
}

static void test_session_encoding(void)
{
    sbl_repl_stmt_t st = {.txn_number = 5, .stmt_id = 3, .prev_ts = SBL_TS(1700000000, 9),
                          .prev_term = 2};
    for (int i = 0; i < 16; i++)
        st.lsid_id[i] = (uint8_t)(0xa0 + i);
    for (int i = 0; i < 32; i++)
        st.lsid_uid[i] = (uint8_t)(7 * i);
    bson_t o = BSON_INITIALIZER, l = BSON_INITIALIZER, out = BSON_INITIALIZER;
    BSON_APPEND_INT32(&o, "_id", 7);
    BSON_APPEND_BINARY(&l, "id", BSON_SUBTYPE_UUID, st.lsid_id, 16);
    BSON_APPEND_BINARY(&l, "uid", BSON_SUBTYPE_BINARY, st.lsid_uid, 32);
    uint8_t lb[SBL_REPL_LSID_LEN];
    bson_t lv;
    CHECK(sbl_repl_lsid_view(lb, st.lsid_id, st.lsid_uid, &lv) && lv.len == l.len &&
          memcmp(bson_get_data(&lv), bson_get_data(&l), l.len) == 0);
    for (int pre = 0; pre < 2; pre++) {
        sbl_oplog_entry_t e = {.op = 'd', .ns = "db.c", .o = &o, .stmt = &st,
                               .ts = SBL_TS(1700000001, 1), .term = 2, .wall_ms = 1700000001000,
                               .pre_ts = pre ? SBL_TS(1700000000, 12) : 0, .pre_term = -3};
        bson_t ref = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&ref, "lsid", &l);
        BSON_APPEND_INT64(&ref, "txnNumber", 5);
        BSON_APPEND_UTF8(&ref, "op", "d");
        BSON_APPEND_UTF8(&ref, "ns", "db.c");
        BSON_APPEND_DOCUMENT(&ref, "o", &o);
        BSON_APPEND_INT32(&ref, "stmtId", 3);
        bson_append_timestamp(&ref, "ts", 2, 1700000001, 1);
        BSON_APPEND_INT64(&ref, "t", 2);
        BSON_APPEND_INT64(&ref, "v", 2);
        BSON_APPEND_DATE_TIME(&ref, "wall", 1700000001000);
        if (pre)
            append_optime_ref(&ref, "preImageOpTime", SBL_TS(1700000000, 12), -3);
        append_optime_ref(&ref, "prevOpTime", SBL_TS(1700000000, 9), 2);
        bson_reinit(&out);
        sbl_repl_entry_build(&e, &out, NULL);
        CHECK(out.len == ref.len && memcmp(bson_get_data(&out), bson_get_data(&ref), ref.len) == 0);
        bson_destroy(&ref);
    }
    /* no previous statement: {ts: Timestamp(0, 0), t: -1} */
    st.prev_ts = 0;
    sbl_oplog_entry_t c = {.op = 'c', .ns = "admin.$cmd", .o = &o, .stmt = &st, .ts = 1,
                           .no_stmt_id = true};
    bson_reinit(&out);
    sbl_repl_entry_build(&c, &out, NULL);
    bson_iter_t it;
    CHECK(!bson_has_field(&out, "stmtId"));
    CHECK(bson_iter_init_find(&it, &out, "prevOpTime") && BSON_ITER_HOLDS_DOCUMENT(&it));
    bson_iter_t pt;
    CHECK(bson_iter_init(&it, &out) && bson_iter_find_descendant(&it, "prevOpTime.t", &pt) &&
          bson_iter_int64(&pt) == -1);

    static const char *const states[] = {NULL, "committed", "prepared"};
    for (int i = 0; i < 3; i++) {
        bson_t ref = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&ref, "_id", &l);
        BSON_APPEND_INT64(&ref, "txnNum", INT64_MAX - i);
        append_optime_ref(&ref, "lastWriteOpTime", SBL_TS(UINT32_MAX, 0x80000001), -1);
        BSON_APPEND_DATE_TIME(&ref, "lastWriteDate", -5);
        if (states[i] != NULL)
            BSON_APPEND_UTF8(&ref, "state", states[i]);
        uint8_t buf[256];
        size_t n = sbl_repl_record_encode(&l, INT64_MAX - i, SBL_TS(UINT32_MAX, 0x80000001), -1,
                                          -5, states[i], buf, sizeof(buf));
        CHECK(n == ref.len && memcmp(buf, bson_get_data(&ref), n) == 0);
        CHECK(sbl_repl_record_encode(&l, 1, 1, 1, 1, states[i], buf, n - 1) == n);
        bson_destroy(&ref);
    }
    bson_destroy(&out);
    bson_destroy(&o);
    bson_destroy(&l);
}

/* A transaction's operation encoded as libbson's appenders give it. */
/* Every shape of entry, byte for byte as libbson's appenders build it in
 * mongod's field order (sbl_repl_entry_build encodes it in one piece). */
static void test_entry_bytes(void)
{
    static const uint8_t uuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    sbl_repl_stmt_t st = {.txn_number = -9, .stmt_id = -1, .prev_ts = SBL_TS(1700000000, 9),
                          .prev_term = 4};
    for (int i = 0; i < 16; i++)
        st.lsid_id[i] = (uint8_t)(0x30 + i);
    for (int i = 0; i < 32; i++)
        st.lsid_uid[i] = (uint8_t)(11 * i);
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER, diff = BSON_INITIALIZER;
    bson_t l = BSON_INITIALIZER, out;
    BSON_APPEND_UTF8(&o, "$set", "a long enough value to pass the inline buffer of a bson_t");
    BSON_APPEND_INT32(&o2, "_id", 7);
    BSON_APPEND_INT64(&diff, "u", 1);
    BSON_APPEND_BINARY(&l, "id", BSON_SUBTYPE_UUID, st.lsid_id, 16);
    BSON_APPEND_BINARY(&l, "uid", BSON_SUBTYPE_BINARY, st.lsid_uid, 32);
    for (int m = 0; m < 128; m++) {
        bool stmt = m & 1, ui = m & 2, has_o2 = m & 4, has_diff = m & 8, mig = m & 16,
             no_id = m & 32, pre = m & 64;
        sbl_oplog_entry_t e = {.op = 'u', .ns = m % 3 ? "db.coll" : "", .uuid = ui ? uuid : NULL,
                               .o = &o, .o2 = has_o2 ? &o2 : NULL, .diff = has_diff ? &diff : NULL,
                               .ts = SBL_TS(1700000002, 5 + m), .term = m - 3,
                               .wall_ms = -17 - m, .stmt = stmt ? &st : NULL, .no_stmt_id = no_id,
                               .pre_ts = pre ? SBL_TS(1700000000, 12) : 0, .pre_term = 3,
                               .from_migrate = mig};
        bson_t ref = BSON_INITIALIZER;
        if (stmt) {
            BSON_APPEND_DOCUMENT(&ref, "lsid", &l);
            BSON_APPEND_INT64(&ref, "txnNumber", -9);
        }
        BSON_APPEND_UTF8(&ref, "op", "u");
        BSON_APPEND_UTF8(&ref, "ns", e.ns);
        if (ui)
            bson_append_binary(&ref, "ui", 2, BSON_SUBTYPE_UUID, uuid, 16);
        BSON_APPEND_DOCUMENT(&ref, "o", &o);
        if (has_o2)
            BSON_APPEND_DOCUMENT(&ref, "o2", &o2);
        if (stmt && !no_id)
            BSON_APPEND_INT32(&ref, "stmtId", -1);
        if (has_diff)
            BSON_APPEND_DOCUMENT(&ref, "diff", &diff);
        if (mig)
            BSON_APPEND_BOOL(&ref, "fromMigrate", true);
        bson_append_timestamp(&ref, "ts", 2, 1700000002, (uint32_t)(5 + m));
        BSON_APPEND_INT64(&ref, "t", m - 3);
        BSON_APPEND_INT64(&ref, "v", 2);
        BSON_APPEND_DATE_TIME(&ref, "wall", -17 - m);
        if (stmt && pre)
            append_optime_ref(&ref, "preImageOpTime", SBL_TS(1700000000, 12), 3);
        if (stmt)
            append_optime_ref(&ref, "prevOpTime", SBL_TS(1700000000, 9), 4);
        bson_init(&out);
        sbl_doc_index_t ix, want;
        sbl_repl_entry_build(&e, &out, &ix);
        CHECK(out.len == ref.len && memcmp(bson_get_data(&out), bson_get_data(&ref), ref.len) == 0);
        sbl_doc_index_build(&want, &out); /* the index it gives is the walk's */
        CHECK(ix.data == bson_get_data(&out) && ix.len == out.len && ix.n == want.n &&
              memcmp(ix.at, want.at, want.n * sizeof(want.at[0])) == 0 &&
              memcmp(ix.klen, want.klen, want.n) == 0);
        bson_destroy(&out);
        bson_destroy(&ref);
    }
    bson_destroy(&o);
    bson_destroy(&o2);
    bson_destroy(&diff);
    bson_destroy(&l);
}

static void test_op_encoding(void)
{
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER, diff = BSON_INITIALIZER;
    const uint8_t uuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    BSON_APPEND_INT32(&o, "_id", 7);
    BSON_APPEND_UTF8(&o, "s", "x");
    BSON_APPEND_INT32(&o2, "_id", 7);
    BSON_APPEND_INT32(&diff, "u", 1);
    for (int mask = 0; mask < 8; mask++) {
        const uint8_t *u = (mask & 1) ? uuid : NULL;
        const bson_t *b2 = (mask & 2) ? &o2 : NULL, *bd = (mask & 4) ? &diff : NULL;
        bson_t ref = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&ref, "op", mask & 1 ? "u" : "i");
        BSON_APPEND_UTF8(&ref, "ns", "db.coll");
        if (u != NULL)
            bson_append_binary(&ref, "ui", 2, BSON_SUBTYPE_UUID, u, 16);
        BSON_APPEND_DOCUMENT(&ref, "o", &o);
        if (b2 != NULL)
            BSON_APPEND_DOCUMENT(&ref, "o2", b2);
        if (bd != NULL)
            BSON_APPEND_DOCUMENT(&ref, "diff", bd);
        uint8_t buf[256];
        size_t n = sbl_repl_op_encode(mask & 1 ? 'u' : 'i', "db.coll", u, &o, b2, bd, buf,
                                      sizeof(buf));
        CHECK(n == ref.len && memcmp(buf, bson_get_data(&ref), n) == 0);
        CHECK(sbl_repl_op_encode('u', "db.coll", u, &o, b2, bd, buf, n - 1) == n);
        bson_destroy(&ref);
    }
    bson_destroy(&o);
    bson_destroy(&o2);
    bson_destroy(&diff);
}

static void test_election_id_and_size(void)
{
    bson_oid_t oid;
    char hex[25];
    sbl_repl_election_id(1, &oid);
    bson_oid_to_string(&oid, hex);
    CHECK(strcmp(hex, "7fffffff0000000000000001") == 0);
    CHECK(sbl_repl_default_oplog_bytes(0) == 990LL * 1024 * 1024);
    CHECK(sbl_repl_default_oplog_bytes(100ULL << 30) == (int64_t)((100ULL << 30) / 20));
    CHECK(sbl_repl_default_oplog_bytes(10ULL << 40) == 50LL * 1024 * 1024 * 1024);
}

/* Entries in the oplog, and the last one's ts. */
static int64_t oplog_count(uint64_t *last)
{
    sbl_session_t *s = sbl_session_get();
    sbl_coll_t *c = NULL;
    sbl_natural_t *scan;
    sbl_err_t err;
    bson_t doc;
    bson_iter_t it;
    uint64_t pos;
    bool done = false;
    int64_t n = 0;

    *last = 0;
    if (sbl_coll_open(s, SBL_OPLOG_NS, false, &c, NULL, &err) != 0 ||
        sbl_natural_open(s, c, 0, false, &scan, &err) != 0)
        return -1;
    while (sbl_natural_next(scan, &doc, &pos, &done, &err) == 0 && !done) {
        uint32_t t, i;
        if (bson_iter_init_find(&it, &doc, "ts")) {
            bson_iter_timestamp(&it, &t, &i);
            if (SBL_TS(t, i) <= *last)
                return -2; /* not increasing */
            *last = SBL_TS(t, i);
        }
        n++;
    }
    sbl_natural_close(scan);
    sbl_coll_release(c);
    return n;
}

static int insert(sbl_coll_t *c, int id, bool commit, sbl_err_t *err)
{
    sbl_session_t *s = sbl_session_get();
    bson_t doc = BSON_INITIALIZER;
    int rc;
    BSON_APPEND_INT32(&doc, "_id", id);
    if ((rc = sbl_txn_begin(s, err)) == 0) {
        rc = sbl_write(s, c, SBL_WRITE_INSERT, NULL, &doc, NULL, err);
        if (rc == 0 && commit)
            rc = sbl_txn_commit(s, err);
        else
            sbl_txn_abort(s);
    }
    bson_destroy(&doc);
    return rc;
}

static void test_oplog_writer(void)
{
    sbl_storage_config_t cfg = {.dbpath = dbpath, .cache_size_gb = 0.25};
    sbl_err_t err;
    sbl_coll_t *c = NULL, *lc = NULL;
    uint64_t last = 0, last2 = 0;
    bool found;

    CHECK(sbl_storage_open(&cfg, &err) == 0);
    sbl_session_t *s = sbl_session_get();
    CHECK(sbl_oplog_open(s, 1 << 20, true, &err) == 0);
    sbl_oplog_set_active(true);
    sbl_storage_set_write_observer(sbl_oplog_observe);
    sbl_storage_set_commit_observer(sbl_oplog_on_commit); /* ends reservations */
    CHECK(sbl_coll_open(s, "db.c", true, &c, NULL, &err) == 0);
    CHECK(sbl_coll_open(s, "local.x", true, &lc, NULL, &err) == 0);

    CHECK(insert(c, 1, true, &err) == 0);
    CHECK(oplog_count(&last) == 1);
    /* aborted: neither the document nor its entry */
    CHECK(insert(c, 2, false, &err) == 0);
    CHECK(oplog_count(&last2) == 1 && last2 == last);
    /* the aborted write took a ts (and, after a step-down, the new term):
     * the newest committed entry is still the first one */
    uint64_t cts = 0;
    int64_t cterm = -1;
    CHECK(sbl_oplog_last_ts() > last);
    CHECK(sbl_oplog_last_committed(s, &cts, &cterm, &err) == 0 && cts == last && cterm == 1);
    sbl_oplog_set_term(5);
    CHECK(insert(c, 3, false, &err) == 0);
    CHECK(sbl_oplog_last_term() == 5);
    CHECK(sbl_oplog_last_committed(s, &cts, &cterm, &err) == 0 && cts == last && cterm == 1);
    sbl_oplog_set_term(1);
    bson_value_t id = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 2};
    bson_t doc;
    CHECK(sbl_coll_get(s, c, &id, &doc, &found, &err) == 0 && !found);
    /* a failed write (duplicate _id) writes no entry */
    CHECK(insert(c, 1, true, &err) == SBL_E_DuplicateKey);
    CHECK(oplog_count(&last2) == 1);
    /* local.* is not logged */
    CHECK(insert(lc, 1, true, &err) == 0);
    CHECK(oplog_count(&last2) == 1);
    for (int i = 10; i < 110; i++)
        insert(c, i, true, &err);
    CHECK(oplog_count(&last2) == 101 && last2 > last);

    /* reopen: timestamps resume past the newest entry */
    sbl_coll_release(c);
    sbl_coll_release(lc);
    sbl_storage_set_write_observer(NULL);
    sbl_storage_set_commit_observer(NULL);
    sbl_oplog_close();
    sbl_storage_close();
    CHECK(sbl_storage_open(&cfg, &err) == 0);
    s = sbl_session_get();
    CHECK(sbl_oplog_open(s, 1 << 20, false, &err) == 0);
    CHECK(sbl_oplog_last_ts() == last2);
    sbl_oplog_set_active(true);
    sbl_storage_set_write_observer(sbl_oplog_observe);
    sbl_storage_set_commit_observer(sbl_oplog_on_commit); /* ends reservations */
    CHECK(sbl_coll_open(s, "db.c", false, &c, NULL, &err) == 0);
    CHECK(insert(c, 500, true, &err) == 0);
    CHECK(oplog_count(&last) == 102 && last > last2);
    sbl_coll_release(c);
    sbl_storage_set_write_observer(NULL);
    sbl_storage_set_commit_observer(NULL);
    sbl_oplog_close();
    sbl_storage_close();
}

/* The visibility point on its own: reservations end in any order. */
static void test_visibility_point(void)
{
    int a, b, c;
    sbl_oplog_vis_reset(true, 10, 1);
    CHECK(sbl_oplog_vis_limit() == 10 && sbl_oplog_committed().ts == 10);
    sbl_oplog_vis_reserve(11, 1, &a);
    sbl_oplog_vis_reserve(12, 1, &b);
    sbl_oplog_vis_reserve(13, 2, &c);
    CHECK(sbl_oplog_vis_limit() == 10);
    sbl_oplog_vis_end(&c, true); /* 13 before 11 and 12: nothing moves */
    CHECK(sbl_oplog_vis_limit() == 10 && sbl_oplog_committed().ts == 10);
    sbl_oplog_vis_end(&a, false); /* 11 rolled back: not reported, not waited for */
    CHECK(sbl_oplog_vis_limit() == 11 && sbl_oplog_committed().ts == 10);
    sbl_oplog_vis_end(&b, true);
    CHECK(sbl_oplog_vis_limit() == 13);
    CHECK(sbl_oplog_committed().ts == 13 && sbl_oplog_committed().t == 2);
    sbl_oplog_vis_reserve(14, 2, &a); /* the limit never covers a later reservation */
    CHECK(sbl_oplog_vis_limit() == 13);
    sbl_oplog_vis_end(&a, true);
    CHECK(sbl_oplog_vis_limit() == 14 && sbl_oplog_committed().ts == 14);
    sbl_oplog_vis_end(&b, true); /* nothing of its left: no change */
    CHECK(sbl_oplog_committed().ts == 14);
    sbl_oplog_vis_reset(false, 0, 0); /* not ready: scans are not limited */
    CHECK(sbl_oplog_vis_limit() == UINT64_MAX);
}

/* Two writers on the oplog: the later one commits first, and natural scans
 * and the reported position wait for the earlier one, committed or not. */
static void test_parallel_commits(void)
{
    sbl_storage_config_t cfg = {.dbpath = dbpath, .cache_size_gb = 0.25};
    sbl_err_t err;
    sbl_coll_t *c = NULL;
    uint64_t last = 0, last2 = 0;
    bson_t doc = BSON_INITIALIZER;

    CHECK(sbl_storage_open(&cfg, &err) == 0);
    sbl_session_t *s = sbl_session_get(), *held = sbl_session_open();
    CHECK(held != NULL);
    CHECK(sbl_oplog_open(s, 1 << 20, true, &err) == 0);
    sbl_oplog_set_active(true);
    sbl_storage_set_write_observer(sbl_oplog_observe);
    sbl_storage_set_commit_observer(sbl_oplog_on_commit);
    CHECK(sbl_coll_open(s, "db.par", true, &c, NULL, &err) == 0);
    int64_t before = oplog_count(&last);
    uint64_t seen = sbl_oplog_committed().ts;
    for (int round = 0; round < 2; round++) {
        bool commit = round == 0;
        bson_reinit(&doc);
        BSON_APPEND_INT32(&doc, "_id", 1000 + round);
        CHECK(sbl_txn_begin(held, &err) == 0);
        CHECK(sbl_write(held, c, SBL_WRITE_INSERT, NULL, &doc, NULL, &err) == 0);
        /* the held write released the lock: a later one takes its ts and commits */
        CHECK(insert(c, 2000 + round, true, &err) == 0);
        CHECK(oplog_count(&last2) == before && last2 == last);
        CHECK(sbl_oplog_committed().ts == seen);
        if (commit)
            CHECK(sbl_txn_commit(held, &err) == 0);
        else
            sbl_txn_abort(held);
        before += commit ? 2 : 1;
        CHECK(oplog_count(&last) == before && last > last2);
        CHECK(sbl_oplog_committed().ts == last);
        seen = last;
    }
    bson_destroy(&doc);
    sbl_coll_release(c);
    sbl_session_close(held);
    sbl_storage_set_write_observer(NULL);
    sbl_storage_set_commit_observer(NULL);
    sbl_oplog_close();
    sbl_storage_close();
}

/* The collection an entry creates, and the UUID it names it by. */
static void test_entry_created_ns(void)
{
    static const uint8_t uuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    const char *const cases[][3] = {
        /* op, o (JSON), the collection (NULL: none) */
        {"c", "{\"create\": \"x\", \"capped\": true}", "db.x"},
        {"c", "{\"createIndexes\": \"y\", \"v\": 2, \"name\": \"k_1\"}", "db.y"},
        {"c", "{\"renameCollection\": \"db.c\", \"to\": \"db2.d\"}", NULL},
        {"c", "{\"drop\": \"c\"}", NULL},
        {"c", "{\"create\": 1}", NULL},
        {"i", "{\"_id\": 1}", "db.c"},
        {"u", "{\"_id\": 1}", "db.c"},
        {"d", "{\"_id\": 1}", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bson_t e = BSON_INITIALIZER,
               *o = bson_new_from_json((const uint8_t *)cases[i][1], -1, NULL);
        char ns[300];
        const uint8_t *got = NULL;
        BSON_APPEND_UTF8(&e, "op", cases[i][0]);
        BSON_APPEND_UTF8(&e, "ns", cases[i][0][0] == 'c' ? "db.$cmd" : "db.c");
        BSON_APPEND_BINARY(&e, "ui", BSON_SUBTYPE_UUID, uuid, 16);
        BSON_APPEND_DOCUMENT(&e, "o", o);
        bool yes = sbl_repl_entry_created_ns(&e, ns, sizeof(ns), &got);
        CHECK(yes == (cases[i][2] != NULL));
        if (yes && cases[i][2] != NULL)
            CHECK(strcmp(ns, cases[i][2]) == 0 && got != NULL && memcmp(got, uuid, 16) == 0);
        /* without a UUID "ui", or with no room for the name: none */
        bson_t noui = BSON_INITIALIZER;
        bson_copy_to_excluding_noinit(&e, &noui, "ui", NULL);
        CHECK(!sbl_repl_entry_created_ns(&noui, ns, sizeof(ns), &got));
        CHECK(!sbl_repl_entry_created_ns(&e, ns, 4, &got));
        bson_destroy(&noui);
        bson_destroy(o);
        bson_destroy(&e);
    }
}

/* The diff of an update: fields updated in place (the same keys in the same
 * order, walked side by side), and fields removed, inserted or moved. */
static void test_diff(void)
{
    static const char *cases[][3] = {
        {"{\"_id\": 1, \"n\": 1, \"s\": {\"a\": 1, \"b\": 1}, \"a\": [1, 2], \"k\": \"x\"}",
         "{\"_id\": 1, \"n\": 2, \"s\": {\"a\": 2, \"b\": 1}, \"a\": [1, 3], \"k\": \"x\"}",
         "{\"u\": {\"n\": 2}, \"ss\": {\"u\": {\"a\": 2}}, \"sa\": {\"a\": true, \"u1\": 3}}"},
        {"{\"_id\": 1, \"n\": 1}", "{\"_id\": 1, \"n\": 1}", "{}"},
        {"{\"_id\": 1, \"n\": 1}", "{\"_id\": 1, \"n\": \"1\"}", "{\"u\": {\"n\": \"1\"}}"},
        {"{\"_id\": 1, \"a\": 1, \"c\": 3}", "{\"_id\": 1, \"b\": 2, \"c\": 4}",
         "{\"d\": {\"a\": false}, \"u\": {\"c\": 4}, \"i\": {\"b\": 2}}"},
        {"{\"_id\": 1, \"a\": 1, \"b\": 2}", "{\"_id\": 1, \"b\": 2, \"a\": 1}", "{}"},
        {"{}", "{\"_id\": 1}", "{\"i\": {\"_id\": 1}}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bson_error_t e;
        bson_t *o = bson_new_from_json((const uint8_t *)cases[i][0], -1, &e);
        bson_t *n = bson_new_from_json((const uint8_t *)cases[i][1], -1, &e);
        bson_t *want = bson_new_from_json((const uint8_t *)cases[i][2], -1, &e);
        bson_t got = BSON_INITIALIZER;
        sbl_repl_diff(o, n, &got);
        CHECK_MSG(bson_equal(&got, want), "diff case %zu", i);
        bson_destroy(&got);
        bson_destroy(o);
        bson_destroy(n);
        bson_destroy(want);
    }
}

/* A random value for the round trip below: scalars, documents and arrays
 * nested up to depth levels. */
static unsigned rnd_state = 12345;
static unsigned rnd(unsigned n)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return (rnd_state >> 16) % n;
}

static void random_value(bson_t *out, const char *key, int depth);

static void random_doc(bson_t *out, int depth, int nfields)
{
    for (int i = 0; i < nfields; i++) {
        char k[16];
        snprintf(k, sizeof(k), "f%d", i);
        random_value(out, k, depth);
    }
}

static void random_value(bson_t *out, const char *key, int depth)
{
    bson_t child;
    switch (depth > 0 ? rnd(6) : rnd(3)) {
    case 0:
        BSON_APPEND_INT32(out, key, (int32_t)rnd(5));
        break;
    case 1:
        BSON_APPEND_UTF8(out, key, rnd(2) ? "x" : "yy");
        break;
    case 2:
        BSON_APPEND_NULL(out, key);
        break;
    case 3:
    case 4:
        BSON_APPEND_DOCUMENT_BEGIN(out, key, &child);
        random_doc(&child, depth - 1, (int)rnd(4));
        bson_append_document_end(out, &child);
        break;
    default:
        BSON_APPEND_ARRAY_BEGIN(out, key, &child);
        for (unsigned i = 0, n = rnd(5); i < n; i++) {
            char k[16];
            snprintf(k, sizeof(k), "%u", i);
            random_value(&child, k, depth - 1);
        }
        bson_append_array_end(out, &child);
    }
}

/* v changed at random as an update would change it: fields kept in their
 * order, some set to new values, removed or descended into, new ones at the
 * end; array elements changed, the array grown or cut. */
static void mutate(const bson_iter_t *v, bson_t *out, const char *key, int depth, bool array)
{
    bson_iter_t c;
    bson_t child;
    if (array)
        bson_append_array_begin(out, key, -1, &child);
    else
        bson_append_document_begin(out, key, -1, &child);
    unsigned n = 0;
    bson_iter_recurse(v, &c);
    unsigned cut = array && rnd(2) == 0 ? rnd(3) : UINT32_MAX;
    while (bson_iter_next(&c) && n < cut) {
        char k[16];
        const char *ck = bson_iter_key(&c);
        if (array)
            snprintf(k, sizeof(k), "%u", n), ck = k;
        unsigned r = rnd(6);
        if (r == 0 && !array)
            continue; /* removed */
        if (r == 1)
            random_value(&child, ck, 2);
        else if (r == 2 && (BSON_ITER_HOLDS_DOCUMENT(&c) || BSON_ITER_HOLDS_ARRAY(&c)))
            mutate(&c, &child, ck, depth + 1, BSON_ITER_HOLDS_ARRAY(&c));
        else
            sbl_append_iter(&child, ck, -1, &c);
        n++;
    }
    for (unsigned i = 0, add = rnd(3) == 0 ? rnd(3) : 0; i < add; i++) {
        char k[16];
        if (array)
            snprintf(k, sizeof(k), "%u", n++);
        else
            snprintf(k, sizeof(k), "n%d_%u", depth, i);
        bson_iter_t dup;
        if (!array && bson_iter_recurse(v, &dup) && bson_iter_find(&dup, k))
            continue;
        random_value(&child, k, 1);
    }
    if (array)
        bson_append_array_end(out, &child);
    else
        bson_append_document_end(out, &child);
}

/* A random document for round (pre) and it changed as an update would
 * (mutate): *after is a view of the new document inside post, which the
 * caller destroys with pre. */
static void random_update(int round, bson_t *pre, bson_t *post, bson_t *after)
{
    bson_t wrap = BSON_INITIALIZER;
    bson_iter_t it, x;
    BSON_APPEND_INT32(pre, "_id", round);
    random_doc(pre, 3, 1 + (int)rnd(6));
    BSON_APPEND_DOCUMENT(&wrap, "x", pre);
    bson_iter_init_find(&it, &wrap, "x");
    mutate(&it, post, "x", 0, false);
    bson_destroy(&wrap);
    bson_iter_init_find(&x, post, "x");
    sbl_iter_doc(&x, after);
}

/* Applying a diff: sbl_repl_diff's diffs give the new document back, byte
 * for byte, when the fields both have keep their order; mongod's own forms
 * (an insert of a field the document has, an array cut or padded, a
 * sub-diff of a field of another kind); diffs that are none. */
static void test_diff_apply(void)
{
    int exact = 0, kinds[6] = {0}; /* any diff, d, i, an array's, l, a sub-diff */
    for (int round = 0; round < 3000; round++) {
        bson_t pre = BSON_INITIALIZER, post = BSON_INITIALIZER, after;
        bson_t diff = BSON_INITIALIZER, got = BSON_INITIALIZER;
        random_update(round, &pre, &post, &after);
        sbl_repl_diff(&pre, &after, &diff);
        sbl_err_t err;
        sbl_err_clear(&err);
        CHECK(sbl_repl_diff_apply(&pre, &diff, &got, &err) == 0);
        if (!bson_equal(&got, &after)) {
            char *a = bson_as_relaxed_extended_json(&pre, NULL);
            char *b = bson_as_relaxed_extended_json(&after, NULL);
            char *d = bson_as_relaxed_extended_json(&diff, NULL);
            char *g = bson_as_relaxed_extended_json(&got, NULL);
            CHECK_MSG(false, "round %d: %s + %s gave %s, not %s", round, a, d, g, b);
            bson_free(a), bson_free(b), bson_free(d), bson_free(g);
        } else {
            exact++;
        }
        char *dj = bson_as_relaxed_extended_json(&diff, NULL);
        kinds[0] += !bson_empty(&diff);
        kinds[1] += strstr(dj, "\"d\"") != NULL;
        kinds[2] += strstr(dj, "\"i\"") != NULL;
        kinds[3] += strstr(dj, "\"a\" : true") != NULL;
        kinds[4] += strstr(dj, "\"l\"") != NULL;
        kinds[5] += strstr(dj, "{ \"s") != NULL || strstr(dj, ", \"s") != NULL;
        bson_free(dj);
        bson_destroy(&pre), bson_destroy(&post);
        bson_destroy(&diff), bson_destroy(&got);
    }
    CHECK(exact == 3000);
    /* the rounds cover every part of a diff */
    for (int k = 0; k < 6; k++)
        CHECK_MSG(kinds[k] >= 100, "diff part %d in %d rounds only", k, kinds[k]);

    static const char *cases[][3] = {
        /* insert of a field the document has: moved to the end */
        {"{\"_id\": 1, \"a\": 1, \"b\": 2}", "{\"i\": {\"a\": 3}}",
         "{\"_id\": 1, \"b\": 2, \"a\": 3}"},
        /* update of a field it lacks: appended; delete of one it lacks: nothing */
        {"{\"_id\": 1}", "{\"u\": {\"a\": 1}, \"d\": {\"z\": false}}", "{\"_id\": 1, \"a\": 1}"},
        /* array cut to 1, then grown past its end with a gap */
        {"{\"a\": [1, 2, 3]}", "{\"sa\": {\"a\": true, \"l\": 1}}", "{\"a\": [1]}"},
        {"{\"a\": [1]}", "{\"sa\": {\"a\": true, \"u3\": 4}}", "{\"a\": [1, null, null, 4]}"},
        {"{\"a\": [{\"b\": 1}, 2]}", "{\"sa\": {\"a\": true, \"s0\": {\"u\": {\"b\": 5}}}}",
         "{\"a\": [{\"b\": 5}, 2]}"},
        /* sub-diffs of a field of another kind, or of none: ignored */
        {"{\"a\": 1, \"b\": [1]}",
         "{\"sa\": {\"u\": {\"x\": 1}}, \"sb\": {\"u\": {\"x\": 1}}, \"sc\": {\"a\": true}}",
         "{\"a\": 1, \"b\": [1]}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bson_error_t e;
        bson_t *pre = bson_new_from_json((const uint8_t *)cases[i][0], -1, &e);
        bson_t *diff = bson_new_from_json((const uint8_t *)cases[i][1], -1, &e);
        bson_t *want = bson_new_from_json((const uint8_t *)cases[i][2], -1, &e);
        bson_t got = BSON_INITIALIZER;
        sbl_err_t err;
        sbl_err_clear(&err);
        CHECK(pre != NULL && diff != NULL && want != NULL);
        CHECK_MSG(sbl_repl_diff_apply(pre, diff, &got, &err) == 0 && bson_equal(&got, want),
                  "diff apply case %zu: %s", i, err.msg);
        bson_destroy(&got), bson_destroy(pre), bson_destroy(diff), bson_destroy(want);
    }
    static const char *bad[] = {"{\"x\": {}}", "{\"u\": 1}", "{\"sa\": 1}",
                                "{\"sa\": {\"a\": true, \"q\": 1}}",
                                "{\"sa\": {\"a\": true, \"u01\": 1}}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        bson_error_t e;
        bson_t *pre = bson_new_from_json((const uint8_t *)"{\"a\": [1]}", -1, &e);
        bson_t *diff = bson_new_from_json((const uint8_t *)bad[i], -1, &e);
        bson_t got = BSON_INITIALIZER;
        sbl_err_t err;
        sbl_err_clear(&err);
        CHECK_MSG(sbl_repl_diff_apply(pre, diff, &got, &err) == SBL_E_FailedToParse, "bad diff %zu",
                  i);
        bson_destroy(&got), bson_destroy(pre), bson_destroy(diff);
    }
}

/* v's fields as mutate leaves them, but now and then out of order: two
 * fields swapped, or a new field put in the middle (what $rename or a
 * pipeline update can do). */
static void shuffle(const bson_t *v, bson_t *out)
{
    bson_iter_t it;
    unsigned n = 0, a, b;
    bson_iter_init(&it, v);
    while (bson_iter_next(&it))
        n++;
    a = rnd(n ? n : 1), b = rnd(n ? n : 1);
    bool middle = rnd(2) == 0;
    for (unsigned pass = 0; pass < n; pass++) {
        unsigned want = pass == a ? b : pass == b ? a : pass;
        bson_iter_init(&it, v);
        for (unsigned i = 0; bson_iter_next(&it); i++)
            if (i == want)
                sbl_append_iter(out, bson_iter_key(&it), -1, &it);
        if (middle && pass == n / 2)
            BSON_APPEND_INT32(out, "mid", 7);
    }
}

static bson_t *json(const char *s)
{
    bson_error_t e;
    return bson_new_from_json((const uint8_t *)s, -1, &e);
}

/* sbl_repl_diff_exact: when it says the diff gives the new document back
 * byte for byte, it does; it says so for an update of existing fields'
 * values, and not for fields moved or put between others, a key the
 * document has twice, or an array whose keys are not 0, 1, 2 ... */
static void test_diff_exact(void)
{
    int said = 0, not_said = 0;
    for (int round = 0; round < 3000; round++) {
        bson_t pre = BSON_INITIALIZER, post = BSON_INITIALIZER, mutated;
        bson_t after = BSON_INITIALIZER, diff = BSON_INITIALIZER, got = BSON_INITIALIZER;
        random_update(round, &pre, &post, &mutated);
        if (round % 3 == 0)
            shuffle(&mutated, &after);
        else
            bson_concat(&after, &mutated);
        bool exact = sbl_repl_diff_exact(&pre, &after, &diff);
        sbl_err_t err;
        sbl_err_clear(&err);
        CHECK(sbl_repl_diff_apply(&pre, &diff, &got, &err) == 0);
        if (exact) {
            said++;
            CHECK_MSG(bson_equal(&got, &after), "round %d: said exact, is not", round);
        } else {
            not_said++;
        }
        bson_destroy(&pre), bson_destroy(&post);
        bson_destroy(&after), bson_destroy(&diff), bson_destroy(&got);
    }
    CHECK_MSG(said >= 300 && not_said >= 300, "exact %d, not %d", said, not_said);

    static const char *cases[][3] = {
        /* pre, post, "1": exact */
        {"{\"_id\": 1, \"a\": 1, \"b\": {\"c\": [1, 2]}}",
         "{\"_id\": 1, \"a\": 2, \"b\": {\"c\": [1, 3, 4]}}", "1"},
        {"{\"_id\": 1, \"a\": 1, \"b\": 2}", "{\"_id\": 1, \"b\": 2, \"a\": 1}", "0"},
        {"{\"_id\": 1, \"a\": 1}", "{\"_id\": 1, \"n\": 0, \"a\": 1}", "0"},
        {"{\"_id\": 1, \"a\": 1, \"a\": 2}", "{\"_id\": 1, \"a\": 1, \"a\": 3}", "0"},
        {"{\"_id\": 1, \"s\": {\"a\": 1, \"a\": 2}}", "{\"_id\": 1, \"s\": {\"a\": 1, \"a\": 3}}",
         "0"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bson_t *pre = json(cases[i][0]), *post = json(cases[i][1]);
        bson_t diff = BSON_INITIALIZER;
        CHECK(pre != NULL && post != NULL);
        CHECK_MSG(sbl_repl_diff_exact(pre, post, &diff) == (cases[i][2][0] == '1'),
                  "exact case %zu", i);
        bson_destroy(&diff), bson_destroy(pre), bson_destroy(post);
    }
    /* an array with keys other than 0, 1 ...: the applier renumbers it */
    bson_t pre = BSON_INITIALIZER, post = BSON_INITIALIZER, arr, diff = BSON_INITIALIZER;
    BSON_APPEND_ARRAY_BEGIN(&pre, "a", &arr);
    BSON_APPEND_INT32(&arr, "0", 1);
    BSON_APPEND_INT32(&arr, "7", 2);
    bson_append_array_end(&pre, &arr);
    BSON_APPEND_ARRAY_BEGIN(&post, "a", &arr);
    BSON_APPEND_INT32(&arr, "0", 5);
    BSON_APPEND_INT32(&arr, "7", 2);
    bson_append_array_end(&post, &arr);
    CHECK(!sbl_repl_diff_exact(&pre, &post, &diff));
    bson_destroy(&pre), bson_destroy(&post), bson_destroy(&diff);
}

int main(void)
{
    test_ts_next();
    test_entry_shape();
    test_session_encoding();
    test_entry_bytes();
    test_diff();
    test_diff_apply();
    test_diff_exact();
    test_op_encoding();
    test_entry_created_ns();
    test_election_id_and_size();

    strcpy(dbpath, "/tmp/sable-test-repl-XXXXXX");
    if (mkdtemp(dbpath) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_oplog_writer();
    test_visibility_point();
    test_parallel_commits();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dbpath);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dbpath);
    return CHECK_DONE("test_repl");
}
