/*
 * wire_compress.c: the OP_COMPRESSED codecs (noop, snappy, zlib, zstd) and
 * their names.  Decompression must produce exactly the size the message
 * announced; anything else is a protocol error, never a partial result.
 */
#include <snappy-c.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "wire/wire.h"
#include "wire/wire_int.h"

#define ZSTD_LEVEL 1 /* fastest; replies are compressed on the request path */

int sbl_compressor_id(const char *name)
{
    if (name == NULL)
        return -1;
    if (strcmp(name, "noop") == 0)
        return SBL_COMP_NOOP;
    if (strcmp(name, "snappy") == 0)
        return SBL_COMP_SNAPPY;
    if (strcmp(name, "zlib") == 0)
        return SBL_COMP_ZLIB;
    if (strcmp(name, "zstd") == 0)
        return SBL_COMP_ZSTD;
    return -1;
}

const char *sbl_compressor_name(int id)
{
    switch (id) {
    case SBL_COMP_NOOP:
        return "noop";
    case SBL_COMP_SNAPPY:
        return "snappy";
    case SBL_COMP_ZLIB:
        return "zlib";
    case SBL_COMP_ZSTD:
        return "zstd";
    default:
        return NULL;
    }
}

int sbl_wire_decompress(int id, const uint8_t *in, size_t inlen, uint8_t *out, size_t outlen,
                        sbl_err_t *err)
{
    switch (id) {
    case SBL_COMP_NOOP:
        if (inlen != outlen)
            break;
        memcpy(out, in, inlen);
        return 0;
    case SBL_COMP_SNAPPY: {
        size_t ulen = 0;
        if (snappy_uncompressed_length((const char *)in, inlen, &ulen) != SNAPPY_OK ||
            ulen != outlen)
            break;
        if (snappy_uncompress((const char *)in, inlen, (char *)out, &ulen) != SNAPPY_OK ||
            ulen != outlen)
            break;
        return 0;
    }
    case SBL_COMP_ZLIB: {
        uLongf dlen = (uLongf)outlen;
        if (uncompress(out, &dlen, in, (uLong)inlen) != Z_OK || dlen != outlen)
            break;
        return 0;
    }
    case SBL_COMP_ZSTD: {
        size_t r = ZSTD_decompress(out, outlen, in, inlen);
        if (ZSTD_isError(r) || r != outlen)
            break;
        return 0;
    }
    default:
        return sbl_err_set(err, SBL_E_ProtocolError, "unknown compressor id %d", id);
    }
    return sbl_err_set(err, SBL_E_ProtocolError,
                       "could not decompress message with compressor %s to %zu bytes",
                       sbl_compressor_name(id), outlen);
}

bool sbl_wire_compress(int id, const uint8_t *in, size_t inlen, sbl_buf_t *out)
{
    switch (id) {
    case SBL_COMP_NOOP:
        sbl_buf_append(out, in, inlen);
        return true;
    case SBL_COMP_SNAPPY: {
        size_t cap = snappy_max_compressed_length(inlen);
        char *dst = (char *)sbl_buf_reserve(out, cap);
        if (snappy_compress((const char *)in, inlen, dst, &cap) != SNAPPY_OK)
            return false;
        out->len += cap;
        return true;
    }
    case SBL_COMP_ZLIB: {
        uLongf cap = compressBound((uLong)inlen);
        uint8_t *dst = sbl_buf_reserve(out, cap);
        if (compress2(dst, &cap, in, (uLong)inlen, Z_DEFAULT_COMPRESSION) != Z_OK)
            return false;
        out->len += cap;
        return true;
    }
    case SBL_COMP_ZSTD: {
        size_t cap = ZSTD_compressBound(inlen);
        uint8_t *dst = sbl_buf_reserve(out, cap);
        size_t r = ZSTD_compress(dst, cap, in, inlen, ZSTD_LEVEL);
        if (ZSTD_isError(r))
            return false;
        out->len += r;
        return true;
    }
    default:
        return false;
    }
}
