/*
 * index_cmds.c: createIndexes, dropIndexes and listIndexes.
 *
 * Specs are checked here in MongoDB's words (key pattern, options, names
 * generated as MongoDB does: "a_1_b_-1", "h_hashed") and stored normalised
 * ({v: 2, key, name, options...}); the storage layer builds and maintains
 * them (wt_index.c).  What must stay true: the _id index is implicit (every
 * collection has it, it is listed first and cannot be dropped), and an
 * equivalent index that already exists is not an error but counted in the
 * "all indexes already exist" note.
 */
#include "cmd/crud_int.h"
#include "cmd/timeseries.h"
#include "doc/doc.h"
#include "repl/repl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_INDEXES 64

static const char *const create_fields[] = {"createIndexes", "indexes", "commitQuorum",
                                            "ignoreUnknownIndexOptions", "collectionUUID", NULL};

/* Options an index spec may carry (besides v, key, name). */
static const char *const spec_options[] = {
    "unique", "sparse", "partialFilterExpression", "expireAfterSeconds", "collation",
    "background", "hidden", "ns", "storageEngine", "weights", "default_language",
    "language_override", "textIndexVersion", "2dsphereIndexVersion", "bits", "min", "max",
    "bucketSize", "wildcardProjection", "clustered", "prepareUnique", NULL};

static bool in_list(const char *k, const char *const *list)
{
    for (size_t i = 0; list[i] != NULL; i++)
        if (strcmp(k, list[i]) == 0)
            return true;
    return false;
}

static char *to_json(const bson_t *b)
{
    return bson_as_relaxed_extended_json(b, NULL);
}

static void append_id_spec(bson_t *out)
{
    bson_t k;
    BSON_APPEND_INT32(out, "v", 2);
    BSON_APPEND_DOCUMENT_BEGIN(out, "key", &k);
    BSON_APPEND_INT32(&k, "_id", 1);
    bson_append_document_end(out, &k);
    BSON_APPEND_UTF8(out, "name", "_id_");
}

/* MongoDB's generated name: field_value pairs joined by "_". */
static void generate_name(const bson_t *key, bson_string_t *out)
{
    bson_iter_t it;
    bool first = true;

    bson_iter_init(&it, key);
    while (bson_iter_next(&it)) {
        if (!first)
            bson_string_append_c(out, '_');
        first = false;
        bson_string_append(out, bson_iter_key(&it));
        bson_string_append_c(out, '_');
        if (BSON_ITER_HOLDS_UTF8(&it))
            bson_string_append(out, bson_iter_utf8(&it, NULL));
        else if (BSON_ITER_HOLDS_DOUBLE(&it)) {
            double d = bson_iter_double(&it);
            char tmp[64];
            if (d == floor(d) && fabs(d) < 1e15)
                snprintf(tmp, sizeof(tmp), "%lld", (long long)d);
            else
                snprintf(tmp, sizeof(tmp), "%g", d);
            bson_string_append(out, tmp);
        } else
            bson_string_append_printf(out, "%lld", (long long)bson_iter_as_int64(&it));
    }
}

/* Check a key pattern as MongoDB does. */
static int check_key(const bson_t *key, const bson_t *spec, sbl_err_t *err)
{
    bson_iter_t it;
    int nhashed = 0, ngeo = 0, nfield = -1;
    char *j;
    int rc = 0;

    if (bson_empty(key)) {
        j = to_json(spec);
        rc = sbl_err_set(err, SBL_E_CannotCreateIndex,
                         "Error in specification %s :: caused by :: Index keys cannot be an "
                         "empty object.", j);
        bson_free(j);
        return rc;
    }
    bson_iter_init(&it, key);
    while (bson_iter_next(&it)) {
        const char *f = bson_iter_key(&it);
        const char *why = NULL;
        char buf[256];
        nfield++;
        const char *last = strrchr(f, '.');
        last = last != NULL ? last + 1 : f;
        if (f[0] == '\0')
            why = "Index keys cannot contain an empty field.";
        else if (strcmp(f, "$**") == 0 && BSON_ITER_HOLDS_UTF8(&it) &&
                 strcmp(bson_iter_utf8(&it, NULL), "text") == 0)
            continue; /* a wildcard text index */
        else if (strcmp(last, "$**") == 0) /* "$**" or "a.b.$**" */
            why = "wildcard indexes are not supported by Sable yet";
        else if (f[0] == '$' || strstr(f, ".$") != NULL)
            why = "Index key contains an illegal field name: field name starts with '$'.";
        else if (strstr(f, "..") != NULL || f[strlen(f) - 1] == '.')
            why = "Index keys cannot contain an empty field.";
        else if (BSON_ITER_HOLDS_NUMBER(&it)) {
            double d = bson_iter_as_double(&it);
            if (d == 0 || isnan(d))
                why = "Values in the index key pattern can't be 0.";
        } else if (BSON_ITER_HOLDS_UTF8(&it)) {
            const char *t = bson_iter_utf8(&it, NULL);
            if (strcmp(t, "hashed") == 0)
                nhashed++;
            else if (strcmp(t, "text") == 0)
                ;
            else if (strcmp(t, "2dsphere") == 0) {
                if (ngeo++ > 0)
                    why = "Sable supports one 2dsphere field per index";
            } else if (strcmp(t, "2d") == 0) {
                if (nfield != 0)
                    why = "2d has to be first in index";
                ngeo++;
            } else if (strcmp(t, "geoHaystack") == 0) {
                why = "geoHaystack indexes were removed in MongoDB 5.0";
            } else {
                snprintf(buf, sizeof(buf), "Unknown index plugin '%s'", t);
                why = buf;
            }
        } else
            why = "Values in v:2 index key pattern cannot be of type object. Only numbers > 0, "
                  "numbers < 0, and strings are allowed.";
        if (why == NULL && nhashed > 1)
            why = "A maximum of one index field is allowed to be hashed";
        if (why != NULL) {
            j = to_json(spec);
            rc = sbl_err_set(err, SBL_E_CannotCreateIndex,
                             "Error in specification %s :: caused by :: %s", j, why);
            bson_free(j);
            return rc;
        }
    }
    return 0;
}

/* Validate one spec and write its normalised form into out (initialised);
 * *has_collationp: the spec gives a collation (else the collection's default applies). */
static int normalise_spec(const bson_t *spec, bson_t *out, bool *has_collationp, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t key, sub;
    bool have_key = false, unique = false, sparse = false, partial = false, ttl = false;
    bool has_collation = false;
    bson_iter_t collation;
    const char *name = NULL;
    bson_string_t *gen = NULL;
    char *j;
    int rc = 0;

    *has_collationp = false;
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "key") == 0) {
            if (!sbl_iter_doc(&it, &key))
                return sbl_err_set(err, SBL_E_TypeMismatch,
                                   "The field 'key' must be an object, but got %s",
                                   sbl_type_name(bson_iter_type(&it)));
            have_key = true;
        } else if (strcmp(k, "name") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_err_set(err, SBL_E_TypeMismatch,
                                   "The field 'name' must be a string, but got %s",
                                   sbl_type_name(bson_iter_type(&it)));
            name = bson_iter_utf8(&it, NULL);
            if (name[0] == '\0')
                return sbl_err_set(err, SBL_E_CannotCreateIndex, "index name cannot be empty");
        } else if (strcmp(k, "v") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it) ||
                (bson_iter_as_int64(&it) != 1 && bson_iter_as_int64(&it) != 2))
                return sbl_err_set(err, SBL_E_CannotCreateIndex,
                                   "Invalid index specification; index version must be 1 or 2");
        } else if (!in_list(k, spec_options)) {
            j = to_json(spec);
            rc = sbl_err_set(err, SBL_E_InvalidIndexSpecificationOption,
                             "The field '%s' is not valid for an index specification. "
                             "Specification: %s", k, j);
            bson_free(j);
            return rc;
        } else if (strcmp(k, "unique") == 0)
            unique = bson_iter_as_bool(&it);
        else if (strcmp(k, "sparse") == 0)
            sparse = bson_iter_as_bool(&it);
        else if (strcmp(k, "partialFilterExpression") == 0) {
            bson_t pfe;
            if (!sbl_iter_doc(&it, &pfe))
                return sbl_err_set(err, SBL_E_TypeMismatch,
                                   "The field 'partialFilterExpression' must be an object");
            SBL_RET(sbl_filter_refuse_where(&pfe, err));
            sbl_matcher_t *m = sbl_matcher_new(&pfe, err);
            if (m == NULL)
                return err->code ? err->code : SBL_E_BadValue;
            sbl_matcher_free(m);
            partial = true;
        } else if (strcmp(k, "expireAfterSeconds") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it))
                return sbl_err_set(err, SBL_E_CannotCreateIndex,
                                   "TTL index 'expireAfterSeconds' option must be numeric, but "
                                   "received a type of '%s'",
                                   sbl_type_name(bson_iter_type(&it)));
            double d = bson_iter_as_double(&it);
            if (isnan(d) || d < 0 || d > 2147483647.0)
                return sbl_err_set(err, SBL_E_CannotCreateIndex,
                                   "TTL index 'expireAfterSeconds' option must be within an "
                                   "acceptable range, try a lower number");
            ttl = true;
        } else if (strcmp(k, "collation") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_err_set(err, SBL_E_TypeMismatch,
                                   "The field 'collation' must be an object");
            collation = it;
            has_collation = true;
        }
    }
    if (!have_key)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "The 'key' field is a required property of an index specification");
    bool text = sbl_cmd_key_is_text(&key);
    if (!text)
        SBL_RET(check_key(&key, spec, err));
    bool hashed = false, compound = bson_count_keys(&key) > 1;
    bson_iter_init(&it, &key);
    int geo = 0;
    while (bson_iter_next(&it) && !text) {
        const char *t = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
        hashed |= strcmp(t, "hashed") == 0;
        geo = strcmp(t, "2dsphere") == 0 ? 1 : strcmp(t, "2d") == 0 ? 2 : geo;
    }
    if (geo != 0)
        SBL_RET(sbl_cmd_geo_check(spec, geo == 1, err));
    if (hashed && unique)
        return sbl_err_set(err, SBL_E_CannotCreateIndex,
                           "Currently hashed indexes cannot guarantee uniqueness. Use a regular "
                           "index.");
    if (sparse && partial)
        return sbl_err_set(err, SBL_E_CannotCreateIndex,
                           "cannot mix \"partialFilterExpression\" and \"sparse\" options");
    if (ttl && compound)
        return sbl_err_set(err, SBL_E_CannotCreateIndex,
                           "TTL indexes are single-field indexes, compound indexes do not "
                           "support TTL. Index spec: %s", "(compound)");
    if (name == NULL) {
        gen = bson_string_new(NULL);
        generate_name(&key, gen);
        name = gen->str;
    }
    BSON_APPEND_INT32(out, "v", 2);
    if (text) {
        bson_t extra = BSON_INITIALIZER;
        bson_iter_t xi;
        rc = sbl_cmd_text_spec(spec, &key, &extra, err);
        if (rc == 0 && bson_iter_init_find(&xi, &extra, "key"))
            sbl_append_iter(out, "key", -1, &xi);
        BSON_APPEND_UTF8(out, "name", name);
        if (rc == 0 && bson_iter_init(&xi, &extra))
            while (bson_iter_next(&xi))
                if (strcmp(bson_iter_key(&xi), "key") != 0)
                    sbl_append_iter(out, bson_iter_key(&xi), -1, &xi);
        bson_destroy(&extra);
        if (rc != 0) {
            if (gen != NULL)
                bson_string_free(gen, true);
            return rc;
        }
    } else {
        BSON_APPEND_DOCUMENT(out, "key", &key);
        BSON_APPEND_UTF8(out, "name", name);
        if (geo == 1)
            BSON_APPEND_INT32(out, "2dsphereIndexVersion", 3);
    }
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "key") == 0 || strcmp(k, "name") == 0 || strcmp(k, "v") == 0 ||
            strcmp(k, "ns") == 0 || strcmp(k, "background") == 0 || strcmp(k, "collation") == 0)
            continue;
        if (sbl_cmd_text_option(k) || strcmp(k, "2dsphereIndexVersion") == 0)
            continue; /* text and 2dsphere indexes' are written above; others ignore them */
        if ((strcmp(k, "unique") == 0 || strcmp(k, "sparse") == 0) && !bson_iter_as_bool(&it))
            continue;
        if (strcmp(k, "unique") == 0 || strcmp(k, "sparse") == 0)
            BSON_APPEND_BOOL(out, k, true);
        else
            sbl_append_iter(out, k, -1, &it);
    }
    (void)sub;
    if (gen != NULL)
        bson_string_free(gen, true);
    /* {locale: "simple"} is stored as no collation (and overrides the collection's) */
    *has_collationp = has_collation;
    return has_collation ? sbl_exec_collation_option(&collation, out, err) : 0;
}

static bool get_doc_field(const bson_t *spec, const char *f, bson_t *out)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, spec, f) && sbl_iter_doc(&it, out);
}

static const char *spec_name(const bson_t *spec)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, spec, "name") && BSON_ITER_HOLDS_UTF8(&it)
               ? bson_iter_utf8(&it, NULL)
               : "";
}

/* Same key pattern (field names, order and values by MongoDB order). */
static bool same_key(const bson_t *a, const bson_t *b)
{
    bson_t ka, kb;
    return get_doc_field(a, "key", &ka) && get_doc_field(b, "key", &kb) &&
           sbl_doc_compare(&ka, &kb) == 0;
}

/* The options that make two indexes on one key different indexes. */
static bool same_identity(const bson_t *a, const bson_t *b)
{
    bson_t pa, pb;
    bool ha = get_doc_field(a, "partialFilterExpression", &pa);
    bool hb = get_doc_field(b, "partialFilterExpression", &pb);
    bson_t ca, cb; /* full specs as stored: equal documents for equal collations */
    bool hca = get_doc_field(a, "collation", &ca), hcb = get_doc_field(b, "collation", &cb);
    return ha == hb && (!ha || sbl_doc_compare(&pa, &pb) == 0) && hca == hcb &&
           (!hca || sbl_doc_compare(&ca, &cb) == 0);
}

static bool opt_bool(const bson_t *s, const char *f)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, s, f) && bson_iter_as_bool(&it);
}

static double opt_num(const bson_t *s, const char *f)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, s, f) && BSON_ITER_HOLDS_NUMBER(&it)
               ? bson_iter_as_double(&it)
               : -1;
}

static bool same_options(const bson_t *a, const bson_t *b)
{
    return same_identity(a, b) && opt_bool(a, "unique") == opt_bool(b, "unique") &&
           opt_bool(a, "sparse") == opt_bool(b, "sparse") &&
           opt_num(a, "expireAfterSeconds") == opt_num(b, "expireAfterSeconds");
}

/*
 * Compare a requested spec with an existing one: 0 when unrelated, 1 when
 * the very same index exists already, or an error code.
 */
static int conflict(const bson_t *req, const bson_t *have, sbl_err_t *err)
{
    bool name_eq = strcmp(spec_name(req), spec_name(have)) == 0;
    bool key_eq = same_key(req, have);
    char *rj, *hj;
    int rc = 0;

    if (!name_eq && !(key_eq && same_identity(req, have)))
        return 0;
    if (name_eq && key_eq && same_options(req, have))
        return 1;
    rj = to_json(req);
    hj = to_json(have);
    if (name_eq && !key_eq)
        rc = sbl_err_set(err, SBL_E_IndexKeySpecsConflict,
                         "An existing index has the same name as the requested index. When "
                         "index names are not specified, they are auto generated and can cause "
                         "conflicts. Please refer to our documentation. Requested index: %s, "
                         "existing index: %s", rj, hj);
    else if (name_eq)
        rc = sbl_err_set(err, SBL_E_IndexOptionsConflict,
                         "An equivalent index already exists with the same name but different "
                         "options. Requested index: %s, existing index: %s", rj, hj);
    else if (same_options(req, have))
        rc = sbl_err_set(err, SBL_E_IndexOptionsConflict,
                         "Index already exists with a different name: %s", spec_name(have));
    else
        rc = sbl_err_set(err, SBL_E_IndexOptionsConflict,
                         "An equivalent index already exists with a different name and options. "
                         "Requested index: %s, existing index: %s", rj, hj);
    bson_free(rj);
    bson_free(hj);
    return rc;
}

/* How often one createIndexes checks its specs again after losing a race
 * for a name or after the build it waited for failed. */
#define MAX_CREATE_ROUNDS 20

/*
 * Check the requested specs against the indexes the collection has (ready
 * or building) and against each other: skip[i] when an identical index
 * exists or an earlier spec asks for the same one, joined[i] when that
 * identical index is still building; specs this request made already are
 * left alone.  0, or the conflict's error.
 */
static int check_specs(bson_t **specs, size_t nspecs, const bool *made, sbl_index_t **have,
                       size_t nhave, bool *skip, bool *joined, sbl_err_t *err)
{
    bson_t id_spec = BSON_INITIALIZER;
    size_t i, k;
    int rc = 0;

    append_id_spec(&id_spec);
    for (i = 0; i < nspecs && rc == 0; i++) {
        skip[i] = false;
        joined[i] = false;
        if (made[i])
            continue;
        if (strcmp(spec_name(specs[i]), "_id_") == 0 || same_key(specs[i], &id_spec)) {
            /* The _id index: only its exact spec is accepted. */
            if (same_key(specs[i], &id_spec) && strcmp(spec_name(specs[i]), "_id_") == 0 &&
                !opt_bool(specs[i], "sparse") && !opt_bool(specs[i], "unique")) {
                skip[i] = true;
                continue;
            }
            rc = conflict(specs[i], &id_spec, err);
            if (rc == 0 || rc == 1)
                rc = sbl_err_set(err, SBL_E_BadValue, "The _id index cannot be changed");
            break;
        }
        for (k = 0; k < nhave && rc == 0; k++) {
            rc = sbl_cmd_text_conflict(specs[i], sbl_index_spec(have[k]), err);
            if (rc == 0)
                rc = conflict(specs[i], sbl_index_spec(have[k]), err);
            if (rc == 1) {
                skip[i] = true;
                joined[i] = !sbl_index_is_ready(have[k]);
                rc = 0;
                break;
            }
        }
        for (k = 0; k < i && rc == 0; k++) {
            if (skip[k] || made[k])
                continue;
            rc = sbl_cmd_text_conflict(specs[i], specs[k], err);
            if (rc == 0)
                rc = conflict(specs[i], specs[k], err);
            if (rc == 1) {
                skip[i] = true;
                rc = 0;
            }
        }
    }
    bson_destroy(&id_spec);
    return rc;
}

/* Wait until c's index `name` is ready (0), or *gone when it left the list
 * (its build failed, or it was dropped); the operation's kill and deadline
 * end the wait. */
static int await_build(sbl_opctx_t *ctx, sbl_coll_t *c, const char *name, bool *gone,
                       sbl_err_t *err)
{
    for (;;) {
        sbl_index_t **ixs;
        size_t n;
        int state = 0; /* 0 gone, 1 building, 2 ready */
        sbl_index_list(c, true, &ixs, &n);
        for (size_t k = 0; k < n; k++)
            if (strcmp(sbl_index_name(ixs[k]), name) == 0)
                state = sbl_index_is_ready(ixs[k]) ? 2 : 1;
        sbl_index_list_free(ixs, n);
        if (state != 1) {
            *gone = state == 0;
            return 0;
        }
        SBL_RET(sbl_op_check_interrupt(ctx, err));
        usleep(2000);
    }
}

int sbl_cmd_create_indexes(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[SBL_NS_MAX];
    bson_iter_t it, list;
    bson_t *specs[MAX_INDEXES];
    bool skip[MAX_INDEXES], own_coll[MAX_INDEXES];
    bool made[MAX_INDEXES] = {false}, joined[MAX_INDEXES] = {false};
    size_t nspecs = 0, before = 0, after, nmade = 0, i;
    sbl_coll_t *c = NULL;
    sbl_index_t **have = NULL;
    size_t nhave = 0;
    bool created = false;
    int rc = 0;

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    SBL_RET(sbl_check_fields(ctx->cmd, "createIndexes", create_fields, err));
    if (!bson_iter_init_find(&it, ctx->cmd, "indexes"))
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "BSON field 'createIndexes.indexes' is missing but a required field");
    if (!BSON_ITER_HOLDS_ARRAY(&it))
        return sbl_type_error(err, "createIndexes.indexes", &it, "array");
    bson_iter_recurse(&it, &list);
    while (bson_iter_next(&list)) {
        bson_t spec;
        if (!sbl_iter_doc(&list, &spec)) {
            rc = sbl_type_error(err, "createIndexes.indexes.0", &list, "object");
            goto err;
        }
        if (nspecs == MAX_INDEXES) {
            rc = sbl_err_set(err, SBL_E_CannotCreateIndex,
                             "add index fails, too many indexes for %s", ns);
            goto err;
        }
        specs[nspecs] = bson_new();
        skip[nspecs] = false;
        nspecs++;
        SBL_ERR(normalise_spec(&spec, specs[nspecs - 1], &own_coll[nspecs - 1], err));
    }
    if (nspecs == 0)
        return sbl_err_set(err, SBL_E_BadValue, "Must specify at least one index to create");

    SBL_ERR(sbl_coll_open(ctx->ss, ns, true, &c, &created, err));
    if (created) {
        ctx->wrote = true;
        sbl_op_coll_created(ctx, ns);
    }
    /* In a transaction (mongod 7.0): indexes only on a collection it creates. */
    if (ctx->mtxn != NULL && !created && !sbl_coll_created_by(c, ctx->ss)) {
        rc = sbl_err_set(err, SBL_E_OperationNotSupportedInTransaction,
                         "Cannot create new indexes on existing collection %s in a "
                         "multi-document transaction.", ns);
        goto err;
    }
    bson_iter_t dc; /* the collection's default collation for specs without their own */
    for (i = 0; i < nspecs && bson_iter_init_find(&dc, sbl_coll_options(c), "collation"); i++)
        if (!own_coll[i])
            sbl_append_iter(specs[i], "collation", -1, &dc);
    /* Several clients may ask for the same index at once: as mongod, each
     * gets success. A request that finds an identical index building waits
     * for it (joined); one that loses the race to publish the name checks
     * its specs again against what won. */
    for (int round = 0;; round++) {
        bool again = false;
        sbl_index_list(c, true, &have, &nhave);
        if (round == 0)
            before = 1 + nhave;
        rc = check_specs(specs, nspecs, made, have, nhave, skip, joined, err);
        sbl_index_list_free(have, nhave);
        if (rc != 0)
            goto err;
        for (i = 0; i < nspecs && !again; i++) {
            if (skip[i] || made[i])
                continue;
            if (before + nmade >= MAX_INDEXES) {
                rc = sbl_err_set(err, SBL_E_CannotCreateIndex,
                                 "add index fails, too many indexes for %s key:%s", ns,
                                 spec_name(specs[i]));
                goto err;
            }
            rc = sbl_index_create(ctx->ss, c, specs[i], err);
            if (rc == SBL_E_IndexAlreadyExists && round < MAX_CREATE_ROUNDS) {
                sbl_err_clear(err);
                rc = 0;
                again = true;
                break;
            }
            if (rc != 0)
                goto err;
            /* An index whose entry was not written (a step-down overtook its
             * build: 11602) is dropped, as no other member would get it; the
             * command fails (mongod's fails too after a step-down, and its
             * new primary finishes the build; Sable's builds are one-phase). */
            if (ctx->mtxn == NULL &&
                (rc = sbl_repl_log_create_index(ctx->ss, ns, sbl_coll_uuid(c), specs[i],
                                                err)) != 0) {
                sbl_err_t e;
                sbl_err_clear(&e);
                sbl_index_drop(ctx->ss, c, spec_name(specs[i]), &e);
                goto err;
            }
            made[i] = true;
            nmade++;
            ctx->wrote = true;
            if (ctx->mtxn != NULL) /* logged when the transaction commits */
                sbl_cmd_mtxn_note_index(ctx, ns, specs[i]);
            sbl_cmd_audit_index(ctx, "createIndex", ns, spec_name(specs[i]), specs[i]);
        }
        for (i = 0; i < nspecs && !again; i++) {
            bool gone = false;
            if (!joined[i])
                continue;
            SBL_ERR(await_build(ctx, c, spec_name(specs[i]), &gone, err));
            again = gone && round < MAX_CREATE_ROUNDS; /* its build failed: try ours */
        }
        if (!again)
            break;
    }
    /* What the collection has now (a request that joined another's build
     * counts it, as mongod's reply does). */
    after = 1 + sbl_index_count(c);
    BSON_APPEND_INT32(ctx->reply, "numIndexesBefore", (int32_t)before);
    BSON_APPEND_INT32(ctx->reply, "numIndexesAfter", (int32_t)after);
    if (after == before)
        BSON_APPEND_UTF8(ctx->reply, "note", "all indexes already exist");
    BSON_APPEND_BOOL(ctx->reply, "createdCollectionAutomatically", created);
err:
    for (i = 0; i < nspecs; i++)
        bson_destroy(specs[i]);
    sbl_coll_release(c);
    return rc;
}

/* ---- dropIndexes ------------------------------------------------------------ */

static bool key_is_id(const bson_t *key)
{
    bson_t id = BSON_INITIALIZER;
    bool r;
    BSON_APPEND_INT32(&id, "_id", 1);
    r = sbl_doc_compare(key, &id) == 0;
    bson_destroy(&id);
    return r;
}

int sbl_cmd_drop_indexes(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[SBL_NS_MAX];
    bson_iter_t it;
    sbl_coll_t *c = NULL;
    sbl_index_t **have = NULL;
    size_t nhave = 0, i;
    const char **names = NULL;
    size_t nnames = 0;
    bool all = false;
    int rc;

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    rc = sbl_coll_open(ctx->ss, ns, false, &c, NULL, err);
    if (rc == SBL_E_NamespaceNotFound)
        return sbl_err_set(err, SBL_E_NamespaceNotFound, "ns not found %s", ns);
    SBL_RET(rc);
    sbl_index_list(c, true, &have, &nhave);
    names = calloc(nhave + 64, sizeof(char *));
    if (!bson_iter_init_find(&it, ctx->cmd, "index")) {
        rc = sbl_err_set(err, SBL_E_FailedToParse,
                         "BSON field 'dropIndexes.index' is missing but a required field");
        goto err;
    }
    if (BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), "*") == 0) {
        all = true;
        for (i = 0; i < nhave; i++)
            names[nnames++] = sbl_index_name(have[i]);
    } else if (BSON_ITER_HOLDS_UTF8(&it) || BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_iter_t a;
        bool single = BSON_ITER_HOLDS_UTF8(&it);
        if (!single)
            bson_iter_recurse(&it, &a);
        for (bool more = true; more;) {
            const char *name;
            if (single) {
                name = bson_iter_utf8(&it, NULL);
                more = false;
            } else {
                if (!bson_iter_next(&a))
                    break;
                if (!BSON_ITER_HOLDS_UTF8(&a)) {
                    rc = sbl_type_error(err, "dropIndexes.index", &a, "string");
                    goto err;
                }
                name = bson_iter_utf8(&a, NULL);
            }
            if (strcmp(name, "_id_") == 0) {
                rc = sbl_err_set(err, SBL_E_InvalidOptions, "cannot drop _id index");
                goto err;
            }
            if (strcmp(name, "*") == 0 && !single) {
                rc = sbl_err_set(err, SBL_E_BadValue,
                                 "'*' or '_id_' cannot be used in a list of index names");
                goto err;
            }
            for (i = 0; i < nhave; i++)
                if (strcmp(sbl_index_name(have[i]), name) == 0)
                    break;
            if (i == nhave) {
                rc = sbl_err_set(err, SBL_E_IndexNotFound, "index not found with name [%s]",
                                 name);
                goto err;
            }
            if (nnames < nhave + 64)
                names[nnames++] = sbl_index_name(have[i]);
        }
    } else if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t key;
        size_t found = 0;
        sbl_iter_doc(&it, &key);
        if (key_is_id(&key)) {
            rc = sbl_err_set(err, SBL_E_InvalidOptions, "cannot drop _id index");
            goto err;
        }
        for (i = 0; i < nhave; i++) {
            bson_t k2;
            if (get_doc_field(sbl_index_spec(have[i]), "key", &k2) &&
                sbl_doc_compare(&k2, &key) == 0) {
                names[nnames++] = sbl_index_name(have[i]);
                found++;
            }
        }
        if (found == 0) {
            char *j = to_json(&key);
            rc = sbl_err_set(err, SBL_E_IndexNotFound, "can't find index with key: %s", j);
            bson_free(j);
            goto err;
        }
        if (found > 1) {
            char *j = to_json(&key);
            rc = sbl_err_set(err, SBL_E_IndexKeySpecsConflict,
                             "%zu indexes found for key: %s, identify by name instead.", found,
                             j);
            bson_free(j);
            goto err;
        }
    } else {
        rc = sbl_type_error(err, "dropIndexes.index", &it, "string or object");
        goto err;
    }
    for (i = 0; i < nnames; i++) {
        SBL_ERR(sbl_index_drop(ctx->ss, c, names[i], err));
        const bson_t *dropped_spec = NULL; /* the oplog entry's o2 */
        for (size_t k = 0; k < nhave; k++)
            if (strcmp(sbl_index_name(have[k]), names[i]) == 0)
                dropped_spec = sbl_index_spec(have[k]);
        sbl_repl_log_drop_index(ctx->ss, ns, sbl_coll_uuid(c), names[i], dropped_spec);
        sbl_cmd_audit_index(ctx, "dropIndex", ns, names[i], NULL);
    }
    if (nnames > 0)
        ctx->wrote = true;
    BSON_APPEND_INT32(ctx->reply, "nIndexesWas", (int32_t)(1 + nhave));
    if (all)
        BSON_APPEND_UTF8(ctx->reply, "msg", "non-_id indexes dropped for collection");
err:
    free(names);
    sbl_index_list_free(have, nhave);
    sbl_coll_release(c);
    return rc;
}

/* ---- listIndexes -------------------------------------------------------------- */

static int64_t cursor_batch_size(const bson_t *cmd)
{
    bson_iter_t it, c;
    if (bson_iter_init_find(&it, cmd, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &c) && bson_iter_find(&c, "batchSize") &&
        BSON_ITER_HOLDS_NUMBER(&c))
        return bson_iter_as_int64(&c);
    return -1;
}

int sbl_cmd_list_indexes(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[SBL_NS_MAX];
    sbl_coll_t *c;
    sbl_index_t **have = NULL;
    size_t nhave = 0;

    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    int rc = sbl_coll_open(ctx->ss, ns, false, &c, NULL, err);
    if (rc == SBL_E_NamespaceNotFound)
        return sbl_err_set(err, SBL_E_NamespaceNotFound, "ns does not exist: %s", ns);
    SBL_RET(rc);
    sbl_index_list(c, false, &have, &nhave);
    bson_t **docs = calloc(nhave + 1, sizeof(bson_t *));
    size_t nd = 0;
    docs[0] = bson_new();
    /* _id_, or a clustered collection's clustered index, or none (time-series) */
    if (sbl_ts_id_index_spec(sbl_coll_options(c), docs[0]))
        nd++;
    else
        bson_destroy(docs[0]);
    sbl_coll_release(c);
    for (size_t i = 0; i < nhave; i++)
        docs[nd++] = bson_copy(sbl_index_spec(have[i]));
    sbl_index_list_free(have, nhave);
    return sbl_cursor_first_batch(ctx, ns, &sbl_cursor_docs_source,
                                  sbl_cursor_docs_state(docs, nd),
                                  cursor_batch_size(ctx->cmd), false, err);
}
