/*
 * rt_write.c: writes through the router.  insert splits its batch by the
 * shard owning each document (ordered: runs of consecutive documents for
 * one shard, in order, stopping at the first error; unordered: one batch
 * per shard, all sent at once with rt_run_many, except in a transaction).
 * update and delete target each statement by its filter: the full shard
 * key's equality goes to one shard, multi-document statements go to every
 * shard the filter may touch, and a single-document statement
 * without the shard key tries the candidate shards one after the other
 * until one matches (so at most one document changes).  Replies are merged
 * with every writeErrors/upserted index mapped back to the client's.
 *
 * A snapshot transaction's statements are targeted by the placement at its
 * read time (rt_target.c), as mongos does: a shard that has given the chunk
 * away since refuses the write, and the client retries the transaction.
 *
 * A StaleConfig answer makes the router refresh the collection and resend
 * what that shard did not apply; statements already acknowledged are not
 * sent again.
 */
#include "router/router_int.h"

#include "doc/doc.h"
#include "query/query.h"
#include "shard/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct merged {
    int64_t n, n_modified;
    bool has_modified;
    bson_t write_errors; /* array, client indexes */
    uint32_t nerr;
    bson_t upserted;
    uint32_t nups;
    bson_t wce;
    bool has_wce;
} merged_t;

static void merged_init(merged_t *m)
{
    memset(m, 0, sizeof(*m));
    bson_init(&m->write_errors);
    bson_init(&m->upserted);
    bson_init(&m->wce);
}

static void merged_free(merged_t *m)
{
    bson_destroy(&m->write_errors);
    bson_destroy(&m->upserted);
    bson_destroy(&m->wce);
}

/* Fold one shard reply into m; map[i] is the client index of the batch's i.
 * Returns the number of write errors the reply had. */
static int merged_add(merged_t *m, const bson_t *r, const int *map, int nmap)
{
    bson_iter_t it, a, f;
    int errs = 0;
    if (bson_iter_init_find(&it, r, "n"))
        m->n += bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, r, "nModified")) {
        m->n_modified += bson_iter_as_int64(&it);
        m->has_modified = true;
    }
    for (int pass = 0; pass < 2; pass++) {
        const char *field = pass == 0 ? "writeErrors" : "upserted";
        if (!bson_iter_init_find(&it, r, field) || !bson_iter_recurse(&it, &a))
            continue;
        while (bson_iter_next(&a)) {
            bson_t e = BSON_INITIALIZER;
            if (!bson_iter_recurse(&a, &f))
                continue;
            while (bson_iter_next(&f)) {
                if (strcmp(bson_iter_key(&f), "index") == 0) {
                    int i = (int)bson_iter_as_int64(&f);
                    BSON_APPEND_INT32(&e, "index", i >= 0 && i < nmap ? map[i] : i);
                } else {
                    sbl_append_iter(&e, bson_iter_key(&f), -1, &f);
                }
            }
            char key[16];
            const char *ks;
            if (pass == 0) {
                bson_uint32_to_string(m->nerr++, &ks, key, sizeof(key));
                BSON_APPEND_DOCUMENT(&m->write_errors, ks, &e);
                errs++;
            } else {
                bson_uint32_to_string(m->nups++, &ks, key, sizeof(key));
                BSON_APPEND_DOCUMENT(&m->upserted, ks, &e);
            }
            bson_destroy(&e);
        }
    }
    if (!m->has_wce && bson_iter_init_find(&it, r, "writeConcernError") &&
        BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t d;
        sbl_iter_doc(&it, &d);
        bson_concat(&m->wce, &d);
        m->has_wce = true;
    }
    return errs;
}

/* One document of a merged array: its client's index, the place it was
 * merged in, and where it lies in the array (not a bson_iter_t: that asks
 * for an alignment malloc does not give). */
typedef struct indexed {
    int32_t index, pos;
    const uint8_t *data;
    uint32_t len;
} indexed_t;

static int indexed_cmp(const void *a, const void *b)
{
    const indexed_t *x = a, *y = b;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* arr's documents ordered by their "index" (kept in merge order within
 * one index), as mongos lists a batch's errors and upserts whatever order
 * the shards answered in, into out (initialised here). */
static void by_index(const bson_t *arr, uint32_t n, bson_t *out)
{
    bson_iter_t it, f;
    indexed_t *v = malloc((n ? n : 1) * sizeof(*v));
    uint32_t k = 0;
    if (bson_iter_init(&it, arr))
        while (k < n && bson_iter_next(&it)) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                continue;
            v[k].index = 0;
            v[k].pos = (int32_t)k;
            bson_iter_document(&it, &v[k].len, &v[k].data);
            if (bson_iter_recurse(&it, &f) && bson_iter_find(&f, "index"))
                v[k].index = (int32_t)bson_iter_as_int64(&f);
            k++;
        }
    qsort(v, k, sizeof(*v), indexed_cmp);
    bson_init(out);
    for (uint32_t i = 0; i < k; i++) {
        char key[16];
        const char *ks;
        bson_t d;
        bson_uint32_to_string(i, &ks, key, sizeof(key));
        if (bson_init_static(&d, v[i].data, v[i].len))
            BSON_APPEND_DOCUMENT(out, ks, &d);
    }
    free(v);
}

static void merged_reply(merged_t *m, bson_t *reply, bool with_modified)
{
    bson_t sorted;
    BSON_APPEND_INT32(reply, "n", (int32_t)m->n);
    if (with_modified)
        BSON_APPEND_INT32(reply, "nModified", (int32_t)m->n_modified);
    if (m->nups) {
        by_index(&m->upserted, m->nups, &sorted);
        bson_append_array(reply, "upserted", -1, &sorted);
        bson_destroy(&sorted);
    }
    if (m->nerr) {
        by_index(&m->write_errors, m->nerr, &sorted);
        bson_append_array(reply, "writeErrors", -1, &sorted);
        bson_destroy(&sorted);
    }
    if (m->has_wce)
        BSON_APPEND_DOCUMENT(reply, "writeConcernError", &m->wce);
}

static void add_error(merged_t *m, int index, int code, const char *msg)
{
    bson_t e = BSON_INITIALIZER;
    char key[16];
    const char *ks;
    BSON_APPEND_INT32(&e, "index", index);
    BSON_APPEND_INT32(&e, "code", code);
    BSON_APPEND_UTF8(&e, "codeName", sbl_err_name(code));
    BSON_APPEND_UTF8(&e, "errmsg", msg);
    bson_uint32_to_string(m->nerr++, &ks, key, sizeof(key));
    BSON_APPEND_DOCUMENT(&m->write_errors, ks, &e);
    bson_destroy(&e);
}

/* cmd's fields except arr_field and the router-only ones, then arr_field
 * holding the elements idx[0..n) of the original array (as "0", "1" ...). */
static void build_sub(const bson_t *cmd, const char *arr_field, bson_iter_t *const *elems,
                      const int *idx, int n, const rt_coll_t *c, int shard, bson_t *out)
{
    const char *strip[] = {arr_field, NULL};
    rt_copy_cmd(cmd, out, strip);
    bson_t arr;
    BSON_APPEND_ARRAY_BEGIN(out, arr_field, &arr);
    for (int i = 0; i < n; i++) {
        char key[16];
        const char *ks;
        bson_uint32_to_string((uint32_t)i, &ks, key, sizeof(key));
        sbl_append_iter(&arr, ks, -1, elems[idx[i]]);
    }
    bson_append_array_end(out, &arr);
    if (rt_sess_retryable()) {
        /* each statement keeps its index in the client's batch as its
         * stmtId, however the batch was split (mongos's rule) */
        BSON_APPEND_ARRAY_BEGIN(out, "stmtIds", &arr);
        for (int i = 0; i < n; i++) {
            char key[16];
            const char *ks;
            bson_uint32_to_string((uint32_t)i, &ks, key, sizeof(key));
            BSON_APPEND_INT32(&arr, ks, idx[i]);
        }
        bson_append_array_end(out, &arr);
    }
    if (shard >= 0)
        rt_append_version(out, c, shard);
}

static bool ordered_of(const bson_t *cmd)
{
    bson_iter_t it;
    return !bson_iter_init_find(&it, cmd, "ordered") || bson_iter_as_bool(&it);
}

/* The array's elements as iterators (caller frees *elemsp and its entries block). */
static int collect(const bson_t *cmd, const char *field, void **storep, bson_iter_t ***elemsp,
                   sbl_err_t *err)
{
    bson_iter_t it, a;
    if (!bson_iter_init_find(&it, cmd, field) || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &a))
        return -sbl_err_set(err, SBL_E_FailedToParse, "BSON field '%s' is missing or not an array",
                            field);
    /* bson_iter_t asks for 128-byte alignment but its size is not a multiple
     * of it, so an array of them would be misaligned: each gets a padded slot
     * in one aligned block. */
    int n = 0;
    bson_iter_t c = a;
    while (bson_iter_next(&c)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&c))
            return -sbl_err_set(err, SBL_E_TypeMismatch, "%s entries must be documents", field);
        n++;
    }
    size_t align = _Alignof(bson_iter_t);
    size_t stride = (sizeof(bson_iter_t) + align - 1) / align * align;
    char *store = aligned_alloc(align, (n ? n : 1) * stride);
    bson_iter_t **elems = malloc((n ? n : 1) * sizeof(*elems));
    for (int i = 0; bson_iter_next(&a); i++) {
        elems[i] = (bson_iter_t *)(store + i * stride);
        *elems[i] = a;
    }
    *storep = store;
    *elemsp = elems;
    return n;
}

const char *rt_write_ns(const char *db, const bson_t *cmd, const char *verb, char *ns, size_t n)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, cmd, verb) || !BSON_ITER_HOLDS_UTF8(&it))
        return NULL;
    snprintf(ns, n, "%s.%s", db, bson_iter_utf8(&it, NULL));
    return ns;
}

/* Pass the whole command to one shard, retrying on StaleConfig while the
 * target stays single.  Returns 1 when the routing changed so the caller
 * must split, 0 done (reply filled), or -code. */
static int whole_to(int s, const char *db, const bson_t *cmd, const rt_coll_t *c, bson_t *reply,
                    sbl_err_t *err)
{
    bson_t fwd = BSON_INITIALIZER, r;
    rt_copy_cmd(cmd, &fwd, NULL);
    if (s >= 0)
        rt_append_version(&fwd, c, s);
    int rc = rt_run(s, db, &fwd, &r, err);
    bson_destroy(&fwd);
    if (rc != 0)
        return -rc;
    if (rt_stale_code(rt_reply_code(&r))) {
        bson_destroy(&r);
        return 1;
    }
    bson_copy_to_excluding_noinit(&r, reply, "$clusterTime", "operationTime", NULL);
    bson_destroy(&r);
    return 0;
}

/* ns's routing table read again (a shard said StaleConfig or
 * StaleDbVersion).  create: the write creates its database when it is gone
 * (dropped meanwhile through another router), as the first try did, rather
 * than land on a shard taken for a database nobody registered. */
rt_coll_t *rt_write_refresh(const char *db, const char *ns, bool create, sbl_err_t *err)
{
    rt_coll_t *c = rt_coll_get(ns, true, err);
    if (c != NULL && c->transient && create) {
        sbl_err_t e = {0};
        rt_coll_release(c);
        rt_db_primary(db, true, &e);
        c = rt_coll_get(ns, false, err);
    }
    return c;
}

/* ---- insert ---- */

enum { BAD_KEY = -1000 }; /* shard[i] of a document mongos refuses */

/* The shard owning each document not done yet; BAD_KEY for one whose
 * shard key holds an array or lies under one (mongos refuses it: 61). */
static int target_docs(const rt_coll_t *c, bson_iter_t *const *elems, int n, const bool *done,
                       int *shard, sbl_err_t *err)
{
    for (int i = 0; i < n; i++) {
        if (done[i])
            continue;
        bson_t d;
        bson_value_t vals[SBL_SHARD_KEY_MAX];
        sbl_iter_doc(elems[i], &d);
        if (c->sharded &&
            (sbl_shard_key_values(c->key, c->hashed_pos, &d, 0, vals) & SBL_SHARD_KEY_ARRAY))
            shard[i] = BAD_KEY;
        else if ((shard[i] = rt_target_doc(c, &d, err)) < 0)
            return err->code;
    }
    return 0;
}

/* The message of a reply that failed as a whole. */
static const char *reply_errmsg(const bson_t *r, const char *dflt)
{
    bson_iter_t mi;
    return bson_iter_init_find(&mi, r, "errmsg") && BSON_ITER_HOLDS_UTF8(&mi)
               ? bson_iter_utf8(&mi, NULL)
               : dflt;
}

/* A write's parts, one per shard, sent at once (parts_send) and then
 * looked at one by one (part_outcome); parts_free releases the replies. */
typedef struct parts {
    int k;                          /* how many parts */
    int sh[RT_MAX_SHARDS];          /* part j's shard */
    const int *idx[RT_MAX_SHARDS];  /* its statements (indexes into the client's array) */
    int cnt[RT_MAX_SHARDS];         /* and how many */
    bson_t rs[RT_MAX_SHARDS];       /* its reply (always initialised) */
    int rcs[RT_MAX_SHARDS];         /* 0, or its transport error (errs) */
    sbl_err_t errs[RT_MAX_SHARDS];
} parts_t;

/* Every part of p (sh, idx, cnt and k set by the caller) built from cmd's
 * array arr and sent at once (rt_run_many); every reply read.  A part lost
 * in transport is sent once more, alone, when the write is retryable (the
 * shard knows its stmtIds: rt_run's rule). */
static void parts_send(parts_t *p, const char *db, const bson_t *cmd, const char *arr,
                       bson_iter_t *const *elems, const rt_coll_t *c)
{
    bson_t subs[RT_MAX_SHARDS];
    const bson_t *cmds[RT_MAX_SHARDS];
    for (int j = 0; j < p->k; j++) {
        bson_init(&subs[j]);
        build_sub(cmd, arr, elems, p->idx[j], p->cnt[j], c, p->sh[j], &subs[j]);
        cmds[j] = &subs[j];
        memset(&p->errs[j], 0, sizeof(p->errs[j]));
    }
    rt_run_many(p->k, p->sh, db, cmds, p->rs, p->rcs, p->errs);
    for (int j = 0; j < p->k; j++) {
        if (p->rcs[j] != 0 && rt_sess_retryable()) {
            bson_destroy(&p->rs[j]);
            p->rcs[j] = rt_run(p->sh[j], db, cmds[j], &p->rs[j], &p->errs[j]);
        }
        bson_destroy(&subs[j]);
    }
}

typedef enum {
    PART_LOST,    /* no answer: the first such error went into *rcp and err */
    PART_STALE,   /* StaleConfig/StaleDbVersion while retry: nothing of it ran */
    PART_FAILED,  /* refused as a whole: *codep */
    PART_APPLIED, /* answered ok (its reply may hold write errors) */
} part_outcome_t;

/* What became of part j of p; retry false (the retries are spent): a stale
 * answer is that part's error (PART_FAILED).  *rcp keeps the first
 * transport error (0 none yet). */
static part_outcome_t part_outcome(const parts_t *p, int j, bool retry, int *rcp, int *codep,
                                   sbl_err_t *err)
{
    *codep = 0;
    if (p->rcs[j] != 0) {
        if (*rcp == 0) {
            *rcp = p->rcs[j];
            *err = p->errs[j];
        }
        return PART_LOST;
    }
    *codep = rt_reply_code(&p->rs[j]);
    if (rt_stale_code(*codep) && retry)
        return PART_STALE;
    return *codep != 0 ? PART_FAILED : PART_APPLIED;
}

static void parts_free(parts_t *p)
{
    for (int j = 0; j < p->k; j++)
        bson_destroy(&p->rs[j]);
    p->k = 0;
}

/* One round of an unordered insert outside a transaction: every shard's
 * sub-batch of the documents not done yet goes out at once (rt_run_many)
 * and every reply is read, as mongos does.  A part the shard applied, or
 * refused as a whole, is done (done[]); a StaleConfig part is not, and
 * sets *stalep so the caller refreshes and sends only what is not done
 * (retry: false once the retries are spent, the stale answer is then that
 * part's error).  A part lost in transport is sent once more, alone, when
 * the write is retryable (the shard knows its stmtIds).  Returns 0 or the
 * first transport error (err). */
static int insert_parallel(const char *db, const bson_t *cmd, bson_iter_t *const *elems, int n,
                           const rt_coll_t *c, const int *shard, bool *done, bool retry,
                           merged_t *m, bool *stalep, sbl_err_t *err)
{
    int cnt[RT_MAX_SHARDS] = {0}, start[RT_MAX_SHARDS], fill[RT_MAX_SHARDS];
    int *idx = malloc((n ? n : 1) * sizeof(int));
    for (int i = 0; i < n; i++)
        if (!done[i] && shard[i] >= 0 && shard[i] < RT_MAX_SHARDS)
            cnt[shard[i]]++;
    for (int s = 0, at = 0; s < RT_MAX_SHARDS; at += cnt[s], s++)
        start[s] = fill[s] = at;
    for (int i = 0; i < n; i++) /* in the client's order within each part */
        if (!done[i] && shard[i] >= 0 && shard[i] < RT_MAX_SHARDS)
            idx[fill[shard[i]]++] = i;
    parts_t p = {.k = 0};
    for (int s = 0; s < RT_MAX_SHARDS; s++)
        if (cnt[s] > 0) {
            p.sh[p.k] = s;
            p.idx[p.k] = idx + start[s];
            p.cnt[p.k++] = cnt[s];
        }
    parts_send(&p, db, cmd, "documents", elems, c);
    int rc = 0, code;
    for (int j = 0; j < p.k; j++) {
        const int *batch = p.idx[j];
        int nb = p.cnt[j];
        switch (part_outcome(&p, j, retry, &rc, &code, err)) {
        case PART_LOST:
            break;
        case PART_STALE:
            *stalep = true; /* sent again after the refresh */
            break;
        case PART_FAILED: {
            /* every document of the part gets the error */
            const char *msg = reply_errmsg(&p.rs[j], "insert failed on a shard");
            for (int i = 0; i < nb; i++) {
                add_error(m, batch[i], code, msg);
                done[batch[i]] = true;
            }
            break;
        }
        case PART_APPLIED:
            merged_add(m, &p.rs[j], batch, nb);
            for (int i = 0; i < nb; i++)
                done[batch[i]] = true;
            break;
        }
    }
    parts_free(&p);
    free(idx);
    return rc;
}

int rt_insert(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    char ns[400];
    if (rt_write_ns(db, cmd, "insert", ns, sizeof(ns)) == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "insert needs a collection name");
    void *store = NULL;
    bson_iter_t **elems = NULL;
    int n = collect(cmd, "documents", &store, &elems, err);
    if (n < 0)
        return -n;
    sbl_err_t e2 = {0};
    rt_db_primary(db, true, &e2); /* a write creates the database */
    bool ordered = ordered_of(cmd);
    /* an unordered batch's parts go out together; a transaction's stay in turn */
    bool parallel = !ordered && !rt_sess_in_txn();
    int *shard = malloc((n ? n : 1) * sizeof(int)), *batch = malloc((n ? n : 1) * sizeof(int));
    bool *done = calloc(n ? n : 1, sizeof(bool));
    merged_t m;
    merged_init(&m);
    int rc = 0, attempts = 0;
    bool stop = false;
    rt_coll_t *c = rt_coll_get(ns, false, err);
    if (c == NULL) {
        rc = err->code;
        goto out;
    }
    if (!c->sharded) {
        int w = whole_to(c->primary, db, cmd, c, reply, err);
        if (w <= 0) {
            rc = -w;
            goto out;
        }
        rt_coll_release(c);
        c = rt_write_refresh(db, ns, true, err); /* it became sharded (or moved): split below */
        if (c == NULL) {
            rc = err->code;
            goto out;
        }
    }
    rc = target_docs(c, elems, n, done, shard, err);
    while (!stop && rc == 0) {
        int first = -1;
        for (int i = 0; i < n && first < 0; i++)
            if (!done[i])
                first = i;
        if (first < 0)
            break;
        if (shard[first] == BAD_KEY) {
            add_error(&m, first, SBL_E_ShardKeyNotFound,
                      "Shard key cannot contain array values or array descendants.");
            done[first] = true;
            stop = ordered;
            continue;
        }
        if (parallel) {
            bool stale = false;
            rc = insert_parallel(db, cmd, elems, n, c, shard, done, attempts < RT_RETRIES, &m,
                                 &stale, err);
            if (rc != 0 || !stale)
                continue;
            attempts++;
            rt_coll_release(c);
            c = rt_write_refresh(db, ns, true, err);
            if (c == NULL) {
                rc = err->code;
                goto out;
            }
            rc = target_docs(c, elems, n, done, shard, err);
            continue;
        }
        int s = shard[first], nb = 0;
        for (int i = first; i < n; i++) {
            if (done[i])
                continue;
            if (shard[i] != s) {
                if (ordered)
                    break;
                continue;
            }
            batch[nb++] = i;
        }
        bson_t sub = BSON_INITIALIZER, r;
        build_sub(cmd, "documents", elems, batch, nb, c, s, &sub);
        rc = rt_run(s, db, &sub, &r, err);
        bson_destroy(&sub);
        if (rc != 0)
            break;
        int code = rt_reply_code(&r);
        if (rt_stale_code(code) && attempts++ < RT_RETRIES) {
            bson_destroy(&r);
            rt_coll_release(c);
            c = rt_write_refresh(db, ns, true, err);
            if (c == NULL) {
                rc = err->code;
                goto out;
            }
            rc = target_docs(c, elems, n, done, shard, err);
            continue;
        }
        if (code != 0) {
            /* the whole batch failed: every document of it gets the error */
            const char *msg = reply_errmsg(&r, "insert failed on a shard");
            for (int i = 0; i < nb && (!ordered || i == 0); i++)
                add_error(&m, batch[i], code, msg);
            bson_destroy(&r);
            if (ordered)
                break;
            for (int i = 0; i < nb; i++)
                done[batch[i]] = true;
            continue;
        }
        int errs = merged_add(&m, &r, batch, nb);
        bson_destroy(&r);
        for (int i = 0; i < nb; i++)
            done[batch[i]] = true;
        if (ordered && errs > 0)
            stop = true;
    }
    if (rc == 0)
        merged_reply(&m, reply, false);
out:
    rt_coll_release(c);
    merged_free(&m);
    free(shard);
    free(batch);
    free(done);
    free(store);
    free(elems);
    return rc;
}

void rt_insert_one_reply(const bson_t *cmd, const bson_t *r, bson_t *reply)
{
    merged_t m;
    merged_init(&m);
    int code = rt_reply_code(r);
    if (code == 0) {
        merged_add(&m, r, NULL, 0); /* the client's indexes are the batch's */
    } else {
        bool ordered = ordered_of(cmd);
        const char *msg = reply_errmsg(r, "insert failed on a shard");
        bson_iter_t it, a;
        int n = 0;
        if (bson_iter_init_find(&it, cmd, "documents") && bson_iter_recurse(&it, &a))
            while (bson_iter_next(&a))
                n++;
        for (int i = 0; i < n && (!ordered || i == 0); i++)
            add_error(&m, i, code, msg);
    }
    merged_reply(&m, reply, false);
    merged_free(&m);
}

/* ---- update and delete ---- */

/* One statement's filter ("q"), and whether it may touch several documents. */
static void stmt_info(const bson_iter_t *el, bool is_update, bson_t *q, bool *multi, bool *upsert)
{
    bson_iter_t f;
    bson_init(q);
    *multi = false;
    *upsert = false;
    bson_iter_recurse(el, &f);
    while (bson_iter_next(&f)) {
        const char *k = bson_iter_key(&f);
        if (strcmp(k, "q") == 0 && BSON_ITER_HOLDS_DOCUMENT(&f))
            sbl_iter_doc(&f, q);
        else if (is_update && strcmp(k, "multi") == 0)
            *multi = bson_iter_as_bool(&f);
        else if (is_update && strcmp(k, "upsert") == 0)
            *upsert = bson_iter_as_bool(&f);
        else if (!is_update && strcmp(k, "limit") == 0)
            *multi = bson_iter_as_int64(&f) == 0;
    }
}

/* The update document of statement el ("u"); false for a pipeline. */
static bool stmt_update(const bson_iter_t *el, bson_t *ud)
{
    bson_iter_t f;
    if (!bson_iter_recurse(el, &f) || !bson_iter_find(&f, "u") || !BSON_ITER_HOLDS_DOCUMENT(&f))
        return false; /* pipelines: not checked (a documented limit) */
    sbl_iter_doc(&f, ud);
    return true;
}

/* The update pipeline of statement el ("u" as an array) into pl. */
static bool stmt_pipeline(const bson_iter_t *el, bson_t *pl)
{
    bson_iter_t f;
    return bson_iter_recurse(el, &f) && bson_iter_find(&f, "u") && sbl_iter_array(&f, pl);
}

/* Whether a path names a shard key field's top-level field. */
static bool key_top_field(const rt_coll_t *c, const char *path)
{
    bson_iter_t k;
    size_t pl = strcspn(path, ".");
    bson_iter_init(&k, c->key);
    while (bson_iter_next(&k))
        if (strcspn(bson_iter_key(&k), ".") == pl && strncmp(bson_iter_key(&k), path, pl) == 0)
            return true;
    return false;
}

/* Whether an update pipeline may change a shard key field (the router
 * cannot evaluate it): a stage replacing or projecting the document, or
 * setting or removing a key field's top-level field. */
bool rt_pipeline_may_change_key(const rt_coll_t *c, const bson_t *pl)
{
    bson_iter_t st, op, f;
    if (!c->sharded || !bson_iter_init(&st, pl))
        return false;
    while (bson_iter_next(&st)) {
        if (!bson_iter_recurse(&st, &op) || !bson_iter_next(&op))
            continue;
        const char *name = bson_iter_key(&op);
        bool sets = strcmp(name, "$set") == 0 || strcmp(name, "$addFields") == 0;
        if (!sets && strcmp(name, "$unset") != 0)
            return true; /* $project, $replaceRoot, $replaceWith */
        if (BSON_ITER_HOLDS_UTF8(&op) && key_top_field(c, bson_iter_utf8(&op, NULL)))
            return true;
        if (!bson_iter_recurse(&op, &f))
            continue;
        while (bson_iter_next(&f)) {
            if (sets && key_top_field(c, bson_iter_key(&f)))
                return true;
            if (!sets && BSON_ITER_HOLDS_UTF8(&f) && key_top_field(c, bson_iter_utf8(&f, NULL)))
                return true;
        }
    }
    return false;
}

/* Whether update ud would change a shard key field: an operator update
 * touching a key field (or a path above or below one) other than $set to
 * the value the filter pins it to, or a replacement whose key values
 * differ from the filter's. */
bool rt_changes_shard_key(const rt_coll_t *c, const bson_t *ud, const bson_t *q)
{
    bson_iter_t u, op, fld, k;
    if (!c->sharded || !bson_iter_init(&u, ud))
        return false;
    bool operators = bson_iter_next(&u) && bson_iter_key(&u)[0] == '$';
    bson_iter_init(&k, c->key);
    while (bson_iter_next(&k)) {
        const char *kf = bson_iter_key(&k);
        size_t kl = strlen(kf);
        bson_iter_t qv;
        bool pinned = bson_iter_init_find(&qv, q, kf) && !BSON_ITER_HOLDS_DOCUMENT(&qv);
        if (!operators) {
            bson_iter_t rv;
            bool has = sbl_path_get(ud, kf, &rv);
            if (kl == 3 && strcmp(kf, "_id") == 0 && !has)
                continue; /* a replacement keeps _id */
            if (!has || !pinned || sbl_value_compare(bson_iter_value(&rv), bson_iter_value(&qv)) ||
                BSON_ITER_HOLDS_ARRAY(&rv))
                return true;
            continue;
        }
        bson_iter_init(&op, ud);
        while (bson_iter_next(&op)) {
            if (!bson_iter_recurse(&op, &fld))
                continue;
            while (bson_iter_next(&fld)) {
                const char *p = bson_iter_key(&fld);
                size_t pl = strlen(p);
                bool overlap = (pl == kl && strcmp(p, kf) == 0) ||
                               (pl < kl && strncmp(p, kf, pl) == 0 && kf[pl] == '.') ||
                               (pl > kl && strncmp(p, kf, kl) == 0 && p[kl] == '.');
                if (!overlap)
                    continue;
                if (strcmp(bson_iter_key(&op), "$set") == 0 && pl == kl && pinned &&
                    !BSON_ITER_HOLDS_ARRAY(&fld) &&
                    sbl_value_compare(bson_iter_value(&fld), bson_iter_value(&qv)) == 0)
                    continue; /* set to the value it has */
                return true;
            }
        }
    }
    return false;
}

/* The document's shard key after update ud, as {<key path>: value, ...}
 * into nd: a replacement's own values (_id kept from the filter), else each
 * key field's $set value or the filter's equality.  false when another
 * operator touches a key field (the new value is not known here). */
static bool new_key_doc(const rt_coll_t *c, const bson_t *ud, const bson_t *q, bson_t *nd)
{
    bson_iter_t u, k, v, op, fld;
    bool operators = bson_iter_init(&u, ud) && bson_iter_next(&u) && bson_iter_key(&u)[0] == '$';
    bson_init(nd);
    bson_iter_init(&k, c->key);
    while (bson_iter_next(&k)) {
        const char *kf = bson_iter_key(&k);
        bool found = false;
        if (!operators) {
            found = sbl_path_get(ud, kf, &v) ||
                    (strcmp(kf, "_id") == 0 && bson_iter_init_find(&v, q, "_id"));
        } else {
            bson_iter_init(&op, ud);
            while (bson_iter_next(&op) && bson_iter_recurse(&op, &fld)) {
                size_t kl = strlen(kf);
                while (bson_iter_next(&fld)) {
                    const char *p = bson_iter_key(&fld);
                    if (strncmp(p, kf, strlen(p) < kl ? strlen(p) : kl) != 0)
                        continue;
                    if (strcmp(bson_iter_key(&op), "$set") != 0 || strcmp(p, kf) != 0) {
                        if (strcmp(p, kf) == 0 || (strlen(p) < kl && kf[strlen(p)] == '.') ||
                            (strlen(p) > kl && p[kl] == '.')) {
                            bson_destroy(nd);
                            return false;
                        }
                        continue;
                    }
                    v = fld;
                    found = true;
                }
            }
            if (!found)
                found = bson_iter_init_find(&v, q, kf);
        }
        if (found)
            sbl_append_iter(nd, kf, -1, &v);
    }
    return true;
}

/* The rules for a statement changing a document's shard key after its new
 * value's (key_change): the filter's full key equality (31025), not multi
 * (72), a retryable write or transaction (20); 0 when it may. */
int rt_key_rules(const rt_coll_t *c, const bson_t *q, bool multi, const char **msgp)
{
    if (!rt_filter_has_full_key(c, q)) {
        *msgp = "Shard key update is not allowed without specifying the full shard key in the "
                "query";
        return 31025;
    }
    if (multi) {
        *msgp = "Multi-update operations are not allowed when updating the shard key field.";
        return SBL_E_InvalidOptions;
    }
    if (!rt_sess_retryable()) {
        *msgp = "Must run update to shard key field in a multi-statement transaction or with "
                "retryWrites: true.";
        return SBL_E_IllegalOperation;
    }
    return 0;
}

/* What mongod answers for a statement changing a document's shard key, in
 * its order (update_stage's checks): a new key holding an array (54), a
 * filter without the full key's equality (31025), multi (72), outside a
 * retryable write or transaction (20).  0: allowed. */
int rt_key_change(const rt_coll_t *c, const bson_t *ud, const bson_t *q, bool multi,
                  const char **msgp)
{
    bson_t nd;
    bson_value_t vals[SBL_SHARD_KEY_MAX];
    if (new_key_doc(c, ud, q, &nd)) {
        bool array =
            sbl_shard_key_values(c->key, c->hashed_pos, &nd, SBL_SHARD_KEY_WHOLE_NAMES, vals) &
            SBL_SHARD_KEY_ARRAY;
        bson_destroy(&nd);
        if (array) {
            *msgp = "After applying the update, a shard key field of the document was found "
                    "to be an array or array descendant.";
            return SBL_E_NotSingleValueField;
        }
    }
    return rt_key_rules(c, q, multi, msgp);
}

#define BATCH_OF_ONE                                                                               \
    "Document shard key value updates that cause the doc to move shards must "                     \
    "be sent with write batch of size 1"

/* The first writeError of a reply into we, and its code (0: none). */
static int first_write_error(const bson_t *r, bson_t *we)
{
    bson_iter_t it, c;
    if (!bson_iter_init(&it, r) || !bson_iter_find_descendant(&it, "writeErrors.0", &c) ||
        !BSON_ITER_HOLDS_DOCUMENT(&c))
        return 0;
    sbl_iter_doc(&c, we);
    return bson_iter_init_find(&c, we, "code") ? (int)bson_iter_as_int64(&c) : 0;
}

/* A moved document's result (rt_move_doc's) folded into m at index i. */
static void fold_moved(merged_t *m, int i, const bson_t *res)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, res, "n"))
        m->n += bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, res, "nModified"))
        m->n_modified += bson_iter_as_int64(&it);
    m->has_modified = true;
    if (bson_iter_init_find(&it, res, "upserted")) {
        bson_t e = BSON_INITIALIZER;
        char key[16];
        const char *ks;
        BSON_APPEND_INT32(&e, "index", i);
        sbl_append_iter(&e, "_id", 3, &it);
        bson_uint32_to_string(m->nups++, &ks, key, sizeof(key));
        BSON_APPEND_DOCUMENT(&m->upserted, ks, &e);
        bson_destroy(&e);
    }
}

/* Statement i, answered 283 with the images we by shard s, moved
 * (rt_move_doc) and folded into m; 0 or the move's error (err). */
static int moved(const char *db, const char *coll, const bson_t *cmd, const rt_coll_t *c, int s,
                 int i, const bson_t *we, merged_t *m, sbl_err_t *err)
{
    bson_t res;
    int rc = rt_move_doc(db, coll, cmd, c, s, i, we, -1, &res, err);
    if (rc == 0)
        fold_moved(m, i, &res);
    bson_destroy(&res);
    return rc;
}

/* A multi statement (elems[i]) outside a transaction: every shard of t
 * not in applied[] gets its part at once (rt_run_many), as mongos sends a
 * statement's parts.  A shard that answered, ok or not, goes into applied[]
 * and its result into m (a part failing as a whole: one error for the
 * statement, the first shard's); one that said StaleConfig does not, and
 * sets *stalep (retry: false once the retries are spent, the stale answer
 * is then its error), so after a refresh only the shards that did not
 * apply it get it again: no document is updated or deleted twice.  Returns
 * 0 or the first transport error (err); *errsp counts the write errors. */
static int stmt_parallel(const char *db, const bson_t *cmd, const char *arr,
                         bson_iter_t *const *elems, int i, const rt_coll_t *c, const bool *t,
                         bool retry, bool *applied, merged_t *m, int *errsp, bool *stalep,
                         sbl_err_t *err)
{
    parts_t p = {.k = 0};
    for (int s = 0; s < RT_MAX_SHARDS; s++)
        if (t[s] && !applied[s]) {
            p.sh[p.k] = s;
            p.idx[p.k] = &i;
            p.cnt[p.k++] = 1;
        }
    parts_send(&p, db, cmd, arr, elems, c);
    int rc = 0, code;
    bool failed = false;
    for (int j = 0; j < p.k; j++) {
        switch (part_outcome(&p, j, retry, &rc, &code, err)) {
        case PART_LOST:
            break;
        case PART_STALE:
            *stalep = true;
            break;
        case PART_FAILED:
            applied[p.sh[j]] = true;
            if (!failed)
                add_error(m, i, code, reply_errmsg(&p.rs[j], "write failed on a shard"));
            *errsp += !failed;
            failed = true;
            break;
        case PART_APPLIED:
            applied[p.sh[j]] = true;
            *errsp += merged_add(m, &p.rs[j], &i, 1);
            break;
        }
    }
    parts_free(&p);
    return rc;
}

int rt_write_one_shard(const rt_coll_t *c, const bson_t *cmd, bool is_update)
{
    bson_iter_t it, el;
    if (!c->sharded)
        return c->primary;
    if (!bson_iter_init_find(&it, cmd, is_update ? "updates" : "deletes") ||
        !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &el))
        return -2;
    int single = -2;
    while (bson_iter_next(&el)) {
        bson_t q, ud;
        bool multi, upsert, t[RT_MAX_SHARDS];
        sbl_err_t err = {0};
        if (!BSON_ITER_HOLDS_DOCUMENT(&el))
            return -2;
        stmt_info(&el, is_update, &q, &multi, &upsert);
        int s = -1;
        if (rt_target_read(c, &q, t, &err) == 1)
            for (int k = 0; k < RT_MAX_SHARDS; k++)
                if (t[k])
                    s = k;
        if (s < 0 || (single >= 0 && single != s))
            return -3;
        if (is_update && ((stmt_update(&el, &ud) && rt_changes_shard_key(c, &ud, &q)) ||
                          (stmt_pipeline(&el, &ud) && rt_pipeline_may_change_key(c, &ud))))
            return -3; /* statement by statement: that one is checked */
        single = s;
    }
    return single;
}

static int update_or_delete(const char *db, const bson_t *cmd, bson_t *reply, bool is_update,
                            sbl_err_t *err)
{
    const char *verb = is_update ? "update" : "delete";
    const char *arr = is_update ? "updates" : "deletes";
    char ns[400];
    if (rt_write_ns(db, cmd, verb, ns, sizeof(ns)) == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "%s needs a collection name", verb);
    void *store = NULL;
    bson_iter_t **elems = NULL;
    int n = collect(cmd, arr, &store, &elems, err);
    if (n < 0)
        return -n;
    if (is_update) {
        sbl_err_t e2 = {0};
        rt_db_primary(db, true, &e2);
    }
    bool ordered = ordered_of(cmd);
    merged_t m;
    merged_init(&m);
    int rc = 0, move_retries = 0;
    rt_coll_t *c = NULL;
    for (int attempt = 0; attempt <= RT_RETRIES; attempt++) {
        c = attempt > 0 ? rt_write_refresh(db, ns, is_update, err) : rt_coll_get(ns, false, err);
        if (c == NULL) {
            rc = err->code;
            goto out;
        }
        /* Everything for one shard: pass the command through whole. */
        int single = rt_write_one_shard(c, cmd, is_update);
        if (single < -1 || n == 0)
            break;
        int w = whole_to(single, db, cmd, c, reply, err);
        if (w <= 0) {
            rc = -w;
            goto out;
        }
        rt_coll_release(c);
        c = NULL;
    }
    if (c == NULL) {
        rc = sbl_err_set(err, SBL_E_StaleConfig, "routing for %s kept changing", ns);
        goto out;
    }
    /* Statement by statement; a multi statement's parts at once, applied[]
     * the shards that ran statement applied_for. */
    bool applied[RT_MAX_SHARDS];
    int applied_for = -1, stale_rounds = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        bson_t q;
        bool multi, upsert, t[RT_MAX_SHARDS];
        stmt_info(elems[i], is_update, &q, &multi, &upsert);
        int nt = rt_target_read(c, &q, t, err);
        if (nt < 0) {
            rc = err->code;
            break;
        }
        bson_t ud;
        bson_iter_t ci;
        bson_iter_init_find(&ci, cmd, "update");
        int from = 0;
        while (from < RT_MAX_SHARDS - 1 && !t[from])
            from++;
        bool key_upd = is_update && stmt_update(elems[i], &ud) && rt_changes_shard_key(c, &ud, &q);
        bool key_pipe =
            is_update && stmt_pipeline(elems[i], &ud) && rt_pipeline_may_change_key(c, &ud);
        const char *msg = NULL;
        int code = key_upd ? rt_key_change(c, &ud, &q, multi, &msg) : 0;
        if (code != 0) {
            add_error(&m, i, code, msg);
            if (ordered)
                break;
            continue;
        }
        /* A retryable write or a transaction may move the document
         * (rt_move.c); a retry of a retryable write's statement that did is
         * answered its first result. */
        bool may_move = (key_upd || key_pipe) && n == 1 && nt == 1 && !multi &&
                        rt_sess_retryable() && rt_filter_has_full_key(c, &q);
        if (may_move && !rt_sess_in_txn()) {
            bson_t res;
            bool found;
            rc = rt_move_recorded(from, i, &res, &found, err);
            if (rc == 0 && found)
                fold_moved(&m, i, &res);
            bson_destroy(&res);
            if (rc != 0)
                break;
            if (found)
                continue;
        }
        if (nt != 1 && !multi && upsert) {
            add_error(&m, i, SBL_E_ShardKeyNotFound, "Failed to target upsert by query :: "
                      "could not extract exact shard key");
            if (ordered)
                break;
            continue;
        }
        if (multi && !key_upd && !key_pipe && !rt_sess_in_txn() && (nt > 1 || applied_for == i)) {
            if (applied_for != i) {
                memset(applied, 0, sizeof(applied));
                applied_for = i;
                stale_rounds = 0;
            }
            int errs = 0;
            bool stale = false;
            rc = stmt_parallel(db, cmd, arr, elems, i, c, t, stale_rounds < RT_RETRIES, applied, &m,
                               &errs, &stale, err);
            if (rc == 0 && stale) {
                stale_rounds++;
                rt_coll_release(c);
                c = rt_write_refresh(db, ns, is_update, err);
                if (c == NULL) {
                    rc = err->code;
                    break;
                }
                i--; /* the shards that did not apply it, by the refreshed table */
                continue;
            }
            if (ordered && errs > 0)
                break;
            continue;
        }
        int errs = 0;
        bool matched = false, stale = false;
        for (int s = 0; s < RT_MAX_SHARDS && !matched && rc == 0; s++) {
            if (!t[s])
                continue;
            bson_t sub = BSON_INITIALIZER, r;
            int one = i;
            build_sub(cmd, arr, elems, &one, 1, c, s, &sub);
            rc = rt_run(s, db, &sub, &r, err);
            bson_destroy(&sub);
            if (rc != 0)
                break;
            int code = rt_reply_code(&r);
            if (rt_stale_code(code)) {
                stale = true;
                bson_destroy(&r);
                break;
            }
            if (code != 0) {
                add_error(&m, i, code, reply_errmsg(&r, "write failed on a shard"));
                errs++;
                bson_destroy(&r);
                break;
            }
            bson_t we;
            if ((key_upd || key_pipe) &&
                first_write_error(&r, &we) == SBL_E_WouldChangeOwningShard) {
                const char *msg = NULL;
                int mc = 0;
                if (n > 1) { /* mongos's rule; in a transaction, the command's error */
                    mc = SBL_E_InvalidOptions;
                    msg = BATCH_OF_ONE;
                } else if (may_move) {
                    mc = moved(db, bson_iter_utf8(&ci, NULL), cmd, c, s, i, &we, &m, err);
                } else if (key_pipe) {
                    mc = rt_key_rules(c, &q, multi, &msg);
                }
                /* again: the routing, or the document since the shard answered,
                 * changed (a few times at most) */
                bool again = rt_stale_code(mc) ||
                             (mc == SBL_E_WriteConflict && rt_move_again(&move_retries));
                if (again || mc == SBL_E_HostUnreachable || (n > 1 && rt_sess_in_txn())) {
                    stale = again;
                    rc = stale ? 0 : msg != NULL ? sbl_err_set(err, mc, "%s", msg) : mc;
                    bson_destroy(&r);
                    break;
                }
                if (may_move || mc != 0) {
                    if (mc != 0)
                        add_error(&m, i, mc, msg ? msg : err->msg);
                    errs += mc != 0;
                    matched = true;
                    bson_destroy(&r);
                    continue;
                }
            }
            int64_t before = m.n;
            errs += merged_add(&m, &r, &one, 1);
            /* a single-document statement stops at the first shard that matched */
            matched = !multi && (m.n > before || errs > 0);
            bson_destroy(&r);
        }
        if (stale) {
            rt_coll_release(c);
            c = rt_write_refresh(db, ns, is_update, err);
            if (c == NULL) {
                rc = err->code;
                break;
            }
            i--; /* this statement again, against the refreshed table */
            continue;
        }
        if (ordered && errs > 0)
            break;
    }
    if (rc == 0)
        merged_reply(&m, reply, is_update);
out:
    rt_coll_release(c);
    merged_free(&m);
    free(store);
    free(elems);
    return rc;
}

int rt_update(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    return update_or_delete(db, cmd, reply, true, err);
}

int rt_delete(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    return update_or_delete(db, cmd, reply, false, err);
}
