/*
 * group_top.c: what $group's $top, $bottom, $topN and $bottomN need besides
 * group.c's list of kept values (group_int.h): each document becomes one
 * item {o: output, s0: <sortBy's first field or $meta>, s1: ...}, the items compare
 * by the sortBy directions over s0, s1 ... (arrays and missing values as a
 * $sort orders them), and a kept item gives its output (null when missing).
 *
 * What must stay true: an item carries its own sort key, so a shard's or a
 * spilled run's kept items rank again without their documents.
 */
#include "agg/group_int.h"
#include "doc/doc.h"
#include "query/query.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sbl_top {
    sbl_expr_t *item; /* {o: output, s0: "$field0", ...} */
    sbl_sort_t *sort; /* {s0: dir0, ...} */
};

void sbl_top_free(sbl_top_t *t)
{
    if (t == NULL)
        return;
    sbl_expr_free(t->item);
    sbl_sort_free(t->sort);
    free(t);
}

int sbl_top_parse(const char *name, const bson_t *spec, bool single, sbl_top_t **topp,
                  bson_value_t *np, sbl_err_t *err)
{
    bson_iter_t it;
    bson_value_t output = {.value_type = BSON_TYPE_EOD};
    bson_t sort_by, item = BSON_INITIALIZER, internal = BSON_INITIALIZER;
    bool has_sort = false;
    int rc = 0;

    *topp = NULL;
    np->value_type = BSON_TYPE_EOD;
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (!single && strcmp(k, "n") == 0)
            sbl_iter_value(&it, np);
        else if (strcmp(k, "output") == 0)
            sbl_iter_value(&it, &output);
        else if (strcmp(k, "sortBy") == 0 && sbl_iter_doc(&it, &sort_by))
            has_sort = true;
        else if (strcmp(k, "sortBy") == 0)
            return sbl_err_set(err, 10065, "invalid parameter: expected an object (sortBy)");
        else
            return sbl_err_set(err, 5788002, "Unknown argument to %s '%s'", name, k);
    }
    if (!single && np->value_type == BSON_TYPE_EOD)
        return sbl_err_set(err, 5788003, "Missing value for 'n'");
    if (output.value_type == BSON_TYPE_EOD)
        return sbl_err_set(err, 5788004, "Missing value for 'output'");
    if (!has_sort)
        return sbl_err_set(err, 5788005, "Missing value for 'sortBy'");

    sbl_sort_t *check = sbl_sort_new(&sort_by, err); /* $sort's rules and errors */
    if (check == NULL)
        return err->code;
    sbl_sort_free(check);
    if (bson_empty(&sort_by))
        return sbl_err_set(err, 15976, "$sort stage must have at least one sort key");

    sbl_top_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    sbl_append_value(&item, "o", 1, &output);
    bson_iter_init(&it, &sort_by);
    for (int i = 0; bson_iter_next(&it); i++) {
        char s[16], ref[1100];
        snprintf(s, sizeof(s), "s%d", i);
        if (BSON_ITER_HOLDS_DOCUMENT(&it)) { /* {$meta: "textScore"}: the score, highest first */
            sbl_append_iter(&item, s, -1, &it);
            BSON_APPEND_INT32(&internal, s, -1);
            continue;
        }
        snprintf(ref, sizeof(ref), "$%s", bson_iter_key(&it));
        BSON_APPEND_UTF8(&item, s, ref);
        BSON_APPEND_INT32(&internal, s, bson_iter_as_int64(&it) < 0 ? -1 : 1);
    }
    if ((rc = sbl_expr_parse_doc(&item, &t->item, err)) == 0 &&
        (t->sort = sbl_sort_new(&internal, err)) == NULL)
        rc = err->code;
    bson_destroy(&item);
    bson_destroy(&internal);
    if (rc != 0) {
        sbl_top_free(t);
        return rc;
    }
    *topp = t;
    return 0;
}

int sbl_top_item(const sbl_agg_env_t *env, const sbl_top_t *t, const bson_t *doc,
                 bson_value_t *item, sbl_err_t *err)
{
    return sbl_agg_eval(env, t->item, doc, item, err);
}

int sbl_top_compare(const sbl_top_t *t, const bson_value_t *a, const bson_value_t *b,
                    const sbl_collation_t *coll)
{
    bson_t da, db;
    if (a->value_type != BSON_TYPE_DOCUMENT || b->value_type != BSON_TYPE_DOCUMENT)
        return 0;
    bson_init_static(&da, a->value.v_doc.data, a->value.v_doc.data_len);
    bson_init_static(&db, b->value.v_doc.data, b->value.v_doc.data_len);
    sbl_sort_set_collation(t->sort, coll);
    return sbl_sort_compare(t->sort, &da, &db);
}

void sbl_top_output(bson_t *out, const char *key, const bson_value_t *item)
{
    bson_t d;
    bson_iter_t it;
    if (item->value_type == BSON_TYPE_DOCUMENT) {
        bson_init_static(&d, item->value.v_doc.data, item->value.v_doc.data_len);
        if (bson_iter_init_find(&it, &d, "o")) {
            sbl_append_iter(out, key, -1, &it);
            return;
        }
    }
    bson_append_null(out, key, -1);
}
