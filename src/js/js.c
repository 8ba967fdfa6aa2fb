/*
 * js.c: the per-thread JavaScript engines and the calls into them.
 *
 * An engine is a Duktape heap whose allocator counts what it holds (each
 * block carries its size in a 16-byte header) and refuses past the limit,
 * and whose interrupt hook (sbl_js_timeout_check, every few hundred thousand
 * bytecodes) stops the running call at its deadline.  Compiled functions are
 * cached in the heap's global stash by source text.
 *
 * What must stay true: the operation state (deadline, pending error) lives
 * beside the engine in this thread's js_tls_t and is saved and restored
 * around nested operations (a command run by another command on the same
 * thread), so an inner command can neither lose nor steal the outer's error.
 */
#include "js/js_int.h"

#include "common/clock.h"
#include "common/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define JS_CACHE_MAX 1000 /* compiled functions kept per engine */

static bool g_enabled = true;
static size_t g_heap_limit = (size_t)256 << 20;
static int64_t g_call_cap_ms = 60 * 1000;

static __thread js_tls_t *tls;

void sbl_js_configure(bool enabled, size_t heap_limit, int64_t call_cap_ms)
{
    g_enabled = enabled;
    if (heap_limit > 0)
        g_heap_limit = heap_limit;
    g_call_cap_ms = call_cap_ms;
}

bool sbl_js_enabled(void)
{
    return g_enabled;
}

int sbl_js_check_enabled(int code, sbl_err_t *err)
{
    if (g_enabled)
        return 0;
    return sbl_err_set(err, code,
                       "Cannot run server-side javascript without the javascript engine enabled");
}

static void engine_reset(js_tls_t *t);

/* A thread's engine is destroyed when the thread exits (worker threads
 * come and go): the key's destructor gets the thread's js_tls_t. */
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_free(void *arg)
{
    js_tls_t *t = arg;
    engine_reset(t);
    free(t);
    tls = NULL;
}

static void tls_key_make(void)
{
    if (pthread_key_create(&tls_key, tls_free) != 0)
        abort();
}

static js_tls_t *tls_get(void)
{
    if (tls == NULL) {
        pthread_once(&tls_once, tls_key_make);
        tls = calloc(1, sizeof(*tls));
        if (tls == NULL)
            abort(); /* a few hundred bytes once per thread */
        pthread_setspecific(tls_key, tls);
    }
    return tls;
}

/* ---- the allocator: counted, limited ------------------------------------- */

typedef struct blk {
    size_t size;
    size_t pad; /* keeps the block 16-byte aligned */
} blk_t;

static void *js_alloc(void *ud, duk_size_t size)
{
    js_tls_t *t = ud;
    if (size == 0)
        return NULL;
    if (t->used + size > t->limit) {
        t->oom = true;
        return NULL;
    }
    blk_t *b = malloc(sizeof(*b) + size);
    if (b == NULL) {
        t->oom = true;
        return NULL;
    }
    b->size = size;
    t->used += size;
    return b + 1;
}

static void js_free(void *ud, void *ptr)
{
    js_tls_t *t = ud;
    if (ptr == NULL)
        return;
    blk_t *b = (blk_t *)ptr - 1;
    t->used -= b->size;
    free(b);
}

static void *js_realloc(void *ud, void *ptr, duk_size_t size)
{
    js_tls_t *t = ud;
    if (ptr == NULL)
        return js_alloc(ud, size);
    if (size == 0) {
        js_free(ud, ptr);
        return NULL;
    }
    blk_t *b = (blk_t *)ptr - 1;
    size_t old = b->size;
    if (size > old && t->used + (size - old) > t->limit) {
        t->oom = true;
        return NULL;
    }
    blk_t *nb = realloc(b, sizeof(*nb) + size);
    if (nb == NULL) {
        t->oom = true;
        return NULL;
    }
    nb->size = size;
    t->used = t->used - old + size;
    return nb + 1;
}

/* Reached only by an error outside a protected call: a bug in this module. */
static void js_fatal(void *ud, const char *msg)
{
    sbl_log('F', "JS", 7100, msg ? msg : "Duktape fatal error", NULL);
    abort();
}

int sbl_js_timeout_check(void *udata)
{
    js_tls_t *t = udata;
    if (t->killed != NULL && t->killed(t->killed_arg)) {
        t->timed_out = t->was_killed = true;
        return 1;
    }
    if (t->call_deadline_us != 0 && sbl_now_us() > t->call_deadline_us) {
        t->timed_out = true;
        return 1;
    }
    return 0;
}

/* ---- engines --------------------------------------------------------------- */

static duk_ret_t js_emit_native(duk_context *ctx)
{
    js_tls_t *t = tls;
    char msg[256];
    bson_t b = BSON_INITIALIZER;
    bson_iter_t it;
    bson_value_t kv[2];
    sbl_err_t err;

    if (t->emit == NULL)
        return duk_error(ctx, DUK_ERR_REFERENCE_ERROR, "emit is not defined");
    if (!js_append_value(ctx, 0, &b, "k", 1, 0, msg, sizeof(msg)) ||
        !js_append_value(ctx, 1, &b, "v", 1, 0, msg, sizeof(msg))) {
        bson_destroy(&b);
        return duk_error(ctx, DUK_ERR_RANGE_ERROR, "%s", msg);
    }
    bson_iter_init(&it, &b);
    bson_iter_next(&it);
    kv[0] = *bson_iter_value(&it);
    bson_iter_next(&it);
    kv[1] = *bson_iter_value(&it);
    sbl_err_clear(&err);
    int rc = t->emit(t->emit_arg, &kv[0], &kv[1], &err);
    bson_destroy(&b);
    if (rc != 0)
        return duk_error(ctx, DUK_ERR_ERROR, "%s", err.msg);
    return 0;
}

/* sleep(ms), as mongod's JavaScript has it (drivers' tests slow queries with
 * it): sleeps in slices of at most 10 ms, stopping at the call's deadline
 * as a running script would. */
static duk_ret_t js_sleep_native(duk_context *ctx)
{
    js_tls_t *t = tls;
    double ms = duk_to_number(ctx, 0);
    int64_t end = sbl_now_us() + (ms > 0 && ms < 1e12 ? (int64_t)(ms * 1000) : 0);
    for (int64_t now = sbl_now_us(); now < end; now = sbl_now_us()) {
        if (sbl_js_timeout_check(t))
            return duk_error(ctx, DUK_ERR_RANGE_ERROR, "execution timeout");
        int64_t step = end - now < 10000 ? end - now : 10000;
        struct timespec ts = {0, (long)step * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void engine_reset(js_tls_t *t)
{
    if (t->ctx != NULL)
        duk_destroy_heap(t->ctx);
    t->ctx = NULL;
    t->ncached = 0;
}

/* This thread's engine, made on first use; NULL with err when it cannot be. */
static js_tls_t *engine(sbl_err_t *err)
{
    js_tls_t *t = tls_get();
    if (t->ctx != NULL)
        return t;
    t->used = 0;
    t->limit = g_heap_limit;
    t->call_deadline_us = 0;
    t->ctx = duk_create_heap(js_alloc, js_realloc, js_free, t, js_fatal);
    if (t->ctx == NULL) {
        sbl_err_set(err, SBL_E_JSInterpreterFailure, "Out of memory");
        return NULL;
    }
    duk_context *ctx = t->ctx;
    duk_push_c_function(ctx, js_emit_native, 2);
    duk_put_global_string(ctx, "emit");
    duk_push_c_function(ctx, js_sleep_native, 1);
    duk_put_global_string(ctx, "sleep");
    /* The prelude runs whole: a killOp that comes meanwhile is seen by the
     * call's first check (Interrupted), not taken for a broken engine. */
    sbl_js_killed_fn killed = t->killed;
    t->killed = NULL;
    int bad = duk_peval_string(ctx, js_prelude);
    t->killed = killed;
    if (bad != 0) {
        sbl_err_set(err, SBL_E_JSInterpreterFailure, "cannot set up the JavaScript engine: %s",
                    duk_safe_to_string(ctx, -1));
        engine_reset(t);
        return NULL;
    }
    duk_pop(ctx);
    duk_push_global_stash(ctx);
    duk_push_object(ctx);
    duk_put_prop_string(ctx, -2, "fns");
    duk_pop(ctx);
    return t;
}

/* Start a call: the engine, its deadline; NULL with err. */
static js_tls_t *call_begin(int disabled_code, sbl_err_t *err)
{
    if (sbl_js_check_enabled(disabled_code, err) != 0)
        return NULL;
    js_tls_t *t = engine(err);
    if (t == NULL)
        return NULL;
    int64_t d = t->op_deadline_us;
    if (g_call_cap_ms > 0) {
        int64_t cap = sbl_now_us() + g_call_cap_ms * 1000;
        if (d == 0 || cap < d)
            d = cap;
    }
    t->call_deadline_us = d;
    t->timed_out = t->oom = t->was_killed = false;
    return t;
}

/* A failed call: the error at the top of the stack (popped) becomes err. */
static int call_fail(js_tls_t *t, sbl_err_t *err)
{
    int rc;
    if (t->was_killed) {
        rc = sbl_err_set(err, SBL_E_Interrupted, "operation was interrupted");
    } else if (t->timed_out) {
        if (t->op_deadline_us != 0 && sbl_now_us() >= t->op_deadline_us)
            rc = sbl_err_set(err, SBL_E_MaxTimeMSExpired, "operation exceeded time limit");
        else
            rc = sbl_err_set(err, SBL_E_JSInterpreterFailure,
                             "JavaScript execution timed out after %lld ms",
                             (long long)g_call_cap_ms);
    } else if (t->oom) {
        rc = sbl_err_set(err, SBL_E_JSInterpreterFailure,
                         "Out of memory: JavaScript heap limit of %zu MB reached",
                         t->limit >> 20);
    } else {
        rc = sbl_err_set(err, SBL_E_JSInterpreterFailure, "%s",
                         duk_safe_to_string(t->ctx, -1));
    }
    duk_pop(t->ctx);
    t->call_deadline_us = 0;
    if (t->timed_out || t->oom)
        engine_reset(t);
    return rc;
}

static bool starts_with_function(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return n - i >= 8 && memcmp(s + i, "function", 8) == 0;
}

/* Compile src into a function on the stack: a function expression as it is,
 * anything else as the body of a function returning it (or, failing that,
 * as a function body).  0, or nonzero with the error on the stack. */
static int compile(duk_context *ctx, const char *src, size_t len)
{
    if (starts_with_function(src, len))
        return duk_pcompile_lstring(ctx, DUK_COMPILE_FUNCTION, src, len);
    duk_push_string(ctx, "function(){ return (");
    duk_push_lstring(ctx, src, len);
    duk_push_string(ctx, "\n); }");
    duk_concat(ctx, 3);
    duk_push_string(ctx, "input"); /* the file name errors show */
    if (duk_pcompile(ctx, DUK_COMPILE_FUNCTION) == 0)
        return 0;
    duk_pop(ctx);
    duk_push_string(ctx, "function(){ ");
    duk_push_lstring(ctx, src, len);
    duk_push_string(ctx, "\n}");
    duk_concat(ctx, 3);
    duk_push_string(ctx, "input");
    return duk_pcompile(ctx, DUK_COMPILE_FUNCTION);
}

/* Push the compiled function for src (cached by text); a syntax error is thrown. */
static void push_fn(js_tls_t *t, const char *src, size_t len)
{
    duk_context *ctx = t->ctx;
    duk_push_global_stash(ctx);          /* s */
    duk_get_prop_string(ctx, -1, "fns"); /* s f */
    duk_push_lstring(ctx, src, len);     /* s f k */
    duk_dup(ctx, -1);                    /* s f k k */
    if (duk_get_prop(ctx, -3)) {         /* s f k fn */
        duk_replace(ctx, -4);            /* fn f k */
        duk_pop_2(ctx);
        return;
    }
    duk_pop(ctx); /* s f k */
    if (compile(ctx, src, len) != 0)
        (void)duk_throw(ctx);
    /* s f k fn */
    if (t->ncached < JS_CACHE_MAX) {
        duk_dup(ctx, -2);
        duk_dup(ctx, -2);      /* s f k fn k fn */
        duk_put_prop(ctx, -5); /* s f k fn */
        t->ncached++;
    }
    duk_replace(ctx, -4); /* fn f k */
    duk_pop_2(ctx);
}

/* One call, run under duk_safe_call: everything that may throw (compiling,
 * converting, running) happens inside it. */
typedef struct call {
    js_tls_t *t;
    const char *src;
    size_t len;
    const bson_t *self;
    const bson_value_t *args;
    size_t nargs;
    bool where;         /* also set the global obj = this; keep truthiness */
    bool compile_only;
    const bson_t *globals; /* sbl_js_set_globals */
    bool truthy;
    bson_value_t *out;  /* NULL: the result is not wanted */
} call_t;

static duk_ret_t call_run(duk_context *ctx, void *ud)
{
    call_t *c = ud;
    char msg[256];

    if (c->globals != NULL) {
        bson_iter_t it;
        if (bson_iter_init(&it, c->globals))
            while (bson_iter_next(&it)) {
                js_push_value(ctx, bson_iter_value(&it), 0);
                duk_put_global_lstring(ctx, bson_iter_key(&it), bson_iter_key_len(&it));
            }
        return 0;
    }
    push_fn(c->t, c->src, c->len);
    if (c->compile_only)
        return 0;
    if (c->self != NULL) {
        js_push_doc(ctx, c->self, false, 0);
        if (c->where) {
            duk_dup(ctx, -1);
            duk_put_global_string(ctx, "obj");
        }
    } else {
        duk_push_undefined(ctx);
    }
    for (size_t i = 0; i < c->nargs; i++)
        js_push_value(ctx, &c->args[i], 0);
    duk_call_method(ctx, (duk_idx_t)c->nargs);
    if (c->where) {
        c->truthy = duk_to_boolean(ctx, -1);
    } else if (c->out != NULL) {
        bson_t b = BSON_INITIALIZER;
        bson_iter_t it;
        if (!js_append_value(ctx, -1, &b, "v", 1, 0, msg, sizeof(msg))) {
            bson_destroy(&b);
            return duk_error(ctx, DUK_ERR_RANGE_ERROR, "%s", msg);
        }
        if (bson_iter_init(&it, &b) && bson_iter_next(&it))
            bson_value_copy(bson_iter_value(&it), c->out);
        bson_destroy(&b);
    }
    return 0;
}

static int run(call_t *c, sbl_err_t *err)
{
    js_tls_t *t = call_begin(SBL_E_JSDisabled, err);
    if (t == NULL)
        return err->code;
    c->t = t;
    if (duk_safe_call(t->ctx, call_run, c, 0, 1) != 0) {
        if (c->out != NULL && c->out->value_type != BSON_TYPE_EOD) {
            bson_value_destroy(c->out);
            c->out->value_type = BSON_TYPE_EOD;
        }
        return call_fail(t, err);
    }
    duk_pop(t->ctx);
    t->call_deadline_us = 0;
    return 0;
}

int sbl_js_call(const char *src, size_t srclen, const bson_t *self, const bson_value_t *args,
                size_t nargs, bson_value_t *out, sbl_err_t *err)
{
    call_t c = {.src = src, .len = srclen, .self = self, .args = args, .nargs = nargs,
                .out = out};
    if (out != NULL)
        out->value_type = BSON_TYPE_EOD;
    return run(&c, err);
}

int sbl_js_where(const char *src, size_t srclen, const bson_t *doc, bool *matchp, sbl_err_t *err)
{
    call_t c = {.src = src, .len = srclen, .self = doc, .where = true};
    int rc = run(&c, err);
    *matchp = rc == 0 && c.truthy;
    return rc;
}

int sbl_js_check_compiles(const char *src, size_t srclen, sbl_err_t *err)
{
    call_t c = {.src = src, .len = srclen, .compile_only = true};
    return run(&c, err);
}

int sbl_js_set_globals(const bson_t *scope, sbl_err_t *err)
{
    bson_t empty = BSON_INITIALIZER;
    call_t c = {.globals = scope != NULL ? scope : &empty};
    return run(&c, err);
}

void sbl_js_set_emit(sbl_js_emit_fn fn, void *arg)
{
    js_tls_t *t = tls_get();
    t->emit = fn;
    t->emit_arg = arg;
}

/* ---- the operation's state ------------------------------------------------ */

void sbl_js_op_begin(sbl_js_opstate_t *saved, int64_t deadline_us, sbl_js_killed_fn killed,
                     const void *killed_arg)
{
    js_tls_t *t = tls_get();
    saved->deadline_us = t->op_deadline_us;
    saved->killed = t->killed;
    saved->killed_arg = t->killed_arg;
    t->killed = killed;
    t->killed_arg = killed_arg;
    saved->code = t->pending_code;
    if (saved->code != 0) /* the message means nothing without its code (every command) */
        memcpy(saved->msg, t->pending_msg, sizeof(saved->msg));
    t->op_deadline_us = deadline_us;
    t->pending_code = 0;
}

int sbl_js_op_end(const sbl_js_opstate_t *saved, sbl_err_t *err)
{
    js_tls_t *t = tls_get();
    int code = t->pending_code;
    if (code != 0 && err != NULL)
        sbl_err_set(err, code, "%s", t->pending_msg);
    t->op_deadline_us = saved->deadline_us;
    t->killed = saved->killed;
    t->killed_arg = saved->killed_arg;
    t->pending_code = saved->code;
    if (saved->code != 0)
        memcpy(t->pending_msg, saved->msg, sizeof(saved->msg));
    return code;
}

int sbl_js_pending(sbl_err_t *err)
{
    js_tls_t *t = tls;
    if (t == NULL || t->pending_code == 0)
        return 0;
    return sbl_err_set(err, t->pending_code, "%s", t->pending_msg);
}

void sbl_js_set_pending(const sbl_err_t *err)
{
    js_tls_t *t = tls_get();
    if (t->pending_code != 0 || err->code == 0)
        return;
    t->pending_code = err->code;
    snprintf(t->pending_msg, sizeof(t->pending_msg), "%s", err->msg);
}
