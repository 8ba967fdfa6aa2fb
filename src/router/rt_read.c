/*
 * rt_read.c: count, distinct and aggregate through the router.  A command
 * the filter narrows to one shard (or on an unsharded collection) is passed
 * through whole; across shards, count sums the shards' counts and applies
 * skip and limit to the sum, distinct unions and deduplicates their values,
 * and aggregate runs the pipeline on every shard and merges: streaming
 * stages with an optional final $sort/$skip/$limit merge as a find does, a
 * final $group of $sum/$min/$max accumulators or a final $count merges
 * their partial results (the shard part and the merge part); any other
 * pipeline is split by rt_agg.c, whose merger runs the rest here.  And a
 * find sorted by a text score across shards, run as the pipeline it stands
 * for (rt_agg_find_by_meta).
 */
#include "router/router_int.h"

#include "doc/doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void copy_reply(const bson_t *r, bson_t *out)
{
    bson_copy_to_excluding_noinit(r, out, "$clusterTime", "operationTime", NULL);
}

/* Send cmd (minus strip fields, plus the shard's version) to shard s.
 * Returns 0 with *r filled (the caller destroys it), or an error. */
static int send_versioned(int s, const char *db, const bson_t *cmd, const char *const *strip,
                          const rt_coll_t *c, bson_t *r, sbl_err_t *err)
{
    bson_t fwd = BSON_INITIALIZER;
    rt_copy_cmd(cmd, &fwd, strip);
    if (s >= 0)
        rt_append_version(&fwd, c, s);
    int rc = rt_run(s, db, &fwd, r, err);
    bson_destroy(&fwd);
    return rc;
}

static const char *coll_name(const bson_t *cmd, const char *k)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, cmd, k) && BSON_ITER_HOLDS_UTF8(&it))
        return bson_iter_utf8(&it, NULL);
    return NULL;
}

int rt_count(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *coll = coll_name(cmd, "count");
    if (coll == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "count needs a collection name");
    char ns[400];
    snprintf(ns, sizeof(ns), "%s.%s", db, coll);
    bson_t query = BSON_INITIALIZER;
    int64_t limit = 0, skip = 0;
    bson_iter_t it;
    if (bson_iter_init_find(&it, cmd, "query") && BSON_ITER_HOLDS_DOCUMENT(&it))
        sbl_iter_doc(&it, &query);
    if (bson_iter_init_find(&it, cmd, "limit") && BSON_ITER_HOLDS_NUMBER(&it))
        limit = llabs(bson_iter_as_int64(&it));
    if (bson_iter_init_find(&it, cmd, "skip") && BSON_ITER_HOLDS_NUMBER(&it))
        skip = bson_iter_as_int64(&it);
    for (int attempt = 0; attempt <= RT_RETRIES; attempt++) {
        rt_coll_t *c = rt_coll_get(ns, attempt > 0, err);
        if (c == NULL)
            return err->code;
        bool t[RT_MAX_SHARDS];
        int nt = rt_target_read(c, &query, t, err);
        if (nt < 0) {
            rt_coll_release(c);
            return err->code;
        }
        static const char *const strip[] = {"limit", "skip", NULL};
        int64_t sum = 0;
        bool stale = false;
        int rc = 0;
        for (int s = c->primary == -1 ? -1 : 0; s < RT_MAX_SHARDS && rc == 0 && !stale; s++) {
            if (s >= 0 && !t[s])
                continue;
            bson_t r;
            rc = send_versioned(s, db, cmd, nt == 1 || s < 0 ? NULL : strip, c, &r, err);
            if (rc != 0)
                break;
            if (rt_stale_code(rt_reply_code(&r))) {
                stale = true;
            } else if (rt_reply_code(&r) != 0 || nt == 1 || s < 0) {
                copy_reply(&r, reply);
                bson_destroy(&r);
                rt_coll_release(c);
                return 0;
            } else if (bson_iter_init_find(&it, &r, "n")) {
                sum += bson_iter_as_int64(&it);
            }
            bson_destroy(&r);
            if (s < 0)
                break;
        }
        rt_coll_release(c);
        if (rc != 0)
            return rc;
        if (stale)
            continue;
        sum = sum > skip ? sum - skip : 0;
        if (limit > 0 && sum > limit)
            sum = limit;
        BSON_APPEND_INT64(reply, "n", sum);
        return 0;
    }
    return sbl_err_set(err, SBL_E_StaleConfig, "routing for %s kept changing", ns);
}

static int value_cmp(const void *a, const void *b)
{
    return sbl_value_compare((const bson_value_t *)a, (const bson_value_t *)b);
}

int rt_distinct(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *coll = coll_name(cmd, "distinct");
    if (coll == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "distinct needs a collection name");
    char ns[400];
    snprintf(ns, sizeof(ns), "%s.%s", db, coll);
    bson_t query = BSON_INITIALIZER;
    bson_iter_t it;
    if (bson_iter_init_find(&it, cmd, "query") && BSON_ITER_HOLDS_DOCUMENT(&it))
        sbl_iter_doc(&it, &query);
    for (int attempt = 0; attempt <= RT_RETRIES; attempt++) {
        rt_coll_t *c = rt_coll_get(ns, attempt > 0, err);
        if (c == NULL)
            return err->code;
        bool t[RT_MAX_SHARDS];
        int nt = rt_target_read(c, &query, t, err);
        if (nt < 0) {
            rt_coll_release(c);
            return err->code;
        }
        bson_t replies[RT_MAX_SHARDS];
        int nr = 0, rc = 0;
        bool stale = false, answered = false;
        for (int s = c->primary == -1 ? -1 : 0; s < RT_MAX_SHARDS && !stale && !answered; s++) {
            if (s >= 0 && !t[s])
                continue;
            bson_t r;
            if ((rc = send_versioned(s, db, cmd, NULL, c, &r, err)) != 0)
                break;
            if (rt_stale_code(rt_reply_code(&r))) {
                stale = true;
                bson_destroy(&r);
            } else if (rt_reply_code(&r) != 0 || nt == 1 || s < 0) {
                copy_reply(&r, reply);
                bson_destroy(&r);
                answered = true;
            } else {
                bson_steal(&replies[nr++], &r);
            }
            if (s < 0)
                break;
        }
        rt_coll_release(c);
        if (rc == 0 && !stale && !answered) {
            size_t n = 0, cap = 64;
            bson_value_t *vals = malloc(cap * sizeof(*vals));
            for (int i = 0; i < nr; i++) {
                bson_iter_t a;
                if (bson_iter_init_find(&it, &replies[i], "values") && bson_iter_recurse(&it, &a))
                    while (bson_iter_next(&a)) {
                        if (n == cap)
                            vals = realloc(vals, (cap *= 2) * sizeof(*vals));
                        vals[n++] = *bson_iter_value(&a);
                    }
            }
            qsort(vals, n, sizeof(*vals), value_cmp);
            bson_t arr;
            uint32_t k = 0;
            BSON_APPEND_ARRAY_BEGIN(reply, "values", &arr);
            for (size_t i = 0; i < n; i++) {
                if (i > 0 && sbl_value_compare(&vals[i - 1], &vals[i]) == 0)
                    continue;
                char key[16];
                const char *ks;
                bson_uint32_to_string(k++, &ks, key, sizeof(key));
                sbl_append_value(&arr, ks, -1, &vals[i]);
            }
            bson_append_array_end(reply, &arr);
            free(vals);
        }
        for (int i = 0; i < nr; i++)
            bson_destroy(&replies[i]);
        if (rc != 0 || answered || !stale)
            return rc;
    }
    return sbl_err_set(err, SBL_E_StaleConfig, "routing for %s kept changing", ns);
}

/* ---- aggregate ---- */

static bool streaming_stage(const char *name)
{
    static const char *const ok[] = {"$match", "$project", "$addFields", "$set", "$unset",
                                     "$replaceRoot", "$replaceWith", "$redact", NULL};
    for (int i = 0; ok[i]; i++)
        if (strcmp(name, ok[i]) == 0)
            return true;
    return false;
}

/* Merge a partial group result d into the groups gathered so far. */
static void group_merge(bson_t **groups, size_t *n, size_t *cap, const bson_t *spec,
                        const bson_t *d)
{
    bson_iter_t id_it;
    if (!bson_iter_init_find(&id_it, d, "_id"))
        return;
    for (size_t i = 0; i < *n; i++) {
        bson_iter_t g;
        if (!bson_iter_init_find(&g, groups[i], "_id") ||
            sbl_value_compare(bson_iter_value(&g), bson_iter_value(&id_it)) != 0)
            continue;
        /* combine field by field */
        bson_t *out = bson_new();
        bson_iter_t f;
        bson_iter_init(&f, groups[i]);
        while (bson_iter_next(&f)) {
            const char *k = bson_iter_key(&f);
            bson_iter_t o, sp, acc;
            if (strcmp(k, "_id") == 0 || !bson_iter_init_find(&o, d, k) ||
                !bson_iter_init_find(&sp, spec, k) || !bson_iter_recurse(&sp, &acc) ||
                !bson_iter_next(&acc)) {
                sbl_append_iter(out, k, -1, &f);
                continue;
            }
            const char *op = bson_iter_key(&acc);
            if (strcmp(op, "$sum") == 0) {
                if (BSON_ITER_HOLDS_INT32(&f) && BSON_ITER_HOLDS_INT32(&o) &&
                    (int64_t)bson_iter_int32(&f) + bson_iter_int32(&o) <= INT32_MAX &&
                    (int64_t)bson_iter_int32(&f) + bson_iter_int32(&o) >= INT32_MIN)
                    BSON_APPEND_INT32(out, k, bson_iter_int32(&f) + bson_iter_int32(&o));
                else if ((BSON_ITER_HOLDS_INT32(&f) || BSON_ITER_HOLDS_INT64(&f)) &&
                         (BSON_ITER_HOLDS_INT32(&o) || BSON_ITER_HOLDS_INT64(&o)))
                    BSON_APPEND_INT64(out, k, bson_iter_as_int64(&f) + bson_iter_as_int64(&o));
                else
                    BSON_APPEND_DOUBLE(out, k, bson_iter_as_double(&f) + bson_iter_as_double(&o));
            } else {
                int c = sbl_value_compare(bson_iter_value(&o), bson_iter_value(&f));
                bool take = strcmp(op, "$min") == 0 ? c < 0 : c > 0;
                sbl_append_iter(out, k, -1, take ? &o : &f);
            }
        }
        bson_destroy(groups[i]);
        groups[i] = out;
        return;
    }
    (void)cap; /* the caller grew groups to hold one more */
    groups[(*n)++] = bson_copy(d);
}

/* Whether the pipeline's first stage is $changeStream. */
static bool is_change_stream(const bson_t *cmd)
{
    bson_iter_t it, p, st;
    return bson_iter_init_find(&it, cmd, "pipeline") && BSON_ITER_HOLDS_ARRAY(&it) &&
           bson_iter_recurse(&it, &p) && bson_iter_next(&p) && BSON_ITER_HOLDS_DOCUMENT(&p) &&
           bson_iter_recurse(&p, &st) && bson_iter_next(&st) &&
           strcmp(bson_iter_key(&st), "$changeStream") == 0;
}

/* aggregate: 1 (a database-level pipeline) runs whole on the database's
 * primary shard with the database's version, as mongos sends any command
 * for an unsharded namespace there: a primary that moved (movePrimary, or a
 * dropDatabase and a new database elsewhere) answers StaleDbVersion, and
 * the router forgets the cached primary and asks again. */
static int db_aggregate(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    /* a database no shard knows: any shard answers ($documents needs none) */
    return rt_to_db_primary(db, cmd, false, true, true, reply, err);
}

int rt_aggregate(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    const char *coll = coll_name(cmd, "aggregate");
    bson_iter_t it, p;
    if (is_change_stream(cmd))
        return rt_change_stream(db, coll, cmd, reply, err);
    if (coll != NULL && bson_iter_init_find(&it, cmd, "explain") && bson_iter_as_bool(&it)) {
        /* explain: true (the form before the explain command): the explain
         * command's answer at queryPlanner verbosity, as sabled gives it */
        bson_t ex = BSON_INITIALIZER, inner;
        BSON_APPEND_DOCUMENT_BEGIN(&ex, "explain", &inner);
        bson_iter_init(&it, cmd);
        while (bson_iter_next(&it))
            if (strcmp(bson_iter_key(&it), "explain") != 0 &&
                strcmp(bson_iter_key(&it), "cursor") != 0)
                sbl_append_iter(&inner, bson_iter_key(&it), -1, &it);
        bson_append_document_end(&ex, &inner);
        BSON_APPEND_UTF8(&ex, "verbosity", "queryPlanner");
        int rc = rt_explain(db, &ex, reply, err);
        bson_destroy(&ex);
        return rc;
    }
    if (coll == NULL)
        return db_aggregate(db, cmd, reply, err);
    if (!bson_iter_init_find(&it, cmd, "pipeline") || !bson_iter_recurse(&it, &p))
        return sbl_err_set(err, SBL_E_FailedToParse, "aggregate needs a pipeline array");
    char ns[400];
    snprintf(ns, sizeof(ns), "%s.%s", db, coll);
    /* The stages' shape decides how shards' results merge. */
    bson_t first_match = BSON_INITIALIZER;
    int nstages = 0, merge = 0; /* 0 streaming, 1 group, 2 count, -1 unsupported */
    const char *bad = NULL, *count_field = NULL;
    bson_t sort = BSON_INITIALIZER, group_spec = BSON_INITIALIZER;
    bool has_sort = false;
    int64_t limit = -1, skip = 0;
    bson_iter_t st = p;
    while (bson_iter_next(&st)) {
        bson_iter_t s;
        if (!bson_iter_recurse(&st, &s) || !bson_iter_next(&s))
            continue;
        const char *name = bson_iter_key(&s);
        if (nstages == 0 && strcmp(name, "$match") == 0 && BSON_ITER_HOLDS_DOCUMENT(&s))
            sbl_iter_doc(&s, &first_match);
        nstages++;
        if (merge != 0 || has_sort || limit >= 0 || skip > 0) {
            /* after a group, count, sort, skip or limit: only limit/skip may follow a sort */
            if ((has_sort || limit >= 0 || skip > 0) && merge == 0 &&
                (strcmp(name, "$limit") == 0 || strcmp(name, "$skip") == 0)) {
                if (strcmp(name, "$limit") == 0)
                    limit = limit >= 0 && limit < bson_iter_as_int64(&s) ? limit
                                                                         : bson_iter_as_int64(&s);
                else if (limit < 0)
                    skip += bson_iter_as_int64(&s);
                else
                    bad = "$skip after $limit";
                continue;
            }
            bad = name;
            break;
        }
        if (streaming_stage(name))
            continue;
        if (strcmp(name, "$sort") == 0 && sbl_iter_doc(&s, &sort)) {
            bson_iter_t k;
            has_sort = true;
            bson_iter_init(&k, &sort);
            while (bson_iter_next(&k))
                if (!BSON_ITER_HOLDS_NUMBER(&k))
                    bad = "$sort by $meta"; /* the merger sorts by the shards' scores */
        } else if (strcmp(name, "$limit") == 0) {
            limit = bson_iter_as_int64(&s);
        } else if (strcmp(name, "$skip") == 0) {
            skip = bson_iter_as_int64(&s);
        } else if (strcmp(name, "$count") == 0 && BSON_ITER_HOLDS_UTF8(&s)) {
            merge = 2;
            count_field = bson_iter_utf8(&s, NULL);
        } else if (strcmp(name, "$group") == 0 && sbl_iter_doc(&s, &group_spec)) {
            bson_iter_t g, acc;
            bson_iter_init(&g, &group_spec);
            while (bson_iter_next(&g)) {
                if (strcmp(bson_iter_key(&g), "_id") == 0)
                    continue;
                if (!bson_iter_recurse(&g, &acc) || !bson_iter_next(&acc) ||
                    (strcmp(bson_iter_key(&acc), "$sum") != 0 &&
                     strcmp(bson_iter_key(&acc), "$min") != 0 &&
                     strcmp(bson_iter_key(&acc), "$max") != 0))
                    bad = "$group with accumulators other than $sum, $min, $max";
            }
            merge = 1;
        } else {
            bad = name;
            break;
        }
    }
    for (int attempt = 0; attempt <= RT_RETRIES; attempt++) {
        rt_coll_t *c = rt_coll_get(ns, attempt > 0, err);
        if (c == NULL)
            return err->code;
        bool t[RT_MAX_SHARDS];
        int nt = rt_target_read(c, &first_match, t, err);
        if (nt < 0) {
            rt_coll_release(c);
            return err->code;
        }
        /* the shard the pipeline goes to whole (-1: the config servers), -2: several */
        int one = c->primary == -1 || nt == 1 ? c->primary : -2;
        for (int i = 0; one != -2 && c->primary != -1 && i < RT_MAX_SHARDS; i++)
            if (t[i])
                one = i;
        /* split (rt_agg.c: the merger runs the rest) when the merges below do not
         * cover it, or another collection it reads or writes is not all on one */
        if ((one == -2 && bad != NULL) || (one >= 0 && rt_agg_elsewhere(db, cmd, one))) {
            bool stale = false;
            int rc = rt_agg_split(db, coll, cmd, c, t, reply, &stale, err);
            rt_coll_release(c);
            if (rc != 0 || !stale)
                return rc;
            continue;
        }
        if (one != -2) {
            int s = one;
            bson_t r;
            int rc = send_versioned(s, db, cmd, NULL, c, &r, err);
            rt_coll_release(c);
            if (rc != 0)
                return rc;
            if (rt_stale_code(rt_reply_code(&r))) {
                bson_destroy(&r);
                continue;
            }
            if (rt_reply_code(&r) == 0)
                rc = rt_wrap_cursor_reply(s, db, &r, reply, err);
            else
                copy_reply(&r, reply);
            bson_destroy(&r);
            return rc;
        }
        /* Every targeted shard runs the pipeline; $skip moves to the merge. */
        bson_t shard_cmd = BSON_INITIALIZER, pl, cur;
        bson_iter_init(&it, cmd);
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "pipeline") == 0 || strcmp(k, "cursor") == 0)
                continue;
            sbl_append_iter(&shard_cmd, k, -1, &it);
        }
        BSON_APPEND_ARRAY_BEGIN(&shard_cmd, "pipeline", &pl);
        st = p;
        uint32_t k = 0;
        while (bson_iter_next(&st)) {
            bson_iter_t s;
            if (!bson_iter_recurse(&st, &s) || !bson_iter_next(&s))
                continue;
            char key[16];
            const char *ks;
            if (strcmp(bson_iter_key(&s), "$skip") == 0)
                continue;
            bson_uint32_to_string(k++, &ks, key, sizeof(key));
            if (strcmp(bson_iter_key(&s), "$limit") == 0) {
                bson_t lim;
                BSON_APPEND_DOCUMENT_BEGIN(&pl, ks, &lim);
                BSON_APPEND_INT64(&lim, "$limit", limit + skip);
                bson_append_document_end(&pl, &lim);
            } else {
                sbl_append_iter(&pl, ks, -1, &st);
            }
        }
        bson_append_array_end(&shard_cmd, &pl);
        BSON_APPEND_DOCUMENT_BEGIN(&shard_cmd, "cursor", &cur);
        bson_append_document_end(&shard_cmd, &cur);
        bson_t replies[RT_MAX_SHARDS];
        int shard_of[RT_MAX_SHARDS];
        int nr = 0, rc = 0;
        bool stale = false, answered = false;
        for (int s = 0; s < RT_MAX_SHARDS && !stale && !answered; s++) {
            if (!t[s])
                continue;
            bson_t r;
            if ((rc = send_versioned(s, db, &shard_cmd, NULL, c, &r, err)) != 0)
                break;
            if (rt_stale_code(rt_reply_code(&r))) {
                stale = true;
                bson_destroy(&r);
            } else if (rt_reply_code(&r) != 0) {
                copy_reply(&r, reply);
                bson_destroy(&r);
                answered = true;
            } else {
                shard_of[nr] = s;
                bson_steal(&replies[nr++], &r);
            }
        }
        bson_destroy(&shard_cmd);
        rt_coll_release(c);
        if (rc == 0 && !stale && !answered) {
            if (merge == 0) {
                /* hand the shards' cursors to a merging find cursor */
                rc = rt_merge_cursors(db, coll, replies, shard_of, nr, has_sort ? &sort : NULL, limit,
                                      skip, reply, err);
                nr = 0; /* stolen */
            } else {
                size_t n = 0, cap = 0;
                bson_t **groups = NULL;
                int64_t total = 0;
                for (int i = 0; i < nr && rc == 0; i++) {
                    bson_t arr = BSON_INITIALIZER;
                    rc = rt_drain_cursor(&replies[i], db, coll, shard_of[i], &arr, err);
                    bson_iter_t a;
                    if (rc == 0 && bson_iter_init(&a, &arr))
                        while (bson_iter_next(&a)) {
                            bson_t d;
                            if (!sbl_iter_doc(&a, &d))
                                continue;
                            if (merge == 2) {
                                bson_iter_t f;
                                if (bson_iter_init_find(&f, &d, count_field))
                                    total += bson_iter_as_int64(&f);
                                continue;
                            }
                            if (n == cap) {
                                cap = cap ? cap * 2 : 16;
                                groups = realloc(groups, cap * sizeof(*groups));
                            }
                            group_merge(groups, &n, &cap, &group_spec, &d);
                        }
                    bson_destroy(&arr);
                }
                bson_t out = BSON_INITIALIZER;
                if (merge == 2 && total > 0) {
                    bson_t d;
                    BSON_APPEND_DOCUMENT_BEGIN(&out, "0", &d);
                    BSON_APPEND_INT32(&d, count_field, (int32_t)total);
                    bson_append_document_end(&out, &d);
                }
                for (size_t i = 0; i < n; i++) {
                    char key[16];
                    const char *ks;
                    bson_uint32_to_string((uint32_t)i, &ks, key, sizeof(key));
                    BSON_APPEND_DOCUMENT(&out, ks, groups[i]);
                    bson_destroy(groups[i]);
                }
                free(groups);
                if (rc == 0) {
                    bson_t cd;
                    char nsb[400];
                    snprintf(nsb, sizeof(nsb), "%s.%s", db, coll);
                    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cd);
                    bson_append_array(&cd, "firstBatch", -1, &out);
                    BSON_APPEND_INT64(&cd, "id", 0);
                    BSON_APPEND_UTF8(&cd, "ns", nsb);
                    bson_append_document_end(reply, &cd);
                }
                bson_destroy(&out);
            }
        }
        for (int i = 0; i < nr; i++)
            bson_destroy(&replies[i]);
        if (rc != 0 || answered || !stale)
            return rc;
    }
    return sbl_err_set(err, SBL_E_StaleConfig, "routing for %s kept changing", ns);
}

/* ---- explain ---- */

/* explain of find, count, distinct, aggregate, update, delete: each
 * targeted shard explains the inner command; the answer is mongos's shape,
 * queryPlanner.winningPlan {stage: SINGLE_SHARD | SHARD_MERGE, shards: [...]},
 * each shard's own queryPlanner (and executionStats) inside. */
int rt_explain(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it, in;
    bson_t inner;
    if (!bson_iter_init_find(&it, cmd, "explain") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !sbl_iter_doc(&it, &inner) || !bson_iter_init(&in, &inner) || !bson_iter_next(&in))
        return sbl_err_set(err, SBL_E_FailedToParse, "explain needs a command document");
    const char *verb = bson_iter_key(&in);
    if (!BSON_ITER_HOLDS_UTF8(&in))
        return sbl_err_set(err, SBL_E_InvalidNamespace, "explain: %s needs a collection name",
                           verb);
    char ns[400];
    snprintf(ns, sizeof(ns), "%s.%s", db, bson_iter_utf8(&in, NULL));
    /* the filter that targets: find/count/distinct/delete/update name it differently */
    bson_t filter = BSON_INITIALIZER;
    static const char *const fkeys[] = {"filter", "query", NULL};
    for (int i = 0; fkeys[i]; i++)
        if (bson_iter_init_find(&it, &inner, fkeys[i]) && BSON_ITER_HOLDS_DOCUMENT(&it))
            sbl_iter_doc(&it, &filter);
    if (strcmp(verb, "aggregate") == 0 && bson_iter_init(&it, &inner) &&
        bson_iter_find_descendant(&it, "pipeline.0.$match", &in) && BSON_ITER_HOLDS_DOCUMENT(&in))
        sbl_iter_doc(&in, &filter);
    for (int attempt = 0; attempt <= RT_RETRIES; attempt++) {
        rt_coll_t *c = rt_coll_get(ns, attempt > 0, err);
        if (c == NULL)
            return err->code;
        bool t[RT_MAX_SHARDS];
        int nt = rt_target_read(c, &filter, t, err);
        if (nt < 0) {
            rt_coll_release(c);
            return err->code;
        }
        int sh[RT_MAX_SHARDS], n = 0, rcs[RT_MAX_SHARDS];
        if (c->primary == -1) {
            sh[n++] = -1;
        } else {
            for (int s = 0; s < RT_MAX_SHARDS; s++)
                if (t[s])
                    sh[n++] = s;
        }
        bson_t fwd[RT_MAX_SHARDS], rs[RT_MAX_SHARDS];
        const bson_t *cmds[RT_MAX_SHARDS];
        sbl_err_t errs[RT_MAX_SHARDS];
        for (int i = 0; i < n; i++) {
            bson_t e;
            bson_init(&fwd[i]);
            BSON_APPEND_DOCUMENT_BEGIN(&fwd[i], "explain", &e);
            rt_copy_cmd(&inner, &e, NULL); /* unversioned: explain runs nothing for good */
            bson_append_document_end(&fwd[i], &e);
            bson_iter_init(&it, cmd);
            while (bson_iter_next(&it))
                if (strcmp(bson_iter_key(&it), "verbosity") == 0)
                    sbl_append_iter(&fwd[i], "verbosity", -1, &it);
            cmds[i] = &fwd[i];
            memset(&errs[i], 0, sizeof(errs[i]));
        }
        rt_run_many(n, sh, db, cmds, rs, rcs, errs);
        int rc = 0;
        bool stale = false, answered = false;
        bson_t qp, wp, arr, ex;
        bson_init(&arr);
        for (int i = 0; i < n; i++) {
            if (rc == 0 && rcs[i] != 0) {
                rc = rcs[i];
                *err = errs[i];
            } else if (rc == 0 && !answered && rt_stale_code(rt_reply_code(&rs[i]))) {
                stale = true;
            } else if (rc == 0 && !answered && rt_reply_code(&rs[i]) != 0) {
                copy_reply(&rs[i], reply);
                answered = true;
            } else if (rc == 0) {
                char key[16];
                const char *ks;
                bson_uint32_to_string((uint32_t)i, &ks, key, sizeof(key));
                BSON_APPEND_DOCUMENT_BEGIN(&arr, ks, &ex);
                BSON_APPEND_UTF8(&ex, "shardName", sh[i] >= 0 ? rt_shard_id(sh[i]) : "config");
                BSON_APPEND_UTF8(&ex, "connectionString", sh[i] >= 0 ? rt_shard_host(sh[i])
                                                                        : rt_configdb());
                bson_copy_to_excluding_noinit(&rs[i], &ex, "ok", "$clusterTime", "operationTime",
                                              "command", NULL);
                bson_append_document_end(&arr, &ex);
            }
            bson_destroy(&fwd[i]);
            bson_destroy(&rs[i]);
        }
        rt_coll_release(c);
        if (rc == 0 && !stale && !answered) {
            BSON_APPEND_DOCUMENT_BEGIN(reply, "queryPlanner", &qp);
            BSON_APPEND_INT32(&qp, "mongosPlannerVersion", 1);
            BSON_APPEND_DOCUMENT_BEGIN(&qp, "winningPlan", &wp);
            BSON_APPEND_UTF8(&wp, "stage", n == 1 || nt == 1 ? "SINGLE_SHARD" : "SHARD_MERGE");
            bson_append_array(&wp, "shards", -1, &arr);
            bson_append_document_end(&qp, &wp);
            bson_append_document_end(reply, &qp);
            if (strcmp(verb, "aggregate") == 0 && n > 1) /* how the router would cut it */
                rt_agg_explain_split(&inner, reply);
            BSON_APPEND_DOCUMENT(reply, "command", &inner);
        }
        bson_destroy(&arr);
        if (rc != 0 || answered || !stale)
            return rc;
    }
    return sbl_err_set(err, SBL_E_StaleConfig, "routing for %s kept changing", ns);
}

/* ---- a find sorted by a text score across shards --------------------------------------- */

static bool name_in(const char *name, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(name, list[i]) == 0)
            return true;
    return false;
}

/* A find projection $project reads the same way: 0/1 and {$meta} values only. */
static bool plain_projection(const bson_t *proj)
{
    bson_iter_t it, m;
    bson_iter_init(&it, proj);
    while (bson_iter_next(&it))
        if (!BSON_ITER_HOLDS_NUMBER(&it) && !BSON_ITER_HOLDS_BOOL(&it) &&
            !(BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &m) && bson_iter_next(&m) &&
              strcmp(bson_iter_key(&m), "$meta") == 0))
            return false;
    return true;
}

int rt_agg_find_by_meta(const char *db, const char *coll, const bson_t *cmd, bson_t *reply,
                        sbl_err_t *err)
{
    static const char *const moved[] = {"find", "filter", "sort", "projection", "skip", "limit",
                                        "batchSize", "noCursorTimeout", NULL};
    static const char *const refused[] = {"singleBatch", "min", "max", "returnKey",
                                          "showRecordId", "tailable", "awaitData",
                                          "oplogReplay", "allowPartialResults", NULL};
    bson_t agg = BSON_INITIALIZER, pl, st, cur, d;
    bson_iter_t it;
    uint32_t n = 0;
    bson_iter_init(&it, cmd);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if ((name_in(k, refused) && bson_iter_as_bool(&it)) ||
            (strcmp(k, "limit") == 0 && BSON_ITER_HOLDS_NUMBER(&it) &&
             bson_iter_as_int64(&it) < 0) ||
            (strcmp(k, "projection") == 0 && (!sbl_iter_doc(&it, &d) || !plain_projection(&d)))) {
            bson_destroy(&agg);
            return -1;
        }
    }
    BSON_APPEND_UTF8(&agg, "aggregate", coll);
    BSON_APPEND_ARRAY_BEGIN(&agg, "pipeline", &pl);
    static const char *const stages[][2] = {{"filter", "$match"}, {"sort", "$sort"},
                                            {"skip", "$skip"}, {"limit", "$limit"},
                                            {"projection", "$project"}};
    for (size_t i = 0; i < sizeof(stages) / sizeof(stages[0]); i++) {
        if (!bson_iter_init_find(&it, cmd, stages[i][0]) ||
            (BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) == 0) ||
            (BSON_ITER_HOLDS_DOCUMENT(&it) && sbl_iter_doc(&it, &d) && bson_empty(&d)))
            continue; /* absent, 0 or {}: no stage */
        char key[16];
        const char *ks;
        bson_uint32_to_string(n++, &ks, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(&pl, ks, &st);
        sbl_append_iter(&st, stages[i][1], -1, &it);
        bson_append_document_end(&pl, &st);
    }
    bson_append_array_end(&agg, &pl);
    BSON_APPEND_DOCUMENT_BEGIN(&agg, "cursor", &cur);
    if (bson_iter_init_find(&it, cmd, "batchSize"))
        sbl_append_iter(&cur, "batchSize", -1, &it);
    bson_append_document_end(&agg, &cur);
    bson_iter_init(&it, cmd);
    while (bson_iter_next(&it))
        if (!name_in(bson_iter_key(&it), moved) && !name_in(bson_iter_key(&it), refused))
            sbl_append_iter(&agg, bson_iter_key(&it), -1, &it);
    int rc = rt_aggregate(db, &agg, reply, err);
    bson_destroy(&agg);
    return rc;
}
