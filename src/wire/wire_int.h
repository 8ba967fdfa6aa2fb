/*
 * wire_int.h: private helpers shared by the wire module's files (not part
 * of the module's contract; nothing outside src/wire/ includes it).
 */
#ifndef SBL_WIRE_INT_H
#define SBL_WIRE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/errors.h"
#include "wire/wire.h"

/* Decompress in[0..inlen) with compressor id into exactly outlen bytes at out.
 * Returns 0, or ProtocolError when the id is unknown, the data is corrupt
 * or it does not expand to exactly outlen bytes. */
int sbl_wire_decompress(int id, const uint8_t *in, size_t inlen, uint8_t *out, size_t outlen,
                        sbl_err_t *err);

/* Append the compressed form of in[0..inlen) to out.  Returns false (out
 * unchanged) when the id is unknown or the compressor fails. */
bool sbl_wire_compress(int id, const uint8_t *in, size_t inlen, sbl_buf_t *out);

/* A legacy find (OP_QUERY on db.coll): fill req->cmd with the find command
 * that query q and the returnFieldsSelector fields (NULL: none) stand for. */
int sbl_wire_legacy_find(sbl_request_t *req, const char *coll, const bson_t *q,
                         const bson_t *fields, sbl_err_t *err);
/* The OP_REPLY body (responseFlags onward) for a legacy find's reply: its
 * batch's documents and cursor id, or QueryFailure with {$err, code}.
 * Returns numberReturned. */
int32_t sbl_wire_legacy_body(const sbl_request_t *req, const bson_t *reply, sbl_buf_t *out);

#endif
