/*
 * failpoint.c: configureFailPoint and the failCommand fail point, as MongoDB
 * runs them for driver test suites (only with enableTestCommands=1).
 *
 * failCommand, when on, acts on the next commands of external clients (not
 * other members' connections, whose appName starts with "sable-") whose
 * name is in data.failCommands (and whose appName matches data.appName):
 * blockConnection delays the command by blockTimeMS (a loop timer, never a
 * sleep on the loop), then closeConnection closes the connection without a
 * reply, else errorCode fails it, else writeConcernError is added to its
 * successful reply.  mode {times: n} turns the fail point off after n
 * activations, {skip: n} lets n matching commands pass first.
 *
 * onPrimaryTransactionalWrite acts on a retryable write's statements
 * (retryable.c): failBeforeCommitExceptionCode fails the statement without
 * writing, closeConnection (default true) lets the command run and closes
 * the connection instead of replying, as mongod's fail point of that name.
 *
 * hangBeforeApplyCommit, rsSyncApplyStop, hangBeforePrimaryOplogAppend and
 * hangBeforePrimaryOplogCommit hold replication's writers, failBeforePrimaryOplogCommit
 * fails a primary's write after its entry took a ts (src/repl/repl_failpoint.c), while
 * on, at most data.maxMS (default 60000) each time.
 *
 * What must stay true: the state is read and changed under one mutex;
 * sbl_failpoint_on is non-zero exactly while a mode other than off is set or
 * a blocked command has yet to resume (its resumption goes through the hook).
 */
#include "cmd/failpoint.h"
#include "common/log.h"
#include "doc/doc.h"
#include "repl/repl.h"
#include "server/server.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

atomic_int sbl_failpoint_on;

enum { MODE_OFF, MODE_ALWAYS, MODE_TIMES, MODE_SKIP };

static pthread_mutex_t fp_mu = PTHREAD_MUTEX_INITIALIZER;
static int fp_mode = MODE_OFF;
static int64_t fp_n;          /* times left (MODE_TIMES) or matches to skip (MODE_SKIP) */
static int64_t fp_entered;    /* activations since the server started */
static bson_t *fp_data;       /* the data document while on, else NULL */
static int fp_blocks;         /* blocked commands not yet resumed */

/* The dispatcher's flag: on while a mode is set or a blocked command must
 * still resume through the hook.  Locked. */
static void update_flag(void)
{
    atomic_store_explicit(&sbl_failpoint_on, fp_mode != MODE_OFF || fp_blocks > 0,
                          memory_order_relaxed);
}

static const char fp_msg[] = "Failing command via 'failCommand' failpoint";

bool sbl_test_commands_enabled(void)
{
    const sbl_options_t *o = sbl_server_options();
    bson_iter_t it;
    if (o == NULL || !bson_iter_init_find(&it, &o->parameters, "enableTestCommands"))
        return false;
    if (BSON_ITER_HOLDS_UTF8(&it)) {
        const char *v = bson_iter_utf8(&it, NULL);
        return strcmp(v, "1") == 0 || strcmp(v, "true") == 0;
    }
    return bson_iter_as_bool(&it);
}

/* ---- matching ------------------------------------------------------------------ */

static bool data_bool(const bson_t *data, const char *name)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, data, name) && bson_iter_as_bool(&it);
}

static bool names_command(const bson_t *data, const sbl_opctx_t *ctx)
{
    bson_iter_t it, list, first;
    const char *sent = NULL;
    if (bson_iter_init(&first, ctx->cmd) && bson_iter_next(&first))
        sent = bson_iter_key(&first);
    if (bson_iter_init_find(&it, data, "failAllCommands"))
        return true;
    if (!bson_iter_init_find(&it, data, "failCommands") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &list))
        return false;
    while (bson_iter_next(&list)) {
        if (!BSON_ITER_HOLDS_UTF8(&list))
            continue;
        const char *n = bson_iter_utf8(&list, NULL);
        if (strcmp(n, ctx->name) == 0 || (sent != NULL && strcmp(n, sent) == 0))
            return true;
    }
    return false;
}

static bool app_name_matches(const bson_t *data, const sbl_opctx_t *ctx)
{
    bson_iter_t it, md;
    const char *have = "";
    if (ctx->client->metadata != NULL && bson_iter_init(&md, ctx->client->metadata) &&
        bson_iter_find_descendant(&md, "application.name", &it) && BSON_ITER_HOLDS_UTF8(&it))
        have = bson_iter_utf8(&it, NULL);
    if (strncmp(have, "sable-", 6) == 0)
        return false; /* another member's connection (its applier, heartbeats): internal */
    if (!bson_iter_init_find(&it, data, "appName"))
        return true;
    const char *want = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
    return strcmp(want, have) == 0;
}

/* Does this command activate the fail point?  Consumes one activation (and
 * returns a copy of data, owned by the caller) when it does.  Locked. */
static bson_t *activate(const sbl_opctx_t *ctx)
{
    bson_t *data = NULL;
    pthread_mutex_lock(&fp_mu);
    if (fp_data == NULL || strcmp(ctx->name, "configureFailPoint") == 0 ||
        !names_command(fp_data, ctx) || !app_name_matches(fp_data, ctx))
        goto out;
    bson_iter_t it;
    if (!bson_iter_init_find(&it, fp_data, "closeConnection") &&
        !bson_iter_init_find(&it, fp_data, "errorCode") &&
        !bson_iter_init_find(&it, fp_data, "blockConnection") &&
        !bson_iter_init_find(&it, fp_data, "writeConcernError"))
        goto out;
    if (fp_mode == MODE_SKIP && fp_n > 0) {
        fp_n--;
        goto out;
    }
    data = bson_copy(fp_data);
    fp_entered++;
    if (fp_mode == MODE_TIMES && --fp_n <= 0) {
        fp_mode = MODE_OFF;
        bson_destroy(fp_data);
        fp_data = NULL;
        update_flag();
    }
out:
    pthread_mutex_unlock(&fp_mu);
    return data;
}

/* ---- acting ------------------------------------------------------------------------ */

/* The request being re-dispatched after its block, and the activation it
 * already consumed (loop thread). */
static _Thread_local const sbl_request_t *resumed_req;
static _Thread_local bson_t *resumed_data;

typedef struct block {
    uv_timer_t timer;
    sbl_conn_t *conn;
    sbl_request_t *req;
    bson_t *data;
} block_t;

static void block_closed(uv_handle_t *h)
{
    free(h->data);
}

static void block_done(uv_timer_t *t)
{
    block_t *b = t->data;
    resumed_req = b->req;
    resumed_data = b->data;
    sbl_cmd_dispatch(b->conn, b->req); /* the command continues with the same activation */
    resumed_req = NULL;
    resumed_data = NULL;
    pthread_mutex_lock(&fp_mu);
    fp_blocks--;
    update_flag();
    pthread_mutex_unlock(&fp_mu);
    bson_destroy(b->data);
    uv_close((uv_handle_t *)&b->timer, block_closed);
}

static void copy_field(const bson_t *data, const char *name, bson_t *reply)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, data, name))
        sbl_append_iter(reply, name, -1, &it);
}

/* What follows the block: close, error or writeConcernError. */
static bool act(sbl_opctx_t *ctx, const bson_t *data, int *rcp, sbl_err_t *err)
{
    bson_iter_t it;
    if (data_bool(data, "closeConnection")) {
        sbl_log(SBL_LOG_INFO, "COMMAND", 20431,
                "Failing command via 'failCommand' failpoint: closing connection", NULL);
        ctx->deferred = true;
        *rcp = 0;
        sbl_conn_close_request(ctx->conn, ctx->req);
        return true;
    }
    if (bson_iter_init_find(&it, data, "errorCode") && BSON_ITER_HOLDS_NUMBER(&it)) {
        int code = (int)bson_iter_as_int64(&it);
        bson_iter_t ri;
        if (bson_iter_init_find(&ri, data, "errorLabels") && BSON_ITER_HOLDS_ARRAY(&ri))
            sbl_append_iter(ctx->reply, "errorLabels", -1, &ri);
        *rcp = sbl_err_set(err, code, "%s", fp_msg);
        if (code == 0) /* MongoDB replies ok: 1 to errorCode 0 */
            return false;
        return true;
    }
    if (bson_iter_init_find(&it, data, "writeConcernError") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        copy_field(data, "writeConcernError", ctx->reply);
        copy_field(data, "errorLabels", ctx->reply);
    }
    return false;
}

bool sbl_failpoint_command(sbl_opctx_t *ctx, int *rcp, sbl_err_t *err)
{
    bson_iter_t it;
    if (ctx->conn == NULL || ctx->req == NULL)
        return false; /* internal commands: never failed */
    if (ctx->req == resumed_req)
        return act(ctx, resumed_data, rcp, err);
    bson_t *data = activate(ctx);
    if (data == NULL)
        return false;
    if (data_bool(data, "blockConnection")) {
        int64_t ms = -1;
        if (bson_iter_init_find(&it, data, "blockTimeMS") && BSON_ITER_HOLDS_NUMBER(&it))
            ms = bson_iter_as_int64(&it);
        block_t *b = ms >= 0 ? calloc(1, sizeof(*b)) : NULL;
        if (b == NULL) {
            bson_destroy(data);
            *rcp = ms < 0 ? sbl_err_set(err, SBL_E_InvalidOptions,
                                        "must specify 'blockTimeMS' when 'blockConnection' is true")
                          : sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
            return true;
        }
        b->conn = ctx->conn;
        b->req = ctx->req;
        b->data = data;
        b->timer.data = b;
        pthread_mutex_lock(&fp_mu);
        fp_blocks++;
        update_flag();
        pthread_mutex_unlock(&fp_mu);
        uv_timer_init(sbl_conn_loop(ctx->conn), &b->timer);
        uv_timer_start(&b->timer, block_done, (uint64_t)ms, 0);
        ctx->deferred = true; /* the connection stays open while its request is out */
        *rcp = 0;
        return true;
    }
    bool took = act(ctx, data, rcp, err);
    bson_destroy(data);
    return took;
}

/* ---- configureFailPoint ---------------------------------------------------------------- */

static int parse_mode(const bson_iter_t *mit, int *modep, int64_t *np, sbl_err_t *err)
{
    bson_iter_t it;
    *modep = MODE_OFF;
    *np = 0;
    if (BSON_ITER_HOLDS_UTF8(mit)) {
        const char *m = bson_iter_utf8(mit, NULL);
        if (strcmp(m, "off") == 0)
            return 0;
        if (strcmp(m, "alwaysOn") == 0) {
            *modep = MODE_ALWAYS;
            return 0;
        }
        return sbl_err_set(err, SBL_E_BadValue, "unknown mode: %s", m);
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(mit) || !bson_iter_recurse(mit, &it) || !bson_iter_next(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "'mode' must be a string or JSON object");
    const char *k = bson_iter_key(&it);
    if (strcmp(k, "times") != 0 && strcmp(k, "skip") != 0)
        return sbl_err_set(err, SBL_E_BadValue, "'mode' must be one of 'off', 'alwaysOn', "
                           "'times', 'skip' or 'activationProbability'");
    if (!BSON_ITER_HOLDS_NUMBER(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "'%s' option to 'mode' must be a number", k);
    int64_t n = bson_iter_as_int64(&it);
    if (n < 0)
        return sbl_err_set(err, SBL_E_BadValue, "'%s' option to 'mode' must be positive", k);
    *np = n;
    if (strcmp(k, "times") == 0)
        *modep = n > 0 ? MODE_TIMES : MODE_OFF;
    else
        *modep = MODE_SKIP;
    return 0;
}

/* ---- onPrimaryTransactionalWrite: a retryable write's statement -------------------------- */

static int tw_mode = MODE_OFF;
static int64_t tw_n;
static bson_t *tw_data;
static atomic_int tw_on;

bool sbl_failpoint_txn_write(bool *closep, int *codep)
{
    bson_iter_t it;
    *closep = false;
    *codep = 0;
    if (!atomic_load_explicit(&tw_on, memory_order_relaxed))
        return false;
    pthread_mutex_lock(&fp_mu);
    bool fire = tw_mode != MODE_OFF;
    if (fire && tw_mode == MODE_SKIP && tw_n > 0) {
        tw_n--;
        fire = false;
    } else if (fire && tw_mode == MODE_TIMES && --tw_n <= 0) {
        tw_mode = MODE_OFF;
        atomic_store(&tw_on, 0);
    }
    if (fire) {
        *closep = !bson_iter_init_find(&it, tw_data, "closeConnection") || bson_iter_as_bool(&it);
        if (bson_iter_init_find(&it, tw_data, "failBeforeCommitExceptionCode") &&
            BSON_ITER_HOLDS_NUMBER(&it))
            *codep = (int)bson_iter_as_int64(&it);
    }
    pthread_mutex_unlock(&fp_mu);
    return fire;
}

/* failGetMoreAfterCursorCheckout's data ({errorCode}) as failCommand's on
 * getMore; a code a change stream may resume after gets the
 * ResumableChangeStreamError label mongod adds to such getMore errors. */
static void getmore_data(bson_t *data)
{
    static const int resumable[] = {6, 7, 63, 89, 91, 133, 150, 189, 234, 262, 9001, 10107,
                                    11600, 11602, 13388, 13435, 13436};
    bson_iter_t it;
    bson_t arr;
    int code = bson_iter_init_find(&it, data, "errorCode") && BSON_ITER_HOLDS_NUMBER(&it)
                   ? (int)bson_iter_as_int64(&it) : 0;
    BSON_APPEND_ARRAY_BEGIN(data, "failCommands", &arr);
    BSON_APPEND_UTF8(&arr, "0", "getMore");
    bson_append_array_end(data, &arr);
    for (size_t i = 0; i < sizeof(resumable) / sizeof(resumable[0]); i++)
        if (code == resumable[i] && !bson_iter_init_find(&it, data, "errorLabels")) {
            BSON_APPEND_ARRAY_BEGIN(data, "errorLabels", &arr);
            BSON_APPEND_UTF8(&arr, "0", "ResumableChangeStreamError");
            bson_append_array_end(data, &arr);
        }
}

/* sableDelayHeartbeatPing (Sable's): {mode: "alwaysOn", data: {host: "h:p",
 * ms: N}} adds N ms to this member's pings to member h:p ("off" ends it). */
static int ping_delay_fail_point(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it, d;
    int mode;
    int64_t n;
    if (!bson_iter_init_find(&it, ctx->cmd, "mode"))
        return sbl_err_set(err, SBL_E_BadValue, "When setting a failpoint, you must supply a 'mode'");
    SBL_RET(parse_mode(&it, &mode, &n, err));
    if (mode == MODE_OFF) {
        sbl_repl_set_ping_delay(NULL, 0);
        return 0;
    }
    const char *host = NULL;
    int64_t ms = 0;
    if (bson_iter_init_find(&it, ctx->cmd, "data") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &d))
        while (bson_iter_next(&d)) {
            if (strcmp(bson_iter_key(&d), "host") == 0 && BSON_ITER_HOLDS_UTF8(&d))
                host = bson_iter_utf8(&d, NULL);
            else if (strcmp(bson_iter_key(&d), "ms") == 0 && BSON_ITER_HOLDS_NUMBER(&d))
                ms = bson_iter_as_int64(&d);
        }
    if (host == NULL || ms < 0)
        return sbl_err_set(err, SBL_E_BadValue, "sableDelayHeartbeatPing needs data: {host, ms}");
    sbl_repl_set_ping_delay(host, ms);
    return 0;
}

int sbl_cmd_configure_fail_point(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    const bson_t *data_in = NULL;
    bson_t data_view;
    int mode;
    int64_t n;
    int rc;

    if (!sbl_test_commands_enabled())
        return sbl_err_set(err, SBL_E_CommandNotFound, "no such command: 'configureFailPoint'");
    bson_iter_init(&it, ctx->cmd);
    bson_iter_next(&it);
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field 'configureFailPoint' is the "
                           "wrong type '%s', expected type 'string'",
                           sbl_type_name(bson_iter_type(&it)));
    const char *name = bson_iter_utf8(&it, NULL);
    if (strcmp(name, "sableDelayHeartbeatPing") == 0)
        return ping_delay_fail_point(ctx, err);
    if (bson_iter_init_find(&it, ctx->cmd, "mode") && BSON_ITER_HOLDS_UTF8(&it) &&
        (sbl_cmd_coord_fail_point(name, strcmp(bson_iter_utf8(&it, NULL), "off") != 0) == 0 ||
         sbl_cmd_mig_fail_point(name, strcmp(bson_iter_utf8(&it, NULL), "off") != 0) == 0))
        return 0;
    bool tw = strcmp(name, "onPrimaryTransactionalWrite") == 0;
    bool getmore_fp = strcmp(name, "failGetMoreAfterCursorCheckout") == 0;
    bool repl_fp = strcmp(name, "hangBeforeApplyCommit") == 0 ||
                   strcmp(name, "rsSyncApplyStop") == 0 ||
                   strcmp(name, "hangBeforePrimaryOplogAppend") == 0 ||
                   strcmp(name, "hangBeforePrimaryOplogCommit") == 0 ||
                   strcmp(name, "failBeforePrimaryOplogCommit") == 0;
    if (strcmp(name, "failCommand") != 0 && !tw && !getmore_fp && !repl_fp)
        return sbl_err_set(err, SBL_E_FailPointSetFailed, "%s not found", name);
    if (!bson_iter_init_find(&it, ctx->cmd, "mode"))
        return sbl_err_set(err, SBL_E_BadValue, "When setting a failpoint, you must supply a 'mode'");
    if ((rc = parse_mode(&it, &mode, &n, err)) != 0)
        return rc;
    if (bson_iter_init_find(&it, ctx->cmd, "data")) {
        const uint8_t *d;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it))
            return sbl_err_set(err, SBL_E_TypeMismatch, "the 'data' option must be a JSON object");
        bson_iter_document(&it, &len, &d);
        if (!bson_init_static(&data_view, d, len))
            return sbl_err_set(err, SBL_E_InvalidBSON, "invalid 'data' document");
        data_in = &data_view;
    }
    bson_t *copy = mode != MODE_OFF ? (data_in != NULL ? bson_copy(data_in) : bson_new()) : NULL;
    if (copy != NULL && getmore_fp) /* shares failCommand's slot, for getMore only */
        getmore_data(copy);

    pthread_mutex_lock(&fp_mu);
    int64_t before = fp_entered;
    if (repl_fp) {
        int64_t max_ms = 60000;
        if (copy != NULL && bson_iter_init_find(&it, copy, "maxMS") &&
            BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) > 0)
            max_ms = bson_iter_as_int64(&it);
        const char *ns = copy != NULL && bson_iter_init_find(&it, copy, "ns") &&
                                 BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : NULL;
        sbl_repl_fail_point(name, mode != MODE_OFF, max_ms, ns);
        if (copy != NULL)
            bson_destroy(copy);
    } else if (tw) {
        if (tw_data != NULL)
            bson_destroy(tw_data);
        tw_data = copy;
        tw_mode = mode;
        tw_n = n;
        atomic_store(&tw_on, mode != MODE_OFF);
    } else {
        if (fp_data != NULL)
            bson_destroy(fp_data);
        fp_data = copy;
        fp_mode = mode;
        fp_n = n;
        update_flag();
    }
    pthread_mutex_unlock(&fp_mu);

    bson_t attr;
    bson_init(&attr);
    BSON_APPEND_UTF8(&attr, "failPointName", name);
    if (data_in != NULL)
        BSON_APPEND_DOCUMENT(&attr, "data", data_in);
    sbl_log(SBL_LOG_WARNING, "CONTROL", 23829, "Set failpoint", &attr);
    bson_destroy(&attr);
    BSON_APPEND_INT64(ctx->reply, "count", before);
    return 0;
}
