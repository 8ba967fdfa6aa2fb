/*
 * test_wire.c: unit tests of the wire module: OP_MSG (body, document
 * sequences, checksum, moreToCome, flag bits), OP_QUERY, OP_COMPRESSED with
 * every compressor, reply building, CRC-32C, and malformed input (every
 * truncation, bad lengths, bad BSON, bad section kinds) never crashing.
 */
#include <snappy-c.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "check.h"
#include "wire/wire.h"

uint32_t sbl_crc32c_sw(uint32_t crc, const void *p, size_t n);

static int32_t rd32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* Start a message: header with a length placeholder. */
static size_t begin_msg(sbl_buf_t *b, int32_t reqid, int32_t opcode)
{
    size_t start = b->len;
    sbl_buf_append_i32le(b, 0);
    sbl_buf_append_i32le(b, reqid);
    sbl_buf_append_i32le(b, 0);
    sbl_buf_append_i32le(b, opcode);
    return start;
}

static void end_msg(sbl_buf_t *b, size_t start, bool checksum)
{
    sbl_buf_put_i32le(b, start, (int32_t)(b->len - start + (checksum ? 4 : 0)));
    if (checksum)
        sbl_buf_append_i32le(b, (int32_t)sbl_crc32c(0, b->data + start, b->len - start));
}

static void add_body(sbl_buf_t *b, const bson_t *doc)
{
    sbl_buf_append_byte(b, 0);
    sbl_buf_append(b, bson_get_data(doc), doc->len);
}

static void add_seq(sbl_buf_t *b, const char *id, bson_t **docs, int n)
{
    sbl_buf_append_byte(b, 1);
    size_t at = b->len;
    sbl_buf_append_i32le(b, 0);
    sbl_buf_append(b, id, strlen(id) + 1);
    for (int i = 0; i < n; i++)
        sbl_buf_append(b, bson_get_data(docs[i]), docs[i]->len);
    sbl_buf_put_i32le(b, at, (int32_t)(b->len - at));
}

/* An OP_MSG insert: body {insert: "c", $db: "test"} and a "documents" sequence. */
static void build_insert(sbl_buf_t *b, uint32_t flags, int ndocs)
{
    bson_t *body = BCON_NEW("insert", BCON_UTF8("c"), "$db", BCON_UTF8("test"));
    bson_t *docs[8];
    for (int i = 0; i < ndocs; i++)
        docs[i] = BCON_NEW("_id", BCON_INT32(i), "s", BCON_UTF8("xyz"));
    size_t st = begin_msg(b, 42, SBL_OP_MSG);
    sbl_buf_append_i32le(b, (int32_t)flags);
    add_body(b, body);
    add_seq(b, "documents", docs, ndocs);
    end_msg(b, st, flags & SBL_MSG_CHECKSUM_PRESENT);
    bson_destroy(body);
    for (int i = 0; i < ndocs; i++)
        bson_destroy(docs[i]);
}

static void test_crc(void)
{
    CHECK(sbl_crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(sbl_crc32c(0, "", 0) == 0);
    uint8_t zeros[32] = {0};
    CHECK(sbl_crc32c(0, zeros, 32) == 0x8A9136AAu);
    uint8_t ones[32];
    memset(ones, 0xff, sizeof(ones));
    CHECK(sbl_crc32c(0, ones, 32) == 0x62A8AB43u);
    /* Chaining, unaligned starts and both implementations agree. */
    uint8_t data[1000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 131 + 7);
    for (size_t off = 0; off < 9; off++) {
        for (size_t n = 0; n < 40; n += 3) {
            uint32_t a = sbl_crc32c(0, data + off, n);
            CHECK(a == sbl_crc32c_sw(0, data + off, n));
            uint32_t c = sbl_crc32c(sbl_crc32c(0, data + off, n / 2), data + off + n / 2,
                                    n - n / 2);
            CHECK(a == c);
        }
    }
    CHECK(sbl_crc32c(0, data, sizeof(data)) == sbl_crc32c_sw(0, data, sizeof(data)));
}

static void test_length(void)
{
    int32_t len = -1;
    uint8_t h[4] = {20, 0, 0, 0};
    CHECK(sbl_wire_message_length(h, 3, &len) == 0 && len == 0);
    CHECK(sbl_wire_message_length(h, 4, &len) == 0 && len == 20);
    uint8_t small[4] = {15, 0, 0, 0};
    CHECK(sbl_wire_message_length(small, 4, &len) == SBL_E_ProtocolError);
    uint8_t neg[4] = {0xff, 0xff, 0xff, 0xff};
    CHECK(sbl_wire_message_length(neg, 4, &len) == SBL_E_ProtocolError);
    uint8_t big[4];
    int32_t v = SBL_MAX_MESSAGE_SIZE + 1;
    memcpy(big, &v, 4);
    CHECK(sbl_wire_message_length(big, 4, &len) == SBL_E_ProtocolError);
    v = SBL_MAX_MESSAGE_SIZE;
    memcpy(big, &v, 4);
    CHECK(sbl_wire_message_length(big, 4, &len) == 0 && len == SBL_MAX_MESSAGE_SIZE);
}

static void check_insert_cmd(const sbl_request_t *req, int ndocs)
{
    bson_iter_t it, arr;
    CHECK(req->opcode == SBL_OP_MSG);
    CHECK(req->request_id == 42);
    CHECK(strcmp(req->db, "test") == 0);
    CHECK(bson_iter_init(&it, &req->cmd) && bson_iter_next(&it) &&
          strcmp(bson_iter_key(&it), "insert") == 0);
    CHECK(bson_iter_init_find(&it, &req->cmd, "documents") && BSON_ITER_HOLDS_ARRAY(&it));
    int n = 0;
    if (bson_iter_recurse(&it, &arr)) {
        while (bson_iter_next(&arr)) {
            bson_iter_t d;
            CHECK(BSON_ITER_HOLDS_DOCUMENT(&arr));
            CHECK(bson_iter_recurse(&arr, &d) && bson_iter_find(&d, "_id") &&
                  bson_iter_int32(&d) == n);
            n++;
        }
    }
    CHECK_MSG(n == ndocs, "n=%d", n);
}

static void test_msg(void)
{
    sbl_request_t req;
    sbl_err_t err;
    sbl_buf_t b;
    sbl_buf_init(&b);

    build_insert(&b, 0, 3);
    CHECK_MSG(sbl_wire_parse(b.data, b.len, &req, &err) == 0, "%s", err.msg);
    check_insert_cmd(&req, 3);
    CHECK(!req.more_to_come && req.compressor == SBL_COMP_NOOP);
    sbl_request_destroy(&req);
    sbl_request_destroy(&req);

    /* Empty sequence becomes an empty array. */
    sbl_buf_reset(&b);
    build_insert(&b, 0, 0);
    CHECK(sbl_wire_parse(b.data, b.len, &req, &err) == 0);
    check_insert_cmd(&req, 0);
    sbl_request_destroy(&req);

    /* Checksum good. */
    sbl_buf_reset(&b);
    build_insert(&b, SBL_MSG_CHECKSUM_PRESENT, 2);
    CHECK_MSG(sbl_wire_parse(b.data, b.len, &req, &err) == 0, "%s", err.msg);
    check_insert_cmd(&req, 2);
    CHECK(req.flags & SBL_MSG_CHECKSUM_PRESENT);
    /* The reply carries a checksum too. */
    bson_t *reply = BCON_NEW("ok", BCON_DOUBLE(1));
    sbl_buf_t out;
    sbl_buf_init(&out);
    sbl_wire_build_reply(&req, 7, reply, &out);
    CHECK(rd32(out.data) == (int32_t)out.len);
    CHECK(rd32(out.data + 4) == 7 && rd32(out.data + 8) == 42 && rd32(out.data + 12) == SBL_OP_MSG);
    CHECK(rd32(out.data + 16) == 1);
    CHECK((uint32_t)rd32(out.data + out.len - 4) == sbl_crc32c(0, out.data, out.len - 4));
    sbl_request_destroy(&req);

    /* Checksum bad: flip a byte anywhere and parsing fails. */
    for (size_t i = 20; i < b.len; i++) {
        b.data[i] ^= 0x01;
        int rc = sbl_wire_parse(b.data, b.len, &req, &err);
        CHECK_MSG(rc != 0, "flip at %zu accepted", i);
        sbl_request_destroy(&req);
        b.data[i] ^= 0x01;
    }
    b.data[b.len - 1] ^= 0x80;
    CHECK(sbl_wire_parse(b.data, b.len, &req, &err) == SBL_E_ProtocolError);
    CHECK(strstr(err.msg, "checksum") != NULL);
    sbl_request_destroy(&req);

    /* moreToCome and exhaustAllowed (optional bit) */
    sbl_buf_reset(&b);
    build_insert(&b, SBL_MSG_MORE_TO_COME | SBL_MSG_EXHAUST_ALLOWED, 1);
    CHECK(sbl_wire_parse(b.data, b.len, &req, &err) == 0);
    CHECK(req.more_to_come);
    sbl_request_destroy(&req);

    /* Unknown required bit -> error; unknown optional bit (17) -> fine. */
    for (int bit = 2; bit < 16; bit++) {
        sbl_buf_reset(&b);
        build_insert(&b, 1u << bit, 1);
        CHECK(sbl_wire_parse(b.data, b.len, &req, &err) == SBL_E_ProtocolError);
        sbl_request_destroy(&req);
    }
    sbl_buf_reset(&b);
    build_insert(&b, 1u << 17, 1);
    CHECK(sbl_wire_parse(b.data, b.len, &req, &err) == 0);
    sbl_request_destroy(&req);

    /* Reply to a plain OP_MSG. */
    sbl_buf_reset(&b);
    build_insert(&b, 0, 1);
    CHECK(sbl_wire_parse(b.data, b.len, &req, &err) == 0);
    sbl_buf_reset(&out);
    sbl_wire_build_reply(&req, 9, reply, &out);
    CHECK(out.len == 16 + 4 + 1 + reply->len);
    CHECK(rd32(out.data) == (int32_t)out.len && rd32(out.data + 16) == 0 && out.data[20] == 0);
    CHECK(memcmp(out.data + 21, bson_get_data(reply), reply->len) == 0);
    /* ... which parses back as a message (as a client would see it). */
    sbl_request_destroy(&req);

    sbl_buf_destroy(&out);
    bson_destroy(reply);
    sbl_buf_destroy(&b);
}

/* A body-only OP_MSG from doc, with the section sequence given raw. */
static int parse_raw_msg(const uint8_t *sections, size_t n, sbl_err_t *err)
{
    sbl_buf_t b;
    sbl_buf_init(&b);
    size_t st = begin_msg(&b, 1, SBL_OP_MSG);
    sbl_buf_append_i32le(&b, 0);
    sbl_buf_append(&b, sections, n);
    end_msg(&b, st, false);
    sbl_request_t req;
    int rc = sbl_wire_parse(b.data, b.len, &req, err);
    sbl_request_destroy(&req);
    sbl_buf_destroy(&b);
    return rc;
}

static void test_msg_errors(void)
{
    sbl_err_t err;
    sbl_request_t req;
    sbl_buf_t b, s;
    sbl_buf_init(&b);
    sbl_buf_init(&s);
    bson_t *body = BCON_NEW("ping", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    bson_t *nodb = BCON_NEW("ping", BCON_INT32(1));

    /* Every truncation of a valid message fails cleanly (length header adjusted too). */
    build_insert(&b, SBL_MSG_CHECKSUM_PRESENT, 3);
    for (size_t n = 0; n < b.len; n++) {
        uint8_t *cp = malloc(n ? n : 1);
        memcpy(cp, b.data, n);
        CHECK(sbl_wire_parse(cp, n, &req, &err) != 0);
        sbl_request_destroy(&req);
        if (n >= 4) {
            int32_t v = (int32_t)n;
            memcpy(cp, &v, 4);
            CHECK_MSG(sbl_wire_parse(cp, n, &req, &err) != 0, "truncated to %zu accepted", n);
            sbl_request_destroy(&req);
        }
        free(cp);
    }
    sbl_buf_reset(&b);
    build_insert(&b, 0, 3);
    for (size_t n = 0; n < b.len; n++) {
        uint8_t *cp = malloc(n ? n : 1);
        memcpy(cp, b.data, n);
        if (n >= 4) {
            int32_t v = (int32_t)n;
            memcpy(cp, &v, 4);
        }
        /* Cut right after the body (16 + 4 + 1 + 33 bytes) is a valid body-only message. */
        int rc = sbl_wire_parse(cp, n, &req, &err);
        CHECK_MSG(rc != 0 || n == 54, "truncated to %zu accepted", n);
        sbl_request_destroy(&req);
        free(cp);
    }

    /* Missing $db */
    sbl_buf_reset(&s);
    add_body(&s, nodb);
    /* Parsed, with an empty db: the command layer answers the error (40571). */
    CHECK(parse_raw_msg(s.data, s.len, &err) == 0);
    /* No body / two bodies / unknown kind */
    CHECK(parse_raw_msg(NULL, 0, &err) == SBL_E_ProtocolError);
    sbl_buf_reset(&s);
    add_body(&s, body);
    add_body(&s, body);
    CHECK(parse_raw_msg(s.data, s.len, &err) == SBL_E_ProtocolError);
    for (int kind = 2; kind < 256; kind += 50) {
        sbl_buf_reset(&s);
        add_body(&s, body);
        sbl_buf_append_byte(&s, (uint8_t)kind);
        sbl_buf_append(&s, bson_get_data(body), body->len);
        CHECK(parse_raw_msg(s.data, s.len, &err) == SBL_E_ProtocolError);
    }
    /* Sequence only (no body) */
    sbl_buf_reset(&s);
    add_seq(&s, "documents", &body, 1);
    CHECK(parse_raw_msg(s.data, s.len, &err) == SBL_E_ProtocolError);
    /* Sequence whose name is already in the body, and duplicate sequences */
    sbl_buf_reset(&s);
    add_body(&s, body);
    add_seq(&s, "ping", &nodb, 1);
    CHECK(parse_raw_msg(s.data, s.len, &err) != 0);
    sbl_buf_reset(&s);
    add_body(&s, body);
    add_seq(&s, "documents", &nodb, 1);
    add_seq(&s, "documents", &nodb, 1);
    CHECK(parse_raw_msg(s.data, s.len, &err) != 0);
    /* Sequence size too small / too large / unterminated identifier */
    sbl_buf_reset(&s);
    add_body(&s, body);
    sbl_buf_append_byte(&s, 1);
    sbl_buf_append_i32le(&s, 4);
    CHECK(parse_raw_msg(s.data, s.len, &err) == SBL_E_ProtocolError);
    sbl_buf_reset(&s);
    add_body(&s, body);
    sbl_buf_append_byte(&s, 1);
    sbl_buf_append_i32le(&s, 100);
    sbl_buf_append(&s, "abc", 4);
    CHECK(parse_raw_msg(s.data, s.len, &err) == SBL_E_ProtocolError);
    sbl_buf_reset(&s);
    add_body(&s, body);
    sbl_buf_append_byte(&s, 1);
    sbl_buf_append_i32le(&s, 7);
    sbl_buf_append(&s, "abc", 3);
    CHECK(parse_raw_msg(s.data, s.len, &err) == SBL_E_ProtocolError);
    /* Sequence with a partial trailing document */
    sbl_buf_reset(&s);
    add_body(&s, body);
    sbl_buf_append_byte(&s, 1);
    sbl_buf_append_i32le(&s, 4 + 2 + (int32_t)nodb->len - 1);
    sbl_buf_append(&s, "d", 2);
    sbl_buf_append(&s, bson_get_data(nodb), nodb->len - 1);
    CHECK(parse_raw_msg(s.data, s.len, &err) != 0);

    /* Bad BSON: bad length, missing terminator, corrupt nested element. */
    uint8_t bad1[] = {0, 3, 0, 0, 0, 0};
    CHECK(parse_raw_msg(bad1, sizeof(bad1), &err) == SBL_E_InvalidBSON);
    uint8_t bad2[] = {0, 5, 0, 0, 0, 1};
    CHECK(parse_raw_msg(bad2, sizeof(bad2), &err) == SBL_E_InvalidBSON);
    bson_t *nested = BCON_NEW("a", "{", "s", BCON_UTF8("hello"), "}", "$db", BCON_UTF8("x"));
    uint8_t *nb = malloc(nested->len + 1);
    nb[0] = 0;
    memcpy(nb + 1, bson_get_data(nested), nested->len);
    CHECK(parse_raw_msg(nb, nested->len + 1, &err) == 0);
    /* The string length inside the nested document: "a" doc starts at 4+1+2 */
    size_t strlen_off = 1 + 4 + 1 + 2 + 4 + 1 + 2;
    CHECK(rd32(nb + strlen_off) == 6);
    nb[strlen_off] = 60;
    CHECK(parse_raw_msg(nb, nested->len + 1, &err) == SBL_E_InvalidBSON);
    nb[strlen_off] = 6;
    nb[1 + 4 + 1 + 2 + 4] = 0x7f; /* unknown element type in the nested doc */
    CHECK(parse_raw_msg(nb, nested->len + 1, &err) == SBL_E_InvalidBSON);
    free(nb);
    bson_destroy(nested);

    /* Document over the 16 MiB + 16 KiB bound. */
    uint8_t big[] = {0, 0, 0, 0x20, 0x01, 0};
    CHECK(parse_raw_msg(big, sizeof(big), &err) == SBL_E_BSONObjectTooLarge);

    /* Header length disagreeing with the buffer, legacy and unknown opcodes. */
    sbl_buf_reset(&b);
    build_insert(&b, 0, 1);
    CHECK(sbl_wire_parse(b.data, b.len - 1, &req, &err) == SBL_E_ProtocolError);
    sbl_request_destroy(&req);
    int32_t ops[] = {SBL_OP_REPLY, SBL_OP_UPDATE, SBL_OP_INSERT, SBL_OP_GET_MORE,
                     SBL_OP_DELETE, SBL_OP_KILL_CURSORS, 9999};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        sbl_buf_put_i32le(&b, 12, ops[i]);
        CHECK(sbl_wire_parse(b.data, b.len, &req, &err) == SBL_E_ProtocolError);
        sbl_request_destroy(&req);
    }

    bson_destroy(body);
    bson_destroy(nodb);
    sbl_buf_destroy(&b);
    sbl_buf_destroy(&s);
}

static void build_query(sbl_buf_t *b, const char *ns, const bson_t *q, const bson_t *fields)
{
    size_t st = begin_msg(b, 77, SBL_OP_QUERY);
    sbl_buf_append_i32le(b, 4); /* secondaryOk */
    sbl_buf_append(b, ns, strlen(ns) + 1);
    sbl_buf_append_i32le(b, 0);
    sbl_buf_append_i32le(b, -1);
    sbl_buf_append(b, bson_get_data(q), q->len);
    if (fields)
        sbl_buf_append(b, bson_get_data(fields), fields->len);
    end_msg(b, st, false);
}

static void test_query(void)
{
    sbl_request_t req;
    sbl_err_t err;
    sbl_buf_t b;
    sbl_buf_init(&b);
    bson_iter_t it;

    bson_t *q = BCON_NEW("isMaster", BCON_INT32(1), "helloOk", BCON_BOOL(true));
    build_query(&b, "admin.$cmd", q, NULL);
    CHECK_MSG(sbl_wire_parse(b.data, b.len, &req, &err) == 0, "%s", err.msg);
    CHECK(req.opcode == SBL_OP_QUERY && req.request_id == 77);
    CHECK(strcmp(req.db, "admin") == 0);
    CHECK(req.query_flags == 4 && req.number_to_skip == 0 && req.number_to_return == -1);
    CHECK(bson_equal(&req.cmd, q));
    bson_t *reply = BCON_NEW("ismaster", BCON_BOOL(true), "ok", BCON_DOUBLE(1));
    sbl_buf_t out;
    sbl_buf_init(&out);
    sbl_wire_build_reply(&req, 5, reply, &out);
    CHECK(out.len == 36 + reply->len);
    CHECK(rd32(out.data) == (int32_t)out.len && rd32(out.data + 4) == 5 &&
          rd32(out.data + 8) == 77 && rd32(out.data + 12) == SBL_OP_REPLY);
    CHECK(rd32(out.data + 16) == 8 && rd32(out.data + 20) == 0 && rd32(out.data + 24) == 0 &&
          rd32(out.data + 28) == 0 && rd32(out.data + 32) == 1);
    CHECK(memcmp(out.data + 36, bson_get_data(reply), reply->len) == 0);
    sbl_request_destroy(&req);

    /* $query wrapping with $readPreference kept, plus a returnFieldsSelector. */
    bson_t *wrapped = BCON_NEW("$query", "{", "hello", BCON_INT32(1), "}", "$readPreference", "{",
                               "mode", BCON_UTF8("secondaryPreferred"), "}");
    bson_t *fields = BCON_NEW("x", BCON_INT32(1));
    sbl_buf_reset(&b);
    build_query(&b, "test.$cmd", wrapped, fields);
    CHECK_MSG(sbl_wire_parse(b.data, b.len, &req, &err) == 0, "%s", err.msg);
    CHECK(strcmp(req.db, "test") == 0);
    CHECK(bson_iter_init(&it, &req.cmd) && bson_iter_next(&it) &&
          strcmp(bson_iter_key(&it), "hello") == 0);
    CHECK(bson_iter_init_find(&it, &req.cmd, "$readPreference") && BSON_ITER_HOLDS_DOCUMENT(&it));
    CHECK(!bson_iter_init_find(&it, &req.cmd, "$query"));
    sbl_request_destroy(&req);
    bson_destroy(wrapped);

    wrapped = BCON_NEW("query", "{", "ping", BCON_INT32(1), "}");
    sbl_buf_reset(&b);
    build_query(&b, "db.$cmd", wrapped, NULL);
    CHECK(sbl_wire_parse(b.data, b.len, &req, &err) == 0);
    CHECK(bson_iter_init_find(&it, &req.cmd, "ping") && bson_count_keys(&req.cmd) == 1);
    sbl_request_destroy(&req);
    bson_destroy(wrapped);

    /* Non-$cmd namespace still parses; the command layer decides. */
    sbl_buf_reset(&b);
    build_query(&b, "db.coll", q, NULL);
    CHECK(sbl_wire_parse(b.data, b.len, &req, &err) == 0 && strcmp(req.db, "db") == 0);
    sbl_request_destroy(&req);

    /* Truncations, trailing garbage, empty db. */
    sbl_buf_reset(&b);
    build_query(&b, "admin.$cmd", q, fields);
    for (size_t n = 16; n < b.len; n++) {
        uint8_t *cp = malloc(n);
        memcpy(cp, b.data, n);
        int32_t v = (int32_t)n;
        memcpy(cp, &v, 4);
        int rc = sbl_wire_parse(cp, n, &req, &err);
        /* Cutting exactly before the selector leaves a valid message. */
        CHECK_MSG(rc != 0 || n == b.len - fields->len, "truncated to %zu accepted", n);
        sbl_request_destroy(&req);
        free(cp);
    }
    sbl_buf_reset(&b);
    build_query(&b, ".$cmd", q, NULL);
    CHECK(sbl_wire_parse(b.data, b.len, &req, &err) != 0);
    sbl_request_destroy(&req);

    sbl_buf_destroy(&out);
    sbl_buf_destroy(&b);
    bson_destroy(q);
    bson_destroy(fields);
    bson_destroy(reply);
}

/* Compress p[0..n) with compressor id using the libraries directly. */
static size_t compress_with(int id, const uint8_t *p, size_t n, uint8_t **outp)
{
    size_t cap = n + 1024 + ZSTD_compressBound(n) + snappy_max_compressed_length(n);
    uint8_t *out = malloc(cap);
    size_t olen = cap;
    if (id == SBL_COMP_NOOP) {
        memcpy(out, p, n);
        olen = n;
    } else if (id == SBL_COMP_SNAPPY) {
        snappy_compress((const char *)p, n, (char *)out, &olen);
    } else if (id == SBL_COMP_ZLIB) {
        uLongf l = cap;
        compress(out, &l, p, n);
        olen = l;
    } else {
        olen = ZSTD_compress(out, cap, p, n, 3);
    }
    *outp = out;
    return olen;
}

static size_t decompress_with(int id, const uint8_t *p, size_t n, uint8_t *out, size_t cap)
{
    if (id == SBL_COMP_NOOP) {
        memcpy(out, p, n);
        return n;
    } else if (id == SBL_COMP_SNAPPY) {
        size_t l = cap;
        return snappy_uncompress((const char *)p, n, (char *)out, &l) == SNAPPY_OK ? l : 0;
    } else if (id == SBL_COMP_ZLIB) {
        uLongf l = cap;
        return uncompress(out, &l, p, n) == Z_OK ? l : 0;
    }
    size_t r = ZSTD_decompress(out, cap, p, n);
    return ZSTD_isError(r) ? 0 : r;
}

/* Wrap the plain message in OP_COMPRESSED with compressor id. */
static void wrap(const sbl_buf_t *plain, int id, sbl_buf_t *out)
{
    uint8_t *c;
    size_t clen = compress_with(id, plain->data + 16, plain->len - 16, &c);
    size_t st = begin_msg(out, rd32(plain->data + 4), SBL_OP_COMPRESSED);
    sbl_buf_append_i32le(out, rd32(plain->data + 12));
    sbl_buf_append_i32le(out, (int32_t)(plain->len - 16));
    sbl_buf_append_byte(out, (uint8_t)id);
    sbl_buf_append(out, c, clen);
    end_msg(out, st, false);
    free(c);
}

static void test_compressed(void)
{
    const char *names[] = {"noop", "snappy", "zlib", "zstd"};
    for (int id = 0; id < 4; id++) {
        CHECK(sbl_compressor_id(names[id]) == id);
        CHECK(strcmp(sbl_compressor_name(id), names[id]) == 0);
    }
    CHECK(sbl_compressor_id("lz4") == -1 && sbl_compressor_name(9) == NULL);

    sbl_err_t err;
    sbl_request_t req;
    bson_t *reply = BCON_NEW("ok", BCON_DOUBLE(1), "pad", BCON_UTF8("aaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
    for (int id = 0; id < 4; id++) {
        for (int checksum = 0; checksum < 2; checksum++) {
            sbl_buf_t plain, comp, out;
            sbl_buf_init(&plain);
            sbl_buf_init(&comp);
            sbl_buf_init(&out);
            build_insert(&plain, checksum ? SBL_MSG_CHECKSUM_PRESENT : 0, 5);
            wrap(&plain, id, &comp);
            CHECK_MSG(sbl_wire_parse(comp.data, comp.len, &req, &err) == 0, "%s: %s", names[id],
                      err.msg);
            check_insert_cmd(&req, 5);
            CHECK(req.compressor == id);

            /* Reply: OP_COMPRESSED (except noop) around an OP_MSG. */
            sbl_wire_build_reply(&req, 11, reply, &out);
            CHECK(rd32(out.data) == (int32_t)out.len);
            CHECK(rd32(out.data + 8) == 42);
            if (id == SBL_COMP_NOOP) {
                CHECK(rd32(out.data + 12) == SBL_OP_MSG);
            } else {
                CHECK(rd32(out.data + 12) == SBL_OP_COMPRESSED);
                CHECK(rd32(out.data + 16) == SBL_OP_MSG);
                int32_t usize = rd32(out.data + 20);
                CHECK(out.data[24] == id);
                uint8_t *u = malloc((size_t)usize + 16);
                size_t got = decompress_with(id, out.data + 25, out.len - 25, u + 16,
                                             (size_t)usize);
                CHECK(got == (size_t)usize);
                size_t body_off = 16 + 4 + 1;
                CHECK(memcmp(u + body_off, bson_get_data(reply), reply->len) == 0);
                if (checksum) {
                    /* The inner checksum covers the rebuilt uncompressed header. */
                    sbl_buf_t hdr;
                    sbl_buf_init(&hdr);
                    sbl_buf_append_i32le(&hdr, usize + 16);
                    sbl_buf_append_i32le(&hdr, 11);
                    sbl_buf_append_i32le(&hdr, 42);
                    sbl_buf_append_i32le(&hdr, SBL_OP_MSG);
                    memcpy(u, hdr.data, 16);
                    CHECK((uint32_t)rd32(u + 16 + usize - 4) ==
                          sbl_crc32c(0, u, (size_t)usize + 16 - 4));
                    sbl_buf_destroy(&hdr);
                }
                free(u);
            }
            sbl_request_destroy(&req);

            /* Corrupt: wrong uncompressedSize, unknown compressor, truncated payload. */
            if (id != SBL_COMP_NOOP) {
                sbl_buf_put_i32le(&comp, 20, rd32(comp.data + 20) + 1);
                CHECK(sbl_wire_parse(comp.data, comp.len, &req, &err) == SBL_E_ProtocolError);
                sbl_request_destroy(&req);
                sbl_buf_put_i32le(&comp, 20, rd32(comp.data + 20) - 1);
            }
            for (size_t n = 16; n < comp.len; n++) {
                uint8_t *cp = malloc(n);
                memcpy(cp, comp.data, n);
                int32_t v = (int32_t)n;
                memcpy(cp, &v, 4);
                CHECK_MSG(sbl_wire_parse(cp, n, &req, &err) != 0, "%s cut %zu", names[id], n);
                sbl_request_destroy(&req);
                free(cp);
            }
            comp.data[24] = 7;
            CHECK(sbl_wire_parse(comp.data, comp.len, &req, &err) == SBL_E_ProtocolError);
            sbl_request_destroy(&req);
            sbl_buf_destroy(&plain);
            sbl_buf_destroy(&comp);
            sbl_buf_destroy(&out);
        }
    }

    /* Compressed OP_QUERY gets a compressed OP_REPLY. */
    sbl_buf_t plain, comp, out;
    sbl_buf_init(&plain);
    sbl_buf_init(&comp);
    sbl_buf_init(&out);
    bson_t *q = BCON_NEW("ping", BCON_INT32(1));
    build_query(&plain, "admin.$cmd", q, NULL);
    wrap(&plain, SBL_COMP_ZLIB, &comp);
    CHECK(sbl_wire_parse(comp.data, comp.len, &req, &err) == 0);
    CHECK(req.opcode == SBL_OP_QUERY && req.compressor == SBL_COMP_ZLIB);
    sbl_wire_build_reply(&req, 3, reply, &out);
    CHECK(rd32(out.data + 12) == SBL_OP_COMPRESSED && rd32(out.data + 16) == SBL_OP_REPLY);
    sbl_request_destroy(&req);

    /* Nested OP_COMPRESSED, out-of-range size, wrapped legacy opcode. */
    sbl_buf_reset(&plain);
    sbl_buf_append(&plain, comp.data, comp.len);
    sbl_buf_reset(&comp);
    wrap(&plain, SBL_COMP_NOOP, &comp);
    CHECK(sbl_wire_parse(comp.data, comp.len, &req, &err) == SBL_E_ProtocolError);
    sbl_request_destroy(&req);
    sbl_buf_put_i32le(&comp, 16, SBL_OP_MSG);
    sbl_buf_put_i32le(&comp, 20, SBL_MAX_MESSAGE_SIZE);
    CHECK(sbl_wire_parse(comp.data, comp.len, &req, &err) == SBL_E_ProtocolError);
    sbl_request_destroy(&req);
    sbl_buf_put_i32le(&comp, 20, -1);
    CHECK(sbl_wire_parse(comp.data, comp.len, &req, &err) == SBL_E_ProtocolError);
    sbl_request_destroy(&req);
    sbl_buf_put_i32le(&comp, 16, SBL_OP_INSERT);
    CHECK(sbl_wire_parse(comp.data, comp.len, &req, &err) == SBL_E_ProtocolError);
    sbl_request_destroy(&req);

    bson_destroy(q);
    bson_destroy(reply);
    sbl_buf_destroy(&plain);
    sbl_buf_destroy(&comp);
    sbl_buf_destroy(&out);
}

/* Random mutations of valid messages: must never crash (ASan run checks reads). */
static void test_fuzz(void)
{
    sbl_buf_t b, comp;
    sbl_buf_init(&b);
    sbl_buf_init(&comp);
    build_insert(&b, 0, 4);
    wrap(&b, SBL_COMP_SNAPPY, &comp);
    sbl_request_t req;
    sbl_err_t err;
    unsigned seed = 12345;
    int parsed = 0;
    for (int iter = 0; iter < 20000; iter++) {
        sbl_buf_t *src = (iter & 1) ? &comp : &b;
        uint8_t *cp = malloc(src->len);
        memcpy(cp, src->data, src->len);
        int flips = 1 + (int)(rand_r(&seed) % 4);
        for (int f = 0; f < flips; f++)
            cp[4 + rand_r(&seed) % (src->len - 4)] = (uint8_t)rand_r(&seed);
        if (sbl_wire_parse(cp, src->len, &req, &err) == 0)
            parsed++;
        sbl_request_destroy(&req);
        free(cp);
    }
    CHECK(parsed < 20000);
    sbl_buf_destroy(&b);
    sbl_buf_destroy(&comp);
}

int main(void)
{
    test_crc();
    test_length();
    test_msg();
    test_msg_errors();
    test_query();
    test_compressed();
    test_fuzz();
    return CHECK_DONE("test_wire");
}
