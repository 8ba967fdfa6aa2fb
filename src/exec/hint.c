/*
 * hint.c: what a query's `hint` names (an index name, a key pattern,
 * {$natural: ±1}) and the test for a filter that pins _id to one value
 * (find's IDHACK path, which needs no plan).
 */
#include "exec/exec.h"

#include <string.h>

bool sbl_exec_filter_id_point(const bson_t *filter, bson_value_t *idp)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, filter) || !bson_iter_next(&it) || strcmp(bson_iter_key(&it), "_id") != 0)
        return false;
    switch (bson_iter_type(&it)) {
    case BSON_TYPE_UTF8:
    case BSON_TYPE_OID:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DATE_TIME:
        break;
    default:
        return false;
    }
    sbl_iter_value(&it, idp);
    return !bson_iter_next(&it);
}

int sbl_exec_get_hint(const bson_iter_t *it, bson_value_t *out, bool *hasp, sbl_err_t *err)
{
    if (!BSON_ITER_HOLDS_UTF8(it) && !BSON_ITER_HOLDS_DOCUMENT(it))
        return sbl_type_error(err, "hint", it, "string or object");
    sbl_iter_value(it, out);
    *hasp = true;
    return 0;
}

int sbl_exec_check_hint(const bson_iter_t *it, sbl_err_t *err)
{
    if (BSON_ITER_HOLDS_UTF8(it)) {
        const char *name = bson_iter_utf8(it, NULL);
        if (strcmp(name, "_id_") == 0)
            return 0;
    } else if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_t spec;
        uint32_t len;
        const uint8_t *data;
        bson_iter_t f;
        bson_iter_document(it, &len, &data);
        if (!bson_init_static(&spec, data, len))
            return sbl_err_set(err, SBL_E_InvalidBSON, "invalid hint");
        if (bson_empty(&spec))
            return 0;
        if (bson_count_keys(&spec) == 1 && bson_iter_init(&f, &spec) && bson_iter_next(&f)) {
            const char *k = bson_iter_key(&f);
            if (strcmp(k, "$natural") == 0)
                return 0;
            if (strcmp(k, "_id") == 0 && (BSON_ITER_HOLDS_NUMBER(&f)))
                return 0;
        }
    } else {
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "hint must be a string or an object");
    }
    return sbl_err_set(err, SBL_E_BadValue,
                       "error processing query: planner returned error :: caused by :: hint "
                       "provided does not correspond to an existing index");
}

