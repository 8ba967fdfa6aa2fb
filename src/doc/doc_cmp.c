/*
 * doc_cmp.c: MongoDB's comparison order for BSON values and documents, and
 * the no-copy bson_value_t view of an iterator's value.
 *
 * What must stay true: this order is exactly the memcmp order of the key
 * encoding in doc_key.c (the unit test checks it on random values); change
 * one only together with the other (sbl_key_append_coll with the same
 * collation).  Under a collation only string/symbol payloads compare differently.  Numbers go through the canonical form
 * of doc_num.c except for the same-type fast paths, which must agree with it.
 */
#include <string.h>

#include "doc/doc.h"
#include "doc/doc_int.h"

int sbl_type_rank(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_MINKEY:
        return -1;
    case BSON_TYPE_EOD:
        return 0;
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED:
        return 5;
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        return 10;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL:
        return 15;
    case BSON_TYPE_DOCUMENT:
        return 20;
    case BSON_TYPE_ARRAY:
        return 25;
    case BSON_TYPE_BINARY:
        return 30;
    case BSON_TYPE_OID:
        return 35;
    case BSON_TYPE_BOOL:
        return 40;
    case BSON_TYPE_DATE_TIME:
        return 45;
    case BSON_TYPE_TIMESTAMP:
        return 47;
    case BSON_TYPE_REGEX:
        return 50;
    case BSON_TYPE_DBPOINTER:
        return 55;
    case BSON_TYPE_CODE:
        return 60;
    case BSON_TYPE_CODEWSCOPE:
        return 65;
    case BSON_TYPE_MAXKEY:
        return 127;
    }
    return 0;
}

static int sign3(int r)
{
    return (r > 0) - (r < 0);
}

/* Bytes, shorter first when one is a prefix of the other. */
static int bytes_cmp(const void *a, size_t alen, const void *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int r = n == 0 ? 0 : memcmp(a, b, n);
    if (r != 0)
        return sign3(r);
    return (alen > blen) - (alen < blen);
}

static int number_cmp(const bson_value_t *a, const bson_value_t *b)
{
    bson_type_t ta = a->value_type, tb = b->value_type;
    if ((ta == BSON_TYPE_INT32 || ta == BSON_TYPE_INT64) &&
        (tb == BSON_TYPE_INT32 || tb == BSON_TYPE_INT64)) {
        int64_t x = ta == BSON_TYPE_INT32 ? a->value.v_int32 : a->value.v_int64;
        int64_t y = tb == BSON_TYPE_INT32 ? b->value.v_int32 : b->value.v_int64;
        return (x > y) - (x < y);
    }
    if (ta == BSON_TYPE_DOUBLE && tb == BSON_TYPE_DOUBLE) {
        double x = a->value.v_double, y = b->value.v_double;
        if (x < y)
            return -1;
        if (x > y)
            return 1;
        if (x == y)
            return 0;
        /* At least one NaN: NaN sorts below every other number. */
        return (x == x) - (y == y);
    }
    sbl_numkey_t ka, kb;
    sbl_numkey_make(a, &ka);
    sbl_numkey_make(b, &kb);
    return sbl_numkey_cmp(&ka, &kb);
}

static int value_cmp(const bson_value_t *a, const bson_value_t *b, const sbl_collation_t *coll);

static int raw_cmp(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen, bool names,
                   const sbl_collation_t *coll)
{
    bson_iter_t ia, ib;
    bool oka = bson_iter_init_from_data(&ia, a, alen);
    bool okb = bson_iter_init_from_data(&ib, b, blen);
    if (!oka || !okb)
        return oka - okb;
    for (;;) {
        bool na = bson_iter_next(&ia);
        bool nb = bson_iter_next(&ib);
        if (!na || !nb)
            return na - nb;
        int ra = sbl_type_rank(bson_iter_type(&ia));
        int rb = sbl_type_rank(bson_iter_type(&ib));
        if (ra != rb)
            return ra < rb ? -1 : 1;
        if (names) {
            int r = strcmp(bson_iter_key(&ia), bson_iter_key(&ib));
            if (r != 0)
                return sign3(r);
        }
        bson_value_t va, vb;
        sbl_iter_value(&ia, &va);
        sbl_iter_value(&ib, &vb);
        int r = value_cmp(&va, &vb, coll);
        if (r != 0)
            return r;
    }
}

int sbl_raw_doc_compare(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
    return raw_cmp(a, alen, b, blen, true, NULL);
}

int sbl_doc_compare(const bson_t *a, const bson_t *b)
{
    return raw_cmp(bson_get_data(a), a->len, bson_get_data(b), b->len, true, NULL);
}

int sbl_value_compare(const bson_value_t *a, const bson_value_t *b)
{
    return value_cmp(a, b, NULL);
}

int sbl_value_compare_coll(const bson_value_t *a, const bson_value_t *b,
                           const sbl_collation_t *coll)
{
    return value_cmp(a, b, coll);
}

static int value_cmp(const bson_value_t *a, const bson_value_t *b, const sbl_collation_t *coll)
{
    bson_type_t t = a->value_type;
    int ra = sbl_type_rank(t), rb = sbl_type_rank(b->value_type);
    if (ra != rb)
        return ra < rb ? -1 : 1;
    switch (t) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        return number_cmp(a, b);
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL: {
        /* v_utf8 and v_symbol have different layouts; take each side by its own type. */
        const char *sa, *sb;
        size_t la, lb;
        if (t == BSON_TYPE_UTF8) {
            sa = a->value.v_utf8.str;
            la = a->value.v_utf8.len;
        } else {
            sa = a->value.v_symbol.symbol;
            la = a->value.v_symbol.len;
        }
        if (b->value_type == BSON_TYPE_UTF8) {
            sb = b->value.v_utf8.str;
            lb = b->value.v_utf8.len;
        } else {
            sb = b->value.v_symbol.symbol;
            lb = b->value.v_symbol.len;
        }
        if (coll != NULL)
            return sbl_collation_compare(coll, sa, la, sb, lb);
        return bytes_cmp(sa, la, sb, lb);
    }
    case BSON_TYPE_DOCUMENT:
        return raw_cmp(a->value.v_doc.data, a->value.v_doc.data_len, b->value.v_doc.data,
                       b->value.v_doc.data_len, true, coll);
    case BSON_TYPE_ARRAY:
        return raw_cmp(a->value.v_doc.data, a->value.v_doc.data_len, b->value.v_doc.data,
                       b->value.v_doc.data_len, false, coll);
    case BSON_TYPE_BINARY: {
        uint32_t la = a->value.v_binary.data_len, lb = b->value.v_binary.data_len;
        if (la != lb)
            return la < lb ? -1 : 1;
        if (a->value.v_binary.subtype != b->value.v_binary.subtype)
            return a->value.v_binary.subtype < b->value.v_binary.subtype ? -1 : 1;
        return la == 0 ? 0 : sign3(memcmp(a->value.v_binary.data, b->value.v_binary.data, la));
    }
    case BSON_TYPE_OID:
        return sign3(memcmp(a->value.v_oid.bytes, b->value.v_oid.bytes, 12));
    case BSON_TYPE_BOOL:
        return (a->value.v_bool > b->value.v_bool) - (a->value.v_bool < b->value.v_bool);
    case BSON_TYPE_DATE_TIME: {
        int64_t x = a->value.v_datetime, y = b->value.v_datetime;
        return (x > y) - (x < y);
    }
    case BSON_TYPE_TIMESTAMP: {
        uint64_t x = (uint64_t)a->value.v_timestamp.timestamp << 32 | a->value.v_timestamp.increment;
        uint64_t y = (uint64_t)b->value.v_timestamp.timestamp << 32 | b->value.v_timestamp.increment;
        return (x > y) - (x < y);
    }
    case BSON_TYPE_REGEX: {
        int r = strcmp(a->value.v_regex.regex, b->value.v_regex.regex);
        if (r != 0)
            return sign3(r);
        return sign3(strcmp(a->value.v_regex.options ? a->value.v_regex.options : "",
                            b->value.v_regex.options ? b->value.v_regex.options : ""));
    }
    case BSON_TYPE_DBPOINTER: {
        /* MongoDB: by namespace length, then namespace bytes, then the ObjectId. */
        uint32_t la = a->value.v_dbpointer.collection_len;
        uint32_t lb = b->value.v_dbpointer.collection_len;
        if (la != lb)
            return la < lb ? -1 : 1;
        int r = memcmp(a->value.v_dbpointer.collection, b->value.v_dbpointer.collection, la);
        if (r != 0)
            return sign3(r);
        return sign3(memcmp(a->value.v_dbpointer.oid.bytes, b->value.v_dbpointer.oid.bytes, 12));
    }
    case BSON_TYPE_CODE:
        return bytes_cmp(a->value.v_code.code, a->value.v_code.code_len, b->value.v_code.code,
                         b->value.v_code.code_len);
    case BSON_TYPE_CODEWSCOPE: {
        int r = bytes_cmp(a->value.v_codewscope.code, a->value.v_codewscope.code_len,
                          b->value.v_codewscope.code, b->value.v_codewscope.code_len);
        if (r != 0)
            return r;
        return raw_cmp(a->value.v_codewscope.scope_data, a->value.v_codewscope.scope_len,
                       b->value.v_codewscope.scope_data, b->value.v_codewscope.scope_len, true,
                       NULL);
    }
    default:
        /* MinKey, MaxKey, null, undefined: one value per rank. */
        return 0;
    }
}

bool sbl_value_equal(const bson_value_t *a, const bson_value_t *b)
{
    return sbl_value_compare(a, b) == 0;
}

void sbl_iter_value(const bson_iter_t *it, bson_value_t *out)
{
    memset(out, 0, sizeof(*out));
    bson_type_t t = bson_iter_type(it);
    out->value_type = t;
    switch (t) {
    case BSON_TYPE_DOUBLE:
        out->value.v_double = bson_iter_double(it);
        break;
    case BSON_TYPE_UTF8:
        out->value.v_utf8.str = (char *)bson_iter_utf8(it, &out->value.v_utf8.len);
        break;
    case BSON_TYPE_DOCUMENT:
        bson_iter_document(it, &out->value.v_doc.data_len,
                           (const uint8_t **)&out->value.v_doc.data);
        break;
    case BSON_TYPE_ARRAY:
        bson_iter_array(it, &out->value.v_doc.data_len, (const uint8_t **)&out->value.v_doc.data);
        break;
    case BSON_TYPE_BINARY:
        bson_iter_binary(it, &out->value.v_binary.subtype, &out->value.v_binary.data_len,
                         (const uint8_t **)&out->value.v_binary.data);
        break;
    case BSON_TYPE_OID:
        bson_oid_copy(bson_iter_oid(it), &out->value.v_oid);
        break;
    case BSON_TYPE_BOOL:
        out->value.v_bool = bson_iter_bool(it);
        break;
    case BSON_TYPE_DATE_TIME:
        out->value.v_datetime = bson_iter_date_time(it);
        break;
    case BSON_TYPE_REGEX:
        out->value.v_regex.regex =
            (char *)bson_iter_regex(it, (const char **)&out->value.v_regex.options);
        break;
    case BSON_TYPE_DBPOINTER: {
        const bson_oid_t *oid;
        bson_iter_dbpointer(it, &out->value.v_dbpointer.collection_len,
                            (const char **)&out->value.v_dbpointer.collection, &oid);
        if (oid != NULL)
            bson_oid_copy(oid, &out->value.v_dbpointer.oid);
        break;
    }
    case BSON_TYPE_CODE:
        out->value.v_code.code = (char *)bson_iter_code(it, &out->value.v_code.code_len);
        break;
    case BSON_TYPE_SYMBOL:
        out->value.v_symbol.symbol = (char *)bson_iter_symbol(it, &out->value.v_symbol.len);
        break;
    case BSON_TYPE_CODEWSCOPE:
        out->value.v_codewscope.code = (char *)bson_iter_codewscope(
            it, &out->value.v_codewscope.code_len, &out->value.v_codewscope.scope_len,
            (const uint8_t **)&out->value.v_codewscope.scope_data);
        break;
    case BSON_TYPE_INT32:
        out->value.v_int32 = bson_iter_int32(it);
        break;
    case BSON_TYPE_TIMESTAMP:
        bson_iter_timestamp(it, &out->value.v_timestamp.timestamp,
                            &out->value.v_timestamp.increment);
        break;
    case BSON_TYPE_INT64:
        out->value.v_int64 = bson_iter_int64(it);
        break;
    case BSON_TYPE_DECIMAL128:
        bson_iter_decimal128(it, &out->value.v_decimal128);
        break;
    default:
        /* EOD, undefined, null, MinKey, MaxKey carry no payload. */
        break;
    }
}

const char *sbl_type_name(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_DOUBLE: return "double";
    case BSON_TYPE_UTF8: return "string";
    case BSON_TYPE_DOCUMENT: return "object";
    case BSON_TYPE_ARRAY: return "array";
    case BSON_TYPE_BINARY: return "binData";
    case BSON_TYPE_UNDEFINED: return "undefined";
    case BSON_TYPE_OID: return "objectId";
    case BSON_TYPE_BOOL: return "bool";
    case BSON_TYPE_DATE_TIME: return "date";
    case BSON_TYPE_NULL: return "null";
    case BSON_TYPE_REGEX: return "regex";
    case BSON_TYPE_DBPOINTER: return "dbPointer";
    case BSON_TYPE_CODE: return "javascript";
    case BSON_TYPE_SYMBOL: return "symbol";
    case BSON_TYPE_CODEWSCOPE: return "javascriptWithScope";
    case BSON_TYPE_INT32: return "int";
    case BSON_TYPE_TIMESTAMP: return "timestamp";
    case BSON_TYPE_INT64: return "long";
    case BSON_TYPE_DECIMAL128: return "decimal";
    case BSON_TYPE_MINKEY: return "minKey";
    case BSON_TYPE_MAXKEY: return "maxKey";
    default: return "missing";
    }
}

bool sbl_iter_doc(const bson_iter_t *it, bson_t *out)
{
    uint32_t len = 0;
    const uint8_t *data = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return false;
    bson_iter_document(it, &len, &data);
    return bson_init_static(out, data, len);
}

bool sbl_iter_array(const bson_iter_t *it, bson_t *out)
{
    const uint8_t *data;
    uint32_t len;
    if (!BSON_ITER_HOLDS_ARRAY(it))
        return false;
    bson_iter_array(it, &len, &data);
    return bson_init_static(out, data, len);
}
