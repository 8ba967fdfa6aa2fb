/*
 * wire.c: parsing requests (OP_MSG, OP_QUERY, OP_COMPRESSED around either)
 * and building replies (OP_MSG, OP_REPLY, compressed like the request).
 *
 * What must stay true:
 *  - every read is bounds-checked against the message (or section) end;
 *  - every document passes sbl_bson_check (src/doc/doc_check.c): one pass
 *    over the whole tree, nested documents and arrays included, checking
 *    every element's type and length, framing, UTF-8 keys and the nesting
 *    bound (string values' UTF-8 is not checked: MongoDB does not either);
 *  - on failure *req is left holding an empty cmd, so sbl_request_destroy
 *    is always safe, and the error names what was wrong.
 */
#include <string.h>

#include "doc/doc.h"
#include "wire/wire.h"
#include "wire/wire_int.h"

#define HEADER_LEN 16
/* MongoDB lets a command document exceed the user document limit by this much. */
#define DOC_SLACK (16 * 1024)
#define MAX_DOC_LEN (SBL_MAX_BSON_SIZE + DOC_SLACK)
/* MongoDB parses command documents nested up to 200 levels. */
#define SBL_WIRE_MAX_DEPTH 200
/* Bits 0-15 are "required": a receiver must reject those it does not know. */
#define MSG_REQUIRED_MASK 0xffffu
#define MSG_KNOWN_REQUIRED (SBL_MSG_CHECKSUM_PRESENT | SBL_MSG_MORE_TO_COME)

static uint32_t rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int32_t rd_i32(const uint8_t *p)
{
    return (int32_t)rd_u32(p);
}

static void wr_i32(uint8_t *p, int32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)((uint32_t)v >> (8 * i));
}

int sbl_wire_message_length(const uint8_t *p, size_t avail, int32_t *lenp)
{
    *lenp = 0;
    if (avail < 4)
        return 0;
    int32_t len = rd_i32(p);
    if (len < HEADER_LEN || len > SBL_MAX_MESSAGE_SIZE)
        return SBL_E_ProtocolError;
    *lenp = len;
    return 0;
}

/*
 * Read one BSON document at msg[*offp], which must end by end.  On success
 * *doc is a read-only view into msg and *offp moves past the document.
 */
static int read_doc(const uint8_t *msg, size_t *offp, size_t end, bson_t *doc, const char *what,
                    sbl_err_t *err)
{
    size_t off = *offp;
    if (end - off < 4)
        return sbl_err_set(err, SBL_E_ProtocolError, "%s: truncated document length", what);
    int32_t len = rd_i32(msg + off);
    if (len < 5)
        return sbl_err_set(err, SBL_E_InvalidBSON, "%s: invalid document length %d", what, len);
    if (len > MAX_DOC_LEN)
        return sbl_err_set(err, SBL_E_BSONObjectTooLarge,
                           "%s: document of %d bytes exceeds the maximum of %d", what, len,
                           MAX_DOC_LEN);
    if ((size_t)len > end - off)
        return sbl_err_set(err, SBL_E_ProtocolError,
                           "%s: document of %d bytes runs past the end (%zu bytes left)", what, len,
                           end - off);
    if (!bson_init_static(doc, msg + off, (size_t)len))
        return sbl_err_set(err, SBL_E_InvalidBSON, "%s: document is not terminated", what);
    size_t bad = 0;
    switch (sbl_bson_check(msg + off, (size_t)len, SBL_WIRE_MAX_DEPTH, &bad)) {
    case SBL_BSON_OK:
        break;
    case SBL_BSON_TOO_DEEP:
        return sbl_err_set(err, SBL_E_Overflow, "%s: BSON nesting deeper than %d levels", what,
                           SBL_WIRE_MAX_DEPTH);
    default:
        return sbl_err_set(err, SBL_E_InvalidBSON, "%s: invalid BSON at offset %zu", what, bad);
    }
    *offp = off + (size_t)len;
    return 0;
}

/* Copy a database name into req->db; it must fit and contain no NUL. */
static int set_db(sbl_request_t *req, const char *db, size_t len, sbl_err_t *err)
{
    if (len == 0 || len >= sizeof(req->db) || memchr(db, '\0', len) != NULL)
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid database name: '%.*s'",
                           (int)(len > 200 ? 200 : len), db);
    memcpy(req->db, db, len);
    req->db[len] = '\0';
    return 0;
}

/* Append doc's fields to cmd. */
static int concat_doc(bson_t *cmd, const bson_t *doc, sbl_err_t *err)
{
    if (!bson_concat(cmd, doc))
        return sbl_err_set(err, SBL_E_BSONObjectTooLarge, "command document too large");
    return 0;
}

/* The size of array element number i whose document is dlen bytes. */
static size_t element_size(uint32_t i, size_t dlen)
{
    size_t digits = 1;
    for (uint32_t v = i / 10; v != 0; v /= 10)
        digits++;
    return 1 + digits + 1 + dlen;
}

/*
 * cmd (empty): body's fields, then each document sequence (kind 1 section)
 * of msg[off..end) as an array field named by its identifier, encoded in
 * one buffer of its size (a pass over sections scan_sections validated).  An
 * identifier that is a field of the body or of an earlier sequence is the
 * ProtocolError mongod answers.
 */
static int build_cmd(bson_t *cmd, sbl_doc_index_t *ix, const uint8_t *msg, size_t off, size_t end,
                     const bson_t *body, sbl_err_t *err)
{
    size_t n = body->len;
    bson_iter_t it;
    for (size_t o = off; o < end;) {
        uint8_t kind = msg[o++];
        size_t sec_end = o + (size_t)rd_i32(msg + o);
        if (kind == 1) {
            const char *id = (const char *)msg + o + 4;
            size_t idlen = strlen(id), d = o + 4 + idlen + 1;
            bool dup = sbl_doc_find_top(body, id, &it); /* body passed sbl_bson_check */
            for (size_t e = off; !dup && e < o - 1;) { /* the earlier sequences */
                size_t e_end = e + 1 + (size_t)rd_i32(msg + e + 1);
                dup = msg[e] == 1 && strcmp((const char *)msg + e + 5, id) == 0;
                e = e_end;
            }
            if (dup)
                return sbl_err_set(err, SBL_E_ProtocolError,
                                   "Duplicate field '%s' in OP_MSG body and document sequence",
                                   id);
            n += 1 + idlen + 1 + 4 + 1; /* type, key, the array's length and its end */
            for (uint32_t i = 0; d < sec_end; i++) {
                size_t dlen = (size_t)rd_i32(msg + d);
                n += element_size(i, dlen);
                d += dlen;
            }
        }
        o = sec_end;
    }
    uint8_t *p;
    if (n > INT32_MAX || (p = bson_reserve_buffer(cmd, (uint32_t)n)) == NULL)
        return sbl_err_set(err, SBL_E_BSONObjectTooLarge, "command document too large");
    uint8_t *start = p;
    memcpy(p, bson_get_data(body), body->len - 1);
    p += body->len - 1;
    for (size_t o = off; o < end;) {
        uint8_t kind = msg[o++];
        size_t sec_end = o + (size_t)rd_i32(msg + o);
        if (kind == 1) {
            const char *id = (const char *)msg + o + 4;
            size_t idlen = strlen(id), d = o + 4 + idlen + 1;
            if (ix->data != NULL && ix->n < SBL_DOC_INDEX_MAX && idlen <= UINT8_MAX) {
                ix->at[ix->n] = (uint32_t)(p - start);
                ix->klen[ix->n++] = (uint8_t)idlen;
            } else {
                ix->data = NULL;
            }
            *p++ = BSON_TYPE_ARRAY;
            memcpy(p, id, idlen + 1);
            p += idlen + 1;
            uint8_t *arr = p;
            p += 4;
            for (uint32_t i = 0; d < sec_end; i++) {
                size_t dlen = (size_t)rd_i32(msg + d);
                char keybuf[16];
                const char *key;
                size_t klen = bson_uint32_to_string(i, &key, keybuf, sizeof(keybuf));
                *p++ = BSON_TYPE_DOCUMENT;
                memcpy(p, key, klen + 1);
                memcpy(p + klen + 1, msg + d, dlen);
                p += klen + 1 + dlen;
                d += dlen;
            }
            *p++ = 0;
            wr_i32(arr, (int32_t)(p - arr));
        }
        o = sec_end;
    }
    *p = 0;
    wr_i32(start, (int32_t)n);
    if (ix->data != NULL) { /* the body's fields are at the same offsets in cmd */
        ix->data = start;
        ix->len = (uint32_t)n;
    }
    return 0;
}

/* Pass one over OP_MSG sections: validate every section, find the body. */
static int scan_sections(const uint8_t *msg, size_t off, size_t end, bson_t *body, bool *have_body,
                         sbl_err_t *err)
{
    while (off < end) {
        uint8_t kind = msg[off++];
        if (kind == 0) {
            if (*have_body)
                return sbl_err_set(err, SBL_E_ProtocolError,
                                   "Multiple body sections in OP_MSG message");
            SBL_RET(read_doc(msg, &off, end, body, "OP_MSG body", err));
            *have_body = true;
        } else if (kind == 1) {
            if (end - off < 4)
                return sbl_err_set(err, SBL_E_ProtocolError,
                                   "OP_MSG document sequence: truncated size");
            int32_t size = rd_i32(msg + off);
            if (size < 5 || (size_t)size > end - off)
                return sbl_err_set(err, SBL_E_ProtocolError,
                                   "OP_MSG document sequence: invalid size %d (%zu bytes left)",
                                   size, end - off);
            size_t sec_end = off + (size_t)size;
            const uint8_t *id = msg + off + 4;
            const uint8_t *nul = memchr(id, '\0', sec_end - (off + 4));
            if (nul == NULL)
                return sbl_err_set(err, SBL_E_ProtocolError,
                                   "OP_MSG document sequence: unterminated identifier");
            if (!bson_utf8_validate((const char *)id, (size_t)(nul - id), false))
                return sbl_err_set(err, SBL_E_InvalidBSON,
                                   "OP_MSG document sequence: identifier is not valid UTF-8");
            size_t doff = (size_t)(nul - msg) + 1;
            while (doff < sec_end) {
                bson_t doc;
                SBL_RET(read_doc(msg, &doff, sec_end, &doc, "OP_MSG document sequence", err));
            }
            off = sec_end;
        } else {
            return sbl_err_set(err, SBL_E_ProtocolError, "Unknown section kind %u in OP_MSG",
                               (unsigned)kind);
        }
    }
    if (!*have_body)
        return sbl_err_set(err, SBL_E_ProtocolError, "OP_MSG messages must have a body");
    return 0;
}

static int parse_msg(const uint8_t *msg, size_t len, sbl_request_t *req, sbl_err_t *err)
{
    if (len < HEADER_LEN + 4 + 1)
        return sbl_err_set(err, SBL_E_ProtocolError, "OP_MSG of %zu bytes is too short", len);
    uint32_t flags = rd_u32(msg + HEADER_LEN);
    uint32_t unknown = flags & MSG_REQUIRED_MASK & ~MSG_KNOWN_REQUIRED;
    if (unknown != 0)
        return sbl_err_set(err, SBL_E_ProtocolError,
                           "Unrecognized required flag bits in OP_MSG: 0x%x", unknown);
    size_t end = len;
    if (flags & SBL_MSG_CHECKSUM_PRESENT) {
        if (len < HEADER_LEN + 4 + 1 + 4)
            return sbl_err_set(err, SBL_E_ProtocolError, "OP_MSG too short for its checksum");
        end = len - 4;
        uint32_t want = rd_u32(msg + end);
        uint32_t got = sbl_crc32c(0, msg, end);
        if (want != got)
            return sbl_err_set(err, SBL_E_ProtocolError,
                               "OP_MSG checksum does not match contents (0x%08x != 0x%08x)", want,
                               got);
    }
    req->flags = flags;
    req->more_to_come = (flags & SBL_MSG_MORE_TO_COME) != 0;

    bson_t body;
    bool have_body = false;
    SBL_RET(scan_sections(msg, HEADER_LEN + 4, end, &body, &have_body, err));

    /* The body's fields, walked once: for $db, the sequences' duplicate
     * check, and then the dispatcher (req->cmd_ix). */
    sbl_doc_index_build(&req->cmd_ix, &body); /* body passed sbl_bson_check */
    const sbl_doc_index_t *prev = sbl_doc_index_use(&req->cmd_ix);
    /* A missing $db is the command's error (mongod answers 40571), not the
     * connection's: leave req->db empty and let the dispatcher refuse it. */
    bson_iter_t it;
    int rc = 0;
    if (sbl_doc_find_top(&body, "$db", &it)) {
        uint32_t dblen = 0;
        const char *db = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, &dblen) : NULL;
        rc = db == NULL ? sbl_err_set(err, SBL_E_TypeMismatch, "$db must be a string")
                        : set_db(req, db, dblen, err);
    }
    if (rc == 0)
        rc = build_cmd(&req->cmd, &req->cmd_ix, msg, HEADER_LEN + 4, end, &body, err);
    sbl_doc_index_use(prev);
    if (rc != 0)
        req->cmd_ix.data = NULL;
    return rc;
}

/* Unwrap {$query: {...}} / {query: {...}} into cmd, keeping $readPreference. */
static int unwrap_query(bson_t *cmd, const bson_t *q, sbl_err_t *err)
{
    bson_iter_t it;
    if (bson_iter_init(&it, q) && bson_iter_next(&it) && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        (strcmp(bson_iter_key(&it), "$query") == 0 || strcmp(bson_iter_key(&it), "query") == 0)) {
        uint32_t ilen = 0;
        const uint8_t *idata = NULL;
        bson_iter_document(&it, &ilen, &idata);
        bson_t inner;
        if (!bson_init_static(&inner, idata, ilen))
            return sbl_err_set(err, SBL_E_InvalidBSON, "OP_QUERY: invalid $query document");
        SBL_RET(concat_doc(cmd, &inner, err));
        bson_iter_t rp, dup;
        if (bson_iter_init_find(&rp, q, "$readPreference") &&
            !bson_iter_init_find(&dup, &inner, "$readPreference") &&
            !sbl_append_iter(cmd, "$readPreference", -1, &rp))
            return sbl_err_set(err, SBL_E_BSONObjectTooLarge, "command document too large");
        return 0;
    }
    return concat_doc(cmd, q, err);
}

static int parse_query(const uint8_t *msg, size_t len, sbl_request_t *req, sbl_err_t *err)
{
    size_t off = HEADER_LEN;
    if (len - off < 4)
        return sbl_err_set(err, SBL_E_ProtocolError, "OP_QUERY: truncated flags");
    req->query_flags = rd_i32(msg + off);
    off += 4;
    const uint8_t *ns = msg + off;
    const uint8_t *nul = memchr(ns, '\0', len - off);
    if (nul == NULL)
        return sbl_err_set(err, SBL_E_ProtocolError, "OP_QUERY: unterminated collection name");
    off = (size_t)(nul - msg) + 1;
    if (len - off < 8)
        return sbl_err_set(err, SBL_E_ProtocolError, "OP_QUERY: truncated skip/return counts");
    req->number_to_skip = rd_i32(msg + off);
    req->number_to_return = rd_i32(msg + off + 4);
    off += 8;
    bson_t q, fields;
    bool have_fields = false;
    SBL_RET(read_doc(msg, &off, len, &q, "OP_QUERY query", err));
    if (off < len) {
        SBL_RET(read_doc(msg, &off, len, &fields, "OP_QUERY returnFieldsSelector", err));
        have_fields = true;
    }
    if (off != len)
        return sbl_err_set(err, SBL_E_ProtocolError, "OP_QUERY: %zu trailing bytes", len - off);
    const char *dot = strchr((const char *)ns, '.');
    size_t dblen = dot ? (size_t)(dot - (const char *)ns) : strlen((const char *)ns);
    SBL_RET(set_db(req, (const char *)ns, dblen, err));
    if (dot != NULL && strcmp(dot + 1, "$cmd") != 0 && dot[1] != '\0')
        return sbl_wire_legacy_find(req, dot + 1, &q, have_fields ? &fields : NULL, err);
    return unwrap_query(&req->cmd, &q, err);
}

static const char *legacy_name(int32_t op)
{
    switch (op) {
    case SBL_OP_REPLY:
        return "OP_REPLY";
    case SBL_OP_UPDATE:
        return "OP_UPDATE";
    case SBL_OP_INSERT:
        return "OP_INSERT";
    case SBL_OP_GET_MORE:
        return "OP_GET_MORE";
    case SBL_OP_DELETE:
        return "OP_DELETE";
    case SBL_OP_KILL_CURSORS:
        return "OP_KILL_CURSORS";
    default:
        return NULL;
    }
}

static int parse_any(const uint8_t *msg, size_t len, sbl_request_t *req, bool inner,
                     sbl_err_t *err);

static int parse_compressed(const uint8_t *msg, size_t len, sbl_request_t *req, sbl_err_t *err)
{
    if (len < HEADER_LEN + 9)
        return sbl_err_set(err, SBL_E_ProtocolError, "OP_COMPRESSED of %zu bytes is too short",
                           len);
    int32_t orig = rd_i32(msg + HEADER_LEN);
    int32_t usize = rd_i32(msg + HEADER_LEN + 4);
    uint8_t cid = msg[HEADER_LEN + 8];
    if (orig != SBL_OP_MSG && orig != SBL_OP_QUERY)
        return sbl_err_set(err, SBL_E_ProtocolError,
                           "OP_COMPRESSED wraps unsupported opcode %d", orig);
    if (usize < 0 || usize > SBL_MAX_MESSAGE_SIZE - HEADER_LEN)
        return sbl_err_set(err, SBL_E_ProtocolError,
                           "OP_COMPRESSED uncompressedSize %d out of range", usize);
    if (sbl_compressor_name(cid) == NULL)
        return sbl_err_set(err, SBL_E_ProtocolError, "OP_COMPRESSED: unknown compressor id %u",
                           (unsigned)cid);
    size_t full = HEADER_LEN + (size_t)usize;
    uint8_t *out = bson_malloc(full);
    int rc;
    /* Rebuild the original header: the checksum of an OP_MSG covers it. */
    memcpy(out, msg, HEADER_LEN);
    out[0] = (uint8_t)full;
    out[1] = (uint8_t)(full >> 8);
    out[2] = (uint8_t)(full >> 16);
    out[3] = (uint8_t)(full >> 24);
    memcpy(out + 12, msg + HEADER_LEN, 4);
    SBL_ERR(sbl_wire_decompress(cid, msg + HEADER_LEN + 9, len - HEADER_LEN - 9, out + HEADER_LEN,
                                (size_t)usize, err));
    SBL_ERR(parse_any(out, full, req, true, err));
    req->compressor = cid;
err:
    bson_free(out);
    return rc;
}

static int parse_any(const uint8_t *msg, size_t len, sbl_request_t *req, bool inner,
                     sbl_err_t *err)
{
    if (len < HEADER_LEN || rd_i32(msg) < 0 || (size_t)rd_i32(msg) != len)
        return sbl_err_set(err, SBL_E_ProtocolError, "message length header does not match %zu",
                           len);
    req->request_id = rd_i32(msg + 4);
    req->opcode = rd_i32(msg + 12);
    switch (req->opcode) {
    case SBL_OP_MSG:
        return parse_msg(msg, len, req, err);
    case SBL_OP_QUERY:
        return parse_query(msg, len, req, err);
    case SBL_OP_COMPRESSED:
        if (inner)
            return sbl_err_set(err, SBL_E_ProtocolError, "nested OP_COMPRESSED");
        return parse_compressed(msg, len, req, err);
    default:
        if (legacy_name(req->opcode) != NULL)
            return sbl_err_set(err, SBL_E_ProtocolError,
                               "%s is not supported: it was removed in MongoDB 6.0",
                               legacy_name(req->opcode));
        return sbl_err_set(err, SBL_E_ProtocolError, "Unknown opcode %d", req->opcode);
    }
}

int sbl_wire_parse(const uint8_t *msg, size_t len, sbl_request_t *req, sbl_err_t *err)
{
    memset(req, 0, sizeof(*req));
    bson_init(&req->cmd);
    req->compressor = SBL_COMP_NOOP;
    int rc = parse_any(msg, len, req, false, err);
    if (rc != 0) {
        bson_reinit(&req->cmd);
        req->db[0] = '\0';
    }
    return rc;
}

void sbl_request_destroy(sbl_request_t *req)
{
    if (req == NULL)
        return;
    bson_destroy(&req->cmd);
    bson_init(&req->cmd); /* a second destroy stays harmless */
}

/* Append an uncompressed reply (header included) to out. */
static void build_plain(const sbl_request_t *req, int32_t request_id, const bson_t *reply,
                        sbl_buf_t *out)
{
    size_t start = out->len;
    bool query = req->opcode == SBL_OP_QUERY;
    /* One allocation of the final size: a large reply is not copied by doubling. */
    sbl_buf_reserve(out, HEADER_LEN + 20 + reply->len + 4);
    sbl_buf_append_i32le(out, 0);
    sbl_buf_append_i32le(out, request_id);
    sbl_buf_append_i32le(out, req->request_id);
    sbl_buf_append_i32le(out, query ? SBL_OP_REPLY : SBL_OP_MSG);
    bool checksum = !query && (req->flags & SBL_MSG_CHECKSUM_PRESENT);
    if (query && req->legacy_find) {
        sbl_wire_legacy_body(req, reply, out);
    } else if (query) {
        sbl_buf_append_i32le(out, 8); /* AwaitCapable */
        sbl_buf_append_i64le(out, 0); /* cursorId */
        sbl_buf_append_i32le(out, 0); /* startingFrom */
        sbl_buf_append_i32le(out, 1); /* numberReturned */
    } else {
        uint32_t flags = req->reply_flags | (checksum ? SBL_MSG_CHECKSUM_PRESENT : 0);
        sbl_buf_append_i32le(out, (int32_t)flags);
        sbl_buf_append_byte(out, 0);
    }
    if (!(query && req->legacy_find)) /* a legacy find's body holds the batch instead */
        sbl_buf_append(out, bson_get_data(reply), reply->len);
    size_t total = out->len - start + (checksum ? 4 : 0);
    sbl_buf_put_i32le(out, start, (int32_t)total);
    if (checksum)
        sbl_buf_append_i32le(out, (int32_t)sbl_crc32c(0, out->data + start, out->len - start));
}

bool sbl_wire_reply_plain(const sbl_request_t *req)
{
    return req->opcode == SBL_OP_MSG && !req->more_to_come && req->reply_flags == 0 &&
           !(req->flags & SBL_MSG_CHECKSUM_PRESENT) &&
           (req->compressor == SBL_COMP_NOOP || sbl_compressor_name(req->compressor) == NULL);
}

static uint8_t *le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
    return p + 4;
}

void sbl_wire_msg_head(const sbl_request_t *req, int32_t request_id, uint32_t body_len,
                       uint8_t *head)
{
    uint8_t *p = le32(head, SBL_WIRE_MSG_HEAD + body_len);
    p = le32(p, (uint32_t)request_id);
    p = le32(p, (uint32_t)req->request_id);
    p = le32(p, SBL_OP_MSG);
    p = le32(p, 0); /* flags */
    *p = 0;         /* section kind 0: the body */
}

void sbl_wire_build_reply(const sbl_request_t *req, int32_t request_id, const bson_t *reply,
                          sbl_buf_t *out)
{
    if (req->compressor == SBL_COMP_NOOP || sbl_compressor_name(req->compressor) == NULL) {
        build_plain(req, request_id, reply, out);
        return;
    }
    sbl_buf_t plain;
    sbl_buf_init(&plain);
    build_plain(req, request_id, reply, &plain);
    size_t start = out->len;
    sbl_buf_append_i32le(out, 0);
    sbl_buf_append_i32le(out, request_id);
    sbl_buf_append_i32le(out, req->request_id);
    sbl_buf_append_i32le(out, SBL_OP_COMPRESSED);
    sbl_buf_append_i32le(out, req->opcode == SBL_OP_QUERY ? SBL_OP_REPLY : SBL_OP_MSG);
    sbl_buf_append_i32le(out, (int32_t)(plain.len - HEADER_LEN));
    sbl_buf_append_byte(out, req->compressor);
    if (sbl_wire_compress(req->compressor, plain.data + HEADER_LEN, plain.len - HEADER_LEN, out)) {
        sbl_buf_put_i32le(out, start, (int32_t)(out->len - start));
    } else {
        /* Compression failing is not the client's problem: answer uncompressed. */
        out->len = start;
        sbl_buf_append(out, plain.data, plain.len);
    }
    sbl_buf_destroy(&plain);
}
