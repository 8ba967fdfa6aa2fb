/*
 * fuzz_wire: the wire message parser.  Any byte string given to
 * sbl_wire_parse() either parses into a request whose command is valid BSON
 * or is rejected with an error code; a parsed request can be answered
 * (sbl_wire_build_reply) without reading outside the input.
 */
#include "fuzz_common.h"
#include "wire/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sbl_request_t req;
    sbl_err_t err = {0};
    int32_t len = 0;

    if (sbl_wire_message_length(data, size, &len) == 0 && len > 0)
        FUZZ_ASSERT(len >= 16 && len <= SBL_MAX_MESSAGE_SIZE);
    memset(&req, 0, sizeof(req));
    if (sbl_wire_parse(data, size, &req, &err) != 0) {
        FUZZ_ASSERT(err.code != 0);
        return 0;
    }
    FUZZ_ASSERT(bson_validate(&req.cmd, BSON_VALIDATE_NONE, NULL));
    FUZZ_ASSERT(memchr(req.db, '\0', sizeof(req.db)) != NULL);
    sbl_buf_t out;
    sbl_buf_init(&out);
    bson_t reply = BSON_INITIALIZER;
    BSON_APPEND_INT32(&reply, "ok", 1);
    sbl_wire_build_reply(&req, 1, &reply, &out);
    FUZZ_ASSERT(out.len >= 16);
    bson_destroy(&reply);
    sbl_buf_destroy(&out);
    sbl_request_destroy(&req);
    return 0;
}
