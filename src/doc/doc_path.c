/*
 * doc_path.c: dotted-path lookup and validation of documents that arrive
 * from clients.
 *
 * What must stay true: sbl_doc_validate() never recurses (a 16 MiB document
 * can nest millions of levels): it uses the one-pass sbl_bson_check(); the
 * recursive sbl_doc_too_deep/sbl_doc_framing_ok below stay bounded by their
 * max_depth and are the reference the fuzzer compares sbl_bson_check with.
 */
#include <string.h>

#include "doc/doc.h"

#define SBL_DOC_MAX_BYTES (16 * 1024 * 1024)
#define SBL_DOC_MAX_DEPTH 180

/* Parse a canonical array index ("0", "17"; no sign, no leading zeros). */
static bool parse_index(const char *s, size_t n, uint32_t *idx)
{
    if (n == 0 || n > 10 || (n > 1 && s[0] == '0'))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > UINT32_MAX)
        return false;
    *idx = (uint32_t)v;
    return true;
}

/* Advance it to the field named s[0..n) (or, in an array, the n-th element). */
static bool find_component(bson_iter_t *it, const char *s, size_t n, bool in_array)
{
    if (in_array) {
        uint32_t idx, i = 0;
        if (!parse_index(s, n, &idx))
            return false;
        while (bson_iter_next(it)) {
            if (i++ == idx)
                return true;
        }
        return false;
    }
    while (bson_iter_next(it)) {
        if ((size_t)bson_iter_key_len(it) == n && memcmp(bson_iter_key(it), s, n) == 0)
            return true;
    }
    return false;
}

bool sbl_path_get(const bson_t *doc, const char *path, bson_iter_t *out)
{
    bson_iter_t it;
    bool in_array = false;
    if (!bson_iter_init(&it, doc))
        return false;
    for (const char *p = path;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot != NULL ? (size_t)(dot - p) : strlen(p);
        if (n == 0 || !find_component(&it, p, n, in_array))
            return false;
        if (dot == NULL) {
            *out = it;
            return true;
        }
        bson_type_t t = bson_iter_type(&it);
        bson_iter_t child;
        if ((t != BSON_TYPE_DOCUMENT && t != BSON_TYPE_ARRAY) || !bson_iter_recurse(&it, &child))
            return false;
        it = child;
        in_array = t == BSON_TYPE_ARRAY;
        p = dot + 1;
    }
}

/* Returns true when the container under it nests more than SBL_DOC_MAX_DEPTH levels. */
static bool too_deep(bson_iter_t *it, int depth, int max_depth)
{
    if (depth > max_depth)
        return true;
    while (bson_iter_next(it)) {
        bson_type_t t = bson_iter_type(it);
        bson_iter_t child;
        if (t == BSON_TYPE_DOCUMENT || t == BSON_TYPE_ARRAY) {
            if (bson_iter_recurse(it, &child) && too_deep(&child, depth + 1, max_depth))
                return true;
        } else if (t == BSON_TYPE_CODEWSCOPE) {
            uint32_t code_len, scope_len;
            const uint8_t *scope;
            bson_iter_codewscope(it, &code_len, &scope_len, &scope);
            if (scope != NULL && bson_iter_init_from_data(&child, scope, scope_len) &&
                too_deep(&child, depth + 1, max_depth))
                return true;
        }
    }
    return false;
}

/* True when every embedded document, array and code-with-scope scope under it is
 * framed correctly (length field, trailing 0).  bson_validate() silently skips an
 * embedded document libbson cannot open, so a bad one would reach the handlers. */
static bool nested_framing_ok(bson_iter_t *it)
{
    while (bson_iter_next(it)) {
        bson_type_t t = bson_iter_type(it);
        const uint8_t *data = NULL;
        uint32_t len = 0, code_len;
        if (t == BSON_TYPE_DOCUMENT)
            bson_iter_document(it, &len, &data);
        else if (t == BSON_TYPE_ARRAY)
            bson_iter_array(it, &len, &data);
        else if (t == BSON_TYPE_CODEWSCOPE)
            bson_iter_codewscope(it, &code_len, &len, &data);
        else
            continue;
        bson_t b;
        bson_iter_t child;
        if (data == NULL || !bson_init_static(&b, data, len) || !bson_iter_init(&child, &b) ||
            !nested_framing_ok(&child))
            return false;
    }
    return true;
}

bool sbl_doc_framing_ok(const bson_t *doc)
{
    bson_iter_t it;
    return bson_iter_init(&it, doc) && nested_framing_ok(&it);
}

bool sbl_doc_too_deep(const bson_t *doc, int max_depth)
{
    bson_iter_t it;
    return bson_iter_init(&it, doc) && too_deep(&it, 0, max_depth);
}

int sbl_doc_validate(const uint8_t *data, size_t len, sbl_err_t *err)
{
    if (len > SBL_DOC_MAX_BYTES)
        return sbl_err_set(err, SBL_E_BSONObjectTooLarge,
                           "BSON document is %zu bytes, over the %d byte limit", len,
                           SBL_DOC_MAX_BYTES);
    if (len < 5)
        return sbl_err_set(err, SBL_E_InvalidBSON, "BSON document of %zu bytes is too short", len);
    uint32_t declared = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
                        (uint32_t)data[3] << 24;
    if (declared != len)
        return sbl_err_set(err, SBL_E_InvalidBSON,
                           "BSON document length field says %u bytes but %zu were given",
                           declared, len);
    if (data[len - 1] != 0)
        return sbl_err_set(err, SBL_E_InvalidBSON, "BSON document does not end with a 0 byte");

    size_t off = 0;
    switch (sbl_bson_check(data, len, SBL_DOC_MAX_DEPTH, &off)) {
    case SBL_BSON_OK:
        return 0;
    case SBL_BSON_TOO_DEEP:
        return sbl_err_set(err, SBL_E_Overflow,
                           "BSON document nests deeper than the %d level limit",
                           SBL_DOC_MAX_DEPTH);
    default:
        return sbl_err_set(err, SBL_E_InvalidBSON, "invalid BSON at byte offset %zu", off);
    }
}
