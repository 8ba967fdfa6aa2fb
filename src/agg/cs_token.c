/*
 * cs_token.c: change streams' resume tokens in mongod's format.  A token is
 * {_data: "<hex>"}: the upper-case hex of mongod's KeyString encoding of
 *   clusterTime, version (2), tokenType (0 high-water mark, 128 event),
 *   txnOpIndex, fromInvalidate, and for events the collection UUID and the
 *   event identifier ({operationType, documentKey} or
 *   {operationType, operationDescription}).
 * A fragment of a split event ($changeStreamSplitLargeEvent) has its
 * fragmentNum last.  The KeyString form sorts as the events do (clusterTime
 * first), so the hex strings compare in event order with strcmp.
 *
 * What must stay true: encode then decode gives back the clusterTime,
 * tokenType, txnOpIndex, fromInvalidate and fragmentNum (the resume point);
 * the UUID and event identifier between them are skipped, not read (drivers
 * treat all of it as opaque).
 */
#include "agg/cs_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum {
    KS_MINKEY = 10, KS_UNDEFINED = 15, KS_NULL = 20, KS_NUMERIC = 30,
    KS_NEG_LARGE = 31, KS_NEG_8 = 32, KS_NEG_1 = 39, KS_ZERO = 41, KS_POS_1 = 43,
    KS_POS_8 = 50, KS_POS_LARGE = 51, KS_STRING = 60, KS_OBJECT = 70, KS_ARRAY = 80,
    KS_BINDATA = 90, KS_OID = 100, KS_FALSE = 110, KS_TRUE = 111, KS_DATE = 120,
    KS_TIMESTAMP = 130, KS_REGEX = 140, KS_CODE = 160, KS_MAXKEY = 240, KS_END = 4
};

static void put_be(sbl_buf_t *b, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--)
        sbl_buf_append_byte(b, (uint8_t)(v >> (8 * i)));
}

/* A string's bytes with NUL escaped as 00 FF, then 00. */
static void put_cstr(sbl_buf_t *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sbl_buf_append_byte(b, (uint8_t)s[i]);
        if (s[i] == '\0')
            sbl_buf_append_byte(b, 0xff);
    }
    sbl_buf_append_byte(b, 0);
}

static void put_int(sbl_buf_t *b, int64_t v)
{
    if (v == 0) {
        sbl_buf_append_byte(b, KS_ZERO);
        return;
    }
    uint64_t mag = v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
    if (mag >> 62) { /* too large for the shifted form: the 8 bytes as they are */
        sbl_buf_append_byte(b, v < 0 ? KS_NEG_LARGE : KS_POS_LARGE);
        put_be(b, v < 0 ? ~mag : mag, 8);
        return;
    }
    uint64_t sh = mag << 1;
    int n = 1;
    while (n < 8 && (sh >> (8 * n)) != 0)
        n++;
    if (v > 0) {
        sbl_buf_append_byte(b, (uint8_t)(KS_POS_1 + n - 1));
        put_be(b, sh, n);
    } else {
        sbl_buf_append_byte(b, (uint8_t)(KS_NEG_1 - (n - 1)));
        put_be(b, ~sh, n);
    }
}

static void put_value(sbl_buf_t *b, const bson_iter_t *it);

static uint8_t generic_type(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_MINKEY: return KS_MINKEY;
    case BSON_TYPE_MAXKEY: return KS_MAXKEY;
    case BSON_TYPE_UNDEFINED: return KS_UNDEFINED;
    case BSON_TYPE_NULL: return KS_NULL;
    case BSON_TYPE_INT32: case BSON_TYPE_INT64: case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128: return KS_NUMERIC;
    case BSON_TYPE_UTF8: case BSON_TYPE_SYMBOL: return KS_STRING;
    case BSON_TYPE_DOCUMENT: return KS_OBJECT;
    case BSON_TYPE_ARRAY: return KS_ARRAY;
    case BSON_TYPE_BINARY: return KS_BINDATA;
    case BSON_TYPE_OID: return KS_OID;
    case BSON_TYPE_BOOL: return KS_FALSE;
    case BSON_TYPE_DATE_TIME: return KS_DATE;
    case BSON_TYPE_TIMESTAMP: return KS_TIMESTAMP;
    case BSON_TYPE_REGEX: return KS_REGEX;
    default: return KS_CODE;
    }
}

/* An object's fields: generic type, name, value; then 00. */
static void put_fields(sbl_buf_t *b, bson_iter_t *f)
{
    while (bson_iter_next(f)) {
        sbl_buf_append_byte(b, generic_type(bson_iter_type(f)));
        put_cstr(b, bson_iter_key(f), strlen(bson_iter_key(f)));
        put_value(b, f);
    }
    sbl_buf_append_byte(b, 0);
}

static void put_value(sbl_buf_t *b, const bson_iter_t *it)
{
    bson_iter_t sub;
    uint32_t len = 0, t = 0, i = 0;
    const uint8_t *data;
    bson_subtype_t st;
    switch (bson_iter_type(it)) {
    case BSON_TYPE_INT32:
        put_int(b, bson_iter_int32(it));
        break;
    case BSON_TYPE_INT64:
        put_int(b, bson_iter_int64(it));
        break;
    case BSON_TYPE_DOUBLE: {
        double d = bson_iter_double(it);
        if (d == floor(d) && fabs(d) < 9.2e18) {
            put_int(b, (int64_t)d);
        } else { /* the bits, sign-ordered (mongod's exact fraction form differs) */
            uint64_t bits;
            memcpy(&bits, &d, 8);
            sbl_buf_append_byte(b, d < 0 ? KS_NEG_LARGE : KS_POS_LARGE);
            put_be(b, d < 0 ? ~bits : bits, 8);
        }
        break;
    }
    case BSON_TYPE_UTF8: {
        const char *s = bson_iter_utf8(it, &len);
        sbl_buf_append_byte(b, KS_STRING);
        put_cstr(b, s, len);
        break;
    }
    case BSON_TYPE_DOCUMENT:
        sbl_buf_append_byte(b, KS_OBJECT);
        bson_iter_recurse(it, &sub);
        put_fields(b, &sub);
        break;
    case BSON_TYPE_ARRAY:
        sbl_buf_append_byte(b, KS_ARRAY);
        bson_iter_recurse(it, &sub);
        while (bson_iter_next(&sub))
            put_value(b, &sub);
        sbl_buf_append_byte(b, 0);
        break;
    case BSON_TYPE_BINARY:
        bson_iter_binary(it, &st, &len, &data);
        sbl_buf_append_byte(b, KS_BINDATA);
        if (len < 0xff) {
            sbl_buf_append_byte(b, (uint8_t)len);
        } else {
            sbl_buf_append_byte(b, 0xff);
            put_be(b, len, 4);
        }
        sbl_buf_append_byte(b, (uint8_t)st);
        sbl_buf_append(b, data, len);
        break;
    case BSON_TYPE_OID:
        sbl_buf_append_byte(b, KS_OID);
        sbl_buf_append(b, bson_iter_oid(it)->bytes, 12);
        break;
    case BSON_TYPE_BOOL:
        sbl_buf_append_byte(b, bson_iter_bool(it) ? KS_TRUE : KS_FALSE);
        break;
    case BSON_TYPE_DATE_TIME:
        sbl_buf_append_byte(b, KS_DATE);
        put_be(b, (uint64_t)bson_iter_date_time(it) ^ (1ull << 63), 8);
        break;
    case BSON_TYPE_TIMESTAMP:
        bson_iter_timestamp(it, &t, &i);
        sbl_buf_append_byte(b, KS_TIMESTAMP);
        put_be(b, (uint64_t)t << 32 | i, 8);
        break;
    case BSON_TYPE_MINKEY: sbl_buf_append_byte(b, KS_MINKEY); break;
    case BSON_TYPE_MAXKEY: sbl_buf_append_byte(b, KS_MAXKEY); break;
    case BSON_TYPE_UNDEFINED: sbl_buf_append_byte(b, KS_UNDEFINED); break;
    default:
        sbl_buf_append_byte(b, KS_NULL);
        break;
    }
}

/* Upper-case hex of d[0..n) after the first strlen(prefix) - 2 characters
 * of prefix (NULL: none); a new string. */
static char *to_hex(const uint8_t *d, size_t n, const char *prefix)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t pl = prefix != NULL && strlen(prefix) >= 2 ? strlen(prefix) - 2 : 0;
    char *s = bson_malloc(pl + 2 * n + 1);
    memcpy(s, prefix != NULL ? prefix : "", pl);
    for (size_t i = 0; i < n; i++) {
        s[pl + 2 * i] = hex[d[i] >> 4];
        s[pl + 2 * i + 1] = hex[d[i] & 15];
    }
    s[pl + 2 * n] = '\0';
    return s;
}

void sbl_cs_token_make(const sbl_cs_pos_t *p, const uint8_t *uuid, const bson_t *event_id,
                       bson_t *out)
{
    sbl_buf_t b;
    sbl_buf_init(&b);
    sbl_buf_append_byte(&b, KS_TIMESTAMP);
    put_be(&b, p->ts, 8);
    put_int(&b, 2); /* version */
    put_int(&b, p->event ? 128 : 0);
    put_int(&b, p->op_index);
    sbl_buf_append_byte(&b, p->from_invalidate ? KS_TRUE : KS_FALSE);
    if (uuid != NULL) {
        sbl_buf_append_byte(&b, KS_BINDATA);
        sbl_buf_append_byte(&b, 16);
        sbl_buf_append_byte(&b, BSON_SUBTYPE_UUID);
        sbl_buf_append(&b, uuid, 16);
    }
    if (event_id != NULL) {
        bson_iter_t f;
        sbl_buf_append_byte(&b, KS_OBJECT);
        bson_iter_init(&f, event_id);
        put_fields(&b, &f);
    }
    if (p->fragment > 0)
        put_int(&b, p->fragment - 1);
    sbl_buf_append_byte(&b, KS_END);
    char *s = to_hex(b.data, b.len, NULL);
    BSON_APPEND_UTF8(out, "_data", s);
    bson_free(s);
    sbl_buf_destroy(&b);
}

char *sbl_cs_token_fragment(const char *data, int64_t n)
{
    size_t len = strlen(data);
    sbl_buf_t b;
    sbl_buf_init(&b);
    put_int(&b, n);
    sbl_buf_append_byte(&b, KS_END);
    /* the event's bytes without its end mark (the last two hex digits) */
    char *s = to_hex(b.data, b.len, len >= 2 ? data : "");
    sbl_buf_destroy(&b);
    return s;
}

/* Read an integer written by put_int (small non-negative ones only). */
static bool get_int(const uint8_t *d, size_t n, size_t *off, int64_t *v)
{
    if (*off >= n)
        return false;
    uint8_t c = d[(*off)++];
    if (c == KS_ZERO) {
        *v = 0;
        return true;
    }
    if (c < KS_POS_1 || c > KS_POS_8)
        return false;
    int nb = c - KS_POS_1 + 1;
    if (*off + (size_t)nb > n)
        return false;
    uint64_t sh = 0;
    for (int i = 0; i < nb; i++)
        sh = sh << 8 | d[(*off)++];
    *v = (int64_t)(sh >> 1);
    return true;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                          : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Step over a string written by put_cstr at d[*off] (NUL inside is 00 FF). */
static bool skip_cstr(const uint8_t *d, size_t n, size_t *off)
{
    while (*off < n && !(d[*off] == 0 && (*off + 1 >= n || d[*off + 1] != 0xff)))
        *off += d[*off] == 0 ? 2 : 1;
    return (*off)++ < n;
}

/* Step over one value written by put_value at d[*off]; false when it runs
 * past n or is not one of ours. */
static bool skip_value(const uint8_t *d, size_t n, size_t *off, int depth)
{
    if (*off >= n || depth > 200)
        return false;
    uint8_t t = d[(*off)++];
    size_t len = 0;
    if (t == KS_MINKEY || t == KS_UNDEFINED || t == KS_NULL || t == KS_MAXKEY ||
        t == KS_FALSE || t == KS_TRUE || t == KS_ZERO)
        return true;
    if (t == KS_STRING)
        return skip_cstr(d, n, off);
    if (t == KS_OBJECT || t == KS_ARRAY) { /* [type, name,] value ...; then 00 */
        while (*off < n && d[*off] != 0)
            if ((t == KS_OBJECT && !(++*off <= n && skip_cstr(d, n, off))) ||
                !skip_value(d, n, off, depth + 1))
                return false;
        return (*off)++ < n;
    }
    if (t == KS_NEG_LARGE || t == KS_POS_LARGE || t == KS_DATE || t == KS_TIMESTAMP)
        len = 8;
    else if (t == KS_OID)
        len = 12;
    else if (t >= KS_NEG_8 && t <= KS_NEG_1)
        len = (size_t)(KS_NEG_1 - t + 1);
    else if (t >= KS_POS_1 && t <= KS_POS_8)
        len = (size_t)(t - KS_POS_1 + 1);
    else if (t == KS_BINDATA && *off < n) {
        len = d[(*off)++];
        if (len == 0xff) {
            if (*off + 4 > n)
                return false;
            len = (size_t)d[*off] << 24 | (size_t)d[*off + 1] << 16 | (size_t)d[*off + 2] << 8 |
                  d[*off + 3];
            *off += 4;
        }
        len += 1; /* the subtype */
    } else
        return false;
    if (*off + len > n)
        return false;
    *off += len;
    return true;
}

int sbl_cs_token_parse(const bson_t *token, sbl_cs_pos_t *p, sbl_err_t *err)
{
    bson_iter_t it;
    uint32_t len = 0;
    memset(p, 0, sizeof(*p));
    if (!bson_iter_init_find(&it, token, "_data") || !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "Bad resume token: _data of missing or of wrong type. Expected "
                           "string, got %s",
                           bson_iter_init_find(&it, token, "_data") ? "another type" : "missing");
    const char *s = bson_iter_utf8(&it, &len);
    if (len % 2 != 0 || len < 18)
        return sbl_err_set(err, SBL_E_FailedToParse, "resume token string was not a valid hex "
                                                     "string");
    size_t n = len / 2;
    uint8_t *d = bson_malloc(n);
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            bson_free(d);
            return sbl_err_set(err, SBL_E_FailedToParse,
                               "resume token string was not a valid hex string");
        }
        d[i] = (uint8_t)(hi << 4 | lo);
    }
    size_t off = 0;
    int64_t version = 0, type = 128, idx = 0;
    int rc = 0;
    if (d[off++] != KS_TIMESTAMP || n < 9) {
        rc = sbl_err_set(err, SBL_E_FailedToParse, "Bad resume token: clusterTime of wrong type");
        goto out;
    }
    for (int i = 0; i < 8; i++)
        p->ts = p->ts << 8 | d[off++];
    if (!get_int(d, n, &off, &version) || version > 2 ||
        (version >= 1 && !get_int(d, n, &off, &type)) || !get_int(d, n, &off, &idx) ||
        off >= n || (d[off] != KS_TRUE && d[off] != KS_FALSE)) {
        rc = sbl_err_set(err, SBL_E_FailedToParse, "Bad resume token: malformed _data");
        goto out;
    }
    p->event = type != 0;
    p->op_index = idx;
    p->from_invalidate = d[off++] == KS_TRUE;
    /* then the UUID and the event identifier (skipped), and a fragment's number */
    bool ok = true;
    int64_t frag = 0;
    if (off < n && d[off] == KS_BINDATA)
        ok = skip_value(d, n, &off, 0);
    if (ok && off < n && d[off] == KS_OBJECT)
        ok = skip_value(d, n, &off, 0);
    if (ok && off < n && d[off] != KS_END && get_int(d, n, &off, &frag))
        p->fragment = frag + 1;
out:
    bson_free(d);
    return rc;
}

int sbl_cs_pos_cmp(const sbl_cs_pos_t *a, const sbl_cs_pos_t *b)
{
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    if (a->event != b->event)
        return a->event ? 1 : -1;
    if (a->op_index != b->op_index)
        return a->op_index < b->op_index ? -1 : 1;
    if (a->from_invalidate != b->from_invalidate)
        return a->from_invalidate ? 1 : -1;
    if (a->fragment != b->fragment)
        return a->fragment < b->fragment ? -1 : 1;
    return 0;
}

char *sbl_cs_token_str(const bson_t *tok)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, tok, "_data") && BSON_ITER_HOLDS_UTF8(&it)
               ? bson_strdup(bson_iter_utf8(&it, NULL)) : bson_strdup("");
}
