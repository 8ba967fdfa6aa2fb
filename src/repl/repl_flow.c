/*
 * repl_flow.c: flow control on a primary, as mongod's (4.2+): when the
 * majority commit point lags the primary's last write by more than
 * flowControlThresholdLagPercentage x flowControlTargetLagSeconds (wall
 * times of the two entries), writes need a ticket, and only so many are
 * handed out each second: about as many as the "sustainer" (the median
 * member by applied optime) applied in the last second, less the more the
 * lag exceeds the threshold.  So the lag converges to the target.
 *
 * How it works (mongod's FlowControl, read and re-done here):
 *  - the primary's oplog writer samples every flowControlSamplePeriod
 *    entries (ts, entries since start-up, tickets taken since start-up):
 *    the entries between two timestamps, and the tickets per entry;
 *  - a refresher thread, once a second, computes the tickets of the next
 *    second (flow_tickets, a pure function of what it is given) and sets
 *    the ticket count to it;
 *  - a client's write takes a ticket before it starts (the command layer
 *    calls sbl_repl_flow_acquire), waiting for the next second when none is
 *    left.
 *
 * What must stay true: a member that is not a writable primary, a
 * standalone, or enableFlowControl false hands out FLOW_MAX_TICKETS (a
 * write never waits); a wait ends at the operation's interruption
 * (killOp, maxTimeMS, a step-down) and at shutdown; taking a ticket while
 * none is limited costs two relaxed atomic operations.
 */
#include "repl/repl_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/log.h"

#define rs sbl_rs
#define FLOW_MAX_TICKETS 1000000000

/* ---- the parameters (mongod's names, defaults and bounds) ----------------- */

typedef enum { P_BOOL, P_INT, P_DOUBLE } ptype_t;
typedef enum { B_NONE, B_GT, B_GTE, B_GT_LT, B_GTE_LTE } pbound_t;

typedef struct param {
    const char *name;
    ptype_t type;
    bool startup_only;
    pbound_t bound;
    double lo, hi;
    _Atomic double v;
} param_t;

enum { P_ENABLED, P_TARGET_LAG, P_THRESHOLD, P_MAX_SAMPLES, P_SAMPLE_PERIOD, P_MIN_TICKETS,
       P_WARN_S, P_DECAY, P_FUDGE, P_ADDER, P_MULTIPLIER, P_COUNT };

static param_t params[P_COUNT] = {
    [P_ENABLED] = {"enableFlowControl", P_BOOL, false, B_NONE, 0, 0, 1},
    [P_TARGET_LAG] = {"flowControlTargetLagSeconds", P_INT, false, B_GT, 0, 0, 10},
    [P_THRESHOLD] = {"flowControlThresholdLagPercentage", P_DOUBLE, false, B_GTE_LTE, 0, 1, 0.5},
    [P_MAX_SAMPLES] = {"flowControlMaxSamples", P_INT, true, B_GT, 0, 0, 1000000},
    [P_SAMPLE_PERIOD] = {"flowControlSamplePeriod", P_INT, false, B_GT, 0, 0, 1000},
    [P_MIN_TICKETS] = {"flowControlMinTicketsPerSecond", P_INT, false, B_GTE, 0, 0, 100},
    [P_WARN_S] = {"flowControlWarnThresholdSeconds", P_INT, false, B_GTE, 0, 0, 10},
    [P_DECAY] = {"flowControlDecayConstant", P_DOUBLE, false, B_GT_LT, 0, 1, 0.5},
    [P_FUDGE] = {"flowControlFudgeFactor", P_DOUBLE, false, B_GT_LT, 0, 1, 0.95},
    [P_ADDER] = {"flowControlTicketAdderConstant", P_INT, false, B_GT, 0, 0, 1000},
    [P_MULTIPLIER] = {"flowControlTicketMultiplierConstant", P_DOUBLE, false, B_GT, 1.0, 0, 1.05},
};

static double pv(int i)
{
    return atomic_load_explicit(&params[i].v, memory_order_relaxed);
}

static param_t *find_param(const char *name)
{
    for (int i = 0; i < P_COUNT; i++)
        if (strcmp(params[i].name, name) == 0)
            return &params[i];
    return NULL;
}

/* The value at it (a start-up string or a BSON value) as p's type. */
static int parse_value(const param_t *p, const bson_iter_t *it, double *out, sbl_err_t *err)
{
    const char *s = BSON_ITER_HOLDS_UTF8(it) ? bson_iter_utf8(it, NULL) : NULL;
    char *end = NULL;
    double v;
    if (p->type == P_BOOL) {
        if (s != NULL && (strcmp(s, "true") == 0 || strcmp(s, "1") == 0))
            v = 1;
        else if (s != NULL && (strcmp(s, "false") == 0 || strcmp(s, "0") == 0))
            v = 0;
        else if (s == NULL && (BSON_ITER_HOLDS_BOOL(it) || BSON_ITER_HOLDS_NUMBER(it)))
            v = bson_iter_as_bool(it) ? 1 : 0;
        else
            return sbl_err_set(err, SBL_E_BadValue, "Invalid value for parameter %s: expected "
                               "a boolean", p->name);
        *out = v;
        return 0;
    }
    if (s != NULL) {
        v = p->type == P_INT ? (double)strtoll(s, &end, 10) : strtod(s, &end);
        if (end == s || *end != '\0')
            return sbl_err_set(err, SBL_E_BadValue, "Invalid value for parameter %s: '%s' is "
                               "not a number", p->name, s);
    } else if (BSON_ITER_HOLDS_NUMBER(it)) {
        v = bson_iter_as_double(it);
        if (p->type == P_INT && (v != floor(v) || fabs(v) > 2147483647.0))
            return sbl_err_set(err, SBL_E_BadValue, "Invalid value for parameter %s: %g is not "
                               "a 32-bit integer", p->name, v);
    } else {
        return sbl_err_set(err, SBL_E_BadValue, "Invalid value for parameter %s: expected a "
                           "number", p->name);
    }
    const char *why = NULL;
    double bound = p->lo;
    if ((p->bound == B_GT || p->bound == B_GT_LT) && !(v > p->lo))
        why = "greater than";
    else if ((p->bound == B_GTE || p->bound == B_GTE_LTE) && !(v >= p->lo))
        why = "greater than or equal to";
    else if (p->bound == B_GT_LT && !(v < p->hi))
        why = "less than";
    else if (p->bound == B_GTE_LTE && !(v <= p->hi))
        why = "less than or equal to";
    if (why != NULL && strncmp(why, "less", 4) == 0)
        bound = p->hi;
    if (why != NULL)
        return sbl_err_set(err, SBL_E_BadValue, "Invalid value for parameter %s: %g is not %s %g",
                           p->name, v, why, bound);
    *out = v;
    return 0;
}

static void append_value(bson_t *r, const char *key, const param_t *p, double v)
{
    if (p->type == P_BOOL)
        BSON_APPEND_BOOL(r, key, v != 0);
    else if (p->type == P_INT)
        BSON_APPEND_INT32(r, key, (int32_t)v);
    else
        BSON_APPEND_DOUBLE(r, key, v);
}

int sbl_repl_flow_set_parameter(const char *name, const bson_iter_t *it, bool startup,
                                bson_t *reply, sbl_err_t *err)
{
    param_t *p = find_param(name);
    double v;
    if (p == NULL)
        return -1;
    if (p->startup_only && !startup)
        return sbl_err_set(err, SBL_E_IllegalOperation, "not allowed to change [%s] at runtime",
                           name);
    SBL_RET(parse_value(p, it, &v, err));
    double was = atomic_exchange(&p->v, v);
    if (reply != NULL)
        append_value(reply, "was", p, was);
    return 0;
}

bool sbl_repl_flow_append_parameter(bson_t *r, const char *name)
{
    const param_t *p = find_param(name);
    if (p == NULL)
        return false;
    append_value(r, name, p, pv((int)(p - params)));
    return true;
}

void sbl_repl_flow_append_all_parameters(bson_t *r)
{
    for (int i = 0; i < P_COUNT; i++) {
        bson_iter_t dup;
        if (!bson_iter_init_find(&dup, r, params[i].name))
            append_value(r, params[i].name, &params[i], pv(i));
    }
}

/* ---- the samples (the primary's oplog writer) ------------------------------ */

typedef struct sample {
    uint64_t ts;
    int64_t ops;   /* entries written as primary since start-up */
    int64_t locks; /* tickets taken since start-up */
} sample_t;

static pthread_mutex_t sample_mu = PTHREAD_MUTEX_INITIALIZER;
static sample_t *samples; /* samples[head .. n) */
static size_t head, n, cap;
static int64_t ops_since_start, last_sample_ops;
static _Atomic int64_t acquisitions; /* tickets taken (waited for or not) */

void sbl_rs_flow_sample(uint64_t ts)
{
    pthread_mutex_lock(&sample_mu);
    ops_since_start++;
    if (ops_since_start - last_sample_ops < (int64_t)pv(P_SAMPLE_PERIOD) ||
        (n > head && ts <= samples[n - 1].ts)) {
        pthread_mutex_unlock(&sample_mu);
        return;
    }
    last_sample_ops = ops_since_start;
    sample_t s = {ts, ops_since_start, atomic_load(&acquisitions)};
    if (n - head >= (size_t)pv(P_MAX_SAMPLES)) {
        samples[n - 1] = s; /* full: lose resolution at the newest end, as mongod */
        pthread_mutex_unlock(&sample_mu);
        return;
    }
    if (n == cap && head > 0) { /* slide down what trimming left */
        memmove(samples, samples + head, (n - head) * sizeof(*samples));
        n -= head;
        head = 0;
    }
    if (n == cap) {
        size_t ncap = cap == 0 ? 1024 : cap * 2;
        sample_t *g = realloc(samples, ncap * sizeof(*g));
        if (g == NULL) {
            pthread_mutex_unlock(&sample_mu);
            return; /* a sample lost: only resolution */
        }
        samples = g;
        cap = ncap;
    }
    samples[n++] = s;
    pthread_mutex_unlock(&sample_mu);
}

/* The entries written between prev and curr, approximately (the samples at
 * or after each); -1 when the samples cannot tell (sample_mu held). */
static int64_t ops_between_locked(uint64_t prev, uint64_t curr)
{
    int64_t a = -1, b = -1;
    for (size_t i = head; i < n; i++) {
        if (a == -1 && prev <= samples[i].ts)
            a = samples[i].ops;
        if (curr <= samples[i].ts) {
            b = samples[i].ops;
            break;
        }
    }
    if (a != -1 && b == -1)
        b = samples[n - 1].ops;
    return a != -1 && b != -1 ? b - a : -1;
}

static int64_t ops_between(uint64_t prev, uint64_t curr)
{
    pthread_mutex_lock(&sample_mu);
    int64_t r = ops_between_locked(prev, curr);
    pthread_mutex_unlock(&sample_mu);
    return r;
}

/* Tickets taken per entry over the last two samples; -1 with fewer. */
static double locks_per_op(void)
{
    double r = -1;
    pthread_mutex_lock(&sample_mu);
    if (n - head >= 2) {
        const sample_t *a = &samples[n - 2], *b = &samples[n - 1];
        r = b->ops > a->ops ? (double)(b->locks - a->locks) / (double)(b->ops - a->ops) : 0;
    }
    pthread_mutex_unlock(&sample_mu);
    return r;
}

/* Drop the samples older than ts, keeping two for locks_per_op. */
static void trim_samples(uint64_t ts)
{
    pthread_mutex_lock(&sample_mu);
    while (n - head > 2 && samples[head].ts < ts)
        head++;
    pthread_mutex_unlock(&sample_mu);
}

/* ---- the tickets ----------------------------------------------------------- */

static pthread_mutex_t ticket_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ticket_cond = PTHREAD_COND_INITIALIZER;
static _Atomic int32_t target = FLOW_MAX_TICKETS; /* this second's tickets (targetRateLimit) */
static int64_t left = FLOW_MAX_TICKETS;           /* of them, not taken yet (ticket_mu) */
static _Atomic int64_t acquiring_us;              /* timeAcquiringMicros */
static atomic_bool stopping;

static void refresh_to(int32_t tickets)
{
    pthread_mutex_lock(&ticket_mu);
    atomic_store(&target, tickets);
    left = tickets;
    pthread_cond_broadcast(&ticket_cond);
    pthread_mutex_unlock(&ticket_mu);
}

bool sbl_repl_flow_throttling(void)
{
    return atomic_load_explicit(&target, memory_order_relaxed) < FLOW_MAX_TICKETS;
}

int sbl_repl_flow_acquire(int (*check)(void *arg, sbl_err_t *err), void *arg, bool may_wait,
                          sbl_err_t *err)
{
    atomic_fetch_add_explicit(&acquisitions, 1, memory_order_relaxed);
    if (!sbl_repl_flow_throttling())
        return 0;
    int rc = 0;
    int64_t start = 0;
    pthread_mutex_lock(&ticket_mu);
    while (left <= 0 && may_wait && atomic_load(&target) < FLOW_MAX_TICKETS &&
           !atomic_load(&stopping)) {
        if (start == 0)
            start = sbl_now_us();
        pthread_mutex_unlock(&ticket_mu);
        rc = check != NULL ? check(arg, err) : 0;
        pthread_mutex_lock(&ticket_mu);
        if (rc != 0)
            break;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000 * 1000; /* look at check() ten times a second */
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&ticket_cond, &ticket_mu, &until);
    }
    if (rc == 0)
        left--;
    pthread_mutex_unlock(&ticket_mu);
    if (start != 0)
        atomic_fetch_add(&acquiring_us, sbl_now_us() - start);
    return rc;
}

/* ---- the calculation (mongod's getNumTickets) ------------------------------ */

static _Atomic double last_locks_per_op;
static _Atomic int32_t sustainer_rate; /* sustainerRate: entries it applied last second */
static atomic_bool lagged;
static _Atomic int64_t lagged_count, lagged_us;
static int64_t lagged_since_us, last_sustainer_move_us, last_poll_locks;
/* The members' applied optimes, sorted (the refresher's own). */
static sbl_optime_t prev_m[SBL_RS_MAX_MEMBERS], curr_m[SBL_RS_MAX_MEMBERS];
static int prev_n, curr_n;

static int optime_order(const void *a, const void *b)
{
    return sbl_optime_cmp(*(const sbl_optime_t *)a, *(const sbl_optime_t *)b);
}

/* a x b, at most FLOW_MAX_TICKETS (0 when either is 0). */
static int32_t mul_capped(double a, double b)
{
    if (a == 0.0 || b == 0.0)
        return 0;
    double r = a * b;
    return r >= FLOW_MAX_TICKETS ? FLOW_MAX_TICKETS : r <= 0 ? 0 : (int32_t)r;
}

/* The tickets while lagged: the entries the sustainer applied from prev to
 * curr, reduced by decay^((lag - threshold) / threshold) and the fudge
 * factor, times the tickets per entry. */
static int32_t tickets_for_lag(uint64_t prev, uint64_t curr, int64_t locks_last, double lpo,
                               int64_t lag_ms, int64_t threshold_ms)
{
    int64_t applied = ops_between(prev, curr);
    int64_t now = sbl_now_us();
    if (applied > 0) {
        last_sustainer_move_us = now;
    } else if (pv(P_WARN_S) > 0 && now - last_sustainer_move_us >= (int64_t)pv(P_WARN_S) * 1000000) {
        sbl_log(SBL_LOG_WARNING, "STORAGE", 22225, "Flow control is engaged and the sustainer "
                "point is not moving. Please check the health of all secondaries.", NULL);
        last_sustainer_move_us = now;
    }
    atomic_store(&sustainer_rate, (int32_t)applied);
    if (applied == -1) /* unknown: fewer than were taken last second */
        return locks_last / 2 > FLOW_MAX_TICKETS ? FLOW_MAX_TICKETS : (int32_t)(locks_last / 2);
    double exponent = (double)(lag_ms - threshold_ms) / (double)(threshold_ms > 1 ? threshold_ms : 1);
    double reduce = pow(pv(P_DECAY), exponent);
    return mul_capped(lpo, (double)applied * reduce * pv(P_FUDGE));
}

/* The next second's tickets (the refresher, once a second). */
static int32_t next_tickets(void)
{
    bool usable = sbl_repl_writable() && sbl_repl_is_primary();
    sbl_optime_t commit = {0, 0};
    int64_t commit_wall = 0;

    memcpy(prev_m, curr_m, sizeof(curr_m));
    prev_n = curr_n;
    pthread_mutex_lock(&rs.lock);
    curr_n = 0;
    if (rs.config != NULL && rs.self >= 0)
        for (int i = 0; i < rs.cfg.n; i++)
            curr_m[curr_n++] = i == rs.self ? sbl_rs_my_applied() : rs.peer[i].applied;
    commit = rs.commit;
    commit_wall = rs.commit_wall;
    pthread_mutex_unlock(&rs.lock);
    qsort(curr_m, (size_t)curr_n, sizeof(curr_m[0]), optime_order);
    uint64_t prev_sus = prev_n > 0 ? prev_m[prev_n / 2].ts : 0;
    uint64_t curr_sus = curr_n > 0 ? curr_m[curr_n / 2].ts : 0;

    uint64_t last_ts = sbl_oplog_committed().ts;
    int64_t last_wall = sbl_oplog_last_wall_ms();
    double lpo = locks_per_op();
    atomic_store(&last_locks_per_op, lpo < 0 ? 0 : lpo);
    int64_t locks_now = atomic_load(&acquisitions);
    int64_t locks_last = locks_now - last_poll_locks;
    last_poll_locks = locks_now;
    uint64_t trim_to = commit.ts < prev_sus ? commit.ts : prev_sus;

    if (pv(P_ENABLED) == 0 || !usable || lpo < 0) {
        trim_samples(trim_to);
        return FLOW_MAX_TICKETS;
    }
    int64_t threshold_ms = (int64_t)(1000.0 * pv(P_THRESHOLD) * pv(P_TARGET_LAG));
    bool ignore_walls = commit_wall > last_wall; /* walls need not grow together */
    int64_t lag_ms = ignore_walls ? 0 : last_wall - commit_wall;
    int32_t ret;
    /* Few entries since the commit point (one sample bucket): the periodic
     * no-ops of an idle set are not lag. */
    bool healthy = !ignore_walls && (lag_ms < threshold_ms || ops_between(commit.ts, last_ts) == -1);
    bool comparable = curr_n > 0 && curr_n == prev_n && curr_sus >= prev_sus;
    if (healthy) {
        ret = mul_capped((double)atomic_load(&target) + pv(P_ADDER), pv(P_MULTIPLIER));
        last_sustainer_move_us = sbl_now_us();
        if (atomic_load(&lagged)) {
            atomic_store(&lagged, false);
            atomic_fetch_add(&lagged_us, sbl_now_us() - lagged_since_us);
        }
    } else if (!ignore_walls && comparable) {
        ret = tickets_for_lag(prev_sus, curr_sus, locks_last, lpo, lag_ms, threshold_ms);
        if (!atomic_load(&lagged)) {
            atomic_store(&lagged, true);
            atomic_fetch_add(&lagged_count, 1);
            lagged_since_us = sbl_now_us();
        }
    } else {
        /* the topology changed, or the sustainer went back: no conclusion */
        ret = atomic_load(&target);
        last_sustainer_move_us = sbl_now_us();
    }
    if (ret < (int32_t)pv(P_MIN_TICKETS))
        ret = (int32_t)pv(P_MIN_TICKETS);
    trim_samples(trim_to);
    return ret;
}

/* ---- the refresher thread --------------------------------------------------- */

static pthread_t refresher;
static bool refresher_running;

static void *refresher_main(void *arg)
{
    (void)arg;
    int64_t next = sbl_now_us();
    while (!atomic_load(&stopping)) {
        next += 1000000;
        refresh_to(next_tickets());
        while (!atomic_load(&stopping) && sbl_now_us() < next) {
            struct timespec t = {0, 50 * 1000 * 1000};
            nanosleep(&t, NULL);
        }
        if (sbl_now_us() > next + 1000000)
            next = sbl_now_us(); /* a stall: no burst of refreshes after it */
    }
    return NULL;
}

int sbl_rs_flow_start(void)
{
    atomic_store(&stopping, false);
    last_sustainer_move_us = sbl_now_us();
    if (pthread_create(&refresher, NULL, refresher_main, NULL) != 0)
        return -1;
    refresher_running = true;
    return 0;
}

void sbl_rs_flow_stop(void)
{
    atomic_store(&stopping, true);
    pthread_mutex_lock(&ticket_mu);
    pthread_cond_broadcast(&ticket_cond);
    pthread_mutex_unlock(&ticket_mu);
    if (refresher_running)
        pthread_join(refresher, NULL);
    refresher_running = false;
    refresh_to(FLOW_MAX_TICKETS);
}

void sbl_repl_flow_append_status(bson_t *r)
{
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(r, "flowControl", &d);
    BSON_APPEND_BOOL(&d, "enabled", pv(P_ENABLED) != 0);
    BSON_APPEND_INT32(&d, "targetRateLimit", atomic_load(&target));
    BSON_APPEND_INT64(&d, "timeAcquiringMicros", atomic_load(&acquiring_us));
    BSON_APPEND_DOUBLE(&d, "locksPerKiloOp", atomic_load(&last_locks_per_op) * 1000);
    BSON_APPEND_INT32(&d, "sustainerRate", atomic_load(&sustainer_rate));
    BSON_APPEND_BOOL(&d, "isLagged", atomic_load(&lagged));
    BSON_APPEND_INT32(&d, "isLaggedCount", (int32_t)atomic_load(&lagged_count));
    BSON_APPEND_INT64(&d, "isLaggedTimeMicros", atomic_load(&lagged_us));
    bson_append_document_end(r, &d);
}
