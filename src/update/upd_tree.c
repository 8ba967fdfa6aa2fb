/*
 * upd_tree.c: the mutable document tree that updates work on.  A stored
 * document is expanded into nodes once, every operator edits nodes in place,
 * and the tree is written back to BSON at the end.
 *
 * What must stay true: each node owns its key, its scalar value (a
 * bson_value_copy) and its children; array children have NULL keys and are
 * renumbered 0..n-1 when written.
 */
#include "doc/doc.h"
#include "update/upd_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static void node_add(upd_node_t *n, upd_node_t *kid)
{
    upd_node_insert(n, n->nkids, kid);
}

upd_node_t *upd_node_new(const char *key, bson_type_t type)
{
    upd_node_t *n = bson_malloc0(sizeof(*n));
    n->key = key ? bson_strdup(key) : NULL;
    n->type = type;
    return n;
}

static void node_fill(upd_node_t *n, const uint8_t *data, uint32_t len)
{
    bson_t b;
    bson_iter_t it;

    if (!bson_init_static(&b, data, len) || !bson_iter_init(&it, &b))
        return;
    while (bson_iter_next(&it)) {
        const char *k = n->type == BSON_TYPE_ARRAY ? NULL : bson_iter_key(&it);
        node_add(n, upd_node_from_value(k, bson_iter_value(&it)));
    }
}

upd_node_t *upd_node_from_value(const char *key, const bson_value_t *v)
{
    upd_node_t *n = upd_node_new(key, v->value_type);

    if (v->value_type == BSON_TYPE_DOCUMENT || v->value_type == BSON_TYPE_ARRAY)
        node_fill(n, v->value.v_doc.data, v->value.v_doc.data_len);
    else
        bson_value_copy(v, &n->val);
    return n;
}

upd_node_t *upd_node_from_bson(const bson_t *doc)
{
    upd_node_t *n = upd_node_new(NULL, BSON_TYPE_DOCUMENT);
    node_fill(n, bson_get_data(doc), doc->len);
    return n;
}

upd_node_t *upd_node_clone(const upd_node_t *src, const char *key)
{
    upd_node_t *n = upd_node_new(key, src->type);

    if (upd_node_is_container(src)) {
        for (size_t i = 0; i < src->nkids; i++)
            node_add(n, upd_node_clone(src->kids[i], src->kids[i]->key));
    } else {
        bson_value_copy(&src->val, &n->val);
    }
    return n;
}

void upd_node_free(upd_node_t *n)
{
    if (n == NULL)
        return;
    for (size_t i = 0; i < n->nkids; i++)
        upd_node_free(n->kids[i]);
    bson_free(n->kids);
    if (!upd_node_is_container(n))
        bson_value_destroy(&n->val);
    bson_free(n->key);
    bson_free(n);
}

void upd_node_rekey(upd_node_t *n, const char *key)
{
    char *k = key ? bson_strdup(key) : NULL;
    bson_free(n->key);
    n->key = k;
}

bool upd_parse_index(const char *s, size_t *idxp)
{
    size_t v = 0, len = strlen(s);

    if (len == 0 || len > 9 || (len > 1 && s[0] == '0'))
        return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (size_t)(s[i] - '0');
    }
    *idxp = v;
    return true;
}

upd_node_t *upd_node_child(const upd_node_t *n, const char *key, size_t *posp)
{
    if (n->type == BSON_TYPE_ARRAY) {
        size_t idx;
        if (!upd_parse_index(key, &idx) || idx >= n->nkids)
            return NULL;
        if (posp)
            *posp = idx;
        return n->kids[idx];
    }
    if (n->type != BSON_TYPE_DOCUMENT)
        return NULL;
    for (size_t i = 0; i < n->nkids; i++) {
        if (strcmp(n->kids[i]->key, key) == 0) {
            if (posp)
                *posp = i;
            return n->kids[i];
        }
    }
    return NULL;
}

void upd_node_insert(upd_node_t *n, size_t pos, upd_node_t *kid)
{
    if (n->nkids == n->cap) {
        n->cap = n->cap ? n->cap * 2 : 8;
        n->kids = bson_realloc(n->kids, n->cap * sizeof(*n->kids));
    }
    memmove(n->kids + pos + 1, n->kids + pos, (n->nkids - pos) * sizeof(*n->kids));
    n->kids[pos] = kid;
    n->nkids++;
    if (n->type == BSON_TYPE_ARRAY)
        upd_node_rekey(kid, NULL);
}

upd_node_t *upd_node_detach(upd_node_t *n, size_t pos)
{
    upd_node_t *kid = n->kids[pos];
    memmove(n->kids + pos, n->kids + pos + 1, (n->nkids - pos - 1) * sizeof(*n->kids));
    n->nkids--;
    return kid;
}

void upd_node_replace(upd_node_t *n, size_t pos, upd_node_t *kid)
{
    upd_node_t *old = n->kids[pos];
    upd_node_rekey(kid, old->key);
    n->kids[pos] = kid;
    upd_node_free(old);
}

void upd_node_append(bson_t *out, const char *key, const upd_node_t *n)
{
    bson_t child;

    if (n->type == BSON_TYPE_DOCUMENT) {
        bson_append_document_begin(out, key, -1, &child);
        upd_node_write(n, &child, false);
        bson_append_document_end(out, &child);
    } else if (n->type == BSON_TYPE_ARRAY) {
        bson_append_array_begin(out, key, -1, &child);
        upd_node_write(n, &child, false);
        bson_append_array_end(out, &child);
    } else {
        sbl_append_value(out, key, -1, &n->val);
    }
}

void upd_node_write(const upd_node_t *n, bson_t *out, bool id_first)
{
    char buf[16];
    const char *key;
    size_t id_pos = SIZE_MAX;

    if (id_first && n->type == BSON_TYPE_DOCUMENT) {
        if (upd_node_child(n, "_id", &id_pos))
            upd_node_append(out, "_id", n->kids[id_pos]);
    }
    for (size_t i = 0; i < n->nkids; i++) {
        if (i == id_pos)
            continue;
        if (n->type == BSON_TYPE_ARRAY) {
            bson_uint32_to_string((uint32_t)i, &key, buf, sizeof(buf));
        } else {
            key = n->kids[i]->key;
        }
        upd_node_append(out, key, n->kids[i]);
    }
}

void upd_node_view(const upd_node_t *n, bson_t *scratch, bson_value_t *out)
{
    bson_init(scratch);
    if (!upd_node_is_container(n)) {
        *out = n->val;
        return;
    }
    upd_node_write(n, scratch, false);
    out->value_type = n->type;
    out->value.v_doc.data = (uint8_t *)bson_get_data(scratch);
    out->value.v_doc.data_len = scratch->len;
}

/* ---- rendering for messages ------------------------------------------- */


static void render_container(bson_string_t *s, const bson_value_t *v)
{
    bson_t b;
    bson_iter_t it;
    bool arr = v->value_type == BSON_TYPE_ARRAY, first = true;

    if (!bson_init_static(&b, v->value.v_doc.data, v->value.v_doc.data_len) ||
        !bson_iter_init(&it, &b)) {
        bson_string_append(s, arr ? "[]" : "{}");
        return;
    }
    bson_string_append(s, arr ? "[" : "{");
    while (bson_iter_next(&it)) {
        bson_string_append(s, first ? " " : ", ");
        first = false;
        if (!arr)
            bson_string_append_printf(s, "%s: ", bson_iter_key(&it));
        upd_render_value(s, bson_iter_value(&it));
    }
    bson_string_append(s, first ? (arr ? "]" : "}") : (arr ? " ]" : " }"));
}

void upd_render_value(bson_string_t *s, const bson_value_t *v)
{
    char tmp[BSON_DECIMAL128_STRING];

    switch (v->value_type) {
    case BSON_TYPE_DOUBLE: {
        double d = v->value.v_double;
        if (d > -1e15 && d < 1e15 && d == (double)(int64_t)d) /* range first: cast is UB */
            bson_string_append_printf(s, "%.1f", d);
        else
            bson_string_append_printf(s, "%.17g", d);
        break;
    }
    case BSON_TYPE_UTF8:
        bson_string_append_printf(s, "\"%s\"", v->value.v_utf8.str);
        break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        render_container(s, v);
        break;
    case BSON_TYPE_OID:
        bson_oid_to_string(&v->value.v_oid, tmp);
        bson_string_append_printf(s, "ObjectId('%s')", tmp);
        break;
    case BSON_TYPE_BOOL:
        bson_string_append(s, v->value.v_bool ? "true" : "false");
        break;
    case BSON_TYPE_DATE_TIME:
        bson_string_append_printf(s, "new Date(%" PRId64 ")", v->value.v_datetime);
        break;
    case BSON_TYPE_NULL:
        bson_string_append(s, "null");
        break;
    case BSON_TYPE_INT32:
        bson_string_append_printf(s, "%" PRId32, v->value.v_int32);
        break;
    case BSON_TYPE_INT64:
        bson_string_append_printf(s, "%" PRId64, v->value.v_int64);
        break;
    case BSON_TYPE_DECIMAL128:
        bson_decimal128_to_string(&v->value.v_decimal128, tmp);
        bson_string_append_printf(s, "NumberDecimal(\"%s\")", tmp);
        break;
    case BSON_TYPE_TIMESTAMP:
        bson_string_append_printf(s, "Timestamp(%" PRIu32 ", %" PRIu32 ")",
                                  v->value.v_timestamp.timestamp, v->value.v_timestamp.increment);
        break;
    case BSON_TYPE_REGEX:
        bson_string_append_printf(s, "/%s/%s", v->value.v_regex.regex, v->value.v_regex.options);
        break;
    default:
        bson_string_append(s, sbl_type_name(v->value_type));
        break;
    }
}

void upd_render_node(bson_string_t *s, const upd_node_t *n)
{
    bson_t scratch;
    bson_value_t v;

    upd_node_view(n, &scratch, &v);
    upd_render_value(s, &v);
    bson_destroy(&scratch);
}

void upd_render_id(bson_string_t *s, const upd_ctx_t *cx)
{
    if (cx->id == NULL) {
        bson_string_append(s, "{no id}");
        return;
    }
    bson_string_append(s, "{_id: ");
    upd_render_value(s, cx->id);
    bson_string_append(s, "}");
}

/* ---- targets ------------------------------------------------------------ */

void upd_target_put(upd_target_t *t, upd_node_t *n)
{
    upd_node_t *p = t->parent;

    if (t->node != NULL) {
        upd_node_replace(p, t->pos, n);
    } else if (p->type == BSON_TYPE_ARRAY) {
        bson_value_t null_v = {.value_type = BSON_TYPE_NULL};
        while (p->nkids < t->pos)
            upd_node_insert(p, p->nkids, upd_node_from_value(NULL, &null_v));
        upd_node_insert(p, p->nkids, n);
        t->pos = p->nkids - 1;
    } else {
        upd_node_rekey(n, t->key);
        upd_node_insert(p, p->nkids, n);
        t->pos = p->nkids - 1;
    }
    t->node = n;
}

void upd_target_remove(upd_target_t *t)
{
    if (t->node == NULL)
        return;
    if (t->parent->type == BSON_TYPE_ARRAY) {
        bson_value_t null_v = {.value_type = BSON_TYPE_NULL};
        upd_node_replace(t->parent, t->pos, upd_node_from_value(NULL, &null_v));
    } else {
        upd_node_free(upd_node_detach(t->parent, t->pos));
    }
    t->node = NULL;
}
