/*
 * test_update.c: update operators, positional forms, arrayFilters,
 * replacements and upsert seeds, as a table of (update, old document,
 * expected document or expected error code).  Documents are written as
 * extended JSON with single quotes (turned into double quotes here).
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "doc/doc.h"
#include "update/update.h"

#define NOW_MS 1700000000000LL

typedef struct ucase {
    const char *update;
    const char *old;
    const char *expect; /* NULL when an error is expected */
    int code;
    int changed;         /* 1 / 0, or -1 not checked */
    const char *filters; /* arrayFilters as a JSON array, or NULL */
    int32_t pos;         /* array position for "$" */
    bool insert;
} ucase_t;

#define OK(u, o, e) {u, o, e, 0, -1, NULL, -1, false}
#define SAME(u, o) {u, o, o, 0, 0, NULL, -1, false}
#define FAIL(u, o, c) {u, o, NULL, c, -1, NULL, -1, false}

static bson_t *json(const char *s)
{
    char *q = strdup(s);
    bson_error_t e;
    bson_t *b;

    for (char *p = q; *p; p++)
        if (*p == '\'')
            *p = '"';
    b = bson_new_from_json((const uint8_t *)q, -1, &e);
    if (b == NULL)
        fprintf(stderr, "bad test json %s: %s\n", s, e.message);
    free(q);
    return b;
}

/* The filters are written as an array; arrayFilters are passed as a BSON array document. */
static bson_t *json_array(const char *s)
{
    bson_t *wrap, *out;
    bson_iter_t it;
    char *doc = bson_strdup_printf("{'a': %s}", s);
    const uint8_t *data;
    uint32_t len;

    wrap = json(doc);
    bson_free(doc);
    if (wrap == NULL || !bson_iter_init_find(&it, wrap, "a") || !BSON_ITER_HOLDS_ARRAY(&it))
        return NULL;
    bson_iter_array(&it, &len, &data);
    out = bson_new_from_data(data, len);
    bson_destroy(wrap);
    return out;
}

static void run(const ucase_t *c, int line)
{
    bson_t *spec = json(c->update), *old = json(c->old);
    bson_t *filters = c->filters ? json_array(c->filters) : NULL;
    bson_t out = BSON_INITIALIZER;
    sbl_err_t err = {0};
    bool changed = false;
    int rc = 0;

    if (spec == NULL || old == NULL) {
        CHECK_MSG(false, "line %d: bad json", line);
        goto done;
    }
    sbl_update_t *u = sbl_update_new(spec, filters, &err);
    if (u == NULL) {
        rc = err.code;
        CHECK_MSG(rc != 0, "line %d: parse failed without a code", line);
    } else {
        rc = sbl_update_apply(u, old, c->pos, c->insert, NOW_MS, &out, &changed, &err);
        sbl_update_free(u);
    }
    if (c->expect == NULL) {
        CHECK_MSG(rc == c->code, "line %d: %s on %s: want code %d, got %d (%s)", line, c->update,
                  c->old, c->code, rc, err.msg);
        goto done;
    }
    CHECK_MSG(rc == 0, "line %d: %s on %s: unexpected error %d: %s", line, c->update, c->old, rc,
              err.msg);
    if (rc == 0) {
        bson_t *want = json(c->expect);
        bool same = want && want->len == out.len &&
                    memcmp(bson_get_data(want), bson_get_data(&out), out.len) == 0;
        char *got = bson_as_canonical_extended_json(&out, NULL);
        char *exp = want ? bson_as_canonical_extended_json(want, NULL) : NULL;
        CHECK_MSG(same, "line %d: %s on %s:\n   got  %s\n   want %s", line, c->update, c->old,
                  got, exp);
        if (c->changed >= 0)
            CHECK_MSG(changed == (c->changed == 1), "line %d: %s: changed is %d", line,
                      c->update, changed);
        bson_free(got);
        bson_free(exp);
        if (want)
            bson_destroy(want);
    }
done:
    if (spec)
        bson_destroy(spec);
    if (old)
        bson_destroy(old);
    if (filters)
        bson_destroy(filters);
    bson_destroy(&out);
}

/* ---- the tables ----------------------------------------------------------- */

static const ucase_t set_cases[] = {
    OK("{'$set': {'a': 2}}", "{'_id': 1, 'a': 1}", "{'_id': 1, 'a': 2}"),
    OK("{'$set': {'b': 2}}", "{'_id': 1, 'a': 1}", "{'_id': 1, 'a': 1, 'b': 2}"),
    OK("{'$set': {'a.b': 1}}", "{'_id': 1}", "{'_id': 1, 'a': {'b': 1}}"),
    OK("{'$set': {'a.b.c': 1}}", "{'_id': 1, 'a': {}}", "{'_id': 1, 'a': {'b': {'c': 1}}}"),
    FAIL("{'$set': {'a.b': 1}}", "{'_id': 1, 'a': 1}", 28),
    FAIL("{'$set': {'a.b.c': 1}}", "{'_id': 1, 'a': {'b': 'x'}}", 28),
    OK("{'$set': {'a.2': 5}}", "{'_id': 1, 'a': [1]}", "{'_id': 1, 'a': [1, null, 5]}"),
    OK("{'$set': {'a.0': 5}}", "{'_id': 1, 'a': [1, 2]}", "{'_id': 1, 'a': [5, 2]}"),
    OK("{'$set': {'a.1.b': 5}}", "{'_id': 1, 'a': [{'b': 1}, {'b': 2}]}",
       "{'_id': 1, 'a': [{'b': 1}, {'b': 5}]}"),
    OK("{'$set': {'a.3.b': 5}}", "{'_id': 1, 'a': []}",
       "{'_id': 1, 'a': [null, null, null, {'b': 5}]}"),
    FAIL("{'$set': {'a.b': 5}}", "{'_id': 1, 'a': [{'b': 1}]}", 28),
    OK("{'$set': {'a.0': 1}}", "{'_id': 1, 'a': {}}", "{'_id': 1, 'a': {'0': 1}}"),
    OK("{'$set': {'z': 1, 'b': 1}}", "{'_id': 1}", "{'_id': 1, 'b': 1, 'z': 1}"),
    OK("{'$set': {'x.b': 1, 'x.a': 2}}", "{'_id': 1}", "{'_id': 1, 'x': {'a': 2, 'b': 1}}"),
    OK("{'$set': {'z': 1}, '$inc': {'a': 1}}", "{'_id': 1}", "{'_id': 1, 'a': 1, 'z': 1}"),
    OK("{'$set': {'c': 3, 'a': 9}}", "{'_id': 1, 'b': 2, 'a': 1}",
       "{'_id': 1, 'b': 2, 'a': 9, 'c': 3}"),
    SAME("{'$set': {'a': 1}}", "{'_id': 1, 'a': 1}"),
    {"{'$set': {'a': 2}}", "{'_id': 1, 'a': 1}", "{'_id': 1, 'a': 2}", 0, 1, NULL, -1, false},
    {"{'$set': {'a': {'$numberLong': '1'}}}", "{'_id': 1, 'a': 1}",
     "{'_id': 1, 'a': {'$numberLong': '1'}}", 0, 1, NULL, -1, false},
    OK("{'$set': {'a': {'b': [1, {'c': 2}]}}}", "{'_id': 1}",
       "{'_id': 1, 'a': {'b': [1, {'c': 2}]}}"),
    OK("{'$set': {'a': [1, 2]}}", "{'_id': 1, 'a': {'x': 1}}", "{'_id': 1, 'a': [1, 2]}"),
    SAME("{'$set': {'_id': 1}}", "{'_id': 1}"),
    FAIL("{'$set': {'_id': 2}}", "{'_id': 1}", 66),
    FAIL("{'$set': {'_id.x': 2}}", "{'_id': {'x': 1}}", 66),
    FAIL("{'$set': {'_id': [1]}}", "{'a': 1}", 53),
    OK("{'$set': {'a': 1}}", "{'a': 0, '_id': 1}", "{'_id': 1, 'a': 1}"),
    OK("{'$set': {'a': 1}}", "{}", "{'a': 1}"),
    FAIL("{'$set': {'': 1}}", "{'_id': 1}", 56),
    FAIL("{'$set': {'a..b': 1}}", "{'_id': 1}", 56),
    FAIL("{'$set': {'a.': 1}}", "{'_id': 1}", 56),
    FAIL("{'$set': {'$x': 1}}", "{'_id': 1}", 52),
    FAIL("{'$set': {}}", "{'_id': 1}", 9),
    FAIL("{'$foo': {'a': 1}}", "{'_id': 1}", 9),
    FAIL("{'$set': 5}", "{'_id': 1}", 9),
    FAIL("{'$set': {'a': 1}, 'b': 1}", "{'_id': 1}", 9),
    FAIL("{'$set': {'a': 1, 'a.b': 2}}", "{'_id': 1}", 40),
    FAIL("{'$set': {'a.b': 1, 'a': 2}}", "{'_id': 1}", 40),
    FAIL("{'$set': {'a': 1}, '$inc': {'a': 1}}", "{'_id': 1}", 40),
    FAIL("{'$set': {'a.b': 1}, '$unset': {'a': 1}}", "{'_id': 1}", 40),
    OK("{'$set': {'a.b': 1, 'a.c': 2}}", "{'_id': 1}", "{'_id': 1, 'a': {'b': 1, 'c': 2}}"),
    OK("{'$set': {'ab': 1, 'a': 2}}", "{'_id': 1}", "{'_id': 1, 'a': 2, 'ab': 1}"),
    SAME("{'$setOnInsert': {'a': 5}}", "{'_id': 1}"),
    SAME("{'$setOnInsert': {'a.b': 5}}", "{'_id': 1}"),
    {"{'$setOnInsert': {'a': 5}}", "{'_id': 1}", "{'_id': 1, 'a': 5}", 0, 1, NULL, -1, true},
    {"{'$set': {'b': 1}, '$setOnInsert': {'a': 5}}", "{'_id': 1}", "{'_id': 1, 'a': 5, 'b': 1}",
     0, 1, NULL, -1, true},
    FAIL("{'$set': {'a': 1}, '$setOnInsert': {'a': 2}}", "{'_id': 1}", 40),
};

/* $set of existing top-level fields to scalars: the one-pass path of
 * upd_apply.c (values swapped in place); the rest falls back to the tree. */
static const ucase_t set_in_place_cases[] = {
    OK("{'$set': {'b': 'x'}}", "{'_id': 1, 'a': 1, 'b': 2, 'c': 3}",
       "{'_id': 1, 'a': 1, 'b': 'x', 'c': 3}"),
    OK("{'$set': {'c': 'x'}}", "{'_id': 1, 'a': 1, 'b': 2, 'c': 3}",
       "{'_id': 1, 'a': 1, 'b': 2, 'c': 'x'}"),
    OK("{'$set': {'a': 'longer than before'}}", "{'_id': 1, 'a': 1, 'b': 2}",
       "{'_id': 1, 'a': 'longer than before', 'b': 2}"),
    OK("{'$set': {'c': 7, 'a': 5}}", "{'_id': 1, 'a': 1, 'b': 2, 'c': 3}",
       "{'_id': 1, 'a': 5, 'b': 2, 'c': 7}"),
    OK("{'$set': {'a': 5, 'b': 6}}", "{'_id': 1, 'a': 1, 'b': 2}", "{'_id': 1, 'a': 5, 'b': 6}"),
    OK("{'$set': {'a': null}}", "{'_id': 1, 'a': {'x': 1}, 'b': [1]}",
       "{'_id': 1, 'a': null, 'b': [1]}"),
    OK("{'$set': {'b': 1.5}}", "{'_id': 1, 'b': 1}", "{'_id': 1, 'b': 1.5}"),
    SAME("{'$set': {'b': 2, 'a': 1}}", "{'_id': 1, 'a': 1, 'b': 2}"),
    OK("{'$set': {'a': 5, 'z': 6}}", "{'_id': 1, 'a': 1, 'b': 2}",
       "{'_id': 1, 'a': 5, 'b': 2, 'z': 6}"),
    OK("{'$set': {'a': 5}}", "{'b': 2, '_id': 1, 'a': 1}", "{'_id': 1, 'b': 2, 'a': 5}"),
    OK("{'$set': {'a': {'$numberLong': '5'}}}", "{'_id': 1, 'a': 'abc'}",
       "{'_id': 1, 'a': {'$numberLong': '5'}}"),
    FAIL("{'$set': {'_id': 2}}", "{'_id': 1, 'a': 1}", 66),
};

static const ucase_t unset_cases[] = {
    OK("{'$unset': {'a': ''}}", "{'_id': 1, 'a': 1, 'b': 2}", "{'_id': 1, 'b': 2}"),
    SAME("{'$unset': {'c': 1}}", "{'_id': 1, 'a': 1}"),
    OK("{'$unset': {'a.b': 1}}", "{'_id': 1, 'a': {'b': 1, 'c': 2}}",
       "{'_id': 1, 'a': {'c': 2}}"),
    OK("{'$unset': {'a.1': 1}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [1, null, 3]}"),
    SAME("{'$unset': {'a.b': 1}}", "{'_id': 1, 'a': 1}"),
    SAME("{'$unset': {'a.b': 1}}", "{'_id': 1, 'a': [{'b': 1}]}"),
    SAME("{'$unset': {'a.5': 1}}", "{'_id': 1, 'a': [1]}"),
    OK("{'$unset': {'a': 1, 'b': 1}}", "{'_id': 1, 'a': 1, 'b': 2, 'c': 3}",
       "{'_id': 1, 'c': 3}"),
    FAIL("{'$unset': {'_id': 1}}", "{'_id': 1}", 66),
};

static const ucase_t arith_cases[] = {
    OK("{'$inc': {'a': 1}}", "{'_id': 1, 'a': 1}", "{'_id': 1, 'a': 2}"),
    OK("{'$inc': {'a': 1}}", "{'_id': 1}", "{'_id': 1, 'a': 1}"),
    OK("{'$inc': {'a': -5}}", "{'_id': 1, 'a': 1}", "{'_id': 1, 'a': -4}"),
    OK("{'$inc': {'a': 1}}", "{'_id': 1, 'a': 2147483647}",
       "{'_id': 1, 'a': {'$numberLong': '2147483648'}}"),
    OK("{'$inc': {'a': -1}}", "{'_id': 1, 'a': -2147483648}",
       "{'_id': 1, 'a': {'$numberLong': '-2147483649'}}"),
    OK("{'$inc': {'a': {'$numberLong': '1'}}}", "{'_id': 1, 'a': 1}",
       "{'_id': 1, 'a': {'$numberLong': '2'}}"),
    OK("{'$inc': {'a': 1.5}}", "{'_id': 1, 'a': 1}", "{'_id': 1, 'a': 2.5}"),
    OK("{'$inc': {'a': 1}}", "{'_id': 1, 'a': 0.5}", "{'_id': 1, 'a': 1.5}"),
    OK("{'$inc': {'a': 1}}", "{'_id': 1, 'a': {'$numberDecimal': '1.5'}}",
       "{'_id': 1, 'a': {'$numberDecimal': '2.5'}}"),
    OK("{'$inc': {'a': {'$numberDecimal': '0.10'}}}", "{'_id': 1, 'a': {'$numberDecimal': '0.2'}}",
       "{'_id': 1, 'a': {'$numberDecimal': '0.30'}}"),
    OK("{'$inc': {'a': {'$numberDecimal': '-3'}}}", "{'_id': 1, 'a': 3}",
       "{'_id': 1, 'a': {'$numberDecimal': '0'}}"),
    FAIL("{'$inc': {'a': 1}}", "{'_id': 1, 'a': 'x'}", 14),
    FAIL("{'$inc': {'a': 1}}", "{'_id': 1, 'a': null}", 14),
    FAIL("{'$inc': {'a': 'x'}}", "{'_id': 1}", 14),
    FAIL("{'$inc': {'a': 1}}", "{'_id': 1, 'a': {'$numberLong': '9223372036854775807'}}", 2),
    FAIL("{'$inc': {'a.b': 1}}", "{'_id': 1, 'a': [1]}", 28),
    OK("{'$inc': {'a.b': 1}}", "{'_id': 1, 'a': {'b': 1}}", "{'_id': 1, 'a': {'b': 2}}"),
    OK("{'$inc': {'a.1': 10}}", "{'_id': 1, 'a': [1, 2]}", "{'_id': 1, 'a': [1, 12]}"),
    SAME("{'$inc': {'a': 0}}", "{'_id': 1, 'a': 5}"),
    /* top-level fields the document holds: swapped in place (the tree's bytes) */
    OK("{'$inc': {'a': 1, 'c': 2}, '$set': {'b': 'x'}}", "{'_id': 1, 'a': 1, 'b': 2, 'c': 3, 'd': 4}",
       "{'_id': 1, 'a': 2, 'b': 'x', 'c': 5, 'd': 4}"),
    OK("{'$inc': {'b': 1}}", "{'_id': 1, 'a': 1, 'b': 2147483647, 'c': 3}",
       "{'_id': 1, 'a': 1, 'b': {'$numberLong': '2147483648'}, 'c': 3}"),
    OK("{'$mul': {'b': 0.5}}", "{'_id': 1, 'b': 3, 'c': 3}", "{'_id': 1, 'b': 1.5, 'c': 3}"),
    OK("{'$inc': {'b': 1}}", "{'_id': 1, 'a': 1, 'c': 3}", "{'_id': 1, 'a': 1, 'c': 3, 'b': 1}"),
    OK("{'$inc': {'a': 1}}", "{'a': 1, '_id': 1}", "{'_id': 1, 'a': 2}"),
    FAIL("{'$inc': {'b': 1}}", "{'_id': 1, 'b': 'x', 'c': 1}", 14),
    FAIL("{'$inc': {'b': 1}, '$set': {'c': 2}}",
         "{'_id': 1, 'b': {'$numberLong': '9223372036854775807'}, 'c': 1}", 2),
    FAIL("{'$inc': {'_id': 1}}", "{'_id': 1}", 66),
    OK("{'$mul': {'a': 2}}", "{'_id': 1, 'a': 5}", "{'_id': 1, 'a': 10}"),
    OK("{'$mul': {'a': 2}}", "{'_id': 1}", "{'_id': 1, 'a': 0}"),
    OK("{'$mul': {'a': 2.5}}", "{'_id': 1}", "{'_id': 1, 'a': 0.0}"),
    OK("{'$mul': {'a': {'$numberLong': '3'}}}", "{'_id': 1}",
       "{'_id': 1, 'a': {'$numberLong': '0'}}"),
    OK("{'$mul': {'a': 65536}}", "{'_id': 1, 'a': 65536}",
       "{'_id': 1, 'a': {'$numberLong': '4294967296'}}"),
    OK("{'$mul': {'a': 0.5}}", "{'_id': 1, 'a': 3}", "{'_id': 1, 'a': 1.5}"),
    OK("{'$mul': {'a': {'$numberDecimal': '1.5'}}}", "{'_id': 1, 'a': 2}",
       "{'_id': 1, 'a': {'$numberDecimal': '3.0'}}"),
    FAIL("{'$mul': {'a': {'$numberLong': '4294967296'}}}",
         "{'_id': 1, 'a': {'$numberLong': '4294967296'}}", 2),
    FAIL("{'$mul': {'a': 2}}", "{'_id': 1, 'a': 'x'}", 14),
    FAIL("{'$mul': {'a': true}}", "{'_id': 1}", 14),
    OK("{'$min': {'a': 3}}", "{'_id': 1, 'a': 5}", "{'_id': 1, 'a': 3}"),
    SAME("{'$min': {'a': 7}}", "{'_id': 1, 'a': 5}"),
    SAME("{'$min': {'a': 5.0}}", "{'_id': 1, 'a': 5}"),
    OK("{'$min': {'a': 7}}", "{'_id': 1}", "{'_id': 1, 'a': 7}"),
    OK("{'$min': {'a': null}}", "{'_id': 1, 'a': 5}", "{'_id': 1, 'a': null}"),
    OK("{'$max': {'a': 7}}", "{'_id': 1, 'a': 5}", "{'_id': 1, 'a': 7}"),
    SAME("{'$max': {'a': 3}}", "{'_id': 1, 'a': 5}"),
    OK("{'$max': {'a': 'x'}}", "{'_id': 1, 'a': 5}", "{'_id': 1, 'a': 'x'}"),
    OK("{'$max': {'a.b': 2}}", "{'_id': 1, 'a': {'b': 1}}", "{'_id': 1, 'a': {'b': 2}}"),
};

static const ucase_t rename_cases[] = {
    OK("{'$rename': {'a': 'b'}}", "{'_id': 1, 'a': 1, 'c': 2}", "{'_id': 1, 'c': 2, 'b': 1}"),
    SAME("{'$rename': {'x': 'b'}}", "{'_id': 1, 'a': 1}"),
    OK("{'$rename': {'a': 'b'}}", "{'_id': 1, 'a': 1, 'b': 2}", "{'_id': 1, 'b': 1}"),
    OK("{'$rename': {'a': 'b'}}", "{'_id': 1, 'b': 2, 'a': 1}", "{'_id': 1, 'b': 1}"),
    OK("{'$rename': {'a.b': 'c'}}", "{'_id': 1, 'a': {'b': 1}}", "{'_id': 1, 'a': {}, 'c': 1}"),
    OK("{'$rename': {'a': 'x.y'}}", "{'_id': 1, 'a': 1}", "{'_id': 1, 'x': {'y': 1}}"),
    OK("{'$rename': {'a': 'b'}}", "{'_id': 1, 'a': [1, {'c': 2}]}",
       "{'_id': 1, 'b': [1, {'c': 2}]}"),
    FAIL("{'$rename': {'a.0': 'b'}}", "{'_id': 1, 'a': [1]}", 2),
    FAIL("{'$rename': {'a': 'b.0'}}", "{'_id': 1, 'a': 1, 'b': [1]}", 2),
    FAIL("{'$rename': {'a': 'b.c'}}", "{'_id': 1, 'a': 1, 'b': 5}", 28),
    FAIL("{'$rename': {'a': 1}}", "{'_id': 1}", 2),
    FAIL("{'$rename': {'a': 'a'}}", "{'_id': 1}", 2),
    FAIL("{'$rename': {'a': 'a.b'}}", "{'_id': 1}", 2),
    FAIL("{'$rename': {'a.b': 'a'}}", "{'_id': 1}", 2),
    FAIL("{'$rename': {'a.$': 'b'}}", "{'_id': 1}", 2),
    FAIL("{'$rename': {'a': 'b.$[]'}}", "{'_id': 1}", 2),
    FAIL("{'$rename': {'a': ''}}", "{'_id': 1}", 56),
    FAIL("{'$rename': {'a': '_id'}}", "{'_id': 1, 'a': 2}", 66),
    FAIL("{'$rename': {'_id': 'b'}}", "{'_id': 1}", 66),
    FAIL("{'$rename': {'a': 'b'}, '$set': {'b': 1}}", "{'_id': 1}", 40),
    FAIL("{'$rename': {'a': 'b'}, '$set': {'a': 1}}", "{'_id': 1}", 40),
};

static const ucase_t date_cases[] = {
    OK("{'$currentDate': {'a': true}}", "{'_id': 1}",
       "{'_id': 1, 'a': {'$date': {'$numberLong': '1700000000000'}}}"),
    OK("{'$currentDate': {'a.b': true}}", "{'_id': 1}",
       "{'_id': 1, 'a': {'b': {'$date': {'$numberLong': '1700000000000'}}}}"),
    FAIL("{'$currentDate': {'a': {'$foo': 'date'}}}", "{'_id': 1}", 2),
    FAIL("{'$currentDate': {'a': 5}}", "{'_id': 1}", 2),
    FAIL("{'$currentDate': {'a': {}}}", "{'_id': 1}", 2),
};

static const ucase_t push_cases[] = {
    OK("{'$push': {'a': 1}}", "{'_id': 1}", "{'_id': 1, 'a': [1]}"),
    OK("{'$push': {'a': 2}}", "{'_id': 1, 'a': [1]}", "{'_id': 1, 'a': [1, 2]}"),
    OK("{'$push': {'a': [1, 2]}}", "{'_id': 1, 'a': []}", "{'_id': 1, 'a': [[1, 2]]}"),
    OK("{'$push': {'a': {'b': 1}}}", "{'_id': 1, 'a': []}", "{'_id': 1, 'a': [{'b': 1}]}"),
    OK("{'$push': {'a': {'$each': [2, 3]}}}", "{'_id': 1, 'a': [1]}",
       "{'_id': 1, 'a': [1, 2, 3]}"),
    OK("{'$push': {'a': {'$each': []}}}", "{'_id': 1}", "{'_id': 1, 'a': []}"),
    SAME("{'$push': {'a': {'$each': []}}}", "{'_id': 1, 'a': [1]}"),
    OK("{'$push': {'a': {'$each': [2, 3], '$position': 0}}}", "{'_id': 1, 'a': [1]}",
       "{'_id': 1, 'a': [2, 3, 1]}"),
    OK("{'$push': {'a': {'$each': [9], '$position': 1}}}", "{'_id': 1, 'a': [1, 2, 3]}",
       "{'_id': 1, 'a': [1, 9, 2, 3]}"),
    OK("{'$push': {'a': {'$each': [9], '$position': -1}}}", "{'_id': 1, 'a': [1, 2, 3]}",
       "{'_id': 1, 'a': [1, 2, 9, 3]}"),
    OK("{'$push': {'a': {'$each': [9], '$position': -10}}}", "{'_id': 1, 'a': [1, 2]}",
       "{'_id': 1, 'a': [9, 1, 2]}"),
    OK("{'$push': {'a': {'$each': [9], '$position': 10}}}", "{'_id': 1, 'a': [1, 2]}",
       "{'_id': 1, 'a': [1, 2, 9]}"),
    OK("{'$push': {'a': {'$each': [4, 5], '$slice': 3}}}", "{'_id': 1, 'a': [1, 2, 3]}",
       "{'_id': 1, 'a': [1, 2, 3]}"),
    OK("{'$push': {'a': {'$each': [4, 5], '$slice': -3}}}", "{'_id': 1, 'a': [1, 2, 3]}",
       "{'_id': 1, 'a': [3, 4, 5]}"),
    OK("{'$push': {'a': {'$each': [4], '$slice': 0}}}", "{'_id': 1, 'a': [1, 2, 3]}",
       "{'_id': 1, 'a': []}"),
    OK("{'$push': {'a': {'$each': [], '$slice': 1}}}", "{'_id': 1, 'a': [1, 2, 3]}",
       "{'_id': 1, 'a': [1]}"),
    OK("{'$push': {'a': {'$each': [3, 1], '$sort': 1}}}", "{'_id': 1, 'a': [2]}",
       "{'_id': 1, 'a': [1, 2, 3]}"),
    OK("{'$push': {'a': {'$each': [3, 1], '$sort': -1}}}", "{'_id': 1, 'a': [2]}",
       "{'_id': 1, 'a': [3, 2, 1]}"),
    OK("{'$push': {'a': {'$each': ['b', 1], '$sort': 1}}}", "{'_id': 1, 'a': [null]}",
       "{'_id': 1, 'a': [null, 1, 'b']}"),
    OK("{'$push': {'a': {'$each': [{'s': 3}, {'s': 1}], '$sort': {'s': 1}}}}",
       "{'_id': 1, 'a': [{'s': 2}]}", "{'_id': 1, 'a': [{'s': 1}, {'s': 2}, {'s': 3}]}"),
    OK("{'$push': {'a': {'$each': [{'s': 3, 'k': 1}, {'s': 1}], '$sort': {'s': -1}, "
       "'$slice': 2}}}",
       "{'_id': 1, 'a': [{'s': 2}]}", "{'_id': 1, 'a': [{'s': 3, 'k': 1}, {'s': 2}]}"),
    OK("{'$push': {'a': {'$each': [{'s': 1, 'n': 2}, {'s': 1, 'n': 1}], '$sort': {'s': 1}}}}",
       "{'_id': 1, 'a': []}", "{'_id': 1, 'a': [{'s': 1, 'n': 2}, {'s': 1, 'n': 1}]}"),
    OK("{'$push': {'a.b': 1}}", "{'_id': 1}", "{'_id': 1, 'a': {'b': [1]}}"),
    FAIL("{'$push': {'a': 2}}", "{'_id': 1, 'a': 1}", 2),
    FAIL("{'$push': {'a': 2}}", "{'_id': 1, 'a': {'b': 1}}", 2),
    FAIL("{'$push': {'a': {'$each': 1}}}", "{'_id': 1}", 2),
    FAIL("{'$push': {'a': {'$each': [1], '$foo': 1}}}", "{'_id': 1}", 2),
    FAIL("{'$push': {'a': {'$each': [1], '$slice': 'x'}}}", "{'_id': 1}", 2),
    FAIL("{'$push': {'a': {'$each': [1], '$slice': 1.5}}}", "{'_id': 1}", 2),
    FAIL("{'$push': {'a': {'$each': [1], '$position': 'x'}}}", "{'_id': 1}", 2),
    FAIL("{'$push': {'a': {'$each': [1], '$sort': 2}}}", "{'_id': 1}", 2),
    FAIL("{'$push': {'a': {'$each': [1], '$sort': {}}}}", "{'_id': 1}", 2),
    FAIL("{'$push': {'a': {'$each': [1], '$sort': {'x': 'up'}}}}", "{'_id': 1}", 2),
    /* Decimal128 infinities and huge values are not integers (the fuzzer's
     * Infinity as a $sort once reached a conversion to int64). */
    FAIL("{'$push': {'a': {'$each': [1], '$sort': {'$numberDecimal': 'Infinity'}}}}",
         "{'_id': 1}", 2),
    FAIL("{'$push': {'a': {'$each': [1], '$sort': {'x': {'$numberDecimal': '-Infinity'}}}}}",
         "{'_id': 1}", 2),
    FAIL("{'$push': {'a': {'$each': [1], '$slice': {'$numberDecimal': 'Infinity'}}}}",
         "{'_id': 1}", 2),
    FAIL("{'$push': {'a': {'$each': [1], '$position': {'$numberDecimal': '1E+30'}}}}",
         "{'_id': 1}", 2),
    OK("{'$push': {'a': {'$each': [9], '$position': {'$numberLong': '-9223372036854775808'}}}}",
       "{'_id': 1, 'a': [1, 2]}", "{'_id': 1, 'a': [9, 1, 2]}"),
    OK("{'$addToSet': {'a': 3}}", "{'_id': 1, 'a': [1, 2]}", "{'_id': 1, 'a': [1, 2, 3]}"),
    SAME("{'$addToSet': {'a': 2}}", "{'_id': 1, 'a': [1, 2]}"),
    SAME("{'$addToSet': {'a': 2.0}}", "{'_id': 1, 'a': [1, 2]}"),
    OK("{'$addToSet': {'a': 1}}", "{'_id': 1}", "{'_id': 1, 'a': [1]}"),
    OK("{'$addToSet': {'a': {'$each': [2, 3, 3, 4]}}}", "{'_id': 1, 'a': [1, 2]}",
       "{'_id': 1, 'a': [1, 2, 3, 4]}"),
    OK("{'$addToSet': {'a': {'$each': [5, 5]}}}", "{'_id': 1}", "{'_id': 1, 'a': [5]}"),
    SAME("{'$addToSet': {'a': {'b': 1}}}", "{'_id': 1, 'a': [{'b': 1}]}"),
    OK("{'$addToSet': {'a': {'c': 1, 'b': 1}}}", "{'_id': 1, 'a': [{'b': 1, 'c': 1}]}",
       "{'_id': 1, 'a': [{'b': 1, 'c': 1}, {'c': 1, 'b': 1}]}"),
    OK("{'$addToSet': {'a': [1]}}", "{'_id': 1, 'a': [1]}", "{'_id': 1, 'a': [1, [1]]}"),
    FAIL("{'$addToSet': {'a': 1}}", "{'_id': 1, 'a': 1}", 2),
    FAIL("{'$addToSet': {'a': {'$each': 1}}}", "{'_id': 1}", 14),
    FAIL("{'$addToSet': {'a': {'$each': [1], 'x': 1}}}", "{'_id': 1}", 2),
};

static const ucase_t remove_cases[] = {
    OK("{'$pop': {'a': 1}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [1, 2]}"),
    OK("{'$pop': {'a': -1}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [2, 3]}"),
    OK("{'$pop': {'a': 1.0}}", "{'_id': 1, 'a': [1]}", "{'_id': 1, 'a': []}"),
    SAME("{'$pop': {'a': 1}}", "{'_id': 1, 'a': []}"),
    SAME("{'$pop': {'a': 1}}", "{'_id': 1}"),
    SAME("{'$pop': {'a.b': 1}}", "{'_id': 1, 'a': 1}"),
    FAIL("{'$pop': {'a': 1}}", "{'_id': 1, 'a': 1}", 14),
    FAIL("{'$pop': {'a': 2}}", "{'_id': 1}", 9),
    FAIL("{'$pop': {'a': 'x'}}", "{'_id': 1}", 9),
    OK("{'$pull': {'a': 2}}", "{'_id': 1, 'a': [1, 2, 3, 2]}", "{'_id': 1, 'a': [1, 3]}"),
    OK("{'$pull': {'a': 2}}", "{'_id': 1, 'a': [2.0, {'$numberLong': '2'}, 3]}",
       "{'_id': 1, 'a': [3]}"),
    OK("{'$pull': {'a': {'$gte': 2}}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [1]}"),
    OK("{'$pull': {'a': {'$in': [1, 3]}}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [2]}"),
    OK("{'$pull': {'a': {'b': 1}}}", "{'_id': 1, 'a': [{'b': 1, 'c': 2}, {'b': 2}, 1]}",
       "{'_id': 1, 'a': [{'b': 2}, 1]}"),
    OK("{'$pull': {'a': {'b': {'$gt': 1}}}}", "{'_id': 1, 'a': [{'b': 1}, {'b': 2}]}",
       "{'_id': 1, 'a': [{'b': 1}]}"),
    OK("{'$pull': {'a': {'$or': [{'b': 1}, {'c': 1}]}}}",
       "{'_id': 1, 'a': [{'b': 1}, {'c': 1}, {'d': 1}]}", "{'_id': 1, 'a': [{'d': 1}]}"),
    OK("{'$pull': {'a': [1, 2]}}", "{'_id': 1, 'a': [[1, 2], [2, 1], 1]}",
       "{'_id': 1, 'a': [[2, 1], 1]}"),
    OK("{'$pull': {'a': {'$regularExpression': {'pattern': '^x', 'options': ''}}}}",
       "{'_id': 1, 'a': ['xa', 'ya', 'xb']}", "{'_id': 1, 'a': ['ya']}"),
    OK("{'$pull': {'a.b': 1}}", "{'_id': 1, 'a': {'b': [1, 2]}}", "{'_id': 1, 'a': {'b': [2]}}"),
    SAME("{'$pull': {'a': 5}}", "{'_id': 1, 'a': [1]}"),
    SAME("{'$pull': {'a': 5}}", "{'_id': 1}"),
    FAIL("{'$pull': {'a': 5}}", "{'_id': 1, 'a': 5}", 2),
    OK("{'$pullAll': {'a': [1, 3]}}", "{'_id': 1, 'a': [1, 2, 3, 1]}", "{'_id': 1, 'a': [2]}"),
    OK("{'$pullAll': {'a': [{'b': 1}]}}", "{'_id': 1, 'a': [{'b': 1}, {'b': 1, 'c': 1}]}",
       "{'_id': 1, 'a': [{'b': 1, 'c': 1}]}"),
    SAME("{'$pullAll': {'a': [1]}}", "{'_id': 1}"),
    FAIL("{'$pullAll': {'a': 1}}", "{'_id': 1}", 2),
    FAIL("{'$pullAll': {'a': [1]}}", "{'_id': 1, 'a': 1}", 2),
};

static const ucase_t bit_cases[] = {
    OK("{'$bit': {'a': {'and': 10}}}", "{'_id': 1, 'a': 13}", "{'_id': 1, 'a': 8}"),
    OK("{'$bit': {'a': {'or': 10}}}", "{'_id': 1, 'a': 13}", "{'_id': 1, 'a': 15}"),
    OK("{'$bit': {'a': {'xor': 10}}}", "{'_id': 1, 'a': 13}", "{'_id': 1, 'a': 7}"),
    OK("{'$bit': {'a': {'and': 12, 'or': 1}}}", "{'_id': 1, 'a': 13}", "{'_id': 1, 'a': 13}"),
    OK("{'$bit': {'a': {'or': {'$numberLong': '2'}}}}", "{'_id': 1, 'a': 1}",
       "{'_id': 1, 'a': {'$numberLong': '3'}}"),
    OK("{'$bit': {'a': {'or': 5}}}", "{'_id': 1}", "{'_id': 1, 'a': 5}"),
    FAIL("{'$bit': {'a': {'or': 5}}}", "{'_id': 1, 'a': 1.0}", 2),
    FAIL("{'$bit': {'a': {'or': 5.0}}}", "{'_id': 1}", 2),
    FAIL("{'$bit': {'a': 5}}", "{'_id': 1}", 2),
    FAIL("{'$bit': {'a': {}}}", "{'_id': 1}", 2),
    FAIL("{'$bit': {'a': {'nand': 1}}}", "{'_id': 1}", 2),
};

static const ucase_t positional_cases[] = {
    {"{'$set': {'a.$': 9}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [1, 9, 3]}", 0, 1,
     NULL, 1, false},
    {"{'$set': {'a.$.b': 1}}", "{'_id': 1, 'a': [{'b': 0}]}", "{'_id': 1, 'a': [{'b': 1}]}", 0,
     1, NULL, 0, false},
    {"{'$inc': {'a.$.n': 1}, '$set': {'t': 1}}", "{'_id': 1, 'a': [{'n': 1}, {'n': 5}]}",
     "{'_id': 1, 'a': [{'n': 1}, {'n': 6}], 't': 1}", 0, 1, NULL, 1, false},
    {"{'$unset': {'a.$': 1}}", "{'_id': 1, 'a': [1, 2]}", "{'_id': 1, 'a': [null, 2]}", 0, 1,
     NULL, 0, false},
    FAIL("{'$set': {'a.$': 9}}", "{'_id': 1, 'a': [1]}", 2),
    FAIL("{'$set': {'a.$.b.$': 9}}", "{'_id': 1}", 2),
    FAIL("{'$set': {'$': 9}}", "{'_id': 1}", 2),
    FAIL("{'$set': {'$[]': 9}}", "{'_id': 1}", 2),
    OK("{'$inc': {'a.$[]': 1}}", "{'_id': 1, 'a': [1, 2]}", "{'_id': 1, 'a': [2, 3]}"),
    OK("{'$set': {'a.$[].b': 1}}", "{'_id': 1, 'a': [{'b': 0}, {'c': 1}]}",
       "{'_id': 1, 'a': [{'b': 1}, {'c': 1, 'b': 1}]}"),
    OK("{'$set': {'a.$[].b.$[]': 0}}", "{'_id': 1, 'a': [{'b': [1, 2]}, {'b': [3]}]}",
       "{'_id': 1, 'a': [{'b': [0, 0]}, {'b': [0]}]}"),
    SAME("{'$set': {'a.$[]': 1}}", "{'_id': 1, 'a': []}"),
    OK("{'$unset': {'a.$[].b': 1}}", "{'_id': 1, 'a': [{'b': 0, 'c': 1}, 2]}",
       "{'_id': 1, 'a': [{'c': 1}, 2]}"),
    OK("{'$push': {'a.$[]': 9}}", "{'_id': 1, 'a': [[1], []]}", "{'_id': 1, 'a': [[1, 9], [9]]}"),
    FAIL("{'$set': {'a.$[].b': 1}}", "{'_id': 1, 'a': [1]}", 28),
    OK("{'$set': {'a.0.1': 9}}", "{'_id': 1, 'a': [[1, 2]]}", "{'_id': 1, 'a': [[1, 9]]}"),
    OK("{'$set': {'a.1.0': 9}}", "{'_id': 1, 'a': [[1]]}", "{'_id': 1, 'a': [[1], {'0': 9}]}"),
    FAIL("{'$set': {'a.2000000': 1}}", "{'_id': 1, 'a': []}", 2),
    {"{'$set': {'a.$': 1}}", "{}", NULL, 2, -1, NULL, -1, true},
    FAIL("{'$set': {'a.$[]': 1}}", "{'_id': 1}", 2),
    FAIL("{'$set': {'a.$[]': 1}}", "{'_id': 1, 'a': 5}", 2),
    FAIL("{'$set': {'a.$[]': 1}}", "{'_id': 1, 'a': {'x': 5}}", 2),
    {"{'$set': {'a.$[x]': 0}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [1, 0, 0]}", 0, 1,
     "[{'x': {'$gt': 1}}]", -1, false},
    {"{'$inc': {'g.$[e].grade': 5}}", "{'_id': 1, 'g': [{'grade': 80}, {'grade': 90}]}",
     "{'_id': 1, 'g': [{'grade': 80}, {'grade': 95}]}", 0, 1, "[{'e.grade': {'$gte': 85}}]", -1,
     false},
    {"{'$set': {'a.$[x]': 0}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [1, 2, 3]}", 0, 0,
     "[{'x': {'$gt': 5}}]", -1, false},
    {"{'$set': {'a.$[x].b.$[y]': 0}}",
     "{'_id': 1, 'a': [{'k': 1, 'b': [1, 5]}, {'k': 2, 'b': [7]}]}",
     "{'_id': 1, 'a': [{'k': 1, 'b': [1, 0]}, {'k': 2, 'b': [7]}]}", 0, 1,
     "[{'x.k': 1}, {'y': {'$gte': 5}}]", -1, false},
    {"{'$set': {'a.$[x].v': 0}}", "{'_id': 1, 'a': [{'k': 1, 'v': 1}, {'k': 2, 'v': 2}]}",
     "{'_id': 1, 'a': [{'k': 1, 'v': 0}, {'k': 2, 'v': 0}]}", 0, 1,
     "[{'$or': [{'x.k': 1}, {'x.k': 2}]}]", -1, false},
    {"{'$set': {'a.$[x]': 0, 'a.$[]': 1}}", "{'_id': 1, 'a': [1]}", NULL, 40, -1,
     "[{'x': 1}]", -1, false},
    {"{'$set': {'a.$[y]': 0}}", "{'_id': 1, 'a': [1]}", NULL, 2, -1, "[{'x': 1}]", -1, false},
    {"{'$set': {'a.$[x]': 0}}", "{'_id': 1, 'a': [1]}", NULL, 9, -1, "[{'x': 1}, {'y': 1}]", -1,
     false},
    {"{'$set': {'a.$[x]': 0}}", "{'_id': 1, 'a': [1]}", NULL, 9, -1, "[{'x': 1}, {'x': 2}]", -1,
     false},
    {"{'$set': {'a.$[X]': 0}}", "{'_id': 1, 'a': [1]}", NULL, 2, -1, "[{'X': 1}]", -1, false},
    {"{'$set': {'a.$[x]': 0}}", "{'_id': 1, 'a': [1]}", NULL, 9, -1, "[{'x': 1, 'y': 1}]", -1,
     false},
    {"{'$set': {'a': 0}}", "{'_id': 1, 'a': [1]}", NULL, 9, -1, "[{'x': 1}]", -1, false},
    {"{'$set': {'a.$[x]': 0}}", "{'_id': 1, 'a': [1]}", NULL, 2, -1, NULL, -1, false},
};

static const ucase_t replace_cases[] = {
    OK("{'b': 2}", "{'_id': 1, 'a': 1}", "{'_id': 1, 'b': 2}"),
    OK("{'b': 2, '_id': 1}", "{'_id': 1, 'a': 1}", "{'_id': 1, 'b': 2}"),
    OK("{'b': 2, '_id': 1.0}", "{'a': 1}", "{'_id': 1.0, 'b': 2}"),
    OK("{}", "{'_id': 1, 'a': 1}", "{'_id': 1}"),
    OK("{'b': 1}", "{}", "{'b': 1}"),
    OK("{'a': {'$x': 1}, 'b.c': 1}", "{'_id': 1}", "{'_id': 1, 'a': {'$x': 1}, 'b.c': 1}"),
    SAME("{'a': 1}", "{'_id': 1, 'a': 1}"),
    {"{'a': 2}", "{'_id': 1, 'a': 1}", "{'_id': 1, 'a': 2}", 0, 1, NULL, -1, false},
    FAIL("{'_id': 2}", "{'_id': 1}", 66),
    FAIL("{'_id': 1.0}", "{'_id': 1}", 66),
    FAIL("{'b': 1, '$x': 1}", "{'_id': 1}", 52),
    FAIL("{'_id': [1]}", "{}", 53),
    {"{'b': 1}", "{'_id': 1}", NULL, 9, -1, "[{'x': 1}]", -1, false},
    {"{'b': 1}", "{'_id': 1}", "{'_id': 1, 'b': 1}", 0, 1, "[]", -1, false},
};

static void run_table(const ucase_t *t, size_t n, int line)
{
    for (size_t i = 0; i < n; i++)
        run(&t[i], line * 1000 + (int)i);
}

#define RUN(t) run_table(t, sizeof(t) / sizeof(t[0]), __LINE__)

/* ---- upsert seeds ---------------------------------------------------------- */

typedef struct scase {
    const char *filter;
    const char *expect; /* NULL when an error is expected */
    int code;
} scase_t;

static const scase_t seed_cases[] = {
    {"{'a': 5}", "{'a': 5}", 0},
    {"{}", "{}", 0},
    {"{'_id': 1, 'a': {'$gt': 5}, 'b': {'$eq': 3}}", "{'_id': 1, 'b': 3}", 0},
    {"{'b': 1, '_id': 2}", "{'_id': 2, 'b': 1}", 0},
    {"{'b': 1, 'a': 2}", "{'a': 2, 'b': 1}", 0},
    {"{'a.b': 5, 'a.c': 6}", "{'a': {'b': 5, 'c': 6}}", 0},
    {"{'a.b.c': 5}", "{'a': {'b': {'c': 5}}}", 0},
    {"{'$and': [{'a': 1}, {'b': 2}]}", "{'a': 1, 'b': 2}", 0},
    {"{'$and': [{'$and': [{'a': 1}]}, {'b': {'$eq': 2}}]}", "{'a': 1, 'b': 2}", 0},
    {"{'$or': [{'a': 1}]}", "{'a': 1}", 0},
    {"{'$or': [{'a': 1}, {'b': 1}]}", "{}", 0},
    {"{'$nor': [{'a': 1}]}", "{}", 0},
    {"{'a': {'$regularExpression': {'pattern': 'x', 'options': ''}}}", "{}", 0},
    {"{'a': {'b': 1}}", "{'a': {'b': 1}}", 0},
    {"{'a': {'$eq': {'b': 1}}}", "{'a': {'b': 1}}", 0},
    {"{'a': [1, 2]}", "{'a': [1, 2]}", 0},
    {"{'a': {'$in': [1, 2]}, 'c': {'$exists': true}}", "{}", 0},
    {"{'_id': {'$eq': 7}}", "{'_id': 7}", 0},
    {"{'a': 1, 'a.b': 2}", NULL, 54},
    {"{'a': 1, '$and': [{'a': 2}]}", NULL, 54},
    {"{'a.b': 1, '$and': [{'a': {'c': 1}}]}", NULL, 54},
    {"{'a..b': 1}", NULL, 56},
};

static void test_seeds(void)
{
    for (size_t i = 0; i < sizeof(seed_cases) / sizeof(seed_cases[0]); i++) {
        const scase_t *c = &seed_cases[i];
        bson_t *f = json(c->filter), out = BSON_INITIALIZER;
        sbl_err_t err = {0};
        int rc = sbl_upsert_seed(f, &out, &err);
        if (c->expect == NULL) {
            CHECK_MSG(rc == c->code, "seed %s: want %d got %d", c->filter, c->code, rc);
        } else {
            bson_t *want = json(c->expect);
            char *got = bson_as_canonical_extended_json(&out, NULL);
            CHECK_MSG(rc == 0 && bson_equal(want, &out), "seed %s: got %s (%d %s)", c->filter,
                      got, rc, err.msg);
            bson_free(got);
            bson_destroy(want);
        }
        bson_destroy(&out);
        bson_destroy(f);
    }
}

/* An upsert: seed from the filter, then apply as an insert. */
static void test_upsert_flow(void)
{
    bson_t *f = json("{'_id': 3, 'a': 1, 'x': {'$gt': 1}}");
    bson_t *spec = json("{'$set': {'b': 2}, '$setOnInsert': {'c': 3}, '$inc': {'a': 1}}");
    bson_t seed = BSON_INITIALIZER, out = BSON_INITIALIZER;
    bson_t *want = json("{'_id': 3, 'a': 2, 'b': 2, 'c': 3}");
    sbl_err_t err = {0};
    bool changed = false;

    CHECK(sbl_upsert_seed(f, &seed, &err) == 0);
    sbl_update_t *u = sbl_update_new(spec, NULL, &err);
    CHECK(u != NULL && !sbl_update_is_replacement(u));
    CHECK(sbl_update_apply(u, &seed, -1, true, NOW_MS, &out, &changed, &err) == 0);
    CHECK(changed);
    CHECK(bson_equal(&out, want));
    sbl_update_free(u);
    bson_destroy(&out);
    bson_destroy(want);

    /* A replacement upsert keeps only the seed's _id. */
    bson_t *repl = json("{'z': 1}");
    u = sbl_update_new(repl, NULL, &err);
    CHECK(u != NULL && sbl_update_is_replacement(u));
    bson_init(&out);
    CHECK(sbl_update_apply(u, &seed, -1, true, NOW_MS, &out, &changed, &err) == 0);
    want = json("{'_id': 3, 'z': 1}");
    CHECK(bson_equal(&out, want));
    sbl_update_free(u);
    bson_destroy(want);
    bson_destroy(repl);
    bson_destroy(&out);

    /* $set of _id is allowed when the seed has none. */
    bson_t empty = BSON_INITIALIZER;
    bson_t *s2 = json("{'$set': {'a': 1, '_id': 5}}");
    u = sbl_update_new(s2, NULL, &err);
    bson_init(&out);
    CHECK(sbl_update_apply(u, &empty, -1, true, NOW_MS, &out, &changed, &err) == 0);
    want = json("{'_id': 5, 'a': 1}");
    CHECK(bson_equal(&out, want));
    sbl_update_free(u);
    bson_destroy(want);
    bson_destroy(s2);
    bson_destroy(&out);

    bson_destroy(spec);
    bson_destroy(f);
    bson_destroy(&seed);
}

/* Messages users see, checked word for word where MongoDB's wording is known. */
static void check_message(const char *update, const char *old, const char *filters,
                          const char *msg)
{
    bson_t *spec = json(update), *doc = json(old), out = BSON_INITIALIZER;
    bson_t *f = filters ? json_array(filters) : NULL;
    sbl_err_t err = {0};
    bool changed;
    sbl_update_t *u = sbl_update_new(spec, f, &err);
    if (u != NULL) {
        sbl_update_apply(u, doc, -1, false, NOW_MS, &out, &changed, &err);
        sbl_update_free(u);
    }
    CHECK_MSG(strcmp(err.msg, msg) == 0, "%s:\n   got  %s\n   want %s", update, err.msg, msg);
    bson_destroy(spec);
    bson_destroy(doc);
    if (f)
        bson_destroy(f);
    bson_destroy(&out);
}

static void test_messages(void)
{
    check_message("{'$foo': {'a': 1}}", "{}", NULL,
                  "Unknown modifier: $foo. Expected a valid update modifier or pipeline-style "
                  "update specified as an array");
    check_message("{'$set': {}}", "{}", NULL,
                  "'$set' is empty. You must specify a field like so: {$set: {<field_name>: "
                  "...}}");
    check_message("{'$set': {'a': 1, 'a.b': 1}}", "{}", NULL,
                  "Updating the path 'a.b' would create a conflict at 'a'");
    check_message("{'$set': {'a.b': 1, 'a': 1}}", "{}", NULL,
                  "Updating the path 'a' would create a conflict at 'a'");
    check_message("{'$inc': {'a': 1}}", "{'_id': 1, 'a': 'x'}", NULL,
                  "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'a' "
                  "of non-numeric type string");
    check_message("{'$set': {'_id': 2}}", "{'_id': 1}", NULL,
                  "Performing an update on the path '_id' would modify the immutable field "
                  "'_id'");
    check_message("{'$set': {'a.b': 1}}", "{'_id': 1, 'a': 1}", NULL,
                  "Cannot create field 'b' in element {a: 1}");
    check_message("{'$push': {'a': 1}}", "{'_id': 1, 'a': 1}", NULL,
                  "The field 'a' must be an array but is of type int in document {_id: 1}");
    check_message("{'$set': {'a.$': 1}}", "{'_id': 1, 'a': [1]}", NULL,
                  "The positional operator did not find the match needed from the query.");
    check_message("{'$set': {'a.$[x]': 1}}", "{'_id': 1}", NULL,
                  "No array filter found for identifier 'x' in path 'a.$[x]'");
    check_message("{'$set': {'a': 1}}", "{'_id': 1}", "[{'x': 1}]",
                  "The array filter for identifier 'x' was not used in the update { $set: { a: "
                  "1 } }");
    check_message("{'$set': {'a.$[]': 1}}", "{'_id': 1}", NULL,
                  "The path 'a' must exist in the document in order to apply array updates.");
    check_message("{'$set': {'a..b': 1}}", "{}", NULL,
                  "The update path 'a..b' contains an empty field name, which is not allowed.");
}

/* {$currentDate: {t: {$type: <ty>}}}, built by hand: the JSON reader takes $type for binary. */
static bson_t *current_date_type(const char *ty)
{
    return BCON_NEW("$currentDate", "{", "t", "{", "$type", BCON_UTF8(ty), "}", "}");
}

/* $currentDate with $type: the seconds come from now, the increment is positive. */
static void test_current_date_type(void)
{
    bson_t *spec = current_date_type("timestamp");
    bson_t *old = json("{'_id': 1, 't': 1}"), out = BSON_INITIALIZER;
    sbl_err_t err = {0};
    bool changed = false;
    bson_iter_t it;
    uint32_t ts = 0, inc = 0;
    sbl_update_t *u = sbl_update_new(spec, NULL, &err);

    CHECK(u != NULL);
    CHECK(sbl_update_apply(u, old, -1, false, NOW_MS, &out, &changed, &err) == 0);
    CHECK(changed);
    CHECK(bson_iter_init_find(&it, &out, "t") && BSON_ITER_HOLDS_TIMESTAMP(&it));
    bson_iter_timestamp(&it, &ts, &inc);
    CHECK(ts == (uint32_t)(NOW_MS / 1000) && inc > 0);
    sbl_update_free(u);
    bson_destroy(spec);
    bson_destroy(&out);

    spec = current_date_type("date");
    u = sbl_update_new(spec, NULL, &err);
    bson_init(&out);
    CHECK(u != NULL && sbl_update_apply(u, old, -1, false, NOW_MS, &out, &changed, &err) == 0);
    CHECK(bson_iter_init_find(&it, &out, "t") && BSON_ITER_HOLDS_DATE_TIME(&it) &&
          bson_iter_date_time(&it) == NOW_MS);
    sbl_update_free(u);
    bson_destroy(spec);
    bson_destroy(&out);

    spec = current_date_type("x");
    CHECK(sbl_update_new(spec, NULL, &err) == NULL && err.code == 2);
    bson_destroy(spec);
    bson_destroy(old);
}

/* A parsed update is reusable across documents and leaves out's prior content alone. */
/* err may be NULL: the codes still come back. */
static void test_null_err(void)
{
    bson_t *bad = json("{'$bogus': {'a': 1}}"), *spec = json("{'$inc': {'a': 1}}");
    bson_t *old = json("{'_id': 1, 'a': 'x'}"), out = BSON_INITIALIZER;
    bool changed;

    CHECK(sbl_update_new(bad, NULL, NULL) == NULL);
    sbl_update_t *u = sbl_update_new(spec, NULL, NULL);
    CHECK(u != NULL && sbl_update_apply(u, old, -1, false, NOW_MS, &out, &changed, NULL) == 14);
    CHECK(out.len == 5);
    sbl_update_free(u);
    bson_t *f = json("{'a': 1, 'a.b': 1}");
    bson_t seed = BSON_INITIALIZER;
    CHECK(sbl_upsert_seed(f, &seed, NULL) == 54);
    bson_destroy(&seed);
    bson_destroy(f);
    bson_destroy(bad);
    bson_destroy(spec);
    bson_destroy(old);
    bson_destroy(&out);
}

static void test_reuse(void)
{
    bson_t *spec = json("{'$inc': {'n': 1}}");
    sbl_err_t err = {0};
    sbl_update_t *u = sbl_update_new(spec, NULL, &err);
    bson_t doc = BSON_INITIALIZER;
    bool changed;

    BSON_APPEND_INT32(&doc, "_id", 1);
    for (int i = 0; i < 100; i++) {
        bson_t out = BSON_INITIALIZER;
        CHECK(sbl_update_apply(u, &doc, -1, false, NOW_MS, &out, &changed, &err) == 0);
        bson_destroy(&doc);
        bson_copy_to(&out, &doc);
        bson_destroy(&out);
    }
    bson_iter_t it;
    CHECK(bson_iter_init_find(&it, &doc, "n") && bson_iter_int32(&it) == 100);
    sbl_update_free(u);
    bson_destroy(&doc);
    bson_destroy(spec);
}

/* Append a code value "a\0<tag>" (5 bytes with the NUL) under key, byte by byte:
 * libbson's own appenders would stop at the NUL. */
static void append_nul_code(bson_t *doc, const char *key, char tag)
{
    uint8_t raw[64], *p = raw + 4;
    size_t klen = strlen(key);
    *p++ = BSON_TYPE_CODE;
    memcpy(p, key, klen + 1), p += klen + 1;
    uint32_t n = 4;
    memcpy(p, &n, 4), p += 4;
    memcpy(p, (char[]){'a', 0, tag, 0}, 4), p += 4;
    *p++ = 0;
    uint32_t total = (uint32_t)(p - raw);
    memcpy(raw, &total, 4);
    bson_t one;
    CHECK(bson_init_static(&one, raw, total) && bson_concat(doc, &one));
}

static bool is_nul_code(const bson_t *doc, const char *key, char tag)
{
    bson_iter_t it;
    uint32_t len = 0;
    if (!bson_iter_init_find(&it, doc, key) || !BSON_ITER_HOLDS_CODE(&it))
        return false;
    const char *c = bson_iter_code(&it, &len);
    return len == 3 && memcmp(c, (char[]){'a', 0, tag}, 3) == 0;
}

/* A code value with an embedded NUL (the fuzzer found a replacement that cut an _id
 * short) comes out whole from replacements, operator updates and insert preparation. */
static void test_code_with_nul(void)
{
    bson_t old = BSON_INITIALIZER, repl = BSON_INITIALIZER, in = BSON_INITIALIZER, prep;
    sbl_err_t err = {0};
    bool changed;

    append_nul_code(&old, "_id", 'i');
    append_nul_code(&old, "c", 'c');
    append_nul_code(&repl, "r", 'r');
    sbl_update_t *u = sbl_update_new(&repl, NULL, &err);
    bson_t out = BSON_INITIALIZER;
    CHECK(u && sbl_update_apply(u, &old, -1, false, NOW_MS, &out, &changed, &err) == 0);
    CHECK(is_nul_code(&out, "_id", 'i') && is_nul_code(&out, "r", 'r'));
    bson_destroy(&out);
    sbl_update_free(u);

    bson_t *inc = json("{'$inc': {'n': 1}}");
    u = sbl_update_new(inc, NULL, &err);
    bson_init(&out);
    CHECK(u && sbl_update_apply(u, &old, -1, false, NOW_MS, &out, &changed, &err) == 0);
    CHECK(is_nul_code(&out, "_id", 'i') && is_nul_code(&out, "c", 'c'));
    bson_destroy(&out);
    sbl_update_free(u);
    bson_destroy(inc);

    BSON_APPEND_INT32(&in, "x", 1); /* _id not first: insert preparation rebuilds it */
    append_nul_code(&in, "_id", 'j');
    append_nul_code(&in, "d", 'd');
    CHECK(sbl_doc_prepare_insert(&in, &prep, &err) == 0);
    CHECK(is_nul_code(&prep, "_id", 'j') && is_nul_code(&prep, "d", 'd'));
    bson_destroy(&prep);
    bson_destroy(&in);
    bson_destroy(&repl);
    bson_destroy(&old);
}

int main(void)
{
    RUN(set_cases);
    RUN(set_in_place_cases);
    RUN(unset_cases);
    RUN(arith_cases);
    RUN(rename_cases);
    RUN(date_cases);
    RUN(push_cases);
    RUN(remove_cases);
    RUN(bit_cases);
    RUN(positional_cases);
    RUN(replace_cases);
    test_seeds();
    test_upsert_flow();
    test_messages();
    test_current_date_type();
    test_reuse();
    test_null_err();
    test_code_with_nul();
    return CHECK_DONE("test_update");
}
