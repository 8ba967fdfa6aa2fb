/*
 * rt_auth.c: authentication and authorization at the router, as mongos
 * does them.  Users and user-defined roles live on the config servers
 * (their admin.system.users / admin.system.roles): src/auth's lookups are
 * pointed at them (sbl_auth_set_lookup), so the SCRAM conversations and the
 * privilege resolution are src/auth's own.  The user commands (createUser,
 * usersInfo, grantRolesToUser ...) are passed to the config servers, which
 * store the users; the router checks the client's privileges first.
 *
 * What must stay true: with authorization on, no command other than the
 * handshake and authentication ones runs for a client that is not
 * authenticated (Unauthorized, 13), except createUser through the
 * localhost exception while no user exists; a client's privileges are
 * resolved again after any user or role change made through this router,
 * and at least every 30 s (changes made through other routers).  A loop
 * thread (rt_fast.c) checks a command only with privileges resolved and
 * current (rt_auth_check_loop): it never reads the config servers.
 */
#include "router/router_int.h"

#include "auth/auth.h"
#include "net/net.h"
#include "server/server.h"
#include "sessions/sessions.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>


typedef struct rt_client {
    sbl_scram_t *scram;
    bool skip_empty;
    char *user, *db;
    sbl_authz_t *authz;
    uint64_t gen;
    time_t resolved; /* when authz was read from the config servers */
    int failures;    /* failed authentications on this connection (each reply waits) */
} rt_client_t;

/* As mongos's userCacheInvalidationIntervalSecs: a change made through
 * another router reaches this one's clients within this long. */
#define RESOLVE_EVERY_S 30

static __thread const rt_client_t *current; /* the client of the command this thread runs */

static _Atomic uint64_t generation = 1; /* bumped by user / role changes through the router */

static int lookup(bool roles, const char *db, const char *name, bson_t *doc, bool *foundp,
                  sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, f, reply;
    char *id = bson_strdup_printf("%s.%s", db, name);
    *foundp = false;
    BSON_APPEND_UTF8(&cmd, "find", roles ? "system.roles" : "system.users");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
    BSON_APPEND_UTF8(&f, "_id", id);
    bson_append_document_end(&cmd, &f);
    BSON_APPEND_INT32(&cmd, "limit", 1);
    bson_free(id);
    int rc = rt_run(-1, "admin", &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc != 0)
        return rc;
    bson_iter_t it, d;
    if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d) &&
        BSON_ITER_HOLDS_DOCUMENT(&d)) {
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&d, &len, &data);
        bson_t tmp;
        if (bson_init_static(&tmp, data, len)) {
            bson_copy_to(&tmp, doc);
            *foundp = true;
        }
    } else if ((rc = rt_reply_code(&reply)) != 0) {
        sbl_err_set(err, rc, "reading users from the config servers failed");
    }
    bson_destroy(&reply);
    return rc;
}

void rt_auth_init(void)
{
    if (sbl_auth_enabled())
        sbl_auth_set_lookup(lookup);
}

static void client_free(void *p)
{
    rt_client_t *c = p;
    sbl_scram_free(c->scram);
    bson_free(c->user);
    bson_free(c->db);
    sbl_authz_free(c->authz);
    free(c);
}

static rt_client_t *client_of(sbl_conn_t *conn)
{
    rt_client_t *c = sbl_conn_data(conn);
    if (c == NULL) {
        c = calloc(1, sizeof(*c));
        sbl_conn_set_data(conn, c, client_free);
    }
    return c;
}

static void clear_user(rt_client_t *c)
{
    bson_free(c->user);
    bson_free(c->db);
    sbl_authz_free(c->authz);
    c->user = c->db = NULL;
    c->authz = NULL;
}

static int sasl_start(rt_client_t *c, const char *db, const bson_t *cmd, bson_t *r,
                      sbl_err_t *err)
{
    bson_iter_t it;
    const uint8_t *payload;
    uint32_t len;
    if (!bson_iter_init_find(&it, cmd, "mechanism") || !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_BadValue, "Missing required field 'mechanism'");
    const char *mech = bson_iter_utf8(&it, NULL);
    SBL_RET(sbl_sasl_payload(cmd, &payload, &len, err));
    sbl_scram_free(c->scram);
    c->scram = NULL;
    uint8_t *out = NULL;
    size_t outlen = 0;
    SBL_RET(sbl_scram_start(NULL, db, mech, payload, len, &c->scram, &out, &outlen, err));
    c->skip_empty = sbl_sasl_skip_empty(cmd);
    sbl_sasl_append_reply(r, false, out, outlen);
    bson_free(out);
    return 0;
}

static int sasl_continue(rt_client_t *c, const char *db, const bson_t *cmd, bson_t *r,
                         sbl_err_t *err)
{
    bson_iter_t it;
    const uint8_t *payload;
    uint32_t len;
    if (!bson_iter_init_find(&it, cmd, "conversationId") || !BSON_ITER_HOLDS_NUMBER(&it))
        return sbl_err_set(err, SBL_E_BadValue, "Missing required field 'conversationId'");
    SBL_RET(sbl_sasl_payload(cmd, &payload, &len, err));
    if (c->scram == NULL)
        return sbl_err_set(err, SBL_E_ProtocolError, "No SASL session state found");
    if (bson_iter_as_int64(&it) != SBL_SASL_CONVERSATION_ID ||
        strcmp(sbl_scram_db(c->scram), db) != 0) {
        sbl_scram_free(c->scram);
        c->scram = NULL;
        return sbl_err_set(err, SBL_E_ProtocolError, "Mismatched conversation id or database");
    }
    uint8_t *out = NULL;
    size_t outlen = 0;
    bool done = false;
    int rc = sbl_scram_step(c->scram, payload, len, c->skip_empty || sbl_sasl_skip_empty(cmd), &out,
                            &outlen, &done, err);
    if (rc == 0) {
        sbl_sasl_append_reply(r, done, out, outlen);
        bson_free(out);
    }
    if (rc == 0 && done) {
        clear_user(c);
        c->user = bson_strdup(sbl_scram_user(c->scram));
        c->db = bson_strdup(sbl_scram_db(c->scram));
        c->gen = 0; /* resolve on the next command */
    }
    if (rc != 0 || done) {
        sbl_scram_free(c->scram);
        c->scram = NULL;
    }
    return rc;
}

/* Commands anyone may run (mongod's handshake and authentication set). */
static bool no_auth_needed(const char *name)
{
    static const char *const open[] = {"hello", "isMaster", "ismaster", "ping", "buildInfo",
                                       "buildinfo", "saslStart", "saslContinue", "logout",
                                       "connectionStatus", "whatsmyuri", "endSessions",
                                       "authenticate", NULL};
    for (int i = 0; open[i]; i++)
        if (strcmp(name, open[i]) == 0)
            return true;
    return false;
}

/* The actions a routed command needs ("" ends; NULL: any authenticated user). */
static const char *const *actions_of(const char *name, bool *cluster)
{
    static const struct {
        const char *cmd;
        const char *acts[3];
        bool cluster;
    } map[] = {
        {"find", {"find"}, false},          {"getMore", {"find"}, false},
        {"count", {"find"}, false},         {"distinct", {"find"}, false},
        {"aggregate", {"find"}, false},     {"explain", {"find"}, false},
        {"insert", {"insert"}, false},      {"update", {"update"}, false},
        {"delete", {"remove"}, false},      {"findAndModify", {"find", "update"}, false},
        {"findandmodify", {"find", "update"}, false},
        {"listCollections", {"listCollections"}, false},
        {"listIndexes", {"listIndexes"}, false},
        {"create", {"createCollection"}, false},
        {"createIndexes", {"createIndex"}, false},
        {"dropIndexes", {"dropIndex"}, false},
        {"drop", {"dropCollection"}, false},
        {"dropDatabase", {"dropDatabase"}, false},
        {"collStats", {"collStats"}, false}, {"dbStats", {"dbStats"}, false},
        {"killCursors", {"killCursors"}, false},
        {"createUser", {"createUser"}, false}, {"dropUser", {"dropUser"}, false},
        {"dropAllUsersFromDatabase", {"dropUser"}, false},
        {"updateUser", {"changePassword"}, false},
        {"usersInfo", {"viewUser"}, false},
        {"grantRolesToUser", {"grantRole"}, false},
        {"revokeRolesFromUser", {"revokeRole"}, false},
        {"createRole", {"createRole"}, false}, {"dropRole", {"dropRole"}, false},
        {"rolesInfo", {"viewRole"}, false},
        {"serverStatus", {"serverStatus"}, true},
        {"getCmdLineOpts", {"getCmdLineOpts"}, true},
        {"addShard", {"addShard"}, true}, {"addshard", {"addShard"}, true},
        {"listShards", {"listShards"}, true}, {"listshards", {"listShards"}, true},
        {"enableSharding", {"enableSharding"}, false},
        {"enablesharding", {"enableSharding"}, false},
        {"shardCollection", {"enableSharding"}, false},
        {"shardcollection", {"enableSharding"}, false},
        {"split", {"splitChunk"}, false},
        {"mergeChunks", {"splitChunk"}, false},
        {"mergeAllChunksOnShard", {"splitChunk"}, false},
        {"clearJumboFlag", {"clearJumboFlag"}, false},
        {"moveChunk", {"moveChunk"}, false}, {"movechunk", {"moveChunk"}, false},
        {"moveRange", {"moveChunk"}, false},
        {"movePrimary", {"moveChunk"}, false}, {"moveprimary", {"moveChunk"}, false},
        {"removeShard", {"removeShard"}, true}, {"removeshard", {"removeShard"}, true},
        {"refineCollectionShardKey", {"enableSharding"}, false},
        {"configureCollectionBalancing", {"enableSharding"}, false},
        {"balancerCollectionStatus", {"enableSharding"}, false},
        {"balancerStart", {"update"}, false}, {"balancerStop", {"update"}, false},
        {"balancerStatus", {"find"}, false},
        {"addShardToZone", {"update"}, false}, {"addshardtozone", {"update"}, false},
        {"removeShardFromZone", {"update"}, false},
        {"removeshardfromzone", {"update"}, false},
        {"updateZoneKeyRange", {"update"}, false},
        {"updatezonekeyrange", {"update"}, false},
        {"flushRouterConfig", {"flushRouterConfig"}, true},
        {"getShardVersion", {"getShardVersion"}, false},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strcmp(map[i].cmd, name) == 0) {
            *cluster = map[i].cluster;
            return map[i].acts;
        }
    return NULL;
}

/* The namespace a command names: its first value when a string. */
static const char *coll_of(const bson_t *cmd)
{
    bson_iter_t it;
    if (bson_iter_init(&it, cmd) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it))
        return bson_iter_utf8(&it, NULL);
    return NULL;
}

static bool has_users(void)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    sbl_err_t e = {0};
    BSON_APPEND_UTF8(&cmd, "find", "system.users");
    BSON_APPEND_INT32(&cmd, "limit", 1);
    bool any = true; /* unknown: no exception */
    if (rt_run(-1, "admin", &cmd, &reply, &e) == 0) {
        bson_iter_t it, d;
        any = bson_iter_init(&it, &reply) &&
              bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d);
        if (!any && rt_reply_code(&reply) != 0)
            any = true;
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    return any;
}

/* Whether c's privileges may be used as they are: read since the last user
 * or role change through this router (g) and less than RESOLVE_EVERY_S ago. */
static bool resolved_now(const rt_client_t *c, uint64_t g, time_t now)
{
    return c->authz != NULL && c->gen == g && now - c->resolved < RESOLVE_EVERY_S;
}

/* Whether c's resolved privileges allow command name on db (cmd names the
 * collection); 0 or Unauthorized. */
static int check_actions(rt_client_t *c, const char *name, const char *db, const bson_t *cmd,
                         sbl_err_t *err)
{
    bool cluster = false;
    const char *const *acts = actions_of(name, &cluster);
    if (acts == NULL) /* listDatabases, isdbgrid ...: any authenticated user */
        return 0;
    const char *coll = cluster ? NULL : coll_of(cmd);
    char dbbuf[256];
    const char *adb = db;
    /* a find or a one-document write (most commands) names none of the
     * commands checked on another resource below */
    bool crud = strcmp(name, "find") == 0 || strcmp(name, "insert") == 0 ||
                strcmp(name, "update") == 0 || strcmp(name, "delete") == 0;
    if (!crud) {
        if (strcmp(name, "getMore") == 0 || strcmp(name, "killCursors") == 0 ||
            strcmp(name, "createUser") == 0 || strcmp(name, "dropUser") == 0 ||
            strcmp(name, "updateUser") == 0 || strcmp(name, "grantRolesToUser") == 0 ||
            strcmp(name, "revokeRolesFromUser") == 0 || strcmp(name, "createRole") == 0 ||
            strcmp(name, "dropRole") == 0 || strcmp(name, "usersInfo") == 0 ||
            strcmp(name, "rolesInfo") == 0)
            coll = NULL; /* database-level (a getMore's collection comes from its cursor) */
        if (strcmp(name, "shardCollection") == 0 || strcmp(name, "shardcollection") == 0 ||
            strcmp(name, "split") == 0 || strcmp(name, "moveChunk") == 0 ||
            strcmp(name, "mergeChunks") == 0 || strcmp(name, "mergeAllChunksOnShard") == 0 ||
            strcmp(name, "clearJumboFlag") == 0 ||
            strcmp(name, "movechunk") == 0 || strcmp(name, "moveRange") == 0 ||
            strcmp(name, "refineCollectionShardKey") == 0 ||
            strcmp(name, "configureCollectionBalancing") == 0 ||
            strcmp(name, "balancerCollectionStatus") == 0 || strcmp(name, "getShardVersion") == 0) {
            const char *ns = coll_of(cmd); /* "db.coll" */
            const char *dot = ns != NULL ? strchr(ns, '.') : NULL;
            if (dot != NULL) {
                snprintf(dbbuf, sizeof(dbbuf), "%.*s", (int)(dot - ns), ns);
                adb = dbbuf;
                coll = dot + 1;
            }
        } else if (strncmp(name, "balancer", 8) == 0) { /* as mongod: config.settings */
            adb = "config";
            coll = "settings";
        } else if (strcasecmp(name, "addShardToZone") == 0 ||
                   strcasecmp(name, "removeShardFromZone") == 0) { /* mongod: config.shards */
            adb = "config";
            coll = "shards";
        } else if (strcasecmp(name, "updateZoneKeyRange") == 0) { /* mongod: config.tags */
            adb = "config";
            coll = "tags";
        } else if (strcmp(name, "enableSharding") == 0 || strcmp(name, "enablesharding") == 0 ||
                   strcmp(name, "movePrimary") == 0 || strcmp(name, "moveprimary") == 0) {
            adb = coll_of(cmd) != NULL ? coll_of(cmd) : db;
            coll = NULL;
        }
    }
    static const char *const fam_remove[] = {"find", "remove", NULL};
    if ((strcmp(name, "findAndModify") == 0 || strcmp(name, "findandmodify") == 0)) {
        bson_iter_t r;
        if (bson_iter_init_find(&r, cmd, "remove") && bson_iter_as_bool(&r))
            acts = fam_remove;
    }
    for (int i = 0; i < 3 && acts[i] != NULL; i++) {
        int a = sbl_auth_action_id(acts[i]);
        if (a < 0 || !sbl_authz_allows(c->authz, a, adb, coll))
            return sbl_err_set(err, SBL_E_Unauthorized, "not authorized on %s to execute command "
                               "{ %s: ... }", adb, name);
    }
    bson_iter_t pipe, bypass;
    const char *tdb = db;
    /* $out and $merge write where they name (the shards run them as __system) */
    if (strcmp(name, "aggregate") == 0 && bson_iter_init_find(&pipe, cmd, "pipeline") &&
        !sbl_authz_pipeline_writes(c->authz, db, &pipe,
                                   bson_iter_init_find(&bypass, cmd, "bypassDocumentValidation") &&
                                       bson_iter_as_bool(&bypass),
                                   &tdb))
        return sbl_err_set(err, SBL_E_Unauthorized,
                           "not authorized on %s to execute command { aggregate: ... }", tdb);
    return 0;
}

int rt_auth_check(sbl_conn_t *conn, const char *name, const char *db, const bson_t *cmd,
                  sbl_err_t *err)
{
    if (!sbl_auth_enabled() || no_auth_needed(name))
        return 0;
    rt_client_t *c = client_of(conn);
    if (c->user == NULL) {
        if (strcmp(name, "createUser") == 0 && sbl_conn_is_loopback(conn) && !has_users())
            return 0; /* the localhost exception: the first user */
        return sbl_err_set(err, SBL_E_Unauthorized, "Command %s requires authentication", name);
    }
    uint64_t g = atomic_load(&generation);
    time_t now = time(NULL);
    if (!resolved_now(c, g, now)) {
        sbl_authz_free(c->authz);
        c->authz = NULL;
        SBL_RET(sbl_authz_resolve(NULL, c->db, c->user, &c->authz, err));
        c->gen = g;
        c->resolved = now;
    }
    return check_actions(c, name, db, cmd, err);
}

int rt_auth_check_loop(sbl_conn_t *conn, const char *name, const char *db, const bson_t *cmd,
                       sbl_err_t *err)
{
    if (!sbl_auth_enabled() || no_auth_needed(name))
        return 0;
    rt_client_t *c = sbl_conn_data(conn);
    if (c == NULL || c->user == NULL || !resolved_now(c, atomic_load(&generation), time(NULL)))
        return -1;
    return check_actions(c, name, db, cmd, err);
}

bool rt_auth_may_advance_cluster_time(sbl_conn_t *conn, const char *name)
{
    if (!sbl_auth_enabled())
        return true;
    rt_client_t *c = client_of(conn);
    if (c->user == NULL && no_auth_needed(name))
        return true; /* hello, saslStart ...: the time is not used (mongod ignores it) */
    int a = sbl_auth_action_id("advanceClusterTime");
    return c->user != NULL && c->authz != NULL && sbl_authz_allows(c->authz, a, NULL, NULL);
}

/* Whether name is one of the commands rt_auth_run answers. */
bool rt_auth_handles(const char *name)
{
    static const char *const cmds[] = {
        "saslStart", "saslContinue", "logout", "connectionStatus", "authenticate", "createUser",
        "dropUser", "dropAllUsersFromDatabase", "updateUser", "usersInfo", "grantRolesToUser",
        "revokeRolesFromUser", "createRole", "dropRole", "rolesInfo", "updateRole",
        "grantPrivilegesToRole", "revokePrivilegesFromRole", "grantRolesToRole",
        "revokeRolesFromRole", "dropAllRolesFromDatabase", NULL};
    for (int i = 0; cmds[i]; i++)
        if (strcmp(name, cmds[i]) == 0)
            return true;
    return false;
}

static void append_status(rt_client_t *c, bool privs, bson_t *reply)
{
    bson_t info, a, u;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "authInfo", &info);
    BSON_APPEND_ARRAY_BEGIN(&info, "authenticatedUsers", &a);
    if (c->user != NULL) {
        BSON_APPEND_DOCUMENT_BEGIN(&a, "0", &u);
        BSON_APPEND_UTF8(&u, "user", c->user);
        BSON_APPEND_UTF8(&u, "db", c->db);
        bson_append_document_end(&a, &u);
    }
    bson_append_array_end(&info, &a);
    sbl_err_t e = {0};
    if (c->user != NULL && c->authz == NULL &&
        sbl_authz_resolve(NULL, c->db, c->user, &c->authz, &e) == 0)
        c->gen = atomic_load(&generation), c->resolved = time(NULL);
    BSON_APPEND_ARRAY_BEGIN(&info, "authenticatedUserRoles", &a);
    if (c->user != NULL && c->authz != NULL)
        sbl_authz_append_roles(c->authz, &a);
    bson_append_array_end(&info, &a);
    if (privs) {
        BSON_APPEND_ARRAY_BEGIN(&info, "authenticatedUserPrivileges", &a);
        if (c->user != NULL && c->authz != NULL)
            sbl_authz_append_privileges(c->authz, &a);
        bson_append_array_end(&info, &a);
    }
    bson_append_document_end(reply, &info);
}

int rt_auth_run(sbl_conn_t *conn, const char *name, const char *db, const bson_t *cmd,
                bson_t *reply, sbl_err_t *err)
{
    rt_client_t *c = client_of(conn);
    if (strcmp(name, "saslStart") == 0 || strcmp(name, "saslContinue") == 0) {
        int rc = name[4] == 'S' ? sasl_start(c, db, cmd, reply, err)
                                : sasl_continue(c, db, cmd, reply, err);
        if (rc == SBL_E_AuthenticationFailed) {
            /* as sabled: the failure's reply waits (this is a worker thread) */
            int ms = sbl_auth_fail_delay_ms(++c->failures);
            struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        } else if (rc == 0 && c->user != NULL && c->scram == NULL) {
            c->failures = 0; /* authenticated */
        }
        return rc;
    }
    if (strcmp(name, "authenticate") == 0)
        return sbl_err_set(err, SBL_E_MechanismUnavailable,
                           "Received authentication for mechanism which is not enabled");
    if (strcmp(name, "logout") == 0) {
        sbl_scram_free(c->scram);
        c->scram = NULL;
        clear_user(c);
        return 0;
    }
    if (strcmp(name, "connectionStatus") == 0) {
        bson_iter_t it;
        bool privs = bson_iter_init_find(&it, cmd, "showPrivileges") && bson_iter_as_bool(&it);
        append_status(c, privs, reply);
        return 0;
    }
    /* user and role commands: stored by the config servers */
    bson_t fwd = BSON_INITIALIZER;
    rt_copy_cmd(cmd, &fwd, NULL);
    int rc = rt_run(-1, db, &fwd, reply, err);
    bson_destroy(&fwd);
    if (strcmp(name, "usersInfo") != 0 && strcmp(name, "rolesInfo") != 0)
        atomic_fetch_add(&generation, 1);
    return rc;
}

/* hello's saslSupportedMechs "db.user": the mechanisms the user has
 * credentials for (drivers pick SCRAM-SHA-256 only when it is listed). */
static void hello_mechs(const char *db_user, bson_t *reply)
{
    const char *dot = strchr(db_user, '.');
    if (dot == NULL || dot == db_user || dot[1] == '\0')
        return;
    char *db = bson_strndup(db_user, (size_t)(dot - db_user));
    bson_t doc;
    bool found = false;
    sbl_err_t e = {0};
    if (sbl_auth_user_get(NULL, db, dot + 1, &doc, &found, &e) == 0 && found) {
        bson_iter_t it, c;
        bson_t mechs;
        uint32_t n = 0;
        BSON_APPEND_ARRAY_BEGIN(reply, "saslSupportedMechs", &mechs);
        if (bson_iter_init_find(&it, &doc, "credentials") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            bson_iter_recurse(&it, &c)) {
            while (bson_iter_next(&c)) {
                char key[16];
                const char *k;
                bson_uint32_to_string(n++, &k, key, sizeof(key));
                bson_append_utf8(&mechs, k, -1, bson_iter_key(&c), -1);
            }
        }
        bson_append_array_end(reply, &mechs);
        bson_destroy(&doc);
    }
    bson_free(db);
}

void rt_auth_hello(sbl_conn_t *conn, const bson_t *cmd, bson_t *reply)
{
    bson_iter_t it;
    if (sbl_auth_enabled() && bson_iter_init_find(&it, cmd, "saslSupportedMechs") &&
        BSON_ITER_HOLDS_UTF8(&it))
        hello_mechs(bson_iter_utf8(&it, NULL), reply);
    if (!sbl_auth_enabled() || !bson_iter_init_find(&it, cmd, "speculativeAuthenticate") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it))
        return;
    const uint8_t *data;
    uint32_t len;
    bson_t sc, r = BSON_INITIALIZER;
    bson_iter_document(&it, &len, &data);
    if (!bson_init_static(&sc, data, len))
        return;
    bson_iter_t f;
    const char *db = "admin";
    if (bson_iter_init_find(&f, &sc, "db") && BSON_ITER_HOLDS_UTF8(&f))
        db = bson_iter_utf8(&f, NULL);
    sbl_err_t e = {0};
    if (bson_iter_init(&f, &sc) && bson_iter_next(&f) &&
        strcmp(bson_iter_key(&f), "saslStart") == 0 &&
        sasl_start(client_of(conn), db, &sc, &r, &e) == 0)
        BSON_APPEND_DOCUMENT(reply, "speculativeAuthenticate", &r);
    bson_destroy(&r);
}

void rt_auth_enter(sbl_conn_t *conn)
{
    current = sbl_auth_enabled() ? client_of(conn) : NULL;
}

void rt_auth_leave(void)
{
    current = NULL;
}

void rt_auth_owner(char *buf, size_t n)
{
    if (current != NULL && current->user != NULL)
        snprintf(buf, n, "%s.%s", current->db, current->user);
    else
        buf[0] = '\0';
}

void rt_auth_uid(uint8_t uid[32])
{
    if (current != NULL && current->user != NULL)
        sbl_lsid_uid(current->user, current->db, uid);
    else
        sbl_lsid_uid(NULL, NULL, uid);
}

bool rt_auth_db_visible(const char *db)
{
    if (current == NULL)
        return true;
    const sbl_authz_t *a = current->authz;
    if (sbl_authz_allows(a, sbl_auth_action_id("listDatabases"), "", NULL))
        return true;
    static const char *const any[] = {"find", "insert", "update", "remove", "listCollections",
                                      "createCollection", "dbStats", NULL};
    for (int i = 0; any[i] != NULL; i++)
        if (sbl_authz_allows(a, sbl_auth_action_id(any[i]), db, NULL))
            return true;
    return false;
}

bool rt_auth_metrics_authorize(const char *user, const char *password)
{
    bool ok = false, allowed = false;
    sbl_err_t e = {0};
    if (sbl_auth_check_password(NULL, "admin", user, password, &ok, &e) != 0 || !ok)
        return false;
    sbl_authz_t *a = NULL;
    if (sbl_authz_resolve(NULL, "admin", user, &a, &e) == 0) {
        allowed = sbl_authz_allows(a, sbl_auth_action_id("serverStatus"), NULL, NULL);
        sbl_authz_free(a);
    }
    return allowed;
}
