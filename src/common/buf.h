/*
 * buf.h: a growable byte buffer.  Used for wire messages, encoded keys and
 * anything else that is built up a piece at a time.
 *
 * Invariant: data points at the inline storage until the buffer first grows
 * past it; afterwards data is heap memory owned by the buffer.  Allocation
 * failure aborts the process (as libbson does): Sable treats running out of
 * memory on a small allocation as fatal.
 */
#ifndef SBL_BUF_H
#define SBL_BUF_H

#include <stddef.h>
#include <stdint.h>

#define SBL_BUF_INLINE 64

typedef struct sbl_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    uint8_t inline_[SBL_BUF_INLINE];
} sbl_buf_t;

void sbl_buf_init(sbl_buf_t *b);
void sbl_buf_destroy(sbl_buf_t *b);
/* Empty the buffer but keep its memory. */
void sbl_buf_reset(sbl_buf_t *b);
/* Make room for at least n more bytes; returns a pointer to the free space. */
uint8_t *sbl_buf_reserve(sbl_buf_t *b, size_t n);
void sbl_buf_append(sbl_buf_t *b, const void *p, size_t n);
void sbl_buf_append_byte(sbl_buf_t *b, uint8_t c);
/* Append little-endian integers. */
void sbl_buf_append_i32le(sbl_buf_t *b, int32_t v);
void sbl_buf_append_i64le(sbl_buf_t *b, int64_t v);
/* Overwrite 4 bytes at off with a little-endian int32 (off + 4 <= len). */
void sbl_buf_put_i32le(sbl_buf_t *b, size_t off, int32_t v);
/* Hand the heap memory to the caller (malloc'd, len bytes); the buffer is left empty. */
uint8_t *sbl_buf_steal(sbl_buf_t *b, size_t *lenp);

/* ---- fixed-size strings on hot paths (snprintf costs ~800 instructions) ---- */

#include <string.h>

/* Copy src into dst[cap] (cap > 0), truncating; returns strlen(src) like
 * snprintf, so a result >= cap means it was truncated. */
static inline size_t sbl_strcpy_n(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src), k = n < cap ? n : cap - 1;
    memcpy(dst, src, k);
    dst[k] = '\0';
    return n;
}

/* dst = a "." b, truncated to cap - 1 bytes; returns the untruncated length. */
static inline size_t sbl_join_dot(char *dst, size_t cap, const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b), n = na + 1 + nb;
    if (n < cap) {
        memcpy(dst, a, na);
        dst[na] = '.';
        memcpy(dst + na + 1, b, nb + 1);
    } else {
        char *p = dst;
        size_t room = cap - 1, k = na < room ? na : room;
        memcpy(p, a, k), p += k, room -= k;
        if (room > 0)
            *p++ = '.', room--;
        k = nb < room ? nb : room;
        memcpy(p, b, k), p += k;
        *p = '\0';
    }
    return n;
}

/* FNV-1a over n bytes (hash tables keyed by encoded values). */
static inline uint64_t sbl_fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

#endif
