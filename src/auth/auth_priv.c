/*
 * auth_priv.c: actions, resources, built-in roles, and the resolution of a
 * user's roles (with inheritance through user-defined roles) into one flat
 * list of privileges that sbl_authz_allows() checks.
 *
 * Resources as MongoDB matches them: {db: D, collection: C} names one
 * collection; C "" is every non-system collection of D and the database D
 * itself; D "" is every database; {cluster: true} is the cluster actions
 * (serverStatus, shutdown ...); {anyResource: true} is everything, including
 * system collections.  What must stay true: a system collection
 * (system.users ...) is matched only by a privilege that names it or by
 * anyResource, and resolution terminates on cyclic role graphs.
 *
 * Simplification (docs/security.md): root holds every action on anyResource.
 */
#include "auth/auth.h"
#include "auth/auth_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROLE_DEPTH 100

/* ---- actions ------------------------------------------------------------------ */

typedef struct action_def {
    const char *name;
    bool cluster;
} action_def_t;

/* Sorted by name (strcmp) for bsearch; the index is the action id. */
static const action_def_t actions[] = {
    {"addShard", true},
    {"advanceClusterTime", true},
    {"anyAction", false},
    {"applicationMessage", true},
    {"authSchemaUpgrade", true},
    {"bypassDocumentValidation", false},
    {"changeCustomData", false},
    {"changeOwnCustomData", false},
    {"changeOwnPassword", false},
    {"changePassword", false},
    {"changeStream", false},
    {"clearJumboFlag", false},
    {"collMod", false},
    {"collStats", false},
    {"compact", false},
    {"connPoolStats", true},
    {"convertToCapped", false},
    {"cpuProfiler", true},
    {"createCollection", false},
    {"createIndex", false},
    {"createRole", false},
    {"createUser", false},
    {"dbHash", false},
    {"dbStats", false},
    {"dropCollection", false},
    {"dropConnections", true},
    {"dropDatabase", false},
    {"dropIndex", false},
    {"dropRole", false},
    {"dropUser", false},
    {"enableProfiler", false},
    {"enableSharding", false},
    {"find", false},
    {"flushRouterConfig", true},
    {"fsync", true},
    {"getClusterParameter", true},
    {"getCmdLineOpts", true},
    {"getDefaultRWConcern", true},
    {"getLog", true},
    {"getParameter", true},
    {"getShardVersion", false},
    {"grantRole", false},
    {"hostInfo", true},
    {"indexStats", false},
    {"inprog", true},
    {"insert", false},
    {"invalidateUserCache", true},
    {"killAnyCursor", false},
    {"killAnySession", true},
    {"killCursors", false},
    {"killop", true},
    {"listCollections", false},
    {"listDatabases", true},
    {"listIndexes", false},
    {"listSessions", true},
    {"listShards", true},
    {"logRotate", true},
    {"moveChunk", false},
    {"netstat", true},
    {"planCacheRead", false},
    {"planCacheWrite", false},
    {"reIndex", false},
    {"remove", false},
    {"removeShard", true},
    {"renameCollectionSameDB", false},
    {"replSetConfigure", true},
    {"replSetGetConfig", true},
    {"replSetGetStatus", true},
    {"replSetStateChange", true},
    {"revokeRole", false},
    {"serverStatus", true},
    {"setClusterParameter", true},
    {"setDefaultRWConcern", true},
    {"setFeatureCompatibilityVersion", true},
    {"setParameter", true},
    {"shardingState", true},
    {"shutdown", true},
    {"splitChunk", false},
    {"top", true},
    {"unlock", true},
    {"update", false},
    {"validate", false},
    {"viewRole", false},
    {"viewUser", false},
};
#define NACTIONS ((int)(sizeof(actions) / sizeof(actions[0])))
_Static_assert(sizeof(actions) / sizeof(actions[0]) <= 128, "action set is two words");

static int action_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const action_def_t *)elem)->name);
}

int sbl_auth_action_id(const char *name)
{
    const action_def_t *a = bsearch(name, actions, (size_t)NACTIONS, sizeof(actions[0]), action_cmp);
    return a == NULL ? -1 : (int)(a - actions);
}

bool sbl_auth_action_is_cluster(int action)
{
    return action >= 0 && action < NACTIONS && actions[action].cluster;
}

const char *sbl_auth_action_name(int action)
{
    return action >= 0 && action < NACTIONS ? actions[action].name : "?";
}

/* ---- privileges ------------------------------------------------------------------ */

enum { RES_NS, RES_CLUSTER, RES_ANY };

typedef struct priv {
    int kind;
    char *db;   /* RES_NS: "" = any database */
    char *coll; /* RES_NS: "" = any non-system collection (and the database itself) */
    uint64_t acts[2];
} priv_t;

struct sbl_authz {
    priv_t *privs;
    size_t n, cap;
    bson_t *roles; /* array of {role, db}, every role held */
    uint32_t nroles;
    bson_t *seen;  /* "db.role" -> true */
};

static void acts_set(uint64_t *acts, int id)
{
    acts[id / 64] |= (uint64_t)1 << (id % 64);
}

static bool acts_has(const uint64_t *acts, int id)
{
    return (acts[id / 64] >> (id % 64)) & 1;
}

static priv_t *priv_add(sbl_authz_t *a, int kind, const char *db, const char *coll)
{
    for (size_t i = 0; i < a->n; i++) {
        priv_t *p = &a->privs[i];
        if (p->kind == kind && (kind != RES_NS || (strcmp(p->db, db) == 0 &&
                                                    strcmp(p->coll, coll) == 0)))
            return p;
    }
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 8;
        a->privs = bson_realloc(a->privs, a->cap * sizeof(*a->privs));
    }
    priv_t *p = &a->privs[a->n++];
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->db = bson_strdup(kind == RES_NS ? db : "");
    p->coll = bson_strdup(kind == RES_NS ? coll : "");
    return p;
}

static void grant(sbl_authz_t *a, int kind, const char *db, const char *coll,
                  const char *const *names)
{
    priv_t *p = priv_add(a, kind, db, coll);
    for (; *names != NULL; names++) {
        int id = sbl_auth_action_id(*names);
        if (id >= 0)
            acts_set(p->acts, id);
    }
}

bool sbl_authz_allows(const sbl_authz_t *a, int action, const char *db, const char *coll)
{
    if (a == NULL || action < 0)
        return false;
    bool cluster = actions[action].cluster;
    bool system = coll != NULL && strncmp(coll, "system.", 7) == 0;
    int any = sbl_auth_action_id("anyAction");
    for (size_t i = 0; i < a->n; i++) {
        const priv_t *p = &a->privs[i];
        if (!acts_has(p->acts, action) && !acts_has(p->acts, any))
            continue;
        if (p->kind == RES_ANY)
            return true;
        if (cluster || p->kind == RES_CLUSTER) {
            if (cluster && p->kind == RES_CLUSTER)
                return true;
            continue;
        }
        if (p->db[0] != '\0' && strcmp(p->db, db) != 0)
            continue;
        if (coll == NULL) {
            if (p->coll[0] == '\0')
                return true;
        } else if (p->coll[0] == '\0') {
            if (!system)
                return true;
        } else if (strcmp(p->coll, coll) == 0) {
            return true;
        }
    }
    return false;
}

/* ---- built-in roles ------------------------------------------------------------------ */

static const char *const read_acts[] = {"changeStream", "collStats", "dbHash", "dbStats", "find",
                                        "killCursors", "listCollections", "listIndexes", NULL};
static const char *const write_acts[] = {"convertToCapped", "createCollection", "createIndex",
                                         "dropCollection", "dropIndex", "insert", "remove",
                                         "renameCollectionSameDB", "update", NULL};
static const char *const dbadmin_acts[] = {
    "bypassDocumentValidation", "collMod", "collStats", "compact", "convertToCapped",
    "createCollection", "createIndex", "dbStats", "dropCollection", "dropDatabase", "dropIndex",
    "enableProfiler", "listCollections", "listIndexes", "planCacheRead", "planCacheWrite",
    "reIndex", "renameCollectionSameDB", "validate", NULL};
static const char *const profile_acts[] = {"changeStream", "collStats", "createCollection",
                                           "dbHash", "dbStats", "dropCollection", "find",
                                           "listCollections", "listIndexes", NULL};
static const char *const useradmin_acts[] = {"changeCustomData", "changePassword", "createRole",
                                             "createUser", "dropRole", "dropUser", "grantRole",
                                             "revokeRole", "viewRole", "viewUser", NULL};
static const char *const monitor_cluster[] = {
    "connPoolStats", "getClusterParameter", "getCmdLineOpts", "getDefaultRWConcern", "getLog",
    "getParameter", "hostInfo", "inprog", "listDatabases", "listSessions", "netstat",
    "replSetGetConfig", "replSetGetStatus", "serverStatus", "shardingState", "top", NULL};
static const char *const monitor_any[] = {"collStats", "dbStats", "indexStats", NULL};
static const char *const hostmgr_cluster[] = {
    "applicationMessage", "cpuProfiler", "dropConnections", "flushRouterConfig", "fsync",
    "invalidateUserCache", "killAnySession", "killop", "logRotate", "setParameter", "shutdown",
    "unlock", NULL};
static const char *const clustermgr_cluster[] = {
    "addShard", "listShards", "removeShard", "replSetConfigure", "replSetGetConfig",
    "replSetGetStatus", "replSetStateChange", "setClusterParameter", "setDefaultRWConcern",
    "setFeatureCompatibilityVersion", NULL};
/* the sharding actions on any namespace, and the config database's
 * documents (balancer settings) */
static const char *const clustermgr_any[] = {"clearJumboFlag", "enableSharding",
                                             "getShardVersion", "moveChunk", "splitChunk", NULL};
static const char *const clustermgr_config[] = {"find", "insert", "remove", "update", NULL};
static const char *const list_dbs[] = {"listDatabases", NULL};
static const char *const useradmin_any_cluster[] = {"authSchemaUpgrade", "invalidateUserCache",
                                                    "listDatabases", NULL};
static const char *const backup_cluster[] = {"getParameter", "listDatabases", "serverStatus",
                                             NULL};
static const char *const backup_any[] = {"collStats", "dbHash", "dbStats", "find",
                                         "listCollections", "listIndexes", NULL};
static const char *const find_only[] = {"find", NULL};
static const char *const restore_any[] = {
    "bypassDocumentValidation", "changeCustomData", "changePassword", "collMod", "convertToCapped",
    "createCollection", "createIndex", "createRole", "createUser", "dropCollection", "dropRole",
    "dropUser", "grantRole", "insert", "listCollections", "revokeRole", "viewRole", "viewUser",
    NULL};
static const char *const restore_system[] = {"createCollection", "createIndex", "dropCollection",
                                             "find", "insert", "remove", "update", NULL};
static const char *const any_action[] = {"anyAction", NULL};

static const char *const db_roles[] = {"dbAdmin", "dbOwner", "read", "readWrite", "userAdmin",
                                       NULL};
static const char *const admin_roles[] = {
    "backup", "clusterAdmin", "clusterManager", "clusterMonitor", "dbAdminAnyDatabase",
    "hostManager", "readAnyDatabase", "readWriteAnyDatabase", "restore", "root",
    "userAdminAnyDatabase", NULL};

static bool in_list(const char *const *list, const char *name)
{
    for (; *list != NULL; list++)
        if (strcmp(*list, name) == 0)
            return true;
    return false;
}

bool sbl_auth_builtin_role(const char *role, const char *db)
{
    return in_list(db_roles, role) || (strcmp(db, "admin") == 0 && in_list(admin_roles, role));
}

/* Grant role@db's built-in privileges to a; false when it is not built in. */
static bool grant_builtin(sbl_authz_t *a, const char *role, const char *db)
{
    if (strcmp(role, "__system") == 0 && strcmp(db, "admin") == 0) {
        grant(a, RES_ANY, "", "", any_action); /* __system@local (keyFile) only */
        return true;
    }
    if (!sbl_auth_builtin_role(role, db))
        return false;
    bool owner = strcmp(role, "dbOwner") == 0;
    if (strcmp(role, "read") == 0 || strcmp(role, "readWrite") == 0 || owner)
        grant(a, RES_NS, db, "", read_acts);
    if (strcmp(role, "readWrite") == 0 || owner)
        grant(a, RES_NS, db, "", write_acts);
    if (strcmp(role, "dbAdmin") == 0 || owner) {
        grant(a, RES_NS, db, "", dbadmin_acts);
        grant(a, RES_NS, db, "system.profile", profile_acts);
    }
    if (strcmp(role, "userAdmin") == 0 || owner)
        grant(a, RES_NS, db, "", useradmin_acts);
    if (strcmp(role, "readAnyDatabase") == 0 || strcmp(role, "readWriteAnyDatabase") == 0) {
        grant(a, RES_NS, "", "", read_acts);
        grant(a, RES_CLUSTER, "", "", list_dbs);
    }
    if (strcmp(role, "readWriteAnyDatabase") == 0)
        grant(a, RES_NS, "", "", write_acts);
    if (strcmp(role, "dbAdminAnyDatabase") == 0) {
        grant(a, RES_NS, "", "", dbadmin_acts);
        grant(a, RES_NS, "", "system.profile", profile_acts);
        grant(a, RES_CLUSTER, "", "", list_dbs);
    }
    if (strcmp(role, "userAdminAnyDatabase") == 0) {
        grant(a, RES_NS, "", "", useradmin_acts);
        grant(a, RES_CLUSTER, "", "", useradmin_any_cluster);
        grant(a, RES_NS, "admin", "system.users", find_only);
        grant(a, RES_NS, "admin", "system.roles", find_only);
    }
    bool cadmin = strcmp(role, "clusterAdmin") == 0;
    if (strcmp(role, "clusterMonitor") == 0 || cadmin) {
        grant(a, RES_CLUSTER, "", "", monitor_cluster);
        grant(a, RES_NS, "", "", monitor_any);
    }
    if (strcmp(role, "hostManager") == 0 || cadmin) {
        grant(a, RES_CLUSTER, "", "", hostmgr_cluster);
        /* compact, and killing any user's cursors: mongod's hostManager on any
         * non-system collection. */
        static const char *const kc[] = {"compact", "killAnyCursor", "killCursors", NULL};
        grant(a, RES_NS, "", "", kc);
    }
    if (strcmp(role, "clusterManager") == 0 || cadmin) {
        grant(a, RES_CLUSTER, "", "", clustermgr_cluster);
        grant(a, RES_CLUSTER, "", "", list_dbs);
        grant(a, RES_NS, "", "", clustermgr_any);
        grant(a, RES_NS, "config", "", clustermgr_config);
    }
    if (cadmin) {
        static const char *const dd[] = {"dropDatabase", NULL};
        grant(a, RES_NS, "", "", dd);
    }
    if (strcmp(role, "backup") == 0) {
        grant(a, RES_CLUSTER, "", "", backup_cluster);
        grant(a, RES_NS, "", "", backup_any);
        grant(a, RES_ANY, "", "", find_only);
    }
    if (strcmp(role, "restore") == 0) {
        grant(a, RES_NS, "", "", restore_any);
        grant(a, RES_NS, "admin", "system.users", restore_system);
        grant(a, RES_NS, "admin", "system.roles", restore_system);
        grant(a, RES_CLUSTER, "", "", list_dbs);
    }
    if (strcmp(role, "root") == 0)
        grant(a, RES_ANY, "", "", any_action);
    return true;
}

/* ---- privileges as documents ------------------------------------------------------- */

static void append_priv(const priv_t *p, bson_t *arr, uint32_t idx)
{
    char key[16];
    const char *k;
    bson_t d, r, acts;
    bson_uint32_to_string(idx, &k, key, sizeof(key));
    bson_append_document_begin(arr, k, -1, &d);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "resource", &r);
    if (p->kind == RES_ANY) {
        BSON_APPEND_BOOL(&r, "anyResource", true);
    } else if (p->kind == RES_CLUSTER) {
        BSON_APPEND_BOOL(&r, "cluster", true);
    } else {
        BSON_APPEND_UTF8(&r, "db", p->db);
        BSON_APPEND_UTF8(&r, "collection", p->coll);
    }
    bson_append_document_end(&d, &r);
    BSON_APPEND_ARRAY_BEGIN(&d, "actions", &acts);
    uint32_t n = 0;
    for (int i = 0; i < NACTIONS; i++) {
        if (!acts_has(p->acts, i))
            continue;
        char ak[16];
        const char *akp;
        bson_uint32_to_string(n++, &akp, ak, sizeof(ak));
        bson_append_utf8(&acts, akp, -1, actions[i].name, -1);
    }
    bson_append_array_end(&d, &acts);
    bson_append_document_end(arr, &d);
}

void sbl_authz_append_privileges(const sbl_authz_t *a, bson_t *arr)
{
    if (a == NULL)
        return;
    for (size_t i = 0; i < a->n; i++)
        append_priv(&a->privs[i], arr, (uint32_t)i);
}

void sbl_authz_append_roles(const sbl_authz_t *a, bson_t *arr)
{
    if (a == NULL)
        return;
    bson_iter_t it;
    bson_iter_init(&it, a->roles);
    while (bson_iter_next(&it))
        sbl_append_value(arr, bson_iter_key(&it), -1, bson_iter_value(&it));
}

static sbl_authz_t *authz_new(void)
{
    sbl_authz_t *a = bson_malloc0(sizeof(*a));
    a->roles = bson_new();
    a->seen = bson_new();
    return a;
}

void sbl_authz_free(sbl_authz_t *a)
{
    if (a == NULL)
        return;
    for (size_t i = 0; i < a->n; i++) {
        bson_free(a->privs[i].db);
        bson_free(a->privs[i].coll);
    }
    bson_free(a->privs);
    bson_destroy(a->roles);
    bson_destroy(a->seen);
    bson_free(a);
}

void sbl_auth_builtin_privileges(const char *role, const char *db, bson_t *arr)
{
    sbl_authz_t *a = authz_new();
    grant_builtin(a, role, db);
    sbl_authz_append_privileges(a, arr);
    sbl_authz_free(a);
}

/* ---- parsing privileges of user-defined roles ---------------------------------------- */

/* Parse one {resource, actions} into a (when a is not NULL). */
static int parse_priv(const bson_iter_t *pit, sbl_authz_t *a, sbl_err_t *err)
{
    bson_iter_t f, r;
    const char *db = NULL, *coll = NULL;
    int kind = -1;
    bool have_actions = false;
    uint64_t acts[2] = {0, 0};
    if (!BSON_ITER_HOLDS_DOCUMENT(pit))
        return sbl_err_set(err, SBL_E_FailedToParse, "Each privilege must be an object");
    bson_iter_recurse(pit, &f);
    while (bson_iter_next(&f)) {
        const char *k = bson_iter_key(&f);
        if (strcmp(k, "resource") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&f))
                return sbl_err_set(err, SBL_E_FailedToParse,
                                   "privilege 'resource' must be an object");
            bson_iter_recurse(&f, &r);
            while (bson_iter_next(&r)) {
                const char *rk = bson_iter_key(&r);
                if (strcmp(rk, "db") == 0 && BSON_ITER_HOLDS_UTF8(&r))
                    db = bson_iter_utf8(&r, NULL);
                else if (strcmp(rk, "collection") == 0 && BSON_ITER_HOLDS_UTF8(&r))
                    coll = bson_iter_utf8(&r, NULL);
                else if (strcmp(rk, "cluster") == 0 && bson_iter_as_bool(&r))
                    kind = RES_CLUSTER;
                else if (strcmp(rk, "anyResource") == 0 && bson_iter_as_bool(&r))
                    kind = RES_ANY;
                else
                    return sbl_err_set(err, SBL_E_FailedToParse,
                                       "Unrecognized or malformed resource field '%s'", rk);
            }
            if (kind == -1) {
                if (db == NULL || coll == NULL)
                    return sbl_err_set(err, SBL_E_FailedToParse,
                                       "resource must have both 'db' and 'collection' fields, "
                                       "or 'cluster: true', or 'anyResource: true'");
                kind = RES_NS;
            } else if (db != NULL || coll != NULL) {
                return sbl_err_set(err, SBL_E_FailedToParse,
                                   "resource cannot combine 'cluster' or 'anyResource' with "
                                   "'db'/'collection'");
            }
        } else if (strcmp(k, "actions") == 0) {
            bson_iter_t ai;
            if (!BSON_ITER_HOLDS_ARRAY(&f))
                return sbl_err_set(err, SBL_E_FailedToParse,
                                   "privilege 'actions' must be an array of strings");
            have_actions = true;
            bson_iter_recurse(&f, &ai);
            while (bson_iter_next(&ai)) {
                if (!BSON_ITER_HOLDS_UTF8(&ai))
                    return sbl_err_set(err, SBL_E_FailedToParse,
                                       "privilege 'actions' must be an array of strings");
                int id = sbl_auth_action_id(bson_iter_utf8(&ai, NULL));
                if (id < 0)
                    return sbl_err_set(err, SBL_E_BadValue,
                                       "Unrecognized action privilege string: %s",
                                       bson_iter_utf8(&ai, NULL));
                acts_set(acts, id);
            }
        } else {
            return sbl_err_set(err, SBL_E_FailedToParse, "Unrecognized field in privilege: %s", k);
        }
    }
    if (kind == -1 || !have_actions)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "privilege must have 'resource' and 'actions'");
    if (a != NULL) {
        priv_t *p = priv_add(a, kind, db, coll);
        p->acts[0] |= acts[0];
        p->acts[1] |= acts[1];
    }
    return 0;
}

static int parse_privs(const bson_t *privs, sbl_authz_t *a, sbl_err_t *err)
{
    bson_iter_t it;
    bson_iter_init(&it, privs);
    while (bson_iter_next(&it))
        SBL_RET(parse_priv(&it, a, err));
    return 0;
}

int sbl_auth_check_privileges(const bson_t *privs, sbl_err_t *err)
{
    return parse_privs(privs, NULL, err);
}

/* ---- resolution ------------------------------------------------------------------ */

/* Read {role, db} (or "name" with default_db) at it. */
static int role_name(const bson_iter_t *it, const char *default_db, const char **rolep,
                     const char **dbp, sbl_err_t *err)
{
    if (BSON_ITER_HOLDS_UTF8(it)) {
        *rolep = bson_iter_utf8(it, NULL);
        *dbp = default_db;
        return 0;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t f;
        *rolep = *dbp = NULL;
        bson_iter_recurse(it, &f);
        while (bson_iter_next(&f)) {
            if (strcmp(bson_iter_key(&f), "role") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                *rolep = bson_iter_utf8(&f, NULL);
            else if (strcmp(bson_iter_key(&f), "db") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                *dbp = bson_iter_utf8(&f, NULL);
        }
        if (*rolep != NULL && *dbp != NULL)
            return 0;
        return sbl_err_set(err, SBL_E_BadValue, "Missing expected field \"%s\"",
                           *rolep == NULL ? "role" : "db");
    }
    return sbl_err_set(err, SBL_E_BadValue,
                       "Role names must be either strings or objects");
}

/*
 * Visit role@db and what it inherits: grant privileges into a (when not NULL),
 * record names in a->roles.  strict: a missing role is RoleNotFound.
 */
static int walk_role(sbl_session_t *ss, sbl_authz_t *a, const char *role, const char *db,
                     int depth, bool strict, const char *cycle_role, const char *cycle_db,
                     sbl_err_t *err)
{
    if (cycle_role != NULL && strcmp(role, cycle_role) == 0 && strcmp(db, cycle_db) == 0)
        return sbl_err_set(err, SBL_E_GraphContainsCycle,
                           "Cycle in dependency graph: %s@%s", role, db);
    char *key = bson_strdup_printf("%s.%s", db, role);
    bson_iter_t it;
    bool seen = bson_iter_init_find(&it, a->seen, key);
    if (!seen)
        BSON_APPEND_BOOL(a->seen, key, true);
    bson_free(key);
    if (seen || depth > MAX_ROLE_DEPTH)
        return 0;
    bool builtin = grant_builtin(a, role, db);
    bson_t doc;
    bool found = false;
    if (!builtin) {
        SBL_RET(sbl_auth_role_get(ss, db, role, &doc, &found, err));
        if (!found)
            return strict ? sbl_err_set(err, SBL_E_RoleNotFound, "Could not find role: %s@%s",
                                        role, db)
                          : 0;
    }
    char k[16];
    const char *kp;
    bson_t r;
    bson_uint32_to_string(a->nroles++, &kp, k, sizeof(k));
    bson_append_document_begin(a->roles, kp, -1, &r);
    BSON_APPEND_UTF8(&r, "role", role);
    BSON_APPEND_UTF8(&r, "db", db);
    bson_append_document_end(a->roles, &r);
    if (builtin)
        return 0;

    int rc = 0;
    bson_iter_t f, ch;
    if (bson_iter_init_find(&f, &doc, "privileges") && BSON_ITER_HOLDS_ARRAY(&f)) {
        bson_iter_recurse(&f, &ch);
        while (bson_iter_next(&ch))
            if (parse_priv(&ch, a, err) != 0)
                sbl_err_clear(err); /* a stored privilege we cannot read grants nothing */
    }
    if (bson_iter_init_find(&f, &doc, "roles") && BSON_ITER_HOLDS_ARRAY(&f)) {
        bson_iter_recurse(&f, &ch);
        while (bson_iter_next(&ch)) {
            const char *r2, *d2;
            if (role_name(&ch, db, &r2, &d2, err) != 0) {
                sbl_err_clear(err);
                continue;
            }
            SBL_ERR(walk_role(ss, a, r2, d2, depth + 1, strict, cycle_role, cycle_db, err));
        }
    }
err:
    bson_destroy(&doc);
    return rc;
}

int sbl_authz_resolve(sbl_session_t *ss, const char *db, const char *user, sbl_authz_t **authzp,
                      sbl_err_t *err)
{
    bson_t doc;
    bool found = false;
    int rc = 0;
    *authzp = NULL;
    SBL_RET(sbl_auth_user_get(ss, db, user, &doc, &found, err));
    sbl_authz_t *a = authz_new();
    if (found) {
        bson_iter_t f, ch;
        if (bson_iter_init_find(&f, &doc, "roles") && BSON_ITER_HOLDS_ARRAY(&f)) {
            bson_iter_recurse(&f, &ch);
            while (bson_iter_next(&ch)) {
                const char *r, *d;
                if (role_name(&ch, db, &r, &d, err) != 0) {
                    sbl_err_clear(err);
                    continue;
                }
                if ((rc = walk_role(ss, a, r, d, 0, false, NULL, NULL, err)) != 0)
                    break;
            }
        }
        bson_destroy(&doc);
    }
    if (rc != 0) {
        sbl_authz_free(a);
        return rc;
    }
    *authzp = a;
    return 0;
}

int sbl_auth_roles_closure(sbl_session_t *ss, const bson_t *roles_array, const char *default_db,
                           const char *cycle_role, const char *cycle_db, bson_t *out,
                           sbl_err_t *err)
{
    sbl_authz_t *a = authz_new();
    int rc = 0;
    bson_iter_t it;
    bson_iter_init(&it, roles_array);
    while (bson_iter_next(&it)) {
        const char *r, *d;
        SBL_ERR(role_name(&it, default_db, &r, &d, err));
        SBL_ERR(walk_role(ss, a, r, d, 0, true, cycle_role, cycle_db, err));
    }
    if (out != NULL)
        sbl_authz_append_roles(a, out);
err:
    sbl_authz_free(a);
    return rc;
}

/* ---- $out and $merge ------------------------------------------------------------- */

static bool allows_named(const sbl_authz_t *a, const char *action, const char *db,
                         const char *coll)
{
    int id = sbl_auth_action_id(action);
    return id >= 0 && sbl_authz_allows(a, id, db, coll);
}

/* The target of a $merge's into (a string, or {db, coll}) or of an $out's
 * {db, coll}, and $merge's modes. */
static void output_stage(const bson_iter_t *stage, bool out, const char **tdb, const char **tcoll,
                         const char **matched, const char **not_matched)
{
    bson_iter_t f, t;
    if (BSON_ITER_HOLDS_UTF8(stage)) {
        *tcoll = bson_iter_utf8(stage, NULL);
        return;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(stage) || !bson_iter_recurse(stage, &f))
        return;
    while (bson_iter_next(&f)) {
        const char *k = bson_iter_key(&f);
        if (!out && strcmp(k, "into") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
            *tcoll = bson_iter_utf8(&f, NULL);
        } else if (!out && strcmp(k, "into") == 0 && BSON_ITER_HOLDS_DOCUMENT(&f) &&
                   bson_iter_recurse(&f, &t)) {
            while (bson_iter_next(&t))
                if (strcmp(bson_iter_key(&t), "db") == 0 && BSON_ITER_HOLDS_UTF8(&t))
                    *tdb = bson_iter_utf8(&t, NULL);
                else if (strcmp(bson_iter_key(&t), "coll") == 0 && BSON_ITER_HOLDS_UTF8(&t))
                    *tcoll = bson_iter_utf8(&t, NULL);
        } else if (out && strcmp(k, "db") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
            *tdb = bson_iter_utf8(&f, NULL);
        } else if (out && strcmp(k, "coll") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
            *tcoll = bson_iter_utf8(&f, NULL);
        } else if (!out && strcmp(k, "whenMatched") == 0) {
            *matched = BSON_ITER_HOLDS_UTF8(&f) ? bson_iter_utf8(&f, NULL) : "pipeline";
        } else if (!out && strcmp(k, "whenNotMatched") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
            *not_matched = bson_iter_utf8(&f, NULL);
        }
    }
}

bool sbl_authz_pipeline_writes(const sbl_authz_t *a, const char *db, const bson_iter_t *pipe,
                               bool bypass, const char **dbp)
{
    bson_iter_t st, stage;
    if (!BSON_ITER_HOLDS_ARRAY(pipe) || !bson_iter_recurse(pipe, &st))
        return true;
    while (bson_iter_next(&st)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&st) || !bson_iter_recurse(&st, &stage) ||
            !bson_iter_next(&stage))
            continue;
        const char *name = bson_iter_key(&stage);
        bool out = strcmp(name, "$out") == 0;
        if (!out && strcmp(name, "$merge") != 0)
            continue;
        const char *tdb = db, *tcoll = NULL, *matched = "merge", *not_matched = "insert";
        output_stage(&stage, out, &tdb, &tcoll, &matched, &not_matched);
        if (tcoll == NULL)
            continue; /* malformed: the stage refuses it */
        bool ok = out ? allows_named(a, "insert", tdb, tcoll) && allows_named(a, "remove", tdb, tcoll)
                      : (strcmp(not_matched, "insert") != 0 ||
                         allows_named(a, "insert", tdb, tcoll)) &&
                            (strcmp(matched, "fail") == 0 || allows_named(a, "update", tdb, tcoll));
        if (ok && bypass)
            ok = allows_named(a, "bypassDocumentValidation", tdb, tcoll);
        if (!ok) {
            if (dbp != NULL)
                *dbp = tdb;
            return false;
        }
    }
    return true;
}
