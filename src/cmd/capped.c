/*
 * capped.c: capped collections at the command level: create's and collMod's
 * options, tailable find checks, cloneCollectionAsCapped/convertToCapped,
 * and the awaitData wait (the parking src/op's sbl_op_park asks for).
 *
 * create stores {capped: true, size, max} as mongod 7.0 lists them: size as
 * given (an integer; 6.2 dropped the old rounding to 256 bytes), max only
 * when given (0 or less meaning "none", listed as 2147483647).  collMod's
 * cappedSize / cappedMax replace them the same way (the storage side takes
 * the new limits with the options; the next insert evicts down to them).
 *
 * cloneCollectionAsCapped and convertToCapped copy documents one
 * transaction each into a new capped collection (a failed copy is dropped).
 *
 * An awaitData getMore that finds nothing parks its request here instead of
 * sleeping: a loop timer checks every few milliseconds (or when the source
 * says its counter may next move) whether the counter it waits on moved (a
 * capped insert committed, sbl_capped_generation; for a change stream, the
 * newest entry it may read) or the wait is over, and then dispatches the
 * getMore again, which answers with what it finds then.  A capped insert also
 * kicks the loops (sbl_capped_kick), which check their tailable cursors'
 * requests at once; the timer is what catches a kick that came too early,
 * and an insert that does not kick: a replica set member's write that no
 * client waits on another member for (w: 0 or 1, sbl_capped_kick_unhurried).
 * The secondaries' oplog streams then take it at their next poll with the
 * other writes of those few milliseconds, one fetch, apply, journal sync and
 * report for all instead of one each: bench/txn at w: 1 went from 20,100 to
 * 30,500 updates/s and from 7,500-8,100 to 11,800-12,300 transactions/s, at
 * 40% less CPU per operation.  A write that waits for them (w: "majority",
 * w: N, a tag set) kicks at once, as every write did.
 * When the counter moved, the cursor may first say cheaply that the getMore
 * would still find nothing (a change stream whose scope had no write): the
 * request then waits on without running (no dispatch, session, reply).
 * What must stay true: a parked request is in exactly one place (the parked
 * list until its loop takes it, then its timer), and is re-dispatched once.
 */
#include "cmd/capped.h"
#include "cmd/crud_int.h"
#include "doc/doc.h"
#include "exec/exec.h"
#include "repl/repl.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define MAX_SIZE_LIMIT (1024LL * 1024 * 1024 * 1024 * 1024) /* 1 PB */
#define MAX_DOCS_LIMIT 2147483648LL
#define AWAIT_POLL_MS 5

bool sbl_capped_is_create_field(const char *k)
{
    return strcmp(k, "capped") == 0 || strcmp(k, "size") == 0 || strcmp(k, "max") == 0;
}

/* A size/max value as mongod's IDL reads a safeInt64: numbers only (null: absent).
 * cmd names the command in the type error ("create.size"). */
static int read_count(const bson_iter_t *it, const char *cmd, const char *name, bool *hasp,
                      int64_t *out, sbl_err_t *err)
{
    char field[48];
    *hasp = false;
    if (BSON_ITER_HOLDS_NULL(it))
        return 0;
    snprintf(field, sizeof(field), "%s.%s", cmd, name);
    if (!BSON_ITER_HOLDS_NUMBER(it) && !BSON_ITER_HOLDS_DECIMAL128(it))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field '%s' is the wrong type '%s', expected types '[long, int, "
                           "decimal, double]'",
                           field, sbl_type_name(bson_iter_type(it)));
    if (BSON_ITER_HOLDS_DOUBLE(it)) {
        double d = bson_iter_double(it);
        *out = isnan(d) ? 0 : d >= 9.2e18 ? INT64_MAX : d <= -9.2e18 ? INT64_MIN : (int64_t)d;
    } else {
        SBL_RET(sbl_get_int64(it, out, err));
    }
    *hasp = true;
    return 0;
}

/* The ranges mongod's parser checks for a size and a max field (create's
 * size/max, collMod's cappedSize/cappedMax), in its order and words. */
static int check_ranges(const char *size_name, bool has_size, int64_t size, const char *max_name,
                        bool has_max, int64_t max, sbl_err_t *err)
{
    if (has_size && size < 1)
        return sbl_err_set(err, SBL_E_Location51024,
                           "BSON field '%s' value must be >= 1, actual value '%lld'", size_name,
                           (long long)size);
    if (has_size && size > MAX_SIZE_LIMIT)
        return sbl_err_set(err, SBL_E_Location51024,
                           "BSON field '%s' value must be <= %lld, actual value '%lld'", size_name,
                           (long long)MAX_SIZE_LIMIT, (long long)size);
    if (has_max && max >= MAX_DOCS_LIMIT)
        return sbl_err_set(err, SBL_E_Location51024,
                           "BSON field '%s' value must be < %lld, actual value '%lld'", max_name,
                           (long long)MAX_DOCS_LIMIT, (long long)max);
    return 0;
}

int sbl_capped_create_options(const bson_t *cmd, bson_t *opts, sbl_err_t *err)
{
    bson_iter_t it;
    bool capped = false, has_size = false, has_max = false;
    int64_t size = 0, max = 0;

    if (bson_iter_init_find(&it, cmd, "capped")) {
        if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_NUMBER(&it) &&
            !BSON_ITER_HOLDS_NULL(&it))
            return sbl_type_error(err, "create.capped", &it, "bool");
        capped = bson_iter_as_bool(&it);
    }
    if (bson_iter_init_find(&it, cmd, "size"))
        SBL_RET(read_count(&it, "create", "size", &has_size, &size, err));
    if (bson_iter_init_find(&it, cmd, "max"))
        SBL_RET(read_count(&it, "create", "max", &has_max, &max, err));
    /* The ranges first (mongod's parser), then the rules between the fields. */
    SBL_RET(check_ranges("size", has_size, size, "max", has_max, max, err));
    if (capped && !has_size)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "the 'size' field is required when 'capped' is true");
    if ((has_size || has_max) && !capped)
        return sbl_err_set(err, SBL_E_InvalidOptions,
                           "the 'capped' field needs to be true when either the 'size' or "
                           "'max' fields are present");
    if (!capped)
        return 0;
    BSON_APPEND_BOOL(opts, "capped", true);
    if (size <= INT32_MAX)
        BSON_APPEND_INT32(opts, "size", (int32_t)size);
    else
        BSON_APPEND_INT64(opts, "size", size);
    if (has_max)
        BSON_APPEND_INT32(opts, "max", max <= 0 ? INT32_MAX : (int32_t)max);
    return 0;
}

int sbl_capped_coll_mod(const bson_t *cmd, const sbl_coll_t *c, bson_t *opts, bool *changedp,
                        sbl_err_t *err)
{
    bson_iter_t it;
    bool has_size = false, has_max = false, had_max = false;
    int64_t size = 0, max = 0;

    if (bson_iter_init_find(&it, cmd, "cappedSize"))
        SBL_RET(read_count(&it, "collMod", "cappedSize", &has_size, &size, err));
    if (bson_iter_init_find(&it, cmd, "cappedMax"))
        SBL_RET(read_count(&it, "collMod", "cappedMax", &has_max, &max, err));
    SBL_RET(check_ranges("cappedSize", has_size, size, "cappedMax", has_max, max, err));
    if (!has_size && !has_max)
        return 0;
    if (!sbl_coll_capped(c, NULL, NULL))
        return sbl_err_set(err, SBL_E_InvalidOptions, "Collection must be capped.");

    /* The options with size and max replaced in place (max after size when new). */
    bson_t out = BSON_INITIALIZER;
    bson_iter_init(&it, opts);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "size") == 0 && has_size) {
            sbl_append_int(&out, "size", size);
        } else if (strcmp(k, "max") == 0) {
            had_max = true;
            if (has_max)
                BSON_APPEND_INT32(&out, "max", max <= 0 ? INT32_MAX : (int32_t)max);
            else
                sbl_append_iter(&out, k, -1, &it);
        } else {
            sbl_append_iter(&out, k, -1, &it);
        }
        if (strcmp(k, "size") == 0 && has_max && !had_max && !bson_has_field(opts, "max")) {
            BSON_APPEND_INT32(&out, "max", max <= 0 ? INT32_MAX : (int32_t)max);
            had_max = true;
        }
    }
    bson_destroy(opts);
    bson_steal(opts, &out);
    *changedp = true;
    return 0;
}

/* ---- tailable find ------------------------------------------------------ */

int sbl_capped_check_find(sbl_opctx_t *ctx, const char *ns, bool tailable, bool await_data,
                          const bson_t *sort, bool single_batch, unsigned *flagsp,
                          sbl_err_t *err)
{
    bson_iter_t it;

    *flagsp = 0;
    if (tailable) {
        if (sort != NULL && !bson_empty(sort) &&
            !(bson_count_keys(sort) == 1 && bson_iter_init_find(&it, sort, "$natural") &&
              BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_double(&it) == 1.0))
            return sbl_err_set(err, SBL_E_BadValue,
                               "cannot use tailable option with a sort other than {$natural: 1}");
        if (single_batch)
            return sbl_err_set(err, SBL_E_BadValue,
                               "cannot use tailable option with the 'singleBatch' option");
    }
    if (await_data && !tailable)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "Cannot set 'awaitData' without also setting 'tailable'");
    if (!tailable)
        return 0;
    sbl_coll_t *c = NULL;
    if (sbl_coll_open(ctx->ss, ns, false, &c, NULL, NULL) != 0)
        return 0; /* a missing collection is an empty result, as for any find */
    bool capped = sbl_coll_capped(c, NULL, NULL);
    sbl_coll_release(c);
    if (!capped)
        return sbl_err_set(err, SBL_E_BadValue,
                           "error processing query: ns=%s tailable cursor requested on non "
                           "capped collection",
                           ns);
    *flagsp = SBL_CURSOR_TAILABLE | (await_data ? SBL_CURSOR_AWAIT_DATA : 0);
    return 0;
}

/* ---- awaitData: parked getMore requests ---------------------------------------- */

typedef struct parked {
    uv_timer_t timer;
    sbl_conn_t *conn;
    sbl_request_t *req;
    sbl_op_gen_fn genf; /* the counter it waits on */
    sbl_op_due_fn duef; /* when it may next move (NULL: check every AWAIT_POLL_MS) */
    sbl_op_idle_fn idlef; /* whether a run would still find nothing (NULL: run) */
    int64_t idle_arg;
    uint64_t gen;
    int64_t until_us;
    uint64_t igen;  /* interrupt_gen when it parked: a move runs it again at once */
    bool cancelled; /* its connection closed before its loop took it */
    bool kickable;  /* waits on the default counter: checked at once when it moves */
    bool closing;   /* its timer is closing (loop thread only) */
    struct parked *next;
} parked_t;

static pthread_mutex_t parked_lock = PTHREAD_MUTEX_INITIALIZER;
static parked_t *parked_list; /* parked, not yet taken by their loop */
static parked_t *active_list; /* their timers run (each on its connection's loop) */
static atomic_int nkickable;  /* kickable requests parked and not yet freed */
/* Moved by sbl_op_unpark_all (a cursor a parked getMore may wait on was killed):
 * every parked request runs again at its loop's next kick. */
static _Atomic uint64_t interrupt_gen;

static void parked_free(parked_t *p)
{
    if (p->kickable)
        atomic_fetch_sub(&nkickable, 1);
    free(p);
}

/* Unlink p from *list (under parked_lock); false when it is not there. */
static bool unlink_parked(parked_t **list, parked_t *p)
{
    for (parked_t **pp = list; *pp != NULL; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            return true;
        }
    return false;
}

bool sbl_capped_await_park(sbl_opctx_t *ctx, const sbl_op_wait_t *w)
{
    parked_t *p;
    if (ctx->conn == NULL || ctx->req == NULL || (p = calloc(1, sizeof(*p))) == NULL)
        return false;
    p->conn = ctx->conn;
    p->req = ctx->req;
    p->genf = w->genf != NULL ? w->genf : sbl_op_generation;
    p->duef = w->genf != NULL ? w->duef : NULL;
    p->idlef = w->idlef;
    p->idle_arg = w->idle_arg;
    p->gen = w->gen;
    p->until_us = w->until_us;
    p->igen = atomic_load(&interrupt_gen);
    /* A tailable cursor on a capped collection (the oplog's fetchers among
     * them) is checked as soon as an insert commits (sbl_capped_kick); a
     * change stream's own counter keeps the poll and its idle check. */
    p->kickable = w->genf == NULL;
    if (p->kickable)
        atomic_fetch_add(&nkickable, 1);
    pthread_mutex_lock(&parked_lock);
    p->next = parked_list;
    parked_list = p;
    pthread_mutex_unlock(&parked_lock);
    ctx->deferred = true; /* the connection keeps the request until it is answered */
    return true;
}

static void parked_closed(uv_handle_t *h)
{
    parked_free(h->data);
}

static void parked_tick(uv_timer_t *t);

/* Arm p's timer for its next check: when its counter may next move (every
 * request waiting on that counter then checks in the same loop pass), else
 * on a 5 ms grid shared by the loop's parked requests (one change wakes them
 * in one pass, not each up to 5 ms later on a phase of its own); never after
 * its wait ends. */
static void parked_arm(parked_t *p)
{
    uv_loop_t *loop = p->timer.loop;
    uint64_t ms = AWAIT_POLL_MS - uv_now(loop) % AWAIT_POLL_MS;
    int64_t now = sbl_now_us(), at = p->duef != NULL ? p->duef() : INT64_MAX;
    if (at > p->until_us)
        at = p->until_us;
    if (p->duef != NULL || at < now + (int64_t)ms * 1000)
        ms = at > now ? (uint64_t)(at - now + 999) / 1000 : 1;
    uv_timer_start(&p->timer, parked_tick, ms, 0);
}

static void parked_tick(uv_timer_t *t)
{
    parked_t *p = t->data;
    uint64_t gen = p->genf();
    if (sbl_now_us() < p->until_us && p->igen == atomic_load(&interrupt_gen) &&
        (gen == p->gen || (p->idlef != NULL && p->idlef(p->idle_arg, gen)))) {
        p->gen = gen; /* moved with nothing for it: wait for the next move */
        parked_arm(p);
        return;
    }
    pthread_mutex_lock(&parked_lock);
    unlink_parked(&active_list, p);
    pthread_mutex_unlock(&parked_lock);
    uv_timer_stop(t);
    sbl_conn_t *conn = p->conn;
    sbl_request_t *req = p->req;
    p->closing = true;
    uv_close((uv_handle_t *)t, parked_closed);
    sbl_cmd_dispatch(conn, req); /* the getMore again: it answers, or parks anew */
}

void sbl_capped_await_start(sbl_conn_t *conn, sbl_request_t *req)
{
    parked_t *p, **pp;

    pthread_mutex_lock(&parked_lock);
    for (pp = &parked_list; *pp != NULL && (*pp)->req != req; pp = &(*pp)->next)
        ;
    p = *pp;
    if (p != NULL) {
        *pp = p->next;
        if (!p->cancelled) {
            p->next = active_list;
            active_list = p;
        }
    }
    pthread_mutex_unlock(&parked_lock);
    if (p == NULL)
        return;
    if (p->cancelled) { /* the connection is closing: release the request unanswered */
        sbl_capped_exhaust_end(conn, req);
        sbl_conn_reply(conn, req, NULL);
        parked_free(p);
        return;
    }
    p->timer.data = p;
    uv_timer_init(sbl_conn_loop(conn), &p->timer);
    parked_arm(p);
}

/* Loop thread, kicked: check this loop's kickable requests now, not at their
 * next tick.  A request's memory stays until its close callback, which
 * cannot run inside this one, so the list taken here stays valid; one that
 * closed meanwhile (an earlier check here dispatched a getMore that closed
 * a connection) is skipped. */
static void kick_loop(uv_loop_t *loop)
{
    static _Thread_local parked_t **mine;
    static _Thread_local size_t cap;
    size_t n = 0;
    uint64_t igen = atomic_load(&interrupt_gen);
    pthread_mutex_lock(&parked_lock);
    for (parked_t *p = active_list; p != NULL; p = p->next) {
        if ((!p->kickable && p->igen == igen) || p->timer.loop != loop)
            continue;
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            parked_t **m = realloc(mine, ncap * sizeof(*m));
            if (m == NULL)
                break; /* the rest wait for their ticks */
            mine = m;
            cap = ncap;
        }
        mine[n++] = p;
    }
    pthread_mutex_unlock(&parked_lock);
    for (size_t i = 0; i < n; i++)
        if (!mine[i]->closing)
            parked_tick(&mine[i]->timer);
}

/* Set while this thread runs a write nobody waits on another member for. */
static _Thread_local bool unhurried;

void sbl_capped_kick_unhurried(const sbl_write_concern_t *wc)
{
    unhurried = wc != NULL && !wc->majority && wc->w <= 1 && wc->mode[0] == '\0' &&
                sbl_repl_enabled();
}

void sbl_capped_kick(void)
{
    if (unhurried)
        return; /* the waits see it at their next poll (AWAIT_POLL_MS) */
    if (atomic_load_explicit(&nkickable, memory_order_relaxed) > 0)
        sbl_net_kick_loops();
}

/* sbl_op_unpark_all: every parked request runs again now (kick_loop takes them all). */
static void unpark_all(void)
{
    atomic_fetch_add(&interrupt_gen, 1);
    sbl_net_kick_loops();
}

void sbl_capped_kick_init(void)
{
    sbl_net_set_kick(kick_loop);
    sbl_capped_set_notify(sbl_capped_kick);
    sbl_op_set_unpark(unpark_all);
}

void sbl_capped_exhaust_end(sbl_conn_t *conn, sbl_request_t *req)
{
    bson_iter_t it;
    if (conn != NULL && req != NULL && sbl_conn_is_closing(conn) &&
        req->opcode == SBL_OP_MSG && (req->flags & SBL_MSG_EXHAUST_ALLOWED) &&
        bson_iter_init(&it, &req->cmd) && bson_iter_next(&it) &&
        strcmp(bson_iter_key(&it), "getMore") == 0 && BSON_ITER_HOLDS_INT64(&it))
        sbl_cursor_drop(bson_iter_int64(&it));
}

/* A cancelled wait's timer is closed: release its request unanswered. */
static void parked_cancelled(uv_handle_t *h)
{
    parked_t *p = h->data;
    sbl_capped_exhaust_end(p->conn, p->req);
    sbl_conn_reply(p->conn, p->req, NULL);
    parked_free(p);
}

void sbl_capped_await_cancel(sbl_conn_t *conn)
{
    parked_t *mine = NULL, *p, **pp;

    pthread_mutex_lock(&parked_lock);
    for (p = parked_list; p != NULL; p = p->next)
        if (p->conn == conn)
            p->cancelled = true;
    for (pp = &active_list; *pp != NULL;) {
        p = *pp;
        if (p->conn == conn) {
            *pp = p->next;
            p->next = mine;
            mine = p;
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_unlock(&parked_lock);
    while (mine != NULL) {
        p = mine;
        mine = p->next;
        uv_timer_stop(&p->timer);
        p->closing = true;
        uv_close((uv_handle_t *)&p->timer, parked_cancelled);
    }
}

/* ---- convertToCapped and cloneCollectionAsCapped ------------------------------ */

/* The size argument of both commands: a required number >= 1. */
static int copy_size_arg(const bson_t *cmd, const char *req, int64_t *sizep, sbl_err_t *err)
{
    bson_iter_t it;
    bool has = false;
    if (!bson_iter_init_find(&it, cmd, "size"))
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field '%s.size' is missing but a required field", req);
    SBL_RET(read_count(&it, req, "size", &has, sizep, err));
    if (!has || *sizep < 1)
        return sbl_err_set(err, SBL_E_BadValue, "size must be greater than 0, got %lld",
                           (long long)(has ? *sizep : 0));
    if (*sizep > MAX_SIZE_LIMIT)
        return sbl_err_set(err, SBL_E_BadValue, "size cannot exceed 1 PB");
    return 0;
}

/* Drop ns (c: its handle) and log the drop, as a failed copy does. */
static void drop_logged(sbl_opctx_t *ctx, const char *ns, sbl_coll_t *c)
{
    uint8_t uuid[16];
    sbl_err_t e2 = {0};
    memcpy(uuid, sbl_coll_uuid(c), 16);
    if (sbl_coll_drop(ctx->ss, ns, &e2) == 0)
        sbl_repl_log_drop(ctx->ss, ns, uuid, 0);
}

/* Create `to` capped at size (logged as created) and insert every document of
 * `from` in its natural order (the oldest are evicted when they do not all
 * fit); on failure `to` is dropped again. */
static int clone_as_capped(sbl_opctx_t *ctx, const char *from, const char *to, int64_t size,
                           sbl_err_t *err)
{
    sbl_coll_t *src = NULL, *dst = NULL;
    bson_t opts = BSON_INITIALIZER;
    sbl_qexec_t *q = NULL;
    sbl_qexec_opts_t qo = {0};
    int rc;

    if (sbl_coll_open(ctx->ss, from, false, &src, NULL, NULL) != 0)
        return sbl_err_set(err, SBL_E_NamespaceNotFound, "source collection %s does not exist",
                           from);
    sbl_coll_release(src);
    BSON_APPEND_BOOL(&opts, "capped", true);
    if (size <= INT32_MAX)
        BSON_APPEND_INT32(&opts, "size", (int32_t)size);
    else
        BSON_APPEND_INT64(&opts, "size", size);
    rc = sbl_coll_create(ctx->ss, to, &opts, err);
    bson_destroy(&opts);
    SBL_RET(rc);
    sbl_op_coll_created(ctx, to); /* its entry before those of its documents */
    if ((rc = sbl_coll_open(ctx->ss, to, false, &dst, NULL, err)) != 0)
        return rc;
    if ((rc = sbl_qexec_new(from, &qo, &q, err)) != 0)
        goto done;
    for (;;) {
        bson_t doc;
        bool end = false;
        if ((rc = sbl_qexec_next(q, ctx, &doc, NULL, &end, err)) != 0 || end)
            break;
        for (int attempt = 0;; attempt++) {
            if ((rc = sbl_op_backoff(ctx, &attempt, err)) != 0 ||
                (rc = sbl_txn_begin(ctx->ss, err)) != 0)
                break;
            rc = sbl_write(ctx->ss, dst, SBL_WRITE_INSERT, NULL, &doc, NULL, err);
            if (rc == 0 && (rc = sbl_txn_commit(ctx->ss, err)) != 0)
                sbl_txn_abort(ctx->ss);
            else if (rc != 0)
                sbl_txn_abort(ctx->ss);
            if (rc != SBL_E_WriteConflict || attempt >= SBL_WRITE_RETRIES)
                break;
        }
        /* a document larger than the whole collection is left out, as mongod does */
        if (rc == SBL_E_BadValue) {
            sbl_err_clear(err);
            rc = 0;
        }
        bson_destroy(&doc);
        if (rc != 0)
            break;
    }
done:
    sbl_qexec_free(q);
    if (rc != 0)
        drop_logged(ctx, to, dst); /* no half-made copy stays behind */
    sbl_coll_release(dst);
    return rc;
}

int sbl_cmd_clone_collection_as_capped(sbl_opctx_t *ctx, sbl_err_t *err)
{
    static const char *const fields[] = {"cloneCollectionAsCapped", "toCollection", "size",
                                         "temp", NULL};
    char from[SBL_NS_MAX], to[SBL_NS_MAX];
    bson_iter_t it;
    int64_t size = 0;

    SBL_RET(sbl_check_fields(ctx->cmd, "CloneCollectionAsCappedCommand", fields, err));
    SBL_RET(sbl_op_ns(ctx, from, sizeof(from), err));
    if (!bson_iter_init_find(&it, ctx->cmd, "toCollection"))
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field 'cloneCollectionAsCapped.toCollection' is missing but a "
                           "required field");
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_type_error(err, "cloneCollectionAsCapped.toCollection", &it, "string");
    if (sbl_join_dot(to, sizeof(to), ctx->db, bson_iter_utf8(&it, NULL)) >= sizeof(to))
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Fully qualified namespace is too long");
    SBL_RET(sbl_validate_ns(to, err));
    SBL_RET(sbl_validate_user_write_ns(to, err));
    SBL_RET(copy_size_arg(ctx->cmd, "cloneCollectionAsCapped", &size, err));
    sbl_coll_t *c = NULL;
    if (sbl_coll_open(ctx->ss, to, false, &c, NULL, NULL) == 0) {
        sbl_coll_release(c);
        return sbl_err_set(err, SBL_E_NamespaceExists, "collection %s already exists", to);
    }
    SBL_RET(clone_as_capped(ctx, from, to, size, err));
    ctx->wrote = true;
    return 0;
}

int sbl_cmd_convert_to_capped(sbl_opctx_t *ctx, sbl_err_t *err)
{
    static const char *const fields[] = {"convertToCapped", "size", NULL};
    char ns[SBL_NS_MAX], tmp[SBL_NS_MAX];
    int64_t size = 0;
    uint32_t r = 0;

    SBL_RET(sbl_check_fields(ctx->cmd, "ConvertToCappedCommand", fields, err));
    SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    SBL_RET(sbl_validate_user_write_ns(ns, err));
    SBL_RET(copy_size_arg(ctx->cmd, "convertToCapped", &size, err));
    /* copy into a temporary collection, then rename it over the original (whose
     * secondary indexes go with it, as in mongod) */
    r = (uint32_t)sbl_now_us() * 2654435761u;
    int n = snprintf(tmp, sizeof(tmp), "%s.tmp%08x.convertToCapped.%s", ctx->db, r,
                     ns + strlen(ctx->db) + 1);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Fully qualified namespace is too long");
    SBL_RET(clone_as_capped(ctx, ns, tmp, size, err));
    sbl_coll_t *c = NULL;
    uint8_t dropped[16];
    bool replaces = sbl_repl_uuid_of(ctx->ss, ns, dropped);
    int rc = sbl_coll_open(ctx->ss, tmp, false, &c, NULL, err);
    if (rc == 0 && (rc = sbl_coll_rename(ctx->ss, tmp, ns, true, err)) == 0)
        sbl_repl_log_rename(ctx->ss, tmp, ns, sbl_coll_uuid(c), replaces ? dropped : NULL);
    else if (c != NULL)
        drop_logged(ctx, tmp, c);
    sbl_coll_release(c);
    if (rc == 0)
        ctx->wrote = true;
    return rc;
}
