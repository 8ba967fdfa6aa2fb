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

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "op/op.h"

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

/*
 * Records written without a caller's hint (a member applying a session's
 * entries, a transaction's decision) keep theirs here: the version each
 * session's record had when last written, by the record's lsid, in a small
 * direct-mapped table.  A hint is only that (storage.h): a stale or
 * colliding one costs the search by _id it saves (~5k instructions of
 * WiredTiger's search_near on a versioned key), never a wrong write.
 */
#define HINTS 256
typedef struct record_hint {
    uint32_t lsid_len; /* 0: empty */
    uint8_t lsid[96];
    sbl_version_t v;
} record_hint_t;
static record_hint_t hints[HINTS];
static pthread_mutex_t hints_mu = PTHREAD_MUTEX_INITIALIZER;

static record_hint_t *hint_slot(const bson_t *lsid)
{
    const uint8_t *p = bson_get_data(lsid);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (uint32_t i = 0; i < lsid->len; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return &hints[h % HINTS];
}

/* The hint kept for lsid's record into *v (key_len 0 when none). */
static void hint_get(const bson_t *lsid, sbl_version_t *v)
{
    record_hint_t *h = hint_slot(lsid);
    v->key_len = 0;
    if (lsid->len > sizeof(h->lsid))
        return;
    pthread_mutex_lock(&hints_mu);
    if (h->lsid_len == lsid->len && memcmp(h->lsid, bson_get_data(lsid), lsid->len) == 0)
        memcpy(v, &h->v, sizeof(*v));
    pthread_mutex_unlock(&hints_mu);
}

static void hint_put(const bson_t *lsid, const sbl_version_t *v)
{
    record_hint_t *h = hint_slot(lsid);
    if (lsid->len > sizeof(h->lsid))
        return;
    pthread_mutex_lock(&hints_mu);
    h->lsid_len = v->key_len > 0 ? lsid->len : 0;
    memcpy(h->lsid, bson_get_data(lsid), lsid->len);
    memcpy(&h->v, v, sizeof(*v));
    pthread_mutex_unlock(&hints_mu);
}

/* A record written with the hint kept for its lsid, which is then kept. */
static int record_write_hinted(sbl_session_t *s, const bson_t *lsid, int64_t txn, uint64_t ts,
                               int64_t term, int64_t wall_ms, const char *state, sbl_err_t *err)
{
    sbl_version_t v;
    sbl_versioned_invalidate(); /* not the session's owner writing: its copy is stale */
    hint_get(lsid, &v);
    v.known_current = false;
    int rc = sbl_txn_record_write_known(s, lsid, txn, ts, term, wall_ms, state, &v, err);
    if (rc != 0)
        v.key_len = 0;
    hint_put(lsid, &v);
    return rc;
}

int sbl_txn_record_write(sbl_session_t *s, const bson_t *lsid, int64_t txn, uint64_t ts,
                         int64_t term, int64_t wall_ms, sbl_err_t *err)
{
    return record_write_hinted(s, lsid, txn, ts, term, wall_ms, NULL, err);
}

int sbl_txn_record_write_state(sbl_session_t *s, const bson_t *lsid, int64_t txn, uint64_t ts,
                               int64_t term, int64_t wall_ms, const char *state, sbl_err_t *err)
{
    return record_write_hinted(s, lsid, txn, ts, term, wall_ms, state, err);
}

/* The number a top-level element of doc holds (its offset at, key k), as
 * BSON_ITER_HOLDS_NUMBER and bson_iter_as_int64 take it; false when it holds
 * another type. */
static bool top_number(const bson_t *doc, uint32_t at, const char *k, int64_t *vp)
{
    const uint8_t *p = bson_get_data(doc) + at, *v = p + 1 + strlen(k) + 1;
    uint64_t u = 0;
    switch (*p) {
    case BSON_TYPE_INT64:
        for (int i = 7; i >= 0; i--)
            u = (u << 8) | v[i];
        *vp = (int64_t)u;
        return true;
    case BSON_TYPE_INT32:
        for (int i = 3; i >= 0; i--)
            u = (u << 8) | v[i];
        *vp = (int32_t)(uint32_t)u;
        return true;
    case BSON_TYPE_DOUBLE: {
        bson_iter_t it;
        if (!sbl_doc_top_iter(doc, at, k, &it))
            return false;
        *vp = bson_iter_as_int64(&it);
        return true;
    }
    default:
        return false;
    }
}

/* A record's txnNum (-1: none) and, when tsp is not NULL, its
 * lastWriteOpTime (ts 0, term -1 when none), the first field of each name as
 * bson_iter_init_find would find them, read from the bytes (libbson's
 * iterators cost several times more): every retryable write and
 * transaction reads its session's record at its start and at its write, on
 * the primary and on each member that applies it. */
static int64_t record_txn_at(const bson_t *rec, uint64_t *tsp, int64_t *termp)
{
    uint32_t off = 4, at;
    const char *k;
    bool bad = false, seen_txn = false, seen_op = tsp == NULL;
    int64_t txn = -1;
    bson_iter_t it;

    if (tsp != NULL) {
        *tsp = 0;
        *termp = -1;
    }
    while ((!seen_txn || !seen_op) && sbl_doc_top_next(rec, &off, &at, &k, &bad)) {
        if (!seen_txn && strcmp(k, "txnNum") == 0) {
            seen_txn = true;
            if (!top_number(rec, at, k, &txn))
                txn = -1;
        } else if (!seen_op && strcmp(k, "lastWriteOpTime") == 0) {
            seen_op = true;
            const uint8_t *v = bson_get_data(rec) + at + 1 + strlen(k) + 1;
            uint32_t len = (uint32_t)v[0] | (uint32_t)v[1] << 8 | (uint32_t)v[2] << 16 |
                           (uint32_t)v[3] << 24;
            bson_t sub;
            uint32_t soff = 4, sat;
            const char *sk;
            bool sbad = false;
            uint64_t ts = 0;
            int64_t t = 0;
            if (bson_get_data(rec)[at] != BSON_TYPE_DOCUMENT || !bson_init_static(&sub, v, len))
                continue;
            /* as optime_at (repl_hb.c) reads one: the last of each counts */
            while (sbl_doc_top_next(&sub, &soff, &sat, &sk, &sbad)) {
                const uint8_t *sv = v + sat + 1 + strlen(sk) + 1;
                if (strcmp(sk, "ts") == 0 && v[sat] == BSON_TYPE_TIMESTAMP) {
                    ts = 0;
                    for (int i = 7; i >= 0; i--) /* increment, then seconds: SBL_TS */
                        ts = (ts << 8) | sv[i];
                } else if (strcmp(sk, "t") == 0) {
                    top_number(&sub, sat, sk, &t);
                }
            }
            if ((bad = sbad))
                break;
            *tsp = ts;
            *termp = ts != 0 ? t : -1;
        }
    }
    if (bad) { /* not walkable so: libbson's reading */
        if (tsp != NULL) {
            sbl_optime_t o = sbl_repl_optime_at(rec, "lastWriteOpTime");
            *tsp = o.ts;
            *termp = o.ts != 0 ? o.t : -1;
        }
        return bson_iter_init_find(&it, rec, "txnNum") && BSON_ITER_HOLDS_NUMBER(&it)
                   ? bson_iter_as_int64(&it)
                   : -1;
    }
    return txn;
}

/* A record's txnNum (-1: none). */
static int64_t record_txn(const bson_t *rec)
{
    return record_txn_at(rec, NULL, NULL);
}

int sbl_txn_record_write_known(sbl_session_t *s, const bson_t *lsid, int64_t txn, uint64_t ts,
                               int64_t term, int64_t wall_ms, const char *state,
                               sbl_version_t *known, sbl_err_t *err)
{
    bson_t key = BSON_INITIALIZER, old, recv, *rec = &recv;
    bson_value_t id;
    bool found = false, replaced = false;
    int rc = 0;
    uint8_t local[256], *buf = local; /* a session's record fits (lsid: 72 bytes) */

    if (txn_table == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "%s is not open", SBL_TXN_TABLE_NS);
    if (known == NULL) /* not the session's kept version: a copy its owner keeps is stale */
        sbl_versioned_invalidate();
    size_t n = sbl_repl_record_encode(lsid, txn, ts, term, wall_ms, state, buf, sizeof(local));
    if (n > sizeof(local) && ((buf = malloc(n)) == NULL ||
                              sbl_repl_record_encode(lsid, txn, ts, term, wall_ms, state, buf,
                                                     n) != n)) {
        free(buf);
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    }
    if (!bson_init_static(rec, buf, n)) {
        if (buf != local)
            free(buf);
        return sbl_err_set(err, SBL_E_InternalError, "a session record of %zu bytes", n);
    }
    /* The version the session last saw, when it is still the current one:
     * replaced by its record key, without searching for it. */
    if (known != NULL && known->key_len > 0 && bson_init_static(&old, known->doc, known->doc_len) &&
        (known->known_current || record_txn(&old) <= txn) && /* (the owner checked its txn) */
        (rc = sbl_version_replace(s, txn_table, known, rec, &replaced, err)) == 0 && !replaced)
        known->key_len = 0;
    if (rc != 0 || replaced)
        goto done;
    record_id(&key, lsid, &id);
    /* No hint (a secondary's applier, a transaction's decision), or a stale
     * one: the current version read by its _id, then replaced by its record
     * key as above (sbl_write's path would search for it again). */
    sbl_version_t cur, *v = known != NULL ? known : &cur;
    if ((rc = sbl_version_get(s, txn_table, &id, v, err)) != 0)
        goto done;
    if (v->key_len > 0 && bson_init_static(&old, v->doc, v->doc_len)) {
        if (record_txn(&old) > txn) /* a newer txnNumber's record stays */
            goto done;
        if ((rc = sbl_version_replace(s, txn_table, v, rec, &replaced, err)) != 0 || replaced)
            goto done;
    }
    /* none yet, or too big for a version, or not replaceable here */
    if ((rc = sbl_coll_get(s, txn_table, &id, &old, &found, err)) != 0)
        goto done;
    if (!found || record_txn(&old) <= txn) /* else a newer txnNumber's record stays */
        rc = sbl_write(s, txn_table, found ? SBL_WRITE_UPDATE : SBL_WRITE_INSERT,
                       found ? &old : NULL, rec, NULL, err);
    if (found)
        bson_destroy(&old);
    if (rc == 0 && known != NULL) /* the version this transaction now sees */
        rc = sbl_version_get(s, txn_table, &id, known, err);
done:
    if (buf != local)
        free(buf);
    bson_destroy(&key);
    return rc;
}

int sbl_txn_record_applied(sbl_session_t *s, const bson_t *doc, sbl_err_t *err)
{
    enum { F_TXN, F_OP, F_LSID, F_TS, F_T, F_WALL, F_O, F_N };
    static const char *const names[F_N] = {"txnNumber", "op", "lsid", "ts", "t", "wall", "o"};
    bool seen[F_N] = {false}, has_txn = false, has_lsid = false, has_o = false;
    bson_iter_t it;
    bson_t lsid, o;
    int64_t txn = 0, term = 0, wall = 0;
    uint32_t t = 0, i = 0;
    const char *op = NULL;

    /* One pass over the entry's fields (the first of each counts, as with
     * bson_iter_init_find): every entry of a session comes here on every
     * member that applies it. */
    if (!bson_iter_init(&it, doc))
        return 0;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        int n = 0;
        while (n < F_N && (seen[n] || k[0] != names[n][0] || strcmp(k, names[n]) != 0))
            n++;
        if (n == F_N)
            continue;
        seen[n] = true;
        switch (n) {
        case F_TXN:
            if ((has_txn = BSON_ITER_HOLDS_NUMBER(&it)))
                txn = bson_iter_as_int64(&it);
            break;
        case F_OP:
            op = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : NULL;
            break;
        case F_LSID:
            has_lsid = BSON_ITER_HOLDS_DOCUMENT(&it) && sbl_iter_doc(&it, &lsid);
            break;
        case F_TS:
            if (BSON_ITER_HOLDS_TIMESTAMP(&it))
                bson_iter_timestamp(&it, &t, &i);
            break;
        case F_T:
            if (BSON_ITER_HOLDS_NUMBER(&it))
                term = bson_iter_as_int64(&it);
            break;
        case F_WALL:
            if (BSON_ITER_HOLDS_DATE_TIME(&it))
                wall = bson_iter_date_time(&it);
            break;
        default:
            has_o = BSON_ITER_HOLDS_DOCUMENT(&it) && sbl_iter_doc(&it, &o);
        }
    }
    if (!has_txn || op == NULL)
        return 0;
    bson_t orig;
    if ((op[0] == 'n' && !sbl_repl_session_migrated(doc, &orig)) || !has_lsid)
        return 0; /* a pre-image no-op: the write's own entry names the statement */
    const char *state = NULL;
    if (op[0] == 'c' && has_o) {
        switch (sbl_repl_prepared_kind_o(&o)) {
        case SBL_PREP_PREPARE:
            state = "prepared";
            break;
        case SBL_PREP_COMMIT:
            state = "committed";
            break;
        case SBL_PREP_ABORT:
            state = "aborted";
            break;
        default:
            if (bson_iter_init_find(&it, &o, "applyOps"))
                state = "committed";
        }
    }
    return sbl_txn_record_write_state(s, &lsid, txn, SBL_TS(t, i), term, wall, state, err);
}

/* ---- multi-document transactions' entries --------------------------------- */

/* An applyOps array stays under this many bytes: a transaction whose
 * operations need more is written as several entries (mongod's form: all
 * but the last carry partialTxn: true; each points at the one before it
 * with prevOpTime; the last carries count, the number of operations). */
#define CHUNK_MAX_BYTES (16 * 1024 * 1024 - 64 * 1024)

/* An operation's pre-image, written at commit: entry (the index of its
 * applyOps array: full ones first, then arr) and index there. */
typedef struct txn_image {
    bson_t *doc;
    size_t entry, index;
    uint8_t uuid[16];
} txn_image_t;

struct sbl_repl_txn_ops {
    bson_t arr;    /* the applyOps array being built */
    size_t n;      /* operations in arr */
    bson_t **full; /* earlier arrays, each of them full */
    size_t nfull;
    size_t total;  /* operations in all of them */
    txn_image_t *img; /* pre-images of collections with changeStreamPreAndPostImages */
    size_t nimg, imgcap;
};

static _Thread_local sbl_repl_txn_ops_t *cur_ops;

sbl_repl_txn_ops_t *sbl_repl_txn_ops_new(void)
{
    size_t size = (sizeof(sbl_repl_txn_ops_t) + 127) & ~(size_t)127;
    sbl_repl_txn_ops_t *ops = aligned_alloc(128, size); /* it embeds a bson_t */
    if (ops == NULL)
        return NULL;
    memset(ops, 0, sizeof(*ops));
    bson_init(&ops->arr);
    return ops;
}

void sbl_repl_txn_ops_free(sbl_repl_txn_ops_t *ops)
{
    if (ops == NULL)
        return;
    bson_destroy(&ops->arr);
    for (size_t i = 0; i < ops->nfull; i++)
        bson_destroy(ops->full[i]);
    free(ops->full);
    for (size_t i = 0; i < ops->nimg; i++)
        bson_destroy(ops->img[i].doc);
    free(ops->img);
    free(ops);
}

size_t sbl_repl_txn_ops_count(const sbl_repl_txn_ops_t *ops)
{
    return ops != NULL ? ops->total : 0;
}

/* Does arr (an applyOps array) hold an operation on ns? */
static bool array_touches(const bson_t *arr, const char *ns)
{
    bson_iter_t it, f;
    bson_iter_init(&it, arr);
    while (bson_iter_next(&it)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &f) ||
            !bson_iter_find(&f, "ns") || !BSON_ITER_HOLDS_UTF8(&f))
            continue;
        if (strcmp(bson_iter_utf8(&f, NULL), ns) == 0)
            return true;
    }
    return false;
}

bool sbl_repl_txn_ops_touch(const sbl_repl_txn_ops_t *ops, const char *ns)
{
    if (ops == NULL)
        return false;
    for (size_t i = 0; i < ops->nfull; i++)
        if (array_touches(ops->full[i], ns))
            return true;
    return array_touches(&ops->arr, ns);
}

void sbl_repl_set_txn_ops(sbl_repl_txn_ops_t *ops)
{
    cur_ops = ops;
}

sbl_repl_txn_ops_t *sbl_repl_cur_txn_ops(void)
{
    return cur_ops;
}

int sbl_repl_txn_ops_add(sbl_repl_txn_ops_t *ops, char op, const char *ns, const uint8_t *uuid,
                         const bson_t *o, const bson_t *o2, const bson_t *diff,
                         const bson_t *pre_image, sbl_err_t *err)
{
    char key[16];
    bson_t d;
    size_t add = o->len + (o2 != NULL ? o2->len : 0) + (diff != NULL ? diff->len : 0) +
                 strlen(ns) + 64;
    if (add > CHUNK_MAX_BYTES)
        return sbl_err_set(err, SBL_E_TransactionTooLarge,
                           "Total size of all transaction operations must be less than 16793600");
    if (ops->n > 0 && ops->arr.len + add > CHUNK_MAX_BYTES) { /* start the next entry's */
        bson_t **l = realloc(ops->full, (ops->nfull + 1) * sizeof(*l));
        bson_t *copy = l != NULL ? bson_copy(&ops->arr) : NULL;
        if (copy == NULL) {
            if (l != NULL)
                ops->full = l;
            return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
        }
        ops->full = l;
        ops->full[ops->nfull++] = copy;
        bson_reinit(&ops->arr);
        ops->n = 0;
    }
    ops->total++;
    const char *k = sbl_array_key((uint32_t)ops->n++, key);
    /* encoded, then appended whole (libbson's nested appends cost ~3.5k
     * instructions an operation); diff as a lone entry's: change streams'
     * updateDescription */
    uint8_t local[1024], *buf = local;
    size_t n = sbl_repl_op_encode(op, ns, uuid, o, o2, diff, buf, sizeof(local));
    if (n > sizeof(local) && ((buf = malloc(n)) == NULL ||
                              sbl_repl_op_encode(op, ns, uuid, o, o2, diff, buf, n) != n)) {
        free(buf);
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    }
    bool ok = bson_init_static(&d, buf, n) && bson_append_document(&ops->arr, k, -1, &d);
    if (buf != local)
        free(buf);
    if (!ok)
        return sbl_err_set(err, SBL_E_InternalError, "a transaction operation of %zu bytes", n);
    if (pre_image != NULL && uuid != NULL) {
        if (ops->nimg == ops->imgcap) {
            size_t cap = ops->imgcap ? 2 * ops->imgcap : 8;
            txn_image_t *l = realloc(ops->img, cap * sizeof(*l));
            if (l == NULL)
                return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
            ops->img = l;
            ops->imgcap = cap;
        }
        txn_image_t *im = &ops->img[ops->nimg++];
        im->doc = bson_copy(pre_image);
        im->entry = ops->nfull;
        im->index = ops->n - 1;
        memcpy(im->uuid, uuid, 16);
    }
    return 0;
}

int sbl_repl_txn_commit(sbl_session_t *s, sbl_repl_txn_ops_t *ops, sbl_repl_stmt_t *st,
                        uint64_t *tsp, sbl_err_t *err)
{
    bson_t o = BSON_INITIALIZER;
    int rc;

    *tsp = 0;
    if (ops == NULL || ops->total == 0)
        return 0;
    /* A large transaction: its full arrays first, each entry chained to the
     * one before it; all of them commit with the data, in this transaction. */
    st->prev_ts = 0;
    st->prev_term = -1;
    uint64_t *ts = malloc((ops->nfull + 1) * sizeof(*ts));   /* each entry's, for */
    int64_t *wall = malloc((ops->nfull + 1) * sizeof(*wall)); /* the pre-images */
    if (ts == NULL || wall == NULL) {
        free(ts);
        free(wall);
        bson_destroy(&o);
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    }
    for (size_t i = 0; i < ops->nfull; i++) {
        bson_t po = BSON_INITIALIZER;
        BSON_APPEND_ARRAY(&po, "applyOps", ops->full[i]);
        BSON_APPEND_BOOL(&po, "partialTxn", true);
        sbl_oplog_entry_t pe = {.op = 'c', .ns = "admin.$cmd", .o = &po, .stmt = st,
                                .no_stmt_id = true};
        rc = sbl_oplog_append(s, &pe, err);
        bson_destroy(&po);
        if (rc != 0) {
            free(ts);
            free(wall);
            bson_destroy(&o);
                return rc;
        }
        st->prev_ts = ts[i] = pe.ts;
        st->prev_term = pe.term;
        wall[i] = pe.wall_ms;
    }
    BSON_APPEND_ARRAY(&o, "applyOps", &ops->arr);
    if (ops->nfull > 0)
        BSON_APPEND_INT64(&o, "count", (int64_t)ops->total);
    sbl_oplog_entry_t e = {.op = 'c', .ns = "admin.$cmd", .o = &o, .stmt = st, .no_stmt_id = true};
    rc = sbl_oplog_append(s, &e, err);
    sbl_oplog_release(s); /* its entries took consecutive ts; the commit runs in parallel */
    ts[ops->nfull] = e.ts;
    wall[ops->nfull] = e.wall_ms;
    for (size_t i = 0; rc == 0 && i < ops->nimg; i++) {
        const txn_image_t *im = &ops->img[i];
        rc = sbl_repl_write_preimage(s, im->uuid, ts[im->entry], (int64_t)im->index,
                                     wall[im->entry], im->doc, err);
    }
    free(ts);
    free(wall);
    if (rc == 0)
        rc = sbl_repl_txn_record_outcome(s, &e, st, "committed", tsp, err);
    bson_destroy(&o);
    return rc;
}

int sbl_repl_txn_record_outcome(sbl_session_t *s, const sbl_oplog_entry_t *e,
                                sbl_repl_stmt_t *st, const char *state, uint64_t *tsp,
                                sbl_err_t *err)
{
    uint8_t lb[SBL_REPL_LSID_LEN];
    bson_t lsid;
    int rc = sbl_repl_lsid_view(lb, st->lsid_id, st->lsid_uid, &lsid)
                 ? sbl_txn_record_write_known(s, &lsid, st->txn_number, e->ts, e->term,
                                              e->wall_ms, state, st->record, err)
                 : sbl_err_set(err, SBL_E_InternalError, "a session id that cannot be encoded");
    if (rc == 0) {
        *tsp = e->ts;
        st->out_ts = e->ts;
        st->out_term = e->term;
    }
    return rc;
}

const bson_t *sbl_repl_txn_ops_array(const sbl_repl_txn_ops_t *ops)
{
    return ops != NULL && ops->nfull == 0 ? &ops->arr : NULL;
}

/* A record's txnNum and lastWriteOpTime. */
static void record_fields(const bson_t *rec, int64_t *txnp, uint64_t *tsp, int64_t *termp)
{
    *txnp = record_txn_at(rec, tsp, termp);
}

int sbl_repl_txn_record_get(sbl_session_t *s, const uint8_t id[16], const uint8_t uid[32],
                            int64_t *txnp, uint64_t *tsp, int64_t *termp, bool *foundp,
                            sbl_err_t *err)
{
    return sbl_repl_txn_record_known(s, id, uid, NULL, txnp, tsp, termp, foundp, err);
}

int sbl_repl_txn_record_known(sbl_session_t *s, const uint8_t id[16], const uint8_t uid[32],
                              sbl_version_t *known, int64_t *txnp, uint64_t *tsp,
                              int64_t *termp, bool *foundp, sbl_err_t *err)
{
    bson_t lsid = BSON_INITIALIZER, key = BSON_INITIALIZER, rec;
    bson_value_t v;
    bool current = false;
    int rc;

    *foundp = false;
    *txnp = -1;
    *tsp = 0;
    *termp = -1;
    if (txn_table == NULL)
        return 0;
    if (known != NULL && known->key_len > 0)
        SBL_RET(sbl_version_check(s, txn_table, known, &current, err));
    if (current && bson_init_static(&rec, known->doc, known->doc_len)) {
        *foundp = true;
        record_fields(&rec, txnp, tsp, termp);
        return 0;
    }
    BSON_APPEND_BINARY(&lsid, "id", BSON_SUBTYPE_UUID, id, 16);
    BSON_APPEND_BINARY(&lsid, "uid", BSON_SUBTYPE_BINARY, uid, 32);
    record_id(&key, &lsid, &v);
    if (known != NULL) { /* read into the hint, to be checked and used next time */
        rc = sbl_version_get(s, txn_table, &v, known, err);
        if (rc == 0 && known->key_len > 0 && bson_init_static(&rec, known->doc, known->doc_len)) {
            *foundp = true;
            record_fields(&rec, txnp, tsp, termp);
            goto done;
        }
        if (rc != 0)
            goto done;
        /* none, or too big for the hint: read it as it is */
    }
    rc = sbl_coll_get(s, txn_table, &v, &rec, foundp, err);
    if (rc == 0 && *foundp) {
        record_fields(&rec, txnp, tsp, termp);
        bson_destroy(&rec);
    }
done:
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

bool sbl_repl_session_migrated(const bson_t *e, bson_t *original)
{
    bson_iter_t it, f;
    return bson_iter_init_find(&it, e, "o") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
           bson_iter_recurse(&it, &f) && bson_iter_find(&f, "$sessionMigrateInfo") &&
           bson_iter_init_find(&it, e, "o2") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
           sbl_iter_doc(&it, original);
}

bson_t *sbl_repl_stmt_entry(const bson_t *e)
{
    bson_t orig;
    bson_iter_t it;
    if (!sbl_repl_session_migrated(e, &orig))
        return bson_new_from_data(bson_get_data(e), e->len);
    bson_t *out = bson_new();
    bson_copy_to_excluding_noinit(&orig, out, "preImageOpTime", NULL);
    if (bson_iter_init_find(&it, e, "preImageOpTime"))
        sbl_append_iter(out, "preImageOpTime", -1, &it);
    return out;
}

int sbl_repl_session_migrate(sbl_session_t *s, const bson_t *entry, const bson_t *image,
                             sbl_err_t *err)
{
    bson_iter_t it, f;
    bson_t lsid;
    const uint8_t *id = NULL, *uid = NULL;
    uint32_t idn = 0, uidn = 0;
    if (!bson_iter_init_find(&it, entry, "lsid") || !sbl_iter_doc(&it, &lsid) ||
        !bson_iter_recurse(&it, &f))
        return 0;
    while (bson_iter_next(&f))
        if (strcmp(bson_iter_key(&f), "id") == 0 && BSON_ITER_HOLDS_BINARY(&f))
            bson_iter_binary(&f, NULL, &idn, &id);
        else if (strcmp(bson_iter_key(&f), "uid") == 0 && BSON_ITER_HOLDS_BINARY(&f))
            bson_iter_binary(&f, NULL, &uidn, &uid);
    const char *ns = NULL;
    int64_t txn = -1;
    int32_t stmt = -1;
    if (bson_iter_init_find(&it, entry, "txnNumber") && BSON_ITER_HOLDS_NUMBER(&it))
        txn = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, entry, "stmtId") && BSON_ITER_HOLDS_NUMBER(&it))
        stmt = (int32_t)bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, entry, "ns") && BSON_ITER_HOLDS_UTF8(&it))
        ns = bson_iter_utf8(&it, NULL);
    if (idn != 16 || uidn != 32 || txn < 0 || stmt < 0 || ns == NULL)
        return 0;
    sbl_repl_stmt_t st = {.txn_number = txn, .stmt_id = stmt};
    memcpy(st.lsid_id, id, 16);
    memcpy(st.lsid_uid, uid, 32);
    /* the donor's image optimes mean nothing here: the image, when the
     * statement has one, is written again below and pointed at */
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER;
    BSON_APPEND_INT32(&o, "$sessionMigrateInfo", 1);
    bson_copy_to_excluding_noinit(entry, &o2, "preImageOpTime", "postImageOpTime", NULL);
    int rc;
    for (int attempt = 0;; attempt++) {
        int64_t rec_txn, rec_term;
        uint64_t rec_ts;
        bool found;
        SBL_RET(sbl_txn_begin(s, err));
        rc = sbl_repl_txn_record_get(s, id, uid, &rec_txn, &rec_ts, &rec_term, &found, err);
        if (rc == 0 && found && rec_txn > txn) {
            sbl_txn_abort(s);
            break;
        }
        st.prev_ts = found && rec_txn == txn ? rec_ts : 0;
        st.prev_term = found && rec_txn == txn ? rec_term : -1;
        sbl_oplog_entry_t e = {.op = 'n', .ns = ns, .o = &o, .o2 = &o2, .stmt = &st,
                               .from_migrate = true};
        if (rc == 0 && image != NULL) { /* first the image, as the donor wrote it */
            sbl_oplog_entry_t pre = {.op = 'n', .ns = ns, .o = image, .stmt = &st,
                                     .from_migrate = true};
            if ((rc = sbl_oplog_append(s, &pre, err)) == 0) {
                e.pre_ts = pre.ts;
                e.pre_term = pre.term;
            }
        }
        if (rc == 0)
            rc = sbl_oplog_append(s, &e, err);
        if (rc == 0)
            rc = sbl_txn_record_write(s, &lsid, txn, e.ts, e.term, e.wall_ms, err);
        if (rc == 0) {
            rc = sbl_txn_commit(s, err);
            break;
        }
        sbl_txn_abort(s);
        if (rc != SBL_E_WriteConflict || attempt >= 100)
            break;
        sbl_err_clear(err);
    }
    bson_destroy(&o);
    bson_destroy(&o2);
    return rc;
}
