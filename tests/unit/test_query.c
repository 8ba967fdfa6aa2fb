/*
 * test_query.c: unit tests for src/query: the filter matcher (a table of
 * filter, document, expected), filter errors, positional array_pos, _id range
 * analysis, find projection and sort.
 *
 * Test JSON uses single quotes; keys written "@op" become "$op" and strings
 * written 're:/pattern/flags' become BSON regexes, so that libbson's JSON
 * parser does not read {$regex: ...} or {$type: 2} as extended JSON.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "doc/doc.h"
#include "query/query.h"

static void rewrite(const bson_t *in, bson_t *out);

static void rewrite_value(bson_t *out, const char *key, bson_iter_t *it)
{
    if (BSON_ITER_HOLDS_DOCUMENT(it) || BSON_ITER_HOLDS_ARRAY(it)) {
        bson_t sub, child;
        uint32_t len;
        const uint8_t *data;
        bool arr = BSON_ITER_HOLDS_ARRAY(it);
        if (arr)
            bson_iter_array(it, &len, &data);
        else
            bson_iter_document(it, &len, &data);
        bson_init_static(&sub, data, len);
        if (arr)
            bson_append_array_begin(out, key, -1, &child);
        else
            bson_append_document_begin(out, key, -1, &child);
        rewrite(&sub, &child);
        if (arr)
            bson_append_array_end(out, &child);
        else
            bson_append_document_end(out, &child);
    } else if (BSON_ITER_HOLDS_UTF8(it) && strncmp(bson_iter_utf8(it, NULL), "re:/", 4) == 0) {
        const char *s = bson_iter_utf8(it, NULL) + 4;
        const char *end = strrchr(s, '/');
        char *pat = bson_strndup(s, (size_t)(end - s));
        bson_append_regex(out, key, -1, pat, end + 1);
        bson_free(pat);
    } else {
        bson_append_value(out, key, -1, bson_iter_value(it));
    }
}

static void rewrite(const bson_t *in, bson_t *out)
{
    bson_iter_t it;
    bson_iter_init(&it, in);
    while (bson_iter_next(&it)) {
        char key[128];
        snprintf(key, sizeof(key), "%s", bson_iter_key(&it));
        if (key[0] == '@')
            key[0] = '$';
        rewrite_value(out, key, &it);
    }
}

/* Parse test JSON (see the file comment); aborts on malformed test input. */
static bson_t *J(const char *json)
{
    char *s = bson_strdup(json);
    bson_error_t e;
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    bson_t *raw = bson_new_from_json((const uint8_t *)s, -1, &e);
    if (raw == NULL) {
        fprintf(stderr, "bad test json %s: %s\n", json, e.message);
        abort();
    }
    bson_t *out = bson_new();
    rewrite(raw, out);
    bson_destroy(raw);
    bson_free(s);
    return out;
}

static char *S(const bson_t *b)
{
    return bson_as_relaxed_extended_json(b, NULL);
}

/* ---- matcher --------------------------------------------------------- */

static const struct {
    const char *filter, *doc;
    bool want;
} match_cases[] = {
    /* empty filter, implicit $eq, implicit $and */
    {"{}", "{'a': 1}", true},
    {"{'a': 1}", "{'a': 1}", true},
    {"{'a': 1}", "{'a': 2}", false},
    {"{'a': 1}", "{'a': 1.0}", true},
    {"{'a': 1}", "{'a': {'$numberLong': '1'}}", true},
    {"{'a': 1}", "{'a': '1'}", false},
    {"{'a': 1, 'b': 2}", "{'a': 1, 'b': 2}", true},
    {"{'a': 1, 'b': 2}", "{'a': 1, 'b': 3}", false},
    {"{'a': 'x'}", "{'a': 'x'}", true},
    {"{'a': {'b': 1}}", "{'a': {'b': 1}}", true},
    {"{'a': {'b': 1}}", "{'a': {'b': 1, 'c': 2}}", false},
    {"{'a': {'b': 1, 'c': 2}}", "{'a': {'c': 2, 'b': 1}}", false},
    {"{'a': {}}", "{'a': {}}", true},
    /* arrays */
    {"{'a': 1}", "{'a': [3, 1, 2]}", true},
    {"{'a': 1}", "{'a': [3, 2]}", false},
    {"{'a': [1, 2]}", "{'a': [1, 2]}", true},
    {"{'a': [1, 2]}", "{'a': [2, 1]}", false},
    {"{'a': [1, 2]}", "{'a': [[1, 2], 3]}", true},
    {"{'a': [1]}", "{'a': 1}", false},
    {"{'a': []}", "{'a': []}", true},
    {"{'a': []}", "{'a': [[]]}", true},
    {"{'a': 1}", "{'a': [[1]]}", false},
    /* dotted paths */
    {"{'a.b': 1}", "{'a': {'b': 1}}", true},
    {"{'a.b': 1}", "{'a': {'b': 2}}", false},
    {"{'a.b': 1}", "{'a': [{'b': 2}, {'b': 1}]}", true},
    {"{'a.b': 1}", "{'a': [{'b': [0, 1]}]}", true},
    {"{'a.b.c': 1}", "{'a': [{'b': [{'c': 1}]}]}", true},
    {"{'a.b': 1}", "{'a': [[{'b': 1}]]}", false},
    {"{'a.0': 5}", "{'a': [5, 6]}", true},
    {"{'a.1': 5}", "{'a': [5, 6]}", false},
    {"{'a.0': 5}", "{'a': {'0': 5}}", true},
    {"{'a.0.b': 1}", "{'a': [{'b': 1}]}", true},
    {"{'a.0.b': 1}", "{'a': [{'b': 2}, {'b': 1}]}", false},
    {"{'a.1': 5}", "{'a': [{'1': 5}]}", true},
    {"{'a.b': 1}", "{'a': 1}", false},
    {"{'a.b': 1}", "{}", false},
    /* null and missing */
    {"{'a': null}", "{}", true},
    {"{'a': null}", "{'a': null}", true},
    {"{'a': null}", "{'a': 0}", false},
    {"{'a': null}", "{'a': [1, null]}", true},
    {"{'a': null}", "{'a': [1, 2]}", false},
    {"{'a': null}", "{'a': {'$undefined': true}}", true},
    {"{'a.b': null}", "{'a': 5}", true},
    {"{'a.b': null}", "{'a': {'c': 1}}", true},
    {"{'a.b': null}", "{'a': [{'b': 1}, {'c': 1}]}", true},
    {"{'a.b': null}", "{'a': [{'b': 1}]}", false},
    {"{'a': {'@ne': null}}", "{}", false},
    {"{'a': {'@ne': null}}", "{'a': 1}", true},
    {"{'a': {'@eq': null}}", "{}", true},
    {"{'a': {'@gte': null}}", "{}", true},
    {"{'a': {'@lte': null}}", "{'a': null}", true},
    {"{'a': {'@gt': null}}", "{'a': null}", false},
    {"{'a': {'@lt': null}}", "{'a': 1}", false},
    {"{'a': {'@in': [null, 5]}}", "{}", true},
    {"{'a': {'@in': [null, 5]}}", "{'a': 5}", true},
    {"{'a': {'@in': [null, 5]}}", "{'a': 6}", false},
    {"{'a': {'@nin': [null]}}", "{}", false},
    {"{'a': {'@nin': [null]}}", "{'a': 1}", true},
    /* comparisons and canonical types */
    {"{'a': {'@gt': 5}}", "{'a': 6}", true},
    {"{'a': {'@gt': 5}}", "{'a': 5}", false},
    {"{'a': {'@gte': 5}}", "{'a': 5}", true},
    {"{'a': {'@lt': 5}}", "{'a': 4.5}", true},
    {"{'a': {'@lte': 5}}", "{'a': 6}", false},
    {"{'a': {'@gt': 5}}", "{'a': 'z'}", false},
    {"{'a': {'@lt': 'b'}}", "{'a': 'a'}", true},
    {"{'a': {'@lt': 'b'}}", "{'a': 1}", false},
    {"{'a': {'@gt': 5}}", "{'a': [1, 7]}", true},
    {"{'a': {'@gt': 5}}", "{'a': [1, 2]}", false},
    {"{'a': {'@gt': 5}}", "{}", false},
    {"{'a': {'@gt': 5, '@lt': 10}}", "{'a': 7}", true},
    {"{'a': {'@gt': 5, '@lt': 10}}", "{'a': [4, 11]}", true},
    {"{'a': {'@gt': 5, '@lt': 10}}", "{'a': [4, 7]}", true},
    {"{'a': {'@gt': {'$date': 0}}}", "{'a': {'$date': 1000}}", true},
    {"{'a': {'@gt': {'$date': 0}}}", "{'a': 5}", false},
    {"{'a': {'@gt': {'$minKey': 1}}}", "{'a': 'x'}", true},
    {"{'a': {'@lt': {'$maxKey': 1}}}", "{'a': {'b': 1}}", true},
    {"{'a': {'@gt': [1]}}", "{'a': [2]}", true},
    {"{'a': {'@gte': {'b': 1}}}", "{'a': {'b': 2}}", true},
    {"{'a': {'@lt': 5}}", "{'a': {'$numberDouble': 'NaN'}}", false},
    {"{'a': {'@gte': {'$numberDouble': 'NaN'}}}", "{'a': {'$numberDouble': 'NaN'}}", true},
    {"{'a': {'@gt': {'$numberDouble': 'NaN'}}}", "{'a': 5}", false},
    {"{'a': {'@eq': {'$numberDouble': 'NaN'}}}", "{'a': {'$numberDouble': 'NaN'}}", true},
    {"{'a': true}", "{'a': true}", true},
    {"{'a': true}", "{'a': 1}", false},
    /* $eq / $ne */
    {"{'a': {'@eq': 1}}", "{'a': [1, 2]}", true},
    {"{'a': {'@eq': [1, 2]}}", "{'a': [1, 2]}", true},
    {"{'a': {'@ne': 1}}", "{'a': [1, 2]}", false},
    {"{'a': {'@ne': 1}}", "{'a': [2, 3]}", true},
    {"{'a': {'@ne': 1}}", "{}", true},
    {"{'a.b': {'@ne': 1}}", "{'a': [{'b': 1}, {'b': 2}]}", false},
    {"{'a': {'@eq': 're:/x/'}}", "{'a': 'x'}", false},
    {"{'a': {'@eq': 're:/x/'}}", "{'a': 're:/x/'}", true},
    /* $in / $nin */
    {"{'a': {'@in': [1, 2]}}", "{'a': 2}", true},
    {"{'a': {'@in': [1, 2]}}", "{'a': 3}", false},
    {"{'a': {'@in': []}}", "{'a': 3}", false},
    {"{'a': {'@in': [1, 2]}}", "{'a': [5, 2]}", true},
    {"{'a': {'@in': [[1, 2]]}}", "{'a': [1, 2]}", true},
    {"{'a': {'@in': ['re:/^ab/']}}", "{'a': 'abc'}", true},
    {"{'a': {'@in': ['re:/^ab/', 3]}}", "{'a': 'xab'}", false},
    {"{'a': {'@in': ['re:/^AB/i']}}", "{'a': ['zz', 'abc']}", true},
    {"{'a': {'@nin': [1, 2]}}", "{'a': 3}", true},
    {"{'a': {'@nin': [1, 2]}}", "{'a': [3, 2]}", false},
    {"{'a': {'@nin': [1, 2]}}", "{}", true},
    /* $exists */
    {"{'a': {'@exists': true}}", "{'a': null}", true},
    {"{'a': {'@exists': true}}", "{}", false},
    {"{'a': {'@exists': false}}", "{}", true},
    {"{'a': {'@exists': false}}", "{'a': 1}", false},
    {"{'a': {'@exists': 0}}", "{'b': 1}", true},
    {"{'a': {'@exists': 1}}", "{'a': []}", true},
    {"{'a.b': {'@exists': true}}", "{'a': [{'c': 1}, {'b': 1}]}", true},
    {"{'a.b': {'@exists': true}}", "{'a': [{'c': 1}]}", false},
    {"{'a.b': {'@exists': false}}", "{'a': [{'c': 1}]}", true},
    {"{'a.1': {'@exists': true}}", "{'a': [1, 2]}", true},
    {"{'a.2': {'@exists': true}}", "{'a': [1, 2]}", false},
    /* $type */
    {"{'a': {'@type': 'string'}}", "{'a': 'x'}", true},
    {"{'a': {'@type': 'string'}}", "{'a': 1}", false},
    {"{'a': {'@type': 2}}", "{'a': 'x'}", true},
    {"{'a': {'@type': 'number'}}", "{'a': 1.5}", true},
    {"{'a': {'@type': 'number'}}", "{'a': {'$numberLong': '7'}}", true},
    {"{'a': {'@type': 'number'}}", "{'a': '1'}", false},
    {"{'a': {'@type': 'double'}}", "{'a': 1.5}", true},
    {"{'a': {'@type': 'double'}}", "{'a': 1}", false},
    {"{'a': {'@type': 'int'}}", "{'a': 1}", true},
    {"{'a': {'@type': 'long'}}", "{'a': {'$numberLong': '1'}}", true},
    {"{'a': {'@type': 'decimal'}}", "{'a': {'$numberDecimal': '1.5'}}", true},
    {"{'a': {'@type': 'array'}}", "{'a': []}", true},
    {"{'a': {'@type': 'array'}}", "{'a': 1}", false},
    {"{'a': {'@type': 'string'}}", "{'a': [1, 'x']}", true},
    {"{'a': {'@type': 'object'}}", "{'a': {}}", true},
    {"{'a': {'@type': 'null'}}", "{'a': null}", true},
    {"{'a': {'@type': 'null'}}", "{}", false},
    {"{'a': {'@type': 'bool'}}", "{'a': false}", true},
    {"{'a': {'@type': 'date'}}", "{'a': {'$date': 5}}", true},
    {"{'a': {'@type': 'objectId'}}", "{'a': {'$oid': '0123456789ab0123456789ab'}}", true},
    {"{'a': {'@type': 'regex'}}", "{'a': 're:/x/'}", true},
    {"{'a': {'@type': 'minKey'}}", "{'a': {'$minKey': 1}}", true},
    {"{'a': {'@type': 'maxKey'}}", "{'a': {'$maxKey': 1}}", true},
    {"{'a': {'@type': 'binData'}}", "{'a': {'$binary': {'base64': 'AA==', 'subType': '00'}}}", true},
    {"{'a': {'@type': ['string', 'int']}}", "{'a': 3}", true},
    {"{'a': {'@type': ['string', 'bool']}}", "{'a': 3}", false},
    /* $regex */
    {"{'a': 're:/^ab/'}", "{'a': 'abc'}", true},
    {"{'a': 're:/^ab/'}", "{'a': 'cab'}", false},
    {"{'a': 're:/^AB/i'}", "{'a': 'abc'}", true},
    {"{'a': 're:/b/'}", "{'a': ['xx', 'xbx']}", true},
    {"{'a': 're:/b/'}", "{'a': 5}", false},
    {"{'a': 're:/b/'}", "{}", false},
    {"{'a': 're:/b/'}", "{'a': 're:/b/'}", true},
    {"{'a': {'@regex': '^ab'}}", "{'a': 'abc'}", true},
    {"{'a': {'@regex': '^AB', '@options': 'i'}}", "{'a': 'abc'}", true},
    {"{'a': {'@options': 'i', '@regex': '^AB'}}", "{'a': 'abc'}", true},
    {"{'a': {'@regex': 're:/^AB/i'}}", "{'a': 'abc'}", true},
    {"{'a': {'@regex': '^b', '@options': 'm'}}", "{'a': 'a\\nb'}", true},
    {"{'a': {'@regex': '^b'}}", "{'a': 'a\\nb'}", false},
    {"{'a': {'@regex': 'a.b', '@options': 's'}}", "{'a': 'a\\nb'}", true},
    {"{'a': {'@regex': 'a.b'}}", "{'a': 'a\\nb'}", false},
    {"{'a': {'@regex': 'a b # comment', '@options': 'x'}}", "{'a': 'ab'}", true},
    {"{'a': {'@regex': 'é'}}", "{'a': 'café'}", true},
    {"{'a': {'@not': 're:/^ab/'}}", "{'a': 'abc'}", false},
    {"{'a': {'@not': 're:/^ab/'}}", "{'a': 'xyz'}", true},
    {"{'a': {'@not': {'@regex': '^ab'}}}", "{}", true},
    {"{'a': {'$symbol': 'abc'}}", "{'a': {'$symbol': 'abc'}}", true},
    /* $not */
    {"{'a': {'@not': {'@gt': 5}}}", "{'a': 3}", true},
    {"{'a': {'@not': {'@gt': 5}}}", "{'a': 7}", false},
    {"{'a': {'@not': {'@gt': 5}}}", "{'a': 'x'}", true},
    {"{'a': {'@not': {'@gt': 5}}}", "{}", true},
    {"{'a': {'@not': {'@gt': 5}}}", "{'a': [1, 7]}", false},
    {"{'a': {'@not': {'@gt': 1, '@lt': 5}}}", "{'a': 3}", false},
    {"{'a': {'@not': {'@gt': 1, '@lt': 5}}}", "{'a': 6}", true},
    /* $and / $or / $nor */
    {"{'@and': [{'a': 1}, {'b': 2}]}", "{'a': 1, 'b': 2}", true},
    {"{'@and': [{'a': 1}, {'b': 2}]}", "{'a': 1, 'b': 3}", false},
    {"{'@or': [{'a': 1}, {'b': 2}]}", "{'a': 0, 'b': 2}", true},
    {"{'@or': [{'a': 1}, {'b': 2}]}", "{'a': 0, 'b': 0}", false},
    {"{'@nor': [{'a': 1}, {'b': 2}]}", "{'a': 0, 'b': 0}", true},
    {"{'@nor': [{'a': 1}, {'b': 2}]}", "{'a': 1}", false},
    {"{'@or': [{'a': 1}, {'@and': [{'b': 2}, {'c': 3}]}]}", "{'b': 2, 'c': 3}", true},
    {"{'@or': [{'a': 1}], 'b': 2}", "{'a': 1, 'b': 3}", false},
    {"{'@comment': 'hi', 'a': 1}", "{'a': 1}", true},
    {"{'@alwaysTrue': 1}", "{}", true},
    {"{'@alwaysFalse': 1}", "{}", false},
    {"{'@and': [{}]}", "{'a': 1}", true},
    /* $elemMatch */
    {"{'a': {'@elemMatch': {'b': 1, 'c': 2}}}", "{'a': [{'b': 1, 'c': 2}]}", true},
    {"{'a': {'@elemMatch': {'b': 1, 'c': 2}}}", "{'a': [{'b': 1}, {'c': 2}]}", false},
    {"{'a.b': 1, 'a.c': 2}", "{'a': [{'b': 1}, {'c': 2}]}", true},
    {"{'a': {'@elemMatch': {'@gt': 1, '@lt': 5}}}", "{'a': [0, 3]}", true},
    {"{'a': {'@elemMatch': {'@gt': 1, '@lt': 5}}}", "{'a': [0, 6]}", false},
    {"{'a': {'@elemMatch': {'@gt': 1}}}", "{'a': 5}", false},
    {"{'a': {'@elemMatch': {'@gt': 1}}}", "{'a': [[5]]}", false},
    {"{'a': {'@elemMatch': {'b': {'@gt': 3}}}}", "{'a': [{'b': 1}, {'b': 5}]}", true},
    {"{'a': {'@elemMatch': {'@or': [{'b': 1}, {'c': 1}]}}}", "{'a': [{'c': 1}]}", true},
    {"{'a': {'@elemMatch': {'0': 1}}}", "{'a': [[1, 2]]}", true},
    {"{'a': {'@elemMatch': {'@in': [7, 8]}}}", "{'a': [1, 8]}", true},
    {"{'a': {'@elemMatch': {'@not': {'@gt': 5}}}}", "{'a': [9, 1]}", true},
    {"{'a': {'@elemMatch': {'@not': {'@gt': 5}}}}", "{'a': [9, 8]}", false},
    {"{'a': {'@elemMatch': {'@regex': '^x'}}}", "{'a': ['ax', 'xa']}", true},
    {"{'a.b': {'@elemMatch': {'@eq': 2}}}", "{'a': [{'b': [1]}, {'b': [2]}]}", true},
    {"{'a': {'@elemMatch': {'b': null}}}", "{'a': [{'c': 1}]}", true},
    {"{'a': {'@elemMatch': {'b': null}}}", "{'a': [1]}", false},
    /* $size */
    {"{'a': {'@size': 2}}", "{'a': [1, 2]}", true},
    {"{'a': {'@size': 2}}", "{'a': [1]}", false},
    {"{'a': {'@size': 0}}", "{'a': []}", true},
    {"{'a': {'@size': 0}}", "{}", false},
    {"{'a': {'@size': 1}}", "{'a': 'x'}", false},
    {"{'a': {'@size': 1}}", "{'a': [[1, 2]]}", true},
    {"{'a': {'@size': 2}}", "{'a': [[1, 2]]}", false},
    {"{'a': {'@size': 2.0}}", "{'a': [1, 2]}", true},
    {"{'a.b': {'@size': 1}}", "{'a': [{'b': [1]}]}", true},
    /* $all */
    {"{'a': {'@all': [1, 2]}}", "{'a': [2, 3, 1]}", true},
    {"{'a': {'@all': [1, 2]}}", "{'a': [2, 3]}", false},
    {"{'a': {'@all': [1]}}", "{'a': 1}", true},
    {"{'a': {'@all': []}}", "{'a': [1]}", false},
    {"{'a': {'@all': [[1, 2]]}}", "{'a': [1, 2]}", true},
    {"{'a': {'@all': [[1, 2]]}}", "{'a': [[1, 2], 3]}", true},
    {"{'a': {'@all': ['re:/^x/', 'yy']}}", "{'a': ['xa', 'yy']}", true},
    {"{'a': {'@all': [{'@elemMatch': {'b': 1}}, {'@elemMatch': {'c': 1}}]}}",
     "{'a': [{'b': 1}, {'c': 1}]}", true},
    {"{'a': {'@all': [{'@elemMatch': {'b': 1}}, {'@elemMatch': {'c': 2}}]}}",
     "{'a': [{'b': 1}, {'c': 1}]}", false},
    {"{'a.b': {'@all': [1, 2]}}", "{'a': [{'b': 1}, {'b': 2}]}", true},
    /* $mod */
    {"{'a': {'@mod': [4, 1]}}", "{'a': 5}", true},
    {"{'a': {'@mod': [4, 1]}}", "{'a': 6}", false},
    {"{'a': {'@mod': [4, 1]}}", "{'a': 5.7}", true},
    {"{'a': {'@mod': [4, -1]}}", "{'a': -5}", true},
    {"{'a': {'@mod': [4, 1]}}", "{'a': 'x'}", false},
    {"{'a': {'@mod': [4, 1]}}", "{'a': [2, 9]}", true},
    {"{'a': {'@mod': [4.5, 1]}}", "{'a': 9}", true},
    {"{'a': {'@mod': [2, 0]}}", "{'a': {'$numberDouble': 'NaN'}}", false},
    {"{'a': {'@mod': [-1, 0]}}", "{'a': {'$numberLong': '-9223372036854775808'}}", true},
    /* DBRef-looking documents are values, not operators */
    {"{'a': {'@ref': 'c', '@id': 1}}", "{'a': {'@ref': 'c', '@id': 1}}", true},
};

static void test_match_table(void)
{
    for (size_t i = 0; i < sizeof(match_cases) / sizeof(match_cases[0]); i++) {
        bson_t *f = J(match_cases[i].filter), *d = J(match_cases[i].doc);
        sbl_err_t err = {0};
        sbl_matcher_t *m = sbl_matcher_new(f, &err);
        CHECK_MSG(m != NULL, "parse %s: %s", match_cases[i].filter, err.msg);
        if (m != NULL) {
            bool got = sbl_matcher_match(m, d, NULL);
            CHECK_MSG(got == match_cases[i].want, "filter %s doc %s: want %d", match_cases[i].filter,
                      match_cases[i].doc, match_cases[i].want);
            sbl_matcher_free(m);
        }
        bson_destroy(f);
        bson_destroy(d);
    }
}

static const struct {
    const char *filter;
    int code;
    const char *msg; /* substring of the message, or NULL */
} error_cases[] = {
    {"{'a': {'@foo': 1}}", 2, "unknown operator: $foo"},
    {"{'@foo': 1}", 2, "unknown top level operator: $foo"},
    {"{'a': {'@gt': 1, 'b': 1}}", 2, "unknown operator: b"},
    {"{'@and': []}", 2, "nonempty"},
    {"{'@or': []}", 2, "nonempty"},
    {"{'@nor': []}", 2, "nonempty"},
    {"{'@and': {'a': 1}}", 2, "must be an array"},
    {"{'@or': [1]}", 2, "full objects"},
    {"{'a': {'@in': 1}}", 2, "$in needs an array"},
    {"{'a': {'@nin': {'b': 1}}}", 2, "$nin needs an array"},
    {"{'a': {'@in': [{'@gt': 1}]}}", 2, "cannot nest $ under $in"},
    {"{'a': {'@size': 'x'}}", 2, "$size needs a number"},
    {"{'a': {'@size': 1.5}}", 2, "whole number"},
    {"{'a': {'@size': -1}}", 2, "negative"},
    {"{'a': {'@all': 1}}", 2, "$all needs an array"},
    {"{'a': {'@all': [{'@elemMatch': {'b': 1}}, 1]}}", 2, "consistent"},
    {"{'a': {'@regex': '('}}", 51091, "Regular expression is invalid"},
    {"{'a': 're:/(/'}", 51091, NULL},
    {"{'a': {'@in': ['re:/[/']}}", 51091, NULL},
    {"{'a': {'@regex': 'x', '@options': 'q'}}", 51108, "invalid flag"},
    {"{'a': {'@regex': 5}}", 2, "$regex has to be a string"},
    {"{'a': {'@options': 'i'}}", 2, "$options needs a $regex"},
    {"{'a': {'@not': 5}}", 2, "$not needs a regex or a document"},
    {"{'a': {'@not': {}}}", 2, "$not cannot be empty"},
    {"{'a': {'@not': {'b': 1}}}", 2, "unknown operator: b"},
    {"{'a': {'@elemMatch': 1}}", 2, "$elemMatch needs an Object"},
    {"{'a': {'@elemMatch': {'@foo': 1}}}", 2, "unknown operator: $foo"},
    {"{'a': {'@mod': 1}}", 2, "needs to be an array"},
    {"{'a': {'@mod': [1]}}", 2, "not enough elements"},
    {"{'a': {'@mod': [1, 2, 3]}}", 2, "too many elements"},
    {"{'a': {'@mod': ['x', 1]}}", 2, "divisor not a number"},
    {"{'a': {'@mod': [0, 1]}}", 2, "divisor cannot be 0"},
    {"{'a': {'@type': 'strin'}}", 2, "Unknown type name alias: strin"},
    {"{'a': {'@type': 99}}", 2, "Invalid numerical type code"},
    {"{'a': {'@ne': 're:/x/'}}", 2, "regex"},
    {"{'@expr': {'@eq': ['$a', 1]}}", 2, "not supported"}, /* until src/expr registers it */
    {"{'@where': 'this.a == 1'}", 2, "not supported"},
    {"{'@text': {'@search': 'x'}}", 2, "not supported"},
    {"{'a': {'@near': [0, 0]}}", 2, "not allowed in this context"},
    {"{'a': {'@geoWithin': {}}}", 2, "not supported"},
    {"{'@or': [{'a': {'@bad': 1}}]}", 2, "unknown operator: $bad"},
};

static void test_match_errors(void)
{
    for (size_t i = 0; i < sizeof(error_cases) / sizeof(error_cases[0]); i++) {
        bson_t *f = J(error_cases[i].filter);
        sbl_err_t err = {0};
        sbl_matcher_t *m = sbl_matcher_new(f, &err);
        CHECK_MSG(m == NULL, "filter %s should fail", error_cases[i].filter);
        CHECK_MSG(err.code == error_cases[i].code, "filter %s: code %d want %d (%s)",
                  error_cases[i].filter, err.code, error_cases[i].code, err.msg);
        if (error_cases[i].msg != NULL)
            CHECK_MSG(strstr(err.msg, error_cases[i].msg) != NULL, "filter %s: msg '%s'",
                      error_cases[i].filter, err.msg);
        sbl_matcher_free(m);
        bson_destroy(f);
    }
}

static const struct {
    const char *filter, *doc;
    int32_t pos;
} pos_cases[] = {
    {"{'a': 2}", "{'a': [1, 2, 3]}", 1},
    {"{'a': {'@gt': 1}}", "{'a': [1, 2, 3]}", 1},
    {"{'a.b': 5}", "{'a': [{'b': 1}, {'b': 5}]}", 1},
    {"{'a': {'@elemMatch': {'b': 5}}}", "{'a': [{'b': 1}, {'b': 5}]}", 1},
    {"{'a': 1}", "{'a': 1}", -1},
    {"{'a': [1, 2]}", "{'a': [1, 2]}", -1},
    {"{'x': 1, 'a': 3}", "{'x': 1, 'a': [1, 2, 3]}", 2},
    {"{'@or': [{'a': 9}, {'a': 3}]}", "{'a': [1, 2, 3]}", 2},
    {"{'a': {'@in': [3, 2]}}", "{'a': [1, 2, 3]}", 1},
};

static void test_match_positions(void)
{
    for (size_t i = 0; i < sizeof(pos_cases) / sizeof(pos_cases[0]); i++) {
        bson_t *f = J(pos_cases[i].filter), *d = J(pos_cases[i].doc);
        sbl_matcher_t *m = sbl_matcher_new(f, NULL);
        int32_t pos = 99;
        CHECK(m != NULL);
        if (m != NULL) {
            CHECK_MSG(sbl_matcher_match(m, d, &pos), "%s", pos_cases[i].filter);
            CHECK_MSG(pos == pos_cases[i].pos, "filter %s doc %s: pos %d want %d",
                      pos_cases[i].filter, pos_cases[i].doc, pos, pos_cases[i].pos);
        }
        sbl_matcher_free(m);
        bson_destroy(f);
        bson_destroy(d);
    }
}

static void test_match_misc(void)
{
    bson_t *f = J("{}");
    sbl_matcher_t *m = sbl_matcher_new(f, NULL);
    CHECK(m != NULL && sbl_matcher_is_empty(m));
    sbl_matcher_free(m);
    bson_destroy(f);
    f = J("{'a': 1}");
    m = sbl_matcher_new(f, NULL);
    CHECK(m != NULL && !sbl_matcher_is_empty(m));
    sbl_matcher_free(m);
    bson_destroy(f);
    /* a matcher does not keep the filter: free it before matching */
    f = J("{'a': {'@in': ['re:/^q/', 'z']}}");
    m = sbl_matcher_new(f, NULL);
    bson_destroy(f);
    bson_t *d = J("{'a': 'qq'}");
    CHECK(m != NULL && sbl_matcher_match(m, d, NULL));
    bson_destroy(d);
    sbl_matcher_free(m);
    sbl_matcher_free(NULL);
}

/* ---- _id ranges -------------------------------------------------------- */

static const char *kind_name(int k)
{
    return k == SBL_ID_ANY ? "ANY" : k == SBL_ID_POINTS ? "POINTS" : k == SBL_ID_RANGE ? "RANGE" : "NONE";
}

/* want: "ANY", "NONE", "POINTS <json array of points>" or "RANGE <[ or (><lo json|-> <hi json|-><] or )>" */
static const struct {
    const char *filter;
    int kind;
    const char *points; /* {'p': [...]} for POINTS */
    const char *lo, *hi; /* {'v': x} or NULL for unbounded (RANGE) */
    bool lo_inc, hi_inc;
} id_cases[] = {
    {"{}", SBL_ID_ANY, NULL, NULL, NULL, false, false},
    {"{'a': 1}", SBL_ID_ANY, NULL, NULL, NULL, false, false},
    {"{'_id': 5}", SBL_ID_POINTS, "{'p': [5]}", NULL, NULL, false, false},
    {"{'_id': 'x', 'a': 1}", SBL_ID_POINTS, "{'p': ['x']}", NULL, NULL, false, false},
    {"{'_id': {'b': 1}}", SBL_ID_POINTS, "{'p': [{'b': 1}]}", NULL, NULL, false, false},
    {"{'_id': null}", SBL_ID_POINTS, "{'p': [null]}", NULL, NULL, false, false},
    {"{'_id': 're:/x/'}", SBL_ID_ANY, NULL, NULL, NULL, false, false},
    {"{'_id': [1, 2]}", SBL_ID_ANY, NULL, NULL, NULL, false, false},
    {"{'_id': {'@eq': 7}}", SBL_ID_POINTS, "{'p': [7]}", NULL, NULL, false, false},
    {"{'_id': {'@eq': [7]}}", SBL_ID_ANY, NULL, NULL, NULL, false, false},
    {"{'_id': {'@in': [3, 1, 2, 1]}}", SBL_ID_POINTS, "{'p': [1, 2, 3]}", NULL, NULL, false, false},
    {"{'_id': {'@in': ['b', 1]}}", SBL_ID_POINTS, "{'p': [1, 'b']}", NULL, NULL, false, false},
    {"{'_id': {'@in': [1, 're:/x/']}}", SBL_ID_ANY, NULL, NULL, NULL, false, false},
    {"{'_id': {'@in': [1, [2]]}}", SBL_ID_ANY, NULL, NULL, NULL, false, false},
    {"{'_id': {'@in': []}}", SBL_ID_NONE, NULL, NULL, NULL, false, false},
    {"{'_id': {'@gt': 5}}", SBL_ID_RANGE, NULL, "{'v': 5}", "{'v': {'$numberDouble': 'Infinity'}}", false, true},
    {"{'_id': {'@gte': 5, '@lt': 10}}", SBL_ID_RANGE, NULL, "{'v': 5}", "{'v': 10}", true, false},
    {"{'_id': {'@lte': 'm'}}", SBL_ID_RANGE, NULL, "{'v': ''}", "{'v': 'm'}", true, true},
    {"{'_id': {'@gt': 'm'}}", SBL_ID_RANGE, NULL, "{'v': 'm'}", NULL, false, false},
    {"{'_id': {'@gt': {'$oid': '000000000000000000000001'}}}", SBL_ID_RANGE, NULL,
     "{'v': {'$oid': '000000000000000000000001'}}", "{'v': {'$oid': 'ffffffffffffffffffffffff'}}", false, true},
    {"{'_id': {'@gt': 5, '@lt': 3}}", SBL_ID_NONE, NULL, NULL, NULL, false, false},
    {"{'_id': {'@gt': 5, '@lt': 5}}", SBL_ID_NONE, NULL, NULL, NULL, false, false},
    {"{'_id': {'@gte': 5, '@lte': 5}}", SBL_ID_RANGE, NULL, "{'v': 5}", "{'v': 5}", true, true},
    {"{'_id': {'@gt': 1}, '@and': [{'_id': {'@lt': 4}}]}", SBL_ID_RANGE, NULL, "{'v': 1}", "{'v': 4}", false, false},
    {"{'@and': [{'_id': {'@in': [1, 2, 3]}}, {'_id': {'@gte': 2}}]}", SBL_ID_POINTS, "{'p': [2, 3]}", NULL, NULL, false, false},
    {"{'@and': [{'_id': {'@in': [1, 2, 'x']}}, {'_id': {'@in': [2, 'x', 9]}}]}", SBL_ID_POINTS, "{'p': [2, 'x']}", NULL, NULL, false, false},
    {"{'@and': [{'_id': 1}, {'_id': 2}]}", SBL_ID_NONE, NULL, NULL, NULL, false, false},
    {"{'_id': {'@in': [1, 'x']}, 'b': {'@gt': 1}}", SBL_ID_POINTS, "{'p': [1, 'x']}", NULL, NULL, false, false},
    {"{'_id': {'@in': [1, 'x'], '@gt': 0}}", SBL_ID_POINTS, "{'p': [1]}", NULL, NULL, false, false},
    {"{'_id': {'@ne': 5}}", SBL_ID_ANY, NULL, NULL, NULL, false, false},
    {"{'_id': {'@exists': true, '@lt': 5}}", SBL_ID_RANGE, NULL, "{'v': {'$numberDouble': 'NaN'}}", "{'v': 5}", true, false},
    {"{'@or': [{'_id': 1}, {'_id': 2}]}", SBL_ID_ANY, NULL, NULL, NULL, false, false},
    {"{'_id': {'@gt': null}}", SBL_ID_ANY, NULL, NULL, NULL, false, false},
    {"{'_id': {'@gt': {'$minKey': 1}}}", SBL_ID_ANY, NULL, NULL, NULL, false, false},
};

static bool same_value(const bson_value_t *a, const char *json)
{
    bson_t *d = J(json);
    bson_iter_t it;
    bson_value_t v;
    bool ok = bson_iter_init_find(&it, d, "v");
    if (ok) {
        sbl_iter_value(&it, &v);
        ok = a->value_type == v.value_type && sbl_value_compare(a, &v) == 0;
    }
    bson_destroy(d);
    return ok;
}

static void test_id_ranges(void)
{
    for (size_t i = 0; i < sizeof(id_cases) / sizeof(id_cases[0]); i++) {
        bson_t *f = J(id_cases[i].filter);
        sbl_id_range_t r;
        sbl_id_range_from_filter(f, &r);
        CHECK_MSG((int)r.kind == id_cases[i].kind, "filter %s: kind %s want %s", id_cases[i].filter,
                  kind_name(r.kind), kind_name(id_cases[i].kind));
        if ((int)r.kind == id_cases[i].kind && r.kind == SBL_ID_POINTS) {
            bson_t *p = J(id_cases[i].points);
            bson_iter_t it, ai;
            size_t n = 0;
            bool same = true;
            bson_iter_init_find(&it, p, "p");
            bson_iter_recurse(&it, &ai);
            while (bson_iter_next(&ai)) {
                bson_value_t v;
                sbl_iter_value(&ai, &v);
                same = same && n < r.npoints && sbl_value_compare(&v, &r.points[n]) == 0;
                n++;
            }
            CHECK_MSG(same && n == r.npoints, "filter %s: points differ (%zu)", id_cases[i].filter,
                      r.npoints);
            bson_destroy(p);
        }
        if ((int)r.kind == id_cases[i].kind && r.kind == SBL_ID_RANGE) {
            CHECK_MSG(r.has_lo == (id_cases[i].lo != NULL), "filter %s: has_lo", id_cases[i].filter);
            CHECK_MSG(r.has_hi == (id_cases[i].hi != NULL), "filter %s: has_hi", id_cases[i].filter);
            if (r.has_lo && id_cases[i].lo != NULL) {
                CHECK_MSG(same_value(&r.lo, id_cases[i].lo), "filter %s: lo", id_cases[i].filter);
                CHECK_MSG(r.lo_inclusive == id_cases[i].lo_inc, "filter %s: lo_inc", id_cases[i].filter);
            }
            if (r.has_hi && id_cases[i].hi != NULL) {
                CHECK_MSG(same_value(&r.hi, id_cases[i].hi), "filter %s: hi", id_cases[i].filter);
                CHECK_MSG(r.hi_inclusive == id_cases[i].hi_inc, "filter %s: hi_inc", id_cases[i].filter);
            }
        }
        sbl_id_range_destroy(&r);
        CHECK(r.kind == SBL_ID_ANY && r.points == NULL);
        bson_destroy(f);
    }
}

/* ---- projection -------------------------------------------------------- */

static const struct {
    const char *spec, *doc, *want;
    int32_t pos;
} proj_cases[] = {
    {"{}", "{'_id': 1, 'a': 1}", "{'_id': 1, 'a': 1}", -1},
    {"{'a': 1}", "{'_id': 1, 'a': 2, 'b': 3}", "{'_id': 1, 'a': 2}", -1},
    {"{'b': 1, 'a': 1}", "{'_id': 1, 'a': 2, 'b': 3}", "{'_id': 1, 'a': 2, 'b': 3}", -1},
    {"{'a': true, '_id': 0}", "{'_id': 1, 'a': 2, 'b': 3}", "{'a': 2}", -1},
    {"{'a': 0}", "{'_id': 1, 'a': 2, 'b': 3}", "{'_id': 1, 'b': 3}", -1},
    {"{'a': false, '_id': 0}", "{'_id': 1, 'a': 2, 'b': 3}", "{'b': 3}", -1},
    {"{'_id': 0}", "{'_id': 1, 'a': 2}", "{'a': 2}", -1},
    {"{'_id': 1}", "{'_id': 1, 'a': 2}", "{'_id': 1}", -1},
    {"{'x': 1}", "{'_id': 1, 'a': 2}", "{'_id': 1}", -1},
    {"{'a': 1.5}", "{'_id': 1, 'a': 2, 'b': 3}", "{'_id': 1, 'a': 2}", -1},
    {"{'a.b': 1}", "{'_id': 1, 'a': {'b': 1, 'c': 2}, 'd': 1}", "{'_id': 1, 'a': {'b': 1}}", -1},
    {"{'a.b': 1}", "{'_id': 1, 'a': {'c': 2}}", "{'_id': 1, 'a': {}}", -1},
    {"{'a.b': 1}", "{'_id': 1, 'a': 5}", "{'_id': 1}", -1},
    {"{'a': {'b': 1}}", "{'_id': 1, 'a': {'b': 1, 'c': 2}}", "{'_id': 1, 'a': {'b': 1}}", -1},
    {"{'a.b': 1}", "{'_id': 1, 'a': [{'b': 1, 'c': 2}, 5, {'c': 3}, [{'b': 4}]]}",
     "{'_id': 1, 'a': [{'b': 1}, {}, [{'b': 4}]]}", -1},
    {"{'a.b': 0}", "{'_id': 1, 'a': [{'b': 1, 'c': 2}, 5]}", "{'_id': 1, 'a': [{'c': 2}, 5]}", -1},
    {"{'a.b': 0}", "{'_id': 1, 'a': {'b': 1, 'c': 2}, 'z': 0}", "{'_id': 1, 'a': {'c': 2}, 'z': 0}", -1},
    {"{'_id.x': 0}", "{'_id': {'x': 1, 'y': 2}}", "{'_id': {'y': 2}}", -1},
    {"{'a.$': 1}", "{'_id': 1, 'a': [5, 6, 7], 'b': 1}", "{'_id': 1, 'a': [6]}", 1},
    {"{'a.$': 1, 'b': 1}", "{'_id': 1, 'a': [5, 6, 7], 'b': 1}", "{'_id': 1, 'a': [7], 'b': 1}", 2},
    {"{'a.$': 1}", "{'_id': 1, 'a': 3}", "{'_id': 1, 'a': 3}", -1},
    {"{'a.b.$': 1}", "{'_id': 1, 'a': [{'b': 1, 'c': 1}, {'b': 2, 'c': 2}]}", "{'_id': 1, 'a': [{'b': 2}]}", 1},
    {"{'a': {'@slice': 2}}", "{'_id': 1, 'a': [1, 2, 3], 'b': 1}", "{'_id': 1, 'a': [1, 2], 'b': 1}", -1},
    {"{'a': {'@slice': -2}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [2, 3]}", -1},
    {"{'a': {'@slice': 0}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': []}", -1},
    {"{'a': {'@slice': 10}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [1, 2, 3]}", -1},
    {"{'a': {'@slice': -10}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [1, 2, 3]}", -1},
    {"{'a': {'@slice': [1, 1]}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [2]}", -1},
    {"{'a': {'@slice': [-2, 5]}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [2, 3]}", -1},
    {"{'a': {'@slice': [5, 2]}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': []}", -1},
    {"{'a': {'@slice': [-9, 2]}}", "{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [1, 2]}", -1},
    {"{'a': {'@slice': 1}}", "{'_id': 1, 'a': 'x'}", "{'_id': 1, 'a': 'x'}", -1},
    {"{'a': {'@slice': 1}, 'b': 1}", "{'_id': 1, 'a': [1, 2], 'b': 2, 'c': 3}", "{'_id': 1, 'a': [1], 'b': 2}", -1},
    {"{'a': {'@slice': 1}, 'c': 0}", "{'_id': 1, 'a': [1, 2], 'b': 2, 'c': 3}", "{'_id': 1, 'a': [1], 'b': 2}", -1},
    {"{'a.b': {'@slice': 1}}", "{'_id': 1, 'a': {'b': [1, 2], 'c': 1}}", "{'_id': 1, 'a': {'b': [1], 'c': 1}}", -1},
    {"{'a': {'@elemMatch': {'b': 2}}}", "{'_id': 1, 'a': [{'b': 1}, {'b': 2, 'c': 1}, {'b': 2}], 'z': 1}",
     "{'_id': 1, 'a': [{'b': 2, 'c': 1}]}", -1},
    {"{'a': {'@elemMatch': {'b': 9}}}", "{'_id': 1, 'a': [{'b': 1}], 'z': 1}", "{'_id': 1}", -1},
    {"{'a': {'@elemMatch': {'@gt': 2}}, 'z': 1}", "{'_id': 1, 'a': [1, 5, 7], 'z': 1}", "{'_id': 1, 'a': [5], 'z': 1}", -1},
    {"{'a': {'@elemMatch': {'@gt': 2}}, 'z': 0}", "{'_id': 1, 'a': [1, 5, 7], 'y': 2, 'z': 1}", "{'_id': 1, 'a': [5], 'y': 2}", -1},
    {"{'x': 'lit', 'a': 1}", "{'_id': 1, 'a': 2, 'b': 3}", "{'_id': 1, 'a': 2, 'x': 'lit'}", -1},
    {"{'a': {'@literal': 1}}", "{'_id': 1, 'a': 2}", "{'_id': 1, 'a': 1}", -1},
    {"{'n.m': 'v'}", "{'_id': 1}", "{'_id': 1, 'n': {'m': 'v'}}", -1},
    {"{'n.m': 'v', 'n.k': 1}", "{'_id': 1, 'n': {'k': 2, 'j': 3}}", "{'_id': 1, 'n': {'k': 2, 'm': 'v'}}", -1},
};

static const struct {
    const char *spec;
    int code;
} proj_errors[] = {
    {"{'a': 1, 'b': 0}", 31254},
    {"{'a': 0, 'b': 1}", 31253},
    {"{'a': 0, 'b': 'x'}", 31310},                /* a literal in an exclusion */
    {"{'a': {'@meta': 'indexKey'}}", 2},
    /* expressions need the expression module (sbl_expr_init), not linked here:
     * test_query.py::test_projection_expressions has them */
    {"{'a': {'@add': [1, 2]}}", 2},
    {"{'a': '$b'}", 2},
    {"{'a': 0, 'b': {'@add': [1, 2]}}", 31252},  /* refused before it is parsed */
    {"{'a.$': 'x'}", 31308},
    {"{'a.$': {'b': 1}}", 31271},
    {"{'a': {'@slice': 'x'}}", 28667},
    {"{'a': {'@slice': [1, 0]}}", 28724},
    {"{'a': {'@slice': [1, 2, 3]}}", 28667},
    {"{'a.b': {'@elemMatch': {'c': 1}}}", 2},
    {"{'a': {'@elemMatch': 1}}", 2},
    {"{'a': {'@elemMatch': {'@foo': 1}}}", 2},
    {"{'a': 1, 'a.b': 1}", 31249},
    {"{'a.b': 1, 'a': 1}", 31249},
    {"{'a': {}}", 51270},
    {"{'a.$': 1, 'b.$': 1}", 31276},
    {"{'a.$': 0}", 31254},
};

static void test_projection(void)
{
    for (size_t i = 0; i < sizeof(proj_cases) / sizeof(proj_cases[0]); i++) {
        bson_t *spec = J(proj_cases[i].spec), *doc = J(proj_cases[i].doc), *want = J(proj_cases[i].want);
        sbl_err_t err = {0};
        sbl_projection_t *p = sbl_projection_new(spec, &err);
        CHECK_MSG(p != NULL, "projection %s: %s", proj_cases[i].spec, err.msg);
        if (p != NULL) {
            bson_t out;
            bson_init(&out);
            int rc = sbl_projection_apply(p, doc, proj_cases[i].pos, &out, &err);
            char *got = S(&out), *exp = S(want);
            CHECK_MSG(rc == 0 && strcmp(got, exp) == 0, "projection %s on %s: got %s want %s (%s)",
                      proj_cases[i].spec, proj_cases[i].doc, got, exp, err.msg);
            bson_free(got);
            bson_free(exp);
            bson_destroy(&out);
            sbl_projection_free(p);
        }
        bson_destroy(spec);
        bson_destroy(doc);
        bson_destroy(want);
    }
    for (size_t i = 0; i < sizeof(proj_errors) / sizeof(proj_errors[0]); i++) {
        bson_t *spec = J(proj_errors[i].spec);
        sbl_err_t err = {0};
        sbl_projection_t *p = sbl_projection_new(spec, &err);
        CHECK_MSG(p == NULL && err.code == proj_errors[i].code, "projection %s: code %d want %d (%s)",
                  proj_errors[i].spec, err.code, proj_errors[i].code, err.msg);
        sbl_projection_free(p);
        bson_destroy(spec);
    }
    /* the documented messages */
    bson_t *spec = J("{'a': 1, 'b': 0}");
    sbl_err_t err = {0};
    CHECK(sbl_projection_new(spec, &err) == NULL);
    CHECK(strcmp(err.msg, "Cannot do exclusion on field b in inclusion projection") == 0);
    bson_destroy(spec);
    /* positional with no matching element is an error at apply time */
    spec = J("{'a.$': 1}");
    bson_t *doc = J("{'_id': 1, 'a': [1, 2]}");
    sbl_projection_t *p = sbl_projection_new(spec, &err);
    bson_t out;
    bson_init(&out);
    CHECK(p != NULL && sbl_projection_apply(p, doc, 5, &out, &err) == 51246);
    bson_destroy(&out);
    sbl_projection_free(p);
    bson_destroy(spec);
    bson_destroy(doc);
    /* positional fed by the matcher */
    bson_t *f = J("{'a': {'@gt': 5}}");
    spec = J("{'a.$': 1, '_id': 0}");
    doc = J("{'_id': 1, 'a': [1, 8, 9]}");
    sbl_matcher_t *m = sbl_matcher_new(f, NULL);
    int32_t pos = -1;
    p = sbl_projection_new(spec, NULL);
    CHECK(m != NULL && p != NULL && sbl_matcher_match(m, doc, &pos) && pos == 1);
    bson_init(&out);
    CHECK(p != NULL && sbl_projection_apply(p, doc, pos, &out, NULL) == 0);
    char *got = S(&out);
    CHECK_MSG(strcmp(got, "{ \"a\" : [ 8 ] }") == 0, "got %s", got);
    bson_free(got);
    bson_destroy(&out);
    sbl_projection_free(p);
    sbl_matcher_free(m);
    bson_destroy(f);
    bson_destroy(spec);
    bson_destroy(doc);
}

/* ---- sort -------------------------------------------------------------- */

static const struct {
    const char *spec, *a, *b;
    int want; /* sign */
} sort_cases[] = {
    {"{'a': 1}", "{'a': 1}", "{'a': 2}", -1},
    {"{'a': -1}", "{'a': 1}", "{'a': 2}", 1},
    {"{'a': 1}", "{'a': 2}", "{'a': 2.0}", 0},
    {"{'a': 1}", "{'a': 'x'}", "{'a': 5}", 1},
    {"{'a': 1}", "{}", "{'a': 5}", -1},
    {"{'a': 1}", "{}", "{'a': null}", 0},
    {"{'a': 1}", "{'a': {'$minKey': 1}}", "{}", -1},
    {"{'a': 1}", "{'a': [5, 1]}", "{'a': 2}", -1},
    {"{'a': -1}", "{'a': [5, 1]}", "{'a': 2}", -1},
    {"{'a': -1}", "{'a': [0, 1]}", "{'a': 2}", 1},
    {"{'a': 1}", "{'a': []}", "{'a': 0}", -1},
    {"{'a.b': 1}", "{'a': {'b': 3}}", "{'a': [{'b': 4}, {'b': 2}]}", 1},
    {"{'a.b': -1}", "{'a': {'b': 3}}", "{'a': [{'b': 4}, {'b': 2}]}", 1},
    {"{'a.b': 1}", "{'a': [{'b': 4}, {'c': 2}]}", "{'a': {'b': 0}}", -1},
    {"{'a.1': 1}", "{'a': [9, 1]}", "{'a': [0, 5]}", -1},
    {"{'a': 1, 'b': -1}", "{'a': 1, 'b': 1}", "{'a': 1, 'b': 2}", 1},
    {"{'a': 1, 'b': -1}", "{'a': 0, 'b': 1}", "{'a': 1, 'b': 2}", -1},
    {"{'a': 1.0}", "{'a': 1}", "{'a': 2}", -1},
    {"{'$natural': 1}", "{'a': 1}", "{'a': 2}", 0},
    {"{}", "{'a': 1}", "{'a': 2}", 0},
};

static void test_sort(void)
{
    for (size_t i = 0; i < sizeof(sort_cases) / sizeof(sort_cases[0]); i++) {
        bson_t *spec = J(sort_cases[i].spec), *a = J(sort_cases[i].a), *b = J(sort_cases[i].b);
        sbl_err_t err = {0};
        sbl_sort_t *s = sbl_sort_new(spec, &err);
        CHECK_MSG(s != NULL, "sort %s: %s", sort_cases[i].spec, err.msg);
        if (s != NULL) {
            int c = sbl_sort_compare(s, a, b), r = sbl_sort_compare(s, b, a);
            int sign = c < 0 ? -1 : c > 0;
            CHECK_MSG(sign == sort_cases[i].want, "sort %s: %s vs %s gave %d", sort_cases[i].spec,
                      sort_cases[i].a, sort_cases[i].b, c);
            CHECK_MSG((r < 0 ? -1 : r > 0) == -sign, "sort %s: not antisymmetric", sort_cases[i].spec);
            sbl_sort_free(s);
        }
        bson_destroy(spec);
        bson_destroy(a);
        bson_destroy(b);
    }
    static const struct {
        const char *spec;
        int code;
    } bad[] = {
        {"{'a': 2}", 15975}, {"{'a': 0}", 15975}, {"{'a': 'asc'}", 15975}, {"{'a': true}", 15975},
        {"{'a': {'@meta': 'indexKey'}}", 31138}, {"{'': 1}", 2}, {"{'$natural': 5}", 15975},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        bson_t *spec = J(bad[i].spec);
        sbl_err_t err = {0};
        sbl_sort_t *s = sbl_sort_new(spec, &err);
        CHECK_MSG(s == NULL && err.code == bad[i].code, "sort %s: code %d (%s)", bad[i].spec, err.code,
                  err.msg);
        sbl_sort_free(s);
        bson_destroy(spec);
    }
    static const struct {
        const char *spec;
        bool is_id, desc;
    } ids[] = {
        {"{'_id': 1}", true, false}, {"{'_id': -1}", true, true}, {"{'_id': 1, 'a': 1}", false, false},
        {"{'a': 1}", false, false},  {"{}", false, false},        {"{'_id.x': 1}", false, false},
    };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        bson_t *spec = J(ids[i].spec);
        sbl_sort_t *s = sbl_sort_new(spec, NULL);
        bool desc = !ids[i].desc;
        CHECK(s != NULL);
        if (s != NULL) {
            CHECK_MSG(sbl_sort_is_id(s, &desc) == ids[i].is_id, "is_id %s", ids[i].spec);
            if (ids[i].is_id)
                CHECK_MSG(desc == ids[i].desc, "desc %s", ids[i].spec);
        }
        sbl_sort_free(s);
        bson_destroy(spec);
    }
}

int main(void)
{
    test_match_table();
    test_match_errors();
    test_match_positions();
    test_match_misc();
    test_id_ranges();
    test_projection();
    test_sort();
    return CHECK_DONE("test_query");
}
