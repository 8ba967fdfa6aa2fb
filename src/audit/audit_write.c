/*
 * audit_write.c: the audit log's writing: group writes of the shared
 * buffer and of a loop's lane (sbl_audit_flush), the writer thread that
 * writes what the loops leave a moment later, retries a failing file and
 * rotates, and the journal flusher's fdatasync (sbl_audit_sync).
 *
 * What must stay true: written_seq only grows and covers an event only
 * after write(2) returned for all of it (a failed or partial write keeps the
 * unwritten bytes and retries them first); bytes go to the file only under
 * wmu (one writer at a time, so groups stay in order); rotation and
 * reopening happen under wmu and fd_mu (the journal flusher's fdatasync
 * takes fd_mu only, so it never holds up a write).
 */
#include "audit/audit.h"
#include "audit/audit_int.h"
#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

/* How long the writer thread waits after an event before writing it (events
 * made on a network loop are usually written by that loop before then). */
#define WRITER_DELAY_MS 20
/* How often a failing file is retried. */
#define RETRY_MS 100

/* ---- writing ------------------------------------------------------------------ */

int audit_open_file(void)
{
    return open(audit_g.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

/* Write b from *off on; returns 0 or an errno (with *off advanced past what went out). */
static int write_out(const audit_buf_t *b, size_t *off)
{
    if (audit_g.dest == SBL_AUDIT_SYSLOG) {
        while (*off < b->len) {
            char *nl = memchr(b->data + *off, '\n', b->len - *off);
            size_t n = nl != NULL ? (size_t)(nl - (b->data + *off)) : b->len - *off;
            syslog(LOG_INFO, "%.*s", (int)n, b->data + *off);
            *off += n + (nl != NULL ? 1 : 0);
        }
        return 0;
    }
    if (audit_g.fd < 0) {
        pthread_mutex_lock(&audit_g.fd_mu);
        audit_g.fd = audit_open_file();
        audit_g.dropped_to = 0;
        int e = errno;
        pthread_mutex_unlock(&audit_g.fd_mu);
        if (audit_g.fd < 0)
            return e;
    }
    while (*off < b->len) {
        ssize_t n = write(audit_g.fd, b->data + *off, b->len - *off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        *off += (size_t)n;
    }
    atomic_store(&audit_g.dirty, true);
    return 0;
}

/* A group write just went out (the writer thread's busy() looks at when). */
static void stamp_write(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    atomic_store_explicit(&audit_g.last_write_ms,
                          (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000,
                          memory_order_relaxed);
}

/* Reopen after a failure (the path may have been fixed by the operator).  Under wmu. */
static void drop_fd(void)
{
    if (audit_g.dest != SBL_AUDIT_FILE || audit_g.fd < 0)
        return;
    pthread_mutex_lock(&audit_g.fd_mu);
    close(audit_g.fd);
    audit_g.fd = -1;
    pthread_mutex_unlock(&audit_g.fd_mu);
}

/* Under wmu: after a write that gave e (0: it worked) where the last one
 * gave was, log a change and make it the health every event looks at. */
static void note_health(int e, int was)
{
    if (e == was)
        return;
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "path", audit_g.path != NULL ? audit_g.path : "");
    BSON_APPEND_UTF8(&attr, "error", e != 0 ? strerror(e) : "none");
    sbl_log(e != 0 ? SBL_LOG_ERROR : SBL_LOG_INFO, "AUDIT", e != 0 ? 7000001 : 7000002,
            e != 0 ? "Audit log write failed; refusing audited operations"
                   : "Audit log writable again",
            &attr);
    bson_destroy(&attr);
    atomic_store(&audit_g.health_errno, e);
    if (e != 0) { /* the writer thread retries from now on */
        pthread_mutex_lock(&audit_g.mu);
        pthread_cond_signal(&audit_g.cv);
        pthread_mutex_unlock(&audit_g.mu);
    }
}

/*
 * Under wmu: take everything buffered and write it with one write(2).
 * While the file is failing only the writer thread (retry) tries again.
 * Returns 0 or the errno of the failure.
 */
static int flush_locked(bool retry)
{
    pthread_mutex_lock(&audit_g.mu);
    if (audit_g.buf.len > 0) {
        if (audit_g.wb.len == 0) {
            audit_buf_t t = audit_g.wb;
            audit_g.wb = audit_g.buf;
            audit_g.buf = t;
            audit_g.wb_off = 0;
        } else {
            audit_g.wb.oom = false;
            audit_buf_put(&audit_g.wb, audit_g.buf.data, audit_g.buf.len);
            if (audit_g.wb.oom)
                abort(); /* cannot keep the events in order without memory */
        }
        audit_g.buf.len = 0;
        audit_g.wb_last = audit_g.next_seq;
    }
    pthread_mutex_unlock(&audit_g.mu);

    int was = atomic_load(&audit_g.health_errno);
    if (was != 0 && !retry)
        return was;
    if (was != 0)
        drop_fd();
    int e = 0;
    if (audit_g.wb.len > 0) {
        e = write_out(&audit_g.wb, &audit_g.wb_off);
        if (e == 0) {
            stamp_write();
            audit_g.wb.len = 0;
            audit_g.wb_off = 0;
            atomic_store_explicit(&audit_g.written_seq, audit_g.wb_last, memory_order_release);
        }
    } else if (was != 0 && audit_g.dest == SBL_AUDIT_FILE) {
        /* Nothing pending: check that the file can be opened again. */
        audit_buf_t empty = {0};
        size_t o = 0;
        e = write_out(&empty, &o);
    }
    note_health(e, was);
    return e;
}

/* Under wmu: write the shared buffer's events, then the lane's (see
 * "lanes").  What the lane cannot write moves to the shared buffer, for the
 * writer thread's retries.  Returns 0 or the errno of the failure. */
int audit_lane_flush_locked(lane_t *l)
{
    int e = 0, was = atomic_load(&audit_g.health_errno);
    if (was != 0 || audit_g.wb.len > 0 || !audit_shared_all_written())
        e = flush_locked(false);
    if (e == 0 && l->buf.len > 0) {
        size_t off = 0;
        e = write_out(&l->buf, &off);
        if (e == 0) {
            stamp_write();
            l->buf.len = 0;
        } else {
            memmove(l->buf.data, l->buf.data + off, l->buf.len - off); /* what went out */
            l->buf.len -= off;
            note_health(e, was);
        }
    }
    if (e == 0) {
        l->written = l->seq;
    } else if (l->buf.len > 0) {
        pthread_mutex_lock(&audit_g.mu);
        audit_lane_move_locked(l);
        pthread_mutex_unlock(&audit_g.mu);
    }
    return e;
}

int sbl_audit_flush(uint64_t seq, sbl_err_t *err)
{
    if (!audit_g.running)
        return 0;
    lane_t *l = audit_lane_cur();
    if (l != NULL && (l->buf.len > 0 || (seq & LANE_BIT))) {
        /* This thread's lane: only this thread writes it (it waits for wmu). */
        if (seq != 0 && sbl_audit_written(seq))
            return 0;
        pthread_mutex_lock(&audit_g.wmu);
        int e = audit_g.running ? audit_lane_flush_locked(l) : 0;
        pthread_mutex_unlock(&audit_g.wmu);
        if (seq == 0 || sbl_audit_written(seq) || !audit_g.running)
            return 0;
        return audit_health_err(e != 0 ? e : EIO, err);
    }
    if (seq & LANE_BIT)
        return 0; /* (no lane: closed since, and close wrote it) */
    if (seq == 0) { /* whatever is buffered, unless another thread is writing now */
        /* Every event handed out is written: nothing to do (this thread's
         * own events are seen; another thread's later ones are its own
         * flush's business). */
        if (audit_shared_all_written() || pthread_mutex_trylock(&audit_g.wmu) != 0)
            return 0;
        if (audit_g.running)
            flush_locked(false);
        pthread_mutex_unlock(&audit_g.wmu);
        return 0;
    }
    if (sbl_audit_written(seq))
        return 0;
    pthread_mutex_lock(&audit_g.wmu);
    int e = sbl_audit_written(seq) || !audit_g.running ? 0 : flush_locked(false);
    pthread_mutex_unlock(&audit_g.wmu);
    if (sbl_audit_written(seq) || !audit_g.running)
        return 0;
    return audit_health_err(e != 0 ? e : EIO, err);
}

static int do_rotate(char *msg, size_t msglen)
{
    char to[4096];
    struct tm tm;
    time_t now = time(NULL);
    struct stat st;

    if (audit_g.dest != SBL_AUDIT_FILE)
        return 0;
    gmtime_r(&now, &tm);
    int n = snprintf(to, sizeof(to), "%s.", audit_g.path);
    strftime(to + n, sizeof(to) - (size_t)n, "%Y-%m-%dT%H-%M-%S", &tm);
    size_t base = strlen(to);
    for (int i = 1; stat(to, &st) == 0 && i < 1000; i++)
        snprintf(to + base, sizeof(to) - base, ".%d", i);
    if (audit_g.fd >= 0)
        fdatasync(audit_g.fd);
    if (rename(audit_g.path, to) != 0) {
        snprintf(msg, msglen, "could not rename the audit log %s to %s: %s", audit_g.path, to,
                 strerror(errno));
        return SBL_E_InternalError;
    }
    int fd = audit_open_file();
    if (fd < 0) {
        snprintf(msg, msglen, "could not open a new audit log %s: %s", audit_g.path,
                 strerror(errno));
        drop_fd(); /* the next write retries the open and refuses events meanwhile */
        return SBL_E_InternalError;
    }
    pthread_mutex_lock(&audit_g.fd_mu);
    if (audit_g.fd >= 0)
        close(audit_g.fd);
    audit_g.fd = fd;
    audit_g.dropped_to = 0;
    pthread_mutex_unlock(&audit_g.fd_mu);
    return 0;
}

/* Whether the file was written less than WRITER_DELAY_MS ago (then the
 * writer waits before writing: under load the loops write soon enough). */
static bool busy(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    int64_t last = atomic_load_explicit(&audit_g.last_write_ms, memory_order_relaxed);
    return last != 0 && ms - last < WRITER_DELAY_MS;
}

void *audit_writer_main(void *arg)
{
    bool done = false;

    sbl_thread_name("audit");
    while (!done) {
        pthread_mutex_lock(&audit_g.mu);
        while (!audit_g.stop && !audit_g.rotate_req && !audit_g.kick &&
               atomic_load(&audit_g.health_errno) == 0) {
            audit_g.writer_idle = true;
            pthread_cond_wait(&audit_g.cv, &audit_g.mu);
            audit_g.writer_idle = false;
        }
        int failing = atomic_load(&audit_g.health_errno) != 0;
        uint64_t due = audit_g.next_seq; /* the events the wake-up was for */
        bool waited = false;
        if (!audit_g.stop && !audit_g.rotate_req && (failing || busy())) {
            waited = true;
            /* Under load an event waits a moment (a loop's flush usually
             * takes it first); a failing file is retried ten times a second. */
            int ms = failing ? RETRY_MS : WRITER_DELAY_MS;
            struct timespec ts = sbl_deadline_in_ms(ms);
            pthread_cond_timedwait(&audit_g.cv, &audit_g.mu, &ts);
        }
        audit_g.kick = false;
        bool rotate = audit_g.rotate_req, stop = audit_g.stop;
        if (waited && !failing && !rotate && !stop && sbl_audit_written(due)) {
            /* A loop wrote them meanwhile (the usual case under load): do not
             * compete for the file; look again later if more is buffered. */
            audit_g.kick = audit_g.buf.len > 0;
            pthread_mutex_unlock(&audit_g.mu);
            continue;
        }
        pthread_mutex_unlock(&audit_g.mu);

        pthread_mutex_lock(&audit_g.wmu);
        int e = flush_locked(true);
        char msg[256] = "";
        int rrc = rotate ? do_rotate(msg, sizeof(msg)) : 0;
        bool wb_empty = audit_g.wb.len == 0;
        pthread_mutex_unlock(&audit_g.wmu);
        if (rotate) {
            pthread_mutex_lock(&audit_g.mu);
            audit_g.rotate_rc = rrc;
            snprintf(audit_g.rotate_msg, sizeof(audit_g.rotate_msg), "%s", msg);
            audit_g.rotate_req = false;
            audit_g.rotate_gen++;
            pthread_cond_broadcast(&audit_g.done_cv);
            pthread_mutex_unlock(&audit_g.mu);
        }
        if (stop) {
            pthread_mutex_lock(&audit_g.mu);
            done = audit_g.buf.len == 0 && (wb_empty || e != 0);
            pthread_mutex_unlock(&audit_g.mu);
        }
    }
    return NULL;
}

int sbl_audit_rotate(sbl_err_t *err)
{
    if (!audit_g.running || audit_g.dest != SBL_AUDIT_FILE)
        return 0;
    pthread_mutex_lock(&audit_g.mu);
    uint64_t gen = audit_g.rotate_gen;
    audit_g.rotate_req = true;
    pthread_cond_signal(&audit_g.cv);
    while (audit_g.rotate_gen == gen)
        pthread_cond_wait(&audit_g.done_cv, &audit_g.mu);
    int rc = audit_g.rotate_rc;
    if (rc != 0)
        sbl_err_set(err, rc, "%s", audit_g.rotate_msg);
    pthread_mutex_unlock(&audit_g.mu);
    return rc;
}

int sbl_audit_sync(void)
{
    int rc = 0;
    if (!atomic_exchange(&audit_g.dirty, false))
        return 0;
    pthread_mutex_lock(&audit_g.fd_mu);
    if (audit_g.dest == SBL_AUDIT_FILE && audit_g.fd >= 0) {
        struct stat st;
        bool known = fstat(audit_g.fd, &st) == 0;
        off_t end = known ? st.st_size : 0;
        if (known && !S_ISREG(st.st_mode)) {
            /* A FIFO (a log shipper reading the events) or a device such
             * as /dev/null: what write(2) handed over is the reader's, and
             * fdatasync would fail with EINVAL, failing every j:true write
             * of the group commit and logging an error ten times a second. */
        } else if (fdatasync(audit_g.fd) != 0) {
            rc = errno;
        } else if (end > audit_g.dropped_to) {
            /* The file is written once and never read back, so what is on
             * disk leaves the page cache now: the next writes reuse those
             * pages instead of taking fresh ones, and the log does not push
             * the data files out of the cache.  On this kind of VM the
             * kernel's time per audited insert (2.3 KB of JSON) fell from
             * +8.6..12.8 us to +1.4..5.0 us over an unaudited one
             * (docs/audit.md, "Session 7").  From the page the last call
             * ended in: only whole pages are dropped. */
            posix_fadvise(audit_g.fd, audit_g.dropped_to, end - audit_g.dropped_to,
                          POSIX_FADV_DONTNEED);
            audit_g.dropped_to = end & ~(off_t)4095;
        }
    }
    pthread_mutex_unlock(&audit_g.fd_mu);
    return rc;
}
