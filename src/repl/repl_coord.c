/*
 * repl_coord.c: the replication coordinator: the member's state, term and
 * durable lastVote, its config (kept in local.system.replset), initiate,
 * adopting a newer config from a heartbeat, and the transitions between
 * states (pv1, as mongod's ReplicationCoordinator and TopologyCoordinator).
 *
 * States: STARTUP (started with --replSet, no config: writes outside
 * "local" fail with NotWritablePrimary) -> replSetInitiate here, or a config
 * received in a heartbeat response -> SECONDARY -> an election won
 * (repl_hb.c) -> PRIMARY -> a higher term seen, a majority lost for an
 * election timeout, or replSetStepDown -> SECONDARY.  A set whose only
 * voter is this member elects itself at once (initiate and restart).
 * Each change of state moves the topologyVersion counter.
 *
 * What must stay true: term and lastVote are durable before a vote is
 * answered or an election is run; the config, term and members' positions
 * change only under sbl_rs.lock; state is read without it.
 */
#include "repl/repl_int.h"

#include <time.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/clock.h"
#include "auth/auth.h"
#include "common/log.h"
#include "net/net.h"
#include "op/op.h"
#include "server/server.h"

#define ELECTION_NS "local.replset.election"

sbl_rs_t sbl_rs = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
                   .pos_cond = PTHREAD_COND_INITIALIZER,
                   .self = -1, .primary = -1, .last_vote_term = -1,
                   .state = SBL_RS_STANDALONE};
#define rs sbl_rs

const char *sbl_rs_state_str(int st)
{
    switch (st) {
    case SBL_RS_STARTUP: return "STARTUP";
    case SBL_RS_PRIMARY: return "PRIMARY";
    case SBL_RS_SECONDARY: return "SECONDARY";
    case SBL_RS_RECOVERING: return "RECOVERING";
    case SBL_RS_STARTUP2: return "STARTUP2";
    case SBL_RS_ROLLBACK: return "ROLLBACK";
    case SBL_RS_ARBITER: return "ARBITER";
    case SBL_RS_DOWN: return "(not reachable/healthy)";
    default: return "UNKNOWN";
    }
}

/* Wait on c (sbl_rs.cond or pos_cond), lock held, at most ms: until a
 * broadcast, or the time is up. */
static void wait_on(pthread_cond_t *c, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (ms < 1 ? 1 : ms) * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(c, &rs.lock, &ts);
}

void sbl_rs_wait_locked(int64_t ms)
{
    wait_on(&rs.cond, ms);
}

void sbl_rs_wait_pos_locked(int64_t ms)
{
    wait_on(&rs.pos_cond, ms);
}

void sbl_rs_broadcast_locked(void)
{
    pthread_cond_broadcast(&rs.cond);
    pthread_cond_broadcast(&rs.pos_cond);
}

bool sbl_repl_enabled(void)
{
    return atomic_load(&rs.state) != SBL_RS_STANDALONE;
}

bool sbl_repl_is_primary(void)
{
    return atomic_load(&rs.state) == SBL_RS_PRIMARY;
}

uint64_t sbl_repl_majority_ts(void)
{
    uint64_t ts;
    pthread_mutex_lock(&rs.lock);
    if (rs.config == NULL)
        ts = 0;
    else if (atomic_load(&rs.state) == SBL_RS_PRIMARY && sbl_rs_voters(&rs.cfg) == 1)
        ts = sbl_oplog_committed().ts; /* a set of one voter: whatever is visible */
    else
        ts = rs.commit.ts;
    pthread_mutex_unlock(&rs.lock);
    return ts;
}

/* The config has one voter (set with rs.cfg, read without rs.lock). */
static atomic_bool one_voter;

uint64_t sbl_repl_readable_ts(void)
{
    uint64_t last = sbl_repl_last_op_ts();
    if (atomic_load(&one_voter) && atomic_load(&rs.state) == SBL_RS_PRIMARY)
        return last;
    uint64_t commit = __atomic_load_n(&rs.commit.ts, __ATOMIC_RELAXED);
    return commit < last ? commit : last;
}

uint64_t sbl_repl_commit_generation(void)
{
    /* the commit point never goes back, so its ts serves as the counter */
    return __atomic_load_n(&rs.commit.ts, __ATOMIC_RELAXED);
}

bool sbl_repl_writable(void)
{
    int st = atomic_load(&rs.state);
    return st == SBL_RS_STANDALONE || st == SBL_RS_PRIMARY;
}

int64_t sbl_repl_topology_counter(void)
{
    return atomic_load(&rs.topology);
}

int sbl_repl_check_write(const char *db, sbl_err_t *err)
{
    int st = atomic_load_explicit(&rs.state, memory_order_relaxed);
    if (st == SBL_RS_STANDALONE || st == SBL_RS_PRIMARY || sbl_repl_applying != NULL ||
        sbl_repl_cloning || strcmp(db, "local") == 0)
        return 0;
    return sbl_err_set(err, SBL_E_NotWritablePrimary, "not primary");
}

int sbl_repl_check_read(const char *db, bool secondary_ok, sbl_err_t *err)
{
    int st = atomic_load_explicit(&rs.state, memory_order_relaxed);
    if (st == SBL_RS_STANDALONE || st == SBL_RS_PRIMARY || strcmp(db, "local") == 0)
        return 0;
    if (st == SBL_RS_SECONDARY)
        return secondary_ok ? 0 : sbl_err_set(err, SBL_E_NotPrimaryNoSecondaryOk,
                                              "not primary and secondaryOk=false");
    if (st == SBL_RS_STARTUP)
        return 0; /* not yet initiated: served, as before (docs/replication.md) */
    return sbl_err_set(err, SBL_E_NotPrimaryOrSecondary, "node is not in primary or recovering "
                       "state");
}

/* The newest committed entry, never one whose transaction is still open
 * or aborted: what heartbeats, replSetUpdatePosition and hello's lastWrite
 * report, so no member counts towards the commit point an entry it may
 * still lose. */
sbl_optime_t sbl_rs_my_applied(void)
{
    return sbl_oplog_committed();
}

/* The newest entry that committed: a write's acknowledgement waits for it
 * (not the last ts handed out, whose transaction may still roll back: no
 * member would ever have it). */
uint64_t sbl_repl_last_op_ts(void)
{
    return sbl_oplog_committed().ts;
}

int sbl_repl_member_count(void)
{
    pthread_mutex_lock(&rs.lock);
    int n = rs.config != NULL ? rs.cfg.n - sbl_rs_arbiters(&rs.cfg) : 1;
    pthread_mutex_unlock(&rs.lock);
    return n;
}

static void set_state_locked(int st)
{
    if (atomic_load(&rs.state) == st)
        return;
    atomic_store(&rs.state, st);
    atomic_fetch_add(&rs.topology, 1);
    sbl_versioned_invalidate(); /* sessions check their records again (retryable.c) */
    sbl_rs_broadcast_locked();
}

void sbl_rs_set_state_locked(int st)
{
    set_state_locked(st);
}

/* ---- config ------------------------------------------------------------------ */

static int64_t num_field(const bson_t *d, const char *k, int64_t def)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, d, k) && BSON_ITER_HOLDS_NUMBER(&it) ? bson_iter_as_int64(&it)
                                                                         : def;
}

/* True when host ("name[:port]") names this process. */
static bool host_is_me(const char *host)
{
    char name[256];
    const char *colon = strrchr(host, ':');
    size_t n = colon != NULL ? (size_t)(colon - host) : strlen(host);
    long port = colon != NULL ? strtol(colon + 1, NULL, 10) : 27017;
    const sbl_options_t *o = sbl_server_options();

    if (port != rs.port || n == 0 || n >= sizeof(name))
        return false;
    memcpy(name, host, n);
    name[n] = '\0';
    if (strcmp(name, "localhost") == 0 || strcmp(name, "127.0.0.1") == 0 ||
        strcmp(name, "::1") == 0)
        return true;
    char hn[256] = "";
    if (gethostname(hn, sizeof(hn) - 1) == 0 && strcmp(name, hn) == 0)
        return true;
    for (size_t i = 0; o != NULL && i < o->nbind; i++)
        if (strcmp(name, o->bind_ips[i]) == 0)
            return true;
    return false;
}

static int find_self(const sbl_rs_config_t *cfg)
{
    for (int i = 0; i < cfg->n; i++)
        if (host_is_me(cfg->m[i].host))
            return i;
    return -1;
}

/* Check a replSetInitiate config as mongod does and build the stored one
 * (defaults filled in, term 0) in out; *cfgp gets it parsed. */
static int normalize_config(const bson_t *in, bson_t *out, sbl_rs_config_t *cfg, sbl_err_t *err)
{
    bson_iter_t it;
    SBL_RET(sbl_rs_config_parse(in, cfg, err));
    if (strcmp(cfg->set_name, rs.set_name) != 0)
        return sbl_err_set(err, SBL_E_InvalidReplicaSetConfig, "Attempting to initiate a "
                           "replica set with name %s, but command line reports %s; rejecting",
                           cfg->set_name, rs.set_name);
    if (find_self(cfg) < 0)
        return sbl_err_set(err, SBL_E_NodeNotFound, "No host described in new configuration "
                           "with {version: %lld, term: 0} for replica set %s maps to this node",
                           (long long)cfg->version, cfg->set_name);
    cfg->term = 0;
    bson_t members, mem, tags, settings, modes, gle, in_settings;
    bson_oid_t set_id;
    bool has_settings = bson_iter_init_find(&it, in, "settings") && BSON_ITER_HOLDS_DOCUMENT(&it);
    if (has_settings)
        sbl_iter_doc(&it, &in_settings);
    BSON_APPEND_UTF8(out, "_id", cfg->set_name);
    BSON_APPEND_INT32(out, "version", (int32_t)cfg->version);
    BSON_APPEND_INT32(out, "term", 0);
    BSON_APPEND_ARRAY_BEGIN(out, "members", &members);
    for (int i = 0; i < cfg->n; i++) {
        char key[16];
        const sbl_rs_member_t *m = &cfg->m[i];
        snprintf(key, sizeof(key), "%d", i);
        BSON_APPEND_DOCUMENT_BEGIN(&members, key, &mem);
        BSON_APPEND_INT32(&mem, "_id", m->id);
        BSON_APPEND_UTF8(&mem, "host", m->host);
        BSON_APPEND_BOOL(&mem, "arbiterOnly", m->arbiter);
        BSON_APPEND_BOOL(&mem, "buildIndexes", m->build_indexes);
        BSON_APPEND_BOOL(&mem, "hidden", m->hidden);
        BSON_APPEND_DOUBLE(&mem, "priority", m->priority);
        BSON_APPEND_DOCUMENT_BEGIN(&mem, "tags", &tags);
        for (int t = 0; t < m->ntags; t++)
            BSON_APPEND_UTF8(&tags, m->tags[t].k, m->tags[t].v);
        bson_append_document_end(&mem, &tags);
        BSON_APPEND_INT64(&mem, "secondaryDelaySecs", m->delay_s);
        BSON_APPEND_INT32(&mem, "votes", m->votes);
        bson_append_document_end(&members, &mem);
    }
    bson_append_array_end(out, &members);
    BSON_APPEND_INT64(out, "protocolVersion", 1);
    BSON_APPEND_BOOL(out, "writeConcernMajorityJournalDefault", true);
    BSON_APPEND_DOCUMENT_BEGIN(out, "settings", &settings);
    BSON_APPEND_BOOL(&settings, "chainingAllowed", cfg->chaining);
    BSON_APPEND_INT32(&settings, "heartbeatIntervalMillis", (int32_t)cfg->heartbeat_ms);
    BSON_APPEND_INT32(&settings, "heartbeatTimeoutSecs", 10);
    BSON_APPEND_INT32(&settings, "electionTimeoutMillis", (int32_t)cfg->election_timeout_ms);
    BSON_APPEND_INT32(&settings, "catchUpTimeoutMillis", (int32_t)cfg->catchup_timeout_ms);
    BSON_APPEND_INT32(&settings, "catchUpTakeoverDelayMillis",
                      (int32_t)cfg->catchup_takeover_ms);
    BSON_APPEND_DOCUMENT_BEGIN(&settings, "getLastErrorModes", &modes);
    for (int i = 0; i < cfg->nmodes; i++) {
        bson_t md;
        BSON_APPEND_DOCUMENT_BEGIN(&modes, cfg->modes[i].name, &md);
        for (int c = 0; c < cfg->modes[i].n; c++)
            BSON_APPEND_INT32(&md, cfg->modes[i].tag[c], cfg->modes[i].count[c]);
        bson_append_document_end(&modes, &md);
    }
    bson_append_document_end(&settings, &modes);
    BSON_APPEND_DOCUMENT_BEGIN(&settings, "getLastErrorDefaults", &gle);
    BSON_APPEND_INT32(&gle, "w", 1);
    BSON_APPEND_INT32(&gle, "wtimeout", 0);
    bson_append_document_end(&settings, &gle);
    bson_oid_init(&set_id, NULL);
    BSON_APPEND_OID(&settings, "replicaSetId", &set_id);
    bson_append_document_end(out, &settings);
    return 0;
}

/* The first document of ns, if any (*foundp). */
static int load_one(sbl_session_t *s, const char *ns, bson_t *out, bool *foundp, sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    sbl_scan_t *scan;
    bson_t doc;
    bool done;
    int rc;

    *foundp = false;
    rc = sbl_coll_open(s, ns, false, &c, NULL, err);
    if (rc == SBL_E_NamespaceNotFound) {
        sbl_err_clear(err);
        return 0;
    }
    SBL_RET(rc);
    if ((rc = sbl_scan_open(s, c, NULL, false, &scan, err)) == 0) {
        if ((rc = sbl_scan_next(scan, &doc, &done, err)) == 0 && !done) {
            bson_copy_to(&doc, out);
            *foundp = true;
        }
        sbl_scan_close(scan);
    }
    sbl_coll_release(c);
    return rc;
}

/* Make doc the only document of ns (local: not logged). */
static int store_one(sbl_session_t *s, const char *ns, const bson_t *doc, sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    bson_t old = BSON_INITIALIZER;
    bool found;
    int rc;

    SBL_RET(load_one(s, ns, &old, &found, err));
    if ((rc = sbl_coll_open(s, ns, true, &c, NULL, err)) == 0 &&
        (rc = sbl_txn_begin(s, err)) == 0) {
        if (found)
            rc = sbl_write(s, c, SBL_WRITE_DELETE, &old, NULL, NULL, err);
        if (rc == 0)
            rc = sbl_write(s, c, SBL_WRITE_INSERT, NULL, doc, NULL, err);
        if (rc == 0)
            rc = sbl_txn_commit(s, err);
        else
            sbl_txn_abort(s);
    }
    if (c != NULL)
        sbl_coll_release(c);
    bson_destroy(&old);
    return rc;
}

int sbl_rs_persist_vote_locked(sbl_err_t *err)
{
    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_INT32(&d, "_id", 0);
    BSON_APPEND_INT64(&d, "term", rs.term);
    BSON_APPEND_INT64(&d, "candidateIndex", rs.last_vote_candidate);
    BSON_APPEND_INT64(&d, "lastVoteTerm", rs.last_vote_term);
    int rc = store_one(sbl_session_get(), ELECTION_NS, &d, err);
    bson_destroy(&d);
    return rc;
}

static void log_attr(int level, int id, const char *msg, const char *k1, const char *v1,
                     const char *k2, int64_t v2)
{
    bson_t attr = BSON_INITIALIZER;
    if (k1 != NULL)
        BSON_APPEND_UTF8(&attr, k1, v1);
    if (k2 != NULL)
        BSON_APPEND_INT64(&attr, k2, v2);
    sbl_log(level, "REPL", id, msg, &attr);
    bson_destroy(&attr);
}

void sbl_rs_update_term_locked(int64_t term)
{
    sbl_err_t err;
    if (term <= rs.term)
        return;
    rs.term = term; /* the oplog's term is set by the next election won */
    sbl_err_clear(&err);
    if (sbl_rs_persist_vote_locked(&err) != 0)
        log_attr(SBL_LOG_ERROR, 7360101, "Could not store the term", "error", err.msg, NULL, 0);
    if (atomic_load(&rs.state) == SBL_RS_PRIMARY || rs.catching_up)
        sbl_rs_count_higher_term_step_down();
    if (atomic_load(&rs.state) == SBL_RS_PRIMARY)
        sbl_rs_step_down_locked("a higher term was seen");
    rs.primary = -1;
}

void sbl_rs_reset_election_timer_locked(int64_t now)
{
    rs.primary_seen_ms = now;
    /* mongod: a random offset up to 15% of electionTimeoutMillis */
    int64_t lim = rs.cfg.election_timeout_ms * 15 / 100;
    rs.election_offset_ms = lim > 0 ? random() % (lim + 1) : 0;
}

void sbl_rs_step_down_locked(const char *why)
{
    if (atomic_load(&rs.state) != SBL_RS_PRIMARY)
        return;
    /* First no write of the term commits any more (those the primary check
     * let through fail with 11602; commits under way finish), then the
     * member says it is no longer primary (repl_oplog.c).  The writes
     * under way that wait on a prepared transaction end (sbl_op_backoff). */
    sbl_op_note_step_down();
    sbl_oplog_set_term(-1);
    set_state_locked(SBL_RS_SECONDARY);
    rs.primary = -1;
    sbl_rs_reset_election_timer_locked(sbl_now_ms());
    log_attr(SBL_LOG_INFO, 21358, "Replica set state transition: PRIMARY -> SECONDARY", "reason",
             why, "term", rs.term);
}

int sbl_rs_become_primary_locked(int64_t term, sbl_err_t *err)
{
    if (term != rs.term)
        return sbl_err_set(err, SBL_E_CommandFailed, "term moved on during the election");
    sbl_oplog_set_term(term);
    sbl_oplog_set_active(true);
    /* Say PRIMARY first: the no-op is this member's first write of the term. */
    atomic_store(&rs.state, SBL_RS_PRIMARY);
    int rc = sbl_oplog_noop(sbl_session_get(), "new primary", err);
    if (rc != 0) {
        atomic_store(&rs.state, SBL_RS_SECONDARY);
        sbl_oplog_set_term(-1);
        return rc;
    }
    sbl_repl_election_id(term, &rs.election_id);
    rs.election_ts = sbl_oplog_last_ts();
    rs.election_ms = sbl_now_ms();
    rs.primary = rs.self;
    for (int i = 0; i < rs.cfg.n; i++)
        rs.peer[i].next_hb_ms = 0; /* tell the others at once */
    atomic_fetch_add(&rs.topology, 1);
    sbl_rs_broadcast_locked();
    sbl_rs_update_commit_locked();
    log_attr(SBL_LOG_INFO, 21331, "Transition to primary complete; database writes are now "
             "permitted", "replSet", rs.set_name, "term", term);
    return 0;
}

/* A set whose only voter is this electable member elects itself. */
static int maybe_elect_alone_locked(sbl_err_t *err)
{
    if (sbl_rs_voters(&rs.cfg) != 1 || !sbl_rs_electable(&rs.cfg, rs.self))
        return 0;
    rs.term++;
    rs.last_vote_term = rs.term;
    rs.last_vote_candidate = rs.self;
    SBL_RET(sbl_rs_persist_vote_locked(err));
    return sbl_rs_become_primary_locked(rs.term, err);
}

/* Take cfg (parsed from doc) as the config (lock held). */
static void install_config_locked(const bson_t *doc, const sbl_rs_config_t *cfg)
{
    if (rs.config != NULL)
        bson_destroy(rs.config);
    rs.config = bson_copy(doc);
    rs.cfg = *cfg;
    atomic_store(&one_voter, sbl_rs_voters(cfg) == 1);
    rs.self = find_self(cfg);
    sbl_storage_set_checkpoint_phase(sbl_rs_checkpoint_phase(cfg, rs.self));
    for (int i = 0; i < SBL_RS_MAX_MEMBERS; i++) {
        memset(&rs.peer[i], 0, sizeof(rs.peer[i]));
        rs.peer[i].state = SBL_RS_STARTUP;
    }
    sbl_rs_reset_election_timer_locked(sbl_now_ms());
}

bool sbl_rs_self_builds_indexes(void)
{
    pthread_mutex_lock(&rs.lock);
    bool build = rs.self < 0 || rs.cfg.m[rs.self].build_indexes;
    pthread_mutex_unlock(&rs.lock);
    return build;
}

int sbl_rs_adopt_config(const bson_t *doc, sbl_err_t *err)
{
    sbl_rs_config_t *cfg = malloc(sizeof(*cfg));
    int rc = 0;
    if (cfg == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    if ((rc = sbl_rs_config_parse(doc, cfg, err)) != 0)
        goto out;
    pthread_mutex_lock(&rs.lock);
    if (strcmp(cfg->set_name, rs.set_name) != 0 ||
        (rs.config != NULL && cfg->version <= rs.cfg.version)) {
        pthread_mutex_unlock(&rs.lock);
        goto out;
    }
    if (find_self(cfg) < 0) {
        pthread_mutex_unlock(&rs.lock);
        rc = sbl_err_set(err, SBL_E_NodeNotFound, "this node is not in the received config");
        goto out;
    }
    sbl_session_t *s = sbl_session_get();
    bool first = rs.config == NULL;
    if ((rc = sbl_oplog_open(s, rs.oplog_bytes, true, err)) == 0 &&
        (rc = store_one(s, SBL_REPLSET_NS, doc, err)) == 0) {
        install_config_locked(doc, cfg);
        if (first) { /* SECONDARY once caught up with a source (repl_sync.c) */
            sbl_oplog_set_active(true);
            set_state_locked(rs.cfg.m[rs.self].arbiter ? SBL_RS_ARBITER : SBL_RS_STARTUP2);
        }
        atomic_fetch_add(&rs.topology, 1);
        log_attr(SBL_LOG_INFO, 21392, "New replica set config in use", "set", rs.set_name,
                 "version", cfg->version);
    }
    pthread_mutex_unlock(&rs.lock);
    sbl_rs_hb_kick();
out:
    free(cfg);
    return rc;
}

/* ---- start, stop, initiate -------------------------------------------------------- */

bool sbl_rs_member_uri(char *buf, size_t n, const char *host, const char *opts)
{
    return sbl_auth_cluster_uri(buf, n, rs.cluster_key, host, opts);
}

int sbl_rs_dial(const char *host)
{
    int fd = sbl_client_dial(host, SBL_RS_CONNECT_MS, rs.cluster_key);
    if (fd < 0)
        return -1;
    /* The handshake, as a driver's, within the connect's timeout: a member
     * whose kernel accepts but which answers nothing (stopped, hung) fails
     * here in SBL_RS_CONNECT_MS, not in SBL_RS_SOCKET_MS at every report. */
    bson_t hello = BSON_INITIALIZER, reply, client, app, drv, os;
    BSON_APPEND_INT32(&hello, "hello", 1);
    /* The metadata libmongoc sent for us: an application name starting with
     * "sable-" marks another member's connection, which test fail points
     * (failCommand) leave alone, as mongod's spare internal clients. */
    BSON_APPEND_DOCUMENT_BEGIN(&hello, "client", &client);
    BSON_APPEND_DOCUMENT_BEGIN(&client, "application", &app);
    BSON_APPEND_UTF8(&app, "name", "sable-repl");
    bson_append_document_end(&client, &app);
    BSON_APPEND_DOCUMENT_BEGIN(&client, "driver", &drv);
    BSON_APPEND_UTF8(&drv, "name", "sable-repl");
    BSON_APPEND_UTF8(&drv, "version", SBL_VERSION);
    bson_append_document_end(&client, &drv);
    BSON_APPEND_DOCUMENT_BEGIN(&client, "os", &os);
    BSON_APPEND_UTF8(&os, "type", "Linux");
    bson_append_document_end(&client, &os);
    bson_append_document_end(&hello, &client);
    bool ok = sbl_client_run(fd, "admin", &hello, NULL, &reply);
    bson_destroy(&reply);
    bson_destroy(&hello);
    if (!ok) {
        sbl_client_close(fd);
        return -1;
    }
    struct timeval tv = {.tv_sec = SBL_RS_SOCKET_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
}

int sbl_repl_start(const sbl_repl_config_t *cfg, sbl_err_t *err)
{
    if (cfg->set_name == NULL || cfg->set_name[0] == '\0') {
        atomic_store(&rs.state, SBL_RS_STANDALONE);
        return 0;
    }
    rs.set_name = bson_strdup(cfg->set_name);
    rs.cluster_key = cfg->cluster_key != NULL ? bson_strdup(cfg->cluster_key) : NULL;
    rs.dbpath = bson_strdup(cfg->dbpath != NULL ? cfg->dbpath : ".");
    rs.port = cfg->port;
    if (cfg->oplog_size_mb > 0) {
        rs.oplog_bytes = cfg->oplog_size_mb * 1024 * 1024;
    } else {
        struct statvfs st;
        uint64_t free_bytes = 0;
        if (cfg->dbpath != NULL && statvfs(cfg->dbpath, &st) == 0)
            free_bytes = (uint64_t)st.f_bavail * st.f_frsize;
        rs.oplog_bytes = sbl_repl_default_oplog_bytes(free_bytes);
    }
    srandom((unsigned)(sbl_now_us() ^ (uint64_t)getpid() ^ (uint64_t)cfg->port));
    atomic_store(&rs.state, SBL_RS_STARTUP);
    sbl_storage_set_write_observer(sbl_oplog_observe);
    sbl_storage_set_commit_observer(sbl_oplog_on_commit);
    sbl_storage_set_commit_gate(sbl_oplog_gate_enter, sbl_oplog_gate_leave);
    sbl_storage_set_replicated(true);

    sbl_session_t *s = sbl_session_get();
    bson_t config = BSON_INITIALIZER, vote = BSON_INITIALIZER;
    bool found, vfound;
    int rc = sbl_txn_table_open(s, err); /* retryable writes' records (repl_txn.c) */
    if (rc == 0)
        rc = load_one(s, SBL_REPLSET_NS, &config, &found, err);
    if (rc == 0)
        rc = load_one(s, ELECTION_NS, &vote, &vfound, err);
    if (rc == 0 && vfound) {
        rs.term = num_field(&vote, "term", 0);
        rs.last_vote_term = num_field(&vote, "lastVoteTerm", -1);
        rs.last_vote_candidate = (int)num_field(&vote, "candidateIndex", -1);
    }
    sbl_rs_config_t *pc = malloc(sizeof(*pc));
    if (rc == 0 && found && pc != NULL) {
        sbl_err_t perr;
        sbl_err_clear(&perr);
        if (sbl_rs_config_parse(&config, pc, &perr) != 0 ||
            strcmp(pc->set_name, rs.set_name) != 0) {
            log_attr(SBL_LOG_WARNING, 21405, "Local replica set configuration document set name "
                     "differs from command line set name, or is invalid; waiting for a valid "
                     "config", "commandLineSetName", rs.set_name, NULL, 0);
        } else if ((rc = sbl_oplog_open(s, rs.oplog_bytes, true, err)) == 0) {
            pthread_mutex_lock(&rs.lock);
            install_config_locked(&config, pc);
            sbl_oplog_set_term(rs.term);
            sbl_oplog_set_active(true);
            if (rs.self >= 0 && rs.cfg.m[rs.self].arbiter) {
                set_state_locked(SBL_RS_ARBITER); /* votes, holds no data */
            } else if (sbl_oplog_last_ts() == 0 || sbl_rs_initial_sync_flagged()) {
                set_state_locked(SBL_RS_STARTUP2); /* an initial sync to (re)do */
            } else {
                set_state_locked(SBL_RS_SECONDARY);
                if (rs.self >= 0)
                    rc = maybe_elect_alone_locked(err);
            }
            pthread_mutex_unlock(&rs.lock);
        }
    }
    free(pc);
    bson_destroy(&config);
    bson_destroy(&vote);
    return rc;
}

void sbl_repl_stop(void)
{
    if (!sbl_repl_enabled())
        return;
    pthread_mutex_lock(&rs.lock);
    rs.stopping = true;
    sbl_rs_broadcast_locked();
    pthread_mutex_unlock(&rs.lock);
    sbl_rs_flow_stop();
    sbl_rs_hb_stop();
    sbl_rs_sync_stop();
    sbl_rs_keys_stop();
    sbl_rs_waiter_stop();
    sbl_rs_preimages_stop();
    sbl_storage_set_write_observer(NULL);
    sbl_storage_set_commit_observer(NULL);
    sbl_storage_set_commit_gate(NULL, NULL);
    sbl_oplog_close();
    sbl_txn_table_close();
    pthread_mutex_lock(&rs.lock);
    if (rs.config != NULL)
        bson_destroy(rs.config);
    rs.config = NULL;
    atomic_store(&one_voter, false);
    pthread_mutex_unlock(&rs.lock);
    bson_free(rs.set_name);
    rs.set_name = NULL;
    bson_free(rs.dbpath);
    rs.dbpath = NULL;
    atomic_store(&rs.state, SBL_RS_STANDALONE);
}

int sbl_repl_start_threads(sbl_err_t *err)
{
    if (!sbl_repl_enabled())
        return 0;
    /* Before anyone is served: the data catches up with our own oplog. */
    SBL_RET(sbl_rs_replay_oplog(err));
    if (sbl_rs_waiter_start() != 0 || sbl_rs_hb_start() != 0 || sbl_rs_sync_start() != 0 ||
        sbl_rs_keys_start() != 0 || sbl_rs_preimages_start() != 0 ||
        sbl_rs_flow_start() != 0)
        return sbl_err_set(err, SBL_E_InternalError, "could not start the replication threads");
    return 0;
}

/* Take cfg (parsed from doc) as a new version of the config (lock held),
 * keeping what we know of the members that stay (matched by host). */
static void reinstall_config_locked(const bson_t *doc, const sbl_rs_config_t *cfg)
{
    sbl_rs_peer_t *old = malloc(sizeof(rs.peer));
    char primary[256] = "";
    if (rs.primary >= 0)
        snprintf(primary, sizeof(primary), "%s", rs.cfg.m[rs.primary].host);
    if (old != NULL)
        memcpy(old, rs.peer, sizeof(rs.peer));
    sbl_rs_config_t prev = rs.cfg;
    if (rs.config != NULL)
        bson_destroy(rs.config);
    rs.config = bson_copy(doc);
    rs.cfg = *cfg;
    atomic_store(&one_voter, sbl_rs_voters(cfg) == 1);
    rs.self = find_self(cfg);
    sbl_storage_set_checkpoint_phase(sbl_rs_checkpoint_phase(cfg, rs.self));
    rs.primary = -1;
    for (int i = 0; i < cfg->n; i++) {
        memset(&rs.peer[i], 0, sizeof(rs.peer[i]));
        rs.peer[i].state = SBL_RS_STARTUP;
        for (int j = 0; old != NULL && j < prev.n; j++)
            if (strcmp(prev.m[j].host, cfg->m[i].host) == 0) {
                rs.peer[i] = old[j];
                rs.peer[i].next_hb_ms = 0; /* tell it of the new config now */
            }
        if (strcmp(cfg->m[i].host, primary) == 0)
            rs.primary = i;
    }
    free(old);
}

/* The replicaSetId of the stored config (kept by a reconfig). */
static void keep_replica_set_id(const bson_t *from, bson_t *to_settings_doc)
{
    bson_iter_t it;
    if (from != NULL && bson_iter_init(&it, from) &&
        bson_iter_find_descendant(&it, "settings.replicaSetId", &it) && BSON_ITER_HOLDS_OID(&it))
        BSON_APPEND_OID(to_settings_doc, "replicaSetId", bson_iter_oid(&it));
}

/* Count voters of cfg that are not voters (by host) in prev, and back. */
static int voter_changes(const sbl_rs_config_t *prev, const sbl_rs_config_t *cfg)
{
    int changes = 0;
    for (int pass = 0; pass < 2; pass++) {
        const sbl_rs_config_t *a = pass == 0 ? prev : cfg, *b = pass == 0 ? cfg : prev;
        for (int i = 0; i < a->n; i++) {
            if (a->m[i].votes == 0)
                continue;
            bool still = false;
            for (int j = 0; j < b->n; j++)
                if (strcmp(a->m[i].host, b->m[j].host) == 0 && b->m[j].votes > 0)
                    still = true;
            if (!still)
                changes++;
        }
    }
    return changes;
}

/* The host of a member of both configs whose arbiterOnly or buildIndexes
 * differs (*fieldp: which), or NULL: mongod wants it removed and re-added. */
static const char *member_flipped(const sbl_rs_config_t *prev, const sbl_rs_config_t *cfg,
                                  const char **fieldp)
{
    *fieldp = NULL;
    for (int i = 0; i < cfg->n; i++)
        for (int j = 0; j < prev->n; j++) {
            if (strcmp(cfg->m[i].host, prev->m[j].host) != 0)
                continue;
            if (cfg->m[i].arbiter != prev->m[j].arbiter)
                *fieldp = "arbiterOnly";
            else if (cfg->m[i].build_indexes != prev->m[j].build_indexes)
                *fieldp = "buildIndexes";
            if (*fieldp != NULL)
                return cfg->m[i].host;
        }
    return NULL;
}

int sbl_repl_reconfig(sbl_session_t *s, const bson_t *config, bool force, bool global_wc,
                      sbl_err_t *err)
{
    bson_t full = BSON_INITIALIZER, withid = BSON_INITIALIZER, in = BSON_INITIALIZER;
    sbl_rs_config_t *cfg = malloc(sizeof(*cfg));
    bson_iter_t it;
    int rc;

    if (!sbl_repl_enabled()) {
        free(cfg);
        return sbl_err_set(err, SBL_E_NoReplicationEnabled,
                           "This node was not started with replication enabled.");
    }
    if (cfg == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    pthread_mutex_lock(&rs.lock);
    if (rs.config == NULL) {
        rc = sbl_err_set(err, SBL_E_NotYetInitialized, "no replset config has been received");
        goto done;
    }
    if (!force && atomic_load(&rs.state) != SBL_RS_PRIMARY) {
        rc = sbl_err_set(err, SBL_E_NotWritablePrimary, "replSetReconfig should only be run on "
                         "a writable PRIMARY. Current state %s;",
                         sbl_rs_state_str(atomic_load(&rs.state)));
        goto done;
    }
    /* force: a version well above ours, as mongod (plus a random 10,000..100,000) */
    int64_t version = rs.cfg.version + 1;
    if (bson_iter_init_find(&it, config, "version") && BSON_ITER_HOLDS_NUMBER(&it))
        version = bson_iter_as_int64(&it);
    if (force)
        version = rs.cfg.version + 10000 + random() % 90000;
    if (bson_iter_init(&it, config))
        while (bson_iter_next(&it))
            if (strcmp(bson_iter_key(&it), "version") != 0 &&
                strcmp(bson_iter_key(&it), "term") != 0)
                sbl_append_iter(&in, bson_iter_key(&it), -1, &it);
    BSON_APPEND_INT64(&in, "version", version);
    if ((rc = normalize_config(&in, &full, cfg, err)) != 0) {
        if (rc == SBL_E_InvalidReplicaSetConfig && strstr(err->msg, "initiate") != NULL)
            rc = sbl_err_set(err, SBL_E_NewReplicaSetConfigurationIncompatible, "New and old "
                             "configurations differ in replica set name; old was %s, and new "
                             "is %s", rs.set_name, cfg->set_name);
        goto done;
    }
    if (!force && version <= rs.cfg.version) {
        rc = sbl_err_set(err, SBL_E_NewReplicaSetConfigurationIncompatible, "New replica set "
                         "configuration version must be greater than old, but %lld is not "
                         "greater than %lld for replica set %s", (long long)version,
                         (long long)rs.cfg.version, rs.set_name);
        goto done;
    }
    /* mongod 5.0+: adding or removing arbiters must not change what writes
     * without a writeConcern do, unless a cluster-wide default says it */
    if (!global_wc && sbl_rs_implicit_majority(&rs.cfg) != sbl_rs_implicit_majority(cfg)) {
        rc = sbl_err_set(err, SBL_E_NewReplicaSetConfigurationIncompatible, "Reconfig attempted "
                         "to install a config that would change the implicit default write "
                         "concern. Use the setDefaultRWConcern command to set a cluster-wide "
                         "write concern and try the reconfig again.");
        goto done;
    }
    const char *field;
    const char *flipped = member_flipped(&rs.cfg, cfg, &field);
    if (flipped != NULL) {
        rc = sbl_err_set(err, SBL_E_NewReplicaSetConfigurationIncompatible, "New and old "
                         "configurations differ in the setting of the %s field for "
                         "member %s; to make this change, remove then re-add the member",
                         field, flipped);
        goto done;
    }
    if (!force && voter_changes(&rs.cfg, cfg) > 1) {
        rc = sbl_err_set(err, SBL_E_NewReplicaSetConfigurationIncompatible, "Non force replica "
                         "set reconfig can only add or remove at most 1 voting member.");
        goto done;
    }
    if (!force && !sbl_rs_electable(cfg, find_self(cfg))) {
        rc = sbl_err_set(err, SBL_E_NodeNotElectable, "This node, %s, with _id %d is not "
                         "electable under the new configuration with {version: %lld} for "
                         "replica set %s", cfg->m[find_self(cfg)].host,
                         cfg->m[find_self(cfg)].id, (long long)version, rs.set_name);
        goto done;
    }
    /* the stored document: as normalized, but keeping the set's replicaSetId */
    if (bson_iter_init(&it, &full))
        while (bson_iter_next(&it)) {
            if (strcmp(bson_iter_key(&it), "settings") != 0 || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
                sbl_append_iter(&withid, bson_iter_key(&it), -1, &it);
                continue;
            }
            bson_t settings, sd;
            bson_iter_t f;
            sbl_iter_doc(&it, &settings);
            BSON_APPEND_DOCUMENT_BEGIN(&withid, "settings", &sd);
            if (bson_iter_init(&f, &settings))
                while (bson_iter_next(&f))
                    if (strcmp(bson_iter_key(&f), "replicaSetId") != 0)
                        sbl_append_iter(&sd, bson_iter_key(&f), -1, &f);
            keep_replica_set_id(rs.config, &sd);
            bson_append_document_end(&withid, &sd);
        }
    if ((rc = store_one(s, SBL_REPLSET_NS, &withid, err)) != 0)
        goto done;
    reinstall_config_locked(&withid, cfg);
    atomic_fetch_add(&rs.topology, 1);
    sbl_rs_broadcast_locked();
    log_attr(SBL_LOG_INFO, 21392, force ? "New replica set config in use (forced)"
                                        : "New replica set config in use",
             "set", rs.set_name, "version", version);
    if (atomic_load(&rs.state) == SBL_RS_PRIMARY) {
        sbl_rs_update_commit_locked();
        sbl_err_t e2;
        sbl_err_clear(&e2);
        pthread_mutex_unlock(&rs.lock);
        sbl_oplog_noop(s, "Reconfig set", &e2);
        pthread_mutex_lock(&rs.lock);
    }
done:
    pthread_mutex_unlock(&rs.lock);
    if (rc == 0)
        sbl_rs_hb_kick();
    free(cfg);
    bson_destroy(&full);
    bson_destroy(&withid);
    bson_destroy(&in);
    return rc;
}

int sbl_repl_initiate(sbl_session_t *s, const bson_t *config, sbl_err_t *err)
{
    bson_t dflt = BSON_INITIALIZER, full = BSON_INITIALIZER;
    sbl_rs_config_t *cfg = malloc(sizeof(*cfg));
    int rc;

    if (!sbl_repl_enabled()) {
        free(cfg);
        return sbl_err_set(err, SBL_E_NoReplicationEnabled,
                           "This node was not started with replication enabled.");
    }
    if (cfg == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    pthread_mutex_lock(&rs.lock);
    if (rs.config != NULL) {
        rc = sbl_err_set(err, SBL_E_AlreadyInitialized, "already initialized");
        goto done;
    }
    if (config == NULL) {
        bson_t members, m;
        BSON_APPEND_UTF8(&dflt, "_id", rs.set_name);
        BSON_APPEND_INT32(&dflt, "version", 1);
        BSON_APPEND_ARRAY_BEGIN(&dflt, "members", &members);
        BSON_APPEND_DOCUMENT_BEGIN(&members, "0", &m);
        BSON_APPEND_INT32(&m, "_id", 0);
        BSON_APPEND_UTF8(&m, "host", sbl_server_host());
        bson_append_document_end(&members, &m);
        bson_append_array_end(&dflt, &members);
        config = &dflt;
    }
    if ((rc = normalize_config(config, &full, cfg, err)) != 0)
        goto done;
    if ((rc = sbl_oplog_open(s, rs.oplog_bytes, true, err)) != 0 ||
        (rc = store_one(s, SBL_REPLSET_NS, &full, err)) != 0)
        goto done;
    install_config_locked(&full, cfg);
    sbl_oplog_set_term(rs.term);
    sbl_oplog_set_active(true);
    if ((rc = sbl_oplog_noop(s, "initiating set", err)) != 0)
        goto done;
    set_state_locked(rs.cfg.m[rs.self].arbiter ? SBL_RS_ARBITER : SBL_RS_SECONDARY);
    rc = maybe_elect_alone_locked(err);
done:
    pthread_mutex_unlock(&rs.lock);
    if (rc == 0)
        sbl_rs_hb_kick();
    free(cfg);
    bson_destroy(&dflt);
    bson_destroy(&full);
    return rc;
}
