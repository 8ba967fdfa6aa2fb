/*
 * doc_check.c: one pass over untrusted BSON (every request's command
 * document goes through it): element types and sizes, bool values, UTF-8
 * keys, framing of every embedded document, array and scope, and a nesting
 * bound.  It replaces three recursive walks (depth, framing, libbson's
 * bson_validate) that cost ~10k instructions for a 150-byte find command.
 *
 * What must stay true: no read outside data[0..len); no recursion (an
 * explicit stack of max_depth + 1 frames); nothing is accepted that the
 * reference (sbl_doc_too_deep + sbl_doc_framing_ok + bson_validate)
 * rejects, which tests/unit/test_doc.c and tests/fuzz/fuzz_bson.c check.
 * It is stricter than libbson 1.23, which sometimes stops at an element it
 * cannot read without reporting it.  Only keys are checked for UTF-8, as
 * libbson does; string values are bytes.
 */
#include <string.h>

#include "doc/doc.h"

static uint32_t rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Strict UTF-8 of a key (no NUL: the key ends at the first one): shortest
 * form, no surrogates, nothing above U+10FFFF. */
static bool key_utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    /* ASCII eight bytes at a time (most keys are), from where a word holds
     * another byte the loop below decodes */
    for (uint64_t w; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ULL)
            break;
    }
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0)
            need = 1, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0)
            need = 2, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0)
            need = 3, cp = c & 0x07, min = 0x10000;
        else
            return false;
        if (n - i - 1 < need)
            return false;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp & 0xFFFFF800) == 0xD800)
            return false;
        i += need + 1;
    }
    return true;
}

/* A container being walked: [start, lim] with its trailing 0 at lim. */
typedef struct {
    size_t start, lim;
} frame_t;

sbl_bson_verdict_t sbl_bson_check(const uint8_t *data, size_t len, int max_depth, size_t *bad_off)
{
    frame_t stack[SBL_BSON_CHECK_MAX_DEPTH + 2];
    size_t off = 0;
    int depth = 0;

    if (max_depth > SBL_BSON_CHECK_MAX_DEPTH)
        max_depth = SBL_BSON_CHECK_MAX_DEPTH;
    if (len < 5 || rd_u32(data) != len || data[len - 1] != 0)
        goto bad;
    stack[0].start = 0;
    stack[0].lim = len - 1;
    off = 4;
    for (;;) {
        frame_t *f = &stack[depth];
        if (off == f->lim) {
            /* The container ends; its parent resumes right after it. */
            if (depth == 0)
                return SBL_BSON_OK;
            off = f->lim + 1;
            depth--;
            continue;
        }
        size_t lim = f->lim;
        uint8_t type = data[off];
        const uint8_t *key = data + off + 1;
        const uint8_t *nul = memchr(key, 0, lim - (off + 1));
        if (nul == NULL || !key_utf8_ok(key, (size_t)(nul - key)))
            goto bad;
        size_t o = (size_t)(nul - data) + 1; /* the value */
        uint64_t next, l;
        switch (type) {
        case 0x01: /* double */
        case 0x09: /* date */
        case 0x11: /* timestamp */
        case 0x12: /* int64 */
            next = (uint64_t)o + 8;
            break;
        case 0x10: /* int32 */
            next = (uint64_t)o + 4;
            break;
        case 0x13: /* decimal128 */
            next = (uint64_t)o + 16;
            break;
        case 0x07: /* ObjectId */
            next = (uint64_t)o + 12;
            break;
        case 0x06: /* undefined */
        case 0x0A: /* null */
        case 0x7F: /* maxKey */
        case 0xFF: /* minKey */
            next = o;
            break;
        case 0x08: /* bool: 0 or 1 */
            if (o >= lim || data[o] > 1)
                goto bad;
            next = (uint64_t)o + 1;
            break;
        case 0x02: /* string */
        case 0x0D: /* code */
        case 0x0E: /* symbol */
            if (o + 4 > lim)
                goto bad;
            l = rd_u32(data + o);
            next = (uint64_t)o + 4 + l;
            if (l == 0 || next > lim || data[next - 1] != 0)
                goto bad;
            break;
        case 0x05: /* binary */
            if (o + 4 > lim)
                goto bad;
            l = rd_u32(data + o);
            next = (uint64_t)o + 5 + l;
            if (next > lim)
                goto bad;
            if (data[o + 4] == 0x02 && (l < 4 || (uint64_t)rd_u32(data + o + 5) + 4 != l))
                goto bad; /* the old binary subtype repeats its length */
            break;
        case 0x0B: { /* regex: pattern and options, both NUL-terminated */
            const uint8_t *p1 = memchr(data + o, 0, lim - o);
            if (p1 == NULL)
                goto bad;
            size_t o2 = (size_t)(p1 - data) + 1;
            const uint8_t *p2 = o2 < lim ? memchr(data + o2, 0, lim - o2) : NULL;
            if (p2 == NULL)
                goto bad;
            next = (uint64_t)(p2 - data) + 1;
            break;
        }
        case 0x0C: /* dbPointer: string then ObjectId */
            if (o + 4 > lim)
                goto bad;
            l = rd_u32(data + o);
            if (l == 0 || (uint64_t)o + 4 + l > (uint64_t)lim + 1 || data[o + 3 + l] != 0)
                goto bad;
            next = (uint64_t)o + 4 + l + 12;
            break;
        case 0x03: /* document */
        case 0x04: /* array */
        case 0x0F: { /* code with scope */
            size_t cstart, clen;
            if (o + 4 > lim)
                goto bad;
            l = rd_u32(data + o);
            next = (uint64_t)o + l;
            if (next > lim)
                goto bad;
            if (type == 0x0F) {
                /* int32 total, string, scope document ending the element */
                size_t rel = o - f->start, clen_all = lim - f->start + 1;
                if (clen_all < 19 || rel + 14 >= clen_all || l < 14)
                    goto bad;
                uint64_t sl = rd_u32(data + o + 4);
                if (sl == 0 || sl >= clen_all - rel - 8 || o + 8 + sl + 4 >= next)
                    goto bad;
                cstart = (size_t)(o + 8 + sl);
                clen = rd_u32(data + cstart);
                if (cstart + (uint64_t)clen != next)
                    goto bad;
            } else {
                cstart = o;
                clen = (size_t)l;
            }
            if (clen < 5 || data[cstart + clen - 1] != 0)
                goto bad;
            if (depth + 1 > max_depth) {
                if (bad_off != NULL)
                    *bad_off = off;
                return SBL_BSON_TOO_DEEP;
            }
            depth++;
            stack[depth].start = cstart;
            stack[depth].lim = cstart + clen - 1;
            off = cstart + 4;
            continue;
        }
        default: /* 0x00 before the end, or a type BSON does not have */
            goto bad;
        }
        if (next > lim)
            goto bad;
        off = (size_t)next;
    }
bad:
    if (bad_off != NULL)
        *bad_off = off;
    return SBL_BSON_MALFORMED;
}

/* ---- finding a top-level field of a checked document ----------------------- */

/* The size of the value of type t at p (end: the buffer's end); *ok false
 * for a type this walk does not know or a length that cannot be read. */
static size_t value_size(uint8_t t, const uint8_t *p, const uint8_t *end, bool *ok)
{
    size_t room = (size_t)(end - p), n;
    *ok = true;
    switch (t) {
    case BSON_TYPE_UTF8: case BSON_TYPE_CODE: case BSON_TYPE_SYMBOL: case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: case BSON_TYPE_CODEWSCOPE: case BSON_TYPE_BINARY:
    case BSON_TYPE_DBPOINTER:
        if (room < 4) {
            *ok = false;
            return 0;
        }
        break;
    default:
        break;
    }
    switch (t) {
    case BSON_TYPE_DOUBLE: case BSON_TYPE_DATE_TIME: case BSON_TYPE_TIMESTAMP:
    case BSON_TYPE_INT64:
        return 8;
    case BSON_TYPE_UTF8: case BSON_TYPE_CODE: case BSON_TYPE_SYMBOL:
        return 4 + (size_t)rd_u32(p);
    case BSON_TYPE_DOCUMENT: case BSON_TYPE_ARRAY: case BSON_TYPE_CODEWSCOPE:
        return (size_t)rd_u32(p);
    case BSON_TYPE_BINARY:
        return 5 + (size_t)rd_u32(p);
    case BSON_TYPE_UNDEFINED: case BSON_TYPE_NULL: case BSON_TYPE_MINKEY: case BSON_TYPE_MAXKEY:
        return 0;
    case BSON_TYPE_OID:
        return 12;
    case BSON_TYPE_BOOL:
        return 1;
    case BSON_TYPE_INT32:
        return 4;
    case BSON_TYPE_DECIMAL128:
        return 16;
    case BSON_TYPE_DBPOINTER:
        return 4 + (size_t)rd_u32(p) + 12;
    case BSON_TYPE_REGEX: {
        const uint8_t *z = memchr(p, 0, room);
        if (z != NULL && (n = (size_t)(z + 1 - p)) < room &&
            (z = memchr(p + n, 0, room - n)) != NULL)
            return (size_t)(z + 1 - p);
        *ok = false;
        return 0;
    }
    default:
        *ok = false;
        return 0;
    }
}

/* The element at p, before end (its container's closing 0): *v gets its
 * value and *next the element after it.  False when it cannot be read
 * within end (a key without its NUL, an unknown type, a length past end). */
static inline __attribute__((always_inline)) bool elem_at(const uint8_t *p, const uint8_t *end,
                                                         const uint8_t **v, const uint8_t **next)
{
    const uint8_t *z = memchr(p + 1, 0, (size_t)(end - p - 1));
    if (z == NULL)
        return false;
    bool ok;
    size_t n = value_size(*p, z + 1, end, &ok);
    if (!ok || (size_t)(end - z - 1) < n)
        return false;
    *v = z + 1;
    *next = z + 1 + n;
    return true;
}

const char *sbl_doc_utf8(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_UTF8(&it))
        return bson_iter_utf8(&it, NULL);
    return NULL;
}

static _Thread_local const sbl_doc_index_t *cur_index;
static _Thread_local uint32_t top_next_hint; /* cur_index's element sbl_doc_top_next expects next */

void sbl_doc_index_build(sbl_doc_index_t *ix, const bson_t *doc)
{
    const uint8_t *data = bson_get_data(doc);
    const uint8_t *end = data + doc->len - 1, *p = data + 4, *v, *next;
    ix->data = NULL;
    ix->n = 0;
    for (; p < end; p = next) {
        if (ix->n == SBL_DOC_INDEX_MAX || !elem_at(p, end, &v, &next) || v - p - 2 > UINT8_MAX)
            return;
        ix->at[ix->n] = (uint32_t)(p - data);
        ix->klen[ix->n++] = (uint8_t)(v - p - 2);
    }
    ix->data = data;
    ix->len = doc->len;
}

void sbl_doc_index_take(sbl_doc_index_t *ix, const sbl_doc_index_t *from, const bson_t *doc)
{
    if (from == NULL || from->data == NULL || from->len != doc->len) {
        sbl_doc_index_build(ix, doc);
        return;
    }
    if (ix != from)
        *ix = *from;
    ix->data = bson_get_data(doc);
}

const sbl_doc_index_t *sbl_doc_index_use(const sbl_doc_index_t *ix)
{
    const sbl_doc_index_t *prev = cur_index;
    cur_index = ix;
    return prev;
}

bool sbl_doc_find_top(const bson_t *doc, const char *key, bson_iter_t *it)
{
    const uint8_t *data = bson_get_data(doc);
    const uint8_t *end = data + doc->len - 1; /* the closing 0 */
    const uint8_t *p = data + 4, *v, *next;
    size_t klen = strlen(key);
    const sbl_doc_index_t *ix = cur_index;
    if (ix != NULL && ix->data == data && ix->len == doc->len) {
        for (uint32_t i = 0; i < ix->n; i++)
            if (ix->klen[i] == klen && memcmp(data + ix->at[i] + 1, key, klen) == 0)
                return bson_iter_init_from_data_at_offset(it, data, doc->len, ix->at[i],
                                                          (uint32_t)klen);
        return false;
    }
    while (p < end) {
        if (!elem_at(p, end, &v, &next))
            return bson_iter_init_find(it, doc, key); /* not a checked document: libbson decides */
        if ((size_t)(v - p - 2) == klen && memcmp(p + 1, key, klen) == 0)
            return bson_iter_init_from_data_at_offset(it, data, doc->len, (uint32_t)(p - data),
                                                      (uint32_t)klen);
        p = next;
    }
    return false;
}

const char *sbl_doc_first(const bson_t *doc, const char **str)
{
    const uint8_t *data = bson_get_data(doc);
    const uint8_t *end = data + doc->len - 1, *v, *next;
    *str = NULL;
    if (doc->len < 5 || data + 4 >= end || !elem_at(data + 4, end, &v, &next))
        return NULL;
    if (data[4] == BSON_TYPE_UTF8 && rd_u32(v) >= 1 && next[-1] == 0)
        *str = (const char *)v + 4;
    return (const char *)data + 5;
}

bool sbl_doc_top_next(const bson_t *doc, uint32_t *off, uint32_t *at, const char **key, bool *bad)
{
    const uint8_t *data = bson_get_data(doc);
    const uint8_t *end = data + doc->len - 1; /* the closing 0 */
    const uint8_t *p = data + *off, *v, *next;
    const sbl_doc_index_t *ix = cur_index;
    *bad = false;
    if (p >= end)
        return false;
    if (ix != NULL && ix->data == data && ix->len == doc->len) { /* the next offset, indexed */
        uint32_t lo = top_next_hint, hi = ix->n;
        if (lo < hi && ix->at[lo] == *off) /* the walk's next element, as a rule */
            hi = lo;
        else
            lo = 0;
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (ix->at[mid] < *off)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < ix->n && ix->at[lo] == *off) {
            *at = *off;
            *key = (const char *)p + 1;
            *off = lo + 1 < ix->n ? ix->at[lo + 1] : doc->len - 1;
            top_next_hint = lo + 1;
            return true;
        }
    }
    if (!elem_at(p, end, &v, &next)) {
        *bad = true;
        return false;
    }
    *at = (uint32_t)(p - data);
    *key = (const char *)p + 1;
    *off = (uint32_t)(next - data);
    return true;
}

bool sbl_doc_top_iter(const bson_t *doc, uint32_t at, const char *key, bson_iter_t *it)
{
    return bson_iter_init_from_data_at_offset(it, bson_get_data(doc), doc->len, at,
                                              (uint32_t)strlen(key));
}

/* ---- the checks an insert makes, on a checked document -------------------- */

typedef struct {
    const uint8_t *first_id; /* the first top-level "_id" element */
    int nid;                 /* top-level "_id" elements */
    bool deep;               /* nests more than max_depth levels */
} scan_t;

/* Walks the elements in [p, end) (end: their container's closing 0) at
 * depth, counting top-level "_id"s and marking s->deep as sbl_doc_too_deep
 * would; once deep, nested containers are not walked further.  False when
 * the elements cannot be walked.  Recursion is bounded by max_depth. */
static bool raw_walk(const uint8_t *p, const uint8_t *end, int depth, int max_depth, scan_t *s)
{
    while (p < end) {
        uint8_t t = *p;
        const uint8_t *k = p + 1, *v, *next;
        if (!elem_at(p, end, &v, &next))
            return false;
        size_t n = (size_t)(next - v);
        if (depth == 0 && v - k == 4 && memcmp(k, "_id", 4) == 0 && s->nid++ == 0)
            s->first_id = p;
        const uint8_t *sub = NULL;
        size_t sublen = 0;
        if (t == BSON_TYPE_DOCUMENT || t == BSON_TYPE_ARRAY) {
            sub = v, sublen = n;
        } else if (t == BSON_TYPE_CODEWSCOPE) { /* int32 total, string, scope document */
            if (n < 14 || (size_t)rd_u32(v + 4) > n - 13)
                return false;
            sub = v + 8 + rd_u32(v + 4);
            sublen = n - 8 - rd_u32(v + 4);
            if (rd_u32(sub) != sublen)
                return false;
        }
        if (sub != NULL && !s->deep) {
            if (sublen < 5 || sub[sublen - 1] != 0)
                return false;
            if (depth + 1 > max_depth)
                s->deep = true;
            else if (!raw_walk(sub + 4, sub + sublen - 1, depth + 1, max_depth, s))
                return false;
        }
        if (s->deep && depth > 0)
            return true;
        p = v + n;
    }
    return true;
}

bool sbl_doc_scan_ids(const bson_t *doc, int max_depth, bson_iter_t *id_it, int *nid,
                      bool *id_first, bool *deep)
{
    const uint8_t *data = bson_get_data(doc);
    scan_t s = {NULL, 0, max_depth < 0};

    if (!raw_walk(data + 4, data + doc->len - 1, 0, max_depth, &s))
        return false;
    *nid = s.nid;
    *deep = s.deep;
    *id_first = s.first_id == data + 4;
    return s.nid == 0 ||
           bson_iter_init_from_data_at_offset(id_it, data, doc->len, (uint32_t)(s.first_id - data), 3);
}
