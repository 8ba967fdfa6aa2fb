/*
 * upd_apply.c: apply a parsed update to one document.  The document is
 * expanded into a tree, each action walks its path (resolving the positional
 * $, $[] and $[<id>], creating missing documents and padding arrays for the
 * operators that create) and edits its target; the tree is then written back
 * with _id first.
 *
 * What must stay true: _id never changes (ImmutableField 66) and is written
 * first; *changed is false exactly when the output bytes equal the input;
 * on error nothing is written to out.
 */
#include "update/upd_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"
#include "update/upd_num.h"

/* MongoDB refuses to pad an array by more than this many elements. */
#define UPD_MAX_PADDING 1500000

/* Concrete paths written by actions that use $[] or $[<id>] (see touched_conflict). */
typedef struct touch {
    char *path;
    size_t owner; /* index of the action that wrote it */
} touch_t;

typedef struct touched {
    touch_t *v;
    size_t n, cap;
} touched_t;

typedef struct walk {
    const upd_ctx_t *cx;
    const upd_action_t *a;
    char **comps;
    size_t n;
    bson_string_t *path; /* the concrete path taken so far */
    touched_t *touched;  /* NULL unless the action uses an array update */
    size_t index;        /* the action's index */
} walk_t;

static void touched_add(touched_t *t, const char *path, size_t owner)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->v = bson_realloc(t->v, t->cap * sizeof(*t->v));
    }
    t->v[t->n].path = bson_strdup(path);
    t->v[t->n++].owner = owner;
}

static void touched_destroy(touched_t *t)
{
    for (size_t i = 0; i < t->n; i++)
        bson_free(t->v[i].path);
    bson_free(t->v);
}

/* Order paths so that a path sorts immediately before the paths it prefixes. */
static int touch_cmp(const void *x, const void *y)
{
    const char *a = ((const touch_t *)x)->path, *b = ((const touch_t *)y)->path;
    for (;; a++, b++) {
        int ca = *a == '.' ? 1 : (unsigned char)*a, cb = *b == '.' ? 1 : (unsigned char)*b;
        if (ca != cb || ca == 0)
            return ca - cb;
    }
}

static bool path_prefixes(const char *p, const char *q)
{
    size_t n = strlen(p);
    return strncmp(p, q, n) == 0 && (q[n] == '\0' || q[n] == '.');
}

/*
 * $[] and $[<id>] paths cannot be checked for conflicts until they meet a
 * document: two actions must not write the same element (or one inside
 * another); MongoDB reports "Update created a conflict at 'a.0'".
 */
static int touched_conflict(touched_t *t, sbl_err_t *err)
{
    if (t->n < 2)
        return 0;
    qsort(t->v, t->n, sizeof(*t->v), touch_cmp);
    for (size_t i = 1; i < t->n; i++) {
        const touch_t *x = &t->v[i - 1], *y = &t->v[i];
        if (x->owner != y->owner && path_prefixes(x->path, y->path))
            return sbl_err_set(err, SBL_E_ConflictingUpdateOperators,
                               "Update created a conflict at '%s'", x->path);
    }
    return 0;
}

static int walk(walk_t *w, upd_node_t *cur, size_t i, sbl_err_t *err);

static const upd_filter_t *find_filter(const sbl_update_t *u, const char *id, size_t len)
{
    for (size_t i = 0; i < u->nfilters; i++)
        if (strlen(u->filters[i].id) == len && strncmp(u->filters[i].id, id, len) == 0)
            return &u->filters[i];
    return NULL;
}

static bool filter_matches(const upd_filter_t *f, const upd_node_t *elem)
{
    bson_t doc = BSON_INITIALIZER;
    bool m;
    upd_node_append(&doc, f->id, elem);
    m = sbl_matcher_match(f->m, &doc, NULL);
    bson_destroy(&doc);
    return m;
}

/* BadValue: "Cannot apply array updates to non-array element a: 1". */
static int not_array(sbl_err_t *err, const char *key, const upd_node_t *n)
{
    bson_string_t *s = bson_string_new(NULL);
    bson_string_append_printf(s, "Cannot apply array updates to non-array element %s: ", key);
    upd_render_node(s, n);
    sbl_err_set(err, SBL_E_BadValue, "%s", s->str);
    bson_string_free(s, true);
    return SBL_E_BadValue;
}

/* PathNotViable: "Cannot create field 'b' in element {a: 1}". */
static int not_viable(sbl_err_t *err, const char *field, const char *key, const upd_node_t *n)
{
    bson_string_t *s = bson_string_new(NULL);
    bson_string_append_printf(s, "Cannot create field '%s' in element {%s: ", field, key);
    upd_render_node(s, n);
    bson_string_append(s, "}");
    sbl_err_set(err, SBL_E_PathNotViable, "%s", s->str);
    bson_string_free(s, true);
    return SBL_E_PathNotViable;
}

/*
 * One step along the path: key names child (existing or not) of cur, where
 * pos is its index in cur->kids when it exists.
 */
static int step(walk_t *w, upd_node_t *cur, const char *cur_key, const char *key, size_t pos,
                upd_node_t *child, size_t i, sbl_err_t *err)
{
    const upd_op_t *op = w->a->op;
    const char *id;
    size_t idlen, idx = 0;
    bool next_is_array_update = i + 1 < w->n && upd_array_update(w->comps[i + 1], &id, &idlen);

    if (w->path->len > 0)
        bson_string_append_c(w->path, '.');
    bson_string_append(w->path, key);

    if (cur->type == BSON_TYPE_ARRAY && child == NULL) {
        /* A missing element: only a numeric component can create one. */
        if (!op->creates)
            return 0;
        if (!upd_parse_index(key, &idx))
            return not_viable(err, key, cur_key, cur);
        if (idx > cur->nkids + UPD_MAX_PADDING)
            return sbl_err_set(err, SBL_E_BadValue,
                               "can't backfill array to larger than %d elements",
                               UPD_MAX_PADDING);
        pos = idx;
    }
    if (i + 1 == w->n) {
        if (w->touched != NULL)
            touched_add(w->touched, w->path->str, w->index);
        upd_target_t t = {cur, key, pos, child, w->path->str};
        return op->apply(w->a, &t, w->cx, err);
    }
    if (child != NULL && upd_node_is_container(child)) {
        if (next_is_array_update && child->type != BSON_TYPE_ARRAY)
            return not_array(err, key, child);
        return walk(w, child, i + 1, err);
    }
    if (child != NULL) {
        if (next_is_array_update)
            return not_array(err, key, child);
        if (!op->creates)
            return 0;
        return not_viable(err, w->comps[i + 1], key, child);
    }
    if (next_is_array_update)
        return sbl_err_set(err, SBL_E_BadValue,
                           "The path '%s' must exist in the document in order to apply array "
                           "updates.",
                           w->path->str);
    if (!op->creates)
        return 0;
    upd_target_t t = {cur, key, pos, NULL, w->path->str};
    upd_target_put(&t, upd_node_new(NULL, BSON_TYPE_DOCUMENT));
    return walk(w, t.node, i + 1, err);
}

static int walk(walk_t *w, upd_node_t *cur, size_t i, sbl_err_t *err)
{
    const char *comp = w->comps[i], *id;
    const char *cur_key = i > 0 ? w->comps[i - 1] : "";
    size_t idlen, saved = w->path->len, pos = 0;
    char key[24];
    int rc = 0;

    if (upd_array_update(comp, &id, &idlen)) {
        const upd_filter_t *f = idlen ? find_filter(w->cx->u, id, idlen) : NULL;
        for (size_t k = 0; rc == 0 && k < cur->nkids; k++) {
            if (f != NULL && !filter_matches(f, cur->kids[k]))
                continue;
            snprintf(key, sizeof(key), "%zu", k);
            rc = step(w, cur, cur_key, key, k, cur->kids[k], i, err);
            bson_string_truncate(w->path, (uint32_t)saved);
        }
        return rc;
    }
    upd_node_t *child = upd_node_child(cur, comp, &pos);
    rc = step(w, cur, cur_key, comp, pos, child, i, err);
    bson_string_truncate(w->path, (uint32_t)saved);
    return rc;
}

/* ---- $rename ------------------------------------------------------------ */

static int rename_array_error(sbl_err_t *err, const char *which, const char *path,
                              const char *field, const upd_ctx_t *cx)
{
    bson_string_t *s = bson_string_new(NULL);
    if (cx->id) {
        bson_string_append(s, "_id: ");
        upd_render_value(s, cx->id);
    } else {
        bson_string_append(s, "no id");
    }
    sbl_err_set(err, SBL_E_BadValue,
                "The %s field cannot be an array element, '%s' in doc with %s has an array "
                "field called '%s'",
                which, path, s->str, field);
    bson_string_free(s, true);
    return SBL_E_BadValue;
}

int upd_apply_rename(const upd_action_t *a, upd_node_t *root, const upd_ctx_t *cx,
                     sbl_err_t *err)
{
    upd_node_t *cur = root, *src, *d = root;
    size_t pos;

    for (size_t i = 0; i + 1 < a->ncomps; i++) {
        cur = upd_node_child(cur, a->comps[i], NULL);
        if (cur == NULL || !upd_node_is_container(cur))
            return 0;
        if (cur->type == BSON_TYPE_ARRAY)
            return rename_array_error(err, "source", a->path, a->comps[i], cx);
    }
    src = upd_node_child(cur, a->comps[a->ncomps - 1], &pos);
    if (src == NULL)
        return 0;
    for (size_t i = 0; i + 1 < a->to_ncomps; i++) {
        upd_node_t *c = upd_node_child(d, a->to_comps[i], NULL);
        if (c == NULL)
            break;
        if (c->type == BSON_TYPE_ARRAY)
            return rename_array_error(err, "destination", a->to, a->to_comps[i], cx);
        if (!upd_node_is_container(c))
            return not_viable(err, a->to_comps[i + 1], a->to_comps[i], c);
        d = c;
    }
    src = cur->type == BSON_TYPE_ARRAY ? upd_node_clone(src, NULL) : upd_node_detach(cur, pos);
    if (cur->type == BSON_TYPE_ARRAY) {
        upd_target_t t = {cur, a->comps[a->ncomps - 1], pos, cur->kids[pos], a->path};
        upd_target_remove(&t);
    }
    d = root;
    for (size_t i = 0; i + 1 < a->to_ncomps; i++) {
        upd_node_t *c = upd_node_child(d, a->to_comps[i], NULL);
        if (c == NULL) {
            c = upd_node_new(a->to_comps[i], BSON_TYPE_DOCUMENT);
            upd_node_insert(d, d->nkids, c);
        }
        d = c;
    }
    upd_node_t *existing = upd_node_child(d, a->to_comps[a->to_ncomps - 1], &pos);
    upd_target_t t = {d, a->to_comps[a->to_ncomps - 1], pos, existing, a->to};
    upd_target_put(&t, src);
    return 0;
}

/* ---- applying ----------------------------------------------------------- */

static bool same_value(const bson_value_t *a, const bson_value_t *b)
{
    if (a->value_type != b->value_type)
        return false;
    return sbl_value_compare(a, b) == 0;
}

/* The first action that touches _id, for the ImmutableField message. */
static const char *id_path(const sbl_update_t *u)
{
    for (size_t i = 0; i < u->nacts; i++) {
        const upd_action_t *a = &u->acts[i];
        if (strcmp(a->comps[0], "_id") == 0)
            return a->path;
        if (a->to_comps && strcmp(a->to_comps[0], "_id") == 0)
            return a->to;
    }
    return "_id";
}

static int check_id(const bson_value_t *id, sbl_err_t *err)
{
    if (id->value_type == BSON_TYPE_ARRAY)
        return sbl_err_set(err, SBL_E_InvalidIdField, "The '_id' value cannot be of type array");
    if (id->value_type == BSON_TYPE_REGEX)
        return sbl_err_set(err, SBL_E_InvalidIdField, "The '_id' value cannot be of type regex");
    return 0;
}

static int apply_replacement(const sbl_update_t *u, const bson_t *old, bson_t *out,
                             sbl_err_t *err)
{
    bson_iter_t oit, rit, it;
    bool old_has = bson_iter_init_find(&oit, old, "_id");
    bool repl_has = bson_iter_init_find(&rit, u->repl, "_id");

    if (old_has && repl_has && !same_value(bson_iter_value(&oit), bson_iter_value(&rit))) {
        bson_string_t *s = bson_string_new(NULL);
        upd_render_value(s, bson_iter_value(&rit));
        sbl_err_set(err, SBL_E_ImmutableField,
                    "After applying the update, the (immutable) field '_id' was found to have "
                    "been altered to _id: %s",
                    s->str);
        bson_string_free(s, true);
        return SBL_E_ImmutableField;
    }
    if (repl_has)
        SBL_RET(check_id(bson_iter_value(&rit), err));
    if (old_has || repl_has)
        sbl_append_value(out, "_id", 3, bson_iter_value(old_has ? &oit : &rit));
    bson_iter_init(&it, u->repl);
    while (bson_iter_next(&it))
        if (strcmp(bson_iter_key(&it), "_id") != 0)
            sbl_append_value(out, bson_iter_key(&it), (int)bson_iter_key_len(&it),
                               bson_iter_value(&it));
    return 0;
}

/* Run every action over the tree. */
static int apply_actions(const sbl_update_t *u, upd_node_t *root, int32_t array_pos,
                         const upd_ctx_t *cx, sbl_err_t *err)
{
    char idx[24];
    touched_t touched = {0};
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < u->nacts; i++) {
        const upd_action_t *a = &u->acts[i];
        walk_t w = {cx, a, a->comps, a->ncomps, NULL, NULL, i};
        char **comps = NULL;

        if (strcmp(a->op->name, "$setOnInsert") == 0 && !cx->is_insert)
            continue;
        if (a->op->apply == NULL) {
            rc = upd_apply_rename(a, root, cx, err);
            continue;
        }
        for (size_t j = 1; j < a->ncomps && w.touched == NULL; j++)
            if (strncmp(a->comps[j], "$[", 2) == 0)
                w.touched = &touched;
        if (a->positional >= 0) {
            if (array_pos < 0) {
                rc = sbl_err_set(err, SBL_E_BadValue,
                                   "The positional operator did not find the match needed from "
                                   "the query.");
                break;
            }
            snprintf(idx, sizeof(idx), "%" PRId32, array_pos); /* only here: ~650 instructions */
            comps = bson_malloc(a->ncomps * sizeof(*comps));
            memcpy(comps, a->comps, a->ncomps * sizeof(*comps));
            comps[a->positional] = idx;
            w.comps = comps;
        }
        w.path = bson_string_new(NULL);
        rc = walk(&w, root, 0, err);
        bson_string_free(w.path, true);
        bson_free(comps);
    }
    if (rc == 0)
        rc = touched_conflict(&touched, err);
    touched_destroy(&touched);
    return rc;
}

/* A $inc or $mul (false: another operator). */
static bool is_arith(const upd_action_t *a)
{
    return a->op->name[1] == 'i' ? strcmp(a->op->name, "$inc") == 0
                                 : strcmp(a->op->name, "$mul") == 0;
}

/* The value a top-level $set, $inc or $mul gives a's field of old: $set's
 * operand, or the arithmetic on old's number as apply_arith does it.  False
 * when the tree must decide: the field missing (a $inc creates it), not a
 * number, or the arithmetic overflowing (errors the tree path words). */
static bool top_level_value(const upd_action_t *a, const bson_t *old, bson_value_t *v)
{
    if (!is_arith(a)) {
        *v = a->arg;
        return true;
    }
    bson_iter_t it;
    if (!bson_iter_init_find(&it, old, a->path))
        return false;
    bson_type_t t = bson_iter_type(&it);
    if (t != BSON_TYPE_INT32 && t != BSON_TYPE_INT64 && t != BSON_TYPE_DOUBLE &&
        t != BSON_TYPE_DECIMAL128)
        return false;
    return upd_num_arith(a->op->name[1] == 'm', bson_iter_value(&it), &a->arg, v);
}

/*
 * The common update, {$set: {f: scalar, ...}} or {$inc: {f: n}} ($mul too)
 * on top-level fields other than _id that old already holds (old's first
 * field being _id, as stored documents have it), needs no tree: the result
 * is old's bytes with those values swapped in place, copied span by span
 * (the place and value the tree would give them).  False (result untouched)
 * when u or old is not of that shape; the tree path then decides.
 */
static bool apply_top_level_sets(const sbl_update_t *u, const bson_t *old, bson_t *result)
{
    enum { MAX_SETS = 16 };
    if (u->replacement || u->nacts == 0 || u->nacts > MAX_SETS)
        return false;
    for (size_t i = 0; i < u->nacts; i++) {
        const upd_action_t *a = &u->acts[i];
        if ((strcmp(a->op->name, "$set") != 0 && !is_arith(a)) || a->ncomps != 1 ||
            a->positional >= 0 || strcmp(a->path, "_id") == 0 ||
            a->arg.value_type == BSON_TYPE_DOCUMENT || a->arg.value_type == BSON_TYPE_ARRAY)
            return false;
    }
    bson_iter_t it;
    if (!bson_iter_init(&it, old) || !bson_iter_next(&it) || strcmp(bson_iter_key(&it), "_id") != 0)
        return false;
    /* The new values as elements, each with its field name. */
    bson_t vals = BSON_INITIALIZER;
    uint32_t at[MAX_SETS];
    for (size_t i = 0; i < u->nacts; i++) {
        bson_value_t v;
        if (!top_level_value(&u->acts[i], old, &v)) {
            bson_destroy(&vals);
            return false;
        }
        at[i] = vals.len - 1; /* the element starts where the terminator is */
        sbl_append_value(&vals, u->acts[i].path, -1, &v);
    }
    const uint8_t *od = bson_get_data(old), *vd = bson_get_data(&vals);
    /* span: where old's bytes still to copy begin; a replaced field's old
     * bytes end where the next field (or the terminator) begins. */
    size_t cap = old->len + vals.len, n = 4, span = 4, found = 0;
    bool skipping = false;
    uint8_t *nb = bson_malloc(cap);
    do {
        uint32_t off = bson_iter_offset(&it);
        if (skipping)
            span = off;
        skipping = false;
        const char *k = bson_iter_key(&it);
        size_t i = 0;
        while (i < u->nacts && !(u->acts[i].path[0] == k[0] && strcmp(u->acts[i].path, k) == 0))
            i++;
        if (i == u->nacts)
            continue;
        /* copy old's bytes up to this field, then the new element */
        uint32_t vend = i + 1 < u->nacts ? at[i + 1] : vals.len - 1;
        memcpy(nb + n, od + span, off - span);
        n += off - span;
        memcpy(nb + n, vd + at[i], vend - at[i]);
        n += vend - at[i];
        found++;
        skipping = true;
    } while (bson_iter_next(&it));
    if (skipping)
        span = old->len - 1;
    bool ok = found == u->nacts && n + (old->len - span) <= cap;
    if (ok) {
        memcpy(nb + n, od + span, old->len - span); /* the rest, terminator included */
        n += old->len - span;
        nb[0] = (uint8_t)n, nb[1] = (uint8_t)(n >> 8), nb[2] = (uint8_t)(n >> 16);
        nb[3] = (uint8_t)(n >> 24);
        bson_t view;
        ok = bson_init_static(&view, nb, n) && bson_concat(result, &view);
    }
    bson_free(nb);
    bson_destroy(&vals);
    return ok; /* not all found: a field to create, whose place is the tree's to decide */
}

int sbl_update_apply(const sbl_update_t *u, const bson_t *old, int32_t array_pos, bool is_insert,
                     int64_t now_ms, bson_t *out, bool *changed, sbl_err_t *err)
{
    upd_ctx_t cx = {u, is_insert, now_ms, NULL};
    bson_iter_t oit, nit;
    bson_t result = BSON_INITIALIZER;
    upd_node_t *root = NULL;
    bool old_has;
    sbl_err_t local;
    int rc = 0;

    if (err == NULL)
        err = &local;
    *changed = false;
    old_has = bson_iter_init_find(&oit, old, "_id");
    if (u->replacement) {
        SBL_ERR(apply_replacement(u, old, &result, err));
    } else if (!is_insert && old_has && apply_top_level_sets(u, old, &result)) {
        /* _id is not among the fields set: it is unchanged */
    } else {
        if (old_has)
            cx.id = bson_iter_value(&oit);
        root = upd_node_from_bson(old);
        SBL_ERR(apply_actions(u, root, array_pos, &cx, err));
        upd_node_write(root, &result, true);
        bool new_has = bson_iter_init_find(&nit, &result, "_id");
        if (old_has && (!new_has || !same_value(bson_iter_value(&oit), bson_iter_value(&nit)))) {
            const char *p = id_path(u);
            rc = sbl_err_set(err, SBL_E_ImmutableField,
                             "Performing an update on the path '%s' would modify the immutable "
                             "field '_id'",
                             p);
            goto err;
        }
        if (new_has)
            SBL_ERR(check_id(bson_iter_value(&nit), err));
    }
    if (result.len > 16 * 1024 * 1024) {
        rc = sbl_err_set(err, SBL_E_BSONObjectTooLarge,
                         "Resulting document after update is larger than 16777216");
        goto err;
    }
    *changed = result.len != old->len || memcmp(bson_get_data(&result), bson_get_data(old),
                                                result.len) != 0;
    bson_concat(out, &result);
err:
    upd_node_free(root);
    bson_destroy(&result);
    return rc;
}
