/*
 * doc_append.c: sbl_append_value and sbl_append_iter, libbson's appenders
 * for a value that must come out byte for byte.  libbson's appenders for
 * code and code-with-scope take a C string, so a value with an embedded NUL
 * byte (valid BSON: the length is stored) loses everything after it; these
 * build such an element by hand and splice it in with bson_concat.
 *
 * What must stay true: this file needs libbson only (the tools under tools/
 * compile it too), and every other type goes through libbson unchanged.
 */
#include "doc/doc.h"

#include <string.h>

/* Append key: code of type t (code-with-scope: with the scope_len bytes of
 * scope), byte for byte. */
static bool append_code_exact(bson_t *doc, const char *key, int key_len, bson_type_t t,
                              const char *code, uint32_t code_len, const uint8_t *scope,
                              uint32_t scope_len)
{
    size_t klen = key_len < 0 ? strlen(key) : (size_t)key_len;
    size_t body = 4 + code_len + 1 + (t == BSON_TYPE_CODEWSCOPE ? 4 + scope_len : 0);
    size_t total = 4 + 1 + klen + 1 + body + 1;
    if (total > INT32_MAX)
        return false;
    uint8_t *buf = bson_malloc(total), *p = buf;
    uint32_t v = (uint32_t)total;
    memcpy(p, &v, 4), p += 4; /* BSON is little-endian; so is every target we build */
    *p++ = (uint8_t)t;
    memcpy(p, key, klen), p += klen;
    *p++ = 0;
    if (t == BSON_TYPE_CODEWSCOPE) {
        v = (uint32_t)body;
        memcpy(p, &v, 4), p += 4;
    }
    v = code_len + 1;
    memcpy(p, &v, 4), p += 4;
    memcpy(p, code, code_len), p += code_len;
    *p++ = 0;
    if (t == BSON_TYPE_CODEWSCOPE)
        memcpy(p, scope, scope_len), p += scope_len;
    *p = 0;
    bson_t one;
    bool ok = bson_init_static(&one, buf, total) && bson_concat(doc, &one);
    bson_free(buf);
    return ok;
}

bool sbl_append_value(bson_t *doc, const char *key, int key_len, const bson_value_t *v)
{
    if (v->value_type == BSON_TYPE_CODE)
        return append_code_exact(doc, key, key_len, BSON_TYPE_CODE, v->value.v_code.code,
                                 v->value.v_code.code_len, NULL, 0);
    if (v->value_type == BSON_TYPE_CODEWSCOPE)
        return append_code_exact(doc, key, key_len, BSON_TYPE_CODEWSCOPE,
                                 v->value.v_codewscope.code, v->value.v_codewscope.code_len,
                                 v->value.v_codewscope.scope_data,
                                 v->value.v_codewscope.scope_len);
    return bson_append_value(doc, key, key_len, v);
}

bool sbl_append_iter(bson_t *doc, const char *key, int key_len, const bson_iter_t *it)
{
    bson_type_t t = bson_iter_type(it);
    if (t == BSON_TYPE_CODE) {
        uint32_t len;
        const char *code = bson_iter_code(it, &len);
        return append_code_exact(doc, key, key_len, t, code, len, NULL, 0);
    }
    if (t == BSON_TYPE_CODEWSCOPE) {
        uint32_t len, slen;
        const uint8_t *scope;
        const char *code = bson_iter_codewscope(it, &len, &slen, &scope);
        return append_code_exact(doc, key, key_len, t, code, len, scope, slen);
    }
    return bson_append_iter(doc, key, key_len, it);
}

char *sbl_value_json(const bson_value_t *v)
{
    bson_t tmp = BSON_INITIALIZER;
    sbl_append_value(&tmp, "v", 1, v);
    char *j = bson_as_relaxed_extended_json(&tmp, NULL);
    bson_destroy(&tmp);
    size_t len = j != NULL ? strlen(j) : 0;
    if (len >= 11 && strncmp(j, "{ \"v\" : ", 8) == 0) { /* strip the wrapper */
        memmove(j, j + 8, len - 8 - 2);
        j[len - 10] = '\0';
    }
    return j;
}

int64_t sbl_append_cursor_batch(bson_t *arr, uint32_t *np, const bson_t *reply)
{
    bson_iter_t it, cur, b;
    int64_t id = 0;
    if (!bson_iter_init_find(&it, reply, "cursor") || !bson_iter_recurse(&it, &cur))
        return 0;
    while (bson_iter_next(&cur)) {
        const char *k = bson_iter_key(&cur);
        if (strcmp(k, "id") == 0)
            id = bson_iter_as_int64(&cur);
        else if ((strcmp(k, "firstBatch") == 0 || strcmp(k, "nextBatch") == 0) &&
                 bson_iter_recurse(&cur, &b))
            while (bson_iter_next(&b)) {
                char key[16];
                const char *ks;
                bson_uint32_to_string((*np)++, &ks, key, sizeof(key));
                sbl_append_iter(arr, ks, -1, &b);
            }
    }
    return id;
}
