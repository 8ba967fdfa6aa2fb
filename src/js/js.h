/*
 * js.h: server-side JavaScript ($where, $function, mapReduce) on Duktape.
 *
 * One engine per thread, made on first use.  A function's source is compiled
 * once per engine and cached by its text.  Values cross as BSON: documents
 * become objects, and ObjectId, Date, NumberLong, NumberDecimal, BinData,
 * Timestamp, RegExp, MinKey/MaxKey become the types mongod's JavaScript
 * knows; JavaScript numbers come back as doubles.
 *
 * Limits: each call stops at the earlier of the operation's deadline
 * (maxTimeMS, MaxTimeMSExpired 50) and the per-call cap (JSInterpreterFailure
 * 139), or when killOp stops the operation (Interrupted 11601); each
 * engine's heap is held to a byte limit (139 "Out of memory").
 *
 * Errors: a call returns 139 with the script's error text.  Callers that can
 * only answer yes/no (a filter's $where) leave the error pending on the
 * thread; the command layer turns it into the command's error when the
 * command ends (sbl_js_op_end), and long scans see it through
 * sbl_js_pending().  Those calls do nothing while an error is pending.
 */
#ifndef SBL_JS_H
#define SBL_JS_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/errors.h"

/* mongod's codes. */
#define SBL_E_JSDisabled 31264        /* $where, $function, $accumulator */
#define SBL_E_JSDisabledMapReduce 31246

/* Process-wide settings, set once at start-up before any call:
 * enabled (security.javascriptEnabled), heap limit per engine in bytes,
 * per-call cap in ms (0: none). */
void sbl_js_configure(bool enabled, size_t heap_limit, int64_t call_cap_ms);
bool sbl_js_enabled(void);
/* 0, or code (one of the two above) with mongod's message when disabled. */
int sbl_js_check_enabled(int code, sbl_err_t *err);

/* Per operation, on the thread that runs it.  Nesting-safe: begin saves the
 * outer operation's state into *saved, end restores it. */
typedef bool (*sbl_js_killed_fn)(const void *arg);
typedef struct sbl_js_opstate {
    int64_t deadline_us;
    sbl_js_killed_fn killed;
    const void *killed_arg;
    int code;
    char msg[SBL_ERRMSG_MAX];
} sbl_js_opstate_t;
/* killed(arg) (may be NULL), asked as often as the deadline, says killOp
 * asked the operation to stop: the running call fails with Interrupted. */
void sbl_js_op_begin(sbl_js_opstate_t *saved, int64_t deadline_us, sbl_js_killed_fn killed,
                     const void *killed_arg);
/* Restore the outer operation; returns the pending error (0: none), in err. */
int sbl_js_op_end(const sbl_js_opstate_t *saved, sbl_err_t *err);
/* The pending error of this thread's operation, if any (copied into err). */
int sbl_js_pending(sbl_err_t *err);

/*
 * Call the function whose source is src (a function expression such as
 * "function(a) { return a + 1 }", or an expression, which becomes the body of
 * a function returning it).  self: `this` (NULL: undefined); args: nargs
 * values.  out (may be NULL) receives an owned copy of the result, which the
 * caller frees with bson_value_destroy.  Returns 0, or an error.
 */
int sbl_js_call(const char *src, size_t srclen, const bson_t *self, const bson_value_t *args,
                size_t nargs, bson_value_t *out, sbl_err_t *err);

/* $where: run src with this = obj = doc; *matchp: whether the result is truthy. */
int sbl_js_where(const char *src, size_t srclen, const bson_t *doc, bool *matchp, sbl_err_t *err);

/* Check that src compiles (parse time); 0 or 139 with the syntax error. */
int sbl_js_check_compiles(const char *src, size_t srclen, sbl_err_t *err);

/* Set global variables (mapReduce's scope) from the fields of scope. */
int sbl_js_set_globals(const bson_t *scope, sbl_err_t *err);

/* emit(key, value) inside map functions calls fn; NULL turns emit off. */
typedef int (*sbl_js_emit_fn)(void *arg, const bson_value_t *key, const bson_value_t *value,
                              sbl_err_t *err);
void sbl_js_set_emit(sbl_js_emit_fn fn, void *arg);

/* Record err as this thread's pending error (the first one is kept). */
void sbl_js_set_pending(const sbl_err_t *err);

#endif
