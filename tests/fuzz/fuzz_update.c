/*
 * fuzz_update: the update parser and applier.  Input: an update
 * specification, then an optional arrayFilters document (its values are the
 * filters), then documents to update.  A spec either parses or fails with an
 * error code; applying it to a document with an _id either fails with an
 * error code or gives a valid document whose first field is the same _id.
 */
#include "fuzz_common.h"
#include "update/update.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data;
    size_t n = size;
    bson_t spec, filters_doc, doc;
    sbl_err_t err = {0};

    if (!fuzz_next_doc(&p, &n, &spec))
        return 0;
    bson_t filters = BSON_INITIALIZER;
    bool have_filters = false;
    if (fuzz_next_doc(&p, &n, &filters_doc) && !bson_empty(&filters_doc)) {
        /* The document's values become the arrayFilters array. */
        bson_iter_t it;
        uint32_t i = 0;
        bson_iter_init(&it, &filters_doc);
        while (bson_iter_next(&it)) {
            char key[16];
            const char *k;
            bson_uint32_to_string(i++, &k, key, sizeof(key));
            bson_append_iter(&filters, k, -1, &it);
        }
        have_filters = true;
    }
    sbl_update_t *u = sbl_update_new(&spec, have_filters ? &filters : NULL, &err);
    if (u == NULL) {
        FUZZ_ASSERT(err.code != 0);
        bson_destroy(&filters);
        return 0;
    }
    (void)sbl_update_is_replacement(u);
    for (int i = 0; i < 4 && fuzz_next_doc(&p, &n, &doc); i++) {
        bson_iter_t it;
        if (!bson_iter_init(&it, &doc) || !bson_iter_next(&it) || strcmp(bson_iter_key(&it), "_id"))
            continue; /* stored documents always have _id first */
        bson_value_t id;
        sbl_iter_value(&it, &id);
        if (id.value_type == BSON_TYPE_REGEX || id.value_type == BSON_TYPE_ARRAY ||
            id.value_type == BSON_TYPE_UNDEFINED)
            continue; /* inserts refuse these _id types (InvalidIdField), so none is stored */
        for (int ins = 0; ins < 2; ins++) {
            bson_t out;
            bool changed = false;
            bson_init(&out);
            sbl_err_clear(&err);
            if (sbl_update_apply(u, &doc, -1, ins == 1, 1700000000000, &out, &changed, &err) == 0) {
                bson_iter_t o;
                /* Framing only: field names are not checked for UTF-8 here, because
                 * $rename to a non-UTF-8 name is accepted (reported in docs/reliability.md). */
                FUZZ_ASSERT(sbl_doc_framing_ok(&out));
                FUZZ_ASSERT(bson_iter_init(&o, &out) && bson_iter_next(&o));
                FUZZ_ASSERT(strcmp(bson_iter_key(&o), "_id") == 0);
                bson_value_t nid;
                sbl_iter_value(&o, &nid);
                FUZZ_ASSERT(sbl_value_equal(&id, &nid));
                if (!changed)
                    FUZZ_ASSERT(sbl_doc_compare(&out, &doc) == 0);
            } else {
                FUZZ_ASSERT(err.code != 0);
            }
            bson_destroy(&out);
        }
    }
    bson_t seed;
    bson_init(&seed);
    (void)sbl_upsert_seed(&spec, &seed, &err);
    bson_destroy(&seed);
    sbl_update_free(u);
    bson_destroy(&filters);
    return 0;
}
