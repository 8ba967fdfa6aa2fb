/*
 * repl_diff.c: the difference between a document's pre- and post-image in
 * the form of mongod's "$v: 2" update entries (doc_diff): {d: {f: false},
 * u: {f: v}, i: {f: v}, s<f>: <sub-diff>} for documents and {a: true,
 * l: <new length>, u<n>: v, s<n>: <sub-diff>} for arrays.  Update entries
 * carry it (field "diff") so change streams can say what changed.
 *
 * What must stay true: applying the diff to the pre-image gives a document
 * equal to the post-image, field order aside (a field that moved is
 * reported as updated).
 */
#include "repl/repl_int.h"

#include <stdio.h>
#include <string.h>

#include "doc/doc.h"

/* The same type and the same bytes (the value after the key, to the next element). */
static bool same_value(const bson_iter_t *a, const bson_iter_t *b)
{
    if (bson_iter_type(a) != bson_iter_type(b))
        return false;
    uint32_t sa = a->key + (uint32_t)strlen((const char *)a->raw + a->key) + 1;
    uint32_t sb = b->key + (uint32_t)strlen((const char *)b->raw + b->key) + 1;
    uint32_t la = a->next_off - sa, lb = b->next_off - sb;
    return la == lb && memcmp(a->raw + sa, b->raw + sb, la) == 0;
}

static void diff_array(const bson_iter_t *oldit, const bson_iter_t *newit, bson_t *out);

/* One changed field: a sub-diff when both sides are documents (or both
 * arrays), else an update.  Appends to s (sub-diffs) or u. */
static void diff_value(const char *key, const bson_iter_t *o, const bson_iter_t *n, bson_t *u,
                       bson_t *subs)
{
    char skey[512];
    size_t klen = strlen(key);
    bool docs = BSON_ITER_HOLDS_DOCUMENT(o) && BSON_ITER_HOLDS_DOCUMENT(n);
    if ((!docs && !(BSON_ITER_HOLDS_ARRAY(o) && BSON_ITER_HOLDS_ARRAY(n))) ||
        klen + 2 > sizeof(skey)) {
        sbl_append_iter(u, key, -1, n);
        return;
    }
    skey[0] = 's';
    memcpy(skey + 1, key, klen + 1);
    if (docs) {
        bson_t od, nd, sub = BSON_INITIALIZER;
        sbl_iter_doc(o, &od);
        sbl_iter_doc(n, &nd);
        sbl_repl_diff(&od, &nd, &sub);
        if (!bson_empty(&sub))
            bson_append_document(subs, skey, -1, &sub);
        bson_destroy(&sub);
    } else {
        bson_t sub = BSON_INITIALIZER;
        diff_array(o, n, &sub);
        bson_append_document(subs, skey, -1, &sub);
        bson_destroy(&sub);
    }
}

static void diff_array(const bson_iter_t *oldit, const bson_iter_t *newit, bson_t *out)
{
    bson_iter_t o, n;
    uint32_t olen = 0, nlen = 0, i = 0;
    bson_t u = BSON_INITIALIZER, subs = BSON_INITIALIZER;

    bson_iter_recurse(oldit, &o);
    while (bson_iter_next(&o))
        olen++;
    bson_iter_recurse(oldit, &o);
    bson_iter_recurse(newit, &n);
    BSON_APPEND_BOOL(out, "a", true);
    bool more_old = bson_iter_next(&o);
    while (bson_iter_next(&n)) {
        char key[24];
        snprintf(key, sizeof(key), "%u", i);
        if (more_old) {
            if (!same_value(&o, &n)) {
                bson_t one_u = BSON_INITIALIZER, one_s = BSON_INITIALIZER;
                diff_value(key, &o, &n, &one_u, &one_s);
                bson_iter_t f;
                char ukey[32];
                if (bson_iter_init(&f, &one_u) && bson_iter_next(&f)) {
                    snprintf(ukey, sizeof(ukey), "u%u", i);
                    sbl_append_iter(&u, ukey, -1, &f);
                }
                if (bson_iter_init(&f, &one_s) && bson_iter_next(&f))
                    sbl_append_iter(&subs, bson_iter_key(&f), -1, &f);
                bson_destroy(&one_u);
                bson_destroy(&one_s);
            }
            more_old = bson_iter_next(&o);
        } else {
            char ukey[32];
            snprintf(ukey, sizeof(ukey), "u%u", i);
            sbl_append_iter(&u, ukey, -1, &n);
        }
        i++;
    }
    nlen = i;
    if (nlen < olen)
        BSON_APPEND_INT32(out, "l", (int32_t)nlen);
    bson_concat(out, &u);
    bson_concat(out, &subs);
    bson_destroy(&u);
    bson_destroy(&subs);
}

/* The same keys in the same order: an update of existing fields' values,
 * whose diff the two documents walked side by side give (no field removed
 * or inserted; each pair as the general path below pairs them, but without
 * a search of old_doc per field). */
static bool same_keys(const bson_t *old_doc, const bson_t *new_doc)
{
    bson_iter_t o, n;
    if (old_doc->len == 5 || !bson_iter_init(&o, old_doc) || !bson_iter_init(&n, new_doc))
        return false;
    for (;;) {
        bool mo = bson_iter_next(&o), mn = bson_iter_next(&n);
        if (mo != mn)
            return false;
        if (!mo)
            return true;
        if (strcmp(bson_iter_key(&o), bson_iter_key(&n)) != 0)
            return false;
    }
}

void sbl_repl_diff(const bson_t *old_doc, const bson_t *new_doc, bson_t *out)
{
    bson_t d = BSON_INITIALIZER, u = BSON_INITIALIZER, ins = BSON_INITIALIZER,
           subs = BSON_INITIALIZER;
    bson_iter_t n, o;

    if (same_keys(old_doc, new_doc) && bson_iter_init(&o, old_doc) &&
        bson_iter_init(&n, new_doc)) {
        while (bson_iter_next(&o) && bson_iter_next(&n))
            if (!same_value(&o, &n))
                diff_value(bson_iter_key(&n), &o, &n, &u, &subs);
        if (!bson_empty(&u))
            BSON_APPEND_DOCUMENT(out, "u", &u);
        bson_concat(out, &subs);
        bson_destroy(&u);
        bson_destroy(&subs);
        return;
    }
    if (bson_iter_init(&o, old_doc))
        while (bson_iter_next(&o)) {
            bson_iter_t f;
            if (!bson_iter_init_find(&f, new_doc, bson_iter_key(&o)))
                bson_append_bool(&d, bson_iter_key(&o), -1, false);
        }
    if (bson_iter_init(&n, new_doc))
        while (bson_iter_next(&n)) {
            bson_iter_t f;
            const char *k = bson_iter_key(&n);
            if (!bson_iter_init_find(&f, old_doc, k))
                sbl_append_iter(&ins, k, -1, &n);
            else if (!same_value(&f, &n))
                diff_value(k, &f, &n, &u, &subs);
        }
    if (!bson_empty(&d))
        BSON_APPEND_DOCUMENT(out, "d", &d);
    if (!bson_empty(&u))
        BSON_APPEND_DOCUMENT(out, "u", &u);
    if (!bson_empty(&ins))
        BSON_APPEND_DOCUMENT(out, "i", &ins);
    bson_concat(out, &subs);
    bson_destroy(&d);
    bson_destroy(&u);
    bson_destroy(&ins);
    bson_destroy(&subs);
}
