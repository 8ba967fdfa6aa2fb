/*
 * repl_coord.c: the replication coordinator of a one-member replica set:
 * the member's state, its config (kept in local.system.replset), what
 * hello and replSetGetStatus say, and the cluster time replies carry.
 *
 * States: STARTUP (started with --replSet, no config yet: writes outside
 * "local" fail with NotWritablePrimary) -> replSetInitiate, or a restart
 * that finds the config -> PRIMARY.  Each change of state moves the
 * topologyVersion counter.
 *
 * What must stay true: the config and "me" change only under rs.lock and
 * before the state says PRIMARY; readers of the state need no lock.  The
 * commit point of a set of one is its last applied entry: w:"majority" and
 * readConcern majority are w:1 and local.
 */
#include "repl/repl_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/server.h"

enum { ST_STANDALONE = 0, ST_STARTUP = 1, ST_PRIMARY = 2 };

static struct {
    char *set_name;
    int64_t oplog_bytes;
    int port;
    pthread_mutex_t lock; /* config, me, initiate */
    bson_t *config;       /* the stored config; NULL until initiated */
    char *me;             /* this member's host in the config */
    atomic_int state;
    atomic_int_fast64_t topology;
    bson_oid_t election_id;
    uint64_t election_ts;
    int64_t election_ms;
} rs = {.lock = PTHREAD_MUTEX_INITIALIZER};

bool sbl_repl_enabled(void)
{
    return atomic_load(&rs.state) != ST_STANDALONE;
}

bool sbl_repl_writable(void)
{
    return atomic_load(&rs.state) != ST_STARTUP;
}

int64_t sbl_repl_topology_counter(void)
{
    return atomic_load(&rs.topology);
}

int sbl_repl_check_write(const char *db, sbl_err_t *err)
{
    if (atomic_load_explicit(&rs.state, memory_order_relaxed) != ST_STARTUP ||
        strcmp(db, "local") == 0)
        return 0;
    return sbl_err_set(err, SBL_E_NotWritablePrimary, "not primary");
}

/* ---- config ------------------------------------------------------------------ */

/* The int value of a numeric field, or def. */
static int64_t num_field(const bson_t *d, const char *k, int64_t def)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, d, k) && BSON_ITER_HOLDS_NUMBER(&it) ? bson_iter_as_int64(&it)
                                                                         : def;
}

static const char *str_field(const bson_t *d, const char *k)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, d, k) && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL)
                                                                       : NULL;
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

static int config_error(sbl_err_t *err, const char *msg)
{
    return sbl_err_set(err, SBL_E_InvalidReplicaSetConfig, "%s", msg);
}

/* Check a replSetInitiate config as mongod does for one member and build
 * the stored one (defaults filled in) in out; *mep gets "me". */
static int normalize_config(const bson_t *in, bson_t *out, char **mep, sbl_err_t *err)
{
    bson_iter_t it, m;
    const char *id = str_field(in, "_id");
    char msg[512];

    *mep = NULL;
    if (!bson_has_field(in, "_id"))
        return config_error(err, "BSON field 'ReplSetConfig._id' is missing but a required field");
    if (id == NULL)
        return config_error(err, "BSON field 'ReplSetConfig._id' is the wrong type, expected "
                            "type 'string'");
    if (strcmp(id, rs.set_name) != 0) {
        snprintf(msg, sizeof(msg), "Attempting to initiate a replica set with name %s, but "
                 "command line reports %s; rejecting", id, rs.set_name);
        return config_error(err, msg);
    }
    if (!bson_iter_init_find(&it, in, "members"))
        return config_error(err,
                            "BSON field 'ReplSetConfig.members' is missing but a required field");
    if (!BSON_ITER_HOLDS_ARRAY(&it))
        return config_error(err, "BSON field 'ReplSetConfig.members' is the wrong type, "
                            "expected type 'array'");
    int64_t version = num_field(in, "version", 1);
    if (version < 1)
        return sbl_err_set(err, SBL_E_InvalidReplicaSetConfig,
                           "version field value of %lld is out of range", (long long)version);
    bson_iter_recurse(&it, &m);
    int nmembers = 0;
    const char *host = NULL;
    int64_t member_id = 0;
    bson_t member;
    while (bson_iter_next(&m)) {
        nmembers++;
        if (!BSON_ITER_HOLDS_DOCUMENT(&m) || !sbl_iter_doc(&m, &member))
            return config_error(err, "Expected type object for members element");
        if (!bson_has_field(&member, "_id"))
            return config_error(err,
                                "BSON field 'MemberConfig._id' is missing but a required field");
        if (!bson_has_field(&member, "host"))
            return config_error(err,
                                "BSON field 'MemberConfig.host' is missing but a required field");
        if ((host = str_field(&member, "host")) == NULL)
            return config_error(err, "BSON field 'MemberConfig.host' is the wrong type, "
                                "expected type 'string'");
        member_id = num_field(&member, "_id", -1);
        if (member_id < 0 || member_id > 255) {
            snprintf(msg, sizeof(msg), "_id field value of %lld is out of range.",
                     (long long)member_id);
            return config_error(err, msg);
        }
        bson_iter_t a;
        if (bson_iter_init_find(&a, &member, "arbiterOnly") && bson_iter_as_bool(&a))
            return config_error(err, "Replica set configuration must contain at least one "
                                "non-arbiter member with priority > 0");
        if (num_field(&member, "priority", 1) <= 0 || num_field(&member, "votes", 1) <= 0)
            return config_error(err, "Replica set configuration must contain at least one "
                                "non-arbiter member with priority > 0 and one voting member");
    }
    if (nmembers == 0)
        return config_error(err, "Replica set configuration contains 0 members, but must have "
                            "at least 1 and no more than 50");
    if (nmembers > 1) {
        snprintf(msg, sizeof(msg), "Sable runs replica sets of one member so far (issue 24); "
                 "the config has %d members", nmembers);
        return sbl_err_set(err, SBL_E_CommandNotSupported, "%s", msg);
    }
    if (!host_is_me(host)) {
        snprintf(msg, sizeof(msg), "No host described in new configuration with {version: %lld, "
                 "term: 0} for replica set %s maps to this node", (long long)version, id);
        return sbl_err_set(err, SBL_E_NodeNotFound, "%s", msg);
    }

    bson_t members, mem, tags, settings, modes, gle;
    bson_oid_t set_id;
    BSON_APPEND_UTF8(out, "_id", id);
    BSON_APPEND_INT32(out, "version", (int32_t)version);
    BSON_APPEND_INT32(out, "term", SBL_REPL_TERM);
    BSON_APPEND_ARRAY_BEGIN(out, "members", &members);
    BSON_APPEND_DOCUMENT_BEGIN(&members, "0", &mem);
    BSON_APPEND_INT32(&mem, "_id", (int32_t)member_id);
    BSON_APPEND_UTF8(&mem, "host", host);
    BSON_APPEND_BOOL(&mem, "arbiterOnly", false);
    BSON_APPEND_BOOL(&mem, "buildIndexes", true);
    BSON_APPEND_BOOL(&mem, "hidden", false);
    BSON_APPEND_DOUBLE(&mem, "priority", 1.0);
    BSON_APPEND_DOCUMENT_BEGIN(&mem, "tags", &tags);
    bson_append_document_end(&mem, &tags);
    BSON_APPEND_INT64(&mem, "secondaryDelaySecs", 0);
    BSON_APPEND_INT32(&mem, "votes", 1);
    bson_append_document_end(&members, &mem);
    bson_append_array_end(out, &members);
    BSON_APPEND_INT64(out, "protocolVersion", 1);
    BSON_APPEND_BOOL(out, "writeConcernMajorityJournalDefault", true);
    BSON_APPEND_DOCUMENT_BEGIN(out, "settings", &settings);
    BSON_APPEND_BOOL(&settings, "chainingAllowed", true);
    BSON_APPEND_INT32(&settings, "heartbeatIntervalMillis", 2000);
    BSON_APPEND_INT32(&settings, "heartbeatTimeoutSecs", 10);
    BSON_APPEND_INT32(&settings, "electionTimeoutMillis", 10000);
    BSON_APPEND_INT32(&settings, "catchUpTimeoutMillis", -1);
    BSON_APPEND_INT32(&settings, "catchUpTakeoverDelayMillis", 30000);
    BSON_APPEND_DOCUMENT_BEGIN(&settings, "getLastErrorModes", &modes);
    bson_append_document_end(&settings, &modes);
    BSON_APPEND_DOCUMENT_BEGIN(&settings, "getLastErrorDefaults", &gle);
    BSON_APPEND_INT32(&gle, "w", 1);
    BSON_APPEND_INT32(&gle, "wtimeout", 0);
    bson_append_document_end(&settings, &gle);
    bson_oid_init(&set_id, NULL);
    BSON_APPEND_OID(&settings, "replicaSetId", &set_id);
    bson_append_document_end(out, &settings);
    *mep = bson_strdup(host);
    return 0;
}

/* The stored config's member host (one member). */
static char *config_me(const bson_t *config)
{
    bson_iter_t it;
    if (bson_iter_init(&it, config) && bson_iter_find_descendant(&it, "members.0.host", &it) &&
        BSON_ITER_HOLDS_UTF8(&it))
        return bson_strdup(bson_iter_utf8(&it, NULL));
    return NULL;
}

/* Write the "new primary" no-op and say PRIMARY (rs.lock held). */
static int become_primary(sbl_session_t *s, sbl_err_t *err)
{
    sbl_oplog_set_active(true);
    SBL_RET(sbl_oplog_noop(s, "new primary", err));
    sbl_repl_election_id(SBL_REPL_TERM, &rs.election_id);
    rs.election_ts = sbl_oplog_last_ts();
    rs.election_ms = sbl_now_ms();
    atomic_store(&rs.state, ST_PRIMARY);
    atomic_fetch_add(&rs.topology, 1);
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "replSet", rs.set_name);
    BSON_APPEND_UTF8(&attr, "me", rs.me != NULL ? rs.me : "");
    sbl_log(SBL_LOG_INFO, "REPL", 21331, "Transition to primary complete; database writes are "
            "now permitted", &attr);
    bson_destroy(&attr);
    return 0;
}

/* The config in local.system.replset, if any (*foundp). */
static int load_config(sbl_session_t *s, bson_t *out, bool *foundp, sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    sbl_scan_t *scan;
    bson_t doc;
    bool done;
    int rc;

    *foundp = false;
    rc = sbl_coll_open(s, SBL_REPLSET_NS, false, &c, NULL, err);
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

static int store_config(sbl_session_t *s, const bson_t *config, sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    int rc;

    SBL_RET(sbl_coll_open(s, SBL_REPLSET_NS, true, &c, NULL, err));
    if ((rc = sbl_txn_begin(s, err)) == 0) {
        if ((rc = sbl_write(s, c, SBL_WRITE_INSERT, NULL, config, NULL, err)) == 0)
            rc = sbl_txn_commit(s, err);
        else
            sbl_txn_abort(s);
    }
    sbl_coll_release(c);
    return rc;
}

int sbl_repl_start(const sbl_repl_config_t *cfg, sbl_err_t *err)
{
    if (cfg->set_name == NULL || cfg->set_name[0] == '\0')
        return 0;
    rs.set_name = bson_strdup(cfg->set_name);
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
    atomic_store(&rs.state, ST_STARTUP);
    sbl_storage_set_write_observer(sbl_oplog_observe);

    sbl_session_t *s = sbl_session_get();
    bson_t config;
    bool found;
    bson_init(&config);
    int rc = load_config(s, &config, &found, err);
    if (rc == 0 && found) {
        const char *id = str_field(&config, "_id");
        if (id == NULL || strcmp(id, rs.set_name) != 0) {
            bson_t attr = BSON_INITIALIZER;
            BSON_APPEND_UTF8(&attr, "configSetName", id != NULL ? id : "");
            BSON_APPEND_UTF8(&attr, "commandLineSetName", rs.set_name);
            sbl_log(SBL_LOG_WARNING, "REPL", 21405, "Local replica set configuration document "
                    "set name differs from command line set name; waiting for a valid config",
                    &attr);
            bson_destroy(&attr);
        } else if ((rc = sbl_oplog_open(s, rs.oplog_bytes, true, err)) == 0) {
            pthread_mutex_lock(&rs.lock);
            rs.config = bson_copy(&config);
            rs.me = config_me(&config);
            rc = become_primary(s, err);
            pthread_mutex_unlock(&rs.lock);
        }
    }
    bson_destroy(&config);
    return rc;
}

void sbl_repl_stop(void)
{
    if (!sbl_repl_enabled())
        return;
    sbl_storage_set_write_observer(NULL);
    sbl_oplog_close();
    pthread_mutex_lock(&rs.lock);
    if (rs.config != NULL)
        bson_destroy(rs.config);
    rs.config = NULL;
    bson_free(rs.me);
    rs.me = NULL;
    pthread_mutex_unlock(&rs.lock);
    bson_free(rs.set_name);
    rs.set_name = NULL;
    atomic_store(&rs.state, ST_STANDALONE);
}

int sbl_repl_initiate(sbl_session_t *s, const bson_t *config, sbl_err_t *err)
{
    bson_t dflt = BSON_INITIALIZER, full = BSON_INITIALIZER;
    char *me = NULL;
    int rc;

    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NoReplicationEnabled,
                           "This node was not started with replication enabled.");
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
    if ((rc = normalize_config(config, &full, &me, err)) != 0)
        goto done;
    if ((rc = sbl_oplog_open(s, rs.oplog_bytes, true, err)) != 0 ||
        (rc = store_config(s, &full, err)) != 0)
        goto done;
    rs.config = bson_copy(&full);
    rs.me = me;
    me = NULL;
    sbl_oplog_set_active(true);
    if ((rc = sbl_oplog_noop(s, "initiating set", err)) == 0)
        rc = become_primary(s, err);
done:
    pthread_mutex_unlock(&rs.lock);
    bson_free(me);
    bson_destroy(&dflt);
    bson_destroy(&full);
    return rc;
}

/* ---- what the member says ------------------------------------------------------ */

static void append_optime(bson_t *r, const char *k, uint64_t ts)
{
    bson_t ot;
    BSON_APPEND_DOCUMENT_BEGIN(r, k, &ot);
    bson_append_timestamp(&ot, "ts", 2, SBL_TS_SECS(ts), SBL_TS_INC(ts));
    BSON_APPEND_INT64(&ot, "t", SBL_REPL_TERM);
    bson_append_document_end(r, &ot);
}

void sbl_repl_append_hello(bson_t *r)
{
    int st = atomic_load(&rs.state);

    if (st == ST_STANDALONE)
        return;
    if (st == ST_STARTUP) {
        BSON_APPEND_BOOL(r, "secondary", false);
        BSON_APPEND_UTF8(r, "info", "Does not have a valid replica set config");
        BSON_APPEND_BOOL(r, "isreplicaset", true);
        return;
    }
    uint64_t ts = sbl_oplog_last_ts();
    int64_t wall = sbl_oplog_last_wall_ms();
    bson_t hosts, lw;
    pthread_mutex_lock(&rs.lock);
    BSON_APPEND_ARRAY_BEGIN(r, "hosts", &hosts);
    BSON_APPEND_UTF8(&hosts, "0", rs.me);
    bson_append_array_end(r, &hosts);
    BSON_APPEND_UTF8(r, "setName", rs.set_name);
    BSON_APPEND_INT32(r, "setVersion", (int32_t)num_field(rs.config, "version", 1));
    BSON_APPEND_BOOL(r, "secondary", false);
    BSON_APPEND_UTF8(r, "primary", rs.me);
    BSON_APPEND_UTF8(r, "me", rs.me);
    BSON_APPEND_OID(r, "electionId", &rs.election_id);
    pthread_mutex_unlock(&rs.lock);
    BSON_APPEND_DOCUMENT_BEGIN(r, "lastWrite", &lw);
    append_optime(&lw, "opTime", ts);
    BSON_APPEND_DATE_TIME(&lw, "lastWriteDate", (wall / 1000) * 1000);
    append_optime(&lw, "majorityOpTime", ts);
    BSON_APPEND_DATE_TIME(&lw, "majorityWriteDate", (wall / 1000) * 1000);
    bson_append_document_end(r, &lw);
}

void sbl_repl_append_cluster_time(bson_t *r)
{
    uint64_t ts;
    if (atomic_load_explicit(&rs.state, memory_order_relaxed) != ST_PRIMARY ||
        (ts = sbl_oplog_last_ts()) == 0)
        return;
    static const uint8_t zero[20];
    bson_t ct, sig;
    BSON_APPEND_DOCUMENT_BEGIN(r, "$clusterTime", &ct);
    bson_append_timestamp(&ct, "clusterTime", -1, SBL_TS_SECS(ts), SBL_TS_INC(ts));
    BSON_APPEND_DOCUMENT_BEGIN(&ct, "signature", &sig);
    bson_append_binary(&sig, "hash", 4, BSON_SUBTYPE_BINARY, zero, sizeof(zero));
    BSON_APPEND_INT64(&sig, "keyId", 0);
    bson_append_document_end(&ct, &sig);
    bson_append_document_end(r, &ct);
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

int sbl_repl_get_status(bson_t *r, sbl_err_t *err)
{
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NoReplicationEnabled, "not running with --replSet");
    if (atomic_load(&rs.state) != ST_PRIMARY)
        return sbl_err_set(err, SBL_E_NotYetInitialized, "no replset config has been received");
    uint64_t ts = sbl_oplog_last_ts();
    int64_t wall = sbl_oplog_last_wall_ms(), now = sbl_now_ms();
    bson_t ot, members, m;
    pthread_mutex_lock(&rs.lock);
    BSON_APPEND_UTF8(r, "set", rs.set_name);
    BSON_APPEND_DATE_TIME(r, "date", now);
    BSON_APPEND_INT32(r, "myState", 1);
    BSON_APPEND_INT64(r, "term", SBL_REPL_TERM);
    BSON_APPEND_UTF8(r, "syncSourceHost", "");
    BSON_APPEND_INT32(r, "syncSourceId", -1);
    BSON_APPEND_INT64(r, "heartbeatIntervalMillis", 2000);
    BSON_APPEND_INT32(r, "majorityVoteCount", 1);
    BSON_APPEND_INT32(r, "writeMajorityCount", 1);
    BSON_APPEND_INT32(r, "votingMembersCount", 1);
    BSON_APPEND_INT32(r, "writableVotingMembersCount", 1);
    BSON_APPEND_DOCUMENT_BEGIN(r, "optimes", &ot);
    append_optime(&ot, "lastCommittedOpTime", ts);
    BSON_APPEND_DATE_TIME(&ot, "lastCommittedWallTime", wall);
    append_optime(&ot, "readConcernMajorityOpTime", ts);
    append_optime(&ot, "appliedOpTime", ts);
    append_optime(&ot, "durableOpTime", ts);
    BSON_APPEND_DATE_TIME(&ot, "lastAppliedWallTime", wall);
    BSON_APPEND_DATE_TIME(&ot, "lastDurableWallTime", wall);
    bson_append_document_end(r, &ot);
    BSON_APPEND_ARRAY_BEGIN(r, "members", &members);
    BSON_APPEND_DOCUMENT_BEGIN(&members, "0", &m);
    bson_iter_t it;
    int32_t mid = 0;
    if (bson_iter_init(&it, rs.config) && bson_iter_find_descendant(&it, "members.0._id", &it))
        mid = (int32_t)bson_iter_as_int64(&it);
    BSON_APPEND_INT32(&m, "_id", mid);
    BSON_APPEND_UTF8(&m, "name", rs.me);
    BSON_APPEND_DOUBLE(&m, "health", 1.0);
    BSON_APPEND_INT32(&m, "state", 1);
    BSON_APPEND_UTF8(&m, "stateStr", "PRIMARY");
    BSON_APPEND_INT64(&m, "uptime", (now - sbl_server_start_ms()) / 1000);
    append_optime(&m, "optime", ts);
    BSON_APPEND_DATE_TIME(&m, "optimeDate", (int64_t)SBL_TS_SECS(ts) * 1000);
    BSON_APPEND_DATE_TIME(&m, "lastAppliedWallTime", wall);
    BSON_APPEND_DATE_TIME(&m, "lastDurableWallTime", wall);
    BSON_APPEND_UTF8(&m, "syncSourceHost", "");
    BSON_APPEND_INT32(&m, "syncSourceId", -1);
    BSON_APPEND_UTF8(&m, "infoMessage", "");
    bson_append_timestamp(&m, "electionTime", -1, SBL_TS_SECS(rs.election_ts),
                          SBL_TS_INC(rs.election_ts));
    BSON_APPEND_DATE_TIME(&m, "electionDate", rs.election_ms);
    BSON_APPEND_INT32(&m, "configVersion", (int32_t)num_field(rs.config, "version", 1));
    BSON_APPEND_INT32(&m, "configTerm", SBL_REPL_TERM);
    BSON_APPEND_BOOL(&m, "self", true);
    BSON_APPEND_UTF8(&m, "lastHeartbeatMessage", "");
    bson_append_document_end(&members, &m);
    bson_append_array_end(r, &members);
    pthread_mutex_unlock(&rs.lock);
    return 0;
}
