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
 *  - a refresher thread, once a second, gathers what the set and the
 *    samples say and sets the ticket count to what sbl_flow_decide makes of
 *    it (repl_flow_rules.c: the decisions and the samples, pure functions);
 *  - a client's write takes a ticket before it starts (the command layer
 *    calls sbl_repl_flow_acquire), waiting for the next second when none is
 *    left.
 *
 * What must stay true: a member that is not a writable primary, a
 * standalone, or enableFlowControl false hands out FLOW_MAX_TICKETS (a
 * write never waits); a wait ends at the operation's interruption
 * (killOp, maxTimeMS, a step-down) and at shutdown; taking a ticket while
 * none is limited costs two relaxed atomic operations.
 *
 * The parameter table below also holds the sync source rules' three
 * (maxSyncSourceLagSecs, changeSyncSourceThresholdMillis,
 * maxNumSyncSourceChangesPerHour; sbl_rs_sync_params) and the applier's
 * oplogBatchDelayMillis (sbl_rs_batch_delay_ms), and the fetcher's
 * oplogFetcherUsesExhaust (sbl_rs_fetcher_uses_exhaust): one table, one parser,
 * one getParameter/setParameter path for replication's parameters.
 */
#include "repl/repl_int.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

#define rs sbl_rs
#define FLOW_MAX_TICKETS SBL_FLOW_MAX_TICKETS

/* ---- the parameters (mongod's names, defaults and bounds) ----------------- */

typedef enum { P_BOOL, P_INT, P_LONG, P_DOUBLE } ptype_t;
typedef enum { B_NONE, B_GT, B_GTE, B_GT_LT, B_GTE_LTE } pbound_t;

typedef struct param {
    const char *name;
    ptype_t type;
    bool startup_only;
    pbound_t bound;
    double lo, hi;
    _Atomic double v;
} param_t;

enum {
    P_ENABLED,
    P_TARGET_LAG,
    P_THRESHOLD,
    P_MAX_SAMPLES,
    P_SAMPLE_PERIOD,
    P_MIN_TICKETS,
    P_WARN_S,
    P_DECAY,
    P_FUDGE,
    P_ADDER,
    P_MULTIPLIER,
    P_SYNC_LAG,
    P_SYNC_THRESHOLD,
    P_SYNC_CHANGES,
    P_BATCH_DELAY,
    P_FETCH_EXHAUST,
    P_PRIMARY_NICE,
    P_COUNT
};

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
    /* the sync source rules' (repl_rules.c, repl_sync.c) */
    [P_SYNC_LAG] = {"maxSyncSourceLagSecs", P_INT, true, B_GT, 0, 0, SBL_RS_MAX_SYNC_LAG_S},
    [P_SYNC_THRESHOLD] = {"changeSyncSourceThresholdMillis", P_LONG, false, B_GTE, 0, 0,
                          SBL_RS_SYNC_PING_THRESHOLD_MS},
    [P_SYNC_CHANGES] = {"maxNumSyncSourceChangesPerHour", P_INT, false, B_GT, 0, 0,
                        SBL_RS_SYNC_CHANGES_PER_HOUR},
    /* the applier's (repl_sync.c) */
    [P_BATCH_DELAY] = {"oplogBatchDelayMillis", P_INT, false, B_GTE, 0, 0, 0},
    /* the fetcher's (repl_fetch.c): read when a fetch starts */
    [P_FETCH_EXHAUST] = {"oplogFetcherUsesExhaust", P_BOOL, true, B_NONE, 0, 0, 1},
    /* Sable's own: the refresher's (primary_nice below) */
    [P_PRIMARY_NICE] = {"primaryAutogroupNice", P_INT, false, B_GTE_LTE, 0, 19, 0},
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
        v = p->type != P_DOUBLE ? (double)strtoll(s, &end, 10) : strtod(s, &end);
        if (end == s || *end != '\0')
            return sbl_err_set(err, SBL_E_BadValue, "Invalid value for parameter %s: '%s' is "
                               "not a number", p->name, s);
    } else if (BSON_ITER_HOLDS_NUMBER(it)) {
        v = bson_iter_as_double(it);
        if (p->type == P_INT && (v != floor(v) || fabs(v) > 2147483647.0))
            return sbl_err_set(err, SBL_E_BadValue, "Invalid value for parameter %s: %g is not "
                               "a 32-bit integer", p->name, v);
        if (p->type == P_LONG && (v != floor(v) || fabs(v) > 9007199254740992.0))
            return sbl_err_set(err, SBL_E_BadValue, "Invalid value for parameter %s: %g is not "
                               "an integer", p->name, v);
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
    else if (p->type == P_LONG)
        BSON_APPEND_INT64(r, key, (int64_t)v);
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

int64_t sbl_rs_batch_delay_ms(void)
{
    return (int64_t)pv(P_BATCH_DELAY);
}

bool sbl_rs_fetcher_uses_exhaust(void)
{
    return pv(P_FETCH_EXHAUST) != 0;
}

void sbl_rs_sync_params(sbl_rs_sync_params_t *p)
{
    p->max_lag_s = (int64_t)pv(P_SYNC_LAG);
    p->threshold_ms = (int64_t)pv(P_SYNC_THRESHOLD);
    p->max_changes = (int)pv(P_SYNC_CHANGES);
}

/* ---- the samples (the primary's oplog writer) ------------------------------ */

static pthread_mutex_t sample_mu = PTHREAD_MUTEX_INITIALIZER;
static sbl_flow_samples_t samples;   /* sample_mu */
static _Atomic int64_t acquisitions; /* tickets taken (waited for or not) */

void sbl_rs_flow_sample(uint64_t ts)
{
    pthread_mutex_lock(&sample_mu);
    sbl_flow_samples_add(&samples, ts, atomic_load(&acquisitions), (int64_t)pv(P_SAMPLE_PERIOD),
                         (size_t)pv(P_MAX_SAMPLES));
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

/* ---- the refresher's second (mongod's getNumTickets) ----------------------- */

static sbl_flow_state_t st = {.tickets = FLOW_MAX_TICKETS}; /* the refresher's; st_mu for readers */
static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic double last_locks_per_op;
static int64_t last_poll_locks;
/* The members' applied optimes, sorted (the refresher's own). */
static sbl_optime_t prev_m[SBL_RS_MAX_MEMBERS], curr_m[SBL_RS_MAX_MEMBERS];
static int prev_n, curr_n;

static int optime_order(const void *a, const void *b)
{
    return sbl_optime_cmp(*(const sbl_optime_t *)a, *(const sbl_optime_t *)b);
}

/* The next second's tickets: what the set and the samples say, decided by
 * sbl_flow_decide. */
static int32_t next_tickets(void)
{
    sbl_flow_in_t in = {.enabled = pv(P_ENABLED) != 0,
                        .usable = sbl_repl_writable() && sbl_repl_is_primary(),
                        .target_lag_s = pv(P_TARGET_LAG), .threshold_pct = pv(P_THRESHOLD),
                        .decay = pv(P_DECAY), .fudge = pv(P_FUDGE), .adder = pv(P_ADDER),
                        .multiplier = pv(P_MULTIPLIER), .min_tickets = (int64_t)pv(P_MIN_TICKETS),
                        .warn_s = (int64_t)pv(P_WARN_S)};
    sbl_optime_t commit;

    memcpy(prev_m, curr_m, sizeof(curr_m));
    prev_n = curr_n;
    pthread_mutex_lock(&rs.lock);
    curr_n = 0;
    if (rs.config != NULL && rs.self >= 0)
        for (int i = 0; i < rs.cfg.n; i++)
            curr_m[curr_n++] = i == rs.self ? sbl_rs_my_applied() : rs.peer[i].applied;
    commit = rs.commit;
    in.commit_wall = rs.commit_wall;
    pthread_mutex_unlock(&rs.lock);
    /* the sustainer: the median member by applied optime */
    qsort(curr_m, (size_t)curr_n, sizeof(curr_m[0]), optime_order);
    uint64_t prev_sus = prev_n > 0 ? prev_m[prev_n / 2].ts : 0;
    uint64_t curr_sus = curr_n > 0 ? curr_m[curr_n / 2].ts : 0;
    in.comparable = curr_n > 0 && curr_n == prev_n && curr_sus >= prev_sus;
    in.last_wall = sbl_oplog_last_wall_ms();
    uint64_t last_ts = sbl_oplog_committed().ts;
    int64_t locks_now = atomic_load(&acquisitions);
    in.locks_last = locks_now - last_poll_locks;
    last_poll_locks = locks_now;
    in.now_us = sbl_now_us();

    pthread_mutex_lock(&sample_mu);
    in.locks_per_op = sbl_flow_locks_per_op(&samples);
    in.ops_since_commit = sbl_flow_ops_between(&samples, commit.ts, last_ts);
    in.sustainer_applied = sbl_flow_ops_between(&samples, prev_sus, curr_sus);
    sbl_flow_samples_trim(&samples, commit.ts < prev_sus ? commit.ts : prev_sus);
    pthread_mutex_unlock(&sample_mu);
    atomic_store(&last_locks_per_op, in.locks_per_op < 0 ? 0 : in.locks_per_op);

    pthread_mutex_lock(&st_mu);
    int32_t tickets = sbl_flow_decide(&st, &in);
    bool warn = st.warn;
    pthread_mutex_unlock(&st_mu);
    if (warn)
        sbl_log(SBL_LOG_WARNING, "STORAGE", 22225, "Flow control is engaged and the sustainer "
                "point is not moving. Please check the health of all secondaries.", NULL);
    return tickets;
}

/* ---- the primary's CPU weight on a shared host ------------------------------
 *
 * Members of one set on one host (a local set, sable-cluster's) share its
 * CPUs, and Linux's scheduler gives each session (autogroup) one share.  A
 * primary taking w:1 writes as fast as its clients send them keeps about
 * half of two cores; each secondary, whose applier is one thread, gets what
 * is left and falls behind (bench/replset: lag p99 of seconds, while every
 * member's threads are runnable, not waiting for the disk).
 *
 * With primaryAutogroupNice N > 0, a writable primary whose data-bearing
 * members (up, not delayed) fall NICE_ON_MS behind its last write sets its
 * autogroup's nice value to N, so runnable secondaries come first and the
 * primary takes what they leave (no write waits for a ticket, no CPU idles).
 * Once every such member has kept within NICE_OFF_MS for NICE_HOLD_MS it
 * puts back the value it started with (without the hold a w:1 load let the
 * lag build to NICE_ON_MS again and again, and its p99 came near 1 s).
 * Only while they lag: a niced primary answers later when it wakes, which
 * cost w:"majority" writes 12-18% (their members do not lag).  Checked every
 * 50 ms, from the members' reported applied optimes.  Only a member that
 * leads its own session (sabled --fork, sable-cluster) touches its
 * autogroup: otherwise the group is shared with whatever started it.  0 (the
 * default) leaves the process alone; a failure to write /proc/self/autogroup
 * (no CONFIG_SCHED_AUTOGROUP) is logged once. */

#define NICE_ON_MS 250
#define NICE_OFF_MS 50
#define NICE_HOLD_MS 1000

static int nice_base = -1; /* the autogroup's value before the first change */
static int nice_set = -1;  /* the value last written (-1: none) */
static bool nice_failed;
static _Atomic bool nice_on;          /* the primary's value is in force */
static _Atomic int64_t nice_switches; /* times it went on (serverStatus) */

static bool set_autogroup_nice(int v)
{
    bool ok = false;
    FILE *f = fopen("/proc/self/autogroup", "r+");
    if (f != NULL) {
        /* it reads "/autogroup-ID nice N" */
        if (nice_base < 0 && fscanf(f, "%*s nice %d", &nice_base) != 1)
            nice_base = 0;
        if (v < 0)
            v = nice_base;
        ok = fseek(f, 0, SEEK_SET) == 0 && fprintf(f, "%d\n", v) > 0;
        if (fclose(f) != 0)
            ok = false;
    }
    if (!ok) {
        bson_t attr = BSON_INITIALIZER;
        nice_failed = true;
        BSON_APPEND_UTF8(&attr, "error", strerror(errno));
        sbl_log(SBL_LOG_INFO, "REPL", 7350001, "Cannot set the autogroup's nice value", &attr);
        bson_destroy(&attr);
        return false;
    }
    nice_set = v;
    return true;
}

/* How far behind the primary's last write its furthest data-bearing member
 * is, in ms (-1: not a primary, or no such member up). */
static int64_t members_lag_ms(void)
{
    if (!sbl_repl_writable() || !sbl_repl_is_primary())
        return -1;
    int64_t last = sbl_oplog_last_wall_ms(), worst = -1;
    pthread_mutex_lock(&rs.lock);
    if (rs.config != NULL)
        for (int i = 0; i < rs.cfg.n; i++) {
            const sbl_rs_member_t *m = &rs.cfg.m[i];
            if (i == rs.self || m->arbiter || m->delay_s > 0 || !rs.peer[i].up)
                continue;
            int64_t lag = last - rs.peer[i].applied_wall;
            if (lag < 0)
                lag = 0;
            if (lag > worst)
                worst = lag;
        }
    pthread_mutex_unlock(&rs.lock);
    return worst;
}

static void primary_nice(void)
{
    static int64_t calm_since; /* while on: since when every member is within NICE_OFF_MS */
    int param = (int)pv(P_PRIMARY_NICE);
    if (nice_failed || (param == 0 && !nice_on) || getsid(0) != getpid())
        return;
    int64_t lag = param > 0 ? members_lag_ms() : -1, now = sbl_now_ms();
    if (lag < 0 || lag >= NICE_OFF_MS)
        calm_since = 0;
    else if (calm_since == 0)
        calm_since = now;
    /* on, it stays so until the members have kept close for NICE_HOLD_MS */
    bool want = nice_on ? lag >= 0 && (calm_since == 0 || now - calm_since < NICE_HOLD_MS)
                        : lag >= NICE_ON_MS;
    if (want == nice_on && (!want || nice_set == param))
        return;
    if (set_autogroup_nice(want ? param : -1)) {
        if (want && !nice_on)
            atomic_fetch_add(&nice_switches, 1);
        nice_on = want;
    }
}

/* ---- the refresher thread --------------------------------------------------- */

static pthread_t refresher;
static bool refresher_running;

static void *refresher_main(void *arg)
{
    sbl_thread_name("FlowControlRefresher");
    (void)arg;
    int64_t next = sbl_now_us();
    while (!atomic_load(&stopping)) {
        next += 1000000;
        refresh_to(next_tickets());
        while (!atomic_load(&stopping) && sbl_now_us() < next) {
            primary_nice();
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
    pthread_mutex_lock(&st_mu);
    st.last_move_us = sbl_now_us();
    pthread_mutex_unlock(&st_mu);
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
    if (nice_on && !nice_failed && set_autogroup_nice(-1)) /* as it started */
        nice_on = false;
    refresh_to(FLOW_MAX_TICKETS);
    pthread_mutex_lock(&sample_mu);
    sbl_flow_samples_free(&samples);
    pthread_mutex_unlock(&sample_mu);
}

void sbl_repl_flow_append_status(bson_t *r)
{
    bson_t d;
    pthread_mutex_lock(&st_mu);
    sbl_flow_state_t now = st;
    pthread_mutex_unlock(&st_mu);
    BSON_APPEND_DOCUMENT_BEGIN(r, "flowControl", &d);
    BSON_APPEND_BOOL(&d, "enabled", pv(P_ENABLED) != 0);
    BSON_APPEND_INT32(&d, "targetRateLimit", atomic_load(&target));
    BSON_APPEND_INT64(&d, "timeAcquiringMicros", atomic_load(&acquiring_us));
    BSON_APPEND_DOUBLE(&d, "locksPerKiloOp", atomic_load(&last_locks_per_op) * 1000);
    BSON_APPEND_INT32(&d, "sustainerRate", now.sustainer_rate);
    BSON_APPEND_BOOL(&d, "isLagged", now.lagged);
    BSON_APPEND_INT32(&d, "isLaggedCount", (int32_t)now.lagged_count);
    BSON_APPEND_INT64(&d, "isLaggedTimeMicros", now.lagged_us);
    /* Sable's: primaryAutogroupNice in force now, and how often it was */
    BSON_APPEND_BOOL(&d, "primaryNiced", atomic_load(&nice_on));
    BSON_APPEND_INT64(&d, "primaryNicedCount", atomic_load(&nice_switches));
    bson_append_document_end(r, &d);
}
