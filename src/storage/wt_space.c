/*
 * wt_space.c: the free-space guard in front of WiredTiger.
 *
 * WiredTiger 3.2.1 panics when a journal write gets ENOSPC, and a panicked
 * engine fails every later operation until a restart.  So writes that add
 * data (inserts, updates, index builds) are refused with OutOfDiskSpace
 * (14031) while the dbpath's filesystem has less than the minimum free (and
 * with IllegalOperation (20) while it is mounted read-only); reads, deletes
 * and drops go on, and writes resume by themselves once space returns.
 *
 * sbl_storage_can_write answers replication's question "could this member
 * take writes?" (a primary that cannot steps down, a secondary that cannot
 * does not stand for election): not while the guard refuses writes, for
 * 5 s after WiredTiger's own ENOSPC (the guard may be off), nor ever after a
 * WiredTiger panic.
 *
 * What must stay true: the check on the write path is a few atomic
 * operations; statvfs runs at most once per SPACE_RECHECK_NS or after
 * SPACE_RECHECK_BYTES of accepted writes, by one thread at a time.
 */
#include "storage/wt_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/statvfs.h>
#include <time.h>

#include "common/log.h"

#define SPACE_RECHECK_NS (100 * 1000 * 1000LL)
#define SPACE_RECHECK_BYTES (4LL << 20)
#define SPACE_ENOSPC_HOLD_NS (5 * 1000 * 1000 * 1000LL) /* an ENOSPC counts this long */

enum { SPACE_OK, SPACE_LOW, SPACE_READ_ONLY };

static _Atomic int64_t min_free_bytes = (int64_t)SBL_SPACE_DEFAULT_MIN_FREE_MB << 20;
static _Atomic int64_t next_check_ns; /* monotonic time of the next statvfs */
static _Atomic int64_t bytes_left;    /* bytes accepted before the next statvfs */
static _Atomic uint64_t checked_epoch; /* engine open the cached state belongs to */
static _Atomic int state = SPACE_OK;
static _Atomic int64_t free_seen; /* bytes free at the last statvfs */
static atomic_flag checking = ATOMIC_FLAG_INIT;
static _Atomic int64_t enospc_ns; /* when WiredTiger last failed with ENOSPC (0: never) */
static atomic_bool panicked;      /* WiredTiger panicked: nothing is written until restart */

void sbl_storage_set_min_free_mb(int64_t mb)
{
    atomic_store(&min_free_bytes, mb > 0 ? mb << 20 : 0);
    atomic_store(&next_check_ns, 0); /* applies from the next write */
}

int64_t sbl_storage_min_free_mb(void)
{
    return atomic_load(&min_free_bytes) >> 20;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void log_change(int old, int now, int64_t free_b, int64_t min_b)
{
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "dbpath", sbl_eng.dbpath);
    BSON_APPEND_INT64(&attr, "freeMB", free_b >> 20);
    BSON_APPEND_INT64(&attr, "minFreeDiskSpaceMB", min_b >> 20);
    if (now == SPACE_LOW)
        sbl_log(SBL_LOG_WARNING, "STORAGE", 7333400,
                "Free disk space below the minimum: refusing writes", &attr);
    else if (now == SPACE_READ_ONLY)
        sbl_log(SBL_LOG_WARNING, "STORAGE", 7333401,
                "The dbpath is on a read-only filesystem: refusing writes", &attr);
    else if (old != SPACE_OK)
        sbl_log(SBL_LOG_INFO, "STORAGE", 7333402, "Disk space available again: accepting writes",
                &attr);
    bson_destroy(&attr);
}

/* statvfs the dbpath and update the cached state (one thread at a time;
 * the others go on with the state as it was). */
static void refresh(int64_t now, int64_t min_b)
{
    struct statvfs vfs;
    int old, st = SPACE_OK;
    int64_t free_b = -1;

    if (atomic_flag_test_and_set(&checking))
        return;
    if (sbl_eng.dbpath != NULL && statvfs(sbl_eng.dbpath, &vfs) == 0) {
        free_b = (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize;
        if (vfs.f_flag & ST_RDONLY)
            st = SPACE_READ_ONLY;
        else if (free_b < min_b)
            st = SPACE_LOW;
    } /* statvfs failing says nothing about space: let WiredTiger report */
    atomic_store(&free_seen, free_b);
    old = atomic_exchange(&state, st);
    atomic_store(&bytes_left, SPACE_RECHECK_BYTES);
    atomic_store(&next_check_ns, now + SPACE_RECHECK_NS);
    atomic_store(&checked_epoch, sbl_eng.epoch);
    atomic_flag_clear(&checking);
    if (old != st)
        log_change(old, st, free_b, min_b);
}

void sbl_space_note_error(int ret)
{
    if (ret == ENOSPC)
        atomic_store(&enospc_ns, now_ns());
    else if (ret == WT_PANIC)
        atomic_store(&panicked, true);
}

bool sbl_storage_can_write(void)
{
    int64_t min_b = atomic_load(&min_free_bytes), now = now_ns(), seen = atomic_load(&enospc_ns);
    if (atomic_load(&panicked) || (seen != 0 && now - seen < SPACE_ENOSPC_HOLD_NS))
        return false;
    if (min_b == 0)
        return true;
    if (now >= atomic_load(&next_check_ns) || atomic_load(&checked_epoch) != sbl_eng.epoch)
        refresh(now, min_b);
    return atomic_load(&state) == SPACE_OK;
}

int sbl_storage_space_check(size_t bytes, sbl_err_t *err)
{
    int64_t min_b = atomic_load_explicit(&min_free_bytes, memory_order_relaxed);
    int64_t now;

    if (min_b == 0)
        return 0;
    now = now_ns();
    if (now >= atomic_load_explicit(&next_check_ns, memory_order_relaxed) ||
        atomic_fetch_sub_explicit(&bytes_left, (int64_t)bytes, memory_order_relaxed) <
            (int64_t)bytes ||
        atomic_load_explicit(&checked_epoch, memory_order_relaxed) != sbl_eng.epoch)
        refresh(now, min_b);
    switch (atomic_load(&state)) {
    case SPACE_LOW:
        return sbl_err_set(err, SBL_E_OutOfDiskSpace,
                           "Can't take a write lock while out of disk space: %lld MB free on the "
                           "dbpath's filesystem, below the minimum of %lld MB "
                           "(minFreeDiskSpaceMB)",
                           (long long)(atomic_load(&free_seen) >> 20), (long long)(min_b >> 20));
    case SPACE_READ_ONLY:
        return sbl_err_set(err, SBL_E_IllegalOperation,
                           "Cannot write: the dbpath %s is on a read-only filesystem",
                           sbl_eng.dbpath);
    default:
        return 0;
    }
}
