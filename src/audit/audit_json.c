/*
 * audit_json.c: BSON to relaxed extended JSON, written straight into the
 * audit buffer (no intermediate string, no per-character appends): the
 * formatting cost of an audit event is most of its cost.
 *
 * What must stay true: the output is the relaxed extended JSON of the input
 * (libbson's bson_as_relaxed_extended_json gives the same values, parsed
 * back); strings are escaped for JSON (quote, backslash, control characters;
 * other bytes as they are).  Nesting depth is bounded by the wire layer's
 * BSON validation.
 */
#include "audit/audit_int.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool audit_buf_reserve(audit_buf_t *b, size_t n)
{
    if (b->len + n <= b->cap)
        return true;
    size_t cap = b->cap != 0 ? b->cap : 64 * 1024;
    while (cap < b->len + n)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (p == NULL) {
        b->oom = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void audit_buf_put(audit_buf_t *b, const void *data, size_t n)
{
    if (n == 0 || !audit_buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, data, n);
    b->len += n;
}

static inline void put_c(audit_buf_t *b, char c)
{
    if (audit_buf_reserve(b, 1))
        b->data[b->len++] = c;
}

/* Bytes that need escaping in a JSON string: control characters, quote, backslash. */
static const unsigned char escape_tab[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, ['"'] = 1, ['\\'] = 1,
};

static inline bool needs_escape(unsigned char c)
{
    return escape_tab[c] != 0;
}

void audit_json_str(audit_buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    put_c(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!needs_escape(c))
            continue;
        audit_buf_put(b, s + run, i - run);
        run = i + 1;
        char esc[6] = {'\\', 0};
        size_t el = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            el = 6;
        }
        audit_buf_put(b, esc, el);
    }
    audit_buf_put(b, s + run, n - run);
    put_c(b, '"');
}

static void put_fmt(audit_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_fmt(audit_buf_t *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        audit_buf_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* Decimal digits of v (faster than printf for the common integers). */
void audit_json_int(audit_buf_t *b, int64_t v)
{
    char tmp[24];
    int i = sizeof(tmp);
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        tmp[--i] = '-';
    audit_buf_put(b, tmp + i, sizeof(tmp) - (size_t)i);
}

static void put_double(audit_buf_t *b, double d)
{
    if (isnan(d)) {
        audit_buf_puts(b, "{\"$numberDouble\":\"NaN\"}");
        return;
    }
    if (isinf(d)) {
        audit_buf_puts(b, d > 0 ? "{\"$numberDouble\":\"Infinity\"}"
                                : "{\"$numberDouble\":\"-Infinity\"}");
        return;
    }
    char tmp[40];
    int n = snprintf(tmp, sizeof(tmp), "%.17g", d);
    if (n <= 0 || (size_t)n >= sizeof(tmp))
        return;
    audit_buf_put(b, tmp, (size_t)n);
    if (strpbrk(tmp, ".eE") == NULL)
        audit_buf_puts(b, ".0");
}

void audit_json_date(audit_buf_t *b, int64_t ms)
{
    /* The same second is formatted over and over: keep the last one per thread. */
    static _Thread_local int64_t last_sec = INT64_MIN;
    static _Thread_local char last[24];
    int64_t sec = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
    if (sec < 0 || sec > 253402300799LL) { /* outside years 1970-9999: canonical form */
        audit_buf_puts(b, "{\"$date\":{\"$numberLong\":\"");
        audit_json_int(b, ms);
        audit_buf_puts(b, "\"}}");
        return;
    }
    if (sec != last_sec) {
        time_t t = (time_t)sec;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(last, sizeof(last), "%Y-%m-%dT%H:%M:%S", &tm);
        last_sec = sec;
    }
    int msec = (int)(ms - sec * 1000);
    char tail[8] = {'.', (char)('0' + msec / 100), (char)('0' + msec / 10 % 10),
                    (char)('0' + msec % 10), 'Z', '"', '}', 0};
    audit_buf_puts(b, "{\"$date\":\"");
    audit_buf_puts(b, last);
    audit_buf_put(b, tail, 7);
}

static void put_value(audit_buf_t *b, const bson_iter_t *it);

static void put_members(audit_buf_t *b, bson_iter_t *it, bool array)
{
    bool first = true;
    while (bson_iter_next(it)) {
        if (!first)
            put_c(b, ',');
        first = false;
        if (!array) {
            audit_json_str(b, bson_iter_key(it), bson_iter_key_len(it));
            put_c(b, ':');
        }
        put_value(b, it);
    }
}

static void put_sub(audit_buf_t *b, const bson_iter_t *it, bool array)
{
    bson_iter_t child;
    put_c(b, array ? '[' : '{');
    if (bson_iter_recurse(it, &child))
        put_members(b, &child, array);
    put_c(b, array ? ']' : '}');
}

static void put_oid(audit_buf_t *b, const bson_oid_t *oid)
{
    char hex[25];
    bson_oid_to_string(oid, hex);
    audit_buf_puts(b, "{\"$oid\":\"");
    audit_buf_put(b, hex, 24);
    audit_buf_puts(b, "\"}");
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static char b64_pairs[4096][2]; /* 12 bits -> two base64 characters */
static pthread_once_t b64_once = PTHREAD_ONCE_INIT;

static void b64_init(void)
{
    for (int i = 0; i < 4096; i++) {
        b64_pairs[i][0] = b64[i >> 6];
        b64_pairs[i][1] = b64[i & 63];
    }
}

static void put_binary(audit_buf_t *b, bson_subtype_t sub, const uint8_t *data, uint32_t n)
{
    pthread_once(&b64_once, b64_init);
    audit_buf_puts(b, "{\"$binary\":{\"base64\":\"");
    if (!audit_buf_reserve(b, ((size_t)n + 2) / 3 * 4))
        return;
    char *o = b->data + b->len;
    uint32_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8 | data[i + 2];
        memcpy(o, b64_pairs[v >> 12], 2);
        memcpy(o + 2, b64_pairs[v & 4095], 2);
        o += 4;
    }
    if (i < n) {
        uint32_t v = (uint32_t)data[i] << 16 | (i + 1 < n ? (uint32_t)data[i + 1] << 8 : 0);
        *o++ = b64[v >> 18];
        *o++ = b64[(v >> 12) & 63];
        *o++ = i + 1 < n ? b64[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    b->len = (size_t)(o - b->data);
    static const char hex[] = "0123456789abcdef";
    char tail[] = "\",\"subType\":\"00\"}}";
    tail[13] = hex[((unsigned)sub >> 4) & 15];
    tail[14] = hex[(unsigned)sub & 15];
    audit_buf_put(b, tail, sizeof(tail) - 1);
}

static void put_value(audit_buf_t *b, const bson_iter_t *it)
{
    uint32_t n;
    const char *s;
    switch (bson_iter_type(it)) {
    case BSON_TYPE_DOUBLE:
        put_double(b, bson_iter_double(it));
        break;
    case BSON_TYPE_UTF8:
        s = bson_iter_utf8(it, &n);
        audit_json_str(b, s, n);
        break;
    case BSON_TYPE_DOCUMENT:
        put_sub(b, it, false);
        break;
    case BSON_TYPE_ARRAY:
        put_sub(b, it, true);
        break;
    case BSON_TYPE_BINARY: {
        bson_subtype_t sub;
        const uint8_t *data;
        bson_iter_binary(it, &sub, &n, &data);
        put_binary(b, sub, data, n);
        break;
    }
    case BSON_TYPE_UNDEFINED:
        audit_buf_puts(b, "{\"$undefined\":true}");
        break;
    case BSON_TYPE_OID:
        put_oid(b, bson_iter_oid(it));
        break;
    case BSON_TYPE_BOOL:
        audit_buf_puts(b, bson_iter_bool(it) ? "true" : "false");
        break;
    case BSON_TYPE_DATE_TIME:
        audit_json_date(b, bson_iter_date_time(it));
        break;
    case BSON_TYPE_NULL:
        audit_buf_puts(b, "null");
        break;
    case BSON_TYPE_REGEX: {
        const char *opts;
        s = bson_iter_regex(it, &opts);
        audit_buf_puts(b, "{\"$regularExpression\":{\"pattern\":");
        audit_json_str(b, s, strlen(s));
        audit_buf_puts(b, ",\"options\":");
        audit_json_str(b, opts, strlen(opts));
        audit_buf_puts(b, "}}");
        break;
    }
    case BSON_TYPE_DBPOINTER: {
        const bson_oid_t *oid;
        bson_iter_dbpointer(it, &n, &s, &oid);
        audit_buf_puts(b, "{\"$dbPointer\":{\"$ref\":");
        audit_json_str(b, s, n);
        audit_buf_puts(b, ",\"$id\":");
        put_oid(b, oid);
        audit_buf_puts(b, "}}");
        break;
    }
    case BSON_TYPE_CODE:
        s = bson_iter_code(it, &n);
        audit_buf_puts(b, "{\"$code\":");
        audit_json_str(b, s, n);
        put_c(b, '}');
        break;
    case BSON_TYPE_SYMBOL:
        s = bson_iter_symbol(it, &n);
        audit_buf_puts(b, "{\"$symbol\":");
        audit_json_str(b, s, n);
        put_c(b, '}');
        break;
    case BSON_TYPE_CODEWSCOPE: {
        uint32_t slen;
        const uint8_t *sdata;
        bson_t scope;
        s = bson_iter_codewscope(it, &n, &slen, &sdata);
        audit_buf_puts(b, "{\"$code\":");
        audit_json_str(b, s, n);
        audit_buf_puts(b, ",\"$scope\":");
        if (bson_init_static(&scope, sdata, slen))
            audit_json_doc(b, &scope, false);
        else
            audit_buf_puts(b, "{}");
        put_c(b, '}');
        break;
    }
    case BSON_TYPE_INT32:
        audit_json_int(b, bson_iter_int32(it));
        break;
    case BSON_TYPE_TIMESTAMP: {
        uint32_t t, inc;
        bson_iter_timestamp(it, &t, &inc);
        put_fmt(b, "{\"$timestamp\":{\"t\":%u,\"i\":%u}}", t, inc);
        break;
    }
    case BSON_TYPE_INT64:
        audit_json_int(b, bson_iter_int64(it));
        break;
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_t d;
        char str[BSON_DECIMAL128_STRING];
        bson_iter_decimal128(it, &d);
        bson_decimal128_to_string(&d, str);
        audit_buf_puts(b, "{\"$numberDecimal\":\"");
        audit_buf_puts(b, str);
        audit_buf_puts(b, "\"}");
        break;
    }
    case BSON_TYPE_MAXKEY:
        audit_buf_puts(b, "{\"$maxKey\":1}");
        break;
    case BSON_TYPE_MINKEY:
        audit_buf_puts(b, "{\"$minKey\":1}");
        break;
    default:
        audit_buf_puts(b, "null");
        break;
    }
}

void audit_json_doc(audit_buf_t *b, const bson_t *doc, bool array)
{
    bson_iter_t it;
    put_c(b, array ? '[' : '{');
    if (bson_iter_init(&it, doc))
        put_members(b, &it, array);
    put_c(b, array ? ']' : '}');
}

void audit_json_fields(audit_buf_t *b, const bson_t *doc)
{
    bson_iter_t it;
    if (bson_iter_init(&it, doc))
        put_members(b, &it, false);
}
