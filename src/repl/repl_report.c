/*
 * repl_report.c: a secondary's position reports (mongod's Reporter).  The
 * applier says when its applied optime moved (sbl_rs_reporter_applied, on
 * the thread that committed); that asks the journal flusher for a flush
 * (storage's group commit: one flush serves every request queued before it
 * starts), whose end makes the position durable and wakes the reporter
 * thread.  An applier that has caught up (sbl_rs_reporter_caught_up: nothing
 * fetched waits) flushes on its own thread instead: it would only wait for
 * the source, and on a busy host the hand-off to the flusher thread (waking
 * it, its turn on a core, waking us back) was a large part of a
 * w:"majority" round trip.  The reporter sends replSetUpdatePosition with
 * the durable position as soon as it moves, one request in flight, and
 * every second regardless (a report is a sign of life to the primary), on a
 * plain connection (sbl_rs_dial) dialed again after a failure.  So the flush of
 * the next batch runs while the last report is on the wire, where the
 * reporter used to flush and then send, in turn, each time.
 *
 * What must stay true: a position is reported only once the journal holds
 * it (w:"majority" counts these positions, mongod's
 * writeConcernMajorityJournalDefault: an entry a majority applied but had
 * not journaled was lost when that majority was killed); a failed flush
 * makes nothing durable; a flush asked for during an earlier sync (before
 * a rollback moved our optime back) never moves a later sync's position.
 */
#include "repl/repl_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "net/net.h"
#include "storage/storage.h"

#define rs sbl_rs
#define REPORT_EVERY_MS 1000

struct sbl_rs_reporter {
    pthread_t thread;
    pthread_cond_t cond; /* with rs.lock: the durable position moved, or stop */
    bool stop;
    char host[256];
};

/* Under rs.lock: the running reporter, the sync it serves (gen), the
 * position its flushes made durable, and the newest ts a flush was asked for. */
static sbl_rs_reporter_t *current;
static uint64_t gen;
static sbl_optime_t durable;
static int64_t durable_wall;
static uint64_t asked;

typedef struct flush_req {
    uint64_t gen;
    sbl_optime_t pos;
    int64_t wall;
} flush_req_t;

/* The journal flusher's callback: f->pos is on disk (rc 0). */
static void flushed(void *arg, int rc)
{
    flush_req_t *f = arg;
    pthread_mutex_lock(&rs.lock);
    if (f->gen == gen && rc == 0 && sbl_optime_cmp(f->pos, durable) > 0) {
        durable = f->pos;
        durable_wall = f->wall;
        if (current != NULL)
            pthread_cond_signal(&current->cond);
    } else if (f->gen == gen && rc != 0 && asked > durable.ts) {
        asked = durable.ts; /* the next move asks again */
    }
    pthread_mutex_unlock(&rs.lock);
    free(f);
}

/* now: flush on this thread (sbl_rs_reporter_caught_up) rather than ask
 * the journal flusher. */
static void applied(void *r, bool now)
{
    flush_req_t *f = NULL;
    if (r == NULL)
        return;
    pthread_mutex_lock(&rs.lock);
    sbl_optime_t ap = sbl_rs_my_applied();
    if (ap.ts > asked && (f = malloc(sizeof(*f))) != NULL) {
        asked = ap.ts;
        *f = (flush_req_t){.gen = gen, .pos = ap, .wall = sbl_oplog_last_wall_ms()};
    }
    pthread_mutex_unlock(&rs.lock);
    /* outside rs.lock: a closing journal calls back at once */
    if (f == NULL)
        return;
    if (!now) {
        sbl_storage_on_durable(flushed, f);
        return;
    }
    sbl_err_t err;
    sbl_err_clear(&err);
    flushed(f, sbl_storage_flush(&err)); /* this thread's commits, and all before */
}

void sbl_rs_reporter_applied(void *r)
{
    applied(r, false);
}

void sbl_rs_reporter_caught_up(void *r)
{
    applied(r, true);
}

/* Send replSetUpdatePosition with pos (journaled) to host on *fdp (dialed
 * when -1, closed and -1 again after an I/O error: the next report dials
 * anew); learn the commit point from the reply. */
static void send_position(int *fdp, const char *host, sbl_optime_t pos, int64_t wall)
{
    bson_t cmd = BSON_INITIALIZER, arr, d, reply;
    pthread_mutex_lock(&rs.lock);
    BSON_APPEND_INT32(&cmd, "replSetUpdatePosition", 1);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "optimes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &d);
    sbl_repl_append_optime(&d, "durableOpTime", pos.ts, pos.t);
    BSON_APPEND_DATE_TIME(&d, "durableWallTime", wall);
    sbl_repl_append_optime(&d, "appliedOpTime", pos.ts, pos.t);
    BSON_APPEND_DATE_TIME(&d, "appliedWallTime", wall);
    BSON_APPEND_INT32(&d, "memberId", rs.self >= 0 ? rs.cfg.m[rs.self].id : -1);
    BSON_APPEND_INT64(&d, "cfgver", rs.cfg.version);
    bson_append_document_end(&arr, &d);
    /* Chaining: the positions of the members that tail us go up the chain
     * too (mongod's secondaries forward them), so the primary counts a
     * member that syncs from a secondary (replSetSyncFrom) at once. */
    int n = 1;
    for (int i = 0; rs.self >= 0 && i < rs.cfg.n; i++) {
        const sbl_rs_peer_t *p = &rs.peer[i];
        if (i == rs.self || !p->up || strcmp(p->sync_source, rs.cfg.m[rs.self].host) != 0)
            continue;
        char key[16];
        snprintf(key, sizeof(key), "%d", n++);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, key, &d);
        sbl_repl_append_optime(&d, "durableOpTime", p->durable.ts, p->durable.t);
        BSON_APPEND_DATE_TIME(&d, "durableWallTime", p->durable_wall);
        sbl_repl_append_optime(&d, "appliedOpTime", p->applied.ts, p->applied.t);
        BSON_APPEND_DATE_TIME(&d, "appliedWallTime", p->applied_wall);
        BSON_APPEND_INT32(&d, "memberId", rs.cfg.m[i].id);
        BSON_APPEND_INT64(&d, "cfgver", rs.cfg.version);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(&cmd, &arr);
    pthread_mutex_unlock(&rs.lock);
    if (*fdp < 0)
        *fdp = sbl_rs_dial(host);
    if (*fdp >= 0 && !sbl_client_run(*fdp, "admin", &cmd, NULL, &reply)) {
        sbl_client_close(*fdp);
        *fdp = -1;
    } else if (*fdp < 0) {
        bson_init(&reply);
    }
    sbl_rs_count_update_position();
    pthread_mutex_lock(&rs.lock);
    sbl_rs_learn_commit_locked(&reply);
    pthread_mutex_unlock(&rs.lock);
    bson_destroy(&reply);
    bson_destroy(&cmd);
}

sbl_optime_t sbl_rs_my_durable_locked(int64_t *wallp)
{
    *wallp = durable_wall;
    return durable;
}

void sbl_rs_report_position(const char *host)
{
    int fd = -1;
    sbl_err_t err;
    pthread_mutex_lock(&rs.lock);
    sbl_optime_t ap = sbl_rs_my_applied();
    int64_t wall = sbl_oplog_last_wall_ms();
    pthread_mutex_unlock(&rs.lock);
    sbl_err_clear(&err);
    if (sbl_storage_flush(&err) == 0) /* a failed flush reports nothing */
        send_position(&fd, host, ap, wall);
    if (fd >= 0)
        sbl_client_close(fd);
}

static void *reporter_main(void *arg)
{
    sbl_thread_name("SyncSourceFeedback");
    sbl_rs_reporter_t *r = arg;
    int fd = sbl_rs_dial(r->host); /* again at the next report when it failed */
    uint64_t sent = 0;
    pthread_mutex_lock(&rs.lock);
    while (!r->stop) {
        bool timed_out = false;
        if (durable.ts == sent) {
            struct timespec t = sbl_deadline_in_ms(REPORT_EVERY_MS);
            timed_out = pthread_cond_timedwait(&r->cond, &rs.lock, &t) == ETIMEDOUT;
            if (r->stop)
                break;
        }
        sbl_optime_t pos = durable;
        int64_t wall = durable_wall;
        pthread_mutex_unlock(&rs.lock);
        if (timed_out) /* an applied optime nobody announced (none should be) */
            sbl_rs_reporter_applied(r);
        if (pos.ts != 0 && (pos.ts != sent || timed_out))
            send_position(&fd, r->host, pos, wall);
        sent = pos.ts;
        pthread_mutex_lock(&rs.lock);
    }
    pthread_mutex_unlock(&rs.lock);
    if (fd >= 0)
        sbl_client_close(fd);
    return NULL;
}

sbl_rs_reporter_t *sbl_rs_reporter_start(const char *host)
{
    sbl_rs_reporter_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    snprintf(r->host, sizeof(r->host), "%s", host);
    pthread_cond_init(&r->cond, NULL);
    pthread_mutex_lock(&rs.lock);
    gen++; /* a flush asked for by the last sync moves nothing now */
    durable = (sbl_optime_t){0};
    durable_wall = 0;
    asked = 0;
    current = r;
    pthread_mutex_unlock(&rs.lock);
    if (pthread_create(&r->thread, NULL, reporter_main, r) != 0) {
        pthread_mutex_lock(&rs.lock);
        current = NULL;
        pthread_mutex_unlock(&rs.lock);
        pthread_cond_destroy(&r->cond);
        free(r);
        return NULL;
    }
    sbl_rs_reporter_applied(r); /* where we start: reported once journaled */
    return r;
}

void sbl_rs_reporter_stop(sbl_rs_reporter_t *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&rs.lock);
    r->stop = true;
    current = NULL;
    gen++;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&rs.lock);
    pthread_join(r->thread, NULL);
    pthread_cond_destroy(&r->cond);
    free(r);
}
