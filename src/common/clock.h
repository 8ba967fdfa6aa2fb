/*
 * clock.h: the two clocks every module reads: monotonic microseconds (for
 * deadlines and durations) and wall-clock milliseconds since the epoch (for
 * dates the user sees); and unique (seconds, increment) timestamps.
 */
#ifndef SBL_CLOCK_H
#define SBL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t sbl_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
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

#endif
