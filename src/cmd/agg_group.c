/*
 * agg_group.c: the $group stage and its accumulators ($sum, $avg, $min,
 * $max, $first, $last, $push, $addToSet, $count, $mergeObjects).  Expressions
 * are parsed once per stage (src/expr) and evaluated per document.
 *
 * Groups are found through a hash of the group key's order-preserving
 * encoding (sbl_key_append), so keys that compare equal in MongoDB's order
 * (1, 1.0 and NumberLong(1)) share a group, as they do in MongoDB.  Groups
 * come out in the order they were first seen.
 */
#include "cmd/crud_int.h"
#include "common/buf.h"
#include "doc/doc.h"
#include "expr/expr.h"

#include <stdlib.h>
#include <string.h>

#define SBL_E_GroupIdMissing 15955
#define SBL_E_BadAccumulator 15952
#define SBL_E_AccumulatorNotObject 40234

enum acc_kind {
    A_SUM,
    A_AVG,
    A_MIN,
    A_MAX,
    A_FIRST,
    A_LAST,
    A_PUSH,
    A_ADDTOSET,
    A_COUNT,
    A_MERGE
};

static const struct {
    const char *name;
    enum acc_kind kind;
} acc_table[] = {/* sorted by name */
                 {"$addToSet", A_ADDTOSET}, {"$avg", A_AVG},   {"$count", A_COUNT},
                 {"$first", A_FIRST},       {"$last", A_LAST}, {"$max", A_MAX},
                 {"$mergeObjects", A_MERGE}, {"$min", A_MIN},  {"$push", A_PUSH},
                 {"$sum", A_SUM}};

typedef struct acc_spec {
    const char *field;
    enum acc_kind kind;
    bson_value_t expr; /* a view into the stage spec */
    sbl_expr_t *e;     /* parsed expr */
} acc_spec_t;

typedef struct acc_state {
    int64_t isum;
    double dsum;
    bool has_double, has_long, overflow;
    int64_t count;
    bson_value_t val; /* min/max/first/last; BSON_TYPE_EOD when unset */
    bool seen;
    bson_value_t *items; /* push/addToSet */
    size_t nitems, capitems;
} acc_state_t;

typedef struct group {
    uint8_t *key;
    size_t keylen;
    uint64_t hash;
    bson_value_t id;
    acc_state_t *accs;
} group_t;

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
    if (a->nitems == a->capitems) {
        a->capitems = a->capitems ? a->capitems * 2 : 8;
        a->items = realloc(a->items, a->capitems * sizeof(*a->items));
        if (a->items == NULL)
            abort();
    }
    bson_value_copy(v, &a->items[a->nitems++]);
}

static void add_number(acc_state_t *a, const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64: {
        int64_t x = v->value_type == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
        if (v->value_type == BSON_TYPE_INT64)
            a->has_long = true;
        if (__builtin_add_overflow(a->isum, x, &a->isum)) {
            a->overflow = true;
            a->dsum += (double)x;
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

/* coll: how $min, $max and $addToSet compare strings (NULL: binary). */
static void accumulate(const acc_spec_t *s, acc_state_t *a, const bson_value_t *v, bool missing,
                       const sbl_collation_t *coll)
{
    switch (s->kind) {
    case A_SUM:
    case A_AVG:
        if (!missing)
            add_number(a, v);
        break;
    case A_COUNT:
        a->isum++;
        break;
    case A_MIN:
    case A_MAX:
        if (missing || v->value_type == BSON_TYPE_NULL || v->value_type == BSON_TYPE_UNDEFINED)
            break;
        if (!a->seen || (s->kind == A_MIN ? sbl_value_compare_coll(v, &a->val, coll) < 0
                                           : sbl_value_compare_coll(v, &a->val, coll) > 0)) {
            if (a->seen)
                bson_value_destroy(&a->val);
            bson_value_copy(v, &a->val);
            a->seen = true;
        }
        break;
    case A_FIRST:
        if (!a->seen) {
            if (missing)
                v_null_of(v);
            bson_value_copy(v, &a->val);
            a->seen = true;
        }
        break;
    case A_LAST:
        if (a->seen)
            bson_value_destroy(&a->val);
        if (missing)
            v_null_of(v);
        bson_value_copy(v, &a->val);
        a->seen = true;
        break;
    case A_PUSH:
        if (!missing)
            push_item(a, v);
        break;
    case A_ADDTOSET:
        if (missing)
            break;
        for (size_t i = 0; i < a->nitems; i++)
            if (sbl_value_compare_coll(&a->items[i], v, coll) == 0)
                return;
        push_item(a, v);
        break;
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
                    bson_append_iter(&merged, bson_iter_key(&it), -1, &f);
                else
                    bson_append_iter(&merged, bson_iter_key(&it), -1, &it);
            }
            bson_iter_init(&it, &in);
            while (bson_iter_next(&it))
                if (!bson_has_field(&cur, bson_iter_key(&it)))
                    bson_append_iter(&merged, bson_iter_key(&it), -1, &it);
            bson_value_destroy(&a->val);
        } else {
            bson_concat(&merged, &in);
        }
        bson_value_t mv;
        mv.value_type = BSON_TYPE_DOCUMENT;
        mv.value.v_doc.data = (uint8_t *)bson_get_data(&merged);
        mv.value.v_doc.data_len = merged.len;
        bson_value_copy(&mv, &a->val);
        bson_destroy(&merged);
        a->seen = true;
        break;
    }
    }
}

static void append_result(bson_t *out, const acc_spec_t *s, const acc_state_t *a)
{
    switch (s->kind) {
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
            bson_append_value(out, s->field, -1, &a->val);
        else
            bson_append_null(out, s->field, -1);
        break;
    case A_PUSH:
    case A_ADDTOSET: {
        bson_t arr;
        char kb[16];
        bson_append_array_begin(out, s->field, -1, &arr);
        for (size_t i = 0; i < a->nitems; i++)
            bson_append_value(&arr, sbl_crud_key((uint32_t)i, kb), -1, &a->items[i]);
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
    for (size_t i = 0; i < n; i++)
        sbl_expr_free(accs[i].e);
    free(accs);
}

/* Parse {_id: expr, field: {$acc: expr}, ...}. */
static int parse_spec(const bson_t *spec, bson_value_t *id_expr, acc_spec_t **accsp, size_t *np,
                      sbl_err_t *err)
{
    bson_iter_t it, sub;
    bool has_id = false;
    size_t n = 0, cap = bson_count_keys(spec);
    acc_spec_t *accs = calloc(cap + 1, sizeof(*accs));

    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "_id") == 0) {
            sbl_iter_value(&it, id_expr);
            has_id = true;
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
        int rc = sbl_expr_parse(&accs[n].expr, &accs[n].e, err);
        if (rc != 0) {
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

int sbl_agg_group(sbl_docvec_t *dv, const bson_t *spec, const sbl_agg_env_t *env,
                  const bson_value_t *ids, sbl_err_t *err)
{
    bson_value_t id_expr;
    acc_spec_t *accs = NULL;
    sbl_expr_t *id_e = NULL;
    size_t nacc = 0, bytes = 0;
    int rc = 0;

    bson_t *with_id = NULL; /* accs[].field points into it: kept to the end */
    if (ids != NULL) {
        with_id = bson_new();
        bson_append_null(with_id, "_id", 3);
        bson_concat(with_id, spec);
        if ((rc = parse_spec(with_id, &id_expr, &accs, &nacc, err)) != 0) {
            bson_destroy(with_id);
            return rc;
        }
    } else {
        SBL_RET(parse_spec(spec, &id_expr, &accs, &nacc, err));
        if ((rc = sbl_expr_parse(&id_expr, &id_e, err)) != 0) {
            free_accs(accs, nacc);
            return rc;
        }
    }

    group_t *groups = NULL;
    size_t ngroups = 0, capgroups = 0;
    size_t tabsize = 1024;
    size_t *tab = malloc(tabsize * sizeof(*tab)); /* index + 1 into groups; 0 = empty */
    memset(tab, 0, tabsize * sizeof(*tab));
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
        uint64_t h = hash_bytes(kb.data, kb.len);
        size_t slot = h & (tabsize - 1);
        group_t *g = NULL;
        while (tab[slot] != 0) {
            group_t *c = &groups[tab[slot] - 1];
            if (c->hash == h && c->keylen == kb.len && memcmp(c->key, kb.data, kb.len) == 0) {
                g = c;
                break;
            }
            slot = (slot + 1) & (tabsize - 1);
        }
        if (g == NULL) {
            if (ngroups == capgroups) {
                capgroups = capgroups ? capgroups * 2 : 64;
                groups = realloc(groups, capgroups * sizeof(*groups));
                if (groups == NULL)
                    abort();
            }
            g = &groups[ngroups++];
            bytes += kb.len + 64 + nacc * sizeof(acc_state_t);
            g->keylen = kb.len;
            g->key = malloc(kb.len ? kb.len : 1);
            memcpy(g->key, kb.data, kb.len);
            g->hash = h;
            bson_value_copy(&idv, &g->id);
            g->accs = calloc(nacc + 1, sizeof(*g->accs));
            tab[slot] = ngroups;
            if (ngroups * 2 > tabsize) { /* grow and rehash */
                tabsize *= 2;
                tab = realloc(tab, tabsize * sizeof(*tab));
                memset(tab, 0, tabsize * sizeof(*tab));
                for (size_t i = 0; i < ngroups; i++) {
                    size_t s = groups[i].hash & (tabsize - 1);
                    while (tab[s] != 0)
                        s = (s + 1) & (tabsize - 1);
                    tab[s] = i + 1;
                }
            }
        }
        bson_value_destroy(&idv);
        for (size_t a = 0; a < nacc && rc == 0; a++) {
            bson_value_t v;
            if (accs[a].kind == A_COUNT) {
                accumulate(&accs[a], &g->accs[a], NULL, false, env->coll);
                continue;
            }
            if ((rc = sbl_agg_eval(env, accs[a].e, doc, &v, err)) != 0)
                break;
            bool miss = v.value_type == BSON_TYPE_EOD;
            if (miss)
                v.value_type = BSON_TYPE_NULL;
            size_t before = g->accs[a].nitems;
            accumulate(&accs[a], &g->accs[a], &v, miss, env->coll);
            if (g->accs[a].nitems != before && v.value_type >= BSON_TYPE_UTF8 &&
                v.value_type <= BSON_TYPE_ARRAY)
                bytes += v.value_type == BSON_TYPE_UTF8 ? v.value.v_utf8.len
                                                        : v.value.v_doc.data_len;
            if (g->accs[a].nitems != before)
                bytes += sizeof(bson_value_t);
            bson_value_destroy(&v);
        }
    }

    if (rc == 0)
        rc = sbl_agg_check_mem(env, bytes, "$group", err);
    sbl_docvec_t out = {0};
    for (size_t i = 0; i < ngroups; i++) {
        if (rc == 0) {
            bson_t *doc = bson_new();
            bson_append_value(doc, "_id", 3, &groups[i].id);
            for (size_t a = 0; a < nacc; a++)
                append_result(doc, &accs[a], &groups[i].accs[a]);
            sbl_docvec_push(&out, doc);
        }
        for (size_t a = 0; a < nacc; a++)
            acc_state_free(&groups[i].accs[a]);
        free(groups[i].accs);
        free(groups[i].key);
        bson_value_destroy(&groups[i].id);
    }
    free(groups);
    free(tab);
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
