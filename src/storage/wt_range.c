/*
 * wt_range.c: a cursor walk over a key range of one table, in key order or
 * its reverse.  Collection scans (wt_collection.c) and index scans
 * (wt_index_entries.c) are both this walk; they differ only in how their
 * bounds are built and what they make of a record.
 *
 * What must stay true: keys compare as memcmp with a shorter prefix first
 * (WiredTiger's default collator); the walk holds a reference on its table
 * and a cursor of the session's engine open (epoch), which it closes only
 * while that open lasts.
 */
#include "storage/wt_int.h"

#include <string.h>

int sbl_range_open(sbl_session_t *s, sbl_wt_table_t *t, bool backward, sbl_range_t *r,
                   sbl_err_t *err)
{
    int ret;

    memset(r, 0, sizeof(*r));
    sbl_buf_init(&r->lo);
    sbl_buf_init(&r->hi);
    if ((ret = s->wt->open_cursor(s->wt, t->uri, NULL, NULL, &r->cursor)) != 0) {
        sbl_buf_destroy(&r->lo);
        sbl_buf_destroy(&r->hi);
        return sbl_wt_err(err, ret, "open scan");
    }
    r->epoch = s->epoch;
    r->tbl = t;
    sbl_table_ref(t);
    r->backward = backward;
    return 0;
}

/* memcmp order, a shorter prefix first. */
static int key_cmp(const WT_ITEM *k, const sbl_buf_t *b)
{
    size_t n = k->size < b->len ? k->size : b->len;
    int c = memcmp(k->data, b->data, n);

    if (c != 0)
        return c;
    return k->size < b->len ? -1 : k->size > b->len ? 1 : 0;
}

/* Position on the first record in walk order (at or past the start bound). */
static int range_start(sbl_range_t *r)
{
    WT_CURSOR *cur = r->cursor;
    const sbl_buf_t *b = r->backward ? &r->hi : &r->lo;
    bool has = r->backward ? r->has_hi : r->has_lo;
    bool inclusive = r->backward ? r->hi_inclusive : r->lo_inclusive;
    WT_ITEM k;
    int exact, ret;

    if (!has)
        return r->backward ? cur->prev(cur) : cur->next(cur);
    k.data = b->data;
    k.size = b->len;
    cur->set_key(cur, &k);
    if ((ret = cur->search_near(cur, &exact)) != 0)
        return ret;
    /* search_near lands on the bound, or on a neighbour on either side. */
    if (r->backward) {
        if (exact > 0 || (exact == 0 && !inclusive))
            return cur->prev(cur);
    } else {
        if (exact < 0 || (exact == 0 && !inclusive))
            return cur->next(cur);
    }
    return 0;
}

int sbl_range_next(sbl_range_t *r, WT_ITEM *k, WT_ITEM *v)
{
    WT_CURSOR *cur = r->cursor;
    int ret;

    if (r->done)
        return WT_NOTFOUND;
    /* A prepared transaction's write: the same call again once it resolved
     * (WiredTiger keeps the position), when the operation waits in place. */
    if (!r->started) {
        r->started = true;
        do
            ret = range_start(r);
        while (ret == WT_PREPARE_CONFLICT && sbl_prepare_wait_here());
    } else {
        do
            ret = r->backward ? cur->prev(cur) : cur->next(cur);
        while (ret == WT_PREPARE_CONFLICT && sbl_prepare_wait_here());
    }
    if (ret == 0 && (ret = cur->get_key(cur, k)) == 0) {
        /* The end bound. */
        int c;
        if (r->backward && r->has_lo) {
            c = key_cmp(k, &r->lo);
            if (c < 0 || (c == 0 && !r->lo_inclusive))
                ret = WT_NOTFOUND;
        } else if (!r->backward && r->has_hi) {
            c = key_cmp(k, &r->hi);
            if (c > 0 || (c == 0 && !r->hi_inclusive))
                ret = WT_NOTFOUND;
        }
    }
    if (ret == 0)
        ret = cur->get_value(cur, v);
    if (ret == WT_NOTFOUND) {
        r->done = true;
        cur->reset(cur);
    }
    return ret;
}

void sbl_range_close(sbl_range_t *r)
{
    /* A cursor of a session that engine close already closed is gone. */
    if (sbl_eng.open && r->epoch == sbl_eng.epoch)
        r->cursor->close(r->cursor);
    sbl_table_unref(r->tbl);
    sbl_buf_destroy(&r->lo);
    sbl_buf_destroy(&r->hi);
}
