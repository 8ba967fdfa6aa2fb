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
#include <errno.h>
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
        sbl_append_iter(&tmp, "v", 1, it);
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

/* ---- a fast path for the reader ------------------------------------------------------
 * Documents made of ASCII strings without \u escapes, numbers, booleans, null, arrays,
 * sub-documents, {"$oid"}, {"$binary": {"base64", "subType"}}, {"$numberInt"} and
 * {"$numberLong"} are parsed here straight into BSON (libbson's parser, its UTF-8
 * validation and base64 decoder cost 3x more); a document with anything else makes
 * fp_doc give up, and libbson parses it, so both read every input the same way. */

typedef struct fp {
    const char *p, *end;
    char *tmp; /* scratch for unescaped strings and decoded binary */
    size_t cap;
} fp_t;

static void fp_ws(fp_t *f)
{
    while (f->p < f->end && (*f->p == ' ' || *f->p == '\n' || *f->p == '\t' || *f->p == '\r'))
        f->p++;
}

static bool fp_room(fp_t *f, size_t n)
{
    if (n <= f->cap)
        return true;
    f->cap = n * 2;
    f->tmp = realloc(f->tmp, f->cap);
    return f->tmp != NULL;
}

/* A string at f->p (after its '"'): into f->tmp, *lenp.  ASCII and simple escapes only. */
static bool fp_str(fp_t *f, size_t *lenp)
{
    const char *q = f->p;
    while (q < f->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20 &&
           (unsigned char)*q < 0x80)
        q++;
    if (!fp_room(f, (size_t)(q - f->p) + 64))
        return false;
    size_t n = (size_t)(q - f->p);
    memcpy(f->tmp, f->p, n);
    f->p = q;
    for (;;) {
        if (f->p >= f->end)
            return false;
        unsigned char c = (unsigned char)*f->p++;
        if (c == '"')
            break;
        if (c < 0x20 || c >= 0x80)
            return false;
        if (c == '\\') {
            if (f->p >= f->end)
                return false;
            switch (*f->p++) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case '/': c = '/'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            default: return false; /* \u: libbson's */
            }
        }
        if (!fp_room(f, n + 2))
            return false;
        f->tmp[n++] = (char)c;
    }
    f->tmp[n] = '\0';
    *lenp = n;
    return true;
}

/* Decode base64 text s[0..n) into out; *outlenp.  False on anything unusual. */
static bool fp_b64(const char *s, size_t n, uint8_t *out, size_t *outlenp)
{
    static int8_t tab[256];
    static bool ready;
    if (!ready) {
        static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        memset(tab, -1, sizeof(tab));
        for (int i = 0; i < 64; i++)
            tab[(unsigned char)a[i]] = (int8_t)i;
        ready = true;
    }
    size_t o = 0, pad = 0;
    if (n % 4 != 0)
        return false;
    if (n >= 4 && s[n - 1] == '=')
        pad = s[n - 2] == '=' ? 2 : 1;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n; i += 4) {
        bool last = i + 4 == n;
        int a = tab[u[i]], b = tab[u[i + 1]];
        int c = last && pad == 2 ? 0 : tab[u[i + 2]];
        int d = last && pad >= 1 ? 0 : tab[u[i + 3]];
        if ((a | b | c | d) < 0)
            return false;
        uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
        out[o++] = (uint8_t)(v >> 16);
        if (!last || pad < 2)
            out[o++] = (uint8_t)(v >> 8);
        if (!last || pad < 1)
            out[o++] = (uint8_t)v;
    }
    *outlenp = o;
    return true;
}

static bool fp_value(fp_t *f, bson_t *parent, const char *key, size_t klen, int depth);

/* An object at f->p (after '{') whose first key starts with '$': the few wrappers. */
static bool fp_wrapper(fp_t *f, bson_t *parent, const char *key, size_t klen)
{
    size_t n;
    fp_ws(f);
    if (f->p >= f->end || *f->p != '"')
        return false;
    f->p++;
    if (!fp_str(f, &n))
        return false;
    char w[16];
    if (n >= sizeof(w))
        return false;
    memcpy(w, f->tmp, n + 1);
    fp_ws(f);
    if (f->p >= f->end || *f->p++ != ':')
        return false;
    fp_ws(f);
    if (strcmp(w, "$oid") == 0 || strcmp(w, "$numberInt") == 0 ||
        strcmp(w, "$numberLong") == 0) {
        if (f->p >= f->end || *f->p++ != '"' || !fp_str(f, &n))
            return false;
        if (w[1] == 'o') {
            if (n != 24 || !bson_oid_is_valid(f->tmp, n))
                return false;
            bson_oid_t oid;
            bson_oid_init_from_string(&oid, f->tmp);
            bson_append_oid(parent, key, (int)klen, &oid);
        } else {
            char *e;
            errno = 0;
            long long v = strtoll(f->tmp, &e, 10);
            if (n == 0 || *e != '\0' || errno != 0 || !(isdigit((unsigned char)f->tmp[0]) ||
                                                         f->tmp[0] == '-'))
                return false;
            if (w[7] == 'I') {
                if (v < INT32_MIN || v > INT32_MAX)
                    return false;
                bson_append_int32(parent, key, (int)klen, (int32_t)v);
            } else {
                bson_append_int64(parent, key, (int)klen, (int64_t)v);
            }
        }
    } else if (strcmp(w, "$binary") == 0) {
        /* {"base64": "...", "subType": "xx"} in this order */
        const char *b64 = NULL;
        size_t b64n = 0;
        if (f->p >= f->end || *f->p++ != '{')
            return false;
        fp_ws(f);
        if (f->end - f->p < 10 || memcmp(f->p, "\"base64\"", 8) != 0)
            return false;
        f->p += 8;
        fp_ws(f);
        if (f->p >= f->end || *f->p++ != ':')
            return false;
        fp_ws(f);
        if (f->p >= f->end || *f->p++ != '"')
            return false;
        b64 = f->p;
        while (f->p < f->end && *f->p != '"' && *f->p != '\\')
            f->p++;
        if (f->p >= f->end || *f->p != '"')
            return false;
        b64n = (size_t)(f->p - b64);
        f->p++;
        fp_ws(f);
        if (f->p >= f->end || *f->p++ != ',')
            return false;
        fp_ws(f);
        if (f->end - f->p < 16 || memcmp(f->p, "\"subType\"", 9) != 0)
            return false;
        f->p += 9;
        fp_ws(f);
        if (f->p >= f->end || *f->p++ != ':')
            return false;
        fp_ws(f);
        if (f->end - f->p < 4 || f->p[0] != '"' || !isxdigit((unsigned char)f->p[1]) ||
            !isxdigit((unsigned char)f->p[2]) || f->p[3] != '"')
            return false;
        char hex[3] = {f->p[1], f->p[2], '\0'};
        unsigned st = (unsigned)strtoul(hex, NULL, 16);
        f->p += 4;
        fp_ws(f);
        if (f->p >= f->end || *f->p++ != '}')
            return false;
        if (st == BSON_SUBTYPE_BINARY_DEPRECATED || !fp_room(f, b64n))
            return false;
        if (!fp_b64(b64, b64n, (uint8_t *)f->tmp, &n))
            return false;
        bson_append_binary(parent, key, (int)klen, (bson_subtype_t)st, (uint8_t *)f->tmp,
                           (uint32_t)n);
    } else {
        return false;
    }
    fp_ws(f);
    return f->p < f->end && *f->p++ == '}';
}

/* The members of an object or array at f->p (after its opening bracket) into d. */
static bool fp_members(fp_t *f, bson_t *d, bool array, int depth)
{
    uint32_t i = 0;
    char close = array ? ']' : '}';
    fp_ws(f);
    if (f->p < f->end && *f->p == close) {
        f->p++;
        return true;
    }
    for (;;) {
        char kbuf[16];
        const char *k;
        size_t kn;
        char *owned = NULL;
        fp_ws(f);
        if (array) {
            kn = bson_uint32_to_string(i++, &k, kbuf, sizeof(kbuf));
        } else {
            if (f->p >= f->end || *f->p++ != '"' || !fp_str(f, &kn))
                return false;
            owned = malloc(kn + 1);
            memcpy(owned, f->tmp, kn + 1);
            k = owned;
            fp_ws(f);
            if (f->p >= f->end || *f->p++ != ':') {
                free(owned);
                return false;
            }
        }
        bool ok = fp_value(f, d, k, kn, depth);
        free(owned);
        if (!ok)
            return false;
        fp_ws(f);
        if (f->p >= f->end)
            return false;
        char c = *f->p++;
        if (c == close)
            return true;
        if (c != ',')
            return false;
    }
}

static bool fp_value(fp_t *f, bson_t *parent, const char *key, size_t klen, int depth)
{
    if (f->p >= f->end || depth > 100)
        return false;
    char c = *f->p;
    if (c == '"') {
        size_t n;
        f->p++;
        return fp_str(f, &n) && bson_append_utf8(parent, key, (int)klen, f->tmp, (int)n);
    }
    if (c == '{' || c == '[') {
        f->p++;
        if (c == '{') {
            const char *save = f->p;
            fp_ws(f);
            if (f->p + 1 < f->end && f->p[0] == '"' && f->p[1] == '$')
                return fp_wrapper(f, parent, key, klen);
            f->p = save;
        }
        bson_t child;
        if (c == '{')
            bson_append_document_begin(parent, key, (int)klen, &child);
        else
            bson_append_array_begin(parent, key, (int)klen, &child);
        bool ok = fp_members(f, &child, c == '[', depth + 1);
        if (c == '{')
            bson_append_document_end(parent, &child);
        else
            bson_append_array_end(parent, &child);
        return ok;
    }
    if (c == 't' && f->end - f->p >= 4 && memcmp(f->p, "true", 4) == 0) {
        f->p += 4;
        return bson_append_bool(parent, key, (int)klen, true);
    }
    if (c == 'f' && f->end - f->p >= 5 && memcmp(f->p, "false", 5) == 0) {
        f->p += 5;
        return bson_append_bool(parent, key, (int)klen, false);
    }
    if (c == 'n' && f->end - f->p >= 4 && memcmp(f->p, "null", 4) == 0) {
        f->p += 4;
        return bson_append_null(parent, key, (int)klen);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *q = f->p + (c == '-');
        bool real = false;
        while (q < f->end && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' ||
                              *q == 'E' || *q == '+' || *q == '-')) {
            real |= *q == '.' || *q == 'e' || *q == 'E';
            q++;
        }
        size_t n = (size_t)(q - f->p);
        char num[64];
        if (n == 0 || n >= sizeof(num))
            return false;
        memcpy(num, f->p, n);
        num[n] = '\0';
        char *e;
        errno = 0;
        if (real)
            return false; /* doubles: libbson's spelling rules */
        long long v = strtoll(num, &e, 10);
        if (*e != '\0' || errno != 0)
            return false;
        f->p = q;
        if (v >= INT32_MIN && v <= INT32_MAX)
            return bson_append_int32(parent, key, (int)klen, (int32_t)v);
        return bson_append_int64(parent, key, (int)klen, (int64_t)v);
    }
    return false;
}

/* Parse the document that starts s[0..avail) (at its '{'); *usedp: its length.  False:
   let libbson do it (or the document goes on past avail). */
static bool fp_doc(const char *s, size_t avail, bson_t *doc, size_t *usedp)
{
    static char *tmp;
    static size_t cap;
    fp_t f = {.p = s + 1, .end = s + avail, .tmp = tmp, .cap = cap};
    bson_init(doc);
    bool ok = fp_members(&f, doc, false, 0);
    tmp = f.tmp;
    cap = f.cap;
    if (!ok)
        bson_destroy(doc);
    *usedp = (size_t)(f.p - s);
    return ok;
}

/* ---- the reader --------------------------------------------------------------------- */

static int refill(tool_json_reader_t *r)
{
    return tool_window_fill(r->in, &r->win);
}

/* Skip whitespace (and, in an array, the brackets and commas between documents). */
static int skip_between(tool_json_reader_t *r)
{
    for (;;) {
        while (r->win.pos < r->win.len) {
            char c = r->win.buf[r->win.pos];
            if (c == '\n')
                r->line++;
            if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
                r->win.pos++;
                continue;
            }
            if (r->array && c == '[' && !r->seen_open) {
                r->seen_open = true;
                r->win.pos++;
                continue;
            }
            if (r->array && r->seen_open && !r->seen_close && (c == ',' || c == ']')) {
                r->seen_close = c == ']';
                r->win.pos++;
                continue;
            }
            return 1;
        }
        int rc = refill(r);
        if (rc < 0)
            return -1;
        if (rc == 0 && r->win.pos >= r->win.len)
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
    char c = r->win.buf[r->win.pos];
    if (r->array && (!r->seen_open || r->seen_close))
        return tool_err("%s: line %lld: %s", tool_stream_path(r->in), (long long)r->line,
                        r->seen_close ? "text after the end of the JSON array"
                                      : "expected '[' (--jsonArray)");
    if (c != '{')
        return tool_err("%s: line %lld: expected a document ('{'), found '%c'%s",
                        tool_stream_path(r->in), (long long)r->line, c,
                        c == '[' ? " (use --jsonArray for an array of documents)" : "");
    size_t used;
    if (fp_doc(r->win.buf + r->win.pos, r->win.len - r->win.pos, doc, &used)) { /* the common case */
        for (const char *q = r->win.buf + r->win.pos, *e = q + used;
             (q = memchr(q, '\n', (size_t)(e - q))) != NULL; q++)
            r->line++;
        r->offset += (int64_t)used;
        r->win.pos += used;
        return 1;
    }
    /* find the matching '}' */
    for (;;) {
        int depth = 0;
        bool in_str = false, esc = false;
        size_t i;
        for (i = r->win.pos; i < r->win.len; i++) {
            char ch = r->win.buf[i];
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
        if (i < r->win.len) {
            size_t len = i + 1 - r->win.pos;
            bson_error_t e;
            int64_t start_line = r->line;
            for (size_t k = r->win.pos; k <= i; k++)
                r->line += r->win.buf[k] == '\n';
            char save = r->win.buf[i + 1];
            r->win.buf[i + 1] = '\0';
            size_t used;
            bool ok = (fp_doc(r->win.buf + r->win.pos, len, doc, &used) && used == len) ||
                      bson_init_from_json(doc, r->win.buf + r->win.pos, (ssize_t)len, &e);
            r->win.buf[i + 1] = save;
            r->offset += (int64_t)len;
            r->win.pos = i + 1;
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
    free(r->win.buf);
    r->win.buf = NULL;
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
