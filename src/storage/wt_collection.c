/*
 * wt_collection.c: reading a collection: point gets by _id on the session's
 * cached cursor, ordered scans on a cursor of their own, and statistics.
 *
 * What must stay true:
 *  - Keys are sbl_key_append(_id, ascending) and compare with memcmp, so a
 *    bound is exactly matched by the key of an equal _id: inclusive and
 *    exclusive bounds are decided by comparing encoded keys.  In a dup_ids
 *    collection (wt_int.h) keys carry a sequence number after the _id, and a
 *    bound that must pass every record of its _id (exclusive low, inclusive
 *    high) gets 0xff bytes beyond any sequence number appended.
 *  - A cached cursor is reset after use so it pins no page or snapshot.
 *  - A scan holds a reference to its table, so the table outlives the scan
 *    even when the collection is dropped meanwhile (the drop is deferred).
 */
#include "storage/wt_int.h"

#include <stdio.h>
#include <string.h>

#include "doc/doc.h"

struct sbl_scan {
    sbl_range_t r; /* over the collection's table, by record key */
};

int sbl_dup_seek(WT_CURSOR *cur, const uint8_t *p, size_t n, const bson_t *like)
{
    WT_ITEM k, v;
    int exact, ret;

    k.data = p;
    k.size = n;
    cur->set_key(cur, &k);
    ret = cur->search_near(cur, &exact);
    if (ret == 0 && exact < 0)
        ret = cur->next(cur);
    while (ret == 0 && (ret = cur->get_key(cur, &k)) == 0) {
        if (k.size < n || memcmp(k.data, p, n) != 0)
            return WT_NOTFOUND;
        if (like == NULL)
            return 0;
        if ((ret = cur->get_value(cur, &v)) != 0)
            return ret;
        if (v.size == like->len && memcmp(v.data, bson_get_data(like), v.size) == 0)
            return 0;
        ret = cur->next(cur);
    }
    return ret;
}

bool sbl_coll_dup_ids(const sbl_coll_t *c)
{
    return c->dup_ids;
}

/* The point read behind sbl_coll_get and sbl_coll_get_same. */
static int get_one(sbl_session_t *s, sbl_coll_t *c, const bson_value_t *id, const bson_t *like,
                   bson_t *doc, bool *foundp, sbl_err_t *err)
{
    WT_CURSOR *cur;
    WT_ITEM k, v;
    bson_t view;
    int ret, rc = 0;

    *foundp = false;
    SBL_RET(sbl_session_cursor(s, c->tbl, &cur, err));
    sbl_buf_reset(&s->key);
    sbl_key_append(&s->key, id, false);
    do { /* again after a prepared transaction resolved (sbl_prepare_wait_here) */
        if (c->dup_ids) {
            ret = sbl_dup_seek(cur, s->key.data, s->key.len, like);
        } else {
            k.data = s->key.data;
            k.size = s->key.len;
            cur->set_key(cur, &k);
            ret = cur->search(cur);
        }
    } while (ret == WT_PREPARE_CONFLICT && sbl_prepare_wait_here());
    if (ret == 0) {
        if ((ret = cur->get_value(cur, &v)) == 0) {
            if (bson_init_static(&view, v.data, v.size)) {
                bson_copy_to(&view, doc);
                *foundp = true;
            } else
                rc = sbl_err_set(err, SBL_E_InternalError, "corrupt document in %s", c->ns);
        }
    }
    if (ret != 0 && ret != WT_NOTFOUND)
        rc = sbl_wt_err(err, ret, "point read");
    cur->reset(cur);
    return rc;
}

int sbl_coll_get(sbl_session_t *s, sbl_coll_t *c, const bson_value_t *id, bson_t *doc,
                 bool *foundp, sbl_err_t *err)
{
    return get_one(s, c, id, NULL, doc, foundp, err);
}

int sbl_coll_get_same(sbl_session_t *s, sbl_coll_t *c, const bson_t *like, bson_t *doc,
                      bool *foundp, sbl_err_t *err)
{
    bson_iter_t it;
    bson_value_t id;

    *foundp = false;
    if (!bson_iter_init_find(&it, like, sbl_table_key_field(c->tbl)))
        return 0;
    sbl_iter_value(&it, &id);
    return get_one(s, c, &id, c->dup_ids ? like : NULL, doc, foundp, err);
}

int sbl_version_get(sbl_session_t *s, sbl_coll_t *c, const bson_value_t *id, sbl_version_t *v,
                    sbl_err_t *err)
{
    WT_CURSOR *cur;
    WT_ITEM k, d;
    int ret;

    v->key_len = 0;
    v->known_current = false;
    v->updates_left = 0; /* not known: the next replace takes a new key */
    if (!c->versioned)
        return 0;
    SBL_RET(sbl_session_cursor(s, c->tbl, &cur, err));
    sbl_buf_reset(&s->key);
    sbl_key_append(&s->key, id, false);
    do
        ret = sbl_dup_seek(cur, s->key.data, s->key.len, NULL);
    while (ret == WT_PREPARE_CONFLICT && sbl_prepare_wait_here());
    if (ret == 0 && (ret = cur->get_key(cur, &k)) == 0 && (ret = cur->get_value(cur, &d)) == 0 &&
        k.size <= SBL_VERSION_KEY_MAX && d.size <= SBL_VERSION_DOC_MAX) {
        memcpy(v->key, k.data, k.size);
        memcpy(v->doc, d.data, d.size);
        v->id_len = (uint32_t)s->key.len;
        v->doc_len = (uint32_t)d.size;
        v->key_len = (uint32_t)k.size;
    }
    cur->reset(cur);
    return ret == 0 || ret == WT_NOTFOUND ? 0 : sbl_wt_err(err, ret, "point read");
}

int sbl_version_check(sbl_session_t *s, sbl_coll_t *c, const sbl_version_t *v, bool *currentp,
                      sbl_err_t *err)
{
    WT_CURSOR *cur;
    WT_ITEM k, d;
    int ret;

    *currentp = false;
    if (!c->versioned || v->key_len == 0)
        return 0;
    SBL_RET(sbl_session_cursor(s, c->tbl, &cur, err));
    k.data = v->key;
    k.size = v->key_len;
    do {
        cur->set_key(cur, &k);
        ret = cur->search(cur);
    } while (ret == WT_PREPARE_CONFLICT && sbl_prepare_wait_here());
    if (ret == 0 && (ret = cur->get_value(cur, &d)) == 0)
        *currentp = d.size == v->doc_len && memcmp(d.data, v->doc, d.size) == 0;
    cur->reset(cur);
    return ret == 0 || ret == WT_NOTFOUND ? 0 : sbl_wt_err(err, ret, "point read");
}

int sbl_scan_open(sbl_session_t *s, sbl_coll_t *c, const sbl_scan_bounds_t *bounds,
                  bool descending, sbl_scan_t **scanp, sbl_err_t *err)
{
    sbl_scan_t *scan;
    sbl_range_t *r;

    *scanp = NULL;
    sbl_session_reconcile(s);
    if (atomic_load(&c->tbl->dropped))
        return sbl_err_set(err, SBL_E_NamespaceNotFound, "collection %s was dropped", c->ns);
    scan = bson_malloc0(sizeof(*scan));
    r = &scan->r;
    if (sbl_range_open(s, c->tbl, descending, r, err) != 0) {
        bson_free(scan);
        return err->code;
    }
    if (bounds != NULL && bounds->lo != NULL) {
        r->has_lo = true;
        r->lo_inclusive = bounds->lo_inclusive;
        sbl_key_append(&r->lo, bounds->lo, false);
        if (c->dup_ids && !r->lo_inclusive)
            for (int i = 0; i <= SBL_DUP_SEQ_LEN; i++)
                sbl_buf_append_byte(&r->lo, 0xff);
    }
    if (bounds != NULL && bounds->hi != NULL) {
        r->has_hi = true;
        r->hi_inclusive = bounds->hi_inclusive;
        sbl_key_append(&r->hi, bounds->hi, false);
        if (c->dup_ids && r->hi_inclusive)
            for (int i = 0; i <= SBL_DUP_SEQ_LEN; i++)
                sbl_buf_append_byte(&r->hi, 0xff);
    }
    *scanp = scan;
    return 0;
}

int sbl_scan_next(sbl_scan_t *scan, bson_t *doc, bool *donep, sbl_err_t *err)
{
    WT_ITEM k, v;
    int ret = sbl_range_next(&scan->r, &k, &v);

    *donep = ret == WT_NOTFOUND;
    if (ret == WT_NOTFOUND)
        return 0;
    if (ret != 0)
        return sbl_wt_err(err, ret, "scan");
    if (!bson_init_static(doc, v.data, v.size))
        return sbl_err_set(err, SBL_E_InternalError, "corrupt document in scan");
    return 0;
}

void sbl_scan_close(sbl_scan_t *scan)
{
    if (scan == NULL)
        return;
    sbl_range_close(&scan->r);
    bson_free(scan);
}

int sbl_coll_stats(sbl_session_t *s, sbl_coll_t *c, sbl_coll_stats_t *st, sbl_err_t *err)
{
    WT_CURSOR *cur;
    char uri[300];
    const char *desc, *pvalue;
    int64_t v;

    memset(st, 0, sizeof(*st));
    st->count = (int64_t)atomic_load(&c->tbl->count);
    st->data_size = (int64_t)atomic_load(&c->tbl->data_size);
    if (st->count < 0)
        st->count = 0;
    if (st->data_size < 0)
        st->data_size = 0;
    snprintf(uri, sizeof(uri), "statistics:%s", c->tbl->uri);
    /* size: only the file size, which is cheap and needs no tree walk. */
    if (s->wt->open_cursor(s->wt, uri, NULL, "statistics=(size)", &cur) == 0) {
        cur->set_key(cur, WT_STAT_DSRC_BLOCK_SIZE);
        if (cur->search(cur) == 0 && cur->get_value(cur, &desc, &pvalue, &v) == 0)
            st->storage_size = v;
        cur->close(cur);
    }
    return 0;
}
