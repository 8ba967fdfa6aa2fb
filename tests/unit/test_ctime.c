/*
 * test_ctime.c: src/auth's $clusterTime on replies (sbl_ctime_append, which
 * encodes the document itself): the bytes are those libbson's appenders
 * give for {clusterTime: Timestamp, signature: {hash: BinData(0, 20 bytes),
 * keyId: NumberLong}}, after other fields and before later ones, and
 * sbl_ctime_parse reads back the time, the hash and the keyId.
 */
#include "auth/auth.h"
#include "check.h"

#include <string.h>

/* $clusterTime as libbson's appenders build it. */
static void reference(bson_t *r, uint64_t ts, const uint8_t *hash, int64_t key_id)
{
    bson_t ct, sig;
    BSON_APPEND_DOCUMENT_BEGIN(r, "$clusterTime", &ct);
    bson_append_timestamp(&ct, "clusterTime", -1, (uint32_t)(ts >> 32), (uint32_t)ts);
    BSON_APPEND_DOCUMENT_BEGIN(&ct, "signature", &sig);
    bson_append_binary(&sig, "hash", 4, BSON_SUBTYPE_BINARY, hash, SBL_CTIME_KEY_LEN);
    BSON_APPEND_INT64(&sig, "keyId", key_id);
    bson_append_document_end(&ct, &sig);
    bson_append_document_end(r, &ct);
}

static void one(uint64_t ts, int64_t key_id, uint8_t fill)
{
    uint8_t hash[SBL_CTIME_KEY_LEN];
    for (int i = 0; i < SBL_CTIME_KEY_LEN; i++)
        hash[i] = (uint8_t)(fill + i * 37);
    bson_t a = BSON_INITIALIZER, b = BSON_INITIALIZER;
    BSON_APPEND_INT32(&a, "n", 1);
    BSON_APPEND_INT32(&b, "n", 1);
    sbl_ctime_append(&a, ts, hash, key_id);
    reference(&b, ts, hash, key_id);
    BSON_APPEND_UTF8(&a, "after", "x");
    BSON_APPEND_UTF8(&b, "after", "x");
    CHECK(a.len == b.len && memcmp(bson_get_data(&a), bson_get_data(&b), a.len) == 0);
    CHECK(bson_validate(&a, BSON_VALIDATE_NONE, NULL));

    bson_iter_t it;
    uint64_t got_ts = 0;
    const uint8_t *got_hash = NULL;
    int64_t got_id = 0;
    CHECK(bson_iter_init_find(&it, &a, "$clusterTime"));
    CHECK(sbl_ctime_parse(&it, &got_ts, &got_hash, &got_id));
    CHECK(got_ts == ts && got_id == key_id);
    CHECK(got_hash != NULL && memcmp(got_hash, hash, SBL_CTIME_KEY_LEN) == 0);
    bson_destroy(&a);
    bson_destroy(&b);
}

int main(void)
{
    one(((uint64_t)1796425169 << 32) | 58, 7412345678901234567LL, 0);
    one(1, 0, 0xff);           /* the smallest time, keyId 0 */
    one(UINT64_MAX, -1, 0x80); /* every byte of the time and keyId set */
    return CHECK_DONE("test_ctime");
}
