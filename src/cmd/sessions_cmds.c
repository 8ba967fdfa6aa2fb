/*
 * sessions_cmds.c: logical sessions at the command level.  The dispatcher
 * calls sbl_cmd_session_begin for every command: it gives the operation its
 * user's uid and, when the command carries an lsid, records the session's
 * use in the catalog (src/sessions) and tags the operation with it, so the
 * cursors it opens die with the session.  Here too: startSession,
 * refreshSessions, endSessions, killSessions, killAllSessions,
 * killAllSessionsByPattern, refreshLogicalSessionCacheNow (a test command),
 * serverStatus' logicalSessionRecordCache, and the job its own thread runs
 * (dispatch.c; not the cursor reaper's, which must not wait behind it):
 * expire sessions unused for localLogicalSessionTimeoutMinutes (their
 * cursors killed) and, every logicalSessionRefreshMillis, write the
 * sessions used since the last run to config.system.sessions (TTL index
 * lsidTTLIndex on lastUse) and remove the ended ones, as mongod's logical
 * session cache does.  The records are written with internal commands, so
 * they take the ordinary write path.
 *
 * What must stay true: touching a session costs one striped lock and no
 * hashing (the uid is cached on the client); a session's record is written
 * at most once per refresh.
 */
#include "cmd/cmd_int.h"
#include "cmd/failpoint.h"
#include "common/log.h"
#include "exec/exec.h"
#include "repl/repl.h"
#include "server/server.h"
#include "sessions/sessions.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define SESSIONS_NS_COLL "system.sessions"
#define BATCH 1000 /* statements per internal update/delete */

static atomic_llong timeout_ms = (long long)SBL_LSESS_TIMEOUT_MINUTES * 60 * 1000;
static atomic_llong refresh_ms = 5 * 60 * 1000;

/* job_mu: one refresh at a time; it is held while the job writes (which can
 * wait, e.g. the TTL index build on transactions older than it).  The last
 * job's figures are copied under stat_mu, which serverStatus takes: a loop
 * thread answering it never waits on the job. */
static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t stat_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t last_persist_ms; /* sessions used at or after it are written next time */
static int64_t next_refresh_ms;
typedef struct {
    int64_t jobs, duration_ms, at_ms, refreshed, ended, cursors_closed;
} job_stats_t;
static job_stats_t job;       /* under job_mu */
static job_stats_t job_shown; /* under stat_mu: job as of the last refresh */

/* ---- the uid and the dispatcher's call -------------------------------------- */

/* The uid of the client's user, computed when the user changes. */
static void client_uid(sbl_client_t *c, uint8_t uid[32])
{
    char name[sizeof(c->uid_for)] = "";
    if (c->auth_user != NULL)
        snprintf(name, sizeof(name), "%s@%s", c->auth_user, c->auth_db ? c->auth_db : "");
    if (!c->uid_set || strcmp(name, c->uid_for) != 0) {
        sbl_lsid_uid(c->auth_user, c->auth_db, c->uid);
        memcpy(c->uid_for, name, sizeof(name));
        c->uid_set = true;
    }
    memcpy(uid, c->uid, 32);
}

/* A cluster member (a router or another shard, authenticated as
 * __system@local with the keyFile) may name another user's session: a
 * router forwards its clients' lsids with their uid, as mongos does.
 * Without authorization every uid is the same (no user). */
static bool cluster_member(const sbl_client_t *c)
{
    return c->auth_user != NULL && strcmp(c->auth_user, "__system") == 0 &&
           c->auth_db != NULL && strcmp(c->auth_db, "local") == 0;
}

int sbl_cmd_session_begin(sbl_opctx_t *ctx, const bson_iter_t *lsid, sbl_err_t *err)
{
    sbl_lsid_t l;
    client_uid(ctx->client, ctx->user_uid);
    if (lsid == NULL)
        return 0;
    bool member = cluster_member(ctx->client);
    SBL_RET(sbl_lsid_parse(lsid, "OperationSessionInfo.lsid", ctx->user_uid, member, &l, err));
    if (member) /* the session is the forwarded user's */
        memcpy(ctx->user_uid, l.uid, sizeof(l.uid));
    sbl_lsess_touch(&l, ctx->client->uid_for, sbl_now_ms());
    ctx->has_lsid = true;
    memcpy(ctx->lsid_id, l.id, sizeof(l.id));
    return 0;
}

/* ---- the commands --------------------------------------------------------------- */

int sbl_cmd_start_session(sbl_opctx_t *ctx, sbl_err_t *err)
{
    sbl_lsid_t l;
    bson_t id;
    if (getrandom(l.id, sizeof(l.id), 0) != (ssize_t)sizeof(l.id))
        return sbl_err_set(err, SBL_E_InternalError, "no random bytes for a session id");
    l.id[6] = (uint8_t)((l.id[6] & 0x0f) | 0x40); /* UUID version 4 */
    l.id[8] = (uint8_t)((l.id[8] & 0x3f) | 0x80);
    memcpy(l.uid, ctx->user_uid, sizeof(l.uid));
    sbl_lsess_touch(&l, ctx->client->uid_for, sbl_now_ms());
    BSON_APPEND_DOCUMENT_BEGIN(ctx->reply, "id", &id);
    BSON_APPEND_BINARY(&id, "id", BSON_SUBTYPE_UUID, l.id, 16);
    bson_append_document_end(ctx->reply, &id);
    BSON_APPEND_INT32(ctx->reply, "timeoutMinutes",
                      (int32_t)(atomic_load(&timeout_ms) / (60 * 1000)));
    return 0;
}

/* The command's value must be an array; *it is left on it. */
static int command_array(sbl_opctx_t *ctx, bson_iter_t *it, sbl_err_t *err)
{
    bson_iter_init(it, ctx->cmd);
    bson_iter_next(it);
    if (!BSON_ITER_HOLDS_ARRAY(it))
        return sbl_type_error(err, ctx->name, it, "array");
    return 0;
}

/* refreshSessions, endSessions and killSessions: an array of lsids. */
static int each_lsid(sbl_opctx_t *ctx, bool any_uid, void (*fn)(sbl_opctx_t *, const sbl_lsid_t *),
                     sbl_err_t *err)
{
    bson_iter_t it, el;
    sbl_lsid_t l;
    SBL_RET(command_array(ctx, &it, err));
    bson_iter_recurse(&it, &el);
    while (bson_iter_next(&el)) { /* check all before acting on any */
        SBL_RET(sbl_lsid_parse(&el, ctx->name, ctx->user_uid, any_uid, &l, err));
    }
    bson_iter_recurse(&it, &el);
    while (bson_iter_next(&el)) {
        sbl_lsid_parse(&el, ctx->name, ctx->user_uid, any_uid, &l, err);
        fn(ctx, &l);
    }
    return 0;
}

static void refresh_one(sbl_opctx_t *ctx, const sbl_lsid_t *l)
{
    sbl_lsess_touch(l, ctx->client->uid_for, sbl_now_ms());
}

static void end_one(sbl_opctx_t *ctx, const sbl_lsid_t *l)
{
    sbl_lsess_end(l);
    sbl_cursors_kill_session(l->id);
    sbl_cmd_mtxn_kill_session(l->id);
}

static void kill_one(sbl_opctx_t *ctx, const sbl_lsid_t *l)
{
    sbl_cursors_kill_session(l->id);
    sbl_cmd_mtxn_kill_session(l->id);
}

int sbl_cmd_refresh_sessions(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return each_lsid(ctx, cluster_member(ctx->client), refresh_one, err);
}

int sbl_cmd_end_sessions(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return each_lsid(ctx, cluster_member(ctx->client), end_one, err);
}

int sbl_cmd_kill_sessions(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return each_lsid(ctx, true, kill_one, err);
}

/*
 * A pattern of killAllSessionsByPattern ({lsid}, {uid}, {users: [...]},
 * {roles: [...]}; every field given must match), or of killAllSessions
 * ({user, db}: one user).  An empty list of patterns matches every session.
 */
typedef struct pattern {
    bool has_id, has_uid;
    uint8_t id[16], uid[32];
    uint8_t (*users)[32]; /* uids of the users listed; nusers 0: any */
    size_t nusers;
} pattern_t;

static int user_uid(const bson_iter_t *it, const char *field, uint8_t uid[32], sbl_err_t *err)
{
    bson_iter_t f;
    const char *user = NULL, *db = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &f))
        return sbl_type_error(err, field, it, "object");
    while (bson_iter_next(&f)) {
        if (strcmp(bson_iter_key(&f), "user") == 0 && BSON_ITER_HOLDS_UTF8(&f))
            user = bson_iter_utf8(&f, NULL);
        else if (strcmp(bson_iter_key(&f), "db") == 0 && BSON_ITER_HOLDS_UTF8(&f))
            db = bson_iter_utf8(&f, NULL);
        else
            return sbl_err_set(err, SBL_E_UnknownField, "BSON field '%s.%s' is an unknown field.",
                               field, bson_iter_key(&f));
    }
    if (user == NULL || db == NULL)
        return sbl_err_set(err, SBL_E_MissingField,
                           "BSON field '%s.%s' is missing but a required field", field,
                           user == NULL ? "user" : "db");
    sbl_lsid_uid(user, db, uid);
    return 0;
}

static int add_user(pattern_t *p, const bson_iter_t *it, const char *field, sbl_err_t *err)
{
    uint8_t (*nu)[32] = realloc(p->users, (p->nusers + 1) * sizeof(*nu));
    if (nu == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    p->users = nu;
    SBL_RET(user_uid(it, field, p->users[p->nusers], err));
    p->nusers++;
    return 0;
}

static int parse_pattern(const bson_iter_t *it, bool by_pattern, pattern_t *p, sbl_err_t *err)
{
    static const uint8_t any_uid[32];
    const char *field = by_pattern ? "KillAllSessionsByPattern" : "KillAllSessionsUser";
    bson_iter_t f, arr;
    memset(p, 0, sizeof(*p));
    if (!by_pattern)
        return add_user(p, it, field, err);
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &f))
        return sbl_type_error(err, field, it, "object");
    while (bson_iter_next(&f)) {
        const char *k = bson_iter_key(&f);
        if (strcmp(k, "lsid") == 0) {
            sbl_lsid_t l;
            SBL_RET(sbl_lsid_parse(&f, "KillAllSessionsByPattern.lsid", any_uid, true, &l, err));
            memcpy(p->id, l.id, 16);
            p->has_id = true;
        } else if (strcmp(k, "uid") == 0) {
            bson_subtype_t st;
            uint32_t len = 0;
            const uint8_t *data;
            if (BSON_ITER_HOLDS_BINARY(&f))
                bson_iter_binary(&f, &st, &len, &data);
            if (len != 32)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "KillAllSessionsByPattern.uid must be 32 bytes of binData");
            memcpy(p->uid, data, 32);
            p->has_uid = true;
        } else if (strcmp(k, "users") == 0 || strcmp(k, "roles") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&f))
                return sbl_type_error(err, k, &f, "array");
            if (k[0] == 'r') /* roles: every session's owner is checked by users/uid only */
                continue;
            bson_iter_recurse(&f, &arr);
            while (bson_iter_next(&arr))
                SBL_RET(add_user(p, &arr, "KillAllSessionsByPattern.users", err));
        } else {
            return sbl_err_set(err, SBL_E_UnknownField, "BSON field '%s.%s' is an unknown field.",
                               field, k);
        }
    }
    return 0;
}

static bool pattern_matches(const pattern_t *p, const sbl_lsess_info_t *s)
{
    if (p->has_id && memcmp(p->id, s->lsid.id, 16) != 0)
        return false;
    if (p->has_uid && memcmp(p->uid, s->lsid.uid, 32) != 0)
        return false;
    if (p->nusers == 0)
        return true;
    for (size_t i = 0; i < p->nusers; i++)
        if (memcmp(p->users[i], s->lsid.uid, 32) == 0)
            return true;
    return false;
}

typedef struct kill_walk {
    pattern_t *pats;
    size_t npats;
    size_t killed;
} kill_walk_t;

static bool kill_visit(const sbl_lsess_info_t *s, void *arg)
{
    kill_walk_t *w = arg;
    bool hit = w->npats == 0;
    for (size_t i = 0; i < w->npats && !hit; i++)
        hit = pattern_matches(&w->pats[i], s);
    if (hit) { /* its cursors and its open transaction end, as mongod's */
        w->killed += sbl_cursors_kill_session(s->lsid.id);
        sbl_cmd_mtxn_kill_session(s->lsid.id);
    }
    return true;
}

static int kill_all(sbl_opctx_t *ctx, bool by_pattern, sbl_err_t *err)
{
    bson_iter_t it, el;
    kill_walk_t w = {0};
    int rc = 0;
    SBL_RET(command_array(ctx, &it, err));
    bson_iter_recurse(&it, &el);
    while (bson_iter_next(&el)) {
        pattern_t *np = realloc(w.pats, (w.npats + 1) * sizeof(*np));
        if (np == NULL) {
            rc = sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
            break;
        }
        w.pats = np;
        if ((rc = parse_pattern(&el, by_pattern, &w.pats[w.npats], err)) != 0) {
            free(w.pats[w.npats].users);
            break;
        }
        w.npats++;
    }
    if (rc == 0)
        sbl_lsess_foreach(kill_visit, &w);
    for (size_t i = 0; i < w.npats; i++)
        free(w.pats[i].users);
    free(w.pats);
    return rc;
}

int sbl_cmd_kill_all_sessions(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return kill_all(ctx, false, err);
}

int sbl_cmd_kill_all_sessions_by_pattern(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return kill_all(ctx, true, err);
}

/* ---- the refresh job ------------------------------------------------------------- */

static void run_internal(const bson_t *cmd)
{
    bson_t reply = BSON_INITIALIZER;
    bson_iter_t it;
    sbl_cmd_run("config", cmd, &reply);
    if (!bson_iter_init_find(&it, &reply, "ok") || bson_iter_as_double(&it) != 1.0 ||
        bson_has_field(&reply, "writeErrors")) {
        bson_t attr = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&attr, "error", &reply);
        sbl_log(SBL_LOG_WARNING, "CONTROL", 20710, "Failed to refresh session cache", &attr);
        bson_destroy(&attr);
    }
    bson_destroy(&reply);
}

static void ensure_ttl_index(void)
{
    bson_t cmd = BSON_INITIALIZER, arr, ix, key;
    BSON_APPEND_UTF8(&cmd, "createIndexes", SESSIONS_NS_COLL);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &ix);
    BSON_APPEND_DOCUMENT_BEGIN(&ix, "key", &key);
    BSON_APPEND_INT32(&key, "lastUse", 1);
    bson_append_document_end(&ix, &key);
    BSON_APPEND_UTF8(&ix, "name", "lsidTTLIndex");
    BSON_APPEND_INT32(&ix, "expireAfterSeconds",
                      (int32_t)(atomic_load(&timeout_ms) / 1000));
    bson_append_document_end(&arr, &ix);
    bson_append_array_end(&cmd, &arr);
    run_internal(&cmd);
    bson_destroy(&cmd);
}

/* Upserts of the sessions used since `since`, in batches. */
typedef struct persist {
    int64_t since;
    bson_t cmd, arr;
    uint32_t n;
    int64_t total;
} persist_t;

static void persist_begin(persist_t *p)
{
    bson_init(&p->cmd);
    BSON_APPEND_UTF8(&p->cmd, "update", SESSIONS_NS_COLL);
    BSON_APPEND_BOOL(&p->cmd, "ordered", false);
    BSON_APPEND_ARRAY_BEGIN(&p->cmd, "updates", &p->arr);
    p->n = 0;
}

static void persist_end(persist_t *p)
{
    bson_append_array_end(&p->cmd, &p->arr);
    if (p->n > 0)
        run_internal(&p->cmd);
    bson_destroy(&p->cmd);
}

static bool persist_visit(const sbl_lsess_info_t *s, void *arg)
{
    persist_t *p = arg;
    bson_t st, q, u, set, user;
    char kb[16];
    if (s->last_use_ms < p->since)
        return true;
    bson_append_document_begin(&p->arr, sbl_array_key(p->n++, kb), -1, &st);
    BSON_APPEND_DOCUMENT_BEGIN(&st, "q", &q);
    sbl_lsid_append(&q, "_id", &s->lsid);
    bson_append_document_end(&st, &q);
    BSON_APPEND_DOCUMENT_BEGIN(&st, "u", &u);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    BSON_APPEND_DATE_TIME(&set, "lastUse", s->last_use_ms);
    if (s->user[0] != '\0') {
        BSON_APPEND_DOCUMENT_BEGIN(&set, "user", &user);
        BSON_APPEND_UTF8(&user, "name", s->user);
        bson_append_document_end(&set, &user);
    }
    bson_append_document_end(&u, &set);
    bson_append_document_end(&st, &u);
    BSON_APPEND_BOOL(&st, "upsert", true);
    bson_append_document_end(&p->arr, &st);
    p->total++;
    if (p->n == BATCH) {
        persist_end(p);
        persist_begin(p);
    }
    return true;
}

static int64_t remove_ended(void)
{
    sbl_lsid_t l[BATCH];
    size_t n;
    int64_t total = 0;
    while ((n = sbl_lsess_take_ended(l, BATCH)) > 0) {
        bson_t cmd = BSON_INITIALIZER, arr, st, q;
        char kb[16];
        BSON_APPEND_UTF8(&cmd, "delete", SESSIONS_NS_COLL);
        BSON_APPEND_BOOL(&cmd, "ordered", false);
        BSON_APPEND_ARRAY_BEGIN(&cmd, "deletes", &arr);
        for (size_t i = 0; i < n; i++) {
            bson_append_document_begin(&arr, sbl_array_key((uint32_t)i, kb), -1, &st);
            BSON_APPEND_DOCUMENT_BEGIN(&st, "q", &q);
            sbl_lsid_append(&q, "_id", &l[i]);
            bson_append_document_end(&st, &q);
            BSON_APPEND_INT32(&st, "limit", 1);
            bson_append_document_end(&arr, &st);
        }
        bson_append_array_end(&cmd, &arr);
        run_internal(&cmd);
        bson_destroy(&cmd);
        total += (int64_t)n;
    }
    return total;
}

static bool expired_visit(const sbl_lsess_info_t *s, void *arg)
{
    *(int64_t *)arg += (int64_t)sbl_cursors_kill_session(s->lsid.id);
    return true;
}

/* Expire idle sessions, then (when due or forced) write the catalog out. */
static void refresh(bool force)
{
    int64_t now = sbl_now_ms(), cursors = 0;
    pthread_mutex_lock(&job_mu);
    sbl_lsess_reap(now, atomic_load(&timeout_ms), expired_visit, &cursors);
    job.cursors_closed += cursors;
    if (!force && now < next_refresh_ms) {
        pthread_mutex_unlock(&job_mu);
        return;
    }
    int64_t t0 = sbl_now_us();
    persist_t p = {.since = last_persist_ms};
    ensure_ttl_index();
    persist_begin(&p);
    sbl_lsess_foreach(persist_visit, &p);
    persist_end(&p);
    int64_t ended = remove_ended();
    last_persist_ms = now;
    next_refresh_ms = now + atomic_load(&refresh_ms);
    job.jobs++;
    job.duration_ms = (sbl_now_us() - t0) / 1000;
    job.at_ms = now;
    job.refreshed = p.total;
    job.ended = ended;
    job.cursors_closed = cursors;
    pthread_mutex_lock(&stat_mu);
    job_shown = job;
    pthread_mutex_unlock(&stat_mu);
    pthread_mutex_unlock(&job_mu);
}

void sbl_cmd_sessions_tick(void)
{
    refresh(false);
}

int64_t sbl_cmd_sessions_tick_ms(void)
{
    int64_t r = atomic_load(&refresh_ms);
    return r < 60 * 1000 ? r : 60 * 1000;
}

int sbl_cmd_refresh_logical_session_cache_now(sbl_opctx_t *ctx, sbl_err_t *err)
{
    if (!sbl_test_commands_enabled())
        return sbl_err_set(err, SBL_E_CommandNotFound,
                           "no such command: 'refreshLogicalSessionCacheNow'");
    refresh(true);
    return 0;
}

void sbl_cmd_sessions_append_status(bson_t *r)
{
    bson_t d;
    pthread_mutex_lock(&stat_mu);
    job_stats_t job = job_shown;
    pthread_mutex_unlock(&stat_mu);
    BSON_APPEND_DOCUMENT_BEGIN(r, "logicalSessionRecordCache", &d);
    BSON_APPEND_INT32(&d, "activeSessionsCount", (int32_t)sbl_lsess_count());
    BSON_APPEND_INT32(&d, "sessionsCollectionJobCount", (int32_t)job.jobs);
    BSON_APPEND_INT32(&d, "lastSessionsCollectionJobDurationMillis", (int32_t)job.duration_ms);
    BSON_APPEND_DATE_TIME(&d, "lastSessionsCollectionJobTimestamp", job.at_ms);
    BSON_APPEND_INT32(&d, "lastSessionsCollectionJobEntriesRefreshed", (int32_t)job.refreshed);
    BSON_APPEND_INT32(&d, "lastSessionsCollectionJobEntriesEnded", (int32_t)job.ended);
    BSON_APPEND_INT32(&d, "lastSessionsCollectionJobCursorsClosed", (int32_t)job.cursors_closed);
    BSON_APPEND_INT32(&d, "transactionReaperJobCount", 0);
    BSON_APPEND_INT32(&d, "lastTransactionReaperJobDurationMillis", 0);
    BSON_APPEND_DATE_TIME(&d, "lastTransactionReaperJobTimestamp", job.at_ms);
    BSON_APPEND_INT32(&d, "lastTransactionReaperJobEntriesCleanedUp", 0);
    bson_append_document_end(r, &d);
    /* Retryable writes' and transactions' counters (retryable.c, txn.c). */
    BSON_APPEND_DOCUMENT_BEGIN(r, "transactions", &d);
    BSON_APPEND_INT64(&d, "retriedCommandsCount", sbl_retry_retried_commands());
    BSON_APPEND_INT64(&d, "retriedStatementsCount", sbl_retry_retried_statements());
    BSON_APPEND_INT64(&d, "transactionsCollectionWriteCount", sbl_retry_record_writes());
    sbl_cmd_mtxn_append_status(&d);
    bson_append_document_end(r, &d);
}

/* Start-up parameters: localLogicalSessionTimeoutMinutes and
 * logicalSessionRefreshMillis (--setParameter name=value). */
int sbl_cmd_sessions_init(sbl_err_t *err)
{
    static const struct {
        const char *name;
        atomic_llong *v;
        long long scale, min;
    } params[] = {{"localLogicalSessionTimeoutMinutes", &timeout_ms, 60 * 1000, 1},
                  {"logicalSessionRefreshMillis", &refresh_ms, 1, 1}};
    const sbl_options_t *o = sbl_server_options();
    for (size_t i = 0; o != NULL && i < sizeof(params) / sizeof(params[0]); i++) {
        bson_iter_t it;
        if (!bson_iter_init_find(&it, &o->parameters, params[i].name))
            continue;
        const char *s = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : NULL;
        char *end = NULL;
        long long v = s != NULL ? strtoll(s, &end, 10) : bson_iter_as_int64(&it);
        if ((s != NULL && (end == s || *end != '\0')) || v < params[i].min)
            return sbl_err_set(err, SBL_E_BadValue, "Invalid value for %s: '%s'", params[i].name,
                               s != NULL ? s : "?");
        atomic_store(params[i].v, v * params[i].scale);
    }
    bson_iter_t pit;
    if (o != NULL && bson_iter_init(&pit, &o->parameters))
        while (bson_iter_next(&pit)) /* the transaction parameters (txn.c) */
            if (sbl_cmd_mtxn_set_parameter(bson_iter_key(&pit), &pit, NULL, err) > 0 ||
                sbl_cmd_automerge_set_parameter(bson_iter_key(&pit), &pit, NULL, err) > 0 ||
                sbl_cmd_rangedel_set_parameter(bson_iter_key(&pit), &pit, NULL, err) > 0 ||
                sbl_repl_flow_set_parameter(bson_iter_key(&pit), &pit, true, NULL, err) > 0)
                return err->code;
    pthread_mutex_lock(&job_mu);
    last_persist_ms = 0;
    next_refresh_ms = sbl_now_ms() + atomic_load(&refresh_ms);
    pthread_mutex_unlock(&job_mu);
    return 0;
}
