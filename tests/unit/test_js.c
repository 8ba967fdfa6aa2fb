/*
 * test_js.c: src/js on its own: BSON values through a JavaScript identity
 * function and back (types kept where mongod keeps them, numbers as
 * doubles), the shell types' methods, compile errors, the per-call cap, the
 * operation deadline, the heap limit, the pending error of an operation and
 * its nesting, and the disabled engine.
 */
#include <string.h>

#include "check.h"
#include "common/clock.h"
#include "doc/doc.h"
#include "js/js.h"

static const char *ID = "function(x) { return x }";

/* Run src on the single value of {v: ...} given as JSON; *out owned. */
static int call1(const char *src, const char *json, bson_value_t *out, sbl_err_t *err)
{
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &e);
    bson_iter_t it;
    if (b == NULL || !bson_iter_init_find(&it, b, "v")) {
        fprintf(stderr, "bad JSON %s\n", json);
        return -1;
    }
    int rc = sbl_js_call(src, strlen(src), NULL, bson_iter_value(&it), 1, out, err);
    bson_destroy(b);
    return rc;
}

/* The identity gives back a value equal to the input, of type want. */
static void round_trip(const char *json, bson_type_t want)
{
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &e);
    bson_iter_t it;
    bson_value_t out;
    sbl_err_t err;
    CHECK_MSG(b != NULL && bson_iter_init_find(&it, b, "v"), "%s", json);
    if (b == NULL)
        return;
    int rc = sbl_js_call(ID, strlen(ID), NULL, bson_iter_value(&it), 1, &out, &err);
    CHECK_MSG(rc == 0, "%s: %s", json, err.msg);
    if (rc == 0) {
        CHECK_MSG(out.value_type == want, "%s: type %d", json, out.value_type);
        CHECK_MSG(sbl_value_compare(bson_iter_value(&it), &out) == 0, "%s changed", json);
        bson_value_destroy(&out);
    }
    bson_destroy(b);
}

static void check_string(const char *src, const char *json, const char *want)
{
    bson_value_t out;
    sbl_err_t err;
    int rc = call1(src, json, &out, &err);
    CHECK_MSG(rc == 0, "%s: %s", src, err.msg);
    if (rc != 0)
        return;
    CHECK_MSG(out.value_type == BSON_TYPE_UTF8 && strcmp(out.value.v_utf8.str, want) == 0,
              "%s on %s: got %s", src, json,
              out.value_type == BSON_TYPE_UTF8 ? out.value.v_utf8.str : "(not a string)");
    bson_value_destroy(&out);
}

static void check_fails(const char *src, int code, const char *text)
{
    bson_value_t out;
    sbl_err_t err;
    sbl_err_clear(&err);
    int rc = call1(src, "{\"v\": 1}", &out, &err);
    CHECK_MSG(rc == code && strstr(err.msg, text) != NULL, "%s: %d %s", src, rc, err.msg);
}

static bool always_killed(const void *arg)
{
    (void)arg;
    return true;
}

int main(void)
{
    sbl_js_configure(true, (size_t)8 << 20, 200);

    round_trip("{\"v\": 1.5}", BSON_TYPE_DOUBLE);
    round_trip("{\"v\": 7}", BSON_TYPE_DOUBLE); /* int32 -> number -> double, as mongod */
    round_trip("{\"v\": {\"$numberLong\": \"9007199254740993\"}}", BSON_TYPE_INT64);
    round_trip("{\"v\": {\"$numberLong\": \"-9223372036854775808\"}}", BSON_TYPE_INT64);
    round_trip("{\"v\": {\"$numberDecimal\": \"1.000000000000000000000000000000001\"}}",
               BSON_TYPE_DECIMAL128);
    round_trip("{\"v\": \"h\\u00e9llo \\u2603\"}", BSON_TYPE_UTF8);
    round_trip("{\"v\": {\"$oid\": \"0123456789abcdef01234567\"}}", BSON_TYPE_OID);
    round_trip("{\"v\": {\"$date\": {\"$numberLong\": \"-86400001\"}}}", BSON_TYPE_DATE_TIME);
    round_trip("{\"v\": {\"$binary\": {\"base64\": \"AAEC/w==\", \"subType\": \"80\"}}}",
               BSON_TYPE_BINARY);
    round_trip("{\"v\": {\"$binary\": {\"base64\": \"\", \"subType\": \"00\"}}}",
               BSON_TYPE_BINARY);
    round_trip("{\"v\": {\"$regularExpression\": {\"pattern\": \"^a.c\", \"options\": \"im\"}}}",
               BSON_TYPE_REGEX);
    round_trip("{\"v\": {\"$timestamp\": {\"t\": 4000000000, \"i\": 7}}}", BSON_TYPE_TIMESTAMP);
    round_trip("{\"v\": {\"$minKey\": 1}}", BSON_TYPE_MINKEY);
    round_trip("{\"v\": {\"$maxKey\": 1}}", BSON_TYPE_MAXKEY);
    round_trip("{\"v\": null}", BSON_TYPE_NULL);
    round_trip("{\"v\": true}", BSON_TYPE_BOOL);
    round_trip("{\"v\": {\"a\": [1, {\"b\": \"c\"}, []], \"\": {}}}", BSON_TYPE_DOCUMENT);
    round_trip("{\"v\": [[[]]]}", BSON_TYPE_ARRAY);

    /* What scripts see. */
    check_string("function(x) { return typeof x + ' ' + x.toString() + ' ' + (x + 1) }", "{\"v\": {\"$numberLong\": \"5\"}}",
                 "object NumberLong(5) 6");
    check_string("function(x) { return x.str + '/' + x.getTimestamp().getTime() }",
                 "{\"v\": {\"$oid\": \"000000010000000000000000\"}}",
                 "000000010000000000000000/1000");
    check_string("function(x) { return x.toISOString() }",
                 "{\"v\": {\"$date\": {\"$numberLong\": \"0\"}}}", "1970-01-01T00:00:00.000Z");
    check_string("function(x) { return x.base64() + x.subtype() + x.length() }",
                 "{\"v\": {\"$binary\": {\"base64\": \"AAEC/w==\", \"subType\": \"05\"}}}",
                 "AAEC/w==54");
    check_string("function(x) { return String(x.test('ABC')) + x.source }",
                 "{\"v\": {\"$regularExpression\": {\"pattern\": \"^a.c\", \"options\": \"i\"}}}",
                 "true^a.c");
    check_string("function(x) { return tojson(x) }", "{\"v\": {\"$numberDecimal\": \"2.50\"}}",
                 "NumberDecimal(\"2.50\")");
    check_string("function(a) { return JSON.stringify(a) }", "{\"v\": {\"b\": [1, \"x\"]}}",
                 "{\"b\":[1,\"x\"]}");
    check_string("this.x = 1; return typeof emit", "{\"v\": 0}", "function");
    check_string("'expression ' + 1", "{\"v\": 0}", "expression 1");

    /* Errors: syntax, thrown, the cap, memory, a cycle. */
    check_fails("function( {", SBL_E_JSInterpreterFailure, "SyntaxError");
    check_fails("function() { throw new Error('boom') }", SBL_E_JSInterpreterFailure,
                "Error: boom");
    check_fails("function() { emit(1, 2) }", SBL_E_JSInterpreterFailure, "emit");
    int64_t t0 = sbl_now_us();
    check_fails("function() { for (;;) {} }", SBL_E_JSInterpreterFailure, "timed out");
    CHECK(sbl_now_us() - t0 < 5 * 1000 * 1000);
    check_fails("function() { var s = 'x'; for (;;) s = s + s }", SBL_E_JSInterpreterFailure,
                "Out of memory");
    check_fails("function() { var a = {}; a.a = a; return a }", SBL_E_JSInterpreterFailure,
                "nested");
    round_trip("{\"v\": 3.25}", BSON_TYPE_DOUBLE); /* the engine was rebuilt and works */

    /* The operation's deadline comes first: MaxTimeMSExpired. */
    sbl_js_opstate_t outer, inner;
    sbl_err_t err;
    sbl_js_op_begin(&outer, sbl_now_us() + 20 * 1000, NULL, NULL);
    check_fails("function() { for (;;) {} }", SBL_E_MaxTimeMSExpired, "time limit");
    /* A pending error survives a nested operation and is the outer one's. */
    sbl_err_set(&err, SBL_E_JSInterpreterFailure, "first");
    sbl_js_set_pending(&err);
    sbl_js_op_begin(&inner, 0, NULL, NULL);
    CHECK(sbl_js_pending(&err) == 0);
    CHECK(sbl_js_op_end(&inner, &err) == 0);
    sbl_err_set(&err, SBL_E_JSInterpreterFailure, "second");
    sbl_js_set_pending(&err); /* the first one is kept */
    CHECK(sbl_js_op_end(&outer, &err) == SBL_E_JSInterpreterFailure &&
          strcmp(err.msg, "first") == 0);
    CHECK(sbl_js_pending(&err) == 0);

    /* $where's form: this and obj are the document. */
    bson_t *doc = BCON_NEW("a", BCON_INT32(5));
    bool m = false;
    CHECK(sbl_js_where("this.a == 5 && obj.a == 5", 25, doc, &m, &err) == 0 && m);
    CHECK(sbl_js_where("function() { return this.a > 5 }", 32, doc, &m, &err) == 0 && !m);

    /* An operation killed while this thread's engine is being made (a
     * timeout above left none): Interrupted, not a broken engine (139). */
    check_fails("function() { for (;;) {} }", SBL_E_JSInterpreterFailure, "timed out");
    sbl_js_opstate_t killed_op;
    sbl_js_op_begin(&killed_op, 0, always_killed, NULL);
    CHECK(sbl_js_where("this.a == 5", 11, doc, &m, &err) == SBL_E_Interrupted);
    sbl_js_op_end(&killed_op, &err);
    CHECK(sbl_js_where("this.a == 5", 11, doc, &m, &err) == 0 && m); /* and it works after */
    bson_destroy(doc);

    sbl_js_configure(false, 0, 0);
    CHECK(sbl_js_check_compiles("1", 1, &err) == SBL_E_JSDisabled);
    check_fails(ID, SBL_E_JSDisabled, "without the javascript engine enabled");
    return CHECK_DONE("test_js");
}
