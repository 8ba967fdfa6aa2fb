/*
 * group.c: the $group stage and its accumulators ($sum, $avg, $min,
 * $max, $first, $last, $push, $addToSet, $count, $mergeObjects, $stdDevPop,
 * $stdDevSamp, $firstN, $lastN, $minN, $maxN, $top, $bottom, $topN and
 * $bottomN (items that keep their sort key: group_top.c), $percentile and
 * $median (every numeric sample kept: src/expr's expr_pct.c), and
 * $accumulator in JavaScript, whose state is the accumulator's one value).
 * Those that take an object are parsed by group_args.c.  Expressions
 * are parsed once per stage (src/expr) and evaluated per document.
 *
 * Groups are found through a hash of the group key's order-preserving
 * encoding (sbl_key_append), so keys that compare equal in MongoDB's order
 * (1, 1.0 and NumberLong(1)) share a group, as they do in MongoDB.  Groups
 * come out in the order they were first seen.
 *
 * Memory: each group counts its key and its accumulators' values.  Past
 * internalDocumentSourceGroupMaxMemoryBytes the stage fails with 292, or,
 * when it may use the disk, writes every partial group (key, first-seen
 * position, accumulator states) as one sorted run (src/exec's sorter) and
 * starts afresh.  At the end the runs are merged by key and the partial
 * states of one key combined in input order, so $first/$last/$push/$addToSet/
 * $mergeObjects see the same order as in memory; groups still come out in
 * first-seen order.  A single $push/$addToSet array is held to its own
 * limit (146, as MongoDB: it cannot spill).
 *
 * Across shards (src/router/rt_agg.c): a group with $willBeMerged: true
 * gives each group's partial states (the spilled runs' form) instead of
 * results; one with $doingMerge: true reads such documents, combines the
 * states of one _id as a spill's merge does, and gives the results.
 */
#include "agg/agg.h"
#include "common/buf.h"
#include "doc/doc.h"
#include "expr/expr.h"
#include "agg/group_int.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SBL_E_GroupIdMissing 15955
#define SBL_E_BadAccumulator 15952
#define SBL_E_AccumulatorNotObject 40234

static const struct {
    const char *name;
    enum acc_kind kind;
} acc_table[] = {/* sorted by name */
                 {"$accumulator", A_ACCUMULATOR}, {"$addToSet", A_ADDTOSET}, {"$avg", A_AVG},
                 {"$bottom", A_BOTTOM}, {"$bottomN", A_BOTTOMN}, {"$count", A_COUNT},
                 {"$first", A_FIRST},       {"$firstN", A_FIRSTN}, {"$last", A_LAST},
                 {"$lastN", A_LASTN},       {"$max", A_MAX},   {"$maxN", A_MAXN},
                 {"$median", A_MEDIAN}, {"$mergeObjects", A_MERGE}, {"$min", A_MIN},
                 {"$minN", A_MINN}, {"$percentile", A_PERCENTILE}, {"$push", A_PUSH},
                 {"$stdDevPop", A_STDDEV_POP}, {"$stdDevSamp", A_STDDEV_SAMP},
                 {"$sum", A_SUM}, {"$top", A_TOP}, {"$topN", A_TOPN}};

typedef struct group {
    uint8_t *key;
    size_t keylen;
    uint64_t hash;
    size_t seq; /* the input position that created it */
    bson_value_t id;
    acc_state_t *accs;
} group_t;

#define GROUP_OVERHEAD 64

/* What a value costs held in memory (the value plus what it points to). */
static size_t value_bytes(const bson_value_t *v)
{
    size_t n = sizeof(*v);
    switch (v->value_type) {
    case BSON_TYPE_UTF8:
        return n + v->value.v_utf8.len;
    case BSON_TYPE_SYMBOL:
        return n + v->value.v_symbol.len;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        return n + v->value.v_doc.data_len;
    case BSON_TYPE_BINARY:
        return n + v->value.v_binary.data_len;
    case BSON_TYPE_REGEX:
        return n + strlen(v->value.v_regex.regex) + strlen(v->value.v_regex.options);
    case BSON_TYPE_CODE:
        return n + v->value.v_code.code_len;
    case BSON_TYPE_CODEWSCOPE:
        return n + v->value.v_codewscope.code_len + v->value.v_codewscope.scope_len;
    case BSON_TYPE_DBPOINTER:
        return n + v->value.v_dbpointer.collection_len;
    default:
        return n;
    }
}

static int find_acc(const char *name)
{
    size_t lo = 0, hi = sizeof(acc_table) / sizeof(acc_table[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(name, acc_table[mid].name);
        if (c == 0)
            return (int)acc_table[mid].kind;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void push_item(acc_state_t *a, const bson_value_t *v)
{
    a->bytes += value_bytes(v);
    if (a->nitems == a->capitems) {
        a->capitems = a->capitems ? a->capitems * 2 : 8;
        a->items = realloc(a->items, a->capitems * sizeof(*a->items));
        if (a->items == NULL)
            abort();
    }
    bson_value_copy(v, &a->items[a->nitems++]);
}

/* $minN / $maxN: insert v into a's ascending items (after equal ones), keeping n of them. */
static void keep_n_sorted(const acc_spec_t *s, acc_state_t *a, const bson_value_t *v,
                          const sbl_collation_t *coll)
{
    bool min = s->kind == A_MINN;
    if ((int64_t)a->nitems >= a->nmax) {
        size_t drop = min ? a->nitems - 1 : 0; /* the worst one kept */
        int c = sbl_value_compare_coll(v, &a->items[drop], coll);
        if (min ? c >= 0 : c <= 0)
            return;
        a->bytes -= value_bytes(&a->items[drop]);
        bson_value_destroy(&a->items[drop]);
        memmove(&a->items[drop], &a->items[drop + 1], (a->nitems - drop - 1) * sizeof(*a->items));
        a->nitems--;
    }
    size_t at = a->nitems;
    while (at > 0 && sbl_value_compare_coll(&a->items[at - 1], v, coll) > 0)
        at--;
    push_item(a, v);
    bson_value_t last = a->items[a->nitems - 1];
    memmove(&a->items[at + 1], &a->items[at], (a->nitems - 1 - at) * sizeof(*a->items));
    a->items[at] = last;
}

/* $top $bottom $topN $bottomN: insert item v into a's items in sortBy order
 * (after equal ones), keeping the n first ($top) or last ($bottom); a tie
 * with the one that would go keeps the one seen first, as mongod. */
static void keep_top(const acc_spec_t *s, acc_state_t *a, const bson_value_t *v,
                     const sbl_collation_t *coll)
{
    bool top = s->kind == A_TOP || s->kind == A_TOPN;
    if (a->nmax == 0)
        a->nmax = 1; /* $top, $bottom */
    if ((int64_t)a->nitems >= a->nmax) {
        size_t drop = top ? a->nitems - 1 : 0;
        int c = top ? sbl_top_compare(s->top, &a->items[drop], v, coll)
                    : sbl_top_compare(s->top, v, &a->items[drop], coll);
        if (c <= 0)
            return;
        a->bytes -= value_bytes(&a->items[drop]);
        bson_value_destroy(&a->items[drop]);
        memmove(&a->items[drop], &a->items[drop + 1], (a->nitems - drop - 1) * sizeof(*a->items));
        a->nitems--;
    }
    size_t at = a->nitems;
    while (at > 0 && sbl_top_compare(s->top, &a->items[at - 1], v, coll) > 0)
        at--;
    push_item(a, v);
    bson_value_t last = a->items[a->nitems - 1];
    memmove(&a->items[at + 1], &a->items[at], (a->nitems - 1 - at) * sizeof(*a->items));
    a->items[at] = last;
}

static void add_number(acc_state_t *a, const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64: {
        int64_t x = v->value_type == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
        if (v->value_type == BSON_TYPE_INT64)
            a->has_long = true;
        int64_t sum;
        if (__builtin_add_overflow(a->isum, x, &sum)) {
            a->overflow = true;
            a->dsum += (double)x;
        } else {
            a->isum = sum;
        }
        a->count++;
        break;
    }
    case BSON_TYPE_DOUBLE:
        a->has_double = true;
        a->dsum += v->value.v_double;
        a->count++;
        break;
    case BSON_TYPE_DECIMAL128: {
        char s[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&v->value.v_decimal128, s);
        a->has_double = true;
        a->dsum += strtod(s, NULL);
        a->count++;
        break;
    }
    default:
        break; /* $sum and $avg ignore non-numbers */
    }
}

/* A missing value stands as null where an accumulator keeps it ($first/$last). */
static void v_null_of(const bson_value_t *v)
{
    ((bson_value_t *)v)->value_type = BSON_TYPE_NULL;
}

/* Replace a's value by a copy of v, keeping a->bytes. */
static void set_val(acc_state_t *a, const bson_value_t *v)
{
    if (a->seen) {
        a->bytes -= value_bytes(&a->val);
        bson_value_destroy(&a->val);
    }
    bson_value_copy(v, &a->val);
    a->bytes += value_bytes(&a->val);
    a->seen = true;
}

/* $push/$addToSet: ExceededMemoryLimit (146) once the array reaches its limit. */
static int check_array(const acc_spec_t *s, const acc_state_t *a, sbl_err_t *err)
{
    size_t limit = sbl_mem_limit(s->kind == A_PUSH ? SBL_LIM_PUSH : SBL_LIM_ADDTOSET);
    if (a->bytes < limit)
        return 0;
    return sbl_err_set(err, SBL_E_ExceededMemoryLimit,
                       "%s used too much memory and cannot spill to disk. Memory limit: %zu bytes",
                       s->kind == A_PUSH ? "$push" : "$addToSet", limit);
}

/* coll: how $min, $max and $addToSet compare strings (NULL: binary). */
static int accumulate(const acc_spec_t *s, acc_state_t *a, const bson_value_t *v, bool missing,
                      const sbl_collation_t *coll, sbl_err_t *err)
{
    switch (s->kind) {
    case A_ACCUMULATOR: /* run by the stage's loop (group_js.c) */
        return 0;
    case A_SUM:
    case A_AVG:
        if (!missing)
            add_number(a, v);
        break;
    case A_COUNT:
        a->isum++;
        break;
    case A_FIRSTN:
        if ((int64_t)a->nitems < a->nmax)
            push_item(a, v); /* missing counts as null (the caller made it one) */
        break;
    case A_LASTN:
        if ((int64_t)a->nitems >= a->nmax && a->nitems > 0) {
            a->bytes -= value_bytes(&a->items[0]);
            bson_value_destroy(&a->items[0]);
            memmove(&a->items[0], &a->items[1], (a->nitems - 1) * sizeof(*a->items));
            a->nitems--;
        }
        push_item(a, v);
        break;
    case A_TOP:
    case A_BOTTOM:
    case A_TOPN:
    case A_BOTTOMN:
        keep_top(s, a, v, coll);
        break;
    case A_MINN:
    case A_MAXN:
        if (!missing && v->value_type != BSON_TYPE_NULL &&
            v->value_type != BSON_TYPE_UNDEFINED)
            keep_n_sorted(s, a, v, coll);
        break;
    case A_PERCENTILE:
    case A_MEDIAN: {
        double x;
        if (!missing && sbl_pct_number(v, &x)) {
            bson_value_t d = {.value_type = BSON_TYPE_DOUBLE, .value.v_double = x};
            push_item(a, &d);
        }
        break;
    }
    case A_STDDEV_POP:
    case A_STDDEV_SAMP:
        if (!missing && (v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64 ||
                         v->value_type == BSON_TYPE_DOUBLE ||
                         v->value_type == BSON_TYPE_DECIMAL128)) {
            double x = sbl_number_double(v), delta = x - a->mean;
            a->count++;
            if (delta != 0) {
                a->mean += delta / (double)a->count;
                a->m2 += delta * (x - a->mean);
            }
        }
        break;
    case A_MIN:
    case A_MAX:
        if (missing || v->value_type == BSON_TYPE_NULL || v->value_type == BSON_TYPE_UNDEFINED)
            break;
        if (!a->seen || (s->kind == A_MIN ? sbl_value_compare_coll(v, &a->val, coll) < 0
                                           : sbl_value_compare_coll(v, &a->val, coll) > 0))
            set_val(a, v);
        break;
    case A_FIRST:
        if (!a->seen) {
            if (missing)
                v_null_of(v);
            set_val(a, v);
        }
        break;
    case A_LAST:
        if (missing)
            v_null_of(v);
        set_val(a, v);
        break;
    case A_PUSH:
        if (!missing) {
            push_item(a, v);
            return check_array(s, a, err);
        }
        break;
    case A_ADDTOSET:
        if (missing)
            break;
        for (size_t i = 0; i < a->nitems; i++)
            if (sbl_value_compare_coll(&a->items[i], v, coll) == 0)
                return 0;
        push_item(a, v);
        return check_array(s, a, err);
    case A_MERGE: {
        if (missing || v->value_type != BSON_TYPE_DOCUMENT)
            break;
        bson_t in, merged = BSON_INITIALIZER;
        bson_iter_t it;
        bson_init_static(&in, v->value.v_doc.data, v->value.v_doc.data_len);
        if (a->seen) {
            bson_t cur;
            bson_init_static(&cur, a->val.value.v_doc.data, a->val.value.v_doc.data_len);
            bson_iter_init(&it, &cur);
            while (bson_iter_next(&it)) {
                bson_iter_t f;
                if (bson_iter_init_find(&f, &in, bson_iter_key(&it)))
                    sbl_append_iter(&merged, bson_iter_key(&it), -1, &f);
                else
                    sbl_append_iter(&merged, bson_iter_key(&it), -1, &it);
            }
            bson_iter_init(&it, &in);
            while (bson_iter_next(&it))
                if (!bson_has_field(&cur, bson_iter_key(&it)))
                    sbl_append_iter(&merged, bson_iter_key(&it), -1, &it);
        } else {
            bson_concat(&merged, &in);
        }
        bson_value_t mv;
        mv.value_type = BSON_TYPE_DOCUMENT;
        mv.value.v_doc.data = (uint8_t *)bson_get_data(&merged);
        mv.value.v_doc.data_len = merged.len;
        set_val(a, &mv);
        bson_destroy(&merged);
        break;
    }
    }
    return 0;
}

static void append_result(bson_t *out, const acc_spec_t *s, const acc_state_t *a)
{
    switch (s->kind) {
    case A_ACCUMULATOR:
        sbl_js_acc_result(out, s->field, s->js, &a->val, a->seen);
        break;
    case A_SUM:
    case A_COUNT:
        if (a->has_double || a->overflow)
            bson_append_double(out, s->field, -1, a->dsum + (double)a->isum);
        else if (a->has_long || a->isum > INT32_MAX || a->isum < INT32_MIN)
            bson_append_int64(out, s->field, -1, a->isum);
        else
            bson_append_int32(out, s->field, -1, (int32_t)a->isum);
        break;
    case A_AVG:
        if (a->count == 0)
            bson_append_null(out, s->field, -1);
        else
            bson_append_double(out, s->field, -1, (a->dsum + (double)a->isum) / (double)a->count);
        break;
    case A_FIRSTN:
    case A_LASTN:
    case A_MINN:
    case A_MAXN: { /* $maxN: largest first */
        bson_t arr;
        char kb[16];
        bson_append_array_begin(out, s->field, -1, &arr);
        for (size_t i = 0; i < a->nitems; i++)
            sbl_append_value(&arr, sbl_array_key((uint32_t)i, kb), -1,
                             &a->items[s->kind == A_MAXN ? a->nitems - 1 - i : i]);
        bson_append_array_end(out, &arr);
        break;
    }
    case A_TOP:
    case A_BOTTOM:
        if (a->nitems > 0)
            sbl_top_output(out, s->field, &a->items[0]);
        else
            bson_append_null(out, s->field, -1);
        break;
    case A_TOPN:
    case A_BOTTOMN: {
        bson_t arr;
        char kb[16];
        bson_append_array_begin(out, s->field, -1, &arr);
        for (size_t i = 0; i < a->nitems; i++)
            sbl_top_output(&arr, sbl_array_key((uint32_t)i, kb), &a->items[i]);
        bson_append_array_end(out, &arr);
        break;
    }
    case A_PERCENTILE:
    case A_MEDIAN: {
        double *vals = malloc((a->nitems + 1) * sizeof(*vals));
        bson_value_t r;
        if (vals == NULL)
            abort();
        for (size_t i = 0; i < a->nitems; i++)
            vals[i] = a->items[i].value.v_double;
        sbl_pct_sort(vals, a->nitems);
        sbl_pct_result(&s->pct, vals, a->nitems, &r);
        sbl_append_value(out, s->field, -1, &r);
        bson_value_destroy(&r);
        free(vals);
        break;
    }
    case A_STDDEV_POP:
    case A_STDDEV_SAMP: {
        int64_t n = s->kind == A_STDDEV_SAMP ? a->count - 1 : a->count;
        if (n <= 0)
            bson_append_null(out, s->field, -1);
        else
            bson_append_double(out, s->field, -1, sqrt(a->m2 / (double)n));
        break;
    }
    case A_MERGE:
        if (!a->seen) {
            bson_t empty;
            bson_append_document_begin(out, s->field, -1, &empty);
            bson_append_document_end(out, &empty);
            break;
        }
        /* fall through */
    case A_MIN:
    case A_MAX:
    case A_FIRST:
    case A_LAST:
        if (a->seen)
            sbl_append_value(out, s->field, -1, &a->val);
        else
            bson_append_null(out, s->field, -1);
        break;
    case A_PUSH:
    case A_ADDTOSET: {
        bson_t arr;
        char kb[16];
        bson_append_array_begin(out, s->field, -1, &arr);
        for (size_t i = 0; i < a->nitems; i++)
            sbl_append_value(&arr, sbl_array_key((uint32_t)i, kb), -1, &a->items[i]);
        bson_append_array_end(out, &arr);
        break;
    }
    }
}

static void acc_state_free(acc_state_t *a)
{
    if (a->seen)
        bson_value_destroy(&a->val);
    for (size_t i = 0; i < a->nitems; i++)
        bson_value_destroy(&a->items[i]);
    free(a->items);
}

static void free_accs(acc_spec_t *accs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sbl_expr_free(accs[i].e);
        sbl_expr_free(accs[i].n_e);
        sbl_js_acc_free(accs[i].js);
        sbl_top_free(accs[i].top);
        sbl_pct_free(&accs[i].pct);
    }
    free(accs);
}

static bool is_n_kind(enum acc_kind k)
{
    return k == A_FIRSTN || k == A_LASTN || k == A_MINN || k == A_MAXN;
}

enum { G_MERGE = 1, G_PARTIAL = 2 }; /* $doingMerge, $willBeMerged */

/* Parse {_id: expr, field: {$acc: expr}, ...}; *modep: G_MERGE and G_PARTIAL
 * (the router's split group: docs/sharding.md), never set for $bucket's output
 * (modep NULL). */
static int parse_spec(const bson_t *spec, bson_value_t *id_expr, acc_spec_t **accsp, size_t *np,
                      int *modep, sbl_err_t *err)
{
    bson_iter_t it, sub;
    bool has_id = false;
    size_t n = 0, cap = bson_count_keys(spec);
    acc_spec_t *accs = calloc(cap + 1, sizeof(*accs));

    if (modep != NULL)
        *modep = 0;
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "_id") == 0) {
            sbl_iter_value(&it, id_expr);
            has_id = true;
            continue;
        }
        if (modep != NULL &&
            (strcmp(k, "$doingMerge") == 0 || strcmp(k, "$willBeMerged") == 0)) {
            bool merge = k[1] == 'd', on = bson_iter_as_bool(&it);
            if (merge && !on) {
                free_accs(accs, n);
                return sbl_err_set(err, 17030, "$doingMerge should be true if present");
            }
            *modep |= on ? (merge ? G_MERGE : G_PARTIAL) : 0;
            continue;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            free_accs(accs, n);
            return sbl_err_set(err, SBL_E_AccumulatorNotObject,
                               "The field '%s' must be an accumulator object", k);
        }
        bson_iter_t extra;
        bson_iter_recurse(&it, &sub);
        bool one = bson_iter_next(&sub);
        extra = sub;
        if (!one || bson_iter_next(&extra)) {
            free_accs(accs, n);
            return sbl_err_set(err, SBL_E_AccumulatorNotObject,
                               "The field '%s' must specify one accumulator", k);
        }
        int kind = find_acc(bson_iter_key(&sub));
        if (kind < 0) {
            free_accs(accs, n);
            return sbl_err_set(err, SBL_E_BadAccumulator,
                               "unknown group operator '%s'", bson_iter_key(&sub));
        }
        accs[n].field = k;
        accs[n].kind = (enum acc_kind)kind;
        sbl_iter_value(&sub, &accs[n].expr);
        if (kind == A_COUNT && (accs[n].expr.value_type != BSON_TYPE_DOCUMENT ||
                                accs[n].expr.value.v_doc.data_len != 5)) {
            free_accs(accs, n);
            return sbl_err_set(err, SBL_E_TypeMismatch, "$count takes no arguments, i.e. $count:{}");
        }
        bool top = kind == A_TOP || kind == A_BOTTOM || kind == A_TOPN || kind == A_BOTTOMN;
        const char *op = bson_iter_key(&sub);
        int rc = top ? sbl_group_parse_top(op, &accs[n], err)
                 : is_n_kind(accs[n].kind) ? sbl_group_parse_n(op, &accs[n], err)
                 : kind == A_PERCENTILE || kind == A_MEDIAN
                     ? sbl_group_parse_pct(op, &accs[n], err)
                 : kind == A_ACCUMULATOR
                     ? sbl_js_acc_parse(&accs[n].expr, &accs[n].js, &accs[n].e, err)
                     : sbl_expr_parse(&accs[n].expr, &accs[n].e, err);
        if (rc != 0) {
            n++; /* free what it parsed */
            free_accs(accs, n);
            return rc;
        }
        n++;
    }
    if (!has_id) {
        free_accs(accs, n);
        return sbl_err_set(err, SBL_E_GroupIdMissing,
                           "a group specification must include an _id");
    }
    *accsp = accs;
    *np = n;
    return 0;
}

/* ---- spilling partial groups ------------------------------------------------------------ */

enum { F_DOUBLE = 1, F_LONG = 2, F_OVERFLOW = 4, F_SEEN = 8 };

/* One accumulator's partial state as field key of out: what a spilled run
 * and a shard's partial group ($willBeMerged) hold, read back by combine(). */
static void append_state(bson_t *out, const char *key, const acc_state_t *x)
{
    bson_t st, items;
    char kb[16];
    bson_append_document_begin(out, key, -1, &st);
    bson_append_int64(&st, "n", 1, x->isum);
    bson_append_double(&st, "d", 1, x->dsum);
    bson_append_int64(&st, "c", 1, x->count);
    bson_append_double(&st, "m", 1, x->mean);
    bson_append_double(&st, "q", 1, x->m2);
    bson_append_int64(&st, "N", 1, x->nmax);
    bson_append_int32(&st, "f", 1,
                      (x->has_double ? F_DOUBLE : 0) | (x->has_long ? F_LONG : 0) |
                          (x->overflow ? F_OVERFLOW : 0) | (x->seen ? F_SEEN : 0));
    if (x->seen)
        sbl_append_value(&st, "v", 1, &x->val);
    bson_append_array_begin(&st, "t", 1, &items);
    for (size_t i = 0; i < x->nitems; i++)
        sbl_append_value(&items, sbl_array_key((uint32_t)i, kb), -1, &x->items[i]);
    bson_append_array_end(&st, &items);
    bson_append_document_end(out, &st);
}

/* A partial group as one run record: {k: key, s: seq, i: _id, a: [state...]}. */
static bson_t *group_to_bson(const group_t *g, size_t nacc)
{
    bson_t *d = bson_new(), arr;
    char kb[16];
    bson_append_binary(d, "k", 1, BSON_SUBTYPE_BINARY, g->key, (uint32_t)g->keylen);
    bson_append_int64(d, "s", 1, (int64_t)g->seq);
    sbl_append_value(d, "i", 1, &g->id);
    bson_append_array_begin(d, "a", 1, &arr);
    for (size_t a = 0; a < nacc; a++)
        append_state(&arr, sbl_array_key((uint32_t)a, kb), &g->accs[a]);
    bson_append_array_end(d, &arr);
    return d;
}

static void run_key(const bson_t *d, const uint8_t **keyp, uint32_t *lenp)
{
    bson_iter_t it;
    bson_subtype_t sub;
    *keyp = NULL;
    *lenp = 0;
    if (bson_iter_init_find(&it, d, "k") && BSON_ITER_HOLDS_BINARY(&it))
        bson_iter_binary(&it, &sub, lenp, keyp);
}

static int cmp_run_key(const bson_t *a, const bson_t *b, const void *arg)
{
    const uint8_t *ka, *kb;
    uint32_t la, lb;
    (void)arg;
    run_key(a, &ka, &la);
    run_key(b, &kb, &lb);
    int r = memcmp(ka, kb, la < lb ? la : lb);
    return r != 0 ? r : (la < lb ? -1 : la > lb);
}

/* Fold the numeric part of a partial state into a (in input order). */
static void combine_numbers(acc_state_t *a, int64_t isum, double dsum, int64_t count, int flags)
{
    int64_t sum;
    if (__builtin_add_overflow(a->isum, isum, &sum)) {
        a->overflow = true;
        a->dsum += (double)isum;
    } else {
        a->isum = sum;
    }
    a->dsum += dsum;
    a->count += count;
    a->has_double |= (flags & F_DOUBLE) != 0;
    a->has_long |= (flags & F_LONG) != 0;
    a->overflow |= (flags & F_OVERFLOW) != 0;
}

/* Fold one spilled partial state (a run record's a.<n>) into a. */
static int combine(const acc_spec_t *s, acc_state_t *a, const bson_iter_t *st,
                   const sbl_collation_t *coll, sbl_err_t *err)
{
    bson_iter_t f, t;
    int64_t isum = 0, count = 0;
    double dsum = 0, mean = 0, m2 = 0;
    int flags = 0;
    bson_value_t val = {.value_type = BSON_TYPE_EOD};
    bool has_items = false;
    bson_iter_recurse(st, &f);
    while (bson_iter_next(&f)) {
        switch (bson_iter_key(&f)[0]) {
        case 'n': isum = bson_iter_int64(&f); break;
        case 'd': dsum = bson_iter_double(&f); break;
        case 'c': count = bson_iter_int64(&f); break;
        case 'm': mean = bson_iter_double(&f); break;
        case 'q': m2 = bson_iter_double(&f); break;
        case 'N': if (a->nmax == 0) a->nmax = bson_iter_int64(&f); break;
        case 'f': flags = bson_iter_int32(&f); break;
        case 'v': sbl_iter_value(&f, &val); break;
        case 't': bson_iter_recurse(&f, &t); has_items = true; break;
        default: break;
        }
    }
    switch (s->kind) {
    case A_SUM:
    case A_AVG:
    case A_COUNT:
        combine_numbers(a, isum, dsum, count, flags);
        return 0;
    case A_STDDEV_POP:
    case A_STDDEV_SAMP: { /* two partial (count, mean, m2) make one */
        int64_t n = a->count + count;
        if (count == 0)
            return 0;
        double delta = mean - a->mean;
        a->m2 += m2 + delta * delta * ((double)a->count * (double)count / (double)n);
        a->mean += delta * (double)count / (double)n;
        a->count = n;
        return 0;
    }
    case A_PUSH:
    case A_ADDTOSET:
    case A_FIRSTN:
    case A_LASTN:
    case A_MINN:
    case A_MAXN:
    case A_TOP:
    case A_BOTTOM:
    case A_TOPN:
    case A_BOTTOMN:
    case A_PERCENTILE:
    case A_MEDIAN:
        while (has_items && bson_iter_next(&t)) {
            bson_value_t v;
            sbl_iter_value(&t, &v);
            SBL_RET(accumulate(s, a, &v, false, coll, err));
        }
        return 0;
    case A_ACCUMULATOR: /* merge(earlier, later) */
        if ((flags & F_SEEN) != 0)
            SBL_RET(sbl_js_acc_merge(s->js, &a->val, &a->seen, &val, err));
        a->bytes = value_bytes(&a->val);
        return 0;
    default: /* $min $max $first $last $mergeObjects: fold the value it kept */
        if ((flags & F_SEEN) == 0)
            return 0;
        return accumulate(s, a, &val, false, coll, err);
    }
}

typedef struct out_ent {
    bson_t *doc;
    size_t seq;
} out_ent_t;

static int cmp_out(const void *a, const void *b)
{
    const out_ent_t *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* One result document: {_id, field: result...}; partial: {_id, field: state...}
 * (a shard's partial group, which a $doingMerge group combines). */
static bson_t *group_result(const bson_value_t *id, const acc_spec_t *accs, size_t nacc,
                            const acc_state_t *states, bool partial)
{
    bson_t *doc = bson_new();
    sbl_append_value(doc, "_id", 3, id);
    for (size_t a = 0; a < nacc; a++) {
        if (partial)
            append_state(doc, accs[a].field, &states[a]);
        else
            append_result(doc, &accs[a], &states[a]);
    }
    return doc;
}

static void free_states(acc_state_t *st, size_t nacc)
{
    for (size_t a = 0; a < nacc; a++)
        acc_state_free(&st[a]);
    memset(st, 0, nacc * sizeof(*st));
}

/*
 * Merge the sorter's partial groups (sorted by key, ties in input order) into
 * out, one document per key, in first-seen order.
 */
static int merge_spilled(sbl_sorter_t *so, const acc_spec_t *accs, size_t nacc,
                         const sbl_collation_t *coll, bool partial, sbl_docvec_t *out,
                         sbl_err_t *err)
{
    acc_state_t *cur = calloc(nacc + 1, sizeof(*cur));
    bson_t *first = NULL; /* the current key's first record: its key, seq and _id */
    out_ent_t *ents = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        bson_t *d = NULL;
        if ((rc = sbl_sorter_next(so, &d, NULL, err)) != 0)
            break;
        if (first != NULL && (d == NULL || cmp_run_key(first, d, NULL) != 0)) {
            bson_iter_t it;
            bson_value_t id = {.value_type = BSON_TYPE_NULL};
            if (bson_iter_init_find(&it, first, "i"))
                sbl_iter_value(&it, &id);
            if (n == cap) {
                cap = cap ? cap * 2 : 256;
                ents = realloc(ents, cap * sizeof(*ents));
                if (ents == NULL)
                    abort();
            }
            ents[n].doc = group_result(&id, accs, nacc, cur, partial);
            ents[n++].seq = bson_iter_init_find(&it, first, "s") ? (size_t)bson_iter_int64(&it) : 0;
            free_states(cur, nacc);
            bson_destroy(first);
            first = NULL;
        }
        if (d == NULL)
            break;
        bson_iter_t a, st;
        if (bson_iter_init_find(&a, d, "a") && BSON_ITER_HOLDS_ARRAY(&a)) {
            bson_iter_recurse(&a, &st);
            for (size_t k = 0; k < nacc && rc == 0 && bson_iter_next(&st); k++)
                rc = combine(&accs[k], &cur[k], &st, coll, err);
        }
        if (first == NULL)
            first = d;
        else
            bson_destroy(d);
        if (rc != 0)
            break;
    }
    if (first != NULL)
        bson_destroy(first);
    free_states(cur, nacc);
    free(cur);
    if (n > 1)
        qsort(ents, n, sizeof(*ents), cmp_out);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0)
            sbl_docvec_push(out, ents[i].doc);
        else
            bson_destroy(ents[i].doc);
    }
    free(ents);
    return rc;
}

/* ---- the stage ------------------------------------------------------------------------------ */

typedef struct gtable {
    group_t *groups;
    size_t n, cap;
    size_t *tab; /* index + 1 into groups; 0 = empty */
    size_t tabsize;
    size_t bytes;
} gtable_t;

static void gtable_init(gtable_t *t)
{
    memset(t, 0, sizeof(*t));
    t->tabsize = 1024;
    t->tab = calloc(t->tabsize, sizeof(*t->tab));
    if (t->tab == NULL)
        abort();
}

static void free_group(group_t *g, size_t nacc)
{
    for (size_t a = 0; a < nacc; a++)
        acc_state_free(&g->accs[a]);
    free(g->accs);
    free(g->key);
    bson_value_destroy(&g->id);
}

/* Free every group and empty the table (kept allocated). */
static void gtable_clear(gtable_t *t, size_t nacc)
{
    for (size_t i = 0; i < t->n; i++)
        free_group(&t->groups[i], nacc);
    t->n = 0;
    t->bytes = 0;
    memset(t->tab, 0, t->tabsize * sizeof(*t->tab));
}

/* The group of key kb, created (with id, at input position seq) when new. */
static group_t *gtable_get(gtable_t *t, const sbl_buf_t *kb, const bson_value_t *id, size_t seq,
                           size_t nacc)
{
    uint64_t h = hash_bytes(kb->data, kb->len);
    size_t slot = h & (t->tabsize - 1);
    while (t->tab[slot] != 0) {
        group_t *c = &t->groups[t->tab[slot] - 1];
        if (c->hash == h && c->keylen == kb->len && memcmp(c->key, kb->data, kb->len) == 0)
            return c;
        slot = (slot + 1) & (t->tabsize - 1);
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->groups = realloc(t->groups, t->cap * sizeof(*t->groups));
        if (t->groups == NULL)
            abort();
    }
    group_t *g = &t->groups[t->n++];
    g->keylen = kb->len;
    g->key = malloc(kb->len ? kb->len : 1);
    memcpy(g->key, kb->data, kb->len);
    g->hash = h;
    g->seq = seq;
    bson_value_copy(id, &g->id);
    g->accs = calloc(nacc + 1, sizeof(*g->accs));
    t->bytes += kb->len + GROUP_OVERHEAD + value_bytes(id) + nacc * sizeof(acc_state_t);
    t->tab[slot] = t->n;
    if (t->n * 2 > t->tabsize) { /* grow and rehash */
        t->tabsize *= 2;
        t->tab = realloc(t->tab, t->tabsize * sizeof(*t->tab));
        memset(t->tab, 0, t->tabsize * sizeof(*t->tab));
        for (size_t i = 0; i < t->n; i++) {
            size_t s = t->groups[i].hash & (t->tabsize - 1);
            while (t->tab[s] != 0)
                s = (s + 1) & (t->tabsize - 1);
            t->tab[s] = i + 1;
        }
    }
    return g;
}

/* Move every group of t into the sorter (as records); with spill, write them as a run. */
static int gtable_to_sorter(gtable_t *t, size_t nacc, sbl_sorter_t *so, bool spill,
                            sbl_err_t *err)
{
    int rc = 0;
    size_t records = t->n, bytes = 0;
    for (size_t i = 0; i < t->n && rc == 0; i++) {
        bson_t *d = group_to_bson(&t->groups[i], nacc);
        bytes += d->len;
        rc = sbl_sorter_add(so, d, 0, err);
    }
    gtable_clear(t, nacc);
    if (rc == 0 && spill) {
        rc = sbl_sorter_spill(so, err);
        sbl_spill_count_group(records, bytes);
    }
    return rc;
}

int sbl_agg_group(sbl_docvec_t *dv, const bson_t *spec, const sbl_agg_env_t *env,
                  const bson_value_t *ids, sbl_err_t *err)
{
    bson_value_t id_expr;
    acc_spec_t *accs = NULL;
    sbl_expr_t *id_e = NULL;
    size_t nacc = 0;
    int rc = 0, mode = 0;

    bson_t *with_id = NULL; /* accs[].field points into it: kept to the end */
    if (ids != NULL) {
        with_id = bson_new();
        bson_append_null(with_id, "_id", 3);
        bson_concat(with_id, spec);
        if ((rc = parse_spec(with_id, &id_expr, &accs, &nacc, NULL, err)) != 0) {
            bson_destroy(with_id);
            return rc;
        }
    } else {
        SBL_RET(parse_spec(spec, &id_expr, &accs, &nacc, &mode, err));
        if ((rc = sbl_expr_parse(&id_expr, &id_e, err)) != 0) {
            free_accs(accs, nacc);
            return rc;
        }
    }

    gtable_t t;
    gtable_init(&t);
    sbl_sorter_t *so = NULL; /* set once the groups were spilled */
    size_t limit = sbl_mem_limit(SBL_LIM_GROUP);
    bool disk = sbl_mem_disk_ok(env->allow_disk);
    sbl_buf_t kb;
    sbl_buf_init(&kb);

    for (size_t d = 0; d < dv->n && rc == 0; d++) {
        const bson_t *doc = dv->v[d];
        bson_value_t idv;
        if (ids != NULL)
            bson_value_copy(&ids[d], &idv);
        else if ((rc = sbl_agg_eval(env, id_e, doc, &idv, err)) != 0)
            break;
        if (idv.value_type == BSON_TYPE_EOD)
            idv.value_type = BSON_TYPE_NULL;
        sbl_buf_reset(&kb);
        sbl_key_append_coll(&kb, &idv, false, env->coll);
        group_t *g = gtable_get(&t, &kb, &idv, d, nacc);
        bson_value_destroy(&idv);
        for (size_t a = 0; a < nacc && rc == 0; a++) {
            bson_value_t v;
            size_t before = g->accs[a].bytes;
            if (mode & G_MERGE) { /* doc holds a shard's partial state per accumulator */
                bson_iter_t st;
                if (bson_iter_init_find(&st, doc, accs[a].field) && BSON_ITER_HOLDS_DOCUMENT(&st))
                    rc = combine(&accs[a], &g->accs[a], &st, env->coll, err);
                t.bytes += g->accs[a].bytes - before;
                continue;
            }
            if (accs[a].kind == A_COUNT) {
                rc = accumulate(&accs[a], &g->accs[a], NULL, false, env->coll, err);
                continue;
            }
            if (accs[a].kind == A_ACCUMULATOR) {
                acc_state_t *x = &g->accs[a];
                rc = sbl_js_acc_step(env, accs[a].js, accs[a].e, &x->val, &x->seen, doc, err);
                x->bytes = x->seen ? value_bytes(&x->val) : 0;
                t.bytes += x->bytes - before;
                continue;
            }
            if (accs[a].n_e != NULL && g->accs[a].nmax == 0 &&
                (rc = sbl_group_eval_n(env, &accs[a], &g->id, &g->accs[a], err)) != 0)
                break;
            if ((rc = accs[a].top != NULL ? sbl_top_item(env, accs[a].top, doc, &v, err)
                                          : sbl_agg_eval(env, accs[a].e, doc, &v, err)) != 0)
                break;
            bool miss = v.value_type == BSON_TYPE_EOD;
            if (miss)
                v.value_type = BSON_TYPE_NULL;
            rc = accumulate(&accs[a], &g->accs[a], &v, miss, env->coll, err);
            t.bytes += g->accs[a].bytes - before; /* wraps correctly when it shrank */
            bson_value_destroy(&v);
        }
        if (rc == 0 && t.bytes > limit) {
            if (!disk) {
                rc = sbl_mem_error(SBL_LIM_GROUP, err);
                break;
            }
            if (so == NULL)
                so = sbl_sorter_new(cmp_run_key, NULL, SIZE_MAX, false);
            rc = gtable_to_sorter(&t, nacc, so, true, err);
        }
        if (rc == 0 && (d & 1023) == 1023)
            rc = sbl_op_check_interrupt(env->ctx, err);
    }

    sbl_docvec_t out = {0};
    bool partial = (mode & G_PARTIAL) != 0;
    if (rc == 0 && so != NULL) {
        if ((rc = gtable_to_sorter(&t, nacc, so, false, err)) == 0)
            rc = merge_spilled(so, accs, nacc, env->coll, partial, &out, err);
    } else if (rc == 0) {
        for (size_t i = 0; i < t.n; i++)
            sbl_docvec_push(&out, group_result(&t.groups[i].id, accs, nacc, t.groups[i].accs,
                                               partial));
    }
    gtable_clear(&t, nacc);
    free(t.groups);
    free(t.tab);
    sbl_sorter_free(so);
    sbl_buf_destroy(&kb);
    free_accs(accs, nacc);
    sbl_expr_free(id_e);
    if (with_id != NULL)
        bson_destroy(with_id);
    if (rc != 0) {
        sbl_docvec_clear(&out);
        return rc;
    }
    sbl_docvec_clear(dv);
    *dv = out;
    return 0;
}
