/*
 * util.c: small helpers shared by the command handlers: clocks, namespace
 * validation (MongoDB's rules, InvalidNamespace 73), numeric arguments and
 * the maxTimeMS deadline check.
 */
#include "cmd/cmd_int.h"
#include "cmd/views.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t sbl_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t sbl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sbl_validate_db_name(const char *db, sbl_err_t *err)
{
    size_t n = strlen(db);
    if (n == 0)
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid empty database name");
    if (n >= 64)
        return sbl_err_set(err, SBL_E_InvalidNamespace, "db name is too long: %s", db);
    /* The characters a database name may not hold, as one bitmap (every
     * command validates its namespace: no strchr per character). */
    static const uint8_t bad[256] = {['/'] = 1, ['\\'] = 1, ['.'] = 1, [' '] = 1, ['"'] = 1,
                                     ['$'] = 1, ['*'] = 1, ['<'] = 1, ['>'] = 1, [':'] = 1,
                                     ['|'] = 1, ['?'] = 1};
    for (const unsigned char *p = (const unsigned char *)db; *p; p++) {
        if (bad[*p])
            return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid database name: '%s'", db);
    }
    return 0;
}

/* The checks on a namespace's collection part coll (a non-empty suffix of
 * ns after its first '.'), once the database part is known to be valid. */
static int check_coll_in_ns(const char *ns, const char *coll, sbl_err_t *err)
{
    if (strlen(ns) > 255)
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Fully qualified namespace is too long: %s",
                           ns);
    if (strchr(coll, '$') != NULL && strcmp(coll, "$cmd") != 0)
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid collection name: %s", coll);
    if (coll[0] == '.')
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Collection names cannot start with '.': %s",
                           coll);
    return 0;
}

int sbl_validate_ns(const char *ns, sbl_err_t *err)
{
    const char *dot = strchr(ns, '.');
    if (dot == NULL || dot == ns)
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid namespace specified '%s'", ns);
    char db[128];
    size_t dlen = (size_t)(dot - ns);
    if (dlen >= sizeof(db))
        return sbl_err_set(err, SBL_E_InvalidNamespace, "db name is too long: %.*s", (int)dlen,
                           ns);
    memcpy(db, ns, dlen);
    db[dlen] = '\0';
    SBL_RET(sbl_validate_db_name(db, err));
    const char *coll = dot + 1;
    if (*coll == '\0')
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid namespace specified '%s'", ns);
    return check_coll_in_ns(ns, coll, err);
}

int sbl_validate_user_write_ns(const char *ns, sbl_err_t *err)
{
    static const char *const allowed[] = {"system.js", "system.views", "system.profile",
                                          "system.users", "system.roles", "system.version"};
    const char *coll = strchr(ns, '.');
    if (sbl_views_any() && sbl_view_is(sbl_session_get(), ns))
        return sbl_err_set(err, SBL_E_CommandNotSupportedOnView,
                           "Namespace %s is a view, not a collection", ns);
    if (coll == NULL || strncmp(coll + 1, "system.", 7) != 0)
        return 0;
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        if (strcmp(coll + 1, allowed[i]) == 0)
            return 0;
    return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid system namespace: %s", ns);
}

int sbl_cmd_ns(const sbl_cmd_ctx_t *ctx, char *ns, size_t nslen, sbl_err_t *err)
{
    bson_iter_t it;
    SBL_RET(sbl_validate_db_name(ctx->db, err));
    if (!bson_iter_init(&it, ctx->cmd) || !bson_iter_next(&it))
        return sbl_err_set(err, SBL_E_BadValue, "empty command");
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_InvalidNamespace,
                           "collection name has invalid type %s",
                           BSON_ITER_HOLDS_INT(&it) || BSON_ITER_HOLDS_DOUBLE(&it) ? "double"
                                                                                  : "object");
    const char *coll = bson_iter_utf8(&it, NULL);
    if (coll[0] == '\0')
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid namespace specified '%s.'",
                           ctx->db);
    if (sbl_join_dot(ns, nslen, ctx->db, coll) >= nslen)
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Fully qualified namespace is too long");
    /* The database name is checked above and holds no '.': coll follows
     * ns's first '.', as sbl_validate_ns would find it. */
    return check_coll_in_ns(ns, coll, err);
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

int sbl_cmd_check_deadline(const sbl_cmd_ctx_t *ctx, sbl_err_t *err)
{
    if (ctx->deadline_us != 0 && sbl_now_us() > ctx->deadline_us)
        return sbl_err_set(err, SBL_E_MaxTimeMSExpired, "operation exceeded time limit");
    return 0;
}
