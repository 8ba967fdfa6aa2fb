/*
 * crud_valid.c: collection validators.  A collection's options may hold
 * `validator` (a filter: query operators, $expr, $jsonSchema),
 * `validationLevel` (strict | moderate | off) and `validationAction`
 * (error | warn); every insert and update of a document checks it here
 * before the write, unless the command passed bypassDocumentValidation.
 *
 * What must stay true: a write that fails validation with action "error"
 * changes nothing and reports 121 DocumentValidationFailure with errInfo
 * {failingDocumentId, details}; "moderate" lets updates of documents that
 * were already invalid through; "warn" only logs.  A validator whose $expr
 * raises an error fails the document the same way (mongod 7.0 catches the
 * error and reports it in errInfo), never with the expression's own code.
 */
#include "cmd/crud_int.h"
#include "cmd/timeseries.h"
#include "common/log.h"
#include "expr/expr.h"

#include <string.h>

int sbl_crud_check_validator(const bson_t *options, sbl_err_t *err)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, options, "validator")) {
        uint32_t len;
        const uint8_t *data;
        bson_t v;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it))
            return sbl_type_error(err, "create.validator", &it, "object");
        bson_iter_document(&it, &len, &data);
        bson_init_static(&v, data, len);
        SBL_RET(sbl_filter_refuse_where(&v, err));
        sbl_matcher_t *m = sbl_matcher_new(&v, err);
        if (m == NULL)
            return err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "invalid validator");
        sbl_matcher_free(m);
    }
    if (bson_iter_init_find(&it, options, "validationLevel")) {
        const char *l = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
        if (strcmp(l, "strict") != 0 && strcmp(l, "moderate") != 0 && strcmp(l, "off") != 0)
            return sbl_err_set(err, SBL_E_BadValue, "Enumeration value '%s' for field "
                                                    "'validationLevel' is not a valid value.",
                               l);
    }
    if (bson_iter_init_find(&it, options, "validationAction")) {
        const char *a = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
        if (strcmp(a, "error") != 0 && strcmp(a, "warn") != 0)
            return sbl_err_set(err, SBL_E_BadValue, "Enumeration value '%s' for field "
                                                    "'validationAction' is not a valid value.",
                               a);
    }
    return 0;
}

/* The first operator of the validator, for errInfo.details.operatorName. */
static const char *first_operator(const bson_t *v)
{
    bson_iter_t it;
    if (bson_count_keys(v) > 1)
        return "$and";
    if (bson_iter_init(&it, v) && bson_iter_next(&it) && bson_iter_key(&it)[0] == '$')
        return bson_iter_key(&it);
    return "$eq";
}

int sbl_crud_validate(sbl_coll_t *c, const bson_t *old_doc, const bson_t *new_doc, bool bypass,
                      bson_t *err_info, sbl_err_t *err)
{
    const bson_t *opts = sbl_coll_options(c);
    bson_iter_t it;
    bson_t v;
    const char *level = "strict", *action = "error";
    SBL_RET(sbl_ts_check_doc(opts, new_doc, err)); /* a time-series collection's timeField */
    if (bypass || opts == NULL || !bson_iter_init_find(&it, opts, "validator") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it))
        return 0;
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(&it, &len, &data);
    bson_init_static(&v, data, len);
    if (bson_empty(&v))
        return 0;
    if (bson_iter_init_find(&it, opts, "validationLevel") && BSON_ITER_HOLDS_UTF8(&it))
        level = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, opts, "validationAction") && BSON_ITER_HOLDS_UTF8(&it))
        action = bson_iter_utf8(&it, NULL);
    if (strcmp(level, "off") == 0)
        return 0;
    sbl_err_t e2 = {0};
    sbl_matcher_t *m = sbl_matcher_new(&v, &e2);
    if (m == NULL)
        return 0; /* refused at create time; a stored bad validator does not block writes */
    sbl_err_t failed = {0}; /* a validator $expr that fails counts as not matching */
    sbl_expr_take_match_error(NULL);
    bool ok = sbl_matcher_match(m, new_doc, NULL);
    sbl_expr_take_match_error(&failed);
    if (!ok && old_doc != NULL && strcmp(level, "moderate") == 0 &&
        !sbl_matcher_match(m, old_doc, NULL))
        ok = true;
    sbl_expr_take_match_error(NULL);
    sbl_matcher_free(m);
    if (ok)
        return 0;
    bson_iter_t idi;
    if (strcmp(action, "warn") == 0) {
        bson_t attr = BSON_INITIALIZER;
        bson_append_utf8(&attr, "namespace", -1, sbl_coll_ns(c), -1);
        sbl_log(SBL_LOG_WARNING, "STORAGE", 20294, "Document would fail validation", &attr);
        bson_destroy(&attr);
        return 0;
    }
    if (err_info != NULL) {
        bson_t info, details;
        bson_append_document_begin(err_info, "errInfo", -1, &info);
        if (bson_iter_init_find(&idi, new_doc, "_id"))
            sbl_append_iter(&info, "failingDocumentId", -1, &idi);
        bson_append_document_begin(&info, "details", -1, &details);
        bson_append_utf8(&details, "operatorName", -1, first_operator(&v), -1);
        bson_append_document(&details, "specifiedAs", -1, &v);
        if (failed.code != 0 && strcmp(first_operator(&v), "$expr") == 0) {
            bson_t cause; /* as mongod's: the error, serialized as a Status is */
            bson_append_utf8(&details, "reason", -1, "failed to evaluate aggregation expression",
                             -1);
            bson_append_document_begin(&details, "details", -1, &cause);
            bson_append_int32(&cause, "code", -1, failed.code);
            bson_append_utf8(&cause, "codeName", -1, sbl_err_name(failed.code), -1);
            bson_append_utf8(&cause, "errmsg", -1, failed.msg, -1);
            bson_append_document_end(&details, &cause);
        } else {
            bson_append_utf8(&details, "reason", -1, "expression did not match", -1);
        }
        bson_append_document_end(&info, &details);
        bson_append_document_end(err_info, &info);
    }
    return sbl_err_set(err, SBL_E_DocumentValidationFailure, "Document failed validation");
}
