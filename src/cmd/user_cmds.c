/*
 * user_cmds.c: user and role management: createUser, updateUser, dropUser,
 * dropAllUsersFromDatabase, usersInfo, grantRolesToUser, revokeRolesFromUser,
 * createRole, updateRole, dropRole, dropAllRolesFromDatabase, rolesInfo,
 * grant/revokePrivileges(To|From)Role, grant/revokeRoles(To|From)Role.
 *
 * Documents have MongoDB's shapes: a user is {_id: "db.user", userId: UUID,
 * user, db, credentials: {"SCRAM-SHA-1": {...}, "SCRAM-SHA-256": {...}},
 * customData?, roles: [{role, db}]} in admin.system.users; a role is
 * {_id: "db.role", role, db, privileges: [...], roles: [{role, db}]} in
 * admin.system.roles.  What must stay true: passwords are never stored or
 * echoed; credentials leave the server only with showCredentials; every role
 * a user or role names exists when it is granted, and role inheritance stays
 * acyclic.
 */
#include "auth/auth.h"
#include "cmd/cmd_int.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E_USER_EXISTS 51003
#define E_ROLE_EXISTS 51002

/* ---- helpers ------------------------------------------------------------------------ */

static int name_arg(sbl_opctx_t *ctx, const char **namep, sbl_err_t *err)
{
    bson_iter_t it;
    *namep = NULL; /* out-parameters are cleared on entry */
    bson_iter_init(&it, ctx->cmd);
    bson_iter_next(&it);
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field '%s.%s' is the wrong type, expected type 'string'",
                           ctx->name, ctx->name);
    *namep = bson_iter_utf8(&it, NULL);
    if (**namep == '\0')
        return sbl_err_set(err, SBL_E_BadValue, "%s must not be empty",
                           strstr(ctx->name, "Role") ? "Role name" : "User name");
    return 0;
}

/* The array field name of the command, or NotFound-ish BadValue when required. */
static bool array_arg(const bson_t *cmd, const char *name, bson_t *out)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;
    if (!bson_iter_init_find(&it, cmd, name) || !BSON_ITER_HOLDS_ARRAY(&it))
        return false;
    bson_iter_array(&it, &len, &data);
    return bson_init_static(out, data, len);
}

static bool doc_field(const bson_t *d, const char *name, bson_t *out)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;
    if (!bson_iter_init_find(&it, d, name) ||
        !(BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)))
        return false;
    if (BSON_ITER_HOLDS_ARRAY(&it))
        bson_iter_array(&it, &len, &data);
    else
        bson_iter_document(&it, &len, &data);
    return bson_init_static(out, data, len);
}

static void append_role(bson_t *arr, uint32_t idx, const char *role, const char *db)
{
    char key[16];
    const char *k;
    bson_t d;
    bson_uint32_to_string(idx, &k, key, sizeof(key));
    bson_append_document_begin(arr, k, -1, &d);
    BSON_APPEND_UTF8(&d, "role", role);
    BSON_APPEND_UTF8(&d, "db", db);
    bson_append_document_end(arr, &d);
}

/* Read {role, db} or "name" (default_db). */
static int role_at(const bson_iter_t *it, const char *default_db, const char **rolep,
                   const char **dbp, sbl_err_t *err)
{
    *rolep = *dbp = NULL;
    if (BSON_ITER_HOLDS_UTF8(it)) {
        *rolep = bson_iter_utf8(it, NULL);
        *dbp = default_db;
    } else if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t f;
        bson_iter_recurse(it, &f);
        while (bson_iter_next(&f)) {
            if (strcmp(bson_iter_key(&f), "role") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                *rolep = bson_iter_utf8(&f, NULL);
            else if (strcmp(bson_iter_key(&f), "db") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                *dbp = bson_iter_utf8(&f, NULL);
        }
    }
    if (*rolep == NULL || *dbp == NULL)
        return sbl_err_set(err, SBL_E_BadValue,
                           "Role names must be either strings or objects with 'role' and 'db'");
    return 0;
}

static bool role_listed(const bson_t *arr, const char *role, const char *db)
{
    bson_iter_t it;
    bson_iter_init(&it, arr);
    while (bson_iter_next(&it)) {
        const char *r, *d;
        sbl_err_t e;
        if (role_at(&it, "", &r, &d, &e) == 0 && strcmp(r, role) == 0 && strcmp(d, db) == 0)
            return true;
    }
    return false;
}

static int role_exists(sbl_opctx_t *ctx, const char *role, const char *db, sbl_err_t *err)
{
    if (sbl_auth_builtin_role(role, db))
        return 0;
    bson_t doc;
    bool found = false;
    SBL_RET(sbl_auth_role_get(ctx->ss, db, role, &doc, &found, err));
    if (!found)
        return sbl_err_set(err, SBL_E_RoleNotFound, "Could not find role: %s@%s", role, db);
    bson_destroy(&doc);
    return 0;
}

/*
 * Normalise a roles argument to [{role, db}] (appended to out, from index
 * *np), dropping duplicates of what out holds; every role must exist.
 */
static int roles_into(sbl_opctx_t *ctx, const bson_t *roles, bson_t *out, uint32_t *np,
                      sbl_err_t *err)
{
    bson_iter_t it;
    bson_iter_init(&it, roles);
    while (bson_iter_next(&it)) {
        const char *r, *d;
        SBL_RET(role_at(&it, ctx->db, &r, &d, err));
        SBL_RET(role_exists(ctx, r, d, err));
        if (!role_listed(out, r, d))
            append_role(out, (*np)++, r, d);
    }
    return 0;
}

/*
 * The roles a grant leaves: the stored roles (entries that do not parse are
 * dropped) followed by the granted ones not already there.  out is
 * initialised by the caller; *np counts its entries.
 */
static int roles_granted(sbl_opctx_t *ctx, const bson_t *stored, const bson_t *granted,
                         bson_t *out, uint32_t *np, sbl_err_t *err)
{
    bson_iter_t it;
    bson_iter_init(&it, stored);
    while (bson_iter_next(&it)) {
        const char *r, *d;
        if (role_at(&it, ctx->db, &r, &d, err) == 0)
            append_role(out, (*np)++, r, d);
    }
    sbl_err_clear(err);
    return roles_into(ctx, granted, out, np, err);
}

/* Copy the roles of arr into out except those listed in drop. */
static uint32_t roles_without(const bson_t *arr, const bson_t *drop, const char *default_db,
                              bson_t *out)
{
    bson_iter_t it;
    uint32_t n = 0;
    bson_iter_init(&it, arr);
    while (bson_iter_next(&it)) {
        const char *r, *d;
        sbl_err_t e;
        if (role_at(&it, default_db, &r, &d, &e) != 0)
            continue;
        bool gone = false;
        bson_iter_t x;
        bson_iter_init(&x, drop);
        while (bson_iter_next(&x)) {
            const char *r2, *d2;
            if (role_at(&x, default_db, &r2, &d2, &e) == 0 && strcmp(r, r2) == 0 &&
                strcmp(d, d2) == 0)
                gone = true;
        }
        if (!gone)
            append_role(out, n++, r, d);
    }
    return n;
}

/* Rebuild doc into out replacing (or adding, before "roles"-less end) field name with value. */
static void replace_field(const bson_t *doc, const char *name, const bson_t *value, bool is_array,
                          bson_t *out)
{
    bson_iter_t it;
    bool done = false;
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), name) == 0) {
            if (is_array)
                bson_append_array(out, name, -1, value);
            else
                bson_append_document(out, name, -1, value);
            done = true;
        } else {
            sbl_append_value(out, bson_iter_key(&it), -1, bson_iter_value(&it));
        }
    }
    if (!done) {
        if (is_array)
            bson_append_array(out, name, -1, value);
        else
            bson_append_document(out, name, -1, value);
    }
}

static int get_user(sbl_opctx_t *ctx, const char *user, bson_t *doc, sbl_err_t *err)
{
    bool found = false;
    SBL_RET(sbl_auth_user_get(ctx->ss, ctx->db, user, doc, &found, err));
    if (!found)
        return sbl_err_set(err, SBL_E_UserNotFound, "Could not find user \"%s\" for db \"%s\"",
                           user, ctx->db);
    return 0;
}

static int get_role(sbl_opctx_t *ctx, const char *role, bson_t *doc, sbl_err_t *err)
{
    bool found = false;
    if (sbl_auth_builtin_role(role, ctx->db))
        return sbl_err_set(err, SBL_E_BadValue, "Cannot modify built-in role: %s@%s", role,
                           ctx->db);
    SBL_RET(sbl_auth_role_get(ctx->ss, ctx->db, role, doc, &found, err));
    if (!found)
        return sbl_err_set(err, SBL_E_RoleNotFound, "Role %s@%s not found", role, ctx->db);
    return 0;
}

/* Which mechanisms: the mechanisms argument, else both. */
static int mechanisms_arg(const bson_t *cmd, bool *sha1, bool *sha256, bool *given,
                          sbl_err_t *err)
{
    bson_t arr;
    *sha1 = *sha256 = true;
    *given = false;
    bson_iter_t it;
    if (bson_iter_init_find(&it, cmd, "mechanisms") && !BSON_ITER_HOLDS_ARRAY(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field 'mechanisms' is the wrong type, expected type 'array'");
    if (!array_arg(cmd, "mechanisms", &arr))
        return 0;
    *given = true;
    *sha1 = *sha256 = false;
    bson_iter_init(&it, &arr);
    while (bson_iter_next(&it)) {
        const char *m = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
        if (strcmp(m, "SCRAM-SHA-1") == 0)
            *sha1 = true;
        else if (strcmp(m, "SCRAM-SHA-256") == 0)
            *sha256 = true;
        else
            return sbl_err_set(err, SBL_E_BadValue, "Unknown auth mechanism '%s'", m);
    }
    if (!*sha1 && !*sha256)
        return sbl_err_set(err, SBL_E_BadValue, "mechanisms field must not be empty");
    return 0;
}

static int password_arg(const bson_t *cmd, const char **pwdp, sbl_err_t *err)
{
    bson_iter_t it;
    *pwdp = NULL;
    if (!bson_iter_init_find(&it, cmd, "pwd"))
        return 0;
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field 'pwd' is the wrong type, expected type 'string'");
    *pwdp = bson_iter_utf8(&it, NULL);
    if (**pwdp == '\0')
        return sbl_err_set(err, SBL_E_BadValue, "Password cannot be empty");
    return 0;
}

/* ---- users ---------------------------------------------------------------------------- */

int sbl_cmd_create_user(sbl_opctx_t *ctx, sbl_err_t *err)
{
    const char *user, *pwd;
    bool sha1, sha256, given;
    bson_t roles_in, roles = BSON_INITIALIZER, creds = BSON_INITIALIZER, doc = BSON_INITIALIZER;
    uint32_t n = 0;
    int rc;
    bson_iter_t it;

    SBL_ERR(name_arg(ctx, &user, err));
    SBL_ERR(password_arg(ctx->cmd, &pwd, err));
    if (pwd == NULL) {
        rc = sbl_err_set(err, SBL_E_BadValue, "Must provide a 'pwd' field for all user documents, "
                         "except those with '$external' as the user's source db");
        goto err;
    }
    if (!array_arg(ctx->cmd, "roles", &roles_in)) {
        rc = sbl_err_set(err, SBL_E_BadValue, "\"createUser\" command requires a \"roles\" array");
        goto err;
    }
    SBL_ERR(mechanisms_arg(ctx->cmd, &sha1, &sha256, &given, err));
    SBL_ERR(roles_into(ctx, &roles_in, &roles, &n, err));
    SBL_ERR(sbl_auth_make_credentials(user, pwd, sha1, sha256, &creds, err));

    uint8_t uuid[16];
    RAND_bytes(uuid, sizeof(uuid));
    uuid[6] = (uint8_t)((uuid[6] & 0x0f) | 0x40);
    uuid[8] = (uint8_t)((uuid[8] & 0x3f) | 0x80);
    char *id = bson_strdup_printf("%s.%s", ctx->db, user);
    BSON_APPEND_UTF8(&doc, "_id", id);
    bson_free(id);
    BSON_APPEND_BINARY(&doc, "userId", BSON_SUBTYPE_UUID, uuid, 16);
    BSON_APPEND_UTF8(&doc, "user", user);
    BSON_APPEND_UTF8(&doc, "db", ctx->db);
    BSON_APPEND_DOCUMENT(&doc, "credentials", &creds);
    if (bson_iter_init_find(&it, ctx->cmd, "customData")) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            rc = sbl_err_set(err, SBL_E_TypeMismatch,
                             "BSON field 'customData' is the wrong type, expected type 'object'");
            goto err;
        }
        sbl_append_value(&doc, "customData", -1, bson_iter_value(&it));
    }
    BSON_APPEND_ARRAY(&doc, "roles", &roles);
    rc = sbl_auth_store_write(ctx->ss, false, SBL_WRITE_INSERT, &doc, err);
    if (rc == SBL_E_DuplicateKey)
        rc = sbl_err_set(err, E_USER_EXISTS, "User \"%s@%s\" already exists", user, ctx->db);
    if (rc == 0)
        ctx->wrote = true;
err:
    bson_destroy(&roles);
    bson_destroy(&creds);
    bson_destroy(&doc);
    return sbl_cmd_audit_user_result(ctx, rc);
}

int sbl_cmd_update_user(sbl_opctx_t *ctx, sbl_err_t *err)
{
    const char *user, *pwd;
    bool sha1, sha256, given;
    bson_t old, cur, next, roles_in, roles = BSON_INITIALIZER, creds = BSON_INITIALIZER;
    bson_iter_t it;
    uint32_t n = 0;
    int rc;
    bool have_old = false;

    bson_init(&cur);
    SBL_ERR(name_arg(ctx, &user, err));
    SBL_ERR(password_arg(ctx->cmd, &pwd, err));
    SBL_ERR(mechanisms_arg(ctx->cmd, &sha1, &sha256, &given, err));
    bool has_roles = array_arg(ctx->cmd, "roles", &roles_in);
    bool has_custom = bson_iter_init_find(&it, ctx->cmd, "customData");
    if (pwd == NULL && !has_roles && !has_custom && !given) {
        rc = sbl_err_set(err, SBL_E_BadValue,
                         "Must specify at least one field to update in updateUser");
        goto err;
    }
    if (pwd != NULL)
        SBL_ERR(sbl_cmd_auth_require(ctx, "changePassword", ctx->db, NULL, err));
    if (has_custom)
        SBL_ERR(sbl_cmd_auth_require(ctx, "changeCustomData", ctx->db, NULL, err));
    if (has_roles) {
        SBL_ERR(sbl_cmd_auth_require(ctx, "grantRole", ctx->db, NULL, err));
        SBL_ERR(sbl_cmd_auth_require(ctx, "revokeRole", ctx->db, NULL, err));
    }
    if (given && pwd == NULL) {
        rc = sbl_err_set(err, SBL_E_BadValue,
                         "mechanisms field must be a subset of previously set mechanisms "
                         "unless a new password is given");
        goto err;
    }
    SBL_ERR(get_user(ctx, user, &old, err));
    have_old = true;
    bson_copy_to(&old, &cur);
    if (pwd != NULL) {
        SBL_ERR(sbl_auth_make_credentials(user, pwd, sha1, sha256, &creds, err));
        bson_init(&next);
        replace_field(&cur, "credentials", &creds, false, &next);
        bson_destroy(&cur);
        cur = next;
    }
    if (has_custom) {
        bson_t cd;
        if (!doc_field(ctx->cmd, "customData", &cd) || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
            rc = sbl_err_set(err, SBL_E_TypeMismatch,
                             "BSON field 'customData' is the wrong type, expected type 'object'");
            goto err;
        }
        bson_init(&next);
        replace_field(&cur, "customData", &cd, false, &next);
        bson_destroy(&cur);
        cur = next;
    }
    if (has_roles) {
        SBL_ERR(roles_into(ctx, &roles_in, &roles, &n, err));
        bson_init(&next);
        replace_field(&cur, "roles", &roles, true, &next);
        bson_destroy(&cur);
        cur = next;
    }
    SBL_ERR(sbl_auth_store_write(ctx->ss, false, SBL_WRITE_UPDATE, &cur, err));
    ctx->wrote = true;
err:
    if (have_old)
        bson_destroy(&old);
    bson_destroy(&cur);
    bson_destroy(&roles);
    bson_destroy(&creds);
    return sbl_cmd_audit_user_result(ctx, rc);
}

int sbl_cmd_drop_user(sbl_opctx_t *ctx, sbl_err_t *err)
{
    const char *user;
    bson_t old;
    SBL_RET(name_arg(ctx, &user, err));
    SBL_RET(get_user(ctx, user, &old, err));
    int rc = sbl_auth_store_write(ctx->ss, false, SBL_WRITE_DELETE, &old, err);
    bson_destroy(&old);
    if (rc == 0)
        ctx->wrote = true;
    return sbl_cmd_audit_user_result(ctx, rc);
}

/* Collect copies of the stored documents of one database (users or roles). */
typedef struct collected {
    bson_t **docs;
    size_t n, cap;
} collected_t;

static bool collect(const bson_t *doc, void *arg)
{
    collected_t *c = arg;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 8;
        c->docs = bson_realloc(c->docs, c->cap * sizeof(*c->docs));
    }
    c->docs[c->n++] = bson_copy(doc);
    return true;
}

static void collected_free(collected_t *c)
{
    for (size_t i = 0; i < c->n; i++)
        bson_destroy(c->docs[i]);
    bson_free(c->docs);
}

int sbl_cmd_drop_all_users(sbl_opctx_t *ctx, sbl_err_t *err)
{
    collected_t c = {0};
    int rc;
    int64_t n = 0;
    SBL_ERR(sbl_auth_store_list(ctx->ss, false, ctx->db, collect, &c, err));
    for (size_t i = 0; i < c.n; i++) {
        SBL_ERR(sbl_auth_store_write(ctx->ss, false, SBL_WRITE_DELETE, c.docs[i], err));
        n++;
    }
    BSON_APPEND_INT64(ctx->reply, "n", n);
    ctx->wrote = n > 0;
err:
    collected_free(&c);
    return sbl_cmd_audit_user_result(ctx, rc);
}

/* Append one user as usersInfo shows it. */
static void append_user_info(sbl_opctx_t *ctx, const bson_t *doc, bool creds, bool privs,
                             bson_t *arr, uint32_t idx)
{
    char key[16];
    const char *k;
    bson_t u, m;
    bson_iter_t it, c;
    bson_uint32_to_string(idx, &k, key, sizeof(key));
    bson_append_document_begin(arr, k, -1, &u);
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        const char *f = bson_iter_key(&it);
        if (strcmp(f, "credentials") == 0 && !creds)
            continue;
        sbl_append_value(&u, f, -1, bson_iter_value(&it));
    }
    BSON_APPEND_ARRAY_BEGIN(&u, "mechanisms", &m);
    uint32_t nm = 0;
    if (bson_iter_init_find(&it, doc, "credentials") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &c)) {
        while (bson_iter_next(&c)) {
            char mk[16];
            const char *mkp;
            bson_uint32_to_string(nm++, &mkp, mk, sizeof(mk));
            bson_append_utf8(&m, mkp, -1, bson_iter_key(&c), -1);
        }
    }
    bson_append_array_end(&u, &m);
    if (privs) {
        const char *name = NULL, *db = NULL;
        if (bson_iter_init_find(&it, doc, "user") && BSON_ITER_HOLDS_UTF8(&it))
            name = bson_iter_utf8(&it, NULL);
        if (bson_iter_init_find(&it, doc, "db") && BSON_ITER_HOLDS_UTF8(&it))
            db = bson_iter_utf8(&it, NULL);
        sbl_authz_t *a = NULL;
        sbl_err_t e;
        if (name != NULL && db != NULL && sbl_authz_resolve(ctx->ss, db, name, &a, &e) == 0) {
            bson_t ir, ip;
            BSON_APPEND_ARRAY_BEGIN(&u, "inheritedRoles", &ir);
            sbl_authz_append_roles(a, &ir);
            bson_append_array_end(&u, &ir);
            BSON_APPEND_ARRAY_BEGIN(&u, "inheritedPrivileges", &ip);
            sbl_authz_append_privileges(a, &ip);
            bson_append_array_end(&u, &ip);
            sbl_authz_free(a);
        }
    }
    bson_append_document_end(arr, &u);
}

/* Does doc ({user, db} or {role, db}) match one of the requested names? NULL wanted = all. */
static bool wanted_match(const bson_t *doc, const char *field, const bson_t *wanted,
                         const char *default_db)
{
    if (wanted == NULL)
        return true;
    const char *name = NULL, *db = NULL;
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, field) && BSON_ITER_HOLDS_UTF8(&it))
        name = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, doc, "db") && BSON_ITER_HOLDS_UTF8(&it))
        db = bson_iter_utf8(&it, NULL);
    if (name == NULL || db == NULL)
        return false;
    bson_iter_init(&it, wanted);
    while (bson_iter_next(&it)) {
        const char *n2 = NULL, *d2 = default_db;
        if (BSON_ITER_HOLDS_UTF8(&it)) {
            n2 = bson_iter_utf8(&it, NULL);
        } else if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t f;
            bson_iter_recurse(&it, &f);
            while (bson_iter_next(&f)) {
                if (strcmp(bson_iter_key(&f), field) == 0 && BSON_ITER_HOLDS_UTF8(&f))
                    n2 = bson_iter_utf8(&f, NULL);
                else if (strcmp(bson_iter_key(&f), "db") == 0 && BSON_ITER_HOLDS_UTF8(&f))
                    d2 = bson_iter_utf8(&f, NULL);
            }
        }
        if (n2 != NULL && strcmp(n2, name) == 0 && strcmp(d2, db) == 0)
            return true;
    }
    return false;
}

/*
 * The selector of usersInfo / rolesInfo: 1 (all of this db), {forAllDBs: true},
 * a name, a {user|role, db} document or an array of those.  *wantedp is NULL
 * for "all"; *all_dbsp for forAllDBs.  The single forms become a one-element
 * array in holder (*ownedp: the caller destroys it).
 */
static int selector(sbl_opctx_t *ctx, bson_t *holder, bool *ownedp, const bson_t **wantedp,
                    bool *all_dbsp, sbl_err_t *err)
{
    bson_iter_t it, f;
    *ownedp = false;
    *wantedp = NULL;
    *all_dbsp = false;
    bson_iter_init(&it, ctx->cmd);
    bson_iter_next(&it);
    if (BSON_ITER_HOLDS_NUMBER(&it))
        return 0;
    if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &f) &&
        bson_iter_find(&f, "forAllDBs")) {
        *all_dbsp = bson_iter_as_bool(&f);
        return 0;
    }
    if (BSON_ITER_HOLDS_ARRAY(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_iter_array(&it, &len, &data);
        bson_init_static(holder, data, len);
        *wantedp = holder;
        return 0;
    }
    if (BSON_ITER_HOLDS_UTF8(&it) || BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_init(holder);
        sbl_append_value(holder, "0", 1, bson_iter_value(&it));
        *wantedp = holder;
        *ownedp = true;
        return 0;
    }
    return sbl_err_set(err, SBL_E_BadValue,
                       "%s must be a number, a string, an object or an array", ctx->name);
}

typedef struct info_walk {
    sbl_opctx_t *ctx;
    const bson_t *wanted;
    bson_t *arr;
    uint32_t n;
    bool creds, privs;
} info_walk_t;

static bool user_info_visit(const bson_t *doc, void *arg)
{
    info_walk_t *w = arg;
    if (wanted_match(doc, "user", w->wanted, w->ctx->db))
        append_user_info(w->ctx, doc, w->creds, w->privs, w->arr, w->n++);
    return true;
}

int sbl_cmd_users_info(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_t holder, arr;
    const bson_t *wanted;
    bool all_dbs;
    bson_iter_t it;
    bool own;
    SBL_RET(selector(ctx, &holder, &own, &wanted, &all_dbs, err));
    info_walk_t w = {ctx, wanted, &arr, 0, false, false};
    if (bson_iter_init_find(&it, ctx->cmd, "showCredentials"))
        w.creds = bson_iter_as_bool(&it);
    if (bson_iter_init_find(&it, ctx->cmd, "showPrivileges"))
        w.privs = bson_iter_as_bool(&it);
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "users", &arr);
    /* Named users may live in other databases ({user, db}); scan them all then. */
    int rc = sbl_auth_store_list(ctx->ss, false, all_dbs || wanted != NULL ? NULL : ctx->db,
                                 user_info_visit, &w, err);
    bson_append_array_end(ctx->reply, &arr);
    if (own)
        bson_destroy(&holder);
    return rc;
}

static int change_user_roles(sbl_opctx_t *ctx, bool grant, sbl_err_t *err)
{
    const char *user;
    bson_t old, roles_in, roles = BSON_INITIALIZER, cur = BSON_INITIALIZER, stored;
    int rc;
    uint32_t n = 0;
    bool have_old = false;
    SBL_ERR(name_arg(ctx, &user, err));
    if (!array_arg(ctx->cmd, "roles", &roles_in)) {
        rc = sbl_err_set(err, SBL_E_BadValue, "\"%s\" command requires a \"roles\" array",
                         ctx->name);
        goto err;
    }
    SBL_ERR(get_user(ctx, user, &old, err));
    have_old = true;
    if (!doc_field(&old, "roles", &stored))
        bson_init(&stored);
    if (grant) {
        SBL_ERR(roles_granted(ctx, &stored, &roles_in, &roles, &n, err));
    } else {
        bson_iter_t it;
        bson_iter_init(&it, &roles_in);
        while (bson_iter_next(&it)) {
            const char *r, *d;
            SBL_ERR(role_at(&it, ctx->db, &r, &d, err));
        }
        roles_without(&stored, &roles_in, ctx->db, &roles);
    }
    replace_field(&old, "roles", &roles, true, &cur);
    SBL_ERR(sbl_auth_store_write(ctx->ss, false, SBL_WRITE_UPDATE, &cur, err));
    ctx->wrote = true;
err:
    if (have_old)
        bson_destroy(&old);
    bson_destroy(&roles);
    bson_destroy(&cur);
    return rc;
}

int sbl_cmd_grant_roles_to_user(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_cmd_audit_user_result(ctx, change_user_roles(ctx, true, err));
}

int sbl_cmd_revoke_roles_from_user(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_cmd_audit_user_result(ctx, change_user_roles(ctx, false, err));
}

/* ---- roles ------------------------------------------------------------------------------ */

/* Privileges of a role on db may target only db (admin's may target anything). */
static int privileges_arg(sbl_opctx_t *ctx, const bson_t *privs, sbl_err_t *err)
{
    SBL_RET(sbl_auth_check_privileges(privs, err));
    if (strcmp(ctx->db, "admin") == 0)
        return 0;
    bson_iter_t it, f;
    bson_iter_init(&it, privs);
    while (bson_iter_next(&it)) {
        bson_iter_t r;
        if (!bson_iter_recurse(&it, &f) || !bson_iter_find(&f, "resource") ||
            !bson_iter_recurse(&f, &r))
            continue;
        const char *db = NULL;
        while (bson_iter_next(&r)) {
            if (strcmp(bson_iter_key(&r), "db") == 0 && BSON_ITER_HOLDS_UTF8(&r))
                db = bson_iter_utf8(&r, NULL);
        }
        if (db == NULL || strcmp(db, ctx->db) != 0)
            return sbl_err_set(err, SBL_E_BadValue,
                               "Roles on the '%s' database cannot be granted privileges that "
                               "target other databases or the cluster", ctx->db);
    }
    return 0;
}

/* Check a role's new inheritance: every role exists and none reaches role@db. */
static int inheritance_ok(sbl_opctx_t *ctx, const char *role, const bson_t *roles,
                          sbl_err_t *err)
{
    return sbl_auth_roles_closure(ctx->ss, roles, ctx->db, role, ctx->db, NULL, err);
}

int sbl_cmd_create_role(sbl_opctx_t *ctx, sbl_err_t *err)
{
    const char *role;
    bson_t privs, roles_in, roles = BSON_INITIALIZER, doc = BSON_INITIALIZER;
    uint32_t n = 0;
    int rc;
    SBL_ERR(name_arg(ctx, &role, err));
    if (!array_arg(ctx->cmd, "privileges", &privs)) {
        rc = sbl_err_set(err, SBL_E_BadValue,
                         "\"createRole\" command requires a \"privileges\" array");
        goto err;
    }
    if (!array_arg(ctx->cmd, "roles", &roles_in)) {
        rc = sbl_err_set(err, SBL_E_BadValue, "\"createRole\" command requires a \"roles\" array");
        goto err;
    }
    if (sbl_auth_builtin_role(role, ctx->db) || strcmp(role, "__system") == 0) {
        rc = sbl_err_set(err, SBL_E_BadValue,
                         "Cannot create roles with the same name as a built-in role");
        goto err;
    }
    SBL_ERR(privileges_arg(ctx, &privs, err));
    SBL_ERR(roles_into(ctx, &roles_in, &roles, &n, err));
    char *id = bson_strdup_printf("%s.%s", ctx->db, role);
    BSON_APPEND_UTF8(&doc, "_id", id);
    bson_free(id);
    BSON_APPEND_UTF8(&doc, "role", role);
    BSON_APPEND_UTF8(&doc, "db", ctx->db);
    BSON_APPEND_ARRAY(&doc, "privileges", &privs);
    BSON_APPEND_ARRAY(&doc, "roles", &roles);
    rc = sbl_auth_store_write(ctx->ss, true, SBL_WRITE_INSERT, &doc, err);
    if (rc == SBL_E_DuplicateKey)
        rc = sbl_err_set(err, E_ROLE_EXISTS, "Role \"%s@%s\" already exists", role, ctx->db);
    if (rc == 0)
        ctx->wrote = true;
err:
    bson_destroy(&roles);
    bson_destroy(&doc);
    return sbl_cmd_audit_user_result(ctx, rc);
}

/* Replace a role's privileges and/or roles (NULL: keep) and store it. */
static int store_role(sbl_opctx_t *ctx, const bson_t *old, const bson_t *privs,
                      const bson_t *roles, sbl_err_t *err)
{
    bson_t a = BSON_INITIALIZER, b = BSON_INITIALIZER;
    const bson_t *cur = old;
    if (privs != NULL) {
        replace_field(cur, "privileges", privs, true, &a);
        cur = &a;
    }
    if (roles != NULL) {
        replace_field(cur, "roles", roles, true, &b);
        cur = &b;
    }
    int rc = sbl_auth_store_write(ctx->ss, true, SBL_WRITE_UPDATE, cur, err);
    if (rc == 0)
        ctx->wrote = true;
    bson_destroy(&a);
    bson_destroy(&b);
    return rc;
}

int sbl_cmd_update_role(sbl_opctx_t *ctx, sbl_err_t *err)
{
    const char *role;
    bson_t old, privs, roles_in, roles = BSON_INITIALIZER;
    uint32_t n = 0;
    int rc;
    bool have_old = false;
    SBL_ERR(name_arg(ctx, &role, err));
    bool has_privs = array_arg(ctx->cmd, "privileges", &privs);
    bool has_roles = array_arg(ctx->cmd, "roles", &roles_in);
    if (!has_privs && !has_roles) {
        rc = sbl_err_set(err, SBL_E_BadValue,
                         "Must specify at least one field to update in updateRole");
        goto err;
    }
    SBL_ERR(get_role(ctx, role, &old, err));
    have_old = true;
    if (has_privs)
        SBL_ERR(privileges_arg(ctx, &privs, err));
    if (has_roles) {
        SBL_ERR(roles_into(ctx, &roles_in, &roles, &n, err));
        SBL_ERR(inheritance_ok(ctx, role, &roles, err));
    }
    SBL_ERR(store_role(ctx, &old, has_privs ? &privs : NULL, has_roles ? &roles : NULL, err));
err:
    if (have_old)
        bson_destroy(&old);
    bson_destroy(&roles);
    return sbl_cmd_audit_user_result(ctx, rc);
}

/* Remove role@db from every user's and role's roles array (after dropping it). */
static int remove_references(sbl_opctx_t *ctx, const char *role, const char *db, sbl_err_t *err)
{
    bson_t drop = BSON_INITIALIZER;
    append_role(&drop, 0, role, db);
    int rc = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        bool roles = pass == 1;
        collected_t c = {0};
        rc = sbl_auth_store_list(ctx->ss, roles, NULL, collect, &c, err);
        for (size_t i = 0; i < c.n && rc == 0; i++) {
            bson_t stored, kept = BSON_INITIALIZER, next = BSON_INITIALIZER;
            const char *ddb = NULL;
            bson_iter_t it;
            if (bson_iter_init_find(&it, c.docs[i], "db") && BSON_ITER_HOLDS_UTF8(&it))
                ddb = bson_iter_utf8(&it, NULL);
            if (ddb != NULL && doc_field(c.docs[i], "roles", &stored) &&
                role_listed(&stored, role, db)) {
                roles_without(&stored, &drop, ddb, &kept);
                replace_field(c.docs[i], "roles", &kept, true, &next);
                rc = sbl_auth_store_write(ctx->ss, roles, SBL_WRITE_UPDATE, &next, err);
            }
            bson_destroy(&kept);
            bson_destroy(&next);
        }
        collected_free(&c);
    }
    bson_destroy(&drop);
    return rc;
}

int sbl_cmd_drop_role(sbl_opctx_t *ctx, sbl_err_t *err)
{
    const char *role;
    bson_t old;
    SBL_RET(name_arg(ctx, &role, err));
    SBL_RET(get_role(ctx, role, &old, err));
    int rc = sbl_auth_store_write(ctx->ss, true, SBL_WRITE_DELETE, &old, err);
    bson_destroy(&old);
    if (rc == 0) {
        ctx->wrote = true;
        rc = remove_references(ctx, role, ctx->db, err);
    }
    return sbl_cmd_audit_user_result(ctx, rc);
}

int sbl_cmd_drop_all_roles(sbl_opctx_t *ctx, sbl_err_t *err)
{
    collected_t c = {0};
    int rc;
    int64_t n = 0;
    SBL_ERR(sbl_auth_store_list(ctx->ss, true, ctx->db, collect, &c, err));
    for (size_t i = 0; i < c.n; i++) {
        SBL_ERR(sbl_auth_store_write(ctx->ss, true, SBL_WRITE_DELETE, c.docs[i], err));
        n++;
        const char *r = NULL;
        bson_iter_t it;
        if (bson_iter_init_find(&it, c.docs[i], "role") && BSON_ITER_HOLDS_UTF8(&it))
            r = bson_iter_utf8(&it, NULL);
        if (r != NULL)
            SBL_ERR(remove_references(ctx, r, ctx->db, err));
    }
    BSON_APPEND_INT64(ctx->reply, "n", n);
    ctx->wrote = n > 0;
err:
    collected_free(&c);
    return sbl_cmd_audit_user_result(ctx, rc);
}

/* Append one role as rolesInfo shows it. */
static void append_role_info(sbl_opctx_t *ctx, const char *role, const char *db,
                             const bson_t *doc, bool privs, bson_t *arr, uint32_t idx)
{
    char key[16];
    const char *k;
    bson_t r, a, direct;
    bson_uint32_to_string(idx, &k, key, sizeof(key));
    bson_append_document_begin(arr, k, -1, &r);
    char *id = bson_strdup_printf("%s.%s", db, role);
    BSON_APPEND_UTF8(&r, "_id", id);
    bson_free(id);
    BSON_APPEND_UTF8(&r, "role", role);
    BSON_APPEND_UTF8(&r, "db", db);
    BSON_APPEND_BOOL(&r, "isBuiltin", doc == NULL);
    if (doc == NULL || !doc_field(doc, "roles", &direct))
        bson_init(&direct);
    BSON_APPEND_ARRAY(&r, "roles", &direct);
    bson_t self = BSON_INITIALIZER, closure = BSON_INITIALIZER;
    sbl_err_t e;
    if (doc != NULL)
        sbl_auth_roles_closure(ctx->ss, &direct, db, NULL, NULL, &closure, &e);
    BSON_APPEND_ARRAY(&r, "inheritedRoles", &closure);
    if (privs) {
        bson_t p;
        BSON_APPEND_ARRAY_BEGIN(&r, "privileges", &a);
        if (doc == NULL)
            sbl_auth_builtin_privileges(role, db, &a);
        else if (doc_field(doc, "privileges", &p)) {
            bson_iter_t it;
            bson_iter_init(&it, &p);
            while (bson_iter_next(&it))
                sbl_append_value(&a, bson_iter_key(&it), -1, bson_iter_value(&it));
        }
        bson_append_array_end(&r, &a);
    }
    bson_destroy(&self);
    bson_destroy(&closure);
    bson_append_document_end(arr, &r);
}

typedef struct role_walk {
    sbl_opctx_t *ctx;
    const bson_t *wanted;
    bson_t *arr;
    uint32_t n;
    bool privs;
} role_walk_t;

static bool role_info_visit(const bson_t *doc, void *arg)
{
    role_walk_t *w = arg;
    bson_iter_t it;
    const char *role = NULL, *db = NULL;
    if (bson_iter_init_find(&it, doc, "role") && BSON_ITER_HOLDS_UTF8(&it))
        role = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, doc, "db") && BSON_ITER_HOLDS_UTF8(&it))
        db = bson_iter_utf8(&it, NULL);
    if (role != NULL && db != NULL && wanted_match(doc, "role", w->wanted, w->ctx->db))
        append_role_info(w->ctx, role, db, doc, w->privs, w->arr, w->n++);
    return true;
}

int sbl_cmd_roles_info(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_t holder, arr;
    const bson_t *wanted;
    bool all_dbs, builtin = false;
    bson_iter_t it;
    bool own;
    SBL_RET(selector(ctx, &holder, &own, &wanted, &all_dbs, err));
    role_walk_t w = {ctx, wanted, &arr, 0, false};
    if (bson_iter_init_find(&it, ctx->cmd, "showPrivileges"))
        w.privs = bson_iter_as_bool(&it);
    if (bson_iter_init_find(&it, ctx->cmd, "showBuiltinRoles"))
        builtin = bson_iter_as_bool(&it);
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "roles", &arr);
    /* Built-in roles that were asked for by name (or all, with showBuiltinRoles). */
    if (wanted != NULL) {
        bson_iter_init(&it, wanted);
        while (bson_iter_next(&it)) {
            const char *r, *d;
            sbl_err_t e;
            if (role_at(&it, ctx->db, &r, &d, &e) == 0 && sbl_auth_builtin_role(r, d))
                append_role_info(ctx, r, d, NULL, w.privs, &arr, w.n++);
        }
    } else if (builtin) {
        static const char *const all[] = {
            "dbAdmin", "dbOwner", "read", "readWrite", "userAdmin", "backup", "clusterAdmin",
            "clusterManager", "clusterMonitor", "dbAdminAnyDatabase", "hostManager",
            "readAnyDatabase", "readWriteAnyDatabase", "restore", "root", "userAdminAnyDatabase",
            NULL};
        for (const char *const *r = all; *r != NULL; r++)
            if (sbl_auth_builtin_role(*r, ctx->db))
                append_role_info(ctx, *r, ctx->db, NULL, w.privs, &arr, w.n++);
    }
    int rc = sbl_auth_store_list(ctx->ss, true, wanted != NULL ? NULL : ctx->db, role_info_visit,
                                 &w, err);
    bson_append_array_end(ctx->reply, &arr);
    if (own)
        bson_destroy(&holder);
    return rc;
}

/* Two resources are the same when their documents are equal. */
static bool same_resource(const bson_iter_t *a, const bson_iter_t *b)
{
    bson_iter_t fa, fb;
    const uint8_t *da, *db;
    uint32_t la, lb;
    if (!bson_iter_recurse(a, &fa) || !bson_iter_find(&fa, "resource") ||
        !BSON_ITER_HOLDS_DOCUMENT(&fa) || !bson_iter_recurse(b, &fb) ||
        !bson_iter_find(&fb, "resource") || !BSON_ITER_HOLDS_DOCUMENT(&fb))
        return false;
    bson_iter_document(&fa, &la, &da);
    bson_iter_document(&fb, &lb, &db);
    return la == lb && memcmp(da, db, la) == 0;
}

static void append_actions_except(const bson_iter_t *priv, const bson_t *drop_priv, bson_t *out,
                                  uint32_t idx, bool *emptyp)
{
    bson_iter_t f, a;
    bson_t actions = BSON_INITIALIZER, p;
    uint32_t n = 0;
    bson_t drops;
    if (!doc_field(drop_priv, "actions", &drops))
        bson_init(&drops);
    if (bson_iter_recurse(priv, &f) && bson_iter_find(&f, "actions") &&
        BSON_ITER_HOLDS_ARRAY(&f) && bson_iter_recurse(&f, &a)) {
        while (bson_iter_next(&a)) {
            if (!BSON_ITER_HOLDS_UTF8(&a))
                continue;
            const char *name = bson_iter_utf8(&a, NULL);
            bool gone = false;
            bson_iter_t d;
            bson_iter_init(&d, &drops);
            while (bson_iter_next(&d))
                if (BSON_ITER_HOLDS_UTF8(&d) && strcmp(bson_iter_utf8(&d, NULL), name) == 0)
                    gone = true;
            if (!gone) {
                char key[16];
                const char *k;
                bson_uint32_to_string(n++, &k, key, sizeof(key));
                bson_append_utf8(&actions, k, -1, name, -1);
            }
        }
    }
    *emptyp = n == 0;
    if (n > 0) {
        char key[16];
        const char *k;
        bson_iter_t r;
        bson_uint32_to_string(idx, &k, key, sizeof(key));
        bson_append_document_begin(out, k, -1, &p);
        if (bson_iter_recurse(priv, &r) && bson_iter_find(&r, "resource"))
            sbl_append_value(&p, "resource", -1, bson_iter_value(&r));
        BSON_APPEND_ARRAY(&p, "actions", &actions);
        bson_append_document_end(out, &p);
    }
    bson_destroy(&actions);
}

static int change_role_privileges(sbl_opctx_t *ctx, bool grant, sbl_err_t *err)
{
    const char *role;
    bson_t old, privs, stored, next = BSON_INITIALIZER;
    int rc;
    bool have_old = false;
    uint32_t n = 0;
    SBL_ERR(name_arg(ctx, &role, err));
    if (!array_arg(ctx->cmd, "privileges", &privs)) {
        rc = sbl_err_set(err, SBL_E_BadValue, "\"%s\" command requires a \"privileges\" array",
                         ctx->name);
        goto err;
    }
    SBL_ERR(privileges_arg(ctx, &privs, err));
    SBL_ERR(get_role(ctx, role, &old, err));
    have_old = true;
    if (!doc_field(&old, "privileges", &stored))
        bson_init(&stored);
    bson_iter_t it, g;
    bson_iter_init(&it, &stored);
    while (bson_iter_next(&it)) {
        if (grant) {
            char key[16];
            const char *k;
            bson_uint32_to_string(n++, &k, key, sizeof(key));
            sbl_append_value(&next, k, -1, bson_iter_value(&it));
            continue;
        }
        /* revoke: drop the listed actions from privileges on the same resource */
        bool kept_whole = true;
        bson_iter_init(&g, &privs);
        while (bson_iter_next(&g)) {
            if (!same_resource(&it, &g))
                continue;
            const uint8_t *data;
            uint32_t len;
            bson_t gp;
            bool empty;
            bson_iter_document(&g, &len, &data);
            bson_init_static(&gp, data, len);
            append_actions_except(&it, &gp, &next, n, &empty);
            if (!empty)
                n++;
            kept_whole = false;
            break;
        }
        if (kept_whole) {
            char key[16];
            const char *k;
            bson_uint32_to_string(n++, &k, key, sizeof(key));
            sbl_append_value(&next, k, -1, bson_iter_value(&it));
        }
    }
    if (grant) {
        bson_iter_init(&g, &privs);
        while (bson_iter_next(&g)) {
            char key[16];
            const char *k;
            bson_uint32_to_string(n++, &k, key, sizeof(key));
            sbl_append_value(&next, k, -1, bson_iter_value(&g));
        }
    }
    SBL_ERR(store_role(ctx, &old, &next, NULL, err));
err:
    if (have_old)
        bson_destroy(&old);
    bson_destroy(&next);
    return rc;
}

int sbl_cmd_grant_privileges_to_role(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_cmd_audit_user_result(ctx, change_role_privileges(ctx, true, err));
}

int sbl_cmd_revoke_privileges_from_role(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_cmd_audit_user_result(ctx, change_role_privileges(ctx, false, err));
}

static int change_role_roles(sbl_opctx_t *ctx, bool grant, sbl_err_t *err)
{
    const char *role;
    bson_t old, roles_in, stored, next = BSON_INITIALIZER;
    int rc;
    bool have_old = false;
    uint32_t n = 0;
    SBL_ERR(name_arg(ctx, &role, err));
    if (!array_arg(ctx->cmd, "roles", &roles_in)) {
        rc = sbl_err_set(err, SBL_E_BadValue, "\"%s\" command requires a \"roles\" array",
                         ctx->name);
        goto err;
    }
    SBL_ERR(get_role(ctx, role, &old, err));
    have_old = true;
    if (!doc_field(&old, "roles", &stored))
        bson_init(&stored);
    if (grant) {
        SBL_ERR(roles_granted(ctx, &stored, &roles_in, &next, &n, err));
        SBL_ERR(inheritance_ok(ctx, role, &next, err));
    } else {
        roles_without(&stored, &roles_in, ctx->db, &next);
    }
    SBL_ERR(store_role(ctx, &old, NULL, &next, err));
err:
    if (have_old)
        bson_destroy(&old);
    bson_destroy(&next);
    return rc;
}

int sbl_cmd_grant_roles_to_role(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_cmd_audit_user_result(ctx, change_role_roles(ctx, true, err));
}

int sbl_cmd_revoke_roles_from_role(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return sbl_cmd_audit_user_result(ctx, change_role_roles(ctx, false, err));
}
