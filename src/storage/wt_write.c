/*
 * wt_write.c: sbl_write, the one path by which documents change.
 *
 * What must stay true:
 *  - The document change, its secondary index entries and then the write
 *    observer's changes (replication's oplog entry) happen in the caller's
 *    one WiredTiger transaction; a write outside a transaction runs in one of
 *    its own.  Capped eviction's deletes (sbl_wt_write_in_txn) are not
 *    observed.
 *  - Documents are keyed by _id, or by the collection's key field when it
 *    was created keyed (the oplog: ts).
 *  - Count and size changes are recorded as session deltas and reach the
 *    collection only when that transaction commits.
 *  - WiredTiger errors become MongoDB errors here and nowhere else:
 *    WT_DUPLICATE_KEY -> DuplicateKey 11000 with MongoDB's message and
 *    err_info, WT_ROLLBACK -> WriteConflict 112 (the caller retries).
 *  - In a dup_ids (time-series) collection the record key is the _id's key
 *    plus a sequence number (wt_int.h): an insert takes one past the largest
 *    under its _id, and an update or delete finds its record by the old
 *    document's bytes; the secondary index entries point at that record key.
 *  - In a versioned collection (config.transactions, wt_int.h) an update
 *    removes the document's record and inserts the new version under a new
 *    record key, in the same transaction (sbl_version_replace updates the
 *    record under its key up to VERSION_UPDATES times first); one document
 *    per _id as elsewhere.
 */
#include "storage/wt_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "doc/doc.h"

/* Append v the way MongoDB prints it in "dup key: { _id: ... }". */
static void format_value(bson_string_t *out, const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        bson_string_append_printf(out, "%" PRId32, v->value.v_int32);
        break;
    case BSON_TYPE_INT64:
        bson_string_append_printf(out, "%" PRId64, v->value.v_int64);
        break;
    case BSON_TYPE_DOUBLE: {
        double d = v->value.v_double;
        char tmp[64];
        snprintf(tmp, sizeof(tmp), "%.17g", d);
        /* Shortest form that round-trips, with ".0" on integral values. */
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(tmp, sizeof(tmp), "%.*g", prec, d);
            if (strtod(tmp, NULL) == d)
                break;
        }
        bson_string_append(out, tmp);
        if (isfinite(d) && strpbrk(tmp, ".e") == NULL)
            bson_string_append(out, ".0");
        break;
    }
    case BSON_TYPE_UTF8:
        bson_string_append_c(out, '"');
        for (uint32_t i = 0; i < v->value.v_utf8.len; i++) {
            char ch = v->value.v_utf8.str[i];
            if (ch == '"' || ch == '\\')
                bson_string_append_c(out, '\\');
            bson_string_append_c(out, ch);
        }
        bson_string_append_c(out, '"');
        break;
    case BSON_TYPE_OID: {
        char hex[25];
        bson_oid_to_string(&v->value.v_oid, hex);
        bson_string_append_printf(out, "ObjectId('%s')", hex);
        break;
    }
    case BSON_TYPE_BOOL:
        bson_string_append(out, v->value.v_bool ? "true" : "false");
        break;
    case BSON_TYPE_NULL:
        bson_string_append(out, "null");
        break;
    case BSON_TYPE_DATE_TIME:
        bson_string_append_printf(out, "new Date(%" PRId64 ")", v->value.v_datetime);
        break;
    default: {
        /* Everything else: the value's relaxed extended JSON. */
        bson_t tmp = BSON_INITIALIZER;
        char *json, *p;
        size_t n;
        sbl_append_value(&tmp, "v", 1, v);
        json = bson_as_relaxed_extended_json(&tmp, NULL);
        /* json is `{ "v" : <value> }` */
        p = json != NULL ? strstr(json, ": ") : NULL;
        if (p != NULL && (n = strlen(p + 2)) >= 2) {
            p[2 + n - 2] = '\0';
            bson_string_append(out, p + 2);
        }
        bson_free(json);
        bson_destroy(&tmp);
        break;
    }
    }
}

int sbl_wt_dup_key(const char *ns, const char *index, const bson_t *pattern, const bson_t *value,
                   bson_t *err_info, sbl_err_t *err)
{
    bson_string_t *msg = bson_string_new(NULL);
    bson_iter_t it;
    bool first = true;
    int rc;

    bson_string_append_printf(msg, "E11000 duplicate key error collection: %s index: %s dup key: {",
                              ns, index);
    bson_iter_init(&it, value);
    while (bson_iter_next(&it)) {
        bson_value_t v;
        sbl_iter_value(&it, &v);
        bson_string_append_printf(msg, "%s %s: ", first ? "" : ",", bson_iter_key(&it));
        format_value(msg, &v);
        first = false;
    }
    bson_string_append(msg, " }");
    rc = sbl_err_set(err, SBL_E_DuplicateKey, "%s", msg->str);
    bson_string_free(msg, true);
    if (err_info != NULL) {
        BSON_APPEND_DOCUMENT(err_info, "keyPattern", pattern);
        BSON_APPEND_DOCUMENT(err_info, "keyValue", value);
    }
    return rc;
}

static int dup_key_error(const sbl_coll_t *c, const bson_value_t *id, bson_t *err_info,
                         sbl_err_t *err)
{
    bson_t pattern = BSON_INITIALIZER, value = BSON_INITIALIZER;
    int rc;

    BSON_APPEND_INT32(&pattern, "_id", 1);
    sbl_append_value(&value, "_id", 3, id);
    rc = sbl_wt_dup_key(c->ns, "_id_", &pattern, &value, err_info, err);
    bson_destroy(&pattern);
    bson_destroy(&value);
    return rc;
}

/* Turn the encoded _id in s->key into a dup_ids record key: for an insert,
 * append the next sequence number under that _id; otherwise the key of the
 * record holding old_doc's bytes (the first under the _id when old_doc is
 * NULL).  WT_NOTFOUND when there is no such record. */
static int dup_record_key(sbl_session_t *s, WT_CURSOR *cur, sbl_write_kind_t kind,
                          const bson_t *old_doc)
{
    size_t n = s->key.len;
    WT_ITEM k;
    int exact, ret;

    if (kind != SBL_WRITE_INSERT) {
        if ((ret = sbl_dup_seek(cur, s->key.data, n, old_doc)) == 0 &&
            (ret = cur->get_key(cur, &k)) == 0) {
            sbl_buf_reset(&s->key);
            sbl_buf_append(&s->key, k.data, k.size);
        }
        return ret;
    }
    /* The largest key under the _id sorts just below _id + 0xff... */
    for (int i = 0; i < SBL_DUP_SEQ_LEN; i++)
        sbl_buf_append_byte(&s->key, 0xff);
    k.data = s->key.data;
    k.size = s->key.len;
    cur->set_key(cur, &k);
    ret = cur->search_near(cur, &exact);
    if (ret == 0 && exact > 0)
        ret = cur->prev(cur);
    s->key.len = n;
    uint64_t seq = 0;
    if (ret == 0 && (ret = cur->get_key(cur, &k)) == 0 && k.size == n + SBL_DUP_SEQ_LEN &&
        memcmp(k.data, s->key.data, n) == 0) {
        const uint8_t *p = (const uint8_t *)k.data + n;
        for (int i = 0; i < SBL_DUP_SEQ_LEN; i++)
            seq = (seq << 8) | p[i];
        if (seq == UINT64_MAX)
            return WT_ERROR; /* 2^64 inserts under one _id: cannot happen */
        seq++;
    }
    if (ret != 0 && ret != WT_NOTFOUND)
        return ret;
    cur->reset(cur);
    for (int i = SBL_DUP_SEQ_LEN - 1; i >= 0; i--)
        sbl_buf_append_byte(&s->key, (uint8_t)(seq >> (8 * i)));
    return 0;
}

/* Append seq to s->key as a dup_ids record key's sequence number. */
static void key_append_seq(sbl_session_t *s, uint64_t seq)
{
    for (int i = SBL_DUP_SEQ_LEN - 1; i >= 0; i--)
        sbl_buf_append_byte(&s->key, (uint8_t)(seq >> (8 * i)));
}

/* The version of a versioned collection's document (wt_int.h) found by a
 * write: its record's sequence number, or none (bare: a record keyed by the
 * bare _id, written before versioning), and its BSON length. */
typedef struct version {
    uint64_t seq;
    bool bare;
    size_t len;
} version_t;

/* A versioned collection's write, s->key holding the encoded _id: the
 * current version's record (*oldp) is removed (update, delete) and the new
 * document inserted one sequence number below it (insert, update); s->key
 * ends as the record key written, or removed for a delete.  When copy is not
 * NULL an update copies the removed document there (*copiedp).  WiredTiger's
 * return: WT_DUPLICATE_KEY for an insert under a live _id, WT_NOTFOUND for an
 * update or delete of none. */
static int versioned_write(sbl_session_t *s, WT_CURSOR *cur, sbl_write_kind_t kind,
                           const bson_t *new_doc, version_t *oldp, bson_t *copy,
                           bool *copiedp)
{
    size_t n = s->key.len;
    uint64_t seq = UINT64_MAX;
    WT_ITEM k, v;
    bson_t view;
    int ret = sbl_dup_seek(cur, s->key.data, n, NULL);

    if (ret == WT_NOTFOUND && kind == SBL_WRITE_INSERT)
        ret = 0;
    else if (ret != 0)
        return ret;
    else if (kind == SBL_WRITE_INSERT)
        return WT_DUPLICATE_KEY;
    else {
        if ((ret = cur->get_key(cur, &k)) != 0 || (ret = cur->get_value(cur, &v)) != 0)
            return ret;
        oldp->len = v.size;
        oldp->bare = k.size != n + SBL_DUP_SEQ_LEN;
        oldp->seq = 0;
        for (int i = 0; !oldp->bare && i < SBL_DUP_SEQ_LEN; i++)
            oldp->seq = (oldp->seq << 8) | ((const uint8_t *)k.data)[n + i];
        if (copy != NULL && bson_init_static(&view, v.data, v.size)) {
            bson_copy_to(&view, copy);
            *copiedp = true;
        }
        if (!oldp->bare && oldp->seq == 0)
            return WT_ERROR; /* 2^64 versions of one document: cannot happen */
        if (!oldp->bare)
            seq = oldp->seq - 1;
        if ((ret = cur->remove(cur)) != 0)
            return ret;
        if (kind == SBL_WRITE_DELETE) {
            if (!oldp->bare)
                key_append_seq(s, oldp->seq);
            return 0;
        }
    }
    key_append_seq(s, seq);
    k.data = s->key.data;
    k.size = s->key.len;
    cur->set_key(cur, &k);
    v.data = bson_get_data(new_doc);
    v.size = new_doc->len;
    cur->set_value(cur, &v);
    return cur->insert(cur);
}

/*
 * Replace the positioned record's value old_doc (what this transaction read)
 * by new_doc.  When only a small byte range differs, as for a $set of a few
 * fields, WiredTiger gets it as one WT_MODIFY (mongod's updateWithDamages):
 * the update chain then holds that range instead of another copy of the
 * document, which matters on a replica set member, whose WiredTiger keeps
 * every version within the snapshot history window in its cache
 * (docs/replication.md).  The result is checked against new_doc; a
 * difference (a base other than old_doc) is overwritten with the whole
 * document in the same transaction.
 */
static int update_value(WT_CURSOR *cur, const WT_ITEM *k, const bson_t *old_doc,
                        const bson_t *new_doc)
{
    const uint8_t *o = bson_get_data(old_doc), *n = bson_get_data(new_doc);
    size_t ol = old_doc->len, nl = new_doc->len, min = ol < nl ? ol : nl, pre = 4, suf = 0;
    WT_ITEM v;
    int ret;

    /* The length header (4 bytes, also when the size changes), then one range. */
    while (pre < min && o[pre] == n[pre])
        pre++;
    while (suf < min - pre && o[ol - 1 - suf] == n[nl - 1 - suf])
        suf++;
    if (nl >= 256 && (nl - pre - suf) * 4 < nl) {
        WT_MODIFY m[2];
        int nm = 0;
        if (memcmp(o, n, 4) != 0)
            m[nm++] = (WT_MODIFY){.data = {.data = n, .size = 4}, .offset = 0, .size = 4};
        m[nm++] = (WT_MODIFY){.data = {.data = n + pre, .size = nl - pre - suf}, .offset = pre,
                              .size = ol - pre - suf};
        ret = cur->modify(cur, m, nm);
        if (ret == EINVAL || ret == ENOTSUP) /* not in a snapshot transaction */
            cur->set_key(cur, k);
        else if (ret != 0)
            return ret;
        else if ((ret = cur->get_value(cur, &v)) != 0)
            return ret;
        else if (v.size == nl && memcmp(v.data, n, nl) == 0)
            return 0;
        else
            cur->set_key(cur, k);
    }
    v.data = n;
    v.size = nl;
    cur->set_value(cur, &v);
    return cur->update(cur);
}

/* The value doc is keyed by: its _id, or c's key field (a keyed collection). */
static bool doc_id(const sbl_coll_t *c, const bson_t *doc, bson_value_t *id)
{
    bson_iter_t it;

    if (doc == NULL || !sbl_doc_find_top(doc, sbl_table_key_field(c->tbl), &it))
        return false;
    sbl_iter_value(&it, id);
    return true;
}

/* The write itself, inside the open transaction. */
static int write_in_txn(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind,
                        const bson_t *old_doc, const bson_t *new_doc, bson_t *err_info,
                        sbl_err_t *err)
{
    const bson_t *keydoc = kind == SBL_WRITE_DELETE ? old_doc : new_doc;
    bson_value_t id, old_id;
    WT_CURSOR *cur;
    WT_ITEM k, v;
    int64_t dcount = 0, dsize = 0;
    bson_t fetched, old_copy;
    bool have_copy = false;
    int ret = 0, rc = 0;

    if (!doc_id(c, keydoc, &id))
        return sbl_err_set(err, SBL_E_InternalError, "storage write: document without _id");
    SBL_RET(sbl_session_cursor(s, c->tbl, &cur, err));
    sbl_buf_reset(&s->key);
    sbl_key_append(&s->key, &id, false);
    if (kind == SBL_WRITE_UPDATE && doc_id(c, old_doc, &old_id)) {
        size_t n = s->key.len;
        sbl_key_append(&s->key, &old_id, false);
        if (s->key.len != 2 * n || memcmp(s->key.data, s->key.data + n, n) != 0)
            return sbl_err_set(err, SBL_E_ImmutableField,
                               "Performing an update on the path '_id' would modify the "
                               "immutable field '_id'");
        s->key.len = n;
    }
    if (c->versioned) {
        size_t idlen = s->key.len;
        version_t ov = {0, false, 0};
        bool idx = sbl_index_count(c) > 0;
        ret = versioned_write(s, cur, kind, new_doc, &ov,
                              idx && old_doc == NULL ? &old_copy : NULL, &have_copy);
        cur->reset(cur);
        if (ret == WT_DUPLICATE_KEY)
            return dup_key_error(c, &id, err_info, err);
        if (ret != 0)
            return sbl_wt_err(err, ret == WT_NOTFOUND ? WT_ROLLBACK : ret, "write");
        dcount = kind == SBL_WRITE_INSERT ? 1 : kind == SBL_WRITE_DELETE ? -1 : 0;
        dsize = (kind != SBL_WRITE_DELETE ? (int64_t)new_doc->len : 0) - (int64_t)ov.len;
        if (idx && kind == SBL_WRITE_UPDATE) { /* the two versions' keys differ */
            const bson_t *od = have_copy ? &old_copy : old_doc;
            size_t newlen = s->key.len;
            uint8_t *newkey = bson_malloc(newlen);
            memcpy(newkey, s->key.data, newlen);
            s->key.len = idlen;
            if (!ov.bare)
                key_append_seq(s, ov.seq);
            rc = sbl_index_on_write(s, c, SBL_WRITE_DELETE, od, NULL, s->key.data, s->key.len,
                                    err_info, err);
            if (rc == 0)
                rc = sbl_index_on_write(s, c, SBL_WRITE_INSERT, NULL, new_doc, newkey, newlen,
                                        err_info, err);
            bson_free(newkey);
        } else if (idx)
            rc = sbl_index_on_write(s, c, kind, have_copy ? &old_copy : old_doc, new_doc,
                                    s->key.data, s->key.len, err_info, err);
        if (have_copy)
            bson_destroy(&old_copy);
        if (rc == 0)
            sbl_session_add_delta(s, c->tbl, dcount, dsize);
        return rc;
    }
    if (c->dup_ids && (ret = dup_record_key(s, cur, kind, old_doc)) != 0) {
        cur->reset(cur);
        return ret == WT_NOTFOUND ? sbl_wt_err(err, WT_ROLLBACK, "write")
                                  : sbl_wt_err(err, ret, "write");
    }
    k.data = s->key.data;
    k.size = s->key.len;
    cur->set_key(cur, &k);

    switch (kind) {
    case SBL_WRITE_INSERT:
        v.data = bson_get_data(new_doc);
        v.size = new_doc->len;
        ret = sbl_prepare_wait_key(cur);
        cur->set_value(cur, &v);
        if (ret == 0)
            ret = cur->insert(cur);
        dcount = 1;
        dsize = new_doc->len;
        break;
    case SBL_WRITE_UPDATE:
        if (old_doc == NULL) { /* the size delta needs the old length */
            if ((ret = cur->search(cur)) == 0 && (ret = cur->get_value(cur, &v)) == 0) {
                dsize = -(int64_t)v.size;
                /* Secondary indexes need the old document's keys. */
                if (sbl_index_count(c) > 0 && bson_init_static(&fetched, v.data, v.size)) {
                    bson_copy_to(&fetched, &old_copy);
                    have_copy = true;
                }
            }
            cur->set_key(cur, &k);
        } else
            dsize = -(int64_t)old_doc->len;
        if (ret == 0 && old_doc != NULL)
            ret = update_value(cur, &k, old_doc, new_doc);
        else if (ret == 0) {
            v.data = bson_get_data(new_doc);
            v.size = new_doc->len;
            cur->set_value(cur, &v);
            ret = cur->update(cur);
        }
        dsize += new_doc->len;
        break;
    case SBL_WRITE_DELETE:
        ret = cur->remove(cur);
        dcount = -1;
        dsize = -(int64_t)old_doc->len;
        break;
    }
    cur->reset(cur);
    if (ret == WT_DUPLICATE_KEY)
        rc = dup_key_error(c, &id, err_info, err);
    else if (ret == WT_NOTFOUND) /* gone since the caller read it: retry the operation */
        rc = sbl_wt_err(err, WT_ROLLBACK, "write");
    else if (ret != 0)
        rc = sbl_wt_err(err, ret, "write");
    /*
     * Secondary index entries, in this transaction: the old document's keys
     * out, the new one's in (a unique index's duplicate becomes 11000 like
     * _id's).  The observer (sbl_write) adds the oplog entry after this, in
     * the same transaction.
     */
    if (rc == 0 && sbl_index_count(c) > 0) {
        size_t idlen = s->key.len;
        rc = sbl_index_on_write(s, c, kind, have_copy ? &old_copy : old_doc, new_doc,
                                s->key.data, idlen, err_info, err);
    }
    if (have_copy)
        bson_destroy(&old_copy);
    if (rc == 0)
        sbl_session_add_delta(s, c->tbl, dcount, dsize);
    /* A capped collection's natural order and eviction (wt_capped.c), same transaction. */
    if (rc == 0 && c->tbl->capped != NULL)
        rc = sbl_capped_on_write(s, c, kind, old_doc, new_doc, err);
    return rc;
}

int sbl_wt_write_in_txn(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind,
                        const bson_t *old_doc, const bson_t *new_doc, bson_t *err_info,
                        sbl_err_t *err)
{
    return write_in_txn(s, c, kind, old_doc, new_doc, err_info, err);
}

static _Atomic(sbl_write_observer_fn) write_observer;

void sbl_storage_set_write_observer(sbl_write_observer_fn fn)
{
    atomic_store(&write_observer, fn);
}

/* The document change, then the observer's (the oplog entry), one transaction. */
static int write_observed(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind,
                          const bson_t *old_doc, const bson_t *new_doc, bson_t *err_info,
                          sbl_err_t *err)
{
    sbl_write_observer_fn obs = atomic_load_explicit(&write_observer, memory_order_relaxed);

    SBL_RET(write_in_txn(s, c, kind, old_doc, new_doc, err_info, err));
    return obs != NULL ? obs(s, c, kind, old_doc, new_doc, err) : 0;
}

static _Atomic uint64_t versioned_epoch = 1;

uint64_t sbl_versioned_epoch(void)
{
    return atomic_load_explicit(&versioned_epoch, memory_order_acquire);
}

void sbl_versioned_invalidate(void)
{
    atomic_fetch_add_explicit(&versioned_epoch, 1, memory_order_acq_rel);
}

int sbl_write(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind, const bson_t *old_doc,
              const bson_t *new_doc, bson_t *err_info, sbl_err_t *err)
{
    int rc;

    if (c->versioned) /* before the write: a reader that saw the old epoch checks again */
        sbl_versioned_invalidate();

    if ((kind != SBL_WRITE_DELETE && new_doc == NULL) ||
        (kind == SBL_WRITE_DELETE && old_doc == NULL))
        return sbl_err_set(err, SBL_E_InternalError, "storage write: missing document");
    if (kind != SBL_WRITE_DELETE)
        SBL_RET(sbl_storage_space_check(new_doc->len, err));
    if (s->in_txn) {
        s->nested_wrote = true;
        return write_observed(s, c, kind, old_doc, new_doc, err_info, err);
    }
    SBL_RET(sbl_txn_begin(s, err));
    if ((rc = write_observed(s, c, kind, old_doc, new_doc, err_info, err)) != 0) {
        sbl_txn_abort(s);
        return rc;
    }
    return sbl_txn_commit(s, err);
}

/*
 * How many writes of a versioned document share one record key (the first
 * inserts it, the others update it) before the next write moves it to a new
 * key.  An update of the key is one WiredTiger search and update (~3.5k
 * instructions less than the remove and insert of a new key, of a ~9k record
 * write); the bound keeps the key's update chain, which every further update
 * walks (__wt_update_obsolete_check) while the snapshot history window keeps
 * its versions, as short as WiredTiger's own threshold for that walk (20).
 */
#define VERSION_UPDATES 16

int sbl_version_replace(sbl_session_t *s, sbl_coll_t *c, sbl_version_t *v, const bson_t *new_doc,
                        bool *replacedp, sbl_err_t *err)
{
    sbl_write_observer_fn obs = atomic_load_explicit(&write_observer, memory_order_relaxed);
    uint8_t old_bytes[SBL_VERSION_DOC_MAX];
    size_t old_len = v->doc_len;
    uint64_t seq = UINT64_MAX;
    WT_CURSOR *cur;
    WT_ITEM k, d;
    bson_t old;
    int ret;

    *replacedp = false;
    if (!c->versioned || !s->in_txn || v->key_len == 0 || sbl_index_count(c) > 0 ||
        new_doc->len > SBL_VERSION_DOC_MAX || v->id_len + SBL_DUP_SEQ_LEN > SBL_VERSION_KEY_MAX ||
        (v->key_len != v->id_len && v->key_len != v->id_len + SBL_DUP_SEQ_LEN))
        return 0;
    /* a bare _id's record (wt_int.h) always moves to a sequence number's key */
    bool in_place = v->updates_left > 0 && v->key_len == v->id_len + SBL_DUP_SEQ_LEN;
    SBL_RET(sbl_storage_space_check(new_doc->len, err));
    SBL_RET(sbl_session_cursor(s, c->tbl, &cur, err));
    k.data = v->key;
    k.size = v->key_len;
    cur->set_key(cur, &k);
    if (v->known_current) /* updated or removed by its key below, without a search first */
        ret = 0;
    else if ((ret = cur->search(cur)) == 0 && (ret = cur->get_value(cur, &d)) == 0 &&
             (d.size != old_len || memcmp(d.data, v->doc, old_len) != 0))
        ret = WT_NOTFOUND; /* another version now: the caller's slower path */
    if (ret == 0 && !in_place && v->key_len != v->id_len) {
        seq = 0;
        for (int i = 0; i < SBL_DUP_SEQ_LEN; i++)
            seq = (seq << 8) | v->key[v->id_len + i];
        if (seq == 0)
            ret = WT_ERROR; /* 2^64 versions of one document: cannot happen */
        seq--;
    }
    d.data = bson_get_data(new_doc);
    d.size = new_doc->len;
    if (ret == 0 && v->known_current) {
        if (in_place) {
            cur->set_value(cur, &d);
            ret = cur->update(cur);
        } else {
            ret = cur->remove(cur);
        }
        if (ret != 0)
            v->known_current = false; /* not there (a version of an aborted transaction) */
    }
    if (ret != 0) {
        cur->reset(cur);
        return ret == WT_NOTFOUND || ret == WT_PREPARE_CONFLICT ? 0
                                                                : sbl_wt_err(err, ret, "write");
    }
    memcpy(old_bytes, v->doc, old_len);
    v->key_len = 0; /* until the new version is in */
    if (in_place) {
        if (!v->known_current) { /* positioned by the search */
            cur->set_value(cur, &d);
            ret = cur->update(cur);
        }
    } else if (v->known_current || (ret = cur->remove(cur)) == 0) {
        for (int i = 0; i < SBL_DUP_SEQ_LEN; i++)
            v->key[v->id_len + i] = (uint8_t)(seq >> (8 * (SBL_DUP_SEQ_LEN - 1 - i)));
        k.data = v->key;
        k.size = v->id_len + SBL_DUP_SEQ_LEN;
        cur->set_key(cur, &k);
        cur->set_value(cur, &d);
        ret = cur->insert(cur);
    }
    cur->reset(cur);
    if (ret != 0)
        return sbl_wt_err(err, ret == WT_NOTFOUND ? WT_ROLLBACK : ret, "write");
    s->nested_wrote = true;
    sbl_session_add_delta(s, c->tbl, 0, (int64_t)new_doc->len - (int64_t)old_len);
    memcpy(v->doc, bson_get_data(new_doc), new_doc->len);
    v->doc_len = new_doc->len;
    v->key_len = v->id_len + SBL_DUP_SEQ_LEN;
    v->updates_left = in_place ? v->updates_left - 1 : VERSION_UPDATES - 1;
    *replacedp = true;
    if (obs == NULL || !bson_init_static(&old, old_bytes, old_len))
        return 0;
    return obs(s, c, SBL_WRITE_UPDATE, &old, new_doc, err);
}
