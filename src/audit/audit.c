/*
 * audit.c: the audit log: events formatted on the caller's thread, a network
 * loop's straight into its own lane, anyone else's into one shared buffer
 * (under a short lock, with a sequence number), and written with one
 * write(2) per group: by the loop that must acknowledge a change
 * (sbl_audit_flush, before its reply: the shared buffer's pending events,
 * then its lane), else by the writer thread a moment later.  The writer
 * thread also retries a failing file and rotates.  This file holds the
 * log's state, the making of an event (the filter's decision, the lanes,
 * the shared buffer) and the log's configuration and life; the event's
 * BSON and JSON forms are built in audit_event.c, and the writing is in
 * audit_write.c.
 *
 * What must stay true: the shared buffer's events reach the file in
 * sequence order and a connection's events in the order they were made
 * ("lanes" below), each exactly once (a failed or partial write keeps the
 * unwritten bytes and retries them first); written_seq only grows and
 * covers an event only after write(2) returned for all of it; bytes go to
 * the file only under wmu (one writer at a time, so groups stay in order);
 * rotation and reopening happen under wmu and fd_mu (the journal flusher's
 * fdatasync takes fd_mu only, so it never holds up a write).
 */
#include "audit/audit.h"
#include "audit/audit_int.h"
#include "common/log.h"
#include "query/query.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

audit_state_t audit_g = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
    .wmu = PTHREAD_MUTEX_INITIALIZER,
    .filter_lock = PTHREAD_RWLOCK_INITIALIZER,
    .fd_mu = PTHREAD_MUTEX_INITIALIZER,
    .fd = -1,
};

bool sbl_audit_enabled(void)
{
    return atomic_load_explicit(&audit_g.on, memory_order_relaxed);
}

bool sbl_audit_needs_bson(void)
{
    return atomic_load_explicit(&audit_g.needs_bson, memory_order_relaxed);
}

bool sbl_audit_auth_success(void)
{
    return atomic_load_explicit(&audit_g.auth_success, memory_order_relaxed);
}

void sbl_audit_set_auth_success(bool on)
{
    atomic_store(&audit_g.auth_success, on);
}

int audit_health_err(int e, sbl_err_t *err)
{
    return sbl_err_set(err, e == ENOSPC ? SBL_E_OutOfDiskSpace : SBL_E_InternalError,
                       "audit log write failed: %s (%s); audited operations are refused until "
                       "it can be written", strerror(e),
                       audit_g.path != NULL ? audit_g.path : "audit log");
}

int sbl_audit_health(sbl_err_t *err)
{
    int e = atomic_load(&audit_g.health_errno);
    return e == 0 ? 0 : audit_health_err(e, err);
}

static bool lane_written(uint64_t n);

/* Events recorded since start, for the monitoring page (relaxed: a count, not an order). */
static atomic_ullong events_recorded;

uint64_t sbl_audit_events_total(void)
{
    return atomic_load_explicit(&events_recorded, memory_order_relaxed);
}

bool sbl_audit_written(uint64_t seq)
{
    if (seq & LANE_BIT)
        return lane_written(seq & ~LANE_BIT);
    return atomic_load_explicit(&audit_g.written_seq, memory_order_acquire) >= seq;
}

/*
 * The filter's decisions for the last few events of this thread, by the
 * bytes of the event the filter saw.  Only for events built with the
 * filter's mask: without $expr, $where, $jsonSchema and the like (mask
 * EV_ALL) a filter is a function of those bytes alone, and the fields that
 * change with every event (ts, uuid, remote) are in them only when the
 * filter names them.  An authCheck of the same command on the same
 * namespace by the same user then costs a memcmp instead of the matcher.
 */
#define MEMO_SLOTS 4
#define MEMO_BYTES 240
static _Thread_local struct {
    uint64_t gen; /* audit_g.filter_gen when made; 0: empty (filter_gen starts at 1) */
    uint32_t len;
    bool keep;
    uint8_t bytes[MEMO_BYTES];
} tl_memo[MEMO_SLOTS];
static _Thread_local unsigned tl_memo_next;

/* Under filter_lock (read): whether the filter keeps ev; memo: ev was built
 * with the filter's mask. */
static bool filter_match_memo(const bson_t *ev, bool memo)
{
    const uint8_t *data = bson_get_data(ev);
    if (!memo || ev->len > MEMO_BYTES)
        return sbl_matcher_match(audit_g.filter, ev, NULL);
    for (int i = 0; i < MEMO_SLOTS; i++)
        if (tl_memo[i].gen == atomic_load_explicit(&audit_g.filter_gen, memory_order_relaxed) &&
            tl_memo[i].len == ev->len &&
            memcmp(tl_memo[i].bytes, data, ev->len) == 0)
            return tl_memo[i].keep;
    bool keep = sbl_matcher_match(audit_g.filter, ev, NULL);
    unsigned i = tl_memo_next++ % MEMO_SLOTS;
    tl_memo[i].gen = atomic_load_explicit(&audit_g.filter_gen, memory_order_relaxed);
    tl_memo[i].len = ev->len;
    tl_memo[i].keep = keep;
    memcpy(tl_memo[i].bytes, data, ev->len);
    return keep;
}

/* filter_match_memo, where a filter's $expr that fails only drops the event:
 * the audited command does not see its error (query.h). */
static bool filter_match(const bson_t *ev, bool memo)
{
    bool had = sbl_matcher_error(NULL) != 0;
    bool keep = filter_match_memo(ev, memo);
    if (!had)
        sbl_matcher_take_error(NULL);
    return keep;
}

/*
 * The filter's decision for an event whose param is only {command, ns}
 * (authCheck) when the filter names no field but atype and param: then it
 * is a function of atype, command and ns.  The last such decision of this
 * thread is kept with the filter's generation and looked up without the
 * filter's lock (whose reader count the loop threads would pass between
 * their cores on every event), without the BSON event and without the
 * matcher.  atype and command are compared as pointers (string literals
 * and the command table's names), ns as a string.
 */
static _Thread_local struct {
    uint64_t gen; /* 0: empty */
    const char *atype, *command;
    bool keep;
    char ns[128];
} tl_quick;

/* An event the quick decision can stand for: param {command, ns} alone, in
 * a JSON log (the BSON format needs the whole event built anyway). */
static bool quick_kind(const ev_param_t *pm)
{
    return pm->command != NULL && (pm->doc == NULL || bson_empty(pm->doc)) &&
           audit_g.fmt != SBL_AUDIT_BSON;
}

/* Whether this thread's last decision applies to the event (into *keep). */
static bool quick_hit(const char *atype, const ev_param_t *pm, bool *keep)
{
    if (tl_quick.gen == 0 || tl_quick.atype != atype || !quick_kind(pm) ||
        tl_quick.command != pm->command ||
        tl_quick.gen != atomic_load_explicit(&audit_g.filter_gen, memory_order_acquire) ||
        strcmp(tl_quick.ns, pm->ns) != 0)
        return false;
    *keep = tl_quick.keep;
    return true;
}

/* Under filter_lock (read), after the matcher decided keep for the event. */
static void quick_set(const char *atype, const ev_param_t *pm, bool keep)
{
    tl_quick.gen = 0;
    if (audit_g.filter == NULL || (audit_g.filter_mask & ~(unsigned)(EV_ATYPE | EV_PARAM)) != 0 ||
        !quick_kind(pm) || strlen(pm->ns) >= sizeof(tl_quick.ns))
        return;
    tl_quick.atype = atype;
    tl_quick.command = pm->command;
    tl_quick.keep = keep;
    strcpy(tl_quick.ns, pm->ns);
    tl_quick.gen = atomic_load_explicit(&audit_g.filter_gen, memory_order_relaxed);
}

/* Under mu: the next shared sequence number (last_seq mirrors it for
 * readers without mu). */
static uint64_t seq_take_locked(void)
{
    atomic_store_explicit(&audit_g.last_seq, ++audit_g.next_seq, memory_order_relaxed);
    return audit_g.next_seq;
}

/* Whether every shared event handed out so far is written. */
bool audit_shared_all_written(void)
{
    return atomic_load_explicit(&audit_g.last_seq, memory_order_relaxed) ==
           atomic_load_explicit(&audit_g.written_seq, memory_order_acquire);
}

/* ---- lanes: a network loop's own events ---------------------------------------
 *
 * A network loop writes its own events before its replies (sbl_audit_flush at
 * the end of its iteration), so it need not share them: its events go into
 * its lane, a buffer only it appends to, without the shared buffer's mutex,
 * and its flush writes the lane from its own core.  On this kind of VM a
 * cache line moves between the two vCPUs in ~220 ns, and the shared buffer
 * moved several per event (the mutex twice, its counters, the bytes the
 * other loop then wrote out).  A lane event's number has LANE_BIT set and
 * counts that thread's events; only its own thread asks about it.
 *
 * Order: a connection's events are all made on its loop (a lane) except
 * those of a command run on a worker thread, and before one is handed to a
 * worker the loop moves its lane into the shared buffer (sbl_audit_seal), as
 * it does before it makes an event there itself.  A lane flush writes the
 * shared buffer's events first, then the lane.  So whatever a connection did
 * before an event is in the file before it.  What a lane cannot write (the
 * file fails) moves to the shared buffer, where the writer thread retries
 * it; sbl_audit_close writes what lanes still hold. */

static _Thread_local lane_t *tl_lane;
static _Thread_local uint64_t tl_lane_gen;

/* This thread's lane if it has one from the current open, else NULL. */
lane_t *audit_lane_cur(void)
{
    return tl_lane != NULL && tl_lane_gen == audit_g.open_gen ? tl_lane : NULL;
}

/* This thread's lane, made on first use; NULL when there is no room or memory. */
static lane_t *lane_get(void)
{
    lane_t *l = audit_lane_cur();
    if (l != NULL)
        return l;
    tl_lane = NULL;
    if ((l = calloc(1, sizeof(*l))) == NULL)
        return NULL;
    pthread_mutex_lock(&audit_g.mu);
    if (audit_g.nlanes < MAX_LANES) {
        audit_g.lanes[audit_g.nlanes++] = l;
    } else {
        free(l);
        l = NULL;
    }
    pthread_mutex_unlock(&audit_g.mu);
    tl_lane = l;
    tl_lane_gen = audit_g.open_gen;
    return l;
}

/* Under mu: move what the lane holds to the end of the shared buffer, as
 * one more shared event. */
void audit_lane_move_locked(lane_t *l)
{
    if (l->buf.len == 0)
        return;
    audit_g.buf.oom = false;
    audit_buf_put(&audit_g.buf, l->buf.data, l->buf.len);
    if (audit_g.buf.oom)
        abort(); /* cannot keep the events in order without memory */
    l->buf.len = 0;
    l->moved_upto = l->seq;
    l->moved_gseq = seq_take_locked();
}

/* Under mu: have the writer thread take the shared buffer soon. */
static void kick_locked(void)
{
    if (!audit_g.kick) {
        audit_g.kick = true;
        if (audit_g.writer_idle)
            pthread_cond_signal(&audit_g.cv);
    }
}

void sbl_audit_seal(void)
{
    lane_t *l = audit_lane_cur();
    if (l == NULL || l->buf.len == 0)
        return;
    pthread_mutex_lock(&audit_g.mu);
    audit_lane_move_locked(l);
    kick_locked();
    pthread_mutex_unlock(&audit_g.mu);
}

/* Whether the thread's lane event n is written. */
static bool lane_written(uint64_t n)
{
    lane_t *l = audit_lane_cur();
    if (l == NULL || n <= l->written)
        return true; /* (no lane: closed since, and close wrote it) */
    return n <= l->moved_upto &&
           atomic_load_explicit(&audit_g.written_seq, memory_order_acquire) >= l->moved_gseq;
}

/* An event; wake: wake the writer thread for it when it is idle (callers that
 * write their events themselves soon do not need it). */
static int event(const char *atype, const sbl_audit_client_t *c, const ev_param_t *pm,
                 int result, bool force, bool wake, uint64_t *seqp, sbl_err_t *err)
{
    static const sbl_audit_client_t none;
    ev_buf_t eb;
    bson_t ev;
    bool have_ev = false;
    struct timespec now;
    int rc = 0;
    /* A JSON event is formatted here, outside audit_g.mu, and copied in under
     * it: the loop threads no longer queue on the lock (and sleep in
     * futex) while another one formats. */
    char line_stack[4096];
    audit_buf_t line = {.data = line_stack, .cap = sizeof(line_stack), .borrowed = true};

    *seqp = 0;
    if (!sbl_audit_enabled())
        return 0;
    if (c == NULL)
        c = &none;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t ts = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;

    /* The BSON event only when the filter or the format needs it (without
     * either, not even the filter's lock: the loops would share its line),
     * and for a filter alone only the fields it names. */
    eb.p = eb.stack;
    eb.len = 0;
    eb.cap = sizeof(eb.stack);
    eb.heap = eb.oom = false;
    bool keep = true;
    bool needs = sbl_audit_needs_bson();
    bool decided = needs && quick_hit(atype, pm, &keep);
    bool locked = needs && !decided;
    if (locked)
        pthread_rwlock_rdlock(&audit_g.filter_lock);
    if (locked && (audit_g.filter != NULL || audit_g.fmt == SBL_AUDIT_BSON)) {
        audit_build_event(&eb, audit_g.fmt == SBL_AUDIT_BSON ? EV_ALL : audit_g.filter_mask, atype,
                          ts, c, pm, result);
        have_ev = !eb.oom && bson_init_static(&ev, eb.p, eb.len);
        if (!have_ev) {
            pthread_rwlock_unlock(&audit_g.filter_lock);
            rc = sbl_err_set(err, SBL_E_ExceededMemoryLimit, "audit log: out of memory");
            goto done;
        }
    }
    if (!decided) {
        keep = !have_ev || audit_g.filter == NULL ||
               filter_match(&ev, audit_g.fmt != SBL_AUDIT_BSON && audit_g.filter_mask != EV_ALL);
        if (locked)
            quick_set(atype, pm, keep);
    }
    if (locked)
        pthread_rwlock_unlock(&audit_g.filter_lock);
    if (!keep)
        goto done;
    lane_t *l = !wake && audit_g.dest == SBL_AUDIT_FILE ? lane_get() : NULL;
    if (l != NULL) { /* formatted straight into the lane: no lock, no copy */
        int e = atomic_load_explicit(&audit_g.health_errno, memory_order_relaxed);
        if (e != 0 && !force) {
            rc = audit_health_err(e, err);
            goto done;
        }
        size_t mark = l->buf.len;
        l->buf.oom = false;
        if (audit_g.fmt == SBL_AUDIT_BSON)
            audit_buf_put(&l->buf, bson_get_data(&ev), ev.len);
        else
            audit_json_event(&l->buf, atype, ts, c, pm, result);
        if (l->buf.oom) {
            l->buf.len = mark;
            rc = sbl_err_set(err, SBL_E_ExceededMemoryLimit, "audit log: out of memory");
            goto done;
        }
        *seqp = LANE_BIT | ++l->seq;
        atomic_fetch_add_explicit(&events_recorded, 1, memory_order_relaxed);
        goto done;
    }
    if (audit_g.fmt != SBL_AUDIT_BSON) {
        audit_json_event(&line, atype, ts, c, pm, result);
        if (line.oom) {
            rc = sbl_err_set(err, SBL_E_ExceededMemoryLimit, "audit log: out of memory");
            goto done;
        }
    }
    pthread_mutex_lock(&audit_g.mu);
    int e = atomic_load(&audit_g.health_errno);
    if (e != 0 && !force) {
        pthread_mutex_unlock(&audit_g.mu);
        rc = audit_health_err(e, err);
        goto done;
    }
    if ((l = audit_lane_cur()) != NULL)
        audit_lane_move_locked(l); /* this thread's earlier events stay before this one */
    size_t mark = audit_g.buf.len;
    audit_g.buf.oom = false;
    if (audit_g.fmt == SBL_AUDIT_BSON)
        audit_buf_put(&audit_g.buf, bson_get_data(&ev), ev.len);
    else
        audit_buf_put(&audit_g.buf, line.data, line.len);
    if (audit_g.buf.oom) {
        audit_g.buf.len = mark;
        pthread_mutex_unlock(&audit_g.mu);
        rc = sbl_err_set(err, SBL_E_ExceededMemoryLimit, "audit log: out of memory");
        goto done;
    }
    *seqp = seq_take_locked();
    atomic_fetch_add_explicit(&events_recorded, 1, memory_order_relaxed);
    /* Written by the writer in WRITER_DELAY_MS unless a flush comes first.
     * The kick is left even when the writer is busy: it may already have
     * taken the buffer without this event, and looks at the kick again
     * before it waits. */
    if (wake)
        kick_locked();
    pthread_mutex_unlock(&audit_g.mu);
done:
    if (eb.heap)
        free(eb.p);
    if (!line.borrowed)
        free(line.data);
    return rc;
}

int sbl_audit_event_args(const char *atype, const sbl_audit_client_t *c, const bson_t *param,
                         const bson_t *args, int result, bool force, uint64_t *seqp,
                         sbl_err_t *err)
{
    ev_param_t pm = {.doc = param, .args = args};
    return event(atype, c, &pm, result, force, true, seqp, err);
}

int sbl_audit_event_self(const char *atype, const sbl_audit_client_t *c, const bson_t *param,
                         const bson_t *args, int result, bool force, uint64_t *seqp,
                         sbl_err_t *err)
{
    ev_param_t pm = {.doc = param, .args = args};
    return event(atype, c, &pm, result, force, false, seqp, err);
}

int sbl_audit_event(const char *atype, const sbl_audit_client_t *c, const bson_t *param,
                    int result, bool force, uint64_t *seqp, sbl_err_t *err)
{
    ev_param_t pm = {.doc = param};
    return event(atype, c, &pm, result, force, true, seqp, err);
}

int sbl_audit_command(const char *atype, const sbl_audit_client_t *c, const char *command,
                      const char *ns, const bson_t *args, int result, bool force, bool self,
                      uint64_t *seqp, sbl_err_t *err)
{
    ev_param_t pm = {.command = command, .ns = ns, .args = args, .cmd_args = true};
    return event(atype, c, &pm, result, force, !self, seqp, err);
}

/* ---- configuration and life ------------------------------------------------------ */

/* The event fields a filter can look at (EV_*): the first component of each
 * path, through $and/$or/$nor; an operator that sees the whole document
 * ($expr, $where, $jsonSchema ...) or an empty key needs all of them.
 * param.args only for a key "param" (the whole document) or "param.args...". */
static unsigned filter_fields(const bson_t *doc)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {{"atype", EV_ATYPE}, {"ts", EV_TS},         {"uuid", EV_UUID},
                 {"local", EV_LOCAL}, {"remote", EV_REMOTE}, {"users", EV_USERS},
                 {"roles", EV_ROLES}, {"param", EV_PARAM},   {"result", EV_RESULT}};
    bson_iter_t it, sub;
    unsigned mask = 0;
    if (!bson_iter_init(&it, doc))
        return EV_ALL;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (k[0] == '$') {
            if (strcmp(k, "$comment") == 0)
                continue;
            if ((strcmp(k, "$and") != 0 && strcmp(k, "$or") != 0 && strcmp(k, "$nor") != 0) ||
                !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &sub))
                return EV_ALL;
            while (bson_iter_next(&sub)) {
                uint32_t len;
                const uint8_t *data;
                bson_t clause;
                if (!BSON_ITER_HOLDS_DOCUMENT(&sub))
                    return EV_ALL;
                bson_iter_document(&sub, &len, &data);
                if (!bson_init_static(&clause, data, len))
                    return EV_ALL;
                mask |= filter_fields(&clause);
            }
            continue;
        }
        size_t n = strcspn(k, ".");
        if (n == 0)
            return EV_ALL;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (strlen(names[i].name) == n && memcmp(names[i].name, k, n) == 0)
                mask |= names[i].bit;
        if (n == 5 && memcmp(k, "param", 5) == 0 &&
            (k[5] == '\0' || (strncmp(k + 6, "args", 4) == 0 && (k[10] == '\0' || k[10] == '.'))))
            mask |= EV_ARGS;
    }
    return mask;
}

int sbl_audit_set_filter(const bson_t *filter, sbl_err_t *err)
{
    sbl_matcher_t *m = NULL, *old;
    bson_t *doc = NULL, *old_doc;
    unsigned mask = 0;
    if (filter != NULL && !bson_empty(filter)) {
        if ((m = sbl_matcher_new(filter, err)) == NULL)
            return err->code != 0 ? err->code : SBL_E_BadValue;
        doc = bson_copy(filter);
        mask = filter_fields(filter);
    }
    pthread_rwlock_wrlock(&audit_g.filter_lock);
    old = audit_g.filter;
    old_doc = audit_g.filter_doc;
    audit_g.filter = m;
    audit_g.filter_doc = doc;
    audit_g.filter_mask = mask;
    atomic_fetch_add_explicit(&audit_g.filter_gen, 1, memory_order_release);
    atomic_store(&audit_g.needs_bson, m != NULL || audit_g.fmt == SBL_AUDIT_BSON);
    pthread_rwlock_unlock(&audit_g.filter_lock);
    if (old != NULL)
        sbl_matcher_free(old);
    if (old_doc != NULL)
        bson_destroy(old_doc);
    return 0;
}

void sbl_audit_get_config(bson_t *out)
{
    static const char *const dests[] = {"", "file", "syslog", "console"};
    pthread_rwlock_rdlock(&audit_g.filter_lock);
    if (audit_g.filter_doc != NULL) {
        BSON_APPEND_DOCUMENT(out, "filter", audit_g.filter_doc);
    } else {
        bson_t f;
        BSON_APPEND_DOCUMENT_BEGIN(out, "filter", &f);
        bson_append_document_end(out, &f);
    }
    pthread_rwlock_unlock(&audit_g.filter_lock);
    BSON_APPEND_BOOL(out, "auditAuthorizationSuccess", sbl_audit_auth_success());
    BSON_APPEND_BOOL(out, "enabled", sbl_audit_enabled());
    if (sbl_audit_enabled()) {
        BSON_APPEND_UTF8(out, "destination", dests[audit_g.dest]);
        BSON_APPEND_UTF8(out, "format", audit_g.fmt == SBL_AUDIT_BSON ? "BSON" : "JSON");
        if (audit_g.path != NULL)
            BSON_APPEND_UTF8(out, "path", audit_g.path);
    }
}

int sbl_audit_open(const sbl_audit_config_t *cfg, sbl_err_t *err)
{
    atomic_store(&audit_g.auth_success, cfg->auth_success);
    if (cfg->destination == SBL_AUDIT_OFF)
        return 0;
    if (cfg->destination == SBL_AUDIT_FILE && (cfg->path == NULL || cfg->path[0] == '\0'))
        return sbl_err_set(err, SBL_E_BadValue, "auditLog.path must be given when "
                           "auditLog.destination is file");
    SBL_RET(sbl_audit_set_filter(cfg->filter, err));
    audit_g.dest = cfg->destination;
    audit_g.fmt = cfg->destination == SBL_AUDIT_SYSLOG ? SBL_AUDIT_JSON : cfg->format;
    atomic_store(&audit_g.needs_bson, audit_g.filter != NULL || audit_g.fmt == SBL_AUDIT_BSON);
    audit_g.path = cfg->path != NULL ? strdup(cfg->path) : NULL;
    audit_g.stop = false;
    audit_g.open_gen++;
    audit_g.next_seq = 0;
    atomic_store(&audit_g.last_seq, 0);
    atomic_store(&audit_g.written_seq, 0);
    atomic_store(&audit_g.health_errno, 0);
    audit_g.dropped_to = 0;
    if (audit_g.dest == SBL_AUDIT_CONSOLE) {
        audit_g.fd = STDOUT_FILENO;
    } else if (audit_g.dest == SBL_AUDIT_FILE) {
        audit_g.fd = audit_open_file();
        if (audit_g.fd < 0) {
            int e = errno;
            atomic_store(&audit_g.health_errno, e);
            bson_t attr = BSON_INITIALIZER;
            BSON_APPEND_UTF8(&attr, "path", audit_g.path);
            BSON_APPEND_UTF8(&attr, "error", strerror(e));
            sbl_log(SBL_LOG_ERROR, "AUDIT", 7000001,
                    "Cannot open the audit log; refusing audited operations until it can be",
                    &attr);
            bson_destroy(&attr);
        }
    }
    if (pthread_create(&audit_g.thread, NULL, audit_writer_main, NULL) != 0)
        return sbl_err_set(err, SBL_E_InternalError, "cannot start the audit writer thread");
    audit_g.running = true;
    atomic_store(&audit_g.on, true);
    return 0;
}

void sbl_audit_close(void)
{
    if (!audit_g.running)
        return;
    /* What the lanes still hold (the loops have stopped), before the
     * writer's last round takes the shared buffer. */
    pthread_mutex_lock(&audit_g.wmu);
    for (int i = 0; i < audit_g.nlanes; i++)
        if (audit_g.lanes[i]->buf.len > 0)
            audit_lane_flush_locked(audit_g.lanes[i]);
    pthread_mutex_unlock(&audit_g.wmu);
    pthread_mutex_lock(&audit_g.mu);
    audit_g.stop = true;
    pthread_cond_signal(&audit_g.cv);
    pthread_mutex_unlock(&audit_g.mu);
    pthread_join(audit_g.thread, NULL);
    pthread_mutex_lock(&audit_g.wmu);
    audit_g.running = false;
    atomic_store(&audit_g.on, false);
    pthread_mutex_lock(&audit_g.fd_mu);
    if (audit_g.dest == SBL_AUDIT_FILE && audit_g.fd >= 0) {
        fdatasync(audit_g.fd);
        close(audit_g.fd);
    }
    audit_g.fd = -1;
    pthread_mutex_unlock(&audit_g.fd_mu);
    pthread_mutex_unlock(&audit_g.wmu);
    sbl_audit_set_filter(NULL, NULL);
    free(audit_g.buf.data);
    audit_g.buf = (audit_buf_t){0};
    free(audit_g.wb.data);
    audit_g.wb = (audit_buf_t){0};
    audit_g.wb_off = 0;
    for (int i = 0; i < audit_g.nlanes; i++) {
        free(audit_g.lanes[i]->buf.data);
        free(audit_g.lanes[i]);
    }
    audit_g.nlanes = 0;
    audit_g.open_gen++;
    free(audit_g.path);
    audit_g.path = NULL;
}
