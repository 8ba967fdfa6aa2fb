/*
 * audit_json.c: BSON to relaxed extended JSON, written straight into the
 * audit buffer (no intermediate string, no per-character appends): the
 * formatting cost of an audit event is most of its cost.
 *
 * What must stay true: the output is the relaxed extended JSON of the input
 * (libbson's bson_as_relaxed_extended_json gives the same values, parsed
 * back); strings are escaped for JSON (quote, backslash, control characters;
 * other bytes as they are).  Nesting depth is bounded by the wire layer's
 * BSON validation.  Keys and strings are read a whole word at a time, never
 * past the end of the document being formatted (raw_t.lim), and the
 * output is the same bytes as a byte-by-byte writer gives.
 */
#include "audit/audit_int.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool audit_buf_grow(audit_buf_t *b, size_t n)
{
    if (b->len + n <= b->cap)
        return true;
    size_t cap = b->cap != 0 ? b->cap : 64 * 1024;
    while (cap < b->len + n)
        cap *= 2;
    char *p = b->borrowed ? malloc(cap) : realloc(b->data, cap);
    if (p == NULL) {
        b->oom = true;
        return false;
    }
    if (b->borrowed && b->len > 0)
        memcpy(p, b->data, b->len);
    b->borrowed = false;
    b->data = p;
    b->cap = cap;
    return true;
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

/*
 * WORD bytes at a time (scan_word copies them from p to o): a mask of the
 * bytes that need escaping (or end a key: NUL is a control character);
 * word_first is the index of the first one, word_keep drops the bytes from
 * k on.  SSE2: sixteen bytes, one bit per byte.  Otherwise eight bytes
 * (SWAR, little-endian), the high bit of each such byte: below the first
 * such byte the result is exact (borrows only run upwards).
 */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ONES 0x0101010101010101ULL
static inline uint64_t scan8(const void *p, void *o)
{
    uint64_t w;
    memcpy(&w, p, 8);
    memcpy(o, &w, 8);
    uint64_t q = w ^ (ONES * '"'), s = w ^ (ONES * '\\');
    return (((w - ONES * 0x20) & ~w) | ((q - ONES) & ~q) | ((s - ONES) & ~s)) & (ONES * 0x80);
}
#define first8(m) ((size_t)(__builtin_ctzll(m) >> 3))
#endif

#if defined(__SSE2__)
#include <emmintrin.h>
#define FAST_SCAN 1
#define WORD 16
static inline uint64_t scan_word(const void *p, void *o)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    _mm_storeu_si128((__m128i *)o, v);
    __m128i ctl = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v); /* <= 0x1f */
    __m128i qb = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                              _mm_cmpeq_epi8(v, _mm_set1_epi8('\\')));
    return (uint64_t)(unsigned)_mm_movemask_epi8(_mm_or_si128(ctl, qb));
}
#define word_first(m) ((size_t)__builtin_ctzll(m))
#define word_keep(m, k) ((m) & (((uint64_t)1 << (k)) - 1))
#elif __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FAST_SCAN 1
#define WORD 8
#define scan_word scan8
#define word_first first8
#define word_keep(m, k) ((m) & (((uint64_t)1 << (8 * (k))) - 1))
#endif

/* Copy s[0..n) to o (room for n bytes) up to the first byte that needs
 * escaping: the number of bytes copied (n when none does). */
static inline __attribute__((always_inline)) size_t copy_clean(char *o, const char *s, size_t n)
{
    size_t i = 0;
#ifdef FAST_SCAN
    uint64_t m;
    for (; i + WORD <= n; i += WORD)
        if ((m = scan_word(s + i, o + i)) != 0)
            return i + word_first(m);
    if (i < n && n >= WORD) { /* the tail as the last word (overlapping: clean) */
        if ((m = scan_word(s + n - WORD, o + n - WORD)) != 0)
            return n - WORD + word_first(m);
        return n;
    }
#if WORD > 8
    if (n >= 8) { /* 8 <= n < WORD: two overlapping eight-byte steps */
        if ((m = scan8(s, o)) != 0)
            return first8(m);
        if ((m = scan8(s + n - 8, o + n - 8)) != 0)
            return n - 8 + first8(m);
        return n;
    }
#endif
#endif
    for (; i < n && !needs_escape((unsigned char)s[i]); i++)
        o[i] = s[i];
    return i;
}

/* The escape of c (a byte that needs one) into o (room for six bytes): its length. */
static inline size_t put_escape(char *o, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";
    static const char short_esc[256] = {['"'] = '"', ['\\'] = '\\', ['\n'] = 'n', ['\r'] = 'r',
                                        ['\t'] = 't', ['\b'] = 'b', ['\f'] = 'f'};
    o[0] = '\\';
    if (short_esc[c] != 0) {
        o[1] = short_esc[c];
        return 2;
    }
    memcpy(o + 1, "u00", 3);
    o[4] = hex[c >> 4];
    o[5] = hex[c & 15];
    return 6;
}

/*
 * The rest of a string whose opening quote and clean prefix are written:
 * s[0..n) (s[0] may need escaping) and the closing quote.  Each escape is
 * followed by the word-at-a-time copy again (a string with a quote every
 * few dozen bytes is not copied byte by byte after the first one).  Each
 * step reserves what is left of the input plus one escape and the quote,
 * never the worst case (six bytes per byte) at once.
 */
static void put_str_rest(audit_buf_t *b, const char *s, size_t n)
{
    size_t i = 0;
    for (;;) {
        if (!audit_buf_reserve(b, n - i + 7))
            return; /* oom is set: the caller drops the event */
        char *o = b->data + b->len;
        size_t k = copy_clean(o, s + i, n - i);
        i += k;
        if (i == n) {
            o[k] = '"';
            b->len += k + 1;
            return;
        }
        b->len += k + put_escape(o + k, (unsigned char)s[i++]);
    }
}

void audit_json_str(audit_buf_t *b, const char *s, size_t n)
{
    /* The usual string needs no escape: copy it while checking, in one pass. */
    if (!audit_buf_reserve(b, n + 2))
        return;
    char *o = b->data + b->len;
    *o++ = '"';
    size_t i = copy_clean(o, s, n);
    if (i == n) {
        o[n] = '"';
        b->len += n + 2;
        return;
    }
    b->len += i + 1; /* the quote and the clean prefix */
    put_str_rest(b, s + i, n - i);
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
    if (v >= 0 && v < 10) { /* result 0, limit 1 ... */
        put_c(b, (char)('0' + v));
        return;
    }
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
    static _Thread_local char last[40]; /* {"$date":"yyyy-mm-ddTHH:MM:SS */
    static _Thread_local size_t last_len;
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
        memcpy(last, "{\"$date\":\"", 10);
        last_len = 10 + strftime(last + 10, sizeof(last) - 10, "%Y-%m-%dT%H:%M:%S", &tm);
        last_sec = sec;
    }
    unsigned msec = (unsigned)(ms - sec * 1000);
    if (!audit_buf_reserve(b, last_len + 7))
        return;
    char *o = b->data + b->len;
    memcpy(o, last, last_len);
    o += last_len;
    o[0] = '.';
    o[1] = (char)('0' + msec / 100);
    o[2] = (char)('0' + msec / 10 % 10);
    o[3] = (char)('0' + msec % 10);
    memcpy(o + 4, "Z\"}", 3);
    b->len += last_len + 7;
}

static void put_oid(audit_buf_t *b, const uint8_t *oid)
{
    static const char hex[] = "0123456789abcdef";
    char out[] = "{\"$oid\":\"000000000000000000000000\"}";
    for (int i = 0; i < 12; i++) {
        out[9 + 2 * i] = hex[oid[i] >> 4];
        out[10 + 2 * i] = hex[oid[i] & 15];
    }
    audit_buf_put(b, out, sizeof(out) - 1);
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static char b64_pairs[4096][2]; /* 12 bits -> two base64 characters */
static pthread_once_t b64_once = PTHREAD_ONCE_INIT;
static atomic_bool b64_ready; /* b64_init has run (cheaper to test than pthread_once) */

/* The widest base64 code the CPU runs: 0 scalar, 1 SSSE3, 2 AVX2 (set by
 * b64_init; tests lower it with audit_json_simd to check each path). */
static int b64_level;

static void b64_init(void)
{
    for (int i = 0; i < 4096; i++) {
        b64_pairs[i][0] = b64[i >> 6];
        b64_pairs[i][1] = b64[i & 63];
    }
#if defined(__x86_64__) && defined(__GNUC__)
    b64_level = __builtin_cpu_supports("avx2") ? 2 : __builtin_cpu_supports("ssse3") ? 1 : 0;
#endif
    atomic_store_explicit(&b64_ready, true, memory_order_release);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define B64_SIMD 1
/*
 * Twelve bytes (sixteen characters) per step, SSSE3, or twenty-four with
 * AVX2 (chosen at run time: the build targets plain x86-64).  Each three bytes b0 b1 b2 are placed as
 * the 32-bit lane [b1 b0 b2 b1], whose two 16-bit halves hold the four
 * six-bit values at known bit offsets: a multiply by a power of two per
 * half moves each to the bottom of its own byte (mulhi for the first and
 * third, mullo for the second and fourth).  A value v becomes its
 * character as v + offset, the offset by range: 'A' for 0-25, 'a' - 26 for
 * 26-51, '0' - 52 for 52-61, '+' - 62 and '/' - 63; a saturating subtract
 * and one compare give each range a small number that picks its offset
 * from a sixteen-entry table (pshufb).
 */
/* One step: the sixteen characters of data[0..12) (reads data[0..16)). */
__attribute__((target("ssse3"))) static inline __m128i b64_step(const uint8_t *data)
{
    const __m128i spread = _mm_setr_epi8(1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10);
    const __m128i offsets = _mm_setr_epi8('a' - 26, '0' - 52, '0' - 52, '0' - 52, '0' - 52,
                                          '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52,
                                          '0' - 52, '+' - 62, '/' - 63, 'A', 0, 0);
    __m128i v = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)data), spread);
    __m128i hi = _mm_mulhi_epu16(_mm_and_si128(v, _mm_set1_epi32(0x0fc0fc00)),
                                 _mm_set1_epi32(0x04000040));
    __m128i lo = _mm_mullo_epi16(_mm_and_si128(v, _mm_set1_epi32(0x003f03f0)),
                                 _mm_set1_epi32(0x01000010));
    __m128i six = _mm_or_si128(hi, lo); /* one six-bit value per byte, in order */
    /* 52-63 -> 1-12; 0-25 -> 13; 26-51 -> 0: the index of the offset */
    __m128i idx = _mm_or_si128(_mm_subs_epu8(six, _mm_set1_epi8(51)),
                               _mm_andnot_si128(_mm_cmpgt_epi8(six, _mm_set1_epi8(25)),
                                                _mm_set1_epi8(13)));
    return _mm_add_epi8(six, _mm_shuffle_epi8(offsets, idx));
}

/* As many whole steps as data[0..n) allows (never reading past it): the
 * number of input bytes encoded, a multiple of twelve. */
__attribute__((target("ssse3"))) static size_t b64_ssse3(const uint8_t *data, size_t n, char *o)
{
    size_t i = 0;
    for (; i + 28 <= n; i += 24, o += 32) { /* two steps per turn: half the loop's cost */
        _mm_storeu_si128((__m128i *)o, b64_step(data + i));
        _mm_storeu_si128((__m128i *)(o + 16), b64_step(data + i + 12));
    }
    if (i + 16 <= n) {
        _mm_storeu_si128((__m128i *)o, b64_step(data + i));
        i += 12;
    }
    return i;
}
/* The same two steps at once in the two halves of an AVX2 register: the
 * thirty-two characters of data[0..24) (reads data[0..28)). */
__attribute__((target("avx2"))) static size_t b64_avx2(const uint8_t *data, size_t n, char *o)
{
    const __m256i spread = _mm256_setr_epi8(1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10,
                                            1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10);
    const __m256i offsets = _mm256_setr_epi8(
        'a' - 26, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52,
        '0' - 52, '0' - 52, '+' - 62, '/' - 63, 'A', 0, 0, 'a' - 26, '0' - 52, '0' - 52, '0' - 52,
        '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '+' - 62, '/' - 63,
        'A', 0, 0);
    size_t i = 0;
    for (; i + 28 <= n; i += 24, o += 32) {
        __m256i v = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(data + i))),
            _mm_loadu_si128((const __m128i *)(data + i + 12)), 1);
        v = _mm256_shuffle_epi8(v, spread);
        __m256i hi = _mm256_mulhi_epu16(_mm256_and_si256(v, _mm256_set1_epi32(0x0fc0fc00)),
                                        _mm256_set1_epi32(0x04000040));
        __m256i lo = _mm256_mullo_epi16(_mm256_and_si256(v, _mm256_set1_epi32(0x003f03f0)),
                                        _mm256_set1_epi32(0x01000010));
        __m256i six = _mm256_or_si256(hi, lo);
        __m256i idx = _mm256_or_si256(
            _mm256_subs_epu8(six, _mm256_set1_epi8(51)),
            _mm256_andnot_si256(_mm256_cmpgt_epi8(six, _mm256_set1_epi8(25)),
                                _mm256_set1_epi8(13)));
        _mm256_storeu_si256((__m256i *)o,
                            _mm256_add_epi8(six, _mm256_shuffle_epi8(offsets, idx)));
    }
    return i;
}
#endif

int audit_json_simd(int level)
{
    pthread_once(&b64_once, b64_init);
    if (level < b64_level)
        b64_level = level;
    return b64_level;
}

static void put_binary(audit_buf_t *b, bson_subtype_t sub, const uint8_t *data, uint32_t n)
{
    static const char head[] = "{\"$binary\":{\"base64\":\"";
    static const char hex[] = "0123456789abcdef";
    char tail[] = "\",\"subType\":\"00\"}}";
    if (!atomic_load_explicit(&b64_ready, memory_order_acquire))
        pthread_once(&b64_once, b64_init);
    /* One reservation for all of it; head and tail are copied at a constant size. */
    if (!audit_buf_reserve(b, sizeof(head) - 1 + ((size_t)n + 2) / 3 * 4 + sizeof(tail) - 1))
        return;
    char *o = b->data + b->len;
    memcpy(o, head, sizeof(head) - 1);
    o += sizeof(head) - 1;
    uint32_t i = 0;
#ifdef B64_SIMD
    if (b64_level > 0 && n >= 16) {
        size_t k = b64_level > 1 ? b64_avx2(data, n, o) : 0;
        if (n - k >= 16)
            k += b64_ssse3(data + k, n - k, o + k / 3 * 4);
        i = (uint32_t)k;
        o += k / 3 * 4;
    }
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* Six bytes (eight characters) per step from one eight-byte load. */
    for (; i + 8 <= n; i += 6) {
        uint64_t v;
        memcpy(&v, data + i, 8);
        v = __builtin_bswap64(v); /* data[i] in the top byte */
        memcpy(o, b64_pairs[(v >> 52) & 4095], 2);
        memcpy(o + 2, b64_pairs[(v >> 40) & 4095], 2);
        memcpy(o + 4, b64_pairs[(v >> 28) & 4095], 2);
        memcpy(o + 6, b64_pairs[(v >> 16) & 4095], 2);
        o += 8;
    }
#endif
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
    tail[13] = hex[((unsigned)sub >> 4) & 15];
    tail[14] = hex[(unsigned)sub & 15];
    memcpy(o, tail, sizeof(tail) - 1);
    b->len = (size_t)(o - b->data) + sizeof(tail) - 1;
}

/*
 * The walker reads the BSON bytes itself (libbson's iterator costs about a
 * hundred instructions per element).  Every read is bounds-checked: on
 * malformed input it stops, leaving well-formed JSON of what it read.
 */
typedef struct raw {
    const uint8_t *p, *end;
    const uint8_t *lim; /* the end of the whole buffer: whole words may be read up to it */
} raw_t;

static inline bool raw_i32(raw_t *r, int32_t *v)
{
    if (r->end - r->p < 4)
        return false;
    uint32_t u;
    memcpy(&u, r->p, 4); /* BSON is little-endian */
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    u = __builtin_bswap32(u);
#endif
    memcpy(v, &u, 4);
    r->p += 4;
    return true;
}

static inline bool raw_i64(raw_t *r, int64_t *v)
{
    if (r->end - r->p < 8)
        return false;
    uint64_t u;
    memcpy(&u, r->p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    u = __builtin_bswap64(u);
#endif
    memcpy(v, &u, 8);
    r->p += 8;
    return true;
}

/* A NUL-terminated string at r->p: its length, or -1. */
static inline ssize_t raw_cstr(raw_t *r, const char **s)
{
    const uint8_t *z = memchr(r->p, 0, (size_t)(r->end - r->p));
    if (z == NULL)
        return -1;
    *s = (const char *)r->p;
    ssize_t n = z - r->p;
    r->p = z + 1;
    return n;
}

/* A length-prefixed string (int32 length counting the NUL). */
static inline ssize_t raw_str(raw_t *r, const char **s)
{
    int32_t n;
    if (!raw_i32(r, &n) || n < 1 || r->end - r->p < n || r->p[n - 1] != 0)
        return -1;
    *s = (const char *)r->p;
    r->p += n;
    return n - 1;
}

static bool put_raw_doc(audit_buf_t *b, raw_t *r, bool array);

static bool put_raw_value(audit_buf_t *b, raw_t *r, uint8_t type)
{
    const char *s;
    ssize_t n;
    int32_t i32;
    int64_t i64;
    switch (type) {
    case BSON_TYPE_DOUBLE: {
        double d;
        if (!raw_i64(r, &i64))
            return false;
        memcpy(&d, &i64, 8);
        put_double(b, d);
        return true;
    }
    case BSON_TYPE_UTF8:
        if ((n = raw_str(r, &s)) < 0)
            return false;
        audit_json_str(b, s, (size_t)n);
        return true;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        return put_raw_doc(b, r, type == BSON_TYPE_ARRAY);
    case BSON_TYPE_BINARY: {
        if (!raw_i32(r, &i32) || i32 < 0 || r->end - r->p < (ptrdiff_t)i32 + 1)
            return false;
        uint8_t sub = *r->p++;
        const uint8_t *data = r->p;
        uint32_t len = (uint32_t)i32;
        if (sub == BSON_SUBTYPE_BINARY_DEPRECATED && len >= 4) { /* inner length */
            data += 4;
            len -= 4;
        }
        put_binary(b, (bson_subtype_t)sub, data, len);
        r->p += i32;
        return true;
    }
    case BSON_TYPE_UNDEFINED:
        audit_buf_puts(b, "{\"$undefined\":true}");
        return true;
    case BSON_TYPE_OID:
        if (r->end - r->p < 12)
            return false;
        put_oid(b, r->p);
        r->p += 12;
        return true;
    case BSON_TYPE_BOOL:
        if (r->end - r->p < 1)
            return false;
        audit_buf_puts(b, *r->p++ ? "true" : "false");
        return true;
    case BSON_TYPE_DATE_TIME:
        if (!raw_i64(r, &i64))
            return false;
        audit_json_date(b, i64);
        return true;
    case BSON_TYPE_NULL:
        audit_buf_puts(b, "null");
        return true;
    case BSON_TYPE_REGEX: {
        const char *opts;
        ssize_t on;
        if ((n = raw_cstr(r, &s)) < 0 || (on = raw_cstr(r, &opts)) < 0)
            return false;
        audit_buf_puts(b, "{\"$regularExpression\":{\"pattern\":");
        audit_json_str(b, s, (size_t)n);
        audit_buf_puts(b, ",\"options\":");
        audit_json_str(b, opts, (size_t)on);
        audit_buf_puts(b, "}}");
        return true;
    }
    case BSON_TYPE_DBPOINTER:
        if ((n = raw_str(r, &s)) < 0 || r->end - r->p < 12)
            return false;
        audit_buf_puts(b, "{\"$dbPointer\":{\"$ref\":");
        audit_json_str(b, s, (size_t)n);
        audit_buf_puts(b, ",\"$id\":");
        put_oid(b, r->p);
        r->p += 12;
        audit_buf_puts(b, "}}");
        return true;
    case BSON_TYPE_CODE:
    case BSON_TYPE_SYMBOL:
        if ((n = raw_str(r, &s)) < 0)
            return false;
        audit_buf_puts(b, type == BSON_TYPE_CODE ? "{\"$code\":" : "{\"$symbol\":");
        audit_json_str(b, s, (size_t)n);
        put_c(b, '}');
        return true;
    case BSON_TYPE_CODEWSCOPE:
        if (!raw_i32(r, &i32) || (n = raw_str(r, &s)) < 0)
            return false;
        audit_buf_puts(b, "{\"$code\":");
        audit_json_str(b, s, (size_t)n);
        audit_buf_puts(b, ",\"$scope\":");
        if (!put_raw_doc(b, r, false))
            return false;
        put_c(b, '}');
        return true;
    case BSON_TYPE_INT32:
        if (!raw_i32(r, &i32))
            return false;
        audit_json_int(b, i32);
        return true;
    case BSON_TYPE_TIMESTAMP: {
        int32_t inc, t;
        if (!raw_i32(r, &inc) || !raw_i32(r, &t))
            return false;
        put_fmt(b, "{\"$timestamp\":{\"t\":%u,\"i\":%u}}", (uint32_t)t, (uint32_t)inc);
        return true;
    }
    case BSON_TYPE_INT64:
        if (!raw_i64(r, &i64))
            return false;
        audit_json_int(b, i64);
        return true;
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_t d;
        char str[BSON_DECIMAL128_STRING];
        if (!raw_i64(r, &i64))
            return false;
        d.low = (uint64_t)i64;
        if (!raw_i64(r, &i64))
            return false;
        d.high = (uint64_t)i64;
        bson_decimal128_to_string(&d, str);
        audit_buf_puts(b, "{\"$numberDecimal\":\"");
        audit_buf_puts(b, str);
        audit_buf_puts(b, "\"}");
        return true;
    }
    case BSON_TYPE_MAXKEY:
        audit_buf_puts(b, "{\"$maxKey\":1}");
        return true;
    case BSON_TYPE_MINKEY:
        audit_buf_puts(b, "{\"$minKey\":1}");
        return true;
    default:
        return false;
    }
}

/* Step over one value of the given type. */
static bool raw_skip(raw_t *r, uint8_t type)
{
    static const int8_t fixed[256] = {
        [BSON_TYPE_DOUBLE] = 8, [BSON_TYPE_OID] = 12, [BSON_TYPE_BOOL] = 1,
        [BSON_TYPE_DATE_TIME] = 8, [BSON_TYPE_INT32] = 4, [BSON_TYPE_TIMESTAMP] = 8,
        [BSON_TYPE_INT64] = 8, [BSON_TYPE_DECIMAL128] = 16,
    };
    const char *s;
    int32_t n;
    switch (type) {
    case BSON_TYPE_UNDEFINED:
    case BSON_TYPE_NULL:
    case BSON_TYPE_MINKEY:
    case BSON_TYPE_MAXKEY:
        return true;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_CODE:
    case BSON_TYPE_SYMBOL:
        return raw_str(r, &s) >= 0;
    case BSON_TYPE_DBPOINTER:
        if (raw_str(r, &s) < 0 || r->end - r->p < 12)
            return false;
        r->p += 12;
        return true;
    case BSON_TYPE_REGEX:
        return raw_cstr(r, &s) >= 0 && raw_cstr(r, &s) >= 0;
    case BSON_TYPE_BINARY:
        if (!raw_i32(r, &n) || n < 0 || r->end - r->p < (ptrdiff_t)n + 1)
            return false;
        r->p += n + 1;
        return true;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
    case BSON_TYPE_CODEWSCOPE: {
        const uint8_t *start = r->p;
        if (!raw_i32(r, &n) || n < 5 || r->end - start < n)
            return false;
        r->p = start + n;
        return true;
    }
    default:
        if (fixed[type] == 0 || r->end - r->p < fixed[type])
            return false;
        r->p += fixed[type];
        return true;
    }
}

/* The string s (n bytes) of a document whose bytes may be read up to lim:
 * whole words, the last one masked, straight out when nothing needs
 * escaping (most strings), else audit_json_str. */
static inline void put_str_in(audit_buf_t *b, const char *s, size_t n, const uint8_t *lim)
{
#ifdef FAST_SCAN
    size_t words = (n + WORD - 1) / WORD;
    if ((size_t)(lim - (const uint8_t *)s) >= words * WORD &&
        audit_buf_reserve(b, words * WORD + 2)) {
        char *o = b->data + b->len + 1;
        size_t i = 0;
        for (; i < n; i += WORD) {
            uint64_t m = scan_word(s + i, o + i);
            if (n - i < WORD)
                m = word_keep(m, n - i);
            if (m != 0) { /* o[0..k) is the clean prefix: the rest from s[k] */
                size_t k = i + word_first(m);
                o[-1] = '"';
                b->len += k + 1;
                put_str_rest(b, s + k, n - k);
                return;
            }
        }
        o[-1] = '"';
        o[n] = '"';
        b->len += n + 2;
        return;
    }
#endif
    audit_json_str(b, s, n);
}

/* The key at in->p (NUL-terminated before in->end) as "key": (after a comma
 * when comma); false when malformed. */
static inline bool put_key(audit_buf_t *b, raw_t *in, bool comma)
{
    const char *key;
    ssize_t kn;
#ifdef FAST_SCAN
    /* Most keys are short and clean: copied a word at a time until the
     * word with their NUL (up to 32 bytes; longer or escaped ones below). */
    size_t avail = (size_t)(in->lim - in->p);
    if (avail >= WORD && audit_buf_reserve(b, 36)) {
        char *o = b->data + b->len;
        const uint8_t *p = in->p;
        *o = ',';
        o += comma;
        *o++ = '"';
        for (size_t i = 0; i < 32 && i + WORD <= avail; i += WORD) {
            uint64_t m;
            if ((m = scan_word(p + i, o + i)) != 0) {
                size_t k = i + word_first(m);
                if (p[k] != 0 || p + k >= in->end)
                    break; /* a byte to escape (or a malformed key) */
                o[k] = '"';
                o[k + 1] = ':';
                b->len = (size_t)(o - b->data) + k + 2;
                in->p = p + k + 1;
                return true;
            }
        }
    }
#endif
    if ((kn = raw_cstr(in, &key)) < 0)
        return false;
    if (comma)
        put_c(b, ',');
    audit_json_str(b, key, (size_t)kn);
    put_c(b, ':');
    return true;
}

/*
 * A command's lsid ({id: <UUID>}, in every command a driver sends, the same
 * for all the commands of a session): its JSON is remembered per thread by
 * its bytes, so a session's commands after its first copy it instead of
 * formatting it again.  Sixteen sets of two (by two bytes of the UUID): with
 * one slot per set, two sessions of one thread that met in a slot
 * (one chance in sixteen per pair) evicted each other on every command.
 */
#define LSID_BYTES 64
#define LSID_JSON 160
#define LSID_SETS 16
typedef struct lsid_slot {
    uint8_t len, jlen;
    uint8_t bytes[LSID_BYTES];
    char json[LSID_JSON];
} lsid_slot_t;
static _Thread_local lsid_slot_t tl_lsid[LSID_SETS][2];
static _Thread_local uint8_t tl_lsid_next[LSID_SETS]; /* the way a miss replaces */

static bool put_lsid(audit_buf_t *b, raw_t *r)
{
    const uint8_t *start = r->p;
    int32_t len;
    if (r->end - start < 5)
        return false;
    len = (int32_t)((uint32_t)start[0] | (uint32_t)start[1] << 8 | (uint32_t)start[2] << 16 |
                    (uint32_t)start[3] << 24);
#ifdef FAST_SCAN
    if (len >= 5 && len <= LSID_BYTES && r->end - start >= len) {
        unsigned set = (unsigned)(start[len - 2] ^ start[len - 3] >> 4) % LSID_SETS;
        for (int w = 0; w < 2; w++) {
            lsid_slot_t *sl = &tl_lsid[set][w];
            if (sl->len == len && memcmp(sl->bytes, start, (size_t)len) == 0) {
                audit_buf_put(b, sl->json, sl->jlen);
                r->p = start + len;
                return true;
            }
        }
        size_t at = b->len;
        if (!put_raw_doc(b, r, false))
            return false;
        if (!b->oom && b->len - at <= LSID_JSON) {
            lsid_slot_t *sl = &tl_lsid[set][tl_lsid_next[set]];
            tl_lsid_next[set] ^= 1;
            sl->len = (uint8_t)len;
            sl->jlen = (uint8_t)(b->len - at);
            memcpy(sl->bytes, start, (size_t)len);
            memcpy(sl->json, b->data + at, b->len - at);
        }
        return true;
    }
#endif
    return put_raw_doc(b, r, false);
}

/* The members of the document at r->p (its length prefix included), without
 * braces; redact: a top-level "pwd" is written as "xxx" (param.args). */
static bool put_raw_members(audit_buf_t *b, raw_t *r, bool array, bool redact)
{
    int32_t len;
    const uint8_t *start = r->p;
    if (!raw_i32(r, &len) || len < 5 || r->end - start < len)
        return false;
    raw_t in = {r->p, start + len - 1, r->lim}; /* up to the terminating NUL */
    r->p = start + len;
    bool first = true;
    while (in.p < in.end) {
        uint8_t type = *in.p++;
        if (array) { /* the keys are the indexes: not written */
            const uint8_t *z = in.p;
            while (z < in.end && *z != 0)
                z++;
            if (z == in.end)
                return false;
            in.p = z + 1;
            if (!first)
                put_c(b, ',');
        } else {
            const uint8_t *key = in.p;
            if (!put_key(b, &in, !first))
                return false;
            if (redact && in.p - key == 4 && memcmp(key, "pwd", 4) == 0) {
                first = false;
                audit_buf_puts(b, "\"xxx\"");
                if (!raw_skip(&in, type))
                    return false;
                continue;
            }
            if (redact && type == BSON_TYPE_DOCUMENT && in.p - key == 5 &&
                memcmp(key, "lsid", 5) == 0) {
                first = false;
                if (!put_lsid(b, &in))
                    return false;
                continue;
            }
        }
        first = false;
        if (type == BSON_TYPE_UTF8) { /* the usual value, inline */
            const char *str;
            ssize_t sn = raw_str(&in, &str);
            if (sn < 0) {
                audit_buf_puts(b, "null");
                return false;
            }
            put_str_in(b, str, (size_t)sn, in.lim);
            continue;
        }
        if (!put_raw_value(b, &in, type)) {
            audit_buf_puts(b, "null");
            return false;
        }
    }
    return true;
}

static bool put_raw_doc(audit_buf_t *b, raw_t *r, bool array)
{
    put_c(b, array ? '[' : '{');
    bool ok = put_raw_members(b, r, array, false);
    put_c(b, array ? ']' : '}');
    return ok;
}

void audit_json_doc(audit_buf_t *b, const bson_t *doc, bool array)
{
    const uint8_t *d = bson_get_data(doc);
    raw_t r = {d, d + doc->len, d + doc->len};
    put_raw_doc(b, &r, array);
}

void audit_json_args(audit_buf_t *b, const bson_t *cmd)
{
    const uint8_t *d = bson_get_data(cmd);
    raw_t r = {d, d + cmd->len, d + cmd->len};
    put_c(b, '{');
    put_raw_members(b, &r, false, true);
    put_c(b, '}');
}

void audit_json_fields(audit_buf_t *b, const bson_t *doc)
{
    const uint8_t *d = bson_get_data(doc);
    raw_t r = {d, d + doc->len, d + doc->len};
    put_raw_members(b, &r, false, false);
}

bool sbl_audit_doc_has_key(const bson_t *doc, const char *key)
{
    const uint8_t *p = bson_get_data(doc) + 4, *end = bson_get_data(doc) + doc->len - 1;
    size_t kl = strlen(key);
    while (p < end) {
        uint8_t type = *p++;
        raw_t r = {p, end, end};
        const char *k;
        ssize_t kn = raw_cstr(&r, &k);
        if (kn < 0)
            return false;
        if ((size_t)kn == kl && memcmp(k, key, kl) == 0)
            return true;
        if (!raw_skip(&r, type))
            return false;
        p = r.p;
    }
    return false;
}
