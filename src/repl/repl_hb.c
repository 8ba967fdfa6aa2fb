/*
 * repl_hb.c: heartbeats and elections (pv1).  A sender thread per member
 * sends it replSetHeartbeat each heartbeatIntervalMillis over its own
 * outbound connection (libmongoc, to the hosts of the config), so a member
 * that does not answer delays no other's heartbeats.  The senders learn
 * members' states, optimes, terms and newer configs from the responses;
 * one more thread runs elections when no primary has been heard of for
 * electionTimeoutMillis plus a random offset (a dry run in the current
 * term, then a real one in term + 1, voting for itself durably first),
 * and steps a primary down when it has not heard from a majority for an
 * election timeout, or when its dbpath cannot take writes (a full disk:
 * it hands off to a caught-up secondary and stands for no election until
 * the disk takes writes again).  The receiving side of heartbeats and vote requests,
 * replSetStepDown, replSetFreeze and replSetStepUp are here too.
 *
 * What must stay true: network I/O never happens under sbl_rs.lock; an
 * election's outcome is taken only if the term did not move meanwhile;
 * elections never run concurrently (election_mu).
 */
#include "repl/repl_int.h"

#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

#define rs sbl_rs

/* The sableDelayHeartbeatPing fail point: milliseconds added to the pings
 * measured to one member (tests make a member "far"). */
static char ping_delay_host[256];
static int64_t ping_delay_ms;

void sbl_repl_set_ping_delay(const char *host, int64_t ms)
{
    pthread_mutex_lock(&rs.lock);
    snprintf(ping_delay_host, sizeof(ping_delay_host), "%s", host != NULL ? host : "");
    ping_delay_ms = host != NULL ? ms : 0;
    for (int i = 0; rs.config != NULL && i < rs.cfg.n; i++)
        rs.peer[i].ping_avg_ms = 0; /* start the averages again */
    pthread_mutex_unlock(&rs.lock);
}

static int64_t ping_delay_of_locked(int i)
{
    return ping_delay_host[0] != '\0' && strcmp(rs.cfg.m[i].host, ping_delay_host) == 0
               ? ping_delay_ms : 0;
}

static pthread_t hb_thread;
static bool hb_running;
static pthread_mutex_t election_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t mongoc_once = PTHREAD_ONCE_INIT;

static void init_mongoc(void)
{
    mongoc_init();
}

/* ---- outbound connections ----------------------------------------------------- */

typedef struct peer_conn {
    char host[256];
    mongoc_client_t *client;
} peer_conn_t;

/* A client for host, made on first use. */
static mongoc_client_t *conn_get(peer_conn_t *pc, const char *host, int timeout_ms)
{
    if (pc->client != NULL && strcmp(pc->host, host) == 0)
        return pc->client;
    if (pc->client != NULL)
        mongoc_client_destroy(pc->client);
    pc->client = NULL;
    char opts[256], uri[4096];
    snprintf(opts, sizeof(opts), "directConnection=true&connectTimeoutMS=%d"
             "&socketTimeoutMS=%d&serverSelectionTimeoutMS=%d&appname=sable-repl",
             timeout_ms, timeout_ms, timeout_ms);
    if (!sbl_rs_member_uri(uri, sizeof(uri), host, opts))
        return NULL;
    pc->client = mongoc_client_new(uri);
    snprintf(pc->host, sizeof(pc->host), "%s", host);
    return pc->client;
}

/* Drop the connection after a failure (a new client skips libmongoc's
 * 5-second cool-down of a server it failed to reach). */
static void conn_reset(peer_conn_t *pc)
{
    if (pc->client != NULL)
        mongoc_client_destroy(pc->client);
    pc->client = NULL;
}

/* Run cmd on host's admin database; reply is always initialised. */
static bool run_on(peer_conn_t *pc, const char *host, const bson_t *cmd, bson_t *reply,
                   int timeout_ms)
{
    bson_error_t error;
    pthread_once(&mongoc_once, init_mongoc);
    mongoc_client_t *c = conn_get(pc, host, timeout_ms);
    if (c == NULL) {
        bson_init(reply);
        return false;
    }
    mongoc_read_prefs_t *rp = mongoc_read_prefs_new(MONGOC_READ_PRIMARY_PREFERRED);
    bool ok = mongoc_client_command_simple(c, "admin", cmd, rp, reply, &error);
    mongoc_read_prefs_destroy(rp);
    if (!ok && error.domain != MONGOC_ERROR_SERVER && error.domain != MONGOC_ERROR_WRITE_CONCERN) {
        conn_reset(pc);
        bson_reinit(reply); /* a network error: say which */
        BSON_APPEND_UTF8(reply, "errmsg", error.message);
    }
    return ok;
}

static int64_t num(const bson_t *d, const char *k, int64_t def)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, d, k) && BSON_ITER_HOLDS_NUMBER(&it) ? bson_iter_as_int64(&it)
                                                                         : def;
}

static const char *str(const bson_t *d, const char *k)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, d, k) && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL)
                                                                       : NULL;
}

/* {ts, t} at d.k, as an optime. */
static sbl_optime_t optime_at(const bson_t *d, const char *k)
{
    sbl_optime_t o = {0, 0};
    bson_iter_t it, sub;
    if (bson_iter_init_find(&it, d, k) && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &sub)) {
        while (bson_iter_next(&sub)) {
            if (strcmp(bson_iter_key(&sub), "ts") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&sub)) {
                uint32_t t, i;
                bson_iter_timestamp(&sub, &t, &i);
                o.ts = SBL_TS(t, i);
            } else if (strcmp(bson_iter_key(&sub), "t") == 0 && BSON_ITER_HOLDS_NUMBER(&sub)) {
                o.t = bson_iter_as_int64(&sub);
            }
        }
    }
    return o;
}

sbl_optime_t sbl_repl_optime_at(const bson_t *d, const char *k)
{
    return optime_at(d, k);
}

/* ---- the receiving side -------------------------------------------------------- */

int sbl_repl_heartbeat(const bson_t *cmd, bson_t *r, sbl_err_t *err)
{
    bson_iter_t it;
    const char *set = NULL, *from = str(cmd, "from");
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NoReplicationEnabled, "not running with --replSet");
    if (bson_iter_init_find(&it, cmd, "replSetHeartbeat") && BSON_ITER_HOLDS_UTF8(&it))
        set = bson_iter_utf8(&it, NULL);
    int64_t their_version = num(cmd, "configVersion", -2), their_term = num(cmd, "term", -1);

    pthread_mutex_lock(&rs.lock);
    if (set == NULL || strcmp(set, rs.set_name) != 0) {
        pthread_mutex_unlock(&rs.lock);
        return sbl_err_set(err, 185 /* InconsistentReplicaSetNames */,
                           "Our set name of %s does not match name %s reported by remote node",
                           rs.set_name, set != NULL ? set : "");
    }
    if (their_term > rs.term && rs.config != NULL)
        sbl_rs_update_term_locked(their_term);
    /* A member of a newer term than its last answer to us (a new primary's
     * heartbeats right after its election): ask it now, not at our next
     * interval, so we learn its state and sync from it at once (the hidden
     * member of a failover otherwise waited up to heartbeatIntervalMillis,
     * and w:"majority" with it).  Once it has answered, its term is known:
     * no more than one extra heartbeat per term. */
    for (int i = 0; rs.config != NULL && from != NULL && i < rs.cfg.n; i++)
        if (i != rs.self && their_term > rs.peer[i].term && strcmp(rs.cfg.m[i].host, from) == 0) {
            rs.peer[i].next_hb_ms = 0;
            sbl_rs_broadcast_locked();
        }
    int st = atomic_load(&rs.state);
    sbl_optime_t ap = sbl_rs_my_applied();
    BSON_APPEND_UTF8(r, "set", rs.set_name);
    /* From its election win on, through its catch-up: PRIMARY, as mongod's
     * member state is from the win (a member ahead then schedules a
     * catch-up takeover; it takes no primary behind it as its sync source,
     * sbl_rs_pick_sync_source).  The win's first heartbeats, which ask the
     * others where they are, make each ask back at once (a newer term,
     * above): answered SECONDARY, a member (the hidden one of a failover)
     * learned the new primary only at its next interval, and the first
     * w:"majority" write waited for that. */
    BSON_APPEND_INT32(r, "state", rs.config == NULL ? SBL_RS_STARTUP
                                  : sbl_rs_catching_up_locked() ? SBL_RS_PRIMARY : st);
    BSON_APPEND_INT64(r, "term", rs.term);
    BSON_APPEND_INT32(r, "v", rs.config != NULL ? (int32_t)rs.cfg.version : -2);
    BSON_APPEND_INT64(r, "configTerm", rs.config != NULL ? rs.cfg.term : -1);
    sbl_repl_append_optime(r, "opTime", ap.ts, ap.t);
    BSON_APPEND_DATE_TIME(r, "wallTime", sbl_oplog_last_wall_ms());
    /* a primary's writes wait for its own journal; a secondary's durable
     * position is what its reporter's flushes made durable (the primary
     * counts these towards the commit point) */
    int64_t dwall = sbl_oplog_last_wall_ms();
    sbl_optime_t dp = st == SBL_RS_PRIMARY ? ap : sbl_rs_my_durable_locked(&dwall);
    sbl_repl_append_optime(r, "durableOpTime", dp.ts, dp.t);
    BSON_APPEND_DATE_TIME(r, "durableWallTime", dwall);
    BSON_APPEND_UTF8(r, "syncingTo", rs.sync_source);
    if (st == SBL_RS_PRIMARY)
        bson_append_timestamp(r, "electionTime", -1, SBL_TS_SECS(rs.election_ts),
                              SBL_TS_INC(rs.election_ts));
    if (rs.primary >= 0)
        BSON_APPEND_INT32(r, "primaryId", rs.cfg.m[rs.primary].id);
    sbl_rs_append_commit_locked(r);
    if (rs.config != NULL && their_version < rs.cfg.version)
        BSON_APPEND_DOCUMENT(r, "config", rs.config);
    if (from != NULL && their_version > (rs.config != NULL ? rs.cfg.version : -2))
        snprintf(rs.config_source, sizeof(rs.config_source), "%s", from);
    pthread_mutex_unlock(&rs.lock);
    if (rs.config_source[0] != '\0')
        sbl_rs_hb_kick();
    return 0;
}

int sbl_repl_request_votes(const bson_t *cmd, bson_t *r, sbl_err_t *err)
{
    bson_iter_t it;
    char reason[512];
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NoReplicationEnabled, "not running with --replSet");
    sbl_vote_req_t req = {
        .set_name = str(cmd, "setName"),
        .dry_run = bson_iter_init_find(&it, cmd, "dryRun") && bson_iter_as_bool(&it),
        .term = num(cmd, "term", -1),
        .candidate = (int)num(cmd, "candidateIndex", -1),
        .cfg_version = num(cmd, "configVersion", -1),
        .cfg_term = num(cmd, "configTerm", -1),
        .last_applied = optime_at(cmd, "lastAppliedOpTime"),
    };
    pthread_mutex_lock(&rs.lock);
    if (rs.config == NULL) {
        pthread_mutex_unlock(&rs.lock);
        return sbl_err_set(err, SBL_E_NotYetInitialized, "no replset config has been received");
    }
    if (!req.dry_run && req.term > rs.term)
        sbl_rs_update_term_locked(req.term);
    sbl_vote_state_t st = {.term = rs.term, .last_vote_term = rs.last_vote_term,
                           .last_vote_candidate = rs.last_vote_candidate,
                           .last_applied = sbl_rs_my_applied(), .cfg_version = rs.cfg.version,
                           .cfg_term = rs.cfg.term, .set_name = rs.set_name};
    bool granted = sbl_rs_vote(&st, &req, reason, sizeof(reason));
    if (granted && !req.dry_run) {
        rs.last_vote_term = st.last_vote_term;
        rs.last_vote_candidate = st.last_vote_candidate;
        if (sbl_rs_persist_vote_locked(err) != 0) {
            pthread_mutex_unlock(&rs.lock);
            return -1;
        }
        sbl_rs_reset_election_timer_locked(sbl_now_ms());
    }
    BSON_APPEND_INT64(r, "term", rs.term);
    BSON_APPEND_BOOL(r, "voteGranted", granted);
    BSON_APPEND_UTF8(r, "reason", reason);
    pthread_mutex_unlock(&rs.lock);
    return 0;
}

/* ---- heartbeats out ------------------------------------------------------------ */

static peer_conn_t conns[SBL_RS_MAX_MEMBERS];
static peer_conn_t config_conn;


/* The primary this member knows of is part of its hello (`primary`): a
 * change moves topologyVersion, which answers waiting awaitable hellos at
 * once, so drivers monitoring a secondary learn of a new primary at once. */
static void set_primary_locked(int i)
{
    if (rs.primary == i)
        return;
    rs.primary = i;
    atomic_fetch_add(&rs.topology, 1);
}

/* mongod's "Member is in new state" (21215): every change of a member's
 * state as heartbeats see it, with how long the heartbeat took and why it
 * failed, so a log shows when and why a member looked down.  Lock held. */
static void log_member_state_locked(int i, int old_state, int new_state, int64_t took_ms,
                                    const char *why)
{
    if (old_state == new_state)
        return;
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "hostAndPort", rs.cfg.m[i].host);
    BSON_APPEND_UTF8(&attr, "newState", sbl_rs_state_str(new_state));
    BSON_APPEND_INT64(&attr, "heartbeatMillis", took_ms);
    if (why != NULL && why[0] != '\0')
        BSON_APPEND_UTF8(&attr, "error", why);
    sbl_log(SBL_LOG_INFO, "REPL", 21215, "Member is in new state", &attr);
    bson_destroy(&attr);
}

static void on_heartbeat_reply(int i, bool ok, const bson_t *reply, int64_t sent_ms)
{
    int64_t now = sbl_now_ms();
    bson_iter_t it;
    bson_t cfgdoc;
    bool newer_config = false;

    pthread_mutex_lock(&rs.lock);
    if (i >= rs.cfg.n) {
        pthread_mutex_unlock(&rs.lock);
        return;
    }
    sbl_rs_peer_t *p = &rs.peer[i];
    int old_state = p->state;
    if (!ok) {
        if (p->up)
            p->up_since_ms = 0;
        p->up = false;
        p->state = SBL_RS_DOWN;
        const char *m = str(reply, "errmsg");
        snprintf(p->msg, sizeof(p->msg), "%s", m != NULL ? m : "Couldn't get a connection");
        log_member_state_locked(i, old_state, p->state, now - sent_ms, p->msg);
        if (rs.primary == i)
            set_primary_locked(-1);
        pthread_mutex_unlock(&rs.lock);
        return;
    }
    if (!p->up)
        p->up_since_ms = now;
    p->up = true;
    p->last_ok_ms = now;
    p->ping_ms = now - sent_ms + ping_delay_of_locked(i);
    /* the sync source rules compare averages: one slow heartbeat on a busy
     * host must not move a secondary's source */
    p->ping_avg_ms = p->ping_avg_ms == 0 ? p->ping_ms : (3 * p->ping_avg_ms + p->ping_ms) / 4;
    p->msg[0] = '\0';
    p->state = (int)num(reply, "state", SBL_RS_STARTUP);
    log_member_state_locked(i, old_state, p->state, now - sent_ms, NULL);
    sbl_optime_t ap = optime_at(reply, "opTime");
    if (sbl_optime_cmp(ap, p->applied) > 0) {
        p->applied = ap;
        if (bson_iter_init_find(&it, reply, "wallTime") && BSON_ITER_HOLDS_DATE_TIME(&it))
            p->applied_wall = bson_iter_date_time(&it);
    }
    sbl_optime_t dp = optime_at(reply, "durableOpTime"); /* forward only, as applied */
    if (sbl_optime_cmp(dp, p->durable) > 0) {
        p->durable = dp;
        if (bson_iter_init_find(&it, reply, "durableWallTime") && BSON_ITER_HOLDS_DATE_TIME(&it))
            p->durable_wall = bson_iter_date_time(&it);
    }
    p->cfg_version = num(reply, "v", -2);
    const char *ss = str(reply, "syncingTo");
    snprintf(p->sync_source, sizeof(p->sync_source), "%s", ss != NULL ? ss : "");
    int64_t term = num(reply, "term", -1);
    p->term = term;
    if (term > rs.term)
        sbl_rs_update_term_locked(term);
    if (p->state == SBL_RS_PRIMARY && term >= rs.term) {
        if (atomic_load(&rs.state) == SBL_RS_PRIMARY && i != rs.self) {
            /* two primaries of one term cannot be; of different terms the
             * higher one won above */
        } else {
            set_primary_locked(i);
            sbl_rs_reset_election_timer_locked(now);
            sbl_rs_learn_commit_locked(reply);
        }
    } else if (rs.primary == i) {
        set_primary_locked(-1);
    }
    if (bson_iter_init_find(&it, reply, "config") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        sbl_iter_doc(&it, &cfgdoc) && num(&cfgdoc, "version", 0) > rs.cfg.version)
        newer_config = true;
    if (atomic_load(&rs.state) == SBL_RS_PRIMARY)
        sbl_rs_update_commit_locked();
    pthread_mutex_unlock(&rs.lock);
    if (newer_config) {
        sbl_err_t err;
        sbl_err_clear(&err);
        sbl_rs_adopt_config(&cfgdoc, &err);
    }
}

static void build_heartbeat(bson_t *cmd)
{
    BSON_APPEND_UTF8(cmd, "replSetHeartbeat", rs.set_name);
    BSON_APPEND_INT64(cmd, "configVersion", rs.config != NULL ? rs.cfg.version : -2);
    BSON_APPEND_INT64(cmd, "configTerm", rs.config != NULL ? rs.cfg.term : -1);
    BSON_APPEND_INT32(cmd, "hbv", 1);
    if (rs.self >= 0) {
        BSON_APPEND_UTF8(cmd, "from", rs.cfg.m[rs.self].host);
        BSON_APPEND_INT32(cmd, "fromId", rs.cfg.m[rs.self].id);
    }
    BSON_APPEND_INT64(cmd, "term", rs.term);
}

/* A config fetch that failed (why: NULL when it did not), logged once per
 * member until a fetch from it works: a member that cannot reach the one
 * with the config (its TLS certificate refused, say) asks again at every
 * heartbeat it receives.  hb_main's thread only. */
static void log_fetch_failure(const char *host, const char *why)
{
    static char failing[SBL_RS_MAX_MEMBERS][256];
    int at = -1, free_slot = -1;
    for (int i = 0; i < SBL_RS_MAX_MEMBERS; i++) {
        if (strcmp(failing[i], host) == 0)
            at = i;
        else if (failing[i][0] == '\0' && free_slot < 0)
            free_slot = i;
    }
    if (why == NULL || at >= 0) {
        if (why == NULL && at >= 0)
            failing[at][0] = '\0';
        return;
    }
    if (free_slot >= 0)
        snprintf(failing[free_slot], sizeof(failing[free_slot]), "%s", host);
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "hostAndPort", host);
    BSON_APPEND_UTF8(&attr, "error", why);
    sbl_log(SBL_LOG_WARNING, "REPL", 7360103, "Could not fetch the config from a member", &attr);
    bson_destroy(&attr);
}

/* A member told us it has a newer config: ask it (our version -2 or ours,
 * its response carries the config). */
static void fetch_config(void)
{
    char host[256];
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it;
    bson_t cfgdoc;

    pthread_mutex_lock(&rs.lock);
    snprintf(host, sizeof(host), "%s", rs.config_source);
    rs.config_source[0] = '\0';
    build_heartbeat(&cmd);
    pthread_mutex_unlock(&rs.lock);
    bool ok = run_on(&config_conn, host, &cmd, &reply, 2000);
    log_fetch_failure(host, ok ? NULL : str(&reply, "errmsg"));
    if (ok && bson_iter_init_find(&it, &reply, "config") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        sbl_iter_doc(&it, &cfgdoc)) {
        sbl_err_t err;
        sbl_err_clear(&err);
        if (sbl_rs_adopt_config(&cfgdoc, &err) != 0) {
            bson_t attr = BSON_INITIALIZER;
            BSON_APPEND_UTF8(&attr, "error", err.msg);
            sbl_log(SBL_LOG_WARNING, "REPL", 7360102, "Could not adopt a received config",
                    &attr);
            bson_destroy(&attr);
        }
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
}

/* ---- elections ------------------------------------------------------------------- */

/* Ask every other voter; returns the votes granted (with our own). */
static int request_votes(bool dry_run, int64_t term, int64_t *higher_term)
{
    char hosts[SBL_RS_MAX_MEMBERS][256];
    int order[SBL_RS_MAX_MEMBERS];
    int nh = 0, votes = 1;
    bson_t cmd = BSON_INITIALIZER;
    static peer_conn_t vconns[SBL_RS_MAX_MEMBERS]; /* by member index */

    pthread_mutex_lock(&rs.lock);
    sbl_optime_t ap = sbl_rs_my_applied();
    BSON_APPEND_INT32(&cmd, "replSetRequestVotes", 1);
    BSON_APPEND_UTF8(&cmd, "setName", rs.set_name);
    BSON_APPEND_BOOL(&cmd, "dryRun", dry_run);
    BSON_APPEND_INT64(&cmd, "term", term);
    BSON_APPEND_INT64(&cmd, "candidateIndex", rs.self);
    BSON_APPEND_INT64(&cmd, "configVersion", rs.cfg.version);
    BSON_APPEND_INT64(&cmd, "configTerm", rs.cfg.term);
    sbl_repl_append_optime(&cmd, "lastAppliedOpTime", ap.ts, ap.t);
    int timeout = (int)(rs.cfg.election_timeout_ms < 2000 ? rs.cfg.election_timeout_ms : 2000);
    int maj = sbl_rs_majority(&rs.cfg);
    /* The voters our heartbeats reach first, then the others: one cut off
     * by a partition held each request behind it for the whole timeout (2 s
     * a phase, seen in the fault runs).  Every voter that is up is asked
     * (one that grants a vote restarts its election timer, as each of
     * mongod's voters does: its requests go to all at once); one that is
     * down only while no majority said yes yet. */
    int reached = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < rs.cfg.n; i++)
            if (i != rs.self && rs.cfg.m[i].votes > 0 && rs.peer[i].up == (pass == 0)) {
                snprintf(hosts[i], sizeof(hosts[0]), "%s", rs.cfg.m[i].host);
                order[nh++] = i;
            }
        if (pass == 0)
            reached = nh;
    }
    pthread_mutex_unlock(&rs.lock);
    *higher_term = 0;
    for (int k = 0; k < nh && (k < reached || votes < maj); k++) {
        int i = order[k];
        bson_t reply;
        bson_iter_t it;
        if (run_on(&vconns[i], hosts[i], &cmd, &reply, timeout)) {
            if (bson_iter_init_find(&it, &reply, "voteGranted") && bson_iter_as_bool(&it))
                votes++;
            int64_t t = num(&reply, "term", -1);
            if (t > term && t > *higher_term)
                *higher_term = t;
        }
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    return votes;
}

static void log_election(const char *msg, int64_t term)
{
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_INT64(&attr, "term", term);
    sbl_log(SBL_LOG_INFO, "ELECTION", 21438, msg, &attr);
    bson_destroy(&attr);
}

/* The newest applied optime this member knows of: its own, or that of a
 * member that is up (heartbeats).  Lock held. */
static sbl_optime_t newest_known_locked(void)
{
    sbl_optime_t best = sbl_rs_my_applied();
    for (int i = 0; i < rs.cfg.n; i++)
        if (i != rs.self && rs.peer[i].up && sbl_optime_cmp(rs.peer[i].applied, best) > 0)
            best = rs.peer[i].applied;
    return best;
}

static void log_catchup(int id, const char *msg, const char *how, sbl_optime_t target,
                        int64_t ops)
{
    bson_t attr = BSON_INITIALIZER, t;
    if (how != NULL)
        BSON_APPEND_UTF8(&attr, "reason", how);
    BSON_APPEND_DOCUMENT_BEGIN(&attr, "targetOpTime", &t);
    bson_append_timestamp(&t, "ts", 2, SBL_TS_SECS(target.ts), SBL_TS_INC(target.ts));
    BSON_APPEND_INT64(&t, "t", target.t);
    bson_append_document_end(&attr, &t);
    if (ops >= 0)
        BSON_APPEND_INT64(&attr, "numCatchUpOps", ops);
    sbl_log(SBL_LOG_INFO, "REPL", id, msg, &attr);
    bson_destroy(&attr);
}

/* How long catch-up waits without progress: 30 s when no catch-up takeover
 * runs; else past the takeover's delay by two heartbeat intervals (the member
 * ahead hears of this primary) and two election timeouts (its election). */
static int64_t stall_ms_locked(void)
{
    if (rs.cfg.catchup_takeover_ms < 0)
        return 30000;
    return rs.cfg.catchup_takeover_ms + 2 * rs.cfg.heartbeat_ms + 2 * rs.cfg.election_timeout_ms;
}

/*
 * Primary catch-up (pv1), between winning the election of term and taking
 * writes: hear from every member once (fresh heartbeats), and while one that
 * is up has a newer applied optime, go on applying (the applier syncs from
 * the member furthest ahead) until this member has the newest optime it
 * knows of.  Meanwhile its heartbeats say PRIMARY, so the member ahead may
 * run a catch-up takeover (catchup_takeover_due_locked), whose higher term
 * ends this.  Ends early on settings.catchUpTimeoutMillis (0: no catch-up),
 * replSetAbortPrimaryCatchUp, when no member that is up is ahead any more,
 * when the term moves, or without progress for stall_ms_locked(): mongod
 * would wait on, Sable bounds every wait (a member ahead that cannot take
 * over, being priority 0 or frozen, would hold the set without a primary).
 * Lock held; waits release it.  Returns false when this member may no
 * longer become primary (term or state moved).
 */
static bool catch_up_locked(int64_t term)
{
    int64_t start = sbl_now_ms(), limit = rs.cfg.catchup_timeout_ms;
    int64_t ops0 = sbl_rs_applied_ops();
    int64_t hb_until = start + (rs.cfg.heartbeat_ms < 2000 ? 2000 : rs.cfg.heartbeat_ms);
    rs.won.target = (sbl_optime_t){0, 0};
    rs.won.catchup_ops = 0;
    if (limit != 0) {
        rs.catching_up = true;
        rs.catchup_abort = false;
        atomic_fetch_add(&rs.topology, 1); /* hello names this member primary meanwhile */
        for (int i = 0; i < rs.cfg.n; i++)
            rs.peer[i].next_hb_ms = 0;
        sbl_rs_broadcast_locked();
        for (bool heard = false; !heard && sbl_now_ms() < hb_until && rs.term == term &&
                                 !rs.stopping;) {
            heard = true;
            for (int i = 0; i < rs.cfg.n; i++)
                if (i != rs.self && rs.peer[i].up && rs.peer[i].last_ok_ms < start)
                    heard = false;
            if (!heard)
                sbl_rs_wait_locked(20);
        }
    }
    sbl_optime_t target = newest_known_locked();
    if (limit == 0)
        sbl_rs_count_catchup(SBL_CATCHUP_SKIPPED, 0);
    else if (sbl_optime_cmp(target, sbl_rs_my_applied()) <= 0)
        sbl_rs_count_catchup(SBL_CATCHUP_ALREADY, 0);
    if (limit != 0 && sbl_optime_cmp(target, sbl_rs_my_applied()) > 0) {
        const char *how = NULL;
        int outcome = SBL_CATCHUP_SUCCEEDED;
        int64_t stall_ms = stall_ms_locked();
        int64_t moved_ms = start;
        sbl_optime_t seen = sbl_rs_my_applied();
        rs.won.target = target;
        log_catchup(21359, "Entering primary catch-up mode", NULL, target, -1);
        while (how == NULL) {
            sbl_optime_t me = sbl_rs_my_applied(), newest = newest_known_locked();
            if (sbl_optime_cmp(me, seen) > 0) {
                seen = me;
                moved_ms = sbl_now_ms();
            }
            if (sbl_optime_cmp(newest, target) > 0)
                rs.won.target = target = newest; /* heard of a newer one meanwhile */
            if (rs.stopping || rs.term != term || atomic_load(&rs.state) != SBL_RS_SECONDARY) {
                how = "the term or state changed";
                outcome = rs.term != term ? SBL_CATCHUP_NEW_TERM : SBL_CATCHUP_ERROR;
            } else if (sbl_optime_cmp(me, target) >= 0) {
                how = "caught up to the target optime";
            } else if (rs.catchup_abort) {
                how = "replSetAbortPrimaryCatchUp";
                outcome = SBL_CATCHUP_ABORTED;
            } else if (limit > 0 && sbl_now_ms() - start >= limit) {
                how = "catchUpTimeoutMillis elapsed";
                outcome = SBL_CATCHUP_TIMED_OUT;
            } else if (sbl_optime_cmp(newest, me) <= 0) {
                how = "no member that is up is ahead";
            } else if (sbl_now_ms() - moved_ms >= stall_ms) {
                how = "no progress, and no catch-up takeover came";
                outcome = SBL_CATCHUP_TIMED_OUT;
            } else {
                sbl_rs_wait_locked(50);
            }
        }
        rs.won.catchup_ops = sbl_rs_applied_ops() - ops0;
        sbl_rs_count_catchup(outcome, rs.won.catchup_ops);
        log_catchup(21363, "Exited primary catch-up mode", how, target, rs.won.catchup_ops);
    }
    if (rs.catching_up) {
        rs.catching_up = false;
        atomic_fetch_add(&rs.topology, 1);
    }
    return rs.term == term && atomic_load(&rs.state) == SBL_RS_SECONDARY && !rs.stopping;
}

int sbl_repl_abort_catchup(sbl_err_t *err)
{
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NoReplicationEnabled, "not running with --replSet");
    pthread_mutex_lock(&rs.lock);
    bool on = rs.catching_up;
    if (on) {
        rs.catchup_abort = true;
        sbl_rs_broadcast_locked();
    }
    pthread_mutex_unlock(&rs.lock);
    return on ? 0 : sbl_err_set(err, SBL_E_IllegalOperation,
                                "The node is not in catch-up mode.");
}

/* Run for primary: dry run (unless skipped), then a real election, then
 * catch-up.  reason is mongod's lastElectionReason.  Returns 0 when this
 * member won. */
static int run_election(bool skip_dry_run, const char *reason, sbl_err_t *err)
{
    int64_t started = sbl_now_ms();
    int64_t higher, term;
    int rc = -1;

    /* an election (with its catch-up) is running: one the timers called
     * would run after it on what they saw before it, so it does not wait */
    if (skip_dry_run)
        pthread_mutex_lock(&election_mu);
    else if (pthread_mutex_trylock(&election_mu) != 0)
        return sbl_err_set(err, SBL_E_CommandFailed, "an election is already running");
    pthread_mutex_lock(&rs.lock);
    int maj = sbl_rs_majority(&rs.cfg);
    term = rs.term;
    bool can = atomic_load(&rs.state) == SBL_RS_SECONDARY && sbl_rs_electable(&rs.cfg, rs.self);
    pthread_mutex_unlock(&rs.lock);
    if (!can) {
        rc = sbl_err_set(err, SBL_E_NodeNotElectable, "this node is not electable");
        goto out;
    }
    if (!sbl_storage_can_write()) { /* it could not write as primary (disk full) */
        rc = sbl_err_set(err, SBL_E_NodeNotElectable, "this node is not electable: its dbpath "
                         "cannot take writes (out of disk space)");
        goto out;
    }
    if (!skip_dry_run) {
        log_election("Starting an election dry run", term + 1);
        if (request_votes(true, term, &higher) < maj) {
            pthread_mutex_lock(&rs.lock);
            if (higher > 0)
                sbl_rs_update_term_locked(higher);
            sbl_rs_reset_election_timer_locked(sbl_now_ms());
            pthread_mutex_unlock(&rs.lock);
            rc = sbl_err_set(err, SBL_E_CommandFailed, "election dry run lost");
            goto out;
        }
    }
    pthread_mutex_lock(&rs.lock);
    if (rs.term != term || atomic_load(&rs.state) != SBL_RS_SECONDARY) {
        pthread_mutex_unlock(&rs.lock);
        rc = sbl_err_set(err, SBL_E_CommandFailed, "term or state moved during the dry run");
        goto out;
    }
    rs.term = ++term; /* the oplog's term: set when it wins (sbl_rs_become_primary_locked) */
    rs.last_vote_term = term;
    rs.last_vote_candidate = rs.self;
    if ((rc = sbl_rs_persist_vote_locked(err)) != 0) {
        pthread_mutex_unlock(&rs.lock);
        goto out;
    }
    sbl_rs_reset_election_timer_locked(sbl_now_ms());
    pthread_mutex_unlock(&rs.lock);
    log_election("Running for election", term);
    sbl_rs_count_election(reason, false);
    int votes = request_votes(false, term, &higher);
    pthread_mutex_lock(&rs.lock);
    if (higher > 0)
        sbl_rs_update_term_locked(higher);
    if (votes >= maj && rs.term == term && atomic_load(&rs.state) == SBL_RS_SECONDARY) {
        log_election("Election succeeded, assuming primary role", term);
        sbl_rs_count_election(reason, true);
        rs.won.reason = reason;
        rs.won.date_ms = started;
        rs.won.term = term;
        rs.won.votes_needed = maj;
        rs.won.priority = rs.cfg.m[rs.self].priority;
        rs.won.timeout_ms = rs.cfg.election_timeout_ms;
        rs.won.commit = rs.commit;
        rs.won.seen = sbl_rs_my_applied();
        if (!catch_up_locked(term))
            rc = sbl_err_set(err, SBL_E_CommandFailed, "term or state moved during catch-up");
        else if ((rc = sbl_rs_become_primary_locked(term, err)) == 0)
            rs.won.new_term_ms = sbl_now_ms();
    } else {
        rc = sbl_err_set(err, SBL_E_CommandFailed, "election lost (%d votes of %d needed)",
                         votes, maj);
    }
    pthread_mutex_unlock(&rs.lock);
out:
    pthread_mutex_unlock(&election_mu);
    return rc;
}

/* The member an election hand-off goes to, as mongod chooses it: up,
 * electable and with our applied optime or newer; of those the highest
 * priority, then the lowest index in the config (-1: none).  It does not know
 * whether that member is frozen: a frozen one refuses the stepUp
 * (sbl_repl_step_up) and the set elects at the election timeout.  Lock held. */
static int caught_up_target_locked(void)
{
    sbl_optime_t ap = sbl_rs_my_applied();
    int target = -1;
    for (int i = 0; i < rs.cfg.n; i++)
        if (i != rs.self && sbl_rs_electable(&rs.cfg, i) && rs.peer[i].up &&
            sbl_optime_cmp(rs.peer[i].applied, ap) >= 0 &&
            (target < 0 || rs.cfg.m[i].priority > rs.cfg.m[target].priority))
            target = i;
    return target;
}

/* Election hand-off, as mongod: after stepping down, ask the caught-up
 * secondary target (-1: none) to run for election now (skipping the dry
 * run).  Called with the lock held; releases it before the network call. */
static void hand_off_unlock(int target)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static peer_conn_t handoff;
    char host[256] = "";
    if (target >= 0)
        snprintf(host, sizeof(host), "%s", rs.cfg.m[target].host);
    pthread_mutex_unlock(&rs.lock);
    if (host[0] == '\0')
        return;
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_INT32(&cmd, "replSetStepUp", 1);
    BSON_APPEND_BOOL(&cmd, "skipDryRun", true);
    pthread_mutex_lock(&mu);
    run_on(&handoff, host, &cmd, &reply, 5000);
    pthread_mutex_unlock(&mu);
    bson_destroy(&cmd);
    bson_destroy(&reply);
}

/* ---- the thread ------------------------------------------------------------------- */

static bool kicked;

void sbl_rs_hb_kick(void)
{
    pthread_mutex_lock(&rs.lock);
    kicked = true;
    for (int i = 0; i < SBL_RS_MAX_MEMBERS; i++)
        rs.peer[i].next_hb_ms = 0;
    sbl_rs_broadcast_locked();
    pthread_mutex_unlock(&rs.lock);
}

/* How many members have a higher priority than this one (0: the highest). */
static int priority_rank_locked(void)
{
    int rank = 0;
    for (int i = 0; i < rs.cfg.n; i++)
        rank += rs.cfg.m[i].priority > rs.cfg.m[rs.self].priority;
    return rank;
}

/* Priority takeover (as mongod): a SECONDARY of higher priority than the
 * primary it sees, fresh enough (sbl_rs_priority_takeover_fresh: its newest
 * entry of the term of the newest one it knows of, and within 2 s of it).
 * Lock held. */
static bool priority_takeover_applies_locked(int64_t now)
{
    int p = rs.primary, me = rs.self;
    return p >= 0 && p != me && rs.peer[p].up && !rs.catching_up &&
           sbl_rs_electable(&rs.cfg, me) && now >= rs.freeze_until_ms &&
           rs.cfg.m[me].priority > rs.cfg.m[p].priority &&
           sbl_rs_priority_takeover_fresh(sbl_rs_my_applied(), newest_known_locked()) &&
           sbl_storage_can_write();
}

/* Catch-up takeover (as mongod): a SECONDARY not frozen, not in an election
 * of its own, whose disk takes writes, and to which the rules apply
 * (sbl_rs_catchup_takeover_applies: a primary of our term in catch-up behind
 * us, nobody ahead of us).  Lock held. */
static bool catchup_takeover_applies_locked(int64_t now)
{
    sbl_rs_candidate_t c[SBL_RS_MAX_MEMBERS];
    for (int i = 0; i < rs.cfg.n; i++)
        c[i] = (sbl_rs_candidate_t){.up = rs.peer[i].up, .state = rs.peer[i].state,
                                    .applied = rs.peer[i].applied, .term = rs.peer[i].term};
    return !rs.catching_up && now >= rs.freeze_until_ms &&
           sbl_rs_catchup_takeover_applies(&rs.cfg, c, rs.self, rs.primary, rs.term,
                                           sbl_rs_my_applied()) &&
           sbl_storage_can_write();
}

/* When both apply, mongod runs the priority takeover for the member of the
 * highest priority and the catch-up one for the others.  The priority one
 * calls an election after (1 + rank) election timeouts plus the timer's
 * random offset, the catch-up one after catchUpTakeoverDelayMillis (the
 * primary steps down on the higher term), each once its conditions have held
 * that long.  Lock held. */
static int64_t takeover_since_ms, catchup_since_ms;

static bool takeover_due_locked(int64_t now)
{
    int rank = priority_rank_locked();
    if (!priority_takeover_applies_locked(now) ||
        (rank > 0 && catchup_takeover_applies_locked(now))) {
        takeover_since_ms = 0;
        return false;
    }
    if (takeover_since_ms == 0)
        takeover_since_ms = now;
    if (now - takeover_since_ms < (rank + 1) * rs.cfg.election_timeout_ms + rs.election_offset_ms)
        return false;
    takeover_since_ms = 0;
    return true;
}

static bool catchup_takeover_due_locked(int64_t now)
{
    bool ok = catchup_takeover_applies_locked(now) &&
              !(priority_rank_locked() == 0 && priority_takeover_applies_locked(now));
    if (!ok) {
        catchup_since_ms = 0;
        return false;
    }
    if (catchup_since_ms == 0) {
        catchup_since_ms = now;
        log_election("Scheduling a catchup takeover", rs.term + 1);
    }
    if (now - catchup_since_ms < rs.cfg.catchup_takeover_ms)
        return false;
    catchup_since_ms = 0;
    return true;
}

/* The heartbeat sender for member slot i (mongod sends heartbeats to each
 * member on its own schedule): a heartbeat to a member that is paused or
 * behind dropped packets takes its whole timeout, and must not delay the
 * others', or a primary stops hearing from a live majority and steps down. */
static pthread_t peer_thread[SBL_RS_MAX_MEMBERS];
static int npeer_threads;

static void *peer_main(void *arg)
{
    int i = (int)(intptr_t)arg;
    char name[32];
    snprintf(name, sizeof(name), "ReplHB-%d", i);
    sbl_thread_name(name);
    pthread_mutex_lock(&rs.lock);
    while (!rs.stopping) {
        int64_t now = sbl_now_ms();
        if (rs.config == NULL || i >= rs.cfg.n || i == rs.self || rs.config_source[0] != '\0' ||
            rs.peer[i].next_hb_ms > now) {
            /* our own slot, or no peer to ask: look again at the next change or in 50 ms */
            bool peer = rs.config != NULL && i < rs.cfg.n && i != rs.self &&
                        rs.config_source[0] == '\0';
            int64_t wait = peer ? rs.peer[i].next_hb_ms - now : 50;
            sbl_rs_wait_locked(wait > 50 ? 50 : wait);
            continue;
        }
        char host[256];
        bson_t cmd = BSON_INITIALIZER, reply;
        rs.peer[i].next_hb_ms = now + rs.cfg.heartbeat_ms;
        snprintf(host, sizeof(host), "%s", rs.cfg.m[i].host);
        build_heartbeat(&cmd);
        int timeout = (int)(rs.cfg.heartbeat_ms < 2000 ? 2000 : rs.cfg.heartbeat_ms);
        pthread_mutex_unlock(&rs.lock);
        bool ok = run_on(&conns[i], host, &cmd, &reply, timeout);
        pthread_mutex_lock(&rs.lock);
        /* a reconfig may have given the slot to another member meanwhile */
        bool same = rs.config != NULL && i < rs.cfg.n && strcmp(rs.cfg.m[i].host, host) == 0;
        pthread_mutex_unlock(&rs.lock);
        if (same)
            on_heartbeat_reply(i, ok, &reply, now);
        bson_destroy(&cmd);
        bson_destroy(&reply);
        pthread_mutex_lock(&rs.lock);
        now = sbl_now_ms();
        /* the next one an interval after this one ended (unless kicked) */
        if (i < rs.cfg.n && rs.peer[i].next_hb_ms > 0 && rs.peer[i].next_hb_ms < now)
            rs.peer[i].next_hb_ms = now + rs.cfg.heartbeat_ms;
        sbl_rs_broadcast_locked(); /* the checks below run on news */
    }
    pthread_mutex_unlock(&rs.lock);
    conn_reset(&conns[i]);
    return NULL;
}

/* An election the timers called for reason (hb_main: lock held, released
 * while it runs); msg, when not NULL, is logged first. */
static void timer_election_locked(const char *msg, const char *reason)
{
    int64_t next = rs.term + 1;
    sbl_err_t err;
    pthread_mutex_unlock(&rs.lock);
    if (msg != NULL)
        log_election(msg, next);
    sbl_err_clear(&err);
    run_election(false, reason, &err);
    pthread_mutex_lock(&rs.lock);
}

/* The checks: step down without a majority, elections, takeovers.  The
 * senders run beside it, one per member slot, started as the set grows. */
static void *hb_main(void *arg)
{
    sbl_thread_name("ReplCoord");
    (void)arg;
    pthread_mutex_lock(&rs.lock);
    while (!rs.stopping) {
        int64_t now = sbl_now_ms();
        if (rs.config_source[0] != '\0') {
            pthread_mutex_unlock(&rs.lock);
            fetch_config();
            pthread_mutex_lock(&rs.lock);
            continue;
        }
        while (rs.config != NULL && npeer_threads < rs.cfg.n &&
               pthread_create(&peer_thread[npeer_threads], NULL, peer_main,
                              (void *)(intptr_t)npeer_threads) == 0)
            npeer_threads++;
        int st = atomic_load(&rs.state);
        if (rs.config != NULL && rs.self >= 0 && st == SBL_RS_PRIMARY &&
            !sbl_storage_can_write()) {
            /* mongod stops (fassert) when it cannot journal a write, and the
             * set fails over; Sable steps down, hands off, and stays out of
             * elections until the disk takes writes again */
            sbl_rs_step_down_locked("the dbpath cannot take writes (disk full)");
            int target = caught_up_target_locked();
            for (int64_t until = now + 2000; target < 0 && !rs.stopping &&
                                             sbl_now_ms() < until; target = caught_up_target_locked())
                sbl_rs_wait_pos_locked(100); /* heartbeats bring the others' positions */
            hand_off_unlock(target);
            pthread_mutex_lock(&rs.lock);
            continue;
        } else if (rs.config != NULL && rs.self >= 0 && st == SBL_RS_PRIMARY) {
            /* can we still see a majority? */
            int seen = 1;
            for (int i = 0; i < rs.cfg.n; i++)
                if (i != rs.self && rs.cfg.m[i].votes > 0 &&
                    now - rs.peer[i].last_ok_ms < rs.cfg.election_timeout_ms)
                    seen++;
            bool lost = seen < sbl_rs_majority(&rs.cfg);
            for (int i = 0; lost && i < rs.cfg.n; i++)
                if (i != rs.self && rs.cfg.m[i].votes > 0 &&
                    (rs.peer[i].last_ok_ms == 0 && now - rs.election_ms < rs.cfg.election_timeout_ms))
                    lost = false; /* just elected: give the others a timeout to answer */
            if (lost && now - rs.election_ms >= rs.cfg.election_timeout_ms)
                sbl_rs_step_down_locked("can't see a majority of the set");
        } else if (rs.config != NULL && rs.self >= 0 && st == SBL_RS_SECONDARY &&
                   !rs.catching_up && sbl_rs_electable(&rs.cfg, rs.self) &&
                   now >= rs.freeze_until_ms &&
                   now - rs.primary_seen_ms >= rs.cfg.election_timeout_ms +
                                                      rs.election_offset_ms &&
                   (rs.primary < 0 || !rs.peer[rs.primary].up) && sbl_storage_can_write()) {
            timer_election_locked(NULL, "electionTimeout");
            continue;
        } else if (rs.config != NULL && rs.self >= 0 && st == SBL_RS_SECONDARY &&
                   catchup_takeover_due_locked(now)) {
            timer_election_locked("Starting an election for a catchup takeover",
                                  "catchupTakeover");
            continue;
        } else if (rs.config != NULL && rs.self >= 0 && st == SBL_RS_SECONDARY &&
                   takeover_due_locked(now)) {
            timer_election_locked("Starting an election for a priority takeover",
                                  "priorityTakeover");
            continue;
        }
        sbl_rs_publish_stable_locked();
        if (!kicked)
            sbl_rs_wait_locked(50);
        kicked = false;
    }
    pthread_mutex_unlock(&rs.lock);
    for (int i = 0; i < npeer_threads; i++)
        pthread_join(peer_thread[i], NULL);
    npeer_threads = 0;
    conn_reset(&config_conn);
    return NULL;
}

int sbl_rs_hb_start(void)
{
    pthread_once(&mongoc_once, init_mongoc);
    if (pthread_create(&hb_thread, NULL, hb_main, NULL) != 0)
        return -1;
    hb_running = true;
    return 0;
}

void sbl_rs_hb_stop(void)
{
    if (hb_running)
        pthread_join(hb_thread, NULL);
    hb_running = false;
}

/* ---- replSetStepDown, replSetFreeze, replSetStepUp ---------------------------------- */

int sbl_repl_step_up(bool skip_dry_run, sbl_err_t *err)
{
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NoReplicationEnabled, "not running with --replSet");
    if (atomic_load(&rs.state) == SBL_RS_PRIMARY)
        return 0;
    /* Frozen (replSetFreeze, or stepped down for replSetStepDown's period): not
     * a candidate, as mongod's stepUp refuses then (its stepDownUntil). */
    pthread_mutex_lock(&rs.lock);
    bool frozen = sbl_now_ms() < rs.freeze_until_ms;
    pthread_mutex_unlock(&rs.lock);
    if (frozen)
        return sbl_err_set(err, SBL_E_CommandFailed, "Election failed.");
    /* as mongod: a dry run first unless asked to skip it (the hand-off does), so
     * that a member that cannot win leaves the term, and the primary, alone */
    return run_election(skip_dry_run, skip_dry_run ? "stepUpRequestSkipDryRun" : "stepUpRequest",
                        err);
}

int sbl_repl_freeze(int64_t secs, bson_t *r, sbl_err_t *err)
{
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NoReplicationEnabled, "not running with --replSet");
    pthread_mutex_lock(&rs.lock);
    if (atomic_load(&rs.state) == SBL_RS_PRIMARY) {
        pthread_mutex_unlock(&rs.lock);
        return sbl_err_set(err, SBL_E_NotSecondary, "cannot freeze node when primary or "
                           "running for election. state: Primary");
    }
    if (secs == 0) {
        rs.freeze_until_ms = 0;
        BSON_APPEND_UTF8(r, "info", "unfreezing");
    } else {
        rs.freeze_until_ms = sbl_now_ms() + secs * 1000;
        if (secs == 1)
            BSON_APPEND_UTF8(r, "warning", "you really want to freeze for only 1 second?");
    }
    pthread_mutex_unlock(&rs.lock);
    return 0;
}

int sbl_repl_step_down(int64_t step_down_s, int64_t catchup_s, bool force, sbl_err_t *err)
{
    int64_t deadline = sbl_now_ms() + catchup_s * 1000;
    int target = -1;

    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NoReplicationEnabled, "not running with --replSet");
    pthread_mutex_lock(&rs.lock);
    for (;;) {
        if (atomic_load(&rs.state) != SBL_RS_PRIMARY) {
            pthread_mutex_unlock(&rs.lock);
            return sbl_err_set(err, SBL_E_NotWritablePrimary, "not primary so can't step down");
        }
        if ((target = caught_up_target_locked()) >= 0 || force)
            break;
        if (sbl_now_ms() >= deadline) {
            pthread_mutex_unlock(&rs.lock);
            return sbl_err_set(err, SBL_E_MaxTimeMSExpired, "No electable secondaries caught "
                               "up as of %lld. Please use the replSetStepDown command with the "
                               "argument {force: true} to force node to step down.",
                               (long long)sbl_now_ms());
        }
        sbl_rs_wait_pos_locked(100);
    }
    sbl_rs_step_down_locked("replSetStepDown command");
    rs.freeze_until_ms = sbl_now_ms() + step_down_s * 1000;
    hand_off_unlock(target);
    return 0;
}
