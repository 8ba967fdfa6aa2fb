/*
 * dump.h: what sable-dump and sable-restore share: the mongodump archive
 * format (mongo-tools' common/archive/spec.md) and file names in a dump
 * directory.
 *
 * The archive, in order:
 *   magic number 0x8199e26d (little-endian: 6d e2 99 81)
 *   header document {concurrent_collections: int32, version: "0.1",
 *                    server_version, tool_version}
 *   one collection-metadata document per namespace {db, collection, metadata
 *                    (the .metadata.json text), size, type}
 *   terminator ff ff ff ff
 *   then any interleaving of
 *     namespace segments: {db, collection, EOF: false, CRC: int64 0}, one or
 *                    more documents, terminator
 *     namespace ends:  {db, collection, EOF: true, CRC: CRC-64/ECMA of every
 *                    document of the namespace}, terminator
 * A namespace with no documents has only its end; a view has neither.
 */
#ifndef SABLE_TOOLS_DUMP_H
#define SABLE_TOOLS_DUMP_H

#include "tool.h"

#define ARCH_MAGIC 0x8199e26du
#define ARCH_VERSION "0.1"
#define TOOL_VERSION "100.9.4-sable"

/* CRC-64 with the ECMA-182 polynomial, reflected, as Go's hash/crc64 with
   crc64.ECMA computes it (init and final xor all ones): feed crc 0 to start. */
uint64_t arch_crc64(uint64_t crc, const void *buf, size_t n);

typedef struct arch_meta {
    const char *db, *coll, *metadata, *type;
    int64_t size;
} arch_meta_t;

/* Writer: the prelude, then per namespace a segment header, documents, terminator,
   and its end.  Each returns 0 or -1 (message printed). */
int arch_write_prelude(tool_stream_t *s, int concurrent, const char *server_version,
                       const arch_meta_t *metas, int n);
int arch_write_ns_header(tool_stream_t *s, const char *db, const char *coll, bool eof,
                         int64_t crc);
int arch_write_terminator(tool_stream_t *s);

/* Reader. */
typedef struct arch_entry {
    char *db, *coll, *metadata, *type;
    int64_t size;
} arch_entry_t;

typedef enum arch_ev_kind { ARCH_DOC, ARCH_NS_END } arch_ev_kind_t;

typedef struct arch_event {
    arch_ev_kind_t kind;
    const char *db, *coll; /* valid until the next call */
    bson_t doc;            /* ARCH_DOC: static over the reader's buffer */
    int64_t crc;           /* ARCH_NS_END */
} arch_event_t;

typedef struct arch_reader {
    tool_stream_t *in;
    int64_t offset;
    uint8_t *buf;
    size_t cap;
    bool in_segment;
    char db[256], coll[512];
    bson_t header;
    arch_entry_t *entries;
    int n_entries;
} arch_reader_t;

/* Read the magic number, the header and the prelude.  0 or -1 (message printed). */
int arch_read_prelude(arch_reader_t *r);
/* The next event of the body: 1, 0 at a clean end, -1 on a corrupt or truncated
   archive (message printed, naming the byte offset). */
int arch_next(arch_reader_t *r, arch_event_t *ev);
void arch_reader_free(arch_reader_t *r);

/* A collection name as a file name (mongodump escapes '/' and '%'), and back. */
void dump_escape_name(const char *coll, char *out, size_t outlen);
void dump_unescape_name(const char *name, char *out, size_t outlen);

#endif
