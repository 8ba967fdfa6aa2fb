/*
 * auth_cmds.c: a connection's authentication (saslStart, saslContinue,
 * hello's speculativeAuthenticate and saslSupportedMechs, logout,
 * authenticate) and the dispatcher's authorization check.
 *
 * What must stay true:
 *  - With authorization off (no --auth) the check returns at once: nothing
 *    else changes.
 *  - An unauthenticated connection runs only SBL_CMD_NO_AUTH commands, and,
 *    on loopback while admin.system.users is empty, createUser / createRole
 *    (the localhost exception), which closes once a user exists.
 *  - A connection's resolved privileges are re-resolved whenever the
 *    users/roles generation moved, so a revoked privilege is gone by the next
 *    command.
 *  - Every authentication failure is the same 18 "Authentication failed.",
 *    logged with the remote address; the dispatcher delays its reply.
 */
#include "auth/auth.h"
#include "cmd/cmd_int.h"
#include "common/log.h"
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- per-connection state -------------------------------------------------------- */

static void end_conversation(sbl_client_t *c)
{
    sbl_scram_free(c->scram);
    c->scram = NULL;
}

static void clear_user(sbl_client_t *c)
{
    bson_free(c->auth_user);
    bson_free(c->auth_db);
    sbl_authz_free(c->authz);
    c->auth_user = c->auth_db = NULL;
    c->authz = NULL;
}

void sbl_cmd_auth_client_free(sbl_client_t *c)
{
    end_conversation(c);
    clear_user(c);
}

int sbl_cmd_auth_fail_delay_ms(const sbl_client_t *c)
{
    return sbl_auth_fail_delay_ms(c->auth_failures);
}

static void log_auth(sbl_opctx_t *ctx, bool ok, const char *mech, const char *user,
                     const char *db, const sbl_err_t *err)
{
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "mechanism", mech);
    BSON_APPEND_UTF8(&attr, "principalName", user);
    BSON_APPEND_UTF8(&attr, "authenticationDatabase", db);
    BSON_APPEND_UTF8(&attr, "remote", ctx->conn != NULL ? sbl_conn_remote(ctx->conn) : "internal");
    if (!ok) {
        bson_t e;
        BSON_APPEND_DOCUMENT_BEGIN(&attr, "error", &e);
        BSON_APPEND_UTF8(&e, "code", sbl_err_name(err->code));
        BSON_APPEND_UTF8(&e, "reason", err->msg);
        bson_append_document_end(&attr, &e);
    }
    sbl_cmd_audit_authenticate(ctx, mech, user, db, ok ? 0 : err->code);
    if (ok)
        sbl_log(SBL_LOG_INFO, "ACCESS", 5286306, "Successfully authenticated", &attr);
    else
        sbl_log(SBL_LOG_INFO, "ACCESS", 20249, "Authentication failed", &attr);
    bson_destroy(&attr);
}

/* The conversation succeeded: the connection is now user@db. */
static void become(sbl_opctx_t *ctx, const char *user, const char *db)
{
    sbl_client_t *c = ctx->client;
    sbl_authz_t *a = NULL;
    sbl_err_t e;
    clear_user(c);
    c->auth_user = bson_strdup(user);
    c->auth_db = bson_strdup(db);
    c->authz_gen = sbl_auth_generation();
    if (sbl_authz_resolve(ctx->ss, db, user, &a, &e) == 0)
        c->authz = a;
    c->auth_failures = 0;
}

/* ---- saslStart / saslContinue ---------------------------------------------------- */

/* saslStart's work, also run for hello's speculativeAuthenticate (db: its "db" field). */
static int sasl_start(sbl_opctx_t *ctx, const bson_t *cmd, const char *db, bson_t *r,
                      sbl_err_t *err)
{
    bson_iter_t it;
    sbl_client_t *c = ctx->client;
    const uint8_t *payload;
    uint32_t len;
    if (!bson_iter_init_find(&it, cmd, "mechanism") || !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_BadValue, "Missing required field 'mechanism'");
    const char *mech = bson_iter_utf8(&it, NULL);
    SBL_RET(sbl_sasl_payload(cmd, &payload, &len, err));
    if (strcmp(mech, "SCRAM-SHA-1") != 0 && strcmp(mech, "SCRAM-SHA-256") != 0)
        return sbl_err_set(err, SBL_E_MechanismUnavailable,
                           "Received authentication for mechanism %s which is not enabled", mech);
    end_conversation(c);
    uint8_t *out = NULL;
    size_t outlen = 0;
    sbl_scram_t *conv = NULL;
    int rc = sbl_scram_start(ctx->ss, db, mech, payload, len, &conv, &out, &outlen, err);
    if (rc != 0) {
        c->auth_failures++;
        log_auth(ctx, false, mech, "", db, err);
        return rc;
    }
    c->scram = conv;
    c->scram_skip_empty = sbl_sasl_skip_empty(cmd);
    sbl_sasl_append_reply(r, false, out, outlen);
    bson_free(out);
    return 0;
}

int sbl_cmd_sasl_start(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sasl_start(ctx, ctx->cmd, ctx->db, ctx->reply, err);
}

int sbl_cmd_sasl_continue(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    sbl_client_t *c = ctx->client;
    const uint8_t *payload;
    uint32_t len;
    if (!bson_iter_init_find(&it, ctx->cmd, "conversationId") || !BSON_ITER_HOLDS_NUMBER(&it))
        return sbl_err_set(err, SBL_E_BadValue, "Missing required field 'conversationId'");
    SBL_RET(sbl_sasl_payload(ctx->cmd, &payload, &len, err));
    if (c->scram == NULL)
        return sbl_err_set(err, SBL_E_ProtocolError,
                           "No SASL session state found");
    if (bson_iter_as_int64(&it) != SBL_SASL_CONVERSATION_ID) {
        end_conversation(c);
        return sbl_err_set(err, SBL_E_ProtocolError, "Mismatched conversation id");
    }
    if (strcmp(sbl_scram_db(c->scram), ctx->db) != 0) {
        end_conversation(c);
        return sbl_err_set(err, SBL_E_ProtocolError,
                           "Attempt to switch database target during SASL authentication.");
    }
    uint8_t *out = NULL;
    size_t outlen = 0;
    bool done = false;
    bool skip = c->scram_skip_empty || sbl_sasl_skip_empty(ctx->cmd);
    int rc = sbl_scram_step(c->scram, payload, len, skip, &out, &outlen, &done, err);
    if (rc != 0) {
        if (rc == SBL_E_AuthenticationFailed)
            c->auth_failures++;
        log_auth(ctx, false, sbl_scram_mechanism(c->scram), sbl_scram_user(c->scram),
                 sbl_scram_db(c->scram), err);
        end_conversation(c);
        return rc;
    }
    sbl_sasl_append_reply(ctx->reply, done, out, outlen);
    bson_free(out);
    if (done) {
        become(ctx, sbl_scram_user(c->scram), sbl_scram_db(c->scram));
        log_auth(ctx, true, sbl_scram_mechanism(c->scram), c->auth_user, c->auth_db, NULL);
        end_conversation(c);
    }
    return 0;
}

int sbl_cmd_authenticate(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    const char *mech = "";
    if (bson_iter_init_find(&it, ctx->cmd, "mechanism") && BSON_ITER_HOLDS_UTF8(&it))
        mech = bson_iter_utf8(&it, NULL);
    return sbl_err_set(err, SBL_E_MechanismUnavailable,
                       "Received authentication for mechanism %s which is not enabled", mech);
}

int sbl_cmd_logout(sbl_opctx_t *ctx, sbl_err_t *err)
{
    sbl_cmd_audit_logout(ctx);
    end_conversation(ctx->client);
    clear_user(ctx->client);
    return 0;
}

/* ---- hello ------------------------------------------------------------------------- */

void sbl_cmd_auth_hello_mechs(sbl_opctx_t *ctx, const char *db_user)
{
    const char *dot = strchr(db_user, '.');
    if (dot == NULL || dot == db_user || dot[1] == '\0')
        return;
    char *db = bson_strndup(db_user, (size_t)(dot - db_user));
    bson_t doc;
    bool found = false;
    sbl_err_t e;
    if (sbl_auth_user_get(ctx->ss, db, dot + 1, &doc, &found, &e) == 0 && found) {
        bson_iter_t it, c;
        bson_t mechs;
        uint32_t n = 0;
        BSON_APPEND_ARRAY_BEGIN(ctx->reply, "saslSupportedMechs", &mechs);
        if (bson_iter_init_find(&it, &doc, "credentials") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            bson_iter_recurse(&it, &c)) {
            while (bson_iter_next(&c)) {
                char key[16];
                const char *k;
                bson_uint32_to_string(n++, &k, key, sizeof(key));
                bson_append_utf8(&mechs, k, -1, bson_iter_key(&c), -1);
            }
        }
        bson_append_array_end(ctx->reply, &mechs);
        bson_destroy(&doc);
    }
    bson_free(db);
}

void sbl_cmd_auth_hello_speculative(sbl_opctx_t *ctx, const bson_iter_t *it)
{
    const uint8_t *data;
    uint32_t len;
    bson_t cmd, r = BSON_INITIALIZER;
    bson_iter_t f;
    sbl_err_t e;
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return;
    bson_iter_document(it, &len, &data);
    if (!bson_init_static(&cmd, data, len))
        return;
    const char *db = "admin";
    if (bson_iter_init_find(&f, &cmd, "db") && BSON_ITER_HOLDS_UTF8(&f))
        db = bson_iter_utf8(&f, NULL);
    if (!bson_iter_init(&f, &cmd) || !bson_iter_next(&f) ||
        strcmp(bson_iter_key(&f), "saslStart") != 0)
        return; /* MONGODB-X509's authenticate: not offered */
    sbl_err_clear(&e);
    if (sasl_start(ctx, &cmd, db, &r, &e) == 0)
        BSON_APPEND_DOCUMENT(ctx->reply, "speculativeAuthenticate", &r);
    bson_destroy(&r);
}

void sbl_cmd_auth_append_status(sbl_opctx_t *ctx, bool show_privileges, bson_t *info)
{
    sbl_client_t *c = ctx->client;
    bson_t a, u;
    BSON_APPEND_ARRAY_BEGIN(info, "authenticatedUsers", &a);
    if (c->auth_user != NULL) {
        BSON_APPEND_DOCUMENT_BEGIN(&a, "0", &u);
        BSON_APPEND_UTF8(&u, "user", c->auth_user);
        BSON_APPEND_UTF8(&u, "db", c->auth_db);
        bson_append_document_end(&a, &u);
    }
    bson_append_array_end(info, &a);
    BSON_APPEND_ARRAY_BEGIN(info, "authenticatedUserRoles", &a);
    if (c->auth_user != NULL)
        sbl_authz_append_roles(c->authz, &a);
    bson_append_array_end(info, &a);
    if (show_privileges) {
        BSON_APPEND_ARRAY_BEGIN(info, "authenticatedUserPrivileges", &a);
        if (c->auth_user != NULL)
            sbl_authz_append_privileges(c->authz, &a);
        bson_append_array_end(info, &a);
    }
}

/* ---- authorization ------------------------------------------------------------------ */

/* Commands the localhost exception lets through while no user exists. */
static bool localhost_exception(sbl_opctx_t *ctx, const sbl_cmd_def_t *def)
{
    /* mongod's keyFile set-up: rs.initiate() and rs.status() through the
     * localhost exception, then the first user. */
    if (strcmp(def->name, "createUser") != 0 && strcmp(def->name, "createRole") != 0 &&
        strcmp(def->name, "replSetInitiate") != 0 && strcmp(def->name, "replSetGetStatus") != 0)
        return false;
    return sbl_conn_is_loopback(ctx->conn) && !sbl_auth_has_users(sbl_session_get());
}

/* Actions whose resource is the database even when the first field is a string. */
static bool db_level(const char *action)
{
    static const char *const names[] = {
        "changeCustomData", "changePassword", "createRole", "createUser", "dbStats",
        "dropDatabase", "dropRole", "dropUser", "grantRole", "listCollections", "revokeRole",
        "viewRole", "viewUser", NULL};
    for (const char *const *n = names; *n != NULL; n++)
        if (strcmp(*n, action) == 0)
            return true;
    return false;
}

static int not_authorized(sbl_opctx_t *ctx, const char *db, sbl_err_t *err)
{
    char *json = bson_as_relaxed_extended_json(ctx->cmd, NULL);
    int rc = sbl_err_set(err, SBL_E_Unauthorized, "not authorized on %s to execute command %.300s",
                         db, json != NULL ? json : ctx->name);
    bson_free(json);
    return rc;
}

/* Refresh the connection's privileges when users or roles changed. */
static void refresh(sbl_opctx_t *ctx)
{
    sbl_client_t *c = ctx->client;
    uint64_t g = sbl_auth_generation();
    if (c->authz_gen == g && c->authz != NULL)
        return;
    sbl_authz_t *a = NULL;
    sbl_err_t e;
    if (sbl_authz_resolve(sbl_session_get(), c->auth_db, c->auth_user, &a, &e) != 0)
        return; /* keep what we had; the next command tries again */
    sbl_authz_free(c->authz);
    c->authz = a;
    c->authz_gen = g;
}

static bool allowed(sbl_opctx_t *ctx, const char *action, const char *db, const char *coll)
{
    int id = sbl_auth_action_id(action);
    if (id < 0)
        return false;
    if (sbl_auth_action_is_cluster(id))
        return sbl_authz_allows(ctx->client->authz, id, NULL, NULL);
    return sbl_authz_allows(ctx->client->authz, id, db, coll);
}

int sbl_cmd_auth_require(sbl_opctx_t *ctx, const char *action, const char *db,
                         const char *coll, sbl_err_t *err)
{
    if (ctx->conn == NULL || !sbl_auth_enabled() || ctx->client->auth_user == NULL)
        return 0; /* the dispatcher already decided (localhost exception or auth off) */
    if (!allowed(ctx, action, db, coll))
        return not_authorized(ctx, db, err);
    return 0;
}

bool sbl_cmd_may_advance_cluster_time(sbl_opctx_t *ctx)
{
    if (ctx->conn == NULL || !sbl_auth_enabled())
        return true;
    if (ctx->client->auth_user == NULL)
        return false;
    refresh(ctx);
    return allowed(ctx, "advanceClusterTime", NULL, NULL);
}

/* Does any statement of cmd's array field carry flag: true (update's upsert)? */
static bool any_statement_flag(const bson_t *cmd, const char *array, const char *flag)
{
    bson_iter_t it, st, f;
    if (!bson_iter_init_find(&it, cmd, array) || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &st))
        return false;
    while (bson_iter_next(&st))
        if (BSON_ITER_HOLDS_DOCUMENT(&st) && bson_iter_recurse(&st, &f) &&
            bson_iter_find(&f, flag) && bson_iter_as_bool(&f))
            return true;
    return false;
}

static bool flag_of(const bson_t *cmd, const char *flag)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, cmd, flag) && bson_iter_as_bool(&it);
}

/* Whether the user may read (find) every other collection the pipeline's
 * stages name: $lookup's and $graphLookup's from, $unionWith's coll, and
 * those of their sub-pipelines and of $facet's (mongod's privileges of a
 * pipeline).  A sub-pipeline starting with $documents reads no collection. */
static bool pipeline_reads_allowed(sbl_opctx_t *ctx, const char *db, const bson_iter_t *pipe,
                                   int depth)
{
    bson_iter_t st, stage, f;
    if (depth > 20 || !BSON_ITER_HOLDS_ARRAY(pipe) || !bson_iter_recurse(pipe, &st))
        return true; /* the stage itself reports what is wrong */
    while (bson_iter_next(&st)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&st) || !bson_iter_recurse(&st, &stage) ||
            !bson_iter_next(&stage))
            continue;
        const char *name = bson_iter_key(&stage);
        const char *coll = NULL, *cdb = db;
        bool lookup = strcmp(name, "$lookup") == 0 || strcmp(name, "$graphLookup") == 0;
        if (strcmp(name, "$unionWith") == 0 && BSON_ITER_HOLDS_UTF8(&stage))
            coll = bson_iter_utf8(&stage, NULL);
        if (!BSON_ITER_HOLDS_DOCUMENT(&stage)) {
            if (coll != NULL && !allowed(ctx, "find", db, coll))
                return false;
            continue;
        }
        bson_iter_recurse(&stage, &f);
        while (bson_iter_next(&f)) {
            const char *k = bson_iter_key(&f);
            bson_iter_t ns;
            if (((lookup && strcmp(k, "from") == 0) ||
                 (name[1] == 'u' && strcmp(k, "coll") == 0)) && BSON_ITER_HOLDS_UTF8(&f))
                coll = bson_iter_utf8(&f, NULL);
            else if (lookup && strcmp(k, "from") == 0 && BSON_ITER_HOLDS_DOCUMENT(&f) &&
                     bson_iter_recurse(&f, &ns)) { /* {db, coll}: another database's */
                while (bson_iter_next(&ns))
                    if (BSON_ITER_HOLDS_UTF8(&ns) && strcmp(bson_iter_key(&ns), "db") == 0)
                        cdb = bson_iter_utf8(&ns, NULL);
                    else if (BSON_ITER_HOLDS_UTF8(&ns) && strcmp(bson_iter_key(&ns), "coll") == 0)
                        coll = bson_iter_utf8(&ns, NULL);
            } else if ((strcmp(name, "$facet") == 0 || strcmp(k, "pipeline") == 0) &&
                     !pipeline_reads_allowed(ctx, db, &f, depth + 1))
                return false;
        }
        if (coll != NULL && (lookup || strcmp(name, "$unionWith") == 0) &&
            !allowed(ctx, "find", cdb, coll))
            return false;
    }
    return true;
}

/* killCursors by a user with killAnyCursor on the namespace kills any
 * user's cursors there; otherwise only the user's own (mongod). */
static bool kill_any_cursor(sbl_opctx_t *ctx)
{
    bson_iter_t it;
    const char *coll = NULL;
    if (bson_iter_init(&it, ctx->cmd) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it))
        coll = bson_iter_utf8(&it, NULL);
    return allowed(ctx, "killAnyCursor", ctx->db, coll != NULL && coll[0] != '\0' ? coll : NULL);
}

int sbl_cmd_auth_check(sbl_opctx_t *ctx, const sbl_cmd_def_t *def, sbl_err_t *err)
{
    sbl_client_t *c = ctx->client;
    /* Members' internal commands (action "__system"): with a keyFile only
     * __system@local (another member) may run them; without one, anyone. */
    if (def->action != NULL && strcmp(def->action, "__system") == 0) {
        if (ctx->conn == NULL || sbl_server_options()->cluster_key == NULL ||
            (c->auth_user != NULL && strcmp(c->auth_user, "__system") == 0 &&
             strcmp(c->auth_db, "local") == 0))
            return 0;
        return sbl_err_set(err, SBL_E_Unauthorized, "command %s requires authentication as a "
                           "member of the replica set (keyFile)", def->name);
    }
    if (ctx->conn == NULL || (def->flags & SBL_CMD_NO_AUTH) || !sbl_auth_enabled())
        return 0;
    if (c->auth_user == NULL) {
        if (localhost_exception(ctx, def))
            return 0;
        return sbl_err_set(err, SBL_E_Unauthorized, "Command %s requires authentication",
                           def->name);
    }
    refresh(ctx);
    ctx->user_bound = !(strcmp(c->auth_user, "__system") == 0 && strcmp(c->auth_db, "local") == 0);
    if (strcmp(def->name, "killCursors") == 0 && ctx->user_bound)
        ctx->user_bound = !kill_any_cursor(ctx);
    const char *action = def->action != NULL ? def->action : "anyAction";
    if (action[0] == '\0')
        return 0;

    /* The resource: the collection named by the first field, else the database. */
    bson_iter_t it;
    const char *db = ctx->db, *coll = NULL;
    char srcdb[128];
    if (bson_iter_init(&it, ctx->cmd) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it) &&
        !db_level(action)) {
        coll = bson_iter_utf8(&it, NULL);
        if (strcmp(def->name, "renameCollection") == 0) {
            const char *dot = strchr(coll, '.');
            if (dot != NULL && (size_t)(dot - coll) < sizeof(srcdb)) {
                snprintf(srcdb, sizeof(srcdb), "%.*s", (int)(dot - coll), coll);
                db = srcdb;
                coll = dot + 1;
            }
        }
        if (coll[0] == '\0')
            coll = NULL;
    }
    if (!allowed(ctx, action, db, coll))
        return not_authorized(ctx, ctx->db, err);

    /* Commands that need more than one action. */
    const char *n = def->name;
    if (strcmp(n, "update") == 0 && any_statement_flag(ctx->cmd, "updates", "upsert") &&
        !allowed(ctx, "insert", db, coll))
        return not_authorized(ctx, ctx->db, err);
    if (strcmp(n, "findAndModify") == 0 || strcmp(n, "findandmodify") == 0) {
        bool ok = flag_of(ctx->cmd, "remove") ? allowed(ctx, "remove", db, coll)
                                              : allowed(ctx, "update", db, coll);
        if (ok && flag_of(ctx->cmd, "upsert"))
            ok = allowed(ctx, "insert", db, coll);
        if (!ok)
            return not_authorized(ctx, ctx->db, err);
    }
    if (strcmp(n, "aggregate") == 0 && bson_iter_init_find(&it, ctx->cmd, "pipeline")) {
        bson_iter_t st, f;
        if (!pipeline_reads_allowed(ctx, ctx->db, &it, 0) ||
            !sbl_authz_pipeline_writes(ctx->client->authz, ctx->db, &it,
                                       flag_of(ctx->cmd, "bypassDocumentValidation"), NULL))
            return not_authorized(ctx, ctx->db, err);
        if (BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &st) && bson_iter_next(&st) &&
            BSON_ITER_HOLDS_DOCUMENT(&st) && bson_iter_recurse(&st, &f) && bson_iter_next(&f) &&
            strcmp(bson_iter_key(&f), "$indexStats") == 0 && !allowed(ctx, "indexStats", db, coll))
            return not_authorized(ctx, ctx->db, err);
    }
    if (strcmp(n, "renameCollection") == 0 && bson_iter_init_find(&it, ctx->cmd, "to") &&
        BSON_ITER_HOLDS_UTF8(&it)) {
        const char *to = bson_iter_utf8(&it, NULL), *dot = strchr(to, '.');
        char todb[128];
        if (dot != NULL && (size_t)(dot - to) < sizeof(todb)) {
            snprintf(todb, sizeof(todb), "%.*s", (int)(dot - to), to);
            if (strcmp(todb, db) != 0 && !(allowed(ctx, "insert", todb, dot + 1) &&
                                           allowed(ctx, "createCollection", todb, dot + 1)))
                return not_authorized(ctx, ctx->db, err);
        }
    }
    return 0;
}
