/*
 * clock.c: unique wall-clock timestamps (clock.h).
 */
#include "common/clock.h"

#include <pthread.h>

void sbl_clock_ts_next(uint32_t *secs, uint32_t *inc)
{
    static uint32_t last_secs, last_inc;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    uint32_t now = (uint32_t)time(NULL);
    if (now > last_secs) {
        last_secs = now;
        last_inc = 0;
    }
    *secs = last_secs;
    *inc = ++last_inc;
    pthread_mutex_unlock(&mu);
}
