/*
 * tool_json.c: Extended JSON v2 in and out.  Output is libbson's canonical or
 * relaxed form with the whitespace outside strings taken out (one compact
 * document per line, as mongoexport writes), written by a writer of its own
 * for the common types (libbson's plus compaction cost 3x more).  Input is split into top-level
 * objects by a small scanner (strings and escapes respected), each parsed by
 * libbson, so concatenated documents and a --jsonArray array read the same
 * way and a file of any size streams.  Command-line values (--query, --sort)
 * may use the shell's relaxed spelling: unquoted keys and single quotes.
 */
#include "tool.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

size_t tool_json_compact(char *s, size_t len)
{
    size_t o = 0;
    bool in_str = false, esc = false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
            continue;
        }
        s[o++] = c;
    }
    s[o] = '\0';
    return o;
}

/* ---- the writer ----------------------------------------------------------------------
 * The types YCSB-like data is made of (strings, integers, booleans, null, binary,
 * ObjectIds, documents, arrays) are written here directly, byte for byte as
 * libbson's compacted output has them; any other value goes through libbson
 * (one value at a time), so the output is libbson's everywhere. */

static void put(bson_string_t *o, const char *s, size_t n)
{
    if (o->alloc - o->len <= n) {
        size_t want = o->len + n + 1;
        size_t cap = o->alloc ? o->alloc : 64;
        while (cap < want)
            cap *= 2;
        o->str = bson_realloc(o->str, cap);
        o->alloc = (uint32_t)cap;
    }
    memcpy(o->str + o->len, s, n);
    o->len += (uint32_t)n;
    o->str[o->len] = '\0';
}

static void put_str(bson_string_t *o, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t start = 0;
    put(o, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[7];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            u[0] = '\\', u[1] = 'u', u[2] = '0', u[3] = '0', u[4] = hex[c >> 4], u[5] = hex[c & 15];
            u[6] = '\0';
            esc = u;
        }
        put(o, s + start, i - start);
        put(o, esc, strlen(esc));
        start = i + 1;
    }
    put(o, s + start, n - start);
    put(o, "\"", 1);
}

static void put_b64(bson_string_t *o, const uint8_t *p, uint32_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char buf[256];
    size_t k = 0;
    for (uint32_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        buf[k++] = tab[(v >> 18) & 63];
        buf[k++] = tab[(v >> 12) & 63];
        buf[k++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        buf[k++] = i + 2 < n ? tab[v & 63] : '=';
        if (k > sizeof(buf) - 4) {
            put(o, buf, k);
            k = 0;
        }
    }
    put(o, buf, k);
}

static void put_value(bson_string_t *o, const bson_iter_t *it, bool canonical);

static void put_doc(bson_string_t *o, const uint8_t *data, uint32_t len, bool array,
                    bool canonical)
{
    bson_t d;
    bson_iter_t it;
    bool first = true;
    put(o, array ? "[" : "{", 1);
    if (bson_init_static(&d, data, len) && bson_iter_init(&it, &d)) {
        while (bson_iter_next(&it)) {
            if (!first)
                put(o, ",", 1);
            first = false;
            if (!array) {
                put_str(o, bson_iter_key(&it), bson_iter_key_len(&it));
                put(o, ":", 1);
            }
            put_value(o, &it, canonical);
        }
    }
    put(o, array ? "]" : "}", 1);
}

static void put_value(bson_string_t *o, const bson_iter_t *it, bool canonical)
{
    char buf[64];
    int n;
    switch (bson_iter_type(it)) {
    case BSON_TYPE_UTF8: {
        uint32_t len;
        const char *s = bson_iter_utf8(it, &len);
        put_str(o, s, len);
        return;
    }
    case BSON_TYPE_INT32:
        n = snprintf(buf, sizeof(buf), canonical ? "{\"$numberInt\":\"%d\"}" : "%d",
                     bson_iter_int32(it));
        put(o, buf, (size_t)n);
        return;
    case BSON_TYPE_INT64:
        n = snprintf(buf, sizeof(buf), canonical ? "{\"$numberLong\":\"%lld\"}" : "%lld",
                     (long long)bson_iter_int64(it));
        put(o, buf, (size_t)n);
        return;
    case BSON_TYPE_BOOL:
        put(o, bson_iter_bool(it) ? "true" : "false", bson_iter_bool(it) ? 4 : 5);
        return;
    case BSON_TYPE_NULL:
        put(o, "null", 4);
        return;
    case BSON_TYPE_OID:
        put(o, "{\"$oid\":\"", 9);
        bson_oid_to_string(bson_iter_oid(it), buf);
        put(o, buf, 24);
        put(o, "\"}", 2);
        return;
    case BSON_TYPE_BINARY: {
        bson_subtype_t st;
        uint32_t len;
        const uint8_t *data;
        bson_iter_binary(it, &st, &len, &data);
        put(o, "{\"$binary\":{\"base64\":\"", 22);
        put_b64(o, data, len);
        n = snprintf(buf, sizeof(buf), "\",\"subType\":\"%02x\"}}", (unsigned)st);
        put(o, buf, (size_t)n);
        return;
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: {
        uint32_t len;
        const uint8_t *data;
        if (BSON_ITER_HOLDS_DOCUMENT(it))
            bson_iter_document(it, &len, &data);
        else
            bson_iter_array(it, &len, &data);
        put_doc(o, data, len, BSON_ITER_HOLDS_ARRAY(it), canonical);
        return;
    }
    default: { /* libbson's spelling: {"v":<value>} -> <value> */
        bson_t tmp = BSON_INITIALIZER;
        size_t len = 0;
        bson_append_iter(&tmp, "v", 1, it);
        char *s = canonical ? bson_as_canonical_extended_json(&tmp, &len)
                            : bson_as_relaxed_extended_json(&tmp, &len);
        if (s != NULL) {
            len = tool_json_compact(s, len);
            if (len > 6)
                put(o, s + 5, len - 6);
        }
        bson_free(s);
        bson_destroy(&tmp);
        return;
    }
    }
}

void tool_json_append(bson_string_t *out, const bson_t *doc, bool canonical)
{
    put_doc(out, bson_get_data(doc), doc->len, false, canonical);
}

void tool_json_append_value(bson_string_t *out, const bson_iter_t *it, bool canonical)
{
    put_value(out, it, canonical);
}

char *tool_to_json(const bson_t *doc, bool canonical, size_t *lenp)
{
    bson_string_t *o = bson_string_new(NULL);
    tool_json_append(o, doc, canonical);
    *lenp = o->len;
    return bson_string_free(o, false);
}

/* ---- the reader --------------------------------------------------------------------- */

static int refill(tool_json_reader_t *r)
{
    if (r->eof)
        return 0;
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    if (r->cap - r->len < 65536) {
        r->cap = r->cap ? r->cap * 2 : 1 << 20;
        r->buf = realloc(r->buf, r->cap + 1);
    }
    int64_t n = tool_stream_read_some(r->in, r->buf + r->len, r->cap - r->len);
    if (n < 0)
        return -1;
    if (n == 0)
        r->eof = true;
    r->len += (size_t)n;
    return (int)(n > 0);
}

/* Skip whitespace (and, in an array, the brackets and commas between documents). */
static int skip_between(tool_json_reader_t *r)
{
    for (;;) {
        while (r->pos < r->len) {
            char c = r->buf[r->pos];
            if (c == '\n')
                r->line++;
            if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
                r->pos++;
                continue;
            }
            if (r->array && c == '[' && !r->seen_open) {
                r->seen_open = true;
                r->pos++;
                continue;
            }
            if (r->array && r->seen_open && !r->seen_close && (c == ',' || c == ']')) {
                r->seen_close = c == ']';
                r->pos++;
                continue;
            }
            return 1;
        }
        int rc = refill(r);
        if (rc < 0)
            return -1;
        if (rc == 0 && r->pos >= r->len)
            return 0;
    }
}

int tool_json_next(tool_json_reader_t *r, bson_t *doc)
{
    if (r->line == 0)
        r->line = 1;
    int rc = skip_between(r);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        if (r->array && !r->seen_open)
            return tool_err("%s: expected a JSON array (--jsonArray), found nothing",
                            tool_stream_path(r->in));
        if (r->array && !r->seen_close)
            return tool_err("%s: the JSON array is not closed with ']'",
                            tool_stream_path(r->in));
        return 0;
    }
    char c = r->buf[r->pos];
    if (r->array && (!r->seen_open || r->seen_close))
        return tool_err("%s: line %lld: %s", tool_stream_path(r->in), (long long)r->line,
                        r->seen_close ? "text after the end of the JSON array"
                                      : "expected '[' (--jsonArray)");
    if (c != '{')
        return tool_err("%s: line %lld: expected a document ('{'), found '%c'%s",
                        tool_stream_path(r->in), (long long)r->line, c,
                        c == '[' ? " (use --jsonArray for an array of documents)" : "");
    /* find the matching '}' */
    for (;;) {
        int depth = 0;
        bool in_str = false, esc = false;
        size_t i;
        for (i = r->pos; i < r->len; i++) {
            char ch = r->buf[i];
            if (in_str) {
                if (esc)
                    esc = false;
                else if (ch == '\\')
                    esc = true;
                else if (ch == '"')
                    in_str = false;
            } else if (ch == '"') {
                in_str = true;
            } else if (ch == '{' || ch == '[') {
                depth++;
            } else if (ch == '}' || ch == ']') {
                if (--depth == 0)
                    break;
            }
        }
        if (i < r->len) {
            size_t len = i + 1 - r->pos;
            bson_error_t e;
            int64_t start_line = r->line;
            for (size_t k = r->pos; k <= i; k++)
                r->line += r->buf[k] == '\n';
            char save = r->buf[i + 1];
            r->buf[i + 1] = '\0';
            bool ok = bson_init_from_json(doc, r->buf + r->pos, (ssize_t)len, &e);
            r->buf[i + 1] = save;
            r->offset += (int64_t)len;
            r->pos = i + 1;
            if (!ok)
                return tool_err("%s: line %lld: invalid JSON document: %s",
                                tool_stream_path(r->in), (long long)start_line, e.message);
            return 1;
        }
        int rr = refill(r);
        if (rr < 0)
            return -1;
        if (rr == 0)
            return tool_err("%s: line %lld: the input ends inside a document",
                            tool_stream_path(r->in), (long long)r->line);
    }
}

void tool_json_reader_free(tool_json_reader_t *r)
{
    free(r->buf);
    r->buf = NULL;
}

/* ---- command-line values ------------------------------------------------------------ */

/* Rewrite the shell's spelling into strict JSON: 'x' -> "x", {a: 1} -> {"a": 1}. */
static char *strictify(const char *in)
{
    size_t n = strlen(in);
    char *out = malloc(n * 3 + 3);
    size_t o = 0;
    char last = 0; /* last significant character outside strings */
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (c == '"' || c == '\'') {
            char q = c;
            out[o++] = '"';
            for (i++; i < n && in[i] != q; i++) {
                if (in[i] == '\\' && i + 1 < n) {
                    out[o++] = in[i++];
                    out[o++] = in[i];
                } else if (in[i] == '"' && q == '\'') {
                    out[o++] = '\\';
                    out[o++] = '"';
                } else {
                    out[o++] = in[i];
                }
            }
            out[o++] = '"';
            last = '"';
            continue;
        }
        if ((last == '{' || last == ',') && (isalpha((unsigned char)c) || c == '_' || c == '$')) {
            size_t j = i;
            while (j < n && (isalnum((unsigned char)in[j]) || in[j] == '_' || in[j] == '$' ||
                             in[j] == '.'))
                j++;
            size_t k = j;
            while (k < n && isspace((unsigned char)in[k]))
                k++;
            if (k < n && in[k] == ':') {
                out[o++] = '"';
                memcpy(out + o, in + i, j - i);
                o += j - i;
                out[o++] = '"';
                i = j - 1;
                last = '"';
                continue;
            }
        }
        out[o++] = c;
        if (!isspace((unsigned char)c))
            last = c;
    }
    out[o] = '\0';
    return out;
}

int tool_json_arg(const char *what, const char *json, bson_t *out)
{
    bson_error_t e;
    if (bson_init_from_json(out, json, -1, &e))
        return 0;
    char *s = strictify(json);
    bool ok = bson_init_from_json(out, s, -1, &e);
    free(s);
    if (!ok)
        return tool_err("%s: not a valid JSON document: %s", what, e.message);
    return 0;
}
