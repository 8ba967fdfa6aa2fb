/*
 * audit_cmds.c: the command layer's side of the audit log (src/audit):
 * who an event is about (the connection's UUID, addresses, user and roles),
 * the dispatcher's authCheck event and its wait before replying to an
 * audited write, the events handlers emit (DDL, users and roles,
 * authentication, client metadata), and the commands logApplicationMessage,
 * getAuditConfig, setAuditConfig, setParameter and logRotate.
 *
 * What must stay true: an audited command that changed data is acknowledged
 * only once its events are written (ctx->audit_seq is the last one); a
 * refused event refuses the command before it runs.
 */
#include "audit/audit.h"
#include "auth/auth.h"
#include "cmd/cmd_int.h"
#include "exec/exec.h"
#include "common/log.h"
#include "repl/repl.h"

#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether key ("user\ndb" in cap bytes, as fill_client stores it) names
 * user u of db d.  A byte loop: the names are short, and three libc calls
 * per event cost more. */
static bool who_key_is(const char *key, size_t cap, const char *u, const char *d)
{
    size_t i = 0;
    for (; u[i] != '\0'; i++)
        if (i + 1 >= cap || key[i] != u[i])
            return false;
    if (i + 1 >= cap || key[i++] != '\n')
        return false;
    for (; *d != '\0'; d++, i++)
        if (i >= cap || key[i] != *d)
            return false;
    return i < cap && key[i] == '\0';
}

/* Fill ac for this connection.  roles receives the role list when it is
 * needed (a filter, the BSON format, or the cached JSON is stale). */
static void fill_client(sbl_opctx_t *ctx, sbl_audit_client_t *ac, bson_t *roles)
{
    sbl_client_t *c = ctx->client;
    memset(ac, 0, sizeof(*ac));
    if (ctx->conn != NULL) {
        if (!c->audit_uuid_set) {
            /* Made on the connection's first event; a connection runs one command at a time. */
            if (RAND_bytes(c->audit_uuid, 16) != 1)
                memset(c->audit_uuid, 0, 16);
            c->audit_uuid[6] = (uint8_t)((c->audit_uuid[6] & 0x0f) | 0x40);
            c->audit_uuid[8] = (uint8_t)((c->audit_uuid[8] & 0x3f) | 0x80);
            c->audit_uuid_set = true;
        }
        ac->uuid = c->audit_uuid;
        ac->local = sbl_conn_local(ctx->conn);
        /* through a Unix-domain socket both ends are {unix: <the socket's path>} */
        ac->remote = sbl_conn_is_unix(ctx->conn) ? ac->local : sbl_conn_remote(ctx->conn);
    }
    ac->user = c->auth_user;
    ac->user_db = c->auth_db;
    /* The cached JSON holds for the same user and the same users/roles generation. */
    const char *ku = c->auth_user != NULL ? c->auth_user : "";
    const char *kd = c->auth_db != NULL ? c->auth_db : "";
    bool fresh = ctx->conn != NULL && c->audit_who_len > 0 && c->audit_who_gen == c->authz_gen &&
                 who_key_is(c->audit_who_key, sizeof(c->audit_who_key), ku, kd);
    if (c->authz != NULL && (!fresh || sbl_audit_needs_bson())) {
        sbl_authz_append_roles(c->authz, roles);
        ac->roles = roles;
    }
    if (!fresh && ctx->conn != NULL) {
        size_t lu = strlen(ku), ld = strlen(kd);
        if (lu + 1 + ld < sizeof(c->audit_who_key)) { /* "user\ndb" */
            size_t n = sbl_audit_who_json(ac, c->audit_who, sizeof(c->audit_who));
            c->audit_who_len = (uint16_t)n;
            c->audit_who_gen = c->authz_gen;
            memcpy(c->audit_who_key, ku, lu);
            c->audit_who_key[lu] = '\n';
            memcpy(c->audit_who_key + lu + 1, kd, ld + 1);
            fresh = n > 0;
        }
    }
    if (fresh) {
        ac->who_json = c->audit_who;
        ac->who_json_len = c->audit_who_len;
    }
}

/* ---- writing events before the replies of one loop iteration ------------------- */

/*
 * A network loop collects the events of one iteration and writes them with
 * one write(2) (sbl_audit_flush) after its I/O callbacks (a uv_check
 * handle), then sends the replies that waited for them.  An idle handle
 * keeps the loop from blocking in poll while a batch is armed (for
 * requests dispatched outside the poll phase, e.g. from a timer).  A batch
 * lives from its first event to its check callback; its handles are closed
 * there (nothing is left on the loop when it stops).
 */
typedef struct audit_wait {
    void (*cb)(void *arg, int rc);
    void *arg;
} audit_wait_t;

typedef struct audit_batch {
    uv_check_t check;
    uv_idle_t idle;
    uint64_t seq; /* the last event a waiter needs written */
    audit_wait_t *waits;
    size_t n, cap;
    int closing; /* handles still to close */
} audit_batch_t;

static _Thread_local audit_batch_t *tl_batch; /* this loop thread's armed batch */
/* This thread is a network loop that has armed a batch: its events are
 * written by its own batches (they do not wake the audit writer thread). */
static _Thread_local bool tl_loop_thread;
/* A closed batch kept for this thread's next one (with its waits array):
 * most loop iterations make one, and calloc/free each time showed in the
 * cost of an event.  Freed with the thread (spare_key's destructor). */
static _Thread_local audit_batch_t *tl_spare;
/* spare_key is set (once per thread, not per batch: pthread_setspecific
 * showed in an event's cost) so that its destructor frees tl_spare. */
static _Thread_local bool tl_spare_keyed;
static pthread_key_t spare_key;
static bool spare_key_ok;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;

static void batch_free(audit_batch_t *b)
{
    free(b->waits);
    free(b);
}

/* The key's destructor, on the exiting thread itself: its spare batch. */
static void spare_free(void *arg)
{
    if (tl_spare != NULL)
        batch_free(tl_spare);
    tl_spare = NULL;
}

static void spare_init(void)
{
    spare_key_ok = pthread_key_create(&spare_key, spare_free) == 0;
}

static void batch_closed(uv_handle_t *h)
{
    audit_batch_t *b = h->data;
    if (--b->closing != 0)
        return;
    if (tl_spare == NULL && !tl_spare_keyed) {
        pthread_once(&spare_once, spare_init);
        tl_spare_keyed = spare_key_ok && pthread_setspecific(spare_key, &tl_spare) == 0;
    }
    if (tl_spare == NULL && tl_spare_keyed) {
        tl_spare = b;
        return;
    }
    batch_free(b);
}

static void batch_idle(uv_idle_t *h)
{
}

/* Write the batch's events and release its waiters (the batch stays armed
 * for what comes next).  The waiters are taken out first: their replies may
 * dispatch further requests on this thread, which may add to the batch. */
static void batch_release(audit_batch_t *b)
{
    sbl_err_t err;
    audit_wait_t *w = b->waits;
    size_t n = b->n, cap = b->cap;
    uint64_t seq = b->seq;
    b->waits = NULL;
    b->n = b->cap = 0;
    b->seq = 0;
    int rc = sbl_audit_flush(seq, &err);
    if (seq == 0)
        rc = 0;
    for (size_t i = 0; i < n; i++)
        w[i].cb(w[i].arg, rc);
    if (b->waits == NULL) { /* nothing waits again yet: keep the array */
        b->waits = w;
        b->cap = cap;
    } else {
        free(w);
    }
}

/* A very long loop iteration (many connections ready at once) would hold
 * the first writes' replies for all of it: release them once this many
 * wait (one more write(2), shared by all of them).  A count, not a time:
 * the 200 us release this replaced fired 2-7 times per iteration at 100
 * busy connections (0.13-0.22 audit writes per operation, each a file
 * append of tens of microseconds in the kernel), and more often the more
 * the loop thread was preempted; one write per iteration is the cheapest. */
#define AUDIT_GROUP_MAX_WAITERS 64

static void batch_run(uv_check_t *h)
{
    audit_batch_t *b = h->data;
    if (tl_batch == b)
        tl_batch = NULL; /* what the replies below dispatch goes to a new batch */
    /* This check runs before the loop's reply flush (libuv runs the newest
     * check first): every reply of the iteration goes out after the audit
     * write, each in its request's place (sbl_conn_hold_place).  Sending
     * the replies that wait on no event first (41f46a7) served reads ahead
     * of writes: at 100 busy clients that moved ~700 us of mean latency from
     * the reads to the writes in bench/audit's mixed mixes. */
    batch_release(b);
    b->closing = 2;
    uv_close((uv_handle_t *)&b->check, batch_closed);
    uv_close((uv_handle_t *)&b->idle, batch_closed);
}

/* The armed batch of this loop thread (made on first use), or NULL without memory. */
static audit_batch_t *batch_get(sbl_conn_t *conn)
{
    if (tl_batch != NULL) {
        if (tl_batch->n >= AUDIT_GROUP_MAX_WAITERS)
            batch_release(tl_batch);
        return tl_batch;
    }
    audit_batch_t *b = tl_spare;
    if (b != NULL) {
        tl_spare = NULL;
        b->seq = 0;
        b->n = 0;
    } else if ((b = calloc(1, sizeof(*b))) == NULL) {
        return NULL;
    }
    uv_loop_t *loop = sbl_conn_loop(conn);
    uv_check_init(loop, &b->check);
    uv_idle_init(loop, &b->idle);
    b->check.data = b->idle.data = b;
    uv_check_start(&b->check, batch_run);
    uv_idle_start(&b->idle, batch_idle);
    tl_batch = b;
    tl_loop_thread = true;
    return b;
}

/* After an event made with sbl_audit_event_self on a loop thread: arm the
 * batch that writes it, or write it now when there is no memory for one. */
static void batch_arm(sbl_conn_t *conn, uint64_t seq)
{
    sbl_err_t e;
    if (seq != 0 && batch_get(conn) == NULL)
        sbl_audit_flush(seq, &e);
}

static int emit(sbl_opctx_t *ctx, const char *atype, const bson_t *param, int result,
                bool force, sbl_err_t *err)
{
    sbl_audit_client_t ac;
    bson_t roles = BSON_INITIALIZER;
    uint64_t seq = 0;
    fill_client(ctx, &ac, &roles);
    /* On a loop thread the event goes into this iteration's group write; on
     * a worker (or without a connection) the writer thread takes it. */
    bool self = tl_loop_thread && ctx->conn != NULL;
    int rc = self ? sbl_audit_event_self(atype, &ac, param, NULL, result, force, &seq, err)
                  : sbl_audit_event(atype, &ac, param, result, force, &seq, err);
    bson_destroy(&roles);
    if (seq > ctx->audit_seq)
        ctx->audit_seq = seq;
    if (self)
        batch_arm(ctx->conn, seq);
    return rc;
}

void sbl_cmd_audit(sbl_opctx_t *ctx, const char *atype, const bson_t *param, int result)
{
    sbl_err_t e;
    if (sbl_audit_enabled())
        emit(ctx, atype, param, result, true, &e);
}

/* ---- the dispatcher ---------------------------------------------------------- */

/* The command's table row: the dispatcher looked it up already and set
 * ctx->name to the row's own name, so this thread remembers the last row
 * and compares the pointer (a lookup is a binary search of strcmps). */
static const sbl_cmd_def_t *cmd_def(const char *name)
{
    static _Thread_local const sbl_cmd_def_t *last;
    if (last == NULL || last->name != name)
        last = sbl_cmd_lookup(name);
    return last;
}

/* ns of a command into out (cap bytes): "db.coll" when its first field is a
 * non-empty string, else "db".  Read from the BSON bytes (a bson_iter_t
 * costs more than the rest of this). */
static void cmd_ns(const sbl_opctx_t *ctx, char *out, size_t cap)
{
    const uint8_t *d = bson_get_data(ctx->cmd), *end = d + ctx->cmd->len;
    size_t dl = strlen(ctx->db);
    if (dl >= cap)
        dl = cap - 1;
    memcpy(out, ctx->db, dl);
    if (ctx->cmd->len > 5 && d[4] == BSON_TYPE_UTF8) {
        const uint8_t *k = memchr(d + 5, 0, (size_t)(end - (d + 5)));
        if (k != NULL && end - (k + 1) >= 5) {
            uint32_t n = (uint32_t)k[1] | (uint32_t)k[2] << 8 | (uint32_t)k[3] << 16 |
                         (uint32_t)k[4] << 24; /* the string's length with its NUL */
            const char *coll = (const char *)k + 5;
            if (n > 1 && n <= (size_t)(end - (k + 5)) && dl + n < cap) {
                out[dl++] = '.';
                memcpy(out + dl, coll, n - 1);
                dl += n - 1;
            }
        }
    }
    out[dl] = '\0';
}

int sbl_cmd_audit_check(sbl_opctx_t *ctx, int rc, sbl_err_t *err)
{
    const sbl_cmd_def_t *def;
    if (!sbl_audit_enabled() || ctx->name == NULL || ctx->conn == NULL ||
        (def = cmd_def(ctx->name)) == NULL || (def->flags & SBL_CMD_NO_AUTH))
        return rc;
    if (rc != 0 && rc != SBL_E_Unauthorized)
        return rc;
    if (rc == 0 && !sbl_audit_auth_success()) {
        /* Not audited by authCheck; its DDL events may still be: refuse writes meanwhile. */
        if ((def->flags & SBL_CMD_WRITE) && sbl_audit_health(err) != 0)
            return err->code;
        return 0;
    }
    char ns[256];
    cmd_ns(ctx, ns, sizeof(ns));
    sbl_audit_client_t ac;
    bson_t roles = BSON_INITIALIZER;
    uint64_t seq = 0;
    sbl_err_t e;
    fill_client(ctx, &ac, &roles);
    /* param {command, ns, args: the command} is written from these (no
     * param document; a "pwd" is redacted there).  The dispatcher runs on
     * the connection's loop: this iteration's group write takes the event
     * (batch_arm below), so the writer is not woken. */
    int arc = sbl_audit_command("authCheck", &ac, def->name, ns, ctx->cmd, rc, rc != 0, true,
                                &seq, &e);
    if (ac.roles != NULL) /* else nothing was appended: nothing to free */
        bson_destroy(&roles);
    if (seq > ctx->audit_seq)
        ctx->audit_seq = seq;
    batch_arm(ctx->conn, seq); /* written at the end of this loop iteration */
    if (rc == 0 && arc != 0) {
        *err = e;
        return arc;
    }
    return rc;
}

bool sbl_cmd_audit_wait(sbl_opctx_t *ctx, void (*cb)(void *arg, int rc), void *arg)
{
    uint64_t seq = ctx->audit_seq;
    audit_batch_t *b;
    if (seq == 0 || sbl_audit_written(seq))
        return false;
    ctx->audit_seq = 0;
    if (ctx->conn == NULL || (b = batch_get(ctx->conn)) == NULL) {
        sbl_err_t e;
        cb(arg, sbl_audit_flush(seq, &e)); /* no batch: write it now */
        return true;
    }
    if (b->n == b->cap) {
        size_t cap = b->cap != 0 ? b->cap * 2 : 16;
        audit_wait_t *w = realloc(b->waits, cap * sizeof(*w));
        if (w == NULL) {
            sbl_err_t e;
            cb(arg, sbl_audit_flush(seq, &e));
            return true;
        }
        b->waits = w;
        b->cap = cap;
    }
    b->waits[b->n].cb = cb;
    b->waits[b->n].arg = arg;
    b->n++;
    sbl_conn_hold_place(ctx->conn); /* its reply leaves in this request's turn */
    if (seq > b->seq)
        b->seq = seq;
    return true;
}

/* ---- events from handlers -------------------------------------------------------- */

void sbl_cmd_audit_ns(sbl_opctx_t *ctx, const char *atype, const char *ns)
{
    if (!sbl_audit_enabled())
        return;
    bson_t p = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&p, "ns", ns);
    sbl_cmd_audit(ctx, atype, &p, 0);
    bson_destroy(&p);
}

static bool count_colls(const char *ns, const bson_t *options, const uint8_t *uuid, void *arg)
{
    (*(int *)arg)++;
    return true;
}

void sbl_cmd_audit_coll_created(sbl_opctx_t *ctx, const char *ns)
{
    char db[128];
    int n = 0;
    if (!sbl_audit_enabled())
        return;
    const char *dot = strchr(ns, '.');
    snprintf(db, sizeof(db), "%.*s", dot != NULL ? (int)(dot - ns) : (int)strlen(ns), ns);
    sbl_catalog_list(db, count_colls, &n);
    if (n <= 1)
        sbl_cmd_audit_ns(ctx, "createDatabase", db);
    sbl_cmd_audit_ns(ctx, "createCollection", ns);
}

void sbl_cmd_audit_index(sbl_opctx_t *ctx, const char *atype, const char *ns, const char *name,
                         const bson_t *spec)
{
    if (!sbl_audit_enabled())
        return;
    bson_t p = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&p, "ns", ns);
    BSON_APPEND_UTF8(&p, "indexName", name);
    if (spec != NULL)
        BSON_APPEND_DOCUMENT(&p, "indexSpec", spec);
    sbl_cmd_audit(ctx, atype, &p, 0);
    bson_destroy(&p);
}

void sbl_cmd_audit_rename(sbl_opctx_t *ctx, const char *from, const char *to)
{
    if (!sbl_audit_enabled())
        return;
    bson_t p = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&p, "old", from);
    BSON_APPEND_UTF8(&p, "new", to);
    sbl_cmd_audit(ctx, "renameCollection", &p, 0);
    bson_destroy(&p);
}

/* The user and role commands: atype is the command name; param names the
 * user or role ({user|role, db}) and carries what changed. */
int sbl_cmd_audit_user_result(sbl_opctx_t *ctx, int rc)
{
    static const char *const copied[] = {"roles", "privileges", "customData",
                                         "authenticationRestrictions", NULL};
    bson_iter_t it;
    if (rc != 0 || !sbl_audit_enabled() || ctx->name == NULL)
        return rc;
    bson_t p = BSON_INITIALIZER;
    const char *n = ctx->name;
    bool all = strncmp(n, "dropAll", 7) == 0;
    bool role = strstr(n, "Role") != NULL && strstr(n, "ToUser") == NULL &&
                strstr(n, "FromUser") == NULL;
    if (!all && bson_iter_init(&it, ctx->cmd) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it))
        BSON_APPEND_UTF8(&p, role ? "role" : "user", bson_iter_utf8(&it, NULL));
    BSON_APPEND_UTF8(&p, "db", ctx->db);
    for (int i = 0; copied[i] != NULL; i++)
        if (bson_iter_init_find(&it, ctx->cmd, copied[i]))
            sbl_append_iter(&p, copied[i], -1, &it);
    if (strcmp(n, "updateUser") == 0)
        BSON_APPEND_BOOL(&p, "passwordChanged", bson_iter_init_find(&it, ctx->cmd, "pwd"));
    sbl_cmd_audit(ctx, n, &p, 0);
    bson_destroy(&p);
    return rc;
}

void sbl_cmd_audit_authenticate(sbl_opctx_t *ctx, const char *mech, const char *user,
                                const char *db, int result)
{
    if (!sbl_audit_enabled())
        return;
    bson_t p = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&p, "user", user != NULL ? user : "");
    BSON_APPEND_UTF8(&p, "db", db != NULL ? db : "");
    BSON_APPEND_UTF8(&p, "mechanism", mech != NULL ? mech : "");
    sbl_cmd_audit(ctx, "authenticate", &p, result);
    bson_destroy(&p);
}

void sbl_cmd_audit_logout(sbl_opctx_t *ctx)
{
    bson_t p, a, u;
    if (!sbl_audit_enabled())
        return;
    bson_init(&p);
    BSON_APPEND_UTF8(&p, "reason", "Explicit logout");
    BSON_APPEND_ARRAY_BEGIN(&p, "initialUsers", &a);
    if (ctx->client->auth_user != NULL) {
        BSON_APPEND_DOCUMENT_BEGIN(&a, "0", &u);
        BSON_APPEND_UTF8(&u, "user", ctx->client->auth_user);
        BSON_APPEND_UTF8(&u, "db", ctx->client->auth_db);
        bson_append_document_end(&a, &u);
    }
    bson_append_array_end(&p, &a);
    BSON_APPEND_ARRAY_BEGIN(&p, "updatedUsers", &a);
    bson_append_array_end(&p, &a);
    sbl_cmd_audit(ctx, "logout", &p, 0);
    bson_destroy(&p);
}

void sbl_cmd_audit_client_metadata(sbl_opctx_t *ctx, const bson_t *metadata)
{
    if (!sbl_audit_enabled())
        return;
    bson_t p = BSON_INITIALIZER;
    if (ctx->conn != NULL)
        BSON_APPEND_UTF8(&p, "localEndpoint", sbl_conn_local(ctx->conn));
    BSON_APPEND_DOCUMENT(&p, "clientMetadata", metadata);
    sbl_cmd_audit(ctx, "clientMetadata", &p, 0);
    bson_destroy(&p);
}

/* ---- commands ------------------------------------------------------------------ */

int sbl_cmd_log_application_message(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, ctx->cmd) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field 'logApplicationMessage' is the wrong type, expected "
                           "type 'string'");
    if (!sbl_audit_enabled())
        return sbl_err_set(err, SBL_E_CommandNotSupported,
                           "logApplicationMessage requires auditing to be enabled "
                           "(--auditDestination)");
    bson_t p = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&p, "msg", bson_iter_utf8(&it, NULL));
    int rc = emit(ctx, "applicationMessage", &p, 0, false, err);
    bson_destroy(&p);
    SBL_RET(rc);
    ctx->wrote = true; /* acknowledged once the event is written */
    return 0;
}

int sbl_cmd_get_audit_config(sbl_opctx_t *ctx, sbl_err_t *err)
{
    sbl_audit_get_config(ctx->reply);
    return 0;
}

int sbl_cmd_set_audit_config(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    if (!sbl_audit_enabled())
        return sbl_err_set(err, SBL_E_CommandNotSupported,
                           "setAuditConfig requires auditing to be enabled (--auditDestination)");
    if (bson_iter_init_find(&it, ctx->cmd, "filter")) {
        const uint8_t *data;
        uint32_t len;
        bson_t f;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it))
            return sbl_err_set(err, SBL_E_TypeMismatch,
                               "BSON field 'setAuditConfig.filter' is the wrong type, expected "
                               "type 'object'");
        bson_iter_document(&it, &len, &data);
        bson_init_static(&f, data, len);
        SBL_RET(sbl_audit_set_filter(&f, err));
    }
    if (bson_iter_init_find(&it, ctx->cmd, "auditAuthorizationSuccess")) {
        if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_NUMBER(&it))
            return sbl_err_set(err, SBL_E_TypeMismatch,
                               "BSON field 'setAuditConfig.auditAuthorizationSuccess' is the "
                               "wrong type, expected type 'bool'");
        sbl_audit_set_auth_success(bson_iter_as_bool(&it));
    }
    bson_t cfg = BSON_INITIALIZER;
    sbl_audit_get_config(&cfg);
    bson_t p = BSON_INITIALIZER;
    BSON_APPEND_DOCUMENT(&p, "config", &cfg);
    sbl_cmd_audit(ctx, "auditConfigChange", &p, 0);
    bson_destroy(&p);
    bson_destroy(&cfg);
    ctx->wrote = true;
    return 0;
}

int sbl_cmd_set_parameter(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    bool known = false;
    bson_iter_init(&it, ctx->cmd);
    bson_iter_next(&it); /* setParameter: 1 */
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (k[0] == '$' || strcmp(k, "lsid") == 0 || strcmp(k, "comment") == 0)
            continue;
        if (strcmp(k, "auditAuthorizationSuccess") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_NUMBER(&it))
                return sbl_err_set(err, SBL_E_BadValue,
                                   "auditAuthorizationSuccess must be a boolean");
            BSON_APPEND_BOOL(ctx->reply, "was", sbl_audit_auth_success());
            sbl_audit_set_auth_success(bson_iter_as_bool(&it));
            known = true;
            continue;
        }
        if (strcmp(k, "logLevel") == 0) { /* what sabled -v..-vvvvv set at start-up */
            if (!BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_double(&it) < 0 ||
                bson_iter_as_double(&it) > 5 ||
                bson_iter_as_double(&it) != (double)bson_iter_as_int64(&it))
                return sbl_err_set(err, SBL_E_BadValue,
                                   "logLevel must be an integer from 0 to 5");
            BSON_APPEND_INT32(ctx->reply, "was", sbl_log_verbosity());
            sbl_log_set_verbosity((int)bson_iter_as_int64(&it));
            known = true;
            continue;
        }
        if (strcmp(k, "replWriterThreadCount") == 0) /* start-up only, as mongod's */
            return sbl_err_set(err, SBL_E_IllegalOperation, "not allowed to change [%s] at "
                               "runtime", k);
        int prc = sbl_cmd_mtxn_set_parameter(k, &it, ctx->reply, err); /* txn.c */
        if (prc < 0)
            prc = sbl_spill_set_parameter(k, &it, ctx->reply, err); /* memory limits (src/exec/spill.c) */
        if (prc < 0)
            prc = sbl_cmd_automerge_set_parameter(k, &it, ctx->reply, err); /* chunk_merge.c */
        if (prc < 0) /* the range deleter's (migrate_rangedel.c) */
            prc = sbl_cmd_rangedel_set_parameter(k, &it, ctx->reply, err);
        if (prc < 0) /* flow control's (src/repl/repl_flow.c) */
            prc = sbl_repl_flow_set_parameter(k, &it, false, ctx->reply, err);
        if (prc >= 0) {
            if (prc != 0)
                return prc;
            known = true;
            continue;
        }
        return sbl_err_set(err, SBL_E_InvalidOptions, "attempted to set unrecognized parameter "
                           "[%s], use help:true to see options", k);
    }
    if (!known)
        return sbl_err_set(err, SBL_E_InvalidOptions, "no option found to set, use help:true to "
                           "see options");
    return 0;
}

int sbl_cmd_log_rotate(sbl_opctx_t *ctx, sbl_err_t *err)
{
    sbl_log_reopen();
    sbl_log(SBL_LOG_INFO, "CONTROL", 23166, "Log rotation initiated", NULL);
    return sbl_audit_rotate(err);
}
