/*
 * fuzz_match: the query parser and matcher.  Input: a filter document
 * followed by documents to match.  A filter either parses or fails with an
 * error code; a parsed filter answers for every document without crashing,
 * and answers the same when asked twice.
 */
#include "fuzz_common.h"
#include "query/query.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data;
    size_t n = size;
    bson_t filter, doc;
    sbl_err_t err = {0};

    if (!fuzz_next_doc(&p, &n, &filter))
        return 0;
    sbl_matcher_t *m = sbl_matcher_new(&filter, &err);
    if (m == NULL) {
        FUZZ_ASSERT(err.code != 0);
        return 0;
    }
    (void)sbl_matcher_is_empty(m);
    for (int i = 0; i < 8 && fuzz_next_doc(&p, &n, &doc); i++) {
        int32_t pos1 = -1, pos2 = -1;
        bool a = sbl_matcher_match(m, &doc, &pos1);
        bool b = sbl_matcher_match(m, &doc, &pos2);
        FUZZ_ASSERT(a == b && pos1 == pos2);
    }
    sbl_id_range_t r;
    sbl_id_range_from_filter(&filter, &r);
    sbl_id_range_destroy(&r);
    sbl_matcher_free(m);
    return 0;
}
