/*
 * rt_agg.c: an aggregation pipeline across shards that rt_read.c's merges
 * do not cover, split as mongos splits it.  The shards run the stages
 * before the first one that needs every document (the split point: $group,
 * $sort, $lookup, $facet, $out ...); the router gathers what they return and
 * runs the rest with the server's own aggregation engine (src/agg), which
 * reads other collections ($lookup, $graphLookup, $unionWith) through the
 * router's find and writes $out / $merge through the target's primary shard,
 * or a $merge into a sharded collection through the router's own writes
 * (sbl_agg_remote_t).  Some split points run partly on the shards: a $group
 * (partial_group's rewrite of combining accumulators, else merged_group's
 * partial states; also the $group a $bucket or $sortByCount stands for),
 * $sample (split_sample), $sort and $limit.
 *
 * What must stay true: the merger never touches local storage: it runs
 * only the stages of merger_stages, and none that reads a server's own
 * state (local_stages) at any depth; the shards' part ends where rerunning
 * the merger's first stage over their union gives the answer ($sort and
 * $limit run on both sides, a $sort's later $skip/$limit bound the shards).
 */
#include "router/router_int.h"

#include "agg/agg.h"
#include "common/clock.h"
#include "doc/doc.h"
#include "expr/expr.h"
#include "query/query.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUT_BATCH_BYTES (8 * 1024 * 1024) /* $out / $merge documents per command */

static const char *const shard_stages[] = {"$match", "$project", "$addFields", "$set", "$unset",
                                           "$replaceRoot", "$replaceWith", "$redact", "$unwind",
                                           NULL};
static const char *const merger_stages[] = {
    "$match", "$project", "$addFields", "$set", "$unset", "$replaceRoot", "$replaceWith",
    "$redact", "$unwind", "$group", "$sort", "$limit", "$skip", "$count", "$lookup", "$facet",
    "$bucket", "$bucketAuto", "$sortByCount", "$sample", "$out", "$merge", "$unionWith",
    "$graphLookup", "$setWindowFields", "$densify", "$fill", NULL};
/* Stages that read a server's own state: never at the merger, nested or not. */
static const char *const local_stages[] = {"$collStats", "$indexStats", "$listSessions",
                                           "$listLocalSessions", "$currentOp", "$changeStream",
                                           "$planCacheStats", NULL};

static bool in_list(const char *name, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(name, list[i]) == 0)
            return true;
    return false;
}

/* The first key of local_stages anywhere in doc, or NULL. */
static const char *local_stage(const bson_t *doc, int depth)
{
    bson_iter_t it;
    if (depth > 100 || !bson_iter_init(&it, doc))
        return NULL;
    while (bson_iter_next(&it)) {
        bson_t sub;
        if (in_list(bson_iter_key(&it), local_stages))
            return bson_iter_key(&it);
        const char *n = sbl_iter_doc(&it, &sub) || sbl_iter_array(&it, &sub)
                            ? local_stage(&sub, depth + 1)
                            : NULL;
        if (n != NULL)
            return n;
    }
    return NULL;
}

static void append_stage(bson_t *arr, uint32_t *n, const bson_iter_t *st)
{
    char key[16];
    const char *ks;
    bson_uint32_to_string((*n)++, &ks, key, sizeof(key));
    sbl_append_iter(arr, ks, -1, st);
}

/* {name: {field: value}} appended to arr as its next stage. */
static void append_stage_i64(bson_t *arr, uint32_t *n, const char *name, const char *field,
                             int64_t value)
{
    char key[16];
    const char *ks;
    bson_t st, spec;
    bson_uint32_to_string((*n)++, &ks, key, sizeof(key));
    BSON_APPEND_DOCUMENT_BEGIN(arr, ks, &st);
    if (field == NULL) {
        BSON_APPEND_INT64(&st, name, value);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(&st, name, &spec);
        BSON_APPEND_INT64(&spec, field, value);
        bson_append_document_end(&st, &spec);
    }
    bson_append_document_end(arr, &st);
}

/* Append {name: doc} to arr as its next stage. */
static void append_stage_doc(bson_t *arr, uint32_t *n, const char *name, const bson_t *doc)
{
    char key[16];
    const char *ks;
    bson_t st;
    bson_uint32_to_string((*n)++, &ks, key, sizeof(key));
    BSON_APPEND_DOCUMENT_BEGIN(arr, ks, &st);
    BSON_APPEND_DOCUMENT(&st, name, doc);
    bson_append_document_end(arr, &st);
}

/* {op: ["$" + f, ...]}-like helpers of the merger's stages. */
static void append_field_ref(bson_t *d, const char *k, const char *f)
{
    char ref[300];
    snprintf(ref, sizeof(ref), "$%s", f);
    BSON_APPEND_UTF8(d, k, ref);
}

/* {op: "$f"} under key f of d. */
static void append_acc_of(bson_t *d, const char *f, const char *op)
{
    bson_t a;
    BSON_APPEND_DOCUMENT_BEGIN(d, f, &a);
    append_field_ref(&a, op, f);
    bson_append_document_end(d, &a);
}

/* f: {$reduce: {input: "$f", initialValue: [], in: {op: ["$$value", "$$this"]}}} */
static void append_flatten(bson_t *d, const char *f, const char *op)
{
    bson_t r, spec, init, in, args;
    BSON_APPEND_DOCUMENT_BEGIN(d, f, &r);
    BSON_APPEND_DOCUMENT_BEGIN(&r, "$reduce", &spec);
    append_field_ref(&spec, "input", f);
    BSON_APPEND_ARRAY_BEGIN(&spec, "initialValue", &init);
    bson_append_array_end(&spec, &init);
    BSON_APPEND_DOCUMENT_BEGIN(&spec, "in", &in);
    BSON_APPEND_ARRAY_BEGIN(&in, op, &args);
    BSON_APPEND_UTF8(&args, "0", "$$value");
    BSON_APPEND_UTF8(&args, "1", "$$this");
    bson_append_array_end(&in, &args);
    bson_append_document_end(&spec, &in);
    bson_append_document_end(&r, &spec);
    bson_append_document_end(d, &r);
}

/* name: {$sum: {$cond: [{$isNumber: e}, 1, 0]}} (acc: on the accumulator's e). */
static void append_count_numbers(bson_t *d, const char *name, const bson_iter_t *acc)
{
    bson_t a, cnt, arr, isnum;
    BSON_APPEND_DOCUMENT_BEGIN(d, name, &a);
    BSON_APPEND_DOCUMENT_BEGIN(&a, "$sum", &cnt);
    BSON_APPEND_ARRAY_BEGIN(&cnt, "$cond", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &isnum);
    sbl_append_iter(&isnum, "$isNumber", -1, acc);
    bson_append_document_end(&arr, &isnum);
    BSON_APPEND_INT32(&arr, "1", 1);
    BSON_APPEND_INT32(&arr, "2", 0);
    bson_append_array_end(&cnt, &arr);
    bson_append_document_end(&a, &cnt);
    bson_append_document_end(d, &a);
}

/*
 * $stdDevPop / $stdDevSamp (samp) of field f across shards: each shard
 * groups its count of numbers, their sum and their population deviation;
 * the merger gathers the three per shard and combines them (the parallel
 * variance of Chan et al.: M2 = sum of n_i d_i^2 + n_i (mean_i - mean)^2),
 * null below 1 number (2 for samp), as mongod.  f holds no quote or
 * backslash (it goes into JSON).
 */
static bool stddev_parts(const char *f, bool samp, const bson_iter_t *acc, bson_t *sg,
                         bson_t *mg, bson_t *fin)
{
    char n[256], sum[256], json[2048];
    bson_t a, d;
    snprintf(n, sizeof(n), "\x7fn_%s", f);
    snprintf(sum, sizeof(sum), "\x7fs_%s", f);
    BSON_APPEND_DOCUMENT_BEGIN(sg, f, &a);
    sbl_append_iter(&a, "$stdDevPop", -1, acc);
    bson_append_document_end(sg, &a);
    append_count_numbers(sg, n, acc);
    BSON_APPEND_DOCUMENT_BEGIN(sg, sum, &a);
    sbl_append_iter(&a, "$sum", -1, acc);
    bson_append_document_end(sg, &a);
    snprintf(json, sizeof(json), "{\"$push\": {\"n\": \"$%s\", \"s\": \"$%s\", \"d\": \"$%s\"}}",
             n, sum, f);
    if (!bson_init_from_json(&d, json, -1, NULL))
        return false;
    BSON_APPEND_DOCUMENT(mg, f, &d);
    bson_destroy(&d);
    int k = samp ? 1 : 0;
    snprintf(json, sizeof(json),
             "{\"$let\": {\"vars\": {\"cnt\": {\"$sum\": \"$%s.n\"}, \"tot\": {\"$sum\": \"$%s.s\"}}, "
             "\"in\": {\"$cond\": [{\"$lte\": [\"$$cnt\", %d]}, null, {\"$toDouble\": {\"$sqrt\": "
             "{\"$divide\": [{\"$sum\": {\"$map\": {\"input\": \"$%s\", \"as\": \"p\", \"in\": "
             "{\"$cond\": [{\"$eq\": [\"$$p.n\", 0]}, 0, {\"$add\": ["
             "{\"$multiply\": [\"$$p.d\", \"$$p.d\", \"$$p.n\"]}, {\"$multiply\": [\"$$p.n\", "
             "{\"$pow\": [{\"$subtract\": [{\"$divide\": [\"$$p.s\", \"$$p.n\"]}, "
             "{\"$divide\": [\"$$tot\", \"$$cnt\"]}]}, 2]}]}]}]}}}}, "
             "{\"$subtract\": [\"$$cnt\", %d]}]}}}]}}}",
             f, f, k, f, k);
    if (!bson_init_from_json(&d, json, -1, NULL))
        return false;
    BSON_APPEND_DOCUMENT(fin, f, &d);
    bson_destroy(&d);
    return true;
}

/*
 * A $group whose accumulators combine (mongod's partial and final groups):
 * the shards group their documents, the merger groups the groups by _id.
 * $sum, $min, $max, $first, $last and $mergeObjects apply again to the
 * partial values, $count becomes a $sum, $push and $addToSet gather the
 * shards' arrays and flatten them, $avg sums the values and counts the
 * numeric ones (a hidden field, removed after the division), $stdDevPop
 * and $stdDevSamp combine each shard's count, sum and deviation
 * (stddev_parts).  False for any other accumulator (merged_group splits
 * those).
 */
static bool partial_group(const bson_t *spec, bson_t *shard_pl, uint32_t *ns, bson_t *merge_pl,
                          uint32_t *nm)
{
    static const char *const same_op[] = {"$sum", "$min", "$max", "$first", "$last",
                                          "$mergeObjects", NULL};
    bson_iter_t it, acc;
    bson_t sg = BSON_INITIALIZER, mg = BSON_INITIALIZER, fin = BSON_INITIALIZER,
           unset = BSON_INITIALIZER;
    uint32_t nunset = 0;
    bool ok = true;
    BSON_APPEND_UTF8(&mg, "_id", "$_id");
    bson_iter_init(&it, spec);
    while (ok && bson_iter_next(&it)) {
        const char *f = bson_iter_key(&it);
        if (strcmp(f, "_id") == 0) {
            sbl_append_iter(&sg, f, -1, &it);
            continue;
        }
        if (!bson_iter_recurse(&it, &acc) || !bson_iter_next(&acc) || strlen(f) > 200) {
            ok = false;
            break;
        }
        const char *op = bson_iter_key(&acc);
        bson_t a, cond, arr;
        if (in_list(op, same_op)) {
            sbl_append_iter(&sg, f, -1, &it);
            append_acc_of(&mg, f, op);
        } else if (strcmp(op, "$count") == 0) {
            BSON_APPEND_DOCUMENT_BEGIN(&sg, f, &a);
            BSON_APPEND_INT32(&a, "$sum", 1);
            bson_append_document_end(&sg, &a);
            append_acc_of(&mg, f, "$sum");
        } else if (strcmp(op, "$push") == 0 || strcmp(op, "$addToSet") == 0) {
            sbl_append_iter(&sg, f, -1, &it);
            append_acc_of(&mg, f, "$push");
            append_flatten(&fin, f, op[1] == 'p' ? "$concatArrays" : "$setUnion");
        } else if (strcmp(op, "$avg") == 0) {
            char n[256], ref[300], nref[300];
            snprintf(n, sizeof(n), "\x7fn_%s", f); /* its count of numbers: never shown */
            BSON_APPEND_DOCUMENT_BEGIN(&sg, f, &a);
            sbl_append_iter(&a, "$sum", -1, &acc);
            bson_append_document_end(&sg, &a);
            append_count_numbers(&sg, n, &acc);
            append_acc_of(&mg, f, "$sum");
            append_acc_of(&mg, n, "$sum");
            /* f: {$cond: [{$eq: ["$n", 0]}, null, {$divide: ["$f", "$n"]}]} */
            snprintf(ref, sizeof(ref), "$%s", f);
            snprintf(nref, sizeof(nref), "$%s", n);
            bson_t c0, eq, div;
            BSON_APPEND_DOCUMENT_BEGIN(&fin, f, &cond);
            BSON_APPEND_ARRAY_BEGIN(&cond, "$cond", &c0);
            BSON_APPEND_DOCUMENT_BEGIN(&c0, "0", &eq);
            BSON_APPEND_ARRAY_BEGIN(&eq, "$eq", &arr);
            BSON_APPEND_UTF8(&arr, "0", nref);
            BSON_APPEND_INT32(&arr, "1", 0);
            bson_append_array_end(&eq, &arr);
            bson_append_document_end(&c0, &eq);
            BSON_APPEND_NULL(&c0, "1");
            BSON_APPEND_DOCUMENT_BEGIN(&c0, "2", &div);
            BSON_APPEND_ARRAY_BEGIN(&div, "$divide", &arr);
            BSON_APPEND_UTF8(&arr, "0", ref);
            BSON_APPEND_UTF8(&arr, "1", nref);
            bson_append_array_end(&div, &arr);
            bson_append_document_end(&c0, &div);
            bson_append_array_end(&cond, &c0);
            bson_append_document_end(&fin, &cond);
            char key[16];
            const char *ks;
            bson_uint32_to_string(nunset++, &ks, key, sizeof(key));
            BSON_APPEND_UTF8(&unset, ks, n);
        } else if ((strcmp(op, "$stdDevPop") == 0 || strcmp(op, "$stdDevSamp") == 0) &&
                   strpbrk(f, "\"\\") == NULL) {
            ok = stddev_parts(f, op[7] == 'S', &acc, &sg, &mg, &fin);
        } else {
            ok = false;
        }
    }
    if (ok) {
        append_stage_doc(shard_pl, ns, "$group", &sg);
        append_stage_doc(merge_pl, nm, "$group", &mg);
        if (!bson_empty(&fin))
            append_stage_doc(merge_pl, nm, "$addFields", &fin);
        if (nunset > 0) {
            char key[16];
            const char *ks;
            bson_t st;
            bson_uint32_to_string((*nm)++, &ks, key, sizeof(key));
            BSON_APPEND_DOCUMENT_BEGIN(merge_pl, ks, &st);
            BSON_APPEND_ARRAY(&st, "$unset", &unset);
            bson_append_document_end(merge_pl, &st);
        }
    }
    bson_destroy(&sg);
    bson_destroy(&mg);
    bson_destroy(&fin);
    bson_destroy(&unset);
    return ok;
}

/*
 * Any other $group (the N accumulators, $accumulator) as mongos splits it:
 * the shards' group ends in partial states ($willBeMerged: each accumulator's
 * state, not its result: a $minN's n smallest, an $accumulator's state before
 * finalize), the merger's ($doingMerge) groups them by _id and combines the
 * states (a $firstN's lists in the shards' order, $accumulator's merge
 * function) before it gives the results (finalize runs there).  False for a
 * spec that is no document's.
 */
static bool merged_group(const bson_t *spec, bson_t *shard_pl, uint32_t *ns, bson_t *merge_pl,
                         uint32_t *nm)
{
    bson_iter_t it;
    bson_t sg = BSON_INITIALIZER, mg = BSON_INITIALIZER;
    if (!bson_iter_init(&it, spec))
        return false;
    BSON_APPEND_UTF8(&mg, "_id", "$_id");
    while (bson_iter_next(&it)) {
        const char *f = bson_iter_key(&it);
        if (strcmp(f, "$willBeMerged") == 0 || strcmp(f, "$doingMerge") == 0)
            continue;
        sbl_append_iter(&sg, f, -1, &it);
        if (strcmp(f, "_id") != 0)
            sbl_append_iter(&mg, f, -1, &it);
    }
    BSON_APPEND_BOOL(&sg, "$willBeMerged", true);
    BSON_APPEND_BOOL(&mg, "$doingMerge", true);
    append_stage_doc(shard_pl, ns, "$group", &sg);
    append_stage_doc(merge_pl, nm, "$group", &mg);
    bson_destroy(&sg);
    bson_destroy(&mg);
    return true;
}

#define SAMPLE_KEY "\x7fsample" /* a document's random draw: never shown */

/* $sample {size: n} as mongod splits it: each shard draws a random number
 * per document and keeps its n smallest, the merger the n smallest of
 * theirs (a uniform sample of the union, n documents from the shards). */
static bool split_sample(const bson_iter_t *s, bson_t *shard_pl, uint32_t *ns, bson_t *merge_pl,
                         uint32_t *nm)
{
    bson_iter_t f;
    if (!BSON_ITER_HOLDS_DOCUMENT(s) || !bson_iter_recurse(s, &f) || !bson_iter_find(&f, "size") ||
        !BSON_ITER_HOLDS_NUMBER(&f) || bson_iter_as_int64(&f) <= 0)
        return false; /* the merger's $sample reports it */
    int64_t n = bson_iter_as_int64(&f);
    bson_t add = BSON_INITIALIZER, rnd, empty;
    BSON_APPEND_DOCUMENT_BEGIN(&add, SAMPLE_KEY, &rnd);
    BSON_APPEND_DOCUMENT_BEGIN(&rnd, "$rand", &empty);
    bson_append_document_end(&rnd, &empty);
    bson_append_document_end(&add, &rnd);
    append_stage_doc(shard_pl, ns, "$addFields", &add);
    bson_destroy(&add);
    append_stage_i64(shard_pl, ns, "$sort", SAMPLE_KEY, 1);
    append_stage_i64(shard_pl, ns, "$limit", NULL, n);
    append_stage_i64(merge_pl, nm, "$sort", SAMPLE_KEY, 1);
    append_stage_i64(merge_pl, nm, "$limit", NULL, n);
    char key[16];
    const char *ks;
    bson_t st;
    bson_uint32_to_string((*nm)++, &ks, key, sizeof(key));
    BSON_APPEND_DOCUMENT_BEGIN(merge_pl, ks, &st);
    BSON_APPEND_UTF8(&st, "$unset", SAMPLE_KEY);
    bson_append_document_end(merge_pl, &st);
    return true;
}

/*
 * $bucket and $sortByCount as mongos splits them: the $group they stand for
 * (src/agg's sbl_agg_bucket_group / sbl_agg_sort_by_count_group) split as
 * any $group, the merger's $sort after it ({_id: 1}: $bucket; {count: -1}:
 * $sortByCount).  False for a spec the stage refuses: left whole to the
 * merger, whose stage gives its error.  coll: the command's collation.
 */
static bool split_group_shape(const char *name, const bson_iter_t *s, const sbl_collation_t *coll,
                              bson_t *shard_pl, uint32_t *ns, bson_t *merge_pl, uint32_t *nm)
{
    bson_t group, spec;
    bson_value_t expr;
    sbl_err_t err = {0};
    int rc;
    bool bucket = strcmp(name, "$bucket") == 0;
    if (bucket) {
        if (!sbl_iter_doc(s, &spec))
            return false;
        rc = sbl_agg_bucket_group(&spec, coll, &group, &err);
    } else {
        sbl_iter_value(s, &expr);
        rc = sbl_agg_sort_by_count_group(&expr, &group, &err);
    }
    bool ok = rc == 0 && (partial_group(&group, shard_pl, ns, merge_pl, nm) ||
                          merged_group(&group, shard_pl, ns, merge_pl, nm));
    bson_destroy(&group);
    if (ok)
        append_stage_i64(merge_pl, nm, "$sort", bucket ? "_id" : "count", bucket ? 1 : -1);
    return ok;
}

/*
 * Split the pipeline (an iterator on its array) into the shards' stages
 * and the merger's.  A first $geoNear runs alone on the shards and the
 * merger sorts by its distanceField; a split at $sort or $limit runs that
 * stage on both sides, at a $group of partial_group's accumulators its
 * partial and final groups (also for the $group of a $bucket or a
 * $sortByCount), at a $sample split_sample's draws.  238 NotImplemented
 * for a stage the merger cannot run.  coll: the command's collation.
 */
static int split_pipeline(const bson_iter_t *pipeline, const sbl_collation_t *coll,
                          bson_t *shard_pl, bson_t *merge_pl, sbl_err_t *err)
{
    bson_iter_t st = *pipeline;
    uint32_t ns = 0, nm = 0, i = 0;
    int phase = 0; /* 0: the shards'; 1: the merger's after a $sort; 2: the merger's */
    int64_t skip = 0;
    for (; bson_iter_next(&st); i++) {
        bson_iter_t s;
        bson_t stage;
        if (!BSON_ITER_HOLDS_DOCUMENT(&st) || !sbl_iter_doc(&st, &stage) ||
            !bson_iter_recurse(&st, &s) || !bson_iter_next(&s))
            return sbl_err_set(err, SBL_E_TypeMismatch,
                               "Each element of the 'pipeline' array must be an object");
        const char *name = bson_iter_key(&s);
        if (phase == 0 && in_list(name, shard_stages)) {
            append_stage(shard_pl, &ns, &st);
            continue;
        }
        if (phase == 0 && i == 0 && strcmp(name, "$geoNear") == 0) {
            bson_iter_t df;
            append_stage(shard_pl, &ns, &st);
            if (bson_iter_recurse(&s, &df) && bson_iter_find(&df, "distanceField") &&
                BSON_ITER_HOLDS_UTF8(&df))
                append_stage_i64(merge_pl, &nm, "$sort", bson_iter_utf8(&df, NULL), 1);
            phase = 2;
            continue;
        }
        bson_t spec;
        if (phase == 0 && ((strcmp(name, "$group") == 0 && sbl_iter_doc(&s, &spec) &&
                            (partial_group(&spec, shard_pl, &ns, merge_pl, &nm) ||
                             merged_group(&spec, shard_pl, &ns, merge_pl, &nm))) ||
                           ((strcmp(name, "$bucket") == 0 || strcmp(name, "$sortByCount") == 0) &&
                            split_group_shape(name, &s, coll, shard_pl, &ns, merge_pl, &nm)) ||
                           (strcmp(name, "$sample") == 0 &&
                            split_sample(&s, shard_pl, &ns, merge_pl, &nm)))) {
            phase = 2;
            continue;
        }
        const char *local = local_stage(&stage, 0);
        if (!in_list(name, merger_stages) || local != NULL)
            return sbl_err_set(err, SBL_E_NotImplemented,
                               "sable-router cannot yet run %s after the split point of a "
                               "pipeline over several shards; see docs/sharding.md",
                               local != NULL ? local : name);
        append_stage(merge_pl, &nm, &st);
        bool num = BSON_ITER_HOLDS_NUMBER(&s) && bson_iter_as_int64(&s) >= 0;
        if (phase == 0 && strcmp(name, "$sort") == 0) {
            append_stage(shard_pl, &ns, &st);
            phase = 1;
        } else if (phase == 0 && strcmp(name, "$limit") == 0) {
            append_stage(shard_pl, &ns, &st);
            phase = 2;
        } else if (phase == 1 && strcmp(name, "$skip") == 0 && num) {
            skip += bson_iter_as_int64(&s);
        } else if (phase == 1 && strcmp(name, "$limit") == 0 && num) {
            append_stage_i64(shard_pl, &ns, "$limit", NULL, skip + bson_iter_as_int64(&s));
            phase = 2;
        } else {
            phase = 2;
        }
    }
    return 0;
}

/* ---- the merger's reads and writes -------------------------------------- */

typedef struct merger {
    const char *db;
    const bson_t *cmd;       /* the client's aggregate */
    const bson_t *collation; /* its collation (NULL: none): the merger's reads use it */
    const sbl_agg_env_t *env; /* the merger's: the command's evaluated let, $$NOW */
} merger_t;

/* 0 when reply (a handler's or a shard's) is no error reply, else err set
 * to its code and message. */
static int reply_failed(const bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, reply, "ok") || bson_iter_as_double(&it) == 1.0)
        return 0;
    return sbl_err_set(err, rt_reply_code(reply), "%s",
                       bson_iter_init_find(&it, reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it)
                           ? bson_iter_utf8(&it, NULL)
                           : "command failed");
}

/* A copy of each document of reply's cursor batch pushed onto out; *idp:
 * the cursor's id (0: exhausted). */
static void take_batch(const bson_t *reply, sbl_docvec_t *out, int64_t *idp)
{
    bson_iter_t it, cur, b;
    *idp = 0;
    if (!bson_iter_init_find(&it, reply, "cursor") || !bson_iter_recurse(&it, &cur))
        return;
    while (bson_iter_next(&cur)) {
        const char *k = bson_iter_key(&cur);
        if (strcmp(k, "id") == 0) {
            *idp = bson_iter_as_int64(&cur);
        } else if ((strcmp(k, "firstBatch") == 0 || strcmp(k, "nextBatch") == 0) &&
                   bson_iter_recurse(&cur, &b)) {
            while (bson_iter_next(&b)) {
                bson_t d;
                if (sbl_iter_doc(&b, &d))
                    sbl_docvec_push(out, bson_copy(&d));
            }
        }
    }
}

/* sbl_agg_remote_t.read: a find through the router (sharded or not, views
 * resolved by the shard holding them), every batch. */
static int remote_read(void *arg, const char *ns, const bson_t *filter, sbl_docvec_t *out,
                       sbl_err_t *err)
{
    const merger_t *m = arg;
    const char *dot = strchr(ns, '.');
    char db[128];
    if (dot == NULL || dot - ns >= (ptrdiff_t)sizeof(db))
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid namespace %s", ns);
    snprintf(db, sizeof(db), "%.*s", (int)(dot - ns), ns);
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "find", dot + 1);
    if (filter != NULL)
        BSON_APPEND_DOCUMENT(&cmd, "filter", filter);
    if (m->collation != NULL)
        BSON_APPEND_DOCUMENT(&cmd, "collation", m->collation);
    bson_iter_t rc_it; /* a transaction's statements carry it through rt_sess_extra */
    if (!rt_sess_in_txn() && bson_iter_init_find(&rc_it, m->cmd, "readConcern"))
        sbl_append_iter(&cmd, "readConcern", -1, &rc_it);
    BSON_APPEND_INT64(&cmd, "batchSize", 100000);
    int rc = rt_find(db, &cmd, &reply, err);
    while (rc == 0 && (rc = reply_failed(&reply, err)) == 0) {
        int64_t id;
        take_batch(&reply, out, &id);
        if (id == 0)
            break;
        bson_reinit(&cmd);
        bson_reinit(&reply);
        BSON_APPEND_INT64(&cmd, "getMore", id);
        BSON_APPEND_UTF8(&cmd, "collection", dot + 1);
        rc = rt_get_more(db, &cmd, &reply, err);
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return rc;
}

/* The collection stage v (the stage's field) reads ($lookup, $graphLookup,
 * $unionWith) or writes ($out, $merge) into tdb and tcoll, db's when it
 * names none; false for another stage or one naming no collection. */
static bool stage_target(const char *db, const bson_iter_t *v, char *tdb, size_t dblen,
                         char *tcoll, size_t clen)
{
    const char *name = bson_iter_key(v), *field, *d = db, *c = NULL;
    bson_iter_t t = *v, f;
    if (strcmp(name, "$lookup") == 0 || strcmp(name, "$graphLookup") == 0)
        field = "from";
    else if (strcmp(name, "$merge") == 0)
        field = "into";
    else if (strcmp(name, "$unionWith") == 0 || strcmp(name, "$out") == 0)
        field = ""; /* "coll" or {db, coll} */
    else
        return false;
    if (field[0] != '\0' && BSON_ITER_HOLDS_DOCUMENT(v) && bson_iter_recurse(v, &f) &&
        bson_iter_find(&f, field))
        t = f;
    if (BSON_ITER_HOLDS_UTF8(&t)) {
        c = bson_iter_utf8(&t, NULL);
    } else if (BSON_ITER_HOLDS_DOCUMENT(&t) && bson_iter_recurse(&t, &f)) {
        while (bson_iter_next(&f)) {
            if (strcmp(bson_iter_key(&f), "db") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                d = bson_iter_utf8(&f, NULL);
            else if (strcmp(bson_iter_key(&f), "coll") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                c = bson_iter_utf8(&f, NULL);
        }
    }
    if (c == NULL || c[0] == '\0')
        return false;
    snprintf(tdb, dblen, "%s", d);
    snprintf(tcoll, clen, "%s", c);
    return true;
}

/* Whether doc (a pipeline, at any depth) reads or writes a collection that
 * is sharded, or unsharded on another shard than s (or in a database not
 * created yet). */
static bool names_elsewhere(const char *db, const bson_t *doc, int s, int depth)
{
    bson_iter_t it;
    if (depth > 100 || !bson_iter_init(&it, doc))
        return false;
    while (bson_iter_next(&it)) {
        char tdb[128], tcoll[256], ns[400];
        if (bson_iter_key(&it)[0] == '$' &&
            stage_target(db, &it, tdb, sizeof(tdb), tcoll, sizeof(tcoll))) {
            sbl_err_t e = {0};
            snprintf(ns, sizeof(ns), "%s.%s", tdb, tcoll);
            rt_coll_t *c = rt_coll_get(ns, false, &e);
            bool elsewhere = c != NULL && (c->sharded || c->primary != s || c->transient);
            rt_coll_release(c);
            if (elsewhere)
                return true;
        }
        bson_t sub;
        if ((sbl_iter_doc(&it, &sub) || sbl_iter_array(&it, &sub)) &&
            names_elsewhere(db, &sub, s, depth + 1))
            return true;
    }
    return false;
}

bool rt_agg_elsewhere(const char *db, const bson_t *cmd, int shard)
{
    bson_iter_t it;
    bson_t pipeline;
    return bson_iter_init_find(&it, cmd, "pipeline") && sbl_iter_array(&it, &pipeline) &&
           names_elsewhere(db, &pipeline, shard, 0);
}

/* ---- $merge into a sharded collection ---- */

typedef enum { WM_MERGE, WM_REPLACE, WM_KEEP, WM_FAIL, WM_PIPELINE } when_matched_t;

/* A $merge into a sharded collection, parsed. */
typedef struct merge_spec {
    char *on[32];
    size_t non;
    when_matched_t wm;
    const char *wnm;
    bson_t pipeline, let; /* whenMatched's pipeline; its let when has_let */
    bool has_let;
} merge_spec_t;

/* 0 when reply (of rt_insert / rt_update) has no error and no writeErrors,
 * else err set to the first one's code and message. */
static int write_failed(const bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it, we;
    SBL_RET(reply_failed(reply, err));
    if (!bson_iter_init(&it, reply) || !bson_iter_find_descendant(&it, "writeErrors.0", &we) ||
        !bson_iter_recurse(&we, &it))
        return 0;
    int code = SBL_E_CommandFailed;
    const char *msg = "write failed";
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "code") == 0)
            code = (int)bson_iter_as_int64(&it);
        else if (strcmp(bson_iter_key(&it), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&it))
            msg = bson_iter_utf8(&it, NULL);
    }
    return sbl_err_set(err, code, "%s", msg);
}

/* {insert: coll, documents: [doc]} or {update: coll, updates: [{q, u}]}
 * (u a replacement, or with c the pipeline doc and its constants c) through
 * the router's own write path. */
static int routed_write(const char *db, const char *coll, const bson_t *q, const bson_t *doc,
                        const bson_t *c, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, arr, st, reply = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, q == NULL ? "insert" : "update", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, q == NULL ? "documents" : "updates", &arr);
    if (q == NULL) {
        BSON_APPEND_DOCUMENT(&arr, "0", doc);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &st);
        BSON_APPEND_DOCUMENT(&st, "q", q);
        if (c != NULL) {
            BSON_APPEND_ARRAY(&st, "u", doc);
            BSON_APPEND_DOCUMENT(&st, "c", c);
        } else {
            BSON_APPEND_DOCUMENT(&st, "u", doc);
        }
        bson_append_document_end(&arr, &st);
    }
    bson_append_array_end(&cmd, &arr);
    int rc = q == NULL ? rt_insert(db, &cmd, &reply, err) : rt_update(db, &cmd, &reply, err);
    if (rc == 0)
        rc = write_failed(&reply, err);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return rc;
}

/* Top-level fields of in over base into out (initialised here): $merge's "merge". */
static void merge_top(const bson_t *base, const bson_t *in, bson_t *out)
{
    bson_iter_t it, f;
    bson_init(out);
    bson_iter_init(&it, base);
    while (bson_iter_next(&it))
        sbl_append_iter(out, bson_iter_key(&it), -1,
                        bson_iter_init_find(&f, in, bson_iter_key(&it)) ? &f : &it);
    bson_iter_init(&it, in);
    while (bson_iter_next(&it))
        if (!bson_has_field(base, bson_iter_key(&it)))
            sbl_append_iter(out, bson_iter_key(&it), -1, &it);
}

/* One source document of a $merge into sharded ns: the target document
 * matching it on the `on` fields is looked up through the router, then
 * updated by _id and shard key (or the source inserted), as sabled's
 * $merge does it locally (src/agg/agg_write.c), one document at a time. */
static int merge_one(const merger_t *m, const rt_coll_t *c, const char *tdb, const char *tcoll,
                     const merge_spec_t *ms, const bson_t *src, sbl_err_t *err)
{
    char ns[400];
    bson_t filter = BSON_INITIALIZER, vars = BSON_INITIALIZER;
    char *const *on = ms->on;
    size_t non = ms->non;
    when_matched_t wm = ms->wm;
    const char *wnm = ms->wnm;
    int rc = 0;
    if (wm == WM_PIPELINE) {
        bson_destroy(&vars);
        rc = sbl_agg_merge_vars(m->env->let, ms->has_let ? &ms->let : NULL,
                                strcmp(wnm, "insert") == 0, src, m->env, &vars, err);
        if (rc != 0)
            bson_init(&vars);
    }
    for (size_t i = 0; i < non && rc == 0; i++) {
        bson_iter_t f;
        bson_t eq;
        if (!sbl_path_get(src, on[i], &f) || BSON_ITER_HOLDS_NULL(&f) ||
            BSON_ITER_HOLDS_UNDEFINED(&f) || BSON_ITER_HOLDS_ARRAY(&f)) {
            rc = sbl_err_set(err, 51132, "$merge write error: 'on' field '%s' cannot be "
                             "missing, null, undefined or an array", on[i]);
            break;
        }
        BSON_APPEND_DOCUMENT_BEGIN(&filter, on[i], &eq);
        sbl_append_iter(&eq, "$eq", 3, &f);
        bson_append_document_end(&filter, &eq);
    }
    sbl_docvec_t found = {0};
    snprintf(ns, sizeof(ns), "%s.%s", tdb, tcoll);
    if (rc == 0)
        rc = remote_read((void *)m, ns, &filter, &found, err);
    bson_destroy(&filter);
    if (rc == 0 && found.n == 0) {
        if (strcmp(wnm, "insert") == 0) /* with a pipeline too: mongod's upsertSupplied */
            rc = routed_write(tdb, tcoll, NULL, src, NULL, err);
        else if (strcmp(wnm, "fail") == 0)
            rc = sbl_err_set(err, 13113, "$merge could not find a matching document in the "
                             "target collection for at least one document in the source "
                             "collection");
    } else if (rc == 0 && wm == WM_FAIL) {
        rc = sbl_err_set(err, SBL_E_DuplicateKey, "$merge failed due to a DuplicateKey error: "
                         "E11000 duplicate key error collection: %s", ns);
    } else if (rc == 0 && wm != WM_KEEP) {
        const bson_t *existing = found.v[0];
        bson_t next = BSON_INITIALIZER, wo_id = BSON_INITIALIZER, q = BSON_INITIALIZER;
        bson_iter_t eid;
        bson_copy_to_excluding_noinit(src, &wo_id, "_id", NULL);
        if (wm == WM_PIPELINE) {
            bson_destroy(&next);
            bson_copy_to(&ms->pipeline, &next);
        } else if (wm == WM_MERGE) {
            bson_destroy(&next);
            merge_top(existing, &wo_id, &next);
        } else if (bson_iter_init_find(&eid, existing, "_id")) {
            sbl_append_iter(&next, "_id", 3, &eid); /* replace: the target keeps its _id */
            bson_concat(&next, &wo_id);
        }
        /* the target by _id and its shard key (the router targets one shard) */
        bson_iter_t k, v;
        if (bson_iter_init_find(&eid, existing, "_id"))
            sbl_append_iter(&q, "_id", 3, &eid);
        bson_iter_init(&k, c->key);
        while (bson_iter_next(&k))
            if (strcmp(bson_iter_key(&k), "_id") != 0 &&
                sbl_path_get(existing, bson_iter_key(&k), &v))
                sbl_append_iter(&q, bson_iter_key(&k), -1, &v);
        rc = routed_write(tdb, tcoll, &q, &next, wm == WM_PIPELINE ? &vars : NULL, err);
        bson_destroy(&next);
        bson_destroy(&wo_id);
        bson_destroy(&q);
    }
    sbl_docvec_clear(&found);
    bson_destroy(&vars);
    return rc;
}

/* $merge (st: the stage's field) into the sharded tdb.tcoll (c) over dv;
 * `on` is by default _id and the shard key, as mongod's.  A whenMatched
 * pipeline runs as a pipeline update of the target by _id and shard key,
 * its variables ($$new by default, else let's) as the statement's c. */
static int merge_sharded(const merger_t *m, const rt_coll_t *c, const bson_iter_t *st,
                         const char *tdb, const char *tcoll, sbl_docvec_t *dv, sbl_err_t *err)
{
    merge_spec_t ms = {.wm = WM_MERGE, .wnm = "insert"};
    bson_iter_t f, a;
    if (BSON_ITER_HOLDS_DOCUMENT(st) && bson_iter_recurse(st, &f)) {
        while (bson_iter_next(&f)) {
            const char *k = bson_iter_key(&f);
            if (strcmp(k, "on") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                ms.on[ms.non++] = (char *)bson_iter_utf8(&f, NULL);
            } else if (strcmp(k, "on") == 0 && bson_iter_recurse(&f, &a)) {
                while (bson_iter_next(&a) && ms.non < 32)
                    if (BSON_ITER_HOLDS_UTF8(&a))
                        ms.on[ms.non++] = (char *)bson_iter_utf8(&a, NULL);
            } else if (strcmp(k, "whenMatched") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                const char *w = bson_iter_utf8(&f, NULL);
                ms.wm = strcmp(w, "replace") == 0        ? WM_REPLACE
                        : strcmp(w, "keepExisting") == 0 ? WM_KEEP
                        : strcmp(w, "fail") == 0         ? WM_FAIL
                                                         : WM_MERGE;
                if (ms.wm == WM_MERGE && strcmp(w, "merge") != 0)
                    return sbl_err_set(err, SBL_E_BadValue, "Enumeration value '%s' for field "
                                       "'whenMatched' is not a valid value.", w);
            } else if (strcmp(k, "whenMatched") == 0 && sbl_iter_array(&f, &ms.pipeline)) {
                ms.wm = WM_PIPELINE;
                SBL_RET(sbl_agg_check_update_pipeline(&ms.pipeline, err));
            } else if (strcmp(k, "let") == 0 && sbl_iter_doc(&f, &ms.let)) {
                ms.has_let = true;
            } else if (strcmp(k, "whenNotMatched") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                ms.wnm = bson_iter_utf8(&f, NULL);
                if (strcmp(ms.wnm, "insert") != 0 && strcmp(ms.wnm, "discard") != 0 &&
                    strcmp(ms.wnm, "fail") != 0)
                    return sbl_err_set(err, SBL_E_BadValue, "Enumeration value '%s' for field "
                                       "'whenNotMatched' is not a valid value.", ms.wnm);
            }
        }
    }
    SBL_RET(sbl_agg_merge_check_let(st, ms.wm == WM_PIPELINE, ms.has_let ? &ms.let : NULL, err));
    if (ms.non == 0) {
        bson_iter_t k;
        ms.on[ms.non++] = "_id";
        bson_iter_init(&k, c->key);
        while (bson_iter_next(&k) && ms.non < 32)
            if (strcmp(bson_iter_key(&k), "_id") != 0)
                ms.on[ms.non++] = (char *)bson_iter_key(&k);
    }
    int rc = 0;
    for (size_t i = 0; i < dv->n && rc == 0; i++) {
        bson_t src;
        if ((rc = sbl_doc_prepare_insert(dv->v[i], &src, err)) != 0)
            break; /* an _id generated where it has none, as sabled's $merge */
        rc = merge_one(m, c, tdb, tcoll, &ms, &src, err);
        bson_destroy(&src);
    }
    sbl_docvec_clear(dv);
    return rc;
}

/*
 * sbl_agg_remote_t.write: $out or $merge into an unsharded collection, run
 * by the shard holding it (a $merge into a sharded one: merge_sharded) over the merger's documents ({aggregate: 1,
 * pipeline: [{$documents: {$literal: [...]}}, stage]}), in commands of
 * OUT_BATCH_BYTES: $out's first command replaces the collection, the
 * others insert beside it ($merge that fails on a match).
 */
static int remote_write(void *arg, const bson_iter_t *st, sbl_docvec_t *dv, sbl_err_t *err)
{
    const merger_t *m = arg;
    const char *stage = bson_iter_key(st);
    char tdb[128], tcoll[256], ns[400];
    if (!stage_target(m->db, st, tdb, sizeof(tdb), tcoll, sizeof(tcoll)))
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "%s requires a collection name as a string or {db, coll}", stage);
    snprintf(ns, sizeof(ns), "%s.%s", tdb, tcoll);
    rt_coll_t *c = rt_coll_get(ns, false, err);
    if (c == NULL)
        return err->code;
    bool sharded = c->sharded;
    int rc = 0;
    if (sharded && stage[1] == 'o')
        rc = sbl_err_set(err, 28769, "%s cannot be sharded", ns);
    else if (sharded)
        rc = merge_sharded(m, c, st, tdb, tcoll, dv, err);
    rt_coll_release(c);
    if (sharded)
        return rc;
    int shard = rt_db_primary(tdb, true, err);
    if (shard < -1)
        return err->code;
    bool first = true;
    for (size_t i = 0; rc == 0 && (first || i < dv->n); first = false) {
        bson_t cmd = BSON_INITIALIZER, pl, s0, lit, docs, s1, spec, into, r, cur;
        uint32_t k = 0;
        size_t bytes = 0;
        BSON_APPEND_INT32(&cmd, "aggregate", 1);
        BSON_APPEND_ARRAY_BEGIN(&cmd, "pipeline", &pl);
        BSON_APPEND_DOCUMENT_BEGIN(&pl, "0", &s0);
        BSON_APPEND_DOCUMENT_BEGIN(&s0, "$documents", &lit);
        BSON_APPEND_ARRAY_BEGIN(&lit, "$literal", &docs);
        for (; i < dv->n && (k == 0 || bytes + dv->v[i]->len < OUT_BATCH_BYTES); i++) {
            char key[16];
            const char *ks;
            bson_uint32_to_string(k++, &ks, key, sizeof(key));
            BSON_APPEND_DOCUMENT(&docs, ks, dv->v[i]);
            bytes += dv->v[i]->len;
        }
        bson_append_array_end(&lit, &docs);
        bson_append_document_end(&s0, &lit);
        bson_append_document_end(&pl, &s0);
        BSON_APPEND_DOCUMENT_BEGIN(&pl, "1", &s1);
        if (first || stage[1] == 'm') {
            sbl_append_iter(&s1, stage, -1, st);
        } else { /* $out's later documents go in beside the first command's */
            BSON_APPEND_DOCUMENT_BEGIN(&s1, "$merge", &spec);
            BSON_APPEND_DOCUMENT_BEGIN(&spec, "into", &into);
            BSON_APPEND_UTF8(&into, "db", tdb);
            BSON_APPEND_UTF8(&into, "coll", tcoll);
            bson_append_document_end(&spec, &into);
            BSON_APPEND_UTF8(&spec, "whenMatched", "fail");
            BSON_APPEND_UTF8(&spec, "whenNotMatched", "insert");
            bson_append_document_end(&s1, &spec);
        }
        bson_append_document_end(&pl, &s1);
        bson_append_array_end(&cmd, &pl);
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "cursor", &cur);
        bson_append_document_end(&cmd, &cur);
        bson_iter_t it;
        static const char *const pass[] = {"writeConcern", "bypassDocumentValidation", "let",
                                           NULL};
        for (int p = 0; pass[p]; p++)
            if (bson_iter_init_find(&it, m->cmd, pass[p]))
                sbl_append_iter(&cmd, pass[p], -1, &it);
        for (int attempt = 0;; attempt++) { /* StaleDbVersion: the primary moved; it did not run */
            bson_t sent = BSON_INITIALIZER;
            bson_concat(&sent, &cmd);
            rt_append_db_version(&sent, tdb);
            rc = rt_run(shard, tdb, &sent, &r, err);
            bson_destroy(&sent);
            if (rc != 0)
                break;
            if (rt_reply_code(&r) != SBL_E_StaleDbVersion || attempt >= RT_RETRIES) {
                rc = reply_failed(&r, err);
                bson_destroy(&r);
                break;
            }
            bson_destroy(&r);
            rt_db_forget(tdb);
            if ((shard = rt_db_primary(tdb, true, err)) < -1) {
                rc = err->code;
                break;
            }
        }
        bson_destroy(&cmd);
    }
    sbl_docvec_clear(dv);
    return rc;
}

/* ---- the merger ---------------------------------------------------------- */

/* Run the merger's stages over dv (the shards' documents) with the
 * command's let, collation, allowDiskUse and maxTimeMS; the result becomes
 * a router cursor in reply. */
static int run_merger(const char *db, const char *coll, const bson_t *cmd, const bson_t *merge_pl,
                      sbl_docvec_t *dv, bson_t *reply, sbl_err_t *err)
{
    merger_t m = {.db = db, .cmd = cmd};
    sbl_opctx_t ctx; /* no storage: the remote hooks cover every stage let through */
    bson_t coll_spec, let_spec, let_vals;
    bool has_let = false;
    int allow_disk = -1;
    int64_t batch = 101;
    const sbl_collation_t *collation = NULL;
    bson_iter_t it, c;
    memset(&ctx, 0, sizeof(ctx));
    ctx.cmd = cmd;
    ctx.db = db;
    ctx.name = "aggregate";
    bson_iter_init(&it, cmd);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "collation") == 0 && sbl_iter_doc(&it, &coll_spec)) {
            m.collation = &coll_spec;
            SBL_RET(sbl_collation_parse(&coll_spec, &collation, err));
        } else if (strcmp(k, "let") == 0 && sbl_iter_doc(&it, &let_spec)) {
            has_let = true;
        } else if (strcmp(k, "allowDiskUse") == 0 && BSON_ITER_HOLDS_BOOL(&it)) {
            allow_disk = bson_iter_bool(&it);
        } else if (strcmp(k, "maxTimeMS") == 0 && BSON_ITER_HOLDS_NUMBER(&it) &&
                   bson_iter_as_int64(&it) > 0) {
            ctx.deadline_us = sbl_now_us() + bson_iter_as_int64(&it) * 1000;
        } else if (strcmp(k, "cursor") == 0 && bson_iter_recurse(&it, &c) &&
                   bson_iter_find(&c, "batchSize") && BSON_ITER_HOLDS_NUMBER(&c)) {
            batch = bson_iter_as_int64(&c);
        }
    }
    SBL_RET(sbl_expr_eval_let(has_let ? &let_spec : NULL, &let_vals, err));
    sbl_agg_remote_t remote = {remote_read, remote_write, &m};
    sbl_agg_env_t env = {.ctx = &ctx, .db = db, .let = &let_vals, .now_ms = sbl_now_ms(),
                         .allow_disk = allow_disk, .coll = collation, .remote = &remote};
    m.env = &env;
    char ns[400];
    snprintf(ns, sizeof(ns), "%s.%s", db, coll);
    int rc = sbl_agg_run(&env, ns, merge_pl, 0, dv, err);
    bson_destroy(&let_vals);
    if (rc != 0)
        return rc;
    bson_t arr = BSON_INITIALIZER;
    for (size_t i = 0; i < dv->n; i++) {
        char key[16];
        const char *ks;
        bson_t d = BSON_INITIALIZER; /* the shards' text scores never leave the router */
        sbl_projection_strip_meta(dv->v[i], &d);
        bson_uint32_to_string((uint32_t)i, &ks, key, sizeof(key));
        BSON_APPEND_DOCUMENT(&arr, ks, &d);
        bson_destroy(&d);
    }
    rc = rt_docs_cursor(db, coll, &arr, batch < 0 ? 101 : batch, reply, err);
    bson_destroy(&arr);
    return rc;
}

/* The collation of cmd (NULL: none, or one the shards will refuse). */
static const sbl_collation_t *cmd_collation(const bson_t *cmd)
{
    bson_iter_t it;
    bson_t spec;
    const sbl_collation_t *coll = NULL;
    sbl_err_t err = {0};
    if (bson_iter_init_find(&it, cmd, "collation") && sbl_iter_doc(&it, &spec) &&
        sbl_collation_parse(&spec, &coll, &err) != 0)
        coll = NULL;
    return coll;
}

void rt_agg_explain_split(const bson_t *cmd, bson_t *reply)
{
    bson_iter_t it, p;
    sbl_err_t err = {0};
    bson_t shard_pl = BSON_INITIALIZER, merge_pl = BSON_INITIALIZER, sp;
    if (bson_iter_init_find(&it, cmd, "pipeline") && bson_iter_recurse(&it, &p) &&
        split_pipeline(&p, cmd_collation(cmd), &shard_pl, &merge_pl, &err) == 0) {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "splitPipeline", &sp);
        BSON_APPEND_ARRAY(&sp, "shardsPart", &shard_pl);
        BSON_APPEND_ARRAY(&sp, "mergerPart", &merge_pl);
        bson_append_document_end(reply, &sp);
    }
    bson_destroy(&shard_pl);
    bson_destroy(&merge_pl);
}

int rt_agg_split(const char *db, const char *coll, const bson_t *cmd, const rt_coll_t *c,
                 const bool targets[RT_MAX_SHARDS], bson_t *reply, bool *stalep, sbl_err_t *err)
{
    bson_iter_t it, p;
    *stalep = false;
    if (!bson_iter_init_find(&it, cmd, "pipeline") || !bson_iter_recurse(&it, &p))
        return sbl_err_set(err, SBL_E_FailedToParse, "aggregate needs a pipeline array");
    bson_t shard_pl = BSON_INITIALIZER, merge_pl = BSON_INITIALIZER;
    int rc = split_pipeline(&p, cmd_collation(cmd), &shard_pl, &merge_pl, err);
    /* the shards' part on every targeted shard at once; needsMerge keeps text scores */
    static const char *const strip[] = {"pipeline", "cursor", "writeConcern", NULL};
    int n = 0, sh[RT_MAX_SHARDS], rcs[RT_MAX_SHARDS];
    bson_t fwds[RT_MAX_SHARDS], rs[RT_MAX_SHARDS], cur;
    const bson_t *cmds[RT_MAX_SHARDS];
    sbl_err_t errs[RT_MAX_SHARDS];
    for (int s = 0; rc == 0 && s < RT_MAX_SHARDS; s++) {
        if (!targets[s])
            continue;
        bson_init(&fwds[n]);
        rt_copy_cmd(cmd, &fwds[n], strip);
        bson_append_array(&fwds[n], "pipeline", -1, &shard_pl);
        BSON_APPEND_DOCUMENT_BEGIN(&fwds[n], "cursor", &cur);
        bson_append_document_end(&fwds[n], &cur);
        BSON_APPEND_BOOL(&fwds[n], "needsMerge", true);
        rt_append_version(&fwds[n], c, s);
        cmds[n] = &fwds[n];
        memset(&errs[n], 0, sizeof(errs[n]));
        sh[n++] = s;
    }
    if (rc == 0)
        rt_run_many(n, sh, db, cmds, rs, rcs, errs);
    bool answered = false;
    sbl_docvec_t dv = {0};
    for (int i = 0; i < n; i++) {
        bson_destroy(&fwds[i]);
        if (rc == 0 && rcs[i] != 0) {
            rc = rcs[i];
            *err = errs[i];
        } else if (rc == 0 && !*stalep && !answered &&
                   rt_stale_code(rt_reply_code(&rs[i]))) {
            *stalep = true;
        } else if (rc == 0 && !*stalep && !answered && rt_reply_code(&rs[i]) != 0) {
            bson_copy_to_excluding_noinit(&rs[i], reply, "$clusterTime", "operationTime", NULL);
            answered = true;
        } else if (rc == 0 && !*stalep && !answered) {
            bson_t arr = BSON_INITIALIZER;
            bson_iter_t a;
            rc = rt_drain_cursor(&rs[i], db, coll, sh[i], &arr, err);
            if (rc == 0 && bson_iter_init(&a, &arr))
                while (bson_iter_next(&a)) {
                    bson_t d;
                    if (sbl_iter_doc(&a, &d))
                        sbl_docvec_push(&dv, bson_copy(&d));
                }
            bson_destroy(&arr);
        } else if (rt_reply_code(&rs[i]) == 0) { /* another shard failed: not read */
            bson_iter_t id;
            if (bson_iter_init(&id, &rs[i]) && bson_iter_find_descendant(&id, "cursor.id", &id))
                rt_kill_shard_cursor(sh[i], rt_answered_by(sh[i]), db, coll,
                                     bson_iter_as_int64(&id));
        }
        bson_destroy(&rs[i]);
    }
    if (rc == 0 && !*stalep && !answered)
        rc = run_merger(db, coll, cmd, &merge_pl, &dv, reply, err);
    sbl_docvec_clear(&dv);
    bson_destroy(&shard_pl);
    bson_destroy(&merge_pl);
    return rc;
}
