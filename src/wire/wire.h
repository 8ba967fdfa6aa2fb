/*
 * wire.h: MongoDB wire protocol framing.  Parses one complete message
 * (OP_MSG, OP_QUERY on "<db>.$cmd", or either inside OP_COMPRESSED) into a
 * request, and serialises replies (OP_MSG, or OP_REPLY for OP_QUERY),
 * compressed with the request's compressor when the request was compressed.
 *
 * What must stay true: parsing never reads outside [msg, msg+len), every
 * embedded BSON document is validated before use, and a malformed message
 * is an error, never a crash.  OP_MSG checksums are CRC-32C: verified on
 * input when present, produced on output when the request carried one.
 */
#ifndef SBL_WIRE_H
#define SBL_WIRE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/errors.h"
#include "doc/doc.h"

enum {
    SBL_OP_REPLY = 1,
    SBL_OP_UPDATE = 2001,
    SBL_OP_INSERT = 2002,
    SBL_OP_QUERY = 2004,
    SBL_OP_GET_MORE = 2005,
    SBL_OP_DELETE = 2006,
    SBL_OP_KILL_CURSORS = 2007,
    SBL_OP_COMPRESSED = 2012,
    SBL_OP_MSG = 2013,
};

/* OP_MSG flag bits */
#define SBL_MSG_CHECKSUM_PRESENT (1u << 0)
#define SBL_MSG_MORE_TO_COME (1u << 1)
#define SBL_MSG_EXHAUST_ALLOWED (1u << 16)

/* Compressor ids (OP_COMPRESSED) */
enum { SBL_COMP_NOOP = 0, SBL_COMP_SNAPPY = 1, SBL_COMP_ZLIB = 2, SBL_COMP_ZSTD = 3 };

#define SBL_MAX_BSON_SIZE (16 * 1024 * 1024)
#define SBL_MAX_MESSAGE_SIZE 48000000
#define SBL_MAX_WRITE_BATCH 100000

typedef struct sbl_request {
    int32_t request_id;
    int32_t opcode;     /* SBL_OP_MSG or SBL_OP_QUERY (after decompression) */
    uint8_t compressor; /* SBL_COMP_* the request arrived with; SBL_COMP_NOOP when not compressed */
    uint32_t flags;     /* OP_MSG flag bits */
    bool more_to_come;  /* OP_MSG moreToCome: the client expects no reply */
    uint32_t reply_flags; /* extra OP_MSG flag bits for replies (moreToCome when streaming) */
    /* The command: OP_MSG body with each document sequence appended as an
     * array field of the same name; for OP_QUERY the query document
     * (unwrapped from $query/query when wrapped, with $readPreference kept). */
    bson_t cmd;
    /* OP_MSG: cmd's top-level fields as the parser laid them out (NULL data
     * otherwise), for the dispatcher's index of them (sbl_doc_index_t): valid
     * while cmd's length is len, its data at cmd's bytes wherever they are. */
    sbl_doc_index_t cmd_ix;
    char db[128]; /* $db ("" when an OP_MSG lacks it), or OP_QUERY's database */
    /* OP_QUERY only */
    int32_t query_flags;
    int32_t number_to_skip;
    int32_t number_to_return;
    bool legacy_find;    /* OP_QUERY on a collection: cmd is the find (then getMore) it stands for */
    int32_t legacy_from; /* documents returned so far (OP_REPLY startingFrom) */
} sbl_request_t;

/*
 * Given the first avail bytes of a stream, tell the total length of the
 * message that starts there.  Returns 0 with *lenp = 0 when fewer than 4
 * bytes are available, 0 with the length otherwise, or ProtocolError (17)
 * when the length is below 16 or above SBL_MAX_MESSAGE_SIZE.
 */
int sbl_wire_message_length(const uint8_t *p, size_t avail, int32_t *lenp);

/* Parse one complete message of len bytes into *req (which the caller then
 * owns and frees with sbl_request_destroy).  Returns 0 or an error code
 * (ProtocolError 17, InvalidBSON 22, BSONObjectTooLarge 10334, ...). */
int sbl_wire_parse(const uint8_t *msg, size_t len, sbl_request_t *req, sbl_err_t *err);
void sbl_request_destroy(sbl_request_t *req);

/* Serialise the reply to req: OP_MSG (flags 0, checksum when the request had
 * one) for OP_MSG requests, OP_REPLY with one document for OP_QUERY.
 * Compressed with req->compressor when it is not NOOP.  Appends to out. */
void sbl_wire_build_reply(const sbl_request_t *req, int32_t request_id, const bson_t *reply,
                          sbl_buf_t *out);

/* The bytes before the body of a plain OP_MSG reply: header, flags, kind 0. */
#define SBL_WIRE_MSG_HEAD 21
/* Whether the reply to req is a plain OP_MSG (no checksum, not compressed,
 * not streamed, expected): its body's bytes then follow SBL_WIRE_MSG_HEAD
 * bytes that sbl_wire_msg_head fills, and go out as they are. */
bool sbl_wire_reply_plain(const sbl_request_t *req);
/* Write those SBL_WIRE_MSG_HEAD bytes for a body of body_len bytes to head. */
void sbl_wire_msg_head(const sbl_request_t *req, int32_t request_id, uint32_t body_len,
                       uint8_t *head);

/* ---- legacy find (wire_legacy.c) ------------------------------------------
 * True when req is an OP_QUERY find with the Exhaust flag: its batches are
 * streamed without further requests. */
bool sbl_wire_legacy_exhaust(const sbl_request_t *req);
/* Turn a legacy find's cmd into the getMore for cursor_id (the next batch of
 * an exhaust stream). */
void sbl_wire_legacy_next(sbl_request_t *req, int64_t cursor_id);
/* The batch size of a cursor reply and its cursor id; -1 when reply is not
 * a cursor reply. */
int32_t sbl_wire_batch_count(const bson_t *reply, int64_t *cursor_id);

/* CRC-32C (Castagnoli) of p[0..n), starting from crc (0 for a fresh sum). */
uint32_t sbl_crc32c(uint32_t crc, const void *p, size_t n);

/* Compressor name <-> id ("snappy", "zlib", "zstd"); -1 / NULL when unknown. */
int sbl_compressor_id(const char *name);
const char *sbl_compressor_name(int id);

#endif
