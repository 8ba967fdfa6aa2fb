/*
 * wire_legacy.c: OP_QUERY on a collection (a "legacy find"), which drivers
 * of the 3.x era still send for exhaust cursors (pymongo 3 sends every
 * CursorType.EXHAUST query this way).  The query is converted into the find
 * command it stands for, the server runs that, and its cursor reply goes back
 * as an OP_REPLY carrying the batch's documents and the cursor id; with the
 * Exhaust flag the server keeps streaming the next batches as further
 * OP_REPLYs, each answering the one before, until the cursor is exhausted.
 *
 * What must stay true: an error reaches the client as an OP_REPLY with the
 * QueryFailure flag and {$err, code}, never as if it were a document.
 */
#include "wire/wire.h"
#include "wire/wire_int.h"

#include "doc/doc.h"

#include <string.h>

/* OP_QUERY flag bits. */
#define QF_TAILABLE (1 << 1)
#define QF_SECONDARY_OK (1 << 2)
#define QF_NO_TIMEOUT (1 << 4)
#define QF_AWAIT_DATA (1 << 5)
#define QF_EXHAUST (1 << 6)
#define QF_PARTIAL (1 << 7)

/* OP_REPLY responseFlags. */
#define RF_QUERY_FAILURE (1 << 1)
#define RF_AWAIT_CAPABLE (1 << 3)

/* The query modifiers of a wrapped query ({$query: ..., $orderby: ...}) and
 * the find command fields they become. */
static const struct {
    const char *legacy, *field;
} modifiers[] = {
    {"$orderby", "sort"},      {"orderby", "sort"},         {"$hint", "hint"},
    {"$comment", "comment"},   {"$maxTimeMS", "maxTimeMS"}, {"$min", "min"},
    {"$max", "max"},           {"$returnKey", "returnKey"}, {"$showDiskLoc", "showRecordId"},
    {"$readPreference", "$readPreference"},
};

int sbl_wire_legacy_find(sbl_request_t *req, const char *coll, const bson_t *q,
                         const bson_t *fields, sbl_err_t *err)
{
    bson_t *cmd = &req->cmd;
    bson_iter_t it;
    bool wrapped = bson_iter_init(&it, q) && bson_iter_next(&it) &&
                   (strcmp(bson_iter_key(&it), "$query") == 0 ||
                    strcmp(bson_iter_key(&it), "query") == 0) &&
                   BSON_ITER_HOLDS_DOCUMENT(&it);

    req->legacy_find = true;
    BSON_APPEND_UTF8(cmd, "find", coll);
    if (wrapped) {
        sbl_append_iter(cmd, "filter", -1, &it);
        for (size_t i = 0; i < sizeof(modifiers) / sizeof(modifiers[0]); i++)
            if (bson_iter_init_find(&it, q, modifiers[i].legacy))
                sbl_append_iter(cmd, modifiers[i].field, -1, &it);
        if (bson_iter_init_find(&it, q, "$explain"))
            return sbl_err_set(err, SBL_E_BadValue,
                               "OP_QUERY $explain is not supported: run the explain command");
    } else {
        BSON_APPEND_DOCUMENT(cmd, "filter", q);
    }
    if (fields != NULL && !bson_empty(fields))
        BSON_APPEND_DOCUMENT(cmd, "projection", fields);
    if (req->number_to_skip > 0)
        BSON_APPEND_INT32(cmd, "skip", req->number_to_skip);
    /* numberToReturn: a batch size; negative or 1, one batch of at most that many. */
    int32_t n = req->number_to_return;
    if (n < 0 || n == 1) {
        BSON_APPEND_INT64(cmd, "limit", n < 0 ? -(int64_t)n : 1);
        BSON_APPEND_BOOL(cmd, "singleBatch", true);
    } else if (n > 1) {
        BSON_APPEND_INT32(cmd, "batchSize", n);
    }
    if (req->query_flags & QF_TAILABLE)
        BSON_APPEND_BOOL(cmd, "tailable", true);
    if (req->query_flags & QF_AWAIT_DATA)
        BSON_APPEND_BOOL(cmd, "awaitData", true);
    if (req->query_flags & QF_NO_TIMEOUT)
        BSON_APPEND_BOOL(cmd, "noCursorTimeout", true);
    if (req->query_flags & QF_PARTIAL)
        BSON_APPEND_BOOL(cmd, "allowPartialResults", true);
    (void)QF_SECONDARY_OK; /* read by the dispatcher from query_flags */
    return 0;
}

bool sbl_wire_legacy_exhaust(const sbl_request_t *req)
{
    return req->legacy_find && (req->query_flags & QF_EXHAUST);
}

void sbl_wire_legacy_next(sbl_request_t *req, int64_t cursor_id)
{
    bson_iter_t it;
    char coll[256] = "";
    int32_t batch = req->number_to_return > 1 ? req->number_to_return : 0;

    if (bson_iter_init(&it, &req->cmd) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it))
        bson_strncpy(coll, bson_iter_utf8(&it, NULL), sizeof(coll));
    else if (bson_iter_init_find(&it, &req->cmd, "collection") && BSON_ITER_HOLDS_UTF8(&it))
        bson_strncpy(coll, bson_iter_utf8(&it, NULL), sizeof(coll));
    bson_reinit(&req->cmd);
    BSON_APPEND_INT64(&req->cmd, "getMore", cursor_id);
    BSON_APPEND_UTF8(&req->cmd, "collection", coll);
    if (batch > 0)
        BSON_APPEND_INT32(&req->cmd, "batchSize", batch);
}

/* The cursor reply's batch and id: false when reply is not a cursor reply. */
static bool cursor_parts(const bson_t *reply, bson_iter_t *batch, int64_t *id)
{
    bson_iter_t it, cur;
    bool have = false;

    *id = 0;
    if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &cur))
        return false;
    while (bson_iter_next(&cur)) {
        const char *k = bson_iter_key(&cur);
        if (strcmp(k, "id") == 0)
            *id = bson_iter_as_int64(&cur);
        else if ((strcmp(k, "firstBatch") == 0 || strcmp(k, "nextBatch") == 0) &&
                 BSON_ITER_HOLDS_ARRAY(&cur)) {
            *batch = cur;
            have = true;
        }
    }
    return have;
}

int32_t sbl_wire_legacy_body(const sbl_request_t *req, const bson_t *reply, sbl_buf_t *out)
{
    bson_iter_t it, batch, doc;
    int64_t id = 0;
    bool ok = bson_iter_init_find(&it, reply, "ok") && bson_iter_as_double(&it) == 1.0;
    int32_t n = 0;

    if (!ok || !cursor_parts(reply, &batch, &id)) {
        /* QueryFailure: {$err, code} */
        bson_t e = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&e, "$err",
                         bson_iter_init_find(&it, reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it)
                             ? bson_iter_utf8(&it, NULL)
                             : "the query failed");
        BSON_APPEND_INT32(&e, "code",
                          bson_iter_init_find(&it, reply, "code") ? bson_iter_as_int64(&it) : 8);
        if (bson_iter_init_find(&it, reply, "codeName"))
            sbl_append_iter(&e, "codeName", -1, &it);
        sbl_buf_append_i32le(out, RF_QUERY_FAILURE | RF_AWAIT_CAPABLE);
        sbl_buf_append_i64le(out, 0);
        sbl_buf_append_i32le(out, req->legacy_from);
        sbl_buf_append_i32le(out, 1);
        sbl_buf_append(out, bson_get_data(&e), e.len);
        bson_destroy(&e);
        return 1;
    }
    sbl_buf_append_i32le(out, RF_AWAIT_CAPABLE);
    sbl_buf_append_i64le(out, id);
    sbl_buf_append_i32le(out, req->legacy_from);
    size_t count_at = out->len;
    sbl_buf_append_i32le(out, 0);
    bson_iter_recurse(&batch, &doc);
    while (bson_iter_next(&doc)) {
        uint32_t len;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&doc))
            continue;
        bson_iter_document(&doc, &len, &data);
        sbl_buf_append(out, data, len);
        n++;
    }
    sbl_buf_put_i32le(out, count_at, n);
    return n;
}

int32_t sbl_wire_batch_count(const bson_t *reply, int64_t *cursor_id)
{
    bson_iter_t batch, doc;
    int32_t n = 0;

    if (!cursor_parts(reply, &batch, cursor_id))
        return -1;
    bson_iter_recurse(&batch, &doc);
    while (bson_iter_next(&doc))
        n++;
    return n;
}
