/*
 * wt_index.c: secondary indexes: their key generation, their maintenance on
 * the write path, building one on a populated collection, dropping, index
 * scans, and the TTL monitor.
 *
 * What must stay true:
 *  - An index's entries change in the same transaction as the document
 *    (sbl_index_on_write, called by sbl_write).  A collection without
 *    secondary indexes costs one atomic load per write.
 *  - A build publishes the index first (writes maintain it from then on),
 *    waits until every transaction that began before it finished, then adds
 *    the existing documents in short transactions that reserve each document
 *    they index, so a concurrent change of that document conflicts (one side
 *    retries) instead of leaving a stale entry.  Only then is it ready for
 *    queries.  A crash mid-build leaves a not-ready index that load drops.
 *  - Lock order: catalog lock, then a table's idx_lock.
 */
#include "storage/wt_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "doc/doc.h"
#include "query/query.h"

#define BUILD_CHUNK 256
#define TTL_BATCH 1000

struct sbl_index {
    char *name;
    bson_t *spec;
    bson_t *partial_spec; /* NULL: not partial */
    sbl_matcher_t *partial;
    size_t nfields;
    char **fields;
    int8_t *dirs; /* 1, -1, 0 = hashed */
    bool unique, sparse, hashed;
    bool prepare_unique;  /* collMod prepareUnique: refuse new duplicate keys */
    int64_t expire_after; /* -1: not a TTL index */
    const sbl_collation_t *coll; /* NULL: simple; string keys are its sort keys */
    sbl_wt_table_t *tbl;
    atomic_bool ready, multikey;
    atomic_int refs;
};

/* ---- handles --------------------------------------------------------------- */

static void index_unref(sbl_index_t *ix)
{
    if (ix == NULL || atomic_fetch_sub(&ix->refs, 1) != 1)
        return;
    for (size_t i = 0; i < ix->nfields; i++)
        bson_free(ix->fields[i]);
    bson_free(ix->fields);
    bson_free(ix->dirs);
    bson_free(ix->name);
    if (ix->spec != NULL)
        bson_destroy(ix->spec);
    if (ix->partial_spec != NULL)
        bson_destroy(ix->partial_spec);
    sbl_matcher_free(ix->partial);
    sbl_table_unref(ix->tbl);
    bson_free(ix);
}

/* Parse a stored spec into a handle on table uri (not yet on disk). */
static int index_new(const bson_t *spec, const char *uri, sbl_index_t **ixp, sbl_err_t *err)
{
    sbl_index_t *ix = bson_malloc0(sizeof(*ix));
    bson_iter_t it, kit;
    bson_t key, pfe;

    *ixp = NULL;
    atomic_init(&ix->refs, 1);
    ix->spec = bson_copy(spec);
    ix->expire_after = -1;
    ix->tbl = sbl_table_new(uri);
    if (!bson_iter_init_find(&it, spec, "name") || !BSON_ITER_HOLDS_UTF8(&it))
        goto bad;
    ix->name = bson_strdup(bson_iter_utf8(&it, NULL));
    if (!bson_iter_init_find(&it, spec, "key") || !sbl_iter_doc(&it, &key))
        goto bad;
    ix->nfields = bson_count_keys(&key);
    if (ix->nfields == 0)
        goto bad;
    ix->fields = bson_malloc0(ix->nfields * sizeof(char *));
    ix->dirs = bson_malloc0(ix->nfields);
    bson_iter_init(&kit, &key);
    for (size_t i = 0; bson_iter_next(&kit); i++) {
        ix->fields[i] = bson_strdup(bson_iter_key(&kit));
        if (BSON_ITER_HOLDS_UTF8(&kit)) {
            ix->dirs[i] = 0;
            ix->hashed = true;
        } else
            ix->dirs[i] = (int8_t)(bson_iter_as_double(&kit) < 0 ? -1 : 1);
    }
    ix->unique = bson_iter_init_find(&it, spec, "unique") && bson_iter_as_bool(&it);
    ix->sparse = bson_iter_init_find(&it, spec, "sparse") && bson_iter_as_bool(&it);
    ix->prepare_unique = bson_iter_init_find(&it, spec, "prepareUnique") && bson_iter_as_bool(&it);
    if (bson_iter_init_find(&it, spec, "expireAfterSeconds") && BSON_ITER_HOLDS_NUMBER(&it))
        ix->expire_after = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, spec, "collation") &&
        sbl_collation_from_iter(&it, "collation", &ix->coll, err) != 0) {
        index_unref(ix);
        return err->code;
    }
    if (bson_iter_init_find(&it, spec, "partialFilterExpression")) {
        if (!sbl_iter_doc(&it, &pfe))
            goto bad;
        ix->partial_spec = bson_copy(&pfe);
        if ((ix->partial = sbl_matcher_new(&pfe, err)) == NULL) {
            index_unref(ix);
            return err->code ? err->code : SBL_E_BadValue;
        }
        sbl_matcher_set_collation(ix->partial, ix->coll);
    }
    *ixp = ix;
    return 0;
bad:
    index_unref(ix);
    return sbl_err_set(err, SBL_E_CannotCreateIndex, "malformed index specification");
}

void sbl_index_list(sbl_coll_t *c, bool include_building, sbl_index_t ***ixp, size_t *np)
{
    sbl_wt_table_t *t = c->tbl;
    size_t n = 0;

    *ixp = NULL;
    *np = 0;
    if (atomic_load(&t->nidx_quick) == 0)
        return;
    pthread_rwlock_rdlock(&t->idx_lock);
    if (t->nidx > 0) {
        *ixp = bson_malloc(t->nidx * sizeof(sbl_index_t *));
        for (size_t i = 0; i < t->nidx; i++)
            if (include_building || atomic_load(&t->idx[i]->ready)) {
                atomic_fetch_add(&t->idx[i]->refs, 1);
                (*ixp)[n++] = t->idx[i];
            }
    }
    pthread_rwlock_unlock(&t->idx_lock);
    *np = n;
}

void sbl_index_list_free(sbl_index_t **ix, size_t n)
{
    for (size_t i = 0; i < n; i++)
        index_unref(ix[i]);
    bson_free(ix);
}

void sbl_index_release(sbl_index_t *ix)
{
    index_unref(ix);
}

size_t sbl_index_count(const sbl_coll_t *c)
{
    return atomic_load(&c->tbl->nidx_quick);
}

const char *sbl_index_name(const sbl_index_t *ix) { return ix->name; }
const bson_t *sbl_index_spec(const sbl_index_t *ix) { return ix->spec; }
size_t sbl_index_nfields(const sbl_index_t *ix) { return ix->nfields; }
const char *sbl_index_field(const sbl_index_t *ix, size_t i) { return ix->fields[i]; }
int sbl_index_dir(const sbl_index_t *ix, size_t i) { return ix->dirs[i]; }
bool sbl_index_unique(const sbl_index_t *ix) { return ix->unique; }
bool sbl_index_sparse(const sbl_index_t *ix) { return ix->sparse; }
bool sbl_index_multikey(const sbl_index_t *ix) { return atomic_load(&ix->multikey); }
const sbl_collation_t *sbl_index_collation(const sbl_index_t *ix) { return ix->coll; }
const bson_t *sbl_index_partial(const sbl_index_t *ix) { return ix->partial_spec; }

int64_t sbl_index_size(sbl_session_t *s, const sbl_index_t *ix)
{
    WT_CURSOR *cur;
    char uri[300];
    const char *desc, *pvalue;
    int64_t v = 0;

    snprintf(uri, sizeof(uri), "statistics:%s", ix->tbl->uri);
    if (!atomic_load(&ix->tbl->dropped) &&
        s->wt->open_cursor(s->wt, uri, NULL, "statistics=(size)", &cur) == 0) {
        cur->set_key(cur, WT_STAT_DSRC_BLOCK_SIZE);
        if (cur->search(cur) != 0 || cur->get_value(cur, &desc, &pvalue, &v) != 0)
            v = 0;
        cur->close(cur);
    }
    return v;
}

const char *sbl_index_uri(const sbl_index_t *ix)
{
    return ix->tbl->uri;
}

void sbl_index_hash(const bson_value_t *v, bson_value_t *out)
{
    sbl_buf_t b;
    uint64_t h = 14695981039346656037ull; /* FNV-1a over the key encoding, then a mixer */

    sbl_buf_init(&b);
    sbl_key_append(&b, v, false);
    for (size_t i = 0; i < b.len; i++) {
        h ^= b.data[i];
        h *= 1099511628211ull;
    }
    sbl_buf_destroy(&b);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    out->value_type = BSON_TYPE_INT64;
    out->value.v_int64 = (int64_t)h;
}

/* ---- key generation ------------------------------------------------------ */

typedef struct vals {
    bson_value_t *v;
    size_t n, cap;
    bool from_array; /* an array was expanded on the way */
    bool present;    /* the field exists (for sparse) */
} vals_t;

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
static size_t walk(const uint8_t *data, uint32_t len, const char *path, vals_t *vs)
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
            walk(v.value.v_doc.data, v.value.v_doc.data_len, rest, vs);
        } else if (v.value_type == BSON_TYPE_ARRAY) {
            bson_iter_t ai;
            vs->from_array = true;
            if (bson_iter_recurse(&it, &ai))
                while (bson_iter_next(&ai)) {
                    bson_value_t e;
                    sbl_iter_value(&ai, &e);
                    if (e.value_type != BSON_TYPE_DOCUMENT ||
                        walk(e.value.v_doc.data, e.value.v_doc.data_len, rest, vs) == 0)
                        push_null(vs, BSON_TYPE_NULL);
                }
            /* A numeric component may also index the array. */
            if (rest[0] >= '0' && rest[0] <= '9') {
                bson_t arr;
                uint32_t alen;
                const uint8_t *adata;
                bson_iter_array(&it, &alen, &adata);
                if (bson_init_static(&arr, adata, alen))
                    walk(adata, alen, rest, vs);
            }
        }
        break;
    }
    return vs->n - before;
}

/* A sorted set of distinct byte strings. */
typedef struct keyset {
    sbl_buf_t arena;
    size_t *off, *len;
    size_t n, cap;
} keyset_t;

static void ks_init(keyset_t *ks)
{
    memset(ks, 0, sizeof(*ks));
    sbl_buf_init(&ks->arena);
}

static void ks_destroy(keyset_t *ks)
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
static int index_keys(const sbl_index_t *ix, const bson_t *doc, keyset_t *ks, bool *multikeyp,
                      sbl_err_t *err)
{
    vals_t vs[32];
    size_t nf = ix->nfields < 32 ? ix->nfields : 32, i, total = 1, arr_field = SIZE_MAX;
    bool any_present = false;
    int rc = 0;

    *multikeyp = false;
    if (ix->partial != NULL && !sbl_matcher_match(ix->partial, doc, NULL))
        return 0;
    memset(vs, 0, sizeof(vs));
    for (i = 0; i < nf; i++) {
        walk(bson_get_data(doc), doc->len, ix->fields[i], &vs[i]);
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
            bson_append_value(value, ix->fields[i], -1, bson_iter_value(&it));
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

static int entry_insert(sbl_session_t *s, const char *ns, sbl_index_t *ix, const uint8_t *k,
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
    cur->set_value(cur, &val);
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

    ks_init(&o);
    ks_init(&n);
    if (old_doc != NULL) {
        sbl_err_t ignore;
        if (index_keys(ix, old_doc, &o, &mk_old, &ignore) != 0)
            o.n = 0;
    }
    if (new_doc != NULL) {
        SBL_ERR(index_keys(ix, new_doc, &n, &mk, err));
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
            SBL_ERR(entry_insert(s, c->ns, ix, n.arena.data + n.off[j], n.len[j], idk, idlen,
                                 err_info, err));
            j++;
        }
    }
err:
    ks_destroy(&o);
    ks_destroy(&n);
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

/* ---- catalog ----------------------------------------------------------------- */

void sbl_index_catalog_append(sbl_wt_table_t *t, bson_t *entry)
{
    bson_t arr, one;
    char kbuf[16];
    const char *k;

    bson_append_array_begin(entry, "indexes", -1, &arr);
    pthread_rwlock_rdlock(&t->idx_lock);
    for (size_t i = 0; i < t->nidx; i++) {
        sbl_index_t *ix = t->idx[i];
        bson_uint32_to_string((uint32_t)i, &k, kbuf, sizeof(kbuf));
        bson_append_document_begin(&arr, k, -1, &one);
        BSON_APPEND_DOCUMENT(&one, "spec", ix->spec);
        BSON_APPEND_UTF8(&one, "ident", ix->tbl->ident);
        BSON_APPEND_BOOL(&one, "ready", atomic_load(&ix->ready));
        BSON_APPEND_BOOL(&one, "multikey", atomic_load(&ix->multikey));
        bson_append_document_end(&arr, &one);
    }
    pthread_rwlock_unlock(&t->idx_lock);
    bson_append_array_end(entry, &arr);
}

static void list_add(sbl_wt_table_t *t, sbl_index_t *ix)
{
    t->idx = bson_realloc(t->idx, (t->nidx + 1) * sizeof(*t->idx));
    t->idx[t->nidx++] = ix;
    atomic_store(&t->nidx_quick, t->nidx);
}

/* Remove ix from t's list (caller holds idx_lock for writing); true when it was there. */
static bool list_remove(sbl_wt_table_t *t, sbl_index_t *ix)
{
    for (size_t i = 0; i < t->nidx; i++)
        if (t->idx[i] == ix) {
            memmove(&t->idx[i], &t->idx[i + 1], (t->nidx - i - 1) * sizeof(*t->idx));
            t->nidx--;
            atomic_store(&t->nidx_quick, t->nidx);
            return true;
        }
    return false;
}

int sbl_index_catalog_load(sbl_wt_table_t *t, const bson_t *entry, sbl_err_t *err)
{
    bson_iter_t it, arr, one;
    bool changed = false;

    if (!bson_iter_init_find(&it, entry, "indexes") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr))
        return 0;
    while (bson_iter_next(&arr)) {
        bson_t spec;
        const char *ident = NULL;
        bool ready = false, multikey = false;
        bool have_spec = false;
        char uri[256];
        if (!bson_iter_recurse(&arr, &one))
            continue;
        while (bson_iter_next(&one)) {
            const char *k = bson_iter_key(&one);
            if (strcmp(k, "spec") == 0)
                have_spec = sbl_iter_doc(&one, &spec);
            else if (strcmp(k, "ident") == 0 && BSON_ITER_HOLDS_UTF8(&one))
                ident = bson_iter_utf8(&one, NULL);
            else if (strcmp(k, "ready") == 0)
                ready = bson_iter_as_bool(&one);
            else if (strcmp(k, "multikey") == 0)
                multikey = bson_iter_as_bool(&one);
        }
        if (!have_spec || ident == NULL)
            return sbl_err_set(err, SBL_E_InternalError, "corrupt index entry in the catalog");
        snprintf(uri, sizeof(uri), "table:%s", ident);
        uint64_t n = strtoull(ident + strlen("index-"), NULL, 10);
        if (n >= sbl_eng.next_ident)
            sbl_eng.next_ident = n + 1;
        if (!ready) { /* a build the last run never finished: its table is an orphan now */
            changed = true;
            continue;
        }
        sbl_index_t *ix;
        SBL_RET(index_new(&spec, uri, &ix, err));
        atomic_store(&ix->ready, true);
        atomic_store(&ix->multikey, multikey);
        list_add(t, ix);
    }
    (void)changed; /* the row is rewritten at the next catalog change of this collection */
    return 0;
}

void sbl_index_drop_tables(sbl_wt_table_t *t)
{
    pthread_rwlock_wrlock(&t->idx_lock);
    for (size_t i = 0; i < t->nidx; i++) {
        atomic_store(&t->idx[i]->tbl->dropped, true);
        atomic_fetch_add(&sbl_eng.drop_gen, 1);
        sbl_drop_table(sbl_eng.cat_wt, t->idx[i]->tbl->uri);
    }
    pthread_rwlock_unlock(&t->idx_lock);
}

void sbl_index_free_all(sbl_wt_table_t *t)
{
    for (size_t i = 0; i < t->nidx; i++)
        index_unref(t->idx[i]);
    bson_free(t->idx);
    t->idx = NULL;
    t->nidx = 0;
}

bool sbl_index_uri_known(const char *uri)
{
    /* Called under the catalog lock at load. */
    for (size_t i = 0; i < sbl_eng.ncolls; i++) {
        sbl_wt_table_t *t = sbl_eng.colls[i]->tbl;
        for (size_t j = 0; j < t->nidx; j++)
            if (strcmp(t->idx[j]->tbl->uri, uri) == 0)
                return true;
    }
    return false;
}

/* ---- create, build, drop -------------------------------------------------------- */

/* Wait until no transaction that began before now is still open. */
static void wait_old_txns(sbl_session_t *self)
{
    uint64_t gen = atomic_fetch_add(&sbl_eng.txn_gen, 1) + 1;

    for (;;) {
        bool busy = false;
        pthread_mutex_lock(&sbl_eng.sess_lock);
        for (sbl_session_t *s = sbl_eng.sessions; s != NULL && !busy; s = s->next_all) {
            uint64_t g = atomic_load(&s->txn_gen);
            busy = s != self && g != 0 && g < gen;
        }
        pthread_mutex_unlock(&sbl_eng.sess_lock);
        if (!busy)
            return;
        usleep(1000);
    }
}

/* Take ix out of t, drop its table and persist the catalog. */
static void unpublish(sbl_session_t *s, sbl_wt_table_t *t, sbl_index_t *ix)
{
    bool was;
    sbl_err_t e;

    pthread_rwlock_wrlock(&t->idx_lock);
    was = list_remove(t, ix);
    pthread_rwlock_unlock(&t->idx_lock);
    if (!was)
        return;
    atomic_store(&ix->tbl->dropped, true);
    atomic_fetch_add(&sbl_eng.drop_gen, 1);
    sbl_session_reconcile(s);
    sbl_err_clear(&e);
    sbl_catalog_update_table(t, &e);
    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    sbl_drop_table(sbl_eng.cat_wt, ix->tbl->uri);
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    index_unref(ix);
}

/* One chunk of the build: index up to BUILD_CHUNK documents after *resume. */
static int build_chunk(sbl_session_t *s, sbl_coll_t *c, sbl_index_t *ix, sbl_buf_t *resume,
                       bool *resumed, bool *donep, sbl_err_t *err)
{
    WT_CURSOR *cur = NULL;
    WT_ITEM k, v;
    int ret = 0, rc = 0, exact;
    size_t n = 0;

    *donep = false;
    SBL_RET(sbl_txn_begin(s, err));
    if ((ret = s->wt->open_cursor(s->wt, c->tbl->uri, NULL, NULL, &cur)) != 0) {
        rc = sbl_wt_err(err, ret, "index build");
        goto out;
    }
    if (*resumed) {
        k.data = resume->data;
        k.size = resume->len;
        cur->set_key(cur, &k);
        ret = cur->search_near(cur, &exact);
        if (ret == 0 && exact <= 0)
            ret = cur->next(cur);
    } else
        ret = cur->next(cur);
    while (ret == 0 && n < BUILD_CHUNK) {
        bson_t doc;
        keyset_t ks;
        bool mk = false;
        if ((ret = cur->get_key(cur, &k)) != 0 || (ret = cur->get_value(cur, &v)) != 0)
            break;
        sbl_buf_reset(resume);
        sbl_buf_append(resume, k.data, k.size);
        *resumed = true;
        if (!bson_init_static(&doc, v.data, v.size)) {
            rc = sbl_err_set(err, SBL_E_InternalError, "corrupt document in %s", c->ns);
            goto out;
        }
        ks_init(&ks);
        rc = index_keys(ix, &doc, &ks, &mk, err);
        if (rc == 0 && mk)
            atomic_store(&ix->multikey, true);
        for (size_t i = 0; i < ks.n && rc == 0; i++)
            rc = entry_insert(s, c->ns, ix, ks.arena.data + ks.off[i], ks.len[i], resume->data,
                              resume->len, NULL, err);
        ks_destroy(&ks);
        if (rc != 0)
            goto out;
        /* Conflict with any concurrent change of this document. */
        if ((ret = cur->reserve(cur)) != 0)
            break;
        n++;
        ret = cur->next(cur);
    }
    if (ret == WT_NOTFOUND) {
        *donep = true;
        ret = 0;
    }
    if (ret != 0)
        rc = sbl_wt_err(err, ret, "index build");
out:
    if (cur != NULL)
        cur->close(cur);
    if (rc != 0) {
        sbl_txn_abort(s);
        return rc;
    }
    return sbl_txn_commit(s, err);
}

int sbl_index_create(sbl_session_t *s, sbl_coll_t *c, const bson_t *spec, sbl_err_t *err)
{
    sbl_wt_table_t *t = c->tbl;
    sbl_index_t *ix = NULL;
    char uri[128];
    sbl_buf_t resume;
    bool resumed = false, done = false;
    int ret, rc = 0;

    if (s->in_txn)
        return sbl_err_set(err, SBL_E_OperationNotSupportedInTransaction,
                           "Cannot create an index inside a transaction");
    SBL_RET(sbl_storage_space_check(0, err));
    /* The table first (under the catalog lock: it owns the ident counter). */
    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    snprintf(uri, sizeof(uri), "table:index-%" PRIu64 "-%" PRIu64, sbl_eng.next_ident++,
             sbl_eng.ident_rand);
    ret = sbl_eng.cat_wt->create(sbl_eng.cat_wt, uri, sbl_table_config());
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    if (ret != 0)
        return sbl_wt_err(err, ret, "create index table");
    if ((rc = index_new(spec, uri, &ix, err)) != 0)
        goto drop_table;
    pthread_rwlock_wrlock(&t->idx_lock);
    for (size_t i = 0; i < t->nidx; i++)
        if (strcmp(t->idx[i]->name, ix->name) == 0) {
            pthread_rwlock_unlock(&t->idx_lock);
            index_unref(ix);
            rc = sbl_err_set(err, SBL_E_IndexAlreadyExists, "index with name %s already exists",
                             ix->name);
            goto drop_table;
        }
    atomic_fetch_add(&ix->refs, 1); /* the list's */
    list_add(t, ix);
    pthread_rwlock_unlock(&t->idx_lock);
    if ((rc = sbl_catalog_update_table(t, err)) != 0)
        goto fail;

    wait_old_txns(s);
    sbl_buf_init(&resume);
    for (int attempt = 0; !done;) {
        if (atomic_load(&ix->tbl->dropped) || atomic_load(&t->dropped)) {
            rc = sbl_err_set(err, SBL_E_IndexBuildAborted,
                             "Index build aborted: the index or its collection was dropped");
            break;
        }
        rc = build_chunk(s, c, ix, &resume, &resumed, &done, err);
        if (rc == SBL_E_WriteConflict) {
            usleep((useconds_t)(100 * (attempt < 50 ? ++attempt : attempt)));
            sbl_err_clear(err);
            rc = 0;
            continue;
        }
        attempt = 0;
        if (rc != 0)
            break;
    }
    sbl_buf_destroy(&resume);
    if (rc != 0)
        goto fail;
    atomic_store(&ix->ready, true);
    if ((rc = sbl_catalog_update_table(t, err)) != 0)
        goto fail;
    index_unref(ix);
    return 0;

fail:
    unpublish(s, t, ix);
    index_unref(ix);
    return rc;
drop_table:
    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    sbl_drop_table(sbl_eng.cat_wt, uri);
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    return rc;
}

int sbl_index_drop(sbl_session_t *s, sbl_coll_t *c, const char *name, sbl_err_t *err)
{
    sbl_wt_table_t *t = c->tbl;
    sbl_index_t *ix = NULL;

    pthread_rwlock_rdlock(&t->idx_lock);
    for (size_t i = 0; i < t->nidx; i++)
        if (strcmp(t->idx[i]->name, name) == 0) {
            ix = t->idx[i];
            atomic_fetch_add(&ix->refs, 1);
        }
    pthread_rwlock_unlock(&t->idx_lock);
    if (ix == NULL)
        return sbl_err_set(err, SBL_E_IndexNotFound, "index not found with name [%s]", name);
    unpublish(s, t, ix);
    index_unref(ix);
    return 0;
}

int sbl_index_set_spec(sbl_session_t *s, sbl_coll_t *c, const char *name, const bson_t *spec,
                       sbl_err_t *err)
{
    sbl_wt_table_t *t = c->tbl;
    sbl_index_t *old = NULL, *nix = NULL;
    (void)s;
    pthread_rwlock_rdlock(&t->idx_lock);
    for (size_t i = 0; i < t->nidx; i++)
        if (strcmp(t->idx[i]->name, name) == 0)
            old = t->idx[i];
    const char *uri = old != NULL ? old->tbl->uri : NULL;
    int rc = uri != NULL ? index_new(spec, uri, &nix, err) : 0;
    pthread_rwlock_unlock(&t->idx_lock);
    if (old == NULL)
        return sbl_err_set(err, SBL_E_IndexNotFound, "index not found with name [%s]", name);
    if (rc != 0)
        return rc;
    /* The new handle shares the old one's table (same entries, same format). */
    pthread_rwlock_wrlock(&t->idx_lock);
    size_t i;
    for (i = 0; i < t->nidx && t->idx[i] != old; i++)
        ;
    if (i == t->nidx || nix->unique != old->unique) {
        pthread_rwlock_unlock(&t->idx_lock);
        index_unref(nix);
        return sbl_err_set(err, SBL_E_IndexNotFound, "index [%s] changed meanwhile", name);
    }
    sbl_table_unref(nix->tbl);
    sbl_table_ref(old->tbl);
    nix->tbl = old->tbl;
    atomic_store(&nix->ready, atomic_load(&old->ready));
    atomic_store(&nix->multikey, atomic_load(&old->multikey));
    t->idx[i] = nix;
    pthread_rwlock_unlock(&t->idx_lock);
    index_unref(old); /* the list's reference; scans holding one keep it alive */
    return sbl_catalog_update_table(t, err);
}

/* ---- index scans ------------------------------------------------------------- */

struct sbl_iscan {
    uint64_t epoch;
    sbl_wt_table_t *tbl;
    WT_CURSOR *cursor;
    bool backward, started, done;
    sbl_buf_t lo, hi; /* hi.len == 0: unbounded */
};

int sbl_iscan_open(sbl_session_t *s, sbl_index_t *ix, const uint8_t *lo, size_t lo_len,
                   const uint8_t *hi, size_t hi_len, bool backward, sbl_iscan_t **scanp,
                   sbl_err_t *err)
{
    sbl_iscan_t *sc;
    int ret;

    *scanp = NULL;
    sbl_session_reconcile(s);
    if (atomic_load(&ix->tbl->dropped))
        return sbl_err_set(err, SBL_E_QueryPlanKilled, "query plan killed :: caused by :: "
                           "index '%s' dropped", ix->name);
    sc = bson_malloc0(sizeof(*sc));
    sbl_buf_init(&sc->lo);
    sbl_buf_init(&sc->hi);
    if ((ret = s->wt->open_cursor(s->wt, ix->tbl->uri, NULL, NULL, &sc->cursor)) != 0) {
        bson_free(sc);
        return sbl_wt_err(err, ret, "open index scan");
    }
    sc->epoch = s->epoch;
    sc->tbl = ix->tbl;
    sbl_table_ref(ix->tbl);
    sc->backward = backward;
    sbl_buf_append(&sc->lo, lo, lo_len);
    sbl_buf_append(&sc->hi, hi, hi_len);
    *scanp = sc;
    return 0;
}

static int buf_cmp(const WT_ITEM *k, const sbl_buf_t *b)
{
    return ks_cmp_raw(k->data, k->size, b->data, b->len);
}

int sbl_iscan_next(sbl_iscan_t *sc, const uint8_t **key, size_t *klen, const uint8_t **idk,
                   size_t *idlen, bool *donep, sbl_err_t *err)
{
    WT_CURSOR *cur = sc->cursor;
    WT_ITEM k, v;
    int ret, exact;

    *donep = false;
    if (sc->done) {
        *donep = true;
        return 0;
    }
    if (!sc->started) {
        sc->started = true;
        if (!sc->backward) {
            if (sc->lo.len == 0)
                ret = cur->next(cur);
            else {
                k.data = sc->lo.data;
                k.size = sc->lo.len;
                cur->set_key(cur, &k);
                ret = cur->search_near(cur, &exact);
                if (ret == 0 && exact < 0)
                    ret = cur->next(cur);
            }
        } else {
            if (sc->hi.len == 0)
                ret = cur->prev(cur);
            else {
                k.data = sc->hi.data;
                k.size = sc->hi.len;
                cur->set_key(cur, &k);
                ret = cur->search_near(cur, &exact);
                if (ret == 0 && exact >= 0)
                    ret = cur->prev(cur);
            }
        }
    } else
        ret = sc->backward ? cur->prev(cur) : cur->next(cur);
    if (ret == 0 && (ret = cur->get_key(cur, &k)) == 0) {
        if (!sc->backward && sc->hi.len > 0 && buf_cmp(&k, &sc->hi) >= 0)
            ret = WT_NOTFOUND;
        else if (sc->backward && buf_cmp(&k, &sc->lo) < 0)
            ret = WT_NOTFOUND;
    }
    if (ret == 0)
        ret = cur->get_value(cur, &v);
    if (ret == WT_NOTFOUND) {
        sc->done = true;
        *donep = true;
        cur->reset(cur);
        return 0;
    }
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
    if (sbl_eng.open && sc->epoch == sbl_eng.epoch)
        sc->cursor->close(sc->cursor);
    sbl_table_unref(sc->tbl);
    sbl_buf_destroy(&sc->lo);
    sbl_buf_destroy(&sc->hi);
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

/* ---- TTL monitor --------------------------------------------------------------- */

typedef struct ns_list {
    char **ns;
    size_t n, cap;
} ns_list_t;

static bool collect(const char *ns, const bson_t *options, const uint8_t *uuid, void *arg)
{
    ns_list_t *l = arg;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->ns = bson_realloc(l->ns, l->cap * sizeof(char *));
    }
    l->ns[l->n++] = bson_strdup(ns);
    return true;
}

/* Delete the documents of c that ix says expired; returns how many. */
static int64_t ttl_pass_index(sbl_session_t *s, sbl_coll_t *c, sbl_index_t *ix, int64_t now_ms)
{
    int64_t cutoff = now_ms - ix->expire_after * 1000, deleted = 0;
    bson_value_t dmin = {.value_type = BSON_TYPE_DATE_TIME}, dcut = dmin;
    sbl_buf_t lo, hi, ids;
    size_t *offs = NULL, nids = 0;
    sbl_iscan_t *sc = NULL;
    sbl_err_t e;
    bool desc = ix->dirs[0] < 0;

    dmin.value.v_datetime = INT64_MIN;
    dcut.value.v_datetime = cutoff;
    sbl_buf_init(&lo);
    sbl_buf_init(&hi);
    sbl_buf_init(&ids);
    /* Dates below cutoff: [enc(min), enc(cutoff)) ascending; mirrored descending. */
    sbl_key_append(&lo, desc ? &dcut : &dmin, desc);
    sbl_key_append(&hi, desc ? &dmin : &dcut, desc);
    if (desc) {
        /* lo = complemented cutoff excluded: step past its entries; hi covers min's. */
        sbl_buf_append_byte(&lo, 0xff);
        sbl_buf_append_byte(&hi, 0xff);
    }
    sbl_err_clear(&e);
    if (sbl_iscan_open(s, ix, lo.data, lo.len, hi.data, hi.len, false, &sc, &e) == 0) {
        const uint8_t *k, *idk;
        size_t klen, idlen;
        bool done = false;
        while (nids < TTL_BATCH && sbl_iscan_next(sc, &k, &klen, &idk, &idlen, &done, &e) == 0 &&
               !done) {
            offs = bson_realloc(offs, (nids + 2) * sizeof(size_t));
            offs[nids++] = ids.len;
            sbl_buf_append(&ids, idk, idlen);
        }
        sbl_iscan_close(sc);
    }
    for (size_t i = 0; i < nids; i++) {
        size_t end = i + 1 < nids ? offs[i + 1] : ids.len;
        bson_t doc;
        bool found = false;
        if (sbl_txn_begin(s, &e) != 0)
            break;
        if (sbl_coll_get_by_key(s, c, ids.data + offs[i], end - offs[i], &doc, &found, &e) ==
                0 &&
            found) {
            /* Re-check: some date at the path is below the cutoff. */
            vals_t vs;
            bool expired = false;
            memset(&vs, 0, sizeof(vs));
            walk(bson_get_data(&doc), doc.len, ix->fields[0], &vs);
            for (size_t j = 0; j < vs.n; j++)
                if (vs.v[j].value_type == BSON_TYPE_DATE_TIME &&
                    vs.v[j].value.v_datetime < cutoff)
                    expired = true;
            bson_free(vs.v);
            if (expired && sbl_write(s, c, SBL_WRITE_DELETE, &doc, NULL, NULL, &e) == 0 &&
                sbl_txn_commit(s, &e) == 0)
                deleted++;
            bson_destroy(&doc);
        }
        sbl_txn_abort(s); /* no-op after a commit */
    }
    bson_free(offs);
    sbl_buf_destroy(&lo);
    sbl_buf_destroy(&hi);
    sbl_buf_destroy(&ids);
    return deleted;
}

/* True when doc's top-level field holds a date below cutoff. */
static bool date_before(const bson_t *doc, const char *field, int64_t cutoff)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, doc, field) && BSON_ITER_HOLDS_DATE_TIME(&it) &&
           bson_iter_date_time(&it) < cutoff;
}

/* A time-series collection's expireAfterSeconds (stored options {timeseries:
 * {timeField}, expireAfterSeconds}): delete the measurements whose timeField is
 * older than now - expireAfterSeconds; for a clustered collection ({clusteredIndex,
 * expireAfterSeconds}) the documents whose _id is such a date.  The collection is
 * scanned in _id order, TTL_BATCH expired documents at a time, each deleted (after
 * a re-check) in its own transaction.  Returns how many went. */
static int64_t ttl_pass_timeseries(sbl_session_t *s, sbl_coll_t *c, int64_t now_ms)
{
    const bson_t *o = sbl_coll_options(c);
    bson_iter_t it, f;
    if (o == NULL || !bson_iter_init_find(&it, o, "expireAfterSeconds") ||
        !BSON_ITER_HOLDS_NUMBER(&it))
        return 0;
    int64_t cutoff = now_ms - bson_iter_as_int64(&it) * 1000, deleted = 0;
    const char *tf = "_id"; /* a clustered collection's TTL reads its cluster key */
    if (bson_iter_init_find(&it, o, "timeseries") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &f) && bson_iter_find(&f, "timeField") &&
        BSON_ITER_HOLDS_UTF8(&f))
        tf = bson_iter_utf8(&f, NULL);
    else if (!bson_iter_init_find(&it, o, "clusteredIndex"))
        return 0;
    /* The expired documents themselves: a time-series collection may hold
     * several under one _id, and the batch ends only past the last of them
     * (the next scan resumes after that _id). */
    size_t cap = TTL_BATCH;
    bson_t **expired = bson_malloc(cap * sizeof(bson_t *));
    bson_value_t last;
    bool have_last = false, done = false;
    sbl_err_t e;
    while (!done) {
        sbl_scan_bounds_t b = {.lo = have_last ? &last : NULL, .lo_inclusive = false};
        sbl_scan_t *sc = NULL;
        size_t n = 0;
        sbl_err_clear(&e);
        if (sbl_scan_open(s, c, &b, false, &sc, &e) != 0)
            break;
        bson_t doc;
        while (n < TTL_BATCH || c->dup_ids) {
            if (sbl_scan_next(sc, &doc, &done, &e) != 0)
                done = true;
            if (done)
                break;
            if (!bson_iter_init_find(&it, &doc, "_id"))
                continue;
            if (n >= TTL_BATCH && !sbl_value_equal(bson_iter_value(&it), &last))
                break;
            if (have_last)
                bson_value_destroy(&last);
            bson_value_copy(bson_iter_value(&it), &last);
            have_last = true;
            if (!date_before(&doc, tf, cutoff))
                continue;
            if (n == cap) {
                cap *= 2;
                expired = bson_realloc(expired, cap * sizeof(bson_t *));
            }
            expired[n++] = bson_copy(&doc);
        }
        sbl_scan_close(sc);
        for (size_t i = 0; i < n; i++) {
            bool found = false;
            if (sbl_txn_begin(s, &e) == 0) {
                if (sbl_coll_get_same(s, c, expired[i], &doc, &found, &e) == 0 && found) {
                    if (date_before(&doc, tf, cutoff) &&
                        sbl_write(s, c, SBL_WRITE_DELETE, &doc, NULL, NULL, &e) == 0 &&
                        sbl_txn_commit(s, &e) == 0)
                        deleted++;
                    bson_destroy(&doc);
                }
                sbl_txn_abort(s); /* no-op after a commit */
            }
            bson_destroy(expired[i]);
        }
    }
    if (have_last)
        bson_value_destroy(&last);
    bson_free(expired);
    return deleted;
}

static void ttl_pass(sbl_session_t *s)
{
    ns_list_t l = {0};
    struct timespec ts;
    int64_t now_ms, deleted = 0;

    clock_gettime(CLOCK_REALTIME, &ts);
    now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    sbl_catalog_list(NULL, collect, &l);
    for (size_t i = 0; i < l.n; i++) {
        sbl_coll_t *c = NULL;
        sbl_index_t **ixs;
        size_t n;
        if (sbl_coll_open(s, l.ns[i], false, &c, NULL, NULL) != 0)
            continue;
        sbl_index_list(c, false, &ixs, &n);
        for (size_t j = 0; j < n; j++)
            if (ixs[j]->expire_after >= 0 && ixs[j]->nfields == 1 && ixs[j]->dirs[0] != 0)
                deleted += ttl_pass_index(s, c, ixs[j], now_ms);
        deleted += ttl_pass_timeseries(s, c, now_ms);
        sbl_index_list_free(ixs, n);
        sbl_coll_release(c);
        bson_free(l.ns[i]);
    }
    bson_free(l.ns);
    if (deleted > 0) {
        bson_t attr = BSON_INITIALIZER;
        BSON_APPEND_INT64(&attr, "numDeleted", deleted);
        sbl_log(SBL_LOG_INFO, "INDEX", 5479200, "Deleted expired documents using index", &attr);
        bson_destroy(&attr);
    }
}

static void *ttl_main(void *arg)
{
    sbl_thread_name("TTLMonitor");
    sbl_session_t *s = sbl_session_get();

    pthread_mutex_lock(&sbl_eng.ttl_lock);
    while (!sbl_eng.ttl_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += sbl_eng.ttl_sleep_s;
        pthread_cond_timedwait(&sbl_eng.ttl_cond, &sbl_eng.ttl_lock, &ts);
        if (sbl_eng.ttl_stop || s == NULL)
            break;
        pthread_mutex_unlock(&sbl_eng.ttl_lock);
        ttl_pass(s);
        pthread_mutex_lock(&sbl_eng.ttl_lock);
    }
    pthread_mutex_unlock(&sbl_eng.ttl_lock);
    sbl_session_release_thread();
    return arg;
}

int sbl_ttl_start(sbl_err_t *err)
{
    pthread_mutex_init(&sbl_eng.ttl_lock, NULL);
    pthread_cond_init(&sbl_eng.ttl_cond, NULL);
    sbl_eng.ttl_stop = false;
    if (pthread_create(&sbl_eng.ttl_thread, NULL, ttl_main, NULL) != 0)
        return sbl_err_set(err, SBL_E_InternalError, "cannot start the TTL monitor");
    sbl_eng.ttl_started = true;
    return 0;
}

void sbl_ttl_stop(void)
{
    if (!sbl_eng.ttl_started)
        return;
    pthread_mutex_lock(&sbl_eng.ttl_lock);
    sbl_eng.ttl_stop = true;
    pthread_cond_signal(&sbl_eng.ttl_cond);
    pthread_mutex_unlock(&sbl_eng.ttl_lock);
    pthread_join(sbl_eng.ttl_thread, NULL);
    sbl_eng.ttl_started = false;
    pthread_mutex_destroy(&sbl_eng.ttl_lock);
    pthread_cond_destroy(&sbl_eng.ttl_cond);
}
