/*
 * doc_key.c: the order-preserving key encoding ("keystring") of BSON values.
 * Collection tables and indexes are keyed by these bytes on disk, so the
 * format below is frozen: extend it only with new tags.
 *
 * What must stay true: memcmp order of two encodings is sbl_value_compare()
 * order, equal encodings mean compare() == 0, and every encoding is
 * self-delimiting (no encoding is a proper prefix of another), so that
 * concatenated compound keys and complemented (descending) keys order right.
 *
 * Format: one tag byte (doc_int.h) then a payload.  All integers big-endian.
 *   MinKey 0A | null, undefined 14 | MaxKey F0                (no payload)
 *   number 1E..27   tag is the numeric class:
 *       1E NaN, 1F -inf, 23 zero (int, long, double, decimal, any sign), 27 +inf
 *       25 positive: exp+0x8000 (2 bytes, exponent of the leading 1 bit), then
 *          the bits after the leading 1, 7 per byte as (bits << 1 | more), ending
 *          at the last nonzero group (at least one byte, at most 9).  A decimal128
 *          that is no such binary value always writes 9 groups with `more` set
 *          on the last (its 64-bit truncation toward zero) followed by its
 *          decimal form D.
 *       24 / 26 decimal128 below 1e-4900 / at least 1e4900: D only.
 *       21 / 22 / 20 negative counterparts of 25 / 24 / 26: the bytes after
 *          the tag are complemented.
 *       D = first-digit exponent+0x4000 (2 bytes), digit pairs as 1..100, 00.
 *   string, symbol 28: bytes with 00 written as 00 FF, then 00 00; under a
 *       collation (sbl_key_append_coll) the ICU sort key instead (ends in 00)
 *   object 32: per field: rank tag (1E for numbers, else the value tag), field
 *       name bytes, 00, value encoding; then 00
 *   array 3C: element value encodings, then 00
 *   binData 46: length (4), subtype (1), bytes
 *   ObjectId 50: 12 bytes
 *   bool 5A: 00 or 01
 *   date 64: int64 ms with the sign bit flipped (8)
 *   timestamp 6E: seconds (4), increment (4)
 *   regex 78: pattern, 00, flags, 00
 *   dbPointer 82: namespace length (4), namespace bytes, ObjectId (12)
 *   code 8C: as a string
 *   codeWScope 96: code as a string, then the scope as an object's fields and 00
 * Descending values are the same bytes complemented.
 */
#include <string.h>

#include "doc/doc.h"
#include "doc/doc_int.h"

#define KEY_MAX_DEPTH 200

static void put_be32(sbl_buf_t *out, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    sbl_buf_append(out, b, 4);
}

static void put_be64(sbl_buf_t *out, uint64_t v)
{
    put_be32(out, (uint32_t)(v >> 32));
    put_be32(out, (uint32_t)v);
}

/* Bytes that may hold NULs: 00 -> 00 FF, terminated by 00 00. */
static void put_string(sbl_buf_t *out, const char *s, size_t n)
{
    const char *p = s, *end = s + n;
    while (p < end) {
        const char *z = memchr(p, 0, (size_t)(end - p));
        if (z == NULL) {
            sbl_buf_append(out, p, (size_t)(end - p));
            break;
        }
        sbl_buf_append(out, p, (size_t)(z - p));
        sbl_buf_append_byte(out, 0x00);
        sbl_buf_append_byte(out, 0xFF);
        p = z + 1;
    }
    sbl_buf_append_byte(out, 0x00);
    sbl_buf_append_byte(out, 0x00);
}

/* A C string (never holds NUL), terminated by 00. */
static void put_cstr(sbl_buf_t *out, const char *s)
{
    sbl_buf_append(out, s, strlen(s) + 1);
}

static uint8_t rank_tag(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_MINKEY:
        return KT_MINKEY;
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED:
        return KT_NULL;
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        return KT_NUM;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL:
        return KT_STRING;
    case BSON_TYPE_DOCUMENT:
        return KT_OBJECT;
    case BSON_TYPE_ARRAY:
        return KT_ARRAY;
    case BSON_TYPE_BINARY:
        return KT_BINARY;
    case BSON_TYPE_OID:
        return KT_OID;
    case BSON_TYPE_BOOL:
        return KT_BOOL;
    case BSON_TYPE_DATE_TIME:
        return KT_DATE;
    case BSON_TYPE_TIMESTAMP:
        return KT_TIMESTAMP;
    case BSON_TYPE_REGEX:
        return KT_REGEX;
    case BSON_TYPE_DBPOINTER:
        return KT_DBPOINTER;
    case BSON_TYPE_CODE:
        return KT_CODE;
    case BSON_TYPE_CODEWSCOPE:
        return KT_CODEWSCOPE;
    case BSON_TYPE_MAXKEY:
        return KT_MAXKEY;
    default:
        return KT_NULL;
    }
}

static void put_value(sbl_buf_t *out, const bson_value_t *v, const sbl_collation_t *coll);

/* Fields (objects: rank tag, name, value; arrays: value only), then 00. */
static void put_fields(sbl_buf_t *out, const uint8_t *data, uint32_t len, bool names,
                       const sbl_collation_t *coll)
{
    bson_iter_t it;
    if (bson_iter_init_from_data(&it, data, len)) {
        while (bson_iter_next(&it)) {
            bson_value_t v;
            sbl_iter_value(&it, &v);
            if (names) {
                sbl_buf_append_byte(out, rank_tag(v.value_type));
                put_cstr(out, bson_iter_key(&it));
            }
            put_value(out, &v, coll);
        }
    }
    sbl_buf_append_byte(out, KT_END);
}

static void put_value(sbl_buf_t *out, const bson_value_t *v, const sbl_collation_t *coll)
{
    bson_type_t t = v->value_type;
    if (sbl_is_number(t)) {
        sbl_numkey_t k;
        sbl_numkey_make(v, &k);
        sbl_numkey_append(out, &k);
        return;
    }
    sbl_buf_append_byte(out, rank_tag(t));
    switch (t) {
    case BSON_TYPE_UTF8:
        if (coll != NULL)
            sbl_collation_sort_key(coll, v->value.v_utf8.str, v->value.v_utf8.len, out);
        else
            put_string(out, v->value.v_utf8.str, v->value.v_utf8.len);
        break;
    case BSON_TYPE_SYMBOL:
        if (coll != NULL)
            sbl_collation_sort_key(coll, v->value.v_symbol.symbol, v->value.v_symbol.len, out);
        else
            put_string(out, v->value.v_symbol.symbol, v->value.v_symbol.len);
        break;
    case BSON_TYPE_DOCUMENT:
        put_fields(out, v->value.v_doc.data, v->value.v_doc.data_len, true, coll);
        break;
    case BSON_TYPE_ARRAY:
        put_fields(out, v->value.v_doc.data, v->value.v_doc.data_len, false, coll);
        break;
    case BSON_TYPE_BINARY:
        put_be32(out, v->value.v_binary.data_len);
        sbl_buf_append_byte(out, (uint8_t)v->value.v_binary.subtype);
        sbl_buf_append(out, v->value.v_binary.data, v->value.v_binary.data_len);
        break;
    case BSON_TYPE_OID:
        sbl_buf_append(out, v->value.v_oid.bytes, 12);
        break;
    case BSON_TYPE_BOOL:
        sbl_buf_append_byte(out, v->value.v_bool ? 1 : 0);
        break;
    case BSON_TYPE_DATE_TIME:
        put_be64(out, (uint64_t)v->value.v_datetime ^ (1ULL << 63));
        break;
    case BSON_TYPE_TIMESTAMP:
        put_be32(out, v->value.v_timestamp.timestamp);
        put_be32(out, v->value.v_timestamp.increment);
        break;
    case BSON_TYPE_REGEX:
        put_cstr(out, v->value.v_regex.regex);
        put_cstr(out, v->value.v_regex.options ? v->value.v_regex.options : "");
        break;
    case BSON_TYPE_DBPOINTER:
        put_be32(out, v->value.v_dbpointer.collection_len);
        sbl_buf_append(out, v->value.v_dbpointer.collection, v->value.v_dbpointer.collection_len);
        sbl_buf_append(out, v->value.v_dbpointer.oid.bytes, 12);
        break;
    case BSON_TYPE_CODE:
        put_string(out, v->value.v_code.code, v->value.v_code.code_len);
        break;
    case BSON_TYPE_CODEWSCOPE:
        put_string(out, v->value.v_codewscope.code, v->value.v_codewscope.code_len);
        put_fields(out, v->value.v_codewscope.scope_data, v->value.v_codewscope.scope_len, true,
                   NULL);
        break;
    default:
        /* MinKey, MaxKey, null, undefined: the tag is the whole value. */
        break;
    }
}

void sbl_key_append(sbl_buf_t *out, const bson_value_t *v, bool descending)
{
    sbl_key_append_coll(out, v, descending, NULL);
}

void sbl_key_append_coll(sbl_buf_t *out, const bson_value_t *v, bool descending,
                         const sbl_collation_t *coll)
{
    size_t start = out->len;
    put_value(out, v, coll);
    if (descending) {
        for (size_t i = start; i < out->len; i++)
            out->data[i] = (uint8_t)~out->data[i];
    }
}

/* ---- decoding ---- */

static bool get_bytes(sbl_keyrd_t *r, uint8_t *dst, size_t n)
{
    if (r->len - r->pos < n)
        return false;
    for (size_t i = 0; i < n; i++)
        dst[i] = r->p[r->pos + i] ^ r->mask;
    r->pos += n;
    return true;
}

static bool get_be32(sbl_keyrd_t *r, uint32_t *v)
{
    uint8_t b[4];
    if (!get_bytes(r, b, 4))
        return false;
    *v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    return true;
}

/* Read an escaped string into s (reset first). */
static bool get_string(sbl_keyrd_t *r, sbl_buf_t *s)
{
    sbl_buf_reset(s);
    for (;;) {
        uint8_t b;
        if (!sbl_keyrd_byte(r, &b))
            return false;
        if (b != 0) {
            sbl_buf_append_byte(s, b);
            continue;
        }
        if (!sbl_keyrd_byte(r, &b))
            return false;
        if (b == 0x00)
            break;
        if (b != 0xFF)
            return false;
        sbl_buf_append_byte(s, 0);
    }
    sbl_buf_append_byte(s, 0); /* keep it usable as a C string; not counted */
    s->len--;
    return true;
}

/* Read a 00-terminated C string into s (reset first). */
static bool get_cstr(sbl_keyrd_t *r, sbl_buf_t *s)
{
    sbl_buf_reset(s);
    for (;;) {
        uint8_t b;
        if (!sbl_keyrd_byte(r, &b))
            return false;
        sbl_buf_append_byte(s, b);
        if (b == 0)
            break;
    }
    s->len--;
    return true;
}

static bool get_value(sbl_keyrd_t *r, bson_t *doc, const char *k, int depth);

/* Read fields up to their 00 into child. */
static bool get_fields(sbl_keyrd_t *r, bson_t *child, bool names, int depth)
{
    sbl_buf_t name;
    sbl_buf_init(&name);
    bool ok = false;
    for (uint32_t i = 0;; i++) {
        uint8_t b;
        if (!sbl_keyrd_byte(r, &b))
            goto out;
        if (b == KT_END)
            break;
        char idx[16];
        const char *key;
        if (names) {
            if (!get_cstr(r, &name))
                goto out;
            key = (const char *)name.data;
        } else {
            r->pos--; /* the byte was the value's own tag */
            bson_uint32_to_string(i, &key, idx, sizeof(idx));
        }
        if (!get_value(r, child, key, depth + 1))
            goto out;
    }
    ok = true;
out:
    sbl_buf_destroy(&name);
    return ok;
}

static bool get_value(sbl_keyrd_t *r, bson_t *doc, const char *k, int depth)
{
    uint8_t tag;
    if (depth > KEY_MAX_DEPTH || !sbl_keyrd_byte(r, &tag))
        return false;
    if (tag >= NK_NAN && tag <= NK_POS_INF)
        return sbl_numkey_decode(r, tag, doc, k);

    sbl_buf_t s;
    sbl_buf_init(&s);
    bool ok = false;
    uint32_t n, m;
    uint8_t b;
    switch (tag) {
    case KT_MINKEY:
        ok = bson_append_minkey(doc, k, -1);
        break;
    case KT_MAXKEY:
        ok = bson_append_maxkey(doc, k, -1);
        break;
    case KT_NULL:
        ok = bson_append_null(doc, k, -1);
        break;
    case KT_STRING:
        ok = get_string(r, &s) &&
             bson_append_utf8(doc, k, -1, (const char *)s.data, (int)s.len);
        break;
    case KT_OBJECT:
    case KT_ARRAY: {
        bson_t child;
        bool begun = tag == KT_OBJECT ? bson_append_document_begin(doc, k, -1, &child)
                                      : bson_append_array_begin(doc, k, -1, &child);
        if (!begun)
            break;
        ok = get_fields(r, &child, tag == KT_OBJECT, depth);
        ok = (tag == KT_OBJECT ? bson_append_document_end(doc, &child)
                               : bson_append_array_end(doc, &child)) &&
             ok;
        break;
    }
    case KT_BINARY:
        if (!get_be32(r, &n) || !sbl_keyrd_byte(r, &b) || n > r->len - r->pos)
            break;
        get_bytes(r, sbl_buf_reserve(&s, n), n);
        ok = bson_append_binary(doc, k, -1, (bson_subtype_t)b, s.data, n);
        break;
    case KT_OID: {
        bson_oid_t oid;
        ok = get_bytes(r, oid.bytes, 12) && bson_append_oid(doc, k, -1, &oid);
        break;
    }
    case KT_BOOL:
        ok = sbl_keyrd_byte(r, &b) && b <= 1 && bson_append_bool(doc, k, -1, b == 1);
        break;
    case KT_DATE:
        ok = get_be32(r, &n) && get_be32(r, &m) &&
             bson_append_date_time(doc, k, -1,
                                   (int64_t)(((uint64_t)n << 32 | m) ^ (1ULL << 63)));
        break;
    case KT_TIMESTAMP:
        ok = get_be32(r, &n) && get_be32(r, &m) && bson_append_timestamp(doc, k, -1, n, m);
        break;
    case KT_REGEX: {
        sbl_buf_t flags;
        sbl_buf_init(&flags);
        ok = get_cstr(r, &s) && get_cstr(r, &flags);
        if (ok) {
            sbl_buf_append_byte(&s, 0);
            sbl_buf_append_byte(&flags, 0);
            ok = bson_append_regex(doc, k, -1, (const char *)s.data, (const char *)flags.data);
        }
        sbl_buf_destroy(&flags);
        break;
    }
    case KT_DBPOINTER: {
        bson_oid_t oid;
        if (!get_be32(r, &n) || n > r->len - r->pos)
            break;
        get_bytes(r, sbl_buf_reserve(&s, n + 1), n);
        s.data[n] = 0;
        ok = get_bytes(r, oid.bytes, 12) &&
             bson_append_dbpointer(doc, k, -1, (const char *)s.data, &oid);
        break;
    }
    case KT_CODE:
        if (get_string(r, &s)) {
            sbl_buf_append_byte(&s, 0);
            ok = bson_append_code(doc, k, -1, (const char *)s.data);
        }
        break;
    case KT_CODEWSCOPE: {
        bson_t scope;
        if (!get_string(r, &s))
            break;
        sbl_buf_append_byte(&s, 0);
        bson_init(&scope);
        ok = get_fields(r, &scope, true, depth) &&
             bson_append_code_with_scope(doc, k, -1, (const char *)s.data, &scope);
        bson_destroy(&scope);
        break;
    }
    default:
        break;
    }
    sbl_buf_destroy(&s);
    return ok;
}

size_t sbl_key_decode_dir(const uint8_t *p, size_t len, bson_t *doc, const char *k,
                          bool descending)
{
    sbl_keyrd_t r = {p, len, 0, descending ? 0xFF : 0x00};
    if (!get_value(&r, doc, k, 0))
        return 0;
    return r.pos;
}

size_t sbl_key_decode(const uint8_t *p, size_t len, bson_t *doc, const char *k)
{
    return sbl_key_decode_dir(p, len, doc, k, false);
}

int64_t sbl_doc_record_id(const bson_t *doc)
{
    bson_iter_t it;
    bson_value_t id;
    if (!bson_iter_init_find(&it, doc, "_id"))
        return 0;
    sbl_iter_value(&it, &id);
    sbl_buf_t key;
    sbl_buf_init(&key);
    sbl_key_append(&key, &id, false);
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < key.len; i++)
        h = (h ^ key.data[i]) * 1099511628211ULL;
    sbl_buf_destroy(&key);
    h &= 0x7fffffffffffffffULL;
    return h == 0 ? 1 : (int64_t)h;
}
