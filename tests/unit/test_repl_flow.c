/*
 * test_repl_flow.c: flow control's pure parts (src/repl/repl_flow_rules.c),
 * without a set or a clock: the samples (entries between two timestamps,
 * tickets per entry, trimming, the cap) and the decisions (off, healthy
 * growth, the lagged formula, the floor, no conclusion, isLagged's counts
 * and time, the warning when the sustainer does not move).
 */
#include "check.h"
#include "repl/repl_int.h"

#include <math.h>
#include <string.h>

static void test_samples(void)
{
    sbl_flow_samples_t s;
    memset(&s, 0, sizeof(s));
    CHECK(sbl_flow_locks_per_op(&s) == -1);
    CHECK(sbl_flow_ops_between(&s, 1, 2) == -1);
    /* period 1: a sample per entry, ts 10..109, two tickets per entry */
    for (int i = 0; i < 100; i++)
        sbl_flow_samples_add(&s, 10 + (uint64_t)i, 2 * (i + 1), 1, 1000);
    CHECK(s.n - s.head == 100);
    for (int a = 0; a < 100; a += 7)
        for (int b = a; b < 100; b += 5)
            CHECK_MSG(sbl_flow_ops_between(&s, 10 + (uint64_t)a, 10 + (uint64_t)b) == b - a,
                      "%d..%d", a, b);
    CHECK(sbl_flow_ops_between(&s, 10, 5000) == 99);   /* past the newest: the newest */
    CHECK(sbl_flow_ops_between(&s, 5000, 6000) == -1); /* nothing sampled at or after */
    CHECK(sbl_flow_locks_per_op(&s) == 2.0);
    /* out of order ts are not sampled */
    sbl_flow_samples_add(&s, 50, 999, 1, 1000);
    CHECK(s.n - s.head == 100);
    /* trimming keeps the samples at or after ts, and always two */
    sbl_flow_samples_trim(&s, 60);
    CHECK(s.v[s.head].ts == 60 && s.n - s.head == 50);
    sbl_flow_samples_trim(&s, 100000);
    CHECK(s.n - s.head == 2 && sbl_flow_locks_per_op(&s) == 2.0);
    sbl_flow_samples_free(&s);

    /* period 10: one sample each 10 entries; a cap of 3 overwrites the newest */
    for (int i = 1; i <= 100; i++)
        sbl_flow_samples_add(&s, (uint64_t)i, i, 10, 3);
    CHECK(s.n - s.head == 3);
    CHECK(s.v[s.head].ts == 10 && s.v[s.head + 1].ts == 20 && s.v[s.head + 2].ts == 100);
    CHECK(sbl_flow_ops_between(&s, 10, 20) == 10);
    CHECK(sbl_flow_ops_between(&s, 11, 15) == 0); /* one bucket */
    sbl_flow_samples_free(&s);
}

static sbl_flow_in_t input(void)
{
    sbl_flow_in_t in = {.enabled = true, .usable = true, .locks_per_op = 1.0,
                        .locks_last = 400, .last_wall = 100000, .commit_wall = 100000,
                        .ops_since_commit = 0, .comparable = true, .sustainer_applied = 1000,
                        .now_us = 1000000, .target_lag_s = 10, .threshold_pct = 0.5,
                        .decay = 0.5, .fudge = 0.95, .adder = 1000, .multiplier = 1.05,
                        .min_tickets = 100, .warn_s = 10};
    return in;
}

static void test_decide(void)
{
    sbl_flow_state_t st = {.tickets = SBL_FLOW_MAX_TICKETS};
    sbl_flow_in_t in = input();

    /* off, not a writable primary, fewer than two samples: no limit */
    in.enabled = false;
    CHECK(sbl_flow_decide(&st, &in) == SBL_FLOW_MAX_TICKETS);
    in = input();
    in.usable = false;
    CHECK(sbl_flow_decide(&st, &in) == SBL_FLOW_MAX_TICKETS);
    in = input();
    in.locks_per_op = -1;
    CHECK(sbl_flow_decide(&st, &in) == SBL_FLOW_MAX_TICKETS);

    /* no lag: stays at the maximum */
    in = input();
    CHECK(sbl_flow_decide(&st, &in) == SBL_FLOW_MAX_TICKETS && !st.lagged);

    /* lag at the threshold (5 s): the sustainer's entries x fudge x tickets per entry */
    in.last_wall = in.commit_wall + 5000;
    in.ops_since_commit = 5000;
    int32_t t = sbl_flow_decide(&st, &in);
    CHECK_MSG(t == 950, "%d", t);
    CHECK(st.lagged && st.lagged_count == 1 && st.sustainer_rate == 1000 && st.tickets == 950);
    /* twice the threshold: decay x that; two tickets per entry: twice as many */
    in.last_wall = in.commit_wall + 10000;
    in.locks_per_op = 2.0;
    in.now_us += 1000000;
    t = sbl_flow_decide(&st, &in);
    CHECK_MSG(t == 950, "%d", t);
    CHECK(st.lagged_count == 1); /* still the same lagged period */
    /* far past it: the floor */
    in.last_wall = in.commit_wall + 60000;
    t = sbl_flow_decide(&st, &in);
    CHECK_MSG(t == 100, "%d", t);
    /* sustainer's count unknown: half the tickets taken last second */
    in.last_wall = in.commit_wall + 5000;
    in.sustainer_applied = -1;
    in.locks_last = 4000;
    CHECK(sbl_flow_decide(&st, &in) == 2000);

    /* the members changed (not comparable): the last count stays, isLagged too */
    in = input();
    in.last_wall = in.commit_wall + 8000;
    in.ops_since_commit = 100;
    in.comparable = false;
    CHECK(sbl_flow_decide(&st, &in) == 2000 && st.lagged);
    /* walls that went the other way: no conclusion either */
    in.comparable = true;
    in.commit_wall = in.last_wall + 1;
    CHECK(sbl_flow_decide(&st, &in) == 2000 && st.lagged);

    /* lag over the threshold but one sample bucket since the commit point: an idle set */
    in = input();
    in.last_wall = in.commit_wall + 8000;
    in.ops_since_commit = -1;
    in.now_us = 5000000;
    int64_t since = st.lagged_since_us;
    t = sbl_flow_decide(&st, &in);
    CHECK_MSG(t == (int32_t)((2000 + 1000) * 1.05), "%d", t); /* (last + adder) x multiplier */
    CHECK(!st.lagged && st.lagged_us == 5000000 - since && st.lagged_count == 1);
    for (int i = 0; i < 400; i++)
        sbl_flow_decide(&st, &in);
    CHECK(st.tickets == SBL_FLOW_MAX_TICKETS); /* grows back to no limit */

    /* the sustainer stuck for warn_s: warn once, then again warn_s later */
    in = input();
    in.last_wall = in.commit_wall + 8000;
    in.ops_since_commit = 100;
    in.sustainer_applied = 0;
    st.last_move_us = in.now_us;
    bool warned = false;
    int warnings = 0;
    for (int s = 1; s <= 25; s++) {
        in.now_us += 1000000;
        t = sbl_flow_decide(&st, &in);
        CHECK(t == 100); /* nothing applied: the floor */
        if (st.warn) {
            warnings++;
            warned = true;
        }
    }
    CHECK(warned && warnings == 2 && st.lagged_count == 2);
    in.warn_s = 0; /* 0: never */
    for (int s = 0; s < 30; s++) {
        in.now_us += 1000000;
        sbl_flow_decide(&st, &in);
        CHECK(!st.warn);
    }
    /* the minimum may be 0: then nothing applied means no tickets */
    in.min_tickets = 0;
    CHECK(sbl_flow_decide(&st, &in) == 0);
}

int main(void)
{
    test_samples();
    test_decide();
    return CHECK_DONE("repl_flow");
}
