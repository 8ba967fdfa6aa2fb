/*
 * test_expr.c: the expression language (src/expr) case by case: each row is
 * an expression, the document it runs against, and either the exact result
 * (type included: compared as canonical extended JSON) or MongoDB's error
 * code; then $jsonSchema, `let` binding and $expr through the matcher.
 * Rows are written with ' for " and @ for $ to keep them short.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "expr/expr.h"
#include "query/query.h"

bool sbl_expr_table_sorted(void);

static char *fix(const char *s)
{
    char *o = strdup(s);
    for (char *p = o; *p; p++) {
        if (*p == '\'')
            *p = '"';
        else if (*p == '@')
            *p = '$';
    }
    return o;
}

static bson_t *J(const char *json)
{
    char *f = fix(json);
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)f, -1, &e);
    if (b == NULL)
        fprintf(stderr, "bad JSON in test: %s: %s\n", f, e.message);
    free(f);
    return b;
}

typedef struct ecase {
    const char *expr; /* the value of {e: ...} */
    const char *doc;
    const char *want; /* value of {r: ...}; "MISSING" for a missing result; NULL: error */
    int code;
} ecase_t;

static const ecase_t cases[] = {
    /* paths and variables */
    {"'@a'", "{'a': 1}", "1", 0},
    {"'@a.b'", "{'a': {'b': 'x'}}", "'x'", 0},
    {"'@a.b'", "{'a': [{'b': 1}, {'c': 2}, {'b': 3}]}", "[1, 3]", 0},
    {"'@nope'", "{}", "MISSING", 0},
    {"'@@ROOT.a'", "{'a': 5}", "5", 0},
    {"'@@CURRENT'", "{'a': 5}", "{'a': 5}", 0},
    {"'@@REMOVE'", "{}", "MISSING", 0},
    {"'@@undefinedvar'", "{}", NULL, 17276},
    {"{'x': '@a', 'y': [1, '@b']}", "{'a': 1}", "{'x': 1, 'y': [1, null]}", 0},
    {"{'@literal': '@a'}", "{}", "'@a'", 0},
    {"{'@foo': 1}", "{}", NULL, 168},
    {"{'@add': 1, '@sub': 2}", "{}", NULL, 15983},
    /* arithmetic */
    {"{'@add': [1, 2]}", "{}", "3", 0},
    {"{'@add': [2147483647, 1]}", "{}", "{'@numberLong': '2147483648'}", 0},
    {"{'@add': [1, 2.5]}", "{}", "3.5", 0},
    {"{'@add': [1, null]}", "{}", "null", 0},
    {"{'@add': [1, '@nope']}", "{}", "null", 0},
    {"{'@add': [{'@date': 1000}, 500]}", "{}", "{'@date': 1500}", 0},
    {"{'@add': ['a', 1]}", "{}", NULL, 16554},
    {"{'@subtract': [10, 4]}", "{}", "6", 0},
    {"{'@subtract': [{'@date': 5000}, {'@date': 1000}]}", "{}", "{'@numberLong': '4000'}", 0},
    {"{'@subtract': ['a', 1]}", "{}", NULL, 16556},
    {"{'@multiply': [3, 4, 2]}", "{}", "24", 0},
    {"{'@multiply': [3, 'x']}", "{}", NULL, 16555},
    {"{'@divide': [9, 2]}", "{}", "4.5", 0},
    {"{'@divide': [1, 0]}", "{}", NULL, 2},
    {"{'@divide': ['a', 1]}", "{}", NULL, 16609},
    {"{'@mod': [10, 3]}", "{}", "1", 0},
    {"{'@mod': [10, 0]}", "{}", NULL, 16610},
    {"{'@mod': [5.5, 2]}", "{}", "1.5", 0},
    {"{'@abs': -5}", "{}", "5", 0},
    {"{'@abs': null}", "{}", "null", 0},
    {"{'@ceil': 1.2}", "{}", "2.0", 0},
    {"{'@floor': -1.2}", "{}", "-2.0", 0},
    {"{'@round': [2.5]}", "{}", "2.0", 0},
    {"{'@round': [1.2345, 2]}", "{}", "1.23", 0},
    {"{'@trunc': [1.789, 1]}", "{}", "1.7", 0},
    {"{'@pow': [2, 10]}", "{}", "1024", 0},
    {"{'@pow': [0, -1]}", "{}", NULL, 28764},
    {"{'@sqrt': 16}", "{}", "4.0", 0},
    {"{'@sqrt': -1}", "{}", NULL, 28714},
    {"{'@exp': 0}", "{}", "1.0", 0},
    {"{'@ln': 1}", "{}", "0.0", 0},
    {"{'@log10': 1000}", "{}", "3.0", 0},
    {"{'@log': [8, 2]}", "{}", "3.0", 0},
    {"{'@ln': 0}", "{}", NULL, 28766},
    {"{'@add': [1]}", "{}", "1", 0},
    {"{'@subtract': [1]}", "{}", NULL, 16020},
    /* comparison and boolean */
    {"{'@eq': [1, 1.0]}", "{}", "true", 0},
    {"{'@eq': ['@nope', null]}", "{}", "false", 0},
    {"{'@ne': ['a', 'b']}", "{}", "true", 0},
    {"{'@gt': ['b', 'a']}", "{}", "true", 0},
    {"{'@lt': [1, 'a']}", "{}", "true", 0},
    {"{'@gte': [null, 0]}", "{}", "false", 0},
    {"{'@lte': [2, 2]}", "{}", "true", 0},
    {"{'@cmp': [3, 1]}", "{}", "1", 0},
    {"{'@and': [1, 'x', []]}", "{}", "true", 0},
    {"{'@and': [1, 0]}", "{}", "false", 0},
    {"{'@or': [null, false, '@nope']}", "{}", "false", 0},
    {"{'@not': [0]}", "{}", "true", 0},
    /* conditionals */
    {"{'@cond': [true, 1, 2]}", "{}", "1", 0},
    {"{'@cond': {'if': '@x', 'then': 'y', 'else': 'n'}}", "{'x': 0}", "'n'", 0},
    {"{'@cond': {'then': 1, 'else': 2}}", "{}", NULL, 17080},
    {"{'@cond': {'if': 1, 'then': 1, 'else': 2, 'foo': 3}}", "{}", NULL, 17083},
    {"{'@ifNull': ['@a', '@b', 'z']}", "{'b': null}", "'z'", 0},
    {"{'@ifNull': ['@a', 'z']}", "{'a': 0}", "0", 0},
    {"{'@switch': {'branches': [{'case': {'@eq': ['@a', 1]}, 'then': 'one'}, "
     "{'case': true, 'then': 'other'}]}}",
     "{'a': 2}", "'other'", 0},
    {"{'@switch': {'branches': [{'case': false, 'then': 1}]}}", "{}", NULL, 40066},
    {"{'@switch': {'branches': []}}", "{}", NULL, 40068},
    /* strings */
    {"{'@concat': ['a', '@b', 'c']}", "{'b': '-'}", "'a-c'", 0},
    {"{'@concat': ['a', null]}", "{}", "null", 0},
    {"{'@concat': ['a', 1]}", "{}", NULL, 16702},
    {"{'@substr': ['hello', 1, 3]}", "{}", "'ell'", 0},
    {"{'@substrBytes': ['hello', 3, -1]}", "{}", "'lo'", 0},
    {"{'@substrCP': ['h\\u00e9llo', 1, 2]}", "{}", "'\\u00e9l'", 0},
    {"{'@substrBytes': ['h\\u00e9llo', 2, 1]}", "{}", NULL, 28656},
    {"{'@toLower': 'AbC'}", "{}", "'abc'", 0},
    {"{'@toUpper': null}", "{}", "''", 0},
    {"{'@trim': {'input': '  x  '}}", "{}", "'x'", 0},
    {"{'@ltrim': {'input': 'xxaxx', 'chars': 'x'}}", "{}", "'axx'", 0},
    {"{'@rtrim': {'input': 'xxaxx', 'chars': 'x'}}", "{}", "'xxa'", 0},
    {"{'@split': ['a--b--c', '--']}", "{}", "['a', 'b', 'c']", 0},
    {"{'@split': [1, '-']}", "{}", NULL, 40085},
    {"{'@strLenBytes': 'h\\u00e9'}", "{}", "3", 0},
    {"{'@strLenCP': 'h\\u00e9'}", "{}", "2", 0},
    {"{'@strLenCP': 5}", "{}", NULL, 34471},
    {"{'@indexOfBytes': ['abcabc', 'c', 3]}", "{}", "5", 0},
    {"{'@indexOfCP': ['abc', 'z']}", "{}", "-1", 0},
    {"{'@regexMatch': {'input': 'abc', 'regex': 'B', 'options': 'i'}}", "{}", "true", 0},
    {"{'@regexFind': {'input': 'a1b22', 'regex': '([0-9]+)'}}", "{}",
     "{'match': '1', 'idx': 1, 'captures': ['1']}", 0},
    {"{'@regexFindAll': {'input': 'a1b22', 'regex': '[0-9]+'}}", "{}",
     "[{'match': '1', 'idx': 1, 'captures': []}, {'match': '22', 'idx': 3, 'captures': []}]", 0},
    {"{'@replaceOne': {'input': 'aaa', 'find': 'a', 'replacement': 'b'}}", "{}", "'baa'", 0},
    {"{'@replaceAll': {'input': 'aaa', 'find': 'a', 'replacement': 'b'}}", "{}", "'bbb'", 0},
    {"{'@strcasecmp': ['ABC', 'abd']}", "{}", "-1", 0},
    /* arrays */
    {"{'@arrayElemAt': [[1, 2, 3], 1]}", "{}", "2", 0},
    {"{'@arrayElemAt': [[1, 2, 3], 5]}", "{}", "MISSING", 0},
    {"{'@arrayElemAt': ['x', 0]}", "{}", NULL, 28689},
    {"{'@first': [[4, 5]]}", "{}", "4", 0},
    {"{'@last': [[4, 5]]}", "{}", "5", 0},
    {"{'@size': [[1, 2]]}", "{}", "2", 0},
    {"{'@size': '@nope'}", "{}", NULL, 17124},
    {"{'@filter': {'input': [1, 2, 3, 4], 'as': 'n', 'cond': {'@gt': ['@@n', 2]}}}", "{}",
     "[3, 4]", 0},
    {"{'@filter': {'input': [1, 2, 3, 4], 'cond': true, 'limit': 2}}", "{}", "[1, 2]", 0},
    {"{'@map': {'input': '@a', 'in': {'@add': ['@@this', 1]}}}", "{'a': [1, 2]}", "[2, 3]", 0},
    {"{'@map': {'input': null, 'in': 1}}", "{}", "null", 0},
    {"{'@reduce': {'input': ['a', 'b'], 'initialValue': '', 'in': {'@concat': ['@@value', "
     "'@@this']}}}",
     "{}", "'ab'", 0},
    {"{'@in': [2, [1, 2]]}", "{}", "true", 0},
    {"{'@in': [2, 'x']}", "{}", NULL, 40081},
    {"{'@concatArrays': [[1], [2, [3]]]}", "{}", "[1, 2, [3]]", 0},
    {"{'@concatArrays': [[1], 2]}", "{}", NULL, 28664},
    {"{'@slice': [[1, 2, 3, 4], -2]}", "{}", "[3, 4]", 0},
    {"{'@slice': [[1, 2, 3, 4], 1, 2]}", "{}", "[2, 3]", 0},
    {"{'@slice': ['x', 1]}", "{}", NULL, 28724},
    {"{'@isArray': [[1]]}", "{}", "true", 0},
    {"{'@reverseArray': [[1, 2, 3]]}", "{}", "[3, 2, 1]", 0},
    {"{'@range': [0, 10, 3]}", "{}", "[0, 3, 6, 9]", 0},
    {"{'@range': [5, 0, -2]}", "{}", "[5, 3, 1]", 0},
    {"{'@indexOfArray': [['a', 'b'], 'b']}", "{}", "1", 0},
    {"{'@arrayToObject': [[{'k': 'a', 'v': 1}, ['b', 2]]]}", "{}", "{'a': 1, 'b': 2}", 0},
    {"{'@objectToArray': {'a': 1}}", "{}", "[{'k': 'a', 'v': 1}]", 0},
    {"{'@zip': {'inputs': [[1, 2], ['a', 'b', 'c']]}}", "{}", "[[1, 'a'], [2, 'b']]", 0},
    {"{'@setUnion': [[1, 2], [2, 3]]}", "{}", "[1, 2, 3]", 0},
    {"{'@setIntersection': [[1, 2], [2, 3]]}", "{}", "[2]", 0},
    {"{'@setDifference': [[1, 2], [2, 3]]}", "{}", "[1]", 0},
    {"{'@setEquals': [[1, 2], [2, 1, 1]]}", "{}", "true", 0},
    {"{'@setIsSubset': [[1], [2, 1]]}", "{}", "true", 0},
    {"{'@allElementsTrue': [[1, true]]}", "{}", "true", 0},
    {"{'@anyElementTrue': [[0, false]]}", "{}", "false", 0},
    {"{'@sum': [[1, 2, 'x']]}", "{}", "3", 0},
    {"{'@avg': [1, 2]}", "{}", "1.5", 0},
    {"{'@max': [[1, 5, 3]]}", "{}", "5", 0},
    {"{'@min': [4, null, 2]}", "{}", "2", 0},
    {"{'@sortArray': {'input': [3, 1, 2], 'sortBy': 1}}", "{}", "[1, 2, 3]", 0},
    /* objects and variables */
    {"{'@mergeObjects': [{'a': 1, 'b': 1}, null, {'b': 2}]}", "{}", "{'a': 1, 'b': 2}", 0},
    {"{'@mergeObjects': [1]}", "{}", NULL, 40400},
    {"{'@getField': 'a'}", "{'a': 7}", "7", 0},
    {"{'@setField': {'field': 'a', 'input': {'a': 1, 'b': 2}, 'value': '@@REMOVE'}}", "{}",
     "{'b': 2}", 0},
    {"{'@let': {'vars': {'x': 2, 'y': '@a'}, 'in': {'@multiply': ['@@x', '@@y']}}}",
     "{'a': 3}", "6", 0},
    {"{'@let': {'vars': {'X': 1}, 'in': 1}}", "{}", NULL, 16870},
    /* missing values flowing through variables and folds (libbson cannot copy EOD) */
    {"{'@let': {'vars': {'x': '@nope'}, 'in': '@@x'}}", "{}", "MISSING", 0},
    {"{'@min': ['@nope']}", "{}", "null", 0},
    {"{'@max': ['@nope', 2]}", "{}", "2", 0},
    {"{'@sum': ['@nope', 2]}", "{}", "2", 0},
    {"{'@reduce': {'input': [1], 'initialValue': '@nope', 'in': '@@value'}}", "{}", "MISSING",
     0},
    {"{'@map': {'input': [1], 'in': '@nope'}}", "{}", "[null]", 0},
    {"{'@let': {'in': 1}}", "{}", NULL, 16876},
    /* dates */
    {"{'@year': {'@date': 1614556800000}}", "{}", "2021", 0},
    {"{'@month': '@d'}", "{'d': {'@date': 1614556800000}}", "3", 0},
    {"{'@dayOfMonth': '@d'}", "{'d': {'@date': 1614556800000}}", "1", 0},
    {"{'@dayOfWeek': '@d'}", "{'d': {'@date': 1614556800000}}", "2", 0},
    {"{'@dayOfYear': '@d'}", "{'d': {'@date': 1614556800000}}", "60", 0},
    {"{'@hour': {'date': '@d', 'timezone': '+02:00'}}", "{'d': {'@date': 1614556800000}}", "2",
     0},
    {"{'@week': '@d'}", "{'d': {'@date': 1614556800000}}", "9", 0},
    {"{'@isoWeek': '@d'}", "{'d': {'@date': 1609459200000}}", "53", 0},
    {"{'@isoWeekYear': '@d'}", "{'d': {'@date': 1609459200000}}", "{'@numberLong': '2020'}", 0},
    {"{'@millisecond': {'@date': 1614556800123}}", "{}", "123", 0},
    {"{'@year': 'x'}", "{}", NULL, 16006},
    {"{'@dateToString': {'date': {'@date': 1614556800123}}}", "{}",
     "'2021-03-01T00:00:00.123Z'", 0},
    {"{'@dateToString': {'format': '%d/%m/%Y %H:%M:%S %j %w %u %V %G %%', 'date': "
     "{'@date': 1614556800123}}}",
     "{}", "'01/03/2021 00:00:00 060 2 1 09 2021 %'", 0},
    {"{'@dateToString': {'format': '%Q', 'date': {'@date': 0}}}", "{}", NULL, 18536},
    {"{'@dateToString': {'date': null, 'onNull': 'none'}}", "{}", "'none'", 0},
    {"{'@dateToString': {'date': 1, 'timezone': 'Mars/Base'}}", "{}", NULL, 40485},
    {"{'@dateFromString': {'dateString': '2021-03-01T10:20:30.5Z'}}", "{}",
     "{'@date': 1614594030500}", 0},
    {"{'@dateFromString': {'dateString': '2021-03-01T10:20:30+01:00'}}", "{}",
     "{'@date': 1614590430000}", 0},
    {"{'@dateFromString': {'dateString': '01/03/2021', 'format': '%d/%m/%Y'}}", "{}",
     "{'@date': 1614556800000}", 0},
    {"{'@dateFromString': {'dateString': 'nope'}}", "{}", NULL, 241},
    {"{'@dateFromString': {'dateString': 'nope', 'onError': 0}}", "{}", "0", 0},
    {"{'@dateFromParts': {'year': 2021, 'month': 14, 'day': 1}}", "{}",
     "{'@date': 1643673600000}", 0},
    {"{'@dateAdd': {'startDate': {'@date': 1612051200000}, 'unit': 'month', 'amount': 1}}",
     "{}", "{'@date': 1614470400000}", 0},
    {"{'@dateDiff': {'startDate': {'@date': 0}, 'endDate': {'@date': 172800000}, 'unit': "
     "'day'}}",
     "{}", "{'@numberLong': '2'}", 0},
    {"{'@toDate': '2021-03-01'}", "{}", "{'@date': 1614556800000}", 0},
    {"{'@toDate': {'@numberLong': '1000'}}", "{}", "{'@date': 1000}", 0},
    /* types */
    /* ($type is checked through the server: libbson's JSON parser owns that key) */
    {"{'@isNumber': 1.5}", "{}", "true", 0},
    {"{'@toString': 1.5}", "{}", "'1.5'", 0},
    {"{'@toString': {'@oid': '5f1b2c3d4e5f6a7b8c9d0e1f'}}", "{}", "'5f1b2c3d4e5f6a7b8c9d0e1f'", 0},
    {"{'@toString': true}", "{}", "'true'", 0},
    {"{'@toInt': '12'}", "{}", "12", 0},
    {"{'@toInt': 2.9}", "{}", "2", 0},
    {"{'@toInt': 'x1'}", "{}", NULL, 241},
    {"{'@toInt': 1e20}", "{}", NULL, 241},
    {"{'@toLong': '12'}", "{}", "{'@numberLong': '12'}", 0},
    {"{'@toDouble': '1.5'}", "{}", "1.5", 0},
    {"{'@toDouble': true}", "{}", "1.0", 0},
    {"{'@toDecimal': 1}", "{}", "{'@numberDecimal': '1'}", 0},
    {"{'@toBool': 0}", "{}", "false", 0},
    {"{'@toBool': 'false'}", "{}", "true", 0},
    {"{'@toObjectId': '5f1b2c3d4e5f6a7b8c9d0e1f'}", "{}",
     "{'@oid': '5f1b2c3d4e5f6a7b8c9d0e1f'}", 0},
    {"{'@toObjectId': 'xyz'}", "{}", NULL, 241},
    {"{'@toInt': null}", "{}", "null", 0},
    {"{'@convert': {'input': 'x', 'to': 'int', 'onError': -1}}", "{}", "-1", 0},
    {"{'@convert': {'input': null, 'to': 'int', 'onNull': 0}}", "{}", "0", 0},
    {"{'@convert': {'input': 5, 'to': 'double'}}", "{}", "5.0", 0},
    {"{'@convert': {'input': 5, 'to': 2}}", "{}", "'5'", 0},
    {"{'@convert': {'input': 5, 'to': 'nope'}}", "{}", NULL, 2},
    {"{'@convert': {'input': 5}}", "{}", NULL, 17080},
    /* $percentile / $median: the discrete percentile, rank ceil(p * n) - 1 */
    {"{'@percentile': {'input': '@a', 'p': [0, 0.2, 0.25, 0.5, 0.75, 1], 'method': 'approximate'}}",
     "{'a': [4, 1, 'x', 3, 2, null]}", "[1.0, 1.0, 1.0, 2.0, 3.0, 4.0]", 0},
    {"{'@median': {'input': '@a', 'method': 'approximate'}}", "{'a': [5, 1, 3]}", "3.0", 0},
    {"{'@median': {'input': '@a', 'method': 'approximate'}}", "{'a': [5, 1, 3, 9]}", "3.0", 0},
    {"{'@median': {'input': '@a', 'method': 'approximate'}}", "{'a': 7}", "7.0", 0},
    {"{'@median': {'input': '@a', 'method': 'approximate'}}", "{'a': []}", "null", 0},
    {"{'@percentile': {'input': '@a', 'p': [0.5, 0.9], 'method': 'approximate'}}", "{}",
     "[null, null]", 0},
    {"{'@percentile': {'input': [1, 2], 'p': [1.01], 'method': 'approximate'}}", "{}", NULL,
     7750303},
    {"{'@percentile': {'input': [1, 2], 'p': '@a', 'method': 'approximate'}}", "{}", NULL,
     7750300},
    {"{'@percentile': {'input': [1, 2], 'p': ['@@NOW'], 'method': 'approximate'}}", "{}", NULL,
     7750300},
    {"{'@percentile': {'input': [1, 2], 'p': [{'@rand': {}}], 'method': 'approximate'}}", "{}",
     NULL, 7750300},
    {"{'@percentile': {'input': [3, 1, 2], 'p': {'@concatArrays': [[0], [{'@add': [0.5, 0.5]}]]}, "
     "'method': 'approximate'}}", "{}", "[1.0, 3.0]", 0},
    {"{'@median': {'input': [1, 2], 'method': 'discrete'}}", "{}", NULL, 2},
    {"{'@median': {'input': [1, 2]}}", "{}", NULL, 40414},
    {"{'@median': [1, 2]}", "{}", NULL, 7436201},
};

/* The canonical extended JSON of {r: v} (or of {} when v is missing). */
static char *canon_value(const bson_value_t *v)
{
    bson_t d = BSON_INITIALIZER;
    if (v->value_type != BSON_TYPE_EOD)
        bson_append_value(&d, "r", 1, v);
    char *s = bson_as_canonical_extended_json(&d, NULL);
    bson_destroy(&d);
    return s;
}

static void run_cases(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const ecase_t *c = &cases[i];
        char buf[2048];
        snprintf(buf, sizeof(buf), "{'e': %s}", c->expr);
        bson_t *spec = J(buf), *doc = J(c->doc);
        CHECK_MSG(spec != NULL && doc != NULL, "case %zu unparsable", i);
        if (spec == NULL || doc == NULL)
            continue;
        bson_iter_t it;
        bson_iter_init_find(&it, spec, "e");
        bson_value_t ev;
        ev = *bson_iter_value(&it);
        sbl_expr_t *e = NULL;
        sbl_err_t err = {0};
        bson_value_t out = {.value_type = BSON_TYPE_EOD};
        int rc = sbl_expr_parse(&ev, &e, &err);
        if (rc == 0) {
            sbl_expr_env_t env = {.root = doc};
            rc = sbl_expr_eval(e, &env, &out, &err);
        }
        if (c->want == NULL) {
            CHECK_MSG(rc == c->code, "%s: want error %d, got %d (%s)", c->expr, c->code, rc,
                      err.msg);
        } else if (rc != 0) {
            CHECK_MSG(rc == 0, "%s: unexpected error %d: %s", c->expr, rc, err.msg);
        } else {
            bson_t *want = NULL;
            if (strcmp(c->want, "MISSING") == 0) {
                want = bson_new();
            } else {
                snprintf(buf, sizeof(buf), "{'r': %s}", c->want);
                want = J(buf);
            }
            char *ws = bson_as_canonical_extended_json(want, NULL), *gs = canon_value(&out);
            CHECK_MSG(strcmp(ws, gs) == 0, "%s: want %s, got %s", c->expr, ws, gs);
            bson_free(ws);
            bson_free(gs);
            bson_destroy(want);
        }
        bson_value_destroy(&out);
        sbl_expr_free(e);
        bson_destroy(spec);
        bson_destroy(doc);
    }
}

/* ---- $jsonSchema ------------------------------------------------------------------------ */

static bool schema_ok(const char *schema, const char *doc)
{
    bson_t *s = J(schema), *d = J(doc);
    sbl_schema_t *p = NULL;
    sbl_err_t err = {0};
    bool r = false;
    if (sbl_schema_parse(s, &p, &err) == 0)
        r = sbl_schema_match(p, d);
    else
        fprintf(stderr, "schema error %d: %s\n", err.code, err.msg);
    sbl_schema_free(p);
    bson_destroy(s);
    bson_destroy(d);
    return r;
}

static int schema_err(const char *schema)
{
    bson_t *s = J(schema);
    sbl_schema_t *p = NULL;
    sbl_err_t err = {0};
    int rc = sbl_schema_parse(s, &p, &err);
    sbl_schema_free(p);
    bson_destroy(s);
    return rc;
}

static void test_schema(void)
{
    const char *s = "{'bsonType': 'object', 'required': ['a'], 'properties': {"
                    "'a': {'bsonType': ['int', 'long'], 'minimum': 0, 'maximum': 10},"
                    "'s': {'type': 'string', 'minLength': 2, 'maxLength': 3, 'pattern': '^x'},"
                    "'e': {'enum': [1, 'two']},"
                    "'arr': {'bsonType': 'array', 'items': {'bsonType': 'int'}, 'minItems': 1,"
                    " 'uniqueItems': true},"
                    "'o': {'bsonType': 'object', 'additionalProperties': false,"
                    " 'properties': {'k': {}}}}}";
    CHECK(schema_ok(s, "{'a': 5}"));
    CHECK(!schema_ok(s, "{'b': 5}"));
    CHECK(!schema_ok(s, "{'a': 11}"));
    CHECK(!schema_ok(s, "{'a': 1.5}"));
    CHECK(schema_ok(s, "{'a': 1, 's': 'xy'}"));
    CHECK(!schema_ok(s, "{'a': 1, 's': 'x'}"));
    CHECK(!schema_ok(s, "{'a': 1, 's': 'yy'}"));
    CHECK(!schema_ok(s, "{'a': 1, 'e': 3}"));
    CHECK(schema_ok(s, "{'a': 1, 'e': 'two'}"));
    CHECK(schema_ok(s, "{'a': 1, 'arr': [1, 2]}"));
    CHECK(!schema_ok(s, "{'a': 1, 'arr': [1, 1]}"));
    CHECK(!schema_ok(s, "{'a': 1, 'arr': []}"));
    CHECK(!schema_ok(s, "{'a': 1, 'arr': ['x']}"));
    CHECK(schema_ok(s, "{'a': 1, 'o': {'k': 1}}"));
    CHECK(!schema_ok(s, "{'a': 1, 'o': {'k': 1, 'z': 2}}"));
    CHECK(schema_ok("{'anyOf': [{'required': ['x']}, {'required': ['y']}]}", "{'y': 1}"));
    CHECK(!schema_ok("{'not': {'required': ['x']}}", "{'x': 1}"));
    CHECK(schema_ok("{'properties': {'n': {'exclusiveMinimum': true, 'minimum': 0}}}",
                    "{'n': 1}"));
    CHECK(!schema_ok("{'properties': {'n': {'exclusiveMinimum': true, 'minimum': 0}}}",
                     "{'n': 0}"));
    CHECK(schema_err("{'bsonType': 'nope'}") == 2);
    CHECK(schema_err("{'foo': 1}") == 9);
    CHECK(schema_err("{'required': 'a'}") == 14);
}

/* ---- the matcher hook and let binding --------------------------------------------------- */

static bool match(const char *filter, const char *doc)
{
    bson_t *f = J(filter), *d = J(doc);
    sbl_err_t err = {0};
    sbl_matcher_t *m = sbl_matcher_new(f, &err);
    bool r = m != NULL && sbl_matcher_match(m, d, NULL);
    sbl_matcher_free(m);
    bson_destroy(f);
    bson_destroy(d);
    return r;
}

static void test_matcher(void)
{
    sbl_expr_init();
    CHECK(match("{'@expr': {'@gt': ['@a', '@b']}}", "{'a': 2, 'b': 1}"));
    CHECK(!match("{'@expr': {'@gt': ['@a', '@b']}}", "{'a': 1, 'b': 1}"));
    CHECK(match("{'x': 1, '@expr': {'@eq': ['@x', 1]}}", "{'x': 1}"));
    CHECK(match("{'@jsonSchema': {'required': ['x']}}", "{'x': 1}"));
    CHECK(!match("{'@jsonSchema': {'required': ['x']}}", "{'y': 1}"));
    bson_t *bad = J("{'@expr': {'@nope': 1}}");
    sbl_err_t err = {0};
    CHECK(sbl_matcher_new(bad, &err) == NULL && err.code == 168);
    bson_destroy(bad);

    /* let: values are expressions over no document; names must start lowercase */
    bson_t *let = J("{'x': {'@add': [1, 2]}, 's': 'str'}"), vals;
    CHECK(sbl_expr_eval_let(let, &vals, &err) == 0);
    bson_iter_t it;
    CHECK(bson_iter_init_find(&it, &vals, "x") && bson_iter_as_int64(&it) == 3);
    bson_t *f = J("{'@or': [{'@expr': {'@eq': ['@v', '@@x']}}, {'v': 'nope'}]}"), bound;
    sbl_expr_bind_let(f, &vals, &bound);
    sbl_matcher_t *m = sbl_matcher_new(&bound, &err);
    bson_t *d = J("{'v': 3}");
    CHECK(m != NULL && sbl_matcher_match(m, d, NULL));
    sbl_matcher_free(m);
    bson_destroy(d);
    bson_destroy(f);
    bson_destroy(&bound);
    bson_destroy(&vals);
    bson_destroy(let);
    let = J("{'Bad': 1}");
    CHECK(sbl_expr_eval_let(let, &vals, &err) == 16870);
    bson_destroy(&vals);
    bson_destroy(let);
}

int main(void)
{
    CHECK(sbl_expr_table_sorted());
    run_cases();
    test_schema();
    test_matcher();
    return CHECK_DONE("test_expr");
}
