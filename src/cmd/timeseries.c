/*
 * timeseries.c: time-series and clustered collections (see timeseries.h).
 * create's `timeseries`, `clusteredIndex` and `expireAfterSeconds` are parsed
 * here in the order MongoDB 7.0 checks them (the IDL parse of the command,
 * then the create command's rules, then createCollection's), and stored in
 * the catalog already normalised, so that listCollections shows them as
 * given and they survive a restart without any other state.
 *
 * What must stay true: Sable keeps measurements as ordinary documents of an
 * ordinary table clustered on _id; nothing here buckets them.  The TTL
 * monitor (src/storage) removes measurements whose timeField is older than
 * the collection's expireAfterSeconds.
 */
#include "cmd/timeseries.h"
#include "cmd/crud_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define TS_MAX_SPAN_LIMIT 31536000 /* one year: the largest bucketMaxSpanSeconds */

typedef struct ts_spec {
    const char *time_field;
    const char *meta_field;  /* NULL: none */
    const char *granularity; /* NULL: not given */
    int64_t max_span;        /* 0: not given */
    int64_t rounding;        /* 0: not given */
} ts_spec_t;

typedef struct clustered_spec {
    int64_t v; /* 2 unless given */
    bool has_key, has_unique, unique, key_is_id;
    const char *name; /* NULL: "_id_" */
    bson_iter_t spec; /* the whole given value, for messages */
} clustered_spec_t;

bool sbl_ts_is_create_field(const char *key)
{
    return strcmp(key, "timeseries") == 0 || strcmp(key, "clusteredIndex") == 0 ||
           strcmp(key, "expireAfterSeconds") == 0;
}

bool sbl_ts_is_timeseries(const bson_t *options)
{
    bson_iter_t it;
    return options != NULL && bson_iter_init_find(&it, options, "timeseries") &&
           BSON_ITER_HOLDS_DOCUMENT(&it);
}

/* IDL's safeInt / safeInt64: any whole number. */
static int get_safe_int(const bson_iter_t *it, const char *path, int64_t *out, sbl_err_t *err)
{
    switch (bson_iter_type(it)) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
        *out = bson_iter_as_int64(it);
        return 0;
    case BSON_TYPE_DOUBLE: {
        double d = bson_iter_double(it);
        if (d != d || d < -9.2e18 || d > 9.2e18 || (double)(int64_t)d != d)
            return sbl_err_set(err, SBL_E_BadValue, "Expected an integer: %s: %g", path, d);
        *out = (int64_t)d;
        return 0;
    }
    default:
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field '%s' is the wrong type '%s', expected types '[long, int, "
                           "decimal, double]'",
                           path, sbl_type_name(bson_iter_type(it)));
    }
}

static int check_range(const char *path, int64_t v, sbl_err_t *err)
{
    if (v < 1)
        return sbl_err_set(err, 51024, "BSON field '%s' value must be >= 1, actual value '%lld'",
                           path, (long long)v);
    if (v > TS_MAX_SPAN_LIMIT)
        return sbl_err_set(err, 51024,
                           "BSON field '%s' value must be <= %d, actual value '%lld'", path,
                           TS_MAX_SPAN_LIMIT, (long long)v);
    return 0;
}

/* The IDL parse of `timeseries` (a strict struct). */
static int parse_timeseries(const bson_iter_t *ts, ts_spec_t *o, sbl_err_t *err)
{
    bson_iter_t it;
    char path[96];

    memset(o, 0, sizeof(*o));
    if (!BSON_ITER_HOLDS_DOCUMENT(ts))
        return sbl_type_error(err, "create.timeseries", ts, "object");
    bson_iter_recurse(ts, &it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        snprintf(path, sizeof(path), "create.timeseries.%s", k);
        if (strcmp(k, "timeField") == 0 || strcmp(k, "metaField") == 0 ||
            strcmp(k, "granularity") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_type_error(err, path, &it, "string");
            const char *s = bson_iter_utf8(&it, NULL);
            if (k[0] == 't')
                o->time_field = s;
            else if (k[0] == 'm')
                o->meta_field = s;
            else if (strcmp(s, "seconds") == 0 || strcmp(s, "minutes") == 0 ||
                     strcmp(s, "hours") == 0)
                o->granularity = s;
            else
                return sbl_err_set(err, SBL_E_BadValue,
                                   "Enumeration value '%s' for field '%s' is not a valid value.",
                                   s, path);
        } else if (strcmp(k, "bucketMaxSpanSeconds") == 0 ||
                   strcmp(k, "bucketRoundingSeconds") == 0) {
            int64_t v;
            SBL_RET(get_safe_int(&it, path, &v, err));
            SBL_RET(check_range(path, v, err));
            *(k[6] == 'M' ? &o->max_span : &o->rounding) = v;
        } else {
            return sbl_err_set(err, SBL_E_UnknownField, "BSON field '%s' is an unknown field.",
                               path);
        }
    }
    if (o->time_field == NULL)
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field 'create.timeseries.timeField' is missing but a required "
                           "field");
    return 0;
}

/* The IDL parse of `clusteredIndex` (bool, or a strict ClusteredIndexSpec). */
static int parse_clustered(const bson_iter_t *ci, clustered_spec_t *o, sbl_err_t *err)
{
    bson_iter_t it;
    char path[96];

    memset(o, 0, sizeof(*o));
    o->v = 2;
    o->spec = *ci;
    if (BSON_ITER_HOLDS_BOOL(ci))
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "The 'clusteredIndex' legacy format {clusteredIndex: <bool>} is only "
                           "supported for specific internal collections.");
    if (!BSON_ITER_HOLDS_DOCUMENT(ci))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field 'create.clusteredIndex' is the wrong type '%s', expected "
                           "types '[bool, object]'",
                           sbl_type_name(bson_iter_type(ci)));
    bson_iter_recurse(ci, &it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        snprintf(path, sizeof(path), "create.clusteredIndex.%s", k);
        if (strcmp(k, "v") == 0) {
            SBL_RET(get_safe_int(&it, path, &o->v, err));
        } else if (strcmp(k, "key") == 0) {
            bson_iter_t kk;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, path, &it, "object");
            o->has_key = true;
            bson_iter_recurse(&it, &kk);
            o->key_is_id = bson_iter_next(&kk) && strcmp(bson_iter_key(&kk), "_id") == 0 &&
                           BSON_ITER_HOLDS_NUMBER(&kk) && bson_iter_as_double(&kk) == 1.0 &&
                           !bson_iter_next(&kk);
        } else if (strcmp(k, "name") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_type_error(err, path, &it, "string");
            o->name = bson_iter_utf8(&it, NULL);
        } else if (strcmp(k, "unique") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it))
                return sbl_type_error(err, path, &it, "bool");
            o->has_unique = true;
            o->unique = bson_iter_bool(&it);
        } else {
            return sbl_err_set(err, SBL_E_UnknownField, "BSON field '%s' is an unknown field.",
                               path);
        }
    }
    if (!o->has_key)
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field 'create.clusteredIndex.key' is missing but a required "
                           "field");
    if (!o->has_unique)
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field 'create.clusteredIndex.unique' is missing but a required "
                           "field");
    return 0;
}

/* Fields a time-series create may carry besides its own (MongoDB's allowed
 * creation options plus the generic command arguments). */
static bool allowed_with_timeseries(const char *k, const bson_iter_t *it)
{
    static const char *const ok[] = {
        "storageEngine", "indexOptionDefaults", "collation", "timeseries", "expireAfterSeconds",
        "temp", "writeConcern", "lsid", "txnNumber", "comment", "maxTimeMS", "readConcern",
        "apiVersion", "apiStrict", "apiDeprecationErrors", "autocommit", "startTransaction"};
    if (k[0] == '$')
        return true;
    if (strcmp(k, "capped") == 0)
        return !bson_iter_as_bool(it); /* capped: false is the default */
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (strcmp(k, ok[i]) == 0)
            return true;
    return false;
}

/* The create command's own rules for a time-series collection. */
static int check_timeseries_rules(const bson_t *cmd, const char *ns, const ts_spec_t *o,
                                  sbl_err_t *err)
{
    bson_iter_t it;
    bson_iter_init(&it, cmd);
    bson_iter_next(&it); /* create: <name> */
    while (bson_iter_next(&it))
        if (!allowed_with_timeseries(bson_iter_key(&it), &it))
            return sbl_err_set(err, SBL_E_InvalidOptions, "%s: 'timeseries' is not allowed with "
                               "'%s'", ns, bson_iter_key(&it));
    if (strchr(o->time_field, '.') != NULL)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "%s: 'timeField' must be a top-level field and not contain a '.'", ns);
    if (o->meta_field != NULL) {
        if (strcmp(o->meta_field, "_id") == 0)
            return sbl_err_set(err, SBL_E_InvalidOptions, "'metaField' cannot be \"_id\"");
        if (strcmp(o->meta_field, o->time_field) == 0)
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "'metaField' cannot be the same as 'timeField'");
        if (strchr(o->meta_field, '.') != NULL)
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "%s: 'metaField' must be a top-level field and not contain a '.'",
                               ns);
    }
    return 0;
}

static int64_t span_of_granularity(const char *g)
{
    if (g != NULL && strcmp(g, "minutes") == 0)
        return 60 * 60 * 24;
    if (g != NULL && strcmp(g, "hours") == 0)
        return 60 * 60 * 24 * 30;
    return 60 * 60;
}

/* createCollection's bucketing rules; fills in the defaults (granularity
 * "seconds", bucketMaxSpanSeconds from the granularity). */
static int check_bucketing(ts_spec_t *o, sbl_err_t *err)
{
    int64_t from_granularity = span_of_granularity(o->granularity);
    if (o->granularity != NULL) {
        if (o->max_span != 0 && o->max_span != from_granularity)
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "Time-series 'bucketMaxSpanSeconds' cannot be set to a value "
                               "other than the default of %lld for the provided granularity",
                               (long long)from_granularity);
        if (o->rounding != 0)
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "Time-series 'bucketRoundingSeconds' cannot be set alongside the "
                               "granularity parameter");
        o->max_span = from_granularity;
    } else if (o->max_span != 0 || o->rounding != 0) {
        if (o->max_span != o->rounding)
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "Time-series 'bucketRoundingSeconds' must be equal to "
                               "'bucketMaxSpanSeconds'");
    } else {
        o->granularity = "seconds";
        o->max_span = from_granularity;
    }
    return 0;
}

/* validateExpireAfterSeconds for a clustered (or time-series) collection. */
static int check_expire(int64_t secs, sbl_err_t *err)
{
    if (secs < 0)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "TTL index 'expireAfterSeconds' option cannot be less than 0");
    if (secs > (int64_t)time(NULL))
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "TTL index 'expireAfterSeconds' option must be within an acceptable "
                           "range, try a lower number");
    return 0;
}

static int check_clustered(const clustered_spec_t *o, sbl_err_t *err)
{
    if (!o->unique)
        return sbl_err_set(err, 5979700,
                           "The clusteredIndex option requires unique: true to be specified");
    if (!o->key_is_id)
        return sbl_err_set(err, SBL_E_InvalidIndexSpecificationOption,
                           "The clusteredIndex option is only supported for key: {_id: 1}");
    if (o->v != 2) {
        bson_t spec;
        uint32_t len;
        const uint8_t *data;
        bson_iter_document(&o->spec, &len, &data);
        bson_init_static(&spec, data, len);
        char *json = bson_as_relaxed_extended_json(&spec, NULL);
        int rc = sbl_err_set(err, 5979704, "Invalid clusteredIndex specification %s; cannot "
                             "create a clusteredIndex with v=%lld", json ? json : "{}",
                             (long long)o->v);
        bson_free(json);
        return rc;
    }
    return 0;
}

int sbl_ts_create_options(const bson_t *cmd, const char *ns, bson_t *opts, sbl_err_t *err)
{
    bson_iter_t it;
    ts_spec_t ts;
    clustered_spec_t ci;
    bool has_ts = false, has_ci = false, has_expire = false;
    int64_t expire = 0;

    /* The command's parse, in field order. */
    bson_iter_init(&it, cmd);
    bson_iter_next(&it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "timeseries") == 0) {
            SBL_RET(parse_timeseries(&it, &ts, err));
            has_ts = true;
        } else if (strcmp(k, "clusteredIndex") == 0) {
            SBL_RET(parse_clustered(&it, &ci, err));
            has_ci = true;
        } else if (strcmp(k, "expireAfterSeconds") == 0) {
            SBL_RET(get_safe_int(&it, "create.expireAfterSeconds", &expire, err));
            has_expire = true;
        }
    }
    if (!has_ts && !has_ci && !has_expire)
        return 0;
    /* The create command's rules. */
    if (has_ci) {
        if (bson_iter_init_find(&it, cmd, "size"))
            return sbl_err_set(err, 6049200, "'size' field for capped collections is not "
                               "allowed on clustered collections. Did you mean 'capped: true' "
                               "with 'expireAfterSeconds'?");
        if (bson_iter_init_find(&it, cmd, "max"))
            return sbl_err_set(err, 6049204, "'max' field for capped collections is not "
                               "allowed on clustered collections. Did you mean 'capped: true' "
                               "with 'expireAfterSeconds'?");
    }
    if (has_ts)
        SBL_RET(check_timeseries_rules(cmd, ns, &ts, err));
    if (has_expire && !has_ts && !has_ci)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "'expireAfterSeconds' is only supported on time-series collections or "
                           "when the 'clusteredIndex' option is specified");
    /* createCollection's. */
    if (has_ci)
        SBL_RET(check_clustered(&ci, err));
    if (has_expire)
        SBL_RET(check_expire(expire, err));
    if (has_ts)
        SBL_RET(check_bucketing(&ts, err));

    if (has_ts) {
        bson_t sub;
        BSON_APPEND_DOCUMENT_BEGIN(opts, "timeseries", &sub);
        BSON_APPEND_UTF8(&sub, "timeField", ts.time_field);
        if (ts.meta_field != NULL)
            BSON_APPEND_UTF8(&sub, "metaField", ts.meta_field);
        if (ts.granularity != NULL)
            BSON_APPEND_UTF8(&sub, "granularity", ts.granularity);
        if (ts.rounding != 0)
            BSON_APPEND_INT32(&sub, "bucketRoundingSeconds", (int32_t)ts.rounding);
        BSON_APPEND_INT32(&sub, "bucketMaxSpanSeconds", (int32_t)ts.max_span);
        bson_append_document_end(opts, &sub);
    }
    if (has_ci) {
        bson_t sub, key;
        BSON_APPEND_DOCUMENT_BEGIN(opts, "clusteredIndex", &sub);
        BSON_APPEND_INT32(&sub, "v", 2);
        BSON_APPEND_DOCUMENT_BEGIN(&sub, "key", &key);
        BSON_APPEND_INT32(&key, "_id", 1);
        bson_append_document_end(&sub, &key);
        BSON_APPEND_UTF8(&sub, "name", ci.name != NULL ? ci.name : "_id_");
        BSON_APPEND_BOOL(&sub, "unique", true);
        bson_append_document_end(opts, &sub);
    }
    if (has_expire)
        BSON_APPEND_INT64(opts, "expireAfterSeconds", expire);
    return 0;
}

int sbl_ts_after_create(sbl_session_t *ss, const char *ns, const bson_t *opts, sbl_err_t *err)
{
    bson_iter_t it, f;
    const char *time_field = NULL, *meta_field = NULL;
    sbl_coll_t *c = NULL;

    if (!bson_iter_init_find(&it, opts, "timeseries") || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return 0;
    bson_iter_recurse(&it, &f);
    while (bson_iter_next(&f)) {
        if (strcmp(bson_iter_key(&f), "timeField") == 0)
            time_field = bson_iter_utf8(&f, NULL);
        else if (strcmp(bson_iter_key(&f), "metaField") == 0)
            meta_field = bson_iter_utf8(&f, NULL);
    }
    if (time_field == NULL || meta_field == NULL)
        return 0;
    SBL_RET(sbl_coll_open(ss, ns, false, &c, NULL, err));
    bson_t spec = BSON_INITIALIZER, key;
    char *name = bson_strdup_printf("%s_1_%s_1", meta_field, time_field);
    BSON_APPEND_INT32(&spec, "v", 2);
    BSON_APPEND_DOCUMENT_BEGIN(&spec, "key", &key);
    BSON_APPEND_INT32(&key, meta_field, 1);
    BSON_APPEND_INT32(&key, time_field, 1);
    bson_append_document_end(&spec, &key);
    BSON_APPEND_UTF8(&spec, "name", name);
    int rc = sbl_index_create(ss, c, &spec, err);
    bson_free(name);
    bson_destroy(&spec);
    sbl_coll_release(c);
    return rc;
}

int sbl_ts_check_doc(const bson_t *options, const bson_t *doc, sbl_err_t *err)
{
    bson_iter_t it, f;
    if (options == NULL || !bson_iter_init_find(&it, options, "timeseries") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &f) ||
        !bson_iter_find(&f, "timeField") || !BSON_ITER_HOLDS_UTF8(&f))
        return 0;
    const char *time_field = bson_iter_utf8(&f, NULL);
    if (bson_iter_init_find(&it, doc, time_field) && BSON_ITER_HOLDS_DATE_TIME(&it))
        return 0;
    return sbl_err_set(err, SBL_E_BadValue,
                       "'%s' must be present and contain a valid BSON UTC datetime value",
                       time_field);
}

bool sbl_ts_id_index_spec(const bson_t *options, bson_t *out)
{
    bson_iter_t it, f;
    bson_t key;
    if (sbl_ts_is_timeseries(options))
        return false;
    if (options != NULL && bson_iter_init_find(&it, options, "clusteredIndex") &&
        BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_recurse(&it, &f);
        while (bson_iter_next(&f))
            sbl_append_iter(out, bson_iter_key(&f), -1, &f);
        BSON_APPEND_BOOL(out, "clustered", true);
        return true;
    }
    BSON_APPEND_INT32(out, "v", 2);
    BSON_APPEND_DOCUMENT_BEGIN(out, "key", &key);
    BSON_APPEND_INT32(&key, "_id", 1);
    bson_append_document_end(out, &key);
    BSON_APPEND_UTF8(out, "name", "_id_");
    return true;
}

/* ---- collMod ------------------------------------------------------------------- */

/* options without the top-level fields named in drop (NULL-terminated), into out. */
static void copy_without(const bson_t *options, const char *const *drop, bson_t *out)
{
    bson_iter_t it;
    bson_init(out);
    if (!bson_iter_init(&it, options))
        return;
    while (bson_iter_next(&it)) {
        bool skip = false;
        for (size_t i = 0; drop[i] != NULL; i++)
            skip = skip || strcmp(bson_iter_key(&it), drop[i]) == 0;
        if (!skip)
            sbl_append_iter(out, bson_iter_key(&it), -1, &it);
    }
}

/* collMod's `timeseries`: the transitions MongoDB 7.0 allows (granularity only
 * coarser; custom bucketing only wider), applied to cur (the stored spec). */
static int mod_timeseries(const bson_iter_t *arg, ts_spec_t *cur, bool *changedp, sbl_err_t *err)
{
    bson_iter_t it;
    char path[96];
    const char *granularity = NULL;
    int64_t max_span = 0, rounding = 0;

    if (!BSON_ITER_HOLDS_DOCUMENT(arg))
        return sbl_type_error(err, "collMod.timeseries", arg, "object");
    bson_iter_recurse(arg, &it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        snprintf(path, sizeof(path), "collMod.timeseries.%s", k);
        if (strcmp(k, "granularity") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_type_error(err, path, &it, "string");
            granularity = bson_iter_utf8(&it, NULL);
            if (strcmp(granularity, "seconds") != 0 && strcmp(granularity, "minutes") != 0 &&
                strcmp(granularity, "hours") != 0)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "Enumeration value '%s' for field '%s' is not a valid value.",
                                   granularity, path);
        } else if (strcmp(k, "bucketMaxSpanSeconds") == 0 ||
                   strcmp(k, "bucketRoundingSeconds") == 0) {
            int64_t v;
            SBL_RET(get_safe_int(&it, path, &v, err));
            SBL_RET(check_range(path, v, err));
            *(k[6] == 'M' ? &max_span : &rounding) = v;
        } else {
            return sbl_err_set(err, SBL_E_UnknownField, "BSON field '%s' is an unknown field.",
                               path);
        }
    }
    if (granularity == NULL && max_span == 0 && rounding == 0)
        return 0;
    int64_t target_span, target_rounding;
    if (granularity != NULL) {
        if (max_span != 0 && max_span != span_of_granularity(granularity))
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "Timeseries 'bucketMaxSpanSeconds' is not configurable to a value "
                               "other than the default for the provided granularity");
        if (rounding != 0)
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "Timeseries 'bucketRoundingSeconds' is not configurable alongside "
                               "the granularity parameter");
        if (cur->granularity != NULL) {
            int from = cur->granularity[0], to = granularity[0]; /* 's' < 'm' < 'h' */
            if (from == to)
                return 0;
            if (from == 'h' || (from == 'm' && to != 'h'))
                return sbl_err_set(err, SBL_E_InvalidOptions,
                                   "Invalid transition for timeseries.granularity. Can only "
                                   "transition from 'seconds' to 'minutes' or 'minutes' to "
                                   "'hours'.");
        }
        target_span = span_of_granularity(granularity);
        target_rounding = granularity[0] == 's' ? 60 : granularity[0] == 'm' ? 3600 : 86400;
    } else {
        if (max_span == 0 || rounding == 0)
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "Timeseries 'bucketMaxSpanSeconds' and 'bucketRoundingSeconds' "
                               "need to be set alongside each other");
        if (max_span != rounding)
            return sbl_err_set(err, SBL_E_InvalidOptions,
                               "Timeseries 'bucketRoundingSeconds' needs to be equal to "
                               "'bucketMaxSpanSeconds'");
        target_span = max_span;
        target_rounding = rounding;
    }
    const char *g = cur->granularity;
    int64_t cur_span = cur->max_span ? cur->max_span : span_of_granularity(g);
    int64_t cur_rounding = cur->rounding ? cur->rounding
                           : g == NULL || g[0] == 's' ? 60 : g[0] == 'm' ? 3600 : 86400;
    if (cur_span == target_span && cur_rounding == target_rounding)
        return 0;
    if (cur_span > target_span)
        return sbl_err_set(err, SBL_E_InvalidOptions, "Timeseries 'bucketMaxSpanSeconds' needs "
                           "to be equal or greater to transition");
    if (cur_rounding > target_rounding)
        return sbl_err_set(err, SBL_E_InvalidOptions, "Timeseries 'bucketRoundingSeconds' needs "
                           "to be equal or greater to transition");
    cur->granularity = granularity;
    cur->max_span = target_span;
    cur->rounding = granularity != NULL ? 0 : target_rounding;
    *changedp = true;
    return 0;
}

int sbl_ts_coll_mod(const bson_t *cmd, bson_t *opts, bool *changedp, sbl_err_t *err)
{
    static const char *const not_on_ts[] = {"validator", "validationLevel", "validationAction",
                                            "changeStreamPreAndPostImages", NULL};
    static const char *const ours[] = {"timeseries", "expireAfterSeconds", NULL};
    bson_iter_t it, stored;
    bool is_ts = sbl_ts_is_timeseries(opts), changed = false;
    bool clustered = bson_iter_init_find(&it, opts, "clusteredIndex");
    bool has_expire = false, expire_off = false;
    int64_t expire = 0;
    ts_spec_t ts;

    memset(&ts, 0, sizeof(ts));
    if (is_ts) {
        bson_iter_init_find(&stored, opts, "timeseries");
        bson_iter_recurse(&stored, &it);
        while (bson_iter_next(&it)) { /* stored by sbl_ts_create_options: well formed */
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "timeField") == 0)
                ts.time_field = bson_iter_utf8(&it, NULL);
            else if (strcmp(k, "metaField") == 0)
                ts.meta_field = bson_iter_utf8(&it, NULL);
            else if (strcmp(k, "granularity") == 0)
                ts.granularity = bson_iter_utf8(&it, NULL);
            else if (strcmp(k, "bucketMaxSpanSeconds") == 0)
                ts.max_span = bson_iter_as_int64(&it);
            else if (strcmp(k, "bucketRoundingSeconds") == 0)
                ts.rounding = bson_iter_as_int64(&it);
        }
    }
    bson_iter_init(&it, cmd);
    bson_iter_next(&it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "expireAfterSeconds") == 0) {
            if (!is_ts && !clustered)
                return sbl_err_set(err, SBL_E_InvalidOptions,
                                   "'expireAfterSeconds' option is only supported on collections "
                                   "clustered by _id");
            if (BSON_ITER_HOLDS_UTF8(&it)) {
                const char *s = bson_iter_utf8(&it, NULL);
                if (strcmp(s, "off") != 0)
                    return sbl_err_set(err, SBL_E_InvalidOptions,
                                       "Invalid string value for the "
                                       "'clusteredIndex::expireAfterSeconds' option. Got: '%s'. "
                                       "Accepted value is 'off'",
                                       s);
                expire_off = true;
            } else {
                SBL_RET(get_safe_int(&it, "collMod.expireAfterSeconds", &expire, err));
                if (expire < 0)
                    return sbl_err_set(err, SBL_E_InvalidOptions,
                                       "TTL index 'expireAfterSeconds' option cannot be less "
                                       "than 0");
                if (expire > INT32_MAX)
                    return sbl_err_set(err, SBL_E_InvalidOptions,
                                       "TTL index 'expireAfterSeconds' option must be within an "
                                       "acceptable range, try a lower number");
            }
            has_expire = true;
        } else if (strcmp(k, "timeseries") == 0) {
            if (!is_ts)
                return sbl_err_set(err, SBL_E_InvalidOptions,
                                   "option only supported on a time-series collection: "
                                   "timeseries");
            SBL_RET(mod_timeseries(&it, &ts, &changed, err));
        } else if (is_ts) {
            for (size_t i = 0; not_on_ts[i] != NULL; i++)
                if (strcmp(k, not_on_ts[i]) == 0)
                    return sbl_err_set(err, SBL_E_InvalidOptions,
                                       "option not supported on a time-series collection: %s", k);
        }
    }
    if (!changed && !has_expire)
        return 0;
    /* The new options: the others as they were, then timeseries and expireAfterSeconds. */
    bson_t out, sub;
    bson_iter_t old_expire;
    bool had_expire = bson_iter_init_find(&old_expire, opts, "expireAfterSeconds");
    if (had_expire && !has_expire)
        expire = bson_iter_as_int64(&old_expire);
    copy_without(opts, ours, &out);
    if (is_ts) {
        BSON_APPEND_DOCUMENT_BEGIN(&out, "timeseries", &sub);
        BSON_APPEND_UTF8(&sub, "timeField", ts.time_field);
        if (ts.meta_field != NULL)
            BSON_APPEND_UTF8(&sub, "metaField", ts.meta_field);
        if (ts.granularity != NULL)
            BSON_APPEND_UTF8(&sub, "granularity", ts.granularity);
        if (ts.rounding != 0)
            BSON_APPEND_INT32(&sub, "bucketRoundingSeconds", (int32_t)ts.rounding);
        BSON_APPEND_INT32(&sub, "bucketMaxSpanSeconds", (int32_t)ts.max_span);
        bson_append_document_end(&out, &sub);
    }
    if ((had_expire || has_expire) && !expire_off)
        BSON_APPEND_INT64(&out, "expireAfterSeconds", expire);
    bson_destroy(opts);
    bson_steal(opts, &out);
    *changedp = true;
    return 0;
}
