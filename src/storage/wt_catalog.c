/*
 * wt_catalog.c: the collection catalog: table:_sbl_catalog (ns -> BSON
 * {ns, uuid, ident, options, indexes}) mirrored in a sorted in-memory array, plus the
 * per-table counts kept in table:_sbl_sizes.
 *
 * What must stay true:
 *  - Every catalog change runs under the write lock and in one WiredTiger
 *    transaction on cat_wt; the in-memory array changes only after commit.
 *  - Tables are created before their catalog row and dropped after it is
 *    gone, so a crash leaves at worst an orphan table, dropped at next open.
 *  - Sizes in _sbl_sizes are trusted only when the clean-shutdown marker is
 *    set; it is cleared (durably) at open, so after a crash we recount.
 */
#include "storage/wt_int.h"
#include "common/clock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/log.h"

/* Binary search; returns true when found. *idxp is the match or insertion point. */
static bool find_locked(const char *ns, size_t *idxp)
{
    size_t lo = 0, hi = sbl_eng.ncolls;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(sbl_eng.colls[mid]->ns, ns);
        if (c == 0) {
            *idxp = mid;
            return true;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *idxp = lo;
    return false;
}

static void insert_locked(size_t idx, sbl_coll_t *c)
{
    if (sbl_eng.ncolls == sbl_eng.colls_cap) {
        sbl_eng.colls_cap = sbl_eng.colls_cap ? sbl_eng.colls_cap * 2 : 16;
        sbl_eng.colls = bson_realloc(sbl_eng.colls, sbl_eng.colls_cap * sizeof(*sbl_eng.colls));
    }
    memmove(&sbl_eng.colls[idx + 1], &sbl_eng.colls[idx],
            (sbl_eng.ncolls - idx) * sizeof(*sbl_eng.colls));
    sbl_eng.colls[idx] = c;
    sbl_eng.ncolls++;
}

static void remove_locked(size_t idx)
{
    memmove(&sbl_eng.colls[idx], &sbl_eng.colls[idx + 1],
            (sbl_eng.ncolls - idx - 1) * sizeof(*sbl_eng.colls));
    sbl_eng.ncolls--;
}

/* A handle with one reference (the caller's); takes a reference on tbl. */
static sbl_coll_t *coll_new(const char *ns, const uint8_t *uuid, const bson_t *options,
                            sbl_wt_table_t *tbl)
{
    sbl_coll_t *c = bson_malloc0(sizeof(*c));
    c->ns = bson_strdup(ns);
    memcpy(c->uuid, uuid, 16);
    c->options = options != NULL ? bson_copy(options) : bson_new();
    sbl_table_ref(tbl);
    c->tbl = tbl;
    atomic_init(&c->refs, 1);
    c->id_since_ms = sbl_now_ms();
    bson_iter_t it;
    c->versioned = strcmp(ns, SBL_VERSIONED_NS) == 0;
    c->dup_ids = c->versioned || (bson_iter_init_find(&it, c->options, "timeseries") &&
                                  BSON_ITER_HOLDS_DOCUMENT(&it));
    return c;
}

void sbl_coll_release(sbl_coll_t *c)
{
    if (c != NULL && atomic_fetch_sub(&c->refs, 1) == 1) {
        sbl_table_unref(c->tbl);
        bson_destroy(c->options);
        bson_free(c->ns);
        bson_free(c);
    }
}

const char *sbl_coll_ns(const sbl_coll_t *c)
{
    return c->ns;
}

const bson_t *sbl_coll_options(const sbl_coll_t *c)
{
    return c->options;
}

const uint8_t *sbl_coll_uuid(const sbl_coll_t *c)
{
    return c->uuid;
}

static int check_ns(const char *ns, sbl_err_t *err)
{
    const char *dot = strchr(ns, '.');

    if (dot == NULL || dot == ns || dot[1] == '\0')
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid namespace specified '%s'", ns);
    return 0;
}

/* Write c's catalog row on cat_wt (inside the caller's transaction). */
static int catalog_put(const sbl_coll_t *c, sbl_err_t *err)
{
    WT_SESSION *wt = sbl_eng.cat_wt;
    WT_CURSOR *cur = NULL;
    bson_t entry = BSON_INITIALIZER;
    WT_ITEM v;
    int ret;

    BSON_APPEND_UTF8(&entry, "ns", c->ns);
    bson_append_binary(&entry, "uuid", -1, BSON_SUBTYPE_UUID, c->uuid, 16);
    BSON_APPEND_UTF8(&entry, "ident", c->tbl->ident);
    BSON_APPEND_DOCUMENT(&entry, "options", c->options);
    if (c->tbl->key_field != NULL)
        BSON_APPEND_UTF8(&entry, "keyField", c->tbl->key_field);
    sbl_index_catalog_append(c->tbl, &entry);
    if ((ret = wt->open_cursor(wt, SBL_CATALOG_URI, NULL, NULL, &cur)) == 0) {
        v.data = bson_get_data(&entry);
        v.size = entry.len;
        cur->set_key(cur, c->ns);
        cur->set_value(cur, &v);
        ret = cur->insert(cur);
        cur->close(cur);
    }
    bson_destroy(&entry);
    return ret == 0 ? 0 : sbl_wt_err(err, ret, "catalog write");
}

/* Remove ns's catalog row and its sizes row (inside the caller's transaction). */
static int catalog_remove(const sbl_coll_t *c, sbl_err_t *err)
{
    WT_SESSION *wt = sbl_eng.cat_wt;
    WT_CURSOR *cur = NULL;
    int ret;

    if ((ret = wt->open_cursor(wt, SBL_CATALOG_URI, NULL, NULL, &cur)) == 0) {
        cur->set_key(cur, c->ns);
        ret = cur->remove(cur);
        cur->close(cur);
    }
    if (ret == 0 && (ret = wt->open_cursor(wt, SBL_SIZES_URI, NULL, NULL, &cur)) == 0) {
        cur->set_key(cur, c->tbl->ident);
        ret = cur->remove(cur);
        cur->close(cur);
        if (ret == WT_NOTFOUND)
            ret = 0;
    }
    return ret == 0 ? 0 : sbl_wt_err(err, ret, "catalog remove");
}

static void new_uuid(uint8_t *uuid)
{
    if (getrandom(uuid, 16, 0) != 16)
        for (int i = 0; i < 16; i++)
            uuid[i] = (uint8_t)rand();
    uuid[6] = (uint8_t)((uuid[6] & 0x0f) | 0x40); /* version 4 */
    uuid[8] = (uint8_t)((uuid[8] & 0x3f) | 0x80); /* RFC 4122 variant */
}

/* sbl_coll_adopt_uuid's namespace (empty: none) and UUID. */
static _Thread_local struct {
    char ns[512];
    uint8_t uuid[16];
} adopt;

void sbl_coll_adopt_uuid(const char *ns, const uint8_t *uuid)
{
    adopt.ns[0] = '\0';
    if (ns != NULL && uuid != NULL && strlen(ns) < sizeof(adopt.ns)) {
        memcpy(adopt.uuid, uuid, 16);
        strcpy(adopt.ns, ns);
    }
}

/* Create ns under the write lock, with uuid (16 bytes), else the adopted one when ns is
   sbl_coll_adopt_uuid's, else a new one; *collp gets a reference for the caller (hidden
   from other sessions when s hides its creates). */
static int create_locked(sbl_session_t *s, const char *ns, const bson_t *options,
                         const char *key_field, const uint8_t *given_uuid, sbl_coll_t **collp,
                         sbl_err_t *err)
{
    WT_SESSION *wt = sbl_eng.cat_wt;
    char uri[128];
    uint8_t uuid[16];
    sbl_wt_table_t *tbl;
    sbl_coll_t *c;
    size_t idx;
    int ret, rc;

    *collp = NULL;
    if (find_locked(ns, &idx))
        return sbl_err_set(err, SBL_E_NamespaceExists, "Collection %s already exists.", ns);
    if (given_uuid == NULL && adopt.ns[0] != '\0' && strcmp(adopt.ns, ns) == 0)
        given_uuid = adopt.uuid;
    for (size_t i = 0; given_uuid != NULL && i < sbl_eng.ncolls; i++)
        if (memcmp(sbl_eng.colls[i]->uuid, given_uuid, 16) == 0)
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "Cannot create collection %s with UUID of %s: the UUID is taken",
                               ns, sbl_eng.colls[i]->ns);
    snprintf(uri, sizeof(uri), "table:collection-%" PRIu64 "-%" PRIu64, sbl_eng.next_ident++,
             sbl_eng.ident_rand);
    bool unlogged = sbl_storage_ns_unlogged(ns);
    if ((ret = wt->create(wt, uri, sbl_table_config_for(unlogged, false))) != 0)
        return sbl_wt_err(err, ret, "create collection table");
    if (given_uuid != NULL)
        memcpy(uuid, given_uuid, 16);
    else
        new_uuid(uuid);
    tbl = sbl_table_new(uri);
    tbl->unlogged = unlogged;
    if (key_field != NULL && strcmp(key_field, "_id") != 0)
        tbl->key_field = bson_strdup(key_field);
    c = coll_new(ns, uuid, options, tbl);
    sbl_table_unref(tbl);
    if ((rc = sbl_capped_attach(wt, tbl, options, true, err)) != 0)
        goto err;
    if ((ret = wt->begin_transaction(wt, NULL)) != 0) {
        rc = sbl_wt_err(err, ret, "begin catalog transaction");
        goto err;
    }
    if ((rc = catalog_put(c, err)) != 0) {
        wt->rollback_transaction(wt, NULL);
        goto err;
    }
    if ((ret = wt->commit_transaction(wt, NULL)) != 0) {
        rc = sbl_wt_err(err, ret, "commit catalog transaction");
        goto err;
    }
    atomic_fetch_add(&sbl_eng.commits, 1);
    if (s != NULL && s->hide_creates)
        c->owner = s;
    insert_locked(idx, c);
    atomic_fetch_add(&c->refs, 1);
    *collp = c;
    return 0;

err:
    if (sbl_capped_uri(tbl) != NULL)
        wt->drop(wt, sbl_capped_uri(tbl), "force=true");
    sbl_coll_release(c);
    wt->drop(wt, uri, "force=true");
    return rc;
}

/* A collection another session's open transaction created is not there yet. */
static bool visible(const sbl_coll_t *c, const sbl_session_t *s)
{
    return c->owner == NULL || c->owner == s;
}

static int hidden_conflict(const char *ns, sbl_err_t *err)
{
    return sbl_err_set(err, SBL_E_WriteConflict, "Collection %s is being created by a "
                       "transaction that has not committed yet: please retry", ns);
}

bool sbl_coll_created_by(const sbl_coll_t *c, const sbl_session_t *s)
{
    return c->owner != NULL && c->owner == s;
}

void sbl_session_hide_creates(sbl_session_t *s, bool on)
{
    s->hide_creates = on;
}

void sbl_coll_publish_created(const sbl_session_t *s)
{
    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    for (size_t i = 0; i < sbl_eng.ncolls; i++)
        if (sbl_eng.colls[i]->owner == s)
            sbl_eng.colls[i]->owner = NULL;
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
}

int sbl_coll_open(sbl_session_t *s, const char *ns, bool create, sbl_coll_t **collp,
                  bool *createdp, sbl_err_t *err)
{
    size_t idx;
    int rc;

    *collp = NULL;
    if (createdp != NULL)
        *createdp = false;
    bool hidden = false;
    pthread_rwlock_rdlock(&sbl_eng.cat_lock);
    if (find_locked(ns, &idx)) {
        if (!(hidden = !visible(sbl_eng.colls[idx], s))) {
            *collp = sbl_eng.colls[idx];
            atomic_fetch_add(&(*collp)->refs, 1);
        }
    }
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    if (*collp != NULL)
        return 0;
    if (!create)
        return sbl_err_set(err, SBL_E_NamespaceNotFound, "ns not found: %s", ns);
    if (hidden)
        return hidden_conflict(ns, err);
    SBL_RET(check_ns(ns, err));

    /* Two threads may race here: the second finds the first's collection. */
    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    if (find_locked(ns, &idx)) {
        if (!visible(sbl_eng.colls[idx], s)) {
            rc = hidden_conflict(ns, err);
        } else {
            *collp = sbl_eng.colls[idx];
            atomic_fetch_add(&(*collp)->refs, 1);
            rc = 0;
        }
    } else if ((rc = create_locked(s, ns, NULL, NULL, NULL, collp, err)) == 0 &&
               createdp != NULL)
        *createdp = true;
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    return rc;
}

int sbl_coll_create_keyed(sbl_session_t *s, const char *ns, const bson_t *options,
                          const char *key_field, sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    size_t idx;
    int rc;

    SBL_RET(check_ns(ns, err));
    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    if (find_locked(ns, &idx) && !visible(sbl_eng.colls[idx], s))
        rc = hidden_conflict(ns, err);
    else
        rc = create_locked(s, ns, options, key_field, NULL, &c, err);
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    sbl_coll_release(c);
    return rc;
}

int sbl_coll_create_uuid(sbl_session_t *s, const char *ns, const bson_t *options,
                         const uint8_t *uuid, sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    size_t idx;
    int rc;

    SBL_RET(check_ns(ns, err));
    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    if (find_locked(ns, &idx) && !visible(sbl_eng.colls[idx], s))
        rc = hidden_conflict(ns, err);
    else
        rc = create_locked(s, ns, options, NULL, uuid, &c, err);
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    sbl_coll_release(c);
    return rc;
}

int sbl_coll_create(sbl_session_t *s, const char *ns, const bson_t *options, sbl_err_t *err)
{
    return sbl_coll_create_keyed(s, ns, options, NULL, err);
}

const char *sbl_coll_key_field(const sbl_coll_t *c)
{
    return sbl_table_key_field(c->tbl);
}

/* After the catalog commit: forget colls[idx], mark its table dropped, and drop it. */
static void forget_dropped_locked(sbl_session_t *s, size_t idx)
{
    sbl_coll_t *c = sbl_eng.colls[idx];

    remove_locked(idx);
    atomic_store(&c->tbl->dropped, true);
    sbl_index_drop_tables(c->tbl);
    sbl_capped_drop_table(c->tbl);
    atomic_fetch_add(&sbl_eng.drop_gen, 1);
    if (s != NULL)
        sbl_session_reconcile(s); /* our own cached cursor must not block the drop */
    sbl_drop_table(sbl_eng.cat_wt, c->tbl->uri);
    sbl_coll_release(c);
}

/* Drop every ns for which match(ns, arg) is true, in one catalog transaction. */
static int drop_matching(sbl_session_t *s, bool (*match)(const char *ns, const void *arg),
                         const void *arg, size_t *ndroppedp, sbl_err_t *err)
{
    WT_SESSION *wt = sbl_eng.cat_wt;
    size_t i, n = 0;
    int ret, rc = 0;

    *ndroppedp = 0;
    if (s != NULL && s->in_txn)
        return sbl_err_set(err, SBL_E_OperationFailed,
                           "Cannot drop a collection inside a transaction");
    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    if ((ret = wt->begin_transaction(wt, NULL)) != 0) {
        rc = sbl_wt_err(err, ret, "begin catalog transaction");
        goto done;
    }
    for (i = 0; i < sbl_eng.ncolls; i++)
        if (match(sbl_eng.colls[i]->ns, arg)) {
            if ((rc = catalog_remove(sbl_eng.colls[i], err)) != 0) {
                wt->rollback_transaction(wt, NULL);
                goto done;
            }
            n++;
        }
    if ((ret = wt->commit_transaction(wt, NULL)) != 0) {
        rc = sbl_wt_err(err, ret, "commit catalog transaction");
        goto done;
    }
    atomic_fetch_add(&sbl_eng.commits, 1);
    for (i = sbl_eng.ncolls; i-- > 0;)
        if (match(sbl_eng.colls[i]->ns, arg))
            forget_dropped_locked(s, i);
    *ndroppedp = n;
done:
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    return rc;
}

static bool match_ns(const char *ns, const void *arg)
{
    return strcmp(ns, (const char *)arg) == 0;
}

static bool match_db(const char *ns, const void *arg)
{
    size_t n = strlen((const char *)arg);
    return strncmp(ns, (const char *)arg, n) == 0 && ns[n] == '.';
}

int sbl_coll_drop(sbl_session_t *s, const char *ns, sbl_err_t *err)
{
    size_t n;

    sbl_versioned_invalidate(); /* config.transactions among them, perhaps (rare) */
    SBL_RET(drop_matching(s, match_ns, ns, &n, err));
    return n == 0 ? sbl_err_set(err, SBL_E_NamespaceNotFound, "ns not found: %s", ns) : 0;
}

int sbl_db_drop(sbl_session_t *s, const char *db, sbl_err_t *err)
{
    size_t n;

    sbl_versioned_invalidate();
    return drop_matching(s, match_db, db, &n, err);
}

int sbl_coll_rename(sbl_session_t *s, const char *from, const char *to, bool drop_target,
                    sbl_err_t *err)
{
    WT_SESSION *wt = sbl_eng.cat_wt;
    sbl_coll_t *src, *renamed = NULL;
    size_t from_idx, to_idx;
    bool target_exists;
    int ret, rc = 0;

    sbl_versioned_invalidate();
    SBL_RET(check_ns(to, err));
    if (s != NULL && s->in_txn)
        return sbl_err_set(err, SBL_E_OperationFailed,
                           "Cannot rename a collection inside a transaction");
    if (strcmp(from, to) == 0)
        return sbl_err_set(err, SBL_E_IllegalOperation,
                           "Can't rename a collection to itself");
    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    if (!find_locked(from, &from_idx)) {
        rc = sbl_err_set(err, SBL_E_NamespaceNotFound, "Source collection %s does not exist",
                         from);
        goto done;
    }
    src = sbl_eng.colls[from_idx];
    target_exists = find_locked(to, &to_idx);
    if (target_exists && !drop_target) {
        rc = sbl_err_set(err, SBL_E_NamespaceExists, "target namespace exists");
        goto done;
    }
    renamed = coll_new(to, src->uuid, src->options, src->tbl);
    if ((ret = wt->begin_transaction(wt, NULL)) != 0) {
        rc = sbl_wt_err(err, ret, "begin catalog transaction");
        goto done;
    }
    /* The source keeps its table, so only its catalog row goes (not its sizes). */
    WT_CURSOR *cur;
    if ((ret = wt->open_cursor(wt, SBL_CATALOG_URI, NULL, NULL, &cur)) == 0) {
        cur->set_key(cur, from);
        ret = cur->remove(cur);
        cur->close(cur);
    }
    if (ret != 0)
        rc = sbl_wt_err(err, ret, "catalog remove");
    if (rc == 0 && target_exists)
        rc = catalog_remove(sbl_eng.colls[to_idx], err);
    if (rc == 0)
        rc = catalog_put(renamed, err);
    if (rc != 0) {
        wt->rollback_transaction(wt, NULL);
        goto done;
    }
    if ((ret = wt->commit_transaction(wt, NULL)) != 0) {
        rc = sbl_wt_err(err, ret, "commit catalog transaction");
        goto done;
    }
    atomic_fetch_add(&sbl_eng.commits, 1);
    if (target_exists)
        forget_dropped_locked(s, to_idx);
    find_locked(from, &from_idx);
    remove_locked(from_idx);
    sbl_coll_release(src);
    find_locked(to, &to_idx);
    insert_locked(to_idx, renamed);
    renamed = NULL;
done:
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    sbl_coll_release(renamed);
    return rc;
}

int sbl_coll_set_options(sbl_session_t *s, const char *ns, const bson_t *options, sbl_err_t *err)
{
    WT_SESSION *wt = sbl_eng.cat_wt;
    sbl_coll_t *old, *c = NULL;
    size_t idx;
    int ret, rc = 0;

    if (s != NULL && s->in_txn)
        return sbl_err_set(err, SBL_E_OperationFailed,
                           "Cannot modify a collection inside a transaction");
    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    if (!find_locked(ns, &idx)) {
        rc = sbl_err_set(err, SBL_E_NamespaceNotFound, "ns does not exist: %s", ns);
        goto done;
    }
    old = sbl_eng.colls[idx];
    /* A new handle: readers of the old one keep valid (immutable) options. */
    c = coll_new(ns, old->uuid, options, old->tbl);
    if ((ret = wt->begin_transaction(wt, NULL)) != 0) {
        rc = sbl_wt_err(err, ret, "begin catalog transaction");
        goto done;
    }
    if ((rc = catalog_put(c, err)) != 0) {
        wt->rollback_transaction(wt, NULL);
        goto done;
    }
    if ((ret = wt->commit_transaction(wt, NULL)) != 0) {
        rc = sbl_wt_err(err, ret, "commit catalog transaction");
        goto done;
    }
    atomic_fetch_add(&sbl_eng.commits, 1);
    sbl_capped_set_limits(c->tbl, options); /* collMod's cappedSize / cappedMax */
    sbl_eng.colls[idx] = c;
    c = old; /* the catalog's reference on the old handle goes */
done:
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    sbl_coll_release(c);
    return rc;
}

int sbl_catalog_update_table(sbl_wt_table_t *t, sbl_err_t *err)
{
    WT_SESSION *wt = sbl_eng.cat_wt;
    sbl_coll_t *c = NULL;
    int ret, rc = 0;

    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    for (size_t i = 0; i < sbl_eng.ncolls && c == NULL; i++)
        if (sbl_eng.colls[i]->tbl == t)
            c = sbl_eng.colls[i];
    if (c == NULL) {
        rc = sbl_err_set(err, SBL_E_NamespaceNotFound, "collection was dropped");
        goto done;
    }
    if ((ret = wt->begin_transaction(wt, NULL)) != 0) {
        rc = sbl_wt_err(err, ret, "begin catalog transaction");
        goto done;
    }
    if ((rc = catalog_put(c, err)) != 0) {
        wt->rollback_transaction(wt, NULL);
        goto done;
    }
    if ((ret = wt->commit_transaction(wt, NULL)) != 0) {
        rc = sbl_wt_err(err, ret, "commit catalog transaction");
        goto done;
    }
    atomic_fetch_add(&sbl_eng.commits, 1);
done:
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    return rc;
}

void sbl_catalog_list(const char *db, sbl_catalog_visit_fn fn, void *arg)
{
    sbl_coll_t **list;
    size_t i, n = 0;

    /* Visit without the lock held so fn may use the catalog. */
    pthread_rwlock_rdlock(&sbl_eng.cat_lock);
    list = bson_malloc((sbl_eng.ncolls + 1) * sizeof(*list));
    for (i = 0; i < sbl_eng.ncolls; i++)
        if ((db == NULL || match_db(sbl_eng.colls[i]->ns, db)) &&
            sbl_eng.colls[i]->owner == NULL) {
            list[n] = sbl_eng.colls[i];
            atomic_fetch_add(&list[n]->refs, 1);
            n++;
        }
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    for (i = 0; i < n; i++)
        if (!fn(list[i]->ns, list[i]->options, list[i]->uuid, arg))
            break;
    for (i = 0; i < n; i++)
        sbl_coll_release(list[i]);
    bson_free(list);
}

int sbl_catalog_save_sizes(WT_SESSION *wt, bool clean, sbl_err_t *err)
{
    WT_CURSOR *cur = NULL;
    size_t i;
    int ret;

    if ((ret = wt->begin_transaction(wt, NULL)) != 0)
        return sbl_wt_err(err, ret, "begin sizes transaction");
    if ((ret = wt->open_cursor(wt, SBL_SIZES_URI, NULL, NULL, &cur)) != 0)
        goto err;
    for (i = 0; i < sbl_eng.ncolls; i++) {
        sbl_wt_table_t *t = sbl_eng.colls[i]->tbl;
        cur->set_key(cur, t->ident);
        cur->set_value(cur, (int64_t)atomic_load(&t->count), (int64_t)atomic_load(&t->data_size));
        if ((ret = cur->insert(cur)) != 0)
            goto err;
    }
    cur->set_key(cur, SBL_CLEAN_KEY);
    cur->set_value(cur, (int64_t)(clean ? 1 : 0), (int64_t)0);
    if ((ret = cur->insert(cur)) != 0)
        goto err;
    cur->close(cur);
    cur = NULL;
    if ((ret = wt->commit_transaction(wt, NULL)) != 0)
        return sbl_wt_err(err, ret, "commit sizes");
    return 0;
err:
    if (cur != NULL)
        cur->close(cur);
    wt->rollback_transaction(wt, NULL);
    return sbl_wt_err(err, ret, "save collection sizes");
}

/* Build the in-memory handle of one catalog row. */
static int load_entry(const char *key, const WT_ITEM *v, sbl_err_t *err)
{
    bson_t entry;
    bson_iter_t it;
    const char *ident = NULL;
    const uint8_t *uuid = NULL;
    uint32_t uuid_len = 0, olen = 0;
    const uint8_t *odata = NULL;
    bson_t options;
    char uri[256];
    size_t idx;

    if (!bson_init_static(&entry, v->data, v->size))
        return sbl_err_set(err, SBL_E_InternalError, "corrupt catalog entry for %s", key);
    if (bson_iter_init_find(&it, &entry, "ident") && BSON_ITER_HOLDS_UTF8(&it))
        ident = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, &entry, "uuid") && BSON_ITER_HOLDS_BINARY(&it))
        bson_iter_binary(&it, NULL, &uuid_len, &uuid);
    if (bson_iter_init_find(&it, &entry, "options") && BSON_ITER_HOLDS_DOCUMENT(&it))
        bson_iter_document(&it, &olen, &odata);
    if (ident == NULL || uuid_len != 16 || odata == NULL ||
        !bson_init_static(&options, odata, olen))
        return sbl_err_set(err, SBL_E_InternalError, "corrupt catalog entry for %s", key);
    snprintf(uri, sizeof(uri), "table:%s", ident);
    sbl_wt_table_t *tbl = sbl_table_new(uri);
    if (bson_iter_init_find(&it, &entry, "keyField") && BSON_ITER_HOLDS_UTF8(&it))
        tbl->key_field = bson_strdup(bson_iter_utf8(&it, NULL));
    sbl_coll_t *c = coll_new(key, uuid, &options, tbl);
    sbl_table_unref(tbl);
    int rc = sbl_capped_attach(sbl_eng.cat_wt, tbl, &options, false, err);
    if (rc == 0)
        rc = sbl_index_catalog_load(tbl, &entry, err);
    if (rc != 0) {
        sbl_coll_release(c);
        return rc;
    }
    uint64_t n = strtoull(ident + strlen("collection-"), NULL, 10);
    if (n >= sbl_eng.next_ident)
        sbl_eng.next_ident = n + 1;
    find_locked(key, &idx);
    insert_locked(idx, c);
    return 0;
}

/* Count documents and bytes of every table by scanning it (after a crash). */
int sbl_catalog_recount(sbl_err_t *err)
{
    WT_SESSION *wt = sbl_eng.cat_wt;

    for (size_t i = 0; i < sbl_eng.ncolls; i++) {
        sbl_wt_table_t *t = sbl_eng.colls[i]->tbl;
        WT_CURSOR *cur;
        WT_ITEM v;
        int64_t n = 0, bytes = 0;
        int ret;

        if ((ret = wt->open_cursor(wt, t->uri, NULL, NULL, &cur)) != 0)
            return sbl_wt_err(err, ret, "recount open");
        while ((ret = cur->next(cur)) == 0) {
            cur->get_value(cur, &v);
            n++;
            bytes += (int64_t)v.size;
        }
        cur->close(cur);
        if (ret != WT_NOTFOUND)
            return sbl_wt_err(err, ret, "recount");
        atomic_store(&t->count, n);
        atomic_store(&t->data_size, bytes);
    }
    return 0;
}

static int load_sizes(bool *cleanp, sbl_err_t *err)
{
    WT_SESSION *wt = sbl_eng.cat_wt;
    WT_CURSOR *cur;
    int64_t a, b;
    int ret;

    *cleanp = false;
    if ((ret = wt->open_cursor(wt, SBL_SIZES_URI, NULL, NULL, &cur)) != 0)
        return sbl_wt_err(err, ret, "open sizes");
    cur->set_key(cur, SBL_CLEAN_KEY);
    if ((ret = cur->search(cur)) == WT_NOTFOUND && sbl_eng.ncolls == 0)
        *cleanp = true; /* a new dbpath: nothing to count */
    else if (ret == 0 && cur->get_value(cur, &a, &b) == 0 && a == 1) {
        *cleanp = true;
        for (size_t i = 0; i < sbl_eng.ncolls; i++) {
            sbl_wt_table_t *t = sbl_eng.colls[i]->tbl;
            cur->set_key(cur, t->ident);
            if (cur->search(cur) == 0 && cur->get_value(cur, &a, &b) == 0) {
                atomic_store(&t->count, a);
                atomic_store(&t->data_size, b);
            } else
                *cleanp = false;
        }
    }
    cur->close(cur);
    return 0;
}

/* Drop collection tables that no catalog row names (a crash between create
 * and catalog commit, or between catalog drop and table drop). */
static void drop_orphans(void)
{
    WT_SESSION *wt = sbl_eng.cat_wt;
    WT_CURSOR *cur;
    const char *key;
    char **orphans = NULL;
    size_t n = 0, cap = 0, i;

    if (wt->open_cursor(wt, "metadata:", NULL, NULL, &cur) != 0)
        return;
    while (cur->next(cur) == 0) {
        bool known = false;
        if (cur->get_key(cur, &key) != 0)
            continue;
        if (strncmp(key, "table:index-", 12) == 0)
            known = sbl_index_uri_known(key);
        else if (strncmp(key, "table:natural-", 14) == 0) /* a capped collection's order */
            for (i = 0; i < sbl_eng.ncolls && !known; i++)
                known = sbl_capped_uri(sbl_eng.colls[i]->tbl) != NULL &&
                        strcmp(sbl_capped_uri(sbl_eng.colls[i]->tbl), key) == 0;
        else if (strncmp(key, "table:collection-", 17) != 0)
            continue;
        for (i = 0; i < sbl_eng.ncolls && !known; i++)
            known = strcmp(sbl_eng.colls[i]->tbl->uri, key) == 0;
        if (!known) {
            if (n == cap) {
                cap = cap ? cap * 2 : 8;
                orphans = bson_realloc(orphans, cap * sizeof(*orphans));
            }
            orphans[n++] = bson_strdup(key);
        }
    }
    cur->close(cur);
    for (i = 0; i < n; i++) {
        wt->drop(wt, orphans[i], "force=true");
        bson_free(orphans[i]);
    }
    bson_free(orphans);
}

int sbl_catalog_load(sbl_err_t *err)
{
    WT_SESSION *wt;
    WT_CURSOR *cur;
    const char *key;
    WT_ITEM v;
    bool clean;
    int ret, rc = 0;

    if ((ret = sbl_eng.conn->open_session(sbl_eng.conn, NULL, "isolation=snapshot",
                                          &sbl_eng.cat_wt)) != 0)
        return sbl_wt_err(err, ret, "open catalog session");
    wt = sbl_eng.cat_wt;
    if ((ret = wt->create(wt, SBL_CATALOG_URI, "key_format=S,value_format=u")) != 0 ||
        (ret = wt->create(wt, SBL_SIZES_URI, "key_format=S,value_format=qq")) != 0)
        return sbl_wt_err(err, ret, "create catalog");
    if ((ret = wt->open_cursor(wt, SBL_CATALOG_URI, NULL, NULL, &cur)) != 0)
        return sbl_wt_err(err, ret, "open catalog");
    while ((ret = cur->next(cur)) == 0) {
        cur->get_key(cur, &key);
        cur->get_value(cur, &v);
        if ((rc = load_entry(key, &v, err)) != 0)
            break;
    }
    cur->close(cur);
    if (rc != 0)
        return rc;
    if (ret != WT_NOTFOUND)
        return sbl_wt_err(err, ret, "read catalog");
    drop_orphans();
    SBL_RET(load_sizes(&clean, err));
    /* A stable checkpoint (a replica set member's) holds unlogged tables as
     * of its stable timestamp, older than the counts saved at shutdown. */
    bool stable_ckpt = sbl_storage_recovery_ts() != 0;
    if ((!clean || stable_ckpt) && sbl_eng.ncolls > 0) {
        /* (A new, empty dbpath has nothing to recount and nothing to report.) */
        bson_t attr = BSON_INITIALIZER;
        BSON_APPEND_INT64(&attr, "collections", (int64_t)sbl_eng.ncolls);
        sbl_log(SBL_LOG_INFO, "STORAGE", 22262,
                stable_ckpt ? "Recovered from a stable checkpoint: recounting collection sizes"
                            : "Unclean shutdown detected: recounting collection sizes", &attr);
        bson_destroy(&attr);
        SBL_RET(sbl_catalog_recount(err));
    }
    /* From now on a crash must lead to a recount. */
    SBL_RET(sbl_catalog_save_sizes(wt, false, err));
    if ((ret = wt->log_flush(wt, "sync=on")) != 0)
        return sbl_wt_err(err, ret, "flush journal");
    return 0;
}

void sbl_catalog_unload(void)
{
    for (size_t i = 0; i < sbl_eng.ncolls; i++) {
        /* Handles that outlive close must not reach a closed connection. */
        atomic_store(&sbl_eng.colls[i]->tbl->dropped, true);
        sbl_coll_release(sbl_eng.colls[i]);
    }
    bson_free(sbl_eng.colls);
    sbl_eng.colls = NULL;
    sbl_eng.ncolls = sbl_eng.colls_cap = 0;
    if (sbl_eng.cat_wt != NULL)
        sbl_eng.cat_wt->close(sbl_eng.cat_wt, NULL);
    sbl_eng.cat_wt = NULL;
}
