/*
 * wt_index_entries.c: a secondary index's entries: the keys of a document
 * (arrays expanded as MongoDB does, hashed and collated components), the
 * entries kept in step with each document change on the write path, index
 * scans over a key range, and the point read of a document by its encoded
 * _id that follows an index entry.
 *
 * What must stay true:
 *  - An index's entries change in the same transaction as the document
 *    (sbl_index_on_write, called by sbl_write).  A collection without
 *    secondary indexes costs one atomic load per write.
 *  - An entry is the key followed by the encoded _id (a unique index's is
 *    the key alone), its value the encoded _id; a unique index never
 *    removes or overwrites another document's entry.
 */
#include "storage/wt_int.h"

#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"
#include "geo/geo.h"
#include "query/query.h"

/* ---- key generation ------------------------------------------------------ */

static void vals_push(vals_t *vs, const bson_value_t *v)
{
    if (vs->n == vs->cap) {
        vs->cap = vs->cap ? vs->cap * 2 : 8;
        vs->v = bson_realloc(vs->v, vs->cap * sizeof(*vs->v));
    }
    vs->v[vs->n++] = *v;
}

static void push_null(vals_t *vs, bson_type_t t)
{
    bson_value_t v;
    memset(&v, 0, sizeof(v));
    v.value_type = t;
    vals_push(vs, &v);
}

/* Collect the values at path in the document data/len, expanding arrays as
 * MongoDB's index key generation does.  Returns how many were added. */
size_t sbl_index_walk(const uint8_t *data, uint32_t len, const char *path, vals_t *vs)
{
    const char *dot = strchr(path, '.');
    size_t clen = dot != NULL ? (size_t)(dot - path) : strlen(path);
    const char *rest = dot != NULL ? dot + 1 : NULL;
    bson_t d;
    bson_iter_t it;
    size_t before = vs->n;

    if (!bson_init_static(&d, data, len) || !bson_iter_init(&it, &d))
        return 0;
    while (bson_iter_next(&it)) {
        if (bson_iter_key_len(&it) != clen || memcmp(bson_iter_key(&it), path, clen) != 0)
            continue;
        bson_value_t v;
        sbl_iter_value(&it, &v);
        if (rest == NULL) {
            vs->present = true;
            if (v.value_type != BSON_TYPE_ARRAY) {
                vals_push(vs, &v);
                break;
            }
            vs->from_array = true;
            bson_iter_t ai;
            size_t n0 = vs->n;
            if (bson_iter_recurse(&it, &ai))
                while (bson_iter_next(&ai)) {
                    sbl_iter_value(&ai, &v);
                    vals_push(vs, &v);
                }
            if (vs->n == n0)
                push_null(vs, BSON_TYPE_UNDEFINED); /* [] */
            break;
        }
        if (v.value_type == BSON_TYPE_DOCUMENT) {
            sbl_index_walk(v.value.v_doc.data, v.value.v_doc.data_len, rest, vs);
        } else if (v.value_type == BSON_TYPE_ARRAY) {
            bson_iter_t ai;
            vs->from_array = true;
            if (bson_iter_recurse(&it, &ai))
                while (bson_iter_next(&ai)) {
                    bson_value_t e;
                    sbl_iter_value(&ai, &e);
                    if (e.value_type != BSON_TYPE_DOCUMENT ||
                        sbl_index_walk(e.value.v_doc.data, e.value.v_doc.data_len, rest, vs) == 0)
                        push_null(vs, BSON_TYPE_NULL);
                }
            /* A numeric component may also index the array. */
            if (rest[0] >= '0' && rest[0] <= '9') {
                bson_t arr;
                uint32_t alen;
                const uint8_t *adata;
                bson_iter_array(&it, &alen, &adata);
                if (bson_init_static(&arr, adata, alen))
                    sbl_index_walk(adata, alen, rest, vs);
            }
        }
        break;
    }
    return vs->n - before;
}

void sbl_keyset_init(keyset_t *ks)
{
    memset(ks, 0, sizeof(*ks));
    sbl_buf_init(&ks->arena);
}

void sbl_keyset_destroy(keyset_t *ks)
{
    sbl_buf_destroy(&ks->arena);
    bson_free(ks->off);
    bson_free(ks->len);
}

static _Thread_local const uint8_t *tls_arena;

static int ks_cmp_raw(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c != 0 ? c : al < bl ? -1 : al > bl;
}

static int ks_cmp(const void *x, const void *y)
{
    const size_t *a = x, *b = y;
    return ks_cmp_raw(tls_arena + a[0], a[1], tls_arena + b[0], b[1]);
}

/* Sort and deduplicate (pairs of off/len are sorted together). */
static void ks_finish(keyset_t *ks)
{
    size_t *pairs, i, j;

    if (ks->n < 2)
        return;
    pairs = bson_malloc(ks->n * 2 * sizeof(size_t));
    for (i = 0; i < ks->n; i++) {
        pairs[2 * i] = ks->off[i];
        pairs[2 * i + 1] = ks->len[i];
    }
    tls_arena = ks->arena.data;
    qsort(pairs, ks->n, 2 * sizeof(size_t), ks_cmp);
    for (i = j = 0; i < ks->n; i++) {
        if (j > 0 && ks_cmp(&pairs[2 * i], &pairs[2 * (j - 1)]) == 0)
            continue;
        pairs[2 * j] = pairs[2 * i];
        pairs[2 * j + 1] = pairs[2 * i + 1];
        j++;
    }
    for (i = 0; i < j; i++) {
        ks->off[i] = pairs[2 * i];
        ks->len[i] = pairs[2 * i + 1];
    }
    ks->n = j;
    bson_free(pairs);
}

static void ks_add(keyset_t *ks, size_t off)
{
    if (ks->n == ks->cap) {
        ks->cap = ks->cap ? ks->cap * 2 : 8;
        ks->off = bson_realloc(ks->off, ks->cap * sizeof(size_t));
        ks->len = bson_realloc(ks->len, ks->cap * sizeof(size_t));
    }
    ks->off[ks->n] = off;
    ks->len[ks->n] = ks->arena.len - off;
    ks->n++;
}

/* The key components (without _id) of doc for ix into ks; *multikeyp when an
 * array was expanded.  Errors: 171 parallel arrays, 16766 hashed array. */
int sbl_index_keys(const sbl_index_t *ix, const bson_t *doc, keyset_t *ks, bool *multikeyp,
                   sbl_err_t *err)
{
    vals_t vs[32];
    size_t nf = ix->nfields < 32 ? ix->nfields : 32, i, total = 1, arr_field = SIZE_MAX;
    bool any_present = false;
    int rc = 0;

    *multikeyp = false;
    if (ix->partial != NULL && !sbl_matcher_match(ix->partial, doc, NULL))
        return 0;
    if (ix->text != NULL)
        return sbl_index_text_keys(ix, doc, ks, err);
    if (ix->geo != 0)
        return sbl_index_geo_keys(ix, doc, ks, multikeyp, err);
    memset(vs, 0, sizeof(vs));
    for (i = 0; i < nf; i++) {
        sbl_index_walk(bson_get_data(doc), doc->len, ix->fields[i], &vs[i]);
        if (vs[i].n == 0)
            push_null(&vs[i], BSON_TYPE_NULL);
        any_present |= vs[i].present;
        if (vs[i].from_array) {
            if (ix->dirs[i] == 0) {
                rc = sbl_err_set(err, 16766,
                                 "Error: hashed indexes do not currently support array values. "
                                 "Found array at path: %s", ix->fields[i]);
                goto done;
            }
            if (arr_field != SIZE_MAX) {
                rc = sbl_err_set(err, SBL_E_CannotIndexParallelArrays,
                                 "cannot index parallel arrays [%s] [%s]", ix->fields[i],
                                 ix->fields[arr_field]);
                goto done;
            }
            arr_field = i;
            *multikeyp = true;
        }
        total *= vs[i].n;
    }
    if (ix->sparse && !any_present)
        goto done;
    /* At most one field has several values: enumerate them. */
    for (size_t k = 0; k < total; k++) {
        size_t off = ks->arena.len;
        for (i = 0; i < nf; i++) {
            const bson_value_t *v = &vs[i].v[i == arr_field ? k : 0];
            if (ix->dirs[i] == 0) {
                bson_value_t h;
                sbl_index_hash(v, &h);
                sbl_key_append(&ks->arena, &h, false);
            } else
                sbl_key_append_coll(&ks->arena, v, ix->dirs[i] < 0, ix->coll);
        }
        ks_add(ks, off);
    }
    ks_finish(ks);
done:
    for (i = 0; i < nf; i++)
        bson_free(vs[i].v);
    return rc;
}

int sbl_index_text_keys(const sbl_index_t *ix, const bson_t *doc, keyset_t *ks, sbl_err_t *err)
{
    sbl_fts_scores_t sc;
    sbl_buf_t prefix;
    int rc;

    sbl_fts_scores_init(&sc);
    sbl_buf_init(&prefix);
    for (size_t i = 0; i < ix->nfields; i++) {
        vals_t vs;
        memset(&vs, 0, sizeof(vs));
        sbl_index_walk(bson_get_data(doc), doc->len, ix->fields[i], &vs);
        if (vs.from_array) {
            bson_free(vs.v);
            rc = sbl_err_set(err, SBL_E_BadValue,
                             "Field '%s' of text index contains an array in document: %s",
                             ix->fields[i], "(document)");
            goto done;
        }
        if (vs.n == 0)
            push_null(&vs, BSON_TYPE_NULL);
        sbl_key_append(&prefix, &vs.v[0], ix->dirs[i] < 0);
        bson_free(vs.v);
    }
    SBL_ERR(sbl_fts_doc_scores(ix->text, doc, &sc, err));
    for (size_t t = 0; t < sc.n; t++) {
        size_t off = ks->arena.len;
        bson_value_t v;
        sbl_buf_append(&ks->arena, prefix.data, prefix.len);
        v.value_type = BSON_TYPE_UTF8;
        v.value.v_utf8.str = sc.term[t];
        v.value.v_utf8.len = (uint32_t)strlen(sc.term[t]);
        sbl_key_append(&ks->arena, &v, false);
        uint8_t be[8];
        sbl_index_text_score_put(sc.score[t], be);
        sbl_buf_append(&ks->arena, be, 8);
        ks_add(ks, off);
    }
    ks_finish(ks);
err:
done:
    sbl_fts_scores_destroy(&sc);
    sbl_buf_destroy(&prefix);
    return rc;
}

/* The geo field's cells of doc (all its geometries) into *cellsp; 0 cells
 * when the field is missing or null. */
static int geo_cells(const sbl_index_t *ix, const bson_t *doc, uint64_t **cellsp, size_t *np,
                     sbl_err_t *err)
{
    bson_iter_t it;
    int rc = 0;
    *cellsp = NULL;
    *np = 0;
    if (!bson_iter_init(&it, doc))
        return 0;
    bson_iter_t f;
    if (!bson_iter_find_descendant(&it, ix->fields[ix->geo_field], &f))
        return 0;
    bson_value_t v = *bson_iter_value(&f), *vals = &v;
    size_t nv = 1;
    bson_value_t *elems = NULL;
    double x, y;
    if (v.value_type == BSON_TYPE_NULL || v.value_type == BSON_TYPE_UNDEFINED)
        return 0;
    if (v.value_type == BSON_TYPE_ARRAY && !sbl_geo_legacy_pair(&v, &x, &y)) {
        bson_iter_t ai;
        nv = 0;
        if (bson_iter_recurse(&f, &ai))
            while (bson_iter_next(&ai)) {
                elems = bson_realloc(elems, (nv + 1) * sizeof(*elems));
                elems[nv++] = *bson_iter_value(&ai);
            }
        vals = elems;
    }
    for (size_t i = 0; i < nv && rc == 0; i++) {
        sbl_err_t e = {0};
        uint64_t *c = NULL;
        size_t n = 0;
        if (ix->geo == SBL_INDEX_2D) {
            if (!sbl_geo_legacy_pair(&vals[i], &x, &y)) {
                rc = sbl_err_set(err, 13026, "geo values must be 'legacy coordinate pairs' for "
                                             "2d indexes");
                break;
            }
            if (!(x >= -180 && x < 180 && y >= -180 && y < 180)) {
                rc = sbl_err_set(err, 13027, "point not in interval of [ -180, 180 ) :: caused "
                                             "by :: { 0: %g, 1: %g }", x, y);
                break;
            }
            /* 2d keys: the S2 cell of the point read as (lng, lat), y folded into [-90, 90] */
            c = bson_malloc(sizeof(uint64_t));
            c[0] = sbl_geo_point_cell(x, y > 90 ? 180 - y : y < -90 ? -180 - y : y, SBL_GEO_FINEST);
            n = 1;
        } else if (sbl_geo_as_point(&vals[i], &x, &y)) {
            /* a point (the common case): its cell, without building S2 shapes */
            c = bson_malloc(sizeof(uint64_t));
            c[0] = sbl_geo_point_cell(x, y, SBL_GEO_FINEST);
            n = 1;
        } else {
            sbl_geo_t *g = NULL;
            if (sbl_geo_parse(&vals[i], SBL_GEO_ALLOW_LEGACY, &g, &e) != 0) {
                char *j = bson_as_relaxed_extended_json(doc, NULL);
                rc = sbl_err_set(err, 16755, "Can't extract geo keys: %s  %s", j != NULL ? j : "",
                                 e.msg);
                bson_free(j);
                break;
            }
            n = sbl_geo_index_cells(g, &c);
            sbl_geo_free(g);
        }
        *cellsp = bson_realloc(*cellsp, (*np + n + 1) * sizeof(uint64_t));
        memcpy(*cellsp + *np, c, n * sizeof(uint64_t));
        *np += n;
        bson_free(c);
    }
    bson_free(elems);
    if (rc != 0) {
        bson_free(*cellsp);
        *cellsp = NULL;
        *np = 0;
    }
    return rc;
}

int sbl_index_geo_keys(const sbl_index_t *ix, const bson_t *doc, keyset_t *ks, bool *multikeyp,
                       sbl_err_t *err)
{
    vals_t vs[32];
    size_t nf = ix->nfields < 32 ? ix->nfields : 32, i, total = 1, arr_field = SIZE_MAX;
    uint64_t *cells = NULL;
    size_t ncells = 0;
    int rc = 0;

    SBL_RET(geo_cells(ix, doc, &cells, &ncells, err));
    if (ncells == 0)
        return 0; /* no geometry: no entry (2dsphere version 2 and later are sparse) */
    *multikeyp = ncells > 1;
    memset(vs, 0, sizeof(vs));
    for (i = 0; i < nf; i++) {
        if (i == ix->geo_field)
            continue;
        sbl_index_walk(bson_get_data(doc), doc->len, ix->fields[i], &vs[i]);
        if (vs[i].n == 0)
            push_null(&vs[i], BSON_TYPE_NULL);
        if (vs[i].from_array) {
            if (arr_field != SIZE_MAX) {
                rc = sbl_err_set(err, SBL_E_CannotIndexParallelArrays,
                                 "cannot index parallel arrays [%s] [%s]", ix->fields[i],
                                 ix->fields[arr_field]);
                goto done;
            }
            arr_field = i;
            *multikeyp = true;
        }
        total *= vs[i].n;
    }
    for (size_t g = 0; g < ncells; g++)
        for (size_t k = 0; k < total; k++) {
            size_t off = ks->arena.len;
            for (i = 0; i < nf; i++) {
                if (i == ix->geo_field)
                    sbl_index_geo_cell_append(&ks->arena, cells[g]);
                else
                    sbl_key_append_coll(&ks->arena, &vs[i].v[i == arr_field ? k : 0],
                                        ix->dirs[i] < 0, ix->coll);
            }
            ks_add(ks, off);
        }
    ks_finish(ks);
done:
    for (i = 0; i < nf; i++)
        bson_free(vs[i].v);
    bson_free(cells);
    return rc;
}

/* Decode the components of key into {field: value, ...} and pattern {field: dir}. */
static void key_doc(const sbl_index_t *ix, const uint8_t *key, size_t len, bson_t *pattern,
                    bson_t *value)
{
    size_t pos = 0;

    for (size_t i = 0; i < ix->nfields; i++) {
        if (ix->dirs[i] == 0)
            BSON_APPEND_UTF8(pattern, ix->fields[i], "hashed");
        else
            BSON_APPEND_INT32(pattern, ix->fields[i], ix->dirs[i]);
        bson_t tmp = BSON_INITIALIZER;
        size_t n = pos < len ? sbl_key_decode_dir(key + pos, len - pos, &tmp, "k",
                                                  ix->dirs[i] < 0)
                             : 0;
        bson_iter_t it;
        if (n > 0 && bson_iter_init_find(&it, &tmp, "k"))
            sbl_append_value(value, ix->fields[i], -1, bson_iter_value(&it));
        else
            bson_append_null(value, ix->fields[i], -1);
        bson_destroy(&tmp);
        pos += n;
    }
}

/* ---- entries ------------------------------------------------------------------ */

/* prepareUnique on a non-unique index: does another document have key k?
 * Entries are k + _id key and k is self-delimiting, so they share the prefix k. */
static int prepared_dup(sbl_session_t *s, const char *ns, sbl_index_t *ix, WT_CURSOR *cur,
                        const uint8_t *k, size_t klen, const uint8_t *idk, size_t idlen,
                        bson_t *err_info, sbl_err_t *err)
{
    WT_ITEM key, found;
    int exact, ret;
    (void)s;
    key.data = k;
    key.size = klen;
    cur->set_key(cur, &key);
    ret = cur->search_near(cur, &exact);
    if (ret == 0 && exact < 0)
        ret = cur->next(cur);
    while (ret == 0 && (ret = cur->get_key(cur, &found)) == 0) {
        if (found.size < klen || memcmp(found.data, k, klen) != 0)
            break;
        if (found.size - klen != idlen || memcmp((const uint8_t *)found.data + klen, idk, idlen) != 0) {
            bson_t pattern = BSON_INITIALIZER, value = BSON_INITIALIZER;
            key_doc(ix, k, klen, &pattern, &value);
            cur->reset(cur);
            int rc = sbl_wt_dup_key(ns, ix->name, &pattern, &value, err_info, err);
            bson_destroy(&pattern);
            bson_destroy(&value);
            return rc;
        }
        ret = cur->next(cur);
    }
    cur->reset(cur);
    return ret == 0 || ret == WT_NOTFOUND ? 0 : sbl_wt_err(err, ret, "index search");
}

int sbl_index_entry_insert(sbl_session_t *s, const char *ns, sbl_index_t *ix, const uint8_t *k,
                           size_t klen, const uint8_t *idk, size_t idlen, bson_t *err_info,
                           sbl_err_t *err)
{
    WT_CURSOR *cur;
    WT_ITEM key, val;
    int ret;

    SBL_RET(sbl_session_cursor(s, ix->tbl, &cur, err));
    if (ix->prepare_unique && !ix->unique)
        SBL_RET(prepared_dup(s, ns, ix, cur, k, klen, idk, idlen, err_info, err));
    sbl_buf_reset(&s->key);
    sbl_buf_append(&s->key, k, klen);
    if (!ix->unique)
        sbl_buf_append(&s->key, idk, idlen);
    key.data = s->key.data;
    key.size = s->key.len;
    val.data = idk;
    val.size = idlen;
    cur->set_key(cur, &key);
    ret = ix->unique ? sbl_prepare_wait_key(cur) : 0;
    cur->set_value(cur, &val);
    if (ret == 0)
        ret = cur->insert(cur);
    if (ret == WT_DUPLICATE_KEY) {
        /* The same entry (a build racing a write), or another document's key. */
        WT_ITEM old;
        ret = 0;
        if (ix->unique && cur->search(cur) == 0 && cur->get_value(cur, &old) == 0 &&
            (old.size != idlen || memcmp(old.data, idk, idlen) != 0)) {
            bson_t pattern = BSON_INITIALIZER, value = BSON_INITIALIZER;
            key_doc(ix, k, klen, &pattern, &value);
            cur->reset(cur);
            int rc = sbl_wt_dup_key(ns, ix->name, &pattern, &value, err_info, err);
            bson_destroy(&pattern);
            bson_destroy(&value);
            return rc;
        }
    }
    cur->reset(cur);
    return ret == 0 ? 0 : sbl_wt_err(err, ret, "index insert");
}

static int entry_remove(sbl_session_t *s, sbl_index_t *ix, const uint8_t *k, size_t klen,
                        const uint8_t *idk, size_t idlen, sbl_err_t *err)
{
    WT_CURSOR *cur;
    WT_ITEM key, old;
    int ret;

    SBL_RET(sbl_session_cursor(s, ix->tbl, &cur, err));
    sbl_buf_reset(&s->key);
    sbl_buf_append(&s->key, k, klen);
    if (!ix->unique)
        sbl_buf_append(&s->key, idk, idlen);
    key.data = s->key.data;
    key.size = s->key.len;
    cur->set_key(cur, &key);
    if (ix->unique) {
        /* Only our own entry: never another document's. */
        ret = cur->search(cur);
        if (ret == 0 && (ret = cur->get_value(cur, &old)) == 0 &&
            old.size == idlen && memcmp(old.data, idk, idlen) == 0)
            ret = cur->remove(cur);
    } else
        ret = cur->remove(cur);
    cur->reset(cur);
    if (ret == WT_NOTFOUND) /* not built yet */
        ret = 0;
    return ret == 0 ? 0 : sbl_wt_err(err, ret, "index remove");
}

/* Persist that ix is multikey (a catalog transaction of its own). */
static void persist_multikey(sbl_wt_table_t *t)
{
    sbl_err_t e;
    sbl_err_clear(&e);
    sbl_catalog_update_table(t, &e);
}

/* Apply one document's change to ix: remove old keys not in new, insert new not in old. */
static int index_apply(sbl_session_t *s, sbl_coll_t *c, sbl_index_t *ix, const bson_t *old_doc,
                       const bson_t *new_doc, const uint8_t *idk, size_t idlen,
                       bson_t *err_info, bool *became_multikey, sbl_err_t *err)
{
    keyset_t o, n;
    bool mk = false, mk_old;
    size_t i = 0, j = 0;
    int rc = 0;

    sbl_keyset_init(&o);
    sbl_keyset_init(&n);
    if (old_doc != NULL) {
        sbl_err_t ignore;
        if (sbl_index_keys(ix, old_doc, &o, &mk_old, &ignore) != 0)
            o.n = 0;
    }
    if (new_doc != NULL) {
        SBL_ERR(sbl_index_keys(ix, new_doc, &n, &mk, err));
        if (mk && !atomic_load(&ix->multikey)) {
            atomic_store(&ix->multikey, true);
            *became_multikey = true;
        }
    }
    while (i < o.n || j < n.n) {
        int cmp = i >= o.n   ? 1
                  : j >= n.n ? -1
                             : ks_cmp_raw(o.arena.data + o.off[i], o.len[i],
                                          n.arena.data + n.off[j], n.len[j]);
        if (cmp == 0) {
            i++;
            j++;
        } else if (cmp < 0) {
            SBL_ERR(entry_remove(s, ix, o.arena.data + o.off[i], o.len[i], idk, idlen, err));
            i++;
        } else {
            SBL_ERR(sbl_index_entry_insert(s, c->ns, ix, n.arena.data + n.off[j], n.len[j], idk,
                                           idlen, err_info, err));
            j++;
        }
    }
err:
    sbl_keyset_destroy(&o);
    sbl_keyset_destroy(&n);
    return rc;
}

int sbl_index_on_write(sbl_session_t *s, sbl_coll_t *c, sbl_write_kind_t kind,
                       const bson_t *old_doc, const bson_t *new_doc, const uint8_t *idk,
                       size_t idlen, bson_t *err_info, sbl_err_t *err)
{
    sbl_wt_table_t *t = c->tbl;
    bool became_multikey = false;
    int rc = 0;

    if (atomic_load(&t->nidx_quick) == 0)
        return 0;
    /* s->key is the caller's scratch too: keep our own copy of the _id. */
    uint8_t small[128];
    uint8_t *id = idlen <= sizeof(small) ? small : bson_malloc(idlen);
    memcpy(id, idk, idlen);
    pthread_rwlock_rdlock(&t->idx_lock);
    for (size_t i = 0; i < t->nidx && rc == 0; i++)
        rc = index_apply(s, c, t->idx[i], kind == SBL_WRITE_INSERT ? NULL : old_doc,
                         kind == SBL_WRITE_DELETE ? NULL : new_doc, id, idlen, err_info,
                         &became_multikey, err);
    pthread_rwlock_unlock(&t->idx_lock);
    if (id != small)
        bson_free(id);
    if (became_multikey)
        persist_multikey(t);
    return rc;
}

/* ---- index scans ------------------------------------------------------------- */

struct sbl_iscan {
    sbl_range_t r; /* over the index's table: [lo, hi), either bound empty for none */
};

int sbl_iscan_open(sbl_session_t *s, sbl_index_t *ix, const uint8_t *lo, size_t lo_len,
                   const uint8_t *hi, size_t hi_len, bool backward, sbl_iscan_t **scanp,
                   sbl_err_t *err)
{
    sbl_iscan_t *sc;

    *scanp = NULL;
    sbl_session_reconcile(s);
    if (atomic_load(&ix->tbl->dropped))
        return sbl_err_set(err, SBL_E_QueryPlanKilled, "query plan killed :: caused by :: "
                           "index '%s' dropped", ix->name);
    sc = bson_malloc0(sizeof(*sc));
    if (sbl_range_open(s, ix->tbl, backward, &sc->r, err) != 0) {
        bson_free(sc);
        return err->code;
    }
    sc->r.has_lo = lo_len > 0;
    sc->r.lo_inclusive = true;
    sc->r.has_hi = hi_len > 0;
    sc->r.hi_inclusive = false;
    sbl_buf_append(&sc->r.lo, lo, lo_len);
    sbl_buf_append(&sc->r.hi, hi, hi_len);
    *scanp = sc;
    return 0;
}

int sbl_iscan_next(sbl_iscan_t *sc, const uint8_t **key, size_t *klen, const uint8_t **idk,
                   size_t *idlen, bool *donep, sbl_err_t *err)
{
    WT_ITEM k, v;
    int ret = sbl_range_next(&sc->r, &k, &v);

    *donep = ret == WT_NOTFOUND;
    if (ret == WT_NOTFOUND)
        return 0;
    if (ret != 0)
        return sbl_wt_err(err, ret, "index scan");
    *key = k.data;
    *klen = k.size;
    *idk = v.data;
    *idlen = v.size;
    return 0;
}

void sbl_iscan_close(sbl_iscan_t *sc)
{
    if (sc == NULL)
        return;
    sbl_range_close(&sc->r);
    bson_free(sc);
}

int sbl_coll_get_by_key(sbl_session_t *s, sbl_coll_t *c, const uint8_t *idk, size_t idlen,
                        bson_t *doc, bool *foundp, sbl_err_t *err)
{
    WT_CURSOR *cur;
    WT_ITEM k, v;
    bson_t view;
    int ret, rc = 0;

    *foundp = false;
    SBL_RET(sbl_session_cursor(s, c->tbl, &cur, err));
    k.data = idk;
    k.size = idlen;
    cur->set_key(cur, &k);
    ret = cur->search(cur);
    if (ret == 0 && (ret = cur->get_value(cur, &v)) == 0) {
        if (bson_init_static(&view, v.data, v.size)) {
            bson_copy_to(&view, doc);
            *foundp = true;
        } else
            rc = sbl_err_set(err, SBL_E_InternalError, "corrupt document in %s", c->ns);
    }
    if (ret != 0 && ret != WT_NOTFOUND)
        rc = sbl_wt_err(err, ret, "point read");
    cur->reset(cur);
    return rc;
}

int sbl_coll_get_by_keys(sbl_session_t *s, sbl_coll_t *c, size_t n, const uint8_t *const *keys,
                         const uint32_t *lens, sbl_fetch_fn fn, void *arg, sbl_err_t *err)
{
    WT_CURSOR *cur;
    WT_ITEM k, v;
    bson_t view;
    int ret = 0, rc = 0;

    SBL_RET(sbl_session_cursor(s, c->tbl, &cur, err));
    for (size_t i = 0; i < n && rc == 0; i++) {
        k.data = keys[i];
        k.size = lens[i];
        cur->set_key(cur, &k);
        /* no reset in between: a search starts on the leaf page it stays on */
        if ((ret = cur->search(cur)) == WT_NOTFOUND)
            continue;
        if (ret != 0 || (ret = cur->get_value(cur, &v)) != 0)
            rc = sbl_wt_err(err, ret, "point read");
        else if (!bson_init_static(&view, v.data, v.size))
            rc = sbl_err_set(err, SBL_E_InternalError, "corrupt document in %s", c->ns);
        else
            rc = fn(arg, &view, err);
    }
    cur->reset(cur);
    return rc;
}
