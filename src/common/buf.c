/*
 * buf.c: growable byte buffer (see buf.h).
 */
#include "common/buf.h"

#include <stdlib.h>
#include <string.h>

void sbl_buf_init(sbl_buf_t *b)
{
    b->data = b->inline_;
    b->len = 0;
    b->cap = sizeof(b->inline_);
}

void sbl_buf_destroy(sbl_buf_t *b)
{
    if (b->data != b->inline_)
        free(b->data);
    sbl_buf_init(b);
}

void sbl_buf_reset(sbl_buf_t *b)
{
    b->len = 0;
}

uint8_t *sbl_buf_reserve(sbl_buf_t *b, size_t n)
{
    if (b->cap - b->len < n) {
        size_t cap = b->cap * 2;
        while (cap - b->len < n)
            cap *= 2;
        uint8_t *p;
        if (b->data == b->inline_) {
            p = malloc(cap);
            if (p != NULL)
                memcpy(p, b->data, b->len);
        } else {
            p = realloc(b->data, cap);
        }
        if (p == NULL)
            abort();
        b->data = p;
        b->cap = cap;
    }
    return b->data + b->len;
}

void sbl_buf_append(sbl_buf_t *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    memcpy(sbl_buf_reserve(b, n), p, n);
    b->len += n;
}

void sbl_buf_append_byte(sbl_buf_t *b, uint8_t c)
{
    *sbl_buf_reserve(b, 1) = c;
    b->len++;
}

void sbl_buf_append_i32le(sbl_buf_t *b, int32_t v)
{
    uint32_t u = (uint32_t)v;
    uint8_t p[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    sbl_buf_append(b, p, 4);
}

void sbl_buf_append_i64le(sbl_buf_t *b, int64_t v)
{
    uint64_t u = (uint64_t)v;
    uint8_t p[8];
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(u >> (8 * i));
    sbl_buf_append(b, p, 8);
}

void sbl_buf_put_i32le(sbl_buf_t *b, size_t off, int32_t v)
{
    uint32_t u = (uint32_t)v;
    b->data[off] = (uint8_t)u;
    b->data[off + 1] = (uint8_t)(u >> 8);
    b->data[off + 2] = (uint8_t)(u >> 16);
    b->data[off + 3] = (uint8_t)(u >> 24);
}

uint8_t *sbl_buf_steal(sbl_buf_t *b, size_t *lenp)
{
    uint8_t *p;
    if (b->data == b->inline_) {
        p = malloc(b->len ? b->len : 1);
        if (p == NULL)
            abort();
        memcpy(p, b->data, b->len);
    } else {
        p = b->data;
    }
    *lenp = b->len;
    sbl_buf_init(b);
    return p;
}
