/*
 * wt_capped.c: capped collections: natural (insertion) order and eviction.
 *
 * Documents live clustered on _id like any collection's; a capped one also
 * has table:natural-<n>-<r> with two kinds of rows:
 *   'o' + position (8 bytes, big-endian)  -> encoded _id   (insertion order)
 *   'i' + encoded _id                     -> position      (for deletes)
 * Positions count up from 1 and are never reused, so a position is also a
 * tailable cursor's resume point.  The oplog (keyed by ts) takes its entry's
 * ts as its position (mongod's RecordId for the oplog) whenever that is
 * above every position taken so far, and then needs no 'i' row: a delete
 * finds the position in the key.  An entry whose ts is not (after a
 * rollback, below positions given before it) counts on with both rows, as
 * any other capped collection's document; so do old data files' entries.
 *
 * What must stay true:
 *  - Its rows change in the same transaction as the document (sbl_write).
 *  - An insert holds the collection's insert lock from taking its position
 *    until its transaction ends, so positions commit in increasing order and
 *    a reader that has seen position p will never later find one below p.
 *    A transaction that already holds another capped lock only tries the
 *    lock (WriteConflict when busy), so two such transactions cannot deadlock.
 *  - Eviction deletes the lowest positions through the ordinary write path
 *    (indexes and counts stay right) until size and count are within limits.
 *    The limits follow the catalog options (collMod may lower them; the next
 *    insert then evicts down to the new ones).
 *  - A collection of ordered visibility (the oplog: sbl_capped_set_visibility)
 *    may release its insert lock before the transaction ends
 *    (sbl_capped_release), so its positions commit in any order; natural
 *    scans then stop at its owner's visibility point, below which nothing is
 *    still in flight, and its eviction runs after the commit in a
 *    transaction of its own, one session at a time (two writers' snapshots
 *    would otherwise delete the same oldest documents and conflict).
 */
#include "storage/wt_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "doc/doc.h"

struct sbl_capped {
    sbl_wt_table_t *nat; /* the natural-order table */
    _Atomic int64_t max_size; /* bytes (collMod may change it: sbl_capped_set_limits) */
    _Atomic int64_t max_docs; /* 0: no limit */
    pthread_mutex_t lock; /* held by the inserting transaction until it ends */
    bool seq_loaded;      /* next_seq read from the table (under lock) */
    uint64_t next_seq;    /* under lock */
    _Atomic(sbl_visible_fn) visible; /* ordered visibility: the owner's point */
    pthread_mutex_t evict_mu; /* ordered visibility: one evicting session at a time */
    /* ordered visibility: every position below it was evicted by a committed
     * eviction (set under evict_mu).  Eviction starts its search there, not
     * at the first position: the rows it deleted stay in WiredTiger as
     * tombstones for a while, and stepping over them cost each oplog insert
     * of a full oplog milliseconds (a 16 MB oplog took 180 inserts/s).
     * No insert can be left behind below it: eviction stops at the owner's
     * visibility point, below which every insert has committed or aborted.
     * After rollback_to_stable (which may bring evicted documents back)
     * the next eviction starts at the first position again. */
    _Atomic uint64_t evict_from;
    uint64_t evict_epoch; /* hint_epoch when evict_from was set (under evict_mu) */
    /* sbl_capped_oldest_hint: valid while oldest_epoch is hint_epoch's
     * value (0 while a note is being written) */
    _Atomic uint64_t oldest, oldest_epoch;
};

static _Atomic uint64_t hint_epoch = 1;

#define POS_KEY_LEN 9
/* Entries an ordered-visibility collection's eviction deletes at most in
 * one transaction: the oplog past its size until a checkpoint (below) may
 * have a backlog of many, which then goes over the next inserts rather than
 * in one transaction that holds them all in WiredTiger's cache. */
#define EVICT_MAX 1000

static void pos_key(uint8_t out[POS_KEY_LEN], uint64_t pos)
{
    out[0] = 'o';
    for (int i = 0; i < 8; i++)
        out[1 + i] = (uint8_t)(pos >> (56 - 8 * i));
}

static uint64_t pos_of(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

/* The limits options ({capped, size, max}) give. */
static void limits_of(const bson_t *options, int64_t *sizep, int64_t *maxp)
{
    bson_iter_t it;
    int64_t size = 0, max = 0;
    if (bson_iter_init_find(&it, options, "size") && BSON_ITER_HOLDS_NUMBER(&it))
        size = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, options, "max") && BSON_ITER_HOLDS_NUMBER(&it))
        max = bson_iter_as_int64(&it);
    *sizep = size > 0 ? size : 1;
    *maxp = max > 0 && max < 0x7fffffff ? max : 0;
}

void sbl_capped_set_limits(sbl_wt_table_t *t, const bson_t *options)
{
    int64_t size, max;
    if (t->capped == NULL || options == NULL)
        return;
    limits_of(options, &size, &max);
    atomic_store(&t->capped->max_size, size);
    atomic_store(&t->capped->max_docs, max);
}

int sbl_capped_attach(WT_SESSION *wt, sbl_wt_table_t *t, const bson_t *options, bool create,
                      sbl_err_t *err)
{
    bson_iter_t it;
    int64_t size, max;
    char uri[300];
    int ret;

    if (options == NULL || !bson_iter_init_find(&it, options, "capped") ||
        !bson_iter_as_bool(&it))
        return 0;
    limits_of(options, &size, &max);
    snprintf(uri, sizeof(uri), "table:natural-%s", t->ident + strlen("collection-"));
    if (create && (ret = wt->create(wt, uri, sbl_table_config_for(t->unlogged, false))) != 0)
        return sbl_wt_err(err, ret, "create natural-order table");
    struct sbl_capped *cp = bson_malloc0(sizeof(*cp));
    cp->nat = sbl_table_new(uri);
    atomic_init(&cp->max_size, size);
    atomic_init(&cp->max_docs, max);
    pthread_mutex_init(&cp->lock, NULL);
    pthread_mutex_init(&cp->evict_mu, NULL);
    t->capped = cp;
    return 0;
}

const char *sbl_capped_uri(const sbl_wt_table_t *t)
{
    return t->capped != NULL ? t->capped->nat->uri : NULL;
}

void sbl_capped_drop_table(sbl_wt_table_t *t)
{
    if (t->capped == NULL)
        return;
    atomic_store(&t->capped->nat->dropped, true);
    sbl_drop_table(sbl_eng.cat_wt, t->capped->nat->uri);
}

void sbl_capped_free(sbl_wt_table_t *t)
{
    if (t->capped == NULL)
        return;
    sbl_table_unref(t->capped->nat);
    pthread_mutex_destroy(&t->capped->lock);
    pthread_mutex_destroy(&t->capped->evict_mu);
    bson_free(t->capped);
    t->capped = NULL;
}

uint64_t sbl_capped_oldest_hint(const sbl_coll_t *c, uint64_t *epochp)
{
    struct sbl_capped *cp = c->tbl->capped;
    uint64_t e = atomic_load(&hint_epoch);
    *epochp = e;
    if (cp == NULL || atomic_load(&cp->oldest_epoch) != e)
        return 0;
    uint64_t key = atomic_load(&cp->oldest);
    return atomic_load(&cp->oldest_epoch) == e ? key : 0; /* not rewritten meanwhile */
}

void sbl_capped_note_oldest(sbl_coll_t *c, uint64_t epoch, uint64_t key)
{
    struct sbl_capped *cp = c->tbl->capped;
    if (cp == NULL)
        return;
    /* two notes of one epoch may interleave: either key is a valid hint */
    atomic_store(&cp->oldest_epoch, 0);
    atomic_store(&cp->oldest, key);
    atomic_store(&cp->oldest_epoch, epoch);
}

void sbl_capped_rolled_back(void)
{
    atomic_fetch_add(&hint_epoch, 1);
}

bool sbl_coll_capped(const sbl_coll_t *c, int64_t *max_sizep, int64_t *max_docsp)
{
    const struct sbl_capped *cp = c->tbl->capped;
    if (max_sizep != NULL)
        *max_sizep = cp != NULL ? atomic_load(&cp->max_size) : 0;
    if (max_docsp != NULL)
        *max_docsp = cp != NULL ? atomic_load(&cp->max_docs) : 0;
    return cp != NULL;
}

/* ---- the insert lock ------------------------------------------------------ */

static int lock_for_insert(sbl_session_t *s, sbl_wt_table_t *t, sbl_err_t *err)
{
    for (size_t i = 0; i < s->ncapped_held; i++)
        if (s->capped_held[i] == t)
            return 0;
    if (s->ncapped_held > 0) {
        if (pthread_mutex_trylock(&t->capped->lock) != 0)
            return sbl_err_set(err, SBL_E_WriteConflict,
                               "WriteConflict: another insert holds the capped collection");
    } else {
        pthread_mutex_lock(&t->capped->lock);
    }
    if (s->ncapped_held == s->capped_held_cap) {
        s->capped_held_cap = s->capped_held_cap ? 2 * s->capped_held_cap : 4;
        s->capped_held =
            bson_realloc(s->capped_held, s->capped_held_cap * sizeof(*s->capped_held));
    }
    sbl_table_ref(t);
    s->capped_held[s->ncapped_held++] = t;
    return 0;
}

static atomic_uint_fast64_t insert_gen;
static void (*_Atomic gen_notify)(void);

uint64_t sbl_capped_generation(void)
{
    return atomic_load(&insert_gen);
}

void sbl_capped_set_notify(void (*fn)(void))
{
    atomic_store(&gen_notify, fn);
}

void sbl_capped_unlock_all(sbl_session_t *s)
{
    bool moved = s->ncapped_held > 0 || s->capped_released;
    if (moved)
        atomic_fetch_add(&insert_gen, 1);
    s->capped_released = false;
    for (size_t i = 0; i < s->ncapped_held; i++) {
        pthread_mutex_unlock(&s->capped_held[i]->capped->lock);
        sbl_table_unref(s->capped_held[i]);
    }
    s->ncapped_held = 0;
    void (*notify)(void) = moved ? atomic_load_explicit(&gen_notify, memory_order_relaxed) : NULL;
    if (notify != NULL)
        notify();
}

void sbl_capped_release(sbl_session_t *s, sbl_coll_t *c)
{
    for (size_t i = 0; i < s->ncapped_held; i++)
        if (s->capped_held[i] == c->tbl) {
            pthread_mutex_unlock(&c->tbl->capped->lock);
            sbl_table_unref(c->tbl);
            s->capped_held[i] = s->capped_held[--s->ncapped_held];
            s->capped_released = true;
            return;
        }
}

void sbl_capped_set_visibility(sbl_coll_t *c, sbl_visible_fn visible)
{
    if (c->tbl->capped != NULL)
        atomic_store(&c->tbl->capped->visible, visible);
}

int sbl_capped_lock(sbl_session_t *s, sbl_coll_t *c, sbl_err_t *err)
{
    if (c->tbl->capped == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "%s is not capped", c->ns);
    if (!s->in_txn)
        return sbl_err_set(err, SBL_E_InternalError, "capped lock outside a transaction");
    return lock_for_insert(s, c->tbl, err);
}

/* ---- the write hook ------------------------------------------------------- */

/* The last position in the table (0 when empty): 'o' rows sort after 'i' rows. */
static int load_next_seq(sbl_session_t *s, struct sbl_capped *cp, sbl_err_t *err)
{
    WT_CURSOR *cur;
    WT_ITEM k;
    int ret;

    SBL_RET(sbl_session_cursor(s, cp->nat, &cur, err));
    cp->next_seq = 1;
    ret = cur->prev(cur);
    if (ret == 0 && (ret = cur->get_key(cur, &k)) == 0 && k.size == POS_KEY_LEN &&
        ((const uint8_t *)k.data)[0] == 'o')
        cp->next_seq = pos_of((const uint8_t *)k.data + 1) + 1;
    cur->reset(cur);
    if (ret != 0 && ret != WT_NOTFOUND)
        return sbl_wt_err(err, ret, "read natural order");
    cp->seq_loaded = true;
    return 0;
}

static int put_row(WT_CURSOR *cur, const void *key, size_t klen, const void *val, size_t vlen)
{
    WT_ITEM k = {.data = key, .size = klen}, v = {.data = val, .size = vlen};
    cur->set_key(cur, &k);
    cur->set_value(cur, &v);
    int ret = cur->insert(cur);
    cur->reset(cur);
    return ret;
}

/* The position an oplog entry keyed id may have without an 'i' row: its
 * ts (0: c is not the oplog). */
static uint64_t ts_pos(const sbl_coll_t *c, const bson_value_t *id)
{
    if (id->value_type != BSON_TYPE_TIMESTAMP || strcmp(sbl_table_key_field(c->tbl), "ts") != 0)
        return 0;
    return (uint64_t)id->value.v_timestamp.timestamp << 32 | id->value.v_timestamp.increment;
}

/* Remove the rows of the document whose encoded _id is ikey+1 ('i' + idk):
 * both, or, with no 'i' row, the 'o' row at pos (when not 0). */
static int remove_rows(WT_CURSOR *cur, const sbl_buf_t *ikey, uint64_t pos)
{
    WT_ITEM k = {.data = ikey->data, .size = ikey->len}, v;
    WT_ITEM pkey = {.size = POS_KEY_LEN};
    uint8_t pk[POS_KEY_LEN];
    int ret;

    pkey.data = pk;
    cur->set_key(cur, &k);
    if ((ret = cur->search(cur)) == 0 && (ret = cur->get_value(cur, &v)) == 0 && v.size == 8) {
        pos_key(pk, pos_of(v.data));
        if ((ret = cur->remove(cur)) == 0) {
            cur->set_key(cur, &pkey);
            ret = cur->remove(cur);
        }
    } else if (ret == WT_NOTFOUND && pos != 0) {
        pos_key(pk, pos);
        cur->set_key(cur, &pkey);
        ret = cur->remove(cur);
    }
    cur->reset(cur);
    return ret == WT_NOTFOUND ? 0 : ret;
}

/* The collection's count and bytes as this transaction sees them. */
static void current_size(sbl_session_t *s, sbl_wt_table_t *t, int64_t *countp, int64_t *bytesp)
{
    *countp = (int64_t)atomic_load(&t->count);
    *bytesp = (int64_t)atomic_load(&t->data_size);
    for (size_t i = 0; i < s->ndeltas; i++)
        if (s->deltas[i].tbl == t) {
            *countp += s->deltas[i].count;
            *bytesp += s->deltas[i].data_size;
        }
}

static int key_cmp(const void *a, size_t alen, const void *b, size_t blen);

/* Append ts (an oplog entry's, its key field) to out as an encoded key. */
static void ts_key_append(sbl_buf_t *out, uint64_t ts)
{
    bson_value_t v = {.value_type = BSON_TYPE_TIMESTAMP};
    v.value.v_timestamp.timestamp = (uint32_t)(ts >> 32);
    v.value.v_timestamp.increment = (uint32_t)ts;
    sbl_key_append(out, &v, false);
}

/* An ordered-visibility collection's visibility point as an encoded key
 * appended to out (its documents keyed at or below it have all committed or
 * aborted); false, out untouched, for a collection without one. */
static bool visibility_key(const struct sbl_capped *cp, sbl_buf_t *out)
{
    sbl_visible_fn visible = atomic_load(&cp->visible);
    uint64_t lim = visible != NULL ? visible() : UINT64_MAX;
    if (lim == UINT64_MAX)
        return false;
    ts_key_append(out, lim);
    return true;
}

/* Delete the lowest positions, from position *fromp on (all below it are
 * gone), until c is within its limits, and in an ordered-visibility
 * collection none keyed past its visibility point; keep: the new document's
 * position, never evicted.  *fromp ends past the last position deleted. */
static int evict(sbl_session_t *s, sbl_coll_t *c, uint64_t keep, uint64_t *fromp, sbl_err_t *err)
{
    struct sbl_capped *cp = c->tbl->capped;
    sbl_buf_t ikey, limit;
    int rc = 0;

    sbl_buf_init(&ikey);
    /* ordered visibility (the oplog): only entries keyed at or below the
     * visibility point (nothing below it is still in flight) and at or
     * below the stable timestamp of the last checkpoint: a restart recovers
     * the unlogged tables from that checkpoint and replays the oplog after
     * it, so every entry after it is still needed (mongod's oplog needed
     * for crash recovery: the oplog grows past its size until the next
     * checkpoint instead) */
    sbl_buf_init(&limit);
    bool limited = false;
    int deleted = 0;
    sbl_visible_fn visible = atomic_load(&cp->visible);
    if (visible != NULL) {
        uint64_t lim = visible(), ckpt = sbl_storage_last_checkpoint_ts();
        ts_key_append(&limit, lim < ckpt ? lim : ckpt);
        limited = true;
    }
    for (;;) {
        int64_t count, bytes;
        WT_CURSOR *nc, *dc;
        WT_ITEM k, v;
        uint8_t start[POS_KEY_LEN];
        int exact, ret;

        current_size(s, c->tbl, &count, &bytes);
        int64_t max_size = atomic_load(&cp->max_size), max_docs = atomic_load(&cp->max_docs);
        if (!(bytes > max_size || (max_docs > 0 && count > max_docs)))
            break;
        if ((rc = sbl_session_cursor(s, cp->nat, &nc, err)) != 0)
            break;
        pos_key(start, *fromp);
        k.data = start;
        k.size = sizeof(start);
        nc->set_key(nc, &k);
        ret = nc->search_near(nc, &exact);
        if (ret == 0 && exact < 0)
            ret = nc->next(nc);
        if (ret == 0)
            ret = nc->get_key(nc, &k);
        if (ret == 0 && (k.size != POS_KEY_LEN || ((const uint8_t *)k.data)[0] != 'o'))
            ret = WT_NOTFOUND;
        uint64_t pos = ret == 0 ? pos_of((const uint8_t *)k.data + 1) : 0;
        if (ret == 0 && pos == keep)
            ret = WT_NOTFOUND; /* only the new document is left */
        if (ret == 0)
            ret = nc->get_value(nc, &v);
        if (ret == 0 && limited && key_cmp(v.data, v.size, limit.data, limit.len) > 0)
            ret = WT_NOTFOUND; /* the rest is not all committed yet: a later eviction's */
        if (ret == 0) {
            sbl_buf_reset(&ikey);
            sbl_buf_append_byte(&ikey, 'i');
            sbl_buf_append(&ikey, v.data, v.size);
        }
        nc->reset(nc);
        if (ret == WT_NOTFOUND)
            break;
        if (ret != 0) {
            rc = sbl_wt_err(err, ret, "capped eviction");
            break;
        }
        /* The document itself, then the ordinary delete (indexes, counts, rows). */
        if ((rc = sbl_session_cursor(s, c->tbl, &dc, err)) != 0)
            break;
        k.data = ikey.data + 1;
        k.size = ikey.len - 1;
        dc->set_key(dc, &k);
        bson_t view, old;
        bool have = false;
        if ((ret = dc->search(dc)) == 0 && (ret = dc->get_value(dc, &v)) == 0 &&
            bson_init_static(&view, v.data, v.size)) {
            bson_copy_to(&view, &old);
            have = true;
        }
        dc->reset(dc);
        if (ret != 0 && ret != WT_NOTFOUND) {
            rc = sbl_wt_err(err, ret, "capped eviction read");
            break;
        }
        if (!have) { /* rows without a document: drop them and go on */
            if ((ret = remove_rows(nc, &ikey, pos)) != 0) {
                rc = sbl_wt_err(err, ret, "capped eviction");
                break;
            }
            *fromp = pos + 1;
            continue;
        }
        rc = sbl_wt_write_in_txn(s, c, SBL_WRITE_DELETE, &old, NULL, NULL, err);
        bson_destroy(&old);
        if (rc != 0)
            break;
        *fromp = pos + 1;
        if (limited && ++deleted >= EVICT_MAX)
            break; /* the rest to the next inserts */
    }
    sbl_buf_destroy(&ikey);
    sbl_buf_destroy(&limit);
    return rc;
}

int sbl_capped_on_write(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind,
                        const bson_t *old_doc, const bson_t *new_doc, sbl_err_t *err)
{
    struct sbl_capped *cp = c->tbl->capped;
    const bson_t *doc = kind == SBL_WRITE_DELETE ? old_doc : new_doc;
    bson_iter_t it;
    bson_value_t id;
    sbl_buf_t ikey;
    WT_CURSOR *cur;
    int ret = 0, rc = 0;

    if (cp == NULL || kind == SBL_WRITE_UPDATE) /* an update keeps its place */
        return 0;
    if (kind == SBL_WRITE_INSERT && (int64_t)new_doc->len > atomic_load(&cp->max_size))
        return sbl_err_set(err, SBL_E_BadValue, "object to insert exceeds cappedMaxSize");
    if (doc == NULL || !sbl_doc_find_top(doc, sbl_table_key_field(c->tbl), &it))
        return sbl_err_set(err, SBL_E_InternalError, "capped write: document without its key");
    sbl_iter_value(&it, &id);
    if (kind == SBL_WRITE_INSERT)
        SBL_RET(lock_for_insert(s, c->tbl, err));
    SBL_RET(sbl_session_cursor(s, cp->nat, &cur, err));
    sbl_buf_init(&ikey);
    sbl_buf_append_byte(&ikey, 'i');
    sbl_key_append(&ikey, &id, false);
    if (kind == SBL_WRITE_DELETE) {
        ret = remove_rows(cur, &ikey, ts_pos(c, &id));
    } else {
        if (!cp->seq_loaded && (rc = load_next_seq(s, cp, err)) != 0)
            goto done;
        uint64_t tpos = ts_pos(c, &id);
        bool by_ts = tpos != 0 && tpos >= cp->next_seq; /* no 'i' row: see the top */
        uint64_t pos = by_ts ? tpos : cp->next_seq;
        cp->next_seq = pos + 1;
        uint8_t pk[POS_KEY_LEN], pv[8];
        pos_key(pk, pos);
        memcpy(pv, pk + 1, 8);
        if ((ret = put_row(cur, pk, sizeof(pk), ikey.data + 1, ikey.len - 1)) == 0 &&
            (by_ts || (ret = put_row(cur, ikey.data, ikey.len, pv, sizeof(pv))) == 0)) {
            if (atomic_load(&cp->visible) == NULL) {
                uint64_t from = 0; /* an abort may bring back what it deletes */
                rc = evict(s, c, pos, &from, err);
            } else if (s->evict_after == NULL) { /* after the commit */
                atomic_fetch_add(&c->refs, 1);
                s->evict_after = c;
            }
        }
    }
    if (ret != 0)
        rc = sbl_wt_err(err, ret == WT_DUPLICATE_KEY ? WT_ROLLBACK : ret, "natural order");
done:
    sbl_buf_destroy(&ikey);
    return rc;
}

void sbl_capped_after_txn(sbl_session_t *s, bool committed)
{
    sbl_coll_t *c = s->evict_after;
    if (c == NULL)
        return;
    s->evict_after = NULL;
    struct sbl_capped *cp = c->tbl->capped;
    int64_t count, bytes;
    current_size(s, c->tbl, &count, &bytes);
    int64_t max_docs = atomic_load(&cp->max_docs);
    bool over = bytes > atomic_load(&cp->max_size) || (max_docs > 0 && count > max_docs);
    if (committed && over && !s->in_txn && pthread_mutex_trylock(&cp->evict_mu) == 0) {
        sbl_err_t err;
        sbl_err_clear(&err);
        if (sbl_txn_begin(s, &err) == 0) { /* a failure leaves it to the next insert */
            uint64_t was = atomic_load(&cp->evict_from), epoch = atomic_load(&hint_epoch);
            bool again = cp->evict_epoch != epoch; /* a rollback since: from the start */
            uint64_t from = again ? 0 : was;
            if (evict(s, c, 0, &from, &err) != 0) {
                sbl_txn_abort(s);
            } else if (sbl_txn_commit(s, &err) == 0 && (again || from > was)) {
                atomic_store(&cp->evict_from, from);
                cp->evict_epoch = epoch;
            }
        }
        pthread_mutex_unlock(&cp->evict_mu);
    }
    sbl_coll_release(c);
}

/* ---- natural-order scans ---------------------------------------------------- */

struct sbl_natural {
    uint64_t epoch;
    sbl_wt_table_t *tbl, *nat; /* referenced */
    WT_CURSOR *ncur, *dcur;
    uint64_t after;
    bool descending, started, done;
    bool limited;   /* ordered visibility: nothing keyed above limit */
    sbl_buf_t limit; /* the encoded key of the visibility point at the open */
    /* dcur is on the last document returned (dpos), and stepping it to the
     * next one has found each wanted document so far (dstep: see doc_seek) */
    bool dpos, dstep;
    WT_ITEM key; /* the last document's encoded key (ncur's value): sbl_natural_key */
};

/* Encoded keys compare as their bytes, then their lengths. */
static int key_cmp(const void *a, size_t alen, const void *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c != 0 ? c : (alen > blen) - (alen < blen);
}

int sbl_natural_open(sbl_session_t *s, sbl_coll_t *c, uint64_t after, bool descending,
                     sbl_natural_t **scanp, sbl_err_t *err)
{
    struct sbl_capped *cp = c->tbl->capped;
    sbl_natural_t *scan;
    int ret;

    *scanp = NULL;
    if (cp == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "%s is not capped", c->ns);
    sbl_session_reconcile(s);
    if (atomic_load(&c->tbl->dropped))
        return sbl_err_set(err, SBL_E_NamespaceNotFound, "collection %s was dropped", c->ns);
    scan = bson_malloc0(sizeof(*scan));
    if ((ret = s->wt->open_cursor(s->wt, cp->nat->uri, NULL, NULL, &scan->ncur)) != 0 ||
        (ret = s->wt->open_cursor(s->wt, c->tbl->uri, NULL, NULL, &scan->dcur)) != 0) {
        if (scan->ncur != NULL)
            scan->ncur->close(scan->ncur);
        bson_free(scan);
        return sbl_wt_err(err, ret, "open natural scan");
    }
    scan->epoch = s->epoch;
    scan->tbl = c->tbl;
    scan->nat = cp->nat;
    sbl_table_ref(scan->tbl);
    sbl_table_ref(scan->nat);
    scan->after = after;
    scan->descending = descending;
    scan->dstep = true;
    sbl_buf_init(&scan->limit);
    scan->limited = visibility_key(cp, &scan->limit);
    *scanp = scan;
    return 0;
}

static int natural_start(sbl_natural_t *scan)
{
    WT_CURSOR *cur = scan->ncur;
    uint8_t pk[POS_KEY_LEN];
    WT_ITEM k = {.data = pk, .size = sizeof(pk)};
    int exact, ret;

    if (scan->descending)
        pos_key(pk, scan->after == 0 ? UINT64_MAX : scan->after - 1);
    else
        pos_key(pk, scan->after + 1);
    cur->set_key(cur, &k);
    if ((ret = cur->search_near(cur, &exact)) != 0)
        return ret;
    if (scan->descending && exact > 0)
        return cur->prev(cur);
    if (!scan->descending && exact < 0)
        return cur->next(cur);
    return 0;
}

int sbl_natural_seek(sbl_natural_t *scan, bool *existsp, sbl_err_t *err)
{
    WT_CURSOR *cur = scan->ncur;
    uint8_t pk[POS_KEY_LEN];
    WT_ITEM k = {.data = pk, .size = sizeof(pk)};
    int ret;

    *existsp = false;
    if (scan->started)
        return sbl_err_set(err, SBL_E_InternalError, "natural scan already started");
    pos_key(pk, scan->after);
    cur->set_key(cur, &k);
    if ((ret = cur->search(cur)) == WT_NOTFOUND)
        return 0;
    if (ret != 0)
        return sbl_wt_err(err, ret, "natural position");
    *existsp = true;
    scan->started = true; /* sbl_natural_next steps on from it */
    return 0;
}

/*
 * Put the document cursor on the document keyed v.  Where natural order is
 * key order (the oplog: position and key are its ts) the wanted document is
 * the one after the last, and a step of the cursor costs a fraction of a
 * search (the searches were a fifth of an oplog getMore's instructions).  A
 * step that lands elsewhere (other capped collections' _ids need not follow
 * insertion order; a document deleted or not yet committed in between) costs
 * the search anyway, and the scan stops stepping.
 */
static int doc_seek(sbl_natural_t *scan, const WT_ITEM *v)
{
    WT_CURSOR *d = scan->dcur;
    int ret;

    if (scan->dpos && scan->dstep) {
        WT_ITEM got;
        ret = scan->descending ? d->prev(d) : d->next(d);
        if (ret == 0 && (ret = d->get_key(d, &got)) == 0 && got.size == v->size &&
            memcmp(got.data, v->data, v->size) == 0)
            return 0;
        if (ret != 0 && ret != WT_NOTFOUND) {
            scan->dpos = false;
            return ret;
        }
        scan->dstep = false;
    }
    d->set_key(d, v);
    ret = d->search(d);
    scan->dpos = ret == 0;
    return ret;
}

int sbl_natural_next(sbl_natural_t *scan, bson_t *doc, uint64_t *posp, bool *donep,
                     sbl_err_t *err)
{
    WT_CURSOR *cur = scan->ncur;
    WT_ITEM k, v;
    int ret;

    *donep = false;
    for (;;) {
        if (scan->done) {
            *donep = true;
            return 0;
        }
        if (!scan->started) {
            scan->started = true;
            ret = natural_start(scan);
        } else
            ret = scan->descending ? cur->prev(cur) : cur->next(cur);
        if (ret == 0 && (ret = cur->get_key(cur, &k)) == 0 &&
            (k.size != POS_KEY_LEN || ((const uint8_t *)k.data)[0] != 'o'))
            ret = WT_NOTFOUND;
        if (ret == 0)
            ret = cur->get_value(cur, &v);
        if (ret == WT_NOTFOUND) {
            scan->done = true;
            continue;
        }
        if (ret != 0)
            return sbl_wt_err(err, ret, "natural scan");
        uint64_t pos = pos_of((const uint8_t *)k.data + 1);
        if (scan->limited && key_cmp(v.data, v.size, scan->limit.data, scan->limit.len) > 0) {
            if (!scan->descending) /* past the visibility point: the end for now */
                scan->done = true;
            continue;
        }
        WT_ITEM dv;
        ret = doc_seek(scan, &v);
        if (ret == WT_NOTFOUND) /* deleted between the two reads */
            continue;
        if (ret == 0)
            ret = scan->dcur->get_value(scan->dcur, &dv);
        if (ret != 0)
            return sbl_wt_err(err, ret, "natural scan");
        if (!bson_init_static(doc, dv.data, dv.size))
            return sbl_err_set(err, SBL_E_InternalError, "corrupt document in scan");
        scan->key = v;
        *posp = pos;
        return 0;
    }
}

const void *sbl_natural_key(const sbl_natural_t *scan, size_t *lenp)
{
    *lenp = scan->key.size;
    return scan->key.data;
}

void sbl_natural_close(sbl_natural_t *scan)
{
    if (scan == NULL)
        return;
    if (sbl_eng.open && scan->epoch == sbl_eng.epoch) {
        scan->ncur->close(scan->ncur);
        scan->dcur->close(scan->dcur);
    }
    sbl_table_unref(scan->tbl);
    sbl_table_unref(scan->nat);
    sbl_buf_destroy(&scan->limit);
    bson_free(scan);
}

int sbl_natural_pos_of_ts(sbl_session_t *s, sbl_coll_t *c, uint64_t ts, uint64_t *posp,
                          sbl_err_t *err)
{
    struct sbl_capped *cp = c->tbl->capped;
    WT_CURSOR *cur;
    WT_ITEM k, val;
    sbl_buf_t ikey;
    int ret;

    *posp = 0;
    if (cp == NULL || strcmp(sbl_table_key_field(c->tbl), "ts") != 0)
        return 0;
    SBL_RET(sbl_session_cursor(s, cp->nat, &cur, err));
    sbl_buf_init(&ikey);
    sbl_buf_append_byte(&ikey, 'i');
    ts_key_append(&ikey, ts);
    k.data = ikey.data;
    k.size = ikey.len;
    cur->set_key(cur, &k);
    if ((ret = cur->search(cur)) == 0 && (ret = cur->get_value(cur, &val)) == 0 && val.size == 8)
        *posp = pos_of(val.data);
    if (ret == WT_NOTFOUND) { /* no 'i' row: the entry at its ts, if there */
        uint8_t pk[POS_KEY_LEN];
        pos_key(pk, ts);
        k.data = pk;
        k.size = sizeof(pk);
        cur->set_key(cur, &k);
        if ((ret = cur->search(cur)) == 0)
            *posp = ts;
    }
    cur->reset(cur);
    sbl_buf_destroy(&ikey);
    return ret == 0 || ret == WT_NOTFOUND ? 0 : sbl_wt_err(err, ret, "natural position");
}

void sbl_coll_append_capped_stats(const sbl_coll_t *c, bson_t *out, int64_t scale)
{
    int64_t max_size = 0, max_docs = 0;
    bson_iter_t it;
    bool capped = c != NULL && sbl_coll_capped(c, &max_size, &max_docs);

    BSON_APPEND_BOOL(out, "capped", capped);
    if (!capped)
        return;
    /* max as listed: 0 when none was given */
    max_docs = 0;
    if (bson_iter_init_find(&it, sbl_coll_options(c), "max") && BSON_ITER_HOLDS_NUMBER(&it))
        max_docs = bson_iter_as_int64(&it);
    sbl_append_int(out, "max", max_docs);
    sbl_append_int(out, "maxSize", max_size / (scale > 0 ? scale : 1));
}
