/*
 * repl_flow_rules.c: flow control's decisions as plain functions over plain
 * structs (mongod's FlowControl, read and re-done), so the unit tests drive
 * them without a set, threads or a clock (tests/unit/test_repl_flow.c):
 *  - the samples the primary's oplog writer records (entries and tickets
 *    since start-up at a ts), and what is read from them: the entries
 *    between two timestamps, the tickets per entry;
 *  - the next second's tickets from what the refresher saw (sbl_flow_decide).
 * repl_flow.c holds the locks, the thread, the parameters and the tickets.
 *
 * What must stay true: samples' ts only grow; at most max of them are kept
 * (past it the newest is overwritten) and trimming leaves two; the decision
 * never hands out fewer than min_tickets nor more than SBL_FLOW_MAX_TICKETS.
 */
#include "repl/repl_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sbl_flow_samples_add(sbl_flow_samples_t *s, uint64_t ts, int64_t locks, int64_t period,
                          size_t max)
{
    s->ops++;
    if (s->ops - s->last_ops < period || (s->n > s->head && ts <= s->v[s->n - 1].ts))
        return; /* not due, or out of order (commits race the sampling) */
    s->last_ops = s->ops;
    sbl_flow_sample_t x = {ts, s->ops, locks};
    if (s->n - s->head >= max && s->n > s->head) {
        s->v[s->n - 1] = x; /* full: lose resolution at the newest end, as mongod */
        return;
    }
    if (s->n == s->cap && s->head > 0) { /* slide down what trimming left */
        memmove(s->v, s->v + s->head, (s->n - s->head) * sizeof(*s->v));
        s->n -= s->head;
        s->head = 0;
    }
    if (s->n == s->cap) {
        size_t ncap = s->cap == 0 ? 1024 : s->cap * 2;
        sbl_flow_sample_t *g = realloc(s->v, ncap * sizeof(*g));
        if (g == NULL)
            return; /* a sample lost: only resolution */
        s->v = g;
        s->cap = ncap;
    }
    s->v[s->n++] = x;
}

int64_t sbl_flow_ops_between(const sbl_flow_samples_t *s, uint64_t prev, uint64_t curr)
{
    int64_t a = -1, b = -1;
    for (size_t i = s->head; i < s->n; i++) {
        if (a == -1 && prev <= s->v[i].ts)
            a = s->v[i].ops;
        if (curr <= s->v[i].ts) {
            b = s->v[i].ops;
            break;
        }
    }
    if (a != -1 && b == -1)
        b = s->v[s->n - 1].ops;
    return a != -1 && b != -1 ? b - a : -1;
}

double sbl_flow_locks_per_op(const sbl_flow_samples_t *s)
{
    if (s->n - s->head < 2)
        return -1;
    const sbl_flow_sample_t *a = &s->v[s->n - 2], *b = &s->v[s->n - 1];
    return b->ops > a->ops ? (double)(b->locks - a->locks) / (double)(b->ops - a->ops) : 0;
}

void sbl_flow_samples_trim(sbl_flow_samples_t *s, uint64_t ts)
{
    while (s->n - s->head > 2 && s->v[s->head].ts < ts)
        s->head++;
}

void sbl_flow_samples_free(sbl_flow_samples_t *s)
{
    free(s->v);
    memset(s, 0, sizeof(*s));
}

/* a x b, within 0..SBL_FLOW_MAX_TICKETS (0 when either is 0). */
static int32_t mul_capped(double a, double b)
{
    if (a == 0.0 || b == 0.0)
        return 0;
    double r = a * b;
    return r >= SBL_FLOW_MAX_TICKETS ? SBL_FLOW_MAX_TICKETS : r <= 0 ? 0 : (int32_t)r;
}

int32_t sbl_flow_decide(sbl_flow_state_t *st, const sbl_flow_in_t *in)
{
    st->warn = false;
    if (!in->enabled || !in->usable || in->locks_per_op < 0)
        return st->tickets = SBL_FLOW_MAX_TICKETS;
    int64_t threshold_ms = (int64_t)(1000.0 * in->threshold_pct * in->target_lag_s);
    bool ignore_walls = in->commit_wall > in->last_wall; /* walls need not grow together */
    int64_t lag_ms = ignore_walls ? 0 : in->last_wall - in->commit_wall;
    int32_t ret;
    /* Few entries since the commit point (one sample bucket): the periodic
     * no-ops of an idle set are not lag. */
    bool healthy = !ignore_walls && (lag_ms < threshold_ms || in->ops_since_commit == -1);
    if (healthy) {
        ret = mul_capped((double)st->tickets + in->adder, in->multiplier);
        st->last_move_us = in->now_us;
        if (st->lagged) {
            st->lagged = false;
            st->lagged_us += in->now_us - st->lagged_since_us;
        }
    } else if (!ignore_walls && in->comparable) {
        int64_t applied = in->sustainer_applied;
        if (applied > 0) {
            st->last_move_us = in->now_us;
        } else if (in->warn_s > 0 && in->now_us - st->last_move_us >= in->warn_s * 1000000) {
            st->warn = true; /* the sustainer has not moved for warn_s */
            st->last_move_us = in->now_us;
        }
        st->sustainer_rate = applied > INT32_MAX ? INT32_MAX : (int32_t)applied;
        if (applied == -1) { /* unknown: fewer than were taken last second */
            int64_t half = in->locks_last / 2;
            ret = half > SBL_FLOW_MAX_TICKETS ? SBL_FLOW_MAX_TICKETS : (int32_t)half;
        } else {
            /* near the threshold about the sustainer's pace; at twice it, decay x that */
            double exponent = (double)(lag_ms - threshold_ms) /
                              (double)(threshold_ms > 1 ? threshold_ms : 1);
            double reduce = pow(in->decay, exponent);
            ret = mul_capped(in->locks_per_op, (double)applied * reduce * in->fudge);
        }
        if (!st->lagged) {
            st->lagged = true;
            st->lagged_count++;
            st->lagged_since_us = in->now_us;
        }
    } else {
        /* the members changed, or the sustainer went back: no conclusion */
        ret = st->tickets;
        st->last_move_us = in->now_us;
    }
    if (ret < in->min_tickets)
        ret = (int32_t)in->min_tickets;
    return st->tickets = ret;
}
