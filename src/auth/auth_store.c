/*
 * auth_store.c: users (admin.system.users) and user-defined roles
 * (admin.system.roles) in storage, and the generation number that tells
 * holders of resolved privileges that something changed.
 *
 * What must stay true: every write goes through sbl_write in its own
 * transaction and bumps the generation only after it committed, so a
 * connection that sees the old generation resolves again and never keeps a
 * privilege that was revoked before its next command.
 */
#include "auth/auth.h"
#include "auth/auth_int.h"
#include "server/server.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define WRITE_RETRIES 10

static _Atomic uint64_t generation = 1;
static _Atomic uint64_t has_users_gen; /* generation has_users_cached belongs to; 0: none */
static atomic_bool has_users_cached;

bool sbl_auth_enabled(void)
{
    return sbl_server_options()->auth;
}

uint64_t sbl_auth_generation(void)
{
    return atomic_load_explicit(&generation, memory_order_acquire);
}

void sbl_auth_bump_generation(void)
{
    atomic_fetch_add_explicit(&generation, 1, memory_order_acq_rel);
}

const char *sbl_auth_str(const bson_t *doc, const char *name)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, name) && BSON_ITER_HOLDS_UTF8(&it))
        return bson_iter_utf8(&it, NULL);
    return NULL;
}

static sbl_auth_lookup_fn lookup_fn; /* set once at start (sable-router) */

void sbl_auth_set_lookup(sbl_auth_lookup_fn fn)
{
    lookup_fn = fn;
}

bool sbl_auth_cluster_uri(char *buf, size_t n, const char *key, const char *hosts,
                          const char *opts)
{
    char esc[3 * 1024 + 1];
    size_t k = 0;
    if (key != NULL) { /* base64: '+', '/' and '=' need escaping in a URI */
        for (const char *p = key; *p != '\0' && k + 4 < sizeof(esc); p++) {
            if (*p == '+' || *p == '/' || *p == '=')
                k += (size_t)snprintf(esc + k, sizeof(esc) - k, "%%%02X", (unsigned char)*p);
            else
                esc[k++] = *p;
        }
    }
    esc[k] = '\0';
    const char *tls = sbl_server_cluster_uri_opts();
    const char *amp = tls[0] != '\0' && opts[0] != '\0' ? "&" : "";
    int w = key != NULL ? snprintf(buf, n, "mongodb://__system:%s@%s/?authSource=local&"
                                   "authMechanism=SCRAM-SHA-256&%s%s%s", esc, hosts, opts, amp,
                                   tls)
                        : snprintf(buf, n, "mongodb://%s/?%s%s%s", hosts, opts, amp, tls);
    return w > 0 && (size_t)w < n;
}

static int get_by_id(sbl_session_t *ss, const char *ns, const char *db, const char *name,
                     bson_t *doc, bool *foundp, sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    *foundp = false;
    if (lookup_fn != NULL)
        return lookup_fn(strcmp(ns, SBL_AUTH_ROLES_NS) == 0, db, name, doc, foundp, err);
    sbl_err_t e2;
    if (sbl_coll_open(ss, ns, false, &c, NULL, &e2) != 0)
        return 0; /* no collection: nobody */
    char *id = bson_strdup_printf("%s.%s", db, name);
    bson_value_t v;
    v.value_type = BSON_TYPE_UTF8;
    v.value.v_utf8.str = id;
    v.value.v_utf8.len = (uint32_t)strlen(id);
    int rc = sbl_coll_get(ss, c, &v, doc, foundp, err);
    bson_free(id);
    sbl_coll_release(c);
    return rc;
}

/* __system@local, the user members authenticate as (security.keyFile): not
 * stored; built once from the key (one salt for the process's life). */
static pthread_mutex_t system_user_lock = PTHREAD_MUTEX_INITIALIZER;
static bson_t *system_user;

static int system_user_get(const char *key, bson_t *doc, sbl_err_t *err)
{
    int rc = 0;
    pthread_mutex_lock(&system_user_lock);
    if (system_user == NULL) {
        bson_t creds = BSON_INITIALIZER, roles, r;
        rc = sbl_auth_make_credentials("__system", key, true, true, &creds, err);
        if (rc == 0) {
            system_user = bson_new();
            BSON_APPEND_UTF8(system_user, "_id", "local.__system");
            BSON_APPEND_UTF8(system_user, "user", "__system");
            BSON_APPEND_UTF8(system_user, "db", "local");
            BSON_APPEND_DOCUMENT(system_user, "credentials", &creds);
            BSON_APPEND_ARRAY_BEGIN(system_user, "roles", &roles);
            BSON_APPEND_DOCUMENT_BEGIN(&roles, "0", &r);
            BSON_APPEND_UTF8(&r, "role", "__system");
            BSON_APPEND_UTF8(&r, "db", "admin");
            bson_append_document_end(&roles, &r);
            bson_append_array_end(system_user, &roles);
        }
        bson_destroy(&creds);
    }
    if (rc == 0)
        bson_copy_to(system_user, doc);
    pthread_mutex_unlock(&system_user_lock);
    return rc;
}

int sbl_auth_user_get(sbl_session_t *ss, const char *db, const char *user, bson_t *doc,
                      bool *foundp, sbl_err_t *err)
{
    const char *key = sbl_server_options()->cluster_key;
    if (key != NULL && strcmp(db, "local") == 0 && strcmp(user, "__system") == 0) {
        *foundp = false;
        SBL_RET(system_user_get(key, doc, err));
        *foundp = true;
        return 0;
    }
    return get_by_id(ss, SBL_AUTH_USERS_NS, db, user, doc, foundp, err);
}

int sbl_auth_role_get(sbl_session_t *ss, const char *db, const char *role, bson_t *doc,
                      bool *foundp, sbl_err_t *err)
{
    return get_by_id(ss, SBL_AUTH_ROLES_NS, db, role, doc, foundp, err);
}

int sbl_auth_store_write(sbl_session_t *ss, bool roles, sbl_write_kind_t kind, const bson_t *doc,
                         sbl_err_t *err)
{
    const char *ns = roles ? SBL_AUTH_ROLES_NS : SBL_AUTH_USERS_NS;
    sbl_coll_t *c = NULL;
    int rc;
    SBL_RET(sbl_coll_open(ss, ns, kind == SBL_WRITE_INSERT, &c, NULL, err));
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, "_id")) {
        sbl_coll_release(c);
        return sbl_err_set(err, SBL_E_InternalError, "auth document without _id");
    }
    const bson_value_t *id = bson_iter_value(&it);
    for (int attempt = 0;; attempt++) {
        bson_t old;
        bool found = false;
        SBL_ERR(sbl_txn_begin(ss, err));
        if (kind == SBL_WRITE_INSERT) {
            rc = sbl_write(ss, c, kind, NULL, doc, NULL, err);
        } else {
            rc = sbl_coll_get(ss, c, id, &old, &found, err);
            if (rc == 0 && !found)
                rc = sbl_err_set(err, roles ? SBL_E_RoleNotFound : SBL_E_UserNotFound,
                                 "%s not found", roles ? "Role" : "User");
            if (rc == 0)
                rc = sbl_write(ss, c, kind, &old, kind == SBL_WRITE_UPDATE ? doc : NULL, NULL,
                               err);
            if (found)
                bson_destroy(&old);
        }
        if (rc == 0)
            rc = sbl_txn_commit(ss, err);
        if (rc != 0)
            sbl_txn_abort(ss);
        if (rc != SBL_E_WriteConflict || attempt >= WRITE_RETRIES)
            break;
    }
    if (rc == 0)
        sbl_auth_bump_generation();
err:
    sbl_coll_release(c);
    return rc;
}

int sbl_auth_store_list(sbl_session_t *ss, bool roles, const char *db, sbl_auth_visit_fn fn,
                        void *arg, sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    sbl_scan_t *scan = NULL;
    sbl_err_t e2;
    int rc = 0;
    if (sbl_coll_open(ss, roles ? SBL_AUTH_ROLES_NS : SBL_AUTH_USERS_NS, false, &c, NULL, &e2) != 0)
        return 0;
    SBL_ERR(sbl_scan_open(ss, c, NULL, false, &scan, err));
    for (;;) {
        bson_t doc;
        bool done = false;
        SBL_ERR(sbl_scan_next(scan, &doc, &done, err));
        if (done)
            break;
        const char *d = sbl_auth_str(&doc, "db");
        if (db != NULL && (d == NULL || strcmp(d, db) != 0))
            continue;
        if (!fn(&doc, arg))
            break;
    }
err:
    if (scan != NULL)
        sbl_scan_close(scan);
    sbl_coll_release(c);
    return rc;
}

static bool any_user(const bson_t *doc, void *arg)
{
    *(bool *)arg = true;
    return false;
}

bool sbl_auth_has_users(sbl_session_t *ss)
{
    uint64_t g = sbl_auth_generation();
    if (atomic_load(&has_users_gen) == g)
        return atomic_load(&has_users_cached);
    bool any = false;
    sbl_err_t e;
    if (sbl_auth_store_list(ss, false, NULL, any_user, &any, &e) != 0)
        return true; /* cannot tell: the exception stays closed */
    atomic_store(&has_users_cached, any);
    atomic_store(&has_users_gen, g);
    return any;
}
