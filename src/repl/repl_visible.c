/*
 * repl_visible.c: the oplog's visibility point.  Writes take their entry's ts
 * under the oplog's insert lock, which they release before they commit
 * (repl_oplog.c), so entries commit in any order; readers of the oplog must
 * still see it as a prefix, or a secondary that read ts N+1 while N was in
 * flight would resume past N and never have it.
 *
 * What must stay true:
 *  - Every ts an entry is written at is reserved here first (under the
 *    insert lock, after it became its transaction's commit timestamp), and
 *    ends here when that transaction commits or rolls back (the storage's
 *    end-of-transaction observer), so no reservation is left behind.
 *  - The limit (sbl_oplog_vis_limit) is below every reservation still in
 *    flight and below every ts reserved after it was computed: natural
 *    scans of the oplog opened afterwards never return an entry above it.
 *  - The visible optime (sbl_oplog_committed) is the newest entry that
 *    committed with nothing in flight below it: the applied and durable
 *    position this member reports, the one waits and the majority point
 *    compare with.  It never moves back except on a reset (the oplog read
 *    again from disk).
 */
#include "repl/repl_int.h"

#include <pthread.h>
#include <stdlib.h>

enum { IN_FLIGHT, COMMITTED, ROLLED_BACK };

typedef struct resv {
    uint64_t ts;
    int64_t term;
    const void *owner; /* the storage session whose transaction holds it */
    int state;
} resv_t;

static pthread_mutex_t vis_mu = PTHREAD_MUTEX_INITIALIZER;
static resv_t *q;            /* in ts order from head: reserved, not yet popped */
static size_t head, n, cap;  /* q[head .. head+n) */
static uint64_t hi;          /* the newest ts reserved (or read from disk) */
static sbl_optime_t visible; /* the newest committed entry with nothing in flight below */
static bool ready;           /* hi and visible were read from the oplog */

void sbl_oplog_vis_reset(bool is_ready, uint64_t ts, int64_t term)
{
    pthread_mutex_lock(&vis_mu);
    head = n = 0;
    hi = ts;
    visible.ts = ts;
    visible.t = term;
    ready = is_ready;
    pthread_mutex_unlock(&vis_mu);
}

bool sbl_oplog_vis_reserve(uint64_t ts, int64_t term, const void *owner)
{
    pthread_mutex_lock(&vis_mu);
    if (head + n == cap) {
        if (head > 0) { /* move what is left to the front */
            for (size_t i = 0; i < n; i++)
                q[i] = q[head + i];
            head = 0;
        }
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            resv_t *l = realloc(q, ncap * sizeof(*l));
            if (l == NULL) { /* untracked, it must not be written */
                pthread_mutex_unlock(&vis_mu);
                return false;
            }
            q = l;
            cap = ncap;
        }
    }
    /* in ts order: an applier's entry may come below one handed out before */
    size_t i = n;
    while (i > 0 && q[head + i - 1].ts > ts) {
        q[head + i] = q[head + i - 1];
        i--;
    }
    q[head + i] = (resv_t){.ts = ts, .term = term, .owner = owner, .state = IN_FLIGHT};
    n++;
    if (ts > hi)
        hi = ts;
    pthread_mutex_unlock(&vis_mu);
    return true;
}

void sbl_oplog_vis_end(const void *owner, bool committed)
{
    pthread_mutex_lock(&vis_mu);
    for (size_t i = 0; i < n; i++)
        if (q[head + i].owner == owner && q[head + i].state == IN_FLIGHT)
            q[head + i].state = committed ? COMMITTED : ROLLED_BACK;
    while (n > 0 && q[head].state != IN_FLIGHT) {
        if (q[head].state == COMMITTED && q[head].ts > visible.ts) {
            visible.ts = q[head].ts;
            visible.t = q[head].term;
        }
        head++;
        n--;
    }
    if (n == 0)
        head = 0;
    pthread_mutex_unlock(&vis_mu);
}

uint64_t sbl_oplog_vis_limit(void)
{
    pthread_mutex_lock(&vis_mu);
    uint64_t lim = !ready ? UINT64_MAX : n > 0 ? q[head].ts - 1 : hi;
    pthread_mutex_unlock(&vis_mu);
    return lim;
}

uint64_t sbl_oplog_vis_oldest_in_flight(void)
{
    pthread_mutex_lock(&vis_mu);
    uint64_t ts = n > 0 ? q[head].ts : 0; /* the head is in flight: ended ones are popped */
    pthread_mutex_unlock(&vis_mu);
    return ts;
}

sbl_optime_t sbl_oplog_committed(void)
{
    pthread_mutex_lock(&vis_mu);
    sbl_optime_t o = visible;
    pthread_mutex_unlock(&vis_mu);
    return o;
}
