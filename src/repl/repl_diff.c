/*
 * repl_diff.c: the difference between a document's pre- and post-image in
 * the form of mongod's "$v: 2" update entries (doc_diff): {d: {f: false},
 * u: {f: v}, i: {f: v}, s<f>: <sub-diff>} for documents and {a: true,
 * l: <new length>, u<n>: v, s<n>: <sub-diff>} for arrays.  Update entries
 * carry it (field "diff") so change streams can say what changed.  And the
 * other way: a diff applied to a document as mongod's oplog application
 * applies one (sbl_repl_diff_apply), for entries in mongod's own form
 * (o: {$v: 2, diff}).
 *
 * What must stay true: applying the diff to the pre-image gives a document
 * equal to the post-image, field order aside (a field that moved is
 * reported as updated), and byte for byte when the fields both documents
 * have are in the same order (test_repl.c's round trips).
 */
#include "repl/repl_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"

/* A document or array value as a bson_t view (here rather than doc_cmp.c's
 * sbl_iter_doc: the tools link this file with doc_append.c alone). */
static bool iter_doc(const bson_iter_t *it, bson_t *out)
{
    uint32_t len = 0;
    const uint8_t *data = NULL;
    if (BSON_ITER_HOLDS_DOCUMENT(it))
        bson_iter_document(it, &len, &data);
    else if (BSON_ITER_HOLDS_ARRAY(it))
        bson_iter_array(it, &len, &data);
    return data != NULL && bson_init_static(out, data, len);
}

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

static void diff_array(const bson_iter_t *oldit, const bson_iter_t *newit, bson_t *out,
                       bool *exact);
static void diff_doc(const bson_t *old_doc, const bson_t *new_doc, bson_t *out, bool *exact);

/* One changed field: a sub-diff when both sides are documents (or both
 * arrays), else an update.  Appends to s (sub-diffs) or u; *exact goes
 * false when a sub-diff would not give the new value back byte for byte. */
static void diff_value(const char *key, const bson_iter_t *o, const bson_iter_t *n, bson_t *u,
                       bson_t *subs, bool *exact)
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
        iter_doc(o, &od);
        iter_doc(n, &nd);
        diff_doc(&od, &nd, &sub, exact);
        if (!bson_empty(&sub))
            bson_append_document(subs, skey, -1, &sub);
        bson_destroy(&sub);
    } else {
        bson_t sub = BSON_INITIALIZER;
        diff_array(o, n, &sub, exact);
        bson_append_document(subs, skey, -1, &sub);
        bson_destroy(&sub);
    }
}

static void diff_array(const bson_iter_t *oldit, const bson_iter_t *newit, bson_t *out, bool *exact)
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
        /* the applier numbers the elements it writes: other keys are not kept */
        if (strcmp(bson_iter_key(&n), key) != 0 ||
            (more_old && strcmp(bson_iter_key(&o), key) != 0))
            *exact = false;
        if (more_old) {
            if (!same_value(&o, &n)) {
                bson_t one_u = BSON_INITIALIZER, one_s = BSON_INITIALIZER;
                diff_value(key, &o, &n, &one_u, &one_s, exact);
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

/* The diff of two documents.  *exact stays true only where it is plain
 * that the diff, applied, gives new_doc's bytes: the same keys in the same
 * order (each changed value is updated in place, where its key is first
 * found), and so on down every sub-diff.  The general path (fields removed,
 * added or moved) says false: the writer then checks by applying it. */
static void diff_doc(const bson_t *old_doc, const bson_t *new_doc, bson_t *out, bool *exact)
{
    bson_t d = BSON_INITIALIZER, u = BSON_INITIALIZER, ins = BSON_INITIALIZER,
           subs = BSON_INITIALIZER;
    bson_iter_t n, o, first;

    if (same_keys(old_doc, new_doc) && bson_iter_init(&o, old_doc) &&
        bson_iter_init(&n, new_doc)) {
        while (bson_iter_next(&o) && bson_iter_next(&n)) {
            if (same_value(&o, &n))
                continue;
            /* a key the document has twice: the applier would update the first */
            if (*exact &&
                (!bson_iter_init_find(&first, old_doc, bson_iter_key(&o)) || first.off != o.off))
                *exact = false;
            diff_value(bson_iter_key(&n), &o, &n, &u, &subs, exact);
        }
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
    *exact = false;
    if (bson_iter_init(&n, new_doc))
        while (bson_iter_next(&n)) {
            bson_iter_t f;
            const char *k = bson_iter_key(&n);
            if (!bson_iter_init_find(&f, old_doc, k))
                sbl_append_iter(&ins, k, -1, &n);
            else if (!same_value(&f, &n))
                diff_value(k, &f, &n, &u, &subs, exact);
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

bool sbl_repl_diff_exact(const bson_t *old_doc, const bson_t *new_doc, bson_t *out)
{
    bool exact = true;
    diff_doc(old_doc, new_doc, out, &exact);
    return exact;
}

void sbl_repl_diff(const bson_t *old_doc, const bson_t *new_doc, bson_t *out)
{
    (void)sbl_repl_diff_exact(old_doc, new_doc, out);
}

/* ---- applying a diff ------------------------------------------------------ */

/* One indexed part of an array diff: u<n> (a new value) or s<n> (a sub-diff). */
typedef struct array_part {
    uint32_t index;
    bool sub;
    bson_iter_t it;
} array_part_t;

static int apply_doc(const bson_t *pre, const bson_t *diff, bson_t *out, int depth, sbl_err_t *err);

static int cmp_part(const void *a, const void *b)
{
    const array_part_t *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Whether key is "<c><decimal index>" with no leading zero; its index. */
static bool index_key(const char *key, char c, uint32_t *index)
{
    if (key[0] != c || key[1] < '0' || key[1] > '9' || (key[1] == '0' && key[2] != '\0'))
        return false;
    uint64_t v = 0;
    for (const char *p = key + 1; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || (v = v * 10 + (uint64_t)(*p - '0')) > UINT32_MAX / 2)
            return false;
    }
    *index = (uint32_t)v;
    return true;
}

/* One element (or field) of the result: the sub-diff applied to a document
 * or an array of the same kind, else the value kept as it was. */
static int apply_sub(const char *key, const bson_iter_t *pre, const bson_iter_t *sub, bson_t *out,
                     int depth, sbl_err_t *err);

static int apply_array(const bson_iter_t *pre, const bson_t *diff, bson_t *out, int depth,
                       sbl_err_t *err)
{
    bson_iter_t it;
    array_part_t *parts = NULL;
    size_t nparts = 0, cap = 0;
    int64_t len = -1;
    uint32_t prelen = 0, end = 0;
    int rc = 0;
    bson_iter_t p;
    if (pre != NULL && bson_iter_recurse(pre, &p))
        while (bson_iter_next(&p))
            prelen++;
    bson_iter_init(&it, diff);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        uint32_t index;
        if (strcmp(k, "a") == 0)
            continue;
        if (strcmp(k, "l") == 0 && BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) >= 0 &&
            bson_iter_as_int64(&it) <= UINT32_MAX / 2) {
            len = bson_iter_as_int64(&it);
            continue;
        }
        bool sub = index_key(k, 's', &index);
        if (!sub && !index_key(k, 'u', &index)) {
            rc = sbl_err_set(err, SBL_E_FailedToParse,
                             "an array diff's field '%s' is none of a, l, u<index> or s<index>", k);
            goto done;
        }
        if (sub && !BSON_ITER_HOLDS_DOCUMENT(&it)) {
            rc = sbl_err_set(err, SBL_E_FailedToParse, "an array diff's '%s' is not a document", k);
            goto done;
        }
        if (nparts == cap) {
            cap = cap ? cap * 2 : 8;
            parts = bson_realloc(parts, cap * sizeof(*parts));
        }
        parts[nparts++] = (array_part_t){index, sub, it};
        if (index + 1 > end)
            end = index + 1;
    }
    if (nparts > 1)
        qsort(parts, nparts, sizeof(*parts), cmp_part);
    if (len < 0)
        len = prelen > end ? prelen : end;
    bool more = pre != NULL && bson_iter_recurse(pre, &p) && bson_iter_next(&p);
    size_t j = 0;
    for (uint32_t i = 0; i < (uint32_t)len && rc == 0; i++) {
        char key[16];
        snprintf(key, sizeof(key), "%u", i);
        while (j < nparts && parts[j].index < i)
            j++;
        const array_part_t *u = NULL, *s = NULL;
        for (size_t k = j; k < nparts && parts[k].index == i; k++)
            *(parts[k].sub ? &s : &u) = &parts[k];
        if (u != NULL)
            sbl_append_iter(out, key, -1, &u->it);
        else if (s != NULL && more)
            rc = apply_sub(key, &p, &s->it, out, depth, err);
        else if (more)
            sbl_append_iter(out, key, -1, &p);
        else
            bson_append_null(out, key, -1);
        if (more)
            more = bson_iter_next(&p);
    }
done:
    bson_free(parts);
    return rc;
}

static int apply_sub(const char *key, const bson_iter_t *pre, const bson_iter_t *sub, bson_t *out,
                     int depth, sbl_err_t *err)
{
    bson_t d, child;
    bson_iter_t a;
    int rc = 0;
    if (depth > 200)
        return sbl_err_set(err, SBL_E_FailedToParse, "a diff nested more than 200 deep");
    iter_doc(sub, &d);
    bool array_diff = bson_iter_init_find(&a, &d, "a");
    if (array_diff && BSON_ITER_HOLDS_ARRAY(pre)) {
        bson_append_array_begin(out, key, -1, &child);
        rc = apply_array(pre, &d, &child, depth + 1, err);
        bson_append_array_end(out, &child);
    } else if (!array_diff && BSON_ITER_HOLDS_DOCUMENT(pre)) {
        bson_t pd;
        iter_doc(pre, &pd);
        bson_append_document_begin(out, key, -1, &child);
        rc = apply_doc(&pd, &d, &child, depth + 1, err);
        bson_append_document_end(out, &child);
    } else {
        sbl_append_iter(out, key, -1, pre); /* not of the diff's kind: kept (an entry replayed) */
    }
    return rc;
}

/* The document diff's parts: d, u, i (each a document or empty) and its
 * sub-diffs (the s<field> fields, kept in diff). */
static int parse_doc_diff(const bson_t *diff, bson_t *d, bson_t *u, bson_t *ins, sbl_err_t *err)
{
    bson_iter_t it;
    bson_init(d);
    bson_init(u);
    bson_init(ins);
    bson_iter_init(&it, diff);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bson_t *part = strcmp(k, "d") == 0   ? d
                       : strcmp(k, "u") == 0 ? u
                       : strcmp(k, "i") == 0 ? ins
                                             : NULL;
        if ((part != NULL || k[0] == 's') && !BSON_ITER_HOLDS_DOCUMENT(&it))
            return sbl_err_set(err, SBL_E_FailedToParse, "a diff's '%s' is not a document", k);
        if (part == NULL && k[0] != 's')
            return sbl_err_set(err, SBL_E_FailedToParse,
                               "a diff's field '%s' is none of d, u, i or s<field>", k);
        if (part != NULL)
            iter_doc(&it, part);
    }
    return 0;
}

static int apply_doc(const bson_t *pre, const bson_t *diff, bson_t *out, int depth, sbl_err_t *err)
{
    bson_t d, u, ins;
    bson_iter_t p, f;
    char skey[512];
    SBL_RET(parse_doc_diff(diff, &d, &u, &ins, err));
    bool any_u = !bson_empty(&u), any_i = !bson_empty(&ins);
    if (bson_iter_init(&p, pre))
        while (bson_iter_next(&p)) {
            const char *k = bson_iter_key(&p);
            size_t klen = strlen(k);
            if ((!bson_empty(&d) && bson_iter_init_find(&f, &d, k)) ||
                (any_i && bson_iter_init_find(&f, &ins, k)))
                continue; /* removed, or inserted again at the end below */
            if (any_u && bson_iter_init_find(&f, &u, k)) {
                sbl_append_iter(out, k, (int)klen, &f);
                continue;
            }
            skey[0] = 's';
            if (klen + 2 <= sizeof(skey)) {
                memcpy(skey + 1, k, klen + 1);
                if (bson_iter_init_find(&f, diff, skey)) {
                    SBL_RET(apply_sub(k, &p, &f, out, depth, err));
                    continue;
                }
            }
            sbl_append_iter(out, k, (int)klen, &p);
        }
    /* an update of a field the document lacks (an entry replayed over a
     * later state) adds it, as mongod's oplog application does */
    if (any_u && bson_iter_init(&f, &u))
        while (bson_iter_next(&f)) {
            bson_iter_t q;
            if (!bson_iter_init_find(&q, pre, bson_iter_key(&f)))
                sbl_append_iter(out, bson_iter_key(&f), -1, &f);
        }
    if (any_i && bson_iter_init(&f, &ins))
        while (bson_iter_next(&f))
            sbl_append_iter(out, bson_iter_key(&f), -1, &f);
    return 0;
}

int sbl_repl_diff_apply(const bson_t *pre, const bson_t *diff, bson_t *out, sbl_err_t *err)
{
    return apply_doc(pre, diff, out, 0, err);
}

bool sbl_repl_entry_diff(const bson_t *o, bson_t *diff)
{
    bson_iter_t it;
    return bson_iter_init(&it, o) && bson_iter_next(&it) && strcmp(bson_iter_key(&it), "$v") == 0 &&
           bson_iter_init_find(&it, o, "diff") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
           iter_doc(&it, diff);
}
