/*
 * op.c: what an operation checks of itself and where it calls back up:
 * namespace validation (MongoDB's rules, InvalidNamespace 73), the
 * maxTimeMS deadline, the write-conflict backoff, and the observer and
 * parking hooks the command layer installs at start-up.
 *
 * What must stay true: the hooks are set before the first operation runs
 * and never change afterwards, so reading them needs no lock.
 */
#include "js/js.h"
#include "op/op.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

int sbl_op_ns(const sbl_opctx_t *ctx, char *ns, size_t nslen, sbl_err_t *err)
{
    bson_iter_t it;
    const char *coll;
    SBL_RET(sbl_validate_db_name(ctx->db, err));
    if (sbl_doc_first(ctx->cmd, &coll) == NULL || coll == NULL) { /* libbson words the errors */
        if (!bson_iter_init(&it, ctx->cmd) || !bson_iter_next(&it))
            return sbl_err_set(err, SBL_E_BadValue, "empty command");
        if (!BSON_ITER_HOLDS_UTF8(&it))
            return sbl_err_set(err, SBL_E_InvalidNamespace,
                               "collection name has invalid type %s",
                               BSON_ITER_HOLDS_INT(&it) || BSON_ITER_HOLDS_DOUBLE(&it) ? "double"
                                                                                      : "object");
        coll = bson_iter_utf8(&it, NULL);
    }
    if (coll[0] == '\0')
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid namespace specified '%s.'",
                           ctx->db);
    if (sbl_join_dot(ns, nslen, ctx->db, coll) >= nslen)
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Fully qualified namespace is too long");
    /* The database name is checked above and holds no '.': coll follows
     * ns's first '.', as sbl_validate_ns would find it. */
    return check_coll_in_ns(ns, coll, err);
}

int sbl_op_check_deadline(const sbl_opctx_t *ctx, sbl_err_t *err)
{
    SBL_RET(sbl_js_pending(err)); /* a $where that failed stops the scan */
    if (ctx->deadline_us != 0 && sbl_now_us() > ctx->deadline_us)
        return sbl_err_set(err, SBL_E_MaxTimeMSExpired, "operation exceeded time limit");
    return 0;
}

static _Atomic int64_t stepped_down_us; /* the last step-down (monotonic), 0: none */
static _Atomic int64_t rolled_back_us;  /* the last rollback's start (monotonic), 0: none */

/* 11602 for an operation that started before the state change at 'at' (0: none). */
static int interrupted_since(int64_t at, const sbl_opctx_t *ctx, const char *what, sbl_err_t *err)
{
    if (at == 0 || ctx->start_us == 0 || ctx->start_us > at)
        return 0;
    return sbl_err_set(err, SBL_E_InterruptedDueToReplStateChange,
                       "operation was interrupted because a replica set state change "
                       "(%s) occurred", what);
}

void sbl_op_note_step_down(void)
{
    atomic_store(&stepped_down_us, sbl_now_us());
}

int sbl_op_check_step_down(const sbl_opctx_t *ctx, sbl_err_t *err)
{
    return interrupted_since(atomic_load(&stepped_down_us), ctx, "stepdown", err);
}

void sbl_op_note_rollback(void)
{
    atomic_store(&rolled_back_us, sbl_now_us());
}

int sbl_op_check_rollback(const sbl_opctx_t *ctx, sbl_err_t *err)
{
    if (ctx->req == NULL)
        return 0; /* the server's own operations */
    return interrupted_since(atomic_load(&rolled_back_us), ctx, "rollback", err);
}

/* Counts the client operations registered before *(int64_t *)arg[0] into arg[1]. */
static void count_older(const sbl_op_t *op, void *arg)
{
    int64_t *a = arg;
    if (op->conn_id != 0 && op->start_us <= a[0])
        a[1]++;
}

int sbl_op_wait_rollback_ended(int64_t until_us)
{
    int64_t a[2] = {atomic_load(&rolled_back_us), 0};
    for (;;) {
        a[1] = 0;
        if (a[0] != 0)
            sbl_ops_foreach(count_older, a);
        if (a[1] == 0 || sbl_now_us() >= until_us)
            return (int)a[1];
        struct timespec t = {0, 5 * 1000000L};
        nanosleep(&t, NULL);
    }
}

int sbl_op_backoff(const sbl_opctx_t *ctx, int *attempt, sbl_err_t *err)
{
    uint64_t gen;
    if (ctx->req != NULL)
        SBL_RET(sbl_op_check_step_down(ctx, err));
    bool prepared = sbl_prepare_conflict_take(&gen);
    if (*attempt == 0)
        return 0;
    if (prepared) { /* wait for the prepared transaction rather than spin */
        if (!sbl_prepare_wait(gen, ctx->deadline_us))
            return sbl_err_set(err, SBL_E_InterruptedAtShutdown, "interrupted at shutdown");
        (*attempt)--; /* as long as it stays prepared, as reads wait */
        SBL_RET(sbl_op_check_interrupt(ctx, err));
        return sbl_op_check_step_down(ctx, err);
    }
    long us = *attempt < 10 ? 100L * *attempt : *attempt < 50 ? 1000L : 10000L;
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
    return 0;
}

/* ---- hooks ------------------------------------------------------------------ */

static sbl_op_observer_t observer;
static sbl_op_park_fn park_fn;

void sbl_op_set_observer(const sbl_op_observer_t *obs)
{
    observer = *obs;
}

void sbl_op_coll_created(sbl_opctx_t *ctx, const char *ns)
{
    if (observer.coll_created != NULL)
        observer.coll_created(ctx, ns);
}

void sbl_op_set_park(sbl_op_park_fn fn)
{
    park_fn = fn;
}

bool sbl_op_park(sbl_opctx_t *ctx, const sbl_op_wait_t *w)
{
    return park_fn != NULL && park_fn(ctx, w);
}

static void (*unpark_fn)(void);

void sbl_op_set_unpark(void (*fn)(void))
{
    unpark_fn = fn;
}

void sbl_op_unpark_all(void)
{
    if (unpark_fn != NULL)
        unpark_fn();
}

static sbl_op_gen_fn gen_fn;

void sbl_op_set_generation(sbl_op_gen_fn fn)
{
    gen_fn = fn;
}

uint64_t sbl_op_generation(void)
{
    return gen_fn != NULL ? gen_fn() : sbl_capped_generation();
}
