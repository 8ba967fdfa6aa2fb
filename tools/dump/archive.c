/*
 * archive.c: the mongodump archive format (see dump.h for its layout),
 * written and read.  The writer emits exactly the documented fields in the
 * documented order and types; the reader accepts any interleaving of
 * namespace segments, checks each namespace's CRC at its end, and names the
 * byte offset of whatever it cannot read.
 */
#include "dump.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DOC (16 * 1024 * 1024 + 16 * 1024)

/* Slicing by 8 (eight tables, eight bytes a step): the archive's CRC runs over every
   byte dumped or restored, and a byte at a time was most of sable-restore's CPU. */
static uint64_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    const uint64_t poly = 0xC96C5795D7870F42ull; /* ECMA-182, reflected */
    for (int i = 0; i < 256; i++) {
        uint64_t c = (uint64_t)i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        crc_table[0][i] = c;
    }
    for (int i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] =
                (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint64_t arch_crc64(uint64_t crc, const void *buf, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const uint8_t *p = buf;
    crc = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
                     (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
                     (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
        crc ^= w;
        crc = crc_table[7][crc & 0xff] ^ crc_table[6][(crc >> 8) & 0xff] ^
              crc_table[5][(crc >> 16) & 0xff] ^ crc_table[4][(crc >> 24) & 0xff] ^
              crc_table[3][(crc >> 32) & 0xff] ^ crc_table[2][(crc >> 40) & 0xff] ^
              crc_table[1][(crc >> 48) & 0xff] ^ crc_table[0][crc >> 56];
    }
    for (; n > 0; n--, p++)
        crc = crc_table[0][(uint8_t)crc ^ *p] ^ (crc >> 8);
    return ~crc;
}

static int write_doc(tool_stream_t *s, const bson_t *b)
{
    return tool_stream_write(s, bson_get_data(b), b->len);
}

int arch_write_prelude(tool_stream_t *s, int concurrent, const char *server_version,
                       const arch_meta_t *metas, int n)
{
    uint8_t magic[4] = {ARCH_MAGIC & 0xff, (ARCH_MAGIC >> 8) & 0xff, (ARCH_MAGIC >> 16) & 0xff,
                        ARCH_MAGIC >> 24};
    if (tool_stream_write(s, magic, 4) != 0)
        return -1;
    bson_t h = BSON_INITIALIZER;
    BSON_APPEND_INT32(&h, "concurrent_collections", concurrent);
    BSON_APPEND_UTF8(&h, "version", ARCH_VERSION);
    BSON_APPEND_UTF8(&h, "server_version", server_version);
    BSON_APPEND_UTF8(&h, "tool_version", TOOL_VERSION);
    int rc = write_doc(s, &h);
    bson_destroy(&h);
    for (int i = 0; i < n && rc == 0; i++) {
        bson_t m = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&m, "db", metas[i].db);
        BSON_APPEND_UTF8(&m, "collection", metas[i].coll);
        BSON_APPEND_UTF8(&m, "metadata", metas[i].metadata ? metas[i].metadata : "");
        if (metas[i].size <= INT32_MAX) /* Go's int: int32 when it fits */
            BSON_APPEND_INT32(&m, "size", (int32_t)metas[i].size);
        else
            BSON_APPEND_INT64(&m, "size", metas[i].size);
        BSON_APPEND_UTF8(&m, "type", metas[i].type ? metas[i].type : "");
        rc = write_doc(s, &m);
        bson_destroy(&m);
    }
    return rc == 0 ? arch_write_terminator(s) : -1;
}

int arch_write_ns_header(tool_stream_t *s, const char *db, const char *coll, bool eof,
                         int64_t crc)
{
    bson_t h = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&h, "db", db);
    BSON_APPEND_UTF8(&h, "collection", coll);
    BSON_APPEND_BOOL(&h, "EOF", eof);
    BSON_APPEND_INT64(&h, "CRC", crc);
    int rc = write_doc(s, &h);
    bson_destroy(&h);
    return rc;
}

int arch_write_terminator(tool_stream_t *s)
{
    static const uint8_t t[4] = {0xff, 0xff, 0xff, 0xff};
    return tool_stream_write(s, t, 4);
}

/* ---- reader ------------------------------------------------------------------------- */

/* Read the next length-prefixed item: 1 a document (in r->buf, *lenp), 2 a terminator,
   0 clean end of input, -1 error. */
static int read_item(arch_reader_t *r, uint32_t *lenp, const char *where)
{
    uint8_t lb[4];
    int64_t n = tool_stream_read(r->in, lb, 4);
    if (n == 0)
        return 0;
    if (n < 0)
        return n == -1 ? -1
                       : tool_err("corrupt archive: truncated at byte %lld (%s)",
                                  (long long)r->offset, where);
    uint32_t len = (uint32_t)lb[0] | (uint32_t)lb[1] << 8 | (uint32_t)lb[2] << 16 |
                   (uint32_t)lb[3] << 24;
    if (len == 0xffffffffu) {
        r->offset += 4;
        return 2;
    }
    if (len < 5 || len > MAX_DOC)
        return tool_err("corrupt archive: invalid document length %u at byte %lld (%s)", len,
                        (long long)r->offset, where);
    if (r->cap < len) {
        r->cap = len < 65536 ? 65536 : len;
        r->buf = realloc(r->buf, r->cap);
    }
    memcpy(r->buf, lb, 4);
    n = tool_stream_read(r->in, r->buf + 4, len - 4);
    if (n != (int64_t)(len - 4))
        return n == -1 ? -1
                       : tool_err("corrupt archive: truncated at byte %lld (a %u-byte document "
                                  "in %s is cut short)",
                                  (long long)r->offset, len, where);
    if (r->buf[len - 1] != 0)
        return tool_err("corrupt archive: invalid document at byte %lld (%s)",
                        (long long)r->offset, where);
    r->offset += len;
    *lenp = len;
    return 1;
}

static char *dup_str(const bson_t *b, const char *key)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, b, key) && BSON_ITER_HOLDS_UTF8(&it))
        return strdup(bson_iter_utf8(&it, NULL));
    return strdup("");
}

int arch_read_prelude(arch_reader_t *r)
{
    uint8_t m[4];
    int64_t n = tool_stream_read(r->in, m, 4);
    uint32_t magic = (uint32_t)m[0] | (uint32_t)m[1] << 8 | (uint32_t)m[2] << 16 |
                     (uint32_t)m[3] << 24;
    if (n == -1)
        return -1;
    if (n != 4 || magic != ARCH_MAGIC)
        return tool_err("%s does not look like a mongodump archive (it does not start with the "
                        "magic number 0x8199e26d)%s",
                        tool_stream_path(r->in),
                        (n == 4 && m[0] == 0x1f && m[1] == 0x8b) ? "; it is gzip: add --gzip"
                                                                   : "");
    r->offset = 4;
    uint32_t len;
    int rc = read_item(r, &len, "the archive header");
    if (rc != 1)
        return rc < 0 ? -1 : tool_err("corrupt archive: no header document after the magic "
                                      "number");
    bson_t h;
    if (!bson_init_static(&h, r->buf, len) || !bson_validate(&h, 0, NULL))
        return tool_err("corrupt archive: the header document is not valid BSON");
    bson_copy_to(&h, &r->header);
    for (;;) {
        rc = read_item(r, &len, "the archive prelude");
        if (rc < 0)
            return -1;
        if (rc == 0)
            return tool_err("corrupt archive: it ends inside the prelude (no terminator after "
                            "the collection list)");
        if (rc == 2)
            return 0;
        bson_t d;
        if (!bson_init_static(&d, r->buf, len) || !bson_validate(&d, 0, NULL))
            return tool_err("corrupt archive: invalid collection metadata at byte %lld",
                            (long long)(r->offset - len));
        r->entries = realloc(r->entries, sizeof(arch_entry_t) * (size_t)(r->n_entries + 1));
        arch_entry_t *e = &r->entries[r->n_entries++];
        e->db = dup_str(&d, "db");
        e->coll = dup_str(&d, "collection");
        e->metadata = dup_str(&d, "metadata");
        e->type = dup_str(&d, "type");
        bson_iter_t it;
        e->size = bson_iter_init_find(&it, &d, "size") && BSON_ITER_HOLDS_NUMBER(&it)
                      ? bson_iter_as_int64(&it)
                      : 0;
    }
}

int arch_next(arch_reader_t *r, arch_event_t *ev)
{
    uint32_t len;
    for (;;) {
        if (r->in_segment) {
            int rc = read_item(r, &len, r->coll[0] ? r->coll : "a namespace segment");
            if (rc < 0)
                return -1;
            if (rc == 0)
                return tool_err("corrupt archive: it ends inside the data of %s.%s (no "
                                "terminator)",
                                r->db, r->coll);
            if (rc == 2) {
                r->in_segment = false;
                continue;
            }
            ev->kind = ARCH_DOC;
            ev->db = r->db;
            ev->coll = r->coll;
            if (!bson_init_static(&ev->doc, r->buf, len))
                return tool_err("corrupt archive: invalid document at byte %lld",
                                (long long)(r->offset - len));
            return 1;
        }
        int rc = read_item(r, &len, "a namespace header");
        if (rc <= 0)
            return rc;
        if (rc == 2)
            return tool_err("corrupt archive: unexpected terminator at byte %lld",
                            (long long)(r->offset - 4));
        bson_t h;
        bson_iter_t it;
        if (!bson_init_static(&h, r->buf, len) || !bson_validate(&h, 0, NULL) ||
            !bson_iter_init_find(&it, &h, "db") || !BSON_ITER_HOLDS_UTF8(&it))
            return tool_err("corrupt archive: invalid namespace header at byte %lld",
                            (long long)(r->offset - len));
        snprintf(r->db, sizeof(r->db), "%s", bson_iter_utf8(&it, NULL));
        if (!bson_iter_init_find(&it, &h, "collection") || !BSON_ITER_HOLDS_UTF8(&it))
            return tool_err("corrupt archive: namespace header without a collection at byte "
                            "%lld",
                            (long long)(r->offset - len));
        snprintf(r->coll, sizeof(r->coll), "%s", bson_iter_utf8(&it, NULL));
        bool eof = bson_iter_init_find(&it, &h, "EOF") && bson_iter_as_bool(&it);
        int64_t crc = bson_iter_init_find(&it, &h, "CRC") && BSON_ITER_HOLDS_NUMBER(&it)
                          ? bson_iter_as_int64(&it)
                          : 0;
        if (!eof) {
            r->in_segment = true;
            continue;
        }
        rc = read_item(r, &len, "a namespace end");
        if (rc != 2)
            return rc < 0 ? -1 : tool_err("corrupt archive: no terminator after the end of %s.%s",
                                          r->db, r->coll);
        ev->kind = ARCH_NS_END;
        ev->db = r->db;
        ev->coll = r->coll;
        ev->crc = crc;
        return 1;
    }
}

void arch_reader_free(arch_reader_t *r)
{
    for (int i = 0; i < r->n_entries; i++) {
        free(r->entries[i].db);
        free(r->entries[i].coll);
        free(r->entries[i].metadata);
        free(r->entries[i].type);
    }
    free(r->entries);
    free(r->buf);
    if (r->header.len)
        bson_destroy(&r->header);
    memset(r, 0, sizeof(*r));
}

void dump_escape_name(const char *coll, char *out, size_t outlen)
{
    size_t o = 0;
    for (const char *p = coll; *p && o + 4 < outlen; p++) {
        if (*p == '/' || *p == '%') {
            snprintf(out + o, outlen - o, "%%%02X", (unsigned char)*p);
            o += 3;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

void dump_unescape_name(const char *name, char *out, size_t outlen)
{
    size_t o = 0;
    for (const char *p = name; *p && o + 1 < outlen; p++) {
        unsigned v;
        if (p[0] == '%' && p[1] && p[2] && sscanf(p + 1, "%2x", &v) == 1) {
            out[o++] = (char)v;
            p += 2;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}
