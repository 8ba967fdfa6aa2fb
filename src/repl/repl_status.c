/*
 * repl_status.c: what a member says about the set: hello's fields,
 * $clusterTime and operationTime, replSetGetConfig and replSetGetStatus.
 * Everything is read under sbl_rs.lock from the coordinator's state.
 *
 * A member in primary catch-up (from its election win until it takes
 * writes: repl_hb.c) says PRIMARY in replSetGetStatus and names itself hello's
 * primary, while hello says isWritablePrimary: false, secondary: true until
 * catch-up ends, as mongod does; its heartbeats say PRIMARY too (repl_hb.c).
 */
#include "repl/repl_int.h"

#include "auth/auth.h"

#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "server/server.h"

#define rs sbl_rs

bool sbl_rs_catching_up_locked(void)
{
    return rs.catching_up;
}

static void append_optime(bson_t *r, const char *k, sbl_optime_t o)
{
    bson_t ot;
    BSON_APPEND_DOCUMENT_BEGIN(r, k, &ot);
    bson_append_timestamp(&ot, "ts", 2, SBL_TS_SECS(o.ts), SBL_TS_INC(o.ts));
    BSON_APPEND_INT64(&ot, "t", o.t);
    bson_append_document_end(r, &ot);
}

void sbl_repl_append_optime(bson_t *r, const char *k, uint64_t ts, int64_t t)
{
    sbl_optime_t o = {.t = t, .ts = ts};
    append_optime(r, k, o);
}

enum { HOSTS, PASSIVES, ARBITERS };

static int host_kind(const sbl_rs_member_t *m)
{
    return m->hidden ? -1 : m->arbiter ? ARBITERS : m->priority == 0 ? PASSIVES : HOSTS;
}

/* The array k of the members of that kind (hosts: always; the others when
 * there are some), lock held. */
static void append_hosts(bson_t *r, const char *k, int kind)
{
    bson_t arr;
    char key[16];
    int n = 0;
    for (int i = 0; i < rs.cfg.n; i++)
        n += host_kind(&rs.cfg.m[i]) == kind;
    if (n == 0 && kind != HOSTS)
        return;
    n = 0;
    BSON_APPEND_ARRAY_BEGIN(r, k, &arr);
    for (int i = 0; i < rs.cfg.n; i++) {
        if (host_kind(&rs.cfg.m[i]) != kind)
            continue;
        snprintf(key, sizeof(key), "%d", n++);
        BSON_APPEND_UTF8(&arr, key, rs.cfg.m[i].host);
    }
    bson_append_array_end(r, &arr);
}

void sbl_repl_append_hello(bson_t *r)
{
    int st = atomic_load(&rs.state);

    if (st == SBL_RS_STANDALONE)
        return;
    pthread_mutex_lock(&rs.lock);
    if (rs.config == NULL || rs.self < 0) {
        pthread_mutex_unlock(&rs.lock);
        BSON_APPEND_BOOL(r, "secondary", false);
        BSON_APPEND_UTF8(r, "info", "Does not have a valid replica set config");
        BSON_APPEND_BOOL(r, "isreplicaset", true);
        return;
    }
    sbl_optime_t ap = sbl_rs_my_applied();
    int64_t wall = sbl_oplog_last_wall_ms();
    bson_t lw;
    /* hosts: electable-looking members; passives: priority 0; arbiters;
     * hidden members in none (mongod's isMaster) */
    append_hosts(r, "hosts", HOSTS);
    append_hosts(r, "passives", PASSIVES);
    append_hosts(r, "arbiters", ARBITERS);
    const sbl_rs_member_t *me = &rs.cfg.m[rs.self];
    BSON_APPEND_UTF8(r, "setName", rs.set_name);
    BSON_APPEND_INT32(r, "setVersion", (int32_t)rs.cfg.version);
    BSON_APPEND_BOOL(r, "secondary", st == SBL_RS_SECONDARY);
    bool up = sbl_rs_catching_up_locked();
    if (up || rs.primary >= 0)
        BSON_APPEND_UTF8(r, "primary", rs.cfg.m[up ? rs.self : rs.primary].host);
    if (me->arbiter)
        BSON_APPEND_BOOL(r, "arbiterOnly", true);
    else if (me->priority == 0 && !me->hidden)
        BSON_APPEND_BOOL(r, "passive", true);
    if (me->hidden)
        BSON_APPEND_BOOL(r, "hidden", true);
    if (me->delay_s > 0)
        BSON_APPEND_INT64(r, "secondaryDelaySecs", me->delay_s);
    if (me->ntags > 0) {
        bson_t tags;
        BSON_APPEND_DOCUMENT_BEGIN(r, "tags", &tags);
        for (int t = 0; t < me->ntags; t++)
            BSON_APPEND_UTF8(&tags, me->tags[t].k, me->tags[t].v);
        bson_append_document_end(r, &tags);
    }
    BSON_APPEND_UTF8(r, "me", me->host);
    if (st == SBL_RS_PRIMARY)
        BSON_APPEND_OID(r, "electionId", &rs.election_id);
    BSON_APPEND_DOCUMENT_BEGIN(r, "lastWrite", &lw);
    append_optime(&lw, "opTime", ap);
    BSON_APPEND_DATE_TIME(&lw, "lastWriteDate", (wall / 1000) * 1000);
    append_optime(&lw, "majorityOpTime", rs.commit);
    BSON_APPEND_DATE_TIME(&lw, "majorityWriteDate", (rs.commit_wall / 1000) * 1000);
    bson_append_document_end(r, &lw);
    pthread_mutex_unlock(&rs.lock);
}

void sbl_repl_append_cluster_time(bson_t *r)
{
    uint64_t ts;
    int st = atomic_load_explicit(&rs.state, memory_order_relaxed);
    if ((st != SBL_RS_PRIMARY && st != SBL_RS_SECONDARY) || (ts = sbl_oplog_last_ts()) == 0)
        return;
    uint8_t hash[20];
    int64_t key_id;
    if (sbl_rs_sign_time(ts, hash, &key_id))
        sbl_ctime_append(r, ts, hash, key_id);
    bson_append_timestamp(r, "operationTime", -1, SBL_TS_SECS(ts), SBL_TS_INC(ts));
}

int sbl_repl_get_config(bson_t *r, sbl_err_t *err)
{
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NoReplicationEnabled, "not running with --replSet");
    pthread_mutex_lock(&rs.lock);
    if (rs.config == NULL) {
        pthread_mutex_unlock(&rs.lock);
        return sbl_err_set(err, SBL_E_NotYetInitialized, "Node not yet initialized");
    }
    BSON_APPEND_DOCUMENT(r, "config", rs.config);
    pthread_mutex_unlock(&rs.lock);
    return 0;
}

/* The _id of the member named host ("" or unknown: -1), lock held. */
static int member_id_of(const char *host)
{
    for (int i = 0; host[0] != '\0' && i < rs.cfg.n; i++)
        if (strcmp(rs.cfg.m[i].host, host) == 0)
            return rs.cfg.m[i].id;
    return -1;
}

/* electionCandidateMetrics: the election this primary won and its
 * catch-up (targetCatchupOpTime only when a member was ahead).  Lock held. */
static void append_candidate_metrics(bson_t *r)
{
    bson_t m;
    BSON_APPEND_DOCUMENT_BEGIN(r, "electionCandidateMetrics", &m);
    BSON_APPEND_UTF8(&m, "lastElectionReason", rs.won.reason);
    BSON_APPEND_DATE_TIME(&m, "lastElectionDate", rs.won.date_ms);
    BSON_APPEND_INT64(&m, "electionTerm", rs.won.term);
    append_optime(&m, "lastCommittedOpTimeAtElection", rs.won.commit);
    append_optime(&m, "lastSeenOpTimeAtElection", rs.won.seen);
    BSON_APPEND_INT32(&m, "numVotesNeeded", rs.won.votes_needed);
    BSON_APPEND_DOUBLE(&m, "priorityAtElection", rs.won.priority);
    BSON_APPEND_INT64(&m, "electionTimeoutMillis", rs.won.timeout_ms);
    if (rs.won.target.ts != 0)
        append_optime(&m, "targetCatchupOpTime", rs.won.target);
    BSON_APPEND_INT64(&m, "numCatchUpOps", rs.won.catchup_ops);
    BSON_APPEND_DATE_TIME(&m, "newTermStartDate", rs.won.new_term_ms);
    bson_append_document_end(r, &m);
}

int sbl_repl_get_status(bson_t *r, sbl_err_t *err)
{
    SBL_RET(sbl_rs_lock_initiated(err));
    int st = sbl_rs_catching_up_locked() ? SBL_RS_PRIMARY : atomic_load(&rs.state);
    sbl_optime_t ap = sbl_rs_my_applied();
    int64_t wall = sbl_oplog_last_wall_ms(), now = sbl_now_ms();
    int voters = sbl_rs_voters(&rs.cfg);
    int data_voters = sbl_rs_data_voters(&rs.cfg);
    bson_t ot, members, m;
    char key[16];
    BSON_APPEND_UTF8(r, "set", rs.set_name);
    BSON_APPEND_DATE_TIME(r, "date", now);
    BSON_APPEND_INT32(r, "myState", st);
    BSON_APPEND_INT64(r, "term", rs.term);
    BSON_APPEND_UTF8(r, "syncSourceHost", rs.sync_source);
    BSON_APPEND_INT32(r, "syncSourceId", member_id_of(rs.sync_source));
    BSON_APPEND_INT64(r, "heartbeatIntervalMillis", rs.cfg.heartbeat_ms);
    BSON_APPEND_INT32(r, "majorityVoteCount", voters / 2 + 1);
    BSON_APPEND_INT32(r, "writeMajorityCount", sbl_rs_write_majority(&rs.cfg));
    BSON_APPEND_INT32(r, "votingMembersCount", voters);
    BSON_APPEND_INT32(r, "writableVotingMembersCount", data_voters);
    BSON_APPEND_DOCUMENT_BEGIN(r, "optimes", &ot);
    append_optime(&ot, "lastCommittedOpTime", rs.commit);
    BSON_APPEND_DATE_TIME(&ot, "lastCommittedWallTime", rs.commit_wall);
    append_optime(&ot, "readConcernMajorityOpTime", rs.commit);
    append_optime(&ot, "appliedOpTime", ap);
    append_optime(&ot, "durableOpTime", ap);
    BSON_APPEND_DATE_TIME(&ot, "lastAppliedWallTime", wall);
    BSON_APPEND_DATE_TIME(&ot, "lastDurableWallTime", wall);
    bson_append_document_end(r, &ot);
    if (st == SBL_RS_STARTUP2)
        sbl_rs_append_initial_sync_status(r);
    uint64_t ck = sbl_storage_last_checkpoint_ts(); /* what a restart recovers from */
    bson_append_timestamp(r, "lastStableRecoveryTimestamp", -1, SBL_TS_SECS(ck), SBL_TS_INC(ck));
    BSON_APPEND_ARRAY_BEGIN(r, "members", &members);
    for (int i = 0; i < rs.cfg.n; i++) {
        const sbl_rs_peer_t *p = &rs.peer[i];
        bool self = i == rs.self;
        int mst = self ? st : (p->up ? p->state : SBL_RS_DOWN);
        sbl_optime_t o = self ? ap : p->applied;
        snprintf(key, sizeof(key), "%d", i);
        BSON_APPEND_DOCUMENT_BEGIN(&members, key, &m);
        BSON_APPEND_INT32(&m, "_id", rs.cfg.m[i].id);
        BSON_APPEND_UTF8(&m, "name", rs.cfg.m[i].host);
        BSON_APPEND_DOUBLE(&m, "health", self || p->up ? 1.0 : 0.0);
        BSON_APPEND_INT32(&m, "state", mst);
        BSON_APPEND_UTF8(&m, "stateStr", sbl_rs_state_str(mst));
        BSON_APPEND_INT64(&m, "uptime", self ? (now - sbl_server_start_ms()) / 1000
                                             : (p->up ? (now - p->up_since_ms) / 1000 : 0));
        append_optime(&m, "optime", o);
        BSON_APPEND_DATE_TIME(&m, "optimeDate", (int64_t)SBL_TS_SECS(o.ts) * 1000);
        BSON_APPEND_DATE_TIME(&m, "lastAppliedWallTime", self ? wall : p->applied_wall);
        if (!self) {
            BSON_APPEND_DATE_TIME(&m, "lastHeartbeat", p->last_ok_ms);
            BSON_APPEND_INT64(&m, "pingMs", p->ping_ms);
            /* lag behind this member, in seconds of oplog time */
            int64_t lag = (int64_t)SBL_TS_SECS(ap.ts) - (int64_t)SBL_TS_SECS(o.ts);
            BSON_APPEND_INT64(&m, "lagSecs", lag > 0 ? lag : 0);
        }
        BSON_APPEND_UTF8(&m, "syncSourceHost", self ? rs.sync_source : p->sync_source);
        BSON_APPEND_INT32(&m, "syncSourceId",
                          member_id_of(self ? rs.sync_source : p->sync_source));
        BSON_APPEND_UTF8(&m, "infoMessage", self ? rs.sync_msg : "");
        if (mst == SBL_RS_PRIMARY && self) {
            bson_append_timestamp(&m, "electionTime", -1, SBL_TS_SECS(rs.election_ts),
                                  SBL_TS_INC(rs.election_ts));
            BSON_APPEND_DATE_TIME(&m, "electionDate", rs.election_ms);
        }
        BSON_APPEND_INT32(&m, "configVersion", (int32_t)rs.cfg.version);
        BSON_APPEND_INT64(&m, "configTerm", rs.cfg.term);
        if (self)
            BSON_APPEND_BOOL(&m, "self", true);
        BSON_APPEND_UTF8(&m, "lastHeartbeatMessage", self ? "" : p->msg);
        bson_append_document_end(&members, &m);
    }
    bson_append_array_end(r, &members);
    if (st == SBL_RS_PRIMARY && rs.won.reason != NULL)
        append_candidate_metrics(r);
    pthread_mutex_unlock(&rs.lock);
    return 0;
}
