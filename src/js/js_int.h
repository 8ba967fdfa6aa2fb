/*
 * js_int.h: private to src/js.  Duktape with the configuration Sable builds
 * it with (duk_build.c), and the per-thread engine state the files share.
 *
 * What must stay true:
 *  - One engine (Duktape heap) per thread, created on first use and never
 *    shared: a heap is not thread-safe.
 *  - Every call into JavaScript runs under duk_pcall/duk_peval: an uncaught
 *    error outside a protected call would reach the fatal handler.
 *  - A heap that ran out of memory or time is destroyed after the call and
 *    made afresh by the next one (its state may be half-built).
 */
#ifndef SBL_JS_INT_H
#define SBL_JS_INT_H

#include <duk_config.h>
/* Not in Debian's duk_config.h: the interrupt counter drives the timeout check. */
#define DUK_USE_INTERRUPT_COUNTER
#define DUK_USE_EXEC_TIMEOUT_CHECK(udata) sbl_js_timeout_check(udata)
int sbl_js_timeout_check(void *udata);
#include <duktape.h>

#include "js/js.h"

typedef struct js_tls {
    duk_context *ctx;     /* NULL until first use, or after a reset */
    size_t used, limit;   /* bytes the heap holds; its limit */
    int64_t call_deadline_us; /* the running call's deadline (0: none) */
    bool timed_out, oom;  /* what stopped the running call */
    int64_t op_deadline_us;   /* the operation's maxTimeMS deadline (0: none) */
    sbl_js_killed_fn killed;  /* the operation's killOp flag (NULL: none) */
    const void *killed_arg;
    bool was_killed;          /* what stopped the running call */
    int pending_code;         /* first error of this operation (0: none) */
    char pending_msg[SBL_ERRMSG_MAX];
    sbl_js_emit_fn emit;      /* mapReduce's emit() sink (NULL: emit throws) */
    void *emit_arg;
    uint32_t ncached;         /* compiled functions in the heap's cache */
} js_tls_t;

/* js_conv.c: push a BSON value / document as a JavaScript value. */
void js_push_value(duk_context *ctx, const bson_value_t *v, int depth);
void js_push_doc(duk_context *ctx, const bson_t *doc, bool array, int depth);
/* Append the JavaScript value at idx to b under key; false (with msg) when it
 * cannot be converted (too deep). */
bool js_append_value(duk_context *ctx, duk_idx_t idx, bson_t *b, const char *key, int klen,
                     int depth, char *msg, size_t msglen);
/* The JavaScript that defines Sable's shell types (ObjectId, NumberLong ...). */
extern const char js_prelude[];

#endif
