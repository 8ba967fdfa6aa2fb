/*
 * op_args.c: the argument checks every operation makes, in MongoDB's words:
 * unknown top-level fields (40415), wrong types (TypeMismatch 14), numbers
 * of any numeric type, and the array keys "0", "1" ... of replies.
 */
#include "op/op.h"

#include <stdlib.h>
#include <string.h>

/* Fields any command may carry (sessions, transactions, API version, write/read concern). */
static const char *const generic_fields[] = {
    "lsid", "txnNumber", "autocommit", "startTransaction", "writeConcern", "readConcern",
    "apiVersion", "apiStrict", "apiDeprecationErrors", "comment", "maxTimeMS",
    "maxTimeMSOpOnly", "clientOperationKey", "mayBypassWriteBlocking", "shardVersion",
    "databaseVersion", "help", "readPreference", NULL};

/* Every command checks every argument: compare the first byte before
 * calling strcmp (most names differ there). */
static bool in_list(const char *k, const char *const *list)
{
    for (; *list != NULL; list++)
        if ((*list)[0] == k[0] && strcmp(k, *list) == 0)
            return true;
    return false;
}

/* readConcern's level must be one of mongod's; what "snapshot" asks is the
 * dispatcher's (src/cmd: snapshot_read.c, and txn.c inside a transaction). */
static int check_read_concern(const bson_iter_t *rc, const bson_t *cmd, sbl_err_t *err)
{
    static const char *const levels[] = {"local", "majority", "linearizable", "available",
                                         "snapshot", NULL};
    bson_iter_t it;
    if (!BSON_ITER_HOLDS_DOCUMENT(rc) || !bson_iter_recurse(rc, &it) ||
        !bson_iter_find(&it, "level"))
        return 0;
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_type_error(err, "readConcern.level", &it, "string");
    const char *level = bson_iter_utf8(&it, NULL);
    if (!in_list(level, levels))
        return sbl_err_set(err, SBL_E_BadValue,
                           "Enumeration value '%s' for field 'readConcern.level' is not a valid "
                           "value.", level);
    (void)cmd;
    return 0;
}

int sbl_check_fields(const bson_t *cmd, const char *req, const char *const *known,
                          sbl_err_t *err)
{
    return sbl_check_fields_visit(cmd, req, known, NULL, NULL, NULL, err);
}

/* A watched field seen by sbl_check_fields_visit: fn's first error is kept
 * (*later_rc and *later) and fn not called again. */
static void visit(const char *k, const bson_iter_t *it, sbl_field_fn fn, void *arg, int *later_rc,
                  sbl_err_t *later)
{
    if (*later_rc == 0)
        *later_rc = fn(arg, k, it, later);
}

int sbl_check_fields_visit(const bson_t *cmd, const char *req, const char *const *known,
                           const char *const *watch, sbl_field_fn fn, void *arg, sbl_err_t *err)
{
    bson_iter_t it;
    uint32_t off = 4, at;
    const char *k;
    bool bad, first = true;
    sbl_err_t later; /* fn's error, reported after the walk */
    int later_rc = 0;
    /* Keys alone (a request's command passed sbl_bson_check); libbson's walk
     * for a document that cannot be read that way. */
    while (sbl_doc_top_next(cmd, &off, &at, &k, &bad)) {
        if (first || k[0] == '$' || in_list(k, known) || in_list(k, generic_fields)) {
            first = false;
            if (k[0] == 'r' && strcmp(k, "readConcern") == 0 && sbl_doc_top_iter(cmd, at, k, &it))
                SBL_RET(check_read_concern(&it, cmd, err));
            if (watch != NULL && in_list(k, watch) && sbl_doc_top_iter(cmd, at, k, &it))
                visit(k, &it, fn, arg, &later_rc, &later);
            continue;
        }
        return sbl_err_set(err, SBL_E_UnknownField, "BSON field '%s.%s' is an unknown field.", req,
                           k);
    }
    if (!bad)
        goto done;
    if (!bson_iter_init(&it, cmd))
        return sbl_err_set(err, SBL_E_InvalidBSON, "invalid command document");
    first = true;
    later_rc = 0; /* the watched fields are seen again */
    while (bson_iter_next(&it)) {
        k = bson_iter_key(&it);
        if (first || k[0] == '$' || in_list(k, known) || in_list(k, generic_fields)) {
            first = false;
            if (k[0] == 'r' && strcmp(k, "readConcern") == 0)
                SBL_RET(check_read_concern(&it, cmd, err));
            if (watch != NULL && in_list(k, watch))
                visit(k, &it, fn, arg, &later_rc, &later);
            continue;
        }
        return sbl_err_set(err, SBL_E_UnknownField, "BSON field '%s.%s' is an unknown field.", req,
                           k);
    }
done:
    if (later_rc != 0)
        *err = later;
    return later_rc;
}

int sbl_type_error(sbl_err_t *err, const char *field, const bson_iter_t *it,
                        const char *expected)
{
    return sbl_err_set(err, SBL_E_TypeMismatch,
                       "BSON field '%s' is the wrong type '%s', expected type '%s'", field,
                       sbl_type_name(bson_iter_type(it)), expected);
}

const char *sbl_array_key(uint32_t i, char buf[16])
{
    const char *k;
    bson_uint32_to_string(i, &k, buf, 16);
    return k;
}
int sbl_get_int64(const bson_iter_t *it, int64_t *out, sbl_err_t *err)
{
    switch (bson_iter_type(it)) {
    case BSON_TYPE_INT32:
        *out = bson_iter_int32(it);
        return 0;
    case BSON_TYPE_INT64:
        *out = bson_iter_int64(it);
        return 0;
    case BSON_TYPE_DOUBLE: {
        double d = bson_iter_double(it);
        if (d != d || d > 9.2e18 || d < -9.2e18)
            return sbl_err_set(err, SBL_E_BadValue, "'%s' must be a finite number",
                               bson_iter_key(it));
        *out = (int64_t)d;
        return 0;
    }
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_t dec;
        char s[BSON_DECIMAL128_STRING];
        bson_iter_decimal128(it, &dec);
        bson_decimal128_to_string(&dec, s);
        *out = (int64_t)strtod(s, NULL);
        return 0;
    }
    default:
        return sbl_err_set(err, SBL_E_TypeMismatch, "'%s' must be a number", bson_iter_key(it));
    }
}

