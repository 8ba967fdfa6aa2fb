/*
 * audit.c: the audit log: events built and formatted on the caller's thread,
 * appended to one buffer under a short lock (a memcpy and a sequence
 * number), written in batches by one writer thread that owns the file.
 *
 * What must stay true: the file receives events in sequence order, each
 * exactly once (a failed or partial write keeps the unwritten bytes and
 * retries them first); written_seq only grows and covers an event only
 * after write(2) returned for all of it; rotation and reopening happen only
 * on the writer thread, between batches, under fd_mu (the journal flusher's
 * fdatasync takes fd_mu too).
 */
#include "audit/audit.h"
#include "common/log.h"
#include "query/query.h"

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

typedef struct waiter {
    uint64_t seq;
    void (*cb)(void *arg, int rc);
    void *arg;
    struct waiter *next;
} waiter_t;

typedef struct audit_buf {
    char *data;
    size_t len, cap;
} audit_buf_t;

static struct {
    atomic_bool on;
    atomic_bool auth_success;
    sbl_audit_dest_t dest;
    sbl_audit_format_t fmt;
    char *path;

    pthread_mutex_t mu; /* guards everything below up to the filter */
    pthread_cond_t cv;      /* the writer waits here for work */
    pthread_cond_t done_cv; /* rotate callers wait here */
    audit_buf_t buf;        /* formatted events not yet taken by the writer */
    uint64_t next_seq;      /* last sequence number handed out */
    waiter_t *waiters;
    bool writer_idle, stop, rotate_req;
    uint64_t rotate_gen;
    int rotate_rc;
    char rotate_msg[256];
    atomic_uint_fast64_t written_seq;
    atomic_int health_errno; /* 0: writing works */

    pthread_rwlock_t filter_lock;
    sbl_matcher_t *filter;
    bson_t *filter_doc;

    pthread_t thread;
    bool running;
    pthread_mutex_t fd_mu; /* the writer changes fd only under it; sync reads it */
    int fd;
    atomic_bool dirty; /* written since the last fdatasync */
} A = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
    .filter_lock = PTHREAD_RWLOCK_INITIALIZER,
    .fd_mu = PTHREAD_MUTEX_INITIALIZER,
    .fd = -1,
};

bool sbl_audit_enabled(void)
{
    return atomic_load_explicit(&A.on, memory_order_relaxed);
}

bool sbl_audit_auth_success(void)
{
    return atomic_load_explicit(&A.auth_success, memory_order_relaxed);
}

void sbl_audit_set_auth_success(bool on)
{
    atomic_store(&A.auth_success, on);
}

static int health_err(int e, sbl_err_t *err)
{
    return sbl_err_set(err, e == ENOSPC ? SBL_E_OutOfDiskSpace : SBL_E_InternalError,
                       "audit log write failed: %s (%s); audited operations are refused until "
                       "it can be written", strerror(e), A.path != NULL ? A.path : "audit log");
}

int sbl_audit_health(sbl_err_t *err)
{
    int e = atomic_load(&A.health_errno);
    return e == 0 ? 0 : health_err(e, err);
}

bool sbl_audit_written(uint64_t seq)
{
    return atomic_load_explicit(&A.written_seq, memory_order_acquire) >= seq;
}

/* ---- building an event ------------------------------------------------------ */

/* "1.2.3.4:5" or "[::1]:5" as {ip, port}. */
static void append_addr(bson_t *ev, const char *key, const char *addr)
{
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(ev, key, &d);
    if (addr != NULL) {
        const char *colon = strrchr(addr, ':');
        size_t n = colon != NULL ? (size_t)(colon - addr) : strlen(addr);
        const char *ip = addr;
        if (n >= 2 && ip[0] == '[' && ip[n - 1] == ']') {
            ip++;
            n -= 2;
        }
        bson_append_utf8(&d, "ip", 2, ip, (int)n);
        if (colon != NULL)
            BSON_APPEND_INT32(&d, "port", atoi(colon + 1));
    }
    bson_append_document_end(ev, &d);
}

static void build_event(bson_t *ev, const char *atype, const sbl_audit_client_t *c,
                        const bson_t *param, int result)
{
    static const sbl_audit_client_t none;
    struct timespec ts;
    bson_t arr, u;

    if (c == NULL)
        c = &none;
    clock_gettime(CLOCK_REALTIME, &ts);
    BSON_APPEND_UTF8(ev, "atype", atype);
    BSON_APPEND_DATE_TIME(ev, "ts", (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    if (c->uuid != NULL)
        BSON_APPEND_BINARY(ev, "uuid", BSON_SUBTYPE_UUID, c->uuid, 16);
    append_addr(ev, "local", c->local);
    append_addr(ev, "remote", c->remote);
    BSON_APPEND_ARRAY_BEGIN(ev, "users", &arr);
    if (c->user != NULL) {
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &u);
        BSON_APPEND_UTF8(&u, "user", c->user);
        BSON_APPEND_UTF8(&u, "db", c->user_db != NULL ? c->user_db : "admin");
        bson_append_document_end(&arr, &u);
    }
    bson_append_array_end(ev, &arr);
    if (c->roles != NULL) {
        BSON_APPEND_ARRAY(ev, "roles", c->roles);
    } else {
        BSON_APPEND_ARRAY_BEGIN(ev, "roles", &arr);
        bson_append_array_end(ev, &arr);
    }
    if (param != NULL) {
        BSON_APPEND_DOCUMENT(ev, "param", param);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(ev, "param", &u);
        bson_append_document_end(ev, &u);
    }
    BSON_APPEND_INT32(ev, "result", result);
}

static bool buf_append(audit_buf_t *b, const void *data, size_t len, bool newline)
{
    size_t need = b->len + len + (newline ? 1 : 0);
    if (need > b->cap) {
        size_t cap = b->cap != 0 ? b->cap : 64 * 1024;
        while (cap < need)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (p == NULL)
            return false;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    if (newline)
        b->data[b->len++] = '\n';
    return true;
}

int sbl_audit_event(const char *atype, const sbl_audit_client_t *c, const bson_t *param,
                    int result, bool force, uint64_t *seqp, sbl_err_t *err)
{
    bson_t ev;
    char *json = NULL;
    const void *data;
    size_t len;
    int rc = 0;

    *seqp = 0;
    if (!sbl_audit_enabled())
        return 0;
    bson_init(&ev);
    build_event(&ev, atype, c, param, result);
    pthread_rwlock_rdlock(&A.filter_lock);
    bool keep = A.filter == NULL || sbl_matcher_match(A.filter, &ev, NULL);
    pthread_rwlock_unlock(&A.filter_lock);
    if (!keep)
        goto done;
    if (A.fmt == SBL_AUDIT_BSON) {
        data = bson_get_data(&ev);
        len = ev.len;
    } else {
        json = bson_as_relaxed_extended_json(&ev, &len);
        data = json;
    }
    pthread_mutex_lock(&A.mu);
    int e = atomic_load(&A.health_errno);
    if (e != 0 && !force) {
        pthread_mutex_unlock(&A.mu);
        rc = health_err(e, err);
        goto done;
    }
    if (!buf_append(&A.buf, data, len, A.fmt == SBL_AUDIT_JSON)) {
        pthread_mutex_unlock(&A.mu);
        rc = sbl_err_set(err, SBL_E_ExceededMemoryLimit, "audit log: out of memory");
        goto done;
    }
    *seqp = ++A.next_seq;
    if (A.writer_idle)
        pthread_cond_signal(&A.cv);
    pthread_mutex_unlock(&A.mu);
done:
    bson_free(json);
    bson_destroy(&ev);
    return rc;
}

void sbl_audit_on_written(uint64_t seq, void (*cb)(void *arg, int rc), void *arg)
{
    waiter_t *w;
    pthread_mutex_lock(&A.mu);
    if (sbl_audit_written(seq) || !A.running || (w = malloc(sizeof(*w))) == NULL) {
        pthread_mutex_unlock(&A.mu);
        cb(arg, 0);
        return;
    }
    w->seq = seq;
    w->cb = cb;
    w->arg = arg;
    w->next = A.waiters;
    A.waiters = w;
    if (A.writer_idle)
        pthread_cond_signal(&A.cv);
    pthread_mutex_unlock(&A.mu);
}

/* ---- the writer thread ------------------------------------------------------ */

static int open_file(void)
{
    int fd = open(A.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    return fd;
}

/* Write b from *off on; returns 0 or an errno (with *off advanced past what went out). */
static int write_out(const audit_buf_t *b, size_t *off)
{
    if (A.dest == SBL_AUDIT_SYSLOG) {
        while (*off < b->len) {
            char *nl = memchr(b->data + *off, '\n', b->len - *off);
            size_t n = nl != NULL ? (size_t)(nl - (b->data + *off)) : b->len - *off;
            syslog(LOG_INFO, "%.*s", (int)n, b->data + *off);
            *off += n + (nl != NULL ? 1 : 0);
        }
        return 0;
    }
    if (A.fd < 0) {
        pthread_mutex_lock(&A.fd_mu);
        A.fd = open_file();
        int e = errno;
        pthread_mutex_unlock(&A.fd_mu);
        if (A.fd < 0)
            return e;
    }
    while (*off < b->len) {
        ssize_t n = write(A.fd, b->data + *off, b->len - *off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        *off += (size_t)n;
    }
    atomic_store(&A.dirty, true);
    return 0;
}

/* Reopen after a failure (the path may have been fixed by the operator). */
static void drop_fd(void)
{
    if (A.dest != SBL_AUDIT_FILE || A.fd < 0)
        return;
    pthread_mutex_lock(&A.fd_mu);
    close(A.fd);
    A.fd = -1;
    pthread_mutex_unlock(&A.fd_mu);
}

static int do_rotate(char *msg, size_t msglen)
{
    char to[4096];
    struct tm tm;
    time_t now = time(NULL);
    struct stat st;

    if (A.dest != SBL_AUDIT_FILE)
        return 0;
    gmtime_r(&now, &tm);
    int n = snprintf(to, sizeof(to), "%s.", A.path);
    strftime(to + n, sizeof(to) - (size_t)n, "%Y-%m-%dT%H-%M-%S", &tm);
    size_t base = strlen(to);
    for (int i = 1; stat(to, &st) == 0 && i < 1000; i++)
        snprintf(to + base, sizeof(to) - base, ".%d", i);
    if (A.fd >= 0)
        fdatasync(A.fd);
    if (rename(A.path, to) != 0) {
        snprintf(msg, msglen, "could not rename the audit log %s to %s: %s", A.path, to,
                 strerror(errno));
        return SBL_E_InternalError;
    }
    int fd = open_file();
    if (fd < 0) {
        snprintf(msg, msglen, "could not open a new audit log %s: %s", A.path, strerror(errno));
        drop_fd(); /* the writer retries the open and refuses events meanwhile */
        return SBL_E_InternalError;
    }
    pthread_mutex_lock(&A.fd_mu);
    if (A.fd >= 0)
        close(A.fd);
    A.fd = fd;
    pthread_mutex_unlock(&A.fd_mu);
    return 0;
}

/* Call the waiters that are satisfied: written ones with 0, ones whose
 * event a failed write covered with rc. */
static void wake_waiters(uint64_t written, uint64_t failed_upto, int rc)
{
    waiter_t *ready = NULL, **pp = &A.waiters;
    pthread_mutex_lock(&A.mu);
    while (*pp != NULL) {
        waiter_t *w = *pp;
        if (w->seq <= written || (rc != 0 && w->seq <= failed_upto)) {
            *pp = w->next;
            w->next = ready;
            ready = w;
        } else {
            pp = &w->next;
        }
    }
    pthread_mutex_unlock(&A.mu);
    while (ready != NULL) {
        waiter_t *w = ready;
        ready = w->next;
        sbl_err_t e;
        w->cb(w->arg, w->seq <= written ? 0 : health_err(rc, &e));
        free(w);
    }
}

static void *writer_main(void *arg)
{
    audit_buf_t wb = {0}; /* taken from A.buf, not yet fully written */
    size_t off = 0;
    uint64_t wb_last = 0;
    bool done = false;

    sbl_log_set_ctx("audit");
    while (!done) {
        pthread_mutex_lock(&A.mu);
        while (!A.stop && !A.rotate_req && A.buf.len == 0 && wb.len == 0 &&
               atomic_load(&A.health_errno) == 0) {
            A.writer_idle = true;
            pthread_cond_wait(&A.cv, &A.mu);
            A.writer_idle = false;
        }
        if (atomic_load(&A.health_errno) != 0 && !A.stop && !A.rotate_req) {
            /* Failing: retry ten times a second. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            A.writer_idle = true;
            pthread_cond_timedwait(&A.cv, &A.mu, &ts);
            A.writer_idle = false;
        }
        if (A.buf.len > 0) {
            if (wb.len == 0) {
                audit_buf_t t = wb;
                wb = A.buf;
                A.buf = t;
                off = 0;
            } else if (!buf_append(&wb, A.buf.data, A.buf.len, false)) {
                abort(); /* cannot keep the events in order without memory */
            }
            A.buf.len = 0;
            wb_last = A.next_seq;
        }
        bool rotate = A.rotate_req, stop = A.stop;
        int was = atomic_load(&A.health_errno);
        pthread_mutex_unlock(&A.mu);

        if (was != 0)
            drop_fd();
        int e = 0;
        if (wb.len > 0) {
            e = write_out(&wb, &off);
            if (e == 0) {
                wb.len = 0;
                off = 0;
                atomic_store_explicit(&A.written_seq, wb_last, memory_order_release);
            }
        } else if (was != 0 && A.dest == SBL_AUDIT_FILE) {
            /* Nothing pending: check that the file can be opened again. */
            audit_buf_t empty = {0};
            size_t o = 0;
            e = write_out(&empty, &o);
        }
        if (e != was) {
            bson_t attr = BSON_INITIALIZER;
            BSON_APPEND_UTF8(&attr, "path", A.path != NULL ? A.path : "");
            BSON_APPEND_UTF8(&attr, "error", e != 0 ? strerror(e) : "none");
            sbl_log(e != 0 ? SBL_LOG_ERROR : SBL_LOG_INFO, "AUDIT", e != 0 ? 7000001 : 7000002,
                    e != 0 ? "Audit log write failed; refusing audited operations"
                           : "Audit log writable again",
                    &attr);
            bson_destroy(&attr);
            atomic_store(&A.health_errno, e);
        }
        wake_waiters(atomic_load(&A.written_seq), wb_last, e);
        if (rotate) {
            char msg[256] = "";
            int rrc = do_rotate(msg, sizeof(msg));
            pthread_mutex_lock(&A.mu);
            A.rotate_rc = rrc;
            snprintf(A.rotate_msg, sizeof(A.rotate_msg), "%s", msg);
            A.rotate_req = false;
            A.rotate_gen++;
            pthread_cond_broadcast(&A.done_cv);
            pthread_mutex_unlock(&A.mu);
        }
        if (stop) {
            pthread_mutex_lock(&A.mu);
            done = A.buf.len == 0 && (wb.len == 0 || e != 0);
            pthread_mutex_unlock(&A.mu);
        }
    }
    free(wb.data);
    return NULL;
}

/* ---- configuration and life ------------------------------------------------------ */

int sbl_audit_set_filter(const bson_t *filter, sbl_err_t *err)
{
    sbl_matcher_t *m = NULL, *old;
    bson_t *doc = NULL, *old_doc;
    if (filter != NULL && !bson_empty(filter)) {
        if ((m = sbl_matcher_new(filter, err)) == NULL)
            return err->code != 0 ? err->code : SBL_E_BadValue;
        doc = bson_copy(filter);
    }
    pthread_rwlock_wrlock(&A.filter_lock);
    old = A.filter;
    old_doc = A.filter_doc;
    A.filter = m;
    A.filter_doc = doc;
    pthread_rwlock_unlock(&A.filter_lock);
    if (old != NULL)
        sbl_matcher_free(old);
    if (old_doc != NULL)
        bson_destroy(old_doc);
    return 0;
}

void sbl_audit_get_config(bson_t *out)
{
    static const char *const dests[] = {"", "file", "syslog", "console"};
    pthread_rwlock_rdlock(&A.filter_lock);
    if (A.filter_doc != NULL) {
        BSON_APPEND_DOCUMENT(out, "filter", A.filter_doc);
    } else {
        bson_t f;
        BSON_APPEND_DOCUMENT_BEGIN(out, "filter", &f);
        bson_append_document_end(out, &f);
    }
    pthread_rwlock_unlock(&A.filter_lock);
    BSON_APPEND_BOOL(out, "auditAuthorizationSuccess", sbl_audit_auth_success());
    BSON_APPEND_BOOL(out, "enabled", sbl_audit_enabled());
    if (sbl_audit_enabled()) {
        BSON_APPEND_UTF8(out, "destination", dests[A.dest]);
        BSON_APPEND_UTF8(out, "format", A.fmt == SBL_AUDIT_BSON ? "BSON" : "JSON");
        if (A.path != NULL)
            BSON_APPEND_UTF8(out, "path", A.path);
    }
}

int sbl_audit_open(const sbl_audit_config_t *cfg, sbl_err_t *err)
{
    atomic_store(&A.auth_success, cfg->auth_success);
    if (cfg->destination == SBL_AUDIT_OFF)
        return 0;
    if (cfg->destination == SBL_AUDIT_FILE && (cfg->path == NULL || cfg->path[0] == '\0'))
        return sbl_err_set(err, SBL_E_BadValue, "auditLog.path must be given when "
                           "auditLog.destination is file");
    SBL_RET(sbl_audit_set_filter(cfg->filter, err));
    A.dest = cfg->destination;
    A.fmt = cfg->destination == SBL_AUDIT_SYSLOG ? SBL_AUDIT_JSON : cfg->format;
    A.path = cfg->path != NULL ? strdup(cfg->path) : NULL;
    A.stop = false;
    A.next_seq = 0;
    atomic_store(&A.written_seq, 0);
    atomic_store(&A.health_errno, 0);
    if (A.dest == SBL_AUDIT_CONSOLE) {
        A.fd = STDOUT_FILENO;
    } else if (A.dest == SBL_AUDIT_FILE) {
        A.fd = open_file();
        if (A.fd < 0) {
            int e = errno;
            atomic_store(&A.health_errno, e);
            bson_t attr = BSON_INITIALIZER;
            BSON_APPEND_UTF8(&attr, "path", A.path);
            BSON_APPEND_UTF8(&attr, "error", strerror(e));
            sbl_log(SBL_LOG_ERROR, "AUDIT", 7000001,
                    "Cannot open the audit log; refusing audited operations until it can be",
                    &attr);
            bson_destroy(&attr);
        }
    }
    if (pthread_create(&A.thread, NULL, writer_main, NULL) != 0)
        return sbl_err_set(err, SBL_E_InternalError, "cannot start the audit writer thread");
    A.running = true;
    atomic_store(&A.on, true);
    return 0;
}

void sbl_audit_close(void)
{
    if (!A.running)
        return;
    pthread_mutex_lock(&A.mu);
    A.stop = true;
    pthread_cond_signal(&A.cv);
    pthread_mutex_unlock(&A.mu);
    pthread_join(A.thread, NULL);
    A.running = false;
    atomic_store(&A.on, false);
    wake_waiters(UINT64_MAX, 0, 0); /* none should be left; never leave a reply hanging */
    pthread_mutex_lock(&A.fd_mu);
    if (A.dest == SBL_AUDIT_FILE && A.fd >= 0) {
        fdatasync(A.fd);
        close(A.fd);
    }
    A.fd = -1;
    pthread_mutex_unlock(&A.fd_mu);
    sbl_audit_set_filter(NULL, NULL);
    free(A.buf.data);
    A.buf = (audit_buf_t){0};
    free(A.path);
    A.path = NULL;
}

int sbl_audit_rotate(sbl_err_t *err)
{
    if (!A.running || A.dest != SBL_AUDIT_FILE)
        return 0;
    pthread_mutex_lock(&A.mu);
    uint64_t gen = A.rotate_gen;
    A.rotate_req = true;
    pthread_cond_signal(&A.cv);
    while (A.rotate_gen == gen)
        pthread_cond_wait(&A.done_cv, &A.mu);
    int rc = A.rotate_rc;
    if (rc != 0)
        sbl_err_set(err, rc, "%s", A.rotate_msg);
    pthread_mutex_unlock(&A.mu);
    return rc;
}

int sbl_audit_sync(void)
{
    int rc = 0;
    if (!atomic_exchange(&A.dirty, false))
        return 0;
    pthread_mutex_lock(&A.fd_mu);
    if (A.dest == SBL_AUDIT_FILE && A.fd >= 0 && fdatasync(A.fd) != 0)
        rc = errno;
    pthread_mutex_unlock(&A.fd_mu);
    return rc;
}
