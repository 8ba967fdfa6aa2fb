/*
 * upd_seed.c: the starting document of an upsert.  MongoDB copies the
 * query's equality conditions ({a: 5}, {a: {$eq: 5}}, {"a.b": 5}, and those
 * inside $and or a one-clause $or) into the new document before applying
 * the update; other conditions are ignored.
 *
 * What must stay true: a path is set at most once and never together with
 * one of its prefixes (NotSingleValueField 54 otherwise); _id comes first.
 */
#include "update/upd_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct eq {
    char **comps;
    size_t n;
    const char *path;
    bson_value_t value; /* view into the filter */
} eq_t;

typedef struct eqs {
    eq_t *v;
    size_t n, cap;
} eqs_t;

static int eq_add(eqs_t *e, const char *path, const bson_value_t *value, sbl_err_t *err)
{
    if (e->n == e->cap) {
        e->cap = e->cap ? e->cap * 2 : 8;
        e->v = bson_realloc(e->v, e->cap * sizeof(*e->v));
    }
    eq_t *q = &e->v[e->n];
    memset(q, 0, sizeof(*q));
    SBL_RET(upd_split_path(path, &q->comps, &q->n, err));
    q->path = path;
    q->value = *value;
    e->n++;
    return 0;
}

static bool first_key_is_operator(const bson_value_t *v)
{
    bson_t b;
    bson_iter_t it;
    return v->value_type == BSON_TYPE_DOCUMENT &&
           bson_init_static(&b, v->value.v_doc.data, v->value.v_doc.data_len) &&
           bson_iter_init(&it, &b) && bson_iter_next(&it) && bson_iter_key(&it)[0] == '$';
}

static int collect(const bson_t *filter, eqs_t *e, sbl_err_t *err);

/* Recurse into the documents of a $and (or one-clause $or) array. */
static int collect_clauses(bson_iter_t *it, bool only_if_single, eqs_t *e, sbl_err_t *err)
{
    bson_iter_t sub;
    bson_t arr, clause;
    const uint8_t *data;
    uint32_t len;

    if (!BSON_ITER_HOLDS_ARRAY(it))
        return 0;
    bson_iter_array(it, &len, &data);
    if (!bson_init_static(&arr, data, len))
        return 0;
    if (only_if_single && bson_count_keys(&arr) != 1)
        return 0;
    bson_iter_init(&sub, &arr);
    while (bson_iter_next(&sub)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&sub))
            continue;
        bson_iter_document(&sub, &len, &data);
        if (bson_init_static(&clause, data, len))
            SBL_RET(collect(&clause, e, err));
    }
    return 0;
}

static int collect(const bson_t *filter, eqs_t *e, sbl_err_t *err)
{
    bson_iter_t it, ops;

    if (!bson_iter_init(&it, filter))
        return 0;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        const bson_value_t *v = bson_iter_value(&it);
        if (strcmp(k, "$and") == 0) {
            SBL_RET(collect_clauses(&it, false, e, err));
        } else if (strcmp(k, "$or") == 0) {
            SBL_RET(collect_clauses(&it, true, e, err));
        } else if (k[0] == '$') {
            continue;
        } else if (first_key_is_operator(v)) {
            bson_iter_recurse(&it, &ops);
            while (bson_iter_next(&ops))
                if (strcmp(bson_iter_key(&ops), "$eq") == 0)
                    SBL_RET(eq_add(e, k, bson_iter_value(&ops), err));
        } else if (v->value_type != BSON_TYPE_REGEX) {
            SBL_RET(eq_add(e, k, v, err));
        }
    }
    return 0;
}

static int eq_cmp(const void *x, const void *y)
{
    const eq_t *a = x, *b = y;
    for (size_t i = 0; i < a->n && i < b->n; i++) {
        int c = strcmp(a->comps[i], b->comps[i]);
        if (c != 0)
            return c;
    }
    return a->n < b->n ? -1 : a->n > b->n;
}

static bool eq_prefix(const eq_t *a, const eq_t *b)
{
    if (a->n > b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->comps[i], b->comps[i]) != 0)
            return false;
    return true;
}

int sbl_upsert_seed(const bson_t *filter, bson_t *out, sbl_err_t *err)
{
    eqs_t e = {0};
    upd_node_t *root = upd_node_new(NULL, BSON_TYPE_DOCUMENT);
    sbl_err_t local;
    int rc = 0;

    if (err == NULL)
        err = &local;

    SBL_ERR(collect(filter, &e, err));
    if (e.n > 1)
        qsort(e.v, e.n, sizeof(*e.v), eq_cmp);
    for (size_t i = 1; i < e.n; i++) {
        if (!eq_prefix(&e.v[i - 1], &e.v[i]))
            continue;
        if (e.v[i - 1].n == e.v[i].n)
            rc = sbl_err_set(err, SBL_E_NotSingleValueField,
                             "cannot infer query fields to set, path '%s' is matched twice",
                             e.v[i].path);
        else
            rc = sbl_err_set(err, SBL_E_NotSingleValueField,
                             "cannot infer query fields to set, both paths '%s' and '%s' are "
                             "matched",
                             e.v[i].path, e.v[i - 1].path);
        goto err;
    }
    for (size_t i = 0; i < e.n; i++) {
        upd_node_t *d = root;
        for (size_t j = 0; j + 1 < e.v[i].n; j++) {
            upd_node_t *c = upd_node_child(d, e.v[i].comps[j], NULL);
            if (c == NULL) {
                c = upd_node_new(e.v[i].comps[j], BSON_TYPE_DOCUMENT);
                upd_node_insert(d, d->nkids, c);
            }
            d = c;
        }
        upd_node_insert(d, d->nkids,
                        upd_node_from_value(e.v[i].comps[e.v[i].n - 1], &e.v[i].value));
    }
    upd_node_write(root, out, true);
err:
    for (size_t i = 0; i < e.n; i++)
        upd_comps_free(e.v[i].comps, e.v[i].n);
    bson_free(e.v);
    upd_node_free(root);
    return rc;
}
