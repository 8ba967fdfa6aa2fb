/*
 * clock.h: the two clocks every module reads: monotonic microseconds (for
 * deadlines and durations) and wall-clock milliseconds since the epoch (for
 * dates the user sees); unique (seconds, increment) timestamps; and a
 * shared timestamp that only moves forward.
 */
#ifndef SBL_CLOCK_H
#define SBL_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

static inline int64_t sbl_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The wall-clock time us microseconds from now, as the absolute deadline
 * pthread_cond_timedwait takes (its condition variables use CLOCK_REALTIME). */
static inline struct timespec sbl_deadline_in_us(int64_t us)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(us / 1000000);
    ts.tv_nsec += (long)(us % 1000000) * 1000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* The same, ms milliseconds from now. */
static inline struct timespec sbl_deadline_in_ms(int64_t ms)
{
    return sbl_deadline_in_us(ms * 1000);
}

static inline int64_t sbl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A (seconds, increment) timestamp from the wall clock that never repeats
 * or goes back within this process: chunk and collection versions'
 * timestamps. */
void sbl_clock_ts_next(uint32_t *secs, uint32_t *inc);

/* *p = max(*p, ts), atomically: a timestamp shared by threads that only
 * moves forward. */
static inline void sbl_ts_advance(_Atomic uint64_t *p, uint64_t ts)
{
    uint64_t cur = atomic_load_explicit(p, memory_order_relaxed);
    while (cur < ts && !atomic_compare_exchange_weak_explicit(p, &cur, ts, memory_order_relaxed,
                                                              memory_order_relaxed))
        ;
}

#endif
