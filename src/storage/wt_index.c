/*
 * wt_index.c: secondary indexes: their handles, their rows in the catalog,
 * creating one and building it on a populated collection, dropping, and
 * changing a spec (collMod).  Their keys, entries and scans are in
 * wt_index_entries.c, the TTL monitor in wt_ttl.c.
 *
 * What must stay true:
 *  - A build publishes the index first (writes maintain it from then on),
 *    waits until every transaction that began before it finished, then adds
 *    the existing documents in short transactions that reserve each document
 *    they index, so a concurrent change of that document conflicts (one side
 *    retries) instead of leaving a stale entry.  Only then is it ready for
 *    queries.  A crash mid-build leaves a not-ready index that load drops.
 *  - Lock order: catalog lock, then a table's idx_lock.
 */
#include "storage/wt_int.h"
#include "common/clock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "doc/doc.h"
#include "query/query.h"

#define BUILD_CHUNK 256

/* ---- handles --------------------------------------------------------------- */

static void index_unref(sbl_index_t *ix)
{
    if (ix == NULL || atomic_fetch_sub(&ix->refs, 1) != 1)
        return;
    for (size_t i = 0; i < ix->nfields; i++)
        bson_free(ix->fields[i]);
    bson_free(ix->fields);
    bson_free(ix->dirs);
    sbl_fts_spec_free(ix->text);
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
    ix->since_ms = sbl_now_ms();
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
    if (bson_iter_init_find(&kit, &key, "_fts")) {
        /* a text index: the keys before _fts are its equality prefix */
        ix->text = sbl_fts_spec_new(spec);
        ix->nfields = 0;
        bson_iter_init(&kit, &key);
        while (bson_iter_next(&kit) && strcmp(bson_iter_key(&kit), "_fts") != 0)
            ix->nfields++;
    }
    ix->fields = bson_malloc0(ix->nfields * sizeof(char *));
    ix->dirs = bson_malloc0(ix->nfields);
    bson_iter_init(&kit, &key);
    for (size_t i = 0; i < ix->nfields && bson_iter_next(&kit); i++) {
        ix->fields[i] = bson_strdup(bson_iter_key(&kit));
        const char *t = BSON_ITER_HOLDS_UTF8(&kit) ? bson_iter_utf8(&kit, NULL) : NULL;
        if (t != NULL && (strcmp(t, "2dsphere") == 0 || strcmp(t, "2d") == 0)) {
            ix->dirs[i] = 1;
            ix->geo = t[2] == 's' ? SBL_INDEX_2DSPHERE : SBL_INDEX_2D;
            ix->geo_field = i;
        } else if (t != NULL) {
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
bool sbl_index_is_ready(const sbl_index_t *ix) { return atomic_load(&ix->ready); }
const bson_t *sbl_index_spec(const sbl_index_t *ix) { return ix->spec; }
size_t sbl_index_nfields(const sbl_index_t *ix) { return ix->nfields; }
const char *sbl_index_field(const sbl_index_t *ix, size_t i) { return ix->fields[i]; }
int sbl_index_dir(const sbl_index_t *ix, size_t i) { return ix->dirs[i]; }
const struct sbl_fts_spec *sbl_index_text(const sbl_index_t *ix) { return ix->text; }

void sbl_index_text_score_put(double score, uint8_t out[8])
{
    uint64_t bits;
    memcpy(&bits, &score, 8);
    for (int i = 7; i >= 0; i--, bits >>= 8)
        out[i] = (uint8_t)bits;
}

double sbl_index_text_score_get(const uint8_t in[8])
{
    uint64_t bits = 0;
    double score;
    for (int i = 0; i < 8; i++)
        bits = bits << 8 | in[i];
    memcpy(&score, &bits, 8);
    return score;
}
int sbl_index_geo(const sbl_index_t *ix, size_t *fieldp)
{
    if (fieldp != NULL)
        *fieldp = ix->geo_field;
    return ix->geo;
}

void sbl_index_geo_cell_append(sbl_buf_t *out, uint64_t cell)
{
    bson_value_t v;
    /* a date's key is its int64 with the sign bit flipped, big-endian: the id's own bytes */
    v.value_type = BSON_TYPE_DATE_TIME;
    v.value.v_datetime = (int64_t)(cell ^ 0x8000000000000000ULL);
    sbl_key_append(out, &v, false);
}
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

/* Wait until no transaction that began before now is still open; at
 * shutdown InterruptedAtShutdown instead (a prepared one may never end). */
static int wait_old_txns(sbl_session_t *self, sbl_err_t *err)
{
    uint64_t gen = atomic_fetch_add(&sbl_eng.txn_gen, 1) + 1;

    for (;;) {
        bool busy = false;
        if (sbl_prepare_stopping())
            return sbl_err_set(err, SBL_E_InterruptedAtShutdown,
                               "index build interrupted at shutdown");
        pthread_mutex_lock(&sbl_eng.sess_lock);
        for (sbl_session_t *s = sbl_eng.sessions; s != NULL && !busy; s = s->next_all) {
            uint64_t g = atomic_load(&s->txn_gen);
            busy = s != self && g != 0 && g < gen;
        }
        pthread_mutex_unlock(&sbl_eng.sess_lock);
        if (!busy)
            return 0;
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
        sbl_keyset_init(&ks);
        rc = sbl_index_keys(ix, &doc, &ks, &mk, err);
        if (rc == 0 && mk)
            atomic_store(&ix->multikey, true);
        for (size_t i = 0; i < ks.n && rc == 0; i++)
            rc = sbl_index_entry_insert(s, c->ns, ix, ks.arena.data + ks.off[i], ks.len[i],
                                        resume->data, resume->len, NULL, err);
        sbl_keyset_destroy(&ks);
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

    /* In a multi-document transaction: only on a collection it created
     * (nobody else writes there) while still empty, so there is nothing to
     * build and no older transaction to wait for. */
    bool fresh = s->outer && c->owner == s;
    if (s->in_txn && !fresh)
        return sbl_err_set(err, SBL_E_OperationNotSupportedInTransaction,
                           "Cannot create an index inside a transaction");
    if (fresh)
        for (size_t i = 0; i < s->ndeltas; i++)
            if (s->deltas[i].tbl == t && s->deltas[i].count != 0)
                return sbl_err_set(err, SBL_E_OperationNotSupportedInTransaction,
                                   "Cannot create new indexes on non-empty collection %s in a "
                                   "multi-document transaction.", c->ns);
    SBL_RET(sbl_storage_space_check(0, err));
    /* The table first (under the catalog lock: it owns the ident counter). */
    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    snprintf(uri, sizeof(uri), "table:index-%" PRIu64 "-%" PRIu64, sbl_eng.next_ident++,
             sbl_eng.ident_rand);
    ret = sbl_eng.cat_wt->create(sbl_eng.cat_wt, uri,
                                 sbl_table_config_for(sbl_storage_ns_unlogged(c->ns), true));
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    if (ret != 0)
        return sbl_wt_err(err, ret, "create index table");
    if ((rc = index_new(spec, uri, &ix, err)) != 0)
        goto drop_table;
    pthread_rwlock_wrlock(&t->idx_lock);
    for (size_t i = 0; i < t->nidx; i++)
        if (strcmp(t->idx[i]->name, ix->name) == 0) {
            pthread_rwlock_unlock(&t->idx_lock);
            rc = sbl_err_set(err, SBL_E_IndexAlreadyExists, "index with name %s already exists",
                             ix->name);
            index_unref(ix);
            goto drop_table;
        }
    atomic_fetch_add(&ix->refs, 1); /* the list's */
    list_add(t, ix);
    pthread_rwlock_unlock(&t->idx_lock);
    if ((rc = sbl_catalog_update_table(t, err)) != 0)
        goto fail;

    if (!fresh && (rc = wait_old_txns(s, err)) != 0)
        goto fail;
    done = fresh;
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
    /* An unlogged index (a replica set member's) built without timestamps
     * is durable only from the next checkpoint: take it before the catalog
     * calls the index ready, so a crash cannot leave a ready index with
     * entries missing. */
    if (!fresh && sbl_storage_ns_unlogged(c->ns) && (rc = sbl_storage_checkpoint(err)) != 0)
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

/* ---- access counters ($indexStats) ------------------------------------------------------ */

void sbl_index_note_access(sbl_index_t *ix)
{
    atomic_fetch_add_explicit(&ix->accesses, 1, memory_order_relaxed);
}

int64_t sbl_index_accesses(const sbl_index_t *ix, int64_t *sincep)
{
    *sincep = ix->since_ms;
    return atomic_load_explicit(&((sbl_index_t *)ix)->accesses, memory_order_relaxed);
}

void sbl_coll_note_id_access(sbl_coll_t *c)
{
    atomic_fetch_add_explicit(&c->id_accesses, 1, memory_order_relaxed);
}

int64_t sbl_coll_id_accesses(const sbl_coll_t *c, int64_t *sincep)
{
    *sincep = c->id_since_ms;
    return atomic_load_explicit(&((sbl_coll_t *)c)->id_accesses, memory_order_relaxed);
}
