/*
 * test_ts_bound.c: src/exec/ts_bound.c, the oplog read's {ts: {$gte|$gt: T}}.
 * What a secondary's fetcher relies on: where the bound tells a document
 * from its encoded key, it tells what the matcher would (bracketing included),
 * and it tells nothing for any other filter or a key of another type.
 */
#include "check.h"

#include <string.h>

#include "doc/doc.h"
#include "exec/ts_bound.h"
#include "query/query.h"

static bson_t *filter_of(const char *op, uint32_t t, uint32_t i)
{
    bson_t *f = bson_new(), ts;
    BSON_APPEND_DOCUMENT_BEGIN(f, "ts", &ts);
    bson_append_timestamp(&ts, op, -1, t, i);
    bson_append_document_end(f, &ts);
    return f;
}

/* Every document {ts: v} for the values below against filter f: where the
 * bound decides from v's key, it agrees with the matcher. Returns how many
 * it decided. */
static int agree(const bson_t *f)
{
    sbl_ts_bound_t b;
    sbl_err_t err = {0};
    sbl_matcher_t *m = sbl_matcher_new(f, &err);
    int decided = 0;
    sbl_ts_bound_parse(f, &b);
    CHECK(m != NULL && b.key_len > 0);
    for (int k = 0; k < 12; k++) {
        bson_t doc = BSON_INITIALIZER, arr;
        uint32_t ts[] = {99, 100, 101};
        uint32_t inc[] = {0, 6, 7, 8, UINT32_MAX};
        if (k < 9)
            bson_append_timestamp(&doc, "ts", 2, ts[k / 3], inc[k % 3 + (k / 3 == 1)]);
        else if (k == 9)
            bson_append_date_time(&doc, "ts", 2, (int64_t)1 << 50);
        else if (k == 10)
            BSON_APPEND_UTF8(&doc, "ts", "zzz");
        else {
            BSON_APPEND_ARRAY_BEGIN(&doc, "ts", &arr);
            bson_append_timestamp(&arr, "0", 1, 100, 7);
            bson_append_timestamp(&arr, "1", 1, 200, 0);
            bson_append_array_end(&doc, &arr);
        }
        bson_iter_t it;
        bson_iter_init_find(&it, &doc, "ts");
        sbl_buf_t key;
        sbl_buf_init(&key);
        sbl_key_append(&key, bson_iter_value(&it), false);
        bool match = false;
        if (sbl_ts_bound_decides(&b, key.data, key.len, &match)) {
            decided++;
            CHECK_MSG(match == sbl_matcher_match(m, &doc, NULL), "value %d", k);
            CHECK(k < 9); /* only timestamps are decided */
        }
        sbl_buf_destroy(&key);
        bson_destroy(&doc);
    }
    sbl_matcher_free(m);
    return decided;
}

int main(void)
{
    bson_t *gte = filter_of("$gte", 100, 7), *gt = filter_of("$gt", 100, 7);
    CHECK(agree(gte) == 9);
    CHECK(agree(gt) == 9);

    /* the start of the oplog's scan, with or without the key test */
    sbl_ts_bound_t b;
    sbl_ts_bound_parse(gte, &b);
    CHECK(b.from == ((uint64_t)100 << 32 | 7) && b.inclusive);
    sbl_ts_bound_parse(gt, &b);
    CHECK(b.from == ((uint64_t)100 << 32 | 7) && !b.inclusive && b.key_len == 9);

    /* anything more in the filter: the matcher decides */
    bson_t *two = filter_of("$gte", 100, 7), *more = filter_of("$gte", 100, 7), ts;
    BSON_APPEND_UTF8(two, "ns", "t.c");
    sbl_ts_bound_parse(two, &b);
    CHECK(b.from != 0 && b.key_len == 0);
    bson_reinit(more);
    BSON_APPEND_DOCUMENT_BEGIN(more, "ts", &ts);
    bson_append_timestamp(&ts, "$gte", -1, 100, 7);
    bson_append_timestamp(&ts, "$lt", -1, 200, 0);
    bson_append_document_end(more, &ts);
    sbl_ts_bound_parse(more, &b);
    CHECK(b.from != 0 && b.key_len == 0);
    bool match = true;
    uint8_t k[9] = {0};
    CHECK(!sbl_ts_bound_decides(&b, k, sizeof(k), &match));
    bson_t *lt = filter_of("$lt", 100, 7);
    sbl_ts_bound_parse(lt, &b);
    CHECK(b.from == 0 && b.key_len == 0);

    bson_destroy(gte);
    bson_destroy(gt);
    bson_destroy(two);
    bson_destroy(more);
    bson_destroy(lt);
    return CHECK_DONE("test_ts_bound");
}
