/*
 * sort.c: sort specifications ({a: 1, "b.c": -1}) and the comparison of two
 * documents under one.
 *
 * A document's key for a path is the smallest (ascending) or largest
 * (descending) value the path reaches, walking through arrays the way the
 * matcher does and expanding an array found at the end of the path; a path
 * that reaches nothing sorts as null.  {$natural: ±1} means "no sort".
 */
#include <string.h>

#include "doc/doc.h"
#include "query/query.h"
#include "query/query_int.h"

/* MongoDB's code for a bad sort direction (not in the shared table). */
#define E_SORT_ORDER 15975

typedef struct sort_key {
    char **parts;
    size_t nparts;
    bool desc;
} sort_key_t;

struct sbl_sort {
    sort_key_t *keys;
    size_t nkeys;
    const sbl_collation_t *coll; /* NULL: binary */
    bool text_score;             /* a {$meta: "textScore"} key */
};

void sbl_sort_free(sbl_sort_t *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nkeys; i++) {
        for (size_t k = 0; k < s->keys[i].nparts; k++)
            bson_free(s->keys[i].parts[k]);
        bson_free(s->keys[i].parts);
    }
    bson_free(s->keys);
    bson_free(s);
}

static int add_key(sbl_sort_t *s, const char *path, bool desc, sbl_err_t *err)
{
    sort_key_t *k;
    const char *p = path;

    if (path[0] == '\0')
        return sbl_err_set(err, SBL_E_BadValue, "FieldPath cannot be constructed with empty string");
    s->keys = bson_realloc(s->keys, (s->nkeys + 1) * sizeof(*s->keys));
    k = &s->keys[s->nkeys++];
    memset(k, 0, sizeof(*k));
    k->desc = desc;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot != NULL ? (size_t)(dot - p) : strlen(p);
        if (len == 0)
            return sbl_err_set(err, SBL_E_BadValue,
                               "FieldPath field names may not be empty strings.");
        k->parts = bson_realloc(k->parts, (k->nparts + 1) * sizeof(*k->parts));
        k->parts[k->nparts++] = bson_strndup(p, len);
        if (dot == NULL)
            return 0;
        p = dot + 1;
    }
}

sbl_sort_t *sbl_sort_new(const bson_t *spec, sbl_err_t *err)
{
    sbl_sort_t *s = bson_malloc0(sizeof(*s));
    bson_iter_t it;

    if (spec == NULL || !bson_iter_init(&it, spec))
        return s;
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        double d;

        if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t sub;
            if (bson_iter_recurse(&it, &sub) && bson_iter_find(&sub, "$meta")) {
                if (!BSON_ITER_HOLDS_UTF8(&sub) ||
                    strcmp(bson_iter_utf8(&sub, NULL), "textScore") != 0) {
                    sbl_err_set(err, 31138, "Illegal $meta sort: %s",
                                BSON_ITER_HOLDS_UTF8(&sub) ? bson_iter_utf8(&sub, NULL) : "?");
                    goto err;
                }
                /* the executor's score field, highest first (as mongod) */
                if (add_key(s, SBL_TEXT_SCORE_FIELD, true, err) != 0)
                    goto err;
                s->text_score = true;
                continue;
            }
            goto bad_order;
        }
        if (BSON_ITER_HOLDS_INT32(&it))
            d = bson_iter_int32(&it);
        else if (BSON_ITER_HOLDS_INT64(&it))
            d = (double)bson_iter_int64(&it);
        else if (BSON_ITER_HOLDS_DOUBLE(&it))
            d = bson_iter_double(&it);
        else
            goto bad_order;
        if (d != 1 && d != -1)
            goto bad_order;
        if (strcmp(key, "$natural") == 0)
            continue;
        if (key[0] == '$') {
            sbl_err_set(err, SBL_E_BadValue, "$sort key may not start with $: %s", key);
            goto err;
        }
        if (add_key(s, key, d < 0, err) != 0)
            goto err;
    }
    return s;
bad_order:
    sbl_err_set(err, E_SORT_ORDER,
                "$sort key ordering must be 1 (for ascending) or -1 (for descending)");
err:
    sbl_sort_free(s);
    return NULL;
}

/* The best value seen so far for one key. */
typedef struct best {
    bson_value_t v; /* a view into the document */
    bool have;
    bool desc;
    bool missing; /* the path reached nothing somewhere */
    const sbl_collation_t *coll;
} best_t;

static void consider(best_t *b, const bson_value_t *v)
{
    if (!b->have) {
        b->v = *v;
        b->have = true;
        return;
    }
    int c = sbl_value_compare_coll(v, &b->v, b->coll);
    if (b->desc ? c > 0 : c < 0)
        b->v = *v;
}

static void collect(const sort_key_t *k, const bson_value_t *v, size_t i, best_t *b);

static void collect_doc(const sort_key_t *k, const uint8_t *data, uint32_t len, size_t i,
                        best_t *b)
{
    bson_t d;
    bson_iter_t it;
    bson_value_t v;

    if (!bson_init_static(&d, data, len) || !bson_iter_init_find(&it, &d, k->parts[i])) {
        b->missing = true;
        return;
    }
    sbl_iter_value(&it, &v);
    collect(k, &v, i + 1, b);
}

/* v is the value of part i - 1; continue with part i. */
static void collect(const sort_key_t *k, const bson_value_t *v, size_t i, best_t *b)
{
    bson_t arr;
    bson_iter_t it;

    if (i == k->nparts) {
        if (v->value_type != BSON_TYPE_ARRAY) {
            consider(b, v);
            return;
        }
        bool any = false;
        if (bson_init_static(&arr, v->value.v_doc.data, v->value.v_doc.data_len) &&
            bson_iter_init(&it, &arr)) {
            while (bson_iter_next(&it)) {
                bson_value_t e;
                sbl_iter_value(&it, &e);
                consider(b, &e);
                any = true;
            }
        }
        if (!any)
            b->missing = true; /* an empty array sorts like a missing field */
        return;
    }
    if (v->value_type == BSON_TYPE_DOCUMENT) {
        collect_doc(k, v->value.v_doc.data, v->value.v_doc.data_len, i, b);
        return;
    }
    if (v->value_type != BSON_TYPE_ARRAY) {
        b->missing = true;
        return;
    }
    uint32_t want;
    bool is_index = sbl_path_part_is_index(k->parts[i], &want);
    uint32_t idx = 0;
    if (bson_init_static(&arr, v->value.v_doc.data, v->value.v_doc.data_len) &&
        bson_iter_init(&it, &arr)) {
        while (bson_iter_next(&it)) {
            bson_value_t e;
            sbl_iter_value(&it, &e);
            if (is_index && idx == want)
                collect(k, &e, i + 1, b);
            else if (e.value_type == BSON_TYPE_DOCUMENT)
                collect_doc(k, e.value.v_doc.data, e.value.v_doc.data_len, i, b);
            idx++;
        }
    }
}

/* The sort key of doc for k: the min/max value reached, null when none. */
static void key_of(const sort_key_t *k, const bson_t *doc, const sbl_collation_t *coll,
                   bson_value_t *out)
{
    best_t b = {.desc = k->desc, .coll = coll};

    collect_doc(k, bson_get_data(doc), doc->len, 0, &b);
    if (b.missing) {
        bson_value_t null = {.value_type = BSON_TYPE_NULL};
        consider(&b, &null);
    }
    *out = b.v;
}

int sbl_sort_compare(const sbl_sort_t *s, const bson_t *a, const bson_t *b)
{
    for (size_t i = 0; i < s->nkeys; i++) {
        bson_value_t va, vb;
        key_of(&s->keys[i], a, s->coll, &va);
        key_of(&s->keys[i], b, s->coll, &vb);
        int c = sbl_value_compare_coll(&va, &vb, s->coll);
        if (c != 0)
            return s->keys[i].desc ? (c < 0 ? 1 : -1) : (c < 0 ? -1 : 1);
    }
    return 0;
}

void sbl_sort_set_collation(sbl_sort_t *s, const sbl_collation_t *coll)
{
    s->coll = coll;
}

bool sbl_sort_text_score(const sbl_sort_t *s, bool *onlyp)
{
    if (onlyp != NULL)
        *onlyp = s != NULL && s->text_score && s->nkeys == 1;
    return s != NULL && s->text_score;
}

bool sbl_sort_is_id(const sbl_sort_t *s, bool *descending)
{
    if (s->nkeys != 1 || s->keys[0].nparts != 1 || strcmp(s->keys[0].parts[0], "_id") != 0)
        return false;
    if (descending != NULL)
        *descending = s->keys[0].desc;
    return true;
}
